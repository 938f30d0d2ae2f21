//===- RunChecks.cpp - a run's options checked before it starts -----------===//
//
// Part of mlt. See RunChecks.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Run/RunChecks.h"

#include "mlt/Layout/LayoutOptions.h"
#include "mlt/Run/PlanSource.h"
#include "mlt/Runtime/io/DataBlend.h"
#include "mlt/Runtime/io/SafeTensors.h"
#include "mlt/Support/FileKind.h"

#ifdef MLT_HAVE_CUDA
#include "mlt/Runtime/cuda/CudaBackend.h"
#endif

#include <utility>
#include <vector>

using namespace mlt;
using namespace mlt::run;
using namespace mlt::rt;

namespace {

/// "1 rank (no mesh)", "4 ranks (mesh dp=2, tp=2)".
std::string describePlanRanks(const Plan &plan) {
  const size_t ranks = plan.ranks.size();
  return std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") +
         (plan.mesh.empty() ? std::string(" (no mesh)")
                            : " (mesh " + describeMesh(plan) + ")");
}

} // namespace

Status mlt::run::validateEvaluation(const RunOptions &o) {
  if (!o.evalData.empty() && o.split)
    return errorf("--eval-data names the evaluation data and --split holds "
                  "part of --data out for it; give one");
  for (auto [flag, given] : {std::pair{"--eval-every", o.evalEvery.has_value()},
                             std::pair{"--eval-iters", o.evalIters.has_value()}})
    if (given && !o.evaluates())
      return errorf(flag, " sets how the run evaluates; pass --eval-data "
                          "DATASET (or --split TRAIN,EVAL to hold part of "
                          "--data out)");
  for (auto [flag, value] : {std::pair{"--eval-every", o.evalEvery},
                             std::pair{"--eval-iters", o.evalIters}})
    if (value && *value < 1)
      return errorf(flag, " must be at least 1, got ", *value);
  if (o.steps && *o.steps == 0) {
    // A run of no step evaluates the weights it starts from, once.
    for (auto [flag, given] :
         {std::pair{"--eval-every", o.evalEvery.has_value()},
          std::pair{"--save-checkpoint", !o.saveCheckpoint.empty()},
          std::pair{"--resume", !o.resume.empty()},
          std::pair{"--dump-grads", !o.dumpGrads.empty()},
          std::pair{"--profile-step", o.profileStep.has_value()},
          std::pair{"--trace", !o.trace.empty()},
          std::pair{"--save-hf-every", o.saveHFEvery.has_value()}})
      if (given)
        return errorf("--steps 0 evaluates the weights it starts from and "
                      "trains nothing; ", flag, " needs a step");
  }
  return Status::ok();
}

