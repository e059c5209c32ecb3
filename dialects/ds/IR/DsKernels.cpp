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
  call.workspace();
}

//===----------------------------------------------------------------------===//
// Workspaces: the same numbers as the runtime kernels' size functions
// (dsrt::<kernel>_workspace_bytes in runtime/include/dsrt/kernels.h), which
// the kernels check against the workspace they are given.
//===----------------------------------------------------------------------===//

constexpr int64_t kFloatBytes = 4;

/// f16 and bf16 kernels convert their operands to f32 in the workspace.
bool convertsToF32(Value value) {
  Type element = getElementTypeOrSelf(value.getType());
  return element.isF16() || element.isBF16();
}

/// Elements of a statically shaped tensor (0 otherwise).
int64_t numElements(Value value) {
  auto type = dyn_cast<ShapedType>(value.getType());
  return type && type.hasStaticShape() ? type.getNumElements() : 0;
}

/// Floats of the im2col matrix of `channels` channels of `x` for a window of
/// `w`'s kernel sizes and `y`'s positions: 0 for a 1x1, stride-1, unpadded
/// window, whose matrix is the input itself.
int64_t im2colFloats(Value x, Value w, Value y, ArrayRef<int64_t> strides,
                     ArrayRef<int64_t> pads, int64_t channels) {
  auto xt = cast<ShapedType>(x.getType()), wt = cast<ShapedType>(w.getType()),
       yt = cast<ShapedType>(y.getType());
  int64_t spatial = xt.getRank() - 2;
  if (spatial < 1 || wt.getRank() != xt.getRank() ||
      yt.getRank() != xt.getRank() || !wt.hasStaticShape() ||
      !yt.hasStaticShape() ||
      static_cast<int64_t>(strides.size()) < spatial ||
      static_cast<int64_t>(pads.size()) < 2 * spatial)
    return 0;
  int64_t kernelSize = 1, outSize = 1;
  bool pointwise = true;
  for (int64_t a = 0; a < spatial; ++a) {
    kernelSize *= wt.getDimSize(a + 2);
    outSize *= yt.getDimSize(a + 2);
    pointwise = pointwise && wt.getDimSize(a + 2) == 1 && strides[a] == 1 &&
                pads[a] == 0 && pads[a + spatial] == 0;
  }
  return pointwise ? 0 : channels * kernelSize * outSize;
}

/// f16/bf16 pooling gradients sum in f32 planes of dx's spatial size, at
/// most kPoolGradLanes of them (runtime/src/cpu/conv.cpp).
int64_t poolGradWorkspaceBytes(Value dx) {
  constexpr int64_t kPoolGradLanes = 64;
  auto type = cast<ShapedType>(dx.getType());
  if (!convertsToF32(dx) || !type.hasStaticShape() || type.getRank() < 3 ||
      type.getNumElements() == 0)
    return 0;
  int64_t planes = type.getDimSize(0) * type.getDimSize(1);
  return kFloatBytes * std::min(planes, kPoolGradLanes) *
         (type.getNumElements() / planes);
}

/// The staging buffers of a large f16/bf16 product whose leading dimensions
/// are not multiples of 8 (runtime/src/workspace_shapes.h, matmul_stage):
/// y's rows padded to 8 in chunks and b (transposed [n, k]) with zero rows up
/// to n rounded to 8 when n % 8 != 0; a transposed's columns in chunks when
/// m % 8 != 0; when k % 8 != 0, the contraction split: f32 sums of blocks
/// of y's rows (at most 32 MiB, rows padded to 8, at least 128 rows, a
/// multiple of 128), chunks of a's columns for them (a multiple of 64) and
/// b's last chunk of rows padded to 8. Each chunk of a or y is an eighth of
/// its whole padded matrix, between 16 and 256 MiB, at least 8 rows; each
/// buffer 256-byte aligned; none under 2^27 multiply-adds.
int64_t matmulStageBytes(int64_t mTotal, int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMinMacs = int64_t(1) << 27, kMinBytes = int64_t(16) << 20,
                    kMaxBytes = int64_t(256) << 20, kSumBytes = int64_t(32) << 20;
  if (mTotal <= 0 || n <= 0 || k <= 0 ||
      static_cast<double>(mTotal) * static_cast<double>(n) * static_cast<double>(k) <
          static_cast<double>(kMinMacs))
    return 0;
  auto roundUp8 = [](int64_t v) { return (v + 7) / 8 * 8; };
  auto aligned = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  auto budget = [&](int64_t row, int64_t rows) {
    const int64_t whole = 2 * std::max<int64_t>(row, 1) * roundUp8(rows);
    return std::min(kMaxBytes, std::max(kMinBytes, whole / 8));
  };
  auto chunkRows = [&](int64_t row, int64_t rows) {
    row = std::max<int64_t>(row, 1);
    const int64_t fit = std::max<int64_t>(8, budget(row, rows) / 2 / row / 8 * 8);
    return std::min(fit, roundUp8(rows));
  };
  int64_t yBytes = 0, bBytes = 0, sumBytes = 0, aRows = 0, aCols = 0, atCols = 0;
  if (n % 8 != 0) {
    yBytes = aligned(2 * chunkRows(roundUp8(n), mTotal) * roundUp8(n));
    bBytes = aligned(2 * roundUp8(n) * k);
  }
  if (k % 8 != 0) {
    const int64_t k8 = roundUp8(k);
    aRows = std::min(roundUp8(mTotal),
                     std::max<int64_t>(128, kSumBytes / (4 * roundUp8(n)) / 128 * 128));
    aCols = std::min(k8, std::max<int64_t>(64, budget(k8, mTotal) / 2 / aRows / 64 * 64));
    const int64_t bLast = k8 - (k8 - 1) / aCols * aCols;
    sumBytes = aligned(4 * aRows * roundUp8(n));
    bBytes = std::max(bBytes, aligned(2 * bLast * n));
  }
  if (m % 8 != 0)
    atCols = chunkRows(k, m);
  return yBytes + bBytes + sumBytes + aligned(2 * std::max(aRows * aCols, k * atCols));
}

