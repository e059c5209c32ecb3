// Planning a training step: persistent state (parameters and states, by
// name) has one slot for all functions at the bottom of the arena; updated
// values are computed straight into their argument's slot when the old
// value is dead by then, or copied at the end otherwise.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-plan-memory)' | FileCheck %s

// CHECK: module attributes {ds.memory = #ds.memory_plan<arena_bytes = [[ARENA:[0-9]+]], persistent_bytes = 192,
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: %arg1: tensor<4xf32> {ds.offset = 0 : i64
// CHECK-SAME: %arg2: tensor<4xf32> {ds.offset = 64 : i64, ds.state = #ds.state<accumulator, param = "p">}
// The accumulation writes over the accumulator in place.
// CHECK: ds.add %arg2, %{{.*}} {ds.buffers = array<i64: 64>
// CHECK-LABEL: func.func @optimizer_step
// CHECK-SAME: %arg0: tensor<4xf32> {ds.offset = 0 : i64
// CHECK-SAME: %arg1: tensor<4xf32> {ds.offset = 64 : i64, ds.state = #ds.state<accumulator, param = "p">}
// CHECK-SAME: %arg2: tensor<4xf32> {ds.offset = 128 : i64, ds.state = #ds.state<optimizer, role = "momentum_buffer", param = "p">}
// The update reads the parameter and writes it in place.
// CHECK: ds.sgd %arg3, %arg4, %arg0, %arg1, %arg2 {ds.buffers = array<i64: 0, 128>
// The reset of the accumulator runs after its last read, in its slot.
// CHECK: ds.fill {ds.buffers = array<i64: 64>
// The parameter's old value is still read after this op: not in place.
// CHECK-LABEL: func.func @late_read
// CHECK: %[[NEW:.*]] = ds.neg %arg0 {ds.buffers = array<i64: [[T:[0-9]+]]>}
// CHECK: ds.add %arg0, %[[NEW]] {ds.buffers = array<i64: {{[0-9]+}}>

module {
  func.func @micro_step(%x: tensor<4xf32> {ds.input = "x"},
                        %p: tensor<4xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<4xf32>>},
                        %acc: tensor<4xf32> {ds.state = #ds.state<accumulator, param = "p">})
      -> (tensor<f32> {ds.output = "loss"}, tensor<4xf32> {ds.updates = 2 : i64}) {
    %0 = ds.mul %x, %p : tensor<4xf32>, tensor<4xf32>
    %1 = ds.reduce_sum %0 {axes = array<i64: 0>, keepdims = false} : tensor<4xf32>
    %2 = ds.add %acc, %x : tensor<4xf32>, tensor<4xf32>
    return %1, %2 : tensor<f32>, tensor<4xf32>
  }
  func.func @optimizer_step(%p: tensor<4xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<4xf32>>},
                            %acc: tensor<4xf32> {ds.state = #ds.state<accumulator, param = "p">},
                            %buf: tensor<4xf32> {ds.state = #ds.state<optimizer, role = "momentum_buffer", param = "p">},
                            %lr: tensor<f32> {ds.input = "lr"}, %step: tensor<i64> {ds.input = "step"})
      -> (tensor<4xf32> {ds.updates = 0 : i64}, tensor<4xf32> {ds.updates = 2 : i64}, tensor<4xf32> {ds.updates = 1 : i64}) {
    %0:2 = ds.sgd %lr, %step, %p, %acc, %buf {momentum = 0.9 : f32} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
    %1 = ds.fill {value = 0.0} : tensor<4xf32>
    return %0#0, %0#1, %1 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  }
  func.func @late_read(%p: tensor<4xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<4xf32>>})
      -> (tensor<4xf32> {ds.updates = 0 : i64}, tensor<4xf32> {ds.output = "sum"}) {
    %0 = ds.neg %p : tensor<4xf32>
    %1 = ds.add %p, %0 : tensor<4xf32>, tensor<4xf32>
    return %0, %1 : tensor<4xf32>, tensor<4xf32>
  }
}
