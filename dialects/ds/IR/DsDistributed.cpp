//===- DsDistributed.cpp - data-parallel ops and the shard collectives ----===//
//
// ds.flat_pad / ds.flat_unpad, and how the upstream shard dialect's
// collectives run in a generated program: KernelOpInterface and
// CostOpInterface are attached to shard.all_reduce, shard.all_gather,
// shard.reduce_scatter and shard.all_slice as external models, so the
// memory planner, the plan and the code generator treat them like ds ops.
// dsopt's programs use them over one grid axis (ZeRO's over `dp`, on the
// 1-D tensors of its flat partition; the pipeline's gradient norm over
// `pp`); anything else is refused by checkShardKernel.
//
//===----------------------------------------------------------------------===//

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/DialectRegistry.h"

using namespace mlir;
using namespace dsopt::ds;

namespace {
RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}
} // namespace

//===----------------------------------------------------------------------===//
// ds.flat_pad, ds.flat_unpad
//===----------------------------------------------------------------------===//

LogicalResult FlatPadOp::verify() {
  auto input = tensorType(getInput()), result = tensorType(getResult());
  if (input.getElementType() != result.getElementType())
    return emitOpError() << "changes the element type from "
                         << input.getElementType() << " to "
                         << result.getElementType();
  if (result.getRank() != 1 ||
      result.getNumElements() < input.getNumElements())
    return emitOpError() << "result must be 1-D with at least "
                         << input.getNumElements() << " elements, got "
                         << result;
  return success();
}
int64_t FlatPadOp::getFlops() { return 0; }
void FlatPadOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::flat_pad");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
}

LogicalResult FlatUnpadOp::verify() {
  auto input = tensorType(getInput()), result = tensorType(getResult());
  if (input.getElementType() != result.getElementType())
    return emitOpError() << "changes the element type from "
                         << input.getElementType() << " to "
                         << result.getElementType();
  if (input.getRank() != 1 || input.getNumElements() < result.getNumElements())
    return emitOpError() << "input must be 1-D with at least "
                         << result.getNumElements() << " elements, got "
                         << input;
  return success();
}
int64_t FlatUnpadOp::getFlops() { return 0; }
// A view; if the planner ever could not alias it, the leading elements are
// copied.
void FlatUnpadOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::copy_prefix");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
}
std::optional<unsigned> FlatUnpadOp::getAliasedOperand() { return 0; }

//===----------------------------------------------------------------------===//
// Bucket collectives
//===----------------------------------------------------------------------===//

namespace {

/// The size of grid axis `axis` of the shard.grid `grid` names, or a
/// diagnostic.
FailureOr<int64_t> gridAxisSize(Operation *op, FlatSymbolRefAttr grid,
                                int64_t axis) {
  auto gridOp = SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(op, grid);
  if (!gridOp)
    return op->emitOpError() << "grid " << grid << " is not a shard.grid";
  ArrayRef<int64_t> shape = gridOp.getShape();
  if (axis < 0 || axis >= static_cast<int64_t>(shape.size()) ||
      ShapedType::isDynamic(shape[axis]))
    return op->emitOpError() << "grid axis " << axis << " of " << grid
                             << " does not exist or has no static size";
  return shape[axis];
}

LogicalResult verifyReduction(Operation *op, StringRef reduction) {
  if (reduction != "sum" && reduction != "average" && reduction != "max")
    return op->emitOpError() << "reduction '" << reduction
                             << "' is not sum, average or max";
  return success();
}

/// Common checks: one output per input, one element type, a 1-D staging of
/// `stagingElements`.
LogicalResult verifyBucket(Operation *op, ValueRange inputs,
                           ValueRange outputs, Value staging,
                           int64_t stagingElements) {
  if (inputs.empty() || inputs.size() != outputs.size())
    return op->emitOpError() << "needs one output per input and at least one "
                                "input, got "
                             << inputs.size() << " inputs and "
                             << outputs.size() << " outputs";
  Type element = tensorType(inputs[0]).getElementType();
  for (Value value : llvm::concat<const Value>(inputs, outputs))
    if (tensorType(value).getElementType() != element)
      return op->emitOpError() << "mixes element types";
  auto stagingType = tensorType(staging);
  if (stagingType.getElementType() != element || stagingType.getRank() != 1 ||
      stagingType.getNumElements() != stagingElements)
    return op->emitOpError() << "staging must be tensor<" << stagingElements
                             << "x" << element << ">, got " << stagingType;
  return success();
}

std::string bucketReduceOp(StringRef reduction) {
  if (reduction == "average")
    return "dsrt::ReduceOp::Mean";
  if (reduction == "max")
    return "dsrt::ReduceOp::Max";
  return "dsrt::ReduceOp::Sum";
}

} // namespace

