//===- DsToEmitC.cpp - a planned ds function to an EmitC program ----------===//
//
// Builds the C++ program of a memory-planned `@main` as EmitC ops:
//
//   emitc.func @dsopt_run(dsrt::Program&)       one kernel call per op, on
//                                               tensor views of the arena
//   emitc.func @dsopt_describe(dsrt::ProgramInfo&)
//                                               the program's inputs,
//                                               parameters, outputs, memory
//                                               plan and op list
//   static constants                            emitc.global arrays
//
// Each op describes its kernel call through KernelOpInterface; this pass
// only knows how to pass tensors, scalars and arrays. The arena's buffers
// are acquired and released around the ops so the runtime can check that
// live buffers never overlap and measure the high-water mark.
//
// A model's identical layers are the same op sequence on other buffers. The
// code of every op is first emitted with its buffer offsets, op index and
// collective indices left out (its key); a run of ops whose key sequence
// repeats back to back becomes one block function, taking the offsets that
// differ between the repeats as an array, and each repeat a call to it. Long
// lists (the description's parameters, states and ops; a kernel's tensor
// list over every parameter) become static tables of dsrt/tables.h rows. The
// size of the program's code then follows the number of distinct layers, not
// the number of layers (docs/design.md, "Code generation").
//
//===----------------------------------------------------------------------===//

#include "dsopt/Conversion/Passes.h"
#include "dsopt/Conversion/PipelineMain.h"
#include "dsopt/Transforms/HostMemory.h"
#include "dsopt/Transforms/WriteBehind.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MathExtras.h"
#include <limits>
#include <map>

namespace dsopt {
#define GEN_PASS_DEF_DSLOWERTOEMITC
#include "dsopt/Conversion/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

/// Splat constants above this many elements live in zero-initialized static
/// storage filled at run time instead of a literal array in the source.
constexpr int64_t kSplatLiteralLimit = 256;

/// Lists of at least this many tensors, slots or copies are emitted as a
/// table and one call (dsrt/tables.h) rather than one statement per entry:
/// a step's ops over every parameter otherwise make one function grow with
/// the number of layers.
constexpr size_t kTableEntries = 16;

/// The name the runtime knows a persistent argument by (its parameter's or
/// state's), or "" for another argument.
std::string persistentName(func::FuncOp function, unsigned arg) {
  if (auto param = function.getArgAttrOfType<ds::ParamAttr>(
          arg, ds::DsDialect::kParamAttrName))
    return param.getName().str();
  if (auto state = function.getArgAttrOfType<ds::StateAttr>(
          arg, ds::DsDialect::kStateAttrName))
    return ds::getDisplayName(state);
  if (auto state = function.getArgAttrOfType<StringAttr>(
          arg, ds::DsDialect::kStateAttrName))
    return state.getValue().str();
  return "";
}

std::string cppString(StringRef text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c < 0x20 || c >= 0x7f) {
        // Octal escapes cannot run into following characters past 3 digits.
        char buffer[8];
        snprintf(buffer, sizeof(buffer), "\\%03o", c);
        out += buffer;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  return out + "\"";
}

std::string dtypeName(Type element) {
  if (element.isF32()) return "dsrt::DType::F32";
  if (element.isF16()) return "dsrt::DType::F16";
  if (element.isBF16()) return "dsrt::DType::BF16";
  if (element.isSignlessInteger(64)) return "dsrt::DType::I64";
  if (element.isSignlessInteger(32)) return "dsrt::DType::I32";
  return "dsrt::DType::Bool";
}

std::string shapeLiteral(ArrayRef<int64_t> shape) {
  return "{" + llvm::join(llvm::map_range(shape, [](int64_t d) {
           return std::to_string(d);
         }),
                          ", ") +
         "}";
}

/// A dsrt::TableShape initializer: `{rank, {dims...}}`.
std::string tableShape(RankedTensorType type) {
  return "{" + std::to_string(type.getRank()) + ", " +
         shapeLiteral(type.getShape()) + "}";
}

/// The runtime's dsrt::ValueRole of a pipeline stage value's role.
StringRef runtimeRole(ds::ValueRole role) {
  switch (role) {
  case ds::ValueRole::send: return "dsrt::ValueRole::Send";
  case ds::ValueRole::recv: return "dsrt::ValueRole::Recv";
  case ds::ValueRole::stash: return "dsrt::ValueRole::Stash";
  case ds::ValueRole::wstash: return "dsrt::ValueRole::WeightStash";
  }
  llvm_unreachable("unknown value role");
}

/// The runtime's dsrt::ValueRole of a state.
StringRef runtimeRole(ds::StateAttr state) {
  if (state.isAccumulator())
    return "dsrt::ValueRole::Accumulator";
  // ds-precision's fp32 master weights of a 16-bit working copy.
  return state.getRole() == "master" ? "dsrt::ValueRole::MasterWeights"
                                     : "dsrt::ValueRole::OptimizerState";
}

/// The runtime's name of a memory space (dsrt::Space).
StringRef runtimeSpace(ds::MemorySpace space) {
  switch (space) {
  case ds::MemorySpace::host: return "dsrt::Space::Host";
  case ds::MemorySpace::file: return "dsrt::Space::File";
  case ds::MemorySpace::device: break;
  }
  return "dsrt::Space::Device";
}

/// An argument of an emitted call: an SSA value, or an attribute printed in
/// place (a literal).
struct CallArg {
  CallArg(Value value) : value(value) {}
  CallArg(Attribute attr) : attr(attr) {}
  Value value;
  Attribute attr;
};

/// What the code of one op of a planned function does, worked out before any
/// of it is emitted.
struct PlannedOp {
  Operation *op = nullptr;
  /// Not a view or a constant, which run nothing.
  bool runsKernel = false;
  /// A kernel's index in the function's op list (dsrt::begin_op).
  int64_t opIndex = -1;
  /// The collectives issued before the op; the op issues the next one.
  int64_t collectivesBefore = 0;
  bool issuesCollective = false;
  /// Collectives whose buffers the op touches: it waits for them first.
  SmallVector<int64_t> waits;
  /// Fresh result slots (offset, aligned bytes), acquired before the kernel.
  SmallVector<std::pair<int64_t, int64_t>> acquires;
  /// Slots whose lifetime ends with the op, released after it.
  SmallVector<int64_t> releases;
  /// The same in the host space's arena (an offloaded step's host copies
  /// and host optimizer results; ds.frees names device slots only).
  SmallVector<std::pair<int64_t, int64_t>> hostAcquires;
  SmallVector<int64_t> hostReleases;
  /// The kernel's workspace (ds.workspace offset, bytes), if it needs one.
  std::optional<std::pair<int64_t, int64_t>> workspace;

  // Set when looking for repeats:
  /// The op's code with its buffer offsets, op index and collective indices
  /// left out, as a number: ops with equal keys emit equal code on the
  /// buffers they are given.
  unsigned key = 0;
  /// How many EmitC ops that code has.
  unsigned weight = 0;
  /// The offsets left out, in the order the code uses them.
  SmallVector<int64_t> offsets;
};

/// Ops [start, start + length * count) of a function: `count` back-to-back
/// repeats of the same key sequence.
struct Repeat {
  size_t start = 0, length = 0, count = 0;
  uint64_t saved = 0; // EmitC ops the repeats after the first one would emit
};

/// Emits EmitC for one planned function.
class ProgramBuilder {
public:
  ProgramBuilder(ModuleOp module, ArrayRef<func::FuncOp> functions)
      : module(module), functions(functions), context(module.getContext()),
        builder(context) {}

  /// A forward program (one function, @main), or a training program
  /// (@micro_step and @optimizer_step, in that order).
  LogicalResult build();

private:
  Type opaque(StringRef type) { return emitc::OpaqueType::get(context, type); }
  Type tensorPointer() {
    return emitc::PointerType::get(opaque("const dsrt::Tensor"));
  }
  Attribute literal(StringRef text) {
    return emitc::OpaqueAttr::get(context, text);
  }
  Value call(StringRef callee, Type result, ValueRange operands,
             ArrayRef<Attribute> args);
  void callVoid(StringRef callee, ValueRange operands,
                ArrayRef<Attribute> args);
  void callArgs(StringRef callee, ArrayRef<CallArg> args);
  Value view(Value arena, CallArg offset, RankedTensorType type);
  /// A view of `constant`'s bytes. On the cuda target they are a
  /// `__device__` array unless `onHost` (a constant the host reads: the
  /// describe function's parameter values), which keeps a host array.
  FailureOr<Value> constantView(ds::ConstantOp constant, bool onHost = false);
  void emitDescribe();
  void emitParams(Value info, llvm::StringSet<> &seen);
  void emitSpaces(Value info, ds::MemoryPlanAttr plan);
  /// Emits `rows` as a static const array of `rowType` before the describe
  /// function and a call `adder(info, array, count)`, then clears them.
  void flushTable(StringRef rowType, StringRef adder,
                  SmallVectorImpl<std::string> &rows, Value info);
  /// A static const array of `rows` placed before `before`, as a value.
  Value emitTable(Type rowType, ArrayRef<std::string> rows, Operation *before);
  /// Whether a list of `size` entries of the code being emitted becomes a
  /// table: long ones, where their numbers are literals.
  bool asTable(size_t size) const {
    return outlineRepeats && spelling == Spelling::Literal &&
           size >= kTableEntries;
  }
  /// A dsrt::ViewRow initializer for `value` when it lies in the arena.
  std::optional<std::string> viewRow(Value value);
  void emitShard(Value info, unsigned arg);
  void emitGrid(Value info);
  void emitFunctionInterface(Value info, func::FuncOp function);
  void emitTraining(Value info);
  void emitPipeline(Value info);
  bool isPipelined() const {
    return module->hasAttr(ds::DsDialect::kPipelineRankAttrName);
  }
  LogicalResult emitRun(func::FuncOp function, StringRef name);
  /// What each op of the function's body does (PlannedOp), in order.
  LogicalResult planOps(Block &body, ds::MemoryPlanAttr plan,
                        std::vector<PlannedOp> &ops);
  /// Emits the code of one planned op at the builder's insertion point, its
  /// integers spelled as `spelling` says.
  LogicalResult emitOp(const PlannedOp &planned);
  /// Sets each op's key, weight and offsets.
  LogicalResult keyOps(MutableArrayRef<PlannedOp> ops);
  /// Emits the block function of a repeat (or finds an equal one already
  /// emitted) and returns its name; `classOfSlot` maps each offset the
  /// block's code uses to its parameter.
  std::string emitBlock(ArrayRef<PlannedOp> body, ArrayRef<unsigned> classOfSlot,
                        unsigned classes, StringRef functionName,
                        const Repeat &repeat);
  /// The tensor view of `value` in the current part, made on first use.
  FailureOr<Value> viewOf(Value value);
  /// Starts an emitc.func at the end of the module taking dsrt::Program&
  /// and `extraArgs`, with the program's stream and arena made at its top.
  emitc::FuncOp startFunction(StringRef name, ArrayRef<Type> extraArgs = {});
  void startPart(StringRef name);
  // How emitOp spells an integer that differs between repeats (a buffer
  // offset, the index of memory the runtime binds), the op's index and a
  // collective's index (see Spelling).
  CallArg slotArg(int64_t offset);
  CallArg opIndexArg(const PlannedOp &planned);
  CallArg collectiveArg(const PlannedOp &planned, int64_t collective);
  void emitMain();
  bool isTraining() const { return functions.size() > 1; }
  /// The name of the generated kernel of `op`.
  FailureOr<std::string> emitFusedKernel(ds::FusedOp op);
  /// The function computing `op`: the C++ loop (cpu), or the `__global__`
  /// kernel (cuda), which `buildFusedLaunch` then launches.
  FailureOr<emitc::FuncOp> buildFusedKernel(ds::FusedOp op, StringRef name);
  FailureOr<emitc::FuncOp> buildFusedLoop(ds::FusedOp op, StringRef name);
  FailureOr<emitc::FuncOp> buildFusedCudaKernel(ds::FusedOp op,
                                                StringRef name);
  void buildFusedLaunch(ds::FusedOp op, emitc::FuncOp kernel, StringRef name);
  /// `static void name(dsrt::Stream&, const dsrt::Tensor&...)`: a fused
  /// op's function as the run function calls it (the op's inputs, then its
  /// result), with the builder in its body.
  emitc::FuncOp beginFusedHostFunction(ds::FusedOp op, StringRef name);
  /// `dsrt::elements<T>(tensor)`: the tensor's elements as a `T*`.
  Value elementsOf(Value tensor, Type element);
  /// The loads, scalar ops and store of one element of `op`: what is the
  /// same for every element of row `row` is emitted where the builder is,
  /// then `enterElement` moves the builder to the element's code and
  /// returns its (column, flat index). Index arithmetic is in `indexType`.
  /// With `lanes` > 1 the element is the first of `lanes` consecutive ones
  /// of one row: the inputs of the result's shape are read and the result
  /// written as vectors (dsrt::math::load_vector, store_vector) around an
  /// unrolled loop over the lanes. Without `row` (lanes > 1 only) the
  /// vector may span rows: each lane finds its row and column from its
  /// index, and what is the same for a row is read per lane.
  LogicalResult
  emitFusedElement(ds::FusedOp op, ArrayRef<Value> inputPointers,
                   Value outPointer, Value row, Type indexType, int64_t lanes,
                   llvm::function_ref<std::pair<Value, Value>()> enterElement);
  bool cudaTarget() const { return target == "cuda"; }
  FailureOr<Value> emitScalar(Operation &op, ArrayRef<Value> operands);

public:
  /// Also emit `int main` running the program with dsrt::forward_main.
  bool withMain = true;
  /// Absolute path of the model, for the program to find its weights.
  std::string modelPath;
  /// Prefix of every emitted symbol, so several programs can share one
  /// executable.
  std::string prefix = "dsopt_";
  /// Emit each run of repeated layers once, as a block function (else one
  /// kernel call per op, the reference).
  bool outlineRepeats = true;
  /// "cpu": fused loops are C++ loops; "cuda": CUDA kernels and launches.
  std::string target = "cpu";
  /// Where the file space's file goes by default (offload to NVMe).
  std::string nvmePath;
  /// The file space's I/O engine (the `aio` block).
  int64_t aioBlockSize = 1048576, aioQueueDepth = 8, aioIntraOpParallelism = 1;
  bool aioSingleSubmit = false, aioOverlapEvents = true;

private:
  /// How emitOp spells the integers that differ between repeats.
  enum class Spelling {
    /// As literals: code for one place of the function.
    Literal,
    /// Left out (offsets are recorded in `keyOffsets`): the op's key.
    Key,
    /// As the parameters of the block function being emitted (`block`).
    Block,
  };
  Spelling spelling = Spelling::Literal;
  SmallVector<int64_t> *keyOffsets = nullptr;
  /// The block function being emitted.
  struct BlockState {
    ArrayRef<unsigned> classOfSlot;
    unsigned nextSlot = 0;
    SmallVector<Value> classValue; // its offset parameter, once loaded
    Value offsets, firstOp, firstCollective;
    // The first repeat's op and collective index, which firstOp and
    // firstCollective stand for.
    int64_t baseOp = 0, baseCollective = 0;
    const PlannedOp *indexedOp = nullptr;
    Value opIndex;
    // Views already made in the block: (kind, what, index, type).
    llvm::DenseMap<std::tuple<int, const void *, int64_t, const void *>, Value>
        views;
  } block;
  /// Block functions already emitted, by their keys and offset classes.
  llvm::StringMap<std::string> blocksByShape;
  unsigned blocks = 0;
  /// Generated fused kernels by their code, to emit each distinct one once
  /// (with outlineRepeats).
  llvm::StringMap<std::string> fusedByCode;
  /// With outlineRepeats the description's long lists are tables (rows of
  /// dsrt/tables.h) instead of one call per entry.
  SmallVector<std::string> paramRows, stateRows, opRows;
  unsigned tables = 0;
  Operation *describeFunction = nullptr;

