//===- FuseParamCopy.cpp - the 16-bit parameter copy in the update's loop -===//
//
// With bf16 or fp16 mixed precision the optimizer updates the f32 master
// and the 16-bit working copy is its ds.cast (ds-precision), run right after
// the update on the host under ZeRO-Offload (ds-offload). That cast is a
// second pass over the shard: it reads the 4-byte master the update has just
// written. This pass gives the update the copy instead, as its `param_copy`
// result (ds.adamw, ds.sgd, ds.lion) or its n copies (ds.adamw_multi): the
// kernel writes each element's 16-bit value from the same loop, rounded as
// ds.cast rounds it, so the bits are those of the cast.
//
//   %p2, %m2, %v2 = ds.adamw %lr, %s, %p, %g, %m, %v : ...
//   %c = ds.cast %p2 : tensor<4xf32> to tensor<4xbf16>
// becomes
//   %p2, %m2, %v2, %c = ds.adamw %lr, %s, %p, %g, %m, %v {copy_type = bf16}
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace dsopt {
#define GEN_PASS_DEF_DSFUSEPARAMCOPY
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

/// The cast of `updated` (an f32 updated parameter of `update`) to bf16 or
/// f16 that the update can write itself: in the update's block after it,
/// run where the update runs (ds.space), with no other op reading `updated`
/// between the two. Null when there is none.
ds::CastOp fusableCast(Operation *update, Value updated) {
  if (!getElementTypeOrSelf(updated.getType()).isF32())
    return nullptr;
  Block *block = update->getBlock();
  ds::CastOp found;
  for (Operation *user : updated.getUsers()) {
    auto cast = dyn_cast<ds::CastOp>(user);
    Type to = cast ? getElementTypeOrSelf(cast.getType()) : Type();
    if (!cast || cast->getBlock() != block || !(to.isBF16() || to.isF16()) ||
        cast->getAttr(ds::DsDialect::kSpaceAttrName) !=
            update->getAttr(ds::DsDialect::kSpaceAttrName))
      continue;
    if (!found || cast->isBeforeInBlock(found))
      found = cast;
  }
  if (!found)
    return nullptr;
  for (Operation *user : updated.getUsers()) {
    if (user == found.getOperation())
      continue;
    Operation *at = block->findAncestorOpInBlock(*user);
    if (at && update->isBeforeInBlock(at) && at->isBeforeInBlock(found))
      return nullptr;
  }
  return found;
}

/// Recreates `op` with `copies` appended to its results (and `attrs` added),
/// and makes the casts' users use them.
void replaceWithCopies(Operation *op, ArrayRef<Operation *> casts,
                       ArrayRef<NamedAttribute> attrs) {
  OperationState state(op->getLoc(), op->getName());
  state.addOperands(op->getOperands());
  state.addAttributes(op->getAttrs());
  for (NamedAttribute attr : attrs)
    state.addAttribute(attr.getName(), attr.getValue());
  state.addTypes(op->getResultTypes());
  for (Operation *cast : casts)
    state.addTypes(cast->getResult(0).getType());
  OpBuilder b(op);
  Operation *fused = b.create(state);
  unsigned n = op->getNumResults();
  op->replaceAllUsesWith(fused->getResults().take_front(n));
  for (auto [i, cast] : llvm::enumerate(casts)) {
    cast->getResult(0).replaceAllUsesWith(fused->getResult(n + i));
    cast->erase();
  }
  op->erase();
}

struct DsFuseParamCopy
    : public dsopt::impl::DsFuseParamCopyBase<DsFuseParamCopy> {
  void runOnOperation() override {
    SmallVector<Operation *> updates;
    getOperation().walk([&](Operation *op) {
      if (isa<ds::AdamWOp, ds::SgdOp, ds::LionOp, ds::AdamWMultiOp>(op))
        updates.push_back(op);
    });
    for (Operation *op : updates) {
      if (auto multi = dyn_cast<ds::AdamWMultiOp>(op)) {
        // Every tensor's copy, or none: the kernel takes n copies or null.
        if (!multi.getParamCopies().empty())
          continue;
        SmallVector<Operation *> casts;
        for (Value updated : multi.getParamsOut())
          if (ds::CastOp cast = fusableCast(op, updated))
            casts.push_back(cast);
        if (casts.size() == multi.getCount())
          replaceWithCopies(op, casts, {});
        continue;
      }
      auto update = cast<ds::OptimizerOpInterface>(op);
      if (update.getUpdatedParamCopy())
        continue;
      ds::CastOp cast = fusableCast(op, update.getUpdatedParam());
      if (!cast)
        continue;
      Type low = getElementTypeOrSelf(cast.getType());
      replaceWithCopies(
          op, cast.getOperation(),
          NamedAttribute(StringAttr::get(op->getContext(), "copy_type"),
                         TypeAttr::get(low)));
    }
  }
};

} // namespace
