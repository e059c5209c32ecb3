// Softmax, log-softmax, layer norm, batch norm and their gradients on the
// cuda backend. A row (the softmax axis, a layer-norm row, a batch-norm
// channel) is one thread block: its threads read the row with a block
// stride, reduce in registers and shared memory (f32; layer- and batch-norm
// statistics in f64, as the cpu kernels), then write. A contiguous row of
// softmax or layer norm whose length is a multiple of the 128-bit vector
// (8 f16/bf16, 4 f32 elements) is read and written a vector per thread at a
// time (math.h's load_vector / store_vector, element-wise where a view is
// not aligned), each thread adding its vector's elements in order. Layer
// norm and its gradient take rows of vectors that fit a warp's registers
// (at most 64 elements a lane forward, 32 backward), whose tensors are
// 16-byte aligned and whose scale (and bias) has the normalized shape, a
// warp per row instead (layer_norm_warp_kernel,
// layer_norm_grad_warp_kernel): no block barrier per row, the row read once.
// f16/bf16 elements are converted where they are read, so these kernels
// need no workspace beyond layer_norm_grad's partial sums; the cpu kernels'
// workspace sizes (kernels.h) are accepted and left unused.
#include "cuda/common.cuh"
#include "cuda/mma.cuh"

#include "dsrt/math.h"
#include "workspace_shapes.h"

namespace dsrt {

using namespace detail;

namespace {

constexpr int kRowThreads = 256;

// layer_norm_grad's finished-block counters in the stream's scratch (33
// unsigned words from this double on), after the loss totals' slots and
// before their counter (loss.cu).
constexpr int kLayerNormCounterSlot = 32;
static_assert(kLayerNormCounterSlot + 17 < kStreamScratchDoubles - 1,
              "the stream scratch holds layer_norm_grad's counters");

// The [outer, n, inner] view of x around `axis`.
void axis_view(const Shape &shape, int axis, int64_t &outer, int64_t &n, int64_t &inner) {
  outer = 1;
  inner = 1;
  n = shape.dims[axis];
  for (int d = 0; d < axis; ++d)
    outer *= shape.dims[d];
  for (int d = axis + 1; d < shape.rank; ++d)
    inner *= shape.dims[d];
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), 65535 * 32));
}

// Elements of T in one 128-bit access.
template <typename T> constexpr int kVector = 16 / static_cast<int>(sizeof(T));

// Whether rows of n elements, `stride` apart, are read and written as whole
// vectors.
template <typename T> bool vector_rows(int64_t n, int64_t stride) {
  return stride == 1 && n % kVector<T> == 0;
}

template <int W> using Width = std::integral_constant<int, W>;

// Calls body(c, Width<W>()) for this thread's part of a row of n elements:
// with vec, the vectors c = W * (threadIdx.x + k * blockDim.x) of W =
// kVector<T> elements; else the elements c = threadIdx.x + k * blockDim.x
// (W = 1). body reads and writes elements c .. c + W - 1 (load_row,
// store_row), so both paths share it.
template <typename T, typename Body>
__device__ inline void for_row(bool vec, int64_t n, Body body) {
  constexpr int N = kVector<T>;
  if (vec) {
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * N; c < n;
         c += static_cast<int64_t>(blockDim.x) * N)
      body(c, Width<N>());
  } else {
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
      body(c, Width<1>());
  }
}

// v = p[i .. i + W) in f32.
template <int W, typename T>
__device__ inline void load_row(float (&v)[W], const T *p, int64_t i) {
  T raw[W];
  math::load_vector(raw, p, i);
#pragma unroll
  for (int k = 0; k < W; ++k)
    v[k] = ld(raw[k]);
}

// p[i .. i + W) = v rounded to T.
template <int W, typename T>
__device__ inline void store_row(T *p, int64_t i, const float (&v)[W]) {
  T raw[W];
#pragma unroll
  for (int k = 0; k < W; ++k)
    raw[k] = st<T>(v[k]);
  math::store_vector(p, i, raw);
}

// for_row over rows p and q whose element c is at offset c * stride, with
// this thread's elements loaded: body(c, w, pv, qv), pv and qv float[W].
template <typename T, typename Body>
__device__ inline void for_row_pair(bool vec, int64_t n, int64_t stride, const T *p, const T *q,
                                    Body body) {
  for_row<T>(vec, n, [&](int64_t c, auto w) {
    constexpr int W = decltype(w)::value;
    float pv[W], qv[W];
    load_row(pv, p, c * stride);
    load_row(qv, q, c * stride);
    body(c, w, pv, qv);
  });
}

//===----------------------------------------------------------------------===//
// softmax, log_softmax and their gradients
//===----------------------------------------------------------------------===//

// Row r of [outer, n, inner] (r = o * inner + j) starts at o * n * inner + j
// with stride inner; with vec (inner == 1) threads take whole vectors.
template <typename T>
__global__ void softmax_kernel(const T *x, T *y, int64_t rows, int64_t n, int64_t inner,
                               bool log, bool vec) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    float m = -INFINITY;
    for_row<T>(vec, n, [&](int64_t c, auto w) {
      constexpr int W = decltype(w)::value;
      float v[W];
      load_row(v, x, base + c * inner);
#pragma unroll
      for (int k = 0; k < W; ++k)
        m = fmaxf(m, v[k]);
    });
    m = block_max(m, shared);
    // A NaN anywhere makes the whole row NaN through the sum, as on the cpu.
    float sum = 0.0f;
    for_row<T>(vec, n, [&](int64_t c, auto w) {
      constexpr int W = decltype(w)::value;
      float v[W];
      load_row(v, x, base + c * inner);
#pragma unroll
      for (int k = 0; k < W; ++k)
        sum += expf(v[k] - m);
    });
    sum = block_sum(sum, shared);
    const float shift = m + logf(sum), inv = 1.0f / sum;
    for_row<T>(vec, n, [&](int64_t c, auto w) {
      constexpr int W = decltype(w)::value;
      float v[W];
      load_row(v, x, base + c * inner);
#pragma unroll
      for (int k = 0; k < W; ++k)
        v[k] = log ? v[k] - shift : expf(v[k] - m) * inv;
      store_row(y, base + c * inner, v);
    });
    __syncthreads();
  }
}

