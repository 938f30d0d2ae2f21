//===- mlt-run.cpp - train a model from a plan ----------------------------===//
//
// Part of mlt. Loads a plan file (or, when built with the compiler, compiles
// a .mlir model or an HF config.json in process), checks the run against it,
// initializes or loads the weights, trains on a token file for --steps
// optimizer steps, logs one line per step, and saves an HF checkpoint. A plan
// of several ranks runs them as threads of this process (RankGroup), each on
// its block of the data and of the weights; on GPUs, as one process per GPU
// started by mpirun, each running its own rank over NCCL (Distributed.h:
// rank 0 prints, logs and saves; failures before the collectives start are
// agreed by every process and reported once, failures after them abort the
// job). Every error is one line, `mlt-run: error: <message>`, and exit
// status 1.
//
//===----------------------------------------------------------------------===//

#include "Prediction.h"
#include "mlt/Analysis/LayoutSpace.h"
#include "mlt/Analysis/StepReport.h"
#include "mlt/Layout/LayoutOptions.h"
#include "mlt/Layout/LayoutRules.h"
#include "mlt/Plan/MemoryReport.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Planner/Planner.h"
#include "mlt/Runtime/exec/Backend.h"
#include "mlt/Runtime/exec/Executor.h"
#include "mlt/Runtime/exec/HostMemory.h"
#include "mlt/Runtime/exec/Profile.h"
#include "mlt/Runtime/exec/RankGroup.h"
#include "mlt/Runtime/exec/Trace.h"
#include "mlt/Runtime/io/DataBlend.h"
#include "mlt/Runtime/io/SafeTensors.h"
#include "mlt/Runtime/io/TokenData.h"
#include "mlt/Runtime/train/Checkpoint.h"
#include "mlt/Runtime/train/Parameters.h"
#include "mlt/Runtime/train/Training.h"
#include "mlt/Support/AtomicFile.h"
#include "mlt/Support/FileKind.h"
#include "mlt/Support/FormatBytes.h"

#ifdef MLT_HAVE_COMPILER
#include "mlt/Compiler/Driver.h"
#endif
#ifdef MLT_HAVE_CUDA
#include "mlt/Runtime/cuda/CudaBackend.h"
#include "mlt/Runtime/cuda/NcclCommunicator.h"
#include "mlt/Runtime/mpi/Distributed.h"
#include "mlt/Runtime/mpi/MpiBootstrap.h"
#endif

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::tool;

namespace {

const char *kUsageHead = R"(usage: mlt-run MODEL_OR_PLAN [options]

Trains a LLaMA model. MODEL_OR_PLAN is a plan file (recognized by its content,
the FlatBuffers identifier "MLTP", whatever its name), or, when mlt-run is built
with the compiler, a .mlir model, an HF config.json, or a directory holding one
(compiled in process for --batch, --seq-len and the layout).

Run:
  --device cpu|cuda          backend (default cpu); cuda needs a build with
                             MLT_ENABLE_CUDA; a plan of N ranks runs on N
                             GPUs as N processes: mpirun -np N mlt-run ...
  --init-from PATH           initial weights: an HF checkpoint directory, a
                             .safetensors file, or a training checkpoint (its
                             weights alone), loaded by HF name (default: fresh
                             HF-style init, normal(0, 0.02) for matrices and
                             embeddings, 1 for norm weights)
  --seed N                   seeds the init and the data order (default 1234)

Data:
  --data DATASET             the training data (default: the bundled corpus
                             data/kjv-genesis-exodus.txt): a Megatron indexed
                             dataset (PREFIX.bin + PREFIX.idx, as mlt-tokenize
                             writes them), named PREFIX, PREFIX.idx or
                             PREFIX.bin; or a raw token file: .u16/.u32
                             little-endian token ids, .txt bytes (vocab 256)
  --data W1 DATASET1 W2 DATASET2 ...
                             a blend: each sample from one dataset, in the
                             proportions of the weights (normalized), as
                             Megatron's BlendedDataset assigns them; each
                             dataset goes through its own epochs
  --no-shuffle               visit the samples in file order (indexed
                             datasets: documents in file order too)
  --allow-data-change        with --resume: go on from a checkpoint trained
                             on other data (checked by default: datasets,
                             weights, token counts, index hashes)
  --batch N                  sequences per optimizer step (global batch)
  --seq-len N                tokens per sequence
  --steps N                  optimizer steps
)";

/// After the layout's options.
const char *kUsageTail =
    R"(Optimizer (AdamW, PyTorch semantics; weight decay on 2+-dim parameters):
  --lr X                     peak learning rate (default 3e-4)
  --min-lr X                 final learning rate of the cosine (default 0)
  --warmup N                 linear warmup steps (default 0)
  --lr-schedule constant|cosine   (default constant). For step s = 1..steps:
                               s <= warmup:  lr * s / warmup
                               constant:     lr
                               cosine:       min_lr + 0.5 * (lr - min_lr)
                                 * (1 + cos(pi * (s - warmup) / (steps - warmup)))
                             so the cosine reaches min_lr at the last step.
  --adam-beta1 X             (default 0.9)
  --adam-beta2 X             (default 0.95)
  --adam-eps X               (default 1e-8)
  --weight-decay X           (default 0.1)
  --clip-grad X              clip the global gradient norm to X; 0: off (default 1)

Output:
  --log-json FILE            one JSON object per step: step, loss, grad_norm, lr,
                             tokens_per_s, step_time_s, tokens
  --save-hf DIR              after training, write DIR/config.json and
                             DIR/model.safetensors (f32), replacing DIR atomically
  --save-hf-every N          with --save-hf: also every N steps (DIR replaced
                             each time, atomically)
  --save-checkpoint DIR      write training checkpoints under DIR, each in
                             DIR/step-NNNNNN (the f32 master weights and
                             AdamW's moments, every rank writing its own
                             part, with an index; the step and the data
                             order), DIR/latest naming the newest; each
                             written whole before it is named, so a killed
                             run leaves the last one loadable (mlt-checkpoint
                             to-hf turns one into an HF checkpoint); SIGINT,
                             SIGTERM, SIGHUP or SIGUSR1 end the current
                             step, write one and stop (exit 0); under
                             mpirun, signal the ranks, not mpirun (whose
                             SIGTERM kills them at once)
  --save-every N             with --save-checkpoint: every N steps (and at
                             the end; default: at the end only)
  --keep-last K              with --save-checkpoint: keep the newest K
                             checkpoints (default: all)
  --resume DIR               go on from the checkpoint DIR (a --save-checkpoint
                             directory: its latest; or one step-NNNNNN): its
                             weights, moments and step, whatever layout saved
                             it; --steps stays the run's total, so a run of
                             --steps 6 resumed at step 3 runs steps 4 to 6
  --dump-grads FILE          write the gradients of step 1 (summed over its
                             micro-batches, before clipping) as safetensors
  --profile-step N           time every launch of step N on the device (rank
                             0) and print where the step's time goes: per
                             kernel, its share and the TFLOP/s or GB/s it
                             reached, then the instruction shapes that took
                             longest; take a step after the first (which sets
                             up libraries)
  --trace FILE               write the measured timeline of one step (the
                             --profile-step one, else step 2, or 1 when there
                             is one) as a Chrome/Perfetto trace: every rank a
                             process, every stream a thread, every launch an
                             event with its kernel, program and rate; open it
                             at ui.perfetto.dev
  --calibration FILE         price the plan's launches by FILE (written by
                             --calibrate) rather than the calibration built
                             in for the run's device (calibration/h100.json
                             for an H100); with one, a run states its
                             predicted step time before training and the
                             measured one after, and --trace draws the
                             prediction beside the measured step
  --calibrate FILE           measure this device: time every launch of one
                             step (as --trace) on every rank, take each
                             kernel class's time against its work, fit the
                             launch gap so that the step predicted from them
                             takes the measured step's time, and write (or
                             merge into, for the same device) the
                             calibration FILE; needs --steps 3 or more
  --report                   print, before anything runs, each rank's
                             memory (as --report-memory) and the predicted
                             step: its time and tokens/s, and per rank the
                             compute by kernel, the communication and how
                             much of it no compute hides, and the idle time;
                             from --calibration, else the calibration built
                             in for --device; and exit
  --layout auto              let the planner choose the layout: every tp x
                             pp x dp of --gpus N GPUs, with vp, ZeRO stage
                             and micro-batches, compiled shallow and
                             extrapolated to the model's depth; those whose
                             largest arena exceeds --gpu-memory tried again
                             with sequence parallelism and recomputed
                             SwiGLU; the rest ranked by the step the cost
                             model predicts (--calibration, else the one
                             built in for --device), the fastest confirmed
                             at their depth; the five fastest printed with
                             what bounds each, and the fastest compiled for
                             the run (or --emit-plan, --report)
  --layout exhaustive        the same, every layout compiled at its depth
  --gpus N                   with --layout auto: the GPUs to lay out
  --gpu-memory SIZE          with --layout auto: each GPU's memory (80GiB,
                             79.6GB, bytes), of which 2 GiB are kept for the
                             runtime outside the arena on --device cuda;
                             default: no limit
  --matmul-algorithms FILE   run the matrix products (--device cuda) with the
                             cuBLASLt algorithms of FILE, a table tuned on
                             this kind of GPU with this cuBLASLt by
                             --tune-matmuls (calibration/matmuls/h100.json:
                             the H100's, for the benchmarked shapes);
                             shapes it lacks take cuBLASLt's heuristic's
                             first choice, as without it; every run with one
                             table computes the same bits
  --tune-matmuls             with --matmul-algorithms FILE (made when
                             missing): time each of cuBLASLt's candidates
                             for every product shape FILE lacks on its first
                             run (the first step) and add the fastest to
                             FILE; one-rank plans only (a rank of a larger
                             plan runs a one-rank plan's shapes of its
                             micro-batch)
  --print-plan               print the plan (buffers, programs, step) and exit
  --print-schedule           print each rank's schedule ("rank 0: F0.0 B0.0
                             F1.0 B1.0 ...") and exit
  --report-memory            print each rank's memory before anything runs
                             (exact: the arena is planned): parameters,
                             compute copies, gradients, optimizer state, in
                             MiB and bytes per parameter, and the
                             activations' planned peak; and exit
  --emit-plan FILE           write the plan file (e.g. compiled here, to run
                             elsewhere) and exit
  --help                     this text
  --help-layout-rules        the rules a layout keeps, each by its name (the
                             name a refusal ends with)

With a plan file, --batch, --seq-len and --microbatches default to the plan's
and must agree with it when given (--batch is the global batch, whatever the
plan's mesh). A plan of several ranks (a mesh such as dp=2,tp=2, laid out by
the compiler for --dp 2 --tp 2) runs every rank as a thread of this process
with --device cpu, and as one process per GPU with --device cuda, started by
  mpirun -np 4 mlt-run PLAN --device cuda ...
(collectives over NCCL; the process of rank 0 prints, logs and saves). Each
rank reads its block of every micro-batch and holds its block of each weight;
--init-from, --save-hf and --dump-grads see whole tensors. One line per step
goes to stdout:
  step    3/100  loss 5.5563  lr 3.00e-03  grad_norm 1.2512  tokens/s 12345
)";

