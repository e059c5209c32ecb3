// The comparison the kernel cases rely on must be able to fail.
#include "compare.h"

#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>

namespace {

using dsrt::DType;
using dsrt::Shape;
using dsrt_test::compare_tensors;
using dsrt_test::Owned;

TEST(Compare, CatchesOnePerturbedValue) {
  Owned expected = Owned::of(DType::F32, Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  Owned actual = expected;
  EXPECT_TRUE(compare_tensors(actual, expected, 1e-5, 1e-6).ok);
  dsrt::store_float(actual, 4, 5.0f * (1 + 1e-4f));
  dsrt_test::Comparison c = compare_tensors(actual, expected, 1e-5, 1e-6);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_NE(c.message.find("element 4"), std::string::npos) << c.message;
  // Within tolerance it passes again.
  EXPECT_TRUE(compare_tensors(actual, expected, 1e-3, 0).ok);
}

TEST(Compare, NanInfAndTypes) {
  Owned e = Owned::of(DType::F16, Shape{3}, {NAN, INFINITY, 1});
  Owned a = e;
  EXPECT_TRUE(compare_tensors(a, e, 0, 0).ok);
  dsrt::store_float(a, 0, 1.0f);
  EXPECT_FALSE(compare_tensors(a, e, 1, 1).ok) << "a number is not NaN";
  Owned b = e;
  dsrt::store_float(b, 1, 65504.0f);
  EXPECT_FALSE(compare_tensors(b, e, 1, 1).ok) << "a finite value is not inf";
  Owned i = Owned::of(DType::I64, Shape{2}, {5, 6});
  Owned j = Owned::of(DType::I64, Shape{2}, {5, 7});
  EXPECT_FALSE(compare_tensors(j, i, 1, 1).ok) << "integers compare exactly";
  Owned f(DType::F32, Shape{2});
  EXPECT_FALSE(compare_tensors(f, i, 1, 1).ok) << "element types must agree";
  Owned g(DType::I64, Shape{1, 2});
  EXPECT_FALSE(compare_tensors(g, i, 1, 1).ok) << "shapes must agree";
  Owned t = Owned::of(DType::Bool, Shape{2}, {1, 0});
  Owned u(DType::Bool, Shape{2}, 0xFF);
  EXPECT_FALSE(compare_tensors(u, t, 0, 0).ok) << "an unwritten bool byte is not true";
}

}  // namespace