// softmax: dx = y (dy - sum(dy y)); log-softmax: dx = dy - exp(y) sum(dy).
template <typename T>
__global__ void softmax_grad_kernel(const T *y, const T *dy, T *dx, int64_t rows, int64_t n,
                                    int64_t inner, bool log, bool vec) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    float sum = 0.0f;
    for_row<T>(vec, n, [&](int64_t c, auto w) {
      constexpr int W = decltype(w)::value;
      float g[W], yv[W];
      load_row(g, dy, base + c * inner);
      if (!log)
        load_row(yv, y, base + c * inner);
#pragma unroll
      for (int k = 0; k < W; ++k)
        sum += log ? g[k] : g[k] * yv[k];
    });
    sum = block_sum(sum, shared);
    for_row_pair(vec, n, inner, dy + base, y + base, [&](int64_t c, auto w, auto &g, auto &yv) {
#pragma unroll
      for (int k = 0; k < decltype(w)::value; ++k)
        g[k] = log ? g[k] - expf(yv[k]) * sum : yv[k] * (g[k] - sum);
      store_row(dx, base + c * inner, g);
    });
    __syncthreads();
  }
}

void softmax_common(const char *kernel, Stream &s, const Tensor &x, const Tensor &y, int axis,
                    bool log, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  check_softmax(kernel, x, y, axis);
  WorkspaceFloats scratch(kernel, ws, softmax_workspace_bytes(x.dtype, x.shape, axis));
  if (x.numel() == 0)
    return;
  int64_t outer, n, inner;
  axis_view(x.shape, axis, outer, n, inner);
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_kernel<T><<<row_blocks(outer * inner), kRowThreads, 0, stream>>>(
        x.as<T>(), y.as<T>(), outer * inner, n, inner, log, vector_rows<T>(n, inner));
  });
  check_launch(kernel);
}

void softmax_grad_common(const char *kernel, Stream &s, const Tensor &y, const Tensor &dy,
                         const Tensor &dx, int axis, bool log, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  check_softmax_grad(kernel, y, dy, dx, axis);
  WorkspaceFloats scratch(kernel, ws, softmax_grad_workspace_bytes(y.dtype, y.shape, axis));
  if (y.numel() == 0)
    return;
  int64_t outer, n, inner;
  axis_view(y.shape, axis, outer, n, inner);
  dispatch_float(kernel, y.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_grad_kernel<T><<<row_blocks(outer * inner), kRowThreads, 0, stream>>>(
        y.as<T>(), dy.as<T>(), dx.as<T>(), outer * inner, n, inner, log,
        vector_rows<T>(n, inner));
  });
  check_launch(kernel);
}

}  // namespace

void softmax(Stream &s, const Tensor &x, const Tensor &y, int axis, const Workspace &ws) {
  softmax_common("softmax", s, x, y, axis, /*log=*/false, ws);
}

void log_softmax(Stream &s, const Tensor &x, const Tensor &y, int axis, const Workspace &ws) {
  softmax_common("log_softmax", s, x, y, axis, /*log=*/true, ws);
}

void softmax_grad(Stream &s, const Tensor &y, const Tensor &dy, const Tensor &dx, int axis,
                  const Workspace &ws) {
  softmax_grad_common("softmax_grad", s, y, dy, dx, axis, /*log=*/false, ws);
}

void log_softmax_grad(Stream &s, const Tensor &y, const Tensor &dy, const Tensor &dx, int axis,
                      const Workspace &ws) {
  softmax_grad_common("log_softmax_grad", s, y, dy, dx, axis, /*log=*/true, ws);
}

//===----------------------------------------------------------------------===//
// layer_norm
//===----------------------------------------------------------------------===//

namespace {

// A scale or bias read at normalized index i through its broadcast plan
// (the identity for one of the normalized shape: `dense`).
template <typename T> struct Param {
  const T *data;
  BroadcastPlan plan;
  bool dense;
  __device__ float at(int64_t i) const { return data ? ld(data[plan_offset(plan, 0, i)]) : 0.0f; }
  // v = elements i .. i + W in f32: one 128-bit access where the row's
  // vectors are (for_row's W > 1) and the parameter has the normalized
  // shape, as the row itself is read.
  template <int W> __device__ void load(float (&v)[W], int64_t i) const {
    if (W > 1 && dense) {
      load_row(v, data, i);
      return;
    }
#pragma unroll
    for (int k = 0; k < W; ++k)
      v[k] = at(i + k);
  }
};

// A warp per row: rows of up to 32 K vectors (K per lane) held in registers
// and reduced by warp shuffles, no block barrier; 8 rows a block.
constexpr int kWarpRows = kRowThreads / 32;

template <int K> using Vectors = std::integral_constant<int, K>;

// Calls f(Vectors<K>()) for the smallest K of 1, 2, 3, 4, 6, 8 that holds
// `vectors` vectors a lane with K * kVector<T> <= kMaxElems elements a lane;
// false (f not called) when none does.
template <typename T, int kMaxElems, typename F> bool with_lane_vectors(int64_t vectors, F &&f) {
  constexpr int N = kVector<T>;
  const int64_t k = (vectors + 31) / 32;
  bool done = false;
  auto try_k = [&](auto kk) {
    constexpr int K = decltype(kk)::value;
    if constexpr (K * N <= kMaxElems) {
      if (!done && k <= K) {
        f(kk);
        done = true;
      }
    }
  };
  try_k(Vectors<1>());
  try_k(Vectors<2>());
  try_k(Vectors<3>());
  try_k(Vectors<4>());
  try_k(Vectors<6>());
  try_k(Vectors<8>());
  return done;
}

// Calls body(j, c) for each of lane `lane`'s K vectors j of a row of n
// elements that lies in the row (c: its first element, (lane + 32 j) N).
template <int K, int N, typename Body>
__device__ inline void for_lane_vectors(int lane, int64_t n, Body body) {
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const int64_t c = static_cast<int64_t>(lane + 32 * j) * N;
    if (c < n)
      body(j, c);
  }
}

