//===- TensorParallel.cpp - Megatron's layout from the ops' sharding rules ===//
//
// Makes the forward @main the program of one of N tensor-parallel ranks,
// before ds-autodiff differentiates it. The layout is found, not named:
//
//  1. A group of matmuls reading the same replicated activation x, each
//     with a 2-D parameter as its other operand, is a column-parallel
//     candidate: each parameter is split along the axis that splits the
//     product's output (the first its rule accepts without splitting x).
//  2. The split is carried forward op by op through the ops' sharding rules
//     (ShardingRuleOpInterface). A rule may ask for a replicated operand to
//     be split alike: allowed for a parameter (a bias, the row-parallel
//     weight), refused for an activation or a constant. A matmul that
//     contracts the split gives a partial sum: the region's exit, completed
//     by one shard.all_reduce over tp (Megatron's g).
//  3. The region holds when every split value ends in such a partial sum,
//     no split value is returned, and every use of a split parameter lies in
//     it. Then x enters through ds.tp_copy (Megatron's f: identity; its
//     derivative is the backward's all-reduce), sharded parameters take
//     their shard's type and #ds.tp_split, and every split value its
//     rank-local type.
//
// A fused projection whose output is cut into k equal parts (Q, K, V) is
// split in k blocks, so that each part is split evenly. A failed region is
// replicated with a warning; one that fails only because the ranks do not
// divide a size (heads, widths) is an error naming the op and the sizes.
//
// Running before autodiff keeps the backward Megatron's by construction:
// the derivative of g is the identity and that of f the all-reduce, so
// exactly one all-reduce per column/row pair runs each way, and gradients,
// optimizer states and ZeRO's partitions of split parameters are shards
// without any later pass knowing about tensor parallelism.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"
#include "dsopt/Transforms/ArgAttrs.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FormatVariadic.h"