/// The usage text: the layout's options from their table
/// (mlt/Layout/LayoutOptions.h) between the run's and the optimizer's.
std::string usage() {
  return std::string(kUsageHead) +
         "\nLayout (pp * dp * tp ranks, run as threads of this process with "
         "--device cpu,\none process per GPU with --device cuda; compiled "
         "into the plan: with a plan\nfile, --tp, --dp, --pp, --zero, "
         "--microbatches and --dtype must match it and\nthe others are "
         "refused; --help-layout-rules lists the rules a layout keeps):\n" +
         layoutUsage(LayoutSection::Mesh) + "\nPipeline and step:\n" +
         layoutUsage(LayoutSection::Pipeline) + "\nMemory:\n" +
         layoutUsage(LayoutSection::Memory) + "\nPrecision:\n" +
         layoutUsage(LayoutSection::Precision) + "\nOverlap:\n" +
         layoutUsage(LayoutSection::Overlap) + "\n" + kUsageTail;
}

struct Options {
  std::string model;
  std::string device = "cpu";
  /// The layout (--tp, --dp, ..., every option of LayoutOptions.h's table),
  /// and the names of the layout options given on the command line.
  Layout layout;
  std::set<std::string> layoutGiven;
  std::string initFrom;
  uint64_t seed = 1234;
  /// --data: the datasets and their weights; empty: the bundled corpus.
  std::vector<DataSourceSpec> data;
  bool shuffle = true;
  bool allowDataChange = false;
  std::optional<int64_t> batch, seqLen, steps;
  double lr = 3e-4, minLR = 0.0;
  int64_t warmup = 0;
  std::string schedule = "constant";
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weightDecay = 0.1,
         clipGrad = 1.0;
  std::string logJson, saveHF, emitPlan, dumpGrads, trace;
  std::string saveCheckpoint, resume;
  std::optional<int64_t> saveEvery, keepLast, saveHFEvery;
  std::optional<int64_t> profileStep;
  bool printPlan = false;
  bool printSchedule = false;
  bool reportMemory = false;
  bool report = false;
  std::string calibration, calibrate;
  /// --matmul-algorithms, --tune-matmuls: the CUDA products' algorithms.
  std::string matmulAlgorithms;
  bool tuneMatmuls = false;
  /// --layout auto: the planner picks the layout for --gpus GPUs of
  /// --gpu-memory bytes each (0: no limit).
  std::string layoutSearch;
  std::optional<int64_t> gpus;
  uint64_t gpuMemory = 0;
  /// Compile without the stage split's lines (the planner's candidates).
  bool quietCompile = false;
  /// The planner's compiles: the model's first compileLayers layers (0:
  /// all), into a plan of representative ranks (CompileOptions).
  int64_t compileLayers = 0;
  bool representatives = false;
  bool help = false;
  bool helpLayoutRules = false;

  /// Whether layout option `name` was given.
  bool given(const char *name) const { return layoutGiven.count(name) > 0; }
};

Status parseInt(const std::string &flag, const std::string &text,
                int64_t &out) {
  errno = 0;
  char *end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE)
    return errorf(flag, ": expected an integer, got '", text, "'");
  out = value;
  return Status::ok();
}

Status parseDouble(const std::string &flag, const std::string &text,
                   double &out) {
  errno = 0;
  char *end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(value))
    return errorf(flag, ": expected a number, got '", text, "'");
  out = value;
  return Status::ok();
}

/// A size in bytes: "80GiB", "79.5GB", "512MiB", "1000000" (bytes).
Status parseByteSize(const std::string &flag, const std::string &text,
                     uint64_t &out) {
  char *end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : "";
  const std::map<std::string, double> units = {{"", 1.0},
                                               {"B", 1.0},
                                               {"KB", 1e3},
                                               {"MB", 1e6},
                                               {"GB", 1e9},
                                               {"TB", 1e12},
                                               {"KiB", 1024.0},
                                               {"MiB", 1048576.0},
                                               {"GiB", 1073741824.0},
                                               {"TiB", 1099511627776.0}};
  auto it = units.find(unit);
  if (text.empty() || end == text.c_str() || errno == ERANGE ||
      it == units.end() || !std::isfinite(value) || value <= 0.0 ||
      value * it->second >= 1.8e19)
    return errorf(flag,
                  ": expected a size such as 80GiB, 79.5GB or a "
                  "number of bytes, got '",
                  text, "'");
  out = uint64_t(value * it->second);
  return Status::ok();
}