// Lane `lane`'s K vectors of a row of n elements: vector j at element
// (lane + 32 j) N, loaded raw (all K in flight before any is used); those
// past the row are left alone. The row is 16-byte aligned (warp_rows).
template <int K, typename T>
__device__ inline void load_lane_row(T (&raw)[K][kVector<T>], const T *p, int64_t n, int lane) {
  constexpr int N = kVector<T>;
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const int64_t c = static_cast<int64_t>(lane + 32 * j) * N;
    if (c < n) {
      const math::Vector<T, N> v = *reinterpret_cast<const math::Vector<T, N> *>(p + c);
#pragma unroll
      for (int k = 0; k < N; ++k)
        raw[j][k] = v.lane[k];
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k)
        raw[j][k] = st<T>(0.0f);
    }
  }
}

// v = p[c .. c + N) in f32 from an aligned vector; 0 where p is null.
template <typename T>
__device__ inline void load_aligned(float (&v)[kVector<T>], const T *p, int64_t c) {
  constexpr int N = kVector<T>;
  if (!p) {
#pragma unroll
    for (int k = 0; k < N; ++k)
      v[k] = 0.0f;
    return;
  }
  const math::Vector<T, N> raw = *reinterpret_cast<const math::Vector<T, N> *>(p + c);
#pragma unroll
  for (int k = 0; k < N; ++k)
    v[k] = ld(raw.lane[k]);
}

// p[c .. c + N) = v rounded to T, one aligned vector store.
template <typename T>
__device__ inline void store_aligned(T *p, int64_t c, const float (&v)[kVector<T>]) {
  constexpr int N = kVector<T>;
  math::Vector<T, N> raw;
#pragma unroll
  for (int k = 0; k < N; ++k)
    raw.lane[k] = st<T>(v[k]);
  *reinterpret_cast<math::Vector<T, N> *>(p + c) = raw;
}

// Whether the warp-per-row kernels take rows of n elements of T: vectors
// (n a multiple of kVector<T>) and every tensor's first element (null
// ones aside) 16-byte aligned, so every row's vectors are; and a scale or
// bias (nullable) with the normalized shape, read as vectors too. Others
// take the block-per-row kernels.
template <typename T> bool warp_rows(int64_t n, std::initializer_list<const void *> rows,
                                     std::initializer_list<const Tensor *> params) {
  if (n % kVector<T> != 0)
    return false;
  for (const void *p : rows)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0)
      return false;
  for (const Tensor *t : params)
    if (t && (t->numel() != n || reinterpret_cast<uintptr_t>(t->data) % 16 != 0))
      return false;
  return true;
}

template <typename T>
Param<T> param_of(const Tensor *t, const Shape &normalized) {
  Param<T> p{t ? t->as<T>() : nullptr, BroadcastPlan(), false};
  if (t) {
    plan_broadcast(normalized, &t->shape, 1, p.plan);
    p.dense = t->numel() == normalized.numel();
  }
  return p;
}

template <typename T>
__global__ void layer_norm_kernel(const T *x, Param<T> g, Param<T> b, T *y, float *mean,
                                  float *inv_std, int64_t rows, int64_t n, float epsilon,
                                  bool vec) {
  __shared__ double dshared[32];
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *in = x + r * n;
    // Two passes, as the cpu kernel: the mean in f64 kept as a float pair
    // (mu + mu_lo), then the centred sum of squares.
    double sum = 0.0;
    for_row<T>(vec, n, [&](int64_t i, auto w) {
      constexpr int W = decltype(w)::value;
      float v[W];
      load_row(v, in, i);
#pragma unroll
      for (int k = 0; k < W; ++k)
        sum += v[k];
    });
    sum = block_sum(sum, dshared);
    const double mean_d = sum / static_cast<double>(n);
    const float mu = static_cast<float>(mean_d), mu_lo = static_cast<float>(mean_d - mu);
    float sq = 0.0f;
    for_row<T>(vec, n, [&](int64_t i, auto w) {
      constexpr int W = decltype(w)::value;
      float v[W];
      load_row(v, in, i);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float d = (v[k] - mu) - mu_lo;
        sq += d * d;
      }
    });
    sq = block_sum(sq, shared);
    const float inv_n = n > 0 ? 1.0f / static_cast<float>(n) : 0.0f;
    const float inv = 1.0f / sqrtf(sq * inv_n + epsilon);
    for_row<T>(vec, n, [&](int64_t i, auto w) {
      constexpr int W = decltype(w)::value;
      float v[W], gv[W], bv[W];
      load_row(v, in, i);
      g.load(gv, i);
      b.load(bv, i);
#pragma unroll
      for (int k = 0; k < W; ++k)
        v[k] = ((v[k] - mu) - mu_lo) * inv * gv[k] + bv[k];
      store_row(y, r * n + i, v);
    });
    if (threadIdx.x == 0) {
      mean[r] = mu;
      inv_std[r] = inv;
    }
    __syncthreads();
  }
}

// layer_norm_kernel's arithmetic with a warp per row (rows of vectors, at
// most 64 elements a lane): the f64 sum, the f32 centred sum of squares and
// the output from the row held in registers, the sums by warp shuffles.
template <typename T, int K>
__global__ void __launch_bounds__(kRowThreads)
    layer_norm_warp_kernel(const T *x, const T *g, const T *b, T *y, float *mean,
                           float *inv_std, int64_t rows, int64_t n, float epsilon) {
  constexpr int N = kVector<T>;
  const int lane = threadIdx.x & 31;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarpRows;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRows + (threadIdx.x >> 5); r < rows;
       r += step) {
    T raw[K][N];
    load_lane_row<K>(raw, x + r * n, n, lane);
    double sum = 0.0;
    for_lane_vectors<K, N>(lane, n, [&](int j, int64_t) {
#pragma unroll
      for (int k = 0; k < N; ++k)
        sum += ld(raw[j][k]);
    });
    sum = warp_sum(sum);
    const double mean_d = sum / static_cast<double>(n);
    const float mu = static_cast<float>(mean_d), mu_lo = static_cast<float>(mean_d - mu);
    float sq = 0.0f;
    for_lane_vectors<K, N>(lane, n, [&](int j, int64_t) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float d = (ld(raw[j][k]) - mu) - mu_lo;
        sq += d * d;
      }
    });
    sq = warp_sum(sq);
    const float inv = 1.0f / sqrtf(sq * inv_n + epsilon);
    for_lane_vectors<K, N>(lane, n, [&](int j, int64_t c) {
      float v[N], gv[N], bv[N];
      load_aligned(gv, g, c);
      load_aligned(bv, b, c);
#pragma unroll
      for (int k = 0; k < N; ++k)
        v[k] = ((ld(raw[j][k]) - mu) - mu_lo) * inv * gv[k] + bv[k];
      store_aligned(y, r * n + c, v);
    });
    if (lane == 0) {
      mean[r] = mu;
      inv_std[r] = inv;
    }
  }
}

}  // namespace

