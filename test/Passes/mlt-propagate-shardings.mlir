// RUN: mlt-opt %s -split-input-file -mlt-propagate-shardings | FileCheck %s

// Tests the sharding chosen for single ops from annotations on parameters and
// arguments: each op's results (`mlt.sharding`) and the shardings it needs
// its operands in (`mlt.operand_shardings`).

// Column-parallel linear layer: the weight's output features split over tp
// split the result's last dimension; the batch split over dp carries through.
// CHECK-LABEL: func.func @column_parallel
// CHECK: mlt.matmul {{.*}}mlt.operand_shardings = [#mlt.sharding<[dp, -, -]>, #mlt.sharding<[tp, -]>], mlt.sharding = [#mlt.sharding<[dp, -, tp]>]
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>} {
  mlt.param @w {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<8x4xf32>
  func.func @column_parallel(%x: tensor<4x2x4xf32> {mlt.sharding = #mlt.sharding<[dp, ?, ?]>}) -> tensor<4x2x8xf32> {
    %w = mlt.load @w : tensor<8x4xf32>
    %y = mlt.matmul %x, %w transpose_rhs : tensor<4x2x4xf32>, tensor<8x4xf32>
    return %y : tensor<4x2x8xf32>
  }
}

// -----

// Row-parallel linear layer: the contracted input features are split, so the
// result is a partial sum over tp; the input is needed split like the weight.
// Returned values are needed whole.
// CHECK-LABEL: func.func @row_parallel
// CHECK: mlt.matmul {{.*}}mlt.operand_shardings = [#mlt.sharding<[-, -, tp]>, #mlt.sharding<[-, tp]>], mlt.sharding = [#mlt.sharding<[-, -, -], partial = [tp]>]
// CHECK: return {{.*}}mlt.operand_shardings = [#mlt.sharding<[-, -, -]>]
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  mlt.param @w {mlt.sharding = #mlt.sharding<[-, tp]>} : tensor<4x8xf32>
  func.func @row_parallel(%x: tensor<4x2x8xf32>) -> tensor<4x2x4xf32> {
    %w = mlt.load @w : tensor<4x8xf32>
    %y = mlt.matmul %x, %w transpose_rhs : tensor<4x2x8xf32>, tensor<4x8xf32>
    return %y : tensor<4x2x4xf32>
  }
}

// -----

// Partial sums pass through an add whose operands agree on them; an RMSNorm
// needs its input whole (normalized dimension) and not partial.
// CHECK-LABEL: func.func @partial_through_add
// CHECK: mlt.add {{.*}}mlt.operand_shardings = [#mlt.sharding<[-, -, -], partial = [tp]>, #mlt.sharding<[-, -, -], partial = [tp]>], mlt.sharding = [#mlt.sharding<[-, -, -], partial = [tp]>]
// CHECK: mlt.rms_norm {{.*}}mlt.operand_shardings = [#mlt.sharding<[-, -, -]>, #mlt.sharding<[-]>], mlt.sharding = [#mlt.sharding<[-, -, -]>]
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  mlt.param @w1 {mlt.sharding = #mlt.sharding<[-, tp]>} : tensor<4x8xf32>
  mlt.param @w2 {mlt.sharding = #mlt.sharding<[-, tp]>} : tensor<4x8xf32>
  mlt.param @g : tensor<4xf32>
  func.func @partial_through_add(%x: tensor<4x2x8xf32> {mlt.sharding = #mlt.sharding<[-, -, tp]>}) -> tensor<4x2x4xf32> {
    %w1 = mlt.load @w1 : tensor<4x8xf32>
    %w2 = mlt.load @w2 : tensor<4x8xf32>
    %a = mlt.matmul %x, %w1 transpose_rhs : tensor<4x2x8xf32>, tensor<4x8xf32>
    %b = mlt.matmul %x, %w2 transpose_rhs : tensor<4x2x8xf32>, tensor<4x8xf32>
    %s = mlt.add %a, %b : tensor<4x2x4xf32>
    %g = mlt.load @g : tensor<4xf32>
    %n = mlt.rms_norm %s, %g eps = 1.0e-05 : tensor<4x2x4xf32>, tensor<4xf32>
    return %n : tensor<4x2x4xf32>
  }
}

// -----

// Heads split through the reshape of the hidden dimension (heads major) and
// into a grouped-query attention: 4 query heads and 2 key/value heads split
// over tp=2 together, the sequence and head dimension whole.
// CHECK-LABEL: func.func @heads
// CHECK: mlt.reshape {{.*}}mlt.sharding = [#mlt.sharding<[-, -, tp, -]>]
// CHECK: mlt.attention {{.*}}mlt.operand_shardings = [#mlt.sharding<[-, -, tp, -]>, #mlt.sharding<[-, -, tp, -]>, #mlt.sharding<[-, -, tp, -]>], mlt.sharding = [#mlt.sharding<[-, -, tp, -]>]
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  func.func @heads(%q: tensor<1x8x64xf32> {mlt.sharding = #mlt.sharding<[-, -, tp]>}, %k: tensor<1x8x2x16xf32>, %v: tensor<1x8x2x16xf32>) -> tensor<1x8x4x16xf32> {
    %q4 = mlt.reshape %q : tensor<1x8x64xf32> -> tensor<1x8x4x16xf32>
    %o = mlt.attention %q4, %k, %v causal scale = 0.25 : tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>
    return %o : tensor<1x8x4x16xf32>
  }
}

// -----

// Fewer key/value heads than tensor-parallel ranks (multi-query attention:
// one kv head, tp=2): the query heads are split, the key/value head is
// replicated on every rank (its gradient then sums over tp).
// CHECK-LABEL: func.func @too_few_kv_heads
// CHECK: mlt.attention {{.*}}mlt.operand_shardings = [#mlt.sharding<[-, -, tp, -]>, #mlt.sharding<[-, -, -, -]>, #mlt.sharding<[-, -, -, -]>], mlt.sharding = [#mlt.sharding<[-, -, tp, -]>]
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  func.func @too_few_kv_heads(%q: tensor<1x8x4x16xf32> {mlt.sharding = #mlt.sharding<[-, -, tp, -]>}, %k: tensor<1x8x1x16xf32>, %v: tensor<1x8x1x16xf32>) -> tensor<1x8x4x16xf32> {
    %o = mlt.attention %q, %k, %v causal scale = 0.25 : tensor<1x8x4x16xf32>, tensor<1x8x1x16xf32>, tensor<1x8x1x16xf32>
    return %o : tensor<1x8x4x16xf32>
  }
}

// -----

// Vocabulary-parallel embedding (a partial sum over tp: each rank looks up its
// rows) and cross-entropy (the vocabulary split is reduced inside the op, so
// the loss is partial only over the batch split, dp).
// CHECK-LABEL: func.func @vocab_parallel
// CHECK: mlt.embedding {{.*}}mlt.sharding = [#mlt.sharding<[dp, -, -], partial = [tp]>]
// CHECK: mlt.matmul {{.*}}mlt.sharding = [#mlt.sharding<[dp, -, tp]>]
// CHECK: mlt.cross_entropy {{.*}}mlt.operand_shardings = [#mlt.sharding<[dp, -, tp]>, #mlt.sharding<[dp, -]>], mlt.sharding = [#mlt.sharding<[], partial = [dp]>]
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>} {
  mlt.param @embed {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<16x4xf32>
  mlt.param @head {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<16x4xf32>
  func.func @vocab_parallel(%ids: tensor<2x4xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}, %labels: tensor<2x4xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}) -> tensor<f32> {
    %e = mlt.load @embed : tensor<16x4xf32>
    %h = mlt.embedding %ids, %e : tensor<2x4xi32>, tensor<16x4xf32>
    %w = mlt.load @head : tensor<16x4xf32>
    %logits = mlt.matmul %h, %w transpose_rhs : tensor<2x4x4xf32>, tensor<16x4xf32>
    %loss = mlt.cross_entropy %logits, %labels : tensor<2x4x16xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
}

// -----

// Sequence parallelism: a constraint splits the sequence over tp; the
// column-parallel weight keeps tp for its output features (parameters win),
// so the matmul needs its input gathered along the sequence.
// CHECK-LABEL: func.func @sequence_parallel
// CHECK: mlt.shard {{.*}}mlt.sharding = [#mlt.sharding<[-, tp, -]>]
// CHECK: mlt.rms_norm {{.*}}mlt.sharding = [#mlt.sharding<[-, tp, -]>]
// CHECK: mlt.matmul {{.*}}mlt.operand_shardings = [#mlt.sharding<[-, -, -]>, #mlt.sharding<[tp, -]>], mlt.sharding = [#mlt.sharding<[-, -, tp]>]
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  mlt.param @g : tensor<4xf32>
  mlt.param @w {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<8x4xf32>
  func.func @sequence_parallel(%x: tensor<2x8x4xf32>) -> tensor<2x8x8xf32> {
    %xs = mlt.shard %x : tensor<2x8x4xf32> to #mlt.sharding<[?, tp, ?]>
    %g = mlt.load @g : tensor<4xf32>
    %n = mlt.rms_norm %xs, %g eps = 1.0e-05 : tensor<2x8x4xf32>, tensor<4xf32>
    %w = mlt.load @w : tensor<8x4xf32>
    %y = mlt.matmul %n, %w transpose_rhs : tensor<2x8x4xf32>, tensor<8x4xf32>
    return %y : tensor<2x8x8xf32>
  }
}

// -----

// Data parallelism: the weight gradient of a batch split over dp is a partial
// sum over dp; the gradient buffer accumulates it partial (one all-reduce per
// step, in the optimizer), so accumulate_grad keeps the partial.
// CHECK-LABEL: func.func @weight_gradient
// CHECK: mlt.matmul {{.*}}contract_batch {{.*}}mlt.sharding = [#mlt.sharding<[-, -], partial = [dp]>]
// CHECK: mlt.accumulate_grad {{.*}}mlt.operand_shardings = [#mlt.sharding<[-, -], partial = [dp]>]
// CHECK-LABEL: func.func @optimizer
// CHECK: mlt.load_grad {{.*}}mlt.sharding = [#mlt.sharding<[-, -], partial = [dp]>]
// CHECK: mlt.sum_squares {{.*}}mlt.operand_shardings = [#mlt.sharding<[-, -]>]
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  mlt.param @w : tensor<8x4xf32>
  func.func @weight_gradient(%x: tensor<4x2x4xf32> {mlt.sharding = #mlt.sharding<[dp, -, -]>}, %dy: tensor<4x2x8xf32> {mlt.sharding = #mlt.sharding<[dp, -, -]>}) {
    %dw = mlt.matmul %dy, %x transpose_lhs contract_batch : tensor<4x2x8xf32>, tensor<4x2x4xf32>
    mlt.accumulate_grad @w, %dw : tensor<8x4xf32>
    return
  }
  func.func @optimizer() -> tensor<f32> {
    %g = mlt.load_grad @w : tensor<8x4xf32>
    %s = mlt.sum_squares %g : tensor<8x4xf32>
    return %s : tensor<f32>
  }
}

// -----

// Context and sequence parallelism: the constraint splits the sequence over
// cp then tp (each cp block in tp blocks). The norm keeps both; the
// column-parallel weight keeps tp for its output features (parameters win),
// so the sequence factor of its product takes the longest prefix of cp*tp
// still free, cp; the row-parallel product leaves a partial sum over tp
// whose sequence is cp's, and the residual add takes cp*tp again.
// CHECK-LABEL: func.func @context_sequence_parallel
// CHECK: mlt.shard {{.*}}mlt.sharding = [#mlt.sharding<[-, cp*tp, -]>]
// CHECK: mlt.rms_norm {{.*}}mlt.sharding = [#mlt.sharding<[-, cp*tp, -]>]
// CHECK: mlt.matmul {{.*}}mlt.operand_shardings = [#mlt.sharding<[-, cp, -]>, #mlt.sharding<[tp, -]>], mlt.sharding = [#mlt.sharding<[-, cp, tp]>]
// CHECK: mlt.matmul {{.*}}mlt.operand_shardings = [#mlt.sharding<[-, cp, tp]>, #mlt.sharding<[-, tp]>], mlt.sharding = [#mlt.sharding<[-, cp, -], partial = [tp]>]
// CHECK: mlt.shard {{.*}}mlt.operand_shardings = [#mlt.sharding<[-, cp*tp, -]>], mlt.sharding = [#mlt.sharding<[-, cp*tp, -]>]
// CHECK: mlt.add {{.*}}mlt.sharding = [#mlt.sharding<[-, cp*tp, -]>]
module attributes {mlt.mesh = #mlt.mesh<cp = 2, tp = 2>} {
  mlt.param @g : tensor<4xf32>
  mlt.param @w {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<8x4xf32>
  mlt.param @o {mlt.sharding = #mlt.sharding<[-, tp]>} : tensor<4x8xf32>
  func.func @context_sequence_parallel(%x: tensor<2x8x4xf32> {mlt.sharding = #mlt.sharding<[-, cp, -]>}) -> tensor<2x8x4xf32> {
    %xs = mlt.shard %x : tensor<2x8x4xf32> to #mlt.sharding<[?, cp*tp, ?]>
    %g = mlt.load @g : tensor<4xf32>
    %n = mlt.rms_norm %xs, %g eps = 1.0e-05 : tensor<2x8x4xf32>, tensor<4xf32>
    %w = mlt.load @w : tensor<8x4xf32>
    %y = mlt.matmul %n, %w transpose_rhs : tensor<2x8x4xf32>, tensor<8x4xf32>
    %o = mlt.load @o : tensor<4x8xf32>
    %z = mlt.matmul %y, %o transpose_rhs : tensor<2x8x8xf32>, tensor<4x8xf32>
    %zs = mlt.shard %z : tensor<2x8x4xf32> to #mlt.sharding<[?, cp*tp, ?]>
    %r = mlt.add %xs, %zs : tensor<2x8x4xf32>
    return %r : tensor<2x8x4xf32>
  }
}

// -----

// A sequence of positions splits over cp alone: rope takes the cp prefix of
// cp*tp (its rows' positions are those of the rank's cp chunks).
// CHECK-LABEL: func.func @positions_over_cp
// CHECK: mlt.rope {{.*}}mlt.operand_shardings = [#mlt.sharding<[-, cp, -, -]>
module attributes {mlt.mesh = #mlt.mesh<cp = 2, tp = 2>} {
  func.func @positions_over_cp(%x: tensor<2x8x2x4xf32>) -> tensor<2x8x2x4xf32> {
    %xs = mlt.shard %x : tensor<2x8x2x4xf32> to #mlt.sharding<[?, cp*tp, -, -]>
    %r = mlt.rope %xs theta = 1.0e+04 : tensor<2x8x2x4xf32>
    return %r : tensor<2x8x2x4xf32>
  }
}
