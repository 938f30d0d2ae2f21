//===- AutoLayout.cpp - a run's layout chosen by the planner --------------===//
//
// Part of mlt. See AutoLayout.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Run/AutoLayout.h"

#include "mlt/Analysis/Calibration.h"
#include "mlt/Planner/Planner.h"
#include "mlt/Run/PlanSource.h"
#include "mlt/Run/Prediction.h"
#include "mlt/Support/FormatBytes.h"

#ifdef MLT_HAVE_COMPILER
#include "mlt/Compiler/Driver.h"
#endif

#include <memory>
#include <optional>
#include <vector>

using namespace mlt;
using namespace mlt::run;
using namespace mlt::rt;

StatusOr<Plan> mlt::run::planAutomatically(RunOptions &o, std::string &bytes,
                                           RunObserver &observer) {
  StatusOr<InputKind> kind = classifyInput(o.model);
  if (!kind)
    return kind.takeStatus();
  if (*kind == InputKind::Plan)
    return errorf("--layout auto: ", o.model,
                  " is a plan file, whose "
                  "layout was fixed when it was compiled; pass the model");
  if (!o.batch || !o.seqLen)
    return errorf("--layout auto needs --batch (the global batch) and "
                  "--seq-len");
  StatusOr<ChosenCalibration> chosen =
      requireCalibration("--layout auto", o.calibration, o.device);
  if (!chosen)
    return chosen.takeStatus();
  PlannerRequest request;
#ifdef MLT_HAVE_COMPILER
  std::string error;
  if (!readModelShape(o.model, request.model, error))
    return Status::error(error);
#endif
  request.base = o.layout;
  request.gpus = *o.gpus;
  request.globalBatch = *o.batch;
  request.seqLen = *o.seqLen;
  if (o.gpuMemory) {
    // On the GPU, what the runtime's libraries hold beside the arena and
    // the kernels' scratch (which the planner counts per layout): the CUDA
    // context, cuBLASLt's workspaces, NCCL's buffers.
    const uint64_t reserve = o.device == "cuda" ? uint64_t(2) << 30 : 0;
    if (o.gpuMemory <= reserve)
      return errorf("--gpu-memory ", formatBytes(o.gpuMemory),
                    " leaves no "
                    "room: ",
                    formatBytes(reserve),
                    " of a GPU's memory is "
                    "kept for the runtime outside the plan's arena");
    request.arenaLimit = o.gpuMemory - reserve;
    request.limitText =
        formatBytes(o.gpuMemory) + " per GPU" +
        (reserve ? ", " + formatBytes(reserve) + " of it kept for the runtime"
                 : std::string());
  }
  request.exhaustive = o.layoutSearch == "exhaustive";
  auto candidateOf = [&](const Layout &layout) {
    RunOptions candidate = o;
    candidate.layout = layout;
    return candidate;
  };
  CandidateCompile quiet;
  quiet.quiet = true;
  // An explicit --calibration also decides the candidates' compiles (as a
  // run's): the planner's copy, read once.
  if (!o.calibration.empty())
    quiet.costs = std::make_shared<const cost::Calibration>(chosen->calibration);
  PlannerCompiler compiler;
  compiler.scratch = [&](const Plan &plan) {
    return kernelScratch(plan, o.device);
  };
  compiler.split = [&](const Layout &layout, int64_t &numLayers,
                       std::vector<int64_t> &split) -> Status {
    return stageSplit(candidateOf(layout), quiet, numLayers, split);
  };
  compiler.representatives =
      [&](const Layout &layout, int64_t layers,
          const std::vector<int64_t> &split,
          int64_t microbatches) -> StatusOr<Plan> {
    RunOptions candidate = candidateOf(layout);
    candidate.layout.ppLayers = split;
    if (microbatches) {
      // (the micro-batch's size kept: the global batch scaled with them)
      candidate.layout.microbatches = microbatches;
      candidate.batch = *o.batch / layout.microbatches * microbatches;
    }
    CandidateCompile representatives = quiet;
    representatives.layers = layers;
    representatives.representatives = true;
    std::string unused;
    return obtainPlan(candidate, unused, representatives);
  };
  compiler.whole = [&](const Layout &layout,
                       std::string &layoutBytes) -> StatusOr<Plan> {
    return obtainPlan(candidateOf(layout), layoutBytes, quiet);
  };
  PlannerObserver planner;
  planner.progress = [&](const std::string &line) { observer.progress(line); };
  planner.ranked = [&](const PlannerReport &report) {
    observer.layoutsRanked(report);
  };
  StatusOr<PlannedLayout> planned = planLayout(
      request, chosen->calibration, chosen->source, compiler, planner);
  if (!planned)
    return planned.takeStatus();
  o.layout = planned->layout;
  o.layoutSearch.clear();
  bytes = std::move(planned->bytes);
  return std::move(planned->plan);
}
