//===- TrainingPipeline.cpp - the ds-train pass pipeline ------------------===//

#include "dsopt/Transforms/TrainingPipeline.h"

#include "dsopt/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

#include <algorithm>

using namespace mlir;

namespace dsopt {
namespace {

void addZero(OpPassManager &pm, const TrainingOptions &options) {
  DsZeroOptions zero;
  zero.stage = options.zeroStage;
  zero.dp = options.dp;
  zero.persistenceThreshold = options.persistenceThreshold;
  zero.reduceBucketSize = options.reduceBucketSize;
  zero.allgatherBucketSize = options.allgatherBucketSize;
  zero.prefetchBucketSize = options.prefetchBucketSize;
  pm.addPass(createDsZero(zero));
  if (options.offloadOptimizer != "none" || options.offloadParam != "none") {
    DsOffloadOptions offload;
    offload.device = options.offloadOptimizer;
    offload.ratio = options.offloadRatio;
    offload.paramDevice = options.offloadParam;
    offload.paramBufferCount = options.offloadParamBufferCount;
    offload.paramBufferSize = options.offloadParamBufferSize;
    offload.paramMaxInCpu = options.offloadParamMaxInCpu;
    offload.paramPinMemory = options.offloadParamPinMemory;
    pm.addPass(createDsOffload(offload));
  }
}

} // namespace

void buildPlanningPipeline(OpPassManager &pm, bool fuse, bool fuseParamCopy,
                           bool fuseLossGrad, bool padVocab) {
  // The loss's pass writes the scores' gradient (after autodiff, precision,
  // the pipeline cut and ZeRO; cpu and cuda alike).
  if (fuseLossGrad)
    pm.addNestedPass<func::FuncOp>(createDsFuseLossGrad());
  // On the fused loss, before the epilogue fusion.
  if (padVocab)
    pm.addNestedPass<func::FuncOp>(createDsPadVocab());
  if (fuse) {
    // Before the elementwise fusion, which would take the bias and
    // residual adds into its loops.
    pm.addNestedPass<func::FuncOp>(createDsFuseMatMulEpilogue());
    pm.addNestedPass<func::FuncOp>(createDsFuseElementwise());
  }
  pm.addNestedPass<func::FuncOp>(createDsGroupOptimizer());
  if (fuseParamCopy)
    pm.addNestedPass<func::FuncOp>(createDsFuseParamCopy());
  pm.addPass(createDsPlanMemory());
}

void buildTrainingPipeline(OpPassManager &pm, const TrainingOptions &options) {
  // The tanh GELU exported as primitive ops becomes one ds.gelu, whose
  // derivative and matmul epilogues the later passes know.
  pm.addNestedPass<func::FuncOp>(createDsRecognizeGelu());
  // Tensor parallelism shards the forward; autodiff then derives the
  // backward's collectives (docs/tensor-parallel.md).
  if (options.tp > 1) {
    DsTensorParallelOptions tensorParallel;
    tensorParallel.size = options.tp;
    tensorParallel.dp = options.dp;
    tensorParallel.sequenceParallel = options.sequenceParallel;
    pm.addPass(createDsTensorParallel(tensorParallel));
  }
  // After tensor parallelism, which splits the heads: each rank fuses its
  // own.
  if (options.fuseAttention)
    pm.addNestedPass<func::FuncOp>(createDsFuseAttention());
  DsAutodiffOptions autodiff;
  autodiff.loss = options.loss;
  autodiff.frozen.assign(options.frozen.begin(), options.frozen.end());
  // fp16 scales the loss: its gradient seed becomes an input, before the
  // canonicalizer folds a constant seed into the backward.
  bool scaled = options.precision == "fp16";
  autodiff.lossScaleInput = scaled;
  pm.addPass(createDsAutodiff(autodiff));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());

  DsOptimizerOptions optimizer;
  optimizer.optimizer = options.optimizer;
  optimizer.optimizerName = options.optimizerName;
  optimizer.beta1 = options.beta1;
  optimizer.beta2 = options.beta2;
  optimizer.epsilon = options.epsilon;
  optimizer.weightDecay = options.weightDecay;
  optimizer.momentum = options.momentum;
  optimizer.dampening = options.dampening;
  optimizer.nesterov = options.nesterov;
  optimizer.clip = options.clip;
  optimizer.accumulation = options.accumulation;
  optimizer.lr = options.lr;
  optimizer.lrSchedule = options.lrSchedule;
  optimizer.warmupMinLr = options.warmupMinLr;
  optimizer.warmupMaxLr = options.warmupMaxLr;
  optimizer.warmupNumSteps = options.warmupNumSteps;
  optimizer.totalNumSteps = options.totalNumSteps;
  optimizer.warmupLinear = options.warmupLinear;
  optimizer.warmupMinRatio = options.warmupMinRatio;
  optimizer.cosMinRatio = options.cosMinRatio;
  optimizer.stepsPerPrint = options.stepsPerPrint;
  optimizer.microBatch = options.microBatch;
  optimizer.trainBatch = options.trainBatch;
  optimizer.lossScaleInput = scaled;
  optimizer.staticLossScale = options.staticLossScale;
  optimizer.initialScalePower = options.initialScalePower;
  optimizer.lossScaleWindow = options.lossScaleWindow;
  optimizer.hysteresis = options.hysteresis;
  optimizer.consecutiveHysteresis = options.consecutiveHysteresis;
  optimizer.minLossScale = options.minLossScale;
  pm.addPass(createDsOptimizer(optimizer));

