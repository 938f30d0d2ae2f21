// RUN: mlt-opt %s -split-input-file -verify-diagnostics

// Tests that mlt.repeat needs one type per iter_arg: too few types.
func.func @too_few_types(%a: tensor<8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{expected 2 types for iter_args, got 1}}
  %r:2 = mlt.repeat %layer = 0 to 2 iter_args(%x = %a, %y = %b) -> (tensor<8xf32>) {
    mlt.yield %x, %y : tensor<8xf32>, tensor<8xf32>
  }
  return
}

// -----

// Tests that mlt.repeat needs one type per iter_arg: too many types.
func.func @too_many_types(%a: tensor<8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{expected 2 types for iter_args, got 3}}
  %r:2 = mlt.repeat %layer = 0 to 2 iter_args(%x = %a, %y = %b) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
    mlt.yield %x, %y : tensor<8xf32>, tensor<8xf32>
  }
  return
}

// -----

// Tests that mlt.repeat needs `to` between its bounds.
func.func @missing_to() {
  // expected-error @+1 {{expected 'to'}}
  mlt.repeat %layer = 0 2 {
  }
  return
}

// -----

// Tests that mlt.repeat needs `=` between the layer index and the lower bound.
func.func @missing_equal() {
  // expected-error @+1 {{expected '='}}
  mlt.repeat %layer 0 to 2 {
  }
  return
}

// -----

// Tests that mlt.repeat's bounds are integer literals, not SSA values.
func.func @ssa_bound(%n: index) {
  // expected-error @+1 {{expected integer value}}
  mlt.repeat %layer = 0 to %n {
  }
  return
}

// -----

// Tests that mlt.repeat needs the carried types after its iter_args.
func.func @missing_arrow(%a: tensor<8xf32>) {
  // expected-error @+1 {{expected '->'}}
  %r = mlt.repeat %layer = 0 to 2 iter_args(%x = %a) {
    mlt.yield %x : tensor<8xf32>
  }
  return
}

// -----

// Tests that an iter_arg's initial value must have the carried type.
func.func @init_type(%a: tensor<8xf32>) {
  // expected-error @+2 {{use of value '%a' expects different type than prior uses: 'tensor<8xbf16>' vs 'tensor<8xf32>'}}
  // expected-note @-2 {{prior use here}}
  %r = mlt.repeat %layer = 0 to 2 iter_args(%x = %a) -> (tensor<8xbf16>) {
    mlt.yield %x : tensor<8xbf16>
  }
  return
}

// -----

// Tests that a special-token id of the model configuration is an integer or
// a list of integers.
// expected-error @+5 {{expected integer value}}
// expected-error @+4 {{failed to parse MLT_LlamaConfigAttr parameter 'bos_token_id'}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false, bos_token_id = "1">} {
}

// -----

// Tests that a list of special-token ids holds integers alone.
// expected-error @+5 {{expected integer value}}
// expected-error @+4 {{failed to parse MLT_LlamaConfigAttr parameter 'eos_token_id'}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false, eos_token_id = [2, x]>} {
}