Status parseArgs(int argc, char **argv, Options &o) {
  using Setter =
      std::function<Status(const std::string &, const std::string &)>;
  auto str = [](std::string &field) -> Setter {
    return [&field](const std::string &flag, const std::string &v) {
      if (v.empty())
        return errorf(flag, ": expected a value, got an empty one");
      field = v;
      return Status::ok();
    };
  };
  auto integer = [](std::optional<int64_t> &field) -> Setter {
    return [&field](const std::string &flag, const std::string &v) {
      int64_t value = 0;
      MLT_RETURN_IF_ERROR(parseInt(flag, v, value));
      field = value;
      return Status::ok();
    };
  };
  auto plainInteger = [](int64_t &field) -> Setter {
    return [&field](const std::string &flag, const std::string &v) {
      return parseInt(flag, v, field);
    };
  };
  auto number = [](double &field) -> Setter {
    return [&field](const std::string &flag, const std::string &v) {
      return parseDouble(flag, v, field);
    };
  };
  const std::map<std::string, Setter> valued = {
      {"--device", str(o.device)},
      {"--init-from", str(o.initFrom)},
      {"--seed",
       [&o](const std::string &flag, const std::string &v) {
         int64_t value = 0;
         MLT_RETURN_IF_ERROR(parseInt(flag, v, value));
         if (value < 0)
           return errorf(flag, ": expected a non-negative integer, got ", v);
         o.seed = uint64_t(value);
         return Status::ok();
       }},
      {"--batch", integer(o.batch)},
      {"--seq-len", integer(o.seqLen)},
      {"--steps", integer(o.steps)},
      {"--lr", number(o.lr)},
      {"--min-lr", number(o.minLR)},
      {"--warmup", plainInteger(o.warmup)},
      {"--lr-schedule", str(o.schedule)},
      {"--adam-beta1", number(o.beta1)},
      {"--adam-beta2", number(o.beta2)},
      {"--adam-eps", number(o.eps)},
      {"--weight-decay", number(o.weightDecay)},
      {"--clip-grad", number(o.clipGrad)},
      {"--log-json", str(o.logJson)},
      {"--save-hf", str(o.saveHF)},
      {"--save-checkpoint", str(o.saveCheckpoint)},
      {"--resume", str(o.resume)},
      {"--save-every", integer(o.saveEvery)},
      {"--save-hf-every", integer(o.saveHFEvery)},
      {"--keep-last", integer(o.keepLast)},
      {"--dump-grads", str(o.dumpGrads)},
      {"--emit-plan", str(o.emitPlan)},
      {"--profile-step", integer(o.profileStep)},
      {"--trace", str(o.trace)},
      {"--calibration", str(o.calibration)},
      {"--calibrate", str(o.calibrate)},
      {"--matmul-algorithms", str(o.matmulAlgorithms)},
      {"--layout",
       [&o](const std::string &flag, const std::string &v) {
         if (v != "auto" && v != "exhaustive")
           return errorf(flag,
                         ": expected auto (the planner chooses the "
                         "layout) or exhaustive (the same, every "
                         "candidate compiled at the model's depth), "
                         "got '",
                         v, "'");
         o.layoutSearch = v;
         return Status::ok();
       }},
      {"--gpus", integer(o.gpus)},
      {"--gpu-memory",
       [&o](const std::string &flag, const std::string &v) {
         return parseByteSize(flag, v, o.gpuMemory);
       }},
  };
  const std::map<std::string, bool *> flags = {
      {"--no-shuffle", nullptr},
      {"--allow-data-change", &o.allowDataChange},
      {"--print-plan", &o.printPlan},
      {"--print-schedule", &o.printSchedule},
      {"--report-memory", &o.reportMemory},
      {"--report", &o.report},
      {"--tune-matmuls", &o.tuneMatmuls},
      {"--help", &o.help},
      {"--help-layout-rules", &o.helpLayoutRules},
      {"-h", &o.help},
  };

  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-') {
      if (!o.model.empty())
        return errorf("unexpected argument '", arg, "' (the model or plan is '",
                      o.model, "')");
      o.model = arg;
      continue;
    }
    std::string name = arg, value;
    bool hasValue = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      hasValue = true;
    }
    // The layout's options, by their table (LayoutOptions.h): a switch
    // alone (or =on|off), every other with its value.
    if (const LayoutOption *option = name.rfind("--", 0) == 0
                                         ? findLayoutOption(name.substr(2))
                                         : nullptr) {
      if (!hasValue && !option->isSwitch()) {
        if (i + 1 >= argc)
          return errorf(name, " needs a value");
        value = argv[++i];
      }
      MLT_RETURN_IF_ERROR(setLayoutOption(o.layout, *option, value, name));
      o.layoutGiven.insert(option->name);
      continue;
    }
    if (auto it = flags.find(name); it != flags.end()) {
      if (hasValue)
        return errorf(name, " takes no value");
      if (name == "--no-shuffle")
        o.shuffle = false;
      else
        *it->second = true;
      continue;
    }
    if (name == "--data") {
      // One dataset, or weights and datasets (--data 0.7 a 0.3 b): after a
      // first value that is a weight, values are taken while they pair up,
      // a path after each weight and a weight after each path.
      if (!hasValue) {
        if (i + 1 >= argc)
          return errorf(name, " needs a value");
        value = argv[++i];
      }
      std::vector<std::string> values = {value};
      if (isDataWeight(value))
        while (i + 1 < argc) {
          const std::string next = argv[i + 1];
          const bool wantsPath = values.size() % 2 == 1;
          if (wantsPath ? next.size() > 1 && next[0] == '-'
                        : !isDataWeight(next))
            break;
          values.push_back(next);
          ++i;
        }
      StatusOr<std::vector<DataSourceSpec>> sources =
          parseDataArguments(values);
      if (!sources)
        return sources.takeStatus().withContext(name);
      o.data = std::move(*sources);
      continue;
    }
    auto it = valued.find(name);
    if (it == valued.end())
      return errorf("unknown option '", name, "' (see --help)");
    if (!hasValue) {
      if (i + 1 >= argc)
        return errorf(name, " needs a value");
      value = argv[++i];
    }
    MLT_RETURN_IF_ERROR(it->second(name, value));
  }
  return Status::ok();
}

/// Range checks of the options that do not depend on the plan.
Status checkOptions(const Options &o) {
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
  MLT_RETURN_IF_ERROR(atLeast("--steps", o.steps, 1));
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
  for (auto [flag, given] : {std::pair{"--save-every", o.saveEvery.has_value()},
                             std::pair{"--keep-last", o.keepLast.has_value()}})
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
  auto nonNegative = [](const char *flag, double value) -> Status {
    if (value < 0)
      return errorf(flag, " must not be negative, got ", value);
    return Status::ok();
  };
  MLT_RETURN_IF_ERROR(nonNegative("--lr", o.lr));
  MLT_RETURN_IF_ERROR(nonNegative("--min-lr", o.minLR));
  if (!(o.eps > 0))
    return errorf("--adam-eps must be positive (AdamW divides by the root "
                  "of the second moment plus it, which starts at 0), got ",
                  o.eps);
  MLT_RETURN_IF_ERROR(nonNegative("--weight-decay", o.weightDecay));
  MLT_RETURN_IF_ERROR(nonNegative("--clip-grad", o.clipGrad));
  for (auto [flag, beta] :
       {std::pair<const char *, double>{"--adam-beta1", o.beta1},
        {"--adam-beta2", o.beta2}})
    if (beta < 0 || beta >= 1)
      return errorf(flag, " must be in [0, 1), got ", beta);
  return Status::ok();
}

