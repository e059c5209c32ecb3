// Internals of the cuda backend (on kernel_common.h): the cudaStream_t of a
// dsrt::Stream, CUDA error checks, f16/bf16 loads and stores in f32, launch
// shapes, cuBLASLt, and the device error word through which kernels report
// bad data (an index out of range) without a host sync. Not installed.
#ifndef DSRT_SRC_CUDA_COMMON_CUH
#define DSRT_SRC_CUDA_COMMON_CUH

#include "kernel_common.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace dsrt {
namespace detail {

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

// Throws dsrt::Error "dsrt::<kernel>: <what>: <CUDA's message>" unless ok.
void check_cuda(cudaError_t status, const char *kernel, const char *what);
void check_cublas(cublasStatus_t status, const char *kernel, const char *what);
// After a launch: a launch error (bad configuration, no device) throws.
// With synchronous ops it also waits for the kernel (on the stream of this
// thread's last begin_kernel): a device fault, or bad data the kernel
// reported in the error word, throws here, naming the kernel.
void check_launch(const char *kernel);
// DSRT_CUDA_SYNC=1: every kernel and every op is waited for when it ends
// (BackendInterface::synchronous_ops).
bool synchronous_ops();

// What a kernel found wrong in the data; reported by the first kernel to
// find an error, thrown by the next synchronize (stream, event or
// first_nonfinite) as dsrt::Error "dsrt::<kernel>: ...".
enum class DeviceFault : int32_t {
  None = 0,
  IndexOutOfRange,     // value = the index, bound = the axis size
  PositionOutOfRange,  // value = the flat position, bound = the element count
  LabelOutOfRange,     // value = the label, bound = the class count
  IntegerDivByZero,    // value = the element of the divisor
  BadStep,             // value = the optimizer step (torch.optim counts from 1)
};
struct DeviceErrorWord {
  int32_t fault;       // a DeviceFault; 0 while nothing was reported
  int32_t kernel;      // index into the kernel name table (kernel_id)
  long long value;
  long long bound;
};
// The word in pinned host memory mapped into the device: kernels write it,
// the host reads it after a sync.
DeviceErrorWord *device_error_word();
// An id for a kernel name (a string literal) that kernels store in the word.
int32_t kernel_id(const char *kernel);
// Throws the reported error, if any, and clears the word.
void throw_device_error();

__device__ inline void report_fault(DeviceErrorWord *word, DeviceFault fault, int32_t kernel,
                                    long long value, long long bound) {
  if (atomicCAS(&word->fault, 0, static_cast<int32_t>(fault)) == 0) {
    word->kernel = kernel;
    word->value = value;
    word->bound = bound;
    __threadfence_system();
  }
}

//===----------------------------------------------------------------------===//
// Streams
//===----------------------------------------------------------------------===//

// The cudaStream_t of `s` (created on first use). Every kernel starts here:
// host-side work pending on `s` (a collective, a file read) completes first,
// so that the kernel is queued after it.
cudaStream_t begin_kernel(Stream &s);
// The stream without waiting for host work (the backend's own calls).
cudaStream_t cuda_stream(Stream &s);
// Whether `s` has its cudaStream_t yet: one that has none has had no device
// work queued, so synchronizing or recording it needs no CUDA call (and
// creates nothing inside a step).
bool has_cuda_stream(Stream &s);
// kStreamScratchDoubles doubles of device memory owned by the stream, for a
// scalar one kernel leaves for the next on the same stream; all 0 when the
// stream takes them, so that a kernel may count finished blocks in a word
// of it that it leaves at 0 (loss.cu's totals; norm.cu's layer_norm_grad,
// from double 32 on; reduce.cu's sum_of_squares, its blocks' partial sums,
// from double kSquareScratchSlot on).
constexpr int kStreamScratchDoubles = 512;
constexpr int kSquareScratchSlot = 64;
double *stream_scratch(Stream &s);

//===----------------------------------------------------------------------===//
// Element loads and stores: f16/bf16 compute in f32
//===----------------------------------------------------------------------===//

template <typename T> struct Dev {
  using compute = T;  // integers and bool compute in their own type
  __device__ static T load(T v) { return v; }
  __device__ static T store(T v) { return v; }
};
template <> struct Dev<half_t> {
  using compute = float;
  __device__ static float load(half_t v) { return __half2float(__ushort_as_half(v.bits)); }
  __device__ static half_t store(float v) { return half_t{__half_as_ushort(__float2half_rn(v))}; }
};
template <> struct Dev<bfloat_t> {
  using compute = float;
  __device__ static float load(bfloat_t v) {
    return __bfloat162float(__ushort_as_bfloat16(v.bits));
  }
  __device__ static bfloat_t store(float v) {
    return bfloat_t{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
  }
};
template <typename T> __device__ inline float ld(const T &v) {
  return static_cast<float>(Dev<T>::load(v));
}
template <typename T> __device__ inline T st(float v) { return Dev<T>::store(v); }

// 2^x as the hardware's ex2 alone: ex2.approx.ftz.f32, one MUFU.EX2 on
// sm_90. exp2f is the same MUFU.EX2 (the same approximation for normal
// results) inside a range test and two predicated multiplies that keep
// subnormal results (FSETP.GEU and 2 x @!P FMUL beside each MUFU.EX2 in
// the sm_90 SASS): four instructions where this is one. Subnormal results
// (x < -126) are zeros here: for the softmax kernels, whose exponentials
// are at most 1 and are summed with a largest term of 1, they count for
// nothing. ex2(-inf) is +0. Elsewhere (the host pass, the CUDA emulation)
// exp2f with its subnormal results flushed, the same zeros.
__device__ inline float exp2_ftz(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  const float y = exp2f(x);
  return y < 1.17549435e-38f ? 0.0f : y;  // FLT_MIN
#endif
}

// Element i of a float tensor whose type is known at run time only (a
// per-channel parameter, a scalar such as lr), and the inverse.
__device__ inline float load_any(const void *p, DType dtype, int64_t i) {
  switch (dtype) {
  case DType::F16: return ld(static_cast<const half_t *>(p)[i]);
  case DType::BF16: return ld(static_cast<const bfloat_t *>(p)[i]);
  default: return static_cast<const float *>(p)[i];
  }
}
__device__ inline void store_any(void *p, DType dtype, int64_t i, float v) {
  switch (dtype) {
  case DType::F16: static_cast<half_t *>(p)[i] = st<half_t>(v); break;
  case DType::BF16: static_cast<bfloat_t *>(p)[i] = st<bfloat_t>(v); break;
  default: static_cast<float *>(p)[i] = v; break;
  }
}

//===----------------------------------------------------------------------===//
// Launch shapes
//===----------------------------------------------------------------------===//

constexpr int kThreads = 256;
// Blocks of kThreads for a grid-stride loop over n elements.
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 32 ? 65535 * 32 : b));
}
// Blocks of `threads` for a memory-bound grid-stride loop over `units`
// (vectors, rows): one block per `threads` units up to 2048 blocks, about
// two waves of 8 blocks of 256 threads an SM on a 132-SM GPU, so that each
// thread's setup (a division) is shared by several units.
// DSRT_CUDA_MAX_BLOCKS=N caps the grid lower (tests: every thread then
// loops, as on a GPU with large tensors).
unsigned stream_blocks(int64_t units, int threads = kThreads);
#define DSRT_GRID_STRIDE(i, n)                                                              \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n);    \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// The shared memory a block gets without opting in to more: all of its
// static shared memory (__shared__) must fit it.
constexpr size_t kStaticSharedBytes = 48 * 1024;
// Whether `Kernel` (a __global__ function with no static shared memory) may
// be launched with `bytes` of dynamic shared memory. A launch gets at most
// 48 KiB unless the kernel opts in to more: its
// cudaFuncAttributeMaxDynamicSharedMemorySize, which may not pass the
// device's cudaDevAttrMaxSharedMemoryPerBlockOptin. The first call per
// kernel decides, once (the process's one device; no synchronization):
// true with the attribute set, false where the device's limit is lower
// (the caller launches a form that needs less). A CUDA call that fails
// throws "dsrt::<op>: ...", naming the kernel (`name`) and the size.
// The most dynamic shared memory a block may opt in to on the process's
// one device (cudaDevAttrMaxSharedMemoryPerBlockOptin), read once.
inline size_t shared_optin_limit(const char *op) {
  static const size_t limit = [&] {
    int device = 0, bytes = 0;
    check_cuda(cudaGetDevice(&device), op, "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), op,
               "cudaDeviceGetAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin)");
    return static_cast<size_t>(bytes);
  }();
  return limit;
}
template <auto Kernel> bool opt_in_dynamic_shared(const char *op, const char *name, size_t bytes) {
  static const bool ok = [&] {
    if (bytes <= kStaticSharedBytes)
      return true;
    if (bytes > shared_optin_limit(op))
      return false;
    const std::string what = std::string("cudaFuncSetAttribute(") + name +
                             ", cudaFuncAttributeMaxDynamicSharedMemorySize, " +
                             std::to_string(bytes) + " bytes)";
    check_cuda(cudaFuncSetAttribute(reinterpret_cast<const void *>(Kernel),
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)),
               op, what.c_str());
    return true;
  }();
  return ok;
}

