//===- PlanMemory.cpp - static memory plan of a ds function ---------------===//
//
// Liveness over the straight-line op order, buffers merged through views and
// in-place kernels, then offsets by greedy best fit: buffers sorted by size
// (largest first), each placed at the lowest offset that overlaps no placed
// buffer live at the same time. Intervals are inclusive: an op's operands
// are still live when it writes its results, so a result never lands on an
// operand unless the op is marked in-place for it.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/MathExtras.h"

namespace dsopt {
#define GEN_PASS_DEF_DSPLANMEMORY
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

struct Buffer {
  int64_t size = 0;
  int64_t start = 0, end = 0; // inclusive op indices
  bool persistent = false;
  int64_t offset = -1;
};

/// Owns the buffers of one function and the value -> buffer mapping.
class Planner {
public:
  Planner(func::FuncOp function, int64_t alignment, bool inPlace)
      : function(function), alignment(alignment), allowInPlace(inPlace) {}

  LogicalResult run();

private:
  int newBuffer(Value value, int64_t start, bool persistent);
  int64_t lastUse(Value value) const;
  void assignOffsets();

  func::FuncOp function;
  int64_t alignment;
  bool allowInPlace;
  Block *body = nullptr;
  int64_t endIndex = 0; // the terminator's index
  llvm::DenseMap<Operation *, int64_t> index;
  llvm::DenseMap<Value, int> bufferOf; // absent: static storage (constants)
  SmallVector<Buffer> buffers;
};

int Planner::newBuffer(Value value, int64_t start, bool persistent) {
  auto type = cast<ShapedType>(value.getType());
  Buffer buffer;
  buffer.size = llvm::alignTo(ds::getByteSize(type).value_or(0), alignment);
  buffer.start = start;
  buffer.end = persistent ? endIndex : std::max(start, lastUse(value));
  buffer.persistent = persistent;
  buffers.push_back(buffer);
  bufferOf[value] = buffers.size() - 1;
  return buffers.size() - 1;
}

int64_t Planner::lastUse(Value value) const {
  int64_t last = -1;
  for (Operation *user : value.getUsers())
    last = std::max(last, index.lookup(user));
  return last;
}

LogicalResult Planner::run() {
  if (!function.getBody().hasOneBlock())
    return function.emitOpError()
           << "memory planning needs a single-block function";
  body = &function.getBody().front();
  int64_t i = 0;
  for (Operation &op : *body)
    index[&op] = i++;
  endIndex = index[body->getTerminator()];

  for (BlockArgument arg : body->getArguments()) {
    if (!isa<RankedTensorType>(arg.getType()) ||
        !cast<ShapedType>(arg.getType()).hasStaticShape())
      return function.emitOpError()
             << "argument " << arg.getArgNumber()
             << " is not a statically shaped tensor";
    bool persistent = static_cast<bool>(function.getArgAttr(
        arg.getArgNumber(), ds::DsDialect::kParamAttrName));
    newBuffer(arg, /*start=*/0, persistent);
  }

  for (Operation &op : body->without_terminator()) {
    int64_t at = index[&op];
    if (op.hasTrait<OpTrait::ConstantLike>())
      continue; // static storage
    auto kernel = dyn_cast<ds::KernelOpInterface>(&op);
    if (!kernel)
      return op.emitOpError() << "has no runtime kernel; it cannot be placed "
                                 "in memory";
    for (Value result : op.getResults())
      if (!cast<ShapedType>(result.getType()).hasStaticShape())
        return op.emitOpError() << "has a result without a static shape";

    // A view shares its operand's storage, whatever that is.
    if (std::optional<unsigned> aliased = kernel.getAliasedOperand()) {
      Value source = op.getOperand(*aliased);
      auto it = bufferOf.find(source);
      if (it == bufferOf.end())
        continue; // a view of a constant is static storage too
      Buffer &buffer = buffers[it->second];
      buffer.end = std::max(buffer.end, lastUse(op.getResult(0)));
      if (op.getResult(0).use_empty())
        buffer.end = std::max(buffer.end, at);
      bufferOf[op.getResult(0)] = it->second;
      continue;
    }

    unsigned firstResult = 0;
    if (std::optional<unsigned> inPlace = kernel.getInPlaceOperand();
        inPlace && allowInPlace) {
      Value operand = op.getOperand(*inPlace);
      auto it = bufferOf.find(operand);
      // Only a dying arena buffer that no other value reads later.
      if (it != bufferOf.end() && !buffers[it->second].persistent &&
          buffers[it->second].end == at &&
          operand.getType() == op.getResult(0).getType()) {
        Buffer &buffer = buffers[it->second];
        buffer.end = std::max(at, lastUse(op.getResult(0)));
        bufferOf[op.getResult(0)] = it->second;
        firstResult = 1;
      }
    }
    for (Value result : op.getResults().drop_front(firstResult))
      newBuffer(result, at, /*persistent=*/false);
  }

  // Function results must survive to the end.
  for (Value result : body->getTerminator()->getOperands()) {
    auto it = bufferOf.find(result);
    if (it != bufferOf.end())
      buffers[it->second].end = endIndex;
  }

  assignOffsets();

  // Record the plan.
  Builder builder(function.getContext());
  for (BlockArgument arg : body->getArguments())
    function.setArgAttr(arg.getArgNumber(), ds::DsDialect::kOffsetAttrName,
                        builder.getI64IntegerAttr(
                            buffers[bufferOf[arg]].offset));
  // Buffers whose lifetime ends at an op are freed after it; the runtime
  // uses acquire/release to check that live buffers never overlap.
  llvm::DenseMap<int64_t, SmallVector<int64_t>> freedAt;
  for (const Buffer &buffer : buffers)
    if (!buffer.persistent && buffer.end < endIndex)
      freedAt[buffer.end].push_back(buffer.offset);
  for (Operation &op : body->without_terminator()) {
    if (op.hasTrait<OpTrait::ConstantLike>())
      continue;
    auto frees = freedAt.find(index[&op]);
    if (frees != freedAt.end()) {
      llvm::sort(frees->second);
      op.setAttr(ds::DsDialect::kFreesAttrName,
                 builder.getDenseI64ArrayAttr(frees->second));
    }
    SmallVector<int64_t> offsets;
    for (Value result : op.getResults()) {
      auto it = bufferOf.find(result);
      offsets.push_back(it == bufferOf.end() ? -1
                                             : buffers[it->second].offset);
    }
    op.setAttr(ds::DsDialect::kBuffersAttrName,
               builder.getDenseI64ArrayAttr(offsets));
  }
  int64_t arena = 0, persistent = 0;
  for (const Buffer &buffer : buffers) {
    arena = std::max(arena, buffer.offset + buffer.size);
    if (buffer.persistent)
      persistent = std::max(persistent, buffer.offset + buffer.size);
  }
  // The largest sum of simultaneously live buffers, for fragmentation.
  SmallVector<int64_t> live(endIndex + 2, 0);
  for (const Buffer &buffer : buffers) {
    live[buffer.start] += buffer.size;
    live[buffer.end + 1] -= buffer.size;
  }
  int64_t current = 0, peakLive = 0;
  for (int64_t delta : live) {
    current += delta;
    peakLive = std::max(peakLive, current);
  }
  function->setAttr(ds::DsDialect::kMemoryPlanAttrName,
                    ds::MemoryPlanAttr::get(function.getContext(), arena,
                                            persistent, peakLive, alignment));
  return success();
}

void Planner::assignOffsets() {
  // Persistent state first, packed in argument order at the bottom.
  int64_t base = 0;
  for (Buffer &buffer : buffers)
    if (buffer.persistent) {
      buffer.offset = base;
      base += buffer.size;
    }

  SmallVector<int> order;
  for (int b = 0, e = buffers.size(); b < e; ++b)
    if (!buffers[b].persistent)
      order.push_back(b);
  llvm::stable_sort(order, [&](int a, int b) {
    if (buffers[a].size != buffers[b].size)
      return buffers[a].size > buffers[b].size;
    return buffers[a].start < buffers[b].start;
  });

  SmallVector<int> placed;
  for (int b : order) {
    Buffer &buffer = buffers[b];
    SmallVector<std::pair<int64_t, int64_t>> busy; // [offset, offset + size)
    for (int other : placed) {
      const Buffer &o = buffers[other];
      if (o.start <= buffer.end && buffer.start <= o.end && o.size > 0)
        busy.emplace_back(o.offset, o.offset + o.size);
    }
    llvm::sort(busy);
    int64_t offset = base;
    for (auto [begin, end] : busy) {
      if (begin >= offset + buffer.size)
        break;
      offset = std::max(offset, end);
    }
    buffer.offset = offset;
    placed.push_back(b);
  }
}

struct PlanMemoryPass : dsopt::impl::DsPlanMemoryBase<PlanMemoryPass> {
  using DsPlanMemoryBase::DsPlanMemoryBase;
  void runOnOperation() override {
    if (getOperation().isDeclaration())
      return;
    if (failed(Planner(getOperation(), alignment, inPlace).run()))
      signalPassFailure();
  }
};
} // namespace
