//===- Checkpoint.cpp - training checkpoints that resume ------------------===//
//
// Part of mlt. Writes and reads the checkpoint directories of Checkpoint.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/train/Checkpoint.h"
#include "mlt/Runtime/train/CheckpointStaging.h"

#include "mlt/Plan/ModelConfig.h"
#include "mlt/Plan/PlanFormat.h"
#include "mlt/Runtime/io/SafeTensors.h"
#include "mlt/Support/AtomicFile.h"
#include "mlt/Support/ContentHash.h"
#include "mlt/Support/FileKind.h"
#include "mlt/Support/JsonDepth.h"
#include "mlt/Support/Threads.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <signal.h>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace mlt;
using namespace mlt::rt;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char *kFormat = "mlt-training-checkpoint";
/// 1: whole tensors in model.safetensors and optimizer.safetensors; 2:
/// every rank's shard and an index; 3: content hashes (trainer.json's own,
/// its index's and config's, the index's of every shard and piece).
/// Version 2 is still read, unchecked.
constexpr int kVersion = 3;
constexpr int kOldestVersion = 2;
constexpr const char *kLatest = "latest";
constexpr const char *kIndexFile = "index.json";
constexpr const char *kTrainerFile = "trainer.json";
constexpr const char *kConfigFile = "config.json";
/// Files a checkpoint's small texts may not exceed (a corrupt or hostile
/// one is refused before it is read whole); an index of a large model on
/// thousands of ranks stays well below.
constexpr uintmax_t kMaxTextBytes = uintmax_t(1) << 28;
/// Shards kept open between reads; beyond, each read opens its shard.
constexpr size_t kMaxOpenShards = 256;
/// trainer.json's own hash: the last field, its 16 digits zeros while the
/// text is hashed.
constexpr std::string_view kSelfHashField = "\"checksum\": \"xxh3:";

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

/// Whether a checkpoint tensor is one of AdamW's moments.
bool isMoment(const std::string &name) {
  return name.rfind(kExpAvgPrefix, 0) == 0 ||
         name.rfind(kExpAvgSqPrefix, 0) == 0;
}

/// `body` (a JSON object's text, ending in '}') with trainer.json's own
/// hash added as its last field.
std::string withSelfHash(std::string body) {
  while (!body.empty() && (body.back() == '\n' || body.back() == ' '))
    body.pop_back();
  body.pop_back(); // '}'
  while (!body.empty() && (body.back() == '\n' || body.back() == ' '))
    body.pop_back();
  body += ",\n  ";
  body += kSelfHashField;
  const size_t digits = body.size();
  body += std::string(16, '0') + "\"\n}\n";
  const std::string hash = formatContentHash(contentHash(body.data(), body.size()));
  body.replace(digits, 16, hash);
  return body;
}

/// Checks trainer.json's own hash (see withSelfHash); whether it has one.
StatusOr<bool> checkSelfHash(const std::string &text, const fs::path &path) {
  const size_t at = text.rfind(kSelfHashField);
  if (at == std::string::npos)
    return false;
  const size_t digits = at + kSelfHashField.size();
  std::optional<uint64_t> recorded;
  if (digits + 17 <= text.size() && text[digits + 16] == '"')
    recorded = parseContentHash(std::string_view(text).substr(digits, 16));
  if (!recorded)
    return errorf(path.string(), ": its checksum is not 16 hex digits");
  std::string zeroed = text;
  zeroed.replace(digits, 16, std::string(16, '0'));
  if (contentHash(zeroed.data(), zeroed.size()) != *recorded)
    return errorf(path.string(), ": does not match its checksum (changed or ",
                  "damaged since it was saved)");
  return true;
}

/// The {"bytes", "xxh3"} entry trainer.json keeps of a small file.
nlohmann::json fileEntry(const std::string &text) {
  return {{"bytes", text.size()},
          {"xxh3", formatContentHash(contentHash(text.data(), text.size()))}};
}

