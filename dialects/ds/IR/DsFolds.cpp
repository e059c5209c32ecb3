//===- DsFolds.cpp - folders and canonicalization patterns of ds ops ------===//
//
// Folders evaluate ops on constants and remove identities (x + 0, reshape to
// the same type, ...). Canonicalization patterns put ops into the form later
// passes expect: transposes of the last two axes fold into matmul flags,
// bias-free Gemm becomes matmul, chains of reshapes and transposes collapse.
//
// Float folding evaluates in f32 and rounds to the element type, as the
// runtime computes, so folding never changes a result.
//
//===----------------------------------------------------------------------===//

#include "ds/IR/DsDialect.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

#include "llvm/ADT/APSInt.h"

#include <cmath>

using namespace mlir;
using namespace dsopt::ds;

/// The largest splat a folder materializes from an op whose operands are
/// smaller (broadcasting): larger ones stay ops that write planned buffers.
static constexpr int64_t kMaxFoldedSplatElements = 1024;

namespace {
/// Constants larger than this are not folded elementwise: folding them would
/// put large tensors into the IR.
constexpr int64_t kMaxFoldElements = 1 << 16;

APFloat roundTo(float value, const llvm::fltSemantics &semantics) {
  APFloat result(value);
  bool losesInfo;
  result.convert(semantics, APFloat::rmNearestTiesToEven, &losesInfo);
  return result;
}

float toFloat(APFloat value) {
  bool losesInfo;
  value.convert(APFloat::IEEEsingle(), APFloat::rmNearestTiesToEven,
                &losesInfo);
  return value.convertToFloat();
}

/// Applies `fn` to every element of a float constant.
OpFoldResult foldFloatUnary(Attribute operand,
                            llvm::function_ref<float(float)> fn) {
  auto dense = dyn_cast_or_null<DenseFPElementsAttr>(operand);
  if (!dense)
    return {};
  auto type = cast<ShapedType>(dense.getType());
  const auto &semantics =
      cast<FloatType>(type.getElementType()).getFloatSemantics();
  auto apply = [&](const APFloat &value) {
    return roundTo(fn(toFloat(value)), semantics);
  };
  if (dense.isSplat())
    return DenseElementsAttr::get(type, apply(dense.getSplatValue<APFloat>()));
  if (dense.getNumElements() > kMaxFoldElements)
    return {};
  SmallVector<APFloat> values;
  for (APFloat value : dense.getValues<APFloat>())
    values.push_back(apply(value));
  return DenseElementsAttr::get(type, values);
}

/// Result of an elementwise binary op on constants whose shapes are equal to
/// the result's or splat; general broadcasting of dense constants is left to
/// the runtime.
template <typename Element, typename Fn>
Attribute foldBinaryElements(DenseElementsAttr lhs, DenseElementsAttr rhs,
                             ShapedType resultType, Fn fn) {
  bool lhsFull = lhs.getType().getShape() == resultType.getShape();
  bool rhsFull = rhs.getType().getShape() == resultType.getShape();
  if (lhs.isSplat() && rhs.isSplat()) {
    std::optional<Element> value =
        fn(lhs.getSplatValue<Element>(), rhs.getSplatValue<Element>());
    if (!value)
      return {};
    return DenseElementsAttr::get(resultType, *value);
  }
  if (resultType.getNumElements() > kMaxFoldElements ||
      !(lhsFull || lhs.isSplat()) || !(rhsFull || rhs.isSplat()))
    return {};
  SmallVector<Element> values;
  auto lhsValues = lhs.getValues<Element>();
  auto rhsValues = rhs.getValues<Element>();
  for (int64_t i = 0, e = resultType.getNumElements(); i < e; ++i) {
    std::optional<Element> value = fn(lhs.isSplat() ? lhsValues[0] : lhsValues[i],
                                      rhs.isSplat() ? rhsValues[0] : rhsValues[i]);
    if (!value)
      return {};
    values.push_back(*value);
  }
  return DenseElementsAttr::get(resultType, values);
}

/// Folds `lhs op rhs` on constants. `floatFn` works in f32; `intFn` returns
/// nullopt where the result is undefined (division by zero).
OpFoldResult
foldBinary(ArrayRef<Attribute> operands, ShapedType resultType,
           llvm::function_ref<float(float, float)> floatFn,
           llvm::function_ref<std::optional<APInt>(const APInt &, const APInt &)>
               intFn) {
  auto lhs = dyn_cast_or_null<DenseElementsAttr>(operands[0]);
  auto rhs = dyn_cast_or_null<DenseElementsAttr>(operands[1]);
  if (!lhs || !rhs || !resultType.hasStaticShape())
    return {};
  Type element = resultType.getElementType();
  if (auto floatType = dyn_cast<FloatType>(element)) {
    const auto &semantics = floatType.getFloatSemantics();
    return foldBinaryElements<APFloat>(
        lhs, rhs, resultType,
        [&](const APFloat &a, const APFloat &b) -> std::optional<APFloat> {
          return roundTo(floatFn(toFloat(a), toFloat(b)), semantics);
        });
  }
  if (!intFn || element.isInteger(1))
    return {};
  return foldBinaryElements<APInt>(lhs, rhs, resultType, intFn);
}

/// True if `attr` is a constant whose every element equals `value`.
bool isSplatOf(Attribute attr, double value) {
  auto dense = dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense || !dense.isSplat())
    return false;
  if (isa<FloatType>(dense.getElementType()))
    return toFloat(dense.getSplatValue<APFloat>()) == value;
  if (dense.getElementType().isInteger(1))
    return false;
  return dense.getSplatValue<APInt>().getSExtValue() ==
         static_cast<int64_t>(value);
}

