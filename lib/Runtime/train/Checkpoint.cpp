//===- Checkpoint.cpp - training checkpoints that resume ------------------===//
//
// Part of mlt. Writes and reads the checkpoint directories of Checkpoint.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/train/Checkpoint.h"

#include "mlt/Runtime/io/FileKind.h"
#include "mlt/Runtime/io/JsonDepth.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <signal.h>
#include <sstream>
#include <unistd.h>

using namespace mlt;
using namespace mlt::rt;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char *kFormat = "mlt-training-checkpoint";
constexpr int kVersion = 1;
constexpr const char *kLatest = "latest";
constexpr const char *kOptimizerFile = "optimizer.safetensors";
constexpr const char *kTrainerFile = "trainer.json";
/// Files a checkpoint's small texts may not exceed (a corrupt or hostile
/// one is refused before it is read whole).
constexpr uintmax_t kMaxTextBytes = uintmax_t(1) << 24;

/// The step of a checkpoint directory's name ("step-000006": 6), or -1.
int64_t stepOfName(const std::string &name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5)
    return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (int64_t(1) << 50))
      return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

/// Removes the temporary entries under `root` (".<name>.tmp-<pid>-...")
/// whose writing process is gone: what a killed save left behind.
void removeStaleTemporaries(const fs::path &root) {
  std::error_code error;
  for (const fs::directory_entry &entry : fs::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    const size_t at = name.find(".tmp-");
    if (name.empty() || name[0] != '.' || at == std::string::npos)
      continue;
    const long pid = std::strtol(name.c_str() + at + 5, nullptr, 10);
    if (pid <= 0 || pid == long(::getpid()))
      continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH)
      continue; // alive (or not ours to ask about)
    std::error_code ignored;
    fs::remove_all(entry.path(), ignored);
  }
}

/// A small text file of a checkpoint, read whole after checking it is one.
StatusOr<std::string> readText(const fs::path &path) {
  MLT_RETURN_IF_ERROR(checkInputPath(path.string()));
  std::error_code error;
  const uintmax_t size = fs::file_size(path, error);
  if (error)
    return errorf(path.string(), ": cannot read: ", error.message());
  if (size > kMaxTextBytes)
    return errorf(path.string(), ": ", size, " bytes, more than a ",
                  "checkpoint's ", path.filename().string(), " holds");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in)
    return errorf(path.string(), ": cannot read");
  return text.str();
}

/// Replaces `path` with `text` through a temporary file and a rename.
Status replaceText(const fs::path &path, const std::string &text) {
  const fs::path temporary =
      path.parent_path() /
      ("." + path.filename().string() + ".tmp-" + std::to_string(::getpid()));
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out)
      return errorf(temporary.string(), ": cannot write: ",
                    std::strerror(errno));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    return errorf(path.string(), ": cannot replace: ", std::strerror(error));
  }
  return Status::ok();
}

} // namespace

std::string mlt::rt::checkpointDirName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%06lld", (long long)step);
  return name;
}

StatusOr<std::string>
mlt::rt::saveTrainingCheckpoint(const std::string &root,
                                const TrainingCheckpoint &checkpoint,
                                int64_t keepLast) {
  const fs::path rootPath(root);
  std::error_code error;
  if (!fs::is_directory(rootPath, error)) {
    MLT_RETURN_IF_ERROR(checkOutputPath(root, /*directory=*/true));
    if (!fs::create_directory(rootPath, error) && error)
      return errorf(root, ": cannot create the directory: ", error.message());
  }
  removeStaleTemporaries(rootPath);

  const std::string name = checkpointDirName(checkpoint.step);
  const fs::path dir = rootPath / name;
  json trainer = {{"format", kFormat},
                  {"version", kVersion},
                  {"step", checkpoint.step},
                  {"seed", checkpoint.seed},
                  {"shuffle", checkpoint.shuffle},
                  {"layout", checkpoint.layout}};
  MLT_RETURN_IF_ERROR(writeCheckpointDir(
      dir.string(), checkpoint.config, checkpoint.parameters,
      {CheckpointFile{kOptimizerFile, &checkpoint.optimizerState, ""},
       CheckpointFile{kTrainerFile, nullptr, trainer.dump(2) + "\n"}}));
  MLT_RETURN_IF_ERROR(replaceText(rootPath / kLatest, name + "\n"));

  if (keepLast > 0) {
    std::vector<std::pair<int64_t, fs::path>> steps;
    for (const fs::directory_entry &entry :
         fs::directory_iterator(rootPath, error)) {
      const int64_t step = stepOfName(entry.path().filename().string());
      if (step >= 0 && entry.is_directory(error))
        steps.push_back({step, entry.path()});
    }
    std::sort(steps.begin(), steps.end());
    for (size_t i = 0; i + size_t(keepLast) < steps.size(); ++i)
      if (steps[i].second != dir) {
        // Renamed away first, in one step, so that a process killed while
        // removing it leaves a temporary (removed by a later save) rather
        // than a checkpoint with files missing.
        const fs::path doomed =
            rootPath / ("." + steps[i].second.filename().string() + ".tmp-" +
                        std::to_string(::getpid()) + "-removed");
        std::error_code ignored;
        if (std::rename(steps[i].second.c_str(), doomed.c_str()) == 0)
          fs::remove_all(doomed, ignored);
      }
  }
  return dir.string();
}

