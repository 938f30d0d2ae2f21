//===- SchedulePipeline.cpp - the training step of a lowered module -------===//
//
// Part of mlt. Implements mlt-schedule-pipeline (Passes.td): the schedule of
// PipelineSchedule.h becomes `mlt_rt.step`, calls of the lowered bodies in
// the schedule's order, each with its micro-batch (and slot) and the work it
// does; a schedule that separates a micro-batch's forward from its backward
// splits the bodies and keeps the activations between them per slot.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/PipelineSchedule.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Runtime/plan/KernelInfo.h"
#include "mlt/Runtime/plan/PlanFormat.h"

namespace mlt {
#define GEN_PASS_DEF_MLTSCHEDULEPIPELINE
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;
namespace abi = mlt::rt;

namespace {

/// The step's name in the IR (the plan file holds each rank's step
/// unnamed).
constexpr llvm::StringLiteral kStepName = "step";

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

/// The temporaries among `refs`.
void addTemporaries(ArrayAttr refs, const DenseSet<StringAttr> &temporaries,
                    DenseSet<StringAttr> &out) {
  for (Attribute ref : refs)
    if (temporaries.contains(cast<FlatSymbolRefAttr>(ref).getAttr()))
      out.insert(cast<FlatSymbolRefAttr>(ref).getAttr());
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

/// Renames the temporaries of `program`'s launches by `renamed`.
void renameOperands(rtir::ProgramOp program,
                    const DenseMap<StringAttr, StringAttr> &renamed,
                    OpBuilder &b) {
  auto rename = [&](ArrayAttr refs) {
    SmallVector<Attribute> out;
    for (Attribute ref : refs) {
      StringAttr name = cast<FlatSymbolRefAttr>(ref).getAttr();
      auto it = renamed.find(name);
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

/// Algorithm:
/// 1. build the schedule of `schedule` for one stage (the module is not
///    split into stages yet) and the module's micro-batches, and check it;
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
/// 4. end with the optimizer update, and erase the programs no call runs.
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
      return fail("unknown schedule '" + schedule + "' (1f1b or gpipe)");
    if (module.lookupSymbol(kStepName))
      return fail("the module has a @" + kStepName + " already");
    auto micro = module.lookupSymbol<rtir::ProgramOp>(abi::kMicroStepProgram);
    auto optimizer =
        module.lookupSymbol<rtir::ProgramOp>(abi::kOptimizerStepProgram);
    if (!micro || !optimizer)
      return fail(Twine("needs the programs @") + abi::kMicroStepProgram +
                  " and @" + abi::kOptimizerStepProgram +
                  " (run mlt-lower-to-runtime first)");
    auto first =
        module.lookupSymbol<rtir::ProgramOp>(abi::kMicroStepFirstProgram);
    int64_t microbatches = 1;
    if (auto attr = module->getAttrOfType<IntegerAttr>("mlt_rt.microbatches"))
      microbatches = attr.getInt();
    if (microbatches < 1)
      return fail("the module has " + Twine(microbatches) + " micro-batches");

    PipelineSchedule plan = buildSchedule(*kind, /*stages=*/1, microbatches);
    std::string why;
    if (!plan.verify(&why))
      return fail("the " + Twine(scheduleKindName(*kind)) +
                  " schedule is invalid: " + why);
    const std::vector<WorkItem> &work = plan.stageWork.front();
    bool fused = true;
    for (size_t i = 0; i < work.size(); i += 2)
      fused &= work[i].kind == WorkKind::Forward && i + 1 < work.size() &&
               work[i + 1] == WorkItem{WorkKind::Backward, work[i].microbatch,
                                       work[i].chunk};

    OpBuilder b(module.getContext());
    rtir::ProgramOp zero;
    if (!first)
      zero = createZeroGradients(module, b);
    SmallVector<Call> calls;
    if (zero)
      calls.push_back({zero, std::nullopt, std::nullopt, {}});
    if (fused) {
      for (size_t i = 0; i < work.size(); i += 2)
        calls.push_back({work[i].microbatch == 0 && first ? first : micro,
                         work[i].microbatch, std::nullopt,
                         {work[i], work[i + 1]}});
    } else if (failed(splitBodies(module, micro, first, work, calls, b))) {
      return signalPassFailure();
    }
    calls.push_back({optimizer, std::nullopt, std::nullopt, {}});

    b.setInsertionPointToEnd(module.getBody());
    auto step = rtir::StepOp::create(b, module.getLoc(), kStepName);
    b.setInsertionPointToStart(&step.getBody().emplaceBlock());
    for (Call &call : calls)
      rtir::CallOp::create(
          b, module.getLoc(),
          FlatSymbolRefAttr::get(call.program.getSymNameAttr()),
          call.microbatch ? b.getI64IntegerAttr(*call.microbatch)
                          : IntegerAttr(),
          call.slot ? b.getI64IntegerAttr(*call.slot) : IntegerAttr(),
          b.getDenseI64ArrayAttr(rtir::CallOp::encodeWork(call.work)));
    // A step of one micro-batch calls micro_step_first alone.
    eraseUncalledPrograms(module);
  }

private:
  struct Call {
    rtir::ProgramOp program;
    std::optional<int64_t> microbatch, slot;
    SmallVector<WorkItem> work;
  };

  /// Step 3: the split bodies, the kept temporaries' copies per slot, and a
  /// call per item of `work`.
  LogicalResult splitBodies(ModuleOp module, rtir::ProgramOp micro,
                            rtir::ProgramOp first, ArrayRef<WorkItem> work,
                            SmallVectorImpl<Call> &calls, OpBuilder &b) {
    auto startOf = [&](rtir::ProgramOp program) -> FailureOr<size_t> {
      if (!program.getBackwardStartAttr())
        return module.emitError("mlt-schedule-pipeline: the ")
               << scheduleKindName(*parseScheduleKind(schedule))
               << " schedule separates forward and backward passes, but @"
               << program.getSymName()
               << " does not say where its backward pass starts";
      return size_t(program.getBackwardStartAttr().getInt());
    };
    FailureOr<size_t> microStart = startOf(micro);
    if (failed(microStart))
      return failure();
    DenseSet<StringAttr> temporaries;
    DenseMap<StringAttr, rtir::BufferOp> buffers;
    for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>()) {
      buffers[buffer.getSymNameAttr()] = buffer;
      if (buffer.getKind() == rtir::BufferKind::temporary)
        temporaries.insert(buffer.getSymNameAttr());
    }
    const size_t microEnd = llvm::range_size(micro.getBody().getOps());
    // The backward half first: moving the forward half renumbers the rest.
    rtir::ProgramOp backward = moveLaunches(micro, *microStart, microEnd,
                                            abi::kBackwardProgram, micro, b);
    rtir::ProgramOp forward = moveLaunches(micro, 0, *microStart,
                                           abi::kForwardProgram, micro, b);
    rtir::ProgramOp backwardFirst;
    if (first) {
      FailureOr<size_t> firstStart = startOf(first);
      if (failed(firstStart))
        return failure();
      // micro_step_first's forward pass is micro_step's (it differs in the
      // gradients' first writes only): its backward reads forward's
      // temporaries.
      std::optional<DenseMap<StringAttr, StringAttr>> renamed;
      if (*firstStart == *microStart)
        renamed = matchForward(forward, first, *firstStart, temporaries);
      if (!renamed)
        return module.emitError("mlt-schedule-pipeline: the forward pass of "
                                "@")
               << first.getSymName() << " is not @" << micro.getSymName()
               << "'s";
      const size_t firstEnd = llvm::range_size(first.getBody().getOps());
      backwardFirst =
          moveLaunches(first, *firstStart, firstEnd,
                       abi::kBackwardFirstProgram, backward, b);
      renameOperands(backwardFirst, *renamed, b);
    }
    micro.erase();
    if (first)
      first.erase();

    // The temporaries kept from the forward to the backward call.
    DenseSet<StringAttr> forwardTemps, backwardTemps;
    for (rtir::ProgramOp program : {forward, backward, backwardFirst}) {
      if (!program)
        continue;
      DenseSet<StringAttr> &into =
          program == forward ? forwardTemps : backwardTemps;
      for (auto launch : program.getBody().getOps<rtir::LaunchOp>()) {
        addTemporaries(launch.getInputs(), temporaries, into);
        addTemporaries(launch.getOutputs(), temporaries, into);
      }
    }
    // Slots: the lowest free one at each forward, back at its backward.
    std::vector<bool> busy;
    DenseMap<int64_t, int64_t> slotOf;
    bool firstBackward = true;
    for (const WorkItem &item : work) {
      if (item.kind == WorkKind::Forward) {
        size_t slot = 0;
        while (slot < busy.size() && busy[slot])
          ++slot;
        if (slot == busy.size())
          busy.push_back(false);
        busy[slot] = true;
        slotOf[item.microbatch] = int64_t(slot);
        calls.push_back({forward, item.microbatch, int64_t(slot), {item}});
        continue;
      }
      const int64_t slot = slotOf.lookup(item.microbatch);
      busy[size_t(slot)] = false;
      calls.push_back({firstBackward && backwardFirst ? backwardFirst
                                                      : backward,
                       item.microbatch, slot, {item}});
      firstBackward = false;
    }
    const int64_t slots = int64_t(busy.size());
    for (StringAttr name : forwardTemps)
      if (backwardTemps.contains(name))
        buffers[name].setPerSlotAttr(b.getI64IntegerAttr(slots));
    return success();
  }
};

} // namespace
