// ds-optimizer builds the training step from the gradient function: the
// micro step accumulates into persistent gradients, the optimizer step clips
// and updates every parameter and state in place (ds.updates).
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{optimizer=sgd momentum=0.9 nesterov=true weight-decay=0.0})' | FileCheck %s --check-prefix=SGD
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{accumulation=3 clip=1.0})' | FileCheck %s --check-prefix=ADAMW
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{optimizer=lion beta2=0.98})' | FileCheck %s --check-prefix=LION
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,canonicalize,cse,ds-optimizer{optimizer=adam})' | FileCheck %s --check-prefix=ADAM
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-autodiff,ds-optimizer{optimizer=adagrad})' 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-optimizer)' 2>&1 | FileCheck %s --check-prefix=NOGRAD

// One micro-batch per step: gradients go straight into the accumulators.
// SGD: ds.train = {accumulation = 1 : i64, {{.*}}momentum = 9.000000e-01 : f64, nesterov = true, optimizer = "SGD"
// SGD-LABEL: func.func @micro_step
// SGD-SAME: %arg3: tensor<3x2xf32> {ds.state = #ds.state<accumulator, param = "w">}, %arg4: tensor<2xf32> {ds.state = #ds.state<accumulator, param = "b">}
// SGD-SAME: -> (tensor<f32> {ds.output = "loss"}, tensor<3x2xf32> {ds.updates = 3 : i64}, tensor<2xf32> {ds.updates = 4 : i64})
// SGD-NOT: ds.add %arg3
// SGD-LABEL: func.func @optimizer_step
// SGD-SAME: {ds.state = #ds.state<optimizer, role = "momentum_buffer", param = "w">}
// SGD-SAME: %arg6: tensor<f32> {ds.input = "lr"}, %arg7: tensor<i64> {ds.input = "step"}
// SGD-SAME: tensor<f32> {ds.output = "grad_norm"}, tensor<3x2xf32> {ds.updates = 0 : i64}, tensor<3x2xf32> {ds.updates = 4 : i64}
// SGD: %[[SQ:.*]] = ds.sum_of_squares %arg2, %arg3
// SGD: %[[NORM:.*]] = ds.sqrt %[[SQ]]
// SGD: ds.sgd %arg6, %arg7, %arg0, %arg2, %arg4 {momentum = 0.899999976 : f32, nesterov}
// SGD: ds.sgd %arg6, %arg7, %arg1, %arg3, %arg5
// SGD: return %[[NORM]]

// Accumulation over 3 micro-batches, clipping at 1.
// ADAMW-LABEL: func.func @micro_step
// ADAMW: %[[DB:.*]] = ds.reduce_sum
// ADAMW-NEXT: ds.add %arg4, %[[DB]]
// ADAMW-LABEL: func.func @optimizer_step
// ADAMW-SAME: {ds.state = #ds.state<optimizer, role = "exp_avg", param = "w">}
// ADAMW-SAME: {ds.state = #ds.state<optimizer, role = "exp_avg_sq", param = "b">}
// ADAMW: %[[SQ:.*]] = ds.sum_of_squares %arg2, %arg3
// ADAMW: %[[ROOT:.*]] = ds.sqrt %[[SQ]]
// ADAMW: %[[NORM:.*]] = ds.div %[[ROOT]], %{{.*}} : tensor<f32>, tensor<f32>
// ADAMW: %[[DEN:.*]] = ds.add %[[NORM]], %{{.*}}
// ADAMW: %[[COEF:.*]] = ds.div %{{.*}}, %[[DEN]]
// ADAMW: %[[LT:.*]] = ds.compare lt, %[[COEF]]
// ADAMW: %[[CLIP:.*]] = ds.where %[[LT]], %[[COEF]]
// ADAMW: %[[SCALE:.*]] = ds.mul %[[CLIP]], %{{.*}} : tensor<f32>, tensor<f32>
// The update reads the accumulator times the scale (its grad_scale): no
// scaled copy of the gradient.
// ADAMW-NOT: ds.mul %arg2
// ADAMW: ds.adamw %arg{{[0-9]+}}, %arg{{[0-9]+}}, %arg0, %arg2, %arg4, %arg6, %[[SCALE]] {weight_decay = 0.00999999977 : f32}
// ADAMW-SAME: tensor<3x2xf32>, tensor<3x2xf32>, tensor<f32>
// ADAMW: ds.fill {value = 0.000000e+00 : f64} : tensor<3x2xf32>
// ADAMW: ds.fill {value = 0.000000e+00 : f64} : tensor<2xf32>

// LION: optimizer = "Lion"
// LION: ds.lion %arg{{[0-9]+}}, %arg0, %arg2, %arg4 {beta2 = 9.800000e-01 : f32

// ADAM: optimizer = "Adam"
// ADAM: ds.adamw {{.*}}decoupled = false

// UNKNOWN: error: unknown optimizer 'adagrad' (adamw, adam, sgd or lion)
// NOGRAD: error: no gradient function @main_grad; run ds-autodiff first

func.func @main(%x: tensor<4x3xf32> {ds.input = "x"},
                %w: tensor<3x2xf32> {ds.param = #ds.param<name = "w", trainable = true, data = dense<0.5> : tensor<3x2xf32>>},
                %b: tensor<2xf32> {ds.param = #ds.param<name = "b", trainable = true, data = dense<0.1> : tensor<2xf32>>})
    -> (tensor<f32> {ds.output = "loss"}) {
  %0 = ds.matmul %x, %w : tensor<4x3xf32>, tensor<3x2xf32>
  %1 = ds.add %0, %b : tensor<4x2xf32>, tensor<2xf32>
  %2 = ds.mul %1, %1 : tensor<4x2xf32>, tensor<4x2xf32>
  %3 = ds.reduce_mean %2 {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x2xf32>
  return %3 : tensor<f32>
}
