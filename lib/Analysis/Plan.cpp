//===- Plan.cpp - plan.json and plan.txt of a planned program -------------===//

#include "dsopt/Analysis/Plan.h"

#include "dsrt/ring.h"

#include "dsopt/Pipeline/ScheduleAttrs.h"
#include "dsopt/Transforms/HostMemory.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Format.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>

using namespace mlir;

namespace dsopt {
namespace {

std::string dtypeName(Type element) {
  if (element.isF32()) return "f32";
  if (element.isF16()) return "f16";
  if (element.isBF16()) return "bf16";
  if (element.isSignlessInteger(64)) return "i64";
  if (element.isSignlessInteger(32)) return "i32";
  return "bool";
}

llvm::json::Array shapeOf(RankedTensorType type) {
  llvm::json::Array shape;
  shape.reserve(type.getRank());
  for (int64_t d : type.getShape())
    shape.push_back(d);
  return shape;
}

llvm::json::Object tensorInfo(StringRef name, Type type, int64_t offset) {
  auto tensor = cast<RankedTensorType>(type);
  // Copied: a state's or a pipeline value's name is composed here.
  return llvm::json::Object{{"name", name.str()},
                            {"dtype", dtypeName(tensor.getElementType())},
                            {"shape", shapeOf(tensor)},
                            {"bytes", ds::getByteSize(tensor).value_or(0)},
                            {"offset", offset}};
}

/// Each memory space's arena: its peak bytes and its persistent part; for
/// the host arena also whether it is pinned, and the parameter buffer pool
/// in it (offload_param nvme) when `module` has one.
llvm::json::Object memorySpaces(ds::MemoryPlanAttr plan, ModuleOp module) {
  llvm::json::Object spaces;
  for (ds::MemorySpace space : {ds::MemorySpace::device, ds::MemorySpace::host,
                                ds::MemorySpace::file})
    spaces[ds::stringifyMemorySpace(space)] = llvm::json::Object{
        {"peak_bytes", plan ? plan.getSpaceBytes(space) : 0},
        {"persistent_bytes", plan ? plan.getSpacePersistentBytes(space) : 0}};
  llvm::json::Object &host =
      *spaces.getObject(ds::stringifyMemorySpace(ds::MemorySpace::host));
  host["pinned"] = isHostArenaPinned(module);
  if (auto pool = module->getAttrOfType<DictionaryAttr>(
          kParamBufferPoolAttrName)) {
    llvm::json::Object entry;
    for (StringRef key : {"buffers", "buffer_bytes", "offset"})
      entry[key] = pool.getAs<IntegerAttr>(key).getInt();
    entry["bytes"] = pool.getAs<IntegerAttr>("buffers").getInt() *
                     pool.getAs<IntegerAttr>("buffer_bytes").getInt();
    host["param_buffers"] = std::move(entry);
  }
  return spaces;
}
} // namespace

FailureOr<PlanSummary> summarizePlan(func::FuncOp function) {
  auto memory = function->getAttrOfType<ds::MemoryPlanAttr>(
      ds::DsDialect::kMemoryPlanAttrName);
  if (!memory)
    return function.emitOpError() << "has no memory plan (run ds-plan-memory)";
  PlanSummary summary;
  summary.arenaBytes = memory.getArenaBytes();
  summary.persistentBytes = memory.getPersistentBytes();
  summary.peakLiveBytes = memory.getPeakLiveBytes();
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    auto type = cast<RankedTensorType>(function.getArgument(i).getType());
    int64_t bytes = ds::getByteSize(type).value_or(0);
    if (function.getArgAttr(i, ds::DsDialect::kParamAttrName))
      summary.paramBytes += bytes;
    else if (function.getArgAttr(i, ds::DsDialect::kInputAttrName))
      summary.inputBytes += bytes;
  }
  function.walk([&](ds::CostOpInterface op) {
    auto kernel = dyn_cast<ds::KernelOpInterface>(op.getOperation());
    if (!kernel || kernel.getAliasedOperand())
      return;
    ++summary.kernels;
    summary.flops += op.getFlops();
    summary.bytesAccessed += op.getBytesAccessed();
    summary.workspaceBytes =
        std::max(summary.workspaceBytes, kernel.getWorkspaceBytes());
  });
  return summary;
}

namespace {
/// The arguments, results and ops of one planned function.
/// (Arrays of JSON values are reserved before they are filled: a value's
/// move may throw, so a growing array copies every value it holds.)
struct FunctionPlan {
  llvm::json::Array inputs, params, states, outputs, updates, ops;
  /// Buffers freed before the first kernel (arguments nobody reads).
  llvm::json::Array freesAtStart;
};

FunctionPlan planOf(func::FuncOp function) {
  FunctionPlan plan;
  Block &block = function.getBody().front();
  for (llvm::json::Array *array : {&plan.inputs, &plan.params, &plan.states})
    array->reserve(function.getNumArguments());
  plan.ops.reserve(block.getOperations().size());
  plan.outputs.reserve(function.getNumResults());
  plan.updates.reserve(function.getNumResults());
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    Type type = function.getArgument(i).getType();
    int64_t offset = function
                         .getArgAttrOfType<IntegerAttr>(
                             i, ds::DsDialect::kOffsetAttrName)
                         .getInt();
    if (auto name = function.getArgAttrOfType<StringAttr>(
            i, ds::DsDialect::kInputAttrName)) {
      std::optional<ds::ValueRole> role = ds::getArgumentRole(function, i);
      plan.inputs.push_back(
          tensorInfo(role ? ds::getDisplayName(*role, name.getValue())
                          : name.getValue().str(),
                     type, offset));
      continue;
    }
    if (auto state = function.getArgAttrOfType<ds::StateAttr>(
            i, ds::DsDialect::kStateAttrName)) {
      plan.states.push_back(
          tensorInfo(ds::getDisplayName(state), type, offset));
      continue;
    }
    auto param = function.getArgAttrOfType<ds::ParamAttr>(
        i, ds::DsDialect::kParamAttrName);
    if (!param)
      continue;
    llvm::json::Object entry = tensorInfo(param.getName(), type, offset);
    entry["trainable"] = param.getTrainable();
    if (auto external = dyn_cast<ds::ExternalDataAttr>(param.getData())) {
      entry["file"] = external.getLocation();
      entry["file_offset"] = external.getOffset();
    } else {
      entry["file"] = nullptr; // stored in the program
    }
    // A tensor-parallel piece: which of the whole tensor's (file's) pieces.
    // A padded one (a vocabulary) adds the axis's model extent; its shape
    // and bytes are the padded piece's.
    if (auto split = function.getArgAttrOfType<ds::TensorSplitAttr>(
            i, ds::DsDialect::kTpSplitAttrName)) {
      llvm::json::Object tp{{"dim", split.getDim()},
                            {"blocks", split.getBlocks()},
                            {"ranks", split.getRanks()}};
      if (split.getWhole())
        tp["whole"] = split.getWhole();
      entry["tp_split"] = std::move(tp);
    }
    plan.params.push_back(std::move(entry));
  }

