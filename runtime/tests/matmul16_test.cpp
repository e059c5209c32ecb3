// The f16/bf16 matmul and gemm convert tile by tile: shapes larger than a
// tile in every dimension (with remainders), transposed, batched with
// broadcasting and with vector operands, against the f32 kernel on the same
// values. Each output element is the f32 product rounded once, so it is
// within half an ulp of the 16-bit type of the f32 result (plus the f32
// summation-order difference); a misplaced tile or panel is far off.
#include "dsrt/kernels.h"
#include "test_util.h"

#include <cmath>
#include <random>

using dsrt::DType;
using dsrt::Shape;
using dsrt_test::Owned;

namespace {

dsrt::Stream &stream() {
  static dsrt::Stream s(dsrt::Backend::Cpu, 2);
  return s;
}

// Values in [-1, 1] stored in `dtype`, and the same values in f32.
struct Operand {
  Owned half, full;
  Operand(DType dtype, Shape shape, unsigned seed)
      : half(dtype, shape), full(DType::F32, shape) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t i = 0; i < shape.numel(); ++i) {
      dsrt::store_float(half.t(), i, dist(rng));
      dsrt::store_float(full.t(), i, static_cast<float>(dsrt::load_float(half.t(), i)));
    }
  }
};

// Half an ulp of the 16-bit type relative, plus the f32 rounding of a sum of
// k products of magnitude <= 1 in another order.
void expect_rounded_once(DType dtype, const Owned &y, const Owned &ref, int64_t k) {
  ASSERT_EQ(y.t().shape, ref.t().shape);
  const double rel = dtype == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double abs = 4e-7 * static_cast<double>(k);
  int64_t bad = 0;
  for (int64_t i = 0; i < ref.t().numel(); ++i) {
    const double want = ref.at(i), got = y.at(i);
    if (std::fabs(got - want) > rel * std::fabs(want) + abs && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": " << got << ", f32 gives " << want;
  }
  EXPECT_EQ(bad, 0) << "elements off of " << ref.t().numel();
}

void check_matmul(DType dtype, Shape a_shape, Shape b_shape, Shape y_shape, bool ta, bool tb,
                  int64_t k) {
  SCOPED_TRACE(a_shape.str() + (ta ? "^T" : "") + " x " + b_shape.str() + (tb ? "^T" : ""));
  Operand a(dtype, a_shape, 1), b(dtype, b_shape, 2);
  Owned y(dtype, y_shape, 0xCD), ref(DType::F32, y_shape);
  const int64_t bytes = dsrt::matmul_workspace_bytes(dtype, a_shape, b_shape, y_shape);
  std::vector<float> scratch(static_cast<size_t>(bytes / 4));
  dsrt::matmul(stream(), a.half, b.half, y, ta, tb, {scratch.data(), bytes});
  dsrt::matmul(stream(), a.full, b.full, ref, ta, tb, {});
  stream().synchronize();
  expect_rounded_once(dtype, y, ref, k);
}

}  // namespace

TEST(Matmul16, TilesCoverEveryDimensionWithRemainders) {
  // 530 x 1030 x 520: two tiles of rows, three blocks of the contraction,
  // two tiles of columns, none of them full at the end.
  check_matmul(DType::BF16, Shape{530, 1030}, Shape{1030, 520}, Shape{530, 520}, false, false,
               1030);
}

TEST(Matmul16, TransposedOperands) {
  check_matmul(DType::BF16, Shape{1030, 530}, Shape{520, 1030}, Shape{530, 520}, true, true,
               1030);
  check_matmul(DType::F16, Shape{530, 1030}, Shape{520, 1030}, Shape{530, 520}, false, true,
               1030);
}

TEST(Matmul16, BroadcastBatchesAndVectors) {
  check_matmul(DType::F16, Shape{2, 1, 20, 530}, Shape{3, 530, 520}, Shape{2, 3, 20, 520},
               false, false, 530);
  check_matmul(DType::BF16, Shape{1030}, Shape{1030, 600}, Shape{600}, false, false, 1030);
  check_matmul(DType::BF16, Shape{600, 1030}, Shape{1030}, Shape{600}, false, false, 1030);
  check_matmul(DType::BF16, Shape{600}, Shape{600}, Shape{}, false, false, 600);
}

