//===- DsElementwise.cpp - ElementwiseOpInterface of ds ops ----------------===//
//
// Each elementwise op's computation on one element, as arith and math ops on
// scalars, for ds.fused bodies. Floats are f32 (ds.fused rounds to the
// result's type once); the formulas are those of the runtime's kernels.
//
//===----------------------------------------------------------------------===//

#include "ds/IR/DsDialect.h"

using namespace mlir;
using namespace dsopt::ds;

namespace {
Value f32Constant(OpBuilder &b, Location loc, double value) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(value));
}

bool isFloat(Value v) { return isa<FloatType>(v.getType()); }

/// Integer arithmetic of the operands' type; i1 never reaches these.
template <typename FloatOp, typename IntOp>
Value arithmetic(OpBuilder &b, Location loc, ValueRange operands) {
  if (isFloat(operands[0]))
    return FloatOp::create(b, loc, operands[0], operands[1]);
  return IntOp::create(b, loc, operands[0], operands[1]);
}
} // namespace

Value AddOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return arithmetic<arith::AddFOp, arith::AddIOp>(b, loc, operands);
}
Value SubOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return arithmetic<arith::SubFOp, arith::SubIOp>(b, loc, operands);
}
Value MulOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return arithmetic<arith::MulFOp, arith::MulIOp>(b, loc, operands);
}
// Integer division truncates, as C++ and the runtime do.
Value DivOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return arithmetic<arith::DivFOp, arith::DivSIOp>(b, loc, operands);
}
Value PowOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return math::PowFOp::create(b, loc, operands[0], operands[1]);
}

// fmod: C's fmod / truncating remainder (sign of lhs); otherwise the
// remainder moves to the divisor's sign, as the mod kernel.
Value ModOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Value lhs = operands[0], rhs = operands[1];
  bool floating = isFloat(lhs);
  Value r = floating ? Value(arith::RemFOp::create(b, loc, lhs, rhs))
                     : Value(arith::RemSIOp::create(b, loc, lhs, rhs));
  if (getFmod())
    return r;
  Value zero = floating ? f32Constant(b, loc, 0.0)
                        : Value(arith::ConstantOp::create(
                              b, loc, b.getIntegerAttr(lhs.getType(), 0)));
  auto less = [&](Value v) -> Value {
    if (floating)
      return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, v, zero);
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, v, zero);
  };
  Value nonzero =
      floating
          ? Value(arith::CmpFOp::create(b, loc, arith::CmpFPredicate::ONE, r,
                                        zero))
          : Value(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, r,
                                        zero));
  Value signsDiffer =
      arith::XOrIOp::create(b, loc, less(r), less(rhs));
  Value adjust = arith::AndIOp::create(b, loc, nonzero, signsDiffer);
  Value moved = arithmetic<arith::AddFOp, arith::AddIOp>(b, loc, {r, rhs});
  return arith::SelectOp::create(b, loc, adjust, moved, r);
}

Value SqrtOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return math::SqrtOp::create(b, loc, operands[0]);
}
Value ReciprocalOp::buildScalar(OpBuilder &b, Location loc,
                                ValueRange operands) {
  return arith::DivFOp::create(b, loc, f32Constant(b, loc, 1.0), operands[0]);
}
Value ExpOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return math::ExpOp::create(b, loc, operands[0]);
}
Value LogOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return math::LogOp::create(b, loc, operands[0]);
}
Value TanhOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return math::TanhOp::create(b, loc, operands[0]);
}
Value ErfOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return math::ErfOp::create(b, loc, operands[0]);
}
Value SigmoidOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Value negated = arith::NegFOp::create(b, loc, operands[0]);
  Value denominator = arith::AddFOp::create(
      b, loc, f32Constant(b, loc, 1.0), math::ExpOp::create(b, loc, negated));
  return arith::DivFOp::create(b, loc, f32Constant(b, loc, 1.0), denominator);
}

Value NegOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  if (isFloat(operands[0]))
    return arith::NegFOp::create(b, loc, operands[0]);
  Value zero = arith::ConstantOp::create(
      b, loc, b.getIntegerAttr(operands[0].getType(), 0));
  return arith::SubIOp::create(b, loc, zero, operands[0]);
}

// max(x, 0) that lets NaN through, like PyTorch's relu.
Value ReluOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  if (isFloat(operands[0]))
    return arith::MaximumFOp::create(b, loc, operands[0],
                                     f32Constant(b, loc, 0.0));
  Value zero = arith::ConstantOp::create(
      b, loc, b.getIntegerAttr(operands[0].getType(), 0));
  return arith::MaxSIOp::create(b, loc, operands[0], zero);
}

Value LeakyReluOp::buildScalar(OpBuilder &b, Location loc,
                               ValueRange operands) {
  Value x = operands[0];
  Value positive = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE, x,
                                         f32Constant(b, loc, 0.0));
  Value scaled = arith::MulFOp::create(
      b, loc, x, f32Constant(b, loc, getAlpha().convertToFloat()));
  return arith::SelectOp::create(b, loc, positive, x, scaled);
}

Value GeluOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Value x = operands[0];
  Value inner;
  if (getApproximate() == GeluApproximation::none) {
    // erf(x / sqrt(2))
    inner = math::ErfOp::create(
        b, loc,
        arith::MulFOp::create(b, loc, x, f32Constant(b, loc, M_SQRT1_2)));
  } else {
    // tanh(sqrt(2 / pi) * (x + 0.044715 x^3))
    Value cube = arith::MulFOp::create(
        b, loc, x, arith::MulFOp::create(b, loc, x, x));
    Value sum = arith::AddFOp::create(
        b, loc, x,
        arith::MulFOp::create(b, loc, f32Constant(b, loc, 0.044715), cube));
    inner = math::TanhOp::create(
        b, loc,
        arith::MulFOp::create(b, loc,
                              f32Constant(b, loc, 0.7978845608028654), sum));
  }
  Value onePlus =
      arith::AddFOp::create(b, loc, f32Constant(b, loc, 1.0), inner);
  Value half = arith::MulFOp::create(b, loc, f32Constant(b, loc, 0.5), x);
  return arith::MulFOp::create(b, loc, half, onePlus);
}

