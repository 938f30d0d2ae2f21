// RUN: mlt-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// mlt.embedding_grad
//===----------------------------------------------------------------------===//

// Tests that mlt.embedding_grad needs a [vocab, hidden] result.
func.func @embedding_grad_rank(%ids: tensor<4x32xi32>, %d: tensor<4x32x64xf32>) {
  // expected-error @+1 {{'mlt.embedding_grad' op result must be a [vocab, hidden] table, got 'tensor<256x64x1xf32>'}}
  %t = mlt.embedding_grad %ids, %d : tensor<4x32xi32>, tensor<4x32x64xf32> -> tensor<256x64x1xf32>
  return
}

// -----

// Tests that mlt.embedding_grad needs a grad of one more dimension than the
// ids.
func.func @embedding_grad_grad_rank(%ids: tensor<4x32xi32>, %d: tensor<128x64xf32>) {
  // expected-error @+1 {{'mlt.embedding_grad' op grad must have the shape of ids plus a hidden dimension, got ids [4, 32] and grad [128, 64]}}
  %t = mlt.embedding_grad %ids, %d : tensor<4x32xi32>, tensor<128x64xf32> -> tensor<256x64xf32>
  return
}

// -----

// Tests that mlt.embedding_grad needs the grad's leading dimensions to be the
// ids' shape.
func.func @embedding_grad_grad_shape(%ids: tensor<4x32xi32>, %d: tensor<4x16x64xf32>) {
  // expected-error @+1 {{'mlt.embedding_grad' op grad must have the shape of ids plus a hidden dimension, got ids [4, 32] and grad [4, 16, 64]}}
  %t = mlt.embedding_grad %ids, %d : tensor<4x32xi32>, tensor<4x16x64xf32> -> tensor<256x64xf32>
  return
}

// -----

// Tests that mlt.embedding_grad needs the grad's hidden size to be the
// table's.
func.func @embedding_grad_hidden(%ids: tensor<4x32xi32>, %d: tensor<4x32x32xf32>) {
  // expected-error @+1 {{'mlt.embedding_grad' op grad 'tensor<4x32x32xf32>' does not match the table's hidden size and type 'tensor<256x64xf32>'}}
  %t = mlt.embedding_grad %ids, %d : tensor<4x32xi32>, tensor<4x32x32xf32> -> tensor<256x64xf32>
  return
}

// -----

// Tests that mlt.embedding_grad needs the grad's element type to be the
// table's.
func.func @embedding_grad_type(%ids: tensor<4x32xi32>, %d: tensor<4x32x64xbf16>) {
  // expected-error @+1 {{'mlt.embedding_grad' op grad 'tensor<4x32x64xbf16>' does not match the table's hidden size and type 'tensor<256x64xf32>'}}
  %t = mlt.embedding_grad %ids, %d : tensor<4x32xi32>, tensor<4x32x64xbf16> -> tensor<256x64xf32>
  return
}

// -----

// Tests that mlt.embedding_grad takes integer ids.
func.func @embedding_grad_float_ids(%ids: tensor<4x32xf32>, %d: tensor<4x32x64xf32>) {
  // expected-error @+1 {{'mlt.embedding_grad' op operand #0 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<4x32xf32>'}}
  %t = mlt.embedding_grad %ids, %d : tensor<4x32xf32>, tensor<4x32x64xf32> -> tensor<256x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// mlt.rms_norm_grad
//===----------------------------------------------------------------------===//

// -----

// Tests that mlt.rms_norm_grad needs a grad of the forward result's type.
func.func @rms_norm_grad_grad(%dy: tensor<4x32x32xf32>, %x: tensor<4x32x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'mlt.rms_norm_grad' op grad type 'tensor<4x32x32xf32>' differs from the forward result type 'tensor<4x32x64xf32>'}}
  %dx, %dw = mlt.rms_norm_grad %dy, %x, %w eps = 1.0e-05 : tensor<4x32x32xf32>, tensor<4x32x64xf32>, tensor<64xf32>
  return
}

// -----

