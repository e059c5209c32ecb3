//===- DsSharding.cpp - ShardingRuleOpInterface: tensor-parallel rules ----===//
//
// How each op runs on tensor-parallel shards, next to the other per-op
// rules. A rule looks at how its operands are split over the tp ranks and
// says whether the op can compute its results from each rank's pieces
// alone, what layout every operand must then have and what layout the
// results get. A matmul contracting a split axis yields a partial sum (the
// all-reduce that completes it is ds-tensor-parallel's to place). Ops
// without a rule here are replicated: a split operand stops at them.
//
// The rules are dsopt's own interface rather than upstream MLIR's
// ShardingInterface (mlir/Dialect/Shard/Interfaces): that interface speaks
// in loop iterators and indexing maps and partitions through
// `shard-partition`, which cannot state a reshape that moves a split from
// one axis to another (heads), blocked splits (a fused Q/K/V projection)
// or the divisibility diagnostics the pass owes the user, and which the
// design keeps out of the correctness path (docs/tensor-parallel.md).
//
//===----------------------------------------------------------------------===//

#include "ds/IR/DsDialect.h"
#include "ds/IR/DsOpChain.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"

#include "llvm/Support/FormatVariadic.h"

#include <limits>

using namespace mlir;
using namespace dsopt::ds;

/// Records on the function argument that `indices` is (through reshapes)
/// the values [lo, hi) (and `ignore`) the whole op takes: its rank-local
/// form masks the others away, so only the data checks before step 1 can
/// still refuse them (DsToEmitC reads the attribute). Several readers: the
/// values every one takes.
static void recordIndexRange(Value indices, int64_t lo, int64_t hi,
                             std::optional<int64_t> ignore) {
  while (auto reshape = indices.getDefiningOp<ReshapeOp>())
    indices = reshape.getInput();
  auto arg = dyn_cast<BlockArgument>(indices);
  auto function =
      arg ? dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp())
          : nullptr;
  if (!function)
    return;
  unsigned index = arg.getArgNumber();
  if (auto old = function.getArgAttrOfType<DenseI64ArrayAttr>(
          index, DsDialect::kIndexRangeAttrName)) {
    lo = std::max(lo, old[0]);
    hi = std::min(hi, old[1]);
    if (old.size() < 3 || old[2] != ignore)
      ignore.reset();
  }
  SmallVector<int64_t> range{lo, hi};
  if (ignore)
    range.push_back(*ignore);
  function.setArgAttr(index, DsDialect::kIndexRangeAttrName,
                      DenseI64ArrayAttr::get(indices.getContext(), range));
}

namespace {

RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// The model extent of an axis split into `piece` entries per rank: the
/// padded vocabulary's (ds.tp_whole) when ds-tensor-parallel padded it.
int64_t wholeExtent(Operation *op, int64_t piece, int64_t ranks) {
  if (auto whole = op->getAttrOfType<IntegerAttr>(DsDialect::kTpWholeAttrName))
    return whole.getInt();
  return piece * ranks;
}

/// Rules see operands that are whole or split: ds-tensor-parallel completes
/// a partial sum (all-reduce) before anything reads it.
bool reachedByPartial(ArrayRef<TensorSplit> operands, ShardingRule &rule) {
  if (llvm::none_of(operands, [](TensorSplit s) { return s.partial; }))
    return false;
  rule.reason = "a partial sum reaches it";
  return true;
}

/// The one split among `operands`, mapped to result axes by `toResult`
/// (-1: not an axis of the result), or failure when two disagree or a
/// partial sum reaches the op.
FailureOr<TensorSplit>
commonSplit(ArrayRef<TensorSplit> operands,
            function_ref<int64_t(unsigned, int64_t)> toResult,
            ShardingRule &rule) {
  if (reachedByPartial(operands, rule))
    return failure();
  TensorSplit common;
  for (auto [i, split] : llvm::enumerate(operands)) {
    if (!split.isSplit())
      continue;
    int64_t dim = toResult(i, split.dim);
    if (dim < 0) {
      rule.reason = "its split axis does not reach the result";
      return failure();
    }
    TensorSplit mapped = TensorSplit::along(dim, split.blocks);
    if (common.isSplit() && common != mapped) {
      rule.reason = "its operands are split along different axes";
      return failure();
    }
    common = mapped;
  }
  return common;
}

/// An op whose operands keep their splits and whose one result takes the
/// common split (commonSplit's mapping).
LogicalResult passSplit(ArrayRef<TensorSplit> operands,
                        function_ref<int64_t(unsigned, int64_t)> toResult,
                        ShardingRule &rule) {
  FailureOr<TensorSplit> split = commonSplit(operands, toResult, rule);
  if (failed(split))
    return failure();
  rule.operands.assign(operands.begin(), operands.end());
  rule.results = {*split};
  return success();
}

/// Operands broadcast against each other (NumPy rules): operand axis d of
/// rank r is result axis d + (R - r). An operand that is broadcast along
/// the split axis (size 1 or absent) stays replicated; every other operand
/// must be split like the result.
LogicalResult broadcastRule(Operation *op, ArrayRef<TensorSplit> operands,
                            ShardingRule &rule) {
  int64_t rank = tensorType(op->getResult(0)).getRank();
  auto alignment = [&](unsigned i) {
    return rank - tensorType(op->getOperand(i)).getRank();
  };
  FailureOr<TensorSplit> split = commonSplit(
      operands, [&](unsigned i, int64_t dim) { return dim + alignment(i); },
      rule);
  if (failed(split))
    return failure();
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    int64_t dim = split->dim - alignment(i);
    if (!split->isSplit() || dim < 0 ||
        tensorType(op->getOperand(i)).getDimSize(dim) == 1)
      rule.operands.push_back(TensorSplit::replicated());
    else
      rule.operands.push_back(TensorSplit::along(dim, split->blocks));
  }
  rule.results.assign(op->getNumResults(), *split);
  return success();
}

