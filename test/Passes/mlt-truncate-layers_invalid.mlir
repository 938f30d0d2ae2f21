// RUN: not mlt-opt %s -mlt-truncate-layers="layers=0" 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not mlt-opt %s -mlt-truncate-layers="layers=3" 2>&1 | FileCheck %s --check-prefix=DEEP

// Tests that fewer than one layer, and more than the model has, are errors.
// ZERO: error: mlt-truncate-layers: layers must be at least 1, got 0
// DEEP: error: mlt-truncate-layers: the model has 2 layers, fewer than 3
module {
  mlt.param @"model.layers.{}.input_layernorm.weight" layers 2 : tensor<64xf32>
  func.func @forward(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
    %r = mlt.repeat %layer = 0 to 2 iter_args(%h = %x) -> (tensor<4x64xf32>) {
      %w = mlt.load @"model.layers.{}.input_layernorm.weight"[%layer] : tensor<64xf32>
      %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<4x64xf32>, tensor<64xf32>
      mlt.yield %n : tensor<4x64xf32>
    }
    return %r : tensor<4x64xf32>
  }
}
