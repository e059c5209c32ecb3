//===- Precision.cpp - mixed precision: 16-bit working copies, fp32 master ===//
//
// After ds-optimizer: trainable parameters become 16-bit working copies, an
// fp32 master copy of each joins the optimizer's states, accumulators hold
// grad-accum-dtype, and every op of the micro step computes where its
// compute-precision trait says (DsInterfaces.td). See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace dsopt {
#define GEN_PASS_DEF_DSPRECISION
#define GEN_PASS_DEF_DSPRINTPRECISION
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

constexpr StringLiteral kMasterRole = "master";

/// The float type of a DeepSpeed dtype name, or null.
FloatType parseDtype(MLIRContext *context, StringRef name) {
  Builder b(context);
  if (name == "bf16")
    return b.getBF16Type();
  if (name == "fp16")
    return b.getF16Type();
  if (name == "fp32")
    return b.getF32Type();
  return {};
}

bool hasElement(Type type, Type element) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getElementType() == element;
}

Type withElement(Type type, Type element) {
  return cast<RankedTensorType>(type).clone(element);
}

/// Casts `value` to `element` right before `user`. The cast is part of how
/// `user` computes, so it carries the user's location (ONNX node): a
/// pipeline cut then falls before it, and the transfer carries the value
/// in its own type, not the widened one.
Value castBefore(OpBuilder &b, Operation *user, Value value, Type element) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(user);
  return ds::CastOp::create(b, user->getLoc(),
                            withElement(value.getType(), element), value);
}

/// Casts `value` to `element` right after it is defined (at the start of
/// the block for an argument), so that every later op can read the cast.
Value castAfterDef(OpBuilder &b, Value value, Type element) {
  OpBuilder::InsertionGuard guard(b);
  if (Operation *def = value.getDefiningOp())
    b.setInsertionPointAfter(def);
  else
    b.setInsertionPointToStart(cast<BlockArgument>(value).getOwner());
  return ds::CastOp::create(b, value.getLoc(),
                            withElement(value.getType(), element), value);
}

/// The parameter an argument's accumulator state belongs to, or "".
StringRef accumulatorParam(func::FuncOp function, unsigned arg) {
  auto state = function.getArgAttrOfType<ds::StateAttr>(
      arg, ds::DsDialect::kStateAttrName);
  return state && state.isAccumulator() ? state.getParam() : StringRef();
}

StringRef paramName(func::FuncOp function, unsigned arg) {
  auto param = function.getArgAttrOfType<ds::ParamAttr>(
      arg, ds::DsDialect::kParamAttrName);
  return param ? param.getName() : StringRef();
}

/// The argument a result of `function` is written back into (ds.updates).
std::optional<unsigned> updatedArgument(func::FuncOp function, unsigned r) {
  if (auto updates = function.getResultAttrOfType<IntegerAttr>(
          r, ds::DsDialect::kUpdatesAttrName))
    return updates.getInt();
  return std::nullopt;
}

/// Whether `value`, an operand or result of a Ds_Loss16 op, is one of the
/// op's 16-bit values: a float tensor of the op's highest rank (the class
/// scores [N, C, d...], their log-probabilities or gradient), not the loss,
/// its gradient or the class weights.
bool isLoss16Value(Operation *op, Value value) {
  auto tensor = dyn_cast<RankedTensorType>(value.getType());
  if (!tensor || !isa<FloatType>(tensor.getElementType()))
    return false;
  int64_t rank = 0;
  for (Value operand : op->getOperands())
    if (auto t = dyn_cast<RankedTensorType>(operand.getType());
        t && isa<FloatType>(t.getElementType()))
      rank = std::max(rank, t.getRank());
  return tensor.getRank() == rank;
}

void refreshFunctionType(func::FuncOp function) {
  Block &body = function.getBody().front();
  function.setFunctionType(FunctionType::get(
      function.getContext(), body.getArgumentTypes(),
      body.getTerminator()->getOperandTypes()));
}

struct PrecisionPass : dsopt::impl::DsPrecisionBase<PrecisionPass> {
  using DsPrecisionBase::DsPrecisionBase;
  void runOnOperation() override;

private:
  LogicalResult convertMicroStep(func::FuncOp micro,
                                 const llvm::StringSet<> &trainable);
  LogicalResult convertOptimizerStep(func::FuncOp step,
                                     const llvm::StringSet<> &trainable);
  FloatType low, accum, f32;
};

