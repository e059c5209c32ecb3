//===- TrainConfig.h - the training configuration ----------------*- C++ -*-===//
//
// How a model is trained: the optimizer, the learning-rate schedule, gradient
// clipping and the batch sizes. dsopt reads them from a DeepSpeed config file
// (ds_config.json) with DeepSpeed's key names and defaults, and the driver's
// flags override single values. docs/cli.md lists every key read, its default
// and where dsopt deviates from DeepSpeed.
//
//   auto config = loadTrainConfig("ds_config.json");   // parse + validate
//   resolveBatch(*config, modelBatch);                  // train/micro/accum
//   toJson(*config);                                    // the resolved config
//
// Errors name the file and the key path (`ds_config.json:
// optimizer.params.betas: expected ...`); keys dsopt does not implement are
// collected as warnings, never silently dropped.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_CONFIG_TRAINCONFIG_H
#define DSOPT_CONFIG_TRAINCONFIG_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsopt {

enum class OptimizerKind {
  AdamW, // decoupled weight decay (torch.optim.AdamW, FusedAdam adam_w_mode)
  Adam,  // L2 weight decay added to the gradient (torch.optim.Adam)
  SGD,
  Lion
};
enum class ScheduleKind { Constant, WarmupLR, WarmupDecayLR, WarmupCosineLR };

/// What a model trains in: fp32 throughout, or 16-bit parameters,
/// gradients and activations with fp32 master weights (bf16.enabled,
/// fp16.enabled, --precision).
enum class Precision { FP32, BF16, FP16 };

/// fp16's dynamic loss scaler, DeepSpeed's keys and defaults
/// (deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler).
struct LossScalerConfig {
  double lossScale = 0;           // loss_scale; 0: dynamic, > 0: static
  int64_t initialScalePower = 16; // the dynamic scale starts at 2^this
  int64_t lossScaleWindow = 1000; // clean steps before the scale doubles
  int64_t hysteresis = 2;         // overflows tolerated before it halves
  bool consecutiveHysteresis = false; // refill hysteresis every clean step
  double minLossScale = 1;        // the floor; an overflow there is an error
};

/// Where ZeRO-Offload keeps a state: on the device (none), in pinned host
/// memory (cpu) or in files under a directory (nvme).
enum class OffloadDevice { None, CPU, NVMe };

/// zero_optimization.offload_optimizer, DeepSpeed's keys and defaults
/// (deepspeed/runtime/zero/offload_config.py).
struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::None;
  std::string nvmePath;  // required with device nvme
  bool pinMemory = false;
  int64_t bufferCount = 4; // NVMe swap buffers
  double ratio = 1.0;      // the offloaded fraction of the states (partial offload)
};

/// zero_optimization.offload_param (stage 3 only, as in DeepSpeed).
struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::None;
  std::string nvmePath;
  int64_t bufferCount = 5;
  int64_t bufferSize = 100000000;
  int64_t maxInCpu = 1000000000;
  bool pinMemory = false;
};

/// The `aio` block: how the NVMe files are read and written.
struct AioConfig {
  int64_t blockSize = 1048576;
  int64_t queueDepth = 8;
  int64_t intraOpParallelism = 1;
  bool singleSubmit = false;
  bool overlapEvents = true;
};

