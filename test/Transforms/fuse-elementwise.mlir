// ds-fuse-elementwise: chains of full-shape elementwise ops become one
// ds.fused loop; broadcast inputs and scalar constants are read inside it;
// a value used outside a group is recomputed in it only when all its users
// are elementwise ops of its shape and it reads one full-shape tensor.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-elementwise))' -split-input-file | FileCheck %s

// The exact GELU of a bias add (as PyTorch exports it): five ops, one loop.
// CHECK-LABEL: func.func @bias_gelu
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[R:.*]] = ds.fused(%[[B]], %[[X]]) : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[BS:.*]]: f32, %[[XS:.*]]: f32):
// CHECK-NEXT:   %[[S:.*]] = arith.addf %[[BS]], %[[XS]] : f32
// CHECK-NEXT:   %[[SQRT2:.*]] = arith.constant 1.41421354 : f32
// CHECK-NEXT:   %[[D:.*]] = arith.divf %[[S]], %[[SQRT2]] : f32
// CHECK-NEXT:   %[[E:.*]] = math.erf %[[D]] : f32
// CHECK:        ds.yield %{{.*}} : f32
// CHECK-NEXT: }
// CHECK-NEXT: return %[[R]]
func.func @bias_gelu(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %sqrt2 = ds.constant dense<1.41421354> : tensor<f32>
  %one = ds.constant dense<1.0> : tensor<f32>
  %half = ds.constant dense<0.5> : tensor<f32>
  %s = ds.add %b, %x : tensor<8xf32>, tensor<4x8xf32>
  %d = ds.div %s, %sqrt2 : tensor<4x8xf32>, tensor<f32>
  %e = ds.erf %d : tensor<4x8xf32>
  %p = ds.add %e, %one : tensor<4x8xf32>, tensor<f32>
  %m = ds.mul %s, %p : tensor<4x8xf32>, tensor<4x8xf32>
  %y = ds.mul %m, %half : tensor<4x8xf32>, tensor<f32>
  return %y : tensor<4x8xf32>
}

// -----

// %s is also returned: it stays its own op and feeds the fused rest.
// CHECK-LABEL: func.func @shared_value_not_recomputed
// CHECK: %[[S:.*]] = ds.add
// CHECK-NEXT: %[[F:.*]] = ds.fused(%[[S]])
// CHECK: return %[[S]], %[[F]]
func.func @shared_value_not_recomputed(%x: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %s = ds.add %x, %x : tensor<16xf32>, tensor<16xf32>
  %e = ds.exp %s : tensor<16xf32>
  %t = ds.tanh %e : tensor<16xf32>
  return %s, %t : tensor<16xf32>, tensor<16xf32>
}

// -----

