// Every verifier and every result type inference of the ds dialect rejects
// malformed ops with a message saying why.
// RUN: dsopt-opt %s -split-input-file -verify-diagnostics

func.func @add_no_broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{operand shapes [2, 3] and [4] do not broadcast}}
  %0 = ds.add %a, %b : tensor<2x3xf32>, tensor<4xf32>
  return
}

// -----

func.func @add_mixed_types(%a: tensor<3xf32>, %b: tensor<3xf16>) {
  // expected-error @+1 {{requires the same element type for all operands}}
  %0 = "ds.add"(%a, %b) : (tensor<3xf32>, tensor<3xf16>) -> tensor<3xf32>
  return
}

// -----

func.func @add_wrong_result(%a: tensor<3xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<3xf32>' are incompatible with return type(s) of operation 'tensor<4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = "ds.add"(%a, %a) : (tensor<3xf32>, tensor<3xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @sqrt_of_integers(%a: tensor<3xi64>) {
  // expected-error @+1 {{must be statically shaped tensor of 32-bit float or 16-bit float or bfloat16 type values}}
  %0 = ds.sqrt %a : tensor<3xi64>
  return
}

// -----

func.func @dynamic_shape(%a: tensor<?xf32>) {
  // expected-error @+1 {{must be statically shaped tensor}}
  %0 = ds.exp %a : tensor<?xf32>
  return
}

// -----

func.func @where_branch_types(%c: tensor<3xi1>, %a: tensor<3xf32>, %b: tensor<3xi64>) {
  // expected-error @+1 {{where branches must have the same element type}}
  %0 = ds.where %c, %a, %b : tensor<3xi1>, tensor<3xf32>, tensor<3xi64>
  return
}

// -----

func.func @cast_changes_shape(%a: tensor<3xf32>) {
  // expected-error @+1 {{changes the shape from 'tensor<3xf32>' to 'tensor<4xf16>'}}
  %0 = ds.cast %a : tensor<3xf32> to tensor<4xf16>
  return
}

// -----

func.func @constant_f64() {
  // expected-error @+1 {{result #0 must be statically shaped tensor of 32-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 32-bit signless integer or 1-bit signless integer values, but got 'tensor<2xf64>'}}
  %0 = "ds.constant"() {value = dense<1.0> : tensor<2xf64>} : () -> tensor<2xf64>
  return
}

// -----

func.func @matmul_contraction(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+1 {{matmul contraction sizes differ: [2, 3] x [4, 5] (3 vs 4)}}
  %0 = ds.matmul %a, %b : tensor<2x3xf32>, tensor<4x5xf32>
  return
}

// -----

func.func @matmul_batch(%a: tensor<2x2x3xf32>, %b: tensor<3x3x5xf32>) {
  // expected-error @+1 {{matmul batch axes of [2, 2, 3] and [3, 3, 5] do not broadcast}}
  %0 = ds.matmul %a, %b : tensor<2x2x3xf32>, tensor<3x3x5xf32>
  return
}

// -----

func.func @gemm_rank(%a: tensor<2x3x4xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+1 {{gemm operands a and b must be 2-D}}
  %0 = ds.gemm %a, %b : tensor<2x3x4xf32>, tensor<4x5xf32>
  return
}

// -----

func.func @gemm_bias(%a: tensor<2x4xf32>, %b: tensor<4x5xf32>, %c: tensor<3xf32>) {
  // expected-error @+1 {{gemm c [3] does not broadcast to [2, 5]}}
  %0 = ds.gemm %a, %b, %c : tensor<2x4xf32>, tensor<4x5xf32>, tensor<3xf32>
  return
}

// -----

func.func @softmax_axis(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %0 = ds.softmax %a {axis = 2 : i64} : tensor<2x3xf32>
  return
}

// -----

func.func @log_softmax_negative_axis(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{axis -1 is out of range for rank 2 (axes are normalized to [0, rank))}}
  %0 = ds.log_softmax %a {axis = -1 : i64} : tensor<2x3xf32>
  return
}

// -----

func.func @layer_norm_scale(%a: tensor<2x3x8xf32>, %s: tensor<4xf32>) {
  // expected-error @+1 {{layer_norm scale [4] must broadcast to the normalized shape [8] with the input's type}}
  %0:3 = ds.layer_norm %a, %s {axis = 2 : i64} : tensor<2x3x8xf32>, tensor<4xf32>
  return
}

// -----

func.func @layer_norm_axis(%a: tensor<2x3x8xf32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{layer_norm axis 3 is out of range for rank 3}}
  %0:3 = ds.layer_norm %a, %s {axis = 3 : i64} : tensor<2x3x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @layer_norm_missing_axis(%a: tensor<2x3x8xf32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{layer_norm needs attribute(s) axis}}
  %0:3 = ds.layer_norm %a, %s : tensor<2x3x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @batch_norm_channels(%x: tensor<2x4x5x5xf32>, %c: tensor<3xf32>) {
  // expected-error @+1 {{batch_norm scale, bias, mean and variance must have shape [4]}}
  %0 = ds.batch_norm %x, %c, %c, %c, %c : tensor<2x4x5x5xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
  return
}

// -----

func.func @reduce_axis(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{reduce_sum axis 2 is out of range for rank 2}}
  %0 = ds.reduce_sum %a {axes = array<i64: 2>} : tensor<2x3xf32>
  return
}

