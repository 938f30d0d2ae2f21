// RUN: mlt-opt %s -split-input-file -mlt-partition-optimizer="zero=1 bucket-bytes=1000" | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-partition-optimizer="zero=0" | FileCheck %s --check-prefix=ZERO0
// RUN: mlt-opt %s -split-input-file -mlt-partition-optimizer="zero=2 bucket-bytes=1000" | FileCheck %s --check-prefix=ZERO2
// RUN: mlt-opt %s -split-input-file -mlt-partition-optimizer="zero=2 bucket-bytes=1000" -mlt-schedule-overlap | FileCheck %s --check-prefix=OVERLAP2
// RUN: mlt-opt %s -split-input-file -mlt-partition-optimizer="zero=1 bucket-bytes=1000" | FileCheck %s --check-prefix=CP

// Tests ZeRO-1 over dp = 3 on sizes that 3 does not divide. The gradients
// become views of flat buckets in the order the backward pass finishes them
// (v, then w, then a); v and w (weight decay) share a bucket, closed once it
// holds 1000 bytes; a (no decay) is a group of its own. Members start at
// multiples of 128 elements (v at 0, w at 128, after v's 63) and each
// bucket is padded to a multiple of 3 x 128 (v and w end at 448: 768; a at
// 100: 384), so every rank's slice is 256 (128) elements. The parameters
// (fp32: what the forward pass reads) are views of buckets laid out alike;
// the rank's slices: the gradient's and the parameters' as views (shard
// "dp"), the moments apart (layout); all own their ranges (the parameters'
// slice is the master weights' here). The per-parameter moments go.
// CHECK-LABEL: module attributes {mlt.mesh = #mlt.mesh<dp = 3>}
// CHECK-NEXT: mlt_rt.buffer @"param:a" parameter {parameter = "a", view = @param_bucket.1, view_offset = 0 : i64} : tensor<100xf32>
// CHECK-NEXT: mlt_rt.buffer @"grad:a" gradient {parameter = "a", view = @grad_bucket.1, view_offset = 0 : i64} : tensor<100xf32>
// CHECK-NEXT: mlt_rt.buffer @"param:w" parameter {decay, parameter = "w", view = @param_bucket.0, view_offset = 128 : i64} : tensor<16x20xf32>
// CHECK-NEXT: mlt_rt.buffer @"grad:w" gradient {parameter = "w", view = @grad_bucket.0, view_offset = 128 : i64} : tensor<16x20xf32>
// CHECK-NEXT: mlt_rt.buffer @"param:v" parameter {decay, parameter = "v", view = @param_bucket.0, view_offset = 0 : i64} : tensor<7x9xf32>
// CHECK-NEXT: mlt_rt.buffer @"grad:v" gradient {parameter = "v", view = @grad_bucket.0, view_offset = 0 : i64} : tensor<7x9xf32>
// CHECK-NOT: exp_avg:
// CHECK: mlt_rt.buffer @grad_bucket.0 gradient {bucket} : tensor<768xf32>
// CHECK-NEXT: mlt_rt.buffer @param_bucket.0 parameter {bucket} : tensor<768xf32>
// CHECK-NEXT: mlt_rt.buffer @grad_shard.0 gradient {owns, shard = "dp", view = @grad_bucket.0} : tensor<256xf32>
// CHECK-NEXT: mlt_rt.buffer @param_shard.0 parameter {decay, owns, shard = "dp", view = @param_bucket.0} : tensor<256xf32>
// CHECK-NEXT: mlt_rt.buffer @exp_avg_shard.0 optimizer_state {layout = @param_bucket.0, owns, shard = "dp"} : tensor<256xf32>
// CHECK-NEXT: mlt_rt.buffer @exp_avg_sq_shard.0 optimizer_state {layout = @param_bucket.0, owns, shard = "dp"} : tensor<256xf32>
// CHECK-NEXT: mlt_rt.buffer @grad_bucket.1 gradient {bucket} : tensor<384xf32>
// CHECK-NEXT: mlt_rt.buffer @param_bucket.1 parameter {bucket} : tensor<384xf32>
// CHECK-NEXT: mlt_rt.buffer @grad_shard.1 gradient {owns, shard = "dp", view = @grad_bucket.1} : tensor<128xf32>
// CHECK-NEXT: mlt_rt.buffer @param_shard.1 parameter {owns, shard = "dp", view = @param_bucket.1} : tensor<128xf32>
// CHECK-NOT: @s0
// The optimizer step: each bucket reduce-scattered into the rank's slice;
// the norm from the slices, each group's sum over dp; one adamw per slice;
// each updated parameter bucket all-gathered from the slices.
// CHECK: mlt_rt.program @micro_step_first {
// CHECK: mlt_rt.program @optimizer_step {
// CHECK-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.0] -> [@grad_shard.0] ints [256, 0]
// CHECK-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.1] -> [@grad_shard.1] ints [128, 0]
// The slices' sums of squares: aligned elements of one vector of zeros,
// summed over dp by one all-reduce.
// CHECK-NEXT: mlt_rt.launch "fill" [] -> [@sum_squares.slices] ints [128] floats [0.000000e+00]
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@grad_shard.1] -> [@sum_squares.grad_shard.1] ints [128]
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@grad_shard.0] -> [@sum_squares.grad_shard.0] ints [256]
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@sum_squares.slices] -> [@sum_squares.slices] ints [128, 0]
// CHECK-NEXT: mlt_rt.launch "global_norm" [@sum_squares.grad_shard.1, @sum_squares.grad_shard.0] -> [@grad_norm]
// CHECK-NEXT: mlt_rt.launch "clip_coefficient" [@grad_norm, @hyper.max_grad_norm] -> [@clip_coefficient]
// CHECK-NEXT: mlt_rt.launch "adamw" [@grad_shard.0, @clip_coefficient, @hyper.lr, @hyper.beta1, @hyper.beta2, @hyper.eps, @hyper.weight_decay, @hyper.step] -> [@param_shard.0, @exp_avg_shard.0, @exp_avg_sq_shard.0] ints [256, 1]
// CHECK-NEXT: mlt_rt.launch "adamw" [@grad_shard.1, @clip_coefficient, {{.*}}] -> [@param_shard.1, @exp_avg_shard.1, @exp_avg_sq_shard.1] ints [128, 0]
// CHECK-NEXT: mlt_rt.launch "all_gather" [@param_shard.0] -> [@param_bucket.0] ints [256, 0]
// CHECK-NEXT: mlt_rt.launch "all_gather" [@param_shard.1] -> [@param_bucket.1] ints [128, 0]
// CHECK-NEXT: }
// The runtime runs refresh_parameter_copies after it writes parameters
// (into the slices, which own them): here it all-gathers them.
// CHECK-NEXT: mlt_rt.program @refresh_parameter_copies {
// CHECK-NEXT: mlt_rt.launch "all_gather" [@param_shard.0] -> [@param_bucket.0] ints [256, 0]
// CHECK-NEXT: mlt_rt.launch "all_gather" [@param_shard.1] -> [@param_bucket.1] ints [128, 0]
// CHECK-NEXT: }

