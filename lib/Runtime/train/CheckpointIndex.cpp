//===- CheckpointIndex.cpp - where a checkpoint's tensors are -------------===//
//
// Part of mlt. Builds, writes and validates the index of CheckpointIndex.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/train/CheckpointIndex.h"

#include "mlt/Runtime/io/SafeTensors.h"
#include "mlt/Runtime/train/Parameters.h"
#include "mlt/Support/ContentHash.h"
#include "mlt/Support/JsonDepth.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

using namespace mlt;
using namespace mlt::rt;
using json = nlohmann::json;

namespace {

constexpr const char *kFormat = "mlt-checkpoint-index";
/// 1: files and pieces; 2: the step, and the content hashes of each file,
/// its header and each piece (read without them from version 1).
constexpr int kVersion = 2;
constexpr const char *kHashKey = "xxh3";

// Bounds no real checkpoint comes near (LLaMA-2-70B at 4096 ranks has about
// 700 tensors of 3 states, each in at most a few thousand pieces), so that a
// hostile index cannot make the reader allocate or loop without bound.
constexpr size_t kMaxFiles = size_t(1) << 20;
constexpr size_t kMaxTensors = size_t(1) << 20;
constexpr size_t kMaxPieces = size_t(1) << 24;
/// Distinct blocks of one tensor: their disjointness is checked pairwise.
constexpr size_t kMaxBlocksPerTensor = 4096;
constexpr size_t kMaxRank = 8;
constexpr int64_t kMaxElements = int64_t(1) << 48;
constexpr size_t kMaxNameBytes = 4096;

int64_t elementsOf(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

bool isUnsigned(const json &value) {
  return value.is_number_unsigned() ||
         (value.is_number_integer() && value.get<int64_t>() >= 0);
}

/// A JSON array of `rank` integers in [low, high] (or any rank, with
/// `rank` 0 and up to kMaxRank), else the reason.
StatusOr<std::vector<int64_t>> readDims(const json &value, const char *what,
                                        size_t rank, int64_t low,
                                        int64_t high) {
  if (!value.is_array())
    return errorf("'", what, "' is not an array");
  if (rank ? value.size() != rank : value.size() > kMaxRank)
    return errorf("'", what, "' has ", value.size(), " dimensions, ",
                  rank ? "the tensor has " + std::to_string(rank)
                       : "at most " + std::to_string(kMaxRank) + " allowed");
  std::vector<int64_t> dims;
  for (const json &dim : value) {
    if (!isUnsigned(dim) || dim.get<uint64_t>() > uint64_t(high) ||
        dim.get<int64_t>() < low)
      return errorf("'", what, "' ", value.dump(), " holds ", dim.dump(),
                    ", not an integer in [", low, ", ", high, "]");
    dims.push_back(dim.get<int64_t>());
  }
  return dims;
}

/// The content hash under `key` of the object `value`: none where the key
/// is absent (an index of version 1), else 16 hex digits or an error.
StatusOr<std::optional<uint64_t>> readHash(const json &value,
                                           const char *key, int version) {
  auto found = value.find(key);
  if (found == value.end()) {
    if (version >= 2)
      return errorf("no '", key, "' content hash");
    return std::optional<uint64_t>();
  }
  std::optional<uint64_t> hash;
  if (found->is_string())
    hash = parseContentHash(found->get_ref<const std::string &>());
  if (!hash)
    return errorf("'", key, "' is ", found->dump().substr(0, 40),
                  ", not 16 hex digits");
  return hash;
}

/// Whether two boxes of one tensor share an element.
bool overlap(const BlockLayout &a, const BlockLayout &b) {
  for (size_t d = 0; d < a.offset.size(); ++d)
    if (a.offset[d] + a.shape[d] <= b.offset[d] ||
        b.offset[d] + b.shape[d] <= a.offset[d])
      return false;
  return true;
}

/// Checks that `tensor`'s pieces cover it exactly once.
Status checkCoverage(const CheckpointIndex::Tensor &tensor) {
  // The pieces of each block, by the block's offset.
  std::map<std::vector<int64_t>, std::vector<const CheckpointIndex::Piece *>>
      blocks;
  for (const CheckpointIndex::Piece &piece : tensor.pieces)
    blocks[piece.layout.offset].push_back(&piece);
  if (blocks.size() > kMaxBlocksPerTensor)
    return errorf("tensor '", tensor.name, "': ", blocks.size(),
                  " blocks, more than ", kMaxBlocksPerTensor);
  int64_t covered = 0;
  std::vector<const BlockLayout *> layouts;
  for (auto &[offset, pieces] : blocks) {
    const BlockLayout &layout = pieces.front()->layout;
    for (const CheckpointIndex::Piece *piece : pieces)
      if (piece->layout.shape != layout.shape)
        return errorf("tensor '", tensor.name, "': the blocks at offset ",
                      formatShape(offset), " are of shapes ",
                      formatShape(layout.shape), " and ",
                      formatShape(piece->layout.shape));
    std::sort(pieces.begin(), pieces.end(),
              [](const CheckpointIndex::Piece *a,
                 const CheckpointIndex::Piece *b) { return a->begin < b->begin; });
    int64_t end = 0;
    for (const CheckpointIndex::Piece *piece : pieces) {
      if (piece->begin < end)
        return errorf("tensor '", tensor.name, "': pieces '", piece->key,
                      "' and another hold the same elements of the block at ",
                      formatShape(offset));
      end = piece->begin + piece->count;
      covered += piece->count;
    }
    for (const BlockLayout *other : layouts)
      if (overlap(*other, layout))
        return errorf("tensor '", tensor.name, "': the blocks at ",
                      formatShape(other->offset), " and ",
                      formatShape(layout.offset), " overlap");
    layouts.push_back(&layout);
  }
  const int64_t total = elementsOf(tensor.shape);
  if (covered != total)
    return errorf("tensor '", tensor.name, "' of shape ",
                  formatShape(tensor.shape), ": its pieces hold ", covered,
                  " of its ", total, " elements");
  return Status::ok();
}

StatusOr<CheckpointIndex::Piece> readPiece(const json &value,
                                           const CheckpointIndex &index,
                                           const std::vector<int64_t> &shape,
                                           int version) {
  if (!value.is_object())
    return errorf("a piece is not an object");
  CheckpointIndex::Piece piece;
  auto file = value.find("file");
  if (file == value.end() || !isUnsigned(*file) ||
      file->get<uint64_t>() >= index.files.size())
    return errorf("'file' must name one of the ", index.files.size(),
                  " files by its index");
  piece.file = size_t(file->get<uint64_t>());
  auto key = value.find("key");
  if (key == value.end() || !key->is_string() ||
      key->get_ref<const std::string &>().empty() ||
      key->get_ref<const std::string &>().size() > kMaxNameBytes)
    return errorf("'key' must be a non-empty string");
  piece.key = key->get<std::string>();
  auto offset = value.find("offset"), block = value.find("block");
  if (offset == value.end() || block == value.end())
    return errorf("piece '", piece.key, "' has no 'offset' or 'block'");
  StatusOr<std::vector<int64_t>> offsets =
      readDims(*offset, "offset", shape.size(), 0, kMaxElements);
  if (!offsets)
    return offsets.takeStatus().withContext("piece '" + piece.key + "'");
  StatusOr<std::vector<int64_t>> blockShape =
      readDims(*block, "block", shape.size(), 1, kMaxElements);
  if (!blockShape)
    return blockShape.takeStatus().withContext("piece '" + piece.key + "'");
  for (size_t d = 0; d < shape.size(); ++d)
    if ((*offsets)[d] + (*blockShape)[d] > shape[d])
      return errorf("piece '", piece.key, "': block ", formatShape(*blockShape),
                    " at ", formatShape(*offsets), " reaches past shape ",
                    formatShape(shape));
  piece.layout = BlockLayout{shape, std::move(*offsets), std::move(*blockShape)};
  const int64_t blockElements = elementsOf(piece.layout.shape);
  auto begin = value.find("begin"), count = value.find("count");
  if ((begin == value.end()) != (count == value.end()))
    return errorf("piece '", piece.key, "': 'begin' and 'count' go together");
  piece.begin = 0;
  piece.count = blockElements;
  if (begin != value.end()) {
    if (!isUnsigned(*begin) || !isUnsigned(*count) ||
        begin->get<uint64_t>() >= uint64_t(blockElements) ||
        count->get<uint64_t>() == 0 ||
        count->get<uint64_t>() > uint64_t(blockElements) - begin->get<uint64_t>())
      return errorf("piece '", piece.key, "': elements [", begin->dump(), ", +",
                    count->dump(), ") are not inside its block of ",
                    blockElements);
    piece.begin = begin->get<int64_t>();
    piece.count = count->get<int64_t>();
    piece.isRange = !(piece.begin == 0 && piece.count == blockElements);
  }
  StatusOr<std::optional<uint64_t>> hash = readHash(value, kHashKey, version);
  if (!hash)
    return hash.takeStatus().withContext("piece '" + piece.key + "'");
  piece.hash = *hash;
  return piece;
}

StatusOr<CheckpointIndex> parse(std::string_view text) {
  if (std::optional<size_t> at = jsonTooDeepAt(text))
    return errorf("it ", jsonTooDeepMessage(*at));
  const json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded())
    return errorf("not valid JSON");
  if (!root.is_object() || root.value("format", json()) != kFormat)
    return errorf("not an mlt checkpoint index (no \"format\": \"", kFormat,
                  "\")");
  const json version = root.value("version", json());
  if (version != 1 && version != kVersion)
    return errorf("format version ", version.dump(), ", this mlt reads 1 to ",
                  kVersion);
  const int versionNumber = version.get<int>();
  CheckpointIndex index;
  if (versionNumber >= 2) {
    auto step = root.find("step");
    if (step == root.end() || !isUnsigned(*step) || step->get<uint64_t>() < 1 ||
        step->get<uint64_t>() > (uint64_t(1) << 50))
      return errorf("'step' must be the checkpoint's step, 1 or more");
    index.step = step->get<int64_t>();
  }
  auto files = root.find("files");
  if (files == root.end() || !files->is_array() || files->empty() ||
      files->size() > kMaxFiles)
    return errorf("'files' must be a non-empty array of files");
  std::set<std::string> fileNames;
  for (const json &file : *files) {
    auto name = file.is_object() ? file.find("name") : file.end();
    auto bytes = file.is_object() ? file.find("bytes") : file.end();
    if (!file.is_object() || name == file.end() || !name->is_string() ||
        bytes == file.end() || !isUnsigned(*bytes))
      return errorf("a file is not {\"name\": ..., \"bytes\": ...}");
    const std::string &text = name->get_ref<const std::string &>();
    // A shard is a file of the checkpoint's own directory.
    if (text.empty() || text.size() > 255 || text == "." || text == ".." ||
        text.find('/') != std::string::npos ||
        text.find('\0') != std::string::npos)
      return errorf("file name '", text, "' is not a file of the directory");
    if (!fileNames.insert(text).second)
      return errorf("file '", text, "' is listed twice");
    CheckpointIndex::File entry{text, bytes->get<uint64_t>(), {}, {}};
    for (auto [key, hash] : {std::pair{kHashKey, &entry.hash},
                             std::pair{"header_xxh3", &entry.headerHash}}) {
      StatusOr<std::optional<uint64_t>> read =
          readHash(file, key, versionNumber);
      if (!read)
        return read.takeStatus().withContext("file '" + text + "'");
      *hash = *read;
    }
    index.files.push_back(std::move(entry));
  }
  auto tensors = root.find("tensors");
  if (tensors == root.end() || !tensors->is_object() || tensors->empty() ||
      tensors->size() > kMaxTensors)
    return errorf("'tensors' must be a non-empty object");
  size_t pieces = 0;
  std::set<std::pair<size_t, std::string>> keys;
  for (auto it = tensors->begin(); it != tensors->end(); ++it) {
    CheckpointIndex::Tensor tensor;
    tensor.name = it.key();
    auto fail = [&](Status status) {
      return std::move(status).withContext("tensor '" + tensor.name + "'");
    };
    if (tensor.name.empty() || tensor.name.size() > kMaxNameBytes)
      return errorf("a tensor name is empty or longer than ", kMaxNameBytes,
                    " bytes");
    const json &entry = it.value();
    auto shape = entry.is_object() ? entry.find("shape") : entry.end();
    auto list = entry.is_object() ? entry.find("pieces") : entry.end();
    if (shape == entry.end() || list == entry.end() || !list->is_array() ||
        list->empty())
      return fail(errorf("needs 'shape' and a non-empty 'pieces' array"));
    StatusOr<std::vector<int64_t>> dims =
        readDims(*shape, "shape", 0, 1, kMaxElements);
    if (!dims)
      return fail(dims.takeStatus());
    int64_t elements = 1;
    for (int64_t dim : *dims)
      if (__builtin_mul_overflow(elements, dim, &elements) ||
          elements > kMaxElements)
        return fail(errorf("shape ", formatShape(*dims), " has more than 2^48 ",
                           "elements"));
    tensor.shape = std::move(*dims);
    if ((pieces += list->size()) > kMaxPieces)
      return errorf("more than ", kMaxPieces, " pieces");
    for (const json &value : *list) {
      StatusOr<CheckpointIndex::Piece> piece =
          readPiece(value, index, tensor.shape, versionNumber);
      if (!piece)
        return fail(piece.takeStatus());
      if (!keys.insert({piece->file, piece->key}).second)
        return fail(errorf("key '", piece->key, "' of file '",
                           index.files[piece->file].name,
                           "' is used twice"));
      tensor.pieces.push_back(std::move(*piece));
    }
    MLT_RETURN_IF_ERROR(checkCoverage(tensor));
    index.tensors.push_back(std::move(tensor));
  }
  return index;
}

} // namespace

