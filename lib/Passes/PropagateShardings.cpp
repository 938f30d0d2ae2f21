//===- PropagateShardings.cpp - shardings for every value -----------------===//
//
// Part of mlt. Implements mlt-propagate-shardings (Passes.td says what it
// computes and in which order conflicts are resolved): hints per dimension
// with a priority, sweeps over the ops' sharding rules until nothing changes,
// then one pass in program order that fixes each op's result and operand
// shardings from its factors.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLExtras.h"

#include <map>

namespace mlt {
#define GEN_PASS_DEF_MLTPROPAGATESHARDINGS
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

constexpr llvm::StringRef kContextAxis = axisName(ParallelAxis::Context);

/// Who decided a dimension's axis; lower wins (Passes.td, "Algorithm").
enum Priority : int { kParameter = 0, kUser = 1, kPropagated = 2, kNone = 3 };

using Axes = ShardingAttr::DimAxes;

/// A value's sharding while propagation runs: per dimension its axes, major
/// first (empty: open), and the priority of whoever set them. Replicated is
/// decided only at the end (open dimensions become replicated) or by an
/// annotation (`-`), recorded as `closed`.
struct Hint {
  SmallVector<Axes> axes;
  SmallVector<int> priority;
  SmallVector<bool> closed;

  bool uses(StringAttr axis) const {
    return llvm::any_of(axes, [&](const Axes &dim) {
      return llvm::is_contained(dim, axis);
    });
  }
};

/// The axes of every dimension of `sharding`.
SmallVector<Axes> dimAxes(ShardingAttr sharding) {
  return llvm::map_to_vector(llvm::seq<unsigned>(0, sharding.getRank()),
                             [&](unsigned d) { return sharding.getAxes(d); });
}

ArrayRef<int64_t> shapeOf(Value v) {
  if (auto type = dyn_cast<RankedTensorType>(v.getType()))
    return type.getShape();
  return {};
}

/// The factor that decides a dimension's split: its first factor of size > 1.
int majorFactor(const ShardingRule &rule, const ShardingRule::Dim &dim) {
  for (int f : dim)
    if (rule.factorSizes[f] > 1)
      return f;
  return -1;
}

class Propagator {
public:
  Propagator(ModuleOp module, MeshAttr mesh) : module(module), mesh(mesh) {}

  LogicalResult run() {
    if (failed(readParameters()))
      return failure();
    // Functions in module order (@micro_step before @optimizer_step, whose
    // gradients it accumulates); a model's @forward with its mlt.repeat is
    // the input of mlt-autodiff, not a program that runs.
    for (func::FuncOp func : programFunctions(module))
      if (failed(propagate(func)))
        return failure();
    return success();
  }

private:
  //===--------------------------------------------------------------------===//
  // Annotations
  //===--------------------------------------------------------------------===//

  ShardingAttr replicated(Value v) {
    return ShardingAttr::getReplicated(module.getContext(), shapeOf(v).size());
  }

  LogicalResult readParameters() {
    for (ParamOp param : module.getOps<ParamOp>()) {
      auto sharding = param->getAttrOfType<ShardingAttr>(
          MLTDialect::getShardingAttrName());
      if (!sharding) {
        params[param.getSymName()] = ShardingAttr::getReplicated(
            module.getContext(), param.getTensorType().getRank());
        continue;
      }
      if (std::optional<std::string> error =
              sharding.checkFits(param.getTensorType().getShape(), mesh))
        return param.emitError("sharding of parameter @")
               << param.getSymName() << " does not fit: " << *error;
      if (!sharding.getPartial().empty())
        return param.emitError("parameter @")
               << param.getSymName() << " cannot be a partial sum";
      // The optimizer's partitioner and the checkpoints' blocks take one
      // axis per dimension of a parameter.
      if (sharding.hasMultiAxisDim())
        return param.emitError("parameter @")
               << param.getSymName() << " splits a dimension over several "
               << "mesh axes, which parameters do not yet: " << sharding;
      // `?` on a parameter means whole: parameters are laid out by the user.
      params[param.getSymName()] =
          ShardingAttr::get(module.getContext(), dimAxes(sharding), {});
    }
    return success();
  }

