//===- PartitionPipeline.cpp - a model split into pipeline stages ---------===//
//
// Part of mlt. Implements mlt-partition-pipeline (Passes.td): the decoder
// layers of `@forward` split into the stages of the mesh axis `pp`, each
// stage a nested module with its parameters and its forward pass, joined to
// its neighbours by mlt.send / mlt.recv. The split comes from
// StagePartition.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/StagePartition.h"
#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace mlt {
#define GEN_PASS_DEF_MLTPARTITIONPIPELINE
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

constexpr llvm::StringLiteral kForward = "forward";
constexpr llvm::StringRef kPipelineAxis = axisName(ParallelAxis::Pipeline);
constexpr llvm::StringRef kDataAxis = axisName(ParallelAxis::Data);
constexpr llvm::StringRef kContextAxis = axisName(ParallelAxis::Context);

/// The predicted cost of the model's parts for one token, forward and
/// backward (3x the forward's FLOPs): a decoder layer's products and
/// attention, and the LM head's product. The embedding is a gather and
/// counts nothing. (A FLOP count until the cost model of
/// lib/Analysis predicts times.)
StageCosts flopCosts(LlamaConfigAttr config, int64_t seqLen) {
  const double h = double(config.getHiddenSize());
  const double heads = double(config.getNumHeads());
  const double kvHeads = double(config.getNumKvHeads());
  const double d = double(config.getHeadDim());
  const double ffn = double(config.getIntermediateSize());
  // q, k, v, o and the three MLP products; causal attention's two products
  // over half the sequence on average.
  const double products =
      2.0 * h * (heads * d + 2.0 * kvHeads * d + heads * d) + 6.0 * h * ffn;
  const double attention = 2.0 * 2.0 * heads * d * double(seqLen) / 2.0;
  StageCosts costs;
  costs.layers.assign(size_t(config.getNumLayers()),
                      3.0 * (products + attention));
  costs.last = 3.0 * 2.0 * h * double(config.getVocabSize());
  return costs;
}

/// Erases the ops of `block` that nothing uses and that have no effects
/// (what the stage does not compute), last to first.
void eraseDead(Block &block) {
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
    if (op.use_empty() && isMemoryEffectFree(&op) &&
        !op.hasTrait<OpTrait::IsTerminator>())
      op.erase();
}

} // namespace

std::vector<int64_t> mlt::pipelineStageSplit(LlamaConfigAttr config,
                                             int64_t numLayers, int64_t seqLen,
                                             llvm::ArrayRef<int64_t> given,
                                             int64_t stages, int64_t chunks,
                                             std::string &why) {
  std::vector<int64_t> split(given.begin(), given.end());
  if (!split.empty())
    return checkStageLayers(split, numLayers, stages, chunks, &why)
               ? split
               : std::vector<int64_t>{};
  StageCosts costs = flopCosts(config, seqLen);
  costs.layers.resize(size_t(numLayers), costs.layers.front());
  return balanceStages(costs, stages, chunks, &why).layers;
}

