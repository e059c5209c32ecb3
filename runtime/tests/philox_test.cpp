// Philox4x32-10 against the Random123 known-answer vectors, and the
// properties dropout relies on.
#include "dsrt/kernels.h"
#include "dsrt/philox.h"

#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>

namespace {

using dsrt_test::Owned;

TEST(Philox, Random123KnownAnswers) {
  // Random123's kat_vectors, "philox4x32 10": counter, key, expected output.
  struct Kat {
    dsrt::Philox4x32 ctr;
    uint32_t key0, key1;
    dsrt::Philox4x32 out;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat &k : kats) {
    dsrt::Philox4x32 r = dsrt::philox4x32_10(k.ctr, k.key0, k.key1);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(r.v[i], k.out.v[i]) << "word " << i;
  }
}

TEST(Philox, UniformMapping) {
  // Element i uses word i % 4 of the block i / 4; seed and counter split into
  // 32-bit halves as documented in dsrt/philox.h.
  const uint64_t seed = 0x0123456789ABCDEFull, counter = 0xFEDCBA9876543210ull;
  for (uint64_t index : {0ull, 1ull, 3ull, 4ull, 7ull, 0x100000003ull * 4 + 2}) {
    uint64_t block = index / 4;
    dsrt::Philox4x32 r = dsrt::philox4x32_10(
        {{uint32_t(block), uint32_t(block >> 32), uint32_t(counter), uint32_t(counter >> 32)}},
        uint32_t(seed), uint32_t(seed >> 32));
    float expected = std::ldexp(static_cast<float>(r.v[index % 4] >> 8), -24);
    EXPECT_EQ(dsrt::philox_uniform(seed, counter, index), expected) << index;
  }
  EXPECT_EQ(dsrt::philox_uniform_bits(0xFFFFFFFFu), 1.0f - std::ldexp(1.0f, -24));
  EXPECT_EQ(dsrt::philox_uniform_bits(0xFFu), 0.0f);
}

TEST(Dropout, KeepsTheExpectedFractionAndScales) {
  const int64_t n = 1 << 20;
  const float ratio = 0.3f;
  Owned x(dsrt::DType::F32, dsrt::Shape{n});
  for (int64_t i = 0; i < n; ++i)
    dsrt::store_float(x, i, 1.0f + static_cast<float>(i % 7));
  Owned y(dsrt::DType::F32, dsrt::Shape{n}), mask(dsrt::DType::Bool, dsrt::Shape{n});
  dsrt::Stream s(dsrt::Backend::Cpu, 2);
  dsrt::dropout(s, x, y, mask, ratio, 1234, 1);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool keep = mask.bytes()[i] != 0;
    kept += keep;
    float expected = keep ? x.at(i) / (1.0f - ratio) : 0.0f;
    ASSERT_NEAR(y.at(i), expected, 1e-6 * std::fabs(expected)) << i;
    ASSERT_EQ(keep, dsrt::philox_uniform(1234, 1, static_cast<uint64_t>(i)) >= ratio) << i;
  }
  // Binomial(n, 0.7): the standard deviation is ~460 elements.
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.7, 0.003);
}

TEST(Dropout, SameMaskForAnyThreadCountNewMaskForANewCounter) {
  const int64_t n = 100003;  // not a multiple of 4
  Owned x(dsrt::DType::BF16, dsrt::Shape{n}, 0x3F);
  Owned y1(dsrt::DType::BF16, dsrt::Shape{n}), m1(dsrt::DType::Bool, dsrt::Shape{n});
  Owned y2(dsrt::DType::BF16, dsrt::Shape{n}), m2(dsrt::DType::Bool, dsrt::Shape{n});
  Owned y3(dsrt::DType::BF16, dsrt::Shape{n}), m3(dsrt::DType::Bool, dsrt::Shape{n});
  dsrt::Stream one(dsrt::Backend::Cpu, 1), two(dsrt::Backend::Cpu, 2);
  dsrt::dropout(one, x, y1, m1, 0.5f, 7, 100);
  dsrt::dropout(two, x, y2, m2, 0.5f, 7, 100);
  dsrt::dropout(two, x, y3, m3, 0.5f, 7, 101);
  EXPECT_EQ(m1.bytes(), m2.bytes());
  EXPECT_EQ(y1.bytes(), y2.bytes());
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i)
    same += m1.bytes()[i] == m3.bytes()[i];
  EXPECT_NEAR(static_cast<double>(same) / n, 0.5, 0.01);  // independent masks agree half the time
}

TEST(Dropout, RatioZeroKeepsEverything) {
  Owned x = Owned::of(dsrt::DType::F32, dsrt::Shape{5}, {1, -2, 3, -4, 5});
  Owned y(dsrt::DType::F32, dsrt::Shape{5}), mask(dsrt::DType::Bool, dsrt::Shape{5});
  dsrt::Stream s;
  dsrt::dropout(s, x, y, mask, 0.0f, 1, 2);
  EXPECT_EQ(y.bytes(), x.bytes());
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(mask.bytes()[i], 1);
}

}  // namespace
