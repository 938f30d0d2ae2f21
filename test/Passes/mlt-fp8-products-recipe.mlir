// RUN: mlt-opt %s -mlt-fp8-products="products=fprop" | FileCheck %s --check-prefix=FPROP
// RUN: mlt-opt %s -mlt-fp8-products="products=dgrad,wgrad fprop-accumulation=f32" | FileCheck %s --check-prefix=GRADS
// RUN: mlt-opt %s -mlt-fp8-products="fprop-accumulation=f32" | FileCheck %s --check-prefix=F32
// RUN: mlt-opt %s -mlt-fp8-products="bf16-first-layers=1 bf16-last-layers=1" | FileCheck %s --check-prefix=EDGES
// RUN: mlt-opt %s -mlt-fp8-products="format=e4m3 bf16-parameters=layers.2." | FileCheck %s --check-prefix=E4M3
// RUN: not mlt-opt %s -mlt-fp8-products="format=e5m2" 2>&1 | FileCheck %s --check-prefix=BADFORMAT
// RUN: not mlt-opt %s -mlt-fp8-products="products=fprop,bgrad" 2>&1 | FileCheck %s --check-prefix=BADPRODUCT
// RUN: not mlt-opt %s -mlt-fp8-products="fprop-accumulation=fp16" 2>&1 | FileCheck %s --check-prefix=BADACC
// RUN: not mlt-opt %s -mlt-fp8-products="bf16-first-layers=-1" 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: sed -e 's/module attributes {mlt.model = .*} {/module {/' %s | not mlt-opt -mlt-fp8-products="bf16-last-layers=1" 2>&1 | FileCheck %s --check-prefix=NOMODEL

// Tests the recipe options of mlt-fp8-products on three layers' forward
// product, input gradient and weight gradient. products names the roles made
// FP8 (the others stay bf16 products); fprop-accumulation=f32 clears the
// forward products' fast accumulation; bf16-first-layers and
// bf16-last-layers keep the first and last layers (of mlt.model's
// num_layers, 3) bf16; format=e4m3 quantizes the gradients in e4m3 too;
// bf16-parameters keeps the products of the parameters whose names contain
// one of its strings bf16.

// FPROP-LABEL: mlt_rt.program @step {
// FPROP: "matmul_fp8" {{.*}} -> [@y0] ints [64, 64, 64, 0, 1]
// FPROP: "matmul_fp8" {{.*}} -> [@y1] ints [64, 64, 64, 0, 1]
// FPROP: "matmul_fp8" {{.*}} -> [@y2] ints [64, 64, 64, 0, 1]
// FPROP: "matmul" [@dy, @"param:model.layers.1.w"] -> [@dx]
// FPROP: "matmul" [@dy, @x] -> [@"grad:model.layers.1.w"]
// FPROP-NOT: e5m2

// GRADS-LABEL: mlt_rt.program @step {
// GRADS: "matmul" [@x, @"param:model.layers.0.w"] -> [@y0]
// GRADS: "matmul" [@x, @"param:model.layers.1.w"] -> [@y1]
// GRADS: "matmul" [@x, @"param:model.layers.2.w"] -> [@y2]
// GRADS: "matmul_fp8" [@"fp8.e5m2:dy", {{.*}}] -> [@dx] ints [64, 64, 64, 0, 0]
// GRADS: "matmul_fp8" [@"fp8.e5m2.t:dy", {{.*}}] -> [@"grad:model.layers.1.w"] ints [64, 64, 64, 0, 0]

// F32: "matmul_fp8" {{.*}} -> [@y0] ints [64, 64, 64, 0, 0]
// F32: "matmul_fp8" {{.*}} -> [@y1] ints [64, 64, 64, 0, 0]
// F32: "matmul_fp8" {{.*}} -> [@y2] ints [64, 64, 64, 0, 0]

