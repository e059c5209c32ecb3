//===- DsKernels.cpp - KernelOpInterface of ds ops -------------------------===//
//
// The runtime kernel behind every op (runtime/include/dsrt/kernels.h), and
// which ops may alias or overwrite an operand's buffer.
//
//===----------------------------------------------------------------------===//

#include "ds/IR/DsDialect.h"

using namespace mlir;
using namespace dsopt::ds;

KernelCallBuilder::~KernelCallBuilder() = default;

namespace {
void unaryCall(KernelCallBuilder &call, StringRef op, Value input, Value result,
               double alpha = 0.0) {
  call.callee("dsrt::unary");
  call.stream();
  call.enumerator(("dsrt::UnaryOp::" + op).str());
  call.tensor(input);
  call.tensor(result);
  call.real(alpha);
}

void binaryCall(KernelCallBuilder &call, StringRef op, Value lhs, Value rhs,
                Value result) {
  call.callee("dsrt::binary");
  call.stream();
  call.enumerator(("dsrt::BinaryOp::" + op).str());
  call.tensor(lhs);
  call.tensor(rhs);
  call.tensor(result);
}

/// Result 0 may overwrite the first operand of the same type: elementwise
/// kernels read element i before writing element i.
std::optional<unsigned> sameTypeOperand(Operation *op) {
  for (auto [i, operand] : llvm::enumerate(op->getOperands()))
    if (operand.getType() == op->getResult(0).getType())
      return i;
  return std::nullopt;
}

StringRef reductionName(LossReduction reduction) {
  switch (reduction) {
  case LossReduction::none: return "dsrt::Reduction::None";
  case LossReduction::sum: return "dsrt::Reduction::Sum";
  case LossReduction::mean: return "dsrt::Reduction::Mean";
  }
  return "dsrt::Reduction::Mean";
}

void reduceCall(KernelCallBuilder &call, StringRef op, Value input,
                Value result, ArrayRef<int64_t> axes) {
  call.callee("dsrt::reduce");
  call.stream();
  call.enumerator(("dsrt::ReduceOp::" + op).str());
  call.tensor(input);
  call.tensor(result);
  call.integers(axes);
  call.integer(axes.size());
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
// Elementwise
//===----------------------------------------------------------------------===//

#define DS_UNARY_KERNEL(OpClass, Name)                                         \
  void OpClass::buildKernelCall(KernelCallBuilder &call) {                     \
    unaryCall(call, Name, getInput(), getResult());                            \
  }                                                                            \
  std::optional<unsigned> OpClass::getInPlaceOperand(unsigned result) {     \
    return result == 0 ? std::optional<unsigned>(0) : std::nullopt;            \
  }

DS_UNARY_KERNEL(SqrtOp, "Sqrt")
DS_UNARY_KERNEL(ReciprocalOp, "Reciprocal")
DS_UNARY_KERNEL(ExpOp, "Exp")
DS_UNARY_KERNEL(LogOp, "Log")
DS_UNARY_KERNEL(TanhOp, "Tanh")
DS_UNARY_KERNEL(ErfOp, "Erf")
DS_UNARY_KERNEL(SigmoidOp, "Sigmoid")
DS_UNARY_KERNEL(NegOp, "Neg")
DS_UNARY_KERNEL(ReluOp, "Relu")
DS_UNARY_KERNEL(NotOp, "Not")
DS_UNARY_KERNEL(SoftplusOp, "Softplus")
DS_UNARY_KERNEL(SinOp, "Sin")
DS_UNARY_KERNEL(CosOp, "Cos")
DS_UNARY_KERNEL(FloorOp, "Floor")
DS_UNARY_KERNEL(CeilOp, "Ceil")
DS_UNARY_KERNEL(RoundOp, "Round")
#undef DS_UNARY_KERNEL

void LeakyReluOp::buildKernelCall(KernelCallBuilder &call) {
  unaryCall(call, "LeakyRelu", getInput(), getResult(),
            getAlpha().convertToFloat());
}
std::optional<unsigned> LeakyReluOp::getInPlaceOperand(unsigned result) {
  return result == 0 ? std::optional<unsigned>(0) : std::nullopt;
}

void EluOp::buildKernelCall(KernelCallBuilder &call) {
  unaryCall(call, "Elu", getInput(), getResult(), getAlpha().convertToFloat());
}
std::optional<unsigned> EluOp::getInPlaceOperand(unsigned result) {
  return result == 0 ? std::optional<unsigned>(0) : std::nullopt;
}

void CeluOp::buildKernelCall(KernelCallBuilder &call) {
  unaryCall(call, "Celu", getInput(), getResult(),
            getAlpha().convertToFloat());
}
std::optional<unsigned> CeluOp::getInPlaceOperand(unsigned result) {
  return result == 0 ? std::optional<unsigned>(0) : std::nullopt;
}

void GeluOp::buildKernelCall(KernelCallBuilder &call) {
  unaryCall(call,
            getApproximate() == GeluApproximation::none ? "Gelu" : "GeluTanh",
            getInput(), getResult());
}
std::optional<unsigned> GeluOp::getInPlaceOperand(unsigned result) {
  return result == 0 ? std::optional<unsigned>(0) : std::nullopt;
}

#define DS_BINARY_KERNEL(OpClass, Name)                                        \
  void OpClass::buildKernelCall(KernelCallBuilder &call) {                     \
    binaryCall(call, Name, getLhs(), getRhs(), getResult());                   \
  }                                                                            \
  std::optional<unsigned> OpClass::getInPlaceOperand(unsigned result) {        \
    return result == 0 ? sameTypeOperand(*this) : std::nullopt;                \
  }

DS_BINARY_KERNEL(AddOp, "Add")
DS_BINARY_KERNEL(SubOp, "Sub")
DS_BINARY_KERNEL(MulOp, "Mul")
DS_BINARY_KERNEL(DivOp, "Div")
DS_BINARY_KERNEL(PowOp, "Pow")
#undef DS_BINARY_KERNEL

void ModOp::buildKernelCall(KernelCallBuilder &call) {
  binaryCall(call, getFmod() ? "Fmod" : "Mod", getLhs(), getRhs(), getResult());
}
std::optional<unsigned> ModOp::getInPlaceOperand(unsigned result) {
  return result == 0 ? sameTypeOperand(*this) : std::nullopt;
}

void CompareOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::compare");
  call.stream();
  StringRef name;
  switch (getPredicate()) {
  case ComparePredicate::eq: name = "Eq"; break;
  case ComparePredicate::lt: name = "Lt"; break;
  case ComparePredicate::le: name = "Le"; break;
  case ComparePredicate::gt: name = "Gt"; break;
  case ComparePredicate::ge: name = "Ge"; break;
  }
  call.enumerator(("dsrt::ComparePredicate::" + name).str());
  call.tensor(getLhs());
  call.tensor(getRhs());
  call.tensor(getResult());
}

void WhereOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::where");
  call.stream();
  call.tensor(getCondition());
  call.tensor(getLhs());
  call.tensor(getRhs());
  call.tensor(getResult());
}
std::optional<unsigned> WhereOp::getInPlaceOperand(unsigned result) {
  if (result != 0)
    return std::nullopt;
  // Never the condition: it is bool and the result is not.
  for (unsigned i : {1u, 2u})
    if (getOperand(i).getType() == getType())
      return i;
  return std::nullopt;
}

void CastOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::cast");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
}

//===----------------------------------------------------------------------===//
// Linear algebra and normalization
//===----------------------------------------------------------------------===//

void MatMulOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::matmul");
  call.stream();
  call.tensor(getLhs());
  call.tensor(getRhs());
  call.tensor(getResult());
  call.boolean(getTransposeLhs());
  call.boolean(getTransposeRhs());
}

void GemmOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::gemm");
  call.stream();
  call.tensor(getA());
  call.tensor(getB());
  call.optionalTensor(getC());
  call.tensor(getResult());
  call.real(getAlpha().convertToFloat());
  call.real(getBeta().convertToFloat());
  call.boolean(getTransposeA());
  call.boolean(getTransposeB());
}

void SoftmaxOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::softmax");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
  call.integer(getAxis());
}
std::optional<unsigned> SoftmaxOp::getInPlaceOperand(unsigned result) {
  return result == 0 ? std::optional<unsigned>(0) : std::nullopt;
}

void LogSoftmaxOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::log_softmax");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
  call.integer(getAxis());
}
std::optional<unsigned> LogSoftmaxOp::getInPlaceOperand(unsigned result) {
  return result == 0 ? std::optional<unsigned>(0) : std::nullopt;
}

void LayerNormOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::layer_norm");
  call.stream();
  call.tensor(getInput());
  call.tensor(getScale());
  call.optionalTensor(getBias());
  call.tensor(getResult());
  call.tensor(getMean());
  call.tensor(getInvStdDev());
  call.integer(getAxis());
  call.real(getEpsilon().convertToFloat());
}

void BatchNormOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::batch_norm");
  call.stream();
  call.tensor(getInput());
  call.tensor(getScale());
  call.tensor(getBias());
  call.tensor(getMean());
  call.tensor(getVar());
  call.tensor(getResult());
  call.real(getEpsilon().convertToFloat());
}

void BatchNormTrainOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::batch_norm_train");
  call.stream();
  call.tensor(getInput());
  call.tensor(getScale());
  call.tensor(getBias());
  call.tensor(getRunningMean());
  call.tensor(getRunningVar());
  call.tensor(getResult());
  call.tensor(getRunningMeanOut());
  call.tensor(getRunningVarOut());
  call.tensor(getSavedMean());
  call.tensor(getSavedInvStd());
  call.real(getEpsilon().convertToFloat());
  call.real(getMomentum().convertToFloat());
}

void ReduceSumOp::buildKernelCall(KernelCallBuilder &call) {
  reduceCall(call, "Sum", getInput(), getResult(), getAxes());
}
void ReduceMeanOp::buildKernelCall(KernelCallBuilder &call) {
  reduceCall(call, "Mean", getInput(), getResult(), getAxes());
}
void ReduceMaxOp::buildKernelCall(KernelCallBuilder &call) {
  reduceCall(call, "Max", getInput(), getResult(), getAxes());
}
void ReduceProdOp::buildKernelCall(KernelCallBuilder &call) {
  reduceCall(call, "Prod", getInput(), getResult(), getAxes());
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

// A reshape is a view: same bytes, new shape. If the buffers ever differ
// (the planner could not alias them), the kernel copies.
void ReshapeOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::copy");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
}
std::optional<unsigned> ReshapeOp::getAliasedOperand() { return 0; }

void TransposeOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::transpose");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
  call.integers(getPerm());
}

void BroadcastToOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::broadcast_to");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
}

void ConcatOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::concat");
  call.stream();
  call.tensors(getInputs());
  call.tensor(getResult());
  call.integer(getAxis());
}

void SplitOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::split");
  call.stream();
  call.tensor(getInput());
  call.tensors(getResults());
  call.integer(getAxis());
}

void SliceOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::slice");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
  call.integers(getOffsets());
  call.integers(getStrides());
}

void GatherOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::gather");
  call.stream();
  call.tensor(getData());
  call.tensor(getIndices());
  call.tensor(getResult());
  call.integer(getAxis());
}

void TriluOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::trilu");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
  call.boolean(getUpper());
  call.integer(getK());
}

void DropoutOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::dropout");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
  call.tensor(getMask());
  call.real(getRatio().convertToFloat());
  call.integer(getSeed());
  // The runtime's counter: the micro step of a training program (and the
  // --seed it was started with), so every step draws a fresh mask; 0 in a
  // forward program.
  call.enumerator("dsrt::rng_counter()");
}

//===----------------------------------------------------------------------===//
// Losses, convolution, pooling, optimizers
//===----------------------------------------------------------------------===//

void SoftmaxCrossEntropyOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::softmax_cross_entropy");
  call.stream();
  call.tensor(getScores());
  call.tensor(getLabels());
  call.optionalTensor(getWeights());
  call.tensor(getLoss());
  call.tensor(getLogProb());
  lossArguments(call, *this);
}

void NllLossOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::nll_loss");
  call.stream();
  call.tensor(getLogProb());
  call.tensor(getLabels());
  call.optionalTensor(getWeights());
  call.tensor(getLoss());
  lossArguments(call, *this);
}

void ConvOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::conv");
  call.stream();
  call.tensor(getInput());
  call.tensor(getWeight());
  call.optionalTensor(getBias());
  call.tensor(getResult());
  call.integers(getStrides());
  call.integers(getPads());
  call.integers(getDilations());
  call.integer(getGroup());
}

void MaxPoolOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::max_pool");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
  call.integers(getKernelShape());
  call.integers(getStrides());
  call.integers(getPads());
  call.integers(getDilations());
}

void AveragePoolOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::avg_pool");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
  call.integers(getKernelShape());
  call.integers(getStrides());
  call.integers(getPads());
  call.boolean(getCountIncludePad());
}

void AdamOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::adam");
  call.stream();
  for (Value value : getOperands())
    call.tensor(value);
  for (Value value : getResults())
    call.tensor(value);
  call.real(getAlpha().convertToFloat());
  call.real(getBeta().convertToFloat());
  call.real(getEpsilon().convertToFloat());
  call.real(getNormCoefficient().convertToFloat());
  call.real(getNormCoefficientPost().convertToFloat());
}

void MomentumOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::momentum");
  call.stream();
  for (Value value : getOperands())
    call.tensor(value);
  for (Value value : getResults())
    call.tensor(value);
  call.real(getAlpha().convertToFloat());
  call.real(getBeta().convertToFloat());
  call.enumerator(getMode() == MomentumMode::standard
                      ? "dsrt::MomentumMode::Standard"
                      : "dsrt::MomentumMode::Nesterov");
  call.real(getNormCoefficient().convertToFloat());
}

void AdagradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::adagrad");
  call.stream();
  for (Value value : getOperands())
    call.tensor(value);
  for (Value value : getResults())
    call.tensor(value);
  call.real(getDecayFactor().convertToFloat());
  call.real(getEpsilon().convertToFloat());
  call.real(getNormCoefficient().convertToFloat());
}

void FusedOp::buildKernelCall(KernelCallBuilder &call) {
  call.generatedCallee(*this);
  call.stream();
  for (Value input : getInputs())
    call.tensor(input);
  call.tensor(getResult());
}

std::optional<unsigned> FusedOp::getInPlaceOperand(unsigned result) {
  return result == 0 ? sameTypeOperand(*this) : std::nullopt;
}

//===----------------------------------------------------------------------===//
// Gradient, optimizer and state ops (the training step)
//===----------------------------------------------------------------------===//

// Softmax and log-softmax.
void SoftmaxGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::softmax_grad");
  call.stream();
  call.tensor(getOutput());
  call.tensor(getResultGrad());
  call.tensor(getInputGrad());
  call.integer(getAxis());
}
void LogSoftmaxGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::log_softmax_grad");
  call.stream();
  call.tensor(getOutput());
  call.tensor(getResultGrad());
  call.tensor(getInputGrad());
  call.integer(getAxis());
}

// Normalization.
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

// Losses.
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
void NllLossGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::nll_loss_grad");
  call.stream();
  call.tensor(getLossGrad());
  call.tensor(getLabels());
  call.optionalTensor(getWeights());
  call.tensor(getLogProbGrad());
  lossArguments(call, *this);
}

// Data movement.
void GatherGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::gather_grad");
  call.stream();
  call.tensor(getResultGrad());
  call.tensor(getIndices());
  call.tensor(getDataGrad());
  call.integer(getAxis());
}
void SliceGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::slice_grad");
  call.stream();
  call.tensor(getResultGrad());
  call.tensor(getInputGrad());
  call.integers(getOffsets());
  call.integers(getStrides());
}

// Convolution and pooling.
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

// Optimizers.
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

// Gradient norm and state initialization.
void SumOfSquaresOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::sum_of_squares");
  call.stream();
  call.tensors(getInputs());
  call.tensor(getResult());
}
void FillOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::fill");
  call.tensor(getResult());
  call.real(getValue().convertToDouble());
}
