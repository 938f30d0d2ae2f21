// RUN: mlt-opt %s -split-input-file -mlt-overlap-tp-comm | FileCheck %s
// The `calibration` option's file must be one (read where the module has a
// tp axis): a missing file and one that is not a calibration are named.
// RUN: not mlt-opt %s -split-input-file -mlt-overlap-tp-comm=calibration=%t.missing 2>&1 \
// RUN:   | FileCheck %s --check-prefix=MISSING
// MISSING: error: mlt-overlap-tp-comm: calibration '{{.*}}.missing': {{[Nn]}}o such file or directory
// RUN: not mlt-opt %s -split-input-file -mlt-overlap-tp-comm=calibration=%s 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NOT-CALIBRATION
// NOT-CALIBRATION: error: mlt-overlap-tp-comm: calibration '{{.*}}mlt-overlap-tp-comm.mlir': {{.+}}

// Tests that the backward pass's all-reduce over tp of an input gradient
// (@dx, the column-parallel products' partial sums) moves to stream 3,
// waiting for its producer's token, and that the weight-gradient products
// before it that it does not depend on move right after it in their order
// (grad:w1's, then the group of grad:w2 and grad:w3), while a product the
// launches between depend on (grad:w0's, which the add reads) and one
// reading the reduction's output stay; the first later launch of the
// compute stream that reads the output waits for the reduction's token
// (those after it, the dp all-reduce among them, are ordered by it). The
// all-reduce over dp is no input gradient's.
// CHECK-LABEL: mlt_rt.program @micro_step {
// CHECK-NEXT: mlt_rt.launch "matmul" [@dy, @x] -> [@"grad:w0"] ints [1, 8, 8, 4, 1, 0, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "add" [@"grad:w0", @"grad:w0"] -> [@s] ints [64]{{$}}
// CHECK-NEXT: mlt_rt.launch "matmul" [@dy, @"param:w1"] -> [@p] ints [1, 4, 8, 8, 0, 0, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "matmul_add" [@dy, @"param:w2", @p] -> [@dx] ints [1, 4, 8, 8, 0, 0, 0] token 0
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@dx] -> [@dxs] ints [32, 1] stream 3 waits [0] token 1
// CHECK-NEXT: mlt_rt.launch "matmul" [@dy, @x] -> [@"grad:w1"] ints [1, 8, 8, 4, 1, 0, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "matmul_group" [@dy, @dy, @x, @x] -> [@"grad:w2", @"grad:w3"] ints [1, 8, 8, 4, 1, 0, 0, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "add" [@dxs, @x] -> [@z] ints [32] waits [1]
// CHECK-NEXT: mlt_rt.launch "matmul" [@dxs, @x] -> [@"grad:w4"] ints [1, 8, 8, 4, 1, 0, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@"grad:w4"] -> [@"grad:w4"] ints [64, 0]{{$}}
// CHECK-NEXT: }
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>} {
mlt_rt.buffer @"param:w1" parameter {parameter = "w1"} : tensor<8x8xf32>
mlt_rt.buffer @"param:w2" parameter {parameter = "w2"} : tensor<8x8xf32>
mlt_rt.buffer @"grad:w0" gradient {parameter = "w0"} : tensor<8x8xf32>
mlt_rt.buffer @"grad:w1" gradient {parameter = "w1"} : tensor<8x8xf32>
mlt_rt.buffer @"grad:w2" gradient {parameter = "w2"} : tensor<8x8xf32>
mlt_rt.buffer @"grad:w3" gradient {parameter = "w3"} : tensor<8x8xf32>
mlt_rt.buffer @"grad:w4" gradient {parameter = "w4"} : tensor<8x8xf32>
mlt_rt.buffer @x input : tensor<4x8xf32>
mlt_rt.buffer @dy temporary : tensor<4x8xf32>
mlt_rt.buffer @p temporary : tensor<4x8xf32>
mlt_rt.buffer @dx temporary : tensor<4x8xf32>
mlt_rt.buffer @dxs temporary : tensor<4x8xf32>
mlt_rt.buffer @s temporary : tensor<8x8xf32>
mlt_rt.buffer @z temporary : tensor<4x8xf32>
mlt_rt.program @micro_step {
  mlt_rt.launch "matmul" [@dy, @x] -> [@"grad:w0"] ints [1, 8, 8, 4, 1, 0, 0]
  mlt_rt.launch "matmul" [@dy, @x] -> [@"grad:w1"] ints [1, 8, 8, 4, 1, 0, 0]
  mlt_rt.launch "add" [@"grad:w0", @"grad:w0"] -> [@s] ints [64]
  mlt_rt.launch "matmul" [@dy, @"param:w1"] -> [@p] ints [1, 4, 8, 8, 0, 0, 0]
  mlt_rt.launch "matmul_group" [@dy, @dy, @x, @x] -> [@"grad:w2", @"grad:w3"] ints [1, 8, 8, 4, 1, 0, 0, 0]
  mlt_rt.launch "matmul_add" [@dy, @"param:w2", @p] -> [@dx] ints [1, 4, 8, 8, 0, 0, 0]
  mlt_rt.launch "all_reduce_sum" [@dx] -> [@dxs] ints [32, 1]
  mlt_rt.launch "add" [@dxs, @x] -> [@z] ints [32]
  mlt_rt.launch "matmul" [@dxs, @x] -> [@"grad:w4"] ints [1, 8, 8, 4, 1, 0, 0]
  mlt_rt.launch "all_reduce_sum" [@"grad:w4"] -> [@"grad:w4"] ints [64, 0]
}
}