/// Checks `text`, read from `path`, against trainer.json's `entry` of it.
Status checkFileEntry(const json &entry, const std::string &text,
                      const fs::path &path, const fs::path &trainerPath) {
  if (!entry.is_object() || !entry.contains("xxh3") ||
      !entry.at("xxh3").is_string())
    return errorf(trainerPath.string(), ": no checksum of ",
                  path.filename().string());
  std::optional<uint64_t> recorded =
      parseContentHash(entry.at("xxh3").get<std::string>());
  if (!recorded)
    return errorf(trainerPath.string(), ": the checksum of ",
                  path.filename().string(), " is not 16 hex digits");
  if (contentHash(text.data(), text.size()) != *recorded)
    return errorf(path.string(), ": does not match the checksum ",
                  "trainer.json holds (changed or damaged since it was ",
                  "saved)");
  return Status::ok();
}

/// Checks that a checkpoint holds the tensors its config.json's LLaMA has:
/// each parameter under its HF name and shape, and both of AdamW's moments
/// of it, nothing missing and nothing else (a config of a few fields, as
/// test plans of toy models carry, describes no LLaMA to hold it to).
Status checkTensorsOfConfig(const CheckpointIndex &index,
                            const std::string &config, const fs::path &dir) {
  StatusOr<PlanConfig> parsed = parsePlanConfig(config);
  if (!parsed)
    return parsed.takeStatus().withContext((dir / kConfigFile).string());
  if (!parsed->llama)
    return Status::ok();
  std::vector<ExpectedTensor> expected;
  for (auto &[name, shape] : llamaParameters(*parsed->llama)) {
    for (const char *prefix : {"", kExpAvgPrefix, kExpAvgSqPrefix})
      expected.push_back({prefix + name, shape});
  }
  std::vector<ExpectedTensor> present;
  for (const CheckpointIndex::Tensor &tensor : index.tensors)
    present.push_back({tensor.name, tensor.shape});
  return checkTensors(present, expected)
      .withContext((dir / kIndexFile).string() +
                   ": the tensors of the model its config.json describes");
}

/// The newest whole checkpoint under a checkpoint root without `latest`
/// (a first save killed after its directory was renamed into place, before
/// `latest` was written): the step-NNNNNN directory of the highest step
/// that holds its trainer.json and index.json; none if there is none.
std::optional<fs::path> newestWholeCheckpoint(const fs::path &root) {
  std::error_code error;
  std::optional<fs::path> newest;
  int64_t newestStep = -1;
  for (const fs::directory_entry &entry :
       fs::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    const int64_t step = stepOfName(name);
    if (step <= newestStep || !entry.is_directory(error) ||
        !fs::exists(entry.path() / kTrainerFile, error) ||
        !fs::exists(entry.path() / kIndexFile, error))
      continue;
    newest = entry.path();
    newestStep = step;
  }
  return newest;
}

/// The checkpoint directory `path` names: itself, the one its `latest`
/// names, or, in a checkpoint root without `latest`, its newest whole
/// checkpoint.
StatusOr<fs::path> checkpointDirOf(const std::string &path) {
  fs::path dir(path);
  std::error_code error;
  if (!fs::is_directory(dir, error))
    return errorf(path, ": not a checkpoint directory (",
                  fs::exists(dir, error) ? "not a directory" : "does not exist",
                  ")");
  if (!fs::exists(dir / kLatest, error)) {
    if (!fs::exists(dir / kTrainerFile, error))
      if (std::optional<fs::path> newest = newestWholeCheckpoint(dir))
        return *newest;
    return dir;
  }
  StatusOr<std::string> latest = readText(dir / kLatest);
  if (!latest)
    return latest.takeStatus();
  std::string name = *latest;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' '))
    name.pop_back();
  if (stepOfName(name) < 0)
    return errorf((dir / kLatest).string(), ": names '", name,
                  "', not a checkpoint (step-NNNNNN)");
  if (!fs::is_directory(dir / name, error))
    return errorf((dir / kLatest).string(), ": names ", name,
                  ", which does not exist");
  return dir / name;
}

