//===- CheckpointIndexTest.cpp - the checkpoint index's validation --------===//
//
// Part of mlt. parseCheckpointIndex must accept every index a layout can
// produce (tensors cut into a grid of blocks, as tp and pp cut them, and
// blocks cut into ranges, as ZeRO's slices cut them) and must never accept
// one whose pieces do not cover each tensor exactly once. Both are checked
// on random indexes against a naive reference that marks every element of
// every piece in a bitmap.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/train/CheckpointIndex.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

using namespace mlt;
using namespace mlt::rt;

namespace {

int64_t elementsOf(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

/// The naive reference: every piece inside its tensor and its block, each
/// element of each tensor held by exactly one piece.
bool coversExactly(const CheckpointIndex &index) {
  for (const CheckpointIndex::Tensor &tensor : index.tensors) {
    std::vector<int> held(size_t(elementsOf(tensor.shape)), 0);
    for (const CheckpointIndex::Piece &piece : tensor.pieces) {
      const BlockLayout &layout = piece.layout;
      for (size_t d = 0; d < tensor.shape.size(); ++d)
        if (layout.offset[d] < 0 || layout.shape[d] < 1 ||
            layout.offset[d] + layout.shape[d] > tensor.shape[d])
          return false;
      const int64_t blockElements = elementsOf(layout.shape);
      if (piece.begin < 0 || piece.count < 1 ||
          piece.begin + piece.count > blockElements)
        return false;
      for (int64_t e = piece.begin; e < piece.begin + piece.count; ++e) {
        // Element e of the block (row-major) -> element of the tensor.
        int64_t rest = e, flat = 0, stride = 1;
        std::vector<int64_t> index(layout.shape.size());
        for (size_t d = layout.shape.size(); d-- > 0;) {
          index[d] = rest % layout.shape[d];
          rest /= layout.shape[d];
        }
        for (size_t d = layout.shape.size(); d-- > 0;) {
          flat += (layout.offset[d] + index[d]) * stride;
          stride *= tensor.shape[d];
        }
        if (held[size_t(flat)]++)
          return false;
      }
    }
    for (int count : held)
      if (count != 1)
        return false;
  }
  return true;
}

/// A random index as layouts make them: each tensor cut into a grid of
/// blocks, some blocks cut into ranges, the pieces spread over a few files.
CheckpointIndex randomIndex(std::mt19937 &rng) {
  auto uniform = [&](int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(rng);
  };
  CheckpointIndex index;
  index.step = uniform(1, 1000);
  auto hash = [&] { return uint64_t(rng()) << 32 | uint64_t(rng()); };
  const int files = int(uniform(1, 4));
  for (int f = 0; f < files; ++f)
    index.files.push_back({shardFileName(uint32_t(f)),
                           uint64_t(uniform(8, 99)), hash(), hash()});
  const int tensors = int(uniform(1, 4));
  int key = 0;
  for (int t = 0; t < tensors; ++t) {
    CheckpointIndex::Tensor tensor;
    tensor.name = "tensor." + std::to_string(t);
    const int rank = int(uniform(1, 3));
    std::vector<std::vector<int64_t>> cuts(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) {
      const int64_t size = uniform(1, 7);
      tensor.shape.push_back(size);
      cuts[size_t(d)].push_back(0);
      for (int64_t at = 1; at < size; ++at)
        if (uniform(0, 2) == 0)
          cuts[size_t(d)].push_back(at);
      cuts[size_t(d)].push_back(size);
    }
    // Every block of the grid.
    std::vector<size_t> at(static_cast<size_t>(rank), 0);
    while (true) {
      BlockLayout layout{tensor.shape, {}, {}};
      for (int d = 0; d < rank; ++d) {
        layout.offset.push_back(cuts[size_t(d)][at[size_t(d)]]);
        layout.shape.push_back(cuts[size_t(d)][at[size_t(d)] + 1] -
                               cuts[size_t(d)][at[size_t(d)]]);
      }
      const int64_t elements = elementsOf(layout.shape);
      int64_t begin = 0;
      while (begin < elements) {
        const int64_t count =
            uniform(0, 1) ? elements - begin : uniform(1, elements - begin);
        CheckpointIndex::Piece piece;
        piece.file = size_t(uniform(0, files - 1));
        piece.key = "k" + std::to_string(key++);
        piece.layout = layout;
        piece.begin = begin;
        piece.count = count;
        piece.isRange = !(begin == 0 && count == elements);
        piece.hash = hash();
        tensor.pieces.push_back(std::move(piece));
        begin += count;
      }
      int d = rank - 1;
      while (d >= 0 && ++at[size_t(d)] + 1 == cuts[size_t(d)].size())
        at[size_t(d--)] = 0;
      if (d < 0)
        break;
    }
    index.tensors.push_back(std::move(tensor));
  }
  return index;
}

TEST(CheckpointIndexTest, AcceptsEveryLayoutsIndexAndRoundTrips) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    CheckpointIndex index = randomIndex(rng);
    ASSERT_TRUE(coversExactly(index));
    StatusOr<CheckpointIndex> parsed = parseCheckpointIndex(index.toJson());
    ASSERT_TRUE(parsed.isOk()) << parsed.status().message() << "\n"
                               << index.toJson();
    EXPECT_EQ(parsed->toJson(), index.toJson());
  }
}

