//===- UnrollLayers.cpp - expand mlt.repeat per layer ---------------------===//
//
// Part of mlt. Implements mlt-unroll-layers: every `mlt.repeat` becomes one
// copy of its body per layer, with the layer index a constant.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"

namespace mlt {
#define GEN_PASS_DEF_MLTUNROLLLAYERS
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

/// Replaces `repeat` by its body, cloned once per layer in order.
void unrollRepeat(RepeatOp repeat) {
  OpBuilder builder(repeat);
  Block &body = repeat.getBodyBlock();
  SmallVector<Value> carried(repeat.getInits());
  StringAttr layerAttrName =
      builder.getStringAttr(MLTDialect::getLayerAttrName());
  for (int64_t layer = repeat.getLower(); layer < repeat.getUpper(); ++layer) {
    IRMapping mapping;
    mapping.map(repeat.getLayerIndex(),
                arith::ConstantIndexOp::create(builder, repeat.getLoc(), layer)
                    .getResult());
    mapping.map(repeat.getIterArgs(), carried);
    for (Operation &op : body.without_terminator()) {
      Operation *copy = builder.clone(op, mapping);
      // Nested ops keep the attribute of the innermost repeat that unrolled them.
      if (!copy->hasAttr(layerAttrName))
        copy->setAttr(layerAttrName, builder.getI64IntegerAttr(layer));
    }
    auto yield = cast<YieldOp>(body.getTerminator());
    carried = llvm::map_to_vector(yield.getValues(), [&](Value v) {
      return mapping.lookupOrDefault(v);
    });
  }
  repeat.replaceAllUsesWith(carried);
  repeat.erase();
}

/// Unrolls every mlt.repeat in the module, innermost first.
class MLTUnrollLayersPass
    : public mlt::impl::MLTUnrollLayersBase<MLTUnrollLayersPass> {
public:
  void runOnOperation() override { unrollRepeats(getOperation()); }
};

} // namespace

void mlt::unrollRepeats(Operation *root) {
  SmallVector<RepeatOp> repeats;
  // Post-order: inner repeats come before the ones that hold them.
  root->walk([&](RepeatOp repeat) { repeats.push_back(repeat); });
  for (RepeatOp repeat : repeats)
    unrollRepeat(repeat);
}

SmallVector<func::FuncOp> mlt::programFunctions(ModuleOp module) {
  SmallVector<func::FuncOp> programs;
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal() &&
        !func.walk([](RepeatOp) { return WalkResult::interrupt(); })
             .wasInterrupted())
      programs.push_back(func);
  return programs;
}
