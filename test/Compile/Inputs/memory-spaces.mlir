// A forward program with a parameter in each memory space: `w` on the
// device (read by the kernel), `h` in pinned host memory and `f` in the
// file-backed arena (read by no kernel: offload transfers are what move
// such values to the device).
module {
  func.func @main(%x: tensor<4xf32> {ds.input = "x"},
                  %w: tensor<4xf32> {ds.param = #ds.param<name = "w", trainable = false, data = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>>},
                  %h: tensor<24xf32> {ds.param = #ds.param<name = "h", trainable = false, data = dense<5.0> : tensor<24xf32>>, ds.space = #ds.space<host>},
                  %f: tensor<40xf32> {ds.param = #ds.param<name = "f", trainable = false, data = dense<6.0> : tensor<40xf32>>, ds.space = #ds.space<file>})
      -> (tensor<4xf32> {ds.output = "y"}) {
    %y = ds.add %x, %w : tensor<4xf32>, tensor<4xf32>
    return %y : tensor<4xf32>
  }
}
