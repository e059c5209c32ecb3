//===- Autodiff.cpp - reverse-mode differentiation of the loss -------------===//
//
// @F (inputs, parameters) -> (loss, ...) becomes, in a clone @F_grad,
// @F_grad (inputs, parameters) -> (loss, dloss/dp for every trainable p,
//                                  new state...).
//
// State: the running statistics of training-mode batch norm held in
// parameters are not trained; the forward pass computes their new values,
// returned after the gradients and tied to their parameter (ds.updates), so
// every run of the function (each micro-batch) writes them back, as
// PyTorch's BatchNorm does in train().
//
// Activity analysis keeps the backward pass to what matters: a value is
// active when it depends on a trainable parameter (forward) and the loss
// depends on it (backward); only floating-point values carry gradients.
// Active ops are visited in reverse order and asked for their vector-
// Jacobian product (VJPOpInterface); gradients of values with several uses
// are summed.
//
// Every differentiated op gets an id (ds.forward_id) and every op built for
// its derivative the same id (ds.grad_of), so later passes (ds-pipeline)
// know which forward op a backward op belongs to however it was cloned or
// relocated.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"
#include "dsopt/Transforms/ArgAttrs.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/GlobPattern.h"

namespace dsopt {
#define GEN_PASS_DEF_DSAUTODIFF
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

bool isFloatTensor(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && isa<FloatType>(type.getElementType());
}

std::string describeOp(Operation *op) {
  std::string node = ds::getNodeName(op->getLoc());
  std::string text = "'" + op->getName().getStringRef().str() + "'";
  if (!node.empty())
    text += " (ONNX node '" + node + "')";
  return text;
}

/// Collects the ops a builder inserts.
struct InsertedOps : OpBuilder::Listener {
  SmallVector<Operation *> ops;
  void notifyOperationInserted(Operation *op,
                               OpBuilder::InsertPoint) override {
    ops.push_back(op);
  }
};

/// The attributes of `op` but the autodiff ids.
DictionaryAttr attrsWithoutIds(Operation *op) {
  NamedAttrList attrs(op->getAttrDictionary());
  attrs.erase(ds::DsDialect::kGradOfAttrName);
  attrs.erase(ds::DsDialect::kForwardIdAttrName);
  return attrs.getDictionary(op->getContext());
}

/// Merges every backward op into an earlier op that differs from it only in
/// its autodiff ids (the VJPs of the three projections of one activation
/// each reshape it): CSE would have merged them before the ids existed, and
/// the ids must not change what the program computes. The earlier op stays,
/// with its ids, as CSE keeps the first op.
void mergeDuplicatesUpToIds(Block &body) {
  llvm::DenseMap<llvm::hash_code, SmallVector<Operation *>> seen;
  for (Operation &op : llvm::make_early_inc_range(body.without_terminator())) {
    if (op.getNumRegions() != 0 || !isMemoryEffectFree(&op))
      continue;
    DictionaryAttr attrs = attrsWithoutIds(&op);
    llvm::hash_code key = llvm::hash_combine(
        op.getName().getAsOpaquePointer(),
        llvm::hash_combine_range(op.getOperands().begin(),
                                 op.getOperands().end()),
        llvm::hash_combine_range(op.getResultTypes().begin(),
                                 op.getResultTypes().end()),
        attrs.getAsOpaquePointer());
    SmallVector<Operation *> &candidates = seen[key];
    Operation *earlier = nullptr;
    if (op.hasAttr(ds::DsDialect::kGradOfAttrName))
      for (Operation *candidate : candidates)
        if (candidate->getName() == op.getName() &&
            candidate->getOperands() == op.getOperands() &&
            candidate->getResultTypes() == op.getResultTypes() &&
            attrsWithoutIds(candidate) == attrs) {
          earlier = candidate;
          break;
        }
    if (!earlier) {
      candidates.push_back(&op);
      continue;
    }
    op.replaceAllUsesWith(earlier);
    op.erase();
  }
}

/// Builds the ops marked ds.recompute_in_backward (the sequence-parallel
/// all-gathers of column-parallel inputs, Korthikanti et al. 2022, 4.2.3)
/// again for the backward ops that read their results, just before the
/// first of them, so the forward keeps their operands (the rank's rows)
/// rather than their results. Taken last to first, so the producer of a
/// clone's operand, if marked too, is then built again for the clone. The
/// clones belong to the backward of the first op reading them.
void recomputeInBackward(Block &body) {
  StringRef marker = ds::DsDialect::kRecomputeInBackwardAttrName;
  StringRef gradOf = ds::DsDialect::kGradOfAttrName;
  SmallVector<Operation *> marked;
  for (Operation &op : body.without_terminator())
    if (op.hasAttr(marker))
      marked.push_back(&op);
  for (Operation *op : llvm::reverse(marked)) {
    op->removeAttr(marker);
    Operation *first = nullptr;
    for (Operation *user : op->getUsers())
      if (user->hasAttr(gradOf) && (!first || user->isBeforeInBlock(first)))
        first = user;
    if (!first)
      continue;
    OpBuilder builder(first);
    Operation *again = builder.clone(*op);
    again->removeAttr(ds::DsDialect::kForwardIdAttrName);
    again->setAttr(gradOf, first->getAttr(gradOf));
    for (auto [result, recomputed] :
         llvm::zip(op->getResults(), again->getResults()))
      result.replaceUsesWithIf(recomputed, [&](OpOperand &use) {
        return use.getOwner()->hasAttr(gradOf);
      });
  }
}

struct AutodiffPass : dsopt::impl::DsAutodiffBase<AutodiffPass> {
  using DsAutodiffBase::DsAutodiffBase;

