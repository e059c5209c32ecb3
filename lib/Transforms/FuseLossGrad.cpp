//===- FuseLossGrad.cpp - the loss's pass writes the scores' gradient -----===//
//
// Softmax cross-entropy stores its log-probabilities ([N, C, d...], as
// large as the scores) only for its gradient, which reads them back in the
// backward. Autodiff's seed (1, or the loss scale) is known before the
// loss, so one op can read the scores once, produce the loss and write
// the scores' gradient; the log-probabilities disappear from the memory
// plan, at the step's peak for a language model's vocabulary.
//
//   %loss, %lp = ds.softmax_cross_entropy %x, %t : ...
//   ...
//   %dx = ds.softmax_cross_entropy_grad %seed, %lp, %t : ...
// becomes
//   %loss, %dx = ds.softmax_cross_entropy_with_grad %x, %t, %seed : ...
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace dsopt {
#define GEN_PASS_DEF_DSFUSELOSSGRAD
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

/// Whether `value` is available just before `at`: a block argument of an
/// enclosing block or the result of an op before it.
bool availableAt(Value value, Operation *at) {
  if (auto arg = dyn_cast<BlockArgument>(value))
    return arg.getOwner()->findAncestorOpInBlock(*at) != nullptr;
  Operation *def = value.getDefiningOp();
  Operation *ancestor = def->getBlock()->findAncestorOpInBlock(*at);
  return ancestor && def->isBeforeInBlock(ancestor);
}

/// Makes `seed` available at `loss`: true when it is already, or when its
/// defining op is free of side effects, in the loss's block after it, and
/// its operands are available at the loss (the op then moves to just
/// before the loss; its readers all follow it still).
bool makeAvailable(Value seed, Operation *loss) {
  if (availableAt(seed, loss))
    return true;
  Operation *def = seed.getDefiningOp();
  if (!def || def->getBlock() != loss->getBlock() || def->getNumRegions() != 0 ||
      !isMemoryEffectFree(def))
    return false;
  for (Value operand : def->getOperands())
    if (!availableAt(operand, loss))
      return false;
  def->moveBefore(loss);
  return true;
}

/// Fuses `loss` with the gradient that reads its log-probabilities, when
/// the pass's description allows it.
void fuse(ds::SoftmaxCrossEntropyOp loss) {
  Value logProb = loss.getLogProb();
  if (!logProb.hasOneUse())
    return;
  auto grad = dyn_cast<ds::SoftmaxCrossEntropyGradOp>(*logProb.getUsers().begin());
  if (!grad || grad->getBlock() != loss->getBlock() ||
      grad.getLogProb() != logProb || grad.getLabels() != loss.getLabels() ||
      grad.getWeights() != loss.getWeights() ||
      grad.getReduction() != loss.getReduction() ||
      grad.getIgnoreIndex() != loss.getIgnoreIndex() ||
      grad.getLossGrad().getType() != loss.getLoss().getType() ||
      grad.getScoresGrad().getType() != loss.getScores().getType() ||
      loss->getAttr(ds::DsDialect::kSpaceAttrName) !=
          grad->getAttr(ds::DsDialect::kSpaceAttrName))
    return;
  if (!makeAvailable(grad.getLossGrad(), loss))
    return;
  OpBuilder builder(loss);
  // The loss's location: errors name the ONNX node of the loss.
  auto fused = ds::SoftmaxCrossEntropyWithGradOp::create(
      builder, loss.getLoc(),
      loss.getScores(), loss.getLabels(), grad.getLossGrad(), loss.getWeights(),
      loss.getReduction(), loss.getIgnoreIndexAttr());
  // The loss's discardable attributes (where it runs) carry over.
  for (NamedAttribute attr : loss->getDiscardableAttrs())
    fused->setAttr(attr.getName(), attr.getValue());
  loss.getLoss().replaceAllUsesWith(fused.getLoss());
  grad.getScoresGrad().replaceAllUsesWith(fused.getScoresGrad());
  grad->erase();
  loss->erase();
}

struct FuseLossGradPass : dsopt::impl::DsFuseLossGradBase<FuseLossGradPass> {
  void runOnOperation() override {
    SmallVector<ds::SoftmaxCrossEntropyOp> losses;
    getOperation().walk([&](ds::SoftmaxCrossEntropyOp op) { losses.push_back(op); });
    for (ds::SoftmaxCrossEntropyOp loss : losses)
      fuse(loss);
  }
};

} // namespace
