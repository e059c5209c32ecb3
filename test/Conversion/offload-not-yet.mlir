// The program of an offloaded step (host updates, transfers between memory
// spaces) is not generated yet: lowering it is an error that says so, never
// a program that reads host memory as if it were the device's.
// RUN: not dsopt-opt %s --pass-pipeline='builtin.module(ds-plan-memory,ds-lower-to-emitc)' 2>&1 | FileCheck %s
// CHECK: error: 'ds.transfer' op runs on the host or copies between memory spaces: code generation for offloaded training (ds-offload) is not implemented yet

module {
  func.func @main(%p: tensor<4xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<4xf32>>},
                  %m: tensor<4xf32> {ds.state = #ds.state<optimizer, role = "exp_avg", param = "p">, ds.space = #ds.space<host>},
                  %g: tensor<4xf32> {ds.input = "g"}, %lr: tensor<f32> {ds.input = "lr"})
      -> (tensor<4xf32> {ds.updates = 0 : i64}, tensor<4xf32> {ds.updates = 1 : i64}) {
    %lrh = ds.transfer %lr {from = #ds.space<device>, to = #ds.space<host>} : tensor<f32>
    %ph = ds.transfer %p {from = #ds.space<device>, to = #ds.space<host>} : tensor<4xf32>
    %gh = ds.transfer %g {from = #ds.space<device>, to = #ds.space<host>} : tensor<4xf32>
    %0:2 = ds.lion %lrh, %ph, %gh, %m {ds.space = #ds.space<host>} : tensor<f32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
    %1 = ds.transfer %0#0 {from = #ds.space<host>, to = #ds.space<device>} : tensor<4xf32>
    return %1, %0#1 : tensor<4xf32>, tensor<4xf32>
  }
}
