// Kernel workspaces: an op whose kernel needs scratch memory
// (KernelOpInterface::getWorkspaceBytes) gets a buffer of that size live
// while the op alone runs, recorded as ds.workspace and freed with the op
// (ds.frees), so ops reuse each other's workspace bytes and the arena counts
// them. The generated call passes it as a dsrt::Workspace.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-plan-memory)' -split-input-file | FileCheck %s
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-plan-memory)' -split-input-file | dsopt-opt -split-input-file -verify-diagnostics > /dev/null

// A 3x3 grouped convolution: im2col of one group, (4 / 2) * 9 rows by 3 * 3
// positions of f32 = 648 bytes (704 with the 64-byte alignment), the size
// dsrt::conv_workspace_bytes gives for these shapes
// (runtime/tests/errors_test.cpp).
// Above the weight (448 B): the workspace (704 B) and x (448 B), both dying
// at the convolution, and y (256 B): 1856 bytes, 704 more than without it.
// CHECK-LABEL: func.func @conv3x3
// CHECK-SAME: ds.memory = #ds.memory_plan<arena_bytes = 1856, persistent_bytes = 448, peak_live_bytes = 1856, alignment = 64>
// CHECK: ds.conv {{.*}}ds.buffers = array<i64: 1600>, ds.frees = array<i64: 448, 1152>, ds.workspace = 448 : i64
func.func @conv3x3(%x: tensor<1x4x5x5xf32> {ds.input = "x"},
                   %w: tensor<6x2x3x3xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "m.bin", offset = 0, length = 432>>})
    -> (tensor<1x6x3x3xf32> {ds.output = "y"}) {
  %y = ds.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 2 : i64} : tensor<1x4x5x5xf32>, tensor<6x2x3x3xf32>
  return %y : tensor<1x6x3x3xf32>
}

// -----

// bf16 matmuls convert their operands to f32 in the workspace: 4 * (6 + 6 +
// 4) = 64 bytes for the first, 4 * (4 + 4 + 4) = 48 (64 aligned) for the
// second. Each workspace lives while its op runs and is freed with it: the
// second one lands where the first matmul's operands were.
// CHECK-LABEL: func.func @bf16_matmuls
// CHECK-SAME: arena_bytes = 320
// CHECK: ds.matmul {{.*}}ds.frees = array<i64: 0, 64, 256>, ds.workspace = 256 : i64
// CHECK: ds.matmul {{.*}}ds.buffers = array<i64: 0>, ds.frees = array<i64: 64, 128, 192>, ds.workspace = 64 : i64
func.func @bf16_matmuls(%a: tensor<2x3xbf16> {ds.input = "a"}, %b: tensor<3x2xbf16> {ds.input = "b"},
                        %c: tensor<2x2xbf16> {ds.input = "c"})
    -> (tensor<2x2xbf16> {ds.output = "y"}) {
  %t = ds.matmul %a, %b : tensor<2x3xbf16>, tensor<3x2xbf16>
  %y = ds.matmul %t, %c : tensor<2x2xbf16>, tensor<2x2xbf16>
  return %y : tensor<2x2xbf16>
}

// -----

// Large bf16 products (2^27 multiply-adds and more) with a leading
// dimension not a multiple of 8 add staging buffers to the tile panels'
// 3 * 512 * 512 * 4 bytes (workspace_shapes.h, matmul_stage): GPT-2's LM
// head in small. y [2, 520, 513] (n = 513): 1040 rows of y padded to 520
// columns, 1,081,600 bytes, and b [513, 520] with zero rows to 520,
// 540,800 bytes (540,928 aligned to 256): 4,768,256 in all; a transposed [1040, 513] (m = 513): 520
// columns of a's 1040 rows, 1,081,600: 4,227,328 in all, as
// dsrt::matmul_workspace_bytes gives (runtime/tests/errors_test.cpp). The
// arena peaks at the first product: the four inputs (1,081,600 + 533,568 +
// 1,067,072 + 1,081,600), y (1,067,072) and its workspace: 9,599,168
// bytes (7,976,640 with the tile panels alone).
// CHECK-LABEL: func.func @bf16_staged
// CHECK-SAME: ds.memory = #ds.memory_plan<arena_bytes = 9599168,
func.func @bf16_staged(%x: tensor<2x520x520xbf16> {ds.input = "x"},
                       %w: tensor<513x520xbf16> {ds.input = "w"},
                       %g: tensor<1040x513xbf16> {ds.input = "g"},
                       %h: tensor<1040x520xbf16> {ds.input = "h"})
    -> (tensor<2x520x513xbf16> {ds.output = "y"}, tensor<513x520xbf16> {ds.output = "dw"}) {
  %y = ds.matmul %x, %w {transpose_rhs} : tensor<2x520x520xbf16>, tensor<513x520xbf16>
  %dw = ds.matmul %g, %h {transpose_lhs} : tensor<1040x513xbf16>, tensor<1040x520xbf16>
  return %y, %dw : tensor<2x520x513xbf16>, tensor<513x520xbf16>
}

