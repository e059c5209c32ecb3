//===- Offload.cpp - ZeRO-Offload: states and parameters off the device --===//
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
// (ds-fuse-param-copy later makes that cast the update's own result.)
//
// %m and %v are arguments in the host space (ds.space), updated in place
// there. With device=nvme they are in the file space: each update's states
// are read into host buffers by transfers issued before the previous update
// (read-ahead, so two updates' states are in flight: double buffering) and
// written back right after it (write-behind); a gradient accumulator's host
// copy is made at the read-ahead too, so the host holds the gradients of
// the two updates in flight, not all of them.
//
// With ratio < 1 only the last parameters' states go (partial offload).
// With param-device (ZeRO-3's offload_param) the partitioned parameter
// shards live in the host or file space too; every device op that reads one
// gets a copy fetched ahead of it (at most param-buffer-count in flight;
// a file shard is read through a pool of param-buffer-count host buffers,
// reused in schedule order), and an updated shard goes back to its space:
//
//   %f = ds.transfer %w {from = host, to = device}
//   %g = shard.all_gather %f ...
//
// Which ops may run on the host, and what each op may read, is the
// dialect's rule (ds::verifyExecutionSpace, ds::getOperandSpace); the memory
// planner checks it and gives the host and file spaces' transient buffers
// their own arenas.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "dsopt/Transforms/HostMemory.h"
#include "dsopt/Transforms/ArgAttrs.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

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

/// A ds.transfer of `value` from space `from` to `to` at b's insertion point.
Value createTransfer(OpBuilder &b, Value value, ds::MemorySpace from,
                     ds::MemorySpace to) {
  MLIRContext *context = b.getContext();
  return ds::TransferOp::create(b, value.getLoc(), value,
                                ds::MemorySpaceAttr::get(context, from),
                                ds::MemorySpaceAttr::get(context, to));
}

