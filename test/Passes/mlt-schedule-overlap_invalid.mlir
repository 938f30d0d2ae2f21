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