// EDGES-LABEL: mlt_rt.program @step {
// EDGES: "matmul" [@x, @"param:model.layers.0.w"] -> [@y0]
// EDGES: "matmul_fp8" {{.*}} -> [@y1] ints [64, 64, 64, 0, 1]
// EDGES: "matmul" [@x, @"param:model.layers.2.w"] -> [@y2]
// EDGES: "matmul_fp8" {{.*}} -> [@dx]
// EDGES: "matmul_fp8" {{.*}} -> [@"grad:model.layers.1.w"]

// E4M3-LABEL: mlt_rt.program @step {
// E4M3: "matmul_fp8" {{.*}} -> [@y0]
// E4M3: "matmul_fp8" {{.*}} -> [@y1]
// E4M3: "matmul" [@x, @"param:model.layers.2.w"] -> [@y2]
// E4M3: "matmul_fp8" [@"fp8.e4m3:dy", {{.*}}] -> [@dx] ints [64, 64, 64, 0, 0]
// E4M3: "matmul_fp8" [@"fp8.e4m3.t:dy", {{.*}}] -> [@"grad:model.layers.1.w"] ints [64, 64, 64, 0, 0]
// E4M3-NOT: e5m2

// BADFORMAT: error: mlt-fp8-products: format must be hybrid or e4m3, got 'e5m2'
// BADPRODUCT: error: mlt-fp8-products: unknown product 'bgrad' (expected fprop, dgrad or wgrad)
// BADACC: error: mlt-fp8-products: fprop-accumulation must be fast or f32, got 'fp16'
// NEGATIVE: error: mlt-fp8-products: bf16-first-layers and bf16-last-layers must not be negative
// NOMODEL: error: mlt-fp8-products: bf16-last-layers needs the model's depth, and the module has no model configuration ('mlt.model')
module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64, intermediate_size = 128, num_layers = 3, num_heads = 4, num_kv_heads = 4, head_dim = 16, max_position_embeddings = 512, rms_norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_word_embeddings = false>} {
  mlt_rt.buffer @x temporary : tensor<64x64xbf16>
  mlt_rt.buffer @y0 temporary : tensor<64x64xbf16>
  mlt_rt.buffer @y1 temporary : tensor<64x64xbf16>
  mlt_rt.buffer @y2 temporary : tensor<64x64xbf16>
  mlt_rt.buffer @dy temporary : tensor<64x64xbf16>
  mlt_rt.buffer @dx temporary : tensor<64x64xbf16>
  mlt_rt.buffer @"param:model.layers.0.w" parameter_copy {parameter = "model.layers.0.w"} : tensor<64x64xbf16>
  mlt_rt.buffer @"param:model.layers.1.w" parameter_copy {parameter = "model.layers.1.w"} : tensor<64x64xbf16>
  mlt_rt.buffer @"param:model.layers.2.w" parameter_copy {parameter = "model.layers.2.w"} : tensor<64x64xbf16>
  mlt_rt.buffer @"grad:model.layers.1.w" gradient {parameter = "model.layers.1.w"} : tensor<64x64xf32>
  mlt_rt.program @step {
    mlt_rt.launch "matmul" [@x, @"param:model.layers.0.w"] -> [@y0] ints [1, 64, 64, 64, 0, 1, 0]
    mlt_rt.launch "matmul" [@x, @"param:model.layers.1.w"] -> [@y1] ints [1, 64, 64, 64, 0, 1, 0]
    mlt_rt.launch "matmul" [@x, @"param:model.layers.2.w"] -> [@y2] ints [1, 64, 64, 64, 0, 1, 0]
    mlt_rt.launch "matmul" [@dy, @"param:model.layers.1.w"] -> [@dx] ints [1, 64, 64, 64, 0, 0, 0]
    mlt_rt.launch "matmul" [@dy, @x] -> [@"grad:model.layers.1.w"] ints [1, 64, 64, 64, 1, 0, 0]
  }
}
