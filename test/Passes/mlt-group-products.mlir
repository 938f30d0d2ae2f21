// RUN: mlt-opt %s -split-input-file -mlt-group-products | FileCheck %s
// RUN: not mlt-opt %s -split-input-file -mlt-group-products=window=0 2>&1 \
// RUN:   | FileCheck %s --check-prefix=WINDOW

// Tests a layer's attention backward: the weight gradients of v, k and q
// (one shape, all reading x) become one matmul_group at the first one's
// place, moved past the input gradients they do not touch; the input
// gradients (the second and third added into dx by matmul_add) stay as they
// were, in their order. The forward's q, k, v products group too, with
// matmul_accumulate's results accumulated (its last int 1); a product whose
// result another member reads, one of other types, and one behind a launch
// with a token do not join.
// CHECK-LABEL: mlt_rt.program @backward {
// CHECK-NEXT: mlt_rt.launch "matmul_group" [@dv, @dk, @dq, @x, @x, @x] -> [@"grad:wv", @"grad:wk", @"grad:wq"] ints [1, 64, 64, 128, 1, 0, 0, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "matmul" [@dv, @"param:wv"] -> [@dx] ints [1, 128, 64, 64, 0, 0, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "matmul_add" [@dk, @"param:wk", @dx] -> [@dx]
// CHECK-NEXT: mlt_rt.launch "matmul_add" [@dq, @"param:wq", @dx] -> [@dx]
// CHECK-NEXT: }
// CHECK-LABEL: mlt_rt.program @forward {
// CHECK-NEXT: mlt_rt.launch "matmul_group" [@x, @x, @"param:wq", @"param:wk"] -> [@q, @k] ints [1, 128, 64, 64, 0, 1, 0, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "matmul" [@q, @"param:wv"] -> [@v] ints [1, 128, 64, 64, 0, 1, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "matmul" [@x32, @"param:w32"] -> [@y32] ints [1, 128, 64, 64, 0, 1, 0]{{$}}
// CHECK-NEXT: mlt_rt.launch "matmul_group" [@dv, @dk, @x, @x] -> [@"grad:wv", @"grad:wk"] ints [1, 64, 64, 128, 1, 0, 0, 1]{{$}}
// CHECK-NEXT: mlt_rt.launch "rope" [@q] -> [@q] ints [1, 128, 1, 64, 0, 0, 0, 0, -1] floats [1.000000e+04, 1.000000e+00, 1.000000e+00, 4.000000e+00] token 0
// CHECK-NEXT: mlt_rt.launch "matmul_accumulate" [@dq, @x] -> [@"grad:wq"] ints [1, 64, 64, 128, 1, 0, 0]{{$}}
// CHECK-NEXT: }
// WINDOW: error: mlt-group-products: window must be at least 1, got 0
module {
  mlt_rt.buffer @x temporary : tensor<128x64xbf16>
  mlt_rt.buffer @x32 temporary : tensor<128x64xf32>
  mlt_rt.buffer @q temporary : tensor<128x64xbf16>
  mlt_rt.buffer @k temporary : tensor<128x64xbf16>
  mlt_rt.buffer @v temporary : tensor<128x64xbf16>
  mlt_rt.buffer @y32 temporary : tensor<128x64xf32>
  mlt_rt.buffer @dq temporary : tensor<128x64xbf16>
  mlt_rt.buffer @dk temporary : tensor<128x64xbf16>
  mlt_rt.buffer @dv temporary : tensor<128x64xbf16>
  mlt_rt.buffer @dx temporary : tensor<128x64xbf16>
  mlt_rt.buffer @"param:wq" parameter_copy {parameter = "wq"} : tensor<64x64xbf16>
  mlt_rt.buffer @"param:wk" parameter_copy {parameter = "wk"} : tensor<64x64xbf16>
  mlt_rt.buffer @"param:wv" parameter_copy {parameter = "wv"} : tensor<64x64xbf16>
  mlt_rt.buffer @"param:w32" parameter {parameter = "w32"} : tensor<64x64xf32>
  mlt_rt.buffer @"grad:wq" gradient {parameter = "wq"} : tensor<64x64xf32>
  mlt_rt.buffer @"grad:wk" gradient {parameter = "wk"} : tensor<64x64xf32>
  mlt_rt.buffer @"grad:wv" gradient {parameter = "wv"} : tensor<64x64xf32>
  mlt_rt.program @backward {
    mlt_rt.launch "matmul" [@dv, @x] -> [@"grad:wv"] ints [1, 64, 64, 128, 1, 0, 0]
    mlt_rt.launch "matmul" [@dv, @"param:wv"] -> [@dx] ints [1, 128, 64, 64, 0, 0, 0]
    mlt_rt.launch "matmul" [@dk, @x] -> [@"grad:wk"] ints [1, 64, 64, 128, 1, 0, 0]
    mlt_rt.launch "matmul_add" [@dk, @"param:wk", @dx] -> [@dx] ints [1, 128, 64, 64, 0, 0, 0]
    mlt_rt.launch "matmul" [@dq, @x] -> [@"grad:wq"] ints [1, 64, 64, 128, 1, 0, 0]
    mlt_rt.launch "matmul_add" [@dq, @"param:wq", @dx] -> [@dx] ints [1, 128, 64, 64, 0, 0, 0]
  }
  mlt_rt.program @forward {
    mlt_rt.launch "matmul" [@x, @"param:wq"] -> [@q] ints [1, 128, 64, 64, 0, 1, 0]
    mlt_rt.launch "matmul" [@x, @"param:wk"] -> [@k] ints [1, 128, 64, 64, 0, 1, 0]
    mlt_rt.launch "matmul" [@q, @"param:wv"] -> [@v] ints [1, 128, 64, 64, 0, 1, 0]
    mlt_rt.launch "matmul" [@x32, @"param:w32"] -> [@y32] ints [1, 128, 64, 64, 0, 1, 0]
    mlt_rt.launch "matmul_accumulate" [@dv, @x] -> [@"grad:wv"] ints [1, 64, 64, 128, 1, 0, 0]
    mlt_rt.launch "matmul_accumulate" [@dk, @x] -> [@"grad:wk"] ints [1, 64, 64, 128, 1, 0, 0]
    mlt_rt.launch "rope" [@q] -> [@q] ints [1, 128, 1, 64, 0, 0, 0, 0, -1] floats [10000.0, 1.0, 1.0, 4.0] token 0
    mlt_rt.launch "matmul_accumulate" [@dq, @x] -> [@"grad:wq"] ints [1, 64, 64, 128, 1, 0, 0]
  }
}
