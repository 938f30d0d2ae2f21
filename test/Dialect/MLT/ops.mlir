// RUN: mlt-opt %s -split-input-file | mlt-opt -split-input-file | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlir-print-op-generic | mlt-opt -split-input-file | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

// Tests that the model configuration attribute round-trips on a module, with
// every parameter kept.
// CHECK-LABEL: module attributes
// CHECK-SAME: mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
// CHECK-SAME: intermediate_size = 176, num_layers = 2, num_heads = 4,
// CHECK-SAME: num_kv_heads = 2, head_dim = 16, max_position_embeddings = 2048,
// CHECK-SAME: rms_norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64,
// CHECK-SAME: tie_word_embeddings = false>
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false>} {
}

// -----

// Tests that tied word embeddings round-trip.
// CHECK-LABEL: module attributes
// CHECK-SAME: tie_word_embeddings = true>
module attributes {mlt.model = #mlt.llama<vocab_size = 32000, hidden_size = 4096,
    intermediate_size = 11008, num_layers = 32, num_heads = 32, num_kv_heads = 32,
    head_dim = 128, max_position_embeddings = 4096, rms_norm_eps = 1.0e-06,
    rope_theta = 5.0e+05, tie_word_embeddings = true>} {
}

// -----

// Tests that Llama 3.1's rotary scaling round-trips in the model
// configuration, every field kept.
// CHECK-LABEL: module attributes
// CHECK-SAME: rope_theta = 5.000000e+05 : f64, tie_word_embeddings = true,
// CHECK-SAME: rope_scaling = <factor = 3.200000e+01 : f64,
// CHECK-SAME: low_freq_factor = 1.000000e+00 : f64,
// CHECK-SAME: high_freq_factor = 4.000000e+00 : f64,
// CHECK-SAME: original_max_position_embeddings = 8192>>
module attributes {mlt.model = #mlt.llama<vocab_size = 128256, hidden_size = 2048,
    intermediate_size = 8192, num_layers = 16, num_heads = 32, num_kv_heads = 8,
    head_dim = 64, max_position_embeddings = 131072, rms_norm_eps = 1.0e-05,
    rope_theta = 5.0e+05, tie_word_embeddings = true,
    rope_scaling = #mlt.llama3_rope_scaling<factor = 32.0, low_freq_factor = 1.0,
        high_freq_factor = 4.0, original_max_position_embeddings = 8192>>} {
}

// -----

// Tests that the special-token ids round-trip in the model configuration,
// each in the form it was written: one id, a list (even of one), an empty
// list.
// CHECK-LABEL: module attributes
// CHECK-SAME: tie_word_embeddings = false, bos_token_id = 128000,
// CHECK-SAME: eos_token_id = [128001, 128008, 128009], pad_token_id = [0]>
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false, bos_token_id = 128000,
    eos_token_id = [128001, 128008, 128009], pad_token_id = [0]>} {
}

// -----

// Tests that an empty list of ids round-trips, and that ids left out stay
// out.
// CHECK-LABEL: module attributes
// CHECK-SAME: tie_word_embeddings = false, eos_token_id = []>
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false, eos_token_id = []>} {
}

// -----

// Tests that a single parameter and a per-layer family round-trip, with and
// without `layers`. Names that are valid identifiers print unquoted.
// CHECK-LABEL: module
// CHECK: mlt.param @model.embed_tokens.weight : tensor<256x64xf32>
// CHECK: mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 2 : tensor<64x64xbf16>
// CHECK-NOT: layers
// CHECK: mlt.param @model.norm.weight : tensor<64xf32>
mlt.param @"model.embed_tokens.weight" : tensor<256x64xf32>
mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 2 : tensor<64x64xbf16>
mlt.param @"model.norm.weight" : tensor<64xf32>

// -----

// Tests that mlt.load reads a single parameter without a layer index.
mlt.param @"model.norm.weight" : tensor<64xf32>
// CHECK-LABEL: func.func @load_single
func.func @load_single() -> tensor<64xf32> {
  // CHECK: %[[W:[^ ,:]+]] = mlt.load @model.norm.weight : tensor<64xf32>
  // CHECK: return %[[W]]
  %w = mlt.load @"model.norm.weight" : tensor<64xf32>
  return %w : tensor<64xf32>
}

