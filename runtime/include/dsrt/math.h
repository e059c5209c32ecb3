// dsrt: scalar math shared by the kernels and by generated fused loops.
//
// Plain float arithmetic that GCC vectorizes when inlined into a loop
// (std::exp, std::tanh and std::erf are scalar library calls), and the f16 /
// bf16 conversions. Generated code calls these so that a fused loop computes
// what the corresponding kernels compute, at kernel speed.
#ifndef DSRT_MATH_H
#define DSRT_MATH_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

// Generated fused loops call these from CUDA kernels too (dsopt --target
// cuda): nvcc compiles them for host and device.
#ifdef __CUDACC__
#define DSRT_HOST_DEVICE __host__ __device__
#else
#define DSRT_HOST_DEVICE
#endif

namespace dsrt {
namespace math {

DSRT_HOST_DEVICE inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
DSRT_HOST_DEVICE inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

DSRT_HOST_DEVICE inline float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F)  // inf or NaN: keep the payload
    return bits_float(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in f32
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return bits_float(sign | float_bits(magnitude));
  }
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Round to nearest, ties to even, as IEEE conversions and PyTorch do.
DSRT_HOST_DEVICE inline uint16_t float_to_half(float f) {
  uint32_t x = float_bits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u)  // NaN: quiet, keep the top payload bits
    return sign | 0x7E00u | static_cast<uint16_t>((ax >> 13) & 0x3FFu);
  if (ax >= 0x477FF000u)  // >= 65520 rounds to infinity (65504 is odd)
    return sign | 0x7C00u;
  if (ax < 0x38800000u) {  // below 2^-14: a subnormal half or zero
    if (ax < 0x33000000u)  // below 2^-25, half the smallest subnormal
      return sign;
    uint32_t exponent = ax >> 23;  // 102..112
    uint32_t significand = (ax & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126 - exponent;  // value / 2^-24 = significand >> shift
    uint32_t result = significand >> shift;
    uint32_t rest = significand & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (result & 1u)))
      ++result;  // may carry into the smallest normal, which encodes right
    return sign | static_cast<uint16_t>(result);
  }
  uint32_t rebased = ax - 0x38000000u;  // exponent bias 127 -> 15
  rebased = (rebased + 0xFFFu + ((rebased >> 13) & 1u)) >> 13;
  return sign | static_cast<uint16_t>(rebased);
}

DSRT_HOST_DEVICE inline float bfloat_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

DSRT_HOST_DEVICE inline uint16_t float_to_bfloat(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u)  // NaN: quiet, keep the sign
    return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

//===----------------------------------------------------------------------===//
// Vectorizable math (plain float arithmetic that GCC vectorizes when inlined
// into a loop; std::exp and std::tanh are scalar library calls)
//===----------------------------------------------------------------------===//

// exp(x) with Cody-Waite range reduction and Cephes' polynomial, about 1 ulp.
// Handles overflow to inf, underflow through the subnormals to 0 (so
// exp(-inf) == 0, which masked softmax relies on) and NaN.
DSRT_HOST_DEVICE inline float fast_exp(float x) {
  float xc = std::min(std::max(x, -104.0f), 88.8f);  // NaN passes through
  // Round to nearest with the 1.5 * 2^23 trick (no SSE4.1 needed).
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  // 2^n as two normal factors so that n in [-150, 128] never overflows the
  // exponent field.
  int32_t ni = static_cast<int32_t>(n);
  int32_t n1 = ni >> 1, n2 = ni - n1;
  float s1 = bits_float(static_cast<uint32_t>(n1 + 127) << 23);
  float s2 = bits_float(static_cast<uint32_t>(n2 + 127) << 23);
  float result = p * s1 * s2;
  return x != x ? x : result;
}

// tanh(x): Cephes' odd polynomial below |x| = 0.625, else
// 1 - 2 / (exp(2|x|) + 1) with the sign restored; about 2 ulp.
DSRT_HOST_DEVICE inline float fast_tanh(float x) {
  float ax = std::fabs(x);
  float z = x * x;
  float small = -5.70498872745e-3f;
  small = small * z + 2.06390887954e-2f;
  small = small * z - 5.37397155531e-2f;
  small = small * z + 1.33314422036e-1f;
  small = small * z - 3.33332819422e-1f;
  small = small * z * x + x;
  float e = fast_exp(2.0f * std::min(ax, 44.0f));
  float large = 1.0f - 2.0f / (e + 1.0f);
  large = std::copysign(large, x);
  return ax < 0.625f ? small : large;
}

DSRT_HOST_DEVICE inline float fast_sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }

// erf(x) = x * P(x^2) for |x| < 1; least-squares fit of the relative error.
DSRT_HOST_DEVICE inline float erf_small(float x) {
  float t = x * x;
  float p = -5.667928474e-04f;
  p = p * t + 4.927403846e-03f;
  p = p * t - 2.672087996e-02f;
  p = p * t + 1.128057839e-01f;
  p = p * t - 3.761239061e-01f;
  p = p * t + 1.128379147e+00f;
  return x * p;
}

// H(a) = erfc(a) exp(a^2) for a in [0.5, 4], a polynomial in a - 2.25 that
// fits the relative error (within about 2.5 ulp).
DSRT_HOST_DEVICE inline float erfc_scaled(float a) {
  float t = a - 2.25f;
  float h = 2.523741091e-07f;
  h = h * t - 1.119390183e-06f;
  h = h * t + 1.912502935e-06f;
  h = h * t - 5.909455383e-06f;
  h = h * t + 2.951389490e-05f;
  h = h * t - 1.069075046e-04f;
  h = h * t + 3.489685566e-04f;
  h = h * t - 1.140050850e-03f;
  h = h * t + 3.618398776e-03f;
  h = h * t - 1.100340981e-02f;
  h = h * t + 3.199282778e-02f;
  h = h * t - 8.848636530e-02f;
  h = h * t + 2.310872493e-01f;
  return h;
}