  llvm::DenseMap<Value, int64_t> offsetOf;
  for (BlockArgument arg : function.getArguments())
    offsetOf[arg] = function
                        .getArgAttrOfType<IntegerAttr>(
                            arg.getArgNumber(), ds::DsDialect::kOffsetAttrName)
                        .getInt();
  int64_t index = 0;
  for (Operation &op : block.without_terminator()) {
    auto offsets =
        op.getAttrOfType<DenseI64ArrayAttr>(ds::DsDialect::kBuffersAttrName);
    for (auto [i, result] : llvm::enumerate(op.getResults()))
      offsetOf[result] = offsets ? offsets[i] : -1;
    auto kernel = dyn_cast<ds::KernelOpInterface>(op);
    auto freed =
        op.getAttrOfType<DenseI64ArrayAttr>(ds::DsDialect::kFreesAttrName);
    if (!kernel || kernel.getAliasedOperand()) {
      // An op that runs nothing (a view, a constant) frees where it
      // stands: after the kernel before it, as the generated code does.
      if (freed)
        for (int64_t offset : freed.asArrayRef()) {
          if (plan.ops.empty())
            plan.freesAtStart.push_back(offset);
          else
            plan.ops.back().getAsObject()->getArray("frees")->push_back(offset);
        }
      continue;
    }
    llvm::json::Array results, frees;
    results.reserve(op.getNumResults());
    for (Value result : op.getResults())
      results.push_back(tensorInfo("", result.getType(), offsetOf[result]));
    if (freed)
      for (int64_t offset : freed.asArrayRef())
        frees.push_back(offset);
    auto cost = cast<ds::CostOpInterface>(op);
    llvm::json::Object entry{{"index", index++},
                             {"op", op.getName().getStringRef()},
                             {"node", ds::getNodeName(op.getLoc())},
                             {"flops", cost.getFlops()},
                             {"bytes_accessed", cost.getBytesAccessed()},
                             {"results", std::move(results)},
                             {"frees", std::move(frees)}};
    // The kernel's scratch memory, where it has some (its offset is in
    // `frees` too: it lives while the op runs).
    if (auto workspace = op.getAttrOfType<IntegerAttr>(
            ds::DsDialect::kWorkspaceAttrName))
      entry["workspace"] =
          llvm::json::Object{{"offset", workspace.getInt()},
                             {"bytes", kernel.getWorkspaceBytes()}};
    plan.ops.push_back(std::move(entry));
  }
  Operation *terminator = block.getTerminator();
  for (auto [i, result] : llvm::enumerate(terminator->getOperands())) {
    if (auto updates = function.getResultAttrOfType<IntegerAttr>(
            i, ds::DsDialect::kUpdatesAttrName)) {
      // Which persistent tensor the result overwrites, and whether it is
      // computed in place or copied there at the end.
      int64_t target = offsetOf.lookup(function.getArgument(updates.getInt()));
      plan.updates.push_back(llvm::json::Object{
          {"argument", updates.getInt()},
          {"offset", target},
          {"in_place", offsetOf.lookup(result) == target}});
      continue;
    }
    auto name = function.getResultAttrOfType<StringAttr>(
        i, ds::DsDialect::kOutputAttrName);
    std::optional<ds::ValueRole> role = ds::getResultRole(function, i);
    plan.outputs.push_back(
        tensorInfo(!name  ? std::string()
                   : role ? ds::getDisplayName(*role, name.getValue())
                          : name.getValue().str(),
                   result.getType(), offsetOf.lookup(result)));
  }
  return plan;
}

/// The two functions of a training program, or failure.
FailureOr<std::pair<func::FuncOp, func::FuncOp>> trainingFunctions(ModuleOp m) {
  auto micro = m.lookupSymbol<func::FuncOp>("micro_step");
  auto step = m.lookupSymbol<func::FuncOp>("optimizer_step");
  if (!micro || !step)
    return m.emitError() << "no training program (@micro_step and "
                            "@optimizer_step)";
  return std::make_pair(micro, step);
}

/// The data-parallel size of a training module (ds.zero's dp, else 1).
int64_t dataParallelSize(ModuleOp train) {
  if (auto zero =
          train->getAttrOfType<ds::ZeroAttr>(ds::DsDialect::kZeroAttrName))
    return zero.getDp();
  return 1;
}

/// The tensor-parallel size of a training module (its grid's tp axis, else
/// 1).
int64_t tensorParallelSize(ModuleOp train) {
  auto grid = train.lookupSymbol("grid");
  if (!grid)
    return 1;
  std::optional<int64_t> axis = ds::getDeviceGridAxis(grid, ds::GridAxis::tp);
  auto shape = grid->getAttrOfType<DenseI64ArrayAttr>("shape");
  if (!axis || !shape || *axis >= static_cast<int64_t>(shape.size()))
    return 1;
  return shape[*axis];
}

int64_t accumulationOf(ModuleOp train) {
  if (auto recipe = train->getAttrOfType<DictionaryAttr>(
          ds::DsDialect::kTrainAttrName))
    if (auto k = recipe.getAs<IntegerAttr>("accumulation"))
      return std::max<int64_t>(1, k.getInt());
  return 1;
}

/// The functions of a training step and how often each runs per optimizer
/// step: @micro_step k times, or a pipeline rank's stage parts once per
/// micro-batch; then @optimizer_step once.
SmallVector<std::pair<func::FuncOp, int64_t>> stepFunctions(ModuleOp train) {
  SmallVector<std::pair<func::FuncOp, int64_t>> functions;
  int64_t k = accumulationOf(train);
  if (train->hasAttr(ds::DsDialect::kPipelineRankAttrName)) {
    for (auto function : train.getOps<func::FuncOp>())
      if (function.getSymName() != "optimizer_step")
        functions.push_back({function, k});
  } else if (auto micro = train.lookupSymbol<func::FuncOp>("micro_step")) {
    functions.push_back({micro, k});
  }
  if (auto step = train.lookupSymbol<func::FuncOp>("optimizer_step"))
    functions.push_back({step, 1});
  return functions;
}

/// The pipeline buffers of a pipeline rank's program (0 for others).
int64_t pipelineBufferBytes(ModuleOp train) {
  if (auto rank = train->getAttrOfType<ds::PipelineRankAttr>(
          ds::DsDialect::kPipelineRankAttrName))
    return rank.getBuffersBytes().value_or(0);
  return 0;
}

struct Traffic {
  int64_t sent = 0, received = 0, calls = 0;
};

/// Payload bytes rank `rank` of `ranks` sends and receives in one collective,
/// by libdsrt's own formulas (dsrt/ring.h, as dsrt::comm_volume): `total`
/// elements of the all-reduced tensor, the gathered result or the scattered
/// input.
Traffic collectiveTraffic(StringRef kind, Type element, int64_t total,
                          int64_t ranks, int64_t rank) {
  Traffic t;
  t.calls = 1;
  if (ranks == 1)
    return t;
  int64_t e = ds::getElementByteSize(element);
  dsrt::ring::Bytes bytes;
  if (kind == "all_reduce")
    bytes = dsrt::ring::all_reduce(e, total, ranks, rank);
  else if (kind == "reduce_scatter")
    bytes = dsrt::ring::reduce_scatter(e, total, ranks, rank);
  else if (kind == "all_gather")
    bytes = dsrt::ring::all_gather(e, total, ranks, rank);
  t.sent = bytes.sent;
  t.received = bytes.received;
  return t;
}

/// The plan's traffic keys (ds::AsyncKind's names), in the plan's order.
constexpr StringLiteral kCollectiveKinds[] = {"all_reduce", "all_gather",
                                              "reduce_scatter"};

