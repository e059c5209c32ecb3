// Shared pieces of the cuda backend: error checks, the streams of
// dsrt::Streams, the device error word and cuBLASLt.
#include "cuda/common.cuh"

#include "async.h"
#include "dsrt/cuda_launch.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

namespace dsrt {
namespace detail {

void check_cuda(cudaError_t status, const char *kernel, const char *what) {
  if (status == cudaSuccess)
    return;
  cudaGetLastError();  // clear a non-sticky error so that later calls may proceed
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver)
    fail(kernel, std::string(what) + ": no CUDA device: " + cudaGetErrorString(status));
  fail(kernel, std::string(what) + ": " + cudaGetErrorString(status));
}

void check_cublas(cublasStatus_t status, const char *kernel, const char *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail(kernel, std::string(what) + ": cuBLASLt status " + std::to_string(int(status)));
}

namespace {
// The stream of the last kernel this thread queued (begin_kernel).
thread_local cudaStream_t last_launch_stream = nullptr;
}  // namespace

bool synchronous_ops() {
  static const bool on = [] {
    const char *v = std::getenv("DSRT_CUDA_SYNC");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

unsigned stream_blocks(int64_t units, int threads) {
  static const int64_t cap = [] {
    const char *v = std::getenv("DSRT_CUDA_MAX_BLOCKS");
    const long long n = v ? std::atoll(v) : 0;
    return n >= 1 ? static_cast<int64_t>(std::min<long long>(n, 2048)) : int64_t(2048);
  }();
  const int64_t b = (units + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > cap ? cap : b));
}

void check_launch(const char *kernel) {
  check_cuda(cudaGetLastError(), kernel, "kernel launch");
  if (!synchronous_ops())
    return;
  // DSRT_CUDA_SYNC=1: the kernel has run before the host goes on, so that
  // a device fault or bad data it found is reported here, naming it.
  check_cuda(cudaStreamSynchronize(last_launch_stream), kernel,
             "cudaStreamSynchronize after the kernel (DSRT_CUDA_SYNC=1)");
  throw_device_error();
}

//===----------------------------------------------------------------------===//
// The device error word
//===----------------------------------------------------------------------===//

namespace {

struct ErrorWordState {
  std::mutex mutex;
  DeviceErrorWord *host = nullptr;    // pinned, mapped
  DeviceErrorWord *device = nullptr;  // the same memory seen from the device
  std::vector<const char *> names;
};

ErrorWordState &error_state() {
  static ErrorWordState *state = new ErrorWordState;  // never destroyed
  return *state;
}

}  // namespace

DeviceErrorWord *device_error_word() {
  ErrorWordState &st = error_state();
  std::lock_guard<std::mutex> lock(st.mutex);
  if (!st.device) {
    void *p = nullptr;
    check_cuda(cudaHostAlloc(&p, sizeof(DeviceErrorWord), cudaHostAllocMapped), "cuda",
               "cudaHostAlloc of the device error word");
    std::memset(p, 0, sizeof(DeviceErrorWord));
    st.host = static_cast<DeviceErrorWord *>(p);
    void *d = nullptr;
    check_cuda(cudaHostGetDevicePointer(&d, p, 0), "cuda", "cudaHostGetDevicePointer");
    st.device = static_cast<DeviceErrorWord *>(d);
  }
  return st.device;
}

int32_t kernel_id(const char *kernel) {
  ErrorWordState &st = error_state();
  std::lock_guard<std::mutex> lock(st.mutex);
  for (size_t i = 0; i < st.names.size(); ++i)
    if (st.names[i] == kernel || std::strcmp(st.names[i], kernel) == 0)
      return static_cast<int32_t>(i);
  st.names.push_back(kernel);
  return static_cast<int32_t>(st.names.size() - 1);
}

void throw_device_error() {
  ErrorWordState &st = error_state();
  std::string message;
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    if (!st.host)
      return;
    volatile DeviceErrorWord *w = st.host;
    if (w->fault == 0)
      return;
    const char *kernel = w->kernel >= 0 && size_t(w->kernel) < st.names.size()
                             ? st.names[w->kernel]
                             : "cuda";
    const std::string value = std::to_string(w->value), bound = std::to_string(w->bound);
    message = std::string("dsrt::") + kernel + ": ";
    switch (static_cast<DeviceFault>(w->fault)) {
    case DeviceFault::IndexOutOfRange:
      message += "index " + value + " is out of range for an axis of size " + bound;
      break;
    case DeviceFault::PositionOutOfRange:
      message += "position " + value + " is out of range for data of " + bound + " elements";
      break;
    case DeviceFault::LabelOutOfRange:
      message += "label " + value + " is out of range [0, " + bound + ")";
      break;
    case DeviceFault::IntegerDivByZero:
      message += "integer division by zero (rhs element " + value + " is 0)";
      break;
    case DeviceFault::BadStep:
      message += "step " + value + " is not a step count (the first update is 1)";
      break;
    default: message += "unknown device fault " + std::to_string(w->fault); break;
    }
    std::memset(const_cast<DeviceErrorWord *>(st.host), 0, sizeof(DeviceErrorWord));
  }
  throw Error(message);
}

//===----------------------------------------------------------------------===//
// Streams
//===----------------------------------------------------------------------===//

namespace {

// The streams' scratch: slots of kStreamScratchDoubles doubles (zeros to
// begin with: a kernel may keep a counter there that it leaves at 0) carved
// from one cudaMalloc made with the first stream, so that a stream first used
// inside a step (a bucket's, the communication stream) allocates nothing.
// A slot returns to the pool with its stream; beyond kScratchSlots live
// streams each further one has a cudaMalloc of its own.
constexpr int kScratchSlots = 256;
struct ScratchPool {
  std::mutex mutex;
  double *base = nullptr;
  std::vector<int> free_slots;

