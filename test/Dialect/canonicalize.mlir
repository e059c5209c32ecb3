// Folders and canonicalization patterns of the ds dialect.
// RUN: dsopt-opt %s -canonicalize -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @transpose_into_matmul
// CHECK-SAME: (%[[A:.*]]: tensor<4x8x3xf32>, %[[B:.*]]: tensor<4x5x8xf32>)
// CHECK-NEXT: %[[R:.*]] = ds.matmul %[[A]], %[[B]] {transpose_lhs, transpose_rhs} : tensor<4x8x3xf32>, tensor<4x5x8xf32>
// CHECK-NEXT: return %[[R]] : tensor<4x3x5xf32>
func.func @transpose_into_matmul(%a: tensor<4x8x3xf32>, %b: tensor<4x5x8xf32>) -> tensor<4x3x5xf32> {
  %at = ds.transpose %a {perm = array<i64: 0, 2, 1>} : tensor<4x8x3xf32>
  %bt = ds.transpose %b {perm = array<i64: 0, 2, 1>} : tensor<4x5x8xf32>
  %0 = ds.matmul %at, %bt : tensor<4x3x8xf32>, tensor<4x8x5xf32>
  return %0 : tensor<4x3x5xf32>
}

// -----

// A transpose that also moves batch axes is not a matmul flag.
// CHECK-LABEL: func.func @batch_transpose_stays
// CHECK: ds.transpose
// CHECK: ds.matmul %{{.*}}, %{{.*}} : tensor<8x4x3xf32>, tensor<3x5xf32>
func.func @batch_transpose_stays(%a: tensor<4x8x3xf32>, %b: tensor<3x5xf32>) -> tensor<8x4x5xf32> {
  %at = ds.transpose %a {perm = array<i64: 1, 0, 2>} : tensor<4x8x3xf32>
  %0 = ds.matmul %at, %b : tensor<8x4x3xf32>, tensor<3x5xf32>
  return %0 : tensor<8x4x5xf32>
}

// -----

// CHECK-LABEL: func.func @gemm_without_bias
// CHECK-NEXT: ds.matmul %{{.*}}, %{{.*}} {transpose_rhs} : tensor<2x8xf32>, tensor<5x8xf32>
// CHECK-NOT: ds.gemm
func.func @gemm_without_bias(%a: tensor<2x8xf32>, %b: tensor<5x8xf32>) -> tensor<2x5xf32> {
  %0 = ds.gemm %a, %b {transpose_b} : tensor<2x8xf32>, tensor<5x8xf32>
  return %0 : tensor<2x5xf32>
}

// -----