/// What every rank of a training program holds and moves per optimizer
/// step: the memory is the same on every rank; the ring's chunks, and so
/// the bytes, may differ by rank.
class RankNumbers {
public:
  explicit RankNumbers(ModuleOp train) {
    auto memory = train->getAttrOfType<ds::MemoryPlanAttr>(
        ds::DsDialect::kMemoryPlanAttrName);
    ranks = dataParallelSize(train);
    // The grid's axis sizes, for collectives along an axis other than dp.
    SmallVector<int64_t> axisSizes;
    if (auto grid = train.lookupSymbol("grid"))
      if (auto shape = grid->getAttrOfType<DenseI64ArrayAttr>("shape"))
        axisSizes.assign(shape.asArrayRef().begin(), shape.asArrayRef().end());
    if (auto grid = train.lookupSymbol("grid")) {
      if (std::optional<int64_t> dp = ds::getDeviceGridAxis(grid, ds::GridAxis::dp))
        dpAxis = *dp;
      if (std::optional<int64_t> tp = ds::getDeviceGridAxis(grid, ds::GridAxis::tp))
        tpAxis = *tp;
    }
    SmallVector<std::pair<func::FuncOp, int64_t>> functions =
        stepFunctions(train);
    llvm::StringSet<> seen;
    for (auto [function, times] : functions)
      for (unsigned i = 0; i < function.getNumArguments(); ++i) {
        int64_t bytes =
            ds::getByteSize(cast<ShapedType>(function.getArgumentTypes()[i]))
                .value_or(0);
        auto type = cast<RankedTensorType>(function.getArgumentTypes()[i]);
        if (auto param = function.getArgAttrOfType<ds::ParamAttr>(
                i, ds::DsDialect::kParamAttrName)) {
          if (seen.insert(("param:" + param.getName()).str()).second) {
            paramBytes += bytes;
            // A ZeRO-3 shard's whole tensor is its ds.sharded type.
            auto whole = function.getArgAttrOfType<TypeAttr>(
                i, ds::DsDialect::kShardedAttrName);
            Saved value{type.getNumElements(),
                        whole ? cast<ShapedType>(whole.getValue())
                                    .getNumElements()
                              : type.getNumElements(),
                        type.getElementTypeBitWidth() / 8, bool(whole),
                        function.getArgAttr(
                            i, ds::DsDialect::kTpSplitAttrName) != nullptr};
            savedParams[param.getName()] = value;
            saved.push_back(value);
          }
        } else if (auto state = function.getArgAttrOfType<ds::StateAttr>(
                       i, ds::DsDialect::kStateAttrName)) {
          if (seen.insert("state:" + ds::getDisplayName(state)).second) {
            (state.isAccumulator() ? gradBytes : optimizerBytes) += bytes;
            // Accumulators are not saved: no gradient is pending between
            // steps.
            if (!state.isAccumulator())
              savedStates.push_back(
                  {state.getParam().str(),
                   Saved{type.getNumElements(), 0,
                         type.getElementTypeBitWidth() / 8, false, false}});
          }
        }
      }
    // A state is whole in its parameter's size, else a 1-D shard of
    // ceil(n / dp) elements of it (ZeRO stages 1-3); it is a tp piece
    // where its parameter is.
    for (auto &[param, state] : savedStates) {
      Saved of = savedParams.lookup(param);
      state.whole = of.whole;
      state.tpPiece = of.tpPiece;
      state.sharded = ranks > 1 && state.count != of.whole &&
                      state.count == (of.whole + ranks - 1) / ranks;
      if (!state.sharded)
        state.whole = state.count;
      saved.push_back(state);
    }
    for (auto [function, times] : functions)
      for (Operation &op : function.getBody().front()) {
        auto async = dyn_cast<ds::AsyncOpInterface>(&op);
        if (!async)
          continue;
        RankedTensorType moved = async.getMovedType();
        if (async.getAsyncKind() == ds::AsyncKind::transfer) {
          // A copy between this rank's memory spaces (ds-offload).
          std::string direction =
              (ds::stringifyMemorySpace(ds::getOperandSpace(&op)) + "_to_" +
               ds::stringifyMemorySpace(ds::getResultSpace(&op)))
                  .str();
          spaceTransfers[direction] += times * async.getBytesMoved();
          continue;
        }
        int64_t axis = async.getAsyncGridAxis();
        collectives.push_back(
            {ds::stringifyAsyncKind(async.getAsyncKind()),
             moved.getElementType(), moved.getNumElements(), times, axis,
             axis < static_cast<int64_t>(axisSizes.size()) ? axisSizes[axis]
                                                           : ranks});
      }
    auto transient = [&](func::FuncOp function) {
      auto plan = function->getAttrOfType<ds::MemoryPlanAttr>(
          ds::DsDialect::kMemoryPlanAttrName);
      return plan.getArenaBytes() - memory.getPersistentBytes();
    };
    // Activations: the largest forward/backward plan, and on a pipeline
    // rank the buffers that keep micro-batches between its actions.
    for (auto [function, times] : ArrayRef(functions).drop_back())
      activationBytes = std::max(activationBytes, transient(function));
    activationBytes += pipelineBufferBytes(train);
    workspaceBytes = transient(functions.back().first);
    persistentBytes = memory.getPersistentBytes();
    arenaBytes = memory.getArenaBytes();
    plan = memory;
    module = train;
    countTransfers(train);
  }

  /// A pipeline rank's sends and receives per step: each transfer action
  /// moves the tensors its stage's function sends or receives, one call
  /// each, and each accumulator shared with n - 1 other ranks is sent to
  /// and received from each of them.
  void countTransfers(ModuleOp train) {
    auto rank = train->getAttrOfType<ds::PipelineRankAttr>(
        ds::DsDialect::kPipelineRankAttrName);
    if (!rank)
      return;
    pipelined = true;
    int64_t p = rank.getStages();
    int64_t self = rank.getRank();
    // The bytes and count of a function's arguments or results of role
    // `role`...
    auto tensors = [&](FlatSymbolRefAttr name, bool results,
                       ds::ValueRole role) {
      Traffic t;
      auto function =
          name ? train.lookupSymbol<func::FuncOp>(name.getAttr()) : nullptr;
      if (!function)
        return t;
      unsigned count =
          results ? function.getNumResults() : function.getNumArguments();
      for (unsigned i = 0; i < count; ++i) {
        if ((results ? ds::getResultRole(function, i)
                     : ds::getArgumentRole(function, i)) != role)
          continue;
        Type type = results ? function.getResultTypes()[i]
                            : function.getArgumentTypes()[i];
        t.sent += ds::getByteSize(cast<ShapedType>(type)).value_or(0);
        t.calls += 1;
      }
      return t;
    };
    for (ds::PipelineActionAttr action : rank.getActions()) {
      ds::PipelineRankStageAttr stage =
          rank.lookupStage(action.getChunk() * p + self);
      FlatSymbolRefAttr forward = stage ? stage.getForward() : nullptr;
      FlatSymbolRefAttr backward = stage ? stage.getInputBackward() : nullptr;
      Traffic moved;
      bool send = false;
      switch (action.getKind()) {
      case ds::PipelineActionKind::send_activation:
        moved = tensors(forward, true, ds::ValueRole::send);
        send = true;
        break;
      case ds::PipelineActionKind::recv_activation:
        moved = tensors(forward, false, ds::ValueRole::recv);
        break;
      case ds::PipelineActionKind::send_gradient:
        moved = tensors(backward, true, ds::ValueRole::send);
        send = true;
        break;
      case ds::PipelineActionKind::recv_gradient:
        moved = tensors(backward, false, ds::ValueRole::recv);
        break;
      default:
        continue;
      }
      Traffic &sum = send ? sends : receives;
      sum.sent += moved.sent;
      sum.calls += moved.calls;
    }
    auto step = train.lookupSymbol<func::FuncOp>("optimizer_step");
    for (ds::PipelineRankTiedAttr tied : rank.getTied()) {
      ds::StateAttr state = tied.getState();
      int64_t others = tied.getRanks().size() - 1;
      for (unsigned i = 0; step && i < step.getNumArguments(); ++i)
        if (step.getArgAttr(i, ds::DsDialect::kStateAttrName) == state) {
          int64_t bytes =
              ds::getByteSize(cast<ShapedType>(step.getArgumentTypes()[i]))
                  .value_or(0);
          for (Traffic *t : {&sends, &receives}) {
            t->sent += others * bytes;
            t->calls += others;
          }
        }
    }
  }

