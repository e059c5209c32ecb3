//===- DsBase.td - ds dialect, enums, attributes, interfaces -*- tablegen -*-===//
//
// The `ds` dialect: value-semantics tensor ops of real training graphs, on
// builtin ranked tensors with static shapes. Parameters are function arguments
// carrying `#ds.param` (their ONNX name, trainability and where their bytes
// are); the bytes themselves never enter the IR above a small size.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_DIALECT_DS_DSBASE_TD
#define DSOPT_DIALECT_DS_DSBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/CommonAttrConstraints.td"

def Ds_Dialect : Dialect {
  let name = "ds";
  let cppNamespace = "::dsopt::ds";
  let summary = "Training-graph tensor ops for distributed training compilation";
  let description = [{
    Ops of ONNX training graphs (forward compute, losses, optimizer updates)
    in value semantics on statically shaped builtin tensors. Every op
    implements `CostOpInterface` (FLOPs and bytes) and, where its result types
    follow from its operands, `InferTypeOpInterface`.
  }];
  let useDefaultAttributePrinterParser = 1;
  // ds.fused bodies are arith and math ops on scalars.
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
  // Inherent attributes live in the attribute dictionary: the custom
  // assembly keeps them in `attr-dict`, and inferring result types while
  // parsing reads them from there.
  let usePropertiesForAttributes = 0;
  let hasConstantMaterializer = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Argument attribute naming a graph input: `{ds.input = "input_ids"}`;
    /// on a pipeline stage function's argument with ds.role, the value's id.
    static constexpr ::llvm::StringLiteral kInputAttrName = "ds.input";
    /// Argument attribute describing a parameter: `{ds.param = #ds.param<..>}`.
    static constexpr ::llvm::StringLiteral kParamAttrName = "ds.param";
    /// Result attribute naming a graph output: `{ds.output = "loss"}`; on a
    /// pipeline stage function's result with ds.role, the value's id.
    static constexpr ::llvm::StringLiteral kOutputAttrName = "ds.output";
    /// Argument and result attribute of a pipeline stage function: how the
    /// pipeline moves or keeps the value, `{ds.role = #ds.role<recv>}`.
    static constexpr ::llvm::StringLiteral kRoleAttrName = "ds.role";
    /// Module attribute: path of the model the module was imported from.
    static constexpr ::llvm::StringLiteral kSourceAttrName = "ds.source";
    /// Function attribute set by the memory planner: #ds.memory_plan<...>.
    static constexpr ::llvm::StringLiteral kMemoryPlanAttrName = "ds.memory";
    /// On a module: the program's target, "cpu" or "cuda" (absent: cpu),
    /// which some kernels' workspaces depend on.
    static constexpr ::llvm::StringLiteral kTargetAttrName = "ds.target";
    /// Argument attribute set by the memory planner: the byte offset of the
    /// argument's buffer in the arena.
    static constexpr ::llvm::StringLiteral kOffsetAttrName = "ds.offset";
    /// Argument attribute: the memory space of a persistent argument's
    /// buffer, #ds.space<host|file> (absent: device).
    static constexpr ::llvm::StringLiteral kSpaceAttrName = "ds.space";
    /// Op attribute set by the memory planner: the byte offset of each
    /// result's buffer (-1 for results in static storage: constants).
    static constexpr ::llvm::StringLiteral kBuffersAttrName = "ds.buffers";
    /// Op attribute set by the memory planner: offsets of the buffers whose
    /// lifetime ends with this op.
    static constexpr ::llvm::StringLiteral kFreesAttrName = "ds.frees";
    /// Op attribute set by the memory planner on an op whose kernel needs
    /// scratch memory (KernelOpInterface::getWorkspaceBytes): the arena
    /// offset of its workspace, a buffer live only while the op runs.
    static constexpr ::llvm::StringLiteral kWorkspaceAttrName = "ds.workspace";
    /// Op attribute set by the memory planner in a pipeline stage's
    /// function: for each result, the slot the runtime binds that it is
    /// computed into (k: the slot of the function's k-th output with a
    /// ds.role, dsrt::bound_output), or -1. The output itself, or a value
    /// the output's kernel then overwrites in place in that slot.
    static constexpr ::llvm::StringLiteral kBoundSlotsAttrName = "ds.bound_slots";
    /// Result attribute set by ds-autodiff: the gradient of the loss with
    /// respect to the named parameter, `{ds.grad = "fc.weight"}`.
    static constexpr ::llvm::StringLiteral kGradAttrName = "ds.grad";
    /// Argument attribute of persistent training state that is not a model
    /// parameter (optimizer moments, gradient accumulators), zero at the
    /// start: `{ds.state = #ds.state<optimizer, role = "exp_avg",
    /// param = "fc.weight">}`. Functions of one module share a state by it.
    static constexpr ::llvm::StringLiteral kStateAttrName = "ds.state";
    /// Result attribute: this result is the new value of argument N (a
    /// parameter or a state), written back into its buffer by the end of
    /// the function: `{ds.updates = 3 : i64}`.
    static constexpr ::llvm::StringLiteral kUpdatesAttrName = "ds.updates";
    /// Module attribute of a training program: its optimizer, gradient
    /// accumulation, clipping and learning-rate schedule (a dictionary).
    static constexpr ::llvm::StringLiteral kTrainAttrName = "ds.train";
    /// Module attribute set by the importer: the initializers that are not
    /// parameters because import consumed them (shapes, axes, constants).
    static constexpr ::llvm::StringLiteral kFoldedInitializersAttrName =
        "ds.folded_initializers";
    /// Argument attribute of a parameter that each rank holds only a shard
    /// of (ZeRO stage 3): the type of the whole tensor. The argument is the
    /// rank's 1-D shard of the flattened tensor, zero-padded to a multiple
    /// of the data-parallel size; its `ds.param` data describe the whole.
    static constexpr ::llvm::StringLiteral kShardedAttrName = "ds.sharded";
    /// Op attribute: the op writes its in-place result over a persistent
    /// argument (a gradient accumulator) that the function reads no more
    /// and whose old value nobody needs (set by ds-zero).
    static constexpr ::llvm::StringLiteral kOverwritesArgAttrName =
        "ds.overwrites_arg";
    /// Module attribute set by ds-zero: the data-parallel recipe, a
    /// #ds.zero.
    static constexpr ::llvm::StringLiteral kZeroAttrName = "ds.zero";
    /// Op attribute set by ds-autodiff on every op it differentiated: the
    /// op's id, unique in its function (an i64).
    static constexpr ::llvm::StringLiteral kForwardIdAttrName =
        "ds.forward_id";
    /// Op attribute set by ds-autodiff on every op it built for the
    /// derivative of a forward op (the op's VJP and the sums of its
    /// operands' gradients): that op's ds.forward_id. Which forward op a
    /// backward op belongs to survives clones and new locations.
    static constexpr ::llvm::StringLiteral kGradOfAttrName = "ds.grad_of";
    /// The axes of a device grid, outermost first, on its shard.grid: a
    /// #ds.axes (`#ds.axes<[pp, dp]>`, see buildDeviceGrid).
    static constexpr ::llvm::StringLiteral kGridAxesAttrName = "ds.axes";
    /// #ds.tp_split on a parameter argument sharded by ds-tensor-parallel.
    static constexpr ::llvm::StringLiteral kTpSplitAttrName = "ds.tp_split";
    /// Set by ds-tensor-parallel, for the rank-local form only, on an op
    /// whose split operand is padded (a vocabulary the ranks do not divide):
    /// the split axis's model extent; the padding past it is masked away.
    static constexpr ::llvm::StringLiteral kTpWholeAttrName = "ds.tp_whole";
    /// Argument attribute set by ds-tensor-parallel on an integer input that
    /// a vocabulary-parallel lookup or loss reads, and by ds-pad-vocab on a
    /// padded loss's labels: the values the whole op takes, `array<i64: lo,
    /// hi>` ([lo, hi)) or `array<i64: lo, hi, ignore>`. The rank-local (or
    /// padded) form no longer shows them, and the runners check the data
    /// against them before step 1.
    static constexpr ::llvm::StringLiteral kIndexRangeAttrName =
        "ds.index_range";
    /// Unit attribute set by ds-tensor-parallel on a ds.dropout of a split
    /// activation: each tp rank draws its own mask (Megatron's
    /// model-parallel RNG; the kernel's seed is dsrt::tp_rank_seed(seed)).
    static constexpr ::llvm::StringLiteral kTpRankSeedAttrName =
        "ds.tp_rank_seed";
    /// Unit attribute set by ds-tensor-parallel under sequence parallelism
    /// on the ops that all-gather a column-parallel product's input along
    /// the sequence (the gather and the transposes around it): ds-autodiff
    /// computes them again in the backward for the ops there that read
    /// their results, so the forward keeps the rank's rows, not the whole
    /// input (Korthikanti et al. 2022, 4.2.3).
    static constexpr ::llvm::StringLiteral kRecomputeInBackwardAttrName =
        "ds.recompute_in_backward";
    /// Unit attribute set by ds-tensor-parallel on the shard.all_gather
    /// that makes a sequence-split activation whole for an op without a
    /// sharding rule for it: the ranks then compute alike and each holds
    /// the whole gradient, so the derivative takes the rank's rows
    /// (shard.all_slice) instead of summing the ranks' (reduce-scatter).
    static constexpr ::llvm::StringLiteral kTpGatherWholeAttrName =
        "ds.tp_gather_whole";
    /// Op attribute: the op computes in f32 under a 16-bit precision,
    /// whatever its own compute precision (the vocabulary-parallel
    /// cross-entropy's elementwise ops, which a whole loss computes per row
    /// in f32).
    static constexpr ::llvm::StringLiteral kComputeF32AttrName =
        "ds.compute_f32";
    /// Op attribute set by ds-pipeline: the virtual pipeline stage the op
    /// belongs to (an i64).
    static constexpr ::llvm::StringLiteral kStageAttrName = "ds.stage";
    /// Module attribute set by ds-pipeline: the schedule and the partition,
    /// a #ds.pipeline.
    static constexpr ::llvm::StringLiteral kPipelineAttrName = "ds.pipeline";
    /// Module attribute set by ds-pipeline-split: the pipeline rank this
    /// module is the program of, its virtual stages and their functions,
    /// its static action list, its buffer pools and tied accumulators, a
    /// #ds.pipeline_rank.
    static constexpr ::llvm::StringLiteral kPipelineRankAttrName =
        "ds.pipeline_rank";
    /// Function attribute set by ds-pipeline-split: which part of which
    /// virtual stage the function is, a #ds.pipeline_part
    /// (`#ds.pipeline_part<part = forward, stage = 1>`).
    static constexpr ::llvm::StringLiteral kPipelinePartAttrName =
        "ds.pipeline_part";
  }];
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Ds_Float : AnyTypeOf<[F32, F16, BF16], "f32, f16 or bf16">;
def Ds_Index : AnyTypeOf<[I64, I32], "i64 or i32">;

