// RUN: mlt-opt %s -mlt-plan-memory="alignment=100" -verify-diagnostics
// RUN: mlt-opt %s -mlt-plan-memory="alignment=0" -verify-diagnostics
// RUN: mlt-opt %s -mlt-plan-memory="alignment=-256" -verify-diagnostics

// Tests that an alignment that is not a power of two (100, 0, negative) is
// an error. The value the message prints is checked in
// pass-option-values.mlir.
// expected-error @+1 {{mlt-plan-memory: alignment must be a power of two, got}}
module {
  mlt_rt.buffer @x input : tensor<64xf32>
}