  ModuleOp module;
  SmallVector<func::FuncOp> functions;
  func::FuncOp function; // the one being emitted
  MLIRContext *context;
  OpBuilder builder;
  Location loc = UnknownLoc::get(context);
  Value program, stream, arena;
  llvm::DenseMap<Value, Value> views; // ds value -> dsrt::Tensor (this part)
  /// Where each value of the function being emitted lives: its arena
  /// offset, or -1 for static storage (constants and views of them, whose
  /// constant is in `constantRoot`).
  llvm::DenseMap<Value, int64_t> offsetOf;
  /// The memory space of each value not in the device arena (#ds.space):
  /// its offset is in that space's arena.
  llvm::DenseMap<Value, ds::MemorySpace> spaceOf;
  ds::MemorySpace spaceOfValue(Value value) const {
    auto it = spaceOf.find(value);
    return it == spaceOf.end() ? ds::MemorySpace::device : it->second;
  }
  /// dsrt::host_arena(p) in the function being emitted, made on first use.
  Value hostArenaValue;
  Value hostArena();
  llvm::DenseMap<Value, ds::ConstantOp> constantRoot;
  /// Values in memory the runtime binds (dsrt::bound_input): inputs without
  /// a buffer in the plan, and views of them.
  llvm::DenseMap<Value, int64_t> boundIndex;
  /// Results computed into memory the runtime binds (dsrt::bound_output),
  /// with their slot (ds.bound_slots): a pipeline stage's sends and stashes
  /// and the values they overwrite in place there.
  llvm::DenseMap<Value, int64_t> boundOutput;
  /// The global holding each distinct constant: the host array, and on the
  /// cuda target the `__device__` array the kernels read.
  llvm::DenseMap<Attribute, std::string> constantGlobals, deviceConstantGlobals;
  unsigned globals = 0, fusedKernels = 0;
  /// Generated kernels go before this op (the run function).
  Operation *kernelsBefore = nullptr;

  friend class CallBuilder;
};

Value ProgramBuilder::call(StringRef callee, Type result, ValueRange operands,
                           ArrayRef<Attribute> args) {
  return emitc::CallOpaqueOp::create(builder, loc, TypeRange{result}, callee,
                                     operands, builder.getArrayAttr(args))
      .getResult(0);
}

void ProgramBuilder::callVoid(StringRef callee, ValueRange operands,
                              ArrayRef<Attribute> args) {
  emitc::CallOpaqueOp::create(builder, loc, TypeRange{}, callee, operands,
                              builder.getArrayAttr(args));
}

void ProgramBuilder::callArgs(StringRef callee, ArrayRef<CallArg> args) {
  SmallVector<Value> operands;
  SmallVector<Attribute> attrs;
  for (const CallArg &arg : args) {
    if (arg.value) {
      attrs.push_back(builder.getIndexAttr(operands.size()));
      operands.push_back(arg.value);
    } else {
      attrs.push_back(arg.attr);
    }
  }
  callVoid(callee, operands, attrs);
}

Value ProgramBuilder::view(Value base, CallArg offset, RankedTensorType type) {
  SmallVector<Value> operands{base};
  Attribute offsetAttr = offset.attr;
  if (offset.value) {
    offsetAttr = builder.getIndexAttr(1);
    operands.push_back(offset.value);
  }
  return call("dsrt::view", opaque("dsrt::Tensor"), operands,
              {builder.getIndexAttr(0), offsetAttr,
               literal(dtypeName(type.getElementType())),
               literal(shapeLiteral(type.getShape()))});
}

/// The values an integer input may hold, from the ops that read it (through
/// views): a class of a cross-entropy or NLL loss or of its gradient,
/// [0, C), or its ignore_index; an index of a Gather or of its gradient,
/// [-n, n) for n rows along its axis.
/// An argument's ds.index_range (what a vocabulary-parallel lookup or loss
/// takes, which its rank-local form no longer shows) is one more reader.
/// Several readers: the values every one of them takes. None when no reader
/// bounds it.
namespace {
struct IndexRange {
  int64_t lo = std::numeric_limits<int64_t>::min();
  int64_t hi = std::numeric_limits<int64_t>::max();
  std::optional<int64_t> ignore;
  bool bounded = false;
};
} // namespace

static IndexRange indexRange(Value input) {
  IndexRange range;
  SmallVector<IndexRange> readers;
  if (auto arg = dyn_cast<BlockArgument>(input))
    if (auto function =
            dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp()))
      if (auto recorded = function.getArgAttrOfType<DenseI64ArrayAttr>(
              arg.getArgNumber(), ds::DsDialect::kIndexRangeAttrName)) {
        IndexRange reader;
        reader.lo = recorded[0];
        reader.hi = recorded[1];
        if (recorded.size() > 2)
          reader.ignore = recorded[2];
        readers.push_back(reader);
      }
  SmallVector<Value> work{input};
  while (!work.empty()) {
    Value value = work.pop_back_val();
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      auto dimOf = [](Value v, int64_t axis) -> std::optional<int64_t> {
        auto type = dyn_cast<RankedTensorType>(v.getType());
        if (!type || axis < 0 || axis >= type.getRank() || type.isDynamicDim(axis))
          return std::nullopt;
        return type.getDimSize(axis);
      };
      if (auto kernel = dyn_cast<ds::KernelOpInterface>(user)) {
        std::optional<unsigned> aliased = kernel.getAliasedOperand();
        if (aliased && *aliased == use.getOperandNumber()) {
          llvm::append_range(work, user->getResults());
          continue;
        }
      }
      // The operand that holds indices, the tensor whose `axis` they
      // index, and what else the reader takes.
      Value indices, indexed;
      int64_t axis = 1;
      bool fromEnd = false; // Gather: -n .. -1 count from the end
      std::optional<int64_t> ignore;
      if (auto op = dyn_cast<ds::SoftmaxCrossEntropyOp>(user)) {
        indices = op.getLabels(), indexed = op.getScores(), ignore = op.getIgnoreIndex();
      } else if (auto op = dyn_cast<ds::SoftmaxCrossEntropyWithGradOp>(user)) {
        indices = op.getLabels(), indexed = op.getScores(), ignore = op.getIgnoreIndex();
      } else if (auto op = dyn_cast<ds::SoftmaxCrossEntropyGradOp>(user)) {
        indices = op.getLabels(), indexed = op.getLogProb(), ignore = op.getIgnoreIndex();
      } else if (auto op = dyn_cast<ds::NllLossOp>(user)) {
        indices = op.getLabels(), indexed = op.getLogProb(), ignore = op.getIgnoreIndex();
      } else if (auto op = dyn_cast<ds::NllLossGradOp>(user)) {
        indices = op.getLabels(), indexed = op->getResult(0), ignore = op.getIgnoreIndex();
      } else if (auto op = dyn_cast<ds::GatherOp>(user)) {
        indices = op.getIndices(), indexed = op.getData(), axis = op.getAxis(), fromEnd = true;
      } else if (auto op = dyn_cast<ds::GatherGradOp>(user)) {
        indices = op.getIndices(), indexed = op.getDataGrad(), axis = op.getAxis(),
        fromEnd = true;
      }
      if (!indices || use.get() != indices)
        continue;
      if (auto type = dyn_cast<RankedTensorType>(indexed.getType()); type && axis < 0)
        axis += type.getRank();
      std::optional<int64_t> n = dimOf(indexed, axis);
      if (!n)
        continue;
      IndexRange reader;
      reader.lo = fromEnd ? -*n : 0;
      reader.hi = *n;
      reader.ignore = ignore;
      readers.push_back(reader);
    }
  }
  for (const IndexRange &reader : readers) {
    range.lo = std::max(range.lo, reader.lo);
    range.hi = std::min(range.hi, reader.hi);
    range.bounded = true;
  }
  // An ignored value stays valid only where every reader takes it.
  for (const IndexRange &reader : readers) {
    if (!reader.ignore || (range.ignore && *range.ignore != *reader.ignore)) continue;
    int64_t v = *reader.ignore;
    bool everywhere = llvm::all_of(readers, [&](const IndexRange &other) {
      return (v >= other.lo && v < other.hi) || other.ignore == v;
    });
    if (everywhere && !(v >= range.lo && v < range.hi)) range.ignore = v;
  }
  return range;
}

/// The storage type of a constant's elements in C++: 16-bit floats are kept
/// as their bit patterns.
static std::pair<Type, DenseElementsAttr> cppStorage(DenseElementsAttr value) {
  MLIRContext *context = value.getContext();
  auto type = cast<RankedTensorType>(value.getType());
  Type element = type.getElementType();
  if (element.isF16() || element.isBF16()) {
    auto bitsType = IntegerType::get(context, 16, IntegerType::Unsigned);
    SmallVector<APInt> bits;
    if (value.isSplat()) {
      bits.push_back(value.getSplatValue<APFloat>().bitcastToAPInt());
    } else {
      for (APFloat v : value.getValues<APFloat>())
        bits.push_back(v.bitcastToAPInt());
    }
    auto bitsTensor = RankedTensorType::get(
        value.isSplat() ? ArrayRef<int64_t>{1} : type.getShape(), bitsType);
    return {bitsType, DenseElementsAttr::get(bitsTensor, bits)};
  }
  return {element, value};
}

FailureOr<Value> ProgramBuilder::constantView(ds::ConstantOp constant,
                                              bool onHost) {
  auto value = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!value)
    return constant.emitOpError() << "only dense constants can be emitted";
  auto type = cast<RankedTensorType>(value.getType());
  int64_t count = std::max<int64_t>(type.getNumElements(), 1);
  auto [storageElement, storage] = cppStorage(value);
  // On the cuda target the kernels read a `__device__` array: a host array
  // would be pageable memory the device cannot read. The host's copy has
  // its whole initializer, since a run-time fill would run on the device.
  bool onDevice = cudaTarget() && !onHost;
  bool fillAtRunTime = value.isSplat() && count > kSplatLiteralLimit &&
                       (onDevice || !cudaTarget());
  auto arrayType = emitc::ArrayType::get({count}, storageElement);
  // A large splat is filled where it is viewed: every view fills it, since
  // the first view may be emitted into a scratch function (keyOps) that is
  // thrown away. In a program function the fill runs on the function's
  // stream, in order with the kernels queued before and after it (which may
  // read the constant); in the describe function, which has no stream, at
  // once.
  auto fillSplat = [&](Value tensor) {
    if (!fillAtRunTime)
      return;
    double splat =
        isa<FloatType>(type.getElementType())
            ? value.getSplatValue<APFloat>().convertToDouble()
            : static_cast<double>(value.getSplatValue<APInt>().getSExtValue());
    if (type.getElementType().isInteger(1))
      splat = value.getSplatValue<bool>() ? 1.0 : 0.0;
    if (builder.getInsertionBlock()->getParentOp() == describeFunction)
      callVoid("dsrt::fill", {tensor},
               {builder.getIndexAttr(0), builder.getF64FloatAttr(splat)});
    else
      callVoid("dsrt::fill", {stream, tensor},
               {builder.getIndexAttr(0), builder.getIndexAttr(1),
                builder.getF64FloatAttr(splat)});
  };
  // A device array is viewed at the address cudaGetSymbolAddress gives.
  auto viewGlobal = [&](StringRef name) {
    Value global = emitc::GetGlobalOp::create(builder, loc, arrayType, name);
    Value tensor =
        call(onDevice ? "dsrt::cuda::symbol_view" : "dsrt::view_static",
             opaque("dsrt::Tensor"), {global},
             {builder.getIndexAttr(0),
              literal(dtypeName(type.getElementType())),
              literal(shapeLiteral(type.getShape()))});
    fillSplat(tensor);
    return tensor;
  };
  // One global per distinct constant and side, however many parts view it.
  auto [cached, fresh] =
      (onDevice ? deviceConstantGlobals : constantGlobals)
          .try_emplace(value, "");
  if (!fresh)
    return viewGlobal(cached->second);
  std::string name = prefix + "constant_" + std::to_string(globals++);
  cached->second = name;
  Attribute initial;
  if (!fillAtRunTime) {
    auto flat = RankedTensorType::get({count}, storageElement);
    initial = storage.isSplat()
                  ? DenseElementsAttr::get(flat, storage.getSplatValue<Attribute>())
                  : storage.reshape(flat);
  }
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(module.getBody());
    // Past the includes and the globals (a device array's `__device__`
    // is a verbatim op before its global).
    auto atGlobal = [&] {
      if (builder.getInsertionPoint() == module.getBody()->end())
        return false;
      Operation *at = &*builder.getInsertionPoint();
      return isa<emitc::IncludeOp, emitc::GlobalOp>(at) ||
             (cudaTarget() && isa<emitc::VerbatimOp>(at));
    };
    while (atGlobal())
      builder.setInsertionPointAfter(&*builder.getInsertionPoint());
    if (onDevice)
      emitc::VerbatimOp::create(builder, loc, "__device__");
    emitc::GlobalOp::create(builder, loc, name, arrayType, initial,
                            /*externSpecifier=*/false,
                            /*staticSpecifier=*/true,
                            /*constSpecifier=*/!fillAtRunTime);
  }
  return viewGlobal(name);
}

/// Turns one KernelOpInterface description into an emitc.call_opaque.
class CallBuilder : public ds::KernelCallBuilder {
public:
  CallBuilder(ProgramBuilder &program, const PlannedOp &planned)
      : p(program), op(planned.op), plannedWorkspace(planned.workspace) {}

  void callee(StringRef name) override { calleeName = name.str(); }
  void stream() override { operand(p.stream); }
  void commStream() override {
    operand(p.call("dsrt::comm_stream", p.opaque("dsrt::Stream&"),
                   {p.program}, {p.builder.getIndexAttr(0)}));
  }
  void ioStream() override {
    operand(p.call("dsrt::io_stream", p.opaque("dsrt::Stream&"),
                   {p.program}, {p.builder.getIndexAttr(0)}));
    onIoStream = true;
  }
  /// Whether the call was issued on the file I/O stream (marked issued
  /// there by dsrt::io_issued).
  bool onIoStream = false;
  void tensor(Value value) override { operand(lookup(value)); }
  void optionalTensor(Value value) override {
    if (!value) {
      args.push_back(p.literal("nullptr"));
      return;
    }
    operand(p.call("dsrt::optional", p.tensorPointer(),
                   {lookup(value)}, {p.builder.getIndexAttr(0)}));
  }
  void tensorArray(ValueRange values) override {
    if (p.asTable(values.size())) {
      SmallVector<std::string> rows;
      for (Value value : values)
        if (std::optional<std::string> row = p.viewRow(value))
          rows.push_back(*row);
      if (rows.size() == values.size()) {
        Value table = p.emitTable(p.opaque("dsrt::ViewRow"), rows,
                                  p.kernelsBefore);
        Value list = p.call("dsrt::views",
                            p.opaque("std::vector<dsrt::Tensor>"),
                            {p.arena, table},
                            {p.builder.getIndexAttr(0),
                             p.builder.getIndexAttr(1),
                             p.builder.getI64IntegerAttr(rows.size())});
        operand(p.call("dsrt::data", p.tensorPointer(), {list},
                       {p.builder.getIndexAttr(0)}));
        return;
      }
    }
    SmallVector<Value> list;
    SmallVector<Attribute> indices;
    for (Value value : values) {
      indices.push_back(p.builder.getIndexAttr(list.size()));
      list.push_back(lookup(value));
    }
    Value array = p.call(
        "dsrt::tensor_array",
        p.opaque("std::array<dsrt::Tensor, " + std::to_string(values.size()) +
                 ">"),
        list, indices);
    operand(p.call("dsrt::data", p.tensorPointer(), {array},
                   {p.builder.getIndexAttr(0)}));
  }
  void integer(int64_t value) override {
    args.push_back(p.builder.getI64IntegerAttr(value));
  }
  void real(double value) override {
    args.push_back(p.builder.getF32FloatAttr(static_cast<float>(value)));
  }
  void boolean(bool value) override {
    args.push_back(p.builder.getBoolAttr(value));
  }
  void integers(ArrayRef<int64_t> values) override {
    if (values.empty()) {
      args.push_back(p.literal("nullptr"));
      return;
    }
    auto i64 = p.builder.getI64Type();
    auto arrayType =
        emitc::ArrayType::get({static_cast<int64_t>(values.size())}, i64);
    Value array = emitc::VariableOp::create(
        p.builder, p.loc, arrayType, p.literal(shapeLiteral(values)));
    operand(array);
  }
  void enumerator(StringRef name) override { args.push_back(p.literal(name)); }
  void workspace() override {
    if (!plannedWorkspace) {
      args.push_back(p.literal("dsrt::Workspace{}"));
      return;
    }
    CallArg offset = p.slotArg(plannedWorkspace->first);
    SmallVector<Value> operands{p.arena};
    Attribute offsetAttr = offset.attr;
    if (offset.value) {
      offsetAttr = p.builder.getIndexAttr(1);
      operands.push_back(offset.value);
    }
    operand(p.call("dsrt::workspace", p.opaque("dsrt::Workspace"), operands,
                   {p.builder.getIndexAttr(0), offsetAttr,
                    p.builder.getI64IntegerAttr(plannedWorkspace->second)}));
  }
  void generatedCallee(Operation *kernelOp) override {
    auto fused = dyn_cast<ds::FusedOp>(kernelOp);
    FailureOr<std::string> name =
        fused ? p.emitFusedKernel(fused) : FailureOr<std::string>(failure());
    if (failed(name)) {
      if (!fused)
        kernelOp->emitOpError() << "asks for a generated kernel dsopt cannot "
                                   "generate";
      status = failure();
      return;
    }
    calleeName = *name;
  }

