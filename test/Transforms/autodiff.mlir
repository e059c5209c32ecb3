// ds-autodiff: which parameters train, the loss, the backward ops each VJP
// builds, gradients of tied parameters summed, and its errors.
// RUN: dsopt-opt %s -split-input-file --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse)' -verify-diagnostics | FileCheck %s

// A tied embedding: the gather's scatter-add and the head's product add up.
// The head's weight gradient is one product over all rows, not a batch.
// CHECK-LABEL: func.func @main_grad
// CHECK: %[[ROWS:.*]] = ds.reshape %{{.*}} : tensor<2x3x4xf32> -> tensor<6x4xf32>
// CHECK: %[[HEAD:.*]] = ds.matmul %{{.*}}, %[[ROWS]] {ds.grad_of = {{[0-9]+}} : i64, transpose_lhs} : tensor<6x5xf32>, tensor<6x4xf32>
// CHECK: %[[EMB:.*]] = ds.gather_grad %{{.*}}, %arg0 {axis = 0 : i64, ds.grad_of = {{[0-9]+}} : i64} : tensor<2x3x4xf32>, tensor<2x3xi64> -> tensor<5x4xf32>
// CHECK: %[[SUM:.*]] = ds.add %[[HEAD]], %[[EMB]]
// CHECK: return %{{.*}}, %[[SUM]] : tensor<f32>, tensor<5x4xf32>
func.func @main(%ids: tensor<2x3xi64> {ds.input = "ids"},
                %emb: tensor<5x4xf32> {ds.param = #ds.param<name = "wte", trainable = true, data = dense<0.5> : tensor<5x4xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.gather %emb, %ids {axis = 0} : tensor<5x4xf32>, tensor<2x3xi64>
  %1 = ds.matmul %0, %emb {transpose_rhs} : tensor<2x3x4xf32>, tensor<5x4xf32>
  %2 = ds.reduce_mean %1 {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<2x3x5xf32>
  return %2 : tensor<f32>
}

// -----

// Kernels of their own: softmax cross-entropy and layer norm.
// CHECK-LABEL: func.func @main_grad
// CHECK: %[[LOSS:.*]], %[[LOGP:.*]] = ds.softmax_cross_entropy
// CHECK: ds.softmax_cross_entropy_grad %{{.*}}, %[[LOGP]], %arg1 {ds.grad_of = {{[0-9]+}} : i64, ignore_index = -100 : i64}
// CHECK: %{{.*}}, %[[DS:.*]], %[[DB:.*]] = ds.layer_norm_grad %arg0, %arg2, %{{.*}}, %{{.*}}, %{{.*}} {axis = 1 : i64, ds.grad_of = {{[0-9]+}} : i64}
// CHECK: return %[[LOSS]], %[[DS]], %[[DB]]
func.func @main(%x: tensor<4x6xf32> {ds.input = "x"}, %y: tensor<4xi64> {ds.input = "y"},
                %s: tensor<6xf32> {ds.param = #ds.param<name = "ln.weight", trainable = true, data = dense<1.0> : tensor<6xf32>>},
                %b: tensor<6xf32> {ds.param = #ds.param<name = "ln.bias", trainable = true, data = dense<0.0> : tensor<6xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0:3 = ds.layer_norm %x, %s, %b {axis = 1} : tensor<4x6xf32>, tensor<6xf32>, tensor<6xf32>
  %1:2 = ds.softmax_cross_entropy %0#0, %y {ignore_index = -100} : tensor<4x6xf32>, tensor<4xi64>
  return %1#0 : tensor<f32>
}

// -----

// expected-error @+1 {{the model has several scalar floating-point outputs ('a', 'b'); choose the loss with --loss NAME}}
func.func @main(%p: tensor<f32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<f32>>})
    -> (tensor<f32> {ds.output = "a"}, tensor<f32> {ds.output = "b"}) {
  return %p, %p : tensor<f32>, tensor<f32>
}

// -----

// expected-error @+1 {{the model has no scalar floating-point output to use as the loss}}
func.func @main(%p: tensor<3xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<3xf32>>})
    -> (tensor<3xf32> {ds.output = "logits"}) {
  return %p : tensor<3xf32>
}

// -----

// The parameter does not reach the loss.
// expected-error @+1 {{no parameter trains}}
func.func @main(%x: tensor<f32> {ds.input = "x"}, %p: tensor<2xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<2xf32>>})
    -> (tensor<f32> {ds.output = "loss"}, tensor<2xf32> {ds.output = "other"}) {
  %0 = ds.mul %x, %x : tensor<f32>, tensor<f32>
  return %0, %p : tensor<f32>, tensor<2xf32>
}

// -----

func.func @main(%lr: tensor<f32> {ds.input = "lr"}, %step: tensor<i64> {ds.input = "step"},
                %p: tensor<4xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<4xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  // expected-error @+1 {{op 'ds.momentum' is on the path from the trained parameters to the loss but has no derivative}}
  %0:2 = ds.momentum %lr, %step, %p, %p, %p {alpha = 0.9 : f32, beta = 1.0 : f32, norm_coefficient = 0.0 : f32} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  %1 = ds.reduce_sum %0#0 {axes = array<i64: 0>, keepdims = false} : tensor<4xf32>
  return %1 : tensor<f32>
}
