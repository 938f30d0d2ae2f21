//===- MLTShardingRules.cpp - sharding rules and sharding ops ---------------===//
//
// Part of mlt. The ShardingRuleOpInterface model of every op that sharding
// propagation may split (attached when the dialect loads), and the verifiers
// and gradient rule of the sharding ops (MLTShardingOps.td).
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"

#include "ShapeRules.h"

#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
using namespace mlt;

namespace {

using Dim = ShardingRule::Dim;
using Tensor = ShardingRule::Tensor;

ArrayRef<int64_t> shapeOf(Value v) {
  if (auto type = dyn_cast<RankedTensorType>(v.getType()))
    return type.getShape();
  return {};
}

/// A tensor whose dimensions are `factors`, one each.
Tensor tensorOf(ArrayRef<int> factors) {
  Tensor t;
  for (int f : factors)
    t.push_back(Dim{f});
  return t;
}

/// Every operand and result of the same shape, dimension by dimension.
ShardingRule elementwise(Operation *op, bool linear = false) {
  ShardingRule rule;
  SmallVector<int> factors;
  for (int64_t size : shapeOf(op->getResult(0)))
    factors.push_back(rule.addFactor(size));
  for (Value v : op->getOperands())
    rule.operands.push_back(shapeOf(v).size() == factors.size()
                                ? tensorOf(factors)
                                : Tensor(shapeOf(v).size()));
  for (unsigned r = 0; r < op->getNumResults(); ++r)
    rule.results.push_back(tensorOf(factors));
  rule.linear = linear;
  return rule;
}

/// Dimensions of rank-0 values and of ops with no splittable dimension.
ShardingRule unsplittable(Operation *op) {
  ShardingRule rule;
  for (Value v : op->getOperands())
    rule.operands.push_back(Tensor(shapeOf(v).size()));
  for (Value v : op->getResults())
    rule.results.push_back(Tensor(shapeOf(v).size()));
  return rule;
}

/// Pairs the dimensions of a reshape's input and result into groups of equal
/// element count. A dimension that splits into several keeps them as its
/// factors (major first), several that merge into one make that one's
/// factors; other groups and unit dimensions are never split.
ShardingRule reshapeRule(ReshapeOp op) {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(op.getInput()), out = shapeOf(op.getResult());
  Tensor inDims(in.size()), outDims(out.size());
  size_t i = 0, j = 0;
  while (i < in.size() && j < out.size()) {
    if (in[i] == 1) {
      ++i;
      continue;
    }
    if (out[j] == 1) {
      ++j;
      continue;
    }
    size_t i1 = i + 1, j1 = j + 1;
    int64_t pi = in[i], po = out[j];
    while (pi != po && i1 <= in.size() && j1 <= out.size()) {
      if (pi < po) {
        if (i1 == in.size())
          break;
        pi *= in[i1++];
      } else {
        if (j1 == out.size())
          break;
        po *= out[j1++];
      }
    }
    if (pi != po)
      break;
    if (i1 - i == 1) {
      // One input dimension: the output dimensions are its factors.
      for (size_t k = j; k < j1; ++k) {
        int f = rule.addFactor(out[k]);
        outDims[k].push_back(f);
        inDims[i].push_back(f);
      }
    } else if (j1 - j == 1) {
      for (size_t k = i; k < i1; ++k) {
        int f = rule.addFactor(in[k]);
        inDims[k].push_back(f);
        outDims[j].push_back(f);
      }
    }
    i = i1;
    j = j1;
  }
  rule.operands.push_back(inDims);
  rule.results.push_back(outDims);
  return rule;
}

ShardingRule matmulRule(MatmulOp op) {
  ShardingRule rule;
  ArrayRef<int64_t> l = shapeOf(op.getLhs()), r = shapeOf(op.getRhs());
  int64_t rank = l.size();
  bool tl = op.getTransposeLhs(), tr = op.getTransposeRhs();
  SmallVector<int> batch;
  if (op.getContractBatch()) {
    for (int64_t d = 0; d < rank - 1; ++d)
      batch.push_back(rule.addFactor(l[d]));
    int m = rule.addFactor(l[rank - 1]), n = rule.addFactor(r[rank - 1]);
    Tensor lhs = tensorOf(batch), rhs = tensorOf(batch);
    lhs.push_back(Dim{m});
    rhs.push_back(Dim{n});
    rule.operands = {lhs, rhs};
    rule.results = {tensorOf({m, n})};
    return rule;
  }
  for (int64_t d = 0; d < rank - 2; ++d)
    batch.push_back(rule.addFactor(l[d]));
  int m = rule.addFactor(tl ? l[rank - 1] : l[rank - 2]);
  int k = rule.addFactor(tl ? l[rank - 2] : l[rank - 1]);
  int n = rule.addFactor(tr ? r[r.size() - 2] : r[r.size() - 1]);
  Tensor lhs = tensorOf(batch);
  lhs.append({Dim{tl ? k : m}, Dim{tl ? m : k}});
  Tensor rhs = r.size() == 2 ? Tensor() : tensorOf(batch);
  rhs.append({Dim{tr ? n : k}, Dim{tr ? k : n}});
  Tensor result = tensorOf(batch);
  result.append({Dim{m}, Dim{n}});
  rule.operands = {lhs, rhs};
  rule.results = {result};
  return rule;
}

/// [rows..., dim] inputs normalized over the last dimension, [dim] weights.
ShardingRule rmsNormRule(Operation *op, ArrayRef<bool> isWeightOperand,
                         ArrayRef<bool> isWeightResult) {
  ShardingRule rule;
  ArrayRef<int64_t> x = shapeOf(op->getOperand(isWeightOperand[0] ? 1 : 0));
  SmallVector<int> rows;
  for (int64_t size : x.drop_back())
    rows.push_back(rule.addFactor(size));
  int dim = rule.addFactor(x.back(), /*whole=*/true);
  Tensor full = tensorOf(rows);
  full.push_back(Dim{dim});
  for (bool weight : isWeightOperand)
    rule.operands.push_back(weight ? tensorOf({dim}) : full);
  for (bool weight : isWeightResult)
    rule.results.push_back(weight ? tensorOf({dim}) : full);
  return rule;
}

/// Attention over [batch, seq, heads, head_dim]: query heads are the key
/// heads (major) times the group of query heads sharing one (minor), so
/// splitting heads splits key and query heads together. The queries'
/// sequence splits over the context axis, each rank attending from its
/// block of queries to the whole sequence's keys (gathered), so a split
/// leaves the key and value gradients partial sums over it.
ShardingRule attentionRule(Operation *op, Value query, Value key,
                           unsigned numQueryLike, unsigned numKeyLike) {
  ShardingRule rule;
  ArrayRef<int64_t> q = shapeOf(query), k = shapeOf(key);
  int b = rule.addFactor(q[0]);
  int sq = rule.addSequenceFactor(q[1]);
  int sk = rule.addFactor(k[1], /*whole=*/true);
  int hkv = rule.addFactor(k[2]);
  int group = rule.addFactor(q[2] / k[2]);
  int d = rule.addFactor(q[3], /*whole=*/true);
  Tensor queryLike{Dim{b}, Dim{sq}, Dim{hkv, group}, Dim{d}};
  Tensor keyLike{Dim{b}, Dim{sk}, Dim{hkv}, Dim{d}};
  (void)op;
  // Operands: query-like ones, then key-like ones, then query-like ones.
  auto add = [&](SmallVectorImpl<Tensor> &list, ArrayRef<char> kinds) {
    for (char kind : kinds)
      list.push_back(kind == 'q' ? queryLike : keyLike);
  };
  if (numQueryLike == 1 && numKeyLike == 2) { // attention(q, k, v) -> out
    add(rule.operands, {'q', 'k', 'k'});
    add(rule.results, {'q'});
  } else { // attention_grad(dout, q, k, v, out) -> dq, dk, dv
    add(rule.operands, {'q', 'q', 'k', 'k', 'q'});
    add(rule.results, {'q', 'k', 'k'});
  }
  return rule;
}

/// An embedding lookup: ids [rows...] and a [vocab, hidden] table give
/// [rows..., hidden], so a split vocabulary leaves partial sums (each rank
/// looks up its rows). Its gradient maps [rows..., hidden] back to the table:
/// split rows leave partial sums of the table's gradient.
ShardingRule embeddingRule(Value ids, Value table, bool gradient) {
  ShardingRule rule;
  SmallVector<int> rows;
  for (int64_t size : shapeOf(ids))
    rows.push_back(rule.addFactor(size));
  ArrayRef<int64_t> shape = shapeOf(table);
  int vocab = rule.addFactor(shape[0]), hidden = rule.addFactor(shape[1]);
  Tensor activations = tensorOf(rows);
  activations.push_back(Dim{hidden});
  Tensor tableDims = tensorOf({vocab, hidden});
  rule.operands = {tensorOf(rows), gradient ? activations : tableDims};
  rule.results = {gradient ? tableDims : activations};
  return rule;
}

ShardingRule ruleOf(Operation *op) {
  if (auto m = dyn_cast<MatmulOp>(op))
    return matmulRule(m);
  if (auto r = dyn_cast<ReshapeOp>(op))
    return reshapeRule(r);
  if (auto t = dyn_cast<TransposeOp>(op)) {
    ShardingRule rule;
    SmallVector<int> factors;
    for (int64_t size : shapeOf(t.getInput()))
      factors.push_back(rule.addFactor(size));
    rule.operands = {tensorOf(factors)};
    Tensor result;
    for (int64_t p : t.getPermutation())
      result.push_back(Dim{factors[p]});
    rule.results = {result};
    return rule;
  }
  if (isa<RMSNormOp>(op))
    return rmsNormRule(op, {false, true}, {false});
  if (isa<RMSNormGradOp>(op))
    return rmsNormRule(op, {false, false, true}, {false, true});
  if (auto r = dyn_cast<RopeOp>(op)) {
    ShardingRule rule;
    ArrayRef<int64_t> x = shapeOf(r.getInput());
    int b = rule.addFactor(x[0]), s = rule.addSequenceFactor(x[1]),
        h = rule.addFactor(x[2]), d = rule.addFactor(x[3], true);
    rule.operands = {tensorOf({b, s, h, d})};
    rule.results = {tensorOf({b, s, h, d})};
    return rule;
  }
  if (auto a = dyn_cast<AttentionOp>(op))
    return attentionRule(op, a.getQuery(), a.getKey(), 1, 2);
  if (auto a = dyn_cast<AttentionGradOp>(op))
    return attentionRule(op, a.getQuery(), a.getKey(), 3, 2);
  if (auto e = dyn_cast<EmbeddingOp>(op))
    return embeddingRule(e.getIds(), e.getTable(), /*gradient=*/false);
  if (auto e = dyn_cast<EmbeddingGradOp>(op))
    return embeddingRule(e.getIds(), e.getResult(), /*gradient=*/true);
  if (isa<CrossEntropyOp, CrossEntropyGradOp>(op)) {
    bool grad = isa<CrossEntropyGradOp>(op);
    Value logits = op->getOperand(grad ? 1 : 0);
    ShardingRule rule;
    ArrayRef<int64_t> shape = shapeOf(logits);
    SmallVector<int> rows;
    for (int64_t size : shape.drop_back())
      rows.push_back(rule.addFactor(size));
    int vocab = rule.addFactor(shape.back());
    rule.reducedInternally[vocab] = true;
    Tensor full = tensorOf(rows);
    full.push_back(Dim{vocab});
    if (grad) {
      rule.operands = {Tensor(), full, tensorOf(rows)};
      rule.results = {full};
    } else {
      rule.operands = {full, tensorOf(rows)};
      rule.results = {Tensor()};
    }
    return rule;
  }
  if (auto s = dyn_cast<SumSquaresOp>(op)) {
    ShardingRule rule;
    SmallVector<int> factors;
    for (int64_t size : shapeOf(s.getInput()))
      factors.push_back(rule.addFactor(size));
    rule.operands = {tensorOf(factors)};
    rule.results = {Tensor()};
    return rule;
  }
  if (isa<AddOp>(op))
    return elementwise(op, /*linear=*/true);
  if (isa<MulOp, SwiGLUOp, SwiGLUGradOp, SiLUOp, SiLUGradOp, CastOp, ShardOp>(
          op))
    return elementwise(op);
  return unsplittable(op);
}

template <typename OpT>
struct RuleModel
    : public ShardingRuleOpInterface::ExternalModel<RuleModel<OpT>, OpT> {
  ShardingRule getShardingRule(Operation *op) const { return ruleOf(op); }
};

template <typename... Ops> void attachRules(MLIRContext *context) {
  (Ops::template attachInterface<RuleModel<Ops>>(*context), ...);
}

} // namespace

