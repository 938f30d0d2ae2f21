// RUN: mlt-opt %s -mlt-truncate-layers="layers=1" | FileCheck %s
// RUN: mlt-opt %s -mlt-truncate-layers="layers=3" | FileCheck %s --check-prefix=ALL

// Tests that the model keeps its first layers: the repeat's bound, every
// per-layer family and the configuration's num_layers say so; the plain
// parameters, the embedding and the head stay. Keeping every layer changes
// nothing.
// CHECK: mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64, intermediate_size = 176, num_layers = 1,
// CHECK: mlt.param @model.embed_tokens.weight : tensor<256x64xf32>
// CHECK: mlt.param @"model.layers.{}.input_layernorm.weight" layers 1 : tensor<64xf32>
// CHECK: mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 1 : tensor<176x64xf32>
// CHECK: mlt.repeat %{{.*}} = 0 to 1 iter_args
// CHECK: mlt.load @lm_head.weight
// ALL: num_layers = 3,
// ALL: layers 3 : tensor<64xf32>
// ALL: mlt.repeat %{{.*}} = 0 to 3 iter_args
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64, intermediate_size = 176, num_layers = 3, num_heads = 4, num_kv_heads = 2, head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_word_embeddings = false>} {
  mlt.param @"model.embed_tokens.weight" : tensor<256x64xf32>
  mlt.param @"model.layers.{}.input_layernorm.weight" layers 3 : tensor<64xf32>
  mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 3 : tensor<176x64xf32>
  mlt.param @"lm_head.weight" : tensor<256x64xf32>
  func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<?x?x256xf32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<256x64xf32>
    %x = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<256x64xf32>
    %r = mlt.repeat %layer = 0 to 3 iter_args(%h = %x) -> (tensor<?x?x64xf32>) {
      %w = mlt.load @"model.layers.{}.input_layernorm.weight"[%layer] : tensor<64xf32>
      %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x64xf32>, tensor<64xf32>
      mlt.yield %n : tensor<?x?x64xf32>
    }
    %head = mlt.load @"lm_head.weight" : tensor<256x64xf32>
    %logits = mlt.matmul %r, %head transpose_rhs : tensor<?x?x64xf32>, tensor<256x64xf32>
    return %logits : tensor<?x?x256xf32>
  }
}
