//===- DsPipelineAttrs.td - pipeline and device-grid attributes -*- tablegen -*-===//
//
// The typed annotations of pipeline parallelism and of the device grid:
//   ds.pipeline       #ds.pipeline<...>       (module, ds-pipeline)
//   ds.pipeline_rank  #ds.pipeline_rank<...>  (module, ds-pipeline-split,
//                                              pools placed by ds-plan-memory)
//   ds.pipeline_part  #ds.pipeline_part<...>  (function, ds-pipeline-split)
//   ds.axes           #ds.axes<[pp, dp]>      (shard.grid, buildDeviceGrid)
// Included from DsBase.td after Ds_Attr.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_DIALECT_DS_DSPIPELINEATTRS_TD
#define DSOPT_DIALECT_DS_DSPIPELINEATTRS_TD

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

// The axes of the device grid; outermost first on a shard.grid.
def Ds_GridAxis : I32EnumAttr<"GridAxis", "an axis of the device grid", [
  I32EnumAttrCase<"pp", 0>,
  I32EnumAttrCase<"dp", 1>,
  I32EnumAttrCase<"tp", 2>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}

// The schedules of include/dsopt/Pipeline/Schedule.h (ScheduleKind), in its
// order; the strings are the schedules' names on the command line.
def Ds_PipelineSchedule : I32EnumAttr<"PipelineSchedule",
    "a pipeline-parallel schedule", [
  I32EnumAttrCase<"gpipe", 0>,
  I32EnumAttrCase<"one_f_one_b", 1, "1f1b">,
  I32EnumAttrCase<"interleaved", 2>,
  I32EnumAttrCase<"zb_h1", 3, "zb-h1">
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}

def Ds_PipelineBalance : I32EnumAttr<"PipelineBalance",
    "what ds-pipeline balances across stages", [
  I32EnumAttrCase<"flops", 0>,
  I32EnumAttrCase<"parameters", 1>,
  I32EnumAttrCase<"uniform", 2>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}

def Ds_PipelineTransferKind : I32EnumAttr<"PipelineTransferKind",
    "what crosses a pipeline cut", [
  I32EnumAttrCase<"activation", 0>,
  I32EnumAttrCase<"gradient", 1>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}

// Which part of a virtual stage a function of a pipeline rank is.
def Ds_PipelinePart : I32EnumAttr<"PipelinePart",
    "a part of a pipeline rank's program", [
  I32EnumAttrCase<"forward", 0>,
  I32EnumAttrCase<"backward", 1>,
  I32EnumAttrCase<"backward_input", 2>,
  I32EnumAttrCase<"backward_weight", 3>,
  I32EnumAttrCase<"optimizer", 4>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}

// The actions of include/dsopt/Pipeline/Schedule.h (ActionKind), with its
// values: the runtime receives them as integers.
def Ds_PipelineActionKind : I32EnumAttr<"PipelineActionKind",
    "a step of a pipeline rank's schedule", [
  I32EnumAttrCase<"forward", 0>,
  I32EnumAttrCase<"backward", 1>,
  I32EnumAttrCase<"backward_input", 2>,
  I32EnumAttrCase<"backward_weight", 3>,
  I32EnumAttrCase<"send_activation", 4>,
  I32EnumAttrCase<"recv_activation", 5>,
  I32EnumAttrCase<"send_gradient", 6>,
  I32EnumAttrCase<"recv_gradient", 7>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}

// The buffer pools of a pipeline rank: what it holds between actions. The
// names are those the runtime's dsrt::add_pipeline_pool receives.
def Ds_PipelinePoolKind : I32EnumAttr<"PipelinePoolKind",
    "a buffer pool of a pipeline rank", [
  I32EnumAttrCase<"act_in", 0>,
  I32EnumAttrCase<"act_out", 1>,
  I32EnumAttrCase<"grad_in", 2>,
  I32EnumAttrCase<"grad_out", 3>,
  I32EnumAttrCase<"stash", 4>,
  I32EnumAttrCase<"wstash", 5>,
  I32EnumAttrCase<"tied", 6>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::dsopt::ds";
}

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

