//===- DsShapes.cpp - result type inference of ds ops ---------------------===//
//
// InferTypeOpInterface for every ds op whose result types follow from its
// operands and attributes. The importer builds ops through these functions,
// and the verifier checks the declared result types against them, so a
// malformed op is reported here with the reason.
//
//===----------------------------------------------------------------------===//

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Traits.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace dsopt::ds;

namespace {
using Types = SmallVectorImpl<Type>;

/// Emits `message` at `loc` (when inference runs on behalf of the verifier)
/// and fails.
LogicalResult fail(std::optional<Location> loc, const Twine &message) {
  return emitOptionalError(loc, message);
}

/// Inference also runs while parsing, before attributes are verified, so a
/// missing attribute must be an error here rather than a null dereference.
LogicalResult missingAttribute(std::optional<Location> loc, StringRef what,
                               StringRef names) {
  return fail(loc, what + " needs attribute(s) " + names);
}

/// Defaults are not yet filled in while parsing.
LossReduction reductionOf(LossReductionAttr attr) {
  return attr ? attr.getValue() : LossReduction::mean;
}

RankedTensorType tensorType(Value value) {
  return dyn_cast<RankedTensorType>(value.getType());
}

std::string shapeString(ArrayRef<int64_t> shape) {
  std::string text = "[";
  llvm::raw_string_ostream os(text);
  llvm::interleave(shape, os, ", ");
  os << "]";
  return text;
}

/// Output extent of one spatial axis of a convolution or pooling window:
/// floor (or ceil) of (in + pads - dilated kernel) / stride, plus one. With
/// ceil mode a last window that would start inside the end padding is
/// dropped, as in PyTorch and ONNX's reference.
static int64_t windowOutputSize(int64_t in, int64_t kernel, int64_t stride,
                         int64_t padBegin, int64_t padEnd, int64_t dilation,
                         bool ceilMode) {
  int64_t span = in + padBegin + padEnd - dilation * (kernel - 1) - 1;
  if (span < 0)
    return 0;
  int64_t out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceilMode && (out - 1) * stride >= in + padBegin)
    --out;
  return out;
}

} // namespace

namespace dsopt::ds::detail {
LogicalResult inferWindowShape(std::optional<Location> loc, StringRef what,
                               RankedTensorType input, WindowAttrs window,
                               int64_t outChannels, bool ceilMode,
                               SmallVectorImpl<int64_t> &shape) {
  int64_t spatial = input.getRank() - 2;
  if (spatial < 1)
    return fail(loc, what + " input must have rank >= 3 ([N, C, D...]), got " +
                         shapeString(input.getShape()));
  auto checkSize = [&](ArrayRef<int64_t> values, int64_t expected,
                       StringRef name) -> LogicalResult {
    if (static_cast<int64_t>(values.size()) != expected)
      return fail(loc, what + " '" + name + "' needs " + Twine(expected) +
                           " values for " + Twine(spatial) +
                           " spatial axes, got " + Twine(values.size()));
    return success();
  };
  if (failed(checkSize(window.kernel, spatial, "kernel")) ||
      failed(checkSize(window.strides, spatial, "strides")) ||
      failed(checkSize(window.pads, 2 * spatial, "pads")) ||
      failed(checkSize(window.dilations, spatial, "dilations")))
    return failure();
  shape.assign({input.getDimSize(0), outChannels});
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t kernel = window.kernel[i], stride = window.strides[i],
            dilation = window.dilations[i];
    int64_t padBegin = window.pads[i], padEnd = window.pads[i + spatial];
    if (kernel < 1 || stride < 1 || dilation < 1)
      return fail(loc, what + " kernel, strides and dilations must be "
                              "positive on axis " +
                           Twine(i + 2));
    if (padBegin < 0 || padEnd < 0)
      return fail(loc, what + " pads must be non-negative");
    int64_t out = windowOutputSize(input.getDimSize(i + 2), kernel, stride,
                                   padBegin, padEnd, dilation, ceilMode);
    if (out < 1)
      return fail(loc, what + " window (kernel " + Twine(kernel) +
                           ", dilation " + Twine(dilation) +
                           ") does not fit spatial axis " + Twine(i + 2) +
                           " of size " + Twine(input.getDimSize(i + 2)) +
                           " with its padding");
    shape.push_back(out);
  }
  return success();
}

} // namespace dsopt::ds::detail

