// A backward op cloned by a later rewrite (here tanh0's product with the
// incoming gradient, recomputed at its use with a location of its own)
// keeps ds.grad_of and so the stage of its forward op. By location or by
// operands it would follow the gradient from stage 1.
// RUN: dsopt-opt %s --ds-pipeline='stages=2 microbatches=2' | FileCheck %s

// CHECK-LABEL: func.func @micro_step
// CHECK: %[[DX1:.*]] = ds.matmul %{{.*}}, %arg2 {ds.grad_of = 2 : i64, ds.stage = 1 : i64, transpose_rhs}
// CHECK: ds.mul %[[DX1]], %{{.*}} {ds.grad_of = 3 : i64, ds.stage = 0 : i64}
// CHECK: %[[CLONE:.*]] = ds.mul %[[DX1]], %{{.*}} {ds.grad_of = 3 : i64, ds.stage = 0 : i64}
// CHECK: ds.matmul %arg0, %[[CLONE]] {ds.grad_of = 4 : i64, ds.stage = 0 : i64, transpose_lhs}
module attributes {ds.train = {accumulation = 2 : i64}} {
  func.func @micro_step(%arg0: tensor<4x8xf32> {ds.input = "x"},
                        %arg1: tensor<8x8xf32> {ds.param = #ds.param<name = "w0", trainable = true, data = dense<5.000000e-01> : tensor<8x8xf32>>},
                        %arg2: tensor<8x8xf32> {ds.param = #ds.param<name = "w1", trainable = true, data = dense<2.500000e-01> : tensor<8x8xf32>>},
                        %arg3: tensor<8x8xf32> {ds.state = #ds.state<accumulator, param = "w0">}, %arg4: tensor<8x8xf32> {ds.state = #ds.state<accumulator, param = "w1">})
      -> (tensor<f32> {ds.output = "loss"}, tensor<8x8xf32> {ds.updates = 3 : i64}, tensor<8x8xf32> {ds.updates = 4 : i64}) {
    %0 = ds.constant dense<3.125000e-02> : tensor<4x8xf32>
    %1 = ds.constant dense<1.000000e+00> : tensor<f32>
    %2 = ds.matmul %arg0, %arg1 {ds.forward_id = 4 : i64} : tensor<4x8xf32>, tensor<8x8xf32> loc("mm0")
    %3 = ds.tanh %2 {ds.forward_id = 3 : i64} : tensor<4x8xf32> loc("tanh0")
    %4 = ds.matmul %3, %arg2 {ds.forward_id = 2 : i64} : tensor<4x8xf32>, tensor<8x8xf32> loc("mm1")
    %5 = ds.tanh %4 {ds.forward_id = 1 : i64} : tensor<4x8xf32> loc("tanh1")
    %6 = ds.reduce_mean %5 {axes = array<i64: 0, 1>, ds.forward_id = 0 : i64, keepdims = false} : tensor<4x8xf32> loc("mean")
    %7 = ds.mul %5, %5 {ds.grad_of = 1 : i64} : tensor<4x8xf32>, tensor<4x8xf32> loc("tanh1.grad"("tanh1"))
    %8 = ds.sub %1, %7 {ds.grad_of = 1 : i64} : tensor<f32>, tensor<4x8xf32> loc("tanh1.grad"("tanh1"))
    %9 = ds.mul %8, %0 {ds.grad_of = 1 : i64} : tensor<4x8xf32>, tensor<4x8xf32> loc("tanh1.grad"("tanh1"))
    %10 = ds.matmul %9, %arg2 {ds.grad_of = 2 : i64, transpose_rhs} : tensor<4x8xf32>, tensor<8x8xf32> loc("mm1.grad"("mm1"))
    %11 = ds.matmul %3, %9 {ds.grad_of = 2 : i64, transpose_lhs} : tensor<4x8xf32>, tensor<4x8xf32> loc("mm1.grad"("mm1"))
    %12 = ds.add %arg4, %11 : tensor<8x8xf32>, tensor<8x8xf32>
    %13 = ds.mul %3, %3 {ds.grad_of = 3 : i64} : tensor<4x8xf32>, tensor<4x8xf32> loc("tanh0.grad"("tanh0"))
    %14 = ds.sub %1, %13 {ds.grad_of = 3 : i64} : tensor<f32>, tensor<4x8xf32> loc("tanh0.grad"("tanh0"))
    %15 = ds.mul %10, %14 {ds.grad_of = 3 : i64} : tensor<4x8xf32>, tensor<4x8xf32> loc("tanh0.grad"("tanh0"))
    %clone = ds.mul %10, %14 {ds.grad_of = 3 : i64} : tensor<4x8xf32>, tensor<4x8xf32> loc("recomputed")
    %16 = ds.matmul %arg0, %clone {ds.grad_of = 4 : i64, transpose_lhs} : tensor<4x8xf32>, tensor<4x8xf32> loc("mm0.grad"("mm0"))
    %17 = ds.add %arg3, %16 : tensor<8x8xf32>, tensor<8x8xf32>
    return %6, %17, %12 : tensor<f32>, tensor<8x8xf32>, tensor<8x8xf32>
  }
}
