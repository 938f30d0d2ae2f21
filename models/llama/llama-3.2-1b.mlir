// Llama-3.2-1B (meta-llama/Llama-3.2-1B; llama3 rope scaling, tied): forward pass and mean cross-entropy loss.
//
// Generated from configs/llama-3.2-1b.json by scripts/gen-models.sh; edit freely, but
// test/Models checks that this file still matches the importer's output.
// @forward takes (tokens, labels), both [batch, seq] i32; batch and seq are
// dynamic. The decoder layer is written once, inside mlt.repeat.
module attributes {mlt.model = #mlt.llama<vocab_size = 128256, hidden_size = 2048, intermediate_size = 8192, num_layers = 16, num_heads = 32, num_kv_heads = 8, head_dim = 64, max_position_embeddings = 131072, rms_norm_eps = 1.000000e-05 : f64, rope_theta = 5.000000e+05 : f64, tie_word_embeddings = true, rope_scaling = <factor = 3.200000e+01 : f64, low_freq_factor = 1.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, original_max_position_embeddings = 8192>, bos_token_id = 128000, eos_token_id = 128001>} {
  mlt.param @model.embed_tokens.weight : tensor<128256x2048xf32>
  mlt.param @"model.layers.{}.input_layernorm.weight" layers 16 : tensor<2048xf32>
  mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 16 : tensor<2048x2048xf32>
  mlt.param @"model.layers.{}.self_attn.k_proj.weight" layers 16 : tensor<512x2048xf32>
  mlt.param @"model.layers.{}.self_attn.v_proj.weight" layers 16 : tensor<512x2048xf32>
  mlt.param @"model.layers.{}.self_attn.o_proj.weight" layers 16 : tensor<2048x2048xf32>
  mlt.param @"model.layers.{}.post_attention_layernorm.weight" layers 16 : tensor<2048xf32>
  mlt.param @"model.layers.{}.mlp.gate_proj.weight" layers 16 : tensor<8192x2048xf32>
  mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 16 : tensor<8192x2048xf32>
  mlt.param @"model.layers.{}.mlp.down_proj.weight" layers 16 : tensor<2048x8192xf32>
  mlt.param @model.norm.weight : tensor<2048xf32>
  func.func @forward(%arg0: tensor<?x?xi32>, %arg1: tensor<?x?xi32>) -> tensor<f32> {
    %embed_tokens = mlt.load @model.embed_tokens.weight : tensor<128256x2048xf32>
    %embedding = mlt.embedding %arg0, %embed_tokens : tensor<?x?xi32>, tensor<128256x2048xf32>
    %0 = mlt.repeat %layer = 0 to 16 iter_args(%h = %embedding) -> (tensor<?x?x2048xf32>) {
      %input_layernorm = mlt.load @"model.layers.{}.input_layernorm.weight"[%layer] : tensor<2048xf32>
      %rms_norm_1 = mlt.rms_norm %h, %input_layernorm eps = 1.000000e-05 : tensor<?x?x2048xf32>, tensor<2048xf32>
      %q_proj = mlt.load @"model.layers.{}.self_attn.q_proj.weight"[%layer] : tensor<2048x2048xf32>
      %matmul_2 = mlt.matmul %rms_norm_1, %q_proj transpose_rhs : tensor<?x?x2048xf32>, tensor<2048x2048xf32>
      %k_proj = mlt.load @"model.layers.{}.self_attn.k_proj.weight"[%layer] : tensor<512x2048xf32>
      %matmul_3 = mlt.matmul %rms_norm_1, %k_proj transpose_rhs : tensor<?x?x2048xf32>, tensor<512x2048xf32>
      %v_proj = mlt.load @"model.layers.{}.self_attn.v_proj.weight"[%layer] : tensor<512x2048xf32>
      %matmul_4 = mlt.matmul %rms_norm_1, %v_proj transpose_rhs : tensor<?x?x2048xf32>, tensor<512x2048xf32>
      %reshape = mlt.reshape %matmul_2 : tensor<?x?x2048xf32> -> tensor<?x?x32x64xf32>
      %rope = mlt.rope %reshape theta = 5.000000e+05 scaling = <factor = 3.200000e+01 : f64, low_freq_factor = 1.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, original_max_position_embeddings = 8192> : tensor<?x?x32x64xf32>
      %reshape_5 = mlt.reshape %matmul_3 : tensor<?x?x512xf32> -> tensor<?x?x8x64xf32>
      %rope_6 = mlt.rope %reshape_5 theta = 5.000000e+05 scaling = <factor = 3.200000e+01 : f64, low_freq_factor = 1.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, original_max_position_embeddings = 8192> : tensor<?x?x8x64xf32>
      %reshape_7 = mlt.reshape %matmul_4 : tensor<?x?x512xf32> -> tensor<?x?x8x64xf32>
      %attention = mlt.attention %rope, %rope_6, %reshape_7 causal scale = 1.250000e-01 : tensor<?x?x32x64xf32>, tensor<?x?x8x64xf32>, tensor<?x?x8x64xf32>
      %reshape_8 = mlt.reshape %attention : tensor<?x?x32x64xf32> -> tensor<?x?x2048xf32>
      %o_proj = mlt.load @"model.layers.{}.self_attn.o_proj.weight"[%layer] : tensor<2048x2048xf32>
      %matmul_9 = mlt.matmul %reshape_8, %o_proj transpose_rhs : tensor<?x?x2048xf32>, tensor<2048x2048xf32>
      %add = mlt.add %h, %matmul_9 : tensor<?x?x2048xf32>
      %post_attention_layernorm = mlt.load @"model.layers.{}.post_attention_layernorm.weight"[%layer] : tensor<2048xf32>
      %rms_norm_10 = mlt.rms_norm %add, %post_attention_layernorm eps = 1.000000e-05 : tensor<?x?x2048xf32>, tensor<2048xf32>
      %gate_proj = mlt.load @"model.layers.{}.mlp.gate_proj.weight"[%layer] : tensor<8192x2048xf32>
      %matmul_11 = mlt.matmul %rms_norm_10, %gate_proj transpose_rhs : tensor<?x?x2048xf32>, tensor<8192x2048xf32>
      %up_proj = mlt.load @"model.layers.{}.mlp.up_proj.weight"[%layer] : tensor<8192x2048xf32>
      %matmul_12 = mlt.matmul %rms_norm_10, %up_proj transpose_rhs : tensor<?x?x2048xf32>, tensor<8192x2048xf32>
      %swiglu = mlt.swiglu %matmul_11, %matmul_12 : tensor<?x?x8192xf32>
      %down_proj = mlt.load @"model.layers.{}.mlp.down_proj.weight"[%layer] : tensor<2048x8192xf32>
      %matmul_13 = mlt.matmul %swiglu, %down_proj transpose_rhs : tensor<?x?x8192xf32>, tensor<2048x8192xf32>
      %add_14 = mlt.add %add, %matmul_13 : tensor<?x?x2048xf32>
      mlt.yield %add_14 : tensor<?x?x2048xf32>
    }
    %norm = mlt.load @model.norm.weight : tensor<2048xf32>
    %rms_norm = mlt.rms_norm %0, %norm eps = 1.000000e-05 : tensor<?x?x2048xf32>, tensor<2048xf32>
    %embed_tokens_0 = mlt.load @model.embed_tokens.weight : tensor<128256x2048xf32>
    %matmul = mlt.matmul %rms_norm, %embed_tokens_0 transpose_rhs : tensor<?x?x2048xf32>, tensor<128256x2048xf32>
    %cross_entropy = mlt.cross_entropy %matmul, %arg1 : tensor<?x?x128256xf32>, tensor<?x?xi32>
    return %cross_entropy : tensor<f32>
  }
}