namespace {
using dsopt::ds::detail::inferWindowShape;
using dsopt::ds::detail::WindowAttrs;

/// Shape of a per-sample loss: the labels' shape must be the scores' shape
/// without the class axis 1.
LogicalResult checkLossOperands(std::optional<Location> loc, StringRef what,
                                RankedTensorType scores,
                                RankedTensorType labels,
                                RankedTensorType weights) {
  if (scores.getRank() < 2)
    return fail(loc, what + " scores must be [N, C, d...], got " +
                         shapeString(scores.getShape()));
  SmallVector<int64_t> expected{scores.getDimSize(0)};
  llvm::append_range(expected, scores.getShape().drop_front(2));
  if (labels.getShape() != ArrayRef<int64_t>(expected))
    return fail(loc, what + " labels must have shape " +
                         shapeString(expected) + " for scores " +
                         shapeString(scores.getShape()) + ", got " +
                         shapeString(labels.getShape()));
  if (weights && (weights.getRank() != 1 ||
                  weights.getDimSize(0) != scores.getDimSize(1)))
    return fail(loc, what + " weights must have shape [" +
                         Twine(scores.getDimSize(1)) + "], got " +
                         shapeString(weights.getShape()));
  return success();
}

LogicalResult inferLoss(std::optional<Location> loc, StringRef what,
                        RankedTensorType scores, RankedTensorType labels,
                        RankedTensorType weights, LossReduction reduction,
                        Types &types, bool f32LossOf16Bit = false) {
  if (failed(checkLossOperands(loc, what, scores, labels, weights)))
    return failure();
  // A loss computed in f32 from 16-bit scores is f32 (Ds_Loss16).
  Type element = scores.getElementType();
  if (f32LossOf16Bit && element.getIntOrFloatBitWidth() == 16)
    element = Float32Type::get(element.getContext());
  if (reduction == LossReduction::none)
    types.push_back(RankedTensorType::get(labels.getShape(), element));
  else
    types.push_back(RankedTensorType::get({}, element));
  return success();
}

LogicalResult checkScalar(std::optional<Location> loc, StringRef what,
                          StringRef name, RankedTensorType type) {
  if (!type || type.getNumElements() != 1 || type.getRank() > 1)
    return fail(loc, what + " '" + name + "' must be a scalar");
  return success();
}

/// The operands of an optimizer update, {param, grad, states...}: every
/// state has the parameter's type; so does the gradient, or it is the
/// 16-bit gradient of an f32 parameter (mixed precision: the kernel converts
/// each element, so no f32 copy of the gradient exists).
LogicalResult checkUpdateOperands(std::optional<Location> loc, StringRef what,
                                  ValueRange states) {
  RankedTensorType param = tensorType(states.front());
  for (auto [i, state] : llvm::enumerate(states.drop_front())) {
    RankedTensorType type = tensorType(state);
    if (type == param)
      continue;
    if (i == 0 && param && type && param.getElementType().isF32() &&
        type.getShape() == param.getShape() &&
        (type.getElementType().isBF16() || type.getElementType().isF16()))
      continue;
    return fail(loc, what + " gradient and state tensors must all have the "
                            "parameter's type (or, for an f32 parameter, a "
                            "bf16/f16 gradient of its shape)");
  }
  return success();
}

/// Result types of an optimizer step: each updated state has the parameter's
/// type, and every state must match the parameter.
LogicalResult inferOptimizer(std::optional<Location> loc, StringRef what,
                             Value lr, Value step, ValueRange states,
                             unsigned numResults, Types &types) {
  if (failed(checkScalar(loc, what, "lr", tensorType(lr))) ||
      failed(checkScalar(loc, what, "step", tensorType(step))) ||
      failed(checkUpdateOperands(loc, what, states)))
    return failure();
  types.append(numResults, states.front().getType());
  return success();
}
} // namespace

namespace dsopt::ds::detail {
LogicalResult inferBroadcastResult(std::optional<Location> loc,
                                   ArrayRef<Type> operandTypes,
                                   Type elementType, Types &inferredTypes) {
  SmallVector<int64_t> shape;
  Type lastElement;
  for (Type type : operandTypes) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor)
      return fail(loc, "operands must be ranked tensors");
    SmallVector<int64_t> next;
    if (!OpTrait::util::getBroadcastedShape(shape, tensor.getShape(), next))
      return fail(loc, "operand shapes " + shapeString(shape) + " and " +
                           shapeString(tensor.getShape()) +
                           " do not broadcast");
    shape = std::move(next);
    lastElement = tensor.getElementType();
  }
  inferredTypes.push_back(
      RankedTensorType::get(shape, elementType ? elementType : lastElement));
  return success();
}
} // namespace dsopt::ds::detail

using dsopt::ds::detail::inferBroadcastResult;

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           Adaptor adaptor, Types &types) {
  if (!adaptor.getValue())
    return fail(loc, "constant needs a value");
  types.push_back(adaptor.getValue().getType());
  return success();
}

LogicalResult CompareOp::inferReturnTypes(MLIRContext *context,
                                          std::optional<Location> loc,
                                          Adaptor adaptor, Types &types) {
  return inferBroadcastResult(
      loc, {adaptor.getLhs().getType(), adaptor.getRhs().getType()},
      IntegerType::get(context, 1), types);
}

LogicalResult WhereOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor, Types &types) {
  Type lhs = adaptor.getLhs().getType(), rhs = adaptor.getRhs().getType();
  if (getElementTypeOrSelf(lhs) != getElementTypeOrSelf(rhs))
    return fail(loc, "where branches must have the same element type");
  return inferBroadcastResult(loc,
                              {adaptor.getCondition().getType(), lhs, rhs},
                              getElementTypeOrSelf(lhs), types);
}

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor, Types &types) {
  auto lhs = tensorType(adaptor.getLhs()), rhs = tensorType(adaptor.getRhs());
  if (!lhs || !rhs || lhs.getRank() < 1 || rhs.getRank() < 1)
    return fail(loc, "matmul operands must have rank >= 1");
  SmallVector<int64_t> a(lhs.getShape()), b(rhs.getShape());
  if (adaptor.getTransposeLhs() && a.size() >= 2)
    std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (adaptor.getTransposeRhs() && b.size() >= 2)
    std::swap(b[b.size() - 1], b[b.size() - 2]);
  bool lhsVector = a.size() == 1, rhsVector = b.size() == 1;
  if (lhsVector)
    a.insert(a.begin(), 1);
  if (rhsVector)
    b.push_back(1);
  int64_t m = a[a.size() - 2], k = a.back(), kRhs = b[b.size() - 2],
          n = b.back();
  if (k != kRhs)
    return fail(loc, "matmul contraction sizes differ: " +
                         shapeString(lhs.getShape()) + " x " +
                         shapeString(rhs.getShape()) + " (" + Twine(k) +
                         " vs " + Twine(kRhs) + ")");
  SmallVector<int64_t> batch;
  if (!OpTrait::util::getBroadcastedShape(ArrayRef(a).drop_back(2),
                                          ArrayRef(b).drop_back(2), batch))
    return fail(loc, "matmul batch axes of " + shapeString(lhs.getShape()) +
                         " and " + shapeString(rhs.getShape()) +
                         " do not broadcast");
  if (!lhsVector)
    batch.push_back(m);
  if (!rhsVector)
    batch.push_back(n);
  types.push_back(RankedTensorType::get(batch, lhs.getElementType()));
  return success();
}

