// Softmax, log-softmax, layer norm and batch norm, and their gradients.
// Statistics are computed in f32 (batch norm's per-channel sums in f64, as
// they run over N * spatial elements); softmax subtracts the row maximum
// before exponentiating.
#include "internal.h"

#include <limits>
#include <type_traits>

namespace dsrt {

using namespace detail;

namespace {

// Softmax (or log-softmax) of one contiguous f32 row; `in` may equal `out`.
inline void softmax_row(const float *in, float *out, int64_t n, bool log) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i)
    m = std::max(m, in[i]);
  // A NaN anywhere makes the whole row NaN below, as in PyTorch.
  float sum = 0.0f;
  if (log) {
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i)
      sum += fast_exp(in[i] - m);
    const float shift = m + std::log(sum);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      out[i] = in[i] - shift;
  } else {
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) {
      float e = fast_exp(in[i] - m);
      out[i] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      out[i] *= inv;
  }
}

// Softmax over axis 1 of x viewed as [outer, n, inner].
template <typename T>
void softmax_typed(const Stream &s, const T *x, T *y, int64_t outer, int64_t n, int64_t inner,
                   bool log, float *lanes) {
  if (inner == 1) {
    for_each_row_range(s, outer, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)), lanes, n,
                 [&](int64_t begin, int64_t end, float *row) {
                   for (int64_t r = begin; r < end; ++r) {
                     if constexpr (std::is_same_v<T, float>) {
                       softmax_row(x + r * n, y + r * n, n, log);
                     } else {
                       for (int64_t i = 0; i < n; ++i)
                         row[i] = Elem<T>::load(x[r * n + i]);
                       softmax_row(row, row, n, log);
                       for (int64_t i = 0; i < n; ++i)
                         y[r * n + i] = Elem<T>::store(row[i]);
                     }
                   }
                 });
    return;
  }
  // The axis is strided: vectorize across `inner` in chunks, keeping the
  // running max and sum of each column of the chunk.
  constexpr int64_t kChunk = 256;
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  parallel_for(s, outer * chunks, std::max<int64_t>(1, 8192 / (n * std::min(inner, kChunk))),
               [&](int64_t begin, int64_t end) {
                 float m[kChunk], sum[kChunk];
                 for (int64_t t = begin; t < end; ++t) {
                   int64_t o = t / chunks, j0 = (t % chunks) * kChunk;
                   int64_t w = std::min(kChunk, inner - j0);
                   const T *in = x + o * n * inner + j0;
                   T *out = y + o * n * inner + j0;
                   for (int64_t j = 0; j < w; ++j) {
                     m[j] = -std::numeric_limits<float>::infinity();
                     sum[j] = 0.0f;
                   }
                   for (int64_t c = 0; c < n; ++c)
                     for (int64_t j = 0; j < w; ++j)
                       m[j] = std::max(m[j], to_float(in[c * inner + j]));
                   for (int64_t c = 0; c < n; ++c)
                     for (int64_t j = 0; j < w; ++j)
                       sum[j] += fast_exp(to_float(in[c * inner + j]) - m[j]);
                   if (log) {
                     for (int64_t j = 0; j < w; ++j)
                       m[j] += std::log(sum[j]);
                     for (int64_t c = 0; c < n; ++c)
                       for (int64_t j = 0; j < w; ++j)
                         out[c * inner + j] = from_float<T>(to_float(in[c * inner + j]) - m[j]);
                   } else {
                     for (int64_t j = 0; j < w; ++j)
                       sum[j] = 1.0f / sum[j];
                     for (int64_t c = 0; c < n; ++c)
                       for (int64_t j = 0; j < w; ++j)
                         out[c * inner + j] =
                             from_float<T>(fast_exp(to_float(in[c * inner + j]) - m[j]) * sum[j]);
                   }
                 }
               });
}