namespace dsopt {
#define GEN_PASS_DEF_DSTENSORPARALLEL
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

constexpr StringLiteral kGrid = "grid";

RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// The op as messages name it: its name and ONNX node, if it has one.
std::string describe(Operation *op) {
  std::string node = ds::getNodeName(op->getLoc());
  std::string name = op->getName().getStringRef().str();
  return node.empty() ? name : name + " (node '" + node + "')";
}

/// A tentative tensor-parallel region: the layout of every value it splits.
struct Region {
  llvm::DenseMap<Value, ds::TensorSplit> splits;
  llvm::SetVector<Operation *> ops;
  llvm::SetVector<BlockArgument> params;
  llvm::SetVector<Value> entries;  // replicated activations entering (f)
  llvm::SetVector<Value> partials; // partial sums leaving (g)
  llvm::SetVector<Value> returned; // split results of the function
  // Padding: an axis the ranks do not divide may be split unevenly (each
  // rank ds::TensorSplitAttr::paddedPiece entries, zeros past V), the
  // model extent of each such value's split axis recorded (a vocabulary;
  // see padOk).
  bool pad = false;
  llvm::DenseMap<Value, int64_t> wholes;
  // Ops that run on the pieces in another form (rule.rewrite), with the
  // layouts of their operands.
  llvm::MapVector<Operation *, SmallVector<ds::TensorSplit>> rewrites;
  // Why it failed.
  Operation *failedAt = nullptr;
  std::string reason;
  bool uneven = false;
};

class TensorParallel
    : public dsopt::impl::DsTensorParallelBase<TensorParallel> {
public:
  using DsTensorParallelBase::DsTensorParallelBase;
  void runOnOperation() override;

private:
  ds::TensorSplit splitOf(const Region &region, Value value) const {
    auto it = region.splits.find(value);
    if (it != region.splits.end())
      return it->second;
    auto done = committed.find(value);
    return done == committed.end() ? ds::TensorSplit::replicated()
                                   : done->second;
  }
  /// A plain split into equal pieces that are not multiples of
  /// ds::TensorSplitAttr::kPadMultiple (see paddedPiece).
  bool unaligned(Value value, ds::TensorSplit split) const {
    if (!split.isSplit() || split.blocks != 1)
      return false;
    int64_t extent = tensorType(value).getDimSize(split.dim);
    return extent % size == 0 &&
           (extent / size) % ds::TensorSplitAttr::kPadMultiple != 0;
  }
  bool isParam(Value value) const {
    auto arg = dyn_cast<BlockArgument>(value);
    return arg && main.getArgAttr(arg.getArgNumber(),
                                  ds::DsDialect::kParamAttrName);
  }
  bool fail(Region &region, Operation *op, StringRef why, bool uneven = false) {
    region.failedAt = op;
    region.reason = why.str();
    region.uneven = uneven;
    return false;
  }
  struct Seed {
    SmallVector<ds::TensorSplit> given;
    ds::ShardingRule rule;
  };
  std::optional<Seed> seedOf(Region &region, Operation *op,
                             BlockArgument weight, int64_t blocks);
  bool grow(Region &region, ArrayRef<std::pair<Operation *, BlockArgument>> group,
            int64_t blocks);
  bool apply(Region &region, Operation *op, ArrayRef<ds::TensorSplit> given,
             const ds::ShardingRule &rule);
  bool padOk(Region &region, Operation *op, const ds::ShardingRule &rule);
  void commit(Region &region);
  std::string paramName(BlockArgument arg) const {
    auto param = main.getArgAttrOfType<ds::ParamAttr>(
        arg.getArgNumber(), ds::DsDialect::kParamAttrName);
    return param ? param.getName().str() : "";
  }

  LogicalResult sequenceParallelize(int16_t tpAxis);

  mutable func::FuncOp main;
  // The all-reduces completing the regions' partial sums (Megatron's g),
  // which --sequence-parallel turns into reduce-scatters.
  SmallVector<shard::AllReduceOp> regionReduces;
  llvm::DenseMap<Value, ds::TensorSplit> committed;
  llvm::DenseSet<Operation *> committedOps;
  llvm::DenseSet<Value> decided;
  SmallVector<Region, 0> regions;
};

/// Records the rule's layouts for `op`: parameters it asks to split are
/// split, replicated activations it reads next to split ones enter the
/// region, partial results leave it.
bool TensorParallel::apply(Region &region, Operation *op,
                           ArrayRef<ds::TensorSplit> given,
                           const ds::ShardingRule &rule) {
  bool splitsSomething = llvm::any_of(rule.results, [](ds::TensorSplit s) {
    return !s.isReplicated();
  });
  // Every piece is the same size: widths the ranks do not divide are the
  // user's to fix (or to leave replicated). A padded region pads every
  // plain split whose equal pieces would not be whole multiples of 8
  // (unaligned(): a vocabulary the ranks divide, as 30522 at tp 2).
  auto uneven = [&](Value value, ds::TensorSplit split) {
    if (!split.isSplit())
      return false;
    int64_t extent = tensorType(value).getDimSize(split.dim);
    bool divides = extent % (split.blocks * size) == 0;
    if (divides && !(region.pad && unaligned(value, split)))
      return false;
    if (region.pad && split.blocks == 1) {
      region.wholes[value] = extent;
      return false;
    }
    fail(region, op,
         llvm::formatv("axis {0} of size {1} of {2} does not split into {3} "
                       "x {4} equal pieces",
                       split.dim, extent,
                       isParam(value) ? "parameter '" +
                                            paramName(cast<BlockArgument>(
                                                value)) +
                                            "'"
                                      : std::string("its result"),
                       split.blocks, static_cast<int64_t>(size))
             .str(),
         /*uneven=*/true);
    return true;
  };
  for (auto [operand, want] : llvm::zip(op->getOperands(), rule.operands))
    if (uneven(operand, want))
      return false;
  for (auto [result, split] : llvm::zip(op->getResults(), rule.results))
    if (uneven(result, split))
      return false;
  if (region.pad && !padOk(region, op, rule))
    return false;
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    ds::TensorSplit want = rule.operands[i];
    if (given[i] == want) {
      // A whole value read beside split ones gets a gradient summed over
      // this rank's piece only: f completes it (an activation; also a
      // parameter broadcast along the split axis). A rank-local form reads
      // it whole and gives it its whole gradient (the loss's class weights).
      if (want.isReplicated() && splitsSomething && !rule.rewrite &&
          isa<FloatType>(getElementTypeOrSelf(operand)) &&
          !operand.getDefiningOp<ds::ConstantOp>())
        region.entries.insert(operand);
      continue;
    }
    if (!given[i].isReplicated())
      return fail(region, op, "its operands' splits do not match");
    if (!isParam(operand) || decided.contains(operand))
      return fail(region, op,
                  operand.getDefiningOp<ds::ConstantOp>()
                      ? "a constant operand would have to be split"
                      : "a replicated activation would have to be split");
    region.splits[operand] = want;
    region.params.insert(cast<BlockArgument>(operand));
  }
  if (rule.rewrite)
    region.rewrites[op] = rule.operands;
  for (auto [result, split] : llvm::zip(op->getResults(), rule.results)) {
    if (split.partial)
      region.partials.insert(result);
    else if (split.isSplit())
      region.splits[result] = split;
  }
  region.ops.insert(op);
  return true;
}

