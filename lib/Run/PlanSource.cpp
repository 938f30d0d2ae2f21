//===- PlanSource.cpp - the plan a run trains -----------------------------===//
//
// Part of mlt. See PlanSource.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Run/PlanSource.h"

#include "mlt/Analysis/Calibration.h"
#include "mlt/Layout/LayoutOptions.h"
#include "mlt/Layout/LayoutRules.h"
#include "mlt/Plan/MemoryReport.h"
#include "mlt/Run/Prediction.h"
#include "mlt/Support/FileKind.h"
#include "mlt/Support/HFModelDirectory.h"

#ifdef MLT_HAVE_COMPILER
#include "mlt/Compiler/Driver.h"
#endif
#ifdef MLT_HAVE_CUDA
#include "mlt/Runtime/cuda/CudaBackend.h"
#endif

#include <fstream>
#include <memory>
#include <sys/stat.h>

using namespace mlt;
using namespace mlt::run;
using namespace mlt::rt;

namespace {

bool isDirectory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool endsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

#ifdef MLT_HAVE_COMPILER
/// The compiler's options for `o`'s model, layout and run shape.
StatusOr<CompileOptions> compileOptionsOf(const RunOptions &o,
                                          const CandidateCompile &candidate) {
  if (!o.batch || !o.seqLen)
    return errorf(
        "compiling ", o.model,
        " needs --batch and --seq-len (the plan is compiled for them)");
  CompileOptions compile;
  compile.model = o.model;
  compile.layout = o.layout;
  compile.layers = candidate.layers;
  compile.batch = *o.batch;
  compile.seqLen = *o.seqLen;
  compile.representatives = candidate.representatives;
  compile.threads = !candidate.representatives;
  compile.verifyPasses = !candidate.representatives;
  compile.printStageSplit = o.layout.pp > 1 && !candidate.quiet;
  // The evaluation body where the run (or the plan it writes) evaluates;
  // never in the planner's candidates, which price the training step.
  compile.evaluation = o.evaluates() && !candidate.representatives;
#ifdef MLT_HAVE_CUDA
  // A plan compiled for the GPU names the architecture of this build's
  // kernels; a plan for the CPU runs anywhere.
  if (o.device == "cuda")
    compile.target = MLT_CUDA_TARGET;
#endif
  // The costs the compiler's choices weigh: --calibration's, a device
  // measured on its own plans. Not the built-in ones by default: the
  // collective matmuls the H200's left whole ran no faster than all split
  // (0.3-0.8% slower before its side-stream gathers were measured at 1-4
  // MiB, within 0.2% after: bench/RESULTS.md), so a default would change
  // plans for nothing measured.
  if (candidate.costs && !o.calibration.empty()) {
    compile.costs = candidate.costs;
  } else if (!o.calibration.empty()) {
    StatusOr<std::optional<ChosenCalibration>> costs =
        chooseCalibration(o.calibration, o.device, "");
    if (!costs)
      return costs.takeStatus();
    if (*costs)
      compile.costs = std::make_shared<const cost::Calibration>(
          std::move((*costs)->calibration));
  }
  return compile;
}

/// A refusal by the rule book: every rule broken, a line each.
Status refusal(const std::vector<Violation> &violations) {
  std::string text;
  for (const Violation &violation : violations)
    text += (text.empty() ? "" : "\n") + violation.text();
  return Status::error(text);
}
#endif

/// The compute precision of `plan`: bf16 where its parameters have bf16
/// compute copies.
Precision planPrecision(const Plan &plan) {
  for (const BufferDesc &buffer : plan.ranks.front().buffers)
    if (buffer.kind == BufferKind::ParameterCopy &&
        buffer.dtype == ElementType::BF16)
      return Precision::BF16;
  return Precision::F32;
}

} // namespace

StatusOr<InputKind> mlt::run::classifyInput(const std::string &path) {
  if (!exists(path))
    return errorf(path, ": no such file or directory");
  MLT_RETURN_IF_ERROR(checkInputPath(path, /*directoryToo=*/true));
  if (isDirectory(path)) {
    // An HF model directory, read as mlt-translate reads one.
    StatusOr<std::string> config = hfConfigPath(path);
    if (!config)
      return config.takeStatus();
    return InputKind::Model;
  }
  char header[8] = {};
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return errorf(path, ": cannot open");
  in.read(header, sizeof(header));
  if (hasPlanIdentifier(header, size_t(in.gcount())))
    return InputKind::Plan;
  if (endsWith(path, ".mlir") || endsWith(path, ".json"))
    return InputKind::Model;
  return InputKind::Plan;
}

