//===- FuseMatMulEpilogue.cpp - bias, residual, bias grad into matmuls -----===//
//
// A linear layer's forward is matmul, + bias, + residual; its backward sums
// the output gradient over the rows for the bias and multiplies it with the
// input for the weight. Unfused, each add is a pass over the product's
// output and the bias gradient one more over the output gradient: this pass
// gives them to the matmul, whose cuda kernel (cuBLASLt) applies them in its
// epilogue while the tile is still in registers. Only exact matches fold:
// the bias a vector of the product's last axis and its element type, the
// residual the product's own type, every intermediate used only by the next
// op, nothing placed in another memory space.
//
// The tanh-approximated GELU (ds.gelu {approximate = tanh}) of a bias
// product without a residual folds into it too (ds.matmul_bias_gelu, which
// also writes the pre-activation the backward reads), and the derivative
// autodiff writes for it, when the incoming gradient is a product used
// nowhere else, into that product (ds.matmul_dgelu): cuBLASLt's GELU
// epilogues are the tanh form. The exact erf GELU never folds.
//
// The backward's residual-gradient sum add(g, layer_norm_grad's input
// gradient) folds into the layer norm gradient as its addend, which its
// kernel adds to each row as it writes it.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "GeluMatch.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/SetVector.h"

namespace dsopt {
#define GEN_PASS_DEF_DSFUSEMATMULEPILOGUE
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

/// Ops ds-offload placed in a memory space run there, as they are.
bool placed(Operation *op) {
  return op->hasAttr(ds::DsDialect::kSpaceAttrName);
}

/// The matmul's ds.* attributes (forward id, gradient of) on its
/// replacement, next to the replacement's own.
void copyAttrs(Operation *from, Operation *to) {
  for (NamedAttribute attr : from->getDiscardableAttrs())
    to->setAttr(attr.getName(), attr.getValue());
}

/// A matmul a bias can join: x [..., M, K] (not transposed: the batch folds
/// into M, one product) times a 2-D w, read by nothing else.
ds::MatMulOp biasableMatMul(Value value) {
  auto matmul = value.getDefiningOp<ds::MatMulOp>();
  if (!matmul || placed(matmul) || !matmul->hasOneUse() ||
      matmul.getTransposeLhs() ||
      cast<ShapedType>(matmul.getLhs().getType()).getRank() < 2 ||
      cast<ShapedType>(matmul.getRhs().getType()).getRank() != 2 ||
      !isa<FloatType>(getElementTypeOrSelf(matmul.getType())))
    return {};
  return matmul;
}

/// `value` is a bias of `product`: [N] of its last axis and element type.
bool isBiasOf(Value value, Value product) {
  auto bias = cast<ShapedType>(value.getType());
  auto type = cast<ShapedType>(product.getType());
  return bias.getRank() == 1 && bias.getElementType() == type.getElementType() &&
         bias.getDimSize(0) == type.getShape().back();
}

/// The one add reading `value` that adds it a value of its own type: a
/// residual to take into the epilogue as its addend.
ds::AddOp residualAdd(Value value) {
  if (!value.hasOneUse())
    return {};
  auto next = dyn_cast<ds::AddOp>(*value.getUsers().begin());
  if (!next || placed(next) || next.getLhs() == next.getRhs() ||
      next.getType() != value.getType())
    return {};
  Value other = next.getLhs() == value ? next.getRhs() : next.getLhs();
  return other.getType() == value.getType() ? next : ds::AddOp();
}

/// add(matmul, bias) and add(add(matmul, bias), addend) -> matmul_bias.
/// Returns the residual add it erased, if any.
Operation *foldBiasAdd(ds::AddOp add, IRRewriter &rewriter) {
  if (placed(add))
    return nullptr;
  ds::MatMulOp matmul;
  Value bias;
  for (auto [mine, other] : {std::pair(add.getLhs(), add.getRhs()),
                             std::pair(add.getRhs(), add.getLhs())})
    if (auto candidate = biasableMatMul(mine))
      if (isBiasOf(other, mine) && add.getType() == mine.getType()) {
        matmul = candidate;
        bias = other;
        break;
      }
  if (!matmul)
    return nullptr;
  // The residual: the sum's one reader adds a value of the product's type.
  Operation *last = add;
  Value addend;
  if (ds::AddOp next = residualAdd(add.getResult())) {
    addend = next.getLhs() == add.getResult() ? next.getRhs() : next.getLhs();
    last = next;
  }
  rewriter.setInsertionPoint(last);
  auto fused = ds::MatMulBiasOp::create(
      rewriter, matmul.getLoc(), matmul.getLhs(), matmul.getRhs(), bias,
      addend, matmul.getTransposeRhsAttr());
  copyAttrs(matmul, fused);
  rewriter.replaceOp(last, fused.getResult());
  if (last != add.getOperation())
    rewriter.eraseOp(add);
  rewriter.eraseOp(matmul);
  return last != add.getOperation() ? last : nullptr;
}

/// gemm(a, b, c) with c a bias vector [N] of the result's type, alpha and
/// beta 1 and `a` not transposed (ONNX Gemm as nn.Linear exports it:
/// transB, the weight [out, in]), and its residual add if any ->
/// matmul_bias.
void foldGemmBias(ds::GemmOp gemm, IRRewriter &rewriter) {
  Value bias = gemm.getC();
  if (placed(gemm) || !bias || gemm.getTransposeA() ||
      !gemm.getAlpha().isExactlyValue(1.0) ||
      !gemm.getBeta().isExactlyValue(1.0) ||
      !isa<FloatType>(getElementTypeOrSelf(gemm.getType())) ||
      !isBiasOf(bias, gemm.getResult()))
    return;
  Operation *last = gemm;
  Value addend;
  if (ds::AddOp next = residualAdd(gemm.getResult())) {
    addend = next.getLhs() == gemm.getResult() ? next.getRhs() : next.getLhs();
    last = next;
  }
  rewriter.setInsertionPoint(last);
  auto fused = ds::MatMulBiasOp::create(rewriter, gemm.getLoc(), gemm.getA(),
                                        gemm.getB(), bias, addend,
                                        gemm.getTransposeBAttr());
  copyAttrs(gemm, fused);
  rewriter.replaceOp(last, fused.getResult());
  if (last != gemm.getOperation())
    rewriter.eraseOp(gemm);
}

/// `op`'s ancestor in `block`.
Operation *inBlock(Operation *op, Block *block) {
  while (op && op->getBlock() != block)
    op = op->getParentOp();
  return op;
}

/// Every reader of `op`'s results comes after `point`.
bool readAfter(Operation *op, Operation *point) {
  for (Operation *user : op->getUsers()) {
    Operation *at = inBlock(user, point->getBlock());
    if (!at || at == point || !point->isBeforeInBlock(at))
      return false;
  }
  return true;
}

/// `value` and its reshapes that are matrices [K, `columns`] (the last
/// axis of `value` by default).
SetVector<Value> matrixViews(Value value, int64_t columns = -1) {
  auto type = cast<ShapedType>(value.getType());
  if (columns < 0)
    columns = type.getShape().back();
  SetVector<Value> views;
  auto isMatrix = [&](Type t) {
    auto shaped = cast<ShapedType>(t);
    return shaped.getRank() == 2 && shaped.getDimSize(1) == columns;
  };
  if (isMatrix(type))
    views.insert(value);
  for (Operation *user : value.getUsers())
    if (auto reshape = dyn_cast<ds::ReshapeOp>(user))
      if (isMatrix(reshape.getType()))
        views.insert(reshape.getResult());
  return views;
}

/// The weight gradient of a weight stored [out, in]: matmul(dy as [K, M],
/// x [K, N], transpose_lhs) -> matmul_lhs_bias_grad, its bias gradient
/// `sum`'s result (dy's column sums). Placed at the later of the two.
bool foldLhsBiasGrad(ds::ReduceSumOp sum, ds::MatMulOp matmul,
                     IRRewriter &rewriter) {
  Operation *later = sum->isBeforeInBlock(matmul) ? matmul.getOperation()
                                                  : sum.getOperation();
  Operation *earlier =
      later == sum.getOperation() ? matmul.getOperation() : sum;
  if (!readAfter(earlier, later))
    return false;
  rewriter.setInsertionPoint(later);
  auto fused = ds::MatMulLhsBiasGradOp::create(
      rewriter, matmul.getLoc(), matmul.getLhs(), matmul.getRhs());
  copyAttrs(matmul, fused);
  rewriter.replaceOp(matmul, fused.getResult());
  rewriter.replaceOp(sum, fused.getBiasGrad());
  return true;
}

/// reduce_sum(dy over all leading axes) and a weight gradient's
/// matmul(x, dy as [K, N]) -> matmul_bias_grad.
bool foldBiasGrad(ds::ReduceSumOp sum, IRRewriter &rewriter) {
  Value dy = sum.getInput();
  auto dyType = cast<ShapedType>(dy.getType());
  auto sumType = cast<ShapedType>(sum.getType());
  const int64_t rank = dyType.getRank();
  if (placed(sum) || sum.getKeepdims() || rank < 2 ||
      !isa<FloatType>(dyType.getElementType()) ||
      sumType.getElementType() != dyType.getElementType() ||
      sumType.getRank() != 1 ||
      sumType.getDimSize(0) != dyType.getShape().back())
    return false;
  ArrayRef<int64_t> axes = sum.getAxes();
  if (static_cast<int64_t>(axes.size()) != rank - 1)
    return false;
  for (int64_t i = 0; i < rank - 1; ++i)
    if (axes[i] != i)
      return false;
  // dy as [K, N]: dy itself when 2-D, its reshapes, and when dy is a
  // reshape, its source and the source's reshapes (the same elements in the
  // same order).
  SetVector<Value> asMatrix = matrixViews(dy);
  if (auto view = dy.getDefiningOp<ds::ReshapeOp>())
    asMatrix.insert_range(matrixViews(view.getInput(), dyType.getShape().back()));
  Block *block = sum->getBlock();
  for (Value rhs : asMatrix)
    for (Operation *user : rhs.getUsers()) {
      auto matmul = dyn_cast<ds::MatMulOp>(user);
      // dy on the left, transposed: the [out, in] weight's gradient.
      if (matmul && !placed(matmul) && matmul.getLhs() == rhs &&
          matmul.getRhs() != rhs && matmul.getTransposeLhs() &&
          !matmul.getTransposeRhs() && matmul->getBlock() == block &&
          cast<ShapedType>(matmul.getRhs().getType()).getRank() == 2 &&
          foldLhsBiasGrad(sum, matmul, rewriter))
        return true;
      if (!matmul || placed(matmul) || matmul.getRhs() != rhs ||
          matmul.getLhs() == rhs || matmul.getTransposeRhs() ||
          matmul->getBlock() != block ||
          cast<ShapedType>(matmul.getLhs().getType()).getRank() != 2)
        continue;
      // At the later of the two; the earlier one's readers must follow it.
      Operation *later = sum->isBeforeInBlock(matmul) ? matmul.getOperation()
                                                      : sum.getOperation();
      Operation *earlier =
          later == sum.getOperation() ? matmul.getOperation() : sum;
      if (!readAfter(earlier, later))
        continue;
      rewriter.setInsertionPoint(later);
      auto fused = ds::MatMulBiasGradOp::create(
          rewriter, matmul.getLoc(), matmul.getLhs(), rhs,
          matmul.getTransposeLhsAttr());
      copyAttrs(matmul, fused);
      rewriter.replaceOp(matmul, fused.getResult());
      rewriter.replaceOp(sum, fused.getBiasGrad());
      return true;
    }
  return false;
}

/// gelu_tanh(matmul_bias(x, w, bias)) -> matmul_bias_gelu, whose
/// pre-activation replaces the product's other readers.
bool foldGelu(ds::GeluOp gelu, IRRewriter &rewriter) {
  auto product = gelu.getInput().getDefiningOp<ds::MatMulBiasOp>();
  if (gelu.getApproximate() != ds::GeluApproximation::tanh || placed(gelu) ||
      !product || placed(product) || product.getAddend() ||
      gelu.getType() != product.getType())
    return false;
  rewriter.setInsertionPoint(product);
  auto fused = ds::MatMulBiasGeluOp::create(
      rewriter, product.getLoc(), product.getLhs(), product.getRhs(),
      product.getBias(), product.getTransposeRhsAttr());
  copyAttrs(product, fused);
  rewriter.replaceOp(gelu, fused.getResult());
  rewriter.replaceOp(product, fused.getPreActivation());
  return true;
}

/// dy * gelu_tanh'(x), dy = matmul(g, w) read only here -> matmul_dgelu.
bool foldGeluGrad(ds::MulOp mul, IRRewriter &rewriter) {
  if (placed(mul))
    return false;
  for (auto [dy, derivative] : {std::pair(mul.getLhs(), mul.getRhs()),
                                std::pair(mul.getRhs(), mul.getLhs())}) {
    Value x = gelu::tanhGeluDerivativeOf(derivative);
    ds::MatMulOp matmul = x ? biasableMatMul(dy) : ds::MatMulOp();
    if (!matmul || dy.getType() != x.getType() || mul.getType() != x.getType())
      continue;
    SmallVector<Operation *> chain = gelu::chainBelow(mul, x);
    rewriter.setInsertionPoint(mul);
    auto fused = ds::MatMulDGeluOp::create(rewriter, matmul.getLoc(),
                                           matmul.getLhs(), matmul.getRhs(), x,
                                           matmul.getTransposeRhsAttr());
    copyAttrs(matmul, fused);
    rewriter.replaceOp(mul, fused.getResult());
    rewriter.eraseOp(matmul);
    gelu::eraseUnused(rewriter, chain);
    return true;
  }
  return false;
}

/// add(g, layer_norm_grad.input_grad) (either order), the input gradient
/// read only by the add, g of its type (no broadcast) -> the layer norm
/// gradient with g as its addend, which its kernel adds in the same pass
/// over the rows (and whose result may take g's storage).
bool foldLayerNormGradAddend(ds::AddOp add, IRRewriter &rewriter) {
  if (placed(add) || add.getLhs() == add.getRhs())
    return false;
  for (auto [mine, other] : {std::pair(add.getLhs(), add.getRhs()),
                             std::pair(add.getRhs(), add.getLhs())}) {
    auto grad = mine.getDefiningOp<ds::LayerNormGradOp>();
    if (!grad || placed(grad) || grad.getAddend() ||
        mine != grad.getInputGrad() || !mine.hasOneUse() ||
        other.getType() != mine.getType() || add.getType() != mine.getType())
      continue;
    // The addend must exist where the layer norm gradient runs.
    if (Operation *def = other.getDefiningOp())
      if (def->getBlock() != grad->getBlock() || !def->isBeforeInBlock(grad))
        continue;
    if (auto arg = dyn_cast<BlockArgument>(other))
      if (arg.getOwner() != grad->getBlock())
        continue;
    rewriter.modifyOpInPlace(grad, [&] { grad.getAddendMutable().assign(other); });
    rewriter.replaceOp(add, grad.getInputGrad());
    return true;
  }
  return false;
}

struct FuseMatMulEpiloguePass
    : dsopt::impl::DsFuseMatMulEpilogueBase<FuseMatMulEpiloguePass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isDeclaration())
      return;
    IRRewriter rewriter(function.getContext());
    SmallVector<ds::GemmOp> gemms;
    function.walk([&](ds::GemmOp gemm) { gemms.push_back(gemm); });
    for (ds::GemmOp gemm : gemms)
      foldGemmBias(gemm, rewriter);
    SmallVector<ds::AddOp> adds;
    SmallVector<ds::ReduceSumOp> sums;
    function.walk([&](Operation *op) {
      if (auto add = dyn_cast<ds::AddOp>(op))
        adds.push_back(add);
      else if (auto sum = dyn_cast<ds::ReduceSumOp>(op))
        sums.push_back(sum);
    });
    // An add erased as the residual add of an earlier fold is not visited.
    llvm::SmallPtrSet<Operation *, 16> erased;
    for (ds::AddOp add : adds)
      if (!erased.contains(add))
        if (Operation *residual = foldBiasAdd(add, rewriter))
          erased.insert(residual);
    for (ds::ReduceSumOp sum : sums)
      foldBiasGrad(sum, rewriter);
    // The residual gradient into the layer norm gradient that feeds it (the
    // adds that are left).
    SmallVector<ds::AddOp> residualGrads;
    function.walk([&](ds::AddOp add) { residualGrads.push_back(add); });
    for (ds::AddOp add : residualGrads)
      foldLayerNormGradAddend(add, rewriter);
    // The tanh GELU and its derivative, around the bias products just made.
    SmallVector<ds::GeluOp> gelus;
    SmallVector<ds::MulOp> muls;
    function.walk([&](Operation *op) {
      if (auto gelu = dyn_cast<ds::GeluOp>(op))
        gelus.push_back(gelu);
      else if (auto mul = dyn_cast<ds::MulOp>(op))
        muls.push_back(mul);
    });
    for (ds::GeluOp gelu : gelus)
      foldGelu(gelu, rewriter);
    // A mul erased as part of an earlier fold's chain is not visited.
    llvm::SmallPtrSet<Operation *, 16> gone;
    for (ds::MulOp mul : muls) {
      if (gone.contains(mul))
        continue;
      SmallVector<Operation *> before = gelu::chainBelow(mul, Value());
      if (foldGeluGrad(mul, rewriter))
        gone.insert(before.begin(), before.end());
    }
  }
};
} // namespace
