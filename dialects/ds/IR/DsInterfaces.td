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
    an operand's buffer, whether it may write its result over an operand
    whose last use it is, and how much scratch memory (workspace) its kernel
    needs while it runs. The memory planner and the code generators read it.
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
    InterfaceMethod<
      "Bytes of scratch memory the kernel needs while it runs (0: none), "
      "from the op's types and attributes; the same number as the runtime "
      "kernel's size function (dsrt::<kernel>_workspace_bytes). "
      "ds-plan-memory gives the op a buffer of this size, live only while "
      "it runs (ds.workspace), and the kernel call passes it through "
      "KernelCallBuilder::workspace().",
      "int64_t", "getWorkspaceBytes", (ins), [{}], [{
        return 0;
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

def Ds_OptimizerOpInterface : OpInterface<"OptimizerOpInterface"> {
  let description = [{
    One optimizer update of one parameter tensor: it reads the parameter,
    its gradient and the optimizer's per-parameter states (each with the
    parameter's shape), and yields the updated parameter and the updated
    states, in the order of the state operands. Hyperparameter operands
    (learning rate, step count) are neither. Passes that shard or
    rewrite updates (ds-zero, the training step) ask this interface where
    the parameter, the gradient and the states are, rather than knowing
    each op's operand layout.

    The default implementations fit an op with `$param` and `$grad`
    operands followed by its states, and results (param_out, states...).
  }];
  let cppNamespace = "::dsopt::ds";
  let methods = [
    InterfaceMethod<"The parameter being updated.",
      "::mlir::OpOperand &", "getParamOperand", (ins), [{}], [{
        return $_op.getParamMutable();
      }]>,
    InterfaceMethod<"The gradient of the parameter.",
      "::mlir::OpOperand &", "getGradOperand", (ins), [{}], [{
        return $_op.getGradMutable();
      }]>,
    InterfaceMethod<
      "The f32 scalar the update multiplies the gradient by, element by "
      "element, as it reads it (gradient clipping, 1/k of accumulation, "
      "fp16's 1/loss-scale), or null: the gradient as it is. It follows "
      "the states, last of the operands.",
      "::mlir::OpOperand *", "getGradScaleOperand", (ins), [{}], [{
        return nullptr;
      }]>,
    InterfaceMethod<
      "The per-parameter states, in the order of getStateRoles().",
      "::llvm::MutableArrayRef<::mlir::OpOperand>", "getStateOperands",
      (ins), [{}], [{
        return $_op->getOpOperands()
            .drop_front($_op.getGradMutable().getOperandNumber() + 1)
            .drop_back($_op.getGradScaleOperand() ? 1 : 0);
      }]>,
    StaticInterfaceMethod<
      "The role of each state (torch's state names where the op has torch "
      "semantics: exp_avg, exp_avg_sq, momentum_buffer).",
      "::llvm::ArrayRef<::llvm::StringRef>", "getStateRoles">,
    InterfaceMethod<"The updated parameter.",
      "::mlir::Value", "getUpdatedParam", (ins), [{}], [{
        return $_op->getResult(0);
      }]>,
    InterfaceMethod<"The updated states, in the order of the state operands.",
      "::mlir::ResultRange", "getUpdatedStates", (ins), [{}], [{
        return $_op->getResults().drop_front().take_front(
            $_op.getStateOperands().size());
      }]>,
    InterfaceMethod<
      "The 16-bit (bf16 or f16) copy of the updated f32 parameter that the "
      "update writes in its own loop (mixed precision's working copy, the "
      "result after the states), or null.",
      "::mlir::Value", "getUpdatedParamCopy", (ins), [{}], [{
        size_t states = $_op.getStateOperands().size();
        return $_op->getNumResults() > 1 + states
                   ? ::mlir::Value($_op->getResult(1 + states))
                   : ::mlir::Value();
      }]>,
    InterfaceMethod<
      "Bytes of optimizer state the update keeps per parameter element.",
      "int64_t", "getStateBytesPerElement", (ins), [{}], [{
        int64_t bytes = 0;
        for (::mlir::OpOperand &state : $_op.getStateOperands())
          bytes += ::dsopt::ds::getElementByteSize(
              ::mlir::getElementTypeOrSelf(state.get().getType()));
        return bytes;
      }]>,
  ];
  let verify = [{
    auto optimizer = ::mlir::cast<ConcreteOp>($_op);
    auto states = optimizer.getStateOperands();
    if (states.size() != ConcreteOp::getStateRoles().size() ||
        optimizer.getUpdatedStates().size() != states.size())
      return $_op->emitOpError()
             << "has " << states.size() << " state operands and "
             << optimizer.getUpdatedStates().size()
             << " updated states for " << ConcreteOp::getStateRoles().size()
             << " state roles";
    return ::mlir::success();
  }];
}

def Ds_AsyncOpInterface : OpInterface<"AsyncOpInterface"> {
  let description = [{
    An op that runs asynchronously with the compute stream: the collectives
    (on the communication stream), later transfers and host/NVMe copies.
    It is issued where it stands and completes before the first op that
    uses one of its results; until then its operands and results stay live
    and untouched. The memory planner extends their lifetimes to that wait,
    the code generator records the op as pending, and the plan counts the
    bytes it moves. The upstream shard collectives implement it through
    external models (DsDistributed.cpp).
  }];
  let cppNamespace = "::dsopt::ds";
  let methods = [
    InterfaceMethod<"What the op does.",
      "::dsopt::ds::AsyncKind", "getAsyncKind">,
    InterfaceMethod<"The axis of the device grid the op runs along.",
      "int64_t", "getAsyncGridAxis">,
    InterfaceMethod<
      "The tensor whose elements the traffic is counted on: the input of a "
      "reduction, the gathered result, a bucket's staging buffer.",
      "::mlir::RankedTensorType", "getMovedType">,
    InterfaceMethod<"Bytes of getMovedType().",
      "int64_t", "getBytesMoved", (ins), [{}], [{
        return ::dsopt::ds::getByteSize(
                   ::mlir::cast<::dsopt::ds::AsyncOpInterface>(
                       $_op.getOperation()).getMovedType())
            .value_or(0);
      }]>,
  ];
}

def Ds_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let description = [{
    The tensor-parallel sharding rule of an op: given how its operands are
    laid out over the tp ranks (replicated, split along an axis, see
    ds::TensorSplit), whether the op can run on each rank's pieces alone,
    which layout each operand must then have (a parameter or a broadcast
    operand the pass may shard to match; a replicated activation the rule
    asks to be split means the op cannot run there), and the layout of its
    results. A result that is a partial sum (a matmul contracting a split
    axis) is completed by an all-reduce over tp, which ds-tensor-parallel
    inserts. An op without this interface runs replicated only.
    `ranks` is the number of tp ranks, for the divisibility checks. A rule
    may also say that the op runs on the pieces only in another form (a
    lookup of a split table masks the rows other ranks hold; the loss of
    split logits reduces its max, sum and target over tp): it sets
    `rule.rewrite` and builds that form in buildOnPieces.
    Attached as external models next to each other (DsSharding.cpp).
  }];
  let cppNamespace = "::dsopt::ds";
  let methods = [
    InterfaceMethod<
      "Fills `rule` for operands laid out as `operands`; fails (with "
      "rule.reason) when the op cannot run rank-locally on them.",
      "::llvm::LogicalResult", "getShardingRule",
      (ins "::llvm::ArrayRef<::dsopt::ds::TensorSplit>":$operands,
           "int64_t":$ranks, "::dsopt::ds::ShardingRule &":$rule)>,
    InterfaceMethod<
      "For a rule that set `rule.rewrite`: builds at the op, whose operands "
      "already have their rank-local types and the layouts `operands`, the "
      "ops that compute its results' layouts from each rank's pieces, with "
      "collectives along axis `gridAxis` of grid `grid` over `ranks` ranks, "
      "and returns the values that replace its results (a null value for a "
      "result nothing reads).",
      "::llvm::FailureOr<::llvm::SmallVector<::mlir::Value>>", "buildOnPieces",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::dsopt::ds::TensorSplit>":$operands,
           "int64_t":$ranks, "::llvm::StringRef":$grid, "int16_t":$gridAxis),
      [{}], [{ return ::mlir::failure(); }]>,
  ];
}

