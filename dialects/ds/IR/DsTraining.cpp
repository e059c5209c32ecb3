//===- DsTraining.cpp - gradient, optimizer and state ops ------------------===//
//
// Result types, verifiers, cost and runtime kernels of the ops the training
// step is built from: the gradient ops that `ds-autodiff` creates for
// derivatives that need their own kernel, the optimizer updates, the global
// gradient norm and ds.fill.
//
//===----------------------------------------------------------------------===//

#include "ds/IR/DsDialect.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace dsopt::ds;

namespace {
using Types = SmallVectorImpl<Type>;

RankedTensorType tensorType(Value value) {
  return value ? dyn_cast<RankedTensorType>(value.getType()) : nullptr;
}

int64_t elements(Value value) {
  return cast<ShapedType>(value.getType()).getNumElements();
}

LogicalResult verifyAxis(Operation *op, int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= rank)
    return op->emitOpError() << "axis " << axis
                             << " is out of range for rank " << rank;
  return success();
}

StringRef reductionName(LossReduction reduction) {
  switch (reduction) {
  case LossReduction::none: return "dsrt::Reduction::None";
  case LossReduction::sum: return "dsrt::Reduction::Sum";
  case LossReduction::mean: return "dsrt::Reduction::Mean";
  }
  return "dsrt::Reduction::Mean";
}

/// The gradient of a loss has the loss's shape: a scalar for sum and mean,
/// the labels' shape for none.
LogicalResult verifyLossGrad(Operation *op, Value lossGrad, Value labels,
                             LossReduction reduction) {
  auto grad = tensorType(lossGrad);
  if (reduction == LossReduction::none) {
    if (grad.getShape() != tensorType(labels).getShape())
      return op->emitOpError() << "loss gradient " << grad
                               << " must have the labels' shape for "
                                  "reduction none";
  } else if (grad.getNumElements() != 1) {
    return op->emitOpError() << "loss gradient must be a scalar";
  }
  return success();
}

/// The forward op's result shape for `input`, to check a window gradient's
/// declared input type against the gradient it receives.
LogicalResult verifyWindowGrad(Operation *op, RankedTensorType input,
                               RankedTensorType resultGrad,
                               dsopt::ds::detail::WindowAttrs window,
                               int64_t outChannels) {
  SmallVector<int64_t> shape;
  if (failed(dsopt::ds::detail::inferWindowShape(op->getLoc(),
                                      op->getName().getStringRef(), input,
                                      window, outChannels,
                                      /*ceilMode=*/false, shape)))
    return failure();
  // A ceil-mode pooling has one more window on some axes; accept both.
  SmallVector<int64_t> ceilShape;
  bool ceilOk = succeeded(dsopt::ds::detail::inferWindowShape(
                    std::nullopt, "", input, window, outChannels,
                    /*ceilMode=*/true, ceilShape)) &&
                ArrayRef<int64_t>(ceilShape) == resultGrad.getShape();
  if (ArrayRef<int64_t>(shape) != resultGrad.getShape() && !ceilOk)
    return op->emitOpError() << "result gradient " << resultGrad
                             << " does not match the forward output shape "
                             << RankedTensorType::get(
                                    shape, resultGrad.getElementType())
                             << " of input " << input;
  return success();
}

template <typename LossOp>
void lossArguments(KernelCallBuilder &call, LossOp op) {
  call.enumerator(reductionName(op.getReduction()));
  std::optional<int64_t> ignore = op.getIgnoreIndex();
  call.boolean(ignore.has_value());
  call.integer(ignore.value_or(0));
}
} // namespace

//===----------------------------------------------------------------------===//
// Softmax and log-softmax
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxGradOp::verify() {
  return verifyAxis(*this, getAxis(), tensorType(getOutput()).getRank());
}
int64_t SoftmaxGradOp::getFlops() { return 4 * elements(getOutput()); }
void SoftmaxGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::softmax_grad");
  call.stream();
  call.tensor(getOutput());
  call.tensor(getResultGrad());
  call.tensor(getInputGrad());
  call.integer(getAxis());
}

