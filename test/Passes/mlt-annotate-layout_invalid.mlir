// RUN: not mlt-opt %s -mlt-annotate-layout="tp=0" 2>&1 | FileCheck %s --check-prefix=TP
// RUN: not mlt-opt %s -mlt-annotate-layout="tp=2 dp=-1" 2>&1 | FileCheck %s --check-prefix=DP
// RUN: not mlt-opt %s -mlt-annotate-layout="dp=2 sequence-parallel" 2>&1 | FileCheck %s --check-prefix=SP
// RUN: not mlt-opt %s -mlt-annotate-layout="tp=2" 2>&1 | FileCheck %s --check-prefix=MESH
// RUN: not mlt-opt %s -mlt-annotate-layout="cp=2 cp-comm=p2p" 2>&1 | FileCheck %s --check-prefix=COMM
// RUN: not mlt-opt %s -mlt-annotate-layout="tp=2 cp-comm=a2a" 2>&1 | FileCheck %s --check-prefix=A2A

// Tests that sizes below 1 are errors, that sequence parallelism without
// tensor parallelism is one, an exchange of context parallelism that is not
// one or without cp, and that a module laid out already is one.
// TP: error: mlt-annotate-layout: pp, tp, dp and cp must be at least 1, got pp=1 tp=0 dp=1 cp=1
// DP: error: mlt-annotate-layout: pp, tp, dp and cp must be at least 1, got pp=1 tp=2 dp=-1 cp=1
// SP: error: mlt-annotate-layout: sequence-parallel splits the sequence over tp and needs tp > 1
// MESH: error: mlt-annotate-layout: the module already has a layout ('mlt.mesh')
// COMM: error: mlt-annotate-layout: cp-comm must be allgather, a2a or ring, got 'p2p'
// A2A: error: mlt-annotate-layout: cp-comm a2a exchanges the blocks of a sequence split over cp and needs cp > 1
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) {
    return
  }
}
