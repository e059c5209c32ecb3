// ds-precision: trainable parameters become bf16 working copies with fp32
// master weights among the optimizer's states; each op computes where its
// compute-precision trait says; accumulators hold grad-accum-dtype; frozen
// parameters, float inputs and integers keep their types; cast pairs that
// cancel fold away.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff{frozen=frozen},canonicalize,cse,ds-optimizer{accumulation=2 clip=1.0},ds-precision,canonicalize)' | FileCheck %s --check-prefix=BF16
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff{frozen=frozen},canonicalize,cse,ds-optimizer,ds-precision{dtype=fp16 grad-accum-dtype=fp32},canonicalize)' | FileCheck %s --check-prefix=FP32ACC
// The registered training pipeline runs it after ds-optimizer.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-train{precision=bf16 frozen=frozen fuse=false})' | FileCheck %s --check-prefix=TRAIN
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,ds-optimizer,ds-precision{dtype=fp8})' 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,ds-optimizer,ds-precision{grad-accum-dtype=fp16})' 2>&1 | FileCheck %s --check-prefix=ACCUM
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-precision)' 2>&1 | FileCheck %s --check-prefix=NOSTEP
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,ds-optimizer,ds-precision,ds-precision)' 2>&1 | FileCheck %s --check-prefix=TWICE

