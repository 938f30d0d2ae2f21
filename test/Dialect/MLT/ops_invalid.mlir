// RUN: mlt-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// #mlt.llama and the dialect's discardable attributes
//===----------------------------------------------------------------------===//

// Tests that the model configuration rejects a zero vocabulary.
// expected-error @+1 {{vocab_size must be positive, got 0}}
module attributes {mlt.model = #mlt.llama<vocab_size = 0, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false>} {
}

// -----

// Tests that the model configuration rejects a negative hidden size.
// expected-error @+1 {{hidden_size must be positive, got -64}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = -64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false>} {
}

// -----

// Tests that the model configuration rejects a zero MLP size.
// expected-error @+1 {{intermediate_size must be positive, got 0}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 0, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false>} {
}

// -----

// Tests that the model configuration rejects a model without layers.
// expected-error @+1 {{num_layers must be positive, got 0}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 0, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false>} {
}

// -----

// Tests that the model configuration rejects zero attention heads.
// expected-error @+1 {{num_heads must be positive, got 0}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 0, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false>} {
}

// -----

// Tests that the model configuration rejects zero key/value heads (before
// the multiple rule could divide by it).
// expected-error @+1 {{num_kv_heads must be positive, got 0}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 0,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false>} {
}

// -----

// Tests that the model configuration rejects a zero head size.
// expected-error @+1 {{head_dim must be positive, got 0}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 0, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false>} {
}

// -----

// Tests that the model configuration rejects a non-positive maximum sequence
// length.
// expected-error @+1 {{max_position_embeddings must be positive, got -1}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = -1, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false>} {
}

// -----

// Tests that the model configuration needs query heads in whole groups per
// key/value head.
// expected-error @+1 {{num_heads (6) must be a multiple of num_kv_heads (4)}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 6, num_kv_heads = 4,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false>} {
}

// -----

// Tests that the model configuration needs an even head size for rotary
// embeddings.
// expected-error @+1 {{head_dim (15) must be even for rotary embeddings}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 15, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false>} {
}

// -----

// Tests that the model configuration rejects a zero RMSNorm epsilon.
// expected-error @+1 {{rms_norm_eps must be a positive float}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 0.0,
    rope_theta = 1.0e+04, tie_word_embeddings = false>} {
}

// -----

// Tests that the model configuration rejects a negative rotary base.
// expected-error @+1 {{rope_theta must be a positive float}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = -1.0e+04, tie_word_embeddings = false>} {
}

// -----

// Tests that Llama 3.1's rotary scaling rejects a factor below 1, by the
// runtime's check (a module that verifies lowers to a plan that verifies); the
// attribute's error comes first, then its parser's.
// expected-error @+6 {{llama3 rope scaling: factor must be at least 1, got 0.5}}
// expected-error @+5 {{failed to parse MLT_LlamaConfigAttr parameter 'rope_scaling'}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false,
    rope_scaling = #mlt.llama3_rope_scaling<factor = 0.5, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 8192>>} {
}

// -----

// Tests that Llama 3.1's rotary scaling rejects a non-positive low_freq_factor,
// by the runtime's check (a module that verifies lowers to a plan that
// verifies); the attribute's error comes first, then its parser's.
// expected-error @+6 {{llama3 rope scaling: low_freq_factor must be positive, got 0}}
// expected-error @+5 {{failed to parse MLT_LlamaConfigAttr parameter 'rope_scaling'}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false,
    rope_scaling = #mlt.llama3_rope_scaling<factor = 8.0, low_freq_factor = 0.0, high_freq_factor = 4.0, original_max_position_embeddings = 8192>>} {
}

// -----

// Tests that Llama 3.1's rotary scaling rejects a high_freq_factor not above
// low_freq_factor, by the runtime's check (a module that verifies lowers to a
// plan that verifies); the attribute's error comes first, then its parser's.
// expected-error @+6 {{llama3 rope scaling: high_freq_factor (1) must be greater than low_freq_factor (4)}}
// expected-error @+5 {{failed to parse MLT_LlamaConfigAttr parameter 'rope_scaling'}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false,
    rope_scaling = #mlt.llama3_rope_scaling<factor = 8.0, low_freq_factor = 4.0, high_freq_factor = 1.0, original_max_position_embeddings = 8192>>} {
}

// -----

// Tests that Llama 3.1's rotary scaling rejects a non-positive original
// context, by the runtime's check (a module that verifies lowers to a plan that
// verifies); the attribute's error comes first, then its parser's.
// expected-error @+6 {{llama3 rope scaling: original_max_position_embeddings must be positive, got 0}}
// expected-error @+5 {{failed to parse MLT_LlamaConfigAttr parameter 'rope_scaling'}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = false,
    rope_scaling = #mlt.llama3_rope_scaling<factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 0>>} {
}

// -----

// Tests that the model configuration's float parameters must be written as
// floats: an integer rope_theta is a parse error.
// expected-error @+5 {{invalid kind of attribute specified}}
// expected-error @+4 {{failed to parse MLT_LlamaConfigAttr parameter 'rope_theta' which is to be a `::mlir::FloatAttr`}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 10000, tie_word_embeddings = false>} {
}

// -----

// Tests that tie_word_embeddings must be a boolean: 1 is a parse error.
// expected-error @+5 {{invalid kind of attribute specified}}
// expected-error @+4 {{failed to parse MLT_LlamaConfigAttr parameter 'tie_word_embeddings' which is to be a `::mlir::BoolAttr`}}
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
    intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
    head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
    rope_theta = 1.0e+04, tie_word_embeddings = 1>} {
}

// -----

// Tests that `mlt.model` must hold a model configuration.
// expected-error @+1 {{'mlt.model' must be a model configuration such as #mlt.llama<...>}}
module attributes {mlt.model = "llama"} {
}

