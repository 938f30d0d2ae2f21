// RUN: mlt-opt %s -split-input-file -mlt-ring-attention -verify-diagnostics

// Tests that mlt-ring-attention refuses, naming the problem, an attention of
// the ring whose keys were not gathered along the sequence over its axis,
// and a gradient whose key gradient is not reduce-scattered there.

module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
  func.func @f(%q: tensor<1x4x2x8xf32>, %k: tensor<1x8x1x8xf32>) -> tensor<1x4x2x8xf32> {
    // expected-error @+1 {{'mlt.attention' op mlt-ring-attention: its keys are not gathered along the sequence over 'cp' (mlt.all_gather ... dim 1)}}
    %o = mlt.attention %q, %k, %k causal scale = 0.25 {mlt.cp_comm = "ring", mlt.sequence_shard = "cp"} : tensor<1x4x2x8xf32>, tensor<1x8x1x8xf32>, tensor<1x8x1x8xf32>
    return %o : tensor<1x4x2x8xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
  func.func @f(%q: tensor<1x4x2x8xf32>, %kl: tensor<1x4x1x8xf32>) -> tensor<1x8x1x8xf32> {
    %k = mlt.all_gather %kl over "cp" dim 1 : tensor<1x4x1x8xf32> -> tensor<1x8x1x8xf32>
    %o = mlt.attention %q, %k, %k causal scale = 0.25 {mlt.cp_comm = "ring", mlt.sequence_shard = "cp"} : tensor<1x4x2x8xf32>, tensor<1x8x1x8xf32>, tensor<1x8x1x8xf32>
    // expected-error @+1 {{'mlt.attention_grad' op mlt-ring-attention: its key gradient is not reduce-scattered along the sequence over 'cp' and nothing else}}
    %dq, %dk, %dv = mlt.attention_grad %o, %q, %k, %k, %o causal scale = 0.25 {mlt.cp_comm = "ring", mlt.sequence_shard = "cp"} : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x8x1x8xf32>, tensor<1x8x1x8xf32>, tensor<1x4x2x8xf32>
    return %dk : tensor<1x8x1x8xf32>
  }
}