/// Whether `op` is in a program for --target cuda: ds.target on its module
/// or an enclosing one (a pipeline rank's program is a nested module).
bool onCudaTarget(Operation *op) {
  for (auto module = op ? op->getParentOfType<ModuleOp>() : ModuleOp(); module;
       module = module->getParentOfType<ModuleOp>())
    if (auto target = module->getAttrOfType<StringAttr>(DsDialect::kTargetAttrName))
      return target.getValue() == "cuda";
  return false;
}

/// cuBLASLt's workspace on --target cuda for a product of 2^30
/// multiply-adds and more over every batch: 32 MiB, the cuBLAS reference's
/// recommendation on Hopper, room for the split-k partial sums of the weight
/// gradients' few output tiles (a step's [768, 2304] over 65536 tokens: 108
/// output tiles for 132 multiprocessors); the cuda backend gives cuBLASLt
/// what the planned workspace holds past the staging buffers. The kernels
/// need only the tile panels (runtime/src/workspace_shapes.h), so a cpu
/// program plans none of it.
int64_t matmulLtBytes(bool cuda, int64_t mTotal, int64_t n, int64_t k) {
  constexpr int64_t kMinMacs = int64_t(1) << 30, kBytes = int64_t(32) << 20;
  return cuda && mTotal > 0 && n > 0 && k > 0 &&
                 static_cast<double>(mTotal) * static_cast<double>(n) *
                         static_cast<double>(k) >=
                     static_cast<double>(kMinMacs)
             ? kBytes
             : 0;
}

/// f16/bf16 matmul and gemm convert tile by tile (runtime/src/cpu/linalg.cpp,
/// workspace_shapes.h): one f32 panel each of op(a) (tile_m x tile_k), op(b)
/// (tile_k x tile_n) and the output tile (tile_m x tile_n), each side at most
/// 512; on --target cuda a large product's cuBLASLt workspace where it is
/// larger (matmulLtBytes). m and n come from the result's matrix (a vector operand
/// has no axis there), k from the lhs matrix of m x k elements.
int64_t matmulWorkspaceBytes(Value lhs, Value rhs, Value result) {
  constexpr int64_t kTileM = 512, kTileN = 512, kTileK = 512;
  auto a = cast<ShapedType>(lhs.getType()), b = cast<ShapedType>(rhs.getType()),
       y = cast<ShapedType>(result.getType());
  if (!convertsToF32(result) || !a.hasStaticShape() || !y.hasStaticShape() ||
      a.getRank() < 1 || b.getRank() < 1)
    return 0;
  const bool aVector = a.getRank() == 1, bVector = b.getRank() == 1;
  const int64_t yRank = y.getRank();
  int64_t m = 1, n = 1;
  if (!bVector)
    n = yRank >= 1 ? y.getDimSize(yRank - 1) : 1;
  if (!aVector)
    m = yRank >= (bVector ? 1 : 2) ? y.getDimSize(yRank - (bVector ? 1 : 2)) : 1;
  const int64_t aMatrix =
      aVector ? a.getDimSize(0)
              : a.getDimSize(a.getRank() - 2) * a.getDimSize(a.getRank() - 1);
  const int64_t k = m > 0 ? aMatrix / m : 0;
  if (m <= 0 || n <= 0)
    return 0;
  const int64_t tm = std::min(m, kTileM), tn = std::min(n, kTileN),
                tk = std::min(std::max<int64_t>(k, 0), kTileK);
  const int64_t mTotal = !aVector && !bVector ? y.getNumElements() / n : 0;
  return std::max(kFloatBytes * (tm * tk + tk * tn + tm * tn),
                  matmulLtBytes(onCudaTarget(result.getDefiningOp()), mTotal, n, k)) +
         matmulStageBytes(mTotal, m, n, k);
}