// x where x > 20, else log1p(exp(x)), as the softplus kernel.
Value SoftplusOp::buildScalar(OpBuilder &b, Location loc,
                              ValueRange operands) {
  Value x = operands[0];
  Value large = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, x,
                                      f32Constant(b, loc, 20.0));
  Value soft =
      math::Log1pOp::create(b, loc, math::ExpOp::create(b, loc, x));
  return arith::SelectOp::create(b, loc, large, x, soft);
}

namespace {
/// x > 0 ? x : alpha * expm1(x * scale), the elu and celu kernels' formula.
Value eluScalar(OpBuilder &b, Location loc, Value x, float alpha,
                float scale) {
  Value positive = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, x,
                                         f32Constant(b, loc, 0.0));
  Value inner = scale == 1.0f ? x
                              : arith::MulFOp::create(
                                    b, loc, x, f32Constant(b, loc, scale));
  Value negative = arith::MulFOp::create(
      b, loc, f32Constant(b, loc, alpha), math::ExpM1Op::create(b, loc, inner));
  return arith::SelectOp::create(b, loc, positive, x, negative);
}
} // namespace

Value EluOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return eluScalar(b, loc, operands[0], getAlpha().convertToFloat(), 1.0f);
}
Value CeluOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  float alpha = getAlpha().convertToFloat();
  return eluScalar(b, loc, operands[0], alpha, 1.0f / alpha);
}
Value SinOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return math::SinOp::create(b, loc, operands[0]);
}
Value CosOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return math::CosOp::create(b, loc, operands[0]);
}
Value FloorOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return math::FloorOp::create(b, loc, operands[0]);
}
Value CeilOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return math::CeilOp::create(b, loc, operands[0]);
}
Value RoundOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return math::RoundEvenOp::create(b, loc, operands[0]);
}

Value NotOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Value one = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
  return arith::XOrIOp::create(b, loc, operands[0], one);
}

Value CompareOp::buildScalar(OpBuilder &b, Location loc,
                             ValueRange operands) {
  Value lhs = operands[0], rhs = operands[1];
  if (isFloat(lhs)) {
    // Ordered predicates: any comparison with NaN is false, as in C++.
    arith::CmpFPredicate predicate;
    switch (getPredicate()) {
    case ComparePredicate::eq: predicate = arith::CmpFPredicate::OEQ; break;
    case ComparePredicate::lt: predicate = arith::CmpFPredicate::OLT; break;
    case ComparePredicate::le: predicate = arith::CmpFPredicate::OLE; break;
    case ComparePredicate::gt: predicate = arith::CmpFPredicate::OGT; break;
    case ComparePredicate::ge: predicate = arith::CmpFPredicate::OGE; break;
    }
    return arith::CmpFOp::create(b, loc, predicate, lhs, rhs);
  }
  // false < true for i1; integers are signed.
  bool isBool = lhs.getType().isInteger(1);
  arith::CmpIPredicate predicate;
  switch (getPredicate()) {
  case ComparePredicate::eq: predicate = arith::CmpIPredicate::eq; break;
  case ComparePredicate::lt:
    predicate = isBool ? arith::CmpIPredicate::ult : arith::CmpIPredicate::slt;
    break;
  case ComparePredicate::le:
    predicate = isBool ? arith::CmpIPredicate::ule : arith::CmpIPredicate::sle;
    break;
  case ComparePredicate::gt:
    predicate = isBool ? arith::CmpIPredicate::ugt : arith::CmpIPredicate::sgt;
    break;
  case ComparePredicate::ge:
    predicate = isBool ? arith::CmpIPredicate::uge : arith::CmpIPredicate::sge;
    break;
  }
  return arith::CmpIOp::create(b, loc, predicate, lhs, rhs);
}

Value WhereOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return arith::SelectOp::create(b, loc, operands[0], operands[1],
                                 operands[2]);
}

Value CastOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Value x = operands[0];
  Type to = FusedOp::getComputeType(
      cast<ShapedType>(getResult().getType()).getElementType());
  Type from = x.getType();
  if (from == to)
    return x; // float to float: the store rounds
  if (to.isInteger(1)) {
    if (isa<FloatType>(from))
      return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, x,
                                   f32Constant(b, loc, 0.0));
    Value zero = arith::ConstantOp::create(b, loc, b.getIntegerAttr(from, 0));
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, x, zero);
  }
  if (isa<FloatType>(to))
    return from.isInteger(1) ? Value(arith::UIToFPOp::create(b, loc, to, x))
                             : Value(arith::SIToFPOp::create(b, loc, to, x));
  if (isa<FloatType>(from))
    return arith::FPToSIOp::create(b, loc, to, x);
  unsigned fromWidth = from.getIntOrFloatBitWidth();
  unsigned toWidth = to.getIntOrFloatBitWidth();
  if (fromWidth > toWidth)
    return arith::TruncIOp::create(b, loc, to, x);
  return from.isInteger(1) ? Value(arith::ExtUIOp::create(b, loc, to, x))
                           : Value(arith::ExtSIOp::create(b, loc, to, x));
}
