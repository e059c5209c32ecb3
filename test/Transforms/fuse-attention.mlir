// ds-fuse-attention: the GPT-2 export's spelling (kᵀ a transpose, a scale
// multiplied, a where with a causal boolean mask), the Llama export's (kᵀ a
// product flag, an additive causal mask), a divided scale without a mask;
// chains whose mask is not causal, whose head is wider than the kernels
// take, or whose probabilities are read elsewhere, stay as they are, the
// first two with a warning. q, k and v transposed from tokens-major
// [B, T, H, Dh] fold into a tokens_major ds.attention, which replaces the
// transpose of its result back; operands that are not all such transposes
// keep the heads-major form. Tokens-major q, k and v that are the thirds of
// one split of the q, k, v projection, in that order, fold into one
// ds.attention_packed on the projection; other splits stay as they are.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-attention))' -verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @gpt2
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[KT:.*]]: tensor<1x2x8x4xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK: %[[K:.*]] = ds.transpose %[[KT]] {perm = array<i64: 0, 1, 3, 2>}
// CHECK: %[[O:.*]], %{{.*}} = ds.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 2.500000e-01 : f32} : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>
// CHECK-NOT: ds.softmax
// CHECK: return %[[O]]
func.func @gpt2(%q: tensor<1x2x4x8xf32>, %kt: tensor<1x2x8x4xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %fill = ds.constant dense<-1.000000e+09> : tensor<f32>
  // true above the diagonal: 0b1110, 0b1100, 0b1000, 0 per row (j > i)
  %mask = ds.constant dense<[[[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %scale = ds.constant dense<2.500000e-01> : tensor<f32>
  %s = ds.matmul %q, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>
  %scaled = ds.mul %s, %scale : tensor<1x2x4x4xf32>, tensor<f32>
  %masked = ds.where %mask, %fill, %scaled : tensor<1x1x4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>
  %p = ds.softmax %masked {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = ds.matmul %p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func.func @llama
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8xf32>, %[[K:.*]]: tensor<2x4x8xf32>, %[[V:.*]]: tensor<2x4x8xf32>)
// CHECK: ds.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 5.000000e-01 : f32}
// CHECK-NOT: ds.softmax
func.func @llama(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %mask = ds.constant dense<[[0.0, -1.0e+09, -1.0e+09, -1.0e+09], [0.0, 0.0, -1.0e+09, -1.0e+09], [0.0, 0.0, 0.0, -3.0e+38], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %scale = ds.constant dense<5.000000e-01> : tensor<f32>
  %s = ds.matmul %q, %k {transpose_rhs} : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %scaled = ds.mul %scale, %s : tensor<f32>, tensor<2x4x4xf32>
  %masked = ds.add %scaled, %mask : tensor<2x4x4xf32>, tensor<4x4xf32>
  %p = ds.softmax %masked {axis = 2 : i64} : tensor<2x4x4xf32>
  %o = ds.matmul %p, %v : tensor<2x4x4xf32>, tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @unmasked
// CHECK: ds.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f32}
func.func @unmasked(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %c = ds.constant dense<8.000000e+00> : tensor<f32>
  %s = ds.matmul %q, %k {transpose_rhs} : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %scaled = ds.div %s, %c : tensor<2x4x4xf32>, tensor<f32>
  %p = ds.softmax %scaled {axis = 2 : i64} : tensor<2x4x4xf32>
  %o = ds.matmul %p, %v : tensor<2x4x4xf32>, tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// An anti-causal mask (query i sees keys j >= i).
// CHECK-LABEL: func.func @not_causal
// CHECK-NOT: ds.attention
// CHECK: ds.softmax
func.func @not_causal(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %mask = ds.constant dense<[[0.0, 0.0, 0.0, 0.0], [-1.0e+09, 0.0, 0.0, 0.0], [-1.0e+09, -1.0e+09, 0.0, 0.0], [-1.0e+09, -1.0e+09, -1.0e+09, 0.0]]> : tensor<4x4xf32>
  %s = ds.matmul %q, %k {transpose_rhs} : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %masked = ds.add %s, %mask : tensor<2x4x4xf32>, tensor<4x4xf32>
  // expected-warning @+1 {{attention not fused: the additive mask is not causal}}
  %p = ds.softmax %masked {axis = 2 : i64} : tensor<2x4x4xf32>
  %o = ds.matmul %p, %v : tensor<2x4x4xf32>, tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// The probabilities are also returned: nothing is fused.
// CHECK-LABEL: func.func @probabilities_used
// CHECK-NOT: ds.attention
// CHECK: ds.softmax
func.func @probabilities_used(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>) {
  %s = ds.matmul %q, %k {transpose_rhs} : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %p = ds.softmax %s {axis = 2 : i64} : tensor<2x4x4xf32>
  %o = ds.matmul %p, %v : tensor<2x4x4xf32>, tensor<2x4x8xf32>
  return %o, %p : tensor<2x4x8xf32>, tensor<2x4x4xf32>
}

// A head of 256: wider than the kernels' 128.
// CHECK-LABEL: func.func @wide_head
// CHECK-NOT: ds.attention
// CHECK: ds.softmax
func.func @wide_head(%q: tensor<1x4x256xf32>, %k: tensor<1x4x256xf32>, %v: tensor<1x4x256xf32>) -> tensor<1x4x256xf32> {
  %s = ds.matmul %q, %k {transpose_rhs} : tensor<1x4x256xf32>, tensor<1x4x256xf32>
  // expected-warning @+1 {{attention not fused: head dimension 256 exceeds the kernels' 128}}
  %p = ds.softmax %s {axis = 2 : i64} : tensor<1x4x4xf32>
  %o = ds.matmul %p, %v : tensor<1x4x4xf32>, tensor<1x4x256xf32>
  return %o : tensor<1x4x256xf32>
}

// GPT-2's heads as the projections write them, [B, T, H, Dh] = 1x5x2x8:
// q and v transposed to [B, H, T, Dh], k to kᵀ [B, H, Dh, T], the result
// back to [B, T, H, Dh]. The op reads and writes [B, T, H, Dh]; no
// transpose is left.
// CHECK-LABEL: func.func @gpt2_tokens_major
// CHECK-SAME: (%[[Q:.*]]: tensor<1x5x2x8xf32>, %[[K:.*]]: tensor<1x5x2x8xf32>, %[[V:.*]]: tensor<1x5x2x8xf32>)
// CHECK-NOT: ds.transpose
// CHECK: %[[O:.*]], %[[LSE:.*]] = ds.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 2.500000e-01 : f32, tokens_major} : tensor<1x5x2x8xf32>, tensor<1x5x2x8xf32>, tensor<1x5x2x8xf32>
// CHECK-NOT: ds.transpose
// CHECK: return %[[O]] : tensor<1x5x2x8xf32>
func.func @gpt2_tokens_major(%qt: tensor<1x5x2x8xf32>, %kt: tensor<1x5x2x8xf32>, %vt: tensor<1x5x2x8xf32>) -> tensor<1x5x2x8xf32> {
  %q = ds.transpose %qt {perm = array<i64: 0, 2, 1, 3>} : tensor<1x5x2x8xf32>
  %k = ds.transpose %kt {perm = array<i64: 0, 2, 3, 1>} : tensor<1x5x2x8xf32>
  %v = ds.transpose %vt {perm = array<i64: 0, 2, 1, 3>} : tensor<1x5x2x8xf32>
  %fill = ds.constant dense<-1.000000e+09> : tensor<f32>
  %mask = ds.constant dense<[[false, true, true, true, true], [false, false, true, true, true], [false, false, false, true, true], [false, false, false, false, true], [false, false, false, false, false]]> : tensor<5x5xi1>
  %scale = ds.constant dense<2.500000e-01> : tensor<f32>
  %s = ds.matmul %q, %k : tensor<1x2x5x8xf32>, tensor<1x2x8x5xf32>
  %scaled = ds.mul %s, %scale : tensor<1x2x5x5xf32>, tensor<f32>
  %masked = ds.where %mask, %fill, %scaled : tensor<5x5xi1>, tensor<f32>, tensor<1x2x5x5xf32>
  %p = ds.softmax %masked {axis = 3 : i64} : tensor<1x2x5x5xf32>
  %o = ds.matmul %p, %v : tensor<1x2x5x5xf32>, tensor<1x2x5x8xf32>
  %ot = ds.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x5x8xf32>
  return %ot : tensor<1x5x2x8xf32>
}

// k as a product flag (Llama's spelling) and a result also read
// heads-major: the op is tokens-major, and that reader gets a transpose of
// its result.
// CHECK-LABEL: func.func @result_also_heads_major
// CHECK-SAME: (%[[Q:.*]]: tensor<5x2x8xf32>, %[[K:.*]]: tensor<5x2x8xf32>, %[[V:.*]]: tensor<5x2x8xf32>)
// CHECK: %[[O:.*]], %{{.*}} = ds.attention %[[Q]], %[[K]], %[[V]] {scale = 5.000000e-01 : f32, tokens_major}
// CHECK: %[[H:.*]] = ds.transpose %[[O]] {perm = array<i64: 1, 0, 2>}
// CHECK: return %[[O]], %[[H]] : tensor<5x2x8xf32>, tensor<2x5x8xf32>
func.func @result_also_heads_major(%qt: tensor<5x2x8xf32>, %kt: tensor<5x2x8xf32>, %vt: tensor<5x2x8xf32>) -> (tensor<5x2x8xf32>, tensor<2x5x8xf32>) {
  %q = ds.transpose %qt {perm = array<i64: 1, 0, 2>} : tensor<5x2x8xf32>
  %k = ds.transpose %kt {perm = array<i64: 1, 0, 2>} : tensor<5x2x8xf32>
  %v = ds.transpose %vt {perm = array<i64: 1, 0, 2>} : tensor<5x2x8xf32>
  %scale = ds.constant dense<5.000000e-01> : tensor<f32>
  %s = ds.matmul %q, %k {transpose_rhs} : tensor<2x5x8xf32>, tensor<2x5x8xf32>
  %scaled = ds.mul %s, %scale : tensor<2x5x5xf32>, tensor<f32>
  %p = ds.softmax %scaled {axis = 2 : i64} : tensor<2x5x5xf32>
  %o = ds.matmul %p, %v : tensor<2x5x5xf32>, tensor<2x5x8xf32>
  %ot = ds.transpose %o {perm = array<i64: 1, 0, 2>} : tensor<2x5x8xf32>
  return %ot, %o : tensor<5x2x8xf32>, tensor<2x5x8xf32>
}

// v is not a transpose: the heads-major form, the transposes kept.
// CHECK-LABEL: func.func @not_all_transposed
// CHECK: ds.transpose
// CHECK: %[[O:.*]], %{{.*}} = ds.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 5.000000e-01 : f32} : tensor<2x5x8xf32>
// CHECK: ds.transpose %[[O]] {perm = array<i64: 1, 0, 2>}
func.func @not_all_transposed(%qt: tensor<5x2x8xf32>, %kt: tensor<5x2x8xf32>, %v: tensor<2x5x8xf32>) -> tensor<5x2x8xf32> {
  %q = ds.transpose %qt {perm = array<i64: 1, 0, 2>} : tensor<5x2x8xf32>
  %k = ds.transpose %kt {perm = array<i64: 1, 0, 2>} : tensor<5x2x8xf32>
  %scale = ds.constant dense<5.000000e-01> : tensor<f32>
  %s = ds.matmul %q, %k {transpose_rhs} : tensor<2x5x8xf32>, tensor<2x5x8xf32>
  %scaled = ds.mul %s, %scale : tensor<2x5x5xf32>, tensor<f32>
  %p = ds.softmax %scaled {axis = 2 : i64} : tensor<2x5x5xf32>
  %o = ds.matmul %p, %v : tensor<2x5x5xf32>, tensor<2x5x8xf32>
  %ot = ds.transpose %o {perm = array<i64: 1, 0, 2>} : tensor<2x5x8xf32>
  return %ot : tensor<5x2x8xf32>
}

// GPT-2's fused projection [B, T, 3 D] split along its last axis into
// q, k, v, each reshaped to [B, T, H, Dh]: one attention_packed on the
// projection read as [B, T, 3, H, Dh]; no split, no reshape of a third.
// CHECK-LABEL: func.func @gpt2_packed
// CHECK-SAME: (%[[X:.*]]: tensor<1x5x48xf32>)
// CHECK-NOT: ds.split
// CHECK: %[[QKV:.*]] = ds.reshape %[[X]] : tensor<1x5x48xf32> -> tensor<1x5x3x2x8xf32>
// CHECK-NEXT: %[[O:.*]], %{{.*}} = ds.attention_packed %[[QKV]] {causal, scale = 2.500000e-01 : f32} : tensor<1x5x3x2x8xf32>
// CHECK-NOT: ds.split
// CHECK-NOT: ds.transpose
// CHECK: return %[[O]] : tensor<1x5x2x8xf32>
func.func @gpt2_packed(%x: tensor<1x5x48xf32>) -> tensor<1x5x2x8xf32> {
  %q3, %k3, %v3 = ds.split %x {axis = 2 : i64} : tensor<1x5x48xf32> -> tensor<1x5x16xf32>, tensor<1x5x16xf32>, tensor<1x5x16xf32>
  %qt = ds.reshape %q3 : tensor<1x5x16xf32> -> tensor<1x5x2x8xf32>
  %kt = ds.reshape %k3 : tensor<1x5x16xf32> -> tensor<1x5x2x8xf32>
  %vt = ds.reshape %v3 : tensor<1x5x16xf32> -> tensor<1x5x2x8xf32>
  %q = ds.transpose %qt {perm = array<i64: 0, 2, 1, 3>} : tensor<1x5x2x8xf32>
  %k = ds.transpose %kt {perm = array<i64: 0, 2, 3, 1>} : tensor<1x5x2x8xf32>
  %v = ds.transpose %vt {perm = array<i64: 0, 2, 1, 3>} : tensor<1x5x2x8xf32>
  %fill = ds.constant dense<-1.000000e+09> : tensor<f32>
  %mask = ds.constant dense<[[false, true, true, true, true], [false, false, true, true, true], [false, false, false, true, true], [false, false, false, false, true], [false, false, false, false, false]]> : tensor<5x5xi1>
  %scale = ds.constant dense<2.500000e-01> : tensor<f32>
  %s = ds.matmul %q, %k : tensor<1x2x5x8xf32>, tensor<1x2x8x5xf32>
  %scaled = ds.mul %s, %scale : tensor<1x2x5x5xf32>, tensor<f32>
  %masked = ds.where %mask, %fill, %scaled : tensor<5x5xi1>, tensor<f32>, tensor<1x2x5x5xf32>
  %p = ds.softmax %masked {axis = 3 : i64} : tensor<1x2x5x5xf32>
  %o = ds.matmul %p, %v : tensor<1x2x5x5xf32>, tensor<1x2x5x8xf32>
  %ot = ds.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x5x8xf32>
  return %ot : tensor<1x5x2x8xf32>
}

// The split's first third is k, not q: packing would swap them, so the
// tokens-major form on the split's results stays.
// CHECK-LABEL: func.func @split_out_of_order
// CHECK: ds.split
// CHECK-NOT: ds.attention_packed
// CHECK: ds.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 5.000000e-01 : f32, tokens_major}
func.func @split_out_of_order(%x: tensor<5x48xf32>) -> tensor<5x2x8xf32> {
  %k3, %q3, %v3 = ds.split %x {axis = 1 : i64} : tensor<5x48xf32> -> tensor<5x16xf32>, tensor<5x16xf32>, tensor<5x16xf32>
  %qt = ds.reshape %q3 : tensor<5x16xf32> -> tensor<5x2x8xf32>
  %kt = ds.reshape %k3 : tensor<5x16xf32> -> tensor<5x2x8xf32>
  %vt = ds.reshape %v3 : tensor<5x16xf32> -> tensor<5x2x8xf32>
  %q = ds.transpose %qt {perm = array<i64: 1, 0, 2>} : tensor<5x2x8xf32>
  %k = ds.transpose %kt {perm = array<i64: 1, 0, 2>} : tensor<5x2x8xf32>
  %v = ds.transpose %vt {perm = array<i64: 1, 0, 2>} : tensor<5x2x8xf32>
  %scale = ds.constant dense<5.000000e-01> : tensor<f32>
  %s = ds.matmul %q, %k {transpose_rhs} : tensor<2x5x8xf32>, tensor<2x5x8xf32>
  %scaled = ds.mul %s, %scale : tensor<2x5x5xf32>, tensor<f32>
  %p = ds.softmax %scaled {axis = 2 : i64} : tensor<2x5x5xf32>
  %o = ds.matmul %p, %v : tensor<2x5x5xf32>, tensor<2x5x8xf32>
  %ot = ds.transpose %o {perm = array<i64: 1, 0, 2>} : tensor<2x5x8xf32>
  return %ot : tensor<5x2x8xf32>
}

// v's third is also read elsewhere (a returned cache): the split stays,
// and so does the tokens-major form.
// CHECK-LABEL: func.func @split_third_read_elsewhere
// CHECK: ds.split
// CHECK-NOT: ds.attention_packed
// CHECK: ds.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 5.000000e-01 : f32, tokens_major}
func.func @split_third_read_elsewhere(%x: tensor<5x48xf32>) -> (tensor<5x2x8xf32>, tensor<5x16xf32>) {
  %q3, %k3, %v3 = ds.split %x {axis = 1 : i64} : tensor<5x48xf32> -> tensor<5x16xf32>, tensor<5x16xf32>, tensor<5x16xf32>
  %qt = ds.reshape %q3 : tensor<5x16xf32> -> tensor<5x2x8xf32>
  %kt = ds.reshape %k3 : tensor<5x16xf32> -> tensor<5x2x8xf32>
  %vt = ds.reshape %v3 : tensor<5x16xf32> -> tensor<5x2x8xf32>
  %q = ds.transpose %qt {perm = array<i64: 1, 0, 2>} : tensor<5x2x8xf32>
  %k = ds.transpose %kt {perm = array<i64: 1, 0, 2>} : tensor<5x2x8xf32>
  %v = ds.transpose %vt {perm = array<i64: 1, 0, 2>} : tensor<5x2x8xf32>
  %scale = ds.constant dense<5.000000e-01> : tensor<f32>
  %s = ds.matmul %q, %k {transpose_rhs} : tensor<2x5x8xf32>, tensor<2x5x8xf32>
  %scaled = ds.mul %s, %scale : tensor<2x5x5xf32>, tensor<f32>
  %p = ds.softmax %scaled {axis = 2 : i64} : tensor<2x5x5xf32>
  %o = ds.matmul %p, %v : tensor<2x5x5xf32>, tensor<2x5x8xf32>
  %ot = ds.transpose %o {perm = array<i64: 1, 0, 2>} : tensor<2x5x8xf32>
  return %ot, %v3 : tensor<5x2x8xf32>, tensor<5x16xf32>
}
