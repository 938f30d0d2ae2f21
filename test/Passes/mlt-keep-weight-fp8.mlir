// RUN: mlt-opt %s -split-input-file -mlt-keep-weight-amax | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-keep-weight-amax -mlt-plan-memory | FileCheck %s --check-prefix=MEM

// Tests a step of three micro-batches: micro_step_first (called first, once)
// keeps its amax of each weight for the step, and micro_step and
// micro_step_last read it and launch none of their own. The weight @w2,
// which micro_step_first writes after its amax (as a gather would), stays
// computed in every body; an activation's amax is never kept.
// CHECK-LABEL: module
// CHECK: mlt_rt.buffer @"a:w1.first" temporary step_kept : tensor<f32>
// CHECK-NOT: mlt_rt.buffer @"a:w1.mid"
// CHECK-NOT: mlt_rt.buffer @"a:w1.last"
// CHECK: mlt_rt.buffer @"a:w2.first" temporary : tensor<f32>
// CHECK-LABEL: mlt_rt.program @micro_step {
// CHECK-NEXT: mlt_rt.launch "amax" [@x] -> [@"a:x.mid"]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@w1, @"a:w1.first"] -> [@s1.mid, @q1.mid]
// CHECK-NEXT: mlt_rt.launch "amax" [@w2] -> [@"a:w2.mid"]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@w2, @"a:w2.mid"]
// CHECK-NEXT: }
// CHECK-LABEL: mlt_rt.program @micro_step_first {
// CHECK-NEXT: mlt_rt.launch "amax" [@w1] -> [@"a:w1.first"]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@w1, @"a:w1.first"]
// CHECK-NEXT: mlt_rt.launch "amax" [@w2] -> [@"a:w2.first"]
// CHECK-NEXT: mlt_rt.launch "cast" [@p2] -> [@w2]
// CHECK-LABEL: mlt_rt.program @micro_step_last {
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@w1, @"a:w1.first"] -> [@s1.last, @q1.last]
// CHECK-NEXT: }
// The kept amax lies apart from every body's temporaries (it is live from
// the first call to the last): after the largest body's region (that of
// micro_step, 32768 to 41216), where the bodies share their place.
// MEM: module attributes {mlt_rt.arena_bytes = 41472 : i64}
// MEM: mlt_rt.buffer @x temporary offset 32768 : tensor<64x64xbf16>
// MEM: mlt_rt.buffer @"a:w1.first" temporary step_kept offset 41216 : tensor<f32>
// MEM: mlt_rt.buffer @"a:x.mid" temporary offset 40960 : tensor<f32>
// MEM: mlt_rt.buffer @q1.first temporary offset 32768
// MEM: mlt_rt.buffer @q1.mid temporary offset 32768
module {
  mlt_rt.buffer @w1 parameter_copy {parameter = "model.layers.0.w1"} : tensor<64x64xbf16>
  mlt_rt.buffer @w2 parameter_copy {parameter = "model.layers.0.w2"} : tensor<64x64xbf16>
  mlt_rt.buffer @p2 parameter {parameter = "model.layers.0.w2"} : tensor<64x64xf32>
  mlt_rt.buffer @x temporary : tensor<64x64xbf16>
  mlt_rt.buffer @"a:w1.first" temporary : tensor<f32>
  mlt_rt.buffer @"a:w1.mid" temporary : tensor<f32>
  mlt_rt.buffer @"a:w1.last" temporary : tensor<f32>
  mlt_rt.buffer @"a:w2.first" temporary : tensor<f32>
  mlt_rt.buffer @"a:w2.mid" temporary : tensor<f32>
  mlt_rt.buffer @"a:x.mid" temporary : tensor<f32>
  mlt_rt.buffer @s1.first temporary : tensor<f32>
  mlt_rt.buffer @q1.first temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @s2.first temporary : tensor<f32>
  mlt_rt.buffer @q2.first temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @s1.mid temporary : tensor<f32>
  mlt_rt.buffer @q1.mid temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @s2.mid temporary : tensor<f32>
  mlt_rt.buffer @q2.mid temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @s1.last temporary : tensor<f32>
  mlt_rt.buffer @q1.last temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.program @micro_step {
    mlt_rt.launch "amax" [@x] -> [@"a:x.mid"] ints [4096]
    mlt_rt.launch "amax" [@w1] -> [@"a:w1.mid"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w1, @"a:w1.mid"] -> [@s1.mid, @q1.mid] ints [64, 64, 0]
    mlt_rt.launch "amax" [@w2] -> [@"a:w2.mid"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w2, @"a:w2.mid"] -> [@s2.mid, @q2.mid] ints [64, 64, 0]
  }
  mlt_rt.program @micro_step_first {
    mlt_rt.launch "amax" [@w1] -> [@"a:w1.first"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w1, @"a:w1.first"] -> [@s1.first, @q1.first] ints [64, 64, 0]
    mlt_rt.launch "amax" [@w2] -> [@"a:w2.first"] ints [4096]
    mlt_rt.launch "cast" [@p2] -> [@w2] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w2, @"a:w2.first"] -> [@s2.first, @q2.first] ints [64, 64, 0]
  }
  mlt_rt.program @micro_step_last {
    mlt_rt.launch "amax" [@w1] -> [@"a:w1.last"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w1, @"a:w1.last"] -> [@s1.last, @q1.last] ints [64, 64, 0]
  }
  mlt_rt.step @step {
    mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
    mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
    mlt_rt.call @micro_step_last microbatch 2 work [F2.0, B2.0]
  }
}

// -----

// Tests a body the step calls for every micro-batch (a pipeline stage's
// forward): nothing is kept.
// CHECK-LABEL: module
// CHECK-NOT: step_kept
// CHECK: mlt_rt.program @forward {
// CHECK-NEXT: mlt_rt.launch "amax" [@w1]
// CHECK: mlt_rt.program @backward {
// CHECK-NEXT: mlt_rt.launch "amax" [@w1]
module {
  mlt_rt.buffer @w1 parameter_copy {parameter = "model.layers.0.w1"} : tensor<64x64xbf16>
  mlt_rt.buffer @a1 temporary : tensor<f32>
  mlt_rt.buffer @a2 temporary : tensor<f32>
  mlt_rt.buffer @s1 temporary : tensor<f32>
  mlt_rt.buffer @q1 temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @s2 temporary : tensor<f32>
  mlt_rt.buffer @q2 temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.program @forward {
    mlt_rt.launch "amax" [@w1] -> [@a1] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w1, @a1] -> [@s1, @q1] ints [64, 64, 0]
  }
  mlt_rt.program @backward {
    mlt_rt.launch "amax" [@w1] -> [@a2] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w1, @a2] -> [@s2, @q2] ints [64, 64, 0]
  }
  mlt_rt.step @step {
    mlt_rt.call @forward microbatch 0 work [F0.0]
    mlt_rt.call @forward microbatch 1 work [F1.0]
    mlt_rt.call @backward microbatch 0 work [B0.0]
    mlt_rt.call @backward microbatch 1 work [B1.0]
  }
}