LogicalResult GemmOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor, Types &types) {
  auto a = tensorType(adaptor.getA()), b = tensorType(adaptor.getB());
  if (!a || !b || a.getRank() != 2 || b.getRank() != 2)
    return fail(loc, "gemm operands a and b must be 2-D");
  if (a.getElementType() != b.getElementType())
    return fail(loc, "gemm operands must have the same element type");
  int64_t m = a.getDimSize(adaptor.getTransposeA() ? 1 : 0);
  int64_t k = a.getDimSize(adaptor.getTransposeA() ? 0 : 1);
  int64_t kB = b.getDimSize(adaptor.getTransposeB() ? 1 : 0);
  int64_t n = b.getDimSize(adaptor.getTransposeB() ? 0 : 1);
  if (k != kB)
    return fail(loc, "gemm contraction sizes differ (" + Twine(k) + " vs " +
                         Twine(kB) + ")");
  if (Value cValue = adaptor.getC()) {
    auto c = tensorType(cValue);
    const int64_t target[2] = {m, n};
    if (!c || c.getRank() > 2 ||
        c.getElementType() != a.getElementType())
      return fail(loc, "gemm c must be a tensor of rank <= 2 of a's type");
    for (auto [i, dim] : llvm::enumerate(llvm::reverse(c.getShape())))
      if (dim != 1 && dim != target[1 - i])
        return fail(loc, "gemm c " + shapeString(c.getShape()) +
                             " does not broadcast to [" + Twine(m) + ", " +
                             Twine(n) + "]");
  }
  types.push_back(RankedTensorType::get({m, n}, a.getElementType()));
  return success();
}

LogicalResult MatMulBiasOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor, Types &types) {
  auto lhs = tensorType(adaptor.getLhs()), rhs = tensorType(adaptor.getRhs()),
       bias = tensorType(adaptor.getBias());
  if (!lhs || !rhs || !bias || lhs.getRank() < 2 || rhs.getRank() != 2)
    return fail(loc, "matmul_bias needs lhs [..., M, K] and a 2-D rhs");
  Type element = lhs.getElementType();
  if (rhs.getElementType() != element || bias.getElementType() != element)
    return fail(loc, "matmul_bias operands must have one element type");
  int64_t k = lhs.getShape().back();
  int64_t kRhs = rhs.getDimSize(adaptor.getTransposeRhs() ? 1 : 0);
  int64_t n = rhs.getDimSize(adaptor.getTransposeRhs() ? 0 : 1);
  if (k != kRhs)
    return fail(loc, "matmul_bias contraction sizes differ: " +
                         shapeString(lhs.getShape()) + " x " +
                         shapeString(rhs.getShape()));
  if (bias.getRank() != 1 || bias.getDimSize(0) != n)
    return fail(loc, "matmul_bias bias " + shapeString(bias.getShape()) +
                         " is not [" + Twine(n) + "]");
  SmallVector<int64_t> shape(lhs.getShape());
  shape.back() = n;
  auto result = RankedTensorType::get(shape, element);
  if (Value addend = adaptor.getAddend())
    if (addend.getType() != result)
      return fail(loc, "matmul_bias addend " +
                           shapeString(tensorType(addend).getShape()) +
                           " does not have the result's type");
  types.push_back(result);
  return success();
}

LogicalResult MatMulBiasGradOp::inferReturnTypes(MLIRContext *,
                                                 std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 Types &types) {
  auto lhs = tensorType(adaptor.getLhs()), rhs = tensorType(adaptor.getRhs());
  if (!lhs || !rhs || lhs.getRank() != 2 || rhs.getRank() != 2)
    return fail(loc, "matmul_bias_grad operands must be 2-D");
  if (lhs.getElementType() != rhs.getElementType())
    return fail(loc, "matmul_bias_grad operands must have one element type");
  int64_t m = lhs.getDimSize(adaptor.getTransposeLhs() ? 1 : 0);
  int64_t k = lhs.getDimSize(adaptor.getTransposeLhs() ? 0 : 1);
  if (k != rhs.getDimSize(0))
    return fail(loc, "matmul_bias_grad contraction sizes differ: " +
                         shapeString(lhs.getShape()) + " x " +
                         shapeString(rhs.getShape()));
  int64_t n = rhs.getDimSize(1);
  types.push_back(RankedTensorType::get({m, n}, lhs.getElementType()));
  types.push_back(RankedTensorType::get({n}, lhs.getElementType()));
  return success();
}

/// The [..., M, N] result of lhs [..., M, K] times a 2-D rhs (transposed:
/// [N, K]), all of one element type; errors name `op`.
static LogicalResult inferEpilogueProduct(std::optional<Location> loc,
                                          StringRef op, Value lhsValue,
                                          Value rhsValue, bool transposeRhs,
                                          RankedTensorType &result) {
  auto lhs = tensorType(lhsValue), rhs = tensorType(rhsValue);
  if (!lhs || !rhs || lhs.getRank() < 2 || rhs.getRank() != 2)
    return fail(loc, op + " needs lhs [..., M, K] and a 2-D rhs");
  if (rhs.getElementType() != lhs.getElementType())
    return fail(loc, op + " operands must have one element type");
  int64_t k = lhs.getShape().back();
  int64_t kRhs = rhs.getDimSize(transposeRhs ? 1 : 0);
  int64_t n = rhs.getDimSize(transposeRhs ? 0 : 1);
  if (k != kRhs)
    return fail(loc, op + " contraction sizes differ: " +
                         shapeString(lhs.getShape()) + " x " +
                         shapeString(rhs.getShape()));
  SmallVector<int64_t> shape(lhs.getShape());
  shape.back() = n;
  result = RankedTensorType::get(shape, lhs.getElementType());
  return success();
}

LogicalResult MatMulBiasGeluOp::inferReturnTypes(MLIRContext *,
                                                 std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 Types &types) {
  RankedTensorType result;
  if (failed(inferEpilogueProduct(loc, "matmul_bias_gelu", adaptor.getLhs(),
                                  adaptor.getRhs(), adaptor.getTransposeRhs(),
                                  result)))
    return failure();
  auto bias = tensorType(adaptor.getBias());
  if (!bias || bias.getRank() != 1 ||
      bias.getDimSize(0) != result.getShape().back() ||
      bias.getElementType() != result.getElementType())
    return fail(loc, "matmul_bias_gelu bias must be [" +
                         Twine(result.getShape().back()) +
                         "] of the operands' element type");
  types.push_back(result);
  types.push_back(result);
  return success();
}

