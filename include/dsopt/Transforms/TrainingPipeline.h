//===- TrainingPipeline.h - the ds-train pass pipeline -----------*- C++ -*-===//
//
// The compiler's training pipeline as a library: from the imported forward
// module to the memory-planned training step of every rank.
//
//   ds-autodiff -> canonicalize, cse -> ds-optimizer
//     [-> ds-pipeline [-> ds-pipeline-ranks -> builtin.module(...)]]
//     -> ds-zero -> func.func(ds-fuse-elementwise) -> ds-plan-memory
//
// One options struct spells every setting that changes the IR; it is both
// the C++ API (the driver fills it from flags and ds_config.json) and the
// options of the registered pipeline `ds-train`, so
//
//   dsopt-opt m.mlir --pass-pipeline='builtin.module(ds-train{zero-stage=3 dp=2})'
//
// builds exactly what `dsopt --zero 3 --dp 2 --emit=train-mlir` prints.
// With pp > 1 the result holds one nested module per pipeline rank
// (`builtin.module @pp<r>`); see ds-pipeline-ranks.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_TRANSFORMS_TRAININGPIPELINE_H
#define DSOPT_TRANSFORMS_TRAININGPIPELINE_H

#include "dsopt/Config/TrainConfig.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <string>

namespace dsopt {

struct TrainingOptions : public mlir::PassPipelineOptions<TrainingOptions> {
  // What trains.
  Option<std::string> loss{*this, "loss",
                           llvm::cl::desc("Name of the loss output (default: "
                                          "the only scalar float output)"),
                           llvm::cl::init("")};
  ListOption<std::string> frozen{
      *this, "frozen",
      llvm::cl::desc("Parameters that do not train: names or glob patterns")};

  // The optimizer step (ds-optimizer).
  Option<std::string> optimizer{
      *this, "optimizer",
      llvm::cl::desc("adamw, adam (L2 weight decay), sgd or lion"),
      llvm::cl::init("adamw")};
  Option<std::string> optimizerName{
      *this, "optimizer-name",
      llvm::cl::desc("The optimizer as the config spells it, for the log"),
      llvm::cl::init("")};
  Option<double> lr{*this, "lr", llvm::cl::desc("Base learning rate"),
                    llvm::cl::init(1e-3)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("Adam/Lion beta1"),
                       llvm::cl::init(0.9)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("Adam/Lion beta2"),
                       llvm::cl::init(0.999)};
  Option<double> epsilon{*this, "epsilon", llvm::cl::desc("Adam epsilon"),
                         llvm::cl::init(1e-8)};
  Option<double> weightDecay{*this, "weight-decay",
                             llvm::cl::desc("Weight decay"),
                             llvm::cl::init(0.01)};
  Option<double> momentum{*this, "momentum", llvm::cl::desc("SGD momentum"),
                          llvm::cl::init(0.0)};
  Option<double> dampening{*this, "dampening",
                           llvm::cl::desc("SGD dampening"),
                           llvm::cl::init(0.0)};
  Option<bool> nesterov{*this, "nesterov",
                        llvm::cl::desc("SGD Nesterov momentum"),
                        llvm::cl::init(false)};
  Option<double> clip{*this, "clip",
                      llvm::cl::desc("Global gradient-norm clipping "
                                     "threshold (0: off)"),
                      llvm::cl::init(0.0)};
  Option<int64_t> accumulation{
      *this, "accumulation",
      llvm::cl::desc("Micro-batches per optimizer step (with pp > 1: the "
                     "pipeline's micro-batches)"),
      llvm::cl::init(1)};

  // The learning-rate schedule and the loop's settings (recorded in
  // ds.train for the runtime).
  Option<std::string> lrSchedule{
      *this, "lr-schedule",
      llvm::cl::desc("Constant, WarmupLR, WarmupDecayLR or WarmupCosineLR"),
      llvm::cl::init("Constant")};
  Option<double> warmupMinLr{*this, "warmup-min-lr",
                             llvm::cl::desc("Learning rate at step 0"),
                             llvm::cl::init(0.0)};
  Option<double> warmupMaxLr{*this, "warmup-max-lr",
                             llvm::cl::desc("Learning rate after warm-up"),
                             llvm::cl::init(1e-3)};
  Option<int64_t> warmupNumSteps{*this, "warmup-num-steps",
                                 llvm::cl::desc("Steps of the warm-up"),
                                 llvm::cl::init(1000)};
  Option<int64_t> totalNumSteps{*this, "total-num-steps",
                                llvm::cl::desc("Steps of the whole schedule"),
                                llvm::cl::init(0)};
  Option<bool> warmupLinear{*this, "warmup-linear",
                            llvm::cl::desc("Linear instead of log warm-up"),
                            llvm::cl::init(false)};
  Option<double> warmupMinRatio{*this, "warmup-min-ratio",
                                llvm::cl::desc("WarmupCosineLR's start ratio"),
                                llvm::cl::init(0.0)};
  Option<double> cosMinRatio{*this, "cos-min-ratio",
                             llvm::cl::desc("WarmupCosineLR's final ratio"),
                             llvm::cl::init(1e-4)};
  Option<int64_t> stepsPerPrint{*this, "steps-per-print",
                                llvm::cl::desc("Steps between log lines"),
                                llvm::cl::init(1)};
  Option<int64_t> microBatch{*this, "micro-batch",
                             llvm::cl::desc("Samples per micro-batch and rank "
                                            "(recorded when > 0)"),
                             llvm::cl::init(0)};
  Option<int64_t> trainBatch{*this, "train-batch",
                             llvm::cl::desc("Samples per optimizer step over "
                                            "all ranks (recorded when > 0)"),
                             llvm::cl::init(0)};

