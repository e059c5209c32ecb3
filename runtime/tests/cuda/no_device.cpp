// dsrt_cuda_no_device: a program linked with libdsrt_cuda.a, run where there
// is no GPU, must fail through the runtime's normal error path: the cuda
// backend is created by the first Stream, its cudaGetDeviceCount finds no
// device, and forward_main reports "error: dsrt: no CUDA device ..." and
// returns 1. Where a GPU is present there is nothing to check: it says so
// and exits 77 (reported as skipped).
#include "dsrt/backend.h"
#include "dsrt/program.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

namespace {

void describe(dsrt::ProgramInfo &) {}
void run(dsrt::Program &) {}

}  // namespace

int main(int argc, char **argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
    std::printf("skipped: %d CUDA device(s) present, the no-device path cannot be taken\n",
                count);
    return 77;
  }
  // Asking the cuda library for the cpu backend names the library to link.
  try {
    dsrt::backend(dsrt::Backend::Cpu);
    std::fprintf(stderr, "dsrt_cuda_no_device: backend(Backend::Cpu) did not throw\n");
    return 2;
  } catch (const dsrt::Error &e) {
    if (std::string(e.what()).find("libdsrt.a") == std::string::npos) {
      std::fprintf(stderr, "dsrt_cuda_no_device: unexpected message: %s\n", e.what());
      return 2;
    }
  }
  return dsrt::forward_main(argc, argv, describe, run);
}
