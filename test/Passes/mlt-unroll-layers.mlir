// RUN: mlt-opt %s -split-input-file -mlt-unroll-layers | FileCheck %s

// Tests that a two-layer repeat becomes two copies of its body, threading the
// carried value and tagging each copy with its layer.
module {
  mlt.param @"model.layers.{}.input_layernorm.weight" layers 2 : tensor<64xf32>
  // CHECK-LABEL: func.func @two_layers
  // CHECK-SAME: (%[[X:[^:]+]]: tensor<?x?x64xf32>)
  func.func @two_layers(%x: tensor<?x?x64xf32>) -> tensor<?x?x64xf32> {
    // CHECK-NOT: mlt.repeat
    // CHECK: %[[C0:.+]] = arith.constant 0 : index
    // CHECK: %[[W0:.+]] = mlt.load @"model.layers.{}.input_layernorm.weight"[%[[C0]]] {mlt.layer = 0 : i64}
    // CHECK: %[[N0:.+]] = mlt.rms_norm %[[X]], %[[W0]] eps = 1.000000e-05 {mlt.layer = 0 : i64}
    // CHECK: %[[C1:.+]] = arith.constant 1 : index
    // CHECK: %[[W1:.+]] = mlt.load @"model.layers.{}.input_layernorm.weight"[%[[C1]]] {mlt.layer = 1 : i64}
    // CHECK: %[[N1:.+]] = mlt.rms_norm %[[N0]], %[[W1]] eps = 1.000000e-05 {mlt.layer = 1 : i64}
    // CHECK: return %[[N1]]
    %r = mlt.repeat %layer = 0 to 2 iter_args(%h = %x) -> (tensor<?x?x64xf32>) {
      %w = mlt.load @"model.layers.{}.input_layernorm.weight"[%layer] : tensor<64xf32>
      %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x64xf32>, tensor<64xf32>
      mlt.yield %n : tensor<?x?x64xf32>
    }
    return %r : tensor<?x?x64xf32>
  }
}

// -----

// Tests that a repeat over a sub-range unrolls only the layers it runs, and
// that several carried values are threaded in order.
module {
  mlt.param @"model.layers.{}.w" layers 4 : tensor<8xf32>
  // CHECK-LABEL: func.func @sub_range
  // CHECK-SAME: (%[[A:[^:]+]]: tensor<8xf32>, %[[B:[^:]+]]: tensor<8xf32>)
  func.func @sub_range(%a: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
    // CHECK: %[[C2:.+]] = arith.constant 2 : index
    // CHECK: %[[S2:.+]] = mlt.add %[[A]], %[[B]] {mlt.layer = 2 : i64}
    // CHECK: %[[C3:.+]] = arith.constant 3 : index
    // CHECK: %[[S3:.+]] = mlt.add %[[B]], %[[S2]] {mlt.layer = 3 : i64}
    // CHECK: return %[[S2]], %[[S3]]
    // CHECK-NOT: arith.constant 4
    %r:2 = mlt.repeat %layer = 2 to 4 iter_args(%x = %a, %y = %b) -> (tensor<8xf32>, tensor<8xf32>) {
      %s = mlt.add %x, %y : tensor<8xf32>
      mlt.yield %y, %s : tensor<8xf32>, tensor<8xf32>
    }
    return %r#0, %r#1 : tensor<8xf32>, tensor<8xf32>
  }
}
