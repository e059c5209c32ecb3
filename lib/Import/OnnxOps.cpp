//===- OnnxOps.cpp - per-operator import of ONNX nodes ---------------------===//
//
// One converter per ONNX operator (opsets 13-21 of ai.onnx, version 1 of
// ai.onnx.preview.training), and one folder for every operator that shape
// arithmetic uses. Converters read attributes with ONNX's defaults, turn
// inputs that ONNX passes as tensors but dsopt needs as compile-time facts
// (shapes, axes, sizes) into attributes, and normalize axes.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "mlir/Dialect/Traits.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/xxhash.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <type_traits>

using namespace mlir;
using llvm::StringRef;
using llvm::Twine;

namespace dsopt::onnx_import {
namespace {

std::string shapeString(ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    text += (i ? ", " : "") + std::to_string(d);
  return text + "]";
}

/// A number as a short decimal (%g), for messages.
std::string numberString(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", value);
  return buffer;
}

int64_t product(ArrayRef<int64_t> values) {
  int64_t result = 1;
  for (int64_t v : values)
    result *= v;
  return result;
}

/// Row-major strides of `shape`.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

/// Calls fn(outIndex, inputIndices) for every element of a broadcast.
void forEachBroadcast(ArrayRef<int64_t> outShape,
                      ArrayRef<ArrayRef<int64_t>> inShapes,
                      llvm::function_ref<void(int64_t, ArrayRef<int64_t>)> fn) {
  size_t rank = outShape.size();
  // Strides of each input aligned to the output's axes; 0 where broadcast.
  SmallVector<SmallVector<int64_t>> inStrides;
  for (ArrayRef<int64_t> shape : inShapes) {
    SmallVector<int64_t> own = stridesOf(shape);
    SmallVector<int64_t> aligned(rank, 0);
    size_t offset = rank - shape.size();
    for (size_t d = 0; d < shape.size(); ++d)
      aligned[offset + d] = shape[d] == 1 ? 0 : own[d];
    inStrides.push_back(aligned);
  }
  int64_t total = product(outShape);
  SmallVector<int64_t> counter(rank, 0), indices(inShapes.size(), 0);
  for (int64_t out = 0; out < total; ++out) {
    fn(out, indices);
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
      ++counter[d];
      for (size_t k = 0; k < indices.size(); ++k)
        indices[k] += inStrides[k][d];
      if (counter[d] < outShape[d])
        break;
      for (size_t k = 0; k < indices.size(); ++k)
        indices[k] -= inStrides[k][d] * counter[d];
      counter[d] = 0;
    }
  }
}

//===----------------------------------------------------------------------===//
// Host evaluation of elementwise ops
//===----------------------------------------------------------------------===//

using FloatFn = std::function<double(ArrayRef<double>)>;
using IntFn = std::function<std::optional<int64_t>(ArrayRef<int64_t>)>;

/// Evaluates an elementwise op over broadcast inputs. `resultType` is the
/// output dtype (Undefined: that of the last input). Declines (returns
/// false) when the result would be a large non-splat tensor.
FailureOr<bool> foldElementwise(NodeContext &ctx, ArrayRef<const HostTensor *> inputs,
                                DType resultType, FloatFn floatFn, IntFn intFn) {
  SmallVector<int64_t> shape;
  bool allSplat = true;
  for (const HostTensor *input : inputs) {
    FailureOr<SmallVector<int64_t>> next = broadcastShapes(shape, input->shape);
    if (failed(next))
      return ctx.error("operand shapes " + shapeString(shape) + " and " +
                       shapeString(input->shape) + " do not broadcast");
    shape = *next;
    allSplat &= input->splat || input->numElements() == 1;
  }
  DType computeType = inputs.back()->dtype;
  for (const HostTensor *input : inputs)
    if (input->isFloat() != isFloatDType(computeType) &&
        resultType == DType::Undefined)
      return ctx.error("operand element types differ");
  if (resultType == DType::Undefined)
    resultType = computeType;
  // Inputs of comparisons may be float while the result is bool.
  bool floatCompute = inputs.front()->isFloat();
  if (floatCompute && !floatFn)
    return ctx.error("does not apply to floating-point values");
  if (!floatCompute && !intFn)
    return ctx.error("does not apply to integer values");
  int64_t count = allSplat ? 1 : product(shape);
  if (!allSplat && count > kMaxFoldElements)
    return false;

  HostTensor result;
  result.dtype = resultType;
  result.shape = shape;
  result.splat = allSplat && product(shape) != 1;
  SmallVector<double> floatArgs(inputs.size());
  SmallVector<int64_t> intArgs(inputs.size());
  bool divideByZero = false;
  auto compute = [&](int64_t out, ArrayRef<int64_t> idx) {
    double floatValue = 0;
    int64_t intValue = 0;
    if (floatCompute) {
      for (size_t k = 0; k < inputs.size(); ++k)
        floatArgs[k] = inputs[k]->floatAt(allSplat ? 0 : idx[k]);
      floatValue = floatFn(floatArgs);
    } else {
      for (size_t k = 0; k < inputs.size(); ++k)
        intArgs[k] = inputs[k]->intAt(allSplat ? 0 : idx[k]);
      std::optional<int64_t> value = intFn(intArgs);
      if (!value)
        divideByZero = true;
      intValue = value.value_or(0);
    }
    if (isFloatDType(resultType))
      result.floats.push_back(roundToFloat(
          resultType, floatCompute ? floatValue : static_cast<double>(intValue)));
    else
      result.ints.push_back(wrapToInt(
          resultType,
          floatCompute ? truncateToInt(floatValue) : intValue));
    (void)out;
  };
  if (allSplat) {
    SmallVector<int64_t> zeros(inputs.size(), 0);
    compute(0, zeros);
  } else {
    SmallVector<ArrayRef<int64_t>> shapes;
    for (const HostTensor *input : inputs)
      shapes.push_back(input->shape);
    forEachBroadcast(shape, shapes, compute);
  }
  if (divideByZero)
    return ctx.error("integer division by zero in a constant expression");
  ctx.setOutputConst(0, std::move(result));
  return true;
}

/// Input `i` of a node being folded. The importer folds a node when all its
/// *present* inputs are known, so a required input may still be missing.
FailureOr<const HostTensor *> foldInput(NodeContext &ctx, unsigned i) {
  if (!ctx.hasInput(i))
    return ctx.error("input " + Twine(i) + " is required but missing");
  const HostTensor *value = ctx.constInput(i);
  if (!value)
    return ctx.error("input " + Twine(i) + " is not known at compile time");
  return value;
}

/// The inputs of a node being folded: at least `min`, none missing in
/// between.
FailureOr<SmallVector<const HostTensor *>> constInputs(NodeContext &ctx,
                                                       unsigned min = 1) {
  SmallVector<const HostTensor *> inputs;
  unsigned count = std::max(min, ctx.numInputs());
  for (unsigned i = 0; i < count; ++i) {
    FailureOr<const HostTensor *> value = foldInput(ctx, i);
    if (failed(value))
      return failure();
    inputs.push_back(*value);
  }
  return inputs;
}

template <double (*Fn)(double, double), int64_t (*IntOp)(int64_t, int64_t)>
FailureOr<bool> foldArith(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> known = constInputs(ctx, 2);
  if (failed(known))
    return failure();
  SmallVector<const HostTensor *> &inputs = *known;
  if (inputs.size() != 2)
    return ctx.error("expects 2 inputs, got " + Twine(inputs.size()));
  if (inputs[0]->dtype != inputs[1]->dtype)
    return ctx.error("operand element types differ (" +
                     dtypeName(static_cast<int32_t>(inputs[0]->dtype)) +
                     " vs " +
                     dtypeName(static_cast<int32_t>(inputs[1]->dtype)) + ")");
  return foldElementwise(
      ctx, inputs, DType::Undefined,
      [](ArrayRef<double> a) { return Fn(a[0], a[1]); },
      [](ArrayRef<int64_t> a) -> std::optional<int64_t> {
        return IntOp(a[0], a[1]);
      });
}

double addF(double a, double b) { return a + b; }
double subF(double a, double b) { return a - b; }
double mulF(double a, double b) { return a * b; }
int64_t addI(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) +
                              static_cast<uint64_t>(b));
}
int64_t subI(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) -
                              static_cast<uint64_t>(b));
}
int64_t mulI(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) *
                              static_cast<uint64_t>(b));
}

FailureOr<bool> foldDiv(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> known = constInputs(ctx, 2);
  if (failed(known))
    return failure();
  SmallVector<const HostTensor *> &inputs = *known;
  if (inputs.size() != 2 || inputs[0]->dtype != inputs[1]->dtype)
    return ctx.error("expects 2 inputs of the same element type");
  return foldElementwise(
      ctx, inputs, DType::Undefined,
      [](ArrayRef<double> a) { return a[0] / a[1]; },
      [](ArrayRef<int64_t> a) -> std::optional<int64_t> {
        if (a[1] == 0 || (a[0] == INT64_MIN && a[1] == -1))
          return std::nullopt;
        return a[0] / a[1];
      });
}

/// Mod of known operands (shape arithmetic: Swin's window padding is
/// (w - W % w) % w). fmod = 0 takes the divisor's sign, as Python's %;
/// fmod = 1 the dividend's, as C's fmod. A zero divisor is an error.
FailureOr<bool> foldMod(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> known = constInputs(ctx, 2);
  if (failed(known))
    return failure();
  SmallVector<const HostTensor *> &inputs = *known;
  int64_t fmod;
  if (failed(ctx.intAttr("fmod", fmod, 0)))
    return failure();
  if (inputs.size() != 2 || inputs[0]->dtype != inputs[1]->dtype)
    return ctx.error("expects 2 inputs of the same element type");
  if (fmod != 0 && fmod != 1)
    return ctx.error("attribute fmod = " + Twine(fmod) + " is not 0 or 1");
  if (inputs[0]->isFloat() && fmod == 0)
    return ctx.error("floating-point Mod needs fmod = 1");
  return foldElementwise(
      ctx, inputs, DType::Undefined,
      [](ArrayRef<double> a) { return std::fmod(a[0], a[1]); },
      [fmod](ArrayRef<int64_t> a) -> std::optional<int64_t> {
        if (a[1] == 0)
          return std::nullopt;
        if (a[1] == -1)
          return 0;
        int64_t r = a[0] % a[1];
        if (!fmod && r != 0 && ((r < 0) != (a[1] < 0)))
          r += a[1];
        return r;
      });
}

/// Integer power; a negative exponent gives 1 / a^-b truncated toward zero
/// (what computing in floating point and casting back gives).
std::optional<int64_t> powI(int64_t a, int64_t b) {
  if (b < 0) {
    if (a == 0)
      return std::nullopt;
    if (a == 1 || a == -1)
      return (b % 2 == 0) ? 1 : a;
    return 0;
  }
  int64_t result = 1;
  // Square-and-multiply, wrapping like the runtime's integer arithmetic.
  for (int64_t base = a; b > 0; b >>= 1, base = mulI(base, base))
    if (b & 1)
      result = mulI(result, base);
  return result;
}

FailureOr<bool> foldPow(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> known = constInputs(ctx, 2);
  if (failed(known))
    return failure();
  SmallVector<const HostTensor *> &inputs = *known;
  if (inputs.size() != 2)
    return ctx.error("expects 2 inputs");
  // An integer base with a floating-point exponent computes in floating
  // point and truncates (2 ^ 0.5 = 1); ONNX Pow's result has the base's type.
  if (!inputs[0]->isFloat() && inputs[1]->isFloat()) {
    HostTensor base = inputs[0]->castTo(DType::Double);
    HostTensor exponent = inputs[1]->castTo(DType::Double);
    const HostTensor *operands[] = {&base, &exponent};
    return foldElementwise(
        ctx, operands, inputs[0]->dtype,
        [](ArrayRef<double> a) { return std::pow(a[0], a[1]); }, nullptr);
  }
  // Otherwise the exponent converts to the base's type, as ds.pow does.
  HostTensor exponent = inputs[1]->castTo(inputs[0]->dtype);
  const HostTensor *operands[] = {inputs[0], &exponent};
  return foldElementwise(
      ctx, operands, DType::Undefined,
      [](ArrayRef<double> a) { return std::pow(a[0], a[1]); },
      [](ArrayRef<int64_t> a) { return powI(a[0], a[1]); });
}

template <double (*Fn)(double)>
FailureOr<bool> foldFloatUnary(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> known = constInputs(ctx);
  if (failed(known))
    return failure();
  SmallVector<const HostTensor *> &inputs = *known;
  if (inputs.size() != 1)
    return ctx.error("expects 1 input");
  return foldElementwise(
      ctx, inputs, DType::Undefined,
      [](ArrayRef<double> a) { return Fn(a[0]); }, nullptr);
}

double sqrtF(double x) { return std::sqrt(x); }
double reciprocalF(double x) { return 1.0 / x; }
double expF(double x) { return std::exp(x); }
double logF(double x) { return std::log(x); }
double tanhF(double x) { return std::tanh(x); }
double erfF(double x) { return std::erf(x); }
double sigmoidF(double x) { return 1.0 / (1.0 + std::exp(-x)); }

FailureOr<bool> foldNeg(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> inputs = constInputs(ctx);
  if (failed(inputs))
    return failure();
  return foldElementwise(
      ctx, *inputs, DType::Undefined,
      [](ArrayRef<double> a) { return -a[0]; },
      [](ArrayRef<int64_t> a) -> std::optional<int64_t> { return -a[0]; });
}

FailureOr<bool> foldAbs(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> inputs = constInputs(ctx);
  if (failed(inputs))
    return failure();
  return foldElementwise(
      ctx, *inputs, DType::Undefined,
      [](ArrayRef<double> a) { return std::fabs(a[0]); },
      [](ArrayRef<int64_t> a) -> std::optional<int64_t> {
        return a[0] < 0 ? -a[0] : a[0];
      });
}

FailureOr<bool> foldRelu(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> inputs = constInputs(ctx);
  if (failed(inputs))
    return failure();
  return foldElementwise(
      ctx, *inputs, DType::Undefined,
      [](ArrayRef<double> a) { return a[0] > 0 ? a[0] : 0.0; },
      [](ArrayRef<int64_t> a) -> std::optional<int64_t> {
        return a[0] > 0 ? a[0] : 0;
      });
}

FailureOr<bool> foldNot(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> known = constInputs(ctx);
  if (failed(known))
    return failure();
  SmallVector<const HostTensor *> &inputs = *known;
  if (inputs.size() != 1 || inputs[0]->dtype != DType::Bool)
    return ctx.error("expects one BOOL input");
  return foldElementwise(
      ctx, inputs, DType::Bool, nullptr,
      [](ArrayRef<int64_t> a) -> std::optional<int64_t> { return !a[0]; });
}

/// Max and Min take one or more inputs.
template <bool IsMax>
FailureOr<bool> foldExtremum(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> known = constInputs(ctx);
  if (failed(known))
    return failure();
  SmallVector<const HostTensor *> &inputs = *known;
  if (inputs.empty())
    return ctx.error("expects at least one input");
  for (const HostTensor *input : inputs)
    if (input->dtype != inputs[0]->dtype)
      return ctx.error("operand element types differ");
  return foldElementwise(
      ctx, inputs, DType::Undefined,
      [](ArrayRef<double> a) {
        // NaN propagates, as in numpy.maximum and the converted form.
        double r = a[0];
        for (double v : a)
          r = std::isnan(r) || std::isnan(v) ? NAN
              : IsMax                        ? std::max(r, v)
                                             : std::min(r, v);
        return r;
      },
      [](ArrayRef<int64_t> a) -> std::optional<int64_t> {
        int64_t r = a[0];
        for (int64_t v : a)
          r = IsMax ? std::max(r, v) : std::min(r, v);
        return r;
      });
}

template <ds::ComparePredicate Predicate>
bool comparePredicate(double order) {
  switch (Predicate) {
  case ds::ComparePredicate::eq: return order == 0;
  case ds::ComparePredicate::lt: return order < 0;
  case ds::ComparePredicate::le: return order <= 0;
  case ds::ComparePredicate::gt: return order > 0;
  case ds::ComparePredicate::ge: return order >= 0;
  }
  return false;
}

template <ds::ComparePredicate Predicate>
FailureOr<bool> foldCompare(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> known = constInputs(ctx, 2);
  if (failed(known))
    return failure();
  SmallVector<const HostTensor *> &inputs = *known;
  if (inputs.size() != 2 || inputs[0]->dtype != inputs[1]->dtype)
    return ctx.error("expects 2 inputs of the same element type");
  return foldElementwise(
      ctx, inputs, DType::Bool,
      [](ArrayRef<double> a) -> double {
        if (std::isnan(a[0]) || std::isnan(a[1]))
          return 0.0;
        // Not a[0] - a[1]: that is NaN for two equal infinities.
        int order = a[0] < a[1] ? -1 : a[0] > a[1] ? 1 : 0;
        return comparePredicate<Predicate>(order) ? 1.0 : 0.0;
      },
      [](ArrayRef<int64_t> a) -> std::optional<int64_t> {
        int order = a[0] < a[1] ? -1 : a[0] > a[1] ? 1 : 0;
        return comparePredicate<Predicate>(order) ? 1 : 0;
      });
}

FailureOr<bool> foldWhere(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> known = constInputs(ctx, 3);
  if (failed(known))
    return failure();
  SmallVector<const HostTensor *> &inputs = *known;
  if (inputs.size() != 3 || inputs[0]->dtype != DType::Bool)
    return ctx.error("expects a BOOL condition and two values");
  if (inputs[1]->dtype != inputs[2]->dtype)
    return ctx.error("the two branches have different element types");
  // Evaluate with the condition converted to the branch type so one
  // elementwise loop serves both.
  HostTensor condition = inputs[0]->castTo(inputs[1]->dtype);
  const HostTensor *operands[] = {&condition, inputs[1], inputs[2]};
  return foldElementwise(
      ctx, operands, inputs[1]->dtype,
      [](ArrayRef<double> a) { return a[0] != 0 ? a[1] : a[2]; },
      [](ArrayRef<int64_t> a) -> std::optional<int64_t> {
        return a[0] != 0 ? a[1] : a[2];
      });
}

//===----------------------------------------------------------------------===//
// Converters: elementwise
//===----------------------------------------------------------------------===//

template <typename OpTy>
LogicalResult convertBinary(NodeContext &ctx) {
  FailureOr<Value> lhs = ctx.input(0), rhs = ctx.input(1);
  if (failed(lhs) || failed(rhs))
    return failure();
  Type a = getElementTypeOrSelf(lhs->getType()),
       b = getElementTypeOrSelf(rhs->getType());
  if (a != b)
    return ctx.error("operand element types differ (" + Twine(dtypeName(
                         static_cast<int32_t>(fromMlirElementType(a)))) +
                     " vs " +
                     dtypeName(static_cast<int32_t>(fromMlirElementType(b))) +
                     ")");
  return ctx.emit<OpTy>(0, {*lhs, *rhs});
}

/// The element types a ds op computes on.
enum class ElementKind { Float, Numeric, Bool };

/// Fails with an error naming the input and the types the op takes, so that
/// a type ONNX or ds does not allow is reported in ONNX terms rather than by
/// the ds op's verifier.
LogicalResult requireElementKind(NodeContext &ctx, unsigned inputIndex,
                                 Value value, ElementKind kind) {
  Type element = getElementTypeOrSelf(value.getType());
  bool ok = kind == ElementKind::Float  ? isa<FloatType>(element)
            : kind == ElementKind::Bool ? element.isInteger(1)
                                        : !element.isInteger(1);
  if (ok)
    return success();
  const char *expected = kind == ElementKind::Float ? "f32, f16 or bf16"
                         : kind == ElementKind::Bool
                             ? "bool"
                             : "f32, f16, bf16, i64 or i32";
  return ctx.error("input " + Twine(inputIndex) + " has element type " +
                   dtypeName(static_cast<int32_t>(fromMlirElementType(element))) +
                   ", but " + ctx.node.op_type() + " takes " + expected);
}

template <typename OpTy, ElementKind Kind>
LogicalResult convertUnary(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input) || failed(requireElementKind(ctx, 0, *input, Kind)))
    return failure();
  return ctx.emit<OpTy>(0, {*input});
}

LogicalResult convertPow(NodeContext &ctx) {
  FailureOr<Value> base = ctx.input(0);
  if (failed(base))
    return failure();
  Type element = getElementTypeOrSelf(base->getType());
  if (!isa<FloatType>(element))
    return ctx.error("integer Pow is not supported; the base must be "
                     "floating point");
  Value exponent;
  if (const HostTensor *known = ctx.constInput(1)) {
    FailureOr<Value> value =
        ctx.materialize(known->castTo(fromMlirElementType(element)));
    if (failed(value))
      return failure();
    exponent = *value;
  } else {
    FailureOr<Value> value = ctx.input(1);
    if (failed(value))
      return failure();
    exponent = *value;
    auto type = cast<RankedTensorType>(exponent.getType());
    if (type.getElementType() != element) {
      FailureOr<Operation *> cast = ctx.createTyped<ds::CastOp>(
          {RankedTensorType::get(type.getShape(), element)}, {exponent});
      if (failed(cast))
        return failure();
      exponent = (*cast)->getResult(0);
    }
  }
  return ctx.emit<ds::PowOp>(0, {*base, exponent});
}

LogicalResult convertLeakyRelu(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  float alpha;
  if (failed(input) || failed(ctx.floatAttr("alpha", alpha, 0.01f)) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  return ctx.emit<ds::LeakyReluOp>(
      0, {*input}, {ctx.named("alpha", ctx.builder().getF32FloatAttr(alpha))});
}

LogicalResult convertGelu(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  std::string approximate;
  if (failed(input) ||
      failed(ctx.stringAttr("approximate", approximate, StringRef("none"))) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  std::optional<ds::GeluApproximation> kind =
      ds::symbolizeGeluApproximation(approximate);
  if (!kind)
    return ctx.error("attribute approximate = '" + approximate +
                     "' is not 'none' or 'tanh'");
  return ctx.emit<ds::GeluOp>(
      0, {*input},
      {ctx.named("approximate",
                 ds::GeluApproximationAttr::get(ctx.context(), *kind))});
}

template <ds::ComparePredicate Predicate>
LogicalResult convertCompare(NodeContext &ctx) {
  FailureOr<Value> lhs = ctx.input(0), rhs = ctx.input(1);
  if (failed(lhs) || failed(rhs))
    return failure();
  return ctx.emit<ds::CompareOp>(
      0, {*lhs, *rhs},
      {ctx.named("predicate",
                 ds::ComparePredicateAttr::get(ctx.context(), Predicate))});
}

/// ds.compare `predicate` of two values.
FailureOr<Value> emitCompare(NodeContext &ctx, ds::ComparePredicate predicate,
                             Value lhs, Value rhs) {
  FailureOr<Operation *> op = ctx.create<ds::CompareOp>(
      {lhs, rhs},
      {ctx.named("predicate",
                 ds::ComparePredicateAttr::get(ctx.context(), predicate))});
  if (failed(op))
    return failure();
  return (*op)->getResult(0);
}

FailureOr<Value> emitWhere(NodeContext &ctx, Value condition, Value lhs,
                           Value rhs) {
  FailureOr<Operation *> op = ctx.create<ds::WhereOp>({condition, lhs, rhs});
  if (failed(op))
    return failure();
  return (*op)->getResult(0);
}

/// `result` where `x` is a number and `x` where it is NaN (floats; other
/// types keep `result`): how a composition lets a NaN operand through.
FailureOr<Value> keepNaN(NodeContext &ctx, Value result, Value x) {
  if (!isa<FloatType>(getElementTypeOrSelf(x.getType())))
    return result;
  FailureOr<Value> ordered = emitCompare(ctx, ds::ComparePredicate::eq, x, x);
  if (failed(ordered))
    return failure();
  return emitWhere(ctx, *ordered, result, x);
}

/// ds has no max or min op; max(a, b) is where(a < b, b, a) and min(a, b)
/// where(b < a, b, a). That keeps a NaN in `a`; for floats a second where
/// (b == b ? r : b) keeps a NaN in `b`, so NaN propagates as in
/// numpy.maximum, ONNX's reference.
template <bool IsMax>
LogicalResult convertExtremum(NodeContext &ctx) {
  if (ctx.numInputs() == 0)
    return ctx.error("expects at least one input");
  FailureOr<Value> result = ctx.input(0);
  if (failed(result))
    return failure();
  Type element = getElementTypeOrSelf(result->getType());
  if (element.isInteger(1))
    return ctx.error("does not apply to BOOL values");
  for (unsigned i = 1, e = ctx.numInputs(); i < e; ++i) {
    FailureOr<Value> next = ctx.input(i);
    if (failed(next))
      return failure();
    if (getElementTypeOrSelf(next->getType()) != element)
      return ctx.error("operand element types differ");
    Value a = *result, b = *next;
    FailureOr<Value> less = IsMax
                                ? emitCompare(ctx, ds::ComparePredicate::lt, a, b)
                                : emitCompare(ctx, ds::ComparePredicate::lt, b, a);
    if (failed(less))
      return failure();
    result = emitWhere(ctx, *less, b, a);
    if (failed(result))
      return failure();
    result = keepNaN(ctx, *result, b);
    if (failed(result))
      return failure();
  }
  ctx.setOutput(0, *result);
  return success();
}

/// |x| as where(x < 0, -x, x); ds has no abs op.
LogicalResult convertAbs(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input))
    return failure();
  Type element = getElementTypeOrSelf(input->getType());
  DType dtype = fromMlirElementType(element);
  if (dtype == DType::Bool)
    return ctx.error("does not apply to BOOL values");
  FailureOr<Value> zero = ctx.materialize(
      isFloatDType(dtype) ? HostTensor::ofFloats(dtype, {}, {0.0})
                          : HostTensor::ofInts(dtype, {}, {0}));
  if (failed(zero))
    return failure();
  FailureOr<Value> negative =
      emitCompare(ctx, ds::ComparePredicate::lt, *input, *zero);
  FailureOr<Operation *> negated = ctx.create<ds::NegOp>({*input});
  if (failed(negative) || failed(negated))
    return failure();
  FailureOr<Value> result =
      emitWhere(ctx, *negative, (*negated)->getResult(0), *input);
  if (failed(result))
    return failure();
  ctx.setOutput(0, *result);
  return success();
}