struct TrainConfig {
  // optimizer
  OptimizerKind optimizer = OptimizerKind::AdamW;
  std::string optimizerName = "AdamW"; // as the user wrote it, for logs
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weightDecay = 0.01;
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false; // SGD
  // schedule (DeepSpeed's parameter names in the JSON)
  ScheduleKind schedule = ScheduleKind::Constant;
  double warmupMinLr = 0.0, warmupMaxLr = 1e-3;
  int64_t warmupNumSteps = 1000;
  int64_t totalNumSteps = 0;
  bool warmupLinear = false; // warmup_type "linear" vs "log"
  double warmupMinRatio = 0.0, cosMinRatio = 1e-4;
  // clipping, batch, misc
  double gradientClipping = 0.0; // 0: off
  int64_t trainBatchSize = 0, microBatchSize = 0,
          gradientAccumulationSteps = 0; // 0 = unset until resolved
  int64_t dataParallelSize = 1;
  int64_t zeroStage = 0;
  // zero_optimization.stage3_param_persistence_threshold (DeepSpeed's
  // default): stage 3 keeps smaller trained parameters whole on every rank.
  int64_t paramPersistenceThreshold = 100000;
  // Elements per gradient bucket (reduce_bucket_size), per parameter
  // all-gather bucket of stages 1 and 2 (allgather_bucket_size) and of
  // parameters gathered ahead of use in stage 3
  // (stage3_prefetch_bucket_size); DeepSpeed's defaults.
  int64_t reduceBucketSize = 500000000, allgatherBucketSize = 500000000,
          prefetchBucketSize = 50000000;
  OffloadOptimizerConfig offloadOptimizer;
  OffloadParamConfig offloadParam;
  AioConfig aio;
  Precision precision = Precision::FP32;
  LossScalerConfig lossScaler;
  /// data_types.grad_accum_dtype: what gradients are reduced and
  /// accumulated in; unset: the training precision (DeepSpeed's default).
  std::optional<Precision> gradAccumDtype;
  int64_t stepsPerPrint = 1;
  // Pipeline parallelism (DeepSpeed's `pipeline` section, --pp and friends):
  // stages (the pp axis), the schedule, model chunks per rank (0: the
  // schedule's default) and what the stages balance ("flops", "parameters"
  // or "uniform"). The micro-batches of a pipelined step are its gradient
  // accumulation steps.
  int64_t pipelineStages = 1;
  std::string pipelineSchedule = "1f1b";
  int64_t pipelineChunks = 0;
  std::string partitionMethod = "flops";
  // Tensor parallelism (--tp, DeepSpeed's tensor_parallel.autotp_size):
  // ranks of the tp axis, the grid's fastest.
  int64_t tensorParallelSize = 1;
  // --sequence-parallel (tensor_parallel.sequence_parallel, Megatron's
  // name): the activations between tp regions split along the sequence.
  bool sequenceParallel = false;
  // The job's ranks (--world; 0: not given): dp * pp * tp.
  int64_t worldSize = 0;
  std::vector<std::string> warnings; // collected, printed by the driver
};

/// Values from the command line that win over the file's. They are applied
/// to the file's JSON before it is read, so derived defaults follow them
/// (WarmupLR's warmup_max_lr follows --lr, --micro-batch with the file's
/// train_batch_size gives the accumulation). Values are expected to be
/// validated by the caller (non-negative numbers, betas in [0, 1), positive
/// integers); the checks that need the file (a flag that does not apply to
/// the file's optimizer) report errors naming the flag.
struct TrainConfigOverrides {
  /// --optimizer: names that differ from the file's optimizer replace it
  /// with that optimizer's PyTorch defaults (DeepSpeed's for Lion), keeping
  /// only the file's lr.
  std::optional<OptimizerKind> optimizer;
  std::optional<double> lr, weightDecay, eps, momentum, gradientClipping;
  std::optional<std::pair<double, double>> betas;
  bool nesterov = false;
  std::optional<int64_t> trainBatchSize, microBatchSize,
      gradientAccumulationSteps, stepsPerPrint;
  /// --zero (zero_optimization.stage) and --dp (DeepSpeed takes it from
  /// the world size; dsopt compiles for it ahead of time).
  std::optional<int64_t> zeroStage, dataParallelSize;
  /// --pp, --microbatches (the gradient accumulation; a different
  /// --grad-accum or gradient_accumulation_steps is an error), --schedule,
  /// --chunks and --world (which must be dp * pp; without --dp it gives
  /// dp = world / pp).
  std::optional<int64_t> pipelineStages, microbatches, pipelineChunks,
      worldSize;
  std::optional<std::string> pipelineSchedule;
  /// --tp (tensor_parallel.autotp_size).
  std::optional<int64_t> tensorParallelSize;
  /// --sequence-parallel (tensor_parallel.sequence_parallel).
  std::optional<bool> sequenceParallel;
  /// --precision: enables fp16 or bf16 (and disables the other), or
  /// disables both for fp32, keeping the sections' other keys.
  std::optional<Precision> precision;
  /// --offload-optimizer (zero_optimization.offload_optimizer.device) and
  /// --nvme-path (its nvme_path).
  std::optional<OffloadDevice> offloadOptimizer;
  std::optional<std::string> nvmePath;
  /// --offload-param (zero_optimization.offload_param.device); --nvme-path
  /// is its nvme_path too.
  std::optional<OffloadDevice> offloadParam;
  /// Not a flag: what is built stops at the training IR, its plan or the
  /// config (--emit=train-mlir, plan, --print-config). A tensor-parallel
  /// step, whose program the runtime cannot run yet, is accepted then.
  bool irOnly = false;

