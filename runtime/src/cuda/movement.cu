// movement kernels on the cuda backend.
#include "cuda/common.cuh"

namespace dsrt {

using namespace detail;

void copy(Stream &s, const Tensor &x, const Tensor &y) {
  begin_kernel(s);
  not_implemented("copy");
}

void transpose(Stream &s, const Tensor &x, const Tensor &y, const int64_t *perm) {
  begin_kernel(s);
  not_implemented("transpose");
}

void broadcast_to(Stream &s, const Tensor &x, const Tensor &y) {
  begin_kernel(s);
  not_implemented("broadcast_to");
}

void concat(Stream &s, const Tensor *inputs, int num_inputs, const Tensor &y, int axis) {
  begin_kernel(s);
  not_implemented("concat");
}

void split(Stream &s, const Tensor &x, const Tensor *outputs, int num_outputs, int axis) {
  begin_kernel(s);
  not_implemented("split");
}

void slice(Stream &s, const Tensor &x, const Tensor &y, const int64_t *offsets, const int64_t *strides) {
  begin_kernel(s);
  not_implemented("slice");
}

void gather(Stream &s, const Tensor &data, const Tensor &indices, const Tensor &y, int axis) {
  begin_kernel(s);
  not_implemented("gather");
}

void trilu(Stream &s, const Tensor &x, const Tensor &y, bool upper, int64_t k) {
  begin_kernel(s);
  not_implemented("trilu");
}

void gather_grad(Stream &s, const Tensor &dy, const Tensor &indices, const Tensor &ddata, int axis, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("gather_grad");
}

void slice_grad(Stream &s, const Tensor &dy, const Tensor &dx, const int64_t *offsets, const int64_t *strides) {
  begin_kernel(s);
  not_implemented("slice_grad");
}

}  // namespace dsrt
