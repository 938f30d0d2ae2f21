// RUN: mlt-opt %s -mlt-fp8-products | FileCheck %s
// RUN: mlt-opt %s -mlt-fp8-products=all-products=1 | FileCheck %s --check-prefix=ALL

// Tests a layer's products: x is quantized once, in both layouts from one
// pass (its q and k products read the plain copy, its weight gradient the
// transposed one) with one amax; each weight in both layouts (x W^T reads
// the plain copy, dy W the transposed); the gradient dy in e5m2, both
// layouts, for dy W and dy^T x. The forward products accumulate fast, the
// gradients not; matmul_add keeps its addend, matmul_accumulate becomes
// accumulate 1. After a launch writes x, x is quantized again. The output
// layer's product (no ".layers." in its parameter), an f32 product, and one
// whose k is no multiple of 16 stay as they are; with all-products the
// output layer's joins.
// CHECK-LABEL: mlt_rt.program @step {
// CHECK-NEXT: mlt_rt.launch "amax" [@x] -> [@"fp8.amax:x"] ints [4096]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@x, @"fp8.amax:x"] -> [@"fp8.scale_inv:x", @"fp8.e4m3:x", @"fp8.e4m3.t:x"] ints [64, 64, 2]
// CHECK-NEXT: mlt_rt.launch "amax" [@[[WQ:"param:model.layers.0.wq"]]] -> [@[[AQ:"fp8.amax:param:model.layers.0.wq"]]] ints [4096]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@[[WQ]], @[[AQ]]] -> [@[[SQ:"fp8.scale_inv:param:model.layers.0.wq"]], @[[QQ:"fp8.e4m3:param:model.layers.0.wq"]], @[[QQT:"fp8.e4m3.t:param:model.layers.0.wq"]]] ints [64, 64, 2]
// CHECK-NEXT: mlt_rt.launch "matmul_fp8" [@"fp8.e4m3:x", @"fp8.scale_inv:x", @[[QQ]], @[[SQ]]] -> [@q] ints [64, 64, 64, 0, 1]
// CHECK-NEXT: mlt_rt.launch "amax" [@"param:model.layers.0.wk"]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@"param:model.layers.0.wk", {{.*}} ints [64, 64, 0]
// CHECK-NEXT: mlt_rt.launch "matmul_fp8" [@"fp8.e4m3:x", @"fp8.scale_inv:x", {{.*}}] -> [@k] ints [64, 64, 64, 0, 1]
// CHECK-NEXT: mlt_rt.launch "matmul" [@x, @"param:lm_head"] -> [@logits]
// CHECK-NEXT: mlt_rt.launch "matmul" [@x32, @"param:model.layers.0.w32"] -> [@y32]
// CHECK-NEXT: mlt_rt.launch "matmul" [@x, @"param:model.layers.0.w72"] -> [@y72]
// CHECK-NEXT: mlt_rt.launch "amax" [@dy] -> [@"fp8.amax:dy"] ints [4096]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@dy, @"fp8.amax:dy"] -> [@"fp8.scale_inv:dy", @"fp8.e5m2:dy", @"fp8.e5m2.t:dy"] ints [64, 64, 2]
// CHECK-NEXT: mlt_rt.launch "matmul_fp8" [@"fp8.e5m2:dy", @"fp8.scale_inv:dy", @[[QQT]], @[[SQ]], @dx] -> [@dx] ints [64, 64, 64, 0, 0]
// CHECK-NEXT: mlt_rt.launch "matmul_fp8" [@"fp8.e5m2.t:dy", @"fp8.scale_inv:dy", @"fp8.e4m3.t:x", @"fp8.scale_inv:x"] -> [@"grad:model.layers.0.wq"] ints [64, 64, 64, 1, 0]
// CHECK-NEXT: mlt_rt.launch "rope" [@x] -> [@x]
// CHECK-NEXT: mlt_rt.launch "amax" [@x] -> [@"fp8.amax:x{{_[0-9]+}}"] ints [4096]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@x, {{.*}}] -> [@"fp8.scale_inv:x{{_[0-9]+}}", @"[[X2:fp8.e4m3:x_[0-9]+]]"] ints [64, 64, 0]
// CHECK-NEXT: mlt_rt.launch "amax" [@"param:model.layers.0.wv"]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@"param:model.layers.0.wv"
// CHECK-NEXT: mlt_rt.launch "matmul_fp8" [@"[[X2]]", {{.*}}] -> [@v]
// CHECK-NEXT: }
// The backward pass starts (backward_start) at the first launch made for
// its first product: 5 launches of the forward's one product come first.
// CHECK-LABEL: mlt_rt.program @split backward_start 5 {
// CHECK-NEXT: mlt_rt.launch "amax" [@x]
// CHECK-COUNT-3: mlt_rt.launch
// CHECK-NEXT: mlt_rt.launch "matmul_fp8" {{.*}} -> [@q]
// CHECK-NEXT: mlt_rt.launch "amax" [@dy]
// ALL: mlt_rt.launch "matmul_fp8" {{.*}} -> [@logits] ints [64, 128, 64, 0, 1]
// ALL-NOT: mlt_rt.launch "matmul" [@x, @"param:lm_head"]
module {
  mlt_rt.buffer @x temporary : tensor<64x64xbf16>
  mlt_rt.buffer @x32 temporary : tensor<64x64xf32>
  mlt_rt.buffer @q temporary : tensor<64x64xbf16>
  mlt_rt.buffer @k temporary : tensor<64x64xbf16>
  mlt_rt.buffer @v temporary : tensor<64x64xbf16>
  mlt_rt.buffer @y32 temporary : tensor<64x64xf32>
  mlt_rt.buffer @y72 temporary : tensor<64x72xbf16>
  mlt_rt.buffer @logits temporary : tensor<64x128xbf16>
  mlt_rt.buffer @dy temporary : tensor<64x64xbf16>
  mlt_rt.buffer @dx temporary : tensor<64x64xbf16>
  mlt_rt.buffer @"param:model.layers.0.wq" parameter_copy {parameter = "model.layers.0.wq"} : tensor<64x64xbf16>
  mlt_rt.buffer @"param:model.layers.0.wk" parameter_copy {parameter = "model.layers.0.wk"} : tensor<64x64xbf16>
  mlt_rt.buffer @"param:model.layers.0.wv" parameter_copy {parameter = "model.layers.0.wv"} : tensor<64x64xbf16>
  mlt_rt.buffer @"param:model.layers.0.w32" parameter {parameter = "model.layers.0.w32"} : tensor<64x64xf32>
  mlt_rt.buffer @"param:model.layers.0.w72" parameter_copy {parameter = "model.layers.0.w72"} : tensor<72x64xbf16>
  mlt_rt.buffer @"param:lm_head" parameter_copy {parameter = "lm_head.weight"} : tensor<128x64xbf16>
  mlt_rt.buffer @"grad:model.layers.0.wq" gradient {parameter = "model.layers.0.wq"} : tensor<64x64xf32>
  mlt_rt.program @step {
    mlt_rt.launch "matmul" [@x, @"param:model.layers.0.wq"] -> [@q] ints [1, 64, 64, 64, 0, 1, 0]
    mlt_rt.launch "matmul" [@x, @"param:model.layers.0.wk"] -> [@k] ints [1, 64, 64, 64, 0, 1, 0]
    mlt_rt.launch "matmul" [@x, @"param:lm_head"] -> [@logits] ints [1, 64, 128, 64, 0, 1, 0]
    mlt_rt.launch "matmul" [@x32, @"param:model.layers.0.w32"] -> [@y32] ints [1, 64, 64, 64, 0, 1, 0]
    mlt_rt.launch "matmul" [@x, @"param:model.layers.0.w72"] -> [@y72] ints [1, 64, 72, 64, 0, 1, 0]
    mlt_rt.launch "matmul_add" [@dy, @"param:model.layers.0.wq", @dx] -> [@dx] ints [1, 64, 64, 64, 0, 0, 0]
    mlt_rt.launch "matmul_accumulate" [@dy, @x] -> [@"grad:model.layers.0.wq"] ints [1, 64, 64, 64, 1, 0, 0]
    mlt_rt.launch "rope" [@x] -> [@x] ints [1, 64, 1, 64, 0, 0, 0, 0, -1] floats [1.000000e+04, 1.000000e+00, 1.000000e+00, 4.000000e+00]
    mlt_rt.launch "matmul" [@x, @"param:model.layers.0.wv"] -> [@v] ints [1, 64, 64, 64, 0, 1, 0]
  }
  mlt_rt.program @split backward_start 1 {
    mlt_rt.launch "matmul" [@x, @"param:model.layers.0.wq"] -> [@q] ints [1, 64, 64, 64, 0, 1, 0]
    mlt_rt.launch "matmul" [@dy, @"param:model.layers.0.wq"] -> [@dx] ints [1, 64, 64, 64, 0, 0, 0]
  }
}