void softmax_common(const char *kernel, Stream &s, const Tensor &x, const Tensor &y, int axis,
                    bool log, const Workspace &ws) {
  check_softmax(kernel, x, y, axis);
  int64_t outer = 1, inner = 1, n = x.shape.dims[axis];
  for (int d = 0; d < axis; ++d)
    outer *= x.shape.dims[d];
  for (int d = axis + 1; d < x.shape.rank; ++d)
    inner *= x.shape.dims[d];
  const int64_t bytes = softmax_workspace_bytes(x.dtype, x.shape, axis);
  WorkspaceFloats scratch(kernel, ws, bytes);
  if (x.numel() == 0)
    return;
  float *lanes = bytes > 0 ? scratch.take(bytes / 4) : nullptr;
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_typed<T>(s, x.as<T>(), y.as<T>(), outer, n, inner, log, lanes);
  });
}



}  // namespace


void softmax(Stream &s, const Tensor &x, const Tensor &y, int axis, const Workspace &ws) {
  begin_kernel(s);
  softmax_common("softmax", s, x, y, axis, /*log=*/false, ws);
}

void log_softmax(Stream &s, const Tensor &x, const Tensor &y, int axis, const Workspace &ws) {
  begin_kernel(s);
  softmax_common("log_softmax", s, x, y, axis, /*log=*/true, ws);
}

//===----------------------------------------------------------------------===//
// layer_norm
//===----------------------------------------------------------------------===//

namespace {


// Writes `param` broadcast to the normalized shape, as f32, to `out`.
void expand_param(const char *kernel, const Tensor &param, const Shape &normalized, float *out) {
  BroadcastPlan plan;
  plan_broadcast(normalized, &param.shape, 1, plan);
  const int64_t stride = plan.strides[0][plan.rank - 1];
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *p = param.as<T>();
    for_each_row(plan, 0, normalized.numel(), [&](int64_t o, const int64_t *off, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        out[o + i] = Elem<T>::load(p[off[0] + i * stride]);
    });
  });
}


}  // namespace


void layer_norm(Stream &s, const Tensor &x, const Tensor &scale, const Tensor *bias,
                const Tensor &y, const Tensor &mean, const Tensor &inv_std_dev, int axis,
                float epsilon, const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = "layer_norm";
  const NormRows nr = check_layer_norm(kernel, x, scale, bias, y, mean, inv_std_dev, axis);
  const Shape &normalized = nr.normalized;
  const bool expand_g = nr.expand_scale, expand_b = nr.expand_bias;
  const int64_t rows = nr.rows, n = nr.n;
  WorkspaceFloats scratch(
      kernel, ws,
      layer_norm_workspace_bytes(x.dtype, x.shape, scale.shape, bias ? &bias->shape : nullptr,
                                 axis));
  if (rows == 0)
    return;
  // scale and bias with the normalized shape are read in place (16-bit
  // elements converted where they are used); a broadcast one is expanded to
  // f32 in the workspace first.
  float *lanes = is_16bit(x.dtype) ? scratch.take(row_lanes(rows) * n) : nullptr;
  float *g_full = expand_g ? scratch.take(n) : nullptr;
  float *b_full = expand_b ? scratch.take(n) : nullptr;
  if (g_full)
    expand_param(kernel, scale, normalized, g_full);
  if (b_full)
    expand_param(kernel, *bias, normalized, b_full);
  float *mean_out = mean.as<float>(), *inv_out = inv_std_dev.as<float>();
  const float inv_n = n > 0 ? 1.0f / static_cast<float>(n) : 0.0f;
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = x.as<T>();
    T *py = y.as<T>();
    // pg and pb point to T (in place) or float (expanded); pb is null
    // without a bias.
    auto normalize = [&](const auto *pg, const auto *pb) {
      using G = std::remove_cv_t<std::remove_pointer_t<decltype(pg)>>;
      using B = std::remove_cv_t<std::remove_pointer_t<decltype(pb)>>;
      for_each_row_range(
          s, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)), lanes, n,
          [&](int64_t begin, int64_t end, float *row) {
            for (int64_t r = begin; r < end; ++r) {
              const float *in;
              float *out;
              if constexpr (std::is_same_v<T, float>) {
                in = px + r * n;
                out = py + r * n;
              } else {
                for (int64_t i = 0; i < n; ++i)
                  row[i] = Elem<T>::load(px[r * n + i]);
                in = out = row;
              }
              // Two passes: the mean, then the centred sum of squares.
              // The mean is summed in f64 and kept as a float pair
              // (mu + mu_lo), so a large common offset does not cost
              // the centred values their precision.
              double sum = 0.0;
#pragma omp simd reduction(+ : sum)
              for (int64_t i = 0; i < n; ++i)
                sum += in[i];
              const double mean_d = sum / static_cast<double>(n);
              const float mu = static_cast<float>(mean_d);
              const float mu_lo = static_cast<float>(mean_d - mu);
              float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
              for (int64_t i = 0; i < n; ++i) {
                float d = (in[i] - mu) - mu_lo;
                sq += d * d;
              }
              const float inv = 1.0f / std::sqrt(sq * inv_n + epsilon);
              if (pb) {
#pragma omp simd
                for (int64_t i = 0; i < n; ++i)
                  out[i] = ((in[i] - mu) - mu_lo) * inv * Elem<G>::load(pg[i]) +
                           Elem<B>::load(pb[i]);
              } else {
#pragma omp simd
                for (int64_t i = 0; i < n; ++i)
                  out[i] = ((in[i] - mu) - mu_lo) * inv * Elem<G>::load(pg[i]) + 0.0f;
              }
              if constexpr (!std::is_same_v<T, float>)
                for (int64_t i = 0; i < n; ++i)
                  py[r * n + i] = Elem<T>::store(out[i]);
              mean_out[r] = mu;
              inv_out[r] = inv;
            }
          });
    };
    const T *sg = scale.as<T>(), *sb = bias ? bias->as<T>() : nullptr;
    if (g_full && b_full)
      normalize(static_cast<const float *>(g_full), static_cast<const float *>(b_full));
    else if (g_full)
      normalize(static_cast<const float *>(g_full), sb);
    else if (b_full)
      normalize(sg, static_cast<const float *>(b_full));
    else
      normalize(sg, sb);
  });
}

