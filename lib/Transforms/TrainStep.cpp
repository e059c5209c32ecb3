//===- TrainStep.cpp - the training step: accumulation and the optimizer ---===//
//
// From @F_grad (inputs, params) -> (loss, grads...) build
//
//   @micro_step(inputs, params, acc...) -> (loss, acc'..., state'...)
//       acc' = acc + grad (or acc' = grad with one micro-batch per step);
//       acc' is tied to acc (ds.updates), so it lands in acc's buffer;
//       state' (batch norm running statistics) as @F_grad ties it to its
//       parameter, written on every micro-batch as PyTorch's train() does.
//   @optimizer_step(params, acc, states, lr, step[, loss_scale])
//                                   -> (grad_norm, params', states', acc'...)
//       norm = sqrt(sum of squares of acc) / k / s; g = acc * scale with
//       scale = min(1, clip / (norm + 1e-6)) / k / s, s the loss scale
//       (fp16; the gradients were seeded with it); one optimizer op per
//       parameter, reading acc with `scale` as its grad_scale operand (it
//       multiplies each element as it reads it: no scaled copy of acc);
//       acc' = 0 when accumulating.
//
// The math matches torch: loss.backward() per micro-batch of loss / k,
// torch.nn.utils.clip_grad_norm_, then torch.optim. With a loss scale the
// order is DeepSpeed's too: the runtime writes s / k into the micro step's
// loss_scale input, the seed of its backward pass (DeepSpeed's engine
// divides the loss by the accumulation steps before the loss scaler
// multiplies it), so the accumulated 16-bit gradients are s times the
// average and overflow is judged on them; the optimizer step divides by s
// alone.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringSwitch.h"

