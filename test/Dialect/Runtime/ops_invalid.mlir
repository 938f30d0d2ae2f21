// RUN: mlt-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// mlt_rt.buffer
//===----------------------------------------------------------------------===//

// Tests that a buffer needs a static shape: the arena holds fixed sizes.
// expected-error @+1 {{'mlt_rt.buffer' op must have a static shape, got 'tensor<?x64xf32>'}}
mlt_rt.buffer @t0 temporary : tensor<?x64xf32>

// -----

// Tests that a parameter buffer must name its parameter.
// expected-error @+1 {{'mlt_rt.buffer' op of kind 'parameter' must name its parameter}}
mlt_rt.buffer @"param:w" parameter : tensor<64xf32>

// -----

// Tests that a gradient buffer must name its parameter.
// expected-error @+1 {{'mlt_rt.buffer' op of kind 'gradient' must name its parameter}}
mlt_rt.buffer @"grad:w" gradient {decay} : tensor<64xf32>

// -----

// Tests that an optimizer-state buffer must name its parameter.
// expected-error @+1 {{'mlt_rt.buffer' op of kind 'optimizer_state' must name its parameter}}
mlt_rt.buffer @"exp_avg:w" optimizer_state : tensor<64xf32>

// -----

// Tests that a constant buffer needs the value of its elements.
// expected-error @+1 {{'mlt_rt.buffer' op of kind 'constant' needs a value}}
mlt_rt.buffer @c constant : tensor<f32>

// -----

// Tests that a buffer's kind must be one of the runtime's.
// expected-error @+1 {{custom op 'mlt_rt.buffer' expected string or keyword containing one of the following enum values for attribute 'kind' [parameter, gradient, optimizer_state, input, output, temporary, constant, parameter_copy]}}
mlt_rt.buffer @t0 scratch : tensor<64xf32>

// -----

// Tests that a buffer's type must be a ranked tensor.
// expected-error @+1 {{'mlt_rt.buffer' op attribute 'type' failed to satisfy constraint: type attribute of ranked tensor of signless integer or floating-point values}}
mlt_rt.buffer @t0 temporary : memref<64xf32>

// -----

// Tests that buffers live at module level only.
func.func @f() {
  // expected-error @+1 {{'mlt_rt.buffer' op expects parent op 'builtin.module'}}
  mlt_rt.buffer @t0 temporary : tensor<64xf32>
  return
}

//===----------------------------------------------------------------------===//
// mlt_rt.launch
//===----------------------------------------------------------------------===//

// -----

// Tests that a launch must name a kernel of Kernels.def.
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op unknown kernel 'gelu_fwd'}}
  mlt_rt.launch "gelu_fwd" [@a] -> [@a] ints [4]
}

// -----

// Tests that a launch needs the kernel's number of inputs.
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op kernel 'add' takes 2 inputs, got 3}}
  mlt_rt.launch "add" [@a, @a, @a] -> [@a] ints [4]
}

// -----

// Tests that a launch needs the kernel's number of outputs.
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op kernel 'attention_merge' takes 2 outputs, got 1}}
  mlt_rt.launch "attention_merge" [@a, @a, @a, @a] -> [@a] ints [1, 1, 1, 4]
}

// -----

// Tests that a launch needs the kernel's number of integer attributes, and
// that the error names them.
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op kernel 'matmul' takes 7 integer attributes (batch, m, n, k, transpose_a, transpose_b, b_batched), got 6}}
  mlt_rt.launch "matmul" [@a, @a] -> [@a] ints [1, 2, 2, 2, 0, 0]
}

// -----

// Tests that a launch of a kernel without integer attributes takes none.
mlt_rt.buffer @a temporary : tensor<f32>
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op kernel 'clip_coefficient' takes 0 integer attributes, got 1}}
  mlt_rt.launch "clip_coefficient" [@a, @a] -> [@a] ints [1]
}

// -----

// Tests that a launch needs the kernel's number of float attributes.
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op kernel 'rms_norm_fwd' takes 1 float attributes (eps), got 0}}
  mlt_rt.launch "rms_norm_fwd" [@a, @a] -> [@a] ints [1, 4]
}

// -----

// Tests that a launch of a kernel without float attributes takes none.
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op kernel 'add' takes 0 float attributes, got 2}}
  mlt_rt.launch "add" [@a, @a] -> [@a] ints [4] floats [1.0, 2.0]
}

// -----

// Tests that a launch input must be a buffer, not another symbol.
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op uses @p, which is not a buffer}}
  mlt_rt.launch "add" [@a, @p] -> [@a] ints [4]
}

// -----

// Tests that a launch output must name a declared symbol.
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op uses @missing, which is not a buffer}}
  mlt_rt.launch "add" [@a, @a] -> [@missing] ints [4]
}