LogicalResult convertWhere(NodeContext &ctx) {
  FailureOr<Value> c = ctx.input(0), x = ctx.input(1), y = ctx.input(2);
  if (failed(c) || failed(x) || failed(y))
    return failure();
  return ctx.emit<ds::WhereOp>(0, {*c, *x, *y});
}

LogicalResult readCastTarget(NodeContext &ctx, DType &to) {
  int64_t target;
  if (failed(ctx.intAttr("to", target)))
    return failure();
  if (!isHostFoldable(static_cast<int32_t>(target)))
    return ctx.error("cast to " + dtypeName(static_cast<int32_t>(target)) +
                     " is not supported");
  to = static_cast<DType>(target);
  return success();
}

LogicalResult convertCast(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  DType to = DType::Undefined;
  if (failed(input) || failed(readCastTarget(ctx, to)))
    return failure();
  Type element = toMlirElementType(*ctx.context(), static_cast<int32_t>(to));
  if (!element)
    return ctx.error("cast to " + dtypeName(static_cast<int32_t>(to)) +
                     " is not supported on computed values (dsopt computes "
                     "on f32, f16, bf16, i64, i32 and bool)");
  auto type = cast<RankedTensorType>(input->getType());
  if (type.getElementType() == element) {
    ctx.setOutput(0, *input);
    return success();
  }
  FailureOr<Operation *> op = ctx.createTyped<ds::CastOp>(
      {RankedTensorType::get(type.getShape(), element)}, {*input});
  if (failed(op))
    return failure();
  ctx.setOutput(0, (*op)->getResult(0));
  return success();
}

FailureOr<bool> foldCast(NodeContext &ctx) {
  DType to = DType::Undefined;
  if (failed(readCastTarget(ctx, to)))
    return failure();
  FailureOr<const HostTensor *> input = foldInput(ctx, 0);
  if (failed(input))
    return failure();
  ctx.setOutputConst(0, (*input)->castTo(to));
  return true;
}

//===----------------------------------------------------------------------===//
// Converters: linear algebra, normalization, reductions
//===----------------------------------------------------------------------===//

LogicalResult convertMatMul(NodeContext &ctx) {
  return convertBinary<ds::MatMulOp>(ctx);
}

LogicalResult convertGemm(NodeContext &ctx) {
  FailureOr<Value> a = ctx.input(0), b = ctx.input(1);
  float alpha, beta;
  int64_t transA, transB;
  if (failed(a) || failed(b) || failed(ctx.floatAttr("alpha", alpha, 1.0f)) ||
      failed(ctx.floatAttr("beta", beta, 1.0f)) ||
      failed(ctx.intAttr("transA", transA, 0)) ||
      failed(ctx.intAttr("transB", transB, 0)))
    return failure();
  SmallVector<Value> operands{*a, *b};
  if (ctx.hasInput(2)) {
    FailureOr<Value> c = ctx.input(2);
    if (failed(c))
      return failure();
    operands.push_back(*c);
  }
  auto &b0 = ctx.builder();
  SmallVector<NamedAttribute> attrs{
      ctx.named("alpha", b0.getF32FloatAttr(alpha)),
      ctx.named("beta", b0.getF32FloatAttr(beta))};
  if (transA)
    attrs.push_back(ctx.named("transpose_a", b0.getUnitAttr()));
  if (transB)
    attrs.push_back(ctx.named("transpose_b", b0.getUnitAttr()));
  return ctx.emit<ds::GemmOp>(0, operands, attrs);
}

template <typename OpTy>
LogicalResult convertSoftmax(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  int64_t axis;
  if (failed(input) || failed(ctx.intAttr("axis", axis, -1)) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  FailureOr<int64_t> normalized = ctx.normalizeAxis(
      axis, cast<RankedTensorType>(input->getType()).getRank());
  if (failed(normalized))
    return failure();
  return ctx.emit<OpTy>(
      0, {*input},
      {ctx.named("axis", ctx.builder().getI64IntegerAttr(*normalized))});
}

LogicalResult convertLayerNorm(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0), scale = ctx.input(1);
  int64_t axis, stash;
  float epsilon;
  if (failed(input) || failed(scale) || failed(ctx.intAttr("axis", axis, -1)) ||
      failed(ctx.floatAttr("epsilon", epsilon, 1e-5f)) ||
      failed(ctx.intAttr("stash_type", stash, 1)))
    return failure();
  if (stash != 1)
    return ctx.error("stash_type " + Twine(stash) +
                     " is not supported (statistics are computed in f32)");
  FailureOr<int64_t> normalized = ctx.normalizeAxis(
      axis, cast<RankedTensorType>(input->getType()).getRank());
  if (failed(normalized))
    return failure();
  SmallVector<Value> operands{*input, *scale};
  if (ctx.hasInput(2)) {
    FailureOr<Value> bias = ctx.input(2);
    if (failed(bias))
      return failure();
    operands.push_back(*bias);
  }
  FailureOr<Operation *> op = ctx.create<ds::LayerNormOp>(
      operands,
      {ctx.named("axis", ctx.builder().getI64IntegerAttr(*normalized)),
       ctx.named("epsilon", ctx.builder().getF32FloatAttr(epsilon))});
  if (failed(op))
    return failure();
  for (unsigned i = 0; i < 3; ++i)
    ctx.setOutput(i, (*op)->getResult(i));
  return success();
}

LogicalResult convertBatchNorm(NodeContext &ctx) {
  SmallVector<Value> operands;
  for (unsigned i = 0; i < 5; ++i) {
    FailureOr<Value> value = ctx.input(i);
    if (failed(value))
      return failure();
    operands.push_back(*value);
  }
  float epsilon, momentum;
  int64_t training;
  if (failed(ctx.floatAttr("epsilon", epsilon, 1e-5f)) ||
      failed(ctx.floatAttr("momentum", momentum, 0.9f)) ||
      failed(ctx.intAttr("training_mode", training, 0)))
    return failure();
  // BatchNormalization-9 (opsets 9-13) has no training_mode: listing the
  // running statistics (or the saved statistics) as outputs selects
  // training mode. PyTorch exports training-mode BatchNorm at opset 13 so.
  bool version9 = ctx.opset < 14;
  if (version9 && (ctx.hasOutput(1) || ctx.hasOutput(2) || ctx.hasOutput(3) ||
                   ctx.hasOutput(4)))
    training = 1;
  if (!version9 && ctx.numOutputs() > 3)
    return ctx.error("has " + Twine(ctx.numOutputs()) +
                     " outputs; since opset 14 BatchNormalization has at most "
                     "3 (Y, running_mean, running_var)");
  auto &b = ctx.builder();
  if (!training) {
    if (ctx.hasOutput(1) || ctx.hasOutput(2))
      return ctx.error("running mean and variance outputs exist only with "
                       "training_mode = 1");
    return ctx.emit<ds::BatchNormOp>(
        0, operands, {ctx.named("epsilon", b.getF32FloatAttr(epsilon))});
  }
  // ONNX's reference updates the running variance with the biased batch
  // variance, PyTorch's BatchNorm in train() with the unbiased one; its
  // exporter writes the same node for it, so a model PyTorch produced
  // (producer_name "pytorch") keeps PyTorch's semantics.
  bool unbiased = false;
  if (auto module = b.getInsertionBlock()->getParentOp()->getParentOfType<ModuleOp>())
    if (auto producer = module->getAttrOfType<StringAttr>("ds.producer"))
      unbiased = producer.getValue() == "pytorch" ||
                 producer.getValue().starts_with("pytorch ");
  FailureOr<Operation *> op = ctx.create<ds::BatchNormTrainOp>(
      operands, {ctx.named("epsilon", b.getF32FloatAttr(epsilon)),
                 ctx.named("momentum", b.getF32FloatAttr(momentum)),
                 ctx.named("unbiased_running_var", b.getBoolAttr(unbiased))});
  if (failed(op))
    return failure();
  for (unsigned i = 0; i < 4; ++i)
    ctx.setOutput(i, (*op)->getResult(i));
  if (ctx.hasOutput(4)) {
    // BatchNormalization-9's saved_var is the batch variance; the op keeps
    // the inverse standard deviation, so var = (1 / inv_std)^2 - epsilon.
    Value invStd = (*op)->getResult(4);
    FailureOr<Value> eps =
        ctx.materialize(HostTensor::ofFloats(DType::Float, {}, {epsilon}));
    FailureOr<Operation *> std = ctx.create<ds::ReciprocalOp>({invStd});
    if (failed(eps) || failed(std))
      return failure();
    Value stdValue = (*std)->getResult(0);
    FailureOr<Operation *> square =
        ctx.create<ds::MulOp>({stdValue, stdValue});
    if (failed(square))
      return failure();
    FailureOr<Operation *> var =
        ctx.create<ds::SubOp>({(*square)->getResult(0), *eps});
    if (failed(var))
      return failure();
    ctx.setOutput(4, (*var)->getResult(0));
  }
  return success();
}

/// The axes of a reduction, from the `axes` attribute (ReduceMean/Max before
/// opset 18) or the second input (ReduceSum since 13, all since 18), sorted
/// and normalized. Empty means "all axes" unless noop_with_empty_axes.
FailureOr<std::optional<SmallVector<int64_t>>>
reductionAxes(NodeContext &ctx, int64_t rank) {
  std::optional<SmallVector<int64_t>> attrAxes;
  if (failed(ctx.intsAttr("axes", attrAxes)))
    return failure();
  SmallVector<int64_t> axes;
  if (attrAxes && ctx.hasInput(1))
    return ctx.error("axes are given both as an attribute and as an input");
  if (attrAxes) {
    axes = *attrAxes;
  } else if (ctx.hasInput(1)) {
    FailureOr<SmallVector<int64_t>> values = ctx.constInts(1, "axes");
    if (failed(values))
      return failure();
    axes = *values;
  }
  int64_t noop;
  if (failed(ctx.intAttr("noop_with_empty_axes", noop, 0)))
    return failure();
  if (axes.empty()) {
    if (noop)
      return std::optional<SmallVector<int64_t>>();
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  for (int64_t &axis : axes) {
    FailureOr<int64_t> normalized = ctx.normalizeAxis(axis, rank, "axis");
    if (failed(normalized))
      return failure();
    axis = *normalized;
  }
  llvm::sort(axes);
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    return ctx.error("axes list an axis twice");
  return std::optional<SmallVector<int64_t>>(axes);
}

template <typename OpTy>
LogicalResult convertReduce(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  int64_t keepdims;
  if (failed(input) || failed(ctx.intAttr("keepdims", keepdims, 1)))
    return failure();
  auto type = cast<RankedTensorType>(input->getType());
  auto axes = reductionAxes(ctx, type.getRank());
  if (failed(axes))
    return failure();
  if (!*axes) {
    ctx.setOutput(0, *input); // noop_with_empty_axes
    return success();
  }
  // ReduceMax takes bool since opset 20 (an "any"); ds reductions are
  // numeric, so reduce the values as i32 and convert back, which is exact.
  bool isBool = type.getElementType().isInteger(1);
  if (isBool && !std::is_same_v<OpTy, ds::ReduceMaxOp>)
    return ctx.error("does not apply to BOOL values");
  Value operand = *input;
  Type i32 = ctx.builder().getI32Type();
  if (isBool) {
    FailureOr<Operation *> widened = ctx.createTyped<ds::CastOp>(
        {RankedTensorType::get(type.getShape(), i32)}, {operand});
    if (failed(widened))
      return failure();
    operand = (*widened)->getResult(0);
  }
  FailureOr<Operation *> op = ctx.create<OpTy>(
      {operand},
      {ctx.named("axes", ctx.builder().getDenseI64ArrayAttr(**axes)),
       ctx.named("keepdims", ctx.builder().getBoolAttr(keepdims != 0))});
  if (failed(op))
    return failure();
  Value result = (*op)->getResult(0);
  if (isBool) {
    auto reduced = cast<RankedTensorType>(result.getType());
    FailureOr<Operation *> narrowed = ctx.createTyped<ds::CastOp>(
        {RankedTensorType::get(reduced.getShape(), type.getElementType())},
        {result});
    if (failed(narrowed))
      return failure();
    result = (*narrowed)->getResult(0);
  }
  ctx.setOutput(0, result);
  return success();
}

//===----------------------------------------------------------------------===//
// Shape ops: one shape computation serves the converter and the folder
//===----------------------------------------------------------------------===//

/// The input's shape, whether it is a constant or a value.
FailureOr<SmallVector<int64_t>> inputShape(NodeContext &ctx, unsigned i) {
  if (const HostTensor *known = ctx.constInput(i))
    return SmallVector<int64_t>(known->shape);
  FailureOr<RankedTensorType> type = ctx.inputType(i);
  if (failed(type))
    return failure();
  return SmallVector<int64_t>(type->getShape());
}

using ShapeFn = FailureOr<SmallVector<int64_t>> (*)(NodeContext &,
                                                    ArrayRef<int64_t>);

FailureOr<SmallVector<int64_t>> reshapeShape(NodeContext &ctx,
                                             ArrayRef<int64_t> input) {
  FailureOr<SmallVector<int64_t>> requested = ctx.constInts(1, "shape");
  int64_t allowZero;
  if (failed(requested) || failed(ctx.intAttr("allowzero", allowZero, 0)))
    return failure();
  return reshapeTarget(ctx, input, *requested, allowZero != 0);
}

FailureOr<SmallVector<int64_t>> axesInputOrAttr(NodeContext &ctx,
                                                bool &present) {
  std::optional<SmallVector<int64_t>> attrAxes;
  if (failed(ctx.intsAttr("axes", attrAxes)))
    return failure();
  if (attrAxes && ctx.hasInput(1))
    return ctx.error("axes are given both as an attribute and as an input");
  present = attrAxes || ctx.hasInput(1);
  if (attrAxes)
    return *attrAxes;
  if (ctx.hasInput(1))
    return ctx.constInts(1, "axes");
  return SmallVector<int64_t>();
}

FailureOr<SmallVector<int64_t>> squeezeShape(NodeContext &ctx,
                                             ArrayRef<int64_t> input) {
  bool present;
  FailureOr<SmallVector<int64_t>> axes = axesInputOrAttr(ctx, present);
  if (failed(axes))
    return failure();
  int64_t rank = input.size();
  SmallVector<bool> drop(rank, false);
  if (!present) {
    for (int64_t d = 0; d < rank; ++d)
      drop[d] = input[d] == 1;
  }
  for (int64_t axis : *axes) {
    FailureOr<int64_t> normalized = ctx.normalizeAxis(axis, rank);
    if (failed(normalized))
      return failure();
    if (input[*normalized] != 1)
      return ctx.error("cannot squeeze axis " + Twine(axis) + " of shape " +
                       shapeString(input) + ": its size is not 1");
    drop[*normalized] = true;
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d)
    if (!drop[d])
      shape.push_back(input[d]);
  return shape;
}

FailureOr<SmallVector<int64_t>> unsqueezeShape(NodeContext &ctx,
                                               ArrayRef<int64_t> input) {
  bool present;
  FailureOr<SmallVector<int64_t>> axes = axesInputOrAttr(ctx, present);
  if (failed(axes))
    return failure();
  if (!present || axes->empty())
    return ctx.error("axes are required");
  int64_t rank = input.size() + axes->size();
  SmallVector<bool> inserted(rank, false);
  for (int64_t axis : *axes) {
    FailureOr<int64_t> normalized = ctx.normalizeAxis(axis, rank);
    if (failed(normalized))
      return failure();
    if (inserted[*normalized])
      return ctx.error("axes list axis " + Twine(*normalized) + " twice");
    inserted[*normalized] = true;
  }
  SmallVector<int64_t> shape;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d)
    shape.push_back(inserted[d] ? 1 : input[next++]);
  return shape;
}

FailureOr<SmallVector<int64_t>> flattenShape(NodeContext &ctx,
                                             ArrayRef<int64_t> input) {
  int64_t axis, rank = input.size();
  if (failed(ctx.intAttr("axis", axis, 1)))
    return failure();
  if (axis < -rank || axis > rank)
    return ctx.error("axis " + Twine(axis) + " is out of range for rank " +
                     Twine(rank));
  if (axis < 0)
    axis += rank;
  return SmallVector<int64_t>{product(input.take_front(axis)),
                              product(input.drop_front(axis))};
}

FailureOr<SmallVector<int64_t>> expandShape(NodeContext &ctx,
                                            ArrayRef<int64_t> input) {
  FailureOr<SmallVector<int64_t>> requested = ctx.constInts(1, "shape");
  if (failed(requested))
    return failure();
  for (int64_t d : *requested)
    if (d < 0)
      return ctx.error("shape " + shapeString(*requested) +
                       " has a negative size");
  FailureOr<SmallVector<int64_t>> shape = broadcastShapes(input, *requested);
  if (failed(shape))
    return ctx.error("cannot expand " + shapeString(input) + " to " +
                     shapeString(*requested));
  return shape;
}

/// Converter for reshape-like ops: no op at all if the shape is unchanged.
template <ShapeFn Compute>
LogicalResult convertReshapeLike(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input))
    return failure();
  auto type = cast<RankedTensorType>(input->getType());
  FailureOr<SmallVector<int64_t>> shape = Compute(ctx, type.getShape());
  if (failed(shape))
    return failure();
  if (ArrayRef<int64_t>(*shape) == type.getShape()) {
    ctx.setOutput(0, *input);
    return success();
  }
  FailureOr<Operation *> op = ctx.createTyped<ds::ReshapeOp>(
      {RankedTensorType::get(*shape, type.getElementType())}, {*input});
  if (failed(op))
    return failure();
  ctx.setOutput(0, (*op)->getResult(0));
  return success();
}

template <ShapeFn Compute>
FailureOr<bool> foldReshapeLike(NodeContext &ctx) {
  FailureOr<const HostTensor *> known = foldInput(ctx, 0);
  if (failed(known))
    return failure();
  const HostTensor *input = *known;
  FailureOr<SmallVector<int64_t>> shape = Compute(ctx, input->shape);
  if (failed(shape))
    return failure();
  ctx.setOutputConst(0, input->reshaped(*shape));
  return true;
}

LogicalResult convertExpand(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input))
    return failure();
  auto type = cast<RankedTensorType>(input->getType());
  FailureOr<SmallVector<int64_t>> shape = expandShape(ctx, type.getShape());
  if (failed(shape))
    return failure();
  if (ArrayRef<int64_t>(*shape) == type.getShape()) {
    ctx.setOutput(0, *input);
    return success();
  }
  FailureOr<Operation *> op = ctx.createTyped<ds::BroadcastToOp>(
      {RankedTensorType::get(*shape, type.getElementType())}, {*input});
  if (failed(op))
    return failure();
  ctx.setOutput(0, (*op)->getResult(0));
  return success();
}

FailureOr<bool> foldExpand(NodeContext &ctx) {
  FailureOr<const HostTensor *> known = foldInput(ctx, 0);
  if (failed(known))
    return failure();
  const HostTensor *input = *known;
  FailureOr<SmallVector<int64_t>> shape = expandShape(ctx, input->shape);
  if (failed(shape))
    return failure();
  if (input->splat || input->numElements() == 1) {
    HostTensor result = HostTensor::splatOf(input->dtype, *shape,
                                            input->floatAt(0));
    if (!result.isFloat())
      result.ints[0] = input->intAt(0);
    ctx.setOutputConst(0, std::move(result));
    return true;
  }
  // Broadcasting the input against a tensor of the target shape through
  // the elementwise evaluator expands it.
  HostTensor target = HostTensor::splatOf(input->dtype, *shape, 0);
  const HostTensor *operands[] = {input, &target};
  return foldElementwise(
      ctx, operands, input->dtype, [](ArrayRef<double> a) { return a[0]; },
      [](ArrayRef<int64_t> a) -> std::optional<int64_t> { return a[0]; });
}

LogicalResult convertTranspose(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  std::optional<SmallVector<int64_t>> perm;
  if (failed(input) || failed(ctx.intsAttr("perm", perm)))
    return failure();
  int64_t rank = cast<RankedTensorType>(input->getType()).getRank();
  if (!perm) {
    perm.emplace();
    for (int64_t d = rank - 1; d >= 0; --d)
      perm->push_back(d);
  }
  return ctx.emit<ds::TransposeOp>(
      0, {*input}, {ctx.named("perm", ctx.builder().getDenseI64ArrayAttr(*perm))});
}

FailureOr<bool> foldTranspose(NodeContext &ctx) {
  FailureOr<const HostTensor *> known = foldInput(ctx, 0);
  if (failed(known))
    return failure();
  const HostTensor *input = *known;
  std::optional<SmallVector<int64_t>> perm;
  if (failed(ctx.intsAttr("perm", perm)))
    return failure();
  int64_t rank = input->rank();
  if (!perm) {
    perm.emplace();
    for (int64_t d = rank - 1; d >= 0; --d)
      perm->push_back(d);
  }
  SmallVector<bool> seen(rank, false);
  if (static_cast<int64_t>(perm->size()) != rank)
    return ctx.error("perm has " + Twine(perm->size()) +
                     " entries for rank " + Twine(rank));
  for (int64_t axis : *perm) {
    if (axis < 0 || axis >= rank || seen[axis])
      return ctx.error("perm is not a permutation of the axes");
    seen[axis] = true;
  }
  SmallVector<int64_t> shape;
  for (int64_t axis : *perm)
    shape.push_back(input->shape[axis]);
  if (input->splat) {
    ctx.setOutputConst(0, input->reshaped(shape));
    return true;
  }
  if (input->numElements() > kMaxFoldElements)
    return false;
  SmallVector<int64_t> inStrides = stridesOf(input->shape);
  HostTensor result = *input;
  result.shape = shape;
  int64_t n = input->numElements();
  SmallVector<int64_t> counter(rank, 0);
  for (int64_t out = 0; out < n; ++out) {
    int64_t in = 0;
    for (int64_t d = 0; d < rank; ++d)
      in += counter[d] * inStrides[(*perm)[d]];
    if (result.isFloat())
      result.floats[out] = input->floats[in];
    else
      result.ints[out] = input->ints[in];
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++counter[d] < shape[d])
        break;
      counter[d] = 0;
    }
  }
  ctx.setOutputConst(0, std::move(result));
  return true;
}

FailureOr<int64_t> concatAxis(NodeContext &ctx, int64_t rank) {
  int64_t axis;
  if (failed(ctx.intAttr("axis", axis)))
    return failure();
  return ctx.normalizeAxis(axis, rank);
}

LogicalResult convertConcat(NodeContext &ctx) {
  SmallVector<Value> inputs;
  for (unsigned i = 0, e = ctx.numInputs(); i < e; ++i) {
    FailureOr<Value> value = ctx.input(i);
    if (failed(value))
      return failure();
    inputs.push_back(*value);
  }
  if (inputs.empty())
    return ctx.error("needs at least one input");
  auto first = cast<RankedTensorType>(inputs[0].getType());
  FailureOr<int64_t> axis = concatAxis(ctx, first.getRank());
  if (failed(axis))
    return failure();
  // Check every piece, also those dropped below.
  for (Value input : inputs) {
    auto type = cast<RankedTensorType>(input.getType());
    bool compatible = type.getRank() == first.getRank();
    for (int64_t d = 0; compatible && d < first.getRank(); ++d)
      compatible = d == *axis || type.getDimSize(d) == first.getDimSize(d);
    if (!compatible)
      return ctx.error("inputs " + shapeString(first.getShape()) + " and " +
                       shapeString(type.getShape()) + " differ outside axis " +
                       Twine(*axis));
  }
  // Zero-size pieces contribute nothing. When one piece is not empty, the
  // others are empty along the axis, so dropping them keeps the shape.
  SmallVector<Value> pieces;
  for (Value input : inputs)
    if (cast<RankedTensorType>(input.getType()).getNumElements() != 0)
      pieces.push_back(input);
  if (pieces.empty())
    pieces = inputs;
  if (pieces.size() == 1) {
    ctx.setOutput(0, pieces[0]);
    return success();
  }
  return ctx.emit<ds::ConcatOp>(
      0, pieces, {ctx.named("axis", ctx.builder().getI64IntegerAttr(*axis))});
}

FailureOr<bool> foldConcat(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> known = constInputs(ctx);
  if (failed(known))
    return failure();
  SmallVector<const HostTensor *> &inputs = *known;
  if (inputs.empty())
    return ctx.error("needs at least one input");
  FailureOr<int64_t> axis = concatAxis(ctx, inputs[0]->rank());
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape = inputs[0]->shape;
  shape[*axis] = 0;
  for (const HostTensor *input : inputs) {
    if (input->dtype != inputs[0]->dtype || input->rank() != inputs[0]->rank())
      return ctx.error("inputs differ in element type or rank");
    for (int64_t d = 0; d < input->rank(); ++d)
      if (d != *axis && input->shape[d] != inputs[0]->shape[d])
        return ctx.error("inputs " + shapeString(inputs[0]->shape) + " and " +
                         shapeString(input->shape) + " differ outside axis " +
                         Twine(*axis));
    shape[*axis] += input->shape[*axis];
  }
  if (product(shape) > kMaxFoldElements)
    return false;
  int64_t outer = product(ArrayRef<int64_t>(shape).take_front(*axis));
  HostTensor result;
  result.dtype = inputs[0]->dtype;
  result.shape = shape;
  for (int64_t o = 0; o < outer; ++o) {
    for (const HostTensor *input : inputs) {
      int64_t chunk =
          product(ArrayRef<int64_t>(input->shape).drop_front(*axis));
      for (int64_t k = 0; k < chunk; ++k) {
        if (result.isFloat())
          result.floats.push_back(input->floatAt(o * chunk + k));
        else
          result.ints.push_back(input->intAt(o * chunk + k));
      }
    }
  }
  ctx.setOutputConst(0, std::move(result));
  return true;
}

