// RUN: mlt-opt %s -split-input-file -verify-diagnostics -mlt-schedule-pipeline="schedule=gpipe"

// Tests that a schedule that separates forward and backward passes needs
// to know where a body's backward pass starts.
// expected-error @+1 {{mlt-schedule-pipeline: the gpipe schedule separates forward and backward passes, but @micro_step does not say where its backward pass starts}}
module attributes {mlt_rt.microbatches = 2 : i64} {
  mlt_rt.program @micro_step {
  }
  mlt_rt.program @optimizer_step {
  }
}

// -----

// Tests that the first micro-batch's body must have micro_step's forward
// pass (its backward half reads the forward body's temporaries).
// expected-error @+1 {{mlt-schedule-pipeline: the forward pass of @micro_step_first is not @micro_step's}}
module attributes {mlt_rt.microbatches = 2 : i64} {
  mlt_rt.buffer @x input per_microbatch 2 : tensor<4xf32>
  mlt_rt.buffer @a temporary : tensor<4xf32>
  mlt_rt.buffer @b temporary : tensor<4xf32>
  mlt_rt.program @micro_step backward_start 1 {
    mlt_rt.launch "add" [@x, @x] -> [@a] ints [4]
    mlt_rt.launch "add" [@a, @a] -> [@a] ints [4]
  }
  mlt_rt.program @micro_step_first backward_start 1 {
    mlt_rt.launch "mul" [@x, @x] -> [@b] ints [4]
    mlt_rt.launch "add" [@b, @b] -> [@b] ints [4]
  }
  mlt_rt.program @optimizer_step {
  }
}
