//===- MLTOps.cpp - mlt model ops -----------------------------------------===//
//
// Part of mlt. Shape rules, verifiers and custom assembly of the `mlt` ops.
// Each op's `inferReturnTypes` both computes its result type and rejects
// operands that do not fit together, with a diagnostic naming the dimensions;
// a dynamic dimension (`?`) fits any size.
//
//===----------------------------------------------------------------------===//

#include "ShapeRules.h"

#include "mlt/Dialect/MLT/MLTOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlt;

using namespace mlt::detail;

//===----------------------------------------------------------------------===//
// ParamOp / LoadOp
//===----------------------------------------------------------------------===//

static constexpr llvm::StringLiteral kLayerPlaceholder = "{}";

LogicalResult ParamOp::verify() {
  StringRef name = getSymName();
  if (name.empty())
    return emitOpError("needs a non-empty name");
  size_t placeholders = name.count(kLayerPlaceholder);
  if (isPerLayer() && placeholders != 1)
    return emitOpError("declares ")
           << *getLayers() << " per-layer parameters, so its name must hold '"
           << kLayerPlaceholder << "' exactly once for the layer index, got '"
           << name << "'";
  if (!isPerLayer() && placeholders != 0)
    return emitOpError("name '")
           << name << "' holds a layer placeholder '" << kLayerPlaceholder
           << "' but the parameter has no 'layers' count";
  if (getFirstLayer() && !isPerLayer())
    return emitOpError("gives a first layer ('from') but is not per-layer");
  if (getFirstLayer() && *getFirstLayer() >= *getLayers())
    return emitOpError("declares layers ")
           << *getFirstLayer() << " to " << *getLayers() - 1 << ", none";
  if (!getTensorType().hasStaticShape())
    return emitOpError("must have a static shape, got ") << getType();
  return success();
}

std::string ParamOp::getHFName(int64_t layer) {
  std::string name = getSymName().str();
  if (!isPerLayer())
    return name;
  size_t pos = name.find(kLayerPlaceholder.data());
  return name.replace(pos, kLayerPlaceholder.size(), std::to_string(layer));
}

StringRef LoadOp::getShortParamName(StringRef name) {
  SmallVector<StringRef> parts;
  name.split(parts, '.');
  while (parts.size() > 1 && (parts.back() == "weight" || parts.back() == "bias"))
    parts.pop_back();
  return parts.back();
}

LogicalResult LoadOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyParamReference(*this, symbolTable, getNameAttr(), getLayer(),
                              getType(), /*computeCopy=*/true);
}

/// "4 layers", "layers 4 to 7".
static std::string describeLayers(ParamOp param) {
  if (param.getLayerBegin() == 0)
    return std::to_string(param.getLayerEnd()) + " layers";
  return "layers " + std::to_string(param.getLayerBegin()) + " to " +
         std::to_string(param.getLayerEnd() - 1);
}