void layer_norm(Stream &s, const Tensor &x, const Tensor &scale, const Tensor *bias,
                const Tensor &y, const Tensor &mean, const Tensor &inv_std_dev, int axis,
                float epsilon, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "layer_norm";
  const NormRows nr = check_layer_norm(kernel, x, scale, bias, y, mean, inv_std_dev, axis);
  const Shape &normalized = nr.normalized;
  WorkspaceFloats scratch(
      kernel, ws,
      layer_norm_workspace_bytes(x.dtype, x.shape, scale.shape, bias ? &bias->shape : nullptr,
                                 axis));
  const int64_t rows = nr.rows, n = nr.n;
  if (rows == 0)
    return;
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Param<T> g = param_of<T>(&scale, normalized), b = param_of<T>(bias, normalized);
    if (warp_rows<T>(n, {x.data, y.data}, {&scale, bias}) &&
        with_lane_vectors<T, 64>(n / kVector<T>, [&](auto kk) {
          layer_norm_warp_kernel<T, decltype(kk)::value>
              <<<row_blocks((rows + kWarpRows - 1) / kWarpRows), kRowThreads, 0, stream>>>(
                  x.as<T>(), scale.as<T>(), bias ? bias->as<T>() : nullptr, y.as<T>(),
                  mean.as<float>(), inv_std_dev.as<float>(), rows, n, epsilon);
        }))
      return;
    layer_norm_kernel<T><<<row_blocks(rows), kRowThreads, 0, stream>>>(
        x.as<T>(), g, b, y.as<T>(), mean.as<float>(), inv_std_dev.as<float>(), rows, n, epsilon,
        vector_rows<T>(n, 1));
  });
  check_launch(kernel);
}

namespace {

constexpr int kParamColumns = 8, kParamLanes = 32;
static_assert(kParamLanes == kLayerNormGradLanes, "the lanes the workspace holds sums of");
static_assert(kParamLanes % 4 == 0, "finish_param_grads reads the lanes four at a time");

// Lane `lane`'s f64 sum of normalized element i's partial sums: the blocks
// lane, lane + kParamLanes, ... in order. Volatile: other blocks wrote them
// during the same launch.
// Four loads are issued before their adds (volatile loads are not moved
// past each other's uses), added in the same order.
__device__ inline double lane_sum(const volatile float *part, int64_t blocks, int64_t n,
                                  int64_t i, int64_t lane) {
  const volatile float *p = part + i;
  const int64_t step = kParamLanes * n;
  double sum = 0.0;
  int64_t blk = lane;
#pragma unroll 1
  for (; blk + 3 * kParamLanes < blocks; blk += 4 * kParamLanes) {
    const volatile float *q = p + blk * n;
    const float v0 = q[0], v1 = q[step], v2 = q[2 * step], v3 = q[3 * step];
    sum += v0;
    sum += v1;
    sum += v2;
    sum += v3;
  }
  for (; blk < blocks; blk += kParamLanes)
    sum += p[blk * n];
  return sum;
}

// dscale and dbias of the normalized shape, finished by the rows kernel's
// last blocks (on: the launch's only work after the rows). Past
// kParamLanes blocks, the last block of each lane of blocks (blockIdx.x
// modulo kParamLanes) writes the lane's f64 sums into `lanes` (2 n per
// lane: dscale's, then dbias's), and the last of those adds the lanes in
// order; with fewer blocks each lane is one block and the last block adds
// their partial sums directly. The order and precision are
// layer_norm_param_grad_kernel's (sum_blocks). `counters` (kParamLanes + 1
// in the stream's scratch: the lanes', then the launch's) are 0 before the
// launch and left 0 after it, as the loss totals' counter.
struct ParamFinish {
  bool on = false;
  void *dscale = nullptr, *dbias = nullptr;  // dbias null: no bias
  DType dscale_dtype = DType::F32, dbias_dtype = DType::F32;
  double *lanes = nullptr;  // null: at most kParamLanes blocks
  unsigned *counters = nullptr;
};

__device__ void finish_param_grads(const float *part_g, const float *part_b, int64_t blocks,
                                   int64_t n, const ParamFinish &fin) {
  __shared__ bool last;
  const int64_t lanes = blocks < kParamLanes ? blocks : kParamLanes;
  // Every thread's partial sums are seen before its block counts itself.
  __threadfence();
  __syncthreads();
  if (fin.lanes) {
    const int64_t lane = blockIdx.x % kParamLanes;
    if (threadIdx.x == 0) {
      const unsigned lane_blocks =
          static_cast<unsigned>((blocks - lane + kParamLanes - 1) / kParamLanes);
      last = atomicAdd(&fin.counters[lane], 1u) == lane_blocks - 1;
    }
    __syncthreads();
    if (!last)
      return;
    __threadfence();
    double *out_g = fin.lanes + lane * 2 * n, *out_b = out_g + n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      out_g[i] = lane_sum(part_g, blocks, n, i, lane);
      out_b[i] = lane_sum(part_b, blocks, n, i, lane);
    }
    if (threadIdx.x == 0)
      fin.counters[lane] = 0;
    __threadfence();
    __syncthreads();
  }
  if (threadIdx.x == 0)
    last = atomicAdd(&fin.counters[kParamLanes], 1u) ==
           static_cast<unsigned>(fin.lanes ? lanes : blocks) - 1;
  __syncthreads();
  if (!last)
    return;
  __threadfence();
  const volatile double *lane_sums = fin.lanes;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    // Lanes without blocks add 0.0, which changes no sum: they are skipped.
    double total_g = 0.0, total_b = 0.0;
    if (lane_sums) {
      // kParamLanes lanes, four of each sum's loads in flight at a time.
#pragma unroll 1
      for (int64_t lane = 0; lane < kParamLanes; lane += 4) {
        const volatile double *q = lane_sums + lane * 2 * n + i;
        double vg[4], vb[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          vg[k] = q[k * 2 * n];
          vb[k] = q[k * 2 * n + n];
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          total_g += vg[k];
          total_b += vb[k];
        }
      }
    } else {
      for (int64_t lane = 0; lane < lanes; ++lane) {
        total_g += lane_sum(part_g, blocks, n, i, lane);
        total_b += lane_sum(part_b, blocks, n, i, lane);
      }
    }
    store_any(fin.dscale, fin.dscale_dtype, i, static_cast<float>(total_g));
    if (fin.dbias)
      store_any(fin.dbias, fin.dbias_dtype, i, static_cast<float>(total_b));
  }
  if (threadIdx.x == 0)
    fin.counters[kParamLanes] = 0;
}

