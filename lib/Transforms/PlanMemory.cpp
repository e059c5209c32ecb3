//===- PlanMemory.cpp - static memory plan of a ds function ---------------===//
//
// Liveness over the straight-line op order, buffers merged through views and
// in-place kernels, then offsets by greedy best fit: buffers sorted by size
// (largest first), each placed at the lowest offset that overlaps no placed
// buffer live at the same time. Intervals are inclusive: an op's operands
// are still live when it writes its results, so a result never lands on an
// operand unless the op is marked in-place for it. An op whose kernel needs
// scratch memory (KernelOpInterface::getWorkspaceBytes) gets a buffer live
// at that op alone (ds.workspace), freed with the op's dying buffers.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"
#include "dsopt/Transforms/ArgAttrs.h"
#include "dsopt/Transforms/HostMemory.h"
#include "dsopt/Transforms/WriteBehind.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/MathExtras.h"

#include <vector>

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
  /// Persistent buffers lie in their argument's space (ds.space); every
  /// other buffer in the space its op writes (ds::getResultSpace).
  ds::MemorySpace space = ds::MemorySpace::device;
  /// The offset's alignment, when above the pass's: a host buffer that a
  /// file transfer reads or writes starts on a file block (kFileBlockBytes).
  int64_t align = 0;
  /// The buffer of the parameter buffer pool it is (kParamBufferAttrName),
  /// or -1: its offset is that buffer's, fixed.
  int64_t poolBuffer = -1;
};

/// The file space's block: file slots start and end on it, and so do the
/// host buffers file transfers read and write, so that direct I/O
/// (O_DIRECT, dsrt::kDirectAlignment) moves whole tensors straight between
/// the host arena and the file, with no bounce buffer but for a tensor's
/// last block when its size is not a multiple of the block.
constexpr int64_t kFileBlockBytes = 4096;

/// The persistent state of a module: one slot per parameter or state name,
/// shared by every function that takes it.
struct PersistentLayout {
  llvm::StringMap<std::pair<int64_t, int64_t>> slots; // key -> offset, size
  int64_t bytes = 0; // in device memory
  /// The keys placed in another space (their offsets are in its arena) and
  /// the persistent bytes of the pinned-host and file-backed arenas.
  llvm::StringMap<ds::MemorySpace> spaces;
  int64_t hostBytes = 0, fileBytes = 0;
  /// The parameter buffer pool in the host arena (offload_param nvme): its
  /// first buffer's offset, and each buffer's bytes (0: no pool).
  int64_t poolOffset = 0, poolBufferBytes = 0;

  ds::MemorySpace spaceOf(StringRef key) const {
    auto it = spaces.find(key);
    return it == spaces.end() ? ds::MemorySpace::device : it->second;
  }
};

/// The memory space of a persistent argument's buffer (ds.space).
ds::MemorySpace argumentSpace(func::FuncOp function, unsigned arg) {
  if (auto space = function.getArgAttrOfType<ds::MemorySpaceAttr>(
          arg, ds::DsDialect::kSpaceAttrName))
    return space.getValue();
  return ds::MemorySpace::device;
}

/// The key of a persistent argument, or "" for a transient one (an input).
std::string persistentKey(func::FuncOp function, unsigned arg) {
  if (auto param = function.getArgAttrOfType<ds::ParamAttr>(
          arg, ds::DsDialect::kParamAttrName))
    return "param:" + param.getName().str();
  if (auto state = function.getArgAttrOfType<ds::StateAttr>(
          arg, ds::DsDialect::kStateAttrName))
    return "state:" + ds::getDisplayName(state);
  return "";
}

/// An argument of a pipeline stage's function that the runtime binds to a
/// slot of the rank's buffer pools (what the stage received or stashed):
/// it has no buffer in the function's plan, and nothing writes over it.
bool isBoundArgument(func::FuncOp function, unsigned arg) {
  if (!function->hasAttr(ds::DsDialect::kPipelinePartAttrName))
    return false;
  // Every role an argument may have is bound (recv, stash, wstash).
  return ds::getArgumentRole(function, arg).has_value();
}

/// Whether result `r` of `function`, `value`, is computed into memory the
/// runtime binds: what a pipeline stage sends or stashes (results with a
/// ds.role: send, stash, wstash), computed by a kernel of its own (not a
/// view, a constant, an argument or an asynchronous op), and named by no
/// earlier result.
bool isBoundOutput(func::FuncOp function, unsigned r, Value value) {
  if (!ds::getResultRole(function, r))
    return false;
  Operation *def = value.getDefiningOp();
  auto kernel = dyn_cast_or_null<ds::KernelOpInterface>(def);
  if (!kernel || kernel.getAliasedOperand() ||
      def->hasTrait<OpTrait::ConstantLike>() ||
      isa<ds::AsyncOpInterface>(def))
    return false;
  Operation *terminator = function.getBody().front().getTerminator();
  for (unsigned earlier = 0; earlier < r; ++earlier)
    if (terminator->getOperand(earlier) == value)
      return false;
  return true;
}

