// ds-offload on textual IR: the training step of a linear layer (w: 3x2, b: 2)
// over dp = 2 ranks. Optimizer states go to the host (device=cpu) or the file
// space (device=nvme); each update runs on the host between ds.transfers.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=2},ds-zero{stage=1 dp=2},ds-offload{device=cpu},ds-plan-memory)' | FileCheck %s --check-prefix=CPU
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-zero{stage=2 dp=2},ds-offload{device=nvme},ds-plan-memory)' | FileCheck %s --check-prefix=NVME
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{optimizer=sgd momentum=0.9},ds-offload{device=cpu},ds-plan-memory)' | FileCheck %s --check-prefix=SGD
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-offload{device=gpu})' 2>&1 | FileCheck %s --check-prefix=DEVICE
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-offload{device=cpu ratio=0.5},ds-plan-memory)' | FileCheck %s --check-prefix=PARTIAL
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-offload{device=cpu ratio=0},ds-plan-memory)' | FileCheck %s --check-prefix=NONE
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=2},ds-zero{stage=3 dp=2 param-persistence-threshold=4},ds-offload{device=none param-device=cpu param-buffer-count=1},ds-plan-memory)' | FileCheck %s --check-prefix=PARAM
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-zero{stage=3 dp=2 param-persistence-threshold=1},ds-offload{device=nvme param-device=nvme param-max-in-cpu=0},ds-plan-memory)' | FileCheck %s --check-prefix=PARAMNVME
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-zero{stage=2 dp=2},ds-offload{device=none param-device=cpu})' 2>&1 | FileCheck %s --check-prefix=PARAMSTAGE
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-zero{stage=3 dp=2 param-persistence-threshold=1},ds-offload{device=none param-device=nvme param-max-in-cpu=3},ds-plan-memory)' | FileCheck %s --check-prefix=PARAMSPLIT
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-zero{stage=3 dp=2 param-persistence-threshold=1},ds-offload{device=none param-device=cpu param-pin-memory=true},ds-plan-memory)' | FileCheck %s --check-prefix=PINNED
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-zero{stage=3 dp=2 param-persistence-threshold=1},ds-offload{device=none param-device=nvme param-max-in-cpu=0 param-buffer-size=2})' 2>&1 | FileCheck %s --check-prefix=BUFSIZE

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
// blocks, and the host buffers file transfers use start on blocks. Each
// gradient accumulator (%arg2, %arg3) goes to the host with its update's
// read-ahead, not at the start of the step, so the host holds the gradients
// of the two updates in flight only.
// NVME: module attributes {ds.memory = #ds.memory_plan<{{.*}}, host_bytes = 16448, file_bytes = 16384, file_persistent_bytes = 16384>
// NVME-LABEL: func.func @optimizer_step
// NVME-SAME: %arg4: tensor<3xf32> {ds.offset = 0 : i64, ds.space = #ds.space<file>, ds.state = #ds.state<optimizer, role = "exp_avg", param = "w">}
// NVME: %[[G0:.*]] = ds.transfer %arg2 {{{.*}}from = #ds.space<device>, to = #ds.space<host>} : tensor<3xf32>
// NVME-NEXT: %[[M0:.*]] = ds.transfer %arg4 {{{.*}}from = #ds.space<file>, to = #ds.space<host>} : tensor<3xf32>
// NVME-NEXT: %[[V0:.*]] = ds.transfer %arg6 {{{.*}}from = #ds.space<file>, to = #ds.space<host>} : tensor<3xf32>
// NVME-NEXT: %[[G1:.*]] = ds.transfer %arg3 {{{.*}}from = #ds.space<device>, to = #ds.space<host>} : tensor<1xf32>
// NVME-NEXT: %[[M1:.*]] = ds.transfer %arg5 {{{.*}}from = #ds.space<file>, to = #ds.space<host>} : tensor<1xf32>
// NVME-NEXT: %[[V1:.*]] = ds.transfer %arg7 {{{.*}}from = #ds.space<file>, to = #ds.space<host>} : tensor<1xf32>
// NVME-NEXT: %[[P:.*]], %[[M:.*]], %[[V:.*]] = ds.adamw {{.*}}, %[[G0]], %[[M0]], %[[V0]] {{{.*}}ds.space = #ds.space<host>
// NVME-NEXT: ds.transfer %[[P]] {{{.*}}from = #ds.space<host>, to = #ds.space<device>} : tensor<3xf32>
// NVME-NEXT: ds.transfer %[[M]] {ds.buffers = array<i64: 0>, from = #ds.space<host>, to = #ds.space<file>} : tensor<3xf32>
// NVME-NEXT: ds.transfer %[[V]] {ds.buffers = array<i64: 8192>, from = #ds.space<host>, to = #ds.space<file>} : tensor<3xf32>
// NVME: ds.adamw {{.*}}, %[[G1]], %[[M1]], %[[V1]] {{{.*}}ds.space = #ds.space<host>

