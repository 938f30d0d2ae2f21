//===- SchedulePipeline.cpp - the training step of a lowered module -------===//
//
// Part of mlt. Implements mlt-schedule-pipeline (Passes.td): the schedule of
// PipelineSchedule.h becomes `mlt_rt.step`, calls of the lowered bodies in
// the schedule's order, each with its micro-batch (and slot) and the work it
// does; a schedule that separates a micro-batch's forward from its backward
// splits the bodies and keeps the activations between them per slot. The
// evaluation body, where there is one, gets `mlt_rt.step @eval_step`: the
// schedule's forwards alone.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/PipelineSchedule.h"
#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/PlanFormat.h"

#include <map>

namespace mlt {
#define GEN_PASS_DEF_MLTSCHEDULEPIPELINE
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;
namespace abi = mlt::rt;

namespace {

/// The steps' names in the IR (the plan file holds each rank's steps
/// unnamed).
constexpr llvm::StringLiteral kStepName = rtir::kTrainingStepName;

/// A program of `fill` launches that zeroes every gradient buffer, at the
/// end of the module.
rtir::ProgramOp createZeroGradients(ModuleOp module, OpBuilder &b) {
  b.setInsertionPointToEnd(module.getBody());
  auto program =
      rtir::ProgramOp::create(b, module.getLoc(), abi::kZeroGradientsProgram);
  b.setInsertionPointToStart(&program.getBody().emplaceBlock());
  using A = rt::attrs::Fill;
  for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>())
    if (buffer.getKind() == rtir::BufferKind::gradient)
      rtir::LaunchOp::create(
          b, module.getLoc(), rt::kernelName(A::kernel), {},
          {FlatSymbolRefAttr::get(buffer.getSymNameAttr())},
          rt::kernelInts<A>({{A::n, buffer.getTensorType().getNumElements()}}),
          rt::kernelFloats<A>({{A::value, 0.0}}));
  return program;
}

} // namespace

void mlt::eraseUncalledPrograms(ModuleOp module) {
  DenseSet<StringAttr> called, used;
  for (auto step : module.getOps<rtir::StepOp>())
    for (auto call : step.getBody().getOps<rtir::CallOp>())
      called.insert(call.getProgramAttr().getAttr());
  SmallVector<rtir::ProgramOp> dead;
  for (auto program : module.getOps<rtir::ProgramOp>()) {
    if (program.getSymName() == abi::kRefreshCopiesProgram ||
        called.contains(program.getSymNameAttr())) {
      program.walk([&](rtir::LaunchOp launch) {
        for (ArrayAttr list : {launch.getInputs(), launch.getOutputs()})
          for (Attribute ref : list)
            used.insert(cast<FlatSymbolRefAttr>(ref).getAttr());
      });
      continue;
    }
    dead.push_back(program);
  }
  for (rtir::ProgramOp program : dead)
    program.erase();
  // Temporaries and constants that only erased programs (or halves of split
  // programs) touched.
  for (auto buffer :
       llvm::make_early_inc_range(module.getOps<rtir::BufferOp>()))
    if ((buffer.getKind() == rtir::BufferKind::temporary ||
         buffer.getKind() == rtir::BufferKind::constant) &&
        !used.contains(buffer.getSymNameAttr()))
      buffer.erase();
}

void mlt::renameLaunchOperands(rtir::ProgramOp program,
                               const DenseMap<StringAttr, StringAttr> &renamed) {
  Builder b(program.getContext());
  auto rename = [&](ArrayAttr refs) {
    SmallVector<Attribute> out;
    for (Attribute ref : refs) {
      auto it = renamed.find(cast<FlatSymbolRefAttr>(ref).getAttr());
      out.push_back(it == renamed.end() ? ref
                                        : FlatSymbolRefAttr::get(it->second));
    }
    return b.getArrayAttr(out);
  };
  for (auto launch : program.getBody().getOps<rtir::LaunchOp>()) {
    launch.setInputsAttr(rename(launch.getInputs()));
    launch.setOutputsAttr(rename(launch.getOutputs()));
  }
}

