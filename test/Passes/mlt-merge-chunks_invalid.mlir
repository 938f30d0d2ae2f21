// RUN: mlt-opt %s -split-input-file -verify-diagnostics -mlt-merge-chunks

// Tests that two chunks of one stage may not declare one buffer
// differently.
module attributes {mlt.mesh = #mlt.mesh<pp = 2>} {
  module @stage0_chunk0 attributes {mlt.chunk = 0 : i64, mlt.mesh = #mlt.mesh<pp = 2>, mlt.stage = 0 : i64} {
    mlt_rt.buffer @grad_norm output : tensor<f32>
  }
  module @stage0_chunk1 attributes {mlt.chunk = 1 : i64, mlt.mesh = #mlt.mesh<pp = 2>, mlt.stage = 0 : i64} {
    // expected-error @+1 {{mlt-merge-chunks: chunks of stage 0 declare buffer @grad_norm differently}}
    mlt_rt.buffer @grad_norm output : tensor<2xf32>
  }
}

// -----

// Tests that a stage needs its chunks from 0 on.
module attributes {mlt.mesh = #mlt.mesh<pp = 2>} {
  // expected-error @+1 {{mlt-merge-chunks: stage 0 has chunk 1 but no chunk 0}}
  module @stage0_chunk1 attributes {mlt.chunk = 1 : i64, mlt.mesh = #mlt.mesh<pp = 2>, mlt.stage = 0 : i64} {
  }
}

// -----

// Tests that a chunk's optimizer step must end its gradient norm as
// mlt-spmdize leaves a pipeline stage's: an all-reduce over pp, the norm,
// the clipping coefficient.
module attributes {mlt.mesh = #mlt.mesh<pp = 2>} {
  module @stage0_chunk0 attributes {mlt.chunk = 0 : i64, mlt.mesh = #mlt.mesh<pp = 2>, mlt.stage = 0 : i64} {
    mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<4xf32>
    mlt_rt.buffer @grad_norm output : tensor<f32>
    mlt_rt.buffer @t1 temporary : tensor<f32>
    // expected-error @+1 {{mlt-merge-chunks: @optimizer_step has no gradient norm between a reduction and a clipping coefficient}}
    mlt_rt.program @optimizer_step {
      mlt_rt.launch "sum_squares" [@"grad:a"] -> [@t1] ints [4]
      mlt_rt.launch "global_norm" [@t1] -> [@grad_norm]
    }
  }
}
