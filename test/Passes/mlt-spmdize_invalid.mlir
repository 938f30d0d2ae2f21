// RUN: mlt-opt %s -split-input-file -mlt-spmdize -verify-diagnostics

// Tests that a value every rank holds whole cannot be needed as a partial
// sum: no collective turns a whole value into partial sums.
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  mlt.param @w : tensor<8x4xf32>
  func.func @whole_to_partial(%dw: tensor<8x4xf32> {mlt.sharding = #mlt.sharding<[-, -]>}) {
    // expected-error @+1 {{mlt-spmdize: cannot turn a value laid out as #mlt.sharding<[-, -]> into the partial sum #mlt.sharding<[-, -], partial = [dp]>}}
    mlt.accumulate_grad @w, %dw {mlt.operand_shardings = [#mlt.sharding<[-, -], partial = [dp]>]} : tensor<8x4xf32>
    return
  }
}

// -----

// Tests that a partial sum over one axis cannot be needed as a partial sum
// over another.
module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 2>} {
  mlt.param @w {mlt.sharding = #mlt.sharding<[-, tp]>} : tensor<4x8xf32>
  func.func @other_axis(%x: tensor<4x2x8xf32> {mlt.sharding = #mlt.sharding<[-, -, tp]>}) {
    %w = mlt.load @w {mlt.sharding = [#mlt.sharding<[-, tp]>]} : tensor<4x8xf32>
    %y = mlt.matmul %x, %w transpose_rhs {mlt.operand_shardings = [#mlt.sharding<[-, -, tp]>, #mlt.sharding<[-, tp]>], mlt.sharding = [#mlt.sharding<[-, -, -], partial = [tp]>]} : tensor<4x2x8xf32>, tensor<4x8xf32>
    // expected-error @+1 {{mlt-spmdize: cannot turn a value laid out as #mlt.sharding<[-, -, -], partial = [tp]> into the partial sum #mlt.sharding<[-, -, -], partial = [dp]>}}
    %z = mlt.add %y, %y {mlt.operand_shardings = [#mlt.sharding<[-, -, -], partial = [dp]>, #mlt.sharding<[-, -, -], partial = [dp]>], mlt.sharding = [#mlt.sharding<[-, -, -], partial = [dp]>]} : tensor<4x2x4xf32>
    return
  }
}