// -----

// A large bf16 product whose a [m, k] has k % 8 != 0 splits the
// contraction (workspace_shapes.h, matmul_stage): y [2048, 512], k 137.
// The f32 sums of a block of y's rows, min(2048, 32 MiB / (4 * 512)) =
// 2048 rows: 4,194,304 bytes; a's columns for them, all 137 padded to
// 144 (16 MiB would hold 4096): 589,824; b's last chunk, all of it with
// zero rows to 144: 147,456; with the tile panels ((512 * 137 * 2 + 512
// * 512) * 4 = 1,609,728), 6,541,312. The arena: a (561,152), b
// (140,288), y (2,097,152) and the workspace, 9,339,904 bytes.
// CHECK-LABEL: func.func @bf16_staged_k
// CHECK-SAME: ds.memory = #ds.memory_plan<arena_bytes = 9339904,
func.func @bf16_staged_k(%a: tensor<2048x137xbf16> {ds.input = "a"},
                         %b: tensor<137x512xbf16> {ds.input = "b"})
    -> (tensor<2048x512xbf16> {ds.output = "y"}) {
  %y = ds.matmul %a, %b : tensor<2048x137xbf16>, tensor<137x512xbf16>
  return %y : tensor<2048x512xbf16>
}

// -----

// On --target cuda (ds.target on the module) a bf16 product of 2^30
// multiply-adds and more over every batch plans at least cuBLASLt's 32 MiB
// (DsKernels.cpp, matmulLtBytes: the cuBLAS reference's recommendation on
// Hopper) in place of the tile panels' 3 MiB: a [2, 512, 1024] x
// [1024, 1024] product, 2^30; one output column in 8 fewer ([1024, 1016])
// keeps the panels. The arena peaks at the first product: the inputs
// (2,097,152 + 2,097,152 + 2,080,768), y (2,097,152) and its 33,554,432
// bytes of workspace at offset 0 (the second product's 3,145,728 reuse
// them): 41,926,656 bytes. The kernels need only the panels
// (dsrt::matmul_workspace_bytes), so on the cpu (the next function, the
// same products) the arena is 8,372,224 + 3,145,728 = 11,517,952.
// CHECK-LABEL: func.func @bf16_cublaslt
// CHECK-SAME: ds.memory = #ds.memory_plan<arena_bytes = 41926656,
// CHECK: ds.matmul {{.*}}ds.buffers = array<i64: 37748736>, {{.*}}ds.workspace = 0 : i64
module attributes {ds.target = "cuda"} {
func.func @bf16_cublaslt(%a: tensor<2x512x1024xbf16> {ds.input = "a"},
                         %b: tensor<1024x1024xbf16> {ds.input = "b"},
                         %c: tensor<1024x1016xbf16> {ds.input = "c"})
    -> (tensor<2x512x1024xbf16> {ds.output = "y"}, tensor<2x512x1016xbf16> {ds.output = "z"}) {
  %y = ds.matmul %a, %b : tensor<2x512x1024xbf16>, tensor<1024x1024xbf16>
  %z = ds.matmul %a, %c : tensor<2x512x1024xbf16>, tensor<1024x1016xbf16>
  return %y, %z : tensor<2x512x1024xbf16>, tensor<2x512x1016xbf16>
}
}

// -----

