// RUN: mlt-opt %s -split-input-file -mlt-multi-tensor | FileCheck %s

// Tests that consecutive adamw launches with the same scalars become one
// adamw_multi of their tensors (gradients, then the scalars; outputs grouped
// by kind; n and decay per tensor), with and without compute copies; that
// a launch with other scalars, another output count, a token, or another
// kernel in between starts a new group; and that a group of one stays adamw.
// CHECK-LABEL: mlt_rt.program @optimizer_step {
// CHECK-NEXT: mlt_rt.launch "adamw_multi" [@ga, @gb, @gc, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@pa, @pb, @pc, @ma, @mb, @mc, @va, @vb, @vc] ints [16, 1, 4, 0, 16, 1]{{$}}
// CHECK-NEXT: mlt_rt.launch "adamw" [@gd, @c, @lr2, @b1, @b2, @eps, @wd, @step] -> [@pd, @md, @vd] ints [16, 1]{{$}}
// CHECK-NEXT: mlt_rt.launch "sum_squares"
// CHECK-NEXT: mlt_rt.launch "adamw_multi" [@ga, @gb, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@pa, @pb, @ma, @mb, @va, @vb, @ca, @cb] ints [16, 1, 4, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "adamw" [@gc, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@pc, @mc, @vc] ints [16, 1]{{$}}
// CHECK-NEXT: mlt_rt.launch "adamw" [@gd, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@pd, @md, @vd] ints [16, 1] token 0
// CHECK-NEXT: }
module {
  mlt_rt.buffer @ga gradient {parameter = "a"} : tensor<16xf32>
  mlt_rt.buffer @gb gradient {parameter = "b"} : tensor<4xf32>
  mlt_rt.buffer @gc gradient {parameter = "c"} : tensor<16xf32>
  mlt_rt.buffer @gd gradient {parameter = "d"} : tensor<16xf32>
  mlt_rt.buffer @pa parameter {parameter = "a"} : tensor<16xf32>
  mlt_rt.buffer @pb parameter {parameter = "b"} : tensor<4xf32>
  mlt_rt.buffer @pc parameter {parameter = "c"} : tensor<16xf32>
  mlt_rt.buffer @pd parameter {parameter = "d"} : tensor<16xf32>
  mlt_rt.buffer @ma optimizer_state {parameter = "a"} : tensor<16xf32>
  mlt_rt.buffer @mb optimizer_state {parameter = "b"} : tensor<4xf32>
  mlt_rt.buffer @mc optimizer_state {parameter = "c"} : tensor<16xf32>
  mlt_rt.buffer @md optimizer_state {parameter = "d"} : tensor<16xf32>
  mlt_rt.buffer @va optimizer_state {parameter = "a"} : tensor<16xf32>
  mlt_rt.buffer @vb optimizer_state {parameter = "b"} : tensor<4xf32>
  mlt_rt.buffer @vc optimizer_state {parameter = "c"} : tensor<16xf32>
  mlt_rt.buffer @vd optimizer_state {parameter = "d"} : tensor<16xf32>
  mlt_rt.buffer @ca parameter_copy {parameter = "a"} : tensor<16xbf16>
  mlt_rt.buffer @cb parameter_copy {parameter = "b"} : tensor<4xbf16>
  mlt_rt.buffer @c input : tensor<f32>
  mlt_rt.buffer @lr input : tensor<f32>
  mlt_rt.buffer @lr2 input : tensor<f32>
  mlt_rt.buffer @b1 input : tensor<f32>
  mlt_rt.buffer @b2 input : tensor<f32>
  mlt_rt.buffer @eps input : tensor<f32>
  mlt_rt.buffer @wd input : tensor<f32>
  mlt_rt.buffer @step input : tensor<f32>
  mlt_rt.buffer @s temporary : tensor<f32>
  mlt_rt.program @optimizer_step {
    mlt_rt.launch "adamw" [@ga, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@pa, @ma, @va] ints [16, 1]
    mlt_rt.launch "adamw" [@gb, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@pb, @mb, @vb] ints [4, 0]
    mlt_rt.launch "adamw" [@gc, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@pc, @mc, @vc] ints [16, 1]
    mlt_rt.launch "adamw" [@gd, @c, @lr2, @b1, @b2, @eps, @wd, @step] -> [@pd, @md, @vd] ints [16, 1]
    mlt_rt.launch "sum_squares" [@ga] -> [@s] ints [16]
    mlt_rt.launch "adamw" [@ga, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@pa, @ma, @va, @ca] ints [16, 1]
    mlt_rt.launch "adamw" [@gb, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@pb, @mb, @vb, @cb] ints [4, 0]
    mlt_rt.launch "adamw" [@gc, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@pc, @mc, @vc] ints [16, 1]
    mlt_rt.launch "adamw" [@gd, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@pd, @md, @vd] ints [16, 1] token 0
  }
}

