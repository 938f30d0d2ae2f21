// RUN: mlt-opt %s -split-input-file -mlt-specialize-shapes="batch=2 seq-len=4" \
// RUN:     -mlt-autodiff="microbatches=2" -mlt-attach-optimizer -cse -mlt-lower-to-runtime \
// RUN:   | FileCheck %s --implicit-check-not=func.func --implicit-check-not=mlt.param

// Tests that the whole training pipeline on a tiny model (embedding, final
// norm, head) gives four state buffers per parameter named after it (`decay`
// on the matrices only), the token, label and hyper-parameter inputs, the
// loss and gradient-norm outputs, the loss seed as a constant, and exactly
// this launch order in each program (micro_step, micro_step_first,
// optimizer_step); and that the module keeps its model attribute and gains
// the number of micro-batches.
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
// CHECK-LABEL: module attributes {mlt.model = #mlt.llama<vocab_size = 16, {{.*}}>, mlt_rt.microbatches = 2 : i64} {
// CHECK-NEXT: mlt_rt.buffer @"param:model.embed_tokens.weight" parameter {decay, parameter = "model.embed_tokens.weight"} : tensor<16x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"grad:model.embed_tokens.weight" gradient {parameter = "model.embed_tokens.weight"} : tensor<16x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"exp_avg:model.embed_tokens.weight" optimizer_state {parameter = "model.embed_tokens.weight"} : tensor<16x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"exp_avg_sq:model.embed_tokens.weight" optimizer_state {parameter = "model.embed_tokens.weight"} : tensor<16x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"param:model.norm.weight" parameter {parameter = "model.norm.weight"} : tensor<8xf32>
// CHECK-NEXT: mlt_rt.buffer @"grad:model.norm.weight" gradient {parameter = "model.norm.weight"} : tensor<8xf32>
// CHECK-NEXT: mlt_rt.buffer @"exp_avg:model.norm.weight" optimizer_state {parameter = "model.norm.weight"} : tensor<8xf32>
// CHECK-NEXT: mlt_rt.buffer @"exp_avg_sq:model.norm.weight" optimizer_state {parameter = "model.norm.weight"} : tensor<8xf32>
// CHECK-NEXT: mlt_rt.buffer @"param:lm_head.weight" parameter {decay, parameter = "lm_head.weight"} : tensor<16x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"grad:lm_head.weight" gradient {parameter = "lm_head.weight"} : tensor<16x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"exp_avg:lm_head.weight" optimizer_state {parameter = "lm_head.weight"} : tensor<16x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"exp_avg_sq:lm_head.weight" optimizer_state {parameter = "lm_head.weight"} : tensor<16x8xf32>
// CHECK-NEXT: mlt_rt.buffer @tokens input per_microbatch 2 : tensor<2x4xi32>
// CHECK-NEXT: mlt_rt.buffer @labels input per_microbatch 2 : tensor<2x4xi32>
// CHECK-NEXT: mlt_rt.buffer @loss output per_microbatch 2 : tensor<f32>
// CHECK-DAG: mlt_rt.buffer @[[SEED:const[0-9]+]] constant {value = 5.000000e-01 : f64} : tensor<f32>
// CHECK-DAG: mlt_rt.buffer @grad_norm output : tensor<f32>
// CHECK-DAG: mlt_rt.buffer @hyper.lr input : tensor<f32>
// CHECK-DAG: mlt_rt.buffer @hyper.beta1 input : tensor<f32>
// CHECK-DAG: mlt_rt.buffer @hyper.beta2 input : tensor<f32>
// CHECK-DAG: mlt_rt.buffer @hyper.eps input : tensor<f32>
// CHECK-DAG: mlt_rt.buffer @hyper.weight_decay input : tensor<f32>
// CHECK-DAG: mlt_rt.buffer @hyper.max_grad_norm input : tensor<f32>
// CHECK-DAG: mlt_rt.buffer @hyper.step input : tensor<f32>
// CHECK: mlt_rt.program @micro_step backward_start 3 {
// CHECK-NEXT: mlt_rt.launch "embedding_fwd" [@tokens, @"param:model.embed_tokens.weight"] -> [@[[H:t[0-9]+]]] ints [8, 16, 8]
// CHECK-NEXT: mlt_rt.launch "rms_norm_fwd" [@[[H]], @"param:model.norm.weight"] -> [@[[N:t[0-9]+]]] ints [8, 8] floats [1.000000e-05]
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[N]], @"param:lm_head.weight"] -> [@[[LOGITS:t[0-9]+]]] ints [1, 8, 16, 8, 0, 1, 0]
// CHECK-NEXT: mlt_rt.launch "cross_entropy_fwd_bwd" [@[[SEED]], @[[LOGITS]], @labels] -> [@loss, @[[DLOGITS:t[0-9]+]]] ints [8, 16, 8]
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[DLOGITS]], @"param:lm_head.weight"] -> [@[[DN:t[0-9]+]]] ints [1, 8, 8, 16, 0, 0, 0]
// CHECK-NEXT: mlt_rt.launch "matmul_accumulate" [@[[DLOGITS]], @[[N]]] -> [@"grad:lm_head.weight"] ints [1, 16, 8, 8, 1, 0, 0]
// CHECK-NEXT: mlt_rt.launch "rms_norm_bwd" [@[[DN]], @[[H]], @"param:model.norm.weight"] -> [@[[DH:t[0-9]+]], @[[DW:t[0-9]+]]] ints [8, 8] floats [1.000000e-05]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@[[DW]]] -> [@"grad:model.norm.weight"] ints [8]
// CHECK-NEXT: mlt_rt.launch "embedding_bwd" [@tokens, @[[DH]]] -> [@[[DTABLE:t[0-9]+]]] ints [8, 16, 8]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@[[DTABLE]]] -> [@"grad:model.embed_tokens.weight"] ints [128]
// CHECK-NEXT: }
// The first micro-batch's program writes each gradient where micro_step adds
// to it: the head's by a plain product, the norm's and the embedding's by
// their kernels directly, with temporaries and a loss seed of its own.
// CHECK-NEXT: mlt_rt.program @micro_step_first backward_start 3 {
// CHECK-NEXT: mlt_rt.launch "embedding_fwd" [@tokens, @"param:model.embed_tokens.weight"] -> [@[[H1:t[0-9]+]]] ints [8, 16, 8]
// CHECK-NEXT: mlt_rt.launch "rms_norm_fwd" [@[[H1]], @"param:model.norm.weight"] -> [@[[N1:t[0-9]+]]] ints [8, 8] floats [1.000000e-05]
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[N1]], @"param:lm_head.weight"] -> [@[[LOGITS1:t[0-9]+]]] ints [1, 8, 16, 8, 0, 1, 0]
// CHECK-NEXT: mlt_rt.launch "cross_entropy_fwd_bwd" [@[[SEED]], @[[LOGITS1]], @labels] -> [@loss, @[[DLOGITS1:t[0-9]+]]] ints [8, 16, 8]
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[DLOGITS1]], @"param:lm_head.weight"] -> [@[[DN1:t[0-9]+]]] ints [1, 8, 8, 16, 0, 0, 0]
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[DLOGITS1]], @[[N1]]] -> [@"grad:lm_head.weight"] ints [1, 16, 8, 8, 1, 0, 0]
// CHECK-NEXT: mlt_rt.launch "rms_norm_bwd" [@[[DN1]], @[[H1]], @"param:model.norm.weight"] -> [@[[DH1:t[0-9]+]], @"grad:model.norm.weight"] ints [8, 8] floats [1.000000e-05]
// CHECK-NEXT: mlt_rt.launch "embedding_bwd" [@tokens, @[[DH1]]] -> [@"grad:model.embed_tokens.weight"] ints [8, 16, 8]
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.program @optimizer_step {
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@"grad:model.embed_tokens.weight"] -> [@[[S0:t[0-9]+]]] ints [128]
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@"grad:model.norm.weight"] -> [@[[S1:t[0-9]+]]] ints [8]
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@"grad:lm_head.weight"] -> [@[[S2:t[0-9]+]]] ints [128]
// CHECK-NEXT: mlt_rt.launch "global_norm" [@[[S0]], @[[S1]], @[[S2]]] -> [@grad_norm]
// CHECK-NEXT: mlt_rt.launch "clip_coefficient" [@grad_norm, @hyper.max_grad_norm] -> [@[[COEF:t[0-9]+]]]
// CHECK-NEXT: mlt_rt.launch "adamw" [@"grad:model.embed_tokens.weight", @[[COEF]], @hyper.lr, @hyper.beta1, @hyper.beta2, @hyper.eps, @hyper.weight_decay, @hyper.step] -> [@"param:model.embed_tokens.weight", @"exp_avg:model.embed_tokens.weight", @"exp_avg_sq:model.embed_tokens.weight"] ints [128, 1]
// CHECK-NEXT: mlt_rt.launch "adamw" [@"grad:model.norm.weight", @[[COEF]], @hyper.lr, @hyper.beta1, @hyper.beta2, @hyper.eps, @hyper.weight_decay, @hyper.step] -> [@"param:model.norm.weight", @"exp_avg:model.norm.weight", @"exp_avg_sq:model.norm.weight"] ints [8, 0]
// CHECK-NEXT: mlt_rt.launch "adamw" [@"grad:lm_head.weight", @[[COEF]], @hyper.lr, @hyper.beta1, @hyper.beta2, @hyper.eps, @hyper.weight_decay, @hyper.step] -> [@"param:lm_head.weight", @"exp_avg:lm_head.weight", @"exp_avg_sq:lm_head.weight"] ints [128, 1]
// CHECK-NEXT: }
// CHECK-NEXT: }