def Ds_Tensor : StaticShapeTensorOf<[F32, F16, BF16, I64, I32, I1]>;
def Ds_FloatTensor : StaticShapeTensorOf<[F32, F16, BF16]>;
def Ds_NumericTensor : StaticShapeTensorOf<[F32, F16, BF16, I64, I32]>;
def Ds_IndexTensor : StaticShapeTensorOf<[I64, I32]>;
def Ds_BoolTensor : StaticShapeTensorOf<[I1]>;
def Ds_F32Tensor : StaticShapeTensorOf<[F32]>;
def Ds_I64Tensor : StaticShapeTensorOf<[I64]>;

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

// Printed as a bare keyword in `ds.compare lt, %a, %b`, like arith.cmpf.
def Ds_ComparePredicateAttr : I32EnumAttr<"ComparePredicate",
    "elementwise comparison", [
  I32EnumAttrCase<"eq", 0>,
  I32EnumAttrCase<"lt", 1>,
  I32EnumAttrCase<"le", 2>,
  I32EnumAttrCase<"gt", 3>,
  I32EnumAttrCase<"ge", 4>
]> {
  let cppNamespace = "::dsopt::ds";
}

// How ds.scatter combines an update with the element it lands on (ONNX
// ScatterElements / ScatterND `reduction`).
def Ds_ScatterReductionAttr : I32EnumAttr<"ScatterReduction",
    "how a scattered update combines with its target", [
  I32EnumAttrCase<"none", 0>,
  I32EnumAttrCase<"add", 1>,
  I32EnumAttrCase<"mul", 2>,
  I32EnumAttrCase<"max", 3>,
  I32EnumAttrCase<"min", 4>
]> {
  let cppNamespace = "::dsopt::ds";
}

