// Tests that --dtype sets the element type of the parameters and activations
// while the loss stays float32 (float64 for f64), and that an unknown dtype is
// an error naming it.

// RUN: mlt-translate --import-hf-llama --dtype bf16 %S/Inputs/gqa.json | FileCheck %s --check-prefix=BF16
// RUN: mlt-translate --import-hf-llama --dtype bf16 %S/Inputs/gqa.json | mlt-opt > /dev/null
// RUN: mlt-translate --import-hf-llama --dtype f64 %S/Inputs/gqa.json | FileCheck %s --check-prefix=F64
// RUN: not mlt-translate --import-hf-llama --dtype fp8 %S/Inputs/gqa.json 2>&1 | FileCheck %s --check-prefix=BAD

// BF16: mlt.param @model.embed_tokens.weight : tensor<320x96xbf16>
// BF16: mlt.param @"model.layers.{}.self_attn.k_proj.weight" layers 3 : tensor<32x96xbf16>
// BF16: mlt.param @lm_head.weight : tensor<320x96xbf16>
// BF16: func.func @forward(%{{.+}}: tensor<?x?xi32>, %{{.+}}: tensor<?x?xi32>) -> tensor<f32>
// BF16: mlt.repeat {{.*}} -> (tensor<?x?x96xbf16>)
// BF16: mlt.attention {{.*}} : tensor<?x?x6x16xbf16>, tensor<?x?x2x16xbf16>, tensor<?x?x2x16xbf16>
// BF16: mlt.cross_entropy {{.*}} : tensor<?x?x320xbf16>, tensor<?x?xi32>
// BF16: return {{.*}} : tensor<f32>

// F64: mlt.param @model.embed_tokens.weight : tensor<320x96xf64>
// F64: func.func @forward({{.*}}) -> tensor<f64>
// F64: return {{.*}} : tensor<f64>

// BAD: error: unknown dtype 'fp8'
