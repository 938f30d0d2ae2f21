// RUN: mlt-opt %s -verify-diagnostics

// Tests that a nested symbol reference is rejected by name.
mlt_rt.buffer @a temporary : tensor<4xf32>
mlt_rt.program @p {
  // expected-error @+1 {{'mlt_rt.launch' op uses @a::@b, which is not a buffer}}
  mlt_rt.launch "add" [@a, @a::@b] -> [@a] ints [4]
}