/// Elementwise ops, with NumPy broadcasting.
template <typename Op>
struct ElementwiseRule
    : ShardingRuleOpInterface::ExternalModel<ElementwiseRule<Op>, Op> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    return broadcastRule(op, operands, rule);
  }
};

/// An op that runs independently along every axis but `axes` (softmax over
/// its axis, layer norm over the trailing axes): a split elsewhere passes
/// through to every result; the other operands (scale, bias) stay whole.
LogicalResult independentRule(Operation *op, ArrayRef<TensorSplit> operands,
                              function_ref<bool(int64_t)> coupled,
                              StringRef what, ShardingRule &rule) {
  for (const TensorSplit &split : operands.drop_front())
    if (!split.isReplicated()) {
      rule.reason = (what + " parameters are split").str();
      return failure();
    }
  TensorSplit split = operands[0];
  if (reachedByPartial(operands, rule))
    return failure();
  if (split.isSplit() && coupled(split.dim)) {
    rule.reason = llvm::formatv("it {0} along its split axis {1}", what,
                                split.dim)
                      .str();
    return failure();
  }
  rule.operands.assign(operands.size(), TensorSplit::replicated());
  rule.operands[0] = split;
  rule.results.clear();
  for (Value result : op->getResults())
    rule.results.push_back(tensorType(result).getRank() > split.dim
                               ? split
                               : TensorSplit::replicated());
  return success();
}

/// Softmax and log-softmax normalize along their axis only.
template <typename Op>
struct SoftmaxRule
    : ShardingRuleOpInterface::ExternalModel<SoftmaxRule<Op>, Op> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    int64_t axis = cast<Op>(op).getAxis();
    return independentRule(
        op, operands, [&](int64_t dim) { return dim == axis; }, "normalizes",
        rule);
  }
};
struct LayerNormRule
    : ShardingRuleOpInterface::ExternalModel<LayerNormRule, LayerNormOp> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    int64_t axis = cast<LayerNormOp>(op).getAxis();
    return independentRule(
        op, operands, [&](int64_t dim) { return dim >= axis; }, "normalizes",
        rule);
  }
};

struct TransposeRule
    : ShardingRuleOpInterface::ExternalModel<TransposeRule, TransposeOp> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    ArrayRef<int64_t> perm = cast<TransposeOp>(op).getPerm();
    return passSplit(
        operands,
        [&](unsigned, int64_t dim) {
          return static_cast<int64_t>(llvm::find(perm, dim) - perm.begin());
        },
        rule);
  }
};

