// dsrt_cuda_start: a program linked with libdsrt_cuda.a that makes the cuda
// backend (forward_main with nothing to run) and exits 0. Run under the
// fake CUDA runtime (LD_PRELOAD=libdsrt_fake_cudart.so): as is, it starts;
// with DSRT_FAKE_CUDA_NO_KERNEL_IMAGE=1, a GPU the library has no kernel
// image for, it must fail at the start naming the GPU's architecture and
// the library's (cuda/backend.cu, check_kernel_image).
#include "dsrt/program.h"

namespace {

void describe(dsrt::ProgramInfo &) {}
void run(dsrt::Program &) {}

}  // namespace

int main(int argc, char **argv) { return dsrt::forward_main(argc, argv, describe, run); }
