// What may read which memory space (ds::verifyExecutionSpace and
// ds-plan-memory): transfers copy between two spaces, only optimizer
// updates run on the host and they read only host memory, nothing runs in
// the file space, and an update of a persistent argument is computed in
// that argument's space.
// RUN: dsopt-opt %s -split-input-file --pass-pipeline='builtin.module(ds-plan-memory)' -verify-diagnostics

func.func @same(%x: tensor<4xf32> {ds.input = "x"}) -> (tensor<4xf32> {ds.output = "y"}) {
  // expected-error @below {{'ds.transfer' op copies from host memory to the same space}}
  %y = ds.transfer %x {from = #ds.space<host>, to = #ds.space<host>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @device_file(%x: tensor<4xf32> {ds.input = "x"}) -> (tensor<4xf32> {ds.output = "y"}) {
  // expected-error @below {{'ds.transfer' op copies between device and file memory; the file space is read and written only through host memory}}
  %y = ds.transfer %x {from = #ds.space<device>, to = #ds.space<file>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @not_an_update(%x: tensor<4xf32> {ds.input = "x"}) -> (tensor<4xf32> {ds.output = "y"}) {
  // expected-error @below {{'ds.neg' op cannot run in host memory: only an optimizer update (the host optimizer) and the 16-bit copy of its updated parameter run on the host, and nothing runs in the file space}}
  %y = ds.neg %x {ds.space = #ds.space<host>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @in_files(%lr: tensor<f32>, %p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'ds.lion' op cannot run in file memory}}
  %0:2 = ds.lion %lr, %p, %g, %m {ds.space = #ds.space<file>} : tensor<f32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return %0#0 : tensor<4xf32>
}

// -----

func.func @on_transfer(%x: tensor<4xf32> {ds.input = "x"}) -> (tensor<4xf32> {ds.output = "y"}) {
  // expected-error @below {{'ds.transfer' op 'ds.space' on a transfer; it copies from `from` to `to`}}
  %y = ds.transfer %x {from = #ds.space<device>, to = #ds.space<host>, ds.space = #ds.space<host>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// A host update reads its gradient from device memory.
module {
  func.func @step(%p: tensor<4xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<4xf32>>},
                  %m: tensor<4xf32> {ds.state = #ds.state<optimizer, role = "exp_avg", param = "p">, ds.space = #ds.space<host>},
                  %g: tensor<4xf32> {ds.input = "g"}, %lr: tensor<f32> {ds.input = "lr"})
      -> (tensor<4xf32> {ds.output = "p2"}) {
    %lrh = ds.transfer %lr {from = #ds.space<device>, to = #ds.space<host>} : tensor<f32>
    %ph = ds.transfer %p {from = #ds.space<device>, to = #ds.space<host>} : tensor<4xf32>
    // expected-error @below {{reads operand 2 from device memory; it reads only host memory (copy it there first)}}
    %0:2 = ds.lion %lrh, %ph, %g, %m {ds.space = #ds.space<host>} : tensor<f32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
    return %0#0 : tensor<4xf32>
  }
}

// -----

// A device op reads a host update's result.
module {
  func.func @step(%p: tensor<4xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<4xf32>>},
                  %m: tensor<4xf32> {ds.state = #ds.state<optimizer, role = "exp_avg", param = "p">, ds.space = #ds.space<host>},
                  %g: tensor<4xf32> {ds.input = "g"}, %lr: tensor<f32> {ds.input = "lr"})
      -> (tensor<4xf32> {ds.output = "y"}) {
    %lrh = ds.transfer %lr {from = #ds.space<device>, to = #ds.space<host>} : tensor<f32>
    %ph = ds.transfer %p {from = #ds.space<device>, to = #ds.space<host>} : tensor<4xf32>
    %gh = ds.transfer %g {from = #ds.space<device>, to = #ds.space<host>} : tensor<4xf32>
    %0:2 = ds.lion %lrh, %ph, %gh, %m {ds.space = #ds.space<host>} : tensor<f32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
    // expected-error @below {{reads operand 0 from host memory; a kernel reads only device memory (copy it to the device first)}}
    %y = ds.neg %0#0 : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// A host result updates a device parameter without a transfer back.
module {
  // expected-error @below {{result 0 updates argument 0 in device memory, but it is computed in host memory (copy the update there with a ds.transfer)}}
  func.func @step(%p: tensor<4xf32> {ds.param = #ds.param<name = "p", trainable = true, data = dense<1.0> : tensor<4xf32>>},
                  %m: tensor<4xf32> {ds.state = #ds.state<optimizer, role = "exp_avg", param = "p">, ds.space = #ds.space<host>},
                  %g: tensor<4xf32> {ds.input = "g"}, %lr: tensor<f32> {ds.input = "lr"})
      -> (tensor<4xf32> {ds.updates = 0 : i64}, tensor<4xf32> {ds.updates = 1 : i64}) {
    %lrh = ds.transfer %lr {from = #ds.space<device>, to = #ds.space<host>} : tensor<f32>
    %ph = ds.transfer %p {from = #ds.space<device>, to = #ds.space<host>} : tensor<4xf32>
    %gh = ds.transfer %g {from = #ds.space<device>, to = #ds.space<host>} : tensor<4xf32>
    %0:2 = ds.lion %lrh, %ph, %gh, %m {ds.space = #ds.space<host>} : tensor<f32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
    return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
  }
}

