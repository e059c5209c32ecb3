//===- DsVJP.cpp - VJPOpInterface: the derivative of every ds op ------------===//
//
// Each op's vector-Jacobian product as ds ops. Elementwise derivatives are
// written with elementwise ops (ds-fuse-elementwise later turns each chain
// into one loop); derivatives that need a kernel of their own use the
// gradient ops (ds.softmax_grad, ds.gather_grad, ...). Gradients of operands
// that were broadcast are summed back to the operand's shape.
//
// The formulas follow PyTorch's autograd (tools/autograd/derivatives.yaml)
// where a choice exists: relu's derivative at 0 is 0, max routes a tied
// maximum's gradient evenly, division's derivative with respect to the
// divisor is -dy * a / (b * b).
//
//===----------------------------------------------------------------------===//

#include "ds/IR/DsDialect.h"
#include "ds/IR/DsOpChain.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>

using namespace mlir;
using namespace dsopt::ds;

namespace {

RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// Builds the ds ops of one derivative at the location of the forward op,
/// named `<node>.grad` so that plans and traces tell backward from forward.
class Grad : public OpChain {
public:
  Grad(OpBuilder &builder, Operation *forward)
      : OpChain(builder, gradLoc(builder, forward)) {}

  static Location gradLoc(OpBuilder &b, Operation *op) {
    std::string name = getNodeName(op->getLoc());
    if (name.empty())
      name = op->getName().stripDialect().str();
    return NameLoc::get(b.getStringAttr(name + ".grad"), op->getLoc());
  }

};

/// Appends the gradient `grad` for each operand `i` whose gradient is needed.
class Grads {
public:
  Grads(ArrayRef<bool> needed, SmallVectorImpl<Value> &out)
      : needed(needed), out(out) {
    out.assign(needed.size(), Value());
  }
  bool operator[](unsigned i) const { return i < needed.size() && needed[i]; }
  void set(unsigned i, Value grad) {
    if ((*this)[i])
      out[i] = grad;
  }

private:
  ArrayRef<bool> needed;
  SmallVectorImpl<Value> &out;
};

/// The derivative of a needed operand the op cannot differentiate with
/// respect to.
LogicalResult noDerivative(Operation *op, unsigned operand, StringRef what) {
  return op->emitOpError() << "has no derivative with respect to operand "
                           << operand << " (" << what
                           << "); freeze the parameters it depends on";
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

#define DS_UNARY_VJP(OpClass, BODY)                                            \
  LogicalResult OpClass::buildVJP(OpBuilder &builder,                          \
                                  ArrayRef<Value> resultGrads,                 \
                                  ArrayRef<bool> needed,                       \
                                  SmallVectorImpl<Value> &operandGrads) {      \
    Grads grads(needed, operandGrads);                                         \
    Value dy = resultGrads[0];                                                 \
    if (!dy || !grads[0])                                                      \
      return success();                                                        \
    Grad g(builder, *this);                                                    \
    Value x = getInput(), y = getResult();                                     \
    (void)x;                                                                   \
    (void)y;                                                                   \
    BODY;                                                                      \
    return success();                                                          \
  }

// d sqrt(x) = 0.5 / sqrt(x)
DS_UNARY_VJP(SqrtOp,
             grads.set(0, g.div(g.mul(dy, g.scalarLike(dy, 0.5)), y)))
// d (1/x) = -1/x^2 = -y^2
DS_UNARY_VJP(ReciprocalOp, grads.set(0, g.neg(g.mul(dy, g.mul(y, y)))))
DS_UNARY_VJP(ExpOp, grads.set(0, g.mul(dy, y)))
DS_UNARY_VJP(LogOp, grads.set(0, g.div(dy, x)))
// d tanh = 1 - tanh^2
DS_UNARY_VJP(TanhOp, grads.set(0, g.mul(dy, g.sub(g.scalarLike(y, 1.0),
                                                  g.mul(y, y)))))
// d erf = 2/sqrt(pi) exp(-x^2)
DS_UNARY_VJP(ErfOp,
             grads.set(0, g.mul(dy, g.mul(g.scalarLike(x, 1.1283791670955126),
                                          g.exp(g.neg(g.mul(x, x)))))))
// d sigmoid = y (1 - y)
DS_UNARY_VJP(SigmoidOp,
             grads.set(0, g.mul(dy, g.mul(y, g.sub(g.scalarLike(y, 1.0), y)))))
DS_UNARY_VJP(NegOp, grads.set(0, g.neg(dy)))
// 0 where x <= 0, as torch's threshold_backward.
DS_UNARY_VJP(ReluOp,
             grads.set(0, g.where(g.compare(ComparePredicate::gt, x,
                                            g.scalarLike(x, 0.0)),
                                  dy, g.scalarLike(dy, 0.0))))
DS_UNARY_VJP(LeakyReluOp,
             grads.set(0, g.where(g.compare(ComparePredicate::gt, x,
                                            g.scalarLike(x, 0.0)),
                                  dy,
                                  g.mul(dy, g.scalarLike(
                                                dy, getAlpha()
                                                        .convertToDouble())))))
// d softplus = sigmoid(x); for x > 20 the kernel returns x and sigmoid
// rounds to 1, as torch's softplus_backward.
DS_UNARY_VJP(SoftplusOp,
             grads.set(0, g.mul(dy, g.typed<SigmoidOp>(x.getType(), {x}))))
// alpha exp(x) = y + alpha where x <= 0, as torch's elu_backward on the
// result (no exp of a large x).
DS_UNARY_VJP(EluOp,
             grads.set(0, g.mul(dy, g.where(g.compare(ComparePredicate::gt, x,
                                                      g.scalarLike(x, 0.0)),
                                            g.scalarLike(y, 1.0),
                                            g.add(y, g.scalarLike(
                                                         y, getAlpha()
                                                                .convertToDouble()))))))
// exp(x / alpha) = (y + alpha) / alpha where x <= 0.
DS_UNARY_VJP(CeluOp, {
  double alpha = getAlpha().convertToDouble();
  Value slope = g.mul(g.add(y, g.scalarLike(y, alpha)),
                      g.scalarLike(y, 1.0 / alpha));
  grads.set(0, g.mul(dy, g.where(g.compare(ComparePredicate::gt, x,
                                           g.scalarLike(x, 0.0)),
                                 g.scalarLike(y, 1.0), slope)));
})
DS_UNARY_VJP(SinOp,
             grads.set(0, g.mul(dy, g.typed<CosOp>(x.getType(), {x}))))
DS_UNARY_VJP(CosOp,
             grads.set(0, g.neg(g.mul(dy, g.typed<SinOp>(x.getType(), {x})))))
// Piecewise constant: zero almost everywhere, as in PyTorch.
DS_UNARY_VJP(FloorOp, grads.set(0, g.zeros(x.getType())))
DS_UNARY_VJP(CeilOp, grads.set(0, g.zeros(x.getType())))
DS_UNARY_VJP(RoundOp, grads.set(0, g.zeros(x.getType())))
#undef DS_UNARY_VJP

LogicalResult GeluOp::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,
                               ArrayRef<bool> needed,
                               SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  Value x = getInput();
  auto c = [&](double v) { return g.scalarLike(x, v); };
  if (getApproximate() == GeluApproximation::none) {
    // Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    Value cdf = g.mul(c(0.5), g.add(c(1.0), g.erf(g.mul(x, c(M_SQRT1_2)))));
    Value pdf = g.mul(c(0.3989422804014327),
                      g.exp(g.mul(g.mul(x, x), c(-0.5))));
    grads.set(0, g.mul(dy, g.add(cdf, g.mul(x, pdf))));
    return success();
  }
  // tanh form, as torch's gelu_backward with approximate='tanh'.
  constexpr double kBeta = 0.7978845608028654, kKappa = 0.044715;
  Value x2 = g.mul(x, x);
  Value inner = g.mul(c(kBeta), g.add(x, g.mul(c(kKappa), g.mul(x2, x))));
  Value t = g.tanh(inner);
  Value left = g.mul(c(0.5), x);
  Value right = g.add(c(1.0), t);
  Value leftDerivative = g.mul(c(0.5), right);
  Value innerDerivative = g.mul(c(kBeta), g.add(c(1.0), g.mul(c(3 * kKappa),
                                                                x2)));
  Value rightDerivative = g.mul(g.mul(left, g.sub(c(1.0), g.mul(t, t))),
                                innerDerivative);
  grads.set(0, g.mul(dy, g.add(leftDerivative, rightDerivative)));
  return success();
}

LogicalResult AddOp::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,
                              ArrayRef<bool> needed,
                              SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  if (grads[0])
    grads.set(0, g.reduceTo(dy, getLhs().getType()));
  if (grads[1])
    grads.set(1, g.reduceTo(dy, getRhs().getType()));
  return success();
}

