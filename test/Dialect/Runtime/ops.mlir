// RUN: mlt-opt %s -split-input-file | mlt-opt -split-input-file | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlir-print-op-generic | mlt-opt -split-input-file | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

// Tests that a buffer of every kind round-trips: state buffers with their
// parameter (and `decay`), inputs and outputs by name, a constant with its
// value, and temporaries with and without an offset.
// CHECK-LABEL: module
// CHECK: mlt_rt.buffer @"param:model.embed_tokens.weight" parameter {decay, parameter = "model.embed_tokens.weight"} : tensor<256x64xf32>
// CHECK: mlt_rt.buffer @"grad:model.norm.weight" gradient {parameter = "model.norm.weight"} : tensor<64xf32>
// CHECK: mlt_rt.buffer @"exp_avg:model.norm.weight" optimizer_state {parameter = "model.norm.weight"} : tensor<64xf32>
// CHECK: mlt_rt.buffer @tokens input : tensor<4x32xi32>
// CHECK: mlt_rt.buffer @loss output : tensor<f32>
// CHECK: mlt_rt.buffer @const0 constant {value = 2.500000e-01 : f64} : tensor<f32>
// CHECK: mlt_rt.buffer @t0 temporary : tensor<4x32x64xbf16>
// CHECK: mlt_rt.buffer @t1 temporary offset 1024 : tensor<4x32x64xf32>
// GENERIC-LABEL: "builtin.module"
// GENERIC: "mlt_rt.buffer"() <{decay, kind = 0 : i32, parameter = "model.embed_tokens.weight", sym_name = "param:model.embed_tokens.weight", type = tensor<256x64xf32>}> : () -> ()
// GENERIC: "mlt_rt.buffer"() <{kind = 1 : i32, parameter = "model.norm.weight", sym_name = "grad:model.norm.weight", type = tensor<64xf32>}> : () -> ()
// GENERIC: "mlt_rt.buffer"() <{kind = 2 : i32,
// GENERIC: "mlt_rt.buffer"() <{kind = 3 : i32, sym_name = "tokens", type = tensor<4x32xi32>}> : () -> ()
// GENERIC: "mlt_rt.buffer"() <{kind = 4 : i32, sym_name = "loss", type = tensor<f32>}> : () -> ()
// GENERIC: "mlt_rt.buffer"() <{kind = 6 : i32, sym_name = "const0", type = tensor<f32>, value = 2.500000e-01 : f64}> : () -> ()
// GENERIC: "mlt_rt.buffer"() <{kind = 5 : i32, sym_name = "t0", type = tensor<4x32x64xbf16>}> : () -> ()
// GENERIC: "mlt_rt.buffer"() <{kind = 5 : i32, offset = 1024 : i64, sym_name = "t1", type = tensor<4x32x64xf32>}> : () -> ()
mlt_rt.buffer @"param:model.embed_tokens.weight" parameter {decay, parameter = "model.embed_tokens.weight"} : tensor<256x64xf32>
mlt_rt.buffer @"grad:model.norm.weight" gradient {parameter = "model.norm.weight"} : tensor<64xf32>
mlt_rt.buffer @"exp_avg:model.norm.weight" optimizer_state {parameter = "model.norm.weight"} : tensor<64xf32>
mlt_rt.buffer @tokens input : tensor<4x32xi32>
mlt_rt.buffer @loss output : tensor<f32>
mlt_rt.buffer @const0 constant {value = 0.25 : f64} : tensor<f32>
mlt_rt.buffer @t0 temporary : tensor<4x32x64xbf16>
mlt_rt.buffer @t1 temporary offset 1024 : tensor<4x32x64xf32>

// -----