  void runOnOperation() override;

private:
  /// The index of the loss among the results of `function`.
  FailureOr<unsigned> findLoss(func::FuncOp function);
  /// Decides which parameters train and records it on their #ds.param;
  /// `state` never trains.
  LogicalResult markTrainable(func::FuncOp function, Value loss,
                              const llvm::DenseSet<Value> &state,
                              SmallVectorImpl<BlockArgument> &trainable);
};

/// A parameter that the forward pass updates (not by gradient): the new
/// value of a batch norm's running statistic.
struct StateUpdate {
  BlockArgument param;
  Value updated;
};

/// The running statistics of training-mode batch norms that are parameters,
/// each with its new value. A statistic that is a constant (no initializer)
/// has nowhere to persist and stays as it is. A parameter that is a
/// running statistic must be nothing else: two batch norms sharing one
/// (an exporter that merged equal initializers) or another op reading it
/// would see one update overwrite the other.
FailureOr<SmallVector<StateUpdate>> findStateUpdates(func::FuncOp function) {
  SmallVector<StateUpdate> updates;
  llvm::DenseSet<Value> seen;
  WalkResult walk = function.walk([&](ds::BatchNormTrainOp op) {
    std::pair<OpOperand *, Value> stats[] = {
        {&op.getRunningMeanMutable(), op.getRunningMeanOut()},
        {&op.getRunningVarMutable(), op.getRunningVarOut()}};
    for (auto [operand, updated] : stats) {
      auto arg = dyn_cast<BlockArgument>(operand->get());
      if (!arg || !function.getArgAttrOfType<ds::ParamAttr>(
                      arg.getArgNumber(), ds::DsDialect::kParamAttrName))
        continue;
      auto param = function.getArgAttrOfType<ds::ParamAttr>(
          arg.getArgNumber(), ds::DsDialect::kParamAttrName);
      if (!seen.insert(arg).second || !arg.hasOneUse()) {
        op.emitError() << "initializer '" << param.getName()
                       << "' is a running statistic of " << describeOp(op)
                       << " and is also read elsewhere; each training-mode "
                          "BatchNormalization needs running statistics of its "
                          "own (an exporter may have merged initializers of "
                          "equal values: make them differ)";
        return WalkResult::interrupt();
      }
      updates.push_back({arg, updated});
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  return updates;
}

FailureOr<unsigned> AutodiffPass::findLoss(func::FuncOp function) {
  auto name = [&](unsigned i) -> std::string {
    auto attr = function.getResultAttrOfType<StringAttr>(
        i, ds::DsDialect::kOutputAttrName);
    return attr ? attr.getValue().str() : "result " + std::to_string(i);
  };
  unsigned count = function.getNumResults();
  if (!loss.empty()) {
    SmallVector<std::string> names;
    for (unsigned i = 0; i < count; ++i) {
      if (name(i) == loss) {
        auto type = cast<RankedTensorType>(function.getResultTypes()[i]);
        if (!isa<FloatType>(type.getElementType()) ||
            type.getNumElements() != 1)
          return function.emitError()
                 << "the loss '" << loss << "' must be a floating-point "
                 << "scalar, but it is " << type;
        return i;
      }
      names.push_back("'" + name(i) + "'");
    }
    return function.emitError() << "the model has no output named '" << loss
                                << "'; its outputs are "
                                << llvm::join(names, ", ");
  }
  SmallVector<unsigned> candidates;
  SmallVector<std::string> names;
  for (unsigned i = 0; i < count; ++i) {
    auto type = cast<RankedTensorType>(function.getResultTypes()[i]);
    if (isa<FloatType>(type.getElementType()) && type.getNumElements() == 1 &&
        type.getRank() <= 1) {
      candidates.push_back(i);
      names.push_back("'" + name(i) + "'");
    }
  }
  if (candidates.size() == 1)
    return candidates.front();
  if (candidates.empty())
    return function.emitError()
           << "the model has no scalar floating-point output to use as the "
              "loss; a training graph must compute its loss";
  return function.emitError()
         << "the model has several scalar floating-point outputs ("
         << llvm::join(names, ", ") << "); choose the loss with --loss NAME";
}

LogicalResult
AutodiffPass::markTrainable(func::FuncOp function, Value loss,
                            const llvm::DenseSet<Value> &state,
                            SmallVectorImpl<BlockArgument> &trainable) {
  SmallVector<llvm::GlobPattern> patterns;
  SmallVector<bool> used;
  for (const std::string &text : frozen) {
    auto pattern = llvm::GlobPattern::create(text);
    if (!pattern) {
      llvm::consumeError(pattern.takeError());
      return function.emitError() << "--frozen: '" << text
                                  << "' is not a valid glob pattern";
    }
    patterns.push_back(std::move(*pattern));
    used.push_back(false);
  }

  // Values the loss depends on.
  llvm::DenseSet<Value> reachesLoss{loss};
  Block &body = function.getBody().front();
  for (Operation &op : llvm::reverse(body.without_terminator()))
    if (llvm::any_of(op.getResults(),
                     [&](Value r) { return reachesLoss.contains(r); }))
      for (Value operand : op.getOperands())
        reachesLoss.insert(operand);

  MLIRContext *context = function.getContext();
  // Set at once below: setting one argument's attribute rebuilds the array
  // of every argument's, quadratic in thousands of parameters.
  SmallVector<DictionaryAttr> argAttrs;
  function.getAllArgAttrs(argAttrs);
  bool anyParam = false;
  for (BlockArgument arg : body.getArguments()) {
    auto param = function.getArgAttrOfType<ds::ParamAttr>(
        arg.getArgNumber(), ds::DsDialect::kParamAttrName);
    if (!param)
      continue;
    bool isFrozen = false;
    for (auto [pattern, hit] : llvm::zip(patterns, used))
      if (pattern.match(param.getName())) {
        hit = true;
        isFrozen = true;
      }
    // The importer marks every float initializer trainable, or those that
    // ONNX's TrainingInfoProto updates when the model has one.
    bool trains = param.getTrainable() && !isFrozen && isFloatTensor(arg) &&
                  reachesLoss.contains(arg) && !state.contains(arg);
    if (trains)
      trainable.push_back(arg);
    setArgAttrIn(argAttrs, arg.getArgNumber(), ds::DsDialect::kParamAttrName,
                 ds::ParamAttr::get(context, param.getName(), trains,
                                    param.getData()));
    anyParam = true;
  }
  if (anyParam)
    function.setAllArgAttrs(argAttrs);
  // Initializers import folded away (shapes, constants) never train, but
  // naming them is not a mistake.
  if (auto folded = function->getParentOfType<ModuleOp>()->getAttrOfType<ArrayAttr>(
          ds::DsDialect::kFoldedInitializersAttrName))
    for (auto name : folded.getAsValueRange<StringAttr>())
      for (auto [pattern, hit] : llvm::zip(patterns, used))
        if (pattern.match(name))
          hit = true;
  for (auto [text, hit] : llvm::zip(frozen, used))
    if (!hit)
      return function.emitError()
             << "--frozen: '" << text << "' matches no initializer";
  return success();
}

void AutodiffPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto forward = module.lookupSymbol<func::FuncOp>(function);
  if (!forward || forward.isDeclaration()) {
    module.emitError() << "no function @" << function << " to differentiate";
    return signalPassFailure();
  }
  if (!forward.getBody().hasOneBlock()) {
    forward.emitError() << "differentiation needs a single-block function";
    return signalPassFailure();
  }
  FailureOr<unsigned> lossIndex = findLoss(forward);
  if (failed(lossIndex))
    return signalPassFailure();

  // Work on a clone: the forward function stays as it is.
  OpBuilder moduleBuilder(module.getBodyRegion());
  moduleBuilder.setInsertionPointAfter(forward);
  auto grad = cast<func::FuncOp>(moduleBuilder.clone(*forward));
  std::string gradName = function + "_grad";
  if (module.lookupSymbol(gradName)) {
    module.emitError() << "@" << gradName << " already exists";
    return signalPassFailure();
  }
  grad.setSymName(gradName);

  Block &body = grad.getBody().front();
  Operation *terminator = body.getTerminator();
  Value loss = terminator->getOperand(*lossIndex);

  FailureOr<SmallVector<StateUpdate>> stateUpdates = findStateUpdates(grad);
  if (failed(stateUpdates))
    return signalPassFailure();
  llvm::DenseSet<Value> state;
  for (const StateUpdate &update : *stateUpdates)
    state.insert(update.param);
  SmallVector<BlockArgument> trainable;
  if (failed(markTrainable(grad, loss, state, trainable)))
    return signalPassFailure();
  if (trainable.empty()) {
    grad.emitError() << "no parameter trains: none is a floating-point "
                        "initializer that reaches the loss and is not frozen";
    return signalPassFailure();
  }

  // Activity: depends on a trainable parameter and reaches the loss.
  llvm::DenseSet<Value> varied(trainable.begin(), trainable.end());
  for (Operation &op : body.without_terminator())
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return varied.contains(v); }))
      for (Value result : op.getResults())
        if (isFloatTensor(result))
          varied.insert(result);
  llvm::DenseSet<Value> useful{loss};
  for (Operation &op : llvm::reverse(body.without_terminator()))
    if (llvm::any_of(op.getResults(),
                     [&](Value r) { return useful.contains(r); }))
      for (Value operand : op.getOperands())
        useful.insert(operand);
  auto active = [&](Value v) {
    return varied.contains(v) && useful.contains(v);
  };