// One rank, SGD with momentum: the momentum buffers are offloaded (every
// optimizer state, whatever the optimizer), and the updated parameter goes
// straight back into the parameter's device slot.
// SGD-LABEL: func.func @optimizer_step
// SGD-SAME: %arg4: tensor<3x2xf32> {ds.offset = 0 : i64, ds.space = #ds.space<host>, ds.state = #ds.state<optimizer, role = "momentum_buffer", param = "w">}
// SGD: %[[P:.*]], %{{.*}} = ds.sgd {{.*}}, %arg4 {{{.*}}ds.space = #ds.space<host>
// SGD-NEXT: ds.transfer %[[P]] {ds.buffers = array<i64: 0>, from = #ds.space<host>, to = #ds.space<device>} : tensor<3x2xf32>

// DEVICE: ds-offload: device 'gpu' is not none, cpu or nvme

// Partial offload, ratio 0.5 of two parameters: the first (w) keeps its
// states and update on the device, the last (b) is offloaded.
// PARTIAL: host_persistent_bytes = 128
// PARTIAL-LABEL: func.func @optimizer_step
// PARTIAL-SAME: %arg4: tensor<3x2xf32> {ds.offset = 256 : i64, ds.state = #ds.state<optimizer, role = "exp_avg", param = "w">}
// PARTIAL-SAME: %arg5: tensor<2xf32> {ds.offset = 0 : i64, ds.space = #ds.space<host>, ds.state = #ds.state<optimizer, role = "exp_avg", param = "b">}
// PARTIAL: ds.adamw %arg8, %arg9, %arg0, %arg2, %arg4, %arg6 {ds.buffers = array<i64: {{[0-9, ]+}}>, weight_decay
// PARTIAL: ds.adamw {{.*}}, %arg5, %arg7 {{{.*}}ds.space = #ds.space<host>

// Ratio 0: nothing leaves the device.
// NONE-NOT: ds.space

// ZeRO-3's parameter offload to the host: w (6 elements, at the threshold
// of 4) is partitioned and its shard lives on the host; b (2) stays whole
// on the device. Each device read gets a fetched copy, freed after it; the
// update on the device (the optimizer is not offloaded) writes a device
// result that goes back to the host shard.
// PARAM: host_bytes = 64, host_persistent_bytes = 64
// PARAM-LABEL: func.func @micro_step
// PARAM-SAME: %arg1: tensor<3xf32> {ds.offset = 0 : i64, ds.param = #ds.param<name = "w"{{.*}}>, ds.sharded = tensor<3x2xf32>, ds.space = #ds.space<host>}
// PARAM-SAME: %arg2: tensor<2xf32> {ds.offset = 0 : i64, ds.param = #ds.param<name = "b"{{.*}}>}
// PARAM: %[[F:.*]] = ds.transfer %arg1 {ds.buffers = array<i64: [[FB:[0-9]+]]>, from = #ds.space<host>, to = #ds.space<device>} : tensor<3xf32>
// PARAM-NEXT: shard.all_gather %[[F]] on @grid
// PARAM: ds.matmul {{.*}}ds.frees = array<i64: [[FB]],
// PARAM-LABEL: func.func @optimizer_step
// PARAM: %[[P:.*]] = ds.transfer %arg0 {{{.*}}from = #ds.space<host>, to = #ds.space<device>} : tensor<3xf32>
// PARAM-NEXT: %[[NEW:.*]], %{{.*}}, %{{.*}} = ds.adamw %arg8, %arg9, %[[P]],
// PARAM-NEXT: %[[BACK:.*]] = ds.transfer %[[NEW]] {{{.*}}from = #ds.space<device>, to = #ds.space<host>} : tensor<3xf32>
// PARAM: return %{{.*}}, %[[BACK]],