namespace dsopt {
#define GEN_PASS_DEF_DSOPTIMIZER
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

enum class Kind { AdamW, Adam, SGD, Lion };

/// The state tensors each optimizer keeps per parameter, by the roles its
/// op gives them (torch's names).
ArrayRef<StringRef> stateNames(Kind kind) {
  switch (kind) {
  case Kind::AdamW:
  case Kind::Adam: return ds::AdamWOp::getStateRoles();
  case Kind::SGD: return ds::SgdOp::getStateRoles();
  case Kind::Lion: return ds::LionOp::getStateRoles();
  }
  return {};
}

struct Param {
  std::string name;
  ds::ParamAttr attr;
  RankedTensorType type;
  /// The parameter argument's other attributes (ds.tp_split).
  SmallVector<NamedAttribute> extra;
};

struct OptimizerPass : dsopt::impl::DsOptimizerBase<OptimizerPass> {
  using DsOptimizerBase::DsOptimizerBase;
  void runOnOperation() override;

private:
  func::FuncOp buildMicroStep(func::FuncOp grad, ArrayRef<Param> params);
  FailureOr<func::FuncOp> buildOptimizerStep(ModuleOp module,
                                             ArrayRef<Param> params,
                                             Kind kind, Location loc);
};

DictionaryAttr stateAttr(Builder &b, ds::StateAttr state) {
  return b.getDictionaryAttr(
      b.getNamedAttr(ds::DsDialect::kStateAttrName, state));
}

DictionaryAttr updatesAttr(Builder &b, unsigned arg) {
  return b.getDictionaryAttr(b.getNamedAttr(ds::DsDialect::kUpdatesAttrName,
                                            b.getI64IntegerAttr(arg)));
}

Value scalarConstant(OpBuilder &b, Location loc, Type element, double v) {
  auto type = RankedTensorType::get({}, element);
  return ds::ConstantOp::create(
      b, loc,
      cast<ElementsAttr>(
          DenseElementsAttr::get(type, b.getFloatAttr(element, v))));
}

func::FuncOp OptimizerPass::buildMicroStep(func::FuncOp grad,
                                           ArrayRef<Param> params) {
  OpBuilder b(grad);
  auto micro = cast<func::FuncOp>(b.clone(*grad));
  micro.setSymName("micro_step");
  Block &body = micro.getBody().front();
  Operation *terminator = body.getTerminator();
  unsigned firstAcc = body.getNumArguments();

  // One accumulator argument per trainable parameter.
  SmallVector<DictionaryAttr> argAttrs;
  micro.getAllArgAttrs(argAttrs);
  for (const Param &param : params) {
    body.addArgument(param.type, micro.getLoc());
    argAttrs.push_back(
        stateAttr(b, ds::StateAttr::get(b.getContext(), param.name)));
  }

  b.setInsertionPoint(terminator);
  SmallVector<Value> results{terminator->getOperand(0)};
  SmallVector<DictionaryAttr> resultAttrs{micro.getResultAttrDict(0)};
  for (auto [i, param] : llvm::enumerate(params)) {
    Value g = terminator->getOperand(i + 1);
    Value acc = body.getArgument(firstAcc + i);
    Value updated = g;
    if (accumulation > 1) {
      // Right after the gradient is computed, so its buffer dies early.
      OpBuilder::InsertionGuard guard(b);
      if (Operation *def = g.getDefiningOp())
        b.setInsertionPointAfter(def);
      else
        b.setInsertionPointToStart(&body);
      updated = ds::AddOp::create(b, g.getLoc(), ValueRange{acc, g});
    }
    results.push_back(updated);
    resultAttrs.push_back(updatesAttr(b, firstAcc + i));
  }
  // The state updates, tied to their parameters as in @F_grad.
  for (unsigned r = params.size() + 1; r < terminator->getNumOperands(); ++r) {
    results.push_back(terminator->getOperand(r));
    resultAttrs.push_back(micro.getResultAttrDict(r));
  }
  func::ReturnOp::create(b, terminator->getLoc(), results);
  terminator->erase();
  SmallVector<Type> argTypes(body.getArgumentTypes()), resultTypes;
  for (Value v : results)
    resultTypes.push_back(v.getType());
  micro.setFunctionType(b.getFunctionType(argTypes, resultTypes));
  micro.setAllArgAttrs(argAttrs);
  micro.setAllResultAttrs(resultAttrs);
  return micro;
}

FailureOr<func::FuncOp>
OptimizerPass::buildOptimizerStep(ModuleOp module, ArrayRef<Param> params,
                                  Kind kind, Location loc) {
  MLIRContext *context = module.getContext();
  OpBuilder b(context);
  b.setInsertionPointToEnd(module.getBody());
  Type f32 = b.getF32Type();
  auto scalarF32 = RankedTensorType::get({}, f32);
  auto scalarI64 = RankedTensorType::get({}, b.getI64Type());

  // Arguments: params, accumulators, states, lr, step.
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  for (const Param &param : params) {
    argTypes.push_back(param.type);
    SmallVector<NamedAttribute> attrs(param.extra);
    attrs.push_back(b.getNamedAttr(ds::DsDialect::kParamAttrName, param.attr));
    argAttrs.push_back(b.getDictionaryAttr(attrs));
  }
  for (const Param &param : params) {
    argTypes.push_back(param.type);
    argAttrs.push_back(
        stateAttr(b, ds::StateAttr::get(b.getContext(), param.name)));
  }
  ArrayRef<StringRef> states = stateNames(kind);
  for (StringRef state : states)
    for (const Param &param : params) {
      argTypes.push_back(param.type);
      argAttrs.push_back(
          stateAttr(b, ds::StateAttr::get(context, state, param.name)));
    }
  unsigned lrArg = argTypes.size();
  argTypes.push_back(scalarF32);
  argAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
      ds::DsDialect::kInputAttrName, b.getStringAttr("lr"))));
  argTypes.push_back(scalarI64);
  argAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
      ds::DsDialect::kInputAttrName, b.getStringAttr("step"))));
  if (lossScaleInput) {
    argTypes.push_back(scalarF32);
    argAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
        ds::DsDialect::kInputAttrName, b.getStringAttr("loss_scale"))));
  }

  auto step = func::FuncOp::create(b, loc, "optimizer_step",
                                   b.getFunctionType(argTypes, {}));
  Block *body = step.addEntryBlock();
  b.setInsertionPointToEnd(body);
  size_t n = params.size();
  auto paramArg = [&](size_t i) { return body->getArgument(i); };
  auto accArg = [&](size_t i) { return body->getArgument(n + i); };
  auto stateArg = [&](size_t s, size_t i) {
    return body->getArgument(2 * n + s * n + i);
  };
  Value lr = body->getArgument(lrArg), stepCount = body->getArgument(lrArg + 1);

  // The global norm of the averaged gradient, and the scale of every
  // gradient: 1/k, times the clipping coefficient.
  // A tensor-parallel piece's squares are summed over tp; a whole
  // parameter's, the same on every tp rank, count once.
  SmallVector<Value> accs, pieces;
  for (size_t i = 0; i < n; ++i)
    (llvm::any_of(params[i].extra,
                  [](NamedAttribute a) {
                    return a.getName() == ds::DsDialect::kTpSplitAttrName;
                  })
         ? pieces
         : accs)
        .push_back(accArg(i));
  Value sumSq;
  if (!accs.empty() || pieces.empty())
    sumSq = ds::SumOfSquaresOp::create(b, loc, ValueRange(accs)).getResult();
  if (!pieces.empty()) {
    Operation *grid = module.lookupSymbol("grid");
    std::optional<int64_t> tp =
        grid ? ds::getDeviceGridAxis(grid, ds::GridAxis::tp) : std::nullopt;
    if (!tp)
      return module.emitError()
             << "tensor-parallel parameters without a grid with a tp axis";
    Value local =
        ds::SumOfSquaresOp::create(b, loc, ValueRange(pieces)).getResult();
    Value total = shard::AllReduceOp::create(
        b, loc, local.getType(), "grid", {static_cast<int16_t>(*tp)}, local,
        shard::ReductionKind::Sum);
    sumSq = sumSq ? ds::AddOp::create(b, loc, ValueRange{sumSq, total})
                        .getResult()
                  : total;
  }
  Value norm = ds::SqrtOp::create(b, loc, scalarF32, sumSq).getResult();
  // The accumulated gradients are scaled by the loss scale and k (when
  // loss-scaled, seeded with s / k per micro step, DeepSpeed's order, they
  // hold s times the average): the norm, the clipping and the update see
  // them unscaled.
  Value lossScale = lossScaleInput ? body->getArgument(lrArg + 2) : Value();
  if (lossScale)
    norm = ds::DivOp::create(b, loc, ValueRange{norm, lossScale}).getResult();
  const bool averageHere = accumulation > 1 && !lossScale;
  if (averageHere)
    norm = ds::DivOp::create(
               b, loc,
               ValueRange{norm, scalarConstant(b, loc, f32,
                                               static_cast<double>(
                                                   accumulation))})
               .getResult();
  Value scale;
  if (clip > 0.0) {
    Value denominator = ds::AddOp::create(
        b, loc, ValueRange{norm, scalarConstant(b, loc, f32, 1e-6)});
    Value coef = ds::DivOp::create(
        b, loc, ValueRange{scalarConstant(b, loc, f32, clip), denominator});
    Value one = scalarConstant(b, loc, f32, 1.0);
    Value below = ds::CompareOp::create(
        b, loc,
        ValueRange{coef, one},
        {b.getNamedAttr("predicate",
                        ds::ComparePredicateAttr::get(
                            context, ds::ComparePredicate::lt))});
    scale = ds::WhereOp::create(b, loc, ValueRange{below, coef, one});
  }
  if (averageHere) {
    Value inverse = scalarConstant(b, loc, f32, 1.0 / accumulation);
    scale = scale ? ds::MulOp::create(b, loc, ValueRange{scale, inverse})
                        .getResult()
                  : inverse;
  }
  if (lossScale)
    scale = scale ? ds::DivOp::create(b, loc, ValueRange{scale, lossScale})
                        .getResult()
                  : ds::DivOp::create(
                        b, loc,
                        ValueRange{scalarConstant(b, loc, f32, 1.0), lossScale})
                        .getResult();

  SmallVector<Value> results{norm};
  SmallVector<DictionaryAttr> resultAttrs{b.getDictionaryAttr(b.getNamedAttr(
      ds::DsDialect::kOutputAttrName, b.getStringAttr("grad_norm")))};
  NamedAttrList attrs;
  auto f = [&](double v) { return b.getF32FloatAttr(static_cast<float>(v)); };
  for (size_t i = 0; i < n; ++i) {
    const Param &param = params[i];
    Location paramLoc = NameLoc::get(b.getStringAttr(param.name + ".update"),
                                     loc);
    // The update reads the accumulator times `scale` an element at a time
    // (its grad_scale operand): no scaled copy of the gradient is made.
    Value g = accArg(i);
    auto withScale = [&](SmallVector<Value> operands) {
      if (scale)
        operands.push_back(scale);
      return operands;
    };
    ds::OptimizerOpInterface update;
    switch (kind) {
    case Kind::AdamW:
    case Kind::Adam:
      update = ds::AdamWOp::create(
          b, paramLoc,
          withScale({lr, stepCount, paramArg(i), g, stateArg(0, i),
                     stateArg(1, i)}),
          {b.getNamedAttr("beta1", f(beta1)), b.getNamedAttr("beta2", f(beta2)),
           b.getNamedAttr("epsilon", f(epsilon)),
           b.getNamedAttr("weight_decay", f(weightDecay)),
           b.getNamedAttr("decoupled", b.getBoolAttr(kind == Kind::AdamW))});
      break;
    case Kind::SGD: {
      SmallVector<NamedAttribute> sgdAttrs{
          b.getNamedAttr("momentum", f(momentum)),
          b.getNamedAttr("dampening", f(dampening)),
          b.getNamedAttr("weight_decay", f(weightDecay))};
      if (nesterov)
        sgdAttrs.push_back(b.getNamedAttr("nesterov", b.getUnitAttr()));
      update = ds::SgdOp::create(
          b, paramLoc,
          withScale({lr, stepCount, paramArg(i), g, stateArg(0, i)}),
          sgdAttrs);
      break;
    }
    case Kind::Lion:
      update = ds::LionOp::create(
          b, paramLoc, withScale({lr, paramArg(i), g, stateArg(0, i)}),
          {b.getNamedAttr("beta1", f(beta1)), b.getNamedAttr("beta2", f(beta2)),
           b.getNamedAttr("weight_decay", f(weightDecay))});
      break;
    }
    if (failed(mlir::verify(update)))
      return failure();
    // The updated parameter, then the updated states.
    results.push_back(update.getUpdatedParam());
    resultAttrs.push_back(updatesAttr(b, i));
    for (auto [s, state] : llvm::enumerate(update.getUpdatedStates())) {
      results.push_back(state);
      resultAttrs.push_back(updatesAttr(b, 2 * n + s * n + i));
    }
  }
  // Reset the accumulators for the next step.
  if (accumulation > 1)
    for (size_t i = 0; i < n; ++i) {
      results.push_back(ds::FillOp::create(b, loc, params[i].type,
                                           b.getF64FloatAttr(0.0)));
      resultAttrs.push_back(updatesAttr(b, n + i));
    }
  func::ReturnOp::create(b, loc, results);
  SmallVector<Type> resultTypes;
  for (Value v : results)
    resultTypes.push_back(v.getType());
  step.setFunctionType(b.getFunctionType(argTypes, resultTypes));
  step.setAllArgAttrs(argAttrs);
  step.setAllResultAttrs(resultAttrs);
  return step;
}

