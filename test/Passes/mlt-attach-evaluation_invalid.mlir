// RUN: mlt-opt %s -split-input-file -mlt-attach-evaluation -verify-diagnostics

// Tests that a module without @forward is an error: there is no forward
// pass to evaluate.
// expected-error @+1 {{mlt-attach-evaluation: no function @forward to evaluate}}
module {
  func.func @other() {
    return
  }
}

// -----

// Tests that a module that already has @eval_forward is an error: the pass
// runs once.
// expected-error @+1 {{mlt-attach-evaluation: the module already has @eval_forward}}
module {
  func.func @forward(%x: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
    %loss = mlt.cross_entropy %x, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
  func.func @eval_forward() {
    return
  }
}

// -----

// Tests that a forward pass that neither returns a loss nor sends its
// output on is an error.
module {
  // expected-error @+1 {{mlt-attach-evaluation: @forward must return exactly the loss (or, as a pipeline stage before the last, nothing and send its output with mlt.send)}}
  func.func @forward(%x: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) {
    return
  }
}

// -----

// Tests that a loss that is not a float scalar is an error.
module {
  // expected-error @+1 {{mlt-attach-evaluation: the loss must be a float scalar tensor, got 'tensor<2x4x8xf32>'}}
  func.func @forward(%x: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) -> tensor<2x4x8xf32> {
    return %x : tensor<2x4x8xf32>
  }
}

// -----

// Tests that dynamic shapes are an error: the evaluation body is lowered
// to buffers of fixed sizes.
module {
  mlt.param @"model.norm.weight" : tensor<8xf32>
  func.func @forward(%x: tensor<?x4x8xf32>, %labels: tensor<?x4xi32>) -> tensor<f32> {
    %w = mlt.load @"model.norm.weight" : tensor<8xf32>
    // expected-error @+1 {{'mlt.rms_norm' op has a dynamic result type 'tensor<?x4x8xf32>'; run mlt-specialize-shapes before mlt-attach-evaluation}}
    %n = mlt.rms_norm %x, %w eps = 1.0e-05 : tensor<?x4x8xf32>, tensor<8xf32>
    %loss = mlt.cross_entropy %n, %labels : tensor<?x4x8xf32>, tensor<?x4xi32>
    return %loss : tensor<f32>
  }
}