// A list of `elem` in square brackets, so that it can be one field of
// `struct(params)`: `[#ds.pipeline_pool<...>, #ds.pipeline_pool<...>]`.
class Ds_ListParameter<string elem, string desc = "">
    : ArrayRefParameter<elem, desc> {
  let parser = [{[&]() -> ::mlir::FailureOr<::llvm::SmallVector<}] # elem # [{>> {
    ::llvm::SmallVector<}] # elem # [{> elements;
    if (::mlir::failed($_parser.parseCommaSeparatedList(
            ::mlir::AsmParser::Delimiter::Square, [&]() -> ::mlir::ParseResult {
              auto element = ::mlir::FieldParser<}] # elem # [{>::parse($_parser);
              if (::mlir::failed(element))
                return ::mlir::failure();
              elements.push_back(std::move(*element));
              return ::mlir::success();
            })))
      return ::mlir::failure();
    return elements;
  }()}];
  let printer = [{
    $_printer << '[';
    ::llvm::interleaveComma($_self, $_printer);
    $_printer << ']';
  }];
}

// An enum whose strings are not all keywords ("1f1b"): printed as a keyword
// where it is one, else as a string.
class Ds_QuotedEnumParameter<EnumInfo info> : EnumParameter<info> {
  let printer = "$_printer.printKeywordOrString(" # info.cppNamespace #
                "::" # info.symbolToStringFnName # "($_self))";
}

//===----------------------------------------------------------------------===//
// ds.pipeline: the cut and the schedule (ds-pipeline)
//===----------------------------------------------------------------------===//

