// RUN: mlt-opt %s -split-input-file -mlt-annotate-layout="tp=2 dp=2 sequence-parallel" \
// RUN:   | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-annotate-layout="tp=2" \
// RUN:   | FileCheck %s --check-prefix=TP
// RUN: mlt-opt %s -split-input-file -mlt-annotate-layout="dp=4" \
// RUN:   | FileCheck %s --check-prefix=DP
// RUN: mlt-opt %s -split-input-file -mlt-annotate-layout="dp=2 cp=2 pp=2" \
// RUN:   | FileCheck %s --check-prefix=CP
// RUN: mlt-opt %s -split-input-file -mlt-annotate-layout \
// RUN:   | FileCheck %s --check-prefix=ONE

// Tests Megatron's layout on a one-layer model: the mesh (dp first, tp last,
// axes of size 1 left out), column-parallel q/k/v, gate and up projections,
// row-parallel o and down projections, vocabulary-parallel embedding table
// and LM head, whole norm weights; the batch of @forward's arguments split
// over dp; with sequence parallelism, the embedding's result and every
// residual add (inside the repeat too) constrained to a sequence split, the
// constraint replacing the value in all its uses; and that tp=1 dp=1 leaves
// the module as it is.
module attributes {mlt.model = #mlt.llama<vocab_size = 16, hidden_size = 8, intermediate_size = 12, num_layers = 1, num_heads = 2, num_kv_heads = 1, head_dim = 4, max_position_embeddings = 32, rms_norm_eps = 1.0e-05, rope_theta = 1.0e+04, tie_word_embeddings = false>} {
  mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
  mlt.param @"model.layers.{}.input_layernorm.weight" layers 1 : tensor<8xf32>
  mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 1 : tensor<8x8xf32>
  mlt.param @"model.layers.{}.self_attn.k_proj.weight" layers 1 : tensor<4x8xf32>
  mlt.param @"model.layers.{}.self_attn.v_proj.weight" layers 1 : tensor<4x8xf32>
  mlt.param @"model.layers.{}.self_attn.o_proj.weight" layers 1 : tensor<8x8xf32>
  mlt.param @"model.layers.{}.mlp.gate_proj.weight" layers 1 : tensor<12x8xf32>
  mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 1 : tensor<12x8xf32>
  mlt.param @"model.layers.{}.mlp.down_proj.weight" layers 1 : tensor<8x12xf32>
  mlt.param @"model.norm.weight" : tensor<8xf32>
  mlt.param @"lm_head.weight" : tensor<16x8xf32>
  func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<16x8xf32>
    %out = mlt.repeat %layer = 0 to 1 iter_args(%x = %h) -> (tensor<?x?x8xf32>) {
      %wo = mlt.load @"model.layers.{}.self_attn.o_proj.weight"[%layer] : tensor<8x8xf32>
      %o = mlt.matmul %x, %wo transpose_rhs : tensor<?x?x8xf32>, tensor<8x8xf32>
      %r = mlt.add %x, %o : tensor<?x?x8xf32>
      %wd = mlt.load @"model.layers.{}.mlp.down_proj.weight"[%layer] : tensor<8x12xf32>
      %wu = mlt.load @"model.layers.{}.mlp.up_proj.weight"[%layer] : tensor<12x8xf32>
      %u = mlt.matmul %r, %wu transpose_rhs : tensor<?x?x8xf32>, tensor<12x8xf32>
      %d = mlt.matmul %u, %wd transpose_rhs : tensor<?x?x12xf32>, tensor<8x12xf32>
      %r2 = mlt.add %r, %d : tensor<?x?x8xf32>
      mlt.yield %r2 : tensor<?x?x8xf32>
    }
    %w = mlt.load @"model.norm.weight" : tensor<8xf32>
    %n = mlt.rms_norm %out, %w eps = 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>
    %head = mlt.load @"lm_head.weight" : tensor<16x8xf32>
    %logits = mlt.matmul %n, %head transpose_rhs : tensor<?x?x8xf32>, tensor<16x8xf32>
    %loss = mlt.cross_entropy %logits, %labels : tensor<?x?x16xf32>, tensor<?x?xi32>
    return %loss : tensor<f32>
  }
}
// CHECK-LABEL: module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>, mlt.model = #mlt.llama<
// CHECK-NEXT: mlt.param @model.embed_tokens.weight {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<16x8xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.input_layernorm.weight" layers 1 : tensor<8xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 1 {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<8x8xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.self_attn.k_proj.weight" layers 1 {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<4x8xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.self_attn.v_proj.weight" layers 1 {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<4x8xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.self_attn.o_proj.weight" layers 1 {mlt.sharding = #mlt.sharding<[-, tp]>} : tensor<8x8xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.mlp.gate_proj.weight" layers 1 {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<12x8xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 1 {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<12x8xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.mlp.down_proj.weight" layers 1 {mlt.sharding = #mlt.sharding<[-, tp]>} : tensor<8x12xf32>
// CHECK-NEXT: mlt.param @model.norm.weight : tensor<8xf32>
// CHECK-NEXT: mlt.param @lm_head.weight {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<16x8xf32>
// CHECK-NEXT: func.func @forward(%[[TOKENS:[^:]+]]: tensor<?x?xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}, %[[LABELS:[^:]+]]: tensor<?x?xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}) -> tensor<f32> {
// CHECK: %[[H:[^ ]+]] = mlt.embedding %[[TOKENS]]
// CHECK-NEXT: %[[HS:[^ ]+]] = mlt.shard %[[H]] : tensor<?x?x8xf32> to #mlt.sharding<[?, tp, ?]>
// CHECK-NEXT: mlt.repeat %{{[^ ]+}} = 0 to 1 iter_args(%[[X:[^ ]+]] = %[[HS]])
// CHECK: %[[O:[^ ]+]] = mlt.matmul %[[X]],
// CHECK-NEXT: %[[R:[^ ]+]] = mlt.add %[[X]], %[[O]] : tensor<?x?x8xf32>
// CHECK-NEXT: %[[RS:[^ ]+]] = mlt.shard %[[R]] : tensor<?x?x8xf32> to #mlt.sharding<[?, tp, ?]>
// CHECK: %[[U:[^ ]+]] = mlt.matmul %[[RS]],
// CHECK-NEXT: %[[D:[^ ]+]] = mlt.matmul %[[U]],
// CHECK-NEXT: %[[R2:[^ ]+]] = mlt.add %[[RS]], %[[D]] : tensor<?x?x8xf32>
// CHECK-NEXT: %[[R2S:[^ ]+]] = mlt.shard %[[R2]] : tensor<?x?x8xf32> to #mlt.sharding<[?, tp, ?]>
// CHECK-NEXT: mlt.yield %[[R2S]] : tensor<?x?x8xf32>
// CHECK-NOT: mlt.shard
// CHECK: mlt.cross_entropy %{{[^ ]+}}, %[[LABELS]]

