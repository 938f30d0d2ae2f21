// RUN: not mlt-opt %s -mlt-specialize-shapes="batch=0 seq-len=32" 2>&1 | FileCheck %s --check-prefix=BATCH
// RUN: not mlt-opt %s -mlt-specialize-shapes="batch=4 seq-len=-1" 2>&1 | FileCheck %s --check-prefix=SEQ
// RUN: not mlt-opt %s -mlt-specialize-shapes="batch=65 seq-len=66" 2>&1 | FileCheck %s --check-prefix=CONTRA
// RUN: not mlt-opt %s -mlt-autodiff="microbatches=0" 2>&1 | FileCheck %s --check-prefix=MICRO
// RUN: not mlt-opt %s -mlt-plan-memory="alignment=100" 2>&1 | FileCheck %s --check-prefix=ALIGN

// Tests that the diagnostics about option values print the values.
// BATCH: error: mlt-specialize-shapes needs positive batch and seq-len, got batch=0 seq-len=32
// SEQ: error: mlt-specialize-shapes needs positive batch and seq-len, got batch=4 seq-len=-1
// CONTRA: error: argument #0 has static shape 'tensor<8x32xi32>', which contradicts batch=65 seq-len=66
// MICRO: error: mlt-autodiff: microbatches must be positive, got 0
// ALIGN: error: mlt-plan-memory: alignment must be a power of two, got 100
func.func @forward(%tokens: tensor<8x32xi32>, %x: tensor<8x32x4xf32>) -> tensor<f32> {
  %loss = mlt.cross_entropy %x, %tokens : tensor<8x32x4xf32>, tensor<8x32xi32>
  return %loss : tensor<f32>
}