Status mlt::run::validate(const RunOptions &o) {
  if (o.device != "cpu" && o.device != "cuda")
    return errorf("--device: expected cpu or cuda, got '", o.device, "'");
  if (o.schedule != "constant" && o.schedule != "cosine")
    return errorf("--lr-schedule: expected constant or cosine, got '",
                  o.schedule, "'");
  auto atLeast = [](const char *flag, const std::optional<int64_t> &value,
                    int64_t min) -> Status {
    if (value && *value < min)
      return errorf(flag, " must be at least ", min, ", got ", *value);
    return Status::ok();
  };
  MLT_RETURN_IF_ERROR(atLeast("--batch", o.batch, 1));
  MLT_RETURN_IF_ERROR(atLeast("--seq-len", o.seqLen, 1));
  MLT_RETURN_IF_ERROR(atLeast("--steps", o.steps, o.evaluates() ? 0 : 1));
  MLT_RETURN_IF_ERROR(validateEvaluation(o));
  MLT_RETURN_IF_ERROR(atLeast("--profile-step", o.profileStep, 1));
  if (o.profileStep && o.steps && *o.profileStep > *o.steps)
    return errorf("--profile-step ", *o.profileStep,
                  " is after the last step (", *o.steps, ")");
  MLT_RETURN_IF_ERROR(atLeast("--warmup", o.warmup, 0));
  MLT_RETURN_IF_ERROR(atLeast("--save-every", o.saveEvery, 1));
  MLT_RETURN_IF_ERROR(atLeast("--keep-last", o.keepLast, 1));
  MLT_RETURN_IF_ERROR(atLeast("--save-hf-every", o.saveHFEvery, 1));
  if (o.saveHFEvery && o.saveHF.empty())
    return errorf("--save-hf-every sets how often --save-hf saves; pass "
                  "--save-hf DIR");
  for (auto [flag, given] :
       {std::pair{"--save-every", o.saveEvery.has_value()},
        std::pair{"--keep-last", o.keepLast.has_value()},
        std::pair{o.asyncSave.value_or(true) ? "--async-save"
                                             : "--no-async-save",
                  o.asyncSave.has_value()}})
    if (given && o.saveCheckpoint.empty())
      return errorf(flag, " sets how --save-checkpoint saves; pass "
                          "--save-checkpoint DIR");
  if (o.layoutSearch.empty() && (o.gpus || o.gpuMemory))
    return errorf(o.gpus ? "--gpus" : "--gpu-memory",
                  " sets what --layout auto plans for; pass --layout auto");
  if (!o.layoutSearch.empty()) {
    if (!o.gpus)
      return errorf("--layout auto needs --gpus N (the GPUs to lay the step "
                    "out on)");
    MLT_RETURN_IF_ERROR(atLeast("--gpus", o.gpus, 1));
    for (const LayoutOption &option : layoutOptions())
      if (option.plannerChooses && o.given(option.name))
        return errorf("--layout auto chooses --", option.name,
                      " itself; leave it out (or pass the layout without "
                      "--layout auto)");
  }
  if (!o.calibrate.empty() && o.steps && *o.steps < 3)
    return errorf("--calibrate needs --steps 3 or more (one step to set up, "
                  "one profiled, and the others to measure the step time), "
                  "got ",
                  *o.steps);
  if (!o.calibrate.empty() && !o.calibration.empty())
    return errorf("--calibrate measures this device's calibration; "
                  "--calibration would price the run by another");
  if (o.tuneMatmuls && o.matmulAlgorithms.empty())
    return errorf("--tune-matmuls writes the tuned algorithms into "
                  "--matmul-algorithms FILE; pass one");
  if (!o.matmulAlgorithms.empty() && o.device != "cuda")
    return errorf(o.tuneMatmuls ? "--tune-matmuls" : "--matmul-algorithms",
                  " chooses the CUDA backend's cuBLASLt algorithms; pass "
                  "--device cuda");
  if (!o.resume.empty() && !o.initFrom.empty())
    return errorf("--resume takes the weights from its checkpoint; "
                  "--init-from would replace them");
  if (o.allowDataChange && o.resume.empty())
    return errorf("--allow-data-change sets what --resume accepts; pass "
                  "--resume DIR");
  if (o.allowOptimizerChange && o.resume.empty())
    return errorf("--allow-optimizer-change sets what --resume accepts; "
                  "pass --resume DIR");
  if (o.lrDecaySteps && o.schedule != "cosine")
    return errorf("--lr-decay-steps sets where the cosine reaches --min-lr; "
                  "pass --lr-schedule cosine");
  if (o.lrDecaySteps && *o.lrDecaySteps <= o.warmup)
    return errorf("--lr-decay-steps (", *o.lrDecaySteps,
                  ") must exceed --warmup (", o.warmup,
                  "): the cosine decays after the warmup");
  auto nonNegative = [](const char *flag, double value) -> Status {
    if (value < 0)
      return errorf(flag, " must not be negative, got ", value);
    return Status::ok();
  };
  MLT_RETURN_IF_ERROR(nonNegative("--lr", o.lr));
  MLT_RETURN_IF_ERROR(nonNegative("--min-lr", o.minLR));
  if (o.minLR > o.lr)
    return errorf("--min-lr (", o.minLR, ") must not exceed --lr (", o.lr,
                  "): the learning rate decays from --lr to --min-lr");
  if (!(o.eps > 0))
    return errorf("--adam-eps must be positive (AdamW divides by the root "
                  "of the second moment plus it, which starts at 0), got ",
                  o.eps);
  MLT_RETURN_IF_ERROR(nonNegative("--weight-decay", o.weightDecay));
  if (o.collectiveTimeout != 0 &&
      !(o.collectiveTimeout >= 0.1 && o.collectiveTimeout <= 1e9))
    return errorf("--collective-timeout must be 0 (no hang watchdog) or "
                  "from 0.1 to 1e9 seconds, got ",
                  o.collectiveTimeout);
  MLT_RETURN_IF_ERROR(nonNegative("--clip-grad", o.clipGrad));
  for (auto [flag, beta] :
       {std::pair<const char *, double>{"--adam-beta1", o.beta1},
        {"--adam-beta2", o.beta2}})
    if (beta < 0 || beta >= 1)
      return errorf(flag, " must be in [0, 1), got ", beta);
  return Status::ok();
}

