// offload_param on nvme: the shards are read from the file through a pool
// of param-buffer-count host buffers, the k-th read into buffer k mod the
// count (dsopt.param_buffer), each after the op that read its buffer's
// previous shard; ds-plan-memory gives every buffer a fixed host offset
// and records the pool (dsopt.param_buffer_pool).
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-zero{stage=3 dp=1 param-persistence-threshold=1},ds-offload{device=none param-device=nvme param-max-in-cpu=0 param-buffer-count=2},ds-plan-memory)' | FileCheck %s --check-prefix=TWO
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-zero{stage=3 dp=1 param-persistence-threshold=1},ds-offload{device=none param-device=nvme param-max-in-cpu=0 param-buffer-count=1})' 2>&1 | FileCheck %s --check-prefix=ONE

// Two buffers of one file block (the shards are 8 and 16 bytes), above no
// persistent host bytes.
// TWO: dsopt.param_buffer_pool = {buffer_bytes = 4096 : i64, buffers = 2 : i64, offset = 0 : i64}
// TWO-LABEL: func.func @micro_step
// a for the mul into buffer 0, a for the add into buffer 1, both read
// ahead; each read's copy to the device waits for it, so it goes right
// before its reader, not with the read.
// TWO: ds.transfer %arg1 {ds.buffers = array<i64: 0>, dsopt.param_buffer = 0 : i64, from = #ds.space<file>, to = #ds.space<host>} : tensor<2xf32>
// TWO-NEXT: ds.transfer %arg1 {ds.buffers = array<i64: 4096>, dsopt.param_buffer = 1 : i64, from = #ds.space<file>, to = #ds.space<host>} : tensor<2xf32>
// TWO-NEXT: ds.transfer {{.*}}from = #ds.space<host>, to = #ds.space<device>
// TWO-NEXT: ds.mul
// The third read, c for the add, reuses buffer 0 once the mul has read
// the first, and is issued before the copies the add reads.
// TWO-NEXT: ds.transfer %arg2 {ds.buffers = array<i64: 0>, dsopt.param_buffer = 0 : i64, from = #ds.space<file>, to = #ds.space<host>} : tensor<2x2xf32>
// TWO-NEXT: ds.transfer {{.*}}from = #ds.space<host>, to = #ds.space<device>
// TWO-NEXT: ds.transfer {{.*}}from = #ds.space<host>, to = #ds.space<device>
// TWO-NEXT: ds.add

// One op reading two shards of the file needs two buffers at once.
// ONE: error: 'ds.add' op reads more parameter shards from the file than offload_param.buffer_count (1): each is read through a buffer of the pool, and all of them are needed at once; raise buffer_count

func.func @main(%x: tensor<2xf32> {ds.input = "x"},
                %a: tensor<2xf32> {ds.param = #ds.param<name = "a", trainable = true, data = dense<0.5> : tensor<2xf32>>},
                %c: tensor<2x2xf32> {ds.param = #ds.param<name = "c", trainable = true, data = dense<0.25> : tensor<2x2xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.mul %x, %a : tensor<2xf32>, tensor<2xf32>
  %1 = ds.add %c, %a : tensor<2x2xf32>, tensor<2xf32>
  %2 = ds.mul %1, %0 : tensor<2x2xf32>, tensor<2xf32>
  %3 = ds.reduce_mean %2 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x2xf32>
  return %3 : tensor<f32>
}
