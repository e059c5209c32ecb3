// Optimizer updates on the cuda backend: one fused elementwise kernel per
// tensor update (every state read and written in one pass), with the same
// formulas as the cpu kernels. lr and step live in device memory: each
// thread reads them and computes the scalar adjustments (bias corrections
// in f64, as torch.optim) itself, so nothing is read back to the host. A
// step below 1 for adamw and sgd is reported through the device error word.
// Every element's inputs are read before its outputs are written, so the
// outputs may be the inputs. adamw_multi takes 16-byte vectors of aligned
// tensors, 16 blocks a chunk of the list's concatenation. The gradient has
// the parameter's type, or is the bf16/f16 gradient of an f32 parameter
// (mixed precision), converted an element at a time.
#include "cuda/chunk_table.h"
#include "cuda/common.cuh"
#include "dsrt/math.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace dsrt {

using namespace detail;

namespace {

// The gradient as the kernels read it: element i in f32, whatever its type,
// times the update's gradient scale when it has one (an f32 scalar in
// device memory). The product is rounded on its own (__fmul_rn is never
// contracted into an fma), as the scaled copy of a gradient it replaces.
struct GradIn {
  const void *data;
  DType dtype;
  const float *scale = nullptr;
  __device__ float operator[](int64_t i) const {
    const float g = load_any(data, dtype, i);
    return scale ? __fmul_rn(g, *scale) : g;
  }
};

GradIn grad_in(const Tensor &grad, const Tensor *grad_scale) {
  return GradIn{grad.data, grad.dtype, grad_scale ? grad_scale->as<float>() : nullptr};
}

// Mixed precision's 16-bit working copy of the updated f32 parameter, when
// the update writes one (data null otherwise): element i rounded to bf16 or
// f16 as cast rounds it (st<T>), from the update's own loop.
struct CopyOut {
  void *data = nullptr;
  DType dtype = DType::BF16;
  __device__ void put(int64_t i, float p) const {
    if (data)
      store_any(data, dtype, i, p);
  }
};

CopyOut copy_out(const Tensor *copy) {
  return copy ? CopyOut{copy->data, copy->dtype} : CopyOut{};
}

// lr (any float type) and step (i64, may be absent) as the kernels read them.
struct StepScalars {
  const void *lr;
  DType lr_dtype;
  const int64_t *step;  // null: no step count
  __device__ double rate() const { return load_any(lr, lr_dtype, 0); }
  __device__ int64_t t() const { return step ? *step : 0; }
};

StepScalars scalars(const Tensor &lr, const Tensor *step) {
  return StepScalars{lr.data, lr.dtype, step ? step->as<int64_t>() : nullptr};
}

// torch.optim counts steps from 1: a thread that finds another reports it
// and leaves its element unchanged.
__device__ inline bool step_ok(int64_t t, DeviceErrorWord *err, int32_t kid) {
  if (t >= 1)
    return true;
  report_fault(err, DeviceFault::BadStep, kid, t, 1);
  return false;
}

// Adam(W)'s settings and the step's scalars as torch.optim.Adam(W) computes
// them (in double), each rounded once to f32 where the tensor arithmetic
// uses it.
struct AdamSettings {
  float beta1, beta2, epsilon, weight_decay;
  bool decoupled;
};
struct AdamScalars {
  float step_size, bc2_sqrt, decay, l2, b1, b2, c1, c2, epsilon;
  bool ok;
  __device__ AdamScalars(const StepScalars &sc, const AdamSettings &a, DeviceErrorWord *err,
                         int32_t kid) {
    const int64_t t = sc.t();
    ok = step_ok(t, err, kid);
    const double lr = sc.rate();
    const double bc1 = 1.0 - pow(static_cast<double>(a.beta1), static_cast<double>(t));
    const double bc2 = 1.0 - pow(static_cast<double>(a.beta2), static_cast<double>(t));
    step_size = static_cast<float>(lr / bc1);
    bc2_sqrt = static_cast<float>(sqrt(bc2));
    decay = a.decoupled ? static_cast<float>(1.0 - lr * a.weight_decay) : 1.0f;
    l2 = a.decoupled ? 0.0f : a.weight_decay;
    b1 = a.beta1;
    b2 = a.beta2;
    c1 = static_cast<float>(1.0 - a.beta1);
    c2 = static_cast<float>(1.0 - a.beta2);
    epsilon = a.epsilon;
  }
  // One element's update in f32 from its parameter p, (scaled) gradient
  // g0 and states m0, v0: the new p1, m1, v1 (every path's arithmetic).
  __device__ void step(float p, float g0, float m0, float v0, float &p1, float &m1,
                       float &v1) const {
    const float g = g0 + l2 * p;
    m1 = b1 * m0 + c1 * g;
    v1 = b2 * v0 + c2 * g * g;
    const float denom = sqrtf(v1) / bc2_sqrt + epsilon;
    p1 = p * decay - step_size * (m1 / denom);
  }
  // Element i of one tensor.
  template <typename T>
  __device__ void update(const T *param, GradIn grad, const T *m, const T *v, T *param_out,
                         T *m_out, T *v_out, CopyOut copy, int64_t i) const {
    float p1, m1, v1;
    step(ld(param[i]), grad[i], ld(m[i]), ld(v[i]), p1, m1, v1);
    param_out[i] = st<T>(p1);
    copy.put(i, p1);
    m_out[i] = st<T>(m1);
    v_out[i] = st<T>(v1);
  }
};

template <typename T>
__global__ void adamw_kernel(StepScalars sc, const T *param, GradIn grad, const T *m,
                             const T *v, T *param_out, T *m_out, T *v_out, CopyOut copy,
                             int64_t n, AdamSettings settings, DeviceErrorWord *err,
                             int32_t kid) {
  const AdamScalars a(sc, settings, err, kid);
  DSRT_GRID_STRIDE(i, n) {
    if (!a.ok)
      break;
    a.update(param, grad, m, v, param_out, m_out, v_out, copy, i);
  }
}

// adamw_multi: one block per chunk of the list's concatenation
// (chunk_table.h). A launch's table is passed by value in the kernel's
// parameters (about 9 KiB; sm_70+ with CUDA 12.1+ takes 32 KiB). The tables
// of a list are built once, on its first call, and kept: the plan fixes
// every tensor's address and size, so each step's call finds them again.
// The chunk tables of each list met so far, by its addresses and sizes.
std::shared_ptr<const std::vector<ChunkTable>> cached_chunk_tables(const Tensor *params, const Tensor *grads,
                                             const Tensor *ms, const Tensor *vs,
                                             const Tensor *params_out, const Tensor *ms_out,
                                             const Tensor *vs_out, int num_tensors) {
  static std::mutex mutex;
  static std::map<std::vector<uintptr_t>, std::shared_ptr<const std::vector<ChunkTable>>> cache;
  std::vector<uintptr_t> key;
  std::vector<int64_t> sizes;
  key.reserve(8 * num_tensors);
  for (int i = 0; i < num_tensors; ++i) {
    for (const Tensor *list : {params, grads, ms, vs, params_out, ms_out, vs_out})
      key.push_back(reinterpret_cast<uintptr_t>(list[i].data));
    sizes.push_back(params[i].numel());
    key.push_back(static_cast<uintptr_t>(sizes.back()));
  }
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    // A program calls with a few lists, the same every step; anything else
    // (tests, lists in fresh memory) must not grow the cache without bound.
    if (cache.size() >= 64)
      cache.clear();
    it = cache
             .emplace(std::move(key), std::make_shared<const std::vector<ChunkTable>>(
                                          chunk_tables(sizes.data(), num_tensors)))
             .first;
  }
  return it->second;
}