/// A reshape moves a split along axis d of the input to the first non-unit
/// axis of the output that covers the same leading elements: d must be the
/// first non-unit axis of its group of input axes (the axes whose product
/// equals that of a group of output axes), and that output axis must divide
/// into blocks x ranks pieces (heads: [b, s, H*d] -> [b, s, H, d] needs H
/// divisible by the ranks).
struct ReshapeRule
    : ShardingRuleOpInterface::ExternalModel<ReshapeRule, ReshapeOp> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t ranks, ShardingRule &rule) const {
    TensorSplit split = operands[0];
    rule.operands.assign(operands.begin(), operands.end());
    if (reachedByPartial(operands, rule))
      return failure();
    if (!split.isSplit()) {
      rule.results = {split};
      return success();
    }
    ArrayRef<int64_t> in = tensorType(op->getOperand(0)).getShape();
    ArrayRef<int64_t> out = tensorType(op->getResult(0)).getShape();
    // Walk both shapes in groups of equal products.
    size_t i = 0, o = 0;
    while (i < in.size() || o < out.size()) {
      size_t i0 = i, o0 = o;
      int64_t pin = 1, pout = 1;
      if (i < in.size())
        pin *= in[i++];
      if (o < out.size())
        pout *= out[o++];
      while (pin != pout) {
        if (pin < pout && i < in.size())
          pin *= in[i++];
        else if (o < out.size())
          pout *= out[o++];
        else
          break;
      }
      // Trailing unit axes join the group.
      while (i < in.size() && in[i] == 1 && (o == out.size() || out[o] != 1))
        ++i;
      while (o < out.size() && out[o] == 1 && (i == in.size() || in[i] != 1))
        ++o;
      if (static_cast<size_t>(split.dim) < i0 ||
          static_cast<size_t>(split.dim) >= i)
        continue;
      for (size_t k = i0; k < static_cast<size_t>(split.dim); ++k)
        if (in[k] != 1) {
          rule.reason = llvm::formatv("its split axis {0} is not the leading "
                                      "axis of the axes it merges",
                                      split.dim)
                            .str();
          return failure();
        }
      size_t target = o0;
      while (target + 1 < o && out[target] == 1)
        ++target;
      // An axis that passes through whole keeps its split as it is (its
      // divisibility, or its padding, was settled where it was split).
      bool unchanged = target < out.size() && out[target] == in[split.dim] &&
                       pin == in[split.dim];
      if (target >= out.size() ||
          (!unchanged && out[target] % (ranks * split.blocks) != 0)) {
        rule.uneven = true;
        rule.reason =
            llvm::formatv("output axis {0} of size {1} does not split into "
                          "{2} x {3} equal pieces",
                          target, target < out.size() ? out[target] : 0,
                          split.blocks, ranks)
                .str();
        return failure();
      }
      rule.results = {TensorSplit::along(target, split.blocks)};
      return success();
    }
    rule.reason = "its shapes do not group";
    return failure();
  }
};

/// Splitting along the split axis into k equal parts hands each part one
/// block of a k-block split (the fused Q/K/V projection); along any other
/// axis every part keeps the split.
struct SplitRule : ShardingRuleOpInterface::ExternalModel<SplitRule, SplitOp> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    auto splitOp = cast<SplitOp>(op);
    TensorSplit split = operands[0];
    rule.operands.assign(operands.begin(), operands.end());
    if (reachedByPartial(operands, rule))
      return failure();
    int64_t parts = op->getNumResults();
    if (split.dim != static_cast<int64_t>(splitOp.getAxis())) {
      rule.results.assign(parts, split);
      return success();
    }
    int64_t first = tensorType(op->getResult(0)).getDimSize(split.dim);
    for (Value result : op->getResults())
      if (tensorType(result).getDimSize(split.dim) != first ||
          split.blocks != parts) {
        rule.reason = llvm::formatv("it cuts its split axis into parts other "
                                    "than the split's {0} blocks",
                                    split.blocks)
                          .str();
        return failure();
      }
    rule.results.assign(parts, TensorSplit::along(split.dim));
    return success();
  }
};

/// Concatenation and slicing along axes other than the split one.
struct ConcatRule
    : ShardingRuleOpInterface::ExternalModel<ConcatRule, ConcatOp> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    int64_t axis = cast<ConcatOp>(op).getAxis();
    FailureOr<TensorSplit> split = commonSplit(
        operands, [&](unsigned, int64_t dim) { return dim == axis ? -1 : dim; },
        rule);
    if (failed(split))
      return failure();
    rule.operands.assign(operands.size(), *split);
    rule.results = {*split};
    return success();
  }
};
struct SliceRule : ShardingRuleOpInterface::ExternalModel<SliceRule, SliceOp> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    ArrayRef<int64_t> in = tensorType(op->getOperand(0)).getShape();
    ArrayRef<int64_t> out = tensorType(op->getResult(0)).getShape();
    auto slice = cast<SliceOp>(op);
    return passSplit(
        operands,
        [&](unsigned, int64_t dim) {
          bool whole = in[dim] == out[dim] && slice.getOffsets()[dim] == 0 &&
                       slice.getStrides()[dim] == 1;
          return whole ? dim : -1;
        },
        rule);
  }
};