LogicalResult
PrecisionPass::convertMicroStep(func::FuncOp micro,
                                const llvm::StringSet<> &trainable) {
  Block &body = micro.getBody().front();
  Operation *terminator = body.getTerminator();
  OpBuilder b(micro.getContext());

  // Trainable parameters are read in 16 bits; accumulators hold accum.
  for (BlockArgument arg : body.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (!hasElement(arg.getType(), f32))
      continue;
    if (trainable.contains(paramName(micro, i)))
      arg.setType(withElement(arg.getType(), low));
    else if (!accumulatorParam(micro, i).empty())
      arg.setType(withElement(arg.getType(), accum));
  }

  // The ops that add a gradient into its accumulator: they add in accum.
  llvm::SmallPtrSet<Operation *, 8> accumulations;
  for (unsigned r = 0; r < terminator->getNumOperands(); ++r) {
    std::optional<unsigned> arg = updatedArgument(micro, r);
    if (!arg)
      continue;
    Operation *def = terminator->getOperand(r).getDefiningOp();
    if (isa_and_nonnull<ds::AddOp>(def) &&
        llvm::is_contained(def->getOperands(), body.getArgument(*arg)))
      accumulations.insert(def);
  }

  // Attention's saved log-sum-exp and layer norm's mean and inverse
  // standard deviation stay f32 between the op that makes them and the
  // gradient that reads them (docs/training.md).
  auto isF32Statistic = [](Value v) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return false;
    unsigned r = cast<OpResult>(v).getResultNumber();
    return (isa<ds::AttentionOp, ds::AttentionPackedOp>(def) && r == 1) ||
           (isa<ds::LayerNormOp>(def) && r >= 1);
  };
  // The statistics a gradient reads: f32 whatever made them.
  auto isF32StatisticOperand = [&](OpOperand &operand) {
    Operation *op = operand.getOwner();
    unsigned i = operand.getOperandNumber();
    return isF32Statistic(operand.get()) ||
           (isa<ds::AttentionGradOp>(op) && i == 4) ||
           (isa<ds::AttentionPackedGradOp>(op) && i == 2) ||
           (isa<ds::LayerNormGradOp>(op) && (i == 2 || i == 3));
  };

  // Uses that read an f32 value as it is: f32 ops, a loss's f32 operands,
  // a sum (it reads its operand as it is), the return (it casts), fp32
  // accumulation.
  auto isF32Use = [&](OpOperand &use) {
    Operation *user = use.getOwner();
    if (isa<func::ReturnOp>(user) ||
        (accum == f32 && accumulations.contains(user)))
      return true;
    std::optional<ds::ComputePrecision> p = ds::getComputePrecision(user);
    return p == ds::ComputePrecision::ComputeF32 ||
           p == ds::ComputePrecision::Sum32 ||
           (p == ds::ComputePrecision::Loss16 && !isLoss16Value(user, use.get()));
  };

  // The element type a use reads a value in: the return, its result's
  // type (an accumulator's, f32 for the loss and other outputs); an
  // accumulation, accum; else f32 for f32 uses and the 16-bit type for the
  // others.
  auto readType = [&](OpOperand &use) -> Type {
    Operation *user = use.getOwner();
    if (isa<func::ReturnOp>(user)) {
      if (std::optional<unsigned> arg =
              updatedArgument(micro, use.getOperandNumber()))
        return getElementTypeOrSelf(body.getArgument(*arg).getType());
      return f32;
    }
    if (accumulations.contains(user))
      return accum;
    return isF32Use(use) ? Type(f32) : Type(low);
  };

  // f32 values read in 16 bits, by the value: one cast each.
  llvm::DenseMap<Value, Value> lowered;
  auto toLow = [&](Value v) {
    auto [it, inserted] = lowered.try_emplace(v);
    if (inserted)
      it->second = castAfterDef(b, v, low);
    return it->second;
  };

  // An f32 result that a 16-bit op reads is cast to 16 bits (an
  // activation); one only f32 uses read stays f32 (statistics, the loss).
  auto keepF32Result = [&](OpResult result) {
    if (hasElement(result.getType(), f32) &&
        !llvm::all_of(result.getUses(), isF32Use)) {
      Value cast = toLow(result);
      result.replaceAllUsesExcept(cast, cast.getDefiningOp());
    }
  };
  auto keepF32Results = [&](Operation *op) {
    for (OpResult result : op->getResults())
      keepF32Result(result);
  };

  // A sum over many rows (Ds_Sum32; layer norm's scale and bias gradients)
  // is written in the type its readers read: 16 bits where every reader
  // reads 16 bits (and `canBeLow`: the op can write them), else f32, cast
  // for any 16-bit reader. So no f32 copy of a 16-bit result is made, and
  // an f32 accumulator gets the f32 sum unrounded.
  auto placeSum = [&](OpResult result, bool canBeLow) {
    if (!hasElement(result.getType(), f32))
      return;
    bool allLow = canBeLow && !result.use_empty();
    for (OpOperand &use : result.getUses())
      allLow = allLow && readType(use) == low;
    if (allLow)
      result.setType(withElement(result.getType(), low));
    else
      keepF32Result(result);
  };

  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  for (Operation *op : ops) {
    if (accumulations.contains(op)) {
      for (OpOperand &operand : op->getOpOperands())
        if (auto tensor = dyn_cast<RankedTensorType>(operand.get().getType());
            tensor && tensor.getElementType() != accum)
          operand.set(castBefore(b, op, operand.get(), accum));
      op->getResult(0).setType(withElement(op->getResult(0).getType(), accum));
      continue;
    }
    std::optional<ds::ComputePrecision> precision =
        ds::getComputePrecision(op);
    if (!precision)
      return op->emitOpError()
             << "declares no compute precision (Ds_Compute16, "
                "Ds_Accumulate32, Ds_Sum32, Ds_ComputeF32, Ds_Loss16 or "
                "Ds_KeepTypes); "
                "ds-precision cannot place it";
    switch (*precision) {
    case ds::ComputePrecision::KeepTypes:
      break;
    case ds::ComputePrecision::Compute16:
    case ds::ComputePrecision::Accumulate32:
      for (OpOperand &operand : op->getOpOperands())
        if (hasElement(operand.get().getType(), f32) &&
            !isF32StatisticOperand(operand))
          operand.set(toLow(operand.get()));
      for (OpResult result : op->getResults()) {
        if (isa<ds::LayerNormGradOp>(op) && result.getResultNumber() >= 1)
          placeSum(result, /*canBeLow=*/true); // the scale and bias sums
        else if (hasElement(result.getType(), f32) && !isF32Statistic(result))
          result.setType(withElement(result.getType(), low));
      }
      break;
    case ds::ComputePrecision::Sum32:
      // The operand as it is (no f32 copy of a 16-bit one); the sum in the
      // type its readers read, 16 bits only from a 16-bit operand.
      for (OpResult result : op->getResults())
        placeSum(result, llvm::any_of(op->getOperands(), [&](Value v) {
                   return hasElement(v.getType(), low);
                 }));
      break;
    case ds::ComputePrecision::ComputeF32:
      for (OpOperand &operand : op->getOpOperands())
        if (hasElement(operand.get().getType(), low))
          operand.set(castBefore(b, op, operand.get(), f32));
      keepF32Results(op);
      break;
    case ds::ComputePrecision::Loss16:
      // The scores and log-probabilities in 16 bits, the rest in f32.
      for (OpOperand &operand : op->getOpOperands()) {
        bool low16 = isLoss16Value(op, operand.get());
        if (low16 && hasElement(operand.get().getType(), f32))
          operand.set(toLow(operand.get()));
        else if (!low16 && hasElement(operand.get().getType(), low))
          operand.set(castBefore(b, op, operand.get(), f32));
      }
      for (OpResult result : op->getResults())
        if (isLoss16Value(op, result) && hasElement(result.getType(), f32))
          result.setType(withElement(result.getType(), low));
      keepF32Results(op);
      break;
    }
  }

  // The loss is returned in f32, accumulators in accum.
  for (OpOperand &operand : terminator->getOpOperands()) {
    unsigned r = operand.getOperandNumber();
    Type want = r == 0 ? Type(f32) : Type();
    if (std::optional<unsigned> arg = updatedArgument(micro, r))
      want = getElementTypeOrSelf(body.getArgument(*arg).getType());
    Type have = getElementTypeOrSelf(operand.get().getType());
    if (want && have != want && isa<FloatType>(have))
      operand.set(castBefore(b, terminator, operand.get(), want));
  }
  refreshFunctionType(micro);
  return mlir::verify(micro);
}