// Tests that programs round-trip their launches in order: integer and float
// attributes, none at all, a variadic kernel (global_norm) and one with a
// variable number of integers (transpose); and that an empty program and the
// module's runtime attributes round-trip.
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 4096 : i64, mlt_rt.microbatches = 2 : i64}
// CHECK: mlt_rt.buffer @x input offset 0 : tensor<8x4xf32>
// CHECK: mlt_rt.program @micro_step {
// CHECK-NEXT: mlt_rt.launch "rms_norm_fwd" [@x, @w] -> [@y] ints [8, 4] floats [1.000000e-05]
// CHECK-NEXT: mlt_rt.launch "transpose" [@y] -> [@yt] ints [2, 8, 4, 1, 0]
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@y] -> [@s0] ints [32]
// CHECK-NEXT: mlt_rt.launch "sum_squares_multi" [@y, @w] -> [@s0, @n] ints [32, 4]
// CHECK-NEXT: mlt_rt.launch "global_norm" [@s0, @s1, @s0] -> [@n]
// CHECK-NEXT: mlt_rt.launch "clip_coefficient" [@n, @s1] -> [@s1]
// CHECK-NEXT: }
// CHECK: mlt_rt.program @optimizer_step {
// CHECK-NEXT: }
// GENERIC-LABEL: "builtin.module"
// GENERIC: "mlt_rt.program"() <{sym_name = "micro_step"}> ({
// GENERIC-NEXT: "mlt_rt.launch"() <{floats = array<f64: 1.000000e-05>, inputs = [@x, @w], ints = array<i64: 8, 4>, kernel = "rms_norm_fwd", outputs = [@y], waits = array<i64>}> : () -> ()
// GENERIC: "mlt_rt.launch"() <{floats = array<f64>, inputs = [@s0, @s1, @s0], ints = array<i64>, kernel = "global_norm", outputs = [@n], waits = array<i64>}> : () -> ()
// GENERIC: "mlt_rt.program"() <{sym_name = "optimizer_step"}> ({
// GENERIC: }) {mlt_rt.arena_bytes = 4096 : i64, mlt_rt.microbatches = 2 : i64} : () -> ()
module attributes {mlt_rt.arena_bytes = 4096 : i64, mlt_rt.microbatches = 2 : i64} {
  mlt_rt.buffer @x input offset 0 : tensor<8x4xf32>
  mlt_rt.buffer @w parameter offset 256 {parameter = "w"} : tensor<4xf32>
  mlt_rt.buffer @y temporary offset 512 : tensor<8x4xf32>
  mlt_rt.buffer @yt temporary offset 768 : tensor<4x8xf32>
  mlt_rt.buffer @s0 temporary offset 1024 : tensor<f32>
  mlt_rt.buffer @s1 input offset 1280 : tensor<f32>
  mlt_rt.buffer @n output offset 1536 : tensor<f32>
  mlt_rt.program @micro_step {
    mlt_rt.launch "rms_norm_fwd" [@x, @w] -> [@y] ints [8, 4] floats [1.0e-05]
    mlt_rt.launch "transpose" [@y] -> [@yt] ints [2, 8, 4, 1, 0]
    mlt_rt.launch "sum_squares" [@y] -> [@s0] ints [32]
    mlt_rt.launch "sum_squares_multi" [@y, @w] -> [@s0, @n] ints [32, 4]
    mlt_rt.launch "global_norm" [@s0, @s1, @s0] -> [@n]
    mlt_rt.launch "clip_coefficient" [@n, @s1] -> [@s1]
  }
  mlt_rt.program @optimizer_step {
  }
}

// -----

// Tests that streams, waits and tokens round-trip, and that no stream and no
// waits print as nothing.
// CHECK-LABEL: mlt_rt.program @micro_step_last {
// CHECK-NEXT: mlt_rt.launch "add" [@a, @a] -> [@g] ints [4] token 0
// CHECK-NEXT: mlt_rt.launch "add" [@a, @a] -> [@b] ints [4] stream 0 token 1
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@g] -> [@g] ints [4, 0] stream 1 waits [0, 1] token 2
// CHECK-NEXT: mlt_rt.launch "add" [@a, @b] -> [@c] ints [4]{{$}}
// CHECK-NEXT: }
module {
  mlt_rt.buffer @a input : tensor<4xf32>
  mlt_rt.buffer @b temporary : tensor<4xf32>
  mlt_rt.buffer @c output : tensor<4xf32>
  mlt_rt.buffer @g gradient {parameter = "w"} : tensor<4xf32>
  mlt_rt.program @micro_step_last {
    mlt_rt.launch "add" [@a, @a] -> [@g] ints [4] token 0
    mlt_rt.launch "add" [@a, @a] -> [@b] ints [4] stream 0 token 1
    mlt_rt.launch "all_reduce_sum" [@g] -> [@g] ints [4, 0] stream 1 waits [0, 1] token 2
    mlt_rt.launch "add" [@a, @b] -> [@c] ints [4] waits []
  }
}