TEST(CheckpointIndexTest, NeverAcceptsAnIndexThatDoesNotCoverExactly) {
  std::mt19937 rng(11);
  int refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    CheckpointIndex index = randomIndex(rng);
    CheckpointIndex::Tensor &tensor =
        index.tensors[rng() % index.tensors.size()];
    CheckpointIndex::Piece &piece = tensor.pieces[rng() % tensor.pieces.size()];
    switch (rng() % 5) {
    case 0: // a piece lost
      tensor.pieces.erase(tensor.pieces.begin() +
                          (&piece - tensor.pieces.data()));
      break;
    case 1: { // a piece held twice
      CheckpointIndex::Piece copy = piece;
      copy.key += "-again";
      tensor.pieces.push_back(copy);
      break;
    }
    case 2: // a range moved by one
      piece.begin += rng() % 2 ? 1 : -1;
      piece.isRange = true;
      break;
    case 3: // a range one longer or shorter
      piece.count += rng() % 2 ? 1 : -1;
      piece.isRange = true;
      break;
    case 4: { // a block moved by one
      const size_t d = rng() % piece.layout.offset.size();
      piece.layout.offset[d] += rng() % 2 ? 1 : -1;
      break;
    }
    }
    if (tensor.pieces.empty())
      continue;
    // (Serialized by hand where toJson cannot express it: a negative or
    // empty range.)
    nlohmann::json text = nlohmann::json::parse(index.toJson());
    for (const CheckpointIndex::Tensor &t : index.tensors)
      for (size_t p = 0; p < t.pieces.size(); ++p) {
        text["tensors"][t.name]["pieces"][p]["begin"] = t.pieces[p].begin;
        text["tensors"][t.name]["pieces"][p]["count"] = t.pieces[p].count;
      }
    StatusOr<CheckpointIndex> parsed = parseCheckpointIndex(text.dump());
    if (!coversExactly(index)) {
      EXPECT_FALSE(parsed.isOk()) << text.dump();
      ++refused;
    }
    if (parsed.isOk())
      EXPECT_TRUE(coversExactly(*parsed));
  }
  EXPECT_GT(refused, 1000);
}

std::string errorOf(const std::string &text) {
  StatusOr<CheckpointIndex> parsed = parseCheckpointIndex(text);
  return parsed.isOk() ? "(accepted)" : parsed.status().message();
}

std::string wrap(const std::string &files, const std::string &tensors) {
  return R"({"format": "mlt-checkpoint-index", "version": 1, "files": )" +
         files + R"(, "tensors": )" + tensors + "}";
}

const char *kFiles = R"([{"name": "rank-00000.safetensors", "bytes": 80}])";

TEST(CheckpointIndexTest, AVersionOneIndexIsWrittenAgainAsVersionOne) {
  // (mlt-fuzz-checkpoint-index's finding: a version-1 index, whose step
  // the reader ignores, was written again as version 2 without one.)
  const std::string text =
      R"({"format": "mlt-checkpoint-index", "version": 1, "step": 7, )"
      R"("files": [{"name": "rank-00000.safetensors", "bytes": 80}], )"
      R"("tensors": {"w": {"shape": [4], "pieces": [{"file": 0, "key": "w", )"
      R"("offset": [0], "block": [4]}]}}})";
  StatusOr<CheckpointIndex> parsed = parseCheckpointIndex(text);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  EXPECT_EQ(parsed->step, 0);
  const std::string written = parsed->toJson();
  EXPECT_NE(written.find("\"version\": 1"), std::string::npos) << written;
  StatusOr<CheckpointIndex> reread = parseCheckpointIndex(written);
  ASSERT_TRUE(reread.isOk()) << reread.status().message();
  EXPECT_EQ(reread->toJson(), written);
}

