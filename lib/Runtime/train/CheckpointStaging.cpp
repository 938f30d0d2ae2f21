//===- CheckpointStaging.cpp - a checkpoint's state in host memory --------===//
//
// Part of mlt. See CheckpointStaging.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/train/CheckpointStaging.h"
#include "mlt/Runtime/train/CheckpointIndex.h"
#include "mlt/Support/AtomicFile.h"
#include "mlt/Support/ContentHash.h"
#include "mlt/Support/Threads.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

using namespace mlt;
using namespace mlt::rt;
using json = nlohmann::json;
namespace fs = std::filesystem;

/// One local rank's pieces: where each comes from, its name and shape in
/// the shard, and where it lies in the rank's block.
struct CheckpointStaging::Shard {
  uint32_t local = 0; // (the executor's index in the group)
  uint32_t rank = 0;  // (its plan rank)
  std::vector<SavedPiece> pieces;
  std::vector<TensorSpec> specs;
  std::vector<uint64_t> offsets; // (in floats)
  uint64_t floats = 0;
  float *block = nullptr;
  DeviceContext *owner = nullptr; // (frees the block)
};

namespace {

/// The pieces `plan` saves, with their keys in the shards.
StatusOr<std::pair<std::vector<SavedPiece>, std::vector<std::string>>>
keyedPieces(const Plan &plan) {
  StatusOr<std::vector<SavedPiece>> pieces = checkpointPieces(plan);
  if (!pieces)
    return pieces.takeStatus();
  std::vector<std::string> keys;
  (void)checkpointIndexOf(*pieces, &keys);
  return std::make_pair(std::move(*pieces), std::move(keys));
}

} // namespace

namespace {
uint64_t saturatingAdd(uint64_t a, uint64_t b) {
  return a + b < a ? UINT64_MAX : a + b;
}
} // namespace

StatusOr<std::map<uint32_t, uint64_t>>
CheckpointStaging::bytesByRank(const Plan &plan) {
  StatusOr<std::vector<SavedPiece>> pieces = checkpointPieces(plan);
  if (!pieces)
    return pieces.takeStatus();
  std::map<uint32_t, uint64_t> bytes;
  for (const SavedPiece &piece : *pieces)
    bytes[piece.rank] = saturatingAdd(
        bytes[piece.rank],
        uint64_t(std::max<int64_t>(piece.count, 0)) * sizeof(float));
  return bytes;
}

StatusOr<uint64_t>
CheckpointStaging::bytesFor(const Plan &plan,
                            const std::vector<uint32_t> &local) {
  StatusOr<std::map<uint32_t, uint64_t>> byRank = bytesByRank(plan);
  if (!byRank)
    return byRank.takeStatus();
  uint64_t bytes = 0;
  for (uint32_t rank : std::set<uint32_t>(local.begin(), local.end()))
    if (auto found = byRank->find(rank); found != byRank->end())
      bytes = saturatingAdd(bytes, found->second);
  return bytes;
}

StatusOr<std::unique_ptr<CheckpointStaging>>
CheckpointStaging::create(RankGroup &local, const Plan &plan, bool pinned) {
  auto keyed = keyedPieces(plan);
  if (!keyed)
    return keyed.takeStatus();
  auto &[pieces, keys] = *keyed;
  std::unique_ptr<CheckpointStaging> staging(new CheckpointStaging());
  staging->local_ = &local;
  for (uint32_t i = 0; i < local.size(); ++i) {
    Executor &executor = local.executor(i);
    Shard shard;
    shard.local = i;
    shard.rank = executor.rankPlan().rank;
    for (size_t p = 0; p < pieces.size(); ++p)
      if (pieces[p].rank == shard.rank) {
        const SavedPiece &piece = pieces[p];
        shard.specs.push_back(
            {keys[p], DType::F32,
             piece.isRange ? std::vector<int64_t>{piece.count}
                           : piece.layout.shape});
        shard.offsets.push_back(shard.floats);
        shard.floats += uint64_t(piece.count);
        shard.pieces.push_back(piece);
      }
    if (shard.pieces.empty())
      continue; // (a replica of data other ranks write)
    const uint64_t bytes = shard.floats * sizeof(float);
    DeviceContext &device = executor.device();
    StatusOr<void *> block = pinned ? device.allocateHostStaging(bytes)
                                    : device.DeviceContext::allocateHostStaging(
                                          bytes);
    if (!block)
      return block.takeStatus().withContext(
          "the checkpoint's host memory for rank " +
          std::to_string(shard.rank));
    shard.block = static_cast<float *>(*block);
    shard.owner = pinned ? &device : nullptr;
    staging->shards_.push_back(std::move(shard));
  }
  return staging;
}

