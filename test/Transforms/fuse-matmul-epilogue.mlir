// ds-fuse-matmul-epilogue: a linear layer's bias add and residual add
// join its matmul (ds.matmul_bias), and the bias gradient (reduce_sum of
// the output gradient over its leading axes) joins the weight gradient's
// matmul (ds.matmul_bias_grad); anything that does not match exactly stays.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-matmul-epilogue))' -split-input-file | FileCheck %s

// A projection with its bias and the residual stream, in bf16, the bias
// first as the importer orders it; the attributes of the matmul stay.
// CHECK-LABEL: func.func @bias_residual
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xbf16>, %[[W:.*]]: tensor<4x5xbf16>, %[[B:.*]]: tensor<5xbf16>, %[[R:.*]]: tensor<2x3x5xbf16>)
// CHECK-NEXT: %[[Y:.*]] = ds.matmul_bias %[[X]], %[[W]], %[[B]], %[[R]] {ds.forward_id = 7 : i64} : tensor<2x3x4xbf16>, tensor<4x5xbf16>, tensor<5xbf16>, tensor<2x3x5xbf16>
// CHECK-NEXT: return %[[Y]]
func.func @bias_residual(%x: tensor<2x3x4xbf16>, %w: tensor<4x5xbf16>, %b: tensor<5xbf16>,
                         %r: tensor<2x3x5xbf16>) -> tensor<2x3x5xbf16> {
  %0 = ds.matmul %x, %w {ds.forward_id = 7 : i64} : tensor<2x3x4xbf16>, tensor<4x5xbf16>
  %1 = ds.add %b, %0 : tensor<5xbf16>, tensor<2x3x5xbf16>
  %2 = ds.add %r, %1 : tensor<2x3x5xbf16>, tensor<2x3x5xbf16>
  return %2 : tensor<2x3x5xbf16>
}

// -----

// A bias alone, the weight stored transposed; the sum is read twice (as
// GELU reads it), which keeps no residual from joining but not the bias.
// CHECK-LABEL: func.func @bias_only
// CHECK-NEXT: %[[Y:.*]] = ds.matmul_bias %arg0, %arg1, %arg2 {transpose_rhs} : tensor<6x4xf32>, tensor<5x4xf32>, tensor<5xf32>
// CHECK-NEXT: %[[M:.*]] = ds.mul %[[Y]], %[[Y]]
// CHECK-NEXT: return %[[M]]
func.func @bias_only(%x: tensor<6x4xf32>, %w: tensor<5x4xf32>, %b: tensor<5xf32>) -> tensor<6x5xf32> {
  %0 = ds.matmul %x, %w {transpose_rhs} : tensor<6x4xf32>, tensor<5x4xf32>
  %1 = ds.add %0, %b : tensor<6x5xf32>, tensor<5xf32>
  %2 = ds.mul %1, %1 : tensor<6x5xf32>, tensor<6x5xf32>
  return %2 : tensor<6x5xf32>
}

// -----

// Not matching: a bias of the wrong axis ([M, 1] would broadcast along
// rows), a matmul with a second reader, a transposed lhs, a batched rhs.
// CHECK-LABEL: func.func @no_match
// CHECK-NOT: ds.matmul_bias
// CHECK: return
func.func @no_match(%x: tensor<6x4xf32>, %w: tensor<4x5xf32>, %col: tensor<6x1xf32>,
                    %b: tensor<5xf32>, %xt: tensor<4x6xf32>, %bx: tensor<2x6x4xf32>,
                    %bw: tensor<2x4x5xf32>)
    -> (tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<2x6x5xf32>) {
  %0 = ds.matmul %x, %w : tensor<6x4xf32>, tensor<4x5xf32>
  %1 = ds.add %0, %col : tensor<6x5xf32>, tensor<6x1xf32>
  %2 = ds.matmul %x, %w : tensor<6x4xf32>, tensor<4x5xf32>
  %3 = ds.add %2, %b : tensor<6x5xf32>, tensor<5xf32>
  %4 = ds.matmul %xt, %w {transpose_lhs} : tensor<4x6xf32>, tensor<4x5xf32>
  %5 = ds.add %4, %b : tensor<6x5xf32>, tensor<5xf32>
  %6 = ds.matmul %bx, %bw : tensor<2x6x4xf32>, tensor<2x4x5xf32>
  %7 = ds.add %6, %b : tensor<2x6x5xf32>, tensor<5xf32>
  return %1, %2, %3, %5, %7 : tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<2x6x5xf32>
}

// -----