void mlt::registerShardingRules(MLIRContext *context) {
  attachRules<EmbeddingOp, MatmulOp, RMSNormOp, RopeOp, AttentionOp, SwiGLUOp,
              SiLUOp, AddOp, MulOp, ReshapeOp, TransposeOp, CastOp,
              CrossEntropyOp, EmbeddingGradOp, RMSNormGradOp, AttentionGradOp,
              SwiGLUGradOp, SiLUGradOp, CrossEntropyGradOp, SumSquaresOp,
              GlobalNormOp, ClipCoefficientOp, HyperparameterOp, ShardOp>(
      context);
}

//===----------------------------------------------------------------------===//
// Sharding ops
//===----------------------------------------------------------------------===//

namespace {
MeshAttr meshOf(Operation *op) {
  auto module = op->getParentOfType<ModuleOp>();
  return module ? module->getAttrOfType<MeshAttr>(MLTDialect::getMeshAttrName())
                : MeshAttr();
}
} // namespace

LogicalResult ShardOp::verify() {
  auto type = cast<RankedTensorType>(getInput().getType());
  if (std::optional<std::string> error =
          getSharding().checkFits(type.getShape(), meshOf(*this)))
    return emitOpError("sharding does not fit: ") << *error;
  return success();
}

LogicalResult ShardOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      ShardOp::create(b, getLoc(), resultGrads[0], getShardingAttr()));
  return success();
}