namespace {

/// Launches [begin, end) of `source` moved into a new program `name`, put
/// after `after`.
rtir::ProgramOp moveLaunches(rtir::ProgramOp source, size_t begin, size_t end,
                             StringRef name, Operation *after, OpBuilder &b) {
  b.setInsertionPointAfter(after);
  auto program = rtir::ProgramOp::create(b, source.getLoc(), name);
  Block &body = program.getBody().emplaceBlock();
  SmallVector<rtir::LaunchOp> launches(
      source.getBody().getOps<rtir::LaunchOp>());
  for (size_t i = begin; i < end; ++i)
    launches[i]->moveBefore(&body, body.end());
  return program;
}

/// The launches of `source` that `moves` selects, moved in order into a new
/// program `name` put after `after`.
rtir::ProgramOp
moveMatchingLaunches(rtir::ProgramOp source,
                     llvm::function_ref<bool(rtir::LaunchOp)> moves,
                     StringRef name, Operation *after, OpBuilder &b) {
  SmallVector<rtir::LaunchOp> moved;
  for (auto launch : source.getBody().getOps<rtir::LaunchOp>())
    if (moves(launch))
      moved.push_back(launch);
  b.setInsertionPointAfter(after);
  auto program = rtir::ProgramOp::create(b, source.getLoc(), name);
  Block &block = program.getBody().emplaceBlock();
  for (rtir::LaunchOp launch : moved)
    launch->moveBefore(&block, block.end());
  return program;
}

/// The transfers a body's calls are wrapped in (pipeline stages): the
/// receives its launches need first, the sends of what they leave.
struct Transfers {
  rtir::ProgramOp recv, send;
};

/// Moves `body`'s send and recv launches into programs of their own, put
/// after it: `<body>_recv` (the receives) and `<body>_send` (the sends);
/// null where it has none. A stage's body receives at its start (the
/// hidden state, or in a backward pass the gradient of what the forward
/// sent) and sends at its end, so running the receives before the body and
/// the sends after it runs the same launches on the same buffers; a
/// separate call lets the step group a send with the next receive, as a
/// pipeline schedule needs to be deadlock-free with blocking transfers.
Transfers extractTransfers(rtir::ProgramOp body, OpBuilder &b) {
  Transfers out;
  Operation *after = body;
  for (auto [kind, slot] : {std::pair<StringRef, rtir::ProgramOp *>(
                                "recv", &out.recv),
                            {"send", &out.send}}) {
    auto isKind = [&](rtir::LaunchOp launch) {
      return launch.getKernel() == kind;
    };
    if (llvm::none_of(body.getBody().getOps<rtir::LaunchOp>(), isKind))
      continue;
    *slot = moveMatchingLaunches(body, isKind,
                                 (body.getSymName() + "_" + kind).str(), after,
                                 b);
    after = *slot;
  }
  return out;
}

/// When `first`'s launches before `count` are `micro`'s with other
/// temporaries (the same kernels, attributes and other operands, in the same
/// order: both are lowered from one forward pass), the renaming of first's
/// temporaries to micro's; else nullopt.
std::optional<DenseMap<StringAttr, StringAttr>>
matchForward(rtir::ProgramOp micro, rtir::ProgramOp first, size_t count,
             const DenseSet<StringAttr> &temporaries) {
  SmallVector<rtir::LaunchOp> a(micro.getBody().getOps<rtir::LaunchOp>());
  SmallVector<rtir::LaunchOp> c(first.getBody().getOps<rtir::LaunchOp>());
  if (a.size() < count || c.size() < count)
    return std::nullopt;
  DenseMap<StringAttr, StringAttr> renamed;
  for (size_t i = 0; i < count; ++i) {
    rtir::LaunchOp x = a[i], y = c[i];
    if (x.getKernel() != y.getKernel() || x.getInts() != y.getInts() ||
        x.getFloats() != y.getFloats() || x.getStream() != y.getStream() ||
        x.getWaits() != y.getWaits() || x.getToken() != y.getToken() ||
        x.getInputs().size() != y.getInputs().size() ||
        x.getOutputs().size() != y.getOutputs().size())
      return std::nullopt;
    for (auto [xs, ys] : {std::pair(x.getInputs(), y.getInputs()),
                          std::pair(x.getOutputs(), y.getOutputs())})
      for (auto [xr, yr] : llvm::zip(xs, ys)) {
        StringAttr xn = cast<FlatSymbolRefAttr>(xr).getAttr();
        StringAttr yn = cast<FlatSymbolRefAttr>(yr).getAttr();
        if (temporaries.contains(xn) != temporaries.contains(yn))
          return std::nullopt;
        if (!temporaries.contains(xn)) {
          if (xn != yn)
            return std::nullopt;
          continue;
        }
        auto [it, inserted] = renamed.try_emplace(yn, xn);
        if (it->second != xn)
          return std::nullopt;
      }
  }
  return renamed;
}

/// Algorithm:
/// 1. build the schedule of `schedule` for one stage (the module is not
///    split into stages yet) and the module's micro-batches, and check it
///    (a pipeline's stage 0 checks it for all);
/// 2. if every forward is followed by its own backward, each such pair
///    becomes a call of the micro-batch's forward-backward body (the first
///    micro-batch's writes the gradients, where the module has that body;
///    else a zeroing program is called first);
/// 3. else the bodies are split where their backward starts
///    (`backward_start`) into `forward` and `backward` (and
///    `backward_first`, made to read `forward`'s temporaries); the
///    temporaries both halves touch are kept from the forward call to the
///    backward call, one copy per slot; slots go to micro-batches at their
///    forward (the lowest free one) and come back at their backward, so
///    the copies are as many as the schedule keeps in flight; each item is
///    a call with its micro-batch and slot;
/// 4. end with the optimizer update;
/// 5. where the module has an evaluation body, the evaluation step
///    (scheduleEvaluation); erase the programs no call runs.
class MLTSchedulePipelinePass
    : public mlt::impl::MLTSchedulePipelineBase<MLTSchedulePipelinePass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &message) {
      module.emitError("mlt-schedule-pipeline: ") << message;
      signalPassFailure();
    };
    std::optional<ScheduleKind> kind = parseScheduleKind(schedule);
    if (!kind)
      return fail("unknown schedule '" + schedule +
                  "' (1f1b, gpipe, zb-h1 or interleaved)");
    if (module.lookupSymbol(kStepName))
      return fail("the module has a @" + kStepName + " already");
    // An interleaved stage (mlt-merge-chunks) holds its chunks' bodies as
    // `c<chunk>.micro_step`, ...
    int64_t chunks = 1;
    if (auto attr =
            module->getAttrOfType<IntegerAttr>(MLTDialect::getChunksAttrName()))
      chunks = attr.getInt();
    SmallVector<Bodies> bodies;
    for (int64_t c = 0; c < chunks; ++c) {
      Bodies chunk;
      chunk.prefix = chunks > 1 ? "c" + std::to_string(c) + "." : "";
      chunk.micro = module.lookupSymbol<rtir::ProgramOp>(
          chunk.prefix + abi::kMicroStepProgram);
      chunk.first = module.lookupSymbol<rtir::ProgramOp>(
          chunk.prefix + abi::kMicroStepFirstProgram);
      if (!chunk.micro)
        return fail("needs the program @" + chunk.prefix +
                    abi::kMicroStepProgram +
                    " (run mlt-lower-to-runtime first)");
      bodies.push_back(chunk);
    }
    auto optimizer =
        module.lookupSymbol<rtir::ProgramOp>(abi::kOptimizerStepProgram);
    if (!optimizer)
      return fail(Twine("needs the program @") + abi::kOptimizerStepProgram +
                  " (run mlt-lower-to-runtime first)");
    rtir::ProgramOp micro = bodies.front().micro, first = bodies.front().first;
    int64_t microbatches = 1;
    if (auto attr = module->getAttrOfType<IntegerAttr>("mlt_rt.microbatches"))
      microbatches = attr.getInt();
    if (microbatches < 1)
      return fail("the module has " + Twine(microbatches) + " micro-batches");

    // A pipeline stage (mlt-partition-pipeline) runs its share of the
    // schedule of all stages.
    int64_t stage = 0, stages = 1;
    if (auto attr =
            module->getAttrOfType<IntegerAttr>(MLTDialect::getStageAttrName())) {
      auto mesh =
          module->getAttrOfType<MeshAttr>(MLTDialect::getMeshAttrName());
      int64_t axis = mesh ? mesh.axisIndex(MLTDialect::getPipelineAxisName()) : -1;
      stage = attr.getInt();
      stages = axis < 0 ? 0 : mesh.getSizes()[axis];
      if (stage >= stages)
        return fail("the module is stage " + Twine(stage) +
                    " but its mesh has " + Twine(stages) +
                    " pipeline stages (axis 'pp')");
    }
    std::string why;
    std::optional<PipelineSchedule> plan = buildStageSchedule(
        *kind, stages, chunks, microbatches, groupSize, &why);
    if (!plan)
      return fail(why);
    // Every stage builds this schedule of all stages from the same
    // options: stage 0's compile checks it for all (a pipeline of 64
    // stages and 1024 micro-batches would check 131072 items 64 times).
    if (stage == 0 && !plan->verify(&why, splitsWeightGradients(*kind)))
      return fail("the " + Twine(scheduleKindName(*kind)) +
                  " schedule is invalid: " + why);
    const std::vector<WorkItem> &work = plan->stageWork[size_t(stage)];
    // Where the stage posts its transfers (placeStageTransfers, its own
    // alone): the interleaved schedule's by rounds, the others' each next
    // to its item.
    std::optional<std::vector<std::vector<TransferPost>>> posts =
        placeStageTransfers(*plan,
                            *kind == ScheduleKind::Interleaved
                                ? TransferRule::TimeRounds
                                : TransferRule::Adjacent,
                            stage, &why);
    if (!posts)
      return fail("the " + Twine(scheduleKindName(*kind)) +
                  " schedule's transfers cannot be placed: " + why);
    // A pipeline stage's fused body receives first and sends last only on
    // the last stage (the others send their output, then receive its
    // gradient): elsewhere the bodies are split, even where F and B meet.
    bool fused = (stages == 1 || stage == stages - 1) &&
                 !splitsWeightGradients(*kind) && chunks == 1;
    for (size_t i = 0; i < work.size(); i += 2)
      fused &= work[i].kind == WorkKind::Forward && i + 1 < work.size() &&
               work[i + 1] == WorkItem{WorkKind::Backward, work[i].microbatch,
                                       work[i].chunk};

    OpBuilder b(module.getContext());
    rtir::ProgramOp zero;
    if (llvm::any_of(bodies, [](const Bodies &chunk) { return !chunk.first; }))
      zero = createZeroGradients(module, b);
    SmallVector<Call> calls;
    if (zero)
      calls.push_back({zero, std::nullopt, std::nullopt, {}});
    if (fused && stages == 1) {
      for (size_t i = 0; i < work.size(); i += 2)
        calls.push_back({work[i].microbatch == 0 && first ? first : micro,
                         work[i].microbatch, std::nullopt,
                         {work[i], work[i + 1]}});
    } else if (fused) {
      // A pipeline's last stage under 1F1B: each micro-batch's fused body
      // between its transfers, in slot 0.
      Transfers microTransfers = extractTransfers(micro, b);
      Transfers firstTransfers =
          first ? extractTransfers(first, b) : Transfers{};
      for (size_t i = 0; i < work.size(); i += 2) {
        const bool isFirst = work[i].microbatch == 0 && first;
        addCalls(isFirst ? first : micro,
                 isFirst ? firstTransfers : microTransfers,
                 work[i].microbatch, 0, {work[i], work[i + 1]}, calls);
      }
      keepAcrossCalls(module, calls, 1, b);
    } else if (failed(splitBodies(module, bodies, work, stages > 1,
                                  *posts, calls,
                                  b))) {
      return signalPassFailure();
    }
    calls.push_back({optimizer, std::nullopt, std::nullopt, {}});
    createStep(module, kStepName, calls, b);
    // The evaluation step, where the module has an evaluation body.
    if (failed(scheduleEvaluation(module, *plan, *kind, stage, chunks, b)))
      return signalPassFailure();
    // A step of one micro-batch calls micro_step_first alone.
    eraseUncalledPrograms(module);
  }

