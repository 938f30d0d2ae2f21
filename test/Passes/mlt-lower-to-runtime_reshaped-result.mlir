// RUN: mlt-opt %s -mlt-specialize-shapes="batch=2 seq-len=4" -mlt-autodiff \
// RUN:     -mlt-attach-optimizer -cse -mlt-lower-to-runtime | FileCheck %s

// Tests that a loss returned through a reshape still lands in @loss: some
// launch of @micro_step writes it.
// CHECK-LABEL: mlt_rt.program @micro_step
// CHECK: mlt_rt.launch "{{[a-z_]+}}" [{{.*}}] -> [@loss{{(, @t[0-9]+)?}}]
// CHECK: mlt_rt.program @optimizer_step
module {
  mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
  func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
    %table = mlt.load @"model.embed_tokens.weight" : tensor<16x8xf32>
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<16x8xf32>
    %ce = mlt.cross_entropy %h, %labels : tensor<?x?x8xf32>, tensor<?x?xi32>
    %loss = mlt.reshape %ce : tensor<f32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}
