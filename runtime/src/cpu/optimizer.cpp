// Optimizer updates of one tensor: ONNX ai.onnx.preview.training semantics
// (adam, momentum, adagrad) and torch.optim's (adamw, sgd; lion after its
// paper), and the squared gradient norm. The scalar learning-rate
// adjustments are computed in f64, the elementwise updates in f32. Every
// update reads all inputs of an element before writing its outputs, so the
// outputs may be the inputs (in place).
#include "internal.h"

#include <utility>

namespace dsrt {

using namespace detail;

namespace {

struct Scalars {
  double lr = 0.0;
  int64_t step = 0;
};

// The checks of kernel_common.h, then lr and step read from their memory.
Scalars check_optimizer(const char *kernel, const Tensor &lr, const Tensor *step,
                        const Tensor &param, const Tensor *const *states, const char *const *names,
                        int count) {
  check_optimizer_args(kernel, lr, step, param, states, names, count);
  Scalars sc;
  sc.lr = float_value(kernel, "lr", lr);
  sc.step = step ? step->as<int64_t>()[0] : 0;
  return sc;
}

// Input I of an update at element i in f32: input 1, the gradient, has
// type G (the parameter's, or bf16/f16 for an f32 parameter) and is read
// times the update's gradient scale (1 when it has none: exact), the
// others have type T.
template <typename T, typename G, size_t I>
inline float load_input(const void *p, int64_t i, float grad_scale) {
  using E = std::conditional_t<I == 1, G, T>;
  const float x = Elem<E>::load(static_cast<const E *>(p)[i]);
  if constexpr (I == 1)
    return x * grad_scale;
  else
    return x;
}

// The gradient scale an update reads: *grad_scale (checked), or 1.
float grad_scale_of(const char *kernel, const Tensor *grad_scale) {
  check_grad_scale(kernel, grad_scale);
  return grad_scale ? grad_scale->as<float>()[0] : 1.0f;
}

// Elements [begin, end) of an update: f(in_0[i], ..., out_0[i], ...), inputs
// by value and outputs by reference. The operand pointers are indexed by
// compile-time constants only, so the loop vectorizes with plain loads and
// stores. `omp simd` is sound although an output may be an input (in place):
// element i of the outputs depends only on element i of the inputs. With a
// copy type C (bf16 or f16; void for none) the first output, the updated
// f32 parameter, is also written to `copy` rounded to C as ds.cast rounds
// it, in the same loop: mixed precision's 16-bit working copy.
template <typename T, typename G, typename C, typename F, size_t In, size_t Out, size_t... I,
          size_t... O>
void update_range(F &f, const void *const (&ip)[In], T *const (&op)[Out], void *copy,
                  float grad_scale, int64_t begin, int64_t end, std::index_sequence<I...>,
                  std::index_sequence<O...>) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    float out[Out];
    f(load_input<T, G, I>(ip[I], i, grad_scale)..., out[O]...);
    ((op[O][i] = Elem<T>::store(out[O])), ...);
    if constexpr (!std::is_void_v<C>)
      static_cast<C *>(copy)[i] = Elem<C>::store(out[0]);
  }
}

// Elements [begin, end) of one update's tensors: f(inputs..., outputs...) in
// f32; inputs[1] is the gradient (of type T, or bf16/f16 with T = float,
// checked), read times grad_scale. `copy` (null for none; bf16 or f16 with
// T = float, checked) gets the updated parameter rounded to its type.
template <typename T, int In, int Out, typename F>
void update_tensors(F &f, const Tensor *const (&inputs)[In], const Tensor *const (&outputs)[Out],
                    float grad_scale, int64_t begin, int64_t end,
                    const Tensor *copy = nullptr) {
  const void *ip[In];
  T *op[Out];
  for (int k = 0; k < In; ++k)
    ip[k] = inputs[k]->data;
  for (int k = 0; k < Out; ++k)
    op[k] = outputs[k]->template as<T>();
  void *cp = copy ? copy->data : nullptr;
  auto run = [&](auto grad_tag, auto copy_tag) {
    using G = typename decltype(grad_tag)::type;
    using C = typename decltype(copy_tag)::type;
    update_range<T, G, C>(f, ip, op, cp, grad_scale, begin, end, std::make_index_sequence<In>(),
                          std::make_index_sequence<Out>());
  };
  auto with_copy = [&](auto grad_tag) {
    if constexpr (std::is_same_v<T, float>) {
      if (copy && copy->dtype == DType::BF16)
        return run(grad_tag, TypeTag<bfloat_t>{});
      if (copy && copy->dtype == DType::F16)
        return run(grad_tag, TypeTag<half_t>{});
    }
    run(grad_tag, TypeTag<void>{});
  };
  if constexpr (std::is_same_v<T, float>) {
    if (inputs[1]->dtype == DType::BF16)
      return with_copy(TypeTag<bfloat_t>{});
    if (inputs[1]->dtype == DType::F16)
      return with_copy(TypeTag<half_t>{});
  }
  with_copy(TypeTag<T>{});
}

