//===- Pipeline.h - the pass pipeline from a model to a plan ----*- C++ -*-===//
//
// Part of mlt. The one place where the training compiler's passes are put
// in order: `mlt-run` compiles with it (Driver.cpp), and `mlt-opt` registers
// it as `--mlt-train-pipeline="tp=2 dp=2 microbatches=4 ..."` so that every
// stage of a compilation can be inspected with `--mlir-print-ir-after-all`.
// The options are Driver.h's TrainOptions: the step, and the layout
// (mlt/Layout/Layout.h), whose options mlt-train-pipeline takes by the
// names of mlt/Layout/LayoutOptions.h's table, as mlt-run's flags do.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_COMPILER_PIPELINE_H
#define MLT_COMPILER_PIPELINE_H

#include "mlt/Compiler/Driver.h"

#include "mlir/Pass/PassManager.h"

namespace mlt {

/// Adds the passes that turn a model module (forward pass and loss) into a
/// lowered, scheduled and memory-planned `mlt_rt` module, ready for the
/// plan exporter: hold the layout to the rule book, annotate the layout
/// (several ranks), specialize shapes, pick the compute precision, derive the
/// backward pass, attach AdamW, clean up, propagate the shardings and derive
/// the per-rank program, recompute the chosen activations, lower to launches,
/// schedule the step, partition the optimizer state (ZeRO), overlap the
/// gradient reductions, group the optimizer's launches, plan memory.
void buildTrainPipeline(mlir::OpPassManager &pm, const TrainOptions &options);

/// Registers `mlt-train-pipeline` with mlt-opt's pass registry.
void registerTrainPipeline();

} // namespace mlt

#endif // MLT_COMPILER_PIPELINE_H
