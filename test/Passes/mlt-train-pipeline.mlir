// RUN: mlt-opt %S/../../models/llama/tiny.mlir \
// RUN:   --mlt-train-pipeline="batch=12 seq-len=16 microbatches=3 dp=2 dtype=bf16" \
// RUN:   | FileCheck %s
// RUN: mlt-opt %S/../../models/llama/tiny.mlir \
// RUN:   --mlt-train-pipeline="batch=8 seq-len=16 microbatches=2 schedule=gpipe recompute=mlt.swiglu overlap-grad-reduce=false" \
// RUN:   | FileCheck %s --check-prefix=GPIPE
// RUN: not mlt-opt %S/../../models/llama/tiny.mlir \
// RUN:   --mlt-train-pipeline="batch=4 seq-len=16 schedule=interleaved" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BAD
// RUN: mlt-opt %S/../../models/llama/tiny.mlir \
// RUN:   --mlt-train-pipeline="batch=8 seq-len=16 microbatches=2 pp=2 vp=2" \
// RUN:   | FileCheck %s --check-prefix=VP
// RUN: mlt-opt %S/../../models/llama/tiny.mlir \
// RUN:   --mlt-train-pipeline="batch=12 seq-len=16 microbatches=3 dp=2 zero=1 dtype=bf16 eval" \
// RUN:   | FileCheck %s --check-prefix=EVAL

// Tests that mlt-opt's mlt-train-pipeline compiles a model as mlt-run does:
// the options (mlt-run's flag names) reach the passes, and the result is
// the lowered, scheduled, memory-planned module the plan exporter writes:
// a mesh of two data-parallel ranks, bf16 copies of the parameters, the
// inputs and the loss with a copy per micro-batch, and a step whose last
// micro-batch reduces the gradients under its backward pass.
// CHECK: module attributes {mlt.mesh = #mlt.mesh<dp = 2>, {{.*}}mlt_rt.arena_bytes =
// CHECK-DAG: mlt_rt.buffer @"param_bf16:model.embed_tokens.weight" parameter_copy
// CHECK-DAG: mlt_rt.buffer @tokens input per_microbatch 3 offset
// CHECK-DAG: mlt_rt.buffer @loss output per_microbatch 3 offset
// CHECK: mlt_rt.program @micro_step_last {
// CHECK: mlt_rt.launch "all_reduce_sum" {{.*}} stream 1 waits
// CHECK: mlt_rt.launch "adamw_multi"
// CHECK: mlt_rt.step @step {
// CHECK-NEXT: mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
// CHECK-NEXT: mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
// CHECK-NEXT: mlt_rt.call @micro_step_last microbatch 2 work [F2.0, B2.0]
// CHECK-NEXT: mlt_rt.call @optimizer_step
// CHECK-NEXT: }

// With schedule=gpipe the bodies are split and the activations between
// them kept per slot; with recompute=mlt.swiglu the backward's swiglu_bwd
// also recomputes the forward's output; without the overlap the optimizer step reduces
// nothing here (one rank).
// GPIPE-DAG: temporary per_slot 2 offset
// GPIPE-DAG: mlt_rt.program @forward {
// GPIPE: mlt_rt.launch "swiglu_fwd"
// GPIPE: mlt_rt.program @backward {
// GPIPE: mlt_rt.launch "swiglu_bwd" [{{.*}}] -> [{{[^,]*}}, {{[^,]*}}, {{[^,]*}}]
// GPIPE: mlt_rt.step @step {
// GPIPE-NEXT: mlt_rt.call @forward microbatch 0 slot 0 work [F0.0]
// GPIPE-NEXT: mlt_rt.call @forward microbatch 1 slot 1 work [F1.0]
// GPIPE-NEXT: mlt_rt.call @backward_first microbatch 0 slot 0 work [B0.0]
// GPIPE-NEXT: mlt_rt.call @backward microbatch 1 slot 1 work [B1.0]

// A schedule for stages of several model chunks, on one stage of one: the
// pipeline's first pass, mlt-verify-layout, refuses it as mlt-run does.
// BAD: error: schedule interleaved runs stages of several model chunks and needs vp 2 or more (and pp 2 or more) (rule schedule-fits-chunks)

// pp=2 vp=2: each stage one module of two chunks (mlt-merge-chunks),
// whose programs are named by chunk, under the interleaved schedule by
// default (both micro-batches through chunk 0, then through chunk 1).
// VP: module @stage0 attributes {{{.*}}mlt.chunks = 2 : i64
// VP: mlt_rt.step @step {
// VP-NEXT: mlt_rt.call @c0.forward microbatch 0 slot 0 work [F0.0]
// VP-NEXT: mlt_rt.call @c0.forward_send microbatch 0 slot 0
// VP-NEXT: mlt_rt.call @c0.forward microbatch 1 slot 1 work [F1.0]
// VP-NEXT: mlt_rt.call @c0.forward_send microbatch 1 slot 1
// VP-NEXT: mlt_rt.call @c1.forward_recv microbatch 0 slot 0
// VP-NEXT: mlt_rt.call @c1.forward microbatch 0 slot 0 work [F0.1]
// VP: module @stage1 attributes {{{.*}}mlt.chunks = 2 : i64

// eval: the evaluation body beside the training step, lowered on its own
// (the loss by the forward-only statistics kernels: its rows are split
// over dp, then summed), called once per micro-batch by @eval_step, which
// under ZeRO with the parameter gathers moved into the next step's first
// forward pass gathers them first; the training step is unchanged.
// EVAL: mlt_rt.program @micro_step_first backward_start
// EVAL-NEXT: mlt_rt.launch "all_gather" [@param_copy_shard.1] -> [@param_copy_bucket.1] ints [{{[0-9]+}}, 0] stream 2 token 0
// EVAL: mlt_rt.program @eval_gather_parameters {
// EVAL-NEXT: mlt_rt.launch "all_gather" [@param_copy_shard.1] -> [@param_copy_bucket.1] ints [{{[0-9]+}}, 0]{{$}}
// EVAL-NEXT: mlt_rt.launch "all_gather" [@param_copy_shard.0] -> [@param_copy_bucket.0] ints [{{[0-9]+}}, 0]{{$}}
// EVAL-NEXT: }
// EVAL: mlt_rt.program @eval_forward {
// EVAL-NOT: _bwd
// EVAL-NOT: grad:
// EVAL: mlt_rt.launch "cross_entropy_stats"
// EVAL-NEXT: mlt_rt.launch "cross_entropy_combine"
// EVAL-NEXT: mlt_rt.launch "all_reduce_sum" [{{.*}}] -> [@loss]
// EVAL-NEXT: }
// EVAL: mlt_rt.step @step {
// EVAL-NEXT: mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
// EVAL-NEXT: mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
// EVAL-NEXT: mlt_rt.call @micro_step_last microbatch 2 work [F2.0, B2.0]
// EVAL-NEXT: mlt_rt.call @optimizer_step
// EVAL-NEXT: }
// EVAL: mlt_rt.step @eval_step {
// EVAL-NEXT: mlt_rt.call @eval_gather_parameters
// EVAL-NEXT: mlt_rt.call @eval_forward microbatch 0 work [F0.0]
// EVAL-NEXT: mlt_rt.call @eval_forward microbatch 1 work [F1.0]
// EVAL-NEXT: mlt_rt.call @eval_forward microbatch 2 work [F2.0]
// EVAL-NEXT: }