  int64_t world() const { return ranks; }

  /// The bytes a checkpoint save copies into the host staging buffer on the
  /// rank at dp coordinate `rank` and tp coordinate `tpRank`: what its
  /// shard file holds (docs/checkpoints.md). Sharded values' shards without
  /// their padding, whole values on dp coordinate 0, tp pieces on every tp
  /// coordinate and replicated values on tp coordinate 0; the runtime's
  /// checkpoint_snapshot_bytes, which measures its buffer against this.
  int64_t checkpointStagingBytes(int64_t rank, int64_t tpRank) const {
    int64_t total = 0;
    for (const Saved &value : saved) {
      if ((!value.sharded && rank != 0) || (!value.tpPiece && tpRank != 0))
        continue;
      int64_t begin = value.sharded ? rank * value.count : 0;
      int64_t count = std::min(value.count, value.whole - begin);
      if (count > 0)
        total += count * value.elementBytes;
    }
    return total;
  }

  /// The numbers of the rank whose dp coordinate is `rank`, whose tp
  /// coordinate is `tpRank` (and, for collectives along another axis, whose
  /// coordinate there is `other`).
  llvm::json::Object of(int64_t rank, int64_t other = 0,
                        int64_t tpRank = 0) const {
    Traffic traffic[std::size(kCollectiveKinds)];
    Traffic tpTraffic[std::size(kCollectiveKinds)];
    for (const Collective &c : collectives) {
      int64_t coordinate =
          c.axis == dpAxis ? rank : (c.axis == tpAxis ? tpRank : other);
      Traffic one = collectiveTraffic(c.kind, c.element, c.total, c.ranks,
                                      coordinate);
      size_t kind = llvm::find(kCollectiveKinds, c.kind) -
                    std::begin(kCollectiveKinds);
      for (Traffic *sum : {&traffic[kind], &tpTraffic[kind]}) {
        if (sum == &tpTraffic[kind] && c.axis != tpAxis)
          continue;
        sum->sent += c.times * one.sent;
        sum->received += c.times * one.received;
        sum->calls += c.times * one.calls;
      }
    }
    auto kinds = [](ArrayRef<Traffic> traffic) {
      llvm::json::Object bytes;
      for (auto [kind, t] : llvm::zip(kCollectiveKinds, traffic))
        bytes[kind] = llvm::json::Object{
            {"sent", t.sent}, {"received", t.received}, {"calls", t.calls}};
      return bytes;
    };
    llvm::json::Object bytes = kinds(traffic);
    // Pipeline transfers, counted per tensor as the runtime's send and
    // recv (`sent` holds the bytes either way).
    if (pipelined) {
      bytes["send"] = llvm::json::Object{
          {"sent", sends.sent}, {"received", 0}, {"calls", sends.calls}};
      bytes["recv"] = llvm::json::Object{{"sent", 0},
                                         {"received", receives.sent},
                                         {"calls", receives.calls}};
    }
    llvm::json::Object numbers{{"rank", rank},
                              {"param_bytes", paramBytes},
                              {"grad_bytes", gradBytes},
                              {"optimizer_bytes", optimizerBytes},
                              {"activation_bytes", activationBytes},
                              {"workspace_bytes", workspaceBytes},
                              {"persistent_bytes", persistentBytes},
                              {"arena_peak_bytes", arenaBytes},
                              {"memory_spaces", memorySpaces(plan, module)},
                              {"collective_bytes", std::move(bytes)}};
    // Host memory outside the arenas: a checkpoint save's staging buffer.
    (*numbers.getObject("memory_spaces")->getObject("host"))
        ["checkpoint_staging_bytes"] = checkpointStagingBytes(rank, tpRank);
    if (!spaceTransfers.empty())
      numbers["offload"] = offloadNumbers();
    // The part of the traffic that runs along tp (included above).
    if (tpAxis >= 0)
      numbers["tp_collective_bytes"] = kinds(tpTraffic);
    return numbers;
  }

  /// Bytes moved per step between this rank's memory spaces, and the time
  /// they take at the stated bandwidths, one copy after the other (the
  /// offload pass overlaps them with compute; this is their sum).
  llvm::json::Object offloadNumbers() const {
    llvm::json::Object bytes;
    double seconds = 0;
    for (const auto &entry : spaceTransfers) {
      bytes[entry.getKey().str()] = entry.getValue();
      bool file = entry.getKey().contains("file");
      seconds += static_cast<double>(entry.getValue()) /
                 (file ? kFileBandwidth : kHostDeviceBandwidth);
    }
    return llvm::json::Object{
        {"bytes_per_step", std::move(bytes)},
        {"bandwidth_bytes_per_s",
         llvm::json::Object{{"host_device", kHostDeviceBandwidth},
                            {"file_host", kFileBandwidth}}},
        {"transfer_seconds_per_step", seconds}};
  }

private:
  struct Collective {
    StringRef kind;
    Type element;
    int64_t total, times, axis, ranks;
  };
  int64_t ranks = 1, dpAxis = 0, tpAxis = -1;
  bool pipelined = false;
  /// A value a checkpoint saves: `count` elements on a rank (a shard's s),
  /// of `whole` (the tensor, or the tp piece, it is a shard of).
  struct Saved {
    int64_t count = 0, whole = 0, elementBytes = 0;
    bool sharded = false, tpPiece = false;
  };
  std::vector<Saved> saved;
  llvm::StringMap<Saved> savedParams;
  std::vector<std::pair<std::string, Saved>> savedStates;
  Traffic sends, receives;
  int64_t paramBytes = 0, gradBytes = 0, optimizerBytes = 0;
  int64_t activationBytes = 0, workspaceBytes = 0, persistentBytes = 0,
          arenaBytes = 0;
  ds::MemoryPlanAttr plan;
  ModuleOp module;
  std::vector<Collective> collectives;
  /// ds.transfer bytes per step by direction ("device_to_host", ...).
  llvm::StringMap<int64_t> spaceTransfers;
  /// The stated bandwidths of the plan's transfer times: PCIe 4.0 x16
  /// (about 25 GB/s each way) and one NVMe SSD (about 3 GB/s).
  static constexpr double kHostDeviceBandwidth = 25e9, kFileBandwidth = 3e9;
};

/// The pipeline of a training module (ds-pipeline's record), simulated.
struct PipelineFacts {
  ds::PipelineAttr attr;
  pipeline::Schedule schedule;
  pipeline::Costs costs, uniform;
  pipeline::Simulation simulation, uniformSimulation;
  std::optional<double> textbook;
};

/// Costs in MFLOP: the simulator's and the trace's time unit.
constexpr double kFlopsPerUnit = 1e6;

