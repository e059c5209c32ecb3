// conv kernels on the cuda backend.
#include "cuda/common.cuh"

namespace dsrt {

using namespace detail;

void conv(Stream &s, const Tensor &x, const Tensor &w, const Tensor *bias, const Tensor &y, const int64_t *strides, const int64_t *pads, const int64_t *dilations, int64_t group, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("conv");
}

void max_pool(Stream &s, const Tensor &x, const Tensor &y, const int64_t *kernel, const int64_t *strides, const int64_t *pads, const int64_t *dilations) {
  begin_kernel(s);
  not_implemented("max_pool");
}

void avg_pool(Stream &s, const Tensor &x, const Tensor &y, const int64_t *kernel, const int64_t *strides, const int64_t *pads, bool count_include_pad) {
  begin_kernel(s);
  not_implemented("avg_pool");
}

void conv_grad_input(Stream &s, const Tensor &dy, const Tensor &w, const Tensor &dx, const int64_t *strides, const int64_t *pads, const int64_t *dilations, int64_t group, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("conv_grad_input");
}

void conv_grad_weight(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &dw, const int64_t *strides, const int64_t *pads, const int64_t *dilations, int64_t group, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("conv_grad_weight");
}

void max_pool_grad(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &dx, const int64_t *kernel, const int64_t *strides, const int64_t *pads, const int64_t *dilations, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("max_pool_grad");
}

void avg_pool_grad(Stream &s, const Tensor &dy, const Tensor &dx, const int64_t *kernel, const int64_t *strides, const int64_t *pads, bool count_include_pad, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("avg_pool_grad");
}

}  // namespace dsrt
