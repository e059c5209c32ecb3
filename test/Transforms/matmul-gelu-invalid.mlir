// ds.matmul_bias_gelu and ds.matmul_dgelu name what is wrong with their
// operands.
// RUN: dsopt-opt %s -split-input-file -verify-diagnostics

func.func @bias_wrong(%a: tensor<6x4xf32>, %w: tensor<4x8xf32>, %b: tensor<6xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{matmul_bias_gelu bias must be [8] of the operands' element type}}
  %y, %p = ds.matmul_bias_gelu %a, %w, %b : tensor<6x4xf32>, tensor<4x8xf32>, tensor<6xf32>
  return %y : tensor<6x8xf32>
}

// -----

func.func @contraction(%a: tensor<6x4xf32>, %w: tensor<5x8xf32>, %b: tensor<8xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{matmul_bias_gelu contraction sizes differ: [6, 4] x [5, 8]}}
  %y, %p = ds.matmul_bias_gelu %a, %w, %b : tensor<6x4xf32>, tensor<5x8xf32>, tensor<8xf32>
  return %y : tensor<6x8xf32>
}

// -----

func.func @pre_wrong(%g: tensor<6x16xf32>, %w: tensor<8x16xf32>, %p: tensor<6x7xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{matmul_dgelu pre_activation [6, 7] does not have the product's type}}
  %d = ds.matmul_dgelu %g, %w, %p {transpose_rhs} : tensor<6x16xf32>, tensor<8x16xf32>, tensor<6x7xf32>
  return %d : tensor<6x8xf32>
}

// -----

func.func @types_differ(%g: tensor<6x16xbf16>, %w: tensor<16x8xf32>, %p: tensor<6x8xbf16>) -> tensor<6x8xbf16> {
  // expected-error @below {{matmul_dgelu operands must have one element type}}
  %d = ds.matmul_dgelu %g, %w, %p : tensor<6x16xbf16>, tensor<16x8xf32>, tensor<6x8xbf16>
  return %d : tensor<6x8xbf16>
}
