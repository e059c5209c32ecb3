// The verifiers of the distribution and autodiff annotations: #ds.zero's
// fields, where it may stand, and the ids ds-autodiff records.
// RUN: dsopt-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{ZeRO stage must be 0, 1, 2 or 3, got 4}}
module attributes {ds.zero = #ds.zero<stage = 4, dp = 2, param_persistence_threshold = 0>} {}

// -----

// expected-error @+1 {{dp must be at least 1, got 0}}
module attributes {ds.zero = #ds.zero<stage = 1, dp = 0, param_persistence_threshold = 0>} {}

// -----

// expected-error @+1 {{param_persistence_threshold must be non-negative, got -1}}
module attributes {ds.zero = #ds.zero<stage = 3, dp = 2, param_persistence_threshold = -1>} {}

// -----

// The recipe is typed: a dictionary of the same fields is refused.
// expected-error @+1 {{'ds.zero' must be a #ds.zero on the module}}
module attributes {ds.zero = {stage = 1 : i64, dp = 2 : i64, param_persistence_threshold = 0 : i64}} {}

// -----

module {
  // expected-error @+1 {{'ds.zero' must be a #ds.zero on the module}}
  func.func @f() attributes {ds.zero = #ds.zero<stage = 1, dp = 2, param_persistence_threshold = 0>} {
    return
  }
}

// -----

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

// -----

func.func @recompute_not_unit(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'ds.recompute_in_backward' must be a unit attribute on an op without regions or memory effects}}
  %0 = ds.exp %x {ds.recompute_in_backward = 1 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @gather_whole_not_gather(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'ds.tp_gather_whole' must be a unit attribute on a shard.all_gather}}
  %0 = ds.exp %x {ds.tp_gather_whole} : tensor<4xf32>
  return %0 : tensor<4xf32>
}
