// RUN: mlt-opt %s -split-input-file -mlt-plan-memory -verify-diagnostics

// Tests that a temporary used by two programs is an error: programs share
// the temporary region, so a temporary cannot outlive its program.
mlt_rt.buffer @x input : tensor<64xf32>
// expected-error @+1 {{'mlt_rt.buffer' op is a temporary of both @micro_step and @optimizer_step}}
mlt_rt.buffer @t0 temporary : tensor<64xf32>
mlt_rt.program @micro_step {
  mlt_rt.launch "silu_fwd" [@x] -> [@t0] ints [64]
}
mlt_rt.program @optimizer_step {
  mlt_rt.launch "silu_fwd" [@t0] -> [@x] ints [64]
}

// -----

// Tests that a declared temporary that no launch uses is an error.
mlt_rt.buffer @x input : tensor<64xf32>
mlt_rt.buffer @t0 temporary : tensor<64xf32>
// expected-error @+1 {{'mlt_rt.buffer' op is declared but no launch uses it}}
mlt_rt.buffer @unused temporary : tensor<64xf32>
mlt_rt.program @micro_step {
  mlt_rt.launch "silu_fwd" [@x] -> [@t0] ints [64]
}

// -----

// Tests that a temporary in a module without programs is unused too.
// expected-error @+1 {{'mlt_rt.buffer' op is declared but no launch uses it}}
mlt_rt.buffer @t0 temporary : tensor<64xf32>