namespace {
/// Checks a collective's axis and, for the dimension-changing ones, that the
/// result is the input with dimension `shrinks` divided by the axis size and
/// dimension `grows` multiplied by it.
template <typename OpT>
LogicalResult verifyCollective(OpT op, std::optional<int64_t> shrinks,
                               std::optional<int64_t> grows) {
  FailureOr<int64_t> size = op.getAxisSize();
  if (failed(size))
    return failure();
  if (!shrinks && !grows)
    return success();
  auto in = cast<RankedTensorType>(op.getInput().getType());
  auto out = cast<RankedTensorType>(op.getResult().getType());
  for (std::optional<int64_t> dim : {shrinks, grows})
    if (dim && *dim >= in.getRank())
      return op.emitOpError("dimension ")
             << *dim << " is out of range for rank " << in.getRank();
  if (shrinks && grows && *shrinks == *grows)
    return op.emitOpError("splits and concatenates the same dimension ")
           << *grows;
  if (in.getElementType() != out.getElementType() ||
      in.getRank() != out.getRank())
    return op.emitOpError("result must have the input's rank and element type");
  for (int64_t d = 0; d < in.getRank(); ++d) {
    int64_t expected = in.getDimSize(d);
    if (shrinks && d == *shrinks) {
      if (expected % *size != 0)
        return op.emitOpError("dimension ")
               << d << " of size " << expected
               << " is not divisible by the axis size " << *size;
      expected /= *size;
    }
    if (grows && d == *grows)
      expected *= *size;
    if (out.getDimSize(d) != expected)
      return op.emitOpError("result dimension ")
             << d << " must be " << expected << ", got " << out.getDimSize(d);
  }
  return success();
}

template <typename OpT> FailureOr<int64_t> axisSizeOf(OpT op) {
  return mlt::detail::meshAxisSize(op, op.getAxis());
}
} // namespace

