//===- DsCost.cpp - CostOpInterface of ds ops ------------------------------===//
//
// FLOPs per op. A multiply-add counts two; exp, log, tanh, erf, sqrt and
// division count one each (the convention of roofline models and of
// Megatron-LM's FLOP accounting). Pure data movement counts zero.
//
//===----------------------------------------------------------------------===//

#include "ds/IR/DsDialect.h"

#include <cmath>

using namespace mlir;
using namespace dsopt::ds;

namespace {
int64_t elements(Value value) {
  return cast<ShapedType>(value.getType()).getNumElements();
}

/// Elements of the result times a per-element cost.
int64_t perResultElement(Operation *op, int64_t flopsPerElement) {
  return elements(op->getResult(0)) * flopsPerElement;
}

/// Window ops visit every kernel position once per output element.
int64_t windowFlops(Value result, ArrayRef<int64_t> kernel) {
  int64_t window = 1;
  for (int64_t k : kernel)
    window *= k;
  return elements(result) * window;
}
} // namespace

namespace dsopt::ds::detail {
int64_t defaultBytesAccessed(Operation *op) {
  int64_t bytes = 0;
  for (Type type : op->getOperandTypes())
    if (auto shaped = dyn_cast<ShapedType>(type))
      bytes += getByteSize(shaped).value_or(0);
  for (Type type : op->getResultTypes())
    if (auto shaped = dyn_cast<ShapedType>(type))
      bytes += getByteSize(shaped).value_or(0);
  return bytes;
}
} // namespace dsopt::ds::detail

int64_t ConstantOp::getFlops() { return 0; }

int64_t SqrtOp::getFlops() { return perResultElement(*this, 1); }
int64_t ReciprocalOp::getFlops() { return perResultElement(*this, 1); }
int64_t ExpOp::getFlops() { return perResultElement(*this, 1); }
int64_t LogOp::getFlops() { return perResultElement(*this, 1); }
int64_t TanhOp::getFlops() { return perResultElement(*this, 1); }
int64_t ErfOp::getFlops() { return perResultElement(*this, 1); }
// exp, add, divide
int64_t SigmoidOp::getFlops() { return perResultElement(*this, 3); }
int64_t NegOp::getFlops() { return perResultElement(*this, 1); }
int64_t ReluOp::getFlops() { return perResultElement(*this, 1); }
int64_t LeakyReluOp::getFlops() { return perResultElement(*this, 2); }
// exact: x * 0.5 * (1 + erf(x * c)): scale, erf, add, two multiplies.
// tanh: also x^3, the inner multiply-add and the scale.
int64_t GeluOp::getFlops() {
  return perResultElement(
      *this, getApproximate() == GeluApproximation::none ? 5 : 9);
}
int64_t NotOp::getFlops() { return perResultElement(*this, 1); }
// compare, exp, log1p (select is free)
int64_t SoftplusOp::getFlops() { return perResultElement(*this, 3); }
// compare, exp, subtract, scale; celu also divides by alpha
int64_t EluOp::getFlops() { return perResultElement(*this, 4); }
int64_t CeluOp::getFlops() { return perResultElement(*this, 5); }
int64_t SinOp::getFlops() { return perResultElement(*this, 1); }
int64_t CosOp::getFlops() { return perResultElement(*this, 1); }
int64_t FloorOp::getFlops() { return perResultElement(*this, 1); }
int64_t CeilOp::getFlops() { return perResultElement(*this, 1); }
int64_t RoundOp::getFlops() { return perResultElement(*this, 1); }

int64_t AddOp::getFlops() { return perResultElement(*this, 1); }
int64_t SubOp::getFlops() { return perResultElement(*this, 1); }
int64_t MulOp::getFlops() { return perResultElement(*this, 1); }
int64_t DivOp::getFlops() { return perResultElement(*this, 1); }
int64_t PowOp::getFlops() { return perResultElement(*this, 1); }
int64_t ModOp::getFlops() { return perResultElement(*this, 1); }
int64_t CompareOp::getFlops() { return perResultElement(*this, 1); }
int64_t WhereOp::getFlops() { return perResultElement(*this, 1); }
int64_t CastOp::getFlops() { return 0; }

int64_t MatMulOp::getFlops() {
  auto lhs = cast<ShapedType>(getLhs().getType());
  // Each result element is a dot product over the contraction axis.
  int64_t k = lhs.getRank() == 1 || !getTransposeLhs()
                  ? lhs.getShape().back()
                  : lhs.getShape()[lhs.getRank() - 2];
  return 2 * elements(getResult()) * k;
}

// The product's 2 m n k, and one add per element for the bias and for the
// addend (or per summed element for the bias gradient).
int64_t MatMulBiasOp::getFlops() {
  int64_t k = cast<ShapedType>(getLhs().getType()).getShape().back();
  return (2 * k + 1 + (getAddend() ? 1 : 0)) * elements(getResult());
}

