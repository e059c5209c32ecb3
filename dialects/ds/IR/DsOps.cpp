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
