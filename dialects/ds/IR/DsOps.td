//===- DsOps.td - ds dialect operations --------------------*- tablegen -*-===//
//
// One op per computation of real training graphs. Import normalizes ONNX
// spellings: Squeeze, Unsqueeze and Flatten become `ds.reshape`, Expand
// becomes `ds.broadcast_to`, GlobalAveragePool a `ds.reduce_mean`, Identity
// and inference-mode Dropout disappear, and Constant, ConstantOfShape, Range
// and all shape arithmetic fold into `ds.constant`. Axes are non-negative,
// attributes explicit; shapes are static everywhere.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_DIALECT_DS_DSOPS_TD
#define DSOPT_DIALECT_DS_DSOPS_TD

include "ds/IR/DsBase.td"
include "ds/IR/DsInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// Every op has a cost and, except constants, a runtime kernel;
// `kernelMethods` lists the KernelOpInterface methods an op overrides.
class Ds_Op<string mnemonic, list<Trait> traits = [],
            list<string> kernelMethods = [], bit hasKernel = 1>
    : Op<Ds_Dialect, mnemonic,
         !listconcat([Pure, DeclareOpInterfaceMethods<Ds_CostOpInterface>],
                     !if(hasKernel,
                         [DeclareOpInterfaceMethods<Ds_KernelOpInterface,
                                                    kernelMethods>],
                         []),
                     traits)>;

// Ops with a derivative implement VJPOpInterface (DsVJP.cpp).
defvar Ds_VJP = DeclareOpInterfaceMethods<Ds_VJPOpInterface>;

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