// Scaling or a bias keep the gemm.
// CHECK-LABEL: func.func @gemm_kept
// CHECK-COUNT-2: ds.gemm
func.func @gemm_kept(%a: tensor<2x8xf32>, %b: tensor<8x5xf32>, %c: tensor<5xf32>) -> (tensor<2x5xf32>, tensor<2x5xf32>) {
  %0 = ds.gemm %a, %b {alpha = 2.0 : f32} : tensor<2x8xf32>, tensor<8x5xf32>
  %1 = ds.gemm %a, %b, %c : tensor<2x8xf32>, tensor<8x5xf32>, tensor<5xf32>
  return %0, %1 : tensor<2x5xf32>, tensor<2x5xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_chain
// CHECK-NEXT: %[[R:.*]] = ds.reshape %{{.*}} : tensor<2x3x4xf32> -> tensor<24xf32>
// CHECK-NEXT: return %[[R]]
func.func @reshape_chain(%a: tensor<2x3x4xf32>) -> tensor<24xf32> {
  %0 = ds.reshape %a : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %1 = ds.reshape %0 : tensor<6x4xf32> -> tensor<24xf32>
  return %1 : tensor<24xf32>
}

// -----

// CHECK-LABEL: func.func @identities
// CHECK-SAME: (%[[A:.*]]: tensor<2x3xf32>)
// CHECK-NEXT: return %[[A]], %[[A]], %[[A]], %[[A]], %[[A]], %[[A]], %[[A]], %[[A]]
func.func @identities(%a: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %zero = ds.constant dense<0.0> : tensor<f32>
  %one = ds.constant dense<1.0> : tensor<3xf32>
  %0 = ds.add %a, %zero : tensor<2x3xf32>, tensor<f32>
  %1 = ds.mul %one, %a : tensor<3xf32>, tensor<2x3xf32>
  %2 = ds.div %a, %one : tensor<2x3xf32>, tensor<3xf32>
  %3 = ds.reshape %a : tensor<2x3xf32> -> tensor<2x3xf32>
  %4 = ds.transpose %a {perm = array<i64: 0, 1>} : tensor<2x3xf32>
  %5 = ds.reduce_sum %a {axes = array<i64>} : tensor<2x3xf32>
  %n = ds.neg %a : tensor<2x3xf32>
  %6 = ds.neg %n : tensor<2x3xf32>
  %7 = ds.slice %a {offsets = array<i64: 0, 0>, strides = array<i64: 1, 1>} : tensor<2x3xf32> -> tensor<2x3xf32>
  return %0, %1, %2, %3, %4, %5, %6, %7 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// x + 0 with broadcasting that changes the shape is not an identity.
// CHECK-LABEL: func.func @broadcasting_add_kept
// CHECK: ds.add
func.func @broadcasting_add_kept(%a: tensor<3xf32>) -> tensor<2x3xf32> {
  %zero = ds.constant dense<0.0> : tensor<2x3xf32>
  %0 = ds.add %a, %zero : tensor<3xf32>, tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// Constant folding evaluates in f32 like the runtime does.
// CHECK-LABEL: func.func @constant_folding
// CHECK-DAG: ds.constant dense<[2.000000e+00, 3.000000e+00]> : tensor<2xf32>
// CHECK-DAG: ds.constant dense<0.333333343> : tensor<f32>
// CHECK-DAG: ds.constant dense<[7, -3]> : tensor<2xi64>
// CHECK-DAG: ds.constant dense<[true, false]> : tensor<2xi1>
// CHECK-DAG: ds.constant dense<[2, 3]> : tensor<2xi32>
// CHECK-DAG: ds.constant dense<1.500000e+00> : tensor<4x2xbf16>
// CHECK-NOT: ds.sqrt
// CHECK-NOT: ds.div
// CHECK-NOT: ds.sub
// CHECK-NOT: ds.compare
// CHECK-NOT: ds.cast
// CHECK-NOT: ds.broadcast_to
func.func @constant_folding() -> (tensor<2xf32>, tensor<f32>, tensor<2xi64>, tensor<2xi1>, tensor<2xi32>, tensor<4x2xbf16>) {
  %sq = ds.constant dense<[4.0, 9.0]> : tensor<2xf32>
  %0 = ds.sqrt %sq : tensor<2xf32>
  %one = ds.constant dense<1.0> : tensor<f32>
  %three = ds.constant dense<3.0> : tensor<f32>
  %1 = ds.div %one, %three : tensor<f32>, tensor<f32>
  %a = ds.constant dense<[10, 2]> : tensor<2xi64>
  %b = ds.constant dense<[3, 5]> : tensor<2xi64>
  %2 = ds.sub %a, %b : tensor<2xi64>, tensor<2xi64>
  %3 = ds.compare gt, %a, %b : tensor<2xi64>, tensor<2xi64>
  %f = ds.constant dense<[2.7, 3.2]> : tensor<2xf32>
  %4 = ds.cast %f : tensor<2xf32> to tensor<2xi32>
  %h = ds.constant dense<1.5> : tensor<2xbf16>
  %5 = ds.broadcast_to %h : tensor<2xbf16> -> tensor<4x2xbf16>
  return %0, %1, %2, %3, %4, %5 : tensor<2xf32>, tensor<f32>, tensor<2xi64>, tensor<2xi1>, tensor<2xi32>, tensor<4x2xbf16>
}

// -----

// Integer division by zero is left to the runtime rather than folded.
// CHECK-LABEL: func.func @no_fold_division_by_zero
// CHECK: ds.div
func.func @no_fold_division_by_zero() -> tensor<2xi64> {
  %a = ds.constant dense<[1, 2]> : tensor<2xi64>
  %z = ds.constant dense<[1, 0]> : tensor<2xi64>
  %0 = ds.div %a, %z : tensor<2xi64>, tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

// CHECK-LABEL: func.func @where_constant_condition
// CHECK-SAME: (%[[A:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<4xf32>)
// CHECK-NEXT: return %[[B]]
func.func @where_constant_condition(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %c = ds.constant dense<false> : tensor<4xi1>
  %0 = ds.where %c, %a, %b : tensor<4xi1>, tensor<4xf32>, tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @zero_dropout
// CHECK-SAME: (%[[A:.*]]: tensor<4xf32>)
// CHECK: %[[T:.*]] = ds.constant dense<true> : tensor<4xi1>
// CHECK-NEXT: return %[[A]], %[[T]]
func.func @zero_dropout(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi1>) {
  %0, %1 = ds.dropout %a {ratio = 0.0 : f32, seed = 3 : i64} : tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xi1>
}

// -----

// CHECK-LABEL: func.func @compose_transposes
// CHECK-NEXT: ds.transpose %{{.*}} {perm = array<i64: 2, 0, 1>} : tensor<2x3x4xf32>
// CHECK-NEXT: return
func.func @compose_transposes(%a: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %0 = ds.transpose %a {perm = array<i64: 1, 0, 2>} : tensor<2x3x4xf32>
  %1 = ds.transpose %0 {perm = array<i64: 2, 1, 0>} : tensor<3x2x4xf32>
  return %1 : tensor<4x2x3xf32>
}

// -----

// A transposed product is the swapped product with both flags flipped:
// (x W^T)^T ... here (W x^T)^T = x W^T, the LM head of a tied embedding.
// CHECK-LABEL: func.func @swap_transposed_matmul
// CHECK-NEXT: %[[P:.*]] = ds.matmul %arg1, %arg0 {transpose_rhs} : tensor<2x3x4xf32>, tensor<5x4xf32>
// CHECK-NEXT: return %[[P]]
func.func @swap_transposed_matmul(%w: tensor<5x4xf32>, %x: tensor<2x3x4xf32>) -> tensor<2x3x5xf32> {
  %0 = ds.matmul %w, %x {transpose_rhs} : tensor<5x4xf32>, tensor<2x3x4xf32>
  %1 = ds.transpose %0 {perm = array<i64: 0, 2, 1>} : tensor<2x5x3xf32>
  return %1 : tensor<2x3x5xf32>
}

// -----

// Not when the product is used elsewhere too.
// CHECK-LABEL: func.func @keep_shared_matmul
// CHECK: ds.transpose
func.func @keep_shared_matmul(%w: tensor<5x4xf32>, %x: tensor<4x3xf32>) -> (tensor<3x5xf32>, tensor<5x3xf32>) {
  %0 = ds.matmul %w, %x : tensor<5x4xf32>, tensor<4x3xf32>
  %1 = ds.transpose %0 {perm = array<i64: 1, 0>} : tensor<5x3xf32>
  return %1, %0 : tensor<3x5xf32>, tensor<5x3xf32>
}

// -----

// A cast to a wider float and back is the value itself; the other order
// rounds, and f16 -> bf16 -> f16 loses range, so those stay.
// CHECK-LABEL: func.func @cast_pairs
// CHECK-SAME: (%[[H:.*]]: tensor<3xbf16>, %[[F:.*]]: tensor<3xf32>, %[[S:.*]]: tensor<3xf16>)
// CHECK: %[[ROUND:.*]] = ds.cast %[[F]] : tensor<3xf32> to tensor<3xbf16>
// CHECK: %[[BACK:.*]] = ds.cast %[[ROUND]] : tensor<3xbf16> to tensor<3xf32>
// CHECK: %[[VIA:.*]] = ds.cast %[[S]] : tensor<3xf16> to tensor<3xbf16>
// CHECK: %[[S2:.*]] = ds.cast %[[VIA]] : tensor<3xbf16> to tensor<3xf16>
// CHECK: return %[[H]], %[[BACK]], %[[S]], %[[S2]]
func.func @cast_pairs(%h: tensor<3xbf16>, %f: tensor<3xf32>, %s: tensor<3xf16>)
    -> (tensor<3xbf16>, tensor<3xf32>, tensor<3xf16>, tensor<3xf16>) {
  %0 = ds.cast %h : tensor<3xbf16> to tensor<3xf32>
  %1 = ds.cast %0 : tensor<3xf32> to tensor<3xbf16>
  %2 = ds.cast %f : tensor<3xf32> to tensor<3xbf16>
  %3 = ds.cast %2 : tensor<3xbf16> to tensor<3xf32>
  %4 = ds.cast %s : tensor<3xf16> to tensor<3xf32>
  %5 = ds.cast %4 : tensor<3xf32> to tensor<3xf16>
  %6 = ds.cast %s : tensor<3xf16> to tensor<3xbf16>
  %7 = ds.cast %6 : tensor<3xbf16> to tensor<3xf16>
  return %1, %3, %5, %7 : tensor<3xbf16>, tensor<3xf32>, tensor<3xf16>, tensor<3xf16>
}