  LogicalResult finish() {
    if (failed(status))
      return failure();
    if (calleeName.empty())
      return op->emitOpError() << "describes no kernel";
    p.callVoid(calleeName, operands, args);
    return success();
  }

private:
  void operand(Value value) {
    args.push_back(p.builder.getIndexAttr(operands.size()));
    operands.push_back(value);
  }
  Value lookup(Value value) {
    FailureOr<Value> view = p.viewOf(value);
    if (failed(view)) {
      op->emitOpError() << "uses a value without a buffer";
      status = failure();
      // Keep the call well-formed; the failure aborts the lowering.
      return p.stream;
    }
    return *view;
  }

  ProgramBuilder &p;
  Operation *op;
  std::optional<std::pair<int64_t, int64_t>> plannedWorkspace;
  std::string calleeName;
  SmallVector<Value> operands;
  SmallVector<Attribute> args;
  LogicalResult status = success();
};

/// Kernels per generated C++ function: the host compiler's time grows
/// faster than linearly with a function's size, so a run function is a
/// sequence of parts of this many kernels, each recreating the views it uses
/// from the plan's offsets.
constexpr int64_t kKernelsPerPart = 48;
/// With repeated layers outlined, parts hold this many kernels or block
/// calls: the calls' offset arrays make them denser, and smaller functions
/// compile faster still.
constexpr int64_t kUnitsPerPart = 16;

std::optional<std::string> ProgramBuilder::viewRow(Value value) {
  auto it = offsetOf.find(value);
  if (it == offsetOf.end() || it->second < 0 || boundIndex.count(value) ||
      boundOutput.count(value) || constantRoot.count(value) ||
      spaceOfValue(value) != ds::MemorySpace::device)
    return std::nullopt;
  auto type = cast<RankedTensorType>(value.getType());
  return "{" + std::to_string(it->second) + ", " +
         dtypeName(type.getElementType()) + ", " + tableShape(type) + "}";
}

/// Repeats smaller than this many EmitC ops stay inline: a block call and
/// its offsets would cost about as much as the code.
constexpr unsigned kMinBlockWeight = 24;

FailureOr<Value> ProgramBuilder::viewOf(Value value) {
  if (spelling == Spelling::Literal)
    if (Value cached = views.lookup(value))
      return cached;
  auto type = cast<RankedTensorType>(value.getType());
  // In a block, equal views of a parameter are made once.
  std::tuple<int, const void *, int64_t, const void *> blockKey;
  auto blockCached = [&]() -> Value {
    return spelling == Spelling::Block ? block.views.lookup(blockKey)
                                       : Value();
  };
  Value tensor;
  // Memory the runtime binds, by its index: a pipeline stage's layers each
  // send or stash their own values.
  auto bound = [&](StringRef callee, int kind, int64_t index) -> Value {
    CallArg slot = slotArg(index);
    blockKey = {kind, slot.value.getAsOpaquePointer(), 0,
                type.getAsOpaquePointer()};
    if (Value cached = blockCached())
      return cached;
    SmallVector<Value> operands{program};
    Attribute indexAttr = slot.attr;
    if (slot.value) {
      indexAttr = builder.getIndexAttr(1);
      operands.push_back(slot.value);
    }
    tensor = call(callee, opaque("dsrt::Tensor"), operands,
                  {builder.getIndexAttr(0), indexAttr,
                   literal(dtypeName(type.getElementType())),
                   literal(shapeLiteral(type.getShape()))});
    return Value();
  };
  if (auto it = boundOutput.find(value); it != boundOutput.end()) {
    if (Value cached = bound("dsrt::bound_output", 0, it->second))
      return cached;
  } else if (auto it = boundIndex.find(value); it != boundIndex.end()) {
    if (Value cached = bound("dsrt::bound_input", 1, it->second))
      return cached;
  } else if (ds::ConstantOp root = constantRoot.lookup(value)) {
    blockKey = {2, root.getValue().getAsOpaquePointer(), 0,
                type.getAsOpaquePointer()};
    if (Value cached = blockCached())
      return cached;
    FailureOr<Value> base = constantView(root);
    if (failed(base))
      return failure();
    tensor = *base;
    if (root.getType() != type)
      tensor = call("dsrt::reshape", opaque("dsrt::Tensor"), {tensor},
                    {builder.getIndexAttr(0),
                     literal(shapeLiteral(type.getShape()))});
  } else {
    auto it = offsetOf.find(value);
    if (it == offsetOf.end() || it->second < 0)
      return failure();
    // Spelled before the cache is asked, so that every use of an offset
    // takes one slot whatever is cached.
    CallArg offset = slotArg(it->second);
    ds::MemorySpace space = spaceOfValue(value);
    blockKey = {3 + static_cast<int>(space), offset.value.getAsOpaquePointer(),
                0, type.getAsOpaquePointer()};
    if (Value cached = blockCached())
      return cached;
    if (space == ds::MemorySpace::file) {
      // Kernels never see the file space: only a transfer reads or writes
      // it, through its slot (dsrt::FileSlot).
      SmallVector<Value> operands{program};
      Attribute offsetAttr = offset.attr;
      if (offset.value) {
        offsetAttr = builder.getIndexAttr(1);
        operands.push_back(offset.value);
      }
      tensor = call("dsrt::file_slot", opaque("dsrt::FileSlot"), operands,
                    {builder.getIndexAttr(0), offsetAttr});
    } else {
      tensor = view(space == ds::MemorySpace::host ? hostArena() : arena,
                    offset, type);
    }
  }
  if (spelling == Spelling::Literal)
    views[value] = tensor;
  else if (spelling == Spelling::Block)
    block.views[blockKey] = tensor;
  return tensor;
}

CallArg ProgramBuilder::slotArg(int64_t offset) {
  switch (spelling) {
  case Spelling::Literal:
    return builder.getI64IntegerAttr(offset);
  case Spelling::Key:
    keyOffsets->push_back(offset);
    return literal("slot");
  case Spelling::Block: {
    unsigned cls = block.classOfSlot[block.nextSlot++];
    Value &loaded = block.classValue[cls];
    if (!loaded) {
      // Loaded where first used: the entry block is straight-line code.
      auto i64 = builder.getI64Type();
      Value index = emitc::LiteralOp::create(builder, loc, builder.getIndexType(),
                                             std::to_string(cls));
      Value element = emitc::SubscriptOp::create(
          builder, loc, cast<TypedValue<emitc::PointerType>>(block.offsets),
          index);
      loaded = emitc::LoadOp::create(builder, loc, i64, element);
    }
    return loaded;
  }
  }
  llvm_unreachable("unknown spelling");
}

CallArg ProgramBuilder::opIndexArg(const PlannedOp &planned) {
  switch (spelling) {
  case Spelling::Literal:
    return builder.getI64IntegerAttr(planned.opIndex);
  case Spelling::Key:
    return literal("op");
  case Spelling::Block: {
    if (block.indexedOp == &planned)
      return block.opIndex;
    int64_t relative = planned.opIndex - block.baseOp;
    block.indexedOp = &planned;
    block.opIndex =
        relative == 0
            ? block.firstOp
            : Value(emitc::AddOp::create(
                  builder, loc, builder.getI64Type(), block.firstOp,
                  emitc::LiteralOp::create(builder, loc, builder.getI64Type(),
                                           std::to_string(relative))));
    return block.opIndex;
  }
  }
  llvm_unreachable("unknown spelling");
}

CallArg ProgramBuilder::collectiveArg(const PlannedOp &planned,
                                      int64_t collective) {
  switch (spelling) {
  case Spelling::Literal:
    return builder.getI64IntegerAttr(collective);
  case Spelling::Key:
    // How many collectives back: the same in every repeat.
    return literal("collective-" +
                   std::to_string(planned.collectivesBefore - collective));
  case Spelling::Block: {
    int64_t relative = collective - block.baseCollective;
    if (relative == 0)
      return block.firstCollective;
    auto i64 = builder.getI64Type();
    Value amount = emitc::LiteralOp::create(
        builder, loc, i64, std::to_string(relative < 0 ? -relative : relative));
    if (relative < 0)
      return Value(
          emitc::SubOp::create(builder, loc, i64, block.firstCollective, amount));
    return Value(
        emitc::AddOp::create(builder, loc, i64, block.firstCollective, amount));
  }
  }
  llvm_unreachable("unknown spelling");
}

emitc::FuncOp ProgramBuilder::startFunction(StringRef name,
                                            ArrayRef<Type> extraArgs) {
  builder.setInsertionPointToEnd(module.getBody());
  SmallVector<Type> argTypes{opaque("dsrt::Program&")};
  llvm::append_range(argTypes, extraArgs);
  auto function = emitc::FuncOp::create(
      builder, loc, name, builder.getFunctionType(argTypes, {}));
  kernelsBefore = function;
  Block *entry = function.addEntryBlock();
  builder.setInsertionPointToEnd(entry);
  program = entry->getArgument(0);
  stream = call("dsrt::stream", opaque("dsrt::Stream&"), {program},
                {builder.getIndexAttr(0)});
  arena = call("dsrt::arena", emitc::PointerType::get(IntegerType::get(
                                  context, 8, IntegerType::Unsigned)),
               {program}, {builder.getIndexAttr(0)});
  hostArenaValue = Value();
  return function;
}

Value ProgramBuilder::hostArena() {
  if (!hostArenaValue) {
    // At the top of the function, beside the device arena.
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointAfter(arena.getDefiningOp());
    hostArenaValue =
        call("dsrt::host_arena", arena.getType(), {program},
             {builder.getIndexAttr(0)});
  }
  return hostArenaValue;
}

void ProgramBuilder::startPart(StringRef name) {
  emitc::FuncOp part = startFunction(name);
  // Not inlined back into one huge function by the host compiler.
  part.setSpecifiersAttr(
      builder.getStrArrayAttr({"static", "__attribute__((noinline))"}));
  views.clear();
}

LogicalResult ProgramBuilder::planOps(Block &body, ds::MemoryPlanAttr plan,
                                      std::vector<PlannedOp> &ops) {
  // Collectives run on the communication stream while later kernels run;
  // a kernel that reads what a pending collective writes, or writes what it
  // reads or writes, first waits for it (the planner keeps a collective's
  // buffers live until the first use of its results, so that is normally
  // that use).
  struct Pending {
    int64_t index;
    SmallVector<std::pair<int64_t, int64_t>> reads, writes; // [begin, end)
    // A write-behind's deadline (WriteBehind.h): waited for there.
    Operation *deadline = nullptr;
  };
  SmallVector<Pending> pending;
  int64_t collectives = 0;
  // Byte ranges of different spaces never overlap: each space's offsets
  // are placed in a range of their own.
  auto spaced = [](ds::MemorySpace space, int64_t offset) {
    return (static_cast<int64_t>(space) << 48) + offset;
  };
  auto rangeOf = [&](Value value) -> std::optional<std::pair<int64_t, int64_t>> {
    auto it = offsetOf.find(value);
    if (it == offsetOf.end() || it->second < 0)
      return std::nullopt;
    int64_t size =
        ds::getByteSize(cast<ShapedType>(value.getType())).value_or(0);
    int64_t begin = spaced(spaceOfValue(value), it->second);
    return std::make_pair(begin, begin + size);
  };

  // The host arena's transient slots: ds-plan-memory places them by the
  // same lifetimes as device buffers but lists only device slots in
  // ds.frees, so their releases are worked out here. A value dies after
  // its last use, or, read by an asynchronous op (a transfer), once the
  // first use of that op's results has waited for it; a function result
  // lives to the end (the runner releases it).
  llvm::DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(body.without_terminator()))
    position[&op] = i;
  constexpr int64_t kToTheEnd = std::numeric_limits<int64_t>::max();
  auto firstUse = [&](Value value) {
    int64_t first = kToTheEnd;
    for (Operation *user : value.getUsers()) {
      auto it = position.find(user);
      first = std::min(first, it == position.end() ? kToTheEnd : it->second);
    }
    return first;
  };
  auto lifetimeEnd = [&](Value value, int64_t defined) {
    int64_t end = defined;
    for (Operation *user : value.getUsers()) {
      auto it = position.find(user);
      if (it == position.end())
        return kToTheEnd;
      end = std::max(end, it->second);
      if (isa<ds::AsyncOpInterface>(user)) {
        int64_t wait = kToTheEnd;
        for (Value result : user->getResults())
          wait = std::min(wait, firstUse(result));
        if (isWriteBehind(user))
          if (Operation *deadline = writeBehindDeadline(user))
            wait = std::min(wait, position.lookup(deadline));
        end = std::max(end, wait);
      }
    }
    return end;
  };
  // Host slot -> the end of the last value in it so far.
  llvm::DenseMap<int64_t, int64_t> hostSlotEnd;
  SmallVector<std::pair<int64_t, int64_t>> hostFrees; // (op, offset)
  auto endHostSlot = [&](int64_t offset) {
    auto it = hostSlotEnd.find(offset);
    if (it == hostSlotEnd.end())
      return;
    if (it->second != kToTheEnd)
      hostFrees.emplace_back(it->second, offset);
    hostSlotEnd.erase(it);
  };
  auto overlaps = [](ArrayRef<std::pair<int64_t, int64_t>> a,
                     ArrayRef<std::pair<int64_t, int64_t>> b) {
    for (auto [b0, e0] : a)
      for (auto [b1, e1] : b)
        if (b0 < e1 && b1 < e0)
          return true;
    return false;
  };

  int64_t opIndex = 0;
  for (Operation &op : body.without_terminator()) {
    int64_t opIndexInBody = static_cast<int64_t>(ops.size());
    PlannedOp &planned = ops.emplace_back();
    planned.op = &op;
    planned.collectivesBefore = collectives;
    // Buffers whose lifetime ends at an op are released after it; for an op
    // that runs no kernel (a view, a constant), where that op stands.
    if (auto frees =
            op.getAttrOfType<DenseI64ArrayAttr>(ds::DsDialect::kFreesAttrName))
      llvm::append_range(planned.releases, frees.asArrayRef());

    if (auto constant = dyn_cast<ds::ConstantOp>(op)) {
      constantRoot[constant.getResult()] = constant;
      offsetOf[constant.getResult()] = -1;
      continue;
    }
    auto kernel = dyn_cast<ds::KernelOpInterface>(op);
    auto offsets =
        op.getAttrOfType<DenseI64ArrayAttr>(ds::DsDialect::kBuffersAttrName);
    if (!kernel || !offsets)
      return op.emitOpError() << "must be memory-planned (ds-plan-memory) and "
                                 "have a runtime kernel";

    // A view runs nothing: same bytes under a new shape.
    if (std::optional<unsigned> aliased = kernel.getAliasedOperand()) {
      Value source = op.getOperand(*aliased);
      offsetOf[op.getResult(0)] = offsetOf.lookup(source);
      if (spaceOfValue(source) != ds::MemorySpace::device)
        spaceOf[op.getResult(0)] = spaceOfValue(source);
      if (ds::ConstantOp root = constantRoot.lookup(source))
        constantRoot[op.getResult(0)] = root;
      if (auto it = boundIndex.find(source); it != boundIndex.end())
        boundIndex[op.getResult(0)] = it->second;
      if (auto it = boundOutput.find(source); it != boundOutput.end())
        boundOutput.try_emplace(op.getResult(0), it->second);
      continue;
    }

    // ds-offload's host updates and transfers run as on the cpu target:
    // kernels on host arena views, copies on the communication stream, file
    // I/O. On cuda the host arena is pinned memory mapped into the device's
    // address space, so the update's kernels run on the GPU over it.
    ds::MemorySpace resultSpace = ds::getResultSpace(&op);
    planned.runsKernel = true;
    planned.opIndex = opIndex++;
    SmallVector<std::pair<int64_t, int64_t>> reads, writes;
    for (Value operand : op.getOperands())
      if (auto range = rangeOf(operand))
        reads.push_back(*range);
    // The kernel's scratch memory, acquired before it and released after it
    // (ds.frees lists it) like any buffer.
    if (int64_t bytes = kernel.getWorkspaceBytes(); bytes > 0) {
      auto at =
          op.getAttrOfType<IntegerAttr>(ds::DsDialect::kWorkspaceAttrName);
      if (!at)
        return op.emitOpError() << "needs a workspace of " << bytes
                                << " bytes but has none (ds-plan-memory)";
      planned.workspace = {at.getInt(), bytes};
      planned.acquires.emplace_back(at.getInt(),
                                    llvm::alignTo(bytes, plan.getAlignment()));
      writes.emplace_back(at.getInt(), at.getInt() + bytes);
    }
    for (auto [result, offset] :
         llvm::zip(op.getResults(), offsets.asArrayRef()))
      if (offset >= 0) {
        int64_t begin = spaced(resultSpace, offset);
        writes.emplace_back(
            begin, begin + ds::getByteSize(cast<ShapedType>(result.getType()))
                               .value_or(0));
      }
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->deadline == &op || overlaps(reads, it->writes) ||
          overlaps(writes, it->reads) || overlaps(writes, it->writes)) {
        planned.waits.push_back(it->index);
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    llvm::SmallDenseSet<int64_t> operandOffsets;
    for (Value operand : op.getOperands())
      operandOffsets.insert(
          spaced(spaceOfValue(operand), offsetOf.lookup(operand)));
    for (auto [r, result, offset] :
         llvm::enumerate(op.getResults(), offsets.asArrayRef())) {
      auto type = cast<RankedTensorType>(result.getType());
      if (offset < 0 && boundOutput.count(result)) {
        offsetOf[result] = -1; // in the slot the runtime bound
        continue;
      }
      if (offset < 0)
        return op.emitOpError() << "result has no buffer";
      offsetOf[result] = offset;
      if (resultSpace != ds::MemorySpace::device)
        spaceOf[result] = resultSpace;
      // A result in a fresh slot (not written over a dying operand, nor
      // into persistent state, whose slots live for the whole program).
      bool inPlace = operandOffsets.contains(spaced(resultSpace, offset));
      bool persistent = offset < plan.getSpacePersistentBytes(resultSpace);
      int64_t slot =
          llvm::alignTo(ds::getByteSize(type).value_or(0), plan.getAlignment());
      switch (resultSpace) {
      case ds::MemorySpace::device:
        if (!inPlace && !persistent)
          planned.acquires.emplace_back(offset, slot);
        break;
      case ds::MemorySpace::host:
        if (persistent)
          break;
        if (!inPlace) {
          endHostSlot(offset);
          planned.hostAcquires.emplace_back(offset, slot);
        }
        hostSlotEnd[offset] = std::max(hostSlotEnd.lookup(offset),
                                       lifetimeEnd(result, opIndexInBody));
        break;
      case ds::MemorySpace::file:
        // The file arena holds the states only; a transfer writes them back
        // in place.
        if (!persistent)
          return op.emitOpError()
                 << "result " << r
                 << " is a transient buffer in the file space; only "
                    "persistent states live there";
        break;
      }
    }
    if (isa<ds::AsyncOpInterface>(&op)) {
      planned.issuesCollective = true;
      pending.push_back({collectives++, reads, writes,
                         isWriteBehind(&op) ? writeBehindDeadline(&op)
                                            : nullptr});
    }
  }
  while (!hostSlotEnd.empty())
    endHostSlot(hostSlotEnd.begin()->first);
  for (auto [at, offset] : hostFrees)
    ops[at].hostReleases.push_back(offset);
  for (PlannedOp &planned : ops)
    llvm::sort(planned.hostReleases);
  return success();
}