//===----------------------------------------------------------------------===//
// batch_norm, batch_norm_train
//===----------------------------------------------------------------------===//

namespace {




// Element i of a per-channel float tensor (checked float already), as f32,
// and the inverse: the channels' parameters and statistics are read and
// written where they are used, with no f32 copy of them.
float channel_load(const Tensor &t, int64_t i) {
  float v = 0.0f;
  dispatch_float("batch_norm", t.dtype,
                 [&](auto tag) { v = to_float(t.as<typename decltype(tag)::type>()[i]); });
  return v;
}
void channel_store(const Tensor &t, int64_t i, float v) {
  dispatch_float("batch_norm", t.dtype, [&](auto tag) {
    using U = typename decltype(tag)::type;
    t.as<U>()[i] = from_float<U>(v);
  });
}

// y = (x - mean_c) * a_c + bias_c over [N, C, spatial]; `coefficients(c)`
// gives (mean_c, a_c, bias_c).
template <typename T, typename F>
void normalize_channels(const Stream &s, const Channels &ch, const T *x, T *y,
                        F &&coefficients) {
  parallel_for(s, ch.n * ch.c, std::max<int64_t>(1, kGrainElementwise / ch.spatial),
               [&](int64_t begin, int64_t end) {
                 for (int64_t p = begin; p < end; ++p) {
                   int64_t c = p % ch.c;
                   float mu, k, b;
                   coefficients(c, mu, k, b);
                   const T *in = x + p * ch.spatial;
                   T *out = y + p * ch.spatial;
                   for (int64_t i = 0; i < ch.spatial; ++i)
                     out[i] = from_float<T>((to_float(in[i]) - mu) * k + b);
                 }
               });
}

}  // namespace

