// RUN: mlt-opt %s -split-input-file -mlt-recompute-activations="ops=mlt.swiglu" | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-recompute-activations \
// RUN:   | FileCheck %s --check-prefix=NONE --implicit-check-not=mlt.recomputed
// RUN: mlt-opt %s -split-input-file -mlt-recompute-activations="ops=mlt.swiglu,mlt.silu" \
// RUN:   | FileCheck %s --check-prefix=CHAIN

// Tests that without op kinds the pass changes nothing.
// NONE: func.func @mlp
// NONE: func.func @chain

// Tests that a swiglu whose result the backward pass reads (the down
// projection's weight gradient) is cloned right before that first backward
// use, from the same gate and up (which mlt.swiglu_grad keeps), marked
// mlt.recomputed; the weight gradient reads the clone, while the forward
// down projection keeps the forward value.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[GATE:.+]] = mlt.matmul %{{.*}}, %{{.*}} transpose_rhs
// CHECK-NEXT: %[[UP:.+]] = mlt.matmul %{{.*}}, %{{.*}} transpose_rhs
// CHECK-NEXT: %[[H:.+]] = mlt.swiglu %[[GATE]], %[[UP]] : tensor<2x4x16xf32>
// CHECK-NEXT: %[[Y:.+]] = mlt.matmul %[[H]], %[[WD:.+]] transpose_rhs
// CHECK: %[[DY:.+]] = mlt.cross_entropy_grad
// CHECK-NEXT: %[[DH:.+]] = mlt.matmul %[[DY]], %[[WD]] :
// CHECK-NEXT: %[[H2:.+]] = mlt.swiglu %[[GATE]], %[[UP]] {mlt.recomputed} : tensor<2x4x16xf32>
// CHECK-NEXT: mlt.matmul %[[DY]], %[[H2]] transpose_lhs contract_batch
// CHECK-NEXT: mlt.swiglu_grad %[[DH]], %[[GATE]], %[[UP]]
func.func @mlp(%x: tensor<2x4x8xf32>, %wg: tensor<16x8xf32>, %wu: tensor<16x8xf32>,
               %wd: tensor<8x16xf32>, %labels: tensor<2x4xi32>) -> (tensor<f32>, tensor<8x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>) {
  %gate = mlt.matmul %x, %wg transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32>
  %up = mlt.matmul %x, %wu transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32>
  %h = mlt.swiglu %gate, %up : tensor<2x4x16xf32>
  %y = mlt.matmul %h, %wd transpose_rhs : tensor<2x4x16xf32>, tensor<8x16xf32>
  %loss = mlt.cross_entropy %y, %labels : tensor<2x4x8xf32>, tensor<2x4xi32>
  %seed = arith.constant dense<1.0> : tensor<f32>
  %dy = mlt.cross_entropy_grad %seed, %y, %labels : tensor<f32>, tensor<2x4x8xf32>, tensor<2x4xi32>
  %dh = mlt.matmul %dy, %wd : tensor<2x4x8xf32>, tensor<8x16xf32>
  %dwd = mlt.matmul %dy, %h transpose_lhs contract_batch : tensor<2x4x8xf32>, tensor<2x4x16xf32>
  %dgate, %dup = mlt.swiglu_grad %dh, %gate, %up : tensor<2x4x16xf32>
  return %loss, %dwd, %dgate, %dup : tensor<f32>, tensor<8x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>
}

// -----