  double *take() {
    std::lock_guard<std::mutex> lock(mutex);
    if (!base) {
      void *p = nullptr;
      check_cuda(cudaMalloc(&p, size_t(kScratchSlots) * kStreamScratchDoubles * sizeof(double)),
                 "cuda", "cudaMalloc of the streams' scratch");
      check_cuda(cudaMemset(p, 0, size_t(kScratchSlots) * kStreamScratchDoubles * sizeof(double)),
                 "cuda", "cudaMemset of the streams' scratch");
      base = static_cast<double *>(p);
      for (int i = kScratchSlots - 1; i >= 0; --i)
        free_slots.push_back(i);
    }
    if (!free_slots.empty()) {
      const int slot = free_slots.back();
      free_slots.pop_back();
      return base + size_t(slot) * kStreamScratchDoubles;
    }
    void *p = nullptr;
    check_cuda(cudaMalloc(&p, kStreamScratchDoubles * sizeof(double)), "cuda",
               "cudaMalloc of a stream's scratch");
    check_cuda(cudaMemset(p, 0, kStreamScratchDoubles * sizeof(double)), "cuda",
               "cudaMemset of a stream's scratch");
    return static_cast<double *>(p);
  }
  void give_back(double *p) {
    std::lock_guard<std::mutex> lock(mutex);
    const double *end = base + size_t(kScratchSlots) * kStreamScratchDoubles;
    if (base && p >= base && p < end)
      free_slots.push_back(static_cast<int>((p - base) / kStreamScratchDoubles));
    else
      cudaFree(p);
  }
};

ScratchPool &scratch_pool() {
  static ScratchPool *pool = new ScratchPool;  // never destroyed: streams may outlive statics
  return *pool;
}

// The backend's state of one dsrt::Stream: its cudaStream_t and a few
// doubles of device scratch for kernels that pass a scalar to the next
// kernel on the stream (a loss's divisor), a slot of the scratch pool. So
// no kernel allocates; kernels on one stream run in order, so they never
// share the scratch with another.
struct CudaStreamState {
  cudaStream_t stream = nullptr;
  double *scratch = nullptr;
  ~CudaStreamState() {
    // At process exit the runtime may be gone already: nothing to report.
    if (scratch)
      scratch_pool().give_back(scratch);
    if (stream)
      cudaStreamDestroy(stream);
  }
};

CudaStreamState &stream_state(Stream &s) {
  StreamState &state = *s.state();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.device) {
    auto cs = std::make_shared<CudaStreamState>();
    check_cuda(cudaStreamCreateWithFlags(&cs->stream, cudaStreamNonBlocking), "cuda",
               "cudaStreamCreateWithFlags");
    cs->scratch = scratch_pool().take();
    state.device = cs;
  }
  return *static_cast<CudaStreamState *>(state.device.get());
}

}  // namespace