LogicalResult mlt::detail::verifyParamReference(
    Operation *op, SymbolTableCollection &symbolTable, FlatSymbolRefAttr name,
    Value layer, Type type, bool computeCopy) {
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(op, name);
  if (!param)
    return op->emitOpError("reads parameter ")
           << name << ", which no 'mlt.param' declares";
  // In a per-rank program (after mlt-spmdize) a state op holds the block of
  // the parameter its sharding gives each rank.
  Type block = param.getType();
  auto module = op->getParentOfType<ModuleOp>();
  auto sharding =
      param->getAttrOfType<ShardingAttr>(MLTDialect::getShardingAttrName());
  auto mesh = module ? module->getAttrOfType<MeshAttr>(
                           MLTDialect::getMeshAttrName())
                     : MeshAttr();
  if (sharding && mesh)
    block = RankedTensorType::get(
        sharding.localShape(param.getTensorType().getShape(), mesh),
        param.getTensorType().getElementType());
  // A compute copy: the same shape in bf16 or f16, of an f32 parameter.
  auto tensorType = dyn_cast<RankedTensorType>(type);
  Type declared = param.getTensorType().getElementType();
  Type compared = type;
  if (computeCopy && tensorType && declared.isF32() &&
      (tensorType.getElementType().isBF16() ||
       tensorType.getElementType().isF16()))
    compared = tensorType.clone(declared);
  if (param.getType() != compared && block != compared)
    return op->emitOpError("type ")
           << type << " does not match parameter " << name << " of type "
           << param.getType()
           << (block != param.getType() ? " (or its block, " : "")
           << (block != param.getType() ? block : Type())
           << (block != param.getType() ? ")" : "");
  if (param.isPerLayer() && !layer)
    return op->emitOpError("reads per-layer parameter ")
           << name << " without a layer index";
  if (!param.isPerLayer() && layer)
    return op->emitOpError("gives a layer index but parameter ")
           << name << " is not per-layer";
  // When the index is a repeat's layer, every layer it runs must exist.
  if (auto arg = dyn_cast_or_null<BlockArgument>(layer)) {
    auto repeat = dyn_cast<RepeatOp>(arg.getOwner()->getParentOp());
    if (repeat && arg == repeat.getLayerIndex() &&
        (int64_t(repeat.getUpper()) > param.getLayerEnd() ||
         int64_t(repeat.getLower()) < param.getLayerBegin()))
      return op->emitOpError("reads layer ")
             << (int64_t(repeat.getUpper()) > param.getLayerEnd()
                     ? repeat.getUpper() - 1
                     : repeat.getLower())
             << " of parameter " << name << ", which declares "
             << (param.getLayerBegin() == 0 ? "only " : "")
             << describeLayers(param);
  }
  // A constant index (unrolled layers) must name an existing layer.
  if (auto index = layer ? layer.getDefiningOp<arith::ConstantIndexOp>()
                         : nullptr;
      index && (index.value() < param.getLayerBegin() ||
                index.value() >= param.getLayerEnd()))
    return op->emitOpError("reads layer ")
           << index.value() << " of parameter " << name << ", which declares "
           << describeLayers(param);
  return success();
}

//===----------------------------------------------------------------------===//
// RepeatOp
//===----------------------------------------------------------------------===//

void RepeatOp::build(OpBuilder &builder, OperationState &state, int64_t lower,
                     int64_t upper, ValueRange inits) {
  state.addOperands(inits);
  state.getOrAddProperties<Properties>().lower = builder.getI64IntegerAttr(lower);
  state.getOrAddProperties<Properties>().upper = builder.getI64IntegerAttr(upper);
  state.addTypes(inits.getTypes());
  Region *body = state.addRegion();
  Block *block = new Block();
  body->push_back(block);
  block->addArgument(builder.getIndexType(), state.location);
  for (Value init : inits)
    block->addArgument(init.getType(), init.getLoc());
}

void RepeatOp::getAsmBlockArgumentNames(Region &region,
                                        OpAsmSetValueNameFn setNameFn) {
  setNameFn(getLayerIndex(), "layer");
  for (BlockArgument arg : getIterArgs())
    setNameFn(arg, "h");
}

// mlt.repeat %layer = 0 to 22 iter_args(%h = %init) -> (tensor<...>) { ... }
ParseResult RepeatOp::parse(OpAsmParser &parser, OperationState &result) {
  Builder &builder = parser.getBuilder();
  OpAsmParser::Argument layer;
  int64_t lower, upper;
  if (parser.parseArgument(layer) || parser.parseEqual() ||
      parser.parseInteger(lower) || parser.parseKeyword("to") ||
      parser.parseInteger(upper))
    return failure();
  layer.type = builder.getIndexType();

  SmallVector<OpAsmParser::Argument> regionArgs{layer};
  SmallVector<OpAsmParser::UnresolvedOperand> inits;
  if (succeeded(parser.parseOptionalKeyword("iter_args"))) {
    if (parser.parseAssignmentList(regionArgs, inits))
      return failure();
  }
  SmallVector<Type> types;
  if (!inits.empty() && (parser.parseArrow() || parser.parseLParen() ||
                         parser.parseTypeList(types) || parser.parseRParen()))
    return failure();
  if (types.size() != inits.size())
    return parser.emitError(parser.getNameLoc())
           << "expected " << inits.size() << " types for iter_args, got "
           << types.size();
  for (auto [arg, type] : llvm::zip(llvm::drop_begin(regionArgs), types))
    arg.type = type;
  if (parser.resolveOperands(inits, types, parser.getNameLoc(),
                             result.operands))
    return failure();
  result.addTypes(types);
  result.getOrAddProperties<Properties>().lower =
      builder.getI64IntegerAttr(lower);
  result.getOrAddProperties<Properties>().upper =
      builder.getI64IntegerAttr(upper);

  Region *body = result.addRegion();
  if (parser.parseRegion(*body, regionArgs))
    return failure();
  RepeatOp::ensureTerminator(*body, builder, result.location);
  return parser.parseOptionalAttrDict(result.attributes);
}