def Ds_ConstantOp : Ds_Op<"constant", [Ds_KeepTypes, ConstantLike, InferTypeOpAdaptor], [],
                          /*hasKernel=*/0> {
  let summary = "a constant tensor";
  let description = [{
    Import folds ONNX Constant, ConstantOfShape, Range and shape arithmetic
    into this op. Large splats stay compact (`dense<0.0>`).
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

defvar Ds_Elementwise = DeclareOpInterfaceMethods<Ds_ElementwiseOpInterface>;

class Ds_UnaryOp<string mnemonic, Type type, list<Trait> traits = []>
    : Ds_Op<mnemonic,
            !listconcat([Ds_Compute16, SameOperandsAndResultType, Ds_Elementwise],
                        traits),
            ["getInPlaceOperand"]> {
  let arguments = (ins type:$input);
  let results = (outs type:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

class Ds_FloatUnaryOp<string mnemonic, string formula, list<Trait> traits = []>
    : Ds_UnaryOp<mnemonic, Ds_FloatTensor, !listconcat([Ds_VJP], traits)> {
  let summary = "elementwise " # formula;
  let hasFolder = 1;
}

def Ds_SqrtOp : Ds_FloatUnaryOp<"sqrt", "sqrt(x)">;
def Ds_ReciprocalOp : Ds_FloatUnaryOp<"reciprocal", "1 / x">;
def Ds_ExpOp : Ds_FloatUnaryOp<"exp", "exp(x)">;
def Ds_LogOp : Ds_FloatUnaryOp<"log", "log(x)">;
def Ds_TanhOp : Ds_FloatUnaryOp<"tanh", "tanh(x)">;
def Ds_ErfOp : Ds_FloatUnaryOp<"erf", "erf(x)">;
def Ds_SigmoidOp : Ds_FloatUnaryOp<"sigmoid", "1 / (1 + exp(-x))">;

def Ds_NegOp : Ds_UnaryOp<"neg", Ds_NumericTensor, [Ds_VJP]> {
  let summary = "elementwise -x";
  let hasFolder = 1;
}

def Ds_ReluOp : Ds_UnaryOp<"relu", Ds_NumericTensor, [Ds_VJP]> {
  let summary = "elementwise max(x, 0)";
  let hasFolder = 1;
}

def Ds_LeakyReluOp : Ds_UnaryOp<"leaky_relu", Ds_FloatTensor, [Ds_VJP]> {
  let summary = "elementwise x >= 0 ? x : alpha * x";
  let arguments = (ins Ds_FloatTensor:$input,
                   DefaultValuedAttr<F32Attr, "0.01">:$alpha);
}

def Ds_GeluOp : Ds_UnaryOp<"gelu", Ds_FloatTensor, [Ds_VJP]> {
  let summary = "Gaussian error linear unit, exact (erf) or tanh-approximated";
  let description = [{
    `approximate = none`: x * 0.5 * (1 + erf(x / sqrt(2)));
    `approximate = tanh`: x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
  }];
  let arguments = (ins Ds_FloatTensor:$input,
                   DefaultValuedAttr<Ds_GeluApproximationAttr,
                                     "GeluApproximation::none">:$approximate);
}

def Ds_SoftplusOp : Ds_UnaryOp<"softplus", Ds_FloatTensor, [Ds_VJP]> {
  let summary = "elementwise log(1 + exp(x))";
  let description = [{
    Computed as x where x > 20 (where log(1 + exp(x)) rounds to x in f32),
    else log1p(exp(x)): PyTorch's softplus with its default threshold.
  }];
}

def Ds_EluOp : Ds_UnaryOp<"elu", Ds_FloatTensor, [Ds_VJP]> {
  let summary = "elementwise x > 0 ? x : alpha * (exp(x) - 1)";
  let arguments = (ins Ds_FloatTensor:$input,
                   DefaultValuedAttr<F32Attr, "1.0">:$alpha);
}

def Ds_CeluOp : Ds_UnaryOp<"celu", Ds_FloatTensor, [Ds_VJP]> {
  let summary = "elementwise x > 0 ? x : alpha * (exp(x / alpha) - 1)";
  let arguments = (ins Ds_FloatTensor:$input,
                   DefaultValuedAttr<F32Attr, "1.0">:$alpha);
  let hasVerifier = 1;
}

def Ds_SinOp : Ds_UnaryOp<"sin", Ds_FloatTensor, [Ds_VJP]> {
  let summary = "elementwise sin(x)";
}
def Ds_CosOp : Ds_UnaryOp<"cos", Ds_FloatTensor, [Ds_VJP]> {
  let summary = "elementwise cos(x)";
}

// Piecewise constant: the derivative is zero (PyTorch's convention).
def Ds_FloorOp : Ds_UnaryOp<"floor", Ds_FloatTensor, [Ds_VJP]> {
  let summary = "elementwise floor(x)";
}
def Ds_CeilOp : Ds_UnaryOp<"ceil", Ds_FloatTensor, [Ds_VJP]> {
  let summary = "elementwise ceil(x)";
}
def Ds_RoundOp : Ds_UnaryOp<"round", Ds_FloatTensor, [Ds_VJP]> {
  let summary = "elementwise round to nearest integer, halves to even";
}

def Ds_NotOp : Ds_UnaryOp<"not", Ds_BoolTensor> {
  let summary = "elementwise logical not";
  let hasFolder = 1;
}

class Ds_BinaryOp<string mnemonic, Type type, list<Trait> traits = []>
    : Ds_Op<mnemonic,
            !listconcat([Ds_Compute16, SameOperandsElementType, InferTypeOpAdaptor,
                         Ds_Elementwise, Ds_VJP], traits),
            ["getInPlaceOperand"]> {
  let description = [{
    Operands broadcast against each other (NumPy/ONNX multidirectional
    broadcasting); the result has the broadcast shape.
  }];
  let arguments = (ins type:$lhs, type:$rhs);
  let results = (outs type:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
  let hasFolder = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return ::dsopt::ds::detail::inferBroadcastResult(
          loc, {adaptor.getLhs().getType(), adaptor.getRhs().getType()},
          /*elementType=*/nullptr, types);
    }
  }];
}

def Ds_AddOp : Ds_BinaryOp<"add", Ds_NumericTensor, [Commutative]> {
  let summary = "elementwise lhs + rhs";
}
def Ds_SubOp : Ds_BinaryOp<"sub", Ds_NumericTensor> {
  let summary = "elementwise lhs - rhs";
}
def Ds_MulOp : Ds_BinaryOp<"mul", Ds_NumericTensor, [Commutative]> {
  let summary = "elementwise lhs * rhs";
}
def Ds_DivOp : Ds_BinaryOp<"div", Ds_NumericTensor> {
  let summary = "elementwise lhs / rhs (integer division truncates)";
}
def Ds_PowOp : Ds_BinaryOp<"pow", Ds_FloatTensor> {
  let summary = "elementwise lhs ^ rhs";
}
def Ds_ModOp : Ds_BinaryOp<"mod", Ds_NumericTensor> {
  let summary = "elementwise remainder of lhs / rhs";
  let description = [{
    The remainder has the sign of the divisor (Python's `%`,
    `torch.remainder`), or with `fmod` the sign of the dividend (C's `fmod`,
    `torch.fmod`): ONNX Mod's `fmod` attribute. An integer divisor of 0 is
    an error at run time.
  }];
  let arguments = (ins Ds_NumericTensor:$lhs, Ds_NumericTensor:$rhs,
                   UnitAttr:$fmod);
}

def Ds_CompareOp : Ds_Op<"compare",
    [Ds_Compute16, SameOperandsElementType, InferTypeOpAdaptor, Ds_Elementwise]> {
  let summary = "elementwise comparison, broadcasting, with an i1 result";
  let arguments = (ins Ds_ComparePredicateAttr:$predicate,
                   Ds_Tensor:$lhs, Ds_Tensor:$rhs);
  let results = (outs Ds_BoolTensor:$result);
  let assemblyFormat =
      "$predicate `,` $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
  let hasFolder = 1;
}

def Ds_WhereOp : Ds_Op<"where", [Ds_Compute16, InferTypeOpAdaptor, Ds_Elementwise, Ds_VJP],
                       ["getInPlaceOperand"]> {
  let summary = "elementwise condition ? lhs : rhs, broadcasting all three";
  let arguments = (ins Ds_BoolTensor:$condition, Ds_Tensor:$lhs,
                   Ds_Tensor:$rhs);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$condition `,` $lhs `,` $rhs attr-dict `:` "
                       "type($condition) `,` type($lhs) `,` type($rhs)";
  let hasFolder = 1;
}

def Ds_CastOp : Ds_Op<"cast", [Ds_Compute16, Ds_Elementwise, Ds_VJP]> {
  let summary = "elementwise element-type conversion";
  let description = [{
    Float to integer truncates toward zero; to i1 is `x != 0`; float to
    narrower float rounds to nearest even.
  }];
  let arguments = (ins Ds_Tensor:$input);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasFolder = 1;
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

def Ds_MatMulOp : Ds_Op<"matmul",
    [Ds_Accumulate32, SameOperandsElementType, InferTypeOpAdaptor, Ds_VJP], ["getWorkspaceBytes"]> {
  let summary = "NumPy matrix product with batch broadcasting";
  let description = [{
    ONNX MatMul semantics: the last two axes multiply, leading axes
    broadcast, a 1-D operand is a vector. `transpose_lhs` / `transpose_rhs`
    swap the last two axes of a (rank >= 2) operand first, so transposes
    from Gemm and from backward passes fold into the product.
  }];
  let arguments = (ins Ds_NumericTensor:$lhs, Ds_NumericTensor:$rhs,
                   UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs Ds_NumericTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
  let hasCanonicalizer = 1;
}

def Ds_GemmOp : Ds_Op<"gemm", [Ds_Accumulate32, InferTypeOpAdaptor, Ds_VJP],
                      ["getWorkspaceBytes"]> {
  let summary = "alpha * op(a) * op(b) + beta * c for 2-D a and b";
  let arguments = (ins Ds_FloatTensor:$a, Ds_FloatTensor:$b,
                   Optional<Ds_FloatTensor>:$c,
                   DefaultValuedAttr<F32Attr, "1.0">:$alpha,
                   DefaultValuedAttr<F32Attr, "1.0">:$beta,
                   UnitAttr:$transpose_a, UnitAttr:$transpose_b);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$a `,` $b (`,` $c^)? attr-dict `:` type($a) `,` "
                       "type($b) (`,` type($c)^)?";
  let hasCanonicalizer = 1;
}

def Ds_MatMulBiasOp : Ds_Op<"matmul_bias", [Ds_Accumulate32, InferTypeOpAdaptor],
                             ["getWorkspaceBytes"]> {
  let summary = "matrix product with a bias and an addend in its epilogue";
  let description = [{
    `lhs` [..., M, K] times `rhs` [K, N] (`transpose_rhs`: [N, K]), plus
    `bias` [N] broadcast along every row, plus `addend` (optional, the
    result's type: a residual). ds-fuse-matmul-epilogue forms it from
    `add(add(matmul, bias), addend)` and `add(matmul, bias)` after the
    optimizer and precision passes; cuda runs it as one cuBLASLt call
    (CUBLASLT_EPILOGUE_BIAS, the addend as C with beta 1). Under mixed
    precision the product, bias and addend are summed in f32 and rounded
    once into the 16-bit result.
  }];
  let arguments = (ins Ds_FloatTensor:$lhs, Ds_FloatTensor:$rhs,
                   Ds_FloatTensor:$bias, Optional<Ds_FloatTensor>:$addend,
                   UnitAttr:$transpose_rhs);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs `,` $bias (`,` $addend^)? attr-dict `:` "
                       "type($lhs) `,` type($rhs) `,` type($bias) (`,` type($addend)^)?";
}

def Ds_MatMulBiasGradOp : Ds_Op<"matmul_bias_grad", [Ds_Accumulate32, InferTypeOpAdaptor],
                                ["getWorkspaceBytes"]> {
  let summary = "weight gradient with the bias gradient in its epilogue";
  let description = [{
    `result` = op(`lhs`) `rhs` for 2-D operands (`transpose_lhs`: `lhs` is
    [K, M]), `rhs` [K, N] the output gradient, and `bias_grad` [N] its
    column sums (over K). ds-fuse-matmul-epilogue forms it from a weight
    gradient's matmul and the `reduce_sum` of the same output gradient over
    its leading axes; cuda runs it as one cuBLASLt call
    (CUBLASLT_EPILOGUE_BGRADA).
  }];
  let arguments = (ins Ds_FloatTensor:$lhs, Ds_FloatTensor:$rhs,
                   UnitAttr:$transpose_lhs);
  let results = (outs Ds_FloatTensor:$result, Ds_FloatTensor:$bias_grad);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
}

def Ds_MatMulBiasGeluOp : Ds_Op<"matmul_bias_gelu", [Ds_Accumulate32, InferTypeOpAdaptor],
                                ["getWorkspaceBytes"]> {
  let summary = "matrix product, bias and tanh GELU in its epilogue";
  let description = [{
    `pre_activation` = `lhs` [..., M, K] times `rhs` [K, N] (`transpose_rhs`:
    [N, K]) plus `bias` [N]; `result` = the tanh-approximated GELU of it,
    0.5 p (1 + tanh(sqrt(2/pi) (p + 0.044715 p^3))). Both results have the
    product's type: the pre-activation is what the GELU's derivative reads
    in the backward (`ds.matmul_dgelu`). ds-fuse-matmul-epilogue forms it
    from `ds.gelu {approximate = tanh}` of a `ds.matmul_bias` without an
    addend, never from the exact erf GELU; cuda runs it as one cuBLASLt
    call (CUBLASLT_EPILOGUE_GELU_AUX_BIAS, the pre-activation as its aux
    matrix). Under mixed precision the GELU is taken of the f32 sum, and
    both results are rounded once.
  }];
  let arguments = (ins Ds_FloatTensor:$lhs, Ds_FloatTensor:$rhs,
                   Ds_FloatTensor:$bias, UnitAttr:$transpose_rhs);
  let results = (outs Ds_FloatTensor:$result, Ds_FloatTensor:$pre_activation);
  let assemblyFormat = "$lhs `,` $rhs `,` $bias attr-dict `:` "
                       "type($lhs) `,` type($rhs) `,` type($bias)";
}

def Ds_MatMulDGeluOp : Ds_Op<"matmul_dgelu", [Ds_Accumulate32, InferTypeOpAdaptor],
                             ["getWorkspaceBytes"]> {
  let summary = "input gradient times the tanh GELU's derivative in its epilogue";
  let description = [{
    `result` = (`lhs` [..., M, K] times `rhs` [K, N], `transpose_rhs`:
    [N, K]) * gelu'(`pre_activation`), elementwise, `pre_activation` of the
    result's type and gelu' the derivative of the tanh-approximated GELU:
    the gradient of a GELU's input from the gradient of its output, when
    that gradient is a product. ds-fuse-matmul-epilogue forms it from the
    product and the derivative autodiff writes for `ds.gelu {approximate =
    tanh}`; cuda runs it as one cuBLASLt call (CUBLASLT_EPILOGUE_DGELU, the
    pre-activation as its aux input). Under mixed precision the product is
    multiplied by the derivative in f32 and rounded once.
  }];
  let arguments = (ins Ds_FloatTensor:$lhs, Ds_FloatTensor:$rhs,
                   Ds_FloatTensor:$pre_activation, UnitAttr:$transpose_rhs);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs `,` $pre_activation attr-dict `:` "
                       "type($lhs) `,` type($rhs) `,` type($pre_activation)";
}

def Ds_MatMulLhsBiasGradOp : Ds_Op<"matmul_lhs_bias_grad",
    [Ds_Accumulate32, InferTypeOpAdaptor], ["getWorkspaceBytes"]> {
  let summary = "weight gradient of a [out, in] weight with the bias gradient";
  let description = [{
    `result` = `lhs`ᵀ `rhs` for `lhs` [K, M] the output gradient and `rhs`
    [K, N] the layer's input, and `bias_grad` [M] the column sums of `lhs`
    (over K): the weight and bias gradients of a layer whose weight is
    stored [out, in] (PyTorch's nn.Linear, ONNX Gemm with transB).
    ds-fuse-matmul-epilogue forms it from such a weight gradient's matmul
    (`transpose_lhs`) and the `reduce_sum` of the same output gradient over
    its leading axes; cuda runs it as one cuBLASLt call
    (CUBLASLT_EPILOGUE_BGRADB).
  }];
  let arguments = (ins Ds_FloatTensor:$lhs, Ds_FloatTensor:$rhs);
  let results = (outs Ds_FloatTensor:$result, Ds_FloatTensor:$bias_grad);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
}

//===----------------------------------------------------------------------===//
// Normalization and softmax
//===----------------------------------------------------------------------===//

def Ds_SoftmaxOp : Ds_Op<"softmax", [Ds_Accumulate32, SameOperandsAndResultType, Ds_VJP],
                         ["getInPlaceOperand", "getWorkspaceBytes"]> {
  let summary = "softmax along one axis";
  let arguments = (ins Ds_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Ds_LogSoftmaxOp : Ds_Op<"log_softmax", [Ds_ComputeF32, SameOperandsAndResultType, Ds_VJP],
                            ["getInPlaceOperand", "getWorkspaceBytes"]> {
  let summary = "log of softmax along one axis";
  let arguments = (ins Ds_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Ds_AttentionOp : Ds_Op<"attention", [Ds_Accumulate32, InferTypeOpAdaptor, Ds_VJP]> {
  let summary = "fused scaled-dot-product attention";
  let description = [{
    softmax(scale * q kᵀ, masked) v over the sequence of q, k and v (one
    shape), computed without the [..., T, T] scores (a tiled online softmax
    with f32 accumulation). Heads-major, q, k, v and the result are
    [..., T, Dh] (the heads among the leading axes); `tokens_major`, they
    are [..., T, H, Dh] (rank at least 3), each position's heads side by
    side as the projections write them, so that no transposes surround the
    op. `causal`: query i sees the keys j <= i. `lse` (f32, q's shape
    without Dh: [..., T] or [..., T, H]) is each row's log-sum-exp of the
    scaled scores, what `attention_grad` recomputes the probabilities from;
    under mixed precision q, k, v and the result are 16-bit and `lse` stays
    f32. Built by ds-fuse-attention.
  }];
  let arguments = (ins Ds_FloatTensor:$query, Ds_FloatTensor:$key,
                   Ds_FloatTensor:$value, F32Attr:$scale, UnitAttr:$causal,
                   UnitAttr:$tokens_major);
  let results = (outs Ds_FloatTensor:$result, Ds_F32Tensor:$lse);
  let assemblyFormat = "$query `,` $key `,` $value attr-dict `:` type($query) `,` "
                       "type($key) `,` type($value)";
}

def Ds_AttentionPackedOp : Ds_Op<"attention_packed",
                                 [Ds_Accumulate32, InferTypeOpAdaptor, Ds_VJP]> {
  let summary = "fused attention on q, k and v packed in one tensor";
  let description = [{
    `attention` (tokens-major) whose q, k and v are one `qkv`
    [..., T, 3, H, Dh] (rank at least 4): q, k and v at index 0, 1 and 2 of
    axis -3, as a q, k, v projection's [..., T, 3 H Dh] reads reshaped, so
    the kernels read the three where the projection wrote them (rows
    3 H Dh elements apart) and no split copies them out. The result is
    [..., T, H, Dh], `lse` (f32) [..., T, H]. Built by ds-fuse-attention.
  }];
  let arguments = (ins Ds_FloatTensor:$qkv, F32Attr:$scale, UnitAttr:$causal);
  let results = (outs Ds_FloatTensor:$result, Ds_F32Tensor:$lse);
  let assemblyFormat = "$qkv attr-dict `:` type($qkv)";
}

def Ds_LayerNormOp : Ds_Op<"layer_norm", [Ds_Accumulate32, InferTypeOpAdaptor, Ds_VJP],
                           ["getWorkspaceBytes"]> {
  let summary = "layer normalization over the axes from `axis` on";
  let description = [{
    ONNX LayerNormalization: y = (x - mean) * inv_std_dev * scale + bias with
    statistics over axes [axis, rank). `mean` and `inv_std_dev` (f32, with
    the normalized axes kept as 1) are results because backward needs them.
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_FloatTensor:$scale,
                   Optional<Ds_FloatTensor>:$bias,
                   I64Attr:$axis,
                   DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs Ds_FloatTensor:$result, Ds_F32Tensor:$mean,
                 Ds_F32Tensor:$inv_std_dev);
  let assemblyFormat = "$input `,` $scale (`,` $bias^)? attr-dict `:` "
                       "type($input) `,` type($scale) (`,` type($bias)^)?";
}

def Ds_BatchNormOp : Ds_Op<"batch_norm", [Ds_ComputeF32, InferTypeOpAdaptor, Ds_VJP]> {
  let summary = "batch normalization with running statistics (inference)";
  let description = [{
    y = (x - mean) / sqrt(var + epsilon) * scale + bias over axis 1 (channels).
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_FloatTensor:$scale,
                   Ds_FloatTensor:$bias, Ds_FloatTensor:$mean,
                   Ds_FloatTensor:$var,
                   DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` type(operands)";
}

def Ds_BatchNormTrainOp : Ds_Op<"batch_norm_train", [Ds_ComputeF32, InferTypeOpAdaptor, Ds_VJP]> {
  let summary = "batch normalization with batch statistics (training mode)";
  let description = [{
    Normalizes with the statistics of this batch (biased variance) and
    returns the updated running statistics, `running * momentum + batch *
    (1 - momentum)` (ONNX's momentum, PyTorch's is 1 - it), plus the batch
    mean and inverse standard deviation that backward needs. The running
    variance takes the biased batch variance (ONNX's reference) or, with
    `unbiased_running_var`, the unbiased one (PyTorch's train()). In a
    training step, a running statistic that is a parameter is state: the
    updated value is written back into it (ds-autodiff, ds-optimizer).
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_FloatTensor:$scale,
                   Ds_FloatTensor:$bias, Ds_FloatTensor:$running_mean,
                   Ds_FloatTensor:$running_var,
                   DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon,
                   DefaultValuedAttr<F32Attr, "0.9">:$momentum,
                   DefaultValuedAttr<BoolAttr, "false">:$unbiased_running_var);
  let results = (outs Ds_FloatTensor:$result,
                 Ds_FloatTensor:$running_mean_out,
                 Ds_FloatTensor:$running_var_out,
                 Ds_F32Tensor:$saved_mean, Ds_F32Tensor:$saved_inv_std);
  let assemblyFormat = "operands attr-dict `:` type(operands)";
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class Ds_ReduceOp<string mnemonic, string what, Trait precision = Ds_ComputeF32>
    : Ds_Op<mnemonic, [precision, SameOperandsElementType, InferTypeOpAdaptor, Ds_VJP],
            ["getWorkspaceBytes"]> {
  let summary = what # " over `axes` (sorted, non-negative)";
  let arguments = (ins Ds_NumericTensor:$input, DenseI64ArrayAttr:$axes,
                   DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs Ds_NumericTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasFolder = 1;
}

// Under mixed precision a sum of a 16-bit operand may be f32 (Ds_Sum32):
// the result type is then printed after `->`.
def Ds_ReduceSumOp : Ds_ReduceOp<"reduce_sum", "sum", Ds_Sum32> {
  let assemblyFormat = ?;
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
}
def Ds_ReduceMeanOp : Ds_ReduceOp<"reduce_mean", "mean">;
def Ds_ReduceMaxOp : Ds_ReduceOp<"reduce_max", "maximum">;
def Ds_ReduceProdOp : Ds_ReduceOp<"reduce_prod", "product">;

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Ds_ReshapeOp : Ds_Op<"reshape", [Ds_Compute16, Ds_VJP], ["getAliasedOperand"]> {
  let summary = "same elements, new static shape";
  let arguments = (ins Ds_Tensor:$input);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Ds_TransposeOp : Ds_Op<"transpose", [Ds_Compute16, InferTypeOpAdaptor, Ds_VJP]> {
  let summary = "permute axes: result axis i is input axis perm[i]";
  let arguments = (ins Ds_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Ds_BroadcastToOp : Ds_Op<"broadcast_to", [Ds_Compute16, Ds_VJP]> {
  let summary = "broadcast to the result shape (ONNX Expand)";
  let arguments = (ins Ds_Tensor:$input);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ds_ConcatOp : Ds_Op<"concat",
    [Ds_Compute16, SameOperandsElementType, InferTypeOpAdaptor, Ds_VJP]> {
  let summary = "concatenate along one axis";
  let arguments = (ins Variadic<Ds_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs)";
  let hasFolder = 1;
}

def Ds_SplitOp : Ds_Op<"split", [Ds_Compute16, Ds_VJP]> {
  let summary = "split along one axis into the result shapes";
  let arguments = (ins Ds_Tensor:$input, I64Attr:$axis);
  let results = (outs Variadic<Ds_Tensor>:$results);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($results)";
  let hasVerifier = 1;
}

def Ds_SliceOp : Ds_Op<"slice", [Ds_Compute16, Ds_VJP]> {
  let summary = "strided slice; result axis i takes offsets[i] + k * strides[i]";
  let description = [{
    One offset and one (non-zero, possibly negative) stride per axis; the
    result type gives the size per axis. Every index read is in bounds.
  }];
  let arguments = (ins Ds_Tensor:$input, DenseI64ArrayAttr:$offsets,
                   DenseI64ArrayAttr:$strides);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ds_GatherOp : Ds_Op<"gather", [Ds_Compute16, InferTypeOpAdaptor, Ds_VJP]> {
  let summary = "take slices of `data` along `axis` at `indices`";
  let description = [{
    ONNX Gather: result shape is data[:axis] + indices + data[axis+1:].
    Negative indices count from the end; an index out of range is a runtime
    error.
  }];
  let arguments = (ins Ds_Tensor:$data, Ds_IndexTensor:$indices,
                   I64Attr:$axis);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$data `,` $indices attr-dict `:` type($data) `,` "
                       "type($indices)";
}

def Ds_TriluOp : Ds_Op<"trilu", [Ds_Compute16, SameOperandsAndResultType, Ds_VJP]> {
  let summary = "keep the upper or lower triangle of the last two axes";
  let description = [{
    `upper`: keep elements with j - i >= k, else those with j - i <= k;
    the rest become zero.
  }];
  let arguments = (ins Ds_Tensor:$input, BoolAttr:$upper,
                   DefaultValuedAttr<I64Attr, "0">:$k);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Scatter and top-k
//===----------------------------------------------------------------------===//

def Ds_ScatterOp : Ds_Op<"scatter", [Ds_Compute16, InferTypeOpAdaptor, Ds_VJP]> {
  let summary = "a copy of `data` with `updates` combined into it at flat "
                "`positions`";
  let description = [{
    ONNX ScatterElements and ScatterND, addressed by flat position: the
    result is `data`, then, for every element u of `updates` in order,
    result.flat[positions[u]] = combine(result.flat[positions[u]], u) with
    `reduction` none (replace), add, mul, max or min. `positions` has the
    shape of `updates`; a position outside [0, numel(data)) is a runtime
    error. Elements of `positions` that differ other than along `axis` must
    address distinct elements of `data` (so kernels may run those lines in
    parallel and walk each line in order): ScatterElements' addressing
    keeps the other coordinates, ScatterND's puts each index tuple on its
    own line. With `none`, the last of repeated positions wins.
  }];
  let arguments = (ins Ds_Tensor:$data, Ds_I64Tensor:$positions,
                   Ds_Tensor:$updates, I64Attr:$axis,
                   Ds_ScatterReductionAttr:$reduction);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$reduction `,` $data `,` $positions `,` $updates "
                       "attr-dict `:` type($data) `,` type($positions) `,` "
                       "type($updates)";
  let hasVerifier = 1;
}

def Ds_TopKOp : Ds_Op<"top_k", [Ds_Compute16, InferTypeOpAdaptor]> {
  let summary = "indices of the `k` largest (or smallest) elements along "
                "`axis`, in order";
  let description = [{
    ONNX TopK's indices output (the values are a gather at these indices,
    which carries the derivative). Sorted by value, largest first when
    `largest` (else smallest first); equal values keep the lower index
    first; NaN counts as larger than every number, as in PyTorch. The
    result has the input's shape with `k` on `axis`, element type i64.
  }];
  let arguments = (ins Ds_NumericTensor:$input, I64Attr:$axis, I64Attr:$k,
                   BoolAttr:$largest);
  let results = (outs Ds_I64Tensor:$indices);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($indices)";
}

def Ds_DropoutOp : Ds_Op<"dropout", [Ds_Compute16, InferTypeOpAdaptor, Ds_VJP]> {
  let summary = "training-mode dropout: zero with probability `ratio`, scale "
                "the rest by 1 / (1 - ratio)";
  let description = [{
    Only training-mode dropout reaches the IR (inference-mode Dropout is the
    identity and import drops it). `seed` makes each dropout op distinct and
    reproducible; `mask` is true where the input is kept.
  }];
  let arguments = (ins Ds_FloatTensor:$input, F32Attr:$ratio, I64Attr:$seed);
  let results = (outs Ds_FloatTensor:$result, Ds_BoolTensor:$mask);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

def Ds_SoftmaxCrossEntropyOp : Ds_Op<"softmax_cross_entropy",
    [Ds_Loss16, InferTypeOpAdaptor, Ds_VJP], ["getWorkspaceBytes"]> {
  let summary = "softmax cross-entropy of class scores against labels";
  let description = [{
    ONNX SoftmaxCrossEntropyLoss: scores [N, C, d...], labels [N, d...],
    optional per-class weights [C]. `log_prob` (log-softmax over C) is a
    result because backward needs it. Labels equal to `ignore_index`
    contribute nothing and do not count towards the mean. With bf16/fp16
    scores, `log_prob` has their type and the loss is f32 (each row is
    computed in f32).
  }];
  let arguments = (ins Ds_FloatTensor:$scores, Ds_IndexTensor:$labels,
                   Optional<Ds_FloatTensor>:$weights,
                   DefaultValuedAttr<Ds_LossReductionAttr,
                                     "LossReduction::mean">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Ds_FloatTensor:$loss, Ds_FloatTensor:$log_prob);
  let assemblyFormat = "operands attr-dict `:` type(operands)";
}

def Ds_NllLossOp : Ds_Op<"nll_loss", [Ds_ComputeF32, InferTypeOpAdaptor, Ds_VJP]> {
  let summary = "negative log-likelihood of log-probabilities against labels";
  let arguments = (ins Ds_FloatTensor:$log_prob, Ds_IndexTensor:$labels,
                   Optional<Ds_FloatTensor>:$weights,
                   DefaultValuedAttr<Ds_LossReductionAttr,
                                     "LossReduction::mean">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Ds_FloatTensor:$loss);
  let assemblyFormat = "operands attr-dict `:` type(operands)";
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

def Ds_ConvOp : Ds_Op<"conv", [Ds_Accumulate32, InferTypeOpAdaptor, Ds_VJP],
                      ["getWorkspaceBytes"]> {
  let summary = "N-d grouped convolution (cross-correlation), NC... layout";
  let description = [{
    input [N, C, D...], weight [M, C / group, K...], optional bias [M].
    `pads` holds the begin pads of every spatial axis, then the end pads.
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_FloatTensor:$weight,
                   Optional<Ds_FloatTensor>:$bias,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<I64Attr, "1">:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` type(operands)";
}

class Ds_PoolOp<string mnemonic, string what, Trait precision>
    : Ds_Op<mnemonic, [precision, SameOperandsElementType, InferTypeOpAdaptor, Ds_VJP]> {
  let summary = what # " pooling over the spatial axes of [N, C, D...]";
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Ds_MaxPoolOp : Ds_PoolOp<"max_pool", "maximum", Ds_Compute16> {
  let arguments = (ins Ds_FloatTensor:$input,
                   DenseI64ArrayAttr:$kernel_shape, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations,
                   UnitAttr:$ceil_mode);
}

def Ds_AveragePoolOp : Ds_PoolOp<"avg_pool", "average", Ds_Accumulate32> {
  let arguments = (ins Ds_FloatTensor:$input,
                   DenseI64ArrayAttr:$kernel_shape, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads, UnitAttr:$ceil_mode,
                   UnitAttr:$count_include_pad);
}

//===----------------------------------------------------------------------===//
// Optimizer updates (ONNX ai.onnx.preview.training), one tensor per op
//===----------------------------------------------------------------------===//

// `scaled`: the op has an optional `grad_scale` operand, its last.
class Ds_OptimizerOp<string mnemonic, bit scaled = 0>
    : Ds_Op<mnemonic, [Ds_ComputeF32, InferTypeOpAdaptor,
                       DeclareOpInterfaceMethods<Ds_OptimizerOpInterface,
                           !if(scaled, ["getGradScaleOperand"], [])>],
            ["getInPlaceOperand"]> {
  let assemblyFormat = "operands attr-dict `:` type(operands)";
  let hasVerifier = 1;
}

def Ds_AdamOp : Ds_OptimizerOp<"adam"> {
  let summary = "one Adam step of ONNX's preview Adam for one tensor";
  let description = [{
    With g' = g + norm_coefficient * x:
    v' = alpha v + (1 - alpha) g'; h' = beta h + (1 - beta) g'^2;
    for step > 0, r' = lr * sqrt(1 - beta^step) / (1 - alpha^step), else lr;
    x' = (1 - norm_coefficient_post) * (x - r' v' / (sqrt(h') + epsilon)).
  }];
  let arguments = (ins Ds_FloatTensor:$lr, Ds_I64Tensor:$step,
                   Ds_FloatTensor:$param, Ds_FloatTensor:$grad,
                   Ds_FloatTensor:$first_moment, Ds_FloatTensor:$second_moment,
                   DefaultValuedAttr<F32Attr, "0.9">:$alpha,
                   DefaultValuedAttr<F32Attr, "0.999">:$beta,
                   DefaultValuedAttr<F32Attr, "1.0e-6">:$epsilon,
                   DefaultValuedAttr<F32Attr, "0.0">:$norm_coefficient,
                   DefaultValuedAttr<F32Attr, "0.0">:$norm_coefficient_post);
  let results = (outs Ds_FloatTensor:$param_out,
                 Ds_FloatTensor:$first_moment_out,
                 Ds_FloatTensor:$second_moment_out);
}

def Ds_MomentumOp : Ds_OptimizerOp<"momentum"> {
  let summary = "one SGD-with-momentum step of ONNX's preview Momentum";
  let arguments = (ins Ds_FloatTensor:$lr, Ds_I64Tensor:$step,
                   Ds_FloatTensor:$param, Ds_FloatTensor:$grad,
                   Ds_FloatTensor:$velocity,
                   F32Attr:$alpha, F32Attr:$beta,
                   DefaultValuedAttr<Ds_MomentumModeAttr,
                                     "MomentumMode::standard">:$mode,
                   F32Attr:$norm_coefficient);
  let results = (outs Ds_FloatTensor:$param_out,
                 Ds_FloatTensor:$velocity_out);
}

def Ds_AdagradOp : Ds_OptimizerOp<"adagrad"> {
  let summary = "one step of ONNX's preview Adagrad for one tensor";
  let arguments = (ins Ds_FloatTensor:$lr, Ds_I64Tensor:$step,
                   Ds_FloatTensor:$param, Ds_FloatTensor:$grad,
                   Ds_FloatTensor:$accumulator,
                   DefaultValuedAttr<F32Attr, "0.0">:$decay_factor,
                   DefaultValuedAttr<F32Attr, "1.0e-6">:$epsilon,
                   DefaultValuedAttr<F32Attr, "0.0">:$norm_coefficient);
  let results = (outs Ds_FloatTensor:$param_out,
                 Ds_FloatTensor:$accumulator_out);
}

//===----------------------------------------------------------------------===//
// Gradients: the vector-Jacobian products that need their own kernel
//===----------------------------------------------------------------------===//

def Ds_SoftmaxGradOp : Ds_Op<"softmax_grad", [Ds_Accumulate32, SameOperandsAndResultType],
                             ["getWorkspaceBytes"]> {
  let summary = "gradient of softmax: y * (dy - sum(dy * y)) along `axis`";
  let arguments = (ins Ds_FloatTensor:$output, Ds_FloatTensor:$result_grad,
                   I64Attr:$axis);
  let results = (outs Ds_FloatTensor:$input_grad);
  let assemblyFormat = "$output `,` $result_grad attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def Ds_LogSoftmaxGradOp : Ds_Op<"log_softmax_grad",
                                [Ds_ComputeF32, SameOperandsAndResultType],
                                ["getWorkspaceBytes"]> {
  let summary = "gradient of log-softmax: dy - exp(y) * sum(dy) along `axis`";
  let arguments = (ins Ds_FloatTensor:$output, Ds_FloatTensor:$result_grad,
                   I64Attr:$axis);
  let results = (outs Ds_FloatTensor:$input_grad);
  let assemblyFormat = "$output `,` $result_grad attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def Ds_AttentionGradOp : Ds_Op<"attention_grad", [Ds_Accumulate32, InferTypeOpAdaptor],
                               ["getWorkspaceBytes"]> {
  let summary = "gradients of fused attention";
  let description = [{
    dq, dk and dv of `attention` from its operands, its result, its saved
    f32 `lse` and the result's gradient, FlashAttention-2 style: the
    probabilities are recomputed from `lse` tile by tile, nothing
    [..., T, T] is read or written. Operands and gradients in the
    forward's layout (`tokens_major` as `attention`'s).
  }];
  let arguments = (ins Ds_FloatTensor:$query, Ds_FloatTensor:$key,
                   Ds_FloatTensor:$value, Ds_FloatTensor:$result,
                   Ds_F32Tensor:$lse, Ds_FloatTensor:$result_grad,
                   F32Attr:$scale, UnitAttr:$causal, UnitAttr:$tokens_major);
  let results = (outs Ds_FloatTensor:$query_grad, Ds_FloatTensor:$key_grad,
                 Ds_FloatTensor:$value_grad);
  let assemblyFormat = "operands attr-dict `:` type(operands)";
}

def Ds_AttentionPackedGradOp : Ds_Op<"attention_packed_grad",
                                     [Ds_Accumulate32, InferTypeOpAdaptor],
                                     ["getWorkspaceBytes"]> {
  let summary = "gradients of packed fused attention, packed";
  let description = [{
    `attention_grad` of `attention_packed`: dq, dk and dv written into one
    `qkv_grad` of `qkv`'s type, packed as `qkv` is ([..., T, 3, H, Dh]), so
    the projection's gradient reads it as [..., T, 3 H Dh] without a concat.
  }];
  let arguments = (ins Ds_FloatTensor:$qkv, Ds_FloatTensor:$result,
                   Ds_F32Tensor:$lse, Ds_FloatTensor:$result_grad,
                   F32Attr:$scale, UnitAttr:$causal);
  let results = (outs Ds_FloatTensor:$qkv_grad);
  let assemblyFormat = "operands attr-dict `:` type(operands)";
}

def Ds_LayerNormGradOp : Ds_Op<"layer_norm_grad", [Ds_Accumulate32, InferTypeOpAdaptor],
                               ["getWorkspaceBytes", "getInPlaceOperand"]> {
  let summary = "gradients of layer normalization";
  let description = [{
    From the forward's input, scale and saved f32 statistics (`mean`,
    `inv_std_dev`, normalized axes kept as 1) and the gradient of the
    output: the gradients of the input, of the scale and of the bias (the
    output gradient summed over everything but the scale's axes). Under
    mixed precision the scale and bias gradients of a 16-bit scale may be
    f32 (sums over all rows, written in the type their readers need); their
    types are then printed after `->`. With `addend` (optional, the input's
    type: the residual stream's gradient) the input gradient is `addend`
    plus the layer norm's, summed in f32 and rounded once;
    ds-fuse-matmul-epilogue forms it from `add(g, input_grad)`, and the
    input gradient may reuse the addend's storage.
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_FloatTensor:$scale,
                   Ds_F32Tensor:$mean, Ds_F32Tensor:$inv_std_dev,
                   Ds_FloatTensor:$result_grad, Optional<Ds_FloatTensor>:$addend,
                   I64Attr:$axis);
  let results = (outs Ds_FloatTensor:$input_grad, Ds_FloatTensor:$scale_grad,
                 Ds_FloatTensor:$bias_grad);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
}

def Ds_BatchNormGradOp : Ds_Op<"batch_norm_grad", [Ds_ComputeF32, InferTypeOpAdaptor]> {
  let summary = "gradients of training-mode batch normalization";
  let description = [{
    From the forward's input, scale and saved batch statistics (f32, [C])
    and the gradient of the output: the gradients of the input (through the
    batch statistics), of the scale and of the bias.
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_FloatTensor:$scale,
                   Ds_F32Tensor:$saved_mean, Ds_F32Tensor:$saved_inv_std,
                   Ds_FloatTensor:$result_grad);
  let results = (outs Ds_FloatTensor:$input_grad, Ds_FloatTensor:$scale_grad,
                 Ds_FloatTensor:$bias_grad);
  let assemblyFormat = "operands attr-dict `:` type(operands)";
}

def Ds_SoftmaxCrossEntropyGradOp : Ds_Op<"softmax_cross_entropy_grad",
    [Ds_Loss16, InferTypeOpAdaptor]> {
  let summary = "gradient of softmax cross-entropy with respect to the scores";
  let description = [{
    `loss_grad` * (softmax - onehot(label)), weighted, zero for ignored
    labels, divided by the (weighted) count for `mean` as in the forward.
    The softmax comes from the forward's `log_prob`.
  }];
  let arguments = (ins Ds_FloatTensor:$loss_grad, Ds_FloatTensor:$log_prob,
                   Ds_IndexTensor:$labels, Optional<Ds_FloatTensor>:$weights,
                   DefaultValuedAttr<Ds_LossReductionAttr,
                                     "LossReduction::mean">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Ds_FloatTensor:$scores_grad);
  let assemblyFormat = "operands attr-dict `:` type(operands)";
}

def Ds_SoftmaxCrossEntropyWithGradOp : Ds_Op<"softmax_cross_entropy_with_grad",
    [Ds_Loss16, InferTypeOpAdaptor], ["getWorkspaceBytes", "getInPlaceOperand"]> {
  let summary = "softmax cross-entropy and its scores' gradient in one pass";
  let description = [{
    `softmax_cross_entropy` followed by `softmax_cross_entropy_grad` of its
    loss, in one op: `loss` is the forward's loss and `scores_grad` is
    `loss_grad` * (softmax - onehot(label)), weighted, zero for ignored
    labels, divided by the (weighted) count for `mean`. `loss_grad` is the
    gradient's seed (1, or the loss scale: a runtime value), with the
    loss's shape. No log-probabilities are stored: each row's softmax is
    recomputed from the scores in f32 (ds-fuse-loss-grad builds this op
    after autodiff). With bf16/fp16 scores the loss is f32 and
    `scores_grad` has the scores' type; it may reuse the scores' buffer
    where the scores end here.
  }];
  let arguments = (ins Ds_FloatTensor:$scores, Ds_IndexTensor:$labels,
                   Ds_FloatTensor:$loss_grad, Optional<Ds_FloatTensor>:$weights,
                   DefaultValuedAttr<Ds_LossReductionAttr,
                                     "LossReduction::mean">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Ds_FloatTensor:$loss, Ds_FloatTensor:$scores_grad);
  let assemblyFormat = "operands attr-dict `:` type(operands)";
}

def Ds_NllLossGradOp : Ds_Op<"nll_loss_grad", [Ds_ComputeF32]> {
  let summary = "gradient of NLL with respect to the log-probabilities";
  let description = [{
    -`loss_grad` * weight at each label position (divided by the weighted
    count for `mean`), zero elsewhere; the result type is the forward's
    log-probability type.
  }];
  let arguments = (ins Ds_FloatTensor:$loss_grad, Ds_IndexTensor:$labels,
                   Optional<Ds_FloatTensor>:$weights,
                   DefaultValuedAttr<Ds_LossReductionAttr,
                                     "LossReduction::mean">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Ds_FloatTensor:$log_prob_grad);
  let assemblyFormat =
      "operands attr-dict `:` type(operands) `->` type($log_prob_grad)";
  let hasVerifier = 1;
}

def Ds_GatherGradOp : Ds_Op<"gather_grad", [Ds_Accumulate32], ["getWorkspaceBytes"]> {
  let summary = "gradient of gather: scatter-add of the result gradient";
  let description = [{
    Zero, then data_grad[.., indices[j], ..] += result_grad[.., j, ..] along
    `axis`; repeated indices (a token used twice in a batch) accumulate.
  }];
  let arguments = (ins Ds_FloatTensor:$result_grad, Ds_IndexTensor:$indices,
                   I64Attr:$axis);
  let results = (outs Ds_FloatTensor:$data_grad);
  let assemblyFormat = "$result_grad `,` $indices attr-dict `:` "
                       "type($result_grad) `,` type($indices) `->` "
                       "type($data_grad)";
  let hasVerifier = 1;
}

def Ds_SliceGradOp : Ds_Op<"slice_grad", [Ds_Compute16]> {
  let summary = "gradient of slice: the result gradient scattered into zeros";
  let arguments = (ins Ds_FloatTensor:$result_grad,
                   DenseI64ArrayAttr:$offsets, DenseI64ArrayAttr:$strides);
  let results = (outs Ds_FloatTensor:$input_grad);
  let assemblyFormat = "$result_grad attr-dict `:` type($result_grad) `->` "
                       "type($input_grad)";
  let hasVerifier = 1;
}

def Ds_ConvGradInputOp : Ds_Op<"conv_grad_input", [Ds_Accumulate32, Ds_VJP], ["getWorkspaceBytes"]> {
  let summary = "gradient of convolution with respect to its input";
  let description = [{
    Also ONNX ConvTranspose: the input in the role of the result gradient.
    Its own derivative is a convolution (for the result gradient) and a
    convolution's weight gradient (for the weight).
  }];
  let arguments = (ins Ds_FloatTensor:$result_grad, Ds_FloatTensor:$weight,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<I64Attr, "1">:$group);
  let results = (outs Ds_FloatTensor:$input_grad);
  let assemblyFormat = "operands attr-dict `:` type(operands) `->` "
                       "type($input_grad)";
  let hasVerifier = 1;
}

def Ds_ConvGradWeightOp : Ds_Op<"conv_grad_weight", [Ds_Accumulate32], ["getWorkspaceBytes"]> {
  let summary = "gradient of convolution with respect to its weight";
  let arguments = (ins Ds_FloatTensor:$result_grad, Ds_FloatTensor:$input,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<I64Attr, "1">:$group);
  let results = (outs Ds_FloatTensor:$weight_grad);
  let assemblyFormat = "operands attr-dict `:` type(operands) `->` "
                       "type($weight_grad)";
  let hasVerifier = 1;
}

def Ds_MaxPoolGradOp : Ds_Op<"max_pool_grad", [Ds_Compute16, InferTypeOpAdaptor],
                             ["getWorkspaceBytes"]> {
  let summary = "gradient of max pooling: each window's gradient goes to its "
                "first maximum";
  let arguments = (ins Ds_FloatTensor:$result_grad, Ds_FloatTensor:$input,
                   DenseI64ArrayAttr:$kernel_shape, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations);
  let results = (outs Ds_FloatTensor:$input_grad);
  let assemblyFormat = "operands attr-dict `:` type(operands)";
}

def Ds_AvgPoolGradOp : Ds_Op<"avg_pool_grad", [Ds_Accumulate32], ["getWorkspaceBytes"]> {
  let summary = "gradient of average pooling";
  let arguments = (ins Ds_FloatTensor:$result_grad,
                   DenseI64ArrayAttr:$kernel_shape, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads, UnitAttr:$count_include_pad);
  let results = (outs Ds_FloatTensor:$input_grad);
  let assemblyFormat = "$result_grad attr-dict `:` type($result_grad) `->` "
                       "type($input_grad)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// The training step: optimizers, gradient norm, state initialization
//===----------------------------------------------------------------------===//

def Ds_AdamWOp : Ds_OptimizerOp<"adamw", 1> {
  let summary = "one Adam / AdamW step for one tensor (torch.optim semantics)";
  let description = [{
    m' = beta1 m + (1 - beta1) g; v' = beta2 v + (1 - beta2) g^2;
    p' = p - lr (m' / (1 - beta1^step)) / (sqrt(v' / (1 - beta2^step)) + eps).
    `decoupled` (AdamW): p is first scaled by 1 - lr * weight_decay;
    otherwise (Adam) weight_decay * p is added to g. `lr` is an f32 scalar
    tensor, `step` an i64 scalar (1 for the first update). With
    `grad_scale` (an f32 scalar) g is the gradient times it, an element at a
    time: no scaled copy of the gradient exists. With `copy_type` (bf16 or
    f16, for an f32 param) the op has a fourth result, `param_copy`: p'
    rounded to that type as `ds.cast` rounds it, written in the update's own
    loop (mixed precision's 16-bit working copy; ds-fuse-param-copy).
  }];
  let arguments = (ins Ds_F32Tensor:$lr, Ds_I64Tensor:$step,
                   Ds_FloatTensor:$param, Ds_FloatTensor:$grad,
                   Ds_FloatTensor:$first_moment,
                   Ds_FloatTensor:$second_moment,
                   DefaultValuedAttr<F32Attr, "0.9">:$beta1,
                   DefaultValuedAttr<F32Attr, "0.999">:$beta2,
                   DefaultValuedAttr<F32Attr, "1.0e-8">:$epsilon,
                   Optional<Ds_F32Tensor>:$grad_scale,
                   DefaultValuedAttr<F32Attr, "0.0">:$weight_decay,
                   DefaultValuedAttr<BoolAttr, "true">:$decoupled,
                   OptionalAttr<TypeAttr>:$copy_type);
  let results = (outs Ds_FloatTensor:$param_out,
                 Ds_FloatTensor:$first_moment_out,
                 Ds_FloatTensor:$second_moment_out,
                 Optional<Ds_FloatTensor>:$param_copy);
}

def Ds_SgdOp : Ds_OptimizerOp<"sgd", 1> {
  let summary = "one torch.optim.SGD step for one tensor";
  let description = [{
    g += weight_decay * p; with momentum: buf = g at step 1, else
    momentum * buf + (1 - dampening) * g, and g = nesterov ? g + momentum *
    buf : buf; p' = p - lr * g. With `grad_scale` (an f32 scalar) g is the
    gradient times it, an element at a time. `copy_type` and `param_copy`
    as for ds.adamw.
  }];
  let arguments = (ins Ds_F32Tensor:$lr, Ds_I64Tensor:$step,
                   Ds_FloatTensor:$param, Ds_FloatTensor:$grad,
                   Ds_FloatTensor:$velocity,
                   DefaultValuedAttr<F32Attr, "0.0">:$momentum,
                   DefaultValuedAttr<F32Attr, "0.0">:$dampening,
                   Optional<Ds_F32Tensor>:$grad_scale,
                   DefaultValuedAttr<F32Attr, "0.0">:$weight_decay,
                   UnitAttr:$nesterov,
                   OptionalAttr<TypeAttr>:$copy_type);
  let results = (outs Ds_FloatTensor:$param_out,
                 Ds_FloatTensor:$velocity_out,
                 Optional<Ds_FloatTensor>:$param_copy);
}

def Ds_LionOp : Ds_OptimizerOp<"lion", 1> {
  let summary = "one Lion step for one tensor";
  let description = [{
    c = beta1 m + (1 - beta1) g; p' = p (1 - lr weight_decay) - lr sign(c);
    m' = beta2 m + (1 - beta2) g. With `grad_scale` (an f32 scalar) g is
    the gradient times it, an element at a time. `copy_type` and
    `param_copy` as for ds.adamw.
  }];
  let arguments = (ins Ds_F32Tensor:$lr, Ds_FloatTensor:$param,
                   Ds_FloatTensor:$grad, Ds_FloatTensor:$momentum,
                   Optional<Ds_F32Tensor>:$grad_scale,
                   DefaultValuedAttr<F32Attr, "0.9">:$beta1,
                   DefaultValuedAttr<F32Attr, "0.99">:$beta2,
                   DefaultValuedAttr<F32Attr, "0.0">:$weight_decay,
                   OptionalAttr<TypeAttr>:$copy_type);
  let results = (outs Ds_FloatTensor:$param_out,
                 Ds_FloatTensor:$momentum_out,
                 Optional<Ds_FloatTensor>:$param_copy);
}

// Not an OptimizerOpInterface (that describes one tensor's update): built
// by ds-group-optimizer from ds.adamw ops after every pass that rewrites
// updates one parameter at a time has run.
def Ds_AdamWMultiOp : Ds_Op<"adamw_multi", [Ds_ComputeF32],
                            ["getInPlaceOperand"]> {
  let summary = "ds.adamw over a list of tensors, in one kernel";
  let description = [{
    For n tensors, `tensors` is the n parameters, the n gradients, the n
    first moments, the n second moments, then optionally the f32 scalar
    `grad_scale`; the results are the n updated parameters, the n first
    moments and the n second moments, then optionally n 16-bit copies of the
    updated parameters (bf16 or f16 of f32 parameters: each rounded as
    `ds.cast` rounds it, written in the update's own loop, as ds.adamw's
    `param_copy`). The accessors `getParams()`, `getGrads()`, ...,
    `getGradScale()`, `getParamsOut()`, ..., `getParamCopies()` name the
    parts. Tensor i is updated exactly as `ds.adamw` with the same `lr`,
    `step`, `grad_scale` and attributes would update it. Every parameter has
    one float type, every gradient one float type. Lowered to one
    `dsrt::adamw_multi` call: one parallel region (cpu) or one multi-tensor
    launch (cuda) instead of one kernel per parameter.
  }];
  let arguments = (ins Ds_F32Tensor:$lr, Ds_I64Tensor:$step,
                   Variadic<Ds_FloatTensor>:$tensors,
                   DefaultValuedAttr<F32Attr, "0.9">:$beta1,
                   DefaultValuedAttr<F32Attr, "0.999">:$beta2,
                   DefaultValuedAttr<F32Attr, "1.0e-8">:$epsilon,
                   DefaultValuedAttr<F32Attr, "0.0">:$weight_decay,
                   DefaultValuedAttr<BoolAttr, "true">:$decoupled);
  let results = (outs Variadic<Ds_FloatTensor>:$updated);
  let assemblyFormat = [{
    $lr `,` $step `,` $tensors attr-dict `:` type($lr) `,` type($step) `,`
    type($tensors) `->` type($updated)
  }];
  let extraClassDeclaration = [{
    /// n, the number of tensors updated: 4n or 4n + 1 tensors.
    unsigned getCount() { return getTensors().size() / 4; }
    ::mlir::OperandRange getParams() { return getTensors().slice(0, getCount()); }
    ::mlir::OperandRange getGrads() { return getTensors().slice(getCount(), getCount()); }
    ::mlir::OperandRange getFirstMoments() { return getTensors().slice(2 * getCount(), getCount()); }
    ::mlir::OperandRange getSecondMoments() { return getTensors().slice(3 * getCount(), getCount()); }
    ::mlir::Value getGradScale() {
      return getTensors().size() > 4 * getCount() ? getTensors().back() : ::mlir::Value();
    }
    ::mlir::ResultRange getParamsOut() { return getUpdated().slice(0, getCount()); }
    ::mlir::ResultRange getFirstMomentsOut() { return getUpdated().slice(getCount(), getCount()); }
    ::mlir::ResultRange getSecondMomentsOut() { return getUpdated().slice(2 * getCount(), getCount()); }
    /// The 16-bit copies of the updated parameters: n results, or none.
    ::mlir::ResultRange getParamCopies() { return getUpdated().drop_front(3 * getCount()); }
  }];
  let hasVerifier = 1;
}

def Ds_SumOfSquaresOp : Ds_Op<"sum_of_squares", [Ds_Accumulate32, InferTypeOpAdaptor]> {
  let summary = "sum of the squares of every element of every input";
  let description = [{
    Accumulated in double, returned as an f32 scalar: the square of the
    global gradient norm.
  }];
  let arguments = (ins Variadic<Ds_FloatTensor>:$inputs);
  let results = (outs Ds_F32Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs)";
}

def Ds_FillOp : Ds_Op<"fill", [Ds_Compute16]> {
  let summary = "a tensor with every element equal to `value`, written at run "
                "time";
  let description = [{
    Unlike ds.constant, the value is written into the result's buffer when
    the op runs: the training step uses it to reset persistent state (the
    gradient accumulators) in place.
  }];
  let arguments = (ins F64Attr:$value);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Data parallelism (ZeRO's flat, padded partition)
//===----------------------------------------------------------------------===//

def Ds_TransferOp : Ds_Op<"transfer", [Ds_KeepTypes, SameOperandsAndResultType,
                                       DeclareOpInterfaceMethods<Ds_AsyncOpInterface>]> {
  let summary = "an asynchronous copy of a tensor between memory spaces";
  let description = [{
    The result is the input, copied from memory space `from` into memory
    space `to` (#ds.space: device, host, file). It runs on the copy stream
    (or the I/O thread for file space) and completes before the first op
    that uses its result (AsyncOpInterface); the offload pass issues it as
    early as its input is ready, so it overlaps the ops in between. The file
    space is reached only from the host (its buffers are the bounce buffers
    of direct I/O): device <-> host and host <-> file.
  }];
  let arguments = (ins Ds_Tensor:$input, Ds_MemorySpaceAttr:$from,
                   Ds_MemorySpaceAttr:$to);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Ds_FlatPadOp : Ds_Op<"flat_pad", [Ds_KeepTypes]> {
  let summary = "the elements of a tensor in a 1-D tensor, zero-padded";
  let description = [{
    The result's first numel(input) elements are the input's (row-major);
    the rest are zero. ZeRO partitions a tensor of n elements among N ranks
    as the flattened tensor zero-padded to N * ceil(n / N) elements, so
    every shard has the same size; `shard.reduce_scatter` and
    `shard.all_slice` then split the padded tensor evenly.
  }];
  let arguments = (ins Ds_Tensor:$input);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Ds_FlatUnpadOp : Ds_Op<"flat_unpad", [Ds_KeepTypes], ["getAliasedOperand"]> {
  let summary = "the leading elements of a 1-D tensor, in a new shape";
  let description = [{
    The inverse of ds.flat_pad: the first numel(result) elements of the
    1-D input, reshaped. A view of the input's buffer (no kernel runs): the
    whole tensor gathered from its padded shards is the front of the
    gathered buffer.
  }];
  let arguments = (ins Ds_Tensor:$input);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

class Ds_BucketOp<string mnemonic, list<string> kernelMethods = []>
    : Ds_Op<mnemonic, [Ds_KeepTypes,
                      DeclareOpInterfaceMethods<Ds_AsyncOpInterface>],
            kernelMethods> {
  let results = (outs Variadic<Ds_Tensor>:$outputs, Ds_Tensor:$staging);
  let assemblyFormat = "$inputs `on` $grid attr-dict `:` type($inputs) `->` "
                       "type($outputs) `,` type($staging)";
  let hasVerifier = 1;
}

def Ds_AllReduceBucketOp : Ds_BucketOp<"all_reduce_bucket",
                                        ["getInPlaceOperand"]> {
  let summary = "all-reduce of several tensors in one ring operation";
  let description = [{
    Output i is input i reduced over the ranks of grid axis `grid_axis`
    (`reduction`: sum, average or max), written in place over input i when
    that is its last use. The inputs are packed into `staging` (as many
    elements as all inputs together, planned in the arena like any tensor)
    and reduced there by one collective: DeepSpeed's gradient bucket
    (`reduce_bucket_size`). Runs on the communication stream.
  }];
  let arguments = (ins Variadic<Ds_Tensor>:$inputs, FlatSymbolRefAttr:$grid,
                   DefaultValuedAttr<I64Attr, "0">:$grid_axis,
                   DefaultValuedStrAttr<StrAttr, "sum">:$reduction);
}

def Ds_ReduceScatterBucketOp : Ds_BucketOp<"reduce_scatter_bucket"> {
  let summary = "reduce-scatter of several flat padded tensors in one ring "
                "operation";
  let description = [{
    Input i is a 1-D tensor of N * s_i elements (ZeRO's flat, padded form of
    a tensor; N the size of grid axis `grid_axis`), output i this rank's
    [s_i] shard of its reduction over the ranks. `staging` holds all inputs
    rank-major (for each rank r, for each input i, its r-th slice), so one
    reduce-scatter of `staging` gives every rank all of its shards.
  }];
  let arguments = (ins Variadic<Ds_Tensor>:$inputs, FlatSymbolRefAttr:$grid,
                   DefaultValuedAttr<I64Attr, "0">:$grid_axis,
                   DefaultValuedStrAttr<StrAttr, "sum">:$reduction);
}

def Ds_AllGatherBucketOp : Ds_BucketOp<"all_gather_bucket"> {
  let summary = "all-gather of several shards in one ring operation";
  let description = [{
    The inverse of ds.reduce_scatter_bucket's layout: input i is this rank's
    [s_i] shard, output i the [N * s_i] concatenation of every rank's shard
    (the flat, padded tensor), gathered by one all-gather of `staging`
    (rank-major, as in ds.reduce_scatter_bucket): DeepSpeed's
    `allgather_bucket_size`.
  }];
  let arguments = (ins Variadic<Ds_Tensor>:$inputs, FlatSymbolRefAttr:$grid,
                   DefaultValuedAttr<I64Attr, "0">:$grid_axis);
}

def Ds_TpCopyOp : Ds_Op<"tp_copy", [Ds_Compute16, SameOperandsAndResultType, Ds_VJP],
                        ["getAliasedOperand"]> {
  let summary = "identity in forward, all-reduce of the gradient in backward";
  let description = [{
    Megatron's `f`: marks a replicated activation entering a tensor-parallel
    region. Forward it is the input itself (a view, no kernel runs); its
    derivative sums the gradient, which each rank computes for its own
    shards only, over grid axis `grid_axis` of `grid` with a
    `shard.all_reduce`. The region's exit, Megatron's `g`, is a
    `shard.all_reduce` whose derivative is the identity.
  }];
  let arguments = (ins Ds_Tensor:$input, FlatSymbolRefAttr:$grid,
                   I64Attr:$grid_axis);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input `on` $grid attr-dict `:` type($input)";
}

def Ds_TpOffsetOp : Ds_Op<"tp_offset", [Ds_KeepTypes]> {
  let summary = "this rank's coordinate on a grid axis times `stride`, written "
                "at run time";
  let description = [{
    A scalar: the rank's coordinate along axis `grid_axis` of `grid` times
    `stride`, i.e. the first index of the rank's piece of an axis cut into
    pieces of `stride` elements over that axis. The vocabulary-parallel
    embedding and cross-entropy shift token ids by it to address the rows
    of the vocabulary their rank holds.
  }];
  let arguments = (ins FlatSymbolRefAttr:$grid, I64Attr:$grid_axis,
                   I64Attr:$stride);
  let results = (outs Ds_IndexTensor:$result);
  let assemblyFormat = "`on` $grid attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Ds_StopGradientOp : Ds_Op<"stop_gradient",
    [Ds_Compute16, SameOperandsAndResultType, Ds_VJP], ["getAliasedOperand"]> {
  let summary = "identity in forward, no derivative";
  let description = [{
    PyTorch's `detach`: the result is the input (a view, no kernel runs) and
    no gradient flows back through it. The vocabulary-parallel
    cross-entropy shifts its logits by their maximum, on which the loss does
    not depend; the maximum's all-reduce over tp (a max) is therefore never
    differentiated.
  }];
  let arguments = (ins Ds_Tensor:$input);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def Ds_FusedOp : Ds_Op<"fused",
    [Ds_KeepTypes, IsolatedFromAbove, SingleBlock],
    ["getInPlaceOperand"]> {
  let summary = "elementwise ops fused into one loop over the result";
  let description = [{
    Computes every element of the result with the scalar body (arith and math
    ops), reading each input at the element that broadcasts to it. Float
    elements enter the body as f32 and the result is rounded to its element
    type once; integers and i1 keep their types. Created by
    `ds-fuse-elementwise` so that chains of elementwise ops read and write
    memory once instead of once per op.

    ```mlir
    %r = ds.fused(%x, %bias) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %s = arith.addf %a, %b : f32
      %e = math.erf %s : f32
      ds.yield %e : f32
    }
    ```
  }];
  let arguments = (ins Variadic<Ds_Tensor>:$inputs);
  let results = (outs Ds_Tensor:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat =
      "`(` $inputs `)` attr-dict `:` functional-type($inputs, $result) $body";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The scalar type an element of `type` has inside the body.
    static ::mlir::Type getComputeType(::mlir::Type elementType);
  }];
}

def Ds_YieldOp : Op<Ds_Dialect, "yield",
    [Pure, Terminator, ReturnLike, HasParent<"FusedOp">]> {
  let summary = "the value of one element of a ds.fused result";
  let arguments = (ins AnyTypeOf<[F32, I64, I32, I1]>:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
}

#endif // DSOPT_DIALECT_DS_DSOPS_TD