LogicalResult SubOp::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,
                              ArrayRef<bool> needed,
                              SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  if (grads[0])
    grads.set(0, g.reduceTo(dy, getLhs().getType()));
  if (grads[1])
    grads.set(1, g.reduceTo(g.neg(dy), getRhs().getType()));
  return success();
}

LogicalResult MulOp::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,
                              ArrayRef<bool> needed,
                              SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  if (grads[0])
    grads.set(0, g.reduceTo(g.mul(dy, getRhs()), getLhs().getType()));
  if (grads[1])
    grads.set(1, g.reduceTo(g.mul(dy, getLhs()), getRhs().getType()));
  return success();
}

LogicalResult DivOp::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,
                              ArrayRef<bool> needed,
                              SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  Value a = getLhs(), d = getRhs();
  if (grads[0])
    grads.set(0, g.reduceTo(g.div(dy, d), a.getType()));
  if (grads[1])
    grads.set(1, g.reduceTo(g.neg(g.div(g.mul(dy, a), g.mul(d, d))),
                            d.getType()));
  return success();
}

// d/dlhs = 1; d/drhs = -q, q the quotient rounded as the remainder's
// (toward zero for fmod, down otherwise): torch.fmod's and
// torch.remainder's derivatives.
LogicalResult ModOp::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,
                              ArrayRef<bool> needed,
                              SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  Value a = getLhs(), d = getRhs();
  if (grads[0])
    grads.set(0, g.reduceTo(dy, a.getType()));
  if (grads[1]) {
    Value q = g.div(a, d);
    Value down = g.typed<FloorOp>(q.getType(), {q});
    if (getFmod()) {
      Value up = g.typed<CeilOp>(q.getType(), {q});
      down = g.where(g.compare(ComparePredicate::lt, q, g.scalarLike(q, 0.0)),
                     up, down);
    }
    grads.set(1, g.reduceTo(g.neg(g.mul(dy, down)), d.getType()));
  }
  return success();
}