FailureOr<PipelineFacts> pipelineOf(ModuleOp train) {
  auto attr =
      train->getAttrOfType<ds::PipelineAttr>(ds::DsDialect::kPipelineAttrName);
  if (!attr)
    return failure();
  PipelineFacts facts;
  facts.attr = attr;
  pipeline::ScheduleKind kind = pipeline::fromAttr(attr.getSchedule());
  int p = attr.getStages(), m = attr.getMicrobatches(), v = attr.getChunks();
  llvm::Expected<pipeline::Schedule> schedule =
      pipeline::buildSchedule(kind, p, m, v);
  if (!schedule)
    return train.emitError() << "pipeline schedule: "
                             << llvm::toString(schedule.takeError());
  facts.schedule = std::move(*schedule);
  ArrayRef<ds::PipelineStageAttr> stages = attr.getVirtualStages();
  double f = 0, b = 0, w = 0;
  for (ds::PipelineStageAttr stage : stages) {
    facts.costs.forward.push_back(stage.getFlopsForward() / kFlopsPerUnit);
    facts.costs.backward.push_back(stage.getFlopsBackward() / kFlopsPerUnit);
    facts.costs.weight.push_back(stage.getFlopsWeight() / kFlopsPerUnit);
    f += facts.costs.forward.back();
    b += facts.costs.backward.back();
    w += facts.costs.weight.back();
  }
  double count = stages.size();
  // The same work spread evenly: what the textbook formulas assume.
  facts.uniform = pipeline::Costs::uniform(stages.size(), f / count,
                                           b / count, w / count);
  for (auto [costs, out] :
       {std::pair{&facts.costs, &facts.simulation},
        {&facts.uniform, &facts.uniformSimulation}}) {
    // Rendezvous groups (the runtime's send_recv, NCCL's grouped calls) on
    // a transfer stream of each rank's own, as the runtime's pipeline
    // executor runs them.
    llvm::Expected<pipeline::Simulation> simulation = pipeline::simulate(
        facts.schedule, *costs, pipeline::SendSemantics::Streamed);
    if (!simulation)
      return train.emitError() << "pipeline simulation: "
                               << llvm::toString(simulation.takeError());
    *out = std::move(*simulation);
  }
  facts.textbook = pipeline::textbookBubbleFraction(
      kind, p, m, v, f / count, b / count, w / count);
  return facts;
}

/// plan.json's `pipeline` section.
llvm::json::Object pipelineJson(const PipelineFacts &facts) {
  ds::PipelineAttr attr = facts.attr;
  int64_t p = attr.getStages();
  llvm::json::Array stages;
  for (auto [s, stage] : llvm::enumerate(attr.getVirtualStages())) {
    int64_t inFlight = facts.simulation.peakInFlight[s];
    int64_t activation = stage.getActivationBytes();
    stages.push_back(llvm::json::Object{
        {"stage", static_cast<int64_t>(s)},
        {"rank", static_cast<int64_t>(s) % p},
        {"chunk", static_cast<int64_t>(s) / p},
        {"forward_ops", stage.getForwardOps()},
        {"flops_forward", stage.getFlopsForward()},
        {"flops_backward", stage.getFlopsBackward()},
        {"flops_weight", stage.getFlopsWeight()},
        {"param_bytes", stage.getParamBytes()},
        {"activation_bytes", activation},
        {"send_bytes", stage.getSendBytes()},
        {"peak_in_flight", inFlight},
        {"in_flight_activation_bytes", inFlight * activation}});
  }
  llvm::json::Array transfers;
  for (ds::PipelineTransferAttr t : attr.getTransfers())
    transfers.push_back(llvm::json::Object{
        {"from", t.getFrom()},
        {"to", t.getTo()},
        {"kind", ds::stringifyEnum(t.getKind())},
        {"bytes", t.getBytes()},
        {"values", t.getValues()}});
  llvm::json::Array tied;
  for (ds::PipelineTiedAttr t : attr.getTied()) {
    llvm::json::Array list;
    for (int64_t s : t.getStages())
      list.push_back(s);
    tied.push_back(llvm::json::Object{{"name", t.getName()},
                                      {"stages", std::move(list)}});
  }
  llvm::json::Array ops;
  ArrayAttr names = attr.getOpNames();
  ArrayAttr nodes = attr.getOpNodes();
  ArrayRef<int64_t> flops = attr.getOpFlops().asArrayRef();
  ArrayRef<int64_t> bytes = attr.getOpBytes().asArrayRef();
  ArrayRef<int64_t> opStages = attr.getOpStages().asArrayRef();
  ArrayRef<bool> cuts = attr.getOpCutBefore().asArrayRef();
  for (size_t i = 0; i < flops.size(); ++i)
    ops.push_back(llvm::json::Object{
        {"index", static_cast<int64_t>(i)},
        {"op", cast<StringAttr>(names[i]).getValue()},
        {"node", cast<StringAttr>(nodes[i]).getValue()},
        {"flops", flops[i]},
        {"bytes_accessed", bytes[i]},
        {"stage", opStages[i]},
        {"cut_before", cuts[i]}});
  llvm::json::Array perRank;
  for (int r : facts.simulation.peakInFlightPerRank)
    perRank.push_back(r);
  return llvm::json::Object{
      {"schedule", ds::stringifyEnum(attr.getSchedule())},
      {"stages", p},
      {"microbatches", attr.getMicrobatches()},
      {"chunks", attr.getChunks()},
      {"virtual_stages", static_cast<int64_t>(facts.costs.forward.size())},
      {"balance", ds::stringifyEnum(attr.getBalance())},
      {"makespan_mflop", facts.simulation.makespan},
      {"bubble_fraction", facts.simulation.bubbleFraction},
      {"uniform_bubble_fraction", facts.uniformSimulation.bubbleFraction},
      {"textbook_bubble_fraction",
       facts.textbook ? llvm::json::Value(*facts.textbook)
                      : llvm::json::Value(nullptr)},
      {"peak_in_flight_per_rank", std::move(perRank)},
      {"per_stage", std::move(stages)},
      {"transfers", std::move(transfers)},
      {"tied_parameters", std::move(tied)},
      {"forward_ops", std::move(ops)}};
}

int64_t pipelineStagesOf(ModuleOp train) {
  if (auto attr = train->getAttrOfType<ds::PipelineAttr>(
          ds::DsDialect::kPipelineAttrName))
    return attr.getStages();
  return 1;
}