// -----

// Tests a ZeRO-2 body: the gradients are views of temporary buckets; the
// first bucket's reduce-scatter on stream 1 waits for its last writer's
// token, and the walk back from the all-reduce stops there; the second
// bucket's product moves after the all-reduce.
// CHECK-LABEL: mlt_rt.program @zero2 {
// CHECK-NEXT: mlt_rt.launch "matmul" [@dy, @x] -> [@g1] ints [1, 8, 8, 4, 1, 0, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "matmul" [@dy, @x] -> [@g2] ints [1, 8, 8, 4, 1, 0, 0] token 0
// CHECK-NEXT: mlt_rt.launch "reduce_scatter_sum" [@b1] -> [@s1] ints [64, 0] stream 1 waits [0]{{$}}
// CHECK-NEXT: mlt_rt.launch "matmul" [@dy, @"param:w1"] -> [@dx] ints [1, 4, 8, 8, 0, 0, 0] token 1
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@dx] -> [@dxs] ints [32, 1] stream 3 waits [1] token 2
// CHECK-NEXT: mlt_rt.launch "matmul" [@dy, @x] -> [@h] ints [1, 8, 8, 4, 1, 0, 0]{{$}}
// CHECK-NEXT: }
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>} {
mlt_rt.buffer @"param:w1" parameter {parameter = "w1"} : tensor<8x8xf32>
mlt_rt.buffer @x input : tensor<4x8xf32>
mlt_rt.buffer @dy temporary : tensor<4x8xf32>
mlt_rt.buffer @dx temporary : tensor<4x8xf32>
mlt_rt.buffer @dxs temporary : tensor<4x8xf32>
mlt_rt.buffer @b1 temporary {bucket} : tensor<128xf32>
mlt_rt.buffer @g1 temporary {view = @b1, view_offset = 0} : tensor<8x8xf32>
mlt_rt.buffer @g2 temporary {view = @b1, view_offset = 64} : tensor<8x8xf32>
mlt_rt.buffer @s1 temporary : tensor<64xf32>
mlt_rt.buffer @b2 temporary {bucket} : tensor<64xf32>
mlt_rt.buffer @h temporary {view = @b2, view_offset = 0} : tensor<8x8xf32>
mlt_rt.program @zero2 {
  mlt_rt.launch "matmul" [@dy, @x] -> [@g1] ints [1, 8, 8, 4, 1, 0, 0]
  mlt_rt.launch "matmul" [@dy, @x] -> [@g2] ints [1, 8, 8, 4, 1, 0, 0] token 0
  mlt_rt.launch "reduce_scatter_sum" [@b1] -> [@s1] ints [64, 0] stream 1 waits [0]
  mlt_rt.launch "matmul" [@dy, @x] -> [@h] ints [1, 8, 8, 4, 1, 0, 0]
  mlt_rt.launch "matmul" [@dy, @"param:w1"] -> [@dx] ints [1, 4, 8, 8, 0, 0, 0]
  mlt_rt.launch "all_reduce_sum" [@dx] -> [@dxs] ints [32, 1]
}
}

// -----

// Tests that a module without a tp axis is unchanged.
// CHECK-LABEL: mlt_rt.program @dp_only {
// CHECK-NEXT: mlt_rt.launch "matmul" [@dy, @x] -> [@"grad:w1"] ints [1, 8, 8, 4, 1, 0, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@dy] -> [@dxs] ints [32, 0]{{$}}
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
mlt_rt.buffer @"grad:w1" gradient {parameter = "w1"} : tensor<8x8xf32>
mlt_rt.buffer @x input : tensor<4x8xf32>
mlt_rt.buffer @dy temporary : tensor<4x8xf32>
mlt_rt.buffer @dxs temporary : tensor<4x8xf32>
mlt_rt.program @dp_only {
  mlt_rt.launch "matmul" [@dy, @x] -> [@"grad:w1"] ints [1, 8, 8, 4, 1, 0, 0]
  mlt_rt.launch "all_reduce_sum" [@dy] -> [@dxs] ints [32, 0]
}
}
