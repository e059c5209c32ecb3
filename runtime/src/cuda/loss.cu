// Losses on the cuda backend: softmax cross-entropy, NLL and their
// gradients, with the cpu kernels' semantics (kernels.h). Scores are
// [N, C, D] (D the product of the trailing axes); sample (row) r = n * D + j
// has its C classes at (n * C + k) * D + j. Every kernel finds a row's first
// element once (one 64-bit division per row, none per element) and walks
// its classes with stride D.
//
// softmax_cross_entropy: one block per row reads the row once for its max
// and exp-sum together (the sum rescaled when the max grows) and once more
// to write log_prob; with reduction none the same block writes the row's
// loss. A sum or mean is then the total of the rows' losses and weights in
// f64 (row_totals): kTotalBlocks blocks each sum a fixed range of rows, and
// the last block to finish adds the blocks' sums in block order, so the
// result does not depend on which block ends first. The blocks' sums pass
// through the stream's scratch, whose counter word every kernel using it
// leaves at 0. A gradient with a mean reduction first totals the weights
// the same way into the scratch; the gradient kernels then compute each
// row's coefficient (dloss times the weight over the divisor, in f64) once
// per row, and each element is an f32 expression of its log_prob: one
// block per row where the classes are contiguous (D = 1), one thread per
// row otherwise (adjacent threads' rows are adjacent in memory).
// softmax_cross_entropy_with_grad keeps a row of contiguous classes in
// shared memory where it fits a block's (cross_entropy_grad_shared_kernel:
// the scores read from HBM once), else reads the row twice.
//
// Labels outside [0, C) that are not the ignored value are reported
// through the device error word (thrown by the next synchronize) and count
// as ignored. bf16/fp16 scores are read and reduced in f32 a row at a
// time, and their loss (which may be f32) is the f32 log-probability at the
// label, not the rounded 16-bit log_prob: the row kernel leaves each row's
// f32 log-sum-exp in the workspace, where it fits (rows <= loss_blocks(rows)
// * C); otherwise (many rows of few classes) the total recomputes the row's
// log-sum-exp. f32 scores use no workspace.
#include "cuda/common.cuh"
#include "cuda/mma.cuh"

#include "dsrt/math.h"

namespace dsrt {

using namespace detail;

namespace {

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

// The stream's scratch as the loss kernels use it: the blocks' partial
// sums (2 doubles each) of row_totals, a mean's divisor, and the counter
// of the blocks that have finished (an unsigned in the last double; 0
// between kernels).
constexpr int kTotalBlocks = 15;
constexpr int kDivisorSlot = 2 * kTotalBlocks;
constexpr int kCounterSlot = kStreamScratchDoubles - 1;
static_assert(kDivisorSlot < kCounterSlot, "the stream scratch holds the loss totals");

// Sums two f64 values of each of `rows` rows over a grid of kTotalBlocks
// blocks: block b takes rows [b * rows / G, (b + 1) * rows / G), its threads
// every blockDim.x-th of them; the last block to finish adds the blocks'
// sums in block order and calls done(a, b) on its thread 0. row(r, a, b)
// sets row r's values.
template <typename Row, typename Done>
__device__ inline void row_totals(int64_t rows, double *scratch, const Row &row,
                                  const Done &done) {
  __shared__ double shared[32];
  __shared__ bool last;
  const int64_t begin = blockIdx.x * rows / gridDim.x;
  const int64_t end = (blockIdx.x + 1) * rows / gridDim.x;
  double a = 0.0, b = 0.0;
  for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x) {
    double ra = 0.0, rb = 0.0;
    row(r, ra, rb);
    a += ra;
    b += rb;
  }
  a = block_sum(a, shared);
  b = block_sum(b, shared);
  unsigned *counter = reinterpret_cast<unsigned *>(scratch + kCounterSlot);
  if (threadIdx.x == 0) {
    scratch[2 * blockIdx.x] = a;
    scratch[2 * blockIdx.x + 1] = b;
    __threadfence();  // the sums are seen before the count
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    __threadfence();
    const volatile double *sums = scratch;
    double total_a = 0.0, total_b = 0.0;
    for (unsigned k = 0; k < gridDim.x; ++k) {
      total_a += sums[2 * k];
      total_b += sums[2 * k + 1];
    }
    *counter = 0;
    done(total_a, total_b);
  }
}

// A row's max and sum of exp(x - max), merged across threads.
struct MaxSum {
  float m = -INFINITY, s = 0.0f;
  __device__ void add(float v) {
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  __device__ void merge(float om, float os) {
    const float nm = fmaxf(m, om);
    s = nm == -INFINITY ? s + os : s * expf(m - nm) + os * expf(om - nm);
    m = nm;
  }
};
// The block's MaxSum; every thread gets it. `shared` holds 64.
__device__ inline MaxSum block_max_sum(MaxSum v, float *shared) {
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, v.m, o);
    const float os = __shfl_xor_sync(0xffffffffu, v.s, o);
    v.merge(om, os);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) {
    shared[warp] = v.m;
    shared[32 + warp] = v.s;
  }
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = MaxSum{};
  if (lane < warps)
    v = MaxSum{shared[lane], shared[32 + lane]};
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, v.m, o);
    const float os = __shfl_xor_sync(0xffffffffu, v.s, o);
    v.merge(om, os);
  }
  return v;
}