// CHECK-LABEL: func.func @bf16_cublaslt_cpu
// CHECK-SAME: ds.memory = #ds.memory_plan<arena_bytes = 11517952,
func.func @bf16_cublaslt_cpu(%a: tensor<2x512x1024xbf16> {ds.input = "a"},
                             %b: tensor<1024x1024xbf16> {ds.input = "b"},
                             %c: tensor<1024x1016xbf16> {ds.input = "c"})
    -> (tensor<2x512x1024xbf16> {ds.output = "y"}, tensor<2x512x1016xbf16> {ds.output = "z"}) {
  %y = ds.matmul %a, %b : tensor<2x512x1024xbf16>, tensor<1024x1024xbf16>
  %z = ds.matmul %a, %c : tensor<2x512x1024xbf16>, tensor<1024x1016xbf16>
  return %y, %z : tensor<2x512x1024xbf16>, tensor<2x512x1016xbf16>
}

// -----

// f32 products, integer products and 1x1 stride-1 unpadded convolutions
// need no scratch memory: their plans are what they were without
// workspaces.
// CHECK-LABEL: func.func @no_workspace
// CHECK-NOT: ds.workspace
// CHECK: return
func.func @no_workspace(%a: tensor<2x3xf32> {ds.input = "a"}, %b: tensor<3x2xf32> {ds.input = "b"},
                        %i: tensor<2x3xi64> {ds.input = "i"}, %j: tensor<3x2xi64> {ds.input = "j"},
                        %x: tensor<1x4x5x5xf32> {ds.input = "x"}, %w: tensor<6x4x1x1xf32> {ds.input = "w"})
    -> (tensor<2x2xf32> {ds.output = "y"}, tensor<2x2xi64> {ds.output = "k"}, tensor<1x6x5x5xf32> {ds.output = "z"}) {
  %y = ds.matmul %a, %b : tensor<2x3xf32>, tensor<3x2xf32>
  %k = ds.matmul %i, %j : tensor<2x3xi64>, tensor<3x2xi64>
  %z = ds.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : tensor<1x4x5x5xf32>, tensor<6x4x1x1xf32>
  return %y, %k, %z : tensor<2x2xf32>, tensor<2x2xi64>, tensor<1x6x5x5xf32>
}

// -----

// The gradient ops: conv_grad_input holds every group's W^T dy matrix,
// 4 * 9 rows by 25 positions of f32 (3600 bytes); conv_grad_weight one
// group's im2col matrix, 2 * 9 by 25 (1800); a bf16 gather_grad the larger
// of the cpu's f32 sums, 4 bytes per element of its 10x4 result (160), and
// the cuda's sort of its 6 positions (1148). The three reuse the same
// bytes at the bottom of the arena, the largest (3648 aligned) first.
// CHECK-LABEL: func.func @gradients
// CHECK-SAME: arena_bytes = 5760
// CHECK: ds.conv_grad_input {{.*}}ds.frees = array<i64: 0, 4288>, ds.workspace = 0 : i64
// CHECK: ds.conv_grad_weight {{.*}}ds.frees = array<i64: 0, 3648, 4736>, ds.workspace = 0 : i64
// CHECK: ds.gather_grad {{.*}}ds.frees = array<i64: 0, 5632, 5696>, ds.workspace = 0 : i64
func.func @gradients(%dy: tensor<1x6x5x5xf32> {ds.input = "dy"}, %w: tensor<6x2x3x3xf32> {ds.input = "w"},
                     %x: tensor<1x4x5x5xf32> {ds.input = "x"},
                     %demb: tensor<2x3x4xbf16> {ds.input = "demb"}, %idx: tensor<2x3xi64> {ds.input = "idx"})
    -> (tensor<1x4x5x5xf32> {ds.output = "dx"}, tensor<6x2x3x3xf32> {ds.output = "dw"}, tensor<10x4xbf16> {ds.output = "dtable"}) {
  %dx = ds.conv_grad_input %dy, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 2} : tensor<1x6x5x5xf32>, tensor<6x2x3x3xf32> -> tensor<1x4x5x5xf32>
  %dw = ds.conv_grad_weight %dy, %x {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 2} : tensor<1x6x5x5xf32>, tensor<1x4x5x5xf32> -> tensor<6x2x3x3xf32>
  %dt = ds.gather_grad %demb, %idx {axis = 0} : tensor<2x3x4xbf16>, tensor<2x3xi64> -> tensor<10x4xbf16>
  return %dx, %dw, %dt : tensor<1x4x5x5xf32>, tensor<6x2x3x3xf32>, tensor<10x4xbf16>
}