// -----

// Tests that a batched product of activations launches with b_batched = 1
// and its batch kept, the elementwise kernels with their element counts, a
// transpose with its rank, shape and permutation, and a cast, forward and
// backward; and that a value used twice has its gradients summed by `add`.
module {
  mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
  func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<16x8xf32>
    %s = mlt.matmul %h, %h transpose_rhs : tensor<?x?x8xf32>, tensor<?x?x8xf32>
    %g = mlt.swiglu %s, %s : tensor<?x?x?xf32>
    %u = mlt.silu %g : tensor<?x?x?xf32>
    %m = mlt.mul %u, %s : tensor<?x?x?xf32>
    %t = mlt.transpose %m [0, 2, 1] : tensor<?x?x?xf32>
    %c = mlt.cast %t : tensor<?x?x?xf32> -> tensor<?x?x?xbf16>
    %loss = mlt.cross_entropy %c, %labels : tensor<?x?x?xbf16>, tensor<?x?xi32>
    return %loss : tensor<f32>
  }
}
// CHECK-LABEL: module attributes {mlt_rt.microbatches = 2 : i64} {
// CHECK: mlt_rt.buffer @[[SEED:const[0-9]+]] constant {value = 5.000000e-01 : f64} : tensor<f32>
// CHECK: mlt_rt.program @micro_step backward_start 7 {
// CHECK-NEXT: mlt_rt.launch "embedding_fwd" [@tokens, @"param:model.embed_tokens.weight"] -> [@[[H:t[0-9]+]]] ints [8, 16, 8]
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[H]], @[[H]]] -> [@[[S:t[0-9]+]]] ints [2, 4, 4, 8, 0, 1, 1]
// CHECK-NEXT: mlt_rt.launch "swiglu_fwd" [@[[S]], @[[S]]] -> [@[[G:t[0-9]+]]] ints [32]
// CHECK-NEXT: mlt_rt.launch "silu_fwd" [@[[G]]] -> [@[[U:t[0-9]+]]] ints [32]
// CHECK-NEXT: mlt_rt.launch "mul" [@[[U]], @[[S]]] -> [@[[M:t[0-9]+]]] ints [32]
// CHECK-NEXT: mlt_rt.launch "transpose" [@[[M]]] -> [@[[T:t[0-9]+]]] ints [3, 2, 4, 4, 0, 2, 1]
// CHECK-NEXT: mlt_rt.launch "cast" [@[[T]]] -> [@[[C:t[0-9]+]]] ints [32]
// CHECK-NEXT: mlt_rt.launch "cross_entropy_fwd_bwd" [@[[SEED]], @[[C]], @labels] -> [@loss, @[[DC:t[0-9]+]]] ints [8, 4, 8]
// CHECK-NEXT: mlt_rt.launch "cast" [@[[DC]]] -> [@[[DT:t[0-9]+]]] ints [32]
// CHECK-NEXT: mlt_rt.launch "transpose" [@[[DT]]] -> [@[[DM:t[0-9]+]]] ints [3, 2, 4, 4, 0, 2, 1]
// CHECK-NEXT: mlt_rt.launch "mul" [@[[DM]], @[[S]]] -> [@[[DU:t[0-9]+]]] ints [32]
// CHECK-NEXT: mlt_rt.launch "mul" [@[[DM]], @[[U]]] -> [@[[DS1:t[0-9]+]]] ints [32]
// CHECK-NEXT: mlt_rt.launch "silu_bwd" [@[[DU]], @[[G]]] -> [@[[DG:t[0-9]+]]] ints [32]
// CHECK-NEXT: mlt_rt.launch "swiglu_bwd" [@[[DG]], @[[S]], @[[S]]] -> [@[[DGATE:t[0-9]+]], @[[DUP:t[0-9]+]]] ints [32]
// CHECK-NEXT: mlt_rt.launch "add" [@[[DS1]], @[[DGATE]]] -> [@[[DS2:t[0-9]+]]] ints [32]
// CHECK-NEXT: mlt_rt.launch "add" [@[[DS2]], @[[DUP]]] -> [@[[DS:t[0-9]+]]] ints [32]
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[DS]], @[[H]]] -> [@[[DH1:t[0-9]+]]] ints [2, 4, 8, 4, 0, 0, 1]
// CHECK-NEXT: mlt_rt.launch "matmul_add" [@[[DS]], @[[H]], @[[DH1]]] -> [@[[DH:t[0-9]+]]] ints [2, 4, 8, 4, 1, 0, 1]
// CHECK-NEXT: mlt_rt.launch "embedding_bwd" [@tokens, @[[DH]]] -> [@[[DTABLE:t[0-9]+]]] ints [8, 16, 8]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@[[DTABLE]]] -> [@"grad:model.embed_tokens.weight"] ints [128]
// CHECK-NEXT: }

