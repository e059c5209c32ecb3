// Accuracy of the vectorizable exp, tanh, sigmoid, erf and GELU that the
// kernels use, over dense sweeps, against the C library in double.
#include "dsrt/kernels.h"

#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

namespace {

using dsrt::DType;
using dsrt::Shape;
using dsrt_test::Owned;

// Largest error of unary `op` over [lo, hi] in units of the f32 spacing at
// the exact result (at least the smallest normal, so tiny results count in
// absolute terms).
double max_ulp_error(dsrt::UnaryOp op, double lo, double hi, const std::function<double(double)> &ref,
                     double *worst_x = nullptr) {
  const int64_t n = 1 << 21;
  Owned x(DType::F32, Shape{n}), y(DType::F32, Shape{n});
  for (int64_t i = 0; i < n; ++i)
    dsrt::store_float(x, i, static_cast<float>(lo + (hi - lo) * i / (n - 1)));
  dsrt::Stream s(dsrt::Backend::Cpu, 2);
  dsrt::unary(s, op, x, y);
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double xi = x.at(i), want = ref(xi), got = y.at(i);
    double ulp = std::max(std::ldexp(1.0, std::ilogb(std::max(std::fabs(want), 1.17549435e-38)) - 23),
                          1.0e-45);
    double err = std::fabs(got - want) / ulp;
    if (err > worst) {
      worst = err;
      if (worst_x)
        *worst_x = xi;
    }
  }
  return worst;
}

TEST(Math, ExpWithinTwoUlp) {
  double at = 0;
  EXPECT_LE(max_ulp_error(dsrt::UnaryOp::Exp, -87.0, 88.0, [](double v) { return std::exp(v); }, &at), 2.0)
      << "at x = " << at;
}

TEST(Math, TanhAndSigmoidWithinFourUlp) {
  double at = 0;
  EXPECT_LE(max_ulp_error(dsrt::UnaryOp::Tanh, -10.0, 10.0, [](double v) { return std::tanh(v); }, &at), 4.0)
      << "at x = " << at;
  EXPECT_LE(max_ulp_error(dsrt::UnaryOp::Sigmoid, -30.0, 30.0,
                          [](double v) { return 1.0 / (1.0 + std::exp(-v)); }, &at),
            4.0)
      << "at x = " << at;
}

TEST(Math, ErfWithinFourUlpOfTheCLibrary) {
  double at = 0;
  EXPECT_LE(max_ulp_error(dsrt::UnaryOp::Erf, -6.0, 6.0, [](double v) { return std::erf(v); }, &at), 4.0)
      << "at x = " << at;
}

TEST(Math, ExactGeluKeepsRelativePrecisionInTheTail) {
  // 1 + erf(z) loses everything as erf(z) -> -1; the kernel uses erfc, so
  // the relative error stays small down to x = -5.6 (z = -4).
  auto gelu = [](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); };
  double at = 0;
  EXPECT_LE(max_ulp_error(dsrt::UnaryOp::Gelu, -5.6, 6.0, gelu, &at), 8.0) << "at x = " << at;
  // Beyond, the value is below 1.6e-8 |x| and flushes to zero.
  Owned x = Owned::of(DType::F32, Shape{3}, {-8.0, -100.0, -INFINITY});
  Owned y(DType::F32, Shape{3});
  dsrt::Stream s;
  dsrt::unary(s, dsrt::UnaryOp::Gelu, x, y);
  EXPECT_EQ(y.at(0), 0.0);
  EXPECT_EQ(y.at(1), 0.0);
  EXPECT_TRUE(std::isnan(y.at(2))) << "-inf * 0 in the formula";
}

}  // namespace