LogicalResult MatMulDGeluOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor, Types &types) {
  RankedTensorType result;
  if (failed(inferEpilogueProduct(loc, "matmul_dgelu", adaptor.getLhs(),
                                  adaptor.getRhs(), adaptor.getTransposeRhs(),
                                  result)))
    return failure();
  if (adaptor.getPreActivation().getType() != result)
    return fail(loc, "matmul_dgelu pre_activation " +
                         shapeString(tensorType(adaptor.getPreActivation())
                                         ? tensorType(adaptor.getPreActivation())
                                               .getShape()
                                         : ArrayRef<int64_t>{}) +
                         " does not have the product's type");
  types.push_back(result);
  return success();
}

LogicalResult MatMulLhsBiasGradOp::inferReturnTypes(MLIRContext *,
                                                    std::optional<Location> loc,
                                                    Adaptor adaptor,
                                                    Types &types) {
  auto lhs = tensorType(adaptor.getLhs()), rhs = tensorType(adaptor.getRhs());
  if (!lhs || !rhs || lhs.getRank() != 2 || rhs.getRank() != 2)
    return fail(loc, "matmul_lhs_bias_grad operands must be 2-D");
  if (lhs.getElementType() != rhs.getElementType())
    return fail(loc, "matmul_lhs_bias_grad operands must have one element type");
  if (lhs.getDimSize(0) != rhs.getDimSize(0))
    return fail(loc, "matmul_lhs_bias_grad contraction sizes differ: " +
                         shapeString(lhs.getShape()) + "ᵀ x " +
                         shapeString(rhs.getShape()));
  int64_t m = lhs.getDimSize(1), n = rhs.getDimSize(1);
  types.push_back(RankedTensorType::get({m, n}, lhs.getElementType()));
  types.push_back(RankedTensorType::get({m}, lhs.getElementType()));
  return success();
}

/// attention's q, k and v: one float type, one shape [..., T, Dh].
static LogicalResult checkAttentionOperands(std::optional<Location> loc,
                                            StringRef op,
                                            ArrayRef<Value> values,
                                            bool tokensMajor,
                                            RankedTensorType &query) {
  query = tensorType(values[0]);
  if (tokensMajor && (!query || query.getRank() < 3))
    return fail(loc, op + " tokens_major query must be a ranked tensor "
                          "[..., T, H, Dh] (rank at least 3)");
  if (!query || query.getRank() < 2)
    return fail(loc, op + " query must be a ranked tensor [..., T, Dh]");
  for (Value value : values.drop_front())
    if (tensorType(value) != query)
      return fail(loc, op + " operands must all have the query's type " +
                           shapeString(query.getShape()));
  return success();
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *context,
                                            std::optional<Location> loc,
                                            Adaptor adaptor, Types &types) {
  RankedTensorType query;
  if (failed(checkAttentionOperands(
          loc, "attention",
          {adaptor.getQuery(), adaptor.getKey(), adaptor.getValue()},
          adaptor.getTokensMajor(), query)))
    return failure();
  types.push_back(query);
  types.push_back(RankedTensorType::get(query.getShape().drop_back(),
                                        Float32Type::get(context)));
  return success();
}

/// attention_packed's qkv: a ranked float tensor [..., T, 3, H, Dh]; sets
/// the result's type [..., T, H, Dh].
static LogicalResult checkPackedQkv(std::optional<Location> loc, StringRef op,
                                    Value qkv, RankedTensorType &result) {
  auto type = tensorType(qkv);
  if (!type || type.getRank() < 4 || type.getDimSize(type.getRank() - 3) != 3)
    return fail(loc, op + " qkv must be a ranked tensor [..., T, 3, H, Dh] "
                          "(q, k, v on axis -3), got " +
                          (type ? shapeString(type.getShape()) : "unranked"));
  SmallVector<int64_t> shape(type.getShape());
  shape.erase(shape.end() - 3);
  result = RankedTensorType::get(shape, type.getElementType());
  return success();
}

LogicalResult AttentionPackedOp::inferReturnTypes(MLIRContext *context,
                                                  std::optional<Location> loc,
                                                  Adaptor adaptor,
                                                  Types &types) {
  RankedTensorType result;
  if (failed(checkPackedQkv(loc, "attention_packed", adaptor.getQkv(), result)))
    return failure();
  types.push_back(result);
  types.push_back(RankedTensorType::get(result.getShape().drop_back(),
                                        Float32Type::get(context)));
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *context,
                                            std::optional<Location> loc,
                                            Adaptor adaptor, Types &types) {
  auto input = tensorType(adaptor.getInput());
  auto scale = tensorType(adaptor.getScale());
  if (!input || !scale)
    return fail(loc, "layer_norm operands must be ranked tensors");
  if (!adaptor.getAxisAttr())
    return missingAttribute(loc, "layer_norm", "axis");
  int64_t rank = input.getRank(), axis = adaptor.getAxis();
  if (axis < 0 || axis >= rank)
    return fail(loc, "layer_norm axis " + Twine(axis) +
                         " is out of range for rank " + Twine(rank));
  ArrayRef<int64_t> normalized = input.getShape().drop_front(axis);
  auto checkParam = [&](RankedTensorType param,
                        StringRef name) -> LogicalResult {
    SmallVector<int64_t> broadcast;
    if (param.getElementType() != input.getElementType() ||
        param.getRank() > static_cast<int64_t>(normalized.size()) ||
        !OpTrait::util::getBroadcastedShape(normalized, param.getShape(),
                                            broadcast) ||
        ArrayRef<int64_t>(broadcast) != normalized)
      return fail(loc, "layer_norm " + name + " " +
                           shapeString(param.getShape()) +
                           " must broadcast to the normalized shape " +
                           shapeString(normalized) + " with the input's type");
    return success();
  };
  if (failed(checkParam(scale, "scale")))
    return failure();
  if (Value bias = adaptor.getBias())
    if (failed(checkParam(tensorType(bias), "bias")))
      return failure();
  SmallVector<int64_t> statShape(input.getShape().take_front(axis));
  statShape.append(rank - axis, 1);
  auto stat = RankedTensorType::get(statShape, Float32Type::get(context));
  types.append({input, stat, stat});
  return success();
}

