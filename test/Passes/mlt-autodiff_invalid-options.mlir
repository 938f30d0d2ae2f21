// RUN: mlt-opt %s -mlt-autodiff="microbatches=0" -verify-diagnostics
// RUN: mlt-opt %s -mlt-autodiff="microbatches=-2" -verify-diagnostics

// Tests that a number of micro-batches that is not positive is an error. The
// count the message prints is checked in pass-option-values.mlir (expected
// to fail until the message prints it).
// expected-error @+1 {{mlt-autodiff: microbatches must be positive, got}}
module {
  func.func @forward(%x: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
    %loss = mlt.cross_entropy %x, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
}
