// RUN: mlt-opt %s -mlt-plan-memory -verify-diagnostics

// Tests that an unused temporary is an error even when it has an offset.
mlt_rt.buffer @x input : tensor<4xf32>
mlt_rt.buffer @t0 temporary : tensor<4xf32>
// expected-error @+1 {{'mlt_rt.buffer' op is declared but no launch uses it}}
mlt_rt.buffer @stale temporary offset 65536 : tensor<4xf32>
mlt_rt.program @micro_step {
  mlt_rt.launch "silu_fwd" [@x] -> [@t0] ints [4]
}
