//===- DsOps.cpp - ds op verifiers -----------------------------------------===//
//
// Verifiers for what result type inference cannot express: attribute ranges,
// ops whose result type is given (reshape, slice, split, cast, broadcast_to).
//
//===----------------------------------------------------------------------===//

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Traits.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace dsopt::ds;

#define GET_OP_CLASSES
#include "ds/IR/DsOps.cpp.inc"

namespace {
RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

LogicalResult verifyAxis(Operation *op, int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= rank)
    return op->emitOpError() << "axis " << axis
                             << " is out of range for rank " << rank
                             << " (axes are normalized to [0, rank))";
  return success();
}
} // namespace

LogicalResult CastOp::verify() {
  if (tensorType(getInput()).getShape() != tensorType(getResult()).getShape())
    return emitOpError() << "changes the shape from "
                         << getInput().getType() << " to "
                         << getResult().getType()
                         << "; cast converts elements only";
  return success();
}

LogicalResult CeluOp::verify() {
  if (getAlpha().isZero())
    return emitOpError() << "alpha must not be 0 (celu divides by it)";
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifyAxis(*this, getAxis(), tensorType(getInput()).getRank());
}

LogicalResult LogSoftmaxOp::verify() {
  return verifyAxis(*this, getAxis(), tensorType(getInput()).getRank());
}

LogicalResult ReshapeOp::verify() {
  auto input = tensorType(getInput()), result = tensorType(getResult());
  if (input.getElementType() != result.getElementType())
    return emitOpError() << "changes the element type from "
                         << input.getElementType() << " to "
                         << result.getElementType();
  if (input.getNumElements() != result.getNumElements())
    return emitOpError() << "changes the number of elements from "
                         << input.getNumElements() << " to "
                         << result.getNumElements();
  return success();
}

LogicalResult BroadcastToOp::verify() {
  auto input = tensorType(getInput()), result = tensorType(getResult());
  if (input.getElementType() != result.getElementType())
    return emitOpError() << "changes the element type";
  SmallVector<int64_t> shape;
  if (!OpTrait::util::getBroadcastedShape(input.getShape(), result.getShape(),
                                          shape) ||
      ArrayRef<int64_t>(shape) != result.getShape())
    return emitOpError() << "cannot broadcast " << input << " to " << result;
  return success();
}

LogicalResult SplitOp::verify() {
  auto input = tensorType(getInput());
  int64_t axis = getAxis();
  if (failed(verifyAxis(*this, axis, input.getRank())))
    return failure();
  if (getResults().empty())
    return emitOpError() << "needs at least one result";
  int64_t total = 0;
  for (Value result : getResults()) {
    auto type = tensorType(result);
    if (type.getElementType() != input.getElementType() ||
        type.getRank() != input.getRank())
      return emitOpError() << "result " << type
                           << " must have the input's rank and element type";
    for (int64_t d = 0; d < input.getRank(); ++d)
      if (d != axis && type.getDimSize(d) != input.getDimSize(d))
        return emitOpError() << "result " << type << " differs from input "
                             << input << " outside axis " << axis;
    total += type.getDimSize(axis);
  }
  if (total != input.getDimSize(axis))
    return emitOpError() << "result sizes along axis " << axis << " sum to "
                         << total << " but the input has "
                         << input.getDimSize(axis);
  return success();
}

LogicalResult SliceOp::verify() {
  auto input = tensorType(getInput()), result = tensorType(getResult());
  int64_t rank = input.getRank();
  ArrayRef<int64_t> offsets = getOffsets(), strides = getStrides();
  if (result.getRank() != rank || result.getElementType() !=
                                      input.getElementType())
    return emitOpError() << "result must have the input's rank and element "
                            "type";
  if (static_cast<int64_t>(offsets.size()) != rank ||
      static_cast<int64_t>(strides.size()) != rank)
    return emitOpError() << "needs one offset and one stride per axis ("
                         << rank << ")";
  for (int64_t d = 0; d < rank; ++d) {
    int64_t size = result.getDimSize(d), dim = input.getDimSize(d);
    if (strides[d] == 0)
      return emitOpError() << "stride of axis " << d << " must be non-zero";
    if (size == 0)
      continue;
    int64_t last = offsets[d] + (size - 1) * strides[d];
    if (offsets[d] < 0 || offsets[d] >= dim || last < 0 || last >= dim)
      return emitOpError() << "reads out of bounds on axis " << d
                           << ": offset " << offsets[d] << ", stride "
                           << strides[d] << ", size " << size
                           << ", input size " << dim;
  }
  return success();
}

LogicalResult TriluOp::verify() {
  if (tensorType(getInput()).getRank() < 2)
    return emitOpError() << "input must have rank >= 2";
  return success();
}