// zero=0 leaves the module as it is.
// ZERO0-LABEL: module attributes {mlt.mesh = #mlt.mesh<dp = 3>}
// ZERO0-NEXT: mlt_rt.buffer @"param:a" parameter {parameter = "a"} : tensor<100xf32>
// ZERO0: mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [100, 0]
module attributes {mlt.mesh = #mlt.mesh<dp = 3>} {
mlt_rt.buffer @"param:a" parameter {parameter = "a"} : tensor<100xf32>
mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<100xf32>
mlt_rt.buffer @"exp_avg:a" optimizer_state {parameter = "a"} : tensor<100xf32>
mlt_rt.buffer @"exp_avg_sq:a" optimizer_state {parameter = "a"} : tensor<100xf32>
mlt_rt.buffer @"param:w" parameter {decay, parameter = "w"} : tensor<16x20xf32>
mlt_rt.buffer @"grad:w" gradient {parameter = "w"} : tensor<16x20xf32>
mlt_rt.buffer @"exp_avg:w" optimizer_state {parameter = "w"} : tensor<16x20xf32>
mlt_rt.buffer @"exp_avg_sq:w" optimizer_state {parameter = "w"} : tensor<16x20xf32>
mlt_rt.buffer @"param:v" parameter {decay, parameter = "v"} : tensor<7x9xf32>
mlt_rt.buffer @"grad:v" gradient {parameter = "v"} : tensor<7x9xf32>
mlt_rt.buffer @"exp_avg:v" optimizer_state {parameter = "v"} : tensor<7x9xf32>
mlt_rt.buffer @"exp_avg_sq:v" optimizer_state {parameter = "v"} : tensor<7x9xf32>
mlt_rt.buffer @x input : tensor<320xf32>
mlt_rt.buffer @"hyper.lr" input : tensor<f32>
mlt_rt.buffer @"hyper.beta1" input : tensor<f32>
mlt_rt.buffer @"hyper.beta2" input : tensor<f32>
mlt_rt.buffer @"hyper.eps" input : tensor<f32>
mlt_rt.buffer @"hyper.weight_decay" input : tensor<f32>
mlt_rt.buffer @"hyper.step" input : tensor<f32>
mlt_rt.buffer @"hyper.max_grad_norm" input : tensor<f32>
mlt_rt.buffer @grad_norm output : tensor<f32>
mlt_rt.buffer @s0 temporary : tensor<f32>
mlt_rt.buffer @s1 temporary : tensor<f32>
mlt_rt.buffer @s2 temporary : tensor<f32>
mlt_rt.buffer @c temporary : tensor<f32>
mlt_rt.program @micro_step_first {
  mlt_rt.launch "cast" [@x] -> [@"grad:v"] ints [63]
  mlt_rt.launch "cast" [@x] -> [@"grad:w"] ints [320]
  mlt_rt.launch "cast" [@x] -> [@"grad:a"] ints [100]
}
mlt_rt.program @optimizer_step {
  mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [100, 0]
  mlt_rt.launch "sum_squares" [@"grad:a"] -> [@s0] ints [100]
  mlt_rt.launch "all_reduce_sum" [@"grad:w"] -> [@"grad:w"] ints [320, 0]
  mlt_rt.launch "sum_squares" [@"grad:w"] -> [@s1] ints [320]
  mlt_rt.launch "all_reduce_sum" [@"grad:v"] -> [@"grad:v"] ints [63, 0]
  mlt_rt.launch "sum_squares" [@"grad:v"] -> [@s2] ints [63]
  mlt_rt.launch "global_norm" [@s0, @s1, @s2] -> [@grad_norm]
  mlt_rt.launch "clip_coefficient" [@grad_norm, @"hyper.max_grad_norm"] -> [@c]
  mlt_rt.launch "adamw" [@"grad:a", @c, @"hyper.lr", @"hyper.beta1", @"hyper.beta2", @"hyper.eps", @"hyper.weight_decay", @"hyper.step"] -> [@"param:a", @"exp_avg:a", @"exp_avg_sq:a"] ints [100, 0]
  mlt_rt.launch "adamw" [@"grad:w", @c, @"hyper.lr", @"hyper.beta1", @"hyper.beta2", @"hyper.eps", @"hyper.weight_decay", @"hyper.step"] -> [@"param:w", @"exp_avg:w", @"exp_avg_sq:w"] ints [320, 1]
  mlt_rt.launch "adamw" [@"grad:v", @c, @"hyper.lr", @"hyper.beta1", @"hyper.beta2", @"hyper.eps", @"hyper.weight_decay", @"hyper.step"] -> [@"param:v", @"exp_avg:v", @"exp_avg_sq:v"] ints [63, 1]
}
mlt_rt.step @step {
  mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
  mlt_rt.call @optimizer_step
}
}

