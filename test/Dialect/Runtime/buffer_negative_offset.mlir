// RUN: mlt-opt %s -verify-diagnostics

// Tests that a buffer's offset cannot be negative.
// expected-error @+1 {{'mlt_rt.buffer' op offset must be non-negative}}
mlt_rt.buffer @t0 temporary offset -256 : tensor<64xf32>