// -----

// Tests that consecutive sum_squares become one sum_squares_multi with their
// inputs, outputs and sizes in order; that a run ends where the inputs'
// element type changes (a launch computes in one type), at another launch in
// between, and at a launch on another stream or with tokens; and that a run
// of one stays sum_squares.
// CHECK-LABEL: mlt_rt.program @optimizer_step {
// CHECK-NEXT: mlt_rt.launch "sum_squares_multi" [@a, @b] -> [@sa, @sb] ints [4, 8]{{$}}
// CHECK-NEXT: mlt_rt.launch "sum_squares_multi" [@c, @d] -> [@sc, @sd] ints [3, 5]{{$}}
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@e] -> [@se] ints [6]{{$}}
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@se] -> [@re] ints [1, 0]
// CHECK-NEXT: mlt_rt.launch "sum_squares_multi" [@f, @a] -> [@sf, @sa] ints [7, 4]{{$}}
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@b] -> [@sb] ints [8] token 0
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@e] -> [@se] ints [6] stream 1 waits [0]
// CHECK-NEXT: mlt_rt.launch "global_norm" [@sa, @sb, @sc, @sd, @re, @sf] -> [@n]
// CHECK-NEXT: }
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  mlt_rt.buffer @a gradient {parameter = "a"} : tensor<4xf32>
  mlt_rt.buffer @b gradient {parameter = "b"} : tensor<2x4xf32>
  mlt_rt.buffer @c gradient {parameter = "c"} : tensor<3xf64>
  mlt_rt.buffer @d gradient {parameter = "d"} : tensor<5xf64>
  mlt_rt.buffer @e gradient {parameter = "e"} : tensor<6xf32>
  mlt_rt.buffer @f gradient {parameter = "f"} : tensor<7xf32>
  mlt_rt.buffer @sa temporary : tensor<f32>
  mlt_rt.buffer @sb temporary : tensor<f32>
  mlt_rt.buffer @sc temporary : tensor<f32>
  mlt_rt.buffer @sd temporary : tensor<f32>
  mlt_rt.buffer @se temporary : tensor<f32>
  mlt_rt.buffer @re temporary : tensor<f32>
  mlt_rt.buffer @sf temporary : tensor<f32>
  mlt_rt.buffer @n output : tensor<f32>
  mlt_rt.program @optimizer_step {
    mlt_rt.launch "sum_squares" [@a] -> [@sa] ints [4]
    mlt_rt.launch "sum_squares" [@b] -> [@sb] ints [8]
    mlt_rt.launch "sum_squares" [@c] -> [@sc] ints [3]
    mlt_rt.launch "sum_squares" [@d] -> [@sd] ints [5]
    mlt_rt.launch "sum_squares" [@e] -> [@se] ints [6]
    mlt_rt.launch "all_reduce_sum" [@se] -> [@re] ints [1, 0]
    mlt_rt.launch "sum_squares" [@f] -> [@sf] ints [7]
    mlt_rt.launch "sum_squares" [@a] -> [@sa] ints [4]
    mlt_rt.launch "sum_squares" [@b] -> [@sb] ints [8] token 0
    mlt_rt.launch "sum_squares" [@e] -> [@se] ints [6] stream 1 waits [0]
    mlt_rt.launch "global_norm" [@sa, @sb, @sc, @sd, @re, @sf] -> [@n]
  }
}

