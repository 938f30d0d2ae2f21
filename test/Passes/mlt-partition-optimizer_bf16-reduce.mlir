// RUN: mlt-opt %s -mlt-partition-optimizer="zero=2 bucket-bytes=1000 grad-reduce-dtype=bf16" | FileCheck %s
// RUN: mlt-opt %s -mlt-partition-optimizer="zero=2 bucket-bytes=1000 grad-reduce-dtype=bf16" -mlt-schedule-overlap | FileCheck %s --check-prefix=OVERLAP

// ZeRO-2 with gradients reduced in bf16, on a bf16 plan (dp 2 x tp 2): the
// gradient a matrix product writes (w) becomes bf16, in a bf16 bucket of its
// own group, reduce-scattered in bf16 straight into a bf16 gradient slice
// (one micro-batch: nothing to add to; the optimizer's multi-tensor kernels
// widen it as they read it); the one another kernel writes (n, here a cast)
// stays f32 and is reduce-scattered straight into its f32 slice, after its
// all-reduce over tp.
// CHECK-LABEL: module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>}
// CHECK-NEXT: mlt_rt.buffer @"grad:n" temporary {view = @grad_bucket.0, view_offset = 0 : i64} : tensor<64xf32>
// CHECK: mlt_rt.buffer @"grad:w" temporary {view = @grad_bucket.1, view_offset = 0 : i64} : tensor<8x8xbf16>
// CHECK: mlt_rt.buffer @grad_bucket.0 temporary {bucket} : tensor<256xf32>
// CHECK: mlt_rt.buffer @grad_shard.0 gradient {layout = @param_copy_bucket.0, owns, shard = "dp"} : tensor<128xf32>
// CHECK: mlt_rt.buffer @grad_bucket.1 temporary {bucket} : tensor<256xbf16>
// CHECK: mlt_rt.buffer @grad_shard.1 gradient {layout = @param_copy_bucket.1, owns, shard = "dp"} : tensor<128xbf16>
// CHECK-NOT: grad_slice
// CHECK: mlt_rt.buffer @grad_bucket.1.padding temporary {view = @grad_bucket.1, view_offset = 0 : i64} : tensor<256xbf16>
// CHECK-LABEL: mlt_rt.program @micro_step_first {
// CHECK: mlt_rt.launch "matmul" [@"param_bf16:w", @"param_bf16:w"] -> [@"grad:w"]
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:n"] -> [@"grad:n"] ints [64, 1]
// CHECK-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.0] -> [@grad_shard.0] ints [128, 0]
// CHECK-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.1] -> [@grad_shard.1] ints [128, 0]
// CHECK-NEXT: }

// Under the backward pass: both reduce-scatters on stream 1, which the
// program joins at its end (nothing after them in the body).
// OVERLAP-LABEL: mlt_rt.program @micro_step_first {
// OVERLAP: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.0] -> [@grad_shard.0] ints [128, 0] stream 1 token
// OVERLAP-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.1] -> [@grad_shard.1] ints [128, 0] stream 1 token
// OVERLAP-NEXT: }

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