LogicalResult LogSoftmaxGradOp::verify() {
  return verifyAxis(*this, getAxis(), tensorType(getOutput()).getRank());
}
int64_t LogSoftmaxGradOp::getFlops() { return 4 * elements(getOutput()); }
void LogSoftmaxGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::log_softmax_grad");
  call.stream();
  call.tensor(getOutput());
  call.tensor(getResultGrad());
  call.tensor(getInputGrad());
  call.integer(getAxis());
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

LogicalResult LayerNormGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor, Types &types) {
  auto input = tensorType(adaptor.getInput());
  auto grad = tensorType(adaptor.getResultGrad());
  auto scale = tensorType(adaptor.getScale());
  if (!input || !grad || !scale || input != grad)
    return emitOptionalError(loc, "layer_norm_grad result gradient must have "
                                  "the input's type");
  if (!adaptor.getAxisAttr())
    return emitOptionalError(loc, "layer_norm_grad needs attribute axis");
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= input.getRank())
    return emitOptionalError(loc, "layer_norm_grad axis out of range");
  types.append({input, scale, scale});
  return success();
}
int64_t LayerNormGradOp::getFlops() { return 12 * elements(getInput()); }
void LayerNormGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::layer_norm_grad");
  call.stream();
  call.tensor(getResultGrad());
  call.tensor(getInput());
  call.tensor(getScale());
  call.tensor(getMean());
  call.tensor(getInvStdDev());
  call.tensor(getInputGrad());
  call.tensor(getScaleGrad());
  call.optionalTensor(getBiasGrad());
  call.integer(getAxis());
}

LogicalResult BatchNormGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor, Types &types) {
  auto input = tensorType(adaptor.getInput());
  auto grad = tensorType(adaptor.getResultGrad());
  auto scale = tensorType(adaptor.getScale());
  if (!input || !grad || !scale || input != grad || input.getRank() < 2)
    return emitOptionalError(loc, "batch_norm_grad result gradient must have "
                                  "the input's type [N, C, ...]");
  if (scale.getRank() != 1 || scale.getDimSize(0) != input.getDimSize(1))
    return emitOptionalError(loc, "batch_norm_grad scale must be [C]");
  types.append({input, scale, scale});
  return success();
}
int64_t BatchNormGradOp::getFlops() { return 12 * elements(getInput()); }
void BatchNormGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::batch_norm_grad");
  call.stream();
  call.tensor(getResultGrad());
  call.tensor(getInput());
  call.tensor(getScale());
  call.tensor(getSavedMean());
  call.tensor(getSavedInvStd());
  call.tensor(getInputGrad());
  call.tensor(getScaleGrad());
  call.tensor(getBiasGrad());
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxCrossEntropyGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    Types &types) {
  auto logProb = tensorType(adaptor.getLogProb());
  if (!logProb || logProb.getRank() < 2)
    return emitOptionalError(loc, "softmax_cross_entropy_grad log_prob must "
                                  "be [N, C, d...]");
  types.push_back(logProb);
  return success();
}
int64_t SoftmaxCrossEntropyGradOp::getFlops() {
  return 3 * elements(getLogProb());
}
void SoftmaxCrossEntropyGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::softmax_cross_entropy_grad");
  call.stream();
  call.tensor(getLossGrad());
  call.tensor(getLogProb());
  call.tensor(getLabels());
  call.optionalTensor(getWeights());
  call.tensor(getScoresGrad());
  lossArguments(call, *this);
}

