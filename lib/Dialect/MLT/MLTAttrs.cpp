//===- MLTAttrs.cpp - mlt attributes --------------------------------------===//
//
// Part of mlt. The model configuration attribute and its consistency checks.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTAttrs.h"

#include "mlt/Dialect/MLT/MLTDialect.h"

#include "llvm/ADT/StringSet.h"
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

//===----------------------------------------------------------------------===//
// Llama3RopeScalingAttr
//===----------------------------------------------------------------------===//

LogicalResult
Llama3RopeScalingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                              FloatAttr factor, FloatAttr lowFreqFactor,
                              FloatAttr highFreqFactor,
                              int64_t originalMaxPositionEmbeddings) {
  if (!factor || !lowFreqFactor || !highFreqFactor)
    return emitError() << "factor, low_freq_factor and high_freq_factor "
                          "must be floats";
  // The runtime's check, so that a module the verifier accepts lowers to a
  // plan the plan verifier accepts.
  Status status = rt::checkRopeScaling(rt::RopeScaling::llama3(
      factor.getValueAsDouble(), lowFreqFactor.getValueAsDouble(),
      highFreqFactor.getValueAsDouble(), originalMaxPositionEmbeddings));
  if (!status)
    return emitError() << status.message();
  return success();
}

rt::RopeScaling Llama3RopeScalingAttr::toRopeScaling() const {
  return rt::RopeScaling::llama3(getFactor().getValueAsDouble(),
                                 getLowFreqFactor().getValueAsDouble(),
                                 getHighFreqFactor().getValueAsDouble(),
                                 getOriginalMaxPositionEmbeddings());
}

Llama3RopeScalingAttr
Llama3RopeScalingAttr::get(MLIRContext *context,
                           const rt::RopeScaling &scaling) {
  assert(scaling.kind == rt::RopeScalingKind::Llama3 && "not a llama3 scaling");
  Builder b(context);
  return get(context, b.getF64FloatAttr(scaling.factor),
             b.getF64FloatAttr(scaling.lowFreqFactor),
             b.getF64FloatAttr(scaling.highFreqFactor),
             scaling.originalMaxPositionEmbeddings);
}

//===----------------------------------------------------------------------===//
// LlamaConfigAttr
//===----------------------------------------------------------------------===//

FailureOr<Attribute> mlt::parseTokenIds(AsmParser &parser) {
  Builder b(parser.getContext());
  if (succeeded(parser.parseOptionalLSquare())) {
    SmallVector<int64_t> ids;
    if (failed(parser.parseOptionalRSquare())) {
      if (parser.parseCommaSeparatedList([&]() -> ParseResult {
            return parser.parseInteger(ids.emplace_back());
          }) ||
          parser.parseRSquare())
        return failure();
    }
    return Attribute(b.getDenseI64ArrayAttr(ids));
  }
  int64_t id;
  if (parser.parseInteger(id))
    return failure();
  return Attribute(b.getI64IntegerAttr(id));
}

void mlt::printTokenIds(AsmPrinter &printer, Attribute ids) {
  if (auto list = dyn_cast<DenseI64ArrayAttr>(ids)) {
    printer << '[';
    llvm::interleaveComma(list.asArrayRef(), printer);
    printer << ']';
  } else if (auto id = dyn_cast<IntegerAttr>(ids)) {
    printer << id.getInt();
  }
}

bool mlt::isTokenIds(Attribute ids) {
  if (isa<DenseI64ArrayAttr>(ids))
    return true;
  auto id = dyn_cast<IntegerAttr>(ids);
  return id && id.getType().isSignlessInteger(64);
}