// Sum of one value per lane over a warp, in a fixed butterfly; every lane
// gets the total.
template <typename T> __device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum of one value per thread over a block of blockDim.x (a multiple of 32,
// at most 1024) threads; every thread gets the total. `shared` holds 32.
template <typename T> __device__ inline T block_sum(T v, T *shared) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = lane < warps ? shared[lane] : T(0);
  return warp_sum(v);
}
template <typename T> __device__ inline T block_max(T v, T *shared) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = lane < warps ? shared[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Index of output element i of a broadcast plan in operand k.
__device__ inline int64_t plan_offset(const BroadcastPlan &p, int k, int64_t i) {
  int64_t off = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    const int64_t q = i / p.dims[d];
    off += (i - q * p.dims[d]) * p.strides[k][d];
    i = q;
  }
  return off;
}

//===----------------------------------------------------------------------===//
// cuBLASLt
//===----------------------------------------------------------------------===//

// The process's cuBLASLt handle (created on first use).
cublasLtHandle_t cublaslt();
// Row-major f32 c = alpha op(a) op(b) + beta c (c is [m, n], a and b
// contiguous), on cuBLASLt with no workspace (linalg.cu).
void lt_gemm_f32(cudaStream_t stream, const char *kernel, bool trans_a, bool trans_b, int64_t m,
                 int64_t n, int64_t k, float alpha, const float *a, const float *b, float beta,
                 float *c);
