// RUN: mlt-opt %s -split-input-file -mlt-attach-optimizer -verify-diagnostics

// Tests that a module without parameters is an error: there is nothing to
// optimize.
// expected-error @+1 {{mlt-attach-optimizer: the module declares no parameters (mlt.param)}}
module {
  func.func @forward() {
    return
  }
}

// -----

// Tests that a module that already has @optimizer_step is an error: the pass
// runs once.
// expected-error @+1 {{mlt-attach-optimizer: the module already has @optimizer_step}}
module {
  mlt.param @"model.norm.weight" : tensor<8xf32>
  func.func @optimizer_step() -> tensor<f32> {
    %n = mlt.hyperparameter "lr" : tensor<f32>
    return %n : tensor<f32>
  }
}
