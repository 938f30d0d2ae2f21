//===- Spmdize.cpp - the per-rank program of a sharded program ------------===//
//
// Part of mlt. Implements mlt-spmdize (Passes.td): in program order, each
// op's operands are converted into the shardings it needs
// (`mlt.operand_shardings`) by collectives, and its results take the type of
// the block one rank holds. The result is one program that every rank runs.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>

namespace mlt {
#define GEN_PASS_DEF_MLTSPMDIZE
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

constexpr llvm::StringRef kPipelineAxis = axisName(ParallelAxis::Pipeline);

class Partitioner {
public:
  Partitioner(ModuleOp module, MeshAttr mesh)
      : module(module), mesh(mesh), b(module.getContext()) {}

  LogicalResult run() {
    // The functions mlt-propagate-shardings annotated (not a model's
    // @forward, which keeps its mlt.repeat).
    for (func::FuncOp func : programFunctions(module))
      if (failed(partition(func)))
        return failure();
    if (auto optimizer = module.lookupSymbol<func::FuncOp>("optimizer_step"))
      tieStages(optimizer);
    return success();
  }

private:
  ShardingAttr shardingOf(Value v) {
    if (ShardingAttr s = shardings.lookup(v))
      return s;
    unsigned rank = 0;
    if (auto type = dyn_cast<RankedTensorType>(v.getType()))
      rank = type.getRank();
    return ShardingAttr::getReplicated(module.getContext(), rank);
  }

  RankedTensorType withDim(RankedTensorType type, int64_t dim, int64_t size) {
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] = size;
    return RankedTensorType::get(shape, type.getElementType());
  }
  RankedTensorType withDim(Value v, int64_t dim, int64_t size) {
    return withDim(cast<RankedTensorType>(v.getType()), dim, size);
  }

  /// `v` (laid out as its sharding says) laid out as `to`, through the
  /// collectives Passes.td lists; shared between users.
  FailureOr<Value> reshard(Location loc, Value v, ShardingAttr to) {
    ShardingAttr from = shardingOf(v);
    if (from == to || !isa<RankedTensorType>(v.getType()))
      return v;
    if (Value cached = cache.lookup({v, to}))
      return cached;
    for (StringAttr axis : to.getPartial())
      if (!from.isPartialOver(axis.getValue()))
        return emitError(loc, "mlt-spmdize: cannot turn a value laid out as ")
               << from << " into the partial sum " << to;
    // Per dimension the axes it is split over, major first: a rank's
    // block of a dimension split over [a, b] is block c(b) of its block
    // c(a), so an axis joins or leaves a dimension's list at its minor end.
    SmallVector<ShardingAttr::DimAxes> axes;
    for (unsigned d = 0; d < from.getRank(); ++d)
      axes.push_back(from.getAxes(d));
    Value cur = v;
    auto size = [&](StringAttr axis) { return mesh.axisSize(axis); };
    auto dimSize = [&](unsigned d) {
      return cast<RankedTensorType>(cur.getType()).getDimSize(d);
    };
    // Whether `d`'s axes are those of the target's, the first `n` of them.
    auto isTargetPrefix = [&](unsigned d) {
      ShardingAttr::DimAxes want = to.getAxes(d);
      return axes[d].size() <= want.size() &&
             llvm::equal(axes[d], ArrayRef(want).take_front(axes[d].size()));
    };
    // Partial sums: a reduce-scatter where the target splits a dimension
    // over the same axis next (its current axes a prefix of the target's,
    // then this one), an all-reduce otherwise.
    for (StringAttr axis : from.getPartial()) {
      if (to.isPartialOver(axis.getValue()))
        continue;
      int64_t d = to.dimOf(axis.getValue());
      if (d >= 0 && isTargetPrefix(d) &&
          axes[d].size() < to.getAxes(d).size() &&
          to.getAxes(d)[axes[d].size()] == axis &&
          dimSize(d) % size(axis) == 0) {
        cur = ReduceScatterOp::create(b, loc,
                                      withDim(cur, d, dimSize(d) / size(axis)),
                                      cur, axis, d);
        axes[d].push_back(axis);
      } else {
        cur = AllReduceOp::create(b, loc, cur, axis);
      }
    }
    // All-to-alls, where a dimension's minor axis is the one the target
    // adds next to another dimension: the axis moves between them, each
    // rank sending (G-1)/G of its block where a gather and a slice would
    // hold G times as much.
    for (bool moved = true; moved;) {
      moved = false;
      for (unsigned d = 0; d < axes.size(); ++d) {
        if (isTargetPrefix(d) || axes[d].empty())
          continue;
        StringAttr axis = axes[d].back();
        int64_t e = to.dimOf(axis.getValue());
        if (e < 0 || e == int64_t(d) || !isTargetPrefix(e) ||
            axes[e].size() >= to.getAxes(e).size() ||
            to.getAxes(e)[axes[e].size()] != axis ||
            dimSize(e) % size(axis) != 0)
          continue;
        auto type = withDim(withDim(cur, e, dimSize(e) / size(axis)), d,
                            dimSize(d) * size(axis));
        cur = AllToAllOp::create(b, loc, type, cur, axis, e, d);
        axes[d].pop_back();
        axes[e].push_back(axis);
        moved = true;
      }
    }
    // Gathers, minor axes first, until each dimension's axes begin the
    // target's.
    for (unsigned d = 0; d < axes.size(); ++d)
      while (!isTargetPrefix(d)) {
        StringAttr axis = axes[d].pop_back_val();
        cur = AllGatherOp::create(b, loc,
                                  withDim(cur, d, dimSize(d) * size(axis)),
                                  cur, axis, d);
      }
    // Slices, for the target's axes still missing.
    for (unsigned d = 0; d < axes.size(); ++d) {
      ShardingAttr::DimAxes want = to.getAxes(d);
      for (StringAttr axis : ArrayRef(want).drop_front(axes[d].size())) {
        cur = ShardSliceOp::create(b, loc,
                                   withDim(cur, d, dimSize(d) / size(axis)),
                                   cur, axis, d);
        axes[d].push_back(axis);
      }
    }
    shardings[cur] = to;
    cache[{v, to}] = cur;
    return cur;
  }

