// ZeRO over a mixed-precision step: stage >= 1 shards the fp32 master
// weights with the other optimizer states, reduce-scatters the gradients in
// their accumulation type and all-gathers the 16-bit working copies; stage
// 3 keeps the working copies as shards at rest and gathers them in 16 bits.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-train{precision=bf16 zero-stage=1 dp=2 fuse=false})' | FileCheck %s --check-prefix=Z1
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-train{precision=bf16 grad-accum-dtype=fp32 zero-stage=2 dp=2 accumulation=2 fuse=false})' | FileCheck %s --check-prefix=Z2
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-train{precision=bf16 zero-stage=3 dp=2 param-persistence-threshold=0 fuse=false})' | FileCheck %s --check-prefix=Z3

// Z1-LABEL: func.func @optimizer_step
// Z1-SAME: %arg0: tensor<6x6xbf16> {{{.*}}ds.param = #ds.param<name = "w"
// Z1-SAME: tensor<18xf32> {{{.*}}ds.state = #ds.state<optimizer, role = "master", param = "w">}
// Z1: ds.reduce_scatter_bucket {{.*}}ds.buffers = array<i64: [[G0:[0-9]+]], [[G1:[0-9]+]], {{[0-9]+}}>{{.*}} : tensor<36xbf16>, tensor<6xbf16> -> tensor<18xbf16>, tensor<3xbf16>,
// The update reads the bf16 gradient shard as it is (no f32 copy); the
// two updates are one ds.adamw_multi (ds-group-optimizer), which also
// writes the 16-bit working copies (its last two results,
// ds-fuse-param-copy) over the gradient shards' buffers.
// Z1: %[[MASTER:[0-9]+]]:8 = ds.adamw_multi {{.*}}ds.buffers = array<i64: {{([0-9]+, )+}}[[G0]], [[G1]]>{{.*}} : tensor<f32>, tensor<i64>, tensor<18xf32>, tensor<3xf32>, tensor<18xbf16>, tensor<3xbf16>, tensor<18xf32>, tensor<3xf32>, tensor<18xf32>, tensor<3xf32> -> {{.*}}, tensor<18xbf16>, tensor<3xbf16>{{$}}
// Z1-NOT: ds.cast
// Z1: ds.all_gather_bucket %[[MASTER]]#6, %[[MASTER]]#7 {{.*}} : tensor<18xbf16>, tensor<3xbf16> -> tensor<36xbf16>, tensor<6xbf16>,

// fp32 accumulation: the reduce-scatter in micro_step is in f32.
// Z2-LABEL: func.func @micro_step
// Z2: ds.reduce_scatter_bucket {{.*}} : tensor<6xf32>, tensor<36xf32> -> tensor<3xf32>, tensor<18xf32>
// Z2-LABEL: func.func @optimizer_step
// Z2-SAME: tensor<18xf32> {{{.*}}ds.state = #ds.state<accumulator, param = "w">}
// Z2-SAME: tensor<18xf32> {{{.*}}ds.state = #ds.state<optimizer, role = "master", param = "w">}
// Z2: ds.fill {{.*}} : tensor<18xf32>

// Z3-LABEL: func.func @micro_step
// Z3-SAME: %arg1: tensor<18xbf16> {{{.*}}ds.sharded = tensor<6x6xbf16>}
// Z3: shard.all_gather %arg1 {{.*}} : tensor<18xbf16> -> tensor<36xbf16>
// Z3-LABEL: func.func @optimizer_step
// Z3-SAME: %arg0: tensor<18xbf16> {{{.*}}ds.sharded = tensor<6x6xbf16>}
// Z3: %[[MASTER:[0-9]+]]:8 = ds.adamw_multi {{.*}} tensor<18xf32>
// Z3-NOT: all_gather
// Z3: return %{{.*}}, %[[MASTER]]#6,

func.func @main(%x: tensor<4x6xf32> {ds.input = "x"},
                %w: tensor<6x6xf32> {ds.param = #ds.param<name = "w", trainable = true, data = dense<0.5> : tensor<6x6xf32>>},
                %b: tensor<6xf32> {ds.param = #ds.param<name = "b", trainable = true, data = dense<0.0> : tensor<6xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.matmul %x, %w : tensor<4x6xf32>, tensor<6x6xf32>
  %1 = ds.add %0, %b : tensor<4x6xf32>, tensor<6xf32>
  %2 = ds.mul %1, %1 : tensor<4x6xf32>, tensor<4x6xf32>
  %3 = ds.reduce_mean %2 {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x6xf32>
  return %3 : tensor<f32>
}
