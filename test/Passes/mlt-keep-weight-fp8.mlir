// RUN: mlt-opt %s -split-input-file -mlt-keep-weight-fp8 | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-keep-weight-fp8="copies=both" | FileCheck %s --check-prefix=BOTH
// RUN: mlt-opt %s -split-input-file -mlt-keep-weight-fp8 -mlt-plan-memory | FileCheck %s --check-prefix=MEM
// RUN: not mlt-opt %s -split-input-file -mlt-keep-weight-fp8="copies=all" 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: error: mlt-keep-weight-fp8: copies must be transposed or both, got 'all'

// Tests a step of three micro-batches: micro_step_first (called first, once)
// keeps its amax of each weight for the step, and what its quantization of
// the weight writes: by default the transposed copy, which the backward's
// product reads (micro_step and micro_step_last then quantize the forward
// copy alone, from the kept amax); with copies=both the forward copy too
// (they quantize nothing). A quantization of the forward copy alone (@w3)
// is kept only with copies=both. The weight @w2, which micro_step_first
// writes after its amax (as a gather would), stays computed in every body;
// an activation's amax is never kept.
// CHECK-LABEL: module
// CHECK: mlt_rt.buffer @"a:w1.first" temporary step_kept : tensor<f32>
// CHECK-NOT: mlt_rt.buffer @"a:w1.mid"
// CHECK-NOT: mlt_rt.buffer @"a:w1.last"
// CHECK: mlt_rt.buffer @"a:w2.first" temporary : tensor<f32>
// CHECK: mlt_rt.buffer @s1.first temporary : tensor<f32>
// CHECK: mlt_rt.buffer @q1.first temporary : tensor<64x64xf8E4M3FN>
// CHECK: mlt_rt.buffer @qt1.first temporary step_kept : tensor<64x64xf8E4M3FN>
// CHECK: mlt_rt.buffer @s1.mid temporary : tensor<f32>
// CHECK: mlt_rt.buffer @q1.mid temporary : tensor<64x64xf8E4M3FN>
// CHECK-NOT: mlt_rt.buffer @qt1.mid
// CHECK-LABEL: mlt_rt.program @micro_step {
// CHECK-NEXT: mlt_rt.launch "amax" [@x] -> [@"a:x.mid"]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@w1, @"a:w1.first"] -> [@s1.mid, @q1.mid] ints [64, 64, 0]
// CHECK-NEXT: mlt_rt.launch "amax" [@w2] -> [@"a:w2.mid"]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@w2, @"a:w2.mid"]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@w3, @"a:w3.first"] -> [@s3.mid, @q3.mid] ints [64, 64, 0]
// CHECK-NEXT: mlt_rt.launch "matmul_fp8" [@g.mid, @gs.mid, @qt1.first, @s1.mid] -> [@y.mid]
// CHECK-NEXT: }
// CHECK-LABEL: mlt_rt.program @micro_step_first {
// CHECK-NEXT: mlt_rt.launch "amax" [@w1] -> [@"a:w1.first"]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@w1, @"a:w1.first"] -> [@s1.first, @q1.first, @qt1.first] ints [64, 64, 2]
// CHECK-NEXT: mlt_rt.launch "amax" [@w2] -> [@"a:w2.first"]
// CHECK-NEXT: mlt_rt.launch "cast" [@p2] -> [@w2]
// CHECK-LABEL: mlt_rt.program @micro_step_last {
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@w1, @"a:w1.first"] -> [@s1.last, @q1.last] ints [64, 64, 0]
// CHECK-NEXT: mlt_rt.launch "matmul_fp8" [@g.last, @gs.last, @qt1.first, @s1.last] -> [@y.last]
// CHECK-NEXT: }
// BOTH-LABEL: module
// BOTH-DAG: mlt_rt.buffer @"a:w1.first" temporary step_kept
// BOTH-DAG: mlt_rt.buffer @s1.first temporary step_kept
// BOTH-DAG: mlt_rt.buffer @q1.first temporary step_kept
// BOTH-DAG: mlt_rt.buffer @qt1.first temporary step_kept
// BOTH-DAG: mlt_rt.buffer @s3.first temporary step_kept
// BOTH-DAG: mlt_rt.buffer @q3.first temporary step_kept
// BOTH-NOT: mlt_rt.buffer @q1.mid
// BOTH-NOT: mlt_rt.buffer @qt1.last
// BOTH-LABEL: mlt_rt.program @micro_step {
// BOTH-NEXT: mlt_rt.launch "amax" [@x] -> [@"a:x.mid"]
// BOTH-NEXT: mlt_rt.launch "amax" [@w2] -> [@"a:w2.mid"]
// BOTH-NEXT: mlt_rt.launch "quantize_fp8" [@w2, @"a:w2.mid"]
// BOTH-NEXT: mlt_rt.launch "matmul_fp8" [@g.mid, @gs.mid, @qt1.first, @s1.first] -> [@y.mid]
// BOTH-NEXT: }
// BOTH-LABEL: mlt_rt.program @micro_step_last {
// BOTH-NEXT: mlt_rt.launch "matmul_fp8" [@g.last, @gs.last, @qt1.first, @s1.first] -> [@y.last]
// BOTH-NEXT: }
// The kept values lie apart from every body's temporaries (they are live
// from the first call to the last): after the largest body's region, where
// the bodies share their place.
// MEM: module attributes {mlt_rt.arena_bytes = 58368 : i64}
// MEM: mlt_rt.buffer @x temporary offset 40960 : tensor<64x64xbf16>
// MEM: mlt_rt.buffer @"a:w1.first" temporary step_kept offset 57856 : tensor<f32>
// MEM: mlt_rt.buffer @qt1.first temporary step_kept offset 53760
// MEM: mlt_rt.buffer @s1.mid temporary offset 53248
// MEM: mlt_rt.buffer @q1.mid temporary offset 40960
module {
  mlt_rt.buffer @w1 parameter_copy {parameter = "model.layers.0.w1"} : tensor<64x64xbf16>
  mlt_rt.buffer @w2 parameter_copy {parameter = "model.layers.0.w2"} : tensor<64x64xbf16>
  mlt_rt.buffer @w3 parameter_copy {parameter = "model.layers.0.w3"} : tensor<64x64xbf16>
  mlt_rt.buffer @p2 parameter {parameter = "model.layers.0.w2"} : tensor<64x64xf32>
  mlt_rt.buffer @x temporary : tensor<64x64xbf16>
  mlt_rt.buffer @g.first temporary : tensor<64x64xf8E5M2>
  mlt_rt.buffer @gs.first temporary : tensor<f32>
  mlt_rt.buffer @y.first temporary : tensor<64x64xbf16>
  mlt_rt.buffer @g.mid temporary : tensor<64x64xf8E5M2>
  mlt_rt.buffer @gs.mid temporary : tensor<f32>
  mlt_rt.buffer @y.mid temporary : tensor<64x64xbf16>
  mlt_rt.buffer @g.last temporary : tensor<64x64xf8E5M2>
  mlt_rt.buffer @gs.last temporary : tensor<f32>
  mlt_rt.buffer @y.last temporary : tensor<64x64xbf16>
  mlt_rt.buffer @"a:w1.first" temporary : tensor<f32>
  mlt_rt.buffer @"a:w1.mid" temporary : tensor<f32>
  mlt_rt.buffer @"a:w1.last" temporary : tensor<f32>
  mlt_rt.buffer @"a:w2.first" temporary : tensor<f32>
  mlt_rt.buffer @"a:w2.mid" temporary : tensor<f32>
  mlt_rt.buffer @"a:w3.first" temporary : tensor<f32>
  mlt_rt.buffer @"a:w3.mid" temporary : tensor<f32>
  mlt_rt.buffer @"a:x.mid" temporary : tensor<f32>
  mlt_rt.buffer @s1.first temporary : tensor<f32>
  mlt_rt.buffer @q1.first temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @qt1.first temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @s2.first temporary : tensor<f32>
  mlt_rt.buffer @q2.first temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @s3.first temporary : tensor<f32>
  mlt_rt.buffer @q3.first temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @s1.mid temporary : tensor<f32>
  mlt_rt.buffer @q1.mid temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @qt1.mid temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @s2.mid temporary : tensor<f32>
  mlt_rt.buffer @q2.mid temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @s3.mid temporary : tensor<f32>
  mlt_rt.buffer @q3.mid temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @s1.last temporary : tensor<f32>
  mlt_rt.buffer @q1.last temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @qt1.last temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.program @micro_step {
    mlt_rt.launch "amax" [@x] -> [@"a:x.mid"] ints [4096]
    mlt_rt.launch "amax" [@w1] -> [@"a:w1.mid"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w1, @"a:w1.mid"] -> [@s1.mid, @q1.mid, @qt1.mid] ints [64, 64, 2]
    mlt_rt.launch "amax" [@w2] -> [@"a:w2.mid"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w2, @"a:w2.mid"] -> [@s2.mid, @q2.mid] ints [64, 64, 0]
    mlt_rt.launch "amax" [@w3] -> [@"a:w3.mid"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w3, @"a:w3.mid"] -> [@s3.mid, @q3.mid] ints [64, 64, 0]
    mlt_rt.launch "matmul_fp8" [@g.mid, @gs.mid, @qt1.mid, @s1.mid] -> [@y.mid] ints [64, 64, 64, 0, 0]
  }
  mlt_rt.program @micro_step_first {
    mlt_rt.launch "amax" [@w1] -> [@"a:w1.first"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w1, @"a:w1.first"] -> [@s1.first, @q1.first, @qt1.first] ints [64, 64, 2]
    mlt_rt.launch "amax" [@w2] -> [@"a:w2.first"] ints [4096]
    mlt_rt.launch "cast" [@p2] -> [@w2] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w2, @"a:w2.first"] -> [@s2.first, @q2.first] ints [64, 64, 0]
    mlt_rt.launch "amax" [@w3] -> [@"a:w3.first"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w3, @"a:w3.first"] -> [@s3.first, @q3.first] ints [64, 64, 0]
    mlt_rt.launch "matmul_fp8" [@g.first, @gs.first, @qt1.first, @s1.first] -> [@y.first] ints [64, 64, 64, 0, 0]
  }
  mlt_rt.program @micro_step_last {
    mlt_rt.launch "amax" [@w1] -> [@"a:w1.last"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w1, @"a:w1.last"] -> [@s1.last, @q1.last, @qt1.last] ints [64, 64, 2]
    mlt_rt.launch "matmul_fp8" [@g.last, @gs.last, @qt1.last, @s1.last] -> [@y.last] ints [64, 64, 64, 0, 0]
  }
  mlt_rt.step @step {
    mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
    mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
    mlt_rt.call @micro_step_last microbatch 2 work [F2.0, B2.0]
  }
}