LogicalResult ProgramBuilder::emitOp(const PlannedOp &planned) {
  auto i64 = [&](int64_t v) { return builder.getI64IntegerAttr(v); };
  auto releases = [&] {
    if (asTable(planned.releases.size())) {
      SmallVector<std::string> rows;
      for (int64_t offset : planned.releases)
        rows.push_back(std::to_string(offset));
      Value table =
          emitTable(builder.getI64Type(), rows, kernelsBefore);
      callArgs("dsrt::release_all",
               {program, table, i64(planned.releases.size())});
      return;
    }
    for (int64_t offset : planned.releases)
      callArgs("dsrt::release", {program, slotArg(offset)});
  };
  auto hostReleases = [&] {
    for (int64_t offset : planned.hostReleases)
      callArgs("dsrt::release_host", {program, slotArg(offset)});
  };
  if (!planned.runsKernel) {
    releases();
    hostReleases();
    return success();
  }
  for (int64_t collective : planned.waits)
    callArgs("dsrt::collective_wait",
             {program, collectiveArg(planned, collective)});
  CallArg index = opIndexArg(planned);
  callArgs("dsrt::begin_op", {program, index});
  if (asTable(planned.acquires.size())) {
    SmallVector<std::string> rows;
    for (auto [offset, bytes] : planned.acquires)
      rows.push_back("{" + std::to_string(offset) + ", " +
                     std::to_string(bytes) + "}");
    Value table = emitTable(opaque("dsrt::SlotRow"), rows, kernelsBefore);
    callArgs("dsrt::acquire_all",
             {program, table, i64(planned.acquires.size())});
  } else {
    for (auto [offset, bytes] : planned.acquires)
      callArgs("dsrt::acquire", {program, slotArg(offset), i64(bytes)});
  }
  for (auto [offset, bytes] : planned.hostAcquires)
    callArgs("dsrt::acquire_host", {program, slotArg(offset), i64(bytes)});
  CallBuilder callBuilder(*this, planned);
  cast<ds::KernelOpInterface>(planned.op).buildKernelCall(callBuilder);
  if (failed(callBuilder.finish()))
    return failure();
  if (planned.issuesCollective)
    callArgs(callBuilder.onIoStream ? "dsrt::io_issued"
                                    : "dsrt::collective_issued",
             {program, collectiveArg(planned, planned.collectivesBefore)});
  releases();
  hostReleases();
  callArgs("dsrt::end_op", {program, index});
  return success();
}

LogicalResult ProgramBuilder::keyOps(MutableArrayRef<PlannedOp> ops) {
  llvm::StringMap<unsigned> keys;
  std::string text;
  OpPrintingFlags flags;
  flags.enableDebugInfo(false).assumeVerified().useLocalScope();
  spelling = Spelling::Key;
  for (PlannedOp &planned : ops) {
    // Each op's code alone in a scratch function, printed.
    emitc::FuncOp scratch = startFunction(prefix + "key");
    unsigned header = scratch.getBody().front().getOperations().size();
    keyOffsets = &planned.offsets;
    LogicalResult emitted = emitOp(planned);
    keyOffsets = nullptr;
    if (failed(emitted)) {
      scratch.erase();
      spelling = Spelling::Literal;
      return failure();
    }
    planned.weight = scratch.getBody().front().getOperations().size() - header;
    text.clear();
    llvm::raw_string_ostream os(text);
    scratch->print(os, flags);
    planned.key = keys.try_emplace(text, keys.size()).first->second;
    scratch.erase();
  }
  spelling = Spelling::Literal;
  return success();
}

/// The repeats worth a block function among `ops`, in order, none
/// overlapping: greedily the one that saves the most code, then the same
/// in what lies before and after it.
static SmallVector<Repeat> findRepeats(ArrayRef<PlannedOp> ops) {
  size_t n = ops.size();
  SmallVector<uint64_t> weightBefore(n + 1, 0), kernelsBefore(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    weightBefore[i + 1] = weightBefore[i] + ops[i].weight;
    kernelsBefore[i + 1] = kernelsBefore[i] + (ops[i].runsKernel ? 1 : 0);
  }
  SmallVector<Repeat> found;
  SmallVector<std::pair<size_t, size_t>> segments{{0, n}};
  while (!segments.empty()) {
    auto [lo, hi] = segments.pop_back_val();
    Repeat best;
    for (size_t length = 1; 2 * length <= hi - lo; ++length) {
      // matches: how many ops from j on equal the op `length` later.
      size_t matches = 0;
      for (size_t j = hi - length; j-- > lo;) {
        matches = ops[j].key == ops[j + length].key ? matches + 1 : 0;
        if (matches < length)
          continue;
        uint64_t weight = weightBefore[j + length] - weightBefore[j];
        if (weight < kMinBlockWeight ||
            kernelsBefore[j + length] == kernelsBefore[j])
          continue;
        size_t count = 1 + matches / length;
        uint64_t saved = weight * (count - 1);
        if (saved > best.saved ||
            (saved == best.saved && j < best.start))
          best = {j, length, count, saved};
      }
    }
    if (best.saved == 0)
      continue;
    found.push_back(best);
    segments.push_back({lo, best.start});
    segments.push_back({best.start + best.length * best.count, hi});
  }
  llvm::sort(found, [](const Repeat &a, const Repeat &b) {
    return a.start < b.start;
  });
  return found;
}

std::string ProgramBuilder::emitBlock(ArrayRef<PlannedOp> body,
                                      ArrayRef<unsigned> classOfSlot,
                                      unsigned classes,
                                      StringRef functionName,
                                      const Repeat &repeat) {
  // Equal code and equal offset classes: the same block.
  std::string shape;
  llvm::raw_string_ostream os(shape);
  for (const PlannedOp &planned : body)
    os << planned.key << ',';
  os << ';';
  for (unsigned cls : classOfSlot)
    os << cls << ',';
  auto [it, fresh] = blocksByShape.try_emplace(shape, "");
  if (!fresh)
    return it->second;
  std::string name = prefix + functionName.str() + "_block" +
                     std::to_string(blocks++);
  it->second = name;

  builder.setInsertionPointToEnd(module.getBody());
  emitc::VerbatimOp::create(
      builder, loc,
      "// Ops " + std::to_string(repeat.start) + "-" +
          std::to_string(repeat.start + repeat.length - 1) + " of " +
          functionName.str() + ", repeated " + std::to_string(repeat.count) +
          " times: the offsets of their buffers are the last argument.");
  auto i64 = builder.getI64Type();
  emitc::FuncOp function = startFunction(
      name, {i64, i64, emitc::PointerType::get(i64)});
  function.setSpecifiersAttr(
      builder.getStrArrayAttr({"static", "__attribute__((noinline))"}));
  Block &entry = function.getBody().front();
  block = BlockState();
  block.classOfSlot = classOfSlot;
  block.classValue.assign(classes, Value());
  block.firstOp = entry.getArgument(1);
  block.firstCollective = entry.getArgument(2);
  block.offsets = entry.getArgument(3);
  for (const PlannedOp &planned : body)
    if (planned.runsKernel) {
      block.baseOp = planned.opIndex;
      break;
    }
  block.baseCollective = body.front().collectivesBefore;
  spelling = Spelling::Block;
  for (const PlannedOp &planned : body)
    // Keys were emitted from the same ops: this cannot fail.
    (void)emitOp(planned);
  spelling = Spelling::Literal;
  emitc::ReturnOp::create(builder, loc, Value());
  block = BlockState();
  return name;
}

LogicalResult ProgramBuilder::emitRun(func::FuncOp emitted, StringRef name) {
  function = emitted;
  offsetOf.clear();
  constantRoot.clear();
  Block &body = function.getBody().front();
  boundIndex.clear();
  boundOutput.clear();
  // What a pipeline stage sends or stashes, computed straight into the slot
  // the runtime binds (no buffer in the plan), and a value such an output
  // overwrites in place there: ds-plan-memory names each one's slot
  // (ds.bound_slots; slot k is the k-th output with a role). Taken from
  // the plan, not worked out again here: which value may share a slot is
  // the planner's decision (a value two outputs overwrite in place goes
  // into the slot of the last one only).
  for (Operation &op : body.without_terminator())
    if (auto slots = op.getAttrOfType<DenseI64ArrayAttr>(
            ds::DsDialect::kBoundSlotsAttrName))
      for (auto [result, slot] : llvm::zip(op.getResults(), slots.asArrayRef()))
        if (slot >= 0)
          boundOutput[result] = slot;
  int64_t bound = 0;
  spaceOf.clear();
  for (BlockArgument arg : body.getArguments()) {
    // An argument in the host or file space lies in that space's arena:
    // only the host optimizer and transfers touch it (ds-plan-memory
    // refuses a kernel on it).
    if (auto space = function.getArgAttrOfType<ds::MemorySpaceAttr>(
            arg.getArgNumber(), ds::DsDialect::kSpaceAttrName);
        space && space.getValue() != ds::MemorySpace::device)
      spaceOf[arg] = space.getValue();
    offsetOf[arg] = function
                        .getArgAttrOfType<IntegerAttr>(
                            arg.getArgNumber(), ds::DsDialect::kOffsetAttrName)
                        .getInt();
    // An input without a buffer of its own (a pipeline stage's received or
    // stashed value): the runtime binds it, the bound-th such input.
    if (offsetOf[arg] < 0 && !spaceOf.count(arg) &&
        function.getArgAttr(arg.getArgNumber(), ds::DsDialect::kInputAttrName))
      boundIndex[arg] = bound++;
  }
  auto plan = function->getAttrOfType<ds::MemoryPlanAttr>(
      ds::DsDialect::kMemoryPlanAttrName);

  std::vector<PlannedOp> ops;
  if (failed(planOps(body, plan, ops)))
    return failure();
  int64_t collectives = 0;
  for (const PlannedOp &planned : ops)
    collectives += planned.issuesCollective ? 1 : 0;

  // Each repeat's block function, and the offsets each call passes it.
  struct Call {
    std::string block;
    int64_t firstOp, firstCollective;
    SmallVector<int64_t> offsets;
  };
  SmallVector<Repeat> repeats;
  SmallVector<SmallVector<Call>> calls;
  if (outlineRepeats) {
    if (failed(keyOps(ops)))
      return failure();
    repeats = findRepeats(ops);
    std::string functionName = name.str();
    for (const Repeat &repeat : repeats) {
      // Every offset the code uses takes a slot; two slots share a
      // parameter when they hold the same offset in every repeat.
      SmallVector<SmallVector<int64_t>> slots(repeat.count);
      for (size_t r = 0; r < repeat.count; ++r)
        for (size_t i = 0; i < repeat.length; ++i)
          llvm::append_range(
              slots[r], ops[repeat.start + r * repeat.length + i].offsets);
      std::map<SmallVector<int64_t>, unsigned> classOf;
      SmallVector<unsigned> classOfSlot;
      SmallVector<size_t> firstSlot;
      for (size_t s = 0; s < slots.front().size(); ++s) {
        SmallVector<int64_t> across;
        for (size_t r = 0; r < repeat.count; ++r)
          across.push_back(slots[r][s]);
        auto [it, fresh] = classOf.try_emplace(across, firstSlot.size());
        if (fresh)
          firstSlot.push_back(s);
        classOfSlot.push_back(it->second);
      }
      ArrayRef<PlannedOp> first =
          ArrayRef<PlannedOp>(ops).slice(repeat.start, repeat.length);
      std::string blockName = emitBlock(first, classOfSlot, firstSlot.size(),
                                        functionName, repeat);
      SmallVector<Call> &repeatCalls = calls.emplace_back();
      for (size_t r = 0; r < repeat.count; ++r) {
        ArrayRef<PlannedOp> instance = ArrayRef<PlannedOp>(ops).slice(
            repeat.start + r * repeat.length, repeat.length);
        Call &call = repeatCalls.emplace_back();
        call.block = blockName;
        call.firstCollective = instance.front().collectivesBefore;
        for (const PlannedOp &planned : instance)
          if (planned.runsKernel) {
            call.firstOp = planned.opIndex;
            break;
          }
        for (size_t s : firstSlot)
          call.offsets.push_back(slots[r][s]);
      }
    }
  }

  SmallVector<std::string> parts;
  auto nextPart = [&] {
    if (!parts.empty())
      emitc::ReturnOp::create(builder, loc, Value());
    parts.push_back(prefix + name.str() + "_part" +
                    std::to_string(parts.size()));
    startPart(parts.back());
  };
  nextPart();
  // Kernel calls and block calls in the current part.
  int64_t units = 0;
  auto countUnit = [&] {
    if (units > 0 && units % (outlineRepeats ? kUnitsPerPart : kKernelsPerPart) == 0)
      nextPart();
    ++units;
  };
  size_t nextRepeat = 0;
  for (size_t i = 0; i < ops.size();) {
    if (nextRepeat < repeats.size() && repeats[nextRepeat].start == i) {
      const Repeat &repeat = repeats[nextRepeat];
      for (const Call &call : calls[nextRepeat]) {
        countUnit();
        CallArg offsets = literal("nullptr");
        if (!call.offsets.empty())
          offsets = Value(emitc::VariableOp::create(
              builder, loc,
              emitc::ArrayType::get(
                  {static_cast<int64_t>(call.offsets.size())},
                  builder.getI64Type()),
              literal(shapeLiteral(call.offsets))));
        callArgs(call.block,
                 {program, builder.getI64IntegerAttr(call.firstOp),
                  builder.getI64IntegerAttr(call.firstCollective), offsets});
      }
      i += repeat.length * repeat.count;
      ++nextRepeat;
      continue;
    }
    if (ops[i].runsKernel)
      countUnit();
    if (failed(emitOp(ops[i])))
      return failure();
    ++i;
  }

  // Every collective completes before the function's results are read.
  if (collectives > 0)
    callVoid("dsrt::collectives_done", {program}, {builder.getIndexAttr(0)});

  // Results that update a parameter or state and could not be computed in
  // its buffer are copied there now.
  Operation *terminator = body.getTerminator();
  struct Update {
    size_t result;
    Value from;
    BlockArgument to;
  };
  SmallVector<Update> copies;
  for (auto [i, result] : llvm::enumerate(terminator->getOperands())) {
    auto updates = function.getResultAttrOfType<IntegerAttr>(
        i, ds::DsDialect::kUpdatesAttrName);
    if (!updates)
      continue;
    BlockArgument target = body.getArgument(updates.getInt());
    int64_t targetOffset = offsetOf.lookup(target);
    auto source = offsetOf.find(result);
    if (source != offsetOf.end() && source->second == targetOffset &&
        spaceOfValue(result) == spaceOfValue(target))
      continue;
    if (spaceOfValue(result) != ds::MemorySpace::device ||
        spaceOfValue(target) != ds::MemorySpace::device)
      return function.emitOpError()
             << "result " << i << " updates argument " << updates.getInt()
             << " of the " << ds::stringifyMemorySpace(spaceOfValue(target))
             << " space from another buffer; the offload pass updates "
                "states of the host and file spaces in place";
    if (isa<BlockArgument>(result))
      return function.emitOpError()
             << "result " << i << " updates argument " << updates.getInt()
             << " with another argument";
    copies.push_back({i, result, target});
  }
  SmallVector<std::string> copyRows;
  if (asTable(copies.size()))
    for (auto [i, from, to] : copies) {
      std::optional<std::string> source = viewRow(from), target = viewRow(to);
      if (!source || !target)
        break;
      auto type = cast<RankedTensorType>(from.getType());
      copyRows.push_back("{" + std::to_string(offsetOf.lookup(from)) + ", " +
                         std::to_string(offsetOf.lookup(to)) + ", " +
                         dtypeName(type.getElementType()) + ", " +
                         tableShape(type) + "}");
    }
  if (!copies.empty() && copyRows.size() == copies.size()) {
    Value table = emitTable(opaque("dsrt::CopyRow"), copyRows, kernelsBefore);
    callVoid("dsrt::copy_all", {stream, arena, table},
             {builder.getIndexAttr(0), builder.getIndexAttr(1),
              builder.getIndexAttr(2), builder.getI64IntegerAttr(copies.size())});
  } else {
    for (auto [i, from, to] : copies) {
      FailureOr<Value> source = viewOf(from), target = viewOf(to);
      if (failed(source) || failed(target))
        return function.emitOpError() << "result " << i << " has no buffer";
      callVoid("dsrt::copy", {stream, *source, *target},
               {builder.getIndexAttr(0), builder.getIndexAttr(1),
                builder.getIndexAttr(2)});
    }
  }

  // Outputs are read by the runtime from their views after the run; record
  // where each one is.
  int64_t output = 0;
  for (auto [i, result] : llvm::enumerate(terminator->getOperands())) {
    if (function.getResultAttr(i, ds::DsDialect::kUpdatesAttrName))
      continue;
    FailureOr<Value> tensor = viewOf(result);
    if (failed(tensor))
      return function.emitOpError() << "result " << i << " has no buffer";
    callVoid("dsrt::set_output", {program, *tensor},
             {builder.getIndexAttr(0), builder.getI64IntegerAttr(output++),
              builder.getIndexAttr(1)});
  }
  emitc::ReturnOp::create(builder, loc, Value());

  // The run function: the parts in order.
  builder.setInsertionPointToEnd(module.getBody());
  auto run = emitc::FuncOp::create(
      builder, loc, (prefix + name).str(),
      builder.getFunctionType({opaque("dsrt::Program&")}, {}));
  Block *entry = run.addEntryBlock();
  builder.setInsertionPointToEnd(entry);
  for (const std::string &part : parts)
    callVoid(part, {entry->getArgument(0)}, {builder.getIndexAttr(0)});
  emitc::ReturnOp::create(builder, loc, Value());
  return success();
}

