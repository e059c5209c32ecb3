// Losses on the cuda backend: softmax cross-entropy, NLL and their
// gradients, with the cpu kernels' semantics (kernels.h). Scores are
// [N, C, D] (D the product of the trailing axes); sample r = n * D + j.
//
// softmax_cross_entropy writes log_prob with one block per sample (the
// log-softmax over C), then the loss is the NLL of log_prob: per sample for
// reduction none, otherwise one block sums the samples' losses and weights
// in f64 in a fixed order. A gradient with a mean reduction first sums the
// weights (one block) into the stream's scratch, which the per-element
// kernel then reads. Labels outside [0, C) that are not the ignored value
// are reported through the device error word (thrown by the next
// synchronize) and count as ignored. bf16/fp16 scores are read and reduced
// in f32 a row at a time, and their loss (which may be f32) is the f32
// log-probability at the label, not the rounded 16-bit log_prob: the row
// kernel leaves each row's f32 log-sum-exp in the workspace, where it fits
// (rows <= loss_blocks(rows) * C); otherwise (many rows of few classes) the
// loss kernel recomputes the row's log-sum-exp. f32 scores use no
// workspace.
#include "cuda/common.cuh"

namespace dsrt {

using namespace detail;

namespace {

constexpr int kLossThreads = 256;

// Labels, weights and the ignored value as the kernels see them.
template <typename I> struct Labels {
  const I *labels;
  const void *weights;  // null: weight 1
  DType weights_dtype;
  bool has_ignore;
  int64_t ignore;
  int64_t c;
  DeviceErrorWord *err;
  int32_t kid;

  __device__ int64_t label(int64_t r) const { return static_cast<int64_t>(labels[r]); }
  // The weight of sample r: w[label] (1 without weights), 0 when ignored or
  // out of range (reported).
  __device__ double weight(int64_t r) const {
    const int64_t l = label(r);
    if (has_ignore && l == ignore)
      return 0.0;
    if (l < 0 || l >= c) {
      report_fault(err, DeviceFault::LabelOutOfRange, kid, l, c);
      return 0.0;
    }
    return weights ? static_cast<double>(load_any(weights, weights_dtype, l)) : 1.0;
  }
};

template <typename I>
Labels<I> labels_of(const char *kernel, const Tensor &labels, const Tensor *weights,
                    bool has_ignore_index, int64_t ignore_index, int64_t c) {
  return Labels<I>{labels.as<I>(),
                   weights ? weights->data : nullptr,
                   weights ? weights->dtype : DType::F32,
                   has_ignore_index,
                   ignore_index,
                   c,
                   device_error_word(),
                   kernel_id(kernel)};
}

// Calls f(TypeTag<I>) for the labels' element type (i64 or i32, checked).
template <typename F> void dispatch_labels(const Tensor &labels, F &&f) {
  if (labels.dtype == DType::I64)
    f(TypeTag<int64_t>{});
  else
    f(TypeTag<int32_t>{});
}

// log_prob = log_softmax(scores) over the class axis, one block per sample.
// With lse_out, row r's log-sum-exp (f32) goes to lse_out[r].
template <typename T>
__global__ void log_softmax_rows_kernel(const T *x, T *lp, float *lse_out, int64_t rows,
                                        int64_t c, int64_t d) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = (r / d) * c * d + r % d;
    float m = -INFINITY;
    for (int64_t k = threadIdx.x; k < c; k += blockDim.x)
      m = fmaxf(m, ld(x[base + k * d]));
    m = block_max(m, shared);
    float sum = 0.0f;
    for (int64_t k = threadIdx.x; k < c; k += blockDim.x)
      sum += expf(ld(x[base + k * d]) - m);
    sum = block_sum(sum, shared);
    const float lse = m + logf(sum);
    if (lse_out && threadIdx.x == 0)
      lse_out[r] = lse;
    for (int64_t k = threadIdx.x; k < c; k += blockDim.x)
      lp[base + k * d] = st<T>(ld(x[base + k * d]) - lse);
    __syncthreads();
  }
}

