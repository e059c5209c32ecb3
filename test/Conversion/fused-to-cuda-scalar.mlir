// A generated cuda loop whose rows (5 bf16 elements) are no multiple of a
// 128-bit vector (8 bf16) still computes 8 elements a thread, its index
// arithmetic 32-bit: a vector may span rows, so each lane finds the row and
// column of its flat index and reads an input broadcast along rows at the
// column, one broadcast along columns at the row, and one broadcast along a
// middle axis at its coordinates; the 6 elements after the 3 whole vectors
// take one thread each, as a loop of one element per thread computes them.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-elementwise),ds-plan-memory,ds-lower-to-emitc{model-path=/models/m.onnx target=cuda})' | mlir-translate --mlir-to-cpp | FileCheck %s

// CHECK: static __global__ void dsopt_fused_0_kernel(uint16_t* [[X:v[0-9]+]], uint16_t* [[B:v[0-9]+]], uint16_t* [[R:v[0-9]+]], uint16_t* [[M:v[0-9]+]], uint16_t* [[OUT:v[0-9]+]]) {
// CHECK-NOT: int64_t
// CHECK: uint32_t [[FIRST:v[0-9]+]] = {{v[0-9]+}} + threadIdx.x;
// CHECK: for (uint32_t [[V:i[0-9]+]] = [[FIRST]]; [[V]] < 3; [[V]] += {{v[0-9]+}}) {
// CHECK-NEXT: uint32_t [[BASE:v[0-9]+]] = [[V]] * 8;
// CHECK-NEXT: uint16_t [[XV:v[0-9]+]][8];
// CHECK-NEXT: dsrt::math::load_vector([[XV]], [[X]], [[BASE]]);
// CHECK-NEXT: uint16_t [[YV:v[0-9]+]][8];
// CHECK-NEXT: #pragma unroll
// CHECK-NEXT: for (uint32_t [[L:j[0-9]+]] = 0; [[L]] < 8; [[L]] += 1) {
// CHECK-NEXT: uint32_t [[I:v[0-9]+]] = [[BASE]] + [[L]];
// CHECK-NEXT: uint32_t [[ROW:v[0-9]+]] = [[I]] / 5;
// CHECK-NEXT: uint32_t [[RI:v[0-9]+]] = [[ROW]] * 5;
// CHECK-NEXT: uint32_t [[COL:v[0-9]+]] = [[I]] - [[RI]];
// CHECK-NEXT: = [[R]][[[ROW]]];
// CHECK: = [[XV]][[[L]]];
// CHECK: = [[B]][[[COL]]];
// CHECK: uint32_t [[B0:v[0-9]+]] = [[I]] / 15;
// CHECK-NEXT: uint32_t [[B1:v[0-9]+]] = [[B0]] * 5;
// CHECK-NEXT: uint32_t [[C:v[0-9]+]] = [[I]] % 5;
// CHECK-NEXT: uint32_t [[MI:v[0-9]+]] = [[B1]] + [[C]];
// CHECK-NEXT: = [[M]][[[MI]]];
// CHECK: = dsrt::math::float_to_bfloat(
// CHECK-NEXT: [[YV]][[[L]]] =
// CHECK: dsrt::math::store_vector([[OUT]], [[BASE]], [[YV]]);
// The tail: elements 24 .. 29.
// CHECK: uint32_t [[TFIRST:v[0-9]+]] = [[FIRST]] + 24;
// CHECK-NEXT: for (uint32_t [[T:i[0-9]+]] = [[TFIRST]]; [[T]] < 30; [[T]] += {{v[0-9]+}}) {
// CHECK-NEXT: uint32_t [[TROW:v[0-9]+]] = [[T]] / 5;
// CHECK-NEXT: uint16_t {{v[0-9]+}} = [[R]][[[TROW]]];
// CHECK: uint32_t [[TCOL:v[0-9]+]] = [[T]] - {{v[0-9]+}};
// CHECK: = [[X]][[[T]]];
// CHECK: = [[B]][[[TCOL]]];
// CHECK: = [[M]][
// CHECK: = dsrt::math::float_to_bfloat(
// CHECK-NEXT: [[OUT]][[[T]]] =
// CHECK: dsopt_fused_0_kernel<<<1, 256, 0,
module attributes {ds.source = "m.onnx"} {
  func.func @main(%x: tensor<2x3x5xbf16> {ds.input = "x"}, %b: tensor<5xbf16> {ds.input = "b"},
                  %r: tensor<2x3x1xbf16> {ds.input = "r"}, %m: tensor<2x1x5xbf16> {ds.input = "m"})
      -> (tensor<2x3x5xbf16> {ds.output = "y"}) {
    %0 = ds.add %x, %b : tensor<2x3x5xbf16>, tensor<5xbf16>
    %1 = ds.mul %0, %r : tensor<2x3x5xbf16>, tensor<2x3x1xbf16>
    %2 = ds.sub %1, %m : tensor<2x3x5xbf16>, tensor<2x1x5xbf16>
    %3 = ds.tanh %2 : tensor<2x3x5xbf16>
    return %3 : tensor<2x3x5xbf16>
  }
}