LogicalResult NllLossGradOp::verify() {
  auto result = tensorType(getLogProbGrad());
  auto labels = tensorType(getLabels());
  if (result.getRank() < 2 || labels.getRank() != result.getRank() - 1 ||
      labels.getDimSize(0) != result.getDimSize(0))
    return emitOpError() << "log-probability gradient " << result
                         << " must be [N, C, d...] for labels " << labels;
  return verifyLossGrad(*this, getLossGrad(), getLabels(), getReduction());
}
int64_t NllLossGradOp::getFlops() { return 2 * elements(getLabels()); }
void NllLossGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::nll_loss_grad");
  call.stream();
  call.tensor(getLossGrad());
  call.tensor(getLabels());
  call.optionalTensor(getWeights());
  call.tensor(getLogProbGrad());
  lossArguments(call, *this);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult GatherGradOp::verify() {
  auto data = tensorType(getDataGrad());
  auto grad = tensorType(getResultGrad());
  auto indices = tensorType(getIndices());
  int64_t axis = getAxis();
  if (failed(verifyAxis(*this, axis, data.getRank())))
    return failure();
  SmallVector<int64_t> expected(data.getShape().take_front(axis));
  llvm::append_range(expected, indices.getShape());
  llvm::append_range(expected, data.getShape().drop_front(axis + 1));
  if (grad.getShape() != ArrayRef<int64_t>(expected) ||
      grad.getElementType() != data.getElementType())
    return emitOpError() << "result gradient " << grad
                         << " does not match a gather of " << data << " at "
                         << indices;
  return success();
}
int64_t GatherGradOp::getFlops() { return elements(getResultGrad()); }
void GatherGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::gather_grad");
  call.stream();
  call.tensor(getResultGrad());
  call.tensor(getIndices());
  call.tensor(getDataGrad());
  call.integer(getAxis());
}

LogicalResult SliceGradOp::verify() {
  auto input = tensorType(getInputGrad()), grad = tensorType(getResultGrad());
  int64_t rank = input.getRank();
  ArrayRef<int64_t> offsets = getOffsets(), strides = getStrides();
  if (grad.getRank() != rank || grad.getElementType() != input.getElementType())
    return emitOpError() << "result gradient must have the input's rank and "
                            "element type";
  if (static_cast<int64_t>(offsets.size()) != rank ||
      static_cast<int64_t>(strides.size()) != rank)
    return emitOpError() << "needs one offset and one stride per axis";
  for (int64_t d = 0; d < rank; ++d) {
    int64_t size = grad.getDimSize(d), dim = input.getDimSize(d);
    if (strides[d] == 0)
      return emitOpError() << "stride of axis " << d << " must be non-zero";
    if (size == 0)
      continue;
    int64_t last = offsets[d] + (size - 1) * strides[d];
    if (offsets[d] < 0 || offsets[d] >= dim || last < 0 || last >= dim)
      return emitOpError() << "writes out of bounds on axis " << d;
  }
  return success();
}
int64_t SliceGradOp::getFlops() { return 0; }
void SliceGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::slice_grad");
  call.stream();
  call.tensor(getResultGrad());
  call.tensor(getInputGrad());
  call.integers(getOffsets());
  call.integers(getStrides());
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

LogicalResult ConvGradInputOp::verify() {
  auto weight = tensorType(getWeight());
  return verifyWindowGrad(*this, tensorType(getInputGrad()),
                          tensorType(getResultGrad()),
                          {weight.getShape().drop_front(2), getStrides(),
                           getPads(), getDilations()},
                          weight.getDimSize(0));
}
int64_t ConvGradInputOp::getFlops() {
  auto weight = tensorType(getWeight());
  return 2 * elements(getResultGrad()) * weight.getNumElements() /
         std::max<int64_t>(weight.getDimSize(0), 1);
}
void ConvGradInputOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::conv_grad_input");
  call.stream();
  call.tensor(getResultGrad());
  call.tensor(getWeight());
  call.tensor(getInputGrad());
  call.integers(getStrides());
  call.integers(getPads());
  call.integers(getDilations());
  call.integer(getGroup());
}

