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

/// The one operand of `op` with the shape of its result, if the others are
/// broadcast (smaller) or scalar constants: recomputing `op` then reads no
/// more of the full shape than reading its result would.
bool hasOneFullOperand(Operation *op) {
  auto shape = cast<ShapedType>(op->getResult(0).getType()).getShape();
  return llvm::count_if(op->getOperands(), [&](Value operand) {
           return cast<ShapedType>(operand.getType()).getShape() == shape;
         }) <= 1;
}

/// An elementwise value used by several elementwise ops of its shape is
/// computed again in each of their loops instead of being written once and
/// read by each (as XLA duplicates cheap producers into their consumers): in
/// a training step the backward reads the forward's intermediates (GELU's
/// bias add, its x / sqrt(2), its erf + 1), and keeping each of them
/// would split the forward chain into a pass per saved value. Only where
/// every user can take it into its loop, and only when it reads one tensor
/// of the full shape (the rest broadcast or constant): each loop then reads
/// that tensor where it would have read the value, no more bytes, and the
/// value's own pass is gone once every user has fused.
bool isRecomputable(Operation *producer) {
  auto shape =
      cast<ShapedType>(producer->getResult(0).getType()).getShape();
  if (!hasOneFullOperand(producer))
    return false;
  return llvm::all_of(producer->getUsers(), [&](Operation *user) {
    return isFusable(user) &&
           cast<ShapedType>(user->getResult(0).getType()).getShape() == shape;
  });
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
  // A recomputed member stays while users outside the group still read it.
  for (Operation *op : llvm::reverse(group))
    if (op->use_empty())
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
            // A value also used outside the group is recomputed inside it
            // only where that saves its own pass (isRecomputable).
            if (!llvm::all_of(producer->getUsers(),
                              [&](Operation *user) {
                                return group.contains(user);
                              }) &&
                !isRecomputable(producer))
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
      // A member still read outside the group (recomputed here), and the
      // members it reads, stay for their other users and can fuse again.
      llvm::SmallPtrSet<Operation *, 8> kept;
      for (Operation *op : llvm::reverse(ordered))
        if (op != root && llvm::any_of(op->getUsers(), [&](Operation *user) {
              return !group.contains(user) || kept.contains(user);
            }))
          kept.insert(op);
      for (Operation *op : ordered)
        if (!kept.contains(op))
          taken.insert(op);
      fuseGroup(ordered, root);
    }
  }
};
} // namespace
