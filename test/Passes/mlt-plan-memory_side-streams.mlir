// RUN: mlt-opt %s -mlt-plan-memory | FileCheck %s

// Tests how long a temporary that a launch on another stream touches lives.
// @joined: the bucket @b (through its view @v) is all-reduced on stream 1,
// and the compute stream's next launch waits for it: @t1, which that launch
// writes, may take @b's bytes. @unjoined: nothing waits for the all-reduce
// of @c before the program's end, where the streams join, so @t2 may not.
// @early: stream 1 starts @s's all-reduce once the compute stream's first
// launch is done, so it may run beside the second, the last that reads
// @t3: @s may not take @t3's bytes although its first launch comes later
// in program order.
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 1024 : i64}
// CHECK: mlt_rt.buffer @b temporary offset 512 {bucket}
// CHECK-NEXT: mlt_rt.buffer @v temporary offset 512 {view = @b, view_offset = 0 : i64}
// CHECK-NEXT: mlt_rt.buffer @t1 temporary offset 512 :
// CHECK-NEXT: mlt_rt.buffer @c temporary offset 512 {bucket}
// CHECK-NEXT: mlt_rt.buffer @w temporary offset 512 {view = @c, view_offset = 0 : i64}
// CHECK-NEXT: mlt_rt.buffer @t2 temporary offset 768 :
// CHECK-NEXT: mlt_rt.buffer @t3 temporary offset 512 :
// CHECK-NEXT: mlt_rt.buffer @s temporary offset 768 :
module {
  mlt_rt.buffer @x input : tensor<64xf32>
  mlt_rt.buffer @out gradient {parameter = "a"} : tensor<64xf32>
  mlt_rt.buffer @b temporary {bucket} : tensor<64xf32>
  mlt_rt.buffer @v temporary {view = @b, view_offset = 0} : tensor<64xf32>
  mlt_rt.buffer @t1 temporary : tensor<64xf32>
  mlt_rt.buffer @c temporary {bucket} : tensor<64xf32>
  mlt_rt.buffer @w temporary {view = @c, view_offset = 0} : tensor<64xf32>
  mlt_rt.buffer @t2 temporary : tensor<64xf32>
  mlt_rt.buffer @t3 temporary : tensor<64xf32>
  mlt_rt.buffer @s temporary : tensor<64xf32>
  mlt_rt.program @joined {
    mlt_rt.launch "cast" [@x] -> [@v] ints [64] token 0
    mlt_rt.launch "all_reduce_sum" [@b] -> [@b] ints [64, 0] stream 1 waits [0] token 1
    mlt_rt.launch "add" [@x, @x] -> [@t1] ints [64] waits [1]
    mlt_rt.launch "add" [@t1, @x] -> [@out] ints [64]
  }
  mlt_rt.program @unjoined {
    mlt_rt.launch "cast" [@x] -> [@w] ints [64] token 0
    mlt_rt.launch "all_reduce_sum" [@c] -> [@c] ints [64, 0] stream 1 waits [0]
    mlt_rt.launch "add" [@x, @x] -> [@t2] ints [64]
    mlt_rt.launch "add" [@t2, @x] -> [@out] ints [64]
  }
  mlt_rt.program @early {
    mlt_rt.launch "add" [@x, @x] -> [@t3] ints [64] token 0
    mlt_rt.launch "add" [@t3, @x] -> [@out] ints [64]
    mlt_rt.launch "all_reduce_sum" [@x] -> [@s] ints [64, 0] stream 1 waits [0] token 1
    mlt_rt.launch "add" [@s, @x] -> [@out] ints [64] waits [1]
  }
}
