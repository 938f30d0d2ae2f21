//===- CheckpointFuzzer.cpp - libFuzzer target: checkpoint contents -------===//
//
// Part of mlt. Reads each input as the one shard of a training checkpoint
// and drives CheckpointReader, the path --resume, --init-from and
// mlt-checkpoint take through a checkpoint's contents (the index alone is
// mlt-fuzz-checkpoint-index's, the safetensors header alone
// mlt-fuzz-safetensors'). The harness makes the rest of the checkpoint
// around the input, as a save would: an index with a whole piece per
// tensor of the shard, its content hashes (hashCheckpointShards),
// config.json and trainer.json (trainerStateJson). Then:
//
// - sealed, the checkpoint either opens, and every tensor reads back as
//   the shard's own f32 bytes say and verifyFiles passes, or it is refused
//   with a message; a shard of F32 tensors that fill its data section must
//   open;
// - with one byte of one of its files changed (the input's hash picks
//   which, and the new value), opening, reading every tensor or
//   verifyFiles must refuse it.
//
// Any crash, hang, leak, undefined behaviour, allocation past
// -malloc_limit_mb or violated property is a finding.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/PlanFormat.h"
#include "mlt/Runtime/io/SafeTensors.h"
#include "mlt/Runtime/train/Checkpoint.h"
#include "mlt/Support/ContentHash.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace mlt;
using namespace mlt::rt;
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string &what) {
  std::fprintf(stderr, "mlt-fuzz-checkpoint: %s\n", what.c_str());
  std::abort();
}

void writeFile(const fs::path &path, const void *data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char *>(data), std::streamsize(size));
  if (!out)
    fail("cannot write " + path.string());
}

std::string readFile(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

/// The checkpoint's directory, one per process (fuzzers run side by side).
const fs::path &checkpointDir() {
  static const fs::path dir = [] {
    const fs::path base =
        fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path root = base / ("mlt-fuzz-checkpoint-" + std::to_string(::getpid()));
    return root / "step-000001";
  }();
  return dir;
}

/// Opens the checkpoint and reads everything in it; the first refusal.
Status readAll(const fs::path &dir) {
  StatusOr<std::unique_ptr<CheckpointReader>> reader =
      CheckpointReader::open(dir.string());
  if (!reader)
    return reader.takeStatus();
  for (const TensorSource *source :
       {&(*reader)->parameters(), &(*reader)->optimizerState()})
    for (const ExpectedTensor &tensor : source->tensors())
      if (StatusOr<std::vector<float>> values = source->values(tensor.name);
          !values)
        return values.takeStatus();
  return (*reader)->verifyFiles();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const fs::path &dir = checkpointDir();
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  fs::create_directories(dir);
  const fs::path shardPath = dir / shardFileName(0);
  writeFile(shardPath, data, size);
  StatusOr<SafeTensorsFile> shard = SafeTensorsFile::open(shardPath.string());
  if (!shard || shard->tensors().empty())
    return 0;

  // The index a save of these tensors would write: each tensor whole, in
  // the one shard, claimed F32 of its shape (a shard that says otherwise
  // must be refused). Shapes an index cannot hold (a zero dimension, more
  // than 8 of them) end the input.
  CheckpointIndex index;
  index.step = 1;
  index.files.push_back({shardFileName(0), 0, {}, {}});
  bool allF32 = true;
  uint64_t tensorBytes = 0;
  for (const auto &[name, info] : shard->tensors()) {
    if (info.shape.size() > 8 || name.empty() || name.size() > 4096)
      return 0;
    for (int64_t dim : info.shape)
      if (dim < 1)
        return 0;
    allF32 = allF32 && info.dtype == DType::F32;
    tensorBytes += info.end - info.begin;
    BlockLayout whole{info.shape, std::vector<int64_t>(info.shape.size(), 0),
                      info.shape};
    index.tensors.push_back(
        {name, info.shape, {{0, name, whole, false, 0, 0, {}}}});
    int64_t count = 1;
    for (int64_t dim : info.shape)
      count *= dim;
    index.tensors.back().pieces[0].count = count;
  }
  if (!hashCheckpointShards(index, dir.string()).isOk())
    return 0;
  const std::string indexText = index.toJson();
  if (!parseCheckpointIndex(indexText))
    return 0; // (names or sizes no index holds)
  TrainingCheckpoint state;
  state.step = 1;
  state.config = "{}";
  const std::string trainerText = trainerStateJson(state, 1, indexText);
  writeFile(dir / "index.json", indexText.data(), indexText.size());
  writeFile(dir / "config.json", state.config.data(), state.config.size());
  writeFile(dir / "trainer.json", trainerText.data(), trainerText.size());

  // Sealed: reads back what the shard holds.
  Status sealed = readAll(dir);
  const bool whole = allF32 && shard->dataStart() + tensorBytes == size;
  if (whole && !sealed.isOk())
    fail("a sealed checkpoint of F32 tensors filling the shard is refused: " +
         sealed.message());
  if (sealed.isOk()) {
    StatusOr<std::unique_ptr<CheckpointReader>> reader =
        CheckpointReader::open(dir.string());
    for (const auto &[name, info] : shard->tensors()) {
      const TensorSource &source = name.rfind(kExpAvgPrefix, 0) == 0 ||
                                           name.rfind(kExpAvgSqPrefix, 0) == 0
                                       ? (*reader)->optimizerState()
                                       : (*reader)->parameters();
      StatusOr<std::vector<float>> values = source.values(name);
      if (!values || values->size() * sizeof(float) != info.end - info.begin)
        fail("tensor '" + name + "' does not read back");
      // Bit for bit, but a signaling NaN may come back quieted.
      for (size_t i = 0; i < values->size(); ++i) {
        float stored;
        std::memcpy(&stored, data + shard->dataStart() + info.begin + 4 * i,
                    4);
        if (std::memcmp(&stored, &(*values)[i], 4) != 0 &&
            !(std::isnan(stored) && std::isnan((*values)[i])))
          fail("tensor '" + name + "' element " + std::to_string(i) +
               " reads back other than the shard holds");
      }
    }
  }

  // One byte of one file changed: refused.
  if (sealed.isOk()) {
    const uint64_t hash = contentHash(data, size);
    const char *files[] = {"trainer.json", "index.json", "config.json",
                           "rank-00000.safetensors"};
    const fs::path path = dir / files[hash % 4];
    std::string bytes = readFile(path);
    if (bytes.empty())
      return 0;
    const size_t at = size_t((hash >> 8) % bytes.size());
    bytes[at] = char(uint8_t(bytes[at]) ^ uint8_t(1 + (hash >> 40) % 255));
    writeFile(path, bytes.data(), bytes.size());
    if (readAll(dir).isOk())
      fail("byte " + std::to_string(at) + " of " + path.filename().string() +
           " changed, and the checkpoint still reads");
  }
  return 0;
}
