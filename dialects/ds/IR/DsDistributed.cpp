//===- DsDistributed.cpp - data-parallel ops and the shard collectives ----===//
//
// ds.flat_pad / ds.flat_unpad, and how the upstream shard dialect's
// collectives run in a generated program: KernelOpInterface and
// CostOpInterface are attached to shard.all_reduce, shard.all_gather,
// shard.reduce_scatter and shard.all_slice as external models, so the
// memory planner, the plan and the code generator treat them like ds ops.
// dsopt's programs use them on 1-D tensors over grid axis 0 (`dp`), the
// partition ZeRO uses; anything else is refused by checkShardKernel.
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
    call.stream();
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

template <typename... Ops> void attach(MLIRContext *context) {
  (Ops::template attachInterface<ShardKernelModel<Ops>>(*context), ...);
  (Ops::template attachInterface<ShardCostModel<Ops>>(*context), ...);
}

} // namespace

void dsopt::ds::registerShardModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, shard::ShardDialect *) {
    attach<shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
           shard::AllSliceOp>(context);
  });
}

LogicalResult dsopt::ds::checkShardKernel(Operation *op) {
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
    if (input.getRank() != 1 || result.getRank() != 1 ||
        input.getElementType() != result.getElementType())
      return op->emitOpError()
             << "runs only on 1-D tensors of one element type (ZeRO's flat "
                "partition), got "
             << input << " -> " << result;
  }
  if (axes.size() > 1 || gridAxis(axes) != 0)
    return op->emitOpError() << "runs only over grid axis 0 (dp)";
  return success();
}
