//===- Pipeline.cpp - cutting the training step into pipeline stages -------===//
//
// The compile-time half of pipeline parallelism: @micro_step's forward ops
// are cut into p * v contiguous virtual stages of balanced cost, every
// backward op follows the forward op it differentiates, and the module
// records what the plan and the schedule simulator need (docs/pipeline.md).
//
// Which forward op a backward op differentiates is recorded by ds-autodiff:
// the forward op carries an id (ds.forward_id), every op of its derivative
// the same id (ds.grad_of), and clones keep both. A backward op without one
// (built by a later pass) follows its operands. The importer gives every
// ONNX node its own location (its name and index), shared by the ds ops the
// node becomes; cuts never separate those. Nor do they separate an
// all-gather (a tensor-parallel entry's, with the transposes around it)
// from the forward ops that read what it gathered: a cut before the gather
// sends the rank's piece instead of the whole.
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
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringExtras.h"

#include <limits>
#include <map>
#include <set>

namespace dsopt {
#define GEN_PASS_DEF_DSPIPELINE
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

bool isConstant(Operation *op) { return op->hasTrait<OpTrait::ConstantLike>(); }

int64_t bytesOf(Value value) {
  auto type = dyn_cast<ShapedType>(value.getType());
  return type ? ds::getByteSize(type).value_or(0) : 0;
}

std::pair<int64_t, int64_t> costOf(Operation *op) {
  if (auto cost = dyn_cast<ds::CostOpInterface>(op))
    return {cost.getFlops(), cost.getBytesAccessed()};
  return {0, 0};
}

/// A stage's cost for the partition: the balanced quantity, then bytes
/// accessed to break ties.
struct Cost {
  int64_t primary = 0, secondary = 0;
  bool operator<(const Cost &o) const {
    return primary != o.primary ? primary < o.primary
                                : secondary < o.secondary;
  }
};
Cost maxCost(Cost a, Cost b) {
  return {std::max(a.primary, b.primary), std::max(a.secondary, b.secondary)};
}

/// Cuts `pieces` (indivisible runs of ops) into `parts` contiguous,
/// non-empty segments minimising the largest primary cost (exact: the
/// classic linear-partition dynamic program), and among those, greedily, the
/// largest secondary cost. Returns the first piece of each segment.
std::vector<size_t> linearPartition(ArrayRef<Cost> pieces, size_t parts) {
  size_t n = pieces.size();
  std::vector<Cost> prefix(n + 1);
  for (size_t i = 0; i < n; ++i)
    prefix[i + 1] = {prefix[i].primary + pieces[i].primary,
                     prefix[i].secondary + pieces[i].secondary};
  auto segment = [&](size_t from, size_t to) -> Cost { // pieces [from, to)
    return {prefix[to].primary - prefix[from].primary,
            prefix[to].secondary - prefix[from].secondary};
  };
  const Cost infinite{std::numeric_limits<int64_t>::max(),
                      std::numeric_limits<int64_t>::max()};
  // best[k][i]: the first i pieces in k segments; from[k][i]: where the
  // last of them starts.
  std::vector<std::vector<Cost>> best(parts + 1,
                                      std::vector<Cost>(n + 1, infinite));
  std::vector<std::vector<size_t>> from(parts + 1,
                                        std::vector<size_t>(n + 1, 0));
  best[0][0] = Cost{0, 0};
  for (size_t k = 1; k <= parts; ++k)
    for (size_t i = k; i + (parts - k) <= n; ++i)
      for (size_t j = k - 1; j < i; ++j) {
        if (best[k - 1][j].primary == infinite.primary)
          continue;
        Cost candidate = maxCost(best[k - 1][j], segment(j, i));
        if (candidate < best[k][i]) {
          best[k][i] = candidate;
          from[k][i] = j;
        }
      }
  std::vector<size_t> starts(parts);
  size_t end = n;
  for (size_t k = parts; k >= 1; --k) {
    starts[k - 1] = from[k][end];
    end = from[k][end];
  }
  return starts;
}

struct StageFacts {
  int64_t forwardOps = 0;
  int64_t flopsForward = 0, flopsBackward = 0, flopsWeight = 0;
  int64_t bytesForward = 0, paramBytes = 0, activationBytes = 0,
          sendBytes = 0;
};

struct PipelinePass : dsopt::impl::DsPipelineBase<PipelinePass> {
  using DsPipelineBase::DsPipelineBase;
  void runOnOperation() override;
};

void PipelinePass::runOnOperation() {
  ModuleOp module = getOperation();
  auto fail = [&](Operation *at, const Twine &message) {
    at->emitError() << message;
    signalPassFailure();
  };

  // The schedule, checked by the rules of the library that builds it.
  std::optional<pipeline::ScheduleKind> kind =
      pipeline::parseScheduleKind(schedule);
  if (!kind)
    return fail(module, "unknown pipeline schedule '" + schedule +
                            "' (gpipe, 1f1b, interleaved or zb-h1)");
  if (stages < 1 || microbatches < 1 || chunks < 0)
    return fail(module, "pipeline stages and microbatches must be at least "
                        "1, chunks at least 0 (0: the schedule's default)");
  int64_t v = chunks ? chunks
                     : (*kind == pipeline::ScheduleKind::Interleaved ? 2 : 1);
  if (stages * v * microbatches > pipeline::kMaxStageMicrobatches)
    return fail(module, "stages * chunks * microbatches is above " +
                            Twine(pipeline::kMaxStageMicrobatches));
  if (llvm::Expected<pipeline::Schedule> built = pipeline::buildSchedule(
          *kind, stages, microbatches, static_cast<int>(v));
      !built)
    return fail(module, "pipeline schedule " + schedule + ": " +
                            llvm::toString(built.takeError()));
  std::optional<ds::PipelineBalance> balanceKind =
      ds::symbolizePipelineBalance(balance);
  if (!balanceKind)
    return fail(module, "unknown pipeline balance '" + balance +
                            "' (flops, parameters or uniform)");
  ds::PipelineBalance balanceBy = *balanceKind;

  auto micro = module.lookupSymbol<func::FuncOp>("micro_step");
  if (!micro || micro.isDeclaration())
    return fail(module, "no @micro_step to cut into pipeline stages; run "
                        "ds-optimizer first");
  if (auto train = module->getAttrOfType<DictionaryAttr>(
          ds::DsDialect::kTrainAttrName))
    if (auto k = train.getAs<IntegerAttr>("accumulation");
        k && k.getInt() != microbatches)
      return fail(module, "microbatches=" + Twine(microbatches) +
                              " differs from the training step's gradient "
                              "accumulation " +
                              Twine(k.getInt()) +
                              ": the micro-batches of a pipelined step are "
                              "its accumulation steps");
  Block &body = micro.getBody().front();
  Operation *terminator = body.getTerminator();
  if (terminator->getNumOperands() == 0)
    return fail(micro, "@micro_step returns no loss");
  Operation *lossDef = terminator->getOperand(0).getDefiningOp();
  if (!lossDef)
    return fail(micro, "the loss of @micro_step is an argument; there is no "
                       "forward pass to cut");

  // Forward: the ops up to the loss; the partition's sequence leaves out
  // constants.
  SmallVector<Operation *> forwardOps, backwardOps, sequence;
  bool inForward = true;
  for (Operation &op : body.without_terminator()) {
    (inForward ? forwardOps : backwardOps).push_back(&op);
    if (inForward && !isConstant(&op))
      sequence.push_back(&op);
    if (&op == lossDef)
      inForward = false;
  }
  size_t n = sequence.size();
  llvm::DenseSet<Operation *> forwardSet(forwardOps.begin(),
                                         forwardOps.end());

  // A stage may start at op k unless an ONNX node's ops lie on both sides.
  llvm::DenseMap<Location, std::pair<size_t, size_t>> span;
  for (auto [i, op] : llvm::enumerate(sequence)) {
    auto [it, inserted] = span.try_emplace(op->getLoc(), i, i);
    if (!inserted)
      it->second.second = i;
  }
  std::vector<int> spanning(n + 1, 0);
  auto keepTogether = [&](size_t first, size_t last) {
    if (first < last) {
      spanning[first + 1] += 1;
      spanning[last + 1] -= 1;
    }
  };
  for (auto &entry : span)
    keepTogether(entry.second.first, entry.second.second);
  // Nor between an all-gather that grows its input and the forward ops that
  // read the gathered value (through the transposes that move the gathered
  // axis to the front and back): a cut before the gather, or before the
  // transpose feeding it, sends the rank's piece, which a cut after it
  // sends as well whenever a later op still reads it.
  llvm::DenseMap<Operation *, size_t> position;
  for (auto [i, op] : llvm::enumerate(sequence))
    position[op] = i;
  for (auto [i, op] : llvm::enumerate(sequence)) {
    auto gather = dyn_cast<shard::AllGatherOp>(op);
    if (!gather || bytesOf(gather.getResult()) <= bytesOf(gather.getInput()))
      continue;
    size_t first = i, last = i;
    Value input = gather.getInput();
    if (auto transpose = input.getDefiningOp<ds::TransposeOp>();
        transpose && input.hasOneUse() && position.count(transpose))
      first = position.lookup(transpose);
    SmallVector<Value> gathered{gather.getResult()};
    while (!gathered.empty()) {
      Value value = gathered.pop_back_val();
      for (Operation *user : value.getUsers()) {
        auto it = position.find(user);
        if (it == position.end())
          continue;
        last = std::max(last, it->second);
        if (isa<ds::TransposeOp>(user))
          gathered.push_back(user->getResult(0));
      }
    }
    keepTogether(first, last);
  }
  std::vector<bool> cutBefore(n, false);
  std::vector<size_t> pieceStarts;
  int running = 0;
  for (size_t k = 0; k < n; ++k) {
    running += spanning[k];
    cutBefore[k] = k == 0 || running == 0;
    if (cutBefore[k])
      pieceStarts.push_back(k);
  }

  // Per-op costs.
  llvm::DenseSet<Value> paramsSeen;
  auto isParam = [&](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && arg.getOwner() == &body &&
           micro.getArgAttr(arg.getArgNumber(), ds::DsDialect::kParamAttrName);
  };
  std::vector<Cost> opCost(n);
  std::vector<int64_t> opFlops(n), opBytes(n);
  for (auto [i, op] : llvm::enumerate(sequence)) {
    auto [flops, bytes] = costOf(op);
    opFlops[i] = flops;
    opBytes[i] = bytes;
    int64_t primary = flops;
    if (balanceBy == ds::PipelineBalance::uniform) {
      primary = 1;
    } else if (balanceBy == ds::PipelineBalance::parameters) {
      primary = 0;
      for (Value operand : op->getOperands())
        if (isParam(operand) && paramsSeen.insert(operand).second)
          primary += bytesOf(operand);
    }
    opCost[i] = {primary, bytes};
  }
  std::vector<Cost> pieces;
  for (size_t p = 0; p < pieceStarts.size(); ++p) {
    size_t end = p + 1 < pieceStarts.size() ? pieceStarts[p + 1] : n;
    Cost c;
    for (size_t i = pieceStarts[p]; i < end; ++i) {
      c.primary += opCost[i].primary;
      c.secondary += opCost[i].secondary;
    }
    pieces.push_back(c);
  }
  size_t virtualStages = static_cast<size_t>(stages * v);
  if (virtualStages > pieces.size())
    return fail(micro, Twine(virtualStages) + " pipeline stages (stages=" +
                           Twine(stages) + " x chunks=" + Twine(v) +
                           ") are more stages than the graph can be cut "
                           "into: its forward pass has " +
                           Twine(pieces.size() - 1) +
                           " cuttable positions, so at most " +
                           Twine(pieces.size()) + " stages");
  std::vector<size_t> starts = linearPartition(pieces, virtualStages);

  // Stage of every op.
  llvm::DenseMap<Operation *, int64_t> stageOf;
  std::vector<int64_t> sequenceStage(n);
  {
    size_t s = 0;
    for (size_t i = 0; i < n; ++i) {
      while (s + 1 < virtualStages && i >= pieceStarts[starts[s + 1]])
        ++s;
      sequenceStage[i] = s;
      stageOf[sequence[i]] = s;
    }
  }
  llvm::DenseMap<int64_t, int64_t> stageOfForwardId;
  for (auto [i, op] : llvm::enumerate(sequence))
    if (auto id = op->getAttrOfType<IntegerAttr>(
            ds::DsDialect::kForwardIdAttrName))
      stageOfForwardId[id.getInt()] = sequenceStage[i];
  auto userStage = [&](Operation *op, bool lowest) -> std::optional<int64_t> {
    std::optional<int64_t> result;
    for (Operation *user : op->getUsers())
      if (auto it = stageOf.find(user); it != stageOf.end())
        result = result ? (lowest ? std::min(*result, it->second)
                                  : std::max(*result, it->second))
                        : it->second;
    return result;
  };
  // Forward constants: with their first (lowest-stage) user.
  for (Operation *op : llvm::reverse(forwardOps))
    if (isConstant(op))
      stageOf[op] = userStage(op, /*lowest=*/true).value_or(0);

  int64_t lastStage = static_cast<int64_t>(virtualStages) - 1;
  // Parameters: the stages whose forward ops read them. The gradient
  // accumulation of a parameter goes with the first of them.
  llvm::MapVector<Value, std::set<int64_t>> paramStages;
  for (Operation *op : forwardOps)
    for (Value operand : op->getOperands())
      if (isParam(operand))
        paramStages[operand].insert(stageOf.lookup(op));
  llvm::DenseMap<Operation *, int64_t> accumulationStage;
  for (unsigned r = 1; r < terminator->getNumOperands(); ++r) {
    auto updates = micro.getResultAttrOfType<IntegerAttr>(
        r, ds::DsDialect::kUpdatesAttrName);
    Operation *def = terminator->getOperand(r).getDefiningOp();
    if (!updates || !def || stageOf.count(def))
      continue;
    auto state = micro.getArgAttrOfType<ds::StateAttr>(
        updates.getInt(), ds::DsDialect::kStateAttrName);
    if (!state || !state.isAccumulator())
      continue;
    StringRef name = state.getParam();
    for (auto &[param, used] : paramStages) {
      auto attr = micro.getArgAttrOfType<ds::ParamAttr>(
          cast<BlockArgument>(param).getArgNumber(),
          ds::DsDialect::kParamAttrName);
      if (attr.getName() == name && !used.empty())
        accumulationStage[def] = *used.begin();
    }
  }

  // Backward ops: the accumulation's stage, else the stage of the forward
  // op they differentiate, else their operands', else (second pass) their
  // users'. A cast that widens a 16-bit value goes with its users, so that
  // a gradient crosses stages in 16 bits.
  auto widens = [](Operation *op) {
    auto cast = dyn_cast<ds::CastOp>(op);
    if (!cast)
      return false;
    auto from = dyn_cast<FloatType>(getElementTypeOrSelf(cast.getInput()));
    auto to = dyn_cast<FloatType>(getElementTypeOrSelf(cast.getType()));
    return from && to && from.getWidth() < to.getWidth();
  };
  SmallVector<Operation *> unresolved;
  for (Operation *op : backwardOps) {
    if (widens(op) && !accumulationStage.count(op)) {
      unresolved.push_back(op);
      continue;
    }
    if (auto it = accumulationStage.find(op); it != accumulationStage.end()) {
      stageOf[op] = it->second;
      continue;
    }
    if (auto gradOf =
            op->getAttrOfType<IntegerAttr>(ds::DsDialect::kGradOfAttrName)) {
      if (auto it = stageOfForwardId.find(gradOf.getInt());
          it != stageOfForwardId.end() && !isConstant(op)) {
        stageOf[op] = it->second;
        continue;
      }
    }
    std::optional<int64_t> fromBackward, fromForward;
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (!def || isConstant(def))
        continue;
      auto it = stageOf.find(def);
      if (it == stageOf.end())
        continue;
      bool defIsForward = def->isBeforeInBlock(lossDef) || def == lossDef;
      if (!defIsForward && !fromBackward)
        fromBackward = it->second;
      if (defIsForward)
        fromForward = std::max(fromForward.value_or(0), it->second);
    }
    if (isConstant(op) || (!fromBackward && !fromForward)) {
      unresolved.push_back(op);
      continue;
    }
    stageOf[op] = fromBackward ? *fromBackward : *fromForward;
  }
  for (Operation *op : llvm::reverse(unresolved))
    stageOf[op] = userStage(op, /*lowest=*/true).value_or(lastStage);

