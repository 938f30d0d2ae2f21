//===- MergeChunks.cpp - an interleaved stage's model chunks as one module -===//
//
// Part of mlt. Implements mlt-merge-chunks (Passes.td): the lowered modules
// of one pipeline stage's model chunks (mlt-partition-pipeline with
// `chunks` > 1) merged into one module per stage, each chunk's bodies and
// temporaries renamed `c<chunk>.`, one optimizer step whose gradient norm
// sums every chunk's.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/PlanFormat.h"

#include <map>

namespace mlt {
#define GEN_PASS_DEF_MLTMERGECHUNKS
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;
namespace abi = mlt::rt;

namespace {

/// Whether two buffers of one name, from two chunks, are one buffer (the
/// step's inputs and outputs, the hyperparameters): the same attributes.
bool sameBuffer(rtir::BufferOp a, rtir::BufferOp b) {
  return a->getAttrDictionary() == b->getAttrDictionary();
}

/// The end of a chunk's optimizer step: the all-reduce over `pp` of its
/// stages' sum of squared gradients, the norm of the sum, the clipping
/// coefficient from the norm; the launches before it (the sums of squares)
/// and after it (the updates).
struct NormTail {
  SmallVector<rtir::LaunchOp> before, tail, after;
  /// The sum the all-reduce reads, and the coefficient the updates read.
  StringAttr sum, coefficient;
};

FailureOr<NormTail> splitAtNorm(rtir::ProgramOp optimizer) {
  SmallVector<rtir::LaunchOp> launches(
      optimizer.getBody().getOps<rtir::LaunchOp>());
  auto fail = [&](const Twine &why) {
    optimizer.emitError("mlt-merge-chunks: @")
        << optimizer.getSymName() << " " << why;
    return failure();
  };
  auto at = llvm::find_if(launches, [](rtir::LaunchOp launch) {
    return launch.getKernel() ==
           StringRef(rt::kernelName(rt::attrs::GlobalNorm::kernel));
  });
  if (at == launches.end() || at == launches.begin() ||
      at + 1 == launches.end())
    return fail("has no gradient norm between a reduction and a clipping "
                "coefficient");
  const size_t norm = size_t(at - launches.begin());
  rtir::LaunchOp reduce = launches[norm - 1], clip = launches[norm + 1];
  auto name = [](Attribute ref) {
    return cast<FlatSymbolRefAttr>(ref).getAttr();
  };
  if (reduce.getKernel() !=
          StringRef(rt::kernelName(rt::attrs::AllReduceSum::kernel)) ||
      launches[norm].getInputs().size() != 1 ||
      name(reduce.getOutputs()[0]) != name(launches[norm].getInputs()[0]) ||
      clip.getKernel() !=
          StringRef(rt::kernelName(rt::attrs::ClipCoefficient::kernel)))
    return fail("does not end its gradient norm with an all-reduce over pp, "
                "the norm and the clipping coefficient");
  NormTail out;
  out.before.assign(launches.begin(), launches.begin() + (norm - 1));
  out.tail.assign(launches.begin() + (norm - 1), launches.begin() + norm + 2);
  out.after.assign(launches.begin() + norm + 2, launches.end());
  out.sum = name(reduce.getInputs()[0]);
  out.coefficient = name(clip.getOutputs()[0]);
  return out;
}

class MLTMergeChunksPass
    : public mlt::impl::MLTMergeChunksBase<MLTMergeChunksPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Each stage's chunk modules, by chunk.
    std::map<int64_t, std::map<int64_t, ModuleOp>> stages;
    for (ModuleOp nested : llvm::to_vector(module.getOps<ModuleOp>())) {
      auto stage =
          nested->getAttrOfType<IntegerAttr>(MLTDialect::getStageAttrName());
      auto chunk =
          nested->getAttrOfType<IntegerAttr>(MLTDialect::getChunkAttrName());
      if (!stage || !chunk)
        continue;
      if (!stages[stage.getInt()].emplace(chunk.getInt(), nested).second) {
        nested.emitError("mlt-merge-chunks: two modules hold chunk ")
            << chunk.getInt() << " of stage " << stage.getInt();
        return signalPassFailure();
      }
    }
    for (auto &[stage, chunks] : stages) {
      int64_t expected = 0;
      for (auto &[chunk, nested] : chunks)
        if (chunk != expected++) {
          nested.emitError("mlt-merge-chunks: stage ")
              << stage << " has chunk " << chunk << " but no chunk "
              << expected - 1;
          return signalPassFailure();
        }
      if (failed(merge(module, stage, chunks)))
        return signalPassFailure();
    }
  }

private:
  /// Merges `chunks` (chunk number to module, all of stage `stage`) into
  /// one module `@stage<stage>` put where chunk 0's was.
  LogicalResult merge(ModuleOp module, int64_t stage,
                      std::map<int64_t, ModuleOp> &chunks) {
    MLIRContext *context = module.getContext();
    OpBuilder b(context);
    ModuleOp first = chunks.begin()->second;
    b.setInsertionPoint(first);
    auto merged = ModuleOp::create(b, first.getLoc(),
                                   ("stage" + Twine(stage)).str());
    for (NamedAttribute attr : first->getAttrs())
      if (attr.getName() != SymbolTable::getSymbolAttrName() &&
          attr.getName() != MLTDialect::getChunkAttrName())
        merged->setAttr(attr.getName(), attr.getValue());
    merged->setAttr(MLTDialect::getChunksAttrName(),
                    b.getI64IntegerAttr(int64_t(chunks.size())));
    Block *body = merged.getBody();
    auto microbatchesOf = [](ModuleOp m) {
      return m->getAttr("mlt_rt.microbatches");
    };

    // Buffers first (those of one name from several chunks once), then the
    // chunks' programs; the optimizer steps and the copies' refreshes are
    // merged at the end.
    llvm::StringMap<rtir::BufferOp> buffers;
    SmallVector<rtir::ProgramOp> programs;
    SmallVector<NormTail> tails;
    rtir::ProgramOp refresh;
    for (auto &[chunk, nested] : chunks) {
      if (microbatchesOf(nested) != microbatchesOf(first))
        return nested.emitError("mlt-merge-chunks: the chunks of stage ")
               << stage << " run different numbers of micro-batches";
      const std::string prefix = "c" + std::to_string(chunk) + ".";
      DenseMap<StringAttr, StringAttr> renamed;
      for (auto buffer : nested.getOps<rtir::BufferOp>())
        if (buffer.getKind() == rtir::BufferKind::temporary ||
            buffer.getKind() == rtir::BufferKind::constant)
          renamed[buffer.getSymNameAttr()] =
              b.getStringAttr(prefix + buffer.getSymName());
      for (auto program : nested.getOps<rtir::ProgramOp>())
        if (program.getSymName() != abi::kOptimizerStepProgram &&
            program.getSymName() != abi::kRefreshCopiesProgram)
          renamed[program.getSymNameAttr()] =
              b.getStringAttr(prefix + program.getSymName());
      for (Operation &op : llvm::make_early_inc_range(*nested.getBody())) {
        if (auto buffer = dyn_cast<rtir::BufferOp>(op)) {
          if (auto it = renamed.find(buffer.getSymNameAttr());
              it != renamed.end())
            buffer.setSymNameAttr(it->second);
          for (StringRef ref : {"view", "layout"})
            if (auto attr = buffer->getAttrOfType<FlatSymbolRefAttr>(ref))
              if (auto it = renamed.find(attr.getAttr()); it != renamed.end())
                buffer->setAttr(ref, FlatSymbolRefAttr::get(it->second));
          auto [it, inserted] =
              buffers.try_emplace(buffer.getSymName(), buffer);
          if (!inserted) {
            if (!sameBuffer(it->second, buffer))
              return buffer.emitError("mlt-merge-chunks: chunks of stage ")
                     << stage << " declare buffer @" << buffer.getSymName()
                     << " differently";
            buffer.erase();
            continue;
          }
          buffer->moveBefore(body, body->end());
          continue;
        }
        auto program = dyn_cast<rtir::ProgramOp>(op);
        if (!program)
          return op.emitError("mlt-merge-chunks: a lowered chunk module "
                              "holds only buffers and programs");
        renameLaunchOperands(program, renamed);
        if (program.getSymName() == abi::kOptimizerStepProgram) {
          FailureOr<NormTail> tail = splitAtNorm(program);
          if (failed(tail))
            return failure();
          tails.push_back(std::move(*tail));
          programs.push_back(program);
          continue;
        }
        if (program.getSymName() == abi::kRefreshCopiesProgram) {
          if (!refresh) {
            refresh = program;
            program->moveBefore(body, body->end());
            continue;
          }
          Block &into = refresh.getBody().front();
          for (auto launch : llvm::to_vector(
                   program.getBody().getOps<rtir::LaunchOp>()))
            launch->moveBefore(&into, into.end());
          program.erase();
          continue;
        }
        program.setSymNameAttr(renamed.lookup(program.getSymNameAttr()));
        program->moveBefore(body, body->end());
      }
    }
    if (tails.empty())
      return merged.emitError("mlt-merge-chunks: stage ")
             << stage << " has no optimizer step";
    mergeOptimizers(merged, programs, tails, b);
    for (auto &[chunk, nested] : chunks)
      nested.erase();
    // Buffers first, in order, as mlt-lower-to-runtime leaves them: those
    // after the first program move before it. (In one walk: a move
    // invalidates the block's op order, which isBeforeInBlock would then
    // recompute for every buffer.)
    Operation *firstProgram = nullptr;
    for (Operation &op : llvm::make_early_inc_range(*body)) {
      if (!firstProgram && isa<rtir::ProgramOp>(op))
        firstProgram = &op;
      else if (firstProgram && isa<rtir::BufferOp>(op))
        op.moveBefore(firstProgram);
    }
    return success();
  }

