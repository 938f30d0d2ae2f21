// RUN: mlt-opt %s -split-input-file -mlt-plan-memory="in-place=false" | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-plan-memory="alignment=64 in-place=false" | FileCheck %s --check-prefix=ALIGN64

// The packing by lifetimes alone; outputs written in place of their inputs
// are tested in mlt-plan-memory_in-place.mlir.

// Tests that the persistent buffers (parameters, gradients, optimizer state,
// inputs, outputs, constants) are laid out one after another in declaration
// order, each at a 256-byte boundary (a 40-byte buffer takes 256), whatever
// temporaries are declared between them, and that the arena holds them.
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 2048 : i64}
// CHECK-NEXT: mlt_rt.buffer @"param:w" parameter offset 0 {decay, parameter = "w"} : tensor<10xf32>
// CHECK-NEXT: mlt_rt.buffer @"grad:w" gradient offset 256 {parameter = "w"} : tensor<10xf32>
// CHECK-NEXT: mlt_rt.buffer @"exp_avg:w" optimizer_state offset 512 {parameter = "w"} : tensor<10xf32>
// CHECK-NEXT: mlt_rt.buffer @t0 temporary offset 1792 : tensor<8xf32>
// CHECK-NEXT: mlt_rt.buffer @"exp_avg_sq:w" optimizer_state offset 768 {parameter = "w"} : tensor<10xf32>
// CHECK-NEXT: mlt_rt.buffer @tokens input offset 1024 : tensor<2x4xi32>
// CHECK-NEXT: mlt_rt.buffer @loss output offset 1280 : tensor<f32>
// CHECK-NEXT: mlt_rt.buffer @c constant offset 1536 {value = 5.000000e-01 : f64} : tensor<f32>
// ALIGN64-LABEL: module attributes {mlt_rt.arena_bytes = 512 : i64}
// ALIGN64-NEXT: mlt_rt.buffer @"param:w" parameter offset 0
// ALIGN64-NEXT: mlt_rt.buffer @"grad:w" gradient offset 64
// ALIGN64-NEXT: mlt_rt.buffer @"exp_avg:w" optimizer_state offset 128
// ALIGN64-NEXT: mlt_rt.buffer @t0 temporary offset 448
// ALIGN64-NEXT: mlt_rt.buffer @"exp_avg_sq:w" optimizer_state offset 192
// ALIGN64-NEXT: mlt_rt.buffer @tokens input offset 256
// ALIGN64-NEXT: mlt_rt.buffer @loss output offset 320
// ALIGN64-NEXT: mlt_rt.buffer @c constant offset 384
mlt_rt.buffer @"param:w" parameter {decay, parameter = "w"} : tensor<10xf32>
mlt_rt.buffer @"grad:w" gradient {parameter = "w"} : tensor<10xf32>
mlt_rt.buffer @"exp_avg:w" optimizer_state {parameter = "w"} : tensor<10xf32>
mlt_rt.buffer @t0 temporary : tensor<8xf32>
mlt_rt.buffer @"exp_avg_sq:w" optimizer_state {parameter = "w"} : tensor<10xf32>
mlt_rt.buffer @tokens input : tensor<2x4xi32>
mlt_rt.buffer @loss output : tensor<f32>
mlt_rt.buffer @c constant {value = 0.5} : tensor<f32>
mlt_rt.program @micro_step {
  mlt_rt.launch "add" [@"param:w", @"grad:w"] -> [@t0] ints [8]
}

// -----

// Tests that a buffer's size counts its element type: 512 bf16 elements take
// 1024 bytes, 300 f64 elements 2400 (rounded up to 2560).
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 3584 : i64}
// CHECK-NEXT: mlt_rt.buffer @a input offset 0 : tensor<512xbf16>
// CHECK-NEXT: mlt_rt.buffer @b input offset 1024 : tensor<300xf64>
// CHECK-NEXT: mlt_rt.buffer @c output offset 3584 : tensor<0xf32>
mlt_rt.buffer @a input : tensor<512xbf16>
mlt_rt.buffer @b input : tensor<300xf64>
mlt_rt.buffer @c output : tensor<0xf32>

// -----

// Tests that temporaries whose lifetimes are disjoint share an offset, after
// the persistent buffers, while temporaries alive at the same time do not:
// @t0 lives in launches 0-1, @t1 in 1-2, @t2 in 2-3, so @t0 and @t2 (same
// size) share memory and @t1 overlaps both. The temporaries start after
// both persistent buffers (@y is declared last but is an output).
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 1024 : i64}
// CHECK-NEXT: mlt_rt.buffer @x input offset 0 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @t0 temporary offset 512 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @t1 temporary offset 768 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @t2 temporary offset 512 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @y output offset 256 : tensor<64xf32>
mlt_rt.buffer @x input : tensor<64xf32>
mlt_rt.buffer @t0 temporary : tensor<64xf32>
mlt_rt.buffer @t1 temporary : tensor<64xf32>
mlt_rt.buffer @t2 temporary : tensor<64xf32>
mlt_rt.buffer @y output : tensor<64xf32>
mlt_rt.program @micro_step {
  mlt_rt.launch "silu_fwd" [@x] -> [@t0] ints [64]
  mlt_rt.launch "silu_fwd" [@t0] -> [@t1] ints [64]
  mlt_rt.launch "silu_fwd" [@t1] -> [@t2] ints [64]
  mlt_rt.launch "silu_fwd" [@t2] -> [@y] ints [64]
}