LogicalResult DropoutOp::verify() {
  float ratio = getRatio().convertToFloat();
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return emitOpError() << "ratio " << ratio << " must be in [0, 1)";
  return success();
}

/// The learning rate and step of the optimizer ops are scalars; their element
/// types are checked by ODS, shapes by inference.
static LogicalResult verifyOptimizer(Operation *op, Value lr, Value param) {
  if (getElementTypeOrSelf(lr.getType()) !=
          getElementTypeOrSelf(param.getType()) &&
      !getElementTypeOrSelf(lr.getType()).isF32())
    return op->emitOpError() << "learning rate must be f32 or the "
                                "parameter's element type";
  return success();
}

LogicalResult AdamOp::verify() {
  return verifyOptimizer(*this, getLr(), getParam());
}
LogicalResult MomentumOp::verify() {
  return verifyOptimizer(*this, getLr(), getParam());
}
LogicalResult AdagradOp::verify() {
  return verifyOptimizer(*this, getLr(), getParam());
}

//===----------------------------------------------------------------------===//
// ds.fused
//===----------------------------------------------------------------------===//

Type FusedOp::getComputeType(Type elementType) {
  if (isa<FloatType>(elementType))
    return Float32Type::get(elementType.getContext());
  return elementType;
}

LogicalResult FusedOp::verify() {
  auto result = tensorType(getResult());
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError() << "body has " << body.getNumArguments()
                         << " arguments for " << getInputs().size()
                         << " inputs";
  for (auto [i, input] : llvm::enumerate(getInputs())) {
    auto type = tensorType(input);
    Type expected = getComputeType(type.getElementType());
    if (body.getArgument(i).getType() != expected)
      return emitOpError() << "body argument " << i << " must be " << expected
                           << " for an input of " << type;
    ArrayRef<int64_t> in = type.getShape(), out = result.getShape();
    bool broadcasts = in.size() <= out.size();
    for (size_t d = 0; broadcasts && d < in.size(); ++d) {
      int64_t dim = in[in.size() - 1 - d];
      broadcasts = dim == 1 || dim == out[out.size() - 1 - d];
    }
    if (!broadcasts)
      return emitOpError() << "input " << i << " " << type
                           << " does not broadcast to the result " << result;
  }
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError() << "body must end with ds.yield";
  Type expected = getComputeType(result.getElementType());
  if (yield.getValue().getType() != expected)
    return emitOpError() << "yields " << yield.getValue().getType()
                         << " but the result's elements need " << expected;
  for (Operation &op : body.without_terminator())
    if (!isa<arith::ArithDialect, math::MathDialect>(op.getDialect()))
      return op.emitOpError() << "is not allowed in a ds.fused body (arith "
                                 "and math ops only)";
  return success();
}

//===----------------------------------------------------------------------===//
// Gradient, optimizer and state ops (the training step)
//===----------------------------------------------------------------------===//

namespace {

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


LogicalResult verifyBetas(Operation *op, ArrayRef<std::pair<StringRef, float>>
                                             betas) {
  for (auto [name, value] : betas)
    if (!(value >= 0.0f && value < 1.0f))
      return op->emitOpError() << name << " " << value << " must be in [0, 1)";
  return success();
}
} // namespace

// Softmax and log-softmax.
LogicalResult SoftmaxGradOp::verify() {
  return verifyAxis(*this, getAxis(), tensorType(getOutput()).getRank());
}
LogicalResult LogSoftmaxGradOp::verify() {
  return verifyAxis(*this, getAxis(), tensorType(getOutput()).getRank());
}

// Losses.
LogicalResult NllLossGradOp::verify() {
  auto result = tensorType(getLogProbGrad());
  auto labels = tensorType(getLabels());
  if (result.getRank() < 2 || labels.getRank() != result.getRank() - 1 ||
      labels.getDimSize(0) != result.getDimSize(0))
    return emitOpError() << "log-probability gradient " << result
                         << " must be [N, C, d...] for labels " << labels;
  return verifyLossGrad(*this, getLossGrad(), getLabels(), getReduction());
}