// Both offloads on nvme: every parameter is partitioned (threshold 1) and
// lies in the file; a micro step reads each shard into a host buffer
// ahead (both reads first) and copies it to the device right before its
// all-gather (the copy waits for the read); the optimizer step reads
// the shard and states ahead into host buffers, updates them on the host
// and writes them behind.
// PARAMNVME: file_persistent_bytes = 24576
// PARAMNVME-LABEL: func.func @micro_step
// PARAMNVME-SAME: ds.sharded = tensor<3x2xf32>, ds.space = #ds.space<file>}
// PARAMNVME: %[[H:.*]] = ds.transfer %arg1 {{{.*}}from = #ds.space<file>, to = #ds.space<host>} : tensor<3xf32>
// PARAMNVME-NEXT: ds.transfer %arg2 {{{.*}}from = #ds.space<file>, to = #ds.space<host>} : tensor<1xf32>
// PARAMNVME-NEXT: %[[D:.*]] = ds.transfer %[[H]] {{{.*}}from = #ds.space<host>, to = #ds.space<device>} : tensor<3xf32>
// PARAMNVME-NEXT: shard.all_gather %[[D]] on @grid
// PARAMNVME-LABEL: func.func @optimizer_step
// PARAMNVME: %[[W:.*]] = ds.transfer %arg0 {{{.*}}from = #ds.space<file>, to = #ds.space<host>} : tensor<3xf32>
// PARAMNVME: %[[NEW:.*]], %{{.*}}, %{{.*}} = ds.adamw %{{.*}}, %{{.*}}, %[[W]], {{.*}}ds.space = #ds.space<host>
// PARAMNVME-NEXT: %[[BEHIND:.*]] = ds.transfer %[[NEW]] {{{.*}}from = #ds.space<host>, to = #ds.space<file>} : tensor<3xf32>
// PARAMNVME: return %{{.*}}, %[[BEHIND]],

// PARAMSTAGE: ds-offload: param-device 'cpu' needs ZeRO stage 3 (run ds-zero{stage=3} first): parameters are offloaded only when they are partitioned

// max_in_cpu 3: w's shard (3 elements) stays in host memory, b's (1) would
// make 4 and goes to the file. Only parameters are offloaded and
// pin_memory is false, so the host arena is pageable.
// PARAMSPLIT: module attributes {{{.*}}host_persistent_bytes = 64, file_bytes = 4096, file_persistent_bytes = 4096>
// PARAMSPLIT-SAME: dsopt.host_pageable
// PARAMSPLIT-LABEL: func.func @micro_step
// PARAMSPLIT-SAME: ds.param = #ds.param<name = "w"{{.*}}>, ds.sharded = tensor<3x2xf32>, ds.space = #ds.space<host>}
// PARAMSPLIT-SAME: ds.param = #ds.param<name = "b"{{.*}}>, ds.sharded = tensor<2xf32>, ds.space = #ds.space<file>}
// PINNED-NOT: dsopt.host_pageable
// A shard in the file larger than the buffer it is read through.
// BUFSIZE: error: ds-offload: parameter 'w' has 3 elements in a rank's shard, more than offload_param.buffer_size (2)

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
