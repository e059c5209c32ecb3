// The program of an offloaded step on the cpu target: the host optimizer's
// operands are views of the host arena, every ds.transfer is a dsrt::transfer
// on the communication stream whose result is waited for (collective_wait)
// before the op that reads it, host slots are acquired and released in the
// host arena's monitor, and file-space states are reached only through
// their slots (dsrt::file_slot). The cuda target emits the same calls (the
// cuda backend runs the host update's kernels over its mapped pinned arena).
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-plan-memory,ds-lower-to-emitc)' | mlir-translate --mlir-to-cpp | FileCheck %s
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-plan-memory,ds-lower-to-emitc{target=cuda})' | mlir-translate --mlir-to-cpp | FileCheck %s --check-prefixes=CHECK,CUDA
// CUDA: #include "dsrt/cuda_launch.h"

// CHECK-LABEL: void dsopt_run_part0(
// CHECK: uint8_t* [[DEV:v[0-9]+]] = dsrt::arena(
// CHECK-NEXT: uint8_t* [[HOST:v[0-9]+]] = dsrt::host_arena(
// The learning rate to the host: a fresh host slot, a copy on the
// communication stream, issued like a collective.
// CHECK: dsrt::acquire_host(v1, [[LRH:[0-9]+]], 64);
// CHECK-NEXT: dsrt::Stream& [[COMM:v[0-9]+]] = dsrt::comm_stream(v1);
// CHECK-NEXT: dsrt::Tensor [[LRD:v[0-9]+]] = dsrt::view([[DEV]], {{[0-9]+}}, dsrt::DType::F32, {});
// CHECK-NEXT: dsrt::Tensor [[LRV:v[0-9]+]] = dsrt::view([[HOST]], [[LRH]], dsrt::DType::F32, {});
// CHECK-NEXT: dsrt::transfer([[COMM]], [[LRD]], [[LRV]], dsrt::Space::Device, dsrt::Space::Host);
// CHECK-NEXT: dsrt::collective_issued(v1, 0);
// The parameter and gradient copies do not wait for it: they touch other
// bytes.
// CHECK-NOT: collective_wait
// CHECK: dsrt::collective_issued(v1, 2);
// The update waits for its three operands, then runs on host-arena views,
// its state in place at the bottom of the host arena.
// CHECK-NEXT: dsrt::end_op(v1, 2);
// CHECK-NEXT: dsrt::collective_wait(v1, 0);
// CHECK-NEXT: dsrt::collective_wait(v1, 1);
// CHECK-NEXT: dsrt::collective_wait(v1, 2);
// CHECK-NEXT: dsrt::begin_op(v1, 3);
// CHECK-NEXT: dsrt::Tensor [[M:v[0-9]+]] = dsrt::view([[HOST]], 0, dsrt::DType::F32, {4});
// CHECK-NEXT: dsrt::Tensor [[NEWP:v[0-9]+]] = dsrt::view([[HOST]], {{[0-9]+}}, dsrt::DType::F32, {4});
// CHECK-NEXT: dsrt::Tensor [[NEWM:v[0-9]+]] = dsrt::view([[HOST]], 0, dsrt::DType::F32, {4});
// CHECK-NEXT: dsrt::lion(v{{[0-9]+}}, [[LRV]], {{.*}}, [[M]], [[NEWP]], [[NEWM]],
// CHECK: dsrt::release_host(v1, [[LRH]]);
// The updated parameter back into its device slot.
// CHECK: dsrt::transfer(v{{[0-9]+}}, [[NEWP]], v{{[0-9]+}}, dsrt::Space::Host, dsrt::Space::Device);
// CHECK: dsrt::collectives_done(v1);
// CHECK-LABEL: void dsopt_describe(
// CHECK: dsrt::set_space_plan(v1, dsrt::Space::Host, {{[0-9]+}}, 64);
// CHECK: dsrt::place_in_space(v1, "exp_avg:p", dsrt::Space::Host);
// The bytes each direction moves per run, which the runner checks.
// CHECK: dsrt::set_transfer_bytes(v1, dsrt::Space::Device, dsrt::Space::Host, 36);
// CHECK: dsrt::set_transfer_bytes(v1, dsrt::Space::Host, dsrt::Space::Device, 16);

module {
  func.func @main(%p: tensor<4xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<4xf32>>},
                  %m: tensor<4xf32> {ds.state = #ds.state<optimizer, role = "exp_avg", param = "p">, ds.space = #ds.space<host>},
                  %g: tensor<4xf32> {ds.input = "g"}, %lr: tensor<f32> {ds.input = "lr"})
      -> (tensor<4xf32> {ds.updates = 0 : i64}, tensor<4xf32> {ds.updates = 1 : i64}) {
    %lrh = ds.transfer %lr {from = #ds.space<device>, to = #ds.space<host>} : tensor<f32>
    %ph = ds.transfer %p {from = #ds.space<device>, to = #ds.space<host>} : tensor<4xf32>
    %gh = ds.transfer %g {from = #ds.space<device>, to = #ds.space<host>} : tensor<4xf32>
    %0:2 = ds.lion %lrh, %ph, %gh, %m {ds.space = #ds.space<host>} : tensor<f32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
    %1 = ds.transfer %0#0 {from = #ds.space<host>, to = #ds.space<device>} : tensor<4xf32>
    return %1, %0#1 : tensor<4xf32>, tensor<4xf32>
  }
}
