// The memory planner's ds.workspace attribute: an arena offset, only on an
// op whose kernel needs scratch memory (KernelOpInterface::getWorkspaceBytes).
// RUN: dsopt-opt %s -split-input-file -verify-diagnostics

func.func @f32_matmul_needs_none(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>) -> tensor<2x2xf32> {
  // expected-error @+1 {{'ds.workspace' on an op whose kernel needs no workspace}}
  %y = ds.matmul %a, %b {ds.workspace = 0 : i64} : tensor<2x3xf32>, tensor<3x2xf32>
  return %y : tensor<2x2xf32>
}

// -----

func.func @negative_offset(%a: tensor<2x3xbf16>, %b: tensor<3x2xbf16>) -> tensor<2x2xbf16> {
  // expected-error @+1 {{'ds.workspace' must be a non-negative arena offset}}
  %y = ds.matmul %a, %b {ds.workspace = -64 : i64} : tensor<2x3xbf16>, tensor<3x2xbf16>
  return %y : tensor<2x2xbf16>
}

// -----

func.func @not_an_offset(%a: tensor<2x3xbf16>, %b: tensor<3x2xbf16>) -> tensor<2x2xbf16> {
  // expected-error @+1 {{'ds.workspace' must be a non-negative arena offset}}
  %y = ds.matmul %a, %b {ds.workspace = "here"} : tensor<2x3xbf16>, tensor<3x2xbf16>
  return %y : tensor<2x2xbf16>
}

// -----

func.func @pointwise_conv_needs_none(%x: tensor<1x4x5x5xf32>, %w: tensor<6x4x1x1xf32>) -> tensor<1x6x5x5xf32> {
  // expected-error @+1 {{'ds.workspace' on an op whose kernel needs no workspace}}
  %y = ds.conv %x, %w {ds.workspace = 0 : i64, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : tensor<1x4x5x5xf32>, tensor<6x4x1x1xf32>
  return %y : tensor<1x6x5x5xf32>
}

// -----

// A bf16 matmul needs 4 * (6 + 6 + 4) bytes: its ds.workspace verifies.
func.func @bf16_matmul(%a: tensor<2x3xbf16>, %b: tensor<3x2xbf16>) -> tensor<2x2xbf16> {
  %y = ds.matmul %a, %b {ds.workspace = 128 : i64} : tensor<2x3xbf16>, tensor<3x2xbf16>
  return %y : tensor<2x2xbf16>
}

// -----

// ds.target, which a large product's cuda workspace depends on: "cpu" or
// "cuda", on a module.
// expected-error @+1 {{'ds.target' must be "cpu" or "cuda", on a module}}
module attributes {ds.target = "gpu"} {
}

// -----

func.func @target_on_a_function() attributes {ds.target = "cuda"} {
  // expected-error @-1 {{'ds.target' must be "cpu" or "cuda", on a module}}
  return
}
