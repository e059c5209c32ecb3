// The activation, rounding, remainder and product ops print and parse back
// in the custom and the generic form, infer their result types, and have
// the cost of their kernels' formulas.
// RUN: dsopt-opt %s | dsopt-opt | FileCheck %s
// RUN: dsopt-opt %s --mlir-print-op-generic | dsopt-opt | FileCheck %s
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-print-cost{per-op=true})' -verify-diagnostics -o /dev/null

// CHECK-LABEL: func.func @activations
func.func @activations(%a: tensor<2x3xf32>, %h: tensor<2x3xbf16>, %i: tensor<2x3xi64>,
                       %j: tensor<3xi64>) -> () {
  // CHECK: ds.softplus %{{.*}} : tensor<2x3xf32>
  // expected-remark @+1 {{flops = 18, bytes = 48}}
  %0 = ds.softplus %a : tensor<2x3xf32>
  // CHECK: ds.elu %{{.*}} {alpha = 5.000000e-01 : f32} : tensor<2x3xbf16>
  // expected-remark @+1 {{flops = 24, bytes = 24}}
  %1 = ds.elu %h {alpha = 0.5 : f32} : tensor<2x3xbf16>
  // The default alpha (1) is not printed.
  // CHECK: ds.celu %{{.*}} : tensor<2x3xf32>
  // expected-remark @+1 {{flops = 30, bytes = 48}}
  %2 = ds.celu %a {alpha = 1.0 : f32} : tensor<2x3xf32>
  // CHECK: ds.sin %{{.*}} : tensor<2x3xf32>
  // expected-remark @+1 {{flops = 6, bytes = 48}}
  %3 = ds.sin %a : tensor<2x3xf32>
  // CHECK: ds.cos
  // expected-remark @+1 {{flops = 6, bytes = 48}}
  %4 = ds.cos %a : tensor<2x3xf32>
  // CHECK: ds.floor
  // expected-remark @+1 {{flops = 6, bytes = 48}}
  %5 = ds.floor %a : tensor<2x3xf32>
  // CHECK: ds.ceil
  // expected-remark @+1 {{flops = 6, bytes = 48}}
  %6 = ds.ceil %a : tensor<2x3xf32>
  // CHECK: ds.round
  // expected-remark @+1 {{flops = 6, bytes = 48}}
  %7 = ds.round %a : tensor<2x3xf32>
  // CHECK: ds.mod %{{.*}}, %{{.*}} : tensor<2x3xi64>, tensor<3xi64>
  // expected-remark @+1 {{flops = 6, bytes = 120}}
  %8 = ds.mod %i, %j : tensor<2x3xi64>, tensor<3xi64>
  // CHECK: ds.mod %{{.*}}, %{{.*}} {fmod} : tensor<2x3xf32>, tensor<2x3xf32>
  // expected-remark @+1 {{flops = 6, bytes = 72}}
  %9 = ds.mod %a, %a {fmod} : tensor<2x3xf32>, tensor<2x3xf32>
  // CHECK: ds.reduce_prod %{{.*}} {axes = array<i64: 1>, keepdims = false} : tensor<2x3xf32>
  // expected-remark @+1 {{flops = 6, bytes = 32}}
  %10 = ds.reduce_prod %a {axes = array<i64: 1>, keepdims = false} : tensor<2x3xf32>
  return
}