// -----

// Tests that a temporary alive through the whole program (read by the last
// launch) overlaps every other one, so all three take distinct offsets.
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 1024 : i64}
// CHECK-NEXT: mlt_rt.buffer @x input offset 0 : tensor<64xf32>
// CHECK-DAG: mlt_rt.buffer @t0 temporary offset 256 : tensor<64xf32>
// CHECK-DAG: mlt_rt.buffer @t1 temporary offset 512 : tensor<64xf32>
// CHECK-DAG: mlt_rt.buffer @t2 temporary offset 768 : tensor<64xf32>
mlt_rt.buffer @x input : tensor<64xf32>
mlt_rt.buffer @t0 temporary : tensor<64xf32>
mlt_rt.buffer @t1 temporary : tensor<64xf32>
mlt_rt.buffer @t2 temporary : tensor<64xf32>
mlt_rt.program @micro_step {
  mlt_rt.launch "silu_fwd" [@x] -> [@t0] ints [64]
  mlt_rt.launch "silu_fwd" [@t0] -> [@t1] ints [64]
  mlt_rt.launch "silu_fwd" [@t1] -> [@t2] ints [64]
  mlt_rt.launch "add" [@t0, @t2] -> [@x] ints [64]
}

// -----

// Tests that the programs, which run one at a time, share the temporary
// region: each program's temporaries start right after the persistent
// buffers, and the arena is the persistent size plus the larger program's
// peak (@big and @s, alive together: 4096 + 256 bytes).
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 4608 : i64}
// CHECK-NEXT: mlt_rt.buffer @x input offset 0 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @a temporary offset 256 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @big temporary offset 256 : tensor<1024xf32>
// CHECK-NEXT: mlt_rt.buffer @s temporary offset 4352 : tensor<f32>
mlt_rt.buffer @x input : tensor<64xf32>
mlt_rt.buffer @a temporary : tensor<64xf32>
mlt_rt.buffer @big temporary : tensor<1024xf32>
mlt_rt.buffer @s temporary : tensor<f32>
mlt_rt.program @micro_step {
  mlt_rt.launch "silu_fwd" [@x] -> [@a] ints [64]
  mlt_rt.launch "add" [@a, @a] -> [@x] ints [64]
}
mlt_rt.program @optimizer_step {
  mlt_rt.launch "cast" [@x] -> [@big] ints [64]
  mlt_rt.launch "sum_squares" [@big] -> [@s] ints [1024]
}

// -----

// Tests that a module without temporaries needs only its persistent
// buffers, and that an empty program is fine.
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 512 : i64}
// CHECK-NEXT: mlt_rt.buffer @"param:w" parameter offset 0 {parameter = "w"} : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @"grad:w" gradient offset 256 {parameter = "w"} : tensor<64xf32>
mlt_rt.buffer @"param:w" parameter {parameter = "w"} : tensor<64xf32>
mlt_rt.buffer @"grad:w" gradient {parameter = "w"} : tensor<64xf32>
mlt_rt.program @micro_step {
  mlt_rt.launch "accumulate" [@"param:w"] -> [@"grad:w"] ints [64]
}
mlt_rt.program @optimizer_step {
}

// -----

// Tests that a temporary that a launch on another stream reads lives until
// the program's end, where the streams join: @b, read on stream 1 by the
// second launch, does not share memory with @c, which the compute stream
// writes afterwards (on one stream it would: @c2 takes @b2's place).
// CHECK-LABEL: mlt_rt.buffer @x3 input offset 0 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @b temporary offset 256 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @y3 temporary offset 512 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @c temporary offset 768 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @b2 temporary offset 256 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @y4 temporary offset 512 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @c2 temporary offset 256 : tensor<64xf32>
mlt_rt.buffer @x3 input : tensor<64xf32>
mlt_rt.buffer @b temporary : tensor<64xf32>
mlt_rt.buffer @y3 temporary : tensor<64xf32>
mlt_rt.buffer @c temporary : tensor<64xf32>
mlt_rt.buffer @b2 temporary : tensor<64xf32>
mlt_rt.buffer @y4 temporary : tensor<64xf32>
mlt_rt.buffer @c2 temporary : tensor<64xf32>
mlt_rt.program @micro_step {
  mlt_rt.launch "silu_fwd" [@x3] -> [@b] ints [64] token 0
  mlt_rt.launch "all_reduce_sum" [@b] -> [@y3] ints [64, 0] stream 1 waits [0]
  mlt_rt.launch "silu_fwd" [@x3] -> [@c] ints [64]
}
mlt_rt.program @optimizer_step {
  mlt_rt.launch "silu_fwd" [@x3] -> [@b2] ints [64]
  mlt_rt.launch "all_reduce_sum" [@b2] -> [@y4] ints [64, 0]
  mlt_rt.launch "silu_fwd" [@x3] -> [@c2] ints [64]
}
