//===- DsInterfaces.td - ds op interfaces ------------------*- tablegen -*-===//

#ifndef DSOPT_DIALECT_DS_DSINTERFACES_TD
#define DSOPT_DIALECT_DS_DSINTERFACES_TD

include "mlir/IR/OpBase.td"

def Ds_CostOpInterface : OpInterface<"CostOpInterface"> {
  let description = [{
    The cost model later passes ask of every op: arithmetic work and memory
    traffic of one evaluation. Pipeline balancing, the plan and the benchmark
    roofline read it. FLOPs count one multiply-add as two operations and one
    transcendental as one.
  }];
  let cppNamespace = "::dsopt::ds";
  let methods = [
    InterfaceMethod<
      "Arithmetic operations of one evaluation of the op.",
      "int64_t", "getFlops">,
    InterfaceMethod<
      "Bytes read from operands plus bytes written to results, each crossing "
      "memory once.",
      "int64_t", "getBytesAccessed", (ins), [{}], [{
        return ::dsopt::ds::detail::defaultBytesAccessed($_op.getOperation());
      }]>,
  ];
}

def Ds_KernelOpInterface : OpInterface<"KernelOpInterface"> {
  let description = [{
    How an op executes in a generated program: the runtime kernel that
    computes it (described through a KernelCallBuilder, so the dialect does
    not depend on any code generator), whether its result is merely a view of
    an operand's buffer, and whether it may write its result over an operand
    whose last use it is. The memory planner and the code generators read it.
  }];
  let cppNamespace = "::dsopt::ds";
  let methods = [
    InterfaceMethod<
      "Describes the call of the runtime kernel that computes this op.",
      "void", "buildKernelCall", (ins "::dsopt::ds::KernelCallBuilder &":$call)>,
    InterfaceMethod<
      "The operand whose buffer result 0 is a view of (no kernel runs), if any.",
      "std::optional<unsigned>", "getAliasedOperand", (ins), [{}], [{
        return std::nullopt;
      }]>,
    InterfaceMethod<
      "An operand whose buffer result `result` may reuse when this op is "
      "the operand's last use: the kernel reads each element of it before "
      "it writes the same element of the result.",
      "std::optional<unsigned>", "getInPlaceOperand", (ins "unsigned":$result),
      [{}], [{
        return std::nullopt;
      }]>,
  ];
}

def Ds_VJPOpInterface : OpInterface<"VJPOpInterface"> {
  let description = [{
    The derivative of an op, as a vector-Jacobian product: given the
    gradients of the loss with respect to the op's results, build ds ops
    that compute the gradients with respect to its operands. `ds-autodiff`
    walks the forward function backwards and asks every op on the path from
    the trained parameters to the loss for its VJP; ops whose derivative
    needs its own kernel build gradient ops (ds.softmax_grad, ...).

    `resultGrads` has one entry per result: the gradient flowing into it,
    or a null Value when no gradient reaches that result. `needed` has one
    entry per operand: whether its gradient is wanted (the operand depends
    on a trained parameter). The method appends one Value per operand to
    `operandGrads`: the gradient, with the operand's type, or null where it
    is not needed or is identically zero. It fails (with a diagnostic) only
    when a needed derivative does not exist, e.g. with respect to a
    parameter the op cannot differentiate through.
  }];
  let cppNamespace = "::dsopt::ds";
  let methods = [
    InterfaceMethod<
      "Builds the gradients of the operands from those of the results.",
      "::llvm::LogicalResult", "buildVJP",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::ArrayRef<bool>":$needed,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

def Ds_ElementwiseOpInterface : OpInterface<"ElementwiseOpInterface"> {
  let description = [{
    An op that computes each result element from the operand elements at the
    same (broadcast) position. `buildScalar` emits its computation on one
    element as arith/math ops on scalars, so `ds-fuse-elementwise` can fuse
    chains of such ops into one ds.fused loop. Float elements are f32 inside
    (see ds.fused); integers and i1 keep their types.
  }];
  let cppNamespace = "::dsopt::ds";
  let methods = [
    InterfaceMethod<
      "Emits the computation of one result element from one element of "
      "each operand (in compute types) and returns it.",
      "::mlir::Value", "buildScalar",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::Location":$loc,
           "::mlir::ValueRange":$operands)>,
  ];
}

#endif // DSOPT_DIALECT_DS_DSINTERFACES_TD
