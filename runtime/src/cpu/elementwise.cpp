// Elementwise kernels: unary, binary, compare, where, cast.
//
// Float types compute in f32 and round once to the output type. Binary,
// compare and where broadcast through a BroadcastPlan, so the inner loop is a
// contiguous run with per-operand strides of 0 or 1 (same shape, scalar
// operand and a bias along the last axis all end up there).
#include "elementwise_ops.h"
#include "internal.h"

#include <limits>

namespace dsrt {

using namespace detail;

namespace {

//===----------------------------------------------------------------------===//
// unary
//===----------------------------------------------------------------------===//

template <typename T, typename F>
void run_unary(const Stream &s, const Tensor &x, const Tensor &y, F f) {
  const T *in = x.as<T>();
  T *out = y.as<T>();
  parallel_for(s, x.numel(), kGrainElementwise, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      out[i] = Elem<T>::store(f(Elem<T>::load(in[i])));
  });
}

// Float-only ops computed in f32.
template <typename T>
void unary_float(const Stream &s, UnaryOp op, const Tensor &x, const Tensor &y, float alpha) {
  switch (op) {
  case UnaryOp::Sqrt: run_unary<T>(s, x, y, [](float v) { return std::sqrt(v); }); return;
  case UnaryOp::Reciprocal: run_unary<T>(s, x, y, [](float v) { return 1.0f / v; }); return;
  case UnaryOp::Exp: run_unary<T>(s, x, y, [](float v) { return fast_exp(v); }); return;
  case UnaryOp::Log: run_unary<T>(s, x, y, [](float v) { return std::log(v); }); return;
  case UnaryOp::Tanh: run_unary<T>(s, x, y, [](float v) { return fast_tanh(v); }); return;
  case UnaryOp::Erf: run_unary<T>(s, x, y, [](float v) { return fast_erf(v); }); return;
  case UnaryOp::Sigmoid: run_unary<T>(s, x, y, [](float v) { return fast_sigmoid(v); }); return;
  case UnaryOp::LeakyRelu:
    run_unary<T>(s, x, y, [alpha](float v) { return v >= 0.0f ? v : alpha * v; });
    return;
  case UnaryOp::Gelu:
    run_unary<T>(s, x, y, [](float v) { return fast_gelu(v); });
    return;
  case UnaryOp::GeluTanh:
    // x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))
    run_unary<T>(s, x, y, [](float v) {
      float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
      return 0.5f * v * (1.0f + fast_tanh(inner));
    });
    return;
  case UnaryOp::Softplus:
    // PyTorch's threshold: beyond 20, log(1 + exp(x)) rounds to x.
    run_unary<T>(s, x, y, [](float v) { return v > 20.0f ? v : std::log1p(fast_exp(v)); });
    return;
  case UnaryOp::Elu:
    run_unary<T>(s, x, y, [alpha](float v) { return v > 0.0f ? v : alpha * std::expm1(v); });
    return;
  case UnaryOp::Celu: {
    const float scale = 1.0f / alpha;
    run_unary<T>(s, x, y,
                 [alpha, scale](float v) { return v > 0.0f ? v : alpha * std::expm1(v * scale); });
    return;
  }
  case UnaryOp::Sin: run_unary<T>(s, x, y, [](float v) { return std::sin(v); }); return;
  case UnaryOp::Cos: run_unary<T>(s, x, y, [](float v) { return std::cos(v); }); return;
  case UnaryOp::Floor: run_unary<T>(s, x, y, [](float v) { return std::floor(v); }); return;
  case UnaryOp::Ceil: run_unary<T>(s, x, y, [](float v) { return std::ceil(v); }); return;
  // Halves to even, as ONNX Round (the default rounding mode).
  case UnaryOp::Round: run_unary<T>(s, x, y, [](float v) { return std::nearbyint(v); }); return;
  default: break;
  }
}

}  // namespace

void unary(Stream &s, UnaryOp op, const Tensor &x, const Tensor &y, float alpha) {
  begin_kernel(s);
  const char *kernel = unary_name(op);
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "x", x, "y", y);
  check_shape(kernel, "y", y, x.shape);
  if (op == UnaryOp::Not) {
    check_dtype(kernel, "x", x, DType::Bool);
    const uint8_t *in = x.as<uint8_t>();
    uint8_t *out = y.as<uint8_t>();
    parallel_for(s, x.numel(), kGrainElementwise, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        out[i] = in[i] == 0;
    });
    return;
  }
  if (op == UnaryOp::Neg || op == UnaryOp::Relu) {
    bool neg = op == UnaryOp::Neg;
    dispatch_numeric(kernel, x.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Elem<T>::compute;
      if constexpr (std::is_integral_v<T>) {
        if (neg)
          run_unary<T>(s, x, y, [](C v) { return wrap_neg(v); });
        else
          run_unary<T>(s, x, y, [](C v) { return v < 0 ? C(0) : v; });
      } else {
        if (neg)
          run_unary<T>(s, x, y, [](float v) { return -v; });
        else  // NaN stays NaN, as in PyTorch
          run_unary<T>(s, x, y, [](float v) { return v < 0.0f ? 0.0f : v; });
      }
    });
    return;
  }
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_float<T>(s, op, x, y, alpha);
  });
}

