// RUN: mlt-opt %s -split-input-file -mlt-fuse-amax | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-fuse-amax -mlt-plan-memory | FileCheck %s --check-prefix=MEM

// Tests a layer's forward and backward as mlt-fp8-products leaves them
// (bf16, SwiGLU recomputed in its backward): the amax of each tensor an
// RMSNorm, SwiGLU or attention kernel wrote becomes that kernel's trailing
// output (swiglu_bwd's three and attention_bwd_rope's three in the order of
// their outputs, whatever the order of the amax launches, with products
// between them); the weight's keeps its amax launch.
// CHECK-LABEL: mlt_rt.program @micro_step {
// CHECK-NEXT: mlt_rt.launch "rms_norm_fwd" [@x, @w] -> [@n, @"a:n"] ints [64, 64] floats [1.000000e-05]
// CHECK-NEXT: mlt_rt.launch "amax" [@wq] -> [@"a:wq"] ints [4096]
// CHECK-NEXT: mlt_rt.launch "attention_fwd" [@q, @q, @q] -> [@o, @lse, @"a:o"] ints
// CHECK-NEXT: mlt_rt.launch "swiglu_fwd" [@g, @u] -> [@h, @"a:h"] ints [4096]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@h, @"a:h"]
// CHECK-NEXT: mlt_rt.launch "swiglu_bwd" [@dh, @g, @u] -> [@dg, @du, @hr, @"a:dg", @"a:du", @"a:hr"] ints [4096]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@hr, @"a:hr"]
// CHECK-NEXT: mlt_rt.launch "matmul_fp8"
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@du, @"a:du"]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@dg, @"a:dg"]
// CHECK-NEXT: mlt_rt.launch "rms_norm_bwd_add" [@dn, @x, @w, @dy] -> [@dx, @"grad:w", @"a:dx"] ints [64, 64] floats [1.000000e-05]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@dx, @"a:dx"]
// CHECK-NEXT: mlt_rt.launch "attention_bwd_rope" [@o, @q, @q, @q, @o, @lse] -> [@dq, @dk, @dv, @"a:dq", @"a:dk", @"a:dv"] ints
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@dv, @"a:dv"]
// CHECK-NEXT: mlt_rt.launch "quantize_fp8" [@dq, @"a:dq"]
// CHECK-NEXT: }
// The amax outputs are placed as the amax launches' were (live from the
// kernel that writes them now).
// MEM: mlt_rt.buffer @"a:n" temporary offset
// MEM: mlt_rt.launch "rms_norm_fwd" [@x, @w] -> [@n, @"a:n"]
module {
  mlt_rt.buffer @x temporary : tensor<64x64xbf16>
  mlt_rt.buffer @w parameter_copy {parameter = "w"} : tensor<64xbf16>
  mlt_rt.buffer @"grad:w" gradient {parameter = "w"} : tensor<64xf32>
  mlt_rt.buffer @wq parameter_copy {parameter = "wq"} : tensor<64x64xbf16>
  mlt_rt.buffer @n temporary : tensor<64x64xbf16>
  mlt_rt.buffer @q temporary : tensor<1x64x1x64xbf16>
  mlt_rt.buffer @o temporary : tensor<1x64x1x64xbf16>
  mlt_rt.buffer @lse temporary : tensor<1x1x64xf32>
  mlt_rt.buffer @g temporary : tensor<4096xbf16>
  mlt_rt.buffer @u temporary : tensor<4096xbf16>
  mlt_rt.buffer @h temporary : tensor<4096xbf16>
  mlt_rt.buffer @dh temporary : tensor<4096xbf16>
  mlt_rt.buffer @dg temporary : tensor<4096xbf16>
  mlt_rt.buffer @du temporary : tensor<4096xbf16>
  mlt_rt.buffer @hr temporary : tensor<4096xbf16>
  mlt_rt.buffer @dn temporary : tensor<64x64xbf16>
  mlt_rt.buffer @dy temporary : tensor<64x64xbf16>
  mlt_rt.buffer @dx temporary : tensor<64x64xbf16>
  mlt_rt.buffer @"a:n" temporary : tensor<f32>
  mlt_rt.buffer @"a:wq" temporary : tensor<f32>
  mlt_rt.buffer @"a:o" temporary : tensor<f32>
  mlt_rt.buffer @"a:h" temporary : tensor<f32>
  mlt_rt.buffer @"a:hr" temporary : tensor<f32>
  mlt_rt.buffer @"a:dg" temporary : tensor<f32>
  mlt_rt.buffer @"a:du" temporary : tensor<f32>
  mlt_rt.buffer @"a:dx" temporary : tensor<f32>
  mlt_rt.buffer @dq temporary : tensor<1x64x1x64xbf16>
  mlt_rt.buffer @dk temporary : tensor<1x64x1x64xbf16>
  mlt_rt.buffer @dv temporary : tensor<1x64x1x64xbf16>
  mlt_rt.buffer @"a:dq" temporary : tensor<f32>
  mlt_rt.buffer @"a:dk" temporary : tensor<f32>
  mlt_rt.buffer @"a:dv" temporary : tensor<f32>
  mlt_rt.buffer @qdq temporary : tensor<1x64x1x64xf8E5M2>
  mlt_rt.buffer @s temporary : tensor<f32>
  mlt_rt.buffer @qh temporary : tensor<4096xf8E4M3FN>
  mlt_rt.buffer @qhr temporary : tensor<4096xf8E4M3FN>
  mlt_rt.buffer @qdg temporary : tensor<4096xf8E5M2>
  mlt_rt.buffer @qdu temporary : tensor<4096xf8E5M2>
  mlt_rt.buffer @qdx temporary : tensor<64x64xf8E5M2>
  mlt_rt.buffer @c temporary : tensor<64x64xbf16>
  mlt_rt.program @micro_step {
    mlt_rt.launch "rms_norm_fwd" [@x, @w] -> [@n] ints [64, 64] floats [1.0e-05]
    mlt_rt.launch "amax" [@n] -> [@"a:n"] ints [4096]
    mlt_rt.launch "amax" [@wq] -> [@"a:wq"] ints [4096]
    mlt_rt.launch "attention_fwd" [@q, @q, @q] -> [@o, @lse] ints [1, 64, 64, 1, 1, 64, 1, -1, 0, 0] floats [0.125]
    mlt_rt.launch "amax" [@o] -> [@"a:o"] ints [4096]
    mlt_rt.launch "swiglu_fwd" [@g, @u] -> [@h] ints [4096]
    mlt_rt.launch "amax" [@h] -> [@"a:h"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@h, @"a:h"] -> [@s, @qh] ints [1, 4096, 0]
    mlt_rt.launch "swiglu_bwd" [@dh, @g, @u] -> [@dg, @du, @hr] ints [4096]
    mlt_rt.launch "amax" [@hr] -> [@"a:hr"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@hr, @"a:hr"] -> [@s, @qhr] ints [1, 4096, 0]
    mlt_rt.launch "matmul_fp8" [@qdx, @s, @qdx, @s] -> [@c] ints [64, 64, 64, 0, 0]
    mlt_rt.launch "amax" [@du] -> [@"a:du"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@du, @"a:du"] -> [@s, @qdu] ints [1, 4096, 0]
    mlt_rt.launch "amax" [@dg] -> [@"a:dg"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@dg, @"a:dg"] -> [@s, @qdg] ints [1, 4096, 0]
    mlt_rt.launch "rms_norm_bwd_add" [@dn, @x, @w, @dy] -> [@dx, @"grad:w"] ints [64, 64] floats [1.0e-05]
    mlt_rt.launch "amax" [@dx] -> [@"a:dx"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@dx, @"a:dx"] -> [@s, @qdx] ints [64, 64, 0]
    mlt_rt.launch "attention_bwd_rope" [@o, @q, @q, @q, @o, @lse] -> [@dq, @dk, @dv] ints [1, 64, 64, 1, 1, 64, 1, -1, 0, 0, 0, 0, 0] floats [0.125, 1.0e+04, 0.0, 0.0, 0.0]
    mlt_rt.launch "amax" [@dv] -> [@"a:dv"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@dv, @"a:dv"] -> [@s, @qdu] ints [1, 4096, 0]
    mlt_rt.launch "amax" [@dk] -> [@"a:dk"] ints [4096]
    mlt_rt.launch "amax" [@dq] -> [@"a:dq"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@dq, @"a:dq"] -> [@s, @qdq] ints [64, 64, 0]
  }
}