def Ds_PipelineStageAttr : Ds_Attr<"PipelineStage", "pipeline_stage"> {
  let summary = "what ds-pipeline measured of one virtual stage";
  let description = [{
    One entry of `#ds.pipeline`'s `virtual_stages`, for virtual stage
    `stage`: its forward ops, the FLOPs of its forward, its backward and the
    weight-gradient part of that backward, the bytes its forward ops access,
    the bytes of the parameters it reads, of the activations its backward
    reads (stashed per micro-batch) and of what it sends to other stages.
  }];
  let parameters = (ins "int64_t":$stage, "int64_t":$forward_ops,
                    "int64_t":$flops_forward, "int64_t":$flops_backward,
                    "int64_t":$flops_weight, "int64_t":$bytes_forward,
                    "int64_t":$param_bytes, "int64_t":$activation_bytes,
                    "int64_t":$send_bytes);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Ds_PipelineTransferAttr : Ds_Attr<"PipelineTransfer", "pipeline_transfer"> {
  let summary = "the values one stage sends another per micro-batch";
  let description = [{
    `#ds.pipeline_transfer<from = 0, to = 1, kind = activation, bytes = 4096,
    values = 1>`: `values` values of `bytes` bytes in all, computed on
    virtual stage `from` and read on `to` (forward activations, or
    gradients going back), once per micro-batch.
  }];
  let parameters = (ins "int64_t":$from, "int64_t":$to,
                    EnumParameter<Ds_PipelineTransferKind>:$kind,
                    "int64_t":$bytes, "int64_t":$values);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Ds_PipelineTiedAttr : Ds_Attr<"PipelineTied", "pipeline_tied"> {
  let summary = "a parameter read by several virtual stages";
  let description = [{
    `#ds.pipeline_tied<name = "wte", stages = [0, 3]>`: the parameter
    `name` (its ds.param name) is read on each of `stages` (ascending, at
    least two): a tied embedding.
  }];
  let parameters = (ins StringRefParameter<"parameter name">:$name,
                    Ds_ListParameter<"int64_t">:$stages);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Ds_PipelineAttr : Ds_Attr<"Pipeline", "pipeline"> {
  let summary = "the pipeline cut and schedule of a training step";
  let description = [{
    Set on the module by `ds-pipeline` (`ds.pipeline`): `stages` pipeline
    ranks (p), `microbatches` per step (m), the `schedule`, `chunks` model
    chunks per rank (v; more than one only for `interleaved`), what the
    partition balanced, the facts of each of the p * v virtual stages (in
    stage order), the transfers between stages, the parameters several
    stages read, and the table of the forward ops the partition cut: one
    entry per op in each of `op_names`, `op_nodes` (the ONNX node),
    `op_flops`, `op_bytes`, `op_stages` and `op_cut_before`.
  }];
  let parameters = (ins
    "int64_t":$stages, "int64_t":$microbatches,
    Ds_QuotedEnumParameter<Ds_PipelineSchedule>:$schedule,
    "int64_t":$chunks,
    EnumParameter<Ds_PipelineBalance>:$balance,
    Ds_ListParameter<"::dsopt::ds::PipelineStageAttr">:$virtual_stages,
    Ds_ListParameter<"::dsopt::ds::PipelineTransferAttr">:$transfers,
    Ds_ListParameter<"::dsopt::ds::PipelineTiedAttr">:$tied,
    "::mlir::ArrayAttr":$op_names, "::mlir::ArrayAttr":$op_nodes,
    "::mlir::DenseI64ArrayAttr":$op_flops,
    "::mlir::DenseI64ArrayAttr":$op_bytes,
    "::mlir::DenseI64ArrayAttr":$op_stages,
    "::mlir::DenseBoolArrayAttr":$op_cut_before);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// p * v.
    int64_t getNumVirtualStages() const { return getStages() * getChunks(); }
  }];
}

//===----------------------------------------------------------------------===//
// ds.pipeline_rank: one rank's program (ds-pipeline-split, ds-plan-memory)
//===----------------------------------------------------------------------===//

def Ds_PipelineRankStageAttr : Ds_Attr<"PipelineRankStage", "rank_stage"> {
  let summary = "a virtual stage of a pipeline rank and its functions";
  let description = [{
    `#ds.rank_stage<stage = 2, forward = @fwd_2, backward = @bwd_2>`: the
    functions of the rank that run virtual stage `stage`: its forward, and
    either its whole backward or, with a split backward (zb-h1), its
    `backward_input` and `backward_weight` parts.
  }];
  let parameters = (ins
    "int64_t":$stage,
    OptionalParameter<"::mlir::FlatSymbolRefAttr">:$forward,
    OptionalParameter<"::mlir::FlatSymbolRefAttr">:$backward,
    OptionalParameter<"::mlir::FlatSymbolRefAttr">:$backward_input,
    OptionalParameter<"::mlir::FlatSymbolRefAttr">:$backward_weight);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The name of a function of the stage ("" when it has none).
    static ::llvm::StringRef nameOf(::mlir::FlatSymbolRefAttr function) {
      return function ? function.getValue() : ::llvm::StringRef();
    }
    /// The function that computes the gradient of the stage's input: the
    /// whole backward or its input part.
    ::mlir::FlatSymbolRefAttr getInputBackward() const {
      return getBackward() ? getBackward() : getBackwardInput();
    }
  }];
}

def Ds_PipelineActionAttr : Ds_Attr<"PipelineAction", "pipeline_action"> {
  let summary = "one step of a pipeline rank's schedule";
  let description = [{
    `#ds.pipeline_action<kind = send_activation, microbatch = 3, chunk = 0,
    peer = 1>`: what the rank does (as pipeline::Action): compute a part of
    its stage of chunk `chunk` (stage chunk * p + rank) for micro-batch
    `microbatch`, or send or receive that stage's activation or gradient to
    or from rank `peer`. `peer` is -1 (left out of the text) for compute.
  }];
  let parameters = (ins EnumParameter<Ds_PipelineActionKind>:$kind,
                    "int64_t":$microbatch, "int64_t":$chunk,
                    DefaultValuedParameter<"int64_t", "-1">:$peer);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// A send or a receive.
    bool isTransfer() const;
  }];
}

