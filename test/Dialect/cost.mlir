// The cost model against textbook formulas: a matmul of [B, M, K] by [K, N]
// is 2*B*M*N*K FLOPs, a convolution 2 * output elements * (C/group * kernel)
// plus the bias, and bytes are every operand read once plus every result
// written once.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-print-cost{per-op=true})' -verify-diagnostics -o /dev/null 2>&1 | FileCheck %s --check-prefix=TABLE
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-print-cost{per-op=true})' -verify-diagnostics -o /dev/null

func.func @costs(%a: tensor<4x2x8xf32>, %b: tensor<8x5xf32>, %m: tensor<3x8xf32>,
                 %c: tensor<5xf32>, %x: tensor<2x4x9x9xf32>, %w: tensor<8x2x3x3xf32>,
                 %bias: tensor<8xf32>, %h: tensor<2x3x8xf16>) {
  // 2 * 4 * 2 * 5 * 8 = 640; (64 + 40 + 40) * 4 bytes
  // expected-remark @+1 {{flops = 640, bytes = 576}}
  %0 = ds.matmul %a, %b : tensor<4x2x8xf32>, tensor<8x5xf32>
  // 2 * 3 * 5 * 8 + 2 * 3 * 5 (beta * c, added); (24 + 40 + 5 + 15) * 4 bytes
  // expected-remark @+1 {{flops = 270, bytes = 336}}
  %1 = ds.gemm %m, %b, %c : tensor<3x8xf32>, tensor<8x5xf32>, tensor<5xf32>
  // output [2, 8, 5, 5] = 400 elements, each a dot product of 2 * 3 * 3, plus
  // the bias; (648 + 144 + 8 + 400) * 4 bytes
  // expected-remark @+1 {{flops = 14800, bytes = 4800}}
  %2 = ds.conv %x, %w, %bias {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 2 : i64} : tensor<2x4x9x9xf32>, tensor<8x2x3x3xf32>, tensor<8xf32>
  // 48 f16 elements, read and written
  // expected-remark @+1 {{flops = 240, bytes = 192}}
  %3 = ds.softmax %h {axis = 2 : i64} : tensor<2x3x8xf16>
  // expected-remark @+1 {{flops = 0, bytes = 192}}
  %4 = ds.reshape %h : tensor<2x3x8xf16> -> tensor<6x8xf16>
  // expected-remark @+1 {{flops = 48, bytes = 288}}
  %5 = ds.add %h, %h : tensor<2x3x8xf16>, tensor<2x3x8xf16>
  return
}

// TABLE: cost of @costs
// TABLE: ds.conv 1 14800 4800
// TABLE: total 6 15998 6384