/// The matrix product [..., M, K] x [..., K, N] (after the transpose flags):
/// a split batch axis or M (lhs) or N (rhs) passes to the result; K split on
/// both sides leaves each rank a partial sum. A replicated operand facing a
/// split of the other is asked to be split alike where that makes the
/// product local (the pass shards a parameter weight for it).
struct MatMulRule
    : ShardingRuleOpInterface::ExternalModel<MatMulRule, MatMulOp> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    auto matmul = cast<MatMulOp>(op);
    int64_t lr = tensorType(matmul.getLhs()).getRank();
    int64_t rr = tensorType(matmul.getRhs()).getRank();
    int64_t res = tensorType(matmul.getResult()).getRank();
    if (lr < 2 || rr < 2) {
      rule.reason = "it has a vector operand";
      return failure();
    }
    TensorSplit lhs = operands[0], rhs = operands[1];
    if (reachedByPartial(operands, rule))
      return failure();
    // The contracted axes (after the transpose flags).
    int64_t lhsK = matmul.getTransposeLhs() ? lr - 2 : lr - 1;
    int64_t rhsK = matmul.getTransposeRhs() ? rr - 1 : rr - 2;
    rule.operands = {lhs, rhs};
    auto batchOf = [&](int64_t rank, int64_t dim) {
      return dim < rank - 2 ? dim + (res - rank) : -1;
    };
    // The contraction: both sides along K.
    if ((lhs.isSplit() && lhs.dim == lhsK) ||
        (rhs.isSplit() && rhs.dim == rhsK)) {
      TensorSplit k = lhs.isSplit() ? lhs : rhs;
      if (k.blocks != 1) {
        rule.reason = "it contracts a blocked split";
        return failure();
      }
      rule.operands = {TensorSplit::along(lhsK), TensorSplit::along(rhsK)};
      if ((lhs.isSplit() && lhs != rule.operands[0]) ||
          (rhs.isSplit() && rhs != rule.operands[1])) {
        rule.reason = "its operands are split along different axes";
        return failure();
      }
      rule.results = {TensorSplit::partialSum()};
      return success();
    }
    // A batch axis on either side.
    int64_t lb = lhs.isSplit() ? batchOf(lr, lhs.dim) : -1;
    int64_t rb = rhs.isSplit() ? batchOf(rr, rhs.dim) : -1;
    if (lb >= 0 || rb >= 0) {
      int64_t dim = lb >= 0 ? lb : rb;
      int64_t blocks = lb >= 0 ? lhs.blocks : rhs.blocks;
      int64_t ranks[2] = {lr, rr};
      for (auto [i, rank] : llvm::enumerate(ranks)) {
        int64_t own = dim - (res - rank);
        Value operand = op->getOperand(i);
        rule.operands[i] =
            own < 0 || tensorType(operand).getDimSize(own) == 1
                ? TensorSplit::replicated()
                : TensorSplit::along(own, blocks);
        if (operands[i].isSplit() && operands[i] != rule.operands[i]) {
          rule.reason = "its operands are split along different axes";
          return failure();
        }
      }
      rule.results = {TensorSplit::along(dim, blocks)};
      return success();
    }
    if (lhs.isSplit() && rhs.isSplit()) {
      rule.reason = "both operands are split along non-contracted axes";
      return failure();
    }
    if (lhs.isSplit()) // M
      rule.results = {TensorSplit::along(res - 2, lhs.blocks)};
    else if (rhs.isSplit()) // N
      rule.results = {TensorSplit::along(res - 1, rhs.blocks)};
    else
      rule.results = {TensorSplit::replicated()};
    return success();
  }
};

