//===- Plan.cpp - plan.json and plan.txt of a planned program -------------===//

#include "dsopt/Analysis/Plan.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"

using namespace mlir;

namespace dsopt {
namespace {

std::string dtypeName(Type element) {
  if (element.isF32()) return "f32";
  if (element.isF16()) return "f16";
  if (element.isBF16()) return "bf16";
  if (element.isSignlessInteger(64)) return "i64";
  if (element.isSignlessInteger(32)) return "i32";
  return "bool";
}

llvm::json::Array shapeOf(RankedTensorType type) {
  llvm::json::Array shape;
  for (int64_t d : type.getShape())
    shape.push_back(d);
  return shape;
}

llvm::json::Object tensorInfo(StringRef name, Type type, int64_t offset) {
  auto tensor = cast<RankedTensorType>(type);
  return llvm::json::Object{{"name", name},
                            {"dtype", dtypeName(tensor.getElementType())},
                            {"shape", shapeOf(tensor)},
                            {"bytes", ds::getByteSize(tensor).value_or(0)},
                            {"offset", offset}};
}
} // namespace

FailureOr<PlanSummary> summarizePlan(func::FuncOp function) {
  auto memory = function->getAttrOfType<ds::MemoryPlanAttr>(
      ds::DsDialect::kMemoryPlanAttrName);
  if (!memory)
    return function.emitOpError() << "has no memory plan (run ds-plan-memory)";
  PlanSummary summary;
  summary.arenaBytes = memory.getArenaBytes();
  summary.persistentBytes = memory.getPersistentBytes();
  summary.peakLiveBytes = memory.getPeakLiveBytes();
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    auto type = cast<RankedTensorType>(function.getArgument(i).getType());
    int64_t bytes = ds::getByteSize(type).value_or(0);
    if (function.getArgAttr(i, ds::DsDialect::kParamAttrName))
      summary.paramBytes += bytes;
    else
      summary.inputBytes += bytes;
  }
  function.walk([&](ds::CostOpInterface op) {
    auto kernel = dyn_cast<ds::KernelOpInterface>(op.getOperation());
    if (!kernel || kernel.getAliasedOperand())
      return;
    ++summary.kernels;
    summary.flops += op.getFlops();
    summary.bytesAccessed += op.getBytesAccessed();
  });
  return summary;
}

