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

def DsPrintPrecision : Pass<"ds-print-precision", "mlir::ModuleOp"> {
  let summary = "Print the compute precision of every ds op as a table";
  let description = [{
    Prints to stdout one Markdown table row per registered ds op, sorted by
    name: the op and where it computes when the model trains in a 16-bit
    type (its trait Ds_Compute16, Ds_Accumulate32, Ds_ComputeF32 or
    Ds_KeepTypes; see ds-precision). docs/passes.md holds this table and a
    test compares the two. An op that declares no precision is an error.
    The module is left alone.
  }];
}

def DsPrecision : Pass<"ds-precision", "mlir::ModuleOp"> {
  let summary = "Mixed precision: 16-bit parameters and activations, fp32 "
                "master weights and optimizer states";
  let description = [{
    Runs after ds-optimizer, on `@micro_step` and `@optimizer_step`:

    - every trainable parameter (one with a gradient accumulator) becomes a
      `dtype` tensor: the working copy forward and backward read;
    - its fp32 master copy is a new optimizer state
      (`#ds.state<optimizer, role = "master", param = "<name>">`) that the
      optimizer updates in place of the parameter, with its fp32 states;
      after the update the working copy is refreshed from it (a ds.cast);
    - gradient accumulators hold `grad-accum-dtype` (default: `dtype`);
      optimizer_step casts them to f32 before the norm, clipping and the
      update;
    - in @micro_step each op computes where its compute-precision trait
      says (docs/passes.md's table): Ds_Compute16 and Ds_Accumulate32 ops
      read and write `dtype`, Ds_ComputeF32 ops read f32 (16-bit operands
      are cast before the op) and their results are cast to `dtype` where
      another op than an f32 one reads them; constants, frozen parameters
      and float inputs keep their types and are cast where read. Integer
      and boolean values keep their types. The loss stays f32.

    Casts that go to a wider float and back fold away (canonicalize).
  }];
  let options = [
    Option<"dtype", "dtype", "std::string", /*default=*/"\"bf16\"",
           "The 16-bit type: bf16 or fp16">,
    Option<"gradAccumDtype", "grad-accum-dtype", "std::string",
           /*default=*/"\"\"",
           "The gradient accumulators' type: fp32, or the 16-bit type "
           "(default)">,
  ];
}

def DsFuseAttention : Pass<"ds-fuse-attention", "mlir::func::FuncOp"> {
  let summary = "Fuse scaled-dot-product attention into ds.attention";
  let description = [{
    matmul(q, kᵀ), a scalar scale, a constant causal mask (a where or an
    additive mask) or none, a softmax over the last axis and the product
    with v become one `ds.attention`, whose kernels never materialise the
    [..., T, T] scores. Runs on the imported forward, before ds-autodiff,
    which differentiates it with `ds.attention_grad` (FlashAttention-2:
    the probabilities recomputed from the saved f32 log-sum-exp). A
    softmax between two products that does not match is a warning saying
    why.
  }];
}

def DsRecognizeGelu : Pass<"ds-recognize-gelu", "mlir::func::FuncOp"> {
  let summary = "Make the tanh GELU written as primitive ops one ds.gelu";
  let description = [{
    `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))` (x³ as
    `x * (x * x)`, `(x * x) * x` or `pow(x, 3)`; the products in torch.onnx's
    or HF gelu_new's association; operands of adds and muls in either
    order) becomes `ds.gelu {approximate = tanh}`, the form ONNX's `Gelu`
    (opset 20) imports to. The constants must equal those values rounded to
    their element type and every intermediate must have x's type; anything
    else is left as it is. Runs first in ds-train, before autodiff.
  }];
}

def DsFuseMatMulEpilogue : Pass<"ds-fuse-matmul-epilogue", "mlir::func::FuncOp"> {
  let summary = "Fold bias adds, residual adds and bias gradients into matmuls";
  let description = [{
    `add(add(matmul(x, w), bias), addend)` and `add(matmul(x, w), bias)`
    become `ds.matmul_bias` (x [..., M, K], w 2-D, bias [N] of the result's
    element type, the addend of the result's type, each intermediate used
    once); a weight gradient `matmul(xᵀ, dy)` (dy reshaped to [K, N]) and
    `reduce_sum(dy)` over all of dy's leading axes become one
    `ds.matmul_bias_grad`, and `matmul(dyᵀ, x)` (a weight stored [out,
    in]) with it one `ds.matmul_lhs_bias_grad`; `ds.gemm` with a bias
    vector as C (alpha, beta 1, `a` not transposed) becomes
    `ds.matmul_bias`. Anything else is left as it is. Runs after
    precision and ZeRO and before ds-fuse-elementwise, which would fuse the
    adds into loops; cuda runs the new ops as cuBLASLt epilogues.
  }];
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

def DsAutodiff : Pass<"ds-autodiff", "mlir::ModuleOp"> {
  let summary = "Reverse-mode differentiation of the loss with respect to the "
                "trainable parameters";
  let description = [{
    Clones the forward function `@F` into `@F_grad`, which returns the loss
    and, for every trainable parameter, the gradient of the loss with
    respect to it (result attribute `ds.grad = "<initializer name>"`).

    The loss is the result named by `loss` (its `ds.output`), or the only
    scalar floating-point result. A parameter trains when it is marked
    trainable on import (every floating-point initializer, or those ONNX's
    TrainingInfoProto updates), reaches the loss and matches none of the
    `frozen` names or glob patterns; a frozen pattern that matches no
    parameter is an error. The `trainable` flag of every `#ds.param` of
    `@F_grad` records the decision.

    Gradients come from each op's VJPOpInterface, walking the function
    backwards over the ops between the trainable parameters and the loss;
    gradients of values used several times are summed. An op on that path
    without a derivative is an error naming it and its ONNX node.

    Every differentiated op gets `ds.forward_id = N` (unique in `@F_grad`)
    and every non-constant op built for its derivative `ds.grad_of = N`, so
    later passes tell which forward op a backward op belongs to.
  }];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"main\"",
           "The forward function to differentiate">,
    Option<"loss", "loss", "std::string", /*default=*/"\"\"",
           "Name of the loss output (default: the only scalar float output)">,
    ListOption<"frozen", "frozen", "std::string",
               "Parameters that do not train: names or glob patterns">,
    Option<"lossScaleInput", "loss-scale-input", "bool", /*default=*/"false",
           "Seed the loss gradient with a new last argument of @F_grad, an "
           "f32 scalar input `loss_scale` (fp16's loss scale), instead of 1">,
  ];
}

def DsOptimizer : Pass<"ds-optimizer", "mlir::ModuleOp"> {
  let summary = "Build the training step: gradient accumulation, clipping and "
                "the optimizer update";
  let description = [{
    Replaces the forward function `@F` and its gradient function `@F_grad`
    (from ds-autodiff) by the two functions of a training step:

    `@micro_step` runs forward and backward on one micro-batch and adds the
    gradients into persistent accumulators (`ds.state = #ds.state<accumulator, param = "<name>">`);
    with one micro-batch per step the gradients are written into them
    directly. Its only output is the loss.

    `@optimizer_step(lr, step)` takes the global gradient norm of the
    averaged gradients (output `grad_norm`), scales them by
    1 / accumulation and, when `clip` > 0, by
    min(1, clip / (norm + 1e-6)) as torch.nn.utils.clip_grad_norm_ does,
    updates every trainable parameter with the optimizer (torch.optim
    semantics: AdamW, Adam with L2 weight decay, SGD with momentum and
    Nesterov, Lion) and its states (`ds.state = #ds.state<optimizer,
    role = "exp_avg", param = "<name>">`, ...),
    and resets the accumulators.

    Updated parameters and states are results tied to their arguments
    (`ds.updates`), so the memory planner writes them in place. The module
    gets `ds.train`, the training recipe: the optimizer and its
    hyper-parameters, the accumulation, the learning-rate schedule and the
    batch sizes, which the code generator hands to the runtime.
  }];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"main\"",
           "The forward function (its gradient function is @<function>_grad)">,
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "adamw, adam (L2 weight decay), sgd or lion">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "Adam/Lion beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "Adam/Lion beta2">,
    Option<"epsilon", "epsilon", "double", /*default=*/"1e-8", "Adam epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.01",
           "Weight decay">,
    Option<"momentum", "momentum", "double", /*default=*/"0.0",
           "SGD momentum">,
    Option<"dampening", "dampening", "double", /*default=*/"0.0",
           "SGD dampening">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false",
           "SGD Nesterov momentum">,
    Option<"clip", "clip", "double", /*default=*/"0.0",
           "Global gradient-norm clipping threshold (0: off)">,
    Option<"accumulation", "accumulation", "int64_t", /*default=*/"1",
           "Micro-batches per optimizer step">,
    Option<"lossScaleInput", "loss-scale-input", "bool", /*default=*/"false",
           "The gradients are scaled by the loss scale: @optimizer_step "
           "takes it as a last input `loss_scale` and divides the norm and "
           "the gradients by it">,
    // fp16's loss scaler (DeepSpeed's fp16 keys), recorded in ds.train
    // with loss-scale-input for the runtime.
    Option<"staticLossScale", "static-loss-scale", "double",
           /*default=*/"0.0", "fp16.loss_scale: 0 dynamic, > 0 static">,
    Option<"initialScalePower", "initial-scale-power", "int64_t",
           /*default=*/"16", "fp16.initial_scale_power">,
    Option<"lossScaleWindow", "loss-scale-window", "int64_t",
           /*default=*/"1000", "fp16.loss_scale_window">,
    Option<"hysteresis", "hysteresis", "int64_t", /*default=*/"2",
           "fp16.hysteresis">,
    Option<"consecutiveHysteresis", "consecutive-hysteresis", "bool",
           /*default=*/"false", "fp16.consecutive_hysteresis">,
    Option<"minLossScale", "min-loss-scale", "double", /*default=*/"1.0",
           "fp16.min_loss_scale">,
    // The rest of the recipe: nothing here changes the step's ops; the
    // runtime schedules the learning rate and logs by it.
    Option<"optimizerName", "optimizer-name", "std::string",
           /*default=*/"\"\"",
           "The optimizer as the config spells it, for the program's log "
           "(default: AdamW, Adam, SGD or Lion)">,
    Option<"lr", "lr", "double", /*default=*/"1e-3",
           "Base learning rate">,
    Option<"lrSchedule", "lr-schedule", "std::string",
           /*default=*/"\"Constant\"",
           "Learning-rate schedule: Constant, WarmupLR, WarmupDecayLR or "
           "WarmupCosineLR (DeepSpeed's)">,
    Option<"warmupMinLr", "warmup-min-lr", "double", /*default=*/"0.0",
           "WarmupLR/WarmupDecayLR: learning rate at step 0">,
    Option<"warmupMaxLr", "warmup-max-lr", "double", /*default=*/"1e-3",
           "WarmupLR/WarmupDecayLR: learning rate after the warm-up">,
    Option<"warmupNumSteps", "warmup-num-steps", "int64_t",
           /*default=*/"1000", "Steps of the warm-up">,
    Option<"totalNumSteps", "total-num-steps", "int64_t", /*default=*/"0",
           "WarmupDecayLR/WarmupCosineLR: steps of the whole schedule">,
    Option<"warmupLinear", "warmup-linear", "bool", /*default=*/"false",
           "Linear warm-up (DeepSpeed's warmup_type linear) instead of log">,
    Option<"warmupMinRatio", "warmup-min-ratio", "double",
           /*default=*/"0.0", "WarmupCosineLR: starting ratio of the lr">,
    Option<"cosMinRatio", "cos-min-ratio", "double", /*default=*/"1e-4",
           "WarmupCosineLR: final ratio of the lr">,
    Option<"stepsPerPrint", "steps-per-print", "int64_t", /*default=*/"1",
           "Optimizer steps between two lines of the program's log">,
    Option<"microBatch", "micro-batch", "int64_t", /*default=*/"0",
           "Samples per micro-batch and rank (recorded when > 0)">,
    Option<"trainBatch", "train-batch", "int64_t", /*default=*/"0",
           "Samples per optimizer step over all ranks (recorded when > 0)">,
  ];
}

