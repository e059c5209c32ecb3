// ds-lower-to-emitc: one libdsrt call per kernel on views of the planned
// arena, a generated loop per ds.fused, constants as static arrays, and the
// program description.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-elementwise),ds-plan-memory,ds-lower-to-emitc{model-path=/models/m.onnx})' | FileCheck %s --check-prefix=EMITC
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-elementwise),ds-plan-memory,ds-lower-to-emitc{model-path=/models/m.onnx})' | mlir-translate --mlir-to-cpp | FileCheck %s --check-prefix=CPP
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-lower-to-emitc)' 2>&1 | FileCheck %s --check-prefix=UNPLANNED
// The flat reference (outline=false) describes each parameter with a call;
// by default the description's lists are tables of dsrt/tables.h rows.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-elementwise),ds-plan-memory,ds-lower-to-emitc{model-path=/models/m.onnx outline=false})' | FileCheck %s --check-prefix=FLAT
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-elementwise),ds-plan-memory,ds-lower-to-emitc{model-path=/models/m.onnx outline=false})' | mlir-translate --mlir-to-cpp | FileCheck %s --check-prefix=FLATCPP

// EMITC: emitc.include "dsrt/program.h"
// EMITC: emitc.global static const @dsopt_constant_0 : !emitc.array<2xf32> = dense<[1.000000e+00, 2.000000e+00]>
// EMITC: emitc.func @dsopt_fused_0
// EMITC-SAME: specifiers = ["static"]
// EMITC: emitc.func @dsopt_run_part0(%{{.*}}: !emitc.opaque<"dsrt::Program&">)
// EMITC-SAME: specifiers = ["static", "__attribute__((noinline))"]
// EMITC: call_opaque "dsrt::matmul"
// EMITC: call_opaque "dsopt_fused_0"
// EMITC: emitc.func @dsopt_run(%[[RPA:.*]]: !emitc.opaque<"dsrt::Program&">)
// EMITC-NEXT: call_opaque "dsopt_run_part0"(%[[RPA]])
// EMITC: emitc.global static const @dsopt_table_0 : !emitc.array<1x!emitc.opaque<"dsrt::ParamFileRow">>
// EMITC: emitc.func @dsopt_describe
// EMITC: call_opaque "dsrt::add_param_files"
// EMITC: emitc.func @main

// FLAT: emitc.func @dsopt_describe
// FLAT: call_opaque "dsrt::add_param_file"
// FLAT: emitc.func @main

// CPP: static const float dsopt_constant_0[2] = {1.000000000e+00f, 2.000000000e+00f};
// CPP: static void dsopt_fused_0(dsrt::Stream& [[S:v[0-9]+]],
// CPP: #pragma omp parallel for
// CPP-NEXT: for (int64_t [[ROW:[a-z0-9]+]] = 0; [[ROW]] < 4096; [[ROW]] += 1) {
// CPP: for (int64_t [[COL:[a-z0-9]+]] = 0; [[COL]] < 16; [[COL]] += 1) {
// CPP: dsrt::math::fast_tanh(
// CPP: static __attribute__((noinline)) void dsopt_run_part0(dsrt::Program& [[P:v[0-9]+]]) {
// CPP: dsrt::Stream& [[STREAM:v[0-9]+]] = dsrt::stream([[P]]);
// CPP: dsrt::acquire([[P]], {{[0-9]+}}, 262144);
// CPP: dsrt::matmul([[STREAM]], {{.*}}, false, true, dsrt::Workspace{});
// CPP: void dsopt_run(dsrt::Program& [[RP:v[0-9]+]]) {
// CPP-NEXT: dsopt_run_part0([[RP]]);
// CPP: static const dsrt::ParamFileRow dsopt_table_0[1] = {
// CPP-NEXT: {"w", dsrt::DType::F32, {2, {16, 8}}, 0, true, "m.onnx", 128, 512, 0, {0, {}}, dsrt::DType::F32}};
// CPP: void dsopt_describe(dsrt::ProgramInfo& [[I:v[0-9]+]]) {
// CPP: dsrt::set_model([[I]], "/models/m.onnx");
// CPP: dsrt::add_param_files([[I]], dsopt_table_0, 1);
// CPP: dsrt::add_input([[I]], "x", dsrt::DType::F32, {4096, 8}, {{[0-9]+}});
// CPP: dsrt::add_output([[I]], "y", dsrt::DType::F32, {4096, 16});
// CPP: dsrt::add_ops([[I]], dsopt_table_1, 2);
// CPP: int main(int

// FLATCPP: void dsopt_describe(dsrt::ProgramInfo& [[I:v[0-9]+]]) {
// FLATCPP: dsrt::set_model([[I]], "/models/m.onnx");
// FLATCPP: dsrt::add_param_file([[I]], "w", dsrt::DType::F32, {16, 8}, 0, true, "m.onnx", 128, 512);
// FLATCPP: dsrt::add_input([[I]], "x", dsrt::DType::F32, {4096, 8}, {{[0-9]+}});
// FLATCPP: dsrt::add_op([[I]], "ds.matmul"

// UNPLANNED: error: 'func.func' op is not memory-planned; run ds-plan-memory first

module attributes {ds.source = "m.onnx"} {
  func.func @main(%x: tensor<4096x8xf32> {ds.input = "x"},
                  %w: tensor<16x8xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "m.onnx", offset = 128, length = 512>>})
      -> (tensor<4096x16xf32> {ds.output = "y"}, tensor<2xf32> {ds.output = "c"}) {
    %c = ds.constant dense<[1.0, 2.0]> : tensor<2xf32>
    %h = ds.matmul %x, %w {transpose_rhs} : tensor<4096x8xf32>, tensor<16x8xf32>
    %t = ds.tanh %h : tensor<4096x16xf32>
    %y = ds.add %t, %h : tensor<4096x16xf32>, tensor<4096x16xf32>
    return %y, %c : tensor<4096x16xf32>, tensor<2xf32>
  }
}