std::vector<int64_t> CheckpointIndex::Piece::storedShape() const {
  if (isRange)
    return {count};
  return layout.shape;
}

std::string CheckpointIndex::toJson() const {
  json fileList = json::array();
  auto withHash = [](json &entry, const char *key,
                     const std::optional<uint64_t> &hash) {
    if (hash)
      entry[key] = formatContentHash(*hash);
  };
  for (const File &file : files) {
    json entry = {{"name", file.name}, {"bytes", file.bytes}};
    withHash(entry, kHashKey, file.hash);
    withHash(entry, "header_xxh3", file.headerHash);
    fileList.push_back(std::move(entry));
  }
  json tensorMap = json::object();
  for (const Tensor &tensor : tensors) {
    json pieceList = json::array();
    for (const Piece &piece : tensor.pieces) {
      json entry = {{"file", piece.file},
                    {"key", piece.key},
                    {"offset", piece.layout.offset},
                    {"block", piece.layout.shape}};
      if (piece.isRange) {
        entry["begin"] = piece.begin;
        entry["count"] = piece.count;
      }
      withHash(entry, kHashKey, piece.hash);
      pieceList.push_back(std::move(entry));
    }
    tensorMap[tensor.name] = {{"shape", tensor.shape},
                              {"pieces", std::move(pieceList)}};
  }
  // An index without a step (read from a version-1 checkpoint, which
  // need not carry one, nor the hashes) is written again as version 1:
  // version 2 requires both.
  json root = {{"format", kFormat},
               {"version", step > 0 ? kVersion : 1},
               {"files", std::move(fileList)},
               {"tensors", std::move(tensorMap)}};
  if (step > 0)
    root["step"] = step;
  return root.dump(1) + "\n";
}

