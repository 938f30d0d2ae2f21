// RUN: mlt-opt %s -split-input-file -verify-diagnostics -mlt-schedule-pipeline
// RUN: not mlt-opt %s -split-input-file -mlt-schedule-pipeline="schedule=1f2b" 2>&1 | FileCheck %s --check-prefix=OPTION

// OPTION: mlt-schedule-pipeline: unknown schedule '1f2b' (1f1b, gpipe, zb-h1 or interleaved)

// Tests that the bodies must be there (the pass runs after the lowering).
// expected-error @+1 {{mlt-schedule-pipeline: needs the program @optimizer_step (run mlt-lower-to-runtime first)}}
module {
  mlt_rt.program @micro_step {
  }
}

// -----

// Tests that a module is scheduled once.
// expected-error @+1 {{mlt-schedule-pipeline: the module has a @step already}}
module {
  mlt_rt.program @micro_step {
  }
  mlt_rt.program @optimizer_step {
  }
  mlt_rt.step @step {
    mlt_rt.call @micro_step microbatch 0 work [F0.0, B0.0]
  }
}