//===----------------------------------------------------------------------===//
// binary, compare, where
//===----------------------------------------------------------------------===//

namespace {

// One contiguous run of a two-operand broadcast: the strides are 0 or 1.
// Specialized per stride pattern so every case vectorizes.
template <typename TA, typename TB, typename TY, typename F>
inline void run2(const TA *a, int64_t sa, const TB *b, int64_t sb, TY *y, int64_t n, F f) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i)
      y[i] = f(a[i], b[i]);
  } else if (sa == 1) {
    const TB bv = b[0];
    for (int64_t i = 0; i < n; ++i)
      y[i] = f(a[i], bv);
  } else if (sb == 1) {
    const TA av = a[0];
    for (int64_t i = 0; i < n; ++i)
      y[i] = f(av, b[i]);
  } else {
    const TY v = f(a[0], b[0]);
    for (int64_t i = 0; i < n; ++i)
      y[i] = v;
  }
}

template <typename TA, typename TB, typename TY, typename F>
void broadcast2(const Stream &s, const BroadcastPlan &plan, const TA *a, const TB *b, TY *y,
                int64_t numel, F f) {
  const int last = plan.rank - 1;
  const int64_t sa = plan.strides[0][last], sb = plan.strides[1][last];
  parallel_for(s, numel, kGrainElementwise, [&](int64_t begin, int64_t end) {
    for_each_row(plan, begin, end, [&](int64_t out, const int64_t *off, int64_t n) {
      run2(a + off[0], sa, b + off[1], sb, y + out, n, f);
    });
  });
}


template <typename T> void check_no_zero(const char *kernel, const Tensor &b) {
  const T *p = b.as<T>();
  for (int64_t i = 0, n = b.numel(); i < n; ++i)
    if (p[i] == 0)
      fail(kernel, "integer division by zero (rhs element " + std::to_string(i) + " is 0)");
}

template <typename T>
void binary_typed(const Stream &s, BinaryOp op, const BroadcastPlan &plan, const Tensor &a,
                  const Tensor &b, const Tensor &y) {
  const T *pa = a.as<T>(), *pb = b.as<T>();
  T *py = y.as<T>();
  const int64_t n = y.numel();
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
    case BinaryOp::Add: broadcast2(s, plan, pa, pb, py, n, wrap_add<T>); return;
    case BinaryOp::Sub: broadcast2(s, plan, pa, pb, py, n, wrap_sub<T>); return;
    case BinaryOp::Mul: broadcast2(s, plan, pa, pb, py, n, wrap_mul<T>); return;
    case BinaryOp::Div:
      check_no_zero<T>(binary_name(op), b);
      broadcast2(s, plan, pa, pb, py, n, trunc_div<T>);
      return;
    case BinaryOp::Pow: fail(binary_name(op), std::string("needs float operands, got ") + dtype_name(a.dtype));
    case BinaryOp::Mod:
      check_no_zero<T>(binary_name(op), b);
      broadcast2(s, plan, pa, pb, py, n, floor_rem<T>);
      return;
    case BinaryOp::Fmod:
      check_no_zero<T>(binary_name(op), b);
      broadcast2(s, plan, pa, pb, py, n, trunc_rem<T>);
      return;
    }
  } else {
    auto lift = [](auto f) {
      return [f](T x, T z) { return Elem<T>::store(f(Elem<T>::load(x), Elem<T>::load(z))); };
    };
    switch (op) {
    case BinaryOp::Add: broadcast2(s, plan, pa, pb, py, n, lift([](float x, float z) { return x + z; })); return;
    case BinaryOp::Sub: broadcast2(s, plan, pa, pb, py, n, lift([](float x, float z) { return x - z; })); return;
    case BinaryOp::Mul: broadcast2(s, plan, pa, pb, py, n, lift([](float x, float z) { return x * z; })); return;
    case BinaryOp::Div: broadcast2(s, plan, pa, pb, py, n, lift([](float x, float z) { return x / z; })); return;
    case BinaryOp::Pow:
      broadcast2(s, plan, pa, pb, py, n, lift([](float x, float z) { return std::pow(x, z); }));
      return;
    case BinaryOp::Mod: broadcast2(s, plan, pa, pb, py, n, lift(floor_remf)); return;
    case BinaryOp::Fmod:
      broadcast2(s, plan, pa, pb, py, n, lift([](float x, float z) { return std::fmod(x, z); }));
      return;
    }
  }
}

}  // namespace

void binary(Stream &s, BinaryOp op, const Tensor &a, const Tensor &b, const Tensor &y) {
  begin_kernel(s);
  const char *kernel = binary_name(op);
  BroadcastPlan plan = check_binary(kernel, a, b, y);
  if (y.numel() == 0)
    return;
  dispatch_numeric(kernel, a.dtype, [&](auto tag) {
    binary_typed<typename decltype(tag)::type>(s, op, plan, a, b, y);
  });
}

