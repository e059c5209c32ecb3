// ds-fuse-matmul-epilogue: the backward's residual-gradient sum
// add(g, layer_norm_grad's input gradient) becomes the layer norm
// gradient's addend (its kernel adds g to each row of dx as it writes it),
// in either operand order, when g has the input gradient's type and the
// add is the input gradient's only reader; anything else stays.
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-matmul-epilogue))' -split-input-file | FileCheck %s
// The addend form prints and parses back (six operands).
// RUN: dsopt-opt %s --pass-pipeline='builtin.module(func.func(ds-fuse-matmul-epilogue))' -split-input-file \
// RUN:   | dsopt-opt -split-input-file | FileCheck %s

// Two blocks' layer norms in bf16, as autodiff writes them: the residual
// stream's gradient first (add(g, dx)), then second (add(dx, g)), the
// second's addend the first's folded result; f32 sums of a bf16 scale stay.
// CHECK-LABEL: func.func @residual_chain
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xbf16>, %[[S:.*]]: tensor<4xbf16>, %[[M:.*]]: tensor<2x3x1xf32>, %[[I:.*]]: tensor<2x3x1xf32>, %[[DY:.*]]: tensor<2x3x4xbf16>, %[[G:.*]]: tensor<2x3x4xbf16>)
// CHECK-NEXT: %[[A:.*]], %{{.*}}, %{{.*}} = ds.layer_norm_grad %[[X]], %[[S]], %[[M]], %[[I]], %[[DY]], %[[G]] {axis = 2 : i64, ds.grad_of = 5 : i64} : tensor<2x3x4xbf16>, tensor<4xbf16>, tensor<2x3x1xf32>, tensor<2x3x1xf32>, tensor<2x3x4xbf16>, tensor<2x3x4xbf16> -> tensor<2x3x4xbf16>, tensor<4xf32>, tensor<4xf32>
// CHECK-NEXT: %[[B:.*]], %{{.*}}, %{{.*}} = ds.layer_norm_grad %[[X]], %[[S]], %[[M]], %[[I]], %[[A]], %[[A]] {axis = 2 : i64}
// CHECK-NOT: ds.add
// CHECK: return %[[B]]
func.func @residual_chain(%x: tensor<2x3x4xbf16>, %s: tensor<4xbf16>, %mean: tensor<2x3x1xf32>,
                          %inv: tensor<2x3x1xf32>, %dy: tensor<2x3x4xbf16>, %g: tensor<2x3x4xbf16>)
    -> (tensor<2x3x4xbf16>, tensor<4xf32>, tensor<4xbf16>) {
  %dx, %ds, %db = ds.layer_norm_grad %x, %s, %mean, %inv, %dy {axis = 2 : i64, ds.grad_of = 5 : i64} : tensor<2x3x4xbf16>, tensor<4xbf16>, tensor<2x3x1xf32>, tensor<2x3x1xf32>, tensor<2x3x4xbf16> -> tensor<2x3x4xbf16>, tensor<4xf32>, tensor<4xf32>
  %0 = ds.add %g, %dx : tensor<2x3x4xbf16>, tensor<2x3x4xbf16>
  %dx2, %ds2, %db2 = ds.layer_norm_grad %x, %s, %mean, %inv, %0 {axis = 2 : i64} : tensor<2x3x4xbf16>, tensor<4xbf16>, tensor<2x3x1xf32>, tensor<2x3x1xf32>, tensor<2x3x4xbf16>
  %1 = ds.add %dx2, %0 : tensor<2x3x4xbf16>, tensor<2x3x4xbf16>
  return %1, %ds, %db2 : tensor<2x3x4xbf16>, tensor<4xf32>, tensor<4xbf16>
}

// -----

// Not folding: the input gradient read elsewhere too; a broadcasting add
// (g [4] along every row); an add whose type is not the input gradient's
// (dx [3, 4] broadcast against g [2, 3, 4]); an addend made after the
// layer norm gradient runs.
// CHECK-LABEL: func.func @no_fold
// CHECK-NOT: ds.layer_norm_grad {{.*}}, {{.*}}, {{.*}}, {{.*}}, {{.*}}, {{.*}} {axis
// CHECK-COUNT-4: ds.add
// CHECK: return
func.func @no_fold(%x: tensor<3x4xf32>, %s: tensor<4xf32>, %mean: tensor<3x1xf32>,
                   %inv: tensor<3x1xf32>, %dy: tensor<3x4xf32>, %g: tensor<3x4xf32>,
                   %row: tensor<4xf32>, %big: tensor<2x3x4xf32>)
    -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<2x3x4xf32>, tensor<3x4xf32>) {
  %dx, %ds, %db = ds.layer_norm_grad %x, %s, %mean, %inv, %dy {axis = 1 : i64} : tensor<3x4xf32>, tensor<4xf32>, tensor<3x1xf32>, tensor<3x1xf32>, tensor<3x4xf32>
  %0 = ds.add %g, %dx : tensor<3x4xf32>, tensor<3x4xf32>
  %dx1, %ds1, %db1 = ds.layer_norm_grad %x, %s, %mean, %inv, %dy {axis = 1 : i64} : tensor<3x4xf32>, tensor<4xf32>, tensor<3x1xf32>, tensor<3x1xf32>, tensor<3x4xf32>
  %1 = ds.add %dx1, %row : tensor<3x4xf32>, tensor<4xf32>
  %dx2, %ds2, %db2 = ds.layer_norm_grad %x, %s, %mean, %inv, %dy {axis = 1 : i64} : tensor<3x4xf32>, tensor<4xf32>, tensor<3x1xf32>, tensor<3x1xf32>, tensor<3x4xf32>
  %2 = ds.add %big, %dx2 : tensor<2x3x4xf32>, tensor<3x4xf32>
  %dx3, %ds3, %db3 = ds.layer_norm_grad %x, %s, %mean, %inv, %dy {axis = 1 : i64} : tensor<3x4xf32>, tensor<4xf32>, tensor<3x1xf32>, tensor<3x1xf32>, tensor<3x4xf32>
  %late = ds.mul %g, %g : tensor<3x4xf32>, tensor<3x4xf32>
  %3 = ds.add %late, %dx3 : tensor<3x4xf32>, tensor<3x4xf32>
  return %0, %dx, %1, %2, %3 : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<2x3x4xf32>, tensor<3x4xf32>
}