  // Discrete values computed from trained parameters (ArgMax's and TopK's
  // indices, comparisons, casts to integers) carry no derivative. Used as
  // indices or conditions that is right (PyTorch agrees); but turned back
  // into a float on the way to the loss, the parameters behind them would
  // silently get no gradient from that path: an error naming the op that
  // made the value discrete.
  llvm::DenseMap<Value, Operation *> discreteOrigin;
  for (Operation &op : body.without_terminator()) {
    Operation *origin = nullptr;
    for (Value operand : op.getOperands()) {
      if (varied.contains(operand))
        origin = &op;
      else if (Operation *from = discreteOrigin.lookup(operand))
        origin = origin ? origin : from;
    }
    if (!origin)
      continue;
    for (Value result : op.getResults()) {
      if (!isFloatTensor(result)) {
        discreteOrigin[result] = origin;
        continue;
      }
      if (!isa<ds::CastOp>(op) || !useful.contains(result) ||
          !discreteOrigin.count(op.getOperand(0)))
        continue;
      origin->emitError()
          << "op " << describeOp(origin)
          << " has no derivative, yet its result reaches the loss through "
          << describeOp(&op)
          << ", a conversion to float: the parameters before it would get "
             "no gradient from that path. Keep the loss on differentiable "
             "ops, or freeze those parameters (--frozen)";
      return signalPassFailure();
    }
  }

