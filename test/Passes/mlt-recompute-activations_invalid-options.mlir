// RUN: not mlt-opt %s -mlt-recompute-activations="ops=swiglu" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=UNKNOWN
// RUN: not mlt-opt %s -mlt-recompute-activations="ops=mlt.swiglu,mlt.adamw" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NOT-FORWARD
// RUN: not mlt-opt %s -mlt-recompute-activations="ops=arith.addf" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NOT-MLT

// Tests that each op kind must be a forward op of the mlt dialect named in
// full: a name without its dialect is no op, and an op without a gradient
// rule (an optimizer op, another dialect's op) has no result the backward
// pass reads.
// UNKNOWN: error: mlt-recompute-activations: 'swiglu' is not an op (expected a forward op of the mlt dialect by its full name, such as mlt.swiglu)
// NOT-FORWARD: error: mlt-recompute-activations: 'mlt.adamw' is not a forward op of the mlt dialect (it has no gradient rule), so the backward pass reads none of its results
// NOT-MLT: error: mlt-recompute-activations: 'arith.addf' is not a forward op of the mlt dialect
func.func @micro_step(%g: tensor<8xf32>, %u: tensor<8xf32>) -> tensor<8xf32> {
  %a = mlt.swiglu %g, %u : tensor<8xf32>
  return %a : tensor<8xf32>
}