LogicalResult ConvGradWeightOp::verify() {
  auto weight = tensorType(getWeightGrad());
  return verifyWindowGrad(*this, tensorType(getInput()),
                          tensorType(getResultGrad()),
                          {weight.getShape().drop_front(2), getStrides(),
                           getPads(), getDilations()},
                          weight.getDimSize(0));
}
int64_t ConvGradWeightOp::getFlops() {
  auto weight = tensorType(getWeightGrad());
  return 2 * elements(getResultGrad()) * weight.getNumElements() /
         std::max<int64_t>(weight.getDimSize(0), 1);
}
void ConvGradWeightOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::conv_grad_weight");
  call.stream();
  call.tensor(getResultGrad());
  call.tensor(getInput());
  call.tensor(getWeightGrad());
  call.integers(getStrides());
  call.integers(getPads());
  call.integers(getDilations());
  call.integer(getGroup());
}

LogicalResult MaxPoolGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor, Types &types) {
  auto input = tensorType(adaptor.getInput());
  if (!input || input.getRank() < 3)
    return emitOptionalError(loc, "max_pool_grad input must be [N, C, D...]");
  types.push_back(input);
  return success();
}
int64_t MaxPoolGradOp::getFlops() {
  int64_t window = 1;
  for (int64_t k : getKernelShape())
    window *= k;
  return elements(getResultGrad()) * window;
}
void MaxPoolGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::max_pool_grad");
  call.stream();
  call.tensor(getResultGrad());
  call.tensor(getInput());
  call.tensor(getInputGrad());
  call.integers(getKernelShape());
  call.integers(getStrides());
  call.integers(getPads());
  call.integers(getDilations());
}

LogicalResult AvgPoolGradOp::verify() {
  SmallVector<int64_t> ones(getKernelShape().size(), 1);
  auto input = tensorType(getInputGrad());
  if (input.getRank() < 3)
    return emitOpError() << "input gradient must be [N, C, D...]";
  return verifyWindowGrad(*this, input, tensorType(getResultGrad()),
                          {getKernelShape(), getStrides(), getPads(), ones},
                          input.getDimSize(1));
}
int64_t AvgPoolGradOp::getFlops() {
  int64_t window = 1;
  for (int64_t k : getKernelShape())
    window *= k;
  return elements(getResultGrad()) * window;
}
void AvgPoolGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::avg_pool_grad");
  call.stream();
  call.tensor(getResultGrad());
  call.tensor(getInputGrad());
  call.integers(getKernelShape());
  call.integers(getStrides());
  call.integers(getPads());
  call.boolean(getCountIncludePad());
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

namespace {
/// lr is an f32 scalar, step an i64 scalar, and every state tensor has the
/// parameter's type; the results are the updated parameter and states.
LogicalResult inferUpdate(std::optional<Location> loc, StringRef what,
                          Value lr, Value step, ValueRange states,
                          Types &types) {
  auto scalar = [](Value value) {
    auto type = tensorType(value);
    return type && type.getNumElements() == 1 && type.getRank() <= 1;
  };
  if (!scalar(lr) || (step && !scalar(step)))
    return emitOptionalError(loc, what + " lr and step must be scalars");
  Type param = states.front().getType();
  for (Value state : states.drop_front())
    if (state.getType() != param)
      return emitOptionalError(loc, what + " gradient and state tensors must "
                                           "all have the parameter's type");
  // The gradient is not a result.
  types.push_back(param);
  types.append(states.size() - 2, param);
  return success();
}

LogicalResult verifyBetas(Operation *op, ArrayRef<std::pair<StringRef, float>>
                                             betas) {
  for (auto [name, value] : betas)
    if (!(value >= 0.0f && value < 1.0f))
      return op->emitOpError() << name << " " << value << " must be in [0, 1)";
  return success();
}
} // namespace

