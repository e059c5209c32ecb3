//===- Training.h - the driver's training pipelines -------------*- C++ -*-===//
//
// From the imported forward module, the driver builds up to three programs:
// the forward program (`run`), the training program (`train`: the training
// step of ds-autodiff and ds-optimizer) and, on request, the gradient program
// (`gradients`: one forward and backward pass that writes every gradient).
// These functions build the memory-planned modules of the last two; the
// driver lowers and compiles them like the forward one.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_TOOLS_DSOPT_TRAINING_H
#define DSOPT_TOOLS_DSOPT_TRAINING_H

#include "dsopt/Config/TrainConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"

#include <functional>
#include <string>
#include <vector>

namespace dsopt {

struct TrainingPipelineOptions {
  /// The loss output (empty: the only scalar float output).
  std::string loss;
  /// Names or glob patterns of initializers that do not train.
  std::vector<std::string> frozen;
  /// Fuse elementwise chains before planning.
  bool fuse = true;
  /// Run ds-pipeline even with one stage (for a trace of the schedule);
  /// with more than one stage in the config it always runs.
  bool pipeline = false;
  /// Applies the command line's pass-manager options (IR printing,
  /// timing) to each pass manager the pipeline creates; fails on bad ones.
  std::function<mlir::LogicalResult(mlir::PassManager &)> configure;
};

/// Whether `module` looks like a training graph: it has exactly one scalar
/// floating-point output or `loss` names one. Otherwise `why` says why not.
bool isTrainingGraph(mlir::ModuleOp module, llvm::StringRef loss,
                     std::string &why);

/// The training program: a clone of `module` differentiated, with the
/// optimizer step of `config`, fused and memory-planned. Errors are
/// reported through the context's diagnostics. With more than one pipeline
/// stage it is the step cut into stages (ds-pipeline), neither sharded nor
/// planned: buildPipelineRanks makes the programs from it.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildTrainingModule(mlir::ModuleOp module, const TrainConfig &config,
                    const TrainingPipelineOptions &options);

/// The program of every pipeline rank, from the cut training step of
/// buildTrainingModule: ds-pipeline-split, ds-zero, fused and planned.
mlir::FailureOr<std::vector<mlir::OwningOpRef<mlir::ModuleOp>>>
buildPipelineRanks(mlir::ModuleOp partitioned, const TrainConfig &config,
                   const TrainingPipelineOptions &options);

/// The gradient program: @main computing the loss and, for every trainable
/// parameter P, the output `P.grad`; fused and memory-planned.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildGradientModule(mlir::ModuleOp module,
                    const TrainingPipelineOptions &options);

/// One line about which parameters train, from a differentiated module:
/// "training 12 parameter tensors (4,810 parameters); 2 frozen, 1 not
/// trainable".
std::string trainingSummary(mlir::ModuleOp trainOrGrad,
                            llvm::ArrayRef<std::string> frozen);

} // namespace dsopt

#endif // DSOPT_TOOLS_DSOPT_TRAINING_H