// -----

// Tests a mixed-precision plan on a 2 x 2 mesh: the bf16 copies the forward
// pass reads are the views of the read buckets; the f32 master weights live
// only as slices (param_shard, owning their ranges); adamw writes the bf16
// slice too, which is all-gathered; refresh_parameter_copies casts the master
// slices and all-gathers. The all-reduce over tp (axis 1) of a norm weight's
// gradient stays; the one over dp goes. A parameter split over tp is summed
// over dp and tp.
// CHECK-LABEL: module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>}
// CHECK-NEXT: mlt_rt.buffer @"grad:n" gradient {parameter = "n", view = @grad_bucket.0, view_offset = 0 : i64} : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @"param_bf16:n" parameter_copy {parameter = "n", view = @param_copy_bucket.0, view_offset = 0 : i64} : tensor<64xbf16>
// CHECK-NEXT: mlt_rt.buffer @"grad:w" gradient {mlt.sharding = [#mlt.sharding<[tp, -]>], parameter = "w", view = @grad_bucket.1, view_offset = 0 : i64} : tensor<8x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"param_bf16:w" parameter_copy {mlt.sharding = [#mlt.sharding<[tp, -]>], parameter = "w", view = @param_copy_bucket.1, view_offset = 0 : i64} : tensor<8x8xbf16>
// CHECK-NOT: @"param:
// CHECK: mlt_rt.buffer @grad_bucket.0 gradient {bucket} : tensor<256xf32>
// CHECK-NEXT: mlt_rt.buffer @param_copy_bucket.0 parameter_copy {bucket} : tensor<256xbf16>
// CHECK-NEXT: mlt_rt.buffer @grad_shard.0 gradient {owns, shard = "dp", view = @grad_bucket.0} : tensor<128xf32>
// CHECK-NEXT: mlt_rt.buffer @param_copy_shard.0 parameter_copy {shard = "dp", view = @param_copy_bucket.0} : tensor<128xbf16>
// CHECK-NEXT: mlt_rt.buffer @param_shard.0 parameter {layout = @param_copy_bucket.0, owns, shard = "dp"} : tensor<128xf32>
// CHECK: mlt_rt.program @optimizer_step {
// CHECK-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.0] -> [@grad_shard.0] ints [128, 0]
// CHECK-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.1] -> [@grad_shard.1] ints [128, 0]
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:n"] -> [@"grad:n"] ints [64, 1]
// CHECK-NEXT: mlt_rt.launch "fill"
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@grad_shard.0]
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@grad_shard.1]
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@sum_squares.slices] -> [@sum_squares.slices] ints [128, 0]
// The group split over tp (its range of the vector) is summed over tp too.
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@sum_squares.group1] -> [@sum_squares.group1] ints [64, 1]
// CHECK-NEXT: mlt_rt.launch "global_norm"
// CHECK-NEXT: mlt_rt.launch "clip_coefficient"
// CHECK-NEXT: mlt_rt.launch "adamw" [@grad_shard.0, {{.*}}] -> [@param_shard.0, @exp_avg_shard.0, @exp_avg_sq_shard.0, @param_copy_shard.0] ints [128, 0]
// CHECK-NEXT: mlt_rt.launch "adamw" [@grad_shard.1, {{.*}}] -> [@param_shard.1, @exp_avg_shard.1, @exp_avg_sq_shard.1, @param_copy_shard.1] ints [128, 1]
// CHECK-NEXT: mlt_rt.launch "all_gather" [@param_copy_shard.0] -> [@param_copy_bucket.0] ints [128, 0]
// CHECK-NEXT: mlt_rt.launch "all_gather" [@param_copy_shard.1] -> [@param_copy_bucket.1] ints [128, 0]
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.program @refresh_parameter_copies {
// CHECK-NEXT: mlt_rt.launch "cast" [@param_shard.0] -> [@param_copy_shard.0] ints [128]
// CHECK-NEXT: mlt_rt.launch "cast" [@param_shard.1] -> [@param_copy_shard.1] ints [128]
// CHECK-NEXT: mlt_rt.launch "all_gather" [@param_copy_shard.0] -> [@param_copy_bucket.0] ints [128, 0]
// CHECK-NEXT: mlt_rt.launch "all_gather" [@param_copy_shard.1] -> [@param_copy_bucket.1] ints [128, 0]
// CHECK-NEXT: }
// ZeRO-2 (the same mesh; one micro-batch): the gradients are temporaries of
// the body, a view of a temporary bucket each, whose padding the body zeroes
// before it first touches the bucket; the body ends with the all-reduce over
// tp it took from the optimizer step, then reduce-scatters each bucket
// straight into the rank's gradient slice (a buffer of its own, owning its
// ranges). The optimizer step reduces nothing.
// ZERO2-LABEL: module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>}
// ZERO2-NEXT: mlt_rt.buffer @"grad:n" temporary {view = @grad_bucket.0, view_offset = 0 : i64} : tensor<64xf32>
// ZERO2-NEXT: mlt_rt.buffer @"param_bf16:n" parameter_copy
// ZERO2-NEXT: mlt_rt.buffer @"grad:w" temporary {view = @grad_bucket.1, view_offset = 0 : i64} : tensor<8x8xf32>
// ZERO2: mlt_rt.buffer @grad_bucket.0 temporary {bucket} : tensor<256xf32>
// ZERO2-NEXT: mlt_rt.buffer @param_copy_bucket.0 parameter_copy {bucket} : tensor<256xbf16>
// ZERO2-NEXT: mlt_rt.buffer @grad_shard.0 gradient {layout = @param_copy_bucket.0, owns, shard = "dp"} : tensor<128xf32>
// ZERO2-NOT: grad_slice
// ZERO2: mlt_rt.buffer @grad_bucket.0.padding temporary {view = @grad_bucket.0, view_offset = 64 : i64} : tensor<192xf32>
// ZERO2-NEXT: mlt_rt.buffer @grad_bucket.1.padding temporary {view = @grad_bucket.1, view_offset = 64 : i64} : tensor<192xf32>
// ZERO2: mlt_rt.program @micro_step_first {
// ZERO2-NEXT: mlt_rt.launch "fill" [] -> [@grad_bucket.0.padding] ints [192] floats [0.000000e+00]
// ZERO2-NEXT: mlt_rt.launch "cast" [@x] -> [@"grad:n"] ints [64]
// ZERO2-NEXT: mlt_rt.launch "fill" [] -> [@grad_bucket.1.padding] ints [192] floats [0.000000e+00]
// ZERO2-NEXT: mlt_rt.launch "matmul" [@"param_bf16:w", @"param_bf16:w"] -> [@"grad:w"]
// ZERO2-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:n"] -> [@"grad:n"] ints [64, 1]
// ZERO2-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.0] -> [@grad_shard.0] ints [128, 0]
// ZERO2-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.1] -> [@grad_shard.1] ints [128, 0]
// ZERO2-NEXT: }
// ZERO2-NEXT: mlt_rt.program @optimizer_step {
// ZERO2-NOT: reduce_scatter_sum
// ZERO2: mlt_rt.step @step {
// ZERO2-NEXT: mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
// ZERO2-NEXT: mlt_rt.call @optimizer_step

// Then mlt-schedule-overlap moves the body's reductions under its backward
// pass on stream 1 (the all-reduce of grad:n over tp after its last write),
// and the parameter all-gathers to the body's start on stream 2.
// OVERLAP2-LABEL: module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>}
// OVERLAP2: mlt_rt.program @micro_step_first {
// OVERLAP2-NEXT: mlt_rt.launch "all_gather" [@param_copy_shard.1] -> [@param_copy_bucket.1] ints [128, 0] stream 2 token [[G:[0-9]+]]
// OVERLAP2-NEXT: mlt_rt.launch "all_gather" [@param_copy_shard.0] -> [@param_copy_bucket.0] ints [128, 0] stream 2{{$}}
// OVERLAP2-NEXT: mlt_rt.launch "fill" [] -> [@grad_bucket.0.padding]
// OVERLAP2-NEXT: mlt_rt.launch "cast" [@x] -> [@"grad:n"] ints [64]{{$}}
// OVERLAP2-NEXT: mlt_rt.launch "fill" [] -> [@grad_bucket.1.padding]
// OVERLAP2-NEXT: mlt_rt.launch "matmul" [@"param_bf16:w", @"param_bf16:w"] -> [@"grad:w"] ints [1, 8, 8, 8, 0, 0, 0] waits [[[G]]] token [[W:[0-9]+]]
// OVERLAP2-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:n"] -> [@"grad:n"] ints [64, 1] stream 1 waits [[[W]]]
// OVERLAP2-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.0] -> [@grad_shard.0] ints [128, 0] stream 1
// OVERLAP2-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.1] -> [@grad_shard.1] ints [128, 0] stream 1
// OVERLAP2-NEXT: }
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>} {
mlt_rt.buffer @"param:n" parameter {parameter = "n"} : tensor<64xf32>
mlt_rt.buffer @"grad:n" gradient {parameter = "n"} : tensor<64xf32>
mlt_rt.buffer @"exp_avg:n" optimizer_state {parameter = "n"} : tensor<64xf32>
mlt_rt.buffer @"exp_avg_sq:n" optimizer_state {parameter = "n"} : tensor<64xf32>
mlt_rt.buffer @"param_bf16:n" parameter_copy {parameter = "n"} : tensor<64xbf16>
mlt_rt.buffer @"param:w" parameter {decay, mlt.sharding = [#mlt.sharding<[tp, -]>], parameter = "w"} : tensor<8x8xf32>
mlt_rt.buffer @"grad:w" gradient {mlt.sharding = [#mlt.sharding<[tp, -]>], parameter = "w"} : tensor<8x8xf32>
mlt_rt.buffer @"exp_avg:w" optimizer_state {mlt.sharding = [#mlt.sharding<[tp, -]>], parameter = "w"} : tensor<8x8xf32>
mlt_rt.buffer @"exp_avg_sq:w" optimizer_state {mlt.sharding = [#mlt.sharding<[tp, -]>], parameter = "w"} : tensor<8x8xf32>
mlt_rt.buffer @"param_bf16:w" parameter_copy {mlt.sharding = [#mlt.sharding<[tp, -]>], parameter = "w"} : tensor<8x8xbf16>
mlt_rt.buffer @x input : tensor<64xbf16>
mlt_rt.buffer @"hyper.lr" input : tensor<f32>
mlt_rt.buffer @"hyper.max_grad_norm" input : tensor<f32>
mlt_rt.buffer @grad_norm output : tensor<f32>
mlt_rt.buffer @s0 temporary : tensor<f32>
mlt_rt.buffer @s1 temporary : tensor<f32>
mlt_rt.buffer @c temporary : tensor<f32>
mlt_rt.program @micro_step_first {
  mlt_rt.launch "cast" [@x] -> [@"grad:n"] ints [64]
  mlt_rt.launch "matmul" [@"param_bf16:w", @"param_bf16:w"] -> [@"grad:w"] ints [1, 8, 8, 8, 0, 0, 0]
}
mlt_rt.program @optimizer_step {
  mlt_rt.launch "all_reduce_sum" [@"grad:n"] -> [@"grad:n"] ints [64, 0]
  mlt_rt.launch "all_reduce_sum" [@"grad:n"] -> [@"grad:n"] ints [64, 1]
  mlt_rt.launch "sum_squares" [@"grad:n"] -> [@s0] ints [64]
  mlt_rt.launch "all_reduce_sum" [@"grad:w"] -> [@"grad:w"] ints [64, 0]
  mlt_rt.launch "sum_squares" [@"grad:w"] -> [@s1] ints [64]
  mlt_rt.launch "all_reduce_sum" [@s1] -> [@s1] ints [1, 1]
  mlt_rt.launch "global_norm" [@s0, @s1] -> [@grad_norm]
  mlt_rt.launch "clip_coefficient" [@grad_norm, @"hyper.max_grad_norm"] -> [@c]
  mlt_rt.launch "adamw" [@"grad:n", @c, @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr"] -> [@"param:n", @"exp_avg:n", @"exp_avg_sq:n", @"param_bf16:n"] ints [64, 0]
  mlt_rt.launch "adamw" [@"grad:w", @c, @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr"] -> [@"param:w", @"exp_avg:w", @"exp_avg_sq:w", @"param_bf16:w"] ints [64, 1]
}
mlt_rt.program @refresh_parameter_copies {
  mlt_rt.launch "cast" [@"param:n"] -> [@"param_bf16:n"] ints [64]
  mlt_rt.launch "cast" [@"param:w"] -> [@"param_bf16:w"] ints [64]
}
mlt_rt.step @step {
  mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
  mlt_rt.call @optimizer_step
}
}

// -----

// ZeRO-2 with two micro-batches: both calls run the body that writes the
// gradients; it reduce-scatters each bucket into a temporary slice and adds
// that into the rank's gradient slice, which the step zeroes first. The
// bucket's padding (after a member of 16 elements, which ends off the
// plans' 256-byte alignment) is zeroed from the aligned start before it, a
// view every buffer rule accepts: the member's own elements with it, which
// its writer overwrites after.
// ZERO2-LABEL: module attributes {mlt.mesh = #mlt.mesh<dp = 2>}
// ZERO2: mlt_rt.buffer @grad_shard.0 gradient {layout = @param_bucket.0, owns, shard = "dp"} : tensor<128xf32>
// ZERO2-NEXT: mlt_rt.buffer @grad_slice.0 temporary : tensor<128xf32>
// ZERO2: mlt_rt.buffer @grad_bucket.0.padding temporary {view = @grad_bucket.0, view_offset = 0 : i64} : tensor<256xf32>
// ZERO2: mlt_rt.program @micro_step_first {
// ZERO2-NEXT: mlt_rt.launch "fill" [] -> [@grad_bucket.0.padding] ints [256] floats [0.000000e+00]
// ZERO2-NEXT: mlt_rt.launch "cast" [@x] -> [@"grad:a"] ints [16]
// ZERO2-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.0] -> [@grad_slice.0] ints [128, 0]
// ZERO2-NEXT: mlt_rt.launch "accumulate" [@grad_slice.0] -> [@grad_shard.0] ints [128]
// ZERO2-NEXT: }
// ZERO2-NOT: mlt_rt.program @micro_step {
// ZERO2: mlt_rt.program @zero_gradients {
// ZERO2-NEXT: mlt_rt.launch "fill" [] -> [@grad_shard.0] ints [128] floats [0.000000e+00]
// ZERO2-NEXT: }
// ZERO2: mlt_rt.step @step {
// ZERO2-NEXT: mlt_rt.call @zero_gradients
// ZERO2-NEXT: mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
// ZERO2-NEXT: mlt_rt.call @micro_step_first microbatch 1 work [F1.0, B1.0]
// ZERO2-NEXT: mlt_rt.call @optimizer_step
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
mlt_rt.buffer @"param:a" parameter {decay, parameter = "a"} : tensor<4x4xf32>
mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<4x4xf32>
mlt_rt.buffer @"exp_avg:a" optimizer_state {parameter = "a"} : tensor<4x4xf32>
mlt_rt.buffer @"exp_avg_sq:a" optimizer_state {parameter = "a"} : tensor<4x4xf32>
mlt_rt.buffer @x input : tensor<16xf32>
mlt_rt.buffer @"hyper.lr" input : tensor<f32>
mlt_rt.buffer @grad_norm output : tensor<f32>
mlt_rt.buffer @s temporary : tensor<f32>
mlt_rt.buffer @c temporary : tensor<f32>
mlt_rt.program @micro_step_first {
  mlt_rt.launch "cast" [@x] -> [@"grad:a"] ints [16]
}
mlt_rt.program @micro_step {
  mlt_rt.launch "accumulate" [@x] -> [@"grad:a"] ints [16]
}
mlt_rt.program @optimizer_step {
  mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [16, 0]
  mlt_rt.launch "sum_squares" [@"grad:a"] -> [@s] ints [16]
  mlt_rt.launch "global_norm" [@s] -> [@grad_norm]
  mlt_rt.launch "clip_coefficient" [@grad_norm, @"hyper.lr"] -> [@c]
  mlt_rt.launch "adamw" [@"grad:a", @c, @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr"] -> [@"param:a", @"exp_avg:a", @"exp_avg_sq:a"] ints [16, 1]
}
mlt_rt.step @step {
  mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
  mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
  mlt_rt.call @optimizer_step
}
}

// -----

// The axes ZeRO partitions over (mlt::zeroAxes): cp where dp is 1, whose
// ranks hold the same weights and sum their gradients; the cp all-reduce is
// replaced by the bucket's reduce-scatter over cp (axis 0), the slices
// named by "cp". With dp 2 as well, dp x cp: the bucket (padded to 4 x 128)
// is reduce-scattered over dp (axis 0) into the rank's dp slice, a view of
// it (`shard = "dp"`), then over cp (axis 1) into the rank's slice
// (`shard = "dp*cp"`, a quarter); both all-reduces go, the slices' sums of
// squares are summed over each axis, and the updated slice is gathered
// back over cp, then dp.
// CP-LABEL: module attributes {mlt.mesh = #mlt.mesh<cp = 2>}
// CP: mlt_rt.buffer @grad_shard.0 gradient {owns, shard = "cp", view = @grad_bucket.0} : tensor<128xf32>
// CP: mlt_rt.program @optimizer_step {
// CP-NOT: all_reduce_sum
// CP: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.0] -> [@grad_shard.0] ints [128, 0]
// CP: mlt_rt.launch "all_gather" [@param_shard.0] -> [@param_bucket.0] ints [128, 0]
module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
mlt_rt.buffer @"param:a" parameter {decay, parameter = "a"} : tensor<4x4xf32>
mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<4x4xf32>
mlt_rt.buffer @"exp_avg:a" optimizer_state {parameter = "a"} : tensor<4x4xf32>
mlt_rt.buffer @"exp_avg_sq:a" optimizer_state {parameter = "a"} : tensor<4x4xf32>
mlt_rt.buffer @x input : tensor<16xf32>
mlt_rt.buffer @"hyper.lr" input : tensor<f32>
mlt_rt.buffer @grad_norm output : tensor<f32>
mlt_rt.buffer @s temporary : tensor<f32>
mlt_rt.buffer @c temporary : tensor<f32>
mlt_rt.program @micro_step_first {
  mlt_rt.launch "cast" [@x] -> [@"grad:a"] ints [16]
}
mlt_rt.program @optimizer_step {
  mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [16, 0]
  mlt_rt.launch "sum_squares" [@"grad:a"] -> [@s] ints [16]
  mlt_rt.launch "global_norm" [@s] -> [@grad_norm]
  mlt_rt.launch "clip_coefficient" [@grad_norm, @"hyper.lr"] -> [@c]
  mlt_rt.launch "adamw" [@"grad:a", @c, @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr"] -> [@"param:a", @"exp_avg:a", @"exp_avg_sq:a"] ints [16, 1]
}
mlt_rt.step @step {
  mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
  mlt_rt.call @optimizer_step
}
}

// -----

// CP-LABEL: module attributes {mlt.mesh = #mlt.mesh<dp = 2, cp = 2>}
// CP: mlt_rt.buffer @grad_bucket.0 gradient {bucket} : tensor<512xf32>
// CP: mlt_rt.buffer @grad_shard.0 gradient {owns, shard = "dp*cp", view = @grad_bucket.0} : tensor<128xf32>
// CP: mlt_rt.buffer @exp_avg_shard.0 optimizer_state {layout = @param_bucket.0, owns, shard = "dp*cp"} : tensor<128xf32>
// CP: mlt_rt.buffer @grad_bucket.0.dp gradient {shard = "dp", view = @grad_bucket.0} : tensor<256xf32>
// CP: mlt_rt.buffer @param_bucket.0.dp parameter {shard = "dp", view = @param_bucket.0} : tensor<256xf32>
// CP: mlt_rt.program @optimizer_step {
// CP-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.0] -> [@grad_bucket.0.dp] ints [256, 0]
// CP-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.0.dp] -> [@grad_shard.0] ints [128, 1]
// CP-NOT: "all_reduce_sum" [@"grad:a"]
// CP: mlt_rt.launch "all_reduce_sum" [@sum_squares.slices] -> [@sum_squares.slices] ints [64, 0]
// CP-NEXT: mlt_rt.launch "all_reduce_sum" [@sum_squares.slices] -> [@sum_squares.slices] ints [64, 1]
// CP: mlt_rt.launch "adamw" [@grad_shard.0, {{.*}}] -> [@param_shard.0, @exp_avg_shard.0, @exp_avg_sq_shard.0] ints [128, 1]
// CP-NEXT: mlt_rt.launch "all_gather" [@param_shard.0] -> [@param_bucket.0.dp] ints [128, 1]
// CP-NEXT: mlt_rt.launch "all_gather" [@param_bucket.0.dp] -> [@param_bucket.0] ints [256, 0]
// CP-NEXT: }
module attributes {mlt.mesh = #mlt.mesh<dp = 2, cp = 2>} {
mlt_rt.buffer @"param:a" parameter {decay, parameter = "a"} : tensor<4x4xf32>
mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<4x4xf32>
mlt_rt.buffer @"exp_avg:a" optimizer_state {parameter = "a"} : tensor<4x4xf32>
mlt_rt.buffer @"exp_avg_sq:a" optimizer_state {parameter = "a"} : tensor<4x4xf32>
mlt_rt.buffer @x input : tensor<16xf32>
mlt_rt.buffer @"hyper.lr" input : tensor<f32>
mlt_rt.buffer @grad_norm output : tensor<f32>
mlt_rt.buffer @s temporary : tensor<f32>
mlt_rt.buffer @c temporary : tensor<f32>
mlt_rt.program @micro_step_first {
  mlt_rt.launch "cast" [@x] -> [@"grad:a"] ints [16]
}
mlt_rt.program @optimizer_step {
  mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [16, 1]
  mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [16, 0]
  mlt_rt.launch "sum_squares" [@"grad:a"] -> [@s] ints [16]
  mlt_rt.launch "global_norm" [@s] -> [@grad_norm]
  mlt_rt.launch "clip_coefficient" [@grad_norm, @"hyper.lr"] -> [@c]
  mlt_rt.launch "adamw" [@"grad:a", @c, @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr", @"hyper.lr"] -> [@"param:a", @"exp_avg:a", @"exp_avg_sq:a"] ints [16, 1]
}
mlt_rt.step @step {
  mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
  mlt_rt.call @optimizer_step
}
}
