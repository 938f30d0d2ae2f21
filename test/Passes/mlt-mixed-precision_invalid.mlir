// RUN: not mlt-opt %s -mlt-mixed-precision="compute-type=f8" 2>&1 | FileCheck %s --check-prefix=TYPE
// RUN: not mlt-opt %s -mlt-mixed-precision="function=step" 2>&1 | FileCheck %s --check-prefix=FUNC

// Tests the pass's bad options: an unknown compute type, a missing function.
// TYPE: error: mlt-mixed-precision: unknown compute-type 'f8' (expected bf16, f16 or f32)
// FUNC: error: mlt-mixed-precision: no function @step
module {
  func.func @forward() {
    return
  }
}
