//===- ScheduleOverlap.cpp - gradient reductions under the backward pass --===//
//
// Part of mlt. Implements mlt-schedule-overlap (Passes.td): the optimizer
// step's leading reductions of gradients (in-place all-reduces, or
// reduce-scatters of flat gradient buckets) move into a copy
// of the body that the step calls for its last micro-batch, each bucket of
// them on the gradient-reduction stream right after its gradients are done,
// ordered by a token.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/GradientBuckets.h"
#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Plan/PlanFormat.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

namespace mlt {
#define GEN_PASS_DEF_MLTSCHEDULEOVERLAP
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;
namespace abi = mlt::rt;

namespace {

/// The gradient buffer that `launch` reduces over a mesh axis, if it is
/// such a reduction: an in-place all_reduce_sum of a gradient, or the
/// reduce_scatter_sum of a flat gradient bucket into a rank's slice of it
/// (mlt-partition-optimizer's).
std::optional<StringRef>
reducedGradient(rtir::LaunchOp launch,
                function_ref<rtir::BufferOp(StringRef)> buffers) {
  if ((launch.getKernel() != "all_reduce_sum" &&
       launch.getKernel() != "reduce_scatter_sum") ||
      launch.getInputs().size() != 1 || launch.getOutputs().size() != 1)
    return std::nullopt;
  StringRef name = rtir::bufferName(launch.getInputs()[0]);
  rtir::BufferOp buffer = buffers(name);
  if (!buffer || buffer.getKind() != rtir::BufferKind::gradient)
    return std::nullopt;
  StringRef output = rtir::bufferName(launch.getOutputs()[0]);
  if (launch.getKernel() == "all_reduce_sum" && output == name)
    return name;
  rtir::BufferOp slice = buffers(output);
  if (launch.getKernel() == "reduce_scatter_sum" && buffer.getBucket() &&
      slice && slice.getView() == name && slice.getShardAttr())
    return name;
  return std::nullopt;
}

/// Whether `launch` all-gathers a rank's slice of a flat parameter bucket
/// back into the bucket (mlt-partition-optimizer's), and if so the bucket.
std::optional<StringRef>
gatheredBucket(rtir::LaunchOp launch,
               function_ref<rtir::BufferOp(StringRef)> buffers) {
  if (launch.getKernel() != "all_gather" || launch.getInputs().size() != 1 ||
      launch.getOutputs().size() != 1)
    return std::nullopt;
  StringRef name = rtir::bufferName(launch.getOutputs()[0]);
  rtir::BufferOp bucket = buffers(name);
  rtir::BufferOp slice = buffers(rtir::bufferName(launch.getInputs()[0]));
  if (!bucket || !bucket.getBucket() || !slice || slice.getView() != name ||
      !slice.getShardAttr())
    return std::nullopt;
  return name;
}

/// Whether `launch` takes a reduce-scattered ZeRO-2 slice into the rank's
/// gradient slice: adds it (accumulate) or, in bf16, widens it (cast).
bool isSliceFollower(rtir::LaunchOp launch) {
  return launch.getKernel() == "accumulate" || launch.getKernel() == "cast";
}

/// Whether `launch` continues a reduce-scatter over several axes (ZeRO
/// over dp x cp): it reduce-scatters, over the next axis, the rank's slice
/// of a bucket over the axes so far (a view with a shard) that the
/// previous level wrote.
bool isScatterContinuation(rtir::LaunchOp launch,
                           function_ref<rtir::BufferOp(StringRef)> buffers) {
  if (launch.getKernel() != "reduce_scatter_sum" ||
      launch.getInputs().size() != 1 || launch.getOutputs().size() != 1)
    return false;
  rtir::BufferOp input = buffers(rtir::bufferName(launch.getInputs()[0]));
  return input && input.getView() && input.getShardAttr();
}

class Scheduler {
public:
  Scheduler(ModuleOp module, int64_t bucketBytes, bool gradients,
            bool parameters)
      : module(module), b(module.getContext()), bucketBytes(bucketBytes),
        gradients(gradients), parameters(parameters) {}

  LogicalResult run() {
    if (gradients &&
        (failed(scheduleReductions()) || failed(scheduleBodyReductions())))
      return failure();
    if (parameters && failed(scheduleGathers()))
      return failure();
    return success();
  }