// Row r's log-sum-exp from one read of its classes (max and exp-sum
// together), for every thread of the block; thread 0 writes it to
// lse_out[r] (when set) and, with loss (reduction none), row r's loss to
// loss[r].
template <typename T, typename I>
__device__ inline float row_log_sum_exp(const T *x, int64_t base, int64_t d, float *shared,
                                        float *lse_out, const Labels<I> &lb, void *loss,
                                        DType loss_dtype, int64_t r) {
  MaxSum ms;
  for (int64_t k = threadIdx.x; k < lb.c; k += blockDim.x)
    ms.add(ld(x[base + k * d]));
  ms = block_max_sum(ms, shared);
  const float lse = ms.m + logf(ms.s);
  if (threadIdx.x == 0) {
    if (lse_out)
      lse_out[r] = lse;
    if (loss) {
      const double w = lb.weight(r);
      const double sample =
          w == 0.0 ? 0.0 : -w * static_cast<double>(ld(x[base + lb.label(r) * d]) - lse);
      store_any(loss, loss_dtype, r, static_cast<float>(sample));
    }
  }
  return lse;
}

// log_prob = log_softmax(scores) over the class axis, one block per row.
// With lse_out, row r's log-sum-exp (f32) goes to lse_out[r]; with loss
// (reduction none), row r's loss to loss[r].
template <typename T, typename I>
__global__ void log_softmax_rows_kernel(const T *x, T *lp, float *lse_out, Labels<I> lb,
                                        void *loss, DType loss_dtype, int64_t rows, int64_t d) {
  __shared__ float shared[64];
  const int64_t c = lb.c;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = (r / d) * c * d + r % d;
    const float lse = row_log_sum_exp(x, base, d, shared, lse_out, lb, loss, loss_dtype, r);
    for (int64_t k = threadIdx.x; k < c; k += blockDim.x)
      lp[base + k * d] = st<T>(ld(x[base + k * d]) - lse);
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

// The sum (or weighted mean) of every sample's loss, in f64 (row_totals).
template <typename T, typename I>
__global__ void nll_total_kernel(const T *lp, Labels<I> lb, F32Rows<T> f32, void *loss,
                                 DType loss_dtype, int64_t rows, int64_t d, bool mean,
                                 double *scratch) {
  row_totals(
      rows, scratch,
      [&](int64_t r, double &sample, double &w) { sample = sample_loss(lp, lb, r, d, f32, w); },
      // A mean over no counted sample is 0 / 0 = NaN, as in ONNX and PyTorch.
      [&](double total, double weight_total) {
        store_any(loss, loss_dtype, 0,
                  static_cast<float>(mean ? total / weight_total : total));
      });
}

template <typename T, typename I>
void nll_forward(Stream &s, cudaStream_t stream, const Tensor &log_prob, const Labels<I> &lb,
                 const F32Rows<T> &f32, const Tensor &loss, const LossShape &ls,
                 Reduction reduction) {
  const int64_t rows = ls.n * ls.d;
  if (reduction == Reduction::None) {
    if (rows > 0)
      nll_per_sample_kernel<T, I><<<blocks_for(rows), kThreads, 0, stream>>>(
          log_prob.as<T>(), lb, f32, loss.data, loss.dtype, rows, ls.d);
  } else {
    nll_total_kernel<T, I><<<kTotalBlocks, 1024, 0, stream>>>(
        log_prob.as<T>(), lb, f32, loss.data, loss.dtype, rows, ls.d,
        reduction == Reduction::Mean, stream_scratch(s));
  }
}

// Blocks for a loop of one block per row.
inline unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), 65535 * 32));
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
    dispatch_labels(labels, [&](auto itag) {
      using I = typename decltype(itag)::type;
      const Labels<I> lb =
          labels_of<I>(kernel, labels, weights, has_ignore_index, ignore_index, ls.c);
      const bool rows_write_loss = reduction == Reduction::None && ls.c > 0;
      if (rows > 0 && ls.c > 0)
        log_softmax_rows_kernel<T, I><<<row_blocks(rows), kThreads, 0, stream>>>(
            scores.as<T>(), log_prob.as<T>(), const_cast<float *>(f32.lse), lb,
            rows_write_loss ? loss.data : nullptr, loss.dtype, rows, ls.d);
      if (!rows_write_loss)
        nll_forward<T, I>(s, stream, log_prob, lb, f32, loss, ls, reduction);
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
      nll_forward<T, I>(s, stream, log_prob,
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

// The summed weights of a mean reduction (row_totals), into the scratch's
// divisor slot.
template <typename I>
__global__ void weight_total_kernel(Labels<I> lb, int64_t rows, double *scratch) {
  row_totals(
      rows, scratch, [&](int64_t r, double &w, double &) { w = lb.weight(r); },
      [&](double total, double) { scratch[kDivisorSlot] = total; });
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

// softmax_cross_entropy_with_grad: one block per row finds its log-sum-exp
// as log_softmax_rows_kernel does; thread 0 takes the row's loss from the
// scores (into loss[r] for reduction none, else samples[r] for
// sample_total_kernel) before any thread writes; then each thread writes
// its elements' gradient coef * (exp(x - lse) - onehot(label)), the
// softmax in f32 (no log_prob is stored). Each element is read before the
// same thread writes it, so dx may be x (the plan's in-place reuse).
template <typename T, typename I>
__global__ void cross_entropy_grad_rows_kernel(const T *x, T *dx, double *samples, Labels<I> lb,
                                               const void *dloss, DType dloss_dtype,
                                               bool per_sample, const double *divisor,
                                               void *loss, DType loss_dtype, int64_t rows,
                                               int64_t d) {
  __shared__ float shared[64];
  const int64_t c = lb.c;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = (r / d) * c * d + r % d;
    const float lse = row_log_sum_exp(x, base, d, shared, static_cast<float *>(nullptr), lb,
                                      per_sample ? loss : nullptr, loss_dtype, r);
    if (threadIdx.x == 0 && !per_sample) {
      const double w = lb.weight(r);
      samples[r] = w == 0.0 ? 0.0 : -w * static_cast<double>(ld(x[base + lb.label(r) * d]) - lse);
    }
    __syncthreads();  // the row's loss is read before its elements are written
    const float coef = coefficient(lb, dloss, dloss_dtype, per_sample, divisor, r);
    const int64_t label = lb.label(r);
    for (int64_t k = threadIdx.x; k < c; k += blockDim.x)
      dx[base + k * d] =
          st<T>(coef * (expf(ld(x[base + k * d]) - lse) - (k == label ? 1.0f : 0.0f)));
  }
}

// cross_entropy_grad_rows_kernel for contiguous classes (D = 1) whose row
// fits shared memory: one block of kSharedRowThreads per row copies the
// row there (HBM read once): its 16-byte vectors by cp.async, all of a
// thread's in flight at once, which the thread then folds from shared
// memory in order (the few elements before its first aligned vector and after
// its last one element by element, kept at the same offsets modulo 16
// bytes in shared memory so its vectors stay aligned there), each thread
// folding its vectors into its max and exp-sum (the sum rescaled once a
// vector when the max grows), then the block's fixed tree (block_max_sum);
// thread 0 takes the row's loss from the shared copy, and the gradient is
// written from it (dx may be x: the row is read in full before any write).
constexpr int kSharedRowThreads = 512;
// What the kernel's static shared memory may take, left out of the
// dynamic shared memory it opts in to.
constexpr size_t kSharedRowStatic = 1024;

// exp(v - m) in the shared-row kernel: for 16-bit scores exp2_ftz of
// v log2(e) - m log2(e), a multiply-add and the hardware's ex2 where expf's
// range reduction takes several more instructions, twice a class (the
// kernel's arithmetic is most of an HBM read's time: docs/runtime.md). The
// exponent's rounding (|m| 2^-24 relative, about 1e-6 at the scores' usual
// range) is far below a 16-bit gradient's precision and the loss's f32
// tolerance; f32 scores keep expf.
template <typename T> __device__ inline float row_exp(float v, float m) {
  if constexpr (sizeof(T) == 2) {
    constexpr float kLog2e = 1.4426950408889634f;
    return exp2_ftz(fmaf(v, kLog2e, -m * kLog2e));
  } else {
    return expf(v - m);
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(kSharedRowThreads, 2)
    cross_entropy_grad_shared_kernel(const T *x, T *dx, double *samples, Labels<I> lb,
                                     const void *dloss, DType dloss_dtype, bool per_sample,
                                     const double *divisor, void *loss, DType loss_dtype,
                                     int64_t rows) {
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  using V = math::Vector<T, N>;
  extern __shared__ __align__(16) uint16_t ce_shared_row[];
  __shared__ float shared[64];
  T *row = reinterpret_cast<T *>(ce_shared_row);
  const int64_t c = lb.c;
  // Where a block's rows (gridDim.x apart) start at the same offset modulo
  // 16 bytes (always where a row is whole 16-byte vectors, or the grid's
  // 2 blocks an SM times the row's bytes is a multiple of 16, as with 132
  // or 108 SMs and 16-bit scores), a thread's vectors sit in the same
  // shared-memory slots in every row of its block, and only that thread
  // reads them: each thread then copies its next row's vector into a slot
  // as soon as it has written the gradient from it, and the next row's
  // read overlaps this row's writes. Otherwise each row's copy waits for
  // the block to finish the last.
  const bool overlap = static_cast<int64_t>(gridDim.x) * c * static_cast<int64_t>(sizeof(T)) % 16 == 0;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * c;
    T *dr = dx + r * c;
    // Elements before the row's first 16-byte aligned one, its vectors
    // from there, and the element where the rest begins.
    const int64_t head = std::min<int64_t>(
        c, static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(xr) % 16) % 16 / sizeof(T)));
    const int64_t vecs = (c - head) / N, rest = head + vecs * N;
    T *srow = row + (N - head % N) % N;  // srow + head is 16-byte aligned
    MaxSum ms;
    // The thread's vectors of the row, all copied at once by cp.async
    // (no registers held), then folded from shared memory in order: here,
    // or (overlap) by the previous row's gradient loop.
    if (!overlap || r == blockIdx.x) {
      for (int64_t v = threadIdx.x; v < vecs; v += blockDim.x)
        cp_async_16(srow + head + v * N, xr + head + v * N);
      cp_async_commit();
    }
    cp_async_wait<0>();  // this thread's copies: the only ones it folds
    for (int64_t v = threadIdx.x; v < vecs; v += blockDim.x) {
      const V in = *reinterpret_cast<const V *>(srow + head + v * N);
      float f[N];
      float vm = -INFINITY;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        f[k] = ld(in.lane[k]);
        vm = fmaxf(vm, f[k]);
      }
      if (vm > ms.m) {
        ms.s *= row_exp<T>(ms.m, vm);
        ms.m = vm;
      }
#pragma unroll
      for (int k = 0; k < N; ++k)
        ms.s += row_exp<T>(f[k], ms.m);
    }
    for (int64_t k = threadIdx.x; k < c - vecs * N; k += blockDim.x) {
      const int64_t e = k < head ? k : rest + (k - head);
      srow[e] = xr[e];
      ms.add(ld(xr[e]));
    }
    ms = block_max_sum(ms, shared);  // its barriers also publish the shared row
    const float lse = ms.m + logf(ms.s);
    const int64_t label = lb.label(r);
    if (threadIdx.x == 0) {
      const double w = lb.weight(r);
      const double sample =
          w == 0.0 ? 0.0 : -w * static_cast<double>(ld(srow[label]) - lse);
      if (per_sample)
        store_any(loss, loss_dtype, r, static_cast<float>(sample));
      else
        samples[r] = sample;
    }
    // The label's score (in another thread's slot) is read before that
    // thread copies the next row over it.
    if (overlap)
      __syncthreads();
    const float coef = coefficient(lb, dloss, dloss_dtype, per_sample, divisor, r);
    const T *xn = r + gridDim.x < rows ? x + (r + gridDim.x) * c : nullptr;
    for (int64_t v = threadIdx.x; v < vecs; v += blockDim.x) {
      const V in = *reinterpret_cast<const V *>(srow + head + v * N);
      T out[N];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const int64_t e = head + v * N + k;
        out[k] = st<T>(coef * (row_exp<T>(ld(in.lane[k]), lse) - (e == label ? 1.0f : 0.0f)));
      }
      math::store_vector(dr, head + v * N, out);
      // The slot's bytes are in `out`, stored: the next row's may land.
      if (overlap && xn != nullptr)
        cp_async_16(srow + head + v * N, xn + head + v * N);
    }
    if (overlap)
      cp_async_commit();
    for (int64_t k = threadIdx.x; k < c - vecs * N; k += blockDim.x) {
      const int64_t e = k < head ? k : rest + (k - head);
      dr[e] = st<T>(coef * (row_exp<T>(ld(srow[e]), lse) - (e == label ? 1.0f : 0.0f)));
    }
    if (!overlap)
      __syncthreads();  // the shared row is read before the next row's copy
  }
}