/// Padding is exact when the padded entries never reach a sum: an op that
/// reads a padded value either keeps the padded axis as it is (elementwise,
/// a transpose, a reshape that leaves the axis whole, a product along
/// another axis: the padding stays in its own places) or masks it away in
/// its rank-local form (the lookup reads only rows below V, the loss
/// leaves logits past V out of its sums). Contracting or normalizing along
/// a padded axis, which the rules would allow or a partial sum would make,
/// is refused.
bool TensorParallel::padOk(Region &region, Operation *op,
                           const ds::ShardingRule &rule) {
  std::optional<int64_t> whole;
  for (Value operand : op->getOperands())
    if (auto it = region.wholes.find(operand); it != region.wholes.end())
      whole = it->second;
  bool padsNew = false;
  for (auto [result, split] : llvm::zip(op->getResults(), rule.results)) {
    auto it = region.wholes.find(result);
    padsNew |= it != region.wholes.end() && !whole;
    if (!whole)
      continue;
    if (rule.rewrite)
      continue;
    if (split.partial)
      return fail(region, op,
                  llvm::formatv("it sums along an axis padded from {0}", *whole)
                      .str(),
                  /*uneven=*/true);
    if (split.isSplit() &&
        tensorType(result).getDimSize(split.dim) != *whole)
      return fail(region, op,
                  llvm::formatv("it reshapes an axis padded from {0}", *whole)
                      .str(),
                  /*uneven=*/true);
  }
  // Only a parameter's axis (the table's, the head's) may start a padding.
  if (padsNew)
    return fail(region, op, "it pads an axis no parameter pads",
                /*uneven=*/true);
  return true;
}

/// The split of `weight` that makes `op` a column-parallel product: its
/// result split, its other operands as they are.
std::optional<TensorParallel::Seed>
TensorParallel::seedOf(Region &region, Operation *op, BlockArgument weight,
                       int64_t blocks) {
  auto rule = dyn_cast<ds::ShardingRuleOpInterface>(op);
  if (!rule)
    return std::nullopt;
  for (int64_t dim = 0; dim < tensorType(weight).getRank(); ++dim) {
    Seed seed;
    for (Value operand : op->getOperands())
      seed.given.push_back(operand == weight
                               ? ds::TensorSplit::along(dim, blocks)
                               : splitOf(region, operand));
    if (failed(rule.getShardingRule(seed.given, size, seed.rule))) {
      if (seed.rule.uneven) {
        fail(region, op, seed.rule.reason, true);
        return std::nullopt;
      }
      continue;
    }
    // Only parameters (a bias) may be asked to split alike: the activation
    // the product reads stays whole.
    bool local = true;
    for (auto [operand, given, want] :
         llvm::zip(op->getOperands(), seed.given, seed.rule.operands))
      local &= given == want || (given.isReplicated() && isParam(operand) &&
                                 !decided.contains(operand));
    if (local && llvm::all_of(seed.rule.results, [](ds::TensorSplit s) {
          return s.isSplit() || s.partial;
        }))
      return seed;
  }
  return std::nullopt;
}

bool TensorParallel::grow(
    Region &region, ArrayRef<std::pair<Operation *, BlockArgument>> group,
    int64_t blocks) {
  // The column-parallel seeds.
  for (auto [op, weight] : group) {
    if (!isa<ds::ShardingRuleOpInterface>(op))
      return fail(region, op, "it has no sharding rule");
    std::optional<Seed> seed = seedOf(region, op, weight, blocks);
    if (!seed)
      return region.failedAt ? false
                             : fail(region, op,
                                    "no split of its weight leaves the "
                                    "product rank-local");
    region.splits[weight] = seed->given[llvm::find(op->getOperands(), weight) -
                                        op->operand_begin()];
    region.params.insert(weight);
    if (!apply(region, op, seed->given, seed->rule))
      return false;
  }
  // Carry the splits forward.
  Block &body = main.getBody().front();
  for (Operation &op : llvm::make_range(
           std::next(Block::iterator(group.front().first)), body.end())) {
    if (region.ops.contains(&op) || committedOps.contains(&op))
      continue;
    SmallVector<ds::TensorSplit> given;
    bool touched = false;
    for (Value operand : op.getOperands()) {
      given.push_back(splitOf(region, operand));
      touched |= region.splits.count(operand) != 0;
    }
    if (!touched)
      continue;
    // A split value the function returns beside the loss (the logits) is
    // gathered whole for the caller; a training step drops it.
    if (isa<func::ReturnOp>(op)) {
      for (Value operand : op.getOperands()) {
        auto it = region.splits.find(operand);
        if (it == region.splits.end())
          continue;
        if (it->second.blocks != 1)
          return fail(region, &op,
                      "a value split in blocks is a result of the function");
        region.returned.insert(operand);
      }
      continue;
    }
    auto rule = dyn_cast<ds::ShardingRuleOpInterface>(op);
    if (!rule)
      return fail(region, &op, "it has no sharding rule");
    ds::ShardingRule answer;
    if (failed(rule.getShardingRule(given, size, answer)))
      return fail(region, &op, answer.reason, answer.uneven);
    if (!apply(region, &op, given, answer))
      return false;
  }
  // A region ends in partial sums (g) or in an op that completes the split
  // itself (the vocabulary-parallel loss).
  if (region.partials.empty() && region.rewrites.empty())
    return fail(region, group.front().first,
                "its split never meets a row-parallel product");
  for (BlockArgument param : region.params)
    for (Operation *user : param.getUsers())
      if (!region.ops.contains(user))
        return fail(region, user,
                    "it uses split parameter '" + paramName(param) +
                        "' outside the region");
  return true;
}