  /// Whether run() changed the module (nothing to move leaves it as it
  /// was).
  bool changedModule() const { return changed; }

private:
  /// The module's training step.
  FailureOr<rtir::StepOp> theStep() {
    rtir::StepOp step = rtir::trainingStep(module);
    if (!step)
      return module.emitError("mlt-schedule-overlap: expected the training "
                              "step, mlt_rt.step @")
             << rtir::kTrainingStepName << " (run mlt-schedule-pipeline first)";
    return step;
  }

  /// The module's buffers by name, and the last of them: read on first use
  /// (a module without collectives to move never needs them), and again
  /// after refreshBuffers.
  llvm::StringMap<rtir::BufferOp> &bufferMap() {
    if (stale) {
      buffers.clear();
      for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>()) {
        buffers[buffer.getSymName()] = buffer;
        lastBuffer = buffer;
      }
      stale = false;
    }
    return buffers;
  }
  rtir::BufferOp bufferNamed(StringRef name) {
    return bufferMap().lookup(name);
  }
  /// Reads the buffers again when next needed (a scheduling step may have
  /// erased some with the programs it made uncalled).
  void refreshBuffers() { stale = true; }

  /// The gradient reductions under the last micro-batch's backward pass.
  LogicalResult scheduleReductions() {
    auto optimizer =
        module.lookupSymbol<rtir::ProgramOp>(abi::kOptimizerStepProgram);
    if (!optimizer)
      return success();
    for (const char *name :
         {abi::kMicroStepLastProgram, abi::kMicroStepOnlyProgram,
          abi::kBackwardLastProgram, abi::kBackwardOnlyProgram})
      if (module.lookupSymbol(name))
        return module.emitError("mlt-schedule-overlap: the module has @")
               << name << " already";
    FailureOr<rtir::StepOp> step = theStep();
    if (failed(step))
      return failure();
    // The optimizer step's reductions of whole gradients, before anything
    // else there touches them; not those over the pipeline axis (a tied
    // parameter's, between stages whose last backward passes come at
    // different points of the step: they stay where every stage issues
    // them in one order).
    auto mesh = module->getAttrOfType<MeshAttr>(MLTDialect::getMeshAttrName());
    const int64_t pipelineAxis = mesh ? mesh.axisIndex(MLTDialect::getPipelineAxisName()) : -1;
    SmallVector<rtir::LaunchOp> reductions;
    llvm::DenseSet<StringRef> touched;
    for (auto launch : optimizer.getBody().getOps<rtir::LaunchOp>()) {
      std::optional<StringRef> gradient = reducedGradient(
          launch, [&](StringRef name) { return bufferNamed(name); });
      if (gradient && pipelineAxis >= 0 &&
          launch.getInts().size() == 2 && launch.getInts()[1] == pipelineAxis)
        gradient = std::nullopt;
      if (gradient && !touched.contains(*gradient) && launch.isPlain())
        reductions.push_back(launch);
      for (ArrayAttr list : {launch.getInputs(), launch.getOutputs()})
        for (Attribute ref : list)
          touched.insert(rtir::bufferName(ref));
    }
    if (reductions.empty())
      return success();
    // An interleaved stage (mlt-merge-chunks): each chunk's reductions go
    // under its own last backward pass, its programs named `c<chunk>.`.
    int64_t chunks = 1;
    if (auto attr =
            module->getAttrOfType<IntegerAttr>(MLTDialect::getChunksAttrName()))
      chunks = attr.getInt();
    // Each chunk's reductions and the call of its last micro-batch, all
    // found before any moves (moving erases the optimizer step's launches).
    struct Chunk {
      std::string prefix;
      rtir::CallOp last;
      SmallVector<rtir::LaunchOp> reductions;
    };
    SmallVector<Chunk> perChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      Chunk &chunk = perChunk.emplace_back();
      chunk.prefix = chunks > 1 ? "c" + std::to_string(c) + "." : "";
      // The gradients the chunk's programs write.
      llvm::DenseSet<StringRef> written;
      for (auto program : module.getOps<rtir::ProgramOp>())
        if (program.getSymName().starts_with(chunk.prefix) &&
            program.getSymName() != abi::kOptimizerStepProgram)
          program.walk([&](rtir::LaunchOp launch) {
            for (Attribute ref : launch.getOutputs())
              written.insert(rtir::bufferName(ref));
          });
      // (With one chunk, every reduction: one of a gradient that nothing
      // writes goes at the start of the copy.)
      for (rtir::LaunchOp launch : reductions)
        if (chunks == 1 ||
            written.contains(rtir::bufferName(launch.getInputs()[0])))
          chunk.reductions.push_back(launch);
      // The step's call of the chunk's last micro-batch (the last call with
      // one that computes: a pipeline stage's transfers come after it).
      for (auto call : step->getBody().getOps<rtir::CallOp>())
        if (call.getMicrobatchAttr() && call.hasWork() &&
            call.getProgram().starts_with(chunk.prefix))
          chunk.last = call;
    }
    for (Chunk &chunk : perChunk)
      if (chunk.last && !chunk.reductions.empty() &&
          failed(reduceUnder(chunk.last, chunk.prefix, chunk.reductions)))
        return failure();
    // A step of one micro-batch no longer calls its original body.
    changed = true; // (erasing may change it too)
    eraseUncalledPrograms(module);
    return success();
  }