LogicalResult convertSplit(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  int64_t axis;
  if (failed(input) || failed(ctx.intAttr("axis", axis, 0)))
    return failure();
  auto type = cast<RankedTensorType>(input->getType());
  FailureOr<int64_t> normalized = ctx.normalizeAxis(axis, type.getRank());
  if (failed(normalized))
    return failure();
  int64_t dim = type.getDimSize(*normalized);
  std::optional<SmallVector<int64_t>> sizes;
  if (failed(ctx.intsAttr("split", sizes)))
    return failure();
  if (sizes && ctx.hasInput(1))
    return ctx.error("split sizes are given both as an attribute and as an "
                     "input");
  if (ctx.hasInput(1)) {
    FailureOr<SmallVector<int64_t>> values = ctx.constInts(1, "split");
    if (failed(values))
      return failure();
    // An empty sizes tensor stands for "not given" (as in onnxruntime).
    if (!values->empty())
      sizes = *values;
  }
  int64_t outputs = ctx.numOutputs();
  if (!sizes) {
    int64_t numOutputs;
    if (failed(ctx.intAttr("num_outputs", numOutputs, outputs)))
      return failure();
    if (numOutputs != outputs || outputs < 1)
      return ctx.error("num_outputs = " + Twine(numOutputs) + " but the node "
                       "has " + Twine(outputs) + " outputs");
    // Equal parts; since opset 18 the last may be smaller.
    bool hasNumOutputs = ctx.findAttr("num_outputs") != nullptr;
    int64_t part = hasNumOutputs ? llvm::divideCeil(dim, outputs)
                                 : dim / outputs;
    if (!hasNumOutputs && dim % outputs != 0)
      return ctx.error("axis " + Twine(*normalized) + " of size " + Twine(dim) +
                       " does not split evenly into " + Twine(outputs) +
                       " outputs");
    sizes.emplace();
    for (int64_t i = 0, left = dim; i < outputs; ++i) {
      sizes->push_back(std::min(part, left));
      left -= sizes->back();
    }
  }
  if (static_cast<int64_t>(sizes->size()) != outputs)
    return ctx.error(Twine(sizes->size()) + " split sizes for " +
                     Twine(outputs) + " outputs");
  int64_t total = 0;
  SmallVector<Type> types;
  for (int64_t size : *sizes) {
    if (size < 0)
      return ctx.error("split sizes must be non-negative");
    total += size;
    SmallVector<int64_t> shape(type.getShape());
    shape[*normalized] = size;
    types.push_back(RankedTensorType::get(shape, type.getElementType()));
  }
  if (total != dim)
    return ctx.error("split sizes " + shapeString(*sizes) + " sum to " +
                     Twine(total) + " but axis " + Twine(*normalized) +
                     " has size " + Twine(dim));
  FailureOr<Operation *> op = ctx.createTyped<ds::SplitOp>(
      types, {*input},
      {ctx.named("axis", ctx.builder().getI64IntegerAttr(*normalized))});
  if (failed(op))
    return failure();
  for (int64_t i = 0; i < outputs; ++i)
    ctx.setOutput(i, (*op)->getResult(i));
  return success();
}

LogicalResult convertSlice(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input))
    return failure();
  auto type = cast<RankedTensorType>(input->getType());
  FailureOr<SliceSpec> spec = sliceSpec(ctx, type.getShape());
  if (failed(spec))
    return failure();
  if (ArrayRef<int64_t>(spec->sizes) == type.getShape() &&
      llvm::all_of(spec->strides, [](int64_t s) { return s == 1; })) {
    ctx.setOutput(0, *input);
    return success();
  }
  auto &b = ctx.builder();
  FailureOr<Operation *> op = ctx.createTyped<ds::SliceOp>(
      {RankedTensorType::get(spec->sizes, type.getElementType())}, {*input},
      {ctx.named("offsets", b.getDenseI64ArrayAttr(spec->offsets)),
       ctx.named("strides", b.getDenseI64ArrayAttr(spec->strides))});
  if (failed(op))
    return failure();
  ctx.setOutput(0, (*op)->getResult(0));
  return success();
}

FailureOr<bool> foldSlice(NodeContext &ctx) {
  FailureOr<const HostTensor *> known = foldInput(ctx, 0);
  if (failed(known))
    return failure();
  const HostTensor *input = *known;
  FailureOr<SliceSpec> spec = sliceSpec(ctx, input->shape);
  if (failed(spec))
    return failure();
  if (input->splat) {
    ctx.setOutputConst(0, input->reshaped(spec->sizes));
    return true;
  }
  int64_t n = product(spec->sizes);
  if (n > kMaxFoldElements)
    return false;
  SmallVector<int64_t> inStrides = stridesOf(input->shape);
  HostTensor result;
  result.dtype = input->dtype;
  result.shape = spec->sizes;
  int64_t rank = input->rank();
  SmallVector<int64_t> counter(rank, 0);
  for (int64_t out = 0; out < n; ++out) {
    int64_t in = 0;
    for (int64_t d = 0; d < rank; ++d)
      in += (spec->offsets[d] + counter[d] * spec->strides[d]) * inStrides[d];
    if (result.isFloat())
      result.floats.push_back(input->floats[in]);
    else
      result.ints.push_back(input->ints[in]);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++counter[d] < spec->sizes[d])
        break;
      counter[d] = 0;
    }
  }
  ctx.setOutputConst(0, std::move(result));
  return true;
}

LogicalResult convertGather(NodeContext &ctx) {
  FailureOr<Value> data = ctx.input(0);
  int64_t axis;
  if (failed(data) || failed(ctx.intAttr("axis", axis, 0)))
    return failure();
  auto type = cast<RankedTensorType>(data->getType());
  FailureOr<int64_t> normalized = ctx.normalizeAxis(axis, type.getRank());
  if (failed(normalized))
    return failure();
  // Indices known at compile time are checked now rather than at run time.
  if (const HostTensor *indices = ctx.constInput(1)) {
    int64_t dim = type.getDimSize(*normalized);
    for (int64_t i = 0, n = indices->splat ? 1 : indices->numElements(); i < n;
         ++i) {
      int64_t index = indices->intAt(i);
      if (index < -dim || index >= dim)
        return ctx.error("index " + Twine(index) +
                         " is out of range for axis " + Twine(*normalized) +
                         " of size " + Twine(dim));
    }
  }
  FailureOr<Value> indices = ctx.input(1);
  if (failed(indices))
    return failure();
  return ctx.emit<ds::GatherOp>(
      0, {*data, *indices},
      {ctx.named("axis", ctx.builder().getI64IntegerAttr(*normalized))});
}

FailureOr<bool> foldGather(NodeContext &ctx) {
  FailureOr<const HostTensor *> knownData = foldInput(ctx, 0),
                                knownIndices = foldInput(ctx, 1);
  if (failed(knownData) || failed(knownIndices))
    return failure();
  const HostTensor *data = *knownData, *indices = *knownIndices;
  int64_t axis;
  if (failed(ctx.intAttr("axis", axis, 0)))
    return failure();
  if (data->rank() == 0)
    return ctx.error("data must have rank >= 1");
  FailureOr<int64_t> normalized = ctx.normalizeAxis(axis, data->rank());
  if (failed(normalized))
    return failure();
  if (indices->isFloat())
    return ctx.error("indices must be integers");
  int64_t dim = data->shape[*normalized];
  SmallVector<int64_t> shape(ArrayRef<int64_t>(data->shape).take_front(*normalized));
  llvm::append_range(shape, indices->shape);
  llvm::append_range(shape,
                     ArrayRef<int64_t>(data->shape).drop_front(*normalized + 1));
  int64_t n = product(shape);
  if (n > kMaxFoldElements)
    return false;
  int64_t outer = product(ArrayRef<int64_t>(data->shape).take_front(*normalized));
  int64_t inner =
      product(ArrayRef<int64_t>(data->shape).drop_front(*normalized + 1));
  int64_t count = indices->numElements();
  HostTensor result;
  result.dtype = data->dtype;
  result.shape = shape;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < count; ++i) {
      int64_t index = indices->intAt(i);
      if (index < -dim || index >= dim)
        return ctx.error("index " + Twine(index) + " is out of range for axis " +
                         Twine(*normalized) + " of size " + Twine(dim));
      if (index < 0)
        index += dim;
      for (int64_t k = 0; k < inner; ++k) {
        int64_t at = (o * dim + index) * inner + k;
        if (result.isFloat())
          result.floats.push_back(data->floatAt(at));
        else
          result.ints.push_back(data->intAt(at));
      }
    }
  }
  ctx.setOutputConst(0, std::move(result));
  return true;
}

LogicalResult triluParams(NodeContext &ctx, int64_t &upper, int64_t &k) {
  if (failed(ctx.intAttr("upper", upper, 1)))
    return failure();
  k = 0;
  if (ctx.hasInput(1)) {
    FailureOr<SmallVector<int64_t>> values = ctx.constInts(1, "k");
    if (failed(values))
      return failure();
    if (values->size() != 1)
      return ctx.error("k must be a scalar");
    k = (*values)[0];
  }
  return success();
}

LogicalResult convertTrilu(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  int64_t upper, k;
  if (failed(input) || failed(triluParams(ctx, upper, k)))
    return failure();
  auto &b = ctx.builder();
  return ctx.emit<ds::TriluOp>(0, {*input},
                               {ctx.named("upper", b.getBoolAttr(upper != 0)),
                                ctx.named("k", b.getI64IntegerAttr(k))});
}

FailureOr<bool> foldTrilu(NodeContext &ctx) {
  FailureOr<const HostTensor *> known = foldInput(ctx, 0);
  if (failed(known))
    return failure();
  const HostTensor *input = *known;
  int64_t upper, k;
  if (failed(triluParams(ctx, upper, k)))
    return failure();
  if (input->rank() < 2)
    return ctx.error("input must have rank >= 2");
  if (input->numElements() > kMaxFoldElements)
    return false;
  HostTensor result = input->expanded();
  int64_t rows = input->shape[input->rank() - 2];
  int64_t cols = input->shape[input->rank() - 1];
  for (int64_t i = 0, n = result.numElements(); i < n; ++i) {
    int64_t row = (i / cols) % rows, col = i % cols;
    bool keep = upper ? col - row >= k : col - row <= k;
    if (keep)
      continue;
    if (result.isFloat())
      result.floats[i] = 0;
    else
      result.ints[i] = 0;
  }
  ctx.setOutputConst(0, std::move(result));
  return true;
}

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

FailureOr<bool> foldConstant(NodeContext &ctx) {
  if (ctx.node.attribute_size() != 1)
    return ctx.error("needs exactly one value attribute, got " +
                     Twine(ctx.node.attribute_size()));
  const onnx::AttributeProto &attr = ctx.node.attribute(0);
  StringRef name = attr.name();
  if (name == "value") {
    // Checked here so that the error names the node.
    if (attr.has_t() && !isHostFoldable(attr.t().data_type()))
      return ctx.error("a constant of element type " +
                       dtypeName(attr.t().data_type()) +
                       " is not supported (dsopt computes on numbers and "
                       "bool)");
    // Too large to fold (a baked attention mask): data like an initializer,
    // referenced where it is stored and loaded by the runtime.
    if (attr.has_t() && (attr.type() == onnx::AttributeProto::TENSOR ||
                         attr.type() == onnx::AttributeProto::UNDEFINED)) {
      int64_t count = 1;
      bool overflow = false;
      for (int64_t dim : attr.t().dims())
        overflow |= dim < 0 || llvm::MulOverflow(count, dim, count);
      if (overflow || count > kMaxFoldElements) {
        if (failed(ctx.setOutputData(0, attr.t())))
          return failure();
        return true;
      }
    }
    FailureOr<HostTensor> value = ctx.tensorAttr(attr);
    if (failed(value))
      return failure();
    ctx.setOutputConst(0, std::move(*value));
  } else if (name == "value_float") {
    float v;
    if (failed(ctx.floatAttr(name, v)))
      return failure();
    ctx.setOutputConst(0, HostTensor::ofFloats(DType::Float, {}, {v}));
  } else if (name == "value_floats") {
    ctx.setOutputConst(
        0, HostTensor::ofFloats(DType::Float,
                                {static_cast<int64_t>(attr.floats_size())},
                                std::vector<double>(attr.floats().begin(),
                                                    attr.floats().end())));
  } else if (name == "value_int") {
    int64_t v;
    if (failed(ctx.intAttr(name, v)))
      return failure();
    ctx.setOutputConst(0, HostTensor::ofInts(DType::Int64, {}, {v}));
  } else if (name == "value_ints") {
    ctx.setOutputConst(0, HostTensor::shapeVector(SmallVector<int64_t>(
                              attr.ints().begin(), attr.ints().end())));
  } else {
    return ctx.error("attribute '" + name +
                     "' is not supported (strings and sparse tensors cannot "
                     "be computed on)");
  }
  return true;
}

FailureOr<bool> foldConstantOfShape(NodeContext &ctx) {
  FailureOr<SmallVector<int64_t>> shape = ctx.constInts(0, "shape");
  if (failed(shape))
    return failure();
  int64_t count = 1;
  for (int64_t d : *shape)
    if (d < 0 || llvm::MulOverflow(count, d, count))
      return ctx.error("shape " + shapeString(*shape) +
                       " is negative or overflows 64 bits");
  DType dtype = DType::Float;
  double value = 0;
  int64_t intValue = 0;
  if (const onnx::AttributeProto *attr = ctx.findAttr("value")) {
    if (attr->has_t() && !isHostFoldable(attr->t().data_type()))
      return ctx.error("value of element type " +
                       dtypeName(attr->t().data_type()) +
                       " is not supported (dsopt computes on numbers and "
                       "bool)");
    FailureOr<HostTensor> tensor = ctx.tensorAttr(*attr);
    if (failed(tensor))
      return failure();
    if (tensor->numElements() != 1)
      return ctx.error("value must hold exactly one element");
    dtype = tensor->dtype;
    value = tensor->floatAt(0);
    intValue = tensor->intAt(0);
  }
  HostTensor result = HostTensor::splatOf(dtype, *shape, value);
  if (!result.isFloat())
    result.ints[0] = wrapToInt(dtype, intValue);
  ctx.setOutputConst(0, std::move(result));
  return true;
}

FailureOr<bool> foldRange(NodeContext &ctx) {
  // Range's inputs act as attributes, so float initializers count as known.
  const HostTensor *operands[3];
  static const char *const names[] = {"start", "limit", "delta"};
  for (unsigned i = 0; i < 3; ++i) {
    if (!ctx.hasInput(i))
      return ctx.error("input " + Twine(i) + " ('" + names[i] +
                       "') is required but missing");
    operands[i] = ctx.constInput(i, /*readParameters=*/true);
    if (!operands[i])
      return ctx.error("input " + Twine(i) + " ('" + names[i] + "', value '" +
                       ctx.node.input(i) +
                       "') must be known at compile time; dsopt needs static "
                       "shapes");
  }
  const HostTensor *start = operands[0], *limit = operands[1],
                   *delta = operands[2];
  for (const HostTensor *t : {start, limit, delta})
    if (t->numElements() != 1 || t->dtype != start->dtype)
      return ctx.error("start, limit and delta must be scalars of one type");
  int64_t n;
  if (start->isFloat()) {
    double d = delta->floatAt(0);
    if (d == 0 || std::isnan(d))
      return ctx.error("delta must be non-zero");
    double count = std::ceil((limit->floatAt(0) - start->floatAt(0)) / d);
    if (std::isnan(count))
      return ctx.error("start and limit must be finite");
    if (count > static_cast<double>(kMaxFoldElements) * 16)
      return ctx.error("Range of " + std::to_string(count) +
                       " elements is too large");
    n = count > 0 ? static_cast<int64_t>(count) : 0;
  } else {
    int64_t d = delta->intAt(0);
    if (d == 0)
      return ctx.error("delta must be non-zero");
    // 128 bits: limit - start and the division cannot overflow.
    __int128 span = static_cast<__int128>(limit->intAt(0)) - start->intAt(0);
    __int128 count = span / d + ((span % d != 0) && ((span < 0) == (d < 0)));
    if (count > kMaxFoldElements * 16)
      return ctx.error("Range of " + std::to_string(static_cast<double>(count)) +
                       " elements is too large");
    n = std::max<int64_t>(0, static_cast<int64_t>(count));
  }
  HostTensor result;
  result.dtype = start->dtype;
  result.shape = {n};
  for (int64_t i = 0; i < n; ++i) {
    if (result.isFloat())
      result.floats.push_back(roundToFloat(
          result.dtype, start->floatAt(0) + i * delta->floatAt(0)));
    else
      result.ints.push_back(
          wrapToInt(result.dtype, start->intAt(0) + i * delta->intAt(0)));
  }
  ctx.setOutputConst(0, std::move(result));
  return true;
}

/// Converter of an op that exists only as a constant (ConstantOfShape,
/// Range). The importer folds a node only when its inputs are known without
/// reading float initializers; the folder reads its inputs itself (float
/// initializers included) and names the input that is not known.
template <FoldFn Fold>
LogicalResult convertByFolding(NodeContext &ctx) {
  FailureOr<bool> folded = Fold(ctx);
  if (failed(folded))
    return failure();
  if (!*folded)
    return ctx.error("the result is too large to compute at compile time");
  return success();
}

FailureOr<bool> foldShape(NodeContext &ctx) {
  FailureOr<SmallVector<int64_t>> shape = inputShape(ctx, 0);
  int64_t start, end;
  if (failed(shape) || failed(ctx.intAttr("start", start, 0)))
    return failure();
  int64_t rank = shape->size();
  if (failed(ctx.intAttr("end", end, rank)))
    return failure();
  auto clampIndex = [rank](int64_t i) {
    if (i < 0)
      i += rank;
    return std::clamp<int64_t>(i, 0, rank);
  };
  start = clampIndex(start);
  end = clampIndex(end);
  SmallVector<int64_t> dims;
  for (int64_t d = start; d < end; ++d)
    dims.push_back((*shape)[d]);
  ctx.setOutputConst(0, HostTensor::shapeVector(dims));
  return true;
}

FailureOr<bool> foldSize(NodeContext &ctx) {
  FailureOr<SmallVector<int64_t>> shape = inputShape(ctx, 0);
  if (failed(shape))
    return failure();
  ctx.setOutputConst(0, HostTensor::ofInts(DType::Int64, {}, {product(*shape)}));
  return true;
}

LogicalResult convertIdentity(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input))
    return failure();
  ctx.setOutput(0, *input);
  return success();
}

FailureOr<bool> foldIdentity(NodeContext &ctx) {
  FailureOr<const HostTensor *> input = foldInput(ctx, 0);
  if (failed(input))
    return failure();
  ctx.setOutputConst(0, **input);
  return true;
}

//===----------------------------------------------------------------------===//
// Dropout, losses
//===----------------------------------------------------------------------===//

LogicalResult convertDropout(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input))
    return failure();
  // ratio and training_mode decide which op dsopt emits, so they must be
  // known when compiling.
  auto scalarInput = [&](unsigned i, StringRef what) -> const HostTensor * {
    const HostTensor *value = ctx.constInput(i, /*readParameters=*/true);
    if (!value || value->numElements() != 1) {
      (void)ctx.error("input " + Twine(i) + " ('" + what + "', value '" +
                      ctx.node.input(i) +
                      "') must be a scalar known at compile time");
      return nullptr;
    }
    return value;
  };
  double ratio = 0.5;
  bool training = false;
  if (ctx.hasInput(1)) {
    const HostTensor *value = scalarInput(1, "ratio");
    if (!value)
      return failure();
    ratio = value->floatAt(0);
  }
  if (ctx.hasInput(2)) {
    const HostTensor *value = scalarInput(2, "training_mode");
    if (!value)
      return failure();
    training = value->intAt(0) != 0;
  }
  if (!(ratio >= 0 && ratio < 1))
    return ctx.error("ratio " + numberString(ratio) + " is not in [0, 1)");
  auto type = cast<RankedTensorType>(input->getType());
  if (!training || ratio == 0) {
    ctx.setOutput(0, *input);
    if (ctx.hasOutput(1)) {
      FailureOr<Value> mask = ctx.materialize(
          HostTensor::splatOf(DType::Bool, type.getShape(), 1));
      if (failed(mask))
        return failure();
      ctx.setOutput(1, *mask);
    }
    return success();
  }
  int64_t seed;
  // Without a seed attribute, derive one from the node so every dropout
  // draws its own mask and compilation stays deterministic. xxh3 is stable
  // across runs and LLVM versions; llvm::hash_value is not (it is seeded
  // per process when LLVM has ABI-breaking checks).
  if (failed(ctx.intAttr("seed", seed,
                         static_cast<int64_t>(llvm::xxh3_64bits(
                             ctx.node.name() + "/" + ctx.node.output(0)) &
                                              0x7fffffff))))
    return failure();
  auto &b = ctx.builder();
  FailureOr<Operation *> op = ctx.create<ds::DropoutOp>(
      {*input}, {ctx.named("ratio", b.getF32FloatAttr(ratio)),
                 ctx.named("seed", b.getI64IntegerAttr(seed))});
  if (failed(op))
    return failure();
  ctx.setOutput(0, (*op)->getResult(0));
  ctx.setOutput(1, (*op)->getResult(1));
  return success();
}

template <typename OpTy>
LogicalResult convertLoss(NodeContext &ctx) {
  SmallVector<Value> operands;
  for (unsigned i = 0; i < 2; ++i) {
    FailureOr<Value> value = ctx.input(i);
    if (failed(value))
      return failure();
    operands.push_back(*value);
  }
  if (ctx.hasInput(2)) {
    FailureOr<Value> weights = ctx.input(2);
    if (failed(weights))
      return failure();
    operands.push_back(*weights);
  }
  std::string reduction;
  if (failed(ctx.stringAttr("reduction", reduction, StringRef("mean"))))
    return failure();
  std::optional<ds::LossReduction> kind = ds::symbolizeLossReduction(reduction);
  if (!kind)
    return ctx.error("reduction '" + reduction +
                     "' is not 'none', 'sum' or 'mean'");
  SmallVector<NamedAttribute> attrs{ctx.named(
      "reduction", ds::LossReductionAttr::get(ctx.context(), *kind))};
  if (ctx.findAttr("ignore_index")) {
    int64_t ignore;
    if (failed(ctx.intAttr("ignore_index", ignore)))
      return failure();
    attrs.push_back(
        ctx.named("ignore_index", ctx.builder().getI64IntegerAttr(ignore)));
  }
  FailureOr<Operation *> op = ctx.create<OpTy>(operands, attrs);
  if (failed(op))
    return failure();
  for (unsigned i = 0; i < (*op)->getNumResults(); ++i)
    ctx.setOutput(i, (*op)->getResult(i));
  return success();
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

/// Resolves kernel, strides, dilations and explicit pads (auto_pad included)
/// of a window op over `spatial` axes of `inputShape`.
struct Window {
  SmallVector<int64_t> kernel, strides, dilations, pads;
};

FailureOr<Window> readWindow(NodeContext &ctx, ArrayRef<int64_t> inputShape,
                             std::optional<SmallVector<int64_t>> kernel,
                             bool allowDilations) {
  int64_t spatial = static_cast<int64_t>(inputShape.size()) - 2;
  if (spatial < 1)
    return ctx.error("input must be [N, C, D...], got " +
                     shapeString(inputShape));
  Window window;
  std::optional<SmallVector<int64_t>> strides, dilations, pads;
  std::string autoPad;
  if (failed(ctx.intsAttr("strides", strides)) ||
      failed(ctx.intsAttr("dilations", dilations)) ||
      failed(ctx.intsAttr("pads", pads)) ||
      failed(ctx.stringAttr("auto_pad", autoPad, StringRef("NOTSET"))))
    return failure();
  if (!kernel || static_cast<int64_t>(kernel->size()) != spatial)
    return ctx.error("kernel_shape must have " + Twine(spatial) +
                     " entries for " + Twine(spatial) + " spatial axes");
  window.kernel = *kernel;
  window.strides = strides.value_or(SmallVector<int64_t>(spatial, 1));
  window.dilations = dilations.value_or(SmallVector<int64_t>(spatial, 1));
  if (!allowDilations &&
      llvm::any_of(window.dilations, [](int64_t d) { return d != 1; }))
    return ctx.error("dilations other than 1 are not supported for " +
                     ctx.node.op_type() + " (ds.avg_pool has none)");
  if (static_cast<int64_t>(window.strides.size()) != spatial ||
      static_cast<int64_t>(window.dilations.size()) != spatial)
    return ctx.error("strides and dilations need " + Twine(spatial) +
                     " entries");
  for (int64_t i = 0; i < spatial; ++i)
    if (window.strides[i] < 1 || window.dilations[i] < 1 ||
        window.kernel[i] < 1)
      return ctx.error("kernel_shape, strides and dilations must be positive");
  if (autoPad == "NOTSET") {
    window.pads = pads.value_or(SmallVector<int64_t>(2 * spatial, 0));
    if (static_cast<int64_t>(window.pads.size()) != 2 * spatial)
      return ctx.error("pads needs " + Twine(2 * spatial) + " entries, got " +
                       Twine(window.pads.size()));
  } else if (autoPad == "VALID") {
    window.pads.assign(2 * spatial, 0);
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    window.pads.assign(2 * spatial, 0);
    for (int64_t i = 0; i < spatial; ++i) {
      int64_t in = inputShape[i + 2];
      int64_t out = llvm::divideCeil(in, window.strides[i]);
      int64_t effective = (window.kernel[i] - 1) * window.dilations[i] + 1;
      int64_t total = std::max<int64_t>(
          0, (out - 1) * window.strides[i] + effective - in);
      int64_t small = total / 2, large = total - small;
      window.pads[i] = autoPad == "SAME_UPPER" ? small : large;
      window.pads[i + spatial] = autoPad == "SAME_UPPER" ? large : small;
    }
  } else {
    return ctx.error("auto_pad '" + autoPad + "' is not NOTSET, VALID, "
                     "SAME_UPPER or SAME_LOWER");
  }
  return window;
}

LogicalResult convertConv(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0), weight = ctx.input(1);
  int64_t group;
  if (failed(input) || failed(weight) || failed(ctx.intAttr("group", group, 1)))
    return failure();
  auto inputType = cast<RankedTensorType>(input->getType());
  auto weightType = cast<RankedTensorType>(weight->getType());
  if (inputType.getRank() < 3 || weightType.getRank() != inputType.getRank())
    return ctx.error("input " + shapeString(inputType.getShape()) +
                     " and weight " + shapeString(weightType.getShape()) +
                     " must be [N, C, D...] and [M, C / group, K...] of the "
                     "same rank");
  SmallVector<int64_t> weightKernel(weightType.getShape().drop_front(2));
  std::optional<SmallVector<int64_t>> kernel;
  if (failed(ctx.intsAttr("kernel_shape", kernel)))
    return failure();
  if (kernel && *kernel != weightKernel)
    return ctx.error("kernel_shape " + shapeString(*kernel) +
                     " does not match the weight's " +
                     shapeString(weightKernel));
  FailureOr<Window> window = readWindow(
      ctx, cast<RankedTensorType>(input->getType()).getShape(), weightKernel,
      /*allowDilations=*/true);
  if (failed(window))
    return failure();
  SmallVector<Value> operands{*input, *weight};
  if (ctx.hasInput(2)) {
    FailureOr<Value> bias = ctx.input(2);
    if (failed(bias))
      return failure();
    operands.push_back(*bias);
  }
  auto &b = ctx.builder();
  return ctx.emit<ds::ConvOp>(
      0, operands,
      {ctx.named("strides", b.getDenseI64ArrayAttr(window->strides)),
       ctx.named("pads", b.getDenseI64ArrayAttr(window->pads)),
       ctx.named("dilations", b.getDenseI64ArrayAttr(window->dilations)),
       ctx.named("group", b.getI64IntegerAttr(group))});
}