int64_t MatMulBiasGradOp::getFlops() {
  auto lhs = cast<ShapedType>(getLhs().getType());
  int64_t k = lhs.getDimSize(getTransposeLhs() ? 0 : 1);
  return 2 * elements(getResult()) * k + elements(getRhs());
}

// The product's 2 m n k, the bias add and the tanh GELU's 9 per element.
int64_t MatMulBiasGeluOp::getFlops() {
  int64_t k = cast<ShapedType>(getLhs().getType()).getShape().back();
  return (2 * k + 1 + 9) * elements(getResult());
}

// The product's 2 m n k and the tanh GELU's derivative, 14 per element.
int64_t MatMulDGeluOp::getFlops() {
  int64_t k = cast<ShapedType>(getLhs().getType()).getShape().back();
  return (2 * k + 14) * elements(getResult());
}

int64_t MatMulLhsBiasGradOp::getFlops() {
  int64_t k = cast<ShapedType>(getLhs().getType()).getDimSize(0);
  return 2 * elements(getResult()) * k + elements(getLhs());
}

int64_t GemmOp::getFlops() {
  auto a = cast<ShapedType>(getA().getType());
  int64_t k = a.getDimSize(getTransposeA() ? 0 : 1);
  int64_t mn = elements(getResult());
  int64_t flops = 2 * mn * k;
  if (getC())
    flops += 2 * mn; // beta * c, added
  if (!getAlpha().isExactlyValue(1.0))
    flops += mn;
  return flops;
}

// max, subtract, exp, sum, divide
int64_t SoftmaxOp::getFlops() { return perResultElement(*this, 5); }
// max, subtract, exp, sum, log, subtract
int64_t LogSoftmaxOp::getFlops() { return perResultElement(*this, 5); }
// mean, subtract, square, sum, scale by inv std, times scale, plus bias
int64_t LayerNormOp::getFlops() { return perResultElement(*this, 7); }
// folded into one multiply-add per element
int64_t BatchNormOp::getFlops() { return perResultElement(*this, 2); }
int64_t BatchNormTrainOp::getFlops() { return perResultElement(*this, 7); }

int64_t ReduceSumOp::getFlops() { return elements(getInput()); }
int64_t ReduceMeanOp::getFlops() { return elements(getInput()); }
int64_t ReduceMaxOp::getFlops() { return elements(getInput()); }
int64_t ReduceProdOp::getFlops() { return elements(getInput()); }

int64_t ReshapeOp::getFlops() { return 0; }
int64_t TransposeOp::getFlops() { return 0; }
int64_t BroadcastToOp::getFlops() { return 0; }
int64_t ConcatOp::getFlops() { return 0; }
int64_t SplitOp::getFlops() { return 0; }
int64_t SliceOp::getFlops() { return 0; }
int64_t GatherOp::getFlops() { return 0; }
int64_t TriluOp::getFlops() { return 0; }
// one combine per update (a plain store with `none`)
int64_t ScatterOp::getFlops() {
  return getReduction() == ScatterReduction::none ? 0 : elements(getUpdates());
}
// a selection of k per line: about log2(k) + 1 comparisons per element
int64_t TopKOp::getFlops() {
  return elements(getInput()) *
         (static_cast<int64_t>(std::log2(static_cast<double>(getK()) + 1)) + 1);
}
// compare against the threshold and scale
int64_t DropoutOp::getFlops() { return perResultElement(*this, 2); }

int64_t SoftmaxCrossEntropyOp::getFlops() {
  // log-softmax over the scores, then one pick-and-accumulate per label.
  return 5 * elements(getScores()) + elements(getLabels());
}
int64_t NllLossOp::getFlops() { return 2 * elements(getLabels()); }

int64_t ConvOp::getFlops() {
  auto weight = cast<ShapedType>(getWeight().getType());
  // Each output element is a dot product over C/group * kernel elements.
  int64_t dot = weight.getNumElements() / weight.getDimSize(0);
  int64_t flops = 2 * elements(getResult()) * dot;
  if (getBias())
    flops += elements(getResult());
  return flops;
}
int64_t MaxPoolOp::getFlops() {
  return windowFlops(getResult(), getKernelShape());
}
int64_t AveragePoolOp::getFlops() {
  return windowFlops(getResult(), getKernelShape()) + elements(getResult());
}

// regularize, two moment updates (2 multiply-adds each, a square), sqrt,
// epsilon, divide, step
int64_t AdamOp::getFlops() { return 12 * elements(getParam()); }
int64_t MomentumOp::getFlops() { return 6 * elements(getParam()); }
int64_t AdagradOp::getFlops() { return 8 * elements(getParam()); }

// One operation per body op and element; constants are free.
int64_t FusedOp::getFlops() {
  int64_t perElement = 0;
  for (Operation &op : getBody().front().without_terminator())
    if (!isa<arith::ConstantOp>(op))
      ++perElement;
  return perElement * elements(getResult());
}

