// RUN: mlt-opt %s -split-input-file -mlt-propagate-shardings -verify-diagnostics

// Tests that shardings the mesh cannot realize are compile-time errors that
// name the value and the axis.

module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  // expected-error @+1 {{sharding of parameter @w does not fit: 'dp' is not an axis of the mesh #mlt.mesh<tp = 2>}}
  mlt.param @w {mlt.sharding = #mlt.sharding<[dp, -]>} : tensor<8x4xf32>
  func.func @f() {
    return
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<tp = 3>} {
  // expected-error @+1 {{sharding of parameter @model.layers.{}.mlp.gate_proj.weight does not fit: dimension 0 (size 176) is not divisible by mesh axis 'tp' of size 3}}
  mlt.param @"model.layers.{}.mlp.gate_proj.weight" layers 2 {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<176x64xf32>
  func.func @f() {
    return
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  // expected-error @+1 {{sharding of argument #0 (tokens) of @micro_step does not fit: dimension 0 (size 3) is not divisible by mesh axis 'dp' of size 2}}
  func.func @micro_step(%tokens: tensor<3x8xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}) {
    return
  }
}

// -----

module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  func.func @f(%x: tensor<2x8x5xf32>) -> tensor<2x8x5xf32> {
    // expected-error @+1 {{'mlt.shard' op sharding does not fit: dimension 2 (size 5) is not divisible by mesh axis 'tp' of size 2}}
    %y = mlt.shard %x : tensor<2x8x5xf32> to #mlt.sharding<[?, ?, tp]>
    return %y : tensor<2x8x5xf32>
  }
}

// -----

// expected-error @+1 {{mlt-propagate-shardings: the module has shardings but no mesh; add mlt.mesh = #mlt.mesh<...>}}
module {
  mlt.param @w {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<8x4xf32>
}

// -----

module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  // expected-error @+1 {{sharding of parameter @w does not fit: the sharding has 1 dimensions but the tensor has 2}}
  mlt.param @w {mlt.sharding = #mlt.sharding<[tp]>} : tensor<8x4xf32>
}

// -----

// expected-error @+1 {{mesh axis 'tp' splits two dimensions of one sharding}}
module attributes {mlt.mesh = #mlt.mesh<tp = 2>, mlt.x = #mlt.sharding<[tp, tp]>} {
}

// -----

// A parameter splits each dimension over one axis at most (the optimizer's
// partitioner and the checkpoints' blocks take one).
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>} {
  // expected-error @+1 {{parameter @w splits a dimension over several mesh axes, which parameters do not yet: #mlt.sharding<[dp*tp, -]>}}
  mlt.param @w {mlt.sharding = #mlt.sharding<[dp*tp, -]>} : tensor<8x4xf32>
  func.func @f(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
    return %x : tensor<2x4xf32>
  }
}

// -----

// The all-to-all exchange splits an attention's key/value heads over cp
// (after the tp they hold): 4 blocks do not divide 2 heads.
module attributes {mlt.mesh = #mlt.mesh<cp = 4>} {
  func.func @f(%q: tensor<2x8x4x16xf32> {mlt.sharding = #mlt.sharding<[-, cp, -, -]>},
               %k: tensor<2x8x2x16xf32> {mlt.sharding = #mlt.sharding<[-, cp, -, -]>}) -> tensor<2x8x4x16xf32> {
    // expected-error @+1 {{'mlt.attention' op mlt-propagate-shardings: the all-to-all exchange splits its 2 key/value heads into 4 blocks, which do not divide them}}
    %o = mlt.attention %q, %k, %k causal scale = 0.25 {mlt.cp_comm = "a2a"} : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>
    return %o : tensor<2x8x4x16xf32>
  }
}
