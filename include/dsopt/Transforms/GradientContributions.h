//===- GradientContributions.h - What a gradient accumulation sums --------===//
//
// A parameter used several times gets one gradient contribution per use,
// which the backward pass adds up before the accumulation acc' = acc + g.
// The pipeline passes place these additions: ds-pipeline-split gives every
// stage its own partial sum, added to its own copy of the accumulator, and
// ds-pipeline counts what crosses stages accordingly.
//
//===----------------------------------------------------------------------===//
#ifndef DSOPT_TRANSFORMS_GRADIENTCONTRIBUTIONS_H
#define DSOPT_TRANSFORMS_GRADIENTCONTRIBUTIONS_H

#include "ds/IR/DsDialect.h"

namespace dsopt {

/// What a gradient accumulation sums: the contributions of the parameter's
/// uses (`leaves`) and the tree of single-use additions of one type that
/// adds them up (`tree`, root first). A sum widened once before it is
/// accumulated (ds-precision's grad_accum_dtype) is looked through, the
/// cast being `widen`. Ops for which `isForward` holds are never part of
/// it.
struct GradientContributions {
  llvm::SmallVector<mlir::Value> leaves;
  llvm::SmallVector<mlir::Operation *> tree;
  ds::CastOp widen;
};

inline GradientContributions collectGradientContributions(
    const ds::GradientAccumulation &accumulation,
    llvm::function_ref<bool(mlir::Operation *)> isForward) {
  GradientContributions result;
  mlir::Value grad = accumulation.grad;
  auto widen = grad.getDefiningOp<ds::CastOp>();
  if (widen && widen->hasOneUse() && !isForward(widen)) {
    result.widen = widen;
    grad = widen.getInput();
  }
  llvm::SmallVector<mlir::Value> work{grad};
  while (!work.empty()) {
    mlir::Value value = work.pop_back_val();
    auto sum = value.getDefiningOp<ds::AddOp>();
    if (sum && !isForward(sum) && sum->hasOneUse() &&
        sum.getLhs().getType() == sum.getType() &&
        sum.getRhs().getType() == sum.getType()) {
      result.tree.push_back(sum);
      work.push_back(sum.getRhs());
      work.push_back(sum.getLhs());
      continue;
    }
    result.leaves.push_back(value);
  }
  return result;
}

} // namespace dsopt

#endif // DSOPT_TRANSFORMS_GRADIENTCONTRIBUTIONS_H
