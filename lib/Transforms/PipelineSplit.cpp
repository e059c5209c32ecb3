//===- PipelineSplit.cpp - the program of one pipeline rank ----------------===//
//
// After ds-pipeline has given every op of @micro_step its virtual stage,
// this pass turns a copy of the training module into the program of one
// pipeline rank: a function per part of each of its virtual stages
// (@fwd_s, @bwd_s, or zb-h1's @bwdi_s and @bwdw_s), an @optimizer_step over
// its own parameters, and the facts the runtime needs to drive them
// (ds.pipeline_rank): the functions, the rank's action list, the number of
// buffer slots of each kind the list needs, and the accumulators shared
// with other ranks.
//
// Where a value goes (docs/pipeline.md, "Execution"):
//   forward value of stage a read by stage b > a   sent a -> a+1 -> ... -> b
//                                                  at forward time; stashed
//                                                  at b if b's backward
//                                                  reads it
//   forward value of stage a read by backward of a stashed by @fwd_a
//   gradient of stage a read by stage b < a        sent a -> ... -> b at
//                                                  backward time
//   forward value of stage a read by backward of   stashed at a, sent back
//   b < a                                          with the gradients
// Every transfer crosses one cut at a time, so the schedule's sends and
// receives between neighbouring stages carry everything.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"
#include "dsopt/Transforms/GradientContributions.h"
#include "dsopt/Transforms/WeightViews.h"

#include "dsopt/Pipeline/ScheduleAttrs.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <array>
#include <map>
#include <set>

namespace dsopt {
#define GEN_PASS_DEF_DSPIPELINESPLIT
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

/// The parts of a virtual stage: its forward, its backward (B), and with a
/// split backward zb-h1's deferred weight-gradient part (W).
enum Part { Forward = 0, Backward = 1, Weight = 2 };

bool isConstant(Operation *op) { return op->hasTrait<OpTrait::ConstantLike>(); }


StringRef paramName(func::FuncOp function, unsigned i) {
  if (auto param = function.getArgAttrOfType<ds::ParamAttr>(
          i, ds::DsDialect::kParamAttrName))
    return param.getName();
  return "";
}

/// The latest op defining one of `values` (null: all are arguments).
Operation *latestDefinition(ArrayRef<Value> values) {
  Operation *latest = nullptr;
  for (Value value : values)
    if (Operation *def = value.getDefiningOp())
      if (!latest || latest->isBeforeInBlock(def))
        latest = def;
  return latest;
}

struct PipelineSplitPass
    : dsopt::impl::DsPipelineSplitBase<PipelineSplitPass> {
  using DsPipelineSplitBase::DsPipelineSplitBase;
  void runOnOperation() override;
};

/// What one function of the rank is made of.
struct FunctionPlan {
  int64_t stage;
  Part part;
  std::string name;
  SmallVector<Operation *> ops;           // in block order
  // Arguments beyond the ones its ops read from @micro_step's arguments.
  SmallVector<Value> stashIn, recvIn, wstashIn;
  // Results.
  SmallVector<Value> sends, stashOut, wstashOut;
  bool loss = false;
};

void PipelineSplitPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *context = module.getContext();
  auto fail = [&](Operation *at, const Twine &message) {
    at->emitError() << message;
    signalPassFailure();
  };