// The scores of 16-bit softmax_cross_entropy, whose loss is taken from
// the f32 log-probabilities: x null for f32 scores and for nll_loss; lse
// the rows' log-sum-exps, or null to recompute them.
template <typename T> struct F32Rows {
  const T *x = nullptr;
  const float *lse = nullptr;
};

// The loss of sample r from log_prob: -w * log_prob[label] (in f32 from the
// scores when f32.x is set).
template <typename T, typename I>
__device__ inline double sample_loss(const T *lp, const Labels<I> &lb, int64_t r, int64_t d,
                                     const F32Rows<T> &f32, double &w) {
  w = lb.weight(r);
  if (w == 0.0)
    return 0.0;
  const int64_t n = r / d, j = r % d, at = (n * lb.c + lb.label(r)) * d + j;
  if (!f32.x)
    return -w * static_cast<double>(ld(lp[at]));
  float lse;
  if (f32.lse) {
    lse = f32.lse[r];
  } else {
    const T *row = f32.x + n * lb.c * d + j;
    float m = -INFINITY, sum = 0.0f;
    for (int64_t k = 0; k < lb.c; ++k)
      m = fmaxf(m, ld(row[k * d]));
    for (int64_t k = 0; k < lb.c; ++k)
      sum += expf(ld(row[k * d]) - m);
    lse = m + logf(sum);
  }
  return -w * static_cast<double>(ld(f32.x[at]) - lse);
}

template <typename T, typename I>
__global__ void nll_per_sample_kernel(const T *lp, Labels<I> lb, F32Rows<T> f32, void *loss,
                                      DType loss_dtype, int64_t rows, int64_t d) {
  DSRT_GRID_STRIDE(r, rows) {
    double w;
    store_any(loss, loss_dtype, r, static_cast<float>(sample_loss(lp, lb, r, d, f32, w)));
  }
}

// One block: the sum (or weighted mean) of every sample's loss, in f64.
template <typename T, typename I>
__global__ void nll_total_kernel(const T *lp, Labels<I> lb, F32Rows<T> f32, void *loss,
                                 DType loss_dtype, int64_t rows, int64_t d, bool mean) {
  __shared__ double shared[32];
  double total = 0.0, weight_total = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    double w;
    total += sample_loss(lp, lb, r, d, f32, w);
    weight_total += w;
  }
  total = block_sum(total, shared);
  weight_total = block_sum(weight_total, shared);
  // A mean over no counted sample is 0 / 0 = NaN, as in ONNX and PyTorch.
  if (threadIdx.x == 0)
    store_any(loss, loss_dtype, 0, static_cast<float>(mean ? total / weight_total : total));
}

template <typename T, typename I>
void nll_forward(cudaStream_t stream, const Tensor &log_prob, const Labels<I> &lb,
                 const F32Rows<T> &f32, const Tensor &loss, const LossShape &ls,
                 Reduction reduction) {
  const int64_t rows = ls.n * ls.d;
  if (reduction == Reduction::None) {
    if (rows > 0)
      nll_per_sample_kernel<T, I><<<blocks_for(rows), kThreads, 0, stream>>>(
          log_prob.as<T>(), lb, f32, loss.data, loss.dtype, rows, ls.d);
  } else {
    nll_total_kernel<T, I><<<1, 1024, 0, stream>>>(log_prob.as<T>(), lb, f32, loss.data,
                                                    loss.dtype, rows, ls.d,
                                                    reduction == Reduction::Mean);
  }
}

}  // namespace