template <typename T> struct ChunkLaunch {
  const T *param[kChunkTensors], *m[kChunkTensors], *v[kChunkTensors];
  GradIn grad[kChunkTensors];
  T *param_out[kChunkTensors], *m_out[kChunkTensors], *v_out[kChunkTensors];
  CopyOut copy[kChunkTensors];
  // Every pointer of slot k 16-byte aligned: its pieces go in vectors.
  bool aligned[kChunkTensors];
  int first_piece[kChunkBlocks + 1];
  ChunkPiece piece[kChunkPieces];
};
static_assert(sizeof(ChunkLaunch<float>) < 32000, "kernel parameters are limited to 32 KiB");

// Each chunk of kChunkElements goes to kAdamSplit blocks, block s of a
// chunk taking its elements [s, s + 1) * kAdamSplitElements (in the pieces'
// order): 16 blocks of 4096 elements a chunk, so that a launch's up to 5120
// blocks fill the GPU in several waves rather than 320 blocks in one
// uneven one. In a piece of an aligned slot a thread takes units of V
// elements (16 bytes of T: 4 f32, 8 f16/bf16; the gradient and the copy
// the same V elements in their types), the elements before the first
// whole unit and after the last one a thread each. The same step() per
// element as adamw: the same bytes.
constexpr int kAdamSplit = 16;
constexpr int64_t kAdamSplitElements = kChunkElements / kAdamSplit;