private:
  struct Call {
    rtir::ProgramOp program;
    std::optional<int64_t> microbatch, slot;
    SmallVector<WorkItem> work;
  };

  /// Each model chunk's slots (a chunk has temporaries of its own): a
  /// micro-batch takes its chunk's lowest free slot at its first call
  /// (take; the same one at its later calls) until it gives it back (give),
  /// so a chunk has as many as it keeps micro-batches in flight; and the
  /// calls of each chunk, whose shared temporaries then get a copy per slot.
  class SlotPools {
  public:
    explicit SlotPools(size_t chunks) : pools_(chunks) {}

    int64_t take(const WorkItem &item) {
      Pool &pool = pools_[size_t(item.chunk)];
      if (auto it = pool.of.find(item.microbatch); it != pool.of.end())
        return it->second;
      size_t slot = 0;
      while (slot < pool.busy.size() && pool.busy[slot])
        ++slot;
      if (slot == pool.busy.size())
        pool.busy.push_back(false);
      pool.busy[slot] = true;
      pool.of[item.microbatch] = int64_t(slot);
      return int64_t(slot);
    }
    void give(const WorkItem &item) {
      Pool &pool = pools_[size_t(item.chunk)];
      pool.busy[size_t(pool.of.lookup(item.microbatch))] = false;
      pool.of.erase(item.microbatch);
    }
    SmallVectorImpl<Call> &callsOf(const WorkItem &item) {
      return pools_[size_t(item.chunk)].calls;
    }
    /// keepAcrossCalls for each chunk's calls, with its slots.
    void keepAcrossCalls(ModuleOp module, OpBuilder &b) const {
      for (const Pool &pool : pools_)
        MLTSchedulePipelinePass::keepAcrossCalls(
            module, pool.calls, int64_t(pool.busy.size()), b);
    }

  private:
    struct Pool {
      std::vector<bool> busy;
      DenseMap<int64_t, int64_t> of;
      SmallVector<Call> calls;
    };
    std::vector<Pool> pools_;
  };

  /// `mlt_rt.step @name` of `calls`, at the end of the module.
  static void createStep(ModuleOp module, StringRef name, ArrayRef<Call> calls,
                         OpBuilder &b) {
    b.setInsertionPointToEnd(module.getBody());
    auto step = rtir::StepOp::create(b, module.getLoc(), name);
    b.setInsertionPointToStart(&step.getBody().emplaceBlock());
    for (Call call : calls)
      rtir::CallOp::create(
          b, module.getLoc(),
          FlatSymbolRefAttr::get(call.program.getSymNameAttr()),
          call.microbatch ? b.getI64IntegerAttr(*call.microbatch)
                          : IntegerAttr(),
          call.slot ? b.getI64IntegerAttr(*call.slot) : IntegerAttr(),
          b.getDenseI64ArrayAttr(rtir::CallOp::encodeWork(call.work)));
  }

  /// Step 5: `@eval_step`, where the module has the evaluation body
  /// (`eval_forward`, per chunk `c<chunk>.eval_forward`): the forward items
  /// of `training`'s schedule alone (forwardSchedule), each a call of the
  /// body; on a pipeline stage wrapped in the body's transfers, placed by
  /// the training schedule's rule, with the temporaries a transfer and the
  /// body share kept per slot (a slot taken at an item's receive, or its
  /// body, and given back after its send, or its body). The stages run no
  /// backward pass, so the step leaves every gradient and the optimizer's
  /// state as it finds them.
  LogicalResult scheduleEvaluation(ModuleOp module,
                                   const PipelineSchedule &training,
                                   ScheduleKind kind, int64_t stage,
                                   int64_t chunks, OpBuilder &b) {
    SmallVector<rtir::ProgramOp> bodies;
    for (int64_t c = 0; c < chunks; ++c) {
      const std::string prefix = chunks > 1 ? "c" + std::to_string(c) + "." : "";
      bodies.push_back(module.lookupSymbol<rtir::ProgramOp>(
          prefix + abi::kEvalForwardProgram));
    }
    const bool any = llvm::any_of(bodies, [](rtir::ProgramOp p) { return p; });
    if (!any)
      return success();
    auto fail = [&](const Twine &message) {
      return module.emitError("mlt-schedule-pipeline: ") << message;
    };
    for (auto [c, body] : llvm::enumerate(bodies))
      if (!body)
        return fail("chunk " + Twine(c) + " has no @" +
                    (chunks > 1 ? "c" + Twine(c) + "." : Twine()) +
                    abi::kEvalForwardProgram + ", which the others have");
    if (module.lookupSymbol(rtir::kEvalStepName))
      return fail(Twine("the module has a @") + rtir::kEvalStepName +
                  " already");
    const PipelineSchedule forward = forwardSchedule(training);
    std::string why;
    if (stage == 0 && !forward.verify(&why))
      return fail("the evaluation schedule is invalid: " + why);
    const std::vector<WorkItem> &work = forward.stageWork[size_t(stage)];
    SmallVector<Call> calls;
    if (forward.stages == 1) {
      for (const WorkItem &item : work)
        calls.push_back({bodies[size_t(item.chunk)], item.microbatch,
                         std::nullopt, {item}});
      createStep(module, rtir::kEvalStepName, calls, b);
      return success();
    }
    std::optional<std::vector<std::vector<TransferPost>>> posts =
        placeStageTransfers(forward,
                            kind == ScheduleKind::Interleaved
                                ? TransferRule::TimeRounds
                                : TransferRule::Adjacent,
                            stage, &why);
    if (!posts)
      return fail("the evaluation schedule's transfers cannot be placed: " +
                  why);
    SmallVector<Transfers> transfers;
    for (rtir::ProgramOp body : bodies)
      transfers.push_back(extractTransfers(body, b));
    // Each chunk's slots: taken at an item's first call, given back after
    // its last.
    SlotPools slots(bodies.size());
    auto emit = [&](const WorkItem &item, Call call) {
      calls.push_back(call);
      slots.callsOf(item).push_back(call);
    };
    for (size_t k = 0; k < posts->size(); ++k) {
      SmallVector<WorkItem> sent;
      for (const TransferPost &post : (*posts)[k]) {
        const WorkItem &item = work[size_t(post.item)];
        const Transfers &chunk = transfers[size_t(item.chunk)];
        rtir::ProgramOp program = post.send ? chunk.send : chunk.recv;
        if (!program)
          return fail(Twine("the evaluation schedule ") +
                      (post.send ? "sends the output of "
                                 : "receives the input of ") +
                      item.str() + ", whose body has no " +
                      (post.send ? "send" : "receive"));
        emit(item, {program, item.microbatch, slots.take(item), {}});
        if (post.send)
          sent.push_back(item);
      }
      // (after the group: its transfers are posted together)
      for (const WorkItem &item : sent)
        slots.give(item);
      if (k == work.size())
        break;
      const WorkItem &item = work[k];
      emit(item, {bodies[size_t(item.chunk)], item.microbatch,
                  slots.take(item), {item}});
      if (!transfers[size_t(item.chunk)].send)
        slots.give(item);
    }
    slots.keepAcrossCalls(module, b);
    createStep(module, rtir::kEvalStepName, calls, b);
    return success();
  }

  /// A model chunk's bodies: the lowered micro-step (and its variant for
  /// the first micro-batch), then the halves they are split into.
  struct Bodies {
    /// "" with one chunk; else `c<chunk>.`, which its programs' names
    /// start with.
    std::string prefix;
    rtir::ProgramOp micro, first;
    rtir::ProgramOp forward, backward, backwardFirst, weight, weightFirst;
    Transfers forwardTransfers, backwardTransfers, backwardFirstTransfers;
  };

  /// Step 3: the split bodies of each chunk, the kept temporaries' copies
  /// per slot, and a call per item of `work`. Each chunk has its own
  /// temporaries, so its own slots.
  LogicalResult splitBodies(ModuleOp module, MutableArrayRef<Bodies> chunks,
                            ArrayRef<WorkItem> work, bool transfers,
                            ArrayRef<std::vector<TransferPost>> posts,
                            SmallVectorImpl<Call> &calls, OpBuilder &b) {
    DenseSet<StringAttr> temporaries;
    for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>())
      if (buffer.getKind() == rtir::BufferKind::temporary)
        temporaries.insert(buffer.getSymNameAttr());
    const bool splitWeights = llvm::any_of(work, [](const WorkItem &item) {
      return item.kind == WorkKind::WeightGradient;
    });
    for (Bodies &chunk : chunks)
      if (failed(splitChunk(module, chunk, temporaries, splitWeights,
                            transfers, b)))
        return failure();

    // Slots: the lowest free one of its chunk at each forward (at its
    // receive, where it has one), back at its backward (at its
    // weight-gradient pass, where there is one; at the send of its output
    // where that is posted later than right after it).
    SlotPools slots(chunks.size());
    auto take = [&](const WorkItem &item) { return slots.take(item); };
    auto give = [&](const WorkItem &item) { slots.give(item); };
    // Each chunk's first backward and weight-gradient items (which call the
    // `_first` bodies, where there are some), each item's slot, and where
    // each item's output is sent.
    std::map<std::pair<WorkKind, int64_t>, size_t> firstOf;
    for (size_t k = 0; k < work.size(); ++k)
      firstOf.try_emplace({work[k].kind, work[k].chunk}, k);
    auto isFirst = [&](size_t k) {
      return firstOf.at({work[k].kind, work[k].chunk}) == k;
    };
    DenseMap<int64_t, int64_t> itemSlot;
    DenseMap<int64_t, size_t> sentAt;
    for (size_t k = 0; k < posts.size(); ++k)
      for (const TransferPost &post : posts[k])
        if (post.send)
          sentAt[post.item] = k;
    auto emit = [&](const WorkItem &item, Call call) {
      calls.push_back(call);
      slots.callsOf(item).push_back(call);
    };
    auto transferOf = [&](const WorkItem &item, bool send, int64_t index)
        -> FailureOr<rtir::ProgramOp> {
      Bodies &chunk = chunks[size_t(item.chunk)];
      const Transfers &transfers =
          item.kind == WorkKind::Forward ? chunk.forwardTransfers
          : chunk.backwardFirst && isFirst(size_t(index))
              ? chunk.backwardFirstTransfers
              : chunk.backwardTransfers;
      rtir::ProgramOp program = send ? transfers.send : transfers.recv;
      if (!program)
        return module.emitError("mlt-schedule-pipeline: the schedule ")
               << (send ? "sends the output of " : "receives the input of ")
               << item.str() << ", whose body has no "
               << (send ? "send" : "receive");
      return program;
    };
    for (size_t k = 0; k < posts.size(); ++k) {
      SmallVector<WorkItem> freed;
      for (const TransferPost &post : posts[k]) {
        const WorkItem &item = work[size_t(post.item)];
        FailureOr<rtir::ProgramOp> program =
            transferOf(item, post.send, post.item);
        if (failed(program))
          return failure();
        const int64_t slot =
            post.send ? itemSlot.lookup(post.item) : take(item);
        itemSlot[post.item] = slot;
        emit(item, {*program, item.microbatch, slot, {}});
        if (post.send && item.kind == WorkKind::Backward &&
            !chunks[size_t(item.chunk)].weight &&
            size_t(post.item) + 1 != k)
          freed.push_back(item);
      }
      for (const WorkItem &item : freed)
        give(item);
      if (k == work.size())
        break;
      const WorkItem &item = work[k];
      Bodies &chunk = chunks[size_t(item.chunk)];
      const int64_t slot = take(item);
      itemSlot[int64_t(k)] = slot;
      if (item.kind == WorkKind::WeightGradient) {
        emit(item, {chunk.weightFirst && isFirst(k) ? chunk.weightFirst
                                                    : chunk.weight,
                    item.microbatch, slot, {item}});
        give(item);
      } else if (item.kind == WorkKind::Forward) {
        emit(item, {chunk.forward, item.microbatch, slot, {item}});
      } else {
        emit(item, {chunk.backwardFirst && isFirst(k) ? chunk.backwardFirst
                                                      : chunk.backward,
                    item.microbatch, slot, {item}});
        auto sent = sentAt.find(int64_t(k));
        if (!chunk.weight && (sent == sentAt.end() || sent->second == k + 1))
          give(item);
      }
    }
    slots.keepAcrossCalls(module, b);
    return success();
  }

  /// Splits `chunk`'s micro-step bodies where their backward starts (and,
  /// with `splitWeights`, their backward again into B and W), and moves
  /// their transfers into programs of their own when `transfers`.
  LogicalResult splitChunk(ModuleOp module, Bodies &chunk,
                           const DenseSet<StringAttr> &temporaries,
                           bool splitWeights, bool transfers, OpBuilder &b) {
    auto startOf = [&](rtir::ProgramOp program) -> FailureOr<size_t> {
      if (!program.getBackwardStartAttr())
        return module.emitError("mlt-schedule-pipeline: the ")
               << scheduleKindName(*parseScheduleKind(schedule))
               << " schedule separates forward and backward passes, but @"
               << program.getSymName()
               << " does not say where its backward pass starts";
      return size_t(program.getBackwardStartAttr().getInt());
    };
    rtir::ProgramOp micro = chunk.micro, first = chunk.first;
    FailureOr<size_t> microStart = startOf(micro);
    if (failed(microStart))
      return failure();
    const size_t microEnd = llvm::range_size(micro.getBody().getOps());
    auto named = [&](StringRef name) { return chunk.prefix + name.str(); };
    // The backward half first: moving the forward half renumbers the rest.
    chunk.backward = moveLaunches(micro, *microStart, microEnd,
                                  named(abi::kBackwardProgram), micro, b);
    chunk.forward = moveLaunches(micro, 0, *microStart,
                                 named(abi::kForwardProgram), micro, b);
    if (first) {
      FailureOr<size_t> firstStart = startOf(first);
      if (failed(firstStart))
        return failure();
      // micro_step_first's forward pass is micro_step's (it differs in the
      // gradients' first writes only): its backward reads forward's
      // temporaries.
      std::optional<DenseMap<StringAttr, StringAttr>> renamed;
      if (*firstStart == *microStart)
        renamed =
            matchForward(chunk.forward, first, *firstStart, temporaries);
      if (!renamed)
        return module.emitError("mlt-schedule-pipeline: the forward pass of "
                                "@")
               << first.getSymName() << " is not @" << micro.getSymName()
               << "'s";
      const size_t firstEnd = llvm::range_size(first.getBody().getOps());
      chunk.backwardFirst =
          moveLaunches(first, *firstStart, firstEnd,
                       named(abi::kBackwardFirstProgram), chunk.backward, b);
      renameLaunchOperands(chunk.backwardFirst, *renamed);
    }
    micro.erase();
    if (first)
      first.erase();
    chunk.micro = chunk.first = nullptr;
    // Zero-bubble schedules: the weight gradients (W) apart from the rest
    // of the backward pass (B).
    if (splitWeights) {
      chunk.weight = splitWeightGradients(module, chunk.backward, b);
      if (chunk.backwardFirst)
        chunk.weightFirst =
            splitWeightGradients(module, chunk.backwardFirst, b);
    }
    if (transfers) {
      chunk.forwardTransfers = extractTransfers(chunk.forward, b);
      chunk.backwardTransfers = extractTransfers(chunk.backward, b);
      if (chunk.backwardFirst)
        chunk.backwardFirstTransfers =
            extractTransfers(chunk.backwardFirst, b);
    }
    return success();
  }

  /// Moves the launches of `backward` that only write gradient buffers
  /// (the weight-gradient products, the accumulations into gradients) into
  /// a program `<backward>_weight` put after it, and returns it. Nothing
  /// else reads what they write, so the rest (B: the input gradients, what
  /// the previous stage waits for) runs first and they later (W).
  static rtir::ProgramOp splitWeightGradients(ModuleOp module,
                                              rtir::ProgramOp backward,
                                              OpBuilder &b) {
    DenseSet<StringAttr> gradients;
    for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>())
      if (buffer.getKind() == rtir::BufferKind::gradient)
        gradients.insert(buffer.getSymNameAttr());
    return moveMatchingLaunches(
        backward,
        [&](rtir::LaunchOp launch) {
          return !launch.getOutputs().empty() &&
                 llvm::all_of(launch.getOutputs(), [&](Attribute ref) {
                   return gradients.contains(
                       cast<FlatSymbolRefAttr>(ref).getAttr());
                 });
        },
        (backward.getSymName() + "_weight").str(), backward, b);
  }

  /// The calls of `body` for micro-batch `microbatch` in `slot`: its
  /// receives, itself, its sends.
  static void addCalls(rtir::ProgramOp body, const Transfers &transfers,
                       int64_t microbatch, int64_t slot,
                       ArrayRef<WorkItem> work, SmallVectorImpl<Call> &calls) {
    if (transfers.recv)
      calls.push_back({transfers.recv, microbatch, slot, {}});
    calls.push_back({body, microbatch, slot, SmallVector<WorkItem>(work)});
    if (transfers.send)
      calls.push_back({transfers.send, microbatch, slot, {}});
  }

  /// Gives a copy per slot (`slots` of them) to each temporary that the
  /// programs of two different micro-batch calls touch: what a forward call
  /// leaves for its backward call, what a receive leaves for its body, what
  /// a body leaves for its send. The first micro-batch's variants of a body
  /// (`backward_first`, `micro_step_first` and their transfers) count as
  /// the body: they are its alternative, never called with it for one
  /// micro-batch.
  static void keepAcrossCalls(ModuleOp module, ArrayRef<Call> calls,
                              int64_t slots, OpBuilder &b) {
    DenseMap<StringAttr, rtir::BufferOp> temporaries;
    for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>())
      if (buffer.getKind() == rtir::BufferKind::temporary)
        temporaries[buffer.getSymNameAttr()] = buffer;
    DenseMap<StringAttr, std::string> toucher;
    DenseSet<StringAttr> kept, seenPrograms;
    for (const Call &call : calls) {
      rtir::ProgramOp program = call.program;
      if (!call.microbatch ||
          !seenPrograms.insert(program.getSymNameAttr()).second)
        continue;
      std::string role = program.getSymName().str();
      if (size_t at = role.find("_first"); at != std::string::npos)
        role.erase(at, 6);
      for (auto launch : program.getBody().getOps<rtir::LaunchOp>())
        for (ArrayAttr refs : {launch.getInputs(), launch.getOutputs()})
          for (Attribute ref : refs) {
            StringAttr name = cast<FlatSymbolRefAttr>(ref).getAttr();
            if (!temporaries.count(name))
              continue;
            auto [it, inserted] = toucher.try_emplace(name, role);
            if (!inserted && it->second != role)
              kept.insert(name);
          }
    }
    for (StringAttr name : kept)
      temporaries[name].setPerSlotAttr(b.getI64IntegerAttr(slots));
  }
};

} // namespace