void batch_norm(Stream &s, const Tensor &x, const Tensor &scale, const Tensor &bias,
                const Tensor &mean, const Tensor &var, const Tensor &y, float epsilon) {
  begin_kernel(s);
  const char *kernel = "batch_norm";
  Channels ch = check_batch_norm(kernel, x, scale, bias, mean, var, y);
  if (x.numel() == 0)
    return;
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    normalize_channels<T>(s, ch, x.as<T>(), y.as<T>(), [&](int64_t c, float &mu, float &k,
                                                          float &b) {
      mu = channel_load(mean, c);
      k = channel_load(scale, c) / std::sqrt(channel_load(var, c) + epsilon);
      b = channel_load(bias, c);
    });
  });
}

void batch_norm_train(Stream &s, const Tensor &x, const Tensor &scale, const Tensor &bias,
                      const Tensor &running_mean, const Tensor &running_var, const Tensor &y,
                      const Tensor &running_mean_out, const Tensor &running_var_out,
                      const Tensor &saved_mean, const Tensor &saved_inv_std, float epsilon,
                      float momentum, bool unbiased_running_var) {
  begin_kernel(s);
  const char *kernel = "batch_norm_train";
  Channels ch = check_batch_norm_train(kernel, x, scale, bias, running_mean, running_var, y,
                                       running_mean_out, running_var_out, saved_mean,
                                       saved_inv_std);
  const int64_t count = ch.n * ch.spatial;
  const float var_factor = running_var_factor(count, unbiased_running_var);
  // The batch mean goes straight to saved_mean, the inverse standard
  // deviation to saved_inv_std, the running statistics to their outputs.
  float *mu = saved_mean.as<float>(), *inv = saved_inv_std.as<float>();
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = x.as<T>();
    // Per channel: mean, then the biased variance, both in f64.
    parallel_for(s, ch.c, std::max<int64_t>(1, kGrainElementwise / count),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t c = begin; c < end; ++c) {
                     double sum = 0.0;
                     for (int64_t b = 0; b < ch.n; ++b) {
                       const T *in = px + (b * ch.c + c) * ch.spatial;
                       for (int64_t i = 0; i < ch.spatial; ++i)
                         sum += to_float(in[i]);
                     }
                     const double m = sum / static_cast<double>(count);
                     double sq = 0.0;
                     for (int64_t b = 0; b < ch.n; ++b) {
                       const T *in = px + (b * ch.c + c) * ch.spatial;
                       for (int64_t i = 0; i < ch.spatial; ++i) {
                         double d = to_float(in[i]) - m;
                         sq += d * d;
                       }
                     }
                     const float mean_c = static_cast<float>(m);
                     const float var_c = static_cast<float>(sq / static_cast<double>(count));
                     mu[c] = mean_c;
                     inv[c] = 1.0f / std::sqrt(var_c + epsilon);
                     // Each channel's running statistics are read before
                     // they are written (the outputs may be the inputs).
                     const float rm = channel_load(running_mean, c),
                                 rv = channel_load(running_var, c);
                     channel_store(running_mean_out, c, rm * momentum + mean_c * (1.0f - momentum));
                     channel_store(running_var_out, c,
                                   rv * momentum + var_c * var_factor * (1.0f - momentum));
                   }
                 });
  });
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    normalize_channels<T>(s, ch, x.as<T>(), y.as<T>(), [&](int64_t c, float &m, float &k,
                                                          float &b) {
      m = mu[c];
      k = channel_load(scale, c) * inv[c];
      b = channel_load(bias, c);
    });
  });
}

//===----------------------------------------------------------------------===//
// softmax_grad, log_softmax_grad
//===----------------------------------------------------------------------===//

namespace {

// Gradient of one contiguous f32 row: softmax dx = y (dy - sum(dy y)),
// log-softmax dx = dy - exp(y) sum(dy).
inline void softmax_grad_row(const float *y, const float *dy, float *dx, int64_t n, bool log) {
  float sum = 0.0f;
  if (log) {
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i)
      sum += dy[i];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      dx[i] = dy[i] - fast_exp(y[i]) * sum;
  } else {
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i)
      sum += dy[i] * y[i];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      dx[i] = y[i] * (dy[i] - sum);
  }
}

