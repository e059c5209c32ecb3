//===- DsDialect.cpp - ds dialect registration and attributes -------------===//

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace dsopt::ds;

#include "ds/IR/DsDialect.cpp.inc"
#include "ds/IR/DsEnums.cpp.inc"
#include "ds/IR/DsInterfaces.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "ds/IR/DsAttrs.cpp.inc"

void DsDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ds/IR/DsOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "ds/IR/DsAttrs.cpp.inc"
      >();
  attachShardingRules(*getContext());
}

Operation *DsDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                          Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

LogicalResult StateAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                StateKind kind, StringRef role,
                                StringRef param) {
  if (param.empty())
    return emitError() << "a state needs the name of its parameter";
  if (kind == StateKind::accumulator && !role.empty())
    return emitError() << "a gradient accumulator has no optimizer role (got '"
                       << role << "')";
  if (kind == StateKind::optimizer && role.empty())
    return emitError() << "an optimizer state needs its role (the "
                          "optimizer's name of the state)";
  return success();
}

std::string dsopt::ds::getDisplayName(StateAttr state) {
  return ((state.isAccumulator() ? StringRef("grad") : state.getRole()) + ":" +
          state.getParam())
      .str();
}

std::optional<ComputePrecision>
dsopt::ds::getComputePrecision(Operation *op) {
  if (op->hasAttr(DsDialect::kComputeF32AttrName))
    return ComputePrecision::ComputeF32;
  return getComputePrecision(op->getName());
}

StringRef dsopt::ds::getComputePrecisionName(ComputePrecision precision) {
  switch (precision) {
  case ComputePrecision::Compute16: return "16-bit";
  case ComputePrecision::Accumulate32: return "16-bit, f32 accumulation";
  case ComputePrecision::Sum32:
    return "16-bit operand, f32 sum in its readers' type";
  case ComputePrecision::ComputeF32: return "f32";
  case ComputePrecision::Loss16: return "16-bit scores, f32 rows and loss";
  case ComputePrecision::KeepTypes: return "types kept";
  }
  llvm_unreachable("unknown compute precision");
}

std::optional<ComputePrecision>
dsopt::ds::getComputePrecision(OperationName name) {
  if (name.hasTrait<PrecisionTrait::Compute16>())
    return ComputePrecision::Compute16;
  if (name.hasTrait<PrecisionTrait::Accumulate32>())
    return ComputePrecision::Accumulate32;
  if (name.hasTrait<PrecisionTrait::Sum32>())
    return ComputePrecision::Sum32;
  if (name.hasTrait<PrecisionTrait::ComputeF32>())
    return ComputePrecision::ComputeF32;
  if (name.hasTrait<PrecisionTrait::Loss16>())
    return ComputePrecision::Loss16;
  if (name.hasTrait<PrecisionTrait::KeepTypes>())
    return ComputePrecision::KeepTypes;
  // Upstream's shard.all_reduce, as ds-tensor-parallel inserts it (the sum
  // of a row-parallel product's partial results, Megatron's g), reduces in
  // the working type, as Megatron's does; so do the reduce-scatter and the
  // all-gather that replace it under --sequence-parallel, and the local
  // slice of a whole activation (ZeRO's come after ds-precision).
  if (llvm::is_contained({"shard.all_reduce", "shard.reduce_scatter",
                          "shard.all_gather", "shard.all_slice"},
                         name.getStringRef()))
    return ComputePrecision::Compute16;
  return std::nullopt;
}

std::string dsopt::ds::getDisplayName(ValueRole role, StringRef id) {
  return (stringifyValueRole(role) + ":" + id).str();
}

std::optional<ValueRole>
dsopt::ds::getArgumentRole(FunctionOpInterface function, unsigned i) {
  if (auto role =
          function.getArgAttrOfType<ValueRoleAttr>(i, DsDialect::kRoleAttrName))
    return role.getValue();
  return std::nullopt;
}

