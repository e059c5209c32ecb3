// ds-tensor-parallel on textual IR: one transformer block (d = 8, two heads
// of 4, a fused Q/K/V projection, a GELU MLP of 32) over tp = 2. The layout
// comes from the ops' sharding rules; the backward from ds-autodiff.
// RUN: dsopt-opt %s -split-input-file --ds-tensor-parallel='size=2' -verify-diagnostics | FileCheck %s
// RUN: dsopt-opt %s -split-input-file --ds-tensor-parallel='size=2 dp=3' -verify-diagnostics | FileCheck %s --check-prefix=GRID
// RUN: dsopt-opt %s -split-input-file --pass-pipeline='builtin.module(ds-tensor-parallel{size=2},ds-autodiff,canonicalize,cse)' -verify-diagnostics | FileCheck %s --check-prefix=GRAD

// GRID: shard.grid @grid(shape = 3x2) {ds.axes = #ds.axes<[dp, tp]>}

// CHECK: shard.grid @grid(shape = 1x2) {ds.axes = #ds.axes<[dp, tp]>}
// CHECK-LABEL: func.func @main
// Column parallel: the fused projection in three blocks (Q, K, V), each
// split in two; its bias alike; the row-parallel weights along their input.
// CHECK-SAME: %arg3: tensor<8x12xf32> {ds.param = #ds.param<name = "qkv.weight"{{[^}]*}}>, ds.tp_split = #ds.tp_split<dim = 1, blocks = 3, ranks = 2>}
// CHECK-SAME: %arg4: tensor<12xf32> {ds.param = #ds.param<name = "qkv.bias"{{[^}]*}}>, ds.tp_split = #ds.tp_split<dim = 0, blocks = 3, ranks = 2>}
// CHECK-SAME: %arg5: tensor<4x8xf32> {ds.param = #ds.param<name = "proj.weight"{{[^}]*}}>, ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2>}
// The bias after the all-reduce and the norms stay whole.
// CHECK-SAME: %arg6: tensor<8xf32> {ds.param = #ds.param<name = "proj.bias", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 32>>},
// CHECK-SAME: %arg7: tensor<8x16xf32> {{[^}]*}}ds.tp_split = #ds.tp_split<dim = 1, blocks = 1, ranks = 2>}
// CHECK-SAME: %arg8: tensor<16xf32> {{[^}]*}}ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2>}
// CHECK-SAME: %arg9: tensor<16x8xf32> {{[^}]*}}ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2>}
// CHECK: %[[LN:.*]], %{{.*}}, %{{.*}} = ds.layer_norm %arg0
// Megatron's f, then one head per rank.
// CHECK: %[[F:.*]] = ds.tp_copy %[[LN]] on @grid {grid_axis = 1 : i64} : tensor<1x4x8xf32>
// CHECK: ds.matmul %[[F]], %arg3 : tensor<1x4x8xf32>, tensor<8x12xf32>
// CHECK: ds.split %{{.*}} {axis = 2 : i64} : tensor<1x4x12xf32> -> tensor<1x4x4xf32>, tensor<1x4x4xf32>, tensor<1x4x4xf32>
// CHECK: ds.reshape %{{.*}} : tensor<1x4x4xf32> -> tensor<1x4x1x4xf32>
// CHECK: ds.softmax %{{.*}} {axis = 3 : i64} : tensor<1x1x4x4xf32>
// CHECK: %[[ROW:.*]] = ds.matmul %{{.*}}, %arg5 : tensor<1x4x4xf32>, tensor<4x8xf32>
// Megatron's g, before the bias.
// CHECK-NEXT: %[[G:.*]] = shard.all_reduce %[[ROW]] on @grid grid_axes = [1] : tensor<1x4x8xf32> -> tensor<1x4x8xf32>
// CHECK-NEXT: ds.add %[[G]], %arg6
// CHECK: ds.tp_copy
// CHECK: ds.gelu %{{.*}} : tensor<1x4x16xf32>
// CHECK: shard.all_reduce %{{.*}} on @grid grid_axes = [1] : tensor<1x4x8xf32>
// CHECK-NOT: shard.all_reduce
// CHECK-NOT: ds.tp_copy
// CHECK: return

