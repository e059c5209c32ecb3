// A generated cuda loop whose rows (6 bf16 elements) are no multiple of a
// 128-bit vector computes one element per thread, its index arithmetic
// 32-bit: the row and column of the flat index, an input broadcast along
// rows at the column, one broadcast along columns once per row, and one
// broadcast along a middle axis at its coordinates of the flat index.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-elementwise),ds-plan-memory,ds-lower-to-emitc{model-path=/models/m.onnx target=cuda})' | mlir-translate --mlir-to-cpp | FileCheck %s

// CHECK: static __global__ void dsopt_fused_0_kernel(uint16_t* [[X:v[0-9]+]], uint16_t* [[B:v[0-9]+]], uint16_t* [[R:v[0-9]+]], uint16_t* [[M:v[0-9]+]], uint16_t* [[OUT:v[0-9]+]]) {
// CHECK-NOT: int64_t
// CHECK-NOT: load_vector
// CHECK: for (uint32_t [[I:i[0-9]+]] = {{v[0-9]+}}; [[I]] < 48; [[I]] += {{v[0-9]+}}) {
// CHECK-NEXT: uint32_t [[ROW:v[0-9]+]] = [[I]] / 6;
// CHECK-NEXT: uint16_t {{v[0-9]+}} = [[R]][[[ROW]]];
// CHECK: uint32_t [[COL:v[0-9]+]] = [[I]] - {{v[0-9]+}};
// CHECK: = [[X]][[[I]]];
// CHECK: = [[B]][[[COL]]];
// CHECK: uint32_t [[B0:v[0-9]+]] = [[I]] / 24;
// CHECK-NEXT: uint32_t [[B1:v[0-9]+]] = [[B0]] * 6;
// CHECK-NEXT: uint32_t [[C:v[0-9]+]] = [[I]] % 6;
// CHECK-NEXT: uint32_t [[MI:v[0-9]+]] = [[B1]] + [[C]];
// CHECK-NEXT: = [[M]][[[MI]]];
// CHECK: = dsrt::math::float_to_bfloat(
// CHECK-NEXT: [[OUT]][[[I]]] = 
// CHECK-NOT: store_vector
// CHECK: dsopt_fused_0_kernel<<<1, 256, 0,
module attributes {ds.source = "m.onnx"} {
  func.func @main(%x: tensor<2x4x6xbf16> {ds.input = "x"}, %b: tensor<6xbf16> {ds.input = "b"},
                  %r: tensor<2x4x1xbf16> {ds.input = "r"}, %m: tensor<2x1x6xbf16> {ds.input = "m"})
      -> (tensor<2x4x6xbf16> {ds.output = "y"}) {
    %0 = ds.add %x, %b : tensor<2x4x6xbf16>, tensor<6xbf16>
    %1 = ds.mul %0, %r : tensor<2x4x6xbf16>, tensor<2x4x1xbf16>
    %2 = ds.sub %1, %m : tensor<2x4x6xbf16>, tensor<2x1x6xbf16>
    %3 = ds.tanh %2 : tensor<2x4x6xbf16>
    return %3 : tensor<2x4x6xbf16>
  }
}