def Ds_PipelinePoolAttr : Ds_Attr<"PipelinePool", "pipeline_pool"> {
  let summary = "a buffer pool of a pipeline rank";
  let description = [{
    `#ds.pipeline_pool<kind = stash, stage = 0, slots = 3>`: the rank holds
    at most `slots` values of kind `kind` of virtual stage `stage` at once
    (stage -1 for `tied`, the receive buffer of the shared accumulators).
    `ds-plan-memory` adds each slot's bytes and the pool's offset in the
    arena: `slot_bytes = 4096, offset = 65536`.
  }];
  let parameters = (ins EnumParameter<Ds_PipelinePoolKind>:$kind,
                    "int64_t":$stage, "int64_t":$slots,
                    OptionalParameter<"std::optional<int64_t>">:$slot_bytes,
                    OptionalParameter<"std::optional<int64_t>">:$offset);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Ds_PipelineRankTiedAttr : Ds_Attr<"PipelineRankTied", "rank_tied"> {
  let summary = "a gradient accumulator several pipeline ranks hold";
  let description = [{
    `#ds.rank_tied<state = #ds.state<accumulator, param = "wte">, ranks =
    [0, 1]>`: each of `ranks` (ascending, at least two) accumulates its own
    part of the gradient in the accumulator `state`; the runtime sums the
    copies before the update.
  }];
  let parameters = (ins "::dsopt::ds::StateAttr":$state,
                    Ds_ListParameter<"int64_t">:$ranks);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Ds_PipelineRankAttr : Ds_Attr<"PipelineRank", "pipeline_rank"> {
  let summary = "the pipeline rank a module is the program of";
  let description = [{
    Set on the module by `ds-pipeline-split` (`ds.pipeline_rank`): pipeline
    rank `rank` of `stages` (p), with `chunks` virtual stages (v),
    `microbatches` per step, `dp` data-parallel replicas and the schedule;
    its virtual stages (rank, rank + p, ..., in that order) with their
    functions; its action list; its buffer pools; and the accumulators it
    shares with other ranks. `ds-plan-memory` places the pools and records
    where their buffers lie (`buffers_offset`, `buffers_bytes`).
  }];
  let parameters = (ins
    "int64_t":$rank, "int64_t":$stages, "int64_t":$chunks,
    "int64_t":$microbatches, "int64_t":$dp,
    Ds_QuotedEnumParameter<Ds_PipelineSchedule>:$schedule,
    Ds_ListParameter<"::dsopt::ds::PipelineRankStageAttr">:$virtual_stages,
    Ds_ListParameter<"::dsopt::ds::PipelineActionAttr">:$actions,
    Ds_ListParameter<"::dsopt::ds::PipelinePoolAttr">:$pools,
    Ds_ListParameter<"::dsopt::ds::PipelineRankTiedAttr">:$tied,
    OptionalParameter<"std::optional<int64_t>">:$buffers_offset,
    OptionalParameter<"std::optional<int64_t>">:$buffers_bytes);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The rank's virtual stage `stage`, or null.
    ::dsopt::ds::PipelineRankStageAttr lookupStage(int64_t stage) const;
  }];
}

//===----------------------------------------------------------------------===//
// ds.pipeline_part
//===----------------------------------------------------------------------===//

def Ds_PipelinePartAttr : Ds_Attr<"PipelinePart", "pipeline_part"> {
  let summary = "which part of which virtual stage a function is";
  let description = [{
    Set on each function of a pipeline rank by `ds-pipeline-split`
    (`ds.pipeline_part`): `#ds.pipeline_part<part = forward, stage = 1>`,
    or `#ds.pipeline_part<part = optimizer>` on the rank's
    @optimizer_step, which belongs to no stage.
  }];
  let parameters = (ins EnumParameter<Ds_PipelinePart>:$part,
                    DefaultValuedParameter<"int64_t", "-1">:$stage);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// ds.axes
//===----------------------------------------------------------------------===//

def Ds_GridAxesAttr : Ds_Attr<"GridAxes", "axes"> {
  let summary = "the names of a device grid's axes";
  let description = [{
    On a `shard.grid` (`ds.axes`): the axis of each of its dimensions,
    outermost first, each at most once: `#ds.axes<[pp, dp]>`.
  }];
  let parameters = (ins Ds_ListParameter<"::dsopt::ds::GridAxis">:$axes);
  let assemblyFormat = "`<` $axes `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    size_t size() const { return getAxes().size(); }
    /// The dimension of the grid that is `axis`, if it has one.
    std::optional<int64_t> find(::dsopt::ds::GridAxis axis) const;
  }];
}

#endif // DSOPT_DIALECT_DS_DSPIPELINEATTRS_TD