  /// Whether `op` is an attention (or its gradient) of the all-to-all
  /// exchange (mlt.cp_comm) whose sequence is whole under a context axis:
  /// its operands, in the load-balanced order the tokens arrive in, are
  /// reordered to the natural one around it, where it is one causal
  /// attention (where the balanced order takes one per pair of chunks).
  bool attendsInNaturalOrder(Operation *op, ArrayAttr required) {
    auto context = b.getStringAttr(axisName(ParallelAxis::Context));
    auto exchange =
        op->getAttrOfType<StringAttr>(MLTDialect::getContextExchangeAttrName());
    return isa<AttentionOp, AttentionGradOp>(op) && exchange &&
           exchange.getValue() == "a2a" && required &&
           mesh.axisSize(context) > 1 &&
           cast<ShardingAttr>(required[0]).getAxes(1).empty();
  }

  /// `v`, a whole sequence (dimension 1) under the context axis, reordered
  /// to the natural order or back to the load-balanced one; a reorder's
  /// input where it undoes one, and one reorder per value and direction.
  Value reorder(Location loc, Value v, bool toNatural) {
    if (auto previous = v.getDefiningOp<ReorderSequenceOp>())
      if (previous.getToNatural() != toNatural)
        return previous.getInput();
    auto key = std::make_pair(v, Attribute(b.getBoolAttr(toNatural)));
    if (Value cached = cache.lookup(key))
      return cached;
    auto reordered = ReorderSequenceOp::create(
        b, loc, v, b.getStringAttr(axisName(ParallelAxis::Context)), 1,
        toNatural);
    shardings[reordered] = shardingOf(v);
    cache[key] = reordered;
    return reordered;
  }

  /// The global number of rows of a cross-entropy's logits.
  int64_t globalRows(Value logits, ShardingAttr sharding) {
    auto shape = cast<RankedTensorType>(logits.getType()).getShape();
    int64_t rows = 1;
    for (unsigned d = 0; d + 1 < shape.size(); ++d)
      rows *= shape[d] * sharding.blocks(d, mesh);
    return rows;
  }

  bool anySplit(ShardingAttr s) {
    for (unsigned d = 0; d < s.getRank(); ++d)
      if (!s.getAxes(d).empty())
        return true;
    return false;
  }