// The memory kinds of a rank's plan: each has an arena of its own, and
// every buffer is (space, offset).
def Ds_MemorySpace : I32EnumAttr<"MemorySpace", "a kind of memory of the plan",
    [
  I32EnumAttrCase<"device", 0>,
  I32EnumAttrCase<"host", 1>,
  I32EnumAttrCase<"file", 2>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}
def Ds_MemorySpaceAttr : EnumAttr<Ds_Dialect, Ds_MemorySpace, "space"> {
  let summary = "the memory space of a persistent buffer";
  let description = [{
    `#ds.space<host>` on a parameter or state argument (`ds.space`) puts its
    buffer in the rank's pinned-host arena, `#ds.space<file>` in its
    file-backed (NVMe) arena; without it a buffer is in device memory. The
    argument's `ds.offset` is then an offset in that space's arena.
    `ds.space = #ds.space<host>` on an optimizer op (OptimizerOpInterface)
    runs its update on the host, over operands and results in host memory
    (ds-offload); a `ds.transfer` copies a tensor between two spaces.
  }];
  let assemblyFormat = "`<` $value `>`";
}

def Ds_GeluApproximation : I32EnumAttr<"GeluApproximation",
    "GELU formula", [
  I32EnumAttrCase<"none", 0>,
  I32EnumAttrCase<"tanh", 1>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}
