// RUN: mlt-opt %s -split-input-file -verify-diagnostics

// Tests that mlt.repeat needs one type per iter_arg: too few types.
func.func @too_few_types(%a: tensor<8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{expected 2 types for iter_args, got 1}}
  %r:2 = mlt.repeat %layer = 0 to 2 iter_args(%x = %a, %y = %b) -> (tensor<8xf32>) {
    mlt.yield %x, %y : tensor<8xf32>, tensor<8xf32>
  }
  return
}

// -----

// Tests that mlt.repeat needs one type per iter_arg: too many types.
func.func @too_many_types(%a: tensor<8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{expected 2 types for iter_args, got 3}}
  %r:2 = mlt.repeat %layer = 0 to 2 iter_args(%x = %a, %y = %b) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
    mlt.yield %x, %y : tensor<8xf32>, tensor<8xf32>
  }
  return
}

// -----

// Tests that mlt.repeat needs `to` between its bounds.
func.func @missing_to() {
  // expected-error @+1 {{expected 'to'}}
  mlt.repeat %layer = 0 2 {
  }
  return
}

// -----

// Tests that mlt.repeat needs `=` between the layer index and the lower bound.
func.func @missing_equal() {
  // expected-error @+1 {{expected '='}}
  mlt.repeat %layer 0 to 2 {
  }
  return
}

// -----

// Tests that mlt.repeat's bounds are integer literals, not SSA values.
func.func @ssa_bound(%n: index) {
  // expected-error @+1 {{expected integer value}}
  mlt.repeat %layer = 0 to %n {
  }
  return
}

// -----

// Tests that mlt.repeat needs the carried types after its iter_args.
func.func @missing_arrow(%a: tensor<8xf32>) {
  // expected-error @+1 {{expected '->'}}
  %r = mlt.repeat %layer = 0 to 2 iter_args(%x = %a) {
    mlt.yield %x : tensor<8xf32>
  }
  return
}

// -----

// Tests that an iter_arg's initial value must have the carried type.
func.func @init_type(%a: tensor<8xf32>) {
  // expected-error @+2 {{use of value '%a' expects different type than prior uses: 'tensor<8xbf16>' vs 'tensor<8xf32>'}}
  // expected-note @-2 {{prior use here}}
  %r = mlt.repeat %layer = 0 to 2 iter_args(%x = %a) -> (tensor<8xbf16>) {
    mlt.yield %x : tensor<8xbf16>
  }
  return
}