LogicalResult writePlanJson(ModuleOp module, llvm::raw_ostream &os) {
  auto function = module.lookupSymbol<func::FuncOp>("main");
  if (!function)
    return module.emitError() << "no function @main";
  FailureOr<PlanSummary> summary = summarizePlan(function);
  if (failed(summary))
    return failure();
  auto memory = function->getAttrOfType<ds::MemoryPlanAttr>(
      ds::DsDialect::kMemoryPlanAttrName);

  llvm::json::Array inputs, params, outputs, ops;
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    Type type = function.getArgument(i).getType();
    int64_t offset = function
                         .getArgAttrOfType<IntegerAttr>(
                             i, ds::DsDialect::kOffsetAttrName)
                         .getInt();
    if (auto name = function.getArgAttrOfType<StringAttr>(
            i, ds::DsDialect::kInputAttrName)) {
      inputs.push_back(tensorInfo(name.getValue(), type, offset));
      continue;
    }
    auto param = function.getArgAttrOfType<ds::ParamAttr>(
        i, ds::DsDialect::kParamAttrName);
    llvm::json::Object entry = tensorInfo(param.getName(), type, offset);
    entry["trainable"] = param.getTrainable();
    if (auto external = dyn_cast<ds::ExternalDataAttr>(param.getData())) {
      entry["file"] = external.getLocation();
      entry["file_offset"] = external.getOffset();
    } else {
      entry["file"] = nullptr; // stored in the program
    }
    params.push_back(std::move(entry));
  }

  llvm::DenseMap<Value, int64_t> offsetOf;
  for (BlockArgument arg : function.getArguments())
    offsetOf[arg] = function
                        .getArgAttrOfType<IntegerAttr>(
                            arg.getArgNumber(), ds::DsDialect::kOffsetAttrName)
                        .getInt();
  int64_t index = 0;
  for (Operation &op : function.getBody().front().without_terminator()) {
    auto offsets =
        op.getAttrOfType<DenseI64ArrayAttr>(ds::DsDialect::kBuffersAttrName);
    for (auto [i, result] : llvm::enumerate(op.getResults()))
      offsetOf[result] = offsets ? offsets[i] : -1;
    auto kernel = dyn_cast<ds::KernelOpInterface>(op);
    if (!kernel || kernel.getAliasedOperand())
      continue;
    llvm::json::Array results, frees;
    for (Value result : op.getResults())
      results.push_back(tensorInfo("", result.getType(), offsetOf[result]));
    if (auto freed =
            op.getAttrOfType<DenseI64ArrayAttr>(ds::DsDialect::kFreesAttrName))
      for (int64_t offset : freed.asArrayRef())
        frees.push_back(offset);
    auto cost = cast<ds::CostOpInterface>(op);
    ops.push_back(llvm::json::Object{
        {"index", index++},
        {"op", op.getName().getStringRef()},
        {"node", ds::getNodeName(op.getLoc())},
        {"flops", cost.getFlops()},
        {"bytes_accessed", cost.getBytesAccessed()},
        {"results", std::move(results)},
        {"frees", std::move(frees)}});
  }
  for (auto [i, result] :
       llvm::enumerate(function.getBody().front().getTerminator()->getOperands())) {
    auto name = function.getResultAttrOfType<StringAttr>(
        i, ds::DsDialect::kOutputAttrName);
    outputs.push_back(tensorInfo(name ? name.getValue() : "", result.getType(),
                                 offsetOf.lookup(result)));
  }

  llvm::json::Object rank{
      {"rank", 0},
      {"arena_bytes", summary->arenaBytes},
      {"arena_peak_bytes", summary->arenaBytes},
      {"persistent_bytes", summary->persistentBytes},
      {"peak_live_bytes", summary->peakLiveBytes},
      {"param_bytes", summary->paramBytes},
      {"input_bytes", summary->inputBytes},
      {"alignment", memory.getAlignment()},
      {"flops", summary->flops},
      {"inputs", std::move(inputs)},
      {"params", std::move(params)},
      {"outputs", std::move(outputs)},
      {"ops", std::move(ops)}};
  llvm::json::Array ranks;
  ranks.push_back(std::move(rank));
  llvm::json::Object plan{{"format", "dsopt-plan"},
                          {"version", 1},
                          {"world", 1},
                          {"grid", llvm::json::Object{{"dp", 1}, {"pp", 1},
                                                      {"tp", 1}}},
                          {"ranks", std::move(ranks)}};
  if (auto source = module->getAttrOfType<StringAttr>(
          ds::DsDialect::kSourceAttrName))
    plan["model"] = source.getValue();
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(plan))) << "\n";
  return success();
}

LogicalResult writePlanText(ModuleOp module, llvm::raw_ostream &os) {
  auto function = module.lookupSymbol<func::FuncOp>("main");
  if (!function)
    return module.emitError() << "no function @main";
  FailureOr<PlanSummary> summary = summarizePlan(function);
  if (failed(summary))
    return failure();
  auto mib = [](int64_t bytes) { return bytes / (1024.0 * 1024.0); };
  os << "dsopt plan: 1 rank\n\n";
  os << "rank 0\n";
  os << llvm::format("  arena           %14lld bytes  (%.2f MiB): the program's "
                     "peak memory\n",
                     (long long)summary->arenaBytes, mib(summary->arenaBytes));
  os << llvm::format("    parameters    %14lld bytes  (%.2f MiB), persistent\n",
                     (long long)summary->paramBytes, mib(summary->paramBytes));
  os << llvm::format("    inputs        %14lld bytes\n",
                     (long long)summary->inputBytes);
  os << llvm::format("    activations   %14lld bytes  (arena minus persistent "
                     "state)\n",
                     (long long)(summary->arenaBytes - summary->persistentBytes));
  os << llvm::format("  peak live       %14lld bytes  (fragmentation %.1f%%)\n",
                     (long long)summary->peakLiveBytes,
                     summary->arenaBytes
                         ? 100.0 * (summary->arenaBytes - summary->peakLiveBytes) /
                               summary->arenaBytes
                         : 0.0);
  os << llvm::format("  kernels         %14lld\n", (long long)summary->kernels);
  os << llvm::format("  flops           %14lld  per run (cost model)\n",
                     (long long)summary->flops);
  return success();
}

} // namespace dsopt
