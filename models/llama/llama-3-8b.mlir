// LLaMA-3-8B (meta-llama/Meta-Llama-3-8B): forward pass and mean cross-entropy loss.
//
// Generated from configs/llama-3-8b.json by scripts/gen-models.sh; edit freely, but
// test/Models checks that this file still matches the importer's output.
// @forward takes (tokens, labels), both [batch, seq] i32; batch and seq are
// dynamic. The decoder layer is written once, inside mlt.repeat.
module attributes {mlt.model = #mlt.llama<vocab_size = 128256, hidden_size = 4096, intermediate_size = 14336, num_layers = 32, num_heads = 32, num_kv_heads = 8, head_dim = 128, max_position_embeddings = 8192, rms_norm_eps = 1.000000e-05 : f64, rope_theta = 5.000000e+05 : f64, tie_word_embeddings = false, bos_token_id = 128000, eos_token_id = 128001>} {
  mlt.param @model.embed_tokens.weight : tensor<128256x4096xf32>
  mlt.param @"model.layers.{}.input_layernorm.weight" layers 32 : tensor<4096xf32>
  mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 32 : tensor<4096x4096xf32>
  mlt.param @"model.layers.{}.self_attn.k_proj.weight" layers 32 : tensor<1024x4096xf32>
  mlt.param @"model.layers.{}.self_attn.v_proj.weight" layers 32 : tensor<1024x4096xf32>
  mlt.param @"model.layers.{}.self_attn.o_proj.weight" layers 32 : tensor<4096x4096xf32>
  mlt.param @"model.layers.{}.post_attention_layernorm.weight" layers 32 : tensor<4096xf32>
  mlt.param @"model.layers.{}.mlp.gate_proj.weight" layers 32 : tensor<14336x4096xf32>
  mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 32 : tensor<14336x4096xf32>
  mlt.param @"model.layers.{}.mlp.down_proj.weight" layers 32 : tensor<4096x14336xf32>
  mlt.param @model.norm.weight : tensor<4096xf32>
  mlt.param @lm_head.weight : tensor<128256x4096xf32>
  func.func @forward(%arg0: tensor<?x?xi32>, %arg1: tensor<?x?xi32>) -> tensor<f32> {
    %embed_tokens = mlt.load @model.embed_tokens.weight : tensor<128256x4096xf32>
    %embedding = mlt.embedding %arg0, %embed_tokens : tensor<?x?xi32>, tensor<128256x4096xf32>
    %0 = mlt.repeat %layer = 0 to 32 iter_args(%h = %embedding) -> (tensor<?x?x4096xf32>) {
      %input_layernorm = mlt.load @"model.layers.{}.input_layernorm.weight"[%layer] : tensor<4096xf32>
      %rms_norm_0 = mlt.rms_norm %h, %input_layernorm eps = 1.000000e-05 : tensor<?x?x4096xf32>, tensor<4096xf32>
      %q_proj = mlt.load @"model.layers.{}.self_attn.q_proj.weight"[%layer] : tensor<4096x4096xf32>
      %matmul_1 = mlt.matmul %rms_norm_0, %q_proj transpose_rhs : tensor<?x?x4096xf32>, tensor<4096x4096xf32>
      %k_proj = mlt.load @"model.layers.{}.self_attn.k_proj.weight"[%layer] : tensor<1024x4096xf32>
      %matmul_2 = mlt.matmul %rms_norm_0, %k_proj transpose_rhs : tensor<?x?x4096xf32>, tensor<1024x4096xf32>
      %v_proj = mlt.load @"model.layers.{}.self_attn.v_proj.weight"[%layer] : tensor<1024x4096xf32>
      %matmul_3 = mlt.matmul %rms_norm_0, %v_proj transpose_rhs : tensor<?x?x4096xf32>, tensor<1024x4096xf32>
      %reshape = mlt.reshape %matmul_1 : tensor<?x?x4096xf32> -> tensor<?x?x32x128xf32>
      %rope = mlt.rope %reshape theta = 5.000000e+05 : tensor<?x?x32x128xf32>
      %reshape_4 = mlt.reshape %matmul_2 : tensor<?x?x1024xf32> -> tensor<?x?x8x128xf32>
      %rope_5 = mlt.rope %reshape_4 theta = 5.000000e+05 : tensor<?x?x8x128xf32>
      %reshape_6 = mlt.reshape %matmul_3 : tensor<?x?x1024xf32> -> tensor<?x?x8x128xf32>
      %attention = mlt.attention %rope, %rope_5, %reshape_6 causal scale = 0.088388347648318433 : tensor<?x?x32x128xf32>, tensor<?x?x8x128xf32>, tensor<?x?x8x128xf32>
      %reshape_7 = mlt.reshape %attention : tensor<?x?x32x128xf32> -> tensor<?x?x4096xf32>
      %o_proj = mlt.load @"model.layers.{}.self_attn.o_proj.weight"[%layer] : tensor<4096x4096xf32>
      %matmul_8 = mlt.matmul %reshape_7, %o_proj transpose_rhs : tensor<?x?x4096xf32>, tensor<4096x4096xf32>
      %add = mlt.add %h, %matmul_8 : tensor<?x?x4096xf32>
      %post_attention_layernorm = mlt.load @"model.layers.{}.post_attention_layernorm.weight"[%layer] : tensor<4096xf32>
      %rms_norm_9 = mlt.rms_norm %add, %post_attention_layernorm eps = 1.000000e-05 : tensor<?x?x4096xf32>, tensor<4096xf32>
      %gate_proj = mlt.load @"model.layers.{}.mlp.gate_proj.weight"[%layer] : tensor<14336x4096xf32>
      %matmul_10 = mlt.matmul %rms_norm_9, %gate_proj transpose_rhs : tensor<?x?x4096xf32>, tensor<14336x4096xf32>
      %up_proj = mlt.load @"model.layers.{}.mlp.up_proj.weight"[%layer] : tensor<14336x4096xf32>
      %matmul_11 = mlt.matmul %rms_norm_9, %up_proj transpose_rhs : tensor<?x?x4096xf32>, tensor<14336x4096xf32>
      %swiglu = mlt.swiglu %matmul_10, %matmul_11 : tensor<?x?x14336xf32>
      %down_proj = mlt.load @"model.layers.{}.mlp.down_proj.weight"[%layer] : tensor<4096x14336xf32>
      %matmul_12 = mlt.matmul %swiglu, %down_proj transpose_rhs : tensor<?x?x14336xf32>, tensor<4096x14336xf32>
      %add_13 = mlt.add %add, %matmul_12 : tensor<?x?x4096xf32>
      mlt.yield %add_13 : tensor<?x?x4096xf32>
    }
    %norm = mlt.load @model.norm.weight : tensor<4096xf32>
    %rms_norm = mlt.rms_norm %0, %norm eps = 1.000000e-05 : tensor<?x?x4096xf32>, tensor<4096xf32>
    %lm_head = mlt.load @lm_head.weight : tensor<128256x4096xf32>
    %matmul = mlt.matmul %rms_norm, %lm_head transpose_rhs : tensor<?x?x4096xf32>, tensor<128256x4096xf32>
    %cross_entropy = mlt.cross_entropy %matmul, %arg1 : tensor<?x?x128256xf32>, tensor<?x?xi32>
    return %cross_entropy : tensor<f32>
  }
}
