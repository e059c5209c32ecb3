// Shared pieces of the cuda backend: error checks, the streams of
// dsrt::Streams, the device error word and cuBLASLt.
#include "cuda/common.cuh"

#include "async.h"

#include <cstdlib>
#include <cstring>
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

void check_launch(const char *kernel) { check_cuda(cudaGetLastError(), kernel, "kernel launch"); }

[[noreturn]] void not_implemented(const char *kernel) {
  fail(kernel, std::string("cuda kernel ") + kernel +
                   " is not implemented (use the cpu backend, libdsrt.a)");
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
    case DeviceFault::LabelOutOfRange:
      message += "label " + value + " is out of range [0, " + bound + ")";
      break;
    case DeviceFault::IntegerDivByZero:
      message += "integer division by zero (rhs element " + value + " is 0)";
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

cudaStream_t cuda_stream(Stream &s) {
  StreamState &state = *s.state();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.device) {
    cudaStream_t stream = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cuda",
               "cudaStreamCreateWithFlags");
    // Destroyed with the last copy of the Stream; at process exit the
    // runtime may be gone already, which is not an error worth reporting.
    state.device = std::shared_ptr<void>(stream, [](void *p) {
      cudaStreamDestroy(static_cast<cudaStream_t>(p));
    });
  }
  return static_cast<cudaStream_t>(state.device.get());
}

cudaStream_t begin_kernel(Stream &s) {
  wait_host_work(s);
  return cuda_stream(s);
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

}  // namespace detail
}  // namespace dsrt