// TP-LABEL: module attributes {mlt.mesh = #mlt.mesh<tp = 2>, mlt.model
// TP: mlt.param @"model.layers.{}.self_attn.o_proj.weight" layers 1 {mlt.sharding = #mlt.sharding<[-, tp]>}
// TP: func.func @forward(%{{[^:]+}}: tensor<?x?xi32>, %{{[^:]+}}: tensor<?x?xi32>) -> tensor<f32>
// TP-NOT: mlt.shard

// DP-LABEL: module attributes {mlt.mesh = #mlt.mesh<dp = 4>, mlt.model
// DP-NOT: mlt.sharding<[tp
// DP: func.func @forward(%{{[^:]+}}: tensor<?x?xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}, %{{[^:]+}}: tensor<?x?xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}) -> tensor<f32>
// DP-NOT: mlt.shard

// Context parallelism: cp between dp and tp in the mesh, the sequence of
// the tokens and labels split over it.
// CP-LABEL: module attributes {mlt.mesh = #mlt.mesh<pp = 2, dp = 2, cp = 2>, mlt.model
// CP-NOT: mlt.sharding<[tp
// CP: func.func @forward(%{{[^:]+}}: tensor<?x?xi32> {mlt.sharding = #mlt.sharding<[dp, cp]>}, %{{[^:]+}}: tensor<?x?xi32> {mlt.sharding = #mlt.sharding<[dp, cp]>}) -> tensor<f32>
// CP-NOT: mlt.shard

// ONE-LABEL: module attributes {mlt.model
// ONE-NOT: mlt.sharding
// ONE-NOT: mlt.shard
// ONE-NOT: mlt.mesh
