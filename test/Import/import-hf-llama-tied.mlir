// Tests that a transformers 5 config.json (rotary base in rope_parameters, no
// num_key_value_heads, tied embeddings) imports with the nested rope_theta, as
// many key/value heads as query heads, no lm_head.weight, and the head reading
// model.embed_tokens.weight.

// RUN: mlt-translate --import-hf-llama %S/Inputs/tied.json | FileCheck %s --implicit-check-not=lm_head

// CHECK: #mlt.llama<vocab_size = 128, hidden_size = 32, intermediate_size = 88, num_layers = 1, num_heads = 2, num_kv_heads = 2, head_dim = 16, max_position_embeddings = 128, {{.*}} rope_theta = 2.500000e+05 : f64, tie_word_embeddings = true>
// CHECK: mlt.param @model.embed_tokens.weight : tensor<128x32xf32>
// CHECK: mlt.param @"model.layers.{}.self_attn.k_proj.weight" layers 1 : tensor<32x32xf32>
// CHECK: mlt.param @model.norm.weight : tensor<32xf32>
// CHECK-NEXT: func.func @forward

// CHECK: mlt.repeat %{{.+}} = 0 to 1
// CHECK: mlt.reshape %{{.+}} : tensor<?x?x32xf32> -> tensor<?x?x2x16xf32>
// CHECK: mlt.rope %{{.+}} theta = 2.500000e+05
// CHECK: mlt.attention {{.*}} : tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>
// CHECK: mlt.yield

// CHECK: %[[N:[[:alnum:]_]+]] = mlt.rms_norm
// CHECK: %[[HEAD:[[:alnum:]_]+]] = mlt.load @model.embed_tokens.weight : tensor<128x32xf32>
// CHECK: %[[LOGITS:[[:alnum:]_]+]] = mlt.matmul %[[N]], %[[HEAD]] transpose_rhs : tensor<?x?x32xf32>, tensor<128x32xf32>
// CHECK: mlt.cross_entropy %[[LOGITS]]