/// f16/bf16 row kernels convert rows to f32 in at most kRowLanes rows of
/// their workspace (runtime/src/internal.h).
constexpr int64_t kRowLanes = 64;

/// Rows before `axis` and elements from it on of a static tensor, or false.
bool splitAt(Value value, int64_t axis, int64_t &rows, int64_t &n) {
  auto type = cast<ShapedType>(value.getType());
  if (!type.hasStaticShape() || axis < 0 || axis >= type.getRank() ||
      type.getNumElements() == 0)
    return false;
  rows = 1;
  n = 1;
  for (int64_t d = 0; d < type.getRank(); ++d)
    (d < axis ? rows : n) *= type.getDimSize(d);
  return true;
}

/// Softmax and its gradient on f16/bf16 along a unit-stride axis: `copies`
/// f32 rows per lane.
int64_t softmaxWorkspaceBytes(Value value, int64_t axis, int64_t copies) {
  int64_t rows = 0, n = 0;
  if (!convertsToF32(value) || !splitAt(value, axis, rows, n))
    return 0;
  auto type = cast<ShapedType>(value.getType());
  if (n != type.getDimSize(axis)) // a strided axis: no rows to convert
    return 0;
  return kFloatBytes * copies * std::min(rows, kRowLanes) * n;
}

/// Channels of an [N, C, ...] tensor (0 when unknown).
int64_t channelsOf(Value x) {
  auto type = cast<ShapedType>(x.getType());
  return type.getRank() >= 2 && !type.isDynamicDim(1) ? type.getDimSize(1) : 0;
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
  call.workspace();
}
int64_t MatMulOp::getWorkspaceBytes() {
  return matmulWorkspaceBytes(getLhs(), getRhs(), getResult());
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
  call.workspace();
}
int64_t GemmOp::getWorkspaceBytes() {
  return matmulWorkspaceBytes(getA(), getB(), getResult());
}

void SoftmaxOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::softmax");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
  call.integer(getAxis());
  call.workspace();
}
int64_t SoftmaxOp::getWorkspaceBytes() {
  return softmaxWorkspaceBytes(getInput(), getAxis(), 1);
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
  call.workspace();
}
int64_t LogSoftmaxOp::getWorkspaceBytes() {
  return softmaxWorkspaceBytes(getInput(), getAxis(), 1);
}
std::optional<unsigned> LogSoftmaxOp::getInPlaceOperand(unsigned result) {
  return result == 0 ? std::optional<unsigned>(0) : std::nullopt;
}

// Attention.
void AttentionOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::attention");
  call.stream();
  for (Value value : {getQuery(), getKey(), getValue(), getResult(), getLse()})
    call.tensor(value);
  call.real(getScale().convertToFloat());
  call.boolean(getCausal());
  call.boolean(getTokensMajor());
}

void AttentionPackedOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::attention_packed");
  call.stream();
  for (Value value : {getQkv(), getResult(), getLse()})
    call.tensor(value);
  call.real(getScale().convertToFloat());
  call.boolean(getCausal());
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
  call.workspace();
}
/// A layer norm scale or bias that broadcasts to the normalized shape (fewer
/// than its n elements) is expanded to n f32 values in the workspace; one
/// with the normalized shape is read in place (norm.cpp's param_floats).
static int64_t layerNormParamFloats(Value param, int64_t n) {
  return numElements(param) < n ? n : 0;
}

// f16/bf16: at most kRowLanes rows in f32; a broadcast scale or bias in f32.
int64_t LayerNormOp::getWorkspaceBytes() {
  int64_t rows = 0, n = 0;
  if (!splitAt(getInput(), getAxis(), rows, n))
    return 0;
  int64_t floats = convertsToF32(getInput()) ? std::min(rows, kRowLanes) * n : 0;
  floats += layerNormParamFloats(getScale(), n);
  if (getBias())
    floats += layerNormParamFloats(getBias(), n);
  return kFloatBytes * floats;
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
  call.boolean(getUnbiasedRunningVar());
}

