//===- RecognizeGelu.cpp - the tanh GELU written as primitive ops ---------===//
//
// GPT-2's activation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// reaches ONNX below opset 20 as primitive ops: torch.onnx's export of
// F.gelu(approximate='tanh') and HF's gelu_new written out. This pass makes
// each exact instance one ds.gelu {approximate = tanh}, before autodiff, so
// that its derivative is ds.gelu's and later passes (the matmul epilogues)
// see one op. The constants must equal sqrt(2/pi), 0.044715, 1 and 0.5
// rounded to their element type, every intermediate x's type; anything
// else is left as it is. The exact erf form is not touched.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "GeluMatch.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"

namespace dsopt {
#define GEN_PASS_DEF_DSRECOGNIZEGELU
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

/// The one user of `value`, if it has exactly one.
Operation *soleUser(Value value) {
  return value && value.hasOneUse() ? *value.getUsers().begin() : nullptr;
}

/// The root of 0.5 * x * (1 + t) around `t` = tanh(inner(x)), in the
/// association torch.onnx exports ((x (1 + t)) 0.5) or HF's
/// ((0.5 x) (1 + t)), or (x ((1 + t) 0.5)).
Value geluRoot(Value t, Value x) {
  Operation *user = soleUser(t);
  if (!user || !isa<ds::AddOp>(user))
    return {};
  Value onePlus = user->getResult(0);
  if (gelu::withScalar<ds::AddOp>(onePlus, 1.0) != t)
    return {};
  Operation *next = soleUser(onePlus);
  if (!next || !isa<ds::MulOp>(next))
    return {};
  Value product = next->getResult(0);
  Value other = gelu::withOperand<ds::MulOp>(product, onePlus);
  Value root;
  if (other == x) {
    // (x (1 + t)) 0.5
    if (Operation *last = soleUser(product); last && isa<ds::MulOp>(last) &&
                                             gelu::withScalar<ds::MulOp>(
                                                 last->getResult(0), 0.5) == product)
      root = last->getResult(0);
  } else if (!other) {
    return {};
  } else if (gelu::withScalar<ds::MulOp>(other, 0.5) == x && other.hasOneUse()) {
    // (0.5 x) (1 + t)
    root = product;
  } else if (gelu::isScalar(other, 0.5)) {
    // x ((1 + t) 0.5)
    if (Operation *last = soleUser(product); last && isa<ds::MulOp>(last) &&
                                             gelu::withOperand<ds::MulOp>(
                                                 last->getResult(0), product) == x)
      root = last->getResult(0);
  }
  if (!root || root.getType() != x.getType())
    return {};
  return root;
}

struct RecognizeGeluPass : dsopt::impl::DsRecognizeGeluBase<RecognizeGeluPass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isDeclaration())
      return;
    SmallVector<ds::TanhOp> tanhs;
    function.walk([&](ds::TanhOp op) { tanhs.push_back(op); });
    IRRewriter rewriter(function.getContext());
    for (ds::TanhOp tanh : tanhs) {
      Value x = gelu::tanhInnerOf(tanh.getResult());
      if (!x || !isa<FloatType>(getElementTypeOrSelf(x.getType())))
        continue;
      Value root = geluRoot(tanh.getResult(), x);
      if (!root)
        continue;
      Operation *rootOp = root.getDefiningOp();
      SmallVector<Operation *> chain = gelu::chainBelow(rootOp, x);
      rewriter.setInsertionPoint(rootOp);
      auto gelu = ds::GeluOp::create(
          rewriter, rootOp->getLoc(), x,
          ds::GeluApproximationAttr::get(rewriter.getContext(),
                                         ds::GeluApproximation::tanh));
      rewriter.replaceOp(rootOp, gelu.getResult());
      gelu::eraseUnused(rewriter, chain);
    }
  }
};

} // namespace