// V consecutive elements of type U from element i (aligned to V), in f32.
template <typename U, int V>
__device__ inline void load_f32(const void *data, int64_t i, float (&out)[V]) {
  const auto pack = *reinterpret_cast<const math::Vector<U, V> *>(static_cast<const U *>(data) + i);
  for (int j = 0; j < V; ++j)
    out[j] = ld(pack.lane[j]);
}
// p's V values rounded to U, stored at element i (aligned to V).
template <typename U, int V>
__device__ inline void store_rounded(void *data, int64_t i, const float (&p)[V]) {
  math::Vector<U, V> pack;
  for (int j = 0; j < V; ++j)
    pack.lane[j] = st<U>(p[j]);
  *reinterpret_cast<math::Vector<U, V> *>(static_cast<U *>(data) + i) = pack;
}

// V consecutive elements of the gradient from element i (aligned to V), in
// f32, scaled as GradIn's operator[] scales one.
template <int V>
__device__ inline void load_grad(const GradIn &grad, int64_t i, float (&g)[V]) {
  if (grad.dtype == DType::F16)
    load_f32<half_t, V>(grad.data, i, g);
  else if (grad.dtype == DType::BF16)
    load_f32<bfloat_t, V>(grad.data, i, g);
  else
    load_f32<float, V>(grad.data, i, g);
  if (grad.scale) {
    const float scale = *grad.scale;
    for (int j = 0; j < V; ++j)
      g[j] = __fmul_rn(g[j], scale);
  }
}

// The copy's V elements from element i (aligned to V), rounded as put().
template <int V> __device__ inline void store_copy(const CopyOut &copy, int64_t i, const float (&p)[V]) {
  if (!copy.data)
    return;
  if (copy.dtype == DType::F16)
    store_rounded<half_t, V>(copy.data, i, p);
  else if (copy.dtype == DType::BF16)
    store_rounded<bfloat_t, V>(copy.data, i, p);
  else
    for (int j = 0; j < V; ++j)
      copy.put(i + j, p[j]);
}

template <typename T>
__device__ inline void adamw_units(const AdamScalars &a, const ChunkLaunch<T> &launch, int k,
                                   int64_t i) {
  constexpr int V = 16 / sizeof(T);
  using Vec = math::Vector<T, V>;
  const Vec p0 = *reinterpret_cast<const Vec *>(launch.param[k] + i);
  const Vec m0 = *reinterpret_cast<const Vec *>(launch.m[k] + i);
  const Vec v0 = *reinterpret_cast<const Vec *>(launch.v[k] + i);
  float g[V];
  load_grad<V>(launch.grad[k], i, g);
  Vec p1, m1, v1;
  float pf[V];
  for (int j = 0; j < V; ++j) {
    float pj, mj, vj;
    a.step(ld(p0.lane[j]), g[j], ld(m0.lane[j]), ld(v0.lane[j]), pj, mj, vj);
    pf[j] = pj;
    p1.lane[j] = st<T>(pj);
    m1.lane[j] = st<T>(mj);
    v1.lane[j] = st<T>(vj);
  }
  *reinterpret_cast<Vec *>(launch.param_out[k] + i) = p1;
  store_copy<V>(launch.copy[k], i, pf);
  *reinterpret_cast<Vec *>(launch.m_out[k] + i) = m1;
  *reinterpret_cast<Vec *>(launch.v_out[k] + i) = v1;
}

