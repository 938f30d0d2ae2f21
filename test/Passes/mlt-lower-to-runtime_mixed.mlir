// RUN: mlt-opt %s -mlt-specialize-shapes="batch=2 seq-len=4" -mlt-mixed-precision \
// RUN:     -mlt-autodiff="microbatches=2" -mlt-attach-optimizer -cse -mlt-lower-to-runtime \
// RUN:   | FileCheck %s

// Tests the lowering of a mixed-precision (bf16) program: the f32 state
// buffers stay, each parameter gets one bf16 parameter_copy buffer that the
// forward and backward read, activations are bf16 and the loss f32, the
// weight gradients come out of their kernels in f32 (rms_norm_bwd's dw,
// embedding_bwd) and accumulate into the f32 gradients, or are added there
// by the product itself (matmul_accumulate, bf16 operands), AdamW writes each
// updated parameter's copy in the same pass, and refresh_parameter_copies
// casts every parameter to its copy for the runtime.
// CHECK-DAG: mlt_rt.buffer @"param:model.embed_tokens.weight" parameter {decay, parameter = "model.embed_tokens.weight"} : tensor<16x8xf32>
// CHECK-DAG: mlt_rt.buffer @"grad:model.embed_tokens.weight" gradient {parameter = "model.embed_tokens.weight"} : tensor<16x8xf32>
// CHECK-DAG: mlt_rt.buffer @"exp_avg:model.norm.weight" optimizer_state {parameter = "model.norm.weight"} : tensor<8xf32>
// CHECK-DAG: mlt_rt.buffer @"param_bf16:model.embed_tokens.weight" parameter_copy {parameter = "model.embed_tokens.weight"} : tensor<16x8xbf16>
// CHECK-DAG: mlt_rt.buffer @"param_bf16:model.norm.weight" parameter_copy {parameter = "model.norm.weight"} : tensor<8xbf16>
// CHECK-DAG: mlt_rt.buffer @"param_bf16:lm_head.weight" parameter_copy {parameter = "lm_head.weight"} : tensor<16x8xbf16>
// CHECK-DAG: mlt_rt.buffer @loss output per_microbatch 2 : tensor<f32>
// CHECK-DAG: mlt_rt.buffer @t0 temporary : tensor<2x4x8xbf16>
// CHECK-DAG: mlt_rt.buffer @t2 temporary : tensor<2x4x16xbf16>
// CHECK-DAG: mlt_rt.buffer @t6 temporary : tensor<8xf32>
// CHECK-DAG: mlt_rt.buffer @t7 temporary : tensor<16x8xf32>
// CHECK-LABEL: mlt_rt.program @micro_step backward_start 3 {
// CHECK-NEXT: mlt_rt.launch "embedding_fwd" [@tokens, @"param_bf16:model.embed_tokens.weight"] -> [@t0] ints [8, 16, 8]
// CHECK-NEXT: mlt_rt.launch "rms_norm_fwd" [@t0, @"param_bf16:model.norm.weight"] -> [@t1] ints [8, 8] floats [1.000000e-05]
// CHECK-NEXT: mlt_rt.launch "matmul" [@t1, @"param_bf16:lm_head.weight"] -> [@t2] ints [1, 8, 16, 8, 0, 1, 0]
// CHECK-NEXT: mlt_rt.launch "cross_entropy_fwd_bwd" [@{{const[0-9]+}}, @t2, @labels] -> [@loss, @t3] ints [8, 16, 8]
// CHECK-NEXT: mlt_rt.launch "matmul" [@t3, @"param_bf16:lm_head.weight"] -> [@t4] ints [1, 8, 8, 16, 0, 0, 0]
// CHECK-NEXT: mlt_rt.launch "matmul_accumulate" [@t3, @t1] -> [@"grad:lm_head.weight"] ints [1, 16, 8, 8, 1, 0, 0]
// CHECK-NEXT: mlt_rt.launch "rms_norm_bwd" [@t4, @t0, @"param_bf16:model.norm.weight"] -> [@t5, @t6] ints [8, 8] floats [1.000000e-05]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@t6] -> [@"grad:model.norm.weight"] ints [8]
// CHECK-NEXT: mlt_rt.launch "embedding_bwd" [@tokens, @t5] -> [@t7] ints [8, 16, 8]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@t7] -> [@"grad:model.embed_tokens.weight"] ints [128]
// CHECK-NEXT: }
// CHECK-LABEL: mlt_rt.program @optimizer_step {
// CHECK: mlt_rt.launch "adamw" {{.*}} -> [@"param:model.embed_tokens.weight", @"exp_avg:model.embed_tokens.weight", @"exp_avg_sq:model.embed_tokens.weight", @"param_bf16:model.embed_tokens.weight"] ints [128, 1]
// CHECK-NEXT: mlt_rt.launch "adamw" {{.*}} -> [@"param:model.norm.weight", @"exp_avg:model.norm.weight", @"exp_avg_sq:model.norm.weight", @"param_bf16:model.norm.weight"] ints [8, 0]
// CHECK-NEXT: mlt_rt.launch "adamw" {{.*}} -> [@"param:lm_head.weight", @"exp_avg:lm_head.weight", @"exp_avg_sq:lm_head.weight", @"param_bf16:lm_head.weight"] ints [128, 1]
// CHECK-NEXT: }
// CHECK-LABEL: mlt_rt.program @refresh_parameter_copies {
// CHECK-NEXT: mlt_rt.launch "cast" [@"param:model.embed_tokens.weight"] -> [@"param_bf16:model.embed_tokens.weight"] ints [128]
// CHECK-NEXT: mlt_rt.launch "cast" [@"param:model.norm.weight"] -> [@"param_bf16:model.norm.weight"] ints [8]
// CHECK-NEXT: mlt_rt.launch "cast" [@"param:lm_head.weight"] -> [@"param_bf16:lm_head.weight"] ints [128]
// CHECK-NEXT: }
module attributes {mlt.model = #mlt.llama<vocab_size = 16, hidden_size = 8, intermediate_size = 12, num_layers = 1, num_heads = 2, num_kv_heads = 1, head_dim = 4, max_position_embeddings = 32, rms_norm_eps = 1.0e-05, rope_theta = 1.0e+04, tie_word_embeddings = false>} {
  mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
  mlt.param @"model.norm.weight" : tensor<8xf32>
  mlt.param @"lm_head.weight" : tensor<16x8xf32>
  func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<16x8xf32>
    %w = mlt.load @"model.norm.weight" : tensor<8xf32>
    %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>
    %head = mlt.load @"lm_head.weight" : tensor<16x8xf32>
    %logits = mlt.matmul %n, %head transpose_rhs : tensor<?x?x8xf32>, tensor<16x8xf32>
    %loss = mlt.cross_entropy %logits, %labels : tensor<?x?x16xf32>, tensor<?x?xi32>
    return %loss : tensor<f32>
  }
}