void ProgramBuilder::emitParams(Value info, llvm::StringSet<> &seen) {
  auto index0 = builder.getIndexAttr(0);
  auto str = [&](StringRef text) { return literal(cppString(text)); };
  auto i64 = [&](int64_t v) { return builder.getI64IntegerAttr(v); };
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    auto type = cast<RankedTensorType>(function.getArgument(i).getType());
    int64_t offset = function
                         .getArgAttrOfType<IntegerAttr>(
                             i, ds::DsDialect::kOffsetAttrName)
                         .getInt();
    Attribute dtype = literal(dtypeName(type.getElementType()));
    Attribute shape = literal(shapeLiteral(type.getShape()));
    if (auto state = function.getArgAttrOfType<ds::StateAttr>(
            i, ds::DsDialect::kStateAttrName)) {
      std::string name = ds::getDisplayName(state);
      if (!seen.insert("state:" + name).second)
        continue;
      if (outlineRepeats)
        stateRows.push_back("{" + cppString(name) + ", " +
                            dtypeName(type.getElementType()) + ", " +
                            tableShape(type) + ", " + std::to_string(offset) +
                            ", " + runtimeRole(state).str() + ", " +
                            cppString(state.getParam()) + "}");
      else
        callVoid("dsrt::add_state", {info},
                 {index0, str(name), dtype, shape, i64(offset),
                  literal(runtimeRole(state)), str(state.getParam())});
      continue;
    }
    auto param = function.getArgAttrOfType<ds::ParamAttr>(
        i, ds::DsDialect::kParamAttrName);
    if (!param ||
        !seen.insert(("param:" + param.getName()).str()).second)
      continue;
    auto external = dyn_cast<ds::ExternalDataAttr>(param.getData());
    // The model's value is f32 where the argument is ds-precision's 16-bit
    // working copy (ds.param's rule); the runtime converts it when loading.
    Type element = type.getElementType();
    Type stored = element;
    if (auto elements = dyn_cast<ElementsAttr>(param.getData()))
      stored = elements.getElementType();
    else if (element.isBF16() || element.isF16())
      stored = builder.getF32Type();
    Attribute storedDtype = literal(dtypeName(stored));
    auto tpSplit = function.getArgAttrOfType<ds::TensorSplitAttr>(
        i, ds::DsDialect::kTpSplitAttrName);
    if (external && outlineRepeats && !tpSplit) {
      auto whole = function.getArgAttrOfType<TypeAttr>(
          i, ds::DsDialect::kShardedAttrName);
      auto wholeType =
          whole ? cast<RankedTensorType>(whole.getValue()) : RankedTensorType();
      paramRows.push_back(
          "{" + cppString(param.getName()) + ", " + dtypeName(stored) + ", " +
          tableShape(type) + ", " + std::to_string(offset) + ", " +
          (param.getTrainable() ? "true" : "false") + ", " +
          cppString(external.getLocation()) + ", " +
          std::to_string(external.getOffset()) + ", " +
          std::to_string(external.getLength()) + ", " +
          std::to_string(wholeType ? wholeType.getNumElements() : 0) + ", " +
          (wholeType ? tableShape(wholeType) : "{0, {}}") + ", " +
          dtypeName(element) + "}");
      continue;
    }
    auto workingCopy = [&] {
      if (stored != element)
        callVoid("dsrt::set_param_working_copy", {info}, {index0, dtype});
    };
    if (external) {
      flushTable("dsrt::ParamFileRow", "dsrt::add_param_files", paramRows, info);
      callVoid("dsrt::add_param_file", {info},
               {index0, str(param.getName()), storedDtype, shape, i64(offset),
                builder.getBoolAttr(param.getTrainable()),
                str(external.getLocation()), i64(external.getOffset()),
                i64(external.getLength())});
      workingCopy();
      emitShard(info, i);
      continue;
    }
    // Small parameters carry their value; it becomes a static array. The
    // parameters before it are described first, to keep their order.
    flushTable("dsrt::ParamFileRow", "dsrt::add_param_files", paramRows, info);
    OpBuilder::InsertionGuard guard(builder);
    auto value = cast<DenseElementsAttr>(param.getData());
    auto constant = ds::ConstantOp::create(builder, loc, value);
    FailureOr<Value> data = constantView(constant, /*onHost=*/true);
    constant.erase();
    callVoid("dsrt::add_param_data", {info, *data},
             {index0, str(param.getName()), builder.getIndexAttr(1),
              i64(offset), builder.getBoolAttr(param.getTrainable())});
    workingCopy();
    emitShard(info, i);
  }
}

Value ProgramBuilder::emitTable(Type rowType, ArrayRef<std::string> rows,
                               Operation *before) {
  std::string name = prefix + "table_" + std::to_string(tables++);
  auto arrayType =
      emitc::ArrayType::get({static_cast<int64_t>(rows.size())}, rowType);
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(before);
    emitc::GlobalOp::create(
        builder, loc, name, arrayType,
        literal("{\n  " + llvm::join(rows, ",\n  ") + "}"),
        /*externSpecifier=*/false, /*staticSpecifier=*/true,
        /*constSpecifier=*/true);
  }
  return emitc::GetGlobalOp::create(builder, loc, arrayType, name);
}

void ProgramBuilder::flushTable(StringRef rowType, StringRef adder,
                                SmallVectorImpl<std::string> &rows,
                                Value info) {
  if (rows.empty())
    return;
  Value table = emitTable(opaque(rowType), rows, describeFunction);
  callVoid(adder, {info, table},
           {builder.getIndexAttr(0), builder.getIndexAttr(1),
            builder.getI64IntegerAttr(rows.size())});
  rows.clear();
}

/// A parameter each rank holds a piece of (ds.tp_split: the model's tensor,
/// split over tp) and a shard of (ds.sharded: the piece's size and shape,
/// sharded along dp), so that each rank loads its own bytes.
void ProgramBuilder::emitShard(Value info, unsigned arg) {
  if (auto split = function.getArgAttrOfType<ds::TensorSplitAttr>(
          arg, ds::DsDialect::kTpSplitAttrName)) {
    // The piece (the whole of a dp-sharded one), times the ranks along dim
    // (a padded axis: its model extent).
    auto piece = cast<RankedTensorType>(function.getArgument(arg).getType());
    if (auto whole = function.getArgAttrOfType<TypeAttr>(
            arg, ds::DsDialect::kShardedAttrName))
      piece = cast<RankedTensorType>(whole.getValue());
    SmallVector<int64_t> model(piece.getShape());
    model[split.getDim()] = split.wholeExtent(model[split.getDim()]);
    callVoid("dsrt::set_param_tp_split", {info},
             {builder.getIndexAttr(0), builder.getI64IntegerAttr(split.getDim()),
              builder.getI64IntegerAttr(split.getBlocks()),
              literal(shapeLiteral(model)),
              builder.getBoolAttr(split.getWhole() != 0)});
  }
  auto whole = function.getArgAttrOfType<TypeAttr>(
      arg, ds::DsDialect::kShardedAttrName);
  if (!whole)
    return;
  auto type = cast<RankedTensorType>(whole.getValue());
  callVoid("dsrt::set_param_shard", {info},
           {builder.getIndexAttr(0),
            builder.getI64IntegerAttr(type.getNumElements()),
            literal(shapeLiteral(type.getShape()))});
}

/// The device grid (shard.grid @grid with ds.axes), if the program is
/// data-parallel.
void ProgramBuilder::emitGrid(Value info) {
  for (auto grid : module.getOps<shard::GridOp>()) {
    ds::GridAxesAttr names = ds::getDeviceGridAxes(grid);
    std::string axes, sizes;
    for (auto [i, size] : llvm::enumerate(grid.getShape())) {
      axes += (i ? "," : "") +
              (names && i < names.size()
                   ? ds::stringifyEnum(names.getAxes()[i]).str()
                   : "axis" + std::to_string(i));
      sizes += (i ? ", " : "") + std::to_string(size);
    }
    callVoid("dsrt::set_grid", {info},
             {builder.getIndexAttr(0), literal(cppString(axes)),
              literal("std::array<int64_t, " +
                      std::to_string(grid.getShape().size()) + ">{" + sizes +
                      "}.data()"),
              builder.getI64IntegerAttr(grid.getShape().size())});
  }
}

void ProgramBuilder::emitFunctionInterface(Value info, func::FuncOp emitted) {
  function = emitted;
  auto index0 = builder.getIndexAttr(0);
  auto str = [&](StringRef text) { return literal(cppString(text)); };
  auto i64 = [&](int64_t v) { return builder.getI64IntegerAttr(v); };
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    auto name = function.getArgAttrOfType<StringAttr>(
        i, ds::DsDialect::kInputAttrName);
    if (!name)
      continue;
    auto type = cast<RankedTensorType>(function.getArgument(i).getType());
    int64_t offset = function
                         .getArgAttrOfType<IntegerAttr>(
                             i, ds::DsDialect::kOffsetAttrName)
                         .getInt();
    SmallVector<Attribute> args{
        index0, str(name.getValue()), literal(dtypeName(type.getElementType())),
        literal(shapeLiteral(type.getShape())), i64(offset)};
    std::optional<ds::ValueRole> role = ds::getArgumentRole(function, i);
    if (role) {
      args[1] = str(ds::getDisplayName(*role, name.getValue()));
      args.push_back(literal(runtimeRole(*role)));
    }
    callVoid("dsrt::add_input", {info}, args);
    // An index input's valid values, which the runners check in the data
    // files before training (a pipeline's received or stashed values are
    // not data).
    if (!role && isa<IntegerType>(type.getElementType())) {
      IndexRange range = indexRange(function.getArgument(i));
      if (range.bounded && range.lo < range.hi)
        callVoid("dsrt::set_input_range", {info},
                 {index0, i64(range.lo), i64(range.hi),
                  builder.getBoolAttr(range.ignore.has_value()), i64(range.ignore.value_or(0))});
    }
  }

  for (unsigned i = 0; i < function.getNumResults(); ++i) {
    if (function.getResultAttr(i, ds::DsDialect::kUpdatesAttrName))
      continue;
    auto name = function.getResultAttrOfType<StringAttr>(
        i, ds::DsDialect::kOutputAttrName);
    auto type = cast<RankedTensorType>(function.getResultTypes()[i]);
    SmallVector<Attribute> args{
        index0, str(name ? name.getValue() : "output_" + std::to_string(i)),
        literal(dtypeName(type.getElementType())),
        literal(shapeLiteral(type.getShape()))};
    if (std::optional<ds::ValueRole> role = ds::getResultRole(function, i)) {
      args[1] = str(ds::getDisplayName(*role, name.getValue()));
      args.push_back(literal(runtimeRole(*role)));
    }
    callVoid("dsrt::add_output", {info}, args);
  }

  for (Operation &op : function.getBody().front().without_terminator()) {
    auto kernel = dyn_cast<ds::KernelOpInterface>(op);
    if (!kernel || kernel.getAliasedOperand())
      continue; // constants and views execute nothing
    std::string where = ds::getNodeName(op.getLoc());
    auto cost = dyn_cast<ds::CostOpInterface>(op);
    if (outlineRepeats) {
      opRows.push_back("{" + cppString(op.getName().getStringRef()) + ", " +
                       cppString(where) + ", " +
                       std::to_string(cost ? cost.getFlops() : 0) + ", " +
                       std::to_string(cost ? cost.getBytesAccessed() : 0) +
                       "}");
      continue;
    }
    SmallVector<Attribute> args{index0, str(op.getName().getStringRef()),
                                str(where), i64(cost ? cost.getFlops() : 0),
                                i64(cost ? cost.getBytesAccessed() : 0)};
    callVoid("dsrt::add_op", {info}, args);
  }
  flushTable("dsrt::OpRow", "dsrt::add_ops", opRows, info);

  // The bytes the function's transfers move between spaces per run, which
  // the runner checks against what they measure.
  std::map<std::pair<ds::MemorySpace, ds::MemorySpace>, int64_t> moved;
  function.walk([&](ds::TransferOp transfer) {
    moved[{transfer.getFrom(), transfer.getTo()}] +=
        ds::getByteSize(cast<ShapedType>(transfer.getInput().getType()))
            .value_or(0);
  });
  auto spaceLiteral = [&](ds::MemorySpace space) {
    return literal(runtimeSpace(space));
  };
  for (auto [direction, bytes] : moved)
    callVoid("dsrt::set_transfer_bytes", {info},
             {index0, spaceLiteral(direction.first),
              spaceLiteral(direction.second), i64(bytes)});
}