// Runs f over every element of one update's tensors, in parallel.
template <typename T, int In, int Out, typename F>
void update(const Stream &s, const Tensor *const (&inputs)[In], const Tensor *const (&outputs)[Out],
            F f, float grad_scale = 1.0f, const Tensor *copy = nullptr) {
  parallel_for(s, inputs[0]->numel(), kGrainElementwise, [&](int64_t begin, int64_t end) {
    update_tensors<T>(f, inputs, outputs, grad_scale, begin, end, copy);
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
  Scalars sc = check_optimizer(kernel, lr, &step, param, states, names, 6);
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
    update<T>(s, inputs, outputs,
              [=](float x, float grad_in, float v0, float h0, float &x_new, float &v_new,
                  float &h_new) {
                const float g = grad_in + norm_coefficient * x;
                const float v1 = alpha * v0 + (1.0f - alpha) * g;
                const float h1 = beta * h0 + (1.0f - beta) * g * g;
                const float x1 = x - rate * (v1 / (std::sqrt(h1) + epsilon));
                x_new = (1.0f - norm_coefficient_post) * x1;
                v_new = v1;
                h_new = h1;
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
  Scalars sc = check_optimizer(kernel, lr, &step, param, states, names, 4);
  const float rate = static_cast<float>(sc.lr);
  // The gradient's coefficient is 1 on the first step.
  const float beta_t = sc.step > 0 ? beta : 1.0f;
  const bool nesterov = mode == MomentumMode::Nesterov;
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor *const inputs[3] = {&param, &grad, &velocity};
    const Tensor *const outputs[2] = {&param_out, &velocity_out};
    update<T>(s, inputs, outputs,
              [=](float x, float grad_in, float v, float &x_new, float &v_new) {
                const float g = grad_in + norm_coefficient * x;
                const float v1 = alpha * v + beta_t * g;
                x_new = nesterov ? x - rate * (g + alpha * v1) : x - rate * v1;
                v_new = v1;
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
  Scalars sc = check_optimizer(kernel, lr, &step, param, states, names, 4);
  // r = lr / (1 + t * decay_factor)
  const float rate = static_cast<float>(
      sc.lr / (1.0 + static_cast<double>(sc.step) * static_cast<double>(decay_factor)));
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor *const inputs[3] = {&param, &grad, &accumulator};
    const Tensor *const outputs[2] = {&param_out, &accumulator_out};
    update<T>(s, inputs, outputs, [=](float x, float grad_in, float h, float &x_new, float &h_new) {
      const float g = grad_in + norm_coefficient * x;
      const float h1 = h + g * g;
      x_new = x - rate * g / (std::sqrt(h1) + epsilon);
      h_new = h1;
    });
  });
}

//===----------------------------------------------------------------------===//
// torch.optim steps
//===----------------------------------------------------------------------===//

namespace {

// torch.optim counts steps from 1; the bias corrections divide by zero at 0.
void check_step(const char *kernel, int64_t step) {
  if (step < 1)
    fail(kernel, "step " + std::to_string(step) + " is not a step count (the first update is 1)");
}

// One element of torch.optim.Adam(W), with the step's scalars as torch
// computes them (in double), each rounded once to f32 where the tensor
// arithmetic uses it. adamw and adamw_multi share it, so both give the
// same bits.
struct AdamStep {
  float step_size, bc2_sqrt, decay, l2, b1, b2, c1, c2, epsilon;
  AdamStep(const Scalars &sc, float beta1, float beta2, float eps, float weight_decay,
           bool decoupled) {
    const double t = static_cast<double>(sc.step);
    const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), t);
    const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), t);
    step_size = static_cast<float>(sc.lr / bc1);
    bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    decay = decoupled ? static_cast<float>(1.0 - sc.lr * weight_decay) : 1.0f;
    l2 = decoupled ? 0.0f : weight_decay;
    b1 = beta1;
    b2 = beta2;
    c1 = static_cast<float>(1.0 - beta1);
    c2 = static_cast<float>(1.0 - beta2);
    epsilon = eps;
  }
  void operator()(float p, float grad_in, float m0, float v0, float &p_new, float &m_new,
                  float &v_new) const {
    const float g = grad_in + l2 * p;
    const float m1 = b1 * m0 + c1 * g;
    const float v1 = b2 * v0 + c2 * g * g;
    const float denom = std::sqrt(v1) / bc2_sqrt + epsilon;
    p_new = p * decay - step_size * (m1 / denom);
    m_new = m1;
    v_new = v1;
  }
};

struct SgdUpdate {
  float rate, momentum, one_minus_dampening, weight_decay;
};

// One element of torch.optim.SGD. The modes are template parameters so that
// each loop is branch-free and vectorizes.
template <bool Momentum, bool First, bool Nesterov> struct SgdStep {
  SgdUpdate u;
  void operator()(float p, float grad_in, float v, float &p_new, float &v_new) const {
    const float g = grad_in + u.weight_decay * p;
    if constexpr (!Momentum) {
      p_new = p - u.rate * g;
      v_new = v;  // without momentum the velocity passes through
    } else {
      const float buf = First ? g : u.momentum * v + u.one_minus_dampening * g;
      const float d = Nesterov ? g + u.momentum * buf : buf;
      p_new = p - u.rate * d;
      v_new = buf;
    }
  }
};

}  // namespace

