//===- MLTAttrs.cpp - mlt attributes --------------------------------------===//
//
// Part of mlt. The model configuration attribute and its consistency checks.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTAttrs.h"

#include "mlt/Dialect/MLT/MLTDialect.h"

#include "llvm/ADT/TypeSwitch.h"
#include "mlir/IR/DialectImplementation.h"

using namespace mlir;
using namespace mlt;

#define GET_ATTRDEF_CLASSES
#include "mlt/Dialect/MLT/MLTAttrs.cpp.inc"

void MLTDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "mlt/Dialect/MLT/MLTAttrs.cpp.inc"
      >();
}

LogicalResult LlamaConfigAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, int64_t vocabSize,
    int64_t hiddenSize, int64_t intermediateSize, int64_t numLayers,
    int64_t numHeads, int64_t numKvHeads, int64_t headDim,
    int64_t maxPositionEmbeddings, FloatAttr rmsNormEps, FloatAttr ropeTheta,
    BoolAttr tieWordEmbeddings) {
  std::pair<StringRef, int64_t> positives[] = {
      {"vocab_size", vocabSize},
      {"hidden_size", hiddenSize},
      {"intermediate_size", intermediateSize},
      {"num_layers", numLayers},
      {"num_heads", numHeads},
      {"num_kv_heads", numKvHeads},
      {"head_dim", headDim},
      {"max_position_embeddings", maxPositionEmbeddings}};
  for (auto [name, value] : positives)
    if (value <= 0)
      return emitError() << name << " must be positive, got " << value;
  if (numHeads % numKvHeads != 0)
    return emitError() << "num_heads (" << numHeads
                       << ") must be a multiple of num_kv_heads (" << numKvHeads
                       << ")";
  if (headDim % 2 != 0)
    return emitError() << "head_dim (" << headDim
                       << ") must be even for rotary embeddings";
  if (!rmsNormEps || rmsNormEps.getValueAsDouble() <= 0.0)
    return emitError() << "rms_norm_eps must be a positive float";
  if (!ropeTheta || ropeTheta.getValueAsDouble() <= 0.0)
    return emitError() << "rope_theta must be a positive float";
  if (!tieWordEmbeddings)
    return emitError() << "tie_word_embeddings must be true or false";
  return success();
}