/// The first op that reads `value` itself rather than through a view (an
/// op whose result aliases its operand), or null if none does: ds-plan-memory
/// keeps an asynchronous op's operands until then, so the host buffer a
/// fetch was read into is free only after the first such reader of its
/// device copy.
Operation *firstUseThroughViews(Value value) {
  Operation *first = nullptr;
  for (Operation *user : value.getUsers()) {
    Operation *at = user;
    auto kernel = dyn_cast<ds::KernelOpInterface>(user);
    std::optional<unsigned> aliased =
        kernel && !user->hasTrait<OpTrait::IsTerminator>()
            ? kernel.getAliasedOperand()
            : std::nullopt;
    if (aliased && user->getOperand(*aliased) == value)
      at = firstUseThroughViews(user->getResult(0));
    if (at && (!first || at->isBeforeInBlock(first)))
      first = at;
  }
  return first;
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
    return createTransfer(builder, value, from, to);
  }

  /// `value`'s copy in host memory, copied as soon as it is computed (one
  /// copy per value, however many updates read it). A function argument
  /// (a gradient accumulator) is there from the start; its copy goes at
  /// `readAhead` when the update reads its states ahead from the file, so
  /// that the host holds the gradients of the updates in flight only, not
  /// every gradient of the step at once.
  Value deviceToHost(Value value, Operation *readAhead) {
    auto [it, inserted] = hostCopies.try_emplace(value);
    if (!inserted)
      return it->second;
    OpBuilder::InsertionGuard guard(builder);
    if (Operation *def = value.getDefiningOp())
      builder.setInsertionPointAfter(def);
    else if (readAhead)
      builder.setInsertionPoint(readAhead);
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

    // Where the update's file operands are read ahead: before the previous
    // update, so that they are in flight while it runs.
    Operation *readAhead = nullptr;
    if (llvm::any_of(op->getOperands(), [](Value value) {
          return ds::getValueSpace(value) == ds::MemorySpace::file;
        }))
      readAhead = previous ? previous : op;
    for (OpOperand &operand : op->getOpOperands()) {
      Value value = operand.get();
      switch (ds::getValueSpace(value)) {
      case ds::MemorySpace::host:
        break;
      case ds::MemorySpace::device:
        operand.set(deviceToHost(value, readAhead));
        break;
      case ds::MemorySpace::file: {
        OpBuilder::InsertionGuard guard(builder);
        builder.setInsertionPoint(readAhead);
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

/// ZeRO-Infinity's parameter offload (offload_param, stage 3): parameter
/// shards live in the host or file space; device ops read fetched copies.
class ParamOffloader {
public:
  ParamOffloader(func::FuncOp function, int64_t bufferCount)
      : function(function), builder(function.getContext()),
        bufferCount(std::max<int64_t>(bufferCount, 1)) {}

  LogicalResult run() {
    Block &body = function.getBody().front();
    Operation *terminator = body.getTerminator();
    // Every read of an offloaded parameter by an op that runs on the
    // device gets its own fetched copy, freed after that op; a host op (an
    // offloaded update) reads the host shard itself (a file shard is read
    // ahead by FunctionOffloader).
    SmallVector<OpOperand *> reads;
    for (BlockArgument arg : body.getArguments())
      if (ds::getValueSpace(arg) != ds::MemorySpace::device)
        for (OpOperand &use : arg.getUses())
          if (use.getOwner() != terminator &&
              ds::getOperandSpace(use.getOwner()) == ds::MemorySpace::device)
            reads.push_back(&use);
    llvm::stable_sort(reads, [](OpOperand *a, OpOperand *b) {
      return a->getOwner() != b->getOwner() &&
             a->getOwner()->isBeforeInBlock(b->getOwner());
    });
    // Prefetch: fetch i is issued before the read of fetch
    // i - (bufferCount - 1), so at most bufferCount are in flight. A shard
    // in the file is read into a buffer of the host's pool (DeepSpeed's
    // buffer_count buffers), the k-th file read into buffer k mod
    // bufferCount: that buffer's previous read is over once the first op
    // that reads its device copy has run, so the read goes after that op
    // if the rule above would issue it sooner. With the file, the read is
    // what is issued ahead; its copy to the device follows right before
    // the reader (below).
    SmallVector<Value> fileCopies; // the device copy of each file fetch
    for (auto [i, read] : llvm::enumerate(reads)) {
      size_t ahead = std::min<size_t>(i, bufferCount - 1);
      builder.setInsertionPoint(reads[i - ahead]->getOwner());
      Value value = read->get();
      bool fromFile = ds::getValueSpace(value) == ds::MemorySpace::file;
      size_t k = fileCopies.size();
      if (fromFile) {
        if (k >= bufferCount) {
          Operation *previous =
              firstUseThroughViews(fileCopies[k - bufferCount]);
          if (!previous || previous == read->getOwner() ||
              !previous->isBeforeInBlock(read->getOwner()))
            return read->getOwner()->emitOpError()
                   << "reads more parameter shards from the file than "
                      "offload_param.buffer_count ("
                   << bufferCount
                   << "): each is read through a buffer of the pool, and "
                      "all of them are needed at once; raise buffer_count";
          if (!previous->isBeforeInBlock(&*builder.getInsertionPoint()))
            builder.setInsertionPointAfter(previous);
        }
        value = transfer(value, ds::MemorySpace::file, ds::MemorySpace::host);
        value.getDefiningOp()->setAttr(
            kParamBufferAttrName,
            builder.getI64IntegerAttr(static_cast<int64_t>(k % bufferCount)));
      }
      Value copy =
          transfer(value, ds::MemorySpace::host, ds::MemorySpace::device);
      read->set(copy);
      if (fromFile)
        fileCopies.push_back(copy);
    }
    // A file shard's copy to the device goes right before its reader,
    // after the reads issued there: the copy waits for its read, so issued
    // with it, it would wait for the disk at once and the read-ahead would
    // hide nothing.
    for (Value copy : fileCopies)
      copy.getDefiningOp()->moveBefore(*copy.getUsers().begin());
    // An updated parameter goes back to its argument's space.
    for (OpOperand &result : terminator->getOpOperands()) {
      auto updates = function.getResultAttrOfType<IntegerAttr>(
          result.getOperandNumber(), ds::DsDialect::kUpdatesAttrName);
      if (!updates)
        continue;
      ds::MemorySpace home =
          ds::getValueSpace(body.getArgument(updates.getInt()));
      if (home == ds::MemorySpace::device ||
          ds::getValueSpace(result.get()) == home)
        continue;
      Value value = result.get();
      // A host update's 16-bit copy already went to the device: return its
      // host value instead of copying it back.
      if (auto copied = value.getDefiningOp<ds::TransferOp>())
        if (copied.getFrom() == ds::MemorySpace::host &&
            copied.getTo() == ds::MemorySpace::device) {
          value = copied.getInput();
          if (copied->hasOneUse()) {
            result.set(value);
            copied->erase();
          }
        }
      if (Operation *def = value.getDefiningOp())
        builder.setInsertionPointAfter(def);
      else
        builder.setInsertionPoint(terminator);
      if (ds::getValueSpace(value) == ds::MemorySpace::device)
        value = transfer(value, ds::MemorySpace::device, ds::MemorySpace::host);
      if (home == ds::MemorySpace::file)
        value = transfer(value, ds::MemorySpace::host, ds::MemorySpace::file);
      result.set(value);
    }
    return success();
  }

private:
  Value transfer(Value value, ds::MemorySpace from, ds::MemorySpace to) {
    return createTransfer(builder, value, from, to);
  }

  func::FuncOp function;
  OpBuilder builder;
  size_t bufferCount;
};

/// "none", "cpu" or "nvme" as a space (the device for none).
std::optional<ds::MemorySpace> parseDevice(StringRef device) {
  if (device == "none")
    return ds::MemorySpace::device;
  if (device == "cpu")
    return ds::MemorySpace::host;
  if (device == "nvme")
    return ds::MemorySpace::file;
  return std::nullopt;
}

/// Whether parameter argument `i` of `function` is one ZeRO-3 partitions
/// (`zero`): a trained parameter of at least the persistence threshold's
/// elements. Smaller ones stay whole on the device, as in DeepSpeed.
bool isPartitionedParam(func::FuncOp function, unsigned i,
                        ds::ZeroAttr zero) {
  auto param = function.getArgAttrOfType<ds::ParamAttr>(
      i, ds::DsDialect::kParamAttrName);
  if (!param || !param.getTrainable())
    return false;
  auto whole = function.getArgAttrOfType<TypeAttr>(
      i, ds::DsDialect::kShardedAttrName);
  auto type = cast<ShapedType>(whole ? whole.getValue()
                                     : function.getArgumentTypes()[i]);
  return type.getNumElements() >= zero.getParamPersistenceThreshold();
}

/// The ONNX name of parameter argument `i` of `function`.
StringRef paramName(func::FuncOp function, unsigned i) {
  return function
      .getArgAttrOfType<ds::ParamAttr>(i, ds::DsDialect::kParamAttrName)
      .getName();
}

struct OffloadPass : dsopt::impl::DsOffloadBase<OffloadPass> {
  using DsOffloadBase::DsOffloadBase;

  /// The parameters whose states the pass offloads. Partial offload
  /// (ratio < 1) follows DeepSpeed's ZeRO-3, which keeps its first
  /// int((1 - ratio) * sub-groups) sub-groups on the device and offloads
  /// the rest; here a parameter's states are one group, in the order they
  /// first appear among the module's function arguments.
  llvm::StringSet<> offloadedParams(ModuleOp module) {
    llvm::SetVector<StringRef> params;
    for (auto function : module.getOps<func::FuncOp>())
      if (!function.isDeclaration())
        for (unsigned i = 0; i < function.getNumArguments(); ++i)
          if (isOffloadedState(function, i))
            params.insert(ds::getArgumentState(function, i).getParam());
    size_t onDevice = static_cast<size_t>((1.0 - ratio) * params.size());
    llvm::StringSet<> offloaded;
    for (StringRef param : params.getArrayRef().drop_front(onDevice))
      offloaded.insert(param);
    return offloaded;
  }

  /// The space of each parameter ZeRO-3 partitions, by name. With the
  /// file space (offload_param nvme), DeepSpeed's max_in_cpu: the first
  /// shards in parameter order whose elements add up to at most
  /// paramMaxInCpu stay in host memory; and its buffer_size: every shard
  /// left in the file is read through a buffer of paramBufferSize
  /// elements, so none may be larger.
  LogicalResult placeParams(ModuleOp module, ds::ZeroAttr zero,
                            ds::MemorySpace space,
                            llvm::StringMap<ds::MemorySpace> &spaces) {
    llvm::SetVector<StringRef> order;
    llvm::StringMap<int64_t> elements;
    for (auto function : module.getOps<func::FuncOp>())
      if (!function.isDeclaration())
        for (unsigned i = 0; i < function.getNumArguments(); ++i)
          if (isPartitionedParam(function, i, zero) &&
              order.insert(paramName(function, i)))
            elements[paramName(function, i)] =
                cast<ShapedType>(function.getArgumentTypes()[i])
                    .getNumElements();
    int64_t inCpu = 0;
    bool cpuFull = space != ds::MemorySpace::file;
    for (StringRef name : order) {
      int64_t shard = elements.lookup(name);
      if (!cpuFull && inCpu + shard <= paramMaxInCpu) {
        inCpu += shard;
        spaces[name] = ds::MemorySpace::host;
        continue;
      }
      // The first shard that does not fit ends the host's share, so the
      // split is a prefix of the parameter order.
      cpuFull = true;
      spaces[name] = space;
      if (space == ds::MemorySpace::file && shard > paramBufferSize)
        return module.emitError()
               << "ds-offload: parameter '" << name << "' has " << shard
               << " elements in a rank's shard, more than "
                  "offload_param.buffer_size ("
               << static_cast<int64_t>(paramBufferSize)
               << "): each shard in the file is read through one buffer "
                  "of buffer_size elements, which must hold the largest "
                  "(as DeepSpeed asserts); raise buffer_size to at least "
               << shard;
    }
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<ds::MemorySpace> parsed = parseDevice(device);
    if (!parsed) {
      module.emitError() << "ds-offload: device '" << device
                         << "' is not none, cpu or nvme";
      return signalPassFailure();
    }
    std::optional<ds::MemorySpace> paramSpace = parseDevice(paramDevice);
    if (!paramSpace) {
      module.emitError() << "ds-offload: param-device '" << paramDevice
                         << "' is not none, cpu or nvme";
      return signalPassFailure();
    }
    auto zero =
        module->getAttrOfType<ds::ZeroAttr>(ds::DsDialect::kZeroAttrName);
    if (*paramSpace != ds::MemorySpace::device &&
        (!zero || zero.getStage() != 3)) {
      module.emitError() << "ds-offload: param-device '" << paramDevice
                         << "' needs ZeRO stage 3 (run ds-zero{stage=3} "
                            "first): parameters are offloaded only when "
                            "they are partitioned";
      return signalPassFailure();
    }
    ds::MemorySpace space = *parsed;
    if (!(ratio >= 0.0 && ratio <= 1.0)) {
      module.emitError() << "ds-offload: ratio " << ratio
                         << " is not a fraction in [0, 1]";
      return signalPassFailure();
    }
    MLIRContext *context = &getContext();
    llvm::StringSet<> offloaded = offloadedParams(module);
    llvm::StringMap<ds::MemorySpace> paramSpaces;
    if (*paramSpace != ds::MemorySpace::device &&
        failed(placeParams(module, zero, *paramSpace, paramSpaces)))
      return signalPassFailure();
    for (auto function : module.getOps<func::FuncOp>()) {
      if (function.isDeclaration())
        continue;
      // Set at once (ArgAttrs.h).
      SmallVector<DictionaryAttr> argAttrs;
      function.getAllArgAttrs(argAttrs);
      bool anySpace = false;
      for (unsigned i = 0; i < function.getNumArguments(); ++i) {
        std::optional<ds::MemorySpace> argSpace;
        if (space != ds::MemorySpace::device && isOffloadedState(function, i) &&
            offloaded.contains(ds::getArgumentState(function, i).getParam()))
          argSpace = space;
        if (*paramSpace != ds::MemorySpace::device &&
            isPartitionedParam(function, i, zero))
          argSpace = paramSpaces.lookup(paramName(function, i));
        if (!argSpace)
          continue;
        setArgAttrIn(argAttrs, i, ds::DsDialect::kSpaceAttrName,
                     ds::MemorySpaceAttr::get(context, *argSpace));
        anySpace = true;
      }
      if (anySpace)
        function.setAllArgAttrs(argAttrs);
    }
    for (auto function : module.getOps<func::FuncOp>())
      if (!function.isDeclaration()) {
        FunctionOffloader(function).run();
        if (failed(ParamOffloader(function, paramBufferCount).run()))
          return signalPassFailure();
      }
    // The host arena holds only parameters (and their file buffers):
    // pinned as offload_param.pin_memory says. An offloaded optimizer's
    // states keep it pinned (on cuda its update's kernels read the arena
    // mapped into the GPU's address space).
    if (*paramSpace != ds::MemorySpace::device &&
        space == ds::MemorySpace::device && !paramPinMemory)
      module->setAttr(kHostPageableAttrName, UnitAttr::get(context));
  }
};

} // namespace
