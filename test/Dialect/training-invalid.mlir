// The verifiers of the gradient and optimizer ops reject malformed ops with a
// message saying why.
// RUN: dsopt-opt %s -split-input-file -verify-diagnostics

func.func @softmax_grad_axis(%y: tensor<2x5xf32>) {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %0 = ds.softmax_grad %y, %y {axis = 2} : tensor<2x5xf32>
  return
}

// -----

func.func @gather_grad_shape(%d: tensor<2x3x4xf32>, %i: tensor<2x3xi64>) {
  // expected-error @+1 {{does not match a gather of}}
  %0 = ds.gather_grad %d, %i {axis = 0} : tensor<2x3x4xf32>, tensor<2x3xi64> -> tensor<10x5xf32>
  return
}

// -----

func.func @slice_grad_bounds(%d: tensor<2x5xf32>) {
  // expected-error @+1 {{writes out of bounds on axis 1}}
  %0 = ds.slice_grad %d {offsets = array<i64: 0, 1>, strides = array<i64: 1, 2>} : tensor<2x5xf32> -> tensor<2x9xf32>
  return
}

// -----

func.func @conv_grad_shape(%dy: tensor<2x6x4x4xf32>, %w: tensor<6x4x3x3xf32>) {
  // expected-error @+1 {{does not match the forward output shape}}
  %0 = ds.conv_grad_input %dy, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : tensor<2x6x4x4xf32>, tensor<6x4x3x3xf32> -> tensor<2x4x8x8xf32>
  return
}

// -----

func.func @nll_grad_labels(%dl: tensor<f32>, %l: tensor<3xi64>) {
  // expected-error @+1 {{must be [N, C, d...] for labels}}
  %0 = ds.nll_loss_grad %dl, %l : tensor<f32>, tensor<3xi64> -> tensor<2x5xf32>
  return
}

// -----

func.func @nll_grad_none(%dl: tensor<f32>, %l: tensor<2xi64>) {
  // expected-error @+1 {{must have the labels' shape for reduction none}}
  %0 = ds.nll_loss_grad %dl, %l {reduction = #ds<reduction none>} : tensor<f32>, tensor<2xi64> -> tensor<2x5xf32>
  return
}

// -----

func.func @adamw_state_type(%lr: tensor<f32>, %s: tensor<i64>, %p: tensor<4xf32>, %m: tensor<5xf32>) {
  // expected-error @+1 {{adamw gradient and state tensors must all have the parameter's type}}
  %0:3 = ds.adamw %lr, %s, %p, %p, %m, %p : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<5xf32>, tensor<4xf32>
  return
}

// -----

func.func @adamw_beta(%lr: tensor<f32>, %s: tensor<i64>, %p: tensor<4xf32>) {
  // expected-error @+1 {{beta2 1.000000e+00 must be in [0, 1)}}
  %0:3 = ds.adamw %lr, %s, %p, %p, %p, %p {beta2 = 1.0 : f32} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @sgd_nesterov(%lr: tensor<f32>, %s: tensor<i64>, %p: tensor<4xf32>) {
  // expected-error @+1 {{Nesterov momentum needs a momentum and zero dampening}}
  %0:2 = ds.sgd %lr, %s, %p, %p, %p {nesterov} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @lr_not_scalar(%lr: tensor<2xf32>, %p: tensor<4xf32>) {
  // expected-error @+1 {{lion lr and step must be scalars}}
  %0:2 = ds.lion %lr, %p, %p, %p : tensor<2xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

// expected-error @+1 {{'ds.updates' must be the index of an argument}}
func.func @updates_out_of_range(%p: tensor<4xf32>) -> (tensor<4xf32> {ds.updates = 3 : i64}) {
  return %p : tensor<4xf32>
}

// -----

// expected-error @+1 {{result 0 updates argument 0 of a different type}}
func.func @updates_type(%p: tensor<4xf32>) -> (tensor<5xf32> {ds.updates = 0 : i64}) {
  %0 = ds.fill {value = 0.0} : tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

// expected-error @+1 {{'ds.state' must be a #ds.state attribute}}
func.func @state_not_typed(%p: tensor<4xf32> {ds.state = "grad:p"}) {
  return
}

// -----

func.func @adamw_multi_counts(%lr: tensor<f32>, %s: tensor<i64>, %p: tensor<4xf32>) {
  // expected-error @+1 {{needs 4n tensors (params, grads, first and second moments) and an optional grad_scale, and 3n results (4n with the 16-bit copies of the params) for n > 0 tensors, got 7 tensors and 6 results}}
  %0:6 = ds.adamw_multi %lr, %s, %p, %p, %p, %p, %p, %p, %p : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @adamw_multi_param_types(%lr: tensor<f32>, %s: tensor<i64>, %p: tensor<4xf32>, %h: tensor<4xbf16>) {
  // expected-error @+1 {{tensor 1: every param must have one float type and every grad one float type}}
  %0:6 = ds.adamw_multi %lr, %s, %p, %h, %p, %p, %p, %h, %p, %h : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xbf16> -> tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xbf16>
  return
}

// -----

func.func @adamw_copy_type(%lr: tensor<f32>, %s: tensor<i64>, %p: tensor<4xf32>) {
  // expected-error @+1 {{adamw copy_type must be bf16 or f16, for an f32 param (the 16-bit copy of the updated param)}}
  %0:4 = ds.adamw %lr, %s, %p, %p, %p, %p {copy_type = f32} : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @adamw_multi_copy_type(%lr: tensor<f32>, %s: tensor<i64>, %p: tensor<4xf32>, %h: tensor<2xbf16>) {
  // expected-error @+1 {{tensor 0: the copy 'tensor<2xbf16>' is not a bf16 or f16 copy of the f32 param 'tensor<4xf32>'}}
  %0:4 = ds.adamw_multi %lr, %s, %p, %p, %p, %p : tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2xbf16>
  return
}

// -----

func.func @layer_norm_grad_addend(%x: tensor<2x3x4xf32>, %s: tensor<4xf32>,
                                  %m: tensor<2x3x1xf32>, %a: tensor<3x4xf32>) {
  // expected-error @+1 {{layer_norm_grad addend must have the input's type}}
  %0:3 = ds.layer_norm_grad %x, %s, %m, %m, %x, %a {axis = 2} : tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>, tensor<2x3x4xf32>, tensor<3x4xf32>
  return
}

// -----

func.func @layer_norm_grad_addend_type(%x: tensor<2x3x4xbf16>, %s: tensor<4xbf16>,
                                       %m: tensor<2x3x1xf32>, %a: tensor<2x3x4xf32>) {
  // expected-error @+1 {{layer_norm_grad addend must have the input's type}}
  %0:3 = ds.layer_norm_grad %x, %s, %m, %m, %x, %a {axis = 2} : tensor<2x3x4xbf16>, tensor<4xbf16>, tensor<2x3x1xf32>, tensor<2x3x1xf32>, tensor<2x3x4xbf16>, tensor<2x3x4xf32>
  return
}