namespace {

class MLTPartitionPipelinePass
    : public mlt::impl::MLTPartitionPipelineBase<MLTPartitionPipelinePass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &message) {
      module.emitError("mlt-partition-pipeline: ") << message;
      signalPassFailure();
    };
    auto mesh = module->getAttrOfType<MeshAttr>(MLTDialect::getMeshAttrName());
    int64_t axis = mesh ? mesh.axisIndex(kPipelineAxis) : -1;
    if (axis < 0)
      return fail("the module's mesh has no axis 'pp' (run "
                  "mlt-annotate-layout with pp > 1)");
    const int64_t stages = mesh.getSizes()[axis];
    if (chunks < 1)
      return fail("chunks must be at least 1, got " + Twine(int64_t(chunks)));
    const int64_t virtualStages = stages * chunks;
    auto forward = module.lookupSymbol<func::FuncOp>(kForward);
    if (!forward)
      return fail("no function @forward to split");
    auto config =
        module->getAttrOfType<LlamaConfigAttr>(MLTDialect::getModelAttrName());
    if (!config)
      return fail("the module has no model configuration ('mlt.model')");
    SmallVector<RepeatOp> repeats(forward.getOps<RepeatOp>());
    if (repeats.size() != 1 || repeats.front().getNumResults() != 1 ||
        repeats.front().getInits().size() != 1)
      return fail("@forward must run its decoder layers as one mlt.repeat "
                  "carrying the hidden state");
    RepeatOp repeat = repeats.front();
    const int64_t first = int64_t(repeat.getLower());
    const int64_t numLayers = int64_t(repeat.getUpper()) - first;
    auto hidden = dyn_cast<RankedTensorType>(repeat.getResult(0).getType());
    if (!hidden || !hidden.hasStaticShape())
      return fail("the hidden state must have a static shape (run "
                  "mlt-specialize-shapes first)");

    // The split.
    const int64_t seqLen = hidden.getRank() > 1 ? hidden.getDimSize(1) : 1;
    std::string why;
    const std::vector<int64_t> split = pipelineStageSplit(
        config, numLayers, seqLen,
        std::vector<int64_t>(layers.begin(), layers.end()), stages, chunks,
        why);
    if (split.empty())
      return fail(why);
    StageCosts costs = flopCosts(config, seqLen);
    costs.layers.resize(size_t(numLayers), costs.layers.front());
    if (print) {
      std::vector<double> times = stageTimes(costs, split);
      double total = 0.0;
      for (double t : times)
        total += t;
      llvm::errs() << "pipeline split of " << numLayers << " layers over "
                   << stages << " stages";
      if (chunks > 1)
        llvm::errs() << " of " << chunks << " chunks (virtual stage c * "
                     << stages << " + s)";
      llvm::errs() << " (predicted share of the step's compute):\n";
      int64_t lo = first;
      for (int64_t v = 0; v < virtualStages; ++v) {
        const int64_t last = lo + split[size_t(v)] - 1;
        llvm::errs() << "  stage " << v % stages;
        if (chunks > 1)
          llvm::errs() << " chunk " << v / stages;
        llvm::errs() << ": " << (last == lo ? "layer " : "layers ") << lo;
        if (last > lo)
          llvm::errs() << "-" << last;
        llvm::errs() << (v == 0 ? " + embedding" : "")
                     << (v == virtualStages - 1 ? " + norm, LM head, loss"
                                                : "")
                     << llvm::format(", %.1f%%\n",
                                     100.0 * times[size_t(v)] / total);
        lo += split[size_t(v)];
      }
    }

    // The boundary's layout over the other axes: the residual stream's.
    SmallVector<ShardingAttr::DimAxes> boundaryAxes(hidden.getRank());
    if (mesh.axisIndex(kDataAxis) >= 0)
      boundaryAxes[0] = {StringAttr::get(&getContext(), kDataAxis)};
    if (mesh.axisIndex(kContextAxis) >= 0)
      boundaryAxes[1] = {StringAttr::get(&getContext(), kContextAxis)};
    // (sequence parallelism's: the sequence over tp, or cp then tp)
    if (auto shard = repeat.getInits()[0].getDefiningOp<ShardOp>())
      for (unsigned d = 1; d < shard.getSharding().getRank(); ++d)
        if (ShardingAttr::DimAxes a = shard.getSharding().getAxes(d);
            !a.empty())
          boundaryAxes[d] = a;
    auto layout = ShardingAttr::get(&getContext(), boundaryAxes, {});

    OpBuilder b(&getContext());
    SmallVector<Operation *> original;
    for (Operation &op : module.getBody()->getOperations())
      original.push_back(&op);
    b.setInsertionPointToEnd(module.getBody());
    int64_t lo = first;
    for (int64_t v = 0; v < virtualStages; ++v) {
      const int64_t hi = lo + split[size_t(v)];
      const int64_t s = v % stages, c = v / stages;
      auto stage = ModuleOp::create(
          b, module.getLoc(),
          (chunks > 1 ? "stage" + Twine(s) + "_chunk" + Twine(c)
                      : "stage" + Twine(s))
              .str());
      for (NamedAttribute attr : module->getAttrs())
        if (attr.getName() != SymbolTable::getSymbolAttrName())
          stage->setAttr(attr.getName(), attr.getValue());
      stage->setAttr(MLTDialect::getStageAttrName(), b.getI64IntegerAttr(s));
      if (chunks > 1)
        stage->setAttr(MLTDialect::getChunkAttrName(), b.getI64IntegerAttr(c));
      if (failed(buildStage(stage, forward, v, stages, virtualStages, lo, hi,
                            layout)))
        return signalPassFailure();
      lo = hi;
    }
    markTied(module);
    for (Operation *op : original)
      op->erase();
    // (on the whole module only: the stages copied its attributes above)
    module->setAttr(MLTDialect::getStageCostsAttrName(),
                    DenseF64ArrayAttr::get(&getContext(),
                                           stageTimes(costs, split)));
  }

