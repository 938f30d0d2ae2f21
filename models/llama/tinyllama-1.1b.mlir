// TinyLlama-1.1B (TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T): forward pass and mean cross-entropy loss.
//
// Generated from configs/tinyllama-1.1b.json by scripts/gen-models.sh; edit freely, but
// test/Models checks that this file still matches the importer's output.
// @forward takes (tokens, labels), both [batch, seq] i32; batch and seq are
// dynamic. The decoder layer is written once, inside mlt.repeat.
module attributes {mlt.model = #mlt.llama<vocab_size = 32000, hidden_size = 2048, intermediate_size = 5632, num_layers = 22, num_heads = 32, num_kv_heads = 4, head_dim = 64, max_position_embeddings = 2048, rms_norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_word_embeddings = false, bos_token_id = 1, eos_token_id = 2>} {
  mlt.param @model.embed_tokens.weight : tensor<32000x2048xf32>
  mlt.param @"model.layers.{}.input_layernorm.weight" layers 22 : tensor<2048xf32>
  mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 22 : tensor<2048x2048xf32>
  mlt.param @"model.layers.{}.self_attn.k_proj.weight" layers 22 : tensor<256x2048xf32>
  mlt.param @"model.layers.{}.self_attn.v_proj.weight" layers 22 : tensor<256x2048xf32>
  mlt.param @"model.layers.{}.self_attn.o_proj.weight" layers 22 : tensor<2048x2048xf32>
  mlt.param @"model.layers.{}.post_attention_layernorm.weight" layers 22 : tensor<2048xf32>
  mlt.param @"model.layers.{}.mlp.gate_proj.weight" layers 22 : tensor<5632x2048xf32>
  mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 22 : tensor<5632x2048xf32>
  mlt.param @"model.layers.{}.mlp.down_proj.weight" layers 22 : tensor<2048x5632xf32>
  mlt.param @model.norm.weight : tensor<2048xf32>
  mlt.param @lm_head.weight : tensor<32000x2048xf32>
  func.func @forward(%arg0: tensor<?x?xi32>, %arg1: tensor<?x?xi32>) -> tensor<f32> {
    %embed_tokens = mlt.load @model.embed_tokens.weight : tensor<32000x2048xf32>
    %embedding = mlt.embedding %arg0, %embed_tokens : tensor<?x?xi32>, tensor<32000x2048xf32>
    %0 = mlt.repeat %layer = 0 to 22 iter_args(%h = %embedding) -> (tensor<?x?x2048xf32>) {
      %input_layernorm = mlt.load @"model.layers.{}.input_layernorm.weight"[%layer] : tensor<2048xf32>
      %rms_norm_0 = mlt.rms_norm %h, %input_layernorm eps = 1.000000e-05 : tensor<?x?x2048xf32>, tensor<2048xf32>
      %q_proj = mlt.load @"model.layers.{}.self_attn.q_proj.weight"[%layer] : tensor<2048x2048xf32>
      %matmul_1 = mlt.matmul %rms_norm_0, %q_proj transpose_rhs : tensor<?x?x2048xf32>, tensor<2048x2048xf32>
      %k_proj = mlt.load @"model.layers.{}.self_attn.k_proj.weight"[%layer] : tensor<256x2048xf32>
      %matmul_2 = mlt.matmul %rms_norm_0, %k_proj transpose_rhs : tensor<?x?x2048xf32>, tensor<256x2048xf32>
      %v_proj = mlt.load @"model.layers.{}.self_attn.v_proj.weight"[%layer] : tensor<256x2048xf32>
      %matmul_3 = mlt.matmul %rms_norm_0, %v_proj transpose_rhs : tensor<?x?x2048xf32>, tensor<256x2048xf32>
      %reshape = mlt.reshape %matmul_1 : tensor<?x?x2048xf32> -> tensor<?x?x32x64xf32>
      %rope = mlt.rope %reshape theta = 1.000000e+04 : tensor<?x?x32x64xf32>
      %reshape_4 = mlt.reshape %matmul_2 : tensor<?x?x256xf32> -> tensor<?x?x4x64xf32>
      %rope_5 = mlt.rope %reshape_4 theta = 1.000000e+04 : tensor<?x?x4x64xf32>
      %reshape_6 = mlt.reshape %matmul_3 : tensor<?x?x256xf32> -> tensor<?x?x4x64xf32>
      %attention = mlt.attention %rope, %rope_5, %reshape_6 causal scale = 1.250000e-01 : tensor<?x?x32x64xf32>, tensor<?x?x4x64xf32>, tensor<?x?x4x64xf32>
      %reshape_7 = mlt.reshape %attention : tensor<?x?x32x64xf32> -> tensor<?x?x2048xf32>
      %o_proj = mlt.load @"model.layers.{}.self_attn.o_proj.weight"[%layer] : tensor<2048x2048xf32>
      %matmul_8 = mlt.matmul %reshape_7, %o_proj transpose_rhs : tensor<?x?x2048xf32>, tensor<2048x2048xf32>
      %add = mlt.add %h, %matmul_8 : tensor<?x?x2048xf32>
      %post_attention_layernorm = mlt.load @"model.layers.{}.post_attention_layernorm.weight"[%layer] : tensor<2048xf32>
      %rms_norm_9 = mlt.rms_norm %add, %post_attention_layernorm eps = 1.000000e-05 : tensor<?x?x2048xf32>, tensor<2048xf32>
      %gate_proj = mlt.load @"model.layers.{}.mlp.gate_proj.weight"[%layer] : tensor<5632x2048xf32>
      %matmul_10 = mlt.matmul %rms_norm_9, %gate_proj transpose_rhs : tensor<?x?x2048xf32>, tensor<5632x2048xf32>
      %up_proj = mlt.load @"model.layers.{}.mlp.up_proj.weight"[%layer] : tensor<5632x2048xf32>
      %matmul_11 = mlt.matmul %rms_norm_9, %up_proj transpose_rhs : tensor<?x?x2048xf32>, tensor<5632x2048xf32>
      %swiglu = mlt.swiglu %matmul_10, %matmul_11 : tensor<?x?x5632xf32>
      %down_proj = mlt.load @"model.layers.{}.mlp.down_proj.weight"[%layer] : tensor<2048x5632xf32>
      %matmul_12 = mlt.matmul %swiglu, %down_proj transpose_rhs : tensor<?x?x5632xf32>, tensor<2048x5632xf32>
      %add_13 = mlt.add %add, %matmul_12 : tensor<?x?x2048xf32>
      mlt.yield %add_13 : tensor<?x?x2048xf32>
    }
    %norm = mlt.load @model.norm.weight : tensor<2048xf32>
    %rms_norm = mlt.rms_norm %0, %norm eps = 1.000000e-05 : tensor<?x?x2048xf32>, tensor<2048xf32>
    %lm_head = mlt.load @lm_head.weight : tensor<32000x2048xf32>
    %matmul = mlt.matmul %rms_norm, %lm_head transpose_rhs : tensor<?x?x2048xf32>, tensor<32000x2048xf32>
    %cross_entropy = mlt.cross_entropy %matmul, %arg1 : tensor<?x?x32000xf32>, tensor<?x?xi32>
    return %cross_entropy : tensor<f32>
  }
}
