// The gradient, optimizer and state ops of the training step print and parse
// back, in the custom and in the generic form, with their inferred types.
// RUN: dsopt-opt %s | dsopt-opt | FileCheck %s
// RUN: dsopt-opt %s --mlir-print-op-generic | dsopt-opt | FileCheck %s

// CHECK-LABEL: func.func @gradients
func.func @gradients(%y: tensor<2x5xf32>, %dy: tensor<2x5xf32>,
                     %x: tensor<2x3x4xf32>, %s: tensor<4xf32>,
                     %mean: tensor<2x3x1xf32>, %inv: tensor<2x3x1xf32>,
                     %dx: tensor<2x3x4xf32>, %labels: tensor<2xi64>,
                     %dl: tensor<f32>, %w: tensor<5xf32>,
                     %idx: tensor<2x3xi64>, %demb: tensor<2x3x4xf32>) {
  // CHECK: ds.softmax_grad %{{.*}}, %{{.*}} {axis = 1 : i64} : tensor<2x5xf32>
  %0 = ds.softmax_grad %y, %dy {axis = 1} : tensor<2x5xf32>
  // CHECK: ds.log_softmax_grad
  %1 = ds.log_softmax_grad %y, %dy {axis = 0} : tensor<2x5xf32>
  // CHECK: ds.layer_norm_grad {{.*}} : tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>, tensor<2x3x4xf32>
  %2:3 = ds.layer_norm_grad %x, %s, %mean, %inv, %dx {axis = 2} : tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>, tensor<2x3x4xf32>
  // CHECK: ds.softmax_cross_entropy_grad {{.*}} {ignore_index = -100 : i64}
  %3 = ds.softmax_cross_entropy_grad %dl, %y, %labels, %w {ignore_index = -100} : tensor<f32>, tensor<2x5xf32>, tensor<2xi64>, tensor<5xf32>
  // CHECK: ds.nll_loss_grad {{.*}} -> tensor<2x5xf32>
  %4 = ds.nll_loss_grad %dl, %labels {reduction = #ds<reduction sum>} : tensor<f32>, tensor<2xi64> -> tensor<2x5xf32>
  // CHECK: ds.gather_grad {{.*}} {axis = 0 : i64} : tensor<2x3x4xf32>, tensor<2x3xi64> -> tensor<10x4xf32>
  %5 = ds.gather_grad %demb, %idx {axis = 0} : tensor<2x3x4xf32>, tensor<2x3xi64> -> tensor<10x4xf32>
  // CHECK: ds.slice_grad {{.*}} : tensor<2x5xf32> -> tensor<4x10xf32>
  %6 = ds.slice_grad %dy {offsets = array<i64: 1, 0>, strides = array<i64: 2, 2>} : tensor<2x5xf32> -> tensor<4x10xf32>
  return
}

// CHECK-LABEL: func.func @window_gradients
func.func @window_gradients(%x: tensor<2x4x6x6xf32>, %w: tensor<6x2x3x3xf32>,
                            %dy: tensor<2x6x3x4xf32>, %dp: tensor<2x4x3x3xf32>) {
  // CHECK: ds.conv_grad_input {{.*}} -> tensor<2x4x6x6xf32>
  %0 = ds.conv_grad_input %dy, %w {strides = array<i64: 2, 1>, pads = array<i64: 1, 0, 1, 2>, dilations = array<i64: 1, 2>, group = 2} : tensor<2x6x3x4xf32>, tensor<6x2x3x3xf32> -> tensor<2x4x6x6xf32>
  // CHECK: ds.conv_grad_weight {{.*}} -> tensor<6x2x3x3xf32>
  %1 = ds.conv_grad_weight %dy, %x {strides = array<i64: 2, 1>, pads = array<i64: 1, 0, 1, 2>, dilations = array<i64: 1, 2>, group = 2} : tensor<2x6x3x4xf32>, tensor<2x4x6x6xf32> -> tensor<6x2x3x3xf32>
  // CHECK: ds.max_pool_grad {{.*}} : tensor<2x4x3x3xf32>, tensor<2x4x6x6xf32>
  %2 = ds.max_pool_grad %dp, %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : tensor<2x4x3x3xf32>, tensor<2x4x6x6xf32>
  // CHECK: ds.avg_pool_grad {{.*}} : tensor<2x4x3x3xf32> -> tensor<2x4x6x6xf32>
  %3 = ds.avg_pool_grad %dp {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : tensor<2x4x3x3xf32> -> tensor<2x4x6x6xf32>
  return
}

// CHECK-LABEL: func.func @optimizers
func.func @optimizers(%lr: tensor<f32>, %step: tensor<i64>, %p: tensor<8x4xf32>,
                      %g: tensor<8x4xf32>, %m: tensor<8x4xf32>, %v: tensor<8x4xf32>,
                      %b: tensor<4xf32>) -> tensor<8x4xf32> {
  // CHECK: ds.adamw {{.*}} {decoupled = false, weight_decay = 0.00999999977 : f32}
  %0:3 = ds.adamw %lr, %step, %p, %g, %m, %v {weight_decay = 0.01 : f32, decoupled = false} : tensor<f32>, tensor<i64>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
  // CHECK: ds.sgd {{.*}} {momentum = 0.899999976 : f32, nesterov}
  %1:2 = ds.sgd %lr, %step, %p, %g, %m {momentum = 0.9 : f32, nesterov} : tensor<f32>, tensor<i64>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
  // CHECK: ds.lion
  %2:2 = ds.lion %lr, %p, %g, %m {beta2 = 0.98 : f32} : tensor<f32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
  // CHECK: ds.sum_of_squares {{.*}} : tensor<8x4xf32>, tensor<4xf32>
  %3 = ds.sum_of_squares %g, %b : tensor<8x4xf32>, tensor<4xf32>
  // CHECK: ds.fill {value = 0.000000e+00 : f64} : tensor<8x4xf32>
  %4 = ds.fill {value = 0.0} : tensor<8x4xf32>
  return %4 : tensor<8x4xf32>
}
