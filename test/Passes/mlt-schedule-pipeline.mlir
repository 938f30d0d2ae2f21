// RUN: mlt-opt %s -split-input-file -mlt-schedule-pipeline | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-schedule-pipeline | mlt-opt -split-input-file | FileCheck %s

// Tests that a step of three micro-batches calls the first micro-batch's
// body (which writes the gradients) once, micro_step for the others, each
// call naming its micro-batch and the schedule's work (F<mb>.0 B<mb>.0, the
// one-stage 1F1B order), and ends with the optimizer update.
// CHECK-LABEL: mlt_rt.buffer @"grad:w"
// CHECK: mlt_rt.step @step {
// CHECK-NEXT:   mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
// CHECK-NEXT:   mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
// CHECK-NEXT:   mlt_rt.call @micro_step microbatch 2 work [F2.0, B2.0]
// CHECK-NEXT:   mlt_rt.call @optimizer_step
// CHECK-NEXT: }
module attributes {mlt_rt.microbatches = 3 : i64} {
  mlt_rt.buffer @"param:w" parameter {parameter = "w"} : tensor<4xf32>
  mlt_rt.buffer @"grad:w" gradient {parameter = "w"} : tensor<4xf32>
  mlt_rt.buffer @x input per_microbatch 3 : tensor<4xf32>
  mlt_rt.program @micro_step {
    mlt_rt.launch "accumulate" [@x] -> [@"grad:w"] ints [4]
  }
  mlt_rt.program @micro_step_first {
    mlt_rt.launch "cast" [@x] -> [@"grad:w"] ints [4]
  }
  mlt_rt.program @optimizer_step {
    mlt_rt.launch "accumulate" [@"grad:w"] -> [@"param:w"] ints [4]
  }
}

// -----

// Tests that a step of one micro-batch calls micro_step_first alone, and
// that micro_step, which it no longer calls, goes with the temporary only
// it used.
// CHECK-LABEL: mlt_rt.buffer @"grad:v"
// CHECK-NOT: @t0
// CHECK-NOT: mlt_rt.program @micro_step {
// CHECK: mlt_rt.program @micro_step_first {
// CHECK: mlt_rt.step @step {
// CHECK-NEXT:   mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
// CHECK-NEXT:   mlt_rt.call @optimizer_step
// CHECK-NEXT: }
module {
  mlt_rt.buffer @"param:v" parameter {parameter = "v"} : tensor<4xf32>
  mlt_rt.buffer @"grad:v" gradient {parameter = "v"} : tensor<4xf32>
  mlt_rt.buffer @t0 temporary : tensor<4xf32>
  mlt_rt.program @micro_step {
    mlt_rt.launch "add" [@"param:v", @"param:v"] -> [@t0] ints [4]
    mlt_rt.launch "accumulate" [@t0] -> [@"grad:v"] ints [4]
  }
  mlt_rt.program @micro_step_first {
    mlt_rt.launch "cast" [@"param:v"] -> [@"grad:v"] ints [4]
  }
  mlt_rt.program @optimizer_step {
  }
}

// -----

// Tests that without a body that writes the gradients the step zeroes them
// first (fill), then every micro-batch accumulates.
// CHECK-LABEL: mlt_rt.buffer @"grad:u"
// CHECK: mlt_rt.program @zero_gradients {
// CHECK-NEXT:   mlt_rt.launch "fill" [] -> [@"grad:u"] ints [4] floats [0.000000e+00]
// CHECK-NEXT:   mlt_rt.launch "fill" [] -> [@"grad:u2"] ints [6] floats [0.000000e+00]
// CHECK-NEXT: }
// CHECK: mlt_rt.step @step {
// CHECK-NEXT:   mlt_rt.call @zero_gradients
// CHECK-NEXT:   mlt_rt.call @micro_step microbatch 0 work [F0.0, B0.0]
// CHECK-NEXT:   mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
// CHECK-NEXT:   mlt_rt.call @optimizer_step
// CHECK-NEXT: }
module attributes {mlt_rt.microbatches = 2 : i64} {
  mlt_rt.buffer @"grad:u" gradient {parameter = "u"} : tensor<4xf32>
  mlt_rt.buffer @"grad:u2" gradient {parameter = "u2"} : tensor<2x3xf32>
  mlt_rt.program @micro_step {
  }
  mlt_rt.program @optimizer_step {
  }
}