CheckpointStaging::~CheckpointStaging() {
  for (Shard &shard : shards_) {
    if (shard.owner)
      shard.owner->freeHostStaging(shard.block);
    else
      std::free(shard.block);
  }
}

uint64_t CheckpointStaging::bytes() const {
  uint64_t bytes = 0;
  for (const Shard &shard : shards_)
    bytes += shard.floats * sizeof(float);
  return bytes;
}

Status CheckpointStaging::read() {
  // (a device is read by one thread at a time: the ranks in turn)
  for (Shard &shard : shards_) {
    Executor &executor = local_->executor(shard.local);
    std::map<std::string, size_t> buffers;
    for (size_t p = 0; p < shard.pieces.size(); ++p) {
      const SavedPiece &piece = shard.pieces[p];
      auto found = buffers.find(piece.buffer);
      if (found == buffers.end()) {
        StatusOr<size_t> buffer = executor.findBuffer(piece.buffer);
        if (!buffer)
          return buffer.takeStatus().withContext("rank " +
                                                 std::to_string(shard.rank));
        found = buffers.emplace(piece.buffer, *buffer).first;
      }
      Status read = executor.readFloatRange(found->second, piece.bufferOffset,
                                            piece.count,
                                            shard.block + shard.offsets[p]);
      if (!read)
        return std::move(read).withContext("rank " + std::to_string(shard.rank) + ", '" +
                                piece.tensor + "'");
    }
  }
  return Status::ok();
}

namespace {

/// MLT_FAULT_CHECKPOINT_WRITE=STEP (for tests): the write of step STEP's
/// shards fails halfway through each, as on a full disk.
bool faultAtStep(int64_t step) {
  const char *value = std::getenv("MLT_FAULT_CHECKPOINT_WRITE");
  return value && *value && std::strtoll(value, nullptr, 10) == step;
}

} // namespace

StatusOr<uint64_t> CheckpointStaging::write(const std::string &dir,
                                            int64_t step) const {
  const bool fault = faultAtStep(step);
  // Each shard's hashes, computed as it is written, go beside it for rank
  // 0's process to gather into the index (commitCheckpoint).
  const std::map<std::string, std::string> metadata = {
      {kStepMetadata, std::to_string(step)}};
  std::vector<Status> written(shards_.size(), Status::ok());
  std::vector<std::thread> writers;
  for (size_t i = 0; i < shards_.size(); ++i)
    startOrRun(writers, [&, i] {
      const Shard &shard = shards_[i];
      const fs::path path = fs::path(dir) / shardFileName(shard.rank);
      SafeTensorsDigest digest;
      written[i] = writeSafeTensors(
          path.string(), shard.specs,
          [&](size_t p) -> StatusOr<ByteView> {
            if (fault && p == shard.specs.size() / 2)
              return errorf(path.string(), ": write failed (injected by "
                                           "MLT_FAULT_CHECKPOINT_WRITE)");
            return ByteView{
                reinterpret_cast<const uint8_t *>(shard.block +
                                                  shard.offsets[p]),
                uint64_t(shard.pieces[p].count) * sizeof(float)};
          },
          metadata, &digest);
      if (!written[i])
        return;
      json pieces = json::object();
      for (size_t p = 0; p < shard.specs.size(); ++p)
        pieces[shard.specs[p].name] = formatContentHash(digest.tensors[p]);
      const json record = {{"xxh3", formatContentHash(digest.file)},
                           {"header_xxh3", formatContentHash(digest.header)},
                           {"pieces", std::move(pieces)}};
      written[i] = writeDurably(path.string() + kDigestSuffix, record.dump());
    });
  for (std::thread &writer : writers)
    writer.join();
  uint64_t bytes = 0;
  for (size_t i = 0; i < shards_.size(); ++i) {
    MLT_RETURN_IF_ERROR(written[i]);
    std::error_code error;
    bytes += fs::file_size(fs::path(dir) / shardFileName(shards_[i].rank),
                           error);
  }
  return bytes;
}