StateAttr dsopt::ds::getArgumentState(FunctionOpInterface function,
                                      unsigned i) {
  return function.getArgAttrOfType<StateAttr>(i, DsDialect::kStateAttrName);
}

StringRef dsopt::ds::getAccumulatedParam(FunctionOpInterface function,
                                         unsigned i) {
  if (StateAttr state = getArgumentState(function, i);
      state && state.isAccumulator())
    return state.getParam();
  return "";
}

std::optional<ValueRole> dsopt::ds::getResultRole(FunctionOpInterface function,
                                                  unsigned i) {
  if (auto role = function.getResultAttrOfType<ValueRoleAttr>(
          i, DsDialect::kRoleAttrName))
    return role.getValue();
  return std::nullopt;
}

Value dsopt::ds::getViewSource(Value value) {
  while (Operation *def = value.getDefiningOp()) {
    auto kernel = dyn_cast<KernelOpInterface>(def);
    std::optional<unsigned> aliased =
        kernel ? kernel.getAliasedOperand() : std::nullopt;
    if (!aliased)
      break;
    value = def->getOperand(*aliased);
  }
  return value;
}

Value dsopt::ds::getInPlaceRoot(Operation *op, unsigned r) {
  auto kernel = dyn_cast<KernelOpInterface>(op);
  std::optional<unsigned> inPlace =
      kernel ? kernel.getInPlaceOperand(r) : std::nullopt;
  if (!inPlace)
    return {};
  Value root = getViewSource(op->getOperand(*inPlace));
  Operation *def = root.getDefiningOp();
  if (!def || !isa<KernelOpInterface>(def) ||
      def->hasTrait<OpTrait::ConstantLike>())
    return {};
  return root;
}

int64_t MemoryPlanAttr::getSpaceBytes(MemorySpace space) const {
  switch (space) {
  case MemorySpace::device: return getArenaBytes();
  case MemorySpace::host: return getHostBytes();
  case MemorySpace::file: return getFileBytes();
  }
  return 0;
}

int64_t MemoryPlanAttr::getSpacePersistentBytes(MemorySpace space) const {
  switch (space) {
  case MemorySpace::device: return getPersistentBytes();
  case MemorySpace::host: return getHostPersistentBytes();
  case MemorySpace::file: return getFilePersistentBytes();
  }
  return 0;
}

LogicalResult
ExternalDataAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                         StringRef location, int64_t offset, int64_t length) {
  if (location.empty())
    return emitError() << "external data location must not be empty";
  if (location.starts_with("/"))
    return emitError() << "external data location '" << location
                       << "' must be relative to the model's directory";
  // Path components equal to ".." could leave the model's directory.
  for (StringRef rest = location; !rest.empty();) {
    auto [component, tail] = rest.split('/');
    if (component == "..")
      return emitError() << "external data location '" << location
                         << "' must not contain '..'";
    rest = tail;
  }
  if (offset < 0 || length < 0)
    return emitError() << "external data offset and length must be "
                          "non-negative, got offset "
                       << offset << " and length " << length;
  int64_t end;
  if (llvm::AddOverflow(offset, length, end))
    return emitError() << "external data range overflows";
  return success();
}

LogicalResult
TensorSplitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        int64_t dim, int64_t blocks, int64_t ranks,
                        int64_t whole) {
  if (dim < 0)
    return emitError() << "tp_split dim must be non-negative, got " << dim;
  if (blocks < 1)
    return emitError() << "tp_split blocks must be at least 1, got " << blocks;
  if (ranks < 2)
    return emitError() << "tp_split ranks must be at least 2, got " << ranks;
  const int64_t piece = whole > 0 ? TensorSplitAttr::paddedPiece(whole, ranks) : 0;
  if (whole < 0 || (whole > 0 && (blocks != 1 || piece * ranks == whole)))
    return emitError() << "tp_split whole " << whole
                       << " pads only a plain split (blocks = 1) of an axis "
                          "whose padded pieces ("
                       << piece << " entries each) exceed it";
  return success();
}

