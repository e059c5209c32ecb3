// Losses: softmax cross-entropy (with its log-probabilities) and negative
// log-likelihood, ONNX semantics, and their gradients. bf16/fp16 scores are
// read a row at a time into f32; their loss may be f32 (ds-precision keeps
// it so) and the gradient reads an f32 or 16-bit loss gradient. Labels are checked
// before anything is written; per-sample losses are reduced in f64 in a
// fixed order, so the result does not depend on the thread count. Per-sample
// weights are recomputed from the labels; only softmax cross-entropy over
// rows that are not contiguous f32 takes a workspace (one f32 row per block).
#include "internal.h"

#include <limits>

namespace dsrt {

using namespace detail;

namespace {


// Checks the operands of a loss or of its gradient: `scores` (named
// scores_name) is [N, C, d...], `loss` (named loss_name; the loss or its
// gradient) a scalar or [N, d...] by reduction, and every label a class or
// the ignored value.
LossShape check_loss(const char *kernel, const Tensor &scores, const Tensor &labels,
                     const Tensor *weights, const Tensor &loss, Reduction reduction,
                     bool has_ignore_index, int64_t ignore_index,
                     const char *scores_name = "scores", const char *loss_name = "loss") {
  LossShape ls = check_loss_shapes(kernel, scores, labels, weights, loss, reduction, scores_name,
                                   loss_name);
  // Every label is a class index or the ignored value.
  for (int64_t i = 0, count = labels.numel(); i < count; ++i) {
    int64_t label = index_at(labels, i);
    if (has_ignore_index && label == ignore_index)
      continue;
    if (label < 0 || label >= ls.c)
      fail(kernel, "label " + std::to_string(label) + " (labels element " + std::to_string(i) +
                       ") is outside [0, " + std::to_string(ls.c) + ")" +
                       (has_ignore_index
                            ? " and is not the ignore_index " + std::to_string(ignore_index)
                            : std::string()));
  }
  return ls;
}

// Weight of sample r: w[label], 1 without weights, 0 when ignored;
// recomputed from the labels wherever it is needed rather than stored.
inline double sample_weight(const Tensor &labels, const Tensor *weights, int64_t r,
                            bool has_ignore_index, int64_t ignore_index) {
  int64_t label = index_at(labels, r);
  if (has_ignore_index && label == ignore_index)
    return 0.0;
  if (!weights)
    return 1.0;
  float w = 0.0f;
  dispatch_float("loss", weights->dtype,
                 [&](auto tag) { w = to_float(weights->as<typename decltype(tag)::type>()[label]); });
  return w;
}

// Writes `value` into element i of `loss`, in its type (the scores' type,
// or f32 for 16-bit scores).
inline void store_loss(const Tensor &loss, int64_t i, double value) {
  dispatch_float("loss", loss.dtype, [&](auto tag) {
    using L = typename decltype(tag)::type;
    loss.as<L>()[i] = from_float<L>(static_cast<float>(value));
  });
}

// Writes a sum or mean of per-sample losses into the scalar `loss`.
void write_total(const Tensor &loss, double total, double weight_total, Reduction reduction) {
  // A mean over no counted sample is 0 / 0 = NaN, as in ONNX and PyTorch.
  store_loss(loss, 0, reduction == Reduction::Mean ? total / weight_total : total);
}

// Gradient coefficient of each sample: dloss (per sample, or the scalar)
// times its class weight, over the summed weights for a mean; 0 for an
// ignored label. A mean over no counted sample stays 0 / 0 = NaN for counted
// samples of weight 0, as in PyTorch, but ignored samples get exactly 0.
// Computed per sample from the labels, with no per-sample storage.
struct Coefficients {
  const Tensor &labels, *weights, &dloss;
  Reduction reduction;
  bool has_ignore_index;
  int64_t ignore_index;
  double divisor = 1.0;

