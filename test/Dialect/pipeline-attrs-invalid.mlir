// The verifiers of the pipeline annotations (#ds.pipeline, #ds.pipeline_rank,
// #ds.pipeline_part, their list elements) and of the grid's #ds.axes: one
// case per rule.
// RUN: dsopt-opt %s -split-input-file -verify-diagnostics

// #ds.pipeline_stage: sizes are >= 0; the weight gradient is part of the backward.
// expected-error @+2 {{flops_forward must be >= 0, got -1}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = -1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// expected-error @+2 {{flops_weight (3) exceeds flops_backward (2)}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 3, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// #ds.pipeline_transfer: from one stage to another, at least one value.
// expected-error @+2 {{a transfer goes from one stage to another, not from stage 1 to itself}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [#ds.pipeline_transfer<from = 1, to = 1, kind = activation, bytes = 4, values = 1>], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// expected-error @+2 {{values must be >= 1, got 0}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [#ds.pipeline_transfer<from = 0, to = 1, kind = activation, bytes = 4, values = 0>], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// expected-error @+2 {{from must be >= 0, got -1}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [#ds.pipeline_transfer<from = -1, to = 1, kind = gradient, bytes = 4, values = 1>], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// #ds.pipeline_tied: a named parameter of two or more ascending stages.
// expected-error @+2 {{a tied parameter needs a name}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [#ds.pipeline_tied<name = "", stages = [0, 1]>], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// expected-error @+2 {{a tied parameter is read by at least two stages}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [#ds.pipeline_tied<name = "emb", stages = [0]>], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// expected-error @+2 {{stage must ascend without repeats}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [#ds.pipeline_tied<name = "emb", stages = [1, 0]>], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// expected-error @+2 {{stage -1 is outside [0, }}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [#ds.pipeline_tied<name = "emb", stages = [-1, 0]>], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// #ds.pipeline: positive sizes.
// expected-error @+1 {{stages must be >= 1, got 0}}
module attributes {ds.pipeline = #ds.pipeline<stages = 0, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// expected-error @+1 {{microbatches must be >= 1, got 0}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 0, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// expected-error @+1 {{chunks must be >= 1, got 0}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 0, balance = flops, virtual_stages = [], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// expected-error @+1 {{only the interleaved schedule has several chunks per rank, got 2 for 1f1b}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 2, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 2, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 3, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// One virtual stage per stage and chunk, in order.
// expected-error @+1 {{expected one virtual stage per stage and chunk (4), got 2}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = interleaved, chunks = 2, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// expected-error @+1 {{virtual stage 1 says it is stage 0}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// Transfers and tied parameters name stages of the pipeline.
// expected-error @+1 {{transfer from stage 0 to 2 names a stage outside [0, 2)}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [#ds.pipeline_transfer<from = 0, to = 2, kind = activation, bytes = 4, values = 1>], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// expected-error @+1 {{tied parameter 'emb' names stage 2, outside [0, 2)}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [#ds.pipeline_tied<name = "emb", stages = [0, 2]>], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// The op table has one entry per op in every column.
// expected-error @+1 {{op_flops has 2 entries; op_names has 1 (one per op)}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1, 2], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// expected-error @+1 {{op_cut_before has 0 entries; op_names has 1 (one per op)}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = []>} {}

// -----

// expected-error @+1 {{op_names and op_nodes hold strings}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = [1], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// expected-error @+1 {{op stage 2 is outside [0, 2)}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [2], op_cut_before = [true]>} {}

// -----

// expected-error @+1 {{op_flops and op_bytes must be >= 0}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [-1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// An unknown schedule.
// expected-error @+2 {{expected ::dsopt::ds::PipelineSchedule to be one of: gpipe, 1f1b, interleaved, zb-h1}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "pipedream", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {}

// -----

// The annotation is typed: the old dictionary is refused.
// expected-error @+1 {{'ds.pipeline' must be a #ds.pipeline on the module}}
module attributes {ds.pipeline = {stages = 2 : i64, microbatches = 2 : i64, schedule = "1f1b"}} {}

// -----

module {
  // expected-error @+1 {{'ds.pipeline' must be a #ds.pipeline on the module}}
  func.func @f() attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "1f1b", chunks = 1, balance = flops, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = ["ds.relu"], op_nodes = ["r"], op_flops = [1], op_bytes = [1], op_stages = [0], op_cut_before = [true]>} {
    return
  }
}