// -----

// Tests that a launch of every kernel in Kernels.def round-trips with its
// arity.
// CHECK-LABEL: mlt_rt.program @all_kernels
// CHECK-NEXT: "embedding_fwd" [@i, @a] -> [@b] ints [1, 2, 3]
// CHECK-NEXT: "embedding_bwd" [@i, @a] -> [@b] ints [1, 2, 3]
// CHECK-NEXT: "matmul" [@a, @b] -> [@c] ints [1, 2, 3, 4, 0, 1, 0]
// CHECK-NEXT: "rms_norm_fwd" [@a, @b] -> [@c] ints [1, 2] floats [1.000000e-06]
// CHECK-NEXT: "rms_norm_bwd" [@a, @b, @c] -> [@a, @b] ints [1, 2] floats [1.000000e-06]
// CHECK-NEXT: "rope" [@a] -> [@b] ints [1, 2, 3, 4, 1, 0, 1, 8192, -1] floats [5.000000e+05, 8.000000e+00, 1.000000e+00, 4.000000e+00]
// CHECK-NEXT: "attention_fwd" [@a, @b, @c] -> [@a, @b] ints [1, 2, 2, 3, 4, 5, 1, -1, 0, 0] floats [1.250000e-01]
// CHECK-NEXT: "attention_bwd" [@a, @b, @c, @a, @b, @c] -> [@a, @b, @c] ints [1, 2, 2, 3, 4, 5, 0, -1, 0, 0] floats [1.250000e-01]
// CHECK-NEXT: "swiglu_fwd" [@a, @b] -> [@c] ints [1]
// CHECK-NEXT: "swiglu_bwd" [@a, @b, @c] -> [@a, @b] ints [1]
// CHECK-NEXT: "silu_fwd" [@a] -> [@b] ints [1]
// CHECK-NEXT: "silu_bwd" [@a, @b] -> [@c] ints [1]
// CHECK-NEXT: "add" [@a, @b] -> [@c] ints [1]
// CHECK-NEXT: "mul" [@a, @b] -> [@c] ints [1]
// CHECK-NEXT: "accumulate" [@a] -> [@b] ints [1]
// CHECK-NEXT: "transpose" [@a] -> [@b] ints [1, 4, 0]
// CHECK-NEXT: "cast" [@a] -> [@b] ints [1]
// CHECK-NEXT: "cross_entropy_fwd" [@a, @i] -> [@s] ints [1, 2]
// CHECK-NEXT: "cross_entropy_bwd" [@s, @a, @i] -> [@b] ints [1, 2]
// CHECK-NEXT: "sum_squares" [@a] -> [@s] ints [1]
// CHECK-NEXT: "global_norm" [@s] -> [@s]
// CHECK-NEXT: "clip_coefficient" [@s, @s] -> [@s]
// CHECK-NEXT: "adamw" [@a, @s, @s, @s, @s, @s, @s, @s] -> [@a, @b, @c] ints [1, 1]
// CHECK-NEXT: }
mlt_rt.buffer @i input : tensor<4xi32>
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.buffer @b temporary : tensor<4xf32>
mlt_rt.buffer @c temporary : tensor<4xf32>
mlt_rt.buffer @s temporary : tensor<f32>
mlt_rt.program @all_kernels {
  mlt_rt.launch "embedding_fwd" [@i, @a] -> [@b] ints [1, 2, 3]
  mlt_rt.launch "embedding_bwd" [@i, @a] -> [@b] ints [1, 2, 3]
  mlt_rt.launch "matmul" [@a, @b] -> [@c] ints [1, 2, 3, 4, 0, 1, 0]
  mlt_rt.launch "rms_norm_fwd" [@a, @b] -> [@c] ints [1, 2] floats [1.0e-06]
  mlt_rt.launch "rms_norm_bwd" [@a, @b, @c] -> [@a, @b] ints [1, 2] floats [1.0e-06]
  mlt_rt.launch "rope" [@a] -> [@b] ints [1, 2, 3, 4, 1, 0, 1, 8192, -1] floats [5.0e+05, 8.0, 1.0, 4.0]
  mlt_rt.launch "attention_fwd" [@a, @b, @c] -> [@a, @b] ints [1, 2, 2, 3, 4, 5, 1, -1, 0, 0] floats [0.125]
  mlt_rt.launch "attention_bwd" [@a, @b, @c, @a, @b, @c] -> [@a, @b, @c] ints [1, 2, 2, 3, 4, 5, 0, -1, 0, 0] floats [0.125]
  mlt_rt.launch "swiglu_fwd" [@a, @b] -> [@c] ints [1]
  mlt_rt.launch "swiglu_bwd" [@a, @b, @c] -> [@a, @b] ints [1]
  mlt_rt.launch "silu_fwd" [@a] -> [@b] ints [1]
  mlt_rt.launch "silu_bwd" [@a, @b] -> [@c] ints [1]
  mlt_rt.launch "add" [@a, @b] -> [@c] ints [1]
  mlt_rt.launch "mul" [@a, @b] -> [@c] ints [1]
  mlt_rt.launch "accumulate" [@a] -> [@b] ints [1]
  mlt_rt.launch "transpose" [@a] -> [@b] ints [1, 4, 0]
  mlt_rt.launch "cast" [@a] -> [@b] ints [1]
  mlt_rt.launch "cross_entropy_fwd" [@a, @i] -> [@s] ints [1, 2]
  mlt_rt.launch "cross_entropy_bwd" [@s, @a, @i] -> [@b] ints [1, 2]
  mlt_rt.launch "sum_squares" [@a] -> [@s] ints [1]
  mlt_rt.launch "global_norm" [@s] -> [@s]
  mlt_rt.launch "clip_coefficient" [@s, @s] -> [@s]
  mlt_rt.launch "adamw" [@a, @s, @s, @s, @s, @s, @s, @s] -> [@a, @b, @c] ints [1, 1]
}

