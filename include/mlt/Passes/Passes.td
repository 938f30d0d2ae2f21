//===- Passes.td - mlt passes ------------------------------*- tablegen -*-===//
//
// Part of mlt. Declares every mlt pass; mlt-opt and mlt-run register them all
// from the generated code.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PASSES_PASSES_TD
#define MLT_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def MLTUnrollLayers : Pass<"mlt-unroll-layers", "::mlir::ModuleOp"> {
  let summary = "expands every mlt.repeat into one copy of its body per layer";
  let description = [{
    Replaces `mlt.repeat %layer = lo to hi` by `hi - lo` copies of its body, in
    order, each with `%layer` a constant and the carried values threaded from
    one copy to the next. The result has no `mlt.repeat`: every layer's ops are
    explicit, which is what per-layer transformations (a different sharding or
    recomputation policy for some layers, per-layer cost reports) and
    debugging want. Layer-level passes that can work on the compact form
    (autodiff, pipeline partitioning) do not need it.

    Before:
    ```mlir
    %r = mlt.repeat %layer = 0 to 2 iter_args(%h = %x) -> (tensor<?x?x64xf32>) {
      %w = mlt.load @"model.layers.{}.input_layernorm.weight"[%layer] : tensor<64xf32>
      %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x64xf32>, tensor<64xf32>
      mlt.yield %n : tensor<?x?x64xf32>
    }
    ```
    After:
    ```mlir
    %c0 = arith.constant 0 : index
    %w0 = mlt.load @"model.layers.{}.input_layernorm.weight"[%c0] : tensor<64xf32>
    %n0 = mlt.rms_norm %x, %w0 eps = 1.0e-05 : tensor<?x?x64xf32>, tensor<64xf32>
    %c1 = arith.constant 1 : index
    %w1 = mlt.load @"model.layers.{}.input_layernorm.weight"[%c1] : tensor<64xf32>
    %n1 = mlt.rms_norm %n0, %w1 eps = 1.0e-05 : tensor<?x?x64xf32>, tensor<64xf32>
    ```
    Each copied op gets an `mlt.layer` attribute with its layer index, so
    per-layer reports and later passes can tell the layers apart.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

#endif // MLT_PASSES_PASSES_TD
