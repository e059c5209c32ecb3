//===- DsDialect.h - the ds dialect -----------------------------*- C++ -*-===//
//
// Public header of the ds dialect: ops, attributes, enums and interfaces,
// plus the small type utilities every pass uses (element and tensor sizes).
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_DIALECT_DS_DSDIALECT_H
#define DSOPT_DIALECT_DS_DSDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <optional>

namespace dsopt::ds {

/// True for the element types the dialect accepts: f32, f16, bf16, i64, i32,
/// i1.
bool isSupportedElementType(mlir::Type type);

/// Bytes of one element of a supported element type (i1 is stored as a byte,
/// as in ONNX).
int64_t getElementByteSize(mlir::Type elementType);

/// Bytes of a statically shaped tensor, or std::nullopt if it overflows
/// int64.
std::optional<int64_t> getByteSize(mlir::ShapedType type);

/// Receives the description of one runtime kernel call, argument by
/// argument, from KernelOpInterface::buildKernelCall. Code generators
/// implement it; the dialect stays independent of any of them.
class KernelCallBuilder {
public:
  virtual ~KernelCallBuilder();
  /// The C++ function to call, e.g. "dsrt::matmul".
  virtual void callee(llvm::StringRef name) = 0;
  /// The stream the kernel runs on.
  virtual void stream() = 0;
  /// The communication stream: collectives run on it, asynchronously with
  /// the kernels of `stream()`; the code generator makes the first kernel
  /// that touches a collective's buffers wait for it.
  virtual void commStream() = 0;
  /// The file I/O stream: reads and writes of the file space run on it,
  /// asynchronously with both others, so that a copy or collective issued
  /// after a file transfer does not wait for the disk; the code generator
  /// orders them by the buffers they touch, as for `commStream()`.
  virtual void ioStream() = 0;
  /// A tensor view of an operand's or result's buffer.
  virtual void tensor(mlir::Value value) = 0;
  /// A pointer to a tensor view, or nullptr when `value` is null (absent
  /// optional operand).
  virtual void optionalTensor(mlir::Value value) = 0;
  /// A pointer to an array of tensor views, then the array's length.
  void tensors(mlir::ValueRange values) {
    tensorArray(values);
    integer(values.size());
  }
  /// A pointer to an array of tensor views, without its length: for kernels
  /// that take several lists of one length, passed once before them.
  virtual void tensorArray(mlir::ValueRange values) = 0;
  virtual void integer(int64_t value) = 0;
  virtual void real(double value) = 0;
  virtual void boolean(bool value) = 0;
  /// A pointer to a constant array of integers.
  virtual void integers(llvm::ArrayRef<int64_t> values) = 0;
  /// The op's workspace (a dsrt::Workspace of getWorkspaceBytes() bytes at
  /// the arena offset ds-plan-memory gave it), or an empty one when the op
  /// needs none.
  virtual void workspace() = 0;
  /// A C++ enumerator, e.g. "dsrt::UnaryOp::Exp".
  virtual void enumerator(llvm::StringRef qualifiedName) = 0;
  /// The kernel is not in the runtime: the code generator generates it from
  /// `op` (ds.fused) and calls it.
  virtual void generatedCallee(mlir::Operation *op) = 0;
};

/// Attaches KernelOpInterface and CostOpInterface to the shard dialect's
/// all_reduce, all_gather, reduce_scatter and all_slice, and
/// AsyncOpInterface to the first three (DsDistributed.cpp).
void registerShardModels(mlir::DialectRegistry &registry);

/// Fails with a diagnostic when `op` is a shard collective the runtime cannot
/// run (over several grid axes, not 1-D where ZeRO's partition needs it, a
/// reduction without a kernel); succeeds for every other op.
llvm::LogicalResult checkShardKernel(mlir::Operation *op);

/// The ONNX node an op came from: the first name in its location
/// (`loc("node"(...))`, possibly fused), or "".
std::string getNodeName(mlir::Location loc);

namespace detail {
/// Default for CostOpInterface::getBytesAccessed: every operand read once,
/// every result written once.
int64_t defaultBytesAccessed(mlir::Operation *op);

/// Result type of multidirectional (NumPy) broadcasting of `operandTypes`,
/// with `elementType`, or the element type of the last operand when null.
llvm::LogicalResult
inferBroadcastResult(std::optional<mlir::Location> loc,
                     llvm::ArrayRef<mlir::Type> operandTypes,
                     mlir::Type elementType,
                     llvm::SmallVectorImpl<mlir::Type> &inferredTypes);

/// The spatial geometry shared by convolution and pooling.
struct WindowAttrs {
  llvm::ArrayRef<int64_t> kernel, strides, pads, dilations;
};

/// Output shape [N, outChannels, D'...] of a window op (convolution,
/// pooling) over `input` [N, C, D...], or a diagnostic at `loc`.
llvm::LogicalResult inferWindowShape(std::optional<mlir::Location> loc,
                                     llvm::StringRef what,
                                     mlir::RankedTensorType input,
                                     WindowAttrs window, int64_t outChannels,
                                     bool ceilMode,
                                     llvm::SmallVectorImpl<int64_t> &shape);
} // namespace detail
} // namespace dsopt::ds

