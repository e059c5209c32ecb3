//===- WeightViews.h - Values a pipeline stage recomputes -------*- C++ -*-===//
//
// A weight view is a value of @micro_step computed from parameters and
// constants alone by ops that only move or convert data: ds-pad-vocab's
// padded LM head (a concat of the weight and zero rows), a weight's
// transpose or cast. Its bytes are the same for every micro-batch, so a
// pipeline stage whose backward reads one recomputes it there (ds-pipeline-
// split) instead of stashing a copy per micro-batch in flight, and
// ds-pipeline does not count it among the stage's stashed activations.
//
//===----------------------------------------------------------------------===//
#ifndef DSOPT_TRANSFORMS_WEIGHTVIEWS_H
#define DSOPT_TRANSFORMS_WEIGHTVIEWS_H

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLExtras.h"

namespace dsopt {

/// Whether `value` is a weight view: a parameter argument (`ds.param`) of
/// its function, a constant, or the result of a fill, concat, slice,
/// reshape, transpose, broadcast or cast whose operands are weight views.
inline bool isWeightView(mlir::Value value) {
  if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(value)) {
    auto function = mlir::dyn_cast<mlir::func::FuncOp>(arg.getOwner()->getParentOp());
    return function && function.getArgAttr(arg.getArgNumber(), ds::DsDialect::kParamAttrName);
  }
  mlir::Operation *def = value.getDefiningOp();
  if (def->hasTrait<mlir::OpTrait::ConstantLike>())
    return true;
  if (!mlir::isa<ds::FillOp, ds::ConcatOp, ds::SliceOp, ds::ReshapeOp, ds::TransposeOp,
                 ds::BroadcastToOp, ds::CastOp>(def))
    return false;
  return llvm::all_of(def->getOperands(), isWeightView);
}

} // namespace dsopt

#endif // DSOPT_TRANSFORMS_WEIGHTVIEWS_H