void TensorParallel::commit(Region &region) {
  for (auto &[value, split] : region.splits)
    committed[value] = split;
  for (Operation *op : region.ops)
    committedOps.insert(op);
  regions.push_back(std::move(region));
}

void TensorParallel::runOnOperation() {
  ModuleOp module = getOperation();
  if (size < 1 || dp < 1) {
    module.emitError() << "ds-tensor-parallel: size and dp must be at least 1";
    return signalPassFailure();
  }
  if (size == 1)
    return;
  main = module.lookupSymbol<func::FuncOp>("main");
  if (!main || module.lookupSymbol("main_grad") ||
      module.lookupSymbol("micro_step") || module.lookupSymbol(kGrid)) {
    module.emitError() << "ds-tensor-parallel runs on the imported forward "
                          "@main, before ds-autodiff and without a grid";
    return signalPassFailure();
  }
  Block &body = main.getBody().front();
  auto weightOperand = [&](Operation &op) -> BlockArgument {
    for (Value operand : op.getOperands())
      if (isParam(operand) && tensorType(operand).getRank() == 2 &&
          !decided.contains(operand))
        return cast<BlockArgument>(operand);
    return nullptr;
  };
  for (Operation &op : body) {
    BlockArgument weight = weightOperand(op);
    if (!weight || committedOps.contains(&op))
      continue;
    // The activation the product reads, and every product of it with a
    // parameter.
    Value input;
    for (Value operand : op.getOperands())
      if (!input && !isParam(operand) &&
          !operand.getDefiningOp<ds::ConstantOp>())
        input = operand;
    // A parameter read at constant positions (a position embedding's
    // table) is no candidate: it stays whole.
    if (!input && llvm::any_of(op.getOperands(), [&](Value operand) {
          return operand.getDefiningOp<ds::ConstantOp>();
        }))
      continue;
    SmallVector<std::pair<Operation *, BlockArgument>> group;
    if (input && !committed.count(input)) {
      for (Operation *user : input.getUsers())
        if (BlockArgument w = weightOperand(*user))
          if (w != input && !committedOps.contains(user) &&
              llvm::none_of(group, [&](auto &g) { return g.first == user; }))
            group.push_back({user, w});
    } else {
      group.push_back({&op, weight});
    }
    // Only products a split weight makes column-parallel are candidates
    // (a parameter added to an activation is not); an op without a rule
    // stays, for the warning.
    llvm::erase_if(group, [&](auto &g) {
      Region probe;
      return isa<ds::ShardingRuleOpInterface>(g.first) &&
             !seedOf(probe, g.first, g.second, 1) && !probe.uneven;
    });
    if (group.empty())
      continue;
    llvm::sort(group, [](auto &a, auto &b) {
      return a.first->isBeforeInBlock(b.first);
    });
    Region region;
    bool ok = grow(region, group, 1);
    // A split into k equal parts asks for a k-block split.
    if (!ok && !region.uneven && isa_and_nonnull<ds::SplitOp>(region.failedAt)) {
      int64_t blocks = region.failedAt->getNumResults();
      region = Region();
      ok = grow(region, group, blocks);
    }
    // A size the ranks do not divide, or whose equal pieces would not be
    // multiples of 8: padded, where the padding can be masked exactly (a
    // vocabulary; padOk). Else an unaligned region stays as it split.
    Region padded;
    bool misaligned = ok && llvm::any_of(region.splits, [&](auto &entry) {
                        return unaligned(entry.first, entry.second);
                      });
    if ((!ok && region.uneven) || misaligned) {
      padded.pad = true;
      if (grow(padded, group, 1)) {
        region = std::move(padded);
        ok = true;
      }
    }
    for (auto &[user, w] : group)
      decided.insert(w);
    if (ok) {
      for (BlockArgument param : region.params)
        decided.insert(param);
      commit(region);
      continue;
    }
    std::string names;
    for (auto &[user, w] : group)
      names += (names.empty() ? "'" : ", '") + paramName(w) + "'";
    // A table whose rows the ranks do not divide, and whose padding could
    // not be masked: it stays whole, as a lookup with no rule.
    auto lookup = [&](std::pair<Operation *, BlockArgument> seed) {
      Region probe;
      std::optional<Seed> found = seedOf(probe, seed.first, seed.second, 1);
      return found && llvm::any_of(found->rule.results,
                                   [](ds::TensorSplit s) { return s.partial; });
    };
    if (region.uneven && lookup(group.front())) {
      region.failedAt->emitWarning()
          << "ds-tensor-parallel: parameter" << (group.size() > 1 ? "s " : " ")
          << names << " stay" << (group.size() > 1 ? "" : "s")
          << " replicated: " << describe(region.failedAt) << ": "
          << region.reason << ", and padded: " << describe(padded.failedAt)
          << ": " << padded.reason;
      continue;
    }
    if (region.uneven) {
      region.failedAt->emitError()
          << "ds-tensor-parallel: cannot split " << describe(region.failedAt)
          << " over " << static_cast<int64_t>(size)
          << " tp ranks: " << region.reason << " (the layer of parameter"
          << (group.size() > 1 ? "s " : " ") << names << ")";
      return signalPassFailure();
    }
    region.failedAt->emitWarning()
        << "ds-tensor-parallel: parameter" << (group.size() > 1 ? "s " : " ")
        << names << " stay" << (group.size() > 1 ? "" : "s")
        << " replicated: " << describe(region.failedAt) << ": "
        << region.reason;
  }

  // Rewrite: the grid, shard types, f and g.
  OpBuilder b(module.getContext());
  Operation *grid =
      ds::buildDeviceGrid(b, module, {{ds::GridAxis::dp, dp},
                                      {ds::GridAxis::tp, size}});
  int16_t tpAxis = static_cast<int16_t>(
      *ds::getDeviceGridAxis(grid, ds::GridAxis::tp));
  // A padded axis's pieces are ds::TensorSplitAttr::paddedPiece entries.
  auto localType = [&](const Region &region, Value value,
                       ds::TensorSplit split) {
    RankedTensorType type = tensorType(value);
    SmallVector<int64_t> shape(type.getShape());
    shape[split.dim] =
        region.wholes.lookup(value)
            ? ds::TensorSplitAttr::paddedPiece(shape[split.dim], size)
            : llvm::divideCeil(shape[split.dim], size);
    return type.clone(shape);
  };
  // Set at once after the loop (ArgAttrs.h).
  SmallVector<DictionaryAttr> argAttrs;
  main.getAllArgAttrs(argAttrs);
  bool anySplit = false;
  for (Region &region : regions) {
    for (BlockArgument param : region.params) {
      ds::TensorSplit split = region.splits[param];
      setArgAttrIn(argAttrs, param.getArgNumber(),
                   ds::DsDialect::kTpSplitAttrName,
                   ds::TensorSplitAttr::get(module.getContext(), split.dim,
                                            split.blocks, size,
                                            region.wholes.lookup(param)));
      anySplit = true;
    }
    for (auto &[value, split] : region.splits)
      value.setType(localType(region, value, split));
    // A dropout of a split activation draws each rank's own mask
    // (Megatron's model-parallel RNG); one of a replicated activation, the
    // same mask on every rank, as it draws its seed's.
    for (Operation *op : region.ops)
      if (auto dropout = dyn_cast<ds::DropoutOp>(op))
        if (region.splits.count(dropout.getResult()))
          dropout->setAttr(ds::DsDialect::kTpRankSeedAttrName,
                           b.getUnitAttr());
  }
  if (anySplit)
    main.setAllArgAttrs(argAttrs);
  // g first: a region may enter on an earlier one's partial sum (a
  // column-parallel product reading a row-parallel one's output directly),
  // and then f must take the completed sum that g leaves, not the partial
  // whose uses g has taken over.
  llvm::DenseMap<Value, Value> completed;
  for (Region &region : regions)
    for (Value partial : region.partials) {
      b.setInsertionPointAfterValue(partial);
      auto reduce = shard::AllReduceOp::create(
          b, partial.getLoc(), partial.getType(), kGrid, {tpAxis}, partial,
          shard::ReductionKind::Sum);
      partial.replaceAllUsesExcept(reduce, reduce);
      completed[partial] = reduce;
      regionReduces.push_back(reduce);
    }
  for (Region &region : regions)
    for (Value entry : region.entries) {
      entry = completed.lookup(entry) ? completed.lookup(entry) : entry;
      if (auto arg = dyn_cast<BlockArgument>(entry))
        b.setInsertionPointToStart(&body);
      else
        b.setInsertionPointAfter(entry.getDefiningOp());
      Value copy = ds::TpCopyOp::create(b, entry.getLoc(), entry.getType(),
                                        entry, kGrid, tpAxis);
      entry.replaceUsesWithIf(copy, [&](OpOperand &use) {
        return region.ops.contains(use.getOwner());
      });
    }
  for (Region &region : regions)
    for (Value value : region.returned) {
      b.setInsertionPointAfterValue(value);
      RankedTensorType local = tensorType(value);
      SmallVector<int64_t> shape(local.getShape());
      int64_t dim = region.splits[value].dim;
      shape[dim] *= size;
      Value whole = shard::AllGatherOp::create(
          b, value.getLoc(), local.clone(shape), kGrid, {tpAxis}, value,
          APInt(64, dim));
      // A padded axis loses its padding: the caller sees the model's.
      if (int64_t extent = region.wholes.lookup(value)) {
        shape[dim] = extent;
        whole = ds::SliceOp::create(
            b, value.getLoc(), local.clone(shape), whole,
            b.getDenseI64ArrayAttr(SmallVector<int64_t>(shape.size(), 0)),
            b.getDenseI64ArrayAttr(SmallVector<int64_t>(shape.size(), 1)));
      }
      value.replaceUsesWithIf(whole, [](OpOperand &use) {
        return isa<func::ReturnOp>(use.getOwner());
      });
    }
  // Ops that run on the pieces in another form: the masked lookup, the
  // vocabulary-parallel loss. Last, so that no region holds an erased op.
  for (Region &region : regions)
    for (auto &[op, layouts] : region.rewrites) {
      auto rule = cast<ds::ShardingRuleOpInterface>(op);
      // A padded operand's model extent, for the form that masks past it.
      for (Value operand : op->getOperands())
        if (int64_t extent = region.wholes.lookup(operand))
          op->setAttr(ds::DsDialect::kTpWholeAttrName,
                      b.getI64IntegerAttr(extent));
      FailureOr<SmallVector<Value>> replacements =
          rule.buildOnPieces(b, layouts, size, kGrid, tpAxis);
      if (failed(replacements)) {
        op->emitError() << "ds-tensor-parallel: " << describe(op)
                        << " has no rank-local form";
        return signalPassFailure();
      }
      for (auto [result, replacement] :
           llvm::zip(op->getResults(), *replacements))
        if (!result.use_empty())
          result.replaceAllUsesWith(replacement);
      op->erase();
    }
  if (sequenceParallel && failed(sequenceParallelize(tpAxis)))
    return signalPassFailure();
  main.setFunctionType(FunctionType::get(module.getContext(),
                                         body.getArgumentTypes(),
                                         main.getResultTypes()));
}