  Coefficients(const LossShape &ls, const Tensor &labels, const Tensor *weights,
               const Tensor &dloss, Reduction reduction, bool has_ignore_index,
               int64_t ignore_index)
      : labels(labels), weights(weights), dloss(dloss), reduction(reduction),
        has_ignore_index(has_ignore_index), ignore_index(ignore_index) {
    if (reduction == Reduction::Mean) {
      divisor = 0.0;
      for (int64_t r = 0, rows = ls.n * ls.d; r < rows; ++r)
        divisor += sample_weight(labels, weights, r, has_ignore_index, ignore_index);
    }
  }
  float operator()(int64_t r) const {
    if (has_ignore_index && index_at(labels, r) == ignore_index)
      return 0.0f;
    float dl = 0.0f;
    const int64_t at = reduction == Reduction::None ? r : 0;
    dispatch_float("loss", dloss.dtype,
                   [&](auto tag) { dl = to_float(dloss.as<typename decltype(tag)::type>()[at]); });
    const double w = sample_weight(labels, weights, r, has_ignore_index, ignore_index);
    return static_cast<float>(static_cast<double>(dl) * w / divisor);
  }
};

}  // namespace


namespace {

// Softmax cross-entropy over the rows of `scores`, writing their
// log-probabilities into log_prob and/or, with coef, the scores' gradient
// coef(r) * (softmax - onehot(label)) into dscores. ws_bytes is the
// workspace's size as its kernel declares it.
void cross_entropy_rows(Stream &s, const char *kernel, const Tensor &scores,
                        const Tensor &labels, const Tensor *weights, const Tensor &loss,
                        const Tensor *log_prob, const Tensor *dscores, const Coefficients *coef,
                        const LossShape &ls, Reduction reduction, bool has_ignore_index,
                        int64_t ignore_index, const Workspace &ws, int64_t ws_bytes) {
  const int64_t rows = ls.n * ls.d, c = ls.c, d = ls.d;
  const int64_t blocks = loss_blocks(rows);
  WorkspaceFloats scratch(kernel, ws, ws_bytes);
  // Block blk converts its rows to f32 in rows_f32 + blk * c.
  const bool in_place =
      scores.dtype == DType::F32 && d == 1;  // f32 rows with unit stride are read in place
  float *rows_f32 = !in_place && ws_bytes > 0 ? scratch.take(blocks * c) : nullptr;
  double block_total[kLossBlocks] = {}, block_weight[kLossBlocks] = {};
  dispatch_float(kernel, scores.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *x = scores.as<T>();
    T *lp = log_prob ? log_prob->as<T>() : nullptr;
    T *dx = dscores ? dscores->as<T>() : nullptr;
    const Tensor *per_sample = reduction == Reduction::None ? &loss : nullptr;
    const int64_t rows_per_block = (rows + blocks - 1) / blocks;
    parallel_for(
        s, blocks, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, c * rows_per_block)),
        [&](int64_t block_begin, int64_t block_end) {
      for (int64_t blk = block_begin; blk < block_end; ++blk) {
        double total = 0.0, weight_total = 0.0;
        for (int64_t r = blk * rows / blocks, r_end = (blk + 1) * rows / blocks; r < r_end;
             ++r) {
          const double w = sample_weight(labels, weights, r, has_ignore_index, ignore_index);
          double sample = 0.0;
          weight_total += w;
          if (c == 0) {
            if (per_sample)
              store_loss(*per_sample, r, 0.0);
            continue;
          }
          const int64_t n = r / d, j = r % d, base = n * c * d + j;
          // Row r of the class axis, as contiguous f32.
          const float *in = nullptr;
          float *row = nullptr;
          if constexpr (std::is_same_v<T, float>) {
            if (d == 1)
              in = x + base;
          }
          if (!std::is_same_v<T, float> || d != 1) {
            row = rows_f32 + blk * c;
            for (int64_t k = 0; k < c; ++k)
              row[k] = to_float(x[base + k * d]);
            in = row;
          }
          float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
          for (int64_t k = 0; k < c; ++k)
            m = std::max(m, in[k]);
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int64_t k = 0; k < c; ++k)
            sum += fast_exp(in[k] - m);
          const float lse = m + std::log(sum);
          // The loss, and the label's score, before dx (which may be x)
          // is written.
          const int64_t label = index_at(labels, r);
          const float x_label = label >= 0 && label < c ? in[label] : 0.0f;
          if (w != 0.0)
            sample = -w * (static_cast<double>(x_label) - static_cast<double>(lse));
          if (lp) {
            if constexpr (std::is_same_v<T, float>) {
              if (d == 1) {
                float *out = lp + base;
#pragma omp simd
                for (int64_t k = 0; k < c; ++k)
                  out[k] = in[k] - lse;
              } else {
                for (int64_t k = 0; k < c; ++k)
                  lp[base + k * d] = in[k] - lse;
              }
            } else {
              for (int64_t k = 0; k < c; ++k)
                lp[base + k * d] = from_float<T>(in[k] - lse);
            }
          }
          if (dx) {
            // As softmax_cross_entropy_grad computes it from an f32 log_prob;
            // dx may be x (f32 rows read in place: each element is read
            // before it is written, the label's saved above).
            const float k_r = (*coef)(r);
            if (d == 1) {
              T *out = dx + base;
#pragma omp simd
              for (int64_t k = 0; k < c; ++k)
                out[k] = from_float<T>(k_r * fast_exp(in[k] - lse));
            } else {
              for (int64_t k = 0; k < c; ++k)
                dx[base + k * d] = from_float<T>(k_r * fast_exp(in[k] - lse));
            }
            // An ignored label may be outside [0, C); its row's
            // coefficient is 0, so the row is 0 already.
            if (label >= 0 && label < c)
              dx[base + label * d] = from_float<T>(k_r * (fast_exp(x_label - lse) - 1.0f));
          }
          total += sample;
          if (per_sample)
            store_loss(*per_sample, r, sample);
        }
        block_total[blk] = total;
        block_weight[blk] = weight_total;
      }
    });
  });
  if (reduction != Reduction::None) {
    double total = 0.0, weight_total = 0.0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      total += block_total[blk];
      weight_total += block_weight[blk];
    }
    write_total(loss, total, weight_total, reduction);
  }
}

}  // namespace

