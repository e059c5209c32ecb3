// A fake CUDA runtime, cuBLASLt and NCCL for running a cuda program's host
// side on a machine without a GPU (docs/runtime.md, "The fake CUDA
// runtime"). Preloaded (LD_PRELOAD) into a program linked against the
// shared cudart, it takes the place of every call the program and
// libdsrt_cuda make:
//
//   memory   cudaMalloc and cudaHostAlloc are zeroed host memory (so what a
//            program reads back, a loss, is finite); copies and fills are
//            done at once on the host, in call order
//   streams, events  handles the fake checks: a stream or event used after
//            it was destroyed, or a wait on an event never recorded, counts
//            as an error. A fake device clock per stream: each piece of
//            work queued (launch, asynchronous copy or memset, matmul, NCCL
//            call) takes 1 ms of its stream's, from when the stream's work
//            before it ended, an event it waits on was reached and the
//            host thread queued it (after that thread's last wait); so work
//            on two streams that nothing orders overlaps, as on a GPU. An
//            event records its stream's clock, cudaEventElapsedTime
//            subtracts
//   kernels  launches are counted (by kernel name, from the registration
//            calls nvcc generates, and by stream with cudaMemsetAsync and
//            cublasLtMatmul) and their configurations checked; they
//            compute nothing. $DSRT_FAKE_CUDA_FAIL_LAUNCH=NAME[:K] makes the
//            K-th launch of a kernel whose name contains NAME fault: every
//            synchronizing call from then on returns cudaErrorIllegalAddress
//   cuBLASLt, NCCL  handles and counted no-ops (NCCL's collectives leave
//            their buffers as they are)
//
// Counts are kept per phase: "setup" until the runtime marks step 1, then
// "step N" for each step the runtime marks (dsrt_fake_cuda_step, looked up
// by the runtime, health::mark_step), then "end". At exit the fake writes
// them as JSON to $DSRT_FAKE_CUDA_REPORT (".rankR" appended under mpirun).
// $DSRT_FAKE_CUDA_DEVICES is the device count (default 1).
//
// Built with DSRT_FAKE_EMULATE=1 it is the runtime half of the CUDA
// emulation (emu/, docs/runtime.md "The CUDA emulation"): kernels are then
// not nvcc's but run by emu/emu.cpp, cublasLtMatmul computes its product on
// the host, a `__device__` variable is its own device copy,
// cudaGetLastError reports what the emulation found wrong with a launch,
// and $DSRT_FAKE_CUDA_FILL=nan makes fresh memory all-ones bytes.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#if DSRT_FAKE_EMULATE
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fault.h"  // emu/: DSRT_EMU_FAULT
#endif
#ifndef DSRT_FAKE_NO_NCCL
#include <nccl.h>
#endif
#if DSRT_FAKE_NCCL_MPI
#include "nccl_mpi.h"  // emu/: the collectives over MPI
#endif

#include <dlfcn.h>
#include <execinfo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

// The fake's switches: an environment variable's number (0 when unset)...
long long env_number(const char *name) {
  const char *v = std::getenv(name);
  return v ? std::atoll(v) : 0;
}
// ... or whether it is "1".
bool env_flag(const char *name) {
  const char *v = std::getenv(name);
  return v && std::strcmp(v, "1") == 0;
}

struct Phase {
  std::string name;
  std::map<std::string, long long> calls;        // API name -> count
  std::map<std::string, long long> kernels;      // kernel name -> launches
  // "S NAME" -> count: the kernel launches, cudaMemsetAsync and
  // cublasLtMatmul calls by stream (S: the stream's number, in creation
  // order from 1; 0 the legacy default stream)
  std::map<std::string, long long> stream_work;
  std::vector<unsigned long long> device_allocs; // cudaMalloc sizes
  std::vector<unsigned long long> host_allocs;   // cudaHostAlloc / cudaMallocHost sizes
  std::vector<std::string> errors;               // misuse found (first few)
  long long error_count = 0;
};

struct FakeStream {
  unsigned flags = 0;
  int number = 0;  // creation order, from 1
  double clock_us = 0;  // when the work queued on it so far ends
};
struct FakeEvent {
  bool recorded = false;
  bool timing = true;  // not created with cudaEventDisableTiming
  double time_us = 0;  // the fake device clock when last recorded
};

struct State {
  std::mutex mutex;
  std::vector<Phase> phases{Phase{"setup"}};
  std::set<FakeStream *> streams;
  int streams_made = 0;
  std::set<FakeEvent *> events;
  // The fake device clocks: every piece of work queued (a kernel launch,
  // an asynchronous copy or memset, a matmul, an NCCL call) takes 1 ms of
  // its stream's (FakeStream::clock_us; the legacy default stream's here),
  // starting no earlier than host_us(), the fake time the queuing host
  // thread last waited for (a synchronizing call returns when what it
  // waits for ends; another thread, a transport's, goes on meanwhile).
  double legacy_clock_us = 0;
  static double &host_us() {
    static thread_local double us = 0;
    return us;
  }
  // DSRT_FAKE_CUDA_FAIL_LAUNCH: the launch that faults, and the fault every
  // synchronizing call reports from then on (sticky, as on a GPU).
  long long launches_matched = 0;
  cudaError_t fault = cudaSuccess;
  std::map<uintptr_t, size_t> device_mem, host_mem;  // base -> bytes
  std::map<const void *, void *> symbols;  // __device__ variable -> its device copy
  std::map<const void *, std::string> kernel_names;  // host stub -> device name
  std::map<const void *, size_t> max_dynamic_shared; // cudaFuncSetAttribute
  int device = 0;
  // The launch configuration nvcc pushes before a kernel's stub pops it.
  struct Config {
    dim3 grid, block;
    size_t shared;
    void *stream;
  };
  std::vector<Config> configs;