  /// Moves `reductions` (taken from the optimizer step) under the backward
  /// pass of a copy of the body that `last` calls, named for the last
  /// micro-batch (`prefix` + `backward_last`, ...), which `last` then calls.
  LogicalResult reduceUnder(rtir::CallOp last, StringRef prefix,
                            ArrayRef<rtir::LaunchOp> reductions) {
    changed = true;
    auto body = module.lookupSymbol<rtir::ProgramOp>(last.getProgramAttr());
    // The copy's name: the body's for the last (or the only) micro-batch.
    static constexpr std::pair<const char *, const char *> kCopies[] = {
        {abi::kMicroStepProgram, abi::kMicroStepLastProgram},
        {abi::kMicroStepFirstProgram, abi::kMicroStepOnlyProgram},
        {abi::kBackwardProgram, abi::kBackwardLastProgram},
        {abi::kBackwardFirstProgram, abi::kBackwardOnlyProgram},
        {abi::kBackwardWeightProgram, abi::kBackwardWeightLastProgram},
        {abi::kBackwardWeightFirstProgram, abi::kBackwardWeightOnlyProgram}};
    std::string copyName;
    for (auto [from, to] : kCopies)
      if (body.getSymName() == (prefix + from).str())
        copyName = (prefix + to).str();
    if (copyName.empty())
      return module.emitError("mlt-schedule-overlap: the step's last "
                              "micro-batch calls @")
             << body.getSymName() << ", expected @" << prefix
             << abi::kMicroStepProgram << ", @" << prefix
             << abi::kMicroStepFirstProgram << ", @" << prefix
             << abi::kBackwardProgram << ", @" << prefix
             << abi::kBackwardFirstProgram
             << " or their weight-gradient passes";

    rtir::ProgramOp copy = cloneProgram(body, copyName);
    if (failed(schedule(copy, reductions)))
      return failure();
    last.setProgramAttr(FlatSymbolRefAttr::get(copy.getSymNameAttr()));
    for (rtir::LaunchOp reduction : reductions)
      reduction.erase();
    return success();
  }

