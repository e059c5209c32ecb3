//===- DsOptimizers.cpp - OptimizerOpInterface and the training step ------===//
//
// The states each optimizer op keeps, named as torch (or ONNX) names them,
// and the matcher of a gradient accumulation in the training step.
//
//===----------------------------------------------------------------------===//

#include "ds/IR/DsDialect.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace dsopt::ds;

ArrayRef<StringRef> AdamWOp::getStateRoles() {
  static constexpr StringRef roles[] = {"exp_avg", "exp_avg_sq"};
  return roles;
}
ArrayRef<StringRef> SgdOp::getStateRoles() {
  static constexpr StringRef roles[] = {"momentum_buffer"};
  return roles;
}
ArrayRef<StringRef> LionOp::getStateRoles() {
  static constexpr StringRef roles[] = {"exp_avg"};
  return roles;
}

// The torch.optim updates' optional grad_scale, their last operand.
static OpOperand *gradScaleOperand(Operation *op, Value scale) {
  return scale ? &op->getOpOperand(op->getNumOperands() - 1) : nullptr;
}
OpOperand *AdamWOp::getGradScaleOperand() {
  return gradScaleOperand(*this, getGradScale());
}
OpOperand *SgdOp::getGradScaleOperand() {
  return gradScaleOperand(*this, getGradScale());
}
OpOperand *LionOp::getGradScaleOperand() {
  return gradScaleOperand(*this, getGradScale());
}

// ONNX's preview optimizers name their states as ONNX does.
ArrayRef<StringRef> AdamOp::getStateRoles() {
  static constexpr StringRef roles[] = {"first_moment", "second_moment"};
  return roles;
}
ArrayRef<StringRef> MomentumOp::getStateRoles() {
  static constexpr StringRef roles[] = {"velocity"};
  return roles;
}
ArrayRef<StringRef> AdagradOp::getStateRoles() {
  static constexpr StringRef roles[] = {"accumulator"};
  return roles;
}

// Gradient norm and state initialization.
std::optional<dsopt::ds::GradientAccumulation>
dsopt::ds::matchGradientAccumulation(FunctionOpInterface function,
                                     OpOperand &result) {
  auto updates = function.getResultAttrOfType<IntegerAttr>(
      result.getOperandNumber(), DsDialect::kUpdatesAttrName);
  if (!updates)
    return std::nullopt;
  auto acc = function.getArgument(updates.getInt());
  auto state = function.getArgAttrOfType<StateAttr>(acc.getArgNumber(),
                                                    DsDialect::kStateAttrName);
  if (!state || !state.isAccumulator())
    return std::nullopt;
  GradientAccumulation match{acc, state.getParam(), nullptr, result.get()};
  auto add = result.get().getDefiningOp<AddOp>();
  if (add && (add.getLhs() == acc || add.getRhs() == acc)) {
    match.add = add;
    match.grad = add.getLhs() == acc ? add.getRhs() : add.getLhs();
  }
  return match;
}
