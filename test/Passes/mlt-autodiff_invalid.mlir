// RUN: mlt-opt %s -split-input-file -mlt-autodiff -verify-diagnostics

// Tests that dynamic shapes are rejected, pointing at mlt-specialize-shapes.
func.func @forward(%tokens: tensor<?x?xi32>, %table: tensor<16x8xf32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
  // expected-error @+1 {{'mlt.embedding' op has a dynamic result type 'tensor<?x?x8xf32>'; run mlt-specialize-shapes before mlt-autodiff}}
  %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<16x8xf32>
  %loss = mlt.cross_entropy %h, %labels : tensor<?x?x8xf32>, tensor<?x?xi32>
  return %loss : tensor<f32>
}

// -----

// Tests that dynamic shapes inside the layers' repeat are rejected too.
func.func @forward(%x: tensor<2x?x8xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
  %r = mlt.repeat %layer = 0 to 1 iter_args(%h = %x) -> (tensor<2x?x8xf32>) {
    // expected-error @+1 {{'mlt.silu' op has a dynamic result type 'tensor<2x?x8xf32>'; run mlt-specialize-shapes before mlt-autodiff}}
    %s = mlt.silu %h : tensor<2x?x8xf32>
    mlt.yield %s : tensor<2x?x8xf32>
  }
  %c = mlt.reshape %r : tensor<2x?x8xf32> -> tensor<2x?x8xf32>
  %loss = mlt.cross_entropy %c, %labels : tensor<2x?x8xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}

// -----

// Tests that an op on the loss path without a gradient rule is an error
// naming it.
func.func @forward(%x: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
  // expected-error @+1 {{'arith.negf' op has no gradient rule (GradientOpInterface), but the loss depends on its result}}
  %n = arith.negf %x : tensor<2x4x8xf32>
  %loss = mlt.cross_entropy %n, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}

// -----

// Tests that an mlt op without a gradient rule (a training op) on the loss
// path is an error too.
func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<f32> {
  // expected-error @+1 {{'mlt.sum_squares' op has no gradient rule (GradientOpInterface), but the loss depends on its result}}
  %s = mlt.sum_squares %x : tensor<2x4x8xf32>
  return %s : tensor<f32>
}

// -----

// Tests that a matmul whose transposed batched lhs meets a shared rhs has no
// gradient rule.
func.func @forward(%x: tensor<2x8x4xf32>, %w: tensor<8x3xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
  // expected-error @+1 {{'mlt.matmul' op has no gradient rule for a transposed batched lhs against a shared rhs}}
  %m = mlt.matmul %x, %w transpose_lhs : tensor<2x8x4xf32>, tensor<8x3xf32>
  %loss = mlt.cross_entropy %m, %labels : tensor<2x4x3xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}

// -----

// Tests that a module without the function to differentiate is an error.
// expected-error @+1 {{mlt-autodiff: no function @forward to differentiate}}
module {
  func.func @loss(%x: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
    %loss = mlt.cross_entropy %x, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that the loss must be a scalar.
// expected-error @+1 {{mlt-autodiff: the loss must be a float scalar tensor, got 'tensor<2x4xf32>'}}
func.func @forward(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %s = mlt.silu %x : tensor<2x4xf32>
  return %s : tensor<2x4xf32>
}

// -----

// Tests that the loss must be a float.
// expected-error @+1 {{mlt-autodiff: the loss must be a float scalar tensor, got 'tensor<i32>'}}
func.func @forward(%n: tensor<i32>) -> tensor<i32> {
  return %n : tensor<i32>
}

// -----

// Tests that the function must return the loss alone. (The message names
// the function by its new name; see mlt-autodiff_function-name.mlir.)
// expected-error @+1 {{must return exactly the loss}}
func.func @forward(%x: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4x8xf32>) {
  %loss = mlt.cross_entropy %x, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
  return %loss, %x : tensor<f32>, tensor<2x4x8xf32>
}

// -----

// Tests that a module that already has @micro_step is an error: the pass
// runs once.
// expected-error @+1 {{mlt-autodiff: the module already has @micro_step}}
module {
  func.func @forward(%x: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
    %loss = mlt.cross_entropy %x, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
  func.func @micro_step() {
    return
  }
}