template <typename T>
__global__ void adamw_multi_kernel(StepScalars sc, ChunkLaunch<T> launch, AdamSettings settings,
                                   DeviceErrorWord *err, int32_t kid) {
  constexpr int V = 16 / sizeof(T);
  const AdamScalars a(sc, settings, err, kid);
  if (!a.ok)
    return;
  const int chunk = blockIdx.x / kAdamSplit;
  const int64_t lo = (blockIdx.x % kAdamSplit) * kAdamSplitElements, hi = lo + kAdamSplitElements;
  int64_t offset = 0;  // of the piece in its chunk
  for (int p = launch.first_piece[chunk]; p < launch.first_piece[chunk + 1]; ++p) {
    const ChunkPiece piece = launch.piece[p];
    const int k = piece.tensor;
    // This block's part of the piece: elements [s0, s1) of tensor k.
    const int64_t s0 = piece.start + (lo > offset ? lo - offset : 0);
    const int64_t s1 = piece.start + (hi - offset < piece.len ? hi - offset : piece.len);
    offset += piece.len;
    if (s0 >= s1)
      continue;
    int64_t u0 = s1, u1 = s1;  // the whole units [u0, u1)
    if (launch.aligned[k]) {
      u0 = (s0 + V - 1) / V * V;
      u0 = u0 < s1 ? u0 : s1;
      u1 = u0 + (s1 - u0) / V * V;
    }
    for (int64_t i = u0 + static_cast<int64_t>(threadIdx.x) * V; i < u1;
         i += static_cast<int64_t>(blockDim.x) * V)
      adamw_units(a, launch, k, i);
    // The elements outside whole units: before u0, and from u1 on.
    const int64_t before = u0 - s0;
    for (int64_t e = threadIdx.x; e < before + (s1 - u1); e += blockDim.x) {
      const int64_t i = e < before ? s0 + e : u1 + (e - before);
      a.update(launch.param[k], launch.grad[k], launch.m[k], launch.v[k], launch.param_out[k],
               launch.m_out[k], launch.v_out[k], launch.copy[k], i);
    }
  }
}

template <typename T>
__global__ void sgd_kernel(StepScalars sc, const T *param, GradIn grad, const T *velocity,
                           T *param_out, T *velocity_out, CopyOut copy, int64_t n, float momentum,
                           float dampening, float weight_decay, bool nesterov,
                           DeviceErrorWord *err, int32_t kid) {
  const int64_t t = sc.t();
  const bool ok = step_ok(t, err, kid);
  const float rate = static_cast<float>(sc.rate());
  const float one_minus_dampening = static_cast<float>(1.0 - dampening);
  DSRT_GRID_STRIDE(i, n) {
    if (!ok)
      break;
    const float p = ld(param[i]), g = grad[i] + weight_decay * p, v = ld(velocity[i]);
    if (momentum == 0.0f) {
      const float p1 = p - rate * g;
      param_out[i] = st<T>(p1);
      copy.put(i, p1);
      velocity_out[i] = st<T>(v);  // without momentum the velocity passes through
    } else {
      // buf = g at step 1 (the velocity input is not read).
      const float buf = t == 1 ? g : momentum * v + one_minus_dampening * g;
      const float d = nesterov ? g + momentum * buf : buf;
      const float p1 = p - rate * d;
      param_out[i] = st<T>(p1);
      copy.put(i, p1);
      velocity_out[i] = st<T>(buf);
    }
  }
}