// -----

// Tests that mlt.load reads a per-layer parameter with a layer index that is
// not a repeat's layer.
mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 4 : tensor<176x64xf32>
// CHECK-LABEL: func.func @load_layer
// CHECK-SAME: (%[[I:[^ ,:]+]]: index)
func.func @load_layer(%i: index) -> tensor<176x64xf32> {
  // CHECK: %[[W:[^ ,:]+]] = mlt.load @"model.layers.{}.mlp.up_proj.weight"[%[[I]]] : tensor<176x64xf32>
  // CHECK: return %[[W]]
  %w = mlt.load @"model.layers.{}.mlp.up_proj.weight"[%i] : tensor<176x64xf32>
  return %w : tensor<176x64xf32>
}

// -----

// Tests that a repeat without iter_args round-trips, its implicit yield
// elided, and that its layer index can read per-layer parameters.
mlt.param @"model.layers.{}.w" layers 3 : tensor<8xf32>
// CHECK-LABEL: func.func @repeat_no_iter_args
func.func @repeat_no_iter_args() {
  // CHECK: mlt.repeat %[[L:[^ ,:]+]] = 0 to 3 {
  // CHECK-NEXT: mlt.load @"model.layers.{}.w"[%[[L]]] : tensor<8xf32>
  // CHECK-NEXT: }
  mlt.repeat %layer = 0 to 3 {
    %w = mlt.load @"model.layers.{}.w"[%layer] : tensor<8xf32>
  }
  return
}

// -----

// Tests that a repeat over a sub-range with an explicit empty yield and an
// extra attribute round-trips.
// CHECK-LABEL: func.func @repeat_sub_range
func.func @repeat_sub_range() {
  // CHECK: mlt.repeat %{{[^ ,:]+}} = 2 to 5 {
  // CHECK-NEXT: } {foo = "bar"}
  mlt.repeat %layer = 2 to 5 {
    mlt.yield
  } {foo = "bar"}
  return
}

// -----

// Tests that a repeat with one iter_arg threads it to its yield and result.
// CHECK-LABEL: func.func @repeat_one_iter_arg
// CHECK-SAME: (%[[X:[^ ,:]+]]: tensor<?x?x64xf32>)
func.func @repeat_one_iter_arg(%x: tensor<?x?x64xf32>) -> tensor<?x?x64xf32> {
  // CHECK: %[[R:[^ ,:]+]] = mlt.repeat %{{[^ ,:]+}} = 0 to 2 iter_args(%[[H:[^ ,:]+]] = %[[X]]) -> (tensor<?x?x64xf32>) {
  // CHECK-NEXT: %[[S:[^ ,:]+]] = mlt.add %[[H]], %[[H]] : tensor<?x?x64xf32>
  // CHECK-NEXT: mlt.yield %[[S]] : tensor<?x?x64xf32>
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[R]]
  // GENERIC-LABEL: sym_name = "repeat_one_iter_arg"
  // GENERIC: "mlt.repeat"(%{{[^ ,:)]+}}) <{lower = 0 : i64, upper = 2 : i64}> ({
  // GENERIC-NEXT: ^bb0(%{{[^ ,:]+}}: index, %{{[^ ,:]+}}: tensor<?x?x64xf32>):
  // GENERIC: "mlt.yield"(%{{[^ ,:)]+}}) : (tensor<?x?x64xf32>) -> ()
  // GENERIC-NEXT: }) : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
  %r = mlt.repeat %layer = 0 to 2 iter_args(%h = %x) -> (tensor<?x?x64xf32>) {
    %s = mlt.add %h, %h : tensor<?x?x64xf32>
    mlt.yield %s : tensor<?x?x64xf32>
  }
  return %r : tensor<?x?x64xf32>
}

// -----

