//===- matmul_table.cpp - tuned cuBLASLt algorithms, by shape -------------===//
//
// Part of mlt. The table's JSON file (matmul_table.h):
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

#include "kernels/matmul_table.h"

#include "mlt/Runtime/io/AtomicFile.h"
#include "mlt/Runtime/io/JsonDepth.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

using namespace mlt;
using namespace mlt::cuda;
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
rt::Status readEntry(const json &entry, std::string &key,
                     TunedAlgorithm &algorithm) {
  if (!entry.is_object() || !entry.contains("shape") ||
      !entry["shape"].is_string() || !entry.contains("algorithm") ||
      !entry["algorithm"].is_array() || entry["algorithm"].size() != 8 ||
      !entry.contains("workspace_bytes") ||
      !entry["workspace_bytes"].is_number_unsigned())
    return rt::errorf("an entry lacks its shape, its 8 algorithm words or "
                      "its workspace_bytes");
  key = entry["shape"].get<std::string>();
  for (size_t i = 0; i < 8; ++i) {
    const json &word = entry["algorithm"][i];
    if (!word.is_string())
      return rt::errorf("shape '", key, "': algorithm word ", i,
                        " is not a string");
    const std::string text = word.get<std::string>();
    char *end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text.c_str(), &end, 16);
    if (text.size() < 3 || text.compare(0, 2, "0x") != 0 || errno != 0 ||
        *end != '\0')
      return rt::errorf("shape '", key, "': algorithm word ", i, " ('", text,
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
  return rt::Status::ok();
}

} // namespace

std::string mlt::cuda::describeAlgorithm(const cublasLtMatmulAlgo_t &algo) {
  int32_t id = -1, splitK = -1;
  uint32_t tile = 0, stages = 0, swizzle = 0, reduction = 0, custom = 0;
  uint16_t cluster = 0;
  size_t written = 0;
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attribute, void *value,
                 size_t bytes) {
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, value, bytes,
                                             &written) !=
        CUBLAS_STATUS_SUCCESS)
      std::memset(value, 0, bytes);
  };
  get(CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id));
  get(CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile));
  get(CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages));
  get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitK, sizeof(splitK));
  get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof(reduction));
  get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof(swizzle));
  get(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof(custom));
  get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster));
  char text[160];
  std::snprintf(text, sizeof(text),
                "algo %d tile %u stages %u splitK %d red %u swz %u custom %u "
                "cluster %u",
                id, tile, stages, splitK, reduction, swizzle, custom,
                unsigned(cluster));
  return text;
}

rt::StatusOr<MatmulTable> MatmulTable::load(const std::string &path,
                                            const std::string &device,
                                            int64_t libraryVersion) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return rt::errorf(path, ": cannot read (", std::strerror(errno), ")");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  const std::string text = bytes.str();
  if (text.size() > kMaxTableBytes)
    return rt::errorf(path, ": ", text.size(),
                      " bytes, more than a matmul algorithm table holds");
  if (rt::jsonTooDeepAt(text))
    return rt::errorf(path, ": not a matmul algorithm table (nested too "
                            "deep)");
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object())
    return rt::errorf(path, ": not a matmul algorithm table (not a JSON "
                            "object)");
  if (!root.contains("format") || root["format"] != kFormat ||
      !root.contains("version") || !root["version"].is_number_integer())
    return rt::errorf(path, ": not a matmul algorithm table (no \"format\": "
                            "\"",
                      kFormat, "\" and version)");
  if (root["version"].get<int64_t>() != kVersion)
    return rt::errorf(path, ": matmul algorithm table version ",
                      root["version"].get<int64_t>(), "; this build reads ",
                      kVersion);
  if (!root.contains("device") || !root["device"].is_string() ||
      !root.contains("cublaslt_version") ||
      !root["cublaslt_version"].is_number_integer() ||
      !root.contains("entries") || !root["entries"].is_array())
    return rt::errorf(path, ": a matmul algorithm table needs \"device\", "
                            "\"cublaslt_version\" and \"entries\"");
  const std::string fileDevice = root["device"].get<std::string>();
  const int64_t fileVersion = root["cublaslt_version"].get<int64_t>();
  if (fileDevice != device || fileVersion != libraryVersion)
    return rt::errorf(path, ": tuned on ", fileDevice, " with cuBLASLt ",
                      fileVersion, "; this run has ", device,
                      " with cuBLASLt ", libraryVersion,
                      " (tune a table for it with --tune-matmuls)");
  MatmulTable table(fileDevice, fileVersion);
  for (const json &entry : root["entries"]) {
    std::string key;
    TunedAlgorithm algorithm;
    if (rt::Status status = readEntry(entry, key, algorithm); !status)
      return rt::errorf(path, ": ", status.message());
    if (table.find(key))
      return rt::errorf(path, ": shape '", key, "' appears twice");
    table.set(key, std::move(algorithm));
  }
  return table;
}

rt::Status MatmulTable::save(const std::string &path) const {
  json entries = json::array();
  for (const auto &[key, algorithm] : entries_) {
    json words = json::array();
    for (uint64_t word : algorithm.data)
      words.push_back(hexWord(word));
    entries.push_back({{"shape", key},
                       {"algorithm", std::move(words)},
                       {"workspace_bytes", algorithm.workspaceBytes},
                       {"config", algorithm.config},
                       {"microseconds", algorithm.microseconds},
                       {"heuristic_microseconds",
                        algorithm.heuristicMicroseconds}});
  }
  const json root = {{"format", kFormat},
                     {"version", kVersion},
                     {"device", device_},
                     {"cublaslt_version", libraryVersion_},
                     {"entries", std::move(entries)}};
  return rt::writeFileAtomically(path, root.dump(1) + "\n");
}

const TunedAlgorithm *MatmulTable::find(const std::string &key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

void MatmulTable::set(const std::string &key, TunedAlgorithm algorithm) {
  entries_[key] = std::move(algorithm);
}