/// gatherWhole: an all-gather for an op without a sharding rule for the
/// split, after which the ranks compute alike (ds.tp_gather_whole).
enum class SequenceCollective { gather, gatherWhole, scatter, slice };

/// `value` all-gathered, reduce-scattered (sum) or sliced along `axis` over
/// the tp ranks. The runtime exchanges one flat chunk per rank, so an axis
/// with larger axes before it (the sequence of [b, s, h] with b > 1) is
/// moved to the front by a transpose, and back after. `recompute` marks
/// the ops built ds.recompute_in_backward.
Value sequenceCollective(OpBuilder &b, Location loc, SequenceCollective kind,
                         Value value, int64_t axis, int64_t ranks,
                         int16_t tpAxis, bool recompute = false) {
  RankedTensorType type = tensorType(value);
  bool leading = llvm::all_of(type.getShape().take_front(axis),
                              [](int64_t n) { return n == 1; });
  SmallVector<int64_t> perm, inverse;
  Value input = value;
  int64_t at = axis;
  if (!leading) {
    perm.push_back(axis);
    for (int64_t i = 0; i < type.getRank(); ++i)
      if (i != axis)
        perm.push_back(i);
    inverse.assign(perm.size(), 0);
    for (auto [i, p] : llvm::enumerate(perm))
      inverse[p] = static_cast<int64_t>(i);
    input = ds::TransposeOp::create(b, loc, value, perm);
    at = 0;
  }
  SmallVector<int64_t> shape(tensorType(input).getShape());
  bool gathers = kind == SequenceCollective::gather ||
                 kind == SequenceCollective::gatherWhole;
  shape[at] = gathers ? shape[at] * ranks : shape[at] / ranks;
  RankedTensorType result = tensorType(input).clone(shape);
  Value out;
  switch (kind) {
  case SequenceCollective::gather:
  case SequenceCollective::gatherWhole:
    out = shard::AllGatherOp::create(b, loc, result, kGrid, {tpAxis}, input,
                                     APInt(64, at));
    if (kind == SequenceCollective::gatherWhole)
      out.getDefiningOp()->setAttr(ds::DsDialect::kTpGatherWholeAttrName,
                                   b.getUnitAttr());
    break;
  case SequenceCollective::scatter:
    out = shard::ReduceScatterOp::create(b, loc, result, kGrid, {tpAxis},
                                         input, shard::ReductionKind::Sum,
                                         APInt(64, at));
    break;
  case SequenceCollective::slice:
    out = shard::AllSliceOp::create(b, loc, result, input, kGrid, {tpAxis},
                                    at);
    break;
  }
  if (!leading)
    out = ds::TransposeOp::create(b, loc, out, inverse);
  if (recompute)
    for (Value v = out; v != value; v = v.getDefiningOp()->getOperand(0))
      v.getDefiningOp()->setAttr(ds::DsDialect::kRecomputeInBackwardAttrName,
                                 b.getUnitAttr());
  return out;
}