FailureOr<int64_t> mlt::detail::meshAxisSize(Operation *op, StringRef axis) {
  MeshAttr mesh = meshOf(op);
  if (!mesh)
    return op->emitOpError("runs over mesh axis '")
           << axis << "' but the module has no mlt.mesh";
  int64_t index = mesh.axisIndex(axis);
  if (index < 0)
    return op->emitOpError("'") << axis << "' is not an axis of the mesh "
                                << mesh;
  return mesh.getSizes()[index];
}

#define MLT_COLLECTIVE(Op, Shrinks, Grows)                                      \
  FailureOr<int64_t> Op::getAxisSize() { return axisSizeOf(*this); }            \
  LogicalResult Op::verify() { return verifyCollective(*this, Shrinks, Grows); }
MLT_COLLECTIVE(AllReduceOp, std::nullopt, std::nullopt)
MLT_COLLECTIVE(AllGatherOp, std::nullopt, getDim())
MLT_COLLECTIVE(ReduceScatterOp, getDim(), std::nullopt)
MLT_COLLECTIVE(ShardSliceOp, getDim(), std::nullopt)
MLT_COLLECTIVE(AllToAllOp, getSplit(), getConcat())
#undef MLT_COLLECTIVE

FailureOr<int64_t> CollectivePermuteOp::getAxisSize() {
  return axisSizeOf(*this);
}
LogicalResult CollectivePermuteOp::verify() {
  FailureOr<int64_t> size = getAxisSize();
  if (failed(size))
    return failure();
  if (getShift() >= *size)
    return emitOpError("shift ")
           << getShift() << " must be below the axis size " << *size;
  return success();
}