// True when DSRT_ALLOW_TF32=1: f32 GEMMs may use TF32 tensor cores.
bool allow_tf32();
// A switch of the environment: `name`'s value as the index of
// `first` (also unset or empty, the default) or `second`; any other value
// is an Error saying "dsrt: NAME must be FIRST or SECOND, not 'VALUE'".
// Callers read it once (a function-local static).
bool env_second(const char *name, const char *first, const char *second);
// DSRT_CUBLASLT_WORKSPACE=N (bytes, read once): at most N of a product's
// planned workspace bytes go to cuBLASLt (unset: all of them), to compare
// algorithms on one plan; anything but a byte count is an error.
int64_t cublaslt_workspace_cap();
// DSRT_CUBLASLT_TUNE=N (read once; unset, 0 or 1: off): each f16/bf16 or
// f32 product's first call times up to N of cuBLASLt's heuristic
// algorithms and keeps the fastest (linalg.cu, tune_algo); more than 16,
// or not a count, is an error.
int cublaslt_tune();
// DSRT_BIAS_GRAD (read once): epilogue (unset: the default) runs a weight
// gradient with its bias gradient as one cuBLASLt call with the BGRADA or
// BGRADB epilogue; separate runs the plain product and then the column sums
// (the epilogue's fallback); anything else is an error.
bool bias_grad_epilogue();

}  // namespace detail
}  // namespace dsrt

#endif  // DSRT_SRC_CUDA_COMMON_CUH