LogicalResult AllReduceBucketOp::verify() {
  if (failed(verifyReduction(*this, getReduction())))
    return failure();
  int64_t total = 0;
  for (auto [input, output] : llvm::zip(getInputs(), getOutputs())) {
    if (input.getType() != output.getType())
      return emitOpError() << "output type " << output.getType()
                           << " differs from its input's " << input.getType();
    total += tensorType(input).getNumElements();
  }
  return verifyBucket(*this, getInputs(), getOutputs(), getStaging(), total);
}
int64_t AllReduceBucketOp::getFlops() {
  return tensorType(getStaging()).getNumElements();
}
/// dsrt::<callee>(comm stream, inputs, outputs, staging, [reduction,]
/// grid axis): the calls of the three bucket collectives.
template <typename Bucket>
static void buildBucketCall(KernelCallBuilder &call, StringRef callee,
                            Bucket op, std::optional<StringRef> reduction) {
  call.callee(callee);
  call.commStream();
  call.tensors(op.getInputs());
  call.tensors(op.getOutputs());
  call.tensor(op.getStaging());
  if (reduction)
    call.enumerator(bucketReduceOp(*reduction));
  call.integer(op.getGridAxis());
}

void AllReduceBucketOp::buildKernelCall(KernelCallBuilder &call) {
  buildBucketCall(call, "dsrt::all_reduce_bucket", *this, getReduction());
}
std::optional<unsigned> AllReduceBucketOp::getInPlaceOperand(unsigned result) {
  if (result < getInputs().size())
    return result;
  return std::nullopt;
}

LogicalResult ReduceScatterBucketOp::verify() {
  if (failed(verifyReduction(*this, getReduction())))
    return failure();
  FailureOr<int64_t> ranks = gridAxisSize(*this, getGridAttr(), getGridAxis());
  if (failed(ranks))
    return failure();
  int64_t total = 0;
  for (auto [input, output] : llvm::zip(getInputs(), getOutputs())) {
    auto in = tensorType(input), out = tensorType(output);
    if (in.getRank() != 1 || out.getRank() != 1 ||
        in.getNumElements() != *ranks * out.getNumElements())
      return emitOpError() << "input " << in << " must be the " << *ranks
                           << " shards of output " << out << ", both 1-D";
    total += in.getNumElements();
  }
  return verifyBucket(*this, getInputs(), getOutputs(), getStaging(), total);
}
int64_t ReduceScatterBucketOp::getFlops() {
  return tensorType(getStaging()).getNumElements();
}
void ReduceScatterBucketOp::buildKernelCall(KernelCallBuilder &call) {
  buildBucketCall(call, "dsrt::reduce_scatter_bucket", *this, getReduction());
}

LogicalResult AllGatherBucketOp::verify() {
  FailureOr<int64_t> ranks = gridAxisSize(*this, getGridAttr(), getGridAxis());
  if (failed(ranks))
    return failure();
  int64_t total = 0;
  for (auto [input, output] : llvm::zip(getInputs(), getOutputs())) {
    auto in = tensorType(input), out = tensorType(output);
    if (in.getRank() != 1 || out.getRank() != 1 ||
        out.getNumElements() != *ranks * in.getNumElements())
      return emitOpError() << "output " << out << " must hold the " << *ranks
                           << " shards " << in << ", both 1-D";
    total += out.getNumElements();
  }
  return verifyBucket(*this, getInputs(), getOutputs(), getStaging(), total);
}
int64_t AllGatherBucketOp::getFlops() { return 0; }
void AllGatherBucketOp::buildKernelCall(KernelCallBuilder &call) {
  buildBucketCall(call, "dsrt::all_gather_bucket", *this, std::nullopt);
}

