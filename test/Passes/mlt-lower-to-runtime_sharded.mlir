// RUN: mlt-opt %s -mlt-lower-to-runtime | FileCheck %s
// RUN: mlt-opt %s -mlt-lower-to-runtime -mlt-schedule-pipeline -mlt-plan-memory \
// RUN:   | mlt-translate --mlt-to-plan -o %t.mltplan
// RUN: mlt-run %t.mltplan --print-plan | FileCheck %s --check-prefix=PLAN

// Tests the lowering of a per-rank program (as mlt-spmdize leaves it) on a
// dp=2 x tp=2 mesh: state buffers of a split parameter have the rank's block
// and carry its sharding, as do the token inputs; a vocabulary-parallel
// embedding and its gradient; a reduce-scatter and an all-gather along the
// sequence (transposed around the collective, the batch being outermost),
// an all-gather and a slice of an outermost dimension (none); a
// cross-entropy split over the vocabulary and the rows (statistics, gathered
// log-sum-exp parts, summed targets, combined, and the gradient from the
// saved global log-sum-exp); the loss all-reduced over dp into the output;
// a gradient all-reduced in place; and that the plan has one rank per mesh
// position, each with its block of the parameter and of the batch.
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>, mlt.model = #mlt.llama<vocab_size = 16, hidden_size = 8, intermediate_size = 12, num_layers = 1, num_heads = 2, num_kv_heads = 1, head_dim = 4, max_position_embeddings = 32, rms_norm_eps = 1.0e-05, rope_theta = 1.0e+04, tie_word_embeddings = true>} {
  mlt.param @"model.embed_tokens.weight" {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<16x8xf32>
  mlt.param @"model.norm.weight" : tensor<8xf32>
  func.func @micro_step(%tokens: tensor<2x4xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}, %labels: tensor<2x4xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}) -> tensor<f32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<8x8xf32>
    %h = mlt.embedding %tokens, %table {mlt.vocab_shard = "tp"} : tensor<2x4xi32>, tensor<8x8xf32>
    %hs = mlt.reduce_scatter %h over "tp" dim 1 : tensor<2x4x8xf32> -> tensor<2x2x8xf32>
    %w = mlt.load @"model.norm.weight" : tensor<8xf32>
    %n = mlt.rms_norm %hs, %w eps = 1.0e-05 : tensor<2x2x8xf32>, tensor<8xf32>
    %c = mlt.shard %n : tensor<2x2x8xf32> to #mlt.sharding<[?, tp, ?]>
    %ng = mlt.all_gather %c over "tp" dim 1 : tensor<2x2x8xf32> -> tensor<2x4x8xf32>
    %logits = mlt.matmul %ng, %table transpose_rhs : tensor<2x4x8xf32>, tensor<8x8xf32>
    %ce = mlt.cross_entropy %logits, %labels {mlt.row_count = 16 : i64, mlt.vocab_shard = "tp"} : tensor<2x4x8xf32>, tensor<2x4xi32>
    %seed = arith.constant dense<1.0> : tensor<f32>
    %dlogits = mlt.cross_entropy_grad %seed, %logits, %labels {mlt.row_count = 16 : i64, mlt.vocab_shard = "tp"} : tensor<f32>, tensor<2x4x8xf32>, tensor<2x4xi32>
    %g = mlt.all_gather %dlogits over "dp" dim 0 : tensor<2x4x8xf32> -> tensor<4x4x8xf32>
    %s = mlt.shard_slice %g over "dp" dim 0 : tensor<4x4x8xf32> -> tensor<2x4x8xf32>
    %dtable = mlt.embedding_grad %tokens, %s {mlt.vocab_shard = "tp"} : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<8x8xf32>
    mlt.accumulate_grad @"model.embed_tokens.weight", %dtable : tensor<8x8xf32>
    %loss = mlt.all_reduce %ce over "dp" : tensor<f32>
    return %loss : tensor<f32>
  }
  func.func @optimizer_step() -> tensor<f32> {
    %lr = mlt.hyperparameter "lr" : tensor<f32>
    %b1 = mlt.hyperparameter "beta1" : tensor<f32>
    %b2 = mlt.hyperparameter "beta2" : tensor<f32>
    %eps = mlt.hyperparameter "eps" : tensor<f32>
    %wd = mlt.hyperparameter "weight_decay" : tensor<f32>
    %max = mlt.hyperparameter "max_grad_norm" : tensor<f32>
    %step = mlt.hyperparameter "step" : tensor<f32>
    %g = mlt.load_grad @"model.embed_tokens.weight" : tensor<8x8xf32>
    %gs = mlt.all_reduce %g over "dp" : tensor<8x8xf32>
    %s = mlt.sum_squares %gs : tensor<8x8xf32>
    %p = mlt.all_reduce %s over "tp" : tensor<f32>
    %norm = mlt.global_norm %p : tensor<f32>
    %coef = mlt.clip_coefficient %norm, %max : tensor<f32>
    mlt.adamw @"model.embed_tokens.weight" grad %gs scale %coef lr %lr betas %b1, %b2 eps %eps weight_decay %wd step %step decay : tensor<8x8xf32>
    return %norm : tensor<f32>
  }
}
// CHECK-LABEL: module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>, mlt.model = #mlt.llama<
// CHECK-NEXT: mlt_rt.buffer @"param:model.embed_tokens.weight" parameter {decay, mlt.sharding = [#mlt.sharding<[tp, -]>], parameter = "model.embed_tokens.weight"} : tensor<8x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"grad:model.embed_tokens.weight" gradient {mlt.sharding = [#mlt.sharding<[tp, -]>], parameter = "model.embed_tokens.weight"} : tensor<8x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"exp_avg:model.embed_tokens.weight" optimizer_state {mlt.sharding = [#mlt.sharding<[tp, -]>], parameter = "model.embed_tokens.weight"} : tensor<8x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"exp_avg_sq:model.embed_tokens.weight" optimizer_state {mlt.sharding = [#mlt.sharding<[tp, -]>], parameter = "model.embed_tokens.weight"} : tensor<8x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"param:model.norm.weight" parameter {parameter = "model.norm.weight"} : tensor<8xf32>
// CHECK: mlt_rt.buffer @tokens input {mlt.sharding = [#mlt.sharding<[dp, -]>]} : tensor<2x4xi32>
// CHECK-NEXT: mlt_rt.buffer @labels input {mlt.sharding = [#mlt.sharding<[dp, -]>]} : tensor<2x4xi32>
// CHECK-NEXT: mlt_rt.buffer @loss output : tensor<f32>
// CHECK: mlt_rt.program @micro_step {
// CHECK-NEXT: mlt_rt.launch "embedding_fwd_vp" [@tokens, @"param:model.embed_tokens.weight"] -> [@[[H:t[0-9]+]]] ints [8, 8, 8, 1]
// The sequence's collectives (dimension 1 of [batch 2, seq 4, 8]): one
// transpose on the side that holds every rank's block, to or from the
// rank-major [tp, batch, seq / tp, 8]; a rank's own [batch, seq / tp, 8] is
// the other side as it is.
// CHECK-NEXT: mlt_rt.launch "transpose" [@[[H]]] -> [@[[HT:t[0-9]+]]] ints [4, 2, 2, 2, 8, 1, 0, 2, 3]
// CHECK-NEXT: mlt_rt.launch "reduce_scatter_sum" [@[[HT]]] -> [@[[HS:t[0-9]+]]] ints [32, 1]
// CHECK-NEXT: mlt_rt.launch "rms_norm_fwd" [@[[HS]], @"param:model.norm.weight"] -> [@[[N:t[0-9]+]]] ints [4, 8]
// CHECK-NEXT: mlt_rt.launch "all_gather" [@[[N]]] -> [@[[NGT:t[0-9]+]]] ints [32, 1]
// CHECK-NEXT: mlt_rt.launch "transpose" [@[[NGT]]] -> [@[[NG:t[0-9]+]]] ints [4, 2, 2, 2, 8, 1, 0, 2, 3]
// CHECK-NEXT: mlt_rt.launch "matmul" [@[[NG]], @"param:model.embed_tokens.weight"] -> [@[[LOGITS:t[0-9]+]]] ints [1, 8, 8, 8, 0, 1, 0]
// CHECK-NEXT: mlt_rt.launch "cross_entropy_stats" [@[[LOGITS]], @labels] -> [@[[PART:t[0-9]+]], @[[TARGET:t[0-9]+]]] ints [8, 8, 1]
// CHECK-NEXT: mlt_rt.launch "all_gather" [@[[PART]]] -> [@[[PARTS:t[0-9]+]]] ints [8, 1]
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@[[TARGET]]] -> [@[[TARGET]]] ints [8, 1]
// CHECK-NEXT: mlt_rt.launch "cross_entropy_combine" [@[[PARTS]], @[[TARGET]]] -> [@[[LSE:t[0-9]+]], @[[CE:t[0-9]+]]] ints [8, 2, 16]
// CHECK-NEXT: mlt_rt.launch "cross_entropy_bwd_stats" [@[[SEED:const[0-9]+]], @[[LOGITS]], @labels, @[[LSE]]] -> [@[[DLOGITS:t[0-9]+]]] ints [8, 8, 1, 16]
// CHECK-NEXT: mlt_rt.launch "all_gather" [@[[DLOGITS]]] -> [@[[G:t[0-9]+]]] ints [64, 0]
// CHECK-NEXT: mlt_rt.launch "shard_slice" [@[[G]]] -> [@[[S:t[0-9]+]]] ints [1, 2, 32, 0]
// CHECK-NEXT: mlt_rt.launch "embedding_bwd_vp" [@tokens, @[[S]]] -> [@[[DTABLE:t[0-9]+]]] ints [8, 8, 8, 1]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@[[DTABLE]]] -> [@"grad:model.embed_tokens.weight"] ints [64]
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@[[CE]]] -> [@loss] ints [1, 0]
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.program @optimizer_step {
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:model.embed_tokens.weight"] -> [@"grad:model.embed_tokens.weight"] ints [64, 0]
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@"grad:model.embed_tokens.weight"] -> [@[[SQ:t[0-9]+]]] ints [64]
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@[[SQ]]] -> [@[[SQS:t[0-9]+]]] ints [1, 1]
// CHECK-NEXT: mlt_rt.launch "global_norm" [@[[SQS]]] -> [@grad_norm]
// CHECK-NEXT: mlt_rt.launch "clip_coefficient" [@grad_norm, @hyper.max_grad_norm] -> [@[[COEF:t[0-9]+]]]
// CHECK-NEXT: mlt_rt.launch "adamw" [@"grad:model.embed_tokens.weight", @[[COEF]], {{.*}}] -> [@"param:model.embed_tokens.weight", @"exp_avg:model.embed_tokens.weight", @"exp_avg_sq:model.embed_tokens.weight"] ints [64, 1]
// CHECK-NEXT: }

// PLAN: plan: format version 11, producer "mlt", world size 4, mesh dp=2,tp=2
// PLAN-NEXT: model: vocab 16, max positions 32, micro-batch 4 x seq 4,
// PLAN: rank 0:
// PLAN: param:model.embed_tokens.weight {{.*}} block [0:8, 0:8] of [16, 8]
// PLAN: param:model.norm.weight {{.*}} parameter model.norm.weight{{$}}
// PLAN: tokens {{.*}} block [0:2, 0:4] of [4, 4]
// PLAN: rank 1:
// PLAN: param:model.embed_tokens.weight {{.*}} block [8:16, 0:8] of [16, 8]
// PLAN: tokens {{.*}} block [0:2, 0:4] of [4, 4]
// PLAN: rank 2:
// PLAN: param:model.embed_tokens.weight {{.*}} block [0:8, 0:8] of [16, 8]
// PLAN: tokens {{.*}} block [2:4, 0:4] of [4, 4]
// PLAN: rank 3:
// PLAN: param:model.embed_tokens.weight {{.*}} block [8:16, 0:8] of [16, 8]
// PLAN: labels {{.*}} block [2:4, 0:4] of [4, 4]
