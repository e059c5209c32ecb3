//===- ModelSummary.cpp - one-screen summary of an imported model ---------===//

#include "dsopt/Analysis/ModelSummary.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Format.h"

using namespace mlir;

namespace dsopt {
namespace {

std::string withCommas(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string result;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      result += ',';
    result += digits[i];
  }
  return value < 0 ? "-" + result : result;
}

std::string humanBytes(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 5) {
    bytes /= 1024.0;
    ++unit;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::format(unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

std::string humanCount(double value, const char *unit) {
  const char *prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int prefix = 0;
  while (value >= 1000.0 && prefix < 6) {
    value /= 1000.0;
    ++prefix;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::format("%.2f %s%s", value, prefixes[prefix], unit);
  return text;
}

std::string typeString(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  std::string text;
  llvm::raw_string_ostream os(text);
  os << tensor.getElementType() << " [";
  llvm::interleave(tensor.getShape(), os, ", ");
  os << "]";
  return text;
}

func::FuncOp mainFunction(ModuleOp module) {
  if (auto main = module.lookupSymbol<func::FuncOp>("main"))
    return main;
  for (auto function : module.getOps<func::FuncOp>())
    return function;
  return {};
}
} // namespace

ParameterStats computeParameterStats(ModuleOp module) {
  ParameterStats stats;
  func::FuncOp function = mainFunction(module);
  if (!function)
    return stats;
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    auto param = function.getArgAttrOfType<ds::ParamAttr>(
        i, ds::DsDialect::kParamAttrName);
    if (!param)
      continue;
    auto type = cast<RankedTensorType>(function.getArgument(i).getType());
    ++stats.tensors;
    stats.elements += type.getNumElements();
    stats.bytes += ds::getByteSize(type).value_or(0);
    if (param.getTrainable()) {
      ++stats.trainableTensors;
      stats.trainableElements += type.getNumElements();
    }
  }
  return stats;
}

void printModelSummary(ModuleOp module, llvm::raw_ostream &os) {
  func::FuncOp function = mainFunction(module);
  if (!function) {
    os << "(no function)\n";
    return;
  }
  auto source = module->getAttrOfType<StringAttr>(ds::DsDialect::kSourceAttrName);
  auto producer = module->getAttrOfType<StringAttr>("ds.producer");
  auto opset = module->getAttrOfType<IntegerAttr>("ds.opset");
  os << "model       " << (source ? source.getValue() : "<unknown>");
  if (producer || opset) {
    os << " (";
    if (producer)
      os << producer.getValue();
    if (producer && opset)
      os << ", ";
    if (opset)
      os << "opset " << opset.getInt();
    os << ")";
  }
  os << "\n";

  unsigned width = 10;
  for (unsigned i = 0; i < function.getNumArguments(); ++i)
    if (auto name = function.getArgAttrOfType<StringAttr>(
            i, ds::DsDialect::kInputAttrName))
      width = std::max<unsigned>(width, name.size());
  for (unsigned i = 0; i < function.getNumResults(); ++i)
    if (auto name = function.getResultAttrOfType<StringAttr>(
            i, ds::DsDialect::kOutputAttrName))
      width = std::max<unsigned>(width, name.size());

  bool first = true;
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    auto name = function.getArgAttrOfType<StringAttr>(
        i, ds::DsDialect::kInputAttrName);
    if (!name)
      continue;
    os << (first ? "inputs      " : "            ")
       << llvm::left_justify(name.getValue(), width) << "  "
       << typeString(function.getArgument(i).getType()) << "\n";
    first = false;
  }
  for (unsigned i = 0; i < function.getNumResults(); ++i) {
    auto name = function.getResultAttrOfType<StringAttr>(
        i, ds::DsDialect::kOutputAttrName);
    os << (i == 0 ? "outputs     " : "            ")
       << llvm::left_justify(name ? name.getValue() : "?", width) << "  "
       << typeString(function.getResultTypes()[i]) << "\n";
  }

  ParameterStats stats = computeParameterStats(module);
  os << "parameters  " << stats.tensors << " tensors, "
     << withCommas(stats.elements) << " elements, " << humanBytes(stats.bytes)
     << "; " << stats.trainableTensors << " trainable ("
     << withCommas(stats.trainableElements) << " elements), "
     << stats.tensors - stats.trainableTensors
     << " not (integer, constant data or excluded by the model)\n";

  struct Param {
    StringRef name;
    Type type;
    int64_t elements;
    unsigned uses;
    bool external;
  };
  std::vector<Param> params;
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    auto param = function.getArgAttrOfType<ds::ParamAttr>(
        i, ds::DsDialect::kParamAttrName);
    if (!param)
      continue;
    BlockArgument arg = function.getArgument(i);
    unsigned uses = std::distance(arg.use_begin(), arg.use_end());
    params.push_back({param.getName(), arg.getType(),
                      cast<RankedTensorType>(arg.getType()).getNumElements(),
                      uses, isa<ds::ExternalDataAttr>(param.getData())});
  }
  std::stable_sort(params.begin(), params.end(),
                   [](const Param &a, const Param &b) {
                     return a.elements > b.elements;
                   });
  size_t shown = std::min<size_t>(params.size(), 6);
  unsigned nameWidth = 8;
  for (size_t i = 0; i < shown; ++i)
    nameWidth = std::max<unsigned>(nameWidth, params[i].name.size());
  for (size_t i = 0; i < shown; ++i) {
    const Param &p = params[i];
    os << "            " << llvm::left_justify(p.name, nameWidth) << "  "
       << llvm::left_justify(typeString(p.type), 22) << " "
       << llvm::right_justify(withCommas(p.elements), 14);
    if (p.uses > 1)
      os << "  (shared by " << p.uses << " ops)";
    os << "\n";
  }
  if (params.size() > shown)
    os << "            ... " << params.size() - shown << " more\n";

  llvm::StringMap<unsigned> histogram;
  unsigned numOps = 0;
  int64_t flops = 0, bytes = 0;
  function.walk([&](Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "ds") {
      ++histogram[op->getName().getStringRef()];
      ++numOps;
    }
    if (auto cost = dyn_cast<ds::CostOpInterface>(op)) {
      flops += cost.getFlops();
      bytes += cost.getBytesAccessed();
    }
  });
  std::vector<std::pair<StringRef, unsigned>> sorted;
  for (const auto &entry : histogram)
    sorted.emplace_back(entry.getKey(), entry.getValue());
  llvm::sort(sorted, [](const auto &a, const auto &b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  os << "ops         " << numOps << " ds ops:";
  unsigned column = 0;
  for (const auto &[name, count] : sorted) {
    if (column++ % 6 == 0)
      os << "\n            ";
    else
      os << ", ";
    os << name.drop_front(3) << " " << count;
  }
  os << "\n";
  os << "cost        " << humanCount(static_cast<double>(flops), "FLOP")
     << " and " << humanBytes(static_cast<double>(bytes))
     << " of memory traffic per forward pass (cost model)\n";
}

} // namespace dsopt
