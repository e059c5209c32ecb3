//===- Training.cpp - the driver's training pipelines ----------------------===//

#include "Training.h"

#include "dsopt/Transforms/Passes.h"
#include "dsopt/Transforms/TrainingPipeline.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/GlobPattern.h"

using namespace mlir;

namespace dsopt {
namespace {

LogicalResult runPipeline(ModuleOp module,
                          const TrainingPipelineOptions &options,
                          llvm::function_ref<void(PassManager &)> populate) {
  PassManager pm(module.getContext());
  if (options.configure && failed(options.configure(pm)))
    return failure();
  populate(pm);
  return pm.run(module);
}

DsAutodiffOptions autodiffOptions(const TrainingPipelineOptions &options) {
  DsAutodiffOptions autodiff;
  autodiff.loss = options.loss;
  autodiff.frozen.assign(options.frozen.begin(), options.frozen.end());
  return autodiff;
}

void addCleanup(PassManager &pm) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

std::string withThousands(int64_t value) {
  std::string digits = std::to_string(value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

} // namespace

bool isTrainingGraph(ModuleOp module, StringRef loss, std::string &why) {
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main) {
    why = "the module has no @main";
    return false;
  }
  unsigned candidates = 0;
  for (unsigned i = 0; i < main.getNumResults(); ++i) {
    auto type = cast<RankedTensorType>(main.getResultTypes()[i]);
    auto name = main.getResultAttrOfType<StringAttr>(
        i, ds::DsDialect::kOutputAttrName);
    if (!loss.empty()) {
      if (name && name.getValue() == loss)
        return true;
      continue;
    }
    if (isa<FloatType>(type.getElementType()) && type.getNumElements() == 1 &&
        type.getRank() <= 1)
      ++candidates;
  }
  if (!loss.empty()) {
    why = "the model has no output named '" + loss.str() + "'";
    return false;
  }
  if (candidates == 1)
    return true;
  why = candidates == 0
            ? "the model has no scalar floating-point output (a loss)"
            : "the model has several scalar floating-point outputs; choose "
              "the loss with --loss NAME";
  return false;
}

FailureOr<OwningOpRef<ModuleOp>>
buildGradientModule(ModuleOp module, const TrainingPipelineOptions &options) {
  OwningOpRef<ModuleOp> grad(module.clone());
  if (failed(runPipeline(*grad, options, [&](PassManager &pm) {
        if (options.fuseAttention)
          pm.addNestedPass<func::FuncOp>(createDsFuseAttention());
        pm.addPass(createDsAutodiff(autodiffOptions(options)));
        addCleanup(pm);
      })))
    return failure();
  // @main_grad becomes the program's @main; its gradients are outputs.
  (*grad).lookupSymbol<func::FuncOp>("main").erase();
  auto function = (*grad).lookupSymbol<func::FuncOp>("main_grad");
  function.setSymName("main");
  Builder b(function.getContext());
  for (unsigned i = 0; i < function.getNumResults(); ++i)
    if (auto param = function.getResultAttrOfType<StringAttr>(
            i, ds::DsDialect::kGradAttrName)) {
      function.removeResultAttr(i, b.getStringAttr(ds::DsDialect::kGradAttrName));
      function.setResultAttr(i, ds::DsDialect::kOutputAttrName,
                             b.getStringAttr(param.getValue() + ".grad"));
    }
  if (failed(runPipeline(*grad, options,
                         [&](PassManager &pm) {
                           buildPlanningPipeline(pm, options.fuse,
                                                 /*fuseParamCopy=*/true,
                                                 options.fuseLossGrad);
                         })))
    return failure();
  return grad;
}

std::string trainingSummary(ModuleOp module, ArrayRef<std::string> frozen) {
  SmallVector<llvm::GlobPattern> patterns;
  for (const std::string &text : frozen)
    if (auto pattern = llvm::GlobPattern::create(text))
      patterns.push_back(std::move(*pattern));
    else
      llvm::consumeError(pattern.takeError());
  llvm::StringSet<> seen;
  int64_t tensors = 0, elements = 0, frozenCount = 0, other = 0;
  // Every function, also those of nested pipeline-rank programs.
  module.walk([&](func::FuncOp function) {
    for (unsigned i = 0; i < function.getNumArguments(); ++i) {
      auto param = function.getArgAttrOfType<ds::ParamAttr>(
          i, ds::DsDialect::kParamAttrName);
      if (!param || !seen.insert(param.getName()).second)
        continue;
      if (param.getTrainable()) {
        ++tensors;
        // A ZeRO-3 shard counts as the whole parameter.
        Type type = function.getArgumentTypes()[i];
        if (auto whole = function.getArgAttrOfType<TypeAttr>(
                i, ds::DsDialect::kShardedAttrName))
          type = whole.getValue();
        elements += cast<ShapedType>(type).getNumElements();
      } else if (llvm::any_of(patterns, [&](const llvm::GlobPattern &p) {
                   return p.match(param.getName());
                 })) {
        ++frozenCount;
      } else {
        ++other;
      }
    }
  });
  std::string line = "training " + std::to_string(tensors) +
                     " parameter tensor" + (tensors == 1 ? "" : "s") + " (" +
                     withThousands(elements) + " parameters); " +
                     std::to_string(frozenCount) + " frozen";
  if (other)
    line += ", " + std::to_string(other) +
            " not trained (integer, not reaching the loss, a large Constant "
            "node's data, or not updated by the model's TrainingInfoProto)";
  return line;
}

} // namespace dsopt