/// Checks the per-channel operands of batch normalization.
static LogicalResult checkBatchNorm(std::optional<Location> loc,
                                    RankedTensorType input,
                                    ValueRange channelOperands) {
  if (!input || input.getRank() < 2)
    return fail(loc, "batch_norm input must be [N, C, ...]");
  for (Value operand : channelOperands) {
    auto type = tensorType(operand);
    if (!type || type.getRank() != 1 ||
        type.getDimSize(0) != input.getDimSize(1))
      return fail(loc, "batch_norm scale, bias, mean and variance must have "
                       "shape [" +
                           Twine(input.getDimSize(1)) + "]");
  }
  return success();
}

LogicalResult BatchNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor, Types &types) {
  auto input = tensorType(adaptor.getInput());
  if (failed(checkBatchNorm(loc, input,
                            {adaptor.getScale(), adaptor.getBias(),
                             adaptor.getMean(), adaptor.getVar()})))
    return failure();
  types.push_back(input);
  return success();
}

LogicalResult BatchNormTrainOp::inferReturnTypes(MLIRContext *context,
                                                 std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 Types &types) {
  auto input = tensorType(adaptor.getInput());
  if (failed(checkBatchNorm(loc, input,
                            {adaptor.getScale(), adaptor.getBias(),
                             adaptor.getRunningMean(),
                             adaptor.getRunningVar()})))
    return failure();
  // The attribute, not its getter: while parsing it may not be set yet.
  BoolAttr unbiased = adaptor.getUnbiasedRunningVarAttr();
  if (unbiased && unbiased.getValue() && input.hasStaticShape() &&
      input.getNumElements() < 2 * input.getDimSize(1))
    return fail(loc, "training-mode batch norm of " + Twine(input.getNumElements()) +
                         " values over " + Twine(input.getDimSize(1)) +
                         " channels: the unbiased running variance needs more "
                         "than one value per channel (PyTorch refuses it too)");
  auto saved =
      RankedTensorType::get({input.getDimSize(1)}, Float32Type::get(context));
  types.append({input, adaptor.getRunningMean().getType(),
                adaptor.getRunningVar().getType(), saved, saved});
  return success();
}

/// Shared by the reductions: axes must be sorted, unique and in range.
template <typename Adaptor>
static LogicalResult inferReduce(std::optional<Location> loc, StringRef what,
                                 Adaptor adaptor, Types &types) {
  auto input = tensorType(adaptor.getInput());
  if (!input)
    return fail(loc, what + " input must be a ranked tensor");
  if (!adaptor.getAxesAttr())
    return missingAttribute(loc, what, "axes");
  ArrayRef<int64_t> axes = adaptor.getAxes();
  bool keepdims =
      adaptor.getKeepdimsAttr() ? adaptor.getKeepdimsAttr().getValue() : true;
  int64_t rank = input.getRank();
  for (auto [i, axis] : llvm::enumerate(axes)) {
    if (axis < 0 || axis >= rank)
      return fail(loc, what + " axis " + Twine(axis) +
                           " is out of range for rank " + Twine(rank));
    if (i > 0 && axes[i - 1] >= axis)
      return fail(loc, what + " axes must be sorted and unique");
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (!llvm::is_contained(axes, d))
      shape.push_back(input.getDimSize(d));
    else if (keepdims)
      shape.push_back(1);
  }
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult ReduceSumOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor, Types &types) {
  return inferReduce(loc, "reduce_sum", adaptor, types);
}
LogicalResult ReduceMeanOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor, Types &types) {
  return inferReduce(loc, "reduce_mean", adaptor, types);
}
LogicalResult ReduceMaxOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor, Types &types) {
  return inferReduce(loc, "reduce_max", adaptor, types);
}
LogicalResult ReduceProdOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor, Types &types) {
  return inferReduce(loc, "reduce_prod", adaptor, types);
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor, Types &types) {
  auto input = tensorType(adaptor.getInput());
  if (!adaptor.getPermAttr())
    return missingAttribute(loc, "transpose", "perm");
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if (!input || static_cast<int64_t>(perm.size()) != input.getRank())
    return fail(loc, "transpose perm must have one entry per input axis");
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t axis : perm) {
    if (axis < 0 || axis >= input.getRank() || seen[axis])
      return fail(loc, "transpose perm must be a permutation of [0, " +
                           Twine(input.getRank()) + ")");
    seen[axis] = true;
    shape.push_back(input.getDimSize(axis));
  }
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor, Types &types) {
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return fail(loc, "concat needs at least one input");
  auto first = tensorType(inputs.front());
  if (!adaptor.getAxisAttr())
    return missingAttribute(loc, "concat", "axis");
  int64_t axis = adaptor.getAxis();
  if (!first || axis < 0 || axis >= first.getRank())
    return fail(loc, "concat axis " + Twine(axis) + " is out of range");
  SmallVector<int64_t> shape(first.getShape());
  for (Value input : inputs.drop_front()) {
    auto type = tensorType(input);
    if (!type || type.getRank() != first.getRank())
      return fail(loc, "concat inputs must have the same rank");
    for (int64_t d = 0; d < first.getRank(); ++d) {
      if (d == axis)
        shape[d] += type.getDimSize(d);
      else if (type.getDimSize(d) != first.getDimSize(d))
        return fail(loc, "concat inputs " + shapeString(first.getShape()) +
                             " and " + shapeString(type.getShape()) +
                             " differ outside axis " + Twine(axis));
    }
  }
  types.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor, Types &types) {
  auto data = tensorType(adaptor.getData());
  auto indices = tensorType(adaptor.getIndices());
  if (!adaptor.getAxisAttr())
    return missingAttribute(loc, "gather", "axis");
  int64_t axis = adaptor.getAxis();
  if (!data || !indices || axis < 0 || axis >= data.getRank())
    return fail(loc, "gather axis " + Twine(axis) +
                         " is out of range for the data's rank");
  SmallVector<int64_t> shape(data.getShape().take_front(axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, data.getShape().drop_front(axis + 1));
  types.push_back(RankedTensorType::get(shape, data.getElementType()));
  return success();
}

LogicalResult ScatterOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor, Types &types) {
  auto data = tensorType(adaptor.getData());
  if (!data)
    return fail(loc, "scatter needs a ranked data tensor");
  types.push_back(data);
  return success();
}

