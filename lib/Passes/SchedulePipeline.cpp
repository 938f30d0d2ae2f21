//===- SchedulePipeline.cpp - the training step of a lowered module -------===//
//
// Part of mlt. Implements mlt-schedule-pipeline (Passes.td): the schedule of
// PipelineSchedule.h becomes `mlt_rt.step`, calls of the lowered bodies in
// the schedule's order, each with its micro-batch and the work it does.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/PipelineSchedule.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Runtime/PlanFormat.h"

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
  for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>())
    if (buffer.getKind() == rtir::BufferKind::gradient)
      rtir::LaunchOp::create(
          b, module.getLoc(), "fill", {},
          {FlatSymbolRefAttr::get(buffer.getSymNameAttr())},
          {buffer.getTensorType().getNumElements()}, {0.0});
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
  if (dead.empty())
    return;
  for (rtir::ProgramOp program : dead)
    program.erase();
  // Temporaries and constants that only the erased programs touched.
  for (auto buffer :
       llvm::make_early_inc_range(module.getOps<rtir::BufferOp>()))
    if ((buffer.getKind() == rtir::BufferKind::temporary ||
         buffer.getKind() == rtir::BufferKind::constant) &&
        !used.contains(buffer.getSymNameAttr()))
      buffer.erase();
}

namespace {

/// Algorithm:
/// 1. build the schedule of `schedule` for one stage (the module is not
///    split into stages yet) and the module's micro-batches, and check it;
/// 2. walk the stage's items: a forward followed by its backward becomes a
///    call of the micro-batch's forward-backward body (the first
///    micro-batch's writes the gradients, where the module has that body;
///    else a zeroing program is called first); any other item is refused;
/// 3. end with the optimizer update.
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

    OpBuilder b(module.getContext());
    rtir::ProgramOp zero;
    if (!first)
      zero = createZeroGradients(module, b);
    b.setInsertionPointToEnd(module.getBody());
    auto step = rtir::StepOp::create(b, module.getLoc(), kStepName);
    b.setInsertionPointToStart(&step.getBody().emplaceBlock());
    auto call = [&](rtir::ProgramOp program, std::optional<int64_t> mb,
                    ArrayRef<WorkItem> work) {
      rtir::CallOp::create(
          b, module.getLoc(), FlatSymbolRefAttr::get(program.getSymNameAttr()),
          mb ? b.getI64IntegerAttr(*mb) : IntegerAttr(),
          b.getDenseI64ArrayAttr(rtir::CallOp::encodeWork(work)));
    };
    if (zero)
      call(zero, std::nullopt, {});
    const std::vector<WorkItem> &work = plan.stageWork.front();
    for (size_t i = 0; i < work.size(); ++i) {
      const WorkItem &item = work[i];
      const bool fused = item.kind == WorkKind::Forward &&
                         i + 1 < work.size() &&
                         work[i + 1] == WorkItem{WorkKind::Backward,
                                                 item.microbatch, item.chunk};
      if (!fused)
        return fail(item.str() + " of the " + scheduleKindName(*kind) +
                    " schedule is not followed by its backward; separate "
                    "forward and backward bodies come with pipeline stages");
      call(item.microbatch == 0 && first ? first : micro, item.microbatch,
           {item, work[i + 1]});
      ++i;
    }
    call(optimizer, std::nullopt, {});
    // A step of one micro-batch calls micro_step_first alone.
    eraseUncalledPrograms(module);
  }
};

} // namespace
