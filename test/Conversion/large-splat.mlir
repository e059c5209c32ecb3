// A splat constant above the literal limit lives in zero-initialized static
// storage and is filled where the run function views it (each op's code is
// first emitted into a scratch function to find repeated blocks, so the
// fill cannot be left to the first view only), on the function's stream.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-plan-memory,ds-lower-to-emitc{model-path=/models/m.onnx})' | mlir-translate --mlir-to-cpp | FileCheck %s

// CHECK: static float [[ONES:dsopt_constant_[0-9]+]][1024];
// CHECK: void dsopt_run_part0(dsrt::Program& [[P:v[0-9]+]])
// CHECK: dsrt::Stream& [[STREAM:v[0-9]+]] = dsrt::stream([[P]]);
// CHECK: dsrt::Tensor [[VIEW:v[0-9]+]] = dsrt::view_static([[ONES]], dsrt::DType::F32, {1024});
// CHECK-NEXT: dsrt::fill([[STREAM]], [[VIEW]], 1.0{{0*}}e+00);
// CHECK: dsrt::binary({{.*}}, dsrt::BinaryOp::Add,

module attributes {ds.source = "m.onnx"} {
  func.func @main(%x: tensor<2x1024xf32> {ds.input = "x"})
      -> (tensor<2x1024xf32> {ds.output = "y"}) {
    %c = ds.constant dense<1.0> : tensor<1024xf32>
    %y = ds.add %x, %c : tensor<2x1024xf32>, tensor<1024xf32>
    return %y : tensor<2x1024xf32>
  }
}