// Compute precision: where an op computes when the model trains in a 16-bit
// type (bf16 or fp16). Every ds op declares exactly one of these traits next
// to its definition; ds-precision reads them (ds::getComputePrecision) and
// docs/passes.md tabulates them (`dsopt-opt --ds-print-precision`).
class Ds_PrecisionTrait<string name> : NativeOpTrait<name> {
  let cppNamespace = "::dsopt::ds::PrecisionTrait";
}
// Float operands and results in the 16-bit type: elementwise arithmetic and
// data movement (the kernels compute each element in f32 and round it).
def Ds_Compute16 : Ds_PrecisionTrait<"Compute16">;
// 16-bit inputs and result, f32 accumulation inside the kernel: matmul,
// convolution and the other products and sums over many 16-bit terms; and
// softmax and its gradient, whose kernels reduce each row in f32 and round
// only what they write: an f32 result would be rounded to 16 bits by the
// cast after it anyway, and the f32 copies of attention's [B, H, T, T]
// scores before and after it cost more memory traffic than any other op of
// a transformer's step (docs/benchmarks.md, "Where a GPU step's time goes").
// Layer norm and its gradient too: 16-bit rows in and out, the row
// statistics in f32 (the saved mean and inverse standard deviation stay
// f32, as attention's log-sum-exp does), and the gradient's scale and bias
// sums over all rows written in the type their readers need (Ds_Sum32's
// rule), not rounded to 16 bits before an f32 accumulator.
def Ds_Accumulate32 : Ds_PrecisionTrait<"Accumulate32">;
// A sum over many rows (reduce_sum: the bias gradients): the operand is
// read as it is (16-bit or f32, never an f32 copy of a 16-bit one), the
// kernel accumulates in f32 or wider, and the result is written in the type
// its readers need: f32 where they all read f32 (an f32 accumulator, an f32
// op), the 16-bit type where they all read that (a 16-bit accumulator, a
// 16-bit op) and the operand is 16-bit, else f32 with a cast after it.
def Ds_Sum32 : Ds_PrecisionTrait<"Sum32">;
// f32 throughout: log-softmax, batch normalisation, losses, the other
// reductions and the optimizer. 16-bit operands are cast to f32 before the op; a result that
// a 16-bit op reads is cast to the 16-bit type after it.
def Ds_ComputeF32 : Ds_PrecisionTrait<"ComputeF32">;
// A loss over class scores: the float operands of the op's highest rank (the
// scores [N, C, d...] and their log-probabilities) are read in the 16-bit
// type, the others (the loss or its gradient, class weights) in f32; results
// of that rank (log-probabilities, the scores' gradient) are 16-bit, the
// loss is f32. The kernel computes each row in f32, so no f32 copy of the
// scores exists, and backward reads the 16-bit log-probabilities, as
// PyTorch's cross-entropy on 16-bit logits saves them.
def Ds_Loss16 : Ds_PrecisionTrait<"Loss16">;
// Types as built: constants (a cast of one folds into a constant of the
// new type) and the ops later passes insert on already typed values.
def Ds_KeepTypes : Ds_PrecisionTrait<"KeepTypes">;

#endif // DSOPT_DIALECT_DS_DSINTERFACES_TD
