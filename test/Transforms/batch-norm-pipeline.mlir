// Pipeline parallelism with training-mode batch norm: the running
// statistics are state owned by the stage that holds the batch norm. Each
// rank's forward part reads its stage's statistics and returns their new
// values tied to them (ds.updates), so every micro-batch writes them back
// in the schedule's order, as the single-rank micro step does; the other
// rank neither reads nor updates them, and no optimizer touches them.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=2},ds-pipeline{stages=2 microbatches=2 balance=uniform},ds-pipeline-split{rank=0})' | FileCheck %s --check-prefix=RANK0
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=2},ds-pipeline{stages=2 microbatches=2 balance=uniform},ds-pipeline-split{rank=1})' | FileCheck %s --check-prefix=RANK1

func.func @main(%x: tensor<4x8xf32> {ds.input = "x"},
                %w0: tensor<8x8xf32> {ds.param = #ds.param<name = "w0", trainable = true, data = dense<0.5> : tensor<8x8xf32>>},
                %s0: tensor<8xf32> {ds.param = #ds.param<name = "bn0.weight", trainable = true, data = dense<1.5> : tensor<8xf32>>},
                %b0: tensor<8xf32> {ds.param = #ds.param<name = "bn0.bias", trainable = true, data = dense<0.5> : tensor<8xf32>>},
                %m0: tensor<8xf32> {ds.param = #ds.param<name = "bn0.running_mean", trainable = true, data = dense<0.1> : tensor<8xf32>>},
                %v0: tensor<8xf32> {ds.param = #ds.param<name = "bn0.running_var", trainable = true, data = dense<1.2> : tensor<8xf32>>},
                %w1: tensor<8x8xf32> {ds.param = #ds.param<name = "w1", trainable = true, data = dense<0.25> : tensor<8x8xf32>>},
                %s1: tensor<8xf32> {ds.param = #ds.param<name = "bn1.weight", trainable = true, data = dense<1.25> : tensor<8xf32>>},
                %b1: tensor<8xf32> {ds.param = #ds.param<name = "bn1.bias", trainable = true, data = dense<0.75> : tensor<8xf32>>},
                %m1: tensor<8xf32> {ds.param = #ds.param<name = "bn1.running_mean", trainable = true, data = dense<0.2> : tensor<8xf32>>},
                %v1: tensor<8xf32> {ds.param = #ds.param<name = "bn1.running_var", trainable = true, data = dense<1.1> : tensor<8xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %h0 = ds.matmul %x, %w0 : tensor<4x8xf32>, tensor<8x8xf32>
  %y0:5 = ds.batch_norm_train %h0, %s0, %b0, %m0, %v0 {momentum = 0.9 : f32, unbiased_running_var = true} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  %r0 = ds.tanh %y0#0 : tensor<4x8xf32>
  %h1 = ds.matmul %r0, %w1 : tensor<4x8xf32>, tensor<8x8xf32>
  %y1:5 = ds.batch_norm_train %h1, %s1, %b1, %m1, %v1 {momentum = 0.9 : f32, unbiased_running_var = true} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  %sq = ds.mul %y1#0, %y1#0 : tensor<4x8xf32>, tensor<4x8xf32>
  %l = ds.reduce_sum %sq {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32>
  return %l : tensor<f32>
}

// Rank 0 (stage 0) holds bn0: its forward part reads bn0's statistics and
// returns their new values tied to them; it never sees bn1's, and its
// optimizer step leaves the statistics alone.
// RANK0-LABEL: func.func @optimizer_step
// RANK0-NOT: running_
// RANK0-SAME: attributes {ds.pipeline_part = #ds.pipeline_part<part = optimizer>}
// RANK0-LABEL: func.func @fwd_0
// RANK0-SAME: %arg4: tensor<8xf32> {ds.param = #ds.param<name = "bn0.running_mean", trainable = false
// RANK0-SAME: %arg5: tensor<8xf32> {ds.param = #ds.param<name = "bn0.running_var", trainable = false
// RANK0-SAME: tensor<8xf32> {ds.updates = 4 : i64}, tensor<8xf32> {ds.updates = 5 : i64})
// RANK0: %{{.*}}, %[[M:[a-z_0-9]+]], %[[V:[a-z_0-9]+]], %{{.*}}, %{{.*}} = ds.batch_norm_train %{{.*}}, %arg2, %arg3, %arg4, %arg5 {{{.*}}ds.stage = 0
// RANK0: return {{.*}}, %[[M]], %[[V]] :
// RANK0-LABEL: func.func @bwd_0
// RANK0-NOT: running_
// RANK0-NOT: func.func @fwd_1

// Rank 1 (stage 1) holds bn1 the same way.
// RANK1-LABEL: func.func @optimizer_step
// RANK1-NOT: running_
// RANK1-SAME: attributes {ds.pipeline_part = #ds.pipeline_part<part = optimizer>}
// RANK1-NOT: bn0.running
// RANK1-LABEL: func.func @fwd_1
// RANK1-SAME: %arg3: tensor<8xf32> {ds.param = #ds.param<name = "bn1.running_mean", trainable = false
// RANK1-SAME: %arg4: tensor<8xf32> {ds.param = #ds.param<name = "bn1.running_var", trainable = false
// RANK1-SAME: tensor<8xf32> {ds.updates = 3 : i64}, tensor<8xf32> {ds.updates = 4 : i64})
// RANK1: %{{.*}}, %[[M:[a-z_0-9]+]], %[[V:[a-z_0-9]+]], %{{.*}}, %{{.*}} = ds.batch_norm_train %{{.*}}, %arg1, %arg2, %arg3, %arg4 {{{.*}}ds.stage = 1
// RANK1: return {{.*}}, %[[M]], %[[V]] :
// RANK1-LABEL: func.func @bwd_1
// RANK1-NOT: running_