LogicalResult convertMaxPool(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  std::optional<SmallVector<int64_t>> kernel;
  int64_t ceilMode;
  // storage_order only changes how the Indices output counts.
  int64_t storageOrder;
  if (failed(input) || failed(ctx.intsAttr("kernel_shape", kernel)) ||
      failed(ctx.intAttr("ceil_mode", ceilMode, 0)) ||
      failed(ctx.intAttr("storage_order", storageOrder, 0)))
    return failure();
  if (ctx.hasOutput(1))
    return ctx.error("the Indices output is not supported (ds.max_pool "
                     "computes values only)");
  FailureOr<Window> window =
      readWindow(ctx, cast<RankedTensorType>(input->getType()).getShape(),
                 kernel, /*allowDilations=*/true);
  if (failed(window))
    return failure();
  auto &b = ctx.builder();
  SmallVector<NamedAttribute> attrs{
      ctx.named("kernel_shape", b.getDenseI64ArrayAttr(window->kernel)),
      ctx.named("strides", b.getDenseI64ArrayAttr(window->strides)),
      ctx.named("pads", b.getDenseI64ArrayAttr(window->pads)),
      ctx.named("dilations", b.getDenseI64ArrayAttr(window->dilations))};
  if (ceilMode)
    attrs.push_back(ctx.named("ceil_mode", b.getUnitAttr()));
  return ctx.emit<ds::MaxPoolOp>(0, {*input}, attrs);
}

LogicalResult convertAveragePool(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  std::optional<SmallVector<int64_t>> kernel;
  int64_t ceilMode, countIncludePad;
  if (failed(input) || failed(ctx.intsAttr("kernel_shape", kernel)) ||
      failed(ctx.intAttr("ceil_mode", ceilMode, 0)) ||
      failed(ctx.intAttr("count_include_pad", countIncludePad, 0)))
    return failure();
  FailureOr<Window> window =
      readWindow(ctx, cast<RankedTensorType>(input->getType()).getShape(),
                 kernel, /*allowDilations=*/false);
  if (failed(window))
    return failure();
  auto &b = ctx.builder();
  SmallVector<NamedAttribute> attrs{
      ctx.named("kernel_shape", b.getDenseI64ArrayAttr(window->kernel)),
      ctx.named("strides", b.getDenseI64ArrayAttr(window->strides)),
      ctx.named("pads", b.getDenseI64ArrayAttr(window->pads))};
  if (ceilMode)
    attrs.push_back(ctx.named("ceil_mode", b.getUnitAttr()));
  if (countIncludePad)
    attrs.push_back(ctx.named("count_include_pad", b.getUnitAttr()));
  return ctx.emit<ds::AveragePoolOp>(0, {*input}, attrs);
}

LogicalResult convertGlobalAveragePool(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input))
    return failure();
  int64_t rank = cast<RankedTensorType>(input->getType()).getRank();
  if (rank < 3)
    return ctx.error("input must be [N, C, D...]");
  SmallVector<int64_t> axes;
  for (int64_t d = 2; d < rank; ++d)
    axes.push_back(d);
  auto &b = ctx.builder();
  return ctx.emit<ds::ReduceMeanOp>(
      0, {*input}, {ctx.named("axes", b.getDenseI64ArrayAttr(axes)),
                    ctx.named("keepdims", b.getBoolAttr(true))});
}

//===----------------------------------------------------------------------===//
// ai.onnx.preview.training optimizers: one ds op per updated tensor
//===----------------------------------------------------------------------===//

/// Splits the inputs R, T, then `groups` runs of n tensors each, and emits
/// one op per tensor; output k of tensor i is ONNX output k * n + i.
template <typename OpTy>
LogicalResult convertOptimizer(NodeContext &ctx, unsigned groups,
                               ArrayRef<NamedAttribute> attrs) {
  unsigned inputs = ctx.node.input_size();
  if (inputs < 2 + groups || (inputs - 2) % groups != 0)
    return ctx.error("expects R, T and " + Twine(groups) +
                     " equally long runs of tensors, got " + Twine(inputs) +
                     " inputs");
  unsigned n = (inputs - 2) / groups;
  unsigned outputsPerTensor = groups - 1;
  if (ctx.numOutputs() > outputsPerTensor * n)
    return ctx.error("has " + Twine(ctx.numOutputs()) + " outputs, expected " +
                     Twine(outputsPerTensor * n));
  FailureOr<Value> lr = ctx.input(0), step = ctx.input(1);
  if (failed(lr) || failed(step))
    return failure();
  for (unsigned i = 0; i < n; ++i) {
    SmallVector<Value> operands{*lr, *step};
    for (unsigned g = 0; g < groups; ++g) {
      FailureOr<Value> value = ctx.input(2 + g * n + i);
      if (failed(value))
        return failure();
      operands.push_back(*value);
    }
    FailureOr<Operation *> op = ctx.create<OpTy>(operands, attrs);
    if (failed(op))
      return failure();
    for (unsigned k = 0; k < outputsPerTensor; ++k)
      ctx.setOutput(k * n + i, (*op)->getResult(k));
  }
  return success();
}

LogicalResult convertAdam(NodeContext &ctx) {
  float alpha, beta, epsilon, norm, normPost;
  if (failed(ctx.floatAttr("alpha", alpha, 0.9f)) ||
      failed(ctx.floatAttr("beta", beta, 0.999f)) ||
      failed(ctx.floatAttr("epsilon", epsilon, 1e-6f)) ||
      failed(ctx.floatAttr("norm_coefficient", norm, 0.0f)) ||
      failed(ctx.floatAttr("norm_coefficient_post", normPost, 0.0f)))
    return failure();
  auto &b = ctx.builder();
  return convertOptimizer<ds::AdamOp>(
      ctx, 4,
      {ctx.named("alpha", b.getF32FloatAttr(alpha)),
       ctx.named("beta", b.getF32FloatAttr(beta)),
       ctx.named("epsilon", b.getF32FloatAttr(epsilon)),
       ctx.named("norm_coefficient", b.getF32FloatAttr(norm)),
       ctx.named("norm_coefficient_post", b.getF32FloatAttr(normPost))});
}

LogicalResult convertMomentum(NodeContext &ctx) {
  float alpha, beta, norm;
  std::string mode;
  if (failed(ctx.floatAttr("alpha", alpha)) ||
      failed(ctx.floatAttr("beta", beta)) ||
      failed(ctx.floatAttr("norm_coefficient", norm)) ||
      failed(ctx.stringAttr("mode", mode)))
    return failure();
  std::optional<ds::MomentumMode> kind = ds::symbolizeMomentumMode(mode);
  if (!kind)
    return ctx.error("mode '" + mode + "' is not 'standard' or 'nesterov'");
  auto &b = ctx.builder();
  return convertOptimizer<ds::MomentumOp>(
      ctx, 3,
      {ctx.named("alpha", b.getF32FloatAttr(alpha)),
       ctx.named("beta", b.getF32FloatAttr(beta)),
       ctx.named("mode", ds::MomentumModeAttr::get(ctx.context(), *kind)),
       ctx.named("norm_coefficient", b.getF32FloatAttr(norm))});
}

LogicalResult convertAdagrad(NodeContext &ctx) {
  float decay, epsilon, norm;
  if (failed(ctx.floatAttr("decay_factor", decay, 0.0f)) ||
      failed(ctx.floatAttr("epsilon", epsilon, 1e-6f)) ||
      failed(ctx.floatAttr("norm_coefficient", norm, 0.0f)))
    return failure();
  auto &b = ctx.builder();
  return convertOptimizer<ds::AdagradOp>(
      ctx, 3,
      {ctx.named("decay_factor", b.getF32FloatAttr(decay)),
       ctx.named("epsilon", b.getF32FloatAttr(epsilon)),
       ctx.named("norm_coefficient", b.getF32FloatAttr(norm))});
}

//===----------------------------------------------------------------------===//
// Converters: activations and elementwise ops built from other ds ops
//===----------------------------------------------------------------------===//

/// A 0-d constant of `like`'s element type.
FailureOr<Value> scalarLike(NodeContext &ctx, Value like, double value) {
  DType dtype = fromMlirElementType(getElementTypeOrSelf(like.getType()));
  return ctx.materialize(
      isFloatDType(dtype)
          ? HostTensor::ofFloats(dtype, {}, {value})
          : HostTensor::ofInts(dtype, {}, {static_cast<int64_t>(value)}));
}

FailureOr<Value> emitValue(FailureOr<Operation *> op) {
  if (failed(op))
    return failure();
  return (*op)->getResult(0);
}

/// x clamped to [low, high] (either may be null) as
/// where(x > high, high, where(x < low, low, x)): NaN passes, low > high
/// gives high (numpy.clip, torch.clamp), and the derivative passes where
/// low <= x <= high, torch.clamp's convention.
FailureOr<Value> emitClamp(NodeContext &ctx, Value x, Value low, Value high) {
  Value result = x;
  if (low) {
    FailureOr<Value> below =
        emitCompare(ctx, ds::ComparePredicate::lt, result, low);
    if (failed(below))
      return failure();
    FailureOr<Value> clamped = emitWhere(ctx, *below, low, result);
    if (failed(clamped))
      return failure();
    result = *clamped;
  }
  if (high) {
    FailureOr<Value> above =
        emitCompare(ctx, ds::ComparePredicate::gt, result, high);
    if (failed(above))
      return failure();
    FailureOr<Value> clamped = emitWhere(ctx, *above, high, result);
    if (failed(clamped))
      return failure();
    result = *clamped;
  }
  return result;
}

/// A bound of Clip: the `min`/`max` attribute (opsets 6-10) or input 1/2
/// (11+): absent, known at import (an initializer or constant) or computed.
FailureOr<Value> clipBound(NodeContext &ctx, Value x, unsigned inputIndex,
                           StringRef attrName) {
  if (ctx.findAttr(attrName)) {
    if (ctx.hasInput(inputIndex))
      return ctx.error(Twine(attrName) +
                       " is given both as an attribute and as an input");
    float value;
    if (failed(ctx.floatAttr(attrName, value)))
      return failure();
    if (!isa<FloatType>(getElementTypeOrSelf(x.getType())))
      return ctx.error("attribute " + Twine(attrName) +
                       " applies to floating-point inputs only");
    return scalarLike(ctx, x, value);
  }
  if (!ctx.hasInput(inputIndex))
    return Value();
  Type element = getElementTypeOrSelf(x.getType());
  if (const HostTensor *known = ctx.constInput(inputIndex, true)) {
    if (known->numElements() != 1)
      return ctx.error("input " + Twine(inputIndex) + " (" + attrName +
                       ") must be a scalar, got shape " +
                       shapeString(known->shape));
    if (known->isFloat() != isa<FloatType>(element))
      return ctx.error("input " + Twine(inputIndex) + " (" + attrName +
                       ") has another element type than the input");
    return scalarLike(ctx, x, known->isFloat()
                                  ? known->floatAt(0)
                                  : static_cast<double>(known->intAt(0)));
  }
  FailureOr<Value> bound = ctx.input(inputIndex);
  if (failed(bound))
    return failure();
  auto type = cast<RankedTensorType>(bound->getType());
  if (type.getElementType() != element)
    return ctx.error("input " + Twine(inputIndex) + " (" + attrName +
                     ") has another element type than the input");
  if (type.getNumElements() != 1)
    return ctx.error("input " + Twine(inputIndex) + " (" + attrName +
                     ") must be a scalar, got shape " +
                     shapeString(type.getShape()));
  return *bound;
}

LogicalResult convertClip(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Numeric)))
    return failure();
  FailureOr<Value> low = clipBound(ctx, *input, 1, "min");
  if (failed(low))
    return failure();
  FailureOr<Value> high = clipBound(ctx, *input, 2, "max");
  if (failed(high))
    return failure();
  FailureOr<Value> result = emitClamp(ctx, *input, *low, *high);
  if (failed(result))
    return failure();
  ctx.setOutput(0, *result);
  return success();
}

/// max(0, min(1, alpha x + beta)), with Clip's derivative convention.
FailureOr<Value> emitHardSigmoid(NodeContext &ctx, Value x, float alpha,
                                 float beta) {
  FailureOr<Value> a = scalarLike(ctx, x, alpha), b = scalarLike(ctx, x, beta);
  FailureOr<Value> zero = scalarLike(ctx, x, 0.0),
                   one = scalarLike(ctx, x, 1.0);
  if (failed(a) || failed(b) || failed(zero) || failed(one))
    return failure();
  FailureOr<Value> scaled = emitValue(ctx.create<ds::MulOp>({x, *a}));
  if (failed(scaled))
    return failure();
  FailureOr<Value> shifted = emitValue(ctx.create<ds::AddOp>({*scaled, *b}));
  if (failed(shifted))
    return failure();
  return emitClamp(ctx, *shifted, *zero, *one);
}

LogicalResult convertHardSigmoid(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  float alpha, beta;
  if (failed(input) || failed(ctx.floatAttr("alpha", alpha, 0.2f)) ||
      failed(ctx.floatAttr("beta", beta, 0.5f)) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  FailureOr<Value> result = emitHardSigmoid(ctx, *input, alpha, beta);
  if (failed(result))
    return failure();
  ctx.setOutput(0, *result);
  return success();
}

/// x * HardSigmoid(x) with alpha = 1/6, beta = 1/2 (ONNX's definition).
LogicalResult convertHardSwish(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  FailureOr<Value> gate = emitHardSigmoid(ctx, *input, 1.0f / 6.0f, 0.5f);
  if (failed(gate))
    return failure();
  return ctx.emit<ds::MulOp>(0, {*input, *gate});
}

template <typename OpTy>
LogicalResult convertEluLike(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  float alpha;
  if (failed(input) || failed(ctx.floatAttr("alpha", alpha, 1.0f)) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  if (std::is_same_v<OpTy, ds::CeluOp> && alpha == 0.0f)
    return ctx.error("attribute alpha must not be 0");
  return ctx.emit<OpTy>(
      0, {*input}, {ctx.named("alpha", ctx.builder().getF32FloatAttr(alpha))});
}

/// gamma * elu(x, alpha).
LogicalResult convertSelu(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  float alpha, gamma;
  if (failed(input) ||
      failed(ctx.floatAttr("alpha", alpha, 1.67326319217681884765625f)) ||
      failed(ctx.floatAttr("gamma", gamma, 1.05070102214813232421875f)) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  FailureOr<Value> elu = emitValue(ctx.create<ds::EluOp>(
      {*input}, {ctx.named("alpha", ctx.builder().getF32FloatAttr(alpha))}));
  FailureOr<Value> scale = scalarLike(ctx, *input, gamma);
  if (failed(elu) || failed(scale))
    return failure();
  return ctx.emit<ds::MulOp>(0, {*elu, *scale});
}

/// x * tanh(softplus(x)).
LogicalResult convertMish(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  FailureOr<Value> soft = emitValue(ctx.create<ds::SoftplusOp>({*input}));
  if (failed(soft))
    return failure();
  FailureOr<Value> gate = emitValue(ctx.create<ds::TanhOp>({*soft}));
  if (failed(gate))
    return failure();
  return ctx.emit<ds::MulOp>(0, {*input, *gate});
}

/// where(x > 0, x, slope * x); slope broadcasts to x (unidirectionally).
/// x > 0 as torch's prelu, whose derivative at 0 is the slope's.
LogicalResult convertPRelu(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0), slope = ctx.input(1);
  if (failed(input) || failed(slope) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Numeric)))
    return failure();
  auto type = cast<RankedTensorType>(input->getType());
  auto slopeType = cast<RankedTensorType>(slope->getType());
  if (slopeType.getElementType() != type.getElementType())
    return ctx.error("slope has another element type than the input");
  FailureOr<SmallVector<int64_t>> shape =
      broadcastShapes(type.getShape(), slopeType.getShape());
  if (failed(shape) || ArrayRef<int64_t>(*shape) != type.getShape())
    return ctx.error("slope of shape " + shapeString(slopeType.getShape()) +
                     " does not broadcast to the input's shape " +
                     shapeString(type.getShape()));
  FailureOr<Value> zero = scalarLike(ctx, *input, 0.0);
  if (failed(zero))
    return failure();
  FailureOr<Value> positive =
      emitCompare(ctx, ds::ComparePredicate::gt, *input, *zero);
  FailureOr<Value> scaled = emitValue(ctx.create<ds::MulOp>({*input, *slope}));
  if (failed(positive) || failed(scaled))
    return failure();
  FailureOr<Value> result = emitWhere(ctx, *positive, *input, *scaled);
  if (failed(result))
    return failure();
  ctx.setOutput(0, *result);
  return success();
}

/// where(x > 0, 1, where(x < 0, -1, 0)), and NaN stays NaN for floats.
LogicalResult convertSign(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Numeric)))
    return failure();
  Value x = *input;
  FailureOr<Value> zero = scalarLike(ctx, x, 0.0), one = scalarLike(ctx, x, 1.0),
                   minusOne = scalarLike(ctx, x, -1.0);
  if (failed(zero) || failed(one) || failed(minusOne))
    return failure();
  FailureOr<Value> negative =
      emitCompare(ctx, ds::ComparePredicate::lt, x, *zero);
  FailureOr<Value> positive =
      emitCompare(ctx, ds::ComparePredicate::gt, x, *zero);
  if (failed(negative) || failed(positive))
    return failure();
  FailureOr<Value> inner = emitWhere(ctx, *negative, *minusOne, *zero);
  if (failed(inner))
    return failure();
  // The zero constant broadcast to x's shape by `inner`.
  FailureOr<Value> result = emitWhere(ctx, *positive, *one, *inner);
  if (failed(result))
    return failure();
  result = keepNaN(ctx, *result, x);
  if (failed(result))
    return failure();
  ctx.setOutput(0, *result);
  return success();
}

/// not(x == x).
LogicalResult convertIsNaN(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  FailureOr<Value> ordered =
      emitCompare(ctx, ds::ComparePredicate::eq, *input, *input);
  if (failed(ordered))
    return failure();
  return ctx.emit<ds::NotOp>(0, {*ordered});
}

