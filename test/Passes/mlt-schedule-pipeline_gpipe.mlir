// RUN: mlt-opt %s -verify-diagnostics -mlt-schedule-pipeline="schedule=gpipe"

// Tests that a schedule that runs a forward without its backward after it
// (GPipe: every forward first) is refused until the model is split into
// separate forward and backward bodies, naming the first such item.
// expected-error @+1 {{mlt-schedule-pipeline: F0.0 of the gpipe schedule is not followed by its backward; separate forward and backward bodies come with pipeline stages}}
module attributes {mlt_rt.microbatches = 2 : i64} {
  mlt_rt.program @micro_step {
  }
  mlt_rt.program @optimizer_step {
  }
}