void softmax_cross_entropy(Stream &s, const Tensor &scores, const Tensor &labels,
                           const Tensor *weights, const Tensor &loss, const Tensor &log_prob,
                           Reduction reduction, bool has_ignore_index, int64_t ignore_index,
                           const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = "softmax_cross_entropy";
  LossShape ls = check_loss(kernel, scores, labels, weights, loss, reduction, has_ignore_index,
                            ignore_index);
  check_data(kernel, "log_prob", log_prob);
  check_same_dtype(kernel, "scores", scores, "log_prob", log_prob);
  check_shape(kernel, "log_prob", log_prob, scores.shape);
  cross_entropy_rows(s, kernel, scores, labels, weights, loss, &log_prob, nullptr, nullptr, ls,
                     reduction, has_ignore_index, ignore_index, ws,
                     softmax_cross_entropy_workspace_bytes(scores.dtype, scores.shape));
}

void softmax_cross_entropy_with_grad(Stream &s, const Tensor &scores, const Tensor &labels,
                                     const Tensor &dloss, const Tensor *weights,
                                     const Tensor &loss, const Tensor &dscores,
                                     Reduction reduction, bool has_ignore_index,
                                     int64_t ignore_index, const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = "softmax_cross_entropy_with_grad";
  LossShape ls = check_loss(kernel, scores, labels, weights, loss, reduction, has_ignore_index,
                            ignore_index);
  check_loss_shapes(kernel, scores, labels, weights, dloss, reduction, "scores", "dloss");
  check_data(kernel, "dscores", dscores);
  check_same_dtype(kernel, "scores", scores, "dscores", dscores);
  check_shape(kernel, "dscores", dscores, scores.shape);
  const Coefficients coef(ls, labels, weights, dloss, reduction, has_ignore_index, ignore_index);
  cross_entropy_rows(s, kernel, scores, labels, weights, loss, nullptr, &dscores, &coef, ls,
                     reduction, has_ignore_index, ignore_index, ws,
                     softmax_cross_entropy_with_grad_workspace_bytes(scores.dtype, scores.shape));
}

void nll_loss(Stream &s, const Tensor &log_prob, const Tensor &labels, const Tensor *weights,
              const Tensor &loss, Reduction reduction, bool has_ignore_index,
              int64_t ignore_index) {
  begin_kernel(s);
  const char *kernel = "nll_loss";
  (void)s;
  LossShape ls = check_loss(kernel, log_prob, labels, weights, loss, reduction, has_ignore_index,
                            ignore_index);
  double total = 0.0, weight_total = 0.0;
  dispatch_float(kernel, log_prob.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *lp = log_prob.as<T>();
    const bool per_sample = reduction == Reduction::None;
    for (int64_t r = 0, rows = ls.n * ls.d; r < rows; ++r) {
      const double w = sample_weight(labels, weights, r, has_ignore_index, ignore_index);
      double sample = 0.0;
      if (w != 0.0) {
        const int64_t n = r / ls.d, j = r % ls.d, label = index_at(labels, r);
        sample = -w * static_cast<double>(to_float(lp[(n * ls.c + label) * ls.d + j]));
      }
      total += sample;
      weight_total += w;
      if (per_sample)
        store_loss(loss, r, sample);
    }
  });
  if (reduction != Reduction::None)
    write_total(loss, total, weight_total, reduction);
}

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

