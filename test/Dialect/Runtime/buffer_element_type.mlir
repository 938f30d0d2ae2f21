// RUN: not mlt-opt %s -split-input-file -mlt-plan-memory 2>&1 | FileCheck %s

// Tests that a buffer of index elements is rejected with a diagnostic, not a
// crash (both cases must report one).
// CHECK: error: 'mlt_rt.buffer' op
// CHECK: error: 'mlt_rt.buffer' op
// CHECK-NOT: Stack dump
mlt_rt.buffer @a input : tensor<4xindex>

// -----

// Tests that a buffer of complex elements is rejected too.
mlt_rt.buffer @b input : tensor<4xcomplex<f32>>
