// With target=cuda a fused loop becomes a __global__ kernel (a grid-stride
// loop over vectors of 4 f32 elements of one row, 32-bit index arithmetic;
// the input of the result's shape read and the result written as vectors,
// an input broadcast along rows read at the lane's column, a scalar once)
// and a host function of the cpu target's signature that launches it on
// the op's stream; main checks for a device first. The unfused ops still
// call their libdsrt kernels. fused-to-cuda-scalar.mlir: rows that are no
// multiple of a vector.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-elementwise),ds-plan-memory,ds-lower-to-emitc{model-path=/models/m.onnx target=cuda})' | mlir-translate --mlir-to-cpp | FileCheck %s
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-elementwise),ds-plan-memory,ds-lower-to-emitc{model-path=/models/m.onnx})' | mlir-translate --mlir-to-cpp | FileCheck %s --check-prefix=CPU
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-elementwise),ds-plan-memory,ds-lower-to-emitc{target=gpu})' 2>&1 | FileCheck %s --check-prefix=BAD

// CHECK: #include "dsrt/cuda_launch.h"
// CHECK: static __global__ void dsopt_fused_0_kernel(float* [[X:v[0-9]+]], float* [[B:v[0-9]+]], float* [[S:v[0-9]+]], float* [[OUT:v[0-9]+]]) {
// CHECK-NOT: int64_t
// CHECK: uint32_t [[FIRST:v[0-9]+]] = {{.*}} + threadIdx.x;
// CHECK: uint32_t [[STRIDE:v[0-9]+]] = {{.*}} * blockDim.x;
// CHECK: for (uint32_t [[I:i[0-9]+]] = [[FIRST]]; [[I]] < 32; [[I]] += [[STRIDE]]) {
// CHECK-NEXT: uint32_t [[BASE:v[0-9]+]] = [[I]] * 4;
// CHECK-NEXT: uint32_t [[ROW:v[0-9]+]] = [[BASE]] / 16;
// CHECK-NEXT: float [[SV:v[0-9]+]] = [[S]][0];
// CHECK-NEXT: uint32_t [[ROWSTART:v[0-9]+]] = [[ROW]] * 16;
// CHECK-NEXT: uint32_t [[COL0:v[0-9]+]] = [[BASE]] - [[ROWSTART]];
// CHECK-NEXT: float [[XV:v[0-9]+]][4];
// CHECK-NEXT: dsrt::math::load_vector([[XV]], [[X]], [[BASE]]);
// CHECK-NEXT: float [[OV:v[0-9]+]][4];
// CHECK-NEXT: #pragma unroll
// CHECK-NEXT: for (uint32_t [[L:j[0-9]+]] = 0; [[L]] < 4; [[L]] += 1) {
// CHECK-NEXT: uint32_t [[COL:v[0-9]+]] = [[COL0]] + [[L]];
// CHECK-NEXT: float {{v[0-9]+}} = [[XV]][[[L]]];
// CHECK-NEXT: float {{v[0-9]+}} = [[B]][[[COL]]];
// CHECK: dsrt::math::fast_tanh(
// CHECK-NEXT: [[OV]][[[L]]] = 
// CHECK-NEXT: }
// CHECK-NEXT: dsrt::math::store_vector([[OUT]], [[BASE]], [[OV]]);
// CHECK: static void dsopt_fused_0(dsrt::Stream& [[STREAM:v[0-9]+]], const dsrt::Tensor& {{.*}}) {
// CHECK-NEXT: cudaStream_t [[CS:v[0-9]+]] = dsrt::cuda::launch_stream([[STREAM]]);
// CHECK-COUNT-4: = dsrt::elements<float>(
// CHECK-NEXT: dsopt_fused_0_kernel<<<1, 256, 0, [[CS]]>>>(
// CHECK-NEXT: dsrt::cuda::check_launch("dsopt_fused_0");
// CHECK: dsopt_fused_0(
// CHECK: dsrt::softmax(
// CHECK: int main(int [[ARGC:v[0-9]+]], char** [[ARGV:v[0-9]+]]) {
// CHECK: dsrt::cuda::require_device(

// CPU-NOT: cuda
// CPU: static void dsopt_fused_0(
// CPU: dsrt::begin_generated_kernel(
// CPU: for (int64_t

// BAD: unknown target 'gpu' (expected cpu or cuda)
module attributes {ds.source = "m.onnx"} {
  func.func @main(%x: tensor<8x16xf32> {ds.input = "x"}, %b: tensor<16xf32> {ds.input = "b"},
                  %s: tensor<f32> {ds.input = "s"})
      -> (tensor<8x16xf32> {ds.output = "y"}) {
    %0 = ds.add %x, %b : tensor<8x16xf32>, tensor<16xf32>
    %1 = ds.mul %0, %s : tensor<8x16xf32>, tensor<f32>
    %2 = ds.tanh %1 : tensor<8x16xf32>
    %3 = ds.softmax %2 {axis = 1 : i64} : tensor<8x16xf32>
    return %3 : tensor<8x16xf32>
  }
}