LogicalResult ZeroAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t stage, int64_t dp,
                               int64_t persistenceThreshold) {
  if (stage < 0 || stage > 3)
    return emitError() << "ZeRO stage must be 0, 1, 2 or 3, got " << stage;
  if (dp < 1)
    return emitError() << "dp must be at least 1, got " << dp;
  if (persistenceThreshold < 0)
    return emitError() << "param_persistence_threshold must be "
                          "non-negative, got "
                       << persistenceThreshold;
  return success();
}

LogicalResult ParamAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                StringRef name, bool trainable,
                                Attribute data) {
  if (name.empty())
    return emitError() << "parameter name must not be empty";
  if (!isa<ExternalDataAttr, ElementsAttr>(data))
    return emitError() << "parameter '" << name
                       << "' data must be #ds.extern or dense elements";
  return success();
}

/// Checks that `param` describes a value of `type`.
static LogicalResult verifyParamMatchesType(Operation *op, unsigned argIndex,
                                            ParamAttr param, Type type) {
  auto tensorType = dyn_cast<RankedTensorType>(type);
  if (!tensorType || !tensorType.hasStaticShape())
    return op->emitOpError() << "argument " << argIndex
                             << " with ds.param must be a static tensor";
  // A 16-bit working copy of an f32 parameter (ds-precision) holds the
  // value converted to its type.
  auto isWorkingCopyOf = [&](Type stored) {
    Type element = tensorType.getElementType();
    return (element.isBF16() || element.isF16()) &&
           getElementTypeOrSelf(stored).isF32();
  };
  if (auto elements = dyn_cast<ElementsAttr>(param.getData())) {
    if (elements.getType() != type &&
        !(cast<ShapedType>(elements.getType()).getShape() ==
              tensorType.getShape() &&
          isWorkingCopyOf(elements.getType())))
      return op->emitOpError()
             << "parameter '" << param.getName() << "' value has type "
             << elements.getType() << " but argument " << argIndex << " is "
             << type;
    return success();
  }
  auto external = cast<ExternalDataAttr>(param.getData());
  std::optional<int64_t> bytes = getByteSize(tensorType);
  if (bytes && isWorkingCopyOf(Float32Type::get(op->getContext())))
    bytes = getByteSize(tensorType.clone(Float32Type::get(op->getContext())));
  if (!bytes || *bytes != external.getLength())
    return op->emitOpError()
           << "parameter '" << param.getName() << "' of type " << type
           << " needs " << (bytes ? std::to_string(*bytes) : "too many")
           << " bytes but its external data holds " << external.getLength();
  return success();
}

/// A ds.role on argument or result `index` (`what`) of a pipeline stage
/// function: a #ds.role other than `forbidden` there (the function `why`),
/// beside the value's id (`idName`, present when `hasId`).
static LogicalResult verifyRole(Operation *op, NamedAttribute attribute,
                                StringRef what, unsigned index,
                                ValueRole forbidden, StringRef why,
                                StringRef idName, bool hasId) {
  auto role = dyn_cast<ValueRoleAttr>(attribute.getValue());
  if (!role)
    return op->emitOpError() << "'" << DsDialect::kRoleAttrName
                             << "' must be a #ds.role attribute";
  if (role.getValue() == forbidden)
    return op->emitOpError()
           << what << " " << index << " cannot have role '"
           << stringifyValueRole(forbidden) << "' (a stage function " << why
           << ")";
  if (!hasId)
    return op->emitOpError()
           << what << " " << index << " with '" << DsDialect::kRoleAttrName
           << "' needs '" << idName << "' (the value's id)";
  return success();
}