/// Owns the buffers of one function and the value -> buffer mapping.
class Planner {
public:
  Planner(func::FuncOp function, int64_t alignment, bool inPlace,
          const PersistentLayout &layout)
      : function(function), alignment(alignment), allowInPlace(inPlace),
        layout(layout) {}

  LogicalResult run();

private:
  int newBuffer(Value value, int64_t start, bool persistent);
  int64_t lastUse(Value value) const;
  /// Aligns the host end of a transfer to or from the file space to a file
  /// block (kFileBlockBytes).
  void alignFileTransfer(Operation *op);
  /// The last use of `value` or of any view of it.
  int64_t lastUseThroughViews(Value value) const;
  /// The first use of `value` or of any view of it (endIndex if none).
  int64_t firstUseThroughViews(Value value) const;
  bool tryTie(Operation *op, unsigned resultIndex, int64_t at);
  Value boundInPlaceRoot(Value result) const;
  /// Whether an asynchronous op reads `value` or a view of it.
  bool readAsynchronously(Value value) const;
  LogicalResult assignOffsets();

  func::FuncOp function;
  int64_t alignment;
  bool allowInPlace;
  const PersistentLayout &layout;
  Block *body = nullptr;
  int64_t endIndex = 0; // the terminator's index
  llvm::DenseMap<Operation *, int64_t> index;
  llvm::DenseMap<Value, int> bufferOf; // absent: static storage (constants)
  SmallVector<Buffer> buffers;
  /// Results that are the new value of a persistent argument (ds.updates).
  llvm::DenseMap<Value, unsigned> tiedArg;
  /// Results computed into memory the runtime binds, each with its slot:
  /// the bound outputs (isBoundOutput) and the values they overwrite there
  /// in place (boundInPlaceRoot). The slot is k for the function's k-th
  /// output with a ds.role, as dsrt::bound_output numbers them; the plan
  /// records it on the op (ds.bound_slots) and code generation takes it
  /// from there.
  llvm::DenseMap<Value, int64_t> boundSlot;
  /// The workspace buffer of each op whose kernel needs one.
  llvm::DenseMap<Operation *, int> workspaceOf;
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

void Planner::alignFileTransfer(Operation *op) {
  auto transfer = dyn_cast<ds::TransferOp>(op);
  if (!transfer || (transfer.getFrom() != ds::MemorySpace::file &&
                    transfer.getTo() != ds::MemorySpace::file))
    return;
  // The host end: the value read (host to file) or the result (file to
  // host).
  Value host = transfer.getFrom() == ds::MemorySpace::host
                   ? Value(transfer.getInput())
                   : transfer->getResult(0);
  auto it = bufferOf.find(host);
  if (it != bufferOf.end() && !buffers[it->second].persistent)
    buffers[it->second].align = std::max(alignment, kFileBlockBytes);
}

int64_t Planner::lastUse(Value value) const {
  int64_t last = -1;
  for (Operation *user : value.getUsers())
    last = std::max(last, index.lookup(user));
  return last;
}

int64_t Planner::lastUseThroughViews(Value value) const {
  int64_t last = -1;
  for (Operation *user : value.getUsers()) {
    last = std::max(last, index.lookup(user));
    auto kernel = dyn_cast<ds::KernelOpInterface>(user);
    if (!kernel || user == body->getTerminator())
      continue;
    if (std::optional<unsigned> aliased = kernel.getAliasedOperand();
        aliased && user->getOperand(*aliased) == value)
      last = std::max(last, lastUseThroughViews(user->getResult(0)));
  }
  return last;
}

int64_t Planner::firstUseThroughViews(Value value) const {
  int64_t first = endIndex;
  for (Operation *user : value.getUsers()) {
    auto kernel = dyn_cast<ds::KernelOpInterface>(user);
    std::optional<unsigned> aliased =
        kernel && user != body->getTerminator() ? kernel.getAliasedOperand()
                                                : std::nullopt;
    if (aliased && user->getOperand(*aliased) == value)
      first = std::min(first, firstUseThroughViews(user->getResult(0)));
    else
      first = std::min(first, index.lookup(user));
  }
  return first;
}

/// Places result `resultIndex` of `op` straight into the buffer of the
/// persistent argument it updates, when that argument's old value is no
/// longer read after `op` (or is read by `op` itself, in place).
bool Planner::tryTie(Operation *op, unsigned resultIndex, int64_t at) {
  Value result = op->getResult(resultIndex);
  auto it = tiedArg.find(result);
  if (it == tiedArg.end())
    return false;
  BlockArgument arg = body->getArgument(it->second);
  int argBuffer = bufferOf.lookup(arg);
  if (!buffers[argBuffer].persistent ||
      buffers[argBuffer].space != ds::getResultSpace(op))
    return false;
  int64_t last = lastUseThroughViews(arg);
  if (last > at)
    return false;
  if (last == at) {
    auto kernel = cast<ds::KernelOpInterface>(op);
    std::optional<unsigned> inPlace = kernel.getInPlaceOperand(resultIndex);
    if (!inPlace || op->getOperand(*inPlace) != arg)
      return false;
    // The op may read the argument only through that operand.
    for (auto [i, operand] : llvm::enumerate(op->getOperands()))
      if (operand == arg && i != *inPlace)
        return false;
  }
  bufferOf[result] = argBuffer;
  tiedArg.erase(it);
  return true;
}

/// The value whose storage bound output `result` takes over in place, to
/// be computed into the output's slot as well (the stage then holds one
/// buffer for both instead of two), or null. Its op `op` writes `result`
/// over operand `getInPlaceOperand`, whose root through views is `root`
/// (ds::getInPlaceRoot). Sharing the slot is safe when
///  - `root` is a kernel's result in this function (not an argument, not a
///    constant, not an asynchronous op's result), of the same element type,
///    byte size and memory space as `result`, and the in-place operand has
///    `result`'s type: the kernel sees the same bytes as when it runs in
///    place over an arena buffer;
///  - nothing reads `root` after `op` (through views): `op` destroys it.
///    A second in-place reader of `root` (in a GELU's backward two
///    products both read the gradient of its output) therefore cannot
///    take it: only the last reader may, and each root goes into one slot;
///  - `op` reads `root` only through the in-place operand: another operand
///    viewing it would read bytes `op` is overwriting;
///  - no asynchronous op reads `root` (through views): a collective reads
///    its operands until the first use of its results, which may come
///    after `op`, and no wait orders it before a write into a slot (the
///    code generator orders kernels after pending collectives by arena
///    ranges, and a slot has none);
///  - `root` is not bound already (an output of its own, or the root of
///    another output).
Value Planner::boundInPlaceRoot(Value result) const {
  auto opResult = cast<OpResult>(result);
  Operation *op = opResult.getOwner();
  Value root = ds::getInPlaceRoot(op, opResult.getResultNumber());
  if (!root || boundSlot.contains(root))
    return {};
  unsigned inPlace =
      *cast<ds::KernelOpInterface>(op).getInPlaceOperand(opResult.getResultNumber());
  auto rootType = cast<ShapedType>(root.getType());
  auto resultType = cast<ShapedType>(result.getType());
  if (op->getOperand(inPlace).getType() != resultType ||
      rootType.getElementType() != resultType.getElementType() ||
      ds::getByteSize(rootType) != ds::getByteSize(resultType))
    return {};
  Operation *def = root.getDefiningOp();
  if (isa<ds::AsyncOpInterface>(def) || def->getBlock() != body ||
      ds::getResultSpace(def) != ds::getResultSpace(op) ||
      lastUseThroughViews(root) != index.lookup(op))
    return {};
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    if (i != inPlace && ds::getViewSource(operand) == root)
      return {};
  }
  if (readAsynchronously(root))
    return {};
  return root;
}