StatusOr<Plan> mlt::run::obtainPlan(const RunOptions &o, std::string &bytes,
                                    const CandidateCompile &candidate) {
  StatusOr<InputKind> kind = classifyInput(o.model);
  if (!kind)
    return kind.takeStatus();
  if (*kind == InputKind::Plan) {
    for (const LayoutOption &option : layoutOptions())
      if (option.plan == PlanRecord::Fixed && o.given(option.name))
        return errorf("--", option.name, ": ", o.model,
                      " is a plan file, whose programs were fixed when it was "
                      "compiled; pass it when compiling the model");
    return readPlanFile(o.model, &bytes);
  }

#ifdef MLT_HAVE_COMPILER
  StatusOr<CompileOptions> compile = compileOptionsOf(o, candidate);
  if (!compile)
    return compile.takeStatus();
  std::string error;
  // The rule book first, every rule the layout breaks (the planner's
  // candidates have been held to it already).
  if (!candidate.representatives) {
    ModelShape shape;
    if (!readModelShape(o.model, shape, error))
      return Status::error(error);
    std::vector<Violation> violations =
        verify(o.layout, shape, compile->step());
    if (!violations.empty())
      return refusal(violations);
  }
  // The plan as the exporter read it back, with the checks a plan file
  // gets when it is loaded (parsePlan): the same bytes need no second read.
  Plan plan;
  if (!compileToPlan(*compile, bytes, error, &plan))
    return Status::error(error);
  return plan;
#else
  (void)candidate;
  return errorf(o.model, ": this mlt-run was built without the compiler "
                         "(MLT_ENABLE_COMPILER=OFF); compile the model to a "
                         "plan elsewhere (mlt-run MODEL --emit-plan FILE) and "
                         "pass the plan file");
#endif
}

Status mlt::run::stageSplit(const RunOptions &options,
                            const CandidateCompile &candidate,
                            int64_t &numLayers, std::vector<int64_t> &split) {
#ifdef MLT_HAVE_COMPILER
  StatusOr<CompileOptions> compile = compileOptionsOf(options, candidate);
  if (!compile)
    return compile.takeStatus();
  std::string error;
  if (!stageSplitOf(*compile, numLayers, split, error))
    return Status::error(error);
  return Status::ok();
#else
  (void)options, (void)candidate, (void)numLayers, (void)split;
  return errorf("this mlt-run was built without the compiler");
#endif
}

Status mlt::run::checkAgainstPlan(const RunOptions &o, const Plan &plan) {
  const ModelInfo &model = plan.model;
  if (o.given("microbatches") && o.layout.microbatches != model.microbatches)
    return errorf("--microbatches ", o.layout.microbatches,
                  " differs from the plan's ", model.microbatches);
  if (o.batch && *o.batch != model.globalBatch())
    return errorf("--batch ", *o.batch,
                  " differs from the plan's global batch ", model.globalBatch(),
                  " (", model.microbatches,
                  model.microbatches == 1 ? " micro-batch" : " micro-batches",
                  " of ", model.microBatch, " sequences)");
  if (o.seqLen && *o.seqLen != model.seqLen)
    return errorf("--seq-len ", *o.seqLen, " differs from the plan's ",
                  model.seqLen);
  // The plan's size of mesh axis `name`; 1 when it has no such axis.
  auto axisSize = [&](const char *name) -> int64_t {
    for (const MeshAxis &axis : plan.mesh)
      if (axis.name == name)
        return axis.size;
    return 1;
  };
  for (const ParallelAxisInfo &axis : parallelAxes()) {
    const int64_t value = o.layout.*axis.size;
    if (o.given(axis.name) && value != axisSize(axis.name))
      return errorf("--", axis.name, " ", value, " differs from the plan's ",
                    axis.name, " ", axisSize(axis.name), " (its mesh: ",
                    plan.mesh.empty() ? std::string("none, one rank")
                                      : describeMesh(plan),
                    ")");
  }
  if (o.given("dtype")) {
    const Precision precision = planPrecision(plan);
    if (o.layout.dtype != precision)
      return errorf(
          "--dtype ", precisionName(o.layout.dtype),
          ": the plan was compiled with --dtype ", precisionName(precision),
          "; compile the model with --dtype ", precisionName(o.layout.dtype));
  }
  if (o.given("zero")) {
    const int64_t zero = zeroStage(plan);
    if (o.layout.zero != zero)
      return errorf("--zero ", o.layout.zero,
                    ": the plan was compiled with --zero ", zero,
                    zero ? " (its optimizer state partitioned over dp)"
                         : " (every rank keeps the whole optimizer "
                           "state)",
                    "; compile the model with --zero ", o.layout.zero);
  }
  if (model.seqLen > model.maxPositionEmbeddings)
    return errorf("--seq-len ", model.seqLen,
                  " exceeds the model's max_position_embeddings ",
                  model.maxPositionEmbeddings);
  if (o.evaluates() && !hasEvaluation(plan))
    return errorf(o.split ? "--split" : "--eval-data", ": ", o.model,
                  " has no evaluation step (it was compiled without one); "
                  "compile the model with --eval-data or --split (mlt-run "
                  "MODEL --emit-plan FILE --split ...), or mlt-opt's "
                  "mlt-train-pipeline with eval");
  return Status::ok();
}

std::string mlt::run::describeMesh(const Plan &plan) {
  std::string text;
  for (size_t i = 0; i < plan.mesh.size(); ++i)
    text += (i ? ", " : "") + plan.mesh[i].name + "=" +
            std::to_string(plan.mesh[i].size);
  return text;
}

std::vector<uint64_t> mlt::run::kernelScratch(const Plan &plan,
                                              const std::string &device) {
  std::vector<uint64_t> scratch;
#ifdef MLT_HAVE_CUDA
  if (device == "cuda") {
    // (Sizes only: the backend touches no device until a context is made.)
    const std::unique_ptr<Backend> backend = createCudaBackend();
    for (const RankPlan &rank : plan.ranks)
      scratch.push_back(backend->scratchBytes(rank, plan.mesh));
  }
#else
  (void)plan;
  (void)device;
#endif
  return scratch;
}
