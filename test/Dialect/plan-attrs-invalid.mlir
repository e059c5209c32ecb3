// ds-plan-memory's per-result op attributes: ds.buffers (an arena offset
// per result, -1 for none) and ds.bound_slots (a slot index per result, -1
// for a result in no slot the runtime binds).
// RUN: dsopt-opt %s -split-input-file -verify-diagnostics

func.func @offsets(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'ds.buffers' must hold one offset per result}}
  %y = ds.exp %x {ds.buffers = array<i64: 0, 64>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @negative_offset(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'ds.buffers' offsets must be >= -1}}
  %y = ds.exp %x {ds.buffers = array<i64: -2>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @count(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'ds.bound_slots' must hold one slot per result}}
  %y = ds.exp %x {ds.bound_slots = array<i64: 0, 1>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @negative(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'ds.bound_slots' slots must be >= -1}}
  %y = ds.exp %x {ds.bound_slots = array<i64: -2>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @kind(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'ds.bound_slots' must hold one slot per result}}
  %y = ds.exp %x {ds.bound_slots = 0 : i64} : tensor<4xf32>
  return %y : tensor<4xf32>
}
