// norm kernels on the cuda backend.
#include "cuda/common.cuh"

namespace dsrt {

using namespace detail;

void softmax(Stream &s, const Tensor &x, const Tensor &y, int axis, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("softmax");
}

void log_softmax(Stream &s, const Tensor &x, const Tensor &y, int axis, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("log_softmax");
}

void layer_norm(Stream &s, const Tensor &x, const Tensor &scale, const Tensor *bias, const Tensor &y, const Tensor &mean, const Tensor &inv_std_dev, int axis, float epsilon, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("layer_norm");
}

void batch_norm(Stream &s, const Tensor &x, const Tensor &scale, const Tensor &bias, const Tensor &mean, const Tensor &var, const Tensor &y, float epsilon) {
  begin_kernel(s);
  not_implemented("batch_norm");
}

void batch_norm_train(Stream &s, const Tensor &x, const Tensor &scale, const Tensor &bias, const Tensor &running_mean, const Tensor &running_var, const Tensor &y, const Tensor &running_mean_out, const Tensor &running_var_out, const Tensor &saved_mean, const Tensor &saved_inv_std, float epsilon, float momentum) {
  begin_kernel(s);
  not_implemented("batch_norm_train");
}

void softmax_grad(Stream &s, const Tensor &y, const Tensor &dy, const Tensor &dx, int axis, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("softmax_grad");
}

void log_softmax_grad(Stream &s, const Tensor &y, const Tensor &dy, const Tensor &dx, int axis, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("log_softmax_grad");
}

void layer_norm_grad(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &scale, const Tensor &mean, const Tensor &inv_std_dev, const Tensor &dx, const Tensor &dscale, const Tensor *dbias, int axis, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("layer_norm_grad");
}

void batch_norm_grad(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &scale, const Tensor &saved_mean, const Tensor &saved_inv_std, const Tensor &dx, const Tensor &dscale, const Tensor &dbias) {
  begin_kernel(s);
  not_implemented("batch_norm_grad");
}

}  // namespace dsrt
