// RUN: mlt-opt %s -mlt-plan-memory | FileCheck %s

// Tests a side stream's temporary where temporaries meet two side streams
// (a ZeRO-2 body's reduce-scatters on stream 1 and the tp all-reduces of
// mlt-overlap-tp-comm on stream 3): @a, all-reduced on stream 1, lives
// until its join, the compute stream's launch that waits for it, which may
// not take its bytes (@t: another side stream's launch that waited for the
// launch before the join would live from the join on); @d, first written
// after the join, takes them.
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 1024 : i64}
// CHECK: mlt_rt.buffer @a temporary offset 512 :
// CHECK-NEXT: mlt_rt.buffer @t temporary offset 768 :
// CHECK-NEXT: mlt_rt.buffer @d temporary offset 512 :
// CHECK-NEXT: mlt_rt.buffer @c temporary offset 768 :
module {
  mlt_rt.buffer @x input : tensor<64xf32>
  mlt_rt.buffer @out gradient {parameter = "a"} : tensor<64xf32>
  mlt_rt.buffer @a temporary : tensor<64xf32>
  mlt_rt.buffer @t temporary : tensor<64xf32>
  mlt_rt.buffer @d temporary : tensor<64xf32>
  mlt_rt.buffer @c temporary : tensor<64xf32>
  mlt_rt.program @two {
    mlt_rt.launch "cast" [@x] -> [@a] ints [64] token 0
    mlt_rt.launch "all_reduce_sum" [@a] -> [@a] ints [64, 0] stream 1 waits [0] token 1
    mlt_rt.launch "add" [@x, @x] -> [@t] ints [64] waits [1]
    mlt_rt.launch "add" [@x, @x] -> [@d] ints [64]
    mlt_rt.launch "add" [@t, @d] -> [@c] ints [64] token 2
    mlt_rt.launch "all_reduce_sum" [@c] -> [@c] ints [64, 1] stream 3 waits [2] token 3
    mlt_rt.launch "add" [@c, @x] -> [@out] ints [64] waits [3]
  }
}