/// The host synchronizations of one optimizer step of a cuda training
/// program's rank (docs/runtime.md, "Host synchronizations"): the points
/// where the runner's host waits for the device, each with the CUDA call
/// that waits, the function it follows, what the host needs and how many
/// per step. Everything else in a step is ordered on the device (events,
/// stream waits), so these are all of them; the fake CUDA runtime's counts
/// must equal them (test/oracles/check_fake_cuda.py).
llvm::json::Object hostSyncs(ModuleOp train) {
  llvm::json::Array points;
  int64_t total = 0;
  auto point = [&](StringRef function, StringRef call, StringRef what,
                   int64_t count) {
    if (count <= 0)
      return;
    total += count;
    points.push_back(llvm::json::Object{{"function", function},
                                        {"call", call},
                                        {"what", what},
                                        {"count", count}});
  };
  int64_t k = accumulationOf(train);
  if (auto rank = train->getAttrOfType<ds::PipelineRankAttr>(
          ds::DsDialect::kPipelineRankAttrName)) {
    // The rank of the last virtual stage reads each micro-batch's loss.
    int64_t last = rank.getStages() * rank.getChunks() - 1;
    for (ds::PipelineRankStageAttr stage : rank.getVirtualStages())
      if (stage.getStage() == last && stage.getForward())
        point(stage.getForward().getValue(), "cudaEventSynchronize",
              "loss readback: each micro-batch's loss, read by the host for "
              "the log and the step's verdict",
              rank.getMicrobatches());
  } else {
    point("micro_step", "cudaEventSynchronize",
          "loss readback: each micro-batch's loss, read by the host for the "
          "log and the step's verdict",
          k);
  }
  point("step", "cudaStreamSynchronize",
        "non-finite check: the host learns whether a gradient holds a NaN "
        "or an infinity before every rank agrees to update",
        1);
  point("optimizer_step", "cudaEventSynchronize",
        "gradient norm readback: read by the host for the log; the step's "
        "end",
        1);
  // A bucketed collective unpacks its result on a stream of its own once
  // the collective is done; the transport's thread waits for the copies
  // before it completes the collective's request, which the readers of the
  // outputs wait for.
  for (auto [function, times] : stepFunctions(train)) {
    int64_t buckets = 0;
    function.walk([&](Operation *op) {
      if (isa<ds::AllReduceBucketOp, ds::ReduceScatterBucketOp,
              ds::AllGatherBucketOp>(op))
        ++buckets;
    });
    point(function.getSymName(), "cudaStreamSynchronize",
          "bucket unpack: the transport's thread waits for a bucketed "
          "collective's unpacking copies before it completes the request",
          buckets * times);
  }
  // A copy between the host and file spaces runs on the file I/O thread,
  // which first waits for the device's work queued before it on the
  // stream, so that it reads or writes the bytes the device left there.
  for (auto [function, times] : stepFunctions(train)) {
    int64_t files = 0;
    function.walk([&](ds::TransferOp transfer) {
      if (transfer.getFrom() == ds::MemorySpace::file ||
          transfer.getTo() == ds::MemorySpace::file)
        ++files;
    });
    point(function.getSymName(), "cudaEventSynchronize",
          "file I/O: the I/O thread waits for the device's work queued "
          "before a read or write of the file space",
          files * times);
  }
  // A host arena of ordinary (pageable) host memory: each copy to or from
  // it is synchronous, through the runtime's pinned staging, one host wait
  // per staging chunk.
  if (!isHostArenaPinned(train)) {
    constexpr int64_t kStagingChunkBytes = int64_t(4) << 20;  // staging.h
    for (auto [function, times] : stepFunctions(train)) {
      int64_t chunks = 0;
      function.walk([&](ds::TransferOp transfer) {
        // Host and device; a file read or write is the I/O thread's.
        if (transfer.getFrom() == ds::MemorySpace::file ||
            transfer.getTo() == ds::MemorySpace::file ||
            (transfer.getFrom() != ds::MemorySpace::host &&
             transfer.getTo() != ds::MemorySpace::host))
          return;
        int64_t bytes =
            ds::getByteSize(cast<ShapedType>(transfer.getInput().getType()))
                .value_or(0);
        chunks += (bytes + kStagingChunkBytes - 1) / kStagingChunkBytes;
      });
      point(function.getSymName(), "cudaEventSynchronize",
            "pageable host copy: a copy to or from the host arena of "
            "ordinary memory (offload_param.pin_memory false) waits for "
            "each staging chunk",
            chunks * times);
    }
  }
  return llvm::json::Object{{"per_step", total},
                            {"points", std::move(points)}};
}

llvm::json::Object trainingRank(ModuleOp train, int64_t rank = 0) {
  auto memory = train->getAttrOfType<ds::MemoryPlanAttr>(
      ds::DsDialect::kMemoryPlanAttrName);
  llvm::json::Array functions, params, states;
  int64_t paramBytes = 0, stateBytes = 0;
  llvm::StringSet<> seen;
  SmallVector<std::pair<func::FuncOp, int64_t>> parts = stepFunctions(train);
  functions.reserve(parts.size());
  for (auto [function, times] : parts) {
    FunctionPlan plan = planOf(function);
    params.reserve(params.size() + plan.params.size());
    states.reserve(states.size() + plan.states.size());
    for (llvm::json::Value &param : plan.params) {
      const llvm::json::Object *object = param.getAsObject();
      if (seen.insert(("param:" + *object->getString("name")).str()).second) {
        paramBytes += *object->getInteger("bytes");
        params.push_back(std::move(param));
      }
    }
    for (llvm::json::Value &state : plan.states) {
      const llvm::json::Object *object = state.getAsObject();
      if (seen.insert(("state:" + *object->getString("name")).str()).second) {
        stateBytes += *object->getInteger("bytes");
        states.push_back(std::move(state));
      }
    }
    FailureOr<PlanSummary> summary = summarizePlan(function);
    llvm::json::Object entry{
        {"name", function.getSymName()},
        {"arena_bytes", summary->arenaBytes},
        {"peak_live_bytes", summary->peakLiveBytes},
        {"flops", summary->flops},
        {"inputs", std::move(plan.inputs)},
        {"outputs", std::move(plan.outputs)},
        {"updates", std::move(plan.updates)},
        {"frees_at_start", std::move(plan.freesAtStart)},
        {"ops", std::move(plan.ops)}};
    if (summary->workspaceBytes > 0)
      entry["kernel_workspace_bytes"] = summary->workspaceBytes;
    functions.push_back(std::move(entry));
  }
  llvm::json::Object json{
      {"rank", rank},
      {"arena_bytes", memory.getArenaBytes()},
      {"arena_peak_bytes", memory.getArenaBytes()},
      {"persistent_bytes", memory.getPersistentBytes()},
      {"peak_live_bytes", memory.getPeakLiveBytes()},
      {"param_bytes", paramBytes},
      {"state_bytes", stateBytes},
      {"alignment", memory.getAlignment()},
      {"params", std::move(params)},
      {"states", std::move(states)},
      {"functions", std::move(functions)},
      {"host_syncs", hostSyncs(train)}};
  if (auto pipelineRank = train->getAttrOfType<ds::PipelineRankAttr>(
          ds::DsDialect::kPipelineRankAttrName)) {
    llvm::json::Array stages, pools;
    for (ds::PipelineRankStageAttr stage : pipelineRank.getVirtualStages()) {
      llvm::json::Object entry{{"stage", stage.getStage()}};
      for (auto [key, function] :
           {std::pair<StringRef, FlatSymbolRefAttr>{"forward",
                                                    stage.getForward()},
            {"backward", stage.getBackward()},
            {"backward_input", stage.getBackwardInput()},
            {"backward_weight", stage.getBackwardWeight()}})
        if (function)
          entry[key] = function.getValue();
      stages.push_back(std::move(entry));
    }
    for (ds::PipelinePoolAttr pool : pipelineRank.getPools())
      pools.push_back(llvm::json::Object{
          {"kind", ds::stringifyEnum(pool.getKind())},
          {"stage", pool.getStage()},
          {"slots", pool.getSlots()},
          {"slot_bytes", pool.getSlotBytes().value_or(0)},
          {"offset", pool.getOffset().value_or(0)}});
    json["pipeline"] = llvm::json::Object{
        {"pp", pipelineRank.getRank()},
        {"stages", std::move(stages)},
        {"actions",
         static_cast<int64_t>(pipelineRank.getActions().size())},
        {"buffers_offset", pipelineRank.getBuffersOffset().value_or(0)},
        {"buffers_bytes", pipelineRank.getBuffersBytes().value_or(0)},
        {"pools", std::move(pools)}};
  }
  return json;
}
} // namespace