// Tests that mlt.rms_norm_grad needs a grad of the forward result's element
// type.
func.func @rms_norm_grad_grad_type(%dy: tensor<4x32x64xbf16>, %x: tensor<4x32x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{grad type 'tensor<4x32x64xbf16>' differs from the forward result type 'tensor<4x32x64xf32>'}}
  %dx, %dw = mlt.rms_norm_grad %dy, %x, %w eps = 1.0e-05 : tensor<4x32x64xbf16>, tensor<4x32x64xf32>, tensor<64xf32>
  return
}

// -----

// Tests that mlt.rms_norm_grad applies the forward op's shape rules to its
// input and weight.
func.func @rms_norm_grad_forward_shape(%dy: tensor<4x32x64xf32>, %x: tensor<4x32x64xf32>, %w: tensor<32xf32>) {
  // expected-error @+1 {{weight has 32 elements but the normalized (last) dimension of input has 64}}
  %dx, %dw = mlt.rms_norm_grad %dy, %x, %w eps = 1.0e-05 : tensor<4x32x64xf32>, tensor<4x32x64xf32>, tensor<32xf32>
  return
}

// -----

// Tests that mlt.rms_norm_grad needs a positive epsilon, as the forward op.
func.func @rms_norm_grad_eps(%dy: tensor<4x64xf32>, %x: tensor<4x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'mlt.rms_norm_grad' op attribute 'epsilon' failed to satisfy constraint: 64-bit float attribute whose value is positive}}
  %dx, %dw = mlt.rms_norm_grad %dy, %x, %w eps = 0.0 : tensor<4x64xf32>, tensor<4x64xf32>, tensor<64xf32>
  return
}

// -----

// Tests that in the generic form the declared results of mlt.rms_norm_grad
// must be the input's and the weight's types.
func.func @rms_norm_grad_result_type(%dy: tensor<4x64xf32>, %x: tensor<4x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+2 {{'mlt.rms_norm_grad' op failed to infer returned types}}
  // expected-error @+1 {{'mlt.rms_norm_grad' op inferred type(s) 'tensor<4x64xf32>', 'tensor<64xf32>' are incompatible with return type(s) of operation 'tensor<4x64xf32>', 'tensor<4x64xf32>'}}
  %dx:2 = "mlt.rms_norm_grad"(%dy, %x, %w) <{epsilon = 1.0e-05 : f64}>
      : (tensor<4x64xf32>, tensor<4x64xf32>, tensor<64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>)
  return
}

//===----------------------------------------------------------------------===//
// mlt.attention_grad
//===----------------------------------------------------------------------===//

// -----

// Tests that mlt.attention_grad needs a grad of the forward result's type.
func.func @attention_grad_grad(%dout: tensor<4x32x2x16xf32>, %q: tensor<4x32x4x16xf32>, %k: tensor<4x32x2x16xf32>,
                               %v: tensor<4x32x2x16xf32>, %out: tensor<4x32x4x16xf32>) {
  // expected-error @+1 {{'mlt.attention_grad' op grad type 'tensor<4x32x2x16xf32>' differs from the forward result type 'tensor<4x32x4x16xf32>'}}
  %dq, %dk, %dv = mlt.attention_grad %dout, %q, %k, %v, %out causal scale = 0.25
      : tensor<4x32x2x16xf32>, tensor<4x32x4x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x4x16xf32>
  return
}

// -----

// Tests that mlt.attention_grad needs the forward output in the forward
// result's type.
func.func @attention_grad_output(%dout: tensor<4x32x4x16xf32>, %q: tensor<4x32x4x16xf32>, %k: tensor<4x32x2x16xf32>,
                                 %v: tensor<4x32x2x16xf32>, %out: tensor<4x32x4x16xbf16>) {
  // expected-error @+1 {{'mlt.attention_grad' op output type 'tensor<4x32x4x16xbf16>' differs from the forward result type 'tensor<4x32x4x16xf32>'}}
  %dq, %dk, %dv = mlt.attention_grad %dout, %q, %k, %v, %out causal scale = 0.25
      : tensor<4x32x4x16xf32>, tensor<4x32x4x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x4x16xbf16>
  return
}

// -----