def Ds_GeluApproximationAttr :
    EnumAttr<Ds_Dialect, Ds_GeluApproximation, "gelu_approximation"> {
  let assemblyFormat = "$value";
}

def Ds_LossReduction : I32EnumAttr<"LossReduction",
    "how a loss reduces over samples", [
  I32EnumAttrCase<"none", 0>,
  I32EnumAttrCase<"sum", 1>,
  I32EnumAttrCase<"mean", 2>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}
def Ds_LossReductionAttr :
    EnumAttr<Ds_Dialect, Ds_LossReduction, "reduction"> {
  let assemblyFormat = "$value";
}

def Ds_MomentumMode : I32EnumAttr<"MomentumMode",
    "momentum update rule", [
  I32EnumAttrCase<"standard", 0>,
  I32EnumAttrCase<"nesterov", 1>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}
def Ds_MomentumModeAttr :
    EnumAttr<Ds_Dialect, Ds_MomentumMode, "momentum_mode"> {
  let assemblyFormat = "$value";
}

// What an asynchronous op (AsyncOpInterface) does; the plan's traffic keys.
def Ds_AsyncKind : I32EnumAttr<"AsyncKind",
    "what an asynchronous op moves", [
  I32EnumAttrCase<"all_reduce", 0>,
  I32EnumAttrCase<"all_gather", 1>,
  I32EnumAttrCase<"reduce_scatter", 2>,
  I32EnumAttrCase<"transfer", 3>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}

// What a persistent training state (`ds.state`) is to its parameter.
def Ds_StateKind : I32EnumAttr<"StateKind",
    "what a training state is to its parameter", [
  I32EnumAttrCase<"accumulator", 0>,
  I32EnumAttrCase<"optimizer", 1>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}

// The role of a pipeline stage function's argument or result (`ds.role`):
// how the pipeline moves or keeps the value between its functions.
def Ds_ValueRole : I32EnumAttr<"ValueRole",
    "the role of a pipeline stage function's value", [
  I32EnumAttrCase<"send", 0>,
  I32EnumAttrCase<"recv", 1>,
  I32EnumAttrCase<"stash", 2>,
  I32EnumAttrCase<"wstash", 3>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}
