//===- PadVocab.cpp - a language model's head padded to a multiple of 8 ---===//
//
// GPT-2's vocabulary, 50257 words, is odd: the LM head's logits [.., V],
// its input gradient (which reads them as a [.., V] operand) and its
// weight gradient (which reads them transposed) all have a 16-bit leading
// dimension that is not a multiple of 16 bytes, which cuBLASLt's fast
// kernels need. The cuda backend then stages the three products through
// aligned copies (runtime/src/cuda/linalg.cu, run_staged): about 12 ms of
// copies a step on an H200. llm.c pads the vocabulary to 50304; this pass
// pads the head's ops, not the parameter:
//
//   %l = ds.matmul %x, %w {transpose_rhs} : [.., d], [V, d]
//   %s = ds.reshape %l : [.., V] -> [N, V]                   (optional)
//   %loss, %g = ds.softmax_cross_entropy_with_grad %s, %t, %seed
//   %dx = ds.matmul (reshape %g), %w : [.., V], [V, d]
//   %dw = ds.matmul %g, %h {transpose_lhs} : [N, V], [N, d]
// becomes, with V8 = V rounded up to a multiple of 8,
//   %wp = ds.concat %w, (ds.fill 0 : [V8 - V, d])            [V8, d]
//   %b = ds.concat (ds.fill 0 : [V]), (ds.fill -65504 : [V8 - V])
//   %l = ds.matmul_bias %x, %wp, %b {transpose_rhs}          [.., V8]
//   %loss, %g = ds.softmax_cross_entropy_with_grad %s, %t, %seed  [N, V8]
//   %dx = ds.matmul (reshape %g), %wp                         [.., d]
//   %dw = ds.slice (ds.matmul %g, %h {transpose_lhs}) rows 0..V
//
// The padding classes' scores are -65504 (the bias; the product with the
// zero rows is 0), so their softmax is exp(-65504 - max) = 0 in f32 and
// their gradient 0; the loss, dx and dw are those of the unpadded head.
// The labels' range stays [0, V): recorded on the labels' input as
// ds.index_range, which the runners check before step 1.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"

#include <algorithm>

namespace dsopt {
#define GEN_PASS_DEF_DSPADVOCAB
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

/// The most negative f16: exactly representable in f16 and bf16, and far
/// enough below any real score that its softmax underflows to 0 in f32.
constexpr double kPadScore = -65504.0;

void copyAttrs(Operation *from, Operation *to) {
  for (NamedAttribute attr : from->getDiscardableAttrs())
    to->setAttr(attr.getName(), attr.getValue());
}

bool placed(Operation *op) { return op->hasAttr(ds::DsDialect::kSpaceAttrName); }

/// `value`'s reshapes that keep its last axis, each read by reshapes like
/// it or by `leaf` ops only; false when some other op reads one.
bool collectViews(Value value, SmallVectorImpl<ds::ReshapeOp> &views,
                  SmallVectorImpl<OpOperand *> &leaves) {
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (auto reshape = dyn_cast<ds::ReshapeOp>(user)) {
      auto from = cast<RankedTensorType>(value.getType());
      auto to = dyn_cast<RankedTensorType>(reshape.getType());
      if (!to || to.getRank() < 1 || placed(reshape) ||
          to.getShape().back() != from.getShape().back())
        return false;
      views.push_back(reshape);
      if (!collectViews(reshape.getResult(), views, leaves))
        return false;
      continue;
    }
    leaves.push_back(&use);
  }
  return true;
}

/// The block argument `value` is a view of (through reshapes), or null.
BlockArgument sourceArgument(Value value) {
  while (auto reshape = value.getDefiningOp<ds::ReshapeOp>())
    value = reshape.getInput();
  return dyn_cast<BlockArgument>(value);
}

RankedTensorType withLast(RankedTensorType type, int64_t last) {
  SmallVector<int64_t> shape(type.getShape());
  shape.back() = last;
  return type.clone(shape);
}