LogicalResult PowOp::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,
                              ArrayRef<bool> needed,
                              SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  Value a = getLhs(), e = getRhs();
  if (grads[0]) {
    // e * a^(e - 1); a zero exponent has a zero derivative.
    Value derivative =
        g.mul(e, g.pow(a, g.sub(e, g.scalarLike(e, 1.0))));
    grads.set(0, g.reduceTo(g.mul(dy, derivative), a.getType()));
  }
  if (grads[1]) {
    // y * log(a), taken as 0 where a == 0 and e >= 0 (as torch).
    Value zeroBase = g.compare(ComparePredicate::eq, a, g.scalarLike(a, 0.0));
    Value derivative =
        g.where(zeroBase, g.scalarLike(dy, 0.0), g.mul(getResult(), g.log(a)));
    grads.set(1, g.reduceTo(g.mul(dy, derivative), e.getType()));
  }
  return success();
}

LogicalResult WhereOp::buildVJP(OpBuilder &builder,
                                ArrayRef<Value> resultGrads,
                                ArrayRef<bool> needed,
                                SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  Value zero = g.scalarLike(dy, 0.0);
  if (grads[1])
    grads.set(1, g.reduceTo(g.where(getCondition(), dy, zero),
                            getLhs().getType()));
  if (grads[2])
    grads.set(2, g.reduceTo(g.where(getCondition(), zero, dy),
                            getRhs().getType()));
  return success();
}

LogicalResult CastOp::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,
                               ArrayRef<bool> needed,
                               SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Type element = tensorType(getInput()).getElementType();
  if (!isa<FloatType>(element))
    return success();
  Grad g(builder, *this);
  grads.set(0, g.convert(dy, element));
  return success();
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::buildVJP(OpBuilder &builder,
                                 ArrayRef<Value> resultGrads,
                                 ArrayRef<bool> needed,
                                 SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  Value lhs = getLhs(), rhs = getRhs();
  auto lhsType = tensorType(lhs), rhsType = tensorType(rhs);
  bool tl = getTransposeLhs(), tr = getTransposeRhs();

  // Vectors become matrices ([K] -> [1, K] on the left, [K, 1] on the
  // right) and dy gets the matching axis back.
  SmallVector<int64_t> dyShape(tensorType(dy).getShape());
  if (lhsType.getRank() == 1) {
    lhs = g.reshape(lhs, {1, lhsType.getDimSize(0)});
    dyShape.insert(dyShape.end() - (rhsType.getRank() == 1 ? 0 : 1), 1);
  }
  if (rhsType.getRank() == 1) {
    rhs = g.reshape(rhs, {rhsType.getDimSize(0), 1});
    dyShape.push_back(1);
  }
  dy = g.reshape(dy, dyShape);
  auto l = tensorType(lhs), r = tensorType(rhs);

  if (grads[0]) {
    Value grad;
    if (!tl && l.getRank() == 2 && r.getRank() == 2) {
      grad = g.matmul(dy, rhs, false, !tr);
    } else if (!tl) {
      grad = g.matmul(dy, rhs, false, !tr); // [batch..., M, K]
    } else {
      grad = g.matmul(rhs, dy, tr, true); // [batch..., K, M]
    }
    grads.set(0, g.reduceTo(grad, lhsType.getRank() == 1
                                      ? Type(l)
                                      : Type(lhsType)));
    if (lhsType.getRank() == 1 && operandGrads[0])
      operandGrads[0] = g.reshape(operandGrads[0], lhsType.getShape());
  }
  if (grads[1]) {
    Value grad;
    if (!tl && r.getRank() == 2 && l.getRank() > 2) {
      // Weights of a batched activation: one GEMM over all rows,
      // [rows, K]^T x [rows, N] (or its transpose for x W^T), instead of a
      // batch of products summed afterwards.
      int64_t k = l.getShape().back();
      int64_t n = tensorType(dy).getShape().back();
      int64_t rows = l.getNumElements() / std::max<int64_t>(k, 1);
      Value rowsLhs = g.reshape(lhs, {rows, k});
      Value rowsDy = g.reshape(dy, {rows, n});
      grad = tr ? g.matmul(rowsDy, rowsLhs, true, false)
                : g.matmul(rowsLhs, rowsDy, true, false);
    } else if (!tr) {
      grad = g.matmul(lhs, dy, !tl, false); // [batch..., K, N]
    } else {
      grad = g.matmul(dy, lhs, true, tl); // [batch..., N, K]
    }
    grads.set(1, g.reduceTo(grad, rhsType.getRank() == 1 ? Type(r)
                                                         : Type(rhsType)));
    if (rhsType.getRank() == 1 && operandGrads[1])
      operandGrads[1] = g.reshape(operandGrads[1], rhsType.getShape());
  }
  return success();
}