/// trainer.json, checked: its own hash, and the step against the
/// directory's name. `files` receives its entries of index.json and
/// config.json (null in a checkpoint of version 2).
StatusOr<TrainingCheckpoint> readTrainerState(const fs::path &dir,
                                              const std::string &path,
                                              json &files) {
  const fs::path trainerPath = dir / kTrainerFile;
  std::error_code error;
  if (!fs::exists(trainerPath, error))
    return errorf(path, ": not a training checkpoint (no ", kTrainerFile,
                  "; an HF checkpoint is read with --init-from)");
  StatusOr<std::string> text = readText(trainerPath);
  if (!text)
    return text.takeStatus();
  StatusOr<bool> selfHashed = checkSelfHash(*text, trainerPath);
  if (!selfHashed)
    return selfHashed.takeStatus();
  if (std::optional<size_t> at = jsonTooDeepAt(*text))
    return errorf(trainerPath.string(), ": ", jsonTooDeepMessage(*at));
  TrainingCheckpoint state;
  try {
    const json trainer = json::parse(*text);
    if (!trainer.is_object() || trainer.value("format", "") != kFormat)
      return errorf(trainerPath.string(), ": not an mlt training checkpoint");
    const int version = trainer.value("version", 0);
    if (version < kOldestVersion || version > kVersion)
      return errorf(trainerPath.string(), ": format version ", version,
                    ", this mlt reads ", kOldestVersion, " to ", kVersion);
    if (version >= 3 && !*selfHashed)
      return errorf(trainerPath.string(), ": has no checksum (damaged)");
    files = version >= 3 ? trainer.at("files") : json();
    state.step = trainer.at("step").get<int64_t>();
    state.seed = trainer.at("seed").get<uint64_t>();
    state.shuffle = trainer.at("shuffle").get<bool>();
    state.layout = trainer.value("layout", "");
    if (trainer.contains("data"))
      state.data = trainer.at("data").dump();
    if (trainer.contains("training")) {
      if (!trainer.at("training").is_object())
        return errorf(trainerPath.string(),
                      ": \"training\" is not an object");
      state.training = trainer.at("training").dump();
    }
    if (trainer.contains("export_files")) {
      if (!trainer.at("export_files").is_object())
        return errorf(trainerPath.string(),
                      ": \"export_files\" is not an object");
      state.exportFiles = trainer.at("export_files").dump();
    }
  } catch (const json::exception &e) {
    return errorf(trainerPath.string(), ": ", e.what());
  }
  if (state.step < 1)
    return errorf(trainerPath.string(), ": step ", state.step,
                  " (a checkpoint holds a step of 1 or more)");
  // The directory's name is the step's (a checkpoint copied under another
  // name, which a user may do, is not held to it).
  fs::path normal = fs::absolute(dir).lexically_normal();
  if (!normal.has_filename())
    normal = normal.parent_path();
  const int64_t named = stepOfName(normal.filename().string());
  if (named >= 0 && named != state.step)
    return errorf(trainerPath.string(), ": step ", state.step,
                  ", but its directory is ", dir.filename().string(),
                  " (changed since it was saved)");
  StatusOr<std::string> config = readText(dir / kConfigFile);
  if (!config)
    return config.takeStatus();
  if (!files.is_null())
    MLT_RETURN_IF_ERROR(checkFileEntry(files.value(kConfigFile, json()),
                                       *config, dir / kConfigFile,
                                       trainerPath));
  state.config = std::move(*config);
  return state;
}

} // namespace

std::string mlt::rt::checkpointDirName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%06lld", (long long)step);
  return name;
}

//===----------------------------------------------------------------------===//
// Saving
//===----------------------------------------------------------------------===//

StatusOr<std::string> mlt::rt::beginCheckpoint(const std::string &root,
                                               int64_t step) {
  const fs::path rootPath(root);
  std::error_code error;
  if (!fs::is_directory(rootPath, error)) {
    MLT_RETURN_IF_ERROR(checkOutputPath(root, /*directory=*/true));
    if (!fs::create_directory(rootPath, error) && error)
      return errorf(root, ": cannot create the directory: ", error.message());
  }
  removeStaleTemporaries(root);
  const fs::path dir =
      rootPath / ("." + checkpointDirName(step) + ".tmp-" + temporarySuffix());
  if (!fs::create_directory(dir, error))
    return errorf(dir.string(), ": cannot create: ",
                  error ? error.message() : std::string("it exists"));
  return dir.string();
}