namespace {
/// The ring's ops: `query` [batch, seq, q_heads, head_dim], `key` (a block
/// of as many rows) [batch, seq, kv_heads, head_dim], `lse` [batch, q_heads,
/// seq] in f32 (f64 with f64 queries), `step` below the size of the context
/// axis `axis`, seq two chunks.
LogicalResult verifyRingStep(Operation *op, Value query, Value key, Value lse,
                             StringRef axis, int64_t step) {
  FailureOr<int64_t> size = mlt::detail::meshAxisSize(op, axis);
  if (failed(size))
    return failure();
  if (step >= *size)
    return op->emitOpError("step ")
           << step << " must be below the axis size " << *size;
  auto q = cast<RankedTensorType>(query.getType());
  auto k = cast<RankedTensorType>(key.getType());
  auto l = cast<RankedTensorType>(lse.getType());
  if (q.getRank() != 4 || k.getRank() != 4)
    return op->emitOpError("query and key/value must be [batch, seq, heads, "
                           "head_dim], got ")
           << q << " and " << k;
  for (int d : {0, 1, 3})
    if (q.getDimSize(d) != k.getDimSize(d))
      return op->emitOpError("query and key/value differ in dimension ")
             << d << " (a ring step's keys are one rank's block, as many rows "
             << "as its queries): " << q << " vs " << k;
  if (k.getDimSize(2) <= 0 || q.getDimSize(2) % k.getDimSize(2) != 0)
    return op->emitOpError("query heads (")
           << q.getDimSize(2) << ") must be a multiple of key/value heads ("
           << k.getDimSize(2) << ")";
  if (q.getDimSize(1) % 2 != 0)
    return op->emitOpError("seq ")
           << q.getDimSize(1)
           << " is a context-parallel rank's block of two chunks and must be "
              "even";
  Type stat = q.getElementType().isF64()
                  ? Type(q.getElementType())
                  : Type(Float32Type::get(op->getContext()));
  auto expected = RankedTensorType::get(
      {q.getDimSize(0), q.getDimSize(2), q.getDimSize(1)}, stat);
  if (l != expected)
    return op->emitOpError("lse must be ") << expected << ", got " << l;
  return success();
}
} // namespace

LogicalResult AttentionBlockOp::verify() {
  return verifyRingStep(*this, getQuery(), getKey(), getLse(), getAxis(),
                        getStep());
}

LogicalResult AttentionBlockGradOp::verify() {
  return verifyRingStep(*this, getQuery(), getKey(), getLse(), getAxis(),
                        getStep());
}

LogicalResult AttentionMergeOp::verify() {
  auto out = cast<RankedTensorType>(getOutA().getType());
  auto lse = cast<RankedTensorType>(getLseA().getType());
  if (out.getRank() != 4 || lse.getRank() != 3 ||
      lse.getDimSize(0) != out.getDimSize(0) ||
      lse.getDimSize(1) != out.getDimSize(2) ||
      lse.getDimSize(2) != out.getDimSize(1))
    return emitOpError("lse must be [batch, heads, seq] of out [batch, seq, "
                       "heads, head_dim], got ")
           << lse << " for " << out;
  return success();
}

FailureOr<int64_t> ReorderSequenceOp::getAxisSize() { return axisSizeOf(*this); }
LogicalResult ReorderSequenceOp::verify() {
  FailureOr<int64_t> size = getAxisSize();
  if (failed(size))
    return failure();
  auto type = cast<RankedTensorType>(getInput().getType());
  if (getDim() >= type.getRank())
    return emitOpError("dimension ")
           << getDim() << " is out of range for rank " << type.getRank();
  const int64_t rows = type.getDimSize(getDim());
  if (!ShapedType::isDynamic(rows) && rows % (2 * *size) != 0)
    return emitOpError("dimension ")
           << getDim() << " of size " << rows << " is not 2 x " << *size
           << " equal chunks";
  return success();
}
