// The pipeline annotations and the grid's axes round-trip: #ds.pipeline
// (ds-pipeline's cut and schedule), #ds.pipeline_rank (one rank's program,
// before and after ds-plan-memory placed its pools), #ds.pipeline_part and
// #ds.axes.
// RUN: dsopt-opt %s -split-input-file | dsopt-opt -split-input-file | FileCheck %s

// CHECK: module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 4, schedule = "1f1b", chunks = 1, balance = flops,
// CHECK-SAME: virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 3, flops_forward = 1056, flops_backward = 1728, flops_weight = 1728, bytes_forward = 1280, param_bytes = 512, activation_bytes = 384, send_bytes = 128>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 64, flops_backward = 128, flops_weight = 64, bytes_forward = 176, param_bytes = 32, activation_bytes = 128, send_bytes = 128>],
// CHECK-SAME: transfers = [#ds.pipeline_transfer<from = 0, to = 1, kind = activation, bytes = 128, values = 1>, #ds.pipeline_transfer<from = 1, to = 0, kind = gradient, bytes = 128, values = 1>],
// CHECK-SAME: tied = [#ds.pipeline_tied<name = "emb", stages = [0, 1]>],
// CHECK-SAME: op_names = ["ds.matmul", "ds.relu", "ds.matmul", "ds.matmul"], op_nodes = ["l0", "l0/relu", "l1", "head"], op_flops = [512, 32, 512, 64], op_bytes = [512, 256, 512, 176], op_stages = [0, 0, 0, 1], op_cut_before = [true, false, true, true]>}
module attributes {ds.pipeline = #ds.pipeline<
    stages = 2, microbatches = 4, schedule = "1f1b", chunks = 1,
    balance = flops,
    virtual_stages = [
      #ds.pipeline_stage<stage = 0, forward_ops = 3, flops_forward = 1056, flops_backward = 1728, flops_weight = 1728, bytes_forward = 1280, param_bytes = 512, activation_bytes = 384, send_bytes = 128>,
      #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 64, flops_backward = 128, flops_weight = 64, bytes_forward = 176, param_bytes = 32, activation_bytes = 128, send_bytes = 128>],
    transfers = [
      #ds.pipeline_transfer<from = 0, to = 1, kind = activation, bytes = 128, values = 1>,
      #ds.pipeline_transfer<from = 1, to = 0, kind = gradient, bytes = 128, values = 1>],
    tied = [#ds.pipeline_tied<name = "emb", stages = [0, 1]>],
    op_names = ["ds.matmul", "ds.relu", "ds.matmul", "ds.matmul"],
    op_nodes = ["l0", "l0/relu", "l1", "head"],
    op_flops = [512, 32, 512, 64], op_bytes = [512, 256, 512, 176],
    op_stages = [0, 0, 0, 1], op_cut_before = [true, false, true, true]>} {}

// -----

// Schedule names that are no keywords are strings; the others keywords.
// CHECK: #ds.pipeline<stages = 2, microbatches = 2, schedule = "zb-h1", chunks = 1, balance = uniform, virtual_stages = [{{.*}}], transfers = [], tied = [],
// CHECK: #ds.pipeline<stages = 1, microbatches = 2, schedule = interleaved, chunks = 2, balance = parameters,
module attributes {ds.pipeline = #ds.pipeline<stages = 2, microbatches = 2, schedule = "zb-h1", chunks = 1, balance = uniform, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = [], op_nodes = [], op_flops = [], op_bytes = [], op_stages = [], op_cut_before = []>} {
  module attributes {ds.pipeline = #ds.pipeline<stages = 1, microbatches = 2, schedule = interleaved, chunks = 2, balance = parameters, virtual_stages = [#ds.pipeline_stage<stage = 0, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>, #ds.pipeline_stage<stage = 1, forward_ops = 1, flops_forward = 1, flops_backward = 2, flops_weight = 1, bytes_forward = 1, param_bytes = 0, activation_bytes = 0, send_bytes = 0>], transfers = [], tied = [], op_names = [], op_nodes = [], op_flops = [], op_bytes = [], op_stages = [], op_cut_before = []>} {}
}

// -----

// A rank's program as ds-pipeline-split leaves it: pools without bytes and
// offsets; the functions of its stages by symbol; a compute action has no
// peer.
// CHECK: module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 1, stages = 2, chunks = 1, microbatches = 2, dp = 2, schedule = "1f1b",
// CHECK-SAME: virtual_stages = [#ds.rank_stage<stage = 1, forward = @fwd_1, backward = @bwd_1>],
// CHECK-SAME: actions = [#ds.pipeline_action<kind = recv_activation, microbatch = 0, chunk = 0, peer = 0>, #ds.pipeline_action<kind = forward, microbatch = 0, chunk = 0>, #ds.pipeline_action<kind = backward, microbatch = 0, chunk = 0>, #ds.pipeline_action<kind = send_gradient, microbatch = 0, chunk = 0, peer = 0>],
// CHECK-SAME: pools = [#ds.pipeline_pool<kind = act_in, stage = 1, slots = 1>, #ds.pipeline_pool<kind = stash, stage = 1, slots = 1>],
// CHECK-SAME: tied = [#ds.rank_tied<state = <accumulator, param = "emb">, ranks = [0, 1]>]>}
// CHECK: func.func @fwd_1() attributes {ds.pipeline_part = #ds.pipeline_part<part = forward, stage = 1>}
// CHECK: func.func @bwd_1() attributes {ds.pipeline_part = #ds.pipeline_part<part = backward, stage = 1>}
// CHECK: func.func @optimizer_step() attributes {ds.pipeline_part = #ds.pipeline_part<part = optimizer>}
module attributes {ds.pipeline_rank = #ds.pipeline_rank<
    rank = 1, stages = 2, chunks = 1, microbatches = 2, dp = 2,
    schedule = "1f1b",
    virtual_stages = [#ds.rank_stage<stage = 1, forward = @fwd_1, backward = @bwd_1>],
    actions = [
      #ds.pipeline_action<kind = recv_activation, microbatch = 0, chunk = 0, peer = 0>,
      #ds.pipeline_action<kind = forward, microbatch = 0, chunk = 0>,
      #ds.pipeline_action<kind = backward, microbatch = 0, chunk = 0, peer = -1>,
      #ds.pipeline_action<kind = send_gradient, microbatch = 0, chunk = 0, peer = 0>],
    pools = [
      #ds.pipeline_pool<kind = act_in, stage = 1, slots = 1>,
      #ds.pipeline_pool<kind = stash, stage = 1, slots = 1>],
    tied = [#ds.rank_tied<state = #ds.state<accumulator, param = "emb">, ranks = [0, 1]>]>} {
  func.func @fwd_1() attributes {ds.pipeline_part = #ds.pipeline_part<part = forward, stage = 1>} {
    return
  }
  func.func @bwd_1() attributes {ds.pipeline_part = #ds.pipeline_part<part = backward, stage = 1>} {
    return
  }
  func.func @optimizer_step() attributes {ds.pipeline_part = #ds.pipeline_part<part = optimizer>} {
    return
  }
}

// -----

// After ds-plan-memory: each pool's slot bytes and offset, the tied
// receive pool (stage -1), and where the pools lie. A split backward
// (zb-h1) names both of its parts.
// CHECK: #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 1, dp = 1, schedule = "zb-h1",
// CHECK-SAME: virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward_input = @bwdi_0, backward_weight = @bwdw_0>]
// CHECK-SAME: pools = [#ds.pipeline_pool<kind = wstash, stage = 0, slots = 1, slot_bytes = 64, offset = 1024>, #ds.pipeline_pool<kind = tied, stage = -1, slots = 1, slot_bytes = 256, offset = 1088>],
// CHECK-SAME: tied = [], buffers_offset = 1024, buffers_bytes = 320>
module attributes {ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2, chunks = 1, microbatches = 1, dp = 1, schedule = "zb-h1", virtual_stages = [#ds.rank_stage<stage = 0, forward = @fwd_0, backward_input = @bwdi_0, backward_weight = @bwdw_0>], actions = [], pools = [#ds.pipeline_pool<kind = wstash, stage = 0, slots = 1, slot_bytes = 64, offset = 1024>, #ds.pipeline_pool<kind = tied, stage = -1, slots = 1, slot_bytes = 256, offset = 1088>], tied = [], buffers_offset = 1024, buffers_bytes = 320>} {
  func.func @fwd_0() {
    return
  }
  func.func @bwdi_0() {
    return
  }
  func.func @bwdw_0() {
    return
  }
}

// -----

// CHECK: shard.grid @grid(shape = 2x2x2) {ds.axes = #ds.axes<[pp, dp, tp]>}
// CHECK: shard.grid @one(shape = 4) {ds.axes = #ds.axes<[dp]>}
module {
  shard.grid @grid(shape = 2x2x2) {ds.axes = #ds.axes<[pp, dp, tp]>}
  shard.grid @one(shape = 4) {ds.axes = #ds.axes<[dp]>}
}