  // Mixed precision (ds-precision).
  Option<std::string> precision{
      *this, "precision",
      llvm::cl::desc("fp32, or bf16 / fp16: 16-bit parameters and "
                     "activations with fp32 master weights"),
      llvm::cl::init("fp32")};
  Option<std::string> gradAccumDtype{
      *this, "grad-accum-dtype",
      llvm::cl::desc("The gradient accumulators' type with 16-bit training: "
                     "fp32, or the 16-bit type (default)"),
      llvm::cl::init("")};

  // fp16's loss scaler (ds-autodiff / ds-optimizer loss-scale-input).
  Option<double> staticLossScale{
      *this, "static-loss-scale",
      llvm::cl::desc("fp16.loss_scale: 0 dynamic, > 0 static"),
      llvm::cl::init(0.0)};
  Option<int64_t> initialScalePower{
      *this, "initial-scale-power",
      llvm::cl::desc("fp16.initial_scale_power"), llvm::cl::init(16)};
  Option<int64_t> lossScaleWindow{*this, "loss-scale-window",
                                  llvm::cl::desc("fp16.loss_scale_window"),
                                  llvm::cl::init(1000)};
  Option<int64_t> hysteresis{*this, "hysteresis",
                             llvm::cl::desc("fp16.hysteresis"),
                             llvm::cl::init(2)};
  Option<bool> consecutiveHysteresis{
      *this, "consecutive-hysteresis",
      llvm::cl::desc("fp16.consecutive_hysteresis"), llvm::cl::init(false)};
  Option<double> minLossScale{*this, "min-loss-scale",
                              llvm::cl::desc("fp16.min_loss_scale"),
                              llvm::cl::init(1.0)};

  // Data parallelism and ZeRO (ds-zero).
  Option<int64_t> zeroStage{*this, "zero-stage",
                            llvm::cl::desc("ZeRO stage 0, 1, 2 or 3"),
                            llvm::cl::init(0)};
  Option<int64_t> dp{*this, "dp",
                     llvm::cl::desc("Ranks of the data-parallel axis"),
                     llvm::cl::init(1)};
  Option<int64_t> persistenceThreshold{
      *this, "param-persistence-threshold",
      llvm::cl::desc("Stage 3 keeps smaller trained parameters whole"),
      llvm::cl::init(100000)};
  Option<int64_t> reduceBucketSize{*this, "reduce-bucket-size",
                                   llvm::cl::desc("Elements per gradient "
                                                  "bucket"),
                                   llvm::cl::init(500000000)};
  Option<int64_t> allgatherBucketSize{
      *this, "allgather-bucket-size",
      llvm::cl::desc("Elements per parameter all-gather bucket"),
      llvm::cl::init(500000000)};
  Option<int64_t> prefetchBucketSize{
      *this, "prefetch-bucket-size",
      llvm::cl::desc("Stage 3 prefetch window in elements"),
      llvm::cl::init(50000000)};
  // ZeRO-Offload (ds-offload): where the optimizer states live.
  Option<std::string> offloadOptimizer{
      *this, "offload-optimizer",
      llvm::cl::desc("Optimizer states and their update on the device "
                     "(none), in pinned host memory (cpu) or in files (nvme)"),
      llvm::cl::init("none")};
  // ZeRO-Infinity's parameter offload (stage 3; ds-offload's param-device).
  Option<std::string> offloadParam{
      *this, "offload-param",
      llvm::cl::desc("ZeRO-3's parameter shards on the device (none), in "
                     "pinned host memory (cpu) or in files (nvme)"),
      llvm::cl::init("none")};
  Option<int64_t> offloadParamBufferCount{
      *this, "offload-param-buffer-count",
      llvm::cl::desc("Parameter shards fetched ahead at most "
                     "(offload_param.buffer_count)"),
      llvm::cl::init(5)};
  Option<int64_t> offloadParamBufferSize{
      *this, "offload-param-buffer-size",
      llvm::cl::desc("Elements of each buffer a parameter shard is read "
                     "into from its file (offload_param.buffer_size)"),
      llvm::cl::init(100000000)};
  Option<bool> offloadParamPinMemory{
      *this, "offload-param-pin-memory",
      llvm::cl::desc("Offloaded parameters in pinned host memory "
                     "(offload_param.pin_memory)"),
      llvm::cl::init(false)};
  Option<int64_t> offloadParamMaxInCpu{
      *this, "offload-param-max-in-cpu",
      llvm::cl::desc("With nvme, parameter elements kept in host memory "
                     "instead of the file (offload_param.max_in_cpu)"),
      llvm::cl::init(1000000000)};
  Option<double> offloadRatio{
      *this, "offload-ratio",
      llvm::cl::desc("The offloaded fraction of the optimizer states "
                     "(offload_optimizer.ratio; ds-offload's ratio)"),
      llvm::cl::init(1.0)};