  /// One optimizer step for the stage: every chunk's sums of squares, their
  /// sum, one all-reduce of it over `pp`, the norm and the clipping
  /// coefficient (chunk 0's launches), then every chunk's updates, all
  /// reading that coefficient.
  static void mergeOptimizers(ModuleOp merged,
                              ArrayRef<rtir::ProgramOp> optimizers,
                              MutableArrayRef<NormTail> tails, OpBuilder &b) {
    Location loc = merged.getLoc();
    Block *body = merged.getBody();
    b.setInsertionPointToEnd(body);
    auto program =
        rtir::ProgramOp::create(b, loc, abi::kOptimizerStepProgram);
    Block &block = program.getBody().emplaceBlock();
    for (NormTail &tail : tails)
      for (rtir::LaunchOp launch : tail.before)
        launch->moveBefore(&block, block.end());
    // The chunks' sums of squares added in chunk order, into scalars put
    // with the stage's other buffers.
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    StringAttr sum = tails.front().sum;
    rtir::BufferOp lastBuffer;
    for (auto buffer : body->getOps<rtir::BufferOp>())
      lastBuffer = buffer;
    for (size_t c = 1; c < tails.size(); ++c) {
      b.setInsertionPointAfter(lastBuffer);
      auto total = rtir::BufferOp::create(
          b, loc, b.getStringAttr("norm_sum.c" + Twine(c)),
          rtir::BufferKindAttr::get(b.getContext(),
                                    rtir::BufferKind::temporary),
          TypeAttr::get(scalar), IntegerAttr(), IntegerAttr(), IntegerAttr(),
          StringAttr(), UnitAttr(), FloatAttr(), FlatSymbolRefAttr(),
          IntegerAttr(), StringAttr(), IntegerAttr(), FlatSymbolRefAttr(),
          UnitAttr(), UnitAttr(), /*step_kept=*/UnitAttr());
      lastBuffer = total;
      b.setInsertionPointToEnd(&block);
      using A = rt::attrs::Add;
      rtir::LaunchOp::create(
          b, loc, rt::kernelName(A::kernel),
          {FlatSymbolRefAttr::get(sum), FlatSymbolRefAttr::get(tails[c].sum)},
          {FlatSymbolRefAttr::get(total.getSymNameAttr())},
          rt::kernelInts<A>({{A::n, 1}}));
      sum = total.getSymNameAttr();
    }
    NormTail &head = tails.front();
    head.tail.front().setInputsAttr(
        b.getArrayAttr({FlatSymbolRefAttr::get(sum)}));
    for (rtir::LaunchOp launch : head.tail)
      launch->moveBefore(&block, block.end());
    for (NormTail &tail : tails)
      for (rtir::LaunchOp launch : tail.after)
        launch->moveBefore(&block, block.end());
    // The updates all read chunk 0's coefficient.
    DenseMap<StringAttr, StringAttr> coefficient;
    for (NormTail &tail : tails)
      coefficient[tail.coefficient] = head.coefficient;
    renameLaunchOperands(program, coefficient);
    for (rtir::ProgramOp optimizer : optimizers)
      optimizer.erase();
    // The other chunks' norm launches read and write buffers nothing else
    // does: drop those.
    DenseSet<StringAttr> used;
    merged.walk([&](rtir::LaunchOp launch) {
      for (ArrayAttr refs : {launch.getInputs(), launch.getOutputs()})
        for (Attribute ref : refs)
          used.insert(cast<FlatSymbolRefAttr>(ref).getAttr());
    });
    for (auto buffer :
         llvm::make_early_inc_range(merged.getOps<rtir::BufferOp>()))
      if (buffer.getKind() == rtir::BufferKind::temporary &&
          !used.contains(buffer.getSymNameAttr()))
        buffer.erase();
  }
};

} // namespace