LogicalResult LlamaConfigAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, int64_t vocabSize,
    int64_t hiddenSize, int64_t intermediateSize, int64_t numLayers,
    int64_t numHeads, int64_t numKvHeads, int64_t headDim,
    int64_t maxPositionEmbeddings, FloatAttr rmsNormEps, FloatAttr ropeTheta,
    BoolAttr tieWordEmbeddings, Llama3RopeScalingAttr /*ropeScaling*/,
    Attribute bosTokenId, Attribute eosTokenId, Attribute padTokenId) {
  std::pair<StringRef, Attribute> tokenIds[] = {{"bos_token_id", bosTokenId},
                                                {"eos_token_id", eosTokenId},
                                                {"pad_token_id", padTokenId}};
  for (auto [name, ids] : tokenIds)
    if (ids && !isTokenIds(ids))
      return emitError() << name
                         << " must be an i64 id or a list of ids, got " << ids;
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

//===----------------------------------------------------------------------===//
// MeshAttr
//===----------------------------------------------------------------------===//

// #mlt.mesh<dp = 2, tp = 4>
Attribute MeshAttr::parse(AsmParser &parser, Type) {
  SmallVector<StringAttr> axes;
  SmallVector<int64_t> sizes;
  auto parseAxis = [&]() -> ParseResult {
    std::string name;
    int64_t size;
    if (parser.parseKeywordOrString(&name) || parser.parseEqual() ||
        parser.parseInteger(size))
      return failure();
    axes.push_back(parser.getBuilder().getStringAttr(name));
    sizes.push_back(size);
    return success();
  };
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::LessGreater,
                                     parseAxis))
    return {};
  return MeshAttr::getChecked([&] { return parser.emitError(parser.getNameLoc()); },
                              parser.getContext(), axes, sizes);
}

void MeshAttr::print(AsmPrinter &printer) const {
  printer << "<";
  llvm::interleaveComma(llvm::zip(getAxes(), getSizes()), printer,
                        [&](auto axis) {
                          printer.printKeywordOrString(
                              std::get<0>(axis).getValue());
                          printer << " = " << std::get<1>(axis);
                        });
  printer << ">";
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<StringAttr> axes,
                               ArrayRef<int64_t> sizes) {
  if (axes.size() != sizes.size())
    return emitError() << "mesh has " << axes.size() << " axis names but "
                       << sizes.size() << " sizes";
  llvm::StringSet<> seen;
  for (auto [axis, size] : llvm::zip(axes, sizes)) {
    if (axis.getValue().empty() ||
        axis.getValue() == ShardingAttr::kOpen)
      return emitError() << "mesh axis name '" << axis.getValue()
                         << "' is not a name";
    if (!seen.insert(axis.getValue()).second)
      return emitError() << "mesh axis '" << axis.getValue()
                         << "' appears twice";
    if (size < 1)
      return emitError() << "mesh axis '" << axis.getValue()
                         << "' has size " << size << "; sizes must be >= 1";
  }
  return success();
}

int64_t MeshAttr::axisIndex(StringRef name) const {
  for (auto [i, axis] : llvm::enumerate(getAxes()))
    if (axis.getValue() == name)
      return i;
  return -1;
}

int64_t MeshAttr::axisSize(StringAttr name) const {
  if (!name)
    return 1;
  int64_t index = axisIndex(name.getValue());
  return index < 0 ? 1 : getSizes()[index];
}

int64_t MeshAttr::numRanks() const {
  int64_t ranks = 1;
  for (int64_t size : getSizes())
    ranks *= size;
  return ranks;
}

int64_t MeshAttr::coordinate(int64_t rank, int64_t axis) const {
  int64_t stride = 1;
  for (int64_t a = getSizes().size() - 1; a > axis; --a)
    stride *= getSizes()[a];
  return (rank / stride) % getSizes()[axis];
}

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

namespace {
ParseResult parseAxisList(AsmParser &parser, SmallVectorImpl<StringAttr> &out) {
  return parser.parseCommaSeparatedList(
      AsmParser::Delimiter::Square, [&]() -> ParseResult {
        std::string name;
        if (parser.parseKeywordOrString(&name))
          return failure();
        out.push_back(parser.getBuilder().getStringAttr(name));
        return success();
      });
}

/// `?`, `-`, or axis names joined by `*`, major first.
ParseResult parseDimList(AsmParser &parser, SmallVectorImpl<ArrayAttr> &out) {
  Builder b = parser.getBuilder();
  return parser.parseCommaSeparatedList(
      AsmParser::Delimiter::Square, [&]() -> ParseResult {
        if (succeeded(parser.parseOptionalQuestion())) {
          out.push_back(b.getArrayAttr(b.getStringAttr(ShardingAttr::kOpen)));
          return success();
        }
        if (succeeded(parser.parseOptionalMinus())) {
          out.push_back(b.getArrayAttr({}));
          return success();
        }
        SmallVector<Attribute> axes;
        do {
          std::string name;
          if (parser.parseKeywordOrString(&name))
            return failure();
          axes.push_back(b.getStringAttr(name));
        } while (succeeded(parser.parseOptionalStar()));
        out.push_back(b.getArrayAttr(axes));
        return success();
      });
}
} // namespace