// One thread block per block of rows (layer_norm_grad_blocks, as the cpu
// kernel): row by row, the row's sums (block-reduced in f32), dx (plus the
// addend, when there is one, in f32: one rounding), and the row's
// dscale/dbias terms added to the block's partial sums (each thread owning
// its strided normalized elements, rows in order); then, with fin.on, the
// parameter gradients from all blocks' partial sums (finish_param_grads).
//
// With dxhat = dy g and xhat = (x - mu - mu_lo) inv, mu_lo = mean(x - mu):
//   dx = inv (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),
//   sum(dxhat xhat) = inv (sum(dxhat (x - mu)) - mu_lo sum(dxhat)).
template <typename T>
__global__ void layer_norm_grad_rows_kernel(const T *x, const T *dy, Param<T> g, const T *add,
                                            T *dx, const float *mean, const float *inv_std,
                                            float *part_g, float *part_b, int64_t rows,
                                            int64_t n, int64_t block_rows, bool vec,
                                            ParamFinish fin) {
  __shared__ float shared[32];
  const int64_t blk = blockIdx.x;
  float *acc_g = part_g + blk * n, *acc_b = part_b + blk * n;
  // The thread that owns element i (for_row) clears and adds to its partial
  // sums, so they need no barrier.
  for_row<T>(vec, n, [&](int64_t i, auto w) {
#pragma unroll
    for (int k = 0; k < decltype(w)::value; ++k) {
      acc_g[i + k] = 0.0f;
      acc_b[i + k] = 0.0f;
    }
  });
  const float inv_n = 1.0f / static_cast<float>(n);
  const int64_t r_end = (blk + 1) * block_rows < rows ? (blk + 1) * block_rows : rows;
  for (int64_t r = blk * block_rows; r < r_end; ++r) {
    const T *xr = x + r * n, *gr = dy + r * n;
    const float mu = mean[r], inv = inv_std[r];
    float s0 = 0.0f, a = 0.0f, b0 = 0.0f;
    for_row_pair(vec, n, 1, xr, gr, [&](int64_t i, auto w, auto &xv, auto &gv) {
      float sv[decltype(w)::value];
      g.load(sv, i);
#pragma unroll
      for (int k = 0; k < decltype(w)::value; ++k) {
        const float d = xv[k] - mu, dxh = gv[k] * sv[k];
        s0 += d;
        a += dxh;
        b0 += dxh * d;
      }
    });
    s0 = block_sum(s0, shared);
    a = block_sum(a, shared);
    b0 = block_sum(b0, shared);
    const float mu_lo = s0 * inv_n;
    const float mean_a = a * inv_n, mean_b = (b0 - mu_lo * a) * inv * inv_n;
    for_row_pair(vec, n, 1, xr, gr, [&](int64_t i, auto w, auto &xv, auto &gv) {
      constexpr int W = decltype(w)::value;
      float sv[W], av[W];
      g.load(sv, i);
      if (add)
        load_row(av, add, r * n + i);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float xh = ((xv[k] - mu) - mu_lo) * inv, grad = gv[k];
        acc_g[i + k] += grad * xh;
        acc_b[i + k] += grad;
        const float v = inv * (grad * sv[k] - mean_a - xh * mean_b);
        // The addend's sum rounded on its own (never a multiply-add with
        // the product above): in f32 the unfused add's bits.
        xv[k] = add ? __fadd_rn(av[k], v) : v;
      }
      store_row(dx, r * n + i, xv);
    });
  }
  if (fin.on)
    finish_param_grads(part_g, part_b, gridDim.x, n, fin);
}

// layer_norm_grad_rows_kernel's arithmetic with a warp per row (rows of
// vectors, at most 32 elements a lane): the block's rows are dealt to its 8
// warps (warp w: rows w, w + 8, ... of the block, in order), each row read
// once into registers (x and dy; the addend where dx is written) and its sums reduced
// by warp shuffles; a lane owns the same normalized elements in every row,
// so each warp keeps its dscale/dbias terms in registers, and at the end
// the block's partial sums are the warps' added in warp order (f32, through
// shared memory), written once; then finish_param_grads as there.
constexpr int kGradLaneElems = 32;
constexpr int kGradWarpMaxN = 32 * kGradLaneElems;