  Hint &hint(Value v) {
    auto [it, inserted] = hints.try_emplace(v);
    if (inserted) {
      size_t rank = shapeOf(v).size();
      it->second.axes.assign(rank, Axes());
      it->second.priority.assign(rank, kNone);
      it->second.closed.assign(rank, false);
    }
    return it->second;
  }

  /// The longest prefix of `axes` that `fits`: each axis in turn accepted
  /// and the product of their sizes dividing `size`.
  template <typename Fits>
  Axes usablePrefix(ArrayRef<StringAttr> axes, int64_t size, Fits fits) {
    Axes prefix;
    int64_t blocks = 1;
    for (StringAttr axis : axes) {
      blocks *= mesh.axisSize(axis);
      if (!fits(axis) || size % blocks != 0)
        break;
      prefix.push_back(axis);
    }
    return prefix;
  }

  /// Sets dimension `d` of `v` to the longest prefix of `axes` whose axes
  /// are free in `v` and divide the dimension, if it is open. Returns
  /// whether it changed.
  bool setDim(Value v, unsigned d, ArrayRef<StringAttr> axes, int priority) {
    Hint &h = hint(v);
    if (!h.axes[d].empty() || h.closed[d])
      return false;
    Axes prefix = usablePrefix(axes, shapeOf(v)[d],
                               [&](StringAttr axis) { return !h.uses(axis); });
    if (prefix.empty())
      return false;
    h.axes[d] = prefix;
    h.priority[d] = priority;
    return true;
  }

  /// Seeds `v` with a sharding: axes set, `-` closed, `?` left open.
  void seed(Value v, ShardingAttr sharding, int priority) {
    Hint &h = hint(v);
    for (unsigned d = 0; d < sharding.getRank(); ++d) {
      if (Axes axes = sharding.getAxes(d); !axes.empty())
        setDim(v, d, axes, priority);
      else if (!sharding.isOpen(d) && h.axes[d].empty())
        h.closed[d] = true;
    }
  }

  /// The sharding parameter state op `op` names.
  ShardingAttr parameterSharding(Operation *op) {
    auto name = op->getAttrOfType<FlatSymbolRefAttr>("name");
    return params.lookup(name.getValue());
  }

  /// The HF name of the parameter tensor a state op names (its layer
  /// included), which keys the gradient's accumulated partial axes.
  std::string stateKey(Operation *op) {
    auto name = op->getAttrOfType<FlatSymbolRefAttr>("name");
    std::string key = name.getValue().str();
    if (op->getNumOperands() > 0 && op->getOperand(0).getType().isIndex())
      if (auto c = op->getOperand(0).getDefiningOp<arith::ConstantIndexOp>())
        key += "#" + std::to_string(c.value());
    return key;
  }

  /// The layout of a pipeline transfer's value: the one it declares, else
  /// whole on every rank.
  ShardingAttr transferLayout(Value v, ShardingAttr layout) {
    return layout ? layout : replicated(v);
  }

  LogicalResult seedFunction(func::FuncOp func) {
    for (BlockArgument arg : func.getArguments()) {
      auto sharding = func.getArgAttrOfType<ShardingAttr>(
          arg.getArgNumber(), MLTDialect::getShardingAttrName());
      if (!sharding)
        continue;
      if (std::optional<std::string> error =
              sharding.checkFits(shapeOf(arg), mesh))
        return func.emitError("sharding of argument #")
               << arg.getArgNumber() << " ("
               << (arg.getArgNumber() == 0 ? "tokens" : "labels") << ") of @"
               << func.getSymName() << " does not fit: " << *error;
      seed(arg, sharding, kUser);
    }
    WalkResult result = func.walk([&](Operation *op) -> WalkResult {
      if (isa<LoadOp, LoadGradOp>(op))
        seed(op->getResult(0), parameterSharding(op), kParameter);
      else if (auto acc = dyn_cast<AccumulateGradOp>(op))
        seed(acc.getValue(), parameterSharding(op), kParameter);
      else if (auto adam = dyn_cast<AdamWOp>(op))
        seed(adam.getGrad(), parameterSharding(op), kParameter);
      else if (auto shard = dyn_cast<ShardOp>(op)) {
        if (std::optional<std::string> error =
                shard.getSharding().checkFits(shapeOf(shard.getInput()), mesh))
          return shard.emitOpError("sharding does not fit: ") << *error,
                 WalkResult::interrupt();
        seed(shard.getResult(), shard.getSharding(), kUser);
      } else if (auto send = dyn_cast<SendOp>(op)) {
        seed(send.getInput(), transferLayout(send.getInput(), send.getLayoutAttr()), kUser);
      } else if (auto recv = dyn_cast<RecvOp>(op)) {
        seed(recv.getResult(), transferLayout(recv.getResult(), recv.getLayoutAttr()), kUser);
      }
      return WalkResult::advance();
    });
    return failure(result.wasInterrupted());
  }