// Tests that a repeat with two iter_args of different types keeps them in
// order, and that its results are used separately.
// CHECK-LABEL: func.func @repeat_two_iter_args
// CHECK-SAME: (%[[A:[^ ,:]+]]: tensor<8xf32>, %[[B:[^ ,:]+]]: tensor<4x2xbf16>)
func.func @repeat_two_iter_args(%a: tensor<8xf32>, %b: tensor<4x2xbf16>) -> (tensor<8xf32>, tensor<4x2xbf16>) {
  // CHECK: %[[R:[^ ,:]+]]:2 = mlt.repeat %{{[^ ,:]+}} = 1 to 4 iter_args(%[[X:[^ ,:]+]] = %[[A]], %[[Y:[^ ,:]+]] = %[[B]]) -> (tensor<8xf32>, tensor<4x2xbf16>) {
  // CHECK-NEXT: %[[S:[^ ,:]+]] = mlt.silu %[[X]] : tensor<8xf32>
  // CHECK-NEXT: mlt.yield %[[S]], %[[Y]] : tensor<8xf32>, tensor<4x2xbf16>
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[R]]#0, %[[R]]#1
  %r:2 = mlt.repeat %layer = 1 to 4 iter_args(%x = %a, %y = %b) -> (tensor<8xf32>, tensor<4x2xbf16>) {
    %s = mlt.silu %x : tensor<8xf32>
    mlt.yield %s, %y : tensor<8xf32>, tensor<4x2xbf16>
  }
  return %r#0, %r#1 : tensor<8xf32>, tensor<4x2xbf16>
}

// -----

// Tests that mlt.embedding round-trips with i32 and i64 ids and infers
// [batch, seq, hidden] in the table's element type.
// CHECK-LABEL: func.func @embedding
// CHECK-SAME: (%[[I32:[^ ,:]+]]: tensor<?x?xi32>, %[[I64:[^ ,:]+]]: tensor<2x8xi64>, %[[T:[^ ,:]+]]: tensor<256x64xbf16>)
func.func @embedding(%ids32: tensor<?x?xi32>, %ids64: tensor<2x8xi64>, %table: tensor<256x64xbf16>) {
  // CHECK: %[[E0:[^ ,:]+]] = mlt.embedding %[[I32]], %[[T]] : tensor<?x?xi32>, tensor<256x64xbf16>
  // CHECK: mlt.silu %[[E0]] : tensor<?x?x64xbf16>
  // CHECK: %[[E1:[^ ,:]+]] = mlt.embedding %[[I64]], %[[T]] : tensor<2x8xi64>, tensor<256x64xbf16>
  // CHECK: mlt.silu %[[E1]] : tensor<2x8x64xbf16>
  // GENERIC-LABEL: sym_name = "embedding"
  // GENERIC: "mlt.embedding"(%{{.*}}, %{{.*}}) : (tensor<?x?xi32>, tensor<256x64xbf16>) -> tensor<?x?x64xbf16>
  // GENERIC: "mlt.embedding"(%{{.*}}, %{{.*}}) : (tensor<2x8xi64>, tensor<256x64xbf16>) -> tensor<2x8x64xbf16>
  %e0 = mlt.embedding %ids32, %table : tensor<?x?xi32>, tensor<256x64xbf16>
  %s0 = mlt.silu %e0 : tensor<?x?x64xbf16>
  %e1 = mlt.embedding %ids64, %table : tensor<2x8xi64>, tensor<256x64xbf16>
  %s1 = mlt.silu %e1 : tensor<2x8x64xbf16>
  return
}

// -----