template <typename T, int K>
__global__ void __launch_bounds__(kRowThreads, 2)
    layer_norm_grad_warp_kernel(const T *x, const T *dy, const T *g, const T *add, T *dx,
                                const float *mean, const float *inv_std, float *part_g,
                                float *part_b, int64_t rows, int64_t n, int64_t block_rows,
                                ParamFinish fin) {
  constexpr int N = kVector<T>;
  __shared__ float warp_sums[2][kGradWarpMaxN];
  // Each warp's row of the addend, copied by cp.async as x and dy load:
  // lane l's vectors at their own offsets, read back by lane l alone.
  __shared__ __align__(16) T warp_add[kWarpRows][kGradWarpMaxN];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t blk = blockIdx.x;
  float acc_g[K][N], acc_b[K][N];
#pragma unroll
  for (int j = 0; j < K; ++j)
#pragma unroll
    for (int k = 0; k < N; ++k) {
      acc_g[j][k] = 0.0f;
      acc_b[j][k] = 0.0f;
    }
  const float inv_n = 1.0f / static_cast<float>(n);
  const int64_t r_end = (blk + 1) * block_rows < rows ? (blk + 1) * block_rows : rows;
  for (int64_t r = blk * block_rows + warp; r < r_end; r += kWarpRows) {
    T xr[K][N], gr[K][N];
    load_lane_row<K>(xr, x + r * n, n, lane);
    load_lane_row<K>(gr, dy + r * n, n, lane);
    if (add) {
      for_lane_vectors<K, N>(lane, n, [&](int, int64_t c) {
        cp_async_16(&warp_add[warp][c], add + r * n + c);
      });
      cp_async_commit();
    }
    const float mu = mean[r], inv = inv_std[r];
    float s0 = 0.0f, a = 0.0f, b0 = 0.0f;
    for_lane_vectors<K, N>(lane, n, [&](int j, int64_t c) {
      float sv[N];
      load_aligned(sv, g, c);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float d = ld(xr[j][k]) - mu, dxh = ld(gr[j][k]) * sv[k];
        s0 += d;
        a += dxh;
        b0 += dxh * d;
      }
    });
    s0 = warp_sum(s0);
    a = warp_sum(a);
    b0 = warp_sum(b0);
    const float mu_lo = s0 * inv_n;
    const float mean_a = a * inv_n, mean_b = (b0 - mu_lo * a) * inv * inv_n;
    if (add)
      cp_async_wait<0>();  // this lane's copies: the only ones it reads
    for_lane_vectors<K, N>(lane, n, [&](int j, int64_t c) {
      float sv[N], av[N], v[N];
      load_aligned(sv, g, c);
      load_aligned(av, add ? &warp_add[warp][0] : nullptr, c);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float xh = ((ld(xr[j][k]) - mu) - mu_lo) * inv, grad = ld(gr[j][k]);
        acc_g[j][k] += grad * xh;
        acc_b[j][k] += grad;
        const float d = inv * (grad * sv[k] - mean_a - xh * mean_b);
        // The addend's sum rounded on its own, as layer_norm_grad_rows_kernel.
        v[k] = add ? __fadd_rn(av[k], d) : d;
      }
      store_aligned(dx, r * n + c, v);
    });
  }
  // The warps' sums in warp order: warp 0's, plus warp 1's, ...; the last
  // warp writes the block's partial sums.
#pragma unroll
  for (int w = 0; w < kWarpRows; ++w) {
    if (warp == w)
      for_lane_vectors<K, N>(lane, n, [&](int j, int64_t c) {
#pragma unroll
        for (int k = 0; k < N; ++k) {
          float sg = acc_g[j][k], sb = acc_b[j][k];
          if (w > 0) {
            sg = warp_sums[0][c + k] + sg;
            sb = warp_sums[1][c + k] + sb;
          }
          if (w == kWarpRows - 1) {
            part_g[blk * n + c + k] = sg;
            part_b[blk * n + c + k] = sb;
          } else {
            warp_sums[0][c + k] = sg;
            warp_sums[1][c + k] = sb;
          }
        }
      });
    __syncthreads();
  }
  if (fin.on)
    finish_param_grads(part_g, part_b, gridDim.x, n, fin);
}

// The sum over the blocks of normalized element i's partial sums, in f64:
// kParamLanes lanes (threadIdx.y) each add the blocks lane, lane + lanes,
// ... in order, then lane 0 adds the lanes in order. A fixed order, so the
// result does not depend on scheduling; threadIdx.x runs along i, so a
// warp reads 32 consecutive bytes (a sector) of each of 4 blocks' partial
// sums, and a 768-wide parameter takes 96 blocks of threads.

__device__ double sum_blocks(const float *part, int64_t blocks, int64_t n, int64_t i,
                             double (*shared)[kParamColumns]) {
  double sum = 0.0;
  if (i < n)
    for (int64_t blk = threadIdx.y; blk < blocks; blk += kParamLanes)
      sum += part[blk * n + i];
  shared[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.y == 0)
    for (int lane = 0; lane < kParamLanes; ++lane)
      total += shared[lane][threadIdx.x];
  __syncthreads();
  return total;
}

// A parameter's gradient with the normalized shape: element i is the sum
// of the blocks' partial sums of i (sum_blocks), rounded once to T.
template <typename T>
__global__ void layer_norm_param_grad_kernel(const float *part, int64_t blocks, int64_t n,
                                             T *out) {
  __shared__ double shared[kParamLanes][kParamColumns];
  for (int64_t i0 = static_cast<int64_t>(blockIdx.x) * kParamColumns; i0 < n;
       i0 += static_cast<int64_t>(gridDim.x) * kParamColumns) {
    const int64_t i = i0 + threadIdx.x;
    const double total = sum_blocks(part, blocks, n, i, shared);
    if (threadIdx.y == 0 && i < n)
      out[i] = st<T>(static_cast<float>(total));
  }
}

// A broadcast parameter's gradient (fewer elements than the normalized
// shape, rare): element p sums, over the normalized elements i that read p
// (in order), the blocks' partial sums of i (in order) in f64.
template <typename T>
__global__ void layer_norm_param_grad_broadcast_kernel(const float *part, int64_t blocks,
                                                       int64_t n, BroadcastPlan plan, T *out,
                                                       int64_t count) {
  DSRT_GRID_STRIDE(p, count) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      if (plan_offset(plan, 0, i) != p)
        continue;
      double sum = 0.0;
      for (int64_t blk = 0; blk < blocks; ++blk)
        sum += part[blk * n + i];
      acc += sum;
    }
    out[p] = st<T>(static_cast<float>(acc));
  }
}

