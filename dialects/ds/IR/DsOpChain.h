//===- DsOpChain.h - building chains of ds ops at one location --*- C++ -*-===//
//
// Shorthands for the ds ops a rewrite builds in sequence at one location:
// the derivatives (DsVJP.cpp) and the rank-local forms of the
// tensor-parallel rules (DsSharding.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_DIALECT_DS_DSOPCHAIN_H
#define DSOPT_DIALECT_DS_DSOPCHAIN_H

#include "ds/IR/DsDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace dsopt::ds {

class OpChain {
public:
  using APFloat = llvm::APFloat;
  using APInt = llvm::APInt;
  using Attribute = mlir::Attribute;
  using DenseElementsAttr = mlir::DenseElementsAttr;
  using ElementsAttr = mlir::ElementsAttr;
  using FloatType = mlir::FloatType;
  using Operation = mlir::Operation;
  using NamedAttribute = mlir::NamedAttribute;
  using RankedTensorType = mlir::RankedTensorType;
  using StringRef = llvm::StringRef;
  using Type = mlir::Type;
  using TypeRange = mlir::TypeRange;
  using Value = mlir::Value;
  using ValueRange = mlir::ValueRange;
  template <typename T> using ArrayRef = llvm::ArrayRef<T>;
  template <typename T, unsigned N = 6>
  using SmallVector = llvm::SmallVector<T, N>;

  OpChain(mlir::OpBuilder &builder, mlir::Location loc) : b(builder), loc(loc) {}

  static RankedTensorType tensorType(Value value) {
    return mlir::cast<RankedTensorType>(value.getType());
  }

  NamedAttribute attr(StringRef name, Attribute value) {
    return b.getNamedAttr(name, value);
  }

  /// An op whose result types are inferred.
  template <typename OpTy>
  Value infer(ValueRange operands, ArrayRef<NamedAttribute> attrs = {},
              unsigned result = 0) {
    return inferOp<OpTy>(operands, attrs)->getResult(result);
  }
  template <typename OpTy>
  Operation *inferOp(ValueRange operands, ArrayRef<NamedAttribute> attrs = {}) {
    return OpTy::create(b, loc, operands, attrs).getOperation();
  }
  /// An op with the given result type.
  template <typename OpTy>
  Value typed(Type type, ValueRange operands,
              ArrayRef<NamedAttribute> attrs = {}) {
    return OpTy::create(b, loc, TypeRange{type}, operands, attrs)
        ->getResult(0);
  }

  /// A 0-d constant of `element` type.
  Value scalar(Type element, double value) {
    auto type = RankedTensorType::get({}, element);
    Attribute attr;
    if (auto floatType = mlir::dyn_cast<FloatType>(element)) {
      APFloat v(value);
      bool lost;
      v.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                &lost);
      attr = DenseElementsAttr::get(type, v);
    } else {
      attr = DenseElementsAttr::get(
          type, APInt(element.getIntOrFloatBitWidth(),
                      static_cast<int64_t>(value), /*isSigned=*/true));
    }
    return ConstantOp::create(b, loc, mlir::cast<ElementsAttr>(attr));
  }
  Value scalarLike(Value like, double value) {
    return scalar(tensorType(like).getElementType(), value);
  }
  /// A tensor of `type` filled with zeros (an absent gradient made explicit).
  Value zeros(Type type) {
    auto tensor = mlir::cast<RankedTensorType>(type);
    Type element = tensor.getElementType();
    Attribute zero = mlir::isa<FloatType>(element)
                         ? Attribute(b.getFloatAttr(element, 0.0))
                         : Attribute(b.getIntegerAttr(element, 0));
    return ConstantOp::create(
        b, loc, mlir::cast<ElementsAttr>(DenseElementsAttr::get(tensor, zero)));
  }

  Value add(Value x, Value y) { return infer<AddOp>({x, y}); }
  Value sub(Value x, Value y) { return infer<SubOp>({x, y}); }
  Value mul(Value x, Value y) { return infer<MulOp>({x, y}); }
  Value div(Value x, Value y) { return infer<DivOp>({x, y}); }
  Value neg(Value x) { return typed<NegOp>(x.getType(), {x}); }
  Value exp(Value x) { return typed<ExpOp>(x.getType(), {x}); }
  Value log(Value x) { return typed<LogOp>(x.getType(), {x}); }
  Value tanh(Value x) { return typed<TanhOp>(x.getType(), {x}); }
  Value erf(Value x) { return typed<ErfOp>(x.getType(), {x}); }
  Value pow(Value x, Value y) { return infer<PowOp>({x, y}); }
  Value compare(ComparePredicate predicate, Value x, Value y) {
    return infer<CompareOp>(
        {x, y},
        {attr("predicate", ComparePredicateAttr::get(b.getContext(),
                                                     predicate))});
  }
  Value where(Value c, Value x, Value y) { return infer<WhereOp>({c, x, y}); }
  Value convert(Value x, Type element) {
    auto type = tensorType(x).clone(element);
    if (type == x.getType())
      return x;
    return typed<CastOp>(type, {x});
  }
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    auto type = tensorType(x).clone(shape);
    if (type == x.getType())
      return x;
    return typed<ReshapeOp>(type, {x});
  }
  Value broadcastTo(Value x, RankedTensorType type) {
    if (x.getType() == type)
      return x;
    return typed<BroadcastToOp>(type, {x});
  }
  Value reduceSum(Value x, ArrayRef<int64_t> axes, bool keepdims) {
    if (axes.empty())
      return x;
    return infer<ReduceSumOp>({x}, {attr("axes", b.getDenseI64ArrayAttr(axes)),
                                     attr("keepdims", b.getBoolAttr(keepdims))});
  }
  Value transpose(Value x, ArrayRef<int64_t> perm) {
    return infer<TransposeOp>({x}, {attr("perm", b.getDenseI64ArrayAttr(perm))});
  }
  Value matmul(Value x, Value y, bool transposeX, bool transposeY) {
    SmallVector<NamedAttribute> attrs;
    if (transposeX)
      attrs.push_back(attr("transpose_lhs", b.getUnitAttr()));
    if (transposeY)
      attrs.push_back(attr("transpose_rhs", b.getUnitAttr()));
    return infer<MatMulOp>({x, y}, attrs);
  }

  /// Sums `grad` (of a broadcast shape) back to the shape of `target`:
  /// over the leading axes `target` lacks and the axes where it has size 1.
  Value reduceTo(Value grad, Type target) {
    auto to = mlir::cast<RankedTensorType>(target);
    auto from = tensorType(grad);
    if (from.getShape() == to.getShape())
      return convert(grad, to.getElementType());
    int64_t lead = from.getRank() - to.getRank();
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < from.getRank(); ++d)
      if (d < lead || (to.getDimSize(d - lead) == 1 && from.getDimSize(d) != 1))
        axes.push_back(d);
    // Summing the leading axes away gives the target shape directly.
    bool leadingOnly = llvm::all_of(axes, [&](int64_t d) { return d < lead; });
    Value sum = reduceSum(grad, axes, /*keepdims=*/!leadingOnly);
    return convert(reshape(sum, to.getShape()), to.getElementType());
  }

  mlir::OpBuilder &b;
  mlir::Location loc;
};

} // namespace dsopt::ds

#endif // DSOPT_DIALECT_DS_DSOPCHAIN_H