// -----

func.func @reduce_unsorted(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{reduce_mean axes must be sorted and unique}}
  %0 = ds.reduce_mean %a {axes = array<i64: 1, 0>} : tensor<2x3xf32>
  return
}

// -----

func.func @reshape_count(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{changes the number of elements from 6 to 8}}
  %0 = ds.reshape %a : tensor<2x3xf32> -> tensor<2x4xf32>
  return
}

// -----

func.func @reshape_type(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{changes the element type from 'f32' to 'f16'}}
  %0 = ds.reshape %a : tensor<2x3xf32> -> tensor<6xf16>
  return
}

// -----

func.func @transpose_perm(%a: tensor<2x3x4xf32>) {
  // expected-error @+1 {{transpose perm must be a permutation of [0, 3)}}
  %0 = ds.transpose %a {perm = array<i64: 0, 0, 1>} : tensor<2x3x4xf32>
  return
}

// -----

func.func @transpose_rank(%a: tensor<2x3x4xf32>) {
  // expected-error @+1 {{transpose perm must have one entry per input axis}}
  %0 = ds.transpose %a {perm = array<i64: 1, 0>} : tensor<2x3x4xf32>
  return
}

// -----

func.func @broadcast_incompatible(%a: tensor<3xf32>) {
  // expected-error @+1 {{cannot broadcast 'tensor<3xf32>' to 'tensor<2x4xf32>'}}
  %0 = ds.broadcast_to %a : tensor<3xf32> -> tensor<2x4xf32>
  return
}

// -----

func.func @concat_mismatch(%a: tensor<2x3xf32>, %b: tensor<3x3xf32>) {
  // expected-error @+1 {{concat inputs [2, 3] and [3, 3] differ outside axis 1}}
  %0 = ds.concat %a, %b {axis = 1 : i64} : tensor<2x3xf32>, tensor<3x3xf32>
  return
}

// -----

func.func @concat_axis(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{concat axis 2 is out of range}}
  %0 = ds.concat %a, %a {axis = 2 : i64} : tensor<2x3xf32>, tensor<2x3xf32>
  return
}

// -----

