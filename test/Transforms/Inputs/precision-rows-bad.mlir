func.func @narrowed(%x: tensor<3x4xbf16>) -> tensor<4xf16> {
  %0 = ds.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : tensor<3x4xbf16> -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

func.func @f32_widened(%x: tensor<3x4xf32>) -> tensor<4xf64> {
  %0 = ds.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : tensor<3x4xf32> -> tensor<4xf64>
  return %0 : tensor<4xf64>
}

// -----

func.func @input_grad_widened(%x: tensor<2x4xbf16>, %g: tensor<4xbf16>, %m: tensor<2x1xf32>, %dy: tensor<2x4xbf16>) {
  %0:3 = "ds.layer_norm_grad"(%x, %g, %m, %m, %dy) {axis = 1 : i64} : (tensor<2x4xbf16>, tensor<4xbf16>, tensor<2x1xf32>, tensor<2x1xf32>, tensor<2x4xbf16>) -> (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}