ShardingAttr ShardingAttr::get(MLIRContext *context, ArrayRef<StringAttr> axes,
                               ArrayRef<StringAttr> partial) {
  SmallVector<ArrayAttr> dims;
  for (StringAttr axis : axes) {
    if (axis.getValue() == kReplicated)
      dims.push_back(ArrayAttr::get(context, {}));
    else
      dims.push_back(ArrayAttr::get(context, {axis}));
  }
  return get(context, ArrayRef<ArrayAttr>(dims), partial);
}

ShardingAttr ShardingAttr::get(MLIRContext *context,
                               ArrayRef<SmallVector<StringAttr, 2>> axes,
                               ArrayRef<StringAttr> partial,
                               ArrayRef<bool> open) {
  SmallVector<ArrayAttr> dims;
  for (auto [d, list] : llvm::enumerate(axes)) {
    if (d < open.size() && open[d]) {
      assert(list.empty() && "an open dimension has no axes");
      dims.push_back(ArrayAttr::get(context, {StringAttr::get(context, kOpen)}));
      continue;
    }
    dims.push_back(ArrayAttr::get(
        context, SmallVector<Attribute>(list.begin(), list.end())));
  }
  return get(context, ArrayRef<ArrayAttr>(dims), partial);
}

// #mlt.sharding<[dp, ?, -, cp*tp], partial = [tp]>
Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  SmallVector<ArrayAttr> dims;
  SmallVector<StringAttr> partial;
  if (parser.parseLess() || parseDimList(parser, dims))
    return {};
  if (succeeded(parser.parseOptionalComma()) &&
      (parser.parseKeyword("partial") || parser.parseEqual() ||
       parseAxisList(parser, partial)))
    return {};
  if (parser.parseGreater())
    return {};
  return ShardingAttr::getChecked(
      [&] { return parser.emitError(parser.getNameLoc()); },
      parser.getContext(), dims, partial);
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  llvm::interleaveComma(llvm::seq<unsigned>(0, getRank()), printer,
                        [&](unsigned d) {
                          if (isOpen(d)) {
                            printer << "?";
                            return;
                          }
                          DimAxes axes = getAxes(d);
                          if (axes.empty())
                            printer << "-";
                          llvm::interleave(
                              axes, printer,
                              [&](StringAttr axis) {
                                printer.printKeywordOrString(axis.getValue());
                              },
                              "*");
                        });
  printer << "]";
  if (!getPartial().empty()) {
    printer << ", partial = [";
    llvm::interleaveComma(getPartial(), printer, [&](StringAttr axis) {
      printer.printKeywordOrString(axis.getValue());
    });
    printer << "]";
  }
  printer << ">";
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   ArrayRef<ArrayAttr> dims,
                                   ArrayRef<StringAttr> partial) {
  llvm::StringSet<> seen;
  for (ArrayAttr dim : dims) {
    for (Attribute entry : dim) {
      auto axis = dyn_cast<StringAttr>(entry);
      if (!axis || axis.getValue().empty())
        return emitError() << "a dimension's axes must be mesh axis names";
      if (axis.getValue() == kOpen) {
        if (dim.size() != 1)
          return emitError() << "an open dimension ('?') has no axes";
        continue;
      }
      if (!seen.insert(axis.getValue()).second)
        return emitError() << "mesh axis '" << axis.getValue()
                           << "' splits two dimensions of one sharding (or "
                              "one twice)";
    }
  }
  for (StringAttr axis : partial) {
    if (axis.getValue().empty() || axis.getValue() == kOpen)
      return emitError() << "a partial axis must be a mesh axis name";
    if (!seen.insert(axis.getValue()).second)
      return emitError() << "mesh axis '" << axis.getValue()
                         << "' both splits a dimension and sums partial values"
                            " (or is listed twice)";
  }
  return success();
}