  Phase &now() { return phases.back(); }
  void count(const char *api) {
    ++now().calls[api];
    if (where()) print_where(api);
  }
  // DSRT_FAKE_CUDA_WHERE=1: each call prints its callers
  // (file and offset, for addr2line) on stderr.
  static bool where() {
    static const bool on = std::getenv("DSRT_FAKE_CUDA_WHERE") != nullptr;
    return on;
  }
  void print_where(const char *api) {
    void *frames[10];
    const int n = backtrace(frames, 10);
    std::fprintf(stderr, "fake cudart: %s: %s:", now().name.c_str(), api);
    for (int i = 2; i < n; ++i) {
      Dl_info info{};
      if (dladdr(frames[i], &info) && info.dli_fname)
        std::fprintf(stderr, " %s+0x%lx", info.dli_fname,
                     static_cast<unsigned long>(reinterpret_cast<uintptr_t>(frames[i]) -
                                                reinterpret_cast<uintptr_t>(info.dli_fbase)));
    }
    std::fputc('\n', stderr);
  }
  void error(const std::string &what) {
    Phase &p = now();
    ++p.error_count;
    if (p.errors.size() < 20) p.errors.push_back(what);
  }
  bool stream_ok(cudaStream_t s) {
    return !s || streams.count(reinterpret_cast<FakeStream *>(s)) != 0;
  }
  void check_stream(cudaStream_t s, const char *api) {
    if (!stream_ok(s)) error(std::string(api) + ": a stream that is not live");
    if (!s) ++now().calls[std::string(api) + " on the legacy default stream"];
  }
  // Counts `what` as work queued on stream `s`, 1 ms of it.
  void on_stream(cudaStream_t s, const std::string &what) {
    advance(s, 1000);
    const FakeStream *f = live(s);
    ++now().stream_work[std::to_string(f ? f->number : 0) + " " + what];
  }
  // `s` as the fake's stream; null for the legacy default stream (or a
  // stream that is not live, which check_stream counts).
  FakeStream *live(cudaStream_t s) {
    return stream_ok(s) && s ? reinterpret_cast<FakeStream *>(s) : nullptr;
  }
  // The clock of `s`: when the work queued on it so far ends.
  double &clock_of(cudaStream_t s) {
    FakeStream *f = live(s);
    return f ? f->clock_us : legacy_clock_us;
  }
  // The legacy default stream and the blocking streams (not
  // cudaStreamNonBlocking) wait for each other's work.
  static bool blocking(const FakeStream *f) { return (f->flags & cudaStreamNonBlocking) == 0; }
  // When work queued on `s` now may start.
  double ready(cudaStream_t s) {
    const FakeStream *f = live(s);
    double at = std::max(host_us(), clock_of(s));
    if (!f || blocking(f)) at = std::max(at, legacy_clock_us);
    if (!f)
      for (FakeStream *other : streams)
        if (blocking(other)) at = std::max(at, other->clock_us);
    return at;
  }
  // Queues `us` of work on `s`.
  void advance(cudaStream_t s, double us) { clock_of(s) = ready(s) + us; }
  // The queuing host thread has waited until fake time `us`.
  static void host_until(double us) { host_us() = std::max(host_us(), us); }
  // Everything queued on `s` (every stream: null with all) has ended when
  // a synchronizing call returns.
  void host_waits(cudaStream_t s, bool all = false) {
    host_until(ready(s));
    if (all)
      for (FakeStream *f : streams) host_until(f->clock_us);
  }
  // Whether [p, p + n) lies in memory the fake handed out, and which kind.
  const char *kind_of(const void *p, size_t n) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    for (auto *m : {&device_mem, &host_mem}) {
      auto it = m->upper_bound(a);
      if (it == m->begin()) continue;
      --it;
      if (a >= it->first && a + n <= it->first + it->second)
        return m == &device_mem ? "device" : "pinned";
    }
    return nullptr;
  }
};

State &state() {
  static State *s = new State;  // never destroyed: the report runs at exit
  return *s;
}

void *zeroed(size_t bytes, size_t alignment) {
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void *p = std::aligned_alloc(alignment, rounded ? rounded : alignment);
  if (p) std::memset(p, 0, rounded ? rounded : alignment);
  return p;
}

void json_string(FILE *f, const std::string &s) {
  std::fputc('"', f);
  for (char c : s) {
    if (c == '"' || c == '\\') std::fputc('\\', f);
    if (static_cast<unsigned char>(c) < 0x20) { std::fprintf(f, "\\u%04x", c); continue; }
    std::fputc(c, f);
  }
  std::fputc('"', f);
}

template <typename Map> void json_map(FILE *f, const Map &m) {
  std::fputc('{', f);
  bool first = true;
  for (const auto &[k, v] : m) {
    if (!first) std::fputs(", ", f);
    first = false;
    json_string(f, k);
    std::fprintf(f, ": %lld", static_cast<long long>(v));
  }
  std::fputc('}', f);
}

void json_list(FILE *f, const std::vector<unsigned long long> &v) {
  std::fputc('[', f);
  for (size_t i = 0; i < v.size(); ++i) std::fprintf(f, "%s%llu", i ? ", " : "", v[i]);
  std::fputc(']', f);
}

__attribute__((destructor)) void write_report() {
  const char *path = std::getenv("DSRT_FAKE_CUDA_REPORT");
  if (!path || !*path) return;
  std::string file = path;
  if (const char *rank = std::getenv("OMPI_COMM_WORLD_RANK")) file += std::string(".rank") + rank;
  State &st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  FILE *f = std::fopen(file.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "fake cudart: cannot write %s\n", file.c_str());
    return;
  }
  std::fputs("{\"phases\": [\n", f);
  for (size_t i = 0; i < st.phases.size(); ++i) {
    const Phase &p = st.phases[i];
    std::fputs("  {\"name\": ", f);
    json_string(f, p.name);
    std::fputs(", \"calls\": ", f);
    json_map(f, p.calls);
    std::fputs(", \"kernels\": ", f);
    json_map(f, p.kernels);
    std::fputs(", \"stream_work\": ", f);
    json_map(f, p.stream_work);
    std::fputs(", \"device_allocs\": ", f);
    json_list(f, p.device_allocs);
    std::fputs(", \"host_allocs\": ", f);
    json_list(f, p.host_allocs);
    std::fprintf(f, ", \"error_count\": %lld, \"errors\": [", p.error_count);
    for (size_t j = 0; j < p.errors.size(); ++j) {
      if (j) std::fputs(", ", f);
      json_string(f, p.errors[j]);
    }
    std::fprintf(f, "]}%s\n", i + 1 < st.phases.size() ? "," : "");
  }
  std::fputs("]}\n", f);
  std::fclose(f);
}

#define LOCKED State &st = state(); std::lock_guard<std::mutex> lock(st.mutex)

}  // namespace