  /// ZeRO-2's reductions, with which the body of each micro-batch ends
  /// (mlt-partition-optimizer): the in-place all-reduces of gradients over
  /// other axes and each bucket's reduce-scatter move under the body's
  /// backward pass, as the optimizer step's do under the last
  /// micro-batch's; the accumulate (or, for a bf16 slice of a step's one
  /// micro-batch, the cast) of each reduce-scattered slice into the rank's
  /// gradient slice stays at the body's end, on the compute stream, waiting
  /// for its reduce-scatter's token.
  LogicalResult scheduleBodyReductions() {
    refreshBuffers();
    for (rtir::ProgramOp program :
         llvm::make_early_inc_range(module.getOps<rtir::ProgramOp>())) {
      if (program.getSymName() == abi::kOptimizerStepProgram)
        continue;
      SmallVector<rtir::LaunchOp> launches(
          program.getBody().getOps<rtir::LaunchOp>());
      // The trailing run of plain reductions, each reduce-scatter with its
      // followers: the levels after its first over several axes, then the
      // accumulate (or cast) of its slice.
      auto named = [&](StringRef name) { return bufferNamed(name); };
      SmallVector<rtir::LaunchOp> reductions;
      llvm::DenseMap<Operation *, SmallVector<rtir::LaunchOp>> followers;
      size_t start = launches.size();
      while (start > 0) {
        rtir::LaunchOp launch = launches[start - 1];
        if (!launch.isPlain())
          break;
        if ((isSliceFollower(launch) || isScatterContinuation(launch, named)) &&
            start >= 2 &&
            launches[start - 2].getKernel() == "reduce_scatter_sum" &&
            rtir::bufferName(launches[start - 2].getOutputs()[0]) ==
                rtir::bufferName(launch.getInputs()[0])) {
          --start;
          continue;
        }
        if ((launch.getKernel() != "all_reduce_sum" &&
             launch.getKernel() != "reduce_scatter_sum") ||
            launch.getInputs().size() != 1 || launch.getOutputs().size() != 1)
          break;
        StringRef input = rtir::bufferName(launch.getInputs()[0]);
        rtir::BufferOp buffer = bufferNamed(input);
        bool inPlace = launch.getKernel() == "all_reduce_sum" && buffer &&
                       input == rtir::bufferName(launch.getOutputs()[0]) &&
                       buffer.getView();
        bool scatter = launch.getKernel() == "reduce_scatter_sum" && buffer &&
                       buffer.getBucket();
        if (!inPlace && !scatter)
          break;
        --start;
      }
      rtir::LaunchOp head;
      for (size_t i = start; i < launches.size(); ++i) {
        rtir::LaunchOp launch = launches[i];
        rtir::BufferOp input =
            bufferNamed(rtir::bufferName(launch.getInputs()[0]));
        const bool headScatter = launch.getKernel() == "reduce_scatter_sum" &&
                                 input && input.getBucket();
        if (head && !headScatter && launch.getKernel() != "all_reduce_sum") {
          followers[head].push_back(launch);
          continue;
        }
        if (launch.getKernel() == "reduce_scatter_sum" && !headScatter)
          break; // not ZeRO-2's
        reductions.push_back(launch);
        head = launch;
      }
      if (llvm::none_of(reductions, [](rtir::LaunchOp launch) {
            return launch.getKernel() == "reduce_scatter_sum";
          }))
        continue;
      changed = true;
      if (failed(schedule(program, reductions, followers)))
        return failure();
      for (rtir::LaunchOp reduction : reductions) {
        for (rtir::LaunchOp follower : followers.lookup(reduction))
          follower.erase();
        reduction.erase();
      }
    }
    return success();
  }