cudaStream_t cuda_stream(Stream &s) { return stream_state(s).stream; }

bool has_cuda_stream(Stream &s) {
  StreamState &state = *s.state();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.device != nullptr;
}

double *stream_scratch(Stream &s) { return stream_state(s).scratch; }

cudaStream_t begin_kernel(Stream &s) {
  wait_host_work(s);
  last_launch_stream = cuda_stream(s);
  return last_launch_stream;
}

//===----------------------------------------------------------------------===//
// cuBLASLt
//===----------------------------------------------------------------------===//

cublasLtHandle_t cublaslt() {
  static cublasLtHandle_t handle = [] {
    cublasLtHandle_t h = nullptr;
    check_cublas(cublasLtCreate(&h), "cuda", "cublasLtCreate");
    return h;
  }();
  return handle;
}

bool allow_tf32() {
  static const bool allowed = [] {
    const char *v = std::getenv("DSRT_ALLOW_TF32");
    return v && std::strcmp(v, "1") == 0;
  }();
  return allowed;
}

// `name`'s value as an integer from 0 to `max`, or `unset` where it is
// unset or empty; anything else is an Error saying "dsrt: NAME must be
// WHAT, not 'VALUE'".
int64_t env_integer(const char *name, int64_t max, int64_t unset, const char *what) {
  const char *v = std::getenv(name);
  if (!v || !*v)
    return unset;
  char *end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n < 0 || n > max)
    throw Error(std::string("dsrt: ") + name + " must be " + what + ", not '" + v + "'");
  return static_cast<int64_t>(n);
}

int64_t cublaslt_workspace_cap() {
  static const int64_t cap =
      env_integer("DSRT_CUBLASLT_WORKSPACE", std::numeric_limits<int64_t>::max(),
                  std::numeric_limits<int64_t>::max(), "a byte count (a non-negative integer)");
  return cap;
}

int cublaslt_tune() {
  static const int count = [] {
    const int64_t n =
        env_integer("DSRT_CUBLASLT_TUNE", 16, 0, "a count of algorithms from 0 to 16");
    return n > 1 ? static_cast<int>(n) : 0;
  }();
  return count;
}

bool env_second(const char *name, const char *first, const char *second) {
  const char *v = std::getenv(name);
  if (!v || !*v || std::strcmp(v, first) == 0)
    return false;
  if (std::strcmp(v, second) == 0)
    return true;
  throw Error(std::string("dsrt: ") + name + " must be " + first + " or " + second + ", not '" +
              v + "'");
}

bool bias_grad_epilogue() {
  static const bool epilogue = !env_second("DSRT_BIAS_GRAD", "epilogue", "separate");
  return epilogue;
}

}  // namespace detail

namespace cuda {

// dsrt/cuda_launch.h: the stream generated kernels launch on.
cudaStream_t launch_stream(Stream &stream) {
  if (stream.backend() != Backend::Cuda)
    throw Error("dsrt::cuda::launch_stream: a generated cuda kernel was given a stream of the " +
                std::string(stream.backend() == Backend::Cpu ? "cpu" : "other") + " backend");
  return detail::begin_kernel(stream);
}

// dsrt/cuda_launch.h: after a generated kernel's launch was checked.
void launched(const char *kernel) {
  if (detail::synchronous_ops())
    detail::check_launch(kernel);
}

}  // namespace cuda
}  // namespace dsrt