template <typename T>
__global__ void lion_kernel(StepScalars sc, const T *param, GradIn grad, const T *m,
                            T *param_out, T *m_out, CopyOut copy, int64_t n, float beta1,
                            float beta2,
                            float weight_decay) {
  const double lr = sc.rate();
  const float rate = static_cast<float>(lr);
  const float decay = static_cast<float>(1.0 - lr * weight_decay);
  const float c1 = static_cast<float>(1.0 - beta1), c2 = static_cast<float>(1.0 - beta2);
  DSRT_GRID_STRIDE(i, n) {
    const float p = ld(param[i]), g = grad[i], m0 = ld(m[i]);
    const float c = beta1 * m0 + c1 * g;
    // sign(c) as torch.sign: 0 for 0, NaN for NaN.
    const float sign = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : c);
    const float p1 = p * decay - rate * sign;
    param_out[i] = st<T>(p1);
    copy.put(i, p1);
    m_out[i] = st<T>(beta2 * m0 + c2 * g);
  }
}

template <typename T>
__global__ void adam_kernel(StepScalars sc, const T *param, GradIn grad, const T *m,
                            const T *v, T *param_out, T *m_out, T *v_out, int64_t n, float alpha,
                            float beta, float epsilon, float norm_coefficient,
                            float norm_coefficient_post) {
  // r' = lr * sqrt(1 - beta^t) / (1 - alpha^t) for t > 0 (bias correction).
  const int64_t t = sc.t();
  double r = sc.rate();
  if (t > 0)
    r = r * sqrt(1.0 - pow(static_cast<double>(beta), static_cast<double>(t))) /
        (1.0 - pow(static_cast<double>(alpha), static_cast<double>(t)));
  const float rate = static_cast<float>(r);
  DSRT_GRID_STRIDE(i, n) {
    const float x = ld(param[i]);
    const float g = grad[i] + norm_coefficient * x;
    const float v1 = alpha * ld(m[i]) + (1.0f - alpha) * g;
    const float h1 = beta * ld(v[i]) + (1.0f - beta) * g * g;
    const float x1 = x - rate * (v1 / (sqrtf(h1) + epsilon));
    param_out[i] = st<T>((1.0f - norm_coefficient_post) * x1);
    m_out[i] = st<T>(v1);
    v_out[i] = st<T>(h1);
  }
}

template <typename T>
__global__ void momentum_kernel(StepScalars sc, const T *param, GradIn grad, const T *velocity,
                                T *param_out, T *velocity_out, int64_t n, float alpha,
                                float beta, bool nesterov, float norm_coefficient) {
  const float rate = static_cast<float>(sc.rate());
  // The gradient's coefficient is 1 on the first step.
  const float beta_t = sc.t() > 0 ? beta : 1.0f;
  DSRT_GRID_STRIDE(i, n) {
    const float x = ld(param[i]);
    const float g = grad[i] + norm_coefficient * x;
    const float v1 = alpha * ld(velocity[i]) + beta_t * g;
    param_out[i] = st<T>(nesterov ? x - rate * (g + alpha * v1) : x - rate * v1);
    velocity_out[i] = st<T>(v1);
  }
}

template <typename T>
__global__ void adagrad_kernel(StepScalars sc, const T *param, GradIn grad, const T *acc,
                               T *param_out, T *acc_out, int64_t n, float decay_factor,
                               float epsilon, float norm_coefficient) {
  // r = lr / (1 + t * decay_factor)
  const float rate = static_cast<float>(
      sc.rate() / (1.0 + static_cast<double>(sc.t()) * static_cast<double>(decay_factor)));
  DSRT_GRID_STRIDE(i, n) {
    const float x = ld(param[i]);
    const float g = grad[i] + norm_coefficient * x;
    const float h1 = ld(acc[i]) + g * g;
    param_out[i] = st<T>(x - rate * g / (sqrtf(h1) + epsilon));
    acc_out[i] = st<T>(h1);
  }
}

}  // namespace