LogicalResult AdamWOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor, Types &types) {
  return inferUpdate(loc, "adamw", adaptor.getLr(), adaptor.getStep(),
                     {adaptor.getParam(), adaptor.getGrad(),
                      adaptor.getFirstMoment(), adaptor.getSecondMoment()},
                     types);
}
LogicalResult AdamWOp::verify() {
  if (!(getEpsilon().convertToFloat() >= 0.0f) ||
      !(getWeightDecay().convertToFloat() >= 0.0f))
    return emitOpError() << "epsilon and weight_decay must be non-negative";
  return verifyBetas(*this, {{"beta1", getBeta1().convertToFloat()},
                             {"beta2", getBeta2().convertToFloat()}});
}
int64_t AdamWOp::getFlops() { return 14 * elements(getParam()); }
ArrayRef<StringRef> AdamWOp::getStateRoles() {
  static constexpr StringRef roles[] = {"exp_avg", "exp_avg_sq"};
  return roles;
}
std::optional<unsigned> AdamWOp::getInPlaceOperand(unsigned result) {
  static constexpr unsigned operands[] = {2, 4, 5};
  return result < 3 ? std::optional<unsigned>(operands[result]) : std::nullopt;
}
void AdamWOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::adamw");
  call.stream();
  for (Value value : getOperands())
    call.tensor(value);
  for (Value value : getResults())
    call.tensor(value);
  call.real(getBeta1().convertToFloat());
  call.real(getBeta2().convertToFloat());
  call.real(getEpsilon().convertToFloat());
  call.real(getWeightDecay().convertToFloat());
  call.boolean(getDecoupled());
}

LogicalResult SgdOp::inferReturnTypes(MLIRContext *,
                                      std::optional<Location> loc,
                                      Adaptor adaptor, Types &types) {
  return inferUpdate(loc, "sgd", adaptor.getLr(), adaptor.getStep(),
                     {adaptor.getParam(), adaptor.getGrad(),
                      adaptor.getVelocity()},
                     types);
}
LogicalResult SgdOp::verify() {
  float momentum = getMomentum().convertToFloat();
  if (!(momentum >= 0.0f) || !(getWeightDecay().convertToFloat() >= 0.0f))
    return emitOpError() << "momentum and weight_decay must be non-negative";
  if (getNesterov() &&
      (momentum <= 0.0f || getDampening().convertToFloat() != 0.0f))
    return emitOpError() << "Nesterov momentum needs a momentum and zero "
                            "dampening";
  return success();
}
int64_t SgdOp::getFlops() { return 6 * elements(getParam()); }
ArrayRef<StringRef> SgdOp::getStateRoles() {
  static constexpr StringRef roles[] = {"momentum_buffer"};
  return roles;
}
std::optional<unsigned> SgdOp::getInPlaceOperand(unsigned result) {
  static constexpr unsigned operands[] = {2, 4};
  return result < 2 ? std::optional<unsigned>(operands[result]) : std::nullopt;
}
void SgdOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::sgd");
  call.stream();
  for (Value value : getOperands())
    call.tensor(value);
  for (Value value : getResults())
    call.tensor(value);
  call.real(getMomentum().convertToFloat());
  call.real(getDampening().convertToFloat());
  call.real(getWeightDecay().convertToFloat());
  call.boolean(getNesterov());
}

