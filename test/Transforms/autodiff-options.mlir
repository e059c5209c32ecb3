// ds-autodiff's options: --loss picks an output, a frozen pattern that
// matches nothing is an error, and so is an unknown loss.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff{loss=b})' | FileCheck %s
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff{loss=b frozen=p,nothing*})' 2>&1 | FileCheck %s --check-prefix=FROZEN
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff{loss=c})' 2>&1 | FileCheck %s --check-prefix=LOSS

// CHECK: func.func @main_grad
// CHECK-SAME: -> (tensor<f32> {ds.output = "b"}, tensor<f32> {ds.grad = "p"})
// FROZEN: error: --frozen: 'nothing*' matches no initializer
// LOSS: error: the model has no output named 'c'; its outputs are 'a', 'b'
func.func @main(%p: tensor<f32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<f32>>})
    -> (tensor<f32> {ds.output = "a"}, tensor<f32> {ds.output = "b"}) {
  %0 = ds.mul %p, %p : tensor<f32>, tensor<f32>
  return %p, %0 : tensor<f32>, tensor<f32>
}
