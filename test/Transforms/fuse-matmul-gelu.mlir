// The tanh GELU in the matmuls' epilogues. ds-recognize-gelu makes the
// primitive-op tanh GELU one ds.gelu {approximate = tanh}; then
// ds-fuse-matmul-epilogue folds it into its bias product
// (ds.matmul_bias_gelu, the pre-activation a second result) and its
// derivative into the product of the incoming gradient (ds.matmul_dgelu).
// The exact erf GELU, and anything not matching exactly, stays.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-recognize-gelu))' -split-input-file | FileCheck %s --check-prefix=RECOGNIZE
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-recognize-gelu, ds-fuse-matmul-epilogue))' -split-input-file | FileCheck %s --check-prefix=FUSE

// torch.onnx's export of F.gelu(approximate='tanh') at opset 17, over a
// linear layer.
// RECOGNIZE-LABEL: func.func @torch_form
// RECOGNIZE: %[[X:.*]] = ds.add
// RECOGNIZE-NEXT: %[[G:.*]] = ds.gelu %[[X]] {approximate = #ds<gelu_approximation tanh>} : tensor<2x3x8xf32>
// RECOGNIZE-NEXT: return %[[G]]
// FUSE-LABEL: func.func @torch_form
// FUSE: %[[G:.*]], %{{.*}} = ds.matmul_bias_gelu %arg0, %arg1, %arg2 {ds.forward_id = 3 : i64} : tensor<2x3x4xf32>, tensor<4x8xf32>, tensor<8xf32>
// FUSE-NEXT: return %[[G]]
func.func @torch_form(%a: tensor<2x3x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<2x3x8xf32> {
  %half = ds.constant dense<5.000000e-01> : tensor<f32>
  %one = ds.constant dense<1.000000e+00> : tensor<f32>
  %beta = ds.constant dense<0.797884583> : tensor<f32>
  %kappa = ds.constant dense<4.471500e-02> : tensor<f32>
  %m = ds.matmul %a, %w {ds.forward_id = 3 : i64} : tensor<2x3x4xf32>, tensor<4x8xf32>
  %x = ds.add %m, %b : tensor<2x3x8xf32>, tensor<8xf32>
  %0 = ds.mul %x, %x : tensor<2x3x8xf32>, tensor<2x3x8xf32>
  %1 = ds.mul %x, %0 : tensor<2x3x8xf32>, tensor<2x3x8xf32>
  %2 = ds.mul %1, %kappa : tensor<2x3x8xf32>, tensor<f32>
  %3 = ds.add %x, %2 : tensor<2x3x8xf32>, tensor<2x3x8xf32>
  %4 = ds.mul %3, %beta : tensor<2x3x8xf32>, tensor<f32>
  %5 = ds.tanh %4 : tensor<2x3x8xf32>
  %6 = ds.add %5, %one : tensor<2x3x8xf32>, tensor<f32>
  %7 = ds.mul %x, %6 : tensor<2x3x8xf32>, tensor<2x3x8xf32>
  %8 = ds.mul %7, %half : tensor<2x3x8xf32>, tensor<f32>
  return %8 : tensor<2x3x8xf32>
}

// -----

// HF's gelu_new: 0.5 * x * (1 + tanh(beta * (x + kappa * pow(x, 3)))), in
// bf16 (the constants rounded to bf16).
// RECOGNIZE-LABEL: func.func @hf_form
// RECOGNIZE: %[[G:.*]] = ds.gelu %arg0 {approximate = #ds<gelu_approximation tanh>} : tensor<4x8xbf16>
// RECOGNIZE-NEXT: return %[[G]]
func.func @hf_form(%x: tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  %half = ds.constant dense<5.000000e-01> : tensor<bf16>
  %one = ds.constant dense<1.000000e+00> : tensor<bf16>
  %beta = ds.constant dense<0.797884583> : tensor<bf16>
  %kappa = ds.constant dense<4.471500e-02> : tensor<bf16>
  %three = ds.constant dense<3.000000e+00> : tensor<bf16>
  %0 = ds.mul %half, %x : tensor<bf16>, tensor<4x8xbf16>
  %1 = ds.pow %x, %three : tensor<4x8xbf16>, tensor<bf16>
  %2 = ds.mul %kappa, %1 : tensor<bf16>, tensor<4x8xbf16>
  %3 = ds.add %x, %2 : tensor<4x8xbf16>, tensor<4x8xbf16>
  %4 = ds.mul %beta, %3 : tensor<bf16>, tensor<4x8xbf16>
  %5 = ds.tanh %4 : tensor<4x8xbf16>
  %6 = ds.add %one, %5 : tensor<bf16>, tensor<4x8xbf16>
  %7 = ds.mul %0, %6 : tensor<4x8xbf16>, tensor<4x8xbf16>
  return %7 : tensor<4x8xbf16>
}

// -----

// Not the tanh GELU: kappa 0.044716 instead of 0.044715.
// RECOGNIZE-LABEL: func.func @wrong_constant
// RECOGNIZE-NOT: ds.gelu
// RECOGNIZE: ds.tanh
// RECOGNIZE-NOT: ds.gelu
// RECOGNIZE: return
func.func @wrong_constant(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %half = ds.constant dense<5.000000e-01> : tensor<f32>
  %one = ds.constant dense<1.000000e+00> : tensor<f32>
  %beta = ds.constant dense<0.797884583> : tensor<f32>
  %kappa = ds.constant dense<4.471600e-02> : tensor<f32>
  %0 = ds.mul %x, %x : tensor<4x8xf32>, tensor<4x8xf32>
  %1 = ds.mul %x, %0 : tensor<4x8xf32>, tensor<4x8xf32>
  %2 = ds.mul %1, %kappa : tensor<4x8xf32>, tensor<f32>
  %3 = ds.add %x, %2 : tensor<4x8xf32>, tensor<4x8xf32>
  %4 = ds.mul %3, %beta : tensor<4x8xf32>, tensor<f32>
  %5 = ds.tanh %4 : tensor<4x8xf32>
  %6 = ds.add %5, %one : tensor<4x8xf32>, tensor<f32>
  %7 = ds.mul %x, %6 : tensor<4x8xf32>, tensor<4x8xf32>
  %8 = ds.mul %7, %half : tensor<4x8xf32>, tensor<f32>
  return %8 : tensor<4x8xf32>
}

// -----

// The exact erf GELU never folds into the epilogue (cuBLASLt's is tanh),
// nor a tanh GELU of a product with a residual.
// FUSE-LABEL: func.func @erf_stays
// FUSE-NEXT: %[[Y:.*]] = ds.matmul_bias %arg0, %arg1, %arg2 : tensor<6x4xf32>, tensor<4x8xf32>, tensor<8xf32>
// FUSE-NEXT: ds.gelu %[[Y]] : tensor<6x8xf32>
// FUSE-NEXT: %[[R:.*]] = ds.matmul_bias %arg0, %arg1, %arg2, %arg3 : tensor<6x4xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<6x8xf32>
// FUSE-NEXT: ds.gelu %[[R]] {approximate = #ds<gelu_approximation tanh>}
func.func @erf_stays(%a: tensor<6x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>, %r: tensor<6x8xf32>) -> (tensor<6x8xf32>, tensor<6x8xf32>) {
  %0 = ds.matmul %a, %w : tensor<6x4xf32>, tensor<4x8xf32>
  %1 = ds.add %0, %b : tensor<6x8xf32>, tensor<8xf32>
  %2 = ds.gelu %1 : tensor<6x8xf32>
  %3 = ds.matmul %a, %w : tensor<6x4xf32>, tensor<4x8xf32>
  %4 = ds.add %3, %b : tensor<6x8xf32>, tensor<8xf32>
  %5 = ds.add %4, %r : tensor<6x8xf32>, tensor<6x8xf32>
  %6 = ds.gelu %5 {approximate = #ds<gelu_approximation tanh>} : tensor<6x8xf32>
  return %2, %6 : tensor<6x8xf32>, tensor<6x8xf32>
}

// -----

// The backward: the derivative ds.gelu's VJP writes (DsVJP.cpp) times the
// input gradient of the next projection (g w^T) becomes matmul_dgelu
// reading the forward's pre-activation; its ops are erased.
// FUSE-LABEL: func.func @derivative
// FUSE: %[[G:.*]], %[[P:.*]] = ds.matmul_bias_gelu %arg0, %arg1, %arg2
// FUSE-NEXT: %[[D:.*]] = ds.matmul_dgelu %arg3, %arg4, %[[P]] {ds.grad_of = 5 : i64, transpose_rhs} : tensor<6x16xf32>, tensor<8x16xf32>, tensor<6x8xf32>
// FUSE-NEXT: return %[[G]], %[[D]]
func.func @derivative(%a: tensor<6x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>,
                      %g: tensor<6x16xf32>, %w2: tensor<8x16xf32>) -> (tensor<6x8xf32>, tensor<6x8xf32>) {
  %half = ds.constant dense<5.000000e-01> : tensor<f32>
  %one = ds.constant dense<1.000000e+00> : tensor<f32>
  %beta = ds.constant dense<0.797884583> : tensor<f32>
  %kappa = ds.constant dense<4.471500e-02> : tensor<f32>
  %kappa3 = ds.constant dense<1.341450e-01> : tensor<f32>
  %m = ds.matmul %a, %w : tensor<6x4xf32>, tensor<4x8xf32>
  %x = ds.add %m, %b : tensor<6x8xf32>, tensor<8xf32>
  %y = ds.gelu %x {approximate = #ds<gelu_approximation tanh>} : tensor<6x8xf32>
  %dy = ds.matmul %g, %w2 {ds.grad_of = 5 : i64, transpose_rhs} : tensor<6x16xf32>, tensor<8x16xf32>
  %x2 = ds.mul %x, %x : tensor<6x8xf32>, tensor<6x8xf32>
  %x3 = ds.mul %x2, %x : tensor<6x8xf32>, tensor<6x8xf32>
  %0 = ds.mul %x3, %kappa : tensor<6x8xf32>, tensor<f32>
  %1 = ds.add %x, %0 : tensor<6x8xf32>, tensor<6x8xf32>
  %2 = ds.mul %1, %beta : tensor<6x8xf32>, tensor<f32>
  %t = ds.tanh %2 : tensor<6x8xf32>
  %left = ds.mul %x, %half : tensor<6x8xf32>, tensor<f32>
  %right = ds.add %t, %one : tensor<6x8xf32>, tensor<f32>
  %ld = ds.mul %right, %half : tensor<6x8xf32>, tensor<f32>
  %3 = ds.mul %x2, %kappa3 : tensor<6x8xf32>, tensor<f32>
  %4 = ds.add %3, %one : tensor<6x8xf32>, tensor<f32>
  %id = ds.mul %4, %beta : tensor<6x8xf32>, tensor<f32>
  %tt = ds.mul %t, %t : tensor<6x8xf32>, tensor<6x8xf32>
  %5 = ds.sub %one, %tt : tensor<f32>, tensor<6x8xf32>
  %6 = ds.mul %left, %5 : tensor<6x8xf32>, tensor<6x8xf32>
  %rd = ds.mul %6, %id : tensor<6x8xf32>, tensor<6x8xf32>
  %d = ds.add %ld, %rd : tensor<6x8xf32>, tensor<6x8xf32>
  %dx = ds.mul %dy, %d : tensor<6x8xf32>, tensor<6x8xf32>
  return %y, %dx : tensor<6x8xf32>, tensor<6x8xf32>
}

// -----

// A derivative whose incoming gradient is not a product, or whose 3 kappa
// is off, stays elementwise.
// FUSE-LABEL: func.func @derivative_no_match
// FUSE-NOT: matmul_dgelu
// FUSE: ds.tanh
// FUSE-NOT: matmul_dgelu
// FUSE: return
func.func @derivative_no_match(%x: tensor<6x8xf32>, %dy: tensor<6x8xf32>) -> tensor<6x8xf32> {
  %half = ds.constant dense<5.000000e-01> : tensor<f32>
  %one = ds.constant dense<1.000000e+00> : tensor<f32>
  %beta = ds.constant dense<0.797884583> : tensor<f32>
  %kappa = ds.constant dense<4.471500e-02> : tensor<f32>
  %kappa3 = ds.constant dense<1.341450e-01> : tensor<f32>
  %x2 = ds.mul %x, %x : tensor<6x8xf32>, tensor<6x8xf32>
  %x3 = ds.mul %x2, %x : tensor<6x8xf32>, tensor<6x8xf32>
  %0 = ds.mul %x3, %kappa : tensor<6x8xf32>, tensor<f32>
  %1 = ds.add %x, %0 : tensor<6x8xf32>, tensor<6x8xf32>
  %2 = ds.mul %1, %beta : tensor<6x8xf32>, tensor<f32>
  %t = ds.tanh %2 : tensor<6x8xf32>
  %left = ds.mul %x, %half : tensor<6x8xf32>, tensor<f32>
  %right = ds.add %t, %one : tensor<6x8xf32>, tensor<f32>
  %ld = ds.mul %right, %half : tensor<6x8xf32>, tensor<f32>
  %3 = ds.mul %x2, %kappa3 : tensor<6x8xf32>, tensor<f32>
  %4 = ds.add %3, %one : tensor<6x8xf32>, tensor<f32>
  %id = ds.mul %4, %beta : tensor<6x8xf32>, tensor<f32>
  %tt = ds.mul %t, %t : tensor<6x8xf32>, tensor<6x8xf32>
  %5 = ds.sub %one, %tt : tensor<f32>, tensor<6x8xf32>
  %6 = ds.mul %left, %5 : tensor<6x8xf32>, tensor<6x8xf32>
  %rd = ds.mul %6, %id : tensor<6x8xf32>, tensor<6x8xf32>
  %d = ds.add %ld, %rd : tensor<6x8xf32>, tensor<6x8xf32>
  %dx = ds.mul %dy, %d : tensor<6x8xf32>, tensor<6x8xf32>
  return %dx : tensor<6x8xf32>
}