// -----

// Tests that a two-layer attention model gets per-layer state buffers named
// with the layer index, projections against shared weights with the batch
// folded into the rows, attention_fwd writing its output and softmax
// statistics ([batch, heads, seq] float32) and each layer's attention_bwd
// reading that layer's output and statistics, and rope and its inverse: the
// query's unscaled, the key's with Llama 3.1's rotary scaling (no model
// mixes them; the test does, to see both sets of attributes), which the
// inverse rotation of its gradient keeps. (Ropes of two scalings stay
// launches of their own; mlt-lower-to-runtime-attention-rope.mlir has the
// attention backward that rotates its gradients itself.)
module {
  mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
  mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 2 : tensor<8x8xf32>
  mlt.param @"model.layers.{}.self_attn.k_proj.weight" layers 2 : tensor<4x8xf32>
  mlt.param @"model.layers.{}.self_attn.v_proj.weight" layers 2 : tensor<4x8xf32>
  func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<16x8xf32>
    %r = mlt.repeat %layer = 0 to 2 iter_args(%x = %h) -> (tensor<?x?x8xf32>) {
      %wq = mlt.load @"model.layers.{}.self_attn.q_proj.weight"[%layer] : tensor<8x8xf32>
      %wk = mlt.load @"model.layers.{}.self_attn.k_proj.weight"[%layer] : tensor<4x8xf32>
      %wv = mlt.load @"model.layers.{}.self_attn.v_proj.weight"[%layer] : tensor<4x8xf32>
      %q = mlt.matmul %x, %wq transpose_rhs : tensor<?x?x8xf32>, tensor<8x8xf32>
      %k = mlt.matmul %x, %wk transpose_rhs : tensor<?x?x8xf32>, tensor<4x8xf32>
      %v = mlt.matmul %x, %wv transpose_rhs : tensor<?x?x8xf32>, tensor<4x8xf32>
      %q4 = mlt.reshape %q : tensor<?x?x8xf32> -> tensor<?x?x2x4xf32>
      %k4 = mlt.reshape %k : tensor<?x?x4xf32> -> tensor<?x?x1x4xf32>
      %v4 = mlt.reshape %v : tensor<?x?x4xf32> -> tensor<?x?x1x4xf32>
      %qr = mlt.rope %q4 theta = 1.0e+04 : tensor<?x?x2x4xf32>
      %kr = mlt.rope %k4 theta = 1.0e+04 scaling = <factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 32> : tensor<?x?x1x4xf32>
      %o = mlt.attention %qr, %kr, %v4 causal scale = 0.5 : tensor<?x?x2x4xf32>, tensor<?x?x1x4xf32>, tensor<?x?x1x4xf32>
      %o3 = mlt.reshape %o : tensor<?x?x2x4xf32> -> tensor<?x?x8xf32>
      %y = mlt.add %x, %o3 : tensor<?x?x8xf32>
      mlt.yield %y : tensor<?x?x8xf32>
    }
    %logits = mlt.matmul %r, %table transpose_rhs : tensor<?x?x8xf32>, tensor<16x8xf32>
    %loss = mlt.cross_entropy %logits, %labels : tensor<?x?x16xf32>, tensor<?x?xi32>
    return %loss : tensor<f32>
  }
}
// CHECK-LABEL: module
// CHECK: mlt_rt.buffer @"param:model.layers.0.self_attn.q_proj.weight" parameter {decay, parameter = "model.layers.0.self_attn.q_proj.weight"} : tensor<8x8xf32>
// CHECK: mlt_rt.buffer @"exp_avg_sq:model.layers.0.self_attn.q_proj.weight" optimizer_state {parameter = "model.layers.0.self_attn.q_proj.weight"} : tensor<8x8xf32>
// CHECK: mlt_rt.buffer @"param:model.layers.1.self_attn.q_proj.weight" parameter {decay, parameter = "model.layers.1.self_attn.q_proj.weight"} : tensor<8x8xf32>
// CHECK: mlt_rt.buffer @"grad:model.layers.1.self_attn.v_proj.weight" gradient {parameter = "model.layers.1.self_attn.v_proj.weight"} : tensor<4x8xf32>
// CHECK: mlt_rt.buffer @[[LSE0:t[0-9]+]] temporary : tensor<2x2x4xf32>
// CHECK: mlt_rt.buffer @[[LSE1:t[0-9]+]] temporary : tensor<2x2x4xf32>
// CHECK: mlt_rt.program @micro_step backward_start 16 {
// CHECK-NEXT: mlt_rt.launch "embedding_fwd" [@tokens, @"param:model.embed_tokens.weight"] -> [@[[H:t[0-9]+]]] ints [8, 16, 8]
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[H]], @"param:model.layers.0.self_attn.q_proj.weight"] -> [@[[Q0:t[0-9]+]]] ints [1, 8, 8, 8, 0, 1, 0]
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[H]], @"param:model.layers.0.self_attn.k_proj.weight"] -> [@[[K0:t[0-9]+]]] ints [1, 8, 4, 8, 0, 1, 0]
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[H]], @"param:model.layers.0.self_attn.v_proj.weight"] -> [@[[V0:t[0-9]+]]] ints [1, 8, 4, 8, 0, 1, 0]
// CHECK-NEXT: mlt_rt.launch "rope" [@[[Q0]]] -> [@[[QR0:t[0-9]+]]] ints [2, 4, 2, 4, 0, 0, 0, 0, -1] floats [1.000000e+04, 0.000000e+00, 0.000000e+00, 0.000000e+00]
// CHECK-NEXT: mlt_rt.launch "rope" [@[[K0]]] -> [@[[KR0:t[0-9]+]]] ints [2, 4, 1, 4, 0, 0, 1, 32, -1] floats [1.000000e+04, 8.000000e+00, 1.000000e+00, 4.000000e+00]
// CHECK-NEXT: mlt_rt.launch "attention_fwd" [@[[QR0]], @[[KR0]], @[[V0]]] -> [@[[O0:t[0-9]+]], @[[LSE0]]] ints [2, 4, 4, 2, 1, 4, 1, -1, 0, 0] floats [5.000000e-01]
// CHECK-NEXT: mlt_rt.launch "add" [@[[H]], @[[O0]]] -> [@[[Y0:t[0-9]+]]] ints [64]
// CHECK: mlt_rt.launch "attention_fwd" [@[[QR1:t[0-9]+]], @[[KR1:t[0-9]+]], @[[V1:t[0-9]+]]] -> [@[[O1:t[0-9]+]], @[[LSE1]]] ints [2, 4, 4, 2, 1, 4, 1, -1, 0, 0] floats [5.000000e-01]
// CHECK: mlt_rt.launch "cross_entropy_fwd_bwd"
// CHECK: mlt_rt.launch "attention_bwd" [@{{t[0-9]+}}, @[[QR1]], @[[KR1]], @[[V1]], @[[O1]], @[[LSE1]]] -> [@[[DQ1:t[0-9]+]], @[[DK1:t[0-9]+]], @{{t[0-9]+}}] ints [2, 4, 4, 2, 1, 4, 1, -1, 0, 0] floats [5.000000e-01]
// CHECK-NEXT: mlt_rt.launch "rope" [@[[DK1]]] -> [@{{t[0-9]+}}] ints [2, 4, 1, 4, 1, 0, 1, 32, -1] floats [1.000000e+04, 8.000000e+00, 1.000000e+00, 4.000000e+00]
// CHECK-NEXT: mlt_rt.launch "rope" [@[[DQ1]]] -> [@{{t[0-9]+}}] ints [2, 4, 2, 4, 1, 0, 0, 0, -1] floats [1.000000e+04, 0.000000e+00, 0.000000e+00, 0.000000e+00]
// CHECK: mlt_rt.launch "matmul_accumulate" [@{{t[0-9]+}}, @{{t[0-9]+}}] -> [@"grad:model.layers.1.self_attn.q_proj.weight"] ints [1, 8, 8, 8, 1, 0, 0]
// CHECK: mlt_rt.launch "attention_bwd" [@{{t[0-9]+}}, @[[QR0]], @[[KR0]], @[[V0]], @[[O0]], @[[LSE0]]] -> [@{{t[0-9]+}}, @{{t[0-9]+}}, @[[DV0:t[0-9]+]]] ints [2, 4, 4, 2, 1, 4, 1, -1, 0, 0] floats [5.000000e-01]
// CHECK: mlt_rt.launch "matmul_accumulate" [@[[DV0]], @[[H]]] -> [@"grad:model.layers.0.self_attn.v_proj.weight"] ints [1, 4, 8, 8, 1, 0, 0]
// CHECK: mlt_rt.launch "embedding_bwd"
// CHECK: }
// CHECK: mlt_rt.program @optimizer_step {
// CHECK: mlt_rt.launch "adamw" [@"grad:model.layers.1.self_attn.k_proj.weight", {{.*}}] -> [@"param:model.layers.1.self_attn.k_proj.weight", @"exp_avg:model.layers.1.self_attn.k_proj.weight", @"exp_avg_sq:model.layers.1.self_attn.k_proj.weight"] ints [32, 1]