/// Gemm (2-D, optional bias c): as matmul without batch axes; a bias
/// cannot be added to a partial sum (it would be added on every rank).
struct GemmRule : ShardingRuleOpInterface::ExternalModel<GemmRule, GemmOp> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    auto gemm = cast<GemmOp>(op);
    TensorSplit a = operands[0], b = operands[1];
    if (reachedByPartial(operands, rule))
      return failure();
    if (gemm.getC() && operands[2].isSplit()) {
      rule.reason = "its bias is split";
      return failure();
    }
    int64_t aK = gemm.getTransposeA() ? 0 : 1;
    int64_t bK = gemm.getTransposeB() ? 1 : 0;
    rule.operands.assign(operands.begin(), operands.end());
    if ((a.isSplit() && a.dim == aK) || (b.isSplit() && b.dim == bK)) {
      TensorSplit k = a.isSplit() ? a : b;
      rule.operands[0] = TensorSplit::along(aK);
      rule.operands[1] = TensorSplit::along(bK);
      if (k.blocks != 1 || (a.isSplit() && a != rule.operands[0]) ||
          (b.isSplit() && b != rule.operands[1])) {
        rule.reason = "its operands are split along different axes";
        return failure();
      }
      if (gemm.getC()) {
        rule.reason = "it adds its bias to a partial sum";
        return failure();
      }
      rule.results = {TensorSplit::partialSum()};
      return success();
    }
    if (a.isSplit() && b.isSplit()) {
      rule.reason = "both operands are split along non-contracted axes";
      return failure();
    }
    TensorSplit result = a.isSplit() ? TensorSplit::along(0, a.blocks)
                         : b.isSplit() ? TensorSplit::along(1, b.blocks)
                                       : TensorSplit::replicated();
    rule.results = {result};
    // The bias broadcasts against the result: split alike where it is not
    // broadcast along the split axis.
    if (Value c = gemm.getC(); c && result.isSplit()) {
      auto type = tensorType(c);
      int64_t dim = result.dim - (2 - type.getRank());
      if (dim >= 0 && type.getDimSize(dim) != 1)
        rule.operands[2] = TensorSplit::along(dim, result.blocks);
    }
    return success();
  }
};

/// Dropout draws a mask per element: it runs on pieces as on the whole
/// (which masks each rank draws is the runtime's business).
struct DropoutRule
    : ShardingRuleOpInterface::ExternalModel<DropoutRule, DropoutOp> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    return independentRule(
        op, operands, [](int64_t) { return false; }, "drops", rule);
  }
};

/// Broadcasting to more leading axes keeps a split of a non-unit axis.
struct BroadcastToRule
    : ShardingRuleOpInterface::ExternalModel<BroadcastToRule, BroadcastToOp> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    auto in = tensorType(op->getOperand(0));
    auto out = tensorType(op->getResult(0));
    return passSplit(
        operands,
        [&](unsigned, int64_t dim) {
          int64_t to = dim + out.getRank() - in.getRank();
          return in.getDimSize(dim) == out.getDimSize(to) ? to : -1;
        },
        rule);
  }
};

/// Reductions over other axes keep the split (shifted when the reduced
/// axes are dropped); a sum over the split axis is a partial sum.
template <typename Op>
struct ReduceRule : ShardingRuleOpInterface::ExternalModel<ReduceRule<Op>, Op> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    auto reduce = cast<Op>(op);
    ArrayRef<int64_t> axes = reduce.getAxes();
    TensorSplit split = operands[0];
    rule.operands.assign(operands.begin(), operands.end());
    if (reachedByPartial(operands, rule))
      return failure();
    if (!split.isSplit()) {
      rule.results = {split};
      return success();
    }
    if (llvm::is_contained(axes, split.dim)) {
      if constexpr (std::is_same_v<Op, ReduceSumOp>) {
        rule.results = {TensorSplit::partialSum()};
        return success();
      }
      rule.reason = "it reduces along its split axis";
      return failure();
    }
    int64_t dim = split.dim;
    if (!reduce.getKeepdims())
      dim -= llvm::count_if(axes, [&](int64_t a) { return a < split.dim; });
    rule.results = {TensorSplit::along(dim, split.blocks)};
    return success();
  }
};

