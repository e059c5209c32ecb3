//===- Offload.cpp - ZeRO-Offload: optimizer states and updates on the host ===//
//
// After ds-zero, every rank's optimizer states (its shards) move out of
// device memory and their updates run on the host:
//
//   %g  = ...                                   (device: the gradient shard)
//   %gh = ds.transfer %g {from = device, to = host}     right after %g
//   %p2, %m2, %v2 = ds.adamw %lrh, %sh, %ph, %gh, %m, %v {ds.space = host}
//   %pd = ds.transfer %p2 {from = host, to = device}    right after the update
//
// With 16-bit training %p2 is the fp32 master, a host state; its 16-bit
// working copy is cast on the host right after the update and that copy
// goes to the device (ds::isHostParameterCopy):
//
//   %c  = ds.cast %p2 {ds.space = host} : f32 to bf16
//   %cd = ds.transfer %c {from = host, to = device}
//
// %m and %v are arguments in the host space (ds.space), updated in place
// there. With device=nvme they are in the file space: each update's states
// are read into host buffers by transfers issued before the previous update
// (read-ahead, so two updates' states are in flight: double buffering) and
// written back right after it (write-behind).
//
// Which ops may run on the host, and what each op may read, is the
// dialect's rule (ds::verifyExecutionSpace, ds::getOperandSpace); the memory
// planner checks it and gives the host and file spaces' transient buffers
// their own arenas.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

namespace dsopt {
#define GEN_PASS_DEF_DSOFFLOAD
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

/// Whether argument `i` of `function` is state the pass offloads: every
/// persistent training state except the gradient accumulators, which
/// backward writes on the device.
bool isOffloadedState(func::FuncOp function, unsigned i) {
  ds::StateAttr state = ds::getArgumentState(function, i);
  return state && !state.isAccumulator();
}

class FunctionOffloader {
public:
  explicit FunctionOffloader(func::FuncOp function)
      : function(function), builder(function.getContext()) {}

  void run() {
    SmallVector<ds::OptimizerOpInterface> updates;
    function.walk([&](ds::OptimizerOpInterface update) {
      for (OpOperand &state : update.getStateOperands())
        if (ds::getValueSpace(state.get()) != ds::MemorySpace::device) {
          updates.push_back(update);
          return;
        }
    });
    Operation *previous = nullptr;
    for (ds::OptimizerOpInterface update : updates) {
      runOnHost(update, previous);
      previous = update;
    }
  }

private:
  Value transfer(Value value, ds::MemorySpace from, ds::MemorySpace to) {
    return ds::TransferOp::create(
        builder, value.getLoc(), value,
        ds::MemorySpaceAttr::get(function.getContext(), from),
        ds::MemorySpaceAttr::get(function.getContext(), to));
  }

  /// `value`'s copy in host memory, copied as soon as it is computed (one
  /// copy per value, however many updates read it).
  Value deviceToHost(Value value) {
    auto [it, inserted] = hostCopies.try_emplace(value);
    if (!inserted)
      return it->second;
    OpBuilder::InsertionGuard guard(builder);
    if (Operation *def = value.getDefiningOp())
      builder.setInsertionPointAfter(def);
    else
      builder.setInsertionPointToStart(&function.getBody().front());
    it->second =
        transfer(value, ds::MemorySpace::device, ds::MemorySpace::host);
    return it->second;
  }

