//===- DsPipelineAttrs.cpp - pipeline and device-grid attributes ----------===//
//
// The verifiers of #ds.pipeline, #ds.pipeline_rank, #ds.pipeline_part,
// their list elements, and #ds.axes (DsPipelineAttrs.td).
//
//===----------------------------------------------------------------------===//

#include "ds/IR/DsDialect.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

using namespace mlir;
using namespace dsopt::ds;

namespace {
using EmitError = llvm::function_ref<InFlightDiagnostic()>;

/// Fails naming `what` unless `value` >= `least`.
LogicalResult atLeast(EmitError emitError, StringRef what, int64_t value,
                      int64_t least) {
  if (value < least)
    return emitError() << what << " must be >= " << least << ", got "
                       << value;
  return success();
}

/// Fails unless `values` ascend strictly, each in [0, bound).
LogicalResult ascendingBelow(EmitError emitError, StringRef what,
                             ArrayRef<int64_t> values, int64_t bound) {
  for (auto [i, value] : llvm::enumerate(values)) {
    if (value < 0 || value >= bound)
      return emitError() << what << " " << value << " is outside [0, "
                         << bound << ")";
    if (i > 0 && values[i - 1] >= value)
      return emitError() << what << " must ascend without repeats";
  }
  return success();
}
} // namespace

//===----------------------------------------------------------------------===//
// ds.pipeline
//===----------------------------------------------------------------------===//

LogicalResult PipelineStageAttr::verify(
    EmitError emitError, int64_t stage, int64_t forwardOps,
    int64_t flopsForward, int64_t flopsBackward, int64_t flopsWeight,
    int64_t bytesForward, int64_t paramBytes, int64_t activationBytes,
    int64_t sendBytes) {
  for (auto [what, value] :
       {std::pair<StringRef, int64_t>{"stage", stage},
        {"forward_ops", forwardOps},
        {"flops_forward", flopsForward},
        {"flops_backward", flopsBackward},
        {"flops_weight", flopsWeight},
        {"bytes_forward", bytesForward},
        {"param_bytes", paramBytes},
        {"activation_bytes", activationBytes},
        {"send_bytes", sendBytes}})
    if (failed(atLeast(emitError, what, value, 0)))
      return failure();
  if (flopsWeight > flopsBackward)
    return emitError() << "flops_weight (" << flopsWeight
                       << ") exceeds flops_backward (" << flopsBackward
                       << "): the weight gradient is part of the backward";
  return success();
}

LogicalResult PipelineTransferAttr::verify(EmitError emitError, int64_t from,
                                           int64_t to, PipelineTransferKind,
                                           int64_t bytes, int64_t values) {
  if (failed(atLeast(emitError, "from", from, 0)) ||
      failed(atLeast(emitError, "to", to, 0)) ||
      failed(atLeast(emitError, "bytes", bytes, 0)) ||
      failed(atLeast(emitError, "values", values, 1)))
    return failure();
  if (from == to)
    return emitError() << "a transfer goes from one stage to another, not "
                          "from stage "
                       << from << " to itself";
  return success();
}

LogicalResult PipelineTiedAttr::verify(EmitError emitError, StringRef name,
                                       ArrayRef<int64_t> stages) {
  if (name.empty())
    return emitError() << "a tied parameter needs a name";
  if (stages.size() < 2)
    return emitError() << "a tied parameter is read by at least two stages";
  return ascendingBelow(emitError, "stage", stages,
                        std::numeric_limits<int64_t>::max());
}

