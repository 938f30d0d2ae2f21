//===- AnnotateLayout.cpp - Megatron's layout as sharding annotations -----===//
//
// Part of mlt. Implements mlt-annotate-layout (Passes.td): the mesh, the
// parameters' shardings (recognized by their HF names), the batch split of
// @forward's arguments and the sequence-parallel constraints on the residual
// stream, from which mlt-propagate-shardings derives the whole layout.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"

namespace mlt {
#define GEN_PASS_DEF_MLTANNOTATELAYOUT
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

constexpr llvm::StringLiteral kForward = "forward";
// The mesh's axes, by the layout's table (mlt/Layout/Layout.h).
constexpr llvm::StringRef kTensorAxis = axisName(ParallelAxis::Tensor);
constexpr llvm::StringRef kDataAxis = axisName(ParallelAxis::Data);
constexpr llvm::StringRef kContextAxis = axisName(ParallelAxis::Context);

/// How a weight matrix of a LLaMA layer is split over `tp` ([out, in] as in
/// HF checkpoints): the dimension split, or -1 for whole.
int64_t tensorParallelDim(StringRef name) {
  if (!name.ends_with(".weight"))
    return -1;
  StringRef module = LoadOp::getShortParamName(name);
  // Column-parallel: output features split; the vocabulary of the
  // embedding table and the LM head.
  if (llvm::is_contained({"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj",
                          "embed_tokens", "lm_head"},
                         module))
    return 0;
  // Row-parallel: input features split.
  if (llvm::is_contained({"o_proj", "down_proj"}, module))
    return 1;
  return -1;
}

/// A sharding with every dimension `fill` except `dim`, split over `axis`.
ShardingAttr shardingWith(MLIRContext *context, unsigned rank, unsigned dim,
                          StringRef axis, StringRef fill) {
  SmallVector<StringAttr> dims(rank, StringAttr::get(context, fill));
  dims[dim] = StringAttr::get(context, axis);
  return ShardingAttr::get(context, dims, {});
}

class MLTAnnotateLayoutPass
    : public mlt::impl::MLTAnnotateLayoutBase<MLTAnnotateLayoutPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    if (failed(annotate(getOperation())))
      signalPassFailure();
  }