/// x == +inf and/or x == -inf, as detect_positive / detect_negative ask.
LogicalResult convertIsInf(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  int64_t detectNegative, detectPositive;
  if (failed(input) ||
      failed(ctx.intAttr("detect_negative", detectNegative, 1)) ||
      failed(ctx.intAttr("detect_positive", detectPositive, 1)) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  double inf = std::numeric_limits<double>::infinity();
  auto equalTo = [&](double value) -> FailureOr<Value> {
    FailureOr<Value> constant = scalarLike(ctx, *input, value);
    if (failed(constant))
      return failure();
    return emitCompare(ctx, ds::ComparePredicate::eq, *input, *constant);
  };
  FailureOr<Value> result;
  if (detectPositive && detectNegative) {
    FailureOr<Value> positive = equalTo(inf), negative = equalTo(-inf);
    FailureOr<Value> yes = ctx.materialize(HostTensor::ofInts(DType::Bool, {}, {1}));
    if (failed(positive) || failed(negative) || failed(yes))
      return failure();
    result = emitWhere(ctx, *positive, *yes, *negative);
  } else if (detectPositive || detectNegative) {
    result = equalTo(detectPositive ? inf : -inf);
  } else {
    // Nothing is detected: x == NaN is false everywhere.
    result = equalTo(std::numeric_limits<double>::quiet_NaN());
  }
  if (failed(result))
    return failure();
  ctx.setOutput(0, *result);
  return success();
}

enum class Logic { And, Or, Xor };

/// And: where(a, b, false); Or: where(a, true, b); Xor: where(a, not b, b).
template <Logic Kind>
LogicalResult convertLogic(NodeContext &ctx) {
  FailureOr<Value> lhs = ctx.input(0), rhs = ctx.input(1);
  if (failed(lhs) || failed(rhs) ||
      failed(requireElementKind(ctx, 0, *lhs, ElementKind::Bool)) ||
      failed(requireElementKind(ctx, 1, *rhs, ElementKind::Bool)))
    return failure();
  if (Kind == Logic::Xor) {
    FailureOr<Value> notRhs = emitValue(ctx.create<ds::NotOp>({*rhs}));
    if (failed(notRhs))
      return failure();
    return ctx.emit<ds::WhereOp>(0, {*lhs, *notRhs, *rhs});
  }
  FailureOr<Value> constant = ctx.materialize(
      HostTensor::ofInts(DType::Bool, {}, {Kind == Logic::Or ? 1 : 0}));
  if (failed(constant))
    return failure();
  if (Kind == Logic::And)
    return ctx.emit<ds::WhereOp>(0, {*lhs, *rhs, *constant});
  return ctx.emit<ds::WhereOp>(0, {*lhs, *constant, *rhs});
}

template <Logic Kind>
FailureOr<bool> foldLogic(NodeContext &ctx) {
  FailureOr<SmallVector<const HostTensor *>> known = constInputs(ctx, 2);
  if (failed(known))
    return failure();
  SmallVector<const HostTensor *> &inputs = *known;
  if (inputs.size() != 2 || inputs[0]->dtype != DType::Bool ||
      inputs[1]->dtype != DType::Bool)
    return ctx.error("expects 2 BOOL inputs");
  return foldElementwise(
      ctx, inputs, DType::Bool, nullptr,
      [](ArrayRef<int64_t> a) -> std::optional<int64_t> {
        bool x = a[0] != 0, y = a[1] != 0;
        return Kind == Logic::And ? (x && y) : Kind == Logic::Or ? (x || y)
                                                                  : (x != y);
      });
}

/// Sum and Mean of any number of inputs: a chain of ds.add (broadcasting),
/// divided by the count for Mean.
template <bool IsMean>
LogicalResult convertVariadicSum(NodeContext &ctx) {
  if (ctx.numInputs() == 0)
    return ctx.error("expects at least one input");
  FailureOr<Value> result = ctx.input(0);
  if (failed(result) ||
      failed(requireElementKind(ctx, 0, *result, ElementKind::Numeric)))
    return failure();
  Type element = getElementTypeOrSelf(result->getType());
  for (unsigned i = 1, e = ctx.numInputs(); i < e; ++i) {
    FailureOr<Value> next = ctx.input(i);
    if (failed(next))
      return failure();
    if (getElementTypeOrSelf(next->getType()) != element)
      return ctx.error("operand element types differ");
    result = emitValue(ctx.create<ds::AddOp>({*result, *next}));
    if (failed(result))
      return failure();
  }
  if (IsMean && ctx.numInputs() > 1) {
    FailureOr<Value> count = scalarLike(ctx, *result, ctx.numInputs());
    if (failed(count))
      return failure();
    result = emitValue(ctx.create<ds::DivOp>({*result, *count}));
    if (failed(result))
      return failure();
  }
  ctx.setOutput(0, *result);
  return success();
}

/// The reductions ds writes with other ops.
enum class ComposedReduce { Min, SumSquare, L1, L2, LogSum, LogSumExp };

/// |x| as where(x < 0, -x, where(x > 0, x, x * 0)): the derivative is
/// sign(x), 0 at 0 as PyTorch's, and NaN stays NaN.
FailureOr<Value> emitAbsolute(NodeContext &ctx, Value x) {
  FailureOr<Value> zero = scalarLike(ctx, x, 0.0);
  if (failed(zero))
    return failure();
  FailureOr<Value> negative =
      emitCompare(ctx, ds::ComparePredicate::lt, x, *zero);
  FailureOr<Value> positive =
      emitCompare(ctx, ds::ComparePredicate::gt, x, *zero);
  FailureOr<Value> negated = emitValue(ctx.create<ds::NegOp>({x}));
  FailureOr<Value> flat = emitValue(ctx.create<ds::MulOp>({x, *zero}));
  if (failed(negative) || failed(positive) || failed(negated) || failed(flat))
    return failure();
  FailureOr<Value> nonnegative = emitWhere(ctx, *positive, x, *flat);
  if (failed(nonnegative))
    return failure();
  return emitWhere(ctx, *negative, *negated, *nonnegative);
}

/// sqrt(s) for s >= 0 whose derivative is 0 rather than NaN at s = 0
/// (torch's norm): where(s > 0, sqrt(where(s > 0, s, 1)), s * 0). NaN stays
/// NaN.
FailureOr<Value> emitSafeSqrt(NodeContext &ctx, Value s) {
  FailureOr<Value> zero = scalarLike(ctx, s, 0.0), one = scalarLike(ctx, s, 1.0);
  if (failed(zero) || failed(one))
    return failure();
  FailureOr<Value> positive =
      emitCompare(ctx, ds::ComparePredicate::gt, s, *zero);
  if (failed(positive))
    return failure();
  FailureOr<Value> safe = emitWhere(ctx, *positive, s, *one);
  if (failed(safe))
    return failure();
  FailureOr<Value> root = emitValue(ctx.create<ds::SqrtOp>({*safe}));
  FailureOr<Value> flat = emitValue(ctx.create<ds::MulOp>({s, *zero}));
  if (failed(root) || failed(flat))
    return failure();
  return emitWhere(ctx, *positive, *root, *flat);
}

template <typename OpTy>
FailureOr<Value> emitReduction(NodeContext &ctx, Value x,
                               ArrayRef<int64_t> axes, bool keepdims) {
  return emitValue(ctx.create<OpTy>(
      {x}, {ctx.named("axes", ctx.builder().getDenseI64ArrayAttr(axes)),
            ctx.named("keepdims", ctx.builder().getBoolAttr(keepdims))}));
}

/// An order-reversing map: -v for floats, -1 - v for integers (no overflow
/// at the most negative value). max of the flipped values flipped back is
/// the min.
FailureOr<Value> emitOrderFlip(NodeContext &ctx, Value v) {
  if (isa<FloatType>(getElementTypeOrSelf(v.getType())))
    return emitValue(ctx.create<ds::NegOp>({v}));
  FailureOr<Value> minusOne = scalarLike(ctx, v, -1.0);
  if (failed(minusOne))
    return failure();
  return emitValue(ctx.create<ds::SubOp>({*minusOne, v}));
}

/// ReduceMin: -max(-x) for floats, -1 - max(-1 - x) for integers (no
/// overflow at the most negative value). ReduceSumSquare: sum(x * x);
/// ReduceL1: sum(|x|); ReduceL2: sqrt(sum(x * x)); ReduceLogSum:
/// log(sum(x)); ReduceLogSumExp: log(sum(exp(x - m))) + m, m the maximum
/// (kept for the subtraction), so large values do not overflow.
template <ComposedReduce Kind>
LogicalResult convertComposedReduce(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  int64_t keepdims;
  if (failed(input) || failed(ctx.intAttr("keepdims", keepdims, 1)))
    return failure();
  bool floatOnly = Kind == ComposedReduce::L2 ||
                   Kind == ComposedReduce::LogSum ||
                   Kind == ComposedReduce::LogSumExp;
  if (failed(requireElementKind(ctx, 0, *input,
                                floatOnly ? ElementKind::Float
                                          : ElementKind::Numeric)))
    return failure();
  Value x = *input;
  auto type = cast<RankedTensorType>(x.getType());
  auto axes = reductionAxes(ctx, type.getRank());
  if (failed(axes))
    return failure();
  if (!*axes) {
    ctx.setOutput(0, x); // noop_with_empty_axes
    return success();
  }
  bool keep = keepdims != 0;
  FailureOr<Value> result;
  switch (Kind) {
  case ComposedReduce::Min: {
    auto flip = [&](Value v) { return emitOrderFlip(ctx, v); };
    FailureOr<Value> flipped = flip(x);
    if (failed(flipped))
      return failure();
    FailureOr<Value> max =
        emitReduction<ds::ReduceMaxOp>(ctx, *flipped, **axes, keep);
    if (failed(max))
      return failure();
    result = flip(*max);
    break;
  }
  case ComposedReduce::SumSquare:
  case ComposedReduce::L2: {
    FailureOr<Value> square = emitValue(ctx.create<ds::MulOp>({x, x}));
    if (failed(square))
      return failure();
    result = emitReduction<ds::ReduceSumOp>(ctx, *square, **axes, keep);
    if (Kind == ComposedReduce::L2 && succeeded(result))
      result = emitSafeSqrt(ctx, *result);
    break;
  }
  case ComposedReduce::L1: {
    FailureOr<Value> absolute = emitAbsolute(ctx, x);
    if (failed(absolute))
      return failure();
    result = emitReduction<ds::ReduceSumOp>(ctx, *absolute, **axes, keep);
    break;
  }
  case ComposedReduce::LogSum: {
    result = emitReduction<ds::ReduceSumOp>(ctx, x, **axes, keep);
    if (succeeded(result))
      result = emitValue(ctx.create<ds::LogOp>({*result}));
    break;
  }
  case ComposedReduce::LogSumExp: {
    FailureOr<Value> max =
        emitReduction<ds::ReduceMaxOp>(ctx, x, **axes, /*keepdims=*/true);
    if (failed(max))
      return failure();
    FailureOr<Value> shifted = emitValue(ctx.create<ds::SubOp>({x, *max}));
    if (failed(shifted))
      return failure();
    FailureOr<Value> exp = emitValue(ctx.create<ds::ExpOp>({*shifted}));
    if (failed(exp))
      return failure();
    FailureOr<Value> sum = emitReduction<ds::ReduceSumOp>(ctx, *exp, **axes, keep);
    if (failed(sum))
      return failure();
    FailureOr<Value> log = emitValue(ctx.create<ds::LogOp>({*sum}));
    if (failed(log))
      return failure();
    Value offset = *max;
    auto logType = cast<RankedTensorType>(log->getType());
    if (!keep) {
      FailureOr<Value> reshaped = emitValue(ctx.createTyped<ds::ReshapeOp>(
          {logType.clone(logType.getShape())}, {offset}));
      if (failed(reshaped))
        return failure();
      offset = *reshaped;
    }
    result = emitValue(ctx.create<ds::AddOp>({*log, offset}));
    break;
  }
  }
  if (failed(result))
    return failure();
  ctx.setOutput(0, *result);
  return success();
}

/// Mod: the remainder with the divisor's sign (fmod = 0, integers only in
/// ONNX) or the dividend's (fmod = 1).
LogicalResult convertMod(NodeContext &ctx) {
  FailureOr<Value> lhs = ctx.input(0), rhs = ctx.input(1);
  int64_t fmod;
  if (failed(lhs) || failed(rhs) || failed(ctx.intAttr("fmod", fmod, 0)) ||
      failed(requireElementKind(ctx, 0, *lhs, ElementKind::Numeric)))
    return failure();
  if (fmod != 0 && fmod != 1)
    return ctx.error("attribute fmod = " + Twine(fmod) + " is not 0 or 1");
  Type element = getElementTypeOrSelf(lhs->getType());
  if (getElementTypeOrSelf(rhs->getType()) != element)
    return ctx.error("operand element types differ");
  if (isa<FloatType>(element) && fmod == 0)
    return ctx.error("floating-point Mod needs fmod = 1");
  SmallVector<NamedAttribute> attrs;
  if (fmod)
    attrs.push_back(ctx.named("fmod", ctx.builder().getUnitAttr()));
  return ctx.emit<ds::ModOp>(0, {*lhs, *rhs}, attrs);
}

//===----------------------------------------------------------------------===//
// Converters: padding, resizing, normalization and layout ops built from
// other ds ops (exact compositions, so they need no kernels of their own)
//===----------------------------------------------------------------------===//

FailureOr<Value> emitReshape(NodeContext &ctx, Value x,
                             ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(x.getType());
  if (type.getShape() == shape)
    return x;
  return emitValue(ctx.createTyped<ds::ReshapeOp>({type.clone(shape)}, {x}));
}

FailureOr<Value> emitTranspose(NodeContext &ctx, Value x,
                               ArrayRef<int64_t> perm) {
  if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
    return x;
  return emitValue(ctx.create<ds::TransposeOp>(
      {x}, {ctx.named("perm", ctx.builder().getDenseI64ArrayAttr(perm))}));
}

FailureOr<Value> emitBroadcast(NodeContext &ctx, Value x,
                               ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(x.getType());
  if (type.getShape() == shape)
    return x;
  return emitValue(
      ctx.createTyped<ds::BroadcastToOp>({type.clone(shape)}, {x}));
}

/// x gathered along `axis` at constant indices (a vector): how Pad's edge
/// and reflect modes and Resize pick their source elements. The derivative
/// is gather's scatter-add.
FailureOr<Value> emitGatherAt(NodeContext &ctx, Value x, int64_t axis,
                              ArrayRef<int64_t> indices) {
  FailureOr<Value> index = ctx.materialize(HostTensor::ofInts(
      DType::Int64, {static_cast<int64_t>(indices.size())},
      std::vector<int64_t>(indices.begin(), indices.end())));
  if (failed(index))
    return failure();
  return emitValue(ctx.create<ds::GatherOp>(
      {x, *index},
      {ctx.named("axis", ctx.builder().getI64IntegerAttr(axis))}));
}

/// A constant vector of `like`'s element type, shaped to broadcast along
/// `axis` of a tensor of rank `rank` ([n, 1, ..., 1]).
FailureOr<Value> axisVector(NodeContext &ctx, Value like, int64_t axis,
                            int64_t rank, ArrayRef<double> values) {
  SmallVector<int64_t> shape(rank - axis, 1);
  shape[0] = static_cast<int64_t>(values.size());
  DType dtype = fromMlirElementType(getElementTypeOrSelf(like.getType()));
  return ctx.materialize(HostTensor::ofFloats(
      dtype, shape, std::vector<double>(values.begin(), values.end())));
}

/// Pad (opsets 13-21): the pads input (and opset 18's axes) known at
/// compile time; negative pads crop (ds.slice). Constant mode concatenates
/// blocks of the value; edge, reflect and wrap gather the source index of
/// every output element along each padded axis.
LogicalResult convertPad(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  std::string mode;
  if (failed(input) ||
      failed(ctx.stringAttr("mode", mode, StringRef("constant"))))
    return failure();
  if (mode != "constant" && mode != "reflect" && mode != "edge" &&
      mode != "wrap")
    return ctx.error("mode '" + mode +
                     "' is not 'constant', 'reflect', 'edge' or 'wrap'");
  auto type = cast<RankedTensorType>(input->getType());
  int64_t rank = type.getRank();
  FailureOr<SmallVector<int64_t>> pads = ctx.constInts(1, "pads");
  if (failed(pads))
    return failure();
  SmallVector<int64_t> axes;
  if (ctx.hasInput(3)) {
    FailureOr<SmallVector<int64_t>> given = ctx.constInts(3, "axes");
    if (failed(given))
      return failure();
    for (int64_t axis : *given) {
      FailureOr<int64_t> normalized = ctx.normalizeAxis(axis, rank, "axis");
      if (failed(normalized))
        return failure();
      if (llvm::is_contained(axes, *normalized))
        return ctx.error("axis " + Twine(axis) + " is listed twice");
      axes.push_back(*normalized);
    }
  } else {
    axes = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  }
  int64_t count = static_cast<int64_t>(axes.size());
  if (static_cast<int64_t>(pads->size()) != 2 * count)
    return ctx.error("pads has " + Twine(pads->size()) + " entries; " +
                     Twine(2 * count) + " expected (begin and end of " +
                     Twine(count) + " axes)");
  Value x = *input;
  // Crop first: negative pads remove elements.
  SmallVector<int64_t> offsets(rank, 0), sizes(type.getShape());
  for (int64_t i = 0; i < count; ++i) {
    int64_t axis = axes[i], begin = (*pads)[i], end = (*pads)[i + count];
    int64_t cut = std::max<int64_t>(0, -begin) + std::max<int64_t>(0, -end);
    if (cut > sizes[axis])
      return ctx.error("pads " + Twine(begin) + ", " + Twine(end) +
                       " remove more than the " + Twine(sizes[axis]) +
                       " elements of axis " + Twine(axis));
    offsets[axis] = std::max<int64_t>(0, -begin);
    sizes[axis] -= cut;
  }
  if (ArrayRef<int64_t>(sizes) != type.getShape()) {
    auto &b = ctx.builder();
    FailureOr<Value> cropped = emitValue(ctx.createTyped<ds::SliceOp>(
        {type.clone(sizes)}, {x},
        {ctx.named("offsets", b.getDenseI64ArrayAttr(offsets)),
         ctx.named("strides",
                   b.getDenseI64ArrayAttr(SmallVector<int64_t>(rank, 1)))}));
    if (failed(cropped))
      return failure();
    x = *cropped;
  }
  // The constant: 0 unless given; a computed value is broadcast.
  Value fill;
  if (mode == "constant") {
    if (ctx.hasInput(2)) {
      if (const HostTensor *known = ctx.constInput(2, true)) {
        if (known->numElements() != 1)
          return ctx.error("constant_value must be a scalar, got shape " +
                           shapeString(known->shape));
        FailureOr<Value> value = scalarLike(
            ctx, x, known->isFloat() ? known->floatAt(0)
                                     : static_cast<double>(known->intAt(0)));
        if (failed(value))
          return failure();
        fill = *value;
      } else {
        FailureOr<Value> value = ctx.input(2);
        if (failed(value))
          return failure();
        auto valueType = cast<RankedTensorType>(value->getType());
        if (valueType.getNumElements() != 1 ||
            valueType.getElementType() != type.getElementType())
          return ctx.error("constant_value must be a scalar of the input's "
                           "element type");
        FailureOr<Value> scalar = emitReshape(ctx, *value, {});
        if (failed(scalar))
          return failure();
        fill = *scalar;
      }
    } else {
      FailureOr<Value> zero = scalarLike(ctx, x, 0.0);
      if (failed(zero))
        return failure();
      fill = *zero;
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    int64_t axis = axes[i];
    int64_t begin = std::max<int64_t>(0, (*pads)[i]);
    int64_t end = std::max<int64_t>(0, (*pads)[i + count]);
    if (begin == 0 && end == 0)
      continue;
    auto current = cast<RankedTensorType>(x.getType());
    int64_t n = current.getDimSize(axis);
    if (mode == "constant") {
      SmallVector<Value> pieces;
      for (int64_t width : {begin, int64_t(-1), end}) {
        if (width == -1) {
          pieces.push_back(x);
          continue;
        }
        if (width == 0)
          continue;
        SmallVector<int64_t> shape(current.getShape());
        shape[axis] = width;
        FailureOr<Value> block = emitBroadcast(ctx, fill, shape);
        if (failed(block))
          return failure();
        pieces.push_back(*block);
      }
      FailureOr<Value> joined = emitValue(ctx.create<ds::ConcatOp>(
          pieces, {ctx.named("axis", ctx.builder().getI64IntegerAttr(axis))}));
      if (failed(joined))
        return failure();
      x = *joined;
      continue;
    }
    if (n == 0)
      return ctx.error("cannot pad axis " + Twine(axis) + " of size 0 in " +
                       mode + " mode");
    if (mode == "reflect" && (begin >= n || end >= n))
      return ctx.error("reflect pads " + Twine(begin) + ", " + Twine(end) +
                       " of axis " + Twine(axis) + " must be less than its "
                       "size " + Twine(n));
    SmallVector<int64_t> indices;
    for (int64_t j = -begin; j < n + end; ++j) {
      int64_t k = j;
      if (mode == "edge")
        k = std::clamp<int64_t>(j, 0, n - 1);
      else if (mode == "reflect")
        k = j < 0 ? -j : (j >= n ? 2 * (n - 1) - j : j);
      else // wrap
        k = ((j % n) + n) % n;
      indices.push_back(k);
    }
    FailureOr<Value> gathered = emitGatherAt(ctx, x, axis, indices);
    if (failed(gathered))
      return failure();
    x = *gathered;
  }
  ctx.setOutput(0, x);
  return success();
}

/// Tile: reshape to [1, d0, 1, d1, ...], broadcast the ones to the repeats,
/// reshape to [r0 d0, r1 d1, ...]; the derivative sums the copies.
LogicalResult convertTile(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  FailureOr<SmallVector<int64_t>> repeats = ctx.constInts(1, "repeats");
  if (failed(input) || failed(repeats))
    return failure();
  auto type = cast<RankedTensorType>(input->getType());
  if (static_cast<int64_t>(repeats->size()) != type.getRank())
    return ctx.error("repeats has " + Twine(repeats->size()) +
                     " entries for an input of rank " + Twine(type.getRank()));
  SmallVector<int64_t> split, expanded, result;
  for (auto [dim, repeat] : llvm::zip(type.getShape(), *repeats)) {
    if (repeat < 0)
      return ctx.error("repeats must not be negative, got " + Twine(repeat));
    split.append({1, dim});
    expanded.append({repeat, dim});
    result.push_back(repeat * dim);
  }
  if (ArrayRef<int64_t>(result) == type.getShape()) {
    ctx.setOutput(0, *input);
    return success();
  }
  FailureOr<Value> x = emitReshape(ctx, *input, split);
  if (succeeded(x))
    x = emitBroadcast(ctx, *x, expanded);
  if (succeeded(x))
    x = emitReshape(ctx, *x, result);
  if (failed(x))
    return failure();
  ctx.setOutput(0, *x);
  return success();
}

/// DepthToSpace (DCR or CRD) and SpaceToDepth: a reshape, a transpose and a
/// reshape.
template <bool ToSpace>
LogicalResult convertDepthSpace(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  int64_t block;
  std::string mode;
  if (failed(input) || failed(ctx.intAttr("blocksize", block)) ||
      failed(ctx.stringAttr("mode", mode, StringRef("DCR"))))
    return failure();
  auto type = cast<RankedTensorType>(input->getType());
  if (type.getRank() != 4)
    return ctx.error("input must be [N, C, H, W], got " +
                     shapeString(type.getShape()));
  if (block < 1)
    return ctx.error("blocksize must be positive, got " + Twine(block));
  int64_t n = type.getDimSize(0), c = type.getDimSize(1),
          h = type.getDimSize(2), w = type.getDimSize(3);
  SmallVector<int64_t> split, perm, result;
  if (ToSpace) {
    if (mode != "DCR" && mode != "CRD")
      return ctx.error("mode '" + mode + "' is not 'DCR' or 'CRD'");
    if (c % (block * block) != 0)
      return ctx.error("channels " + Twine(c) + " are not a multiple of " +
                       "blocksize^2 = " + Twine(block * block));
    int64_t depth = c / (block * block);
    if (mode == "DCR") {
      split = {n, block, block, depth, h, w};
      perm = {0, 3, 4, 1, 5, 2};
    } else {
      split = {n, depth, block, block, h, w};
      perm = {0, 1, 4, 2, 5, 3};
    }
    result = {n, depth, h * block, w * block};
  } else {
    if (h % block != 0 || w % block != 0)
      return ctx.error("height " + Twine(h) + " and width " + Twine(w) +
                       " must be multiples of blocksize " + Twine(block));
    split = {n, c, h / block, block, w / block, block};
    perm = {0, 3, 5, 1, 2, 4};
    result = {n, c * block * block, h / block, w / block};
  }
  FailureOr<Value> x = emitReshape(ctx, *input, split);
  if (succeeded(x))
    x = emitTranspose(ctx, *x, perm);
  if (succeeded(x))
    x = emitReshape(ctx, *x, result);
  if (failed(x))
    return failure();
  ctx.setOutput(0, *x);
  return success();
}

/// GlobalMaxPool: ds.reduce_max over the spatial axes, kept.
LogicalResult convertGlobalMaxPool(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  if (failed(input) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  int64_t rank = cast<RankedTensorType>(input->getType()).getRank();
  if (rank < 3)
    return ctx.error("input must be [N, C, D...]");
  FailureOr<Value> result = emitReduction<ds::ReduceMaxOp>(
      ctx, *input, llvm::to_vector(llvm::seq<int64_t>(2, rank)),
      /*keepdims=*/true);
  if (failed(result))
    return failure();
  ctx.setOutput(0, *result);
  return success();
}

/// x [N, C, D...] normalized over groups of channels and the spatial axes:
/// reshaped to [N, groups, rest] and normalized by ds.layer_norm over the
/// last axis with a unit scale (the statistics and their derivative are
/// layer norm's), reshaped back.
FailureOr<Value> emitGroupStatsNorm(NodeContext &ctx, Value x, int64_t groups,
                                    float epsilon) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t n = type.getDimSize(0);
  int64_t rest = type.getNumElements() / std::max<int64_t>(1, n * groups);
  FailureOr<Value> grouped = emitReshape(ctx, x, {n, groups, rest});
  FailureOr<Value> ones = ctx.materialize(HostTensor::splatOf(
      fromMlirElementType(type.getElementType()), {rest}, 1.0));
  if (failed(grouped) || failed(ones))
    return failure();
  FailureOr<Value> normalized = emitValue(ctx.create<ds::LayerNormOp>(
      {*grouped, *ones},
      {ctx.named("axis", ctx.builder().getI64IntegerAttr(2)),
       ctx.named("epsilon", ctx.builder().getF32FloatAttr(epsilon))}));
  if (failed(normalized))
    return failure();
  return emitReshape(ctx, *normalized, type.getShape());
}

/// y * scale + bias with scale, bias [C] (or `perChannel` false: [groups],
/// each group's value repeated over its channels) on the channel axis.
FailureOr<Value> emitChannelAffine(NodeContext &ctx, Value y, int64_t groups,
                                   bool perChannel) {
  auto type = cast<RankedTensorType>(y.getType());
  int64_t channels = type.getDimSize(1), rank = type.getRank();
  Value result = y;
  for (unsigned i : {1u, 2u}) {
    FailureOr<Value> param = ctx.input(i);
    if (failed(param))
      return failure();
    auto paramType = cast<RankedTensorType>(param->getType());
    int64_t expected = perChannel ? channels : groups;
    if (paramType.getRank() != 1 || paramType.getDimSize(0) != expected ||
        paramType.getElementType() != type.getElementType())
      return ctx.error(Twine(i == 1 ? "scale" : "bias") + " must be [" +
                       Twine(expected) + "] of the input's element type, got " +
                       shapeString(paramType.getShape()));
    Value v = *param;
    if (!perChannel) {
      FailureOr<Value> expandedParam = emitReshape(ctx, v, {groups, 1});
      if (succeeded(expandedParam))
        expandedParam =
            emitBroadcast(ctx, *expandedParam, {groups, channels / groups});
      if (succeeded(expandedParam))
        expandedParam = emitReshape(ctx, *expandedParam, {channels});
      if (failed(expandedParam))
        return failure();
      v = *expandedParam;
    }
    SmallVector<int64_t> shape(rank - 1, 1);
    shape[0] = channels;
    FailureOr<Value> shaped = emitReshape(ctx, v, shape);
    if (failed(shaped))
      return failure();
    FailureOr<Value> next =
        i == 1 ? emitValue(ctx.create<ds::MulOp>({result, *shaped}))
               : emitValue(ctx.create<ds::AddOp>({result, *shaped}));
    if (failed(next))
      return failure();
    result = *next;
  }
  return result;
}

/// InstanceNormalization: every (sample, channel) normalized over the
/// spatial axes, then scale and bias per channel. PyTorch exports
/// GroupNorm below opset 18 as Reshape, InstanceNormalization, Reshape,
/// Mul, Add, which this covers.
LogicalResult convertInstanceNorm(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  float epsilon;
  if (failed(input) || failed(ctx.floatAttr("epsilon", epsilon, 1e-5f)) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  auto type = cast<RankedTensorType>(input->getType());
  if (type.getRank() < 3)
    return ctx.error("input must be [N, C, D...], got " +
                     shapeString(type.getShape()));
  int64_t channels = type.getDimSize(1);
  FailureOr<Value> y = emitGroupStatsNorm(ctx, *input, channels, epsilon);
  if (succeeded(y))
    y = emitChannelAffine(ctx, *y, channels, /*perChannel=*/true);
  if (failed(y))
    return failure();
  ctx.setOutput(0, *y);
  return success();
}

/// GroupNormalization (opset 18: scale and bias per group; 21: per
/// channel).
LogicalResult convertGroupNorm(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  float epsilon;
  int64_t groups, stash;
  if (failed(input) || failed(ctx.floatAttr("epsilon", epsilon, 1e-5f)) ||
      failed(ctx.intAttr("num_groups", groups)) ||
      failed(ctx.intAttr("stash_type", stash, 1)) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  if (stash != 1)
    return ctx.error("stash_type " + Twine(stash) +
                     " is not supported (the statistics are computed in "
                     "float, stash_type 1)");
  auto type = cast<RankedTensorType>(input->getType());
  if (type.getRank() < 3)
    return ctx.error("input must be [N, C, D...], got " +
                     shapeString(type.getShape()));
  int64_t channels = type.getDimSize(1);
  if (groups < 1 || channels % groups != 0)
    return ctx.error("num_groups " + Twine(groups) +
                     " does not divide the " + Twine(channels) + " channels");
  FailureOr<Value> y = emitGroupStatsNorm(ctx, *input, groups, epsilon);
  if (succeeded(y))
    y = emitChannelAffine(ctx, *y, groups, /*perChannel=*/ctx.opset >= 21);
  if (failed(y))
    return failure();
  ctx.setOutput(0, *y);
  return success();
}

/// Keys' cubic convolution kernel with coefficient `a` at distance `d`.
static double cubicWeight(double d, double a) {
  d = std::abs(d);
  if (d <= 1)
    return ((a + 2) * d - (a + 3)) * d * d + 1;
  if (d < 2)
    return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
  return 0;
}

/// Resize, modes nearest, linear and cubic (separable: one axis at a time),
/// with the coordinate transformations half_pixel, pytorch_half_pixel,
/// half_pixel_symmetric, align_corners, asymmetric and tf_crop_and_resize.
/// Output sizes, scales and the roi must be known at compile time. Nearest
/// gathers one source per output element; linear and cubic gather the 2 or 4
/// neighbours (clamped to the edge, as ONNX's reference and PyTorch) and
/// blend them with constant weights (with exclude_outside, the neighbours
/// outside the input get none and the others are renormalized).
/// tf_crop_and_resize puts extrapolation_value where the source coordinate
/// falls outside the input.
LogicalResult convertResize(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  std::string mode, transform, nearestMode, aspect;
  int64_t antialias, excludeOutside;
  float cubicA, extrapolation;
  if (failed(input) ||
      failed(ctx.stringAttr("mode", mode, StringRef("nearest"))) ||
      failed(ctx.stringAttr("coordinate_transformation_mode", transform,
                            StringRef("half_pixel"))) ||
      failed(ctx.stringAttr("nearest_mode", nearestMode,
                            StringRef("round_prefer_floor"))) ||
      failed(ctx.stringAttr("keep_aspect_ratio_policy", aspect,
                            StringRef("stretch"))) ||
      failed(ctx.intAttr("antialias", antialias, 0)) ||
      failed(ctx.intAttr("exclude_outside", excludeOutside, 0)) ||
      failed(ctx.floatAttr("cubic_coeff_a", cubicA, -0.75f)) ||
      failed(ctx.floatAttr("extrapolation_value", extrapolation, 0.0f)))
    return failure();
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return ctx.error("mode '" + mode + "' is not supported (nearest, linear, "
                     "cubic)");
  if (transform != "half_pixel" && transform != "pytorch_half_pixel" &&
      transform != "half_pixel_symmetric" && transform != "align_corners" &&
      transform != "asymmetric" && transform != "tf_crop_and_resize")
    return ctx.error("coordinate_transformation_mode '" + transform +
                     "' is not supported (half_pixel, pytorch_half_pixel, "
                     "half_pixel_symmetric, align_corners, asymmetric, "
                     "tf_crop_and_resize)");
  if (nearestMode != "round_prefer_floor" &&
      nearestMode != "round_prefer_ceil" && nearestMode != "floor" &&
      nearestMode != "ceil")
    return ctx.error("nearest_mode '" + nearestMode + "' is not "
                     "round_prefer_floor, round_prefer_ceil, floor or ceil");
  if (antialias)
    return ctx.error("antialias = 1 is not supported");
  if (aspect != "stretch" && aspect != "not_larger" && aspect != "not_smaller")
    return ctx.error("keep_aspect_ratio_policy '" + aspect +
                     "' is not stretch, not_larger or not_smaller");
  auto type = cast<RankedTensorType>(input->getType());
  int64_t rank = type.getRank();
  if (mode != "nearest" && !isa<FloatType>(type.getElementType()))
    return ctx.error(mode + " mode needs a floating-point input");
  bool crop = transform == "tf_crop_and_resize";
  if (crop && !isa<FloatType>(type.getElementType()))
    return ctx.error("tf_crop_and_resize needs a floating-point input");
  std::optional<SmallVector<int64_t>> axesAttr;
  if (failed(ctx.intsAttr("axes", axesAttr)))
    return failure();
  SmallVector<int64_t> axes;
  if (axesAttr) {
    for (int64_t axis : *axesAttr) {
      FailureOr<int64_t> normalized = ctx.normalizeAxis(axis, rank, "axis");
      if (failed(normalized))
        return failure();
      axes.push_back(*normalized);
    }
  } else {
    axes = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  }
  size_t count = axes.size();
  // Scales (input 2) or sizes (input 3); an empty tensor counts as absent.
  const HostTensor *scalesInput = nullptr, *sizesInput = nullptr;
  for (unsigned i : {2u, 3u}) {
    if (!ctx.hasInput(i))
      continue;
    const HostTensor *known = ctx.constInput(i, /*readParameters=*/true);
    if (!known)
      return ctx.error(Twine(i == 2 ? "scales" : "sizes") +
                       " must be known at compile time");
    if (known->numElements() == 0)
      continue;
    if (static_cast<size_t>(known->numElements()) != count)
      return ctx.error(Twine(i == 2 ? "scales" : "sizes") + " has " +
                       Twine(known->numElements()) + " entries for " +
                       Twine(count) + " axes");
    (i == 2 ? scalesInput : sizesInput) = known;
  }
  if (!!scalesInput == !!sizesInput)
    return ctx.error("exactly one of scales and sizes must be given");
  // tf_crop_and_resize's region: starts then ends, per resized axis, as
  // fractions of the input.
  SmallVector<double> roiStart(rank, 0.0), roiEnd(rank, 1.0);
  if (crop) {
    const HostTensor *roi =
        ctx.hasInput(1) ? ctx.constInput(1, /*readParameters=*/true) : nullptr;
    if (!roi || roi->numElements() == 0)
      return ctx.error("tf_crop_and_resize needs roi (input 1), known at "
                       "compile time");
    if (static_cast<size_t>(roi->numElements()) != 2 * count)
      return ctx.error("roi has " + Twine(roi->numElements()) +
                       " entries; tf_crop_and_resize needs 2 per axis (" +
                       Twine(2 * count) + ")");
    for (size_t i = 0; i < count; ++i) {
      roiStart[axes[i]] = roi->floatAt(i);
      roiEnd[axes[i]] = roi->floatAt(count + i);
    }
  }
  SmallVector<double> scales(rank, 1.0);
  SmallVector<int64_t> outSizes(type.getShape());
  if (scalesInput) {
    for (size_t i = 0; i < count; ++i) {
      double scale = scalesInput->floatAt(i);
      if (!(scale > 0))
        return ctx.error("scale " + numberString(scale) +
                         " is not positive");
      scales[axes[i]] = scale;
      outSizes[axes[i]] = static_cast<int64_t>(
          std::floor(type.getDimSize(axes[i]) * scale));
    }
  } else {
    double policyScale = aspect == "not_larger"
                             ? std::numeric_limits<double>::infinity()
                             : 0.0;
    for (size_t i = 0; i < count; ++i) {
      double ratio = static_cast<double>(sizesInput->intAt(i)) /
                     static_cast<double>(type.getDimSize(axes[i]));
      policyScale = aspect == "not_larger" ? std::min(policyScale, ratio)
                                           : std::max(policyScale, ratio);
    }
    for (size_t i = 0; i < count; ++i) {
      int64_t in = type.getDimSize(axes[i]);
      int64_t out = sizesInput->intAt(i);
      if (aspect != "stretch")
        out = static_cast<int64_t>(std::round(in * policyScale));
      if (out < 1)
        return ctx.error("output size " + Twine(out) + " of axis " +
                         Twine(axes[i]) + " is not positive");
      outSizes[axes[i]] = out;
      scales[axes[i]] = aspect == "stretch"
                            ? static_cast<double>(out) / static_cast<double>(in)
                            : policyScale;
    }
  }
  Value x = *input;
  for (int64_t axis = 0; axis < rank; ++axis) {
    int64_t in = type.getDimSize(axis), out = outSizes[axis];
    double scale = scales[axis];
    if (out == in && scale == 1.0 &&
        !(crop && (roiStart[axis] != 0.0 || roiEnd[axis] != 1.0)))
      continue;
    if (in == 0 || out == 0)
      return ctx.error("cannot resize axis " + Twine(axis) + " from " +
                       Twine(in) + " to " + Twine(out) + " elements");
    // The resized length in the coordinate formulas is in * scale, not
    // rounded to the output size (ONNX's reference; they agree whenever
    // in * scale is whole, as for the factors exporters emit).
    double resized = scalesInput ? in * scale : static_cast<double>(out);
    auto source = [&](int64_t i) -> double {
      double o = static_cast<double>(i);
      if (transform == "align_corners")
        return resized == 1.0 ? 0.0
                              : o * static_cast<double>(in - 1) /
                                    (resized - 1.0);
      if (transform == "asymmetric")
        return o / scale;
      if (crop) {
        double span = (roiEnd[axis] - roiStart[axis]) * (in - 1);
        return out > 1 ? roiStart[axis] * (in - 1) + o * span / (resized - 1)
                       : 0.5 * (roiStart[axis] + roiEnd[axis]) * (in - 1);
      }
      if (transform == "pytorch_half_pixel")
        return resized > 1.0 ? (o + 0.5) / scale - 0.5 : 0.0;
      if (transform == "half_pixel_symmetric") {
        double adjustment = static_cast<double>(out) / (scale * in);
        double center = static_cast<double>(in) / 2;
        return center * (1 - adjustment) + (o + 0.5) / scale - 0.5;
      }
      return (o + 0.5) / scale - 0.5;
    };
    auto clampIndex = [&](int64_t i) {
      return std::clamp<int64_t>(i, 0, in - 1);
    };
    // Each output element is a weighted sum of taps: one (nearest), two
    // (linear) or four (cubic) source elements, clamped to the edge.
    int64_t taps = mode == "nearest" ? 1 : mode == "linear" ? 2 : 4;
    SmallVector<SmallVector<int64_t>> index(taps);
    SmallVector<SmallVector<double>> weight(taps);
    // tf_crop_and_resize: 1 where the source is inside the input.
    SmallVector<double> inside;
    bool anyOutside = false;
    for (int64_t i = 0; i < out; ++i) {
      double s = source(i);
      bool isInside = !crop || (s >= 0 && s <= static_cast<double>(in - 1));
      anyOutside |= !isInside;
      inside.push_back(isInside ? 1.0 : 0.0);
      double f = std::floor(s);
      if (mode == "nearest") {
        int64_t k;
        if (nearestMode == "floor")
          k = static_cast<int64_t>(f);
        else if (nearestMode == "ceil")
          k = static_cast<int64_t>(std::ceil(s));
        else if (s - f == 0.5)
          k = static_cast<int64_t>(nearestMode == "round_prefer_ceil" ? f + 1
                                                                      : f);
        else
          k = static_cast<int64_t>(std::round(s));
        index[0].push_back(clampIndex(k));
        weight[0].push_back(1.0);
        continue;
      }
      // Taps floor(s) - first ... floor(s) - first + taps - 1.
      int64_t first = static_cast<int64_t>(f) - (taps == 4 ? 1 : 0);
      double t = s - f, total = 0;
      SmallVector<double> w(taps);
      for (int64_t k = 0; k < taps; ++k) {
        int64_t at = first + k;
        double distance = s - static_cast<double>(at);
        w[k] = taps == 2 ? (k == 0 ? 1.0 - t : t)
                         : cubicWeight(distance, cubicA);
        if (excludeOutside && (at < 0 || at >= in))
          w[k] = 0;
        total += w[k];
      }
      for (int64_t k = 0; k < taps; ++k) {
        index[k].push_back(clampIndex(first + k));
        weight[k].push_back(excludeOutside && total != 0 ? w[k] / total
                                                         : w[k]);
      }
    }
    SmallVector<Value> terms;
    for (int64_t k = 0; k < taps; ++k) {
      FailureOr<Value> gathered = emitGatherAt(ctx, x, axis, index[k]);
      if (failed(gathered))
        return failure();
      terms.push_back(*gathered);
    }
    Value sum;
    for (int64_t k = 0; k < taps; ++k) {
      FailureOr<Value> term = terms[k];
      if (mode != "nearest") {
        FailureOr<Value> w = axisVector(ctx, x, axis, rank, weight[k]);
        if (failed(w))
          return failure();
        term = emitValue(ctx.create<ds::MulOp>({terms[k], *w}));
      }
      if (succeeded(term) && sum)
        term = emitValue(ctx.create<ds::AddOp>({sum, *term}));
      if (failed(term))
        return failure();
      sum = *term;
    }
    if (anyOutside) {
      // value * inside + extrapolation * (1 - inside)
      SmallVector<double> fill;
      for (double v : inside)
        fill.push_back(v ? 0.0 : static_cast<double>(extrapolation));
      FailureOr<Value> keep = axisVector(ctx, sum, axis, rank, inside);
      FailureOr<Value> other = axisVector(ctx, sum, axis, rank, fill);
      if (failed(keep) || failed(other))
        return failure();
      FailureOr<Value> kept = emitValue(ctx.create<ds::MulOp>({sum, *keep}));
      if (succeeded(kept))
        kept = emitValue(ctx.create<ds::AddOp>({*kept, *other}));
      if (failed(kept))
        return failure();
      sum = *kept;
    }
    x = sum;
  }
  ctx.setOutput(0, x);
  return success();
}

/// ConvTranspose: the gradient of a convolution with respect to its input
/// (ds.conv_grad_input), the input in the role of the result gradient and
/// the weight [C_in, C_out / group, K...] in its own. pads, auto_pad,
/// output_padding and output_shape fix the output size; output_padding
/// adds positions at the end that no input reaches (their value is the
/// bias).
LogicalResult convertConvTranspose(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0), weight = ctx.input(1);
  int64_t group;
  std::string autoPad;
  std::optional<SmallVector<int64_t>> kernelAttr, strides, dilations, pads,
      outputPadding, outputShape;
  if (failed(input) || failed(weight) || failed(ctx.intAttr("group", group, 1)) ||
      failed(ctx.stringAttr("auto_pad", autoPad, StringRef("NOTSET"))) ||
      failed(ctx.intsAttr("kernel_shape", kernelAttr)) ||
      failed(ctx.intsAttr("strides", strides)) ||
      failed(ctx.intsAttr("dilations", dilations)) ||
      failed(ctx.intsAttr("pads", pads)) ||
      failed(ctx.intsAttr("output_padding", outputPadding)) ||
      failed(ctx.intsAttr("output_shape", outputShape)) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  auto inputType = cast<RankedTensorType>(input->getType());
  auto weightType = cast<RankedTensorType>(weight->getType());
  int64_t rank = inputType.getRank(), spatial = rank - 2;
  if (rank < 3 || weightType.getRank() != rank)
    return ctx.error("input " + shapeString(inputType.getShape()) +
                     " and weight " + shapeString(weightType.getShape()) +
                     " must be [N, C, D...] and [C, M / group, K...] of the "
                     "same rank");
  int64_t inChannels = inputType.getDimSize(1);
  if (group < 1 || inChannels % group != 0 ||
      weightType.getDimSize(0) != inChannels)
    return ctx.error("weight " + shapeString(weightType.getShape()) +
                     " does not fit " + Twine(inChannels) +
                     " input channels in " + Twine(group) + " groups");
  SmallVector<int64_t> kernel(weightType.getShape().drop_front(2));
  if (kernelAttr && *kernelAttr != kernel)
    return ctx.error("kernel_shape " + shapeString(*kernelAttr) +
                     " does not match the weight's " + shapeString(kernel));
  auto fill = [&](std::optional<SmallVector<int64_t>> &v, int64_t size,
                  int64_t value) { if (!v) v.emplace(size, value); };
  fill(strides, spatial, 1);
  fill(dilations, spatial, 1);
  fill(outputPadding, spatial, 0);
  if (static_cast<int64_t>(strides->size()) != spatial ||
      static_cast<int64_t>(dilations->size()) != spatial ||
      static_cast<int64_t>(outputPadding->size()) != spatial)
    return ctx.error("strides, dilations and output_padding need " +
                     Twine(spatial) + " entries");
  SmallVector<int64_t> begin(spatial, 0), end(spatial, 0), out(spatial);
  SmallVector<int64_t> extra(*outputPadding);
  bool same = autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER";
  if (autoPad != "NOTSET" && autoPad != "VALID" && !same)
    return ctx.error("auto_pad '" + autoPad + "' is not NOTSET, VALID, "
                     "SAME_UPPER or SAME_LOWER");
  if (outputShape) {
    SmallVector<int64_t> shape = *outputShape;
    if (static_cast<int64_t>(shape.size()) == rank)
      shape.erase(shape.begin(), shape.begin() + 2);
    if (static_cast<int64_t>(shape.size()) != spatial)
      return ctx.error("output_shape needs " + Twine(spatial) + " entries");
    outputShape = shape;
  }
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t s = (*strides)[i], d = (*dilations)[i], k = kernel[i];
    if (s < 1 || d < 1 || k < 1)
      return ctx.error("kernel_shape, strides and dilations must be positive");
    int64_t natural = s * (inputType.getDimSize(i + 2) - 1) + (k - 1) * d + 1;
    if (outputShape || same) {
      int64_t target = outputShape ? (*outputShape)[i]
                                   : inputType.getDimSize(i + 2) * s;
      int64_t total = natural + extra[i] - target;
      if (total >= 0) {
        int64_t small = total / 2, large = total - small;
        bool upper = autoPad == "SAME_UPPER";
        begin[i] = upper ? small : large;
        end[i] = upper ? large : small;
      } else {
        extra[i] -= total; // a larger output: positions at the end
      }
    } else if (pads && autoPad == "NOTSET") {
      if (static_cast<int64_t>(pads->size()) != 2 * spatial)
        return ctx.error("pads needs " + Twine(2 * spatial) +
                         " entries, got " + Twine(pads->size()));
      begin[i] = (*pads)[i];
      end[i] = (*pads)[i + spatial];
    }
    if (begin[i] < 0 || end[i] < 0)
      return ctx.error("pads must not be negative");
    if (extra[i] < 0 || extra[i] >= s)
      return ctx.error("output padding " + Twine(extra[i]) + " of axis " +
                       Twine(i + 2) + " must be in [0, stride " + Twine(s) +
                       ")");
    out[i] = natural + extra[i] - begin[i] - end[i];
    if (out[i] < 1)
      return ctx.error("pads " + Twine(begin[i]) + ", " + Twine(end[i]) +
                       " leave no output on axis " + Twine(i + 2));
  }
  int64_t outChannels = weightType.getDimSize(1) * group;
  SmallVector<int64_t> resultShape{inputType.getDimSize(0), outChannels};
  resultShape.append(out);
  SmallVector<int64_t> allPads(begin);
  allPads.append(end);
  auto &b = ctx.builder();
  FailureOr<Value> y = emitValue(ctx.createTyped<ds::ConvGradInputOp>(
      {inputType.clone(resultShape)}, {*input, *weight},
      {ctx.named("strides", b.getDenseI64ArrayAttr(*strides)),
       ctx.named("pads", b.getDenseI64ArrayAttr(allPads)),
       ctx.named("dilations", b.getDenseI64ArrayAttr(*dilations)),
       ctx.named("group", b.getI64IntegerAttr(group))}));
  if (failed(y))
    return failure();
  if (ctx.hasInput(2)) {
    FailureOr<Value> bias = ctx.input(2);
    if (failed(bias))
      return failure();
    auto biasType = cast<RankedTensorType>(bias->getType());
    if (biasType.getRank() != 1 || biasType.getDimSize(0) != outChannels)
      return ctx.error("bias must be [" + Twine(outChannels) + "], got " +
                       shapeString(biasType.getShape()));
    SmallVector<int64_t> shape(rank - 1, 1);
    shape[0] = outChannels;
    FailureOr<Value> shaped = emitReshape(ctx, *bias, shape);
    if (succeeded(shaped))
      y = emitValue(ctx.create<ds::AddOp>({*y, *shaped}));
    if (failed(shaped) || failed(y))
      return failure();
  }
  ctx.setOutput(0, *y);
  return success();
}

//===----------------------------------------------------------------------===//
// Converters: indices, one-hot, norms and contractions built from ds ops
//===----------------------------------------------------------------------===//

/// Indices with the negative ones counted from the end: where(i < 0,
/// i + size, i), `size` a scalar or a tensor that broadcasts against i.
FailureOr<Value> emitWrapNegative(NodeContext &ctx, Value indices,
                                  Value size) {
  FailureOr<Value> zero = scalarLike(ctx, indices, 0.0);
  if (failed(zero))
    return failure();
  FailureOr<Value> negative =
      emitCompare(ctx, ds::ComparePredicate::lt, indices, *zero);
  FailureOr<Value> wrapped = emitValue(ctx.create<ds::AddOp>({indices, size}));
  if (failed(negative) || failed(wrapped))
    return failure();
  return emitWhere(ctx, *negative, *wrapped, indices);
}

/// The constant 0, 1, ..., n - 1 (i64) shaped to broadcast along `axis` of
/// a tensor of rank `rank`.
FailureOr<Value> emitIota(NodeContext &ctx, int64_t n, int64_t axis,
                          int64_t rank) {
  SmallVector<int64_t> shape(rank - axis, 1);
  shape[0] = n;
  std::vector<int64_t> values(n);
  for (int64_t i = 0; i < n; ++i)
    values[i] = i;
  return ctx.materialize(
      HostTensor::ofInts(DType::Int64, shape, std::move(values)));
}

/// ArgMax and ArgMin: the index (i64) of the first (or, with
/// select_last_index, the last) extreme element along `axis`, a NaN
/// counting as the extreme (numpy, PyTorch). Composed of reduce_max,
/// compare and where; an index carries no derivative.
template <bool IsMax>
LogicalResult convertArgExtremum(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  int64_t axis, keepdims, last;
  if (failed(input) || failed(ctx.intAttr("axis", axis, 0)) ||
      failed(ctx.intAttr("keepdims", keepdims, 1)) ||
      failed(ctx.intAttr("select_last_index", last, 0)) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Numeric)))
    return failure();
  auto type = cast<RankedTensorType>(input->getType());
  int64_t rank = type.getRank();
  FailureOr<int64_t> normalized = ctx.normalizeAxis(axis, rank);
  if (failed(normalized))
    return failure();
  int64_t n = type.getDimSize(*normalized);
  if (n == 0)
    return ctx.error("axis " + Twine(axis) + " is empty: no index to return");
  bool isFloat = isa<FloatType>(type.getElementType());
  Value x = *input;
  if (!IsMax) { // the minimum of x is the maximum of -x (-1 - x for ints)
    FailureOr<Value> flipped = emitOrderFlip(ctx, x);
    if (failed(flipped))
      return failure();
    x = *flipped;
  }
  FailureOr<Value> max =
      emitReduction<ds::ReduceMaxOp>(ctx, x, {*normalized}, true);
  if (failed(max))
    return failure();
  FailureOr<Value> hit = emitCompare(ctx, ds::ComparePredicate::eq, x, *max);
  if (failed(hit))
    return failure();
  if (isFloat) { // the max is NaN where the row holds one: pick the NaNs
    FailureOr<Value> ordered =
        emitCompare(ctx, ds::ComparePredicate::eq, x, x);
    FailureOr<Value> yes =
        ctx.materialize(HostTensor::ofInts(DType::Bool, {}, {1}));
    if (failed(ordered) || failed(yes))
      return failure();
    hit = emitWhere(ctx, *ordered, *hit, *yes);
    if (failed(hit))
      return failure();
  }
  FailureOr<Value> iota = emitIota(ctx, n, *normalized, rank);
  if (failed(iota))
    return failure();
  // First: the largest of n - 1 - index; last: the largest index.
  Value position = *iota;
  if (!last) {
    FailureOr<Value> top = ctx.materialize(
        HostTensor::ofInts(DType::Int64, {}, {n - 1}));
    if (failed(top))
      return failure();
    FailureOr<Value> reversed =
        emitValue(ctx.create<ds::SubOp>({*top, position}));
    if (failed(reversed))
      return failure();
    position = *reversed;
  }
  FailureOr<Value> none =
      ctx.materialize(HostTensor::ofInts(DType::Int64, {}, {-1}));
  if (failed(none))
    return failure();
  FailureOr<Value> candidates = emitWhere(ctx, *hit, position, *none);
  if (failed(candidates))
    return failure();
  FailureOr<Value> best = emitReduction<ds::ReduceMaxOp>(
      ctx, *candidates, {*normalized}, keepdims != 0);
  if (failed(best))
    return failure();
  if (!last) {
    FailureOr<Value> top = ctx.materialize(
        HostTensor::ofInts(DType::Int64, {}, {n - 1}));
    if (failed(top))
      return failure();
    best = emitValue(ctx.create<ds::SubOp>({*top, *best}));
    if (failed(best))
      return failure();
  }
  ctx.setOutput(0, *best);
  return success();
}

/// OneHot: where(indices == iota, on, off), the iota along `axis`; negative
/// indices count from depth, others outside [-depth, depth) give a row of
/// off values. depth must be known at compile time.
LogicalResult convertOneHot(NodeContext &ctx) {
  FailureOr<Value> indices = ctx.input(0), values = ctx.input(2);
  int64_t axis;
  if (failed(indices) || failed(values) ||
      failed(ctx.intAttr("axis", axis, -1)) ||
      failed(requireElementKind(ctx, 0, *indices, ElementKind::Numeric)))
    return failure();
  const HostTensor *depthInput = ctx.constInput(1, /*readParameters=*/true);
  if (!depthInput || depthInput->numElements() != 1)
    return ctx.error("depth must be a scalar known at compile time");
  int64_t depth = depthInput->isFloat()
                      ? static_cast<int64_t>(depthInput->floatAt(0))
                      : depthInput->intAt(0);
  if (depth < 1)
    return ctx.error("depth " + Twine(depth) + " is not positive");
  auto indexType = cast<RankedTensorType>(indices->getType());
  auto valueType = cast<RankedTensorType>(values->getType());
  if (valueType.getNumElements() != 2)
    return ctx.error("values must hold 2 elements [off, on], got shape " +
                     shapeString(valueType.getShape()));
  int64_t rank = indexType.getRank() + 1;
  FailureOr<int64_t> normalized = ctx.normalizeAxis(axis, rank);
  if (failed(normalized))
    return failure();
  Value index = *indices;
  auto i64 = IntegerType::get(ctx.context(), 64);
  if (indexType.getElementType() != i64) {
    FailureOr<Value> cast = emitValue(
        ctx.createTyped<ds::CastOp>({indexType.clone(i64)}, {index}));
    if (failed(cast))
      return failure();
    index = *cast;
  }
  FailureOr<Value> depthValue = scalarLike(ctx, index, depth);
  if (failed(depthValue))
    return failure();
  FailureOr<Value> fixed = emitWrapNegative(ctx, index, *depthValue);
  if (failed(fixed))
    return failure();
  SmallVector<int64_t> expanded(indexType.getShape());
  expanded.insert(expanded.begin() + *normalized, 1);
  FailureOr<Value> column = emitReshape(ctx, *fixed, expanded);
  FailureOr<Value> iota = emitIota(ctx, depth, *normalized, rank);
  if (failed(column) || failed(iota))
    return failure();
  FailureOr<Value> hit =
      emitCompare(ctx, ds::ComparePredicate::eq, *column, *iota);
  if (failed(hit))
    return failure();
  // off and on as scalars.
  FailureOr<Value> flat = emitReshape(ctx, *values, {2});
  if (failed(flat))
    return failure();
  auto &b = ctx.builder();
  Value pick[2];
  for (int64_t i = 0; i < 2; ++i) {
    FailureOr<Value> one = emitValue(ctx.createTyped<ds::SliceOp>(
        {valueType.clone({1})}, {*flat},
        {ctx.named("offsets", b.getDenseI64ArrayAttr({i})),
         ctx.named("strides", b.getDenseI64ArrayAttr({1}))}));
    if (succeeded(one))
      one = emitReshape(ctx, *one, {});
    if (failed(one))
      return failure();
    pick[i] = *one;
  }
  FailureOr<Value> result = emitWhere(ctx, *hit, pick[1], pick[0]);
  if (failed(result))
    return failure();
  SmallVector<int64_t> outShape(expanded);
  outShape[*normalized] = depth;
  FailureOr<Value> full = emitBroadcast(ctx, *result, outShape);
  if (failed(full))
    return failure();
  ctx.setOutput(0, *full);
  return success();
}

/// LpNormalization: x / ||x||_p along `axis` (p = 1 or 2), norms as
/// ReduceL1 and ReduceL2 compose them.
LogicalResult convertLpNorm(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  int64_t axis, p;
  if (failed(input) || failed(ctx.intAttr("axis", axis, -1)) ||
      failed(ctx.intAttr("p", p, 2)) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Float)))
    return failure();
  if (p != 1 && p != 2)
    return ctx.error("p = " + Twine(p) + " is not 1 or 2");
  Value x = *input;
  FailureOr<int64_t> normalized =
      ctx.normalizeAxis(axis, cast<RankedTensorType>(x.getType()).getRank());
  if (failed(normalized))
    return failure();
  FailureOr<Value> norm;
  if (p == 1) {
    FailureOr<Value> absolute = emitAbsolute(ctx, x);
    if (failed(absolute))
      return failure();
    norm = emitReduction<ds::ReduceSumOp>(ctx, *absolute, {*normalized}, true);
  } else {
    FailureOr<Value> square = emitValue(ctx.create<ds::MulOp>({x, x}));
    if (failed(square))
      return failure();
    norm = emitReduction<ds::ReduceSumOp>(ctx, *square, {*normalized}, true);
    if (succeeded(norm))
      norm = emitSafeSqrt(ctx, *norm);
  }
  if (failed(norm))
    return failure();
  return ctx.emit<ds::DivOp>(0, {x, *norm});
}

