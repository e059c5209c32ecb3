//===- Training.cpp - the driver's training pipelines ----------------------===//

#include "Training.h"

#include "dsopt/Transforms/Passes.h"

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

void addPlanning(PassManager &pm, const TrainingPipelineOptions &options) {
  if (options.fuse)
    pm.addNestedPass<func::FuncOp>(createDsFuseElementwise());
  pm.addPass(createDsPlanMemory());
}

void addZero(PassManager &pm, const TrainConfig &config) {
  DsZeroOptions zero;
  zero.stage = config.zeroStage;
  zero.dp = config.dataParallelSize;
  zero.persistenceThreshold = config.paramPersistenceThreshold;
  zero.reduceBucketSize = config.reduceBucketSize;
  zero.allgatherBucketSize = config.allgatherBucketSize;
  zero.prefetchBucketSize = config.prefetchBucketSize;
  pm.addPass(createDsZero(zero));
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

/// The training recipe the runtime reports and schedules the learning rate
/// by, next to what ds-optimizer records.
void recordRecipe(ModuleOp module, const TrainConfig &config) {
  Builder b(module.getContext());
  NamedAttrList train;
  if (auto existing = module->getAttrOfType<DictionaryAttr>(
          ds::DsDialect::kTrainAttrName))
    train.append(existing.getValue());
  train.set("optimizer", b.getStringAttr(config.optimizerName));
  train.set("lr", b.getF64FloatAttr(config.lr));
  train.set("steps_per_print", b.getI64IntegerAttr(config.stepsPerPrint));
  train.set("micro_batch", b.getI64IntegerAttr(config.microBatchSize));
  train.set("train_batch", b.getI64IntegerAttr(config.trainBatchSize));
  train.set("schedule", b.getStringAttr(scheduleKindName(config.schedule)));
  train.set("warmup_min_lr", b.getF64FloatAttr(config.warmupMinLr));
  train.set("warmup_max_lr", b.getF64FloatAttr(config.warmupMaxLr));
  train.set("warmup_num_steps", b.getI64IntegerAttr(config.warmupNumSteps));
  train.set("total_num_steps", b.getI64IntegerAttr(config.totalNumSteps));
  train.set("warmup_linear", b.getBoolAttr(config.warmupLinear));
  train.set("warmup_min_ratio", b.getF64FloatAttr(config.warmupMinRatio));
  train.set("cos_min_ratio", b.getF64FloatAttr(config.cosMinRatio));
  module->setAttr(ds::DsDialect::kTrainAttrName,
                  train.getDictionary(module.getContext()));
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
buildTrainingModule(ModuleOp module, const TrainConfig &config,
                    const TrainingPipelineOptions &options) {
  OwningOpRef<ModuleOp> train(module.clone());
  DsOptimizerOptions optimizer;
  switch (config.optimizer) {
  case OptimizerKind::AdamW: optimizer.optimizer = "adamw"; break;
  case OptimizerKind::Adam: optimizer.optimizer = "adam"; break;
  case OptimizerKind::SGD: optimizer.optimizer = "sgd"; break;
  case OptimizerKind::Lion: optimizer.optimizer = "lion"; break;
  }
  optimizer.beta1 = config.beta1;
  optimizer.beta2 = config.beta2;
  optimizer.epsilon = config.eps;
  optimizer.weightDecay = config.weightDecay;
  optimizer.momentum = config.momentum;
  optimizer.dampening = config.dampening;
  optimizer.nesterov = config.nesterov;
  optimizer.clip = config.gradientClipping;
  optimizer.accumulation = std::max<int64_t>(config.gradientAccumulationSteps, 1);
  if (failed(runPipeline(*train, options, [&](PassManager &pm) {
        pm.addPass(createDsAutodiff(autodiffOptions(options)));
        addCleanup(pm);
        pm.addPass(createDsOptimizer(optimizer));
        if (config.pipelineStages > 1 || options.pipeline) {
          DsPipelineOptions pipeline;
          pipeline.stages = config.pipelineStages;
          pipeline.microbatches = optimizer.accumulation;
          pipeline.schedule = config.pipelineSchedule;
          pipeline.chunks = config.pipelineChunks;
          pipeline.balance = config.partitionMethod;
          pm.addPass(createDsPipeline(pipeline));
        }
        if (config.pipelineStages <= 1)
          addZero(pm, config);
      })))
    return failure();
  recordRecipe(*train, config);
  if (config.pipelineStages > 1)
    return train;
  if (failed(runPipeline(*train, options,
                         [&](PassManager &pm) { addPlanning(pm, options); })))
    return failure();
  return train;
}

FailureOr<std::vector<OwningOpRef<ModuleOp>>>
buildPipelineRanks(ModuleOp partitioned, const TrainConfig &config,
                   const TrainingPipelineOptions &options) {
  std::vector<OwningOpRef<ModuleOp>> ranks;
  for (int64_t r = 0; r < config.pipelineStages; ++r) {
    OwningOpRef<ModuleOp> rank(partitioned.clone());
    if (failed(runPipeline(*rank, options, [&](PassManager &pm) {
          DsPipelineSplitOptions split;
          split.rank = r;
          split.dp = config.dataParallelSize;
          pm.addPass(createDsPipelineSplit(split));
          addZero(pm, config);
          addPlanning(pm, options);
        })))
      return failure();
    ranks.push_back(std::move(rank));
  }
  return ranks;
}

FailureOr<OwningOpRef<ModuleOp>>
buildGradientModule(ModuleOp module, const TrainingPipelineOptions &options) {
  OwningOpRef<ModuleOp> grad(module.clone());
  if (failed(runPipeline(*grad, options, [&](PassManager &pm) {
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
                         [&](PassManager &pm) { addPlanning(pm, options); })))
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
  for (auto function : module.getOps<func::FuncOp>())
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
  std::string line = "training " + std::to_string(tensors) +
                     " parameter tensor" + (tensors == 1 ? "" : "s") + " (" +
                     withThousands(elements) + " parameters); " +
                     std::to_string(frozenCount) + " frozen";
  if (other)
    line += ", " + std::to_string(other) +
            " not trained (integer, not reaching the loss, or not updated by "
            "the model's TrainingInfoProto)";
  return line;
}

} // namespace dsopt
