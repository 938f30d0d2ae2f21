// RUN: mlt-opt %s -split-input-file -mlt-lower-to-runtime -verify-diagnostics

// Tests that a module without @micro_step is an error pointing at the passes
// that create it.
// expected-error @+1 {{mlt-lower-to-runtime: no function @micro_step (run mlt-autodiff and mlt-attach-optimizer first)}}
module {
  mlt.param @"model.norm.weight" : tensor<8xf32>
  func.func @forward(%tokens: tensor<2x4xi32>) {
    return
  }
}

// -----

// Tests that a module with @micro_step but without @optimizer_step is an
// error too.
// expected-error @+1 {{mlt-lower-to-runtime: no function @optimizer_step (run mlt-autodiff and mlt-attach-optimizer first)}}
module {
  func.func @micro_step(%tokens: tensor<2x4xi32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
    %x = arith.constant dense<1.0> : tensor<2x4x8xf32>
    %loss = mlt.cross_entropy %x, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that a program takes only the tokens and the labels.
// expected-error @+1 {{mlt-lower-to-runtime: @micro_step takes more than tokens and labels}}
func.func @micro_step(%tokens: tensor<2x4xi32>, %labels: tensor<2x4xi32>, %mask: tensor<2x4xi32>) -> tensor<f32> {
  %x = arith.constant dense<1.0> : tensor<2x4x8xf32>
  %loss = mlt.cross_entropy %x, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}
func.func @optimizer_step() -> tensor<f32> {
  %n = mlt.global_norm : tensor<f32>
  return %n : tensor<f32>
}

// -----

// Tests that a program returns exactly one value, its output.
// expected-error @+1 {{mlt-lower-to-runtime: @micro_step must return one value}}
func.func @micro_step(%tokens: tensor<2x4xi32>, %labels: tensor<2x4xi32>) -> (tensor<f32>, tensor<f32>) {
  %x = arith.constant dense<1.0> : tensor<2x4x8xf32>
  %loss = mlt.cross_entropy %x, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
  return %loss, %loss : tensor<f32>, tensor<f32>
}
func.func @optimizer_step() -> tensor<f32> {
  %n = mlt.global_norm : tensor<f32>
  return %n : tensor<f32>
}

// -----

// Tests that an op without a kernel is an error naming it.
func.func @micro_step(%tokens: tensor<2x4xi32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
  %x = arith.constant dense<1.0> : tensor<2x4x8xf32>
  // expected-error @+1 {{'arith.negf' op cannot be lowered to the runtime: no kernel computes it}}
  %n = arith.negf %x : tensor<2x4x8xf32>
  %loss = mlt.cross_entropy %n, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}
func.func @optimizer_step() -> tensor<f32> {
  %n = mlt.global_norm : tensor<f32>
  return %n : tensor<f32>
}

// -----

// Tests that a layers' repeat left in a program is an error (the lowering
// needs it unrolled).
mlt.param @"model.layers.{}.w" layers 2 : tensor<8xf32>
func.func @micro_step(%tokens: tensor<2x4xi32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
  %x = arith.constant dense<1.0> : tensor<2x4x8xf32>
  // expected-error @+1 {{'mlt.repeat' op cannot be lowered to the runtime: no kernel computes it}}
  %r = mlt.repeat %layer = 0 to 2 iter_args(%h = %x) -> (tensor<2x4x8xf32>) {
    %w = mlt.load @"model.layers.{}.w"[%layer] : tensor<8xf32>
    %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<2x4x8xf32>, tensor<8xf32>
    mlt.yield %n : tensor<2x4x8xf32>
  }
  %loss = mlt.cross_entropy %r, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}
func.func @optimizer_step() -> tensor<f32> {
  %n = mlt.global_norm : tensor<f32>
  return %n : tensor<f32>
}

// -----

// Tests that only splat constants reach the runtime, which fills a constant
// buffer with one value.
func.func @micro_step(%tokens: tensor<2x4xi32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
  // expected-error @+1 {{'arith.constant' op only float splat constants reach the runtime}}
  %x = arith.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  %y = mlt.reshape %x : tensor<2x2xf32> -> tensor<1x2x2xf32>
  %loss = mlt.sum_squares %y : tensor<1x2x2xf32>
  return %loss : tensor<f32>
}
func.func @optimizer_step() -> tensor<f32> {
  %n = mlt.global_norm : tensor<f32>
  return %n : tensor<f32>
}

// -----

// Tests that an attention_grad needs the statistics of an mlt.attention of
// the same program: its `output` operand must be that attention's result.
mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
func.func @micro_step(%tokens: tensor<2x4xi32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
  %table = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
  %h = mlt.embedding %tokens, %table : tensor<2x4xi32>, tensor<16x8xf32>
  %x = mlt.reshape %h : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  // expected-error @+1 {{'mlt.attention_grad' op takes an output that no mlt.attention of this program computed}}
  %dq, %dk, %dv = mlt.attention_grad %x, %x, %x, %x, %x causal scale = 0.5
      : tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>
  %loss = mlt.cross_entropy %h, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}
func.func @optimizer_step() -> tensor<f32> {
  %n = mlt.global_norm : tensor<f32>
  return %n : tensor<f32>
}

// -----

// Tests that a parameter read whose layer index is not a constant is an
// error pointing at mlt-unroll-layers.
mlt.param @"model.layers.{}.w" layers 2 : tensor<8xf32>
func.func @micro_step(%tokens: tensor<2x4xi32>) -> tensor<f32> {
  %c0 = arith.constant 0 : index
  %layer = arith.addi %c0, %c0 : index
  // expected-error @+1 {{'mlt.load' op has a layer index that is not a constant; run mlt-unroll-layers (mlt-autodiff does) first}}
  %w = mlt.load @"model.layers.{}.w"[%layer] : tensor<8xf32>
  %loss = mlt.sum_squares %w : tensor<8xf32>
  return %loss : tensor<f32>
}
func.func @optimizer_step() -> tensor<f32> {
  %n = mlt.global_norm : tensor<f32>
  return %n : tensor<f32>
}

// -----

// Tests that a program argument other than [batch, seq] i32 token ids is an
// error naming the argument.
// expected-error @+1 {{mlt-lower-to-runtime: argument #1 of @micro_step must be [batch, seq] i32 token ids, got 'index'}}
func.func @micro_step(%tokens: tensor<2x4xi32>, %layer: index) -> tensor<f32> {
  %c = arith.constant dense<1.0> : tensor<f32>
  return %c : tensor<f32>
}
func.func @optimizer_step() -> tensor<f32> {
  %n = mlt.global_norm : tensor<f32>
  return %n : tensor<f32>
}
