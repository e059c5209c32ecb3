// Optimizer updates of one tensor, ONNX ai.onnx.preview.training semantics
// (Adam, Momentum, Adagrad). The scalar learning-rate adjustments are
// computed in f64, the elementwise updates in f32.
#include "internal.h"

namespace dsrt {

using namespace detail;

namespace {

struct Scalars {
  double lr = 0.0;
  int64_t step = 0;
};

Scalars check_optimizer(const char *kernel, const Tensor &lr, const Tensor &step,
                        const Tensor &param, const Tensor *const *states, const char *const *names,
                        int count) {
  check_data(kernel, "lr", lr);
  check_data(kernel, "step", step);
  check_float(kernel, "lr", lr);
  check_dtype(kernel, "step", step, DType::I64);
  if (lr.numel() != 1 || lr.shape.rank > 1)
    fail(kernel, "lr must be a scalar, got " + lr.shape.str());
  if (step.numel() != 1 || step.shape.rank > 1)
    fail(kernel, "step must be a scalar, got " + step.shape.str());
  check_data(kernel, "param", param);
  check_float(kernel, "param", param);
  for (int i = 0; i < count; ++i) {
    check_data(kernel, names[i], *states[i]);
    check_same_dtype(kernel, "param", param, names[i], *states[i]);
    check_shape(kernel, names[i], *states[i], param.shape);
  }
  Scalars sc;
  sc.lr = float_values(kernel, "lr", lr)[0];
  sc.step = step.as<int64_t>()[0];
  return sc;
}

// Runs f(i, loaded inputs..., outputs...) over every element in f32.
template <typename T, int In, int Out, typename F>
void update(const Stream &s, const Tensor *const (&inputs)[In], const Tensor *const (&outputs)[Out],
            F f) {
  const int64_t n = inputs[0]->numel();
  parallel_for(s, n, kGrainElementwise, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float in[In], out[Out];
      for (int k = 0; k < In; ++k)
        in[k] = Elem<T>::load(inputs[k]->template as<T>()[i]);
      f(in, out);
      for (int k = 0; k < Out; ++k)
        outputs[k]->template as<T>()[i] = Elem<T>::store(out[k]);
    }
  });
}

}  // namespace

void adam(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param, const Tensor &grad,
          const Tensor &m, const Tensor &v, const Tensor &param_out, const Tensor &m_out,
          const Tensor &v_out, float alpha, float beta, float epsilon, float norm_coefficient,
          float norm_coefficient_post) {
  begin_kernel(s);
  const char *kernel = "adam";
  const Tensor *states[] = {&grad, &m, &v, &param_out, &m_out, &v_out};
  const char *names[] = {"grad", "first_moment", "second_moment", "param_out",
                         "first_moment_out", "second_moment_out"};
  Scalars sc = check_optimizer(kernel, lr, step, param, states, names, 6);
  // r' = lr * sqrt(1 - beta^t) / (1 - alpha^t) for t > 0 (bias correction).
  double r = sc.lr;
  if (sc.step > 0) {
    double t = static_cast<double>(sc.step);
    r = sc.lr * std::sqrt(1.0 - std::pow(static_cast<double>(beta), t)) /
        (1.0 - std::pow(static_cast<double>(alpha), t));
  }
  const float rate = static_cast<float>(r);
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor *const inputs[4] = {&param, &grad, &m, &v};
    const Tensor *const outputs[3] = {&param_out, &m_out, &v_out};
    update<T>(s, inputs, outputs, [=](const float *in, float *out) {
      const float x = in[0];
      const float g = in[1] + norm_coefficient * x;
      const float v1 = alpha * in[2] + (1.0f - alpha) * g;
      const float h1 = beta * in[3] + (1.0f - beta) * g * g;
      const float x1 = x - rate * (v1 / (std::sqrt(h1) + epsilon));
      out[0] = (1.0f - norm_coefficient_post) * x1;
      out[1] = v1;
      out[2] = h1;
    });
  });
}

void momentum(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param,
              const Tensor &grad, const Tensor &velocity, const Tensor &param_out,
              const Tensor &velocity_out, float alpha, float beta, MomentumMode mode,
              float norm_coefficient) {
  begin_kernel(s);
  const char *kernel = "momentum";
  const Tensor *states[] = {&grad, &velocity, &param_out, &velocity_out};
  const char *names[] = {"grad", "velocity", "param_out", "velocity_out"};
  Scalars sc = check_optimizer(kernel, lr, step, param, states, names, 4);
  const float rate = static_cast<float>(sc.lr);
  // The gradient's coefficient is 1 on the first step.
  const float beta_t = sc.step > 0 ? beta : 1.0f;
  const bool nesterov = mode == MomentumMode::Nesterov;
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor *const inputs[3] = {&param, &grad, &velocity};
    const Tensor *const outputs[2] = {&param_out, &velocity_out};
    update<T>(s, inputs, outputs, [=](const float *in, float *out) {
      const float x = in[0];
      const float g = in[1] + norm_coefficient * x;
      const float v1 = alpha * in[2] + beta_t * g;
      out[0] = nesterov ? x - rate * (g + alpha * v1) : x - rate * v1;
      out[1] = v1;
    });
  });
}

void adagrad(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param,
             const Tensor &grad, const Tensor &accumulator, const Tensor &param_out,
             const Tensor &accumulator_out, float decay_factor, float epsilon,
             float norm_coefficient) {
  begin_kernel(s);
  const char *kernel = "adagrad";
  const Tensor *states[] = {&grad, &accumulator, &param_out, &accumulator_out};
  const char *names[] = {"grad", "accumulator", "param_out", "accumulator_out"};
  Scalars sc = check_optimizer(kernel, lr, step, param, states, names, 4);
  // r = lr / (1 + t * decay_factor)
  const float rate = static_cast<float>(
      sc.lr / (1.0 + static_cast<double>(sc.step) * static_cast<double>(decay_factor)));
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor *const inputs[3] = {&param, &grad, &accumulator};
    const Tensor *const outputs[2] = {&param_out, &accumulator_out};
    update<T>(s, inputs, outputs, [=](const float *in, float *out) {
      const float x = in[0];
      const float g = in[1] + norm_coefficient * x;
      const float h1 = in[2] + g * g;
      out[0] = x - rate * g / (std::sqrt(h1) + epsilon);
      out[1] = h1;
    });
  });
}

}  // namespace dsrt