// The shared-memory bytes cross_entropy_grad_shared_kernel<T, I> holds a
// row of c classes in: the row plus a vector (its alignment offset).
template <typename T> size_t shared_row_bytes(int64_t c) {
  return static_cast<size_t>((c + 16 / sizeof(T)) * sizeof(T) + 15) / 16 * 16;
}

// The device as cross_entropy_grad_shared_kernel's launches see it: the
// dynamic shared memory Kernel may take (the per-block opt-in limit less
// kSharedRowStatic, opted in to once per kernel at its first call, no
// synchronization) and the SMs.
struct SharedRowDevice {
  size_t limit = 0;
  int sms = 1;
};
template <auto Kernel> SharedRowDevice shared_row_device(const char *op, const char *name) {
  static const SharedRowDevice dev = [&] {
    SharedRowDevice d;
    int device = 0;
    check_cuda(cudaGetDevice(&device), op, "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device), op,
               "cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount)");
    const size_t optin = shared_optin_limit(op);
    d.limit = optin > kSharedRowStatic ? optin - kSharedRowStatic : 0;
    // Within the device's limit: the opt-in succeeds (it throws if the
    // CUDA call fails).
    opt_in_dynamic_shared<Kernel>(op, name, d.limit);
    return d;
  }();
  return dev;
}