/// The accumulators of reduce's passes (runtime/src/cpu/reduce.cpp): the
/// axes collapse into alternating kept and reduced groups (size-1 axes
/// dropped), each reduced group is one pass, last first, and the passes
/// alternate between two buffers sized by the first two passes' results (the
/// values themselves when every reduced axis has size 1). Elements are f64
/// for float sums, means and products, f32 for a float max, 64-bit integers
/// for integers.
/// The cuda backend's column case may need more (below): the larger of the
/// two, as the runtime's reduce_workspace_bytes.
static int64_t reduceWorkspaceBytes(Value input, ArrayRef<int64_t> axes,
                                    bool isMax) {
  auto type = dyn_cast<ShapedType>(input.getType());
  if (!type || !type.hasStaticShape())
    return 0;
  SmallVector<bool> reduced(type.getRank(), false);
  for (int64_t axis : axes)
    if (axis >= 0 && axis < type.getRank())
      reduced[axis] = true;
  int64_t outCount = 1;
  SmallVector<std::pair<int64_t, bool>> groups;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    int64_t dim = type.getDimSize(d);
    if (!reduced[d])
      outCount *= dim;
    if (dim == 1)
      continue;
    if (!groups.empty() && groups.back().second == reduced[d])
      groups.back().first *= dim;
    else
      groups.push_back({dim, reduced[d]});
  }
  if (outCount == 0)
    return 0;
  Type element = getElementTypeOrSelf(type);
  int64_t accumulator = isa<FloatType>(element) && isMax ? 4 : 8;
  // The cuda column case split into parts (runtime/src/workspace_shapes.h,
  // reduce_column_parts): x [rows, columns] summed over its rows by tiles
  // of 8 columns (16 of 2-byte elements), the parts doubling up to 32 while
  // there are fewer than 128 blocks and at least 2048 rows; P > 1 parts
  // need P x columns accumulators.
  int64_t columnAccumulators = 0;
  if (groups.size() == 2 && groups[0].second) {
    int64_t rows = groups[0].first, columns = groups[1].first;
    int64_t tile = element.isIntOrFloat() && element.getIntOrFloatBitWidth() == 16
                       ? 16
                       : 8;
    int64_t tiles = (columns + tile - 1) / tile, parts = 1;
    if (rows >= 2048)
      while (parts < 32 && tiles * parts < 128)
        parts *= 2;
    if (parts > 1)
      columnAccumulators = parts * columns;
  }
  int64_t sizes[2] = {0, 0};
  int pass = 0;
  for (int64_t g = static_cast<int64_t>(groups.size()) - 1; g >= 0 && pass < 2;
       --g) {
    if (!groups[g].second)
      continue;
    int64_t n = 1;
    for (int64_t d = 0; d < static_cast<int64_t>(groups.size()); ++d)
      if (d != g)
        n *= groups[d].first;
    sizes[pass++] = n;
    groups.erase(groups.begin() + g);
  }
  if (pass == 0)
    sizes[0] = outCount;
  return std::max(sizes[0] + sizes[1], columnAccumulators) * accumulator;
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
int64_t ReduceSumOp::getWorkspaceBytes() {
  return reduceWorkspaceBytes(getInput(), getAxes(), false);
}
int64_t ReduceMeanOp::getWorkspaceBytes() {
  return reduceWorkspaceBytes(getInput(), getAxes(), false);
}
int64_t ReduceMaxOp::getWorkspaceBytes() {
  return reduceWorkspaceBytes(getInput(), getAxes(), true);
}
int64_t ReduceProdOp::getWorkspaceBytes() {
  return reduceWorkspaceBytes(getInput(), getAxes(), false);
}

void MatMulBiasOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::matmul_bias");
  call.stream();
  call.tensor(getLhs());
  call.tensor(getRhs());
  call.tensor(getBias());
  call.optionalTensor(getAddend());
  call.tensor(getResult());
  call.boolean(getTransposeRhs());
  call.workspace();
}
int64_t MatMulBiasOp::getWorkspaceBytes() {
  return matmulWorkspaceBytes(getLhs(), getRhs(), getResult());
}

void MatMulBiasGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::matmul_bias_grad");
  call.stream();
  call.tensor(getLhs());
  call.tensor(getRhs());
  call.tensor(getResult());
  call.tensor(getBiasGrad());
  call.boolean(getTransposeLhs());
  call.workspace();
}
/// The cpu kernel runs the product, then the column sums as reduce_sum
/// over axis 0 would, one after the other in the one workspace.
int64_t MatMulBiasGradOp::getWorkspaceBytes() {
  return std::max(matmulWorkspaceBytes(getLhs(), getRhs(), getResult()),
                  reduceWorkspaceBytes(getRhs(), {0}, false));
}

void MatMulBiasGeluOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::matmul_bias_gelu");
  call.stream();
  call.tensor(getLhs());
  call.tensor(getRhs());
  call.tensor(getBias());
  call.tensor(getResult());
  call.tensor(getPreActivation());
  call.boolean(getTransposeRhs());
  call.workspace();
}
int64_t MatMulBiasGeluOp::getWorkspaceBytes() {
  return matmulWorkspaceBytes(getLhs(), getRhs(), getResult());
}

void MatMulDGeluOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::matmul_dgelu");
  call.stream();
  call.tensor(getLhs());
  call.tensor(getRhs());
  call.tensor(getPreActivation());
  call.tensor(getResult());
  call.boolean(getTransposeRhs());
  call.workspace();
}
int64_t MatMulDGeluOp::getWorkspaceBytes() {
  return matmulWorkspaceBytes(getLhs(), getRhs(), getResult());
}

void MatMulLhsBiasGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::matmul_lhs_bias_grad");
  call.stream();
  call.tensor(getLhs());
  call.tensor(getRhs());
  call.tensor(getResult());
  call.tensor(getBiasGrad());
  call.workspace();
}
/// The cpu kernel runs the product, then lhs's column sums as reduce_sum
/// over axis 0 would, one after the other in the one workspace.
int64_t MatMulLhsBiasGradOp::getWorkspaceBytes() {
  return std::max(matmulWorkspaceBytes(getLhs(), getRhs(), getResult()),
                  reduceWorkspaceBytes(getLhs(), {0}, false));
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

void ScatterOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::scatter");
  call.stream();
  call.tensor(getData());
  call.tensor(getPositions());
  call.tensor(getUpdates());
  call.tensor(getResult());
  call.integer(getAxis());
  call.integer(static_cast<int64_t>(getReduction()));
}

void TopKOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::top_k");
  call.stream();
  call.tensor(getInput());
  call.tensor(getIndices());
  call.integer(getAxis());
  call.boolean(getLargest());
}

void DropoutOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::dropout");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
  call.tensor(getMask());
  call.real(getRatio().convertToFloat());
  // A split activation's piece gets its tp rank's own mask.
  if ((*this)->hasAttr(DsDialect::kTpRankSeedAttrName))
    call.enumerator("dsrt::tp_rank_seed(" + std::to_string(getSeed()) + ")");
  else
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
  call.workspace();
}
namespace {
// Floats of softmax cross-entropy's workspace: a row of the class axis in
// f32 for each of the kernel's (at most 64) blocks of samples, unless the
// rows are f32 and contiguous (no spatial axes) and are read in place
// (runtime/src/cpu/loss.cpp); -1 for an empty or unranked shape.
int64_t lossRowFloats(Value scores, int64_t &rows) {
  auto type = cast<ShapedType>(scores.getType());
  if (!type.hasStaticShape() || type.getRank() < 2 || type.getNumElements() == 0)
    return -1;
  const int64_t c = type.getDimSize(1);
  rows = type.getNumElements() / c;
  if (type.getElementType().isF32() && rows == type.getDimSize(0))
    return 0;
  return std::min<int64_t>(64, rows) * c;
}
} // namespace

int64_t SoftmaxCrossEntropyOp::getWorkspaceBytes() {
  int64_t rows = 0;
  return kFloatBytes * std::max<int64_t>(0, lossRowFloats(getScores(), rows));
}

void SoftmaxCrossEntropyWithGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::softmax_cross_entropy_with_grad");
  call.stream();
  call.tensor(getScores());
  call.tensor(getLabels());
  call.tensor(getLossGrad());
  call.optionalTensor(getWeights());
  call.tensor(getLoss());
  call.tensor(getScoresGrad());
  lossArguments(call, *this);
  call.workspace();
}
// softmax_cross_entropy's rows on the cpu, or each row's f64 loss on
// cuda, whichever is larger
// (softmax_cross_entropy_with_grad_workspace_bytes).
int64_t SoftmaxCrossEntropyWithGradOp::getWorkspaceBytes() {
  int64_t rows = 0;
  const int64_t floats = lossRowFloats(getScores(), rows);
  return floats < 0 ? 0 : kFloatBytes * std::max(floats, 2 * rows);
}
// The gradient may take the scores' buffer: each kernel reads an element
// (and first the row's label score) before it writes it.
std::optional<unsigned>
SoftmaxCrossEntropyWithGradOp::getInPlaceOperand(unsigned result) {
  if (result == 1 && getScores().getType() == getScoresGrad().getType())
    return 0;
  return std::nullopt;
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
  call.workspace();
}
// One group's im2col matrix; f16/bf16 also x, w, y and bias in f32.
int64_t ConvOp::getWorkspaceBytes() {
  int64_t group = getGroup();
  if (group < 1)
    return 0;
  int64_t floats = im2colFloats(getInput(), getWeight(), getResult(),
                                getStrides(), getPads(),
                                channelsOf(getInput()) / group);
  if (convertsToF32(getResult()))
    floats += numElements(getInput()) + numElements(getWeight()) +
              numElements(getResult()) + (getBias() ? numElements(getBias()) : 0);
  return kFloatBytes * floats;
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
  call.workspace();
}
int64_t SoftmaxGradOp::getWorkspaceBytes() {
  return softmaxWorkspaceBytes(getOutput(), getAxis(), 2);
}
void LogSoftmaxGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::log_softmax_grad");
  call.stream();
  call.tensor(getOutput());
  call.tensor(getResultGrad());
  call.tensor(getInputGrad());
  call.integer(getAxis());
  call.workspace();
}
int64_t LogSoftmaxGradOp::getWorkspaceBytes() {
  return softmaxWorkspaceBytes(getOutput(), getAxis(), 2);
}