  /// The all-gathers of updated parameter buckets, from the end of the
  /// optimizer step to the start of the next step's first micro-batch
  /// (the forward pass of micro-batch 0), each on the parameter stream,
  /// and the first launch there that touches a bucket waiting for its
  /// gather's token; with an evaluation step, also to a program of their
  /// own that it calls first.
  LogicalResult scheduleGathers() {
    auto optimizer =
        module.lookupSymbol<rtir::ProgramOp>(abi::kOptimizerStepProgram);
    if (!optimizer)
      return success();
    // The reductions' scheduling may have erased buffers with programs.
    refreshBuffers();
    // The trailing gathers: nothing after one touches its bucket or slice.
    SmallVector<rtir::LaunchOp> gathers;
    llvm::DenseSet<StringRef> touchedLater;
    SmallVector<rtir::LaunchOp> launches(
        optimizer.getBody().getOps<rtir::LaunchOp>());
    for (rtir::LaunchOp launch : llvm::reverse(launches)) {
      std::optional<StringRef> bucket = gatheredBucket(
          launch, [&](StringRef name) { return bufferNamed(name); });
      if (bucket && launch.isPlain() && !touchedLater.contains(*bucket) &&
          !touchedLater.contains(rtir::bufferName(launch.getInputs()[0])))
        gathers.insert(gathers.begin(), launch);
      for (ArrayAttr list : {launch.getInputs(), launch.getOutputs()})
        for (Attribute ref : list)
          touchedLater.insert(rtir::bufferName(ref));
    }
    if (gathers.empty())
      return success();
    FailureOr<rtir::StepOp> step = theStep();
    if (failed(step))
      return failure();
    rtir::CallOp first;
    unsigned calls = 0;
    for (auto call : step->getBody().getOps<rtir::CallOp>())
      if (call.getMicrobatchAttr() && call.hasWork() && !first)
        first = call; // (a pipeline stage's receives come before it)
    if (!first)
      return success();
    changed = true;
    for (auto call : step->getBody().getOps<rtir::CallOp>())
      calls += call.getProgram() == first.getProgram();
    auto body = module.lookupSymbol<rtir::ProgramOp>(first.getProgramAttr());
    // A body that other calls run too gets a copy of its own.
    if (calls > 1) {
      std::string name = (body.getSymName() + "_gather").str();
      if (module.lookupSymbol(name))
        return module.emitError("mlt-schedule-overlap: the module has @")
               << name << " already";
      body = cloneProgram(body, name);
      first.setProgramAttr(FlatSymbolRefAttr::get(body.getSymNameAttr()));
    }

    // Where each bucket (or a view of it) is first touched in the body.
    llvm::StringMap<StringRef> baseOf;
    for (auto &entry : bufferMap())
      if (FlatSymbolRefAttr base = entry.second.getViewAttr())
        baseOf[entry.first()] = base.getValue();
    SmallVector<rtir::LaunchOp> bodyLaunches(
        body.getBody().getOps<rtir::LaunchOp>());
    llvm::StringMap<int64_t> firstUse;
    int64_t nextToken = 0;
    for (auto [position, launch] : llvm::enumerate(bodyLaunches)) {
      for (ArrayAttr list : {launch.getInputs(), launch.getOutputs()})
        for (Attribute ref : list) {
          StringRef name = rtir::bufferName(ref);
          StringRef bucket = baseOf.lookup(name);
          firstUse.try_emplace(bucket.empty() ? name : bucket,
                               int64_t(position));
        }
      if (std::optional<int64_t> token = launch.getToken())
        nextToken = std::max(nextToken, *token + 1);
    }
    // Gathered in the order the body needs them; those it never touches
    // last (the body's end joins every stream).
    auto needed = [&](rtir::LaunchOp gather) {
      auto it = firstUse.find(rtir::bufferName(gather.getOutputs()[0]));
      return it == firstUse.end() ? int64_t(bodyLaunches.size()) : it->second;
    };
    llvm::stable_sort(gathers, [&](rtir::LaunchOp a, rtir::LaunchOp b) {
      return needed(a) < needed(b);
    });
    // An evaluation between two steps reads the parameters that the next
    // step's first forward pass would gather: the evaluation step gathers
    // them first, the same launches on the compute stream (the next step
    // gathers them again, the same bytes).
    if (rtir::StepOp evaluation = rtir::evalStep(module)) {
      if (module.lookupSymbol(abi::kEvalGatherProgram))
        return module.emitError("mlt-schedule-overlap: the module has @")
               << abi::kEvalGatherProgram << " already";
      b.setInsertionPointAfter(optimizer);
      auto program = rtir::ProgramOp::create(b, optimizer.getLoc(),
                                             abi::kEvalGatherProgram);
      b.setInsertionPointToStart(&program.getBody().emplaceBlock());
      for (rtir::LaunchOp gather : gathers)
        b.clone(*gather);
      b.setInsertionPointToStart(&evaluation.getBody().front());
      rtir::CallOp::create(
          b, evaluation.getLoc(),
          FlatSymbolRefAttr::get(program.getSymNameAttr()), IntegerAttr(),
          IntegerAttr(), b.getDenseI64ArrayAttr({}));
    }
    Block &block = body.getBody().front();
    b.setInsertionPointToStart(&block);
    for (rtir::LaunchOp gather : gathers) {
      auto copy = cast<rtir::LaunchOp>(b.clone(*gather));
      copy.setStreamAttr(b.getI64IntegerAttr(abi::kParameterGatherStream));
      int64_t position = needed(gather);
      if (position < int64_t(bodyLaunches.size())) {
        copy.setTokenAttr(b.getI64IntegerAttr(nextToken));
        rtir::LaunchOp user = bodyLaunches[position];
        SmallVector<int64_t> waits(user.getWaits());
        waits.push_back(nextToken++);
        user.setWaits(waits);
      }
      gather.erase();
    }
    return success();
  }