/// A reshape of `value` ([.., V8]) like `old` (of [.., V]) with the last
/// axis V8, at `old`'s place.
Value padView(OpBuilder &b, ds::ReshapeOp old, Value value, int64_t padded) {
  b.setInsertionPoint(old);
  auto view = ds::ReshapeOp::create(
      b, old.getLoc(), withLast(cast<RankedTensorType>(old.getType()), padded), value);
  copyAttrs(old, view);
  return view;
}

struct PadVocabPass : dsopt::impl::DsPadVocabBase<PadVocabPass> {
  using DsPadVocabBase::DsPadVocabBase;

  void runOnOperation() override {
    SmallVector<ds::SoftmaxCrossEntropyWithGradOp> losses;
    getOperation().walk(
        [&](ds::SoftmaxCrossEntropyWithGradOp op) { losses.push_back(op); });
    for (ds::SoftmaxCrossEntropyWithGradOp loss : losses)
      pad(loss);
  }

  void pad(ds::SoftmaxCrossEntropyWithGradOp loss) {
    auto scoresType = dyn_cast<RankedTensorType>(loss.getScores().getType());
    if (!scoresType || scoresType.getRank() != 2 || !scoresType.hasStaticShape() ||
        loss.getWeights() || placed(loss))
      return;
    Type element = scoresType.getElementType();
    if (!element.isF16() && !element.isBF16())
      return;
    const int64_t multiple = std::max<int64_t>(1, this->multiple);
    const int64_t vocab = scoresType.getShape()[1];
    const int64_t padded = (vocab + multiple - 1) / multiple * multiple;
    if (padded == vocab)
      return;

    // The scores: the head's product, through at most one reshape that
    // keeps the vocabulary last, read by nothing else.
    Value scores = loss.getScores();
    ds::ReshapeOp scoresView = scores.getDefiningOp<ds::ReshapeOp>();
    Value logits = scoresView ? scoresView.getInput() : scores;
    auto head = logits.getDefiningOp<ds::MatMulOp>();
    if (!head || placed(head) || !head.getTransposeRhs() || head.getTransposeLhs() ||
        !logits.hasOneUse() || (scoresView && (!scores.hasOneUse() || placed(scoresView))))
      return;
    Value weight = head.getRhs();
    auto weightType = dyn_cast<RankedTensorType>(weight.getType());
    auto logitsType = dyn_cast<RankedTensorType>(logits.getType());
    if (!weightType || weightType.getRank() != 2 || !weightType.hasStaticShape() ||
        weightType.getShape()[0] != vocab || !logitsType ||
        logitsType.getShape().back() != vocab)
      return;
    const int64_t width = weightType.getShape()[1];

    // The labels' input, where their range is recorded.
    BlockArgument labels = sourceArgument(loss.getLabels());
    auto function = dyn_cast<func::FuncOp>(getOperation());
    if (!labels || !function || labels.getOwner() != &function.getBody().front())
      return;

    // Every reader of the scores' gradient: the input gradient (a view of
    // it times w) and the weight gradient (it transposed times the
    // head's input).
    SmallVector<ds::ReshapeOp> views;
    SmallVector<OpOperand *> leaves;
    if (!collectViews(loss.getScoresGrad(), views, leaves))
      return;
    for (OpOperand *use : leaves) {
      auto matmul = dyn_cast<ds::MatMulOp>(use->getOwner());
      if (!matmul || placed(matmul) || use->getOperandNumber() != 0)
        return;
      bool inputGrad = !matmul.getTransposeLhs() && !matmul.getTransposeRhs() &&
                       matmul.getRhs() == weight;
      bool weightGrad = matmul.getTransposeLhs() && !matmul.getTransposeRhs() &&
                        cast<RankedTensorType>(matmul.getLhs().getType()).getRank() == 2;
      if (!inputGrad && !weightGrad)
        return;
    }

    // The padded weight and the bias, before the head.
    OpBuilder b(head);
    Location loc = head.getLoc();
    auto zeros = ds::FillOp::create(b, loc, weightType.clone({padded - vocab, width}),
                                    b.getF64FloatAttr(0.0));
    Value paddedWeight =
        ds::ConcatOp::create(b, loc, ValueRange{weight, zeros}, b.getI64IntegerAttr(0));
    auto biasReal = ds::FillOp::create(
        b, loc, RankedTensorType::get({vocab}, element), b.getF64FloatAttr(0.0));
    auto biasPad = ds::FillOp::create(
        b, loc, RankedTensorType::get({padded - vocab}, element),
        b.getF64FloatAttr(kPadScore));
    Value bias = ds::ConcatOp::create(b, loc, ValueRange{biasReal, biasPad},
                                      b.getI64IntegerAttr(0));
    auto paddedHead = ds::MatMulBiasOp::create(b, loc, head.getLhs(), paddedWeight, bias,
                                               Value(), head.getTransposeRhsAttr());
    copyAttrs(head, paddedHead);
    Value paddedScores = paddedHead.getResult();
    if (scoresView)
      paddedScores = padView(b, scoresView, paddedScores, padded);

    b.setInsertionPoint(loss);
    auto paddedLoss = ds::SoftmaxCrossEntropyWithGradOp::create(
        b, loss.getLoc(), paddedScores, loss.getLabels(), loss.getLossGrad(), Value(),
        loss.getReduction(), loss.getIgnoreIndexAttr());
    copyAttrs(loss, paddedLoss);

    // The gradient's views, in order (each after what it reads).
    IRMapping map;
    map.map(loss.getScoresGrad(), paddedLoss.getScoresGrad());
    for (ds::ReshapeOp view : views)
      map.map(view.getResult(), padView(b, view, map.lookup(view.getInput()), padded));
    SmallVector<Operation *> dead;
    for (OpOperand *use : leaves) {
      auto matmul = cast<ds::MatMulOp>(use->getOwner());
      b.setInsertionPoint(matmul);
      // The input gradient reads the padded w; the weight gradient's
      // [V8, d] is sliced back to [V, d].
      const bool weightGrad = matmul.getTransposeLhs();
      Value replacement = ds::MatMulOp::create(
          b, matmul.getLoc(), map.lookup(matmul.getLhs()),
          weightGrad ? matmul.getRhs() : paddedWeight, matmul.getTransposeLhsAttr(),
          matmul.getTransposeRhsAttr());
      copyAttrs(matmul, replacement.getDefiningOp());
      if (weightGrad) {
        replacement = ds::SliceOp::create(b, matmul.getLoc(), matmul.getType(), replacement,
                                          b.getDenseI64ArrayAttr({0, 0}),
                                          b.getDenseI64ArrayAttr({1, 1}));
        copyAttrs(matmul, replacement.getDefiningOp());
      }
      matmul.getResult().replaceAllUsesWith(replacement);
      dead.push_back(matmul);
    }
    loss.getLoss().replaceAllUsesWith(paddedLoss.getLoss());
    for (Operation *op : dead)
      op->erase();
    for (ds::ReshapeOp view : llvm::reverse(views))
      view->erase();
    loss->erase();
    if (scoresView)
      scoresView->erase();
    head->erase();

    // The labels the whole loss takes: [0, V), and its ignore_index.
    SmallVector<int64_t> range{0, vocab};
    if (auto ignore = paddedLoss.getIgnoreIndex())
      range.push_back(*ignore);
    if (auto recorded = function.getArgAttrOfType<DenseI64ArrayAttr>(
            labels.getArgNumber(), ds::DsDialect::kIndexRangeAttrName)) {
      range[0] = std::max(range[0], recorded[0]);
      range[1] = std::min(range[1], recorded[1]);
      if (range.size() > 2 && (recorded.size() < 3 || recorded[2] != range[2]))
        range.pop_back();
    }
    function.setArgAttr(labels.getArgNumber(), ds::DsDialect::kIndexRangeAttrName,
                        b.getDenseI64ArrayAttr(range));
  }
};

} // namespace
