// ds-offload on textual IR: the training step of a linear layer (w: 3x2, b: 2)
// over dp = 2 ranks. Optimizer states go to the host (device=cpu) or the file
// space (device=nvme); each update runs on the host between ds.transfers.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=2},ds-zero{stage=1 dp=2},ds-offload{device=cpu},ds-plan-memory)' | FileCheck %s --check-prefix=CPU
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-zero{stage=2 dp=2},ds-offload{device=nvme},ds-plan-memory)' | FileCheck %s --check-prefix=NVME
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{optimizer=sgd momentum=0.9},ds-offload{device=cpu},ds-plan-memory)' | FileCheck %s --check-prefix=SGD
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-offload{device=gpu})' 2>&1 | FileCheck %s --check-prefix=DEVICE

// ZeRO-1 + cpu: the four states (each rank's shards) lie at the bottom of the
// host arena and take nothing of the device arena, which holds the
// parameters and gradient accumulators (4 x 64 bytes). The host arena adds
// the copies of one step.
// CPU: module attributes {ds.memory = #ds.memory_plan<arena_bytes = {{[0-9]+}}, persistent_bytes = 256, peak_live_bytes = {{[0-9]+}}, alignment = 64, host_bytes = 640, host_persistent_bytes = 256>
// CPU-LABEL: func.func @micro_step
// CPU-NOT: ds.space
// CPU-LABEL: func.func @optimizer_step
// CPU-SAME: %arg2: tensor<3x2xf32> {ds.offset = 128 : i64, ds.state = #ds.state<accumulator, param = "w">}
// CPU-SAME: %arg4: tensor<3xf32> {ds.offset = 0 : i64, ds.space = #ds.space<host>, ds.state = #ds.state<optimizer, role = "exp_avg", param = "w">}
// CPU-SAME: %arg7: tensor<1xf32> {ds.offset = 192 : i64, ds.space = #ds.space<host>, ds.state = #ds.state<optimizer, role = "exp_avg_sq", param = "b">}
// CPU-SAME: host_bytes = 640, host_persistent_bytes = 256
// The learning rate and step go to the host once, for every update.
// CPU-DAG: %[[STEP:.*]] = ds.transfer %arg9 {{{.*}}from = #ds.space<device>, to = #ds.space<host>} : tensor<i64>
// CPU-DAG: %[[LR:.*]] = ds.transfer %arg8 {{{.*}}from = #ds.space<device>, to = #ds.space<host>} : tensor<f32>
// The gradient shard goes to the host as soon as it is reduced (the update
// reads it times 1/k, its grad_scale operand, which goes to the host too),
// the parameter shard as soon as it is sliced.
// CPU: %[[GH:.*]] = ds.transfer %outputs#0 {{{.*}}from = #ds.space<device>, to = #ds.space<host>} : tensor<3xf32>
// CPU: %[[SCALE:.*]] = ds.transfer %{{.*}} {{{.*}}from = #ds.space<device>, to = #ds.space<host>} : tensor<f32>
// CPU: %[[W:.*]] = shard.all_slice
// CPU-NEXT: %[[WH:.*]] = ds.transfer %[[W]] {{{.*}}from = #ds.space<device>, to = #ds.space<host>} : tensor<3xf32>
// The update on the host, in place over the host states; the updated shard
// back to the device right after it, for ZeRO's all-gather.
// CPU-NEXT: %[[NEW:.*]], %[[M:.*]], %[[V:.*]] = ds.adamw %[[LR]], %[[STEP]], %[[WH]], %[[GH]], %arg4, %arg6, %[[SCALE]] {ds.buffers = array<i64: {{[0-9]+}}, 0, 128>, {{.*}}ds.space = #ds.space<host>
// CPU-NEXT: %[[BACK:.*]] = ds.transfer %[[NEW]] {{{.*}}from = #ds.space<host>, to = #ds.space<device>} : tensor<3xf32>
// CPU: ds.adamw %[[LR]], %[[STEP]], {{.*}}, %arg5, %arg7, %[[SCALE]] {{{.*}}ds.space = #ds.space<host>
// CPU: ds.all_gather_bucket %[[BACK]], %{{.*}} on @grid
// CPU: return %{{.*}}, %{{.*}}, %[[M]], %[[V]],

// ZeRO-2 + nvme: the states in the file arena. Both updates' states are read
// before the first update runs (read-ahead: the second update's reads
// overlap the first), and each state is written back right after its
// update (write-behind) into its file slot. File slots are whole 4096-byte
// blocks, and the host buffers file transfers use start on blocks.
// NVME: module attributes {ds.memory = #ds.memory_plan<{{.*}}, host_bytes = 16448, file_bytes = 16384, file_persistent_bytes = 16384>
// NVME-LABEL: func.func @optimizer_step
// NVME-SAME: %arg4: tensor<3xf32> {ds.offset = 0 : i64, ds.space = #ds.space<file>, ds.state = #ds.state<optimizer, role = "exp_avg", param = "w">}
// NVME: %[[M0:.*]] = ds.transfer %arg4 {{{.*}}from = #ds.space<file>, to = #ds.space<host>} : tensor<3xf32>
// NVME-NEXT: %[[V0:.*]] = ds.transfer %arg6 {{{.*}}from = #ds.space<file>, to = #ds.space<host>} : tensor<3xf32>
// NVME-NEXT: %[[M1:.*]] = ds.transfer %arg5 {{{.*}}from = #ds.space<file>, to = #ds.space<host>} : tensor<1xf32>
// NVME-NEXT: %[[V1:.*]] = ds.transfer %arg7 {{{.*}}from = #ds.space<file>, to = #ds.space<host>} : tensor<1xf32>
// NVME-NEXT: %[[P:.*]], %[[M:.*]], %[[V:.*]] = ds.adamw {{.*}}, %[[M0]], %[[V0]] {{{.*}}ds.space = #ds.space<host>
// NVME-NEXT: ds.transfer %[[P]] {{{.*}}from = #ds.space<host>, to = #ds.space<device>} : tensor<3xf32>
// NVME-NEXT: ds.transfer %[[M]] {ds.buffers = array<i64: 0>, from = #ds.space<host>, to = #ds.space<file>} : tensor<3xf32>
// NVME-NEXT: ds.transfer %[[V]] {ds.buffers = array<i64: 8192>, from = #ds.space<host>, to = #ds.space<file>} : tensor<3xf32>
// NVME: ds.adamw {{.*}}, %[[M1]], %[[V1]] {{{.*}}ds.space = #ds.space<host>

// One rank, SGD with momentum: the momentum buffers are offloaded (every
// optimizer state, whatever the optimizer), and the updated parameter goes
// straight back into the parameter's device slot.
// SGD-LABEL: func.func @optimizer_step
// SGD-SAME: %arg4: tensor<3x2xf32> {ds.offset = 0 : i64, ds.space = #ds.space<host>, ds.state = #ds.state<optimizer, role = "momentum_buffer", param = "w">}
// SGD: %[[P:.*]], %{{.*}} = ds.sgd {{.*}}, %arg4 {{{.*}}ds.space = #ds.space<host>
// SGD-NEXT: ds.transfer %[[P]] {ds.buffers = array<i64: 0>, from = #ds.space<host>, to = #ds.space<device>} : tensor<3x2xf32>

// DEVICE: ds-offload: device 'gpu' is not cpu or nvme

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
