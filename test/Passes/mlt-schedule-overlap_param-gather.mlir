// RUN: mlt-opt %s -split-input-file -mlt-schedule-overlap | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-schedule-overlap="param-gather=0" | FileCheck %s --check-prefix=OFF

// Tests that a partitioned optimizer's all-gathers of updated parameter
// buckets move from the end of the optimizer step to the start of the body
// of the step's first micro-batch (micro_step_first), on stream 2, in the
// order the body needs the buckets (bucket 1 first: its view param:a is
// read first), each signalling a token that the first launch touching its
// bucket (through a view) waits for; and that the reduce-scatters of the
// gradient buckets move under the last micro-batch's backward pass.
// CHECK-LABEL: mlt_rt.program @micro_step_first {
// CHECK-NEXT: mlt_rt.launch "all_gather" [@param_shard.1] -> [@param_bucket.1] ints [128, 0] stream 2 token 0
// CHECK-NEXT: mlt_rt.launch "all_gather" [@param_shard.0] -> [@param_bucket.0] ints [256, 0] stream 2 token 1
// CHECK-NEXT: mlt_rt.launch "add" [@"param:a", @"param:a"] -> [@t100] ints [100] waits [0]
// CHECK-NEXT: mlt_rt.launch "cast" [@t100] -> [@"grad:a"] ints [100]
// CHECK-NEXT: mlt_rt.launch "add" [@"param:v", @"param:v"] -> [@t63] ints [63] waits [1]
// CHECK-NEXT: mlt_rt.launch "cast" [@t63] -> [@"grad:v"] ints [63]
// CHECK-NEXT: mlt_rt.launch "add" [@"param:w", @"param:w"] -> [@t320] ints [320]
// CHECK-NEXT: mlt_rt.launch "cast" [@t320] -> [@"grad:w"] ints [320]
// CHECK-NEXT: }
// CHECK: mlt_rt.program @micro_step_last {
// CHECK: mlt_rt.launch "accumulate" [@t320.micro_step_last] -> [@"grad:w"] ints [320] token 0
// CHECK-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.1] -> [@grad_shard.1] ints [128, 0] stream 1 waits [0]
// CHECK-NEXT: mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.0] -> [@grad_shard.0] ints [256, 0] stream 1{{$}}
// CHECK: mlt_rt.program @optimizer_step {
// CHECK-NOT: all_gather
// CHECK: mlt_rt.launch "adamw" [@grad_shard.1,
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.program @refresh_parameter_copies {
// CHECK-NEXT: mlt_rt.launch "all_gather" [@param_shard.0] -> [@param_bucket.0] ints [256, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "all_gather" [@param_shard.1] -> [@param_bucket.1] ints [128, 0]{{$}}
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.step @step {
// CHECK-NEXT: mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
// CHECK-NEXT: mlt_rt.call @micro_step_last microbatch 1 work [F1.0, B1.0]

// Without param-gather the gathers stay at the optimizer step's end.
// OFF-LABEL: mlt_rt.program @micro_step_first {
// OFF-NEXT: mlt_rt.launch "add" [@"param:a", @"param:a"] -> [@t100] ints [100]{{$}}
// OFF: mlt_rt.program @optimizer_step {
// OFF: mlt_rt.launch "all_gather" [@param_shard.0] -> [@param_bucket.0] ints [256, 0]{{$}}
// OFF-NEXT: mlt_rt.launch "all_gather" [@param_shard.1] -> [@param_bucket.1] ints [128, 0]{{$}}
// OFF-NEXT: }
module attributes {mlt.mesh = #mlt.mesh<dp = 3>} {
  mlt_rt.buffer @"param:a" parameter {parameter = "a", view = @param_bucket.1, view_offset = 0 : i64} : tensor<100xf32>
  mlt_rt.buffer @"grad:a" gradient {parameter = "a", view = @grad_bucket.1, view_offset = 0 : i64} : tensor<100xf32>
  mlt_rt.buffer @"param:w" parameter {decay, parameter = "w", view = @param_bucket.0, view_offset = 128 : i64} : tensor<16x20xf32>
  mlt_rt.buffer @"grad:w" gradient {parameter = "w", view = @grad_bucket.0, view_offset = 128 : i64} : tensor<16x20xf32>
  mlt_rt.buffer @"param:v" parameter {decay, parameter = "v", view = @param_bucket.0, view_offset = 0 : i64} : tensor<7x9xf32>
  mlt_rt.buffer @"grad:v" gradient {parameter = "v", view = @grad_bucket.0, view_offset = 0 : i64} : tensor<7x9xf32>
  mlt_rt.buffer @hyper.lr input : tensor<f32>
  mlt_rt.buffer @hyper.max_grad_norm input : tensor<f32>
  mlt_rt.buffer @grad_norm output : tensor<f32>
  mlt_rt.buffer @grad_bucket.0 gradient {bucket} : tensor<768xf32>
  mlt_rt.buffer @param_bucket.0 parameter {bucket} : tensor<768xf32>
  mlt_rt.buffer @grad_shard.0 gradient {owns, shard = "dp", view = @grad_bucket.0} : tensor<256xf32>
  mlt_rt.buffer @param_shard.0 parameter {decay, owns, shard = "dp", view = @param_bucket.0} : tensor<256xf32>
  mlt_rt.buffer @exp_avg_shard.0 optimizer_state {layout = @grad_bucket.0, owns, shard = "dp"} : tensor<256xf32>
  mlt_rt.buffer @exp_avg_sq_shard.0 optimizer_state {layout = @grad_bucket.0, owns, shard = "dp"} : tensor<256xf32>
  mlt_rt.buffer @grad_bucket.1 gradient {bucket} : tensor<384xf32>
  mlt_rt.buffer @param_bucket.1 parameter {bucket} : tensor<384xf32>
  mlt_rt.buffer @grad_shard.1 gradient {owns, shard = "dp", view = @grad_bucket.1} : tensor<128xf32>
  mlt_rt.buffer @param_shard.1 parameter {owns, shard = "dp", view = @param_bucket.1} : tensor<128xf32>
  mlt_rt.buffer @exp_avg_shard.1 optimizer_state {layout = @grad_bucket.1, owns, shard = "dp"} : tensor<128xf32>
  mlt_rt.buffer @exp_avg_sq_shard.1 optimizer_state {layout = @grad_bucket.1, owns, shard = "dp"} : tensor<128xf32>
  mlt_rt.buffer @t100 temporary : tensor<100xf32>
  mlt_rt.buffer @t63 temporary : tensor<63xf32>
  mlt_rt.buffer @t320 temporary : tensor<320xf32>
  mlt_rt.buffer @s temporary : tensor<f32>
  mlt_rt.buffer @clip_coefficient temporary : tensor<f32>
  mlt_rt.program @micro_step_first {
    mlt_rt.launch "add" [@"param:a", @"param:a"] -> [@t100] ints [100]
    mlt_rt.launch "cast" [@t100] -> [@"grad:a"] ints [100]
    mlt_rt.launch "add" [@"param:v", @"param:v"] -> [@t63] ints [63]
    mlt_rt.launch "cast" [@t63] -> [@"grad:v"] ints [63]
    mlt_rt.launch "add" [@"param:w", @"param:w"] -> [@t320] ints [320]
    mlt_rt.launch "cast" [@t320] -> [@"grad:w"] ints [320]
  }
  mlt_rt.program @micro_step {
    mlt_rt.launch "add" [@"param:a", @"param:a"] -> [@t100] ints [100]
    mlt_rt.launch "accumulate" [@t100] -> [@"grad:a"] ints [100]
    mlt_rt.launch "add" [@"param:v", @"param:v"] -> [@t63] ints [63]
    mlt_rt.launch "accumulate" [@t63] -> [@"grad:v"] ints [63]
    mlt_rt.launch "add" [@"param:w", @"param:w"] -> [@t320] ints [320]
    mlt_rt.launch "accumulate" [@t320] -> [@"grad:w"] ints [320]
  }
  mlt_rt.program @optimizer_step {
    mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.0] -> [@grad_shard.0] ints [256, 0]
    mlt_rt.launch "reduce_scatter_sum" [@grad_bucket.1] -> [@grad_shard.1] ints [128, 0]
    mlt_rt.launch "sum_squares" [@grad_shard.1] -> [@s] ints [128]
    mlt_rt.launch "global_norm" [@s] -> [@grad_norm]
    mlt_rt.launch "clip_coefficient" [@grad_norm, @hyper.max_grad_norm] -> [@clip_coefficient]
    mlt_rt.launch "adamw" [@grad_shard.0, @clip_coefficient, @hyper.lr, @hyper.lr, @hyper.lr, @hyper.lr, @hyper.lr, @hyper.lr] -> [@param_shard.0, @exp_avg_shard.0, @exp_avg_sq_shard.0] ints [256, 1]
    mlt_rt.launch "adamw" [@grad_shard.1, @clip_coefficient, @hyper.lr, @hyper.lr, @hyper.lr, @hyper.lr, @hyper.lr, @hyper.lr] -> [@param_shard.1, @exp_avg_shard.1, @exp_avg_sq_shard.1] ints [128, 0]
    mlt_rt.launch "all_gather" [@param_shard.0] -> [@param_bucket.0] ints [256, 0]
    mlt_rt.launch "all_gather" [@param_shard.1] -> [@param_bucket.1] ints [128, 0]
  }
  mlt_rt.program @refresh_parameter_copies {
    mlt_rt.launch "all_gather" [@param_shard.0] -> [@param_bucket.0] ints [256, 0]
    mlt_rt.launch "all_gather" [@param_shard.1] -> [@param_bucket.1] ints [128, 0]
  }
  mlt_rt.step @step {
    mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
    mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
    mlt_rt.call @optimizer_step
  }
}
