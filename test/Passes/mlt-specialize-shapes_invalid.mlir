// RUN: mlt-opt %s -split-input-file -mlt-specialize-shapes="batch=4 seq-len=32" -verify-diagnostics

// Tests that a static batch size that contradicts `batch` is an error.
// expected-error @+1 {{argument #0 has static shape 'tensor<8x?xi32>', which contradicts batch=}}
func.func @forward(%tokens: tensor<8x?xi32>, %labels: tensor<?x?xi32>) {
  return
}

// -----

// Tests that a static sequence length that contradicts `seq-len` is an
// error, on whichever token argument holds it.
// expected-error @+1 {{argument #1 has static shape 'tensor<4x16xi32>', which contradicts batch=}}
func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<4x16xi32>) {
  return
}

// -----

// Tests that a module without the function to specialize is an error.
// expected-error @+1 {{mlt-specialize-shapes: no function @forward}}
module {
  func.func @model(%tokens: tensor<?x?xi32>) {
    return
  }
}

// -----

// Tests that the `function` option's function must exist too.
// expected-error @+1 {{mlt-specialize-shapes: no function @forward}}
module {
}