  OpBuilder builder(terminator);
  llvm::DenseMap<Value, Value> grads;
  auto accumulate = [&](Value value, Value g, Location loc) {
    auto [it, inserted] = grads.try_emplace(value, g);
    if (!inserted)
      it->second = ds::AddOp::create(builder, loc, ValueRange{it->second, g})
                       .getResult();
  };

  // dloss/dloss = 1, or the loss scale: a new last argument, an f32 scalar
  // input the runtime writes before each micro step (fp16 training).
  {
    auto type = cast<RankedTensorType>(loss.getType());
    Value seed;
    if (lossScaleInput) {
      // The loss's shape (a scalar, or one element), in f32.
      auto scalarF32 = type.clone(builder.getF32Type());
      unsigned index = grad.getNumArguments();
      if (failed(grad.insertArgument(
              index, scalarF32,
              builder.getDictionaryAttr(builder.getNamedAttr(
                  ds::DsDialect::kInputAttrName,
                  builder.getStringAttr("loss_scale"))),
              loss.getLoc())))
        return signalPassFailure();
      seed = body.getArgument(index);
      if (type != scalarF32)
        seed = ds::CastOp::create(builder, loss.getLoc(), type, seed);
    } else {
      Attribute one = builder.getFloatAttr(type.getElementType(), 1.0);
      seed = ds::ConstantOp::create(
          builder, loss.getLoc(),
          cast<ElementsAttr>(DenseElementsAttr::get(type, one)));
    }
    grads[loss] = seed;
  }

