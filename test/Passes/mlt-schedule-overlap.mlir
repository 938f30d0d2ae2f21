// RUN: mlt-opt %s -split-input-file -mlt-schedule-overlap="bucket-bytes=0" | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-schedule-overlap | FileCheck %s --check-prefix=BUCKET
// RUN: mlt-opt %s -split-input-file -mlt-schedule-overlap="bucket-bytes=64" | FileCheck %s --check-prefix=SMALL

// Tests that the optimizer step's leading in-place reductions of gradients
// move into a copy of the body that the step calls for its last micro-batch
// (micro_step_last, of micro_step; the step has three) with temporaries of
// its own, each right
// after the last launch that touches its gradient, on stream 1, waiting for
// a token that launch signals, and that the step calls the copy; a gradient
// the program never touches is reduced at its start, with no wait; a
// reduction that something in the optimizer step precedes (grad:c, read by
// sum_squares first) stays there; the other programs keep their launches.
// CHECK-LABEL: mlt_rt.buffer @t1 temporary : tensor<16xf32>
// CHECK: mlt_rt.buffer @s1 temporary : tensor<f32>
// CHECK-NEXT: mlt_rt.buffer @t0.micro_step_last temporary : tensor<16xf32>
// CHECK: mlt_rt.program @micro_step {
// CHECK-NEXT: mlt_rt.launch "add" [@x, @x] -> [@t0] ints [16]{{$}}
// CHECK-NEXT: mlt_rt.launch "accumulate" [@t0] -> [@"grad:b"] ints [16]{{$}}
// CHECK-NEXT: mlt_rt.launch "accumulate" [@x] -> [@"grad:a"] ints [16]{{$}}
// CHECK-NEXT: mlt_rt.launch "accumulate" [@t0] -> [@"grad:a"] ints [16]{{$}}
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.program @micro_step_last {
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:d"] -> [@"grad:d"] ints [16, 0] stream 1{{$}}
// CHECK-NEXT: mlt_rt.launch "add" [@x, @x] -> [@t0.micro_step_last] ints [16]{{$}}
// CHECK-NEXT: mlt_rt.launch "accumulate" [@t0.micro_step_last] -> [@"grad:b"] ints [16] token 0
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:b"] -> [@"grad:b"] ints [16, 0] stream 1 waits [0]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@x] -> [@"grad:a"] ints [16]{{$}}
// CHECK-NEXT: mlt_rt.launch "accumulate" [@t0.micro_step_last] -> [@"grad:a"] ints [16] token 1
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [16, 0] stream 1 waits [1]
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.program @micro_step_first {
// CHECK-NEXT: mlt_rt.launch "add" [@x, @x] -> [@t1] ints [16]{{$}}
// CHECK-NEXT: mlt_rt.launch "cast" [@t1] -> [@"grad:b"] ints [16]{{$}}
// CHECK-NEXT: mlt_rt.launch "cast" [@x] -> [@"grad:a"] ints [16]{{$}}
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.program @optimizer_step {
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@"grad:c"] -> [@s0] ints [16]
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:c"] -> [@"grad:c"] ints [16, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "sum_squares" [@"grad:a"] -> [@s1] ints [16]
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.step @step {
// CHECK-NEXT: mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
// CHECK-NEXT: mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
// CHECK-NEXT: mlt_rt.call @micro_step_last microbatch 2 work [F2.0, B2.0]
// CHECK-NEXT: mlt_rt.call @optimizer_step
// CHECK-NEXT: }

// With the default buckets (32 MiB) the three gradients are one bucket,
// after the last of them is ready; grad:d is ready first.
// BUCKET: mlt_rt.program @micro_step_last {
// BUCKET-NEXT: mlt_rt.launch "add" [@x, @x] -> [@t0.micro_step_last] ints [16]{{$}}
// BUCKET-NEXT: mlt_rt.launch "accumulate" [@t0.micro_step_last] -> [@"grad:b"] ints [16]{{$}}
// BUCKET-NEXT: mlt_rt.launch "accumulate" [@x] -> [@"grad:a"] ints [16]{{$}}
// BUCKET-NEXT: mlt_rt.launch "accumulate" [@t0.micro_step_last] -> [@"grad:a"] ints [16] token 0
// BUCKET-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:d"] -> [@"grad:d"] ints [16, 0] stream 1 waits [0]
// BUCKET-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:b"] -> [@"grad:b"] ints [16, 0] stream 1{{$}}
// BUCKET-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [16, 0] stream 1{{$}}
// BUCKET-NEXT: }

// With 64-byte buckets, grad:d (64 bytes) closes one at the start and
// grad:b and grad:a are a bucket each.
// SMALL: mlt_rt.program @micro_step_last {
// SMALL-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:d"] -> [@"grad:d"] ints [16, 0] stream 1{{$}}
// SMALL-NEXT: mlt_rt.launch "add"
// SMALL-NEXT: mlt_rt.launch "accumulate" [@t0.micro_step_last] -> [@"grad:b"] ints [16] token 0
// SMALL-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:b"] -> [@"grad:b"] ints [16, 0] stream 1 waits [0]
mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<16xf32>
mlt_rt.buffer @"grad:b" gradient {parameter = "b"} : tensor<16xf32>
mlt_rt.buffer @"grad:c" gradient {parameter = "c"} : tensor<16xf32>
mlt_rt.buffer @"grad:d" gradient {parameter = "d"} : tensor<16xf32>
mlt_rt.buffer @x input : tensor<16xf32>
mlt_rt.buffer @t0 temporary : tensor<16xf32>
mlt_rt.buffer @t1 temporary : tensor<16xf32>
mlt_rt.buffer @s0 temporary : tensor<f32>
mlt_rt.buffer @s1 temporary : tensor<f32>
mlt_rt.program @micro_step {
  mlt_rt.launch "add" [@x, @x] -> [@t0] ints [16]
  mlt_rt.launch "accumulate" [@t0] -> [@"grad:b"] ints [16]
  mlt_rt.launch "accumulate" [@x] -> [@"grad:a"] ints [16]
  mlt_rt.launch "accumulate" [@t0] -> [@"grad:a"] ints [16]
}
mlt_rt.program @micro_step_first {
  mlt_rt.launch "add" [@x, @x] -> [@t1] ints [16]
  mlt_rt.launch "cast" [@t1] -> [@"grad:b"] ints [16]
  mlt_rt.launch "cast" [@x] -> [@"grad:a"] ints [16]
}
mlt_rt.program @optimizer_step {
  mlt_rt.launch "all_reduce_sum" [@"grad:d"] -> [@"grad:d"] ints [16, 0]
  mlt_rt.launch "all_reduce_sum" [@"grad:b"] -> [@"grad:b"] ints [16, 0]
  mlt_rt.launch "sum_squares" [@"grad:c"] -> [@s0] ints [16]
  mlt_rt.launch "all_reduce_sum" [@"grad:c"] -> [@"grad:c"] ints [16, 0]
  mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [16, 0]
  mlt_rt.launch "sum_squares" [@"grad:a"] -> [@s1] ints [16]
}

mlt_rt.step @step {
  mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
  mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
  mlt_rt.call @micro_step microbatch 2 work [F2.0, B2.0]
  mlt_rt.call @optimizer_step
}

// -----

// Tests that in a step of one micro-batch the copy is of micro_step_first
// (micro_step_only), and that the bodies the step no longer calls go, with
// the temporaries only they used.
// CHECK-LABEL: mlt_rt.buffer @"grad:a"
// CHECK-NOT: @t0
// CHECK-NOT: @t1
// CHECK: mlt_rt.buffer @t1.micro_step_only temporary : tensor<16xf32>
// CHECK-NOT: mlt_rt.program @micro_step {
// CHECK-NOT: mlt_rt.program @micro_step_first {
// CHECK: mlt_rt.program @micro_step_only {
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:d"] -> [@"grad:d"] ints [16, 0] stream 1{{$}}
// CHECK-NEXT: mlt_rt.launch "add" [@x, @x] -> [@t1.micro_step_only] ints [16]{{$}}
// CHECK-NEXT: mlt_rt.launch "cast" [@t1.micro_step_only] -> [@"grad:b"] ints [16] token 0
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:b"] -> [@"grad:b"] ints [16, 0] stream 1 waits [0]
// CHECK-NEXT: mlt_rt.launch "cast" [@x] -> [@"grad:a"] ints [16] token 1
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [16, 0] stream 1 waits [1]
// CHECK-NEXT: }
// CHECK-NEXT: mlt_rt.program @optimizer_step {
// CHECK: mlt_rt.step @step {
// CHECK-NEXT: mlt_rt.call @micro_step_only microbatch 0 work [F0.0, B0.0]
// CHECK-NEXT: mlt_rt.call @optimizer_step
// CHECK-NEXT: }
mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<16xf32>
mlt_rt.buffer @"grad:b" gradient {parameter = "b"} : tensor<16xf32>
mlt_rt.buffer @"grad:c" gradient {parameter = "c"} : tensor<16xf32>
mlt_rt.buffer @"grad:d" gradient {parameter = "d"} : tensor<16xf32>
mlt_rt.buffer @x input : tensor<16xf32>
mlt_rt.buffer @t0 temporary : tensor<16xf32>
mlt_rt.buffer @t1 temporary : tensor<16xf32>
mlt_rt.buffer @s0 temporary : tensor<f32>
mlt_rt.buffer @s1 temporary : tensor<f32>
mlt_rt.program @micro_step {
  mlt_rt.launch "add" [@x, @x] -> [@t0] ints [16]
  mlt_rt.launch "accumulate" [@t0] -> [@"grad:b"] ints [16]
  mlt_rt.launch "accumulate" [@x] -> [@"grad:a"] ints [16]
  mlt_rt.launch "accumulate" [@t0] -> [@"grad:a"] ints [16]
}
mlt_rt.program @micro_step_first {
  mlt_rt.launch "add" [@x, @x] -> [@t1] ints [16]
  mlt_rt.launch "cast" [@t1] -> [@"grad:b"] ints [16]
  mlt_rt.launch "cast" [@x] -> [@"grad:a"] ints [16]
}
mlt_rt.program @optimizer_step {
  mlt_rt.launch "all_reduce_sum" [@"grad:d"] -> [@"grad:d"] ints [16, 0]
  mlt_rt.launch "all_reduce_sum" [@"grad:b"] -> [@"grad:b"] ints [16, 0]
  mlt_rt.launch "sum_squares" [@"grad:c"] -> [@s0] ints [16]
  mlt_rt.launch "all_reduce_sum" [@"grad:c"] -> [@"grad:c"] ints [16, 0]
  mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [16, 0]
  mlt_rt.launch "sum_squares" [@"grad:a"] -> [@s1] ints [16]
}

mlt_rt.step @step {
  mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
  mlt_rt.call @optimizer_step
}

// -----

// Tests that a module without reductions of gradients in its optimizer step
// (one rank; a reduction of a temporary) is left as it is.
// CHECK-LABEL: mlt_rt.buffer @x2
// CHECK-NOT: micro_step_last
// CHECK: mlt_rt.launch "all_reduce_sum" [@y2] -> [@y2] ints [16, 0]{{$}}
// CHECK-NOT: micro_step_last
mlt_rt.buffer @x2 input : tensor<16xf32>
mlt_rt.buffer @y2 temporary : tensor<16xf32>
mlt_rt.program @micro_step {
  mlt_rt.launch "add" [@x2, @x2] -> [@y2] ints [16]
}
mlt_rt.program @optimizer_step {
  mlt_rt.launch "add" [@x2, @x2] -> [@y2] ints [16]
  mlt_rt.launch "all_reduce_sum" [@y2] -> [@y2] ints [16, 0]
}
mlt_rt.step @step {
  mlt_rt.call @micro_step microbatch 0 work [F0.0, B0.0]
  mlt_rt.call @optimizer_step
}