// Over axis 1 of [outer, n, inner], like softmax_typed.
template <typename T>
void softmax_grad_typed(const Stream &s, const T *y, const T *dy, T *dx, int64_t outer, int64_t n,
                        int64_t inner, bool log, float *lanes) {
  if (inner == 1) {
    for_each_row_range(s, outer, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)), lanes,
                 2 * n, [&](int64_t begin, int64_t end, float *buffer) {
                   for (int64_t r = begin; r < end; ++r) {
                     if constexpr (std::is_same_v<T, float>) {
                       softmax_grad_row(y + r * n, dy + r * n, dx + r * n, n, log);
                     } else {
                       float *yr = buffer, *gr = buffer + n;
                       for (int64_t i = 0; i < n; ++i) {
                         yr[i] = Elem<T>::load(y[r * n + i]);
                         gr[i] = Elem<T>::load(dy[r * n + i]);
                       }
                       softmax_grad_row(yr, gr, gr, n, log);
                       for (int64_t i = 0; i < n; ++i)
                         dx[r * n + i] = Elem<T>::store(gr[i]);
                     }
                   }
                 });
    return;
  }
  // Strided axis: per-column sums over a chunk of `inner`, as in softmax.
  constexpr int64_t kChunk = 256;
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  parallel_for(s, outer * chunks, std::max<int64_t>(1, 8192 / (n * std::min(inner, kChunk))),
               [&](int64_t begin, int64_t end) {
                 float sum[kChunk];
                 for (int64_t t = begin; t < end; ++t) {
                   int64_t o = t / chunks, j0 = (t % chunks) * kChunk;
                   int64_t w = std::min(kChunk, inner - j0);
                   const int64_t base = o * n * inner + j0;
                   for (int64_t j = 0; j < w; ++j)
                     sum[j] = 0.0f;
                   for (int64_t c = 0; c < n; ++c)
                     for (int64_t j = 0; j < w; ++j) {
                       const int64_t i = base + c * inner + j;
                       sum[j] += log ? to_float(dy[i]) : to_float(dy[i]) * to_float(y[i]);
                     }
                   for (int64_t c = 0; c < n; ++c)
                     for (int64_t j = 0; j < w; ++j) {
                       const int64_t i = base + c * inner + j;
                       const float yv = to_float(y[i]), g = to_float(dy[i]);
                       dx[i] = from_float<T>(log ? g - fast_exp(yv) * sum[j] : yv * (g - sum[j]));
                     }
                 }
               });
}

void softmax_grad_common(const char *kernel, Stream &s, const Tensor &y, const Tensor &dy,
                         const Tensor &dx, int axis, bool log, const Workspace &ws) {
  check_softmax_grad(kernel, y, dy, dx, axis);
  int64_t outer = 1, inner = 1, n = y.shape.dims[axis];
  for (int d = 0; d < axis; ++d)
    outer *= y.shape.dims[d];
  for (int d = axis + 1; d < y.shape.rank; ++d)
    inner *= y.shape.dims[d];
  const int64_t bytes = softmax_grad_workspace_bytes(y.dtype, y.shape, axis);
  WorkspaceFloats scratch(kernel, ws, bytes);
  if (y.numel() == 0)
    return;
  float *lanes = bytes > 0 ? scratch.take(bytes / 4) : nullptr;
  dispatch_float(kernel, y.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_grad_typed<T>(s, y.as<T>(), dy.as<T>(), dx.as<T>(), outer, n, inner, log, lanes);
  });
}

}  // namespace


void softmax_grad(Stream &s, const Tensor &y, const Tensor &dy, const Tensor &dx, int axis,
                  const Workspace &ws) {
  begin_kernel(s);
  softmax_grad_common("softmax_grad", s, y, dy, dx, axis, /*log=*/false, ws);
}

void log_softmax_grad(Stream &s, const Tensor &y, const Tensor &dy, const Tensor &dx, int axis,
                      const Workspace &ws) {
  begin_kernel(s);
  softmax_grad_common("log_softmax_grad", s, y, dy, dx, axis, /*log=*/true, ws);
}

//===----------------------------------------------------------------------===//
// layer_norm_grad
//===----------------------------------------------------------------------===//

