//===- Plan.h - the plan of a compiled program -------------------*- C++ -*-===//
//
// What a memory-planned program needs, before it runs: plan.json (machine
// readable, documented in docs/plan-format.md) and plan.txt (for people).
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_ANALYSIS_PLAN_H
#define DSOPT_ANALYSIS_PLAN_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace dsopt {

struct PlanSummary {
  int64_t arenaBytes = 0, persistentBytes = 0, peakLiveBytes = 0;
  int64_t paramBytes = 0, inputBytes = 0;
  int64_t kernels = 0, flops = 0, bytesAccessed = 0;
  /// The largest kernel workspace (ds.workspace) of the function: included
  /// in arenaBytes, like every buffer; one op's workspace is live at a time.
  int64_t workspaceBytes = 0;
};

/// Totals of a function after ds-plan-memory.
mlir::FailureOr<PlanSummary> summarizePlan(mlir::func::FuncOp function);

/// plan.json of the memory-planned @main of `module` (the forward program)
/// and, when `train` is given, of the training program (@micro_step and
/// @optimizer_step sharing one arena) with its configuration `trainConfig`
/// (a JSON object, or null).
/// With pipeline parallelism `train` is the step cut into stages and
/// `pipelineRanks` the program of each pipeline rank. `target` is the
/// backend the programs are generated for ("cpu" or "cuda"). `built`,
/// when given, names the programs the build holds ("run", "train", ...);
/// the plan lists them as `programs`.
mlir::LogicalResult
writePlanJson(mlir::ModuleOp module, llvm::raw_ostream &os,
              mlir::ModuleOp train = nullptr,
              const llvm::json::Value *trainConfig = nullptr,
              llvm::ArrayRef<mlir::ModuleOp> pipelineRanks = {},
              llvm::StringRef target = "cpu",
              llvm::ArrayRef<std::string> built = {});

/// Chrome trace JSON of one training step of the pipelined training module
/// `train` (ds-pipeline's `ds.pipeline`): the schedule simulated with the
/// partition's per-stage FLOPs, one millisecond per MFLOP.
mlir::LogicalResult writePipelineTrace(mlir::ModuleOp train,
                                       llvm::raw_ostream &os);

/// plan.txt: the same facts for people, with a `programs` line naming
/// `built` when given.
mlir::LogicalResult
writePlanText(mlir::ModuleOp module, llvm::raw_ostream &os,
              mlir::ModuleOp train = nullptr,
              llvm::ArrayRef<mlir::ModuleOp> pipelineRanks = {},
              llvm::ArrayRef<std::string> built = {});

} // namespace dsopt

#endif // DSOPT_ANALYSIS_PLAN_H