// Backward: the derivative of g is the identity, that of f the one
// all-reduce of each pair: two forward, two backward, no other.
// GRAD-LABEL: func.func @main_grad
// GRAD: ds.tp_copy {{.*}}ds.forward_id
// GRAD: shard.all_reduce {{.*}} grid_axes = [1] {ds.forward_id
// GRAD: ds.tp_copy {{.*}}ds.forward_id
// GRAD: shard.all_reduce {{.*}} grid_axes = [1] {ds.forward_id
// GRAD-NOT: shard.all_reduce
// GRAD: shard.all_reduce {{.*}} grid_axes = [1] {ds.grad_of = {{.*}} : tensor<1x4x8xf32>
// GRAD-NOT: shard.all_reduce
// GRAD: ds.softmax_grad {{.*}} : tensor<1x1x4x4xf32>
// GRAD-NOT: shard.all_reduce
// GRAD: shard.all_reduce {{.*}} grid_axes = [1] {ds.grad_of = {{.*}} : tensor<1x4x8xf32>
// GRAD-NOT: shard.all_reduce
// GRAD: return
func.func @main(%arg0: tensor<1x4x8xf32> {ds.input = "x"},
    %arg1: tensor<8xf32> {ds.param = #ds.param<name = "ln.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 32>>},
    %arg2: tensor<8xf32> {ds.param = #ds.param<name = "ln.bias", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 32>>},
    %arg3: tensor<8x24xf32> {ds.param = #ds.param<name = "qkv.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 768>>},
    %arg4: tensor<24xf32> {ds.param = #ds.param<name = "qkv.bias", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 96>>},
    %arg5: tensor<8x8xf32> {ds.param = #ds.param<name = "proj.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 256>>},
    %arg6: tensor<8xf32> {ds.param = #ds.param<name = "proj.bias", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 32>>},
    %arg7: tensor<8x32xf32> {ds.param = #ds.param<name = "fc.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 1024>>},
    %arg8: tensor<32xf32> {ds.param = #ds.param<name = "fc.bias", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 128>>},
    %arg9: tensor<32x8xf32> {ds.param = #ds.param<name = "fc_out.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 1024>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %mask = ds.constant dense<[[0.0, -1.0e9, -1.0e9, -1.0e9], [0.0, 0.0, -1.0e9, -1.0e9], [0.0, 0.0, 0.0, -1.0e9], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %scale = ds.constant dense<5.000000e-01> : tensor<f32>
  %ln, %mean, %istd = ds.layer_norm %arg0, %arg1, %arg2 {axis = 2 : i64} : tensor<1x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %qkv0 = ds.matmul %ln, %arg3 : tensor<1x4x8xf32>, tensor<8x24xf32>
  %qkv = ds.add %qkv0, %arg4 : tensor<1x4x24xf32>, tensor<24xf32>
  %p:3 = ds.split %qkv {axis = 2 : i64} : tensor<1x4x24xf32> -> tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>
  %q0 = ds.reshape %p#0 : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
  %q = ds.transpose %q0 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x4xf32>
  %k0 = ds.reshape %p#1 : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
  %k = ds.transpose %k0 {perm = array<i64: 0, 2, 3, 1>} : tensor<1x4x2x4xf32>
  %v0 = ds.reshape %p#2 : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
  %v = ds.transpose %v0 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x4xf32>
  %s0 = ds.matmul %q, %k : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
  %s1 = ds.mul %s0, %scale : tensor<1x2x4x4xf32>, tensor<f32>
  %s = ds.add %s1, %mask : tensor<1x2x4x4xf32>, tensor<4x4xf32>
  %a = ds.softmax %s {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o0 = ds.matmul %a, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
  %o1 = ds.transpose %o0 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x4x4xf32>
  %o = ds.reshape %o1 : tensor<1x4x2x4xf32> -> tensor<1x4x8xf32>
  %r0 = ds.matmul %o, %arg5 : tensor<1x4x8xf32>, tensor<8x8xf32>
  %r1 = ds.add %r0, %arg6 : tensor<1x4x8xf32>, tensor<8xf32>
  %h = ds.add %arg0, %r1 : tensor<1x4x8xf32>, tensor<1x4x8xf32>
  %f0 = ds.matmul %h, %arg7 : tensor<1x4x8xf32>, tensor<8x32xf32>
  %f1 = ds.add %f0, %arg8 : tensor<1x4x32xf32>, tensor<32xf32>
  %f2 = ds.gelu %f1 : tensor<1x4x32xf32>
  %f3 = ds.matmul %f2, %arg9 : tensor<1x4x32xf32>, tensor<32x8xf32>
  %y = ds.add %h, %f3 : tensor<1x4x8xf32>, tensor<1x4x8xf32>
  %sq = ds.mul %y, %y : tensor<1x4x8xf32>, tensor<1x4x8xf32>
  %loss = ds.reduce_mean %sq {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<1x4x8xf32>
  return %loss : tensor<f32>
}

// -----

// Three heads do not split over two ranks: an error naming the op and the
// sizes (the attention block would otherwise be silently replicated).
func.func @main(%arg0: tensor<1x4x6xf32> {ds.input = "x"},
    %arg1: tensor<6x6xf32> {ds.param = #ds.param<name = "v.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 144>>},
    %arg2: tensor<6x6xf32> {ds.param = #ds.param<name = "o.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 144>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %v = ds.matmul %arg0, %arg1 : tensor<1x4x6xf32>, tensor<6x6xf32>
  // expected-error @below {{ds-tensor-parallel: cannot split ds.reshape over 2 tp ranks: output axis 2 of size 3 does not split into 1 x 2 equal pieces (the layer of parameter 'v.weight')}}
  %h = ds.reshape %v : tensor<1x4x6xf32> -> tensor<1x4x3x2xf32>
  %m = ds.reshape %h : tensor<1x4x3x2xf32> -> tensor<1x4x6xf32>
  %o = ds.matmul %m, %arg2 : tensor<1x4x6xf32>, tensor<6x6xf32>
  %loss = ds.reduce_sum %o {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<1x4x6xf32>
  return %loss : tensor<f32>
}

// -----

// A projection whose output meets a norm over the split axis before any
// row-parallel product stays replicated, with a warning that says where.
// CHECK-LABEL: func.func @main
// CHECK-SAME: tensor<4x8xf32>
// CHECK-NOT: tp_split
// CHECK-NOT: tp_copy
// CHECK: return
func.func @main(%arg0: tensor<2x4xf32> {ds.input = "x"},
    %arg1: tensor<4x8xf32> {ds.param = #ds.param<name = "up.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 128>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %u = ds.matmul %arg0, %arg1 : tensor<2x4xf32>, tensor<4x8xf32>
  // expected-warning @below {{ds-tensor-parallel: parameter 'up.weight' stays replicated: ds.softmax: it normalizes along its split axis 1}}
  %s = ds.softmax %u {axis = 1 : i64} : tensor<2x8xf32>
  %loss = ds.reduce_sum %s {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x8xf32>
  return %loss : tensor<f32>
}

// -----

// Gemm (2-D) with biases, dropout and a reduction over an unsplit axis
// inside the region; a parameter broadcast along the split axis (the scale)
// enters through f like an activation, since each rank sums its gradient
// over its own piece only.
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg1: tensor<4x8xf32> {{[^}]*}}ds.tp_split = #ds.tp_split<dim = 1, blocks = 1, ranks = 2>}
// CHECK-SAME: %arg2: tensor<8xf32> {{[^}]*}}ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2>}
// CHECK-SAME: %arg3: tensor<1xf32> {ds.param
// CHECK-SAME: %arg4: tensor<8x4xf32> {{[^}]*}}ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2>}
// CHECK-DAG: %[[S:.*]] = ds.tp_copy %arg3 on @grid
// CHECK-DAG: %[[X:.*]] = ds.tp_copy %arg0 on @grid
// CHECK: ds.gemm %[[X]], %arg1, %arg2 : tensor<6x4xf32>, tensor<4x8xf32>, tensor<8xf32>
// CHECK: ds.mul %{{.*}}, %[[S]] : tensor<6x8xf32>, tensor<1xf32>
// CHECK: ds.dropout %{{.*}} : tensor<6x8xf32>
// CHECK: %[[R:.*]] = ds.gemm %{{.*}}, %arg4 : tensor<6x8xf32>, tensor<8x4xf32>
// CHECK-NEXT: shard.all_reduce %[[R]] on @grid grid_axes = [1] : tensor<6x4xf32>
func.func @main(%arg0: tensor<6x4xf32> {ds.input = "x"},
    %arg1: tensor<4x16xf32> {ds.param = #ds.param<name = "up.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 256>>},
    %arg2: tensor<16xf32> {ds.param = #ds.param<name = "up.bias", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 64>>},
    %arg3: tensor<1xf32> {ds.param = #ds.param<name = "scale", trainable = true, data = dense<2.0> : tensor<1xf32>>},
    %arg4: tensor<16x4xf32> {ds.param = #ds.param<name = "down.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 256>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %u = ds.gemm %arg0, %arg1, %arg2 : tensor<6x4xf32>, tensor<4x16xf32>, tensor<16xf32>
  %s = ds.mul %u, %arg3 : tensor<6x16xf32>, tensor<1xf32>
  %d, %mask = ds.dropout %s {ratio = 0.1 : f32, seed = 7 : i64} : tensor<6x16xf32>
  %o = ds.gemm %d, %arg4 : tensor<6x16xf32>, tensor<16x4xf32>
  %loss = ds.reduce_sum %o {axes = array<i64: 0, 1>, keepdims = false} : tensor<6x4xf32>
  return %loss : tensor<f32>
}

// -----

// A reduction over another axis keeps the split (shifted when the reduced
// axis is dropped); a row-parallel gemm with a bias would add the bias on
// every rank, so that layer stays replicated.
// CHECK-LABEL: func.func @main
// CHECK-SAME: tensor<4x8xf32> {{[^}]*}}ds.tp_split = #ds.tp_split<dim = 1, blocks = 1, ranks = 2>}
// CHECK: ds.reduce_mean %{{.*}} {axes = array<i64: 1>, keepdims = false} : tensor<2x3x8xf32>
// CHECK: %[[P:.*]] = ds.matmul %{{.*}}, %arg2 : tensor<2x8xf32>, tensor<8x4xf32>
// CHECK-NEXT: shard.all_reduce %[[P]]
func.func @main(%arg0: tensor<2x3x4xf32> {ds.input = "x"},
    %arg1: tensor<4x16xf32> {ds.param = #ds.param<name = "a.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 256>>},
    %arg2: tensor<16x4xf32> {ds.param = #ds.param<name = "b.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 256>>},
    %arg3: tensor<2x4xf32> {ds.input = "y"},
    %arg4: tensor<4x16xf32> {ds.param = #ds.param<name = "c.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 256>>},
    %arg5: tensor<16x4xf32> {ds.param = #ds.param<name = "d.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 256>>},
    %arg6: tensor<4xf32> {ds.param = #ds.param<name = "d.bias", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 16>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %h = ds.matmul %arg0, %arg1 : tensor<2x3x4xf32>, tensor<4x16xf32>
  %m = ds.reduce_mean %h {axes = array<i64: 1>, keepdims = false} : tensor<2x3x16xf32>
  %o = ds.matmul %m, %arg2 : tensor<2x16xf32>, tensor<16x4xf32>
  %g = ds.gemm %arg3, %arg4 : tensor<2x4xf32>, tensor<4x16xf32>
  // expected-warning @below {{ds-tensor-parallel: parameter 'c.weight' stays replicated: ds.gemm: it adds its bias to a partial sum}}
  %q = ds.gemm %g, %arg5, %arg6 : tensor<2x16xf32>, tensor<16x4xf32>, tensor<4xf32>
  // Tried as a column-parallel layer of its own, d's output meets a whole
  // activation.
  // expected-warning @below {{ds-tensor-parallel: parameter 'd.weight' stays replicated: ds.add: a replicated activation would have to be split}}
  %t = ds.add %o, %q : tensor<2x4xf32>, tensor<2x4xf32>
  %loss = ds.reduce_sum %t {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32>
  return %loss : tensor<f32>
}

// -----

// A width the ranks do not divide (5 over 2) is an error too.
func.func @main(%arg0: tensor<2x4xf32> {ds.input = "x"},
    %arg1: tensor<4x5xf32> {ds.param = #ds.param<name = "up.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 80>>},
    %arg2: tensor<5x4xf32> {ds.param = #ds.param<name = "down.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 80>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  // expected-error @below {{ds-tensor-parallel: cannot split ds.matmul over 2 tp ranks: axis 1 of size 5 of parameter 'up.weight' does not split into 1 x 2 equal pieces (the layer of parameter 'up.weight')}}
  %u = ds.matmul %arg0, %arg1 : tensor<2x4xf32>, tensor<4x5xf32>
  %r = ds.relu %u : tensor<2x5xf32>
  %o = ds.matmul %r, %arg2 : tensor<2x5xf32>, tensor<5x4xf32>
  %loss = ds.reduce_sum %o {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32>
  return %loss : tensor<f32>
}

// -----

// The layout is a typed, verified attribute of a parameter argument.
// expected-error @below {{tp_split ranks must be at least 2, got 1}}
func.func @bad_ranks(%arg0: tensor<4x4xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 64>>, ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 1>}) {
  return
}

// -----

// expected-error @below {{'ds.tp_split' applies only to a ds.param argument}}
func.func @not_a_param(%arg0: tensor<4x4xf32> {ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2>}) {
  return
}

// -----

// A split parameter's external data hold the whole tensor.
// expected-error @below {{parameter 'w' of type 'tensor<8x4xf32>' needs 128 bytes but its external data holds 64}}
func.func @whole_bytes(%arg0: tensor<4x4xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 64>>, ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2>}) {
  return
}

// -----

// The vocabulary: the embedding split by rows (a masked lookup of the
// rank's rows, from ds.tp_offset, and g), an untied head ([d, V]) column
// parallel on the vocabulary, and the loss from the split logits: the
// max (no derivative), the sum of exponentials and the target logit
// all-reduced over tp, one value per row each; the logits never gathered.
// (16 words: 8 a rank, a multiple of 8, so not padded.)
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg2: tensor<8x4xf32> {{[^}]*}}ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2>}
// CHECK-SAME: %arg3: tensor<4x8xf32> {{[^}]*}}ds.tp_split = #ds.tp_split<dim = 1, blocks = 1, ranks = 2>}
// CHECK: %[[FIRST:.*]] = ds.tp_offset on @grid {grid_axis = 1 : i64, stride = 8 : i64} : tensor<i64>
// CHECK: ds.sub %{{.*}}, %[[FIRST]] : tensor<4xi64>, tensor<i64>
// CHECK: %[[ROWS:.*]] = ds.gather %arg2, %{{.*}} {axis = 0 : i64} : tensor<8x4xf32>, tensor<4xi64>
// CHECK: %[[MASKED:.*]] = ds.where %{{.*}}, %{{.*}}, %[[ROWS]]
// CHECK-NEXT: shard.all_reduce %[[MASKED]] on @grid grid_axes = [1] : tensor<4x4xf32>
// CHECK: ds.tp_copy
// CHECK: %[[Z:.*]] = ds.matmul %{{.*}}, %arg3 : tensor<4x4xf32>, tensor<4x8xf32>
// The loss's float ops compute in f32 under a 16-bit precision.
// CHECK: ds.reduce_max %[[Z]] {axes = array<i64: 1>, ds.compute_f32} : tensor<4x8xf32>
// CHECK-NEXT: shard.all_reduce {{.*}} reduction = {{ *}}max {ds.compute_f32} : tensor<4x1xf32>
// CHECK-NEXT: ds.stop_gradient
// CHECK: shard.all_reduce {{.*}} : tensor<4x1xf32>
// CHECK: shard.all_reduce {{.*}} : tensor<4x1xf32>
// CHECK-NOT: shard.all_reduce
// CHECK-NOT: ds.softmax_cross_entropy
// CHECK: ds.reduce_sum {{.*}} {axes = array<i64: 0, 1>, ds.compute_f32, keepdims = false} : tensor<4x1xf32>
// CHECK-NEXT: return
func.func @main(%arg0: tensor<4xi64> {ds.input = "ids"}, %arg1: tensor<4xi64> {ds.input = "labels"},
    %arg2: tensor<16x4xf32> {ds.param = #ds.param<name = "embed.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 256>>},
    %arg3: tensor<4x16xf32> {ds.param = #ds.param<name = "head.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 256>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.gather %arg2, %arg0 {axis = 0 : i64} : tensor<16x4xf32>, tensor<4xi64>
  %1 = ds.tanh %0 : tensor<4x4xf32>
  %2 = ds.matmul %1, %arg3 : tensor<4x4xf32>, tensor<4x16xf32>
  %loss, %lp = ds.softmax_cross_entropy %2, %arg1 {reduction = #ds<reduction sum>} : tensor<4x16xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}