int64_t TpCopyOp::getFlops() { return 0; }
void TpCopyOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::copy");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
}
std::optional<unsigned> TpCopyOp::getAliasedOperand() { return 0; }
LogicalResult TpCopyOp::buildVJP(OpBuilder &builder,
                                 ArrayRef<Value> resultGrads,
                                 ArrayRef<bool> needed,
                                 SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  if (!dy || !needed[0]) {
    operandGrads.push_back(Value());
    return success();
  }
  std::string node = getNodeName(getLoc());
  Location loc = NameLoc::get(
      builder.getStringAttr((node.empty() ? "tp_copy" : node) + ".grad"),
      getLoc());
  operandGrads.push_back(shard::AllReduceOp::create(
      builder, loc, dy.getType(), getGrid(),
      {static_cast<int16_t>(getGridAxis())}, dy, shard::ReductionKind::Sum));
  return success();
}

LogicalResult TpOffsetOp::verify() {
  if (failed(gridAxisSize(*this, getGridAttr(), getGridAxis())))
    return failure();
  if (getStride() < 1)
    return emitOpError() << "stride " << getStride() << " is not positive";
  if (tensorType(getResult()).getRank() != 0)
    return emitOpError() << "result must be a scalar";
  return success();
}
int64_t TpOffsetOp::getFlops() { return 0; }
void TpOffsetOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::tp_offset");
  call.stream();
  call.tensor(getResult());
  call.integer(getGridAxis());
  call.integer(getStride());
}

int64_t StopGradientOp::getFlops() { return 0; }
void StopGradientOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::copy");
  call.stream();
  call.tensor(getInput());
  call.tensor(getResult());
}
std::optional<unsigned> StopGradientOp::getAliasedOperand() { return 0; }
LogicalResult StopGradientOp::buildVJP(OpBuilder &, ArrayRef<Value>,
                                       ArrayRef<bool>,
                                       SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(Value());
  return success();
}

// A bucket moves its staging buffer, the inputs packed into one collective.
AsyncKind AllReduceBucketOp::getAsyncKind() { return AsyncKind::all_reduce; }
int64_t AllReduceBucketOp::getAsyncGridAxis() { return getGridAxis(); }
RankedTensorType AllReduceBucketOp::getMovedType() {
  return tensorType(getStaging());
}
AsyncKind ReduceScatterBucketOp::getAsyncKind() {
  return AsyncKind::reduce_scatter;
}
int64_t ReduceScatterBucketOp::getAsyncGridAxis() { return getGridAxis(); }
RankedTensorType ReduceScatterBucketOp::getMovedType() {
  return tensorType(getStaging());
}
AsyncKind AllGatherBucketOp::getAsyncKind() { return AsyncKind::all_gather; }
int64_t AllGatherBucketOp::getAsyncGridAxis() { return getGridAxis(); }
RankedTensorType AllGatherBucketOp::getMovedType() {
  return tensorType(getStaging());
}

//===----------------------------------------------------------------------===//
// ds.transfer
//===----------------------------------------------------------------------===//