// Tests that mlt.matmul round-trips with no transpose and with each and both
// transposes against a shared rank-2 rhs, and infers the transposed result
// shapes.
// CHECK-LABEL: func.func @matmul_transposes
// CHECK-SAME: (%[[X:[^ ,:]+]]: tensor<?x?x64xf32>, %[[XT:[^ ,:]+]]: tensor<?x64x?xf32>, %[[W:[^ ,:]+]]: tensor<64x176xf32>, %[[WT:[^ ,:]+]]: tensor<176x64xf32>)
func.func @matmul_transposes(%x: tensor<?x?x64xf32>, %xt: tensor<?x64x?xf32>, %w: tensor<64x176xf32>, %wt: tensor<176x64xf32>) {
  // CHECK: %[[M0:[^ ,:]+]] = mlt.matmul %[[X]], %[[W]] : tensor<?x?x64xf32>, tensor<64x176xf32>
  // CHECK: mlt.silu %[[M0]] : tensor<?x?x176xf32>
  // CHECK: %[[M1:[^ ,:]+]] = mlt.matmul %[[X]], %[[WT]] transpose_rhs : tensor<?x?x64xf32>, tensor<176x64xf32>
  // CHECK: mlt.silu %[[M1]] : tensor<?x?x176xf32>
  // CHECK: %[[M2:[^ ,:]+]] = mlt.matmul %[[XT]], %[[W]] transpose_lhs : tensor<?x64x?xf32>, tensor<64x176xf32>
  // CHECK: mlt.silu %[[M2]] : tensor<?x?x176xf32>
  // CHECK: %[[M3:[^ ,:]+]] = mlt.matmul %[[XT]], %[[WT]] transpose_lhs transpose_rhs : tensor<?x64x?xf32>, tensor<176x64xf32>
  // CHECK: mlt.silu %[[M3]] : tensor<?x?x176xf32>
  // GENERIC-LABEL: sym_name = "matmul_transposes"
  // GENERIC: "mlt.matmul"(%{{.*}}, %{{.*}}) : (tensor<?x?x64xf32>, tensor<64x176xf32>) -> tensor<?x?x176xf32>
  // GENERIC: "mlt.matmul"(%{{.*}}, %{{.*}}) <{transpose_rhs}> : (tensor<?x?x64xf32>, tensor<176x64xf32>) -> tensor<?x?x176xf32>
  // GENERIC: "mlt.matmul"(%{{.*}}, %{{.*}}) <{transpose_lhs}> : (tensor<?x64x?xf32>, tensor<64x176xf32>) -> tensor<?x?x176xf32>
  // GENERIC: "mlt.matmul"(%{{.*}}, %{{.*}}) <{transpose_lhs, transpose_rhs}> : (tensor<?x64x?xf32>, tensor<176x64xf32>) -> tensor<?x?x176xf32>
  %m0 = mlt.matmul %x, %w : tensor<?x?x64xf32>, tensor<64x176xf32>
  %s0 = mlt.silu %m0 : tensor<?x?x176xf32>
  %m1 = mlt.matmul %x, %wt transpose_rhs : tensor<?x?x64xf32>, tensor<176x64xf32>
  %s1 = mlt.silu %m1 : tensor<?x?x176xf32>
  %m2 = mlt.matmul %xt, %w transpose_lhs : tensor<?x64x?xf32>, tensor<64x176xf32>
  %s2 = mlt.silu %m2 : tensor<?x?x176xf32>
  %m3 = mlt.matmul %xt, %wt transpose_lhs transpose_rhs : tensor<?x64x?xf32>, tensor<176x64xf32>
  %s3 = mlt.silu %m3 : tensor<?x?x176xf32>
  return
}

// -----

// Tests that mlt.matmul of two matrices with static shapes infers a static
// result.
// CHECK-LABEL: func.func @matmul_rank2_static
// CHECK-SAME: (%[[A:[^ ,:]+]]: tensor<3x5xf16>, %[[B:[^ ,:]+]]: tensor<5x7xf16>)
func.func @matmul_rank2_static(%a: tensor<3x5xf16>, %b: tensor<5x7xf16>) -> tensor<3x7xf16> {
  // CHECK: %[[M:[^ ,:]+]] = mlt.matmul %[[A]], %[[B]] : tensor<3x5xf16>, tensor<5x7xf16>
  // CHECK: return %[[M]] : tensor<3x7xf16>
  // GENERIC-LABEL: sym_name = "matmul_rank2_static"
  // GENERIC: "mlt.matmul"(%{{.*}}, %{{.*}}) : (tensor<3x5xf16>, tensor<5x7xf16>) -> tensor<3x7xf16>
  %m = mlt.matmul %a, %b : tensor<3x5xf16>, tensor<5x7xf16>
  return %m : tensor<3x7xf16>
}

// -----

