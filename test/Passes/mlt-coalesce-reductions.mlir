// RUN: mlt-opt %s -split-input-file -mlt-coalesce-reductions | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-coalesce-reductions -mlt-plan-memory | FileCheck %s --check-prefix=MEM

// Tests a run of three gradients' all-reduces on stream 1 over axis 0 (the
// first waits, the last is waited for) as one all-reduce of a flat buffer
// holding them in the run's order, each at a multiple of 128 elements; the
// all-reduce over another axis, and an activation's, stay as they are.
// CHECK-LABEL: module
// CHECK: mlt_rt.buffer @grad_flat.0 gradient {bucket} : tensor<384xf32>
// CHECK: mlt_rt.buffer @"grad:a" gradient {parameter = "a", view = @grad_flat.0, view_offset = 0 : i64} : tensor<100xf32>
// CHECK: mlt_rt.buffer @"grad:b" gradient {parameter = "b", view = @grad_flat.0, view_offset = 256 : i64} : tensor<64xf32>
// CHECK: mlt_rt.buffer @"grad:c" gradient {parameter = "c", view = @grad_flat.0, view_offset = 128 : i64} : tensor<8x16xf32>
// CHECK: mlt_rt.buffer @"grad:d" gradient {parameter = "d"} : tensor<64xf32>
// CHECK-LABEL: mlt_rt.program @micro_step_last {
// CHECK-NEXT: mlt_rt.launch "accumulate"
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@grad_flat.0] -> [@grad_flat.0] ints [384, 0] stream 1 waits [0] token 1
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:d"] -> [@"grad:d"] ints [64, 1] stream 1
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@x] -> [@x] ints [64, 0]
// CHECK-NEXT: mlt_rt.launch "accumulate" [@x] -> [@"grad:b"] ints [64] waits [1]
// CHECK-NEXT: }
// The flat buffer is placed with the persistent buffers, its gradients
// inside it.
// MEM: mlt_rt.buffer @grad_flat.0 gradient offset 0 {bucket} : tensor<384xf32>
// MEM: mlt_rt.buffer @"grad:a" gradient offset 0
// MEM: mlt_rt.buffer @"grad:b" gradient offset 1024
// MEM: mlt_rt.buffer @"grad:c" gradient offset 512
module {
  mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<100xf32>
  mlt_rt.buffer @"grad:b" gradient {parameter = "b"} : tensor<64xf32>
  mlt_rt.buffer @"grad:c" gradient {parameter = "c"} : tensor<8x16xf32>
  mlt_rt.buffer @"grad:d" gradient {parameter = "d"} : tensor<64xf32>
  mlt_rt.buffer @x temporary : tensor<64xf32>
  mlt_rt.program @micro_step_last {
    mlt_rt.launch "accumulate" [@x] -> [@"grad:a"] ints [64] token 0
    mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [100, 0] stream 1 waits [0]
    mlt_rt.launch "all_reduce_sum" [@"grad:c"] -> [@"grad:c"] ints [128, 0] stream 1
    mlt_rt.launch "all_reduce_sum" [@"grad:b"] -> [@"grad:b"] ints [64, 0] stream 1 token 1
    mlt_rt.launch "all_reduce_sum" [@"grad:d"] -> [@"grad:d"] ints [64, 1] stream 1
    mlt_rt.launch "all_reduce_sum" [@x] -> [@x] ints [64, 0]
    mlt_rt.launch "accumulate" [@x] -> [@"grad:b"] ints [64] waits [1]
  }
}

// -----

// Tests what ends a run: a launch waited for (its token), a launch that
// waits, another stream, and a gradient already a view (of a ZeRO bucket);
// a run of one stays as it is.
// CHECK-LABEL: module
// CHECK-NOT: grad_flat.1
// CHECK: mlt_rt.buffer @grad_flat.0 gradient {bucket} : tensor<256xf32>
// CHECK-LABEL: mlt_rt.program @optimizer_step {
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [64, 0] token 0
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@grad_flat.0] -> [@grad_flat.0] ints [256, 0] waits [0]
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:d"] -> [@"grad:d"] ints [64, 0] stream 1
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:e"] -> [@"grad:e"] ints [64, 0]
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:f"] -> [@"grad:f"] ints [64, 0]
// CHECK-NEXT: }
module {
  mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<64xf32>
  mlt_rt.buffer @"grad:b" gradient {parameter = "b"} : tensor<64xf32>
  mlt_rt.buffer @"grad:c" gradient {parameter = "c"} : tensor<64xf32>
  mlt_rt.buffer @"grad:d" gradient {parameter = "d"} : tensor<64xf32>
  mlt_rt.buffer @"grad:e" gradient {parameter = "e"} : tensor<64xf32>
  mlt_rt.buffer @grad_bucket gradient {bucket} : tensor<128xf32>
  mlt_rt.buffer @"grad:f" gradient {parameter = "f", view = @grad_bucket, view_offset = 0 : i64} : tensor<64xf32>
  mlt_rt.program @optimizer_step {
    mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [64, 0] token 0
    mlt_rt.launch "all_reduce_sum" [@"grad:b"] -> [@"grad:b"] ints [64, 0] waits [0]
    mlt_rt.launch "all_reduce_sum" [@"grad:c"] -> [@"grad:c"] ints [64, 0]
    mlt_rt.launch "all_reduce_sum" [@"grad:d"] -> [@"grad:d"] ints [64, 0] stream 1
    mlt_rt.launch "all_reduce_sum" [@"grad:e"] -> [@"grad:e"] ints [64, 0]
    mlt_rt.launch "all_reduce_sum" [@"grad:f"] -> [@"grad:f"] ints [64, 0]
  }
}