// Attention: one f32 per query row (delta); on --target cuda (ds.target),
// f16/bf16 with a head width Dh a multiple of 16 also, from the next
// multiple of 256 bytes, rows x Dh f32 (the cuda backend's dq accumulator
// under DSRT_ATTENTION_GRAD=atomic), whichever backward runs
// (runtime/src/workspace_shapes.h, attention_grad_has_dq_acc; the kernels'
// least, attention_grad_workspace_bytes, is delta alone).
static int64_t attentionGradWorkspaceBytes(Operation *op, Value rowsOf, Value lse) {
  const int64_t rows = numElements(lse);
  auto type = cast<ShapedType>(rowsOf.getType());
  const int64_t dh = type.hasRank() && type.getRank() >= 1
                         ? type.getDimSize(type.getRank() - 1)
                         : ShapedType::kDynamic;
  if (rows == 0 || !onCudaTarget(op) || !convertsToF32(rowsOf) || ShapedType::isDynamic(dh) ||
      dh <= 0 || dh % 16 != 0)
    return kFloatBytes * rows;
  return llvm::alignTo(kFloatBytes * rows, 256) + kFloatBytes * rows * dh;
}
void AttentionGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::attention_grad");
  call.stream();
  for (Value value : {getQuery(), getKey(), getValue(), getResult(), getLse(),
                      getResultGrad(), getQueryGrad(), getKeyGrad(),
                      getValueGrad()})
    call.tensor(value);
  call.real(getScale().convertToFloat());
  call.boolean(getCausal());
  call.boolean(getTokensMajor());
  call.workspace();
}
int64_t AttentionGradOp::getWorkspaceBytes() {
  return attentionGradWorkspaceBytes(getOperation(), getQuery(), getLse());
}

void AttentionPackedGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::attention_packed_grad");
  call.stream();
  for (Value value : {getQkv(), getResult(), getLse(), getResultGrad(),
                      getQkvGrad()})
    call.tensor(value);
  call.real(getScale().convertToFloat());
  call.boolean(getCausal());
  call.workspace();
}
int64_t AttentionPackedGradOp::getWorkspaceBytes() {
  return attentionGradWorkspaceBytes(getOperation(), getResult(), getLse());
}