LogicalResult TransferOp::verify() {
  MemorySpace from = getFrom(), to = getTo();
  if (from == to)
    return emitOpError() << "copies from " << stringifyMemorySpace(from)
                         << " memory to the same space";
  if ((from == MemorySpace::file && to != MemorySpace::host) ||
      (to == MemorySpace::file && from != MemorySpace::host))
    return emitOpError() << "copies between " << stringifyMemorySpace(from)
                         << " and " << stringifyMemorySpace(to)
                         << " memory; the file space is read and written "
                            "only through host memory";
  return success();
}
int64_t TransferOp::getFlops() { return 0; }
void TransferOp::buildKernelCall(KernelCallBuilder &call) {
  call.callee("dsrt::transfer");
  // On the communication stream, beside the collectives, or a file
  // transfer on the file I/O stream: the code generator makes the first op
  // that touches its buffers wait for it.
  if (getFrom() == MemorySpace::file || getTo() == MemorySpace::file)
    call.ioStream();
  else
    call.commStream();
  call.tensor(getInput());
  call.tensor(getResult());
  auto runtimeSpace = [](MemorySpace space) {
    return space == MemorySpace::host   ? "dsrt::Space::Host"
           : space == MemorySpace::file ? "dsrt::Space::File"
                                        : "dsrt::Space::Device";
  };
  call.enumerator(runtimeSpace(getFrom()));
  call.enumerator(runtimeSpace(getTo()));
}
namespace {
/// The space an op runs in by `ds.space`, if it has one.
std::optional<MemorySpace> executionSpace(Operation *op) {
  if (auto space = op->getAttrOfType<MemorySpaceAttr>(
          DsDialect::kSpaceAttrName))
    return space.getValue();
  return std::nullopt;
}
} // namespace

MemorySpace dsopt::ds::getOperandSpace(Operation *op) {
  if (auto transfer = dyn_cast<TransferOp>(op))
    return transfer.getFrom();
  return executionSpace(op).value_or(MemorySpace::device);
}
MemorySpace dsopt::ds::getResultSpace(Operation *op) {
  if (auto transfer = dyn_cast<TransferOp>(op))
    return transfer.getTo();
  return executionSpace(op).value_or(MemorySpace::device);
}
MemorySpace dsopt::ds::getValueSpace(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto function =
        dyn_cast_or_null<FunctionOpInterface>(arg.getOwner()->getParentOp());
    if (function && arg.getOwner()->isEntryBlock())
      if (auto space = function.getArgAttrOfType<MemorySpaceAttr>(
              arg.getArgNumber(), DsDialect::kSpaceAttrName))
        return space.getValue();
    return MemorySpace::device;
  }
  return getResultSpace(value.getDefiningOp());
}
LogicalResult dsopt::ds::verifyExecutionSpace(Operation *op) {
  Attribute attr = op->getAttr(DsDialect::kSpaceAttrName);
  if (!attr)
    return success();
  auto space = dyn_cast<MemorySpaceAttr>(attr);
  if (!space)
    return op->emitOpError() << "'" << DsDialect::kSpaceAttrName
                             << "' must be a #ds.space";
  if (isa<TransferOp>(op))
    return op->emitOpError() << "'" << DsDialect::kSpaceAttrName
                             << "' on a transfer; it copies from `from` to "
                                "`to`";
  if (space.getValue() == MemorySpace::device)
    return success();
  if (space.getValue() == MemorySpace::host &&
      (isa<OptimizerOpInterface, AdamWMultiOp>(op) || isHostParameterCopy(op)))
    return success();
  return op->emitOpError()
         << "cannot run in " << stringifyMemorySpace(space.getValue())
         << " memory: only an optimizer update (the host optimizer) and the "
            "16-bit copy of its updated parameter run on the host, and "
            "nothing runs in the file space";
}
bool dsopt::ds::isHostParameterCopy(Operation *op) {
  auto cast = dyn_cast<CastOp>(op);
  if (!cast)
    return false;
  Value input = cast.getInput();
  auto update = input.getDefiningOp<OptimizerOpInterface>();
  auto multi = input.getDefiningOp<AdamWMultiOp>();
  bool updatedParam =
      (update && update.getUpdatedParam() == input) ||
      (multi && ::llvm::cast<OpResult>(input).getResultNumber() < multi.getCount());
  if (!updatedParam)
    return false;
  auto from = dyn_cast<RankedTensorType>(cast.getInput().getType());
  auto to = dyn_cast<RankedTensorType>(cast.getType());
  return from && to && from.getElementType().isF32() &&
         (to.getElementType().isBF16() || to.getElementType().isF16());
}