TEST(Matmul16, EmptyContractionWritesZeros) {
  Owned a(DType::BF16, Shape{3, 0}), b(DType::BF16, Shape{0, 4}), y(DType::BF16, Shape{3, 4}, 0xAB);
  const int64_t bytes = dsrt::matmul_workspace_bytes(DType::BF16, a.t().shape, b.t().shape,
                                                     y.t().shape);
  EXPECT_EQ(bytes, 4 * 12);  // the output tile only
  std::vector<float> scratch(12);
  dsrt::matmul(stream(), a, b, y, false, false, {scratch.data(), bytes});
  stream().synchronize();
  for (int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(y.at(i), 0.0) << i;
}

TEST(Matmul16, WorkspaceIsOneSetOfTilePanels) {
  // GPT-2's tied head weight gradient, [1024, 50257]^T x [1024, 768]: three
  // 512 x 512 f32 panels (3 MiB) instead of f32 copies of every operand,
  // plus, the product being large and m = 50257 not a multiple of 8, the
  // cuda backend's staging buffer of a's columns (an eighth of the padded
  // 1024 x 50264 is under 16 MiB: 16 MiB, chunks of 8192 columns).
  EXPECT_EQ(dsrt::matmul_workspace_bytes(DType::BF16, Shape{1024, 50257}, Shape{1024, 768},
                                         Shape{50257, 768}),
            4 * 3 * 512 * 512 + 2 * 1024 * 8192);
  // Small operands: the whole matrices (m k + k n + m n); one matrix of a
  // batch. Transposition does not change the count.
  EXPECT_EQ(dsrt::matmul_workspace_bytes(DType::F16, Shape{4, 8}, Shape{8, 16}, Shape{4, 16}),
            4 * (32 + 128 + 64));
  EXPECT_EQ(dsrt::matmul_workspace_bytes(DType::F16, Shape{8, 4}, Shape{16, 8}, Shape{4, 16}),
            4 * (32 + 128 + 64));
  EXPECT_EQ(dsrt::matmul_workspace_bytes(DType::BF16, Shape{12, 64, 1024}, Shape{12, 1024, 64},
                                         Shape{12, 64, 64}),
            4 * (64 * 512 + 512 * 64 + 64 * 64));
  EXPECT_EQ(dsrt::matmul_workspace_bytes(DType::F32, Shape{1024, 50257}, Shape{1024, 768},
                                         Shape{50257, 768}),
            0);
  // The kernel refuses one byte less than the formula.
  Owned a(DType::BF16, Shape{600, 40}), b(DType::BF16, Shape{40, 30}), y(DType::BF16, Shape{600, 30});
  const int64_t bytes = dsrt::matmul_workspace_bytes(DType::BF16, a.t().shape, b.t().shape,
                                                     y.t().shape);
  EXPECT_EQ(bytes, 4 * (512 * 40 + 40 * 30 + 512 * 30));
  std::vector<float> scratch(static_cast<size_t>(bytes / 4));
  EXPECT_DSRT_ERROR(dsrt::matmul(stream(), a, b, y, false, false, {scratch.data(), bytes - 1}),
                    "dsrt::matmul", "smaller than the");
}

TEST(Matmul16, GemmAddsBroadcastBiasPerTile) {
  // y = 0.5 a^T b + 2 c with c [N] broadcast over 530 rows.
  const DType dtype = DType::F16;
  Operand a(dtype, Shape{600, 530}, 3), b(dtype, Shape{600, 520}, 4), c(dtype, Shape{520}, 5);
  Owned y(dtype, Shape{530, 520}), ref(DType::F32, Shape{530, 520});
  const int64_t bytes =
      dsrt::gemm_workspace_bytes(dtype, Shape{600, 530}, Shape{600, 520}, Shape{530, 520});
  std::vector<float> scratch(static_cast<size_t>(bytes / 4));
  dsrt::gemm(stream(), a.half, b.half, &c.half.t(), y, 0.5f, 2.0f, true, false,
             {scratch.data(), bytes});
  dsrt::gemm(stream(), a.full, b.full, &c.full.t(), ref, 0.5f, 2.0f, true, false, {});
  // c [530, 1] broadcast over columns.
  Operand col(dtype, Shape{530, 1}, 6);
  Owned y2(dtype, Shape{530, 520}), ref2(DType::F32, Shape{530, 520});
  dsrt::gemm(stream(), a.half, b.half, &col.half.t(), y2, 1.0f, -1.0f, true, false,
             {scratch.data(), bytes});
  dsrt::gemm(stream(), a.full, b.full, &col.full.t(), ref2, 1.0f, -1.0f, true, false, {});
  stream().synchronize();
  expect_rounded_once(dtype, y, ref, 600);
  expect_rounded_once(dtype, y2, ref2, 600);
}
