// The distribution and autodiff annotations round-trip.
// RUN: dsopt-opt %s | dsopt-opt | FileCheck %s

// CHECK: module attributes {ds.zero = #ds.zero<stage = 2, dp = 4, param_persistence_threshold = 100000>}
module attributes {ds.zero = #ds.zero<stage = 2, dp = 4, param_persistence_threshold = 100000>} {
  // CHECK: shard.grid @grid(shape = 2x4) {ds.axes = #ds.axes<[pp, dp]>}
  shard.grid @grid(shape = 2x4) {ds.axes = #ds.axes<[pp, dp]>}
  // CHECK-LABEL: func.func @ids
  // CHECK: ds.exp %{{.*}} {ds.forward_id = 0 : i64}
  // CHECK: ds.mul %{{.*}}, %{{.*}} {ds.grad_of = 0 : i64}
  func.func @ids(%x: tensor<4xf32>, %g: tensor<4xf32>) -> tensor<4xf32> {
    %0 = ds.exp %x {ds.forward_id = 0 : i64} : tensor<4xf32>
    %1 = ds.mul %g, %0 {ds.grad_of = 0 : i64} : tensor<4xf32>, tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}
