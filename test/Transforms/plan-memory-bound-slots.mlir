// A pipeline stage's sent and stashed outputs are computed into the slots
// the runtime binds for them (ds.buffers -1), and so is the value such an
// output overwrites in place when the slot may hold both: ds.bound_slots
// names each one's slot (k: the k-th output with a ds.role), and code
// generation computes them there (dsrt::bound_output).
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-plan-memory)' -split-input-file | FileCheck %s
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-plan-memory{in-place=false})' -split-input-file | FileCheck %s --check-prefix=NOINPLACE

// GELU's backward in a middle stage: both sent products read the gradient
// %x of the GELU's output in place. Only the last reader may overwrite it, so
// %x goes into the slot of %db (1); %da, which would destroy %x before %db
// reads it, keeps its own slot (0) and writes there out of place.
// CHECK-LABEL: func.func @two_readers
// CHECK: %[[X:[0-9]+]] = ds.matmul %arg1, %arg0 {ds.bound_slots = array<i64: 1>, ds.buffers = array<i64: -1>
// CHECK: ds.mul %[[X]], %arg2 {ds.bound_slots = array<i64: 0>, ds.buffers = array<i64: -1>
// CHECK: ds.mul %[[X]], %arg3 {ds.bound_slots = array<i64: 1>, ds.buffers = array<i64: -1>
// Without in-place results the outputs alone are in their slots.
// NOINPLACE-LABEL: func.func @two_readers
// NOINPLACE: ds.matmul %arg1, %arg0 {ds.buffers = array<i64: {{[0-9]+}}>}
// NOINPLACE: ds.mul {{.*}} {ds.bound_slots = array<i64: 0>, ds.buffers = array<i64: -1>
// NOINPLACE: ds.mul {{.*}} {ds.bound_slots = array<i64: 1>, ds.buffers = array<i64: -1>
func.func @two_readers(%w: tensor<4x4xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "m.bin", offset = 0, length = 64>>},
                       %g: tensor<4x4xf32> {ds.input = "g", ds.role = #ds.role<recv>},
                       %a: tensor<4x4xf32> {ds.input = "a", ds.role = #ds.role<stash>},
                       %b: tensor<4x4xf32> {ds.input = "b", ds.role = #ds.role<stash>})
    -> (tensor<4x4xf32> {ds.output = "da", ds.role = #ds.role<send>},
        tensor<4x4xf32> {ds.output = "db", ds.role = #ds.role<send>})
    attributes {ds.pipeline_part = #ds.pipeline_part<part = backward, stage = 1>} {
  %x = ds.matmul %g, %w : tensor<4x4xf32>, tensor<4x4xf32>
  %da = ds.mul %x, %a : tensor<4x4xf32>, tensor<4x4xf32>
  %db = ds.mul %x, %b : tensor<4x4xf32>, tensor<4x4xf32>
  return %da, %db : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// The residual gradient a middle stage sends, summed in place over the sum
// before it (read through a view by a matmul first): the sum is computed
// into the send slot, which is slot 1 because the loss-free stage's first
// output with a role is a stash. The stash is computed into slot 0 and
// nothing shares it (its op reads an argument).
// CHECK-LABEL: func.func @residual
// CHECK: %[[S:[0-9]+]] = ds.add %arg1, %arg2 {ds.bound_slots = array<i64: 1>, ds.buffers = array<i64: -1>
// CHECK: ds.reshape %[[S]] {ds.buffers = array<i64: -1>
// CHECK: ds.matmul {{.*}} {ds.buffers = array<i64: [[M:[0-9]+]]>}
// CHECK: ds.add %[[S]], %{{[0-9]+}} {ds.bound_slots = array<i64: 1>, ds.buffers = array<i64: -1>
// CHECK: ds.exp %arg2 {ds.bound_slots = array<i64: 0>, ds.buffers = array<i64: -1>
func.func @residual(%w: tensor<4x4xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "m.bin", offset = 0, length = 64>>},
                    %g: tensor<4x4xf32> {ds.input = "g", ds.role = #ds.role<recv>},
                    %y: tensor<4x4xf32> {ds.input = "y", ds.role = #ds.role<stash>})
    -> (tensor<4x4xf32> {ds.output = "e", ds.role = #ds.role<stash>},
        tensor<4x4xf32> {ds.output = "dx", ds.role = #ds.role<send>})
    attributes {ds.pipeline_part = #ds.pipeline_part<part = forward, stage = 1>} {
  %s = ds.add %g, %y : tensor<4x4xf32>, tensor<4x4xf32>
  %v = ds.reshape %s : tensor<4x4xf32> -> tensor<16xf32>
  %vv = ds.reshape %v : tensor<16xf32> -> tensor<4x4xf32>
  %m = ds.matmul %vv, %w : tensor<4x4xf32>, tensor<4x4xf32>
  %dx = ds.add %s, %m : tensor<4x4xf32>, tensor<4x4xf32>
  %e = ds.exp %y : tensor<4x4xf32>
  return %e, %dx : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// Where the slot cannot hold both, the root keeps a buffer of its own:
// %x is read after the in-place op (@read_later); the op also reads %x
// through a view in its other operand (@other_operand); a transfer, an
// asynchronous op that reads %x until its result is first used, after the
// in-place op, reads it (@async_reader).
// CHECK-LABEL: func.func @read_later
// CHECK: ds.exp %arg1 {ds.buffers = array<i64: [[X:[0-9]+]]>}
// CHECK: ds.mul {{.*}} {ds.bound_slots = array<i64: 0>, ds.buffers = array<i64: -1>
func.func @read_later(%a: tensor<4x4xf32> {ds.input = "a", ds.role = #ds.role<stash>},
                      %g: tensor<4x4xf32> {ds.input = "g", ds.role = #ds.role<recv>})
    -> (tensor<4x4xf32> {ds.output = "d", ds.role = #ds.role<send>}, tensor<4x4xf32> {ds.output = "n"})
    attributes {ds.pipeline_part = #ds.pipeline_part<part = backward, stage = 1>} {
  %x = ds.exp %g : tensor<4x4xf32>
  %d = ds.mul %x, %a : tensor<4x4xf32>, tensor<4x4xf32>
  %n = ds.neg %x : tensor<4x4xf32>
  return %d, %n : tensor<4x4xf32>, tensor<4x4xf32>
}

// CHECK-LABEL: func.func @other_operand
// CHECK: ds.exp %arg0 {ds.buffers = array<i64: {{[0-9]+}}>}
// CHECK: ds.add {{.*}} {ds.bound_slots = array<i64: 0>, ds.buffers = array<i64: -1>
func.func @other_operand(%g: tensor<4x4xf32> {ds.input = "g", ds.role = #ds.role<recv>})
    -> (tensor<4x4xf32> {ds.output = "d", ds.role = #ds.role<send>})
    attributes {ds.pipeline_part = #ds.pipeline_part<part = backward, stage = 1>} {
  %x = ds.exp %g : tensor<4x4xf32>
  %v = ds.reshape %x : tensor<4x4xf32> -> tensor<4x4xf32>
  %d = ds.add %x, %v : tensor<4x4xf32>, tensor<4x4xf32>
  return %d : tensor<4x4xf32>
}

// CHECK-LABEL: func.func @async_reader
// CHECK: ds.exp %arg0 {ds.buffers = array<i64: {{[0-9]+}}>}
// CHECK: ds.transfer
// CHECK: ds.mul {{.*}} {ds.bound_slots = array<i64: 0>, ds.buffers = array<i64: -1>
func.func @async_reader(%g: tensor<4x4xf32> {ds.input = "g", ds.role = #ds.role<recv>},
                        %a: tensor<4x4xf32> {ds.input = "a", ds.role = #ds.role<stash>})
    -> (tensor<4x4xf32> {ds.output = "d", ds.role = #ds.role<send>}, tensor<4x4xf32> {ds.output = "h"})
    attributes {ds.pipeline_part = #ds.pipeline_part<part = backward, stage = 1>} {
  %x = ds.exp %g : tensor<4x4xf32>
  %h = ds.transfer %x {from = #ds.space<device>, to = #ds.space<host>} : tensor<4x4xf32>
  %d = ds.mul %x, %a : tensor<4x4xf32>, tensor<4x4xf32>
  return %d, %h : tensor<4x4xf32>, tensor<4x4xf32>
}