/// The training recipe (module attribute ds.train): optimizer, gradient
/// accumulation, micro-batch and learning-rate schedule.
void ProgramBuilder::emitTraining(Value info) {
  auto train = module->getAttrOfType<DictionaryAttr>(
      ds::DsDialect::kTrainAttrName);
  auto index0 = builder.getIndexAttr(0);
  auto str = [&](StringRef text) { return literal(cppString(text)); };
  // A value of the recipe `dict` (ds.train or a dictionary in it).
  auto realIn = [&](DictionaryAttr dict, StringRef key,
                    double fallback) -> Attribute {
    auto value = dict ? dict.getAs<FloatAttr>(key) : FloatAttr();
    return builder.getF64FloatAttr(value ? value.getValueAsDouble()
                                         : fallback);
  };
  auto integerIn = [&](DictionaryAttr dict, StringRef key,
                       int64_t fallback) -> Attribute {
    auto value = dict ? dict.getAs<IntegerAttr>(key) : IntegerAttr();
    return builder.getI64IntegerAttr(value ? value.getInt() : fallback);
  };
  auto real = [&](StringRef key, double fallback) {
    return realIn(train, key, fallback);
  };
  auto integer = [&](StringRef key, int64_t fallback) {
    return integerIn(train, key, fallback);
  };
  auto text = [&](StringRef key, StringRef fallback) -> Attribute {
    auto value = train ? train.getAs<StringAttr>(key) : StringAttr();
    return str(value ? value.getValue() : fallback);
  };
  // The micro-batch is the leading axis of the micro step's inputs.
  int64_t microBatch = 1;
  // (Pipeline stages also take received and stashed values, which are not
  // data.)
  for (BlockArgument arg : functions.front().getArguments())
    if (functions.front().getArgAttr(arg.getArgNumber(),
                                     ds::DsDialect::kInputAttrName) &&
        !ds::getArgumentRole(functions.front(), arg.getArgNumber())) {
      auto type = cast<RankedTensorType>(arg.getType());
      if (type.getRank() > 0) {
        microBatch = type.getDimSize(0);
        break;
      }
    }
  callVoid("dsrt::set_training", {info},
           {index0, text("optimizer", "AdamW"), real("lr", 1e-3),
            real("gradient_clipping", 0.0), integer("accumulation", 1),
            builder.getI64IntegerAttr(microBatch),
            integer("steps_per_print", 1)});
  auto linear = train ? train.getAs<BoolAttr>("warmup_linear") : BoolAttr();
  callVoid("dsrt::set_schedule", {info},
           {index0, text("schedule", "Constant"), real("warmup_min_lr", 0.0),
            real("warmup_max_lr", 1e-3), integer("warmup_num_steps", 1000),
            integer("total_num_steps", 0),
            builder.getBoolAttr(linear && linear.getValue()),
            real("warmup_min_ratio", 0.0), real("cos_min_ratio", 1e-4)});
  // fp16: the loss scaler's settings (ds-optimizer loss-scale-input).
  // (DeepSpeed's defaults where a key is missing.)
  if (auto scaler = train ? train.getAs<DictionaryAttr>("loss_scaler")
                          : DictionaryAttr()) {
    auto consecutive = scaler.getAs<BoolAttr>("consecutive_hysteresis");
    callVoid("dsrt::set_loss_scaler", {info},
             {index0, realIn(scaler, "loss_scale", 0.0),
              integerIn(scaler, "initial_scale_power", 16),
              integerIn(scaler, "loss_scale_window", 1000),
              integerIn(scaler, "hysteresis", 2),
              builder.getBoolAttr(consecutive && consecutive.getValue()),
              realIn(scaler, "min_loss_scale", 1.0)});
  }
}

/// A pipeline rank (ds.pipeline_rank): its stages and their functions, its
/// action list, its buffer pools and the accumulators it shares.
void ProgramBuilder::emitPipeline(Value info) {
  auto rank = module->getAttrOfType<ds::PipelineRankAttr>(
      ds::DsDialect::kPipelineRankAttrName);
  auto index0 = builder.getIndexAttr(0);
  auto str = [&](StringRef text) { return literal(cppString(text)); };
  auto i64 = [&](int64_t v) { return builder.getI64IntegerAttr(v); };
  auto name = [&](FlatSymbolRefAttr function) {
    return str(ds::PipelineRankStageAttr::nameOf(function));
  };
  callVoid("dsrt::set_pipeline", {info},
           {index0, str(ds::stringifyEnum(rank.getSchedule())),
            i64(rank.getStages()), i64(rank.getChunks()),
            i64(rank.getMicrobatches()), i64(rank.getRank()),
            i64(rank.getBuffersOffset().value_or(0)),
            i64(rank.getBuffersBytes().value_or(0))});
  for (ds::PipelineRankStageAttr stage : rank.getVirtualStages())
    callVoid("dsrt::add_pipeline_stage", {info},
             {index0, i64(stage.getStage()), name(stage.getForward()),
              name(stage.getBackward()), name(stage.getBackwardInput()),
              name(stage.getBackwardWeight())});
  // The runtime's action kinds are pipeline::ActionKind's values, which
  // ds::PipelineActionKind keeps.
  for (ds::PipelineActionAttr action : rank.getActions())
    callVoid("dsrt::add_pipeline_action", {info},
             {index0, i64(static_cast<int64_t>(action.getKind())),
              i64(action.getMicrobatch()), i64(action.getChunk()),
              i64(action.getPeer())});
  for (ds::PipelinePoolAttr pool : rank.getPools())
    callVoid("dsrt::add_pipeline_pool", {info},
             {index0, str(ds::stringifyEnum(pool.getKind())),
              i64(pool.getStage()), i64(pool.getSlots()),
              i64(pool.getSlotBytes().value_or(0)),
              i64(pool.getOffset().value_or(0))});
  for (ds::PipelineRankTiedAttr tied : rank.getTied()) {
    ArrayRef<int64_t> ranks = tied.getRanks();
    std::string list = llvm::join(
        llvm::map_range(ranks, [](int64_t r) { return std::to_string(r); }),
        ", ");
    callVoid("dsrt::add_pipeline_tied", {info},
             {index0, str(tied.getState().getParam()),
              literal("std::array<int64_t, " + std::to_string(ranks.size()) +
                      ">{" + list + "}.data()"),
              i64(static_cast<int64_t>(ranks.size()))});
  }
}

/// The host and file spaces' arenas, and the persistent values placed in
/// them (#ds.space); nothing while every buffer is in device memory.
void ProgramBuilder::emitSpaces(Value info, ds::MemoryPlanAttr plan) {
  auto index0 = builder.getIndexAttr(0);
  auto i64 = [&](int64_t v) { return builder.getI64IntegerAttr(v); };
  auto spaceLiteral = [&](ds::MemorySpace space) {
    return literal(runtimeSpace(space));
  };
  for (ds::MemorySpace space : {ds::MemorySpace::host, ds::MemorySpace::file})
    if (plan.getSpaceBytes(space) > 0)
      callVoid("dsrt::set_space_plan", {info},
               {index0, spaceLiteral(space), i64(plan.getSpaceBytes(space)),
                i64(plan.getSpacePersistentBytes(space))});
  // offload_param.pin_memory false (parameters alone in the host space).
  if (plan.getSpaceBytes(ds::MemorySpace::host) > 0 && !functions.empty() &&
      !isHostArenaPinned(functions.front()->getParentOfType<ModuleOp>()))
    callVoid("dsrt::set_host_space_pinned", {info},
             {index0, literal("false")});
  if (plan.getSpaceBytes(ds::MemorySpace::file) > 0 && !nvmePath.empty())
    callVoid("dsrt::set_file_space_dir", {info},
             {index0, literal(cppString(nvmePath))});
  if (plan.getSpaceBytes(ds::MemorySpace::file) > 0)
    callVoid("dsrt::set_file_space_io", {info},
             {index0, i64(aioBlockSize), i64(aioQueueDepth),
              i64(aioIntraOpParallelism),
              literal(aioSingleSubmit ? "true" : "false"),
              literal(aioOverlapEvents ? "true" : "false")});
  llvm::StringSet<> placed;
  for (func::FuncOp each : functions)
    for (unsigned i = 0; i < each.getNumArguments(); ++i) {
      auto space = each.getArgAttrOfType<ds::MemorySpaceAttr>(
          i, ds::DsDialect::kSpaceAttrName);
      if (!space || space.getValue() == ds::MemorySpace::device)
        continue;
      std::string name = persistentName(each, i);
      if (!name.empty() && placed.insert(name).second)
        callVoid("dsrt::place_in_space", {info},
                 {index0, literal(cppString(name)),
                  spaceLiteral(space.getValue())});
    }
}

void ProgramBuilder::emitDescribe() {
  builder.setInsertionPointToEnd(module.getBody());
  auto describe = emitc::FuncOp::create(
      builder, loc, prefix + "describe",
      builder.getFunctionType({opaque("dsrt::ProgramInfo&")}, {}));
  describeFunction = describe;
  Block *entry = describe.addEntryBlock();
  builder.setInsertionPointToEnd(entry);
  Value info = entry->getArgument(0);
  auto index0 = builder.getIndexAttr(0);
  auto str = [&](StringRef text) { return literal(cppString(text)); };
  auto i64 = [&](int64_t v) { return builder.getI64IntegerAttr(v); };

  if (!modelPath.empty())
    callVoid("dsrt::set_model", {info}, {index0, str(modelPath)});
  // A training program's functions share the module's arena.
  auto plan = module->getAttrOfType<ds::MemoryPlanAttr>(
      ds::DsDialect::kMemoryPlanAttrName);
  if (!plan)
    plan = functions.front()->getAttrOfType<ds::MemoryPlanAttr>(
        ds::DsDialect::kMemoryPlanAttrName);
  callVoid("dsrt::set_memory_plan", {info},
           {index0, i64(plan.getArenaBytes()), i64(plan.getPersistentBytes()),
            i64(plan.getPeakLiveBytes()), i64(plan.getAlignment())});

  emitGrid(info);
  llvm::StringSet<> seen;
  for (func::FuncOp each : functions) {
    function = each;
    emitParams(info, seen);
  }
  flushTable("dsrt::ParamFileRow", "dsrt::add_param_files", paramRows, info);
  flushTable("dsrt::StateRow", "dsrt::add_states", stateRows, info);
  emitSpaces(info, plan);
  if (isTraining()) {
    emitTraining(info);
    for (func::FuncOp each : functions) {
      auto functionPlan = each->getAttrOfType<ds::MemoryPlanAttr>(
          ds::DsDialect::kMemoryPlanAttrName);
      callVoid("dsrt::begin_function", {info},
               {index0, str(each.getSymName()),
                i64(functionPlan.getArenaBytes()),
                i64(functionPlan.getPeakLiveBytes())});
      emitFunctionInterface(info, each);
    }
    if (isPipelined())
      emitPipeline(info);
  } else {
    emitFunctionInterface(info, functions.front());
  }
  emitc::ReturnOp::create(builder, loc, Value());
}

void ProgramBuilder::emitMain() {
  builder.setInsertionPointToEnd(module.getBody());
  // `int main(int, char**)`, spelled as C++ requires.
  Type i32 = opaque("int");
  auto argvType = emitc::PointerType::get(
      emitc::PointerType::get(opaque("char")));
  auto main = emitc::FuncOp::create(builder, loc, "main",
                                    builder.getFunctionType({i32, argvType},
                                                            {i32}));
  Block *entry = main.addEntryBlock();
  builder.setInsertionPointToEnd(entry);
  if (cudaTarget())
    emitCudaDeviceCheck(builder, loc, entry->getArgument(1));
  Value status =
      isTraining()
          ? call("dsrt::train_main", i32,
                 {entry->getArgument(0), entry->getArgument(1)},
                 {builder.getIndexAttr(0), builder.getIndexAttr(1),
                  literal(prefix + "describe"),
                  literal(prefix + functions[0].getSymName().str()),
                  literal(prefix + functions[1].getSymName().str())})
          : call("dsrt::forward_main", i32,
                 {entry->getArgument(0), entry->getArgument(1)},
                 {builder.getIndexAttr(0), builder.getIndexAttr(1),
                  literal(prefix + "describe"), literal(prefix + "run")});
  emitc::ReturnOp::create(builder, loc, status);
}

LogicalResult ProgramBuilder::build() {
  builder.setInsertionPointToStart(module.getBody());
  emitc::IncludeOp::create(builder, loc, "dsrt/program.h",
                           /*isStandardInclude=*/false);
  if (cudaTarget())
    emitc::IncludeOp::create(builder, loc, "dsrt/cuda_launch.h",
                             /*isStandardInclude=*/false);
  if (outlineRepeats)
    emitc::IncludeOp::create(builder, loc, "dsrt/tables.h",
                             /*isStandardInclude=*/false);
  for (func::FuncOp each : functions)
    if (failed(emitRun(each, isTraining() ? each.getSymName() : "run")))
      return failure();
  emitDescribe();
  if (isPipelined()) {
    // One pipeline rank of an executable holding all of them: its
    // description and run functions for dsrt::pipeline_main.
    builder.setInsertionPointToEnd(module.getBody());
    std::string table = "static const dsrt::RunFn " + prefix + "functions[] = {";
    for (auto [i, each] : llvm::enumerate(functions))
      table += (i ? ", " : "") + prefix + each.getSymName().str();
    table += "};\nconst dsrt::PipelineRankProgram " + prefix + "program = {" +
             prefix + "describe, " + prefix + "functions, " +
             std::to_string(functions.size()) + "};";
    emitc::VerbatimOp::create(builder, loc, table);
  } else if (withMain) {
    emitMain();
  }
  return success();
}


//===----------------------------------------------------------------------===//
// Generated kernels of ds.fused
//===----------------------------------------------------------------------===//

namespace {
/// How an element type is stored in C++ and converted to and from its
/// compute type.
struct Storage {
  Type type;            // the C++ element type
  StringRef load = "";  // storage -> compute conversion, if any
  StringRef store = ""; // compute -> storage conversion, if any
};

Storage storageOf(Type element) {
  MLIRContext *context = element.getContext();
  auto u16 = IntegerType::get(context, 16, IntegerType::Unsigned);
  if (element.isF16())
    return {u16, "dsrt::math::half_to_float", "dsrt::math::float_to_half"};
  if (element.isBF16())
    return {u16, "dsrt::math::bfloat_to_float", "dsrt::math::float_to_bfloat"};
  return {element};
}

/// Fused loops smaller than this run on one thread: a parallel region costs
/// more than it saves.
constexpr int64_t kParallelElements = 1 << 15;
} // namespace