// -----

// Tests that `mlt.model` belongs on a module only.
// expected-error @+1 {{'mlt.model' belongs on a module, not on 'func.func'}}
func.func @model_on_func() attributes {mlt.model = #mlt.llama<vocab_size = 256,
    hidden_size = 64, intermediate_size = 176, num_layers = 2, num_heads = 4,
    num_kv_heads = 2, head_dim = 16, max_position_embeddings = 2048,
    rms_norm_eps = 1.0e-05, rope_theta = 1.0e+04, tie_word_embeddings = false>} {
  return
}

// -----

// Tests that `mlt.layer` rejects a negative layer index.
func.func @negative_layer(%a: tensor<4xf32>) {
  // expected-error @+1 {{'mlt.layer' must be a non-negative integer layer index}}
  %s = mlt.add %a, %a {mlt.layer = -1 : i64} : tensor<4xf32>
  return
}

// -----

// Tests that `mlt.layer` rejects a value that is not an integer.
func.func @string_layer(%a: tensor<4xf32>) {
  // expected-error @+1 {{'mlt.layer' must be a non-negative integer layer index}}
  %s = mlt.add %a, %a {mlt.layer = "0"} : tensor<4xf32>
  return
}

// -----

// Tests that `mlt.layer` rejects an unsigned integer type rather than reading
// it as signless.
func.func @unsigned_layer(%a: tensor<4xf32>) {
  // expected-error @+1 {{'mlt.layer' must be a non-negative integer layer index}}
  %s = mlt.add %a, %a {mlt.layer = 1 : ui8} : tensor<4xf32>
  return
}

// -----

// Tests that the dialect rejects discardable attributes it does not define.
func.func @unknown_attr(%a: tensor<4xf32>) {
  // expected-error @+1 {{unknown mlt attribute 'mlt.pipeline'}}
  %s = mlt.add %a, %a {mlt.pipeline = 0 : i64} : tensor<4xf32>
  return
}

// -----

// Tests that a pipeline stage's number belongs on a module.
func.func @stage_attr(%a: tensor<4xf32>) {
  // expected-error @+1 {{'mlt.stage' must be a non-negative integer on a module}}
  %s = mlt.add %a, %a {mlt.stage = 0 : i64} : tensor<4xf32>
  return
}

// -----

// Tests that a family's first layer comes before its end.
// expected-error @+1 {{declares layers 2 to 1, none}}
mlt.param @"model.layers.{}.w" layers 2 from 2 : tensor<4xf32>

// -----

// Tests that a stage's family is read within its layers.
mlt.param @"model.layers.{}.w" layers 4 from 2 : tensor<4xf32>
func.func @outside_stage() -> tensor<4xf32> {
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{reads layer 1 of parameter @"model.layers.{}.w", which declares layers 2 to 3}}
  %w = mlt.load @"model.layers.{}.w"[%c1] : tensor<4xf32>
  return %w : tensor<4xf32>
}

// -----

