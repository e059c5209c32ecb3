// The file space's reads and writes are issued on the program's file I/O
// stream (dsrt::io_stream, marked by dsrt::io_issued), not on the
// communication stream: a copy there first waits for everything pending on
// its stream, so a read ahead issued on it would be waited for by the next
// copy at once. A fetched shard's copy to the device waits for its read
// only (collective_wait of that read) and is issued right before its
// reader, after the reads issued ahead of it.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-zero{stage=3 dp=1 param-persistence-threshold=1},ds-offload{device=nvme param-device=nvme param-max-in-cpu=0 param-buffer-count=2},ds-plan-memory,ds-lower-to-emitc)' | mlir-translate --mlir-to-cpp | FileCheck %s

// CHECK-LABEL: void dsopt_micro_step_part0(
// CHECK: dsrt::Stream& [[IO0:v[0-9]+]] = dsrt::io_stream(v1);
// CHECK: dsrt::transfer([[IO0]], {{.*}}, dsrt::Space::File, dsrt::Space::Host);
// CHECK-NEXT: dsrt::io_issued(v1, 0);
// CHECK: dsrt::Stream& [[IO1:v[0-9]+]] = dsrt::io_stream(v1);
// CHECK: dsrt::transfer([[IO1]], {{.*}}, dsrt::Space::File, dsrt::Space::Host);
// CHECK-NEXT: dsrt::io_issued(v1, 1);
// CHECK-NOT: io_issued
// CHECK: dsrt::collective_wait(v1, 0);
// CHECK-NOT: collective_wait
// CHECK: dsrt::Stream& [[COMM:v[0-9]+]] = dsrt::comm_stream(v1);
// CHECK: dsrt::transfer([[COMM]], {{.*}}, dsrt::Space::Host, dsrt::Space::Device);
// CHECK-NEXT: dsrt::collective_issued(v1, 2);
// The optimizer step's states are written behind on the file I/O stream.
// CHECK-LABEL: void dsopt_optimizer_step_part0(
// CHECK: dsrt::transfer(v{{[0-9]+}}, {{.*}}, dsrt::Space::Host, dsrt::Space::File);
// CHECK-NEXT: dsrt::io_issued(v1,

func.func @main(%x: tensor<2xf32> {ds.input = "x"},
                %a: tensor<2xf32> {ds.param = #ds.param<name = "a", trainable = true, data = dense<0.5> : tensor<2xf32>>},
                %c: tensor<2x2xf32> {ds.param = #ds.param<name = "c", trainable = true, data = dense<0.25> : tensor<2x2xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.mul %x, %a : tensor<2xf32>, tensor<2xf32>
  %1 = ds.add %c, %a : tensor<2x2xf32>, tensor<2xf32>
  %2 = ds.mul %1, %0 : tensor<2x2xf32>, tensor<2xf32>
  %3 = ds.reduce_mean %2 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x2xf32>
  return %3 : tensor<f32>
}
