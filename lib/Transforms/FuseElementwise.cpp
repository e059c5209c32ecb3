//===- FuseElementwise.cpp - fuse chains of elementwise ops ---------------===//
//
// Groups elementwise ops (ElementwiseOpInterface) whose intermediate results
// have the group's full shape and are used only inside the group, and
// replaces each group by one ds.fused op whose body computes an element with
// arith/math ops. The fused loop reads every input once and writes the result
// once, where the unfused chain writes and reads every intermediate.
// Scalar constants become constants in the body.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace dsopt {
#define GEN_PASS_DEF_DSFUSEELEMENTWISE
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

/// An op placed in a memory space by ds-offload (`ds.space`, e.g. the host
/// copy of an updated master weight) runs there and must stay its own op: a
/// ds.fused runs on the device, and one loop cannot span two spaces.
bool isFusable(Operation *op) {
  return op && isa<ds::ElementwiseOpInterface>(op) &&
         op->getNumResults() == 1 &&
         !op->hasAttr(ds::DsDialect::kSpaceAttrName);
}

/// A splat constant with one element becomes a constant in the body.
DenseElementsAttr scalarConstant(Value value) {
  auto constant = value.getDefiningOp<ds::ConstantOp>();
  if (!constant)
    return {};
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense || !dense.isSplat() ||
      cast<ShapedType>(dense.getType()).getNumElements() != 1)
    return {};
  return dense;
}

Value bodyConstant(OpBuilder &b, Location loc, DenseElementsAttr dense) {
  Type element = dense.getElementType();
  Type compute = ds::FusedOp::getComputeType(element);
  if (isa<FloatType>(element)) {
    APFloat value = dense.getSplatValue<APFloat>();
    bool losesInfo;
    value.convert(APFloat::IEEEsingle(), APFloat::rmNearestTiesToEven,
                  &losesInfo);
    return arith::ConstantOp::create(b, loc, FloatAttr::get(compute, value));
  }
  if (element.isInteger(1))
    return arith::ConstantOp::create(b, loc,
                                     b.getBoolAttr(dense.getSplatValue<bool>()));
  return arith::ConstantOp::create(
      b, loc, IntegerAttr::get(compute, dense.getSplatValue<APInt>()));
}

/// Fuses the group rooted at `root` (ops in program order) into a ds.fused.
void fuseGroup(ArrayRef<Operation *> group, Operation *root) {
  llvm::SmallPtrSet<Operation *, 8> members(group.begin(), group.end());
  llvm::SetVector<Value> inputs;
  for (Operation *op : group)
    for (Value operand : op->getOperands())
      if (!members.contains(operand.getDefiningOp()) &&
          !scalarConstant(operand))
        inputs.insert(operand);

  OpBuilder builder(root);
  Location loc = root->getLoc();
  auto fused = ds::FusedOp::create(builder, loc, root->getResult(0).getType(),
                                   inputs.getArrayRef());
  Block *body = builder.createBlock(&fused.getBody());
  IRMapping scalars;
  for (Value input : inputs)
    scalars.map(input,
                body->addArgument(
                    ds::FusedOp::getComputeType(
                        cast<ShapedType>(input.getType()).getElementType()),
                    input.getLoc()));
  builder.setInsertionPointToStart(body);
  for (Operation *op : group) {
    SmallVector<Value> operands;
    for (Value operand : op->getOperands()) {
      if (Value mapped = scalars.lookupOrNull(operand)) {
        operands.push_back(mapped);
      } else {
        Value constant =
            bodyConstant(builder, op->getLoc(), scalarConstant(operand));
        scalars.map(operand, constant);
        operands.push_back(constant);
      }
    }
    Value scalar = cast<ds::ElementwiseOpInterface>(op).buildScalar(
        builder, op->getLoc(), operands);
    scalars.map(op->getResult(0), scalar);
  }
  ds::YieldOp::create(builder, loc, scalars.lookup(root->getResult(0)));

  root->getResult(0).replaceAllUsesWith(fused.getResult());
  llvm::SmallSetVector<Operation *, 4> constants;
  for (Operation *op : group)
    for (Value operand : op->getOperands())
      if (scalarConstant(operand))
        constants.insert(operand.getDefiningOp());
  for (Operation *op : llvm::reverse(group))
    op->erase();
  // Constants now inside the body are dead outside it.
  for (Operation *constant : constants)
    if (constant->use_empty())
      constant->erase();
}

struct FuseElementwisePass
    : dsopt::impl::DsFuseElementwiseBase<FuseElementwisePass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isDeclaration())
      return;
    Block &block = function.getBody().front();
    llvm::SmallPtrSet<Operation *, 16> taken;
    // Roots in reverse order: a consumer claims its producers before they are
    // considered as roots themselves.
    SmallVector<Operation *> candidates;
    for (Operation &op : llvm::reverse(block.getOperations()))
      if (isFusable(&op))
        candidates.push_back(&op);
    for (Operation *root : candidates) {
      if (taken.contains(root))
        continue;
      auto shape = cast<ShapedType>(root->getResult(0).getType()).getShape();
      llvm::SmallPtrSet<Operation *, 8> group{root};
      bool changed = true;
      while (changed) {
        changed = false;
        for (Operation *member : SmallVector<Operation *>(group.begin(),
                                                          group.end()))
          for (Value operand : member->getOperands()) {
            Operation *producer = operand.getDefiningOp();
            if (!isFusable(producer) || group.contains(producer) ||
                taken.contains(producer) ||
                cast<ShapedType>(producer->getResult(0).getType()).getShape() !=
                    shape)
              continue;
            // Fusing a value used outside the group would recompute it.
            if (!llvm::all_of(producer->getUsers(), [&](Operation *user) {
                  return group.contains(user);
                }))
              continue;
            group.insert(producer);
            changed = true;
          }
      }
      if (group.size() < 2)
        continue;
      SmallVector<Operation *> ordered(group.begin(), group.end());
      llvm::sort(ordered, [](Operation *a, Operation *b) {
        return a->isBeforeInBlock(b);
      });
      for (Operation *op : ordered)
        taken.insert(op);
      fuseGroup(ordered, root);
    }
  }
};
} // namespace