TEST(CheckpointIndexTest, NamesWhatIsWrong) {
  EXPECT_EQ(errorOf("{"), "not valid JSON");
  EXPECT_EQ(errorOf(std::string(200, '[')),
            "it nests deeper than 128 levels (at byte 128)");
  EXPECT_EQ(errorOf(R"({"format": "mlt-checkpoint-index", "version": 9})"),
            "format version 9, this mlt reads 1 to 2");
  // Version 2 carries the step and a content hash of each file, its header
  // and each piece.
  const std::string v2 =
      R"({"format": "mlt-checkpoint-index", "version": 2, "step": 3, )"
      R"("files": [{"name": "rank-00000.safetensors", "bytes": 80, )"
      R"("xxh3": "0123456789abcdef", "header_xxh3": "%H"}], "tensors": )"
      R"({"w": {"shape": [4], "pieces": [{"file": 0, "key": "w", )"
      R"("offset": [0], "block": [4], "xxh3": "%P"}]}}})";
  auto withHashes = [&](const std::string &header, const std::string &piece) {
    std::string text = v2;
    text.replace(text.find("%H"), 2, header);
    text.replace(text.find("%P"), 2, piece);
    return text;
  };
  StatusOr<CheckpointIndex> hashed =
      parseCheckpointIndex(withHashes("fedcba9876543210", "00000000000000ff"));
  ASSERT_TRUE(hashed.isOk()) << hashed.status().message();
  EXPECT_EQ(hashed->step, 3);
  EXPECT_EQ(hashed->files[0].hash, uint64_t(0x0123456789abcdefULL));
  EXPECT_EQ(hashed->files[0].headerHash, uint64_t(0xfedcba9876543210ULL));
  EXPECT_EQ(hashed->tensors[0].pieces[0].hash, uint64_t(0xff));
  EXPECT_EQ(errorOf(withHashes("fedcba987654321", "00000000000000ff")),
            "file 'rank-00000.safetensors': 'header_xxh3' is "
            "\"fedcba987654321\", not 16 hex digits");
  std::string unhashed = withHashes("fedcba9876543210", "0");
  unhashed.replace(unhashed.find(R"(, "xxh3": "0")"), 13, "");
  EXPECT_EQ(errorOf(unhashed),
            "tensor 'w': piece 'w': no 'xxh3' content hash");
  std::string stepless = withHashes("fedcba9876543210", "00000000000000ff");
  stepless.replace(stepless.find(R"("step": 3, )"), 11, "");
  EXPECT_EQ(errorOf(stepless),
            "'step' must be the checkpoint's step, 1 or more");
  EXPECT_EQ(errorOf(wrap(R"([{"name": "../x", "bytes": 1}])", "{}")),
            "file name '../x' is not a file of the directory");
  EXPECT_EQ(
      errorOf(wrap(kFiles, R"({"w": {"shape": [4], "pieces": [
        {"file": 3, "key": "w", "offset": [0], "block": [4]}]}})")),
      "tensor 'w': 'file' must name one of the 1 files by its index");
  EXPECT_EQ(
      errorOf(wrap(kFiles, R"({"w": {"shape": [4], "pieces": [
        {"file": 0, "key": "w", "offset": [1], "block": [4]}]}})")),
      "tensor 'w': piece 'w': block [4] at [1] reaches past shape [4]");
  EXPECT_EQ(
      errorOf(wrap(kFiles, R"({"w": {"shape": [4, 2], "pieces": [
        {"file": 0, "key": "a", "offset": [0, 0], "block": [2, 2]}]}})")),
      "tensor 'w' of shape [4, 2]: its pieces hold 4 of its 8 elements");
  EXPECT_EQ(
      errorOf(wrap(kFiles, R"({"w": {"shape": [4], "pieces": [
        {"file": 0, "key": "a", "offset": [0], "block": [4]},
        {"file": 0, "key": "a", "offset": [0], "block": [4]}]}})")),
      "tensor 'w': key 'a' of file 'rank-00000.safetensors' is used twice");
  EXPECT_EQ(
      errorOf(wrap(kFiles, R"({"w": {"shape": [4], "pieces": [
        {"file": 0, "key": "a", "offset": [0], "block": [3]},
        {"file": 0, "key": "b", "offset": [2], "block": [2]}]}})")),
      "tensor 'w': the blocks at [0] and [2] overlap");
  EXPECT_EQ(
      errorOf(wrap(kFiles, R"({"w": {"shape": [1099511627776, 1099511627776],
        "pieces": [{"file": 0, "key": "a", "offset": [0, 0],
                    "block": [1, 1]}]}})")),
      "tensor 'w': shape [1099511627776, 1099511627776] has more than 2^48 "
      "elements");
  EXPECT_EQ(
      errorOf(wrap(kFiles, R"({"w": {"shape": [4], "pieces": [
        {"file": 0, "key": "a", "offset": [0], "block": [4], "begin": 2,
         "count": 3}]}})")),
      "tensor 'w': piece 'a': elements [2, +3) are not inside its block of 4");
  EXPECT_EQ(errorOf(wrap(kFiles, R"({"w": {"shape": [-1], "pieces": [{}]}})")),
            "tensor 'w': 'shape' [-1] holds -1, not an integer in [1, "
            "281474976710656]");
}

} // namespace