private:
  /// A parameter that several stages read (tied embeddings: the first
  /// stage's embedding, the last's LM head) gets `mlt.tied` on each copy,
  /// naming the first such stage (the one whose gradient norm counts it);
  /// the stages between, which do not hold it, list it in
  /// `mlt.tied_zeros` to join the sum of its gradient over pp with zeros.
  void markTied(ModuleOp module) {
    SmallVector<ModuleOp> stages(module.getOps<ModuleOp>());
    llvm::StringMap<SmallVector<ParamOp>> holders;
    for (ModuleOp stage : stages)
      for (ParamOp param : stage.getOps<ParamOp>())
        if (!param.isPerLayer()) // (a family's stages hold other layers)
          holders[param.getSymName()].push_back(param);
    Builder b(&getContext());
    SmallVector<std::pair<std::string, ParamOp>> tied;
    for (auto &entry : holders)
      if (entry.second.size() > 1)
        tied.push_back({entry.first().str(), entry.second.front()});
    llvm::sort(tied, [](auto &x, auto &y) { return x.first < y.first; });
    auto stageOf = [](Operation *op) {
      return op->getAttrOfType<IntegerAttr>(MLTDialect::getStageAttrName())
          .getInt();
    };
    for (ModuleOp stage : stages) {
      SmallVector<Attribute> zeros;
      for (auto &[name, first] : tied) {
        SmallVector<ParamOp> &copies = holders[name];
        auto firstStage = first->getParentOfType<ModuleOp>()
                              ->getAttrOfType<IntegerAttr>(
                                  MLTDialect::getStageAttrName());
        bool holds = false, rankHolds = false;
        for (ParamOp copy : copies) {
          auto holder = copy->getParentOfType<ModuleOp>();
          if (holder == stage) {
            copy->setAttr(MLTDialect::getTiedAttrName(), firstStage);
            holds = true;
          }
          rankHolds |= stageOf(holder) == stageOf(stage);
        }
        // Interleaved: a stage's ranks join once, with the chunk that holds
        // the parameter, or else with their first chunk.
        auto chunk =
            stage->getAttrOfType<IntegerAttr>(MLTDialect::getChunkAttrName());
        if (holds || rankHolds || (chunk && chunk.getInt() != 0))
          continue;
        Attribute sharding =
            first->getAttr(MLTDialect::getShardingAttrName());
        zeros.push_back(b.getArrayAttr(
            {b.getStringAttr(name), TypeAttr::get(first.getType()),
             sharding ? sharding : Attribute(b.getUnitAttr())}));
      }
      if (!zeros.empty())
        stage->setAttr(MLTDialect::getTiedZerosAttrName(),
                       b.getArrayAttr(zeros));
    }
  }

  /// Virtual stage `v`'s module: its forward pass over layers [lo, hi) and
  /// the parameters it reads. Its ranks are stage v % stages on `pp`: the
  /// previous virtual stage is one rank back, or the last rank for the
  /// first stage's chunks after the first (interleaved), and the next one
  /// rank on, or the first rank.
  LogicalResult buildStage(ModuleOp stage, func::FuncOp source, int64_t v,
                           int64_t stages, int64_t virtualStages, int64_t lo,
                           int64_t hi, ShardingAttr layout) {
    const int64_t s = v % stages;
    OpBuilder b(&getContext());
    b.setInsertionPointToEnd(stage.getBody());
    auto func = cast<func::FuncOp>(b.clone(*source));
    Block &body = func.getBody().front();
    RepeatOp repeat = *func.getOps<RepeatOp>().begin();
    repeat.setLower(uint64_t(lo));
    repeat.setUpper(uint64_t(hi));
    auto axis = b.getStringAttr(kPipelineAxis);
    Value hidden = repeat.getResult(0);
    if (v > 0) {
      b.setInsertionPoint(repeat);
      auto recv = RecvOp::create(b, repeat.getLoc(), hidden.getType(), axis,
                                 b.getI64IntegerAttr(s > 0 ? -1 : stages - 1),
                                 layout);
      repeat->setOperand(0, recv);
    }
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    if (v + 1 < virtualStages) {
      b.setInsertionPoint(ret);
      SendOp::create(b, repeat.getLoc(), hidden, axis,
                     b.getI64IntegerAttr(s + 1 < stages ? 1 : 1 - stages),
                     layout);
      func::ReturnOp::create(b, ret.getLoc());
      ret.erase();
      func.setType(b.getFunctionType(func.getArgumentTypes(), {}));
    }
    eraseDead(body);

    // The parameters it reads, per-layer families cut to [lo, hi).
    llvm::StringSet<llvm::MallocAllocator> used;
    func.walk([&](LoadOp load) { used.insert(load.getName()); });
    b.setInsertionPointToStart(stage.getBody());
    auto parent = stage->getParentOfType<ModuleOp>();
    for (ParamOp param : parent.getOps<ParamOp>()) {
      if (!used.contains(param.getSymName()))
        continue;
      auto copy = cast<ParamOp>(b.clone(*param));
      if (copy.isPerLayer()) {
        copy.setLayers(hi);
        if (lo > 0)
          copy.setFirstLayer(lo);
      }
    }
    return success();
  }
};

} // namespace
