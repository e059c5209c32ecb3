// Two biases added on branches that are summed (a residual block's two
// BatchNorms) have the same gradient, computed by equal backward ops, which
// ds-autodiff merges: the gradient function's result types are those of
// what its return holds after merging, not of the merged-away value.
// RUN: dsopt-opt %s --ds-autodiff | FileCheck %s

// CHECK-LABEL: func.func @main_grad
// CHECK-SAME: -> (tensor<f32> {ds.output = "loss"}, tensor<3xf32> {ds.grad = "s"}, tensor<3xf32> {ds.grad = "b1"}, tensor<3xf32> {ds.grad = "b2"})
// CHECK: %[[DB:.*]] = ds.reduce_sum %{{.*}} {axes = array<i64: 0>, ds.grad_of = {{[0-9]+}} : i64, keepdims = false} : tensor<2x3xf32>
// CHECK: return %{{.*}}, %{{.*}}, %[[DB]], %[[DB]] : tensor<f32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
func.func @main(%x: tensor<2x3xf32> {ds.input = "x"},
                %s: tensor<3xf32> {ds.param = #ds.param<name = "s", trainable = true, data = dense<0.5> : tensor<3xf32>>},
                %b1: tensor<3xf32> {ds.param = #ds.param<name = "b1", trainable = true, data = dense<1.5> : tensor<3xf32>>},
                %b2: tensor<3xf32> {ds.param = #ds.param<name = "b2", trainable = true, data = dense<2.0> : tensor<3xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.mul %x, %s : tensor<2x3xf32>, tensor<3xf32>
  %1 = ds.add %0, %b1 : tensor<2x3xf32>, tensor<3xf32>
  %2 = ds.add %x, %b2 : tensor<2x3xf32>, tensor<3xf32>
  %3 = ds.add %1, %2 : tensor<2x3xf32>, tensor<2x3xf32>
  %4 = ds.mul %3, %3 : tensor<2x3xf32>, tensor<2x3xf32>
  %5 = ds.reduce_sum %4 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x3xf32>
  return %5 : tensor<f32>
}