  /// Facts that ops whose meaning depends on the split need (Passes.td).
  LogicalResult annotateSplitOps(Operation *op, ArrayAttr required,
                                 ArrayAttr produced) {
    // The vocabulary and the positions split over one axis at most (the
    // sharding rules' factors of them); say so rather than guess.
    auto oneAxis = [&](ShardingAttr s, unsigned dim,
                       StringRef what) -> FailureOr<StringAttr> {
      ShardingAttr::DimAxes axes = s.getAxes(dim);
      if (axes.size() > 1)
        return op->emitOpError("mlt-spmdize: splits its ")
               << what << " over several mesh axes (" << s
               << "); it takes one";
      return axes.empty() ? StringAttr() : axes.front();
    };
    auto setVocab = [&](ShardingAttr s, unsigned dim) -> LogicalResult {
      FailureOr<StringAttr> axis = oneAxis(s, dim, "vocabulary");
      if (failed(axis))
        return failure();
      if (*axis)
        op->setAttr(MLTDialect::getVocabShardAttrName(), *axis);
      return success();
    };
    // Rope's sequence and attention's queries (operand 1 of attention_grad,
    // whose operand 0 is the output's gradient, laid out alike).
    if (isa<RopeOp, AttentionOp, AttentionGradOp>(op)) {
      FailureOr<StringAttr> axis =
          oneAxis(cast<ShardingAttr>(required[0]), 1, "sequence");
      if (failed(axis))
        return failure();
      // A whole sequence where the mesh splits sequences over cp is in its
      // load-balanced order: attention's queries after the all-to-all
      // exchange (its keys are the whole sequence either way).
      auto context = b.getStringAttr(axisName(ParallelAxis::Context));
      if (!*axis && mesh.axisSize(context) > 1 &&
          !attendsInNaturalOrder(op, required)) {
        if (isa<RopeOp>(op))
          return op->emitOpError("mlt-spmdize: rotates a whole sequence "
                                 "under context parallelism; its rows must "
                                 "be the rank's block of the sequence");
        *axis = context;
      }
      if (*axis)
        op->setAttr(MLTDialect::getSequenceShardAttrName(), *axis);
      return success();
    }
    if (isa<EmbeddingOp>(op))
      return setVocab(cast<ShardingAttr>(required[1]), 0);
    if (isa<EmbeddingGradOp>(op))
      return setVocab(cast<ShardingAttr>(produced[0]), 0);
    if (isa<CrossEntropyOp, CrossEntropyGradOp>(op)) {
      unsigned index = isa<CrossEntropyOp>(op) ? 0 : 1;
      auto logits = cast<ShardingAttr>(required[index]);
      if (failed(setVocab(logits, logits.getRank() - 1)))
        return failure();
      if (anySplit(logits))
        op->setAttr(MLTDialect::getRowCountAttrName(),
                    b.getI64IntegerAttr(
                        globalRows(op->getOperand(index), logits)));
    }
    return success();
  }

  /// Sums partial squared norms per set of partial axes, then all-reduces
  /// each sum once per axis: replicated gradients count once.
  void reduceNormOperands(GlobalNormOp norm) {
    SmallVector<Value> whole;
    SmallVector<std::pair<ArrayRef<StringAttr>, Value>> groups;
    SmallVector<Operation *> uncounted;
    for (Value v : norm.getSums()) {
      if (!countsInNorm(v)) {
        uncounted.push_back(v.getDefiningOp());
        continue;
      }
      ArrayRef<StringAttr> partial = shardingOf(v).getPartial();
      if (partial.empty()) {
        whole.push_back(v);
        continue;
      }
      auto it = llvm::find_if(groups, [&](auto &g) { return g.first == partial; });
      if (it == groups.end())
        groups.push_back({partial, v});
      else
        it->second = AddOp::create(b, norm.getLoc(), it->second, v);
    }
    for (auto &[partial, sum] : groups) {
      for (StringAttr axis : partial)
        sum = AllReduceOp::create(b, norm.getLoc(), sum, axis);
      whole.push_back(sum);
    }
    // A pipeline stage holds its own parameters: the stages' sums add up.
    if (module->hasAttr(MLTDialect::getStageAttrName()) &&
        mesh.axisIndex(kPipelineAxis) >= 0 && !whole.empty()) {
      Value sum = whole.front();
      for (Value v : llvm::drop_begin(whole))
        sum = AddOp::create(b, norm.getLoc(), sum, v);
      whole.assign({AllReduceOp::create(b, norm.getLoc(), sum,
                                        b.getStringAttr(kPipelineAxis))
                        .getResult()});
    }
    norm->setOperands(whole);
    for (Operation *op : uncounted)
      if (op && op->use_empty())
        op->erase();
  }

