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
