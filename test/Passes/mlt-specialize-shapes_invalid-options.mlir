// RUN: mlt-opt %s -mlt-specialize-shapes="batch=0 seq-len=32" -verify-diagnostics
// RUN: mlt-opt %s -mlt-specialize-shapes="batch=-2 seq-len=32" -verify-diagnostics
// RUN: mlt-opt %s -mlt-specialize-shapes="batch=4 seq-len=0" -verify-diagnostics
// RUN: mlt-opt %s -mlt-specialize-shapes -verify-diagnostics

// Tests that a batch or sequence length that is not positive (zero, negative,
// or the option left out) is an error. The sizes the message prints are
// checked in mlt-specialize-shapes_option-values.mlir.
// expected-error @+1 {{mlt-specialize-shapes needs positive batch and seq-len, got batch=}}
func.func @forward(%tokens: tensor<?x?xi32>) {
  return
}
