// RUN: mlt-opt %s -split-input-file -mlt-attach-evaluation | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-attach-evaluation -mlt-autodiff \
// RUN:   | FileCheck %s --check-prefix=BESIDE

// Tests that @eval_forward is @forward with its layers unrolled and nothing
// else: the same forward ops and loss, no backward op, no gradient; that
// @forward is kept (mlt-autodiff's input); and that mlt-autodiff then makes
// @micro_step beside it, leaving it forward-only.
module {
  mlt.param @"model.layers.{}.input_layernorm.weight" layers 2 : tensor<8xf32>
  // CHECK-LABEL: func.func @forward
  // CHECK: mlt.repeat
  // CHECK-LABEL: func.func @eval_forward
  // CHECK-SAME: (%[[X:[^ ,:]+]]: tensor<2x4x8xf32>, %[[LABELS:[^ ,:]+]]: tensor<2x4xi32>) -> tensor<f32>
  // CHECK-NOT: mlt.repeat
  // CHECK: %[[C0:[^ ,:]+]] = arith.constant 0 : index
  // CHECK: %[[W0:[^ ,:]+]] = mlt.load @"model.layers.{}.input_layernorm.weight"[%[[C0]]]
  // CHECK: %[[N0:[^ ,:]+]] = mlt.rms_norm %[[X]], %[[W0]]
  // CHECK: %[[C1:[^ ,:]+]] = arith.constant 1 : index
  // CHECK: %[[W1:[^ ,:]+]] = mlt.load @"model.layers.{}.input_layernorm.weight"[%[[C1]]]
  // CHECK: %[[N1:[^ ,:]+]] = mlt.rms_norm %[[N0]], %[[W1]]
  // CHECK: %[[LOSS:[^ ,:]+]] = mlt.cross_entropy %[[N1]], %[[LABELS]]
  // CHECK-NOT: _grad
  // CHECK-NOT: mlt.loss_seed
  // CHECK: return %[[LOSS]] : tensor<f32>
  // BESIDE-LABEL: func.func @eval_forward
  // BESIDE-NOT: _grad
  // BESIDE: return
  // BESIDE-LABEL: func.func @micro_step
  // BESIDE: mlt.cross_entropy_grad
  // BESIDE: mlt.accumulate_grad
  func.func @forward(%x: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
    %r = mlt.repeat %layer = 0 to 2 iter_args(%h = %x) -> (tensor<2x4x8xf32>) {
      %w = mlt.load @"model.layers.{}.input_layernorm.weight"[%layer] : tensor<8xf32>
      %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<2x4x8xf32>, tensor<8xf32>
      mlt.yield %n : tensor<2x4x8xf32>
    }
    %loss = mlt.cross_entropy %r, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that a pipeline stage before the last, which returns nothing and
// sends its output on, gets an @eval_forward that sends it too (and
// receives no gradient: it has no backward pass).
module attributes {mlt.mesh = #mlt.mesh<pp = 2>} {
  mlt.param @"model.norm.weight" : tensor<8xf32>
  // CHECK-LABEL: func.func @eval_forward
  // CHECK-SAME: (%[[X:[^ ,:]+]]: tensor<2x4x8xf32>, %{{[^ ,:]+}}: tensor<2x4xi32>)
  // CHECK: %[[N:[^ ,:]+]] = mlt.rms_norm %[[X]]
  // CHECK: mlt.send %[[N]] to "pp" shift 1
  // CHECK-NOT: mlt.recv
  // CHECK: return
  func.func @forward(%x: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) {
    %w = mlt.load @"model.norm.weight" : tensor<8xf32>
    %n = mlt.rms_norm %x, %w eps = 1.0e-05 : tensor<2x4x8xf32>, tensor<8xf32>
    mlt.send %n to "pp" shift 1 : tensor<2x4x8xf32> layout #mlt.sharding<[-, -, -]>
    return
  }
}