DSRT_HOST_DEVICE inline float erfc_mid(float a) { return fast_exp(-a * a) * erfc_scaled(a); }

// The rounding error of the product a * b = hi: a * b == hi + lo exactly.
DSRT_HOST_DEVICE inline float product_error(float a, float b, float hi) {
#if defined(__FMA__)
  return std::fma(a, b, -hi);
#else
  // Dekker's product with Veltkamp splitting into 12-bit halves.
  float ca = 4097.0f * a, cb = 4097.0f * b;
  float ah = ca - (ca - a), al = a - ah, bh = cb - (cb - b), bl = b - bh;
  return ((ah * bh - hi) + ah * bl + al * bh) + al * bl;
#endif
}

// erf(x) within a few ulp of std::erf, but vectorizable: exact GELU calls it
// for every activation. erf rounds to +-1 in f32 beyond |x| = 3.92.
DSRT_HOST_DEVICE inline float fast_erf(float x) {
  float a = std::fabs(x);
  float large = a >= 4.0f ? 1.0f : 1.0f - erfc_mid(std::min(a, 4.0f));
  large = std::copysign(large, x);
  return a < 1.0f ? erf_small(x) : large;  // NaN takes the second branch
}

// Exact GELU, x / 2 * (1 + erf(z)) with z = x / sqrt(2), from one exp:
//   z <= -0.5:      1 + erf(z) = erfc(|z|)        (no cancellation as erf -> -1)
//   -0.5 < z < 1:   1 + erf(z) with erf's odd polynomial
//   z >= 1:         1 + erf(z) = 2 - erfc(z)
// where erfc(|z|) = exp(-x^2 / 2) H(|z|) and x^2 is carried exactly (hi + lo),
// so the result keeps its relative precision in the negative tail. Beyond
// |z| = 4, erfc(|z|) < 1.6e-8 is taken as 0 (so -inf gives 0 * -inf = NaN, as
// the formula does).
DSRT_HOST_DEVICE inline float fast_gelu(float x) {
  float z = x * 0.70710678118654752f;
  float a = std::fabs(z);
  float xx = x * x;
  float xx_lo = product_error(x, x, xx);
  // exp(-(xx + xx_lo) / 2) = exp(-xx / 2) * (1 - xx_lo / 2) to f32 precision.
  float erfc_a = fast_exp(-0.5f * xx) * (1.0f - 0.5f * xx_lo) *
                 erfc_scaled(std::min(std::max(a, 0.5f), 4.0f));
  erfc_a = a > 4.0f ? 0.0f : erfc_a;
  float one_plus_erf = z <= -0.5f ? erfc_a : (z < 1.0f ? 1.0f + erf_small(z) : 2.0f - erfc_a);
  return 0.5f * x * one_plus_erf;
}

// max(a, b) that returns NaN if either is NaN, like PyTorch's maximum.
DSRT_HOST_DEVICE inline float maximum(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  return a < b ? b : a;
}

// Float to integer truncates toward zero; NaN becomes 0 and values outside
// the integer's range saturate (the conversion is otherwise undefined).
template <typename I> DSRT_HOST_DEVICE I float_to_int(float v) {
  constexpr float lo = static_cast<float>(std::numeric_limits<I>::min());
  constexpr float hi = static_cast<float>(std::numeric_limits<I>::max());  // rounds up to 2^k
  if (!(v == v))
    return 0;
  if (v <= lo)
    return std::numeric_limits<I>::min();
  if (v >= hi)
    return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

// N consecutive elements as one aligned access (64 or 128 bits): the
// vectors of a generated CUDA kernel's loop (dsopt --target cuda), whose
// thread reads each input of the result's shape and writes the result N
// elements at a time.
template <typename T, int N> struct alignas(sizeof(T) * N) Vector {
  T lane[N];
};

// dst = src[index .. index + N): one vector load where src + index is
// aligned to the vector (every arena buffer is; a view may not be), else
// element by element.
template <typename T, int N, typename I>
DSRT_HOST_DEVICE inline void load_vector(T (&dst)[N], const T *src, I index) {
  src += index;
  if (reinterpret_cast<uintptr_t>(src) % sizeof(Vector<T, N>) == 0) {
    Vector<T, N> v = *reinterpret_cast<const Vector<T, N> *>(src);
    for (int k = 0; k < N; ++k)
      dst[k] = v.lane[k];
  } else {
    for (int k = 0; k < N; ++k)
      dst[k] = src[k];
  }
}

// dst[index .. index + N) = src, as load_vector reads.
template <typename T, int N, typename I>
DSRT_HOST_DEVICE inline void store_vector(T *dst, I index, const T (&src)[N]) {
  dst += index;
  if (reinterpret_cast<uintptr_t>(dst) % sizeof(Vector<T, N>) == 0) {
    Vector<T, N> v;
    for (int k = 0; k < N; ++k)
      v.lane[k] = src[k];
    *reinterpret_cast<Vector<T, N> *>(dst) = v;
  } else {
    for (int k = 0; k < N; ++k)
      dst[k] = src[k];
  }
}

}  // namespace math
}  // namespace dsrt

#endif  // DSRT_MATH_H