// Data movement.
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
LogicalResult ScatterOp::verify() {
  auto positions = tensorType(getPositions());
  auto updates = tensorType(getUpdates());
  auto data = tensorType(getData());
  if (positions.getShape() != updates.getShape())
    return emitOpError() << "positions " << positions
                         << " and updates " << updates
                         << " must have the same shape";
  if (updates.getElementType() != data.getElementType())
    return emitOpError() << "updates " << updates << " and data " << data
                         << " must have the same element type";
  if (positions.getRank() == 0)
    return getAxis() == 0 ? success()
                          : emitOpError() << "axis " << getAxis()
                                          << " of 0-d positions must be 0";
  return verifyAxis(*this, getAxis(), positions.getRank());
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

// Convolution and pooling.
LogicalResult ConvGradInputOp::verify() {
  auto weight = tensorType(getWeight());
  return verifyWindowGrad(*this, tensorType(getInputGrad()),
                          tensorType(getResultGrad()),
                          {weight.getShape().drop_front(2), getStrides(),
                           getPads(), getDilations()},
                          weight.getDimSize(0));
}
LogicalResult ConvGradWeightOp::verify() {
  auto weight = tensorType(getWeightGrad());
  return verifyWindowGrad(*this, tensorType(getInput()),
                          tensorType(getResultGrad()),
                          {weight.getShape().drop_front(2), getStrides(),
                           getPads(), getDilations()},
                          weight.getDimSize(0));
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

// Optimizers.
/// A torch.optim update's grad_scale, when present, is a scalar.
static LogicalResult verifyGradScale(Operation *op, Value scale) {
  if (scale && cast<RankedTensorType>(scale.getType()).getRank() != 0)
    return op->emitOpError() << "grad_scale must be an f32 scalar, got "
                             << scale.getType();
  return success();
}
/// AdamW's settings, shared by ds.adamw and ds.adamw_multi.
template <typename AdamW>
static LogicalResult verifyAdamWSettings(AdamW op) {
  if (!(op.getEpsilon().convertToFloat() >= 0.0f) ||
      !(op.getWeightDecay().convertToFloat() >= 0.0f))
    return op.emitOpError() << "epsilon and weight_decay must be non-negative";
  return verifyBetas(op, {{"beta1", op.getBeta1().convertToFloat()},
                          {"beta2", op.getBeta2().convertToFloat()}});
}
LogicalResult AdamWOp::verify() {
  if (failed(verifyGradScale(*this, getGradScale())))
    return failure();
  return verifyAdamWSettings(*this);
}
LogicalResult AdamWMultiOp::verify() {
  size_t count = getCount(), tensors = getTensors().size(),
         results = getUpdated().size();
  if (count == 0 || tensors % 4 > 1 ||
      (results != 3 * count && results != 4 * count))
    return emitOpError()
           << "needs 4n tensors (params, grads, first and second moments) "
              "and an optional grad_scale, and 3n results (4n with the "
              "16-bit copies of the params) for n > 0 tensors, got "
           << tensors << " tensors and " << results << " results";
  if (failed(verifyGradScale(*this, getGradScale())))
    return failure();
  Type paramElement = getElementTypeOrSelf(getParams()[0].getType());
  Type gradElement = getElementTypeOrSelf(getGrads()[0].getType());
  for (size_t i = 0; i < count; ++i) {
    auto param = cast<RankedTensorType>(getParams()[i].getType());
    auto grad = cast<RankedTensorType>(getGrads()[i].getType());
    if (param.getElementType() != paramElement ||
        grad.getElementType() != gradElement)
      return emitOpError() << "tensor " << i
                           << ": every param must have one float type and "
                              "every grad one float type";
    if (grad.getShape() != param.getShape())
      return emitOpError() << "tensor " << i << ": grad " << grad
                           << " does not have the shape of param " << param;
    for (Value state : {Value(getFirstMoments()[i]),
                        Value(getSecondMoments()[i]), Value(getParamsOut()[i]),
                        Value(getFirstMomentsOut()[i]),
                        Value(getSecondMomentsOut()[i])})
      if (state.getType() != param)
        return emitOpError() << "tensor " << i << ": " << state.getType()
                             << " is not the param's type " << param;
    if (!getParamCopies().empty()) {
      auto copy = cast<RankedTensorType>(getParamCopies()[i].getType());
      Type low = copy.getElementType();
      if (!param.getElementType().isF32() || !(low.isBF16() || low.isF16()) ||
          copy.getShape() != param.getShape())
        return emitOpError() << "tensor " << i << ": the copy " << copy
                             << " is not a bf16 or f16 copy of the f32 param "
                             << param;
    }
  }
  return verifyAdamWSettings(*this);
}
LogicalResult SgdOp::verify() {
  if (failed(verifyGradScale(*this, getGradScale())))
    return failure();
  float momentum = getMomentum().convertToFloat();
  if (!(momentum >= 0.0f) || !(getWeightDecay().convertToFloat() >= 0.0f))
    return emitOpError() << "momentum and weight_decay must be non-negative";
  if (getNesterov() &&
      (momentum <= 0.0f || getDampening().convertToFloat() != 0.0f))
    return emitOpError() << "Nesterov momentum needs a momentum and zero "
                            "dampening";
  return success();
}
LogicalResult LionOp::verify() {
  if (failed(verifyGradScale(*this, getGradScale())))
    return failure();
  if (!(getWeightDecay().convertToFloat() >= 0.0f))
    return emitOpError() << "weight_decay must be non-negative";
  return verifyBetas(*this, {{"beta1", getBeta1().convertToFloat()},
                             {"beta2", getBeta2().convertToFloat()}});
}