LogicalResult TopKOp::inferReturnTypes(MLIRContext *context,
                                       std::optional<Location> loc,
                                       Adaptor adaptor, Types &types) {
  auto input = tensorType(adaptor.getInput());
  if (!adaptor.getAxisAttr() || !adaptor.getKAttr())
    return missingAttribute(loc, "top_k", "axis, k");
  int64_t axis = adaptor.getAxis(), k = adaptor.getK();
  if (!input || axis < 0 || axis >= input.getRank())
    return fail(loc, "top_k axis " + Twine(axis) +
                         " is out of range for the input's rank");
  if (k < 0 || k > input.getDimSize(axis))
    return fail(loc, "top_k k " + Twine(k) + " is not in [0, " +
                         Twine(input.getDimSize(axis)) + "], the extent of axis " +
                         Twine(axis));
  SmallVector<int64_t> shape(input.getShape());
  shape[axis] = k;
  types.push_back(RankedTensorType::get(shape, IntegerType::get(context, 64)));
  return success();
}

LogicalResult DropoutOp::inferReturnTypes(MLIRContext *context,
                                          std::optional<Location> loc,
                                          Adaptor adaptor, Types &types) {
  auto input = tensorType(adaptor.getInput());
  if (!input)
    return fail(loc, "dropout input must be a ranked tensor");
  types.append({input, RankedTensorType::get(input.getShape(),
                                             IntegerType::get(context, 1))});
  return success();
}

LogicalResult SoftmaxCrossEntropyOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    Types &types) {
  auto scores = tensorType(adaptor.getScores());
  auto weights =
      adaptor.getWeights() ? tensorType(adaptor.getWeights()) : nullptr;
  if (failed(inferLoss(loc, "softmax_cross_entropy", scores,
                       tensorType(adaptor.getLabels()), weights,
                       reductionOf(adaptor.getReductionAttr()), types,
                       /*f32LossOf16Bit=*/true)))
    return failure();
  types.push_back(scores);
  return success();
}

LogicalResult SoftmaxCrossEntropyWithGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    Types &types) {
  const char *what = "softmax_cross_entropy_with_grad";
  auto scores = tensorType(adaptor.getScores());
  auto weights =
      adaptor.getWeights() ? tensorType(adaptor.getWeights()) : nullptr;
  if (failed(inferLoss(loc, what, scores, tensorType(adaptor.getLabels()),
                       weights, reductionOf(adaptor.getReductionAttr()),
                       types, /*f32LossOf16Bit=*/true)))
    return failure();
  // The seed is the loss's gradient: the loss's shape, any float type.
  auto seed = tensorType(adaptor.getLossGrad());
  auto loss = cast<RankedTensorType>(types.back());
  if (!seed || seed.getShape() != loss.getShape())
    return fail(loc, Twine(what) + " loss_grad (the gradient's seed) must "
                         "have the loss's shape " +
                         shapeString(loss.getShape()));
  types.push_back(scores);
  return success();
}

LogicalResult NllLossOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor, Types &types) {
  auto weights =
      adaptor.getWeights() ? tensorType(adaptor.getWeights()) : nullptr;
  return inferLoss(loc, "nll_loss", tensorType(adaptor.getLogProb()),
                   tensorType(adaptor.getLabels()), weights,
                   reductionOf(adaptor.getReductionAttr()), types);
}

