// dsrt: what a program generated for the cuda backend (dsopt --target cuda)
// calls around its own kernels.
//
// dsopt turns each fused elementwise loop into a CUDA `__global__` kernel and
// a host function that launches it:
//
//   cudaStream_t s = dsrt::cuda::launch_stream(stream);
//   dsopt_fused_0_kernel<<<blocks, threads, 0, s>>>(x, y, out);
//   dsrt::cuda::check_launch("dsopt_fused_0");
//
// launch_stream is defined by the cuda backend library (dsrt_cuda); the
// rest is inline here. Include only from code nvcc compiles.
#ifndef DSRT_CUDA_LAUNCH_H
#define DSRT_CUDA_LAUNCH_H

#include "dsrt/stream.h"
#include "dsrt/tensor.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

namespace dsrt {
namespace cuda {

// The CUDA stream behind `stream` (a Stream of the cuda backend), after
// ordering it behind the asynchronous work pending on `stream` that the
// device does not already wait for (what begin_generated_kernel does for the
// cpu backend): a kernel launched on it runs after every earlier operation
// of `stream`. Throws a dsrt::Error for a stream of another backend.
cudaStream_t launch_stream(Stream &stream);

// Throws a dsrt::Error naming `kernel` if its launch failed (a bad launch
// configuration, no kernel image for this device).
// With DSRT_CUDA_SYNC=1 the backend then waits for the kernel (launched),
// so that a device fault it causes is reported here, naming it.
void launched(const char *kernel);
inline void check_launch(const char *kernel) {
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess)
    throw Error(std::string("cannot launch the generated kernel ") + kernel +
                ": " + cudaGetErrorString(error));
  launched(kernel);
}

// The device address of the `__device__` variable whose host shadow is
// `symbol`: cudaGetSymbolAddress on its first call for that symbol, then
// from a table, so that after a function's first run (step 1) a step makes
// no lookup (docs/runtime.md, "Constants"). Throws a dsrt::Error if the
// runtime has no such symbol.
inline void *symbol_address(const void *symbol) {
  static std::mutex mutex;
  static std::unordered_map<const void *, void *> *addresses =
      new std::unordered_map<const void *, void *>;  // never destroyed
  std::lock_guard<std::mutex> lock(mutex);
  auto found = addresses->find(symbol);
  if (found != addresses->end())
    return found->second;
  void *address = nullptr;
  cudaError_t error = cudaGetSymbolAddress(&address, symbol);
  if (error != cudaSuccess)
    throw Error(std::string("cannot find a constant's device address: ") +
                cudaGetErrorString(error));
  addresses->emplace(symbol, address);
  return address;
}

// A view of the `__device__` array `symbol` (a constant of the generated
// program the kernels read), at the device address the CUDA runtime gives
// it. These arrays are the module's static device memory, loaded with its
// code, outside any arena; looking up an address allocates and copies
// nothing, and is made once per array (symbol_address).
template <typename T> Tensor symbol_view(const T &symbol, DType dtype, Shape shape) {
  return Tensor{symbol_address(static_cast<const void *>(&symbol)), dtype, shape};
}

// The first thing a generated program's main does: without a usable CUDA
// device it says so on stderr and exits with status 1, before reading any
// flag or file.
inline void require_device(const char *program) {
  int devices = 0;
  cudaError_t error = cudaGetDeviceCount(&devices);
  if (error == cudaSuccess && devices > 0)
    return;
  std::fprintf(stderr, "%s: no CUDA device: %s\n", program,
               error == cudaSuccess ? "the CUDA runtime found none"
                                    : cudaGetErrorString(error));
  std::exit(1);
}

}  // namespace cuda
}  // namespace dsrt

#endif  // DSRT_CUDA_LAUNCH_H