// Tests that mlt.attention_grad applies the forward op's grouped-query rule.
func.func @attention_grad_heads(%dout: tensor<4x32x3x16xf32>, %q: tensor<4x32x3x16xf32>, %k: tensor<4x32x2x16xf32>,
                                %v: tensor<4x32x2x16xf32>, %out: tensor<4x32x3x16xf32>) {
  // expected-error @+1 {{query heads (3) must be a multiple of key/value heads (2) for grouped-query attention}}
  %dq, %dk, %dv = mlt.attention_grad %dout, %q, %k, %v, %out causal scale = 0.25
      : tensor<4x32x3x16xf32>, tensor<4x32x3x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x3x16xf32>
  return
}

//===----------------------------------------------------------------------===//
// mlt.swiglu_grad, mlt.silu_grad
//===----------------------------------------------------------------------===//

// -----

// Tests that mlt.swiglu_grad needs one type for grad, gate and up.
func.func @swiglu_grad_types(%dy: tensor<4x176xf32>, %gate: tensor<4x176xf32>, %up: tensor<4x176xbf16>) {
  // expected-error @+1 {{'mlt.swiglu_grad' op failed to verify that all of {grad, gate, up, gate_grad, up_grad} have same type}}
  %dg:2 = "mlt.swiglu_grad"(%dy, %gate, %up) : (tensor<4x176xf32>, tensor<4x176xf32>, tensor<4x176xbf16>) -> (tensor<4x176xf32>, tensor<4x176xf32>)
  return
}

// -----

// Tests that mlt.silu_grad needs one type for grad, input and result.
func.func @silu_grad_types(%dy: tensor<4x176xf32>, %x: tensor<4x88xf32>) {
  // expected-error @+1 {{'mlt.silu_grad' op failed to verify that all of {grad, input, result} have same type}}
  %dx = "mlt.silu_grad"(%dy, %x) : (tensor<4x176xf32>, tensor<4x88xf32>) -> tensor<4x176xf32>
  return
}

//===----------------------------------------------------------------------===//
// mlt.cross_entropy_grad
//===----------------------------------------------------------------------===//

// -----

// Tests that mlt.cross_entropy_grad needs a grad of the loss's type: float32
// for float32 logits.
func.func @cross_entropy_grad_grad(%g: tensor<f64>, %l: tensor<4x32x256xf32>, %y: tensor<4x32xi32>) {
  // expected-error @+1 {{'mlt.cross_entropy_grad' op grad type 'tensor<f64>' differs from the loss type 'tensor<f32>'}}
  %d = mlt.cross_entropy_grad %g, %l, %y : tensor<f64>, tensor<4x32x256xf32>, tensor<4x32xi32>
  return
}

// -----

// Tests that mlt.cross_entropy_grad needs a scalar grad: in the custom form
// its type rule reports it.
func.func @cross_entropy_grad_scalar(%g: tensor<1xf32>, %l: tensor<4x32x256xf32>, %y: tensor<4x32xi32>) {
  // expected-error @+1 {{'mlt.cross_entropy_grad' op grad type 'tensor<1xf32>' differs from the loss type 'tensor<f32>'}}
  %d = mlt.cross_entropy_grad %g, %l, %y : tensor<1xf32>, tensor<4x32x256xf32>, tensor<4x32xi32>
  return
}

// -----

// Tests that in the generic form the operand constraint rejects a grad that
// is not a scalar.
func.func @cross_entropy_grad_scalar_generic(%g: tensor<1xf32>, %l: tensor<4x32x256xf32>, %y: tensor<4x32xi32>) {
  // expected-error @+1 {{'mlt.cross_entropy_grad' op operand #0 must be 0D tensor of 32-bit float or 64-bit float values, but got 'tensor<1xf32>'}}
  %d = "mlt.cross_entropy_grad"(%g, %l, %y) : (tensor<1xf32>, tensor<4x32x256xf32>, tensor<4x32xi32>) -> tensor<4x32x256xf32>
  return
}

// -----