// The grid of cross_entropy_grad_shared_kernel: as many blocks as are
// resident at once (2 an SM where two rows fit the SM's shared memory,
// about the opt-in limit, else 1), each looping over every grid-th row, so
// the rows are spread evenly with no second wave; DSRT_CUDA_MAX_BLOCKS
// caps it as it does stream_blocks' (tests: one block takes every row).
inline unsigned shared_row_grid(const SharedRowDevice &dev, size_t row_bytes, int64_t rows) {
  const int64_t per_sm = 2 * (row_bytes + kSharedRowStatic) <= dev.limit ? 2 : 1;
  const int64_t blocks = std::min<int64_t>(rows, per_sm * std::max(dev.sms, 1));
  return std::min(static_cast<unsigned>(blocks), stream_blocks(blocks, 1));
}

// The sum (or weighted mean) of the rows' losses that
// cross_entropy_grad_rows_kernel left in samples, in f64 (row_totals).
template <typename I>
__global__ void sample_total_kernel(const double *samples, Labels<I> lb, void *loss,
                                    DType loss_dtype, int64_t rows, bool mean, double *scratch) {
  row_totals(
      rows, scratch,
      [&](int64_t r, double &sample, double &w) {
        w = lb.weight(r);
        sample = samples[r];
      },
      [&](double total, double weight_total) {
        store_any(loss, loss_dtype, 0,
                  static_cast<float>(mean ? total / weight_total : total));
      });
}

