// ds-zero on textual IR: the training step of a linear layer (w: 3x2 = 6
// elements, b: 2) over dp = 2 ranks, accumulating 2 micro-batches. ZeRO's
// flat partition gives each rank 3 elements of w and 1 of b.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=2},ds-zero{stage=0 dp=2})' | FileCheck %s --check-prefix=Z0
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=2},ds-zero{stage=1 dp=2})' | FileCheck %s --check-prefix=Z1
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=2},ds-zero{stage=2 dp=2})' | FileCheck %s --check-prefix=Z2
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=2},ds-zero{stage=3 dp=2 param-persistence-threshold=1})' | FileCheck %s --check-prefix=Z3
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=2},ds-zero{stage=3 dp=2})' | FileCheck %s --check-prefix=PERSIST
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-zero{stage=1 dp=1})' | FileCheck %s --check-prefix=DP1
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-zero{stage=1 dp=2})' 2>&1 | FileCheck %s --check-prefix=NOSTEP
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,ds-optimizer,ds-zero{stage=4 dp=2})' 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,ds-optimizer,ds-zero{stage=1 dp=0})' 2>&1 | FileCheck %s --check-prefix=DP0

// Stage 0: whole states; the accumulators are averaged in place, in one
// bucket, before the norm reads them.
// Z0: shard.grid @grid(shape = 2) {ds.axes = #ds.axes<[dp]>}
// Z0-LABEL: func.func @optimizer_step
// Z0: %[[AVG:.*]]:2, %{{.*}} = ds.all_reduce_bucket %arg2, %arg3 on @grid {ds.overwrites_arg, reduction = "average"} : tensor<3x2xf32>, tensor<2xf32> -> tensor<3x2xf32>, tensor<2xf32>, tensor<8xf32>
// Z0-NEXT: ds.sum_of_squares %[[AVG]]#0, %[[AVG]]#1
// Z0: ds.adamw {{.*}} : tensor<f32>, tensor<i64>, tensor<3x2xf32>, tensor<3x2xf32>, tensor<3x2xf32>, tensor<3x2xf32>
// Z0-NOT: reduce_scatter
// Z0-NOT: all_gather

// Stage 1: the optimizer states are shards; the optimizer step
// reduce-scatters the accumulators, sums the shards' squares over dp,
// updates the rank's slice and gathers the parameters back.
// Z1-LABEL: func.func @micro_step
// Z1-NOT: reduce_scatter
// Z1-LABEL: func.func @optimizer_step
// Z1-SAME: tensor<3xf32> {ds.state = #ds.state<optimizer, role = "exp_avg", param = "w">}
// Z1: %[[G:.*]]:2, %{{.*}} = ds.reduce_scatter_bucket %{{.*}}, %{{.*}} on @grid {reduction = "average"} : tensor<6xf32>, tensor<2xf32> -> tensor<3xf32>, tensor<1xf32>, tensor<8xf32>
// Z1: %[[SQ:.*]] = ds.sum_of_squares %[[G]]#0, %[[G]]#1
// Z1: shard.all_reduce %[[SQ]] on @grid grid_axes = [0] : tensor<f32> -> tensor<f32>
// Z1: %[[W:.*]] = shard.all_slice %{{.*}} on @grid grid_axes = [0] slice_axis = 0 : tensor<6xf32> -> tensor<3xf32>
// Z1: %[[NEW:.*]], %{{.*}}, %{{.*}} = ds.adamw %{{.*}}, %{{.*}}, %[[W]],
// Z1: ds.all_gather_bucket %[[NEW]], %{{.*}} on @grid : tensor<3xf32>, tensor<1xf32> -> tensor<6xf32>, tensor<2xf32>, tensor<8xf32>

// Stage 2: the accumulators are shards too; each micro step reduce-scatters
// the gradients as backward computes them and adds its shard.
// Z2-LABEL: func.func @micro_step
// Z2-SAME: tensor<3xf32> {ds.state = #ds.state<accumulator, param = "w">}, %arg4: tensor<1xf32> {ds.state = #ds.state<accumulator, param = "b">}
// Z2: %[[S:.*]]:2, %{{.*}} = ds.reduce_scatter_bucket %{{.*}}, %{{.*}} on @grid {reduction = "average"} : tensor<2xf32>, tensor<6xf32> -> tensor<1xf32>, tensor<3xf32>, tensor<8xf32>
// Z2: ds.add %arg4, %[[S]]#0
// Z2: ds.add %arg3, %[[S]]#1
// Z2-LABEL: func.func @optimizer_step
// Z2: ds.sum_of_squares %arg2, %arg3 : tensor<3xf32>, tensor<1xf32>
// Z2: ds.all_gather_bucket

// Stage 3: trained parameters are shards at rest (ds.sharded keeps the
// whole type), gathered before their first use in the micro step.
// Z3-LABEL: func.func @micro_step
// Z3-SAME: %arg1: tensor<3xf32> {ds.param = #ds.param<name = "w"{{.*}}>, ds.sharded = tensor<3x2xf32>}
// Z3: %[[GW:.*]] = shard.all_gather %arg1 on @grid grid_axes = [0] gather_axis = 0 : tensor<3xf32> -> tensor<6xf32>
// Z3: %[[W:.*]] = ds.flat_unpad %[[GW]] : tensor<6xf32> -> tensor<3x2xf32>
// Z3: ds.matmul %arg0, %[[W]]
// Z3-LABEL: func.func @optimizer_step
// Z3-NOT: all_gather
// Z3: return

// Below DeepSpeed's stage3_param_persistence_threshold (1e5 elements) the
// parameters stay whole on every rank.
// PERSIST-LABEL: func.func @micro_step
// PERSIST-SAME: %arg1: tensor<3x2xf32> {ds.param
// PERSIST-NOT: shard.all_gather

// One rank: nothing to distribute.
// DP1-NOT: shard.
// DP1: ds.zero = #ds.zero<stage = 1, dp = 1,
// DP1-NOT: shard.

// NOSTEP: error: no @micro_step and @optimizer_step; run ds-optimizer first
// STAGE: error: ZeRO stage 4 does not exist (0, 1, 2 or 3)
// DP0: error: the data-parallel size must be at least 1, got 0

func.func @main(%x: tensor<4x3xf32> {ds.input = "x"},
                %w: tensor<3x2xf32> {ds.param = #ds.param<name = "w", trainable = true, data = dense<0.5> : tensor<3x2xf32>>},
                %b: tensor<2xf32> {ds.param = #ds.param<name = "b", trainable = true, data = dense<0.1> : tensor<2xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.matmul %x, %w : tensor<4x3xf32>, tensor<3x2xf32>
  %1 = ds.add %0, %b : tensor<4x2xf32>, tensor<2xf32>
  %2 = ds.mul %1, %1 : tensor<4x2xf32>, tensor<4x2xf32>
  %3 = ds.reduce_mean %2 {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x2xf32>
  return %3 : tensor<f32>
}