// Tests that mlt.matmul with a batched rank-3 rhs merges the batch dimension
// (a static size wins over `?`) and honors transpose_rhs, as in q k^T.
// CHECK-LABEL: func.func @matmul_batched
// CHECK-SAME: (%[[Q:[^ ,:]+]]: tensor<?x8x16xf64>, %[[K:[^ ,:]+]]: tensor<4x8x16xf64>)
func.func @matmul_batched(%q: tensor<?x8x16xf64>, %k: tensor<4x8x16xf64>) -> tensor<4x8x8xf64> {
  // CHECK: %[[M:[^ ,:]+]] = mlt.matmul %[[Q]], %[[K]] transpose_rhs : tensor<?x8x16xf64>, tensor<4x8x16xf64>
  // CHECK: return %[[M]] : tensor<4x8x8xf64>
  // GENERIC-LABEL: sym_name = "matmul_batched"
  // GENERIC: "mlt.matmul"(%{{.*}}, %{{.*}}) <{transpose_rhs}> : (tensor<?x8x16xf64>, tensor<4x8x16xf64>) -> tensor<4x8x8xf64>
  %m = mlt.matmul %q, %k transpose_rhs : tensor<?x8x16xf64>, tensor<4x8x16xf64>
  return %m : tensor<4x8x8xf64>
}

// -----

// Tests that mlt.rms_norm round-trips its epsilon and infers the input's type,
// taking the static hidden size from the weight.
// CHECK-LABEL: func.func @rms_norm
// CHECK-SAME: (%[[H:[^ ,:]+]]: tensor<?x?x?xbf16>, %[[W:[^ ,:]+]]: tensor<64xbf16>)
func.func @rms_norm(%h: tensor<?x?x?xbf16>, %w: tensor<64xbf16>) -> tensor<?x?x64xbf16> {
  // CHECK: %[[N:[^ ,:]+]] = mlt.rms_norm %[[H]], %[[W]] eps = 1.000000e-05 : tensor<?x?x?xbf16>, tensor<64xbf16>
  // CHECK: return %[[N]] : tensor<?x?x64xbf16>
  // GENERIC-LABEL: sym_name = "rms_norm"
  // GENERIC: "mlt.rms_norm"(%{{.*}}, %{{.*}}) <{epsilon = 1.000000e-05 : f64}> : (tensor<?x?x?xbf16>, tensor<64xbf16>) -> tensor<?x?x64xbf16>
  %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x?xbf16>, tensor<64xbf16>
  return %n : tensor<?x?x64xbf16>
}

// -----

// Tests that mlt.rope round-trips its theta and keeps the input's type.
// CHECK-LABEL: func.func @rope
// CHECK-SAME: (%[[Q:[^ ,:]+]]: tensor<?x?x4x16xf32>)
func.func @rope(%q: tensor<?x?x4x16xf32>) -> tensor<?x?x4x16xf32> {
  // CHECK: %[[R:[^ ,:]+]] = mlt.rope %[[Q]] theta = 1.000000e+04 : tensor<?x?x4x16xf32>
  // CHECK: return %[[R]] : tensor<?x?x4x16xf32>
  // GENERIC-LABEL: sym_name = "rope"
  // GENERIC: "mlt.rope"(%{{.*}}) <{theta = 1.000000e+04 : f64}> : (tensor<?x?x4x16xf32>) -> tensor<?x?x4x16xf32>
  %r = mlt.rope %q theta = 1.0e+04 : tensor<?x?x4x16xf32>
  return %r : tensor<?x?x4x16xf32>
}

// -----