extern "C" {

// The runtime's step marks: step >= 1 starts that step, 0 ends the last one.
__attribute__((visibility("default"))) void dsrt_fake_cuda_step(long long step) {
  LOCKED;
  st.phases.push_back(Phase{step > 0 ? "step " + std::to_string(step) : "end"});
}

//===--- Devices and errors ----------------------------------------------===//

// DSRT_FAKE_CUDA_DEVICES devices (default 1): a multi-rank job on one host
// needs one per local rank.
int device_count() {
  static const int n = [] {
    const long long k = env_number("DSRT_FAKE_CUDA_DEVICES");
    return k > 0 ? static_cast<int>(k) : 1;
  }();
  return n;
}
cudaError_t cudaGetDeviceCount(int *count) {
  LOCKED;
  st.count("cudaGetDeviceCount");
  *count = device_count();
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  LOCKED;
  st.count("cudaSetDevice");
  if (device < 0 || device >= device_count()) {
    st.error("cudaSetDevice(" + std::to_string(device) + "): the fake has " +
             std::to_string(device_count()) + " devices (DSRT_FAKE_CUDA_DEVICES)");
    return cudaErrorInvalidDevice;
  }
  st.device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int *device) {
  LOCKED;
  *device = st.device;
  return cudaSuccess;
}
// The per-block shared memory a kernel may opt in to
// (cudaDevAttrMaxSharedMemoryPerBlockOptin): sm_90's 227 KiB, or
// DSRT_FAKE_CUDA_SHARED_OPTIN bytes (a smaller device).
namespace {
size_t shared_optin() {
  static const size_t n = [] {
    const long long k = env_number("DSRT_FAKE_CUDA_SHARED_OPTIN");
    return k > 0 ? static_cast<size_t>(k) : size_t(227 * 1024);
  }();
  return n;
}
// The device's compute capability, 10 major + minor: sm_90's, or
// DSRT_FAKE_CUDA_CC (80: an A100).
int compute_capability() {
  static const int cc = [] {
    const long long k = env_number("DSRT_FAKE_CUDA_CC");
    return k >= 10 ? static_cast<int>(k) : 90;
  }();
  return cc;
}
}  // namespace
// A kernel's attributes: zeros, or with DSRT_FAKE_CUDA_NO_KERNEL_IMAGE=1 the
// error of a GPU the program has no kernel image for.
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attributes, const void *) {
  LOCKED;
  st.count("cudaFuncGetAttributes");
  static const bool none = env_flag("DSRT_FAKE_CUDA_NO_KERNEL_IMAGE");
  if (none)
    return cudaErrorNoKernelImageForDevice;
  *attributes = cudaFuncAttributes{};
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int) {
  LOCKED;
  st.count("cudaDeviceGetAttribute");
  switch (attr) {
  case cudaDevAttrMultiProcessorCount: *value = 132; break;
  case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(shared_optin()); break;
  case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
  case cudaDevAttrComputeCapabilityMajor: *value = compute_capability() / 10; break;
  case cudaDevAttrComputeCapabilityMinor: *value = compute_capability() % 10; break;
  default: *value = 0; break;
  }
  return cudaSuccess;
}
#if DSRT_FAKE_EMULATE
namespace {
cudaError_t last_error = cudaSuccess;  // set by the emulation's launches
}
// A launch the emulation rejected (emu/emu.cpp), as cudaGetLastError reports it.
__attribute__((visibility("default"))) void dsrt_fake_cuda_set_error(cudaError_t error) {
  LOCKED;
  last_error = error;
}
cudaError_t cudaGetLastError(void) {
  LOCKED;
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) {
  LOCKED;
  return last_error;
}
#else
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
#endif
const char *cudaGetErrorString(cudaError_t error) {
  if (error == cudaErrorIllegalAddress)  // CUDA's words: a launch the fake made fault
    return "an illegal memory access was encountered (fake cudart)";
  if (error == cudaErrorNoKernelImageForDevice)
    return "no kernel image is available for execution on the device (fake cudart)";
  return error == cudaSuccess ? "no error (fake cudart)" : "error (fake cudart)";
}
const char *cudaGetErrorName(cudaError_t error) { return cudaGetErrorString(error); }
cudaError_t cudaDeviceSynchronize(void) {
  LOCKED;
  st.count("cudaDeviceSynchronize");
  st.host_waits(nullptr, /*all=*/true);
  return st.fault;
}
cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value) {
  LOCKED;
  st.count("cudaFuncSetAttribute");
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    // CUDA: the value may not pass the device's opt-in limit.
    if (value < 0 || static_cast<size_t>(value) > shared_optin())
      return cudaErrorInvalidValue;
    st.max_dynamic_shared[func] = static_cast<size_t>(value);
  }
  return cudaSuccess;
}
#if DSRT_FAKE_EMULATE
__attribute__((visibility("default"))) size_t dsrt_fake_cuda_max_dynamic_shared(const void *func) {
  LOCKED;
  const auto it = st.max_dynamic_shared.find(func);
  return it == st.max_dynamic_shared.end() ? 48 * 1024 : it->second;
}
#endif

//===--- Memory ------------------------------------------------------------===//

#if DSRT_FAKE_EMULATE
namespace {
// What fresh device and pinned memory holds in the emulation
// ($DSRT_FAKE_CUDA_FILL): zero bytes (unset or "zero"), or all-ones bytes
// ("nan": NaN in a float, -1 in an integer), as the emulated shared memory
// starts, so that a kernel that reads a workspace or arena range nothing
// wrote (garbage on a GPU) shows it. The runtime sets every word it reads
// (the device error word, the streams' scratch, the first_nonfinite flag)
// itself.
int fresh_fill_byte = -1;  // -1: not read yet
bool parse_fill(const char *v, int &byte) {
  if (!v || !*v || std::strcmp(v, "zero") == 0) { byte = 0; return true; }
  if (std::strcmp(v, "nan") == 0) { byte = 0xff; return true; }
  return false;
}
void fill_fresh(void *p, size_t bytes) {
  if (fresh_fill_byte < 0) {
    const char *v = std::getenv("DSRT_FAKE_CUDA_FILL");
    if (!parse_fill(v, fresh_fill_byte)) {
      std::fprintf(stderr, "fake cudart: DSRT_FAKE_CUDA_FILL=%s: expected zero or nan\n", v);
      std::abort();
    }
  }
  if (fresh_fill_byte) std::memset(p, fresh_fill_byte, bytes);
}
}  // namespace
// Sets the fill of the allocations that follow as $DSRT_FAKE_CUDA_FILL
// does (null: the environment's again); false, changing nothing, for
// another value. For the emulation's own tests.
extern "C" __attribute__((visibility("default"))) bool dsrt_fake_cuda_set_fill(const char *fill) {
  LOCKED;
  (void)st;
  int byte = 0;
  if (!fill) { fresh_fill_byte = -1; return true; }
  if (!parse_fill(fill, byte)) return false;
  fresh_fill_byte = byte;
  return true;
}
#endif