// The backward of a linear layer on [2, 3, 5] outputs: the bias gradient
// and the weight gradient of dy reshaped to [6, 5] become one op where the
// later of the two was; the input gradient's matmul stays.
// CHECK-LABEL: func.func @bias_grad
// CHECK: %[[DX:.*]] = ds.matmul %arg0, %arg2 {transpose_rhs}
// CHECK-NEXT: %[[XM:.*]] = ds.reshape %arg1 : tensor<2x3x4xf32> -> tensor<6x4xf32>
// CHECK-NEXT: %[[DYM:.*]] = ds.reshape %arg0 : tensor<2x3x5xf32> -> tensor<6x5xf32>
// CHECK-NEXT: %[[DW:.*]], %[[DB:.*]] = ds.matmul_bias_grad %[[XM]], %[[DYM]] {ds.grad_of = 3 : i64, transpose_lhs} : tensor<6x4xf32>, tensor<6x5xf32>
// CHECK-NEXT: return %[[DX]], %[[DW]], %[[DB]]
func.func @bias_grad(%dy: tensor<2x3x5xf32>, %x: tensor<2x3x4xf32>, %w: tensor<4x5xf32>)
    -> (tensor<2x3x4xf32>, tensor<4x5xf32>, tensor<5xf32>) {
  %db = ds.reduce_sum %dy {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x3x5xf32>
  %dx = ds.matmul %dy, %w {transpose_rhs} : tensor<2x3x5xf32>, tensor<4x5xf32>
  %xm = ds.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %dym = ds.reshape %dy : tensor<2x3x5xf32> -> tensor<6x5xf32>
  %dw = ds.matmul %xm, %dym {ds.grad_of = 3 : i64, transpose_lhs} : tensor<6x4xf32>, tensor<6x5xf32>
  return %dx, %dw, %db : tensor<2x3x4xf32>, tensor<4x5xf32>, tensor<5xf32>
}

// -----

// dy a reshape of a packed attention gradient [2, 3, 3, 1, 2] to [2, 3, 6],
// the weight gradient reading the canonicalizer's one reshape of that
// gradient to [6, 6]: the same matrix, so the bias gradient rides in it.
// CHECK-LABEL: func.func @bias_grad_of_reshape
// CHECK: %[[DYM:.*]] = ds.reshape %arg0 : tensor<2x3x3x1x2xf32> -> tensor<6x6xf32>
// CHECK-NEXT: %[[DW:.*]], %[[DB:.*]] = ds.matmul_bias_grad %{{.*}}, %[[DYM]] {transpose_lhs} : tensor<6x4xf32>, tensor<6x6xf32>
// CHECK-NOT: ds.reduce_sum
// CHECK: return %[[DW]], %[[DB]]
func.func @bias_grad_of_reshape(%g: tensor<2x3x3x1x2xf32>, %x: tensor<2x3x4xf32>)
    -> (tensor<4x6xf32>, tensor<6xf32>) {
  %dy = ds.reshape %g : tensor<2x3x3x1x2xf32> -> tensor<2x3x6xf32>
  %db = ds.reduce_sum %dy {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x3x6xf32>
  %xm = ds.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %dym = ds.reshape %g : tensor<2x3x3x1x2xf32> -> tensor<6x6xf32>
  %dw = ds.matmul %xm, %dym {transpose_lhs} : tensor<6x4xf32>, tensor<6x6xf32>
  return %dw, %db : tensor<4x6xf32>, tensor<6xf32>
}

// -----

// Not matching: a sum over some leading axes only, a sum kept as [1, 5],
// an f32 sum of a bf16 gradient (cuBLASLt writes the gradient's type).
// CHECK-LABEL: func.func @no_bias_grad
// CHECK-NOT: ds.matmul_bias_grad
// CHECK: return
func.func @no_bias_grad(%dy: tensor<2x3x5xf32>, %x: tensor<6x4xf32>, %dy2: tensor<6x5xf32>,
                        %dy16: tensor<6x5xbf16>, %x16: tensor<6x4xbf16>)
    -> (tensor<3x5xf32>, tensor<4x5xf32>, tensor<1x5xf32>, tensor<4x5xf32>, tensor<5xf32>, tensor<4x5xbf16>) {
  %0 = ds.reduce_sum %dy {axes = array<i64: 0>, keepdims = false} : tensor<2x3x5xf32>
  %dym = ds.reshape %dy : tensor<2x3x5xf32> -> tensor<6x5xf32>
  %1 = ds.matmul %x, %dym {transpose_lhs} : tensor<6x4xf32>, tensor<6x5xf32>
  %2 = ds.reduce_sum %dy2 {axes = array<i64: 0>, keepdims = true} : tensor<6x5xf32>
  %3 = ds.matmul %x, %dy2 {transpose_lhs} : tensor<6x4xf32>, tensor<6x5xf32>
  %4 = ds.reduce_sum %dy16 {axes = array<i64: 0>, keepdims = false} : tensor<6x5xbf16> -> tensor<5xf32>
  %5 = ds.matmul %x16, %dy16 {transpose_lhs} : tensor<6x4xbf16>, tensor<6x5xbf16>
  return %0, %1, %2, %3, %4, %5 : tensor<3x5xf32>, tensor<4x5xf32>, tensor<1x5xf32>, tensor<4x5xf32>, tensor<5xf32>, tensor<4x5xbf16>
}

// -----

// ONNX Gemm as nn.Linear exports it (the weight [out, in], transB) with its
// bias as C: the gemm is the product and the bias add in one, a
// ds.matmul_bias of the transposed weight; a residual add reading it (its
// only reader) joins as the addend.
// CHECK-LABEL: func.func @gemm_bias
// CHECK-NEXT: %[[Y:.*]] = ds.matmul_bias %arg0, %arg1, %arg2 {ds.forward_id = 5 : i64, transpose_rhs} : tensor<6x4xf32>, tensor<5x4xf32>, tensor<5xf32>
// CHECK-NEXT: %[[Z:.*]] = ds.matmul_bias %[[Y]], %arg3, %arg4, %[[Y]] {transpose_rhs} : tensor<6x5xf32>, tensor<5x5xf32>, tensor<5xf32>, tensor<6x5xf32>
// CHECK-NEXT: %[[T:.*]] = ds.tanh %[[Z]]
// CHECK-NEXT: return %[[T]], %[[Y]]
func.func @gemm_bias(%x: tensor<6x4xf32>, %w: tensor<5x4xf32>, %b: tensor<5xf32>,
                     %w2: tensor<5x5xf32>, %b2: tensor<5xf32>) -> (tensor<6x5xf32>, tensor<6x5xf32>) {
  %0 = ds.gemm %x, %w, %b {ds.forward_id = 5 : i64, transpose_b} : tensor<6x4xf32>, tensor<5x4xf32>, tensor<5xf32>
  %1 = ds.gemm %0, %w2, %b2 {transpose_b} : tensor<6x5xf32>, tensor<5x5xf32>, tensor<5xf32>
  %2 = ds.add %1, %0 : tensor<6x5xf32>, tensor<6x5xf32>
  %3 = ds.tanh %2 : tensor<6x5xf32>
  return %3, %0 : tensor<6x5xf32>, tensor<6x5xf32>
}

// -----

// Not matching: alpha or beta not 1, a transposed a, a C of the result's
// shape or [1, N] (not a bias vector), no C.
// CHECK-LABEL: func.func @gemm_no_match
// CHECK-NOT: ds.matmul_bias
// CHECK: return
func.func @gemm_no_match(%x: tensor<6x4xf32>, %xt: tensor<4x6xf32>, %w: tensor<5x4xf32>,
                         %b: tensor<5xf32>, %c: tensor<6x5xf32>, %row: tensor<1x5xf32>)
    -> (tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>) {
  %0 = ds.gemm %x, %w, %b {alpha = 2.0 : f32, transpose_b} : tensor<6x4xf32>, tensor<5x4xf32>, tensor<5xf32>
  %1 = ds.gemm %x, %w, %b {beta = 0.5 : f32, transpose_b} : tensor<6x4xf32>, tensor<5x4xf32>, tensor<5xf32>
  %2 = ds.gemm %xt, %w, %b {transpose_a, transpose_b} : tensor<4x6xf32>, tensor<5x4xf32>, tensor<5xf32>
  %3 = ds.gemm %x, %w, %c {transpose_b} : tensor<6x4xf32>, tensor<5x4xf32>, tensor<6x5xf32>
  %4 = ds.gemm %x, %w, %row {transpose_b} : tensor<6x4xf32>, tensor<5x4xf32>, tensor<1x5xf32>
  %5 = ds.gemm %x, %w {transpose_b} : tensor<6x4xf32>, tensor<5x4xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>
}

// -----

// The backward of a layer whose weight is stored [out, in] (nn.Linear):
// the weight gradient is dyᵀ x, dy on the left, and the bias gradient (dy's
// column sums) rides with it as ds.matmul_lhs_bias_grad, in bf16 too.
// CHECK-LABEL: func.func @lhs_bias_grad
// CHECK: %[[DYM:.*]] = ds.reshape %arg0 : tensor<2x3x5xbf16> -> tensor<6x5xbf16>
// CHECK-NEXT: %[[XM:.*]] = ds.reshape %arg1 : tensor<2x3x4xbf16> -> tensor<6x4xbf16>
// CHECK-NEXT: %[[DW:.*]], %[[DB:.*]] = ds.matmul_lhs_bias_grad %[[DYM]], %[[XM]] {ds.grad_of = 1 : i64} : tensor<6x5xbf16>, tensor<6x4xbf16>
// CHECK-NEXT: return %[[DW]], %[[DB]]
func.func @lhs_bias_grad(%dy: tensor<2x3x5xbf16>, %x: tensor<2x3x4xbf16>)
    -> (tensor<5x4xbf16>, tensor<5xbf16>) {
  %db = ds.reduce_sum %dy {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x3x5xbf16>
  %dym = ds.reshape %dy : tensor<2x3x5xbf16> -> tensor<6x5xbf16>
  %xm = ds.reshape %x : tensor<2x3x4xbf16> -> tensor<6x4xbf16>
  %dw = ds.matmul %dym, %xm {ds.grad_of = 1 : i64, transpose_lhs} : tensor<6x5xbf16>, tensor<6x4xbf16>
  return %dw, %db : tensor<5x4xbf16>, tensor<5xbf16>
}

// -----

// The summed gradient a reshape of the product's operand (a loss's [N, C]
// gradient viewed as [B, T, C]), or both reshapes of one value (heads
// merged): the same elements in the same order, so they fold.
// CHECK-LABEL: func.func @views
// CHECK: ds.matmul_bias_grad %arg1, %arg0 {transpose_lhs} : tensor<6x4xf32>, tensor<6x5xf32>
// CHECK: %[[H2:.*]] = ds.reshape %arg2 : tensor<2x3x1x5xf32> -> tensor<6x5xf32>
// CHECK-NEXT: ds.matmul_lhs_bias_grad %[[H2]], %arg1 : tensor<6x5xf32>, tensor<6x4xf32>
// CHECK-NOT: ds.reduce_sum
// CHECK: return
func.func @views(%g: tensor<6x5xf32>, %x: tensor<6x4xf32>, %h: tensor<2x3x1x5xf32>)
    -> (tensor<5xf32>, tensor<4x5xf32>, tensor<5xf32>, tensor<5x4xf32>) {
  %g3 = ds.reshape %g : tensor<6x5xf32> -> tensor<2x3x5xf32>
  %0 = ds.reduce_sum %g3 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x3x5xf32>
  %1 = ds.matmul %x, %g {transpose_lhs} : tensor<6x4xf32>, tensor<6x5xf32>
  %h3 = ds.reshape %h : tensor<2x3x1x5xf32> -> tensor<2x3x5xf32>
  %2 = ds.reduce_sum %h3 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x3x5xf32>
  %h2 = ds.reshape %h : tensor<2x3x1x5xf32> -> tensor<6x5xf32>
  %3 = ds.matmul %h2, %x {transpose_lhs} : tensor<6x5xf32>, tensor<6x4xf32>
  return %0, %1, %2, %3 : tensor<5xf32>, tensor<4x5xf32>, tensor<5xf32>, tensor<5x4xf32>
}

// -----

// Not matching on the left: dy not transposed (its sums would run along
// the contraction's other axis), the rhs transposed too, the lhs's sum
// over some leading axes only.
// CHECK-LABEL: func.func @no_lhs_bias_grad
// CHECK-NOT: ds.matmul_lhs_bias_grad
// CHECK-NOT: ds.matmul_bias_grad
// CHECK: return
func.func @no_lhs_bias_grad(%dy: tensor<6x5xf32>, %x: tensor<5x4xf32>, %xt: tensor<4x6xf32>,
                            %dy3: tensor<2x3x5xf32>, %x6: tensor<6x4xf32>)
    -> (tensor<5xf32>, tensor<6x4xf32>, tensor<5x4xf32>, tensor<3x5xf32>, tensor<5x4xf32>) {
  %0 = ds.reduce_sum %dy {axes = array<i64: 0>, keepdims = false} : tensor<6x5xf32>
  %1 = ds.matmul %dy, %x : tensor<6x5xf32>, tensor<5x4xf32>
  %2 = ds.matmul %dy, %xt {transpose_lhs, transpose_rhs} : tensor<6x5xf32>, tensor<4x6xf32>
  %3 = ds.reduce_sum %dy3 {axes = array<i64: 0>, keepdims = false} : tensor<2x3x5xf32>
  %dym = ds.reshape %dy3 : tensor<2x3x5xf32> -> tensor<6x5xf32>
  %4 = ds.matmul %dym, %x6 {transpose_lhs} : tensor<6x5xf32>, tensor<6x4xf32>
  return %0, %1, %2, %3, %4 : tensor<5xf32>, tensor<6x4xf32>, tensor<5x4xf32>, tensor<3x5xf32>, tensor<5x4xf32>
}