void softmax_cross_entropy(Stream &s, const Tensor &scores, const Tensor &labels,
                           const Tensor *weights, const Tensor &loss, const Tensor &log_prob,
                           Reduction reduction, bool has_ignore_index, int64_t ignore_index,
                           const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "softmax_cross_entropy";
  LossShape ls = check_loss_shapes(kernel, scores, labels, weights, loss, reduction, "scores",
                                   "loss");
  check_data(kernel, "log_prob", log_prob);
  check_same_dtype(kernel, "scores", scores, "log_prob", log_prob);
  check_shape(kernel, "log_prob", log_prob, scores.shape);
  WorkspaceFloats scratch(kernel, ws,
                          softmax_cross_entropy_workspace_bytes(scores.dtype, scores.shape));
  const int64_t rows = ls.n * ls.d;
  dispatch_float(kernel, scores.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    F32Rows<T> f32;
    if (!std::is_same_v<T, float> && rows > 0 && ls.c > 0) {
      f32.x = scores.as<T>();
      if (rows <= loss_blocks(rows) * ls.c)
        f32.lse = scratch.take(rows);
    }
    if (rows > 0 && ls.c > 0)
      log_softmax_rows_kernel<T><<<static_cast<unsigned>(std::min<int64_t>(rows, 65535 * 32)),
                                   kLossThreads, 0, stream>>>(
          scores.as<T>(), log_prob.as<T>(), const_cast<float *>(f32.lse), rows, ls.c, ls.d);
    dispatch_labels(labels, [&](auto itag) {
      using I = typename decltype(itag)::type;
      nll_forward<T, I>(stream, log_prob,
                        labels_of<I>(kernel, labels, weights, has_ignore_index, ignore_index, ls.c),
                        f32, loss, ls, reduction);
    });
  });
  check_launch(kernel);
}

void nll_loss(Stream &s, const Tensor &log_prob, const Tensor &labels, const Tensor *weights,
              const Tensor &loss, Reduction reduction, bool has_ignore_index,
              int64_t ignore_index) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "nll_loss";
  LossShape ls = check_loss_shapes(kernel, log_prob, labels, weights, loss, reduction, "log_prob",
                                   "loss");
  dispatch_float(kernel, log_prob.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_labels(labels, [&](auto itag) {
      using I = typename decltype(itag)::type;
      nll_forward<T, I>(stream, log_prob,
                        labels_of<I>(kernel, labels, weights, has_ignore_index, ignore_index, ls.c),
                        F32Rows<T>{}, loss, ls, reduction);
    });
  });
  check_launch(kernel);
}

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

namespace {

// One block: the summed weights of a mean reduction, into *divisor.
template <typename I>
__global__ void weight_total_kernel(Labels<I> lb, int64_t rows, double *divisor) {
  __shared__ double shared[32];
  double total = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    total += lb.weight(r);
  total = block_sum(total, shared);
  if (threadIdx.x == 0)
    *divisor = total;
}

// The gradient coefficient of sample r: dloss (per sample, or the scalar)
// times its weight over the divisor (1 unless a mean); 0 when ignored.
template <typename I>
__device__ inline float coefficient(const Labels<I> &lb, const void *dloss, DType dloss_dtype,
                                    bool per_sample, const double *divisor, int64_t r) {
  const int64_t l = lb.label(r);
  if (lb.has_ignore && l == lb.ignore)
    return 0.0f;
  const double dl = load_any(dloss, dloss_dtype, per_sample ? r : 0);
  return static_cast<float>(dl * lb.weight(r) / (divisor ? *divisor : 1.0));
}

// dscores = coef * (exp(log_prob) - onehot(label)), one thread per element.
template <typename T, typename I>
__global__ void softmax_cross_entropy_grad_kernel(const void *dloss, DType dloss_dtype,
                                                  const T *lp, Labels<I> lb, T *dscores,
                                                  int64_t total, int64_t d, bool per_sample,
                                                  const double *divisor) {
  DSRT_GRID_STRIDE(e, total) {
    const int64_t j = e % d, k = (e / d) % lb.c, n = e / (d * lb.c), r = n * d + j;
    const float hot = lb.label(r) == k ? 1.0f : 0.0f;
    dscores[e] = st<T>(coefficient(lb, dloss, dloss_dtype, per_sample, divisor, r) *
                       (expf(ld(lp[e])) - hot));
  }
}

// dlog_prob = -coef at each counted label, 0 elsewhere.
template <typename T, typename I>
__global__ void nll_loss_grad_kernel(const void *dloss, DType dloss_dtype, Labels<I> lb, T *dlp,
                                     int64_t total, int64_t d, bool per_sample,
                                     const double *divisor) {
  DSRT_GRID_STRIDE(e, total) {
    const int64_t j = e % d, k = (e / d) % lb.c, n = e / (d * lb.c), r = n * d + j;
    // A label outside [0, C) matches no k: the sample's first element
    // reports it (weight does) so that the next synchronize throws.
    if (k == 0)
      lb.weight(r);
    dlp[e] = st<T>(lb.label(r) == k
                       ? -coefficient(lb, dloss, dloss_dtype, per_sample, divisor, r)
                       : 0.0f);
  }
}

// Runs launch(labels, divisor) after summing the weights for a mean.
template <typename I, typename F>
void with_divisor(Stream &s, cudaStream_t stream, const Labels<I> &lb, int64_t rows,
                  Reduction reduction, F &&launch) {
  double *divisor = nullptr;
  if (reduction == Reduction::Mean) {
    divisor = stream_scratch(s);
    weight_total_kernel<I><<<1, 1024, 0, stream>>>(lb, rows, divisor);
  }
  launch(divisor);
}

}  // namespace