namespace {
// Zeroed memory, remembered as device or pinned memory with its size.
cudaError_t allocate(const char *api, void **p, size_t bytes, bool device) {
  LOCKED;
  st.count(api);
  (device ? st.now().device_allocs : st.now().host_allocs).push_back(bytes);
  *p = zeroed(bytes, device ? 256 : 4096);
  if (!*p) return cudaErrorMemoryAllocation;
#if DSRT_FAKE_EMULATE
  fill_fresh(*p, bytes);
#endif
  (device ? st.device_mem : st.host_mem)[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaMalloc(void **p, size_t bytes) { return allocate("cudaMalloc", p, bytes, true); }
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int) {
  return allocate("cudaHostAlloc", p, bytes, false);
}
cudaError_t cudaMallocHost(void **p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }
cudaError_t cudaHostGetDevicePointer(void **device, void *host, unsigned int) {
  LOCKED;
  st.count("cudaHostGetDevicePointer");
  if (!st.kind_of(host, 1)) st.error("cudaHostGetDevicePointer of memory not pinned by cudaHostAlloc");
  *device = host;
  return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
  LOCKED;
  st.count("cudaFree");
  if (!p) return cudaSuccess;
  if (!st.device_mem.erase(reinterpret_cast<uintptr_t>(p))) {
    st.error("cudaFree of a pointer cudaMalloc did not return");
    return cudaErrorInvalidValue;
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
  LOCKED;
  st.count("cudaFreeHost");
  if (!st.host_mem.erase(reinterpret_cast<uintptr_t>(p))) {
    st.error("cudaFreeHost of a pointer cudaHostAlloc did not return");
    return cudaErrorInvalidValue;
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *attr, const void *p) {
  LOCKED;
  st.count("cudaPointerGetAttributes");
  *attr = cudaPointerAttributes{};
  const char *kind = st.kind_of(p, 1);
  attr->type = !kind ? cudaMemoryTypeUnregistered
               : std::strcmp(kind, "device") == 0 ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
  attr->devicePointer = kind ? const_cast<void *>(p) : nullptr;
  attr->hostPointer = kind && std::strcmp(kind, "pinned") == 0 ? const_cast<void *>(p) : nullptr;
  return cudaSuccess;
}

namespace {
// An asynchronous copy with pageable host memory on one side is not
// asynchronous on a GPU (the host waits); counted apart.
void check_copy(State &st, const char *api, void *dst, const void *src, size_t bytes) {
  const char *d = st.kind_of(dst, bytes), *s = st.kind_of(src, bytes);
  if (!d || !s) st.count((std::string(api) + " with pageable host memory").c_str());
  if (!d && !s) st.error(std::string(api) + " between two pageable host buffers");
}
}  // namespace

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind) {
  LOCKED;
  st.count("cudaMemcpy");
  // On the legacy default stream, and the host waits for it.
  st.host_waits(nullptr);
  std::memmove(dst, src, bytes);
  return st.fault;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t stream) {
  LOCKED;
  st.count("cudaMemcpyAsync");
  st.check_stream(stream, "cudaMemcpyAsync");
  if (bytes) check_copy(st, "cudaMemcpyAsync", dst, src, bytes);
  st.advance(stream, 1000);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind,
                              cudaStream_t stream) {
  LOCKED;
  st.count("cudaMemcpy2DAsync");
  st.check_stream(stream, "cudaMemcpy2DAsync");
  if (width > dpitch || width > spitch) st.error("cudaMemcpy2DAsync: width above a pitch");
  st.advance(stream, 1000);
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char *>(dst) + r * dpitch,
                 static_cast<const char *>(src) + r * spitch, width);
  return cudaSuccess;
}
cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
  LOCKED;
  st.count("cudaMemset");
  st.host_waits(nullptr);
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream) {
  LOCKED;
  st.count("cudaMemsetAsync");
  st.check_stream(stream, "cudaMemsetAsync");
  st.on_stream(stream, "cudaMemsetAsync");
  if (bytes && !st.kind_of(dst, bytes)) st.error("cudaMemsetAsync of memory the fake did not allocate");
  std::memset(dst, value, bytes);
  return cudaSuccess;
}

//===--- Streams and events -----------------------------------------------===//

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
  LOCKED;
  st.count("cudaStreamCreateWithFlags");
  auto *s = new FakeStream{flags, ++st.streams_made};
  st.streams.insert(s);
  *stream = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  LOCKED;
  st.count("cudaStreamDestroy");
  if (!st.streams.erase(reinterpret_cast<FakeStream *>(stream))) {
    st.error("cudaStreamDestroy of a stream that is not live");
    return cudaErrorInvalidResourceHandle;
  }
  delete reinterpret_cast<FakeStream *>(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  LOCKED;
  st.count("cudaStreamSynchronize");
  st.check_stream(stream, "cudaStreamSynchronize");
  st.host_waits(stream);
  return st.fault;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  LOCKED;
  st.count("cudaStreamQuery");
  st.check_stream(stream, "cudaStreamQuery");
  st.host_waits(stream);
  return st.fault;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  LOCKED;
  st.count("cudaEventCreateWithFlags");
  auto *e = new FakeEvent;
  e->timing = (flags & cudaEventDisableTiming) == 0;
  st.events.insert(e);
  *event = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }
namespace {
FakeEvent *live_event(State &st, cudaEvent_t event, const char *api) {
  auto *e = reinterpret_cast<FakeEvent *>(event);
  if (!st.events.count(e)) {
    st.error(std::string(api) + ": an event that is not live");
    return nullptr;
  }
  return e;
}
}  // namespace
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  LOCKED;
  st.count("cudaEventDestroy");
  FakeEvent *e = live_event(st, event, "cudaEventDestroy");
  if (!e) return cudaErrorInvalidResourceHandle;
  st.events.erase(e);
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  LOCKED;
  st.count("cudaEventRecord");
  st.check_stream(stream, "cudaEventRecord");
  FakeEvent *e = live_event(st, event, "cudaEventRecord");
  if (!e) return cudaErrorInvalidResourceHandle;
  e->recorded = true;
  e->time_us = st.ready(stream);
  return cudaSuccess;
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int) {
  return cudaEventRecord(event, stream);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  LOCKED;
  st.count("cudaStreamWaitEvent");
  st.check_stream(stream, "cudaStreamWaitEvent");
  FakeEvent *e = live_event(st, event, "cudaStreamWaitEvent");
  if (!e) return cudaErrorInvalidResourceHandle;
  // On a GPU a wait for an event never recorded returns at once: an order
  // the program meant to have is missing.
  if (!e->recorded) st.error("cudaStreamWaitEvent on an event that was never recorded");
  // The stream's later work starts when the event is reached.
  double &clock = st.clock_of(stream);
  clock = std::max(clock, e->time_us);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  LOCKED;
  st.count("cudaEventSynchronize");
  FakeEvent *e = live_event(st, event, "cudaEventSynchronize");
  if (!e) return cudaErrorInvalidResourceHandle;
  st.host_until(e->time_us);
  return st.fault;
}
// Every event is reached at once: a query finds it done, as a wait would.
cudaError_t cudaEventQuery(cudaEvent_t event) {
  LOCKED;
  st.count("cudaEventQuery");
  FakeEvent *e = live_event(st, event, "cudaEventQuery");
  if (!e) return cudaErrorInvalidResourceHandle;
  st.host_until(e->time_us);
  return st.fault;
}
// The fake clock's time between the two records (every event is reached
// at once); as on a GPU, an event never recorded or made without timing is
// an invalid handle here, which the fake also counts as a misuse.
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  LOCKED;
  st.count("cudaEventElapsedTime");
  FakeEvent *a = live_event(st, start, "cudaEventElapsedTime");
  FakeEvent *b = live_event(st, end, "cudaEventElapsedTime");
  if (!a || !b) return cudaErrorInvalidResourceHandle;
  if (!a->recorded || !b->recorded || !a->timing || !b->timing) {
    st.error("cudaEventElapsedTime of an event never recorded or made without timing");
    return cudaErrorInvalidResourceHandle;
  }
  if (st.fault != cudaSuccess) return st.fault;
  *ms = static_cast<float>((b->time_us - a->time_us) / 1000.0);
  return cudaSuccess;
}

