//===- mlt-checkpoint.cpp - training checkpoints, inspected and converted -===//
//
// Part of mlt. What `mlt-run --save-checkpoint` writes, for the user:
//
//   mlt-checkpoint info CHECKPOINT           the step, the layout it was
//        [--verify]                          saved from, its shards and
//                                            tensors, checked whole (with
//                                            --verify, every byte read)
//   mlt-checkpoint to-hf CHECKPOINT OUT      an HF checkpoint (config.json,
//        [--dtype f32|bf16]                  model.safetensors) of its
//        [--skip-checksums]                  weights, with the tokenizer and
//                                            generation_config.json the
//                                            run recorded (ExportFiles.h)
//
// CHECKPOINT is a --save-checkpoint ROOT (its latest checkpoint) or one
// checkpoint's directory. Whatever layout saved it, the weights come out
// whole, under their HF names.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/ExportFiles.h"
#include "mlt/Runtime/io/SafeTensors.h"
#include "mlt/Runtime/train/Checkpoint.h"
#include "mlt/Support/FileKind.h"
#include "mlt/Support/FormatBytes.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

using namespace mlt;
using namespace mlt::rt;
namespace fs = std::filesystem;

namespace {

constexpr const char *kUsage =
    "usage: mlt-checkpoint info CHECKPOINT [--verify]\n"
    "       mlt-checkpoint to-hf CHECKPOINT OUT [--dtype f32|bf16] "
    "[--skip-checksums]\n"
    "\n"
    "CHECKPOINT is a directory mlt-run --save-checkpoint wrote (its latest\n"
    "checkpoint) or one checkpoint in it (ROOT/step-NNNNNN).\n"
    "\n"
    "  info   prints the step, the layout that saved it, its shards and\n"
    "         its tensors, after checking that every shard is whole and\n"
    "         that its small files and shard headers match their\n"
    "         checksums; with --verify, reads every byte of every shard\n"
    "         and checks it too\n"
    "  to-hf  writes OUT as an HF checkpoint (config.json and\n"
    "         model.safetensors) of the checkpoint's weights, whole tensors\n"
    "         under HF names whatever layout saved them, in f32 (default)\n"
    "         or bf16; OUT must not exist, or be an HF checkpoint, which is\n"
    "         replaced once the new one is complete; every byte it reads\n"
    "         is checked against its checksum unless --skip-checksums.\n"
    "         Beside them: the tokenizer's files the run recorded (those\n"
    "         the data was made with, else the model directory's), while\n"
    "         they have the recorded hashes (else left out, with a\n"
    "         warning), and generation_config.json (the model directory's,\n"
    "         else one of the config's bos/eos/pad ids)\n";

void warn(const std::string &line) {
  std::fflush(stdout);
  std::fprintf(stderr, "mlt-checkpoint: warning: %s\n", line.c_str());
}

int fail(const Status &status) {
  std::fprintf(stderr, "mlt-checkpoint: error: %s\n",
               status.message().c_str());
  return 1;
}

int usageError(const std::string &message) {
  std::fprintf(stderr, "mlt-checkpoint: error: %s (see mlt-checkpoint --help)\n",
               message.c_str());
  return 2;
}

std::string savedBy(const TrainingCheckpoint &state) {
  return state.layout.empty() ? "one rank" : state.layout;
}

int64_t elementsOf(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

int info(const std::string &path, bool verify) {
  StatusOr<std::unique_ptr<CheckpointReader>> reader =
      CheckpointReader::open(path);
  if (!reader)
    return fail(reader.status());
  const CheckpointReader &checkpoint = **reader;
  if (verify) {
    if (!checkpoint.checked())
      return fail(errorf(checkpoint.directory(), ": saved by an older mlt, ",
                         "without checksums: nothing to verify against"));
    const size_t shards = checkpoint.index().files.size();
    uint64_t read = 0;
    Status verified = checkpoint.verifyFiles([&](size_t i, uint64_t bytes) {
      read += bytes;
      // (progress on long checks: a line per 10% of the shards)
      if (shards >= 20 && (i + 1) % (shards / 10) == 0)
        std::fprintf(stderr, "verified %zu of %zu shards (%s)\n", i + 1,
                     shards, formatBytes(read).c_str());
    });
    if (!verified.isOk())
      return fail(verified);
  }
  const CheckpointIndex &index = checkpoint.index();
  std::printf("%s: step %" PRId64 ", saved by %s\n",
              checkpoint.directory().c_str(), checkpoint.state().step,
              savedBy(checkpoint.state()).c_str());
  int64_t parameters = 0;
  size_t parameterTensors = 0;
  for (const ExpectedTensor &tensor : checkpoint.parameters().tensors()) {
    parameters += elementsOf(tensor.shape);
    ++parameterTensors;
  }
  std::printf("  %zu parameters (%" PRId64 " elements) and %zu moments, "
              "f32, in %zu pieces\n",
              parameterTensors, parameters,
              checkpoint.optimizerState().tensors().size(), [&] {
                size_t pieces = 0;
                for (const CheckpointIndex::Tensor &tensor : index.tensors)
                  pieces += tensor.pieces.size();
                return pieces;
              }());
  std::printf("  %zu shards, %s, %s:\n", index.files.size(),
              formatBytes(checkpoint.shardBytes()).c_str(),
              !checkpoint.checked()
                  ? "without checksums (saved by an older mlt)"
              : verify ? "every byte matches its checksum"
                       : "headers match their checksums (--verify reads "
                         "every byte)");
  for (const CheckpointIndex::File &file : index.files)
    std::printf("    %s  %s\n", file.name.c_str(),
                formatBytes(file.bytes).c_str());
  return 0;
}

int toHF(const std::string &path, const std::string &out,
         const std::string &dtypeName, bool skipChecksums) {
  DType dtype = DType::F32;
  if (dtypeName == "bf16")
    dtype = DType::BF16;
  else if (dtypeName != "f32")
    return usageError("--dtype is '" + dtypeName + "'; use f32 or bf16");
  // OUT: new, or an HF checkpoint to replace (never another directory, nor
  // the training checkpoint itself).
  std::error_code error;
  if (fs::exists(fs::symlink_status(out, error))) {
    if (!fs::is_directory(out, error) ||
        !fs::exists(fs::path(out) / "config.json", error) ||
        !fs::exists(fs::path(out) / "model.safetensors", error))
      return fail(errorf(out, ": exists and is not an HF checkpoint; not ",
                         "replacing it"));
  } else if (Status problem = checkOutputPath(out, /*directory=*/true);
             !problem.isOk()) {
    return fail(problem);
  }

  CheckpointReadOptions options;
  options.checkPieces = !skipChecksums;
  StatusOr<std::unique_ptr<CheckpointReader>> reader =
      CheckpointReader::open(path, options);
  if (!reader)
    return fail(reader.status());
  const CheckpointReader &checkpoint = **reader;
  // (the moments are not exported, but checked: a damaged checkpoint is
  // refused whatever part is damaged)
  if (Status moments = checkpoint.verifyOptimizerState(); !moments.isOk())
    return fail(moments);
  // The files the run recorded for its exports, read back against their
  // hashes.
  ExportRecord record;
  if (!checkpoint.state().exportFiles.empty()) {
    StatusOr<ExportRecord> recorded =
        ExportRecord::fromJson(checkpoint.state().exportFiles);
    if (recorded)
      record = std::move(*recorded);
    else
      warn(checkpoint.directory() + ": its record of the files an export " +
           "copies: " + recorded.status().message() + "; none is copied");
  }
  ExportContents extra = loadExportFiles(record, checkpoint.state().config);
  for (const std::string &line : extra.warnings)
    warn(line);
  // One whole tensor in memory at a time, whatever the model's size.
  std::vector<TensorSpec> specs;
  for (const ExpectedTensor &tensor : checkpoint.parameters().tensors())
    specs.push_back({tensor.name, dtype, tensor.shape});
  Tensor current;
  Status written = writeCheckpointDir(
      out, checkpoint.state().config, specs,
      [&](size_t i) -> StatusOr<ByteView> {
        StatusOr<std::vector<float>> values =
            checkpoint.parameters().values(specs[i].name);
        if (!values)
          return values.takeStatus();
        current = Tensor::fromFloats(dtype, specs[i].shape, *values);
        return ByteView{current.bytes.data(), current.bytes.size()};
      },
      extra.files);
  if (!written.isOk())
    return fail(written);
  std::string names = "config.json, model.safetensors";
  for (const auto &[name, bytes] : extra.files)
    names += ", " + name;
  std::printf("wrote %s (%s): %zu tensors from step %" PRId64
              " (saved by %s)\n",
              out.c_str(), names.c_str(), specs.size(),
              checkpoint.state().step, savedBy(checkpoint.state()).c_str());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty())
    return usageError("no command given");
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::string dtype = "f32";
  bool dtypeGiven = false, verify = false, skipChecksums = false;
  std::vector<std::string> positional;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--verify") {
      verify = true;
    } else if (args[i] == "--skip-checksums") {
      skipChecksums = true;
    } else if (args[i] == "--dtype") {
      dtypeGiven = true;
      if (i + 1 == args.size())
        return usageError("--dtype needs a value (f32 or bf16)");
      dtype = args[++i];
    } else if (args[i].rfind("--dtype=", 0) == 0) {
      dtypeGiven = true;
      dtype = args[i].substr(8);
    } else if (args[i].size() > 1 && args[i][0] == '-') {
      return usageError("unknown option '" + args[i] + "'");
    } else {
      positional.push_back(args[i]);
    }
  }
  for (const std::string &arg : positional)
    if (arg.empty())
      return usageError("an empty path");
  if (args[0] == "info") {
    if (positional.size() != 1)
      return usageError("info takes one CHECKPOINT");
    if (dtypeGiven || skipChecksums)
      return usageError(std::string(dtypeGiven ? "--dtype" : "--skip-checksums") +
                        " is an option of to-hf, not of info");
    return info(positional[0], verify);
  }
  if (args[0] == "to-hf") {
    if (positional.size() != 2)
      return usageError("to-hf takes CHECKPOINT and OUT");
    if (verify)
      return usageError("--verify is an option of info; to-hf checks what "
                        "it reads unless --skip-checksums");
    return toHF(positional[0], positional[1], dtype, skipChecksums);
  }
  return usageError("unknown command '" + args[0] + "'; use info or to-hf");
}