// BF16: precision = "bf16"
// BF16-LABEL: func.func @micro_step
// The input stays f32 (cast where read), the frozen parameter too; the
// trained ones are bf16, their initial values the model's f32 ones.
// BF16-SAME: %arg0: tensor<4x6xf32> {ds.input = "x"}
// BF16-SAME: %arg2: tensor<6x6xbf16> {ds.param = #ds.param<name = "fc.weight", trainable = true, data = dense<5.000000e-01> : tensor<6x6xf32>>}
// BF16-SAME: %arg3: tensor<6xf32> {ds.param = #ds.param<name = "frozen", trainable = false
// BF16-SAME: %arg4: tensor<6xbf16> {ds.param = #ds.param<name = "ln.weight"
// BF16-SAME: %arg6: tensor<6x6xbf16> {ds.state = #ds.state<accumulator, param = "fc.weight">}
// The loss is f32; accumulators bf16.
// BF16-SAME: -> (tensor<f32> {ds.output = "loss"}, tensor<6x6xbf16> {ds.updates = 6 : i64}
// BF16-DAG: %[[FROZEN:.*]] = ds.cast %arg3 : tensor<6xf32> to tensor<6xbf16>
// BF16-DAG: %[[X:.*]] = ds.cast %arg0 : tensor<4x6xf32> to tensor<4x6xbf16>
// Constants are cast at compile time (the cast folds into the constant).
// BF16-DAG: ds.constant dense<{{.*}}> : tensor<bf16>
// The matmul takes bf16 (and accumulates in f32 inside its kernel).
// BF16: %[[MM:.*]] = ds.matmul %[[X]], %arg2 {{.*}}: tensor<4x6xbf16>, tensor<6x6xbf16>
// BF16: %[[ADD:.*]] = ds.add %[[MM]], %[[FROZEN]] {{.*}}: tensor<4x6xbf16>, tensor<6xbf16>
// BF16: %[[GELU:.*]] = ds.gelu %[[ADD]] {{.*}}: tensor<4x6xbf16>
// Layer norm reads and writes bf16 (f32 statistics inside its kernel): no
// cast around it; its saved statistics stay f32.
// BF16-NOT: ds.cast
// BF16: %result, %mean, %inv_std_dev = ds.layer_norm %[[GELU]], %arg4, %arg5 {{.*}}: tensor<4x6xbf16>, tensor<6xbf16>, tensor<6xbf16>
// The loss reads the 16-bit scores (Ds_Loss16) the layer norm wrote; the
// loss is f32, the saved log-probabilities bf16.
// BF16-NEXT: %loss, %log_prob = ds.softmax_cross_entropy %result, %arg1 {{.*}}: tensor<4x6xbf16>, tensor<4xi64>
// Its gradient reads the bf16 log-probabilities and the f32 loss gradient
// and writes a bf16 scores gradient.
// BF16: %[[DSC:.*]] = ds.softmax_cross_entropy_grad %{{.*}}, %log_prob, %arg1 {{.*}}: tensor<f32>, tensor<4x6xbf16>, tensor<4xi64>
// The backward reads the bf16 activation, the f32 statistics and the bf16
// gradient as they are; the scale and bias sums go into the bf16
// accumulators as bf16.
// BF16-NOT: ds.cast
// BF16: %input_grad, %scale_grad, %bias_grad = ds.layer_norm_grad %[[GELU]], %arg4, %mean, %inv_std_dev, %[[DSC]] {{.*}}: tensor<4x6xbf16>, tensor<6xbf16>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x6xbf16>{{$}}
// BF16-NOT: ds.cast
// BF16: ds.add %arg{{[78]}}, %{{.*}} : tensor<6xbf16>, tensor<6xbf16>
// BF16: %[[DW:.*]] = ds.matmul %[[X]], %{{.*}} {{{.*}}transpose_lhs} : tensor<4x6xbf16>, tensor<4x6xbf16>
// BF16: %[[ACC:.*]] = ds.add %arg6, %[[DW]] : tensor<6x6xbf16>, tensor<6x6xbf16>
// BF16: return %loss, %[[ACC]]
// BF16-LABEL: func.func @optimizer_step
// BF16-SAME: %arg0: tensor<6x6xbf16> {ds.param = #ds.param<name = "fc.weight"
// BF16-SAME: %arg3: tensor<6x6xbf16> {ds.state = #ds.state<accumulator, param = "fc.weight">}
// BF16-SAME: %arg6: tensor<6x6xf32> {ds.state = #ds.state<optimizer, role = "exp_avg", param = "fc.weight">}
// The master weights: fp32 optimizer states, after the optimizer's own.
// BF16-SAME: %arg12: tensor<6x6xf32> {ds.state = #ds.state<optimizer, role = "master", param = "fc.weight">}
// BF16-SAME: %arg13: tensor<6xf32> {ds.state = #ds.state<optimizer, role = "master", param = "ln.weight">}
// BF16-SAME: %arg14: tensor<6xf32> {ds.state = #ds.state<optimizer, role = "master", param = "ln.bias">}
// BF16-SAME: %arg15: tensor<f32> {ds.input = "lr"}
// BF16-SAME: tensor<6x6xbf16> {ds.updates = 0 : i64}
// BF16-SAME: tensor<6x6xbf16> {ds.updates = 3 : i64}
// BF16-SAME: tensor<6x6xf32> {ds.updates = 12 : i64}
// The norm sums the bf16 accumulators' squares as they are (in double);
// the update reads each as it is too, converting and scaling an element at
// a time (the clipping coefficient and 1/k are its grad_scale): no f32
// copy of a gradient, no scaled copy.
// BF16: ds.sum_of_squares %arg3, %arg4, %arg5 : tensor<6x6xbf16>, tensor<6xbf16>, tensor<6xbf16>
// BF16: %[[SCALE:.*]] = ds.mul %{{.*}}, %{{.*}} : tensor<f32>, tensor<f32>
// BF16-NOT: ds.cast %arg3
// BF16-NOT: : tensor<6x6xf32>, tensor<f32>
// The optimizer updates the master, then the working copy is refreshed.
// BF16: %param_out, %first_moment_out, %second_moment_out = ds.adamw %arg15, %arg16, %arg12, %arg3, %arg6, %arg9, %[[SCALE]] {{.*}}: tensor<f32>, tensor<i64>, tensor<6x6xf32>, tensor<6x6xbf16>, tensor<6x6xf32>, tensor<6x6xf32>, tensor<f32>
// BF16: %[[RESET:.*]] = ds.fill {value = 0.000000e+00 : f64} : tensor<6x6xbf16>
// BF16: %[[WORK:.*]] = ds.cast %param_out : tensor<6x6xf32> to tensor<6x6xbf16>
// BF16: return %{{.*}}, %[[WORK]], %first_moment_out, %second_moment_out, {{.*}}, %[[RESET]], {{.*}}, %param_out,