// What the gradient kernels read: the loss gradient, the labels, log_prob
// (softmax cross-entropy only) and the output.
template <typename T, typename I> struct GradRows {
  const void *dloss;
  DType dloss_dtype;
  bool per_sample;
  const double *divisor;  // null unless a mean
  Labels<I> lb;
  const T *lp;
  T *out;
  int64_t rows, d;
};

// Element k of a row of coefficient `coef` and label `label`:
// softmax cross-entropy's coef * (exp(log_prob) - onehot(label)), NLL's
// -coef at the label and 0 elsewhere.
template <bool kSoftmax, typename T>
__device__ inline T grad_element(const T *lp, int64_t at, int64_t k, int64_t label, float coef) {
  if constexpr (kSoftmax)
    return st<T>(coef * (expf(ld(lp[at])) - (k == label ? 1.0f : 0.0f)));
  else
    return st<T>(k == label ? -coef : 0.0f);
}

// The gradient, rows as the file's header says: one block per row when D
// is 1 (a grid of row_blocks), else one thread per row (blocks_for).
template <bool kSoftmax, typename T, typename I>
__device__ inline void loss_grad_rows(const GradRows<T, I> &g) {
  const int64_t c = g.lb.c, d = g.d;
  if (d == 1) {
    for (int64_t r = blockIdx.x; r < g.rows; r += gridDim.x) {
      const float coef =
          coefficient(g.lb, g.dloss, g.dloss_dtype, g.per_sample, g.divisor, r);
      const int64_t label = g.lb.label(r), base = r * c;
      for (int64_t k = threadIdx.x; k < c; k += blockDim.x)
        g.out[base + k] = grad_element<kSoftmax>(g.lp, base + k, k, label, coef);
    }
  } else {
    DSRT_GRID_STRIDE(r, g.rows) {
      const float coef =
          coefficient(g.lb, g.dloss, g.dloss_dtype, g.per_sample, g.divisor, r);
      const int64_t label = g.lb.label(r), base = (r / d) * c * d + r % d;
      for (int64_t k = 0; k < c; ++k)
        g.out[base + k * d] = grad_element<kSoftmax>(g.lp, base + k * d, k, label, coef);
    }
  }
}

