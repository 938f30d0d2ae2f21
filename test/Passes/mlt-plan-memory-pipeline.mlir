// RUN: mlt-opt %s -mlt-specialize-shapes="batch=2 seq-len=4" -mlt-autodiff -mlt-attach-optimizer \
// RUN:     -cse -mlt-lower-to-runtime -mlt-plan-memory \
// RUN:   | FileCheck %s --implicit-check-not='{{(parameter|gradient|optimizer_state|input|output|temporary|constant) [:{]}}'

// Tests that in a lowered training program every buffer gets an offset
// (none is left without), the persistent buffers fill [0, 8192) in
// declaration order with the temporaries after them, temporaries of disjoint
// lifetimes reuse memory (the embedding's gradient @t7 takes the logits'
// place; the head's gradient goes straight into its buffer), outputs are
// written over inputs that die where the kernel allows it (the logits'
// gradient @t3 over the logits @t2, the norm's input gradient @t5 over its
// output gradient @t4), and the arena is the persistent size plus the
// larger program's peak.
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 9472 : i64, mlt_rt.microbatches = 1 : i64}
// CHECK-NEXT: mlt_rt.buffer @"param:model.embed_tokens.weight" parameter offset 0 {{.*}} : tensor<16x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"grad:model.embed_tokens.weight" gradient offset 512 {{.*}} : tensor<16x8xf32>
// CHECK-NEXT: mlt_rt.buffer @"exp_avg:model.embed_tokens.weight" optimizer_state offset 1024
// CHECK-NEXT: mlt_rt.buffer @"exp_avg_sq:model.embed_tokens.weight" optimizer_state offset 1536
// CHECK-NEXT: mlt_rt.buffer @"param:model.norm.weight" parameter offset 2048 {{.*}} : tensor<8xf32>
// CHECK-NEXT: mlt_rt.buffer @"grad:model.norm.weight" gradient offset 2304
// CHECK: mlt_rt.buffer @tokens input per_microbatch 1 offset 5120 : tensor<2x4xi32>
// CHECK-NEXT: mlt_rt.buffer @labels input per_microbatch 1 offset 5376 : tensor<2x4xi32>
// CHECK-NEXT: mlt_rt.buffer @loss output per_microbatch 1 offset 5632 : tensor<f32>
// CHECK: mlt_rt.buffer @t2 temporary offset 8192 : tensor<2x4x16xf32>
// CHECK-NEXT: mlt_rt.buffer @const{{[0-9]+}} constant offset 5888 {value = 1.000000e+00 : f64} : tensor<f32>
// CHECK-NEXT: mlt_rt.buffer @t3 temporary offset 8192 : tensor<2x4x16xf32>
// CHECK-NEXT: mlt_rt.buffer @t4 temporary offset [[DY:[0-9]+]] : tensor<2x4x8xf32>
// CHECK-NEXT: mlt_rt.buffer @t5 temporary offset [[DY]] : tensor<2x4x8xf32>
// CHECK: mlt_rt.buffer @t7 temporary offset 8192 : tensor<16x8xf32>
// micro_step_first's temporaries are planned like micro_step's, in the same
// space (the programs never run at once), and it shares the loss seed.
// CHECK: mlt_rt.buffer @t8 temporary offset 8704 : tensor<2x4x8xf32>
// CHECK-NOT: constant
// CHECK: mlt_rt.buffer @hyper.step input offset 7936 : tensor<f32>
// CHECK-NEXT: mlt_rt.buffer @t14 temporary offset 8192 : tensor<f32>
// CHECK: mlt_rt.program @micro_step
module {
  mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
  mlt.param @"model.norm.weight" : tensor<8xf32>
  mlt.param @"lm_head.weight" : tensor<16x8xf32>
  func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<16x8xf32>
    %w = mlt.load @"model.norm.weight" : tensor<8xf32>
    %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>
    %head = mlt.load @"lm_head.weight" : tensor<16x8xf32>
    %logits = mlt.matmul %n, %head transpose_rhs : tensor<?x?x8xf32>, tensor<16x8xf32>
    %loss = mlt.cross_entropy %logits, %labels : tensor<?x?x16xf32>, tensor<?x?xi32>
    return %loss : tensor<f32>
  }
}
