//===- dsopt-opt.cpp - mlir-opt with the ds dialect and dsopt passes ------===//
//
// Runs any pass or pipeline on textual IR: `--pass-pipeline`,
// `--mlir-print-ir-after-all`, `--mlir-timing`, `-split-input-file` and
// `-verify-diagnostics` all work as in mlir-opt.
//
//===----------------------------------------------------------------------===//

#include "ds/IR/DsDialect.h"
#include "dsopt/Conversion/Passes.h"
#include "dsopt/Transforms/Passes.h"
#include "dsopt/Transforms/TrainingPipeline.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<dsopt::ds::DsDialect, mlir::func::FuncDialect,
                  mlir::shard::ShardDialect, mlir::emitc::EmitCDialect,
                  mlir::arith::ArithDialect, mlir::math::MathDialect>();
  dsopt::ds::registerShardModels(registry);
  mlir::registerTransformsPasses();
  dsopt::registerDsPasses();
  dsopt::registerTrainingPipeline();
  dsopt::registerDsConversionPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "dsopt-opt: the ds dialect and dsopt's passes\n",
      registry));
}