LogicalResult
PrecisionPass::convertOptimizerStep(func::FuncOp step,
                                    const llvm::StringSet<> &trainable) {
  Block &body = step.getBody().front();
  Operation *terminator = body.getTerminator();
  OpBuilder b(step.getContext());
  MLIRContext *context = step.getContext();

  // The parameters' and accumulators' arguments; the first argument after
  // the states is where the master copies go.
  llvm::StringMap<unsigned> paramArg, accArg;
  unsigned firstAfterStates = 0;
  for (BlockArgument arg : body.getArguments()) {
    unsigned i = arg.getArgNumber();
    StringRef name = paramName(step, i);
    if (trainable.contains(name))
      paramArg[name] = i;
    if (StringRef acc = accumulatorParam(step, i); !acc.empty())
      accArg[acc] = i;
    if (!name.empty() || step.getArgAttr(i, ds::DsDialect::kStateAttrName))
      firstAfterStates = i + 1;
  }

  // Accumulators are read in f32 by what scales them (clipping, the loss
  // scale), each cast right before it reads it, so one f32 copy lives at a
  // time; the norm's sum of squares reads them as they are (it accumulates
  // in double), and so does an update that reads one directly (its kernel
  // converts each element to f32: no f32 copy at all).
  for (auto &[name, i] : accArg) {
    BlockArgument acc = body.getArgument(i);
    acc.setType(withElement(acc.getType(), accum));
    if (accum == f32)
      continue;
    for (OpOperand &use : llvm::make_early_inc_range(acc.getUses())) {
      auto update = dyn_cast<ds::OptimizerOpInterface>(use.getOwner());
      if (isa<ds::SumOfSquaresOp>(use.getOwner()) ||
          (update && &update.getGradOperand() == &use))
        continue;
      use.set(castBefore(b, use.getOwner(), acc, f32));
    }
  }

  // The master copies, in the order of the parameters' arguments.
  SmallVector<std::pair<unsigned, StringRef>> order;
  for (auto &[name, i] : paramArg)
    order.push_back({i, name});
  llvm::sort(order);
  llvm::StringMap<unsigned> masterArg;
  unsigned next = firstAfterStates;
  for (auto [i, name] : order) {
    BlockArgument param = body.getArgument(i);
    auto state = ds::StateAttr::get(context, kMasterRole, name);
    if (failed(step.insertArgument(
            next, param.getType(),
            b.getDictionaryAttr(
                b.getNamedAttr(ds::DsDialect::kStateAttrName, state)),
            param.getLoc())))
      return step.emitOpError() << "cannot add the master copy of '" << name
                                << "'";
    masterArg[name] = next++;
  }

  // The optimizer updates the master; the working copy is its cast.
  SmallVector<Value> extraResults;
  SmallVector<DictionaryAttr> extraAttrs;
  for (auto [i, name] : order) {
    BlockArgument param = body.getArgument(i);
    BlockArgument master = body.getArgument(masterArg[name]);
    for (OpOperand &use : llvm::make_early_inc_range(param.getUses())) {
      auto update = dyn_cast<ds::OptimizerOpInterface>(use.getOwner());
      if (!update || &update.getParamOperand() != &use)
        return use.getOwner()->emitOpError()
               << "reads parameter '" << name
               << "' other than as the parameter an optimizer updates; "
                  "ds-precision expects ds-optimizer's step";
      use.set(master);
      Value updated = update.getUpdatedParam();
      for (OpOperand &ret : terminator->getOpOperands())
        if (ret.get() == updated &&
            updatedArgument(step, ret.getOperandNumber()) == i)
          ret.set(castBefore(b, terminator, updated, low));
      extraResults.push_back(updated);
      extraAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
          ds::DsDialect::kUpdatesAttrName,
          b.getI64IntegerAttr(masterArg[name]))));
    }
    param.setType(withElement(param.getType(), low));
  }

  // Results tied to an argument take its type (the accumulators' reset).
  for (OpOperand &ret : terminator->getOpOperands()) {
    std::optional<unsigned> arg = updatedArgument(step, ret.getOperandNumber());
    if (!arg)
      continue;
    Type want = body.getArgument(*arg).getType();
    if (ret.get().getType() == want)
      continue;
    if (auto fill = ret.get().getDefiningOp<ds::FillOp>();
        fill && fill->hasOneUse())
      fill.getResult().setType(cast<RankedTensorType>(want));
    else
      ret.set(castBefore(b, terminator, ret.get(),
                         getElementTypeOrSelf(want)));
  }

  SmallVector<DictionaryAttr> resultAttrs;
  step.getAllResultAttrs(resultAttrs);
  SmallVector<Value> results(terminator->getOperands());
  results.append(extraResults);
  resultAttrs.append(extraAttrs);
  b.setInsertionPoint(terminator);
  func::ReturnOp::create(b, terminator->getLoc(), results);
  terminator->erase();
  refreshFunctionType(step);
  step.setAllResultAttrs(resultAttrs);
  return mlir::verify(step);
}

void PrecisionPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *context = module.getContext();
  f32 = Float32Type::get(context);
  low = parseDtype(context, dtype);
  if (!low || low == f32) {
    module.emitError() << "ds-precision: dtype must be bf16 or fp16, got '"
                       << dtype << "'";
    return signalPassFailure();
  }
  accum = gradAccumDtype.empty() ? low : parseDtype(context, gradAccumDtype);
  if (!accum || (accum != f32 && accum != low)) {
    module.emitError() << "ds-precision: grad-accum-dtype must be fp32 or "
                       << dtype << " (the training dtype), got '"
                       << gradAccumDtype << "'";
    return signalPassFailure();
  }
  auto micro = module.lookupSymbol<func::FuncOp>("micro_step");
  auto step = module.lookupSymbol<func::FuncOp>("optimizer_step");
  if (!micro || !step) {
    module.emitError() << "ds-precision: no @micro_step and @optimizer_step; "
                          "run ds-optimizer first";
    return signalPassFailure();
  }
  // The trainable parameters: those with an accumulator.
  llvm::StringSet<> trainable;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    if (StringRef param = accumulatorParam(step, i); !param.empty())
      trainable.insert(param);
    if (auto state = step.getArgAttrOfType<ds::StateAttr>(
            i, ds::DsDialect::kStateAttrName);
        state && state.getRole() == kMasterRole) {
      module.emitError() << "ds-precision: the step already has master "
                            "weights (the pass ran before)";
      return signalPassFailure();
    }
  }
  if (failed(convertMicroStep(micro, trainable)) ||
      failed(convertOptimizerStep(step, trainable)))
    return signalPassFailure();

  // The recipe, for the program's log and the plan.
  Builder b(context);
  NamedAttrList train;
  if (auto existing = module->getAttrOfType<DictionaryAttr>(
          ds::DsDialect::kTrainAttrName))
    train.append(existing.getValue());
  train.set("precision", b.getStringAttr(dtype));
  train.set("grad_accum_dtype",
            b.getStringAttr(gradAccumDtype.empty() ? StringRef(dtype)
                                                   : StringRef(gradAccumDtype)));
  module->setAttr(ds::DsDialect::kTrainAttrName, train.getDictionary(context));
}