// -----

// 16-bit pooling gradients sum in f32 planes of the workspace, at most 64
// of them: 2 * 3 planes of 4x4 here (384 bytes); in f32 they sum in dx and
// need none.
// CHECK-LABEL: func.func @pool_gradients
// CHECK: ds.max_pool_grad {{.*}}ds.workspace =
// CHECK: ds.avg_pool_grad {{.*}}ds.workspace =
// CHECK-NOT: ds.workspace
// CHECK: return
func.func @pool_gradients(%dy: tensor<2x3x2x2xbf16> {ds.input = "dy"}, %x: tensor<2x3x4x4xbf16> {ds.input = "x"},
                          %dyf: tensor<2x3x2x2xf32> {ds.input = "dyf"}, %xf: tensor<2x3x4x4xf32> {ds.input = "xf"})
    -> (tensor<2x3x4x4xbf16> {ds.output = "dmax"}, tensor<2x3x4x4xbf16> {ds.output = "davg"},
        tensor<2x3x4x4xf32> {ds.output = "dmaxf"}) {
  %dmax = ds.max_pool_grad %dy, %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : tensor<2x3x2x2xbf16>, tensor<2x3x4x4xbf16>
  %davg = ds.avg_pool_grad %dy {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : tensor<2x3x2x2xbf16> -> tensor<2x3x4x4xbf16>
  %dmaxf = ds.max_pool_grad %dyf, %xf {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : tensor<2x3x2x2xf32>, tensor<2x3x4x4xf32>
  return %dmax, %davg, %dmaxf : tensor<2x3x4x4xbf16>, tensor<2x3x4x4xbf16>, tensor<2x3x4x4xf32>
}

// -----

// 16-bit rows are converted to f32 in at most 64 rows of the workspace:
// softmax over the last axis of 2x100x8 bf16 takes 64 rows of 8 (2048 bytes),
// its gradient two such sets (4096), layer norm 64 rows (2048) and its
// gradient x, dy and dx rows for each of its 50 blocks of 4 rows (4800) beside
// its partial sums (3200), their f64 totals (192) and, past 32 blocks, the
// f64 sums of 32 lanes of blocks (2048).
// Along a strided axis softmax reads the rows in place, and f32 needs none.
// CHECK-LABEL: func.func @rows
// CHECK: ds.softmax {{.*}}ds.workspace =
// CHECK: ds.softmax_grad {{.*}}ds.workspace =
// CHECK: ds.layer_norm {{.*}}ds.workspace =
// CHECK: ds.layer_norm_grad {{.*}}ds.workspace =
// CHECK-NOT: ds.workspace
// CHECK: return
func.func @rows(%x: tensor<2x100x8xbf16> {ds.input = "x"}, %dy: tensor<2x100x8xbf16> {ds.input = "dy"},
                %g: tensor<8xbf16> {ds.input = "g"}, %xf: tensor<2x100x8xf32> {ds.input = "xf"})
    -> (tensor<2x100x8xbf16> {ds.output = "s"}, tensor<2x100x8xbf16> {ds.output = "ds"},
        tensor<2x100x8xbf16> {ds.output = "ln"}, tensor<2x100x8xbf16> {ds.output = "dx"},
        tensor<8xbf16> {ds.output = "dg"}, tensor<2x100x8xbf16> {ds.output = "strided"},
        tensor<2x100x8xf32> {ds.output = "sf"}) {
  %s = ds.softmax %x {axis = 2 : i64} : tensor<2x100x8xbf16>
  %sg = ds.softmax_grad %s, %dy {axis = 2 : i64} : tensor<2x100x8xbf16>
  %ln, %mean, %inv = ds.layer_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x100x8xbf16>, tensor<8xbf16>
  %dx, %dg, %db = ds.layer_norm_grad %x, %g, %mean, %inv, %dy {axis = 2 : i64} : tensor<2x100x8xbf16>, tensor<8xbf16>, tensor<2x100x1xf32>, tensor<2x100x1xf32>, tensor<2x100x8xbf16>
  %strided = ds.softmax %x {axis = 1 : i64} : tensor<2x100x8xbf16>
  %sf = ds.softmax %xf {axis = 2 : i64} : tensor<2x100x8xf32>
  return %s, %sg, %ln, %dx, %dg, %strided, %sf : tensor<2x100x8xbf16>, tensor<2x100x8xbf16>, tensor<2x100x8xbf16>, tensor<2x100x8xbf16>, tensor<8xbf16>, tensor<2x100x8xbf16>, tensor<2x100x8xf32>
}

// -----

// An f32 layer norm reads a scale or bias of the normalized shape (3x8 for
// axis 1 of 2x3x8) in place: no workspace. One that broadcasts to it (8)
// is expanded to the 24 f32 values of the normalized shape in the workspace
// (96 bytes each, dsrt::layer_norm_workspace_bytes). The gradient always
// has one, for its partial and total dscale/dbias sums (and a broadcast
// scale's expansion: 1056 bytes here, 960 for the 3x8 scale;
// errors_test.cpp).
// CHECK-LABEL: func.func @layer_norm_params
// CHECK: ds.layer_norm %arg0, %arg1, %arg1 {{.*}}ds.buffers
// CHECK-NOT: ds.workspace
// CHECK-SAME: {{$}}
// CHECK-NEXT: ds.layer_norm %arg0, %arg2, %arg1 {{.*}}ds.workspace =
// CHECK-NEXT: ds.layer_norm %arg0, %arg2, %arg2 {{.*}}ds.workspace =
// CHECK-NEXT: ds.layer_norm_grad %arg0, %arg2, {{.*}}ds.workspace =
// CHECK-NEXT: ds.layer_norm_grad %arg0, %arg1, {{.*}}ds.workspace =
func.func @layer_norm_params(%x: tensor<2x3x8xf32> {ds.input = "x"}, %full: tensor<3x8xf32> {ds.input = "full"},
                             %row: tensor<8xf32> {ds.input = "row"})
    -> (tensor<2x3x8xf32> {ds.output = "a"}, tensor<2x3x8xf32> {ds.output = "b"},
        tensor<2x3x8xf32> {ds.output = "c"}, tensor<8xf32> {ds.output = "dg"},
        tensor<3x8xf32> {ds.output = "dgf"}) {
  %a, %ma, %ia = ds.layer_norm %x, %full, %full {axis = 1 : i64} : tensor<2x3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>
  %b, %mb, %ib = ds.layer_norm %x, %row, %full {axis = 1 : i64} : tensor<2x3x8xf32>, tensor<8xf32>, tensor<3x8xf32>
  %c, %mc, %ic = ds.layer_norm %x, %row, %row {axis = 1 : i64} : tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>
  %dx, %dg, %db = ds.layer_norm_grad %x, %row, %mc, %ic, %x {axis = 1 : i64} : tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x1x1xf32>, tensor<2x1x1xf32>, tensor<2x3x8xf32>
  %dxf, %dgf, %dbf = ds.layer_norm_grad %x, %full, %ma, %ia, %x {axis = 1 : i64} : tensor<2x3x8xf32>, tensor<3x8xf32>, tensor<2x1x1xf32>, tensor<2x1x1xf32>, tensor<2x3x8xf32>
  return %a, %b, %c, %dg, %dgf : tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<3x8xf32>
}

// -----

// Softmax cross-entropy reads f32 [N, C] rows in place (no workspace); over
// a class axis followed by spatial axes (2x10x4: 8 samples, 8 blocks) or in
// bf16 each block of samples converts its row to f32 in the workspace
// (8 * 10 * 4 = 320 bytes, 6 * 10 * 4 = 240; errors_test.cpp); the loss of
// bf16 scores is f32.
// CHECK-LABEL: func.func @cross_entropy_rows
// CHECK: ds.softmax_cross_entropy %arg0, %arg1 {ds.buffers
// CHECK-NOT: ds.workspace
// CHECK-SAME: {{$}}
// CHECK-NEXT: ds.softmax_cross_entropy %arg2, %arg3 {{.*}}ds.workspace =
// CHECK-NEXT: ds.softmax_cross_entropy %arg4, %arg1 {{.*}}ds.workspace =
func.func @cross_entropy_rows(%s: tensor<6x10xf32> {ds.input = "s"}, %l: tensor<6xi64> {ds.input = "l"},
                              %s3: tensor<2x10x4xf32> {ds.input = "s3"}, %l3: tensor<2x4xi64> {ds.input = "l3"},
                              %sb: tensor<6x10xbf16> {ds.input = "sb"})
    -> (tensor<f32> {ds.output = "a"}, tensor<f32> {ds.output = "b"}, tensor<f32> {ds.output = "c"}) {
  %a, %pa = ds.softmax_cross_entropy %s, %l : tensor<6x10xf32>, tensor<6xi64>
  %b, %pb = ds.softmax_cross_entropy %s3, %l3 : tensor<2x10x4xf32>, tensor<2x4xi64>
  %c, %pc = ds.softmax_cross_entropy %sb, %l : tensor<6x10xbf16>, tensor<6xi64>
  return %a, %b, %c : tensor<f32>, tensor<f32>, tensor<f32>
}

// -----

// Reductions accumulate in their workspace. A float sum of 2x3x40 over
// axis 1 is one pass into 2 * 40 f64 accumulators (640 bytes): the arena is
// x (960) + y (320) + the workspace (640) = 1920 bytes. A float max
// accumulates in f32 (320): 1600 bytes. Summing 2x3x4x5 over axes 1 and 3
// takes two passes, 2 * 3 * 4 then 2 * 4 f64 (256 bytes): x (480, 512
// aligned) + y (32, 64 aligned) + 256 = 832. An integer mean uses 64-bit
// accumulators: 2x3x4 i64 over axis 1, x (192) + y (64) + 2 * 4 * 8 = 320.
// These are the sizes dsrt::reduce_workspace_bytes gives for the same shapes
// (runtime/tests/errors_test.cpp).
// CHECK-LABEL: func.func @reduce_sum
// CHECK-SAME: arena_bytes = 1920
// CHECK: ds.reduce_sum {{.*}}ds.workspace =
func.func @reduce_sum(%x: tensor<2x3x40xf32> {ds.input = "x"}) -> (tensor<2x40xf32> {ds.output = "y"}) {
  %y = ds.reduce_sum %x {axes = array<i64: 1>, keepdims = false} : tensor<2x3x40xf32>
  return %y : tensor<2x40xf32>
}

// -----

// CHECK-LABEL: func.func @reduce_max
// CHECK-SAME: arena_bytes = 1600
func.func @reduce_max(%x: tensor<2x3x40xf32> {ds.input = "x"}) -> (tensor<2x40xf32> {ds.output = "y"}) {
  %y = ds.reduce_max %x {axes = array<i64: 1>, keepdims = false} : tensor<2x3x40xf32>
  return %y : tensor<2x40xf32>
}

// -----

// CHECK-LABEL: func.func @reduce_two_passes
// CHECK-SAME: arena_bytes = 832
func.func @reduce_two_passes(%x: tensor<2x3x4x5xf32> {ds.input = "x"}) -> (tensor<2x4xf32> {ds.output = "y"}) {
  %y = ds.reduce_sum %x {axes = array<i64: 1, 3>, keepdims = false} : tensor<2x3x4x5xf32>
  return %y : tensor<2x4xf32>
}

// -----

// CHECK-LABEL: func.func @reduce_integer_mean
// CHECK-SAME: arena_bytes = 320
func.func @reduce_integer_mean(%x: tensor<2x3x4xi64> {ds.input = "x"}) -> (tensor<2x4xi64> {ds.output = "y"}) {
  %y = ds.reduce_mean %x {axes = array<i64: 1>, keepdims = false} : tensor<2x3x4xi64>
  return %y : tensor<2x4xi64>
}

// -----

// The cuda backend splits a column sum of at least 2048 rows whose tiles of
// 16 bf16 columns are fewer than 128 into parts (runtime/src/
// workspace_shapes.h): 4096x768 bf16 over axis 0 is 48 tiles, 4 parts of
// 768 f64 accumulators (24576 bytes, more than the cpu's 6144): x
// (6291456) + y (1536) + 24576 = 6317568. A float max of 2048x600 f32 is
// 75 tiles, 2 parts of 600 f32 (4800): x (4915200) + y (2400, 2432
// aligned) + 4800 = 4922432. With 2047 rows there are no parts: 6144.
// CHECK-LABEL: func.func @reduce_column_parts
// CHECK-SAME: arena_bytes = 6317568
func.func @reduce_column_parts(%x: tensor<4096x768xbf16> {ds.input = "x"}) -> (tensor<768xbf16> {ds.output = "y"}) {
  %y = ds.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : tensor<4096x768xbf16>
  return %y : tensor<768xbf16>
}

// -----

// CHECK-LABEL: func.func @reduce_column_parts_max
// CHECK-SAME: arena_bytes = 4922432
func.func @reduce_column_parts_max(%x: tensor<2048x600xf32> {ds.input = "x"}) -> (tensor<600xf32> {ds.output = "y"}) {
  %y = ds.reduce_max %x {axes = array<i64: 0>, keepdims = false} : tensor<2048x600xf32>
  return %y : tensor<600xf32>
}

// -----

// CHECK-LABEL: func.func @reduce_column_no_parts
// CHECK-SAME: arena_bytes = 3151872
func.func @reduce_column_no_parts(%x: tensor<2047x768xbf16> {ds.input = "x"}) -> (tensor<768xbf16> {ds.output = "y"}) {
  %y = ds.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : tensor<2047x768xbf16>
  return %y : tensor<768xbf16>
}

// -----

// Attention gradients: one f32 per query row (delta) and, on --target
// cuda (ds.target) in f16/bf16 with a head width a multiple of 16, rows x
// Dh f32 from the next multiple of 256 bytes (the cuda backend's dq
// accumulator, runtime/src/workspace_shapes.h). Packed bf16, 10 rows of Dh
// 16: 256 + 640 = 896 bytes; with qkv (960), o (320), lse (40, 64
// aligned), do (320) and dqkv (960): 3520. On the cpu (the next function)
// delta alone, 64 bytes aligned: 2688.
// CHECK-LABEL: func.func @attention_packed_grad_bf16(
// CHECK-SAME: arena_bytes = 3520,
module attributes {ds.target = "cuda"} {
func.func @attention_packed_grad_bf16(%qkv: tensor<1x5x3x2x16xbf16> {ds.input = "qkv"}, %o: tensor<1x5x2x16xbf16> {ds.input = "o"},
                                      %lse: tensor<1x5x2xf32> {ds.input = "lse"}, %do: tensor<1x5x2x16xbf16> {ds.input = "do"})
    -> (tensor<1x5x3x2x16xbf16> {ds.output = "dqkv"}) {
  %0 = ds.attention_packed_grad %qkv, %o, %lse, %do {scale = 0.25 : f32} : tensor<1x5x3x2x16xbf16>, tensor<1x5x2x16xbf16>, tensor<1x5x2xf32>, tensor<1x5x2x16xbf16>
  return %0 : tensor<1x5x3x2x16xbf16>
}
}

// -----

// CHECK-LABEL: func.func @attention_packed_grad_bf16_cpu
// CHECK-SAME: arena_bytes = 2688,
func.func @attention_packed_grad_bf16_cpu(%qkv: tensor<1x5x3x2x16xbf16> {ds.input = "qkv"}, %o: tensor<1x5x2x16xbf16> {ds.input = "o"},
                                      %lse: tensor<1x5x2xf32> {ds.input = "lse"}, %do: tensor<1x5x2x16xbf16> {ds.input = "do"})
    -> (tensor<1x5x3x2x16xbf16> {ds.output = "dqkv"}) {
  %0 = ds.attention_packed_grad %qkv, %o, %lse, %do {scale = 0.25 : f32} : tensor<1x5x3x2x16xbf16>, tensor<1x5x2x16xbf16>, tensor<1x5x2xf32>, tensor<1x5x2x16xbf16>
  return %0 : tensor<1x5x3x2x16xbf16>
}

// -----

// The same in f32 (no tensor-core path): delta alone, 40 bytes (64
// aligned), with twice the operands' bytes: 5248.
// CHECK-LABEL: func.func @attention_packed_grad_f32
// CHECK-SAME: arena_bytes = 5248,
func.func @attention_packed_grad_f32(%qkv: tensor<1x5x3x2x16xf32> {ds.input = "qkv"}, %o: tensor<1x5x2x16xf32> {ds.input = "o"},
                                     %lse: tensor<1x5x2xf32> {ds.input = "lse"}, %do: tensor<1x5x2x16xf32> {ds.input = "do"})
    -> (tensor<1x5x3x2x16xf32> {ds.output = "dqkv"}) {
  %0 = ds.attention_packed_grad %qkv, %o, %lse, %do {scale = 0.25 : f32} : tensor<1x5x3x2x16xf32>, tensor<1x5x2x16xf32>, tensor<1x5x2xf32>, tensor<1x5x2x16xf32>
  return %0 : tensor<1x5x3x2x16xf32>
}

// -----

// On --target cuda, heads-major bf16 with Dh 8 (not a multiple of 16):
// delta alone, 40 bytes (64 aligned), with the operands' 5 x 160 (192 aligned), lse's 64
// and the gradients' 3 x 192: 1664. At Dh 16 the dq accumulator again:
// 5 x 320 + 64 + 3 x 320 + 896 = 3520 (runtime/tests/errors_test.cpp
// checks dsrt::attention_grad_cuda_workspace_bytes gives these).
// CHECK-LABEL: func.func @attention_grad_bf16_dh8
// CHECK-SAME: arena_bytes = 1664,
// CHECK-LABEL: func.func @attention_grad_bf16_dh16
// CHECK-SAME: arena_bytes = 3520,
module attributes {ds.target = "cuda"} {
func.func @attention_grad_bf16_dh8(%q: tensor<1x2x5x8xbf16> {ds.input = "q"}, %k: tensor<1x2x5x8xbf16> {ds.input = "k"},
                                   %v: tensor<1x2x5x8xbf16> {ds.input = "v"}, %o: tensor<1x2x5x8xbf16> {ds.input = "o"},
                                   %lse: tensor<1x2x5xf32> {ds.input = "lse"}, %do: tensor<1x2x5x8xbf16> {ds.input = "do"})
    -> (tensor<1x2x5x8xbf16> {ds.output = "dq"}, tensor<1x2x5x8xbf16> {ds.output = "dk"}, tensor<1x2x5x8xbf16> {ds.output = "dv"}) {
  %0:3 = ds.attention_grad %q, %k, %v, %o, %lse, %do {scale = 0.25 : f32} : tensor<1x2x5x8xbf16>, tensor<1x2x5x8xbf16>, tensor<1x2x5x8xbf16>, tensor<1x2x5x8xbf16>, tensor<1x2x5xf32>, tensor<1x2x5x8xbf16>
  return %0#0, %0#1, %0#2 : tensor<1x2x5x8xbf16>, tensor<1x2x5x8xbf16>, tensor<1x2x5x8xbf16>
}
func.func @attention_grad_bf16_dh16(%q: tensor<1x2x5x16xbf16> {ds.input = "q"}, %k: tensor<1x2x5x16xbf16> {ds.input = "k"},
                                    %v: tensor<1x2x5x16xbf16> {ds.input = "v"}, %o: tensor<1x2x5x16xbf16> {ds.input = "o"},
                                    %lse: tensor<1x2x5xf32> {ds.input = "lse"}, %do: tensor<1x2x5x16xbf16> {ds.input = "do"})
    -> (tensor<1x2x5x16xbf16> {ds.output = "dq"}, tensor<1x2x5x16xbf16> {ds.output = "dk"}, tensor<1x2x5x16xbf16> {ds.output = "dv"}) {
  %0:3 = ds.attention_grad %q, %k, %v, %o, %lse, %do {scale = 0.25 : f32} : tensor<1x2x5x16xbf16>, tensor<1x2x5x16xbf16>, tensor<1x2x5x16xbf16>, tensor<1x2x5x16xbf16>, tensor<1x2x5xf32>, tensor<1x2x5x16xbf16>
  return %0#0, %0#1, %0#2 : tensor<1x2x5x16xbf16>, tensor<1x2x5x16xbf16>, tensor<1x2x5x16xbf16>
}
}