Status mlt::run::checkPaths(const RunOptions &o) {
  struct Input {
    const char *flag;
    std::string path;
  };
  std::vector<Input> inputs = {{"MODEL_OR_PLAN", o.model}};
  for (auto [flag, sources] : {std::pair{"--data", &o.data},
                                std::pair{"--eval-data", &o.evalData}})
    for (const DataSourceSpec &source : *sources) {
      StatusOr<ResolvedDataPath> resolved = resolveDataPath(source.path);
      if (!resolved)
        return resolved.takeStatus().withContext(flag);
      for (const std::string &file : resolved->files)
        inputs.push_back({flag, file});
    }
  if (!o.initFrom.empty()) {
    MLT_RETURN_IF_ERROR(checkInputPath(o.initFrom, /*directoryToo=*/true)
                            .withContext("--init-from"));
    inputs.push_back({"--init-from", o.initFrom});
  }
  if (!o.resume.empty()) {
    MLT_RETURN_IF_ERROR(checkInputPath(o.resume, /*directoryToo=*/true)
                            .withContext("--resume"));
    inputs.push_back({"--resume", o.resume});
  }
  if (!o.calibration.empty()) {
    MLT_RETURN_IF_ERROR(checkInputPath(o.calibration, /*directoryToo=*/false)
                            .withContext("--calibration"));
    inputs.push_back({"--calibration", o.calibration});
  }
  // A table to read; one to tune is an output below (read too when it
  // exists).
  if (!o.matmulAlgorithms.empty() && !o.tuneMatmuls) {
    MLT_RETURN_IF_ERROR(checkInputPath(o.matmulAlgorithms,
                                       /*directoryToo=*/false)
                            .withContext("--matmul-algorithms"));
    inputs.push_back({"--matmul-algorithms", o.matmulAlgorithms});
  }
  struct Output {
    const char *flag;
    const std::string &path;
    bool directory;
  };
  std::vector<Output> outputs;
  static const std::string kNoPath;
  for (Output output :
       {Output{"--log-json", o.logJson, false},
        Output{"--dump-grads", o.dumpGrads, false},
        Output{"--emit-plan", o.emitPlan, false},
        Output{"--trace", o.trace, false},
        Output{"--calibrate", o.calibrate, false},
        Output{"--matmul-algorithms",
               o.tuneMatmuls ? o.matmulAlgorithms : kNoPath, false},
        Output{"--save-hf", o.saveHF, true},
        Output{"--tensorboard", o.tensorboard, true},
        Output{"--save-checkpoint", o.saveCheckpoint, true}}) {
    if (output.path.empty())
      continue;
    MLT_RETURN_IF_ERROR(checkOutputPath(output.path, output.directory)
                            .withContext(output.flag));
    MLT_RETURN_IF_ERROR(probeOutputPath(output.path, output.directory)
                            .withContext(output.flag));
    // (Before the first step: the weights are not lost to a refusal at the
    // end.)
    if (&output.path == &o.saveHF)
      MLT_RETURN_IF_ERROR(
          rt::checkReplaceableCheckpointDir(o.saveHF).withContext("--save-hf"));
    for (const Input &input : inputs)
      if (sameFile(output.path, input.path) && !output.directory)
        return errorf(output.flag, ": ", output.path, " is the ", input.flag,
                      " file; writing it would destroy the input");
    for (const Output &other : outputs)
      if (other.path == output.path || sameFile(other.path, output.path))
        return errorf(output.flag, " and ", other.flag, " name one file, ",
                      output.path);
    outputs.push_back(output);
  }
  return Status::ok();
}

Status mlt::run::checkWorld(const RunOptions &o, const Plan &plan,
                            const Launch &launch) {
  if (o.device != "cuda")
    return Status::ok();
  const int ranks = int(plan.ranks.size());
  if (o.tuneMatmuls && ranks != 1)
    return errorf("--tune-matmuls tunes one GPU and the plan has ",
                  describePlanRanks(plan),
                  ": tune with the one-rank plan of a rank's micro-batch, "
                  "then pass its table to every rank with "
                  "--matmul-algorithms");
  const int processes = launch.worldSize();
  if (ranks == processes)
    return Status::ok();
  if (!launch.launched())
    return errorf("the plan has ", describePlanRanks(plan),
                  "; with --device cuda each rank is a process of its own on "
                  "its own GPU: start it with mpirun -np ",
                  ranks, " mlt-run ", o.model,
                  " --device cuda ... (or run its ranks as threads of one "
                  "process with --device cpu)");
  if (ranks == 1)
    return errorf("the plan has ", describePlanRanks(plan),
                  " but mpirun "
                  "started ",
                  processes,
                  " processes; run it without mpirun "
                  "(or with -np 1)");
  return errorf("the plan has ", describePlanRanks(plan),
                " but mpirun "
                "started ",
                processes, " processes; start it with mpirun -np ", ranks);
}

Status mlt::run::checkDevice(const RunOptions &o) {
  if (o.device == "cuda") {
#ifdef MLT_HAVE_CUDA
    int count = 0;
    Status status = probeCudaDevices(count);
    if (!status)
      return errorf("--device cuda: ", status.message());
    return Status::ok();
#else
    return errorf("--device cuda: this mlt-run has no CUDA backend yet; use "
                  "--device cpu");
#endif
  }
  return Status::ok();
}