// -----

// Gradients reduced in bf16 (ZeRO-2's one-micro-batch slices): a bf16
// gradient joins f32 ones in one sum_squares_multi and one adamw_multi (the
// kernels widen it as they read it), and a lone launch that reads one
// becomes a multi-tensor launch of one, since only those read bf16
// gradients; a lone f32 one stays as it was.
// CHECK-LABEL: mlt_rt.program @optimizer_step {
// CHECK-NEXT: mlt_rt.launch "sum_squares_multi" [@h, @g] -> [@sh, @sg] ints [8, 4]{{$}}
// CHECK-NEXT: mlt_rt.launch "global_norm" [@sh, @sg] -> [@n]
// CHECK-NEXT: mlt_rt.launch "sum_squares_multi" [@h] -> [@sh] ints [8]{{$}}
// CHECK-NEXT: mlt_rt.launch "global_norm" [@sh] -> [@n]
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@g] -> [@sg] ints [4]{{$}}
// CHECK-NEXT: mlt_rt.launch "global_norm" [@sg] -> [@n]
// CHECK-NEXT: mlt_rt.launch "adamw_multi" [@h, @g, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@ph, @pg, @mh, @mg, @vh, @vg] ints [8, 1, 4, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "global_norm" [@sh] -> [@n]
// CHECK-NEXT: mlt_rt.launch "adamw_multi" [@h, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@ph, @mh, @vh] ints [8, 1]{{$}}
// CHECK-NEXT: }
module {
  mlt_rt.buffer @h gradient {parameter = "h"} : tensor<8xbf16>
  mlt_rt.buffer @g gradient {parameter = "g"} : tensor<4xf32>
  mlt_rt.buffer @ph parameter {parameter = "h"} : tensor<8xf32>
  mlt_rt.buffer @pg parameter {parameter = "g"} : tensor<4xf32>
  mlt_rt.buffer @mh optimizer_state {parameter = "h"} : tensor<8xf32>
  mlt_rt.buffer @mg optimizer_state {parameter = "g"} : tensor<4xf32>
  mlt_rt.buffer @vh optimizer_state {parameter = "h"} : tensor<8xf32>
  mlt_rt.buffer @vg optimizer_state {parameter = "g"} : tensor<4xf32>
  mlt_rt.buffer @sh temporary : tensor<f32>
  mlt_rt.buffer @sg temporary : tensor<f32>
  mlt_rt.buffer @n output : tensor<f32>
  mlt_rt.buffer @c temporary : tensor<f32>
  mlt_rt.buffer @lr input : tensor<f32>
  mlt_rt.buffer @b1 input : tensor<f32>
  mlt_rt.buffer @b2 input : tensor<f32>
  mlt_rt.buffer @eps input : tensor<f32>
  mlt_rt.buffer @wd input : tensor<f32>
  mlt_rt.buffer @step input : tensor<f32>
  mlt_rt.program @optimizer_step {
    mlt_rt.launch "sum_squares" [@h] -> [@sh] ints [8]
    mlt_rt.launch "sum_squares" [@g] -> [@sg] ints [4]
    mlt_rt.launch "global_norm" [@sh, @sg] -> [@n]
    mlt_rt.launch "sum_squares" [@h] -> [@sh] ints [8]
    mlt_rt.launch "global_norm" [@sh] -> [@n]
    mlt_rt.launch "sum_squares" [@g] -> [@sg] ints [4]
    mlt_rt.launch "global_norm" [@sg] -> [@n]
    mlt_rt.launch "adamw" [@h, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@ph, @mh, @vh] ints [8, 1]
    mlt_rt.launch "adamw" [@g, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@pg, @mg, @vg] ints [4, 0]
    mlt_rt.launch "global_norm" [@sh] -> [@n]
    mlt_rt.launch "adamw" [@h, @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@ph, @mh, @vh] ints [8, 1]
  }
}