// -----

// Tests that a launch cannot name a function.
mlt_rt.buffer @a temporary : tensor<4xf32>
func.func @f() {
  return
}
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op uses @f, which is not a buffer}}
  mlt_rt.launch "accumulate" [@f] -> [@a] ints [4]
}

// -----

// Tests that a launch belongs in a program.
mlt_rt.buffer @a temporary : tensor<4xf32>
func.func @f() {
  // expected-error @+1 {{'mlt_rt.launch' op expects parent op 'mlt_rt.program'}}
  mlt_rt.launch "add" [@a, @a] -> [@a] ints [4]
  return
}

//===----------------------------------------------------------------------===//
// mlt_rt.program
//===----------------------------------------------------------------------===//

// -----

// Tests that a program lives at module level.
func.func @f() {
  // expected-error @+1 {{'mlt_rt.program' op expects parent op 'builtin.module'}}
  mlt_rt.program @p {
  }
  return
}

// -----

// Tests that a stream must be one the runtime has (0..7).
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op runs on stream 8; streams are 0..7}}
  mlt_rt.launch "add" [@a, @a] -> [@a] ints [4] stream 8
}

// -----

// Tests that a launch may wait only for a token an earlier launch signals:
// program order must be a valid order of the launches.
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.buffer @b temporary : tensor<4xf32>
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op waits for token 0, which no earlier launch of @p signals}}
  mlt_rt.launch "add" [@a, @a] -> [@b] ints [4] stream 1 waits [0]
  mlt_rt.launch "add" [@a, @a] -> [@a] ints [4] token 0
}

// -----

// Tests that a token is signalled once in a program.
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.program @p {
  mlt_rt.launch "add" [@a, @a] -> [@a] ints [4] token 3
  // expected-error @+1 {{'mlt_rt.launch' op signals token 3, which an earlier launch of @p signals}}
  mlt_rt.launch "add" [@a, @a] -> [@a] ints [4] token 3
}

// -----

// Tests that tokens are non-negative.
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op signals token -1; tokens are 0..65535}}
  mlt_rt.launch "add" [@a, @a] -> [@a] ints [4] token -1
}

//===----------------------------------------------------------------------===//
// Copies per micro-batch, mlt_rt.step and mlt_rt.call
//===----------------------------------------------------------------------===//

// -----

// Tests that only inputs and outputs have a copy per micro-batch.
// expected-error @+1 {{'mlt_rt.buffer' op of kind 'temporary' cannot have a copy per micro-batch (only inputs and outputs do)}}
mlt_rt.buffer @t0 temporary per_microbatch 2 : tensor<4xf32>

// -----

// Tests that a buffer has at least one copy.
// expected-error @+1 {{'mlt_rt.buffer' op per_microbatch must be at least 1, got 0}}
mlt_rt.buffer @tokens input per_microbatch 0 : tensor<4xi32>

// -----

mlt_rt.program @body {
}
mlt_rt.step @step {
  // Tests that a call names a program.
  // expected-error @+1 {{'mlt_rt.call' op calls @nothing, which is not an mlt_rt.program}}
  mlt_rt.call @nothing microbatch 0
}

// -----

mlt_rt.program @body {
}
mlt_rt.step @step {
  // Tests that a call's work is work of its micro-batch.
  // expected-error @+1 {{'mlt_rt.call' op does F1.0, which is not work of the call's micro-batch}}
  mlt_rt.call @body microbatch 0 work [F0.0, F1.0]
}

// -----

mlt_rt.program @body {
}
mlt_rt.step @step {
  // Tests that a work item is written F<mb>.<chunk>.
  // expected-error @+1 {{expected a work item such as F0.0, got 'X0.0'}}
  mlt_rt.call @body microbatch 0 work [X0.0]
}

// -----

mlt_rt.program @body {
}
mlt_rt.step @step {
  mlt_rt.call @body microbatch 0 work [F0.0]
  // Tests that the step does each item once.
  // expected-error @+1 {{'mlt_rt.call' op does F0.0, which an earlier call of the step does}}
  mlt_rt.call @body microbatch 0 work [F0.0]
}

// -----

mlt_rt.program @body {
}
mlt_rt.step @step {
  // Tests that a backward comes after its forward.
  // expected-error @+1 {{'mlt_rt.call' op does B0.0 before the step does its forward}}
  mlt_rt.call @body microbatch 0 work [B0.0, F0.0]
}

// -----

// Tests that only temporaries have a copy per slot.
// expected-error @+1 {{'mlt_rt.buffer' op of kind 'input' cannot have a copy per slot (only temporaries do)}}
mlt_rt.buffer @x input per_slot 2 : tensor<4xf32>

