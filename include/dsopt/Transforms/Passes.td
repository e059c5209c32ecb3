//===- Passes.td - dsopt passes ----------------------------*- tablegen -*-===//

#ifndef DSOPT_TRANSFORMS_PASSES_TD
#define DSOPT_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def DsPrintCost : Pass<"ds-print-cost", "mlir::ModuleOp"> {
  let summary = "Report the cost model's FLOPs and bytes per function and op";
  let description = [{
    Sums `CostOpInterface` over every function and prints one table per
    function (op name, count, FLOPs, bytes) to stderr. With `per-op`, each op
    also gets a remark `flops = F, bytes = B`, so tests and users can check
    the cost model op by op against textbook formulas.
  }];
  let options = [
    Option<"perOp", "per-op", "bool", /*default=*/"false",
           "Attach a remark with the cost of every op">
  ];
}

#endif // DSOPT_TRANSFORMS_PASSES_TD
