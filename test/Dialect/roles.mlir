// Value roles round-trip: a training state's kind, optimizer role and
// parameter (#ds.state), and the role of a pipeline stage function's
// arguments and results (#ds.role) beside their ids.
// RUN: dsopt-opt %s | dsopt-opt | FileCheck %s

// CHECK-LABEL: func.func @states(
// CHECK-SAME: %arg0: tensor<4xf32> {ds.state = #ds.state<accumulator, param = "fc.weight">}
// CHECK-SAME: %arg1: tensor<4xf32> {ds.state = #ds.state<optimizer, role = "exp_avg", param = "fc.weight">}
// CHECK-SAME: %arg2: tensor<4xf32> {ds.state = #ds.state<optimizer, role = "momentum_buffer", param = "a:b">}
func.func @states(%acc: tensor<4xf32> {ds.state = #ds.state<accumulator, param = "fc.weight">},
                  %m: tensor<4xf32> {ds.state = #ds.state<optimizer, role = "exp_avg", param = "fc.weight">},
                  %v: tensor<4xf32> {ds.state = #ds.state<optimizer, role = "momentum_buffer", param = "a:b">}) {
  return
}

// CHECK-LABEL: func.func @stage(
// CHECK-SAME: %arg0: tensor<2xf32> {ds.input = "v1_0", ds.role = #ds.role<recv>}
// CHECK-SAME: %arg1: tensor<2xf32> {ds.input = "v2_0", ds.role = #ds.role<stash>}
// CHECK-SAME: %arg2: tensor<2xf32> {ds.input = "v3_0", ds.role = #ds.role<wstash>}
// CHECK-SAME: -> (tensor<2xf32> {ds.output = "v4_0", ds.role = #ds.role<send>}, tensor<2xf32> {ds.output = "v1_0", ds.role = #ds.role<stash>}, tensor<2xf32> {ds.output = "v5_0", ds.role = #ds.role<wstash>}, tensor<2xf32> {ds.output = "loss"})
func.func @stage(%r: tensor<2xf32> {ds.input = "v1_0", ds.role = #ds.role<recv>},
                 %s: tensor<2xf32> {ds.input = "v2_0", ds.role = #ds.role<stash>},
                 %w: tensor<2xf32> {ds.input = "v3_0", ds.role = #ds.role<wstash>})
    -> (tensor<2xf32> {ds.output = "v4_0", ds.role = #ds.role<send>},
        tensor<2xf32> {ds.output = "v1_0", ds.role = #ds.role<stash>},
        tensor<2xf32> {ds.output = "v5_0", ds.role = #ds.role<wstash>},
        tensor<2xf32> {ds.output = "loss"}) {
  return %r, %r, %s, %w : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
}