// Normalization.
void LayerNormGradOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee(getAddend() ? "dsrt::layer_norm_grad_add" : "dsrt::layer_norm_grad");
  call.stream();
  call.tensor(getResultGrad());
  call.tensor(getInput());
  call.tensor(getScale());
  call.tensor(getMean());
  call.tensor(getInvStdDev());
  // dsrt::layer_norm_grad_add's addend (without one, dsrt::layer_norm_grad).
  if (getAddend())
    call.optionalTensor(getAddend());
  call.tensor(getInputGrad());
  call.tensor(getScaleGrad());
  call.optionalTensor(getBiasGrad());
  call.integer(getAxis());
  call.workspace();
}
// The input gradient over the addend: each element of the addend is read
// before the kernel writes the same element of dx (cpu and cuda alike).
std::optional<unsigned> LayerNormGradOp::getInPlaceOperand(unsigned result) {
  if (result != 0 || !getAddend())
    return std::nullopt;
  return 5u; // after input, scale, mean, inv_std_dev, result_grad
}
// f16/bf16: x, dy and dx rows in f32 for each block of rows whose partial
// dscale/dbias sums the kernel keeps (up to 64, more of at least 32 rows
// for many rows, at most 1024, fewer when they would pass 2^22 values per
// parameter: the runtime's layer_norm_grad_blocks); a broadcast scale in
// f32; in every type the partial sums and their f64 totals.
int64_t LayerNormGradOp::getWorkspaceBytes() {
  int64_t rows = 0, n = 0;
  if (!splitAt(getInput(), getAxis(), rows, n))
    return 0;
  int64_t blocks = std::min<int64_t>(
      {rows, std::max<int64_t>(64, rows / 32), 1024,
       std::max<int64_t>(1, (int64_t(1) << 22) / n)});
  int64_t blockRows = (rows + blocks - 1) / blocks;
  blocks = (rows + blockRows - 1) / blockRows;
  // f64 totals of dscale and dbias and a parameter accumulator (3 n
  // doubles), each block's f32 partial sums of both (2 n per block); past
  // 32 blocks, the f64 sums of dscale and dbias of each of 32 lanes of
  // blocks (2 n doubles per lane), which cuda's kernel adds in lane order.
  int64_t floats = 2 * 3 * n + 2 * blocks * n;
  if (blocks > 32)
    floats += 2 * 2 * 32 * n;
  if (convertsToF32(getInput()))
    floats += 3 * blocks * n;
  floats += layerNormParamFloats(getScale(), n);
  return kFloatBytes * floats;
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
  call.workspace();
}
// The cpu backend's f32 sums of f16/bf16, or the cuda backend's sort of the
// positions by row and partial sums of long rows, whichever is larger
// (runtime/src/workspace_shapes.h, gather_grad_cuda_bytes): LSD radix
// passes of 8-bit digits over tiles of 1024 positions (two int32 arrays of
// positions, 256 digit counts per tile, extent + 1 row starts), and 2
// partial sums per tile of 256 sorted positions and column of
// [outer, inner], f32 (8 bytes for 64-bit elements).
int64_t GatherGradOp::getWorkspaceBytes() {
  int64_t cpu = convertsToF32(getDataGrad())
                    ? kFloatBytes * numElements(getDataGrad())
                    : 0;
  auto data = dyn_cast<ShapedType>(getDataGrad().getType());
  int64_t count = numElements(getIndices()), total = numElements(getDataGrad());
  int64_t axis = getAxis();
  if (!data || !data.hasStaticShape() || axis < 0 || axis >= data.getRank() ||
      !cast<ShapedType>(getIndices().getType()).hasStaticShape() || count <= 0 ||
      total <= 0)
    return cpu;
  constexpr int64_t kRadixBits = 8, kSortTile = 1024, kSegment = 256;
  int64_t extent = data.getDimSize(axis), columns = total / extent;
  int64_t sortTiles = (count + kSortTile - 1) / kSortTile;
  int64_t segmentTiles = (count + kSegment - 1) / kSegment;
  int64_t partialBytes =
      std::max<int64_t>(4, data.getElementTypeBitWidth() / 8);
  int64_t cuda =
      2 * segmentTiles * columns * partialBytes +
      4 * (2 * count + (int64_t(1) << kRadixBits) * sortTiles + extent + 1);
  return std::max(cpu, cuda);
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
  call.workspace();
}
// Every group's im2col matrix; f16/bf16 also dy, w and dx in f32.
int64_t ConvGradInputOp::getWorkspaceBytes() {
  if (getGroup() < 1)
    return 0;
  int64_t floats =
      im2colFloats(getInputGrad(), getWeight(), getResultGrad(), getStrides(),
                   getPads(), channelsOf(getInputGrad()));
  if (convertsToF32(getInputGrad()))
    floats += numElements(getResultGrad()) + numElements(getWeight()) +
              numElements(getInputGrad());
  return kFloatBytes * floats;
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
  call.workspace();
}
// One group's im2col matrix; f16/bf16 also dy, x and dw in f32.
int64_t ConvGradWeightOp::getWorkspaceBytes() {
  int64_t group = getGroup();
  if (group < 1)
    return 0;
  int64_t floats =
      im2colFloats(getInput(), getWeightGrad(), getResultGrad(), getStrides(),
                   getPads(), channelsOf(getInput()) / group);
  if (convertsToF32(getWeightGrad()))
    floats += numElements(getResultGrad()) + numElements(getInput()) +
              numElements(getWeightGrad());
  return kFloatBytes * floats;
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
  call.workspace();
}
int64_t MaxPoolGradOp::getWorkspaceBytes() {
  return poolGradWorkspaceBytes(getInputGrad());
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
  call.workspace();
}
int64_t AvgPoolGradOp::getWorkspaceBytes() {
  return poolGradWorkspaceBytes(getInputGrad());
}