// Tests that mlt.rope round-trips its rotary scaling, with and without
// `inverse`.
// CHECK-LABEL: func.func @rope_llama3
// CHECK-SAME: (%[[Q:[^ ,:]+]]: tensor<?x?x8x64xf32>)
func.func @rope_llama3(%q: tensor<?x?x8x64xf32>) -> tensor<?x?x8x64xf32> {
  // CHECK: %[[R:[^ ,:]+]] = mlt.rope %[[Q]] theta = 5.000000e+05 scaling = <factor = 8.000000e+00 : f64, low_freq_factor = 1.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, original_max_position_embeddings = 8192> : tensor<?x?x8x64xf32>
  // CHECK: %[[B:[^ ,:]+]] = mlt.rope %[[R]] theta = 5.000000e+05 scaling = <factor = 8.000000e+00 : f64, low_freq_factor = 1.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, original_max_position_embeddings = 8192> inverse : tensor<?x?x8x64xf32>
  // CHECK: return %[[B]] : tensor<?x?x8x64xf32>
  // GENERIC-LABEL: sym_name = "rope_llama3"
  // GENERIC: "mlt.rope"(%{{.*}}) <{scaling = #mlt.llama3_rope_scaling<factor = 8.000000e+00 : f64, low_freq_factor = 1.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, original_max_position_embeddings = 8192>, theta = 5.000000e+05 : f64}>
  %r = mlt.rope %q theta = 5.0e+05 scaling = <factor = 8.0, low_freq_factor = 1.0,
      high_freq_factor = 4.0, original_max_position_embeddings = 8192> : tensor<?x?x8x64xf32>
  %b = mlt.rope %r theta = 5.0e+05 scaling = #mlt.llama3_rope_scaling<factor = 8.0,
      low_freq_factor = 1.0, high_freq_factor = 4.0,
      original_max_position_embeddings = 8192> inverse : tensor<?x?x8x64xf32>
  return %b : tensor<?x?x8x64xf32>
}

// -----

// Tests that mlt.attention round-trips with and without `causal`, and with
// grouped-query heads (4 query heads over 2 key/value heads), keeping the
// query's shape.
// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%[[Q:[^ ,:]+]]: tensor<?x?x4x16xf32>, %[[K:[^ ,:]+]]: tensor<?x?x2x16xf32>, %[[V:[^ ,:]+]]: tensor<?x?x2x16xf32>, %[[K4:[^ ,:]+]]: tensor<2x?x4x16xf32>)
func.func @attention(%q: tensor<?x?x4x16xf32>, %k: tensor<?x?x2x16xf32>, %v: tensor<?x?x2x16xf32>, %k4: tensor<2x?x4x16xf32>) {
  // CHECK: %[[A0:[^ ,:]+]] = mlt.attention %[[Q]], %[[K]], %[[V]] causal scale = 2.500000e-01 : tensor<?x?x4x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>
  // CHECK: mlt.silu %[[A0]] : tensor<?x?x4x16xf32>
  // CHECK: %[[A1:[^ ,:]+]] = mlt.attention %[[Q]], %[[K4]], %[[K4]] scale = 1.250000e-01 : tensor<?x?x4x16xf32>, tensor<2x?x4x16xf32>, tensor<2x?x4x16xf32>
  // CHECK: mlt.silu %[[A1]] : tensor<2x?x4x16xf32>
  // GENERIC-LABEL: sym_name = "attention"
  // GENERIC: "mlt.attention"(%{{.*}}, %{{.*}}, %{{.*}}) <{causal, scale = 2.500000e-01 : f64}> : (tensor<?x?x4x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>) -> tensor<?x?x4x16xf32>
  // GENERIC: "mlt.attention"(%{{.*}}, %{{.*}}, %{{.*}}) <{scale = 1.250000e-01 : f64}> : (tensor<?x?x4x16xf32>, tensor<2x?x4x16xf32>, tensor<2x?x4x16xf32>) -> tensor<2x?x4x16xf32>
  %a0 = mlt.attention %q, %k, %v causal scale = 0.25 : tensor<?x?x4x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>
  %s0 = mlt.silu %a0 : tensor<?x?x4x16xf32>
  %a1 = mlt.attention %q, %k4, %k4 scale = 0.125 : tensor<?x?x4x16xf32>, tensor<2x?x4x16xf32>, tensor<2x?x4x16xf32>
  %s1 = mlt.silu %a1 : tensor<2x?x4x16xf32>
  return
}

// -----