  auto pipeline =
      module->getAttrOfType<ds::PipelineAttr>(ds::DsDialect::kPipelineAttrName);
  if (!pipeline)
    return fail(module, "no ds.pipeline on the module; run ds-pipeline first");
  auto micro = module.lookupSymbol<func::FuncOp>("micro_step");
  auto step = module.lookupSymbol<func::FuncOp>("optimizer_step");
  if (!micro || !step)
    return fail(module, "no @micro_step and @optimizer_step to split");
  // ds-tensor-parallel's (dp, tp) grid is the only one before us: the
  // rank's grid becomes (pp, dp, tp), tp fastest (docs/tensor-parallel.md).
  int64_t tp = 1;
  if (Operation *grid = module.lookupSymbol("grid")) {
    std::optional<int64_t> dpAxis =
        ds::getDeviceGridAxis(grid, ds::GridAxis::dp);
    std::optional<int64_t> tpAxis =
        ds::getDeviceGridAxis(grid, ds::GridAxis::tp);
    auto shape = isa<shard::GridOp>(grid)
                     ? cast<shard::GridOp>(grid).getShape()
                     : ArrayRef<int64_t>();
    if (!dpAxis || !tpAxis || shape.size() != 2 ||
        ds::getDeviceGridAxis(grid, ds::GridAxis::pp))
      return fail(module, "the module already has a device grid (@grid) "
                          "other than ds-tensor-parallel's (dp, tp); "
                          "ds-pipeline-split runs before ds-zero");
    if (shape[*dpAxis] != dp)
      return fail(module, "the tensor-parallel grid's dp axis has size " +
                              Twine(shape[*dpAxis]) + ", not dp=" +
                              Twine(dp));
    tp = shape[*tpAxis];
  }
  // #ds.pipeline's verifier has checked p, m, v >= 1.
  int64_t p = pipeline.getStages(), m = pipeline.getMicrobatches(),
          v = pipeline.getChunks();
  pipeline::ScheduleKind kind = pipeline::fromAttr(pipeline.getSchedule());
  if (rank < 0 || rank >= p)
    return fail(module, "pipeline rank " + Twine(rank) + " is outside [0, " +
                            Twine(p) + ")");
  if (dp < 1)
    return fail(module, "the data-parallel size must be at least 1");
  llvm::Expected<pipeline::Schedule> schedule =
      pipeline::buildSchedule(kind, p, m, v);
  if (!schedule)
    return fail(module, "pipeline schedule: " +
                            llvm::toString(schedule.takeError()));
  const bool splitBackward = kind == pipeline::ScheduleKind::ZeroBubbleH1;
  const int64_t numStages = p * v;
  int64_t accumulation = 1;
  if (auto train = module->getAttrOfType<DictionaryAttr>(
          ds::DsDialect::kTrainAttrName))
    if (auto k = train.getAs<IntegerAttr>("accumulation"))
      accumulation = k.getInt();

  Block &body = micro.getBody().front();
  Operation *terminator = body.getTerminator();
  Operation *lossDef = terminator->getNumOperands()
                           ? terminator->getOperand(0).getDefiningOp()
                           : nullptr;
  if (!lossDef)
    return fail(micro, "@micro_step's loss is not computed by an op");
  llvm::DenseSet<Operation *> forwardSet;
  for (Operation &op : body.without_terminator()) {
    forwardSet.insert(&op);
    if (&op == lossDef)
      break;
  }
  auto stageOf = [&](Operation *op) -> int64_t {
    auto attr = op->getAttrOfType<IntegerAttr>(ds::DsDialect::kStageAttrName);
    return attr ? attr.getInt() : -1;
  };
  for (Operation &op : body.without_terminator())
    if (stageOf(&op) < 0 || stageOf(&op) >= numStages)
      return fail(&op, "op has no valid ds.stage; run ds-pipeline first");
  OpBuilder b(context);
  auto setStage = [&](Operation *op, int64_t s) {
    op->setAttr(ds::DsDialect::kStageAttrName, b.getI64IntegerAttr(s));
  };

  // 1. Gradient accumulation per stage. acc' = acc + g, where g sums the
  // contributions of every use of the parameter, becomes a chain
  // acc + g_s0 + g_s1 + ... of the stages' partial sums, each added on its
  // own stage: every rank then accumulates what its stages contribute into
  // its own copy of the accumulator (the chain's value from another stage
  // is the local accumulator), and the runtime sums the copies.
  llvm::DenseMap<Value, BlockArgument> chainAcc; // chain value -> its acc
  llvm::StringSet<> resetInOptimizer;            // k = 1: accs to zero
  for (OpOperand &result : terminator->getOpOperands()) {
    std::optional<ds::GradientAccumulation> match =
        ds::matchGradientAccumulation(micro, result);
    if (!match)
      continue;
    BlockArgument acc = match->acc;
    StringRef param = match->param;
    ds::AddOp add = match->add;
    GradientContributions contributions =
        collectGradientContributions(
            *match, [&](Operation *op) { return forwardSet.contains(op); });
    // Accumulating in a wider type than the gradient's (ds-precision's
    // grad_accum_dtype fp32), the sum is widened first: each stage's
    // partial sum is widened instead, so that it stays on its stage.
    ds::CastOp widen = contributions.widen;
    ArrayRef<Value> leaves = contributions.leaves;
    ArrayRef<Operation *> tree = contributions.tree;
    std::map<int64_t, SmallVector<Value>> byStage;
    for (Value leaf : leaves) {
      Operation *def = leaf.getDefiningOp();
      int64_t s = def && !isConstant(def) ? stageOf(def)
                                           : (add ? stageOf(add) : 0);
      byStage[s].push_back(leaf);
    }
    if (byStage.size() == 1 && add) {
      setStage(add, byStage.begin()->first);
      if (widen)
        setStage(widen, byStage.begin()->first);
      chainAcc[add] = acc;
      continue;
    }
    // Several stages, or acc' = g with one micro-batch per step (made
    // acc + g, the optimizer zeroing the accumulators).
    if (accumulation == 1)
      resetInOptimizer.insert(param);
    Value current = acc;
    for (auto &[s, values] : byStage) {
      Value partial = values.front();
      for (Value leaf : ArrayRef(values).drop_front()) {
        Operation *after = latestDefinition({partial, leaf});
        if (after)
          b.setInsertionPointAfter(after);
        else
          b.setInsertionPointToStart(&body);
        auto sum = ds::AddOp::create(b, leaf.getLoc(), ValueRange{partial, leaf});
        setStage(sum, s);
        partial = sum;
      }
      if (widen) {
        Operation *after = latestDefinition({partial});
        if (after)
          b.setInsertionPointAfter(after);
        else
          b.setInsertionPointToStart(&body);
        auto cast = ds::CastOp::create(b, partial.getLoc(), widen.getType(),
                                       partial);
        setStage(cast, s);
        partial = cast;
      }
      Operation *after = latestDefinition({current, partial});
      if (after)
        b.setInsertionPointAfter(after);
      else
        b.setInsertionPointToStart(&body);
      auto next = ds::AddOp::create(b, partial.getLoc(),
                                    ValueRange{current, partial});
      setStage(next, s);
      chainAcc[next] = acc;
      current = next;
    }
    result.set(current);
    if (add && add->use_empty())
      add->erase();
    if (widen && widen->use_empty())
      widen->erase();
    for (Operation *op : tree)
      if (op->use_empty())
        op->erase();
  }