// -----

// Tests that a product only added to a value computed before it is added by
// its own kernel (matmul_add, the value as the addend) and the add is gone:
// the residual adds of the forward pass, and in the backward the sums of the
// input gradients of two projections of one value. A product used twice, or
// added to a value computed after it, keeps its add.
module {
  mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
  mlt.param @"w.weight" : tensor<8x8xf32>
  mlt.param @"v.weight" : tensor<8x8xf32>
  mlt.param @"lm_head.weight" : tensor<16x8xf32>
  func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<16x8xf32>
    %w = mlt.load @"w.weight" : tensor<8x8xf32>
    %v = mlt.load @"v.weight" : tensor<8x8xf32>
    %p = mlt.matmul %h, %w transpose_rhs : tensor<?x?x8xf32>, tensor<8x8xf32>
    %q = mlt.matmul %h, %v transpose_rhs : tensor<?x?x8xf32>, tensor<8x8xf32>
    %r = mlt.add %h, %p : tensor<?x?x8xf32>
    %twice = mlt.add %q, %q : tensor<?x?x8xf32>
    %s = mlt.silu %r : tensor<?x?x8xf32>
    %late = mlt.add %twice, %s : tensor<?x?x8xf32>
    %head = mlt.load @"lm_head.weight" : tensor<16x8xf32>
    %logits = mlt.matmul %late, %head transpose_rhs : tensor<?x?x8xf32>, tensor<16x8xf32>
    %loss = mlt.cross_entropy %logits, %labels : tensor<?x?x16xf32>, tensor<?x?xi32>
    return %loss : tensor<f32>
  }
}
// CHECK: mlt_rt.buffer @"param:w.weight"
// CHECK: mlt_rt.program @micro_step backward_start 7 {
// CHECK-NEXT: mlt_rt.launch "embedding_fwd" [@tokens, @"param:model.embed_tokens.weight"] -> [@[[H:t[0-9]+]]]
// CHECK-NEXT: mlt_rt.launch "matmul_add" [@[[H]], @"param:w.weight", @[[H]]] -> [@[[R:t[0-9]+]]] ints [1, 8, 8, 8, 0, 1, 0]
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[H]], @"param:v.weight"] -> [@[[Q:t[0-9]+]]] ints [1, 8, 8, 8, 0, 1, 0]
// CHECK-NEXT: mlt_rt.launch "add" [@[[Q]], @[[Q]]] -> [@[[TWICE:t[0-9]+]]] ints [64]
// CHECK-NEXT: mlt_rt.launch "silu_fwd" [@[[R]]] -> [@[[S:t[0-9]+]]] ints [64]
// CHECK-NEXT: mlt_rt.launch "add" [@[[TWICE]], @[[S]]] -> [@[[LATE:t[0-9]+]]] ints [64]
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[LATE]], @"param:lm_head.weight"]
// CHECK: mlt_rt.launch "cross_entropy_fwd_bwd"
// The gradient of %h sums the residual's (%r's gradient) and the two
// products' input gradients, each product adding the sum so far.
// CHECK: mlt_rt.launch "silu_bwd" [{{.*}}] -> [@[[DR:t[0-9]+]]]
// CHECK-NEXT: mlt_rt.launch "add" [@[[DL:t[0-9]+]], @[[DL]]] -> [@[[DQ:t[0-9]+]]] ints [64]
// CHECK-NEXT: mlt_rt.launch "matmul_add" [@[[DQ]], @"param:v.weight", @[[DR]]] -> [@[[DH1:t[0-9]+]]] ints [1, 8, 8, 8, 0, 0, 0]
// CHECK-NEXT: mlt_rt.launch "matmul_accumulate" [@[[DQ]], @[[H]]] -> [@"grad:v.weight"]
// CHECK-NEXT: mlt_rt.launch "matmul_add" [@[[DR]], @"param:w.weight", @[[DH1]]] -> [@[[DH:t[0-9]+]]] ints [1, 8, 8, 8, 0, 0, 0]
// CHECK-NEXT: mlt_rt.launch "matmul_accumulate" [@[[DR]], @[[H]]] -> [@"grad:w.weight"]
// CHECK-NEXT: mlt_rt.launch "embedding_bwd" [@tokens, @[[DH]]]
// CHECK: mlt_rt.program @optimizer_step