// -----

// Tests a reader whose quantization's copy another launch writes over:
// that quantization stays, reading the kept amax.
// CHECK-LABEL: module
// CHECK-LABEL: mlt_rt.program @micro_step {
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@w1, @a1] -> [@s2, @q2, @qt2] ints [64, 64, 2]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@x, @a1] -> [@s3, @qt2]
// CHECK-NEXT: }
module {
  mlt_rt.buffer @w1 parameter_copy {parameter = "model.layers.0.w1"} : tensor<64x64xbf16>
  mlt_rt.buffer @a1 temporary : tensor<f32>
  mlt_rt.buffer @a2 temporary : tensor<f32>
  mlt_rt.buffer @s1 temporary : tensor<f32>
  mlt_rt.buffer @q1 temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @qt1 temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @s2 temporary : tensor<f32>
  mlt_rt.buffer @q2 temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @qt2 temporary : tensor<64x64xf8E4M3FN>
  mlt_rt.buffer @x temporary : tensor<64x64xbf16>
  mlt_rt.buffer @s3 temporary : tensor<f32>
  mlt_rt.program @micro_step_first {
    mlt_rt.launch "amax" [@w1] -> [@a1] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w1, @a1] -> [@s1, @q1, @qt1] ints [64, 64, 2]
  }
  mlt_rt.program @micro_step {
    mlt_rt.launch "amax" [@w1] -> [@a2] ints [4096]
    mlt_rt.launch "quantize_fp8" [@w1, @a2] -> [@s2, @q2, @qt2] ints [64, 64, 2]
    mlt_rt.launch "quantize_fp8" [@x, @a2] -> [@s3, @qt2] ints [64, 64, 0]
  }
  mlt_rt.step @step {
    mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
    mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
  }
}

