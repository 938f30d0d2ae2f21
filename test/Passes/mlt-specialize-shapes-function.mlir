// RUN: mlt-opt %s -mlt-specialize-shapes="batch=2 seq-len=8 function=loss" | FileCheck %s

// Tests that the `function` option picks the function to specialize, leaving
// @forward as it is.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%{{[^ ,:]+}}: tensor<?x?xi32>)
// CHECK-LABEL: func.func @loss
// CHECK-SAME: (%[[T:[^ ,:]+]]: tensor<2x8xi32>, %{{[^ ,:]+}}: tensor<16x8xf32>) -> tensor<2x8x8xf32>
// CHECK: mlt.embedding %[[T]], %{{[^ ,:]+}} : tensor<2x8xi32>, tensor<16x8xf32>
func.func @forward(%tokens: tensor<?x?xi32>) {
  return
}
func.func @loss(%tokens: tensor<?x?xi32>, %table: tensor<16x8xf32>) -> tensor<?x?x8xf32> {
  %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<16x8xf32>
  return %h : tensor<?x?x8xf32>
}
