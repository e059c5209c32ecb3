//===- GroupOptimizer.cpp - one kernel for a step's AdamW updates ---------===//
//
// ds.adamw updates one tensor; a training step has one per parameter, each a
// kernel call (a parallel region on the cpu, a launch on cuda) over a tensor
// that may be tiny (a bias, a norm's scale). Updates with the same inputs
// besides their tensors become one ds.adamw_multi, whose kernel balances the
// work over all the group's elements.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <map>
#include <vector>

namespace dsopt {
#define GEN_PASS_DEF_DSGROUPOPTIMIZER
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

/// What the updates of one group (within one block) share: every operand
/// but the tensors', every attribute, and the element types the kernel
/// takes one of.
struct GroupKey {
  Value lr, step, gradScale;
  DictionaryAttr attrs;
  Type paramElement, gradElement;

  static GroupKey of(ds::AdamWOp op) {
    return {op.getLr(),
            op.getStep(),
            op.getGradScale(),
            op->getAttrDictionary(),
            getElementTypeOrSelf(op.getParam().getType()),
            getElementTypeOrSelf(op.getGrad().getType())};
  }
  bool operator<(const GroupKey &other) const {
    auto less = [](auto a, auto b) {
      return a.getAsOpaquePointer() < b.getAsOpaquePointer();
    };
    if (lr != other.lr)
      return less(lr, other.lr);
    if (step != other.step)
      return less(step, other.step);
    if (gradScale != other.gradScale)
      return less(gradScale, other.gradScale);
    if (attrs != other.attrs)
      return less(attrs, other.attrs);
    if (paramElement != other.paramElement)
      return less(paramElement, other.paramElement);
    return less(gradElement, other.gradElement);
  }
};

/// Updates whose states stream from the file space one at a time (NVMe
/// offload's read-ahead and write-behind, each update's states in host
/// memory only around it) stay one per parameter: a group would hold every
/// state of the shard in host memory at once. So do device updates of
/// parameter shards fetched from the file (offload_param nvme): each shard
/// passes through one buffer of the host's pool, and a group would need a
/// buffer for every shard at once.
bool streamsStates(ds::AdamWOp op) {
  auto fromFile = [](Value value) {
    auto transfer = value.getDefiningOp<ds::TransferOp>();
    return transfer && transfer.getFrom() == ds::MemorySpace::file;
  };
  return llvm::any_of(op->getOperands(), [&](Value operand) {
    if (fromFile(operand))
      return true;
    auto transfer = operand.getDefiningOp<ds::TransferOp>();
    return transfer && fromFile(transfer.getInput());
  });
}

/// The updates of one group, and the other ops of the block that use their
/// results (directly or not), in block order: those between the group's
/// first and last update move after the group's op.
struct Group {
  SmallVector<ds::AdamWOp> updates;
  llvm::SmallPtrSet<Operation *, 16> dependents; // updates included
  SmallVector<Operation *> users;
};

/// Whether `op` (or an op nested in it) reads a value of `group`.
bool dependsOn(Operation *op, const Group &group) {
  bool found = false;
  op->walk([&](Operation *nested) {
    for (Value operand : nested->getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (group.dependents.contains(def))
          found = true;
    return found ? WalkResult::interrupt() : WalkResult::advance();
  });
  return found;
}

void replaceGroup(const Group &g) {
  ArrayRef<ds::AdamWOp> group = g.updates;
  ds::AdamWOp last = group.back();
  SmallVector<Value> tensors;
  SmallVector<Type> types;
  for (auto operand : {&ds::AdamWOp::getParam, &ds::AdamWOp::getGrad,
                       &ds::AdamWOp::getFirstMoment,
                       &ds::AdamWOp::getSecondMoment})
    for (ds::AdamWOp op : group)
      tensors.push_back((op.*operand)());
  if (Value scale = last.getGradScale())
    tensors.push_back(scale);
  for (int list = 0; list < 3; ++list)
    for (ds::AdamWOp op : group)
      types.push_back(op.getParam().getType());
  SmallVector<Location> locs;
  for (ds::AdamWOp op : group)
    locs.push_back(op.getLoc());
  OpBuilder b(last);
  auto multi = ds::AdamWMultiOp::create(
      b, FusedLoc::get(b.getContext(), locs), types, last.getLr(),
      last.getStep(), tensors, last.getBeta1Attr(), last.getBeta2Attr(),
      last.getEpsilonAttr(), last.getWeightDecayAttr(),
      last.getDecoupledAttr());
  // Discardable attributes (ds.space) travel along.
  for (NamedAttribute attr : last->getDiscardableAttrs())
    multi->setAttr(attr.getName(), attr.getValue());
  for (size_t i = 0; i < group.size(); ++i) {
    ds::AdamWOp op = group[i];
    op.getParamOut().replaceAllUsesWith(multi.getParamsOut()[i]);
    op.getFirstMomentOut().replaceAllUsesWith(multi.getFirstMomentsOut()[i]);
    op.getSecondMomentOut().replaceAllUsesWith(
        multi.getSecondMomentsOut()[i]);
  }
  for (ds::AdamWOp op : group)
    op->erase();
  // The uses that were between the updates follow the group's op, in their
  // order; what they read besides the group's results was computed before.
  Operation *after = multi;
  for (Operation *user : g.users)
    if (user->isBeforeInBlock(multi)) {
      user->moveAfter(after);
      after = user;
    }
}

struct DsGroupOptimizer
    : public dsopt::impl::DsGroupOptimizerBase<DsGroupOptimizer> {
  void runOnOperation() override {
    SmallVector<Block *> blocks;
    getOperation().walk([&](Block *block) { blocks.push_back(block); });
    for (Block *block : blocks)
      groupBlock(*block);
  }

  void groupBlock(Block &block) {
    // Open groups by key; a group closes when an update or another op would
    // need it both before and after itself.
    std::map<GroupKey, Group> open;
    std::vector<Group> closed;
    auto close = [&](std::map<GroupKey, Group>::iterator it) {
      closed.push_back(std::move(it->second));
      open.erase(it);
    };
    for (Operation &op : block) {
      SmallVector<std::map<GroupKey, Group>::iterator> reads;
      for (auto it = open.begin(); it != open.end(); ++it)
        if (dependsOn(&op, it->second))
          reads.push_back(it);
      auto update = dyn_cast<ds::AdamWOp>(&op);
      // An update that writes its 16-bit copy already (ds-fuse-param-copy)
      // stays as it is.
      if (update && !streamsStates(update) && !update.getParamCopy()) {
        // An update that reads a group's results runs after that group.
        for (auto it : reads)
          close(it);
        Group &group = open[GroupKey::of(update)];
        group.updates.push_back(update);
        group.dependents.insert(update);
        continue;
      }
      if (reads.size() == 1) {
        reads.front()->second.dependents.insert(&op);
        reads.front()->second.users.push_back(&op);
      } else {
        // Reading several groups: each must be complete before it.
        for (auto it : reads)
          close(it);
      }
    }
    for (auto &entry : open)
      closed.push_back(std::move(entry.second));
    for (const Group &group : closed)
      if (group.updates.size() > 1)
        replaceGroup(group);
  }
};

} // namespace