// Tests that mlt.cross_entropy_grad applies the forward op's label shape
// rule.
func.func @cross_entropy_grad_labels(%g: tensor<f32>, %l: tensor<4x32x256xf32>, %y: tensor<4x16xi32>) {
  // expected-error @+1 {{labels and logits differ in dimension 1: labels [4, 16], logits [4, 32, 256]}}
  %d = mlt.cross_entropy_grad %g, %l, %y : tensor<f32>, tensor<4x32x256xf32>, tensor<4x16xi32>
  return
}

//===----------------------------------------------------------------------===//
// mlt.accumulate_grad, mlt.load_grad
//===----------------------------------------------------------------------===//

// -----

// Tests that mlt.accumulate_grad must name a declared parameter.
func.func @accumulate_grad_missing(%d: tensor<64xf32>) {
  // expected-error @+1 {{'mlt.accumulate_grad' op reads parameter @not_a_param, which no 'mlt.param' declares}}
  mlt.accumulate_grad @not_a_param, %d : tensor<64xf32>
  return
}

// -----

// Tests that mlt.accumulate_grad needs a value of the parameter's type (or,
// for an f32 parameter, of its bf16 or f16 compute copy's).
mlt.param @"model.norm.weight" : tensor<64xf32>
func.func @accumulate_grad_type(%d: tensor<64xf64>) {
  // expected-error @+1 {{'mlt.accumulate_grad' op type 'tensor<64xf64>' does not match parameter @model.norm.weight of type 'tensor<64xf32>'}}
  mlt.accumulate_grad @"model.norm.weight", %d : tensor<64xf64>
  return
}

// -----

// Tests that mlt.accumulate_grad into a per-layer parameter needs a layer
// index.
mlt.param @"model.layers.{}.w" layers 2 : tensor<8xf32>
func.func @accumulate_grad_no_layer(%d: tensor<8xf32>) {
  // expected-error @+1 {{'mlt.accumulate_grad' op reads per-layer parameter @"model.layers.{}.w" without a layer index}}
  mlt.accumulate_grad @"model.layers.{}.w", %d : tensor<8xf32>
  return
}

// -----

// Tests that mlt.accumulate_grad into a single parameter takes no layer
// index.
mlt.param @"model.norm.weight" : tensor<64xf32>
func.func @accumulate_grad_extra_layer(%d: tensor<64xf32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'mlt.accumulate_grad' op gives a layer index but parameter @model.norm.weight is not per-layer}}
  mlt.accumulate_grad @"model.norm.weight"[%c0], %d : tensor<64xf32>
  return
}

// -----

// Tests that mlt.accumulate_grad with a constant layer index must name an
// existing layer.
mlt.param @"model.layers.{}.w" layers 2 : tensor<8xf32>
func.func @accumulate_grad_layer_range(%d: tensor<8xf32>) {
  %c2 = arith.constant 2 : index
  // expected-error @+1 {{'mlt.accumulate_grad' op reads layer 2 of parameter @"model.layers.{}.w", which declares 2 layers}}
  mlt.accumulate_grad @"model.layers.{}.w"[%c2], %d : tensor<8xf32>
  return
}

// -----

// Tests that mlt.accumulate_grad inside a repeat that runs more layers than
// the parameter declares is rejected.
mlt.param @"model.layers.{}.w" layers 2 : tensor<8xf32>
func.func @accumulate_grad_repeat_range(%d: tensor<8xf32>) {
  mlt.repeat %layer = 0 to 3 {
    // expected-error @+1 {{'mlt.accumulate_grad' op reads layer 2 of parameter @"model.layers.{}.w", which declares only 2 layers}}
    mlt.accumulate_grad @"model.layers.{}.w"[%layer], %d : tensor<8xf32>
  }
  return
}

// -----

// Tests that mlt.accumulate_grad takes a float tensor.
mlt.param @"model.norm.weight" : tensor<64xf32>
func.func @accumulate_grad_int(%d: tensor<64xi32>) {
  // expected-error @+1 {{'mlt.accumulate_grad' op operand #0 must be ranked tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values, but got 'tensor<64xi32>'}}
  mlt.accumulate_grad @"model.norm.weight", %d : tensor<64xi32>
  return
}

