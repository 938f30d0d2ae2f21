// RUN: mlt-opt %s -split-input-file -mlt-mixed-precision | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-mixed-precision="compute-type=f32" | FileCheck %s --check-prefix=F32
// RUN: mlt-opt %s -split-input-file -mlt-mixed-precision="compute-type=f16" | FileCheck %s --check-prefix=F16

// Tests that the loads of f32 parameters read their bf16 compute copies, that
// every type below follows (inferred ops, a repeat's carried value, reshape,
// a sharding constraint), that the loss stays f32, that an explicit cast
// keeps the type it names, and that the function type follows. compute-type
// f32 changes nothing; f16 gives f16 copies.
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  mlt.param @"model.embed_tokens.weight" : tensor<256x64xf32>
  mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 2 : tensor<64x64xf32>
  mlt.param @"model.norm.weight" : tensor<64xf32>
  // CHECK-LABEL: func.func @forward
  // CHECK-SAME: (%[[TOKENS:[^ ,:]+]]: tensor<4x8xi32>, %[[LABELS:[^ ,:]+]]: tensor<4x8xi32>) -> (tensor<f32>, tensor<4x8x64xf32>)
  // F32-LABEL: func.func @forward
  // F32-NOT: bf16
  // F16-LABEL: func.func @forward
  func.func @forward(%tokens: tensor<4x8xi32>, %labels: tensor<4x8xi32>) -> (tensor<f32>, tensor<4x8x64xf32>) {
    // CHECK: %[[TABLE:[^ ,:]+]] = mlt.load @model.embed_tokens.weight : tensor<256x64xbf16>
    // CHECK: %[[H:[^ ,:]+]] = mlt.embedding %[[TOKENS]], %[[TABLE]] : tensor<4x8xi32>, tensor<256x64xbf16>
    // F16: mlt.load @model.embed_tokens.weight : tensor<256x64xf16>
    %table = mlt.load @"model.embed_tokens.weight" : tensor<256x64xf32>
    %h = mlt.embedding %tokens, %table : tensor<4x8xi32>, tensor<256x64xf32>
    // CHECK: %[[R:[^ ,:]+]] = mlt.repeat %[[L:[^ ,:]+]] = 0 to 2 iter_args(%[[X:[^ ,:]+]] = %[[H]]) -> (tensor<4x8x64xbf16>) {
    // CHECK: %[[W:[^ ,:]+]] = mlt.load @"model.layers.{}.mlp.up_proj.weight"[%[[L]]] : tensor<64x64xbf16>
    // CHECK: %[[Y:[^ ,:]+]] = mlt.matmul %[[X]], %[[W]] transpose_rhs : tensor<4x8x64xbf16>, tensor<64x64xbf16>
    // CHECK: %[[S:[^ ,:]+]] = mlt.shard %[[Y]] : tensor<4x8x64xbf16> to #mlt.sharding<[-, tp, -]>
    // CHECK: %[[Z:[^ ,:]+]] = mlt.reshape %[[S]] : tensor<4x8x64xbf16> -> tensor<32x64xbf16>
    // CHECK: %[[B:[^ ,:]+]] = mlt.reshape %[[Z]] : tensor<32x64xbf16> -> tensor<4x8x64xbf16>
    // CHECK: mlt.yield %[[B]] : tensor<4x8x64xbf16>
    %r = mlt.repeat %layer = 0 to 2 iter_args(%x = %h) -> (tensor<4x8x64xf32>) {
      %w = mlt.load @"model.layers.{}.mlp.up_proj.weight"[%layer] : tensor<64x64xf32>
      %y = mlt.matmul %x, %w transpose_rhs : tensor<4x8x64xf32>, tensor<64x64xf32>
      %s = mlt.shard %y : tensor<4x8x64xf32> to #mlt.sharding<[-, tp, -]>
      %z = mlt.reshape %s : tensor<4x8x64xf32> -> tensor<32x64xf32>
      %back = mlt.reshape %z : tensor<32x64xf32> -> tensor<4x8x64xf32>
      mlt.yield %back : tensor<4x8x64xf32>
    }
    // CHECK: %[[N:[^ ,:]+]] = mlt.rms_norm %[[R]], %{{[^ ,:]+}} eps = 1.000000e-05 : tensor<4x8x64xbf16>, tensor<64xbf16>
    // CHECK: %[[LOGITS:[^ ,:]+]] = mlt.matmul %[[N]], %[[TABLE]] transpose_rhs : tensor<4x8x64xbf16>, tensor<256x64xbf16>
    // CHECK: %[[LOSS:[^ ,:]+]] = mlt.cross_entropy %[[LOGITS]], %[[LABELS]] : tensor<4x8x256xbf16>, tensor<4x8xi32>
    // CHECK: %[[WIDE:[^ ,:]+]] = mlt.cast %[[N]] : tensor<4x8x64xbf16> -> tensor<4x8x64xf32>
    // CHECK: return %[[LOSS]], %[[WIDE]] : tensor<f32>, tensor<4x8x64xf32>
    %wn = mlt.load @"model.norm.weight" : tensor<64xf32>
    %n = mlt.rms_norm %r, %wn eps = 1.0e-05 : tensor<4x8x64xf32>, tensor<64xf32>
    %logits = mlt.matmul %n, %table transpose_rhs : tensor<4x8x64xf32>, tensor<256x64xf32>
    %loss = mlt.cross_entropy %logits, %labels : tensor<4x8x256xf32>, tensor<4x8xi32>
    %wide = mlt.cast %n : tensor<4x8x64xf32> -> tensor<4x8x64xf32>
    return %loss, %wide : tensor<f32>, tensor<4x8x64xf32>
  }
}
