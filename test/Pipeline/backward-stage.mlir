// ds-pipeline puts every backward op on the stage of the forward op it
// differentiates by the id ds-autodiff records (ds.grad_of = ds.forward_id),
// not by its location: with the `<node>.grad` locations of the backward ops
// renamed, or the backward ops cloned, the stages stay those of the forward
// ops. (Found by location, tanh0's derivative would follow its operand, the
// gradient coming back from stage 1, onto stage 1.)
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=2})' -mlir-print-debuginfo -o %t.step.mlir
// RUN: dsopt-opt %t.step.mlir --ds-pipeline='stages=2 microbatches=2' | FileCheck %s
// RUN: sed -e 's/\.grad"/.moved"/g' %t.step.mlir > %t.moved.mlir
// RUN: not grep -q '\.grad"' %t.moved.mlir
// RUN: dsopt-opt %t.moved.mlir --ds-pipeline='stages=2 microbatches=2' | FileCheck %s

// Forward: mm0 and tanh0 on stage 0, mm1, tanh1 and the mean on stage 1.
// CHECK-LABEL: func.func @micro_step
// CHECK: ds.matmul %arg0, %arg1 {ds.forward_id = [[MM0:[0-9]+]] : i64, ds.stage = 0 : i64}
// CHECK: ds.tanh %{{.*}} {ds.forward_id = [[TANH0:[0-9]+]] : i64, ds.stage = 0 : i64}
// CHECK: ds.matmul %{{.*}}, %arg2 {ds.forward_id = [[MM1:[0-9]+]] : i64, ds.stage = 1 : i64}
// CHECK: ds.tanh %{{.*}} {ds.forward_id = [[TANH1:[0-9]+]] : i64, ds.stage = 1 : i64}
// Backward: each derivative on its forward op's stage. tanh0's product with
// the gradient coming back from stage 1 stays on stage 0.
// CHECK: ds.mul {{.*}} {ds.grad_of = [[TANH1]] : i64, ds.stage = 1 : i64}
// CHECK: %[[DX1:.*]] = ds.matmul %{{.*}}, %arg2 {ds.grad_of = [[MM1]] : i64, ds.stage = 1 : i64, transpose_rhs}
// CHECK: ds.mul %[[DX1]], %{{.*}} {ds.grad_of = [[TANH0]] : i64, ds.stage = 0 : i64}
// CHECK: ds.matmul %arg0, %{{.*}} {ds.grad_of = [[MM0]] : i64, ds.stage = 0 : i64, transpose_lhs}
// CHECK-NOT: ds.stage = 1
// CHECK: return
func.func @main(%x: tensor<4x8xf32> {ds.input = "x"},
                %w0: tensor<8x8xf32> {ds.param = #ds.param<name = "w0", trainable = true, data = dense<0.5> : tensor<8x8xf32>>},
                %w1: tensor<8x8xf32> {ds.param = #ds.param<name = "w1", trainable = true, data = dense<0.25> : tensor<8x8xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.matmul %x, %w0 : tensor<4x8xf32>, tensor<8x8xf32> loc("mm0")
  %1 = ds.tanh %0 : tensor<4x8xf32> loc("tanh0")
  %2 = ds.matmul %1, %w1 : tensor<4x8xf32>, tensor<8x8xf32> loc("mm1")
  %3 = ds.tanh %2 : tensor<4x8xf32> loc("tanh1")
  %4 = ds.reduce_mean %3 {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> loc("mean")
  return %4 : tensor<f32>
}