void adamw(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param,
           const Tensor &grad, const Tensor &m, const Tensor &v, const Tensor &param_out,
           const Tensor &m_out, const Tensor &v_out, float beta1, float beta2, float epsilon,
           float weight_decay, bool decoupled, const Tensor *grad_scale,
           const Tensor *param_copy) {
  begin_kernel(s);
  const char *kernel = "adamw";
  const Tensor *states[] = {&grad, &m, &v, &param_out, &m_out, &v_out};
  const char *names[] = {"grad", "m", "v", "param_out", "m_out", "v_out"};
  Scalars sc = check_optimizer(kernel, lr, &step, param, states, names, 6);
  const float gs = grad_scale_of(kernel, grad_scale);
  check_param_copy(kernel, param, param_copy);
  check_step(kernel, sc.step);
  const AdamStep a(sc, beta1, beta2, epsilon, weight_decay, decoupled);
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor *const inputs[4] = {&param, &grad, &m, &v};
    const Tensor *const outputs[3] = {&param_out, &m_out, &v_out};
    update<T>(s, inputs, outputs, a, gs, param_copy);
  });
}

void sgd(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param,
         const Tensor &grad, const Tensor &velocity, const Tensor &param_out,
         const Tensor &velocity_out, float momentum, float dampening, float weight_decay,
         bool nesterov, const Tensor *grad_scale, const Tensor *param_copy) {
  begin_kernel(s);
  const char *kernel = "sgd";
  const Tensor *states[] = {&grad, &velocity, &param_out, &velocity_out};
  const char *names[] = {"grad", "velocity", "param_out", "velocity_out"};
  Scalars sc = check_optimizer(kernel, lr, &step, param, states, names, 4);
  const float gs = grad_scale_of(kernel, grad_scale);
  check_step(kernel, sc.step);
  check_sgd_modes(kernel, momentum, dampening, nesterov);
  check_param_copy(kernel, param, param_copy);
  const SgdUpdate u{static_cast<float>(sc.lr), momentum, static_cast<float>(1.0 - dampening),
                    weight_decay};
  const bool first = sc.step == 1;
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor *const inputs[3] = {&param, &grad, &velocity};
    const Tensor *const outputs[2] = {&param_out, &velocity_out};
    if (momentum == 0.0f)
      update<T>(s, inputs, outputs, SgdStep<false, false, false>{u}, gs, param_copy);
    else if (first)
      nesterov ? update<T>(s, inputs, outputs, SgdStep<true, true, true>{u}, gs, param_copy)
               : update<T>(s, inputs, outputs, SgdStep<true, true, false>{u}, gs, param_copy);
    else
      nesterov ? update<T>(s, inputs, outputs, SgdStep<true, false, true>{u}, gs, param_copy)
               : update<T>(s, inputs, outputs, SgdStep<true, false, false>{u}, gs, param_copy);
  });
}

void adamw_multi(Stream &s, const Tensor &lr, const Tensor &step, int num_tensors,
                 const Tensor *params, const Tensor *grads, const Tensor *ms, const Tensor *vs,
                 const Tensor *params_out, const Tensor *ms_out, const Tensor *vs_out,
                 float beta1, float beta2, float epsilon, float weight_decay, bool decoupled,
                 const Tensor *grad_scale, const Tensor *params_copy) {
  begin_kernel(s);
  const char *kernel = "adamw_multi";
  check_adamw_multi_args(kernel, lr, step, num_tensors, params, grads, ms, vs, params_out, ms_out,
                         vs_out);
  if (params_copy)
    for (int i = 0; i < num_tensors; ++i)
      check_param_copy(kernel, params[i], &params_copy[i]);
  const float gs = grad_scale_of(kernel, grad_scale);
  if (num_tensors == 0)
    return;
  const Scalars sc{float_value(kernel, "lr", lr), step.as<int64_t>()[0]};
  check_step(kernel, sc.step);
  const AdamStep a(sc, beta1, beta2, epsilon, weight_decay, decoupled);
  // One parallel region over the concatenation of every tensor's elements:
  // each thread takes an equal share of the elements (whatever the
  // tensors' sizes) and updates the pieces of the tensors that fall in it,
  // with adamw's element code. Nothing is allocated.
  int64_t total = 0;
  for (int i = 0; i < num_tensors; ++i)
    total += params[i].numel();
  dispatch_float(kernel, params[0].dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_for(s, total, kGrainElementwise, [&](int64_t begin, int64_t end) {
      int64_t offset = 0;  // of tensor i in the concatenation
      for (int i = 0; i < num_tensors && offset < end; ++i) {
        const int64_t n = params[i].numel();
        const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
        if (lo < hi) {
          const Tensor *const inputs[4] = {&params[i], &grads[i], &ms[i], &vs[i]};
          const Tensor *const outputs[3] = {&params_out[i], &ms_out[i], &vs_out[i]};
          update_tensors<T>(a, inputs, outputs, gs, lo - offset, hi - offset,
                            params_copy ? &params_copy[i] : nullptr);
        }
        offset += n;
      }
    });
  });
}