StatusOr<uint64_t> mlt::rt::writeCheckpointShards(RankGroup &local,
                                                  const Plan &plan,
                                                  const std::string &dir,
                                                  int64_t step) {
  // (ordinary memory, held for this save only)
  StatusOr<std::unique_ptr<CheckpointStaging>> staging =
      CheckpointStaging::create(local, plan, /*pinned=*/false);
  if (!staging)
    return staging.takeStatus();
  MLT_RETURN_IF_ERROR((*staging)->read());
  return (*staging)->write(dir, step);
}

std::string mlt::rt::trainerStateJson(const TrainingCheckpoint &state,
                                      uint64_t ranks,
                                      const std::string &indexText) {
  json trainer = {{"format", kFormat},
                  {"version", kVersion},
                  {"step", state.step},
                  {"seed", state.seed},
                  {"shuffle", state.shuffle},
                  {"layout", state.layout},
                  {"ranks", ranks},
                  {"files",
                   {{kIndexFile, fileEntry(indexText)},
                    {kConfigFile, fileEntry(state.config)}}}};
  if (!state.data.empty())
    trainer["data"] = json::parse(state.data);
  if (!state.training.empty())
    trainer["training"] = json::parse(state.training);
  if (!state.exportFiles.empty())
    trainer["export_files"] = json::parse(state.exportFiles);
  return withSelfHash(trainer.dump(2));
}

Status mlt::rt::hashCheckpointShards(CheckpointIndex &index,
                                     const std::string &dir) {
  for (size_t f = 0; f < index.files.size(); ++f) {
    CheckpointIndex::File &file = index.files[f];
    const std::string path = (fs::path(dir) / file.name).string();
    StatusOr<SafeTensorsFile> shard = SafeTensorsFile::open(path);
    if (!shard)
      return shard.takeStatus();
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)),
                      std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof())
      return errorf(path, ": cannot read");
    file.bytes = bytes.size();
    file.hash = contentHash(bytes.data(), bytes.size());
    file.headerHash = shard->headerHash();
    for (CheckpointIndex::Tensor &tensor : index.tensors)
      for (CheckpointIndex::Piece &piece : tensor.pieces) {
        if (piece.file != f)
          continue;
        auto found = shard->tensors().find(piece.key);
        if (found == shard->tensors().end())
          return errorf(path, ": no tensor '", piece.key, "'");
        const uint64_t begin = shard->dataStart() + found->second.begin;
        piece.hash = contentHash(bytes.data() + begin,
                                 found->second.end - found->second.begin);
      }
  }
  return Status::ok();
}

