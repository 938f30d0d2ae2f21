// RUN: mlt-opt %s -mlt-specialize-shapes="batch=2 seq-len=4" \
// RUN:     -mlt-autodiff -mlt-attach-optimizer -cse -mlt-lower-to-runtime \
// RUN:   | FileCheck %s

// Tests that the lowering makes an attention gradient and the inverse
// ropes of its query and key gradients one attention_bwd_rope launch
// (attention_bwd's ints and float, then rope's: position_offset, scaling,
// original_max_position_embeddings; theta, factor, low_freq_factor,
// high_freq_factor) when each gradient's one user is an inverse rope and
// both rotate alike; the launch writes the ropes' results, and no rope is
// left in the backward. mlt-lower-to-runtime.mlir has ropes of two
// scalings, which stay separate launches.
// CHECK-LABEL: mlt_rt.program @micro_step
// CHECK: mlt_rt.launch "rope" [@[[Q0:t[0-9]+]]] -> [@[[QR0:t[0-9]+]]] ints [2, 4, 2, 4, 0, 0, 1, 32, -1]
// CHECK-NEXT: mlt_rt.launch "rope" [@[[K0:t[0-9]+]]] -> [@[[KR0:t[0-9]+]]] ints [2, 4, 1, 4, 0, 0, 1, 32, -1]
// CHECK-NEXT: mlt_rt.launch "attention_fwd" [@[[QR0]], @[[KR0]], @[[V0:t[0-9]+]]] -> [@[[O0:t[0-9]+]], @[[LSE0:t[0-9]+]]]
// CHECK: mlt_rt.launch "cross_entropy_fwd_bwd"
// CHECK-NOT: "rope"
// CHECK: mlt_rt.launch "attention_bwd_rope" [@{{t[0-9]+}}, @{{t[0-9]+}}, @{{t[0-9]+}}, @{{t[0-9]+}}, @{{t[0-9]+}}, @{{t[0-9]+}}] -> [@{{t[0-9]+}}, @{{t[0-9]+}}, @{{t[0-9]+}}] ints [2, 4, 4, 2, 1, 4, 1, -1, 0, 0, 0, 1, 32] floats [5.000000e-01, 1.000000e+04, 8.000000e+00, 1.000000e+00, 4.000000e+00]
// CHECK-NOT: "rope"
// CHECK: mlt_rt.launch "attention_bwd_rope" [@{{t[0-9]+}}, @[[QR0]], @[[KR0]], @[[V0]], @[[O0]], @[[LSE0]]] -> [@[[DQ0:t[0-9]+]], @[[DK0:t[0-9]+]], @{{t[0-9]+}}]
// CHECK-NOT: "rope"
// CHECK: mlt_rt.launch "matmul_accumulate" [@[[DK0]], @{{t[0-9]+}}] -> [@"grad:model.layers.0.self_attn.k_proj.weight"]
// CHECK: }
module {
  mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
  mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 2 : tensor<8x8xf32>
  mlt.param @"model.layers.{}.self_attn.k_proj.weight" layers 2 : tensor<4x8xf32>
  mlt.param @"model.layers.{}.self_attn.v_proj.weight" layers 2 : tensor<4x8xf32>
  func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<16x8xf32>
    %r = mlt.repeat %layer = 0 to 2 iter_args(%x = %h) -> (tensor<?x?x8xf32>) {
      %wq = mlt.load @"model.layers.{}.self_attn.q_proj.weight"[%layer] : tensor<8x8xf32>
      %wk = mlt.load @"model.layers.{}.self_attn.k_proj.weight"[%layer] : tensor<4x8xf32>
      %wv = mlt.load @"model.layers.{}.self_attn.v_proj.weight"[%layer] : tensor<4x8xf32>
      %q = mlt.matmul %x, %wq transpose_rhs : tensor<?x?x8xf32>, tensor<8x8xf32>
      %k = mlt.matmul %x, %wk transpose_rhs : tensor<?x?x8xf32>, tensor<4x8xf32>
      %v = mlt.matmul %x, %wv transpose_rhs : tensor<?x?x8xf32>, tensor<4x8xf32>
      %q4 = mlt.reshape %q : tensor<?x?x8xf32> -> tensor<?x?x2x4xf32>
      %k4 = mlt.reshape %k : tensor<?x?x4xf32> -> tensor<?x?x1x4xf32>
      %v4 = mlt.reshape %v : tensor<?x?x4xf32> -> tensor<?x?x1x4xf32>
      %qr = mlt.rope %q4 theta = 1.0e+04 scaling = <factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 32> : tensor<?x?x2x4xf32>
      %kr = mlt.rope %k4 theta = 1.0e+04 scaling = <factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 32> : tensor<?x?x1x4xf32>
      %o = mlt.attention %qr, %kr, %v4 causal scale = 0.5 : tensor<?x?x2x4xf32>, tensor<?x?x1x4xf32>, tensor<?x?x1x4xf32>
      %o3 = mlt.reshape %o : tensor<?x?x2x4xf32> -> tensor<?x?x8xf32>
      %y = mlt.add %x, %o3 : tensor<?x?x8xf32>
      mlt.yield %y : tensor<?x?x8xf32>
    }
    %logits = mlt.matmul %r, %table transpose_rhs : tensor<?x?x8xf32>, tensor<16x8xf32>
    %loss = mlt.cross_entropy %logits, %labels : tensor<?x?x16xf32>, tensor<?x?xi32>
    return %loss : tensor<f32>
  }
}