bool ShardingAttr::isOpen(unsigned dim) const {
  ArrayAttr axes = getDims()[dim];
  return axes.size() == 1 &&
         cast<StringAttr>(axes[0]).getValue() == kOpen;
}

ShardingAttr::DimAxes ShardingAttr::getAxes(unsigned dim) const {
  if (isOpen(dim))
    return {};
  return DimAxes(getDims()[dim].getAsRange<StringAttr>());
}

bool ShardingAttr::hasMultiAxisDim() const {
  for (unsigned d = 0; d < getRank(); ++d)
    if (getAxes(d).size() > 1)
      return true;
  return false;
}

int64_t ShardingAttr::dimOf(StringRef axis) const {
  for (unsigned d = 0; d < getRank(); ++d)
    for (StringAttr a : getAxes(d))
      if (a.getValue() == axis)
        return d;
  return -1;
}

bool ShardingAttr::isPartialOver(StringRef axis) const {
  return llvm::any_of(getPartial(),
                      [&](StringAttr a) { return a.getValue() == axis; });
}

bool ShardingAttr::isFullyReplicated() const {
  if (!getPartial().empty())
    return false;
  for (unsigned d = 0; d < getRank(); ++d)
    if (!getAxes(d).empty())
      return false;
  return true;
}

ShardingAttr ShardingAttr::getReplicated(MLIRContext *context, unsigned rank) {
  SmallVector<ArrayAttr> dims(rank, ArrayAttr::get(context, {}));
  return ShardingAttr::get(context, ArrayRef<ArrayAttr>(dims), {});
}

ShardingAttr ShardingAttr::ofSingleResult(Attribute attr) {
  if (auto list = dyn_cast_or_null<ArrayAttr>(attr); list && list.size() == 1)
    attr = list[0];
  return dyn_cast_or_null<ShardingAttr>(attr);
}

std::optional<std::string> ShardingAttr::checkFits(ArrayRef<int64_t> shape,
                                                   MeshAttr mesh) const {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (shape.size() != getRank()) {
    os << "the sharding has " << getRank() << " dimensions but the tensor has "
       << shape.size();
    return text;
  }
  auto checkAxis = [&](StringAttr axis) {
    if (!mesh) {
      os << "mesh axis '" << axis.getValue()
         << "' is used but the module has no mlt.mesh";
      return false;
    }
    if (mesh.axisIndex(axis.getValue()) < 0) {
      os << "'" << axis.getValue() << "' is not an axis of the mesh " << mesh;
      return false;
    }
    return true;
  };
  for (unsigned d = 0; d < getRank(); ++d) {
    DimAxes axes = getAxes(d);
    if (axes.empty())
      continue;
    for (StringAttr axis : axes)
      if (!checkAxis(axis))
        return text;
    int64_t size = blocks(d, mesh);
    if (!ShapedType::isDynamic(shape[d]) && shape[d] % size != 0) {
      os << "dimension " << d << " (size " << shape[d]
         << ") is not divisible by mesh axis '";
      llvm::interleave(
          axes, os, [&](StringAttr axis) { os << axis.getValue(); }, "*");
      os << "' of size " << size;
      return text;
    }
  }
  for (StringAttr axis : getPartial())
    if (!checkAxis(axis))
      return text;
  return std::nullopt;
}

int64_t ShardingAttr::blocks(unsigned dim, MeshAttr mesh) const {
  int64_t size = 1;
  for (StringAttr axis : getAxes(dim))
    size *= mesh.axisSize(axis);
  return size;
}

SmallVector<int64_t> ShardingAttr::localShape(ArrayRef<int64_t> shape,
                                              MeshAttr mesh) const {
  SmallVector<int64_t> local(shape);
  for (unsigned d = 0; d < getRank() && d < shape.size(); ++d)
    if (!ShapedType::isDynamic(shape[d]))
      local[d] = shape[d] / blocks(d, mesh);
  return local;
}