private:
  LogicalResult annotate(ModuleOp module) {
    MLIRContext *context = module.getContext();
    if (tp < 1 || dp < 1 || pp < 1 || cp < 1)
      return module.emitError("mlt-annotate-layout: pp, tp, dp and cp must "
                              "be at least 1, got pp=")
             << static_cast<int64_t>(pp) << " tp=" << static_cast<int64_t>(tp)
             << " dp=" << static_cast<int64_t>(dp)
             << " cp=" << static_cast<int64_t>(cp);
    if (sequenceParallel && tp == 1)
      return module.emitError("mlt-annotate-layout: sequence-parallel splits "
                              "the sequence over tp and needs tp > 1");
    if (cpComm != "allgather" && cpComm != "a2a" && cpComm != "ring")
      return module.emitError("mlt-annotate-layout: cp-comm must be "
                              "allgather, a2a or ring, got '")
             << cpComm << "'";
    if (cpComm != "allgather" && cp == 1)
      return module.emitError("mlt-annotate-layout: cp-comm ")
             << cpComm
             << " exchanges the blocks of a sequence split over cp and "
                "needs cp > 1";
    // The axes in the layout's rank order (parallelAxes: tp last, so that
    // tensor-parallel ranks are adjacent, and pp first, so that a pipeline
    // stage's ranks are); those of size 1 left out.
    auto sizeOf = [&](ParallelAxis axis) -> int64_t {
      switch (axis) {
      case ParallelAxis::Pipeline:
        return pp;
      case ParallelAxis::Data:
        return dp;
      case ParallelAxis::Context:
        return cp;
      case ParallelAxis::Tensor:
        return tp;
      }
      return 1;
    };
    SmallVector<StringAttr> axes;
    SmallVector<int64_t> sizes;
    for (const ParallelAxisInfo &axis : parallelAxes())
      if (sizeOf(axis.axis) > 1) {
        axes.push_back(StringAttr::get(context, axis.name));
        sizes.push_back(sizeOf(axis.axis));
      }
    if (axes.empty())
      return success(); // One rank: nothing to lay out.
    if (module->hasAttr(MLTDialect::getMeshAttrName()))
      return module.emitError("mlt-annotate-layout: the module already has "
                              "a layout ('")
             << MLTDialect::getMeshAttrName() << "')";
    module->setAttr(MLTDialect::getMeshAttrName(),
                    MeshAttr::get(context, axes, sizes));

    if (tp > 1)
      for (ParamOp param : module.getOps<ParamOp>()) {
        int64_t dim = tensorParallelDim(param.getSymName());
        if (dim < 0)
          continue;
        if (param.getTensorType().getRank() != 2)
          return param.emitOpError("mlt-annotate-layout: expected a matrix "
                                   "for a tensor-parallel weight, got ")
                 << param.getTensorType();
        param->setAttr(MLTDialect::getShardingAttrName(),
                       shardingWith(context, 2, dim, kTensorAxis,
                                    ShardingAttr::kReplicated));
      }

    if (dp == 1 && cp == 1 && !sequenceParallel)
      return success();
    auto forward = module.lookupSymbol<func::FuncOp>(kForward);
    if (!forward)
      return module.emitError("mlt-annotate-layout: no function @")
             << kForward << " to lay out";

    // The batch of the tokens and the labels split over dp, their sequence
    // over cp.
    if (dp > 1 || cp > 1)
      for (BlockArgument arg : forward.getArguments()) {
        auto type = dyn_cast<RankedTensorType>(arg.getType());
        if (!type || type.getRank() != 2)
          return forward.emitError("mlt-annotate-layout: argument #")
                 << arg.getArgNumber() << " of @" << kForward
                 << " must be [batch, seq] token ids, got " << arg.getType();
        auto axisOr = [&](int64_t size, StringRef axis) {
          return StringAttr::get(context, size > 1 ? axis
                                                   : StringRef(ShardingAttr::kReplicated));
        };
        SmallVector<StringAttr> dims = {axisOr(dp, kDataAxis),
                                        axisOr(cp, kContextAxis)};
        forward.setArgAttr(arg.getArgNumber(),
                           MLTDialect::getShardingAttrName(),
                           ShardingAttr::get(context, dims, {}));
      }

    // The all-to-all exchange (DeepSpeed's Ulysses): each attention marked,
    // for propagation to move cp from its sequence to its heads. The ring:
    // marked for mlt-ring-attention, which replaces the gather.
    if (cpComm != "allgather")
      forward.walk([&](AttentionOp attention) {
        attention->setAttr(MLTDialect::getContextExchangeAttrName(),
                           StringAttr::get(context, cpComm));
      });

    // The residual stream, [batch, seq, hidden], split along the sequence
    // over tp; under context parallelism over cp then tp (each cp block of
    // the sequence in tp blocks, so that sequence parallelism's all-gather
    // over tp gives back the rank's cp block); the other dimensions left to
    // propagation.
    if (sequenceParallel) {
      SmallVector<StringAttr, 2> sequenceAxes;
      if (cp > 1)
        sequenceAxes.push_back(StringAttr::get(context, kContextAxis));
      sequenceAxes.push_back(StringAttr::get(context, kTensorAxis));
      SmallVector<Value> residual;
      forward.walk([&](Operation *op) {
        if (isa<EmbeddingOp, AddOp>(op))
          residual.push_back(op->getResult(0));
      });
      OpBuilder b(context);
      for (Value v : residual) {
        auto type = cast<RankedTensorType>(v.getType());
        if (type.getRank() < 2)
          return v.getDefiningOp()->emitOpError(
                     "mlt-annotate-layout: expected a [batch, seq, ...] "
                     "residual stream, got ")
                 << type;
        b.setInsertionPointAfterValue(v);
        SmallVector<ShardingAttr::DimAxes> dims(type.getRank());
        SmallVector<bool> open(type.getRank(), true);
        dims[1] = ShardingAttr::DimAxes(sequenceAxes);
        open[1] = false;
        auto shard = ShardOp::create(
            b, v.getLoc(), v, ShardingAttr::get(context, dims, {}, open));
        v.replaceAllUsesExcept(shard.getResult(), shard);
      }
    }
    return success();
  }
};

} // namespace
