// The scalar math of the activation, rounding and remainder ops in a fused
// loop becomes C library calls and C operators in the generated C++; the
// unfused ops call their libdsrt kernels.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-elementwise),ds-plan-memory,ds-lower-to-emitc{model-path=/models/m.onnx})' | mlir-translate --mlir-to-cpp | FileCheck %s

// CHECK: static void dsopt_fused_0(
// CHECK-DAG: std::log1p(
// CHECK-DAG: std::expm1(
// CHECK-DAG: std::sin(
// CHECK-DAG: std::cos(
// CHECK-DAG: std::floor(
// CHECK-DAG: std::ceil(
// CHECK-DAG: std::nearbyint(
// CHECK-DAG: std::fmod(
// CHECK: static void dsopt_fused_1(
// CHECK: % 
// CHECK: &
// CHECK: dsrt::unary({{.*}}, dsrt::UnaryOp::Softplus,
// CHECK: dsrt::binary({{.*}}, dsrt::BinaryOp::Fmod,
// CHECK: dsrt::reduce({{.*}}, dsrt::ReduceOp::Prod,
module attributes {ds.source = "m.onnx"} {
  func.func @main(%x: tensor<8x16xf32> {ds.input = "x"}, %i: tensor<8x16xi64> {ds.input = "i"},
                  %j: tensor<16xi64> {ds.input = "j"})
      -> (tensor<8x16xf32> {ds.output = "y"}, tensor<8x16xi64> {ds.output = "m"},
          tensor<8x16xf32> {ds.output = "s"}, tensor<8x16xf32> {ds.output = "f"},
          tensor<8xf32> {ds.output = "p"}) {
    %0 = ds.softplus %x : tensor<8x16xf32>
    %1 = ds.elu %0 {alpha = 0.5 : f32} : tensor<8x16xf32>
    %2 = ds.sin %1 : tensor<8x16xf32>
    %3 = ds.cos %2 : tensor<8x16xf32>
    %4 = ds.floor %3 : tensor<8x16xf32>
    %5 = ds.ceil %4 : tensor<8x16xf32>
    %6 = ds.round %5 : tensor<8x16xf32>
    %7 = ds.mod %6, %x {fmod} : tensor<8x16xf32>, tensor<8x16xf32>
    // Integer remainder with the divisor's sign: %, then the sign test.
    %8 = ds.mod %i, %j : tensor<8x16xi64>, tensor<16xi64>
    %9 = ds.add %8, %i : tensor<8x16xi64>, tensor<8x16xi64>
    // Single ops stay kernel calls.
    %s = ds.softplus %x : tensor<8x16xf32>
    %f = ds.mod %x, %s {fmod} : tensor<8x16xf32>, tensor<8x16xf32>
    %p = ds.reduce_prod %x {axes = array<i64: 1>, keepdims = false} : tensor<8x16xf32>
    return %7, %9, %s, %f, %p : tensor<8x16xf32>, tensor<8x16xi64>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8xf32>
  }
}
