//===- MatmulTable.cpp - tuned cuBLASLt algorithms, by shape --------------===//
//
// Part of mlt. The table's JSON file (MatmulTable.h):
//
//   {"format": "mlt-matmul-algorithms", "version": 1,
//    "device": "NVIDIA H100 80GB HBM3", "cublaslt_version": 130100,
//    "entries": [{"shape": "...", "algorithm": ["0x...", ... 8 words],
//                 "workspace_bytes": 0, "config": "tile 20 ...",
//                 "microseconds": 30.9, "heuristic_microseconds": 33.9}]}
//
// Entries are written in key order, so a table rewritten with the same
// entries is the same bytes.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/MatmulTable.h"

#include "mlt/Support/AtomicFile.h"
#include "mlt/Support/JsonDepth.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

using namespace mlt;
using namespace mlt::rt;
using json = nlohmann::json;

namespace {

constexpr const char *kFormat = "mlt-matmul-algorithms";
constexpr int64_t kVersion = 1;
/// No table of a training run's shapes comes near this.
constexpr size_t kMaxTableBytes = size_t(16) << 20;

std::string hexWord(uint64_t word) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%016" PRIx64, word);
  return text;
}

/// The entry's algorithm words, or an error for a malformed entry.
Status readEntry(const json &entry, std::string &key,
                 TunedAlgorithm &algorithm) {
  if (!entry.is_object() || !entry.contains("shape") ||
      !entry["shape"].is_string() || !entry.contains("algorithm") ||
      !entry["algorithm"].is_array() || entry["algorithm"].size() != 8 ||
      !entry.contains("workspace_bytes") ||
      !entry["workspace_bytes"].is_number_unsigned())
    return errorf("an entry lacks its shape, its 8 algorithm words or "
                  "its workspace_bytes");
  key = entry["shape"].get<std::string>();
  for (size_t i = 0; i < 8; ++i) {
    const json &word = entry["algorithm"][i];
    if (!word.is_string())
      return errorf("shape '", quotedLine(key), "': algorithm word ", i,
                    " is not a string");
    const std::string text = word.get<std::string>();
    char *end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text.c_str(), &end, 16);
    if (text.size() < 3 || text.compare(0, 2, "0x") != 0 || errno != 0 ||
        *end != '\0')
      return errorf("shape '", quotedLine(key), "': algorithm word ", i,
                    " ('", quotedLine(text),
                    "') is not a hexadecimal 64-bit word");
    algorithm.data[i] = uint64_t(value);
  }
  algorithm.workspaceBytes = entry["workspace_bytes"].get<uint64_t>();
  if (entry.contains("config") && entry["config"].is_string())
    algorithm.config = entry["config"].get<std::string>();
  if (entry.contains("microseconds") && entry["microseconds"].is_number())
    algorithm.microseconds = entry["microseconds"].get<double>();
  if (entry.contains("heuristic_microseconds") &&
      entry["heuristic_microseconds"].is_number())
    algorithm.heuristicMicroseconds =
        entry["heuristic_microseconds"].get<double>();
  return Status::ok();
}

} // namespace

StatusOr<MatmulTable> MatmulTable::load(const std::string &path,
                                        const std::string &device,
                                        int64_t libraryVersion) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return errorf(path, ": cannot read (", std::strerror(errno), ")");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return parse(bytes.str(), path, device, libraryVersion);
}

StatusOr<MatmulTable> MatmulTable::parse(std::string_view text,
                                         const std::string &path,
                                         const std::string &device,
                                         int64_t libraryVersion) {
  if (text.size() > kMaxTableBytes)
    return errorf(path, ": ", text.size(),
                  " bytes, more than a matmul algorithm table holds");
  if (jsonTooDeepAt(text))
    return errorf(path, ": not a matmul algorithm table (nested too "
                        "deep)");
  json root = json::parse(text.begin(), text.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object())
    return errorf(path, ": not a matmul algorithm table (not a JSON "
                        "object)");
  if (!root.contains("format") || root["format"] != kFormat ||
      !root.contains("version") || !root["version"].is_number_integer())
    return errorf(path,
                  ": not a matmul algorithm table (no \"format\": "
                  "\"",
                  kFormat, "\" and version)");
  if (root["version"].get<int64_t>() != kVersion)
    return errorf(path, ": matmul algorithm table version ",
                  root["version"].get<int64_t>(), "; this build reads ",
                  kVersion);
  if (!root.contains("device") || !root["device"].is_string() ||
      !root.contains("cublaslt_version") ||
      !root["cublaslt_version"].is_number_integer() ||
      !root.contains("entries") || !root["entries"].is_array())
    return errorf(path, ": a matmul algorithm table needs \"device\", "
                        "\"cublaslt_version\" and \"entries\"");
  const std::string fileDevice = root["device"].get<std::string>();
  const int64_t fileVersion = root["cublaslt_version"].get<int64_t>();
  if (fileDevice != device || fileVersion != libraryVersion)
    return errorf(path, ": tuned on ", quotedLine(fileDevice), " with cuBLASLt ",
                  fileVersion, "; this run has ", device, " with cuBLASLt ",
                  libraryVersion, " (tune a table for it with --tune-matmuls)");
  MatmulTable table(fileDevice, fileVersion);
  for (const json &entry : root["entries"]) {
    std::string key;
    TunedAlgorithm algorithm;
    if (Status status = readEntry(entry, key, algorithm); !status)
      return errorf(path, ": ", status.message());
    if (table.find(key))
      return errorf(path, ": shape '", quotedLine(key), "' appears twice");
    table.set(key, std::move(algorithm));
  }
  return table;
}

std::string MatmulTable::toJson() const {
  json entries = json::array();
  for (const auto &[key, algorithm] : entries_) {
    json words = json::array();
    for (uint64_t word : algorithm.data)
      words.push_back(hexWord(word));
    entries.push_back(
        {{"shape", key},
         {"algorithm", std::move(words)},
         {"workspace_bytes", algorithm.workspaceBytes},
         {"config", algorithm.config},
         {"microseconds", algorithm.microseconds},
         {"heuristic_microseconds", algorithm.heuristicMicroseconds}});
  }
  const json root = {{"format", kFormat},
                     {"version", kVersion},
                     {"device", device_},
                     {"cublaslt_version", libraryVersion_},
                     {"entries", std::move(entries)}};
  return root.dump(1) + "\n";
}

Status MatmulTable::save(const std::string &path) const {
  return writeFileAtomically(path, toJson());
}

const TunedAlgorithm *MatmulTable::find(const std::string &key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

void MatmulTable::set(const std::string &key, TunedAlgorithm algorithm) {
  entries_[key] = std::move(algorithm);
}