#include "ds/IR/DsEnums.h.inc"

#include "ds/IR/DsDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "ds/IR/DsAttrs.h.inc"

namespace dsopt::ds {
/// Builds the device grid of a distributed program at the start of
/// `module`: `shard.grid @grid` of the axes' sizes, their names (outermost
/// first: pp, dp) in ds.axes (#ds.axes). The one place that builds a grid;
/// the collectives refer to it by name.
mlir::Operation *
buildDeviceGrid(mlir::OpBuilder &builder, mlir::ModuleOp module,
                llvm::ArrayRef<std::pair<GridAxis, int64_t>> axes);

/// Replaces the device grid of `module` by one of `axes` (built as
/// buildDeviceGrid does) and renumbers the grid axes of every op that
/// refers to it (the shard collectives' grid_axes, ds ops' grid_axis) by
/// their names, e.g. a tensor-parallel step's (dp, tp) grid as a pipeline
/// rank's (pp, dp, tp). Fails, naming it, on an op whose axis the new grid
/// lacks.
mlir::FailureOr<mlir::Operation *>
replaceDeviceGrid(mlir::OpBuilder &builder, mlir::ModuleOp module,
                  llvm::ArrayRef<std::pair<GridAxis, int64_t>> axes);

/// The axes of a device grid (its ds.axes), or null.
GridAxesAttr getDeviceGridAxes(mlir::Operation *grid);

/// The dimension of a device grid that is `axis` (by its ds.axes).
std::optional<int64_t> getDeviceGridAxis(mlir::Operation *grid,
                                         GridAxis axis);
} // namespace dsopt::ds


namespace dsopt::ds {
/// Where an op computes in mixed-precision training (the traits
/// Ds_Compute16, Ds_Accumulate32, Ds_Sum32, Ds_ComputeF32, Ds_Loss16,
/// Ds_KeepTypes of DsInterfaces.td).
enum class ComputePrecision {
  Compute16,
  Accumulate32,
  Sum32,
  ComputeF32,
  Loss16,
  KeepTypes
};

/// The name of a compute precision as docs/passes.md's table shows it.
llvm::StringRef getComputePrecisionName(ComputePrecision precision);

/// The compute precision an op declares, or std::nullopt for an op that
/// declares none (ops of other dialects, ds.yield).
std::optional<ComputePrecision> getComputePrecision(mlir::OperationName name);
/// The op's: f32 where it carries ds.compute_f32, else its declared one.
std::optional<ComputePrecision> getComputePrecision(mlir::Operation *op);

namespace PrecisionTrait {
template <typename ConcreteType>
class Compute16 : public mlir::OpTrait::TraitBase<ConcreteType, Compute16> {};
template <typename ConcreteType>
class Accumulate32
    : public mlir::OpTrait::TraitBase<ConcreteType, Accumulate32> {};
template <typename ConcreteType>
class Sum32 : public mlir::OpTrait::TraitBase<ConcreteType, Sum32> {};
template <typename ConcreteType>
class ComputeF32 : public mlir::OpTrait::TraitBase<ConcreteType, ComputeF32> {
};
template <typename ConcreteType>
class Loss16 : public mlir::OpTrait::TraitBase<ConcreteType, Loss16> {};
template <typename ConcreteType>
class KeepTypes : public mlir::OpTrait::TraitBase<ConcreteType, KeepTypes> {};
} // namespace PrecisionTrait

/// How one tensor is laid out over the tensor-parallel ranks: whole on
/// every rank (replicated), cut along `dim` (into `blocks` equal blocks,
/// each cut into one piece per rank; see #ds.tp_split), or a partial sum
/// that an all-reduce over the ranks completes.
struct TensorSplit {
  int64_t dim = -1;
  int64_t blocks = 1;
  bool partial = false;