// Tests that every backward use is given the one clone, placed before the
// first of them, and that an op the backward pass never reads stays as it
// is.
// CHECK-LABEL: func.func @two_backward_uses
// CHECK: %[[A:.+]] = mlt.swiglu %[[G:[^ ,]+]], %[[U:[^ ,]+]] : tensor<8xf32>
// CHECK-NEXT: %[[UNREAD:.+]] = mlt.swiglu %[[G]], %[[A]] : tensor<8xf32>
// CHECK-NEXT: mlt.add %[[A]], %[[UNREAD]]
// CHECK: %[[DY:.+]] = mlt.reshape %{{.*}} : tensor<1x8x1xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[R:.+]] = mlt.swiglu %[[G]], %[[U]] {mlt.recomputed} : tensor<8xf32>
// CHECK-NEXT: mlt.mul %[[DY]], %[[R]]
// CHECK-NEXT: mlt.add %[[R]], %[[DY]]
// CHECK-NOT: mlt.recomputed
// CHECK: return
func.func @two_backward_uses(%g: tensor<8xf32>, %u: tensor<8xf32>, %labels: tensor<1x8xi32>) -> (tensor<f32>, tensor<8xf32>, tensor<8xf32>) {
  %a = mlt.swiglu %g, %u : tensor<8xf32>
  %unread = mlt.swiglu %g, %a : tensor<8xf32>
  %sum = mlt.add %a, %unread : tensor<8xf32>
  %logits = mlt.reshape %sum : tensor<8xf32> -> tensor<1x8x1xf32>
  %loss = mlt.cross_entropy %logits, %labels : tensor<1x8x1xf32>, tensor<1x8xi32>
  %seed = arith.constant dense<1.0> : tensor<f32>
  %dl = mlt.cross_entropy_grad %seed, %logits, %labels : tensor<f32>, tensor<1x8x1xf32>, tensor<1x8xi32>
  %dy = mlt.reshape %dl : tensor<1x8x1xf32> -> tensor<8xf32>
  %p = mlt.mul %dy, %a : tensor<8xf32>
  %q = mlt.add %a, %dy : tensor<8xf32>
  return %loss, %p, %q : tensor<f32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// Tests that a swiglu is kept when recomputing it would not shorten its
// life or would lengthen another's: a forward use after the first backward
// use (%late), a read through a view after it (%viewed: a reshape names the
// same memory), or an operand (%dead, which only the swiglu reads) that
// dies in the forward pass.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: mlt.recomputed
// CHECK: return
func.func @kept(%g: tensor<8xf32>, %u: tensor<8xf32>, %labels: tensor<1x8xi32>) -> (tensor<f32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %a = mlt.swiglu %g, %u : tensor<8xf32>
  %c = mlt.swiglu %u, %g : tensor<8xf32>
  %dead = mlt.silu %g : tensor<8xf32>
  %b = mlt.swiglu %dead, %u : tensor<8xf32>
  %sum0 = mlt.add %a, %b : tensor<8xf32>
  %sum = mlt.add %sum0, %c : tensor<8xf32>
  %logits = mlt.reshape %sum : tensor<8xf32> -> tensor<1x8x1xf32>
  %loss = mlt.cross_entropy %logits, %labels : tensor<1x8x1xf32>, tensor<1x8xi32>
  %seed = arith.constant dense<1.0> : tensor<f32>
  %dl = mlt.cross_entropy_grad %seed, %logits, %labels : tensor<f32>, tensor<1x8x1xf32>, tensor<1x8xi32>
  %dy = mlt.reshape %dl : tensor<1x8x1xf32> -> tensor<8xf32>
  %p = mlt.mul %dy, %a : tensor<8xf32>
  %late = mlt.add %a, %a : tensor<8xf32>
  %q = mlt.mul %dy, %b : tensor<8xf32>
  %viewed = mlt.reshape %c : tensor<8xf32> -> tensor<2x4xf32>
  %r = mlt.mul %dy, %c : tensor<8xf32>
  %s = mlt.reshape %viewed : tensor<2x4xf32> -> tensor<8xf32>
  %late2 = mlt.add %s, %r : tensor<8xf32>
  return %loss, %p, %late, %q, %late2 : tensor<f32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// Tests that a function without a backward pass (no mlt.cross_entropy_grad)
// is left as it is.
// CHECK-LABEL: func.func @no_backward
// CHECK-NOT: mlt.recomputed
// CHECK: return
func.func @no_backward(%g: tensor<8xf32>, %u: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %a = mlt.swiglu %g, %u : tensor<8xf32>
  %b = mlt.mul %a, %a : tensor<8xf32>
  %c = mlt.add %a, %b : tensor<8xf32>
  return %b, %c : tensor<8xf32>, tensor<8xf32>
}

// -----

// Tests that the operand of a recomputed op is recomputed too when its kind
// is named (visiting the forward ops from last to first): the silu's first
// backward use is then the swiglu's clone, before which it is cloned in
// turn; without mlt.silu only the swiglu is.
// CHECK-LABEL: func.func @chain
// CHECK: %[[S:.+]] = mlt.silu %[[X:.+]] : tensor<8xf32>
// CHECK: %[[DY:.+]] = mlt.reshape %{{.*}} : tensor<1x8x1xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[H2:.+]] = mlt.swiglu %[[S]], %{{.*}} {mlt.recomputed}
// CHECK-NEXT: mlt.mul %[[DY]], %[[H2]]
// CHECK-NEXT: mlt.swiglu_grad %[[DY]], %[[S]]
// CHAIN-LABEL: func.func @chain
// CHAIN: %[[S:.+]] = mlt.silu %[[X:.+]] : tensor<8xf32>
// CHAIN-NEXT: %[[H:.+]] = mlt.swiglu %[[S]], %[[U:.+]] : tensor<8xf32>
// CHAIN: %[[DY:.+]] = mlt.reshape %{{.*}} : tensor<1x8x1xf32> -> tensor<8xf32>
// CHAIN-NEXT: %[[S2:.+]] = mlt.silu %[[X]] {mlt.recomputed} : tensor<8xf32>
// CHAIN-NEXT: %[[H2:.+]] = mlt.swiglu %[[S2]], %[[U]] {mlt.recomputed}
// CHAIN-NEXT: mlt.mul %[[DY]], %[[H2]]
// CHAIN-NEXT: %[[DS:.+]], %{{.*}} = mlt.swiglu_grad %[[DY]], %[[S2]], %[[U]]
// CHAIN-NEXT: mlt.silu_grad %[[DS]], %[[X]]
func.func @chain(%w: tensor<8xf32>, %v: tensor<8xf32>, %u: tensor<8xf32>, %labels: tensor<1x8xi32>) -> (tensor<f32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %x = mlt.mul %w, %v : tensor<8xf32>
  %s = mlt.silu %x : tensor<8xf32>
  %h = mlt.swiglu %s, %u : tensor<8xf32>
  %o = mlt.mul %h, %w : tensor<8xf32>
  %logits = mlt.reshape %o : tensor<8xf32> -> tensor<1x8x1xf32>
  %loss = mlt.cross_entropy %logits, %labels : tensor<1x8x1xf32>, tensor<1x8xi32>
  %seed = arith.constant dense<1.0> : tensor<f32>
  %dl = mlt.cross_entropy_grad %seed, %logits, %labels : tensor<f32>, tensor<1x8x1xf32>, tensor<1x8xi32>
  %dy = mlt.reshape %dl : tensor<1x8x1xf32> -> tensor<8xf32>
  %p = mlt.mul %dy, %h : tensor<8xf32>
  %ds, %du = mlt.swiglu_grad %dy, %s, %u : tensor<8xf32>
  %dx = mlt.silu_grad %ds, %x : tensor<8xf32>
  return %loss, %p, %dx, %du : tensor<f32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}