  //===--------------------------------------------------------------------===//
  // Factors
  //===--------------------------------------------------------------------===//

  /// Chooses the axes of each factor of `op` from the axes its values
  /// carry, in priority order (results before operands at equal priority):
  /// the longest prefix of a proposal whose axes no other factor took and
  /// the factor accepts. `axisOf` gives the axes and priority of a value's
  /// dimension.
  template <typename AxisOf>
  SmallVector<Axes> assignFactors(Operation *op, const ShardingRule &rule,
                                  AxisOf axisOf,
                                  ArrayRef<StringAttr> excluded = {}) {
    struct Proposal {
      int priority, order, factor;
      Axes axes;
    };
    SmallVector<Proposal> proposals;
    int order = 0;
    auto collect = [&](ValueRange values, ArrayRef<ShardingRule::Tensor> dims) {
      for (auto [v, tensor] : llvm::zip(values, dims))
        for (auto [d, dim] : llvm::enumerate(tensor)) {
          auto [axes, priority] = axisOf(v, d);
          int f = majorFactor(rule, dim);
          if (!axes.empty() && f >= 0)
            proposals.push_back({priority, order, f, axes});
          ++order;
        }
    };
    collect(op->getResults(), rule.results);
    collect(op->getOperands(), rule.operands);
    llvm::stable_sort(proposals, [](const Proposal &a, const Proposal &b) {
      return std::tie(a.priority, a.order) < std::tie(b.priority, b.order);
    });
    SmallVector<Axes> factorAxis(rule.numFactors());
    auto taken = [&](StringAttr axis) {
      return llvm::is_contained(excluded, axis) ||
             llvm::any_of(factorAxis, [&](const Axes &axes) {
               return llvm::is_contained(axes, axis);
             });
    };
    for (const Proposal &p : proposals) {
      if (rule.needsWhole[p.factor] || !factorAxis[p.factor].empty())
        continue;
      // A sequence of positions splits over the context axis alone: its
      // blocks are the load-balanced chunks the op knows the positions of.
      const bool sequence = rule.sequence[p.factor];
      factorAxis[p.factor] = usablePrefix(
          p.axes, rule.factorSizes[p.factor], [&](StringAttr axis) {
            return !taken(axis) &&
                   (!sequence || (axis.getValue() == kContextAxis &&
                                  axis == p.axes.front()));
          });
    }
    return factorAxis;
  }

  /// An attention marked for the all-to-all exchange (mlt.cp_comm =
  /// "a2a"): the context axis moved from its sequence factor to the minor
  /// end of its key/value-head factor (its query heads are those times the
  /// group), which must divide by it. Only in the final pass: the sweeps
  /// lay out everything around attention with the sequence split.
  LogicalResult exchangeContextForHeads(Operation *op, const ShardingRule &rule,
                                        SmallVectorImpl<Axes> &factorAxis) {
    auto exchange =
        op->getAttrOfType<StringAttr>(MLTDialect::getContextExchangeAttrName());
    if (!isa<AttentionOp, AttentionGradOp>(op) || !exchange ||
        exchange.getValue() != "a2a")
      return success();
    auto isContext = [](StringAttr axis) {
      return axis.getValue() == kContextAxis;
    };
    int heads = -1;
    for (int f = 0; f < rule.numFactors(); ++f) {
      if (rule.sequence[f])
        llvm::erase_if(factorAxis[f], isContext);
      // The key/value heads: the major factor of the queries' heads.
      if (heads < 0 && rule.operands.size() > 1 &&
          rule.operands[0].size() == 4 && !rule.operands[0][2].empty() &&
          rule.operands[0][2].front() == f)
        heads = f;
    }
    auto context = StringAttr::get(module.getContext(), kContextAxis);
    if (heads < 0 || mesh.axisSize(context) < 2 ||
        llvm::any_of(factorAxis[heads], isContext))
      return success();
    int64_t blocks = mesh.axisSize(context);
    for (StringAttr axis : factorAxis[heads])
      blocks *= mesh.axisSize(axis);
    if (rule.factorSizes[heads] % blocks != 0)
      return op->emitOpError("mlt-propagate-shardings: the all-to-all "
                             "exchange splits its ")
             << rule.factorSizes[heads] << " key/value heads into " << blocks
             << " blocks, which do not divide them";
    factorAxis[heads].push_back(context);
    return success();
  }