// -----

// Tests two weights in one flat bucket (ZeRO's parameter copies are views of
// it, sharing its base): each reader's amax and quantization is replaced by
// its own weight's; the bucket's gather, on a side stream before the
// amaxes in the first body (the first waits for it, as ZeRO's overlapped
// gathers have it), keeps nothing from being kept.
// CHECK-LABEL: module
// CHECK-LABEL: mlt_rt.program @micro_step {
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@wa, @aa1] -> [@sa2, @qa2] ints [8, 8, 0]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@wb, @ab1] -> [@sb2, @qb2] ints [8, 8, 0]
// CHECK-NEXT: }
module {
  mlt_rt.buffer @bucket parameter_copy {bucket} : tensor<128xbf16>
  mlt_rt.buffer @slice parameter_copy {shard = "dp", view = @bucket} : tensor<64xbf16>
  mlt_rt.buffer @wa parameter_copy {parameter = "model.layers.0.wa", view = @bucket, view_offset = 0 : i64} : tensor<8x8xbf16>
  mlt_rt.buffer @wb parameter_copy {parameter = "model.layers.0.wb", view = @bucket, view_offset = 64 : i64} : tensor<8x8xbf16>
  mlt_rt.buffer @aa1 temporary : tensor<f32>
  mlt_rt.buffer @ab1 temporary : tensor<f32>
  mlt_rt.buffer @aa2 temporary : tensor<f32>
  mlt_rt.buffer @ab2 temporary : tensor<f32>
  mlt_rt.buffer @sa1 temporary : tensor<f32>
  mlt_rt.buffer @qa1 temporary : tensor<8x8xf8E4M3FN>
  mlt_rt.buffer @qta1 temporary : tensor<8x8xf8E4M3FN>
  mlt_rt.buffer @sb1 temporary : tensor<f32>
  mlt_rt.buffer @qb1 temporary : tensor<8x8xf8E4M3FN>
  mlt_rt.buffer @qtb1 temporary : tensor<8x8xf8E4M3FN>
  mlt_rt.buffer @sa2 temporary : tensor<f32>
  mlt_rt.buffer @qa2 temporary : tensor<8x8xf8E4M3FN>
  mlt_rt.buffer @qta2 temporary : tensor<8x8xf8E4M3FN>
  mlt_rt.buffer @sb2 temporary : tensor<f32>
  mlt_rt.buffer @qb2 temporary : tensor<8x8xf8E4M3FN>
  mlt_rt.buffer @qtb2 temporary : tensor<8x8xf8E4M3FN>
  mlt_rt.program @micro_step_first {
    mlt_rt.launch "all_gather" [@slice] -> [@bucket] ints [64, 0] stream 2 token 0
    mlt_rt.launch "amax" [@wa] -> [@aa1] ints [64] waits [0]
    mlt_rt.launch "quantize_fp8" [@wa, @aa1] -> [@sa1, @qa1, @qta1] ints [8, 8, 2]
    mlt_rt.launch "amax" [@wb] -> [@ab1] ints [64]
    mlt_rt.launch "quantize_fp8" [@wb, @ab1] -> [@sb1, @qb1, @qtb1] ints [8, 8, 2]
  }
  mlt_rt.program @micro_step {
    mlt_rt.launch "amax" [@wa] -> [@aa2] ints [64]
    mlt_rt.launch "quantize_fp8" [@wa, @aa2] -> [@sa2, @qa2, @qta2] ints [8, 8, 2]
    mlt_rt.launch "amax" [@wb] -> [@ab2] ints [64]
    mlt_rt.launch "quantize_fp8" [@wb, @ab2] -> [@sb2, @qb2, @qtb2] ints [8, 8, 2]
  }
  mlt_rt.step @step {
    mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
    mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
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
