// The running statistics of a training-mode batch norm held in parameters
// are state: not trained, their new values returned after the gradients by
// ds-autodiff and by ds-optimizer's micro step, each tied to its parameter
// (ds.updates) so every micro-batch writes them back. A statistic shared by
// two batch norms is refused.
// RUN: not dsopt-opt %s --split-input-file --ds-autodiff 2>/dev/null | FileCheck %s --check-prefix=GRAD
// RUN: not dsopt-opt %s --split-input-file --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=2})' 2>/dev/null | FileCheck %s --check-prefix=STEP
// RUN: not dsopt-opt %s --split-input-file --ds-autodiff 2>&1 >/dev/null | FileCheck %s --check-prefix=SHARED

// GRAD-LABEL: func.func @main_grad
// GRAD-SAME: %arg3: tensor<3xf32> {ds.param = #ds.param<name = "bn.running_mean", trainable = false
// GRAD-SAME: %arg4: tensor<3xf32> {ds.param = #ds.param<name = "bn.running_var", trainable = false
// GRAD-SAME: -> (tensor<f32> {ds.output = "loss"}, tensor<3xf32> {ds.grad = "bn.weight"}, tensor<3xf32> {ds.grad = "bn.bias"}, tensor<3xf32> {ds.updates = 3 : i64}, tensor<3xf32> {ds.updates = 4 : i64})
// GRAD: %{{.*}}, %[[M:[a-z_0-9]+]], %[[V:[a-z_0-9]+]], %{{.*}}, %{{.*}} = ds.batch_norm_train %arg0, %arg1, %arg2, %arg3, %arg4
// GRAD: return %{{.*}}, %{{.*}}, %{{.*}}, %[[M]], %[[V]] :

// The accumulators of the two trained parameters are arguments 5 and 6.
// STEP-LABEL: func.func @micro_step
// STEP-SAME: -> (tensor<f32> {ds.output = "loss"}, tensor<3xf32> {ds.updates = 5 : i64}, tensor<3xf32> {ds.updates = 6 : i64}, tensor<3xf32> {ds.updates = 3 : i64}, tensor<3xf32> {ds.updates = 4 : i64})
// STEP: %{{.*}}, %[[M:[a-z_0-9]+]], %[[V:[a-z_0-9]+]], %{{.*}}, %{{.*}} = ds.batch_norm_train %arg0, %arg1, %arg2, %arg3, %arg4 {{{.*}}unbiased_running_var = true
// STEP: return %{{.*}}, %{{.*}}, %{{.*}}, %[[M]], %[[V]] :
// STEP-LABEL: func.func @optimizer_step
// STEP-NOT: running_mean
// STEP: return
func.func @main(%x: tensor<4x3x2x2xf32> {ds.input = "x"},
                %s: tensor<3xf32> {ds.param = #ds.param<name = "bn.weight", trainable = true, data = dense<1.5> : tensor<3xf32>>},
                %b: tensor<3xf32> {ds.param = #ds.param<name = "bn.bias", trainable = true, data = dense<0.5> : tensor<3xf32>>},
                %m: tensor<3xf32> {ds.param = #ds.param<name = "bn.running_mean", trainable = true, data = dense<0.1> : tensor<3xf32>>},
                %v: tensor<3xf32> {ds.param = #ds.param<name = "bn.running_var", trainable = true, data = dense<1.2> : tensor<3xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %y:5 = ds.batch_norm_train %x, %s, %b, %m, %v {momentum = 0.9 : f32, unbiased_running_var = true} : tensor<4x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
  %sq = ds.mul %y#0, %y#0 : tensor<4x3x2x2xf32>, tensor<4x3x2x2xf32>
  %l = ds.reduce_sum %sq {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : tensor<4x3x2x2xf32>
  return %l : tensor<f32>
}

// -----

// SHARED: error: initializer 'shared' is a running statistic of 'ds.batch_norm_train' and is also read elsewhere
// SHARED-NOT: error
func.func @main(%x: tensor<4x3xf32> {ds.input = "x"},
                %s: tensor<3xf32> {ds.param = #ds.param<name = "s", trainable = true, data = dense<1.5> : tensor<3xf32>>},
                %m: tensor<3xf32> {ds.param = #ds.param<name = "shared", trainable = true, data = dense<0.0> : tensor<3xf32>>},
                %v: tensor<3xf32> {ds.param = #ds.param<name = "v", trainable = true, data = dense<1.0> : tensor<3xf32>>},
                %v2: tensor<3xf32> {ds.param = #ds.param<name = "v2", trainable = true, data = dense<1.1> : tensor<3xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %y:5 = ds.batch_norm_train %x, %s, %s, %m, %v : tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
  %z:5 = ds.batch_norm_train %y#0, %s, %s, %m, %v2 : tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
  %l = ds.reduce_sum %z#0 {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x3xf32>
  return %l : tensor<f32>
}