// GELU in a training step: the backward reads the bias add %s, %d = s / sqrt 2
// and %p = erf(d) + 1 (DsVJP's rules for mul, erf and div). Each of them
// reads one full-shape tensor, so both loops recompute them from %x and %b:
// one loop forward, one backward, no intermediate written.
// CHECK-LABEL: func.func @bias_gelu_training
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xbf16>, %[[B:.*]]: tensor<8xbf16>, %[[G:.*]]: tensor<4x8xbf16>)
// CHECK-NEXT: %[[Y:.*]] = ds.fused(%[[X]], %[[B]]) : (tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<4x8xbf16> {
// CHECK:        math.erf
// CHECK:        ds.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[DX:.*]] = ds.fused(%[[X]], %[[B]], %[[G]]) : (tensor<4x8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16> {
// CHECK:        math.erf
// CHECK:        math.exp
// CHECK:        ds.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[Y]], %[[DX]]
func.func @bias_gelu_training(%x: tensor<4x8xbf16>, %b: tensor<8xbf16>, %g: tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %sqrt2 = ds.constant dense<1.41421354> : tensor<bf16>
  %one = ds.constant dense<1.0> : tensor<bf16>
  %half = ds.constant dense<0.5> : tensor<bf16>
  %c = ds.constant dense<1.12837911> : tensor<bf16>
  %s = ds.add %x, %b : tensor<4x8xbf16>, tensor<8xbf16>
  %d = ds.div %s, %sqrt2 : tensor<4x8xbf16>, tensor<bf16>
  %e = ds.erf %d : tensor<4x8xbf16>
  %p = ds.add %e, %one : tensor<4x8xbf16>, tensor<bf16>
  %m = ds.mul %s, %p : tensor<4x8xbf16>, tensor<4x8xbf16>
  %y = ds.mul %m, %half : tensor<4x8xbf16>, tensor<bf16>
  // backward of y = m * 0.5, m = s * p, p = e + 1, e = erf(d), d = s / sqrt 2
  %gm = ds.mul %g, %half : tensor<4x8xbf16>, tensor<bf16>
  %gs1 = ds.mul %gm, %p : tensor<4x8xbf16>, tensor<4x8xbf16>
  %gp = ds.mul %gm, %s : tensor<4x8xbf16>, tensor<4x8xbf16>
  %dd = ds.mul %d, %d : tensor<4x8xbf16>, tensor<4x8xbf16>
  %nd = ds.neg %dd : tensor<4x8xbf16>
  %ex = ds.exp %nd : tensor<4x8xbf16>
  %de = ds.mul %ex, %c : tensor<4x8xbf16>, tensor<bf16>
  %gd = ds.mul %gp, %de : tensor<4x8xbf16>, tensor<4x8xbf16>
  %gs2 = ds.div %gd, %sqrt2 : tensor<4x8xbf16>, tensor<bf16>
  %gs = ds.add %gs1, %gs2 : tensor<4x8xbf16>, tensor<4x8xbf16>
  return %y, %gs : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// A value that reads two full-shape tensors is not recomputed (each loop
// would read both where it reads the one value), nor is one that a
// non-elementwise op also reads.
// CHECK-LABEL: func.func @recompute_refused
// CHECK: %[[S:.*]] = ds.add %{{.*}}, %{{.*}} : tensor<16xf32>, tensor<16xf32>
// CHECK-NEXT: %[[E:.*]] = ds.exp %{{.*}} : tensor<16xf32>
// CHECK-NEXT: ds.fused(%[[S]])
// CHECK-NEXT: ^bb0
// CHECK-NEXT: math.tanh
// CHECK: ds.fused(%[[S]], %[[E]])
// CHECK: ds.reduce_sum %[[E]]
func.func @recompute_refused(%x: tensor<16xf32>, %y: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>, tensor<f32>) {
  %s = ds.add %x, %y : tensor<16xf32>, tensor<16xf32>
  %e = ds.exp %x : tensor<16xf32>
  %t = ds.tanh %s : tensor<16xf32>
  %u = ds.neg %t : tensor<16xf32>
  %v = ds.mul %s, %e : tensor<16xf32>, tensor<16xf32>
  %w = ds.neg %v : tensor<16xf32>
  %r = ds.reduce_sum %e {axes = array<i64: 0>, keepdims = false} : tensor<16xf32>
  return %u, %w, %r : tensor<16xf32>, tensor<16xf32>, tensor<f32>
}

// -----

// A producer of a smaller (broadcast) shape is computed once, not per
// element of the consumer: it is an input of the fused loop.
// CHECK-LABEL: func.func @broadcast_producer_stays
// CHECK: %[[E:.*]] = ds.exp %{{.*}} : tensor<8xf32>
// CHECK: ds.fused(%{{.*}}, %[[E]])
func.func @broadcast_producer_stays(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %e = ds.exp %b : tensor<8xf32>
  %a = ds.add %x, %e : tensor<4x8xf32>, tensor<8xf32>
  %r = ds.relu %a : tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

// Masking as exported from PyTorch (scale, then where with a constant mask)
// and mixed element types: the compare yields i1, the where a float.
// CHECK-LABEL: func.func @mask
// CHECK: ds.fused(%{{.*}}, %{{.*}}) : (tensor<2x4x4xf32>, tensor<1x4x4xi1>) -> tensor<2x4x4xf32>
// CHECK: ^bb0(%{{.*}}: f32, %{{.*}}: i1):
// CHECK: arith.mulf
// CHECK: arith.select
func.func @mask(%x: tensor<2x4x4xf32>, %m: tensor<1x4x4xi1>) -> tensor<2x4x4xf32> {
  %scale = ds.constant dense<0.25> : tensor<f32>
  %neg = ds.constant dense<-1.0e9> : tensor<f32>
  %s = ds.mul %x, %scale : tensor<2x4x4xf32>, tensor<f32>
  %w = ds.where %m, %neg, %s : tensor<1x4x4xi1>, tensor<f32>, tensor<2x4x4xf32>
  return %w : tensor<2x4x4xf32>
}

// -----

// A single elementwise op is left to its kernel.
// CHECK-LABEL: func.func @single
// CHECK-NOT: ds.fused
func.func @single(%x: tensor<16xf32>) -> tensor<16xf32> {
  %e = ds.exp %x : tensor<16xf32>
  return %e : tensor<16xf32>
}

// -----

// Casts fuse: float to integer is fptosi, integers compare signed.
// CHECK-LABEL: func.func @casts
// CHECK: ds.fused
// CHECK: arith.fptosi %{{.*}} : f32 to i64
// CHECK: arith.cmpi sgt
func.func @casts(%x: tensor<16xf32>, %y: tensor<16xi64>) -> tensor<16xi1> {
  %c = ds.cast %x : tensor<16xf32> to tensor<16xi64>
  %g = ds.compare gt, %c, %y : tensor<16xi64>, tensor<16xi64>
  return %g : tensor<16xi1>
}

// -----

// An op placed in a memory space by ds-offload (the host copy of an
// updated master weight, ds::isHostParameterCopy) runs there: it is never
// fused with the device ops that read it, which still fuse among
// themselves.
// CHECK-LABEL: func.func @host_op_not_fused
// CHECK: %[[C:.*]] = ds.cast %param_out {ds.space = #ds.space<host>} : tensor<16xf32> to tensor<16xbf16>
// CHECK-NEXT: %[[F:.*]] = ds.fused(%[[C]]) : (tensor<16xbf16>) -> tensor<16xbf16>
// CHECK: math.exp
// CHECK: math.tanh
// CHECK: return %[[F]]
func.func @host_op_not_fused(%lr: tensor<f32>, %step: tensor<i64>, %p: tensor<16xf32>, %g: tensor<16xf32>, %buf: tensor<16xf32>) -> tensor<16xbf16> {
  %u:2 = ds.sgd %lr, %step, %p, %g, %buf {ds.space = #ds.space<host>, momentum = 0.9 : f32} : tensor<f32>, tensor<i64>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
  %c = ds.cast %u#0 {ds.space = #ds.space<host>} : tensor<16xf32> to tensor<16xbf16>
  %e = ds.exp %c : tensor<16xbf16>
  %t = ds.tanh %e : tensor<16xbf16>
  return %t : tensor<16xbf16>
}

// -----

// Nor is a lone device op fused with the host op it reads.
// CHECK-LABEL: func.func @host_producer_not_fused
// CHECK-NOT: ds.fused
// CHECK: ds.cast %param_out {ds.space = #ds.space<host>}
// CHECK-NEXT: ds.exp
func.func @host_producer_not_fused(%lr: tensor<f32>, %step: tensor<i64>, %p: tensor<16xf32>, %g: tensor<16xf32>, %buf: tensor<16xf32>) -> tensor<16xbf16> {
  %u:2 = ds.sgd %lr, %step, %p, %g, %buf {ds.space = #ds.space<host>, momentum = 0.9 : f32} : tensor<f32>, tensor<i64>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
  %c = ds.cast %u#0 {ds.space = #ds.space<host>} : tensor<16xf32> to tensor<16xbf16>
  %e = ds.exp %c : tensor<16xbf16>
  return %e : tensor<16xbf16>
}