LogicalResult PipelineAttr::verify(
    EmitError emitError, int64_t stages, int64_t microbatches,
    PipelineSchedule schedule, int64_t chunks, PipelineBalance,
    ArrayRef<PipelineStageAttr> virtualStages,
    ArrayRef<PipelineTransferAttr> transfers, ArrayRef<PipelineTiedAttr> tied,
    ArrayAttr opNames, ArrayAttr opNodes, DenseI64ArrayAttr opFlops,
    DenseI64ArrayAttr opBytes, DenseI64ArrayAttr opStages,
    DenseBoolArrayAttr opCutBefore) {
  if (failed(atLeast(emitError, "stages", stages, 1)) ||
      failed(atLeast(emitError, "microbatches", microbatches, 1)) ||
      failed(atLeast(emitError, "chunks", chunks, 1)))
    return failure();
  if (chunks > 1 && schedule != PipelineSchedule::interleaved)
    return emitError() << "only the interleaved schedule has several chunks "
                          "per rank, got "
                       << chunks << " for " << stringifyEnum(schedule);
  int64_t numStages = stages * chunks;
  if (static_cast<int64_t>(virtualStages.size()) != numStages)
    return emitError() << "expected one virtual stage per stage and chunk ("
                       << numStages << "), got " << virtualStages.size();
  for (auto [s, stage] : llvm::enumerate(virtualStages))
    if (stage.getStage() != static_cast<int64_t>(s))
      return emitError() << "virtual stage " << s << " says it is stage "
                         << stage.getStage();
  for (PipelineTransferAttr transfer : transfers)
    if (transfer.getFrom() >= numStages || transfer.getTo() >= numStages)
      return emitError() << "transfer from stage " << transfer.getFrom()
                         << " to " << transfer.getTo()
                         << " names a stage outside [0, " << numStages << ")";
  for (PipelineTiedAttr parameter : tied)
    if (parameter.getStages().back() >= numStages)
      return emitError() << "tied parameter '" << parameter.getName()
                         << "' names stage " << parameter.getStages().back()
                         << ", outside [0, " << numStages << ")";
  // The op table: one entry per forward op in each column.
  size_t ops = opNames.size();
  for (auto [what, size] :
       {std::pair<StringRef, size_t>{"op_nodes", opNodes.size()},
        {"op_flops", opFlops.size()},
        {"op_bytes", opBytes.size()},
        {"op_stages", opStages.size()},
        {"op_cut_before", opCutBefore.size()}})
    if (size != ops)
      return emitError() << what << " has " << size
                         << " entries; op_names has " << ops
                         << " (one per op)";
  for (ArrayAttr column : {opNames, opNodes})
    if (!llvm::all_of(column, [](Attribute a) { return isa<StringAttr>(a); }))
      return emitError() << "op_names and op_nodes hold strings";
  for (int64_t stage : opStages.asArrayRef())
    if (stage < 0 || stage >= numStages)
      return emitError() << "op stage " << stage << " is outside [0, "
                         << numStages << ")";
  for (ArrayRef<int64_t> column : {opFlops.asArrayRef(), opBytes.asArrayRef()})
    if (llvm::any_of(column, [](int64_t v) { return v < 0; }))
      return emitError() << "op_flops and op_bytes must be >= 0";
  return success();
}

//===----------------------------------------------------------------------===//
// ds.pipeline_rank
//===----------------------------------------------------------------------===//

LogicalResult PipelineRankStageAttr::verify(EmitError emitError,
                                            int64_t stage,
                                            FlatSymbolRefAttr forward,
                                            FlatSymbolRefAttr backward,
                                            FlatSymbolRefAttr backwardInput,
                                            FlatSymbolRefAttr backwardWeight) {
  if (failed(atLeast(emitError, "stage", stage, 0)))
    return failure();
  if (!forward)
    return emitError() << "virtual stage " << stage << " has no forward";
  if (backward && (backwardInput || backwardWeight))
    return emitError() << "virtual stage " << stage
                       << " has a whole backward and a split one";
  if (!backward && (!backwardInput || !backwardWeight))
    return emitError() << "virtual stage " << stage
                       << " needs a backward, or both backward_input and "
                          "backward_weight";
  return success();
}

bool PipelineActionAttr::isTransfer() const {
  return getKind() >= PipelineActionKind::send_activation;
}

LogicalResult PipelineActionAttr::verify(EmitError emitError,
                                         PipelineActionKind kind,
                                         int64_t microbatch, int64_t chunk,
                                         int64_t peer) {
  if (failed(atLeast(emitError, "microbatch", microbatch, 0)) ||
      failed(atLeast(emitError, "chunk", chunk, 0)))
    return failure();
  bool transfer = kind >= PipelineActionKind::send_activation;
  if (transfer && peer < 0)
    return emitError() << stringifyEnum(kind) << " needs a peer rank";
  if (!transfer && peer != -1)
    return emitError() << stringifyEnum(kind) << " has no peer rank";
  return success();
}

LogicalResult PipelinePoolAttr::verify(EmitError emitError,
                                       PipelinePoolKind kind, int64_t stage,
                                       int64_t slots,
                                       std::optional<int64_t> slotBytes,
                                       std::optional<int64_t> offset) {
  if (kind == PipelinePoolKind::tied ? stage != -1 : stage < 0)
    return emitError() << "a " << stringifyEnum(kind)
                       << " pool belongs to "
                       << (kind == PipelinePoolKind::tied
                               ? "no stage (stage -1)"
                               : "a stage >= 0")
                       << ", got stage " << stage;
  if (failed(atLeast(emitError, "slots", slots, 0)))
    return failure();
  if (slotBytes.has_value() != offset.has_value())
    return emitError() << "a placed pool has both slot_bytes and offset";
  if (slotBytes && (failed(atLeast(emitError, "slot_bytes", *slotBytes, 0)) ||
                    failed(atLeast(emitError, "offset", *offset, 0))))
    return failure();
  return success();
}

LogicalResult PipelineRankTiedAttr::verify(EmitError emitError,
                                           StateAttr state,
                                           ArrayRef<int64_t> ranks) {
  if (!state.isAccumulator())
    return emitError() << "a shared state is a gradient accumulator, not "
                       << state;
  if (ranks.size() < 2)
    return emitError() << "a shared accumulator is held by at least two "
                          "ranks";
  return ascendingBelow(emitError, "rank", ranks,
                        std::numeric_limits<int64_t>::max());
}

PipelineRankStageAttr PipelineRankAttr::lookupStage(int64_t stage) const {
  for (PipelineRankStageAttr each : getVirtualStages())
    if (each.getStage() == stage)
      return each;
  return {};
}