LogicalResult DsDialect::verifyRegionArgAttribute(Operation *op,
                                                  unsigned regionIndex,
                                                  unsigned argIndex,
                                                  NamedAttribute attribute) {
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (!function)
    return op->emitOpError() << "ds argument attributes are only valid on "
                                "functions";
  Type argType = function.getArgumentTypes()[argIndex];
  if (attribute.getName() == kParamAttrName) {
    auto param = dyn_cast<ParamAttr>(attribute.getValue());
    if (!param)
      return op->emitOpError()
             << "'" << kParamAttrName << "' must be a #ds.param attribute";
    // A sharded parameter's data describe the whole tensor.
    if (auto whole = function.getArgAttrOfType<TypeAttr>(argIndex,
                                                         kShardedAttrName))
      argType = whole.getValue();
    // So does a tensor-parallel shard's (ds.tp_split).
    auto split =
        function.getArgAttrOfType<TensorSplitAttr>(argIndex, kTpSplitAttrName);
    auto local = dyn_cast<RankedTensorType>(argType);
    if (split && local && split.getDim() < local.getRank()) {
      SmallVector<int64_t> shape(local.getShape());
      shape[split.getDim()] = split.wholeExtent(shape[split.getDim()]);
      argType = local.clone(shape);
    }
    return verifyParamMatchesType(op, argIndex, param, argType);
  }
  if (attribute.getName() == kTpSplitAttrName) {
    auto split = dyn_cast<TensorSplitAttr>(attribute.getValue());
    if (!split)
      return op->emitOpError()
             << "'" << kTpSplitAttrName << "' must be a #ds.tp_split attribute";
    if (!function.getArgAttr(argIndex, kParamAttrName))
      return op->emitOpError() << "'" << kTpSplitAttrName
                               << "' applies only to a ds.param argument";
    Type local = argType;
    if (auto whole = function.getArgAttrOfType<TypeAttr>(argIndex,
                                                         kShardedAttrName))
      local = whole.getValue();
    auto localType = dyn_cast<RankedTensorType>(local);
    if (!localType || split.getDim() >= localType.getRank() ||
        localType.getDimSize(split.getDim()) % split.getBlocks() != 0 ||
        (split.getWhole() &&
         localType.getDimSize(split.getDim()) !=
             TensorSplitAttr::paddedPiece(split.getWhole(),
                                          split.getRanks())))
      return op->emitOpError()
             << "'" << kTpSplitAttrName << "' of argument " << argIndex
             << " splits axis " << split.getDim() << " in "
             << split.getBlocks() << " blocks, which " << local
             << " does not have";
    return success();
  }
  if (attribute.getName() == kShardedAttrName) {
    auto whole = dyn_cast<TypeAttr>(attribute.getValue());
    auto wholeType =
        whole ? dyn_cast<RankedTensorType>(whole.getValue()) : nullptr;
    auto shard = dyn_cast<RankedTensorType>(argType);
    if (!wholeType || !wholeType.hasStaticShape() || !shard ||
        shard.getRank() != 1 ||
        shard.getElementType() != wholeType.getElementType() ||
        shard.getNumElements() < 1)
      return op->emitOpError()
             << "'" << kShardedAttrName
             << "' must be the static tensor type of the whole parameter, "
                "whose element type the argument (a 1-D shard) shares";
    if (!function.getArgAttr(argIndex, kParamAttrName))
      return op->emitOpError() << "'" << kShardedAttrName
                               << "' applies only to a ds.param argument";
    return success();
  }
  if (attribute.getName() == kSpaceAttrName) {
    if (!isa<MemorySpaceAttr>(attribute.getValue()))
      return op->emitOpError() << "'" << kSpaceAttrName
                               << "' must be a #ds.space attribute";
    if (!function.getArgAttr(argIndex, kParamAttrName) &&
        !function.getArgAttr(argIndex, kStateAttrName))
      return op->emitOpError()
             << "'" << kSpaceAttrName
             << "' applies only to a persistent argument (ds.param or "
                "ds.state)";
    return success();
  }
  if (attribute.getName() == kOffsetAttrName) {
    // -1: an input of a pipeline stage the runtime binds (no buffer).
    auto offset = dyn_cast<IntegerAttr>(attribute.getValue());
    bool bound = offset && offset.getInt() == -1 &&
                 op->hasAttr(kPipelinePartAttrName);
    if (!offset || (offset.getInt() < 0 && !bound))
      return op->emitOpError()
             << "'" << kOffsetAttrName << "' must be a non-negative integer"
             << " (or -1 on an input of a pipeline stage's function)";
    return success();
  }
  if (attribute.getName() == kIndexRangeAttrName) {
    auto range = dyn_cast<DenseI64ArrayAttr>(attribute.getValue());
    auto type = dyn_cast<RankedTensorType>(argType);
    if (!range || (range.size() != 2 && range.size() != 3) ||
        range[0] >= range[1] || !type ||
        !isa<IntegerType>(type.getElementType()))
      return op->emitOpError()
             << "'" << kIndexRangeAttrName
             << "' must be array<i64: lo, hi> or array<i64: lo, hi, ignore> "
                "with lo < hi, on an integer tensor argument";
    return success();
  }
  if (attribute.getName() == kInputAttrName) {
    if (!isa<StringAttr>(attribute.getValue()))
      return op->emitOpError()
             << "'" << kInputAttrName << "' must be a string (the input name)";
    return success();
  }
  if (attribute.getName() == kStateAttrName) {
    if (!isa<StateAttr>(attribute.getValue()))
      return op->emitOpError()
             << "'" << kStateAttrName << "' must be a #ds.state attribute";
    return success();
  }
  if (attribute.getName() == kRoleAttrName)
    return verifyRole(op, attribute, "argument", argIndex, ValueRole::send,
                      "receives or keeps its arguments", kInputAttrName,
                      static_cast<bool>(function.getArgAttrOfType<StringAttr>(
                          argIndex, kInputAttrName)));
  return op->emitOpError() << "unknown ds argument attribute '"
                           << attribute.getName().getValue() << "'";
}