/// The paths, before anything is compiled or trained: the inputs (the
/// model, --data, --init-from) are files (a FIFO would block, a device
/// would be read forever), the outputs (--log-json, --dump-grads,
/// --emit-plan, --trace, and --save-hf's directory) have their directory
/// and nothing in their place that writing them would replace (a device
/// node, a symbolic link), and no output is an input or another output.
Status checkPaths(const Options &o) {
  struct Input {
    const char *flag;
    std::string path;
  };
  std::vector<Input> inputs = {{"MODEL_OR_PLAN", o.model}};
  for (const DataSourceSpec &source : o.data) {
    StatusOr<ResolvedDataPath> resolved = resolveDataPath(source.path);
    if (!resolved)
      return resolved.takeStatus().withContext("--data");
    for (const std::string &file : resolved->files)
      inputs.push_back({"--data", file});
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
        Output{"--save-checkpoint", o.saveCheckpoint, true}}) {
    if (output.path.empty())
      continue;
    MLT_RETURN_IF_ERROR(checkOutputPath(output.path, output.directory)
                            .withContext(output.flag));
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

/// Device and precision checks, for runs that train.
Status checkDevice(const Options &o) {
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

std::string baseName(std::string path) {
  while (path.size() > 1 && path.back() == '/')
    path.pop_back();
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

enum class InputKind { Plan, Model };

/// Plans are recognized by their identifier; a .mlir, a .json or a directory
/// is a model; anything else is read as a plan (and rejected by name).
StatusOr<InputKind> classifyInput(const std::string &path) {
  if (!exists(path))
    return errorf(path, ": no such file or directory");
  MLT_RETURN_IF_ERROR(checkInputPath(path, /*directoryToo=*/true));
  if (isDirectory(path)) {
    if (!exists(path + "/config.json"))
      return errorf(path, ": a directory without config.json (expected a "
                          "plan file, a .mlir model, a config.json, or a "
                          "directory holding one)");
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

/// Fails when `path` could not be written later (its folder missing or
/// read-only, or a folder in its place), before the work that writes it.
Status checkWritable(const std::string &path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    return errorf(path, ": cannot write (a directory is in its place)");
  std::string temporary = path + ".tmp." + std::to_string(::getpid());
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  if (!out)
    return errorf(path, ": cannot write (", std::strerror(errno), ")");
  out.close();
  std::remove(temporary.c_str());
  return Status::ok();
}

/// Loads or compiles the plan; `bytes` receives the plan file's bytes.
#ifdef MLT_HAVE_COMPILER
/// The compiler's options for `o`'s model, layout and run shape.
StatusOr<CompileOptions> compileOptionsOf(const Options &o) {
  if (!o.batch || !o.seqLen)
    return errorf(
        "compiling ", o.model,
        " needs --batch and --seq-len (the plan is compiled for them)");
  CompileOptions compile;
  compile.model = o.model;
  compile.layout = o.layout;
  compile.layers = o.compileLayers;
  compile.batch = *o.batch;
  compile.seqLen = *o.seqLen;
  compile.representatives = o.representatives;
  compile.threads = !o.representatives;
  compile.verifyPasses = !o.representatives;
  compile.printStageSplit = o.layout.pp > 1 && !o.quietCompile;
#ifdef MLT_HAVE_CUDA
  // A plan compiled for the GPU names the architecture of this build's
  // kernels; a plan for the CPU runs anywhere.
  if (o.device == "cuda")
    compile.target = MLT_CUDA_TARGET;
#endif
  return compile;
}
#endif

/// A refusal by the rule book: every rule broken, a line each.
Status refusal(const std::vector<Violation> &violations) {
  std::string text;
  for (const Violation &violation : violations)
    text += (text.empty() ? "" : "\n") + violation.text();
  return Status::error(text);
}

StatusOr<Plan> obtainPlan(const Options &o, std::string &bytes) {
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
  StatusOr<CompileOptions> compile = compileOptionsOf(o);
  if (!compile)
    return compile.takeStatus();
  std::string error;
  // The rule book first, every rule the layout breaks (the planner's
  // candidates have been held to it already).
  if (!o.representatives) {
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
  return errorf(o.model, ": this mlt-run was built without the compiler "
                         "(MLT_ENABLE_COMPILER=OFF); compile the model to a "
                         "plan elsewhere (mlt-run MODEL --emit-plan FILE) and "
                         "pass the plan file");
#endif
}

/// --layout auto: the planner's choice among every layout of --gpus GPUs
/// (mlt/Planner/Planner.h), compiled; `o` then names that layout, as if it had
/// been passed.
StatusOr<Plan> planAutomatically(Options &o, std::string &bytes) {
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
  StatusOr<std::optional<ChosenCalibration>> chosen =
      chooseCalibration(o.calibration, o.device, "");
  if (!chosen)
    return chosen.takeStatus();
  if (!*chosen)
    return errorf("--layout auto: no calibration is built in for --device ",
                  o.device,
                  ": pass --calibration FILE (mlt-run --calibrate "
                  "FILE measures one on the device)");
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
    // On the GPU, what the runtime holds outside the arena: the CUDA
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
    Options candidate = o;
    candidate.layout = layout;
    candidate.quietCompile = true;
    return candidate;
  };
  PlannerCompiler compiler;
  compiler.split = [&](const Layout &layout, int64_t &numLayers,
                       std::vector<int64_t> &split) -> Status {
#ifdef MLT_HAVE_COMPILER
    StatusOr<CompileOptions> compile = compileOptionsOf(candidateOf(layout));
    if (!compile)
      return compile.takeStatus();
    std::string error;
    if (!stageSplitOf(*compile, numLayers, split, error))
      return Status::error(error);
    return Status::ok();
#else
    (void)layout, (void)numLayers, (void)split;
    return errorf("this mlt-run was built without the compiler");
#endif
  };
  compiler.representatives =
      [&](const Layout &layout, int64_t layers,
          const std::vector<int64_t> &split) -> StatusOr<Plan> {
    Options candidate = candidateOf(layout);
    candidate.compileLayers = layers;
    candidate.layout.ppLayers = split;
    candidate.representatives = true;
    std::string unused;
    return obtainPlan(candidate, unused);
  };
  compiler.whole = [&](const Layout &layout,
                       std::string &layoutBytes) -> StatusOr<Plan> {
    return obtainPlan(candidateOf(layout), layoutBytes);
  };
  // The planner's progress on stderr, its ranking on stdout.
  PlannerObserver observer;
  observer.progress = [](const std::string &line) {
    std::fprintf(stderr, "mlt-run: %s\n", line.c_str());
  };
  observer.ranked = [](const PlannerReport &report) {
    std::fputs(formatPlannerReport(report).c_str(), stdout);
    std::fflush(stdout);
  };
  StatusOr<PlannedLayout> planned = planLayout(
      request, (*chosen)->calibration, (*chosen)->source, compiler, observer);
  if (!planned)
    return planned.takeStatus();
  o.layout = planned->layout;
  o.layoutSearch.clear();
  bytes = std::move(planned->bytes);
  return std::move(planned->plan);
}

/// "dp=2, tp=2": the plan's mesh, for messages.
std::string describeMesh(const Plan &plan) {
  std::string text;
  for (size_t i = 0; i < plan.mesh.size(); ++i)
    text += (i ? ", " : "") + plan.mesh[i].name + "=" +
            std::to_string(plan.mesh[i].size);
  return text;
}

/// The compute precision of `plan`: bf16 where its parameters have bf16
/// compute copies.
Precision planPrecision(const Plan &plan) {
  for (const BufferDesc &buffer : plan.ranks.front().buffers)
    if (buffer.kind == BufferKind::ParameterCopy &&
        buffer.dtype == ElementType::BF16)
      return Precision::BF16;
  return Precision::F32;
}

/// The run options must agree with the plan's shape and layout.
Status checkAgainstPlan(const Options &o, const Plan &plan) {
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
  return Status::ok();
}

std::string formatCount(int64_t value) {
  std::string digits = std::to_string(value), result;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      result += ',';
    result += digits[i];
  }
  return result;
}

/// ", ranks 4 (dp=2, tp=2)" for a plan with a mesh; "" without one.
/// "fp32", or "bf16 (f32 master weights)" for a mixed-precision plan (one
/// whose parameters have compute copies).
std::string describePrecision(const Plan &plan) {
  for (const BufferDesc &buffer : plan.ranks.front().buffers)
    if (buffer.kind == BufferKind::ParameterCopy)
      return std::string(elementTypeName(buffer.dtype)) +
             " (f32 master weights)";
  return "fp32";
}

std::string describeRanks(const Plan &plan) {
  if (plan.mesh.empty())
    return "";
  return ", ranks " + std::to_string(plan.worldSize) + " (" +
         describeMesh(plan) + ")";
}

#ifdef MLT_HAVE_CUDA
/// A run of one process per GPU (mpirun -np N, N > 1): this process's rank,
/// MPI session and NCCL communicator (Distributed.h), and how the tool ends
/// the job when a rank fails once collectives run.
struct Distributed : DistributedProcess {
  /// Reports the rank's failure, then aborts its communicators and the
  /// whole job (its peers may be waiting for it inside a NCCL kernel).
  [[noreturn]] void fatal(const Status &status) {
    std::fflush(stdout);
    std::fprintf(stderr, "mlt-run: error: rank %d: %s\n", rank(),
                 status.message().c_str());
    std::fflush(stderr);
    abort(status, 1);
  }
};
#else
/// Runs of one process per GPU need the CUDA backend.
struct Distributed {
  bool reports() const { return true; }
  [[noreturn]] void fatal(const Status &) { std::abort(); }
};
#endif

/// The signal that asked the run to stop (SIGINT, SIGTERM, SIGHUP,
/// SIGUSR1), or 0.
std::atomic<int> stopSignal{0};

extern "C" void askToStop(int signal) {
  stopSignal.store(signal);
  // A second one ends the process at once.
  std::signal(signal, SIG_DFL);
}

/// "SIGTERM" for messages.
const char *signalName(int signal) {
  switch (signal) {
  case SIGINT:
    return "SIGINT";
  case SIGTERM:
    return "SIGTERM";
  case SIGHUP:
    return "SIGHUP";
  case SIGUSR1:
    return "SIGUSR1";
  }
  return "a signal";
}

/// Writes a training checkpoint of `plan`'s state in `ranks` under `root`:
/// rank 0's process begins and commits it, and in between every process
/// writes its ranks' shards, all at once. Returns the checkpoint's
/// directory (on every process).
StatusOr<std::string> saveCheckpoint(const std::string &root, RankGroup &ranks,
                                     const Plan &plan,
                                     const TrainingCheckpoint &state,
                                     int64_t keepLast, Distributed *dist) {
#ifdef MLT_HAVE_CUDA
  if (dist) {
    auto agree = [&](Status status) {
      return dist->session.agree(status).withContext("--save-checkpoint");
    };
    std::string dir;
    Status begun = Status::ok();
    if (dist->reports()) {
      StatusOr<std::string> made = beginCheckpoint(root, state.step);
      if (made)
        dir = std::move(*made);
      else
        begun = made.takeStatus();
    }
    MLT_RETURN_IF_ERROR(agree(begun));
    // The temporary directory's name, from rank 0's process.
    uint64_t length = dir.size();
    MLT_RETURN_IF_ERROR(dist->session.broadcast(&length, sizeof(length), 0));
    dir.resize(size_t(length));
    MLT_RETURN_IF_ERROR(dist->session.broadcast(dir.data(), dir.size(), 0));
    StatusOr<uint64_t> written = writeCheckpointShards(ranks, plan, dir);
    Status shards = agree(written ? Status::ok() : written.takeStatus());
    if (!shards && dist->reports())
      abandonCheckpoint(dir);
    MLT_RETURN_IF_ERROR(shards);
    StatusOr<std::string> saved =
        dist->reports() ? commitCheckpoint(root, dir, plan, state, keepLast)
                        : StatusOr<std::string>((std::filesystem::path(root) /
                                                 checkpointDirName(state.step))
                                                    .string());
    if (!saved && dist->reports())
      abandonCheckpoint(dir);
    MLT_RETURN_IF_ERROR(agree(saved ? Status::ok() : saved.status()));
    return saved;
  }
#else
  (void)dist;
#endif
  StatusOr<std::string> saved =
      saveTrainingCheckpoint(root, ranks, plan, state, keepLast);
  if (!saved)
    return saved.takeStatus().withContext("--save-checkpoint");
  return saved;
}

/// What a run holds in host memory besides what it reads and writes a
/// tensor at a time: on the CPU, the arenas of its ranks (every rank is in
/// this process) and OpenBLAS's buffers.
std::vector<HostMemoryUse> hostMemoryUses(const Options &o, const Plan &plan) {
  if (o.device == "cuda")
    return {};
  uint64_t arenas = 0;
  for (const RankPlan &rank : plan.ranks) // (saturating: sizes may be absurd)
    arenas = arenas + rank.arenaBytes < arenas ? UINT64_MAX
                                               : arenas + rank.arenaBytes;
  return {
      {plan.ranks.size() == 1
           ? std::string("the arena")
           : "the arenas of " + std::to_string(plan.ranks.size()) + " ranks",
       arenas},
      cpuBackendHostMemory()};
}

Status train(const Options &o, const Plan &plan, Distributed *dist) {
  const ModelInfo &model = plan.model;
  uint64_t arenaBytes = 0; // the largest rank's
  for (const RankPlan &rank : plan.ranks)
    arenaBytes = std::max(arenaBytes, rank.arenaBytes);

  if (!o.saveCheckpoint.empty() && model.hfConfig.empty())
    return errorf("--save-checkpoint: the plan carries no HF config.json to "
                  "save with the weights");
  if (!o.saveHF.empty()) {
    // Fail before training, not after it, when the checkpoint cannot be saved.
    if (model.hfConfig.empty())
      return errorf("--save-hf: the plan carries no HF config.json to save "
                    "with the weights");
    if (!nlohmann::json::accept(model.hfConfig))
      return errorf("--save-hf: the plan's HF config is not valid JSON");
  }

  // With one process per GPU, every phase up to training ends with all
  // processes agreeing on whether each succeeded (MpiBootstrap.h), so that a
  // failure on one rank stops all of them before any waits for it.
  // Rank 0's process prints, logs and saves; others only train.
  const bool reports = !dist || dist->reports();
  auto agree = [&](Status status) -> Status {
#ifdef MLT_HAVE_CUDA
    if (dist)
      return dist->session.agree(status);
#endif
    return status;
  };

  // The data, every token id checked; a check of more than a few seconds
  // (a large indexed dataset) says how far it is, every few seconds.
  const auto openStart = std::chrono::steady_clock::now();
  double lastProgress = 0;
  auto progress = [&](const std::string &file, uint64_t done, uint64_t total) {
    const double elapsed = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - openStart)
                               .count();
    if (!reports || elapsed < 2 || (elapsed - lastProgress < 5 && done < total))
      return;
    lastProgress = elapsed;
    std::fprintf(stderr,
                 "mlt-run: checking the token ids of %s: %.0f%% of %.2f GiB, "
                 "%.0f s\n",
                 file.c_str(), 100.0 * double(done) / double(total),
                 double(total) / double(1ull << 30), elapsed);
  };
  StatusOr<OpenedData> data = openTrainingData(
      o.data.empty() ? std::vector<DataSourceSpec>{{1.0, defaultCorpusPath()}}
                     : o.data,
      model.seqLen, model.vocabSize, progress);
  MLT_RETURN_IF_ERROR(agree(data ? Status::ok() : data.takeStatus()));

  // Host memory, before the arenas take theirs (see HostMemory.h for what
  // running short does instead of failing; the data is mapped, and counts
  // against an address-space limit by now).
  MLT_RETURN_IF_ERROR(agree(checkHostMemory(hostMemoryUses(o, plan))));

#ifdef MLT_HAVE_CUDA
  std::unique_ptr<Backend> backend =
      o.device == "cuda"
          ? createCudaBackend({o.matmulAlgorithms, o.tuneMatmuls})
          : createCpuBackend();
#else
  std::unique_ptr<Backend> backend = createCpuBackend();
#endif
  StatusOr<std::unique_ptr<RankGroup>> ranks = errorf("no ranks were created");
  if (!dist) {
    ranks = RankGroup::create(plan, *backend);
  } else {
#ifdef MLT_HAVE_CUDA
    // Every rank's communicators over the plan's mesh on its node-local GPU
    // (Distributed.h). A rank whose init fails while others wait inside it
    // cannot agree with them: after a while it gives up and aborts the job.
    Status status = dist->connect(plan);
    if (dist->session.timedOut())
      dist->fatal(status);
    MLT_RETURN_IF_ERROR(status);
    ranks = RankGroup::createForRank(plan, uint32_t(dist->rank()), *backend,
                                     dist->communicator.get());
#endif
  }
  MLT_RETURN_IF_ERROR(agree(ranks ? Status::ok() : ranks.takeStatus()));

  // The calibration that prices this run's launches (--calibration, or the
  // one built in for this device), and the step it predicts; none while
  // --calibrate measures the device.
  const std::string deviceName = (**ranks).executor(0).device().deviceName();
  std::optional<ChosenCalibration> calibration;
  std::optional<Prediction> prediction;
  // --calibrate: its file writable and, when there is one, of this device
  // (rank 0's process writes it; every process agrees).
  if (!o.calibrate.empty()) {
    Status target = Status::ok();
    if (reports)
      target = checkCalibrationTarget(o.calibrate, std::string(backend->name()),
                                      deviceName);
    if (target && reports)
      target = checkWritable(o.calibrate);
    MLT_RETURN_IF_ERROR(agree(target));
  }
  if (o.calibrate.empty()) {
    StatusOr<std::optional<ChosenCalibration>> found = chooseCalibration(
        o.calibration, std::string(backend->name()), deviceName);
    Status chosen = found ? Status::ok() : found.takeStatus();
    if (chosen && *found) {
      StatusOr<Prediction> predicted = predictStep(plan, (*found)->calibration);
      if (!predicted) {
        chosen = predicted.takeStatus();
      } else {
        calibration = std::move(**found);
        prediction = std::move(*predicted);
      }
    }
    MLT_RETURN_IF_ERROR(agree(chosen));
  }

  // Each process's ranks take theirs from a source of the whole plan's
  // tensors (one process per GPU: every process reads it).
  auto loadFrom = [&](const TensorSource &source, bool moments) -> Status {
    if (moments)
      return dist ? loadOptimizerState(**ranks, plan, source)
                  : loadOptimizerState(**ranks, source);
    return dist ? loadParameters(**ranks, plan, source)
                : loadParameters(**ranks, source);
  };
  Status loaded = Status::ok();
  if (!o.initFrom.empty() && isTrainingCheckpoint(o.initFrom)) {
    // A training checkpoint's weights (not its moments or step): whatever
    // layout saved it.
    StatusOr<std::unique_ptr<CheckpointReader>> checkpoint =
        CheckpointReader::open(o.initFrom);
    loaded = checkpoint ? loadFrom((*checkpoint)->parameters(), false)
                              .withContext(o.initFrom)
                        : checkpoint.takeStatus();
  } else if (!o.initFrom.empty()) {
    StatusOr<TensorMap> tensors = readCheckpoint(o.initFrom);
    if (!tensors)
      loaded = tensors.takeStatus();
    else
      loaded =
          loadFrom(TensorMapSource(*tensors), false).withContext(o.initFrom);
  } else if (o.resume.empty()) { // (--resume loads them below)
    loaded = initializeParameters(**ranks, o.seed);
  }
  MLT_RETURN_IF_ERROR(agree(loaded));
  // --resume: the checkpoint's weights and moments, in this plan's layout.
  int64_t resumedStep = 0;
  if (!o.resume.empty()) {
    StatusOr<std::unique_ptr<CheckpointReader>> reader =
        CheckpointReader::open(o.resume);
    MLT_RETURN_IF_ERROR(agree(
        reader ? Status::ok() : reader.takeStatus().withContext("--resume")));
    const TrainingCheckpoint *checkpoint = &(*reader)->state();
    if (!model.hfConfig.empty() &&
        nlohmann::json::parse(checkpoint->config, nullptr, false) !=
            nlohmann::json::parse(model.hfConfig, nullptr, false))
      return errorf("--resume ", o.resume,
                    ": the checkpoint is of another "
                    "model (its config.json differs from the plan's)");
    // (without shuffling the seed orders nothing)
    if (checkpoint->shuffle != o.shuffle ||
        (o.shuffle && checkpoint->seed != o.seed))
      return errorf("--resume ", o.resume, ": the checkpoint's data order is ",
                    checkpoint->shuffle ? "shuffled with --seed " +
                                              std::to_string(checkpoint->seed)
                                        : std::string("--no-shuffle"),
                    ", this run's ",
                    o.shuffle ? "shuffled with --seed " + std::to_string(o.seed)
                              : std::string("--no-shuffle"),
                    "; pass the same to go on with the same data");
    // (checkpoints that predate the data's description are not checked)
    if (!checkpoint->data.empty()) {
      Status same = checkSameData(checkpoint->data, data->description);
      if (!same && !o.allowDataChange)
        return errorf(
            "--resume ", o.resume,
            ": the checkpoint was trained on other data: ", same.message(),
            "; pass its --data, or --allow-data-change to go on with this "
            "data");
      if (!same && reports)
        std::printf("note: --allow-data-change: %s\n", same.message().c_str());
    }
    if (checkpoint->step >= *o.steps)
      return errorf("--resume ", o.resume, ": the checkpoint is at step ",
                    checkpoint->step, ", --steps is ", *o.steps,
                    ": nothing left to train");
    // (With one process per GPU, every process reads the checkpoint and
    // its ranks take theirs.)
    Status resumed = loadFrom((*reader)->parameters(), false);
    if (resumed)
      resumed = loadFrom((*reader)->optimizerState(), true);
    MLT_RETURN_IF_ERROR(
        agree(std::move(resumed).withContext("--resume " + o.resume)));
    resumedStep = checkpoint->step;
    if (reports)
      std::printf("resumed from %s at step %" PRId64 "%s\n", o.resume.c_str(),
                  resumedStep,
                  checkpoint->layout.empty()
                      ? " (saved by one rank)"
                      : (" (saved by " + checkpoint->layout + ")").c_str());
  }

  std::ofstream log;
  Status logOpened = Status::ok();
  if (!o.logJson.empty() && reports) {
    log.open(o.logJson, std::ios::trunc);
    if (!log)
      logOpened = errorf(o.logJson, ": cannot write the JSON log (",
                         std::strerror(errno), ")");
  }
  MLT_RETURN_IF_ERROR(agree(logOpened));
  // Fail before training, not after it, when the trace cannot be written.
  MLT_RETURN_IF_ERROR(agree(
      o.trace.empty() || !reports ? Status::ok() : checkWritable(o.trace)));

  TrainingOptions options;
  options.steps = *o.steps;
  options.schedule.kind = o.schedule == "cosine" ? LRScheduleKind::Cosine
                                                 : LRScheduleKind::Constant;
  options.schedule.lr = o.lr;
  options.schedule.minLR = o.minLR;
  options.schedule.warmup = o.warmup;
  options.optimizer.beta1 = o.beta1;
  options.optimizer.beta2 = o.beta2;
  options.optimizer.eps = o.eps;
  options.optimizer.weightDecay = o.weightDecay;
  options.optimizer.maxGradNorm = o.clipGrad;
  options.shuffle = o.shuffle;
  options.seed = o.seed;
  options.firstStep = resumedStep + 1;
  options.reportingRank = reportingRank(plan);
  StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::create(**ranks, model, *data->data, options);
  MLT_RETURN_IF_ERROR(agree(trainer ? Status::ok() : trainer.takeStatus()));

  std::string processes;
#ifdef MLT_HAVE_CUDA
  if (dist)
    processes = ", one process per GPU, NCCL " + ncclLibraryVersion();
#endif
  if (reports)
    std::printf(
        "model %s: %s parameters, %" PRId64 " tokens/step (batch %" PRId64
        " x seq %" PRId64 ", %" PRId64 " micro-batch%s of %" PRId64
        "), arena %.2f MiB%s%s%s, %s %s, %" PRId64 " steps, data %s\n",
        baseName(o.model).c_str(), formatCount(countParameters(plan)).c_str(),
        model.globalBatch() * model.seqLen, model.globalBatch(), model.seqLen,
        model.microbatches, model.microbatches == 1 ? "" : "es",
        model.microBatch, double(arenaBytes) / (1024.0 * 1024.0),
        plan.ranks.size() > 1 ? " per rank (largest)" : "",
        describeRanks(plan).c_str(), processes.c_str(),
        std::string(backend->name()).c_str(), describePrecision(plan).c_str(),
        options.steps, data->summary.c_str());
  if (reports && prediction)
    std::printf("predicted step %.2f ms, %.0f tokens/s (calibration: %s)\n",
                prediction->timeline.seconds() * 1e3,
                cost::tokensPerStep(plan) / prediction->timeline.seconds(),
                calibration->source.c_str());
  std::fflush(stdout);

  const int stepWidth = std::max<int>(4, std::to_string(options.steps).size());
  // A profile (--profile-step) is of this process's first rank, and only the
  // reporting process (rank 0's) takes one; a trace (--trace) is of every
  // rank, in every process.
  const int64_t profiledStep =
      o.profileStep ? *o.profileStep : std::min<int64_t>(2, options.steps);
  std::vector<Executor *> profiled;
  if (!o.trace.empty() || !o.calibrate.empty()) {
    for (uint32_t i = 0; i < (**ranks).size(); ++i)
      profiled.push_back(&(**ranks).executor(i));
  } else if (o.profileStep && reports) {
    profiled.push_back(&(**ranks).executor(0));
  }
  auto beginProfiles = [&]() -> Status {
    for (Executor *executor : profiled)
      MLT_RETURN_IF_ERROR(executor->beginProfile());
    return Status::ok();
  };
  // --calibrate: the profiled step's launches of every rank, measured
  // (rank 0's process).
  std::optional<cost::Calibration> measuredCalibration;
  auto endProfiles = [&]() -> Status {
    // Each local rank's trace events (a JSON array each) and launches.
    std::vector<std::string> events, launchTexts;
    for (Executor *executor : profiled) {
      StatusOr<std::vector<Executor::LaunchTime>> launches =
          executor->endProfile();
      if (!launches)
        return launches.takeStatus();
      if (o.profileStep && reports && executor == profiled.front())
        std::fputs(formatProfile(executor->rankPlan(), *launches).c_str(),
                   stdout);
      if (!o.trace.empty())
        events.push_back(traceEvents(executor->rankPlan(), *launches));
      if (!o.calibrate.empty())
        launchTexts.push_back(
            launchesToText(executor->rankPlan().rank, *launches));
    }
    std::fflush(stdout);
#ifdef MLT_HAVE_CUDA
    // One process per rank: rank 0's process gathers the others' events
    // and launches.
    if (dist) {
      for (std::vector<std::string> *texts : {&events, &launchTexts}) {
        if (texts->empty())
          continue;
        StatusOr<std::vector<std::string>> gathered =
            dist->session.gather(texts->at(0), 0);
        if (!gathered)
          return gathered.takeStatus();
        *texts = std::move(*gathered);
      }
    }
#endif
    if (!reports)
      return Status::ok();
    if (!o.calibrate.empty()) {
      std::vector<std::vector<cost::MeasuredLaunch>> measured(
          plan.ranks.size());
      for (const std::string &text : launchTexts)
        MLT_RETURN_IF_ERROR(launchesFromText(text, measured));
      StatusOr<cost::Calibration> measuredHere = cost::measureCalibration(
          plan, measured, deviceName, std::string(backend->name()));
      if (!measuredHere)
        return measuredHere.takeStatus().withContext("--calibrate");
      measuredCalibration = std::move(*measuredHere);
    }
    if (o.trace.empty())
      return Status::ok();
    // The prediction's tracks below the measured ones.
    if (prediction)
      for (const RankPlan &rank : plan.ranks)
        events.push_back(predictedTraceEvents(
            rank, asLaunchTimes(prediction->timeline.ranks[rank.rank]),
            plan.worldSize));
    StatusOr<std::string> text = formatTrace(events);
    if (!text)
      return text.takeStatus();
    MLT_RETURN_IF_ERROR(writeFileAtomically(o.trace, *text));
    std::printf("trace of step %" PRId64 " written to %s\n", profiledStep,
                o.trace.c_str());
    std::fflush(stdout);
    return Status::ok();
  };
  if (!profiled.empty() && profiledStep == 1)
    MLT_RETURN_IF_ERROR(beginProfiles());
  // Whole tensors of the parameters or gradients: on rank 0 (gathered from
  // the other processes when there are some); empty on other processes.
  auto wholeTensors = [&](BufferKind kind) -> StatusOr<TensorMap> {
    try {
#ifdef MLT_HAVE_CUDA
      if (dist)
        return gatherParameterTensors(**ranks, plan, *dist->communicator, kind);
#endif
      return parameterTensors(**ranks, kind);
    } catch (const std::bad_alloc &) {
      // The whole model in f32 on one process: more than the host has.
      return errorf("out of host memory assembling the whole ",
                    kind == BufferKind::Parameter ? "weights" : "gradients",
                    " (", formatBytes(uint64_t(countParameters(plan)) * 4),
                    " of f32) on one process",
                    o.saveCheckpoint.empty()
                        ? ""
                        : "; the training checkpoint under " +
                              o.saveCheckpoint +
                              " holds them (mlt-checkpoint to-hf writes an "
                              "HF checkpoint a tensor at a time)");
    }
  };
  // Each reported step's time, to compare with the prediction.
  std::vector<std::pair<int64_t, double>> stepTimes;
  auto reportStep = [&](const StepMetrics &m) -> Status {
    stepTimes.emplace_back(m.step, m.seconds);
    std::printf("step %*" PRId64 "/%" PRId64
                "  loss %.4f  lr %.2e  grad_norm %.4f  tokens/s %.0f\n",
                stepWidth, m.step, options.steps, m.loss, m.lr, m.gradNorm,
                m.tokensPerSecond);
    std::fflush(stdout);
    if (log.is_open()) {
      nlohmann::json line = {{"step", m.step},
                             {"loss", m.loss},
                             {"grad_norm", m.gradNorm},
                             {"lr", m.lr},
                             {"tokens_per_s", m.tokensPerSecond},
                             {"step_time_s", m.seconds},
                             {"tokens", m.tokens}};
      log << line.dump() << "\n";
      log.flush();
      if (!log)
        return errorf(o.logJson, ": write failed");
    }
    return Status::ok();
  };
  // SIGINT, SIGTERM (a scheduler's time limit), SIGHUP, SIGUSR1: the
  // current step ends, a checkpoint is written (with --save-checkpoint),
  // and the run stops with a line saying so. With one process per GPU, a
  // signal that reaches any process stops them all after the same step:
  // they agree on it after every step. (Open MPI's mpirun answers SIGTERM
  // by killing them at once: the ranks are to be signalled.)
  int64_t stoppedAfter = 0;
  std::string stoppedCheckpoint;
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGUSR1})
    std::signal(signal, askToStop);
  Status status = (*trainer)->run([&](const StepMetrics &measured) -> Status {
    StepMetrics m = measured;
#ifdef MLT_HAVE_CUDA
    // Under pipeline parallelism the loss is the last stage's: its first
    // rank's process sends it to rank 0's, which reports.
    if (dist && options.reportingRank != 0) {
      if (dist->rank() == int(options.reportingRank))
        MLT_RETURN_IF_ERROR(
            dist->communicator->send(0, &m.loss, sizeof(m.loss)));
      else if (reports)
        MLT_RETURN_IF_ERROR(dist->communicator->receive(
            int(options.reportingRank), &m.loss, sizeof(m.loss)));
    }
#endif
    if (m.step == 1 && !o.dumpGrads.empty()) {
      StatusOr<TensorMap> grads = wholeTensors(BufferKind::Gradient);
      if (!grads)
        return grads.takeStatus();
      if (reports)
        MLT_RETURN_IF_ERROR(writeSafeTensors(o.dumpGrads, *grads));
    }
    if (reports)
      MLT_RETURN_IF_ERROR(reportStep(m));
      // A checkpoint every --save-every steps, at the end, and where a signal
      // stops the run.
#ifdef MLT_HAVE_CUDA
    if (dist) {
      StatusOr<int> anyStop = dist->session.maxOf(stopSignal.load());
      if (!anyStop)
        return anyStop.takeStatus();
      if (*anyStop && !stopSignal.load())
        stopSignal.store(*anyStop);
    }
#endif
    const bool stopping = stopSignal.load() && m.step < options.steps;
    if (!o.saveCheckpoint.empty() &&
        (stopping || m.step == options.steps ||
         (o.saveEvery && m.step % *o.saveEvery == 0))) {
      TrainingCheckpoint checkpoint;
      checkpoint.step = m.step;
      checkpoint.seed = o.seed;
      checkpoint.shuffle = o.shuffle;
      checkpoint.data = data->description;
      checkpoint.layout = plan.mesh.empty() ? "" : describeMesh(plan);
      checkpoint.config = model.hfConfig;
      StatusOr<std::string> saved =
          saveCheckpoint(o.saveCheckpoint, **ranks, plan, checkpoint,
                         o.keepLast.value_or(0), dist);
      if (!saved)
        return saved.takeStatus();
      if (reports) {
        std::printf("saved checkpoint %s\n", saved->c_str());
        std::fflush(stdout);
      }
      stoppedCheckpoint = *saved;
    }
    // --save-hf-every: the weights as an HF checkpoint (the end's is
    // written below, after the last step).
    if (o.saveHFEvery && m.step % *o.saveHFEvery == 0 &&
        m.step < options.steps) {
      StatusOr<TensorMap> tensors = wholeTensors(BufferKind::Parameter);
      if (!tensors)
        return tensors.takeStatus();
      if (reports) {
        MLT_RETURN_IF_ERROR(
            writeCheckpointDir(o.saveHF, model.hfConfig, *tensors)
                .withContext("--save-hf"));
        std::printf("saved %s (config.json, model.safetensors) at step %" PRId64
                    "\n",
                    o.saveHF.c_str(), m.step);
        std::fflush(stdout);
      }
    }
    if (stopping) {
      stoppedAfter = m.step;
      return errorf("stopped by ", signalName(stopSignal.load()));
    }
    // Every process takes part in a trace (the events are gathered).
    if (!profiled.empty() && m.step == profiledStep)
      return endProfiles();
    if (!profiled.empty() && m.step + 1 == profiledStep)
      return beginProfiles();
    return Status::ok();
  });
  // From here on the ranks are in collectives: a failing rank ends the job.
  if (!status && dist && stoppedAfter == 0)
    dist->fatal(status);
  if (!status && stoppedAfter > 0) {
    if (!reports)
      return Status::ok();
    std::printf("stopped by %s after step %" PRId64 " of %" PRId64 "; %s\n",
                signalName(stopSignal.load()), stoppedAfter, options.steps,
                !stoppedCheckpoint.empty()
                    ? ("go on with --resume " + o.saveCheckpoint).c_str()
                    : "nothing saved (no --save-checkpoint)");
    std::fflush(stdout);
    return Status::ok();
  }
  MLT_RETURN_IF_ERROR(status);

  // The measured step: the median over the steps but the run's first
  // (which sets libraries up and captures graphs) and the profiled one.
  std::vector<double> measuredSteps;
  for (const auto &[step, seconds] : stepTimes)
    if (step != options.firstStep &&
        !(!profiled.empty() && step == profiledStep))
      measuredSteps.push_back(seconds);
  if (reports && prediction && !measuredSteps.empty()) {
    const double measured = cost::median(measuredSteps);
    const double predicted = prediction->timeline.seconds();
    std::printf("step time: measured %.2f ms (the median of %zu steps), "
                "predicted %.2f ms (%+.1f%%)\n",
                measured * 1e3, measuredSteps.size(), predicted * 1e3,
                100.0 * (predicted - measured) / measured);
    std::fflush(stdout);
  }
  if (reports && !o.calibrate.empty()) {
    if (!measuredCalibration || measuredSteps.empty())
      return errorf("--calibrate: no step was profiled, or none measured "
                    "besides the first and the profiled one (steps ",
                    options.firstStep, " to ", options.steps, ", step ",
                    profiledStep, " profiled)");
    MLT_RETURN_IF_ERROR(finishCalibration(plan, std::move(*measuredCalibration),
                                          cost::median(measuredSteps),
                                          o.calibrate, writeFileAtomically));
  }

  if (!o.saveHF.empty()) {
    StatusOr<TensorMap> tensors = wholeTensors(BufferKind::Parameter);
    if (!tensors && dist)
      dist->fatal(tensors.status());
    if (!tensors)
      return tensors.takeStatus();
    // Only rank 0 writes; the processes agree on the result when they end.
    if (reports) {
      MLT_RETURN_IF_ERROR(
          writeCheckpointDir(o.saveHF, model.hfConfig, *tensors));
      std::printf("saved %s (config.json, model.safetensors)\n",
                  o.saveHF.c_str());
    }
  }
  return Status::ok();
}

/// How this process was started: alone, or as one of the processes of a
/// launcher (mpirun), with its MPI session when there are several.
struct Launch {
#ifdef MLT_HAVE_CUDA
  LaunchEnvironment environment;
  MpiSession *session = nullptr;
  int worldSize() const { return environment.worldSize; }
  bool launched() const { return environment.launched(); }
#else
  int worldSize() const { return 1; }
  bool launched() const { return false; }
#endif
};

/// "1 rank (no mesh)", "4 ranks (mesh dp=2, tp=2)".
std::string describePlanRanks(const Plan &plan) {
  const size_t ranks = plan.ranks.size();
  return std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") +
         (plan.mesh.empty() ? std::string(" (no mesh)")
                            : " (mesh " + describeMesh(plan) + ")");
}

/// On GPUs, a plan of N ranks is N processes: the plan and the launcher
/// must agree.
Status checkWorld(const Options &o, const Plan &plan, const Launch &launch) {
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

Status runTool(int argc, char **argv, const Launch &launch) {
  Options o;
  MLT_RETURN_IF_ERROR(parseArgs(argc, argv, o));
  const bool severalProcesses = launch.worldSize() > 1;
  if (o.help) {
#ifdef MLT_HAVE_CUDA
    if (launch.environment.rank != 0)
      return Status::ok();
#endif
    std::fputs(usage().c_str(), stdout);
    return Status::ok();
  }
  if (o.helpLayoutRules) {
    std::fputs(formatLayoutRules().c_str(), stdout);
    return Status::ok();
  }
  if (o.model.empty())
    return errorf("missing MODEL_OR_PLAN (a plan file, a .mlir model, a "
                  "config.json, or a directory holding one); see --help");
  MLT_RETURN_IF_ERROR(checkOptions(o));
  MLT_RETURN_IF_ERROR(checkPaths(o));
  const bool trains = !o.printPlan && !o.printSchedule && !o.reportMemory &&
                      !o.report && o.emitPlan.empty();
  if (severalProcesses && !trains)
    return errorf("mpirun started ", launch.worldSize(), " processes, but ",
                  o.printPlan       ? "--print-plan"
                  : o.printSchedule ? "--print-schedule"
                  : o.reportMemory  ? "--report-memory"
                  : o.report        ? "--report"
                                    : "--emit-plan",
                  " does not train: run it without mpirun");
  if (severalProcesses && o.device != "cuda")
    return errorf("mpirun started ", launch.worldSize(),
                  " processes, but --device ", o.device,
                  " runs every rank of a plan as a thread of one "
                  "process: run it without mpirun, or train on GPUs with "
                  "--device cuda (one process per GPU)");
  if (trains && !o.steps)
    return errorf("missing --steps N (the number of optimizer steps)");

  if (severalProcesses && !o.layoutSearch.empty())
    return errorf("--layout auto plans in one process: run it without "
                  "mpirun and --emit-plan FILE, then start the plan with "
                  "mpirun");
  std::string bytes;
  StatusOr<Plan> plan = o.layoutSearch.empty() ? obtainPlan(o, bytes)
                                               : planAutomatically(o, bytes);
  if (!plan)
    return plan.takeStatus();
  MLT_RETURN_IF_ERROR(checkAgainstPlan(o, *plan));

  if (!trains) {
    if (!o.emitPlan.empty())
      MLT_RETURN_IF_ERROR(writeFileAtomically(o.emitPlan, bytes));
    // --report: the prediction needs a calibration, found before anything
    // is printed.
    std::optional<ChosenCalibration> calibration;
    if (o.report) {
      StatusOr<std::optional<ChosenCalibration>> chosen =
          chooseCalibration(o.calibration, o.device, "");
      if (!chosen)
        return chosen.takeStatus();
      if (!*chosen)
        return errorf("--report: no calibration is built in for --device ",
                      o.device,
                      ": pass --calibration FILE (mlt-run "
                      "--calibrate FILE measures one on the device)");
      calibration = std::move(**chosen);
    }
    if (o.printPlan || o.printSchedule || o.reportMemory || o.report) {
      std::ostringstream text;
      if (o.printPlan)
        printPlan(*plan, text);
      if (o.printSchedule)
        printSchedule(*plan, text);
      if (o.reportMemory || o.report)
        printMemoryReport(*plan, text);
      if (calibration) {
        StatusOr<Prediction> prediction =
            predictStep(*plan, calibration->calibration);
        if (!prediction)
          return prediction.takeStatus();
        text << cost::formatStepPrediction(*plan, prediction->timeline,
                                           prediction->costs,
                                           calibration->source);
      }
      std::fputs(text.str().c_str(), stdout);
    }
    return Status::ok();
  }
  // The plan against the launcher, then the devices: how to start a plan
  // says more than a missing GPU.
  MLT_RETURN_IF_ERROR(checkWorld(o, *plan, launch));
  MLT_RETURN_IF_ERROR(checkDevice(o));
  if (!severalProcesses)
    return train(o, *plan, nullptr);
#ifdef MLT_HAVE_CUDA
  StatusOr<int> device = localDevice(*launch.session);
  if (!device)
    return device.takeStatus();
  Distributed dist{{*launch.session, *device, nullptr}};
  return train(o, *plan, &dist);
#else
  return errorf("this mlt-run has no CUDA backend");
#endif
}

/// Prints a failure as the tool's line, or lines: one per problem (a
/// layout refused by the rule book for several rules).
void reportError(const std::string &message) {
  std::fflush(stdout);
  size_t begin = 0;
  do {
    const size_t end = message.find('\n', begin);
    std::fprintf(stderr, "mlt-run: error: %s\n",
                 message.substr(begin, end - begin).c_str());
    begin = end == std::string::npos ? end : end + 1;
  } while (begin != std::string::npos);
  std::fflush(stderr);
}

#ifdef MLT_HAVE_CUDA
/// mpirun -np N with N > 1: MPI for the start and the end, and the run in
/// between; the processes agree on the outcome, and one reports a failure.
int runUnderLauncher(int argc, char **argv, const LaunchEnvironment &env) {
  StatusOr<std::unique_ptr<MpiSession>> session = startMpi(argc, argv);
  if (!session) {
    reportError("rank " + std::to_string(env.rank) +
                ": MPI init: " + session.status().message());
    return 1;
  }
  Launch launch;
  launch.environment = env;
  launch.session = session->get();
  Status status = checkMpiWorld(**session, env);
  if (status)
    status = runTool(argc, argv, launch);
  StatusOr<MpiSession::Outcome> outcome = (*session)->conclude(status);
  if (!outcome) {
    reportError("rank " + std::to_string((*session)->rank()) + ": " +
                outcome.status().message());
    (*session)->abort(1);
  }
  if (outcome->reportHere)
    reportError(outcome->message);
  return outcome->failed ? 1 : 0;
}
#endif

} // namespace

int main(int argc, char **argv) {
  Launch launch;
#ifdef MLT_HAVE_CUDA
  // A process that a launcher started as one of several runs one rank of a
  // plan on its GPU; one process (with or without a launcher) never touches
  // MPI.
  StatusOr<LaunchEnvironment> environment =
      detectLaunch([](const char *name) { return std::getenv(name); });
  if (!environment) {
    reportError(environment.status().message());
    return 1;
  }
  if (environment->worldSize > 1)
    return runUnderLauncher(argc, argv, *environment);
  launch.environment = *environment;
#else
  // Without the CUDA backend there is nothing to run per process: say so
  // once.
  if (const char *size = std::getenv("OMPI_COMM_WORLD_SIZE");
      size && std::atoi(size) > 1) {
    const char *rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (!rank || std::atoi(rank) == 0)
      reportError("mpirun started several processes, but this mlt-run has no "
                  "CUDA backend (one process per GPU); run it without mpirun");
    return 1;
  }
#endif
  Status status = runTool(argc, argv, launch);
  if (!status) {
    reportError(status.message());
    // (without the exit handlers: OpenBLAS's joins its threads, and one that
    // could not allocate its buffer, memory being short, retries for ever;
    // whatever the run wrote is complete or removed by now)
    std::fflush(nullptr);
    std::_Exit(1);
  }
  return 0;
}