bool Planner::readAsynchronously(Value value) const {
  for (Operation *user : value.getUsers()) {
    if (user == body->getTerminator())
      continue;
    if (isa<ds::AsyncOpInterface>(user))
      return true;
    auto kernel = dyn_cast<ds::KernelOpInterface>(user);
    if (std::optional<unsigned> aliased =
            kernel ? kernel.getAliasedOperand() : std::nullopt;
        aliased && user->getOperand(*aliased) == value &&
        readAsynchronously(user->getResult(0)))
      return true;
  }
  return false;
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
    // A pipeline stage reads what it received or stashed where the runtime
    // keeps it (a slot of the rank's buffer pools), through no buffer of
    // its own.
    if (isBoundArgument(function, arg.getArgNumber()))
      continue;
    std::string key = persistentKey(function, arg.getArgNumber());
    int b = newBuffer(arg, /*start=*/0, /*persistent=*/!key.empty());
    if (!key.empty()) {
      buffers[b].offset = layout.slots.lookup(key).first;
      buffers[b].space = layout.spaceOf(key);
    }
  }

  // What a pipeline stage sends or stashes is computed straight into the
  // pool slot the runtime binds for it (no buffer here, and nothing
  // written over it): each such output computed by a kernel, once. Slot k
  // is the k-th output with a role.
  SmallVector<Value> boundOutputs;
  if (function->hasAttr(ds::DsDialect::kPipelinePartAttrName)) {
    int64_t k = 0;
    for (auto [r, result] :
         llvm::enumerate(body->getTerminator()->getOperands())) {
      if (!ds::getResultRole(function, r))
        continue;
      int64_t slot = k++;
      if (isBoundOutput(function, r, result)) {
        boundSlot[result] = slot;
        boundOutputs.push_back(result);
      }
    }
  }
  // A bound output its kernel computes in place over a value no later op
  // reads (the loss-and-gradient op's scores' gradient over the scores, a
  // middle stage's sent residual gradient over the sum before it): that
  // value is computed into the same slot, under the conditions of
  // boundInPlaceRoot. In output order, so that the plan is the same on
  // every build.
  if (allowInPlace)
    for (Value result : boundOutputs)
      if (Value root = boundInPlaceRoot(result))
        boundSlot[root] = boundSlot.lookup(result);

  // Each argument is updated by the first result that names it.
  llvm::DenseSet<unsigned> tiedArgs;
  Operation *terminator = body->getTerminator();
  for (auto [r, result] : llvm::enumerate(terminator->getOperands()))
    if (auto updates = function.getResultAttrOfType<IntegerAttr>(
            r, ds::DsDialect::kUpdatesAttrName)) {
      unsigned arg = updates.getInt();
      if (arg < body->getNumArguments() &&
          argumentSpace(function, arg) != ds::getValueSpace(result))
        return function.emitOpError()
               << "result " << r << " updates argument " << arg << " in "
               << ds::stringifyMemorySpace(argumentSpace(function, arg))
               << " memory, but it is computed in "
               << ds::stringifyMemorySpace(ds::getValueSpace(result))
               << " memory (copy the update there with a ds.transfer)";
      if (tiedArgs.insert(arg).second && !tiedArg.count(result) &&
          !isa<BlockArgument>(result))
        tiedArg[result] = arg;
    }

  for (Operation &op : body->without_terminator()) {
    int64_t at = index[&op];
    if (op.hasTrait<OpTrait::ConstantLike>())
      continue; // static storage
    auto kernel = dyn_cast<ds::KernelOpInterface>(&op);
    if (!kernel)
      return op.emitOpError() << "has no runtime kernel; it cannot be placed "
                                 "in memory";
    if (failed(ds::checkShardKernel(&op)))
      return failure();
    // Kernels run on the device, optimizer updates marked by ds-offload on
    // the host, and each reads only the memory where it runs: what lies in
    // another space is copied there first (ds.transfer), never read in
    // place.
    if (failed(ds::verifyExecutionSpace(&op)))
      return failure();
    ds::MemorySpace runsIn = ds::getOperandSpace(&op);
    for (auto [i, operand] : llvm::enumerate(op.getOperands())) {
      auto it = bufferOf.find(operand);
      if (it != bufferOf.end() && buffers[it->second].space != runsIn)
        return op.emitOpError()
               << "reads operand " << i << " from "
               << ds::stringifyMemorySpace(buffers[it->second].space)
               << " memory; "
               << (runsIn == ds::MemorySpace::device
                       ? "a kernel reads only device memory (copy it to the "
                         "device first)"
                       : "it reads only " +
                             ds::stringifyMemorySpace(runsIn).str() +
                             " memory (copy it there first)");
    }
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
      if (!buffer.persistent) {
        buffer.end = std::max(buffer.end, lastUse(op.getResult(0)));
        if (op.getResult(0).use_empty())
          buffer.end = std::max(buffer.end, at);
      }
      bufferOf[op.getResult(0)] = it->second;
      continue;
    }

    llvm::SmallDenseSet<int> reused;
    for (auto [r, result] : llvm::enumerate(op.getResults())) {
      if (boundSlot.contains(result))
        continue;
      if (tryTie(&op, r, at))
        continue;
      std::optional<unsigned> inPlace = kernel.getInPlaceOperand(r);
      if (inPlace && allowInPlace) {
        Value operand = op.getOperand(*inPlace);
        auto it = bufferOf.find(operand);
        // Only a dying arena buffer that no other value reads later, or a
        // persistent argument the op is allowed to overwrite (ds-zero's
        // in-place averaging of a gradient accumulator).
        bool dying = it != bufferOf.end() && !buffers[it->second].persistent &&
                     buffers[it->second].end == at;
        bool overwritable =
            it != bufferOf.end() && buffers[it->second].persistent &&
            op.hasAttr(ds::DsDialect::kOverwritesArgAttrName) &&
            isa<BlockArgument>(operand) &&
            lastUseThroughViews(operand) == at;
        if ((dying || overwritable) &&
            operand.getType() == result.getType() &&
            buffers[it->second].space == ds::getResultSpace(&op) &&
            reused.insert(it->second).second) {
          Buffer &buffer = buffers[it->second];
          if (dying)
            buffer.end = std::max(at, lastUse(result));
          bufferOf[result] = it->second;
          continue;
        }
      }
      int b = newBuffer(result, at, /*persistent=*/false);
      buffers[b].space = ds::getResultSpace(&op);
    }
    alignFileTransfer(&op);
    if (auto pool = op.getAttrOfType<IntegerAttr>(kParamBufferAttrName)) {
      auto it = bufferOf.find(op.getResult(0));
      if (it == bufferOf.end() || buffers[it->second].persistent ||
          buffers[it->second].space != ds::MemorySpace::host)
        return op.emitOpError()
               << "reads into a buffer of the parameter pool, but its result "
                  "is not a host buffer of its own";
      buffers[it->second].poolBuffer = pool.getInt();
    }

    // The kernel's scratch memory: a buffer live only while the op runs,
    // so the workspaces of different ops can share bytes.
    if (int64_t bytes = kernel.getWorkspaceBytes(); bytes > 0) {
      Buffer buffer;
      buffer.size = llvm::alignTo(bytes, alignment);
      buffer.start = buffer.end = at;
      buffers.push_back(buffer);
      workspaceOf[&op] = buffers.size() - 1;
    }

    // An asynchronous op (a collective) runs until the first op that uses
    // one of its results waits for it: its operands and results stay live
    // (and untouched) until then. A write-behind to the file space, whose
    // result nothing reads, is waited for before the second host update
    // after it (WriteBehind.h).
    if (isa<ds::AsyncOpInterface>(&op)) {
      int64_t wait = endIndex;
      for (Value result : op.getResults())
        wait = std::min(wait, firstUseThroughViews(result));
      if (isWriteBehind(&op))
        if (Operation *deadline = writeBehindDeadline(&op))
          wait = std::min(wait, index[deadline]);
      for (Value value : llvm::concat<Value>(op.getOperands(), op.getResults())) {
        auto it = bufferOf.find(value);
        if (it != bufferOf.end() && !buffers[it->second].persistent)
          buffers[it->second].end = std::max(buffers[it->second].end, wait);
      }
    }
  }

  // Function results must survive to the end.
  for (Value result : terminator->getOperands()) {
    auto it = bufferOf.find(result);
    if (it != bufferOf.end())
      buffers[it->second].end = endIndex;
  }

  if (failed(assignOffsets()))
    return failure();

  // Record the plan.
  Builder builder(function.getContext());
  // All at once (ArgAttrs.h).
  SmallVector<DictionaryAttr> argAttrs;
  function.getAllArgAttrs(argAttrs);
  for (BlockArgument arg : body->getArguments()) {
    auto it = bufferOf.find(arg);
    setArgAttrIn(argAttrs, arg.getArgNumber(), ds::DsDialect::kOffsetAttrName,
                 builder.getI64IntegerAttr(
                     it == bufferOf.end() ? -1 : buffers[it->second].offset));
  }
  function.setAllArgAttrs(argAttrs);
  // Buffers whose lifetime ends at an op are freed after it; the runtime
  // uses acquire/release to check that live buffers never overlap.
  llvm::DenseMap<int64_t, SmallVector<int64_t>> freedAt;
  // ds.frees names slots of the device arena only (the host arena's
  // transient buffers are placed by the same lifetimes).
  for (const Buffer &buffer : buffers)
    if (!buffer.persistent && buffer.end < endIndex &&
        buffer.space == ds::MemorySpace::device)
      freedAt[buffer.end].push_back(buffer.offset);
  // (A buffer may end at an op that runs nothing — a view, a constant —
  // e.g. an argument nobody reads; the code generator releases it there.)
  for (Operation &op : body->without_terminator()) {
    auto frees = freedAt.find(index[&op]);
    if (frees != freedAt.end()) {
      llvm::sort(frees->second);
      op.setAttr(ds::DsDialect::kFreesAttrName,
                 builder.getDenseI64ArrayAttr(frees->second));
    }
    if (op.hasTrait<OpTrait::ConstantLike>())
      continue;
    SmallVector<int64_t> offsets;
    for (Value result : op.getResults()) {
      auto it = bufferOf.find(result);
      offsets.push_back(it == bufferOf.end() ? -1
                                             : buffers[it->second].offset);
    }
    op.setAttr(ds::DsDialect::kBuffersAttrName,
               builder.getDenseI64ArrayAttr(offsets));
    // Which results lie in a slot the runtime binds, and whose: code
    // generation computes them there (dsrt::bound_output).
    SmallVector<int64_t> slots;
    for (Value result : op.getResults())
      slots.push_back(boundSlot.lookup_or(result, -1));
    if (llvm::any_of(slots, [](int64_t slot) { return slot >= 0; }))
      op.setAttr(ds::DsDialect::kBoundSlotsAttrName,
                 builder.getDenseI64ArrayAttr(slots));
    if (auto it = workspaceOf.find(&op); it != workspaceOf.end())
      op.setAttr(ds::DsDialect::kWorkspaceAttrName,
                 builder.getI64IntegerAttr(buffers[it->second].offset));
  }
  int64_t arena = layout.bytes, hostArena = layout.hostBytes,
          fileArena = layout.fileBytes;
  for (const Buffer &buffer : buffers) {
    int64_t &top = buffer.space == ds::MemorySpace::host   ? hostArena
                   : buffer.space == ds::MemorySpace::file ? fileArena
                                                           : arena;
    top = std::max(top, buffer.offset + buffer.size);
  }
  // The largest sum of simultaneously live buffers (the persistent state
  // of the whole module, plus this function's transient buffers), for
  // fragmentation.
  SmallVector<int64_t> live(endIndex + 2, 0);
  for (const Buffer &buffer : buffers) {
    if (buffer.persistent || buffer.space != ds::MemorySpace::device)
      continue;
    live[buffer.start] += buffer.size;
    live[buffer.end + 1] -= buffer.size;
  }
  int64_t current = 0, peakLive = 0;
  for (int64_t delta : live) {
    current += delta;
    peakLive = std::max(peakLive, current);
  }
  function->setAttr(ds::DsDialect::kMemoryPlanAttrName,
                    ds::MemoryPlanAttr::get(
                        function.getContext(), arena, layout.bytes,
                        layout.bytes + peakLive, alignment, hostArena,
                        layout.hostBytes, fileArena, layout.fileBytes));
  return success();
}