//===--- Kernels: nvcc's registration and launch calls ---------------------===//

void **__cudaRegisterFatBinary(void *fat) {
  static void *handle;
  (void)fat;
  return &handle;
}
void __cudaRegisterFatBinaryEnd(void **) {}
void __cudaUnregisterFatBinary(void **) {}
void __cudaRegisterFunction(void **, const char *hostFun, char *, const char *deviceName, int,
                            uint3 *, uint3 *, dim3 *, dim3 *, int *) {
  LOCKED;
  st.kernel_names[hostFun] = deviceName;
}
// A `__device__` variable (a generated program's constant): its device
// copy is made here, as a GPU loads the module, from the host shadow's
// initial bytes; it is device memory to the checks but no allocation.
void __cudaRegisterVar(void **, char *hostVar, char *, const char *, int, size_t size, int,
                       int) {
  LOCKED;
  void *device = zeroed(size ? size : 1, 256);
  std::memcpy(device, hostVar, size);
  st.device_mem[reinterpret_cast<uintptr_t>(device)] = size ? size : 1;
  st.symbols[hostVar] = device;
}
cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol) {
  LOCKED;
  st.count("cudaGetSymbolAddress");
  auto it = st.symbols.find(symbol);
#if DSRT_FAKE_EMULATE
  // Emulated kernels read the variable itself.
  if (it == st.symbols.end()) {
    *devPtr = const_cast<void *>(symbol);
    return cudaSuccess;
  }
#endif
  if (it == st.symbols.end()) {
    st.error("cudaGetSymbolAddress of a symbol no module registered");
    return cudaErrorInvalidSymbol;
  }
  *devPtr = it->second;
  return cudaSuccess;
}
void __cudaRegisterManagedVar(void **, void **, char *, const char *, int, size_t, int, int) {}
char __cudaInitModule(void **) { return 1; }
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, struct CUstream_st *stream) {
  LOCKED;
  st.configs.push_back({grid, block, shared, stream});
  return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared, void *stream) {
  LOCKED;
  if (st.configs.empty()) {
    st.error("__cudaPopCallConfiguration without a pushed configuration");
    return cudaErrorInvalidConfiguration;
  }
  const State::Config c = st.configs.back();
  st.configs.pop_back();
  *grid = c.grid;
  *block = c.block;
  *shared = c.shared;
  *static_cast<void **>(stream) = c.stream;
  return cudaSuccess;
}
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *func) {
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void *>(func));
  return cudaSuccess;
}

namespace {
cudaError_t launch(const void *func, dim3 grid, dim3 block, size_t shared, cudaStream_t stream) {
  LOCKED;
  st.count("kernel launch");
  st.check_stream(stream, "kernel launch");
  auto it = st.kernel_names.find(func);
  const std::string name = it == st.kernel_names.end() ? "?" : it->second;
  if (it == st.kernel_names.end()) st.error("launch of a kernel nvcc did not register");
  ++st.now().kernels[name];
  st.on_stream(stream, name);
  // DSRT_FAKE_CUDA_FAIL_LAUNCH=NAME[:K]: the K-th launch (from 1; default 1)
  // of a kernel whose name contains NAME faults, as an illegal address does
  // on a GPU: the launch succeeds, the next synchronizing call fails.
  static const char *fail = std::getenv("DSRT_FAKE_CUDA_FAIL_LAUNCH");
  if (fail && *fail && st.fault == cudaSuccess) {
    const std::string spec = fail;
    const size_t colon = spec.rfind(':');
    const std::string part = colon == std::string::npos ? spec : spec.substr(0, colon);
    const long long nth = colon == std::string::npos ? 1 : std::atoll(spec.c_str() + colon + 1);
    if (name.find(part) != std::string::npos && ++st.launches_matched == nth) {
      st.fault = cudaErrorIllegalAddress;
      std::fprintf(stderr, "fake cudart: launch %lld of %s faults (DSRT_FAKE_CUDA_FAIL_LAUNCH)\n",
                   nth, name.c_str());
    }
  }
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  const auto limit = st.max_dynamic_shared.find(func);
  const size_t shared_limit = limit == st.max_dynamic_shared.end() ? 48 * 1024 : limit->second;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
      grid.z == 0 || grid.y > 65535 || grid.z > 65535 || shared > shared_limit) {
    st.error("launch of " + name + " with an invalid configuration: grid " +
             std::to_string(grid.x) + "x" + std::to_string(grid.y) + "x" + std::to_string(grid.z) +
             ", block " + std::to_string(block.x) + "x" + std::to_string(block.y) + "x" +
             std::to_string(block.z) + ", " + std::to_string(shared) + " bytes of shared memory");
    return cudaErrorInvalidConfiguration;
  }
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **, size_t shared,
                             cudaStream_t stream) {
  return launch(func, grid, block, shared, stream);
}
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **,
                               size_t shared, cudaStream_t stream) {
  return launch(reinterpret_cast<const void *>(kernel), grid, block, shared, stream);
}

//===--- cuBLASLt ----------------------------------------------------------===//