StatusOr<std::string> mlt::rt::commitCheckpoint(const std::string &root,
                                                const std::string &dir,
                                                const Plan &plan,
                                                const TrainingCheckpoint &state,
                                                int64_t keepLast,
                                                std::vector<std::string> *retired) {
  StatusOr<std::vector<SavedPiece>> pieces = checkpointPieces(plan);
  if (!pieces)
    return pieces.takeStatus();
  CheckpointIndex index = checkpointIndexOf(*pieces);
  index.step = state.step;
  // Each shard's size, and the hashes its writer left beside it.
  std::map<std::pair<size_t, std::string>, CheckpointIndex::Piece *> byKey;
  for (CheckpointIndex::Tensor &tensor : index.tensors)
    for (CheckpointIndex::Piece &piece : tensor.pieces)
      byKey[{piece.file, piece.key}] = &piece;
  for (size_t f = 0; f < index.files.size(); ++f) {
    CheckpointIndex::File &file = index.files[f];
    const fs::path shard = fs::path(dir) / file.name;
    std::error_code error;
    file.bytes = fs::file_size(shard, error);
    if (error)
      return errorf(dir, ": shard ", file.name,
                    " was not written: ", error.message());
    const fs::path digestPath = shard.string() + kDigestSuffix;
    StatusOr<std::string> text = readText(digestPath);
    if (!text)
      return text.takeStatus();
    const json digest = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    auto hashOf = [&](const json &value) -> std::optional<uint64_t> {
      return value.is_string() ? parseContentHash(value.get<std::string>())
                               : std::nullopt;
    };
    if (!digest.is_object() || !digest.contains("pieces") ||
        !digest.at("pieces").is_object() ||
        !(file.hash = hashOf(digest.value("xxh3", json()))) ||
        !(file.headerHash = hashOf(digest.value("header_xxh3", json()))))
      return errorf(digestPath.string(), ": not the hashes of ", file.name);
    for (auto it = digest.at("pieces").begin(); it != digest.at("pieces").end();
         ++it) {
      auto piece = byKey.find({f, it.key()});
      if (piece == byKey.end() || !(piece->second->hash = hashOf(it.value())))
        return errorf(digestPath.string(), ": no piece '", it.key(), "' of ",
                      file.name, " in the index");
    }
    fs::remove(digestPath, error);
  }
  for (const auto &[key, piece] : byKey)
    if (!piece->hash)
      return errorf(dir, ": no hash of piece '", key.second, "' of ",
                    index.files[key.first].name);
  if (!json::accept(state.config))
    return errorf(dir, ": the model's config.json text is not valid JSON");
  const std::string indexText = index.toJson();
  const fs::path tmp(dir);
  MLT_RETURN_IF_ERROR(writeDurably((tmp / kIndexFile).string(), indexText));
  MLT_RETURN_IF_ERROR(writeDurably((tmp / kConfigFile).string(), state.config));
  MLT_RETURN_IF_ERROR(
      writeDurably((tmp / kTrainerFile).string(),
                   trainerStateJson(state, plan.ranks.size(), indexText)));

  const fs::path rootPath(root);
  const std::string name = checkpointDirName(state.step);
  const fs::path final = rootPath / name;
  MLT_RETURN_IF_ERROR(placeDirectory(dir, final.string()));
  MLT_RETURN_IF_ERROR(
      writeFileAtomically((rootPath / kLatest).string(), name + "\n"));

  if (keepLast > 0) {
    std::error_code error;
    std::vector<std::pair<int64_t, fs::path>> steps;
    for (const fs::directory_entry &entry :
         fs::directory_iterator(rootPath, error)) {
      // Only checkpoints mlt wrote (their trainer state and index in
      // place): a step-NNNNNN directory of anything else is not the run's
      // to remove.
      const int64_t step = stepOfName(entry.path().filename().string());
      if (step >= 0 && entry.is_directory(error) &&
          fs::exists(entry.path() / kTrainerFile, error) &&
          fs::exists(entry.path() / kIndexFile, error))
        steps.push_back({step, entry.path()});
    }
    std::sort(steps.begin(), steps.end());
    for (size_t i = 0; i + size_t(keepLast) < steps.size(); ++i)
      if (steps[i].second != final) {
        // Renamed away first, in one step, so that a process killed while
        // removing it leaves a temporary (removed by a later save) rather
        // than a checkpoint with files missing.
        const fs::path doomed =
            rootPath / ("." + steps[i].second.filename().string() + ".tmp-" +
                        std::to_string(::getpid()) + "-removed");
        if (std::rename(steps[i].second.c_str(), doomed.c_str()) == 0) {
          if (retired)
            retired->push_back(doomed.string());
          else
            removeRetired({doomed.string()});
        }
      }
  }
  return final.string();
}

