// ds-group-optimizer: the ds.adamw updates of a step that share lr, step,
// grad_scale, attributes and element types become one ds.adamw_multi in the
// place of the last one; the rest stay as they are.
// RUN: dsopt-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(ds-group-optimizer))' | FileCheck %s

// Three updates with one lr, step and scale; the one with another weight
// decay and the one with another scale are left alone (groups of one).
// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[LR:[^:]+]]: tensor<f32>, %[[STEP:[^:]+]]: tensor<i64>, %[[S:[^:]+]]: tensor<f32>, %[[S2:[^:]+]]: tensor<f32>, %[[P0:[^:]+]]: tensor<4xf32>, %[[P1:[^:]+]]: tensor<2x3xf32>, %[[P2:[^:]+]]: tensor<5xf32>
// CHECK: %[[D:[a-z_0-9]+]], {{.*}} = ds.adamw %[[LR]], %[[STEP]], %[[P2]], {{.*}} {weight_decay = 0.00999999977 : f32}
// CHECK: %[[E:[a-z_0-9]+]], {{.*}} = ds.adamw %[[LR]], %[[STEP]], %[[P2]], {{.*}}, %[[S2]] :
// The lists: params, grads, first moments, second moments, grad_scale.
// CHECK: %[[M:.*]]:9 = ds.adamw_multi %[[LR]], %[[STEP]], %[[P0]], %[[P1]], %[[P0]], %[[G0:[^,]+]], %[[G1:[^,]+]], %[[G0]], %[[M0:[^,]+]], %[[M1:[^,]+]], %[[M0]], %[[M0]], %[[M1]], %[[M0]], %[[S]] {beta1 = 8.000000e-01 : f32} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<f32> -> tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>
// CHECK-NOT: ds.adamw
// CHECK: return %[[M]]#0, %[[M]]#3, %[[M]]#6, %[[M]]#1, %[[M]]#4, %[[M]]#7, %[[M]]#2, %[[D]], %[[E]]
func.func @step(%lr: tensor<f32>, %step: tensor<i64>, %s: tensor<f32>, %s2: tensor<f32>,
                %p0: tensor<4xf32>, %p1: tensor<2x3xf32>, %p2: tensor<5xf32>,
                %g0: tensor<4xf32>, %g1: tensor<2x3xf32>, %g2: tensor<5xf32>,
                %m0: tensor<4xf32>, %m1: tensor<2x3xf32>, %m2: tensor<5xf32>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<5xf32>, tensor<5xf32>) {
  %a:3 = ds.adamw %lr, %step, %p0, %g0, %m0, %m0, %s {beta1 = 0.8 : f32} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>
  %b:3 = ds.adamw %lr, %step, %p1, %g1, %m1, %m1, %s {beta1 = 0.8 : f32} : tensor<f32>, tensor<i64>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<f32>
  %d:3 = ds.adamw %lr, %step, %p2, %g2, %m2, %m2 {weight_decay = 0.01 : f32} : tensor<f32>, tensor<i64>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>
  %e:3 = ds.adamw %lr, %step, %p2, %g2, %m2, %m2, %s2 : tensor<f32>, tensor<i64>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<f32>
  %c:3 = ds.adamw %lr, %step, %p0, %g0, %m0, %m0, %s {beta1 = 0.8 : f32} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>
  return %a#0, %a#1, %a#2, %b#0, %b#1, %b#2, %c#0, %d#0, %e#0 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<5xf32>, tensor<5xf32>
}

// -----

// The uses of an update's results between the group's updates (the
// offloaded step's 16-bit copy of each parameter) follow the group's op, in
// their order. An update that reads a group's result starts a new group.
// Mixed element types (an f32 master weight, a bf16 gradient) are fine when
// every tensor of the group has them.
// CHECK-LABEL: func.func @used_between
// CHECK: %[[M:.*]]:6 = ds.adamw_multi {{.*}} {ds.space = #ds.space<host>} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32> ->
// CHECK-NEXT: %[[CA:.*]] = ds.cast %[[M]]#0
// CHECK-NEXT: ds.neg %[[CA]]
// CHECK-NEXT: ds.cast %[[M]]#1
// CHECK-NEXT: %[[D:[a-z_0-9]+]], {{.*}} = ds.adamw %{{[^,]+}}, %{{[^,]+}}, %[[M]]#0,
// CHECK-NEXT: ds.cast %[[D]] 
// CHECK-NEXT: return
func.func @used_between(%lr: tensor<f32>, %step: tensor<i64>, %p: tensor<4xf32>, %g: tensor<4xbf16>, %m: tensor<4xf32>)
    -> (tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xf32>) {
  %a:3 = ds.adamw %lr, %step, %p, %g, %m, %m {ds.space = #ds.space<host>} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>
  %ca = ds.cast %a#0 {ds.space = #ds.space<host>} : tensor<4xf32> to tensor<4xbf16>
  %na = ds.neg %ca : tensor<4xbf16>
  %b:3 = ds.adamw %lr, %step, %p, %g, %m, %m {ds.space = #ds.space<host>} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>
  %cb = ds.cast %b#0 {ds.space = #ds.space<host>} : tensor<4xf32> to tensor<4xbf16>
  %d:3 = ds.adamw %lr, %step, %a#0, %g, %m, %m {ds.space = #ds.space<host>} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>
  %cd = ds.cast %d#0 {ds.space = #ds.space<host>} : tensor<4xf32> to tensor<4xbf16>
  return %na, %cb, %cd, %d#1 : tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xf32>
}

// -----

// NVMe offload streams each update's states from and to files around it:
// those updates stay one per parameter.
// CHECK-LABEL: func.func @streamed
// CHECK-NOT: ds.adamw_multi
func.func @streamed(%lr: tensor<f32>, %step: tensor<i64>, %p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %mh = ds.transfer %m {from = #ds.space<file>, to = #ds.space<host>} : tensor<4xf32>
  %a:3 = ds.adamw %lr, %step, %p, %g, %mh, %mh {ds.space = #ds.space<host>} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  %b:3 = ds.adamw %lr, %step, %p, %g, %mh, %mh {ds.space = #ds.space<host>} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return %a#0, %b#0 : tensor<4xf32>, tensor<4xf32>
}