FailureOr<Value> ProgramBuilder::emitScalar(Operation &op,
                                            ArrayRef<Value> operands) {
  Location opLoc = op.getLoc();
  Type type = op.getNumResults() ? op.getResult(0).getType() : Type();
  auto callOne = [&](StringRef callee) -> Value {
    SmallVector<Attribute> args;
    for (unsigned i = 0; i < operands.size(); ++i)
      args.push_back(builder.getIndexAttr(i));
    return call(callee, type, operands, args);
  };
  auto cmpPredicate = [](StringRef name) -> std::optional<emitc::CmpPredicate> {
    return llvm::StringSwitch<std::optional<emitc::CmpPredicate>>(name)
        .Cases({"oeq", "eq"}, emitc::CmpPredicate::eq)
        .Cases({"une", "ne"}, emitc::CmpPredicate::ne)
        .Cases({"olt", "slt", "ult"}, emitc::CmpPredicate::lt)
        .Cases({"ole", "sle", "ule"}, emitc::CmpPredicate::le)
        .Cases({"ogt", "sgt", "ugt"}, emitc::CmpPredicate::gt)
        .Cases({"oge", "sge", "uge"}, emitc::CmpPredicate::ge)
        .Default(std::nullopt);
  };
  return llvm::TypeSwitch<Operation *, FailureOr<Value>>(&op)
      .Case<arith::ConstantOp>([&](arith::ConstantOp constant) -> Value {
        return emitc::ConstantOp::create(builder, opLoc, type,
                                         constant.getValue());
      })
      .Case<arith::AddFOp, arith::AddIOp>([&](auto) -> Value {
        return emitc::AddOp::create(builder, opLoc, type, operands[0],
                                    operands[1]);
      })
      .Case<arith::SubFOp, arith::SubIOp>([&](auto) -> Value {
        return emitc::SubOp::create(builder, opLoc, type, operands[0],
                                    operands[1]);
      })
      .Case<arith::MulFOp, arith::MulIOp>([&](auto) -> Value {
        return emitc::MulOp::create(builder, opLoc, type, operands[0],
                                    operands[1]);
      })
      .Case<arith::DivFOp, arith::DivSIOp>([&](auto) -> Value {
        return emitc::DivOp::create(builder, opLoc, type, operands[0],
                                    operands[1]);
      })
      .Case<arith::NegFOp>([&](auto) -> Value {
        return emitc::UnaryMinusOp::create(builder, opLoc, type, operands[0]);
      })
      .Case<arith::MaximumFOp>(
          [&](auto) { return callOne("dsrt::math::maximum"); })
      .Case<arith::MaxSIOp>([&](auto) { return callOne("std::max"); })
      .Case<arith::XOrIOp>([&](auto) -> Value {
        return emitc::BitwiseXorOp::create(builder, opLoc, type, operands[0],
                                           operands[1]);
      })
      .Case<arith::CmpFOp>([&](arith::CmpFOp cmp) -> FailureOr<Value> {
        auto predicate =
            cmpPredicate(arith::stringifyCmpFPredicate(cmp.getPredicate()));
        if (!predicate)
          return cmp.emitOpError() << "has no C++ form in a fused loop";
        return emitc::CmpOp::create(builder, opLoc, type, *predicate,
                                    operands[0], operands[1])
            .getResult();
      })
      .Case<arith::CmpIOp>([&](arith::CmpIOp cmp) -> FailureOr<Value> {
        auto predicate =
            cmpPredicate(arith::stringifyCmpIPredicate(cmp.getPredicate()));
        if (!predicate)
          return cmp.emitOpError() << "has no C++ form in a fused loop";
        return emitc::CmpOp::create(builder, opLoc, type, *predicate,
                                    operands[0], operands[1])
            .getResult();
      })
      .Case<arith::SelectOp>([&](auto) -> Value {
        return emitc::ConditionalOp::create(builder, opLoc, type, operands[0],
                                            operands[1], operands[2]);
      })
      .Case<arith::FPToSIOp>([&](arith::FPToSIOp cast) -> Value {
        // Saturating, like the cast kernel; the template argument names the
        // integer type (it cannot be deduced from the float operand).
        std::string callee =
            "dsrt::math::float_to_int<int" +
            std::to_string(cast.getType().getIntOrFloatBitWidth()) + "_t>";
        return call(callee, type, operands, {builder.getIndexAttr(0)});
      })
      .Case<arith::SIToFPOp, arith::UIToFPOp, arith::ExtSIOp, arith::ExtUIOp,
            arith::TruncIOp>([&](auto) -> Value {
        return emitc::CastOp::create(builder, opLoc, type, operands[0]);
      })
      .Case<math::SqrtOp>([&](auto) { return callOne("std::sqrt"); })
      .Case<math::LogOp>([&](auto) { return callOne("std::log"); })
      .Case<math::PowFOp>([&](auto) { return callOne("std::pow"); })
      .Case<math::ExpOp>([&](auto) { return callOne("dsrt::math::fast_exp"); })
      .Case<math::TanhOp>(
          [&](auto) { return callOne("dsrt::math::fast_tanh"); })
      .Case<math::ErfOp>([&](auto) { return callOne("dsrt::math::fast_erf"); })
      .Case<math::Log1pOp>([&](auto) { return callOne("std::log1p"); })
      .Case<arith::RemFOp>([&](auto) { return callOne("std::fmod"); })
      .Case<arith::RemSIOp>([&](auto) -> Value {
        return emitc::RemOp::create(builder, opLoc, type, operands[0],
                                    operands[1]);
      })
      .Case<arith::AndIOp>([&](auto) -> Value {
        return emitc::BitwiseAndOp::create(builder, opLoc, type, operands[0],
                                           operands[1]);
      })
      .Case<math::ExpM1Op>([&](auto) { return callOne("std::expm1"); })
      .Case<math::SinOp>([&](auto) { return callOne("std::sin"); })
      .Case<math::CosOp>([&](auto) { return callOne("std::cos"); })
      .Case<math::FloorOp>([&](auto) { return callOne("std::floor"); })
      .Case<math::CeilOp>([&](auto) { return callOne("std::ceil"); })
      .Case<math::RoundEvenOp>([&](auto) { return callOne("std::nearbyint"); })
      .Default([&](Operation *other) -> FailureOr<Value> {
        return other->emitOpError() << "has no C++ form in a fused loop";
      });
}

FailureOr<std::string> ProgramBuilder::emitFusedKernel(ds::FusedOp op) {
  // On cuda the kernel is `<name>_kernel`, launched by `<name>`.
  auto finish = [&](emitc::FuncOp kernel,
                    const std::string &name) -> std::string {
    if (cudaTarget()) {
      kernel.setSymName(name + "_kernel");
      buildFusedLaunch(op, kernel, name);
    } else {
      kernel.setSymName(name);
    }
    return name;
  };
  if (!outlineRepeats) {
    std::string name = prefix + "fused_" + std::to_string(fusedKernels++);
    FailureOr<emitc::FuncOp> kernel = buildFusedKernel(op, name);
    if (failed(kernel))
      return failure();
    return finish(*kernel, name);
  }
  // Layers repeat their fused loops: each distinct one is emitted once.
  FailureOr<emitc::FuncOp> kernel = buildFusedKernel(op, prefix + "fused");
  if (failed(kernel))
    return failure();
  std::string code;
  llvm::raw_string_ostream os(code);
  (*kernel)->print(os, OpPrintingFlags()
                           .enableDebugInfo(false)
                           .assumeVerified()
                           .useLocalScope());
  auto [it, fresh] = fusedByCode.try_emplace(code, "");
  if (!fresh) {
    kernel->erase();
    return it->second;
  }
  it->second = finish(*kernel, prefix + "fused_" +
                                   std::to_string(fusedKernels++));
  return it->second;
}

FailureOr<emitc::FuncOp> ProgramBuilder::buildFusedKernel(ds::FusedOp op,
                                                          StringRef name) {
  return cudaTarget() ? buildFusedCudaKernel(op, name)
                      : buildFusedLoop(op, name);
}

/// The C++ element type a fused op's `value` is stored as.
static Type storageType(Value value) {
  return storageOf(cast<ShapedType>(value.getType()).getElementType()).type;
}

emitc::FuncOp ProgramBuilder::beginFusedHostFunction(ds::FusedOp op,
                                                     StringRef name) {
  builder.setInsertionPoint(kernelsBefore);
  SmallVector<Type> argTypes{opaque("dsrt::Stream&")};
  argTypes.append(op.getInputs().size() + 1, opaque("const dsrt::Tensor&"));
  auto function = emitc::FuncOp::create(builder, op.getLoc(), name,
                                        builder.getFunctionType(argTypes, {}));
  function.setSpecifiersAttr(builder.getStrArrayAttr({"static"}));
  builder.setInsertionPointToEnd(function.addEntryBlock());
  return function;
}

Value ProgramBuilder::elementsOf(Value tensor, Type element) {
  return emitc::CallOpaqueOp::create(
             builder, tensor.getLoc(),
             TypeRange{emitc::PointerType::get(element)}, "dsrt::elements",
             ValueRange{tensor}, builder.getArrayAttr({builder.getIndexAttr(0)}),
             builder.getArrayAttr({TypeAttr::get(element)}))
      .getResult(0);
}

FailureOr<emitc::FuncOp> ProgramBuilder::buildFusedLoop(ds::FusedOp op,
                                                        StringRef name) {
  OpBuilder::InsertionGuard guard(builder);
  Location opLoc = op.getLoc();
  emitc::FuncOp kernel = beginFusedHostFunction(op, name);
  Block *entry = &kernel.getBody().front();
  // Like every libdsrt kernel, wait for asynchronous work the inputs may
  // come from (an all-reduce of the gradient norm).
  emitc::CallOpaqueOp::create(builder, opLoc, TypeRange{},
                              "dsrt::begin_generated_kernel",
                              ValueRange{entry->getArgument(0)});

  auto result = cast<RankedTensorType>(op.getResult().getType());
  ArrayRef<int64_t> outShape = result.getShape();
  int64_t count = result.getNumElements();
  auto i64 = builder.getI64Type();
  auto typedPointer = [&](Value tensor, Value of) {
    return elementsOf(tensor, storageType(of));
  };
  SmallVector<Value> inputPointers;
  for (auto [i, input] : llvm::enumerate(op.getInputs()))
    inputPointers.push_back(typedPointer(entry->getArgument(i + 1), input));
  Value outPointer =
      typedPointer(entry->getArgument(op.getInputs().size() + 1),
                   op.getResult());

  // Literals, printed in place: variables would be shared into the OpenMP
  // region and hide loop bounds and steps from the vectorizer.
  auto constant = [&](int64_t value) -> Value {
    return emitc::LiteralOp::create(builder, opLoc, i64,
                                    std::to_string(value));
  };
  if (count == 0) {
    emitc::ReturnOp::create(builder, opLoc, Value());
    return kernel;
  }
  // Two loops: rows, then the result's last axis, so that inputs broadcast
  // along leading axes (biases, masks, scalars) are read with unit stride in
  // the inner loop, which the compiler vectorizes.
  int64_t inner = outShape.empty() ? 1 : outShape.back();
  int64_t outer = count / inner;
  Value zero = constant(0), one = constant(1), rowCount = constant(outer);
  // The pragma must come right before the loop it parallelizes.
  if (count >= kParallelElements && outer > 1)
    emitc::VerbatimOp::create(builder, opLoc,
                              "#pragma omp parallel for schedule(static)");
  auto rows = emitc::ForOp::create(builder, opLoc, zero, rowCount, one);
  builder.setInsertionPointToStart(rows.getBody());
  Value row = rows.getInductionVar();
  Value rowStart = emitc::MulOp::create(builder, opLoc, i64, row,
                                        constant(inner));
  if (failed(emitFusedElement(
          op, inputPointers, outPointer, row, i64, /*lanes=*/1,
          [&]() -> std::pair<Value, Value> {
            auto columns = emitc::ForOp::create(builder, opLoc, zero,
                                                constant(inner), one);
            builder.setInsertionPointToStart(columns.getBody());
            Value column = columns.getInductionVar();
            return {column, emitc::AddOp::create(builder, opLoc, i64,
                                                 rowStart, column)};
          })))
    return failure();
  builder.setInsertionPointAfter(rows);
  emitc::ReturnOp::create(builder, opLoc, Value());
  return kernel;
}

/// Threads per block of a generated CUDA kernel, and the most blocks a
/// launch uses: a grid-stride loop covers larger results.
constexpr int64_t kCudaThreads = 256;
constexpr int64_t kCudaMaxBlocks = 1 << 16;
/// Bytes a thread of a generated CUDA kernel reads or writes at once per
/// tensor of the result's shape: one 128-bit access.
constexpr int64_t kCudaVectorBytes = 16;

/// The elements a thread of `op`'s CUDA kernel computes at once: as many of
/// the widest element among the result and the inputs of its shape as fit
/// one 128-bit access (1 for a result smaller than that). Where the
/// result's rows are not a multiple of it, a vector may span rows (each lane
/// then finds its row) and the elements after the last whole vector are
/// computed one a thread.
static int64_t fusedLanes(ds::FusedOp op) {
  auto result = cast<RankedTensorType>(op.getResult().getType());
  int64_t widest = 0;
  auto widen = [&](RankedTensorType type) {
    Type element = storageOf(type.getElementType()).type;
    widest = std::max<int64_t>(
        widest, std::max<unsigned>(element.getIntOrFloatBitWidth(), 8) / 8);
  };
  widen(result);
  for (Value input : op.getInputs()) {
    auto type = cast<RankedTensorType>(input.getType());
    if (type.getShape() == result.getShape())
      widen(type);
  }
  int64_t lanes = kCudaVectorBytes / widest;
  return lanes > 1 && result.getNumElements() >= lanes ? lanes : 1;
}

/// The integer type of a generated CUDA kernel's index arithmetic: 32-bit
/// unsigned where every flat index fits (its divisions and remainders by
/// the shapes' constants become a multiply and a shift), else 64-bit.
static Type fusedIndexType(ds::FusedOp op) {
  MLIRContext *context = op.getContext();
  int64_t count =
      cast<RankedTensorType>(op.getResult().getType()).getNumElements();
  if (count < (int64_t(1) << 31))
    return IntegerType::get(context, 32, IntegerType::Unsigned);
  return IntegerType::get(context, 64);
}

FailureOr<emitc::FuncOp>
ProgramBuilder::buildFusedCudaKernel(ds::FusedOp op, StringRef name) {
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPoint(kernelsBefore);
  Location opLoc = op.getLoc();
  // Raw element pointers: the inputs', then the result's.
  SmallVector<Type> argTypes;
  for (Value input : op.getInputs())
    argTypes.push_back(emitc::PointerType::get(storageType(input)));
  argTypes.push_back(emitc::PointerType::get(storageType(op.getResult())));
  auto kernel = emitc::FuncOp::create(builder, opLoc, name,
                                      builder.getFunctionType(argTypes, {}));
  kernel.setSpecifiersAttr(builder.getStrArrayAttr({"static", "__global__"}));
  Block *entry = kernel.addEntryBlock();
  builder.setInsertionPointToEnd(entry);

  auto result = cast<RankedTensorType>(op.getResult().getType());
  ArrayRef<int64_t> outShape = result.getShape();
  int64_t count = result.getNumElements();
  int64_t inner = outShape.empty() ? 1 : outShape.back();
  int64_t lanes = fusedLanes(op);
  Type index = fusedIndexType(op);
  auto literal = [&](StringRef text) -> Value {
    return emitc::LiteralOp::create(builder, opLoc, index, text);
  };
  auto constant = [&](int64_t value) {
    return literal(std::to_string(value));
  };
  // A grid-stride loop over the vectors of `lanes` elements (a grid of at
  // most kCudaMaxBlocks blocks never overflows the 32-bit index).
  auto product = [&](StringRef a, StringRef b) -> Value {
    return emitc::MulOp::create(
        builder, opLoc, index,
        emitc::CastOp::create(builder, opLoc, index, literal(a)), literal(b));
  };
  Value first = emitc::AddOp::create(builder, opLoc, index,
                                     product("blockIdx.x", "blockDim.x"),
                                     literal("threadIdx.x"));
  Value stride = product("gridDim.x", "blockDim.x");
  SmallVector<Value> inputPointers(entry->getArguments().drop_back());
  Value outPointer = entry->getArguments().back();
  // A vector of `lanes` > 1 elements spans rows unless the rows are a
  // multiple of it: its lanes find their rows themselves.
  bool rowPerLane = lanes > 1 && inner % lanes != 0;
  // Elements (lanes 1) or vectors `from` .. `to` of the grid-stride loop.
  auto gridLoop = [&](int64_t from, int64_t to,
                      int64_t loopLanes) -> LogicalResult {
    Value start = from == 0 ? first
                            : Value(emitc::AddOp::create(builder, opLoc, index,
                                                         first,
                                                         constant(from)));
    auto loop =
        emitc::ForOp::create(builder, opLoc, start, constant(to), stride);
    OpBuilder::InsertionGuard inLoop(builder);
    builder.setInsertionPointToStart(loop.getBody());
    Value base = loop.getInductionVar();
    if (loopLanes > 1)
      base = emitc::MulOp::create(builder, opLoc, index, base,
                                  constant(loopLanes));
    if (loopLanes > 1 && rowPerLane)
      return emitFusedElement(op, inputPointers, outPointer, Value(), index,
                              loopLanes, [&]() -> std::pair<Value, Value> {
                                return {Value(), base};
                              });
    Value row =
        emitc::DivOp::create(builder, opLoc, index, base, constant(inner));
    Value column;
    if (failed(emitFusedElement(
            op, inputPointers, outPointer, row, index, loopLanes,
            [&]() -> std::pair<Value, Value> {
              column = emitc::SubOp::create(
                  builder, opLoc, index, base,
                  emitc::MulOp::create(builder, opLoc, index, row,
                                       constant(inner)));
              return {column, base};
            })))
      return failure();
    // Most inputs need neither: left out, the kernel reads better.
    if (column.use_empty()) {
      Operation *rowTimesInner =
          column.getDefiningOp()->getOperand(1).getDefiningOp();
      column.getDefiningOp()->erase();
      rowTimesInner->erase();
    }
    if (row.use_empty())
      row.getDefiningOp()->erase();
    return success();
  };
  // The vectors, then the elements after the last whole vector (fewer than
  // `lanes`, one a thread).
  int64_t vectorCount = count / lanes;
  if (failed(gridLoop(0, vectorCount, lanes)) ||
      (count % lanes && failed(gridLoop(vectorCount * lanes, count, 1))))
    return failure();
  emitc::ReturnOp::create(builder, opLoc, Value());
  return kernel;
}

