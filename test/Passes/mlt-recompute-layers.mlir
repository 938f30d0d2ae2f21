// RUN: mlt-opt %s -split-input-file -mlt-recompute-layers="every=1" | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-recompute-layers="every=2" \
// RUN:   | FileCheck %s --check-prefix=EVERY2
// RUN: mlt-opt %s -split-input-file -mlt-recompute-layers \
// RUN:   | FileCheck %s --check-prefix=NONE --implicit-check-not=mlt.recomputed
// RUN: not mlt-opt %s -split-input-file -mlt-recompute-layers="every=-1" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BAD

// Tests that without layers to recompute (every=0, the default) the pass
// changes nothing.
// NONE: func.func @two_layers
// NONE: func.func @sharded
// BAD: error: mlt-recompute-layers: every must be 0 (no layer) or more, got -1

// Tests that each layer's ops that its backward pass reads are cloned right
// before the first backward use, from the layer's input (%x, the previous
// layer's output %y0) and the parameter (%w), marked mlt.recomputed, and
// that the backward uses read the clones; what leaves a layer (%y0, the
// next layer's input, which the backward reads too) is kept, not cloned,
// and so is what the backward does not read (%s0, %s1). With every=2 only
// layer 0 is.
// CHECK-LABEL: func.func @two_layers
// CHECK: %[[A0:.+]] = mlt.mul %[[X:[^ ,]+]], %[[W:[^ ,]+]] {mlt.layer = 0 : i64}
// CHECK: %[[Y0:.+]] = mlt.add
// CHECK: %[[A1:.+]] = mlt.mul %[[Y0]], %[[W]] {mlt.layer = 1 : i64}
// CHECK: %[[DY:.+]] = mlt.reshape %{{.*}} : tensor<1x8x1xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[R1:.+]] = mlt.mul %[[Y0]], %[[W]] {mlt.layer = 1 : i64, mlt.recomputed}
// CHECK-NEXT: %[[DA1:.+]] = mlt.silu_grad %[[DY]], %[[R1]]
// CHECK-NEXT: mlt.mul %[[DA1]], %[[Y0]]
// CHECK-NEXT: %[[DX1:.+]] = mlt.mul %[[DA1]], %[[W]]
// CHECK-NEXT: %[[DY0:.+]] = mlt.add %[[DY]], %[[DX1]]
// CHECK-NEXT: %[[R0:.+]] = mlt.mul %[[X]], %[[W]] {mlt.layer = 0 : i64, mlt.recomputed}
// CHECK-NEXT: mlt.silu_grad %[[DY0]], %[[R0]]
// CHECK-NOT: mlt.recomputed
// CHECK: return
// EVERY2-LABEL: func.func @two_layers
// EVERY2-NOT: mlt.recomputed
// EVERY2: mlt.cross_entropy_grad
// EVERY2-NOT: mlt.recomputed
// EVERY2: %[[DY0:.+]] = mlt.add
// EVERY2-NEXT: %[[R0:.+]] = mlt.mul %{{.*}}, %{{.*}} {mlt.layer = 0 : i64, mlt.recomputed}
// EVERY2-NEXT: mlt.silu_grad %[[DY0]], %[[R0]]
// EVERY2-NOT: mlt.recomputed
// EVERY2: return
func.func @two_layers(%x: tensor<8xf32>, %w: tensor<8xf32>, %labels: tensor<1x8xi32>) -> (tensor<f32>, tensor<8xf32>, tensor<8xf32>) {
  %a0 = mlt.mul %x, %w {mlt.layer = 0 : i64} : tensor<8xf32>
  %s0 = mlt.silu %a0 {mlt.layer = 0 : i64} : tensor<8xf32>
  %y0 = mlt.add %x, %s0 {mlt.layer = 0 : i64} : tensor<8xf32>
  %a1 = mlt.mul %y0, %w {mlt.layer = 1 : i64} : tensor<8xf32>
  %s1 = mlt.silu %a1 {mlt.layer = 1 : i64} : tensor<8xf32>
  %y1 = mlt.add %y0, %s1 {mlt.layer = 1 : i64} : tensor<8xf32>
  %logits = mlt.reshape %y1 : tensor<8xf32> -> tensor<1x8x1xf32>
  %loss = mlt.cross_entropy %logits, %labels : tensor<1x8x1xf32>, tensor<1x8xi32>
  %seed = arith.constant {mlt.loss_seed} dense<1.0> : tensor<f32>
  %dl = mlt.cross_entropy_grad %seed, %logits, %labels : tensor<f32>, tensor<1x8x1xf32>, tensor<1x8xi32>
  %dy = mlt.reshape %dl : tensor<1x8x1xf32> -> tensor<8xf32>
  %da1 = mlt.silu_grad %dy, %a1 : tensor<8xf32>
  %dw1 = mlt.mul %da1, %y0 : tensor<8xf32>
  %dx1 = mlt.mul %da1, %w : tensor<8xf32>
  %dy0 = mlt.add %dy, %dx1 : tensor<8xf32>
  %da0 = mlt.silu_grad %dy0, %a0 : tensor<8xf32>
  %dw0 = mlt.mul %da0, %x : tensor<8xf32>
  return %loss, %dw1, %dw0 : tensor<f32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// Tests that a collective mlt-spmdize inserted (no mlt.layer) belongs to the
// layer whose value it reads and is recomputed with it, before the clone
// that reads it; and that on a pipeline stage before the last, whose
// backward pass starts at the receive marked mlt.loss_seed, the layer is
// recomputed as well.
// CHECK-LABEL: func.func @sharded
// CHECK: %[[N:.+]] = mlt.mul %[[X:[^ ,]+]], %[[W:[^ ,]+]] {mlt.layer = 3 : i64}
// CHECK: %[[DY:.+]] = mlt.recv
// CHECK-NEXT: %[[N2:.+]] = mlt.mul %[[X]], %[[W]] {mlt.layer = 3 : i64, mlt.recomputed}
// CHECK-NEXT: %[[G2:.+]] = mlt.all_gather %[[N2]] over "tp" dim 0 {mlt.recomputed}
// CHECK-NEXT: %[[S2:.+]] = mlt.silu %[[G2]] {mlt.layer = 3 : i64, mlt.recomputed}
// CHECK-NEXT: mlt.mul %[[DY]], %[[S2]]
// CHECK-NEXT: mlt.silu_grad %[[DY]], %[[G2]]
module attributes {mlt.mesh = #mlt.mesh<pp = 2, tp = 2>} {
  func.func @sharded(%x: tensor<4xf32>, %w: tensor<4xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
    %n = mlt.mul %x, %w {mlt.layer = 3 : i64} : tensor<4xf32>
    %g = mlt.all_gather %n over "tp" dim 0 : tensor<4xf32> -> tensor<8xf32>
    %s = mlt.silu %g {mlt.layer = 3 : i64} : tensor<8xf32>
    %y = mlt.add %g, %s {mlt.layer = 3 : i64} : tensor<8xf32>
    mlt.send %y to "pp" shift 1 : tensor<8xf32> layout #mlt.sharding<[-]>
    %dy = mlt.recv from "pp" shift 1 {mlt.loss_seed} : tensor<8xf32> layout #mlt.sharding<[-]>
    %dw = mlt.mul %dy, %s : tensor<8xf32>
    %dg = mlt.silu_grad %dy, %g : tensor<8xf32>
    return %dw, %dg : tensor<8xf32>, tensor<8xf32>
  }
}
