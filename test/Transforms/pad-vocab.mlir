// ds-pad-vocab: a 16-bit LM head whose vocabulary is not a multiple of 8
// is rebuilt on the vocabulary rounded up (w padded with zero rows, the
// padding classes' scores -65504 through a bias, the weight gradient
// sliced back), and the labels' input records the classes the loss takes;
// anything else is left as it is.
// RUN: dsopt-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(ds-pad-vocab))' | FileCheck %s

// The head through a reshape, the input gradient through one, the weight
// gradient on the 2-D view; the labels' range merges with the ignored
// value.
// CHECK-LABEL: func.func @head
// CHECK-SAME: %arg2: tensor<12xi64> {ds.index_range = array<i64: 0, 13, -100>}
// CHECK: %[[Z:.*]] = ds.fill {value = 0.000000e+00 : f64} : tensor<3x8xbf16>
// CHECK: %[[WP:.*]] = ds.concat %arg1, %[[Z]] {axis = 0 : i64} : tensor<13x8xbf16>, tensor<3x8xbf16>
// CHECK: %[[B0:.*]] = ds.fill {value = 0.000000e+00 : f64} : tensor<13xbf16>
// CHECK: %[[B1:.*]] = ds.fill {value = -6.550400e+04 : f64} : tensor<3xbf16>
// CHECK: %[[B:.*]] = ds.concat %[[B0]], %[[B1]] {axis = 0 : i64} : tensor<13xbf16>, tensor<3xbf16>
// CHECK: %[[L:.*]] = ds.matmul_bias %arg0, %[[WP]], %[[B]] {ds.forward_id = 2 : i64, transpose_rhs} : tensor<2x6x8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>
// CHECK: %[[S:.*]] = ds.reshape %[[L]] {{.*}}: tensor<2x6x16xbf16> -> tensor<12x16xbf16>
// CHECK: %[[LOSS:[a-z_0-9]+]], %[[G:[a-z_0-9]+]] = ds.softmax_cross_entropy_with_grad %[[S]], %arg2, %arg4 {ds.forward_id = 0 : i64, ignore_index = -100 : i64} : tensor<12x16xbf16>
// CHECK: %[[GV:.*]] = ds.reshape %[[G]] {{.*}}: tensor<12x16xbf16> -> tensor<2x6x16xbf16>
// CHECK: %[[DX:.*]] = ds.matmul %[[GV]], %[[WP]] {ds.grad_of = 2 : i64} : tensor<2x6x16xbf16>, tensor<16x8xbf16>
// CHECK: %[[DWP:.*]] = ds.matmul %[[G]], %arg3 {ds.grad_of = 2 : i64, transpose_lhs} : tensor<12x16xbf16>, tensor<12x8xbf16>
// CHECK: %[[DW:.*]] = ds.slice %[[DWP]] {ds.grad_of = 2 : i64, offsets = array<i64: 0, 0>, strides = array<i64: 1, 1>} : tensor<16x8xbf16> -> tensor<13x8xbf16>
// CHECK: return %[[LOSS]], %[[DX]], %[[DW]]
func.func @head(%x: tensor<2x6x8xbf16>, %w: tensor<13x8xbf16>, %t: tensor<12xi64>,
                %h: tensor<12x8xbf16>, %seed: tensor<f32>)
    -> (tensor<f32>, tensor<2x6x8xbf16>, tensor<13x8xbf16>) {
  %l = ds.matmul %x, %w {ds.forward_id = 2 : i64, transpose_rhs} : tensor<2x6x8xbf16>, tensor<13x8xbf16>
  %s = ds.reshape %l {ds.forward_id = 1 : i64} : tensor<2x6x13xbf16> -> tensor<12x13xbf16>
  %loss, %g = ds.softmax_cross_entropy_with_grad %s, %t, %seed {ds.forward_id = 0 : i64, ignore_index = -100 : i64} : tensor<12x13xbf16>, tensor<12xi64>, tensor<f32>
  %gv = ds.reshape %g {ds.grad_of = 1 : i64} : tensor<12x13xbf16> -> tensor<2x6x13xbf16>
  %dx = ds.matmul %gv, %w {ds.grad_of = 2 : i64} : tensor<2x6x13xbf16>, tensor<13x8xbf16>
  %dw = ds.matmul %g, %h {ds.grad_of = 2 : i64, transpose_lhs} : tensor<12x13xbf16>, tensor<12x8xbf16>
  return %loss, %dx, %dw : tensor<f32>, tensor<2x6x8xbf16>, tensor<13x8xbf16>
}

// -----

// f32 scores, a vocabulary already a multiple of 8, labels that are not an
// input (a slice of one), and a gradient read by another op: unchanged.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: ds.fill
// CHECK-NOT: ds.index_range
// CHECK-NOT: ds.matmul_bias
// CHECK: return
func.func @left_alone(%x: tensor<4x8xf32>, %w: tensor<13x8xf32>, %t: tensor<4xi64>,
                      %xb: tensor<4x8xbf16>, %wb: tensor<16x8xbf16>, %wc: tensor<13x8xbf16>,
                      %tt: tensor<5xi64>, %seed: tensor<f32>)
    -> (tensor<f32>, tensor<4x8xf32>, tensor<f32>, tensor<4x8xbf16>, tensor<f32>, tensor<4x8xbf16>,
        tensor<f32>, tensor<4x13xbf16>) {
  %l = ds.matmul %x, %w {transpose_rhs} : tensor<4x8xf32>, tensor<13x8xf32>
  %loss, %g = ds.softmax_cross_entropy_with_grad %l, %t, %seed : tensor<4x13xf32>, tensor<4xi64>, tensor<f32>
  %dx = ds.matmul %g, %w : tensor<4x13xf32>, tensor<13x8xf32>
  %l2 = ds.matmul %xb, %wb {transpose_rhs} : tensor<4x8xbf16>, tensor<16x8xbf16>
  %loss2, %g2 = ds.softmax_cross_entropy_with_grad %l2, %t, %seed : tensor<4x16xbf16>, tensor<4xi64>, tensor<f32>
  %dx2 = ds.matmul %g2, %wb : tensor<4x16xbf16>, tensor<16x8xbf16>
  %t3 = ds.slice %tt {offsets = array<i64: 1>, strides = array<i64: 1>} : tensor<5xi64> -> tensor<4xi64>
  %l3 = ds.matmul %xb, %wc {transpose_rhs} : tensor<4x8xbf16>, tensor<13x8xbf16>
  %loss3, %g3 = ds.softmax_cross_entropy_with_grad %l3, %t3, %seed : tensor<4x13xbf16>, tensor<4xi64>, tensor<f32>
  %dx3 = ds.matmul %g3, %wc : tensor<4x13xbf16>, tensor<13x8xbf16>
  %l4 = ds.matmul %xb, %wc {transpose_rhs} : tensor<4x8xbf16>, tensor<13x8xbf16>
  %loss4, %g4 = ds.softmax_cross_entropy_with_grad %l4, %t, %seed : tensor<4x13xbf16>, tensor<4xi64>, tensor<f32>
  return %loss, %dx, %loss2, %dx2, %loss3, %dx3, %loss4, %g4 : tensor<f32>, tensor<4x8xf32>, tensor<f32>, tensor<4x8xbf16>, tensor<f32>, tensor<4x8xbf16>, tensor<f32>, tensor<4x13xbf16>
}
