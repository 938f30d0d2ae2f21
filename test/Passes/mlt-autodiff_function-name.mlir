// RUN: mlt-opt %s -mlt-autodiff -verify-diagnostics

// Tests that the diagnostic names the differentiated function.
// expected-error @+1 {{mlt-autodiff: @forward must return exactly the loss}}
func.func @forward(%x: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4x8xf32>) {
  %loss = mlt.cross_entropy %x, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
  return %loss, %x : tensor<f32>, tensor<2x4x8xf32>
}