/// One operand of an Einsum: its value and one letter per axis.
struct EinsumTerm {
  Value value;
  std::string letters;
};

/// `term` with the axes whose letters `keep` lacks summed away.
FailureOr<EinsumTerm> einsumSumOut(NodeContext &ctx, EinsumTerm term,
                                   StringRef keep) {
  SmallVector<int64_t> axes;
  std::string rest;
  for (auto [i, letter] : llvm::enumerate(term.letters)) {
    if (keep.contains(letter))
      rest.push_back(letter);
    else
      axes.push_back(static_cast<int64_t>(i));
  }
  if (axes.empty())
    return term;
  FailureOr<Value> summed =
      emitReduction<ds::ReduceSumOp>(ctx, term.value, axes, false);
  if (failed(summed))
    return failure();
  return EinsumTerm{*summed, rest};
}

/// `term` transposed to the letter order `order` (a permutation of its
/// letters).
FailureOr<Value> einsumArrange(NodeContext &ctx, const EinsumTerm &term,
                               StringRef order) {
  SmallVector<int64_t> perm;
  for (char letter : order)
    perm.push_back(static_cast<int64_t>(term.letters.find(letter)));
  return emitTranspose(ctx, term.value, perm);
}

/// The product of two terms summed over the letters `keep` lacks: a batched
/// ds.matmul of [batch, a-only, shared] by [batch, shared, b-only].
FailureOr<EinsumTerm> einsumPair(NodeContext &ctx, EinsumTerm a, EinsumTerm b,
                                 StringRef keep) {
  // Letters only one side has and nobody keeps are summed first.
  std::string aKeep = (keep + b.letters).str(), bKeep = (keep + a.letters).str();
  FailureOr<EinsumTerm> sa = einsumSumOut(ctx, a, aKeep);
  FailureOr<EinsumTerm> sb = einsumSumOut(ctx, b, bKeep);
  if (failed(sa) || failed(sb))
    return failure();
  a = *sa;
  b = *sb;
  std::string batch, contracted, aOnly, bOnly;
  for (char letter : a.letters) {
    bool inB = b.letters.find(letter) != std::string::npos;
    if (inB)
      (keep.contains(letter) ? batch : contracted).push_back(letter);
    else
      aOnly.push_back(letter);
  }
  for (char letter : b.letters)
    if (a.letters.find(letter) == std::string::npos)
      bOnly.push_back(letter);
  auto typeA = cast<RankedTensorType>(a.value.getType());
  auto typeB = cast<RankedTensorType>(b.value.getType());
  auto size = [&](const EinsumTerm &t, RankedTensorType type, char letter) {
    return type.getDimSize(t.letters.find(letter));
  };
  auto product = [&](const EinsumTerm &t, RankedTensorType type,
                     StringRef letters) {
    int64_t p = 1;
    for (char letter : letters)
      p *= size(t, type, letter);
    return p;
  };
  for (char letter : batch + contracted)
    if (size(a, typeA, letter) != size(b, typeB, letter))
      return ctx.error(Twine("index '") + Twine(letter) + "' has sizes " +
                       Twine(size(a, typeA, letter)) + " and " +
                       Twine(size(b, typeB, letter)) + " in two operands");
  FailureOr<Value> la = einsumArrange(ctx, a, batch + aOnly + contracted);
  FailureOr<Value> lb = einsumArrange(ctx, b, batch + contracted + bOnly);
  if (failed(la) || failed(lb))
    return failure();
  int64_t nb = product(a, typeA, batch), na = product(a, typeA, aOnly),
          nc = product(a, typeA, contracted), nbo = product(b, typeB, bOnly);
  FailureOr<Value> ma = emitReshape(ctx, *la, {nb, na, nc});
  FailureOr<Value> mb = emitReshape(ctx, *lb, {nb, nc, nbo});
  if (failed(ma) || failed(mb))
    return failure();
  FailureOr<Value> mm = emitValue(ctx.create<ds::MatMulOp>({*ma, *mb}));
  if (failed(mm))
    return failure();
  SmallVector<int64_t> shape;
  for (char letter : batch + aOnly)
    shape.push_back(size(a, typeA, letter));
  for (char letter : bOnly)
    shape.push_back(size(b, typeB, letter));
  FailureOr<Value> result = emitReshape(ctx, *mm, shape);
  if (failed(result))
    return failure();
  return EinsumTerm{*result, batch + aOnly + bOnly};
}