LogicalResult PipelineRankAttr::verify(
    EmitError emitError, int64_t rank, int64_t stages, int64_t chunks,
    int64_t microbatches, int64_t dp, PipelineSchedule schedule,
    ArrayRef<PipelineRankStageAttr> virtualStages,
    ArrayRef<PipelineActionAttr> actions, ArrayRef<PipelinePoolAttr> pools,
    ArrayRef<PipelineRankTiedAttr> tied, std::optional<int64_t> buffersOffset,
    std::optional<int64_t> buffersBytes) {
  if (failed(atLeast(emitError, "stages", stages, 1)) ||
      failed(atLeast(emitError, "chunks", chunks, 1)) ||
      failed(atLeast(emitError, "microbatches", microbatches, 1)) ||
      failed(atLeast(emitError, "dp", dp, 1)))
    return failure();
  if (rank < 0 || rank >= stages)
    return emitError() << "rank " << rank << " is outside [0, " << stages
                       << ")";
  if (chunks > 1 && schedule != PipelineSchedule::interleaved)
    return emitError() << "only the interleaved schedule has several chunks "
                          "per rank, got "
                       << chunks << " for " << stringifyEnum(schedule);
  int64_t numStages = stages * chunks;
  // Megatron's placement: rank r holds stages r, r + p, r + 2p, ...
  if (static_cast<int64_t>(virtualStages.size()) != chunks)
    return emitError() << "expected one virtual stage per chunk (" << chunks
                       << "), got " << virtualStages.size();
  for (auto [c, stage] : llvm::enumerate(virtualStages))
    if (stage.getStage() != static_cast<int64_t>(c) * stages + rank)
      return emitError() << "chunk " << c << " of rank " << rank
                         << " is stage "
                         << static_cast<int64_t>(c) * stages + rank
                         << ", not " << stage.getStage();
  bool split = schedule == PipelineSchedule::zb_h1;
  for (PipelineRankStageAttr stage : virtualStages)
    if (split != (stage.getBackward() == nullptr))
      return emitError() << "virtual stage " << stage.getStage()
                         << (split ? " needs a split backward (zb-h1)"
                                   : " needs a whole backward");
  for (PipelineActionAttr action : actions) {
    if (action.getChunk() >= chunks || action.getMicrobatch() >= microbatches)
      return emitError() << "action " << stringifyEnum(action.getKind())
                         << " of micro-batch " << action.getMicrobatch()
                         << " and chunk " << action.getChunk()
                         << " is outside the rank's " << microbatches
                         << " micro-batches and " << chunks << " chunks";
    if (action.isTransfer() &&
        (action.getPeer() >= stages || action.getPeer() == rank))
      return emitError() << stringifyEnum(action.getKind()) << " to rank "
                         << action.getPeer()
                         << ": the peer is another rank in [0, " << stages
                         << ")";
  }
  for (PipelinePoolAttr pool : pools)
    if (pool.getStage() >= numStages)
      return emitError() << "pool of stage " << pool.getStage()
                         << " is outside [0, " << numStages << ")";
  for (PipelineRankTiedAttr accumulator : tied) {
    if (accumulator.getRanks().back() >= stages)
      return emitError() << "shared accumulator '"
                         << getDisplayName(accumulator.getState())
                         << "' names rank " << accumulator.getRanks().back()
                         << ", outside [0, " << stages << ")";
    if (!llvm::is_contained(accumulator.getRanks(), rank))
      return emitError() << "shared accumulator '"
                         << getDisplayName(accumulator.getState())
                         << "' is not held by rank " << rank;
  }
  if (buffersOffset.has_value() != buffersBytes.has_value())
    return emitError() << "placed pools have both buffers_offset and "
                          "buffers_bytes";
  if (buffersOffset &&
      (failed(atLeast(emitError, "buffers_offset", *buffersOffset, 0)) ||
       failed(atLeast(emitError, "buffers_bytes", *buffersBytes, 0))))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// ds.pipeline_part
//===----------------------------------------------------------------------===//

LogicalResult PipelinePartAttr::verify(EmitError emitError, PipelinePart part,
                                       int64_t stage) {
  if (part == PipelinePart::optimizer) {
    if (stage != -1)
      return emitError() << "the optimizer part belongs to no stage";
    return success();
  }
  if (stage < 0)
    return emitError() << "the " << stringifyEnum(part)
                       << " part needs a stage >= 0";
  return success();
}

//===----------------------------------------------------------------------===//
// ds.axes
//===----------------------------------------------------------------------===//

LogicalResult GridAxesAttr::verify(EmitError emitError,
                                   ArrayRef<GridAxis> axes) {
  llvm::SmallSet<GridAxis, 4> seen;
  for (GridAxis axis : axes)
    if (!seen.insert(axis).second)
      return emitError() << "grid axis " << stringifyEnum(axis)
                         << " appears twice";
  return success();
}

std::optional<int64_t> GridAxesAttr::find(GridAxis axis) const {
  for (auto [i, each] : llvm::enumerate(getAxes()))
    if (each == axis)
      return static_cast<int64_t>(i);
  return std::nullopt;
}