/// `x op identity` folds to x when x already has the result type.
OpFoldResult foldRightIdentity(Value lhs, Attribute rhs, Type resultType,
                               double identity) {
  if (lhs.getType() == resultType && isSplatOf(rhs, identity))
    return lhs;
  return {};
}
} // namespace

//===----------------------------------------------------------------------===//
// Constants and elementwise ops
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

OpFoldResult SqrtOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), [](float x) { return std::sqrt(x); });
}
OpFoldResult ReciprocalOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), [](float x) { return 1.0f / x; });
}
OpFoldResult ExpOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), [](float x) { return std::exp(x); });
}
OpFoldResult LogOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), [](float x) { return std::log(x); });
}
OpFoldResult TanhOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(),
                        [](float x) { return std::tanh(x); });
}
OpFoldResult ErfOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), [](float x) { return std::erf(x); });
}
OpFoldResult SigmoidOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(),
                        [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
}

OpFoldResult NegOp::fold(FoldAdaptor adaptor) {
  if (auto inner = getInput().getDefiningOp<NegOp>())
    return inner.getInput();
  if (auto ints = dyn_cast_or_null<DenseIntElementsAttr>(adaptor.getInput()))
    if (ints.isSplat() || ints.getNumElements() <= kMaxFoldElements)
      return ints.mapValues(ints.getElementType(),
                            [](const APInt &v) { return -v; });
  return foldFloatUnary(adaptor.getInput(), [](float x) { return -x; });
}

OpFoldResult ReluOp::fold(FoldAdaptor adaptor) {
  if (getInput().getDefiningOp<ReluOp>())
    return getInput();
  return foldFloatUnary(adaptor.getInput(),
                        [](float x) { return x > 0.0f ? x : 0.0f; });
}

OpFoldResult NotOp::fold(FoldAdaptor adaptor) {
  if (auto inner = getInput().getDefiningOp<NotOp>())
    return inner.getInput();
  if (auto bools = dyn_cast_or_null<DenseIntElementsAttr>(adaptor.getInput()))
    if (bools.isSplat() || bools.getNumElements() <= kMaxFoldElements)
      return bools.mapValues(bools.getElementType(),
                             [](const APInt &v) { return ~v; });
  return {};
}