  /// One visit of `op` during the sweeps: fills open dimensions of its values
  /// from its factors. Returns whether anything changed.
  bool visit(Operation *op) {
    auto ruled = dyn_cast<ShardingRuleOpInterface>(op);
    if (!ruled)
      return false;
    ShardingRule rule = ruled.getShardingRule();
    SmallVector<Axes> factorAxis =
        assignFactors(op, rule, [&](Value v, unsigned d) {
          Hint &h = hint(v);
          return std::make_pair(h.axes[d], h.priority[d]);
        });
    bool changed = false;
    auto fill = [&](ValueRange values, ArrayRef<ShardingRule::Tensor> dims) {
      for (auto [v, tensor] : llvm::zip(values, dims))
        for (auto [d, dim] : llvm::enumerate(tensor)) {
          int f = majorFactor(rule, dim);
          if (f >= 0 && !factorAxis[f].empty())
            changed |= setDim(v, d, factorAxis[f], kPropagated);
        }
    };
    fill(op->getResults(), rule.results);
    fill(op->getOperands(), rule.operands);
    return changed;
  }

  //===--------------------------------------------------------------------===//
  // Final shardings
  //===--------------------------------------------------------------------===//

  ShardingAttr makeSharding(ArrayRef<Axes> dims,
                            ArrayRef<StringAttr> partial) {
    MLIRContext *context = module.getContext();
    SmallVector<StringAttr> sortedPartial(partial);
    // Partial axes in mesh order, so equal sets print and compare equal.
    llvm::sort(sortedPartial, [&](StringAttr a, StringAttr b) {
      return mesh.axisIndex(a.getValue()) < mesh.axisIndex(b.getValue());
    });
    ShardingAttr sharding = ShardingAttr::get(context, dims, sortedPartial);
    assert(succeeded(ShardingAttr::verify(
               [&] { return module.emitError(); }, sharding.getDims(),
               sortedPartial)) &&
           "propagation built an invalid sharding");
    return sharding;
  }

  ShardingAttr hintSharding(Value v) {
    Hint &h = hint(v);
    return makeSharding(h.axes, {});
  }

  /// The tensor `dims` of a rule laid out by `factorAxis`.
  SmallVector<Axes> axesOf(const ShardingRule &rule,
                           const ShardingRule::Tensor &tensor,
                           ArrayRef<Axes> factorAxis) {
    SmallVector<Axes> axes;
    for (const ShardingRule::Dim &dim : tensor) {
      int f = majorFactor(rule, dim);
      axes.push_back(f >= 0 ? factorAxis[f] : Axes());
    }
    return axes;
  }

