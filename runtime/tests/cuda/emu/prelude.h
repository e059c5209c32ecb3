// The CUDA emulation's prelude (docs/runtime.md, "The CUDA emulation"):
// force-included (-include) before every CUDA source compiled as C++ for the
// emulation, after rewrite_launches.py has turned each `k<<<g, b, s, st>>>(a)`
// into a call of dsemu::launch. It gives device code what nvcc would:
// threadIdx, blockIdx, blockDim and gridDim of the emulated thread,
// __syncthreads, warp shuffles and votes, atomics, fences and the device
// math intrinsics; `__shared__` variables are statics (blocks run one after
// another), placed in one section that each block starts with filled with
// 0xff bytes (NaN in a float, -1 in an integer) so that a kernel reading
// shared memory it did not write shows it; GCC leaves the statics of
// function templates out of the section, so each declaration also fills
// its variable when a block first passes it (fresh_shared). The CUDA headers are included
// first and compile their host paths (the f16/bf16 conversions are the
// toolkit's own).
#ifndef DSRT_TESTS_CUDA_EMU_PRELUDE_H
#define DSRT_TESTS_CUDA_EMU_PRELUDE_H

#ifdef __CUDACC__
#error "the CUDA emulation's prelude is for a host C++ compiler, not nvcc"
#endif

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

// `__shared__` statics: one section, reset per block (emu.cpp).
#undef __shared__
#define __shared__ static __attribute__((section("dsemu_shared")))
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#ifndef __grid_constant__
#define __grid_constant__
#endif

namespace dsemu {

// The emulated thread now running (emu.cpp sets these before it resumes a
// thread; kernel code reads them again after every call into emu.cpp).
extern uint3 thread_idx, block_idx;
extern dim3 block_dim, grid_dim;

// Lane and warp of the running thread within its block.
unsigned lane();

// Block barrier (__syncthreads).
void sync_block();
// Warp exchange: the calling lane puts `value` in and, once every lane of
// `mask` that exists and has not exited has put its own in, gets the 32
// values (lanes that did not take part read as all-ones bytes) and the
// mask of the lanes that did.
const uint64_t *warp_exchange(unsigned mask, uint64_t value, unsigned *took_part);
// Dynamic shared memory of the running launch (extern __shared__).
void *dynamic_shared();
// A static `__shared__` variable's declaration passed by a thread
// (rewrite_launches.py adds the call): the block's first thread to pass it
// fills it with all-ones bytes. The section does that at the block's start
// for the statics it holds; GCC puts those of function templates elsewhere.
void fresh_shared(void *p, size_t bytes);
// Aborts, naming the kernel, the block and the thread, unless `p` is a
// multiple of `alignment`: what a GPU requires of the address of an access
// that the emulation makes in smaller pieces (ldmatrix's row addresses,
// cp.async's 16 bytes). DSEMU_ALIGNED(p, n, what) in kernel code.
void require_aligned(const void *p, size_t alignment, const char *what);
#define DSEMU_ALIGNED(p, n, what) ::dsemu::require_aligned((p), (n), (what))
// Sets the order in which the following launches resume their threads and
// run their blocks, as $DSRT_EMU_SCHEDULE does ("ascending", "reverse",
// "random:SEED"; null or "" is ascending); false, changing nothing, for
// any other value. For the emulation's own tests.
bool set_schedule(const char *order);

struct Config {
  dim3 grid, block;
  size_t shared;
  cudaStream_t stream;
  // The kernel, where the launch has dynamic shared memory: more than
  // 48 KiB of it needs the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize.
  const void *kernel = nullptr;
  Config of(const void *k) const {
    Config c = *this;
    c.kernel = k;
    return c;
  }
};
inline Config config(dim3 grid, dim3 block, size_t shared = 0, cudaStream_t stream = nullptr) {
  return Config{grid, block, shared, stream};
}

// Runs `body(arg)` as every thread of every block of `c`, in order, on the
// calling host thread (one launch at a time in the process); reports an
// invalid configuration as CUDA does (cudaGetLastError).
void run(const char *kernel, const Config &c, void (*body)(void *), void *arg);

// `k<<<cfg>>>(args...)`, rewritten: the arguments are evaluated once, as
// on a GPU, and each thread calls the kernel with copies of them.
template <typename F, typename... A>
void launch(const char *kernel, const Config &c, F call, A &&...args) {
  struct Frame {
    F call;
    std::tuple<std::decay_t<A>...> args;
  } frame{call, std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)};
  run(kernel, c,
      [](void *p) {
        Frame &f = *static_cast<Frame *>(p);
        std::apply(f.call, f.args);
      },
      &frame);
}

template <typename T> inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8, "warp exchange of more than 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T> inline T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
// A shuffle: `src` is the lane read, or -1 for the caller's own value.
template <typename T> inline T shuffle(unsigned mask, T v, int (*pick)(int, int, int), int arg,
                                       int width) {
  unsigned took = 0;
  const uint64_t *vals = warp_exchange(mask, to_bits(v), &took);
  const int src = pick(static_cast<int>(lane()), arg, width);
  return src < 0 ? v : from_bits<T>(vals[src]);
}

}  // namespace dsemu

