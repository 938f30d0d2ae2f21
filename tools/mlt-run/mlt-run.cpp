//===- mlt-run.cpp - train a model from a plan ----------------------------===//
//
// Part of mlt. The command line of a run: the usage text, the options
// parsed into a RunOptions, and what the run tells (mlt/Run/RunObserver.h)
// printed, one line per step on stdout. The run itself (checks, the plan
// loaded or compiled or chosen by the planner, the ranks, training,
// checkpoints, and the processes of mpirun) is the run library's
// (mlt/Run/Run.h, Launch.h). Every error is one line, `mlt-run: error:
// <message>` (a line per rule a layout breaks), and exit status 1.
//
//===----------------------------------------------------------------------===//

#include "mlt/Layout/LayoutOptions.h"
#include "mlt/Layout/LayoutRules.h"
#include "mlt/Planner/Planner.h"
#include "mlt/Run/Launch.h"
#include "mlt/Run/Run.h"
#include "mlt/Run/RunObserver.h"
#include "mlt/Run/RunOptions.h"
#include "mlt/Runtime/io/DataBlend.h"
#include "mlt/Support/FormatBytes.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::run;

namespace {

const char *kUsageHead = R"(usage: mlt-run MODEL_OR_PLAN [options]

Trains a LLaMA model. MODEL_OR_PLAN is a plan file (recognized by its content,
the FlatBuffers identifier "MLTP", whatever its name), or, when mlt-run is built
with the compiler, a .mlir model, an HF config.json, or a directory holding one
(compiled in process for --batch, --seq-len and the layout). Each option is
given once (a second would silently win; it is refused instead).

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
  --collective-timeout SECONDS
                             with a plan of several ranks: when no rank has
                             moved in its plan for SECONDS (default 600; 0:
                             off; only the steps are timed, not the work
                             between them, nor on GPUs a program's set-up
                             in its first run and capture), print where
                             each rank is (step, launch, the collective or
                             transfer it waits in and its group) and a
                             summary line naming the ranks elsewhere, and
                             end the run (under mpirun, the job) with
                             status 1

Data:
  --data DATASET             the training data (default, for a model of 256
                             tokens only: the bundled corpus's bytes,
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
  --eval-data DATASET        held-out data to evaluate the loss on (as --data
                             takes it: a dataset, or weights and datasets):
                             after the last step, and every --eval-every
                             steps, --eval-iters global batches of it (its
                             first samples in file order: the same batches
                             each time) run forward only and report
                             eval_loss and eval_perplexity (exp(eval_loss));
                             the plan then holds an evaluation step (a
                             plan file compiled without one is refused)
  --split TRAIN,EVAL         hold part of --data out for evaluation, as
                             Megatron's --split: each dataset's first
                             documents (a token file's first samples) in
                             proportion TRAIN train, the last, in
                             proportion EVAL, are evaluated as --eval-data
                             would be; training never reads them (98,2:
                             2% held out)
  --eval-every N             with --eval-data or --split: evaluate every N
                             steps too (default: after the last step only)
  --eval-iters K             with --eval-data or --split: the global batches
                             an evaluation reads (default 10)
  --allow-data-change        with --resume: go on from a checkpoint trained
                             on other data or samples (checked by default:
                             datasets, weights, token counts, index hashes,
                             --batch and --seq-len)
  --allow-optimizer-change   with --resume: go on with a learning rate,
                             schedule or AdamW option other than the
                             checkpoint's (checked by default) from the
                             next step
  --skip-checksums           with --resume or --init-from of a training
                             checkpoint: do not check its tensors' bytes
                             against their checksums (faster; its small
                             files and shard headers are still checked)
  --batch N                  sequences per optimizer step (global batch)
  --seq-len N                tokens per sequence
  --steps N                  optimizer steps; 0 with --eval-data or --split:
                             evaluate the weights the run starts from
                             (--init-from) once, and train nothing
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
                                 * (1 + cos(pi * min(1, (s - warmup) / (D - warmup))))
                             so the cosine reaches min_lr at step D and stays.
  --lr-decay-steps D         where the cosine reaches min_lr (default --steps;
                             on --resume, the checkpoint's: a longer --steps
                             goes on at min_lr)
  --adam-beta1 X             (default 0.9)
  --adam-beta2 X             (default 0.95)
  --adam-eps X               (default 1e-8)
  --weight-decay X           (default 0.1)
  --clip-grad X              clip the global gradient norm to X; 0: off (default 1)

Output:
  --log-json FILE            one JSON object per step: step, loss, grad_norm, lr,
                             tokens_per_s, step_time_s, tokens, elapsed_s
                             (appended to on --resume); and one per
                             evaluation: step, eval_loss, eval_perplexity,
                             eval_tokens, eval_time_s
  --tensorboard DIR          the same scalars (but tokens, elapsed_s,
                             eval_tokens, eval_time_s) as TensorBoard event
                             files in DIR (created; a resumed run adds a file)
  --save-hf DIR              after training, write DIR/config.json and
                             DIR/model.safetensors (f32), replacing DIR
                             atomically; with them generation_config.json
                             (the model directory's, else one of the
                             config's bos/eos/pad ids) and the tokenizer's
                             files: those the data was made with, as
                             mlt-tokenize recorded them beside it, else the
                             model directory's; a tokenizer changed or gone
                             since is left out, with a warning
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
  --async-save               with --save-checkpoint: write each checkpoint
                             in the background (the default): training
                             stops only while the state is copied into
                             host memory kept for it (page-locked on GPUs;
                             the size of this process's share of the
                             weights and moments, in f32), and the next
                             save or the run's end waits for the write; by
                             default off where that memory would exceed
                             half of the host's free memory
  --no-async-save            with --save-checkpoint: write each checkpoint
                             while training waits (no memory kept)
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
                             prediction beside the measured step; compiling,
                             its costs also decide which of sequence
                             parallelism's collective matmuls are split
                             (without it, every one is)
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
                             F1.0 B1.0 ...", and its evaluation's where the
                             plan has one) and exit
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
goes to stdout, and one per evaluation:
  step    3/100  loss 5.5563  lr 3.00e-03  grad_norm 1.2512  tokens/s 12345
  eval after step 3  eval_loss 5.5012  eval_perplexity 245  (10 batches, ...)
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

/// The command line: a run's options, and the requests for help.
struct CommandLine : RunOptions {
  bool help = false;
  bool helpLayoutRules = false;
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

Status parseArgs(int argc, char **argv, CommandLine &o) {
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
      {"--eval-every", integer(o.evalEvery)},
      {"--eval-iters", integer(o.evalIters)},
      {"--split",
       [&o](const std::string &flag, const std::string &v) {
         StatusOr<DataSplit> split = parseDataSplit(v);
         if (!split)
           return split.takeStatus().withContext(flag);
         o.split = std::move(*split);
         return Status::ok();
       }},
      {"--lr", number(o.lr)},
      {"--min-lr", number(o.minLR)},
      {"--warmup", plainInteger(o.warmup)},
      {"--lr-schedule", str(o.schedule)},
      {"--lr-decay-steps", integer(o.lrDecaySteps)},
      {"--adam-beta1", number(o.beta1)},
      {"--adam-beta2", number(o.beta2)},
      {"--adam-eps", number(o.eps)},
      {"--weight-decay", number(o.weightDecay)},
      {"--clip-grad", number(o.clipGrad)},
      {"--collective-timeout", number(o.collectiveTimeout)},
      {"--log-json", str(o.logJson)},
      {"--tensorboard", str(o.tensorboard)},
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
      {"--async-save", nullptr},
      {"--no-async-save", nullptr},
      {"--allow-data-change", &o.allowDataChange},
      {"--allow-optimizer-change", &o.allowOptimizerChange},
      {"--skip-checksums", &o.skipChecksums},
      {"--print-plan", &o.printPlan},
      {"--print-schedule", &o.printSchedule},
      {"--report-memory", &o.reportMemory},
      {"--report", &o.report},
      {"--tune-matmuls", &o.tuneMatmuls},
      {"--help", &o.help},
      {"--help-layout-rules", &o.helpLayoutRules},
      {"-h", &o.help},
  };

  std::set<std::string> seen;
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
    // (the second of two would silently win)
    if (!seen.insert(name).second)
      return errorf(name, " is given twice; give it once");
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
      else if (name == "--async-save" || name == "--no-async-save") {
        if (o.asyncSave)
          return errorf("--async-save and --no-async-save contradict each "
                        "other; give one");
        o.asyncSave = name == "--async-save";
      }
      else
        *it->second = true;
      continue;
    }
    if (name == "--data" || name == "--eval-data") {
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
      (name == "--data" ? o.data : o.evalData) = std::move(*sources);
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

/// printf's formatting of the arguments by `format` (checked against them
/// by the compiler: a count passed where a %f is expected once printed a
/// register's garbage).
__attribute__((format(printf, 1, 2))) std::string
formatText(const char *format, ...) {
  char text[128];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  return text;
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

std::string baseName(std::string path) {
  while (path.size() > 1 && path.back() == '/')
    path.pop_back();
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// Prints what the run tells: its lines on stdout, as each happens; the
/// progress of long phases on stderr.
class Printer final : public RunObserver {
public:
  void progress(const std::string &line) override {
    std::fprintf(stderr, "mlt-run: %s\n", line.c_str());
  }

  void layoutsRanked(const PlannerReport &report) override {
    print(formatPlannerReport(report));
  }

  void planReported(const std::string &text) override { print(text); }

  void resumeNote(const std::string &line) override {
    std::printf("note: %s\n", line.c_str());
  }
  void dataChanged(const std::string &difference) override {
    std::printf("note: --allow-data-change: %s\n", difference.c_str());
  }

  void resumed(const std::string &checkpoint, int64_t step,
               const std::string &layout) override {
    std::printf("resumed from %s at step %" PRId64 "%s\n", checkpoint.c_str(),
                step,
                layout.empty() ? " (saved by one rank)"
                               : (" (saved by " + layout + ")").c_str());
  }

  void started(const RunSummary &s) override {
    const std::string ranks =
        s.mesh.empty()
            ? ""
            : ", ranks " + std::to_string(s.worldSize) + " (" + s.mesh + ")";
    const std::string processes =
        s.ncclVersion.empty() ? ""
                              : ", one process per GPU, NCCL " + s.ncclVersion;
    std::string evaluation;
    if (!s.evaluation.empty())
      evaluation = ", evaluation on " + s.evaluation + " (" +
                   std::to_string(s.evalIters) +
                   (s.evalIters == 1 ? " batch" : " batches") +
                   (s.evalEvery ? " every " + std::to_string(s.evalEvery) +
                                      (s.evalEvery == 1 ? " step" : " steps") +
                                      " and at the end"
                                : std::string(" at the end")) +
                   ")";
    char scratch[64] = "";
    if (s.scratchBytes)
      std::snprintf(scratch, sizeof scratch, " and kernel scratch %.2f MiB",
                    double(s.scratchBytes) / (1024.0 * 1024.0));
    std::printf("model %s: %s parameters, %" PRId64
                " tokens/step (batch %" PRId64 " x seq %" PRId64 ", %" PRId64
                " micro-batch%s of %" PRId64
                "), arena %.2f MiB%s%s%s%s, %s %s, %" PRId64
                " steps, data %s%s\n",
                baseName(s.model).c_str(), formatCount(s.parameters).c_str(),
                s.globalBatch * s.seqLen, s.globalBatch, s.seqLen,
                s.microbatches, s.microbatches == 1 ? "" : "es", s.microBatch,
                double(s.arenaBytes) / (1024.0 * 1024.0), scratch,
                s.ranks > 1 ? " per rank (largest)" : "", ranks.c_str(),
                processes.c_str(), s.backend.c_str(), s.precision.c_str(),
                s.steps, s.data.c_str(), evaluation.c_str());
    std::fflush(stdout);
  }

  void predicted(double stepSeconds, double tokensPerSecond,
                 const std::string &calibrationSource) override {
    std::printf("predicted step %.2f ms, %.0f tokens/s (calibration: %s)\n",
                stepSeconds * 1e3, tokensPerSecond, calibrationSource.c_str());
    std::fflush(stdout);
  }

  void profiled(const std::string &profile) override { print(profile); }

  void traceWritten(int64_t step, const std::string &path) override {
    std::printf("trace of step %" PRId64 " written to %s\n", step,
                path.c_str());
    std::fflush(stdout);
  }

  void step(const StepMetrics &m, const StepProgress &pace,
            int64_t steps) override {
    const int width = std::max<int>(4, std::to_string(steps).size());
    std::string flops;
    if (pace.tflopsPerGpu)
      flops = formatText("  %.0f TFLOP/s per GPU", *pace.tflopsPerGpu);
    if (pace.mfu)
      flops += formatText(" (%.1f%% MFU)", *pace.mfu * 100.0);
    std::printf("step %*" PRId64 "/%" PRId64
                "  loss %.4f  lr %.2e  grad_norm %.4f  tokens/s %.0f (%.0f over "
                "%" PRId64 " %s)%s  %s elapsed, %s left\n",
                width, m.step, steps, m.loss, m.lr, m.gradNorm,
                m.tokensPerSecond, pace.tokensPerSecond, pace.window,
                pace.window == 1 ? "step" : "steps", flops.c_str(), formatDuration(pace.elapsed).c_str(),
                formatDuration(pace.remaining).c_str());
    std::fflush(stdout);
  }

  void evaluated(const EvalMetrics &m) override {
    const std::string when = m.step == 0 ? std::string("before training")
                                         : "after step " + std::to_string(m.step);
    std::printf("eval %s  eval_loss %.4f  eval_perplexity %.4g  (%" PRId64
                " %s, %s tokens, %.2f s)\n",
                when.c_str(), m.loss, m.perplexity, m.batches,
                m.batches == 1 ? "batch" : "batches",
                formatCount(m.tokens).c_str(), m.seconds);
    std::fflush(stdout);
  }

  void finished(const RunTotals &t) override {
    std::string flops;
    if (t.tflopsPerGpu)
      flops = formatText(", %.0f TFLOP/s per GPU", *t.tflopsPerGpu);
    if (t.mfu)
      flops += formatText(" (%.1f%% MFU)", *t.mfu * 100.0);
    // (the warm-up: the first step, and the CUDA graph's capture in the
    // second where more follow)
    const std::string after =
        t.warmupSteps == 1   ? " after the first step"
        : t.warmupSteps > 1 ? formatText(" after the first %" PRId64
                                          " steps (the device's set-up)",
                                          t.warmupSteps)
                             : std::string();
    std::printf("trained %" PRId64 " %s (%" PRId64 " tokens) in %s: %.0f "
                "tokens/s%s%s\n",
                t.steps, t.steps == 1 ? "step" : "steps", t.tokens,
                formatDuration(t.seconds).c_str(), t.tokensPerSecond,
                after.c_str(), flops.c_str());
    // (the rank the others wait for: it waits least in the collectives)
    if (t.slowest) {
      const SlowestRank &s = *t.slowest;
      const bool several = t.ranks.size() > 2;
      std::printf("slowest rank: %u, which waited %.1f ms a step in "
                  "collectives and transfers; the other %s %s%.1f ms\n",
                  s.rank, s.waitSeconds * 1e3,
                  several ? "ranks" : "rank", several
                      ? formatText("%.1f-", s.othersLeast * 1e3).c_str()
                      : "",
                  s.othersMost * 1e3);
    }
    std::fflush(stdout);
  }

  void checkpointSaved(const SavedCheckpoint &saved) override {
    if (saved.backgroundSeconds)
      std::printf("saved checkpoint %s (%s; training paused %.2f s, written "
                  "in the background in %.1f s)\n",
                  saved.dir.c_str(), formatBytes(saved.bytes).c_str(),
                  saved.pausedSeconds, *saved.backgroundSeconds);
    else
      std::printf("saved checkpoint %s (%s in %.1f s)\n", saved.dir.c_str(),
                  formatBytes(saved.bytes).c_str(), saved.pausedSeconds);
    std::fflush(stdout);
  }

  void hfSaved(const std::string &dir, std::optional<int64_t> step,
               const std::vector<std::string> &files) override {
    std::string names;
    for (const std::string &file : files)
      names += (names.empty() ? "" : ", ") + file;
    if (step)
      std::printf("saved %s (%s) at step %" PRId64 "\n", dir.c_str(),
                  names.c_str(), *step);
    else
      std::printf("saved %s (%s)\n", dir.c_str(), names.c_str());
    std::fflush(stdout);
  }

  void warning(const std::string &line) override {
    std::fflush(stdout);
    std::fprintf(stderr, "mlt-run: warning: %s\n", line.c_str());
    std::fflush(stderr);
  }

  void stopped(const std::string &signal, int64_t step, int64_t steps,
               const std::string &resumeFrom) override {
    std::printf("stopped by %s after step %" PRId64 " of %" PRId64 "; %s\n",
                signal.c_str(), step, steps,
                !resumeFrom.empty()
                    ? ("go on with --resume " + resumeFrom).c_str()
                    : "nothing saved (no --save-checkpoint)");
    std::fflush(stdout);
  }

  void stepTimeCompared(double measured, size_t measuredSteps,
                        double predicted) override {
    std::printf("step time: measured %.2f ms (the median of %zu steps), "
                "predicted %.2f ms (%+.1f%%)\n",
                measured * 1e3, measuredSteps, predicted * 1e3,
                100.0 * (predicted - measured) / measured);
    std::fflush(stdout);
  }

  void calibrationWritten(const CalibrationWritten &w) override {
    char fitted[96];
    if (w.fittedOverlap)
      std::snprintf(fitted, sizeof fitted,
                    "overlap slowdown %.3f (at the launch gap %.2f us)",
                    w.overlapSlowdown, w.launchGap * 1e6);
    else
      std::snprintf(fitted, sizeof fitted, "launch gap %.2f us",
                    w.launchGap * 1e6);
    std::printf("calibration of %s written to %s%s: %zu kernel classes; this "
                "run: %zu classes, %s, predicted step %.2f ms at the measured "
                "%.2f ms\n",
                w.device.c_str(), w.file.c_str(),
                w.merged ? ", merged with the calibration there" : "",
                w.classes, w.runClasses, fitted, w.predictedSeconds * 1e3,
                w.measuredSeconds * 1e3);
    std::fflush(stdout);
  }

  void hangReported(const HangReport &report, bool endsRun) override {
    std::fflush(stdout);
    std::fprintf(stderr, "mlt-run: hang: where each rank is in its plan:\n");
    for (const std::string &line : report.ranks)
      std::fprintf(stderr, "mlt-run:   %s\n", line.c_str());
    if (endsRun)
      std::fprintf(stderr, "mlt-run: error: %s\n", report.summary.c_str());
    std::fflush(stderr);
  }

  void aborting(int rank, const std::string &message) override {
    std::fflush(stdout);
    std::fprintf(stderr, "mlt-run: error: rank %d: %s\n", rank,
                 message.c_str());
    std::fflush(stderr);
  }

private:
  static void print(const std::string &text) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
};

Status runTool(int argc, char **argv, const Launch &launch) {
  CommandLine o;
  MLT_RETURN_IF_ERROR(parseArgs(argc, argv, o));
  if (o.help) {
    if (launch.rank() != 0)
      return Status::ok();
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
  Printer printer;
  return execute(o, launch, printer);
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

} // namespace

int main(int argc, char **argv) {
  const ProcessOutcome outcome = runProcess(argc, argv, runTool, reportError);
  if (outcome.endAtOnce) {
    // (without the exit handlers: OpenBLAS's joins its threads, and one that
    // could not allocate its buffer, memory being short, retries for ever;
    // whatever the run wrote is complete or removed by now)
    std::fflush(nullptr);
    std::_Exit(outcome.exitStatus);
  }
  return outcome.exitStatus;
}