void RepeatOp::print(OpAsmPrinter &p) {
  p << " ";
  p.printRegionArgument(getLayerIndex(), /*argAttrs=*/{}, /*omitType=*/true);
  // The I64Attr getters return uint64_t; print the bounds signed, as parsed.
  p << " = " << getLowerAttr().getInt() << " to " << getUpperAttr().getInt();
  if (!getInits().empty()) {
    p << " iter_args(";
    llvm::interleaveComma(llvm::zip(getIterArgs(), getInits()), p,
                          [&](auto pair) {
                            p << std::get<0>(pair) << " = " << std::get<1>(pair);
                          });
    p << ") -> (" << getInits().getTypes() << ")";
  }
  p << " ";
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false,
                /*printBlockTerminators=*/!getInits().empty());
  p.printOptionalAttrDict((*this)->getAttrs(), {"lower", "upper"});
}

LogicalResult RepeatOp::verify() {
  // Read the bounds signed: the I64Attr getters return uint64_t, which would
  // let negative bounds through and print them as huge numbers.
  int64_t lower = getLowerAttr().getInt(), upper = getUpperAttr().getInt();
  if (lower < 0 || upper <= lower)
    return emitOpError("needs 0 <= lower < upper, got ")
           << lower << " to " << upper;
  Block &block = getBodyBlock();
  if (block.getNumArguments() != getInits().size() + 1 ||
      !block.getArgument(0).getType().isIndex())
    return emitOpError("body must take the layer index and one argument per "
                       "iter_arg");
  // Checked before the loop below, which walks inits and results in step.
  if (getNumResults() != getInits().size())
    return emitOpError("has ")
           << getInits().size() << " iter_args but " << getNumResults()
           << " results";
  for (auto [i, init, arg, res] :
       llvm::enumerate(getInits(), getIterArgs(), getResults())) {
    if (init.getType() != arg.getType() || init.getType() != res.getType())
      return emitOpError("iter_arg #")
             << i << " has type " << init.getType()
             << " but its body argument and result have " << arg.getType()
             << " and " << res.getType();
  }
  // This verifier runs before the block's terminator is checked (by the
  // region verifier and SingleBlockImplicitTerminator, a region trait), so
  // the last op may not be a yield yet: leave that error to them.
  auto yield = dyn_cast<YieldOp>(block.back());
  if (!yield)
    return success();
  if (yield.getValues().getTypes() != getInits().getTypes())
    return yield.emitOpError("yields (")
           << yield.getValues().getTypes()
           << ") but the enclosing repeat carries ("
           << getInits().getTypes() << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// EmbeddingOp
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &results) {
  auto ids = rankedOperand<EmbeddingOp>(loc, adaptor.getIds(), "ids");
  auto table = rankedOperand<EmbeddingOp>(loc, adaptor.getTable(), "table");
  if (failed(ids) || failed(table) ||
      failed(requireRank<EmbeddingOp>(loc, *table, "table", 2)))
    return failure();
  SmallVector<int64_t> shape(ids->getShape());
  shape.push_back(table->getDimSize(1));
  results.push_back(RankedTensorType::get(shape, table->getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// MatmulOp
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  auto lhs = rankedOperand<MatmulOp>(loc, adaptor.getLhs(), "lhs");
  auto rhs = rankedOperand<MatmulOp>(loc, adaptor.getRhs(), "rhs");
  if (failed(lhs) || failed(rhs) ||
      failed(requireSameElementType<MatmulOp>(loc, *lhs, "lhs", *rhs, "rhs")))
    return failure();
  int64_t lhsRank = lhs->getRank(), rhsRank = rhs->getRank();
  if (lhsRank < 2 || rhsRank < 2)
    return shapeError<MatmulOp>(loc, "operands must have rank 2 or more, got ",
                                lhsRank, " and ", rhsRank);
  if (rhsRank != 2 && rhsRank != lhsRank)
    return shapeError<MatmulOp>(
        loc, "rhs must be a matrix or have the rank of lhs (", lhsRank,
        "), got rank ", rhsRank);

  ArrayRef<int64_t> l = lhs->getShape(), r = rhs->getShape();
  bool tl = adaptor.getTransposeLhs(), tr = adaptor.getTransposeRhs();
  if (adaptor.getContractBatch()) {
    if (!tl || tr || lhsRank != rhsRank || lhsRank < 3)
      return shapeError<MatmulOp>(
          loc, "contract_batch needs transpose_lhs, no transpose_rhs and "
               "operands of one rank of 3 or more, got ranks ",
          lhsRank, " and ", rhsRank);
    for (int64_t i = 0; i < lhsRank - 1; ++i)
      if (!dimsFit(l[i], r[i]))
        return shapeError<MatmulOp>(loc, "contracted dimension ", i,
                                    " differs: lhs has ", dimStr(l[i]),
                                    ", rhs has ", dimStr(r[i]));
    results.push_back(RankedTensorType::get({l[lhsRank - 1], r[rhsRank - 1]},
                                            lhs->getElementType()));
    return success();
  }
  int64_t m = tl ? l[lhsRank - 1] : l[lhsRank - 2];
  int64_t kl = tl ? l[lhsRank - 2] : l[lhsRank - 1];
  int64_t kr = tr ? r[rhsRank - 1] : r[rhsRank - 2];
  int64_t n = tr ? r[rhsRank - 2] : r[rhsRank - 1];
  if (!dimsFit(kl, kr))
    return shapeError<MatmulOp>(
        loc, "contracting dimensions differ: lhs ", shapeStr(l), " has ",
        dimStr(kl), tl ? " (transposed)" : "", " but rhs ", shapeStr(r),
        " has ", dimStr(kr), tr ? " (transposed)" : "");

  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < lhsRank - 2; ++i) {
    int64_t d = l[i];
    if (rhsRank == lhsRank) {
      if (!dimsFit(d, r[i]))
        return shapeError<MatmulOp>(loc, "batch dimension ", i,
                                    " differs: lhs has ", dimStr(d),
                                    ", rhs has ", dimStr(r[i]));
      d = mergeDims(d, r[i]);
    }
    shape.push_back(d);
  }
  shape.push_back(m);
  shape.push_back(n);
  results.push_back(RankedTensorType::get(shape, lhs->getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// RMSNormOp
//===----------------------------------------------------------------------===//

LogicalResult RMSNormOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &results) {
  auto input = rankedOperand<RMSNormOp>(loc, adaptor.getInput(), "input");
  auto weight = rankedOperand<RMSNormOp>(loc, adaptor.getWeight(), "weight");
  if (failed(input) || failed(weight) ||
      failed(requireRank<RMSNormOp>(loc, *weight, "weight", 1)) ||
      failed(requireSameElementType<RMSNormOp>(loc, *input, "input", *weight,
                                               "weight")))
    return failure();
  if (input->getRank() < 1)
    return shapeError<RMSNormOp>(loc, "input must have rank 1 or more");
  int64_t hidden = input->getShape().back();
  if (!dimsFit(hidden, weight->getDimSize(0)))
    return shapeError<RMSNormOp>(loc, "weight has ", weight->getDimSize(0),
                                 " elements but the normalized (last) "
                                 "dimension of input has ",
                                 dimStr(hidden));
  SmallVector<int64_t> shape(input->getShape());
  shape.back() = mergeDims(hidden, weight->getDimSize(0));
  results.push_back(RankedTensorType::get(shape, input->getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// RopeOp
//===----------------------------------------------------------------------===//

LogicalResult RopeOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &results) {
  auto input = rankedOperand<RopeOp>(loc, adaptor.getInput(), "input");
  if (failed(input) ||
      failed(requireRank<RopeOp>(loc, *input,
                                 "input [batch, seq, heads, head_dim]", 4)))
    return failure();
  int64_t headDim = input->getDimSize(3);
  if (!ShapedType::isDynamic(headDim) && headDim % 2 != 0)
    return shapeError<RopeOp>(loc, "head_dim must be even to rotate pairs, got ",
                              headDim);
  results.push_back(*input);
  return success();
}

rt::RopeScaling RopeOp::getRopeScaling() {
  if (Llama3RopeScalingAttr scaling = getScalingAttr())
    return scaling.toRopeScaling();
  return {};
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  auto q = rankedOperand<AttentionOp>(loc, adaptor.getQuery(), "query");
  auto k = rankedOperand<AttentionOp>(loc, adaptor.getKey(), "key");
  auto v = rankedOperand<AttentionOp>(loc, adaptor.getValue(), "value");
  if (failed(q) || failed(k) || failed(v))
    return failure();
  StringRef layout = " [batch, seq, heads, head_dim]";
  if (failed(requireRank<AttentionOp>(loc, *q, ("query" + layout).str(), 4)) ||
      failed(requireRank<AttentionOp>(loc, *k, ("key" + layout).str(), 4)) ||
      failed(requireRank<AttentionOp>(loc, *v, ("value" + layout).str(), 4)) ||
      failed(requireSameElementType<AttentionOp>(loc, *q, "query", *k, "key")))
    return failure();
  FailureOr<SmallVector<int64_t>> kv =
      mergeShapes<AttentionOp>(loc, *k, "key", *v, "value");
  if (failed(kv) ||
      failed(requireSameElementType<AttentionOp>(loc, *k, "key", *v, "value")))
    return failure();
  ArrayRef<int64_t> qs = q->getShape();
  static const char *dimNames[] = {"batch", "seq", "heads", "head_dim"};
  // (The sequences may differ: a context-parallel rank's queries attend to
  // the whole sequence's keys; AttentionOp::verify holds them to it.)
  for (int i : {0, 3})
    if (!dimsFit(qs[i], (*kv)[i]))
      return shapeError<AttentionOp>(loc, "query and key/value differ in ",
                                     dimNames[i], ": ", dimStr(qs[i]), " vs ",
                                     dimStr((*kv)[i]));
  int64_t qHeads = qs[2], kvHeads = (*kv)[2];
  // Checked first: the multiple rule below would divide by zero.
  if (kvHeads == 0)
    return shapeError<AttentionOp>(loc,
                                   "key/value must have at least one head");
  if (!ShapedType::isDynamic(qHeads) && !ShapedType::isDynamic(kvHeads) &&
      qHeads % kvHeads != 0)
    return shapeError<AttentionOp>(
        loc, "query heads (", qHeads, ") must be a multiple of key/value heads (",
        kvHeads, ") for grouped-query attention");
  SmallVector<int64_t> shape(qs);
  for (int i : {0, 3})
    shape[i] = mergeDims(qs[i], (*kv)[i]);
  results.push_back(RankedTensorType::get(shape, q->getElementType()));
  return success();
}

LogicalResult mlt::detail::verifyAttentionSequences(Operation *op, Value query,
                                                    Value key) {
  const int64_t q = cast<RankedTensorType>(query.getType()).getDimSize(1);
  const int64_t k = cast<RankedTensorType>(key.getType()).getDimSize(1);
  auto axis =
      op->getAttrOfType<StringAttr>(MLTDialect::getSequenceShardAttrName());
  if (!axis) {
    if (!dimsFit(q, k))
      return op->emitOpError("query and key/value differ in seq: ")
             << dimStr(q) << " vs " << dimStr(k)
             << " (only a context-parallel rank's queries, '"
             << MLTDialect::getSequenceShardAttrName()
             << "', attend to more keys)";
    return success();
  }
  FailureOr<int64_t> size = meshAxisSize(op, axis.getValue());
  if (failed(size))
    return failure();
  if (ShapedType::isDynamic(q) || ShapedType::isDynamic(k))
    return success();
  // The whole sequence in the axis's load-balanced order (the all-to-all
  // exchange's heads): 2 x size chunks.
  if (q == k && q % (2 * *size) == 0)
    return success();
  if (k != q * *size || q % 2 != 0)
    return op->emitOpError("the queries of a context-parallel rank over '")
           << axis.getValue() << "' (size " << *size
           << ") are an even block of the keys' sequence, " << *size
           << " times as long, or the whole sequence of 2 x " << *size
           << " chunks; got query seq " << q << " and key seq " << k;
  return success();
}

LogicalResult AttentionOp::verify() {
  return detail::verifyAttentionSequences(*this, getQuery(), getKey());
}

//===----------------------------------------------------------------------===//
// ReshapeOp / TransposeOp / CastOp
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto in = getInput().getType();
  auto out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("cannot change the element type (")
           << in.getElementType() << " to " << out.getElementType()
           << "); use mlt.cast";
  int64_t inStatic = 1, outStatic = 1;
  SmallVector<unsigned> inDyn, outDyn;
  for (auto [i, d] : llvm::enumerate(in.getShape()))
    ShapedType::isDynamic(d) ? inDyn.push_back(i) : void(inStatic *= d);
  for (auto [i, d] : llvm::enumerate(out.getShape()))
    ShapedType::isDynamic(d) ? outDyn.push_back(i) : void(outStatic *= d);
  if (inDyn.size() != outDyn.size())
    return emitOpError("must keep the number of dynamic dimensions, got ")
           << inDyn.size() << " in " << shapeStr(in.getShape()) << " and "
           << outDyn.size() << " in " << shapeStr(out.getShape());
  if (inStatic != outStatic)
    return emitOpError("changes the number of elements: ")
           << shapeStr(in.getShape()) << " holds " << inStatic
           << (inDyn.empty() ? "" : " x dynamic") << " but "
           << shapeStr(out.getShape()) << " holds " << outStatic
           << (outDyn.empty() ? "" : " x dynamic");
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  auto input = rankedOperand<TransposeOp>(loc, adaptor.getInput(), "input");
  if (failed(input))
    return failure();
  if (!adaptor.getPermutationAttr())
    return shapeError<TransposeOp>(loc, "needs a permutation");
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  int64_t rank = input->getRank();
  if (static_cast<int64_t>(perm.size()) != rank)
    return shapeError<TransposeOp>(loc, "permutation has ", perm.size(),
                                   " entries but the input has rank ", rank);
  llvm::SmallBitVector seen(rank);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen.test(p))
      return shapeError<TransposeOp>(
          loc, "permutation must hold each of 0..", rank - 1,
          " exactly once, got ", shapeStr(perm));
    seen.set(p);
    shape.push_back(input->getDimSize(p));
  }
  results.push_back(RankedTensorType::get(shape, input->getElementType()));
  return success();
}

LogicalResult CastOp::verify() {
  auto in = getInput().getType();
  auto out = getResult().getType();
  if (in.getShape() != out.getShape())
    return emitOpError("cannot change the shape (")
           << shapeStr(in.getShape()) << " to " << shapeStr(out.getShape())
           << "); use mlt.reshape";
  return success();
}

//===----------------------------------------------------------------------===//
// CrossEntropyOp
//===----------------------------------------------------------------------===//

LogicalResult CrossEntropyOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &results) {
  auto logits =
      rankedOperand<CrossEntropyOp>(loc, adaptor.getLogits(), "logits");
  auto labels =
      rankedOperand<CrossEntropyOp>(loc, adaptor.getLabels(), "labels");
  if (failed(logits) || failed(labels))
    return failure();
  if (logits->getRank() < 1 || labels->getRank() != logits->getRank() - 1)
    return shapeError<CrossEntropyOp>(
        loc, "labels must have the shape of logits without the vocabulary "
             "(last) dimension, got logits ",
        shapeStr(logits->getShape()), " and labels ",
        shapeStr(labels->getShape()));
  for (auto [i, dims] :
       llvm::enumerate(llvm::zip(labels->getShape(), logits->getShape())))
    if (!dimsFit(std::get<0>(dims), std::get<1>(dims)))
      return shapeError<CrossEntropyOp>(
          loc, "labels and logits differ in dimension ", i, ": labels ",
          shapeStr(labels->getShape()), ", logits ",
          shapeStr(logits->getShape()));
  Type lossType = logits->getElementType().isF64()
                      ? Type(Float64Type::get(context))
                      : Type(Float32Type::get(context));
  results.push_back(RankedTensorType::get({}, lossType));
  return success();
}

/// `#mlt.sharding<...>` in full (the stripped form `<...>` that ODS would
/// print for the dialect's own attribute reads poorly). mlt.shard's format
/// puts its type before the sharding, since the parser reads a `: type`
/// right after an attribute as that attribute's type.
static ParseResult parseSharding(OpAsmParser &parser, ShardingAttr &sharding) {
  Attribute attr;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseAttribute(attr, parser.getBuilder().getNoneType()))
    return failure();
  sharding = dyn_cast<ShardingAttr>(attr);
  if (!sharding)
    return parser.emitError(loc, "expected a #mlt.sharding<...>");
  return success();
}

static void printSharding(OpAsmPrinter &printer, Operation *,
                          ShardingAttr sharding) {
  printer.printAttribute(sharding);
}

#define GET_OP_CLASSES
#include "mlt/Dialect/MLT/MLTOps.cpp.inc"
