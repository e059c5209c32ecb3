// ds-fuse-param-copy: an optimizer update followed by the bf16/f16 cast of
// its updated f32 parameter writes that copy itself (copy_type and a
// param_copy result; n more results on ds.adamw_multi); the cast goes.
// RUN: dsopt-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(ds-fuse-param-copy))' | FileCheck %s

// The offloaded step: the cast right after the host update, its copy sent
// to the device. Without a space (the cast before the return) too.
// CHECK-LABEL: func.func @adamw
// CHECK: %[[P:[a-z_0-9]+]], %[[M:[a-z_0-9]+]], %[[V:[a-z_0-9]+]], %[[C:[a-z_0-9]+]] = ds.adamw %{{.*}} {copy_type = bf16, ds.space = #ds.space<host>}
// CHECK-NEXT: %[[D:[0-9]+]] = ds.transfer %[[C]] {from = #ds.space<host>, to = #ds.space<device>} : tensor<4xbf16>
// CHECK: %[[P2:[a-z_0-9]+]], {{.*}}, %[[C2:[a-z_0-9]+]] = ds.adamw %{{.*}} {copy_type = f16}
// CHECK-NOT: ds.cast
// CHECK: return %[[D]], %[[P]], %[[M]], %[[V]], %[[C2]], %[[P2]] :
func.func @adamw(%lr: tensor<f32>, %step: tensor<i64>, %p: tensor<4xf32>, %g: tensor<4xbf16>, %m: tensor<4xf32>)
    -> (tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf16>, tensor<4xf32>) {
  %a:3 = ds.adamw %lr, %step, %p, %g, %m, %m {ds.space = #ds.space<host>} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>
  %c = ds.cast %a#0 {ds.space = #ds.space<host>} : tensor<4xf32> to tensor<4xbf16>
  %d = ds.transfer %c {from = #ds.space<host>, to = #ds.space<device>} : tensor<4xbf16>
  %b:3 = ds.adamw %lr, %step, %p, %g, %m, %m : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>
  %n = ds.neg %m : tensor<4xf32>
  %e = ds.cast %b#0 : tensor<4xf32> to tensor<4xf16>
  return %d, %a#0, %a#1, %a#2, %e, %b#0 : tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf16>, tensor<4xf32>
}

// -----

// SGD and Lion too.
// CHECK-LABEL: func.func @sgd_lion
// CHECK: %{{[a-z_0-9]+}}, %[[SV:[a-z_0-9]+]], %[[SC:[a-z_0-9]+]] = ds.sgd {{.*}}copy_type = bf16
// CHECK: %{{[a-z_0-9]+}}, %[[LM:[a-z_0-9]+]], %[[LC:[a-z_0-9]+]] = ds.lion {{.*}}copy_type = bf16
// CHECK-NOT: ds.cast
// CHECK: return %[[SC]], %[[LC]], %[[SV]], %[[LM]] :
func.func @sgd_lion(%lr: tensor<f32>, %step: tensor<i64>, %p: tensor<4xf32>, %g: tensor<4xbf16>, %m: tensor<4xf32>)
    -> (tensor<4xbf16>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>) {
  %s:2 = ds.sgd %lr, %step, %p, %g, %m {momentum = 0.9 : f32} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>
  %l:2 = ds.lion %lr, %p, %g, %m : tensor<f32>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>
  %cs = ds.cast %s#0 : tensor<4xf32> to tensor<4xbf16>
  %cl = ds.cast %l#0 : tensor<4xf32> to tensor<4xbf16>
  return %cs, %cl, %s#1, %l#1 : tensor<4xbf16>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>
}

// -----

// A group: one copy per tensor, after the moments.
// CHECK-LABEL: func.func @multi
// CHECK: %[[M:.*]]:8 = ds.adamw_multi {{.*}} {ds.space = #ds.space<host>} : {{.*}} -> tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xbf16>, tensor<2xbf16>
// CHECK-NOT: ds.cast
// CHECK: return %[[M]]#6, %[[M]]#7, %[[M]]#0
func.func @multi(%lr: tensor<f32>, %step: tensor<i64>, %p: tensor<4xf32>, %q: tensor<2xf32>, %g: tensor<4xbf16>, %h: tensor<2xbf16>)
    -> (tensor<4xbf16>, tensor<2xbf16>, tensor<4xf32>) {
  %u:6 = ds.adamw_multi %lr, %step, %p, %q, %g, %h, %p, %q, %p, %q {ds.space = #ds.space<host>} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<2xf32>, tensor<4xbf16>, tensor<2xbf16>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32> -> tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>
  %c0 = ds.cast %u#0 {ds.space = #ds.space<host>} : tensor<4xf32> to tensor<4xbf16>
  %c1 = ds.cast %u#1 {ds.space = #ds.space<host>} : tensor<2xf32> to tensor<2xbf16>
  return %c0, %c1, %u#0 : tensor<4xbf16>, tensor<2xbf16>, tensor<4xf32>
}

// -----

// Left alone: another op reads the updated master between the update and
// the cast; the cast runs elsewhere than the update; a group where one
// tensor has no cast; a cast to f32's own type.
// CHECK-LABEL: func.func @kept
// CHECK: ds.adamw %{{.*}} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>{{$}}
// CHECK: ds.neg
// CHECK: ds.cast
// CHECK: ds.adamw %{{.*}} {ds.space = #ds.space<host>} :
// CHECK: ds.cast
// CHECK: ds.adamw_multi %{{.*}} -> tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>{{$}}
// CHECK: ds.cast
// CHECK-NOT: copy_type
func.func @kept(%lr: tensor<f32>, %step: tensor<i64>, %p: tensor<4xf32>, %q: tensor<2xf32>, %g: tensor<4xbf16>, %h: tensor<2xbf16>)
    -> (tensor<4xf32>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>) {
  %a:3 = ds.adamw %lr, %step, %p, %g, %p, %p : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>
  %n = ds.neg %a#0 : tensor<4xf32>
  %c = ds.cast %a#0 : tensor<4xf32> to tensor<4xbf16>
  %b:3 = ds.adamw %lr, %step, %p, %g, %p, %p {ds.space = #ds.space<host>} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>
  %d = ds.cast %b#0 : tensor<4xf32> to tensor<4xbf16>
  %u:6 = ds.adamw_multi %lr, %step, %p, %q, %g, %h, %p, %q, %p, %q : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<2xf32>, tensor<4xbf16>, tensor<2xbf16>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32> -> tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>
  %e = ds.cast %u#0 : tensor<4xf32> to tensor<4xbf16>
  return %n, %c, %d, %e : tensor<4xf32>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>
}

// -----

// The ONNX preview optimizers (ds.adam, ds.momentum, ds.adagrad) come only
// from an imported ai.onnx.preview.training graph, never from ds-optimizer,
// so mixed precision never makes their master's cast: a cast after one is
// the graph's own and stays a cast (same bits either way).
// CHECK-LABEL: func.func @preview
// CHECK: ds.adam %{{.*}} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>{{$}}
// CHECK-NEXT: ds.cast
// CHECK-NEXT: ds.momentum
// CHECK-NEXT: ds.cast
// CHECK-NEXT: ds.adagrad
// CHECK-NEXT: ds.cast
// CHECK-NOT: copy_type
func.func @preview(%lr: tensor<f32>, %step: tensor<i64>, %p: tensor<4xf32>, %g: tensor<4xf32>)
    -> (tensor<4xbf16>, tensor<4xbf16>, tensor<4xf16>) {
  %a:3 = ds.adam %lr, %step, %p, %g, %p, %p : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  %c = ds.cast %a#0 : tensor<4xf32> to tensor<4xbf16>
  %m:2 = ds.momentum %lr, %step, %p, %g, %p {alpha = 0.9 : f32, beta = 1.0 : f32, mode = #ds<momentum_mode standard>, norm_coefficient = 0.0 : f32} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  %d = ds.cast %m#0 : tensor<4xf32> to tensor<4xbf16>
  %h:2 = ds.adagrad %lr, %step, %p, %g, %p : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  %e = ds.cast %h#0 : tensor<4xf32> to tensor<4xf16>
  return %c, %d, %e : tensor<4xbf16>, tensor<4xbf16>, tensor<4xf16>
}