void softmax_cross_entropy_grad(Stream &s, const Tensor &dloss, const Tensor &log_prob,
                                const Tensor &labels, const Tensor *weights,
                                const Tensor &dscores, Reduction reduction,
                                bool has_ignore_index, int64_t ignore_index) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "softmax_cross_entropy_grad";
  LossShape ls = check_loss_shapes(kernel, log_prob, labels, weights, dloss, reduction,
                                   "log_prob", "dloss");
  check_data(kernel, "dscores", dscores);
  check_same_dtype(kernel, "log_prob", log_prob, "dscores", dscores);
  check_shape(kernel, "dscores", dscores, log_prob.shape);
  const int64_t total = dscores.numel();
  if (total == 0)
    return;
  dispatch_float(kernel, log_prob.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_labels(labels, [&](auto itag) {
      using I = typename decltype(itag)::type;
      const Labels<I> lb =
          labels_of<I>(kernel, labels, weights, has_ignore_index, ignore_index, ls.c);
      with_divisor(s, stream, lb, ls.n * ls.d, reduction, [&](const double *divisor) {
        softmax_cross_entropy_grad_kernel<T, I><<<blocks_for(total), kThreads, 0, stream>>>(
            dloss.data, dloss.dtype, log_prob.as<T>(), lb, dscores.as<T>(), total, ls.d,
            reduction == Reduction::None, divisor);
      });
    });
  });
  check_launch(kernel);
}

void nll_loss_grad(Stream &s, const Tensor &dloss, const Tensor &labels, const Tensor *weights,
                   const Tensor &dlog_prob, Reduction reduction, bool has_ignore_index,
                   int64_t ignore_index) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "nll_loss_grad";
  LossShape ls = check_loss_shapes(kernel, dlog_prob, labels, weights, dloss, reduction,
                                   "dlog_prob", "dloss");
  const int64_t total = dlog_prob.numel();
  if (total == 0)
    return;
  dispatch_float(kernel, dlog_prob.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_labels(labels, [&](auto itag) {
      using I = typename decltype(itag)::type;
      const Labels<I> lb =
          labels_of<I>(kernel, labels, weights, has_ignore_index, ignore_index, ls.c);
      with_divisor(s, stream, lb, ls.n * ls.d, reduction, [&](const double *divisor) {
        nll_loss_grad_kernel<T, I><<<blocks_for(total), kThreads, 0, stream>>>(
            dloss.data, dloss.dtype, lb, dlog_prob.as<T>(), total, ls.d,
            reduction == Reduction::None,
            divisor);
      });
    });
  });
  check_launch(kernel);
}

}  // namespace dsrt
