// RUN: mlt-opt %s -split-input-file -mlt-specialize-shapes="batch=4 seq-len=32" | FileCheck %s

// Tests that dynamic [?, ?] tokens and labels become [batch, seq-len], that
// the inferred ops (embedding, rms_norm, matmul, cross_entropy) re-infer
// their types from them, and that the function type follows.
module {
  mlt.param @"model.embed_tokens.weight" : tensor<256x64xf32>
  mlt.param @"model.norm.weight" : tensor<64xf32>
  // CHECK-LABEL: func.func @forward
  // CHECK-SAME: (%[[TOKENS:[^ ,:]+]]: tensor<4x32xi32>, %[[LABELS:[^ ,:]+]]: tensor<4x32xi32>) -> tensor<f32>
  func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
    // CHECK: %[[TABLE:[^ ,:]+]] = mlt.load @model.embed_tokens.weight : tensor<256x64xf32>
    // CHECK: %[[H:[^ ,:]+]] = mlt.embedding %[[TOKENS]], %[[TABLE]] : tensor<4x32xi32>, tensor<256x64xf32>
    // CHECK: %[[N:[^ ,:]+]] = mlt.rms_norm %[[H]], %{{[^ ,:]+}} eps = 1.000000e-05 : tensor<4x32x64xf32>, tensor<64xf32>
    // CHECK: %[[LOGITS:[^ ,:]+]] = mlt.matmul %[[N]], %[[TABLE]] transpose_rhs : tensor<4x32x64xf32>, tensor<256x64xf32>
    // CHECK: %[[LOSS:[^ ,:]+]] = mlt.cross_entropy %[[LOGITS]], %[[LABELS]] : tensor<4x32x256xf32>, tensor<4x32xi32>
    // CHECK: return %[[LOSS]] : tensor<f32>
    %table = mlt.load @"model.embed_tokens.weight" : tensor<256x64xf32>
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<256x64xf32>
    %w = mlt.load @"model.norm.weight" : tensor<64xf32>
    %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x64xf32>, tensor<64xf32>
    %logits = mlt.matmul %n, %table transpose_rhs : tensor<?x?x64xf32>, tensor<256x64xf32>
    %loss = mlt.cross_entropy %logits, %labels : tensor<?x?x256xf32>, tensor<?x?xi32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that the ops whose result type is written out follow their operand:
// mlt.reshape fills its dynamic dimensions in order, mlt.cast keeps the
// shape; and that rope, attention, transpose and the elementwise ops re-infer.
module {
  mlt.param @"model.embed_tokens.weight" : tensor<256x64xf32>
  // CHECK-LABEL: func.func @forward
  // CHECK-SAME: (%[[TOKENS:[^ ,:]+]]: tensor<4x32xi32>) -> tensor<32x4x64xbf16>
  func.func @forward(%tokens: tensor<?x?xi32>) -> tensor<?x?x64xbf16> {
    // CHECK: %[[H:[^ ,:]+]] = mlt.embedding %[[TOKENS]], %{{[^ ,:]+}} : tensor<4x32xi32>, tensor<256x64xf32>
    // CHECK: %[[Q:[^ ,:]+]] = mlt.reshape %[[H]] : tensor<4x32x64xf32> -> tensor<4x32x4x16xf32>
    // CHECK: %[[R:[^ ,:]+]] = mlt.rope %[[Q]] theta = 1.000000e+04 : tensor<4x32x4x16xf32>
    // CHECK: %[[K:[^ ,:]+]] = mlt.reshape %[[H]] : tensor<4x32x64xf32> -> tensor<4x32x2x32xf32>
    // CHECK: %[[K2:[^ ,:]+]] = mlt.reshape %[[K]] : tensor<4x32x2x32xf32> -> tensor<4x32x4x16xf32>
    // CHECK: %[[O:[^ ,:]+]] = mlt.attention %[[R]], %[[K2]], %[[K2]] causal scale = 2.500000e-01 : tensor<4x32x4x16xf32>, tensor<4x32x4x16xf32>, tensor<4x32x4x16xf32>
    // CHECK: %[[O3:[^ ,:]+]] = mlt.reshape %[[O]] : tensor<4x32x4x16xf32> -> tensor<4x32x64xf32>
    // CHECK: %[[S:[^ ,:]+]] = mlt.swiglu %[[O3]], %[[H]] : tensor<4x32x64xf32>
    // CHECK: %[[A:[^ ,:]+]] = mlt.add %[[S]], %[[H]] : tensor<4x32x64xf32>
    // CHECK: %[[M:[^ ,:]+]] = mlt.mul %[[A]], %[[A]] : tensor<4x32x64xf32>
    // CHECK: %[[U:[^ ,:]+]] = mlt.silu %[[M]] : tensor<4x32x64xf32>
    // CHECK: %[[T:[^ ,:]+]] = mlt.transpose %[[U]] [1, 0, 2] : tensor<4x32x64xf32>
    // CHECK: %[[C:[^ ,:]+]] = mlt.cast %[[T]] : tensor<32x4x64xf32> -> tensor<32x4x64xbf16>
    // CHECK: return %[[C]] : tensor<32x4x64xbf16>
    %table = mlt.load @"model.embed_tokens.weight" : tensor<256x64xf32>
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<256x64xf32>
    %q = mlt.reshape %h : tensor<?x?x64xf32> -> tensor<?x?x4x16xf32>
    %r = mlt.rope %q theta = 1.0e+04 : tensor<?x?x4x16xf32>
    %k = mlt.reshape %h : tensor<?x?x64xf32> -> tensor<?x?x2x32xf32>
    %k2 = mlt.reshape %k : tensor<?x?x2x32xf32> -> tensor<?x?x4x16xf32>
    %o = mlt.attention %r, %k2, %k2 causal scale = 0.25 : tensor<?x?x4x16xf32>, tensor<?x?x4x16xf32>, tensor<?x?x4x16xf32>
    %o3 = mlt.reshape %o : tensor<?x?x4x16xf32> -> tensor<?x?x64xf32>
    %s = mlt.swiglu %o3, %h : tensor<?x?x64xf32>
    %a = mlt.add %s, %h : tensor<?x?x64xf32>
    %m = mlt.mul %a, %a : tensor<?x?x64xf32>
    %u = mlt.silu %m : tensor<?x?x64xf32>
    %t = mlt.transpose %u [1, 0, 2] : tensor<?x?x64xf32>
    %c = mlt.cast %t : tensor<?x?x64xf32> -> tensor<?x?x64xbf16>
    return %c : tensor<?x?x64xbf16>
  }
}

// -----

// Tests that a reshape fills the sizes of its operand's dynamic dimensions in
// their order, even after a transpose has swapped batch and sequence.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> tensor<32x4x2x4xf32>
func.func @forward(%tokens: tensor<?x?xi32>, %table: tensor<16x8xf32>) -> tensor<?x?x2x4xf32> {
  // CHECK: mlt.transpose %{{[^ ,:]+}} [1, 0, 2] : tensor<4x32x8xf32>
  // CHECK: mlt.reshape %{{[^ ,:]+}} : tensor<32x4x8xf32> -> tensor<32x4x2x4xf32>
  %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<16x8xf32>
  %t = mlt.transpose %h [1, 0, 2] : tensor<?x?x8xf32>
  %r = mlt.reshape %t : tensor<?x?x8xf32> -> tensor<?x?x2x4xf32>
  return %r : tensor<?x?x2x4xf32>
}

// -----

// Tests that mlt.repeat takes its inits' types for its carried values and
// results, so the layer body re-infers from them.
module {
  mlt.param @"model.layers.{}.input_layernorm.weight" layers 2 : tensor<64xf32>
  // CHECK-LABEL: func.func @forward
  // CHECK-SAME: -> tensor<4x32x64xf32>
  func.func @forward(%tokens: tensor<?x?xi32>, %table: tensor<256x64xf32>) -> tensor<?x?x64xf32> {
    // CHECK: %[[H:[^ ,:]+]] = mlt.embedding
    // CHECK: %[[R:[^ ,:]+]] = mlt.repeat %[[L:[^ ,:]+]] = 0 to 2 iter_args(%[[X:[^ ,:]+]] = %[[H]]) -> (tensor<4x32x64xf32>) {
    // CHECK: %[[W:[^ ,:]+]] = mlt.load @"model.layers.{}.input_layernorm.weight"[%[[L]]] : tensor<64xf32>
    // CHECK: %[[N:[^ ,:]+]] = mlt.rms_norm %[[X]], %[[W]] eps = 1.000000e-05 : tensor<4x32x64xf32>, tensor<64xf32>
    // CHECK: %[[S:[^ ,:]+]] = mlt.reshape %[[N]] : tensor<4x32x64xf32> -> tensor<4x32x4x16xf32>
    // CHECK: %[[M:[^ ,:]+]] = mlt.reshape %[[S]] : tensor<4x32x4x16xf32> -> tensor<4x32x64xf32>
    // CHECK: mlt.yield %[[M]] : tensor<4x32x64xf32>
    // CHECK: return %[[R]] : tensor<4x32x64xf32>
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<256x64xf32>
    %r = mlt.repeat %layer = 0 to 2 iter_args(%x = %h) -> (tensor<?x?x64xf32>) {
      %w = mlt.load @"model.layers.{}.input_layernorm.weight"[%layer] : tensor<64xf32>
      %n = mlt.rms_norm %x, %w eps = 1.0e-05 : tensor<?x?x64xf32>, tensor<64xf32>
      %s = mlt.reshape %n : tensor<?x?x64xf32> -> tensor<?x?x4x16xf32>
      %m = mlt.reshape %s : tensor<?x?x4x16xf32> -> tensor<?x?x64xf32>
      mlt.yield %m : tensor<?x?x64xf32>
    }
    return %r : tensor<?x?x64xf32>
  }
}

// -----

// Tests that token arguments that are already static, fully or in part,
// keep or complete their shape when it agrees, and that i64 tokens are
// specialized too.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%{{[^ ,:]+}}: tensor<4x32xi64>, %{{[^ ,:]+}}: tensor<4x32xi32>, %{{[^ ,:]+}}: tensor<4x32xi32>)
func.func @forward(%tokens: tensor<?x32xi64>, %labels: tensor<4x?xi32>, %mask: tensor<4x32xi32>) {
  return
}

// -----

// Tests that only rank-2 integer arguments are tokens: float activations and
// integer tensors of another rank keep their dynamic dimensions.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%{{[^ ,:]+}}: tensor<4x32xi32>, %{{[^ ,:]+}}: tensor<?x?xf32>, %{{[^ ,:]+}}: tensor<?xi32>, %{{[^ ,:]+}}: tensor<?x?x?xi32>)
func.func @forward(%tokens: tensor<?x?xi32>, %x: tensor<?x?xf32>, %ids: tensor<?xi32>, %ids3: tensor<?x?x?xi32>) {
  return
}

// -----

// Tests that other functions of the module are left alone.
// CHECK-LABEL: func.func @helper
// CHECK-SAME: (%{{[^ ,:]+}}: tensor<?x?xi32>)
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%{{[^ ,:]+}}: tensor<4x32xi32>)
func.func @helper(%tokens: tensor<?x?xi32>) {
  return
}
func.func @forward(%tokens: tensor<?x?xi32>) {
  return
}