void softmax_cross_entropy_grad(Stream &s, const Tensor &dloss, const Tensor &log_prob,
                                const Tensor &labels, const Tensor *weights,
                                const Tensor &dscores, Reduction reduction,
                                bool has_ignore_index, int64_t ignore_index) {
  begin_kernel(s);
  const char *kernel = "softmax_cross_entropy_grad";
  LossShape ls = check_loss(kernel, log_prob, labels, weights, dloss, reduction, has_ignore_index,
                            ignore_index, "log_prob", "dloss");
  check_data(kernel, "dscores", dscores);
  check_same_dtype(kernel, "log_prob", log_prob, "dscores", dscores);
  check_shape(kernel, "dscores", dscores, log_prob.shape);
  const Coefficients coef(ls, labels, weights, dloss, reduction, has_ignore_index, ignore_index);
  const int64_t c = ls.c, d = ls.d;
  if (dscores.numel() == 0)
    return;
  // dscores = coef * (softmax - onehot(label)), softmax = exp(log_prob).
  dispatch_float(kernel, log_prob.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *lp = log_prob.as<T>();
    T *out = dscores.as<T>();
    if (d == 1) {
      parallel_for(s, ls.n, std::max<int64_t>(1, kGrainElementwise / c),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) {
                       const float k = coef(r);
                       const T *in = lp + r * c;
                       T *o = out + r * c;
#pragma omp simd
                       for (int64_t j = 0; j < c; ++j)
                         o[j] = from_float<T>(k * fast_exp(to_float(in[j])));
                       // An ignored label may be outside [0, C); its row's
                       // coefficient is 0, so the row is 0 already.
                       const int64_t label = index_at(labels, r);
                       if (label >= 0 && label < c)
                         o[label] = from_float<T>(k * (fast_exp(to_float(in[label])) - 1.0f));
                     }
                   });
    } else {
      // [N, C, D]: each (n, class) plane is a contiguous run over D.
      parallel_for(s, ls.n * c, std::max<int64_t>(1, kGrainElementwise / d),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t p = begin; p < end; ++p) {
                       const int64_t n = p / c, k = p % c;
                       const T *in = lp + p * d;
                       T *o = out + p * d;
                       for (int64_t j = 0; j < d; ++j) {
                         const float hot = index_at(labels, n * d + j) == k ? 1.0f : 0.0f;
                         o[j] = from_float<T>(coef(n * d + j) * (fast_exp(to_float(in[j])) - hot));
                       }
                     }
                   });
    }
  });
}

void nll_loss_grad(Stream &s, const Tensor &dloss, const Tensor &labels, const Tensor *weights,
                   const Tensor &dlog_prob, Reduction reduction, bool has_ignore_index,
                   int64_t ignore_index) {
  begin_kernel(s);
  const char *kernel = "nll_loss_grad";
  LossShape ls = check_loss(kernel, dlog_prob, labels, weights, dloss, reduction,
                            has_ignore_index, ignore_index, "dlog_prob", "dloss");
  const Coefficients coef(ls, labels, weights, dloss, reduction, has_ignore_index, ignore_index);
  if (dlog_prob.numel() == 0)
    return;
  // -coef at each counted label, 0 elsewhere (zero bytes are 0.0 in every
  // float type).
  char *base = static_cast<char *>(dlog_prob.data);
  parallel_for(s, static_cast<int64_t>(dlog_prob.nbytes()), int64_t(1) << 20,
               [&](int64_t begin, int64_t end) {
                 std::memset(base + begin, 0, static_cast<size_t>(end - begin));
               });
  dispatch_float(kernel, dlog_prob.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T *out = dlog_prob.as<T>();
    for (int64_t r = 0, rows = ls.n * ls.d; r < rows; ++r) {
      const int64_t label = index_at(labels, r);
      if (has_ignore_index && label == ignore_index)
        continue;
      const int64_t n = r / ls.d, j = r % ls.d;
      out[(n * ls.c + label) * ls.d + j] = from_float<T>(-coef(r));
    }
  });
}

}  // namespace dsrt