template <typename T, typename I>
__global__ void softmax_cross_entropy_grad_kernel(GradRows<T, I> g) {
  loss_grad_rows<true>(g);
}

// A label outside [0, C) matches no class: coefficient (weight) reports it
// so that the next synchronize throws.
template <typename T, typename I> __global__ void nll_loss_grad_kernel(GradRows<T, I> g) {
  loss_grad_rows<false>(g);
}

// A mean's divisor: the summed weights (weight_total_kernel) in the
// stream's scratch; null for other reductions.
template <typename I>
const double *mean_divisor(Stream &s, cudaStream_t stream, const Labels<I> &lb, int64_t rows,
                           Reduction reduction) {
  if (reduction != Reduction::Mean)
    return nullptr;
  double *scratch = stream_scratch(s);
  weight_total_kernel<I><<<kTotalBlocks, 1024, 0, stream>>>(lb, rows, scratch);
  return scratch + kDivisorSlot;
}

// Launches the gradient kernel of `out` [N, C, D...] (softmax
// cross-entropy's or NLL's), after totalling the weights for a mean.
template <bool kSoftmax, typename T, typename I>
void launch_loss_grad(Stream &s, cudaStream_t stream, const Tensor &dloss, const Labels<I> &lb,
                      const T *lp, const Tensor &out, const LossShape &ls, Reduction reduction) {
  const int64_t rows = ls.n * ls.d;
  const double *divisor = mean_divisor(s, stream, lb, rows, reduction);
  const GradRows<T, I> g{dloss.data, dloss.dtype, reduction == Reduction::None, divisor, lb,
                         lp, out.as<T>(), rows, ls.d};
  const unsigned grid = ls.d == 1 ? row_blocks(rows) : blocks_for(rows);
  if constexpr (kSoftmax)
    softmax_cross_entropy_grad_kernel<T, I><<<grid, kThreads, 0, stream>>>(g);
  else
    nll_loss_grad_kernel<T, I><<<grid, kThreads, 0, stream>>>(g);
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
      launch_loss_grad<true, T, I>(s, stream, dloss, lb, log_prob.as<T>(), dscores, ls,
                                   reduction);
    });
  });
  check_launch(kernel);
}