OpFoldResult AddOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult same =
          foldRightIdentity(getLhs(), adaptor.getRhs(), getType(), 0.0))
    return same;
  if (OpFoldResult same =
          foldRightIdentity(getRhs(), adaptor.getLhs(), getType(), 0.0))
    return same;
  return foldBinary(
      adaptor.getOperands(), getType(), [](float a, float b) { return a + b; },
      [](const APInt &a, const APInt &b) -> std::optional<APInt> {
        return a + b;
      });
}

OpFoldResult SubOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult same =
          foldRightIdentity(getLhs(), adaptor.getRhs(), getType(), 0.0))
    return same;
  return foldBinary(
      adaptor.getOperands(), getType(), [](float a, float b) { return a - b; },
      [](const APInt &a, const APInt &b) -> std::optional<APInt> {
        return a - b;
      });
}

OpFoldResult MulOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult same =
          foldRightIdentity(getLhs(), adaptor.getRhs(), getType(), 1.0))
    return same;
  if (OpFoldResult same =
          foldRightIdentity(getRhs(), adaptor.getLhs(), getType(), 1.0))
    return same;
  return foldBinary(
      adaptor.getOperands(), getType(), [](float a, float b) { return a * b; },
      [](const APInt &a, const APInt &b) -> std::optional<APInt> {
        return a * b;
      });
}

OpFoldResult DivOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult same =
          foldRightIdentity(getLhs(), adaptor.getRhs(), getType(), 1.0))
    return same;
  return foldBinary(
      adaptor.getOperands(), getType(), [](float a, float b) { return a / b; },
      [](const APInt &a, const APInt &b) -> std::optional<APInt> {
        if (b.isZero())
          return std::nullopt;
        return a.sdiv(b);
      });
}

OpFoldResult PowOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult same =
          foldRightIdentity(getLhs(), adaptor.getRhs(), getType(), 1.0))
    return same;
  return foldBinary(adaptor.getOperands(), getType(),
                    [](float a, float b) { return std::pow(a, b); }, nullptr);
}

// The remainder is rarely computed on constants: no folding.
OpFoldResult ModOp::fold(FoldAdaptor) { return {}; }

OpFoldResult CompareOp::fold(FoldAdaptor adaptor) {
  auto lhs = dyn_cast_or_null<DenseElementsAttr>(adaptor.getLhs());
  auto rhs = dyn_cast_or_null<DenseElementsAttr>(adaptor.getRhs());
  auto resultType = cast<ShapedType>(getType());
  if (!lhs || !rhs || lhs.getType() != rhs.getType() ||
      lhs.getType().getShape() != resultType.getShape() ||
      resultType.getNumElements() > kMaxFoldElements)
    return {};
  ComparePredicate predicate = getPredicate();
  auto decide = [predicate](int order) {
    switch (predicate) {
    case ComparePredicate::eq: return order == 0;
    case ComparePredicate::lt: return order < 0;
    case ComparePredicate::le: return order <= 0;
    case ComparePredicate::gt: return order > 0;
    case ComparePredicate::ge: return order >= 0;
    }
    return false;
  };
  SmallVector<bool> values;
  if (isa<FloatType>(lhs.getElementType())) {
    auto a = lhs.getValues<APFloat>(), b = rhs.getValues<APFloat>();
    for (int64_t i = 0, e = resultType.getNumElements(); i < e; ++i) {
      APFloat::cmpResult cmp = a[i].compare(b[i]);
      if (cmp == APFloat::cmpUnordered)
        values.push_back(false);
      else
        values.push_back(decide(cmp == APFloat::cmpLessThan      ? -1
                                : cmp == APFloat::cmpGreaterThan ? 1
                                                                 : 0));
    }
  } else {
    // i1 compares as unsigned (false < true); integers as signed.
    bool isBool = lhs.getElementType().isInteger(1);
    auto a = lhs.getValues<APInt>(), b = rhs.getValues<APInt>();
    for (int64_t i = 0, e = resultType.getNumElements(); i < e; ++i) {
      bool less = isBool ? a[i].ult(b[i]) : a[i].slt(b[i]);
      bool greater = isBool ? a[i].ugt(b[i]) : a[i].sgt(b[i]);
      values.push_back(decide(less ? -1 : greater ? 1 : 0));
    }
  }
  return DenseElementsAttr::get(resultType, ArrayRef<bool>(values));
}