// -----

// Tests that a buffer's copies are per micro-batch or per slot, not both.
// expected-error @+1 {{'mlt_rt.buffer' op has a copy per micro-batch and per slot; one or the other}}
mlt_rt.buffer @t temporary per_microbatch 2 per_slot 2 : tensor<4xf32>

// -----

// Tests that only a temporary of one copy is kept for the step.
// expected-error @+1 {{'mlt_rt.buffer' op step_kept is for a temporary of one copy that is no view}}
mlt_rt.buffer @a parameter_copy step_kept {parameter = "w"} : tensor<f32>

// -----

// expected-error @+1 {{'mlt_rt.buffer' op step_kept is for a temporary of one copy that is no view}}
mlt_rt.buffer @a temporary per_slot 2 step_kept : tensor<f32>

// -----

mlt_rt.program @body {
}
mlt_rt.step @step {
  // Tests that a slot is non-negative.
  // expected-error @+1 {{'mlt_rt.call' op slot must be non-negative, got -1}}
  mlt_rt.call @body microbatch 0 slot -1
}

// -----

// A bucket's member needs no parameter only as a view; a plain gradient
// must name its parameter.
// expected-error @+1 {{of kind 'gradient' must name its parameter}}
mlt_rt.buffer @g gradient : tensor<16xf32>

// -----

mlt_rt.buffer @b gradient {bucket} : tensor<256xf32>
// expected-error @+1 {{of 128 elements does not fit @b of 256 elements at its offset}}
mlt_rt.buffer @v gradient {parameter = "a", view = @b, view_offset = 200} : tensor<128xf32>

// -----

mlt_rt.buffer @b gradient {bucket} : tensor<256xf32>
// expected-error @+1 {{of 100 elements does not fit @b of 256 elements as one of equal slices}}
mlt_rt.buffer @s gradient {owns, shard = "dp", view = @b} : tensor<100xf32>

// -----

mlt_rt.buffer @t temporary : tensor<256xf32>
// expected-error @+1 {{lies in @t, which is no bucket}}
mlt_rt.buffer @v gradient {parameter = "a", view = @t, view_offset = 0} : tensor<16xf32>

// -----

mlt_rt.buffer @b gradient {bucket} : tensor<256xf32>
// expected-error @+1 {{is a view of @b of another element type}}
mlt_rt.buffer @v parameter_copy {parameter = "a", view = @b, view_offset = 0} : tensor<16xbf16>

// -----

mlt_rt.buffer @b gradient {bucket} : tensor<256xf32>
// expected-error @+1 {{owns ranges of parameters, so it must be a slice (shard) that names no parameter}}
mlt_rt.buffer @v gradient {owns, parameter = "a", view = @b, view_offset = 0} : tensor<16xf32>

// -----

mlt_rt.buffer @b gradient {bucket} : tensor<256xf32>
// expected-error @+1 {{names a layout but is no slice stored apart}}
mlt_rt.buffer @m optimizer_state {layout = @b, parameter = "a"} : tensor<128xf32>

// -----

// expected-error @+1 {{is a slice (shard) of no flat buffer: it needs a view or a layout}}
mlt_rt.buffer @m optimizer_state {owns, shard = "dp"} : tensor<128xf32>

// -----

mlt_rt.buffer @b gradient {bucket} : tensor<256xf32>
// expected-error @+1 {{has a view_offset but is no view at a fixed place}}
mlt_rt.buffer @s gradient {owns, shard = "dp", view = @b, view_offset = 0} : tensor<128xf32>

// -----

mlt_rt.buffer @b temporary {bucket} : tensor<256xf32>
// expected-error @+1 {{shard '' is not mesh axis names joined by '*'}}
mlt_rt.buffer @s temporary {shard = "", view = @b} : tensor<128xf32>

// -----

mlt_rt.buffer @b temporary {bucket} : tensor<256xf32>
// expected-error @+1 {{shard 'dp*' is not mesh axis names joined by '*'}}
mlt_rt.buffer @s temporary {shard = "dp*", view = @b} : tensor<128xf32>

// -----

mlt_rt.buffer @b temporary {bucket} : tensor<256xf32>
// expected-error @+1 {{shard_shift needs a slice over one axis and must be non-negative}}
mlt_rt.buffer @s temporary {shard = "dp*cp", shard_shift = 1, view = @b} : tensor<64xf32>

// -----

mlt_rt.buffer @b temporary {bucket} : tensor<256xf32>
// expected-error @+1 {{shard_shift needs a slice over one axis and must be non-negative}}
mlt_rt.buffer @s temporary {shard_shift = 1, view = @b, view_offset = 0} : tensor<128xf32>