LogicalResult DsDialect::verifyRegionResultAttribute(Operation *op,
                                                     unsigned regionIndex,
                                                     unsigned resultIndex,
                                                     NamedAttribute attribute) {
  if (attribute.getName() == kOutputAttrName) {
    if (!isa<StringAttr>(attribute.getValue()))
      return op->emitOpError()
             << "'" << kOutputAttrName << "' must be a string (the output name)";
    return success();
  }
  if (attribute.getName() == kRoleAttrName) {
    auto function = dyn_cast<FunctionOpInterface>(op);
    return verifyRole(
        op, attribute, "result", resultIndex, ValueRole::recv,
        "sends or keeps its results", kOutputAttrName,
        function && static_cast<bool>(function.getResultAttrOfType<StringAttr>(
                        resultIndex, kOutputAttrName)));
  }
  if (attribute.getName() == kGradAttrName) {
    if (!isa<StringAttr>(attribute.getValue()))
      return op->emitOpError()
             << "'" << kGradAttrName << "' must be a string (a parameter name)";
    return success();
  }
  if (attribute.getName() == kUpdatesAttrName) {
    auto function = dyn_cast<FunctionOpInterface>(op);
    auto index = dyn_cast<IntegerAttr>(attribute.getValue());
    if (!function || !index || index.getInt() < 0 ||
        index.getInt() >= static_cast<int64_t>(function.getNumArguments()))
      return op->emitOpError() << "'" << kUpdatesAttrName
                               << "' must be the index of an argument";
    if (function.getArgumentTypes()[index.getInt()] !=
        function.getResultTypes()[resultIndex])
      return op->emitOpError()
             << "result " << resultIndex << " updates argument "
             << index.getInt() << " of a different type";
    return success();
  }
  return op->emitOpError() << "unknown ds result attribute '"
                           << attribute.getName().getValue() << "'";
}

