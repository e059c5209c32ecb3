// Two column/row pairs back to back, the second column-parallel product
// reading the first's completed partial sum directly (no residual, no norm
// in between): the value g completes is what f hands to the next pair, so
// each pair keeps exactly one all-reduce forward (g) and one backward (the
// derivative of f).
// RUN: dsopt-opt %s --ds-tensor-parallel='size=2' | FileCheck %s
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-tensor-parallel{size=2},ds-autodiff,canonicalize,cse)' | FileCheck %s --check-prefix=GRAD

// CHECK-LABEL: func.func @main
// CHECK: %[[X:.*]] = ds.mul %arg0, %arg5
// CHECK-NEXT: %[[F1:.*]] = ds.tp_copy %[[X]] on @grid {grid_axis = 1 : i64} : tensor<2x4xf32>
// CHECK-NEXT: %[[U1:.*]] = ds.matmul %[[F1]], %arg1 : tensor<2x4xf32>, tensor<4x4xf32>
// CHECK-NEXT: %[[R1:.*]] = ds.matmul %[[U1]], %arg2 : tensor<2x4xf32>, tensor<4x4xf32>
// CHECK-NEXT: %[[G1:.*]] = shard.all_reduce %[[R1]] on @grid grid_axes = [1] : tensor<2x4xf32> -> tensor<2x4xf32>
// CHECK-NEXT: %[[F2:.*]] = ds.tp_copy %[[G1]] on @grid {grid_axis = 1 : i64} : tensor<2x4xf32>
// CHECK-NEXT: %[[U2:.*]] = ds.matmul %[[F2]], %arg3 : tensor<2x4xf32>, tensor<4x4xf32>
// CHECK-NEXT: %[[R2:.*]] = ds.matmul %[[U2]], %arg4 : tensor<2x4xf32>, tensor<4x4xf32>
// CHECK-NEXT: %[[G2:.*]] = shard.all_reduce %[[R2]] on @grid grid_axes = [1] : tensor<2x4xf32> -> tensor<2x4xf32>
// CHECK-NEXT: ds.reduce_sum %[[G2]]
// CHECK-NOT: shard.all_reduce
// CHECK-NOT: ds.tp_copy

// Backward: the two g's forward, then the derivatives of the two f's (the
// all-reduces of the gradients of the pairs' inputs: the second pair's
// feeds the first pair's weights, the first's the scale), nothing else.
// GRAD-LABEL: func.func @main_grad
// GRAD: ds.tp_copy {{.*}}ds.forward_id
// GRAD: shard.all_reduce {{.*}} grid_axes = [1] {ds.forward_id
// GRAD: ds.tp_copy {{.*}}ds.forward_id
// GRAD: shard.all_reduce {{.*}} grid_axes = [1] {ds.forward_id
// GRAD-NOT: ds.tp_copy
// GRAD-NOT: shard.all_reduce
// GRAD: shard.all_reduce {{.*}} grid_axes = [1] {ds.grad_of = {{.*}} : tensor<2x4xf32>
// GRAD-NOT: shard.all_reduce
// GRAD: shard.all_reduce {{.*}} grid_axes = [1] {ds.grad_of = {{.*}} : tensor<2x4xf32>
// GRAD-NOT: shard.all_reduce
// GRAD: return
func.func @main(%arg0: tensor<2x4xf32> {ds.input = "x"},
    %arg1: tensor<4x8xf32> {ds.param = #ds.param<name = "up1.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 128>>},
    %arg2: tensor<8x4xf32> {ds.param = #ds.param<name = "down1.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 128>>},
    %arg3: tensor<4x8xf32> {ds.param = #ds.param<name = "up2.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 128>>},
    %arg4: tensor<8x4xf32> {ds.param = #ds.param<name = "down2.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 128>>},
    %arg5: tensor<4xf32> {ds.param = #ds.param<name = "scale", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 16>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %x = ds.mul %arg0, %arg5 : tensor<2x4xf32>, tensor<4xf32>
  %u1 = ds.matmul %x, %arg1 : tensor<2x4xf32>, tensor<4x8xf32>
  %r1 = ds.matmul %u1, %arg2 : tensor<2x8xf32>, tensor<8x4xf32>
  %u2 = ds.matmul %r1, %arg3 : tensor<2x4xf32>, tensor<4x8xf32>
  %r2 = ds.matmul %u2, %arg4 : tensor<2x8xf32>, tensor<8x4xf32>
  %loss = ds.reduce_sum %r2 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32>
  return %loss : tensor<f32>
}
