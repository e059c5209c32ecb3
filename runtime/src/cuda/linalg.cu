// linalg kernels on the cuda backend.
#include "cuda/common.cuh"

namespace dsrt {

using namespace detail;

void matmul(Stream &s, const Tensor &a, const Tensor &b, const Tensor &y, bool transpose_a, bool transpose_b, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("matmul");
}

void gemm(Stream &s, const Tensor &a, const Tensor &b, const Tensor *c, const Tensor &y, float alpha, float beta, bool transpose_a, bool transpose_b, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("gemm");
}

}  // namespace dsrt
