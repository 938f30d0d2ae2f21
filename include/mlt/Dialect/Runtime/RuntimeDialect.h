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

/// The name of the buffer that a launch's operand `ref` (a flat symbol
/// reference) names.
inline llvm::StringRef bufferName(mlir::Attribute ref) {
  return llvm::cast<mlir::FlatSymbolRefAttr>(ref).getValue();
}

} // namespace mlt::rt_ir

#endif // MLT_DIALECT_RUNTIME_RUNTIMEDIALECT_H