/// A lookup in a table. Split along the looked-up axis (the
/// vocabulary-parallel embedding, Megatron's VocabParallelEmbedding), each
/// rank looks up the indices that fall in its rows and zeros the others: a
/// partial sum, which the all-reduce over tp completes (Megatron's g), and
/// whose derivative gives each rank its own rows' gradient. Split along
/// another axis, each rank looks up its piece of every row.
struct GatherRule : ShardingRuleOpInterface::ExternalModel<GatherRule, GatherOp> {
  static int64_t lookupAxis(GatherOp gather) {
    int64_t axis = gather.getAxis();
    return axis < 0 ? axis + tensorType(gather.getData()).getRank() : axis;
  }
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    auto gather = cast<GatherOp>(op);
    if (reachedByPartial(operands, rule))
      return failure();
    TensorSplit data = operands[0];
    if (!operands[1].isReplicated()) {
      rule.reason = "its indices are split";
      return failure();
    }
    rule.operands.assign(operands.begin(), operands.end());
    int64_t axis = lookupAxis(gather);
    if (!data.isSplit()) {
      rule.results = {TensorSplit::replicated()};
      return success();
    }
    if (data.dim == axis) {
      if (data.blocks != 1) {
        rule.reason = "it looks up rows of a blocked split";
        return failure();
      }
      rule.results = {TensorSplit::partialSum()};
      rule.rewrite = true;
      return success();
    }
    int64_t indexRank = tensorType(gather.getIndices()).getRank();
    rule.results = {TensorSplit::along(
        data.dim < axis ? data.dim : data.dim + indexRank - 1, data.blocks)};
    return success();
  }

  FailureOr<SmallVector<Value>> buildOnPieces(Operation *op, OpBuilder &b,
                                              ArrayRef<TensorSplit>, int64_t ranks,
                                              StringRef grid,
                                              int16_t gridAxis) const {
    auto gather = cast<GatherOp>(op);
    b.setInsertionPoint(op);
    OpChain c(b, op->getLoc());
    int64_t axis = lookupAxis(gather);
    auto dataType = tensorType(gather.getData());
    Value ids = gather.getIndices();
    auto idType = tensorType(ids);
    Type idElement = idType.getElementType();
    int64_t rows = dataType.getDimSize(axis);
    int64_t whole = wholeExtent(op, rows, ranks);
    recordIndexRange(ids, -whole, whole, std::nullopt);
    // ONNX counts a negative index from the end of the whole table.
    Value zero = c.scalar(idElement, 0);
    ids = c.where(c.compare(ComparePredicate::lt, ids, zero),
                  c.add(ids, c.scalar(idElement, whole)), ids);
    Value first = TpOffsetOp::create(b, op->getLoc(),
                                     RankedTensorType::get({}, idElement),
                                     grid, gridAxis, rows);
    Value local = c.sub(ids, first);
    // Rows below this rank's move past its end: one comparison finds both.
    Value end = c.scalar(idElement, rows);
    local = c.where(c.compare(ComparePredicate::lt, local, zero), end, local);
    Value outside = c.compare(ComparePredicate::ge, local, end);
    Value looked = c.infer<GatherOp>(
        {gather.getData(), c.where(outside, zero, local)},
        {c.attr("axis", b.getI64IntegerAttr(axis))});
    // The mask broadcast against the result: data[:axis] + indices + ...
    SmallVector<int64_t> maskShape(axis, 1);
    llvm::append_range(maskShape, idType.getShape());
    maskShape.append(dataType.getRank() - axis - 1, 1);
    Value mask = c.reshape(outside, maskShape);
    return SmallVector<Value>{c.where(mask, c.scalarLike(looked, 0.0), looked)};
  }
};