//===----------------------------------------------------------------------===//
// Gradient, optimizer and state ops (the training step)
//===----------------------------------------------------------------------===//

namespace {

RankedTensorType tensorType(Value value) {
  return value ? dyn_cast<RankedTensorType>(value.getType()) : nullptr;
}
} // namespace

// Softmax and log-softmax.
/// The (query, key) pairs attention scores: all of them, or with a causal
/// mask the T (T + 1) / 2 of each head. T is axis -2 of [..., T, Dh], or
/// -3 of tokens-major [..., T, H, Dh].
static int64_t attentionPairs(Value query, bool causal, bool tokensMajor) {
  auto type = cast<ShapedType>(query.getType());
  int64_t t = type.getShape()[type.getRank() - (tokensMajor ? 3 : 2)];
  int64_t heads = type.getNumElements() / std::max<int64_t>(1, t * type.getShape().back());
  return heads * (causal ? t * (t + 1) / 2 : t * t);
}
// Per pair: q.k and p v (2 Dh each), the scale, the exponential, the sum.
int64_t AttentionOp::getFlops() {
  int64_t dh = cast<ShapedType>(getQuery().getType()).getShape().back();
  return attentionPairs(getQuery(), getCausal(), getTokensMajor()) *
         (4 * dh + 3);
}
// Per pair: q.k recomputed, do.v, and the dq, dk, dv products (2 Dh each);
// p, ds.
int64_t AttentionGradOp::getFlops() {
  int64_t dh = cast<ShapedType>(getQuery().getType()).getShape().back();
  return attentionPairs(getQuery(), getCausal(), getTokensMajor()) *
         (10 * dh + 5);
}
int64_t AttentionPackedOp::getFlops() {
  int64_t dh = cast<ShapedType>(getResult().getType()).getShape().back();
  return attentionPairs(getResult(), getCausal(), true) * (4 * dh + 3);
}
int64_t AttentionPackedGradOp::getFlops() {
  int64_t dh = cast<ShapedType>(getResult().getType()).getShape().back();
  return attentionPairs(getResult(), getCausal(), true) * (10 * dh + 5);
}
int64_t SoftmaxGradOp::getFlops() { return 4 * elements(getOutput()); }
int64_t LogSoftmaxGradOp::getFlops() { return 4 * elements(getOutput()); }

// Normalization.
int64_t LayerNormGradOp::getFlops() { return 12 * elements(getInput()); }
int64_t BatchNormGradOp::getFlops() { return 12 * elements(getInput()); }

// Losses.
int64_t SoftmaxCrossEntropyGradOp::getFlops() {
  return 3 * elements(getLogProb());
}
int64_t SoftmaxCrossEntropyWithGradOp::getFlops() {
  // The forward's log-softmax and pick, then the gradient's exp, subtract
  // and scale (the softmax is recomputed, not read back).
  return 8 * elements(getScores()) + elements(getLabels());
}
int64_t NllLossGradOp::getFlops() { return 2 * elements(getLabels()); }

// Data movement.
int64_t GatherGradOp::getFlops() { return elements(getResultGrad()); }
int64_t SliceGradOp::getFlops() { return 0; }

// Convolution and pooling.
int64_t ConvGradInputOp::getFlops() {
  auto weight = tensorType(getWeight());
  return 2 * elements(getResultGrad()) * weight.getNumElements() /
         std::max<int64_t>(weight.getDimSize(0), 1);
}
int64_t ConvGradWeightOp::getFlops() {
  auto weight = tensorType(getWeightGrad());
  return 2 * elements(getResultGrad()) * weight.getNumElements() /
         std::max<int64_t>(weight.getDimSize(0), 1);
}
int64_t MaxPoolGradOp::getFlops() {
  int64_t window = 1;
  for (int64_t k : getKernelShape())
    window *= k;
  return elements(getResultGrad()) * window;
}
int64_t AvgPoolGradOp::getFlops() {
  int64_t window = 1;
  for (int64_t k : getKernelShape())
    window *= k;
  return elements(getResultGrad()) * window;
}

// Optimizers.
int64_t AdamWOp::getFlops() { return 14 * elements(getParam()); }
int64_t AdamWMultiOp::getFlops() {
  int64_t total = 0;
  for (Value param : getParams())
    total += 14 * elements(param);
  return total;
}
int64_t SgdOp::getFlops() { return 6 * elements(getParam()); }
int64_t LionOp::getFlops() { return 8 * elements(getParam()); }

// Gradient norm and state initialization.
int64_t SumOfSquaresOp::getFlops() {
  int64_t total = 0;
  for (Value input : getInputs())
    total += 2 * elements(input);
  return total;
}
int64_t FillOp::getFlops() { return 0; }
