// A vocabulary the tp ranks do not divide (13 over 2) is padded, as
// Megatron pads it: each rank holds ceil(13 / 2) = 7 rows rounded up to 8
// (so that a 16-bit piece's rows stay 16-byte aligned) of the table and 8
// columns of the untied head (and of its bias), rank 1's last three
// padding that stays zero; #ds.tp_split records the model's 13. The lookup
// takes the whole table's ids [-13, 13); the loss masks the padded logits
// to -inf before its max and sum, so that they enter neither, and takes
// labels [0, 13).
// RUN: dsopt-opt %s -split-input-file --ds-tensor-parallel='size=2' -verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<4xi64> {ds.index_range = array<i64: -13, 13>, ds.input = "ids"}
// CHECK-SAME: %arg1: tensor<4xi64> {ds.index_range = array<i64: 0, 13>, ds.input = "labels"}
// CHECK-SAME: %arg2: tensor<8x4xf32> {{[^}]*}}ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2, whole = 13>}
// CHECK-SAME: %arg3: tensor<4x8xf32> {{[^}]*}}ds.tp_split = #ds.tp_split<dim = 1, blocks = 1, ranks = 2, whole = 13>}
// CHECK-SAME: %arg4: tensor<8xf32> {{[^}]*}}ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2, whole = 13>}
// Negative ids count from the model's end (13), the rows from 8 per rank.
// CHECK: %[[END:.*]] = ds.constant dense<13> : tensor<i64>
// CHECK: ds.add %arg0, %[[END]]
// CHECK: ds.tp_offset on @grid {grid_axis = 1 : i64, stride = 8 : i64} : tensor<i64>
// CHECK: ds.gather %arg2, %{{.*}} {axis = 0 : i64} : tensor<8x4xf32>, tensor<4xi64>
// CHECK: shard.all_reduce
// CHECK: %[[Z0:.*]] = ds.matmul %{{.*}}, %arg3 : tensor<4x4xf32>, tensor<4x8xf32>
// CHECK: %[[Z1:.*]] = ds.add %[[Z0]], %arg4 : tensor<4x8xf32>, tensor<8xf32>
// The classes this rank holds, below the model's 13 or masked.
// CHECK: %[[FIRST:.*]] = ds.tp_offset on @grid {grid_axis = 1 : i64, stride = 8 : i64} : tensor<i64>
// CHECK: %[[IDS:.*]] = ds.add %{{.*}}, %[[FIRST]] : tensor<8xi64>, tensor<i64>
// CHECK: %[[NEGINF:.*]] = ds.constant dense<0xFF800000> : tensor<f32>
// CHECK: %[[VOCAB:.*]] = ds.constant dense<13> : tensor<i64>
// CHECK: %[[VALID:.*]] = ds.compare lt, %[[IDS]], %[[VOCAB]]
// CHECK: %[[Z:.*]] = ds.where %[[VALID]], %[[Z1]], %[[NEGINF]]
// CHECK: ds.reduce_max %[[Z]] {axes = array<i64: 1>, ds.compute_f32} : tensor<4x8xf32>
// CHECK-NOT: ds.softmax_cross_entropy
// CHECK: return
func.func @main(%arg0: tensor<4xi64> {ds.input = "ids"}, %arg1: tensor<4xi64> {ds.input = "labels"},
    %arg2: tensor<13x4xf32> {ds.param = #ds.param<name = "embed.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 208>>},
    %arg3: tensor<4x13xf32> {ds.param = #ds.param<name = "head.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 208>>},
    %arg4: tensor<13xf32> {ds.param = #ds.param<name = "head.bias", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 52>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.gather %arg2, %arg0 {axis = 0 : i64} : tensor<13x4xf32>, tensor<4xi64>
  %1 = ds.tanh %0 : tensor<4x4xf32>
  %2 = ds.matmul %1, %arg3 : tensor<4x4xf32>, tensor<4x13xf32>
  %3 = ds.add %2, %arg4 : tensor<4x13xf32>, tensor<13xf32>
  %loss, %lp = ds.softmax_cross_entropy %3, %arg1 {reduction = #ds<reduction sum>} : tensor<4x13xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

// A vocabulary the ranks divide into pieces that are not multiples of 8
// (12 over 2: 6 a rank; BERT's 30522 at tp 2 gives 15261) is padded too:
// 8 a rank, the last rank's 4..7 padding, masked as above.
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg2: tensor<4x8xf32> {{[^}]*}}ds.tp_split = #ds.tp_split<dim = 1, blocks = 1, ranks = 2, whole = 12>}
// CHECK: ds.tp_offset on @grid {grid_axis = 1 : i64, stride = 8 : i64} : tensor<i64>
// CHECK: %[[VOCAB:.*]] = ds.constant dense<12> : tensor<i64>
// CHECK: ds.compare lt, %{{.*}}, %[[VOCAB]]
// CHECK: ds.reduce_max {{.*}} : tensor<4x8xf32>
func.func @main(%arg0: tensor<4x4xf32> {ds.input = "x"}, %arg1: tensor<4xi64> {ds.input = "labels"},
    %arg2: tensor<4x12xf32> {ds.param = #ds.param<name = "head.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 192>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.matmul %arg0, %arg2 : tensor<4x4xf32>, tensor<4x12xf32>
  %loss, %lp = ds.softmax_cross_entropy %0, %arg1 {reduction = #ds<reduction sum>} : tensor<4x12xf32>, tensor<4xi64>
  return %loss : tensor<f32>
}

// -----

// Padding is refused where the padded entries would enter a sum: a
// contraction along the padded axis. The width stays an error.
func.func @main(%arg0: tensor<2x4xf32> {ds.input = "x"},
    %arg1: tensor<4x7xf32> {ds.param = #ds.param<name = "up.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 112>>},
    %arg2: tensor<7x4xf32> {ds.param = #ds.param<name = "down.weight", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 112>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  // expected-error @below {{ds-tensor-parallel: cannot split ds.matmul over 2 tp ranks: axis 1 of size 7 of parameter 'up.weight' does not split into 1 x 2 equal pieces (the layer of parameter 'up.weight')}}
  %u = ds.matmul %arg0, %arg1 : tensor<2x4xf32>, tensor<4x7xf32>
  %g = ds.gelu %u : tensor<2x7xf32>
  %d = ds.matmul %g, %arg2 : tensor<2x7xf32>, tensor<7x4xf32>
  %loss = ds.reduce_sum %d {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32>
  return %loss : tensor<f32>
}

// -----

// A padded split is verified: only a plain split pads, of an axis the ranks
// do not divide; the piece is ceil(whole / ranks) rounded up to a multiple
// of 8; the data hold the whole.
// expected-error @below {{tp_split whole 16 pads only a plain split (blocks = 1) of an axis whose padded pieces (8 entries each) exceed it}}
func.func @even(%arg0: tensor<8x4xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 256>>, ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2, whole = 16>}) {
  return
}

// -----

// expected-error @below {{'ds.tp_split' of argument 0 splits axis 0 in 1 blocks, which 'tensor<3x4xf32>' does not have}}
func.func @piece(%arg0: tensor<3x4xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 112>>, ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2, whole = 7>}) {
  return
}

// -----

// ceil(7 / 2) = 4 rows is not a piece: 8 is.
// expected-error @below {{'ds.tp_split' of argument 0 splits axis 0 in 1 blocks, which 'tensor<4x4xf32>' does not have}}
func.func @unaligned_piece(%arg0: tensor<4x4xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 112>>, ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2, whole = 7>}) {
  return
}

// -----

// expected-error @below {{parameter 'w' of type 'tensor<7x4xf32>' needs 112 bytes but its external data holds 128}}
func.func @padded_bytes(%arg0: tensor<8x4xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "w.bin", offset = 0, length = 128>>, ds.tp_split = #ds.tp_split<dim = 0, blocks = 1, ranks = 2, whole = 7>}) {
  return
}
