// ds-precision: layer norm, its gradient and the bias gradients' sums read
// and write 16 bits with f32 statistics and sums (docs/passes.md): no cast
// before or after them. The saved mean and inverse standard deviation stay
// f32; the sums over all rows (the layer norm's scale and bias gradients,
// reduce_sum's bias gradient) are written in the accumulator's type: bf16
// under bf16 accumulation, f32 (unrounded) under fp32 accumulation.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-precision,canonicalize)' | FileCheck %s --check-prefix=BF16
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-precision{dtype=bf16 grad-accum-dtype=fp32},canonicalize)' | FileCheck %s --check-prefix=FP32ACC
// The printed f32 sums parse back.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer,ds-precision{dtype=bf16 grad-accum-dtype=fp32},canonicalize)' | dsopt-opt | FileCheck %s --check-prefix=FP32ACC
// Only a 16-bit type widens to f32, and only the sums.
// RUN: not dsopt-opt --split-input-file %S/Inputs/precision-rows-bad.mlir 2>&1 | FileCheck %s --check-prefix=BAD

// BF16-LABEL: func.func @micro_step
// Only the f32 input is cast (for the matmul).
// BF16: ds.cast %arg0 : tensor<8x16xf32> to tensor<8x16xbf16>
// BF16-NOT: ds.cast
// BF16: %result, %mean, %inv_std_dev = ds.layer_norm %{{.*}}, %arg4, %arg5 {{.*}}: tensor<8x16xbf16>, tensor<16xbf16>, tensor<16xbf16>
// BF16-NEXT: ds.softmax_cross_entropy %result
// BF16: %input_grad, %scale_grad, %bias_grad = ds.layer_norm_grad %{{.*}}, %arg4, %mean, %inv_std_dev, %{{.*}} : tensor<8x16xbf16>, tensor<16xbf16>, tensor<8x1xf32>, tensor<8x1xf32>, tensor<8x16xbf16>{{$}}
// BF16-NEXT: %[[DB:.*]] = ds.reduce_sum %input_grad {{.*}} : tensor<8x16xbf16>{{$}}
// BF16-NOT: ds.cast
// BF16: return %loss, %{{.*}}, %[[DB]], %scale_grad, %bias_grad : tensor<f32>, tensor<16x16xbf16>, tensor<16xbf16>, tensor<16xbf16>, tensor<16xbf16>

// FP32ACC-LABEL: func.func @micro_step
// FP32ACC: ds.cast %arg0 : tensor<8x16xf32> to tensor<8x16xbf16>
// FP32ACC-NOT: ds.cast
// FP32ACC: %result, %mean, %inv_std_dev = ds.layer_norm %{{.*}} : tensor<8x16xbf16>, tensor<16xbf16>, tensor<16xbf16>
// FP32ACC: %input_grad, %scale_grad, %bias_grad = ds.layer_norm_grad {{.*}} : tensor<8x16xbf16>, tensor<16xbf16>, tensor<8x1xf32>, tensor<8x1xf32>, tensor<8x16xbf16> -> tensor<8x16xbf16>, tensor<16xf32>, tensor<16xf32>
// FP32ACC-NEXT: %[[DB:.*]] = ds.reduce_sum %input_grad {{.*}} : tensor<8x16xbf16> -> tensor<16xf32>
// The weight gradient's matmul writes bf16: only it is widened.
// FP32ACC: ds.cast %{{.*}} : tensor<16x16xbf16> to tensor<16x16xf32>
// FP32ACC-NOT: ds.cast
// FP32ACC: return %loss, %{{.*}}, %[[DB]], %scale_grad, %bias_grad : tensor<f32>, tensor<16x16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>

// BAD: result type 'tensor<4xf16>' is neither 'tensor<4xbf16>' nor its f32 widening
// BAD: result type 'tensor<4xf64>' is neither 'tensor<4xf32>' nor its f32 widening
// BAD: 'ds.layer_norm_grad' op inferred type(s) 'tensor<2x4xbf16>', 'tensor<4xbf16>', 'tensor<4xbf16>' are incompatible with return type(s) of operation 'tensor<2x4xf32>'

func.func @main(%x: tensor<8x16xf32> {ds.input = "x"}, %y: tensor<8xi64> {ds.input = "y"},
                %w: tensor<16x16xf32> {ds.param = #ds.param<name = "fc.weight", trainable = true, data = dense<0.5> : tensor<16x16xf32>>},
                %b: tensor<16xf32> {ds.param = #ds.param<name = "fc.bias", trainable = true, data = dense<0.25> : tensor<16xf32>>},
                %s: tensor<16xf32> {ds.param = #ds.param<name = "ln.weight", trainable = true, data = dense<1.0> : tensor<16xf32>>},
                %c: tensor<16xf32> {ds.param = #ds.param<name = "ln.bias", trainable = true, data = dense<0.0> : tensor<16xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.matmul %x, %w : tensor<8x16xf32>, tensor<16x16xf32>
  %1 = ds.add %0, %b : tensor<8x16xf32>, tensor<16xf32>
  %2:3 = ds.layer_norm %1, %s, %c {axis = 1} : tensor<8x16xf32>, tensor<16xf32>, tensor<16xf32>
  %3:2 = ds.softmax_cross_entropy %2#0, %y {ignore_index = -100} : tensor<8x16xf32>, tensor<8xi64>
  return %3#0 : tensor<f32>
}