namespace {
int lt_dummy;
void *lt_handle() { return &lt_dummy; }
// A descriptor, layout or preference: 64 zeroed bytes, the creation counted.
void *counted_handle(const char *api) {
  LOCKED;
  st.count(api);
  return std::calloc(1, 64);
}
}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
  LOCKED;
  st.count("cublasLtCreate");
  *handle = static_cast<cublasLtHandle_t>(lt_handle());
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; }
namespace {
// What the descriptors hold (in their 64 bytes): the product the
// emulation computes.
struct LtDesc {
  int compute, scale;
  int trans_a, trans_b;  // cublasOperation_t
  int unsupported;       // an attribute the emulation does not model was set
  // The epilogue (cublasLtEpilogue_t: DEFAULT, BIAS, BGRADA, BGRADB,
  // GELU_AUX_BIAS and DGELU modelled), the bias (or bias gradient) vector
  // and its cudaDataType (-1: D's).
  uint32_t epilogue;
  int32_t bias_type;
  void *bias;
  // The GELU epilogues' aux matrix, its leading dimension and type (-1: D's).
  void *aux;
  int64_t aux_ld;
  int32_t aux_type;
};
struct LtLayout {
  int type;  // cudaDataType
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch;
  int64_t stride;
  int unsupported;
};
static_assert(sizeof(LtDesc) <= 64 && sizeof(LtLayout) <= 64, "a descriptor holds 64 bytes");
#define SET_ATTR(field, buf, bytes) \
  do { if ((bytes) == sizeof(field)) std::memcpy(&(field), (buf), sizeof(field)); } while (0)
}  // namespace

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  *desc = static_cast<cublasLtMatmulDesc_t>(counted_handle("cublasLtMatmulDescCreate"));
  auto *d = reinterpret_cast<LtDesc *>(*desc);
  d->compute = compute;
  d->scale = scale;
  d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  d->bias_type = -1;
  d->aux_type = -1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  std::free(desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t bytes) {
  auto *d = reinterpret_cast<LtDesc *>(desc);
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA) SET_ATTR(d->trans_a, buf, bytes);
  else if (attr == CUBLASLT_MATMUL_DESC_TRANSB) SET_ATTR(d->trans_b, buf, bytes);
  else if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE) SET_ATTR(d->epilogue, buf, bytes);
  else if (attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER) SET_ATTR(d->bias, buf, bytes);
  else if (attr == CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE) SET_ATTR(d->bias_type, buf, bytes);
  else if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER) SET_ATTR(d->aux, buf, bytes);
  else if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD) SET_ATTR(d->aux_ld, buf, bytes);
  else if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE) SET_ATTR(d->aux_type, buf, bytes);
  else d->unsupported = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  *layout = static_cast<cublasLtMatrixLayout_t>(counted_handle("cublasLtMatrixLayoutCreate"));
  auto *l = reinterpret_cast<LtLayout *>(*layout);
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  l->batch = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(const cublasLtMatrixLayout_t layout) {
  std::free(layout);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t bytes) {
  auto *l = reinterpret_cast<LtLayout *>(layout);
  if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) SET_ATTR(l->batch, buf, bytes);
  else if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) SET_ATTR(l->stride, buf, bytes);
  else l->unsupported = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  *pref =
      static_cast<cublasLtMatmulPreference_t>(counted_handle("cublasLtMatmulPreferenceCreate"));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(const cublasLtMatmulPreference_t pref) {
  std::free(pref);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                    cublasLtMatmulPreferenceAttributes_t,
                                                    const void *, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
// DSRT_EMU_NO_EPILOGUE_ALGO=1: the heuristic finds no algorithm for any
// product with an epilogue (as cuBLASLt may for some shape or type), so
// that the runtime's fallback runs, and a product run with one anyway fails.
static bool no_epilogue_algo() {
  static const bool set = env_flag("DSRT_EMU_NO_EPILOGUE_ALGO");
  return set;
}
// DSRT_EMU_FAIL_BIAS_GRAD_EPILOGUE=1: asking for an algorithm with the
// BGRADA or BGRADB epilogue is an error (not the NOT_SUPPORTED the runtime
// falls back on), so that a run with DSRT_BIAS_GRAD=separate shows it never
// asks (cuda_tests.cmake, dsrt_cuda_emu_bias_grad_separate).
static bool fail_bias_grad_epilogue() {
  static const bool set = env_flag("DSRT_EMU_FAIL_BIAS_GRAD_EPILOGUE");
  return set;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int *returned) {
  LOCKED;
  st.count("cublasLtMatmulAlgoGetHeuristic");
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  const uint32_t epilogue = reinterpret_cast<const LtDesc *>(desc)->epilogue;
  if (fail_bias_grad_epilogue() &&
      (epilogue == CUBLASLT_EPILOGUE_BGRADA || epilogue == CUBLASLT_EPILOGUE_BGRADB)) {
    std::fprintf(stderr, "fake cudart: cublasLtMatmulAlgoGetHeuristic: a bias-gradient "
                         "epilogue asked for (DSRT_EMU_FAIL_BIAS_GRAD_EPILOGUE=1)\n");
    return CUBLAS_STATUS_INTERNAL_ERROR;
  }
  if (no_epilogue_algo() &&
      reinterpret_cast<const LtDesc *>(desc)->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    *returned = 0;
    return CUBLAS_STATUS_SUCCESS;
  }
  // Up to kFakeAlgos algorithms when more than one is asked for (the
  // runtime's DSRT_CUBLASLT_TUNE), numbered in data[0] from the last: the
  // first returned is number n - 1, the last 0. cublasLtMatmul takes
  // 1 + number ms of the fake clock, so the last is the fastest a tuner
  // can find; asked for one, the heuristic returns number 0 (1 ms) as ever.
  constexpr int kFakeAlgos = 4;
  const int n = std::min(requested, kFakeAlgos);
  for (int i = 0; i < n; ++i) {
    results[i] = cublasLtMatmulHeuristicResult_t{};
    results[i].algo.data[0] = static_cast<uint64_t>(n - 1 - i);
    results[i].state = CUBLAS_STATUS_SUCCESS;
  }
  *returned = n;
  return CUBLAS_STATUS_SUCCESS;
}
#if DSRT_FAKE_EMULATE
namespace {
float lt_load(int type, const void *p, int64_t i) {
  switch (type) {
  case CUDA_R_16F: return __half2float(static_cast<const __half *>(p)[i]);
  case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  default: return static_cast<const float *>(p)[i];
  }
}
void lt_store(int type, void *p, int64_t i, float v) {
  switch (type) {
  case CUDA_R_16F: static_cast<__half *>(p)[i] = __float2half_rn(v); break;
  case CUDA_R_16BF: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v); break;
  default: static_cast<float *>(p)[i] = v; break;
  }
}
bool lt_type_ok(int type) { return type == CUDA_R_32F || type == CUDA_R_16F || type == CUDA_R_16BF; }
// Column-major D = alpha op(A) op(B) + beta C on the host, accumulating in
// f32 in k order (cuBLASLt's f32 compute without TF32; alpha and beta f32).
cublasStatus_t emulated_matmul(const LtDesc *desc, const void *alpha_p, const void *A,
                               const LtLayout *a, const void *B, const LtLayout *b,
                               const void *beta_p, const void *C, const LtLayout *c, void *D,
                               const LtLayout *d) {
  const auto fail = [](const std::string &why) {
    std::fprintf(stderr, "fake cudart: cublasLtMatmul: %s\n", why.c_str());
    return CUBLAS_STATUS_NOT_SUPPORTED;
  };
  if (desc->unsupported || a->unsupported || b->unsupported || c->unsupported || d->unsupported)
    return fail("an attribute the emulation does not model (only transposes, the epilogue, "
                "bias pointer and type, aux pointer, ld and type, batch count and stride)");
  const bool gelu_aux_bias = desc->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool dgelu = desc->epilogue == CUBLASLT_EPILOGUE_DGELU;
  const bool bias = desc->epilogue == CUBLASLT_EPILOGUE_BIAS || gelu_aux_bias;
  const bool bgrad_a = desc->epilogue == CUBLASLT_EPILOGUE_BGRADA;
  const bool bgrad_b = desc->epilogue == CUBLASLT_EPILOGUE_BGRADB;
  if (desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT && !bias && !bgrad_a && !bgrad_b && !dgelu)
    return fail("epilogue " + std::to_string(desc->epilogue) +
                " (only DEFAULT, BIAS, BGRADA, BGRADB, GELU_AUX_BIAS and DGELU are emulated)");
  if (desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT && no_epilogue_algo())
    return fail("epilogue " + std::to_string(desc->epilogue) +
                " without an algorithm (DSRT_EMU_NO_EPILOGUE_ALGO=1)");
  // The aux matrix: D's shape, its own ld (in elements, a multiple of 8 and
  // at least D's rows, as cuBLASLt requires) and type (D's by default).
  const int aux_type = desc->aux_type == -1 ? d->type : desc->aux_type;
  if ((gelu_aux_bias || dgelu) &&
      (!desc->aux || desc->aux_ld % 8 != 0 || desc->aux_ld < int64_t(d->rows) ||
       aux_type != d->type || d->batch != 1))
    return fail("a GELU epilogue without an aux pointer, with an aux ld " +
                std::to_string(desc->aux_ld) + " not a multiple of 8 at least D's " +
                std::to_string(d->rows) + " rows, an aux type other than D's, or on a batch");
  const int bias_type = desc->bias_type == -1 ? d->type : desc->bias_type;
  if ((bias || bgrad_a || bgrad_b) && (!desc->bias || !lt_type_ok(bias_type) || d->batch != 1))
    return fail("a bias epilogue without a bias pointer, with a bias type other than f32, "
                "f16, bf16, or on a batch");
  if (desc->scale != CUDA_R_32F ||
      (desc->compute != CUBLAS_COMPUTE_32F && desc->compute != CUBLAS_COMPUTE_32F_FAST_TF32))
    return fail("compute type " + std::to_string(desc->compute) + ", scale type " +
                std::to_string(desc->scale) + " (only f32 compute and scale are emulated)");
  if (!lt_type_ok(a->type) || !lt_type_ok(b->type) || !lt_type_ok(c->type) ||
      !lt_type_ok(d->type))
    return fail("a matrix type other than f32, f16, bf16");
  const bool ta = desc->trans_a == CUBLAS_OP_T, tb = desc->trans_b == CUBLAS_OP_T;
  const int64_t m = int64_t(ta ? a->cols : a->rows), k = int64_t(ta ? a->rows : a->cols);
  const int64_t kb = int64_t(tb ? b->cols : b->rows), n = int64_t(tb ? b->rows : b->cols);
  if (k != kb || int64_t(d->rows) != m || int64_t(d->cols) != n || c->rows != d->rows ||
      c->cols != d->cols)
    return fail("shapes do not agree: op(A) " + std::to_string(m) + "x" + std::to_string(k) +
                ", op(B) " + std::to_string(kb) + "x" + std::to_string(n) + ", D " +
                std::to_string(d->rows) + "x" + std::to_string(d->cols));
  if (a->ld < int64_t(a->rows) || b->ld < int64_t(b->rows) || c->ld < int64_t(c->rows) ||
      d->ld < int64_t(d->rows))
    return fail("a leading dimension below its matrix's rows");
  // DSRT_EMU_REQUIRE_ALIGNED_LD=1: a large f16/bf16 product (2^27
  // multiply-adds and more) with a leading dimension, or (a not
  // transposed) a contraction, not a multiple of 8 fails, as the runtime
  // stages such products (workspace_shapes.h).
  static const bool require_aligned = env_flag("DSRT_EMU_REQUIRE_ALIGNED_LD");
  if (require_aligned && (a->type == CUDA_R_16F || a->type == CUDA_R_16BF) &&
      static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) >=
          static_cast<double>(int64_t(1) << 27) &&
      (a->ld % 8 != 0 || b->ld % 8 != 0 || c->ld % 8 != 0 || d->ld % 8 != 0 ||
       (!tb && k % 8 != 0)))
    return fail("a large 16-bit product with a leading dimension or contraction not a "
                "multiple of 8 (lds " +
                std::to_string(a->ld) + ", " + std::to_string(b->ld) + ", " +
                std::to_string(c->ld) + ", " + std::to_string(d->ld) + ", k " +
                std::to_string(k) + ", DSRT_EMU_REQUIRE_ALIGNED_LD=1)");
  const int32_t batch = d->batch;
  if (a->batch != batch || b->batch != batch || c->batch != batch)
    return fail("batch counts differ");
  float alpha, beta;
  std::memcpy(&alpha, alpha_p, sizeof alpha);
  std::memcpy(&beta, beta_p, sizeof beta);
  if (dsemu::fault("matmul-scale")) alpha *= 1.01f;
  for (int32_t i = 0; i < batch; ++i) {
    const int64_t ao = i * a->stride, bo = i * b->stride, co = i * c->stride, dof = i * d->stride;
    for (int64_t col = 0; col < n; ++col)
      for (int64_t row = 0; row < m; ++row) {
        float acc = 0.0f;
        for (int64_t kk = 0; kk < k; ++kk) {
          const float x = lt_load(a->type, A, ao + (ta ? kk + row * a->ld : row + kk * a->ld));
          const float y = lt_load(b->type, B, bo + (tb ? col + kk * b->ld : kk + col * b->ld));
          acc += x * y;
        }
        float v = alpha * acc;
        if (beta != 0.0f) v += beta * lt_load(c->type, C, co + row + col * c->ld);
        if (bias) v += lt_load(bias_type, desc->bias, row);  // one per row of D
        if (gelu_aux_bias) {
          // The GELU's input to aux, the tanh GELU of the f32 value to D.
          lt_store(aux_type, desc->aux, row + col * desc->aux_ld, v);
          v = 0.5f * v * (1.0f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
        } else if (dgelu) {
          // The product times the tanh GELU's derivative at aux.
          const float x = lt_load(aux_type, desc->aux, row + col * desc->aux_ld);
          const float t = std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x));
          v *= 0.5f * (1.0f + t) +
               0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 0.134145f * x * x);
        }
        lt_store(d->type, D, dof + row + col * d->ld, v);
      }
  }
  // BGRADA: op(A) summed over k, one per row of D; BGRADB: op(B) summed
  // over k, one per column of D; in f32 in k order.
  const auto bias_grad = [&](int64_t count, auto at) {
    for (int64_t i = 0; i < count; ++i) {
      float sum = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) sum += at(i, kk);
      lt_store(bias_type, desc->bias, i, sum);
    }
  };
  if (bgrad_a)
    bias_grad(m, [&](int64_t row, int64_t kk) {
      return lt_load(a->type, A, ta ? kk + row * a->ld : row + kk * a->ld);
    });
  if (bgrad_b)
    bias_grad(n, [&](int64_t col, int64_t kk) {
      return lt_load(b->type, B, tb ? col + kk * b->ld : kk + col * b->ld);
    });
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace
#endif

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                              cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspace_bytes, cudaStream_t stream) {
  LOCKED;
  st.count("cublasLtMatmul");
  st.check_stream(stream, "cublasLtMatmul");
  st.on_stream(stream, "cublasLtMatmul");
  // The heuristic's algorithm number (cublasLtMatmulAlgoGetHeuristic):
  // number k takes k ms more; counted by number when more than one may be.
  const uint64_t number = algo ? algo->data[0] : 0;
  st.advance(stream, 1000.0 * static_cast<double>(number));
  static const bool by_number = std::getenv("DSRT_CUBLASLT_TUNE") != nullptr;
  if (by_number)
    ++st.now().calls["cublasLtMatmul algorithm " + std::to_string(number)];
  if (workspace_bytes && !st.kind_of(workspace, workspace_bytes))
    st.error("cublasLtMatmul: a workspace outside device memory");
#if DSRT_FAKE_EMULATE
  return emulated_matmul(reinterpret_cast<const LtDesc *>(desc), alpha, A,
                         reinterpret_cast<const LtLayout *>(Adesc), B,
                         reinterpret_cast<const LtLayout *>(Bdesc), beta, C,
                         reinterpret_cast<const LtLayout *>(Cdesc), D,
                         reinterpret_cast<const LtLayout *>(Ddesc));
#else
  return CUBLAS_STATUS_SUCCESS;
#endif
}