  /// A copy of `source` named `name`, right after it, whose temporaries are
  /// copies of source's (each program owns its temporaries), but for those
  /// kept from a forward call, which it reads as source does.
  rtir::ProgramOp cloneProgram(rtir::ProgramOp source, StringRef name) {
    llvm::StringMap<rtir::BufferOp> &buffers = bufferMap(); // and lastBuffer
    b.setInsertionPointAfter(source);
    auto copy = rtir::ProgramOp::create(b, source.getLoc(), name);
    Block &body = copy.getBody().emplaceBlock();
    llvm::StringMap<FlatSymbolRefAttr> renamed;
    auto rename = [&](ArrayAttr refs) {
      SmallVector<Attribute> out;
      for (Attribute ref : refs) {
        // Temporaries kept from a forward call (a copy per slot) are the
        // forward's: the copy reads them as the source does.
        auto it = buffers.find(rtir::bufferName(ref));
        if (it == buffers.end() ||
            it->second.getKind() != rtir::BufferKind::temporary ||
            it->second.getPerSlotAttr()) {
          out.push_back(ref);
          continue;
        }
        FlatSymbolRefAttr &fresh = renamed[rtir::bufferName(ref)];
        if (!fresh) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointAfter(lastBuffer);
          auto clone = cast<rtir::BufferOp>(b.clone(*it->second));
          // The source's name qualified by the copy's ("t7.micro_step_last"),
          // unique among the module's buffers.
          std::string unique = (it->second.getSymName() + "." + name).str();
          for (unsigned n = 1; buffers.count(unique); ++n)
            unique =
                (it->second.getSymName() + "." + name + "." + Twine(n)).str();
          clone.setSymName(unique);
          buffers[clone.getSymName()] = clone;
          lastBuffer = clone;
          fresh = FlatSymbolRefAttr::get(clone.getSymNameAttr());
        }
        out.push_back(fresh);
      }
      return b.getArrayAttr(out);
    };
    b.setInsertionPointToEnd(&body);
    for (auto launch : source.getBody().getOps<rtir::LaunchOp>()) {
      auto clone = cast<rtir::LaunchOp>(b.clone(*launch));
      clone.setInputsAttr(rename(launch.getInputs()));
      clone.setOutputsAttr(rename(launch.getOutputs()));
    }
    // A copied temporary that is a view (a gradient in its micro-batch's
    // bucket) lies in the copy of its base.
    SmallVector<std::pair<StringRef, FlatSymbolRefAttr>> copies(
        llvm::map_range(renamed, [](auto &entry) {
          return std::make_pair(entry.first(), entry.second);
        }));
    for (auto [original, fresh] : copies) {
      rtir::BufferOp clone = bufferNamed(fresh.getValue());
      FlatSymbolRefAttr base = clone ? clone.getViewAttr() : nullptr;
      if (!base)
        continue;
      ArrayAttr baseCopy = rename(b.getArrayAttr({base}));
      clone.setViewAttr(cast<FlatSymbolRefAttr>(baseCopy[0]));
    }
    return copy;
  }

  /// Puts a copy of each reduction into `program` after the last launch
  /// that touches its gradient, in the buckets of planGradientBuckets, on
  /// the gradient stream.
  LogicalResult schedule(
      rtir::ProgramOp program, ArrayRef<rtir::LaunchOp> reductions,
      const llvm::DenseMap<Operation *, SmallVector<rtir::LaunchOp>>
          &followers = llvm::DenseMap<Operation *,
                                      SmallVector<rtir::LaunchOp>>()) {
    SmallVector<rtir::LaunchOp> launches(
        program.getBody().getOps<rtir::LaunchOp>());
    // The reductions and their followers, when they are the program's own
    // (ZeRO-2's at its end), are what moves: they touch nothing before.
    llvm::DenseSet<Operation *> moving;
    for (rtir::LaunchOp reduction : reductions) {
      moving.insert(reduction);
      for (rtir::LaunchOp follower : followers.lookup(reduction))
        moving.insert(follower);
    }
    llvm::StringMap<int64_t> lastTouch;
    int64_t nextToken = 0;
    for (auto [position, launch] : llvm::enumerate(launches)) {
      if (!moving.contains(launch))
        for (ArrayAttr list : {launch.getInputs(), launch.getOutputs()})
          for (Attribute ref : list)
            lastTouch[rtir::bufferName(ref)] = int64_t(position);
      if (std::optional<int64_t> token = launch.getToken())
        nextToken = std::max(nextToken, *token + 1);
    }
    // The views of each flat bucket: a bucket is ready once all are.
    llvm::StringMap<SmallVector<StringRef>> views;
    for (auto &entry : bufferMap())
      if (FlatSymbolRefAttr base = entry.second.getViewAttr())
        views[base.getValue()].push_back(entry.first());
    // Where each gradient is ready (-1: never touched here, ready at the
    // program's start) and its size, in the optimizer step's order.
    std::vector<GradientReduction> ready;
    for (rtir::LaunchOp reduction : reductions) {
      StringRef gradient = rtir::bufferName(reduction.getInputs()[0]);
      int64_t readyAfter = -1;
      auto touch = [&](StringRef name) {
        if (auto it = lastTouch.find(name); it != lastTouch.end())
          readyAfter = std::max(readyAfter, it->second);
      };
      touch(gradient);
      for (StringRef view : views.lookup(gradient))
        touch(view);
      ready.push_back({readyAfter, bufferNamed(gradient).getByteSize()});
    }
    // The pass refused a negative size.
    const uint64_t size = uint64_t(bucketBytes);
    BucketPlan plan = planGradientBuckets(ready, size);
    std::string why;
    if (!plan.verify(ready, size, &why))
      return program.emitOpError("gradient bucket plan is invalid: ") << why;

    // Each bucket after its anchor, the launch where its last member is
    // ready, waiting for the token that launch signals.
    const int64_t stream = abi::kGradientReduceStream;
    Block &body = program.getBody().front();
    Operation *previousAnchor = nullptr, *insertAfter = nullptr;
    SmallVector<PendingFollower> pendingFollowers;
    llvm::DenseSet<Operation *> followerOps;
    size_t index = 0;
    for (const GradientBucket &bucket : plan.buckets) {
      rtir::LaunchOp anchor =
          bucket.anchor >= 0 ? launches[bucket.anchor] : nullptr;
      std::optional<int64_t> token;
      if (anchor) {
        if (!anchor.getToken())
          anchor.setTokenAttr(b.getI64IntegerAttr(nextToken++));
        token = anchor.getToken();
      }
      // After the anchor, and after the reductions placed there already.
      if (anchor != previousAnchor || !insertAfter)
        insertAfter = anchor;
      previousAnchor = anchor;
      if (insertAfter)
        b.setInsertionPointAfter(insertAfter);
      else
        b.setInsertionPointToStart(&body);
      for (auto [i, member] : llvm::enumerate(bucket.members)) {
        auto copy = cast<rtir::LaunchOp>(b.clone(*reductions[member]));
        copy.setStreamAttr(b.getI64IntegerAttr(stream));
        if (i == 0 && token)
          copy.setWaits({*token});
        insertAfter = copy;
        // What a reduction of a temporary (ZeRO-2's bucket of a
        // micro-batch's gradients) reads is free once the compute stream
        // has waited for it; and its followers run on the compute stream.
        rtir::BufferOp input =
            bufferNamed(rtir::bufferName(copy.getInputs()[0]));
        bool joins = input && input.getKind() == rtir::BufferKind::temporary;
        if (followers.lookup(reductions[member]).empty() && !joins)
          continue;
        if (!copy.getToken())
          copy.setTokenAttr(b.getI64IntegerAttr(nextToken++));
        pendingFollowers.push_back({index, copy, reductions[member]});
      }
      ++index;
    }
    // A reduction's followers (the accumulate of its slice) stay on the
    // compute stream (kernels share its scratch memory), waiting for its
    // token: after the anchor of the bucket kFollowerLag buckets later (by
    // when the reduction has long finished, so the wait costs nothing and
    // what the reduction read is free from there), else at the end. A
    // reduction of a temporary without followers is waited for by that
    // anchor itself.
    for (auto [bucket, reduction, original] : pendingFollowers) {
      // The anchor kFollowerLag buckets on, or the first after it that is
      // later than this bucket's (its reductions follow this one's anchor).
      rtir::LaunchOp anchor;
      for (size_t later = bucket + kFollowerLag;
           later < plan.buckets.size() && !anchor; ++later)
        if (plan.buckets[later].anchor > plan.buckets[bucket].anchor)
          anchor = launches[plan.buckets[later].anchor];
      SmallVector<rtir::LaunchOp> after = followers.lookup(original);
      if (after.empty()) {
        // Joined by the later anchor itself (none: the program's end).
        if (anchor) {
          SmallVector<int64_t> waits(anchor.getWaits());
          waits.push_back(*reduction.getToken());
          anchor.setWaits(waits);
        }
        continue;
      }
      if (anchor)
        b.setInsertionPointAfter(anchor);
      else
        b.setInsertionPointToEnd(&body);
      // After the followers placed there already.
      Operation *at = anchor ? anchor.getOperation() : nullptr;
      while (at && at->getNextNode() && followerOps.contains(at->getNextNode()))
        at = at->getNextNode();
      if (at)
        b.setInsertionPointAfter(at);
      for (auto [j, follower] : llvm::enumerate(after)) {
        auto next = cast<rtir::LaunchOp>(b.clone(*follower));
        followerOps.insert(next);
        if (j == 0)
          next.setWaits({int64_t(*reduction.getToken())});
      }
    }
    return success();
  }
  struct PendingFollower {
    size_t bucket;
    rtir::LaunchOp reduction, original;
  };
  /// Buckets between a reduction and its followers.
  static constexpr size_t kFollowerLag = 2;

  ModuleOp module;
  OpBuilder b;
  int64_t bucketBytes;
  bool gradients, parameters;
  /// Read through bufferMap and bufferNamed.
  llvm::StringMap<rtir::BufferOp> buffers;
  Operation *lastBuffer = nullptr;
  bool stale = true;
  bool changed = false;
};

