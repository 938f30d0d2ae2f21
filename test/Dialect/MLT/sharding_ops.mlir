// RUN: mlt-opt %s | mlt-opt | FileCheck %s
// RUN: mlt-opt %s -mlir-print-op-generic | mlt-opt | FileCheck %s

// Tests that the mesh and sharding attributes, the sharding constraint, the
// collectives, the ring's steps and the batch-contracting matmul round-trip
// in custom and generic form.

// CHECK: module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 4>}
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 4>} {
  // CHECK: mlt.param @w {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<8x4xf32>
  mlt.param @w {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<8x4xf32>
  // A dimension over several axes, major first, and one given as a string.
  // CHECK: mlt.param @v {shardings = [#mlt.sharding<[dp, tp*cp, -]>, #mlt.sharding<[cp*tp*dp]>]}
  mlt.param @v {shardings = [#mlt.sharding<[dp, tp * cp, -]>, #mlt.sharding<["cp"*tp*dp]>]} : tensor<8xf32>
  // CHECK-LABEL: func.func @ops
  // CHECK-SAME: {mlt.sharding = #mlt.sharding<[dp, ?, -]>}
  func.func @ops(%x: tensor<4x8x16xf32> {mlt.sharding = #mlt.sharding<[dp, ?, -]>}, %y: tensor<4x8x16xf32>) -> tensor<16x16xf32> {
    // CHECK: mlt.shard %{{.*}} : tensor<4x8x16xf32> to #mlt.sharding<[?, tp, ?], partial = [dp]>
    %s = mlt.shard %x : tensor<4x8x16xf32> to #mlt.sharding<[?, tp, ?], partial = [dp]>
    // CHECK: mlt.all_reduce %{{.*}} over "dp" : tensor<4x8x16xf32>
    %r = mlt.all_reduce %s over "dp" : tensor<4x8x16xf32>
    // CHECK: mlt.reduce_scatter %{{.*}} over "tp" dim 1 : tensor<4x8x16xf32> -> tensor<4x2x16xf32>
    %rs = mlt.reduce_scatter %r over "tp" dim 1 : tensor<4x8x16xf32> -> tensor<4x2x16xf32>
    // CHECK: mlt.all_gather %{{.*}} over "tp" dim 1 : tensor<4x2x16xf32> -> tensor<4x8x16xf32>
    %g = mlt.all_gather %rs over "tp" dim 1 : tensor<4x2x16xf32> -> tensor<4x8x16xf32>
    // CHECK: mlt.shard_slice %{{.*}} over "dp" dim 0 : tensor<4x8x16xf32> -> tensor<2x8x16xf32>
    %sl = mlt.shard_slice %g over "dp" dim 0 : tensor<4x8x16xf32> -> tensor<2x8x16xf32>
    // CHECK: mlt.all_to_all %{{.*}} over "tp" split 2 concat 1 : tensor<4x2x16xf32> -> tensor<4x8x4xf32>
    %a = mlt.all_to_all %rs over "tp" split 2 concat 1 : tensor<4x2x16xf32> -> tensor<4x8x4xf32>
    // CHECK: mlt.reorder_sequence %{{.*}} over "tp" dim 1 to_natural : tensor<4x8x4xf32>
    %n = mlt.reorder_sequence %a over "tp" dim 1 to_natural : tensor<4x8x4xf32>
    // CHECK: mlt.reorder_sequence %{{.*}} over "tp" dim 1 : tensor<4x8x4xf32>
    %bal = mlt.reorder_sequence %n over "tp" dim 1 : tensor<4x8x4xf32>
    // CHECK: mlt.collective_permute %{{.*}} over "tp" shift 3 : tensor<4x8x4xf32>
    %p = mlt.collective_permute %bal over "tp" shift 3 : tensor<4x8x4xf32>
    // CHECK: mlt.matmul %{{.*}}, %{{.*}} transpose_lhs contract_batch : tensor<4x8x16xf32>, tensor<4x8x16xf32>
    %m = mlt.matmul %g, %y transpose_lhs contract_batch : tensor<4x8x16xf32>, tensor<4x8x16xf32>
    return %m : tensor<16x16xf32>
  }
  // The ring's steps: a block attention, a merge, a block gradient.
  // CHECK-LABEL: func.func @ring
  func.func @ring(%q: tensor<1x8x4x6xf32>, %k: tensor<1x8x2x6xf32>, %v: tensor<1x8x2x6xf32>) -> tensor<1x8x4x6xf32> {
    // CHECK: mlt.attention_block %{{.*}}, %{{.*}}, %{{.*}} over "tp" step 0 causal scale = 5.000000e-01 : tensor<1x8x4x6xf32>, tensor<1x8x2x6xf32>, tensor<1x8x2x6xf32> -> tensor<1x4x8xf32>
    %o0, %l0 = mlt.attention_block %q, %k, %v over "tp" step 0 causal scale = 0.5 : tensor<1x8x4x6xf32>, tensor<1x8x2x6xf32>, tensor<1x8x2x6xf32> -> tensor<1x4x8xf32>
    // CHECK: mlt.attention_block {{.*}} step 3 causal
    %o1, %l1 = mlt.attention_block %q, %k, %v over "tp" step 3 causal scale = 0.5 : tensor<1x8x4x6xf32>, tensor<1x8x2x6xf32>, tensor<1x8x2x6xf32> -> tensor<1x4x8xf32>
    // CHECK: mlt.attention_merge %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x8x4x6xf32>, tensor<1x4x8xf32>
    %o, %l = mlt.attention_merge %o0, %l0, %o1, %l1 : tensor<1x8x4x6xf32>, tensor<1x4x8xf32>
    // CHECK: mlt.attention_block_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} over "tp" step 1 causal scale = 5.000000e-01 : tensor<1x8x4x6xf32>, tensor<1x8x2x6xf32>, tensor<1x4x8xf32>
    %dq, %dk, %dv = mlt.attention_block_grad %o, %q, %k, %v, %o, %l over "tp" step 1 causal scale = 0.5 : tensor<1x8x4x6xf32>, tensor<1x8x2x6xf32>, tensor<1x4x8xf32>
    return %dq : tensor<1x8x4x6xf32>
  }
}