  // The ops that add up a gradient accumulation's contributions. Each stage
  // adds its own contributions to its own copy of the accumulator
  // (ds-pipeline-split), and the copies of a parameter read on several
  // stages are summed once per step (`tied`), so a contribution never
  // crosses a stage as a gradient, and nothing waits for it.
  llvm::DenseSet<Operation *> accumulating;
  for (OpOperand &result : terminator->getOpOperands()) {
    std::optional<ds::GradientAccumulation> match =
        ds::matchGradientAccumulation(micro, result);
    if (!match)
      continue;
    GradientContributions contributions = collectGradientContributions(
        *match, [&](Operation *op) { return forwardSet.contains(op); });
    accumulating.insert(contributions.tree.begin(), contributions.tree.end());
    if (contributions.widen)
      accumulating.insert(contributions.widen);
    if (match->add)
      accumulating.insert(match->add);
  }
  // A value's readers on stages other than its own, accumulations aside.
  auto readsElsewhere = [&](Operation *user, int64_t stage) {
    return user != terminator && !accumulating.contains(user) &&
           stageOf[user] != stage;
  };

  // Weight-gradient ops, zb-h1's deferrable W: the backward ops of a stage
  // that no gradient leaving the stage depends on. The rest (B) is what the
  // previous stage waits for. The first stage sends no gradient, so all of
  // its backward is deferrable.
  llvm::DenseSet<Operation *> critical;
  {
    SmallVector<Operation *> work;
    for (Operation *op : backwardOps)
      if (llvm::any_of(op->getUsers(),
                       [&](Operation *user) {
                         return readsElsewhere(user, stageOf[op]);
                       }) &&
          critical.insert(op).second)
        work.push_back(op);
    llvm::DenseSet<Operation *> backwardSet(backwardOps.begin(),
                                            backwardOps.end());
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp();
            def && backwardSet.contains(def) &&
            stageOf[def] == stageOf[op] && critical.insert(def).second)
          work.push_back(def);
    }
  }
  auto isWeightOp = [&](Operation *op) { return !critical.contains(op); };

  // Per-stage facts.
  std::vector<StageFacts> facts(virtualStages);
  for (auto [i, op] : llvm::enumerate(sequence)) {
    StageFacts &f = facts[sequenceStage[i]];
    ++f.forwardOps;
    f.flopsForward += opFlops[i];
    f.bytesForward += opBytes[i];
  }
  for (Operation *op : backwardOps) {
    StageFacts &f = facts[stageOf[op]];
    int64_t flops = costOf(op).first;
    f.flopsBackward += flops;
    if (isWeightOp(op))
      f.flopsWeight += flops;
  }
  for (auto &[param, used] : paramStages)
    for (int64_t s : used)
      facts[s].paramBytes += bytesOf(param);
  // Stashed activations: forward values (op results and graph inputs) the
  // stage's backward reads, but for weight views, which the backward
  // recomputes (WeightViews.h).
  auto isForwardValue = [&](Value value) {
    if (auto arg = dyn_cast<BlockArgument>(value))
      return arg.getOwner() == &body &&
             micro.getArgAttr(arg.getArgNumber(),
                              ds::DsDialect::kInputAttrName) != nullptr;
    Operation *def = value.getDefiningOp();
    return def && forwardSet.contains(def) && !isConstant(def);
  };
  {
    std::vector<llvm::DenseSet<Value>> stashed(virtualStages);
    for (Operation *op : backwardOps)
      for (Value operand : op->getOperands())
        if (isForwardValue(operand) && !isWeightView(operand) &&
            stashed[stageOf[op]].insert(operand).second)
          facts[stageOf[op]].activationBytes += bytesOf(operand);
  }
  // Transfers: a value computed on stage a and read on stage b != a goes
  // from a to b once, however many cuts lie between. Gradient
  // contributions stay on their stage (`accumulating`).
  struct Transfer {
    int64_t bytes = 0, values = 0;
  };
  std::map<std::tuple<int64_t, int64_t, bool>, Transfer> transfers;
  for (Operation &op : body.without_terminator()) {
    if (isConstant(&op))
      continue;
    int64_t from = stageOf[&op];
    bool isForward = forwardSet.contains(&op);
    for (Value result : op.getResults()) {
      std::set<int64_t> readers;
      for (Operation *user : result.getUsers())
        if (readsElsewhere(user, from))
          readers.insert(stageOf[user]);
      for (int64_t to : readers) {
        Transfer &t = transfers[{from, to, isForward}];
        t.bytes += bytesOf(result);
        ++t.values;
        facts[from].sendBytes += bytesOf(result);
      }
    }
  }

  // Record.
  Builder b(module.getContext());
  auto i64 = [&](int64_t value) { return b.getI64IntegerAttr(value); };
  for (Operation &op : body.without_terminator())
    op.setAttr(ds::DsDialect::kStageAttrName, i64(stageOf[&op]));

  MLIRContext *context = module.getContext();
  SmallVector<ds::PipelineStageAttr> stageAttrs;
  for (auto [s, f] : llvm::enumerate(facts))
    stageAttrs.push_back(ds::PipelineStageAttr::get(
        context, s, f.forwardOps, f.flopsForward, f.flopsBackward,
        f.flopsWeight, f.bytesForward, f.paramBytes, f.activationBytes,
        f.sendBytes));
  SmallVector<ds::PipelineTransferAttr> transferAttrs;
  for (auto &[key, t] : transfers) {
    auto [from, to, isForward] = key;
    transferAttrs.push_back(ds::PipelineTransferAttr::get(
        context, from, to,
        isForward ? ds::PipelineTransferKind::activation
                  : ds::PipelineTransferKind::gradient,
        t.bytes, t.values));
  }
  SmallVector<ds::PipelineTiedAttr> tiedAttrs;
  for (auto &[param, used] : paramStages) {
    if (used.size() < 2)
      continue;
    auto attr = micro.getArgAttrOfType<ds::ParamAttr>(
        cast<BlockArgument>(param).getArgNumber(),
        ds::DsDialect::kParamAttrName);
    SmallVector<int64_t> list(used.begin(), used.end());
    tiedAttrs.push_back(
        ds::PipelineTiedAttr::get(context, attr.getName(), list));
  }
  SmallVector<Attribute> opNames, opNodes;
  SmallVector<bool> cuts(cutBefore.begin(), cutBefore.end());
  for (Operation *op : sequence) {
    opNames.push_back(b.getStringAttr(op->getName().getStringRef()));
    opNodes.push_back(b.getStringAttr(ds::getNodeName(op->getLoc())));
  }
  module->setAttr(
      ds::DsDialect::kPipelineAttrName,
      ds::PipelineAttr::get(
          context, stages, microbatches, pipeline::toAttr(*kind), v, balanceBy,
          stageAttrs, transferAttrs, tiedAttrs, b.getArrayAttr(opNames),
          b.getArrayAttr(opNodes), b.getDenseI64ArrayAttr(opFlops),
          b.getDenseI64ArrayAttr(opBytes),
          b.getDenseI64ArrayAttr(sequenceStage),
          b.getDenseBoolArrayAttr(cuts)));
}

} // namespace
