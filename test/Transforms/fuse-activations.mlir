// The scalar bodies of softplus, elu, celu, sin, cos, floor, ceil and round
// in a ds.fused loop: the kernels' formulas, as arith and math ops.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-elementwise))' | FileCheck %s

// CHECK-LABEL: func.func @activations
// CHECK: ds.fused
// softplus: x > 20 ? x : log1p(exp(x))
// CHECK:      %[[BIG:.*]] = arith.cmpf ogt, %[[X:.*]], %{{.*}} : f32
// CHECK-NEXT: %[[EXP:.*]] = math.exp %[[X]] : f32
// CHECK-NEXT: %[[LOG:.*]] = math.log1p %[[EXP]] : f32
// CHECK-NEXT: %[[SP:.*]] = arith.select %[[BIG]], %[[X]], %[[LOG]] : f32
// elu: x > 0 ? x : alpha * expm1(x)
// CHECK:      %[[POS:.*]] = arith.cmpf ogt, %[[SP]], %{{.*}} : f32
// CHECK-NEXT: %[[EM1:.*]] = math.expm1 %[[SP]] : f32
// CHECK-NEXT: %[[ALPHA:.*]] = arith.constant 5.000000e-01 : f32
// CHECK-NEXT: %[[NEG:.*]] = arith.mulf %[[ALPHA]], %[[EM1]] : f32
// CHECK-NEXT: %[[ELU:.*]] = arith.select %[[POS]], %[[SP]], %[[NEG]] : f32
// celu: x > 0 ? x : alpha * expm1(x / alpha)
// CHECK:      arith.cmpf ogt, %[[ELU]]
// CHECK:      %[[INV:.*]] = arith.constant 5.000000e-01 : f32
// CHECK-NEXT: arith.mulf %[[ELU]], %[[INV]] : f32
// CHECK:      math.expm1
// CHECK:      math.sin
// CHECK:      math.cos
// CHECK:      math.floor
// CHECK:      math.ceil
// CHECK:      math.roundeven
// CHECK:      ds.yield
func.func @activations(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = ds.softplus %x : tensor<4x8xf32>
  %1 = ds.elu %0 {alpha = 0.5 : f32} : tensor<4x8xf32>
  %2 = ds.celu %1 {alpha = 2.0 : f32} : tensor<4x8xf32>
  %3 = ds.sin %2 : tensor<4x8xf32>
  %4 = ds.cos %3 : tensor<4x8xf32>
  %5 = ds.floor %4 : tensor<4x8xf32>
  %6 = ds.ceil %5 : tensor<4x8xf32>
  %7 = ds.round %6 : tensor<4x8xf32>
  return %7 : tensor<4x8xf32>
}