LogicalResult LionOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor, Types &types) {
  return inferUpdate(loc, "lion", adaptor.getLr(), Value(),
                     {adaptor.getParam(), adaptor.getGrad(),
                      adaptor.getMomentum()},
                     types);
}
LogicalResult LionOp::verify() {
  if (!(getWeightDecay().convertToFloat() >= 0.0f))
    return emitOpError() << "weight_decay must be non-negative";
  return verifyBetas(*this, {{"beta1", getBeta1().convertToFloat()},
                             {"beta2", getBeta2().convertToFloat()}});
}
int64_t LionOp::getFlops() { return 8 * elements(getParam()); }
ArrayRef<StringRef> LionOp::getStateRoles() {
  static constexpr StringRef roles[] = {"exp_avg"};
  return roles;
}
std::optional<unsigned> LionOp::getInPlaceOperand(unsigned result) {
  static constexpr unsigned operands[] = {1, 3};
  return result < 2 ? std::optional<unsigned>(operands[result]) : std::nullopt;
}
void LionOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::lion");
  call.stream();
  for (Value value : getOperands())
    call.tensor(value);
  for (Value value : getResults())
    call.tensor(value);
  call.real(getBeta1().convertToFloat());
  call.real(getBeta2().convertToFloat());
  call.real(getWeightDecay().convertToFloat());
}

// ONNX's preview optimizers name their states as ONNX does.
ArrayRef<StringRef> AdamOp::getStateRoles() {
  static constexpr StringRef roles[] = {"first_moment", "second_moment"};
  return roles;
}
ArrayRef<StringRef> MomentumOp::getStateRoles() {
  static constexpr StringRef roles[] = {"velocity"};
  return roles;
}
ArrayRef<StringRef> AdagradOp::getStateRoles() {
  static constexpr StringRef roles[] = {"accumulator"};
  return roles;
}

// ONNX's preview optimizers update in place too: their kernels read every
// element of every input before writing the outputs' element.
std::optional<unsigned> AdamOp::getInPlaceOperand(unsigned result) {
  static constexpr unsigned operands[] = {2, 4, 5};
  return result < 3 ? std::optional<unsigned>(operands[result]) : std::nullopt;
}
std::optional<unsigned> MomentumOp::getInPlaceOperand(unsigned result) {
  static constexpr unsigned operands[] = {2, 4};
  return result < 2 ? std::optional<unsigned>(operands[result]) : std::nullopt;
}
std::optional<unsigned> AdagradOp::getInPlaceOperand(unsigned result) {
  static constexpr unsigned operands[] = {2, 4};
  return result < 2 ? std::optional<unsigned>(operands[result]) : std::nullopt;
}

//===----------------------------------------------------------------------===//
// Gradient norm and state initialization
//===----------------------------------------------------------------------===//

LogicalResult SumOfSquaresOp::inferReturnTypes(MLIRContext *context,
                                               std::optional<Location>,
                                               Adaptor, Types &types) {
  types.push_back(RankedTensorType::get({}, Float32Type::get(context)));
  return success();
}
int64_t SumOfSquaresOp::getFlops() {
  int64_t total = 0;
  for (Value input : getInputs())
    total += 2 * elements(input);
  return total;
}
void SumOfSquaresOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::sum_of_squares");
  call.stream();
  call.tensors(getInputs());
  call.tensor(getResult());
}

int64_t FillOp::getFlops() { return 0; }
void FillOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::fill");
  call.tensor(getResult());
  call.real(getValue().convertToDouble());
}

std::optional<dsopt::ds::GradientAccumulation>
dsopt::ds::matchGradientAccumulation(FunctionOpInterface function,
                                     OpOperand &result) {
  auto updates = function.getResultAttrOfType<IntegerAttr>(
      result.getOperandNumber(), DsDialect::kUpdatesAttrName);
  if (!updates)
    return std::nullopt;
  auto acc = function.getArgument(updates.getInt());
  auto state = function.getArgAttrOfType<StringAttr>(
      acc.getArgNumber(), DsDialect::kStateAttrName);
  if (!state || !state.getValue().starts_with("grad:"))
    return std::nullopt;
  GradientAccumulation match{acc, state.getValue().drop_front(5), nullptr,
                             result.get()};
  auto add = result.get().getDefiningOp<AddOp>();
  if (add && (add.getLhs() == acc || add.getRhs() == acc)) {
    match.add = add;
    match.grad = add.getLhs() == acc ? add.getRhs() : add.getLhs();
  }
  return match;
}