/// Moves the optimizer step's gradient reductions under the backward pass:
/// 1. the reductions: the optimizer step's plain in-place `all_reduce_sum`s
///    of gradient buffers and `reduce_scatter_sum`s of flat gradient
///    buckets into a rank's slice (mlt-partition-optimizer), each before
///    anything else there touches its gradient;
/// 2. the body the step calls for its last micro-batch is copied, with
///    temporaries of its own (@micro_step_last of @micro_step,
///    @micro_step_only of @micro_step_first), and the step calls the copy;
/// 3. in the copy, each gradient is ready after the last launch that
///    touches it (a bucket, after the last that touches one of its views;
///    at the start if none does);
/// 4. the planner (GradientBuckets.h) groups the reductions in readiness
///    order into buckets of at least `bucket-bytes`, each anchored at the
///    launch where its last member is ready, and its checker verifies them;
/// 5. each bucket goes after its anchor (and after the buckets placed there
///    already) on the gradient stream, its first reduction waiting for the
///    token the anchor signals (given a fresh one if it has none); a bucket
///    ready at the start goes first, with no wait;
/// 6. the reductions leave the optimizer step, and a body no longer called
///    is erased.
class MLTScheduleOverlapPass
    : public mlt::impl::MLTScheduleOverlapBase<MLTScheduleOverlapPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    if (bucketBytes < 0) {
      getOperation().emitError("mlt-schedule-overlap: bucket-bytes must be "
                               "non-negative, got ")
          << static_cast<int64_t>(bucketBytes);
      return signalPassFailure();
    }
    Scheduler scheduler(getOperation(), bucketBytes, overlapGradReduce,
                        overlapParamGather);
    if (failed(scheduler.run()))
      return signalPassFailure();
    // Nothing moved: the pass manager need not verify the module again.
    if (!scheduler.changedModule())
      markAllAnalysesPreserved();
  }
};

} // namespace