LogicalResult GemmOp::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,
                               ArrayRef<bool> needed,
                               SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  bool ta = getTransposeA(), tb = getTransposeB();
  double alpha = getAlpha().convertToDouble();
  auto gemm = [&](Value x, Value y, bool tx, bool ty) {
    SmallVector<NamedAttribute> attrs{
        g.attr("alpha", builder.getF32FloatAttr(alpha))};
    if (tx)
      attrs.push_back(g.attr("transpose_a", builder.getUnitAttr()));
    if (ty)
      attrs.push_back(g.attr("transpose_b", builder.getUnitAttr()));
    return g.infer<GemmOp>({x, y}, attrs);
  };
  if (grads[0])
    grads.set(0, ta ? gemm(getB(), dy, tb, true) : gemm(dy, getB(), false, !tb));
  if (grads[1])
    grads.set(1, tb ? gemm(dy, getA(), true, ta) : gemm(getA(), dy, !ta, false));
  if (getC() && grads[2]) {
    double beta = getBeta().convertToDouble();
    Value scaled = beta == 1.0 ? dy : g.mul(dy, g.scalarLike(dy, beta));
    grads.set(2, g.reduceTo(scaled, getC().getType()));
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization and softmax
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::buildVJP(OpBuilder &builder,
                                  ArrayRef<Value> resultGrads,
                                  ArrayRef<bool> needed,
                                  SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  grads.set(0, g.infer<SoftmaxGradOp>(
                   {getResult(), dy},
                   {g.attr("axis", builder.getI64IntegerAttr(getAxis()))}));
  return success();
}

LogicalResult LogSoftmaxOp::buildVJP(OpBuilder &builder,
                                     ArrayRef<Value> resultGrads,
                                     ArrayRef<bool> needed,
                                     SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  grads.set(0, g.infer<LogSoftmaxGradOp>(
                   {getResult(), dy},
                   {g.attr("axis", builder.getI64IntegerAttr(getAxis()))}));
  return success();
}

/// The gradient op of an attention op (ds.attention_grad of ds.attention,
/// ds.attention_packed_grad of ds.attention_packed) from its operands, its
/// result, its lse and the result's gradient, with its scale and flags;
/// null when the result has no gradient. The lse has no derivative.
template <typename GradOp, typename Op>
static FailureOr<Operation *> attentionGrad(Op op, OpBuilder &builder,
                                            ArrayRef<Value> resultGrads,
                                            ValueRange operands) {
  Value dy = resultGrads[0];
  if (resultGrads[1]) {
    op.emitOpError() << "has no derivative through its log-sum-exp result";
    return failure();
  }
  if (!dy)
    return static_cast<Operation *>(nullptr);
  Grad g(builder, op);
  SmallVector<NamedAttribute> attrs{g.attr("scale", op.getScaleAttr())};
  for (StringRef flag : {"causal", "tokens_major"})
    if (op->hasAttr(flag))
      attrs.push_back(g.attr(flag, builder.getUnitAttr()));
  SmallVector<Value> inputs(operands);
  inputs.append({op.getResult(), op.getLse(), dy});
  return g.inferOp<GradOp>(inputs, attrs);
}

LogicalResult AttentionOp::buildVJP(OpBuilder &builder,
                                    ArrayRef<Value> resultGrads,
                                    ArrayRef<bool> needed,
                                    SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  FailureOr<Operation *> grad = attentionGrad<AttentionGradOp>(
      *this, builder, resultGrads, {getQuery(), getKey(), getValue()});
  if (failed(grad))
    return failure();
  if (*grad)
    for (unsigned i = 0; i < 3; ++i)
      grads.set(i, (*grad)->getResult(i));
  return success();
}

LogicalResult AttentionPackedOp::buildVJP(OpBuilder &builder,
                                          ArrayRef<Value> resultGrads,
                                          ArrayRef<bool> needed,
                                          SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  FailureOr<Operation *> grad = attentionGrad<AttentionPackedGradOp>(
      *this, builder, resultGrads, getQkv());
  if (failed(grad))
    return failure();
  if (*grad)
    grads.set(0, (*grad)->getResult(0));
  return success();
}

LogicalResult LayerNormOp::buildVJP(OpBuilder &builder,
                                    ArrayRef<Value> resultGrads,
                                    ArrayRef<bool> needed,
                                    SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (resultGrads[1] || resultGrads[2])
    return emitOpError() << "has no derivative through its mean and inverse "
                            "standard deviation results";
  if (!dy)
    return success();
  Grad g(builder, *this);
  Operation *grad = g.inferOp<LayerNormGradOp>(
      {getInput(), getScale(), getMean(), getInvStdDev(), dy},
      {g.attr("axis", builder.getI64IntegerAttr(getAxis()))});
  grads.set(0, grad->getResult(0));
  grads.set(1, grad->getResult(1));
  if (getBias())
    grads.set(2, g.reduceTo(grad->getResult(2), getBias().getType()));
  return success();
}

LogicalResult BatchNormOp::buildVJP(OpBuilder &builder,
                                    ArrayRef<Value> resultGrads,
                                    ArrayRef<bool> needed,
                                    SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  // Inference-mode statistics are constants of the forward: everything is
  // elementwise over [C] broadcast along [1, C, 1...].
  auto inputType = tensorType(getInput());
  SmallVector<int64_t> channelShape(inputType.getRank(), 1);
  channelShape[1] = inputType.getDimSize(1);
  SmallVector<int64_t> reduceAxes;
  for (int64_t d = 0; d < inputType.getRank(); ++d)
    if (d != 1)
      reduceAxes.push_back(d);
  auto perChannel = [&](Value v) { return g.reshape(v, channelShape); };
  auto toChannels = [&](Value v, Value like) {
    return g.convert(g.reshape(g.reduceSum(v, reduceAxes, true),
                            tensorType(like).getShape()),
                  tensorType(like).getElementType());
  };
  Value variance = g.add(perChannel(getVar()),
                         g.scalarLike(getVar(), getEpsilon().convertToDouble()));
  Value stdDev = g.typed<SqrtOp>(variance.getType(), {variance});
  Value invStd = g.typed<ReciprocalOp>(stdDev.getType(), {stdDev});
  Value centered = g.sub(getInput(), perChannel(getMean()));
  Value scale = perChannel(getScale());
  if (grads[0])
    grads.set(0, g.convert(g.mul(dy, g.mul(scale, invStd)),
                        inputType.getElementType()));
  if (grads[1])
    grads.set(1, toChannels(g.mul(dy, g.mul(centered, invStd)), getScale()));
  if (grads[2])
    grads.set(2, toChannels(dy, getBias()));
  if (grads[3])
    grads.set(3, toChannels(g.neg(g.mul(dy, g.mul(scale, invStd))),
                            getMean()));
  if (grads[4]) {
    // d/dvar (var + eps)^-1/2 = -1/2 invStd^3
    Value invStd3 = g.mul(invStd, g.mul(invStd, invStd));
    grads.set(4, toChannels(g.mul(g.mul(dy, g.mul(scale, centered)),
                                  g.mul(invStd3, g.scalarLike(dy, -0.5))),
                            getVar()));
  }
  return success();
}

LogicalResult BatchNormTrainOp::buildVJP(OpBuilder &builder,
                                         ArrayRef<Value> resultGrads,
                                         ArrayRef<bool> needed,
                                         SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  for (unsigned i = 1; i < resultGrads.size(); ++i)
    if (resultGrads[i])
      return emitOpError() << "has no derivative through its running or "
                              "saved statistics";
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  Operation *grad = g.inferOp<BatchNormGradOp>(
      {getInput(), getScale(), getSavedMean(), getSavedInvStd(), dy});
  grads.set(0, grad->getResult(0));
  grads.set(1, grad->getResult(1));
  grads.set(2, g.reduceTo(grad->getResult(2), getBias().getType()));
  // The running statistics do not affect the normalized output.
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace {
/// dy with the reduced axes kept as 1.
Value keptShape(Grad &g, Value dy, Value input, ArrayRef<int64_t> axes) {
  SmallVector<int64_t> shape(tensorType(input).getShape());
  for (int64_t axis : axes)
    shape[axis] = 1;
  return g.reshape(dy, shape);
}

int64_t reducedCount(Value input, ArrayRef<int64_t> axes) {
  int64_t count = 1;
  for (int64_t axis : axes)
    count *= tensorType(input).getDimSize(axis);
  return count;
}
} // namespace

LogicalResult ReduceSumOp::buildVJP(OpBuilder &builder,
                                    ArrayRef<Value> resultGrads,
                                    ArrayRef<bool> needed,
                                    SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  grads.set(0, g.broadcastTo(keptShape(g, dy, getInput(), getAxes()),
                             tensorType(getInput())));
  return success();
}

LogicalResult ReduceMeanOp::buildVJP(OpBuilder &builder,
                                     ArrayRef<Value> resultGrads,
                                     ArrayRef<bool> needed,
                                     SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  int64_t count = reducedCount(getInput(), getAxes());
  Value scaled = g.div(keptShape(g, dy, getInput(), getAxes()),
                       g.scalarLike(dy, static_cast<double>(count)));
  grads.set(0, g.broadcastTo(scaled, tensorType(getInput())));
  return success();
}

LogicalResult ReduceMaxOp::buildVJP(OpBuilder &builder,
                                    ArrayRef<Value> resultGrads,
                                    ArrayRef<bool> needed,
                                    SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  // Evenly among the positions holding the maximum (torch's amax).
  Value input = getInput();
  Value kept = keptShape(g, getResult(), input, getAxes());
  Value isMax = g.convert(g.compare(ComparePredicate::eq, input, kept),
                       tensorType(input).getElementType());
  Value count = g.reduceSum(isMax, getAxes(), /*keepdims=*/true);
  Value share = g.div(keptShape(g, dy, input, getAxes()), count);
  grads.set(0, g.mul(isMax, share));
  return success();
}

// PyTorch's prod_backward, zeros included: with z zeros in a reduced
// group and p the product of its nonzero elements, a nonzero element gets
// dy * p / x when z = 0 (else 0) and a zero gets dy * p when z = 1 (else 0).
LogicalResult ReduceProdOp::buildVJP(OpBuilder &builder,
                                     ArrayRef<Value> resultGrads,
                                     ArrayRef<bool> needed,
                                     SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  Value input = getInput();
  Type element = tensorType(input).getElementType();
  Value zero = g.scalar(element, 0.0), one = g.scalar(element, 1.0);
  Value isZero = g.compare(ComparePredicate::eq, input, zero);
  Value nonzero = g.where(isZero, one, input);
  Value product = g.infer<ReduceProdOp>(
      {nonzero}, {g.attr("axes", g.b.getDenseI64ArrayAttr(getAxes())),
                  g.attr("keepdims", g.b.getBoolAttr(true))});
  Value zeros = g.reduceSum(g.convert(isZero, element), getAxes(),
                            /*keepdims=*/true);
  Value scaled = g.mul(keptShape(g, dy, input, getAxes()), product);
  Value ofNonzero = g.where(g.compare(ComparePredicate::eq, zeros, zero),
                            g.div(scaled, nonzero), zero);
  Value ofZero =
      g.where(g.compare(ComparePredicate::eq, zeros, one), scaled, zero);
  grads.set(0, g.where(isZero, ofZero, ofNonzero));
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::buildVJP(OpBuilder &builder,
                                  ArrayRef<Value> resultGrads,
                                  ArrayRef<bool> needed,
                                  SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  grads.set(0, g.reshape(dy, tensorType(getInput()).getShape()));
  return success();
}

LogicalResult TransposeOp::buildVJP(OpBuilder &builder,
                                    ArrayRef<Value> resultGrads,
                                    ArrayRef<bool> needed,
                                    SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  ArrayRef<int64_t> perm = getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = i;
  grads.set(0, g.transpose(dy, inverse));
  return success();
}

LogicalResult BroadcastToOp::buildVJP(OpBuilder &builder,
                                      ArrayRef<Value> resultGrads,
                                      ArrayRef<bool> needed,
                                      SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  grads.set(0, g.reduceTo(dy, getInput().getType()));
  return success();
}

LogicalResult ConcatOp::buildVJP(OpBuilder &builder,
                                 ArrayRef<Value> resultGrads,
                                 ArrayRef<bool> needed,
                                 SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  int64_t axis = getAxis(), offset = 0;
  int64_t rank = tensorType(dy).getRank();
  for (auto [i, input] : llvm::enumerate(getInputs())) {
    auto type = tensorType(input);
    if (grads[i]) {
      SmallVector<int64_t> offsets(rank, 0), strides(rank, 1);
      offsets[axis] = offset;
      grads.set(i, g.typed<SliceOp>(
                       type, {dy},
                       {g.attr("offsets", builder.getDenseI64ArrayAttr(offsets)),
                        g.attr("strides",
                               builder.getDenseI64ArrayAttr(strides))}));
    }
    offset += type.getDimSize(axis);
  }
  return success();
}

LogicalResult SplitOp::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,
                                ArrayRef<bool> needed,
                                SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  if (!grads[0] || llvm::all_of(resultGrads, [](Value v) { return !v; }))
    return success();
  Grad g(builder, *this);
  SmallVector<Value> pieces;
  for (auto [result, grad] : llvm::zip(getResults(), resultGrads))
    pieces.push_back(grad ? grad : g.zeros(result.getType()));
  grads.set(0, g.infer<ConcatOp>(
                   pieces, {g.attr("axis", builder.getI64IntegerAttr(getAxis()))}));
  return success();
}

LogicalResult SliceOp::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,
                                ArrayRef<bool> needed,
                                SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  grads.set(0, g.typed<SliceGradOp>(
                   getInput().getType(), {dy},
                   {g.attr("offsets", getOffsetsAttr()),
                    g.attr("strides", getStridesAttr())}));
  return success();
}

LogicalResult GatherOp::buildVJP(OpBuilder &builder,
                                 ArrayRef<Value> resultGrads,
                                 ArrayRef<bool> needed,
                                 SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  grads.set(0, g.typed<GatherGradOp>(
                   getData().getType(), {dy, getIndices()},
                   {g.attr("axis", getAxisAttr())}));
  return success();
}

// Scatter: an update's gradient is the result gradient gathered at its
// position; data's is the result gradient where no update replaced it
// (none), all of it (add), times the updates' product (mul). max and min
// route each element's gradient evenly among the tied winners, data and
// updates alike, as torch's scatter_reduce amax / amin.
LogicalResult ScatterOp::buildVJP(OpBuilder &builder,
                                  ArrayRef<Value> resultGrads,
                                  ArrayRef<bool> needed,
                                  SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !(grads[0] || grads[2]))
    return success();
  Grad g(builder, *this);
  Value positions = getPositions(), updates = getUpdates();
  int64_t count = tensorType(dy).getNumElements();
  auto gatherAt = [&](Value v) {
    return g.infer<GatherOp>({g.reshape(v, {count}), positions},
                             {g.attr("axis", builder.getI64IntegerAttr(0))});
  };
  auto scatter = [&](Value data, Value with, ScatterReduction reduction) {
    return g.infer<ScatterOp>(
        {data, positions, with},
        {g.attr("axis", getAxisAttr()),
         g.attr("reduction",
                ScatterReductionAttr::get(builder.getContext(), reduction))});
  };
  switch (getReduction()) {
  case ScatterReduction::none:
    grads.set(0, scatter(dy, g.zeros(updates.getType()), ScatterReduction::none));
    grads.set(2, gatherAt(dy));
    return success();
  case ScatterReduction::add:
    grads.set(0, dy);
    grads.set(2, gatherAt(dy));
    return success();
  case ScatterReduction::mul:
    if (grads[2])
      return noDerivative(*this, 2,
                          "the updates of a product scatter: a product of the "
                          "other updates, not implemented");
    grads.set(0, scatter(dy, updates, ScatterReduction::mul));
    return success();
  case ScatterReduction::max:
  case ScatterReduction::min: {
    Type element = tensorType(dy).getElementType();
    Value result = getResult();
    Value dataWins = g.convert(
        g.compare(ComparePredicate::eq, getData(), result), element);
    Value updateWins = g.convert(
        g.compare(ComparePredicate::eq, updates, gatherAt(result)), element);
    Value share =
        g.div(dy, scatter(dataWins, updateWins, ScatterReduction::add));
    grads.set(0, g.mul(share, dataWins));
    grads.set(2, g.mul(gatherAt(share), updateWins));
    return success();
  }
  }
  return failure();
}