// -----

// Tests that mlt.load_grad must name a declared parameter.
func.func @load_grad_missing() {
  // expected-error @+1 {{'mlt.load_grad' op reads parameter @not_a_param, which no 'mlt.param' declares}}
  %g = mlt.load_grad @not_a_param : tensor<64xf32>
  return
}

// -----

// Tests that mlt.load_grad needs the parameter's type.
mlt.param @"model.embed_tokens.weight" : tensor<256x64xf32>
func.func @load_grad_type() {
  // expected-error @+1 {{'mlt.load_grad' op type 'tensor<64x256xf32>' does not match parameter @model.embed_tokens.weight of type 'tensor<256x64xf32>'}}
  %g = mlt.load_grad @"model.embed_tokens.weight" : tensor<64x256xf32>
  return
}

// -----

// Tests that mlt.load_grad of a per-layer parameter needs a layer index.
mlt.param @"model.layers.{}.w" layers 2 : tensor<8xf32>
func.func @load_grad_no_layer() {
  // expected-error @+1 {{'mlt.load_grad' op reads per-layer parameter @"model.layers.{}.w" without a layer index}}
  %g = mlt.load_grad @"model.layers.{}.w" : tensor<8xf32>
  return
}

// -----

// Tests that mlt.load_grad of a single parameter takes no layer index.
mlt.param @"model.norm.weight" : tensor<64xf32>
func.func @load_grad_extra_layer(%i: index) {
  // expected-error @+1 {{'mlt.load_grad' op gives a layer index but parameter @model.norm.weight is not per-layer}}
  %g = mlt.load_grad @"model.norm.weight"[%i] : tensor<64xf32>
  return
}

// -----

// Tests that mlt.load_grad with a negative constant layer index is rejected.
mlt.param @"model.layers.{}.w" layers 2 : tensor<8xf32>
func.func @load_grad_negative_layer() {
  %cm1 = arith.constant -1 : index
  // expected-error @+1 {{'mlt.load_grad' op reads layer -1 of parameter @"model.layers.{}.w", which declares 2 layers}}
  %g = mlt.load_grad @"model.layers.{}.w"[%cm1] : tensor<8xf32>
  return
}

//===----------------------------------------------------------------------===//
// Optimizer ops
//===----------------------------------------------------------------------===//

// -----

// Tests that mlt.hyperparameter rejects a name the runtime does not set, and
// lists the ones it does.
func.func @hyperparameter_unknown() {
  // expected-error @+1 {{'mlt.hyperparameter' op unknown hyper-parameter 'momentum'; expected one of lr, beta1, beta2, eps, weight_decay, max_grad_norm, step}}
  %m = mlt.hyperparameter "momentum" : tensor<f32>
  return
}

// -----

// Tests that mlt.hyperparameter is a float32 scalar.
func.func @hyperparameter_type() {
  // expected-error @+1 {{'mlt.hyperparameter' op result #0 must be 0D tensor of 32-bit float values, but got 'tensor<f64>'}}
  %lr = mlt.hyperparameter "lr" : tensor<f64>
  return
}

// -----

// Tests that mlt.global_norm sums float32 scalars only.
func.func @global_norm_operand(%s: tensor<f32>, %t: tensor<2xf32>) {
  // expected-error @+1 {{'mlt.global_norm' op operand #1 must be variadic of 0D tensor of 32-bit float values, but got 'tensor<2xf32>'}}
  %n = "mlt.global_norm"(%s, %t) : (tensor<f32>, tensor<2xf32>) -> tensor<f32>
  return
}

// -----

// Tests that mlt.adamw must name a declared parameter.
func.func @adamw_missing(%g: tensor<64xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{'mlt.adamw' op reads parameter @not_a_param, which no 'mlt.param' declares}}
  mlt.adamw @not_a_param grad %g scale %s lr %s betas %s, %s eps %s weight_decay %s step %s : tensor<64xf32>
  return
}

// -----