def Ds_ValueRoleAttr : EnumAttr<Ds_Dialect, Ds_ValueRole, "role"> {
  let summary = "the role of a pipeline stage function's value";
  let description = [{
    `ds.role = #ds.role<recv>` on an argument of a pipeline stage function
    (beside `ds.input`, the value's id) says the pipeline receives it from
    the neighbouring stage; `#ds.role<stash>` that the stage's forward kept
    it for its backward; `#ds.role<wstash>` that the stage's
    backward_input kept it for its backward_weight. On a result (beside
    `ds.output`): `send` goes to the neighbouring stage, `stash` and
    `wstash` are kept for the stage's later function.
  }];
  let assemblyFormat = "`<` $value `>`";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

class Ds_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Ds_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Ds_ExternalDataAttr : Ds_Attr<"ExternalData", "extern"> {
  let summary = "bytes of a tensor in a file, relative to the model's directory";
  let description = [{
    `#ds.extern<location = "model.onnx.data", offset = 4096, length = 1024>`:
    the little-endian bytes of a tensor live in `location` (a path relative to
    the directory of the imported model; the model file itself for weights
    stored inline in the protobuf) at `offset`, `length` bytes long. The
    importer has already checked that the range exists and that the path stays
    inside the model's directory.
  }];
  let parameters = (ins
    StringRefParameter<"file, relative to the model's directory">:$location,
    "int64_t":$offset,
    "int64_t":$length);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Ds_ZeroAttr : Ds_Attr<"Zero", "zero"> {
  let summary = "the data-parallel (ZeRO) recipe of a training program";
  let description = [{
    Set on the module by `ds-zero`:
    `#ds.zero<stage = 2, dp = 4, param_persistence_threshold = 100000>`.
    `stage` is the ZeRO stage (0: replicated, 1: sharded optimizer states,
    2: and gradients, 3: and parameters at or above
    `param_persistence_threshold` elements), `dp` the number of
    data-parallel ranks.
  }];
  let parameters = (ins "int64_t":$stage, "int64_t":$dp,
                    "int64_t":$param_persistence_threshold);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Ds_TensorSplitAttr : Ds_Attr<"TensorSplit", "tp_split"> {
  let summary = "how a parameter is split over the tensor-parallel ranks";
  let description = [{
    Set by `ds-tensor-parallel` on a parameter argument whose type is one
    rank's shard: `#ds.tp_split<dim = 1, blocks = 3, ranks = 2>`. The full
    tensor's axis `dim` is `blocks` equal blocks (a fused Q/K/V projection's
    three), each cut into `ranks` equal pieces; tp rank r holds piece r of
    every block, in block order. `blocks = 1` is a plain even split.

    `whole = V` (only with `blocks = 1`) pads the axis (a vocabulary):
    each rank holds P = ceil(V / ranks) rounded up to a multiple of 8
    entries (paddedPiece), rank r the entries [r * P, ...) of the V, and
    zeros past the last one; P * ranks > V. The multiple of 8 keeps a
    16-bit piece's rows 16-byte aligned, as the GPU's matrix products
    want. Omitted (0): equal pieces.
  }];
  let parameters = (ins "int64_t":$dim, "int64_t":$blocks, "int64_t":$ranks,
                        DefaultValuedParameter<"int64_t", "0">:$whole);
  let extraClassDeclaration = [{
    /// The model's extent of the split axis, given one rank's.
    int64_t wholeExtent(int64_t local) const {
      return getWhole() ? getWhole() : local * getRanks();
    }
    /// The multiple a padded axis's pieces are rounded up to: 16 bytes of
    /// a 16-bit value (dsrt::kTpPadMultiple).
    static constexpr int64_t kPadMultiple = 8;
    /// The entries each of `ranks` pieces of a padded axis of `whole`
    /// holds: ceil(whole / ranks) rounded up to kPadMultiple. The runtime
    /// cuts pieces by the same rule (dsrt::tp_padded_piece).
    static int64_t paddedPiece(int64_t whole, int64_t ranks) {
      int64_t piece = (whole + ranks - 1) / ranks;
      return (piece + kPadMultiple - 1) / kPadMultiple * kPadMultiple;
    }
  }];
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Ds_MemoryPlanAttr : Ds_Attr<"MemoryPlan", "memory_plan"> {
  let summary = "the static memory plan of a function";
  let description = [{
    Set on a function by `ds-plan-memory`: the bytes of its device arena
    (the peak the program needs), the bytes of persistent state at the
    bottom of the arena (parameters), and the largest sum of simultaneously
    live buffers (the arena size minus fragmentation). Every buffer's slot
    is its byte size rounded up to `alignment`. The pinned-host and
    file-backed arenas (`host_bytes`, `file_bytes`, with their persistent
    parts) hold the buffers of arguments placed there by `ds.space`; they
    are left out of the text while empty.
  }];
  let parameters = (ins "int64_t":$arena_bytes, "int64_t":$persistent_bytes,
                    "int64_t":$peak_live_bytes, "int64_t":$alignment,
                    DefaultValuedParameter<"int64_t", "0">:$host_bytes,
                    DefaultValuedParameter<"int64_t", "0">:$host_persistent_bytes,
                    DefaultValuedParameter<"int64_t", "0">:$file_bytes,
                    DefaultValuedParameter<"int64_t", "0">:$file_persistent_bytes);
  let builders = [
    // A plan in device memory only.
    AttrBuilder<(ins "int64_t":$arena_bytes, "int64_t":$persistent_bytes,
                     "int64_t":$peak_live_bytes, "int64_t":$alignment), [{
      return $_get($_ctxt, arena_bytes, persistent_bytes, peak_live_bytes,
                   alignment, 0, 0, 0, 0);
    }]>
  ];
  let extraClassDeclaration = [{
    /// The arena bytes of `space` (its peak) and of its persistent part.
    int64_t getSpaceBytes(::dsopt::ds::MemorySpace space) const;
    int64_t getSpacePersistentBytes(::dsopt::ds::MemorySpace space) const;
  }];
  let assemblyFormat = "`<` struct(params) `>`";
}

def Ds_ParamAttr : Ds_Attr<"Param", "param"> {
  let summary = "a model parameter (an ONNX initializer)";
  let description = [{
    Attached to a function argument as `ds.param`. `name` is the ONNX
    initializer name (kept verbatim so trained weights can be written back
    under the same name), `trainable` whether the optimizer updates it, and
    `data` where its initial value is: a `#ds.extern` byte range, or, for
    tensors of at most a few dozen bytes, the value itself as dense elements.
    The value has the argument's type, except on a bf16 or f16 argument
    (ds-precision's working copy of a trained parameter), whose value is
    the model's f32 one, converted to the argument's type when loaded.
  }];
  let parameters = (ins
    StringRefParameter<"ONNX initializer name">:$name,
    "bool":$trainable,
    "::mlir::Attribute":$data);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Ds_StateAttr : Ds_Attr<"State", "state"> {
  let summary = "a persistent training state of a parameter";
  let description = [{
    Attached to a function argument as `ds.state`: persistent training
    state that is not a model parameter, zero at the start, and whose
    parameter it belongs to. `#ds.state<accumulator, param = "fc.weight">`
    is the gradient accumulator of parameter `fc.weight`;
    `#ds.state<optimizer, role = "exp_avg", param = "fc.weight">` is the
    optimizer's state `exp_avg` of it (a role of the optimizer op's
    `OptimizerOpInterface::getStateRoles`). Functions of one module share a
    state by this attribute.
  }];
  let parameters = (ins
    EnumParameter<Ds_StateKind>:$kind,
    StringRefParameter<"the optimizer's name of the state", [{""}]>:$role,
    StringRefParameter<"the parameter's name">:$param);
  let builders = [
    // The gradient accumulator of `param`.
    AttrBuilder<(ins "::llvm::StringRef":$param), [{
      return $_get($_ctxt, ::dsopt::ds::StateKind::accumulator, "", param);
    }]>,
    // The optimizer's state `role` of `param`.
    AttrBuilder<(ins "::llvm::StringRef":$role, "::llvm::StringRef":$param), [{
      return $_get($_ctxt, ::dsopt::ds::StateKind::optimizer, role, param);
    }]>
  ];
  let extraClassDeclaration = [{
    bool isAccumulator() const {
      return getKind() == ::dsopt::ds::StateKind::accumulator;
    }
  }];
  let assemblyFormat =
      "`<` $kind `,` (`role` `=` $role^ `,`)? `param` `=` $param `>`";
  let genVerifyDecl = 1;
}

include "ds/IR/DsPipelineAttrs.td"

#endif // DSOPT_DIALECT_DS_DSBASE_TD
