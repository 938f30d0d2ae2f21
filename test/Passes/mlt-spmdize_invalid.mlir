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

// -----

// Tests that a hand-written annotation with more operand shardings than
// operands is refused, not followed past the operands.
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  func.func @too_many(%x: tensor<4x8xf32> {mlt.sharding = #mlt.sharding<[dp, -]>}) {
    // expected-error @+1 {{'mlt.add' op has 3 entries in 'mlt.operand_shardings' for 2 operands}}
    %y = mlt.add %x, %x {mlt.operand_shardings = [#mlt.sharding<[dp, -]>, #mlt.sharding<[dp, -]>, #mlt.sharding<[dp, -]>], mlt.sharding = [#mlt.sharding<[dp, -]>]} : tensor<4x8xf32>
    return
  }
}

// -----

// Tests that a result sharding must fit its value: 5 rows do not split
// over 2 ranks.
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  func.func @does_not_divide(%x: tensor<5x8xf32>) {
    // expected-error @+1 {{'mlt.add' op has a result sharding that does not fit: }}
    %y = mlt.add %x, %x {mlt.sharding = [#mlt.sharding<[dp, -]>]} : tensor<5x8xf32>
    return
  }
}

// -----

// Tests that an argument's sharding must fit it.
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  // expected-error @+1 {{mlt-spmdize: argument #0 has a sharding that does not fit: }}
  func.func @bad_argument(%x: tensor<5x8xf32> {mlt.sharding = #mlt.sharding<[dp, -]>}) {
    return
  }
}

// -----

// Tests that an op has one result sharding per result.
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  func.func @results(%x: tensor<4x8xf32>) {
    // expected-error @+1 {{'mlt.add' op has 2 entries in 'mlt.sharding' for 1 results}}
    %y = mlt.add %x, %x {mlt.sharding = [#mlt.sharding<[-, -]>, #mlt.sharding<[-, -]>]} : tensor<4x8xf32>
    return
  }
}