void adamw(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param,
           const Tensor &grad, const Tensor &m, const Tensor &v, const Tensor &param_out,
           const Tensor &m_out, const Tensor &v_out, float beta1, float beta2, float epsilon,
           float weight_decay, bool decoupled, const Tensor *grad_scale,
           const Tensor *param_copy) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "adamw";
  const Tensor *states[] = {&grad, &m, &v, &param_out, &m_out, &v_out};
  const char *names[] = {"grad", "m", "v", "param_out", "m_out", "v_out"};
  check_optimizer_args(kernel, lr, &step, param, states, names, 6);
  check_grad_scale(kernel, grad_scale);
  check_param_copy(kernel, param, param_copy);
  const int64_t n = param.numel();
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    adamw_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        scalars(lr, &step), param.as<T>(), grad_in(grad, grad_scale), m.as<T>(), v.as<T>(), param_out.as<T>(),
        m_out.as<T>(), v_out.as<T>(), copy_out(param_copy), n, AdamSettings{beta1, beta2, epsilon, weight_decay, decoupled},
        device_error_word(), kernel_id(kernel));
  });
  check_launch(kernel);
}

void adamw_multi(Stream &s, const Tensor &lr, const Tensor &step, int num_tensors,
                 const Tensor *params, const Tensor *grads, const Tensor *ms, const Tensor *vs,
                 const Tensor *params_out, const Tensor *ms_out, const Tensor *vs_out,
                 float beta1, float beta2, float epsilon, float weight_decay, bool decoupled,
                 const Tensor *grad_scale, const Tensor *params_copy) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "adamw_multi";
  check_adamw_multi_args(kernel, lr, step, num_tensors, params, grads, ms, vs, params_out, ms_out,
                         vs_out);
  check_grad_scale(kernel, grad_scale);
  if (params_copy)
    for (int i = 0; i < num_tensors; ++i)
      check_param_copy(kernel, params[i], &params_copy[i]);
  if (num_tensors == 0)
    return;
  const AdamSettings settings{beta1, beta2, epsilon, weight_decay, decoupled};
  const std::shared_ptr<const std::vector<ChunkTable>> tables =
      cached_chunk_tables(params, grads, ms, vs, params_out, ms_out, vs_out, num_tensors);
  dispatch_float(kernel, params[0].dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (const ChunkTable &table : *tables) {
      ChunkLaunch<T> launch{};
      for (int k = 0; k < table.num_tensors; ++k) {
        const int i = table.tensor[k];
        launch.param[k] = params[i].as<T>();
        launch.grad[k] = grad_in(grads[i], grad_scale);
        launch.m[k] = ms[i].as<T>();
        launch.v[k] = vs[i].as<T>();
        launch.param_out[k] = params_out[i].as<T>();
        launch.m_out[k] = ms_out[i].as<T>();
        launch.v_out[k] = vs_out[i].as<T>();
        const Tensor *copy = params_copy ? &params_copy[i] : nullptr;
        launch.copy[k] = copy_out(copy);
        bool aligned = true;
        for (const void *p : {params[i].data, grads[i].data, ms[i].data, vs[i].data,
                              params_out[i].data, ms_out[i].data, vs_out[i].data,
                              copy ? copy->data : nullptr})
          aligned = aligned && reinterpret_cast<uintptr_t>(p) % 16 == 0;
        launch.aligned[k] = aligned;
      }
      std::copy(table.first_piece, table.first_piece + table.num_blocks + 1, launch.first_piece);
      std::copy(table.piece, table.piece + table.num_pieces, launch.piece);
      adamw_multi_kernel<T><<<table.num_blocks * kAdamSplit, kThreads, 0, stream>>>(
          scalars(lr, &step), launch, settings, device_error_word(), kernel_id(kernel));
      check_launch(kernel);
    }
  });
}

void sgd(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param,
         const Tensor &grad, const Tensor &velocity, const Tensor &param_out,
         const Tensor &velocity_out, float momentum, float dampening, float weight_decay,
         bool nesterov, const Tensor *grad_scale, const Tensor *param_copy) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "sgd";
  const Tensor *states[] = {&grad, &velocity, &param_out, &velocity_out};
  const char *names[] = {"grad", "velocity", "param_out", "velocity_out"};
  check_optimizer_args(kernel, lr, &step, param, states, names, 4);
  check_sgd_modes(kernel, momentum, dampening, nesterov);
  check_grad_scale(kernel, grad_scale);
  check_param_copy(kernel, param, param_copy);
  const int64_t n = param.numel();
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    sgd_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        scalars(lr, &step), param.as<T>(), grad_in(grad, grad_scale), velocity.as<T>(), param_out.as<T>(),
        velocity_out.as<T>(), copy_out(param_copy), n, momentum, dampening, weight_decay, nesterov,
        device_error_word(), kernel_id(kernel));
  });
  check_launch(kernel);
}

