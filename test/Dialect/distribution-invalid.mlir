// The verifiers of the ids ds-autodiff records.
// RUN: dsopt-opt %s -split-input-file -verify-diagnostics

func.func @forward_id(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'ds.forward_id' must be a non-negative i64 (a forward op id)}}
  %0 = ds.exp %x {ds.forward_id = -1 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @grad_of(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'ds.grad_of' must be a non-negative i64 (a forward op id)}}
  %0 = ds.exp %x {ds.grad_of = "exp"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @grad_of_width(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'ds.grad_of' must be a non-negative i64 (a forward op id)}}
  %0 = ds.exp %x {ds.grad_of = 3 : i32} : tensor<4xf32>
  return %0 : tensor<4xf32>
}