void mlt::rt::removeRetired(const std::vector<std::string> &retired) {
  for (const std::string &dir : retired) {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
}

void mlt::rt::abandonCheckpoint(const std::string &dir) {
  std::error_code ignored;
  if (!dir.empty())
    fs::remove_all(dir, ignored);
}

StatusOr<std::string>
mlt::rt::saveTrainingCheckpoint(const std::string &root, RankGroup &ranks,
                                const Plan &plan,
                                const TrainingCheckpoint &state,
                                int64_t keepLast) {
  StatusOr<std::string> dir = beginCheckpoint(root, state.step);
  if (!dir)
    return dir;
  StatusOr<uint64_t> written =
      writeCheckpointShards(ranks, plan, *dir, state.step);
  StatusOr<std::string> saved =
      written ? commitCheckpoint(root, *dir, plan, state, keepLast)
              : StatusOr<std::string>(written.takeStatus());
  if (!saved)
    abandonCheckpoint(*dir);
  return saved;
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

/// The shards of an opened checkpoint, each opened once its header has
/// been checked against the index.
class CheckpointReader::Shards {
public:
  Shards(fs::path dir, const CheckpointIndex &index, int64_t step,
         bool checkPieces)
      : dir_(std::move(dir)), index_(index), step_(step),
        checkPieces_(checkPieces), open_(index.files.size()) {}

  /// Checks every shard: present, of the index's size, its header the one
  /// saved (its hash) and of the checkpoint's step, holding each of its
  /// pieces as F32 of the piece's shape and nothing else.
  Status check() {
    std::vector<std::vector<const CheckpointIndex::Piece *>> byFile(
        index_.files.size());
    for (const CheckpointIndex::Tensor &tensor : index_.tensors)
      for (const CheckpointIndex::Piece &piece : tensor.pieces)
        byFile[piece.file].push_back(&piece);
    for (size_t f = 0; f < index_.files.size(); ++f) {
      const CheckpointIndex::File &file = index_.files[f];
      const fs::path path = dir_ / file.name;
      if (Status problem = checkInputPath(path.string()); !problem.isOk())
        return errorf((dir_ / kIndexFile).string(), ": shard '", file.name,
                      "': ", problem.message());
      std::error_code error;
      const uintmax_t bytes = fs::file_size(path, error);
      if (!error && bytes != file.bytes)
        return errorf(path.string(), ": ", bytes, " bytes, the index says ",
                      file.bytes, " (truncated or changed since it was saved)");
      std::map<std::string, std::string> metadata;
      StatusOr<SafeTensorsFile> shard =
          SafeTensorsFile::open(path.string(), &metadata);
      if (!shard)
        return shard.takeStatus().withContext(kDamaged);
      if (file.headerHash) {
        if (shard->headerHash() != *file.headerHash) {
          auto step = metadata.find(kStepMetadata);
          if (step != metadata.end() && step->second != std::to_string(step_))
            return errorf(path.string(), ": a shard of step ", step->second,
                          ", not of this checkpoint's step ", step_);
          return errorf(path.string(), ": its header does not match the ",
                        "checksum in ", kIndexFile, " (", kDamaged, ")");
        }
        if (shard->tensors().size() != byFile[f].size())
          return errorf(path.string(), ": ", shard->tensors().size(),
                        " tensors, the index places ", byFile[f].size(),
                        " there");
      }
      uint64_t pieceBytes = 0;
      for (const CheckpointIndex::Piece *piece : byFile[f]) {
        auto found = shard->tensors().find(piece->key);
        if (found == shard->tensors().end())
          return errorf(path.string(), ": no tensor '", piece->key,
                        "', which the index places there");
        if (found->second.dtype != DType::F32 ||
            found->second.shape != piece->storedShape())
          return errorf(path.string(), ": tensor '", piece->key, "' is ",
                        dtypeName(found->second.dtype), " ",
                        formatShape(found->second.shape),
                        ", the index says F32 ",
                        formatShape(piece->storedShape()));
        pieceBytes += found->second.end - found->second.begin;
      }
      // With the header, the pieces are every byte of the file: each byte
      // is checked once it is read.
      if (file.headerHash && shard->dataStart() + pieceBytes != file.bytes)
        return errorf(path.string(), ": its header and tensors span ",
                      shard->dataStart() + pieceBytes, " of its ", file.bytes,
                      " bytes");
      if (index_.files.size() <= kMaxOpenShards)
        open_[f] = std::make_unique<SafeTensorsFile>(std::move(*shard));
    }
    return Status::ok();
  }

  /// The values of `piece`, checked against its hash.
  StatusOr<std::vector<float>> read(const CheckpointIndex::Piece &piece) {
    std::unique_ptr<SafeTensorsFile> opened;
    const SafeTensorsFile *file = open_[piece.file].get();
    if (!file) {
      StatusOr<SafeTensorsFile> shard = SafeTensorsFile::open(
          (dir_ / index_.files[piece.file].name).string());
      if (!shard)
        return shard.takeStatus();
      if (index_.files[piece.file].headerHash &&
          shard->headerHash() != *index_.files[piece.file].headerHash)
        return errorf(shard->path(), ": changed since the checkpoint was ",
                      "opened");
      opened = std::make_unique<SafeTensorsFile>(std::move(*shard));
      file = opened.get();
    }
    StatusOr<Tensor> tensor = file->read(piece.key);
    if (!tensor)
      return tensor.takeStatus();
    if (tensor->dtype != DType::F32 || tensor->shape != piece.storedShape())
      return errorf(file->path(), ": tensor '", piece.key,
                    "' changed since the checkpoint was opened");
    if (checkPieces_ && piece.hash &&
        contentHash(tensor->bytes.data(), tensor->bytes.size()) != *piece.hash)
      return errorf(file->path(), ": tensor '", piece.key,
                    "' does not match its checksum in ", kIndexFile, " (",
                    kDamaged, ")");
    return toFloat32(piece.key, *tensor);
  }

  bool checksPieces() const { return checkPieces_; }

  /// Reads every shard whole and checks it against its hash.
  Status verifyFiles(const std::function<void(size_t, uint64_t)> &progress) {
    std::vector<char> buffer(size_t(1) << 24);
    for (size_t f = 0; f < index_.files.size(); ++f) {
      const CheckpointIndex::File &file = index_.files[f];
      const fs::path path = dir_ / file.name;
      if (!file.hash)
        return errorf((dir_ / kIndexFile).string(), ": no checksum of ",
                      file.name, " (saved by an older mlt)");
      std::ifstream in(path, std::ios::binary);
      ContentHasher hasher;
      uint64_t total = 0;
      while (in) {
        in.read(buffer.data(), std::streamsize(buffer.size()));
        hasher.update(buffer.data(), size_t(in.gcount()));
        total += uint64_t(in.gcount());
      }
      if (in.bad() || total != file.bytes)
        return errorf(path.string(), ": cannot read its ", file.bytes,
                      " bytes (read ", total, ")");
      if (hasher.digest() != *file.hash)
        return errorf(path.string(), ": does not match its checksum in ",
                      kIndexFile, " (", kDamaged, ")");
      if (progress)
        progress(f, total);
    }
    return Status::ok();
  }

private:
  /// What a mismatch means.
  static constexpr const char *kDamaged =
      "changed or damaged since it was saved";
  fs::path dir_;
  const CheckpointIndex &index_;
  int64_t step_;
  bool checkPieces_;
  std::vector<std::unique_ptr<SafeTensorsFile>> open_;
};

/// The parameters or the moments of an opened checkpoint.
class CheckpointReader::Source : public TensorSource {
public:
  Source(const CheckpointIndex &index, Shards &shards, bool moments)
      : index_(index), shards_(shards) {
    for (size_t i = 0; i < index.tensors.size(); ++i)
      if (isMoment(index.tensors[i].name) == moments)
        tensors_.emplace(index.tensors[i].name, i);
  }

  std::vector<ExpectedTensor> tensors() const override {
    std::vector<ExpectedTensor> present;
    for (const auto &[name, i] : tensors_)
      present.push_back({name, index_.tensors[i].shape});
    return present;
  }

  StatusOr<std::vector<float>> values(const std::string &name) const override {
    auto found = tensors_.find(name);
    if (found == tensors_.end())
      return errorf("the checkpoint has no tensor '", name, "'");
    const CheckpointIndex::Tensor &tensor = index_.tensors[found->second];
    if (tensor.pieces.size() == 1 && tensor.pieces[0].layout.isWhole() &&
        !tensor.pieces[0].isRange)
      return shards_.read(tensor.pieces[0]);
    BlockAssembly whole(tensor.shape);
    for (const CheckpointIndex::Piece &piece : tensor.pieces) {
      StatusOr<std::vector<float>> values = shards_.read(piece);
      if (!values)
        return values.takeStatus();
      if (piece.isRange)
        whole.placeRange(piece.layout, piece.begin, piece.count,
                         values->data());
      else
        whole.placeBlock(piece.layout, values->data());
    }
    return whole.finish();
  }

private:
  const CheckpointIndex &index_;
  Shards &shards_;
  std::map<std::string, size_t> tensors_;
};

CheckpointReader::~CheckpointReader() = default;

StatusOr<std::unique_ptr<CheckpointReader>>
CheckpointReader::open(const std::string &path,
                       const CheckpointReadOptions &options) {
  StatusOr<fs::path> dir = checkpointDirOf(path);
  if (!dir)
    return dir.takeStatus();
  json files;
  StatusOr<TrainingCheckpoint> state = readTrainerState(*dir, path, files);
  if (!state)
    return state.takeStatus();
  const fs::path indexPath = *dir / kIndexFile;
  StatusOr<std::string> text = readText(indexPath);
  if (!text)
    return text.takeStatus();
  if (!files.is_null())
    MLT_RETURN_IF_ERROR(checkFileEntry(files.value(kIndexFile, json()), *text,
                                       indexPath, *dir / kTrainerFile));
  StatusOr<CheckpointIndex> index = parseCheckpointIndex(*text);
  if (!index)
    return index.takeStatus().withContext(indexPath.string());
  if (!files.is_null() && index->step != state->step)
    return errorf(indexPath.string(), ": of step ", index->step,
                  ", trainer.json's is ", state->step);
  MLT_RETURN_IF_ERROR(checkTensorsOfConfig(*index, state->config, *dir));

  std::unique_ptr<CheckpointReader> reader(new CheckpointReader());
  reader->directory_ = dir->string();
  reader->state_ = std::move(*state);
  reader->index_ = std::move(*index);
  reader->checked_ = !files.is_null();
  reader->shards_ = std::make_unique<Shards>(
      *dir, reader->index_, reader->state_.step, options.checkPieces);
  MLT_RETURN_IF_ERROR(reader->shards_->check());
  reader->parameters_ =
      std::make_unique<Source>(reader->index_, *reader->shards_, false);
  reader->optimizerState_ =
      std::make_unique<Source>(reader->index_, *reader->shards_, true);
  return reader;
}

const TensorSource &CheckpointReader::parameters() const {
  return *parameters_;
}

const TensorSource &CheckpointReader::optimizerState() const {
  return *optimizerState_;
}

Status CheckpointReader::verifyOptimizerState() const {
  if (!shards_->checksPieces())
    return Status::ok();
  for (const CheckpointIndex::Tensor &tensor : index_.tensors)
    if (isMoment(tensor.name))
      for (const CheckpointIndex::Piece &piece : tensor.pieces)
        if (StatusOr<std::vector<float>> read = shards_->read(piece); !read)
          return read.takeStatus();
  return Status::ok();
}

Status CheckpointReader::verifyFiles(
    const std::function<void(size_t, uint64_t)> &progress) const {
  return shards_->verifyFiles(progress);
}

uint64_t CheckpointReader::shardBytes() const {
  uint64_t bytes = 0;
  for (const CheckpointIndex::File &file : index_.files)
    bytes += file.bytes;
  return bytes;
}

bool mlt::rt::isTrainingCheckpoint(const std::string &path) {
  std::error_code error;
  const fs::path dir(path);
  return fs::is_directory(dir, error) &&
         (fs::exists(dir / kLatest, error) ||
          fs::exists(dir / kTrainerFile, error));
}