// Tests that the elementwise ops (swiglu, silu, add, mul) round-trip with a
// single type.
// CHECK-LABEL: func.func @elementwise
// CHECK-SAME: (%[[G:[^ ,:]+]]: tensor<?x?x176xf16>, %[[U:[^ ,:]+]]: tensor<?x?x176xf16>)
func.func @elementwise(%g: tensor<?x?x176xf16>, %u: tensor<?x?x176xf16>) -> tensor<?x?x176xf16> {
  // CHECK: %[[SW:[^ ,:]+]] = mlt.swiglu %[[G]], %[[U]] : tensor<?x?x176xf16>
  // CHECK: %[[SI:[^ ,:]+]] = mlt.silu %[[SW]] : tensor<?x?x176xf16>
  // CHECK: %[[AD:[^ ,:]+]] = mlt.add %[[SI]], %[[G]] : tensor<?x?x176xf16>
  // CHECK: %[[MU:[^ ,:]+]] = mlt.mul %[[AD]], %[[U]] : tensor<?x?x176xf16>
  // CHECK: return %[[MU]]
  // GENERIC-LABEL: sym_name = "elementwise"
  // GENERIC: "mlt.swiglu"(%{{.*}}, %{{.*}}) : (tensor<?x?x176xf16>, tensor<?x?x176xf16>) -> tensor<?x?x176xf16>
  // GENERIC: "mlt.silu"(%{{.*}}) : (tensor<?x?x176xf16>) -> tensor<?x?x176xf16>
  // GENERIC: "mlt.add"(%{{.*}}, %{{.*}}) : (tensor<?x?x176xf16>, tensor<?x?x176xf16>) -> tensor<?x?x176xf16>
  // GENERIC: "mlt.mul"(%{{.*}}, %{{.*}}) : (tensor<?x?x176xf16>, tensor<?x?x176xf16>) -> tensor<?x?x176xf16>
  %sw = mlt.swiglu %g, %u : tensor<?x?x176xf16>
  %si = mlt.silu %sw : tensor<?x?x176xf16>
  %ad = mlt.add %si, %g : tensor<?x?x176xf16>
  %mu = mlt.mul %ad, %u : tensor<?x?x176xf16>
  return %mu : tensor<?x?x176xf16>
}

// -----

// Tests that mlt.reshape splits the hidden dimension into heads and merges
// it back, keeping the dynamic dimensions.
// CHECK-LABEL: func.func @reshape
// CHECK-SAME: (%[[X:[^ ,:]+]]: tensor<?x?x64xf32>)
func.func @reshape(%x: tensor<?x?x64xf32>) -> tensor<?x?x64xf32> {
  // CHECK: %[[S:[^ ,:]+]] = mlt.reshape %[[X]] : tensor<?x?x64xf32> -> tensor<?x?x4x16xf32>
  // CHECK: %[[M:[^ ,:]+]] = mlt.reshape %[[S]] : tensor<?x?x4x16xf32> -> tensor<?x?x64xf32>
  // CHECK: return %[[M]]
  %s = mlt.reshape %x : tensor<?x?x64xf32> -> tensor<?x?x4x16xf32>
  %m = mlt.reshape %s : tensor<?x?x4x16xf32> -> tensor<?x?x64xf32>
  return %m : tensor<?x?x64xf32>
}

// -----

// Tests that mlt.transpose round-trips its permutation and infers the
// permuted shape.
// CHECK-LABEL: func.func @transpose
// CHECK-SAME: (%[[X:[^ ,:]+]]: tensor<?x8x4x16xf32>)
func.func @transpose(%x: tensor<?x8x4x16xf32>) -> tensor<?x4x8x16xf32> {
  // CHECK: %[[T:[^ ,:]+]] = mlt.transpose %[[X]] [0, 2, 1, 3] : tensor<?x8x4x16xf32>
  // CHECK: return %[[T]] : tensor<?x4x8x16xf32>
  // GENERIC-LABEL: sym_name = "transpose"
  // GENERIC: "mlt.transpose"(%{{.*}}) <{permutation = array<i64: 0, 2, 1, 3>}> : (tensor<?x8x4x16xf32>) -> tensor<?x4x8x16xf32>
  %t = mlt.transpose %x [0, 2, 1, 3] : tensor<?x8x4x16xf32>
  return %t : tensor<?x4x8x16xf32>
}