  bool empty() const;
};

/// Reads, parses and validates the config file at `path`.
llvm::Expected<TrainConfig> loadTrainConfig(llvm::StringRef path);
llvm::Expected<TrainConfig>
loadTrainConfig(llvm::StringRef path, const TrainConfigOverrides &overrides);

/// Parses and validates a config held in memory; `fileNameForMessages`
/// starts every error and warning (nothing when empty).
llvm::Expected<TrainConfig>
parseTrainConfig(llvm::StringRef json, llvm::StringRef fileNameForMessages);
llvm::Expected<TrainConfig>
parseTrainConfig(llvm::StringRef json, llvm::StringRef fileNameForMessages,
                 const TrainConfigOverrides &overrides);

/// The model's batch: the static size of the leading axis of its inputs, or
/// nullopt when symbolic or unknown. Resolves train/micro/accumulation like
/// DeepSpeed (_set_batch_related_parameters: any two give the third; only
/// train_batch -> accumulation 1; only micro -> accumulation 1; none -> micro
/// = model batch, accumulation 1) and checks DeepSpeed's identity train =
/// micro * accumulation * dataParallelSize and that micro equals the model's
/// batch when that is static. On success every batch field is > 0.
llvm::Error resolveBatch(TrainConfig &config,
                         std::optional<int64_t> modelBatch);

/// The pipeline schedule's own rules (as the DsPipeline library states
/// them) for the config's stages, micro-batches and chunks, so that a bad
/// combination is refused before a model is read; with one stage only when
/// `evenWithOneStage` (a trace of the schedule). An unresolved accumulation
/// counts as 1; ds-pipeline checks the resolved one again.
llvm::Error checkPipelineSchedule(const TrainConfig &config,
                                  bool evenWithOneStage = false);

/// The config as a DeepSpeed config: a JSON object with a stable key order
/// and every value dsopt uses written out, which dsopt reads back to the
/// same config. For plan.json and --print-config.
std::string toJson(const TrainConfig &config);

/// Offloading's compositions that are not implemented yet (offload_param):
/// an error naming them, else success.
/// `irOnly` says whether only the IR or plan is asked for; every
/// composition that has an IR also compiles to a program today.
llvm::Error checkOffloadComposition(const TrainConfig &config, bool irOnly);

/// "none", "cpu" or "nvme" (DeepSpeed's spelling), and back.
llvm::StringRef offloadDeviceName(OffloadDevice device);
std::optional<OffloadDevice> parseOffloadDevice(llvm::StringRef name);

/// "fp32", "bf16" or "fp16" (the --precision and grad_accum_dtype
/// spelling), and back.
llvm::StringRef precisionName(Precision precision);
std::optional<Precision> parsePrecision(llvm::StringRef name);

/// DeepSpeed's spelling of an optimizer or schedule ("AdamW", "WarmupLR";
/// "Constant" for no scheduler).
llvm::StringRef optimizerKindName(OptimizerKind kind);
llvm::StringRef scheduleKindName(ScheduleKind kind);

} // namespace dsopt

#endif // DSOPT_CONFIG_TRAINCONFIG_H