  void runOnHost(ds::OptimizerOpInterface update, Operation *previous) {
    Operation *op = update;
    // What each result's value must be copied back to.
    SmallVector<ds::MemorySpace> resultHome(op->getNumResults(),
                                            ds::MemorySpace::host);
    resultHome[cast<OpResult>(update.getUpdatedParam()).getResultNumber()] =
        ds::getValueSpace(update.getParamOperand().get());
    for (auto [state, result] :
         llvm::zip(update.getStateOperands(), update.getUpdatedStates()))
      resultHome[cast<OpResult>(result).getResultNumber()] =
          ds::getValueSpace(state.get());

    for (OpOperand &operand : op->getOpOperands()) {
      Value value = operand.get();
      switch (ds::getValueSpace(value)) {
      case ds::MemorySpace::host:
        break;
      case ds::MemorySpace::device:
        operand.set(deviceToHost(value));
        break;
      case ds::MemorySpace::file: {
        // Read ahead: in flight while the previous update runs.
        OpBuilder::InsertionGuard guard(builder);
        builder.setInsertionPoint(previous ? previous : op);
        operand.set(
            transfer(value, ds::MemorySpace::file, ds::MemorySpace::host));
        break;
      }
      }
    }
    op->setAttr(ds::DsDialect::kSpaceAttrName,
                ds::MemorySpaceAttr::get(function.getContext(),
                                         ds::MemorySpace::host));

    // Mixed precision's working copy of the updated master is made on the
    // host, right after the update, and goes back to the device in 16 bits:
    // half the bytes of the master, and no rounding left on the device.
    for (Operation *user :
         llvm::make_early_inc_range(update.getUpdatedParam().getUsers())) {
      if (!ds::isHostParameterCopy(user))
        continue;
      user->moveAfter(op);
      user->setAttr(ds::DsDialect::kSpaceAttrName,
                    ds::MemorySpaceAttr::get(function.getContext(),
                                             ds::MemorySpace::host));
      builder.setInsertionPointAfter(user);
      Value copy = user->getResult(0);
      Value copied =
          transfer(copy, ds::MemorySpace::host, ds::MemorySpace::device);
      copy.replaceAllUsesExcept(copied, copied.getDefiningOp());
    }

    // Results go back where their old values live, right away: the
    // parameter before its next use, the states written behind.
    builder.setInsertionPointAfter(op);
    Operation *terminator = function.getBody().front().getTerminator();
    for (OpResult result : op->getResults()) {
      ds::MemorySpace home = resultHome[result.getResultNumber()];
      if (result.use_empty())
        continue;
      if (home == ds::MemorySpace::device) {
        Value copied = transfer(result, ds::MemorySpace::host, home);
        result.replaceAllUsesExcept(copied, copied.getDefiningOp());
        continue;
      }
      if (home == ds::MemorySpace::file) {
        // Written behind: only the function's return takes the file copy
        // (isWriteBehind); other readers use the host value below.
        Value copied = transfer(result, ds::MemorySpace::host, home);
        for (OpOperand &use : llvm::make_early_inc_range(result.getUses()))
          if (use.getOwner() == terminator)
            use.set(copied);
      }
      // A state updated in host memory that a device op reads (16-bit
      // training's master weights, cast to the working copy): that op gets
      // a device copy.
      Value onDevice;
      for (OpOperand &use : llvm::make_early_inc_range(result.getUses())) {
        Operation *user = use.getOwner();
        if (user == terminator ||
            ds::getOperandSpace(user) == ds::MemorySpace::host)
          continue;
        if (!onDevice)
          onDevice =
              transfer(result, ds::MemorySpace::host, ds::MemorySpace::device);
        use.set(onDevice);
      }
    }
  }

  func::FuncOp function;
  OpBuilder builder;
  llvm::DenseMap<Value, Value> hostCopies;
};

struct OffloadPass : dsopt::impl::DsOffloadBase<OffloadPass> {
  using DsOffloadBase::DsOffloadBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    ds::MemorySpace space;
    if (device == "cpu")
      space = ds::MemorySpace::host;
    else if (device == "nvme")
      space = ds::MemorySpace::file;
    else {
      module.emitError() << "ds-offload: device '" << device
                         << "' is not cpu or nvme";
      return signalPassFailure();
    }
    MLIRContext *context = &getContext();
    for (auto function : module.getOps<func::FuncOp>()) {
      if (function.isDeclaration())
        continue;
      for (unsigned i = 0; i < function.getNumArguments(); ++i)
        if (isOffloadedState(function, i))
          function.setArgAttr(i, ds::DsDialect::kSpaceAttrName,
                              ds::MemorySpaceAttr::get(context, space));
    }
    for (auto function : module.getOps<func::FuncOp>())
      if (!function.isDeclaration())
        FunctionOffloader(function).run();
  }
};

} // namespace