func.func @split_sizes(%a: tensor<2x8xf32>) {
  // expected-error @+1 {{result sizes along axis 1 sum to 7 but the input has 8}}
  %0:2 = ds.split %a {axis = 1 : i64} : tensor<2x8xf32> -> tensor<2x3xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @split_other_axis(%a: tensor<2x8xf32>) {
  // expected-error @+1 {{differs from input 'tensor<2x8xf32>' outside axis 1}}
  %0:2 = ds.split %a {axis = 1 : i64} : tensor<2x8xf32> -> tensor<3x4xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @slice_out_of_bounds(%a: tensor<8xf32>) {
  // expected-error @+1 {{reads out of bounds on axis 0: offset 4, stride 2, size 3, input size 8}}
  %0 = ds.slice %a {offsets = array<i64: 4>, strides = array<i64: 2>} : tensor<8xf32> -> tensor<3xf32>
  return
}

// -----

func.func @slice_zero_stride(%a: tensor<8xf32>) {
  // expected-error @+1 {{stride of axis 0 must be non-zero}}
  %0 = ds.slice %a {offsets = array<i64: 0>, strides = array<i64: 0>} : tensor<8xf32> -> tensor<1xf32>
  return
}

// -----

func.func @slice_arity(%a: tensor<8x2xf32>) {
  // expected-error @+1 {{needs one offset and one stride per axis (2)}}
  %0 = ds.slice %a {offsets = array<i64: 0>, strides = array<i64: 1>} : tensor<8x2xf32> -> tensor<8x2xf32>
  return
}

// -----

func.func @gather_axis(%a: tensor<8x2xf32>, %i: tensor<3xi64>) {
  // expected-error @+1 {{gather axis 2 is out of range for the data's rank}}
  %0 = ds.gather %a, %i {axis = 2 : i64} : tensor<8x2xf32>, tensor<3xi64>
  return
}

// -----

func.func @gather_float_indices(%a: tensor<8x2xf32>, %i: tensor<3xf32>) {
  // expected-error @+1 {{must be statically shaped tensor of 64-bit signless integer or 32-bit signless integer values}}
  %0 = "ds.gather"(%a, %i) {axis = 0 : i64} : (tensor<8x2xf32>, tensor<3xf32>) -> tensor<3x2xf32>
  return
}

// -----

func.func @scatter_shapes(%a: tensor<8x2xf32>, %p: tensor<3xi64>, %u: tensor<4xf32>) {
  // expected-error @+1 {{positions 'tensor<3xi64>' and updates 'tensor<4xf32>' must have the same shape}}
  %0 = ds.scatter add, %a, %p, %u {axis = 0 : i64} : tensor<8x2xf32>, tensor<3xi64>, tensor<4xf32>
  return
}

// -----

func.func @scatter_axis(%a: tensor<8x2xf32>, %p: tensor<3xi64>, %u: tensor<3xf32>) {
  // expected-error @+1 {{axis 1 is out of range for rank 1}}
  %0 = ds.scatter none, %a, %p, %u {axis = 1 : i64} : tensor<8x2xf32>, tensor<3xi64>, tensor<3xf32>
  return
}

// -----

func.func @top_k_too_many(%a: tensor<8x2xf32>) {
  // expected-error @+2 {{top_k k 3 is not in [0, 2], the extent of axis 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ds.top_k %a {axis = 1 : i64, k = 3 : i64, largest = true} : tensor<8x2xf32> -> tensor<8x3xi64>
  return
}

// -----

func.func @trilu_rank(%a: tensor<8xf32>) {
  // expected-error @+1 {{input must have rank >= 2}}
  %0 = ds.trilu %a {upper = true} : tensor<8xf32>
  return
}

// -----

func.func @dropout_ratio(%a: tensor<8xf32>) {
  // expected-error @+1 {{ratio 1.000000e+00 must be in [0, 1)}}
  %0:2 = ds.dropout %a {ratio = 1.0 : f32, seed = 1 : i64} : tensor<8xf32>
  return
}

// -----

func.func @loss_labels(%s: tensor<6x10xf32>, %l: tensor<5xi64>) {
  // expected-error @+1 {{softmax_cross_entropy labels must have shape [6] for scores [6, 10], got [5]}}
  %0:2 = ds.softmax_cross_entropy %s, %l : tensor<6x10xf32>, tensor<5xi64>
  return
}

// -----

func.func @loss_weights(%s: tensor<6x10xf32>, %l: tensor<6xi64>, %w: tensor<6xf32>) {
  // expected-error @+1 {{nll_loss weights must have shape [10], got [6]}}
  %0 = ds.nll_loss %s, %l, %w : tensor<6x10xf32>, tensor<6xi64>, tensor<6xf32>
  return
}

// -----

func.func @loss_scalar_scores(%s: tensor<6xf32>, %l: tensor<6xi64>) {
  // expected-error @+1 {{softmax_cross_entropy scores must be [N, C, d...], got [6]}}
  %0:2 = ds.softmax_cross_entropy %s, %l : tensor<6xf32>, tensor<6xi64>
  return
}

// -----

func.func @loss_with_grad_seed(%s: tensor<6x10xbf16>, %l: tensor<6xi64>, %g: tensor<6xf32>) {
  // expected-error @+1 {{softmax_cross_entropy_with_grad loss_grad (the gradient's seed) must have the loss's shape []}}
  %0:2 = ds.softmax_cross_entropy_with_grad %s, %l, %g : tensor<6x10xbf16>, tensor<6xi64>, tensor<6xf32>
  return
}

// -----

func.func @loss_with_grad_labels(%s: tensor<6x10xf32>, %l: tensor<5xi64>, %g: tensor<f32>) {
  // expected-error @+1 {{softmax_cross_entropy_with_grad labels must have shape [6] for scores [6, 10], got [5]}}
  %0:2 = ds.softmax_cross_entropy_with_grad %s, %l, %g : tensor<6x10xf32>, tensor<5xi64>, tensor<f32>
  return
}

// -----

func.func @conv_groups(%x: tensor<1x4x8x8xf32>, %w: tensor<6x2x3x3xf32>) {
  // expected-error @+1 {{conv group 3 must divide the input channels (4) and output channels (6)}}
  %0 = ds.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 3 : i64} : tensor<1x4x8x8xf32>, tensor<6x2x3x3xf32>
  return
}

// -----

func.func @conv_channels(%x: tensor<1x4x8x8xf32>, %w: tensor<6x3x3x3xf32>) {
  // expected-error @+1 {{conv weight [6, 3, 3, 3] needs 4 input channels per group, input has 4 channels in 1 groups}}
  %0 = ds.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : tensor<1x4x8x8xf32>, tensor<6x3x3x3xf32>
  return
}

// -----

func.func @conv_window(%x: tensor<1x4x2x2xf32>, %w: tensor<6x4x3x3xf32>) {
  // expected-error @+1 {{conv window (kernel 3, dilation 1) does not fit spatial axis 2 of size 2 with its padding}}
  %0 = ds.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : tensor<1x4x2x2xf32>, tensor<6x4x3x3xf32>
  return
}

// -----

func.func @conv_pads(%x: tensor<1x4x8x8xf32>, %w: tensor<6x4x3x3xf32>) {
  // expected-error @+1 {{conv 'pads' needs 4 values for 2 spatial axes, got 2}}
  %0 = ds.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1, 1>} : tensor<1x4x8x8xf32>, tensor<6x4x3x3xf32>
  return
}