LogicalResult writePlanJson(ModuleOp module, llvm::raw_ostream &os,
                            ModuleOp train,
                            const llvm::json::Value *trainConfig,
                            ArrayRef<ModuleOp> pipelineRanks,
                            StringRef target, ArrayRef<std::string> built) {
  auto function = module.lookupSymbol<func::FuncOp>("main");
  if (!function)
    return module.emitError() << "no function @main";
  FailureOr<PlanSummary> summary = summarizePlan(function);
  if (failed(summary))
    return failure();
  if (train && pipelineRanks.empty() && failed(trainingFunctions(train)))
    return failure();
  auto memory = function->getAttrOfType<ds::MemoryPlanAttr>(
      ds::DsDialect::kMemoryPlanAttrName);
  FunctionPlan plan = planOf(function);

  llvm::json::Object rank{
      {"rank", 0},
      {"arena_bytes", summary->arenaBytes},
      {"arena_peak_bytes", summary->arenaBytes},
      {"persistent_bytes", summary->persistentBytes},
      {"peak_live_bytes", summary->peakLiveBytes},
      {"memory_spaces", memorySpaces(memory, module)},
      {"param_bytes", summary->paramBytes},
      {"input_bytes", summary->inputBytes},
      {"alignment", memory.getAlignment()},
      {"flops", summary->flops},
      {"inputs", std::move(plan.inputs)},
      {"params", std::move(plan.params)},
      {"outputs", std::move(plan.outputs)},
      {"frees_at_start", std::move(plan.freesAtStart)},
      {"ops", std::move(plan.ops)}};
  if (summary->workspaceBytes > 0)
    rank["kernel_workspace_bytes"] = summary->workspaceBytes;
  llvm::json::Array ranks;
  ranks.push_back(std::move(rank));
  llvm::json::Object json{
      {"format", "dsopt-plan"}, {"version", 2}, {"target", target.str()}};
  if (auto source = module->getAttrOfType<StringAttr>(
          ds::DsDialect::kSourceAttrName))
    json["model"] = source.getValue();
  if (!built.empty())
    json["programs"] = llvm::json::Array(built);
  if (!train) {
    json["world"] = 1;
    json["grid"] = llvm::json::Object{{"dp", 1}, {"pp", 1}, {"tp", 1}};
    json["ranks"] = std::move(ranks);
  } else {
    // The job is the training program's: its grid, and what each rank
    // holds and moves. The forward program runs on one process.
    int64_t dp = dataParallelSize(pipelineRanks.empty() ? train
                                                        : pipelineRanks[0]),
            pp = pipelineStagesOf(train), tp = tensorParallelSize(train);
    json["world"] = dp * pp * tp;
    json["grid"] = llvm::json::Object{{"dp", dp}, {"pp", pp}, {"tp", tp}};
    if (train->hasAttr(ds::DsDialect::kPipelineAttrName)) {
      FailureOr<PipelineFacts> facts = pipelineOf(train);
      if (failed(facts))
        return failure();
      json["pipeline"] = pipelineJson(*facts);
    }
    // Every rank of the job (rank = (p * dp + d) * tp + t, tp fastest): the
    // program of its pp coordinate, at its dp and tp coordinates.
    SmallVector<ModuleOp> programs(pipelineRanks.begin(), pipelineRanks.end());
    if (programs.empty())
      programs.push_back(train);
    llvm::json::Array perRank, trainRanks;
    trainRanks.reserve(programs.size());
    for (auto [pr, program] : llvm::enumerate(programs)) {
      RankNumbers numbers(program);
      int64_t d = dataParallelSize(program);
      perRank.reserve(perRank.size() + d * tp);
      for (int64_t r = 0; r < d; ++r)
        for (int64_t t = 0; t < tp; ++t) {
          llvm::json::Object entry =
              numbers.of(r, static_cast<int64_t>(pr), t);
          entry["rank"] = (static_cast<int64_t>(pr) * d + r) * tp + t;
          if (!pipelineRanks.empty()) {
            entry["pp"] = static_cast<int64_t>(pr);
            entry["dp"] = r;
          }
          if (tp > 1) {
            entry["dp"] = r;
            entry["tp"] = t;
          }
          perRank.push_back(std::move(entry));
        }
      trainRanks.push_back(trainingRank(program, static_cast<int64_t>(pr)));
    }
    json["ranks"] = std::move(perRank);
    json["forward"] = llvm::json::Object{{"world", 1},
                                         {"ranks", std::move(ranks)}};
    llvm::json::Object training{{"ranks", std::move(trainRanks)}};
    if (auto zero = programs.front()->getAttrOfType<ds::ZeroAttr>(
            ds::DsDialect::kZeroAttrName))
      training["zero"] = llvm::json::Object{
          {"stage", zero.getStage()},
          {"dp", zero.getDp()},
          {"param_persistence_threshold",
           zero.getParamPersistenceThreshold()}};
    // The precision regime: fp32, or mixed precision (ds-precision) with
    // its 16-bit type, the gradients' type, fp32 master weights and, for
    // fp16, the loss scaler's settings.
    if (auto recipe = programs.front()->getAttrOfType<DictionaryAttr>(
            ds::DsDialect::kTrainAttrName)) {
      auto dtype = recipe.getAs<StringAttr>("precision");
      auto accum = recipe.getAs<StringAttr>("grad_accum_dtype");
      StringRef type = dtype ? dtype.getValue() : StringRef("fp32");
      llvm::json::Object precision{
          {"dtype", type},
          {"grad_accum_dtype", accum ? accum.getValue() : type},
          {"master_weights", dtype != nullptr}};
      if (auto scaler = recipe.getAs<DictionaryAttr>("loss_scaler")) {
        auto real = [&](StringRef key) {
          auto v = scaler.getAs<FloatAttr>(key);
          return v ? v.getValueAsDouble() : 0.0;
        };
        auto integer = [&](StringRef key) {
          auto v = scaler.getAs<IntegerAttr>(key);
          return v ? v.getInt() : int64_t(0);
        };
        auto flag = scaler.getAs<BoolAttr>("consecutive_hysteresis");
        const double staticScale = real("loss_scale");
        const int64_t power = integer("initial_scale_power");
        precision["loss_scaler"] = llvm::json::Object{
            {"dynamic", staticScale == 0.0},
            {"static_scale", staticScale},
            {"initial_scale_power", power},
            {"initial_scale",
             staticScale > 0.0 ? staticScale : std::ldexp(1.0, power)},
            {"loss_scale_window", integer("loss_scale_window")},
            {"hysteresis", integer("hysteresis")},
            {"consecutive_hysteresis", flag && flag.getValue()},
            {"min_loss_scale", real("min_loss_scale")}};
      }
      training["precision"] = std::move(precision);
    }
    if (trainConfig)
      training["config"] = *trainConfig;
    json["train"] = std::move(training);
  }
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(json))) << "\n";
  return success();
}

LogicalResult writePipelineTrace(ModuleOp train, llvm::raw_ostream &os) {
  if (!train->hasAttr(ds::DsDialect::kPipelineAttrName))
    return train.emitError() << "the training step is not pipelined (run "
                                "ds-pipeline)";
  FailureOr<PipelineFacts> facts = pipelineOf(train);
  if (failed(facts))
    return failure();
  pipeline::writeChromeTrace(facts->simulation, os);
  return success();
}