LogicalResult Planner::assignOffsets() {
  // Persistent state has its module-wide slot already; everything else
  // goes above it, in the arena of its own space.
  auto baseOf = [&](ds::MemorySpace space) {
    return space == ds::MemorySpace::host   ? layout.hostBytes
           : space == ds::MemorySpace::file ? layout.fileBytes
                                            : layout.bytes;
  };
  SmallVector<int> order;
  for (int b = 0, e = buffers.size(); b < e; ++b)
    if (!buffers[b].persistent && buffers[b].poolBuffer < 0)
      order.push_back(b);
  llvm::stable_sort(order, [&](int a, int b) {
    if (buffers[a].size != buffers[b].size)
      return buffers[a].size > buffers[b].size;
    return buffers[a].start < buffers[b].start;
  });

  // The placed buffers of each space, in order of offset. A buffer goes at
  // the lowest aligned offset where it overlaps no placed buffer of its
  // space that is live at the same time: walking them by offset, each such
  // buffer that begins below the candidate's end pushes the candidate past
  // its own end, and the first placed buffer (live or not) that begins at
  // or above the candidate's end ends the walk, as every later one begins
  // higher still.
  struct Placed {
    int64_t begin, end;         // [begin, end) bytes
    int64_t firstUse, lastUse;  // inclusive op indices
  };
  std::vector<Placed> placed[3]; // by ds::MemorySpace: device, host, file
  auto insertPlaced = [](std::vector<Placed> &others, Placed entry) {
    others.insert(llvm::upper_bound(others, entry,
                                    [](const Placed &a, const Placed &b) {
                                      return a.begin < b.begin;
                                    }),
                  entry);
  };
  // The parameter pool's reads first, each at its buffer's fixed offset;
  // ds-offload issued each after the previous read of its buffer was done
  // with, which this checks.
  std::vector<Placed> &host = placed[static_cast<unsigned>(ds::MemorySpace::host)];
  for (Buffer &buffer : buffers) {
    if (buffer.poolBuffer < 0)
      continue;
    buffer.offset =
        layout.poolOffset + buffer.poolBuffer * layout.poolBufferBytes;
    Placed entry{buffer.offset, buffer.offset + buffer.size, buffer.start,
                 buffer.end};
    for (const Placed &o : host)
      if (o.begin == entry.begin && o.firstUse <= entry.lastUse &&
          entry.firstUse <= o.lastUse)
        return function.emitOpError()
               << "reads two parameter shards into buffer "
               << buffer.poolBuffer
               << " of the parameter pool while both are in use (ops "
               << o.firstUse << "-" << o.lastUse << " and " << entry.firstUse
               << "-" << entry.lastUse << ")";
    if (buffer.size > 0)
      insertPlaced(host, entry);
  }
  for (int b : order) {
    Buffer &buffer = buffers[b];
    std::vector<Placed> &others = placed[static_cast<unsigned>(buffer.space)];
    const int64_t align = std::max(alignment, buffer.align);
    int64_t offset = llvm::alignTo(baseOf(buffer.space), align);
    for (const Placed &o : others) {
      if (o.begin >= offset + buffer.size)
        break;
      if (o.firstUse <= buffer.end && buffer.start <= o.lastUse)
        offset =
            std::max(offset, static_cast<int64_t>(llvm::alignTo(o.end, align)));
    }
    buffer.offset = offset;
    // A buffer of no bytes is in nobody's way.
    if (buffer.size > 0)
      insertPlaced(others, {offset, offset + buffer.size, buffer.start,
                            buffer.end});
  }
  return success();
}