// -----

func.func @max_pool_rank(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{max_pool input must be [N, C, D...]}}
  %0 = ds.max_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : tensor<4x8xf32>
  return
}

// -----

func.func @avg_pool_stride(%x: tensor<1x4x8x8xf32>) {
  // expected-error @+1 {{avg_pool kernel, strides and dilations must be positive on axis 3}}
  %0 = ds.avg_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 1, 0>, pads = array<i64: 0, 0, 0, 0>} : tensor<1x4x8x8xf32>
  return
}

// -----

func.func @adam_lr_not_scalar(%lr: tensor<2xf32>, %t: tensor<i64>, %x: tensor<4xf32>) {
  // expected-error @+1 {{adam 'lr' must be a scalar}}
  %0:3 = ds.adam %lr, %t, %x, %x, %x, %x : tensor<2xf32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @momentum_state(%lr: tensor<f32>, %t: tensor<i64>, %x: tensor<4xf32>, %v: tensor<5xf32>) {
  // expected-error @+1 {{momentum gradient and state tensors must all have the parameter's type}}
  %0:2 = ds.momentum %lr, %t, %x, %x, %v {alpha = 0.9 : f32, beta = 1.0 : f32, norm_coefficient = 0.0 : f32} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<5xf32>
  return
}

// -----

func.func @adagrad_lr_type(%lr: tensor<i64>, %t: tensor<i64>, %x: tensor<4xf32>) {
  // expected-error @+1 {{must be statically shaped tensor of 32-bit float or 16-bit float or bfloat16 type values}}
  %0:2 = ds.adagrad %lr, %t, %x, %x, %x : tensor<i64>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

// expected-error @+1 {{parameter 'w' of type 'tensor<4x4xf32>' needs 64 bytes but its external data holds 32}}
func.func @param_length(%w: tensor<4x4xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "m.bin", offset = 0, length = 32>>}) {
  return
}

// -----

// expected-error @+1 {{parameter 'w' value has type 'tensor<2xf32>' but argument 0 is 'tensor<3xf32>'}}
func.func @param_dense(%w: tensor<3xf32> {ds.param = #ds.param<name = "w", trainable = true, data = dense<1.0> : tensor<2xf32>>}) {
  return
}

// -----

// A 16-bit working copy holds an f32 value, but only of its own shape.
// expected-error @+1 {{parameter 'w' value has type 'tensor<2xf32>' but argument 0 is 'tensor<3xbf16>'}}
func.func @param_working_copy(%w: tensor<3xbf16> {ds.param = #ds.param<name = "w", trainable = true, data = dense<1.0> : tensor<2xf32>>}) {
  return
}

// -----

// ... and an f32 value: not an integer one.
// expected-error @+1 {{parameter 'w' value has type 'tensor<3xi32>' but argument 0 is 'tensor<3xbf16>'}}
func.func @param_working_copy_int(%w: tensor<3xbf16> {ds.param = #ds.param<name = "w", trainable = true, data = dense<1> : tensor<3xi32>>}) {
  return
}

// -----

// expected-error @+2 {{failed to parse Ds_ParamAttr parameter 'data'}}
// expected-error @+1 {{external data location '/etc/passwd' must be relative to the model's directory}}
func.func @param_absolute(%w: tensor<2xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "/etc/passwd", offset = 0, length = 8>>}) {
  return
}

// -----

// expected-error @+2 {{failed to parse Ds_ParamAttr parameter 'data'}}
// expected-error @+1 {{external data location 'a/../../x.bin' must not contain '..'}}
func.func @param_dotdot(%w: tensor<2xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "a/../../x.bin", offset = 0, length = 8>>}) {
  return
}

// -----

// expected-error @+2 {{failed to parse Ds_ParamAttr parameter 'data'}}
// expected-error @+1 {{external data offset and length must be non-negative, got offset -1 and length 8}}
func.func @param_offset(%w: tensor<2xf32> {ds.param = #ds.param<name = "w", trainable = true, data = #ds.extern<location = "x.bin", offset = -1, length = 8>>}) {
  return
}

// -----

// expected-error @+1 {{parameter 'w' data must be #ds.extern or dense elements}}
func.func @param_data_kind(%w: tensor<2xf32> {ds.param = #ds.param<name = "w", trainable = true, data = "weights">}) {
  return
}

// -----

// expected-error @+1 {{parameter name must not be empty}}
func.func @param_name(%w: tensor<2xf32> {ds.param = #ds.param<name = "", trainable = true, data = dense<1.0> : tensor<2xf32>>}) {
  return
}

// -----

// expected-error @+1 {{'ds.input' must be a string (the input name)}}
func.func @input_name(%x: tensor<2xf32> {ds.input = 3 : i64}) {
  return
}

// -----

// expected-error @+1 {{unknown ds argument attribute 'ds.bogus'}}
func.func @unknown_arg_attr(%x: tensor<2xf32> {ds.bogus = 1 : i64}) {
  return
}

// -----

// expected-error @+1 {{'ds.output' must be a string (the output name)}}
func.func @output_name(%x: tensor<2xf32>) -> (tensor<2xf32> {ds.output = 1 : i64}) {
  return %x : tensor<2xf32>
}

// -----

func.func @fused_arguments(%a: tensor<4xf32>) {
  // expected-error @+1 {{body has 2 arguments for 1 inputs}}
  %0 = ds.fused(%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: f32, %y: f32):
    ds.yield %x : f32
  }
  return
}

// -----

func.func @fused_argument_type(%a: tensor<4xf16>) {
  // expected-error @+1 {{body argument 0 must be 'f32' for an input of 'tensor<4xf16>'}}
  %0 = ds.fused(%a) : (tensor<4xf16>) -> tensor<4xf16> {
  ^bb0(%x: f16):
    %e = arith.extf %x : f16 to f32
    ds.yield %e : f32
  }
  return
}

// -----

func.func @fused_broadcast(%a: tensor<3xf32>) {
  // expected-error @+1 {{input 0 'tensor<3xf32>' does not broadcast to the result 'tensor<4x4xf32>'}}
  %0 = ds.fused(%a) : (tensor<3xf32>) -> tensor<4x4xf32> {
  ^bb0(%x: f32):
    ds.yield %x : f32
  }
  return
}

// -----

func.func @fused_yield_type(%a: tensor<4xf32>) {
  // expected-error @+1 {{yields 'i64' but the result's elements need 'f32'}}
  %0 = ds.fused(%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: f32):
    %i = arith.fptosi %x : f32 to i64
    ds.yield %i : i64
  }
  return
}

// -----

func.func @fused_body_ops(%a: tensor<4xf32>) {
  %0 = ds.fused(%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: f32):
    // expected-error @+1 {{is not allowed in a ds.fused body (arith and math ops only)}}
    %t = emitc.add %x, %x : (f32, f32) -> f32
    ds.yield %t : f32
  }
  return
}

// -----

func.func @attention_tokens_major_rank(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{attention tokens_major query must be a ranked tensor [..., T, H, Dh] (rank at least 3)}}
  %0, %1 = ds.attention %a, %a, %a {scale = 1.0 : f32, tokens_major} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
  return
}

// -----

// A tokens-major gradient reads lse [B, T, H], not the heads-major [B, H, T].
func.func @attention_grad_tokens_major_lse(%a: tensor<1x5x2x8xf32>, %lse: tensor<1x2x5xf32>) {
  // expected-error @+1 {{attention_grad lse must have the query's shape without its last axis}}
  %0:3 = ds.attention_grad %a, %a, %a, %a, %lse, %a {scale = 1.0 : f32, tokens_major} : tensor<1x5x2x8xf32>, tensor<1x5x2x8xf32>, tensor<1x5x2x8xf32>, tensor<1x5x2x8xf32>, tensor<1x2x5xf32>, tensor<1x5x2x8xf32>
  return
}

// -----

// Packed q, k, v lie on axis -3, which must have 3 entries.
func.func @attention_packed_not_three(%qkv: tensor<1x5x2x2x8xf32>) {
  // expected-error @+1 {{attention_packed qkv must be a ranked tensor [..., T, 3, H, Dh] (q, k, v on axis -3), got [1, 5, 2, 2, 8]}}
  %0, %1 = ds.attention_packed %qkv {scale = 1.0 : f32} : tensor<1x5x2x2x8xf32>
  return
}

// -----

func.func @attention_packed_rank(%qkv: tensor<5x3x8xf32>) {
  // expected-error @+1 {{attention_packed qkv must be a ranked tensor [..., T, 3, H, Dh] (q, k, v on axis -3), got [5, 3, 8]}}
  %0, %1 = ds.attention_packed %qkv {scale = 1.0 : f32} : tensor<5x3x8xf32>
  return
}

// -----

// The packed gradient's result and result gradient are [..., T, H, Dh].
func.func @attention_packed_grad_result(%qkv: tensor<1x5x3x2x8xf32>, %o: tensor<1x5x2x8xf32>, %lse: tensor<1x5x2xf32>, %do: tensor<1x5x3x2x8xf32>) {
  // expected-error @+1 {{attention_packed_grad result gradient must have type [1, 5, 2, 8] (qkv's without axis -3)}}
  %0 = ds.attention_packed_grad %qkv, %o, %lse, %do {scale = 1.0 : f32} : tensor<1x5x3x2x8xf32>, tensor<1x5x2x8xf32>, tensor<1x5x2xf32>, tensor<1x5x3x2x8xf32>
  return
}

// -----

func.func @attention_packed_grad_lse(%qkv: tensor<1x5x3x2x8xf32>, %o: tensor<1x5x2x8xf32>, %lse: tensor<1x2x5xf32>) {
  // expected-error @+1 {{attention_packed_grad lse must have the result's shape without its last axis}}
  %0 = ds.attention_packed_grad %qkv, %o, %lse, %o {scale = 1.0 : f32} : tensor<1x5x3x2x8xf32>, tensor<1x5x2x8xf32>, tensor<1x2x5xf32>, tensor<1x5x2x8xf32>
  return
}