// -----

// Tests that buffers with a copy per micro-batch or per slot, a body's
// backward start, and a step of calls round-trip: each call's program,
// micro-batch, slot and work items (F, B and W items, several chunks), and
// a call without a micro-batch.
// CHECK-LABEL: mlt_rt.buffer @tokens input per_microbatch 3 : tensor<2x8xi32>
// CHECK: mlt_rt.buffer @loss output per_microbatch 3 offset 512 : tensor<f32>
// CHECK: mlt_rt.buffer @act temporary per_slot 2 offset 1024 : tensor<2x8xf32>
// CHECK: mlt_rt.program @body backward_start 0 {
// CHECK: mlt_rt.step @step {
// CHECK-NEXT: mlt_rt.call @body microbatch 0 work [F0.0, B0.0]
// CHECK-NEXT: mlt_rt.call @body microbatch 1 work [F1.0, F1.1, B1.1, W1.1]
// CHECK-NEXT: mlt_rt.call @body microbatch 2{{$}}
// CHECK-NEXT: mlt_rt.call @body microbatch 2 slot 1 work [F2.0]
// CHECK-NEXT: mlt_rt.call @update{{$}}
// CHECK-NEXT: }
// GENERIC-LABEL: "mlt_rt.step"() <{sym_name = "step"}>
// GENERIC: "mlt_rt.call"() <{microbatch = 0 : i64, program = @body, work = array<i64: 0, 0, 0, 1, 0, 0>}> : () -> ()
mlt_rt.buffer @tokens input per_microbatch 3 : tensor<2x8xi32>
mlt_rt.buffer @loss output per_microbatch 3 offset 512 : tensor<f32>
mlt_rt.buffer @act temporary per_slot 2 offset 1024 : tensor<2x8xf32>
mlt_rt.program @body backward_start 0 {
}
mlt_rt.program @update {
}
mlt_rt.step @step {
  mlt_rt.call @body microbatch 0 work [F0.0, B0.0]
  mlt_rt.call @body microbatch 1 work [F1.0, F1.1, B1.1, W1.1]
  mlt_rt.call @body microbatch 2
  mlt_rt.call @body microbatch 2 slot 1 work [F2.0]
  mlt_rt.call @update
}