// dscale or dbias in its own type: the scale's (x's for dbias) or f32.
void launch_param_grad(const char *kernel, cudaStream_t stream, const float *part,
                       int64_t blocks, const Shape &normalized, const Tensor &out) {
  BroadcastPlan plan;
  plan_broadcast(normalized, &out.shape, 1, plan);
  const int64_t count = out.numel(), n = normalized.numel();
  if (count == 0)
    return;
  dispatch_float(kernel, out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (count == n) {
      const unsigned grid = static_cast<unsigned>(
          std::min<int64_t>((n + kParamColumns - 1) / kParamColumns, 65535));
      layer_norm_param_grad_kernel<T><<<grid, dim3(kParamColumns, kParamLanes), 0, stream>>>(
          part, blocks, n, out.as<T>());
    } else {
      layer_norm_param_grad_broadcast_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(
          part, blocks, n, plan, out.as<T>(), count);
    }
  });
}

}  // namespace

void layer_norm_grad(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &scale,
                     const Tensor &mean, const Tensor &inv_std_dev, const Tensor &dx,
                     const Tensor &dscale, const Tensor *dbias, int axis, const Workspace &ws) {
  layer_norm_grad_add(s, dy, x, scale, mean, inv_std_dev, nullptr, dx, dscale, dbias, axis, ws);
}

// One launch: the rows kernel, whose last blocks finish dscale and dbias
// (finish_param_grads). A broadcast parameter (fewer elements than the
// normalized shape, rare) is summed by launch_param_grad's kernels after it.
void layer_norm_grad_add(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &scale,
                         const Tensor &mean, const Tensor &inv_std_dev, const Tensor *addend,
                         const Tensor &dx, const Tensor &dscale, const Tensor *dbias, int axis,
                         const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "layer_norm_grad";
  const NormRows nr = check_layer_norm_grad(kernel, dy, x, scale, mean, inv_std_dev, dx, dscale,
                                             dbias, axis);
  check_layer_norm_grad_addend(kernel, addend, x);
  const Shape &normalized = nr.normalized;
  const int64_t rows = nr.rows, n = nr.n;
  int64_t blocks = 0, block_rows = 0;
  layer_norm_grad_blocks(rows, n, blocks, block_rows);
  WorkspaceFloats scratch(kernel, ws,
                          layer_norm_grad_workspace_bytes(x.dtype, x.shape, scale.shape, axis));
  // The workspace's layout is the cpu kernel's: f64 totals first (unused
  // here: the last blocks sum the blocks themselves), then the blocks'
  // partial sums; then (past kParamLanes blocks) the lanes' f64 sums, 8-byte
  // aligned (an even number of floats before them).
  const bool rows_run = x.numel() > 0 && blocks > 0;
  scratch.take(rows_run ? 2 * 3 * n : 0);
  float *part_g = scratch.take(rows_run ? 2 * blocks * n : 0);
  float *part_b = part_g + blocks * n;
  ParamFinish fin;
  fin.on = rows_run && dscale.numel() == n && (!dbias || dbias->numel() == n);
  if (fin.on) {
    fin.dscale = dscale.data;
    fin.dscale_dtype = dscale.dtype;
    fin.dbias = dbias ? dbias->data : nullptr;
    fin.dbias_dtype = dbias ? dbias->dtype : DType::F32;
    const int64_t lane_floats = layer_norm_grad_lane_floats(blocks, n);
    fin.lanes = lane_floats ? reinterpret_cast<double *>(scratch.take(lane_floats)) : nullptr;
    fin.counters = reinterpret_cast<unsigned *>(stream_scratch(s) + kLayerNormCounterSlot);
  }
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (rows_run &&
        warp_rows<T>(n, {x.data, dy.data, dx.data, addend ? addend->data : nullptr},
                     {&scale}) &&
        with_lane_vectors<T, kGradLaneElems>(n / kVector<T>, [&](auto kk) {
          layer_norm_grad_warp_kernel<T, decltype(kk)::value>
              <<<static_cast<unsigned>(blocks), kRowThreads, 0, stream>>>(
                  x.as<T>(), dy.as<T>(), scale.as<T>(),
                  addend ? addend->as<T>() : nullptr, dx.as<T>(), mean.as<float>(),
                  inv_std_dev.as<float>(), part_g, part_b, rows, n, block_rows, fin);
        }))
      return;
    if (rows_run)
      layer_norm_grad_rows_kernel<T><<<static_cast<unsigned>(blocks), kRowThreads, 0, stream>>>(
          x.as<T>(), dy.as<T>(), param_of<T>(&scale, normalized),
          addend ? addend->as<T>() : nullptr, dx.as<T>(), mean.as<float>(),
          inv_std_dev.as<float>(), part_g, part_b, rows, n, block_rows, vector_rows<T>(n, 1),
          fin);
  });
  if (!fin.on) {
    // With no rows the parameter gradients are 0 (no blocks to sum).
    const int64_t used = rows_run ? blocks : 0;
    launch_param_grad(kernel, stream, part_g, used, normalized, dscale);
    if (dbias)
      launch_param_grad(kernel, stream, part_b, used, normalized, *dbias);
  }
  check_launch(kernel);
}

//===----------------------------------------------------------------------===//
// batch_norm, batch_norm_train, batch_norm_grad: one block per channel
//===----------------------------------------------------------------------===//

