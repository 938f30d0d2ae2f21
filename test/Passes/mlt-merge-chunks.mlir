// RUN: mlt-opt %s -split-input-file -mlt-merge-chunks | FileCheck %s

// Tests that a stage's lowered chunk modules (stage 0 of pp 2: chunks 0
// and 1) become one module @stage0 with `mlt.chunks = 2`: each chunk's
// bodies and temporaries renamed `c<chunk>.`, the buffers of one name
// (the hyperparameters, the step's outputs) kept once, the parameters of
// either chunk kept; one optimizer step: chunk 0's sums of squares, then
// chunk 1's, their sum, one all-reduce over pp, the norm, the coefficient,
// and both chunks' updates reading that coefficient; the other stage's
// module is left alone.
// CHECK-LABEL: module @stage0 attributes {mlt.chunks = 2 : i64, mlt.mesh = #mlt.mesh<pp = 2>, mlt.stage = 0 : i64, mlt_rt.microbatches = 2 : i64}
// CHECK-NEXT: mlt_rt.buffer @"param:a" parameter
// CHECK-NEXT: mlt_rt.buffer @"grad:a" gradient
// CHECK-NEXT: mlt_rt.buffer @grad_norm output
// CHECK-NEXT: mlt_rt.buffer @hyper.max_grad_norm input
// CHECK-NEXT: mlt_rt.buffer @c0.t0 temporary
// CHECK-NEXT: mlt_rt.buffer @c0.t1 temporary
// CHECK-NEXT: mlt_rt.buffer @c0.t2 temporary
// CHECK-NEXT: mlt_rt.buffer @c0.t3 temporary
// CHECK-NEXT: mlt_rt.buffer @"param:b" parameter
// CHECK-NEXT: mlt_rt.buffer @"grad:b" gradient
// CHECK-NEXT: mlt_rt.buffer @c1.t0 temporary
// CHECK-NEXT: mlt_rt.buffer @c1.t1 temporary
// CHECK-NEXT: mlt_rt.buffer @norm_sum.c1 temporary : tensor<f32>
// CHECK-NEXT: mlt_rt.program @c0.micro_step backward_start 1 {
// CHECK-NEXT: mlt_rt.launch "cast" [@"param:a"] -> [@c0.t0] ints [4]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@c0.t0] -> [@"grad:a"] ints [4]
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.program @c1.micro_step backward_start 1 {
// CHECK-NEXT: mlt_rt.launch "cast" [@"param:b"] -> [@c1.t0] ints [4]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@c1.t0] -> [@"grad:b"] ints [4]
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.program @optimizer_step {
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@"grad:a"] -> [@c0.t1] ints [4]
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@"grad:b"] -> [@c1.t1] ints [4]
// CHECK-NEXT: mlt_rt.launch "add" [@c0.t1, @c1.t1] -> [@norm_sum.c1] ints [1]
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@norm_sum.c1] -> [@c0.t2] ints [1, 0]
// CHECK-NEXT: mlt_rt.launch "global_norm" [@c0.t2] -> [@grad_norm]
// CHECK-NEXT: mlt_rt.launch "clip_coefficient" [@grad_norm, @hyper.max_grad_norm] -> [@c0.t3]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@c0.t3] -> [@"grad:a"] ints [1]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@c0.t3] -> [@"grad:b"] ints [1]
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: module @stage1_other
module attributes {mlt.mesh = #mlt.mesh<pp = 2>} {
  module @stage0_chunk0 attributes {mlt.chunk = 0 : i64, mlt.mesh = #mlt.mesh<pp = 2>, mlt.stage = 0 : i64, mlt_rt.microbatches = 2 : i64} {
    mlt_rt.buffer @"param:a" parameter {parameter = "a"} : tensor<4xf32>
    mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<4xf32>
    mlt_rt.buffer @grad_norm output : tensor<f32>
    mlt_rt.buffer @hyper.max_grad_norm input : tensor<f32>
    mlt_rt.buffer @t0 temporary : tensor<4xf32>
    mlt_rt.buffer @t1 temporary : tensor<f32>
    mlt_rt.buffer @t2 temporary : tensor<f32>
    mlt_rt.buffer @t3 temporary : tensor<f32>
    mlt_rt.program @micro_step backward_start 1 {
      mlt_rt.launch "cast" [@"param:a"] -> [@t0] ints [4]
      mlt_rt.launch "accumulate" [@t0] -> [@"grad:a"] ints [4]
    }
    mlt_rt.program @optimizer_step {
      mlt_rt.launch "sum_squares" [@"grad:a"] -> [@t1] ints [4]
      mlt_rt.launch "all_reduce_sum" [@t1] -> [@t2] ints [1, 0]
      mlt_rt.launch "global_norm" [@t2] -> [@grad_norm]
      mlt_rt.launch "clip_coefficient" [@grad_norm, @hyper.max_grad_norm] -> [@t3]
      mlt_rt.launch "accumulate" [@t3] -> [@"grad:a"] ints [1]
    }
  }
  module @stage0_chunk1 attributes {mlt.chunk = 1 : i64, mlt.mesh = #mlt.mesh<pp = 2>, mlt.stage = 0 : i64, mlt_rt.microbatches = 2 : i64} {
    mlt_rt.buffer @"param:b" parameter {parameter = "b"} : tensor<4xf32>
    mlt_rt.buffer @"grad:b" gradient {parameter = "b"} : tensor<4xf32>
    mlt_rt.buffer @grad_norm output : tensor<f32>
    mlt_rt.buffer @hyper.max_grad_norm input : tensor<f32>
    mlt_rt.buffer @t0 temporary : tensor<4xf32>
    mlt_rt.buffer @t1 temporary : tensor<f32>
    mlt_rt.buffer @t2 temporary : tensor<f32>
    mlt_rt.buffer @t3 temporary : tensor<f32>
    mlt_rt.program @micro_step backward_start 1 {
      mlt_rt.launch "cast" [@"param:b"] -> [@t0] ints [4]
      mlt_rt.launch "accumulate" [@t0] -> [@"grad:b"] ints [4]
    }
    mlt_rt.program @optimizer_step {
      mlt_rt.launch "sum_squares" [@"grad:b"] -> [@t1] ints [4]
      mlt_rt.launch "all_reduce_sum" [@t1] -> [@t2] ints [1, 0]
      mlt_rt.launch "global_norm" [@t2] -> [@grad_norm]
      mlt_rt.launch "clip_coefficient" [@grad_norm, @hyper.max_grad_norm] -> [@t3]
      mlt_rt.launch "accumulate" [@t3] -> [@"grad:b"] ints [1]
    }
  }
  module @stage1_other attributes {mlt.mesh = #mlt.mesh<pp = 2>, mlt.stage = 1 : i64} {
  }
}