struct PlanMemoryPass : dsopt::impl::DsPlanMemoryBase<PlanMemoryPass> {
  using DsPlanMemoryBase::DsPlanMemoryBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> functions;
    for (auto function : module.getOps<func::FuncOp>())
      if (!function.isDeclaration())
        functions.push_back(function);

    // One slot per persistent name, in order of first appearance.
    PersistentLayout layout;
    for (func::FuncOp function : functions)
      for (unsigned a = 0; a < function.getNumArguments(); ++a) {
        std::string key = persistentKey(function, a);
        if (key.empty())
          continue;
        auto type = dyn_cast<ShapedType>(function.getArgumentTypes()[a]);
        if (!type || !type.hasStaticShape()) {
          function.emitOpError() << "argument " << a
                                 << " is not a statically shaped tensor";
          return signalPassFailure();
        }
        ds::MemorySpace space = argumentSpace(function, a);
        // File slots are whole file blocks: every one starts on a block.
        int64_t size = llvm::alignTo(
            ds::getByteSize(type).value_or(0),
            space == ds::MemorySpace::file
                ? std::max<int64_t>(alignment, kFileBlockBytes)
                : static_cast<int64_t>(alignment));
        int64_t &spaceBytes = space == ds::MemorySpace::host ? layout.hostBytes
                              : space == ds::MemorySpace::file
                                  ? layout.fileBytes
                                  : layout.bytes;
        auto [it, inserted] = layout.slots.try_emplace(key, spaceBytes, size);
        if (inserted) {
          spaceBytes += size;
          if (space != ds::MemorySpace::device)
            layout.spaces[key] = space;
        } else if (it->second.second != size) {
          function.emitOpError()
              << "argument " << a << " ('" << key
              << "') has a different size than in another function";
          return signalPassFailure();
        } else if (layout.spaceOf(key) != space) {
          function.emitOpError()
              << "argument " << a << " ('" << key
              << "') is in another memory space than in another function";
          return signalPassFailure();
        }
      }