namespace {
template <typename C> inline uint8_t compare_values(ComparePredicate pred, C x, C z) {
  switch (pred) {
  case ComparePredicate::Eq: return x == z;
  case ComparePredicate::Lt: return x < z;
  case ComparePredicate::Le: return x <= z;
  case ComparePredicate::Gt: return x > z;
  case ComparePredicate::Ge: return x >= z;
  }
  return 0;
}

template <typename T, ComparePredicate P>
void compare_typed(const Stream &s, const BroadcastPlan &plan, const Tensor &a, const Tensor &b,
                   const Tensor &y) {
  broadcast2(s, plan, a.as<T>(), b.as<T>(), y.as<uint8_t>(), y.numel(), [](T x, T z) -> uint8_t {
    return compare_values<typename Elem<T>::compute>(P, Elem<T>::load(x), Elem<T>::load(z));
  });
}
}  // namespace

void compare(Stream &s, ComparePredicate pred, const Tensor &a, const Tensor &b, const Tensor &y) {
  begin_kernel(s);
  const char *kernel = compare_name(pred);
  BroadcastPlan plan = check_compare(kernel, a, b, y);
  if (y.numel() == 0)
    return;
  dispatch_all(kernel, a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (pred) {
    case ComparePredicate::Eq: compare_typed<T, ComparePredicate::Eq>(s, plan, a, b, y); return;
    case ComparePredicate::Lt: compare_typed<T, ComparePredicate::Lt>(s, plan, a, b, y); return;
    case ComparePredicate::Le: compare_typed<T, ComparePredicate::Le>(s, plan, a, b, y); return;
    case ComparePredicate::Gt: compare_typed<T, ComparePredicate::Gt>(s, plan, a, b, y); return;
    case ComparePredicate::Ge: compare_typed<T, ComparePredicate::Ge>(s, plan, a, b, y); return;
    }
  });
}

void where(Stream &s, const Tensor &cond, const Tensor &a, const Tensor &b, const Tensor &y) {
  begin_kernel(s);
  const char *kernel = "where";
  BroadcastPlan plan = check_where(kernel, cond, a, b, y);
  if (y.numel() == 0)
    return;
  const int last = plan.rank - 1;
  const int64_t sc = plan.strides[0][last], sa = plan.strides[1][last],
                sb = plan.strides[2][last];
  const uint8_t *pc = cond.as<uint8_t>();
  // Selection moves bits, so only the element size matters.
  dispatch_bytes(dtype_size(a.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *pa = a.as<T>(), *pb = b.as<T>();
    T *py = y.as<T>();
    parallel_for(s, y.numel(), kGrainElementwise, [&](int64_t begin, int64_t end) {
      for_each_row(plan, begin, end, [&](int64_t out, const int64_t *off, int64_t n) {
        const uint8_t *c = pc + off[0];
        const T *x = pa + off[1], *z = pb + off[2];
        T *o = py + out;
        if (sc == 1 && sa == 1 && sb == 1) {
          for (int64_t i = 0; i < n; ++i)
            o[i] = c[i] ? x[i] : z[i];
        } else {
          for (int64_t i = 0; i < n; ++i)
            o[i] = c[i * sc] ? x[i * sa] : z[i * sb];
        }
      });
    });
  });
}

//===----------------------------------------------------------------------===//
// cast
//===----------------------------------------------------------------------===//

namespace {

template <typename From, typename To> To convert(From v) {
  constexpr bool from_float = std::is_same_v<typename Elem<From>::compute, float>;
  constexpr bool to_float_type = std::is_same_v<typename Elem<To>::compute, float>;
  if constexpr (std::is_same_v<From, uint8_t>) {  // bool: any non-zero byte is true
    return convert<int32_t, To>(v != 0 ? 1 : 0);
  } else if constexpr (std::is_same_v<To, uint8_t>) {  // to bool: != 0 (NaN is true)
    if constexpr (from_float)
      return Elem<From>::load(v) != 0.0f;
    else
      return v != 0;
  } else if constexpr (from_float && to_float_type) {
    return Elem<To>::store(Elem<From>::load(v));
  } else if constexpr (from_float) {
    return float_to_int<To>(Elem<From>::load(v));
  } else if constexpr (to_float_type) {
    return Elem<To>::store(static_cast<float>(v));
  } else {
    return static_cast<To>(v);  // integer narrowing wraps
  }
}

}  // namespace

void cast(Stream &s, const Tensor &x, const Tensor &y) {
  begin_kernel(s);
  const char *kernel = "cast";
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_shape(kernel, "y", y, x.shape);
  if (x.dtype == y.dtype) {
    if (x.data != y.data && x.nbytes() > 0)
      std::memcpy(y.data, x.data, x.nbytes());
    return;
  }
  dispatch_all(kernel, x.dtype, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    dispatch_all(kernel, y.dtype, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      const From *in = x.as<From>();
      To *out = y.as<To>();
      parallel_for(s, x.numel(), kGrainElementwise, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          out[i] = convert<From, To>(in[i]);
      });
    });
  });
}

}  // namespace dsrt
