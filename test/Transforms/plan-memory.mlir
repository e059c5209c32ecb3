// The memory planner: parameters persistent at the bottom, liveness-based
// sharing above them, views and in-place results sharing their operand's
// slot, and the frees that let the runtime check the plan.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-plan-memory)' -split-input-file | FileCheck %s

// Parameters (256 B and 64 B slots) sit at the bottom (320 B). The graph
// input x (512 B) dies at the add, which writes its result over it; exp
// runs in place too, the reshape is a view of the same slot, and the mul
// writes in place as well: the whole chain lives in x's slot.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: %arg0: tensor<128xf32> {ds.input = "x", ds.offset = 320 : i64}
// CHECK-SAME: %arg1: tensor<64xf32> {ds.offset = 0 : i64, ds.param
// CHECK-SAME: %arg2: tensor<16xf32> {ds.offset = 256 : i64, ds.param
// CHECK-SAME: ds.memory = #ds.memory_plan<arena_bytes = 832, persistent_bytes = 320, peak_live_bytes = 832, alignment = 64>
// CHECK: ds.add %arg0, %arg0 {ds.buffers = array<i64: 320>}
// CHECK: ds.exp %{{.*}} {ds.buffers = array<i64: 320>}
// CHECK: ds.reshape %{{.*}} {ds.buffers = array<i64: 320>}
// CHECK: ds.mul %{{.*}}, %arg1 {ds.buffers = array<i64: 320>}
func.func @chain(%x: tensor<128xf32> {ds.input = "x"},
                 %w: tensor<64xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "m.bin", offset = 0, length = 256>>},
                 %b: tensor<16xf32> {ds.param = #ds.param<name = "b", trainable = true, data = #ds.extern<location = "m.bin", offset = 256, length = 64>>})
    -> (tensor<2x64xf32> {ds.output = "y"}) {
  %t0 = ds.add %x, %x : tensor<128xf32>, tensor<128xf32>
  %t1 = ds.exp %t0 : tensor<128xf32>
  %t2 = ds.reshape %t1 : tensor<128xf32> -> tensor<2x64xf32>
  %y = ds.mul %t2, %w : tensor<2x64xf32>, tensor<64xf32>
  return %y : tensor<2x64xf32>
}

// -----

// A value still read later is never overwritten: %a feeds two ops, so the
// first one cannot run in place on it.
// CHECK-LABEL: func.func @no_in_place_while_read
// CHECK: %[[A:.*]] = ds.neg %arg0 {ds.buffers = array<i64: 0>}
// CHECK: %[[E:.*]] = ds.exp %[[A]] {ds.buffers = array<i64: 64>}
// CHECK: ds.add %[[A]], %[[E]] {ds.buffers = array<i64: 0>, ds.frees = array<i64: 64>}
func.func @no_in_place_while_read(%x: tensor<16xf32> {ds.input = "x"}) -> (tensor<16xf32> {ds.output = "y"}) {
  %a = ds.neg %x : tensor<16xf32>
  %e = ds.exp %a : tensor<16xf32>
  %y = ds.add %a, %e : tensor<16xf32>, tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// Without in-place, the same chain needs two slots: y reuses x's.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-plan-memory{in-place=false})' -split-input-file | FileCheck %s --check-prefix=NOINPLACE
// NOINPLACE-LABEL: func.func @exp_exp
// NOINPLACE-SAME: arena_bytes = 128
// CHECK-LABEL: func.func @exp_exp
// CHECK-SAME: arena_bytes = 64
func.func @exp_exp(%x: tensor<16xf32> {ds.input = "x"}) -> (tensor<16xf32> {ds.output = "y"}) {
  %a = ds.exp %x : tensor<16xf32>
  %y = ds.exp %a : tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// Unused results (layer norm's statistics here) still get a slot, freed
// right after the op that writes them; constants take no arena memory.
// CHECK-LABEL: func.func @unused_results
// CHECK: ds.constant
// CHECK-NOT: ds.buffers
// CHECK: ds.layer_norm {{.*}}ds.buffers = array<i64: 128, 256, 320>, ds.frees = array<i64: 0, 256, 320>
func.func @unused_results(%x: tensor<4x8xf32> {ds.input = "x"}) -> (tensor<4x8xf32> {ds.output = "y"}) {
  %s = ds.constant dense<1.0> : tensor<8xf32>
  %y, %m, %r = ds.layer_norm %x, %s {axis = 1 : i64} : tensor<4x8xf32>, tensor<8xf32>
  return %y : tensor<4x8xf32>
}