//===--- NCCL --------------------------------------------------------------===//
#ifndef DSRT_FAKE_NO_NCCL

struct ncclComm {
  int nranks, rank;
#if DSRT_FAKE_NCCL_MPI
  dsemu::nccl::Comm *emu;
#endif
};

const char *ncclGetErrorString(ncclResult_t) { return "fake nccl"; }
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  LOCKED;
  st.count("ncclGetUniqueId");
#if DSRT_FAKE_NCCL_MPI
  dsemu::nccl::unique_id(id->internal);
#else
  std::memset(id, 7, sizeof(*id));
#endif
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  {
    LOCKED;
    st.count("ncclCommInitRank");
  }
  // As NCCL does with NCCL_DEBUG set (VERSION, WARN, INFO, TRACE): its
  // version line on the first initialization of rank 0, here naming the
  // fake, so that a check that a run went through NCCL (scripts/gpu-check.sh's
  // zero3 stage) sees which NCCL it was.
  static bool said_version = false;
  const char *debug = std::getenv("NCCL_DEBUG");
  if (debug && *debug && rank == 0 && !said_version) {
    said_version = true;
#if DSRT_FAKE_NCCL_MPI
    std::printf("NCCL version 0.0.0+dsrt-emulation (the CUDA emulation's NCCL over MPI)\n");
#else
    std::printf("NCCL version 0.0.0+dsrt-fake (the fake NCCL: collectives move nothing)\n");
#endif
    std::fflush(stdout);
  }
