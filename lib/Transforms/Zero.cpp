//===- Zero.cpp - data parallelism and ZeRO stages 0-3 ---------------------===//
//
// Makes the training step of ds-optimizer (@micro_step, @optimizer_step) an
// SPMD program over the `dp` axis of a device grid of N ranks. Every rank
// runs it on its own micro-batches; collectives are upstream shard ops.
//
// A tensor of n elements is partitioned ZeRO's way: flattened, zero-padded
// to m = N * s elements with s = ceil(n / N), rank r owning elements
// [r s, (r + 1) s). Per stage:
//
//   0  optimizer_step averages each gradient accumulator over the ranks
//      (shard.all_reduce <average>, in place) before anything reads it.
//   1  the optimizer states are [s] shards. optimizer_step reduce-scatters
//      each accumulator (average) to its shard, takes the global norm as
//      the all-reduced sum of the shards' sums of squares, updates the
//      rank's shard of each parameter (shard.all_slice of the parameter)
//      and all-gathers the updated parameter.
//   2  also the accumulators are [s] shards: micro_step reduce-scatters each
//      gradient as soon as backward has computed it and adds the shard.
//   3  also every trainable parameter of at least `persistence-threshold`
//      elements is an [s] shard at rest (`ds.sharded` = its whole type):
//      micro_step all-gathers it before its first use in forward and again
//      before its first use in backward (each gathered copy dies after its
//      last use), and optimizer_step updates the shard in place.
//
// Averaging gradients over N ranks of k micro-batches each, then dividing
// by k as ds-optimizer does, gives exactly the mean over N k micro-batches:
// the step of one rank with N k micro-batches.
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
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace dsopt {
#define GEN_PASS_DEF_DSZERO
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

constexpr StringLiteral kGrid = "grid";

/// `grid = @grid, grid_axis = axis`, the grid attributes of the ds bucket
/// collectives.
SmallVector<NamedAttribute> gridAttrs(Builder &b, int64_t axis) {
  return {b.getNamedAttr("grid", FlatSymbolRefAttr::get(b.getContext(), kGrid)),
          b.getNamedAttr("grid_axis", b.getI64IntegerAttr(axis))};
}

struct ZeroPass : dsopt::impl::DsZeroBase<ZeroPass> {
  using DsZeroBase::DsZeroBase;
  void runOnOperation() override;

private:
  /// n, s and m of a tensor type.
  struct Partition {
    int64_t n, s, m;
  };
  Partition partition(RankedTensorType type) const {
    int64_t n = type.getNumElements();
    int64_t s = std::max<int64_t>(1, llvm::divideCeil(n, dp));
    return {n, s, s * dp};
  }
  RankedTensorType flatType(RankedTensorType type, int64_t size) const {
    return RankedTensorType::get({size}, type.getElementType());
  }

  /// The [m] flat padded form of `value` (a view when n == m).
  Value flatten(OpBuilder &b, Location loc, Value value) const;
  /// This rank's [s] shard of `value` (no communication).
  Value slice(OpBuilder &b, Location loc, Value value) const;
  /// The whole tensor of type `whole` from every rank's [s] shard.
  Value gather(OpBuilder &b, Location loc, Value shard,
               RankedTensorType whole) const;
  /// Reduce-scatters (average) the flat padded `flats`, in buckets of
  /// reduce-bucket-size elements; returns each one's [s] shard.
  SmallVector<Value> reduceScatterBuckets(OpBuilder &b, Location loc,
                                          ArrayRef<Value> flats) const;

  LogicalResult rewriteOptimizerStep(func::FuncOp step,
                                     const llvm::StringSet<> &shardedParams);
  /// `micro` is @micro_step (forward up to the loss, then backward), or one
  /// part of a pipeline stage, all forward or all backward.
  LogicalResult rewriteMicroStep(func::FuncOp micro,
                                 const llvm::StringSet<> &shardedParams);

  /// The grid axis of dp: 0, or that of an existing pp x dp grid.
  int16_t dpAxis = 0;
  SmallVector<NamedAttribute> withGrid(Builder &b,
                                       ArrayRef<NamedAttribute> attrs) const {
    SmallVector<NamedAttribute> all = gridAttrs(b, dpAxis);
    all.append(attrs.begin(), attrs.end());
    return all;
  }
};

Value ZeroPass::flatten(OpBuilder &b, Location loc, Value value) const {
  auto type = cast<RankedTensorType>(value.getType());
  Partition p = partition(type);
  auto flat = flatType(type, p.m);
  if (p.n == p.m)
    return ds::ReshapeOp::create(b, loc, flat, value);
  return ds::FlatPadOp::create(b, loc, flat, value);
}

Value ZeroPass::slice(OpBuilder &b, Location loc, Value value) const {
  auto type = cast<RankedTensorType>(value.getType());
  Value flat = flatten(b, loc, value);
  return shard::AllSliceOp::create(b, loc,
                                   flatType(type, partition(type).s), flat,
                                   kGrid, {dpAxis}, 0);
}

Value ZeroPass::gather(OpBuilder &b, Location loc, Value shardValue,
                       RankedTensorType whole) const {
  Partition p = partition(whole);
  Value gathered = shard::AllGatherOp::create(
      b, loc, flatType(whole, p.m), kGrid, {dpAxis}, shardValue, APInt(64, 0));
  return ds::FlatUnpadOp::create(b, loc, whole, gathered);
}

/// Splits `values` (in order) into buckets of at most `limit` elements
/// (a larger tensor is a bucket of its own), each of one element type.
SmallVector<SmallVector<unsigned>> bucketsOf(ArrayRef<Value> values,
                                             int64_t limit) {
  SmallVector<SmallVector<unsigned>> buckets;
  int64_t size = 0;
  Type element;
  for (auto [i, value] : llvm::enumerate(values)) {
    auto type = cast<RankedTensorType>(value.getType());
    int64_t n = type.getNumElements();
    if (buckets.empty() || size + n > limit ||
        type.getElementType() != element) {
      buckets.emplace_back();
      size = 0;
      element = type.getElementType();
    }
    buckets.back().push_back(i);
    size += n;
  }
  return buckets;
}

RankedTensorType stagingType(ValueRange values) {
  int64_t total = 0;
  for (Value value : values)
    total += cast<RankedTensorType>(value.getType()).getNumElements();
  return RankedTensorType::get(
      {total}, cast<RankedTensorType>(values[0].getType()).getElementType());
}

SmallVector<Value>
ZeroPass::reduceScatterBuckets(OpBuilder &b, Location loc,
                               ArrayRef<Value> flats) const {
  SmallVector<Value> shards(flats.size());
  for (const SmallVector<unsigned> &bucket :
       bucketsOf(flats, reduceBucketSize)) {
    if (bucket.size() == 1) {
      Value flat = flats[bucket[0]];
      auto type = cast<RankedTensorType>(flat.getType());
      shards[bucket[0]] = shard::ReduceScatterOp::create(
          b, flat.getLoc(),
          flatType(type, type.getNumElements() / dp), kGrid, {dpAxis}, flat,
          shard::ReductionKind::Average, APInt(64, 0));
      continue;
    }
    SmallVector<Value> inputs;
    SmallVector<Type> types;
    for (unsigned i : bucket) {
      inputs.push_back(flats[i]);
      auto type = cast<RankedTensorType>(flats[i].getType());
      types.push_back(flatType(type, type.getNumElements() / dp));
    }
    types.push_back(stagingType(inputs));
    auto op = ds::ReduceScatterBucketOp::create(
        b, loc, types, inputs,
        withGrid(b, {b.getNamedAttr("reduction", b.getStringAttr("average"))}));
    for (auto [k, i] : llvm::enumerate(bucket))
      shards[i] = op->getResult(k);
  }
  return shards;
}

/// Sets the function type from its block arguments and return operands.
void syncFunctionType(func::FuncOp function) {
  Block &body = function.getBody().front();
  function.setFunctionType(FunctionType::get(
      function.getContext(), body.getArgumentTypes(),
      body.getTerminator()->getOperandTypes()));
}

/// The ds.param name of argument `i`, or "".
StringRef paramName(func::FuncOp function, unsigned i) {
  if (auto param = function.getArgAttrOfType<ds::ParamAttr>(
          i, ds::DsDialect::kParamAttrName))
    return param.getName();
  return "";
}


/// Makes argument `arg` this rank's [s] shard; a parameter's whole type
/// goes into `argAttrs`, its function's argument attributes, which the
/// caller sets at once (ArgAttrs.h).
void shardArgument(SmallVectorImpl<DictionaryAttr> &argAttrs,
                   BlockArgument arg, RankedTensorType shardType,
                   bool isParam) {
  auto whole = cast<RankedTensorType>(arg.getType());
  arg.setType(shardType);
  if (!isParam)
    return;
  setArgAttrIn(argAttrs, arg.getArgNumber(), ds::DsDialect::kShardedAttrName,
               TypeAttr::get(whole));
}

LogicalResult
ZeroPass::rewriteOptimizerStep(func::FuncOp step,
                               const llvm::StringSet<> &shardedParams) {
  Block &body = step.getBody().front();
  Operation *terminator = body.getTerminator();
  OpBuilder b(step.getContext());
  Location loc = step.getLoc();
  SmallVector<DictionaryAttr> argAttrs;
  step.getAllArgAttrs(argAttrs);

  // The accumulator of each parameter.
  llvm::StringMap<BlockArgument> accOf;
  for (BlockArgument arg : body.getArguments()) {
    StringRef param = ds::getAccumulatedParam(step, arg.getArgNumber());
    if (!param.empty())
      accOf[param] = arg;
  }

  if (stage == 0) {
    // Average every accumulator in place before anything reads it, in
    // buckets of reduce-bucket-size elements.
    b.setInsertionPointToStart(&body);
    SmallVector<Value> accs;
    for (BlockArgument arg : body.getArguments())
      if (!ds::getAccumulatedParam(step, arg.getArgNumber()).empty())
        accs.push_back(arg);
    for (const SmallVector<unsigned> &bucket :
         bucketsOf(accs, reduceBucketSize)) {
      SmallVector<Value> inputs;
      for (unsigned i : bucket)
        inputs.push_back(accs[i]);
      Operation *reduce;
      if (inputs.size() == 1) {
        StringRef param = ds::getAccumulatedParam(
            step, cast<BlockArgument>(inputs[0]).getArgNumber());
        reduce = shard::AllReduceOp::create(
            b, NameLoc::get(b.getStringAttr(param + ".grad"), loc),
            inputs[0].getType(), kGrid, {dpAxis}, inputs[0],
            shard::ReductionKind::Average);
      } else {
        SmallVector<Type> types(ValueRange(inputs).getTypes());
        types.push_back(stagingType(inputs));
        reduce = ds::AllReduceBucketOp::create(
            b, loc, types, inputs,
            withGrid(b, {b.getNamedAttr("reduction",
                                        b.getStringAttr("average"))}));
      }
      reduce->setAttr(ds::DsDialect::kOverwritesArgAttrName, b.getUnitAttr());
      for (auto [k, input] : llvm::enumerate(inputs))
        input.replaceAllUsesExcept(reduce->getResult(k), reduce);
    }
    return success();
  }

  // This rank's averaged gradient shard of each parameter.
  llvm::DenseMap<Value, Value> shardOfAcc;
  b.setInsertionPointToStart(&body);
  SmallVector<Value> accs, flats;
  for (BlockArgument acc : body.getArguments()) {
    StringRef name = ds::getAccumulatedParam(step, acc.getArgNumber());
    if (name.empty())
      continue;
    auto type = cast<RankedTensorType>(acc.getType());
    Location accLoc = NameLoc::get(b.getStringAttr(name + ".grad"), loc);
    if (stage == 1) {
      accs.push_back(acc);
      flats.push_back(flatten(b, accLoc, acc));
    } else {
      shardArgument(argAttrs, acc, flatType(type, partition(type).s), false);
      shardOfAcc[acc] = acc;
    }
  }
  for (auto [acc, shardValue] :
       llvm::zip(accs, reduceScatterBuckets(b, loc, flats)))
    shardOfAcc[acc] = shardValue;
  // The shard of an accumulator, or of its cast to f32 (16-bit
  // accumulation, ds-precision): the cast of the shard, made once.
  auto gradShardOf = [&](Value value) -> Value {
    if (Value shardValue = shardOfAcc.lookup(value))
      return shardValue;
    auto widen = value.getDefiningOp<ds::CastOp>();
    if (!widen)
      return {};
    Value shardValue = shardOfAcc.lookup(widen.getInput());
    if (!shardValue)
      return {};
    OpBuilder::InsertionGuard guard(b);
    if (Operation *def = shardValue.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(&body);
    Value wide = ds::CastOp::create(
        b, widen.getLoc(),
        cast<RankedTensorType>(shardValue.getType())
            .clone(getElementTypeOrSelf(widen.getType())),
        shardValue);
    shardOfAcc[value] = wide;
    return wide;
  };

  // The global norm: the sum over ranks of the shards' sums of squares.
  SmallVector<ds::SumOfSquaresOp> norms;
  body.walk([&](ds::SumOfSquaresOp op) { norms.push_back(op); });
  for (ds::SumOfSquaresOp op : norms) {
    for (OpOperand &operand : op->getOpOperands()) {
      Value shardValue = gradShardOf(operand.get());
      if (!shardValue)
        return op.emitOpError()
               << "ds-zero: operand " << operand.getOperandNumber()
               << " is not a gradient accumulator";
      operand.set(shardValue);
    }
    b.setInsertionPointAfter(op);
    auto sum = shard::AllReduceOp::create(b, op.getLoc(), op.getType(), kGrid,
                                          {dpAxis}, op.getResult(),
                                          shard::ReductionKind::Sum);
    op.getResult().replaceAllUsesExcept(sum.getResult(), sum);
  }

  // Each update on the rank's shard; updated parameters that are whole at
  // rest are gathered afterwards, in buckets.
  struct ToGather {
    Value shard;         // the updated shard (or its 16-bit working copy)
    Operation *after;    // what computes it
    RankedTensorType whole;
    SmallVector<OpOperand *> uses;
  };
  SmallVector<ToGather> toGather;
  SmallVector<ds::OptimizerOpInterface> updates;
  body.walk([&](ds::OptimizerOpInterface op) { updates.push_back(op); });
  for (ds::OptimizerOpInterface update : updates) {
    auto param = dyn_cast<BlockArgument>(update.getParamOperand().get());
    StringRef name =
        param ? paramName(step, param.getArgNumber()) : StringRef();
    // With ds-precision the update is of the fp32 master weights, a state;
    // the parameter is their 16-bit working copy, refreshed by a cast.
    BlockArgument working;
    if (param && name.empty())
      if (ds::StateAttr state = ds::getArgumentState(step, param.getArgNumber());
          state && state.getRole() == "master") {
        name = state.getParam();
        for (BlockArgument arg : body.getArguments())
          if (paramName(step, arg.getArgNumber()) == name)
            working = arg;
      }
    if (name.empty() || !accOf.count(name))
      return update->emitOpError()
             << "ds-zero: the updated parameter is not a trained parameter "
                "argument of @optimizer_step";
    auto wholeType = cast<RankedTensorType>(param.getType());
    auto shardType = flatType(wholeType, partition(wholeType).s);
    Location paramLoc = update->getLoc();
    b.setInsertionPoint(update);

    // The gradient: the accumulator, or the accumulator times a scalar.
    Value grad = update.getGradOperand().get();
    BlockArgument acc = accOf[name];
    Value gradShard;
    auto isAcc = [&](Value v) {
      if (v == acc)
        return true;
      auto widen = v.getDefiningOp<ds::CastOp>();
      return widen && widen.getInput() == acc;
    };
    if (isAcc(grad)) {
      gradShard = gradShardOf(grad);
    } else if (auto mul = grad.getDefiningOp<ds::MulOp>();
               mul && (isAcc(mul.getLhs()) || isAcc(mul.getRhs()))) {
      Value accValue = isAcc(mul.getLhs()) ? mul.getLhs() : mul.getRhs();
      Value scale = isAcc(mul.getLhs()) ? mul.getRhs() : mul.getLhs();
      if (cast<RankedTensorType>(scale.getType()).getRank() != 0)
        return mul.emitOpError()
               << "ds-zero: the gradient of '" << name
               << "' is scaled by a tensor, not a scalar";
      gradShard = ds::MulOp::create(b, mul.getLoc(),
                                    ValueRange{gradShardOf(accValue), scale});
    } else {
      return update->emitOpError()
             << "ds-zero: the gradient of '" << name
             << "' is not its accumulator, nor the accumulator times a "
                "scalar";
    }

    bool paramSharded = shardedParams.contains(name);
    Value paramShard = paramSharded || working ? Value(param)
                                               : slice(b, paramLoc, param);
    if (working)
      param.setType(shardType); // the master: a state, a shard at rest
    else if (paramSharded)
      shardArgument(argAttrs, param, shardType, true);

    // The states are [s] shards.
    SmallVector<Value> operands(update->getOperands());
    operands[update.getParamOperand().getOperandNumber()] = paramShard;
    operands[update.getGradOperand().getOperandNumber()] = gradShard;
    for (OpOperand &operand : update.getStateOperands()) {
      auto state = dyn_cast<BlockArgument>(operand.get());
      if (!state || !ds::getArgumentState(step, state.getArgNumber()))
        return update->emitOpError()
               << "ds-zero: optimizer state operand "
               << operand.getOperandNumber() << " is not a state argument";
      state.setType(shardType);
    }
    auto sharded =
        cast<ds::OptimizerOpInterface>(b.clone(*update.getOperation()));
    sharded->setOperands(operands);
    for (Value result : sharded->getResults())
      result.setType(shardType);

    for (auto [state, shardedState] :
         llvm::zip_equal(update.getUpdatedStates(), sharded.getUpdatedStates()))
      state.replaceAllUsesWith(shardedState);
    Value updated = update.getUpdatedParam();
    if (working) {
      // The working copy: the cast of the updated master shard, gathered
      // in 16 bits unless it is itself a shard at rest (stage 3).
      ds::CastOp refresh;
      for (Operation *user : updated.getUsers())
        if (auto c = dyn_cast<ds::CastOp>(user))
          refresh = c;
      if (!refresh)
        return update->emitOpError()
               << "ds-zero: the working copy of '" << name
               << "' is not refreshed from its master weights";
      auto workingWhole = cast<RankedTensorType>(working.getType());
      auto workingShard = flatType(workingWhole, partition(workingWhole).s);
      updated.replaceAllUsesWith(sharded.getUpdatedParam());
      refresh.getResult().setType(workingShard);
      if (paramSharded) {
        shardArgument(argAttrs, working, workingShard, true);
      } else {
        ToGather item{refresh.getResult(), refresh, workingWhole, {}};
        for (OpOperand &use : refresh.getResult().getUses())
          item.uses.push_back(&use);
        toGather.push_back(std::move(item));
      }
    } else if (paramSharded) {
      updated.replaceAllUsesWith(sharded.getUpdatedParam());
    } else {
      ToGather item{sharded.getUpdatedParam(), sharded, wholeType, {}};
      for (OpOperand &use : updated.getUses())
        item.uses.push_back(&use);
      // Until the gathers below exist (the types differ meanwhile).
      updated.replaceAllUsesWith(sharded.getUpdatedParam());
      toGather.push_back(std::move(item));
    }
    Operation *oldGrad = grad.getDefiningOp();
    update->erase();
    if (oldGrad && oldGrad->use_empty())
      oldGrad->erase();
  }

  SmallVector<Value> newShards;
  for (ToGather &item : toGather)
    newShards.push_back(item.shard);
  // Buckets of allgather-bucket-size gathered elements (shards of 1/dp).
  for (const SmallVector<unsigned> &bucket :
       bucketsOf(newShards, std::max<int64_t>(1, allgatherBucketSize / dp))) {
    b.setInsertionPointAfter(toGather[bucket.back()].after);
    SmallVector<Value> full;
    if (bucket.size() == 1) {
      ToGather &item = toGather[bucket[0]];
      full.push_back(gather(b, item.after->getLoc(), item.shard, item.whole));
    } else {
      SmallVector<Value> inputs;
      SmallVector<Type> types;
      for (unsigned i : bucket) {
        Value shardValue = toGather[i].shard;
        inputs.push_back(shardValue);
        types.push_back(flatType(toGather[i].whole, partition(toGather[i].whole).m));
      }
      types.push_back(RankedTensorType::get(
          {stagingType(inputs).getNumElements() * dp},
          toGather[bucket[0]].whole.getElementType()));
      auto op = ds::AllGatherBucketOp::create(
          b, loc, types, inputs,
          withGrid(b, {}));
      for (auto [k, i] : llvm::enumerate(bucket))
        full.push_back(ds::FlatUnpadOp::create(b, toGather[i].after->getLoc(),
                                               toGather[i].whole,
                                               op->getResult(k)));
    }
    for (auto [k, i] : llvm::enumerate(bucket))
      for (OpOperand *use : toGather[i].uses)
        use->set(full[k]);
  }

  // Sharded accumulators are reset as shards.
  if (stage >= 2)
    for (OpOperand &operand : terminator->getOpOperands()) {
      auto fill = operand.get().getDefiningOp<ds::FillOp>();
      auto updatesArg = step.getResultAttrOfType<IntegerAttr>(
          operand.getOperandNumber(), ds::DsDialect::kUpdatesAttrName);
      if (!fill || !updatesArg)
        continue;
      Type argType = body.getArgument(updatesArg.getInt()).getType();
      if (fill.getType() == argType)
        continue;
      b.setInsertionPoint(fill);
      auto reset = ds::FillOp::create(b, fill.getLoc(), argType,
                                      fill.getValueAttr());
      operand.set(reset);
      if (fill->use_empty())
        fill.erase();
    }
  // Casts of whole accumulators whose readers now read the shard's cast.
  SmallVector<ds::CastOp> casts(body.getOps<ds::CastOp>());
  for (ds::CastOp c : llvm::reverse(casts))
    if (c->use_empty())
      c.erase();
  step.setAllArgAttrs(argAttrs);
  syncFunctionType(step);
  return success();
}

LogicalResult ZeroPass::rewriteMicroStep(func::FuncOp micro,
                                         const llvm::StringSet<> &shardedParams) {
  Block &body = micro.getBody().front();
  Operation *terminator = body.getTerminator();
  OpBuilder b(micro.getContext());
  SmallVector<DictionaryAttr> argAttrs;
  micro.getAllArgAttrs(argAttrs);

  // Stage 2 and 3: reduce-scatter the gradients as soon as they exist, in
  // buckets of reduce-bucket-size elements in the order backward produces
  // them (a bucket goes once its last gradient is computed).
  struct Grad {
    OpOperand *result; // the accumulator's new value, returned
    BlockArgument acc;
    ds::AddOp add;     // acc + g, or null (one micro-batch per step)
    Value flat;        // g, flat and padded
  };
  SmallVector<Grad> grads;
  for (OpOperand &operand : terminator->getOpOperands()) {
    std::optional<ds::GradientAccumulation> match =
        ds::matchGradientAccumulation(micro, operand);
    if (!match)
      continue;
    // acc' = acc + g with accumulation, else acc' = g.
    BlockArgument acc = match->acc;
    ds::AddOp add = match->add;
    Value grad = match->grad;
    if (grad.getType() != acc.getType())
      return micro.emitOpError() << "ds-zero: the gradient of '" << match->param
                                 << "' does not have its accumulator's type";
    auto type = cast<RankedTensorType>(acc.getType());
    if (Operation *def = grad.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(&body);
    Location loc =
        NameLoc::get(b.getStringAttr(match->param + ".grad"), grad.getLoc());
    Value flat = flatten(b, loc, grad);
    shardArgument(argAttrs, acc, flatType(type, partition(type).s), false);
    grads.push_back({&operand, acc, add, flat});
  }
  llvm::stable_sort(grads, [](const Grad &a, const Grad &c) {
    return a.flat.getDefiningOp()->isBeforeInBlock(c.flat.getDefiningOp());
  });
  SmallVector<Value> flats;
  for (const Grad &grad : grads)
    flats.push_back(grad.flat);
  for (const SmallVector<unsigned> &bucket :
       bucketsOf(flats, reduceBucketSize)) {
    SmallVector<Value> inputs;
    for (unsigned i : bucket)
      inputs.push_back(flats[i]);
    b.setInsertionPointAfter(flats[bucket.back()].getDefiningOp());
    SmallVector<Value> shards =
        reduceScatterBuckets(b, micro.getLoc(), inputs);
    for (auto [k, i] : llvm::enumerate(bucket)) {
      Grad &grad = grads[i];
      Value next = grad.add ? ds::AddOp::create(b, grad.add.getLoc(),
                                                ValueRange{grad.acc, shards[k]})
                                  .getResult()
                            : shards[k];
      grad.result->set(next);
      if (grad.add && grad.add->use_empty())
        grad.add.erase();
    }
  }

  // Stage 3: gather sharded parameters before their first use in forward
  // and again before their first use in backward. Backward is everything
  // after the op that computes the loss (result 0).
  if (!shardedParams.empty()) {
    llvm::DenseMap<Operation *, int64_t> index;
    int64_t position = 0;
    for (Operation &op : body)
      index[&op] = position++;
    // A pipeline part is all forward or all backward.
    int64_t lossIndex = -1;
    if (auto part = micro->getAttrOfType<ds::PipelinePartAttr>(
            ds::DsDialect::kPipelinePartAttrName)) {
      if (part.getPart() == ds::PipelinePart::forward)
        lossIndex = position;
    } else if (Operation *lossDef =
                   terminator->getNumOperands()
                       ? terminator->getOperand(0).getDefiningOp()
                       : nullptr) {
      lossIndex = index[lossDef];
    }
    // Each pass (forward, backward) gathers every parameter it reads
    // before its first use there, prefetching: a gather is issued as early
    // as the first use of the earliest parameter (in order of first use)
    // such that the parameters in between hold fewer than
    // prefetch-bucket-size elements.
    struct Use {
      BlockArgument arg;
      StringRef name;
      RankedTensorType whole;
      SmallVector<OpOperand *> uses;
      Operation *first;
    };
    SmallVector<Use> passes[2];
    for (BlockArgument arg : body.getArguments()) {
      StringRef name = paramName(micro, arg.getArgNumber());
      if (name.empty() || !shardedParams.contains(name))
        continue;
      auto whole = cast<RankedTensorType>(arg.getType());
      for (int pass = 0; pass < 2; ++pass) {
        Use use{arg, name, whole, {}, nullptr};
        for (OpOperand &operand : arg.getUses())
          if ((index[operand.getOwner()] > lossIndex) == (pass == 1))
            use.uses.push_back(&operand);
        if (use.uses.empty())
          continue;
        use.first = use.uses[0]->getOwner();
        for (OpOperand *operand : use.uses)
          if (index[operand->getOwner()] < index[use.first])
            use.first = operand->getOwner();
        passes[pass].push_back(std::move(use));
      }
      shardArgument(argAttrs, arg, flatType(whole, partition(whole).s), true);
    }
    for (SmallVector<Use> &uses : passes) {
      llvm::stable_sort(uses, [&](const Use &a, const Use &c) {
        return index[a.first] < index[c.first];
      });
      for (size_t i = 0; i < uses.size(); ++i) {
        size_t j = i;
        int64_t ahead = 0;
        while (j > 0 &&
               ahead + uses[j - 1].whole.getNumElements() < prefetchBucketSize) {
          ahead += uses[j - 1].whole.getNumElements();
          --j;
        }
        b.setInsertionPoint(uses[j].first);
        Value full = gather(
            b, NameLoc::get(b.getStringAttr(uses[i].name), uses[i].first->getLoc()),
            uses[i].arg, uses[i].whole);
        for (OpOperand *operand : uses[i].uses)
          operand->set(full);
      }
    }
  }
  micro.setAllArgAttrs(argAttrs);
  syncFunctionType(micro);
  return success();
}

void ZeroPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (stage < 0 || stage > 3) {
    module.emitError() << "ZeRO stage " << static_cast<int64_t>(stage)
                       << " does not exist (0, 1, 2 or 3)";
    return signalPassFailure();
  }
  if (dp < 1) {
    module.emitError() << "the data-parallel size must be at least 1, got "
                       << static_cast<int64_t>(dp);
    return signalPassFailure();
  }
  if (persistenceThreshold < 0) {
    module.emitError() << "the parameter persistence threshold must be >= 0";
    return signalPassFailure();
  }
  // The functions of the step: @micro_step, or the parts of the pipeline
  // stages of a pipeline rank (ds-pipeline-split).
  auto step = module.lookupSymbol<func::FuncOp>("optimizer_step");
  SmallVector<func::FuncOp> micros;
  if (auto micro = module.lookupSymbol<func::FuncOp>("micro_step"))
    micros.push_back(micro);
  for (auto function : module.getOps<func::FuncOp>())
    if (function != step &&
        function->hasAttr(ds::DsDialect::kPipelinePartAttrName))
      micros.push_back(function);
  if (micros.empty() || !step) {
    module.emitError() << "no @micro_step and @optimizer_step; run "
                          "ds-optimizer first";
    return signalPassFailure();
  }
  // A pipeline rank's grid (pp x dp) exists already; its dp axis is ours.
  auto existing = module.lookupSymbol<shard::GridOp>(kGrid);
  if (module->hasAttr(ds::DsDialect::kZeroAttrName) ||
      (module.lookupSymbol(kGrid) && !existing)) {
    module.emitError() << "the module is already data-parallel (ds.zero or "
                          "@grid exists)";
    return signalPassFailure();
  }
  if (existing) {
    int64_t axis = ds::getDeviceGridAxis(existing, ds::GridAxis::dp).value_or(-1);
    if (axis < 0 || existing.getShape()[axis] != dp) {
      module.emitError() << "@grid has no dp axis of size "
                         << static_cast<int64_t>(dp)
                         << " (ds.axes names the axes)";
      return signalPassFailure();
    }
    dpAxis = static_cast<int16_t>(axis);
  }

  module->setAttr(ds::DsDialect::kZeroAttrName,
                  ds::ZeroAttr::get(module.getContext(), stage, dp,
                                    persistenceThreshold));
  // One rank: nothing to average, nothing to shard.
  if (dp == 1)
    return;

  OpBuilder b(module.getContext());
  if (!existing)
    ds::buildDeviceGrid(b, module, {{ds::GridAxis::dp, dp}});

  // Stage 3 shards the trained parameters at or above the threshold.
  llvm::StringSet<> shardedParams;
  if (stage == 3) {
    Block &body = step.getBody().front();
    llvm::StringSet<> trained;
    for (BlockArgument arg : body.getArguments()) {
      StringRef param = ds::getAccumulatedParam(step, arg.getArgNumber());
      if (!param.empty())
        trained.insert(param);
    }
    for (BlockArgument arg : body.getArguments()) {
      StringRef name = paramName(step, arg.getArgNumber());
      if (!name.empty() && trained.contains(name) &&
          cast<RankedTensorType>(arg.getType()).getNumElements() >=
              persistenceThreshold)
        shardedParams.insert(name);
    }
  }

  if (failed(rewriteOptimizerStep(step, shardedParams)))
    return signalPassFailure();
  if (stage >= 2)
    for (func::FuncOp micro : micros)
      if (failed(rewriteMicroStep(micro, shardedParams)))
        return signalPassFailure();
}

} // namespace