LogicalResult TriluOp::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,
                                ArrayRef<bool> needed,
                                SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  grads.set(0, g.typed<TriluOp>(dy.getType(), {dy},
                                {g.attr("upper", getUpperAttr()),
                                 g.attr("k", getKAttr())}));
  return success();
}

LogicalResult DropoutOp::buildVJP(OpBuilder &builder,
                                  ArrayRef<Value> resultGrads,
                                  ArrayRef<bool> needed,
                                  SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  double keep = 1.0 - getRatio().convertToDouble();
  grads.set(0, g.where(getMask(), g.mul(dy, g.scalarLike(dy, 1.0 / keep)),
                       g.scalarLike(dy, 0.0)));
  return success();
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

template <typename LossOp>
static SmallVector<NamedAttribute> lossAttrs(Grad &g, LossOp op) {
  SmallVector<NamedAttribute> attrs{
      g.attr("reduction", LossReductionAttr::get(op.getContext(),
                                                 op.getReduction()))};
  if (auto ignore = op.getIgnoreIndexAttr())
    attrs.push_back(g.attr("ignore_index", ignore));
  return attrs;
}

LogicalResult SoftmaxCrossEntropyOp::buildVJP(
    OpBuilder &builder, ArrayRef<Value> resultGrads, ArrayRef<bool> needed,
    SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  if (grads[2])
    return noDerivative(*this, 2, "the class weights");
  if (!grads[0])
    return success();
  Grad g(builder, *this);
  Value dscores;
  if (Value dloss = resultGrads[0]) {
    SmallVector<Value> operands{dloss, getLogProb(), getLabels()};
    if (getWeights())
      operands.push_back(getWeights());
    dscores = g.infer<SoftmaxCrossEntropyGradOp>(
        operands, lossAttrs(g, *this));
  }
  if (Value dlogProb = resultGrads[1]) {
    Value viaLogProb = g.infer<LogSoftmaxGradOp>(
        {getLogProb(), dlogProb},
        {g.attr("axis", builder.getI64IntegerAttr(1))});
    dscores = dscores ? g.add(dscores, viaLogProb) : viaLogProb;
  }
  grads.set(0, dscores);
  return success();
}

LogicalResult NllLossOp::buildVJP(OpBuilder &builder,
                                  ArrayRef<Value> resultGrads,
                                  ArrayRef<bool> needed,
                                  SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  if (grads[2])
    return noDerivative(*this, 2, "the class weights");
  Value dloss = resultGrads[0];
  if (!dloss || !grads[0])
    return success();
  Grad g(builder, *this);
  SmallVector<Value> operands{dloss, getLabels()};
  if (getWeights())
    operands.push_back(getWeights());
  grads.set(0, g.typed<NllLossGradOp>(getLogProb().getType(), operands,
                                      lossAttrs(g, *this)));
  return success();
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

/// The window of a convolution-like op (strides, pads, dilations, group),
/// which the ops of its derivative share.
template <typename ConvLike>
SmallVector<NamedAttribute> convWindow(Grad &g, ConvLike op) {
  return {g.attr("strides", op.getStridesAttr()),
          g.attr("pads", op.getPadsAttr()),
          g.attr("dilations", op.getDilationsAttr()),
          g.attr("group", op.getGroupAttr())};
}

LogicalResult ConvOp::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,
                               ArrayRef<bool> needed,
                               SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  SmallVector<NamedAttribute> attrs = convWindow(g, *this);
  if (grads[0])
    grads.set(0, g.typed<ConvGradInputOp>(getInput().getType(),
                                          {dy, getWeight()}, attrs));
  if (grads[1])
    grads.set(1, g.typed<ConvGradWeightOp>(getWeight().getType(),
                                           {dy, getInput()}, attrs));
  if (getBias() && grads[2]) {
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < tensorType(dy).getRank(); ++d)
      if (d != 1)
        axes.push_back(d);
    grads.set(2, g.reduceSum(dy, axes, /*keepdims=*/false));
  }
  return success();
}