/// Einsum of explicit or implicit form, ellipses included: pairwise
/// contractions (left to right) by ds.matmul, the indices no later operand
/// or the output uses summed as early as possible. A letter repeated
/// within one operand (a diagonal) is not supported.
LogicalResult convertEinsum(NodeContext &ctx) {
  std::string equation;
  if (failed(ctx.stringAttr("equation", equation)))
    return failure();
  equation.erase(llvm::remove_if(equation, ::isspace), equation.end());
  StringRef eq(equation);
  auto [lhs, rhs] = eq.split("->");
  bool explicitOutput = eq.contains("->");
  SmallVector<StringRef> specs;
  lhs.split(specs, ',');
  if (specs.size() != ctx.numInputs())
    return ctx.error("equation '" + equation + "' names " +
                     Twine(specs.size()) + " operands, the node has " +
                     Twine(ctx.numInputs()));
  // Ellipsis letters: characters that cannot occur in an equation.
  const std::string ellipsisLetters = "0123456789!#$%&";
  int64_t ellipsisRank = 0;
  SmallVector<EinsumTerm> terms;
  for (auto [i, spec] : llvm::enumerate(specs)) {
    FailureOr<Value> value = ctx.input(i);
    if (failed(value) ||
        failed(requireElementKind(ctx, i, *value, ElementKind::Float)))
      return failure();
    auto type = cast<RankedTensorType>(value->getType());
    std::string letters;
    size_t dots = spec.find("...");
    int64_t named = static_cast<int64_t>(spec.size()) -
                    (dots == StringRef::npos ? 0 : 3);
    if (dots != StringRef::npos) {
      int64_t covered = type.getRank() - named;
      if (covered < 0)
        return ctx.error("operand " + Twine(i) + " of rank " +
                         Twine(type.getRank()) + " has too few axes for '" +
                         spec + "'");
      if (covered > static_cast<int64_t>(ellipsisLetters.size()))
        return ctx.error("an ellipsis covers too many axes");
      ellipsisRank = std::max(ellipsisRank, covered);
      // Right-aligned, as broadcasting: the last covered axis is letter 0.
      std::string middle;
      for (int64_t k = covered - 1; k >= 0; --k)
        middle.push_back(ellipsisLetters[k]);
      letters = (spec.take_front(dots) + middle + spec.drop_front(dots + 3)).str();
    } else {
      letters = spec.str();
      if (named != type.getRank())
        return ctx.error("operand " + Twine(i) + " has rank " +
                         Twine(type.getRank()) + " but '" + spec + "' names " +
                         Twine(named) + " axes");
    }
    for (char letter : letters) {
      if (!isalpha(letter) && ellipsisLetters.find(letter) == std::string::npos)
        return ctx.error("equation '" + equation + "' has a character '" +
                         Twine(letter) + "' that is not a letter");
      if (llvm::count(letters, letter) > 1)
        return ctx.error("index '" + Twine(letter) + "' repeats within "
                         "operand " + Twine(i) + " (a diagonal): not "
                         "supported");
    }
    terms.push_back({*value, letters});
  }
  std::string ellipsis;
  for (int64_t k = ellipsisRank - 1; k >= 0; --k)
    ellipsis.push_back(ellipsisLetters[k]);
  std::string output;
  if (explicitOutput) {
    size_t dots = rhs.find("...");
    output = dots == StringRef::npos
                 ? rhs.str()
                 : (rhs.take_front(dots) + ellipsis + rhs.drop_front(dots + 3))
                       .str();
  } else { // implicit: the ellipsis, then letters used once, sorted
    std::string all;
    for (const EinsumTerm &t : terms)
      all += t.letters;
    std::string once;
    for (char letter : all)
      if (isalpha(letter) && llvm::count(all, letter) == 1)
        once.push_back(letter);
    llvm::sort(once);
    output = ellipsis + once;
  }
  for (char letter : output) {
    if (llvm::count(output, letter) > 1)
      return ctx.error("output index '" + Twine(letter) + "' repeats");
    if (llvm::none_of(terms, [&](const EinsumTerm &t) {
          return t.letters.find(letter) != std::string::npos;
        }))
      return ctx.error("output index '" + Twine(letter) +
                       "' appears in no operand");
  }
  // Broadcast ellipsis axes of size 1 are not supported: sizes must agree.
  EinsumTerm acc = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) {
    std::string keep = output;
    for (size_t j = i + 1; j < terms.size(); ++j)
      keep += terms[j].letters;
    FailureOr<EinsumTerm> next = einsumPair(ctx, acc, terms[i], keep);
    if (failed(next))
      return failure();
    acc = *next;
  }
  FailureOr<EinsumTerm> reduced = einsumSumOut(ctx, acc, output);
  if (failed(reduced))
    return failure();
  FailureOr<Value> result = einsumArrange(ctx, *reduced, output);
  if (failed(result))
    return failure();
  ctx.setOutput(0, *result);
  return success();
}

/// The flat position in `data` of every element of `indices` (normalized:
/// negative ones count from the end) along `axis`, the other coordinates
/// those of the element itself: GatherElements' addressing.
FailureOr<Value> elementPositions(NodeContext &ctx, Value indices,
                                  RankedTensorType dataType, int64_t axis) {
  auto indexType = cast<RankedTensorType>(indices.getType());
  int64_t rank = indexType.getRank();
  SmallVector<int64_t> strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * dataType.getDimSize(d + 1);
  int64_t dim = dataType.getDimSize(axis);
  FailureOr<Value> size = scalarLike(ctx, indices, dim);
  if (failed(size))
    return failure();
  FailureOr<Value> position = emitWrapNegative(ctx, indices, *size);
  if (failed(position))
    return failure();
  FailureOr<Value> stride = scalarLike(ctx, indices, strides[axis]);
  if (failed(stride))
    return failure();
  position = emitValue(ctx.create<ds::MulOp>({*position, *stride}));
  if (failed(position))
    return failure();
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axis || indexType.getDimSize(d) == 1)
      continue;
    SmallVector<int64_t> shape(rank - d, 1);
    shape[0] = indexType.getDimSize(d);
    std::vector<int64_t> offsets;
    for (int64_t k = 0; k < indexType.getDimSize(d); ++k)
      offsets.push_back(k * strides[d]);
    FailureOr<Value> offset = ctx.materialize(
        HostTensor::ofInts(DType::Int64, shape, std::move(offsets)));
    if (failed(offset))
      return failure();
    position = emitValue(ctx.create<ds::AddOp>({*position, *offset}));
    if (failed(position))
      return failure();
  }
  return position;
}

/// Integer indices as int64 (ONNX allows int32 too), or an error.
FailureOr<Value> int64Indices(NodeContext &ctx, Value indices) {
  auto type = cast<RankedTensorType>(indices.getType());
  Type i64 = IntegerType::get(ctx.context(), 64);
  if (type.getElementType() == i64)
    return indices;
  if (type.getElementType() != IntegerType::get(ctx.context(), 32))
    return ctx.error("indices must be int64 or int32");
  return emitValue(ctx.createTyped<ds::CastOp>({type.clone(i64)}, {indices}));
}

/// The operands GatherElements and ScatterElements share: indices of the
/// data's rank, no larger than the data off `axis`, constant ones in range.
/// Returns the normalized axis.
FailureOr<int64_t> checkElementIndices(NodeContext &ctx,
                                       RankedTensorType dataType,
                                       RankedTensorType indexType,
                                       unsigned indicesInput, int64_t axis) {
  if (indexType.getRank() != dataType.getRank())
    return ctx.error("indices " + shapeString(indexType.getShape()) +
                     " and data " + shapeString(dataType.getShape()) +
                     " must have the same rank");
  FailureOr<int64_t> normalized = ctx.normalizeAxis(axis, dataType.getRank());
  if (failed(normalized))
    return failure();
  for (int64_t d = 0; d < dataType.getRank(); ++d)
    if (d != *normalized && indexType.getDimSize(d) > dataType.getDimSize(d))
      return ctx.error("indices " + shapeString(indexType.getShape()) +
                       " exceed data " + shapeString(dataType.getShape()) +
                       " on axis " + Twine(d));
  if (const HostTensor *known = ctx.constInput(indicesInput)) {
    int64_t dim = dataType.getDimSize(*normalized);
    for (int64_t i = 0, n = known->splat ? 1 : known->numElements(); i < n;
         ++i)
      if (known->intAt(i) < -dim || known->intAt(i) >= dim)
        return ctx.error("index " + Twine(known->intAt(i)) +
                         " is out of range for axis " + Twine(*normalized) +
                         " of size " + Twine(dim));
  }
  return *normalized;
}

/// `data` at the elements GatherElements' `indices` (int64) address along
/// `axis`: ds.gather of the flattened data at their flat positions, so the
/// derivative is gather's scatter-add.
FailureOr<Value> emitGatherElements(NodeContext &ctx, Value data,
                                    Value indices, int64_t axis) {
  auto dataType = cast<RankedTensorType>(data.getType());
  FailureOr<Value> positions = elementPositions(ctx, indices, dataType, axis);
  FailureOr<Value> flat = emitReshape(ctx, data, {dataType.getNumElements()});
  if (failed(positions) || failed(flat))
    return failure();
  return emitValue(ctx.create<ds::GatherOp>(
      {*flat, *positions},
      {ctx.named("axis", ctx.builder().getI64IntegerAttr(0))}));
}

/// GatherElements: the data gathered at the flat positions of the indices.
LogicalResult convertGatherElements(NodeContext &ctx) {
  FailureOr<Value> data = ctx.input(0), indices = ctx.input(1);
  int64_t axis;
  if (failed(data) || failed(indices) || failed(ctx.intAttr("axis", axis, 0)))
    return failure();
  auto dataType = cast<RankedTensorType>(data->getType());
  FailureOr<int64_t> normalized = checkElementIndices(
      ctx, dataType, cast<RankedTensorType>(indices->getType()), 1, axis);
  if (failed(normalized))
    return failure();
  indices = int64Indices(ctx, *indices);
  if (failed(indices))
    return failure();
  FailureOr<Value> result =
      emitGatherElements(ctx, *data, *indices, *normalized);
  if (failed(result))
    return failure();
  ctx.setOutput(0, *result);
  return success();
}

/// The index tuples of GatherND / ScatterND (the last axis of `indices`
/// addresses the leading axes of the data after `batchDims`), checked, as
/// positions in the data reshaped to [B * prod(addressed), slice...]: the
/// dot product of each tuple (negative entries counted from the end) with
/// the strides, plus its batch's block. Sets `tupleSize` to the tuple's
/// length.
FailureOr<Value> emitTuplePositions(NodeContext &ctx, Value indices,
                                    RankedTensorType dataType,
                                    int64_t batchDims, int64_t &tupleSize) {
  auto indexType = cast<RankedTensorType>(indices.getType());
  if (indexType.getElementType() != IntegerType::get(ctx.context(), 64))
    return ctx.error("indices must be int64");
  int64_t r = dataType.getRank(), q = indexType.getRank();
  if (q < 1 || batchDims < 0 || batchDims >= std::min(r, q))
    return ctx.error("batch_dims " + Twine(batchDims) +
                     " must be less than the ranks of data and indices");
  int64_t k = indexType.getDimSize(q - 1);
  if (k < 1 || batchDims + k > r)
    return ctx.error("indices address " + Twine(k) + " axes; data of rank " +
                     Twine(r) + " with batch_dims " + Twine(batchDims) +
                     " has " + Twine(r - batchDims));
  for (int64_t d = 0; d < batchDims; ++d)
    if (indexType.getDimSize(d) != dataType.getDimSize(d))
      return ctx.error("batch axis " + Twine(d) + " differs between data " +
                       shapeString(dataType.getShape()) + " and indices " +
                       shapeString(indexType.getShape()));
  tupleSize = k;
  std::vector<int64_t> strides(k, 1);
  for (int64_t j = k - 2; j >= 0; --j)
    strides[j] = strides[j + 1] * dataType.getDimSize(batchDims + j + 1);
  int64_t addressed = 1;
  for (int64_t j = 0; j < k; ++j)
    addressed *= dataType.getDimSize(batchDims + j);
  // Negative indices count from the end of their axis.
  std::vector<int64_t> sizes;
  for (int64_t j = 0; j < k; ++j)
    sizes.push_back(dataType.getDimSize(batchDims + j));
  FailureOr<Value> dims =
      ctx.materialize(HostTensor::ofInts(DType::Int64, {k}, sizes));
  FailureOr<Value> strideValue =
      ctx.materialize(HostTensor::ofInts(DType::Int64, {k}, strides));
  if (failed(dims) || failed(strideValue))
    return failure();
  FailureOr<Value> fixed = emitWrapNegative(ctx, indices, *dims);
  if (failed(fixed))
    return failure();
  FailureOr<Value> scaled =
      emitValue(ctx.create<ds::MulOp>({*fixed, *strideValue}));
  if (failed(scaled))
    return failure();
  FailureOr<Value> position =
      emitReduction<ds::ReduceSumOp>(ctx, *scaled, {q - 1}, false);
  if (failed(position))
    return failure();
  int64_t batch = 1;
  for (int64_t d = 0; d < batchDims; ++d)
    batch *= dataType.getDimSize(d);
  if (batchDims > 0) { // offset every batch element by its block
    SmallVector<int64_t> shape(indexType.getShape().drop_back());
    std::vector<int64_t> offsets;
    for (int64_t bIndex = 0; bIndex < batch; ++bIndex)
      offsets.push_back(bIndex * addressed);
    SmallVector<int64_t> offsetShape(shape.begin(), shape.begin() + batchDims);
    offsetShape.append(q - 1 - batchDims, 1);
    FailureOr<Value> offset = ctx.materialize(
        HostTensor::ofInts(DType::Int64, offsetShape, std::move(offsets)));
    if (failed(offset))
      return failure();
    position = emitValue(ctx.create<ds::AddOp>({*position, *offset}));
  }
  return position;
}

/// GatherND: ds.gather picks the slices of the data reshaped to
/// [positions, slice...] at the index tuples' positions.
LogicalResult convertGatherND(NodeContext &ctx) {
  FailureOr<Value> data = ctx.input(0), indices = ctx.input(1);
  int64_t batchDims, k;
  if (failed(data) || failed(indices) ||
      failed(ctx.intAttr("batch_dims", batchDims, 0)))
    return failure();
  auto dataType = cast<RankedTensorType>(data->getType());
  FailureOr<Value> position =
      emitTuplePositions(ctx, *indices, dataType, batchDims, k);
  if (failed(position))
    return failure();
  int64_t rows = 1;
  for (int64_t d = 0; d < batchDims + k; ++d)
    rows *= dataType.getDimSize(d);
  SmallVector<int64_t> table{rows};
  for (int64_t d = batchDims + k; d < dataType.getRank(); ++d)
    table.push_back(dataType.getDimSize(d));
  FailureOr<Value> flat = emitReshape(ctx, *data, table);
  if (failed(flat))
    return failure();
  return ctx.emit<ds::GatherOp>(
      0, {*flat, *position},
      {ctx.named("axis", ctx.builder().getI64IntegerAttr(0))});
}

/// The `reduction` attribute of ScatterElements / ScatterND: none, add and
/// mul from opset 16, max and min from 18.
FailureOr<ds::ScatterReduction> scatterReduction(NodeContext &ctx) {
  std::string name;
  if (failed(ctx.stringAttr("reduction", name, StringRef("none"))))
    return failure();
  std::optional<ds::ScatterReduction> reduction =
      ds::symbolizeScatterReduction(name);
  if (!reduction)
    return ctx.error("attribute 'reduction': '" + name +
                     "' is not none, add, mul, max or min");
  int64_t since = *reduction == ds::ScatterReduction::none ? 0
                  : *reduction == ds::ScatterReduction::add ||
                          *reduction == ds::ScatterReduction::mul
                      ? 16
                      : 18;
  if (ctx.opset < since)
    return ctx.error("attribute 'reduction': '" + name +
                     "' needs opset " + Twine(since) + " (the model has " +
                     Twine(ctx.opset) + ")");
  return *reduction;
}

/// ds.scatter of `updates` into `data` at flat `positions` (the updates'
/// shape), lines along `axis` addressing distinct elements.
LogicalResult emitScatter(NodeContext &ctx, Value data, Value positions,
                          Value updates, int64_t axis,
                          ds::ScatterReduction reduction) {
  auto dataType = cast<RankedTensorType>(data.getType());
  auto updateType = cast<RankedTensorType>(updates.getType());
  if (updateType.getElementType() != dataType.getElementType())
    return ctx.error("updates and data must have the same element type");
  return ctx.emit<ds::ScatterOp>(
      0, {data, positions, updates},
      {ctx.named("axis", ctx.builder().getI64IntegerAttr(axis)),
       ctx.named("reduction", ds::ScatterReductionAttr::get(ctx.context(),
                                                            reduction))});
}

/// ScatterElements: ds.scatter at the flat positions of the indices (as
/// GatherElements addresses them); updates differing off `axis` land on
/// distinct elements.
LogicalResult convertScatterElements(NodeContext &ctx) {
  FailureOr<Value> data = ctx.input(0), indices = ctx.input(1),
                   updates = ctx.input(2);
  int64_t axis;
  if (failed(data) || failed(indices) || failed(updates) ||
      failed(ctx.intAttr("axis", axis, 0)))
    return failure();
  FailureOr<ds::ScatterReduction> reduction = scatterReduction(ctx);
  if (failed(reduction))
    return failure();
  auto dataType = cast<RankedTensorType>(data->getType());
  auto indexType = cast<RankedTensorType>(indices->getType());
  auto updateType = cast<RankedTensorType>(updates->getType());
  if (updateType.getShape() != indexType.getShape())
    return ctx.error("updates " + shapeString(updateType.getShape()) +
                     " and indices " + shapeString(indexType.getShape()) +
                     " must have the same shape");
  FailureOr<int64_t> normalized =
      checkElementIndices(ctx, dataType, indexType, 1, axis);
  if (failed(normalized))
    return failure();
  indices = int64Indices(ctx, *indices);
  if (failed(indices))
    return failure();
  FailureOr<Value> positions =
      elementPositions(ctx, *indices, dataType, *normalized);
  if (failed(positions))
    return failure();
  return emitScatter(ctx, *data, *positions, *updates, *normalized,
                     *reduction);
}

/// ScatterND: each index tuple addresses a slice of the data; the slice's
/// elements get the positions tuple * slice size + 0..slice-1, one line
/// (axis 0 of [tuples, slice]) per slice element.
LogicalResult convertScatterND(NodeContext &ctx) {
  FailureOr<Value> data = ctx.input(0), indices = ctx.input(1),
                   updates = ctx.input(2);
  if (failed(data) || failed(indices) || failed(updates))
    return failure();
  FailureOr<ds::ScatterReduction> reduction = scatterReduction(ctx);
  if (failed(reduction))
    return failure();
  auto dataType = cast<RankedTensorType>(data->getType());
  auto indexType = cast<RankedTensorType>(indices->getType());
  auto updateType = cast<RankedTensorType>(updates->getType());
  int64_t k;
  FailureOr<Value> tuples = emitTuplePositions(ctx, *indices, dataType, 0, k);
  if (failed(tuples))
    return failure();
  SmallVector<int64_t> expected(indexType.getShape().drop_back());
  llvm::append_range(expected, dataType.getShape().drop_front(k));
  if (updateType.getShape() != ArrayRef<int64_t>(expected))
    return ctx.error("updates " + shapeString(updateType.getShape()) +
                     " must be indices.shape[:-1] + data.shape[" + Twine(k) +
                     ":] = " + shapeString(expected));
  int64_t slice = 1, count = 1;
  for (int64_t d = k; d < dataType.getRank(); ++d)
    slice *= dataType.getDimSize(d);
  for (int64_t d = 0; d + 1 < indexType.getRank(); ++d)
    count *= indexType.getDimSize(d);
  FailureOr<Value> rows = emitReshape(ctx, *tuples, {count, 1});
  FailureOr<Value> sliceSize =
      ctx.materialize(HostTensor::ofInts(DType::Int64, {}, {slice}));
  FailureOr<Value> iota = emitIota(ctx, slice, 1, 2);
  if (failed(rows) || failed(sliceSize) || failed(iota))
    return failure();
  FailureOr<Value> starts =
      emitValue(ctx.create<ds::MulOp>({*rows, *sliceSize}));
  if (failed(starts))
    return failure();
  FailureOr<Value> positions =
      emitValue(ctx.create<ds::AddOp>({*starts, *iota}));
  FailureOr<Value> lines = emitReshape(ctx, *updates, {count, slice});
  if (failed(positions) || failed(lines))
    return failure();
  return emitScatter(ctx, *data, *positions, *lines, 0, *reduction);
}

