//===- PipelineMain.h - the entry point of pipeline programs -----*- C++ -*-===//
//
// A pipeline-parallel executable holds the program of every pp rank (each
// lowered by ds-lower-to-emitc with its own symbol prefix, exporting
// `<prefix>program`); its `main` hands the table of them to
// dsrt::pipeline_main, which runs the one of the process's pp coordinate.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_CONVERSION_PIPELINEMAIN_H
#define DSOPT_CONVERSION_PIPELINEMAIN_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>

namespace dsopt {

/// An EmitC module whose `int main(int, char **)` calls
/// dsrt::pipeline_main with the rank programs named `rankPrograms`, in pp
/// order; `cuda`: after checking for a CUDA device (emitCudaDeviceCheck).
mlir::OwningOpRef<mlir::ModuleOp>
buildPipelineMain(mlir::MLIRContext *context,
                  llvm::ArrayRef<std::string> rankPrograms, bool cuda = false);

/// What a main generated for the cuda target does first:
/// `dsrt::cuda::require_device(argv[0])` (dsrt/cuda_launch.h).
void emitCudaDeviceCheck(mlir::OpBuilder &b, mlir::Location loc,
                         mlir::Value argv);

} // namespace dsopt

#endif // DSOPT_CONVERSION_PIPELINEMAIN_H
