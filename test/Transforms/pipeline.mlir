// ds-pipeline, ds-pipeline-ranks and ds-pipeline-split on textual IR: a
// chain of four linear layers accumulating 4 micro-batches, cut into 2
// stages. Forward FLOPs per op are 512 (the 4x8x8 matmuls), 32 (relu), 64
// (the head) and 4 (the loss); the linear partition's optimum cuts after the
// second matmul (1056 vs 636 FLOPs; cutting after its relu gives 1088).
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=4},ds-pipeline{stages=2 microbatches=4})' | FileCheck %s --check-prefix=CUT
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=4},ds-pipeline{stages=2 microbatches=4},ds-pipeline-ranks)' | FileCheck %s --check-prefix=RANKS
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=4},ds-pipeline{stages=2 microbatches=4},ds-pipeline-split{rank=1 dp=2})' | FileCheck %s --check-prefix=SPLIT1
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=4},ds-pipeline{stages=2 microbatches=4 balance=uniform})' | FileCheck %s --check-prefix=UNIFORM
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=4},ds-pipeline{stages=2 microbatches=3})' 2>&1 | FileCheck %s --check-prefix=MICRO
// RUN: not dsopt-opt %s --ds-pipeline-ranks 2>&1 | FileCheck %s --check-prefix=NOCUT
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=4},ds-pipeline{stages=2 microbatches=4},ds-pipeline-split{rank=2})' 2>&1 | FileCheck %s --check-prefix=RANK

// CUT: ds.pipeline = #ds.pipeline<stages = 2, microbatches = 4, schedule = "1f1b", chunks = 1, balance = flops,{{.*}}op_stages = [0, 0, 0, 1, 1, 1, 1, 1, 1]
// CUT-LABEL: func.func @micro_step
// CUT: ds.matmul %arg0, %arg1 {ds.forward_id = {{[0-9]+}} : i64, ds.stage = 0 : i64}
// CUT: ds.matmul %{{.*}}, %arg2 {ds.forward_id = [[W1:[0-9]+]] : i64, ds.stage = 0 : i64}
// CUT: ds.relu %{{.*}} {ds.forward_id = {{[0-9]+}} : i64, ds.stage = 1 : i64}
// CUT: ds.matmul %{{.*}}, %arg3 {ds.forward_id = [[W2:[0-9]+]] : i64, ds.stage = 1 : i64}
// A backward op belongs to the stage of the forward op it differentiates
// (ds.grad_of names it): the gradient through w2 on stage 1, through w1 on
// stage 0.
// CUT: ds.matmul %{{.*}}, %arg3 {ds.grad_of = [[W2]] : i64, ds.stage = 1 : i64, transpose_rhs}
// CUT: ds.matmul %{{.*}}, %arg2 {ds.grad_of = [[W1]] : i64, ds.stage = 0 : i64, transpose_rhs}

// Uniform balance: 9 forward ops, the largest count is 5 either way; the
// tie goes to the smaller largest stage by bytes accessed (4 + 5: 1536 and
// 1012 bytes, against 2048 and 500 for 5 + 4).
// UNIFORM: op_stages = [0, 0, 0, 0, 1, 1, 1, 1, 1]

// Next to the cut step, the program of each rank as a nested module.
// RANKS-LABEL: func.func @micro_step
// RANKS-LABEL: module @pp0
// RANKS-SAME: ds.pipeline_rank = #ds.pipeline_rank<rank = 0, stages = 2,
// RANKS: shard.grid @grid(shape = 2x1) {ds.axes = #ds.axes<[pp, dp]>}
// RANKS: func.func @fwd_0({{.*}}ds.input = "x"{{.*}} -> ({{.*}}ds.output = "[[ACT:v[0-9_]+]]", ds.role = #ds.role<send>
// RANKS: func.func @bwd_0({{.*}}ds.state = #ds.state<accumulator, param = "w0">{{.*}}ds.role = #ds.role<stash>{{.*}}ds.input = "[[GRAD:v[0-9_]+]]", ds.role = #ds.role<recv>
// RANKS-LABEL: module @pp1
// RANKS-SAME: ds.pipeline_rank = #ds.pipeline_rank<rank = 1, stages = 2,
// RANKS: func.func @fwd_1({{.*}}ds.input = "[[ACT]]", ds.role = #ds.role<recv>{{.*}} -> (tensor<f32> {ds.output = "loss"}
// RANKS: func.func @bwd_1({{.*}} -> ({{.*}}ds.output = "[[GRAD]]", ds.role = #ds.role<send>

// ds-pipeline-split alone makes one rank's program; ZeRO will run along
// the grid's dp axis.
// The rank's optimizer step updates its own parameters and sums the
// gradient norm's squares over pp (grid axis 0).
// SPLIT1: shard.grid @grid(shape = 2x2) {ds.axes = #ds.axes<[pp, dp]>}
// SPLIT1-NOT: func.func @micro_step
// SPLIT1: func.func @optimizer_step(%arg0: tensor<8x8xf32> {ds.param = #ds.param<name = "w2"
// SPLIT1-NOT: name = "w0"
// SPLIT1: shard.all_reduce {{.*}} on @grid grid_axes = [0]
// SPLIT1-NOT: func.func @fwd_0
// SPLIT1: func.func @fwd_1
// SPLIT1: func.func @bwd_1

// MICRO: error: microbatches=3 differs from the training step's gradient accumulation 4
// NOCUT: error: no ds.pipeline on the module; run ds-pipeline first
// RANK: error: pipeline rank 2 is outside [0, 2)

func.func @main(%x: tensor<4x8xf32> {ds.input = "x"},
                %w0: tensor<8x8xf32> {ds.param = #ds.param<name = "w0", trainable = true, data = dense<0.1> : tensor<8x8xf32>>},
                %w1: tensor<8x8xf32> {ds.param = #ds.param<name = "w1", trainable = true, data = dense<0.2> : tensor<8x8xf32>>},
                %w2: tensor<8x8xf32> {ds.param = #ds.param<name = "w2", trainable = true, data = dense<0.3> : tensor<8x8xf32>>},
                %w3: tensor<8x1xf32> {ds.param = #ds.param<name = "w3", trainable = true, data = dense<0.4> : tensor<8x1xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.matmul %x, %w0 : tensor<4x8xf32>, tensor<8x8xf32> loc("l0/matmul")
  %1 = ds.relu %0 : tensor<4x8xf32> loc("l0/relu")
  %2 = ds.matmul %1, %w1 : tensor<4x8xf32>, tensor<8x8xf32> loc("l1/matmul")
  %3 = ds.relu %2 : tensor<4x8xf32> loc("l1/relu")
  %4 = ds.matmul %3, %w2 : tensor<4x8xf32>, tensor<8x8xf32> loc("l2/matmul")
  %5 = ds.relu %4 : tensor<4x8xf32> loc("l2/relu")
  %6 = ds.matmul %5, %w3 : tensor<4x8xf32>, tensor<8x1xf32> loc("head/matmul")
  %7 = ds.mul %6, %6 : tensor<4x1xf32>, tensor<4x1xf32> loc("loss/square")
  %8 = ds.reduce_mean %7 {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x1xf32> loc("loss/mean")
  return %8 : tensor<f32>
}
