// The plan has an arena per memory space: device, pinned host and
// file-backed (NVMe). A persistent argument with ds.space lies in that
// space's arena (its ds.offset is an offset there) and takes nothing of the
// device arena; kernels read and write only device memory.
// RUN: dsopt-opt %s -split-input-file --pass-pipeline='builtin.module(ds-plan-memory)' -verify-diagnostics | FileCheck %s

// The parameter is on the device; the optimizer state in host memory, the
// second one in the file-backed arena, each at the bottom of its arena (file
// slots are whole 4096-byte blocks, so the second file state starts at 4096).
// CHECK: module attributes {ds.memory = #ds.memory_plan<arena_bytes = 128, persistent_bytes = 64, peak_live_bytes = 128, alignment = 64, host_bytes = 64, host_persistent_bytes = 64, file_bytes = 8192, file_persistent_bytes = 8192>}
// CHECK-LABEL: func.func @step
// CHECK-SAME: %arg0: tensor<4xf32> {ds.offset = 0 : i64, ds.param
// CHECK-SAME: %arg1: tensor<4xf32> {ds.offset = 0 : i64, ds.space = #ds.space<host>, ds.state = #ds.state<optimizer, role = "exp_avg", param = "p">}
// CHECK-SAME: %arg2: tensor<8xf32> {ds.offset = 0 : i64, ds.space = #ds.space<file>, ds.state = #ds.state<optimizer, role = "exp_avg_sq", param = "p">}
// CHECK-SAME: %arg3: tensor<4xf32> {ds.offset = 4096 : i64, ds.space = #ds.space<file>, ds.state = #ds.state<optimizer, role = "other", param = "p">}
// CHECK-SAME: attributes {ds.memory = #ds.memory_plan<arena_bytes = 128, persistent_bytes = 64, peak_live_bytes = 128, alignment = 64, host_bytes = 64, host_persistent_bytes = 64, file_bytes = 8192, file_persistent_bytes = 8192>}
// CHECK: ds.neg %arg0 {ds.buffers = array<i64: 64>}
module {
  func.func @step(%p: tensor<4xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<4xf32>>},
                  %m: tensor<4xf32> {ds.state = #ds.state<optimizer, role = "exp_avg", param = "p">, ds.space = #ds.space<host>},
                  %v: tensor<8xf32> {ds.state = #ds.state<optimizer, role = "exp_avg_sq", param = "p">, ds.space = #ds.space<file>},
                  %o: tensor<4xf32> {ds.state = #ds.state<optimizer, role = "other", param = "p">, ds.space = #ds.space<file>})
      -> (tensor<4xf32> {ds.output = "y"}) {
    %y = ds.neg %p : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// A device plan alone prints as before: the empty spaces are left out.
// CHECK: module attributes {ds.memory = #ds.memory_plan<arena_bytes = 128, persistent_bytes = 64, peak_live_bytes = 128, alignment = 64>}
module {
  func.func @step(%p: tensor<4xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<4xf32>>})
      -> (tensor<4xf32> {ds.output = "y"}) {
    %y = ds.neg %p : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

module {
  func.func @step(%p: tensor<4xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<4xf32>>, ds.space = #ds.space<host>})
      -> (tensor<4xf32> {ds.output = "y"}) {
    // expected-error @below {{reads operand 0 from host memory; a kernel reads only device memory (copy it to the device first)}}
    %y = ds.neg %p : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

module {
  // expected-error @below {{result 0 updates argument 1 in file memory, but it is computed in device memory (copy the update there with a ds.transfer)}}
  func.func @step(%p: tensor<4xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<4xf32>>},
                  %m: tensor<4xf32> {ds.state = #ds.state<optimizer, role = "exp_avg", param = "p">, ds.space = #ds.space<file>})
      -> (tensor<4xf32> {ds.updates = 1 : i64}) {
    %y = ds.neg %p : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

module {
  // expected-error @below {{'ds.space' applies only to a persistent argument (ds.param or ds.state)}}
  func.func @step(%x: tensor<4xf32> {ds.input = "x", ds.space = #ds.space<host>})
      -> (tensor<4xf32> {ds.output = "y"}) {
    %y = ds.neg %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}
