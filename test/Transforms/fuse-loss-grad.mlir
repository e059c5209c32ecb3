// ds-fuse-loss-grad: softmax cross-entropy and the gradient that reads its
// log-probabilities become one ds.softmax_cross_entropy_with_grad at the
// loss, when the gradient's seed is available there; otherwise nothing
// changes.
// RUN: dsopt-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(ds-fuse-loss-grad))' | FileCheck %s

// Autodiff's constant seed, bf16 scores with an f32 loss, class weights and
// an ignored label: one op at the loss, its attributes and the loss's
// ds.space kept; the log-probabilities are gone.
// CHECK-LABEL: func.func @constant_seed
// CHECK: %[[ONE:.*]] = ds.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[LOSS:[a-z_0-9]+]], %[[DX:[a-z_0-9]+]] = ds.softmax_cross_entropy_with_grad %arg0, %arg1, %[[ONE]], %arg2 {ds.space = #ds.space<device>, ignore_index = -100 : i64, reduction = #ds<reduction sum>} : tensor<4x6xbf16>, tensor<4xi64>, tensor<f32>, tensor<6xbf16>
// CHECK-NEXT: %[[N:.*]] = ds.neg %arg0
// CHECK-NOT: ds.softmax_cross_entropy
// CHECK: return %[[LOSS]], %[[DX]], %[[N]]
func.func @constant_seed(%x: tensor<4x6xbf16>, %t: tensor<4xi64>, %w: tensor<6xbf16>)
    -> (tensor<f32>, tensor<4x6xbf16>, tensor<4x6xbf16>) {
  %one = ds.constant dense<1.0> : tensor<f32>
  %loss, %lp = ds.softmax_cross_entropy %x, %t, %w {ds.space = #ds.space<device>, reduction = #ds<reduction sum>, ignore_index = -100 : i64} : tensor<4x6xbf16>, tensor<4xi64>, tensor<6xbf16>
  %n = ds.neg %x : tensor<4x6xbf16>
  %dx = ds.softmax_cross_entropy_grad %one, %lp, %t, %w {ds.space = #ds.space<device>, reduction = #ds<reduction sum>, ignore_index = -100 : i64} : tensor<f32>, tensor<4x6xbf16>, tensor<4xi64>, tensor<6xbf16>
  return %loss, %dx, %n : tensor<f32>, tensor<4x6xbf16>, tensor<4x6xbf16>
}

// -----

// The loss scale, a runtime input, and a mean over [N, C, d] scores.
// CHECK-LABEL: func.func @loss_scale_input
// CHECK-NEXT: %[[LOSS:[a-z_0-9]+]], %[[DX:[a-z_0-9]+]] = ds.softmax_cross_entropy_with_grad %arg0, %arg1, %arg2 : tensor<2x5x3xf32>, tensor<2x3xi32>, tensor<f32>
// CHECK-NEXT: return %[[LOSS]], %[[DX]]
func.func @loss_scale_input(%x: tensor<2x5x3xf32>, %t: tensor<2x3xi32>, %scale: tensor<f32>)
    -> (tensor<f32>, tensor<2x5x3xf32>) {
  %loss, %lp = ds.softmax_cross_entropy %x, %t : tensor<2x5x3xf32>, tensor<2x3xi32>
  %dx = ds.softmax_cross_entropy_grad %scale, %lp, %t : tensor<f32>, tensor<2x5x3xf32>, tensor<2x3xi32>
  return %loss, %dx : tensor<f32>, tensor<2x5x3xf32>
}

// -----

// A seed computed after the loss from values available before it (here
// the loss scale times a constant) moves up to the loss.
// CHECK-LABEL: func.func @seed_moves_up
// CHECK-NEXT: %[[TWO:.*]] = ds.constant
// CHECK-NEXT: %[[S:.*]] = ds.mul %arg2, %[[TWO]]
// CHECK-NEXT: %[[LOSS:[a-z_0-9]+]], %[[DX:[a-z_0-9]+]] = ds.softmax_cross_entropy_with_grad %arg0, %arg1, %[[S]] {reduction = #ds<reduction none>} : tensor<4x6xf32>, tensor<4xi64>, tensor<4xf32>
// CHECK-NEXT: %[[N:.*]] = ds.neg %[[LOSS]]
// CHECK-NEXT: return %[[N]], %[[DX]]
func.func @seed_moves_up(%x: tensor<4x6xf32>, %t: tensor<4xi64>, %scale: tensor<4xf32>)
    -> (tensor<4xf32>, tensor<4x6xf32>) {
  %two = ds.constant dense<2.0> : tensor<4xf32>
  %loss, %lp = ds.softmax_cross_entropy %x, %t {reduction = #ds<reduction none>} : tensor<4x6xf32>, tensor<4xi64>
  %n = ds.neg %loss : tensor<4xf32>
  %s = ds.mul %scale, %two : tensor<4xf32>, tensor<4xf32>
  %dx = ds.softmax_cross_entropy_grad %s, %lp, %t {reduction = #ds<reduction none>} : tensor<4xf32>, tensor<4x6xf32>, tensor<4xi64>
  return %n, %dx : tensor<4xf32>, tensor<4x6xf32>
}

// -----

// Not fused: the log-probabilities have another reader; the seed depends
// on the loss; the gradient's ignore_index is not the loss's.
// CHECK-LABEL: func.func @not_fused
// CHECK-NOT: softmax_cross_entropy_with_grad
// CHECK: ds.softmax_cross_entropy %arg0
// CHECK: ds.exp %log_prob
// CHECK: ds.softmax_cross_entropy_grad
// CHECK: ds.softmax_cross_entropy %arg0
// CHECK: %[[SEED:.*]] = ds.mul %loss_{{[0-9]+}}, %loss_{{[0-9]+}}
// CHECK: ds.softmax_cross_entropy_grad %[[SEED]]
// CHECK: ds.softmax_cross_entropy %arg0, %arg1 {ignore_index = 1 : i64}
// CHECK: ds.softmax_cross_entropy_grad {{.*}} {ignore_index = 2 : i64}
// CHECK-NOT: softmax_cross_entropy_with_grad
func.func @not_fused(%x: tensor<4x6xf32>, %t: tensor<4xi64>)
    -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<f32>) {
  %one = ds.constant dense<1.0> : tensor<f32>
  %l0, %lp0 = ds.softmax_cross_entropy %x, %t : tensor<4x6xf32>, tensor<4xi64>
  %e = ds.exp %lp0 : tensor<4x6xf32>
  %d0 = ds.softmax_cross_entropy_grad %one, %lp0, %t : tensor<f32>, tensor<4x6xf32>, tensor<4xi64>
  %l1, %lp1 = ds.softmax_cross_entropy %x, %t : tensor<4x6xf32>, tensor<4xi64>
  %seed = ds.mul %l1, %l1 : tensor<f32>, tensor<f32>
  %d1 = ds.softmax_cross_entropy_grad %seed, %lp1, %t : tensor<f32>, tensor<4x6xf32>, tensor<4xi64>
  %l2, %lp2 = ds.softmax_cross_entropy %x, %t {ignore_index = 1 : i64} : tensor<4x6xf32>, tensor<4xi64>
  %d2 = ds.softmax_cross_entropy_grad %one, %lp2, %t {ignore_index = 2 : i64} : tensor<f32>, tensor<4x6xf32>, tensor<4xi64>
  return %e, %d0, %d1, %d2, %l2 : tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<f32>
}
