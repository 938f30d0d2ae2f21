// RUN: mlt-opt %s -split-input-file -mlt-overlap-tp-comm | FileCheck %s

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

// Tests that a program whose temporaries a side stream touches already (a
// ZeRO-2 slice reduce-scattered on stream 1) is left as it is, and that a
// module without a tp axis is unchanged.
// CHECK-LABEL: mlt_rt.program @side {
// CHECK-NEXT: mlt_rt.launch "matmul" [@dy, @x] -> [@"grad:w1"] ints [1, 8, 8, 4, 1, 0, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "matmul" [@dy, @"param:w1"] -> [@dx] ints [1, 4, 8, 8, 0, 0, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "all_reduce_sum" [@dx] -> [@dxs] ints [32, 1]{{$}}
// CHECK-NEXT: mlt_rt.launch "reduce_scatter_sum" [@"grad:w1"] -> [@slice] ints [32, 0] stream 1{{$}}
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>} {
mlt_rt.buffer @"param:w1" parameter {parameter = "w1"} : tensor<8x8xf32>
mlt_rt.buffer @"grad:w1" gradient {parameter = "w1"} : tensor<8x8xf32>
mlt_rt.buffer @x input : tensor<4x8xf32>
mlt_rt.buffer @dy temporary : tensor<4x8xf32>
mlt_rt.buffer @dx temporary : tensor<4x8xf32>
mlt_rt.buffer @dxs temporary : tensor<4x8xf32>
mlt_rt.buffer @slice temporary : tensor<32xf32>
mlt_rt.program @side {
  mlt_rt.launch "matmul" [@dy, @x] -> [@"grad:w1"] ints [1, 8, 8, 4, 1, 0, 0]
  mlt_rt.launch "matmul" [@dy, @"param:w1"] -> [@dx] ints [1, 4, 8, 8, 0, 0, 0]
  mlt_rt.launch "all_reduce_sum" [@dx] -> [@dxs] ints [32, 1]
  mlt_rt.launch "reduce_scatter_sum" [@"grad:w1"] -> [@slice] ints [32, 0] stream 1
}
}

// -----

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