  // The ops of the forward pass, then walked backwards.
  SmallVector<Operation *> forwardOps;
  for (Operation &op : body.without_terminator())
    forwardOps.push_back(&op);
  InsertedOps inserted;
  builder.setListener(&inserted);
  int64_t nextId = 0;
  for (Operation *op : llvm::reverse(forwardOps)) {
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value result : op->getResults()) {
      Value g = active(result) ? grads.lookup(result) : Value();
      resultGrads.push_back(g);
      any |= static_cast<bool>(g);
    }
    if (!any)
      continue;
    SmallVector<bool> needed;
    bool anyNeeded = false;
    for (Value operand : op->getOperands()) {
      needed.push_back(active(operand));
      anyNeeded |= needed.back();
    }
    if (!anyNeeded)
      continue;
    auto vjp = dyn_cast<ds::VJPOpInterface>(op);
    if (!vjp) {
      op->emitError() << "op " << describeOp(op)
                      << " is on the path from the trained parameters to "
                         "the loss but has no derivative";
      return signalPassFailure();
    }
    inserted.ops.clear();
    SmallVector<Value> operandGrads;
    if (failed(vjp.buildVJP(builder, resultGrads, needed, operandGrads))) {
      op->emitError() << "cannot differentiate " << describeOp(op);
      return signalPassFailure();
    }
    for (auto [operand, g, need] :
         llvm::zip(op->getOperands(), operandGrads, needed))
      if (g && need) {
        if (g.getType() != operand.getType()) {
          op->emitError() << "the derivative of " << describeOp(op)
                          << " has type " << g.getType()
                          << " for an operand of type " << operand.getType();
          return signalPassFailure();
        }
        accumulate(operand, g, op->getLoc());
      }
    // Constants belong to no stage; left bare, they fold and unique freely.
    IntegerAttr id = builder.getI64IntegerAttr(nextId++);
    op->setAttr(ds::DsDialect::kForwardIdAttrName, id);
    for (Operation *backward : inserted.ops)
      if (!backward->hasTrait<OpTrait::ConstantLike>())
        backward->setAttr(ds::DsDialect::kGradOfAttrName, id);
  }
  builder.setListener(nullptr);

  // Return the loss and one gradient per trainable parameter.
  SmallVector<Value> results{loss};
  SmallVector<DictionaryAttr> resultAttrs{
      grad.getResultAttrDict(*lossIndex)};
  for (BlockArgument arg : trainable) {
    Value g = grads.lookup(arg);
    auto param = grad.getArgAttrOfType<ds::ParamAttr>(
        arg.getArgNumber(), ds::DsDialect::kParamAttrName);
    if (!g) {
      // Reaches the loss only through ops whose derivative is zero.
      auto type = cast<RankedTensorType>(arg.getType());
      g = ds::ConstantOp::create(
          builder, grad.getLoc(),
          cast<ElementsAttr>(DenseElementsAttr::get(
              type, builder.getFloatAttr(type.getElementType(), 0.0))));
    }
    results.push_back(g);
    resultAttrs.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
        ds::DsDialect::kGradAttrName, builder.getStringAttr(param.getName()))));
  }
  // Then the new state, each tied to its parameter.
  for (const StateUpdate &update : *stateUpdates) {
    results.push_back(update.updated);
    resultAttrs.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
        ds::DsDialect::kUpdatesAttrName,
        builder.getI64IntegerAttr(update.param.getArgNumber()))));
  }
  auto ret = func::ReturnOp::create(builder, terminator->getLoc(), results);
  terminator->erase();
  mergeDuplicatesUpToIds(body);
  // After the merge, which would take a recomputed op for a duplicate.
  recomputeInBackward(body);
  // Merging may have replaced (and erased) values in `results`: the types
  // are those of what the return holds now.
  SmallVector<Type> resultTypes;
  for (Value v : ret.getOperands())
    resultTypes.push_back(v.getType());
  grad.setFunctionType(
      builder.getFunctionType(grad.getArgumentTypes(), resultTypes));
  grad.setAllResultAttrs(resultAttrs);
}

} // namespace