LogicalResult ConvOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor, Types &types) {
  auto input = tensorType(adaptor.getInput());
  auto weight = tensorType(adaptor.getWeight());
  if (!input || !weight || input.getRank() != weight.getRank())
    return fail(loc, "conv input and weight must have the same rank");
  if (input.getElementType() != weight.getElementType())
    return fail(loc, "conv input and weight must have the same element type");
  if (!adaptor.getStridesAttr() || !adaptor.getPadsAttr() ||
      !adaptor.getDilationsAttr())
    return missingAttribute(loc, "conv", "strides, pads and dilations");
  int64_t group = adaptor.getGroupAttr() ? adaptor.getGroup() : 1;
  int64_t channels = input.getRank() >= 2 ? input.getDimSize(1) : 0;
  int64_t outChannels = weight.getDimSize(0);
  if (group < 1 || channels % group != 0 || outChannels % group != 0)
    return fail(loc, "conv group " + Twine(group) +
                         " must divide the input channels (" +
                         Twine(channels) + ") and output channels (" +
                         Twine(outChannels) + ")");
  if (weight.getDimSize(1) != channels / group)
    return fail(loc, "conv weight " + shapeString(weight.getShape()) +
                         " needs " + Twine(channels / group) +
                         " input channels per group, input has " +
                         Twine(channels) + " channels in " + Twine(group) +
                         " groups");
  if (Value biasValue = adaptor.getBias()) {
    auto bias = tensorType(biasValue);
    if (!bias || bias.getRank() != 1 || bias.getDimSize(0) != outChannels)
      return fail(loc, "conv bias must have shape [" + Twine(outChannels) +
                           "]");
  }
  SmallVector<int64_t> shape;
  WindowAttrs window{weight.getShape().drop_front(2), adaptor.getStrides(),
                     adaptor.getPads(), adaptor.getDilations()};
  if (failed(inferWindowShape(loc, "conv", input, window, outChannels,
                              /*ceilMode=*/false, shape)))
    return failure();
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult MaxPoolOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor, Types &types) {
  auto input = tensorType(adaptor.getInput());
  if (!input || input.getRank() < 3)
    return fail(loc, "max_pool input must be [N, C, D...]");
  if (!adaptor.getKernelShapeAttr() || !adaptor.getStridesAttr() ||
      !adaptor.getPadsAttr() || !adaptor.getDilationsAttr())
    return missingAttribute(loc, "max_pool",
                            "kernel_shape, strides, pads and dilations");
  SmallVector<int64_t> shape;
  WindowAttrs window{adaptor.getKernelShape(), adaptor.getStrides(),
                     adaptor.getPads(), adaptor.getDilations()};
  if (failed(inferWindowShape(loc, "max_pool", input, window,
                              input.getDimSize(1), adaptor.getCeilMode(),
                              shape)))
    return failure();
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult AveragePoolOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor, Types &types) {
  auto input = tensorType(adaptor.getInput());
  if (!input || input.getRank() < 3)
    return fail(loc, "avg_pool input must be [N, C, D...]");
  if (!adaptor.getKernelShapeAttr() || !adaptor.getStridesAttr() ||
      !adaptor.getPadsAttr())
    return missingAttribute(loc, "avg_pool", "kernel_shape, strides and pads");
  SmallVector<int64_t> ones(adaptor.getKernelShape().size(), 1);
  SmallVector<int64_t> shape;
  WindowAttrs window{adaptor.getKernelShape(), adaptor.getStrides(),
                     adaptor.getPads(), ones};
  if (failed(inferWindowShape(loc, "avg_pool", input, window,
                              input.getDimSize(1), adaptor.getCeilMode(),
                              shape)))
    return failure();
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult AdamOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor, Types &types) {
  return inferOptimizer(loc, "adam", adaptor.getLr(), adaptor.getStep(),
                        {adaptor.getParam(), adaptor.getGrad(),
                         adaptor.getFirstMoment(), adaptor.getSecondMoment()},
                        3, types);
}

LogicalResult MomentumOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           Adaptor adaptor, Types &types) {
  return inferOptimizer(loc, "momentum", adaptor.getLr(), adaptor.getStep(),
                        {adaptor.getParam(), adaptor.getGrad(),
                         adaptor.getVelocity()},
                        2, types);
}

LogicalResult AdagradOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor, Types &types) {
  return inferOptimizer(loc, "adagrad", adaptor.getLr(), adaptor.getStep(),
                        {adaptor.getParam(), adaptor.getGrad(),
                         adaptor.getAccumulator()},
                        2, types);
}

//===----------------------------------------------------------------------===//
// Gradient, optimizer and state ops (the training step)
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
  if (failed(checkUpdateOperands(loc, what, states)))
    return failure();
  Type param = states.front().getType();
  // The gradient is not a result.
  types.push_back(param);
  types.append(states.size() - 2, param);
  return success();
}

/// The optional 16-bit copy of the updated parameter (`copy_type`): a
/// bf16 or f16 tensor of an f32 parameter's shape.
LogicalResult inferParamCopy(std::optional<Location> loc, StringRef what,
                             Value param, TypeAttr copyType, Types &types) {
  if (!copyType)
    return success();
  auto tensor = tensorType(param);
  Type element = copyType.getValue();
  if (!tensor || !tensor.getElementType().isF32() ||
      !(element.isBF16() || element.isF16()))
    return emitOptionalError(loc, what,
                             " copy_type must be bf16 or f16, for an f32 "
                             "param (the 16-bit copy of the updated param)");
  types.push_back(tensor.clone(element));
  return success();
}
} // namespace

// Normalization.
LogicalResult AttentionGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor, Types &types) {
  RankedTensorType query;
  if (failed(checkAttentionOperands(loc, "attention_grad",
                                    {adaptor.getQuery(), adaptor.getKey(),
                                     adaptor.getValue(), adaptor.getResult(),
                                     adaptor.getResultGrad()},
                                    adaptor.getTokensMajor(), query)))
    return failure();
  auto lse = tensorType(adaptor.getLse());
  if (!lse || lse.getShape() != query.getShape().drop_back())
    return fail(loc, "attention_grad lse must have the query's shape without "
                     "its last axis");
  types.append({query, query, query});
  return success();
}
LogicalResult AttentionPackedGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor, Types &types) {
  RankedTensorType result;
  if (failed(checkPackedQkv(loc, "attention_packed_grad", adaptor.getQkv(),
                            result)))
    return failure();
  for (auto [name, value] :
       {std::pair<StringRef, Value>{"result", adaptor.getResult()},
        {"result gradient", adaptor.getResultGrad()}})
    if (tensorType(value) != result)
      return fail(loc, "attention_packed_grad " + name + " must have type " +
                           shapeString(result.getShape()) +
                           " (qkv's without axis -3)");
  auto lse = tensorType(adaptor.getLse());
  if (!lse || lse.getShape() != result.getShape().drop_back())
    return fail(loc, "attention_packed_grad lse must have the result's "
                     "shape without its last axis");
  types.push_back(tensorType(adaptor.getQkv()));
  return success();
}
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
  if (Value addend = adaptor.getAddend(); addend && tensorType(addend) != input)
    return emitOptionalError(loc, "layer_norm_grad addend must have the "
                                  "input's type");
  types.append({input, scale, scale});
  return success();
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

// Losses.
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

// Convolution and pooling.
LogicalResult MaxPoolGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor, Types &types) {
  auto input = tensorType(adaptor.getInput());
  if (!input || input.getRank() < 3)
    return emitOptionalError(loc, "max_pool_grad input must be [N, C, D...]");
  types.push_back(input);
  return success();
}

