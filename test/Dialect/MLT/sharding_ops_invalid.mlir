// RUN: mlt-opt %s -split-input-file -verify-diagnostics

// Tests every verifier error of the mesh and sharding attributes, the
// sharding constraint, the collectives and the batch-contracting matmul.

// expected-error @+1 {{mesh axis 'tp' appears twice}}
module attributes {mlt.mesh = #mlt.mesh<tp = 2, tp = 2>} {}

// -----

// expected-error @+1 {{mesh axis 'dp' has size 0; sizes must be >= 1}}
module attributes {mlt.mesh = #mlt.mesh<dp = 0>} {}

// -----

// expected-error @+1 {{mesh axis 'tp' splits two dimensions of one sharding}}
module attributes {mlt.mesh = #mlt.mesh<tp = 2>, mlt.x = [#mlt.sharding<[tp, tp]>]} {}

// -----

// expected-error @+1 {{mesh axis 'tp' both splits a dimension and sums partial values (or is listed twice)}}
module attributes {mlt.mesh = #mlt.mesh<tp = 2>, mlt.x = [#mlt.sharding<[tp], partial = [tp]>]} {}

// -----

// expected-error @+1 {{'mlt.mesh' must be a #mlt.mesh<...> on a module}}
module attributes {mlt.mesh = #mlt.sharding<[]>} {}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mlt.all_reduce' op runs over mesh axis 'tp' but the module has no mlt.mesh}}
  %y = mlt.all_reduce %x over "tp" : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{'mlt.all_reduce' op 'tp' is not an axis of the mesh #mlt.mesh<dp = 2>}}
    %y = mlt.all_reduce %x over "tp" : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  func.func @f(%x: tensor<4xf32>) -> tensor<8xf32> {
    // expected-error @+1 {{'mlt.all_gather' op dimension 1 is out of range for rank 1}}
    %y = mlt.all_gather %x over "tp" dim 1 : tensor<4xf32> -> tensor<8xf32>
    return %y : tensor<8xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{'mlt.all_gather' op result dimension 0 must be 8, got 4}}
    %y = mlt.all_gather %x over "tp" dim 0 : tensor<4xf32> -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  func.func @f(%x: tensor<5xf32>) -> tensor<2xf32> {
    // expected-error @+1 {{'mlt.reduce_scatter' op dimension 0 of size 5 is not divisible by the axis size 2}}
    %y = mlt.reduce_scatter %x over "tp" dim 0 : tensor<5xf32> -> tensor<2xf32>
    return %y : tensor<2xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  func.func @f(%x: tensor<4x2xf32>) -> tensor<2xf32> {
    // expected-error @+1 {{'mlt.shard_slice' op result must have the input's rank and element type}}
    %y = mlt.shard_slice %x over "tp" dim 0 : tensor<4x2xf32> -> tensor<2xf32>
    return %y : tensor<2xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  func.func @f(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
    // expected-error @+1 {{'mlt.shard' op sharding does not fit: dimension 1 (size 3) is not divisible by mesh axis 'tp' of size 2}}
    %y = mlt.shard %x : tensor<4x3xf32> to #mlt.sharding<[-, tp]>
    return %y : tensor<4x3xf32>
  }
}

// -----

func.func @f(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
  // expected-error @+1 {{'mlt.shard' op sharding does not fit: the sharding has 1 dimensions but the tensor has 2}}
  %y = mlt.shard %x : tensor<4x3xf32> to #mlt.sharding<[-]>
  return %y : tensor<4x3xf32>
}

// -----

func.func @f(%x: tensor<2x4x8xf32>, %y: tensor<4x6xf32>) {
  // expected-error @+1 {{contract_batch needs transpose_lhs, no transpose_rhs and operands of one rank of 3 or more, got ranks 3 and 2}}
  %m = mlt.matmul %x, %y transpose_lhs contract_batch : tensor<2x4x8xf32>, tensor<4x6xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x8xf32>, %y: tensor<2x5x6xf32>) {
  // expected-error @+1 {{contracted dimension 1 differs: lhs has 4, rhs has 5}}
  %m = mlt.matmul %x, %y transpose_lhs contract_batch : tensor<2x4x8xf32>, tensor<2x5x6xf32>
  return
}

// -----

// expected-error @+1 {{mesh axis 'tp' splits two dimensions of one sharding (or one twice)}}
module attributes {mlt.mesh = #mlt.mesh<tp = 2, cp = 2>, mlt.x = [#mlt.sharding<[cp*tp, tp]>]} {}

// -----

// expected-error @+1 {{mesh axis 'cp' splits two dimensions of one sharding (or one twice)}}
module attributes {mlt.mesh = #mlt.mesh<tp = 2, cp = 2>, mlt.x = [#mlt.sharding<[cp*cp]>]} {}

// -----

// expected-error @+1 {{an open dimension ('?') has no axes}}
module attributes {mlt.mesh = #mlt.mesh<tp = 2, cp = 2>, mlt.x = [#mlt.sharding<[cp*"?"]>]} {}

// -----

module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
  func.func @f(%x: tensor<4x6x5xf32>) -> tensor<4x12x2xf32> {
    // expected-error @+1 {{'mlt.all_to_all' op dimension 2 of size 5 is not divisible by the axis size 2}}
    %y = mlt.all_to_all %x over "cp" split 2 concat 1 : tensor<4x6x5xf32> -> tensor<4x12x2xf32>
    return %y : tensor<4x12x2xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
  func.func @f(%x: tensor<4x6x8xf32>) -> tensor<4x6x8xf32> {
    // expected-error @+1 {{'mlt.all_to_all' op splits and concatenates the same dimension 2}}
    %y = mlt.all_to_all %x over "cp" split 2 concat 2 : tensor<4x6x8xf32> -> tensor<4x6x8xf32>
    return %y : tensor<4x6x8xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
  func.func @f(%x: tensor<4x6x8xf32>) -> tensor<4x6x4xf32> {
    // expected-error @+1 {{'mlt.all_to_all' op result dimension 1 must be 12, got 6}}
    %y = mlt.all_to_all %x over "cp" split 2 concat 1 : tensor<4x6x8xf32> -> tensor<4x6x4xf32>
    return %y : tensor<4x6x4xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
  func.func @f(%x: tensor<4x6x8xf32>) -> tensor<4x6x8xf32> {
    // expected-error @+1 {{'mlt.reorder_sequence' op dimension 1 of size 6 is not 2 x 2 equal chunks}}
    %y = mlt.reorder_sequence %x over "cp" dim 1 to_natural : tensor<4x6x8xf32>
    return %y : tensor<4x6x8xf32>
  }
}

// -----

func.func @f(%q: tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32> {
  // expected-error @+1 {{'mlt.cp_comm' must be "a2a" or "ring" on an mlt.attention or mlt.attention_grad}}
  %o = mlt.attention %q, %q, %q causal scale = 0.25 {mlt.cp_comm = "p2p"} : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
  func.func @f(%x: tensor<4x6x8xf32>) -> tensor<4x6x8xf32> {
    // expected-error @+1 {{'mlt.collective_permute' op shift 2 must be below the axis size 2}}
    %y = mlt.collective_permute %x over "cp" shift 2 : tensor<4x6x8xf32>
    return %y : tensor<4x6x8xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
  func.func @f(%x: tensor<4x6x8xf32>) -> tensor<4x6x8xf32> {
    // expected-error @+1 {{'mlt.collective_permute' op attribute 'shift' failed to satisfy constraint}}
    %y = mlt.collective_permute %x over "cp" shift 0 : tensor<4x6x8xf32>
    return %y : tensor<4x6x8xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
  func.func @f(%q: tensor<1x8x4x6xf32>, %k: tensor<1x8x2x6xf32>) -> tensor<1x8x4x6xf32> {
    // expected-error @+1 {{'mlt.attention_block' op step 2 must be below the axis size 2}}
    %o, %l = mlt.attention_block %q, %k, %k over "cp" step 2 causal scale = 0.5 : tensor<1x8x4x6xf32>, tensor<1x8x2x6xf32>, tensor<1x8x2x6xf32> -> tensor<1x4x8xf32>
    return %o : tensor<1x8x4x6xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
  func.func @f(%q: tensor<1x8x4x6xf32>, %k: tensor<1x16x2x6xf32>) -> tensor<1x8x4x6xf32> {
    // expected-error @+1 {{'mlt.attention_block' op query and key/value differ in dimension 1 (a ring step's keys are one rank's block, as many rows as its queries)}}
    %o, %l = mlt.attention_block %q, %k, %k over "cp" step 1 causal scale = 0.5 : tensor<1x8x4x6xf32>, tensor<1x16x2x6xf32>, tensor<1x16x2x6xf32> -> tensor<1x4x8xf32>
    return %o : tensor<1x8x4x6xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
  func.func @f(%q: tensor<1x8x4x6xf32>, %k: tensor<1x8x2x6xf32>) -> tensor<1x8x4x6xf32> {
    // expected-error @+1 {{'mlt.attention_block' op lse must be 'tensor<1x4x8xf32>', got 'tensor<1x8x4xf32>'}}
    %o, %l = mlt.attention_block %q, %k, %k over "cp" step 1 causal scale = 0.5 : tensor<1x8x4x6xf32>, tensor<1x8x2x6xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x4xf32>
    return %o : tensor<1x8x4x6xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
  func.func @f(%q: tensor<1x6x4x6xf32>, %k: tensor<1x6x3x6xf32>, %l: tensor<1x4x6xf32>) -> tensor<1x6x4x6xf32> {
    // expected-error @+1 {{'mlt.attention_block_grad' op query heads (4) must be a multiple of key/value heads (3)}}
    %dq, %dk, %dv = mlt.attention_block_grad %q, %q, %k, %k, %q, %l over "cp" step 1 causal scale = 0.5 : tensor<1x6x4x6xf32>, tensor<1x6x3x6xf32>, tensor<1x4x6xf32>
    return %dq : tensor<1x6x4x6xf32>
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<cp = 2>} {
  func.func @f(%o: tensor<1x8x4x6xf32>, %l: tensor<1x8x4xf32>) -> tensor<1x8x4x6xf32> {
    // expected-error @+1 {{'mlt.attention_merge' op lse must be [batch, heads, seq] of out [batch, seq, heads, head_dim], got 'tensor<1x8x4xf32>' for 'tensor<1x8x4x6xf32>'}}
    %m, %ml = mlt.attention_merge %o, %l, %o, %l : tensor<1x8x4x6xf32>, tensor<1x8x4xf32>
    return %m : tensor<1x8x4x6xf32>
  }
}