// fp16 with fp32 accumulation: gradients are added into f32 accumulators
// in f32; the optimizer step reads them as they are.
// FP32ACC: precision = "fp16"
// FP32ACC-LABEL: func.func @micro_step
// FP32ACC-SAME: %arg2: tensor<6x6xf16>
// FP32ACC-SAME: %arg6: tensor<6x6xf32> {ds.state = #ds.state<accumulator, param = "fc.weight">}
// The layer norm's weight gradient goes into its f32 accumulator as it is:
// the kernel writes the sums over the rows in f32 from fp16 rows.
// FP32ACC: %input_grad, %scale_grad, %bias_grad = ds.layer_norm_grad {{.*}} : tensor<4x6xf16>, tensor<6xf16>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x6xf16> -> tensor<4x6xf16>, tensor<6xf32>, tensor<6xf32>
// FP32ACC-NOT: ds.cast %scale_grad
// FP32ACC: %[[DW:.*]] = ds.matmul {{.*}} : tensor<4x6xf16>, tensor<4x6xf16>
// FP32ACC: %[[WIDE:.*]] = ds.cast %[[DW]] : tensor<6x6xf16> to tensor<6x6xf32>
// FP32ACC: return %loss, %[[WIDE]], %scale_grad, %bias_grad
// FP32ACC-LABEL: func.func @optimizer_step
// FP32ACC-NOT: ds.cast %arg3
// FP32ACC: ds.sum_of_squares %arg3, %arg4, %arg5 : tensor<6x6xf32>

// TRAIN-LABEL: func.func @micro_step
// TRAIN-SAME: tensor<6x6xbf16>
// TRAIN-LABEL: func.func @optimizer_step
// TRAIN-SAME: role = "master"

// DTYPE: error: ds-precision: dtype must be bf16 or fp16, got 'fp8'
// ACCUM: error: ds-precision: grad-accum-dtype must be fp32 or bf16 (the training dtype), got 'fp16'
// NOSTEP: error: ds-precision: no @micro_step and @optimizer_step; run ds-optimizer first
// TWICE: error: ds-precision: the step already has master weights (the pass ran before)

func.func @main(%x: tensor<4x6xf32> {ds.input = "x"}, %y: tensor<4xi64> {ds.input = "y"},
                %w: tensor<6x6xf32> {ds.param = #ds.param<name = "fc.weight", trainable = true, data = dense<0.5> : tensor<6x6xf32>>},
                %f: tensor<6xf32> {ds.param = #ds.param<name = "frozen", trainable = true, data = dense<0.25> : tensor<6xf32>>},
                %s: tensor<6xf32> {ds.param = #ds.param<name = "ln.weight", trainable = true, data = dense<1.0> : tensor<6xf32>>},
                %b: tensor<6xf32> {ds.param = #ds.param<name = "ln.bias", trainable = true, data = dense<0.0> : tensor<6xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.matmul %x, %w : tensor<4x6xf32>, tensor<6x6xf32>
  %1 = ds.add %0, %f : tensor<4x6xf32>, tensor<6xf32>
  %2 = ds.gelu %1 : tensor<4x6xf32>
  %3:3 = ds.layer_norm %2, %s, %b {axis = 1} : tensor<4x6xf32>, tensor<6xf32>, tensor<6xf32>
  %4:2 = ds.softmax_cross_entropy %3#0, %y {ignore_index = -100} : tensor<4x6xf32>, tensor<4xi64>
  return %4#0 : tensor<f32>
}