  /// The tied parameter (mlt.tied) whose gradient `load` reads, if any.
  ParamOp tiedParam(LoadGradOp load) {
    auto param = module.lookupSymbol<ParamOp>(load.getNameAttr());
    return param && param->hasAttr(MLTDialect::getTiedAttrName()) ? param
                                                                   : ParamOp();
  }

  /// Whether the sum of squares `v` counts in this rank's gradient norm:
  /// a tied parameter's only on the stage its `mlt.tied` names.
  bool countsInNorm(Value v) {
    auto sum = v.getDefiningOp<SumSquaresOp>();
    // (through the reductions that made it whole)
    Value input = sum ? sum.getInput() : Value();
    while (auto reduce = input ? input.getDefiningOp<AllReduceOp>()
                               : AllReduceOp())
      input = reduce.getInput();
    auto load = input ? input.getDefiningOp<LoadGradOp>() : LoadGradOp();
    ParamOp param = load ? tiedParam(load) : ParamOp();
    auto stage =
        module->getAttrOfType<IntegerAttr>(MLTDialect::getStageAttrName());
    return !param || !stage ||
           param->getAttrOfType<IntegerAttr>(MLTDialect::getTiedAttrName())
                   .getInt() == stage.getInt();
  }

public:
  /// The optimizer step of a pipeline stage starts by summing the gradients
  /// of tied parameters over pp (in place: every holder's copy then has the
  /// sum, added in group order, so the copies update alike), the stages
  /// between joining with zeros; one all-reduce per tied parameter, in the
  /// order of their names on every stage.
  void tieStages(func::FuncOp optimizer) {
    if (!module->hasAttr(MLTDialect::getStageAttrName()) ||
        mesh.axisIndex(kPipelineAxis) < 0)
      return;
    Block &body = optimizer.getBody().front();
    std::map<std::string, Operation *> entries; // by name: a load or a zero
    for (LoadGradOp load : llvm::to_vector(body.getOps<LoadGradOp>()))
      if (tiedParam(load))
        entries[load.getName().str()] = load;
    auto zeros = module->getAttrOfType<ArrayAttr>(
        MLTDialect::getTiedZerosAttrName());
    for (Attribute entry :
         zeros ? zeros.getValue() : ArrayRef<Attribute>()) {
      auto triple = cast<ArrayAttr>(entry);
      auto type = cast<RankedTensorType>(cast<TypeAttr>(triple[1]).getValue());
      if (auto sharding = dyn_cast<ShardingAttr>(triple[2]))
        type = RankedTensorType::get(
            sharding.localShape(type.getShape(), mesh), type.getElementType());
      b.setInsertionPointToStart(&body);
      entries[cast<StringAttr>(triple[0]).str()] = arith::ConstantOp::create(
          b, optimizer.getLoc(),
          DenseElementsAttr::get(type,
                                 b.getFloatAttr(type.getElementType(), 0.0)));
    }
    Operation *after = nullptr;
    for (auto &[name, op] : entries) {
      if (after)
        op->moveAfter(after);
      else
        op->moveBefore(&body.front());
      b.setInsertionPointAfter(op);
      Value value = op->getResult(0);
      auto sum = AllReduceOp::create(b, op->getLoc(), value,
                                     b.getStringAttr(kPipelineAxis));
      value.replaceAllUsesExcept(sum.getResult(), sum);
      after = sum;
    }
  }

private:
  LogicalResult partition(func::FuncOp func) {
    shardings.clear();
    cache.clear();
    Block &body = func.getBody().front();
    for (BlockArgument arg : body.getArguments()) {
      auto s = func.getArgAttrOfType<ShardingAttr>(
          arg.getArgNumber(), MLTDialect::getShardingAttrName());
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!s || !type)
        continue;
      if (std::optional<std::string> problem =
              s.checkFits(type.getShape(), mesh))
        return func.emitError("mlt-spmdize: argument #")
               << arg.getArgNumber() << " has a sharding that does not fit: "
               << *problem;
      shardings[arg] = s;
      arg.setType(RankedTensorType::get(s.localShape(type.getShape(), mesh),
                                        type.getElementType()));
    }
    SmallVector<Operation *> ops =
        llvm::map_to_vector(body, [](Operation &op) { return &op; });
    for (Operation *op : ops) {
      b.setInsertionPoint(op);
      auto required = op->getAttrOfType<ArrayAttr>(
          MLTDialect::getOperandShardingsAttrName());
      auto produced =
          op->getAttrOfType<ArrayAttr>(MLTDialect::getShardingAttrName());
      // The annotations come from mlt-propagate-shardings, or by hand: one
      // sharding per operand and per result, each fitting its value.
      if (required && required.size() != op->getNumOperands())
        return op->emitOpError("has ")
               << required.size() << " entries in '"
               << MLTDialect::getOperandShardingsAttrName() << "' for "
               << op->getNumOperands() << " operands";
      if (produced) {
        if (produced.size() != op->getNumResults())
          return op->emitOpError("has ")
                 << produced.size() << " entries in '"
                 << MLTDialect::getShardingAttrName() << "' for "
                 << op->getNumResults() << " results";
        for (auto [result, s] : llvm::zip(op->getResults(), produced))
          if (auto type = dyn_cast<RankedTensorType>(result.getType()))
            if (std::optional<std::string> problem =
                    cast<ShardingAttr>(s).checkFits(type.getShape(), mesh))
              return op->emitOpError("has a result sharding that does not "
                                     "fit: ")
                     << *problem;
      }
      if (required) {
        for (auto [i, want] : llvm::enumerate(required)) {
          FailureOr<Value> v = reshard(op->getLoc(), op->getOperand(i),
                                       cast<ShardingAttr>(want));
          if (failed(v))
            return failure();
          op->setOperand(i, *v);
        }
        op->removeAttr(MLTDialect::getOperandShardingsAttrName());
      }
      const bool natural = attendsInNaturalOrder(op, required);
      if (natural)
        for (OpOperand &operand : op->getOpOperands())
          operand.set(reorder(op->getLoc(), operand.get(), /*toNatural=*/true));
      if (auto shard = dyn_cast<ShardOp>(op)) {
        shard.getResult().replaceAllUsesWith(shard.getInput());
        shard.erase();
        continue;
      }
      if (auto norm = dyn_cast<GlobalNormOp>(op))
        reduceNormOperands(norm);
      if (!produced)
        continue;
      if (required && failed(annotateSplitOps(op, required, produced)))
        return failure();
      for (auto [result, s] : llvm::zip(op->getResults(), produced)) {
        auto sharding = cast<ShardingAttr>(s);
        shardings[result] = sharding;
        if (auto type = dyn_cast<RankedTensorType>(result.getType()))
          result.setType(RankedTensorType::get(
              sharding.localShape(type.getShape(), mesh),
              type.getElementType()));
      }
      if (natural) {
        b.setInsertionPointAfter(op);
        for (Value result : op->getResults()) {
          Value balanced = reorder(op->getLoc(), result, /*toNatural=*/false);
          result.replaceAllUsesExcept(balanced, balanced.getDefiningOp());
        }
      }
    }
    func.setType(FunctionType::get(
        module.getContext(), body.getArgumentTypes(),
        body.getTerminator()->getOperandTypes()));
    return success();
  }

  ModuleOp module;
  MeshAttr mesh;
  OpBuilder b;
  DenseMap<Value, ShardingAttr> shardings;
  DenseMap<std::pair<Value, Attribute>, Value> cache;
};

class MLTSpmdizePass : public mlt::impl::MLTSpmdizeBase<MLTSpmdizePass> {
public:
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto mesh = module->getAttrOfType<MeshAttr>(MLTDialect::getMeshAttrName());
    // One rank: the program is its own per-rank program, unchanged (the
    // pass manager need not verify it again).
    if (!mesh)
      return markAllAnalysesPreserved();
    if (failed(Partitioner(module, mesh).run()))
      signalPassFailure();
  }
};

} // namespace