def DsTensorParallel : Pass<"ds-tensor-parallel", "mlir::ModuleOp"> {
  let summary = "Megatron's tensor parallelism over the grid's tp axis, "
                "found from the ops' sharding rules";
  let description = [{
    Runs on the forward @main before ds-autodiff and makes it the program of
    one of `size` tensor-parallel ranks. Every group of matmuls that read
    the same replicated activation with a parameter as the other operand is
    tried as a column-parallel layer: the parameters are split along their
    output axis (in blocks when the result is split into equal parts, as a
    fused Q/K/V projection is), the split is carried forward through each
    op's ShardingRuleOpInterface (heads through reshape and transpose,
    attention's batched products, softmax along the unsplit axis, the
    elementwise ops with their bias parameters split alike) until a matmul
    contracts it with a parameter split along its input axis (row
    parallel), whose partial sum a `shard.all_reduce` over tp completes
    (Megatron's g). The replicated activation entering the region goes
    through `ds.tp_copy` (Megatron's f), whose derivative is the one
    all-reduce of the backward. A region that reaches an op without a rule
    for its split, or the function's results, stays replicated (a warning
    names the parameter and the op); one whose only obstacle is a size the
    ranks do not divide (heads, widths) is an error naming the op and the
    sizes. Sharded parameters become arguments of their shard's type with
    `ds.tp_split`; the module gets the grid `shard.grid @grid` with axes
    (dp, tp), tp fastest. See docs/tensor-parallel.md.
  }];
  let options = [
    Option<"size", "size", "int64_t", /*default=*/"1",
           "Ranks of the tensor-parallel axis">,
    Option<"dp", "dp", "int64_t", /*default=*/"1",
           "Ranks of the data-parallel axis (the grid's other axis)">,
    Option<"sequenceParallel", "sequence-parallel", "bool",
           /*default=*/"false",
           "Megatron's sequence parallelism: the activations between a "
           "row-parallel product and the next column-parallel one split "
           "along the sequence, each all-reduce an all-gather and a "
           "reduce-scatter">,
  ];
  let dependentDialects = ["mlir::shard::ShardDialect"];
}

