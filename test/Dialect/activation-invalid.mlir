// Verifiers of the activation ops.
// RUN: dsopt-opt %s -split-input-file -verify-diagnostics

func.func @celu_zero_alpha(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'ds.celu' op alpha must not be 0 (celu divides by it)}}
  %0 = ds.celu %a {alpha = 0.0 : f32} : tensor<2x3xf32>
  return
}

// -----

func.func @celu_negative_zero_alpha(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{alpha must not be 0}}
  %0 = ds.celu %a {alpha = -0.0 : f32} : tensor<2x3xf32>
  return
}

// -----

func.func @mod_mixed_types(%a: tensor<3xf32>, %b: tensor<3xi64>) {
  // expected-error @+1 {{requires the same element type for all operands}}
  %0 = "ds.mod"(%a, %b) : (tensor<3xf32>, tensor<3xi64>) -> tensor<3xf32>
  return
}

// -----

func.func @reduce_prod_bad_axis(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{reduce_prod axis 2 is out of range for rank 2}}
  %0 = ds.reduce_prod %a {axes = array<i64: 2>} : tensor<2x3xf32>
  return
}
