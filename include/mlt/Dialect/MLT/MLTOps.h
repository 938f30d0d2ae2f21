//===- MLTOps.h - mlt model ops ---------------------------------*- C++ -*-===//
//
// Part of mlt. Declares the ops of the `mlt` dialect (see MLTOps.td).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_MLT_MLTOPS_H
#define MLT_DIALECT_MLT_MLTOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "mlt/Dialect/MLT/MLTAttrs.h"
#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/MLT/MLTInterfaces.h"

namespace mlt {
/// The training state (parameters, gradients, optimizer moments) that the
/// state ops of MLTTrainingOps.td read and write.
struct TrainingStateResource
    : public mlir::SideEffects::Resource::Base<TrainingStateResource> {
  llvm::StringRef getName() final { return "mlt.training_state"; }
};
/// What pipeline transfers (mlt.send, mlt.recv) move between ranks: they
/// keep their order and are never removed.
struct TransferResource
    : public mlir::SideEffects::Resource::Base<TransferResource> {
  llvm::StringRef getName() final { return "mlt.transfers"; }
};
} // namespace mlt

#define GET_OP_CLASSES
#include "mlt/Dialect/MLT/MLTOps.h.inc"

namespace mlt {
/// Attaches ShardingRuleOpInterface to the ops that have a sharding rule
/// (MLTShardingRules.cpp); the dialect does it when it loads.
void registerShardingRules(mlir::MLIRContext *context);
} // namespace mlt

#endif // MLT_DIALECT_MLT_MLTOPS_H