// Optimizers.
/// The arguments after the tensors, shared by dsrt::adamw and
/// dsrt::adamw_multi: betas, epsilon, weight decay, decoupled, grad_scale.
template <typename AdamW>
static void addAdamWSettings(KernelCallBuilder &call, AdamW op) {
  call.real(op.getBeta1().convertToFloat());
  call.real(op.getBeta2().convertToFloat());
  call.real(op.getEpsilon().convertToFloat());
  call.real(op.getWeightDecay().convertToFloat());
  call.boolean(op.getDecoupled());
  call.optionalTensor(op.getGradScale());
}
/// The 16-bit parameter copy (param_copy) may overwrite the gradient when
/// it has the copy's type: the kernels read an element's gradient before
/// writing its copy. Under offload that is the host's copy of the 16-bit
/// gradient shard, so the copies need no host bytes of their own.
static std::optional<unsigned> copyOverGrad(Value copy, Value grad,
                                            unsigned gradOperand) {
  if (copy && copy.getType() == grad.getType())
    return gradOperand;
  return std::nullopt;
}
std::optional<unsigned> AdamWOp::getInPlaceOperand(unsigned result) {
  static constexpr unsigned operands[] = {2, 4, 5};
  if (result == 3)
    return copyOverGrad(getParamCopy(), getGrad(), 3);
  return result < 3 ? std::optional<unsigned>(operands[result]) : std::nullopt;
}
void AdamWOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::adamw");
  call.stream();
  for (Value value : getOperands().drop_back(getGradScale() ? 1 : 0))
    call.tensor(value);
  for (Value value : getResults().take_front(3))
    call.tensor(value);
  addAdamWSettings(call, *this);
  if (Value copy = getParamCopy()) // after grad_scale, absent when null
    call.optionalTensor(copy);
}
// params_out[i], first_moments_out[i], second_moments_out[i] overwrite
// params[i], first_moments[i], second_moments[i]: the operands are lr, step,
// then the four lists of n.
std::optional<unsigned> AdamWMultiOp::getInPlaceOperand(unsigned result) {
  unsigned count = getCount();
  if (result >= 3 * count)
    return result < 4 * count
               ? copyOverGrad(getUpdated()[result], getGrads()[result - 3 * count],
                              2 + count + (result - 3 * count))
               : std::nullopt;
  unsigned list = result / count, index = result % count;
  static constexpr unsigned operandLists[] = {0, 2, 3};
  return 2 + operandLists[list] * count + index;
}
// The runtime's list API is count-first: (n, params, grads, ...).
void AdamWMultiOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::adamw_multi");
  call.stream();
  call.tensor(getLr());
  call.tensor(getStep());
  call.integer(getCount());
  for (ValueRange list : {ValueRange(getParams()), ValueRange(getGrads()),
                          ValueRange(getFirstMoments()),
                          ValueRange(getSecondMoments()),
                          ValueRange(getParamsOut()),
                          ValueRange(getFirstMomentsOut()),
                          ValueRange(getSecondMomentsOut())})
    call.tensorArray(list);
  addAdamWSettings(call, *this);
  // The 16-bit copies, an array of n after grad_scale; absent without.
  if (!getParamCopies().empty())
    call.tensorArray(getParamCopies());
}
std::optional<unsigned> SgdOp::getInPlaceOperand(unsigned result) {
  static constexpr unsigned operands[] = {2, 4};
  if (result == 2)
    return copyOverGrad(getParamCopy(), getGrad(), 3);
  return result < 2 ? std::optional<unsigned>(operands[result]) : std::nullopt;
}
void SgdOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::sgd");
  call.stream();
  for (Value value : getOperands().drop_back(getGradScale() ? 1 : 0))
    call.tensor(value);
  for (Value value : getResults().take_front(2))
    call.tensor(value);
  call.real(getMomentum().convertToFloat());
  call.real(getDampening().convertToFloat());
  call.real(getWeightDecay().convertToFloat());
  call.boolean(getNesterov());
  call.optionalTensor(getGradScale());
  if (Value copy = getParamCopy()) // after grad_scale, absent when null
    call.optionalTensor(copy);
}
std::optional<unsigned> LionOp::getInPlaceOperand(unsigned result) {
  static constexpr unsigned operands[] = {1, 3};
  if (result == 2)
    return copyOverGrad(getParamCopy(), getGrad(), 2);
  return result < 2 ? std::optional<unsigned>(operands[result]) : std::nullopt;
}
void LionOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::lion");
  call.stream();
  for (Value value : getOperands().drop_back(getGradScale() ? 1 : 0))
    call.tensor(value);
  for (Value value : getResults().take_front(2))
    call.tensor(value);
  call.real(getBeta1().convertToFloat());
  call.real(getBeta2().convertToFloat());
  call.real(getWeightDecay().convertToFloat());
  call.optionalTensor(getGradScale());
  if (Value copy = getParamCopy()) // after grad_scale, absent when null
    call.optionalTensor(copy);
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
  // On the function's stream: the buffer (a gradient accumulator) may still
  // be read by kernels queued before the fill.
  call.callee("dsrt::fill");
  call.stream();
  call.tensor(getResult());
  call.real(getValue().convertToDouble());
}