// -----

// Tests that a norm's input gradient only added to a gradient computed before
// it (the residual stream's, here the skip connection's) is summed by the
// norm's backward kernel (rms_norm_bwd_add), and the add is gone.
module {
  mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
  mlt.param @"norm.weight" : tensor<8xf32>
  mlt.param @"lm_head.weight" : tensor<16x8xf32>
  func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<16x8xf32>
    %w = mlt.load @"norm.weight" : tensor<8xf32>
    %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>
    %s = mlt.silu %n : tensor<?x?x8xf32>
    %r = mlt.add %h, %s : tensor<?x?x8xf32>
    %head = mlt.load @"lm_head.weight" : tensor<16x8xf32>
    %logits = mlt.matmul %r, %head transpose_rhs : tensor<?x?x8xf32>, tensor<16x8xf32>
    %loss = mlt.cross_entropy %logits, %labels : tensor<?x?x16xf32>, tensor<?x?xi32>
    return %loss : tensor<f32>
  }
}
// CHECK: mlt_rt.buffer @"param:norm.weight"
// CHECK: mlt_rt.program @micro_step backward_start 5 {
// CHECK: mlt_rt.launch "cross_entropy_fwd_bwd"
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[DLOGITS:t[0-9]+]], @"param:lm_head.weight"] -> [@[[DR:t[0-9]+]]]
// CHECK: mlt_rt.launch "silu_bwd" [@[[DR]], @{{t[0-9]+}}] -> [@[[DN:t[0-9]+]]]
// CHECK-NEXT: mlt_rt.launch "rms_norm_bwd_add" [@[[DN]], @{{t[0-9]+}}, @"param:norm.weight", @[[DR]]] -> [@[[DH:t[0-9]+]], @[[DW:t[0-9]+]]] ints [8, 8] floats [1.000000e-05]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@[[DW]]] -> [@"grad:norm.weight"]
// CHECK-NOT: "add"
// CHECK: mlt_rt.launch "embedding_bwd" [@tokens, @[[DH]]]