void OptimizerPass::runOnOperation() {
  ModuleOp module = getOperation();
  std::optional<Kind> kind = llvm::StringSwitch<std::optional<Kind>>(optimizer)
                                 .CaseLower("adamw", Kind::AdamW)
                                 .CaseLower("adam", Kind::Adam)
                                 .CaseLower("sgd", Kind::SGD)
                                 .CaseLower("lion", Kind::Lion)
                                 .Default(std::nullopt);
  if (!kind) {
    module.emitError() << "unknown optimizer '" << optimizer
                       << "' (adamw, adam, sgd or lion)";
    return signalPassFailure();
  }
  if (accumulation < 1) {
    module.emitError() << "gradient accumulation must be at least 1";
    return signalPassFailure();
  }
  if (!llvm::is_contained({StringRef("Constant"), StringRef("WarmupLR"),
                           StringRef("WarmupDecayLR"),
                           StringRef("WarmupCosineLR")},
                          StringRef(lrSchedule))) {
    module.emitError() << "unknown learning-rate schedule '" << lrSchedule
                       << "' (Constant, WarmupLR, WarmupDecayLR or "
                          "WarmupCosineLR)";
    return signalPassFailure();
  }
  if (stepsPerPrint < 1) {
    module.emitError() << "steps-per-print must be at least 1";
    return signalPassFailure();
  }
  auto grad = module.lookupSymbol<func::FuncOp>(function + "_grad");
  if (!grad) {
    module.emitError() << "no gradient function @" << function
                       << "_grad; run ds-autodiff first";
    return signalPassFailure();
  }
  for (StringRef name : {"micro_step", "optimizer_step"})
    if (module.lookupSymbol(name)) {
      module.emitError() << "@" << name << " already exists";
      return signalPassFailure();
    }

  // The trainable parameters, in the order of their gradients (the state
  // updates that follow them stay results of the micro step).
  SmallVector<Param> params;
  for (unsigned i = 1; i < grad.getNumResults(); ++i) {
    if (grad.getResultAttr(i, ds::DsDialect::kUpdatesAttrName))
      break;
    auto name = grad.getResultAttrOfType<StringAttr>(
        i, ds::DsDialect::kGradAttrName);
    if (!name) {
      grad.emitError() << "result " << i << " is not a gradient (ds.grad)";
      return signalPassFailure();
    }
    ds::ParamAttr attr;
    SmallVector<NamedAttribute> extra;
    for (unsigned a = 0; a < grad.getNumArguments(); ++a)
      if (auto p = grad.getArgAttrOfType<ds::ParamAttr>(
              a, ds::DsDialect::kParamAttrName);
          p && p.getName() == name.getValue()) {
        attr = p;
        if (Attribute split =
                grad.getArgAttr(a, ds::DsDialect::kTpSplitAttrName))
          extra.push_back(NamedAttribute(
              StringAttr::get(module.getContext(),
                              ds::DsDialect::kTpSplitAttrName),
              split));
      }
    if (!attr) {
      grad.emitError() << "no parameter '" << name.getValue() << "'";
      return signalPassFailure();
    }
    params.push_back({name.getValue().str(), attr,
                      cast<RankedTensorType>(grad.getResultTypes()[i]),
                      extra});
  }

  buildMicroStep(grad, params);
  if (failed(buildOptimizerStep(module, params, *kind, grad.getLoc())))
    return signalPassFailure();
  grad.erase();
  if (auto forward = module.lookupSymbol<func::FuncOp>(function))
    forward.erase();

  // The recipe, for the program's log and the plan.
  Builder b(module.getContext());
  static constexpr StringRef names[] = {"AdamW", "Adam", "SGD", "Lion"};
  NamedAttrList train;
  if (auto existing = module->getAttrOfType<DictionaryAttr>(
          ds::DsDialect::kTrainAttrName))
    train.append(existing.getValue());
  train.set("optimizer", b.getStringAttr(optimizerName.empty()
                                             ? names[static_cast<int>(*kind)]
                                             : StringRef(optimizerName)));
  train.set("accumulation", b.getI64IntegerAttr(accumulation));
  train.set("gradient_clipping", b.getF64FloatAttr(clip));
  train.set("weight_decay", b.getF64FloatAttr(weightDecay));
  if (*kind == Kind::SGD) {
    train.set("momentum", b.getF64FloatAttr(momentum));
    train.set("dampening", b.getF64FloatAttr(dampening));
    train.set("nesterov", b.getBoolAttr(nesterov));
  } else {
    train.set("beta1", b.getF64FloatAttr(beta1));
    train.set("beta2", b.getF64FloatAttr(beta2));
    if (*kind != Kind::Lion)
      train.set("epsilon", b.getF64FloatAttr(epsilon));
  }
  // The learning-rate schedule and the loop's settings.
  train.set("lr", b.getF64FloatAttr(lr));
  train.set("schedule", b.getStringAttr(lrSchedule));
  train.set("warmup_min_lr", b.getF64FloatAttr(warmupMinLr));
  train.set("warmup_max_lr", b.getF64FloatAttr(warmupMaxLr));
  train.set("warmup_num_steps", b.getI64IntegerAttr(warmupNumSteps));
  train.set("total_num_steps", b.getI64IntegerAttr(totalNumSteps));
  if (lossScaleInput)
    train.set("loss_scaler",
              b.getDictionaryAttr(
                  {b.getNamedAttr("loss_scale",
                                  b.getF64FloatAttr(staticLossScale)),
                   b.getNamedAttr("initial_scale_power",
                                  b.getI64IntegerAttr(initialScalePower)),
                   b.getNamedAttr("loss_scale_window",
                                  b.getI64IntegerAttr(lossScaleWindow)),
                   b.getNamedAttr("hysteresis",
                                  b.getI64IntegerAttr(hysteresis)),
                   b.getNamedAttr("consecutive_hysteresis",
                                  b.getBoolAttr(consecutiveHysteresis)),
                   b.getNamedAttr("min_loss_scale",
                                  b.getF64FloatAttr(minLossScale))}));
  train.set("warmup_linear", b.getBoolAttr(warmupLinear));
  train.set("warmup_min_ratio", b.getF64FloatAttr(warmupMinRatio));
  train.set("cos_min_ratio", b.getF64FloatAttr(cosMinRatio));
  train.set("steps_per_print", b.getI64IntegerAttr(stepsPerPrint));
  if (microBatch > 0)
    train.set("micro_batch", b.getI64IntegerAttr(microBatch));
  if (trainBatch > 0)
    train.set("train_batch", b.getI64IntegerAttr(trainBatch));
  module->setAttr(ds::DsDialect::kTrainAttrName,
                  train.getDictionary(module.getContext()));
}

} // namespace