// -----

// Tests what keeps an amax launch apart: it waits (@y1), another stream
// (@y2), a launch that writes the tensor after the kernel (@y3), a launch
// that touches the amax's buffer in between (@y4), a part of the tensor
// (@y5, a view's elements), and a swiglu_bwd one of whose outputs has no
// amax (all or none), as an attention_bwd whose dv has none. An amax
// someone waits for stays too (@y6).
// CHECK-LABEL: mlt_rt.program @micro_step {
// CHECK-NEXT: mlt_rt.launch "rms_norm_fwd" [@x, @w] -> [@y1] ints
// CHECK-NEXT: mlt_rt.launch "amax" [@y1] -> [@a1] ints [4096] waits [0]
// CHECK-NEXT: mlt_rt.launch "rms_norm_fwd" [@x, @w] -> [@y2] ints
// CHECK-NEXT: mlt_rt.launch "amax" [@y2] -> [@a2] ints [4096] stream 1
// CHECK-NEXT: mlt_rt.launch "swiglu_fwd" [@g, @u] -> [@y3] ints
// CHECK-NEXT: mlt_rt.launch "add" [@y3, @y3] -> [@y3]
// CHECK-NEXT: mlt_rt.launch "amax" [@y3] -> [@a3]
// CHECK-NEXT: mlt_rt.launch "swiglu_fwd" [@g, @u] -> [@y4] ints
// CHECK-NEXT: mlt_rt.launch "fill" [] -> [@a4]
// CHECK-NEXT: mlt_rt.launch "amax" [@y4] -> [@a4]
// CHECK-NEXT: mlt_rt.launch "swiglu_fwd" [@g, @u] -> [@y5] ints [4096]
// CHECK-NEXT: mlt_rt.launch "amax" [@y5] -> [@a5] ints [2048]
// CHECK-NEXT: mlt_rt.launch "swiglu_bwd" [@g, @g, @u] -> [@y1g, @y1u] ints
// CHECK-NEXT: mlt_rt.launch "amax" [@y1g] -> [@a6]
// CHECK-NEXT: mlt_rt.launch "swiglu_fwd" [@g, @u] -> [@y6] ints
// CHECK-NEXT: mlt_rt.launch "amax" [@y6] -> [@a7] ints [4096] token 1
// CHECK-NEXT: mlt_rt.launch "attention_bwd" [@q, @q, @q, @q, @q, @lse] -> [@dq, @dk, @dv] ints
// CHECK-NEXT: mlt_rt.launch "amax" [@dq] -> [@a8]
// CHECK-NEXT: mlt_rt.launch "amax" [@dk] -> [@a9]
// CHECK-NEXT: }
module {
  mlt_rt.buffer @x temporary : tensor<64x64xbf16>
  mlt_rt.buffer @w parameter_copy {parameter = "w"} : tensor<64xbf16>
  mlt_rt.buffer @g temporary : tensor<4096xbf16>
  mlt_rt.buffer @u temporary : tensor<4096xbf16>
  mlt_rt.buffer @y1 temporary : tensor<64x64xbf16>
  mlt_rt.buffer @y2 temporary : tensor<64x64xbf16>
  mlt_rt.buffer @y3 temporary : tensor<4096xbf16>
  mlt_rt.buffer @y4 temporary : tensor<4096xbf16>
  mlt_rt.buffer @y5 temporary : tensor<4096xbf16>
  mlt_rt.buffer @y6 temporary : tensor<4096xbf16>
  mlt_rt.buffer @y1g temporary : tensor<4096xbf16>
  mlt_rt.buffer @y1u temporary : tensor<4096xbf16>
  mlt_rt.buffer @a1 temporary : tensor<f32>
  mlt_rt.buffer @a2 temporary : tensor<f32>
  mlt_rt.buffer @a3 temporary : tensor<f32>
  mlt_rt.buffer @a4 temporary : tensor<f32>
  mlt_rt.buffer @a5 temporary : tensor<f32>
  mlt_rt.buffer @a6 temporary : tensor<f32>
  mlt_rt.buffer @a7 temporary : tensor<f32>
  mlt_rt.buffer @a8 temporary : tensor<f32>
  mlt_rt.buffer @a9 temporary : tensor<f32>
  mlt_rt.buffer @q temporary : tensor<1x64x1x64xbf16>
  mlt_rt.buffer @lse temporary : tensor<1x1x64xf32>
  mlt_rt.buffer @dq temporary : tensor<1x64x1x64xbf16>
  mlt_rt.buffer @dk temporary : tensor<1x64x1x64xbf16>
  mlt_rt.buffer @dv temporary : tensor<1x64x1x64xbf16>
  mlt_rt.program @micro_step {
    mlt_rt.launch "rms_norm_fwd" [@x, @w] -> [@y1] ints [64, 64] floats [1.0e-05] token 0
    mlt_rt.launch "amax" [@y1] -> [@a1] ints [4096] waits [0]
    mlt_rt.launch "rms_norm_fwd" [@x, @w] -> [@y2] ints [64, 64] floats [1.0e-05]
    mlt_rt.launch "amax" [@y2] -> [@a2] ints [4096] stream 1
    mlt_rt.launch "swiglu_fwd" [@g, @u] -> [@y3] ints [4096]
    mlt_rt.launch "add" [@y3, @y3] -> [@y3] ints [4096]
    mlt_rt.launch "amax" [@y3] -> [@a3] ints [4096]
    mlt_rt.launch "swiglu_fwd" [@g, @u] -> [@y4] ints [4096]
    mlt_rt.launch "fill" [] -> [@a4] ints [1] floats [0.0]
    mlt_rt.launch "amax" [@y4] -> [@a4] ints [4096]
    mlt_rt.launch "swiglu_fwd" [@g, @u] -> [@y5] ints [4096]
    mlt_rt.launch "amax" [@y5] -> [@a5] ints [2048]
    mlt_rt.launch "swiglu_bwd" [@g, @g, @u] -> [@y1g, @y1u] ints [4096]
    mlt_rt.launch "amax" [@y1g] -> [@a6] ints [4096]
    mlt_rt.launch "swiglu_fwd" [@g, @u] -> [@y6] ints [4096]
    mlt_rt.launch "amax" [@y6] -> [@a7] ints [4096] token 1
    mlt_rt.launch "attention_bwd" [@q, @q, @q, @q, @q, @lse] -> [@dq, @dk, @dv] ints [1, 64, 64, 1, 1, 64, 1, -1, 0, 0] floats [0.125]
    mlt_rt.launch "amax" [@dq] -> [@a8] ints [4096]
    mlt_rt.launch "amax" [@dk] -> [@a9] ints [4096]
  }
}