#define threadIdx (::dsemu::thread_idx)
#define blockIdx (::dsemu::block_idx)
#define blockDim (::dsemu::block_dim)
#define gridDim (::dsemu::grid_dim)
#define warpSize 32

inline void __syncthreads() { ::dsemu::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  unsigned took = 0;
  ::dsemu::warp_exchange(mask, 0, &took);
}
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}

template <typename T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return ::dsemu::shuffle(mask, v,
                          [](int lane, int s, int w) { return (lane / w) * w + (s % w); }, src,
                          width);
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int x, int width = 32) {
  return ::dsemu::shuffle(mask, v,
                          [](int lane, int s, int w) {
                            const int t = lane ^ s;
                            return t / w == lane / w ? t : -1;
                          },
                          x, width);
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
  return ::dsemu::shuffle(mask, v,
                          [](int lane, int s, int w) {
                            const int t = lane + s;
                            return t / w == lane / w ? t : -1;
                          },
                          static_cast<int>(d), width);
}
template <typename T> inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
  return ::dsemu::shuffle(mask, v,
                          [](int lane, int s, int w) {
                            const int t = lane - s;
                            return t >= 0 && t / w == lane / w ? t : -1;
                          },
                          static_cast<int>(d), width);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  unsigned took = 0;
  const uint64_t *vals = ::dsemu::warp_exchange(mask, pred ? 1 : 0, &took);
  unsigned r = 0;
  for (int l = 0; l < 32; ++l)
    if ((took >> l & 1u) && vals[l])
      r |= 1u << l;
  return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  unsigned took = 0;
  const uint64_t *vals = ::dsemu::warp_exchange(mask, pred ? 1 : 0, &took);
  for (int l = 0; l < 32; ++l)
    if ((took >> l & 1u) && !vals[l])
      return 0;
  return 1;
}

// Atomics: the threads of a launch take turns on one host thread, so a
// read-modify-write is atomic as it is.
// atomicOP(p, v): *p = NEW (of old and v), returning old.
#define DSEMU_ATOMIC(name, NEW)                                                             \
  template <typename T, typename U> inline T name(T *p, U v) {                              \
    const T old = *p;                                                                       \
    *p = static_cast<T>(NEW);                                                               \
    return old;                                                                             \
  }
DSEMU_ATOMIC(atomicAdd, old + v)
DSEMU_ATOMIC(atomicSub, old - v)
DSEMU_ATOMIC(atomicExch, v)
DSEMU_ATOMIC(atomicMin, static_cast<T>(v) < old ? static_cast<T>(v) : old)
DSEMU_ATOMIC(atomicMax, old < static_cast<T>(v) ? static_cast<T>(v) : old)
DSEMU_ATOMIC(atomicAnd, old & v)
DSEMU_ATOMIC(atomicOr, old | v)
DSEMU_ATOMIC(atomicXor, old ^ v)
#undef DSEMU_ATOMIC
// sm_90's vector addition of f32 pairs (global memory, the address 8-byte
// aligned): each element added as atomicAdd adds it.
inline float2 atomicAdd(float2 *p, float2 v) {
  ::dsemu::require_aligned(p, sizeof(float2), "atomicAdd(float2)");
  const float2 old = *p;
  *p = make_float2(old.x + v.x, old.y + v.y);
  return old;
}
template <typename T, typename U, typename V> inline T atomicCAS(T *p, U compare, V v) {
  const T old = *p;
  if (old == static_cast<T>(compare))
    *p = static_cast<T>(v);
  return old;
}

// Device math intrinsics, as their IEEE host functions (the fast
// approximations of __expf and friends are not modelled).
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : x > 0.0f ? x : 0.0f; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fsub_rn(float x, float y) { return x - y; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline double __dmul_rn(double x, double y) { return x * y; }
inline double __dadd_rn(double x, double y) { return x + y; }
inline double __fma_rn(double x, double y, double z) { return fma(x, y, z); }
inline int __float_as_int(float x) { return ::dsemu::from_bits<int>(::dsemu::to_bits(x)); }
inline unsigned __float_as_uint(float x) {
  return ::dsemu::from_bits<unsigned>(::dsemu::to_bits(x));
}
inline float __int_as_float(int x) { return ::dsemu::from_bits<float>(::dsemu::to_bits(x)); }
inline float __uint_as_float(unsigned x) {
  return ::dsemu::from_bits<float>(::dsemu::to_bits(x));
}
inline long long __double_as_longlong(double x) {
  return ::dsemu::from_bits<long long>(::dsemu::to_bits(x));
}
inline double __longlong_as_double(long long x) {
  return ::dsemu::from_bits<double>(::dsemu::to_bits(x));
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
template <typename T> inline T __ldg(const T *p) { return *p; }

#endif  // DSRT_TESTS_CUDA_EMU_PRELUDE_H
