// optimizer kernels on the cuda backend.
#include "cuda/common.cuh"

namespace dsrt {

using namespace detail;

void adam(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param, const Tensor &grad, const Tensor &m, const Tensor &v, const Tensor &param_out, const Tensor &m_out, const Tensor &v_out, float alpha, float beta, float epsilon, float norm_coefficient, float norm_coefficient_post) {
  begin_kernel(s);
  not_implemented("adam");
}

void momentum(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param, const Tensor &grad, const Tensor &velocity, const Tensor &param_out, const Tensor &velocity_out, float alpha, float beta, MomentumMode mode, float norm_coefficient) {
  begin_kernel(s);
  not_implemented("momentum");
}

void adagrad(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param, const Tensor &grad, const Tensor &accumulator, const Tensor &param_out, const Tensor &accumulator_out, float decay_factor, float epsilon, float norm_coefficient) {
  begin_kernel(s);
  not_implemented("adagrad");
}

void adamw(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param, const Tensor &grad, const Tensor &m, const Tensor &v, const Tensor &param_out, const Tensor &m_out, const Tensor &v_out, float beta1, float beta2, float epsilon, float weight_decay, bool decoupled) {
  begin_kernel(s);
  not_implemented("adamw");
}

void sgd(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param, const Tensor &grad, const Tensor &velocity, const Tensor &param_out, const Tensor &velocity_out, float momentum, float dampening, float weight_decay, bool nesterov) {
  begin_kernel(s);
  not_implemented("sgd");
}

void lion(Stream &s, const Tensor &lr, const Tensor &param, const Tensor &grad, const Tensor &m, const Tensor &param_out, const Tensor &m_out, float beta1, float beta2, float weight_decay) {
  begin_kernel(s);
  not_implemented("lion");
}

}  // namespace dsrt
