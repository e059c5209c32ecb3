// Every ds op prints and parses back, in the custom and in the generic form.
// RUN: dsopt-opt %s | dsopt-opt | FileCheck %s
// RUN: dsopt-opt %s --mlir-print-op-generic | dsopt-opt | FileCheck %s

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %i: tensor<2x3xi64>,
                       %c: tensor<2x3xi1>) -> () {
  // CHECK: ds.add %{{.*}}, %{{.*}} : tensor<2x3xf32>, tensor<3xf32>
  %0 = ds.add %a, %b : tensor<2x3xf32>, tensor<3xf32>
  // CHECK: ds.sub {{.*}} : tensor<2x3xi64>, tensor<2x3xi64>
  %1 = ds.sub %i, %i : tensor<2x3xi64>, tensor<2x3xi64>
  // CHECK: ds.mul
  %2 = ds.mul %a, %a : tensor<2x3xf32>, tensor<2x3xf32>
  // CHECK: ds.div
  %3 = ds.div %a, %b : tensor<2x3xf32>, tensor<3xf32>
  // CHECK: ds.pow
  %4 = ds.pow %a, %b : tensor<2x3xf32>, tensor<3xf32>
  // CHECK: ds.sqrt %{{.*}} : tensor<2x3xf32>
  %5 = ds.sqrt %a : tensor<2x3xf32>
  // CHECK: ds.reciprocal
  %6 = ds.reciprocal %a : tensor<2x3xf32>
  // CHECK: ds.exp
  %7 = ds.exp %a : tensor<2x3xf32>
  // CHECK: ds.log
  %8 = ds.log %a : tensor<2x3xf32>
  // CHECK: ds.tanh
  %9 = ds.tanh %a : tensor<2x3xf32>
  // CHECK: ds.erf
  %10 = ds.erf %a : tensor<2x3xf32>
  // CHECK: ds.sigmoid
  %11 = ds.sigmoid %a : tensor<2x3xf32>
  // CHECK: ds.neg %{{.*}} : tensor<2x3xi64>
  %12 = ds.neg %i : tensor<2x3xi64>
  // CHECK: ds.relu
  %13 = ds.relu %a : tensor<2x3xf32>
  // CHECK: ds.leaky_relu %{{.*}} {alpha = 2.000000e-01 : f32}
  %14 = ds.leaky_relu %a {alpha = 0.2 : f32} : tensor<2x3xf32>
  // CHECK: ds.gelu %{{.*}} {approximate = #ds<gelu_approximation tanh>}
  %15 = ds.gelu %a {approximate = #ds<gelu_approximation tanh>} : tensor<2x3xf32>
  // CHECK: ds.gelu %{{.*}} : tensor<2x3xf32>
  %16 = ds.gelu %a : tensor<2x3xf32>
  // CHECK: ds.not %{{.*}} : tensor<2x3xi1>
  %17 = ds.not %c : tensor<2x3xi1>
  // CHECK: ds.compare lt, %{{.*}}, %{{.*}} : tensor<2x3xf32>, tensor<3xf32>
  %18 = ds.compare lt, %a, %b : tensor<2x3xf32>, tensor<3xf32>
  // CHECK: ds.where %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>
  %19 = ds.where %c, %a, %b : tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>
  // CHECK: ds.cast %{{.*}} : tensor<2x3xf32> to tensor<2x3xbf16>
  %20 = ds.cast %a : tensor<2x3xf32> to tensor<2x3xbf16>
  // CHECK: ds.constant dense<1.000000e+00> : tensor<4xf16>
  %21 = ds.constant dense<1.0> : tensor<4xf16>
  return
}

// CHECK-LABEL: func.func @linalg
func.func @linalg(%a: tensor<4x2x8xf32>, %b: tensor<8x5xf32>, %v: tensor<8xf32>,
                  %m: tensor<3x8xf32>, %n: tensor<5x8xf32>, %bias: tensor<5xf32>) -> () {
  // CHECK: ds.matmul %{{.*}}, %{{.*}} : tensor<4x2x8xf32>, tensor<8x5xf32>
  %0 = ds.matmul %a, %b : tensor<4x2x8xf32>, tensor<8x5xf32>
  // CHECK: ds.matmul %{{.*}}, %{{.*}} {transpose_rhs} : tensor<3x8xf32>, tensor<5x8xf32>
  %1 = ds.matmul %m, %n {transpose_rhs} : tensor<3x8xf32>, tensor<5x8xf32>
  // CHECK: ds.matmul {{.*}} : tensor<3x8xf32>, tensor<8xf32>
  %2 = ds.matmul %m, %v : tensor<3x8xf32>, tensor<8xf32>
  // CHECK: ds.gemm %{{.*}}, %{{.*}}, %{{.*}} {alpha = 5.000000e-01 : f32, transpose_b} : tensor<3x8xf32>, tensor<5x8xf32>, tensor<5xf32>
  %3 = ds.gemm %m, %n, %bias {alpha = 0.5 : f32, transpose_b} : tensor<3x8xf32>, tensor<5x8xf32>, tensor<5xf32>
  // CHECK: ds.gemm %{{.*}}, %{{.*}} : tensor<3x8xf32>, tensor<8x5xf32>
  %4 = ds.gemm %m, %b : tensor<3x8xf32>, tensor<8x5xf32>
  return
}

// CHECK-LABEL: func.func @normalization
func.func @normalization(%x: tensor<2x3x8xf32>, %s: tensor<8xf32>,
                         %img: tensor<2x4x5x5xf32>, %c: tensor<4xf32>) -> () {
  // CHECK: ds.softmax %{{.*}} {axis = 2 : i64} : tensor<2x3x8xf32>
  %0 = ds.softmax %x {axis = 2 : i64} : tensor<2x3x8xf32>
  // CHECK: ds.log_softmax
  %1 = ds.log_softmax %x {axis = 1 : i64} : tensor<2x3x8xf32>
  // CHECK: %{{.*}}, %{{.*}}, %{{.*}} = ds.layer_norm {{.*}} {axis = 2 : i64, epsilon = 9.99999997E-7 : f32}
  %y, %mean, %rstd = ds.layer_norm %x, %s, %s {axis = 2 : i64, epsilon = 1.0e-6 : f32} : tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>
  // CHECK: ds.layer_norm %{{.*}}, %{{.*}} {axis = 1 : i64}
  %y2:3 = ds.layer_norm %x, %s {axis = 1 : i64} : tensor<2x3x8xf32>, tensor<8xf32>
  // CHECK: ds.batch_norm {{.*}} : tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  %2 = ds.batch_norm %img, %c, %c, %c, %c : tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  // CHECK: ds.batch_norm_train {{.*}} {momentum = 1.000000e-01 : f32}
  %3:5 = ds.batch_norm_train %img, %c, %c, %c, %c {momentum = 0.1 : f32} : tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// CHECK-LABEL: func.func @reductions_and_movement
func.func @reductions_and_movement(%x: tensor<2x3x8xf32>, %i: tensor<5xi64>, %e: tensor<64x16xf32>,
                                   %ids: tensor<2x7xi32>) -> () {
  // CHECK: ds.reduce_sum %{{.*}} {axes = array<i64: 0, 2>} : tensor<2x3x8xf32>
  %0 = ds.reduce_sum %x {axes = array<i64: 0, 2>} : tensor<2x3x8xf32>
  // CHECK: ds.reduce_mean %{{.*}} {axes = array<i64: 2>, keepdims = false}
  %1 = ds.reduce_mean %x {axes = array<i64: 2>, keepdims = false} : tensor<2x3x8xf32>
  // CHECK: ds.reduce_max %{{.*}} : tensor<5xi64>
  %2 = ds.reduce_max %i {axes = array<i64: 0>} : tensor<5xi64>
  // CHECK: ds.reshape %{{.*}} : tensor<2x3x8xf32> -> tensor<6x8xf32>
  %3 = ds.reshape %x : tensor<2x3x8xf32> -> tensor<6x8xf32>
  // CHECK: ds.transpose %{{.*}} {perm = array<i64: 2, 0, 1>}
  %4 = ds.transpose %x {perm = array<i64: 2, 0, 1>} : tensor<2x3x8xf32>
  // CHECK: ds.broadcast_to %{{.*}} : tensor<2x3x8xf32> -> tensor<4x2x3x8xf32>
  %5 = ds.broadcast_to %x : tensor<2x3x8xf32> -> tensor<4x2x3x8xf32>
  // CHECK: ds.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : tensor<2x3x8xf32>, tensor<2x3x8xf32>
  %6 = ds.concat %x, %x {axis = 1 : i64} : tensor<2x3x8xf32>, tensor<2x3x8xf32>
  // CHECK: ds.split %{{.*}} {axis = 2 : i64} : tensor<2x3x8xf32> -> tensor<2x3x3xf32>, tensor<2x3x5xf32>
  %7:2 = ds.split %x {axis = 2 : i64} : tensor<2x3x8xf32> -> tensor<2x3x3xf32>, tensor<2x3x5xf32>
  // CHECK: ds.slice %{{.*}} {offsets = array<i64: 0, 2, 7>, strides = array<i64: 1, -1, -2>} : tensor<2x3x8xf32> -> tensor<2x2x4xf32>
  %8 = ds.slice %x {offsets = array<i64: 0, 2, 7>, strides = array<i64: 1, -1, -2>} : tensor<2x3x8xf32> -> tensor<2x2x4xf32>
  // CHECK: ds.gather %{{.*}}, %{{.*}} {axis = 0 : i64} : tensor<64x16xf32>, tensor<2x7xi32>
  %9 = ds.gather %e, %ids {axis = 0 : i64} : tensor<64x16xf32>, tensor<2x7xi32>
  // CHECK: ds.trilu %{{.*}} {k = 1 : i64, upper = false}
  %10 = ds.trilu %e {upper = false, k = 1 : i64} : tensor<64x16xf32>
  // CHECK: ds.dropout %{{.*}} {ratio = 1.000000e-01 : f32, seed = 7 : i64}
  %11:2 = ds.dropout %x {ratio = 0.1 : f32, seed = 7 : i64} : tensor<2x3x8xf32>
  // CHECK: %[[POS:.*]] = ds.top_k %{{.*}} {axis = 1 : i64, k = 2 : i64, largest = true} : tensor<64x16xf32> -> tensor<64x2xi64>
  %12 = ds.top_k %e {axis = 1 : i64, k = 2 : i64, largest = true} : tensor<64x16xf32> -> tensor<64x2xi64>
  %u = ds.constant dense<1.0> : tensor<64x2xf32>
  // CHECK: ds.scatter max, %{{.*}}, %[[POS]], %{{.*}} {axis = 1 : i64} : tensor<64x16xf32>, tensor<64x2xi64>, tensor<64x2xf32>
  %13 = ds.scatter max, %e, %12, %u {axis = 1 : i64} : tensor<64x16xf32>, tensor<64x2xi64>, tensor<64x2xf32>
  return
}

// CHECK-LABEL: func.func @losses
func.func @losses(%scores: tensor<6x10xf32>, %labels: tensor<6xi64>, %w: tensor<10xf32>,
                  %scores3: tensor<2x10x4xf32>, %labels3: tensor<2x4xi64>) -> () {
  // CHECK: ds.softmax_cross_entropy %{{.*}}, %{{.*}} {ignore_index = -100 : i64} : tensor<6x10xf32>, tensor<6xi64>
  %loss, %logp = ds.softmax_cross_entropy %scores, %labels {ignore_index = -100 : i64} : tensor<6x10xf32>, tensor<6xi64>
  // CHECK: ds.softmax_cross_entropy {{.*}} {reduction = #ds<reduction none>} : tensor<2x10x4xf32>, tensor<2x4xi64>, tensor<10xf32>
  %l3:2 = ds.softmax_cross_entropy %scores3, %labels3, %w {reduction = #ds<reduction none>} : tensor<2x10x4xf32>, tensor<2x4xi64>, tensor<10xf32>
  // CHECK: ds.nll_loss {{.*}} {reduction = #ds<reduction sum>}
  %nll = ds.nll_loss %logp, %labels {reduction = #ds<reduction sum>} : tensor<6x10xf32>, tensor<6xi64>
  return
}

// CHECK-LABEL: func.func @conv_and_pooling
func.func @conv_and_pooling(%x: tensor<2x4x9x9xf32>, %w: tensor<8x2x3x3xf32>, %b: tensor<8xf32>) -> () {
  // CHECK: ds.conv {{.*}} {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<2x4x9x9xf32>, tensor<8x2x3x3xf32>, tensor<8xf32>
  %0 = ds.conv %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 2 : i64} : tensor<2x4x9x9xf32>, tensor<8x2x3x3xf32>, tensor<8xf32>
  // CHECK: ds.max_pool {{.*}}ceil_mode
  %1 = ds.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode} : tensor<2x4x9x9xf32>
  // CHECK: ds.avg_pool {{.*}}count_include_pad
  %2 = ds.avg_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, count_include_pad} : tensor<2x4x9x9xf32>
  return
}

// CHECK-LABEL: func.func @optimizers
func.func @optimizers(%lr: tensor<f32>, %t: tensor<i64>, %x: tensor<4x3xf32>) -> () {
  // CHECK: ds.adam {{.*}} {alpha = 8.500000e-01 : f32}
  %0:3 = ds.adam %lr, %t, %x, %x, %x, %x {alpha = 0.85 : f32} : tensor<f32>, tensor<i64>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
  // CHECK: ds.momentum {{.*}}mode = #ds<momentum_mode nesterov>
  %1:2 = ds.momentum %lr, %t, %x, %x, %x {alpha = 0.9 : f32, beta = 1.0 : f32, mode = #ds<momentum_mode nesterov>, norm_coefficient = 0.0 : f32} : tensor<f32>, tensor<i64>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
  // CHECK: ds.adagrad
  %2:2 = ds.adagrad %lr, %t, %x, %x, %x {decay_factor = 0.1 : f32} : tensor<f32>, tensor<i64>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
  return
}

// Parameters and graph inputs are described by argument attributes.
// CHECK-LABEL: func.func @params
// CHECK-SAME: {ds.input = "tokens"}
// CHECK-SAME: {ds.param = #ds.param<name = "wte.weight", trainable = true, data = #ds.extern<location = "model.onnx.data", offset = 4096, length = 1024>>}
// CHECK-SAME: {ds.param = #ds.param<name = "scale", trainable = false, data = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>>}
// CHECK-SAME: -> (tensor<16x16xf32> {ds.output = "out"})
func.func @params(%tokens: tensor<4xi64> {ds.input = "tokens"},
                  %wte: tensor<16x16xf32> {ds.param = #ds.param<name = "wte.weight", trainable = true, data = #ds.extern<location = "model.onnx.data", offset = 4096, length = 1024>>},
                  %scale: tensor<2xf32> {ds.param = #ds.param<name = "scale", trainable = false, data = dense<[1.0, 2.0]> : tensor<2xf32>>})
    -> (tensor<16x16xf32> {ds.output = "out"}) {
  return %wte : tensor<16x16xf32>
}