/// Softmax cross-entropy of logits split along the class axis (the
/// vocabulary-parallel cross-entropy, Megatron's
/// vocab_parallel_cross_entropy): the logits are never gathered; each rank
/// reduces its piece of every row to its maximum, its sum of exponentials
/// and its target logit (zero where the label is another rank's), and three
/// all-reduces over tp of one value per row complete them. The maximum only
/// shifts the exponentials (the loss does not depend on it), so no
/// gradient flows through it; the sum's and the target's all-reduces are
/// sums whose derivative is the identity, so each rank's gradient of its
/// logits, softmax minus one-hot, is local.
struct SoftmaxCrossEntropyRule
    : ShardingRuleOpInterface::ExternalModel<SoftmaxCrossEntropyRule,
                                             SoftmaxCrossEntropyOp> {
  LogicalResult getShardingRule(Operation *op, ArrayRef<TensorSplit> operands,
                                int64_t, ShardingRule &rule) const {
    if (reachedByPartial(operands, rule))
      return failure();
    if (llvm::any_of(operands.drop_front(),
                     [](TensorSplit s) { return !s.isReplicated(); })) {
      rule.reason = "its labels or class weights are split";
      return failure();
    }
    TensorSplit scores = operands[0];
    rule.operands.assign(operands.begin(), operands.end());
    if (!scores.isSplit()) {
      rule.results.assign(2, TensorSplit::replicated());
      return success();
    }
    if (scores.dim != 1 || scores.blocks != 1) {
      rule.reason = "its scores are split along another axis than the classes";
      return failure();
    }
    rule.results = {TensorSplit::replicated(), TensorSplit::along(1)};
    rule.rewrite = true;
    return success();
  }

  FailureOr<SmallVector<Value>> buildOnPieces(Operation *op, OpBuilder &b,
                                              ArrayRef<TensorSplit>,
                                              int64_t ranks, StringRef grid,
                                              int16_t gridAxis) const {
    auto loss = cast<SoftmaxCrossEntropyOp>(op);
    b.setInsertionPoint(op);
    Operation *start = op->getPrevNode();
    Location loc = op->getLoc();
    OpChain c(b, loc);
    auto allReduce = [&](Value v, shard::ReductionKind kind) -> Value {
      return shard::AllReduceOp::create(b, loc, v.getType(), grid, {gridAxis},
                                        v, kind);
    };
    auto reduce = [&](auto tag, Value v, ArrayRef<int64_t> axes,
                      bool keepdims) {
      using Op = typename decltype(tag)::type;
      return c.infer<Op>({v}, {c.attr("axes", b.getDenseI64ArrayAttr(axes)),
                               c.attr("keepdims", b.getBoolAttr(keepdims))});
    };
    Value z = loss.getScores();
    auto zType = tensorType(z);
    int64_t rank = zType.getRank(), piece = zType.getDimSize(1);
    int64_t n = zType.getNumElements() / piece; // rows: N x d1 x ...
    int64_t classes = wholeExtent(op, piece, ranks);
    recordIndexRange(loss.getLabels(), 0, classes, loss.getIgnoreIndex());
    // Scores [N, C, d1, ...] (the classes on axis 1) as rows [N*d1*..., C].
    SmallVector<int64_t> toRows{0};
    for (int64_t a = 2; a < rank; ++a)
      toRows.push_back(a);
    toRows.push_back(1);
    if (rank > 2)
      z = c.reshape(c.transpose(z, toRows), {n, piece});
    Value labels = c.reshape(loss.getLabels(), {n, 1});
    Type idElement = tensorType(labels).getElementType();
    auto idsType = RankedTensorType::get({piece}, idElement);
    SmallVector<APInt> iota;
    for (int64_t k = 0; k < piece; ++k)
      iota.push_back(APInt(idElement.getIntOrFloatBitWidth(), k));
    Value first = TpOffsetOp::create(b, loc, RankedTensorType::get({}, idElement),
                                     grid, gridAxis, piece);
    // The classes of this rank's piece.
    Value ids = c.add(ConstantOp::create(b, loc,
                                         cast<ElementsAttr>(DenseElementsAttr::get(
                                             idsType, iota))),
                      first);
    // A padded vocabulary's logits past the last class enter no sum: -inf
    // (no gradient reaches them either).
    if (classes != piece * ranks)
      z = c.where(c.compare(ComparePredicate::lt, ids,
                            c.scalar(idElement, static_cast<double>(classes))),
                  z,
                  c.scalarLike(z, -std::numeric_limits<double>::infinity()));
    // Each row's maximum over the whole vocabulary, a constant shift.
    Value max = reduce(llvm::type_identity<ReduceMaxOp>(), z, {1}, true);
    max = StopGradientOp::create(b, loc,
                                 allReduce(max, shard::ReductionKind::Max));
    Value shifted = c.sub(z, max);
    Value sum = reduce(llvm::type_identity<ReduceSumOp>(), c.exp(shifted), {1},
                       true);
    Value lse = c.log(allReduce(sum, shard::ReductionKind::Sum)); // [N, 1]
    // The target's shifted logit: on the rank whose rows hold the label.
    Value hit = c.compare(ComparePredicate::eq, ids, labels); // [N, piece]
    Value target = reduce(llvm::type_identity<ReduceSumOp>(),
                          c.where(hit, shifted, c.scalarLike(shifted, 0.0)),
                          {1}, true);
    Value perRow = c.sub(lse, allReduce(target, shard::ReductionKind::Sum));
    // ignore_index rows count for nothing, as in the whole op.
    Value counted, ignored;
    if (std::optional<int64_t> ignore = loss.getIgnoreIndex()) {
      ignored = c.compare(ComparePredicate::eq, labels,
                          c.scalar(idElement, static_cast<double>(*ignore)));
      perRow = c.where(ignored, c.scalarLike(perRow, 0.0), perRow);
      counted = c.where(ignored, c.scalarLike(perRow, 0.0),
                        c.scalarLike(perRow, 1.0));
    }
    // Class weights stay whole on every rank: each row's is looked up by
    // its label (whole too), so the weighting needs no collective; the
    // weighted mean divides by the rows' weights, as the whole op does.
    if (Value weights = loss.getWeights()) {
      Value at = ignored ? c.where(ignored, c.scalar(idElement, 0), labels)
                         : labels;
      Value w = c.infer<GatherOp>({weights, at},
                                  {c.attr("axis", b.getI64IntegerAttr(0))});
      if (getElementTypeOrSelf(w) != getElementTypeOrSelf(perRow))
        w = c.convert(w, getElementTypeOrSelf(perRow));
      perRow = c.mul(perRow, w);
      counted = counted ? c.mul(counted, w) : w;
    }
    Value result;
    switch (loss.getReduction()) {
    case LossReduction::none:
      result = c.reshape(perRow, tensorType(loss.getLabels()).getShape());
      break;
    case LossReduction::sum:
      result = reduce(llvm::type_identity<ReduceSumOp>(), perRow, {0, 1}, false);
      break;
    case LossReduction::mean: {
      Value total =
          reduce(llvm::type_identity<ReduceSumOp>(), perRow, {0, 1}, false);
      Value count = counted ? reduce(llvm::type_identity<ReduceSumOp>(), counted,
                                     {0, 1}, false)
                            : c.scalarLike(perRow, static_cast<double>(n));
      result = c.div(total, count);
      break;
    }
    }
    Value logProb;
    if (!loss.getLogProb().use_empty()) {
      // Back from rows to the scores' layout.
      logProb = c.sub(shifted, lse);
      if (rank > 2) {
        SmallVector<int64_t> rowsShape{zType.getDimSize(0)};
        for (int64_t a : ArrayRef<int64_t>(toRows).drop_front())
          rowsShape.push_back(zType.getDimSize(a));
        SmallVector<int64_t> back(rank);
        for (auto [i, a] : llvm::enumerate(toRows))
          back[a] = i;
        logProb = c.transpose(c.reshape(logProb, rowsShape), back);
      }
    }
    // Under a 16-bit precision each row computes in f32, as the whole op's
    // kernel does: every float op built here (before `op`) is marked so.
    for (Operation *built = start ? start->getNextNode() : &op->getBlock()->front();
         built != op; built = built->getNextNode())
      if (!isa<ConstantOp>(built) &&
          llvm::any_of(built->getResultTypes(), [](Type type) {
            return isa<FloatType>(getElementTypeOrSelf(type));
          }))
        built->setAttr(DsDialect::kComputeF32AttrName, b.getUnitAttr());
    return SmallVector<Value>{result, logProb};
  }
};