  /// Fixes the shardings of `op`'s results and the ones it needs of its
  /// operands (in program order: operands are final).
  LogicalResult finalize(Operation *op) {
    SmallVector<Attribute> results, operands;
    auto operandAs = [&](Value v) -> ShardingAttr {
      return isa<RankedTensorType>(v.getType()) ? final.lookup(v)
                                                : ShardingAttr::getReplicated(module.getContext(), 0);
    };
    if (isa<LoadOp, LoadGradOp>(op)) {
      ShardingAttr param = parameterSharding(op);
      SmallVector<StringAttr> partial;
      if (isa<LoadGradOp>(op))
        partial = gradPartial[stateKey(op)];
      results.push_back(makeSharding(dimAxes(param), partial));
    } else if (isa<AccumulateGradOp>(op)) {
      // Its requirement is set once every contribution is known.
      accumulations.push_back(cast<AccumulateGradOp>(op));
      return success();
    } else if (auto adam = dyn_cast<AdamWOp>(op)) {
      for (Value v : op->getOperands())
        operands.push_back(v == adam.getGrad() ? parameterSharding(op)
                                               : replicated(v));
    } else if (auto shard = dyn_cast<ShardOp>(op)) {
      ShardingAttr in = final.lookup(shard.getInput());
      ShardingAttr want = shard.getSharding();
      SmallVector<Axes> axes = dimAxes(want);
      auto used = [&](StringAttr axis) {
        return llvm::is_contained(want.getPartial(), axis) ||
               llvm::any_of(axes, [&](const Axes &dim) {
                 return llvm::is_contained(dim, axis);
               });
      };
      // An open dimension keeps the input's axes where none is used.
      for (unsigned d = 0; d < want.getRank(); ++d)
        if (want.isOpen(d) && !in.getAxes(d).empty() &&
            llvm::none_of(in.getAxes(d), used))
          axes[d] = in.getAxes(d);
      ShardingAttr out = makeSharding(axes, want.getPartial());
      results.push_back(out);
      operands.push_back(out);
    } else if (auto send = dyn_cast<SendOp>(op)) {
      // A pipeline transfer moves the block each rank holds, laid out as
      // both ends declare.
      operands.push_back(
          transferLayout(send.getInput(), send.getLayoutAttr()));
    } else if (auto recv = dyn_cast<RecvOp>(op)) {
      results.push_back(
          transferLayout(recv.getResult(), recv.getLayoutAttr()));
    } else if (isa<GlobalNormOp>(op)) {
      // Partial squared norms are summed by the partitioner before the norm.
      for (Value v : op->getOperands())
        operands.push_back(operandAs(v));
      results.push_back(replicated(op->getResult(0)));
    } else if (isa<func::ReturnOp>(op)) {
      for (Value v : op->getOperands())
        operands.push_back(replicated(v));
    } else if (auto ruled = dyn_cast<ShardingRuleOpInterface>(op)) {
      ShardingRule rule = ruled.getShardingRule();
      // Partial sums pass through a linear op whose operands agree on them.
      SmallVector<StringAttr> passedPartial;
      if (rule.linear) {
        ArrayRef<StringAttr> first = operandAs(op->getOperand(0)).getPartial();
        if (!first.empty() &&
            llvm::all_of(op->getOperands(), [&](Value v) {
              return operandAs(v).getPartial() == first;
            }))
          passedPartial.assign(first.begin(), first.end());
      }
      SmallVector<Axes> factorAxis = assignFactors(
          op, rule, [&](Value v, unsigned d) -> std::pair<Axes, int> {
            Hint &h = hint(v);
            ShardingAttr s = final.lookup(v);
            if (!s)
              return {h.axes[d], h.priority[d]};
            // A final sharding keeps the priority of the hint it came from.
            Axes axes = s.getAxes(d);
            return {axes, !axes.empty() && axes == h.axes[d]
                              ? h.priority[d]
                              : int(kPropagated)};
          },
          // An axis the operands are partial over cannot also split a
          // dimension of the partial result.
          passedPartial);
      if (failed(exchangeContextForHeads(op, rule, factorAxis)))
        return failure();
      for (auto [v, tensor] : llvm::zip(op->getOperands(), rule.operands))
        operands.push_back(makeSharding(axesOf(rule, tensor, factorAxis),
                                        isa<RankedTensorType>(v.getType()) &&
                                                rule.linear
                                            ? passedPartial
                                            : SmallVector<StringAttr>()));
      for (auto [r, tensor] : llvm::enumerate(rule.results)) {
        SmallVector<StringAttr> partial(passedPartial);
        for (int f = 0; f < rule.numFactors(); ++f)
          if (!rule.reducedInternally[f] && !rule.resultHasFactor(r, f))
            partial.append(factorAxis[f].begin(), factorAxis[f].end());
        results.push_back(
            makeSharding(axesOf(rule, tensor, factorAxis), partial));
      }
    } else if (op->getNumResults() > 0 &&
               llvm::any_of(op->getResultTypes(),
                            [](Type t) { return isa<RankedTensorType>(t); })) {
      if (!isa<arith::ConstantOp>(op))
        return op->emitOpError("has no sharding rule (ShardingRuleOpInterface)");
      results.push_back(replicated(op->getResult(0)));
    }

    for (auto [v, s] : llvm::zip(op->getResults(), results))
      final[v] = cast<ShardingAttr>(s);
    if (!results.empty())
      op->setAttr(MLTDialect::getShardingAttrName(),
                  ArrayAttr::get(module.getContext(), results));
    if (!operands.empty())
      op->setAttr(MLTDialect::getOperandShardingsAttrName(),
                  ArrayAttr::get(module.getContext(), operands));
    return success();
  }

