// RUN: mlt-opt %s -split-input-file -mlt-spmdize | FileCheck %s

// The inputs are written as mlt-propagate-shardings leaves them: results'
// shardings in `mlt.sharding`, the shardings each op needs its operands in
// in `mlt.operand_shardings`, function arguments annotated, the mesh on the
// module.

// Tests that sharded arguments, parameters and results take the type of the
// block one rank holds, that the needed shardings are dropped while the
// results keep theirs, and that a returned value split over two axes is
// gathered back, one all-gather per split dimension, in dimension order.
// CHECK-LABEL: func.func @column_parallel
// CHECK-SAME: (%[[X:.+]]: tensor<2x2x4xf32> {mlt.sharding = #mlt.sharding<[dp, -, -]>}) -> tensor<4x2x8xf32>
// CHECK-NEXT: %[[W:.+]] = mlt.load @w {mlt.sharding = [#mlt.sharding<[tp, -]>]} : tensor<4x4xf32>
// CHECK-NEXT: %[[Y:.+]] = mlt.matmul %[[X]], %[[W]] transpose_rhs {mlt.sharding = [#mlt.sharding<[dp, -, tp]>]} : tensor<2x2x4xf32>, tensor<4x4xf32>
// CHECK-NEXT: %[[G0:.+]] = mlt.all_gather %[[Y]] over "dp" dim 0 : tensor<2x2x4xf32> -> tensor<4x2x4xf32>
// CHECK-NEXT: %[[G1:.+]] = mlt.all_gather %[[G0]] over "tp" dim 2 : tensor<4x2x4xf32> -> tensor<4x2x8xf32>
// CHECK-NEXT: return %[[G1]] : tensor<4x2x8xf32>
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>} {
  mlt.param @w {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<8x4xf32>
  func.func @column_parallel(%x: tensor<4x2x4xf32> {mlt.sharding = #mlt.sharding<[dp, -, -]>}) -> tensor<4x2x8xf32> {
    %w = mlt.load @w {mlt.sharding = [#mlt.sharding<[tp, -]>]} : tensor<8x4xf32>
    %y = mlt.matmul %x, %w transpose_rhs {mlt.operand_shardings = [#mlt.sharding<[dp, -, -]>, #mlt.sharding<[tp, -]>], mlt.sharding = [#mlt.sharding<[dp, -, tp]>]} : tensor<4x2x4xf32>, tensor<8x4xf32>
    return {mlt.operand_shardings = [#mlt.sharding<[-, -, -]>]} %y : tensor<4x2x8xf32>
  }
}

// -----

// Tests that a partial sum needed whole is all-reduced over its axis.
// CHECK-LABEL: func.func @row_parallel
// CHECK-SAME: (%[[X:.+]]: tensor<4x2x4xf32> {mlt.sharding = #mlt.sharding<[-, -, tp]>}) -> tensor<4x2x4xf32>
// CHECK-NEXT: %[[W:.+]] = mlt.load @w {{.*}} : tensor<4x4xf32>
// CHECK-NEXT: %[[Y:.+]] = mlt.matmul %[[X]], %[[W]] transpose_rhs {mlt.sharding = [#mlt.sharding<[-, -, -], partial = [tp]>]} : tensor<4x2x4xf32>, tensor<4x4xf32>
// CHECK-NEXT: %[[SUM:.+]] = mlt.all_reduce %[[Y]] over "tp" : tensor<4x2x4xf32>
// CHECK-NEXT: return %[[SUM]] : tensor<4x2x4xf32>
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  mlt.param @w {mlt.sharding = #mlt.sharding<[-, tp]>} : tensor<4x8xf32>
  func.func @row_parallel(%x: tensor<4x2x8xf32> {mlt.sharding = #mlt.sharding<[-, -, tp]>}) -> tensor<4x2x4xf32> {
    %w = mlt.load @w {mlt.sharding = [#mlt.sharding<[-, tp]>]} : tensor<4x8xf32>
    %y = mlt.matmul %x, %w transpose_rhs {mlt.operand_shardings = [#mlt.sharding<[-, -, tp]>, #mlt.sharding<[-, tp]>], mlt.sharding = [#mlt.sharding<[-, -, -], partial = [tp]>]} : tensor<4x2x8xf32>, tensor<4x8xf32>
    return {mlt.operand_shardings = [#mlt.sharding<[-, -, -]>]} %y : tensor<4x2x4xf32>
  }
}

// -----

// Tests that a partial sum needed split over its own axis is
// reduce-scattered along the split dimension, that an `mlt.shard`
// constraint is realized that way and removed (its users take the
// converted value), and that the split result is gathered for the return.
// CHECK-LABEL: func.func @reduce_scatter
// CHECK: %[[Y:.+]] = mlt.matmul
// CHECK-NEXT: %[[RS:.+]] = mlt.reduce_scatter %[[Y]] over "tp" dim 1 : tensor<2x8x4xf32> -> tensor<2x4x4xf32>
// CHECK-NEXT: %[[G:.+]] = mlt.all_gather %[[RS]] over "tp" dim 1 : tensor<2x4x4xf32> -> tensor<2x8x4xf32>
// CHECK-NEXT: return %[[G]] : tensor<2x8x4xf32>
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  mlt.param @w {mlt.sharding = #mlt.sharding<[-, tp]>} : tensor<4x8xf32>
  func.func @reduce_scatter(%x: tensor<2x8x8xf32> {mlt.sharding = #mlt.sharding<[-, -, tp]>}) -> tensor<2x8x4xf32> {
    %w = mlt.load @w {mlt.sharding = [#mlt.sharding<[-, tp]>]} : tensor<4x8xf32>
    %y = mlt.matmul %x, %w transpose_rhs {mlt.operand_shardings = [#mlt.sharding<[-, -, tp]>, #mlt.sharding<[-, tp]>], mlt.sharding = [#mlt.sharding<[-, -, -], partial = [tp]>]} : tensor<2x8x8xf32>, tensor<4x8xf32>
    %ys = mlt.shard %y : tensor<2x8x4xf32> to #mlt.sharding<[?, tp, ?]> {mlt.operand_shardings = [#mlt.sharding<[-, tp, -]>], mlt.sharding = [#mlt.sharding<[-, tp, -]>]}
    return {mlt.operand_shardings = [#mlt.sharding<[-, -, -]>]} %ys : tensor<2x8x4xf32>
  }
}

// -----

// Tests that a value every rank holds whole, needed split, is sliced
// locally (the argument's sharding is closed, so the constraint after it
// splits it), and that the ops after it work on the block.
// CHECK-LABEL: func.func @shard_slice
// CHECK-SAME: (%[[X:.+]]: tensor<2x8x4xf32> {mlt.sharding = #mlt.sharding<[-, -, -]>}) -> tensor<2x8x4xf32>
// CHECK-NEXT: %[[XS:.+]] = mlt.shard_slice %[[X]] over "tp" dim 1 : tensor<2x8x4xf32> -> tensor<2x4x4xf32>
// CHECK-NEXT: %[[G:.+]] = mlt.load @g
// CHECK-NEXT: %[[N:.+]] = mlt.rms_norm %[[XS]], %[[G]] {{.*}} : tensor<2x4x4xf32>, tensor<4xf32>
// CHECK-NEXT: %[[NG:.+]] = mlt.all_gather %[[N]] over "tp" dim 1 : tensor<2x4x4xf32> -> tensor<2x8x4xf32>
// CHECK-NEXT: return %[[NG]]
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  mlt.param @g : tensor<4xf32>
  func.func @shard_slice(%x: tensor<2x8x4xf32> {mlt.sharding = #mlt.sharding<[-, -, -]>}) -> tensor<2x8x4xf32> {
    %xs = mlt.shard %x : tensor<2x8x4xf32> to #mlt.sharding<[?, tp, ?]> {mlt.operand_shardings = [#mlt.sharding<[-, tp, -]>], mlt.sharding = [#mlt.sharding<[-, tp, -]>]}
    %g = mlt.load @g {mlt.sharding = [#mlt.sharding<[-]>]} : tensor<4xf32>
    %n = mlt.rms_norm %xs, %g eps = 1.000000e-05 {mlt.operand_shardings = [#mlt.sharding<[-, tp, -]>, #mlt.sharding<[-]>], mlt.sharding = [#mlt.sharding<[-, tp, -]>]} : tensor<2x8x4xf32>, tensor<4xf32>
    return {mlt.operand_shardings = [#mlt.sharding<[-, -, -]>]} %n : tensor<2x8x4xf32>
  }
}

// -----

// Tests the conversions of one operand, in order: partial sums first (an
// all-reduce, not a reduce-scatter, when the dimension the target splits
// over that axis is split over another one), then all-gathers of the
// dimensions split otherwise, then local slices.
// CHECK-LABEL: func.func @several_conversions
// CHECK: %[[H:.+]] = mlt.embedding {{.*}} : tensor<1x4xi32>, tensor<8x4xf32>
// CHECK-NEXT: %[[SUM:.+]] = mlt.all_reduce %[[H]] over "tp" : tensor<1x4x4xf32>
// CHECK-NEXT: %[[WHOLE:.+]] = mlt.all_gather %[[SUM]] over "dp" dim 0 : tensor<1x4x4xf32> -> tensor<2x4x4xf32>
// CHECK-NEXT: %[[MINE:.+]] = mlt.shard_slice %[[WHOLE]] over "tp" dim 0 : tensor<2x4x4xf32> -> tensor<1x4x4xf32>
// CHECK-NEXT: %[[S:.+]] = mlt.add %[[MINE]], %[[MINE]] {mlt.sharding = [#mlt.sharding<[tp, -, -]>]} : tensor<1x4x4xf32>
// CHECK-NEXT: %[[SG:.+]] = mlt.all_gather %[[S]] over "tp" dim 0 : tensor<1x4x4xf32> -> tensor<2x4x4xf32>
// CHECK-NEXT: return %[[SG]]
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>} {
  mlt.param @embed {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<16x4xf32>
  func.func @several_conversions(%ids: tensor<2x4xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}) -> tensor<2x4x4xf32> {
    %embed = mlt.load @embed {mlt.sharding = [#mlt.sharding<[tp, -]>]} : tensor<16x4xf32>
    %h = mlt.embedding %ids, %embed {mlt.operand_shardings = [#mlt.sharding<[dp, -]>, #mlt.sharding<[tp, -]>], mlt.sharding = [#mlt.sharding<[dp, -, -], partial = [tp]>]} : tensor<2x4xi32>, tensor<16x4xf32>
    %s = mlt.add %h, %h {mlt.operand_shardings = [#mlt.sharding<[tp, -, -]>, #mlt.sharding<[tp, -, -]>], mlt.sharding = [#mlt.sharding<[tp, -, -]>]} : tensor<2x4x4xf32>
    return {mlt.operand_shardings = [#mlt.sharding<[-, -, -]>]} %s : tensor<2x4x4xf32>
  }
}

// -----

// Tests that users of one value that need it in one sharding share one
// conversion.
// CHECK-LABEL: func.func @shared_conversion
// CHECK: %[[Y:.+]] = mlt.matmul
// CHECK-NEXT: mlt.load @g
// CHECK-NEXT: %[[SUM:.+]] = mlt.all_reduce %[[Y]] over "tp" : tensor<4x2x4xf32>
// CHECK-NEXT: %[[N1:.+]] = mlt.rms_norm %[[SUM]],
// CHECK-NEXT: %[[N2:.+]] = mlt.rms_norm %[[SUM]],
// CHECK-NEXT: return %[[N1]], %[[N2]]
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  mlt.param @w {mlt.sharding = #mlt.sharding<[-, tp]>} : tensor<4x8xf32>
  mlt.param @g : tensor<4xf32>
  func.func @shared_conversion(%x: tensor<4x2x8xf32> {mlt.sharding = #mlt.sharding<[-, -, tp]>}) -> (tensor<4x2x4xf32>, tensor<4x2x4xf32>) {
    %w = mlt.load @w {mlt.sharding = [#mlt.sharding<[-, tp]>]} : tensor<4x8xf32>
    %y = mlt.matmul %x, %w transpose_rhs {mlt.operand_shardings = [#mlt.sharding<[-, -, tp]>, #mlt.sharding<[-, tp]>], mlt.sharding = [#mlt.sharding<[-, -, -], partial = [tp]>]} : tensor<4x2x8xf32>, tensor<4x8xf32>
    %g = mlt.load @g {mlt.sharding = [#mlt.sharding<[-]>]} : tensor<4xf32>
    %n1 = mlt.rms_norm %y, %g eps = 1.000000e-05 {mlt.operand_shardings = [#mlt.sharding<[-, -, -]>, #mlt.sharding<[-]>], mlt.sharding = [#mlt.sharding<[-, -, -]>]} : tensor<4x2x4xf32>, tensor<4xf32>
    %n2 = mlt.rms_norm %y, %g eps = 1.000000e-05 {mlt.operand_shardings = [#mlt.sharding<[-, -, -]>, #mlt.sharding<[-]>], mlt.sharding = [#mlt.sharding<[-, -, -]>]} : tensor<4x2x4xf32>, tensor<4xf32>
    return {mlt.operand_shardings = [#mlt.sharding<[-, -, -]>, #mlt.sharding<[-, -, -]>]} %n1, %n2 : tensor<4x2x4xf32>, tensor<4x2x4xf32>
  }
}

// -----

// Tests that a partial sum needed partial stays partial (a data-parallel
// weight gradient accumulates unreduced) and is all-reduced where it is
// needed whole (the optimizer's squared norm of the gradient).
// CHECK-LABEL: func.func @weight_gradient
// CHECK-SAME: (%[[X:.+]]: tensor<2x2x4xf32> {{.*}}, %[[DY:.+]]: tensor<2x2x8xf32> {{.*}})
// CHECK-NEXT: %[[DW:.+]] = mlt.matmul %[[DY]], %[[X]] transpose_lhs contract_batch {mlt.sharding = [#mlt.sharding<[-, -], partial = [dp]>]} : tensor<2x2x8xf32>, tensor<2x2x4xf32>
// CHECK-NEXT: mlt.accumulate_grad @w, %[[DW]] : tensor<8x4xf32>
// CHECK-NEXT: return
// CHECK-LABEL: func.func @optimizer
// CHECK-NEXT: %[[G:.+]] = mlt.load_grad @w {mlt.sharding = [#mlt.sharding<[-, -], partial = [dp]>]} : tensor<8x4xf32>
// CHECK-NEXT: %[[SUM:.+]] = mlt.all_reduce %[[G]] over "dp" : tensor<8x4xf32>
// CHECK-NEXT: %[[S:.+]] = mlt.sum_squares %[[SUM]]
// CHECK-NEXT: return %[[S]]
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  mlt.param @w : tensor<8x4xf32>
  func.func @weight_gradient(%x: tensor<4x2x4xf32> {mlt.sharding = #mlt.sharding<[dp, -, -]>}, %dy: tensor<4x2x8xf32> {mlt.sharding = #mlt.sharding<[dp, -, -]>}) {
    %dw = mlt.matmul %dy, %x transpose_lhs contract_batch {mlt.operand_shardings = [#mlt.sharding<[dp, -, -]>, #mlt.sharding<[dp, -, -]>], mlt.sharding = [#mlt.sharding<[-, -], partial = [dp]>]} : tensor<4x2x8xf32>, tensor<4x2x4xf32>
    mlt.accumulate_grad @w, %dw {mlt.operand_shardings = [#mlt.sharding<[-, -], partial = [dp]>]} : tensor<8x4xf32>
    return
  }
  func.func @optimizer() -> tensor<f32> {
    %g = mlt.load_grad @w {mlt.sharding = [#mlt.sharding<[-, -], partial = [dp]>]} : tensor<8x4xf32>
    %s = mlt.sum_squares %g {mlt.operand_shardings = [#mlt.sharding<[-, -]>], mlt.sharding = [#mlt.sharding<[]>]} : tensor<8x4xf32>
    return {mlt.operand_shardings = [#mlt.sharding<[]>]} %s : tensor<f32>
  }
}

// -----

// Tests the vocabulary-parallel forward pass: the embedding of a table
// split over tp gets `mlt.vocab_shard` (its result is partial over tp and
// all-reduced before the next matmul), the cross-entropy of logits split
// over tp gets `mlt.vocab_shard` and, its rows split over dp, the global
// row count (2 x 4); its loss, partial over dp, is all-reduced for the
// return.
// CHECK-LABEL: func.func @vocab_parallel
// CHECK-SAME: (%[[IDS:.+]]: tensor<1x4xi32> {{.*}}, %[[LABELS:.+]]: tensor<1x4xi32> {{.*}}) -> tensor<f32>
// CHECK-NEXT: %[[E:.+]] = mlt.load @embed {{.*}} : tensor<8x4xf32>
// CHECK-NEXT: %[[H:.+]] = mlt.embedding %[[IDS]], %[[E]] {mlt.sharding = [#mlt.sharding<[dp, -, -], partial = [tp]>], mlt.vocab_shard = "tp"} : tensor<1x4xi32>, tensor<8x4xf32>
// CHECK-NEXT: %[[W:.+]] = mlt.load @head {{.*}} : tensor<8x4xf32>
// CHECK-NEXT: %[[HS:.+]] = mlt.all_reduce %[[H]] over "tp" : tensor<1x4x4xf32>
// CHECK-NEXT: %[[LOGITS:.+]] = mlt.matmul %[[HS]], %[[W]] transpose_rhs {{.*}} : tensor<1x4x4xf32>, tensor<8x4xf32>
// CHECK-NEXT: %[[LOSS:.+]] = mlt.cross_entropy %[[LOGITS]], %[[LABELS]] {mlt.row_count = 8 : i64, mlt.sharding = [#mlt.sharding<[], partial = [dp]>], mlt.vocab_shard = "tp"} : tensor<1x4x8xf32>, tensor<1x4xi32>
// CHECK-NEXT: %[[SUM:.+]] = mlt.all_reduce %[[LOSS]] over "dp" : tensor<f32>
// CHECK-NEXT: return %[[SUM]] : tensor<f32>
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>} {
  mlt.param @embed {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<16x4xf32>
  mlt.param @head {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<16x4xf32>
  func.func @vocab_parallel(%ids: tensor<2x4xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}, %labels: tensor<2x4xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}) -> tensor<f32> {
    %embed = mlt.load @embed {mlt.sharding = [#mlt.sharding<[tp, -]>]} : tensor<16x4xf32>
    %h = mlt.embedding %ids, %embed {mlt.operand_shardings = [#mlt.sharding<[dp, -]>, #mlt.sharding<[tp, -]>], mlt.sharding = [#mlt.sharding<[dp, -, -], partial = [tp]>]} : tensor<2x4xi32>, tensor<16x4xf32>
    %head = mlt.load @head {mlt.sharding = [#mlt.sharding<[tp, -]>]} : tensor<16x4xf32>
    %logits = mlt.matmul %h, %head transpose_rhs {mlt.operand_shardings = [#mlt.sharding<[dp, -, -]>, #mlt.sharding<[tp, -]>], mlt.sharding = [#mlt.sharding<[dp, -, tp]>]} : tensor<2x4x4xf32>, tensor<16x4xf32>
    %loss = mlt.cross_entropy %logits, %labels {mlt.operand_shardings = [#mlt.sharding<[dp, -, tp]>, #mlt.sharding<[dp, -]>], mlt.sharding = [#mlt.sharding<[], partial = [dp]>]} : tensor<2x4x16xf32>, tensor<2x4xi32>
    return {mlt.operand_shardings = [#mlt.sharding<[]>]} %loss : tensor<f32>
  }
}

// -----

// Tests the vocabulary-parallel backward pass: the cross-entropy's gradient
// gets `mlt.vocab_shard` and the global row count from its logits (its
// second operand), the embedding's gradient `mlt.vocab_shard` from its
// result (the table's gradient, split over tp, partial over dp: accumulated
// as it is).
// CHECK-LABEL: func.func @vocab_backward
// CHECK-SAME: (%[[IDS:.+]]: tensor<1x4xi32> {{.*}}, %[[LABELS:.+]]: tensor<1x4xi32> {{.*}}, %[[LOGITS:.+]]: tensor<1x4x8xf32> {{.*}}, %[[DLOSS:.+]]: tensor<f32> {{.*}}, %[[DH:.+]]: tensor<1x4x4xf32> {{.*}}) -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[DLOGITS:.+]] = mlt.cross_entropy_grad %[[DLOSS]], %[[LOGITS]], %[[LABELS]] {mlt.row_count = 8 : i64, mlt.sharding = [#mlt.sharding<[dp, -, tp]>], mlt.vocab_shard = "tp"} : tensor<f32>, tensor<1x4x8xf32>, tensor<1x4xi32>
// CHECK-NEXT: %[[DT:.+]] = mlt.embedding_grad %[[IDS]], %[[DH]] {mlt.sharding = [#mlt.sharding<[tp, -], partial = [dp]>], mlt.vocab_shard = "tp"} : tensor<1x4xi32>, tensor<1x4x4xf32> -> tensor<8x4xf32>
// CHECK-NEXT: mlt.accumulate_grad @embed, %[[DT]] : tensor<8x4xf32>
// CHECK-NEXT: %[[G0:.+]] = mlt.all_gather %[[DLOGITS]] over "dp" dim 0 : tensor<1x4x8xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[G1:.+]] = mlt.all_gather %[[G0]] over "tp" dim 2 : tensor<2x4x8xf32> -> tensor<2x4x16xf32>
// CHECK-NEXT: return %[[G1]]
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>} {
  mlt.param @embed {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<16x4xf32>
  func.func @vocab_backward(%ids: tensor<2x4xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}, %labels: tensor<2x4xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}, %logits: tensor<2x4x16xf32> {mlt.sharding = #mlt.sharding<[dp, -, tp]>}, %dloss: tensor<f32> {mlt.sharding = #mlt.sharding<[]>}, %dh: tensor<2x4x4xf32> {mlt.sharding = #mlt.sharding<[dp, -, -]>}) -> tensor<2x4x16xf32> {
    %dlogits = mlt.cross_entropy_grad %dloss, %logits, %labels {mlt.operand_shardings = [#mlt.sharding<[]>, #mlt.sharding<[dp, -, tp]>, #mlt.sharding<[dp, -]>], mlt.sharding = [#mlt.sharding<[dp, -, tp]>]} : tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi32>
    %dtable = mlt.embedding_grad %ids, %dh {mlt.operand_shardings = [#mlt.sharding<[dp, -]>, #mlt.sharding<[dp, -, -]>], mlt.sharding = [#mlt.sharding<[tp, -], partial = [dp]>]} : tensor<2x4xi32>, tensor<2x4x4xf32> -> tensor<16x4xf32>
    mlt.accumulate_grad @embed, %dtable {mlt.operand_shardings = [#mlt.sharding<[tp, -], partial = [dp]>]} : tensor<16x4xf32>
    return {mlt.operand_shardings = [#mlt.sharding<[-, -, -]>]} %dlogits : tensor<2x4x16xf32>
  }
}

// -----

// Tests that a cross-entropy over logits split only along the rows gets the
// global row count but no `mlt.vocab_shard`, and one over whole logits
// neither (nor do an embedding and its gradient over a whole table).
// CHECK-LABEL: func.func @rows_split
// CHECK: mlt.embedding %{{.*}} {mlt.sharding = [#mlt.sharding<[dp, -, -]>]} : tensor<1x4xi32>, tensor<16x4xf32>
// CHECK: mlt.embedding_grad %{{.*}} {mlt.sharding = [#mlt.sharding<[-, -], partial = [dp]>]} : tensor<1x4xi32>, tensor<1x4x4xf32> -> tensor<16x4xf32>
// CHECK: mlt.cross_entropy %{{.*}} {mlt.row_count = 8 : i64, mlt.sharding = [#mlt.sharding<[], partial = [dp]>]} : tensor<1x4x16xf32>, tensor<1x4xi32>
// CHECK: mlt.cross_entropy %{{.*}} {mlt.sharding = [#mlt.sharding<[]>]} : tensor<2x4x16xf32>, tensor<2x4xi32>
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  mlt.param @embed : tensor<16x4xf32>
  func.func @rows_split(%ids: tensor<2x4xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}, %dh: tensor<2x4x4xf32> {mlt.sharding = #mlt.sharding<[dp, -, -]>}, %logits: tensor<2x4x16xf32> {mlt.sharding = #mlt.sharding<[dp, -, -]>}, %labels: tensor<2x4xi32> {mlt.sharding = #mlt.sharding<[dp, -]>}, %whole: tensor<2x4x16xf32> {mlt.sharding = #mlt.sharding<[-, -, -]>}, %wholeLabels: tensor<2x4xi32> {mlt.sharding = #mlt.sharding<[-, -]>}) -> (tensor<2x4x4xf32>, tensor<f32>, tensor<f32>) {
    %embed = mlt.load @embed {mlt.sharding = [#mlt.sharding<[-, -]>]} : tensor<16x4xf32>
    %h = mlt.embedding %ids, %embed {mlt.operand_shardings = [#mlt.sharding<[dp, -]>, #mlt.sharding<[-, -]>], mlt.sharding = [#mlt.sharding<[dp, -, -]>]} : tensor<2x4xi32>, tensor<16x4xf32>
    %dtable = mlt.embedding_grad %ids, %dh {mlt.operand_shardings = [#mlt.sharding<[dp, -]>, #mlt.sharding<[dp, -, -]>], mlt.sharding = [#mlt.sharding<[-, -], partial = [dp]>]} : tensor<2x4xi32>, tensor<2x4x4xf32> -> tensor<16x4xf32>
    mlt.accumulate_grad @embed, %dtable {mlt.operand_shardings = [#mlt.sharding<[-, -], partial = [dp]>]} : tensor<16x4xf32>
    %loss = mlt.cross_entropy %logits, %labels {mlt.operand_shardings = [#mlt.sharding<[dp, -, -]>, #mlt.sharding<[dp, -]>], mlt.sharding = [#mlt.sharding<[], partial = [dp]>]} : tensor<2x4x16xf32>, tensor<2x4xi32>
    %wholeLoss = mlt.cross_entropy %whole, %wholeLabels {mlt.operand_shardings = [#mlt.sharding<[-, -, -]>, #mlt.sharding<[-, -]>], mlt.sharding = [#mlt.sharding<[]>]} : tensor<2x4x16xf32>, tensor<2x4xi32>
    return {mlt.operand_shardings = [#mlt.sharding<[-, -, -]>, #mlt.sharding<[]>, #mlt.sharding<[]>]} %h, %loss, %wholeLoss : tensor<2x4x4xf32>, tensor<f32>, tensor<f32>
  }
}

// -----

// Tests that the global norm's partial squared norms are summed locally and
// all-reduced once per axis, and a replicated gradient's counts once: the
// norm takes the whole sums first, then one per set of partial axes.
// CHECK-LABEL: func.func @global_norm
// CHECK-NEXT: %[[GA:.+]] = mlt.load_grad @a {{.*}} : tensor<4x4xf32>
// CHECK-NEXT: %[[SA:.+]] = mlt.sum_squares %[[GA]] {mlt.sharding = [#mlt.sharding<[], partial = [tp]>]} : tensor<4x4xf32>
// CHECK-NEXT: %[[GB:.+]] = mlt.load_grad @b {{.*}} : tensor<4xf32>
// CHECK-NEXT: %[[SB:.+]] = mlt.sum_squares %[[GB]] {mlt.sharding = [#mlt.sharding<[]>]} : tensor<4xf32>
// CHECK-NEXT: %[[GC:.+]] = mlt.load_grad @c {{.*}} : tensor<4x4xf32>
// CHECK-NEXT: %[[SC:.+]] = mlt.sum_squares %[[GC]] {mlt.sharding = [#mlt.sharding<[], partial = [tp]>]} : tensor<4x4xf32>
// CHECK-NEXT: %[[ADD:.+]] = mlt.add %[[SA]], %[[SC]] : tensor<f32>
// CHECK-NEXT: %[[SUM:.+]] = mlt.all_reduce %[[ADD]] over "tp" : tensor<f32>
// CHECK-NEXT: %[[NORM:.+]] = mlt.global_norm %[[SB]], %[[SUM]] {mlt.sharding = [#mlt.sharding<[]>]} : tensor<f32>
// CHECK-NEXT: return %[[NORM]]
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  mlt.param @a {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<8x4xf32>
  mlt.param @b : tensor<4xf32>
  mlt.param @c {mlt.sharding = #mlt.sharding<[-, tp]>} : tensor<4x8xf32>
  func.func @global_norm() -> tensor<f32> {
    %ga = mlt.load_grad @a {mlt.sharding = [#mlt.sharding<[tp, -]>]} : tensor<8x4xf32>
    %sa = mlt.sum_squares %ga {mlt.operand_shardings = [#mlt.sharding<[tp, -]>], mlt.sharding = [#mlt.sharding<[], partial = [tp]>]} : tensor<8x4xf32>
    %gb = mlt.load_grad @b {mlt.sharding = [#mlt.sharding<[-]>]} : tensor<4xf32>
    %sb = mlt.sum_squares %gb {mlt.operand_shardings = [#mlt.sharding<[-]>], mlt.sharding = [#mlt.sharding<[]>]} : tensor<4xf32>
    %gc = mlt.load_grad @c {mlt.sharding = [#mlt.sharding<[-, tp]>]} : tensor<4x8xf32>
    %sc = mlt.sum_squares %gc {mlt.operand_shardings = [#mlt.sharding<[-, tp]>], mlt.sharding = [#mlt.sharding<[], partial = [tp]>]} : tensor<4x8xf32>
    %n = mlt.global_norm %sa, %sb, %sc {mlt.operand_shardings = [#mlt.sharding<[], partial = [tp]>, #mlt.sharding<[]>, #mlt.sharding<[], partial = [tp]>], mlt.sharding = [#mlt.sharding<[]>]} : tensor<f32>
    return {mlt.operand_shardings = [#mlt.sharding<[]>]} %n : tensor<f32>
  }
}

// -----

// Tests that a function that still holds an `mlt.repeat` (a model's
// @forward, which mlt-propagate-shardings does not annotate) keeps its
// global types.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%{{.*}}: tensor<4x8xf32> {mlt.sharding = #mlt.sharding<[dp, -]>}) -> tensor<4x8xf32>
// CHECK: mlt.add %{{.*}}, %{{.*}} : tensor<4x8xf32>
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  func.func @forward(%x: tensor<4x8xf32> {mlt.sharding = #mlt.sharding<[dp, -]>}) -> tensor<4x8xf32> {
    %r = mlt.repeat %layer = 0 to 2 iter_args(%h = %x) -> (tensor<4x8xf32>) {
      %s = mlt.add %h, %h : tensor<4x8xf32>
      mlt.yield %s : tensor<4x8xf32>
    }
    return %r : tensor<4x8xf32>
  }
}

// -----

// Tests that without a mesh (one rank) the program is its own per-rank
// program: nothing changes, not even the annotations.
// CHECK-LABEL: func.func @one_rank
// CHECK-SAME: (%[[X:.+]]: tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[XS:.+]] = mlt.shard %[[X]] : tensor<4x8xf32> to #mlt.sharding<[?, -]> {mlt.operand_shardings = [#mlt.sharding<[-, -]>], mlt.sharding = [#mlt.sharding<[-, -]>]}
// CHECK-NEXT: return {mlt.operand_shardings = [#mlt.sharding<[-, -]>]} %[[XS]] : tensor<4x8xf32>
module {
  func.func @one_rank(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %xs = mlt.shard %x : tensor<4x8xf32> to #mlt.sharding<[?, -]> {mlt.operand_shardings = [#mlt.sharding<[-, -]>], mlt.sharding = [#mlt.sharding<[-, -]>]}
    return {mlt.operand_shardings = [#mlt.sharding<[-, -]>]} %xs : tensor<4x8xf32>
  }
}

// -----

// Tests the conversions of a dimension split over two axes, major first: an
// axis joins or leaves its list at the minor end. A partial sum over tp
// whose target adds tp after the dimension's cp is reduce-scattered over
// tp; cp*tp needed as cp is gathered over tp alone; cp needed as cp*tp is
// sliced over tp; cp*tp needed as tp gathers tp, then cp, and slices tp.
// CHECK-LABEL: func.func @two_axes
// CHECK-SAME: (%[[X:.+]]: tensor<2x4x4xf32> {mlt.sharding = #mlt.sharding<[-, cp, -], partial = [tp]>}, %[[Y:.+]]: tensor<2x2x4xf32> {mlt.sharding = #mlt.sharding<[-, cp*tp, -]>})
// CHECK-NEXT: %[[RS:.+]] = mlt.reduce_scatter %[[X]] over "tp" dim 1 : tensor<2x4x4xf32> -> tensor<2x2x4xf32>
// CHECK-NEXT: %[[A:.+]] = mlt.add %[[RS]], %[[Y]] {mlt.sharding = [#mlt.sharding<[-, cp*tp, -]>]} : tensor<2x2x4xf32>
// CHECK-NEXT: %[[G:.+]] = mlt.all_gather %[[A]] over "tp" dim 1 : tensor<2x2x4xf32> -> tensor<2x4x4xf32>
// CHECK-NEXT: %[[B:.+]] = mlt.add %[[G]], %[[G]] {mlt.sharding = [#mlt.sharding<[-, cp, -]>]} : tensor<2x4x4xf32>
// CHECK-NEXT: %[[SL:.+]] = mlt.shard_slice %[[B]] over "tp" dim 1 : tensor<2x4x4xf32> -> tensor<2x2x4xf32>
// CHECK-NEXT: %[[C:.+]] = mlt.add %[[SL]], %[[SL]] {mlt.sharding = [#mlt.sharding<[-, cp*tp, -]>]} : tensor<2x2x4xf32>
// CHECK-NEXT: %[[T1:.+]] = mlt.all_gather %[[C]] over "tp" dim 1 : tensor<2x2x4xf32> -> tensor<2x4x4xf32>
// CHECK-NEXT: %[[T2:.+]] = mlt.all_gather %[[T1]] over "cp" dim 1 : tensor<2x4x4xf32> -> tensor<2x8x4xf32>
// CHECK-NEXT: %[[T3:.+]] = mlt.shard_slice %[[T2]] over "tp" dim 1 : tensor<2x8x4xf32> -> tensor<2x4x4xf32>
// CHECK-NEXT: %[[D:.+]] = mlt.add %[[T3]], %[[T3]] {mlt.sharding = [#mlt.sharding<[-, tp, -]>]} : tensor<2x4x4xf32>
module attributes {mlt.mesh = #mlt.mesh<cp = 2, tp = 2>} {
  func.func @two_axes(%x: tensor<2x8x4xf32> {mlt.sharding = #mlt.sharding<[-, cp, -], partial = [tp]>},
                      %y: tensor<2x8x4xf32> {mlt.sharding = #mlt.sharding<[-, cp*tp, -]>}) -> tensor<2x8x4xf32> {
    %a = mlt.add %x, %y {mlt.operand_shardings = [#mlt.sharding<[-, cp*tp, -]>, #mlt.sharding<[-, cp*tp, -]>], mlt.sharding = [#mlt.sharding<[-, cp*tp, -]>]} : tensor<2x8x4xf32>
    %b = mlt.add %a, %a {mlt.operand_shardings = [#mlt.sharding<[-, cp, -]>, #mlt.sharding<[-, cp, -]>], mlt.sharding = [#mlt.sharding<[-, cp, -]>]} : tensor<2x8x4xf32>
    %c = mlt.add %b, %b {mlt.operand_shardings = [#mlt.sharding<[-, cp*tp, -]>, #mlt.sharding<[-, cp*tp, -]>], mlt.sharding = [#mlt.sharding<[-, cp*tp, -]>]} : tensor<2x8x4xf32>
    %d = mlt.add %c, %c {mlt.operand_shardings = [#mlt.sharding<[-, tp, -]>, #mlt.sharding<[-, tp, -]>], mlt.sharding = [#mlt.sharding<[-, tp, -]>]} : tensor<2x8x4xf32>
    return {mlt.operand_shardings = [#mlt.sharding<[-, tp, -]>]} %d : tensor<2x8x4xf32>
  }
}

// -----

// A mesh axis moving between dimensions is one all-to-all each way, the
// axis joining the target dimension at its minor end (context parallelism's
// all-to-all exchange: the sequence over cp and the heads over tp, to the
// heads over tp then cp): no gather, no slice.
// CHECK-LABEL: func.func @exchange
// CHECK-SAME: (%[[X:.+]]: tensor<2x4x4x8xf32>
// CHECK-NEXT: %[[A:.+]] = mlt.all_to_all %[[X]] over "cp" split 2 concat 1 : tensor<2x4x4x8xf32> -> tensor<2x8x2x8xf32>
// CHECK-NEXT: %[[B:.+]] = mlt.add %[[A]], %[[A]] {mlt.sharding = [#mlt.sharding<[-, -, tp*cp, -]>]} : tensor<2x8x2x8xf32>
// CHECK-NEXT: %[[C:.+]] = mlt.all_to_all %[[B]] over "cp" split 1 concat 2 : tensor<2x8x2x8xf32> -> tensor<2x4x4x8xf32>
// CHECK-NEXT: mlt.add %[[C]], %[[C]] {mlt.sharding = [#mlt.sharding<[-, cp, tp, -]>]} : tensor<2x4x4x8xf32>
// CHECK-NOT: mlt.all_gather
module attributes {mlt.mesh = #mlt.mesh<cp = 2, tp = 2>} {
  func.func @exchange(%x: tensor<2x8x8x8xf32> {mlt.sharding = #mlt.sharding<[-, cp, tp, -]>}) -> tensor<2x8x8x8xf32> {
    %a = mlt.add %x, %x {mlt.operand_shardings = [#mlt.sharding<[-, -, tp*cp, -]>, #mlt.sharding<[-, -, tp*cp, -]>], mlt.sharding = [#mlt.sharding<[-, -, tp*cp, -]>]} : tensor<2x8x8x8xf32>
    %b = mlt.add %a, %a {mlt.operand_shardings = [#mlt.sharding<[-, cp, tp, -]>, #mlt.sharding<[-, cp, tp, -]>], mlt.sharding = [#mlt.sharding<[-, cp, tp, -]>]} : tensor<2x8x8x8xf32>
    return {mlt.operand_shardings = [#mlt.sharding<[-, cp, tp, -]>]} %b : tensor<2x8x8x8xf32>
  }
}