/// TopK: ds.top_k finds the indices (k known at import); the values are
/// GatherElements of the input at them, so their derivative scatters the
/// gradient to the chosen elements. `sorted` = 0 allows any order; the
/// sorted one is returned.
LogicalResult convertTopK(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  int64_t axis, largest, sorted;
  if (failed(input) || failed(ctx.intAttr("axis", axis, -1)) ||
      failed(ctx.intAttr("largest", largest, 1)) ||
      failed(ctx.intAttr("sorted", sorted, 1)) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Numeric)))
    return failure();
  FailureOr<SmallVector<int64_t>> k = ctx.constInts(1, "K");
  if (failed(k))
    return failure();
  auto type = cast<RankedTensorType>(input->getType());
  FailureOr<int64_t> normalized = ctx.normalizeAxis(axis, type.getRank());
  if (failed(normalized))
    return failure();
  if (k->size() != 1)
    return ctx.error("K must hold one value, got " + Twine(k->size()));
  int64_t extent = type.getDimSize(*normalized);
  if ((*k)[0] < 0 || (*k)[0] > extent)
    return ctx.error("K = " + Twine((*k)[0]) + " is not in [0, " +
                     Twine(extent) + "], the size of axis " +
                     Twine(*normalized));
  FailureOr<Operation *> topK = ctx.create<ds::TopKOp>(
      {*input},
      {ctx.named("axis", ctx.builder().getI64IntegerAttr(*normalized)),
       ctx.named("k", ctx.builder().getI64IntegerAttr((*k)[0])),
       ctx.named("largest", ctx.builder().getBoolAttr(largest != 0))});
  if (failed(topK))
    return failure();
  Value indices = (*topK)->getResult(0);
  FailureOr<Value> values =
      emitGatherElements(ctx, *input, indices, *normalized);
  if (failed(values))
    return failure();
  ctx.setOutput(0, *values);
  ctx.setOutput(1, indices);
  return success();
}

/// CumSum along `axis` (known at compile time): y[i] = sum over j of
/// x[j] * M[i, j] with a 0/1 triangle M (strict for exclusive, mirrored for
/// reverse), as a broadcast product and ds.reduce_sum over the last axis,
/// the summed axis moved last. Exact for integers, f64 accumulation for
/// floats; it costs n^2 per line of n elements.
LogicalResult convertCumSum(NodeContext &ctx) {
  FailureOr<Value> input = ctx.input(0);
  int64_t exclusive, reverse;
  if (failed(input) || failed(ctx.intAttr("exclusive", exclusive, 0)) ||
      failed(ctx.intAttr("reverse", reverse, 0)) ||
      failed(requireElementKind(ctx, 0, *input, ElementKind::Numeric)))
    return failure();
  FailureOr<SmallVector<int64_t>> axisValue = ctx.constInts(1, "axis");
  if (failed(axisValue))
    return failure();
  if (axisValue->size() != 1)
    return ctx.error("axis must hold one value, got " +
                     Twine(axisValue->size()));
  auto type = cast<RankedTensorType>(input->getType());
  int64_t rank = type.getRank();
  FailureOr<int64_t> axis = ctx.normalizeAxis((*axisValue)[0], rank);
  if (failed(axis))
    return failure();
  int64_t n = type.getDimSize(*axis);
  if (n > 4096)
    return ctx.error("axis " + Twine(*axis) + " has " + Twine(n) +
                     " elements; CumSum is composed with an n x n triangle "
                     "and supports at most 4096");
  SmallVector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis)
      perm.push_back(d);
  perm.push_back(*axis);
  SmallVector<int64_t> inverse(rank);
  for (int64_t d = 0; d < rank; ++d)
    inverse[perm[d]] = d;
  FailureOr<Value> moved = emitTranspose(ctx, *input, perm);
  if (failed(moved))
    return failure();
  auto movedType = cast<RankedTensorType>(moved->getType());
  SmallVector<int64_t> row(movedType.getShape());
  row.insert(row.end() - 1, 1); // [..., 1, n]
  FailureOr<Value> lines = emitReshape(ctx, *moved, row);
  if (failed(lines))
    return failure();
  // The triangle, built at run time from two index vectors: column j
  // counts for row i where j <= i (< exclusive; >=, > reverse).
  FailureOr<Value> rows = emitIota(ctx, n, 0, 2), cols = emitIota(ctx, n, 0, 1);
  if (failed(rows) || failed(cols))
    return failure();
  ds::ComparePredicate predicate =
      reverse ? (exclusive ? ds::ComparePredicate::gt : ds::ComparePredicate::ge)
              : (exclusive ? ds::ComparePredicate::lt : ds::ComparePredicate::le);
  FailureOr<Value> counts = emitCompare(ctx, predicate, *cols, *rows);
  FailureOr<Value> one = scalarLike(ctx, *input, 1.0),
                   zero = scalarLike(ctx, *input, 0.0);
  if (failed(counts) || failed(one) || failed(zero))
    return failure();
  FailureOr<Value> weights = emitWhere(ctx, *counts, *one, *zero);
  if (failed(weights))
    return failure();
  FailureOr<Value> terms = emitValue(ctx.create<ds::MulOp>({*lines, *weights}));
  if (failed(terms))
    return failure();
  FailureOr<Value> sums =
      emitReduction<ds::ReduceSumOp>(ctx, *terms, {rank}, false);
  if (succeeded(sums))
    sums = emitTranspose(ctx, *sums, inverse);
  if (failed(sums))
    return failure();
  ctx.setOutput(0, *sums);
  return success();
}

double sinF(double x) { return std::sin(x); }
double cosF(double x) { return std::cos(x); }
double floorF(double x) { return std::floor(x); }
double ceilF(double x) { return std::ceil(x); }
double roundF(double x) { return std::nearbyint(x); }

//===----------------------------------------------------------------------===//
// Registry
//===----------------------------------------------------------------------===//

struct Registry {
  llvm::StringMap<OpHandler> handlers; // key: domain + ":" + op type

  void add(StringRef domain, StringRef name, OpHandler handler) {
    handlers[(domain + ":" + name).str()] = handler;
  }

  Registry() {
    using namespace ds;
    auto op = [](ConvertFn convert, FoldFn fold, const char *note) {
      return OpHandler{convert, fold, false, note};
    };
    // Elementwise
    add("", "Add", op(convertBinary<AddOp>, foldArith<addF, addI>, "ds.add"));
    add("", "Sub", op(convertBinary<SubOp>, foldArith<subF, subI>, "ds.sub"));
    add("", "Mul", op(convertBinary<MulOp>, foldArith<mulF, mulI>, "ds.mul"));
    add("", "Div", op(convertBinary<DivOp>, foldDiv, "ds.div"));
    add("", "Pow", op(convertPow, foldPow, "ds.pow (exponent cast to the base type)"));
    add("", "Sqrt", op(convertUnary<SqrtOp, ElementKind::Float>, foldFloatUnary<sqrtF>, "ds.sqrt"));
    add("", "Reciprocal", op(convertUnary<ReciprocalOp, ElementKind::Float>, foldFloatUnary<reciprocalF>, "ds.reciprocal"));
    add("", "Exp", op(convertUnary<ExpOp, ElementKind::Float>, foldFloatUnary<expF>, "ds.exp"));
    add("", "Log", op(convertUnary<LogOp, ElementKind::Float>, foldFloatUnary<logF>, "ds.log"));
    add("", "Tanh", op(convertUnary<TanhOp, ElementKind::Float>, foldFloatUnary<tanhF>, "ds.tanh"));
    add("", "Erf", op(convertUnary<ErfOp, ElementKind::Float>, foldFloatUnary<erfF>, "ds.erf"));
    add("", "Sigmoid", op(convertUnary<SigmoidOp, ElementKind::Float>, foldFloatUnary<sigmoidF>, "ds.sigmoid"));
    add("", "Neg", op(convertUnary<NegOp, ElementKind::Numeric>, foldNeg, "ds.neg"));
    add("", "Relu", op(convertUnary<ReluOp, ElementKind::Numeric>, foldRelu, "ds.relu"));
    add("", "LeakyRelu", op(convertLeakyRelu, nullptr, "ds.leaky_relu"));
    add("", "Gelu", op(convertGelu, nullptr, "ds.gelu (opset 20+)"));
    add("", "Not", op(convertUnary<NotOp, ElementKind::Bool>, foldNot, "ds.not"));
    add("", "Equal", op(convertCompare<ComparePredicate::eq>, foldCompare<ComparePredicate::eq>, "ds.compare eq"));
    add("", "Less", op(convertCompare<ComparePredicate::lt>, foldCompare<ComparePredicate::lt>, "ds.compare lt"));
    add("", "LessOrEqual", op(convertCompare<ComparePredicate::le>, foldCompare<ComparePredicate::le>, "ds.compare le"));
    add("", "Greater", op(convertCompare<ComparePredicate::gt>, foldCompare<ComparePredicate::gt>, "ds.compare gt"));
    add("", "GreaterOrEqual", op(convertCompare<ComparePredicate::ge>, foldCompare<ComparePredicate::ge>, "ds.compare ge"));
    add("", "Where", op(convertWhere, foldWhere, "ds.where"));
    add("", "Cast", op(convertCast, foldCast, "ds.cast"));
    add("", "Abs", op(convertAbs, foldAbs, "ds.where(x < 0, -x, x)"));
    add("", "Clip", op(convertClip, nullptr, "ds.where of ds.compare (min/max attributes or inputs)"));
    add("", "HardSigmoid", op(convertHardSigmoid, nullptr, "ds.mul, ds.add, then Clip's ds.where of ds.compare"));
    add("", "HardSwish", op(convertHardSwish, nullptr, "x * HardSigmoid(x), alpha 1/6, beta 1/2"));
    add("", "Softplus", op(convertUnary<SoftplusOp, ElementKind::Float>, nullptr, "ds.softplus"));
    add("", "Mish", op(convertMish, nullptr, "x * ds.tanh(ds.softplus(x)) (opset 18+)"));
    add("", "Elu", op(convertEluLike<EluOp>, nullptr, "ds.elu"));
    add("", "Celu", op(convertEluLike<CeluOp>, nullptr, "ds.celu"));
    add("", "Selu", op(convertSelu, nullptr, "gamma * ds.elu(x, alpha)"));
    add("", "PRelu", op(convertPRelu, nullptr, "ds.where(x > 0, x, ds.mul(x, slope))"));
    add("", "Sin", op(convertUnary<SinOp, ElementKind::Float>, foldFloatUnary<sinF>, "ds.sin"));
    add("", "Cos", op(convertUnary<CosOp, ElementKind::Float>, foldFloatUnary<cosF>, "ds.cos"));
    add("", "Floor", op(convertUnary<FloorOp, ElementKind::Float>, foldFloatUnary<floorF>, "ds.floor"));
    add("", "Ceil", op(convertUnary<CeilOp, ElementKind::Float>, foldFloatUnary<ceilF>, "ds.ceil"));
    add("", "Round", op(convertUnary<RoundOp, ElementKind::Float>, foldFloatUnary<roundF>, "ds.round (halves to even)"));
    add("", "Sign", op(convertSign, nullptr, "ds.where of ds.compare"));
    add("", "IsNaN", op(convertIsNaN, nullptr, "ds.not(x == x)"));
    add("", "IsInf", op(convertIsInf, nullptr, "ds.compare with +-inf"));
    add("", "And", op(convertLogic<Logic::And>, foldLogic<Logic::And>, "ds.where(a, b, false)"));
    add("", "Or", op(convertLogic<Logic::Or>, foldLogic<Logic::Or>, "ds.where(a, true, b)"));
    add("", "Xor", op(convertLogic<Logic::Xor>, foldLogic<Logic::Xor>, "ds.where(a, ds.not(b), b)"));
    add("", "Max", op(convertExtremum<true>, foldExtremum<true>, "ds.where of ds.compare, pairwise"));
    add("", "Min", op(convertExtremum<false>, foldExtremum<false>, "ds.where of ds.compare, pairwise"));
    // Linear algebra, normalization, reductions
    add("", "MatMul", op(convertMatMul, nullptr, "ds.matmul"));
    add("", "Gemm", op(convertGemm, nullptr, "ds.gemm"));
    add("", "Softmax", op(convertSoftmax<SoftmaxOp>, nullptr, "ds.softmax"));
    add("", "LogSoftmax", op(convertSoftmax<LogSoftmaxOp>, nullptr, "ds.log_softmax"));
    add("", "LayerNormalization", op(convertLayerNorm, nullptr, "ds.layer_norm"));
    add("", "BatchNormalization", op(convertBatchNorm, nullptr, "ds.batch_norm / ds.batch_norm_train"));
    add("", "ReduceSum", op(convertReduce<ReduceSumOp>, nullptr, "ds.reduce_sum (axes attribute or input)"));
    add("", "ReduceMean", op(convertReduce<ReduceMeanOp>, nullptr, "ds.reduce_mean (axes attribute or input)"));
    add("", "ReduceMax", op(convertReduce<ReduceMaxOp>, nullptr, "ds.reduce_max (axes attribute or input)"));
    add("", "ReduceProd", op(convertReduce<ReduceProdOp>, nullptr, "ds.reduce_prod (axes attribute or input)"));
    add("", "Mod", op(convertMod, foldMod, "ds.mod (fmod: the dividend's sign)"));
    add("", "ReduceMin", op(convertComposedReduce<ComposedReduce::Min>, nullptr, "-ds.reduce_max(-x) (axes attribute or input)"));
    add("", "ReduceSumSquare", op(convertComposedReduce<ComposedReduce::SumSquare>, nullptr, "ds.reduce_sum(x * x)"));
    add("", "ReduceL1", op(convertComposedReduce<ComposedReduce::L1>, nullptr, "ds.reduce_sum(|x|)"));
    add("", "ReduceL2", op(convertComposedReduce<ComposedReduce::L2>, nullptr, "ds.sqrt(ds.reduce_sum(x * x))"));
    add("", "ReduceLogSum", op(convertComposedReduce<ComposedReduce::LogSum>, nullptr, "ds.log(ds.reduce_sum(x))"));
    add("", "ReduceLogSumExp", op(convertComposedReduce<ComposedReduce::LogSumExp>, nullptr, "log(sum(exp(x - max))) + max"));
    add("", "Sum", op(convertVariadicSum<false>, nullptr, "a chain of ds.add"));
    add("", "Mean", op(convertVariadicSum<true>, nullptr, "a chain of ds.add, ds.div by the count"));
    // Data movement
    add("", "Reshape", op(convertReshapeLike<reshapeShape>, foldReshapeLike<reshapeShape>, "ds.reshape"));
    add("", "Squeeze", op(convertReshapeLike<squeezeShape>, foldReshapeLike<squeezeShape>, "ds.reshape (axes attribute or input)"));
    add("", "Unsqueeze", op(convertReshapeLike<unsqueezeShape>, foldReshapeLike<unsqueezeShape>, "ds.reshape (axes attribute or input)"));
    add("", "Flatten", op(convertReshapeLike<flattenShape>, foldReshapeLike<flattenShape>, "ds.reshape"));
    add("", "Expand", op(convertExpand, foldExpand, "ds.broadcast_to"));
    add("", "Transpose", op(convertTranspose, foldTranspose, "ds.transpose"));
    add("", "Concat", op(convertConcat, foldConcat, "ds.concat"));
    add("", "Split", op(convertSplit, nullptr, "ds.split (sizes attribute, input or num_outputs)"));
    add("", "Slice", op(convertSlice, foldSlice, "ds.slice"));
    add("", "Gather", op(convertGather, foldGather, "ds.gather"));
    add("", "Trilu", op(convertTrilu, foldTrilu, "ds.trilu"));
    add("", "Identity", op(convertIdentity, foldIdentity, "removed"));
    add("", "Dropout", op(convertDropout, nullptr, "removed in inference mode, ds.dropout in training mode"));
    // Constants
    add("", "Constant", op(nullptr, foldConstant, "ds.constant"));
    add("", "ConstantOfShape", op(convertByFolding<foldConstantOfShape>, foldConstantOfShape, "ds.constant (splat)"));
    add("", "Range", op(convertByFolding<foldRange>, foldRange, "ds.constant"));
    add("", "Shape", OpHandler{nullptr, foldShape, true, "folded (static shapes)"});
    add("", "Size", OpHandler{nullptr, foldSize, true, "folded (static shapes)"});
    // Losses, convolution, pooling
    add("", "SoftmaxCrossEntropyLoss", op(convertLoss<SoftmaxCrossEntropyOp>, nullptr, "ds.softmax_cross_entropy"));
    add("", "NegativeLogLikelihoodLoss", op(convertLoss<NllLossOp>, nullptr, "ds.nll_loss"));
    add("", "Conv", op(convertConv, nullptr, "ds.conv"));
    add("", "MaxPool", op(convertMaxPool, nullptr, "ds.max_pool"));
    add("", "AveragePool", op(convertAveragePool, nullptr, "ds.avg_pool"));
    add("", "GlobalAveragePool", op(convertGlobalAveragePool, nullptr, "ds.reduce_mean over the spatial axes"));
    // Padding, resizing, normalization and layout, composed of ds ops
    add("", "Pad", op(convertPad, nullptr, "ds.concat of the value (constant), ds.gather (edge, reflect, wrap), ds.slice (negative pads)"));
    add("", "Tile", op(convertTile, nullptr, "ds.broadcast_to between ds.reshape"));
    add("", "DepthToSpace", op(convertDepthSpace<true>, nullptr, "ds.reshape, ds.transpose, ds.reshape (DCR, CRD)"));
    add("", "SpaceToDepth", op(convertDepthSpace<false>, nullptr, "ds.reshape, ds.transpose, ds.reshape"));
    add("", "GlobalMaxPool", op(convertGlobalMaxPool, nullptr, "ds.reduce_max over the spatial axes"));
    add("", "InstanceNormalization", op(convertInstanceNorm, nullptr, "ds.layer_norm per (sample, channel), ds.mul, ds.add"));
    add("", "GroupNormalization", op(convertGroupNorm, nullptr, "ds.layer_norm per (sample, group), ds.mul, ds.add (opset 18: per-group, 21: per-channel scale)"));
    add("", "Resize", op(convertResize, nullptr, "ds.gather per axis (nearest), 2 (linear) or 4 (cubic) ds.gather blended"));
    add("", "ConvTranspose", op(convertConvTranspose, nullptr, "ds.conv_grad_input (+ bias)"));
    // Indices, one-hot, norms and contractions, composed of ds ops
    add("", "ArgMax", op(convertArgExtremum<true>, nullptr, "ds.reduce_max, ds.compare, ds.where, ds.reduce_max of indices"));
    add("", "ArgMin", op(convertArgExtremum<false>, nullptr, "ArgMax of -x"));
    add("", "OneHot", op(convertOneHot, nullptr, "ds.where(ds.compare(indices, iota), on, off)"));
    add("", "LpNormalization", op(convertLpNorm, nullptr, "x / ReduceL1 or ReduceL2 (kept)"));
    add("", "Einsum", op(convertEinsum, nullptr, "ds.reduce_sum, ds.transpose, ds.reshape, batched ds.matmul (no diagonals)"));
    add("", "GatherElements", op(convertGatherElements, nullptr, "ds.gather of the flattened data at computed positions"));
    add("", "GatherND", op(convertGatherND, nullptr, "ds.gather of the reshaped data at computed positions"));
    add("", "ScatterElements", op(convertScatterElements, nullptr, "ds.scatter at computed flat positions (reduction none, add, mul, max, min)"));
    add("", "ScatterND", op(convertScatterND, nullptr, "ds.scatter of slices at computed flat positions (reduction none, add, mul, max, min)"));
    add("", "TopK", op(convertTopK, nullptr, "ds.top_k indices, values gathered at them"));
    add("", "CumSum", op(convertCumSum, nullptr, "ds.reduce_sum of x times a 0/1 triangle (n <= 4096)"));
    // Training
    add(kTrainingDomain, "Adam", op(convertAdam, nullptr, "ds.adam per tensor"));
    add(kTrainingDomain, "Momentum", op(convertMomentum, nullptr, "ds.momentum per tensor"));
    add(kTrainingDomain, "Adagrad", op(convertAdagrad, nullptr, "ds.adagrad per tensor"));
  }
};

const Registry &registry() {
  static const Registry instance;
  return instance;
}

} // namespace

const OpHandler *lookupOpHandler(StringRef domain, StringRef opType) {
  auto it = registry().handlers.find((domain + ":" + opType).str());
  return it == registry().handlers.end() ? nullptr : &it->second;
}

void forEachOpHandler(
    llvm::function_ref<void(StringRef, StringRef, const OpHandler &)> fn) {
  for (const auto &entry : registry().handlers) {
    auto [domain, name] = entry.getKey().split(':');
    fn(domain, name, entry.getValue());
  }
}

//===----------------------------------------------------------------------===//
// Shared shape computations
//===----------------------------------------------------------------------===//

FailureOr<SmallVector<int64_t>> broadcastShapes(ArrayRef<int64_t> a,
                                                ArrayRef<int64_t> b) {
  SmallVector<int64_t> result;
  if (!OpTrait::util::getBroadcastedShape(a, b, result))
    return failure();
  return result;
}

FailureOr<SmallVector<int64_t>> reshapeTarget(NodeContext &ctx,
                                              ArrayRef<int64_t> input,
                                              ArrayRef<int64_t> requested,
                                              bool allowZero) {
  SmallVector<int64_t> shape;
  int64_t inferAxis = -1, known = 1;
  for (auto [i, dim] : llvm::enumerate(requested)) {
    int64_t size = dim;
    if (dim == 0 && !allowZero) {
      if (i >= input.size())
        return ctx.error("shape " + shapeString(requested) + " copies axis " +
                         Twine(i) + " (0) but the input " + shapeString(input) +
                         " has rank " + Twine(input.size()));
      size = input[i];
    } else if (dim == -1) {
      if (inferAxis >= 0)
        return ctx.error("shape " + shapeString(requested) +
                         " has more than one -1");
      inferAxis = i;
      shape.push_back(-1);
      continue;
    } else if (dim < 0) {
      return ctx.error("shape " + shapeString(requested) +
                       " has a negative size");
    }
    if (llvm::MulOverflow(known, size, known))
      return ctx.error("shape " + shapeString(requested) + " overflows");
    shape.push_back(size);
  }
  int64_t total = product(input);
  if (inferAxis >= 0) {
    if (known == 0 || total % known != 0)
      return ctx.error("cannot reshape " + shapeString(input) + " (" +
                       Twine(total) + " elements) to " +
                       shapeString(requested));
    shape[inferAxis] = total / known;
  } else if (known != total) {
    return ctx.error("cannot reshape " + shapeString(input) + " (" +
                     Twine(total) + " elements) to " + shapeString(shape) +
                     " (" + Twine(known) + " elements)");
  }
  return shape;
}

FailureOr<SliceSpec> sliceSpec(NodeContext &ctx, ArrayRef<int64_t> inputShape) {
  FailureOr<SmallVector<int64_t>> starts = ctx.constInts(1, "starts");
  FailureOr<SmallVector<int64_t>> ends = ctx.constInts(2, "ends");
  if (failed(starts) || failed(ends))
    return failure();
  int64_t rank = inputShape.size();
  SmallVector<int64_t> axes, steps;
  if (ctx.hasInput(3)) {
    FailureOr<SmallVector<int64_t>> values = ctx.constInts(3, "axes");
    if (failed(values))
      return failure();
    axes = *values;
  } else {
    for (size_t i = 0; i < starts->size(); ++i)
      axes.push_back(i);
  }
  if (ctx.hasInput(4)) {
    FailureOr<SmallVector<int64_t>> values = ctx.constInts(4, "steps");
    if (failed(values))
      return failure();
    steps = *values;
  } else {
    steps.assign(starts->size(), 1);
  }
  if (starts->size() != ends->size() || axes.size() != starts->size() ||
      steps.size() != starts->size())
    return ctx.error("starts, ends, axes and steps must have the same length");
  SliceSpec spec;
  spec.offsets.assign(rank, 0);
  spec.strides.assign(rank, 1);
  spec.sizes.assign(inputShape.begin(), inputShape.end());
  SmallVector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    FailureOr<int64_t> axis = ctx.normalizeAxis(axes[i], rank);
    if (failed(axis))
      return failure();
    if (seen[*axis])
      return ctx.error("axes list axis " + Twine(*axis) + " twice");
    seen[*axis] = true;
    int64_t dim = inputShape[*axis], step = steps[i];
    if (step == 0)
      return ctx.error("steps must be non-zero");
    // Negative starts and ends count from the end; then ONNX clamps starts
    // into [0, dim] (positive steps) or [0, dim - 1] (negative steps), and
    // ends into [0, dim] or [-1, dim - 1], so INT64_MIN/MAX mean "to the
    // end" in either direction.
    auto clampIndex = [&](int64_t v, int64_t low, int64_t high) {
      if (v < 0)
        v = v < -dim ? low : v + dim; // no overflow for INT64_MIN
      return std::clamp(v, low, high);
    };
    int64_t start = 0, end = 0, size = 0;
    if (step > 0) {
      start = clampIndex((*starts)[i], 0, dim);
      end = clampIndex((*ends)[i], 0, dim);
      size = llvm::divideCeil(std::max<int64_t>(0, end - start), step);
    } else if (dim > 0) {
      start = clampIndex((*starts)[i], 0, dim - 1);
      end = clampIndex((*ends)[i], -1, dim - 1);
      int64_t magnitude = step == INT64_MIN ? INT64_MAX : -step;
      size = llvm::divideCeil(std::max<int64_t>(0, start - end), magnitude);
    }
    spec.offsets[*axis] = size > 0 ? start : 0;
    spec.strides[*axis] = step;
    spec.sizes[*axis] = size;
  }
  return spec;
}

} // namespace dsopt::onnx_import