StatusOr<TrainingCheckpoint>
mlt::rt::loadTrainingCheckpoint(const std::string &path) {
  fs::path dir(path);
  std::error_code error;
  if (!fs::is_directory(dir, error))
    return errorf(path, ": not a checkpoint directory (",
                  fs::exists(dir, error) ? "not a directory" : "does not exist",
                  ")");
  if (fs::exists(dir / kLatest, error)) {
    StatusOr<std::string> latest = readText(dir / kLatest);
    if (!latest)
      return latest.takeStatus();
    std::string name = *latest;
    while (!name.empty() && (name.back() == '\n' || name.back() == ' '))
      name.pop_back();
    if (stepOfName(name) < 0)
      return errorf((dir / kLatest).string(), ": names '", name,
                    "', not a checkpoint (step-NNNNNN)");
    dir /= name;
    if (!fs::is_directory(dir, error))
      return errorf((fs::path(path) / kLatest).string(), ": names ", name,
                    ", which does not exist");
  }
  const fs::path trainerPath = dir / kTrainerFile;
  if (!fs::exists(trainerPath, error))
    return errorf(path, ": not a training checkpoint (no ", kTrainerFile,
                  "; an HF checkpoint is read with --init-from)");
  StatusOr<std::string> text = readText(trainerPath);
  if (!text)
    return text.takeStatus();
  if (std::optional<size_t> at = jsonTooDeepAt(*text))
    return errorf(trainerPath.string(), ": ", jsonTooDeepMessage(*at));
  TrainingCheckpoint checkpoint;
  try {
    const json trainer = json::parse(*text);
    if (!trainer.is_object() || trainer.value("format", "") != kFormat)
      return errorf(trainerPath.string(), ": not an mlt training checkpoint");
    if (trainer.value("version", 0) != kVersion)
      return errorf(trainerPath.string(), ": format version ",
                    trainer.value("version", 0), ", this mlt reads ",
                    kVersion);
    checkpoint.step = trainer.at("step").get<int64_t>();
    checkpoint.seed = trainer.at("seed").get<uint64_t>();
    checkpoint.shuffle = trainer.at("shuffle").get<bool>();
    checkpoint.layout = trainer.value("layout", "");
  } catch (const json::exception &e) {
    return errorf(trainerPath.string(), ": ", e.what());
  }
  if (checkpoint.step < 1)
    return errorf(trainerPath.string(), ": step ", checkpoint.step,
                  " (a checkpoint holds a step of 1 or more)");
  StatusOr<std::string> config = readText(dir / "config.json");
  if (!config)
    return config.takeStatus();
  checkpoint.config = std::move(*config);
  for (auto [file, tensors] :
       {std::pair{"model.safetensors", &checkpoint.parameters},
        std::pair{kOptimizerFile, &checkpoint.optimizerState}}) {
    const fs::path tensorPath = dir / file;
    StatusOr<TensorMap> read = readSafeTensors(tensorPath.string());
    if (!read)
      return read.takeStatus().withContext(tensorPath.string());
    *tensors = std::move(*read);
  }
  return checkpoint;
}
