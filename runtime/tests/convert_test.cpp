// f16 and bf16 conversions: exhaustive round trips, and f32 rounding
// checked against independent references (the compiler's IEEE _Float16 and
// rounding computed in double arithmetic), ties to even included.
#include "dsrt/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
bool is_half_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
bool is_bf16_nan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; }

// Value of a half bit pattern from its definition.
double half_value(uint16_t h) {
  int sign = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
  double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  if (e == 31)
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  return sign ? -v : v;
}

// x rounded to `bits` significant bits with quantum at least 2^min_exp, in
// double (exact for f32 inputs), ties to even (the default rounding mode).
double round_to_precision(double x, int bits, int min_exp) {
  if (x == 0 || !std::isfinite(x))
    return x;
  int e;
  std::frexp(x, &e);  // x = m * 2^e, 0.5 <= |m| < 1
  int q = std::max(e - bits, min_exp);
  return std::ldexp(std::nearbyint(std::ldexp(x, -q)), q);
}

TEST(F16, AllBitPatternsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = dsrt::f16_to_f32(static_cast<uint16_t>(h));
    uint16_t back = dsrt::f32_to_f16(f);
    if (is_half_nan(static_cast<uint16_t>(h))) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(is_half_nan(back)) << std::hex << h;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << "NaN keeps its sign";
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
      double expected = half_value(static_cast<uint16_t>(h));
      ASSERT_EQ(static_cast<double>(f), expected) << std::hex << h;
    }
  }
}

TEST(F16, RoundsLikeIeeeFloat16) {
  // Sampled f32 bit patterns, plus every halfway point between neighbouring
  // halves and the f32 values just either side of it.
  auto check = [](float f) -> testing::AssertionResult {
    uint16_t got = dsrt::f32_to_f16(f);
    _Float16 ref = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &ref, 2);
    if (std::isnan(f) ? is_half_nan(got) : got == want)
      return testing::AssertionSuccess();
    return testing::AssertionFailure() << "f32 bits 0x" << std::hex << to_bits(f) << " (" << f
                                       << ") -> 0x" << got << ", IEEE gives 0x" << want;
  };
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099)
    ASSERT_TRUE(check(from_bits(static_cast<uint32_t>(u))));
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    double lo = half_value(static_cast<uint16_t>(h)), hi = half_value(static_cast<uint16_t>(h + 1));
    float mid = static_cast<float>((lo + hi) / 2);  // exact: halves have 11 bits
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      ASSERT_TRUE(check(f));
      ASSERT_TRUE(check(-f));
    }
  }
}

TEST(F16, TiesToEvenAndOverflow) {
  EXPECT_EQ(dsrt::f32_to_f16(1.0f + 0x1p-11f), 0x3C00);         // tie, even is 1.0
  EXPECT_EQ(dsrt::f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);     // tie, even is up
  EXPECT_EQ(dsrt::f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(dsrt::f32_to_f16(65519.99f), 0x7BFF);
  EXPECT_EQ(dsrt::f32_to_f16(65520.0f), 0x7C00);                // tie with odd max -> inf
  EXPECT_EQ(dsrt::f32_to_f16(-1e10f), 0xFC00);
  EXPECT_EQ(dsrt::f32_to_f16(0x1p-25f), 0x0000);                // half the smallest subnormal
  EXPECT_EQ(dsrt::f32_to_f16(3 * 0x1p-26f), 0x0001);            // above it
  EXPECT_EQ(dsrt::f32_to_f16(3 * 0x1p-25f), 0x0002);            // tie 1.5 -> 2
  EXPECT_EQ(dsrt::f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(dsrt::f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);     // carries into the normals
}

TEST(BF16, AllBitPatternsRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = dsrt::bf16_to_f32(static_cast<uint16_t>(b));
    ASSERT_EQ(to_bits(f), b << 16);
    uint16_t back = dsrt::f32_to_bf16(f);
    if (is_bf16_nan(static_cast<uint16_t>(b)))
      ASSERT_TRUE(is_bf16_nan(back)) << std::hex << b;
    else
      ASSERT_EQ(back, b) << std::hex << b;
  }
}

TEST(BF16, RoundsToNearestEven) {
  auto check = [](float f) -> testing::AssertionResult {
    uint16_t got = dsrt::f32_to_bf16(f);
    if (std::isnan(f))
      return is_bf16_nan(got) ? testing::AssertionSuccess()
                              : testing::AssertionFailure() << "NaN lost";
    // 8 significant bits; bf16's subnormal quantum 2^-133 below 2^-126.
    double r = round_to_precision(f, 8, -133);
    float want = std::fabs(r) > 3.3895313892515355e38 ? std::copysign(INFINITY, f)
                                                      : static_cast<float>(r);
    if (got == to_bits(want) >> 16)
      return testing::AssertionSuccess();
    return testing::AssertionFailure() << "f32 bits 0x" << std::hex << to_bits(f) << " -> 0x"
                                       << got << ", expected 0x" << (to_bits(want) >> 16);
  };
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099)
    ASSERT_TRUE(check(from_bits(static_cast<uint32_t>(u))));
  for (uint32_t b = 0; b < 0x7F80; b += 3) {  // halfway points and neighbours
    uint32_t mid = (b << 16) | 0x8000;
    for (uint32_t u : {mid, mid - 1, mid + 1, mid | 0x80000000u})
      ASSERT_TRUE(check(from_bits(u)));
  }
  EXPECT_EQ(dsrt::f32_to_bf16(from_bits(0x3F808000)), 0x3F80);  // tie, even down
  EXPECT_EQ(dsrt::f32_to_bf16(from_bits(0x3F818000)), 0x3F82);  // tie, even up
  EXPECT_EQ(dsrt::f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
}

TEST(LoadStore, ConvertsAndChecksBounds) {
  uint16_t storage[3] = {0, 0, 0};
  dsrt::Tensor t;
  t.data = storage;
  t.dtype = dsrt::DType::F16;
  t.shape = dsrt::Shape{3};
  dsrt::store_float(t, 1, 1.0f + 0x1p-11f);
  EXPECT_EQ(storage[1], 0x3C00);
  EXPECT_EQ(dsrt::load_float(t, 1), 1.0f);
  EXPECT_THROW(dsrt::load_float(t, 3), dsrt::Error);
  EXPECT_THROW(dsrt::store_float(t, -1, 0.0f), dsrt::Error);
  EXPECT_THROW(dsrt::load_int(t, 0), dsrt::Error);  // not an integer tensor
  int32_t ints[2] = {0, 0};
  dsrt::Tensor i{ints, dsrt::DType::I32, dsrt::Shape{2}};
  dsrt::store_int(i, 0, -7);
  EXPECT_EQ(dsrt::load_int(i, 0), -7);
  EXPECT_THROW(dsrt::load_float(i, 0), dsrt::Error);
}

TEST(Shape, BasicsAndLimits) {
  dsrt::Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_EQ(dsrt::Shape{}.numel(), 1);
  EXPECT_NE(s, (dsrt::Shape{2, 3}));
  EXPECT_THROW((dsrt::Shape{1, 2, 3, 4, 5, 6, 7, 8, 9}), dsrt::Error);
  EXPECT_THROW((dsrt::Shape{2, -1}), dsrt::Error);
  int64_t dims[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_THROW(dsrt::Shape::of(dims, 9), dsrt::Error);
  EXPECT_EQ(dsrt::dtype_size(dsrt::DType::BF16), 2u);
  EXPECT_STREQ(dsrt::dtype_name(dsrt::DType::Bool), "bool");
}

}  // namespace