OpFoldResult WhereOp::fold(FoldAdaptor adaptor) {
  auto condition = dyn_cast_or_null<DenseIntElementsAttr>(
      adaptor.getCondition());
  if (!condition || !condition.isSplat())
    return {};
  Value chosen = condition.getSplatValue<bool>() ? getLhs() : getRhs();
  if (chosen.getType() == getType())
    return chosen;
  return {};
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  // x -> wider float -> x's type again is x: widening is exact (bf16 or
  // f16 to f32), so the pair cancels. The other order rounds and stays.
  if (auto widen = getInput().getDefiningOp<CastOp>()) {
    Type from = getElementTypeOrSelf(widen.getInput().getType());
    Type via = getElementTypeOrSelf(widen.getType());
    if (widen.getInput().getType() == getType() && isa<FloatType>(from) &&
        isa<FloatType>(via) &&
        APFloat::isRepresentableBy(
            cast<FloatType>(from).getFloatSemantics(),
            cast<FloatType>(via).getFloatSemantics()))
      return widen.getInput();
  }
  auto input = dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput());
  if (!input ||
      (!input.isSplat() && input.getNumElements() > kMaxFoldElements))
    return {};
  auto resultType = cast<ShapedType>(getType());
  Type from = input.getElementType(), to = resultType.getElementType();
  SmallVector<Attribute> values;
  auto convert = [&](Attribute element) -> Attribute {
    if (auto f = dyn_cast<FloatAttr>(element)) {
      APFloat value = f.getValue();
      if (auto toFloatType = dyn_cast<FloatType>(to)) {
        bool losesInfo;
        value.convert(toFloatType.getFloatSemantics(),
                      APFloat::rmNearestTiesToEven, &losesInfo);
        return FloatAttr::get(to, value);
      }
      if (to.isInteger(1))
        return IntegerAttr::get(to, value.isZero() ? 0 : 1);
      APSInt result(to.getIntOrFloatBitWidth(), /*isUnsigned=*/false);
      bool exact;
      // Out of range or NaN: undefined in C++, left to the runtime.
      if (value.convertToInteger(result, APFloat::rmTowardZero, &exact) &
          APFloat::opInvalidOp)
        return {};
      return IntegerAttr::get(to, result);
    }
    auto i = cast<IntegerAttr>(element);
    APInt value = i.getValue();
    bool isBool = from.isInteger(1);
    if (auto toFloatType = dyn_cast<FloatType>(to)) {
      APFloat result(toFloatType.getFloatSemantics());
      result.convertFromAPInt(value, /*isSigned=*/!isBool,
                              APFloat::rmNearestTiesToEven);
      return FloatAttr::get(to, result);
    }
    if (to.isInteger(1))
      return IntegerAttr::get(to, value.isZero() ? 0 : 1);
    unsigned width = to.getIntOrFloatBitWidth();
    return IntegerAttr::get(to, isBool ? value.zextOrTrunc(width)
                                       : value.sextOrTrunc(width));
  };
  if (input.isSplat()) {
    Attribute value = convert(input.getSplatValue<Attribute>());
    if (!value)
      return {};
    return DenseElementsAttr::get(resultType, value);
  }
  for (Attribute element : input.getValues<Attribute>()) {
    Attribute value = convert(element);
    if (!value)
      return {};
    values.push_back(value);
  }
  return DenseElementsAttr::get(resultType, values);
}

//===----------------------------------------------------------------------===//
// Reductions and data movement
//===----------------------------------------------------------------------===//

// Reducing only size-1 axes with keepdims changes nothing.
OpFoldResult ReduceSumOp::fold(FoldAdaptor) {
  return getInput().getType() == getType() ? getInput() : Value();
}
OpFoldResult ReduceMeanOp::fold(FoldAdaptor) {
  return getInput().getType() == getType() ? getInput() : Value();
}
OpFoldResult ReduceMaxOp::fold(FoldAdaptor) {
  return getInput().getType() == getType() ? getInput() : Value();
}
OpFoldResult ReduceProdOp::fold(FoldAdaptor) {
  return getInput().getType() == getType() ? getInput() : Value();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput()))
    return dense.reshape(cast<ShapedType>(getType()));
  return {};
}

