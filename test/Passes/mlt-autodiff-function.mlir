// RUN: mlt-opt %s -mlt-autodiff="function=loss microbatches=3" | FileCheck %s

// Tests that the `function` option names the function to differentiate (the
// result is still @micro_step, and @forward is ignored), and that a float64
// loss is seeded with 1/microbatches in float64.
// CHECK-LABEL: func.func @forward
// CHECK-NEXT: return
// CHECK-LABEL: func.func @loss
// CHECK-NOT: _grad
// CHECK: return
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: (%[[X:[^ ,:]+]]: tensor<2x4x8xf64>, %[[LABELS:[^ ,:]+]]: tensor<2x4xi32>) -> tensor<f64>
// CHECK-SAME: attributes {mlt.microbatches = 3 : i64}
// CHECK: %[[SEED:[^ ,:]+]] = arith.constant {mlt.loss_seed} dense<0.33333333333333331> : tensor<f64>
// CHECK: mlt.cross_entropy_grad %[[SEED]], %[[X]], %[[LABELS]] : tensor<f64>, tensor<2x4x8xf64>, tensor<2x4xi32>
func.func @forward() {
  return
}
func.func @loss(%x: tensor<2x4x8xf64>, %labels: tensor<2x4xi32>) -> tensor<f64> {
  %loss = mlt.cross_entropy %x, %labels : tensor<2x4x8xf64>, tensor<2x4xi32>
  return %loss : tensor<f64>
}