AsyncKind TransferOp::getAsyncKind() { return AsyncKind::transfer; }
// A copy between memory spaces of one rank runs along no grid axis.
int64_t TransferOp::getAsyncGridAxis() { return -1; }
RankedTensorType TransferOp::getMovedType() { return tensorType(getInput()); }

//===----------------------------------------------------------------------===//
// shard collectives as kernels
//===----------------------------------------------------------------------===//

namespace {

std::string reduceOpName(shard::ReductionKind kind) {
  switch (kind) {
  case shard::ReductionKind::Sum: return "dsrt::ReduceOp::Sum";
  case shard::ReductionKind::Average: return "dsrt::ReduceOp::Mean";
  case shard::ReductionKind::Max: return "dsrt::ReduceOp::Max";
  default: return "";
  }
}

int64_t gridAxis(ArrayRef<int16_t> axes) { return axes.empty() ? 0 : axes[0]; }

template <typename Op>
struct ShardKernelModel
    : KernelOpInterface::ExternalModel<ShardKernelModel<Op>, Op> {
  void buildKernelCall(Operation *op, KernelCallBuilder &call) const {
    auto collective = cast<Op>(op);
    if constexpr (std::is_same_v<Op, shard::AllReduceOp>)
      call.callee("dsrt::all_reduce");
    else if constexpr (std::is_same_v<Op, shard::AllGatherOp>)
      call.callee("dsrt::all_gather");
    else if constexpr (std::is_same_v<Op, shard::ReduceScatterOp>)
      call.callee("dsrt::reduce_scatter");
    else
      call.callee("dsrt::all_slice");
    // all_slice copies locally; the others communicate.
    if constexpr (std::is_same_v<Op, shard::AllSliceOp>)
      call.stream();
    else
      call.commStream();
    call.tensor(op->getOperand(0));
    call.tensor(op->getResult(0));
    if constexpr (std::is_same_v<Op, shard::AllReduceOp> ||
                  std::is_same_v<Op, shard::ReduceScatterOp>)
      call.enumerator(reduceOpName(collective.getReduction()));
    call.integer(gridAxis(collective.getGridAxes()));
  }
  std::optional<unsigned> getAliasedOperand(Operation *) const {
    return std::nullopt;
  }
  std::optional<unsigned> getInPlaceOperand(Operation *,
                                            unsigned result) const {
    // An all-reduce reduces each element where it is.
    if constexpr (std::is_same_v<Op, shard::AllReduceOp>)
      return 0u;
    return std::nullopt;
  }
};

template <typename Op>
struct ShardCostModel
    : CostOpInterface::ExternalModel<ShardCostModel<Op>, Op> {
  int64_t getFlops(Operation *op) const {
    // Reductions add one element per incoming chunk; counted as the
    // result's elements (the arithmetic is negligible next to the traffic).
    if constexpr (std::is_same_v<Op, shard::AllReduceOp> ||
                  std::is_same_v<Op, shard::ReduceScatterOp>)
      return tensorType(op->getOperand(0)).getNumElements();
    return 0;
  }
  int64_t getBytesAccessed(Operation *op) const {
    return dsopt::ds::detail::defaultBytesAccessed(op);
  }
};

/// The communicating shard collectives run on the communication stream
/// (shard.all_slice copies locally and is not one of them).
template <typename Op>
struct ShardAsyncModel
    : AsyncOpInterface::ExternalModel<ShardAsyncModel<Op>, Op> {
  AsyncKind getAsyncKind(Operation *) const {
    if constexpr (std::is_same_v<Op, shard::AllReduceOp>)
      return AsyncKind::all_reduce;
    else if constexpr (std::is_same_v<Op, shard::AllGatherOp>)
      return AsyncKind::all_gather;
    else
      return AsyncKind::reduce_scatter;
  }
  int64_t getAsyncGridAxis(Operation *op) const {
    return gridAxis(cast<Op>(op).getGridAxes());
  }
  RankedTensorType getMovedType(Operation *op) const {
    // A gather is counted on what it gathers, a reduction on what it reduces.
    if constexpr (std::is_same_v<Op, shard::AllGatherOp>)
      return tensorType(op->getResult(0));
    return tensorType(op->getOperand(0));
  }
};

/// The derivative of the all-reduce ds-tensor-parallel places at the end of
/// a tensor-parallel region (Megatron's `g`): the reduced value is the same
/// on every rank, so is its gradient, and each rank's partial sum receives
/// it whole. ZeRO's and the pipeline's all-reduces come after autodiff and
/// are never differentiated.
struct AllReduceVJPModel
    : VJPOpInterface::ExternalModel<AllReduceVJPModel, shard::AllReduceOp> {
  LogicalResult buildVJP(Operation *op, OpBuilder &, ArrayRef<Value> resultGrads,
                         ArrayRef<bool> needed,
                         SmallVectorImpl<Value> &operandGrads) const {
    if (cast<shard::AllReduceOp>(op).getReduction() != shard::ReductionKind::Sum)
      return op->emitOpError() << "has no derivative: only a sum all-reduce "
                                  "(a tensor-parallel region's end) has one";
    operandGrads.push_back(needed[0] ? resultGrads[0] : Value());
    return success();
  }
};

/// The derivatives of the collectives that --sequence-parallel places
/// (Megatron's sequence-parallel g and g-bar, Korthikanti et al. 2022,
/// section 4.2.2): a reduce-scatter (a row-parallel product's partial sums,
/// each rank keeping its rows of the sequence) has the all-gather of its
/// gradient; an all-gather (a sequence-split activation entering a tp
/// region, whose ranks each compute a partial gradient of it) has the
/// reduce-scatter (sum) of its gradient, but one made whole for an op
/// without a sharding rule (ds.tp_gather_whole), after which the ranks
/// compute alike and hold the whole gradient, has its rank's rows; an
/// all-slice (a whole value read by
/// sequence-split ops, each rank taking its rows) has the all-gather. ZeRO's
/// collectives come after autodiff and are never differentiated.
template <typename Op>
struct ShardVJPModel
    : VJPOpInterface::ExternalModel<ShardVJPModel<Op>, Op> {
  LogicalResult buildVJP(Operation *op, OpBuilder &builder,
                         ArrayRef<Value> resultGrads, ArrayRef<bool> needed,
                         SmallVectorImpl<Value> &operandGrads) const {
    auto collective = cast<Op>(op);
    Value dy = resultGrads[0];
    if (!dy || !needed[0]) {
      operandGrads.push_back(Value());
      return success();
    }
    std::string node = getNodeName(op->getLoc());
    Location loc = NameLoc::get(
        builder.getStringAttr((node.empty() ? "tp_sequence" : node) + ".grad"),
        op->getLoc());
    Type type = op->getOperand(0).getType();
    FlatSymbolRefAttr grid = collective.getGridAttr();
    ArrayRef<int16_t> axes = collective.getGridAxes();
    if constexpr (std::is_same_v<Op, shard::AllGatherOp>) {
      if (op->hasAttr(DsDialect::kTpGatherWholeAttrName))
        operandGrads.push_back(shard::AllSliceOp::create(
            builder, loc, type, dy, grid.getValue(), axes,
            collective.getGatherAxis().getSExtValue()));
      else
        operandGrads.push_back(shard::ReduceScatterOp::create(
          builder, loc, type, grid.getValue(), axes, dy,
          shard::ReductionKind::Sum, collective.getGatherAxis()));
    } else if constexpr (std::is_same_v<Op, shard::ReduceScatterOp>) {
      if (collective.getReduction() != shard::ReductionKind::Sum)
        return op->emitOpError() << "has no derivative: only a sum "
                                    "reduce-scatter (sequence parallelism) "
                                    "has one";
      operandGrads.push_back(shard::AllGatherOp::create(
          builder, loc, type, grid.getValue(), axes, dy,
          collective.getScatterAxis()));
    } else {
      operandGrads.push_back(shard::AllGatherOp::create(
          builder, loc, type, grid.getValue(), axes, dy,
          collective.getSliceAxis()));
    }
    return success();
  }
};

template <typename... Ops> void attach(MLIRContext *context) {
  (Ops::template attachInterface<ShardKernelModel<Ops>>(*context), ...);
  (Ops::template attachInterface<ShardCostModel<Ops>>(*context), ...);
}

} // namespace