namespace {
/// A rewrite keeps what ds-autodiff recorded on the op it replaces (the
/// forward op it is or differentiates), as it keeps the op's location.
void keepAutodiffRecord(Operation *from, Operation *to) {
  for (StringRef name :
       {DsDialect::kForwardIdAttrName, DsDialect::kGradOfAttrName})
    if (Attribute id = from->getAttr(name))
      to->setAttr(name, id);
}

/// reshape(reshape(x)) -> reshape(x).
struct CollapseReshapeChain : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = op.getInput().getDefiningOp<ReshapeOp>();
    if (!inner)
      return failure();
    auto collapsed =
        ReshapeOp::create(rewriter, op.getLoc(), op.getType(), inner.getInput());
    keepAutodiffRecord(op, collapsed);
    rewriter.replaceOp(op, collapsed.getResult());
    return success();
  }
};
} // namespace

void ReshapeOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                            MLIRContext *context) {
  patterns.add<CollapseReshapeChain>(context);
}

OpFoldResult TransposeOp::fold(FoldAdaptor adaptor) {
  ArrayRef<int64_t> perm = getPerm();
  bool identity = true;
  for (auto [i, axis] : llvm::enumerate(perm))
    identity &= static_cast<int64_t>(i) == axis;
  if (identity)
    return getInput();
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput()))
    if (dense.isSplat())
      return dense.resizeSplat(cast<ShapedType>(getType()));
  return {};
}

namespace {
/// transpose(transpose(x, p), q) -> transpose(x, p o q).
struct ComposeTransposes : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = op.getInput().getDefiningOp<TransposeOp>();
    if (!inner)
      return failure();
    SmallVector<int64_t> composed;
    for (int64_t axis : op.getPerm())
      composed.push_back(inner.getPerm()[axis]);
    auto transpose =
        TransposeOp::create(rewriter, op.getLoc(), inner.getInput(), composed);
    keepAutodiffRecord(op, transpose);
    rewriter.replaceOp(op, transpose.getResult());
    return success();
  }
};
} // namespace

OpFoldResult BroadcastToOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  // Only small results become constants: a large splat would live in the
  // program's static storage, outside the planned arena (a backward pass
  // broadcasts the loss's scalar gradient over whole activations).
  auto type = cast<ShapedType>(getType());
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput()))
    if (dense.isSplat() && type.getNumElements() <= kMaxFoldedSplatElements)
      return dense.resizeSplat(type);
  return {};
}

OpFoldResult ConcatOp::fold(FoldAdaptor) {
  if (getInputs().size() == 1 && getInputs().front().getType() == getType())
    return getInputs().front();
  return {};
}

OpFoldResult SliceOp::fold(FoldAdaptor adaptor) {
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput()))
    if (dense.isSplat())
      return dense.resizeSplat(cast<ShapedType>(getType()));
  if (getInput().getType() != getType())
    return {};
  for (auto [offset, stride] : llvm::zip(getOffsets(), getStrides()))
    if (offset != 0 || stride != 1)
      return {};
  return getInput();
}

//===----------------------------------------------------------------------===//
// Canonical forms of matmul, gemm and dropout
//===----------------------------------------------------------------------===//