namespace {

struct ChannelTensor {
  void *p;
  DType dtype;
  __device__ float at(int64_t c) const { return load_any(p, dtype, c); }
  __device__ void set(int64_t c, float v) const { store_any(p, dtype, c, v); }
};
ChannelTensor channel(const Tensor &t) { return ChannelTensor{t.data, t.dtype}; }

// y = (x - mean_c) * scale_c / sqrt(var_c + eps) + bias_c, one thread per element.
template <typename T>
__global__ void batch_norm_kernel(const T *x, T *y, Channels ch, ChannelTensor scale,
                                  ChannelTensor bias, ChannelTensor mean, ChannelTensor var,
                                  float epsilon, int64_t total) {
  DSRT_GRID_STRIDE(i, total) {
    const int64_t c = (i / ch.spatial) % ch.c;
    const float k = scale.at(c) / sqrtf(var.at(c) + epsilon);
    y[i] = st<T>((ld(x[i]) - mean.at(c)) * k + bias.at(c));
  }
}

// Block c: the channel's mean and biased variance in f64, the running
// statistics (each read before it is written: outputs may be the inputs),
// then the normalized output.
template <typename T>
__global__ void batch_norm_train_kernel(const T *x, T *y, Channels ch, ChannelTensor scale,
                                        ChannelTensor bias, ChannelTensor running_mean,
                                        ChannelTensor running_var, ChannelTensor mean_out,
                                        ChannelTensor var_out, float *saved_mean,
                                        float *saved_inv, float epsilon, float momentum,
                                        float var_factor) {
  __shared__ double shared[32];
  const int64_t c = blockIdx.x, count = ch.n * ch.spatial;
  double sum = 0.0;
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x)
    sum += ld(x[((e / ch.spatial) * ch.c + c) * ch.spatial + e % ch.spatial]);
  sum = block_sum(sum, shared);
  const double m = sum / static_cast<double>(count);
  double sq = 0.0;
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
    const double d = ld(x[((e / ch.spatial) * ch.c + c) * ch.spatial + e % ch.spatial]) - m;
    sq += d * d;
  }
  sq = block_sum(sq, shared);
  const float mean_c = static_cast<float>(m);
  const float var_c = static_cast<float>(sq / static_cast<double>(count));
  const float inv = 1.0f / sqrtf(var_c + epsilon);
  if (threadIdx.x == 0) {
    saved_mean[c] = mean_c;
    saved_inv[c] = inv;
    const float rm = running_mean.at(c), rv = running_var.at(c);
    mean_out.set(c, rm * momentum + mean_c * (1.0f - momentum));
    var_out.set(c, rv * momentum + var_c * var_factor * (1.0f - momentum));
  }
  const float k = scale.at(c) * inv, b = bias.at(c);
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
    const int64_t i = ((e / ch.spatial) * ch.c + c) * ch.spatial + e % ch.spatial;
    y[i] = st<T>((ld(x[i]) - mean_c) * k + b);
  }
}

// Block c: sum(dy) (dbias) and sum(dy * xhat) (dscale) in f64, then
// dx = scale * inv * (dy - mean(dy) - xhat * mean(dy * xhat)).
template <typename T>
__global__ void batch_norm_grad_kernel(const T *dy, const T *x, T *dx, Channels ch,
                                       ChannelTensor scale, const float *saved_mean,
                                       const float *saved_inv, ChannelTensor dscale,
                                       ChannelTensor dbias) {
  __shared__ double shared[32];
  const int64_t c = blockIdx.x, count = ch.n * ch.spatial;
  const float m = saved_mean[c], k = saved_inv[c];
  double sd = 0.0, sdx = 0.0;
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
    const int64_t i = ((e / ch.spatial) * ch.c + c) * ch.spatial + e % ch.spatial;
    const double g = ld(dy[i]);
    sd += g;
    sdx += g * static_cast<double>((ld(x[i]) - m) * k);
  }
  sd = block_sum(sd, shared);
  sdx = block_sum(sdx, shared);
  const float scale_c = scale.at(c) * k;
  const float m1 = count > 0 ? static_cast<float>(sd / static_cast<double>(count)) : 0.0f;
  const float m2 = count > 0 ? static_cast<float>(sdx / static_cast<double>(count)) : 0.0f;
  // Every thread has the sums before any writes dx (which may be dy or x).
  __syncthreads();
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
    const int64_t i = ((e / ch.spatial) * ch.c + c) * ch.spatial + e % ch.spatial;
    const float xh = (ld(x[i]) - m) * k;
    dx[i] = st<T>(scale_c * (ld(dy[i]) - m1 - xh * m2));
  }
  if (threadIdx.x == 0) {
    dscale.set(c, static_cast<float>(sdx));
    dbias.set(c, static_cast<float>(sd));
  }
}

}  // namespace

void batch_norm(Stream &s, const Tensor &x, const Tensor &scale, const Tensor &bias,
                const Tensor &mean, const Tensor &var, const Tensor &y, float epsilon) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "batch_norm";
  Channels ch = check_batch_norm(kernel, x, scale, bias, mean, var, y);
  const int64_t total = x.numel();
  if (total == 0)
    return;
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    batch_norm_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        x.as<T>(), y.as<T>(), ch, channel(scale), channel(bias), channel(mean), channel(var),
        epsilon, total);
  });
  check_launch(kernel);
}

void batch_norm_train(Stream &s, const Tensor &x, const Tensor &scale, const Tensor &bias,
                      const Tensor &running_mean, const Tensor &running_var, const Tensor &y,
                      const Tensor &running_mean_out, const Tensor &running_var_out,
                      const Tensor &saved_mean, const Tensor &saved_inv_std, float epsilon,
                      float momentum, bool unbiased_running_var) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "batch_norm_train";
  Channels ch = check_batch_norm_train(kernel, x, scale, bias, running_mean, running_var, y,
                                       running_mean_out, running_var_out, saved_mean,
                                       saved_inv_std);
  if (ch.c == 0)
    return;
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    batch_norm_train_kernel<T><<<static_cast<unsigned>(ch.c), kRowThreads, 0, stream>>>(
        x.as<T>(), y.as<T>(), ch, channel(scale), channel(bias), channel(running_mean),
        channel(running_var), channel(running_mean_out), channel(running_var_out),
        saved_mean.as<float>(), saved_inv_std.as<float>(), epsilon, momentum,
        running_var_factor(ch.n * ch.spatial, unbiased_running_var));
  });
  check_launch(kernel);
}

void batch_norm_grad(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &scale,
                     const Tensor &saved_mean, const Tensor &saved_inv_std, const Tensor &dx,
                     const Tensor &dscale, const Tensor &dbias) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "batch_norm_grad";
  Channels ch = check_batch_norm_grad(kernel, dy, x, scale, saved_mean, saved_inv_std, dx, dscale,
                                      dbias);
  if (ch.c == 0)
    return;
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    batch_norm_grad_kernel<T><<<static_cast<unsigned>(ch.c), kRowThreads, 0, stream>>>(
        dy.as<T>(), x.as<T>(), dx.as<T>(), ch, channel(scale), saved_mean.as<float>(),
        saved_inv_std.as<float>(), channel(dscale), channel(dbias));
  });
  check_launch(kernel);
}

}  // namespace dsrt