void ProgramBuilder::buildFusedLaunch(ds::FusedOp op, emitc::FuncOp kernel,
                                      StringRef name) {
  OpBuilder::InsertionGuard guard(builder);
  Location opLoc = op.getLoc();
  Block *entry = &beginFusedHostFunction(op, name).getBody().front();
  int64_t count =
      cast<RankedTensorType>(op.getResult().getType()).getNumElements();
  if (count == 0) {
    emitc::ReturnOp::create(builder, opLoc, Value());
    return;
  }
  // After the work the inputs come from, on the op's stream.
  Value stream = emitc::CallOpaqueOp::create(
                     builder, opLoc, TypeRange{opaque("cudaStream_t")},
                     "dsrt::cuda::launch_stream",
                     ValueRange{entry->getArgument(0)})
                     .getResult(0);
  SmallVector<Value> operands{stream};
  for (auto [tensor, type] :
       llvm::zip(entry->getArguments().drop_front(),
                 kernel.getFunctionType().getInputs()))
    operands.push_back(
        elementsOf(tensor, cast<emitc::PointerType>(type).getPointee()));
  int64_t vectors = count / fusedLanes(op);
  int64_t blocks =
      std::min((vectors + kCudaThreads - 1) / kCudaThreads, kCudaMaxBlocks);
  std::string launchText = kernel.getSymName().str() + "<<<" +
                           std::to_string(blocks) + ", " +
                           std::to_string(kCudaThreads) + ", 0, {}>>>(";
  for (size_t i = 1; i < operands.size(); ++i)
    launchText += i == 1 ? "{}" : ", {}";
  launchText += ");";
  emitc::VerbatimOp::create(builder, opLoc, builder.getStringAttr(launchText),
                            operands);
  emitc::CallOpaqueOp::create(
      builder, opLoc, TypeRange{}, "dsrt::cuda::check_launch", ValueRange{},
      builder.getArrayAttr(
          {emitc::OpaqueAttr::get(context, "\"" + name.str() + "\"")}));
  emitc::ReturnOp::create(builder, opLoc, Value());
}

LogicalResult ProgramBuilder::emitFusedElement(
    ds::FusedOp op, ArrayRef<Value> inputPointers, Value outPointer, Value row,
    Type indexType, int64_t lanes,
    llvm::function_ref<std::pair<Value, Value>()> enterElement) {
  Location opLoc = op.getLoc();
  auto result = cast<RankedTensorType>(op.getResult().getType());
  ArrayRef<int64_t> outShape = result.getShape();
  int64_t count = result.getNumElements();
  int64_t inner = outShape.empty() ? 1 : outShape.back();
  Type i64 = indexType;
  auto constant = [&](int64_t value) -> Value {
    return emitc::LiteralOp::create(builder, opLoc, i64,
                                    std::to_string(value));
  };
  Value zero = constant(0);
  Block &body = op.getBody().front();

  // Output strides, to map an output index to each input's index.
  SmallVector<int64_t> outStrides(outShape.size(), 1);
  for (int64_t d = static_cast<int64_t>(outShape.size()) - 2; d >= 0; --d)
    outStrides[d] = outStrides[d + 1] * outShape[d + 1];

  // Input `input`'s element at `index` of its pointer, or of `lanesOf`, the
  // array its vector was read into.
  auto load = [&](unsigned input, Value index,
                  Value lanesOf = Value()) -> Value {
    auto type = cast<RankedTensorType>(op.getInputs()[input].getType());
    Storage storage = storageOf(type.getElementType());
    Value at = lanesOf
                   ? emitc::SubscriptOp::create(
                         builder, opLoc,
                         cast<TypedValue<emitc::ArrayType>>(lanesOf), index)
                   : emitc::SubscriptOp::create(
                         builder, opLoc,
                         cast<TypedValue<emitc::PointerType>>(
                             inputPointers[input]),
                         index);
    Value element = emitc::LoadOp::create(builder, opLoc, storage.type, at);
    if (!storage.load.empty())
      element = call(storage.load, builder.getF32Type(), {element},
                     {builder.getIndexAttr(0)});
    return element;
  };

  // How each input is indexed: per row (hoisted), or per element.
  enum class Access { Same, RowConstant, RowBase, Modulo, General };
  SmallVector<Access> access;
  for (Value input : op.getInputs()) {
    auto type = cast<RankedTensorType>(input.getType());
    ArrayRef<int64_t> inShape = type.getShape();
    int64_t inCount = type.getNumElements();
    size_t lead = outShape.size() - inShape.size();
    // Suffix: the input is the trailing output axes (leading ones dropped).
    bool suffix = true;
    for (size_t d = 0; d < inShape.size(); ++d) {
      bool leadingOnes = llvm::all_of(inShape.take_front(d + 1),
                                      [](int64_t v) { return v == 1; });
      if (inShape[d] != outShape[lead + d] && !leadingOnes)
        suffix = false;
    }
    // Prefix: the input is the leading output axes followed by ones.
    size_t firstOne = inShape.size();
    while (firstOne > 0 && inShape[firstOne - 1] == 1)
      --firstOne;
    bool prefix = lead == 0;
    for (size_t d = 0; d < firstOne; ++d)
      if (inShape[d] != outShape[d])
        prefix = false;
    if (inShape == outShape)
      access.push_back(Access::Same);
    else if (inCount == 1)
      access.push_back(Access::RowConstant);
    else if (suffix && inCount % inner == 0)
      access.push_back(Access::RowBase);
    else if (suffix && inner % inCount == 0)
      access.push_back(Access::Modulo);
    else if (prefix && (count / inCount) % inner == 0)
      access.push_back(Access::RowConstant);
    else
      access.push_back(Access::General);
  }
  // What is the same for every element of row `row`: a RowConstant input's
  // element, a RowBase input's row start.
  SmallVector<Value> rowValues(op.getInputs().size());
  llvm::DenseMap<Value, Value> scalars;
  auto hoist = [&](Value row) {
    for (auto [i, input] : llvm::enumerate(op.getInputs())) {
      auto type = cast<RankedTensorType>(input.getType());
      int64_t inCount = type.getNumElements();
      if (access[i] == Access::RowConstant) {
        int64_t rowsPerElement = count / inCount / inner;
        rowValues[i] = load(
            i, inCount == 1           ? zero
               : rowsPerElement == 1 ? row
                                     : Value(emitc::DivOp::create(
                                           builder, opLoc, i64, row,
                                           constant(rowsPerElement))));
        scalars[body.getArgument(i)] = rowValues[i];
      } else if (access[i] == Access::RowBase) {
        rowValues[i] =
            inCount == inner
                ? zero
                : Value(emitc::MulOp::create(
                      builder, opLoc, i64,
                      emitc::RemOp::create(builder, opLoc, i64, row,
                                           constant(inCount / inner)),
                      constant(inner)));
      }
    }
  };
  // A vector that may span rows (no `row`) finds each lane's row.
  bool rowPerLane = !row;
  if (!rowPerLane)
    hoist(row);

  auto [column, index] = enterElement();
  // Vectors: the inputs of the result's shape read at once, the result
  // gathered in an array, then a loop over the lanes.
  SmallVector<Value> vectorOf(op.getInputs().size());
  Value resultLanes;
  emitc::ForOp laneLoop;
  Value vectorStart = index;
  auto laneArray = [&](Value tensor) -> Value {
    return emitc::VariableOp::create(
        builder, opLoc, emitc::ArrayType::get({lanes}, storageType(tensor)),
        emitc::OpaqueAttr::get(context, ""));
  };
  if (lanes > 1) {
    for (auto [i, input] : llvm::enumerate(op.getInputs())) {
      if (access[i] != Access::Same)
        continue;
      vectorOf[i] = laneArray(input);
      emitc::CallOpaqueOp::create(
          builder, opLoc, TypeRange{}, "dsrt::math::load_vector",
          ValueRange{vectorOf[i], inputPointers[i], vectorStart});
    }
    resultLanes = laneArray(op.getResult());
    emitc::VerbatimOp::create(builder, opLoc, "#pragma unroll");
    laneLoop = emitc::ForOp::create(builder, opLoc, constant(0),
                                    constant(lanes), constant(1));
    builder.setInsertionPointToStart(laneLoop.getBody());
    Value lane = laneLoop.getInductionVar();
    index = emitc::AddOp::create(builder, opLoc, i64, vectorStart, lane);
    if (rowPerLane) {
      row = emitc::DivOp::create(builder, opLoc, i64, index, constant(inner));
      column = emitc::SubOp::create(
          builder, opLoc, i64, index,
          emitc::MulOp::create(builder, opLoc, i64, row, constant(inner)));
      hoist(row);
    } else {
      column = emitc::AddOp::create(builder, opLoc, i64, column, lane);
    }
  }
  for (auto [i, input] : llvm::enumerate(op.getInputs())) {
    auto type = cast<RankedTensorType>(input.getType());
    ArrayRef<int64_t> inShape = type.getShape();
    size_t lead = outShape.size() - inShape.size();
    Value inputIndex;
    switch (access[i]) {
    case Access::RowConstant:
      continue;
    case Access::Same:
      if (vectorOf[i]) {
        scalars[body.getArgument(i)] =
            load(i, laneLoop.getInductionVar(), vectorOf[i]);
        continue;
      }
      inputIndex = index;
      break;
    case Access::RowBase:
      // A bias of the row's length is read at the column.
      inputIndex = type.getNumElements() == inner
                       ? column
                       : Value(emitc::AddOp::create(builder, opLoc, i64,
                                                    rowValues[i], column));
      break;
    case Access::Modulo:
      inputIndex = emitc::RemOp::create(builder, opLoc, i64, column,
                                        constant(type.getNumElements()));
      break;
    case Access::General: {
      // sum over axes of ((index / outStride) % outDim) * inStride
      SmallVector<int64_t> inStrides(inShape.size(), 1);
      for (int64_t d = static_cast<int64_t>(inShape.size()) - 2; d >= 0; --d)
        inStrides[d] = inStrides[d + 1] * inShape[d + 1];
      // (no division or product by 1, no remainder on the first axis)
      Value sum;
      for (size_t d = 0; d < inShape.size(); ++d) {
        if (inShape[d] == 1)
          continue;
        size_t outAxis = lead + d;
        Value coordinate = index;
        if (outStrides[outAxis] != 1)
          coordinate = emitc::DivOp::create(builder, opLoc, i64, coordinate,
                                            constant(outStrides[outAxis]));
        if (outAxis != 0)
          coordinate = emitc::RemOp::create(builder, opLoc, i64, coordinate,
                                            constant(outShape[outAxis]));
        Value term = inStrides[d] == 1
                         ? coordinate
                         : Value(emitc::MulOp::create(builder, opLoc, i64,
                                                      coordinate,
                                                      constant(inStrides[d])));
        sum = sum ? Value(emitc::AddOp::create(builder, opLoc, i64, sum, term))
                  : term;
      }
      inputIndex = sum ? sum : zero;
      break;
    }
    }
    scalars[body.getArgument(i)] = load(i, inputIndex);
  }

  for (Operation &scalarOp : body.without_terminator()) {
    SmallVector<Value> operands;
    for (Value operand : scalarOp.getOperands())
      operands.push_back(scalars.lookup(operand));
    FailureOr<Value> value = emitScalar(scalarOp, operands);
    if (failed(value))
      return failure();
    scalars[scalarOp.getResult(0)] = *value;
  }
  Value yielded =
      scalars.lookup(cast<ds::YieldOp>(body.getTerminator()).getValue());
  Storage storage = storageOf(result.getElementType());
  if (!storage.store.empty())
    yielded = call(storage.store, storage.type, {yielded},
                   {builder.getIndexAttr(0)});
  if (laneLoop) {
    // The lane's column, row and index, where no input reads them.
    SmallVector<Value> laneValues{column};
    if (rowPerLane)
      laneValues.append({column.getDefiningOp()->getOperand(1), row});
    laneValues.push_back(index);
    for (Value unused : laneValues)
      if (unused.use_empty() &&
          unused.getDefiningOp()->getParentOp() == laneLoop)
        unused.getDefiningOp()->erase();
    emitc::AssignOp::create(
        builder, opLoc,
        emitc::SubscriptOp::create(
            builder, opLoc, cast<TypedValue<emitc::ArrayType>>(resultLanes),
            laneLoop.getInductionVar()),
        yielded);
    builder.setInsertionPointAfter(laneLoop);
    emitc::CallOpaqueOp::create(builder, opLoc, TypeRange{},
                                "dsrt::math::store_vector",
                                ValueRange{outPointer, vectorStart, resultLanes});
    return success();
  }
  Value target = emitc::SubscriptOp::create(
      builder, opLoc, cast<TypedValue<emitc::PointerType>>(outPointer), index);
  emitc::AssignOp::create(builder, opLoc, target, yielded);
  return success();
}

struct LowerToEmitCPass
    : dsopt::impl::DsLowerToEmitCBase<LowerToEmitCPass> {
  using DsLowerToEmitCBase::DsLowerToEmitCBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> functions;
    auto micro = module.lookupSymbol<func::FuncOp>("micro_step");
    auto optimizer = module.lookupSymbol<func::FuncOp>("optimizer_step");
    if (module->hasAttr(ds::DsDialect::kPipelineRankAttrName)) {
      // A pipeline rank: its stages' functions, then @optimizer_step.
      for (auto function : module.getOps<func::FuncOp>())
        if (function != optimizer)
          functions.push_back(function);
      if (!optimizer) {
        module.emitError() << "a pipeline rank without @optimizer_step";
        return signalPassFailure();
      }
      functions.push_back(optimizer);
    } else if (micro && optimizer) {
      functions = {micro, optimizer};
    } else if (auto main = module.lookupSymbol<func::FuncOp>("main")) {
      functions = {main};
    } else {
      module.emitError() << "no function @main (or @micro_step and "
                            "@optimizer_step) to lower";
      return signalPassFailure();
    }
    for (func::FuncOp function : functions)
      if (!function->hasAttr(ds::DsDialect::kMemoryPlanAttrName)) {
        function.emitOpError()
            << "is not memory-planned; run ds-plan-memory first";
        return signalPassFailure();
      }
    ProgramBuilder program(module, functions);
    program.withMain = withMain;
    program.outlineRepeats = outlineRepeats;
    if (target != "cpu" && target != "cuda") {
      module.emitError() << "unknown target '" << target
                         << "' (expected cpu or cuda)";
      return signalPassFailure();
    }
    program.target = target;
    program.modelPath = modelPath;
    program.nvmePath = nvmePath;
    program.aioBlockSize = aioBlockSize;
    program.aioQueueDepth = aioQueueDepth;
    program.aioIntraOpParallelism = aioIntraOpParallelism;
    program.aioSingleSubmit = aioSingleSubmit;
    program.aioOverlapEvents = aioOverlapEvents;
    program.prefix = symbolPrefix;
    if (program.modelPath.empty())
      if (auto source = module->getAttrOfType<StringAttr>(
              ds::DsDialect::kSourceAttrName)) {
        llvm::SmallString<256> path(source.getValue());
        llvm::sys::fs::make_absolute(path);
        program.modelPath = path.str().str();
      }
    if (failed(program.build()))
      return signalPassFailure();
    for (func::FuncOp function : functions)
      function.erase();
    // Consumed: the program describes its plan, grid and recipe itself.
    for (auto grid :
         llvm::make_early_inc_range(module.getOps<shard::GridOp>()))
      grid.erase();
    module->removeAttr(ds::DsDialect::kMemoryPlanAttrName);
    module->removeAttr(ds::DsDialect::kTrainAttrName);
    module->removeAttr(ds::DsDialect::kZeroAttrName);
    module->removeAttr(ds::DsDialect::kPipelineAttrName);
    module->removeAttr(ds::DsDialect::kPipelineRankAttrName);
  }
};

} // namespace