void dsopt::ds::registerShardModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, shard::ShardDialect *) {
    attach<shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
           shard::AllSliceOp>(context);
    shard::AllReduceOp::attachInterface<ShardAsyncModel<shard::AllReduceOp>>(
        *context);
    shard::AllReduceOp::attachInterface<AllReduceVJPModel>(*context);
    shard::AllGatherOp::attachInterface<ShardAsyncModel<shard::AllGatherOp>>(
        *context);
    shard::ReduceScatterOp::attachInterface<
        ShardAsyncModel<shard::ReduceScatterOp>>(*context);
    shard::AllGatherOp::attachInterface<ShardVJPModel<shard::AllGatherOp>>(
        *context);
    shard::ReduceScatterOp::attachInterface<
        ShardVJPModel<shard::ReduceScatterOp>>(*context);
    shard::AllSliceOp::attachInterface<ShardVJPModel<shard::AllSliceOp>>(
        *context);
  });
}

namespace {
// The grid's symbol, as buildDeviceGrid names it.
constexpr llvm::StringLiteral kGridName = "grid";
} // namespace

Operation *dsopt::ds::buildDeviceGrid(
    OpBuilder &builder, ModuleOp module,
    ArrayRef<std::pair<GridAxis, int64_t>> axes) {
  SmallVector<GridAxis> names;
  SmallVector<int64_t> sizes;
  for (auto [name, size] : axes) {
    names.push_back(name);
    sizes.push_back(size);
  }
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(module.getBody());
  auto grid = shard::GridOp::create(builder, module.getLoc(), kGridName, sizes);
  grid->setAttr(DsDialect::kGridAxesAttrName,
                GridAxesAttr::get(builder.getContext(), names));
  return grid;
}