// Optimizers.
LogicalResult AdamWOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor, Types &types) {
  if (failed(inferUpdate(loc, "adamw", adaptor.getLr(), adaptor.getStep(),
                         {adaptor.getParam(), adaptor.getGrad(),
                          adaptor.getFirstMoment(), adaptor.getSecondMoment()},
                         types)))
    return failure();
  return inferParamCopy(loc, "adamw", adaptor.getParam(), adaptor.getCopyTypeAttr(),
                        types);
}
LogicalResult SgdOp::inferReturnTypes(MLIRContext *,
                                      std::optional<Location> loc,
                                      Adaptor adaptor, Types &types) {
  if (failed(inferUpdate(loc, "sgd", adaptor.getLr(), adaptor.getStep(),
                         {adaptor.getParam(), adaptor.getGrad(),
                          adaptor.getVelocity()},
                         types)))
    return failure();
  return inferParamCopy(loc, "sgd", adaptor.getParam(), adaptor.getCopyTypeAttr(),
                        types);
}
LogicalResult LionOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor, Types &types) {
  if (failed(inferUpdate(loc, "lion", adaptor.getLr(), Value(),
                         {adaptor.getParam(), adaptor.getGrad(),
                          adaptor.getMomentum()},
                         types)))
    return failure();
  return inferParamCopy(loc, "lion", adaptor.getParam(), adaptor.getCopyTypeAttr(),
                        types);
}

// Gradient norm and state initialization.
LogicalResult SumOfSquaresOp::inferReturnTypes(MLIRContext *context,
                                               std::optional<Location>,
                                               Adaptor, Types &types) {
  types.push_back(RankedTensorType::get({}, Float32Type::get(context)));
  return success();
}

//===----------------------------------------------------------------------===//
// Sums written wider than their 16-bit operands (mixed precision)
//===----------------------------------------------------------------------===//

namespace {
/// Whether `actual` is `inferred` or, for a 16-bit float `inferred`, the
/// same shape in f32: a sum over many 16-bit rows written in f32
/// (docs/passes.md, Ds_Sum32).
bool isSameOrWidened(Type inferred, Type actual) {
  if (inferred == actual)
    return true;
  auto want = dyn_cast<RankedTensorType>(inferred);
  auto have = dyn_cast<RankedTensorType>(actual);
  return want && have && want.getShape() == have.getShape() &&
         isa<FloatType>(want.getElementType()) &&
         want.getElementType().getIntOrFloatBitWidth() == 16 &&
         have.getElementType().isF32();
}

/// The result types of an OpTy whose operands and attributes are parsed:
/// after an optional `-> types`, each the type OpTy infers or, for a 16-bit
/// one, f32; without the arrow, the inferred ones.
template <typename OpTy>
ParseResult parseWidenedResults(OpAsmParser &parser, OperationState &result) {
  SmallVector<Type> inferred;
  if (failed(OpTy::inferReturnTypes(
          parser.getContext(), result.location, result.operands,
          result.attributes.getDictionary(parser.getContext()),
          result.getRawProperties(), result.regions, inferred)))
    return failure();
  if (failed(parser.parseOptionalArrow())) {
    result.addTypes(inferred);
    return success();
  }
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<Type> types;
  if (parser.parseTypeList(types))
    return failure();
  if (types.size() != inferred.size())
    return parser.emitError(loc) << "expected " << inferred.size()
                                 << " result types after '->'";
  for (auto [want, have] : llvm::zip(inferred, types))
    if (!isSameOrWidened(want, have))
      return parser.emitError(loc)
             << "result type " << have << " is neither " << want
             << " nor its f32 widening";
  result.addTypes(types);
  return success();
}
} // namespace

bool ReduceSumOp::isCompatibleReturnTypes(TypeRange inferred,
                                          TypeRange actual) {
  return inferred.size() == 1 && actual.size() == 1 &&
         isSameOrWidened(inferred[0], actual[0]);
}

ParseResult ReduceSumOp::parse(OpAsmParser &parser, OperationState &result) {
  OpAsmParser::UnresolvedOperand input;
  RankedTensorType type;
  if (parser.parseOperand(input) ||
      parser.parseOptionalAttrDict(result.attributes) || parser.parseColon() ||
      parser.parseType(type) ||
      parser.resolveOperand(input, type, result.operands))
    return failure();
  return parseWidenedResults<ReduceSumOp>(parser, result);
}

void ReduceSumOp::print(OpAsmPrinter &p) {
  p << ' ' << getInput();
  SmallVector<StringRef> elided;
  if (getKeepdims())
    elided.push_back("keepdims");
  p.printOptionalAttrDict((*this)->getAttrs(), elided);
  p << " : " << getInput().getType();
  if (getElementTypeOrSelf(getType()) !=
      getElementTypeOrSelf(getInput().getType()))
    p << " -> " << getType();
}

bool LayerNormGradOp::isCompatibleReturnTypes(TypeRange inferred,
                                              TypeRange actual) {
  if (inferred.size() != 3 || actual.size() != 3 || inferred[0] != actual[0])
    return false;
  return isSameOrWidened(inferred[1], actual[1]) &&
         isSameOrWidened(inferred[2], actual[2]);
}

ParseResult LayerNormGradOp::parse(OpAsmParser &parser,
                                   OperationState &result) {
  // Five operands, or six with the addend.
  SmallVector<OpAsmParser::UnresolvedOperand, 6> operands;
  SmallVector<Type, 6> types;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseOperandList(operands) ||
      parser.parseOptionalAttrDict(result.attributes) || parser.parseColon() ||
      parser.parseTypeList(types) ||
      parser.resolveOperands(operands, types, loc, result.operands))
    return failure();
  return parseWidenedResults<LayerNormGradOp>(parser, result);
}

void LayerNormGradOp::print(OpAsmPrinter &p) {
  p << ' ' << getOperands();
  p.printOptionalAttrDict((*this)->getAttrs());
  p << " : " << getOperandTypes();
  if (getScaleGrad().getType() != getScale().getType() ||
      getBiasGrad().getType() != getScale().getType())
    p << " -> " << getResultTypes();
}