  static TensorSplit replicated() { return {}; }
  static TensorSplit along(int64_t dim, int64_t blocks = 1) {
    return {dim, blocks, false};
  }
  static TensorSplit partialSum() { return {-1, 1, true}; }
  bool isReplicated() const { return dim < 0 && !partial; }
  bool isSplit() const { return dim >= 0; }
  bool operator==(const TensorSplit &other) const {
    return dim == other.dim && partial == other.partial &&
           (dim < 0 || blocks == other.blocks);
  }
  bool operator!=(const TensorSplit &other) const { return !(*this == other); }
};

/// What ShardingRuleOpInterface answers: the layout every operand must have
/// for the op to run rank-locally, the layout of each result, and, when the
/// op cannot, why (`reason`), with `uneven` set when the only obstacle is a
/// size the ranks do not divide.
struct ShardingRule {
  llvm::SmallVector<TensorSplit> operands;
  llvm::SmallVector<TensorSplit> results;
  std::string reason;
  bool uneven = false;
  /// The op does not run on the pieces as it is: its buildOnPieces builds
  /// the form that does (with its own collectives over tp).
  bool rewrite = false;
};

/// Attaches ShardingRuleOpInterface to the ds ops that have a rule
/// (DsSharding.cpp); every other op is replicated.
void attachShardingRules(mlir::MLIRContext &context);
} // namespace dsopt::ds

#include "ds/IR/DsInterfaces.h.inc"

#define GET_OP_CLASSES
#include "ds/IR/DsOps.h.inc"

namespace dsopt::ds {

/// Where an op runs and so which memory it reads (getOperandSpace) and
/// writes (getResultSpace): a ds.transfer reads its `from` space and writes
/// its `to` space; an optimizer update with `ds.space = #ds.space<host>`
/// runs on the host (ds-offload); every other op on the device.
MemorySpace getOperandSpace(mlir::Operation *op);
MemorySpace getResultSpace(mlir::Operation *op);
/// Where a value lies: a function argument in its `ds.space` (device
/// without one), an op's result where the op writes (getResultSpace).
MemorySpace getValueSpace(mlir::Value value);
/// Fails with a diagnostic when `op` carries a `ds.space` it cannot run in:
/// only an optimizer update (OptimizerOpInterface, ds.adamw_multi) and the
/// 16-bit copy of its updated parameter (isHostParameterCopy) run on the
/// host, and nothing runs in the file space.
llvm::LogicalResult verifyExecutionSpace(mlir::Operation *op);
/// Whether `op` is a ds.cast from f32 to bf16 or f16 of an optimizer
/// update's updated parameter (or of one of a ds.adamw_multi's updated
/// parameters): mixed precision's working copy of an updated master
/// weight, which an offloaded step makes on the host so that half the bytes
/// go back to the device.
bool isHostParameterCopy(mlir::Operation *op);

/// The name a state or a pipeline stage value is shown under outside the
/// IR (plan.json, plan.txt, the program's description, messages):
/// "grad:<param>" for a gradient accumulator, "<role>:<param>" for an
/// optimizer state, "<role>:<id>" for a pipeline value ("recv:12"). Only
/// for people and for matching a description's names; nothing parses it.
std::string getDisplayName(StateAttr state);
std::string getDisplayName(ValueRole role, llvm::StringRef id);

/// The #ds.state of argument `i` of `function`, or null.
StateAttr getArgumentState(mlir::FunctionOpInterface function, unsigned i);
/// The parameter whose gradient accumulator argument `i` is, or "".
llvm::StringRef getAccumulatedParam(mlir::FunctionOpInterface function,
                                    unsigned i);

/// The ds.role of argument or result `i` of a pipeline stage function, if
/// it has one.
std::optional<ValueRole> getArgumentRole(mlir::FunctionOpInterface function,
                                         unsigned i);
std::optional<ValueRole> getResultRole(mlir::FunctionOpInterface function,
                                       unsigned i);

/// The value whose storage `value` shares: `value` itself, or through
/// views (kernels with an aliased operand) the value they view.
mlir::Value getViewSource(mlir::Value value);

/// The value whose storage result `r` of `op` overwrites when its kernel
/// computes it in place (KernelOpInterface::getInPlaceOperand): the root of
/// that operand through views (ops with an aliased operand), when it is the
/// result of a kernel that is neither a view nor a constant; else null.
mlir::Value getInPlaceRoot(mlir::Operation *op, unsigned r);

/// A gradient accumulation of a training-step function (ds-optimizer's
/// @micro_step, a pipeline stage's backward): the returned value `result`
/// updates (ds.updates) the accumulator `acc` of parameter `param` (its
/// ds.state is #ds.state<accumulator, param = "<param>">) with `add` =
/// acc + grad, or with `grad` alone when there is one micro-batch per
/// step (`add` null).
struct GradientAccumulation {
  mlir::BlockArgument acc;
  llvm::StringRef param;
  AddOp add;
  mlir::Value grad;
};
/// The accumulation `result` (an operand of the function's return) is, if
/// it is one.
std::optional<GradientAccumulation>
matchGradientAccumulation(mlir::FunctionOpInterface function,
                          mlir::OpOperand &result);
} // namespace dsopt::ds

#endif // DSOPT_DIALECT_DS_DSDIALECT_H