namespace {

// Sums a gradient over the normalized shape (f64, one value per normalized
// element; null when there is none) into `out`, a parameter shape that
// broadcasts to it, accumulating in `acc` (out.numel() doubles; null when
// `full` is).
void reduce_to_param(const char *kernel, const char *name, const Tensor &out,
                     const Shape &normalized, const double *full, double *acc) {
  BroadcastPlan plan;
  plan_broadcast(normalized, &out.shape, 1, plan);
  const int64_t count = out.numel();
  if (full) {
    std::fill(acc, acc + count, 0.0);
    const int64_t stride = plan.strides[0][plan.rank - 1];
    for_each_row(plan, 0, normalized.numel(), [&](int64_t o, const int64_t *off, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        acc[off[0] + i * stride] += full[o + i];
    });
  }
  dispatch_float(kernel, out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T *p = out.as<T>();
    for (int64_t i = 0; i < count; ++i)
      p[i] = Elem<T>::store(full ? static_cast<float>(acc[i]) : 0.0f);
  });
}


// One row of layer_norm_grad in f32: writes dx and adds the row's terms of
// dscale and dbias (per normalized element) to acc_g and acc_b.
//
// The saved mean mu is the f32 rounding of the row mean, and the forward
// normalized with the mean to f64 precision (mu + mu_lo). Using mu alone
// would shift every xhat by up to half an ulp of the mean over the standard
// deviation, which matters when the mean is large against the spread;
// mu_lo = mean(x - mu) is recovered in the same pass as the row sums (x - mu
// is small, so f32 suffices). With dxhat = dy g and xhat = (x - mu - mu_lo) inv:
//   dx = inv (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),
//   sum(dxhat xhat) = inv (sum(dxhat (x - mu)) - mu_lo sum(dxhat)).
// g is the scale in place (G = the element type) or expanded to f32. With
// `add` (may be dx itself: each element is read before it is written),
// dx = add + the row's dx in f32.
template <typename G>
inline void layer_norm_grad_row(const float *x, const float *dy, const G *g, const float *add,
                                float *dx, float *acc_g, float *acc_b, int64_t n, float mu,
                                float inv) {
  const float inv_n = 1.0f / static_cast<float>(n);
  float s0 = 0.0f, a = 0.0f, b0 = 0.0f;
#pragma omp simd reduction(+ : s0, a, b0)
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] - mu, dxh = dy[i] * Elem<G>::load(g[i]);
    s0 += d;
    a += dxh;
    b0 += dxh * d;
  }
  const float mu_lo = s0 * inv_n;
  const float mean_a = a * inv_n, mean_b = (b0 - mu_lo * a) * inv * inv_n;
  // dx (and the parameter terms) for elements [i0, i1), written to out.
  auto grads = [&](int64_t i0, int64_t i1, float *out) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      const float xh = ((x[i] - mu) - mu_lo) * inv, grad = dy[i];
      acc_g[i] += grad * xh;
      acc_b[i] += grad;
      out[i - i0] = inv * (grad * Elem<G>::load(g[i]) - mean_a - xh * mean_b);
    }
  };
  if (!add) {
    grads(0, n, dx);
    return;
  }
  // With the addend: a chunk of dx in f32, then the addend plus it in a
  // loop of its own, so that the sum is rounded on its own (never fused
  // with the product above into one multiply-add): the unfused add's bits.
  constexpr int64_t kChunk = 256;
  float chunk[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t i1 = std::min(n, i0 + kChunk);
    grads(i0, i1, chunk);
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i)
      dx[i] = add[i] + chunk[i - i0];
  }
}

}  // namespace

void layer_norm_grad(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &scale,
                     const Tensor &mean, const Tensor &inv_std_dev, const Tensor &dx,
                     const Tensor &dscale, const Tensor *dbias, int axis, const Workspace &ws) {
  layer_norm_grad_add(s, dy, x, scale, mean, inv_std_dev, nullptr, dx, dscale, dbias, axis, ws);
}