LogicalResult writePlanText(ModuleOp module, llvm::raw_ostream &os,
                            ModuleOp train, ArrayRef<ModuleOp> pipelineRanks,
                            ArrayRef<std::string> built) {
  auto function = module.lookupSymbol<func::FuncOp>("main");
  if (!function)
    return module.emitError() << "no function @main";
  FailureOr<PlanSummary> summary = summarizePlan(function);
  if (failed(summary))
    return failure();
  auto mib = [](int64_t bytes) { return bytes / (1024.0 * 1024.0); };
  os << "dsopt plan: 1 rank\n";
  if (!built.empty())
    os << "programs: " << llvm::join(built, " ") << "\n";
  os << "\n";
  os << "rank 0\n";
  os << llvm::format("  arena           %14lld bytes  (%.2f MiB): the program's "
                     "peak memory\n",
                     (long long)summary->arenaBytes, mib(summary->arenaBytes));
  os << llvm::format("    parameters    %14lld bytes  (%.2f MiB), persistent\n",
                     (long long)summary->paramBytes, mib(summary->paramBytes));
  os << llvm::format("    inputs        %14lld bytes\n",
                     (long long)summary->inputBytes);
  os << llvm::format("    activations   %14lld bytes  (arena minus persistent "
                     "state)\n",
                     (long long)(summary->arenaBytes - summary->persistentBytes));
  os << llvm::format("  peak live       %14lld bytes  (fragmentation %.1f%%)\n",
                     (long long)summary->peakLiveBytes,
                     summary->arenaBytes
                         ? 100.0 * (summary->arenaBytes - summary->peakLiveBytes) /
                               summary->arenaBytes
                         : 0.0);
  os << llvm::format("  kernels         %14lld\n", (long long)summary->kernels);
  os << llvm::format("  flops           %14lld  per run (cost model)\n",
                     (long long)summary->flops);
  if (!train)
    return success();

  SmallVector<ModuleOp> programs(pipelineRanks.begin(), pipelineRanks.end());
  if (programs.empty()) {
    if (failed(trainingFunctions(train)))
      return failure();
    programs.push_back(train);
  }
  for (auto [pr, program] : llvm::enumerate(programs)) {
  llvm::json::Object rank = trainingRank(program, static_cast<int64_t>(pr));
  auto bytes = [&](StringRef key) { return *rank.getInteger(key); };
  if (pipelineRanks.empty())
    os << "\ntraining program (train), rank 0\n";
  else
    os << "\ntraining program (train), pipeline rank " << pr << " (ranks "
       << pr * dataParallelSize(program) << ".."
       << (pr + 1) * dataParallelSize(program) - 1 << ")\n";
  os << llvm::format("  arena           %14lld bytes  (%.2f MiB): the training "
                     "step's peak memory\n",
                     (long long)bytes("arena_bytes"), mib(bytes("arena_bytes")));
  os << llvm::format("    parameters    %14lld bytes  (%.2f MiB)\n",
                     (long long)bytes("param_bytes"), mib(bytes("param_bytes")));
  os << llvm::format("    states        %14lld bytes  (%.2f MiB): gradients "
                     "and optimizer moments\n",
                     (long long)bytes("state_bytes"), mib(bytes("state_bytes")));
  int64_t world = dataParallelSize(program);
  int64_t stage = 0;
  if (auto zero =
          program->getAttrOfType<ds::ZeroAttr>(ds::DsDialect::kZeroAttrName))
    stage = zero.getStage();
  llvm::json::Object numbers =
      RankNumbers(program).of(0, static_cast<int64_t>(pr));
  auto number = [&](StringRef key) { return *numbers.getInteger(key); };
  os << llvm::format("  data parallel   %14lld ranks, ZeRO stage %lld; per "
                     "rank (rank 0):\n",
                     (long long)world, (long long)stage);
  for (StringRef key : {"param_bytes", "grad_bytes", "optimizer_bytes",
                        "activation_bytes", "workspace_bytes"})
    os << llvm::format("    %-16s%14lld bytes  (%.2f MiB)\n",
                       key.drop_back(6).str().c_str(), (long long)number(key),
                       mib(number(key)));
  const llvm::json::Object *collectives =
      numbers.getObject("collective_bytes");
  if (const llvm::json::Value *pipelineJson = rank.get("pipeline")) {
    const llvm::json::Object &p = *pipelineJson->getAsObject();
    os << llvm::format("    pipeline bufs %14lld bytes  (%.2f MiB): micro-batches "
                       "between actions\n",
                       (long long)*p.getInteger("buffers_bytes"),
                       mib(*p.getInteger("buffers_bytes")));
  }
  for (StringRef kind : kCollectiveKinds) {
    const llvm::json::Object *t = collectives->getObject(kind);
    os << llvm::format("    %-16s%14lld bytes sent, %lld received, %lld calls "
                       "per step\n",
                       kind.str().c_str(), (long long)*t->getInteger("sent"),
                       (long long)*t->getInteger("received"),
                       (long long)*t->getInteger("calls"));
  }
  if (const llvm::json::Object *tpBytes =
          numbers.getObject("tp_collective_bytes")) {
    const llvm::json::Object *t = tpBytes->getObject("all_reduce");
    os << llvm::format("  tensor parallel %14lld ranks; of the above along "
                       "tp: all_reduce %lld bytes sent, %lld calls per step\n",
                       (long long)tensorParallelSize(program),
                       (long long)*t->getInteger("sent"),
                       (long long)*t->getInteger("calls"));
  }
  for (auto [function, times] : stepFunctions(program)) {
    FailureOr<PlanSummary> part = summarizePlan(function);
    os << llvm::format("  %-15s %14lld bytes  arena, %lld kernels, %lld "
                       "flops\n",
                       function.getSymName().str().c_str(),
                       (long long)part->arenaBytes, (long long)part->kernels,
                       (long long)part->flops);
  }
  }
  if (train->hasAttr(ds::DsDialect::kPipelineAttrName)) {
    FailureOr<PipelineFacts> facts = pipelineOf(train);
    if (failed(facts))
      return failure();
    llvm::json::Object json = pipelineJson(*facts);
    os << llvm::format("  pipeline        %lld stages, schedule %s, %lld "
                       "micro-batches, %lld chunks per rank\n",
                       (long long)*json.getInteger("stages"),
                       json.getString("schedule")->str().c_str(),
                       (long long)*json.getInteger("microbatches"),
                       (long long)*json.getInteger("chunks"));
    os << llvm::format("    bubble        %.4f simulated, %.4f with uniform "
                       "stages, textbook %s\n",
                       facts->simulation.bubbleFraction,
                       facts->uniformSimulation.bubbleFraction,
                       facts->textbook
                           ? llvm::formatv("{0:F4}", *facts->textbook)
                                 .str()
                                 .c_str()
                           : "none");
    os << "    stage rank      fwd flops      bwd flops    param bytes  "
          "act bytes  in flight   send bytes\n";
    for (const llvm::json::Value &value : *json.getArray("per_stage")) {
      const llvm::json::Object &stage = *value.getAsObject();
      os << llvm::format("    %5lld %4lld %14lld %14lld %14lld %10lld %10lld "
                         "%12lld\n",
                         (long long)*stage.getInteger("stage"),
                         (long long)*stage.getInteger("rank"),
                         (long long)*stage.getInteger("flops_forward"),
                         (long long)*stage.getInteger("flops_backward"),
                         (long long)*stage.getInteger("param_bytes"),
                         (long long)*stage.getInteger("activation_bytes"),
                         (long long)*stage.getInteger("peak_in_flight"),
                         (long long)*stage.getInteger("send_bytes"));
    }
  }
  return success();
}

} // namespace dsopt