std::string mlt::rt::shardFileName(uint32_t rank) {
  char name[40];
  std::snprintf(name, sizeof(name), "rank-%05u.safetensors", rank);
  return name;
}

std::string mlt::rt::pieceKey(const std::string &tensor, size_t i,
                              size_t count) {
  return count == 1 ? tensor : tensor + "#" + std::to_string(i);
}

CheckpointIndex
mlt::rt::checkpointIndexOf(const std::vector<SavedPiece> &pieces,
                           std::vector<std::string> *keys) {
  CheckpointIndex index;
  std::map<uint32_t, size_t> fileOf;
  std::map<std::string, std::vector<const SavedPiece *>> byTensor;
  for (const SavedPiece &piece : pieces) {
    byTensor[piece.tensor].push_back(&piece);
    fileOf.emplace(piece.rank, 0);
  }
  if (keys)
    keys->assign(pieces.size(), std::string());
  for (auto &[rank, file] : fileOf) {
    file = index.files.size();
    index.files.push_back({shardFileName(rank), 0, {}, {}});
  }
  for (const auto &[name, list] : byTensor) {
    CheckpointIndex::Tensor tensor{name, list.front()->layout.fullShape, {}};
    for (size_t i = 0; i < list.size(); ++i) {
      const SavedPiece &piece = *list[i];
      tensor.pieces.push_back({fileOf.at(piece.rank),
                               pieceKey(name, i, list.size()), piece.layout,
                               piece.isRange, piece.begin, piece.count, {}});
      if (keys)
        (*keys)[size_t(list[i] - pieces.data())] = tensor.pieces.back().key;
    }
    index.tensors.push_back(std::move(tensor));
  }
  return index;
}

StatusOr<CheckpointIndex> mlt::rt::parseCheckpointIndex(std::string_view text) {
  try {
    return parse(text);
  } catch (const json::exception &e) {
    // (get<> on a value of another type; the checks above should leave none)
    return errorf("malformed: ", e.what());
  }
}
