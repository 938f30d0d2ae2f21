// RUN: mlt-opt %s -split-input-file -verify-diagnostics -mlt-schedule-overlap
// RUN: not mlt-opt %s -mlt-schedule-overlap="bucket-bytes=-1" 2>&1 | FileCheck %s --check-prefix=OPTION

// OPTION: mlt-schedule-overlap: bucket-bytes must be non-negative, got -1

// Tests that a module scheduled already is refused rather than scheduled
// twice.
// expected-error @+1 {{mlt-schedule-overlap: the module has @micro_step_last already}}
module {
  mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<16xf32>
  mlt_rt.program @micro_step {
  }
  mlt_rt.program @micro_step_last {
  }
  mlt_rt.program @optimizer_step {
    mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [16, 0]
  }
}

// -----

// Tests that the step must be there: the pass retargets its last call.
// expected-error @+1 {{mlt-schedule-overlap: expected the training step, mlt_rt.step @step (run mlt-schedule-pipeline first)}}
module {
  mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<16xf32>
  mlt_rt.program @micro_step {
  }
  mlt_rt.program @optimizer_step {
    mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [16, 0]
  }
}

// -----

// Tests that a last micro-batch whose body is not a micro-step is refused.
// expected-error @+1 {{mlt-schedule-overlap: the step's last micro-batch calls @other, expected @micro_step, @micro_step_first, @backward, @backward_first or their weight-gradient passes}}
module {
  mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<16xf32>
  mlt_rt.program @other {
  }
  mlt_rt.program @optimizer_step {
    mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [16, 0]
  }
  mlt_rt.step @step {
    mlt_rt.call @other microbatch 0 work [F0.0, B0.0]
    mlt_rt.call @optimizer_step
  }
}