// -----

// Tests that a cross-entropy whose logits have another user keeps its
// forward and backward kernels apart (cross_entropy_fwd_bwd writes the
// gradient over the logits, which the other reads): two losses of the same
// logits, each its own pair.
module {
  mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
  mlt.param @"lm_head.weight" : tensor<16x8xf32>
  func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<16x8xf32>
    %head = mlt.load @"lm_head.weight" : tensor<16x8xf32>
    %logits = mlt.matmul %h, %head transpose_rhs : tensor<?x?x8xf32>, tensor<16x8xf32>
    %a = mlt.cross_entropy %logits, %labels : tensor<?x?x16xf32>, tensor<?x?xi32>
    %b = mlt.cross_entropy %logits, %tokens : tensor<?x?x16xf32>, tensor<?x?xi32>
    %loss = mlt.add %a, %b : tensor<f32>
    return %loss : tensor<f32>
  }
}
// CHECK: mlt_rt.program @micro_step backward_start 5 {
// CHECK-NEXT: mlt_rt.launch "embedding_fwd"
// CHECK-NEXT: mlt_rt.launch "matmul" [@{{t[0-9]+}}, @"param:lm_head.weight"] -> [@[[LOGITS:t[0-9]+]]]
// CHECK-NEXT: mlt_rt.launch "cross_entropy_fwd" [@[[LOGITS]], @labels] -> [@[[A:t[0-9]+]]] ints [8, 16]
// CHECK-NEXT: mlt_rt.launch "cross_entropy_fwd" [@[[LOGITS]], @tokens] -> [@[[B:t[0-9]+]]] ints [8, 16]
// CHECK-NEXT: mlt_rt.launch "add" [@[[A]], @[[B]]] -> [@loss] ints [1]
// CHECK-NEXT: mlt_rt.launch "cross_entropy_bwd" [@[[SEED:const[0-9]+]], @[[LOGITS]], @tokens] -> [@{{t[0-9]+}}] ints [8, 16]
// CHECK-NEXT: mlt_rt.launch "cross_entropy_bwd" [@[[SEED]], @[[LOGITS]], @labels] -> [@{{t[0-9]+}}] ints [8, 16]
// CHECK-NOT: cross_entropy_fwd_bwd
// CHECK: mlt_rt.program @optimizer_step