void layer_norm_grad_add(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &scale,
                         const Tensor &mean, const Tensor &inv_std_dev, const Tensor *addend,
                         const Tensor &dx, const Tensor &dscale, const Tensor *dbias, int axis,
                         const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = "layer_norm_grad";
  const NormRows nr = check_layer_norm_grad(kernel, dy, x, scale, mean, inv_std_dev, dx, dscale,
                                             dbias, axis);
  check_layer_norm_grad_addend(kernel, addend, x);
  const Shape &normalized = nr.normalized;
  const bool expand_g = nr.expand_scale;
  const int64_t rows = nr.rows, n = nr.n;
  // dscale and dbias sum over the rows. Each block of rows keeps its own
  // partial sums, and the blocks are added in order afterwards: the block
  // size depends on the shape only, so the result is the same for every
  // thread count. f16/bf16 rows are converted to f32 in the block's part of
  // the workspace.
  int64_t blocks = 0, block_rows = 0;
  layer_norm_grad_blocks(rows, n, blocks, block_rows);
  WorkspaceFloats scratch(kernel, ws,
                          layer_norm_grad_workspace_bytes(x.dtype, x.shape, scale.shape, axis));
  if (x.numel() == 0) {
    // No rows (or an empty normalized shape): the parameter gradients are 0.
    reduce_to_param(kernel, "dscale", dscale, normalized, nullptr, nullptr);
    if (dbias)
      reduce_to_param(kernel, "dbias", *dbias, normalized, nullptr, nullptr);
    return;
  }
  double *sum_g = reinterpret_cast<double *>(scratch.take(2 * 3 * n));
  double *sum_b = sum_g + n, *acc = sum_b + n;
  // dscale and dbias partial sums of each block (the blocks' parts of the
  // workspace, so the totals do not depend on the thread count).
  float *part_g = scratch.take(2 * blocks * n);
  float *part_b = part_g + blocks * n;
  const bool rows_in_f32 = is_16bit(x.dtype);
  float *row_sets = rows_in_f32 ? scratch.take(3 * blocks * n) : nullptr;
  // A scale with the normalized shape is read in place; a broadcast one is
  // expanded to f32 in the workspace.
  float *g_full = expand_g ? scratch.take(n) : nullptr;
  if (g_full)
    expand_param(kernel, scale, normalized, g_full);
  const float *mean_in = mean.as<float>(), *inv_in = inv_std_dev.as<float>();
  if (blocks > 0) {
    dispatch_float(kernel, x.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *sg = scale.as<T>();
      const T *px = x.as<T>(), *pdy = dy.as<T>();
      const T *padd = addend ? addend->as<T>() : nullptr;
      T *pdx = dx.as<T>();
      parallel_for(
          s, blocks, std::max<int64_t>(1, 8192 / (block_rows * n)), [&](int64_t b0, int64_t b1) {
            for (int64_t blk = b0; blk < b1; ++blk) {
              float *acc_g = part_g + blk * n, *acc_b = part_b + blk * n;
              std::fill(acc_g, acc_g + n, 0.0f);
              std::fill(acc_b, acc_b + n, 0.0f);
              for (int64_t r = blk * block_rows, r_end = std::min(rows, r + block_rows); r < r_end;
                   ++r) {
                const float *in, *grad, *add = nullptr;
                float *out;
                if constexpr (std::is_same_v<T, float>) {
                  in = px + r * n;
                  grad = pdy + r * n;
                  out = pdx + r * n;
                  add = padd ? padd + r * n : nullptr;
                } else {
                  // A 16-bit addend is read into the dx row, which the row
                  // then adds to and writes over (one rounding at the end).
                  float *xr = row_sets + blk * 3 * n, *gr = xr + n;
                  for (int64_t i = 0; i < n; ++i) {
                    xr[i] = Elem<T>::load(px[r * n + i]);
                    gr[i] = Elem<T>::load(pdy[r * n + i]);
                  }
                  in = xr;
                  grad = gr;
                  out = xr + 2 * n;
                  if (padd) {
                    for (int64_t i = 0; i < n; ++i)
                      out[i] = Elem<T>::load(padd[r * n + i]);
                    add = out;
                  }
                }
                if (g_full)
                  layer_norm_grad_row(in, grad, static_cast<const float *>(g_full), add, out,
                                      acc_g, acc_b, n, mean_in[r], inv_in[r]);
                else
                  layer_norm_grad_row(in, grad, sg, add, out, acc_g, acc_b, n, mean_in[r],
                                      inv_in[r]);
                if constexpr (!std::is_same_v<T, float>)
                  for (int64_t i = 0; i < n; ++i)
                    pdx[r * n + i] = Elem<T>::store(out[i]);
              }
            }
          });
    });
  }
  std::fill(sum_g, sum_g + 2 * n, 0.0);
  for (int64_t blk = 0; blk < blocks; ++blk)
    for (int64_t i = 0; i < n; ++i) {
      sum_g[i] += part_g[blk * n + i];
      sum_b[i] += part_b[blk * n + i];
    }
  reduce_to_param(kernel, "dscale", dscale, normalized, sum_g, acc);
  if (dbias)
    reduce_to_param(kernel, "dbias", *dbias, normalized, sum_b, acc);
}