// -----

// #ds.rank_stage: a forward, and a whole backward or both parts of a split one.
// expected-error @+2 {{virtual stage 0 has no forward}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, backward = @bwd_0>], actions = [], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+2 {{virtual stage 0 has a whole backward and a split one}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0, backward_input = @bwd_0>], actions = [], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+2 {{virtual stage 0 needs a backward, or both backward_input and backward_weight}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward_input = @bwd_0>], actions = [], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+2 {{stage must be >= 0, got -1}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = -1, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// #ds.pipeline_action: a send or receive has a peer, a compute none.
// expected-error @+2 {{send_activation needs a peer rank}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [#ds.pipeline_action<kind = send_activation, microbatch = 0, chunk = 0>], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+2 {{forward has no peer rank}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [#ds.pipeline_action<kind = forward, microbatch = 0, chunk = 0, peer = 1>], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+2 {{microbatch must be >= 0, got -1}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [#ds.pipeline_action<kind = forward, microbatch = -1, chunk = 0>], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// #ds.pipeline_pool: slots >= 0; only the tied pool has no stage; placed pools have bytes and an offset.
// expected-error @+2 {{slots must be >= 0, got -1}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [#ds.pipeline_pool<kind = stash, stage = 0, slots = -1>], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+2 {{a stash pool belongs to a stage >= 0, got stage -1}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [#ds.pipeline_pool<kind = stash, stage = -1, slots = 1>], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+2 {{a tied pool belongs to no stage (stage -1), got stage 0}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [#ds.pipeline_pool<kind = tied, stage = 0, slots = 1>], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+2 {{a placed pool has both slot_bytes and offset}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [#ds.pipeline_pool<kind = act_in, stage = 0, slots = 1, slot_bytes = 64>], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+2 {{offset must be >= 0, got -64}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [#ds.pipeline_pool<kind = act_in, stage = 0, slots = 1, slot_bytes = 64, offset = -64>], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+2 {{expected ::dsopt::ds::PipelinePoolKind to be one of: act_in, act_out, grad_in, grad_out, stash, wstash, tied}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [#ds.pipeline_pool<kind = inbox, stage = 0, slots = 1>], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// #ds.rank_tied: a gradient accumulator of two or more ascending ranks.
// expected-error @+2 {{a shared state is a gradient accumulator, not #ds.state<optimizer, role = "exp_avg", param = "emb">}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = [#ds.rank_tied<state = #ds.state<optimizer, role = "exp_avg", param = "emb">, ranks = [0, 1]>]>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+2 {{a shared accumulator is held by at least two ranks}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = [#ds.rank_tied<state = #ds.state<accumulator, param = "emb">, ranks = [0]>]>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+2 {{rank must ascend without repeats}}
// expected-error @+1 {{failed to parse}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = [#ds.rank_tied<state = #ds.state<accumulator, param = "emb">, ranks = [1, 0]>]>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// #ds.pipeline_rank: positive sizes, rank < stages.
// expected-error @+1 {{dp must be >= 1, got 0}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 0, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+1 {{microbatches must be >= 1, got 0}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 0, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+1 {{rank 2 is outside [0, 2)}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 2, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 2, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+1 {{only the interleaved schedule has several chunks per rank, got 2 for gpipe}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 2, microbatches = 2, dp = 1, schedule = gpipe, virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>, #ds.rank_stage<stage = 2, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// Rank r holds stages r, r + p, ...: one per chunk.
// expected-error @+1 {{expected one virtual stage per chunk (2), got 1}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 2, microbatches = 2, dp = 1, schedule = interleaved, virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+1 {{chunk 0 of rank 0 is stage 0, not 1}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 1, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// zb-h1 splits every backward; the other schedules none.
// expected-error @+1 {{virtual stage 0 needs a split backward (zb-h1)}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "zb-h1", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+1 {{virtual stage 0 needs a whole backward}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward_input = @bwd_0, backward_weight = @bwd_0>], actions = [], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// Actions of the rank's chunks and micro-batches, transfers to another rank.
// expected-error @+1 {{action forward of micro-batch 2 and chunk 0 is outside the rank's 2 micro-batches and 1 chunks}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [#ds.pipeline_action<kind = forward, microbatch = 2, chunk = 0>], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+1 {{send_gradient to rank 0: the peer is another rank in [0, 2)}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [#ds.pipeline_action<kind = send_gradient, microbatch = 0, chunk = 0, peer = 0>], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+1 {{recv_activation to rank 2: the peer is another rank in [0, 2)}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [#ds.pipeline_action<kind = recv_activation, microbatch = 0, chunk = 0, peer = 2>], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+1 {{pool of stage 2 is outside [0, 2)}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [#ds.pipeline_pool<kind = stash, stage = 2, slots = 1>], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// Shared accumulators: of ranks of the pipeline, this one among them.
// expected-error @+1 {{shared accumulator 'grad:emb' names rank 2, outside [0, 2)}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = [#ds.rank_tied<state = #ds.state<accumulator, param = "emb">, ranks = [0, 2]>]>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+1 {{shared accumulator 'grad:emb' is not held by rank 0}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 3, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = [#ds.rank_tied<state = #ds.state<accumulator, param = "emb">, ranks = [1, 2]>]>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// expected-error @+1 {{placed pools have both buffers_offset and buffers_bytes}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward = @bwd_0>], actions = [], pools = [], tied = [], buffers_offset = 0>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

