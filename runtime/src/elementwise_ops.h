// Integer and remainder arithmetic of the elementwise kernels, for host
// (cpu backend) and device (cuda backend) code alike. Not installed.
#ifndef DSRT_SRC_ELEMENTWISE_OPS_H
#define DSRT_SRC_ELEMENTWISE_OPS_H

#include <cmath>
#include <type_traits>

#ifdef __CUDACC__
#define DSRT_HD __host__ __device__
#else
#define DSRT_HD
#endif

namespace dsrt {
namespace detail {

// The tanh-approximated GELU, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// and its derivative as PyTorch's gelu_backward(approximate='tanh') writes
// it, in f32: the cpu reference of the matmul GELU epilogues and the cuda
// fallback when cuBLASLt's aux layout does not allow them.
DSRT_HD inline float gelu_tanh_f32(float x) {
  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}
DSRT_HD inline float gelu_tanh_grad_f32(float x) {
  const float beta = 0.7978845608028654f, kappa = 0.044715f;
  const float x2 = x * x;
  const float t = tanhf(beta * (x + kappa * x2 * x));
  const float left = 0.5f * x, right = 1.0f + t;
  return 0.5f * right + left * (1.0f - t * t) * (beta * (1.0f + 3.0f * kappa * x2));
}

// Integer arithmetic wraps (two's complement) instead of being undefined.
template <typename T> DSRT_HD T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T> DSRT_HD T wrap_sub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <typename T> DSRT_HD T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}
template <typename T> DSRT_HD T wrap_neg(T a) { return wrap_sub<T>(T(0), a); }
// Truncating division; the one overflowing case, min / -1, wraps to min.
// Division by zero is rejected before the loop.
template <typename T> DSRT_HD T trunc_div(T a, T b) { return b == T(-1) ? wrap_neg(a) : a / b; }
// Remainders; min % -1 is 0. Mod moves a nonzero remainder to b's sign.
template <typename T> DSRT_HD T trunc_rem(T a, T b) { return b == T(-1) ? T(0) : a % b; }
template <typename T> DSRT_HD T floor_rem(T a, T b) {
  T r = trunc_rem(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
}
DSRT_HD inline float floor_remf(float a, float b) {
  float r = fmodf(a, b);
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}

// ds.scatter's combine of the element `old` with an update `u` (reduction
// 0 none, 1 add, 2 mul, 3 max, 4 min); max and min propagate NaN.
template <typename C> DSRT_HD C scatter_combine(int reduction, C old, C u) {
  switch (reduction) {
  case 1:
    if constexpr (std::is_integral_v<C>)
      return wrap_add(old, u);
    else
      return old + u;
  case 2:
    if constexpr (std::is_integral_v<C>)
      return wrap_mul(old, u);
    else
      return old * u;
  case 3: return (u > old || u != u) ? u : old;
  case 4: return (u < old || u != u) ? u : old;
  default: return u;
  }
}

// top_k's order: a (at index ia) comes before b (at ib) when it is larger
// (smaller with !largest), NaN counting as the largest, ties by index.
template <typename C> DSRT_HD bool top_k_before(C a, int64_t ia, C b, int64_t ib, bool largest) {
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan || b_nan) {
    if (a_nan && b_nan)
      return ia < ib;
    return largest ? a_nan : b_nan;
  }
  if (a != b)
    return largest ? a > b : a < b;
  return ia < ib;
}

}  // namespace detail
}  // namespace dsrt

#endif  // DSRT_SRC_ELEMENTWISE_OPS_H