LogicalResult DsDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attribute) {
  StringRef name = attribute.getName().getValue();
  // One entry per result, -1 for none: the planner's offsets and slots.
  auto verifyPerResult = [&](StringRef entry) -> LogicalResult {
    auto entries = dyn_cast<DenseI64ArrayAttr>(attribute.getValue());
    if (!entries ||
        entries.size() != static_cast<int64_t>(op->getNumResults()))
      return op->emitOpError() << "'" << name << "' must hold one " << entry
                               << " per result";
    for (int64_t value : entries.asArrayRef())
      if (value < -1)
        return op->emitOpError()
               << "'" << name << "' " << entry << "s must be >= -1";
    return success();
  };
  if (name == kBuffersAttrName)
    return verifyPerResult("offset");
  if (name == kBoundSlotsAttrName)
    return verifyPerResult("slot");
  if (name == kWorkspaceAttrName) {
    auto offset = dyn_cast<IntegerAttr>(attribute.getValue());
    if (!offset || offset.getInt() < 0)
      return op->emitOpError() << "'" << kWorkspaceAttrName
                               << "' must be a non-negative arena offset";
    auto kernel = dyn_cast<KernelOpInterface>(op);
    if (!kernel || kernel.getWorkspaceBytes() <= 0)
      return op->emitOpError() << "'" << kWorkspaceAttrName
                               << "' on an op whose kernel needs no workspace";
    return success();
  }
  if (name == kSpaceAttrName)
    return verifyExecutionSpace(op);
  if (name == kFreesAttrName) {
    if (!isa<DenseI64ArrayAttr>(attribute.getValue()))
      return op->emitOpError()
             << "'" << kFreesAttrName << "' must be an array of offsets";
    return success();
  }
  if (name == kMemoryPlanAttrName) {
    if (!isa<MemoryPlanAttr>(attribute.getValue()) ||
        !isa<FunctionOpInterface, ModuleOp>(op))
      return op->emitOpError() << "'" << kMemoryPlanAttrName
                               << "' must be a #ds.memory_plan on a function "
                                  "or module";
    return success();
  }
  // Module-level facts recorded by the importer.
  if (name == kSourceAttrName || name == "ds.producer" || name == "ds.opset")
    return success();
  if (name == kTargetAttrName) {
    auto target = dyn_cast<StringAttr>(attribute.getValue());
    if (!isa<ModuleOp>(op) || !target ||
        (target.getValue() != "cpu" && target.getValue() != "cuda"))
      return op->emitOpError() << "'" << kTargetAttrName
                               << "' must be \"cpu\" or \"cuda\", on a module";
    return success();
  }
  if (name == kFoldedInitializersAttrName) {
    auto names = dyn_cast<ArrayAttr>(attribute.getValue());
    if (!names || !llvm::all_of(names, [](Attribute a) {
          return isa<StringAttr>(a);
        }))
      return op->emitOpError() << "'" << kFoldedInitializersAttrName
                               << "' must be an array of strings";
    return success();
  }
  if (name == kGridAxesAttrName) {
    auto axes = dyn_cast<GridAxesAttr>(attribute.getValue());
    auto grid = dyn_cast<shard::GridOp>(op);
    if (!axes || !grid)
      return op->emitOpError() << "'" << kGridAxesAttrName
                               << "' must be a #ds.axes on a shard.grid";
    if (axes.size() != grid.getShape().size())
      return op->emitOpError()
             << "'" << kGridAxesAttrName << "' names " << axes.size()
             << " axes; the grid has " << grid.getShape().size();
    return success();
  }
  if (name == kTpRankSeedAttrName) {
    if (!isa<UnitAttr>(attribute.getValue()) || !isa<DropoutOp>(op))
      return op->emitOpError() << "'" << kTpRankSeedAttrName
                               << "' must be a unit attribute on a ds.dropout";
    return success();
  }
  if (name == kRecomputeInBackwardAttrName) {
    if (!isa<UnitAttr>(attribute.getValue()) || op->getNumRegions() != 0 ||
        !isMemoryEffectFree(op))
      return op->emitOpError()
             << "'" << kRecomputeInBackwardAttrName
             << "' must be a unit attribute on an op without regions or "
                "memory effects";
    return success();
  }
  if (name == kTpGatherWholeAttrName) {
    if (!isa<UnitAttr>(attribute.getValue()) || !isa<shard::AllGatherOp>(op))
      return op->emitOpError() << "'" << kTpGatherWholeAttrName
                               << "' must be a unit attribute on a "
                                  "shard.all_gather";
    return success();
  }
  if (name == kComputeF32AttrName) {
    if (!isa<UnitAttr>(attribute.getValue()))
      return op->emitOpError() << "'" << kComputeF32AttrName
                               << "' must be a unit attribute";
    return success();
  }
  if (name == kOverwritesArgAttrName) {
    if (!isa<UnitAttr>(attribute.getValue()))
      return op->emitOpError() << "'" << kOverwritesArgAttrName
                               << "' must be a unit attribute";
    return success();
  }
  if (name == kForwardIdAttrName || name == kGradOfAttrName) {
    auto id = dyn_cast<IntegerAttr>(attribute.getValue());
    if (!id || !id.getType().isSignlessInteger(64) || id.getInt() < 0)
      return op->emitOpError() << "'" << name
                               << "' must be a non-negative i64 (a forward "
                                  "op id)";
    return success();
  }
  if (name == kStageAttrName) {
    auto stage = dyn_cast<IntegerAttr>(attribute.getValue());
    if (!stage || stage.getInt() < 0)
      return op->emitOpError() << "'" << kStageAttrName
                               << "' must be a non-negative integer";
    return success();
  }
  if (name == kZeroAttrName) {
    if (!isa<ModuleOp>(op) || !isa<ZeroAttr>(attribute.getValue()))
      return op->emitOpError() << "'" << kZeroAttrName
                               << "' must be a #ds.zero on the module";
    return success();
  }
  if (name == kPipelineAttrName) {
    if (!isa<ModuleOp>(op) || !isa<PipelineAttr>(attribute.getValue()))
      return op->emitOpError() << "'" << name
                               << "' must be a #ds.pipeline on the module";
    return success();
  }
  if (name == kPipelineRankAttrName) {
    auto rank = dyn_cast<PipelineRankAttr>(attribute.getValue());
    if (!isa<ModuleOp>(op) || !rank)
      return op->emitOpError()
             << "'" << name << "' must be a #ds.pipeline_rank on the module";
    // Each stage's functions are functions of the module.
    for (PipelineRankStageAttr stage : rank.getVirtualStages())
      for (FlatSymbolRefAttr function :
           {stage.getForward(), stage.getBackward(), stage.getBackwardInput(),
            stage.getBackwardWeight()})
        if (function &&
            !isa_and_nonnull<FunctionOpInterface>(
                SymbolTable::lookupSymbolIn(op, function.getAttr())))
          return op->emitOpError()
                 << "'" << name << "': virtual stage " << stage.getStage()
                 << " names " << function << ", which is no function of the "
                 << "module";
    return success();
  }
  if (name == kPipelinePartAttrName) {
    if (!isa<FunctionOpInterface>(op) ||
        !isa<PipelinePartAttr>(attribute.getValue()))
      return op->emitOpError() << "'" << name
                               << "' must be a #ds.pipeline_part on a function";
    return success();
  }
  if (name == kTrainAttrName) {
    if (!isa<DictionaryAttr>(attribute.getValue()))
      return op->emitOpError() << "'" << name << "' must be a dictionary";
    return success();
  }
  return op->emitOpError() << "unknown ds attribute '" << name << "'";
}