void softmax_cross_entropy_with_grad(Stream &s, const Tensor &scores, const Tensor &labels,
                                     const Tensor &dloss, const Tensor *weights,
                                     const Tensor &loss, const Tensor &dscores,
                                     Reduction reduction, bool has_ignore_index,
                                     int64_t ignore_index, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "softmax_cross_entropy_with_grad";
  LossShape ls = check_loss_shapes(kernel, scores, labels, weights, loss, reduction, "scores",
                                   "loss");
  check_loss_shapes(kernel, scores, labels, weights, dloss, reduction, "scores", "dloss");
  check_data(kernel, "dscores", dscores);
  check_same_dtype(kernel, "scores", scores, "dscores", dscores);
  check_shape(kernel, "dscores", dscores, scores.shape);
  WorkspaceFloats scratch(
      kernel, ws, softmax_cross_entropy_with_grad_workspace_bytes(scores.dtype, scores.shape));
  const int64_t rows = ls.n * ls.d;
  dispatch_float(kernel, scores.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_labels(labels, [&](auto itag) {
      using I = typename decltype(itag)::type;
      const Labels<I> lb =
          labels_of<I>(kernel, labels, weights, has_ignore_index, ignore_index, ls.c);
      const bool none = reduction == Reduction::None;
      if (rows == 0 || ls.c == 0) {
        // No class to write: the loss alone (0 per sample, or an empty
        // total).
        nll_forward<T, I>(s, stream, scores, lb, F32Rows<T>{}, loss, ls, reduction);
        return;
      }
      // The rows' losses (f64), which the total adds.
      double *samples = none ? nullptr : reinterpret_cast<double *>(scratch.take(2 * rows));
      const double *divisor = mean_divisor(s, stream, lb, rows, reduction);
      constexpr auto shared_kernel = cross_entropy_grad_shared_kernel<T, I>;
      const size_t row_bytes = shared_row_bytes<T>(ls.c);
      const SharedRowDevice dev =
          shared_row_device<shared_kernel>(kernel, "cross_entropy_grad_shared_kernel");
      if (ls.d == 1 && row_bytes <= dev.limit)
        cross_entropy_grad_shared_kernel<T, I>
            <<<shared_row_grid(dev, row_bytes, rows), kSharedRowThreads, row_bytes, stream>>>(
                scores.as<T>(), dscores.as<T>(), samples, lb, dloss.data, dloss.dtype, none,
                divisor, none ? loss.data : nullptr, loss.dtype, rows);
      else
        cross_entropy_grad_rows_kernel<T, I><<<row_blocks(rows), kThreads, 0, stream>>>(
            scores.as<T>(), dscores.as<T>(), samples, lb, dloss.data, dloss.dtype, none,
            divisor, none ? loss.data : nullptr, loss.dtype, rows, ls.d);
      if (!none)
        sample_total_kernel<I><<<kTotalBlocks, 1024, 0, stream>>>(
            samples, lb, loss.data, loss.dtype, rows, reduction == Reduction::Mean,
            stream_scratch(s));
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
      launch_loss_grad<false, T, I>(s, stream, dloss, lb, static_cast<const T *>(nullptr),
                                    dlog_prob, ls, reduction);
    });
  });
  check_launch(kernel);
}

}  // namespace dsrt
