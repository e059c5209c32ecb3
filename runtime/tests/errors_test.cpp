// Kernels reject bad data and inconsistent arguments with dsrt::Error
// naming the kernel and the offending value, before writing anything.
#include "dsrt/kernels.h"

#include "test_util.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using dsrt::DType;
using dsrt::Shape;
using dsrt_test::Owned;

class Errors : public testing::Test {
protected:
  dsrt::Stream s{dsrt::Backend::Cpu, 2};
};

TEST_F(Errors, GatherIndexOutOfRangeWritesNothing) {
  Owned data = Owned::of(DType::F32, Shape{4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  Owned idx = Owned::of(DType::I64, Shape{3}, {1, 9, 0});
  Owned y(DType::F32, Shape{3, 2}, 0xAB);
  Owned before = y;
  EXPECT_DSRT_ERROR(dsrt::gather(s, data, idx, y, 0), "dsrt::gather", "index 9",
                    "indices element 1", "size 4");
  EXPECT_EQ(y.bytes(), before.bytes());
  Owned neg = Owned::of(DType::I32, Shape{1}, {-5});
  Owned y1(DType::F32, Shape{1, 2});
  EXPECT_DSRT_ERROR(dsrt::gather(s, data, neg, y1, 0), "index -5");
  Owned floats = Owned::of(DType::F32, Shape{1}, {0});
  EXPECT_DSRT_ERROR(dsrt::gather(s, data, floats, y1, 0), "indices must be i64 or i32");
}

TEST_F(Errors, LossLabelsOutsideTheClasses) {
  Owned scores(DType::F32, Shape{3, 4});
  Owned labels = Owned::of(DType::I64, Shape{3}, {0, 4, 1});
  Owned loss(DType::F32, Shape{}), log_prob(DType::F32, Shape{3, 4}, 0xCD);
  Owned before = log_prob;
  EXPECT_DSRT_ERROR(dsrt::softmax_cross_entropy(s, scores, labels, nullptr, loss, log_prob,
                                                dsrt::Reduction::Mean, false, 0, {}),
                    "dsrt::softmax_cross_entropy", "label 4", "[0, 4)");
  EXPECT_EQ(log_prob.bytes(), before.bytes());
  Owned ignored = Owned::of(DType::I32, Shape{3}, {0, -1, 7});
  EXPECT_DSRT_ERROR(dsrt::nll_loss(s, scores, ignored, nullptr, loss, dsrt::Reduction::Sum, true, -1),
                    "dsrt::nll_loss", "label 7", "ignore_index -1");
  Owned ok = Owned::of(DType::I32, Shape{3}, {0, -1, 3});
  dsrt::nll_loss(s, scores, ok, nullptr, loss, dsrt::Reduction::Sum, true, -1);  // -1 is ignored
  Owned wrong_shape(DType::I64, Shape{4});
  EXPECT_DSRT_ERROR(dsrt::nll_loss(s, scores, wrong_shape, nullptr, loss, dsrt::Reduction::Sum,
                                   false, 0),
                    "labels has shape [4], expected [3]");
  Owned not_scalar(DType::F32, Shape{3});
  EXPECT_DSRT_ERROR(dsrt::nll_loss(s, scores, ok, nullptr, not_scalar, dsrt::Reduction::Mean, true, -1),
                    "loss must be a scalar");
}

TEST_F(Errors, IntegerDivisionByZero) {
  Owned a = Owned::of(DType::I32, Shape{3}, {1, 2, 3});
  Owned b = Owned::of(DType::I32, Shape{3}, {1, 1, 0});
  Owned y(DType::I32, Shape{3});
  EXPECT_DSRT_ERROR(dsrt::binary(s, dsrt::BinaryOp::Div, a, b, y), "dsrt::binary(div)",
                    "division by zero", "element 2");
}

TEST_F(Errors, ShapesAndTypesThatDisagree) {
  Owned a(DType::F32, Shape{2, 3}), b(DType::F32, Shape{4}), y(DType::F32, Shape{2, 3});
  EXPECT_DSRT_ERROR(dsrt::binary(s, dsrt::BinaryOp::Add, a, b, y), "binary(add)", "[2, 3]", "[4]",
                    "do not broadcast");
  Owned wrong_y(DType::F32, Shape{3, 2});
  EXPECT_DSRT_ERROR(dsrt::binary(s, dsrt::BinaryOp::Add, a, a, wrong_y), "[3, 2]");
  Owned h(DType::F16, Shape{2, 3});
  EXPECT_DSRT_ERROR(dsrt::binary(s, dsrt::BinaryOp::Add, a, h, y), "a is f32 but b is f16");
  Owned ints(DType::I64, Shape{2, 3});
  EXPECT_DSRT_ERROR(dsrt::binary(s, dsrt::BinaryOp::Pow, ints, ints, ints), "binary(pow)", "float");
  EXPECT_DSRT_ERROR(dsrt::unary(s, dsrt::UnaryOp::Exp, ints, ints), "unary(exp)", "i64");
  EXPECT_DSRT_ERROR(dsrt::unary(s, dsrt::UnaryOp::Not, a, a), "unary(not)", "bool");

  Owned m(DType::F32, Shape{3, 4}), k(DType::F32, Shape{5, 2}), out(DType::F32, Shape{3, 2});
  EXPECT_DSRT_ERROR(dsrt::matmul(s, m, k, out, false, false, {}), "dsrt::matmul", "contraction",
                    "4 vs 5");
  Owned batch_a(DType::F32, Shape{2, 3, 4}), batch_b(DType::F32, Shape{3, 4, 2});
  Owned batch_y(DType::F32, Shape{3, 3, 2});
  EXPECT_DSRT_ERROR(dsrt::matmul(s, batch_a, batch_b, batch_y, false, false, {}), "do not broadcast");
  Owned c(DType::F32, Shape{4});
  Owned gy(DType::F32, Shape{3, 2}), gk(DType::F32, Shape{4, 2});
  EXPECT_DSRT_ERROR(dsrt::gemm(s, m, gk, &c.t(), gy, 1, 1, false, false, {}), "dsrt::gemm", "c [4]");

  const int64_t perm[] = {0, 0};
  EXPECT_DSRT_ERROR(dsrt::transpose(s, m, m, perm), "dsrt::transpose", "permutation");
  const int64_t offsets[] = {2, 0}, strides[] = {1, 1};
  EXPECT_DSRT_ERROR(dsrt::slice(s, m, out, offsets, strides), "dsrt::slice", "axis 0",
                    "out of bounds");
  const int64_t zero[] = {0, 0};
  EXPECT_DSRT_ERROR(dsrt::slice(s, m, out, zero, zero), "stride of axis 0 is 0");
  Owned big(DType::F32, Shape{5, 3});
  Owned parts[2] = {Owned(DType::F32, Shape{2, 3}), Owned(DType::F32, Shape{2, 3})};
  dsrt::Tensor views[2] = {parts[0], parts[1]};
  EXPECT_DSRT_ERROR(dsrt::concat(s, views, 2, big, 0), "dsrt::concat", "sum to 4", "5");
  EXPECT_DSRT_ERROR(dsrt::cast(s, m, out), "dsrt::cast", "[3, 2]");
  Owned bytes(DType::F32, Shape{13});
  EXPECT_DSRT_ERROR(dsrt::copy(s, m, bytes), "dsrt::copy", "48 bytes", "52 bytes");
  Owned x(DType::F32, Shape{2, 3, 4}), r(DType::F32, Shape{2, 4});
  const int64_t axes[] = {2, 1};
  EXPECT_DSRT_ERROR(dsrt::reduce(s, dsrt::ReduceOp::Sum, x, r, axes, 2, {}), "sorted");
  const int64_t axis1[] = {1};
  Owned r_bad(DType::F32, Shape{2, 3});
  EXPECT_DSRT_ERROR(dsrt::reduce(s, dsrt::ReduceOp::Max, x, r_bad, axis1, 1, {}), "reduce(max)",
                    "[2, 1, 4] or [2, 4]");
  Owned empty(DType::I64, Shape{2, 0}), empty_y(DType::I64, Shape{2});
  EXPECT_DSRT_ERROR(dsrt::reduce(s, dsrt::ReduceOp::Max, empty, empty_y, axis1, 1, {}),
                    "empty axis");
  // The accumulators live in the planned workspace: f64 for a float sum of
  // [2, 3, 4] over axis 1 is 2 * 4 doubles; one byte less is refused.
  Owned r1(DType::F32, Shape{2, 4});
  EXPECT_EQ(dsrt::reduce_workspace_bytes(dsrt::ReduceOp::Sum, DType::F32, Shape{2, 3, 4}, axis1, 1), 64);
  EXPECT_EQ(dsrt::reduce_workspace_bytes(dsrt::ReduceOp::Max, DType::F32, Shape{2, 3, 4}, axis1, 1), 32);
  EXPECT_EQ(dsrt::reduce_workspace_bytes(dsrt::ReduceOp::Sum, DType::F32, Shape{2, 3, 40}, axis1, 1),
            640);
  EXPECT_EQ(dsrt::reduce_workspace_bytes(dsrt::ReduceOp::Max, DType::F32, Shape{2, 3, 40}, axis1, 1),
            320);
  const int64_t axes13[] = {1, 3};
  EXPECT_EQ(dsrt::reduce_workspace_bytes(dsrt::ReduceOp::Sum, DType::F32, Shape{2, 3, 4, 5},
                                         axes13, 2), 256);
  EXPECT_EQ(dsrt::reduce_workspace_bytes(dsrt::ReduceOp::Mean, DType::I64, Shape{2, 3, 4}, axis1, 1),
            64);
  // Column sums of at least 2048 rows whose tiles of columns (8, 16 of
  // 16-bit x) are fewer than 128 take P x columns accumulators for the cuda
  // backend's parts (P = 4 for 48 tiles, 2 for 75; none for 144), as the
  // compiler plans (test/Transforms/plan-workspace.mlir).
  const int64_t axis0[] = {0};
  EXPECT_EQ(dsrt::reduce_workspace_bytes(dsrt::ReduceOp::Sum, DType::BF16, Shape{4096, 768}, axis0,
                                         1), 4 * 768 * 8);
  EXPECT_EQ(dsrt::reduce_workspace_bytes(dsrt::ReduceOp::Max, DType::F32, Shape{2048, 600}, axis0,
                                         1), 2 * 600 * 4);
  EXPECT_EQ(dsrt::reduce_workspace_bytes(dsrt::ReduceOp::Sum, DType::BF16, Shape{4096, 2304}, axis0,
                                         1), 2304 * 8);
  EXPECT_EQ(dsrt::reduce_workspace_bytes(dsrt::ReduceOp::Sum, DType::BF16, Shape{2047, 768}, axis0,
                                         1), 768 * 8);
  std::vector<double> acc(8);
  dsrt::Workspace small{acc.data(), 63};
  EXPECT_DSRT_ERROR(dsrt::reduce(s, dsrt::ReduceOp::Sum, x, r1, axis1, 1, small), "reduce(sum)",
                    "63 bytes", "64 bytes");
}

TEST_F(Errors, NormalizationAndConvolutionArguments) {
  Owned x(DType::F32, Shape{2, 8}), g(DType::F32, Shape{8}), y(DType::F32, Shape{2, 8});
  Owned mean(DType::F32, Shape{2}), inv(DType::F32, Shape{2, 1});
  EXPECT_DSRT_ERROR(dsrt::layer_norm(s, x, g, nullptr, y, mean, inv, 1, 1e-5f, {}), "dsrt::layer_norm",
                    "mean has shape [2], expected [2, 1]");
  Owned g_bad(DType::F32, Shape{3});
  Owned mean1(DType::F32, Shape{2, 1});
  EXPECT_DSRT_ERROR(dsrt::layer_norm(s, x, g_bad, nullptr, y, mean1, inv, 1, 1e-5f, {}),
                    "scale [3] does not broadcast to the normalized shape [8]");
  Owned img(DType::F32, Shape{1, 4, 5, 5}), w(DType::F32, Shape{6, 2, 3, 3}),
      out(DType::F32, Shape{1, 6, 3, 3});
  const int64_t st[] = {1, 1}, pads[] = {0, 0, 0, 0}, dil[] = {1, 1};
  EXPECT_DSRT_ERROR(dsrt::conv(s, img, w, nullptr, out, st, pads, dil, 3, {}), "dsrt::conv", "group 3");
  Owned out_bad(DType::F32, Shape{1, 6, 4, 3});
  EXPECT_DSRT_ERROR(dsrt::conv(s, img, w, nullptr, out_bad, st, pads, dil, 2, {}),
                    "has 4 positions on spatial axis 0, expected 3");
  const int64_t k[] = {2, 2}, st2[] = {2, 2};
  Owned pool(DType::F32, Shape{1, 4, 4, 4});
  EXPECT_DSRT_ERROR(dsrt::max_pool(s, img, pool, k, st2, pads, dil), "dsrt::max_pool",
                    "expected 2 (or 3 with ceil_mode)");
  Owned mask(DType::Bool, Shape{2, 8});
  EXPECT_DSRT_ERROR(dsrt::dropout(s, x, y, mask, 1.0f, 0, 0), "dsrt::dropout", "ratio");
  Owned lr(DType::F32, Shape{2}), step(DType::I64, Shape{});
  EXPECT_DSRT_ERROR(dsrt::adagrad(s, lr, step, x, x, x, y, y, 0, 1e-6f, 0), "dsrt::adagrad",
                    "lr must be a scalar");
}

TEST_F(Errors, WorkspaceTooSmall) {
  // bf16 operands are converted to f32 in the workspace: 4 * (6 + 6 + 4)
  // bytes; one byte less is refused before anything is written.
  Owned a(DType::BF16, Shape{2, 3}), b(DType::BF16, Shape{3, 2}), y(DType::BF16, Shape{2, 2}, 0xAB);
  Owned before = y;
  ASSERT_EQ(dsrt::matmul_workspace_bytes(DType::BF16, a.t().shape, b.t().shape, y.t().shape), 64);
  std::vector<float> scratch(16);
  EXPECT_DSRT_ERROR(dsrt::matmul(s, a, b, y, false, false, {scratch.data(), 63}), "dsrt::matmul",
                    "workspace of 63 bytes is smaller than the 64 bytes the kernel needs");
  EXPECT_EQ(y.bytes(), before.bytes());
  EXPECT_DSRT_ERROR(dsrt::matmul(s, a, b, y, false, false, {nullptr, 64}), "dsrt::matmul",
                    "workspace of 64 bytes has no data");
  // f32 needs none.
  Owned fa(DType::F32, Shape{2, 3}, 0), fb(DType::F32, Shape{3, 2}, 0), fy(DType::F32, Shape{2, 2});
  dsrt::matmul(s, fa, fb, fy, false, false, {});
  // im2col of a 3x3 window: (4 / 2) * 9 rows by 3 * 3 positions of f32.
  Owned img(DType::F32, Shape{1, 4, 5, 5}), w(DType::F32, Shape{6, 2, 3, 3}),
      out(DType::F32, Shape{1, 6, 3, 3});
  const int64_t st[] = {1, 1}, pads[] = {0, 0, 0, 0}, dil[] = {1, 1};
  EXPECT_DSRT_ERROR(dsrt::conv(s, img, w, nullptr, out, st, pads, dil, 2, {scratch.data(), 64}),
                    "dsrt::conv", "workspace of 64 bytes is smaller than the 648 bytes");
  // An f32 layer norm reads a scale of the normalized shape in place (no
  // workspace); one broadcast along the normalized axes is expanded to f32
  // in the workspace (3 * 8 floats), checked before anything is written.
  Owned lx(DType::F32, Shape{2, 3, 8}, 0), ly(DType::F32, Shape{2, 3, 8}, 0xAB);
  Owned lmean(DType::F32, Shape{2, 1, 1}), linv(DType::F32, Shape{2, 1, 1});
  Owned lg_full(DType::F32, Shape{3, 8}, 0), lg_row(DType::F32, Shape{8}, 0);
  dsrt::layer_norm(s, lx, lg_full, nullptr, ly, lmean, linv, 1, 1e-5f, {});
  Owned ly_before = ly;
  EXPECT_DSRT_ERROR(dsrt::layer_norm(s, lx, lg_row, nullptr, ly, lmean, linv, 1, 1e-5f,
                                     {scratch.data(), 64}),
                    "dsrt::layer_norm", "workspace of 64 bytes is smaller than the 96 bytes");
  EXPECT_EQ(ly.bytes(), ly_before.bytes());
  Owned ldx(DType::F32, Shape{2, 3, 8}), ldg(DType::F32, Shape{8});
  EXPECT_DSRT_ERROR(dsrt::layer_norm_grad(s, lx, lx, lg_row, lmean, linv, ldx, ldg, nullptr, 1, {}),
                    "dsrt::layer_norm_grad", "workspace of 0 bytes is smaller than the 1056 bytes");
  // bf16 cross-entropy converts each block's row of 5 classes to f32 (6
  // samples, 6 blocks: 120 bytes); refused before log_prob is written.
  Owned bs(DType::BF16, Shape{6, 5}, 0), bl = Owned::of(DType::I64, Shape{6}, {0, 1, 2, 3, 4, 0});
  Owned bloss(DType::BF16, Shape{}), blp(DType::BF16, Shape{6, 5}, 0xCD);
  Owned blp_before = blp;
  EXPECT_DSRT_ERROR(dsrt::softmax_cross_entropy(s, bs, bl, nullptr, bloss, blp,
                                                dsrt::Reduction::Mean, false, 0,
                                                {scratch.data(), 64}),
                    "dsrt::softmax_cross_entropy",
                    "workspace of 64 bytes is smaller than the 120 bytes");
  EXPECT_EQ(blp.bytes(), blp_before.bytes());
}

TEST(WorkspaceBytes, AgreeWithTheCompiler) {
  // The numbers ds-plan-memory records for the same ops
  // (test/Transforms/plan-workspace.mlir): the compiler's and the kernels'
  // size functions must agree.
  const int64_t st[] = {1, 1}, pads[] = {0, 0, 0, 0}, pad1[] = {1, 1, 1, 1};
  EXPECT_EQ(dsrt::conv_workspace_bytes(DType::F32, Shape{1, 4, 5, 5}, Shape{6, 2, 3, 3},
                                       Shape{1, 6, 3, 3}, false, st, pads, 2),
            648);
  EXPECT_EQ(dsrt::conv_workspace_bytes(DType::F32, Shape{2, 4, 5, 5}, Shape{6, 4, 1, 1},
                                       Shape{2, 6, 5, 5}, true, st, pads, 1),
            0);
  EXPECT_EQ(dsrt::conv_workspace_bytes(DType::BF16, Shape{1, 4, 5, 5}, Shape{6, 2, 3, 3},
                                       Shape{1, 6, 3, 3}, true, st, pads, 2),
            4 * (162 + 100 + 108 + 54 + 6));
  EXPECT_EQ(dsrt::conv_grad_input_workspace_bytes(DType::F32, Shape{1, 6, 5, 5},
                                                  Shape{6, 2, 3, 3}, Shape{1, 4, 5, 5}, st, pad1,
                                                  2),
            4 * 4 * 9 * 25);
  EXPECT_EQ(dsrt::conv_grad_weight_workspace_bytes(DType::F32, Shape{1, 6, 5, 5},
                                                   Shape{1, 4, 5, 5}, Shape{6, 2, 3, 3}, st,
                                                   pad1, 2),
            4 * 2 * 9 * 25);
  EXPECT_EQ(dsrt::matmul_workspace_bytes(DType::F16, Shape{4, 8}, Shape{8, 16}, Shape{4, 16}),
            4 * (32 + 128 + 64));
  // Attention gradients: delta (one f32 per query row), all any backend's
  // kernels need; a --target cuda plan adds, for f16/bf16 with Dh a
  // multiple of 16, the dq accumulator from the next 256 bytes.
  EXPECT_EQ(dsrt::attention_grad_workspace_bytes(DType::BF16, Shape{1, 5, 2, 16}), 40);
  EXPECT_EQ(dsrt::attention_grad_cuda_workspace_bytes(DType::BF16, Shape{1, 5, 2, 16}), 256 + 640);
  EXPECT_EQ(dsrt::attention_grad_cuda_workspace_bytes(DType::F32, Shape{1, 5, 2, 16}), 40);
  EXPECT_EQ(dsrt::attention_grad_cuda_workspace_bytes(DType::BF16, Shape{1, 2, 5, 8}), 40);
  EXPECT_EQ(dsrt::attention_grad_cuda_workspace_bytes(DType::F16, Shape{1, 2, 5, 16}), 256 + 640);
  EXPECT_EQ(dsrt::attention_grad_cuda_workspace_bytes(DType::BF16, Shape{64, 12, 1024, 64}),
            4 * 786432 + 4 * 786432 * 64);
  // Large 16-bit products with an unaligned leading dimension add their
  // staging buffers (workspace_shapes.h, test/Transforms/plan-workspace.mlir):
  // y's rows padded and b with zero rows (n 513), a transposed's columns
  // (m 513).
  EXPECT_EQ(dsrt::matmul_workspace_bytes(DType::BF16, Shape{2, 520, 520}, Shape{513, 520},
                                         Shape{2, 520, 513}),
            4 * 3 * 512 * 512 + 2 * 1040 * 520 + 540928);  // b: 2 * 520 * 520, 256-aligned
  EXPECT_EQ(dsrt::matmul_workspace_bytes(DType::BF16, Shape{1040, 513}, Shape{1040, 520},
                                         Shape{513, 520}),
            4 * 3 * 512 * 512 + 2 * 1040 * 520);
  // k 50257 (GPT-2's LM head, input gradient): the contraction split, blocks
  // of 10880 rows of y (33,423,360 bytes of f32 sums, 32 MiB / (4 * 768)
  // rounded down to 128) taking a's columns 12288 at a time (256 MiB over
  // the block's rows, rounded down to 64), b's last chunk 50264 - 4 * 12288
  // = 1112 rows. (For --target cuda the compiler plans cuBLASLt's 32 MiB in
  // place of the tile panels: test/Transforms/plan-workspace.mlir; the
  // kernels need only this.)
  EXPECT_EQ(dsrt::matmul_workspace_bytes(DType::BF16, Shape{64, 1024, 50257}, Shape{50257, 768},
                                         Shape{64, 1024, 768}),
            4 * 3 * 512 * 512 + 2 * 10880 * 12288 + 4 * 10880 * 768 + 2 * 1112 * 768);
  // Under 2^27 multiply-adds: none.
  EXPECT_EQ(dsrt::matmul_workspace_bytes(DType::BF16, Shape{520, 520}, Shape{520, 257},
                                         Shape{520, 257}),
            4 * (512 * 512 + 512 * 257 + 512 * 257));
  // The cpu's f32 sums (160 bytes) or the cuda's sort of 3 positions
  // (partial slots 2 * 1 * 4 columns * 4 bytes, 2 arrays of positions, 256
  // digit counts, 11 row starts: 32 + 4 * (6 + 256 + 11) = 1124 bytes).
  EXPECT_EQ(dsrt::gather_grad_workspace_bytes(DType::BF16, Shape{10, 4}, Shape{3}, 0), 1124);
  EXPECT_EQ(dsrt::gather_grad_workspace_bytes(DType::BF16, Shape{1000, 4}, Shape{3}, 0), 16000);
  EXPECT_EQ(dsrt::gather_grad_workspace_bytes(DType::F32, Shape{10, 4}, Shape{0}, 0), 0);
  // At most 64 planes of f32 for a 16-bit pooling gradient.
  EXPECT_EQ(dsrt::pool_grad_workspace_bytes(DType::BF16, Shape{2, 3, 4, 4}), 4 * 6 * 16);
  EXPECT_EQ(dsrt::pool_grad_workspace_bytes(DType::F16, Shape{8, 16, 2, 2}), 4 * 64 * 4);
  EXPECT_EQ(dsrt::pool_grad_workspace_bytes(DType::F32, Shape{2, 3, 4, 4}), 0);
  // 16-bit rows in f32, at most 64 at a time; none along a strided axis.
  EXPECT_EQ(dsrt::softmax_workspace_bytes(DType::BF16, Shape{2, 3, 8}, 2), 4 * 6 * 8);
  EXPECT_EQ(dsrt::softmax_workspace_bytes(DType::BF16, Shape{2, 3, 8}, 1), 0);
  EXPECT_EQ(dsrt::softmax_workspace_bytes(DType::F32, Shape{2, 3, 8}, 2), 0);
  EXPECT_EQ(dsrt::softmax_grad_workspace_bytes(DType::F16, Shape{100, 8}, 1), 2 * 4 * 64 * 8);
  const Shape row8{8}, rows3x8{3, 8};
  EXPECT_EQ(dsrt::layer_norm_workspace_bytes(DType::BF16, Shape{2, 3, 8}, row8, &row8, 2), 4 * 6 * 8);
  // layer_norm_grad: 2 * 3 * n floats for the f64 totals and accumulator,
  // 2 * blocks * n for the blocks' partial sums, 16-bit rows 3 * blocks * n.
  EXPECT_EQ(dsrt::layer_norm_grad_workspace_bytes(DType::BF16, Shape{2, 3, 8}, row8, 2),
            4 * (6 * 8 + 2 * 6 * 8 + 3 * 6 * 8));
  EXPECT_EQ(dsrt::layer_norm_grad_workspace_bytes(DType::F32, Shape{2, 3, 8}, row8, 2),
            4 * (6 * 8 + 2 * 6 * 8));
  EXPECT_EQ(dsrt::layer_norm_grad_workspace_bytes(DType::F32, Shape{0, 8}, row8, 1), 0);
  // Past 32 blocks (200 rows: 50 blocks of 4) also the f64 dscale and dbias
  // sums of each of 32 lanes of blocks, 2 * 2 * 32 * n floats (the cuda
  // kernel's); the compiler's LayerNormGradOp::getWorkspaceBytes is the same.
  EXPECT_EQ(dsrt::layer_norm_grad_workspace_bytes(DType::F32, Shape{200, 8}, row8, 1),
            4 * (6 * 8 + 2 * 50 * 8 + 2 * 2 * 32 * 8));
  // A scale or bias with the normalized shape is read in place; one that
  // broadcasts to it is expanded to f32.
  EXPECT_EQ(dsrt::layer_norm_workspace_bytes(DType::F32, Shape{2, 3, 8}, rows3x8, &rows3x8, 1), 0);
  EXPECT_EQ(dsrt::layer_norm_workspace_bytes(DType::F32, Shape{2, 3, 8}, row8, &rows3x8, 1), 4 * 24);
  EXPECT_EQ(dsrt::layer_norm_workspace_bytes(DType::F32, Shape{2, 3, 8}, row8, &row8, 1), 8 * 24);
  EXPECT_EQ(dsrt::layer_norm_workspace_bytes(DType::BF16, Shape{2, 3, 8}, row8, nullptr, 1),
            4 * (2 * 24 + 24));
  EXPECT_EQ(dsrt::layer_norm_grad_workspace_bytes(DType::F32, Shape{2, 3, 8}, row8, 1),
            4 * (6 * 24 + 2 * 2 * 24 + 24));
  // Cross-entropy: f32 [N, C] rows in place; one f32 row of C per block of
  // samples (at most 64) over spatial axes or in 16 bits.
  EXPECT_EQ(dsrt::softmax_cross_entropy_workspace_bytes(DType::F32, Shape{6, 10}), 0);
  EXPECT_EQ(dsrt::softmax_cross_entropy_workspace_bytes(DType::F32, Shape{2, 10, 4}), 4 * 8 * 10);
  EXPECT_EQ(dsrt::softmax_cross_entropy_workspace_bytes(DType::BF16, Shape{6, 10}), 4 * 6 * 10);
  EXPECT_EQ(dsrt::softmax_cross_entropy_workspace_bytes(DType::F16, Shape{100, 7}), 4 * 64 * 7);
}

TEST_F(Errors, BackwardDataErrorsWriteNothing) {
  Owned dy(DType::F32, Shape{3, 2}, 0);
  Owned idx = Owned::of(DType::I64, Shape{3}, {1, -5, 0});
  Owned ddata(DType::F32, Shape{4, 2}, 0xAB);
  Owned before = ddata;
  EXPECT_DSRT_ERROR(dsrt::gather_grad(s, dy, idx, ddata, 0, {}), "dsrt::gather_grad", "index -5",
                    "indices element 1", "size 4");
  EXPECT_EQ(ddata.bytes(), before.bytes());
  Owned flags(DType::Bool, Shape{4, 2}), flag_dy(DType::Bool, Shape{3, 2});
  Owned ok_idx = Owned::of(DType::I64, Shape{3}, {1, 2, 0});
  EXPECT_DSRT_ERROR(dsrt::gather_grad(s, flag_dy, ok_idx, flags, 0, {}), "gather_grad", "got bool");

  Owned log_prob(DType::F32, Shape{3, 4});
  Owned labels = Owned::of(DType::I32, Shape{3}, {0, 4, -1});
  Owned dloss = Owned::of(DType::F32, Shape{}, {1});
  Owned dscores(DType::F32, Shape{3, 4}, 0xCD);
  Owned dscores_before = dscores;
  EXPECT_DSRT_ERROR(dsrt::softmax_cross_entropy_grad(s, dloss, log_prob, labels, nullptr, dscores,
                                                     dsrt::Reduction::Mean, true, -1),
                    "dsrt::softmax_cross_entropy_grad", "label 4", "labels element 1", "[0, 4)");
  EXPECT_EQ(dscores.bytes(), dscores_before.bytes());
  EXPECT_DSRT_ERROR(dsrt::nll_loss_grad(s, dloss, labels, nullptr, dscores, dsrt::Reduction::Sum,
                                        false, 0),
                    "dsrt::nll_loss_grad", "label 4");
  EXPECT_EQ(dscores.bytes(), dscores_before.bytes());
  Owned per_sample(DType::F32, Shape{2});
  EXPECT_DSRT_ERROR(dsrt::nll_loss_grad(s, per_sample, labels, nullptr, dscores,
                                        dsrt::Reduction::None, true, 4),
                    "dloss has shape [2], expected [3]");
}

TEST_F(Errors, BackwardArguments) {
  Owned x(DType::F32, Shape{2, 8}), g(DType::F32, Shape{8}), mean(DType::F32, Shape{2, 1}),
      inv(DType::F32, Shape{2, 1}), dx(DType::F32, Shape{2, 8});
  Owned dg_bad(DType::F32, Shape{1, 8}), dg(DType::F32, Shape{8}), db_bad(DType::F32, Shape{3});
  EXPECT_DSRT_ERROR(dsrt::layer_norm_grad(s, x, x, g, mean, inv, dx, dg_bad, nullptr, 1, {}),
                    "dsrt::layer_norm_grad", "dscale has shape [1, 8], expected [8]");
  EXPECT_DSRT_ERROR(dsrt::layer_norm_grad(s, x, x, g, mean, inv, dx, dg, &db_bad.t(), 1, {}),
                    "dbias [3] does not broadcast to the normalized shape [8]");
  Owned x16(DType::F16, Shape{2, 8});
  EXPECT_DSRT_ERROR(dsrt::softmax_grad(s, x, x16, dx, 1, {}), "dsrt::softmax_grad",
                    "y is f32 but dy is f16");

  Owned img(DType::F32, Shape{1, 4, 5, 5}), w(DType::F32, Shape{6, 2, 3, 3});
  Owned dy(DType::F32, Shape{1, 6, 3, 3}), dy_bad(DType::F32, Shape{1, 6, 4, 3});
  const int64_t st[] = {1, 1}, pads[] = {0, 0, 0, 0}, dil[] = {1, 1};
  EXPECT_DSRT_ERROR(dsrt::conv_grad_input(s, dy_bad, w, img, st, pads, dil, 2, {}),
                    "dsrt::conv_grad_input",
                    "dy [1, 6, 4, 3] has 4 positions on spatial axis 0, expected 3");
  Owned dw_bad(DType::F32, Shape{6, 4, 3, 3});
  EXPECT_DSRT_ERROR(dsrt::conv_grad_weight(s, dy, img, dw_bad, st, pads, dil, 2, {}),
                    "dsrt::conv_grad_weight", "dw [6, 4, 3, 3] needs 2 input channels per group");
  const int64_t k[] = {2, 2}, st2[] = {2, 2};
  Owned pooled(DType::F32, Shape{1, 4, 2, 2}), dimg_bad(DType::F32, Shape{1, 4, 5, 4});
  EXPECT_DSRT_ERROR(dsrt::max_pool_grad(s, pooled, img, dimg_bad, k, st2, pads, dil, {}),
                    "dsrt::max_pool_grad", "dx has shape [1, 4, 5, 4], expected [1, 4, 5, 5]");
  Owned pooled_bad(DType::F32, Shape{1, 4, 4, 2});
  EXPECT_DSRT_ERROR(dsrt::avg_pool_grad(s, pooled_bad, img, k, st2, pads, false, {}),
                    "dsrt::avg_pool_grad", "dy [1, 4, 4, 2] has 4 positions");
  const int64_t offsets[] = {3, 0}, strides[] = {1, 1};
  Owned part(DType::F32, Shape{2, 8});
  EXPECT_DSRT_ERROR(dsrt::slice_grad(s, part, x, offsets, strides), "dsrt::slice_grad",
                    "axis 0 writes out of bounds");
}

TEST_F(Errors, OptimizerArguments) {
  Owned lr = Owned::of(DType::F32, Shape{}, {0.1});
  Owned step0 = Owned::of(DType::I64, Shape{}, {0}), step1 = Owned::of(DType::I64, Shape{}, {1});
  Owned p = Owned::of(DType::F32, Shape{2}, {1, 2}), g = Owned::of(DType::F32, Shape{2}, {1, 1});
  Owned m(DType::F32, Shape{2}), v(DType::F32, Shape{2});
  Owned out(DType::F32, Shape{2}, 0xEE);
  Owned out_before = out;
  EXPECT_DSRT_ERROR(
      dsrt::adamw(s, lr, step0, p, g, m, v, out, out, out, 0.9f, 0.999f, 1e-8f, 0, true),
      "dsrt::adamw", "step 0");
  EXPECT_EQ(out.bytes(), out_before.bytes());
  EXPECT_DSRT_ERROR(dsrt::sgd(s, lr, step1, p, g, m, out, out, 0.9f, 0.1f, 0, true), "dsrt::sgd",
                    "nesterov needs a positive momentum and zero dampening");
  Owned half(DType::F16, Shape{2});
  EXPECT_DSRT_ERROR(dsrt::lion(s, lr, p, g, half, out, out, 0.9f, 0.99f, 0), "dsrt::lion",
                    "param is f32 but m is f16");
  Owned lr_vec(DType::F32, Shape{2});
  EXPECT_DSRT_ERROR(dsrt::lion(s, lr_vec, p, g, m, out, out, 0.9f, 0.99f, 0),
                    "lr must be a scalar");
  Owned ints(DType::I64, Shape{3}), total(DType::F32, Shape{}), total16(DType::F16, Shape{});
  dsrt::Tensor list[] = {p, ints};
  EXPECT_DSRT_ERROR(dsrt::sum_of_squares(s, list, 2, total), "dsrt::sum_of_squares",
                    "tensor 1 must be f32, f16 or bf16, got i64");
  EXPECT_DSRT_ERROR(dsrt::sum_of_squares(s, list, 1, total16), "out must be f32, got f16");
}

TEST(Stream, CpuSemantics) {
  dsrt::Stream s(dsrt::Backend::Cpu, 3);
  EXPECT_EQ(s.threads(), 3);
  EXPECT_EQ(s.backend(), dsrt::Backend::Cpu);
  dsrt::Event e;
  EXPECT_FALSE(e.recorded());
  e.record(s);
  EXPECT_TRUE(e.recorded());
  dsrt::Stream other;
  e.wait(other);
  e.synchronize();
  s.synchronize();
  EXPECT_DSRT_ERROR(dsrt::Stream(dsrt::Backend::Cuda), "libdsrt_cuda.a");
  EXPECT_DSRT_ERROR(dsrt::Stream(dsrt::Backend::Cpu, -1), "thread count -1");
}

}  // namespace