  if (options.precision != "fp32") {
    DsPrecisionOptions precision;
    precision.dtype = options.precision;
    precision.gradAccumDtype = options.gradAccumDtype;
    pm.addPass(createDsPrecision(precision));
    // Cast pairs that cancel, casts of constants.
    pm.addPass(createCanonicalizerPass());
  }

  bool pipelined = options.pp > 1;
  bool cut = pipelined || options.cutOnly;
  // Before the cut, the loss and its gradient are in one function: fused
  // there, the loss's op is the last stage's forward and its gradient
  // result one of the stage's stashed activations, so the last stage
  // stashes the scores' gradient instead of the log-probabilities and its
  // backward no longer computes it (docs/passes.md#ds-fuse-loss-grad).
  if (cut && options.fuseLossGrad)
    pm.addNestedPass<func::FuncOp>(createDsFuseLossGrad());
  // The LM head's padding, too: after the cut the loss is in the last
  // stage's forward and its two products in the stage's backward, where
  // the pass's pattern (one function) no longer sees them.
  if (cut && options.padVocab)
    pm.addNestedPass<func::FuncOp>(createDsPadVocab());
  if (cut) {
    DsPipelineOptions pipeline;
    pipeline.stages = options.pp;
    pipeline.microbatches = options.accumulation;
    pipeline.schedule = options.schedule;
    pipeline.chunks = options.chunks;
    pipeline.balance = options.balance;
    pm.addPass(createDsPipeline(pipeline));
  }
  if (options.cutOnly)
    return;
  if (!pipelined) {
    addZero(pm, options);
    buildPlanningPipeline(pm, options.fuse, options.fuseParamCopy,
                          options.fuseLossGrad, options.padVocab);
    return;
  }
  // Each rank's program is a nested module; ZeRO runs along its dp axis.
  DsPipelineRanksOptions ranks;
  ranks.dp = options.dp;
  pm.addPass(createDsPipelineRanks(ranks));
  OpPassManager &rank = pm.nest<ModuleOp>();
  addZero(rank, options);
  // The loss and its gradient were fused, and the head padded, before the
  // cut.
  buildPlanningPipeline(rank, options.fuse, options.fuseParamCopy,
                        /*fuseLossGrad=*/false, /*padVocab=*/false);
}

void setTrainingOptions(TrainingOptions &options, const TrainConfig &config) {
  options.optimizer = optimizerKindName(config.optimizer).lower();
  options.optimizerName = config.optimizerName;
  options.lr = config.lr;
  options.beta1 = config.beta1;
  options.beta2 = config.beta2;
  options.epsilon = config.eps;
  options.weightDecay = config.weightDecay;
  options.momentum = config.momentum;
  options.dampening = config.dampening;
  options.nesterov = config.nesterov;
  options.clip = config.gradientClipping;
  options.accumulation =
      std::max<int64_t>(config.gradientAccumulationSteps, 1);
  options.lrSchedule = scheduleKindName(config.schedule).str();
  options.warmupMinLr = config.warmupMinLr;
  options.warmupMaxLr = config.warmupMaxLr;
  options.warmupNumSteps = config.warmupNumSteps;
  options.totalNumSteps = config.totalNumSteps;
  options.warmupLinear = config.warmupLinear;
  options.warmupMinRatio = config.warmupMinRatio;
  options.cosMinRatio = config.cosMinRatio;
  options.stepsPerPrint = config.stepsPerPrint;
  options.microBatch = config.microBatchSize;
  options.trainBatch = config.trainBatchSize;
  options.precision = precisionName(config.precision).str();
  if (config.gradAccumDtype)
    options.gradAccumDtype = precisionName(*config.gradAccumDtype).str();
  options.staticLossScale = config.lossScaler.lossScale;
  options.initialScalePower = config.lossScaler.initialScalePower;
  options.lossScaleWindow = config.lossScaler.lossScaleWindow;
  options.hysteresis = config.lossScaler.hysteresis;
  options.consecutiveHysteresis = config.lossScaler.consecutiveHysteresis;
  options.minLossScale = config.lossScaler.minLossScale;
  options.zeroStage = config.zeroStage;
  options.dp = config.dataParallelSize;
  options.persistenceThreshold = config.paramPersistenceThreshold;
  options.reduceBucketSize = config.reduceBucketSize;
  options.allgatherBucketSize = config.allgatherBucketSize;
  options.prefetchBucketSize = config.prefetchBucketSize;
  options.offloadOptimizer =
      offloadDeviceName(config.offloadOptimizer.device).str();
  options.offloadRatio = config.offloadOptimizer.ratio;
  options.offloadParam = offloadDeviceName(config.offloadParam.device).str();
  options.offloadParamBufferCount = config.offloadParam.bufferCount;
  options.offloadParamBufferSize = config.offloadParam.bufferSize;
  options.offloadParamMaxInCpu = config.offloadParam.maxInCpu;
  options.offloadParamPinMemory = config.offloadParam.pinMemory;
  options.tp = config.tensorParallelSize;
  options.sequenceParallel = config.sequenceParallel;
  options.pp = config.pipelineStages;
  options.schedule = config.pipelineSchedule;
  options.chunks = config.pipelineChunks;
  options.balance = config.partitionMethod;
}

void registerTrainingPipeline() {
  PassPipelineRegistration<TrainingOptions>(
      "ds-train",
      "The training step of every rank from an imported forward module: "
      "autodiff, the optimizer step, pipeline stages, ZeRO and the memory "
      "plan (see docs/passes.md)",
      buildTrainingPipeline);
}

} // namespace dsopt
