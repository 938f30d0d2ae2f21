// RUN: mlt-opt %s -split-input-file -mlt-lower-to-runtime | FileCheck %s

// Tests that consecutive sum_squares become one sum_squares_multi launch
// with their inputs, outputs and sizes in order; that a run ends where the
// gradients' element type changes (an instruction computes in one type) and
// where another launch comes between (an all_reduce here); and that a lone
// sum_squares stays as it is.
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  mlt.param @a : tensor<4xf32>
  mlt.param @b : tensor<2x4xf32>
  mlt.param @c : tensor<3xf64>
  mlt.param @d : tensor<5xf64>
  mlt.param @e : tensor<6xf32>
  mlt.param @f : tensor<7xf32>
  func.func @micro_step(%tokens: tensor<2x4xi32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
    %w = mlt.load @a : tensor<4xf32>
    %loss = mlt.sum_squares %w : tensor<4xf32>
    return %loss : tensor<f32>
  }
  func.func @optimizer_step() -> tensor<f32> {
    %ga = mlt.load_grad @a : tensor<4xf32>
    %sa = mlt.sum_squares %ga : tensor<4xf32>
    %gb = mlt.load_grad @b : tensor<2x4xf32>
    %sb = mlt.sum_squares %gb : tensor<2x4xf32>
    %gc = mlt.load_grad @c : tensor<3xf64>
    %sc = mlt.sum_squares %gc : tensor<3xf64>
    %gd = mlt.load_grad @d : tensor<5xf64>
    %sd = mlt.sum_squares %gd : tensor<5xf64>
    %ge = mlt.load_grad @e : tensor<6xf32>
    %se = mlt.sum_squares %ge : tensor<6xf32>
    %re = mlt.all_reduce %se over "tp" : tensor<f32>
    %gf = mlt.load_grad @f : tensor<7xf32>
    %sf = mlt.sum_squares %gf : tensor<7xf32>
    %norm = mlt.global_norm %sa, %sb, %sc, %sd, %re, %sf : tensor<f32>
    return %norm : tensor<f32>
  }
}
// CHECK-LABEL: mlt_rt.program @micro_step {
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@"param:a"] -> [@loss] ints [4]
// CHECK-NEXT: }
// CHECK-LABEL: mlt_rt.program @optimizer_step {
// CHECK-NEXT: mlt_rt.launch "sum_squares_multi" [@"grad:a", @"grad:b"] -> [@[[SA:t[0-9]+]], @[[SB:t[0-9]+]]] ints [4, 8]
// CHECK-NEXT: mlt_rt.launch "sum_squares_multi" [@"grad:c", @"grad:d"] -> [@[[SC:t[0-9]+]], @[[SD:t[0-9]+]]] ints [3, 5]
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@"grad:e"] -> [@[[SE:t[0-9]+]]] ints [6]
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@[[SE]]] -> [@[[RE:t[0-9]+]]] ints [1, 0]
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@"grad:f"] -> [@[[SF:t[0-9]+]]] ints [7]
// CHECK-NEXT: mlt_rt.launch "global_norm" [@[[SA]], @[[SB]], @[[SC]], @[[SD]], @[[RE]], @[[SF]]] -> [@grad_norm]
// CHECK-NEXT: }
// CHECK-NOT: sum_squares