// The stages' functions are functions of the module.
// expected-error @+1 {{'ds.pipeline_rank': virtual stage 0 names @fwd_9, which is no function of the module}}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 2, dp = 1, schedule = "1f1b", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_9, backward = @bwd_0>], actions = [], pools = [], tied = []>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwd_0() {
    return
  }
}

// -----

module {
  // expected-error @+1 {{'ds.pipeline_rank' must be a #ds.pipeline_rank on the module}}
  func.func @f() attributes {ds.pipeline_rank = {rank = 0 : i64}} {
    return
  }
}

// -----

// #ds.pipeline_part: the optimizer belongs to no stage, every other part to one.
module {
  // expected-error @+1 {{the optimizer part belongs to no stage}}
  func.func @f() attributes {ds.pipeline_part = #ds.pipeline_part<part = optimizer, stage = 0>} {
    return
  }
}

// -----

module {
  // expected-error @+1 {{the backward_weight part needs a stage >= 0}}
  func.func @f() attributes {ds.pipeline_part = #ds.pipeline_part<part = backward_weight>} {
    return
  }
}

// -----

module {
  // expected-error @+1 {{'ds.pipeline_part' must be a #ds.pipeline_part on a function}}
  func.func @f() attributes {ds.pipeline_part = {part = "forward", stage = 0 : i64}} {
    return
  }
}

// -----

// expected-error @+1 {{'ds.pipeline_part' must be a #ds.pipeline_part on a function}}
module attributes {ds.pipeline_part = #ds.pipeline_part<part = forward, stage = 0>} {}

// -----

// #ds.axes: each axis once, one per dimension of the shard.grid it is on.
module {
  // expected-error @+1 {{grid axis dp appears twice}}
  shard.grid @grid(shape = 2x2) {ds.axes = #ds.axes<[dp, dp]>}
}

// -----

module {
  // expected-error @+1 {{'ds.axes' names 1 axes; the grid has 2}}
  shard.grid @grid(shape = 2x2) {ds.axes = #ds.axes<[dp]>}
}

// -----

module {
  // expected-error @+2 {{expected one of [pp, dp, tp]}}
// expected-error @+1 {{failed to parse}}
  shard.grid @grid(shape = 2) {ds.axes = #ds.axes<[ep]>}
}

// -----

module {
  // expected-error @+1 {{'ds.axes' must be a #ds.axes on a shard.grid}}
  shard.grid @grid(shape = 2x2) {ds.axes = ["pp", "dp"]}
}

// -----

module {
  // expected-error @+1 {{'ds.axes' must be a #ds.axes on a shard.grid}}
  func.func @f() attributes {ds.axes = #ds.axes<[dp]>} {
    return
  }
}