// Tests that mlt.adamw needs a gradient of the parameter's type.
mlt.param @"model.norm.weight" : tensor<64xf32>
func.func @adamw_type(%g: tensor<32xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{'mlt.adamw' op type 'tensor<32xf32>' does not match parameter @model.norm.weight of type 'tensor<64xf32>'}}
  mlt.adamw @"model.norm.weight" grad %g scale %s lr %s betas %s, %s eps %s weight_decay %s step %s : tensor<32xf32>
  return
}

// -----

// Tests that mlt.adamw of a per-layer parameter needs a layer index.
mlt.param @"model.layers.{}.w" layers 2 : tensor<8x8xf32>
func.func @adamw_no_layer(%g: tensor<8x8xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{'mlt.adamw' op reads per-layer parameter @"model.layers.{}.w" without a layer index}}
  mlt.adamw @"model.layers.{}.w" grad %g scale %s lr %s betas %s, %s eps %s weight_decay %s step %s decay : tensor<8x8xf32>
  return
}

// -----

// Tests that mlt.adamw of a single parameter takes no layer index.
mlt.param @"model.norm.weight" : tensor<64xf32>
func.func @adamw_extra_layer(%g: tensor<64xf32>, %s: tensor<f32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'mlt.adamw' op gives a layer index but parameter @model.norm.weight is not per-layer}}
  mlt.adamw @"model.norm.weight"[%c0] grad %g scale %s lr %s betas %s, %s eps %s weight_decay %s step %s : tensor<64xf32>
  return
}

// -----

// Tests that mlt.adamw with a constant layer index must name an existing
// layer.
mlt.param @"model.layers.{}.w" layers 2 : tensor<8x8xf32>
func.func @adamw_layer_range(%g: tensor<8x8xf32>, %s: tensor<f32>) {
  %c5 = arith.constant 5 : index
  // expected-error @+1 {{'mlt.adamw' op reads layer 5 of parameter @"model.layers.{}.w", which declares 2 layers}}
  mlt.adamw @"model.layers.{}.w"[%c5] grad %g scale %s lr %s betas %s, %s eps %s weight_decay %s step %s decay : tensor<8x8xf32>
  return
}

// -----

// Tests that mlt.adamw takes float32 scalar hyper-parameters (generic form:
// the custom one writes only the gradient's type).
mlt.param @"model.norm.weight" : tensor<64xf32>
func.func @adamw_scalar(%g: tensor<64xf32>, %s: tensor<f32>, %lr: tensor<1xf32>) {
  // expected-error @+1 {{'mlt.adamw' op operand #2 must be 0D tensor of 32-bit float values, but got 'tensor<1xf32>'}}
  "mlt.adamw"(%g, %s, %lr, %s, %s, %s, %s, %s) <{name = @"model.norm.weight"}>
      : (tensor<64xf32>, tensor<f32>, tensor<1xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) -> ()
  return
}

//===----------------------------------------------------------------------===//
// mlt.microbatches
//===----------------------------------------------------------------------===//

// -----

// Tests that `mlt.microbatches` rejects zero.
// expected-error @+1 {{'mlt.microbatches' must be a positive integer}}
func.func @micro_step_zero() attributes {mlt.microbatches = 0 : i64} {
  return
}

// -----

// Tests that `mlt.microbatches` rejects a negative count.
// expected-error @+1 {{'mlt.microbatches' must be a positive integer}}
func.func @micro_step_negative() attributes {mlt.microbatches = -4 : i64} {
  return
}

// -----

// Tests that `mlt.microbatches` must be an integer.
// expected-error @+1 {{'mlt.microbatches' must be a positive integer}}
func.func @micro_step_string() attributes {mlt.microbatches = "4"} {
  return
}

//===----------------------------------------------------------------------===//
// mlt.recomputed
//===----------------------------------------------------------------------===//

// -----

// Tests that `mlt.recomputed` (set by mlt-recompute-activations) is a unit
// attribute, not a value.
func.func @recomputed_value(%g: tensor<4xf32>, %u: tensor<4xf32>) {
  // expected-error @+1 {{'mlt.recomputed' must be a unit attribute}}
  %s = mlt.swiglu %g, %u {mlt.recomputed = true} : tensor<4xf32>
  return
}
