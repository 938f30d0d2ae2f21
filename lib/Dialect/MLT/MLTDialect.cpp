//===- MLTDialect.cpp - the mlt model dialect -----------------------------===//
//
// Part of mlt. Registers the dialect's ops and attributes, and verifies the
// `mlt.model` module attribute.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTDialect.h"

#include "mlt/Dialect/MLT/MLTAttrs.h"
#include "mlt/Dialect/MLT/MLTOps.h"

#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
using namespace mlt;

#include "mlt/Dialect/MLT/MLTOpsDialect.cpp.inc"

void MLTDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "mlt/Dialect/MLT/MLTOps.cpp.inc"
      >();
  registerAttributes();
  registerShardingRules(getContext());
}

LogicalResult MLTDialect::verifyOperationAttribute(Operation *op,
                                                   NamedAttribute attr) {
  if (attr.getName() == getLayerAttrName()) {
    auto layer = dyn_cast<IntegerAttr>(attr.getValue());
    // Signless or index only: IntegerAttr::getInt asserts on si/ui types.
    if (!layer || !layer.getType().isSignlessIntOrIndex() || layer.getInt() < 0)
      return op->emitError() << "'" << getLayerAttrName()
                             << "' must be a non-negative integer layer index";
    return success();
  }
  if (attr.getName() == getMicrobatchesAttrName()) {
    auto count = dyn_cast<IntegerAttr>(attr.getValue());
    if (!count || count.getValue().getSExtValue() < 1)
      return op->emitError() << "'" << getMicrobatchesAttrName()
                             << "' must be a positive integer";
    return success();
  }
  if (attr.getName() == getMeshAttrName()) {
    if (!isa<ModuleOp>(op) || !isa<MeshAttr>(attr.getValue()))
      return op->emitError() << "'" << getMeshAttrName()
                             << "' must be a #mlt.mesh<...> on a module";
    return success();
  }
  if (attr.getName() == getShardingAttrName() ||
      attr.getName() == getOperandShardingsAttrName()) {
    if (isa<ShardingAttr>(attr.getValue()) && isa<ParamOp>(op))
      return success();
    auto list = dyn_cast<ArrayAttr>(attr.getValue());
    if (!list || !llvm::all_of(list, llvm::IsaPred<ShardingAttr>))
      return op->emitError() << "'" << attr.getName().getValue()
                             << "' must be a #mlt.sharding (on mlt.param) or an "
                                "array of them";
    return success();
  }
  if (attr.getName() == getVocabShardAttrName() ||
      attr.getName() == getSequenceShardAttrName()) {
    if (!isa<StringAttr>(attr.getValue()))
      return op->emitError() << "'" << attr.getName().getValue()
                             << "' must name a mesh axis";
    return success();
  }
  if (attr.getName() == getContextExchangeAttrName()) {
    auto kind = dyn_cast<StringAttr>(attr.getValue());
    if (!isa<AttentionOp, AttentionGradOp>(op) || !kind ||
        (kind.getValue() != "a2a" && kind.getValue() != "ring"))
      return op->emitError() << "'" << getContextExchangeAttrName()
                             << "' must be \"a2a\" or \"ring\" on an "
                                "mlt.attention or mlt.attention_grad";
    return success();
  }
  if (attr.getName() == getRowCountAttrName()) {
    auto count = dyn_cast<IntegerAttr>(attr.getValue());
    if (!count || count.getValue().getSExtValue() < 1)
      return op->emitError() << "'" << getRowCountAttrName()
                             << "' must be a positive integer";
    return success();
  }
  if (attr.getName() == getRecomputedAttrName() ||
      attr.getName() == getLossSeedAttrName()) {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitError() << "'" << attr.getName().getValue()
                             << "' must be a unit attribute";
    return success();
  }
  if (attr.getName() == getStageCostsAttrName()) {
    if (!isa<ModuleOp>(op) || !isa<DenseF64ArrayAttr>(attr.getValue()))
      return op->emitError() << "'" << getStageCostsAttrName()
                             << "' must be an array<f64> on a module";
    return success();
  }
  if (attr.getName() == getTiedAttrName()) {
    auto stage = dyn_cast<IntegerAttr>(attr.getValue());
    if (!isa<ParamOp>(op) || !stage || stage.getValue().getSExtValue() < 0)
      return op->emitError() << "'" << getTiedAttrName()
                             << "' must be a stage number on an mlt.param";
    return success();
  }
  if (attr.getName() == getTiedZerosAttrName()) {
    auto list = dyn_cast<ArrayAttr>(attr.getValue());
    bool ok = list && isa<ModuleOp>(op);
    for (Attribute entry : ok ? list.getValue() : ArrayRef<Attribute>()) {
      auto triple = dyn_cast<ArrayAttr>(entry);
      ok &= triple && triple.size() == 3 && isa<StringAttr>(triple[0]) &&
            isa<TypeAttr>(triple[1]) &&
            isa<RankedTensorType>(cast<TypeAttr>(triple[1]).getValue()) &&
            isa<ShardingAttr, UnitAttr>(triple[2]);
    }
    if (!ok)
      return op->emitError() << "'" << getTiedZerosAttrName()
                             << "' must be a list of [name, tensor type, "
                                "sharding or unit] on a module";
    return success();
  }
  if (attr.getName() == getStageAttrName() ||
      attr.getName() == getChunkAttrName()) {
    auto stage = dyn_cast<IntegerAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !stage || stage.getValue().getSExtValue() < 0)
      return op->emitError() << "'" << attr.getName().getValue()
                             << "' must be a non-negative integer on a module";
    return success();
  }
  if (attr.getName() == getChunksAttrName()) {
    auto chunks = dyn_cast<IntegerAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !chunks || chunks.getValue().getSExtValue() < 2)
      return op->emitError() << "'" << getChunksAttrName()
                             << "' must be an integer of 2 or more on a module";
    return success();
  }
  if (attr.getName() != getModelAttrName())
    return op->emitError() << "unknown mlt attribute '" << attr.getName().getValue()
                           << "'";
  if (!isa<ModuleOp>(op))
    return op->emitError() << "'" << getModelAttrName()
                           << "' belongs on a module, not on '" << op->getName() << "'";
  if (!isa<LlamaConfigAttr>(attr.getValue()))
    return op->emitError() << "'" << getModelAttrName()
                           << "' must be a model configuration such as #mlt.llama<...>";
  return success();
}