  /// A gradient buffer accumulates what all its contributions have in
  /// common: partial over the axes every contribution is partial over.
  /// Contributions partial over more are reduced before they are added.
  void finalizeAccumulations() {
    std::map<std::string, SmallVector<StringAttr>> common;
    for (AccumulateGradOp acc : accumulations) {
      ArrayRef<StringAttr> partial = final.lookup(acc.getValue()).getPartial();
      auto [it, inserted] = common.try_emplace(
          stateKey(acc), SmallVector<StringAttr>(partial));
      if (!inserted)
        llvm::erase_if(it->second, [&](StringAttr a) {
          return !llvm::is_contained(partial, a);
        });
    }
    for (AccumulateGradOp acc : accumulations) {
      SmallVector<Axes> axes = dimAxes(parameterSharding(acc));
      SmallVector<Attribute> operands;
      for (Value v : acc->getOperands())
        operands.push_back(
            v == acc.getValue()
                ? Attribute(makeSharding(axes, common[stateKey(acc)]))
                : Attribute(ShardingAttr::getReplicated(module.getContext(), 0)));
      acc->setAttr(MLTDialect::getOperandShardingsAttrName(),
                   ArrayAttr::get(module.getContext(), operands));
    }
    for (auto &[key, partial] : common)
      gradPartial[key] = partial;
    accumulations.clear();
  }

  LogicalResult propagate(func::FuncOp func) {
    hints.clear();
    final.clear();
    if (failed(seedFunction(func)))
      return failure();
    Block &body = func.getBody().front();
    SmallVector<Operation *> ops =
        llvm::map_to_vector(body, [](Operation &op) { return &op; });
    // Each change sets an open dimension, so this ends.
    for (bool changed = true; changed;) {
      changed = false;
      for (Operation *op : ops)
        changed |= visit(op);
      for (Operation *op : llvm::reverse(ops))
        changed |= visit(op);
    }
    for (BlockArgument arg : func.getArguments()) {
      if (!isa<RankedTensorType>(arg.getType()))
        continue;
      final[arg] = hintSharding(arg);
      func.setArgAttr(arg.getArgNumber(), MLTDialect::getShardingAttrName(),
                      final[arg]);
    }
    for (Operation *op : ops)
      if (failed(finalize(op)))
        return failure();
    finalizeAccumulations();
    return success();
  }

  ModuleOp module;
  MeshAttr mesh;
  llvm::StringMap<ShardingAttr> params;
  DenseMap<Value, Hint> hints;
  DenseMap<Value, ShardingAttr> final;
  SmallVector<AccumulateGradOp> accumulations;
  /// Per parameter tensor: the axes its gradient buffer is partial over.
  std::map<std::string, SmallVector<StringAttr>> gradPartial;
};

class MLTPropagateShardingsPass
    : public mlt::impl::MLTPropagateShardingsBase<MLTPropagateShardingsPass> {
public:
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto mesh =
        module->getAttrOfType<MeshAttr>(MLTDialect::getMeshAttrName());
    if (!mesh) {
      // Without a mesh every value is whole; annotations are an error.
      bool annotated = false;
      module.walk([&](Operation *op) {
        if (op->hasAttr(MLTDialect::getShardingAttrName()) || isa<ShardOp>(op))
          annotated = true;
      });
      if (annotated) {
        module.emitError("mlt-propagate-shardings: the module has shardings "
                         "but no mesh; add mlt.mesh = #mlt.mesh<...>");
        return signalPassFailure();
      }
      // Nothing changed: the pass manager need not verify the module again.
      return markAllAnalysesPreserved();
    }
    if (failed(Propagator(module, mesh).run()))
      signalPassFailure();
  }
};

} // namespace