FailureOr<Operation *> dsopt::ds::replaceDeviceGrid(
    OpBuilder &builder, ModuleOp module,
    ArrayRef<std::pair<GridAxis, int64_t>> axes) {
  Operation *old = module.lookupSymbol(kGridName);
  GridAxesAttr oldAxes = old ? getDeviceGridAxes(old) : GridAxesAttr();
  if (!oldAxes)
    return module.emitError() << "no device grid @" << kGridName
                              << " with ds.axes to replace";
  SmallVector<GridAxis> oldNames(oldAxes.getAxes());
  old->erase();
  Operation *grid = buildDeviceGrid(builder, module, axes);
  auto renumber = [&](Operation *op, int64_t axis) -> FailureOr<int64_t> {
    if (axis < 0 || axis >= static_cast<int64_t>(oldNames.size()))
      return op->emitOpError() << "grid axis " << axis
                               << " is not an axis of @" << kGridName;
    std::optional<int64_t> moved =
        getDeviceGridAxis(grid, oldNames[static_cast<size_t>(axis)]);
    if (!moved)
      return op->emitOpError()
             << "reads grid axis " << stringifyGridAxis(oldNames[axis])
             << ", which the new grid lacks";
    return *moved;
  };
  auto onGrid = [](Operation *op) {
    auto ref = op->getAttrOfType<FlatSymbolRefAttr>("grid");
    return ref && ref.getValue() == kGridName;
  };
  WalkResult walked = module.walk([&](Operation *op) {
    if (!onGrid(op))
      return WalkResult::advance();
    if (auto attr = op->getAttrOfType<IntegerAttr>("grid_axis")) {
      FailureOr<int64_t> axis = renumber(op, attr.getInt());
      if (failed(axis))
        return WalkResult::interrupt();
      op->setAttr("grid_axis", builder.getI64IntegerAttr(*axis));
    }
    if (auto attr = op->getAttrOfType<DenseI16ArrayAttr>("grid_axes")) {
      SmallVector<int16_t> moved;
      for (int16_t a : attr.asArrayRef()) {
        FailureOr<int64_t> axis = renumber(op, a);
        if (failed(axis))
          return WalkResult::interrupt();
        moved.push_back(static_cast<int16_t>(*axis));
      }
      op->setAttr("grid_axes", builder.getDenseI16ArrayAttr(moved));
    }
    return WalkResult::advance();
  });
  if (walked.wasInterrupted())
    return failure();
  return grid;
}