void lion(Stream &s, const Tensor &lr, const Tensor &param, const Tensor &grad, const Tensor &m,
          const Tensor &param_out, const Tensor &m_out, float beta1, float beta2,
          float weight_decay, const Tensor *grad_scale, const Tensor *param_copy) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "lion";
  const Tensor *states[] = {&grad, &m, &param_out, &m_out};
  const char *names[] = {"grad", "m", "param_out", "m_out"};
  check_optimizer_args(kernel, lr, nullptr, param, states, names, 4);
  check_grad_scale(kernel, grad_scale);
  check_param_copy(kernel, param, param_copy);
  const int64_t n = param.numel();
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    lion_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        scalars(lr, nullptr), param.as<T>(), grad_in(grad, grad_scale), m.as<T>(), param_out.as<T>(),
        m_out.as<T>(), copy_out(param_copy), n, beta1, beta2, weight_decay);
  });
  check_launch(kernel);
}

void adam(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param, const Tensor &grad,
          const Tensor &m, const Tensor &v, const Tensor &param_out, const Tensor &m_out,
          const Tensor &v_out, float alpha, float beta, float epsilon, float norm_coefficient,
          float norm_coefficient_post) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "adam";
  const Tensor *states[] = {&grad, &m, &v, &param_out, &m_out, &v_out};
  const char *names[] = {"grad", "first_moment", "second_moment", "param_out",
                         "first_moment_out", "second_moment_out"};
  check_optimizer_args(kernel, lr, &step, param, states, names, 6);
  const int64_t n = param.numel();
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    adam_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        scalars(lr, &step), param.as<T>(), GradIn{grad.data, grad.dtype}, m.as<T>(), v.as<T>(), param_out.as<T>(),
        m_out.as<T>(), v_out.as<T>(), n, alpha, beta, epsilon, norm_coefficient,
        norm_coefficient_post);
  });
  check_launch(kernel);
}

void momentum(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param,
              const Tensor &grad, const Tensor &velocity, const Tensor &param_out,
              const Tensor &velocity_out, float alpha, float beta, MomentumMode mode,
              float norm_coefficient) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "momentum";
  const Tensor *states[] = {&grad, &velocity, &param_out, &velocity_out};
  const char *names[] = {"grad", "velocity", "param_out", "velocity_out"};
  check_optimizer_args(kernel, lr, &step, param, states, names, 4);
  const int64_t n = param.numel();
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    momentum_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        scalars(lr, &step), param.as<T>(), GradIn{grad.data, grad.dtype}, velocity.as<T>(), param_out.as<T>(),
        velocity_out.as<T>(), n, alpha, beta, mode == MomentumMode::Nesterov, norm_coefficient);
  });
  check_launch(kernel);
}

void adagrad(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param,
             const Tensor &grad, const Tensor &accumulator, const Tensor &param_out,
             const Tensor &accumulator_out, float decay_factor, float epsilon,
             float norm_coefficient) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "adagrad";
  const Tensor *states[] = {&grad, &accumulator, &param_out, &accumulator_out};
  const char *names[] = {"grad", "accumulator", "param_out", "accumulator_out"};
  check_optimizer_args(kernel, lr, &step, param, states, names, 4);
  const int64_t n = param.numel();
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    adagrad_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        scalars(lr, &step), param.as<T>(), GradIn{grad.data, grad.dtype}, accumulator.as<T>(), param_out.as<T>(),
        accumulator_out.as<T>(), n, decay_factor, epsilon, norm_coefficient);
  });
  check_launch(kernel);
}

}  // namespace dsrt