template <typename... Ops> void attachElementwise(MLIRContext &context) {
  (Ops::template attachInterface<ElementwiseRule<Ops>>(context), ...);
}

} // namespace

void dsopt::ds::attachShardingRules(MLIRContext &context) {
  attachElementwise<SqrtOp, ReciprocalOp, ExpOp, LogOp, TanhOp, ErfOp,
                    SigmoidOp, NegOp, ReluOp, LeakyReluOp, GeluOp, SoftplusOp,
                    EluOp, CeluOp, SinOp, CosOp, FloorOp, CeilOp, RoundOp,
                    NotOp, AddOp, SubOp, MulOp, DivOp, PowOp, ModOp,
                    CompareOp, WhereOp, CastOp, TpCopyOp>(context);
  SoftmaxOp::attachInterface<SoftmaxRule<SoftmaxOp>>(context);
  LogSoftmaxOp::attachInterface<SoftmaxRule<LogSoftmaxOp>>(context);
  LayerNormOp::attachInterface<LayerNormRule>(context);
  TransposeOp::attachInterface<TransposeRule>(context);
  ReshapeOp::attachInterface<ReshapeRule>(context);
  SplitOp::attachInterface<SplitRule>(context);
  ConcatOp::attachInterface<ConcatRule>(context);
  SliceOp::attachInterface<SliceRule>(context);
  MatMulOp::attachInterface<MatMulRule>(context);
  GemmOp::attachInterface<GemmRule>(context);
  DropoutOp::attachInterface<DropoutRule>(context);
  BroadcastToOp::attachInterface<BroadcastToRule>(context);
  ReduceSumOp::attachInterface<ReduceRule<ReduceSumOp>>(context);
  ReduceMeanOp::attachInterface<ReduceRule<ReduceMeanOp>>(context);
  ReduceMaxOp::attachInterface<ReduceRule<ReduceMaxOp>>(context);
  ReduceProdOp::attachInterface<ReduceRule<ReduceProdOp>>(context);
  GatherOp::attachInterface<GatherRule>(context);
  SoftmaxCrossEntropyOp::attachInterface<SoftmaxCrossEntropyRule>(context);
}
