//===- ModelSummary.h - one-screen summary of an imported model -*- C++ -*-===//

#ifndef DSOPT_ANALYSIS_MODELSUMMARY_H
#define DSOPT_ANALYSIS_MODELSUMMARY_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace dsopt {

/// Totals over the parameters of a training graph.
struct ParameterStats {
  int64_t tensors = 0, elements = 0, bytes = 0;
  int64_t trainableTensors = 0, trainableElements = 0;
};

/// Parameter totals of the `main` function of `module`.
ParameterStats computeParameterStats(mlir::ModuleOp module);

/// Prints inputs, outputs, parameters (largest first, tied ones marked), an
/// op histogram and the cost model's FLOPs and bytes of one forward pass.
void printModelSummary(mlir::ModuleOp module, llvm::raw_ostream &os);

} // namespace dsopt

#endif // DSOPT_ANALYSIS_MODELSUMMARY_H
