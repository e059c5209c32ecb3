// A float-to-integer cast in a fused loop calls the saturating
// dsrt::math::float_to_int with its integer type spelled out (it cannot be
// deduced from the float argument).
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-elementwise),ds-plan-memory,ds-lower-to-emitc{model-path=/models/m.onnx})' | mlir-translate --mlir-to-cpp | FileCheck %s

// CHECK: static void dsopt_fused_0(
// CHECK: dsrt::math::float_to_int<int64_t>(
// CHECK: static void dsopt_fused_1(
// CHECK: dsrt::math::float_to_int<int32_t>(
module attributes {ds.source = "m.onnx"} {
  func.func @main(%x: tensor<8x16xf32> {ds.input = "x"}, %i: tensor<8x16xi64> {ds.input = "i"},
                  %j: tensor<8x16xi32> {ds.input = "j"})
      -> (tensor<8x16xi64> {ds.output = "a"}, tensor<8x16xi32> {ds.output = "b"}) {
    %0 = ds.mul %x, %x : tensor<8x16xf32>, tensor<8x16xf32>
    %1 = ds.cast %0 : tensor<8x16xf32> to tensor<8x16xi64>
    %2 = ds.add %1, %i : tensor<8x16xi64>, tensor<8x16xi64>
    %3 = ds.neg %x : tensor<8x16xf32>
    %4 = ds.cast %3 : tensor<8x16xf32> to tensor<8x16xi32>
    %5 = ds.add %4, %j : tensor<8x16xi32>, tensor<8x16xi32>
    return %2, %5 : tensor<8x16xi64>, tensor<8x16xi32>
  }
}
