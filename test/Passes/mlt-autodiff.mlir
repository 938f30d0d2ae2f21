// RUN: mlt-opt %s -split-input-file -mlt-autodiff="microbatches=4" | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-autodiff | FileCheck %s --check-prefix=DEFAULT

// Tests that a linear layer with a shared weight (`transpose_rhs`) gets
// dx = dlogits W and dW = dlogits^T x summed over the batch and sequence
// (one `transpose_lhs contract_batch` matmul, no reshapes that would hide a
// split batch or sequence from sharding propagation), accumulated into the
// parameter; that the loss gradient is seeded with 1/microbatches; that
// @forward is kept and @micro_step carries `mlt.microbatches`.
module {
  mlt.param @"lm_head.weight" : tensor<16x8xf32>
  // CHECK-LABEL: func.func @forward
  // CHECK-NOT: _grad
  // CHECK: return
  // CHECK-LABEL: func.func @micro_step
  // CHECK-SAME: (%[[X:[^ ,:]+]]: tensor<2x4x8xf32>, %[[LABELS:[^ ,:]+]]: tensor<2x4xi32>) -> tensor<f32>
  // CHECK-SAME: attributes {mlt.microbatches = 4 : i64}
  // CHECK: %[[W:[^ ,:]+]] = mlt.load @lm_head.weight : tensor<16x8xf32>
  // CHECK: %[[LOGITS:[^ ,:]+]] = mlt.matmul %[[X]], %[[W]] transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32>
  // CHECK: %[[LOSS:[^ ,:]+]] = mlt.cross_entropy %[[LOGITS]], %[[LABELS]]
  // CHECK: %[[SEED:[^ ,:]+]] = arith.constant {mlt.loss_seed} dense<2.500000e-01> : tensor<f32>
  // CHECK: %[[DLOGITS:[^ ,:]+]] = mlt.cross_entropy_grad %[[SEED]], %[[LOGITS]], %[[LABELS]] : tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi32>
  // CHECK: mlt.matmul %[[DLOGITS]], %[[W]] : tensor<2x4x16xf32>, tensor<16x8xf32>
  // CHECK-NOT: mlt.reshape
  // CHECK: %[[DW:[^ ,:]+]] = mlt.matmul %[[DLOGITS]], %[[X]] transpose_lhs contract_batch : tensor<2x4x16xf32>, tensor<2x4x8xf32>
  // CHECK: mlt.accumulate_grad @lm_head.weight, %[[DW]] : tensor<16x8xf32>
  // CHECK: return %[[LOSS]] : tensor<f32>
  // DEFAULT-LABEL: func.func @micro_step
  // DEFAULT-SAME: attributes {mlt.microbatches = 1 : i64}
  // DEFAULT: arith.constant {mlt.loss_seed} dense<1.000000e+00> : tensor<f32>
  func.func @forward(%x: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
    %w = mlt.load @"lm_head.weight" : tensor<16x8xf32>
    %logits = mlt.matmul %x, %w transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32>
    %loss = mlt.cross_entropy %logits, %labels : tensor<2x4x16xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that the matmul rule without transposes against a shared weight
// gives dx = dh W^T and dW = x^T dh over the collapsed rows, and against a
// batched rhs with `transpose_rhs` dlhs = dc rhs and drhs = dc^T lhs, batch
// by batch.
module {
  mlt.param @"w" : tensor<8x6xf32>
  // CHECK-LABEL: func.func @micro_step
  // CHECK-SAME: (%[[X:[^ ,:]+]]: tensor<2x4x8xf32>, %[[K:[^ ,:]+]]: tensor<2x5x6xf32>, %{{[^ ,:]+}}: tensor<2x4xi32>)
  // CHECK: %[[W:[^ ,:]+]] = mlt.load @w : tensor<8x6xf32>
  // CHECK: %[[H:[^ ,:]+]] = mlt.matmul %[[X]], %[[W]] : tensor<2x4x8xf32>, tensor<8x6xf32>
  // CHECK: %[[S:[^ ,:]+]] = mlt.matmul %[[H]], %[[K]] transpose_rhs : tensor<2x4x6xf32>, tensor<2x5x6xf32>
  // CHECK: %[[DS:[^ ,:]+]] = mlt.cross_entropy_grad
  // CHECK: %[[DH:[^ ,:]+]] = mlt.matmul %[[DS]], %[[K]] : tensor<2x4x5xf32>, tensor<2x5x6xf32>
  // CHECK: mlt.matmul %[[DS]], %[[H]] transpose_lhs : tensor<2x4x5xf32>, tensor<2x4x6xf32>
  // CHECK: mlt.matmul %[[DH]], %[[W]] transpose_rhs : tensor<2x4x6xf32>, tensor<8x6xf32>
  // CHECK: %[[DW:[^ ,:]+]] = mlt.matmul %[[X]], %[[DH]] transpose_lhs contract_batch : tensor<2x4x8xf32>, tensor<2x4x6xf32>
  // CHECK: mlt.accumulate_grad @w, %[[DW]] : tensor<8x6xf32>
  func.func @forward(%x: tensor<2x4x8xf32>, %k: tensor<2x5x6xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
    %w = mlt.load @"w" : tensor<8x6xf32>
    %h = mlt.matmul %x, %w : tensor<2x4x8xf32>, tensor<8x6xf32>
    %s = mlt.matmul %h, %k transpose_rhs : tensor<2x4x6xf32>, tensor<2x5x6xf32>
    %loss = mlt.cross_entropy %s, %labels : tensor<2x4x5xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that rms_norm gets rms_norm_grad (its weight gradient accumulated),
// rope the inverse rotation, and attention an attention_grad that takes the
// forward output; that reshapes of gradients undo the forward reshapes.
module {
  mlt.param @"model.norm.weight" : tensor<8xf32>
  // CHECK-LABEL: func.func @micro_step
  // CHECK-SAME: (%[[X:[^ ,:]+]]: tensor<2x4x8xf32>, %[[K:[^ ,:]+]]: tensor<2x4x1x4xf32>, %[[V:[^ ,:]+]]: tensor<2x4x1x4xf32>, %[[LABELS:[^ ,:]+]]: tensor<2x4xi32>)
  // CHECK: %[[W:[^ ,:]+]] = mlt.load @model.norm.weight
  // CHECK: %[[N:[^ ,:]+]] = mlt.rms_norm %[[X]], %[[W]]
  // CHECK: %[[Q:[^ ,:]+]] = mlt.reshape %[[N]]
  // CHECK: %[[QR:[^ ,:]+]] = mlt.rope %[[Q]] theta = 1.000000e+04 : tensor<2x4x2x4xf32>
  // CHECK: %[[KR:[^ ,:]+]] = mlt.rope %[[K]] theta = 1.000000e+04 : tensor<2x4x1x4xf32>
  // CHECK: %[[O:[^ ,:]+]] = mlt.attention %[[QR]], %[[KR]], %[[V]] causal scale = 5.000000e-01
  // CHECK: %[[O3:[^ ,:]+]] = mlt.reshape %[[O]]
  // CHECK: %[[DO3:[^ ,:]+]] = mlt.cross_entropy_grad %{{[^ ,:]+}}, %[[O3]], %[[LABELS]]
  // CHECK: %[[DO:[^ ,:]+]] = mlt.reshape %[[DO3]] : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  // CHECK: %[[DQ:[^ ,:]+]], %[[DK:[^ ,:]+]], %{{[^ ,:]+}} = mlt.attention_grad %[[DO]], %[[QR]], %[[KR]], %[[V]], %[[O]] causal scale = 5.000000e-01 : tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32>, tensor<2x4x2x4xf32>
  // CHECK: mlt.rope %[[DK]] theta = 1.000000e+04 inverse : tensor<2x4x1x4xf32>
  // CHECK: %[[DQR:[^ ,:]+]] = mlt.rope %[[DQ]] theta = 1.000000e+04 inverse : tensor<2x4x2x4xf32>
  // CHECK: %[[DN:[^ ,:]+]] = mlt.reshape %[[DQR]] : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  // CHECK: %{{[^ ,:]+}}, %[[DW:[^ ,:]+]] = mlt.rms_norm_grad %[[DN]], %[[X]], %[[W]] eps = 1.000000e-05 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>
  // CHECK: mlt.accumulate_grad @model.norm.weight, %[[DW]] : tensor<8xf32>
  func.func @forward(%x: tensor<2x4x8xf32>, %k: tensor<2x4x1x4xf32>, %v: tensor<2x4x1x4xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
    %w = mlt.load @"model.norm.weight" : tensor<8xf32>
    %n = mlt.rms_norm %x, %w eps = 1.0e-05 : tensor<2x4x8xf32>, tensor<8xf32>
    %q = mlt.reshape %n : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
    %qr = mlt.rope %q theta = 1.0e+04 : tensor<2x4x2x4xf32>
    %kr = mlt.rope %k theta = 1.0e+04 : tensor<2x4x1x4xf32>
    %o = mlt.attention %qr, %kr, %v causal scale = 0.5 : tensor<2x4x2x4xf32>, tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32>
    %o3 = mlt.reshape %o : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
    %loss = mlt.cross_entropy %o3, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that the gradient of an inverse rotation is the forward rotation.
// CHECK-LABEL: func.func @micro_step
// CHECK: %[[R:[^ ,:]+]] = mlt.rope %{{[^ ,:]+}} theta = 5.000000e+05 inverse : tensor<2x4x2x4xf32>
// CHECK: %[[DR:[^ ,:]+]] = mlt.reshape %{{[^ ,:]+}} : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
// CHECK-NEXT: mlt.rope %[[DR]] theta = 5.000000e+05 : tensor<2x4x2x4xf32>
func.func @forward(%q: tensor<2x4x2x4xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
  %r = mlt.rope %q theta = 5.0e+05 inverse : tensor<2x4x2x4xf32>
  %r3 = mlt.reshape %r : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  %loss = mlt.cross_entropy %r3, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}

// -----

// Tests that in the elementwise rules swiglu gets swiglu_grad, silu
// silu_grad and mul one product per operand, and that transpose gets the
// inverse permutation and cast a cast back to the operand's type.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: (%[[G:[^ ,:]+]]: tensor<2x4x8xf32>, %[[U:[^ ,:]+]]: tensor<2x4x8xf32>, %[[LABELS:[^ ,:]+]]: tensor<4x8xi32>)
// CHECK: %[[S:[^ ,:]+]] = mlt.swiglu %[[G]], %[[U]] : tensor<2x4x8xf32>
// CHECK: %[[A:[^ ,:]+]] = mlt.silu %[[S]] : tensor<2x4x8xf32>
// CHECK: %[[M:[^ ,:]+]] = mlt.mul %[[A]], %[[S]] : tensor<2x4x8xf32>
// CHECK: %[[B:[^ ,:]+]] = mlt.cast %[[M]] : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
// CHECK: %[[T:[^ ,:]+]] = mlt.transpose %[[B]] [1, 2, 0] : tensor<2x4x8xbf16>
// CHECK: %[[LOSS:[^ ,:]+]] = mlt.cross_entropy %[[T]], %[[LABELS]] : tensor<4x8x2xbf16>, tensor<4x8xi32>
// CHECK: %[[DT:[^ ,:]+]] = mlt.cross_entropy_grad %{{[^ ,:]+}}, %[[T]], %[[LABELS]] : tensor<f32>, tensor<4x8x2xbf16>, tensor<4x8xi32>
// CHECK: %[[DB:[^ ,:]+]] = mlt.transpose %[[DT]] [2, 0, 1] : tensor<4x8x2xbf16>
// CHECK: %[[DM:[^ ,:]+]] = mlt.cast %[[DB]] : tensor<2x4x8xbf16> -> tensor<2x4x8xf32>
// CHECK: %[[DA:[^ ,:]+]] = mlt.mul %[[DM]], %[[S]] : tensor<2x4x8xf32>
// CHECK: %[[DS1:[^ ,:]+]] = mlt.mul %[[DM]], %[[A]] : tensor<2x4x8xf32>
// CHECK: %[[DS2:[^ ,:]+]] = mlt.silu_grad %[[DA]], %[[S]] : tensor<2x4x8xf32>
// CHECK: %[[DS:[^ ,:]+]] = mlt.add %[[DS1]], %[[DS2]] : tensor<2x4x8xf32>
// CHECK: %{{[^ ,:]+}}, %{{[^ ,:]+}} = mlt.swiglu_grad %[[DS]], %[[G]], %[[U]] : tensor<2x4x8xf32>
// CHECK: return %[[LOSS]]
func.func @forward(%gate: tensor<2x4x8xf32>, %up: tensor<2x4x8xf32>, %labels: tensor<4x8xi32>) -> tensor<f32> {
  %s = mlt.swiglu %gate, %up : tensor<2x4x8xf32>
  %a = mlt.silu %s : tensor<2x4x8xf32>
  %m = mlt.mul %a, %s : tensor<2x4x8xf32>
  %b = mlt.cast %m : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
  %t = mlt.transpose %b [1, 2, 0] : tensor<2x4x8xbf16>
  %loss = mlt.cross_entropy %t, %labels : tensor<4x8x2xbf16>, tensor<4x8xi32>
  return %loss : tensor<f32>
}

// -----

// Tests that an embedding gets embedding_grad from the token ids (which get
// no gradient) into its table's parameter, and that a value used twice (the
// residual stream) gets the sum of its gradients with mlt.add.
module {
  mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
  // CHECK-LABEL: func.func @micro_step
  // CHECK-SAME: (%[[TOKENS:[^ ,:]+]]: tensor<2x4xi32>, %[[LABELS:[^ ,:]+]]: tensor<2x4xi32>)
  // CHECK: %[[TABLE:[^ ,:]+]] = mlt.load @model.embed_tokens.weight : tensor<16x8xf32>
  // CHECK: %[[H:[^ ,:]+]] = mlt.embedding %[[TOKENS]], %[[TABLE]]
  // CHECK: %[[S:[^ ,:]+]] = mlt.silu %[[H]]
  // CHECK: %[[R:[^ ,:]+]] = mlt.add %[[H]], %[[S]]
  // CHECK: %[[DR:[^ ,:]+]] = mlt.cross_entropy_grad %{{[^ ,:]+}}, %[[R]], %[[LABELS]]
  // CHECK: %[[DS:[^ ,:]+]] = mlt.silu_grad %[[DR]], %[[H]] : tensor<2x4x8xf32>
  // CHECK: %[[DH:[^ ,:]+]] = mlt.add %[[DR]], %[[DS]] : tensor<2x4x8xf32>
  // CHECK: %[[DT:[^ ,:]+]] = mlt.embedding_grad %[[TOKENS]], %[[DH]] : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<16x8xf32>
  // CHECK: mlt.accumulate_grad @model.embed_tokens.weight, %[[DT]] : tensor<16x8xf32>
  // CHECK-NOT: mlt.accumulate_grad
  // CHECK: return
  func.func @forward(%tokens: tensor<2x4xi32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
    %h = mlt.embedding %tokens, %table : tensor<2x4xi32>, tensor<16x8xf32>
    %s = mlt.silu %h : tensor<2x4x8xf32>
    %r = mlt.add %h, %s : tensor<2x4x8xf32>
    %loss = mlt.cross_entropy %r, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that tied embeddings (the table loaded twice: by the embedding and
// by the head) accumulate twice into the one parameter, head first.
module {
  mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
  // CHECK-LABEL: func.func @micro_step
  // CHECK: %[[T1:[^ ,:]+]] = mlt.load @model.embed_tokens.weight
  // CHECK: %[[T2:[^ ,:]+]] = mlt.load @model.embed_tokens.weight
  // CHECK: %[[LOGITS:[^ ,:]+]] = mlt.matmul %{{[^ ,:]+}}, %[[T2]] transpose_rhs
  // CHECK: %[[DHEAD:[^ ,:]+]] = mlt.matmul %{{[^ ,:]+}}, %{{[^ ,:]+}} transpose_lhs contract_batch : tensor<2x4x16xf32>, tensor<2x4x8xf32>
  // CHECK: mlt.accumulate_grad @model.embed_tokens.weight, %[[DHEAD]] : tensor<16x8xf32>
  // CHECK: %[[DEMB:[^ ,:]+]] = mlt.embedding_grad
  // CHECK: mlt.accumulate_grad @model.embed_tokens.weight, %[[DEMB]] : tensor<16x8xf32>
  func.func @forward(%tokens: tensor<2x4xi32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
    %h = mlt.embedding %tokens, %table : tensor<2x4xi32>, tensor<16x8xf32>
    %head = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
    %logits = mlt.matmul %h, %head transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32>
    %loss = mlt.cross_entropy %logits, %labels : tensor<2x4x16xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that the layers' repeat is unrolled in @micro_step (kept in
// @forward), and that each layer's gradient is accumulated into its own
// layer of the family, last layer first.
module {
  mlt.param @"model.layers.{}.input_layernorm.weight" layers 2 : tensor<8xf32>
  // CHECK-LABEL: func.func @forward
  // CHECK: mlt.repeat
  // CHECK-LABEL: func.func @micro_step
  // CHECK-NOT: mlt.repeat
  // CHECK: %[[C0:[^ ,:]+]] = arith.constant 0 : index
  // CHECK: %[[W0:[^ ,:]+]] = mlt.load @"model.layers.{}.input_layernorm.weight"[%[[C0]]] {mlt.layer = 0 : i64}
  // CHECK: %[[N0:[^ ,:]+]] = mlt.rms_norm %{{[^ ,:]+}}, %[[W0]] eps = 1.000000e-05 {mlt.layer = 0 : i64}
  // CHECK: %[[C1:[^ ,:]+]] = arith.constant 1 : index
  // CHECK: %[[W1:[^ ,:]+]] = mlt.load @"model.layers.{}.input_layernorm.weight"[%[[C1]]] {mlt.layer = 1 : i64}
  // CHECK: %[[N1:[^ ,:]+]] = mlt.rms_norm %[[N0]], %[[W1]] eps = 1.000000e-05 {mlt.layer = 1 : i64}
  // CHECK: %[[DN1:[^ ,:]+]] = mlt.cross_entropy_grad %{{[^ ,:]+}}, %[[N1]]
  // CHECK: %[[DN0:[^ ,:]+]], %[[DW1:[^ ,:]+]] = mlt.rms_norm_grad %[[DN1]], %[[N0]], %[[W1]]
  // CHECK: mlt.accumulate_grad @"model.layers.{}.input_layernorm.weight"[%[[C1]]], %[[DW1]] : tensor<8xf32>
  // CHECK: %{{[^ ,:]+}}, %[[DW0:[^ ,:]+]] = mlt.rms_norm_grad %[[DN0]], %{{[^ ,:]+}}, %[[W0]]
  // CHECK: mlt.accumulate_grad @"model.layers.{}.input_layernorm.weight"[%[[C0]]], %[[DW0]] : tensor<8xf32>
  // CHECK-NOT: mlt.accumulate_grad
  // CHECK: return
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

// Tests that ops off the loss path need no gradient rule and get no backward
// ops, and that parameters that do not reach the loss get no gradient.
module {
  mlt.param @"unused.weight" : tensor<8xf32>
  // CHECK-LABEL: func.func @micro_step
  // CHECK: arith.negf
  // CHECK: mlt.cross_entropy_grad
  // CHECK-NOT: mlt.accumulate_grad
  // CHECK-NOT: _grad
  // CHECK: return
  func.func @forward(%x: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
    %w = mlt.load @"unused.weight" : tensor<8xf32>
    %n = mlt.rms_norm %x, %w eps = 1.0e-05 : tensor<2x4x8xf32>, tensor<8xf32>
    %dead = arith.negf %n : tensor<2x4x8xf32>
    %loss = mlt.cross_entropy %x, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
}
