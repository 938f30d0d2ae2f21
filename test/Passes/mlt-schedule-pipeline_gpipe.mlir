// RUN: mlt-opt %s -split-input-file -mlt-schedule-pipeline="schedule=gpipe" | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-schedule-pipeline="schedule=gpipe" -mlt-plan-memory | FileCheck %s --check-prefix=MEMORY

// Tests that a schedule which runs every forward before any backward
// (GPipe) splits the micro-step bodies where their backward starts: the
// forward half of micro_step becomes @forward, its backward half
// @backward, micro_step_first's backward half @backward_first reading
// @forward's temporaries (micro_step_first's own forward is the same and
// goes); the temporaries both halves touch (@act) get a copy per slot, as
// many as the schedule keeps in flight (3), and each call names its
// micro-batch's slot; a temporary of one half stays as it is.
// CHECK-LABEL: mlt_rt.buffer @act temporary per_slot 3 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @fwd_only temporary : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @bwd_only temporary : tensor<64xf32>
// CHECK-NOT: @act1
// CHECK-NOT: mlt_rt.program @micro_step
// CHECK: mlt_rt.program @forward {
// CHECK-NEXT: mlt_rt.launch "add" [@x, @x] -> [@fwd_only] ints [64]
// CHECK-NEXT: mlt_rt.launch "add" [@fwd_only, @x] -> [@act] ints [64]
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@act] -> [@loss] ints [64]
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.program @backward {
// CHECK-NEXT: mlt_rt.launch "mul" [@seed, @act] -> [@bwd_only] ints [64]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@bwd_only] -> [@"grad:w"] ints [64]
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.program @backward_first {
// CHECK-NEXT: mlt_rt.launch "mul" [@seed, @act] -> [@"grad:w"] ints [64]
// CHECK-NEXT: }
// CHECK: mlt_rt.step @step {
// CHECK-NEXT: mlt_rt.call @forward microbatch 0 slot 0 work [F0.0]
// CHECK-NEXT: mlt_rt.call @forward microbatch 1 slot 1 work [F1.0]
// CHECK-NEXT: mlt_rt.call @forward microbatch 2 slot 2 work [F2.0]
// CHECK-NEXT: mlt_rt.call @backward_first microbatch 0 slot 0 work [B0.0]
// CHECK-NEXT: mlt_rt.call @backward microbatch 1 slot 1 work [B1.0]
// CHECK-NEXT: mlt_rt.call @backward microbatch 2 slot 2 work [B2.0]
// CHECK-NEXT: mlt_rt.call @optimizer_step
// CHECK-NEXT: }

// The step's memory: after the persistent buffers (2304 bytes), @act's
// three copies (256 bytes apart: 768 bytes) are live from the first
// forward to the last backward; the forward's region (@fwd_only) and the
// backward's (@bwd_only) are live in their own calls, so they share 256
// bytes beside @act; the arena is 2304 + 768 + 256.
// MEMORY-LABEL: module attributes {mlt_rt.arena_bytes = 3328 : i64
// MEMORY: mlt_rt.buffer @act temporary per_slot 3 offset 2304 : tensor<64xf32>
// MEMORY-NEXT: mlt_rt.buffer @fwd_only temporary offset 3072 : tensor<64xf32>
// MEMORY-NEXT: mlt_rt.buffer @bwd_only temporary offset 3072 : tensor<64xf32>
module attributes {mlt_rt.microbatches = 3 : i64} {
  mlt_rt.buffer @"param:w" parameter {parameter = "w"} : tensor<64xf32>
  mlt_rt.buffer @"grad:w" gradient {parameter = "w"} : tensor<64xf32>
  mlt_rt.buffer @x input per_microbatch 3 : tensor<64xf32>
  mlt_rt.buffer @loss output per_microbatch 3 : tensor<f32>
  mlt_rt.buffer @seed constant {value = 1.0 : f64} : tensor<64xf32>
  mlt_rt.buffer @act temporary : tensor<64xf32>
  mlt_rt.buffer @fwd_only temporary : tensor<64xf32>
  mlt_rt.buffer @bwd_only temporary : tensor<64xf32>
  mlt_rt.buffer @act1 temporary : tensor<64xf32>
  mlt_rt.buffer @fwd_only1 temporary : tensor<64xf32>
  mlt_rt.program @micro_step backward_start 3 {
    mlt_rt.launch "add" [@x, @x] -> [@fwd_only] ints [64]
    mlt_rt.launch "add" [@fwd_only, @x] -> [@act] ints [64]
    mlt_rt.launch "sum_squares" [@act] -> [@loss] ints [64]
    mlt_rt.launch "mul" [@seed, @act] -> [@bwd_only] ints [64]
    mlt_rt.launch "accumulate" [@bwd_only] -> [@"grad:w"] ints [64]
  }
  mlt_rt.program @micro_step_first backward_start 3 {
    mlt_rt.launch "add" [@x, @x] -> [@fwd_only1] ints [64]
    mlt_rt.launch "add" [@fwd_only1, @x] -> [@act1] ints [64]
    mlt_rt.launch "sum_squares" [@act1] -> [@loss] ints [64]
    mlt_rt.launch "mul" [@seed, @act1] -> [@"grad:w"] ints [64]
  }
  mlt_rt.program @optimizer_step {
    mlt_rt.launch "accumulate" [@"grad:w"] -> [@"param:w"] ints [64]
  }
}