  // 2. Parts. With zb-h1, a backward op is in B if a gradient leaving its
  // stage depends on it, else in W.
  llvm::DenseSet<Operation *> critical;
  if (splitBackward) {
    SmallVector<Operation *> work;
    for (Operation &op : body.without_terminator()) {
      if (forwardSet.contains(&op) || chainAcc.count(op.getResult(0)))
        continue;
      if (llvm::any_of(op.getUsers(), [&](Operation *user) {
            return user != terminator && stageOf(user) != stageOf(&op);
          }) &&
          critical.insert(&op).second)
        work.push_back(&op);
    }
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp();
            def && !forwardSet.contains(def) && !isConstant(def) &&
            stageOf(def) == stageOf(op) && critical.insert(def).second)
          work.push_back(def);
    }
  }
  auto partOf = [&](Operation *op) -> Part {
    if (forwardSet.contains(op))
      return Forward;
    if (!splitBackward || critical.contains(op))
      return Backward;
    return Weight;
  };

  // 3. Where each value is needed. Values are named by their op's position.
  llvm::DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(body.without_terminator()))
    position[&op] = static_cast<int64_t>(i);
  auto idOf = [&](Value value) {
    auto result = cast<OpResult>(value);
    return "v" + std::to_string(position[result.getOwner()]) + "_" +
           std::to_string(result.getResultNumber());
  };
  auto before = [&](Value a, Value c) {
    auto ra = cast<OpResult>(a), rc = cast<OpResult>(c);
    int64_t pa = position[ra.getOwner()], pc = position[rc.getOwner()];
    return pa != pc ? pa < pc : ra.getResultNumber() < rc.getResultNumber();
  };
  // forwardCut[w]: values sent from stage w to w + 1 at forward time;
  // backwardCut[w]: from w + 1 to w at backward time.
  std::vector<std::set<Value, decltype(before)>> forwardCut(
      numStages, std::set<Value, decltype(before)>(before));
  std::vector<std::set<Value, decltype(before)>> backwardCut = forwardCut;
  std::vector<std::set<Value, decltype(before)>> stash = forwardCut,
                                                 wstash = forwardCut;
  // recompute[s][q]: the forward ops of stage s that part q recomputes
  // rather than reading their results from the stash (weight views,
  // WeightViews.h: the same bytes for every micro-batch).
  std::vector<std::array<llvm::DenseSet<Operation *>, 3>> recompute(numStages);
  std::function<void(int64_t, Part, Operation *)> recomputeIn =
      [&](int64_t s, Part q, Operation *op) {
        if (isConstant(op) || !recompute[s][q].insert(op).second)
          return;
        for (Value operand : op->getOperands())
          if (Operation *def = operand.getDefiningOp())
            recomputeIn(s, q, def);
      };
  std::string error;
  // Records that part `q` of stage `s` reads `value`.
  std::function<void(int64_t, Part, Value)> need = [&](int64_t s, Part q,
                                                       Value value) {
    Operation *def = value.getDefiningOp();
    if (!def || isConstant(def) || chainAcc.count(value))
      return; // arguments, constants and accumulators are local
    int64_t a = stageOf(def);
    Part from = partOf(def);
    if (a == s) {
      if (from == q)
        return;
      if (from == Forward && isWeightView(value))
        recomputeIn(s, q, def);
      else if (from == Forward)
        stash[s].insert(value);
      else if (from == Backward && q == Weight)
        wstash[s].insert(value);
      else
        error = "stage " + std::to_string(s) + " reads a value of its own "
                "backward before it exists (" + idOf(value) + ")";
      return;
    }
    if (from == Forward && a < s) {
      for (int64_t w = a; w < s; ++w)
        forwardCut[w].insert(value);
      if (q != Forward)
        stash[s].insert(value);
      return;
    }
    if (from == Forward && a > s && q != Forward) {
      need(a, Backward, value); // stashed on a, sent back with gradients
      for (int64_t w = s; w < a; ++w)
        backwardCut[w].insert(value);
      if (q == Weight)
        wstash[s].insert(value);
      return;
    }
    if (from == Backward && a > s && q != Forward) {
      for (int64_t w = s; w < a; ++w)
        backwardCut[w].insert(value);
      if (q == Weight)
        wstash[s].insert(value);
      return;
    }
    error = "a value of stage " + std::to_string(a) + " (" + idOf(value) +
            ") is read by stage " + std::to_string(s) +
            ", which runs before it exists";
  };
  for (Operation &op : body.without_terminator())
    for (Value operand : op.getOperands())
      need(stageOf(&op), partOf(&op), operand);
  if (!error.empty())
    return fail(micro, "cannot pipeline @micro_step: " + error);
  // Relayed values pass through the stages in between: a forward value
  // crossing cuts w-1 and w is received and sent again by stage w.

  // 4. The rank's functions.
  std::vector<int64_t> myStages;
  for (int64_t c = 0; c < v; ++c)
    myStages.push_back(c * p + rank);
  std::vector<FunctionPlan> plans;
  auto stageName = [&](StringRef prefix, int64_t s) {
    return (prefix + Twine(s)).str();
  };
  for (int64_t s : myStages) {
    SmallVector<Part> parts{Forward, Backward};
    if (splitBackward)
      parts.push_back(Weight);
    for (Part q : parts) {
      FunctionPlan plan;
      plan.stage = s;
      plan.part = q;
      plan.name = stageName(q == Forward    ? "fwd_"
                            : !splitBackward ? "bwd_"
                            : q == Backward  ? "bwdi_"
                                             : "bwdw_",
                            s);
      for (Operation &op : body.without_terminator())
        if (!isConstant(&op) && ((stageOf(&op) == s && partOf(&op) == q) ||
                                 recompute[s][q].contains(&op)))
          plan.ops.push_back(&op);
      if (q == Forward) {
        if (s > 0)
          plan.recvIn.assign(forwardCut[s - 1].begin(), forwardCut[s - 1].end());
        if (s + 1 < numStages)
          plan.sends.assign(forwardCut[s].begin(), forwardCut[s].end());
        plan.stashOut.assign(stash[s].begin(), stash[s].end());
        plan.loss = stageOf(lossDef) == s;
      } else if (q == Backward) {
        if (s + 1 < numStages)
          plan.recvIn.assign(backwardCut[s].begin(), backwardCut[s].end());
        if (s > 0)
          plan.sends.assign(backwardCut[s - 1].begin(),
                            backwardCut[s - 1].end());
        plan.wstashOut.assign(wstash[s].begin(), wstash[s].end());
      } else {
        plan.wstashIn.assign(wstash[s].begin(), wstash[s].end());
      }
      plans.push_back(std::move(plan));
    }
  }
  // The stash a backward part reads: what its ops and sends read of it.
  for (FunctionPlan &plan : plans) {
    if (plan.part == Forward)
      continue;
    llvm::DenseSet<Value> mine;
    for (Operation *op : plan.ops)
      for (Value result : op->getResults())
        mine.insert(result);
    llvm::DenseSet<Value> read;
    for (Operation *op : plan.ops)
      for (Value operand : op->getOperands())
        read.insert(operand);
    for (Value send : plan.sends)
      read.insert(send);
    for (Value out : plan.wstashOut)
      read.insert(out);
    for (Value value : stash[plan.stage])
      if (read.contains(value) && !mine.contains(value) &&
          !llvm::is_contained(plan.recvIn, value) &&
          !llvm::is_contained(plan.wstashIn, value))
        plan.stashIn.push_back(value);
  }

  // Build them.
  b.setInsertionPointToEnd(module.getBody());
  llvm::StringSet<> rankParams; // parameters (names) the rank reads
  llvm::StringSet<> rankAccs;   // accumulators (param names) it updates
  SmallVector<std::pair<std::string, int64_t>> functionNames;
  for (FunctionPlan &plan : plans) {
    // Arguments: @micro_step's arguments the ops read (in their order),
    // then the stash, the weight stash and what is received.
    llvm::SetVector<unsigned> microArgs;
    for (Operation *op : plan.ops)
      for (Value operand : op->getOperands()) {
        if (auto arg = dyn_cast<BlockArgument>(operand))
          microArgs.insert(arg.getArgNumber());
        else if (auto it = chainAcc.find(operand);
                 it != chainAcc.end() && stageOf(operand.getDefiningOp()) !=
                                             plan.stage)
          microArgs.insert(it->second.getArgNumber());
      }
    // The accumulators the part updates: the last chain value on it.
    llvm::MapVector<unsigned, Value> accResults;
    for (Operation *op : plan.ops)
      if (auto it = chainAcc.find(op->getResult(0)); it != chainAcc.end()) {
        accResults[it->second.getArgNumber()] = op->getResult(0);
        microArgs.insert(it->second.getArgNumber());
      }
    // State the part's ops update (training-mode batch norm's running
    // statistics): the stage that holds the op holds the state, and the
    // part returns its new value tied to it, so it is written back on every
    // micro-batch in the schedule's order, as on one rank.
    llvm::MapVector<unsigned, Value> stateResults;
    {
      llvm::DenseSet<Operation *> mine(plan.ops.begin(), plan.ops.end());
      for (OpOperand &result : terminator->getOpOperands()) {
        auto updates = micro.getResultAttrOfType<IntegerAttr>(
            result.getOperandNumber(), ds::DsDialect::kUpdatesAttrName);
        if (!updates || result.getOperandNumber() == 0 ||
            chainAcc.count(result.get()) ||
            !ds::getAccumulatedParam(micro, updates.getInt()).empty())
          continue;
        Operation *def = result.get().getDefiningOp();
        if (!def || !mine.contains(def))
          continue;
        stateResults[updates.getInt()] = result.get();
        microArgs.insert(updates.getInt());
      }
    }
    SmallVector<unsigned> argOrder(microArgs.begin(), microArgs.end());
    llvm::sort(argOrder);

    SmallVector<Type> argTypes;
    SmallVector<DictionaryAttr> argAttrs;
    // `{ds.input|ds.output = "<id>", ds.role = #ds.role<role>}`.
    auto roleAttrs = [&](StringRef attr, ds::ValueRole role,
                         const std::string &id) {
      return b.getDictionaryAttr(
          {b.getNamedAttr(attr, b.getStringAttr(id)),
           b.getNamedAttr(ds::DsDialect::kRoleAttrName,
                          ds::ValueRoleAttr::get(b.getContext(), role))});
    };
    for (unsigned a : argOrder) {
      argTypes.push_back(body.getArgument(a).getType());
      argAttrs.push_back(micro.getArgAttrDict(a)
                             ? micro.getArgAttrDict(a)
                             : b.getDictionaryAttr({}));
      if (StringRef name = paramName(micro, a); !name.empty())
        rankParams.insert(name);
      if (StringRef param = ds::getAccumulatedParam(micro, a); !param.empty())
        rankAccs.insert(param);
    }
    auto addValues = [&](ArrayRef<Value> values, ds::ValueRole role) {
      for (Value value : values) {
        argTypes.push_back(value.getType());
        argAttrs.push_back(
            roleAttrs(ds::DsDialect::kInputAttrName, role, idOf(value)));
      }
    };
    addValues(plan.stashIn, ds::ValueRole::stash);
    addValues(plan.wstashIn, ds::ValueRole::wstash);
    addValues(plan.recvIn, ds::ValueRole::recv);

    auto function = func::FuncOp::create(b, micro.getLoc(), plan.name,
                                         b.getFunctionType(argTypes, {}));
    Block *entry = function.addEntryBlock();
    IRMapping map;
    unsigned index = 0;
    for (unsigned a : argOrder)
      map.map(body.getArgument(a), entry->getArgument(index++));
    for (ArrayRef<Value> values : {ArrayRef<Value>(plan.stashIn),
                                   ArrayRef<Value>(plan.wstashIn),
                                   ArrayRef<Value>(plan.recvIn)})
      for (Value value : values)
        map.map(value, entry->getArgument(index++));
    OpBuilder fb = OpBuilder::atBlockEnd(entry);
    OpBuilder constants = OpBuilder::atBlockBegin(entry);
    auto resolve = [&](Value value) -> LogicalResult {
      if (map.contains(value))
        return success();
      Operation *def = value.getDefiningOp();
      if (def && isConstant(def)) {
        Operation *clone = constants.clone(*def);
        for (auto [from, to] : llvm::zip(def->getResults(), clone->getResults()))
          map.map(from, to);
        return success();
      }
      if (auto it = chainAcc.find(value); it != chainAcc.end()) {
        map.map(value, map.lookup(Value(it->second)));
        return success();
      }
      function.emitError() << "internal error: " << plan.name
                           << " reads a value it has no way to get";
      return failure();
    };
    for (Operation *op : plan.ops) {
      for (Value operand : op->getOperands())
        if (failed(resolve(operand)))
          return signalPassFailure();
      fb.clone(*op, map);
    }
    SmallVector<Value> results;
    SmallVector<DictionaryAttr> resultAttrs;
    auto addResults = [&](ArrayRef<Value> values, ds::ValueRole role) -> bool {
      for (Value value : values) {
        if (failed(resolve(value)))
          return false;
        results.push_back(map.lookup(value));
        resultAttrs.push_back(
            roleAttrs(ds::DsDialect::kOutputAttrName, role, idOf(value)));
      }
      return true;
    };
    if (plan.loss) {
      results.push_back(map.lookup(terminator->getOperand(0)));
      resultAttrs.push_back(micro.getResultAttrDict(0)
                                ? micro.getResultAttrDict(0)
                                : b.getDictionaryAttr({}));
    }
    if (!addResults(plan.sends, ds::ValueRole::send) ||
        !addResults(plan.stashOut, ds::ValueRole::stash) ||
        !addResults(plan.wstashOut, ds::ValueRole::wstash))
      return signalPassFailure();
    for (auto &[a, value] : accResults) {
      results.push_back(map.lookup(value));
      auto position = llvm::find(argOrder, a) - argOrder.begin();
      resultAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
          ds::DsDialect::kUpdatesAttrName, b.getI64IntegerAttr(position))));
    }
    for (auto &[a, value] : stateResults) {
      results.push_back(map.lookup(value));
      auto position = llvm::find(argOrder, a) - argOrder.begin();
      resultAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
          ds::DsDialect::kUpdatesAttrName, b.getI64IntegerAttr(position))));
    }
    func::ReturnOp::create(fb, micro.getLoc(), results);
    function.setFunctionType(
        b.getFunctionType(argTypes, ValueRange(results).getTypes()));
    function.setAllArgAttrs(argAttrs);
    function.setAllResultAttrs(resultAttrs);
    ds::PipelinePart part = plan.part == Forward ? ds::PipelinePart::forward
                            : !splitBackward     ? ds::PipelinePart::backward
                            : plan.part == Backward
                                ? ds::PipelinePart::backward_input
                                : ds::PipelinePart::backward_weight;
    function->setAttr(ds::DsDialect::kPipelinePartAttrName,
                      ds::PipelinePartAttr::get(context, part, plan.stage));
  }

  // 5. Which ranks hold each parameter: every rank's stages are known, so
  // the sharers follow from the ops' stages alone (the same on every rank).
  llvm::StringMap<std::set<int64_t>> holders;
  for (Operation &op : body.without_terminator())
    for (Value operand : op.getOperands()) {
      auto arg = dyn_cast<BlockArgument>(operand);
      if (!arg)
        if (auto it = chainAcc.find(operand); it != chainAcc.end())
          arg = it->second;
      if (!arg)
        continue;
      StringRef name = paramName(micro, arg.getArgNumber());
      if (name.empty())
        name = ds::getAccumulatedParam(micro, arg.getArgNumber());
      if (!name.empty())
        holders[name].insert(stageOf(&op) % p);
    }
  for (auto &[value, acc] : chainAcc) {
    holders[ds::getAccumulatedParam(micro, acc.getArgNumber())].insert(
        stageOf(value.getDefiningOp()) % p);
  }

  // 6. @optimizer_step keeps the rank's parameters.
  Block &stepBody = step.getBody().front();
  Operation *stepReturn = stepBody.getTerminator();
  auto nameOfStepArg = [&](unsigned a) -> std::string {
    if (StringRef name = paramName(step, a); !name.empty())
      return name.str();
    ds::StateAttr state = ds::getArgumentState(step, a);
    return state ? state.getParam().str() : "";
  };
  llvm::BitVector dropArg(stepBody.getNumArguments());
  for (unsigned a = 0; a < stepBody.getNumArguments(); ++a) {
    std::string name = nameOfStepArg(a);
    if (!name.empty() && !rankParams.contains(name) && !rankAccs.contains(name))
      dropArg.set(a);
  }
  SmallVector<Value> keptResults;
  SmallVector<DictionaryAttr> keptResultAttrs;
  for (OpOperand &operand : stepReturn->getOpOperands()) {
    auto updates = step.getResultAttrOfType<IntegerAttr>(
        operand.getOperandNumber(), ds::DsDialect::kUpdatesAttrName);
    if (updates && dropArg.test(updates.getInt()))
      continue;
    keptResults.push_back(operand.get());
    DictionaryAttr attrs = step.getResultAttrDict(operand.getOperandNumber());
    keptResultAttrs.push_back(attrs ? attrs : b.getDictionaryAttr({}));
  }
  // One micro-batch per step with per-stage accumulation: zero the
  // accumulators after the update.
  for (BlockArgument arg : stepBody.getArguments()) {
    StringRef param = ds::getAccumulatedParam(step, arg.getArgNumber());
    if (param.empty() || dropArg.test(arg.getArgNumber()) ||
        !resetInOptimizer.contains(param))
      continue;
    b.setInsertionPoint(stepReturn);
    keptResults.push_back(ds::FillOp::create(b, step.getLoc(), arg.getType(),
                                             b.getF64FloatAttr(0.0)));
    keptResultAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
        ds::DsDialect::kUpdatesAttrName,
        b.getI64IntegerAttr(arg.getArgNumber()))));
  }
  b.setInsertionPoint(stepReturn);
  auto newReturn = func::ReturnOp::create(b, stepReturn->getLoc(), keptResults);
  stepReturn->erase();
  stepReturn = newReturn;
  // The norm: the sum of squares of the accumulators the rank owns (a
  // shared one on its lowest rank), summed over pp.
  SmallVector<ds::SumOfSquaresOp> norms;
  stepBody.walk([&](ds::SumOfSquaresOp op) { norms.push_back(op); });
  if (tp > 1) {
    if (failed(ds::replaceDeviceGrid(b, module,
                                     {{ds::GridAxis::pp, p},
                                      {ds::GridAxis::dp, dp},
                                      {ds::GridAxis::tp, tp}})))
      return signalPassFailure();
  } else {
    ds::buildDeviceGrid(b, module,
                        {{ds::GridAxis::pp, p}, {ds::GridAxis::dp, dp}});
  }
  for (ds::SumOfSquaresOp norm : norms) {
    SmallVector<Value> owned;
    for (Value input : norm.getInputs()) {
      auto arg = dyn_cast<BlockArgument>(input);
      std::string name = arg ? nameOfStepArg(arg.getArgNumber()) : "";
      if (name.empty())
        return fail(norm, "the gradient norm reads a value that is not an "
                          "accumulator argument");
      if (!dropArg.test(arg.getArgNumber()) && !holders[name].empty() &&
          *holders[name].begin() == rank)
        owned.push_back(input);
    }
    b.setInsertionPoint(norm);
    Value local;
    if (owned.empty())
      local = ds::FillOp::create(b, norm.getLoc(), norm.getType(),
                                 b.getF64FloatAttr(0.0));
    else
      local = ds::SumOfSquaresOp::create(b, norm.getLoc(), ValueRange(owned));
    Value total = shard::AllReduceOp::create(b, norm.getLoc(), norm.getType(),
                                             "grid", {0}, local,
                                             shard::ReductionKind::Sum);
    norm.getResult().replaceAllUsesWith(total);
    norm->erase();
  }
  // Dead updates of other ranks' parameters, then their arguments.
  SmallVector<Operation *> stepOps;
  for (Operation &op : stepBody.without_terminator())
    stepOps.push_back(&op);
  for (Operation *op : llvm::reverse(stepOps))
    if (op->use_empty() &&
        (isa<ds::DsDialect>(op->getDialect()) || isConstant(op)))
      op->erase();
  SmallVector<int64_t> newIndex(stepBody.getNumArguments(), -1);
  for (unsigned a = 0, next = 0; a < stepBody.getNumArguments(); ++a)
    if (!dropArg.test(a))
      newIndex[a] = next++;
  for (unsigned a = 0; a < stepBody.getNumArguments(); ++a)
    if (dropArg.test(a) && !stepBody.getArgument(a).use_empty())
      return fail(step, "internal error: argument " + Twine(a) +
                            " of @optimizer_step is still read");
  step.setFunctionType(b.getFunctionType(
      stepBody.getArgumentTypes(), ValueRange(keptResults).getTypes()));
  step.setAllResultAttrs(keptResultAttrs);
  if (failed(step.eraseArguments(dropArg)))
    return fail(step, "internal error: cannot drop other ranks' parameters");
  for (unsigned i = 0; i < step.getNumResults(); ++i)
    if (auto updates = step.getResultAttrOfType<IntegerAttr>(
            i, ds::DsDialect::kUpdatesAttrName))
      step.setResultAttr(i, ds::DsDialect::kUpdatesAttrName,
                         b.getI64IntegerAttr(newIndex[updates.getInt()]));
  step->setAttr(ds::DsDialect::kPipelinePartAttrName,
                ds::PipelinePartAttr::get(context, ds::PipelinePart::optimizer,
                                          /*stage=*/-1));

  // 7. The rank's action list and the slots its buffer pools need: walking
  // the list in order, the most slots of each pool held at once. A sent
  // slot is held until the rank's next group of transfers: the runtime
  // sends on a stream of its own, and the computations between the two
  // groups write other slots while the send is in flight.
  const std::vector<pipeline::Action> &actions =
      schedule->ranks[static_cast<size_t>(rank)];
  std::map<std::pair<std::string, int64_t>, std::pair<int64_t, int64_t>>
      pools; // (kind, stage) -> (held, most)
  auto take = [&](const std::string &kind, int64_t s) {
    auto &[held, most] = pools[{kind, s}];
    most = std::max(most, ++held);
  };
  auto give = [&](const std::string &kind, int64_t s) { --pools[{kind, s}].first; };
  // The slots the previous group sent from.
  SmallVector<std::pair<std::string, int64_t>> sending;
  SmallVector<ds::PipelineActionAttr> actionAttrs;
  for (auto [i, action] : llvm::enumerate(actions)) {
    int64_t s = action.chunk * p + rank;
    if (!pipeline::isCompute(action.kind) &&
        (i == 0 || pipeline::isCompute(actions[i - 1].kind))) {
      for (auto &[kind, stage] : sending)
        give(kind, stage);
      sending.clear();
    }
    switch (action.kind) {
    case pipeline::ActionKind::Forward:
      if (s > 0) give("act_in", s);
      if (s + 1 < numStages) take("act_out", s);
      take("stash", s);
      break;
    case pipeline::ActionKind::Backward:
      give("stash", s);
      if (s + 1 < numStages) give("grad_in", s);
      if (s > 0) take("grad_out", s);
      break;
    case pipeline::ActionKind::BackwardInput:
      if (s + 1 < numStages) give("grad_in", s);
      if (s > 0) take("grad_out", s);
      take("wstash", s);
      break;
    case pipeline::ActionKind::BackwardWeight:
      give("stash", s);
      give("wstash", s);
      break;
    case pipeline::ActionKind::SendActivation:
      sending.push_back({"act_out", s});
      break;
    case pipeline::ActionKind::RecvActivation: take("act_in", s); break;
    case pipeline::ActionKind::SendGradient:
      sending.push_back({"grad_out", s});
      break;
    case pipeline::ActionKind::RecvGradient: take("grad_in", s); break;
    }
    actionAttrs.push_back(ds::PipelineActionAttr::get(
        context, pipeline::toAttr(action.kind), action.microbatch,
        action.chunk, action.peer));
  }

  SmallVector<ds::PipelineRankStageAttr> stageAttrs;
  for (int64_t s : myStages) {
    auto fn = [&](StringRef prefix) -> FlatSymbolRefAttr {
      std::string name = stageName(prefix, s);
      return module.lookupSymbol(name)
                 ? FlatSymbolRefAttr::get(context, name)
                 : FlatSymbolRefAttr();
    };
    stageAttrs.push_back(ds::PipelineRankStageAttr::get(
        context, s, fn("fwd_"), fn("bwd_"), fn("bwdi_"), fn("bwdw_")));
  }
  SmallVector<ds::PipelinePoolAttr> poolAttrs;
  for (auto &[key, counts] : pools)
    poolAttrs.push_back(ds::PipelinePoolAttr::get(
        context, *ds::symbolizePipelinePoolKind(key.first), key.second,
        counts.second, /*slot_bytes=*/std::nullopt, /*offset=*/std::nullopt));
  SmallVector<ds::PipelineRankTiedAttr> tiedAttrs;
  for (BlockArgument arg : stepBody.getArguments()) {
    ds::StateAttr state = ds::getArgumentState(step, arg.getArgNumber());
    if (!state || !state.isAccumulator())
      continue;
    const std::set<int64_t> &ranks = holders[state.getParam()];
    if (ranks.size() < 2)
      continue;
    SmallVector<int64_t> list(ranks.begin(), ranks.end());
    tiedAttrs.push_back(ds::PipelineRankTiedAttr::get(context, state, list));
  }
  module->setAttr(ds::DsDialect::kPipelineRankAttrName,
                  ds::PipelineRankAttr::get(
                      context, rank, p, v, m, dp, pipeline.getSchedule(),
                      stageAttrs, actionAttrs, poolAttrs, tiedAttrs,
                      /*buffers_offset=*/std::nullopt,
                      /*buffers_bytes=*/std::nullopt));
  micro.erase();
}

} // namespace
