// Tests that --import-hf-llama turns a transformers 4 config.json of a GQA
// model into the model module: the config attribute (with the special-token
// ids, which no op reads), one declaration per HF
// parameter (per-layer ones with the layer count), the decoder layer in a
// repeat over every layer, queries split into 6 heads and keys and values into
// 2, and an untied lm_head.

// RUN: mlt-translate --import-hf-llama %S/Inputs/gqa.json | FileCheck %s
// RUN: mlt-translate --import-hf-llama %S/Inputs/gqa.json | mlt-opt | FileCheck %s

// CHECK: module attributes {mlt.model = #mlt.llama<vocab_size = 320, hidden_size = 96, intermediate_size = 256, num_layers = 3, num_heads = 6, num_kv_heads = 2, head_dim = 16, max_position_embeddings = 1024, rms_norm_eps = 1.000000e-05 : f64, rope_theta = 5.000000e+05 : f64, tie_word_embeddings = false, bos_token_id = 1, eos_token_id = 2>}

// CHECK-NEXT: mlt.param @model.embed_tokens.weight : tensor<320x96xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.input_layernorm.weight" layers 3 : tensor<96xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 3 : tensor<96x96xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.self_attn.k_proj.weight" layers 3 : tensor<32x96xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.self_attn.v_proj.weight" layers 3 : tensor<32x96xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.self_attn.o_proj.weight" layers 3 : tensor<96x96xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.post_attention_layernorm.weight" layers 3 : tensor<96xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.mlp.gate_proj.weight" layers 3 : tensor<256x96xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 3 : tensor<256x96xf32>
// CHECK-NEXT: mlt.param @"model.layers.{}.mlp.down_proj.weight" layers 3 : tensor<96x256xf32>
// CHECK-NEXT: mlt.param @model.norm.weight : tensor<96xf32>
// CHECK-NEXT: mlt.param @lm_head.weight : tensor<320x96xf32>

// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[TOKENS:[[:alnum:]_]+]]: tensor<?x?xi32>, %[[LABELS:[[:alnum:]_]+]]: tensor<?x?xi32>) -> tensor<f32>
// CHECK: %[[TABLE:[[:alnum:]_]+]] = mlt.load @model.embed_tokens.weight : tensor<320x96xf32>
// CHECK: %[[X:[[:alnum:]_]+]] = mlt.embedding %[[TOKENS]], %[[TABLE]]
// CHECK: %[[OUT:[[:alnum:]_]+]] = mlt.repeat %[[L:[[:alnum:]_]+]] = 0 to 3 iter_args(%[[H:[[:alnum:]_]+]] = %[[X]]) -> (tensor<?x?x96xf32>) {
// CHECK: mlt.load @"model.layers.{}.input_layernorm.weight"[%[[L]]] : tensor<96xf32>
// CHECK: mlt.rms_norm %[[H]], {{.*}} eps = 1.000000e-05

// The GQA head split: 96 = 6 x 16 for queries, 32 = 2 x 16 for keys and values.
// CHECK: %[[Q:[[:alnum:]_]+]] = mlt.reshape %{{.+}} : tensor<?x?x96xf32> -> tensor<?x?x6x16xf32>
// CHECK: %[[QR:[[:alnum:]_]+]] = mlt.rope %[[Q]] theta = 5.000000e+05 : tensor<?x?x6x16xf32>
// CHECK: %[[K:[[:alnum:]_]+]] = mlt.reshape %{{.+}} : tensor<?x?x32xf32> -> tensor<?x?x2x16xf32>
// CHECK: %[[KR:[[:alnum:]_]+]] = mlt.rope %[[K]] theta = 5.000000e+05 : tensor<?x?x2x16xf32>
// CHECK: %[[V:[[:alnum:]_]+]] = mlt.reshape %{{.+}} : tensor<?x?x32xf32> -> tensor<?x?x2x16xf32>
// CHECK: %[[A:[[:alnum:]_]+]] = mlt.attention %[[QR]], %[[KR]], %[[V]] causal scale = 2.500000e-01 : tensor<?x?x6x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>
// CHECK: mlt.reshape %[[A]] : tensor<?x?x6x16xf32> -> tensor<?x?x96xf32>
// CHECK: mlt.load @"model.layers.{}.self_attn.o_proj.weight"[%[[L]]]
// CHECK: mlt.swiglu
// CHECK: mlt.load @"model.layers.{}.mlp.down_proj.weight"[%[[L]]]
// CHECK: mlt.yield %{{.+}} : tensor<?x?x96xf32>
// CHECK-NEXT: }

// CHECK: %[[NORM:[[:alnum:]_]+]] = mlt.load @model.norm.weight : tensor<96xf32>
// CHECK: %[[N:[[:alnum:]_]+]] = mlt.rms_norm %[[OUT]], %[[NORM]]
// CHECK: %[[HEAD:[[:alnum:]_]+]] = mlt.load @lm_head.weight : tensor<320x96xf32>
// CHECK: %[[LOGITS:[[:alnum:]_]+]] = mlt.matmul %[[N]], %[[HEAD]] transpose_rhs : tensor<?x?x96xf32>, tensor<320x96xf32>
// CHECK: %[[LOSS:[[:alnum:]_]+]] = mlt.cross_entropy %[[LOGITS]], %[[LABELS]] : tensor<?x?x320xf32>, tensor<?x?xi32>
// CHECK: return %[[LOSS]] : tensor<f32>
