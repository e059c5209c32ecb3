//===- Training.h - the driver's training pipelines -------------*- C++ -*-===//
//
// From the imported forward module, the driver builds up to three programs:
// the forward program (`run`), the training program (`train`, built by the
// library's ds-train pipeline, dsopt/Transforms/TrainingPipeline.h) and, on
// request, the gradient program (`gradients`: one forward and backward pass
// that writes every gradient), built here.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_TOOLS_DSOPT_TRAINING_H
#define DSOPT_TOOLS_DSOPT_TRAINING_H

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
  /// Fuse attention before autodiff (ds-fuse-attention).
  bool fuseAttention = false;
  /// Compute softmax cross-entropy and its gradient in one op
  /// (ds-fuse-loss-grad).
  bool fuseLossGrad = true;
  /// Applies the command line's pass-manager options (IR printing,
  /// timing) to each pass manager the pipeline creates; fails on bad ones.
  std::function<mlir::LogicalResult(mlir::PassManager &)> configure;
};

/// Whether `module` looks like a training graph: it has exactly one scalar
/// floating-point output or `loss` names one. Otherwise `why` says why not.
bool isTrainingGraph(mlir::ModuleOp module, llvm::StringRef loss,
                     std::string &why);

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
