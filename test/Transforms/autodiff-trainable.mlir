// ds-autodiff on a small network, with a frozen parameter.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff{frozen=frozen.*},canonicalize,cse)' | FileCheck %s

// Trainable: float, reaches the loss, not frozen. The integer parameter, the
// frozen bias and the unused parameter do not train.
// CHECK-LABEL: func.func @main_grad
// CHECK-SAME: name = "w", trainable = true
// CHECK-SAME: name = "idx", trainable = false
// CHECK-SAME: name = "frozen.bias", trainable = false
// CHECK-SAME: name = "unused", trainable = false
// CHECK-SAME: -> (tensor<f32> {ds.output = "loss"}, tensor<3x2xf32> {ds.grad = "w"})
// d tanh = 1 - y^2, then the weight gradient x^T dy.
// CHECK: %[[Y:.*]] = ds.tanh
// CHECK: ds.mul %[[Y]], %[[Y]]
// CHECK: ds.sub
// CHECK: %[[G:.*]] = ds.matmul %arg0, %{{.*}} {ds.grad_of = {{[0-9]+}} : i64, transpose_lhs} : tensor<4x3xf32>, tensor<4x2xf32>
// CHECK: return %{{.*}}, %[[G]]
func.func @main(%x: tensor<4x3xf32> {ds.input = "x"},
                %w: tensor<3x2xf32> {ds.param = #ds.param<name = "w", trainable = true, data = dense<0.5> : tensor<3x2xf32>>},
                %idx: tensor<4xi64> {ds.param = #ds.param<name = "idx", trainable = false, data = dense<1> : tensor<4xi64>>},
                %f: tensor<2xf32> {ds.param = #ds.param<name = "frozen.bias", trainable = true, data = dense<0.1> : tensor<2xf32>>},
                %u: tensor<2xf32> {ds.param = #ds.param<name = "unused", trainable = true, data = dense<0.1> : tensor<2xf32>>})
    -> (tensor<f32> {ds.output = "loss"}, tensor<4x2xf32> {ds.output = "logits"}) {
  %0 = ds.matmul %x, %w : tensor<4x3xf32>, tensor<3x2xf32>
  %1 = ds.add %0, %f : tensor<4x2xf32>, tensor<2xf32>
  %2 = ds.tanh %1 : tensor<4x2xf32>
  %3 = ds.mul %2, %2 : tensor<4x2xf32>, tensor<4x2xf32>
  %4 = ds.reduce_sum %3 {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x2xf32>
  return %4, %2 : tensor<f32>, tensor<4x2xf32>
}