def DsZero : Pass<"ds-zero", "mlir::ModuleOp"> {
  let summary = "Data parallelism over the grid's dp axis with ZeRO stages "
                "0-3";
  let description = [{
    Makes the training step of ds-optimizer an SPMD program over a device
    grid `shard.grid @grid(shape = dp)` (`ds.axes = ["dp"]`): every rank
    trains on its own micro-batches and the gradients are averaged over the
    ranks, so N ranks of k micro-batches step exactly like one rank of N k.
    Collectives are the shard dialect's `all_reduce`, `reduce_scatter` and
    `all_gather` (and `all_slice`, a rank's slice without communication), on
    ZeRO's flat partition: a tensor of n elements is flattened and
    zero-padded (`ds.flat_pad`) to dp * ceil(n / dp) elements and rank r owns
    the r-th of dp equal slices.

    stage 0: the accumulators are all-reduced (average) in @optimizer_step.
    stage 1: the optimizer states are shards; @optimizer_step reduce-scatters
    the accumulators, takes the norm from the shards (one all-reduce of a
    scalar), updates the rank's slice of every parameter and all-gathers it.
    stage 2: the accumulators are shards too; @micro_step reduce-scatters
    every gradient right after backward computes it.
    stage 3: trained parameters with at least `param-persistence-threshold`
    elements are shards at rest (`ds.sharded` holds the whole type);
    @micro_step all-gathers each before its first forward use and again
    before its first backward use, and each gathered copy is freed after its
    last use. Gradients are averaged in buckets of `reduce-bucket-size`
    elements (ds.all_reduce_bucket, ds.reduce_scatter_bucket; in stages 2
    and 3 a bucket goes as soon as backward has computed its last
    gradient), updated parameters gathered in buckets of
    `allgather-bucket-size` (ds.all_gather_bucket), and stage 3 gathers
    ahead of use within `prefetch-bucket-size` elements. Collectives run
    asynchronously on the communication stream (see ds-plan-memory and the
    code generator). The module records `ds.zero = {stage, dp,
    param_persistence_threshold}`; with dp = 1 nothing else changes.
  }];
  let options = [
    Option<"stage", "stage", "int64_t", /*default=*/"0",
           "ZeRO stage: 0 (data parallel), 1, 2 or 3">,
    Option<"dp", "dp", "int64_t", /*default=*/"1",
           "Ranks of the data-parallel axis">,
    Option<"persistenceThreshold", "param-persistence-threshold", "int64_t",
           /*default=*/"100000",
           "Stage 3 keeps trained parameters with fewer elements whole on "
           "every rank (DeepSpeed's stage3_param_persistence_threshold)">,
    Option<"reduceBucketSize", "reduce-bucket-size", "int64_t",
           /*default=*/"500000000",
           "Elements of gradients averaged by one collective "
           "(reduce_bucket_size)">,
    Option<"allgatherBucketSize", "allgather-bucket-size", "int64_t",
           /*default=*/"500000000",
           "Elements of updated parameters gathered by one collective in "
           "stages 1 and 2 (allgather_bucket_size)">,
    Option<"prefetchBucketSize", "prefetch-bucket-size", "int64_t",
           /*default=*/"50000000",
           "Stage 3 gathers a parameter as early as the parameters used "
           "before it, back to this many elements, allow "
           "(stage3_prefetch_bucket_size)">,
  ];
  let dependentDialects = ["mlir::shard::ShardDialect"];
}

def DsPipeline : Pass<"ds-pipeline", "mlir::ModuleOp"> {
  let summary = "Cut the training step into balanced pipeline stages";
  let description = [{
    The compile-time half of pipeline parallelism. Runs after ds-optimizer
    and before ds-zero on `@micro_step` (forward then backward of one
    micro-batch; its result 0 is the loss). The ops up to the one defining
    the loss are the forward pass, the rest the backward pass.

    The forward ops (constants aside: they belong to every stage that uses
    them) are cut into `stages * chunks` contiguous segments of the op order,
    the virtual stages; virtual stage s runs on rank s mod `stages`
    (Megatron's placement). A cut never separates ops imported from one ONNX
    node (they share a location). The cuts minimise the largest stage cost
    (the classic linear partition, solved exactly by dynamic programming);
    the cost of an op is its `CostOpInterface` FLOPs with `balance=flops`,
    the bytes of the parameters it is the first to read with
    `balance=parameters`, or 1 with `balance=uniform` (ops without the
    interface cost 0). Among cuts with the same largest cost, the smaller
    largest stage by bytes accessed wins. Fewer pieces than virtual stages
    is an error.

    A backward op belongs to the stage of the forward op it differentiates:
    ds-autodiff gives every op it differentiates an id (`ds.forward_id`)
    and every op of its derivative, the gradient sums of values used
    several times included, the same id (`ds.grad_of`); clones keep it,
    whatever their location. Backward ops without one take the stage of
    their operands, else of their users.
    Every op gets `ds.stage = s`. A parameter read by forward ops of several
    stages (a tied embedding) gets a gradient part on each, summed across
    them; the module records which stages.

    The module gets `ds.pipeline` with the schedule (`stages`,
    `microbatches`, `schedule`, `chunks`), the partition and per virtual
    stage what the plan reports: forward, backward and weight-gradient
    FLOPs, parameter bytes, stashed activation bytes and bytes sent, the
    transfers between stages and the tied parameters. `microbatches` must
    equal the gradient accumulation of the training step; the schedule's
    own rules (interleaved needs chunks >= 2 and microbatches a multiple of
    stages) are checked as the DsPipeline library states them.
  }];
  let options = [
    Option<"stages", "stages", "int64_t", /*default=*/"1",
           "Pipeline stages (ranks of the pp axis)">,
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"1",
           "Micro-batches per optimizer step (the gradient accumulation)">,
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1f1b\"",
           "gpipe, 1f1b, interleaved or zb-h1">,
    Option<"chunks", "chunks", "int64_t", /*default=*/"0",
           "Model chunks per rank (0: 2 for interleaved, else 1)">,
    Option<"balance", "balance", "std::string", /*default=*/"\"flops\"",
           "What the stages balance: flops, parameters or uniform (ops)">,
  ];
}

def DsPipelineSplit : Pass<"ds-pipeline-split", "mlir::ModuleOp"> {
  let summary = "Make the program of one pipeline rank from the cut training step";
  let description = [{
    The second half of pipeline parallelism, after ds-pipeline and before
    ds-zero: the module becomes the SPMD program of pipeline rank `rank`
    over `shard.grid @grid(shape = stages x dp) {ds.axes = ["pp", "dp"]}`,
    or, for a step ds-tensor-parallel sharded (its `@grid` is (dp, tp)),
    over (pp, dp, tp) with the tp collectives' grid axes renumbered.

    For each virtual stage s the rank holds (s = c * stages + rank),
    `@micro_step`'s ops of stage s become `@fwd_s` (its forward ops) and
    `@bwd_s` (its backward ops); with the zb-h1 schedule `@bwd_s` is
    `@bwdi_s` (the ops the gradient sent to stage s - 1 depends on) and
    `@bwdw_s` (the weight gradients). Values carry their id (`ds.input` /
    `ds.output`) and a role (`ds.role`) saying where they come from: a
    forward value read by a later stage is sent stage by stage
    (`#ds.role<send>` results, `#ds.role<recv>` arguments) through every
    stage in between; a gradient likewise backwards; a forward value the
    stage's backward reads is stashed (`#ds.role<stash>`), but for a weight
    view (WeightViews.h: parameters and constants through data movement
    alone, such as the padded LM head), whose ops the backward recomputes;
    zb-h1's weight part gets what it needs from the input part as
    `#ds.role<wstash>`. Constants are cloned where they are used.

    A parameter read by several stages has its gradient contributions
    summed per stage into each stage's own accumulator; the runtime sums
    the accumulators of the ranks that share it before `@optimizer_step`
    (`tied` in `ds.pipeline_rank`, each naming the accumulator's
    `#ds.state`). `@optimizer_step` keeps the rank's
    parameters; its global gradient norm sums, over pp, each rank's sum of
    squares of the accumulators it owns (a shared one counts on its lowest
    rank).

    `ds.pipeline_rank` on the module records the rank's stages and
    functions, its action list (from the schedule of `ds.pipeline`) and,
    per buffer pool of the runtime, the number of slots the action list
    needs at most.
  }];
  let options = [
    Option<"rank", "rank", "int64_t", /*default=*/"0",
           "The pipeline rank (pp coordinate) whose program to make">,
    Option<"dp", "dp", "int64_t", /*default=*/"1",
           "Ranks of the data-parallel axis of the grid">,
  ];
  let dependentDialects = ["mlir::shard::ShardDialect"];
}

def DsPipelineRanks : Pass<"ds-pipeline-ranks", "mlir::ModuleOp"> {
  let summary = "Make the program of every pipeline rank, each a nested module";
  let description = [{
    Runs ds-pipeline-split once per pipeline rank of the cut training step
    (ds-pipeline's `ds.pipeline`) and appends the rank programs to the
    module: `builtin.module @pp<r>`, the program of pp coordinate r, in
    rank order, each with the module's attributes. The cut step itself
    stays in the outer module, with its `ds.stage` on every op and
    `ds.pipeline`, which the plan and the trace read; it is not a program.
    Passes that run per rank program nest on `builtin.module`, as ds-train
    does: `builtin.module(ds-pipeline-ranks{dp=2}, builtin.module(
    ds-zero{dp=2}, func.func(ds-fuse-elementwise), ds-plan-memory))`.
  }];
  let options = [
    Option<"dp", "dp", "int64_t", /*default=*/"1",
           "Ranks of the data-parallel axis of the grid">,
  ];
  let dependentDialects = ["mlir::shard::ShardDialect"];
}

def DsOffload : Pass<"ds-offload", "mlir::ModuleOp"> {
  let summary = "ZeRO-Offload: optimizer states and their update on the host "
                "(or in files)";
  let description = [{
    Places every optimizer state (each `ds.state` that is not a gradient
    accumulator: the optimizer's moments, and 16-bit training's master
    weights) in pinned host memory (`device=cpu`) or in the file-backed
    NVMe space (`device=nvme`): its argument gets `ds.space`. After ds-zero
    these are each rank's shards. Every optimizer update
    (OptimizerOpInterface) that reads an offloaded state runs on the host
    (`ds.space = #ds.space<host>` on the op): the operands it needs from the
    device (the gradient, the parameter shard, the learning rate and step)
    are copied to the host by `ds.transfer` ops issued right after each
    value is computed, so they overlap the rest of the step, and the
    updated parameter is copied back to the device right after the update,
    before its next use. With `device=nvme` each state is read from its
    file into a host buffer one update ahead (read-ahead) and written back
    right after its update (write-behind).

    With `param-device` cpu or nvme (ZeRO stage 3 only) the parameter
    shards that ZeRO-3 partitions (trained parameters of at least
    `param_persistence_threshold` elements) live in that space too: each
    device op that reads one gets its own device copy, fetched by a
    `ds.transfer` (from the file through a host buffer with nvme) issued
    ahead of it so that at most `param-buffer-count` fetched shards are in
    flight, and freed after that op; an updated shard the optimizer step
    returns goes back to the parameter's space. With nvme, the first
    shards in parameter order (the order parameters first appear among the
    module's function arguments) whose elements add up to at most
    `param-max-in-cpu` stay in host memory instead of the file
    (DeepSpeed's max_in_cpu), and every shard left in the file must have at
    most `param-buffer-size` elements, the size of the host buffer it is
    read into (DeepSpeed's buffer_size; an error names the parameter
    otherwise). Those host buffers are DeepSpeed's pool of
    `param-buffer-count` buffers: the k-th read from the file, in schedule
    order, goes into buffer k mod `param-buffer-count` (its
    `dsopt.param_buffer`), after the op that read that buffer's previous
    shard; ds-plan-memory gives each buffer a fixed offset in the host
    arena. An op reading more file shards at once than the pool has
    buffers is an error.

    With `ratio` below 1 only part of the states go (partial offload, as
    DeepSpeed's ZeRO-3 assigns its sub-groups): the states of a parameter
    move together, and the last parameters in argument order are the
    offloaded ones; the others' states and updates stay on the device.
  }];
  let options = [
    Option<"device", "device", "std::string", /*default=*/"\"cpu\"",
           "Where the optimizer states live: none (the device), cpu "
           "(pinned host memory) or nvme (files)">,
    Option<"paramDevice", "param-device", "std::string",
           /*default=*/"\"none\"",
           "Where ZeRO-3's parameter shards live (offload_param.device): "
           "none (the device), cpu (pinned host memory) or nvme (files)">,
    Option<"paramBufferCount", "param-buffer-count", "int64_t",
           /*default=*/"5",
           "Parameter shards fetched to the device ahead of their use at "
           "most (offload_param.buffer_count)">,
    Option<"paramBufferSize", "param-buffer-size", "int64_t",
           /*default=*/"100000000",
           "Elements of each buffer a parameter shard is read into from "
           "the file space (offload_param.buffer_size): with param-device "
           "nvme every shard in the file must fit in one">,
    Option<"paramPinMemory", "param-pin-memory", "bool", /*default=*/"false",
           "Whether the host memory of offloaded parameters is pinned "
           "(offload_param.pin_memory); with the optimizer offloaded too "
           "the host arena is pinned either way">,
    Option<"paramMaxInCpu", "param-max-in-cpu", "int64_t",
           /*default=*/"1000000000",
           "With param-device nvme, the parameter elements kept in host "
           "memory instead of the file (offload_param.max_in_cpu): the "
           "first shards in parameter order whose elements fit">,
    Option<"ratio", "ratio", "double", /*default=*/"1.0",
           "The offloaded fraction of the parameters with optimizer states "
           "(DeepSpeed's offload_optimizer.ratio): of N such parameters, in "
           "the order their states first appear among the module's "
           "function arguments, the first floor((1 - ratio) * N) keep "
           "their states and update on the device">,
  ];
}

def DsGroupOptimizer : Pass<"ds-group-optimizer", "mlir::func::FuncOp"> {
  let summary = "Group a step's ds.adamw updates into ds.adamw_multi ops";
  let description = [{
    Replaces the `ds.adamw` updates of one block that share `lr`, `step`,
    `grad_scale`, every attribute (betas, epsilon, weight decay, decoupled,
    `ds.space`), the parameters' element type and the gradients' element
    type by one `ds.adamw_multi`: one kernel call over every tensor of the
    group (one parallel region on the cpu, one multi-tensor launch on
    cuda) instead of one per parameter. Each tensor is updated with the
    same arithmetic, so training gives the same bits.

    The group's op takes the place of its last update; the ops between
    its updates that use their results (directly or not) move after it,
    in their order. An update, or an op reading several groups, that reads
    a group's results closes that group first. Updates whose states stream
    from the file space (NVMe offload) are not grouped. A group of one
    stays a `ds.adamw`. Runs after every pass that rewrites updates one
    parameter at a time (ds-zero, ds-offload), just before memory planning.
  }];
}

def DsFuseLossGrad : Pass<"ds-fuse-loss-grad", "mlir::func::FuncOp"> {
  let summary = "Compute the loss and its scores' gradient in one op";
  let description = [{
    Replaces a `ds.softmax_cross_entropy` and the
    `ds.softmax_cross_entropy_grad` that reads its log-probabilities with
    one `ds.softmax_cross_entropy_with_grad` at the loss's place, which
    reads the scores once and writes the loss and the scores' gradient; the
    log-probabilities are never stored. It applies when both ops are in the
    same block, with the same labels, weights, reduction and ignore_index,
    the gradient is the log-probabilities' only reader, and the gradient's
    seed (`loss_grad`: autodiff's constant 1, or the loss-scale input) is
    available at the loss: defined before it, or by a side-effect-free op
    whose operands are, which then moves up to the loss. Otherwise nothing
    changes. Runs after autodiff, precision, the pipeline cut and ZeRO, on
    cpu and cuda programs alike, before memory planning.
  }];
}

def DsPadVocab : Pass<"ds-pad-vocab", "mlir::func::FuncOp"> {
  let summary = "Pad a language model's head to a vocabulary that is a multiple of 8";
  let description = [{
    A 16-bit LM head whose vocabulary V is not a multiple of `multiple`
    (GPT-2's 50257): `ds.matmul %x, %w {transpose_rhs}` (w [V, d]), at most
    a reshape that keeps V last, a `ds.softmax_cross_entropy_with_grad`
    without class weights, and the scores' gradient read (through such
    reshapes) only by the input gradient `matmul(g, w)` and the weight
    gradient `matmul(gᵀ, h)`. The ops are rebuilt on V8 = V rounded up:
    w padded with zero rows (`ds.concat` with a `ds.fill`), the head a
    `ds.matmul_bias` whose bias is 0 for the V classes and -65504 for the
    padding ones (their softmax underflows to 0 and their gradient is 0),
    the loss and the gradients on [.., V8], the weight gradient sliced back
    to [V, d]. Loss, dx and dw are the unpadded head's; every leading
    dimension of the three products is then a multiple of 8, which
    cuBLASLt's fast kernels need. The labels must come from an input
    (through reshapes): its `ds.index_range` records [0, V) (and the
    ignore_index), which the runners check before step 1, since the loss's
    own check now allows V8 classes. Anything else is left as it is.
    dsopt runs it for `--target cuda` (`--no-pad-vocab` leaves it out),
    after ds-fuse-loss-grad.
  }];
  let options = [
    Option<"multiple", "multiple", "int64_t", "8",
           "Round the vocabulary up to a multiple of this">
  ];
}

def DsFuseParamCopy : Pass<"ds-fuse-param-copy", "mlir::func::FuncOp"> {
  let summary = "Let optimizer updates write the 16-bit parameter copy";
  let description = [{
    Mixed precision's 16-bit working copy is a `ds.cast` (f32 to bf16 or
    f16) of the updated master (ds-precision; on the host under
    ZeRO-Offload, ds-offload). When such a cast is in the update's block
    after it, runs where the update runs (`ds.space`), and no other op
    reads the updated master between the two, the update writes the copy
    itself, in the same loop over the elements: `ds.adamw`, `ds.sgd` and
    `ds.lion` get `copy_type` and a `param_copy` result, `ds.adamw_multi`
    n more results (only when every tensor of the group has such a cast).
    The cast is erased. The kernels round as `ds.cast` does, so training
    gives the same bits with one pass over the master instead of two.
    Runs after ds-group-optimizer, just before memory planning.
  }];
}

def DsPlanMemory : Pass<"ds-plan-memory", "mlir::ModuleOp"> {
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

    The functions of a module share one arena: persistent state
    (`ds.param` and `ds.state` arguments, keyed by name) has one slot at
    the bottom for all of them, and each function's other buffers are
    planned above it; the module's `ds.memory` is the largest plan. A
    result tied to an argument (`ds.updates`) is computed straight into the
    argument's buffer when the argument is no longer read by then;
    otherwise it is copied there at the end.
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"64",
           "Byte alignment of every buffer">,
    Option<"inPlace", "in-place", "bool", /*default=*/"true",
           "Let elementwise kernels overwrite dying operands">
  ];
}

#endif // DSOPT_TRANSFORMS_PASSES_TD