//===----------------------------------------------------------------------===//
// batch_norm_grad
//===----------------------------------------------------------------------===//

void batch_norm_grad(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &scale,
                     const Tensor &saved_mean, const Tensor &saved_inv_std, const Tensor &dx,
                     const Tensor &dscale, const Tensor &dbias) {
  begin_kernel(s);
  const char *kernel = "batch_norm_grad";
  Channels ch = check_batch_norm_grad(kernel, dy, x, scale, saved_mean, saved_inv_std, dx, dscale,
                                      dbias);
  const int64_t count = ch.n * ch.spatial;
  const float *mu = saved_mean.as<float>(), *inv = saved_inv_std.as<float>();
  // Per channel, in f64 like the forward's statistics: sum(dy) (dbias) and
  // sum(dy * xhat) (dscale); then, from them, the channel's dx =
  // scale * inv * (dy - mean(dy) - xhat * mean(dy * xhat)). A channel's
  // sums are used by its own planes only, so nothing is kept per channel.
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = x.as<T>(), *pdy = dy.as<T>();
    T *pdx = dx.as<T>();
    parallel_for(s, ch.c, std::max<int64_t>(1, kGrainElementwise / std::max<int64_t>(1, count)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t c = begin; c < end; ++c) {
                     const float m = mu[c], k = inv[c];
                     double sd = 0.0, sdx = 0.0;
                     for (int64_t b = 0; b < ch.n; ++b) {
                       const int64_t off = (b * ch.c + c) * ch.spatial;
                       // Vector partial sums: a fixed order, whatever the
                       // thread count.
#pragma omp simd reduction(+ : sd, sdx)
                       for (int64_t i = 0; i < ch.spatial; ++i) {
                         const double gv = to_float(pdy[off + i]);
                         sd += gv;
                         sdx += gv * static_cast<double>((to_float(px[off + i]) - m) * k);
                       }
                     }
                     const float scale_c = channel_load(scale, c) * k;
                     const float m1 =
                         count > 0 ? static_cast<float>(sd / static_cast<double>(count)) : 0.0f;
                     const float m2 =
                         count > 0 ? static_cast<float>(sdx / static_cast<double>(count)) : 0.0f;
                     // dx may be dy or x: each element is read before it is
                     // written, and the sums above are complete.
                     for (int64_t b = 0; b < ch.n; ++b) {
                       const int64_t off = (b * ch.c + c) * ch.spatial;
                       for (int64_t i = 0; i < ch.spatial; ++i) {
                         const float xh = (to_float(px[off + i]) - m) * k;
                         const float grad = to_float(pdy[off + i]);
                         pdx[off + i] = from_float<T>(scale_c * (grad - m1 - xh * m2));
                       }
                     }
                     channel_store(dscale, c, static_cast<float>(sdx));
                     channel_store(dbias, c, static_cast<float>(sd));
                   }
                 });
  });
}

}  // namespace dsrt