namespace {
/// True if `value` is a transpose that swaps exactly the last two axes.
TransposeOp getLastTwoAxesTranspose(Value value) {
  auto transpose = value.getDefiningOp<TransposeOp>();
  if (!transpose)
    return {};
  ArrayRef<int64_t> perm = transpose.getPerm();
  int64_t rank = perm.size();
  if (rank < 2 || perm[rank - 1] != rank - 2 || perm[rank - 2] != rank - 1)
    return {};
  for (int64_t i = 0; i < rank - 2; ++i)
    if (perm[i] != i)
      return {};
  return transpose;
}

/// matmul(transpose(a), b) -> matmul(a, b) {transpose_lhs}, same for rhs:
/// the kernel reads the operand transposed instead of materializing it.
struct FoldTransposeIntoMatMul : OpRewritePattern<MatMulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatMulOp op,
                                PatternRewriter &rewriter) const override {
    TransposeOp lhs = getLastTwoAxesTranspose(op.getLhs());
    TransposeOp rhs = getLastTwoAxesTranspose(op.getRhs());
    if (!lhs && !rhs)
      return failure();
    rewriter.modifyOpInPlace(op, [&] {
      if (lhs) {
        op.getLhsMutable().assign(lhs.getInput());
        op.setTransposeLhs(!op.getTransposeLhs());
      }
      if (rhs) {
        op.getRhsMutable().assign(rhs.getInput());
        op.setTransposeRhs(!op.getTransposeRhs());
      }
    });
    return success();
  }
};

/// transpose(matmul(a, b)) of the last two axes -> matmul(b, a) with both
/// transpose flags flipped: (op(a) op(b))^T = op(b)^T op(a)^T. The product
/// is written in the transposed layout directly instead of being copied
/// (and a backward pass differentiates one product instead of a product and
/// a transpose).
struct SwapTransposedMatMul : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op,
                                PatternRewriter &rewriter) const override {
    ArrayRef<int64_t> perm = op.getPerm();
    int64_t rank = perm.size();
    if (rank < 2 || perm[rank - 1] != rank - 2 || perm[rank - 2] != rank - 1)
      return failure();
    for (int64_t i = 0; i < rank - 2; ++i)
      if (perm[i] != i)
        return failure();
    auto matmul = op.getInput().getDefiningOp<MatMulOp>();
    if (!matmul || !matmul->hasOneUse())
      return failure();
    auto lhs = cast<RankedTensorType>(matmul.getLhs().getType());
    auto rhs = cast<RankedTensorType>(matmul.getRhs().getType());
    if (lhs.getRank() < 2 || rhs.getRank() < 2)
      return failure();
    auto swapped = MatMulOp::create(rewriter, matmul.getLoc(), matmul.getRhs(),
                                    matmul.getLhs(), !matmul.getTransposeRhs(),
                                    !matmul.getTransposeLhs());
    if (swapped.getType() != op.getType()) {
      rewriter.eraseOp(swapped);
      return failure();
    }
    keepAutodiffRecord(matmul, swapped);
    rewriter.replaceOp(op, swapped.getResult());
    return success();
  }
};

/// gemm(a, b) with alpha = 1 and no c is a plain matrix product.
struct GemmWithoutBiasToMatMul : OpRewritePattern<GemmOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GemmOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getC() || !op.getAlpha().isExactlyValue(1.0))
      return failure();
    auto matmul = MatMulOp::create(rewriter, op.getLoc(), op.getA(), op.getB(),
                                   op.getTransposeA(), op.getTransposeB());
    keepAutodiffRecord(op, matmul);
    rewriter.replaceOp(op, matmul.getResult());
    return success();
  }
};

/// Dropout with ratio 0 keeps everything.
struct RemoveZeroDropout : OpRewritePattern<DropoutOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(DropoutOp op,
                                PatternRewriter &rewriter) const override {
    if (!op.getRatio().isZero())
      return failure();
    auto maskType = cast<ShapedType>(op.getMask().getType());
    Value keepAll = ConstantOp::create(
        rewriter, op.getLoc(), DenseElementsAttr::get(maskType, true));
    rewriter.replaceOp(op, {op.getInput(), keepAll});
    return success();
  }
};
} // namespace

void TransposeOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                              MLIRContext *context) {
  patterns.add<ComposeTransposes, SwapTransposedMatMul>(context);
}

void MatMulOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                           MLIRContext *context) {
  patterns.add<FoldTransposeIntoMatMul>(context);
}

void GemmOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                         MLIRContext *context) {
  patterns.add<GemmWithoutBiasToMatMul>(context);
}

void DropoutOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                            MLIRContext *context) {
  patterns.add<RemoveZeroDropout>(context);
}