  // Pipeline parallelism (ds-pipeline, ds-pipeline-ranks).
  Option<int64_t> tp{
      *this, "tp",
      llvm::cl::desc("Ranks of the tensor-parallel axis (ds-tensor-parallel)"),
      llvm::cl::init(1)};
  Option<bool> sequenceParallel{
      *this, "sequence-parallel",
      llvm::cl::desc("Megatron's sequence parallelism along the tp axis"),
      llvm::cl::init(false)};
  Option<int64_t> pp{*this, "pp",
                     llvm::cl::desc("Pipeline stages (ranks of the pp axis)"),
                     llvm::cl::init(1)};
  Option<std::string> schedule{
      *this, "schedule",
      llvm::cl::desc("gpipe, 1f1b, interleaved or zb-h1"),
      llvm::cl::init("1f1b")};
  Option<int64_t> chunks{*this, "chunks",
                         llvm::cl::desc("Model chunks per rank (0: the "
                                        "schedule's default)"),
                         llvm::cl::init(0)};
  Option<std::string> balance{
      *this, "balance",
      llvm::cl::desc("What the stages balance: flops, parameters or uniform"),
      llvm::cl::init("flops")};
  Option<bool> cutOnly{
      *this, "cut-only",
      llvm::cl::desc("Cut the step into pipeline stages (also with pp = 1) "
                     "and stop there: what a trace of the schedule needs"),
      llvm::cl::init(false)};

  Option<bool> fuseAttention{
      *this, "fuse-attention",
      llvm::cl::desc("Fuse scaled-dot-product attention into ds.attention "
                     "before autodiff (ds-fuse-attention)"),
      llvm::cl::init(false)};

  // Planning.
  Option<bool> fuse{*this, "fuse",
                    llvm::cl::desc("Fuse elementwise chains before planning"),
                    llvm::cl::init(true)};
  Option<bool> fuseParamCopy{
      *this, "fuse-param-copy",
      llvm::cl::desc("Let optimizer updates write mixed precision's 16-bit "
                     "parameter copy in their own loop "
                     "(ds-fuse-param-copy)"),
      llvm::cl::init(true)};
  Option<bool> fuseLossGrad{
      *this, "fuse-loss-grad",
      llvm::cl::desc("Compute softmax cross-entropy and its gradient in one "
                     "op (ds-fuse-loss-grad)"),
      llvm::cl::init(true)};
  Option<bool> padVocab{
      *this, "pad-vocab",
      llvm::cl::desc("Pad a 16-bit LM head's vocabulary to a multiple of 8 "
                     "(ds-pad-vocab; dsopt sets it for --target cuda)"),
      llvm::cl::init(false)};
};

/// Appends ds-fuse-loss-grad (when `fuseLossGrad`), ds-pad-vocab (when
/// `padVocab`), fusion (when `fuse`),
/// ds-group-optimizer, ds-fuse-param-copy (when `fuseParamCopy`) and the
/// memory plan, the last passes of every program the driver builds
/// (forward, training, gradients).
void buildPlanningPipeline(mlir::OpPassManager &pm, bool fuse,
                           bool fuseParamCopy = true, bool fuseLossGrad = true,
                           bool padVocab = false);

/// Appends the training pipeline for `options` to `pm` (anchored on
/// builtin.module).
void buildTrainingPipeline(mlir::OpPassManager &pm,
                           const TrainingOptions &options);

/// The options of a resolved training configuration (batch sizes resolved,
/// see resolveBatch), with the loss and frozen parameters of the command
/// line.
void setTrainingOptions(TrainingOptions &options, const TrainConfig &config);

/// Registers `ds-train` with the pass registry.
void registerTrainingPipeline();

} // namespace dsopt

#endif // DSOPT_TRANSFORMS_TRAININGPIPELINE_H
