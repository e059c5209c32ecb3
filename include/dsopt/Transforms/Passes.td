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

def DsFuseElementwise : Pass<"ds-fuse-elementwise", "mlir::func::FuncOp"> {
  let summary = "Fuse chains of elementwise ops into ds.fused loops";
  let description = [{
    Groups elementwise ops whose intermediate results have the group's full
    shape and no use outside the group, and replaces each group by one
    `ds.fused` op: one loop that reads every input once and writes the result
    once, instead of writing and reading every intermediate. Splat scalar
    constants become constants of the body. Values used outside the group are
    never recomputed.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect",
                           "mlir::math::MathDialect"];
}

def DsPlanMemory : Pass<"ds-plan-memory", "mlir::func::FuncOp"> {
  let summary = "Assign every tensor a fixed offset in one arena by liveness";
  let description = [{
    The static memory plan: parameters are persistent and packed at the
    bottom of the arena; every other tensor (graph inputs, intermediates,
    outputs) gets a buffer live from its definition to its last use, and
    buffers whose lifetimes do not overlap share memory (greedy best fit,
    largest first). A reshape is a view of its operand's buffer; an op whose
    kernel reads each element before writing it writes its result over an
    operand whose last use it is. Constants stay in static storage.

    Records the offset of every buffer (`ds.offset` on arguments, `ds.buffers`
    on ops) and `ds.memory = #ds.memory_plan<arena_bytes, persistent_bytes,
    peak_live_bytes>` on the function. The arena size is the program's peak
    memory, a compile-time fact the runtime checks by measuring.
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"64",
           "Byte alignment of every buffer">,
    Option<"inPlace", "in-place", "bool", /*default=*/"true",
           "Let elementwise kernels overwrite dying operands">
  ];
}

#endif // DSOPT_TRANSFORMS_PASSES_TD