void lion(Stream &s, const Tensor &lr, const Tensor &param, const Tensor &grad, const Tensor &m,
          const Tensor &param_out, const Tensor &m_out, float beta1, float beta2,
          float weight_decay, const Tensor *grad_scale, const Tensor *param_copy) {
  begin_kernel(s);
  const char *kernel = "lion";
  const Tensor *states[] = {&grad, &m, &param_out, &m_out};
  const char *names[] = {"grad", "m", "param_out", "m_out"};
  Scalars sc = check_optimizer(kernel, lr, nullptr, param, states, names, 4);
  const float gs = grad_scale_of(kernel, grad_scale);
  check_param_copy(kernel, param, param_copy);
  const float rate = static_cast<float>(sc.lr);
  const float decay = static_cast<float>(1.0 - sc.lr * weight_decay);
  const float b1 = beta1, b2 = beta2;
  const float c1 = static_cast<float>(1.0 - beta1), c2 = static_cast<float>(1.0 - beta2);
  dispatch_float(kernel, param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor *const inputs[3] = {&param, &grad, &m};
    const Tensor *const outputs[2] = {&param_out, &m_out};
    update<T>(s, inputs, outputs, [=](float p, float g, float m0, float &p_new, float &m_new) {
      const float c = b1 * m0 + c1 * g;
      // sign(c) as torch.sign: 0 for 0, NaN for NaN.
      const float sign = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : c);
      p_new = p * decay - rate * sign;
      m_new = b2 * m0 + c2 * g;
    }, gs, param_copy);
  });
}

//===----------------------------------------------------------------------===//
// sum_of_squares
//===----------------------------------------------------------------------===//

namespace {

template <typename T> double sum_squares(const T *p, int64_t n) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) {
    const double v = Elem<T>::load(p[i]);
    acc += v * v;  // exact: a 24-bit significand squared fits in 53 bits
  }
  return acc;
}

}  // namespace

void sum_of_squares(Stream &s, const Tensor *tensors, int num_tensors, const Tensor &out) {
  begin_kernel(s);
  const char *kernel = "sum_of_squares";
  check_sum_of_squares(kernel, tensors, num_tensors, out);
  // Fixed-size blocks over all tensors, summed in f64 each and then in
  // order: the same bits for every thread count. The blocks are taken
  // kBatch at a time, so the kernel needs no memory beyond its stack.
  constexpr int64_t kBlock = 1 << 16;
  constexpr int kBatch = 256;
  struct Block {
    int tensor;
    int64_t begin, end;
  };
  Block blocks[kBatch];
  double partial[kBatch];
  double total = 0.0;
  int k = 0;
  int64_t next = 0;  // the next block of tensor k starts here
  while (k < num_tensors) {
    int count = 0;
    for (; k < num_tensors && count < kBatch; ++k, next = 0) {
      const int64_t n = tensors[k].numel();
      for (; next < n && count < kBatch; next += kBlock)
        blocks[count++] = {k, next, std::min(n, next + kBlock)};
      if (next < n) break;  // the batch is full; tensor k goes on in the next
    }
    parallel_for(s, count, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const Block &b = blocks[i];
        const Tensor &t = tensors[b.tensor];
        const int64_t n = b.end - b.begin;
        switch (t.dtype) {  // float types only, checked above
        case DType::F32: partial[i] = sum_squares(t.as<float>() + b.begin, n); break;
        case DType::F16: partial[i] = sum_squares(t.as<half_t>() + b.begin, n); break;
        default: partial[i] = sum_squares(t.as<bfloat_t>() + b.begin, n); break;
        }
      }
    });
    for (int i = 0; i < count; ++i)
      total += partial[i];
  }
  out.as<float>()[0] = static_cast<float>(total);
}

}  // namespace dsrt