    // The parameter buffer pool (offload_param nvme, ds-offload's reads
    // into kParamBufferAttrName): above the host's persistent bytes, each
    // buffer as large as the largest shard read through the pool, on whole
    // file blocks (the reads are direct I/O).
    const int64_t fileBlock = std::max<int64_t>(alignment, kFileBlockBytes);
    int64_t poolBuffers = 0;
    module.walk([&](ds::TransferOp transfer) {
      auto pool = transfer->getAttrOfType<IntegerAttr>(kParamBufferAttrName);
      if (!pool)
        return;
      poolBuffers = std::max<int64_t>(poolBuffers, pool.getInt() + 1);
      layout.poolBufferBytes = std::max<int64_t>(
          layout.poolBufferBytes,
          llvm::alignTo(
              ds::getByteSize(cast<ShapedType>(transfer.getType())).value_or(0),
              fileBlock));
    });
    layout.poolOffset = llvm::alignTo(layout.hostBytes, fileBlock);

    int64_t arena = layout.bytes, peakLive = layout.bytes,
            hostArena = layout.hostBytes, fileArena = layout.fileBytes;
    for (func::FuncOp function : functions) {
      if (failed(Planner(function, alignment, inPlace, layout).run()))
        return signalPassFailure();
      auto plan = function->getAttrOfType<ds::MemoryPlanAttr>(
          ds::DsDialect::kMemoryPlanAttrName);
      arena = std::max(arena, plan.getArenaBytes());
      peakLive = std::max(peakLive, plan.getPeakLiveBytes());
      hostArena =
          std::max(hostArena, plan.getSpaceBytes(ds::MemorySpace::host));
      fileArena =
          std::max(fileArena, plan.getSpaceBytes(ds::MemorySpace::file));
    }
    // A pipeline rank's buffers between actions (ds.pipeline_rank's
    // pools) lie above every function's plan, at the top of the arena.
    if (auto rank = module->getAttrOfType<ds::PipelineRankAttr>(
            ds::DsDialect::kPipelineRankAttrName)) {
      FailureOr<ds::PipelineRankAttr> placed =
          planPipelineBuffers(module, rank, layout, arena);
      if (failed(placed))
        return signalPassFailure();
      module->setAttr(ds::DsDialect::kPipelineRankAttrName, *placed);
      int64_t top = *placed->getBuffersOffset() + *placed->getBuffersBytes();
      peakLive += top - arena;
      arena = top;
    }
    module->setAttr(ds::DsDialect::kMemoryPlanAttrName,
                    ds::MemoryPlanAttr::get(
                        &getContext(), arena, layout.bytes, peakLive,
                        alignment, hostArena, layout.hostBytes, fileArena,
                        layout.fileBytes));
    if (poolBuffers > 0) {
      Builder b(&getContext());
      module->setAttr(
          kParamBufferPoolAttrName,
          b.getDictionaryAttr(
              {b.getNamedAttr("buffers", b.getI64IntegerAttr(poolBuffers)),
               b.getNamedAttr("buffer_bytes",
                              b.getI64IntegerAttr(layout.poolBufferBytes)),
               b.getNamedAttr("offset",
                              b.getI64IntegerAttr(layout.poolOffset))}));
    }
  }

  /// The size of one slot of each pool (the aligned sizes of the values
  /// the runtime keeps in it, from the functions' signatures) and where
  /// the pools lie: from `base` up, in the order of ds.pipeline_rank.
  FailureOr<ds::PipelineRankAttr>
  planPipelineBuffers(ModuleOp module, ds::PipelineRankAttr rank,
                      const PersistentLayout &layout, int64_t base) {
    MLIRContext *context = module.getContext();
    auto aligned = [&](Type type) {
      return static_cast<int64_t>(llvm::alignTo(
          ds::getByteSize(cast<ShapedType>(type)).value_or(0), alignment));
    };
    // The bytes of a function's arguments or results of role `role`.
    auto bytesOf = [&](StringRef functionName, bool results,
                       ds::ValueRole role) -> int64_t {
      auto function = module.lookupSymbol<func::FuncOp>(functionName);
      if (!function)
        return 0;
      int64_t total = 0;
      unsigned count =
          results ? function.getNumResults() : function.getNumArguments();
      for (unsigned i = 0; i < count; ++i) {
        if ((results ? ds::getResultRole(function, i)
                     : ds::getArgumentRole(function, i)) == role)
          total += aligned(results ? function.getResultTypes()[i]
                                   : function.getArgumentTypes()[i]);
      }
      return total;
    };
    int64_t offset = llvm::alignTo(base, alignment);
    int64_t start = offset;
    SmallVector<ds::PipelinePoolAttr> pools;
    for (ds::PipelinePoolAttr pool : rank.getPools()) {
      ds::PipelinePoolKind kind = pool.getKind();
      int64_t stage = pool.getStage();
      int64_t slots = pool.getSlots();
      ds::PipelineRankStageAttr functions = rank.lookupStage(stage);
      StringRef forward, backward;
      if (functions) {
        forward = ds::PipelineRankStageAttr::nameOf(functions.getForward());
        backward =
            ds::PipelineRankStageAttr::nameOf(functions.getInputBackward());
      }
      int64_t slotBytes = 0;
      switch (kind) {
      case ds::PipelinePoolKind::stash:
        slotBytes = bytesOf(forward, true, ds::ValueRole::stash);
        break;
      case ds::PipelinePoolKind::act_in:
        slotBytes = bytesOf(forward, false, ds::ValueRole::recv);
        break;
      case ds::PipelinePoolKind::act_out:
        slotBytes = bytesOf(forward, true, ds::ValueRole::send);
        break;
      case ds::PipelinePoolKind::grad_in:
        slotBytes = bytesOf(backward, false, ds::ValueRole::recv);
        break;
      case ds::PipelinePoolKind::grad_out:
        slotBytes = bytesOf(backward, true, ds::ValueRole::send);
        break;
      case ds::PipelinePoolKind::wstash:
        slotBytes = bytesOf(backward, true, ds::ValueRole::wstash);
        break;
      case ds::PipelinePoolKind::tied:
        break;
      }
      if (slotBytes == 0 || slots == 0)
        continue;
      pools.push_back(ds::PipelinePoolAttr::get(context, kind, stage, slots,
                                                slotBytes, offset));
      offset += slots * slotBytes;
    }
    // One slot receiving every other sharer's copy of each shared
    // accumulator.
    int64_t tiedBytes = 0;
    for (ds::PipelineRankTiedAttr tied : rank.getTied()) {
      ds::StateAttr state = tied.getState();
      std::string key = "state:" + ds::getDisplayName(state);
      auto it = layout.slots.find(key);
      if (it == layout.slots.end()) {
        module.emitError() << "shared accumulator " << state
                           << " is not a state of the program";
        return failure();
      }
      int64_t sharers = tied.getRanks().size();
      tiedBytes += (sharers - 1) * it->second.second;
    }
    if (tiedBytes > 0) {
      pools.push_back(ds::PipelinePoolAttr::get(
          context, ds::PipelinePoolKind::tied, /*stage=*/-1, /*slots=*/1,
          tiedBytes, offset));
      offset += tiedBytes;
    }
    return ds::PipelineRankAttr::get(
        context, rank.getRank(), rank.getStages(), rank.getChunks(),
        rank.getMicrobatches(), rank.getDp(), rank.getSchedule(),
        rank.getVirtualStages(), rank.getActions(), pools, rank.getTied(),
        start, offset - start);
  }
};
} // namespace
