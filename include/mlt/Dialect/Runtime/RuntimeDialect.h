//===- RuntimeDialect.h - the lowered, runtime-level dialect ----*- C++ -*-===//
//
// Part of mlt. Declares the `mlt_rt` dialect and its ops (RuntimeDialect.td).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_RUNTIME_RUNTIMEDIALECT_H
#define MLT_DIALECT_RUNTIME_RUNTIMEDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlt/Analysis/PipelineSchedule.h"

#include "mlt/Dialect/Runtime/RuntimeDialect.h.inc"
#include "mlt/Dialect/Runtime/RuntimeEnums.h.inc"

#define GET_OP_CLASSES
#include "mlt/Dialect/Runtime/RuntimeOps.h.inc"

namespace mlt::rt_ir {

/// The names of a lowered module's steps (`mlt_rt.step`, made by
/// mlt-schedule-pipeline): the training step, and the evaluation step of a
/// module with an evaluation body (mlt-attach-evaluation). The plan
/// exporter writes them as each rank's `step` and `eval_step`.
inline constexpr llvm::StringLiteral kTrainingStepName = "step";
inline constexpr llvm::StringLiteral kEvalStepName = "eval_step";

/// The module's training step (`@step`), or null.
StepOp trainingStep(mlir::ModuleOp module);
/// The module's evaluation step (`@eval_step`), or null.
StepOp evalStep(mlir::ModuleOp module);

/// The name of the buffer that a launch's operand `ref` (a flat symbol
/// reference) names.
inline llvm::StringRef bufferName(mlir::Attribute ref) {
  return llvm::cast<mlir::FlatSymbolRefAttr>(ref).getValue();
}

} // namespace mlt::rt_ir

#endif // MLT_DIALECT_RUNTIME_RUNTIMEDIALECT_H