#if DSRT_FAKE_NCCL_MPI
  *comm = new ncclComm{nranks, rank, dsemu::nccl::init(nranks, id.internal, rank)};
#else
  (void)id;
  *comm = new ncclComm{nranks, rank};
#endif
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
#if DSRT_FAKE_NCCL_MPI
  if (comm) dsemu::nccl::destroy(comm->emu);
#endif
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  {
    LOCKED;
    st.count("ncclCommAbort");
  }
  return ncclCommDestroy(comm);
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *error) {
  *error = ncclSuccess;
  return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  *count = comm->nranks;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  *rank = comm->rank;
  return ncclSuccess;
}
ncclResult_t ncclGroupStart() {
  {
    LOCKED;
    st.count("ncclGroupStart");
  }
#if DSRT_FAKE_NCCL_MPI
  dsemu::nccl::group_start();
#endif
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  {
    LOCKED;
    st.count("ncclGroupEnd");
  }
#if DSRT_FAKE_NCCL_MPI
  dsemu::nccl::group_end();  // the group's calls move their data here
#endif
  return ncclSuccess;
}

namespace {
ncclResult_t collective(const char *api, cudaStream_t stream) {
  LOCKED;
  st.count(api);
  st.check_stream(stream, api);
  st.advance(stream, 1000);
  return ncclSuccess;
}
}  // namespace

// Under the emulation with MPI (DSRT_FAKE_NCCL_MPI) each call also moves
// its data (emu/nccl_mpi.cpp); otherwise the buffers stay as they are.
#if DSRT_FAKE_NCCL_MPI
#define EMULATED(call) dsemu::nccl::call
#else
#define EMULATED(call)
#endif
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r = collective("ncclAllReduce", stream);
  EMULATED(all_reduce(send, recv, count, type, op, comm->emu));
  return r;
}
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r = collective("ncclAllGather", stream);
  EMULATED(all_gather(send, recv, count, type, comm->emu));
  return r;
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r = collective("ncclReduceScatter", stream);
  EMULATED(reduce_scatter(send, recv, count, type, op, comm->emu));
  return r;
}
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r = collective("ncclBroadcast", stream);
  EMULATED(broadcast(send, recv, count, type, root, comm->emu));
  return r;
}
ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r = collective("ncclReduce", stream);
  EMULATED(reduce(send, recv, count, type, op, root, comm->emu));
  return r;
}
ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r = collective("ncclSend", stream);
  EMULATED(send(buf, count, type, peer, comm->emu));
  return r;
}
ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  ncclResult_t r = collective("ncclRecv", stream);
  EMULATED(recv(buf, count, type, peer, comm->emu));
  return r;
}
#undef EMULATED
#endif  // DSRT_FAKE_NO_NCCL

}  // extern "C"