// -----

// Tests that mlt.cast converts float32 to bfloat16, keeping the shape.
// CHECK-LABEL: func.func @cast
// CHECK-SAME: (%[[W:[^ ,:]+]]: tensor<64x?xf32>)
func.func @cast(%w: tensor<64x?xf32>) -> tensor<64x?xbf16> {
  // CHECK: %[[C:[^ ,:]+]] = mlt.cast %[[W]] : tensor<64x?xf32> -> tensor<64x?xbf16>
  // CHECK: return %[[C]]
  %c = mlt.cast %w : tensor<64x?xf32> -> tensor<64x?xbf16>
  return %c : tensor<64x?xbf16>
}

// -----

// Tests that mlt.cross_entropy infers a float32 loss for float32 (and
// bfloat16) logits and a float64 loss for float64 logits, with i64 labels.
// CHECK-LABEL: func.func @cross_entropy
// CHECK-SAME: (%[[L32:[^ ,:]+]]: tensor<?x?x256xf32>, %[[L64:[^ ,:]+]]: tensor<2x8x256xf64>, %[[LBF:[^ ,:]+]]: tensor<?x?x256xbf16>, %[[Y:[^ ,:]+]]: tensor<?x?xi64>, %[[Y2:[^ ,:]+]]: tensor<2x8xi32>)
func.func @cross_entropy(%l32: tensor<?x?x256xf32>, %l64: tensor<2x8x256xf64>, %lbf: tensor<?x?x256xbf16>,
                         %y: tensor<?x?xi64>, %y2: tensor<2x8xi32>) -> (tensor<f32>, tensor<f64>, tensor<f32>) {
  // CHECK: %[[E32:[^ ,:]+]] = mlt.cross_entropy %[[L32]], %[[Y]] : tensor<?x?x256xf32>, tensor<?x?xi64>
  // CHECK: %[[E64:[^ ,:]+]] = mlt.cross_entropy %[[L64]], %[[Y2]] : tensor<2x8x256xf64>, tensor<2x8xi32>
  // CHECK: %[[EBF:[^ ,:]+]] = mlt.cross_entropy %[[LBF]], %[[Y]] : tensor<?x?x256xbf16>, tensor<?x?xi64>
  // CHECK: return %[[E32]], %[[E64]], %[[EBF]] : tensor<f32>, tensor<f64>, tensor<f32>
  // GENERIC-LABEL: sym_name = "cross_entropy"
  // GENERIC: "mlt.cross_entropy"(%{{.*}}, %{{.*}}) : (tensor<?x?x256xf32>, tensor<?x?xi64>) -> tensor<f32>
  // GENERIC: "mlt.cross_entropy"(%{{.*}}, %{{.*}}) : (tensor<2x8x256xf64>, tensor<2x8xi32>) -> tensor<f64>
  // GENERIC: "mlt.cross_entropy"(%{{.*}}, %{{.*}}) : (tensor<?x?x256xbf16>, tensor<?x?xi64>) -> tensor<f32>
  %e32 = mlt.cross_entropy %l32, %y : tensor<?x?x256xf32>, tensor<?x?xi64>
  %e64 = mlt.cross_entropy %l64, %y2 : tensor<2x8x256xf64>, tensor<2x8xi32>
  %ebf = mlt.cross_entropy %lbf, %y : tensor<?x?x256xbf16>, tensor<?x?xi64>
  return %e32, %e64, %ebf : tensor<f32>, tensor<f64>, tensor<f32>
}

// -----

// Tests that the `mlt.layer` attribute round-trips on mlt and other ops.
// CHECK-LABEL: func.func @layer_attr
func.func @layer_attr(%a: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK: mlt.add %{{[^ ,:]+}}, %{{[^ ,:]+}} {mlt.layer = 3 : i64} : tensor<4xf32>
  // CHECK: arith.constant {mlt.layer = 0 : index} 0 : index
  %s = mlt.add %a, %a {mlt.layer = 3 : i64} : tensor<4xf32>
  %c = arith.constant {mlt.layer = 0 : index} 0 : index
  return %s : tensor<4xf32>
}