// Tests the pipeline transfers' checks: an axis of the mesh, a shift
// within it, a layout that does not split the axis it moves along.
module attributes {mlt.mesh = #mlt.mesh<pp = 2>} {
  func.func @transfers(%h: tensor<2x4xf32>) {
    // expected-error @+1 {{'dp' is not an axis of the mesh}}
    mlt.send %h to "dp" shift 1 : tensor<2x4xf32>
    return
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<pp = 2>} {
  func.func @transfers(%h: tensor<2x4xf32>) {
    // expected-error @+1 {{shift 2 must be nonzero and smaller in magnitude than the size of axis 'pp' (2)}}
    mlt.send %h to "pp" shift 2 : tensor<2x4xf32>
    return
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<pp = 2, dp = 2>} {
  func.func @transfers() -> tensor<2x4xf32> {
    // expected-error @+1 {{splits a dimension over 'pp', the axis it moves along}}
    %h = mlt.recv from "pp" shift -1 : tensor<2x4xf32> layout #mlt.sharding<[pp, -]>
    return %h : tensor<2x4xf32>
  }
}

//===----------------------------------------------------------------------===//
// mlt.param
//===----------------------------------------------------------------------===//

// -----

// Tests that a parameter needs a name.
// expected-error @+1 {{'mlt.param' op needs a non-empty name}}
mlt.param @"" : tensor<4xf32>

// -----

// Tests that a per-layer family needs '{}' in its name for the layer index.
// expected-error @+1 {{'mlt.param' op declares 2 per-layer parameters, so its name must hold '{}' exactly once for the layer index, got 'model.layers.0.w'}}
mlt.param @"model.layers.0.w" layers 2 : tensor<4xf32>

// -----

// Tests that a per-layer family may hold '{}' only once.
// expected-error @+1 {{must hold '{}' exactly once for the layer index, got 'model.layers.{}.{}.w'}}
mlt.param @"model.layers.{}.{}.w" layers 2 : tensor<4xf32>

// -----

// Tests that a single parameter may not hold the layer placeholder.
// expected-error @+1 {{'mlt.param' op name 'model.layers.{}.w' holds a layer placeholder '{}' but the parameter has no 'layers' count}}
mlt.param @"model.layers.{}.w" : tensor<4xf32>

// -----

// Tests that a parameter needs a static shape.
// expected-error @+1 {{'mlt.param' op must have a static shape, got 'tensor<?x64xf32>'}}
mlt.param @"model.embed_tokens.weight" : tensor<?x64xf32>

// -----

// Tests that a parameter must be a float tensor.
// expected-error @+1 {{'mlt.param' op attribute 'type' failed to satisfy constraint: type attribute of ranked tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values}}
mlt.param @"model.embed_tokens.weight" : tensor<256x64xi32>

// -----

// Tests that a per-layer family needs at least one layer.
// expected-error @+1 {{'mlt.param' op attribute 'layers' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
mlt.param @"model.layers.{}.w" layers 0 : tensor<4xf32>

// -----

// Tests that parameters are declared at module level only.
func.func @param_in_func() {
  // expected-error @+1 {{'mlt.param' op expects parent op 'builtin.module'}}
  mlt.param @"model.norm.weight" : tensor<64xf32>
  return
}

//===----------------------------------------------------------------------===//
// mlt.load
//===----------------------------------------------------------------------===//

// -----

// Tests that mlt.load needs a declared parameter.
func.func @load_missing() -> tensor<64xf32> {
  // expected-error @+1 {{'mlt.load' op reads parameter @model.norm.weight, which no 'mlt.param' declares}}
  %w = mlt.load @model.norm.weight : tensor<64xf32>
  return %w : tensor<64xf32>
}

// -----

// Tests that mlt.load rejects a symbol that is not a parameter.
func.func @not_a_param() {
  return
}
func.func @load_func() -> tensor<64xf32> {
  // expected-error @+1 {{'mlt.load' op reads parameter @not_a_param, which no 'mlt.param' declares}}
  %w = mlt.load @not_a_param : tensor<64xf32>
  return %w : tensor<64xf32>
}

// -----

// Tests that mlt.load's result type must be the parameter's type, or its
// compute copy's: the same shape, and bf16 or f16 only for f32 parameters.
mlt.param @"model.norm.weight" : tensor<64xf32>
func.func @load_wrong_type() -> tensor<32xbf16> {
  // expected-error @+1 {{'mlt.load' op type 'tensor<32xbf16>' does not match parameter @model.norm.weight of type 'tensor<64xf32>'}}
  %w = mlt.load @model.norm.weight : tensor<32xbf16>
  return %w : tensor<32xbf16>
}

// -----

mlt.param @"model.norm.weight" : tensor<64xbf16>
func.func @load_widened_copy() -> tensor<64xf32> {
  // expected-error @+1 {{'mlt.load' op type 'tensor<64xf32>' does not match parameter @model.norm.weight of type 'tensor<64xbf16>'}}
  %w = mlt.load @model.norm.weight : tensor<64xf32>
  return %w : tensor<64xf32>
}

// -----

mlt.param @"model.norm.weight" : tensor<64xf64>
func.func @load_copy_of_f64() -> tensor<64xbf16> {
  // expected-error @+1 {{'mlt.load' op type 'tensor<64xbf16>' does not match parameter @model.norm.weight of type 'tensor<64xf64>'}}
  %w = mlt.load @model.norm.weight : tensor<64xbf16>
  return %w : tensor<64xbf16>
}

// -----

// Tests that mlt.load's result must be a float tensor.
mlt.param @"model.norm.weight" : tensor<64xf32>
func.func @load_int() -> tensor<64xi32> {
  // expected-error @+1 {{'mlt.load' op result #0 must be ranked tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values, but got 'tensor<64xi32>'}}
  %w = mlt.load @model.norm.weight : tensor<64xi32>
  return %w : tensor<64xi32>
}

// -----

// Tests that reading a per-layer parameter needs a layer index.
mlt.param @"model.layers.{}.w" layers 2 : tensor<8xf32>
func.func @load_no_index() -> tensor<8xf32> {
  // expected-error @+1 {{'mlt.load' op reads per-layer parameter @"model.layers.{}.w" without a layer index}}
  %w = mlt.load @"model.layers.{}.w" : tensor<8xf32>
  return %w : tensor<8xf32>
}

// -----

// Tests that a single parameter takes no layer index.
mlt.param @"model.norm.weight" : tensor<64xf32>
func.func @load_extra_index(%i: index) -> tensor<64xf32> {
  // expected-error @+1 {{'mlt.load' op gives a layer index but parameter @model.norm.weight is not per-layer}}
  %w = mlt.load @model.norm.weight[%i] : tensor<64xf32>
  return %w : tensor<64xf32>
}

// -----

// Tests that a repeat may not run more layers than a family it reads declares.
mlt.param @"model.layers.{}.w" layers 2 : tensor<8xf32>
func.func @load_past_last_layer() {
  mlt.repeat %layer = 0 to 3 {
    // expected-error @+1 {{'mlt.load' op reads layer 2 of parameter @"model.layers.{}.w", which declares only 2 layers}}
    %w = mlt.load @"model.layers.{}.w"[%layer] : tensor<8xf32>
  }
  return
}

//===----------------------------------------------------------------------===//
// mlt.repeat / mlt.yield
//===----------------------------------------------------------------------===//

// -----

// Tests that a repeat needs a non-empty range.
func.func @repeat_empty_range() {
  // expected-error @+1 {{'mlt.repeat' op needs 0 <= lower < upper, got 3 to 3}}
  mlt.repeat %layer = 3 to 3 {
  }
  return
}

// -----

// Tests that a repeat rejects a negative lower bound, printed as written.
func.func @repeat_negative() {
  // expected-error @+1 {{'mlt.repeat' op needs 0 <= lower < upper, got -2 to -1}}
  mlt.repeat %layer = -2 to -1 {
  }
  return
}

// -----

// Tests that a repeat's body must take the layer index first, as an index.
func.func @repeat_layer_arg_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{'mlt.repeat' op body must take the layer index and one argument per iter_arg}}
  %r = "mlt.repeat"(%x) <{lower = 0 : i64, upper = 2 : i64}> ({
  ^bb0(%layer: i64, %h: tensor<4xf32>):
    "mlt.yield"(%h) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that a repeat's body needs one argument per iter_arg.
func.func @repeat_missing_body_arg(%x: tensor<4xf32>) {
  // expected-error @+1 {{'mlt.repeat' op body must take the layer index and one argument per iter_arg}}
  %r = "mlt.repeat"(%x) <{lower = 0 : i64, upper = 2 : i64}> ({
  ^bb0(%layer: index):
    "mlt.yield"(%x) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that a repeat has one result per iter_arg.
func.func @repeat_no_results(%x: tensor<4xf32>) {
  // expected-error @+1 {{'mlt.repeat' op has 1 iter_args but 0 results}}
  "mlt.repeat"(%x) <{lower = 0 : i64, upper = 2 : i64}> ({
  ^bb0(%layer: index, %h: tensor<4xf32>):
    "mlt.yield"(%h) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> ()
  return
}

// -----

// Tests that a repeat's body argument must have its iter_arg's type.
func.func @repeat_arg_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{'mlt.repeat' op iter_arg #0 has type 'tensor<4xf32>' but its body argument and result have 'tensor<4xbf16>' and 'tensor<4xf32>'}}
  %r = "mlt.repeat"(%x) <{lower = 0 : i64, upper = 2 : i64}> ({
  ^bb0(%layer: index, %h: tensor<4xbf16>):
    "mlt.yield"(%x) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that a repeat's result must have its iter_arg's type.
func.func @repeat_result_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{'mlt.repeat' op iter_arg #0 has type 'tensor<4xf32>' but its body argument and result have 'tensor<4xf32>' and 'tensor<8xf32>'}}
  %r = "mlt.repeat"(%x) <{lower = 0 : i64, upper = 2 : i64}> ({
  ^bb0(%layer: index, %h: tensor<4xf32>):
    "mlt.yield"(%h) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<8xf32>
  return
}

// -----

// Tests that the yield must pass on values of the carried types.
func.func @yield_wrong_types(%x: tensor<4xf32>, %y: tensor<4xbf16>) -> tensor<4xf32> {
  %r = mlt.repeat %layer = 0 to 2 iter_args(%h = %x) -> (tensor<4xf32>) {
    // expected-error @+1 {{'mlt.yield' op yields ('tensor<4xbf16>') but the enclosing repeat carries ('tensor<4xf32>')}}
    mlt.yield %y : tensor<4xbf16>
  }
  return %r : tensor<4xf32>
}

// -----

// Tests that a repeat with iter_args needs an explicit yield: the implicit one
// yields nothing.
func.func @yield_missing(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mlt.yield' op yields () but the enclosing repeat carries ('tensor<4xf32>')}}
  %r = mlt.repeat %layer = 0 to 2 iter_args(%h = %x) -> (tensor<4xf32>) {
    %s = mlt.add %h, %h : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// Tests that a repeat's body must end with a terminator (rather than the
// verifier reading its last op as a yield).
func.func @repeat_no_terminator(%x: tensor<4xf32>) {
  %r = "mlt.repeat"(%x) <{lower = 0 : i64, upper = 2 : i64}> ({
  ^bb0(%layer: index, %h: tensor<4xf32>):
    // expected-error @+1 {{block with no terminator}}
    %s = "mlt.add"(%h, %h) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that mlt.yield is only valid in a repeat.
func.func @yield_outside(%x: tensor<4xf32>) {
  // expected-error @+1 {{'mlt.yield' op expects parent op 'mlt.repeat'}}
  mlt.yield %x : tensor<4xf32>
}

//===----------------------------------------------------------------------===//
// mlt.embedding
//===----------------------------------------------------------------------===//

// -----

// Tests that the custom form cannot spell an unranked operand.
func.func @embedding_unranked(%ids: tensor<*xi32>, %table: tensor<256x64xf32>) {
  // expected-error @+1 {{custom op 'mlt.embedding' invalid kind of type specified: expected builtin.tensor, but found 'tensor<*xi32>'}}
  %e = mlt.embedding %ids, %table : tensor<*xi32>, tensor<256x64xf32>
  return
}

// -----

// Tests that in the generic form the operand constraint rejects an unranked
// operand before the shape rules see it.
func.func @embedding_unranked_generic(%ids: tensor<*xi32>, %table: tensor<256x64xf32>) {
  // expected-error @+1 {{'mlt.embedding' op operand #0 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<*xi32>'}}
  %e = "mlt.embedding"(%ids, %table) : (tensor<*xi32>, tensor<256x64xf32>) -> tensor<?x?x64xf32>
  return
}

// -----

// Tests that the embedding table must be a matrix.
func.func @embedding_table_rank(%ids: tensor<?x?xi32>, %table: tensor<256xf32>) {
  // expected-error @+1 {{'mlt.embedding' op table must have rank 2, got 1 (shape [256])}}
  %e = mlt.embedding %ids, %table : tensor<?x?xi32>, tensor<256xf32>
  return
}

// -----

// Tests that token ids must be integers.
func.func @embedding_float_ids(%ids: tensor<?x?xf32>, %table: tensor<256x64xf32>) {
  // expected-error @+1 {{'mlt.embedding' op operand #0 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<?x?xf32>'}}
  %e = mlt.embedding %ids, %table : tensor<?x?xf32>, tensor<256x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// mlt.matmul
//===----------------------------------------------------------------------===//

// -----

// Tests that matmul operands must share their element type.
func.func @matmul_element_types(%x: tensor<?x?x64xbf16>, %w: tensor<64x64xf32>) {
  // expected-error @+1 {{'mlt.matmul' op lhs and rhs must have the same element type, got 'bf16' and 'f32'}}
  %m = mlt.matmul %x, %w : tensor<?x?x64xbf16>, tensor<64x64xf32>
  return
}

// -----

// Tests that matmul operands must be matrices or batches of them.
func.func @matmul_rank1(%x: tensor<?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'mlt.matmul' op operands must have rank 2 or more, got 2 and 1}}
  %m = mlt.matmul %x, %w : tensor<?x64xf32>, tensor<64xf32>
  return
}

// -----

// Tests that a batched rhs must have the rank of lhs.
func.func @matmul_rhs_rank(%x: tensor<2x?x?x64xf32>, %w: tensor<2x64x64xf32>) {
  // expected-error @+1 {{'mlt.matmul' op rhs must be a matrix or have the rank of lhs (4), got rank 3}}
  %m = mlt.matmul %x, %w : tensor<2x?x?x64xf32>, tensor<2x64x64xf32>
  return
}

// -----

// Tests that the contracting dimensions must agree.
func.func @matmul_contracting(%x: tensor<?x?x64xf32>, %w: tensor<32x176xf32>) {
  // expected-error @+1 {{'mlt.matmul' op contracting dimensions differ: lhs [?, ?, 64] has 64 but rhs [32, 176] has 32}}
  %m = mlt.matmul %x, %w : tensor<?x?x64xf32>, tensor<32x176xf32>
  return
}

// -----

// Tests that the contracting-dimension error says which operand is
// transposed (a Hugging Face weight [out, in] without transpose_rhs).
func.func @matmul_contracting_transposed(%x: tensor<?x?x64xf32>, %w: tensor<176x64xf32>) {
  // expected-error @+1 {{'mlt.matmul' op contracting dimensions differ: lhs [?, ?, 64] has 64 but rhs [176, 64] has 176}}
  %m = mlt.matmul %x, %w : tensor<?x?x64xf32>, tensor<176x64xf32>
  return
}

// -----

// Tests that the contracting-dimension error marks transposed operands.
func.func @matmul_contracting_marked(%x: tensor<?x64x?xf32>, %w: tensor<64x176xf32>) {
  // expected-error @+1 {{'mlt.matmul' op contracting dimensions differ: lhs [?, 64, ?] has 64 (transposed) but rhs [64, 176] has 176 (transposed)}}
  %m = mlt.matmul %x, %w transpose_lhs transpose_rhs : tensor<?x64x?xf32>, tensor<64x176xf32>
  return
}

// -----

// Tests that a batched rhs must have the batch dimensions of lhs.
func.func @matmul_batch(%q: tensor<4x8x16xf32>, %k: tensor<2x8x16xf32>) {
  // expected-error @+1 {{'mlt.matmul' op batch dimension 0 differs: lhs has 4, rhs has 2}}
  %m = mlt.matmul %q, %k transpose_rhs : tensor<4x8x16xf32>, tensor<2x8x16xf32>
  return
}

// -----

// Tests that in the generic form a declared result type must be the inferred
// one.
func.func @matmul_result_type(%a: tensor<3x5xf32>, %b: tensor<5x7xf32>) {
  // expected-error @+2 {{'mlt.matmul' op failed to infer returned types}}
  // expected-error @+1 {{'mlt.matmul' op inferred type(s) 'tensor<3x7xf32>' are incompatible with return type(s) of operation 'tensor<3x5xf32>'}}
  %m = "mlt.matmul"(%a, %b) : (tensor<3x5xf32>, tensor<5x7xf32>) -> tensor<3x5xf32>
  return
}

// -----

// Tests that in the generic form a shape error is reported by the inferred
// type check, followed by its summary.
func.func @matmul_generic_shape(%a: tensor<3x5xf32>, %b: tensor<4x7xf32>) {
  // expected-error @+2 {{'mlt.matmul' op contracting dimensions differ: lhs [3, 5] has 5 but rhs [4, 7] has 4}}
  // expected-error @+1 {{'mlt.matmul' op failed to infer returned types}}
  %m = "mlt.matmul"(%a, %b) : (tensor<3x5xf32>, tensor<4x7xf32>) -> tensor<3x7xf32>
  return
}

//===----------------------------------------------------------------------===//
// mlt.rms_norm
//===----------------------------------------------------------------------===//

// -----

// Tests that the RMSNorm weight must be a vector.
func.func @rms_norm_weight_rank(%h: tensor<?x?x64xf32>, %w: tensor<1x64xf32>) {
  // expected-error @+1 {{'mlt.rms_norm' op weight must have rank 1, got 2 (shape [1, 64])}}
  %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x64xf32>, tensor<1x64xf32>
  return
}

// -----

// Tests that the RMSNorm input and weight must share their element type.
func.func @rms_norm_element_types(%h: tensor<?x?x64xbf16>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'mlt.rms_norm' op input and weight must have the same element type, got 'bf16' and 'f32'}}
  %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x64xbf16>, tensor<64xf32>
  return
}

// -----

// Tests that RMSNorm needs a dimension to normalize.
func.func @rms_norm_scalar(%h: tensor<f32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'mlt.rms_norm' op input must have rank 1 or more}}
  %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<f32>, tensor<64xf32>
  return
}

// -----

// Tests that the RMSNorm weight must match the normalized dimension.
func.func @rms_norm_weight_size(%h: tensor<?x?x64xf32>, %w: tensor<32xf32>) {
  // expected-error @+1 {{'mlt.rms_norm' op weight has 32 elements but the normalized (last) dimension of input has 64}}
  %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x64xf32>, tensor<32xf32>
  return
}

// -----

// Tests that RMSNorm works on floats only.
func.func @rms_norm_int(%h: tensor<?x?x64xi32>, %w: tensor<64xi32>) {
  // expected-error @+1 {{'mlt.rms_norm' op operand #0 must be ranked tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values, but got 'tensor<?x?x64xi32>'}}
  %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x64xi32>, tensor<64xi32>
  return
}

// -----

// Tests that the RMSNorm epsilon must be positive.
func.func @rms_norm_eps(%h: tensor<?x?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'mlt.rms_norm' op attribute 'epsilon' failed to satisfy constraint: 64-bit float attribute whose value is positive}}
  %n = mlt.rms_norm %h, %w eps = 0.0 : tensor<?x?x64xf32>, tensor<64xf32>
  return
}

// -----

// Tests that in the generic form the declared result type must be the inferred
// one (here, a different element type).
func.func @rms_norm_result_type(%h: tensor<?x?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+2 {{'mlt.rms_norm' op failed to infer returned types}}
  // expected-error @+1 {{'mlt.rms_norm' op inferred type(s) 'tensor<?x?x64xf32>' are incompatible with return type(s) of operation 'tensor<?x?x64xbf16>'}}
  %n = "mlt.rms_norm"(%h, %w) <{epsilon = 1.0e-05 : f64}> : (tensor<?x?x64xf32>, tensor<64xf32>) -> tensor<?x?x64xbf16>
  return
}

//===----------------------------------------------------------------------===//
// mlt.rope
//===----------------------------------------------------------------------===//

// -----

// Tests that rope needs per-head input [batch, seq, heads, head_dim].
func.func @rope_rank(%x: tensor<?x?x64xf32>) {
  // expected-error @+1 {{'mlt.rope' op input [batch, seq, heads, head_dim] must have rank 4, got 3 (shape [?, ?, 64])}}
  %r = mlt.rope %x theta = 1.0e+04 : tensor<?x?x64xf32>
  return
}

// -----

// Tests that rope needs an even head size to rotate pairs.
func.func @rope_odd_head_dim(%x: tensor<?x?x4x15xf32>) {
  // expected-error @+1 {{'mlt.rope' op head_dim must be even to rotate pairs, got 15}}
  %r = mlt.rope %x theta = 1.0e+04 : tensor<?x?x4x15xf32>
  return
}

// -----

// Tests that the rope base must be positive.
func.func @rope_theta(%x: tensor<?x?x4x16xf32>) {
  // expected-error @+1 {{'mlt.rope' op attribute 'theta' failed to satisfy constraint: 64-bit float attribute whose value is positive}}
  %r = mlt.rope %x theta = -1.0e+04 : tensor<?x?x4x16xf32>
  return
}

// -----

// Tests that rope's rotary scaling is checked where the op uses it.
func.func @rope_bad_scaling(%x: tensor<?x?x4x16xf32>) -> tensor<?x?x4x16xf32> {
  // expected-error @+1 {{llama3 rope scaling: factor must be at least 1, got 0}}
  %r = mlt.rope %x theta = 1.0e+04 scaling = <factor = 0.0, low_freq_factor = 1.0,
      high_freq_factor = 4.0, original_max_position_embeddings = 8192> : tensor<?x?x4x16xf32>
  return %r : tensor<?x?x4x16xf32>
}

// -----

// Tests that the custom form of rope needs a tensor type.
func.func @rope_scalar(%x: f32) {
  // expected-error @+1 {{custom op 'mlt.rope' invalid kind of type specified: expected builtin.tensor, but found 'f32'}}
  %r = mlt.rope %x theta = 1.0e+04 : f32
  return
}

//===----------------------------------------------------------------------===//
// mlt.attention
//===----------------------------------------------------------------------===//

// -----

// Tests that the query must be per-head.
func.func @attention_query_rank(%q: tensor<?x?x64xf32>, %k: tensor<?x?x2x16xf32>) {
  // expected-error @+1 {{'mlt.attention' op query [batch, seq, heads, head_dim] must have rank 4, got 3 (shape [?, ?, 64])}}
  %o = mlt.attention %q, %k, %k scale = 0.25 : tensor<?x?x64xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>
  return
}

// -----

// Tests that the key must be per-head.
func.func @attention_key_rank(%q: tensor<?x?x4x16xf32>, %k: tensor<?x?x32xf32>, %v: tensor<?x?x2x16xf32>) {
  // expected-error @+1 {{'mlt.attention' op key [batch, seq, heads, head_dim] must have rank 4, got 3 (shape [?, ?, 32])}}
  %o = mlt.attention %q, %k, %v scale = 0.25 : tensor<?x?x4x16xf32>, tensor<?x?x32xf32>, tensor<?x?x2x16xf32>
  return
}

// -----

// Tests that the value must be per-head.
func.func @attention_value_rank(%q: tensor<?x?x4x16xf32>, %k: tensor<?x?x2x16xf32>, %v: tensor<?x?x32xf32>) {
  // expected-error @+1 {{'mlt.attention' op value [batch, seq, heads, head_dim] must have rank 4, got 3 (shape [?, ?, 32])}}
  %o = mlt.attention %q, %k, %v scale = 0.25 : tensor<?x?x4x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x32xf32>
  return
}

// -----

// Tests that query and key must share their element type.
func.func @attention_qk_types(%q: tensor<?x?x4x16xbf16>, %k: tensor<?x?x2x16xf32>) {
  // expected-error @+1 {{'mlt.attention' op query and key must have the same element type, got 'bf16' and 'f32'}}
  %o = mlt.attention %q, %k, %k scale = 0.25 : tensor<?x?x4x16xbf16>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>
  return
}

// -----

// Tests that key and value must have the same shape.
func.func @attention_kv_shape(%q: tensor<?x?x4x16xf32>, %k: tensor<?x?x2x16xf32>, %v: tensor<?x?x4x16xf32>) {
  // expected-error @+1 {{'mlt.attention' op key and value must have the same shape, got [?, ?, 2, 16] and [?, ?, 4, 16]}}
  %o = mlt.attention %q, %k, %v scale = 0.25 : tensor<?x?x4x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x4x16xf32>
  return
}

// -----

// Tests that key and value must share their element type.
func.func @attention_kv_types(%q: tensor<?x?x4x16xf32>, %k: tensor<?x?x2x16xf32>, %v: tensor<?x?x2x16xbf16>) {
  // expected-error @+1 {{'mlt.attention' op key and value must have the same element type, got 'f32' and 'bf16'}}
  %o = mlt.attention %q, %k, %v scale = 0.25 : tensor<?x?x4x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xbf16>
  return
}

// -----

// Tests that query and key/value must agree on the batch size.
func.func @attention_batch(%q: tensor<2x?x4x16xf32>, %k: tensor<3x?x2x16xf32>) {
  // expected-error @+1 {{'mlt.attention' op query and key/value differ in batch: 2 vs 3}}
  %o = mlt.attention %q, %k, %k scale = 0.25 : tensor<2x?x4x16xf32>, tensor<3x?x2x16xf32>, tensor<3x?x2x16xf32>
  return
}

// -----

// Tests that query and key/value must agree on the sequence length.
func.func @attention_seq(%q: tensor<?x8x4x16xf32>, %k: tensor<?x4x2x16xf32>) {
  // expected-error @+1 {{'mlt.attention' op query and key/value differ in seq: 8 vs 4}}
  %o = mlt.attention %q, %k, %k causal scale = 0.25 : tensor<?x8x4x16xf32>, tensor<?x4x2x16xf32>, tensor<?x4x2x16xf32>
  return
}

// -----

// Tests that query and key/value must agree on the head size.
func.func @attention_head_dim(%q: tensor<?x?x4x16xf32>, %k: tensor<?x?x2x8xf32>) {
  // expected-error @+1 {{'mlt.attention' op query and key/value differ in head_dim: 16 vs 8}}
  %o = mlt.attention %q, %k, %k scale = 0.25 : tensor<?x?x4x16xf32>, tensor<?x?x2x8xf32>, tensor<?x?x2x8xf32>
  return
}

// -----

// Tests that key/value with zero heads is an error rather than a division by
// zero in the grouped-query rule.
func.func @attention_zero_kv_heads(%q: tensor<?x?x4x16xf32>, %k: tensor<?x?x0x16xf32>) {
  // expected-error @+1 {{'mlt.attention' op key/value must have at least one head}}
  %o = mlt.attention %q, %k, %k scale = 0.25 : tensor<?x?x4x16xf32>, tensor<?x?x0x16xf32>, tensor<?x?x0x16xf32>
  return
}

// -----

// Tests that query heads must come in whole groups per key/value head.
func.func @attention_gqa(%q: tensor<?x?x6x16xf32>, %k: tensor<?x?x4x16xf32>) {
  // expected-error @+1 {{'mlt.attention' op query heads (6) must be a multiple of key/value heads (4) for grouped-query attention}}
  %o = mlt.attention %q, %k, %k scale = 0.25 : tensor<?x?x6x16xf32>, tensor<?x?x4x16xf32>, tensor<?x?x4x16xf32>
  return
}

// -----

// Tests that the attention scale must be positive.
func.func @attention_scale(%q: tensor<?x?x4x16xf32>, %k: tensor<?x?x2x16xf32>) {
  // expected-error @+1 {{'mlt.attention' op attribute 'scale' failed to satisfy constraint: 64-bit float attribute whose value is positive}}
  %o = mlt.attention %q, %k, %k scale = 0.0 : tensor<?x?x4x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>
  return
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

// -----

// Tests that swiglu's operands and result must have one type.
func.func @swiglu_types(%g: tensor<?x176xf32>, %u: tensor<?x88xf32>) {
  // expected-error @+1 {{'mlt.swiglu' op failed to verify that all of {gate, up, result} have same type}}
  %a = "mlt.swiglu"(%g, %u) : (tensor<?x176xf32>, tensor<?x88xf32>) -> tensor<?x176xf32>
  return
}

// -----

// Tests that silu keeps its input's type.
func.func @silu_types(%x: tensor<?x176xf32>) {
  // expected-error @+1 {{'mlt.silu' op failed to verify that all of {input, result} have same type}}
  %a = "mlt.silu"(%x) : (tensor<?x176xf32>) -> tensor<?x176xbf16>
  return
}

// -----

// Tests that add does not broadcast.
func.func @add_types(%a: tensor<4x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'mlt.add' op failed to verify that all of {lhs, rhs, result} have same type}}
  %s = "mlt.add"(%a, %b) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests that mul does not mix element types.
func.func @mul_types(%a: tensor<8xf32>, %b: tensor<8xf16>) {
  // expected-error @+1 {{'mlt.mul' op failed to verify that all of {lhs, rhs, result} have same type}}
  %p = "mlt.mul"(%a, %b) : (tensor<8xf32>, tensor<8xf16>) -> tensor<8xf32>
  return
}

// -----

// Tests that the elementwise ops work on floats only.
func.func @add_int(%a: tensor<8xi32>) {
  // expected-error @+1 {{'mlt.add' op operand #0 must be ranked tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values, but got 'tensor<8xi32>'}}
  %s = mlt.add %a, %a : tensor<8xi32>
  return
}

//===----------------------------------------------------------------------===//
// mlt.reshape / mlt.transpose / mlt.cast
//===----------------------------------------------------------------------===//

// -----

// Tests that reshape leaves the element type to mlt.cast.
func.func @reshape_element_type(%x: tensor<?x?x64xf32>) {
  // expected-error @+1 {{'mlt.reshape' op cannot change the element type ('f32' to 'bf16'); use mlt.cast}}
  %r = mlt.reshape %x : tensor<?x?x64xf32> -> tensor<?x?x4x16xbf16>
  return
}

// -----

// Tests that reshape may not merge a dynamic dimension away.
func.func @reshape_dynamic(%x: tensor<?x?x64xf32>) {
  // expected-error @+1 {{'mlt.reshape' op must keep the number of dynamic dimensions, got 2 in [?, ?, 64] and 1 in [?, 64]}}
  %r = mlt.reshape %x : tensor<?x?x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// Tests that reshape keeps the number of elements.
func.func @reshape_elements(%x: tensor<?x?x64xf32>) {
  // expected-error @+1 {{'mlt.reshape' op changes the number of elements: [?, ?, 64] holds 64 x dynamic but [?, ?, 4, 8] holds 32 x dynamic}}
  %r = mlt.reshape %x : tensor<?x?x64xf32> -> tensor<?x?x4x8xf32>
  return
}

// -----

// Tests that the generic form of transpose needs a permutation.
func.func @transpose_no_permutation(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'mlt.transpose' op requires attribute 'permutation'}}
  %t = "mlt.transpose"(%x) : (tensor<8x4xf32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests that a permutation needs one entry per dimension.
func.func @transpose_length(%x: tensor<?x8x4x16xf32>) {
  // expected-error @+1 {{'mlt.transpose' op permutation has 3 entries but the input has rank 4}}
  %t = mlt.transpose %x [0, 2, 1] : tensor<?x8x4x16xf32>
  return
}

// -----

// Tests that a permutation may not repeat a dimension.
func.func @transpose_repeated(%x: tensor<?x8x4x16xf32>) {
  // expected-error @+1 {{'mlt.transpose' op permutation must hold each of 0..3 exactly once, got [0, 2, 2, 3]}}
  %t = mlt.transpose %x [0, 2, 2, 3] : tensor<?x8x4x16xf32>
  return
}

// -----

// Tests that a permutation may not name a dimension past the rank.
func.func @transpose_out_of_range(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'mlt.transpose' op permutation must hold each of 0..1 exactly once, got [2, 0]}}
  %t = mlt.transpose %x [2, 0] : tensor<8x4xf32>
  return
}

// -----

// Tests that cast leaves the shape to mlt.reshape.
func.func @cast_shape(%w: tensor<64x64xf32>) {
  // expected-error @+1 {{'mlt.cast' op cannot change the shape ([64, 64] to [4096]); use mlt.reshape}}
  %c = mlt.cast %w : tensor<64x64xf32> -> tensor<4096xbf16>
  return
}

// -----

// Tests that cast converts between float types only.
func.func @cast_int(%w: tensor<64x64xf32>) {
  // expected-error @+1 {{'mlt.cast' op result #0 must be ranked tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values, but got 'tensor<64x64xi32>'}}
  %c = mlt.cast %w : tensor<64x64xf32> -> tensor<64x64xi32>
  return
}

//===----------------------------------------------------------------------===//
// mlt.cross_entropy
//===----------------------------------------------------------------------===//

// -----

// Tests that labels must have the rank of logits minus the vocabulary.
func.func @cross_entropy_rank(%logits: tensor<?x?x256xf32>, %labels: tensor<?x?x1xi64>) {
  // expected-error @+1 {{'mlt.cross_entropy' op labels must have the shape of logits without the vocabulary (last) dimension, got logits [?, ?, 256] and labels [?, ?, 1]}}
  %l = mlt.cross_entropy %logits, %labels : tensor<?x?x256xf32>, tensor<?x?x1xi64>
  return
}

// -----

// Tests that scalar logits have no vocabulary dimension.
func.func @cross_entropy_scalar(%logits: tensor<f32>, %labels: tensor<i64>) {
  // expected-error @+1 {{'mlt.cross_entropy' op labels must have the shape of logits without the vocabulary (last) dimension, got logits [] and labels []}}
  %l = mlt.cross_entropy %logits, %labels : tensor<f32>, tensor<i64>
  return
}

// -----

// Tests that labels and logits must agree on the positions.
func.func @cross_entropy_dims(%logits: tensor<?x8x256xf32>, %labels: tensor<2x4xi64>) {
  // expected-error @+1 {{'mlt.cross_entropy' op labels and logits differ in dimension 1: labels [2, 4], logits [?, 8, 256]}}
  %l = mlt.cross_entropy %logits, %labels : tensor<?x8x256xf32>, tensor<2x4xi64>
  return
}

// -----

// Tests that labels must be integers.
func.func @cross_entropy_float_labels(%logits: tensor<?x?x256xf32>, %labels: tensor<?x?xf32>) {
  // expected-error @+1 {{'mlt.cross_entropy' op operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<?x?xf32>'}}
  %l = mlt.cross_entropy %logits, %labels : tensor<?x?x256xf32>, tensor<?x?xf32>
  return
}

// -----

// Tests that in the generic form the loss type must be the inferred one
// (float32 for float32 logits).
func.func @cross_entropy_result_type(%logits: tensor<?x?x256xf32>, %labels: tensor<?x?xi64>) {
  // expected-error @+2 {{'mlt.cross_entropy' op failed to infer returned types}}
  // expected-error @+1 {{'mlt.cross_entropy' op inferred type(s) 'tensor<f32>' are incompatible with return type(s) of operation 'tensor<f64>'}}
  %l = "mlt.cross_entropy"(%logits, %labels) : (tensor<?x?x256xf32>, tensor<?x?xi64>) -> tensor<f64>
  return
}

// -----

// Tests that the pipeline attributes are where they belong.
// expected-error @+1 {{'mlt.tied' must be a stage number on an mlt.param}}
module attributes {mlt.tied = 0 : i64} {}

// -----

// expected-error @+1 {{'mlt.tied_zeros' must be a list of [name, tensor type, sharding or unit] on a module}}
module attributes {mlt.tied_zeros = ["model.embed_tokens.weight"]} {}

// -----

// expected-error @+1 {{'mlt.stage_costs' must be an array<f64> on a module}}
module attributes {mlt.stage_costs = [1.0, 2.0]} {}

// -----

// A valid tied-zeros list parses.
module attributes {mlt.tied_zeros = [["model.embed_tokens.weight", tensor<256x128xf32>, unit]]} {}
