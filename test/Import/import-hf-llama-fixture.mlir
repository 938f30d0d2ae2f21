// Tests that the shared reference model's config.json (transformers 5.x,
// rope_parameters; its pad_token_id null, left out) imports into a module
// that mlt-opt parses and verifies.

// REQUIRES: shared-fixtures
// RUN: mlt-translate --import-hf-llama %shared/fixtures/llama-ref-a/config.json | mlt-opt | FileCheck %s

// CHECK: #mlt.llama<vocab_size = 256, hidden_size = 64, intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2, head_dim = 16, max_position_embeddings = 64, rms_norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_word_embeddings = false, bos_token_id = 1, eos_token_id = 2>
// CHECK: mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 2 : tensor<64x64xf32>
// CHECK: mlt.param @"model.layers.{}.self_attn.k_proj.weight" layers 2 : tensor<32x64xf32>
// CHECK: mlt.param @"model.layers.{}.mlp.down_proj.weight" layers 2 : tensor<64x176xf32>
// CHECK: mlt.param @lm_head.weight : tensor<256x64xf32>
// CHECK: mlt.repeat %{{.+}} = 0 to 2
// CHECK: mlt.attention {{.*}} : tensor<?x?x4x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>
// CHECK: return {{.*}} : tensor<f32>