GridAxesAttr dsopt::ds::getDeviceGridAxes(Operation *grid) {
  return grid->getAttrOfType<GridAxesAttr>(DsDialect::kGridAxesAttrName);
}

std::optional<int64_t> dsopt::ds::getDeviceGridAxis(Operation *grid,
                                                    GridAxis axis) {
  if (GridAxesAttr axes = getDeviceGridAxes(grid))
    return axes.find(axis);
  return std::nullopt;
}

LogicalResult dsopt::ds::checkShardKernel(Operation *op) {
  if (isa<AllReduceBucketOp, ReduceScatterBucketOp, AllGatherBucketOp>(op)) {
    int64_t axis = op->getAttrOfType<IntegerAttr>("grid_axis").getInt();
    if (axis < 0)
      return op->emitOpError() << "grid_axis must be >= 0";
    return success();
  }
  if (!isa<shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
           shard::AllSliceOp>(op))
    return success();
  auto input = tensorType(op->getOperand(0));
  auto result = tensorType(op->getResult(0));
  ArrayRef<int16_t> axes;
  if (auto allReduce = dyn_cast<shard::AllReduceOp>(op)) {
    axes = allReduce.getGridAxes();
    if (reduceOpName(allReduce.getReduction()).empty())
      return op->emitOpError()
             << "reduction " << stringifyEnum(allReduce.getReduction())
             << " has no runtime kernel (sum, average or max)";
    if (input.getElementType() != result.getElementType())
      return op->emitOpError()
             << "changes the element type; the runtime reduces in place";
  } else {
    if (auto gather = dyn_cast<shard::AllGatherOp>(op))
      axes = gather.getGridAxes();
    else if (auto scatter = dyn_cast<shard::ReduceScatterOp>(op)) {
      axes = scatter.getGridAxes();
      if (reduceOpName(scatter.getReduction()).empty())
        return op->emitOpError()
               << "reduction " << stringifyEnum(scatter.getReduction())
               << " has no runtime kernel (sum, average or max)";
    } else {
      axes = cast<shard::AllSliceOp>(op).getGridAxes();
    }
    // The runtime exchanges flat chunks: an N-D tensor is one when every
    // axis before the one gathered, scattered or sliced has size 1
    // (sequence parallelism's activations).
    int64_t axis = 0;
    if (auto gather = dyn_cast<shard::AllGatherOp>(op))
      axis = gather.getGatherAxis().getSExtValue();
    else if (auto scatter = dyn_cast<shard::ReduceScatterOp>(op))
      axis = scatter.getScatterAxis().getSExtValue();
    else
      axis = cast<shard::AllSliceOp>(op).getSliceAxis().getSExtValue();
    auto contiguous = [&](RankedTensorType type) {
      return axis >= 0 && axis < type.getRank() &&
             llvm::all_of(type.getShape().take_front(axis),
                          [](int64_t n) { return n == 1; });
    };
    if (input.getRank() != result.getRank() || !contiguous(input) ||
        !contiguous(result) ||
        input.getElementType() != result.getElementType())
      return op->emitOpError()
             << "runs only on tensors of one element type whose axes before "
                "axis "
             << axis << " have size 1 (a flat chunk per rank), got " << input
             << " -> " << result;
  }
  if (axes.size() > 1)
    return op->emitOpError() << "runs over one grid axis, not "
                             << axes.size();
  return success();
}