/// docs/passes.md's table of compute precisions.
struct PrintPrecisionPass
    : dsopt::impl::DsPrintPrecisionBase<PrintPrecisionPass> {
  using DsPrintPrecisionBase::DsPrintPrecisionBase;
  void runOnOperation() override {
    MLIRContext *context = &getContext();
    auto *dialect = context->getOrLoadDialect<ds::DsDialect>();
    SmallVector<std::pair<std::string, StringRef>> rows;
    bool missing = false;
    for (RegisteredOperationName name :
         context->getRegisteredOperations()) {
      if (&name.getDialect() != dialect)
        continue;
      std::optional<ds::ComputePrecision> p = ds::getComputePrecision(name);
      if (!p) {
        if (name.getStringRef() == "ds.yield")
          continue; // the terminator of ds.fused's body
        getOperation().emitError()
            << name.getStringRef() << " declares no compute precision";
        missing = true;
        continue;
      }
      rows.push_back({name.getStringRef().str(),
                      ds::getComputePrecisionName(*p)});
    }
    if (missing)
      return signalPassFailure();
    llvm::sort(rows);
    llvm::outs() << "| op | computes in |\n|---|---|\n";
    for (auto &[name, precision] : rows)
      llvm::outs() << "| `" << name << "` | " << precision << " |\n";
    markAllAnalysesPreserved();
  }
};

} // namespace