// conv_grad_input is linear in both operands: with y = conv_grad_input(g,
// w), dg = conv(dy, w) and dw = conv_grad_weight(g, dy), the same window
// (ConvTranspose's derivative, as PyTorch's conv_transpose backward).
LogicalResult ConvGradInputOp::buildVJP(OpBuilder &builder,
                                        ArrayRef<Value> resultGrads,
                                        ArrayRef<bool> needed,
                                        SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  Grad g(builder, *this);
  SmallVector<NamedAttribute> attrs = convWindow(g, *this);
  if (grads[0])
    grads.set(0, g.typed<ConvOp>(getResultGrad().getType(),
                                 {dy, getWeight()}, attrs));
  if (grads[1])
    grads.set(1, g.typed<ConvGradWeightOp>(getWeight().getType(),
                                           {getResultGrad(), dy}, attrs));
  return success();
}

LogicalResult MaxPoolOp::buildVJP(OpBuilder &builder,
                                  ArrayRef<Value> resultGrads,
                                  ArrayRef<bool> needed,
                                  SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  grads.set(0, g.infer<MaxPoolGradOp>(
                   {dy, getInput()},
                   {g.attr("kernel_shape", getKernelShapeAttr()),
                    g.attr("strides", getStridesAttr()),
                    g.attr("pads", getPadsAttr()),
                    g.attr("dilations", getDilationsAttr())}));
  return success();
}

LogicalResult AveragePoolOp::buildVJP(OpBuilder &builder,
                                      ArrayRef<Value> resultGrads,
                                      ArrayRef<bool> needed,
                                      SmallVectorImpl<Value> &operandGrads) {
  Grads grads(needed, operandGrads);
  Value dy = resultGrads[0];
  if (!dy || !grads[0])
    return success();
  Grad g(builder, *this);
  SmallVector<NamedAttribute> attrs{g.attr("kernel_shape", getKernelShapeAttr()),
                                    g.attr("strides", getStridesAttr()),
                                    g.attr("pads", getPadsAttr())};
  if (getCountIncludePad())
    attrs.push_back(g.attr("count_include_pad", builder.getUnitAttr()));
  grads.set(0, g.typed<AvgPoolGradOp>(getInput().getType(), {dy}, attrs));
  return success();
}
