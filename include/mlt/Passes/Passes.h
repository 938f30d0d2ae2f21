//===- Passes.h - mlt passes ------------------------------------*- C++ -*-===//
//
// Part of mlt. Declarations and registration of every mlt pass (Passes.td).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PASSES_PASSES_H
#define MLT_PASSES_PASSES_H

#include "mlt/Layout/Layout.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "llvm/ADT/DenseMap.h"

#include <memory>

namespace mlt::rt_ir {
class ProgramOp;
} // namespace mlt::rt_ir

namespace mlt {

class LlamaConfigAttr;
namespace cost {
struct Calibration;
} // namespace cost

#define GEN_PASS_DECL
#include "mlt/Passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mlt/Passes/Passes.h.inc"

/// mlt-overlap-tp-comm deciding each collective matmul by `costs` (its
/// `calibration` option names a file instead; null: every one is split).
std::unique_ptr<mlir::Pass>
createMLTOverlapTpComm(std::shared_ptr<const cost::Calibration> costs);

/// The shape of the module's model (its `mlt.model` configuration) as the
/// layout rule book reads it, with the forward ops of the mlt dialect that
/// have a gradient rule (what mlt-recompute-activations can recompute);
/// none without a configuration.
std::optional<ModelShape> modelShapeOf(mlir::ModuleOp module);

/// Replaces every `mlt.repeat` under `root` by one copy of its body per layer
/// (the rewrite of mlt-unroll-layers, shared with the passes that need it).
void unrollRepeats(mlir::Operation *root);

/// The split of `numLayers` decoder layers into `stages` x `chunks`
/// virtual stages that mlt-partition-pipeline takes: `given` (checked), or
/// else balanced on the model's FLOPs per token at `seqLen`
/// (StagePartition.h). Empty, with the reason in `why`, when there is none.
std::vector<int64_t> pipelineStageSplit(LlamaConfigAttr config,
                                        int64_t numLayers, int64_t seqLen,
                                        llvm::ArrayRef<int64_t> given,
                                        int64_t stages, int64_t chunks,
                                        std::string &why);

/// The functions of `module` that are programs (`@micro_step`,
/// `@optimizer_step`, ...), in module order: those with a body and no
/// `mlt.repeat` (a model's `@forward` is the input of mlt-autodiff).
llvm::SmallVector<mlir::func::FuncOp> programFunctions(mlir::ModuleOp module);

/// Erases the `mlt_rt.program`s that no `mlt_rt.step` calls (but
/// refresh_parameter_copies, which the runtime runs itself), and the
/// temporaries and constants that no remaining program touches.
void eraseUncalledPrograms(mlir::ModuleOp module);

/// Renames the buffers that `program`'s launches read and write by
/// `renamed` (the others stay).
void renameLaunchOperands(
    mlt::rt_ir::ProgramOp program,
    const llvm::DenseMap<mlir::StringAttr, mlir::StringAttr> &renamed);

} // namespace mlt

#endif // MLT_PASSES_PASSES_H