/// Megatron's sequence parallelism (Korthikanti et al. 2022, 4.2.2): the
/// activations between a region's end and the next region's entry are
/// split along the sequence, the axis before the hidden one that the
/// column-parallel products do not contract (axis rank - 2: s of [b, s, h],
/// b * s of an exporter's flattened [b * s, h]). Each g all-reduce becomes
/// a reduce-scatter along it, the split is carried forward through the
/// ops' rules (norms, dropout, residual adds, elementwise ops), and each f
/// (ds.tp_copy) of a split value becomes an all-gather; autodiff gives the
/// backward's converse collectives. A whole parameter read beside the
/// split values (a norm's scale) enters through ds.tp_copy, so its
/// gradient, each rank's sum over its own rows, is all-reduced over tp; a
/// whole activation or constant the rule wants split alike (a position
/// table) is sliced to the rank's rows.
LogicalResult TensorParallel::sequenceParallelize(int16_t tpAxis) {
  Block &body = main.getBody().front();
  // Analysis on the whole types: the split of every value, the rule of
  // every op it reaches.
  llvm::DenseMap<Value, ds::TensorSplit> seq;
  llvm::DenseSet<Operation *> seeds;
  auto unevenError = [&](Operation *op, Value value, int64_t axis) {
    return op->emitError()
           << "ds-tensor-parallel: --sequence-parallel cannot split "
           << describe(op) << " along the sequence: axis " << axis
           << " of size " << tensorType(value).getDimSize(axis) << " of "
           << tensorType(value) << " does not split into "
           << static_cast<int64_t>(size) << " equal pieces";
  };
  for (shard::AllReduceOp reduce : regionReduces) {
    RankedTensorType type = tensorType(reduce.getResult());
    Operation *producer = reduce.getInput().getDefiningOp();
    Operation *named = producer ? producer : reduce.getOperation();
    if (type.getRank() < 2)
      return named->emitError()
             << "ds-tensor-parallel: --sequence-parallel needs a sequence "
                "axis before the hidden one, but "
             << describe(named) << " gives " << type;
    int64_t axis = type.getRank() - 2;
    if (type.getDimSize(axis) % size)
      return unevenError(named, reduce.getResult(), axis);
    seq[reduce.getResult()] = ds::TensorSplit::along(axis);
    seeds.insert(reduce);
  }
  llvm::MapVector<Operation *, ds::ShardingRule> ops;
  SmallVector<std::pair<ds::TpCopyOp, int64_t>> entries;
  // (op, operand, axis): a split operand of an op that cannot take it.
  SmallVector<std::tuple<Operation *, unsigned, int64_t>> wholes;
  for (Operation &op : body) {
    if (seeds.contains(&op))
      continue;
    SmallVector<ds::TensorSplit> given;
    bool touched = false;
    for (Value operand : op.getOperands()) {
      auto it = seq.find(operand);
      given.push_back(it == seq.end() ? ds::TensorSplit::replicated()
                                      : it->second);
      touched |= it != seq.end();
    }
    if (!touched)
      continue;
    if (auto copy = dyn_cast<ds::TpCopyOp>(op)) {
      entries.push_back({copy, given[0].dim});
      continue;
    }
    auto rule = dyn_cast<ds::ShardingRuleOpInterface>(op);
    ds::ShardingRule answer;
    std::string why;
    if (!rule)
      why = "it has no sharding rule";
    else if (failed(rule.getShardingRule(given, size, answer)))
      why = answer.reason;
    else if (answer.rewrite)
      why = "it runs on tp pieces only in another form";
    for (auto [g, want] : llvm::zip(given, answer.operands))
      if (why.empty() && g.isSplit() && g != want)
        why = "its operands' splits do not match";
    if (!why.empty()) {
      // As Megatron would have to: the whole sequence for this op, which
      // then runs alike on every tp rank.
      op.emitWarning()
          << "ds-tensor-parallel: --sequence-parallel cannot split "
          << describe(&op) << " along the sequence (" << why
          << "): its operands are all-gathered along the sequence and it "
             "runs on the whole sequence on every tp rank";
      for (auto [i, g] : llvm::enumerate(given))
        if (g.isSplit())
          wholes.push_back({&op, static_cast<unsigned>(i), g.dim});
      continue;
    }
    for (auto [result, split] : llvm::zip(op.getResults(), answer.results)) {
      if (!split.isSplit())
        continue;
      if (tensorType(result).getDimSize(split.dim) % (split.blocks * size))
        return unevenError(&op, result, split.dim);
      seq[result] = split;
    }
    ops[&op] = std::move(answer);
  }

  // Rewrite.
  OpBuilder b(main.getContext());
  auto localType = [&](Value value, ds::TensorSplit split) {
    SmallVector<int64_t> shape(tensorType(value).getShape());
    shape[split.dim] /= size;
    return tensorType(value).clone(shape);
  };
  llvm::DenseMap<std::pair<Value, int64_t>, Value> slices;
  llvm::DenseMap<Value, Value> copies;
  for (auto &[op, rule] : ops) {
    bool splitsSomething = false;
    for (Value result : op->getResults())
      splitsSomething |= seq.count(result) != 0;
    for (auto [i, want] : llvm::enumerate(rule.operands)) {
      Value operand = op->getOperand(i);
      if (seq.count(operand))
        continue;
      b.setInsertionPoint(op);
      if (want.isSplit()) {
        Value &sliced = slices[{operand, want.dim}];
        if (!sliced)
          sliced = sequenceCollective(b, operand.getLoc(),
                                      SequenceCollective::slice, operand,
                                      want.dim, size, tpAxis);
        op->setOperand(i, sliced);
      } else if (splitsSomething &&
                 isa<FloatType>(getElementTypeOrSelf(operand)) &&
                 !operand.getDefiningOp<ds::ConstantOp>()) {
        // Each rank's gradient of a whole value read beside split ones is
        // the sum over its own rows: f completes it.
        Value &copy = copies[operand];
        if (!copy)
          copy = ds::TpCopyOp::create(b, operand.getLoc(), operand.getType(),
                                      operand, kGrid, tpAxis);
        op->setOperand(i, copy);
      }
    }
    for (Value result : op->getResults()) {
      auto it = seq.find(result);
      if (it != seq.end())
        result.setType(localType(result, it->second));
    }
    // A sum over the sequence: each rank's over its rows, completed here.
    for (auto [result, split] : llvm::zip(op->getResults(), rule.results))
      if (split.partial) {
        b.setInsertionPointAfter(op);
        auto reduce = shard::AllReduceOp::create(
            b, result.getLoc(), result.getType(), kGrid, {tpAxis}, result,
            shard::ReductionKind::Sum);
        result.replaceAllUsesExcept(reduce, reduce);
      }
    // Each rank draws its own mask for its rows (Megatron's RNG tracker).
    if (auto dropout = dyn_cast<ds::DropoutOp>(op))
      if (seq.count(dropout.getResult()))
        dropout->setAttr(ds::DsDialect::kTpRankSeedAttrName, b.getUnitAttr());
  }
  for (Operation *op : seeds) {
    auto reduce = cast<shard::AllReduceOp>(op);
    b.setInsertionPoint(reduce);
    Value scattered = sequenceCollective(
        b, reduce.getLoc(), SequenceCollective::scatter, reduce.getInput(),
        seq[reduce.getResult()].dim, size, tpAxis);
    reduce.getResult().replaceAllUsesWith(scattered);
    reduce.erase();
  }
  regionReduces.clear();
  for (auto [copy, dim] : entries) {
    b.setInsertionPoint(copy);
    // Megatron keeps the rank's rows for the weight gradient and gathers
    // them again in the backward (Korthikanti et al. 2022, 4.2.3).
    Value whole =
        sequenceCollective(b, copy.getLoc(), SequenceCollective::gather,
                           copy.getInput(), dim, size, tpAxis,
                           /*recompute=*/true);
    copy.getResult().replaceAllUsesWith(whole);
    copy.erase();
  }
  llvm::DenseMap<std::pair<Value, int64_t>, Value> gathered;
  for (auto [op, index, dim] : wholes) {
    Value operand = op->getOperand(index);
    Value &whole = gathered[{operand, dim}];
    if (!whole) {
      b.setInsertionPoint(op);
      whole = sequenceCollective(b, op->getLoc(),
                                 SequenceCollective::gatherWhole, operand, dim,
                                 size, tpAxis);
    }
    op->setOperand(index, whole);
  }
  return success();
}

} // namespace
