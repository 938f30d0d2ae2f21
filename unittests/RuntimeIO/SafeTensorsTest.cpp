//===- SafeTensorsTest.cpp - safetensors and HF checkpoint tests ----------===//
//
// Part of mlt. Tests the safetensors reader and writer: round trips of random
// data, the layout HF's loaders expect, the real reference fixture, sharded
// checkpoint directories, every validation error (each must name the file and
// the tensor at fault), the expected-tensor check, and atomic checkpoint
// directory writes that leave the target untouched on failure.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/SafeTensors.h"

#include "TestUtil.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include <sys/stat.h>

using namespace mlt;
using namespace mlt::rt;
using mlt::rt::testing::readBytes;
using mlt::rt::testing::ScratchDirTest;
using mlt::rt::testing::writeBytes;
using json = nlohmann::json;
using ::testing::HasSubstr;

namespace {

std::vector<float> randomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(n);
  for (float &v : values)
    v = dist(rng);
  return values;
}

/// A safetensors file with the given header text (unpadded) and data bytes.
std::string makeFile(const std::string &header, const std::string &data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

/// The header JSON of a safetensors file.
json headerOf(const std::string &bytes) {
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  return json::parse(bytes.substr(8, n));
}

#define ASSERT_OK(expr)                                                        \
  do {                                                                         \
    const auto &okValue_ = (expr);                                             \
    ASSERT_TRUE(okValue_.isOk()) << statusMessage(okValue_);                   \
  } while (0)

std::string statusMessage(const Status &s) {
  return s.isOk() ? "ok" : s.message();
}
template <typename T> std::string statusMessage(const StatusOr<T> &s) {
  return s.isOk() ? "ok" : s.status().message();
}

/// The error message of a failed result; fails the test if it succeeded.
template <typename T> std::string errorOf(const StatusOr<T> &result) {
  EXPECT_FALSE(result.isOk()) << "expected an error";
  return result.isOk() ? "" : result.status().message();
}
std::string errorOf(const Status &status) {
  EXPECT_FALSE(status.isOk()) << "expected an error";
  return status.isOk() ? "" : status.message();
}

/// The tensors of the LLaMA in ../shared/fixtures/llama-ref-a.
std::vector<ExpectedTensor> fixtureTensors() {
  std::vector<ExpectedTensor> expected = {
      {"model.embed_tokens.weight", {256, 64}},
      {"model.norm.weight", {64}},
      {"lm_head.weight", {256, 64}},
  };
  for (int layer = 0; layer < 2; ++layer) {
    std::string p = "model.layers." + std::to_string(layer) + ".";
    expected.push_back({p + "input_layernorm.weight", {64}});
    expected.push_back({p + "post_attention_layernorm.weight", {64}});
    expected.push_back({p + "self_attn.q_proj.weight", {64, 64}});
    expected.push_back({p + "self_attn.k_proj.weight", {32, 64}});
    expected.push_back({p + "self_attn.v_proj.weight", {32, 64}});
    expected.push_back({p + "self_attn.o_proj.weight", {64, 64}});
    expected.push_back({p + "mlp.gate_proj.weight", {176, 64}});
    expected.push_back({p + "mlp.up_proj.weight", {176, 64}});
    expected.push_back({p + "mlp.down_proj.weight", {64, 176}});
  }
  return expected;
}

const std::string kFixtureDir =
    MLT_SOURCE_DIR "/../shared/fixtures/llama-ref-a";

TensorMap sampleTensors() {
  TensorMap tensors;
  tensors["b.f32"] =
      Tensor::fromFloats(DType::F32, {3, 5}, randomFloats(15, 1));
  tensors["a.bf16"] =
      Tensor::fromFloats(DType::BF16, {4, 7}, randomFloats(28, 2));
  std::mt19937_64 rng(3);
  std::vector<int64_t> ints(6);
  for (int64_t &v : ints)
    v = int64_t(rng());
  tensors["c.i64"] = Tensor::fromRaw(DType::I64, {6}, ints.data());
  return tensors;
}

//===----------------------------------------------------------------------===//
// Round trips and layout
//===----------------------------------------------------------------------===//

using SafeTensorsTest = ScratchDirTest;

TEST_F(SafeTensorsTest, RoundTripsRandomTensors) {
  TensorMap tensors = sampleTensors();
  tensors["d.f16"] = Tensor::fromFloats(DType::F16, {2, 3}, randomFloats(6, 4));
  tensors["e.f64"] = Tensor::fromDoubles(DType::F64, {2}, {1.0 / 3, -2e300});
  tensors["f.empty"] = Tensor::fromFloats(DType::F32, {0, 4}, {});
  tensors["g.scalar"] = Tensor::fromFloats(DType::F32, {}, {42.0f});
  std::string file = path("t.safetensors");
  ASSERT_OK(writeSafeTensors(file, tensors, {{"step", "7"}}));

  std::map<std::string, std::string> metadata;
  StatusOr<TensorMap> read = readSafeTensors(file, &metadata);
  ASSERT_OK(read);
  ASSERT_EQ(read->size(), tensors.size());
  for (const auto &[name, tensor] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_EQ(read->count(name), 1u);
    const Tensor &back = read->at(name);
    EXPECT_EQ(back.dtype, tensor.dtype);
    EXPECT_EQ(back.shape, tensor.shape);
    EXPECT_EQ(back.bytes, tensor.bytes);
  }
  EXPECT_EQ(metadata["format"], "pt");
  EXPECT_EQ(metadata["step"], "7");

  // The values survive as values, not only as bytes.
  StatusOr<std::vector<float>> f32 = toFloat32("b.f32", read->at("b.f32"));
  ASSERT_OK(f32);
  EXPECT_EQ(*f32, randomFloats(15, 1));
  StatusOr<std::vector<double>> f64 = toFloat64("e.f64", read->at("e.f64"));
  ASSERT_OK(f64);
  EXPECT_EQ(*f64, (std::vector<double>{1.0 / 3, -2e300}));
  StatusOr<std::vector<float>> bf16 = toFloat32("a.bf16", read->at("a.bf16"));
  ASSERT_OK(bf16);
  std::vector<float> original = randomFloats(28, 2);
  for (size_t i = 0; i < original.size(); ++i)
    EXPECT_NEAR((*bf16)[i], original[i], std::fabs(original[i]) * 0x1p-8f);
  StatusOr<std::vector<float>> scalar =
      toFloat32("g.scalar", read->at("g.scalar"));
  ASSERT_OK(scalar);
  EXPECT_EQ(*scalar, std::vector<float>{42.0f});
}

// The layout HF transformers and the `safetensors` package expect: a padded
// JSON header with "__metadata__": {"format": "pt"} and, in name order,
// contiguous byte ranges that fill the data section exactly (the Rust
// loader rejects holes).
TEST_F(SafeTensorsTest, WritesTheLayoutHFLoads) {
  TensorMap tensors = sampleTensors();
  std::string file = path("t.safetensors");
  ASSERT_OK(writeSafeTensors(file, tensors));
  std::string bytes = readBytes(file);

  uint64_t headerSize;
  std::memcpy(&headerSize, bytes.data(), 8);
  EXPECT_EQ(headerSize % 8, 0u);
  ASSERT_LE(8 + headerSize, bytes.size());
  std::string headerText = bytes.substr(8, headerSize);
  EXPECT_EQ(headerText.front(), '{');
  size_t lastBrace = headerText.find_last_of('}');
  EXPECT_EQ(headerText.find_first_not_of(' ', lastBrace + 1), std::string::npos)
      << "the padding must be spaces";
  EXPECT_LT(headerText.size() - lastBrace - 1, 8u);

  json header = json::parse(headerText);
  EXPECT_EQ(header["__metadata__"], json({{"format", "pt"}}));
  uint64_t offset = 0;
  for (const auto &[name, tensor] : tensors) { // std::map: name order
    SCOPED_TRACE(name);
    const json &entry = header.at(name);
    EXPECT_EQ(entry.at("dtype"), dtypeName(tensor.dtype));
    EXPECT_EQ(entry.at("shape").get<std::vector<int64_t>>(), tensor.shape);
    EXPECT_EQ(entry.at("data_offsets"),
              json({offset, offset + tensor.bytes.size()}));
    EXPECT_EQ(bytes.substr(8 + headerSize + offset, tensor.bytes.size()),
              std::string(tensor.bytes.begin(), tensor.bytes.end()));
    offset += tensor.bytes.size();
  }
  EXPECT_EQ(8 + headerSize + offset, bytes.size());
  EXPECT_EQ(header.size(), tensors.size() + 1);
}

TEST_F(SafeTensorsTest, OverwritesAnExistingFileAndLeavesNoTemporaries) {
  std::string file = path("t.safetensors");
  writeBytes(file, "old contents");
  TensorMap tensors = sampleTensors();
  ASSERT_OK(writeSafeTensors(file, tensors));
  StatusOr<TensorMap> read = readSafeTensors(file);
  ASSERT_OK(read);
  EXPECT_EQ(read->size(), 3u);
  EXPECT_EQ(listDir(dir_.string()), std::vector<std::string>{"t.safetensors"});
}

TEST_F(SafeTensorsTest, FailedWriteLeavesTheFileAlone) {
  std::string file = path("t.safetensors");
  writeBytes(file, "old contents");
  TensorMap tensors = sampleTensors();
  tensors["c.i64"].bytes.pop_back();
  std::string error = errorOf(writeSafeTensors(file, tensors));
  EXPECT_THAT(error, HasSubstr("c.i64"));
  EXPECT_THAT(error, HasSubstr("47 bytes"));
  EXPECT_EQ(readBytes(file), "old contents");
  EXPECT_EQ(listDir(dir_.string()), std::vector<std::string>{"t.safetensors"});
}

//===----------------------------------------------------------------------===//
// Float conversions
//===----------------------------------------------------------------------===//

TEST(SafeTensorsConversionTest, HalfAndBFloatRoundToNearestEven) {
  auto roundTrip = [](DType dtype, float value) {
    Tensor t = Tensor::fromFloats(dtype, {1}, {value});
    return (*toFloat32("x", t))[0];
  };
  auto bits16 = [](DType dtype, float value) {
    Tensor t = Tensor::fromFloats(dtype, {1}, {value});
    uint16_t b;
    std::memcpy(&b, t.bytes.data(), 2);
    return b;
  };
  // bf16 keeps 7 mantissa bits: 1 + 2^-8 is a tie that rounds to even (1),
  // 1 + 3 * 2^-8 a tie that rounds up to the even 1 + 2^-6.
  EXPECT_EQ(bits16(DType::BF16, 1.0f), 0x3F80);
  EXPECT_EQ(roundTrip(DType::BF16, 1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(roundTrip(DType::BF16, 1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(roundTrip(DType::BF16, -2.5f), -2.5f);
  EXPECT_TRUE(std::isnan(roundTrip(DType::BF16, NAN)));
  EXPECT_EQ(roundTrip(DType::BF16, INFINITY), INFINITY);

  EXPECT_EQ(bits16(DType::F16, 1.0f), 0x3C00);
  EXPECT_EQ(bits16(DType::F16, -2.0f), 0xC000);
  EXPECT_EQ(bits16(DType::F16, 65504.0f), 0x7BFF);
  EXPECT_EQ(bits16(DType::F16, 0x1p-24f), 0x0001); // smallest subnormal
  EXPECT_EQ(bits16(DType::F16, 1e6f), 0x7C00);     // overflows to infinity
  EXPECT_EQ(roundTrip(DType::F16, 0x1p-24f), 0x1p-24f);
  EXPECT_EQ(roundTrip(DType::F16, 1.0f + 0x1p-11f), 1.0f); // tie to even
  EXPECT_EQ(roundTrip(DType::F16, 0.1f), 0.0999755859375f);
  EXPECT_TRUE(std::isnan(roundTrip(DType::F16, NAN)));
}

TEST(SafeTensorsConversionTest, IntegerTensorsAreNotFloats) {
  int32_t values[2] = {1, 2};
  Tensor t = Tensor::fromRaw(DType::I32, {2}, values);
  std::string error = errorOf(toFloat32("model.ids", t));
  EXPECT_THAT(error, HasSubstr("model.ids"));
  EXPECT_THAT(error, HasSubstr("I32"));
  EXPECT_FALSE(toFloat64("model.ids", t).isOk());
}

TEST(SafeTensorsConversionTest, DTypeNames) {
  for (const char *name : {"BOOL", "U8", "I8", "U16", "I16", "F16", "BF16",
                           "U32", "I32", "F32", "U64", "I64", "F64"}) {
    StatusOr<DType> dtype = parseDType(name);
    ASSERT_OK(dtype);
    EXPECT_STREQ(dtypeName(*dtype), name);
  }
  EXPECT_EQ(dtypeSize(DType::BF16), 2u);
  EXPECT_EQ(dtypeSize(DType::I64), 8u);
  EXPECT_THAT(errorOf(parseDType("F8_E4M3")), HasSubstr("F8_E4M3"));
}

//===----------------------------------------------------------------------===//
// The reference fixture
//===----------------------------------------------------------------------===//

TEST(SafeTensorsFixtureTest, ReadsTheReferenceWeights) {
  if (!std::filesystem::is_directory(kFixtureDir))
    GTEST_SKIP() << kFixtureDir << " is absent";
  StatusOr<TensorMap> tensors =
      readSafeTensors(kFixtureDir + "/model.safetensors");
  ASSERT_OK(tensors);
  EXPECT_EQ(tensors->size(), 21u);
  EXPECT_EQ(tensors->at("model.layers.0.self_attn.k_proj.weight").shape,
            (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(tensors->at("model.embed_tokens.weight").shape,
            (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(tensors->at("model.layers.1.mlp.down_proj.weight").shape,
            (std::vector<int64_t>{64, 176}));
  EXPECT_EQ(tensors->at("model.norm.weight").shape, (std::vector<int64_t>{64}));
  for (const auto &[name, tensor] : *tensors)
    EXPECT_EQ(tensor.dtype, DType::F32) << name;
  ASSERT_OK(checkTensors(*tensors, fixtureTensors()));

  // Values read independently (Python's struct/array on the raw file) say
  // that the bytes were taken from the right offsets.
  StatusOr<std::vector<float>> norm =
      toFloat32("model.norm.weight", tensors->at("model.norm.weight"));
  ASSERT_OK(norm);
  EXPECT_EQ((*norm)[0], 0.8910925984382629f);
  EXPECT_EQ((*norm)[1], 0.8433552980422974f);
  EXPECT_EQ((*norm)[2], 0.9662467837333679f);
  StatusOr<std::vector<double>> q =
      toFloat64("q", tensors->at("model.layers.0.self_attn.q_proj.weight"));
  ASSERT_OK(q);
  EXPECT_EQ((*q)[0], double(-0.02021804451942444f));
  EXPECT_EQ((*q)[2], double(0.021509621292352676f));
  EXPECT_EQ(q->size(), 64u * 64u);

  // The directory form finds model.safetensors next to config.json.
  StatusOr<TensorMap> fromDir = readCheckpoint(kFixtureDir);
  ASSERT_OK(fromDir);
  EXPECT_EQ(fromDir->size(), 21u);
  EXPECT_EQ(fromDir->at("lm_head.weight").bytes,
            tensors->at("lm_head.weight").bytes);
}

TEST_F(SafeTensorsTest, RewritesTheReferenceWeightsLosslessly) {
  if (!std::filesystem::is_directory(kFixtureDir))
    GTEST_SKIP() << kFixtureDir << " is absent";
  StatusOr<TensorMap> tensors =
      readSafeTensors(kFixtureDir + "/model.safetensors");
  ASSERT_OK(tensors);
  std::string config = readBytes(kFixtureDir + "/config.json");
  std::string out = path("ckpt");
  ASSERT_OK(writeCheckpointDir(out, config, *tensors));
  EXPECT_EQ(readBytes(out + "/config.json"), config);
  StatusOr<TensorMap> back = readCheckpoint(out);
  ASSERT_OK(back);
  ASSERT_EQ(back->size(), tensors->size());
  for (const auto &[name, tensor] : *tensors) {
    EXPECT_EQ(back->at(name).shape, tensor.shape) << name;
    EXPECT_EQ(back->at(name).bytes, tensor.bytes) << name;
  }
  // Same tensors in the same (name) order as HF wrote them: the data section
  // is byte-identical to the fixture's.
  std::string ours = readBytes(out + "/model.safetensors");
  std::string theirs = readBytes(kFixtureDir + "/model.safetensors");
  uint64_t ourHeader, theirHeader;
  std::memcpy(&ourHeader, ours.data(), 8);
  std::memcpy(&theirHeader, theirs.data(), 8);
  EXPECT_EQ(ours.substr(8 + ourHeader), theirs.substr(8 + theirHeader));
}

//===----------------------------------------------------------------------===//
// Sharded checkpoints
//===----------------------------------------------------------------------===//

class ShardedCheckpointTest : public ScratchDirTest {
protected:
  /// Writes shards "model-00001-of-00002.safetensors" (a.bf16, b.f32) and
  /// "model-00002-of-00002.safetensors" (c.i64), and the index.
  void SetUp() override {
    ScratchDirTest::SetUp();
    TensorMap all = sampleTensors();
    TensorMap first, second;
    first["a.bf16"] = all["a.bf16"];
    first["b.f32"] = all["b.f32"];
    second["c.i64"] = all["c.i64"];
    ASSERT_OK(
        writeSafeTensors(path("model-00001-of-00002.safetensors"), first));
    ASSERT_OK(
        writeSafeTensors(path("model-00002-of-00002.safetensors"), second));
    index_ = {{"metadata", {{"total_size", 200}}},
              {"weight_map",
               {{"a.bf16", "model-00001-of-00002.safetensors"},
                {"b.f32", "model-00001-of-00002.safetensors"},
                {"c.i64", "model-00002-of-00002.safetensors"}}}};
    writeIndex();
  }
  void writeIndex() {
    writeBytes(path("model.safetensors.index.json"), index_.dump(2));
  }
  json index_;
};

TEST_F(ShardedCheckpointTest, ReadsEveryShard) {
  StatusOr<TensorMap> tensors = readCheckpoint(dir_.string());
  ASSERT_OK(tensors);
  TensorMap expected = sampleTensors();
  ASSERT_EQ(tensors->size(), expected.size());
  for (const auto &[name, tensor] : expected)
    EXPECT_EQ(tensors->at(name).bytes, tensor.bytes) << name;
}

TEST_F(ShardedCheckpointTest, MissingShardFile) {
  std::filesystem::remove(path("model-00002-of-00002.safetensors"));
  std::string error = errorOf(readCheckpoint(dir_.string()));
  EXPECT_THAT(error, HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(error, HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(error, HasSubstr("c.i64"));
}

TEST_F(ShardedCheckpointTest, TensorNotWhereTheIndexSays) {
  index_["weight_map"]["c.i64"] = "model-00001-of-00002.safetensors";
  writeIndex();
  std::string error = errorOf(readCheckpoint(dir_.string()));
  EXPECT_THAT(error, HasSubstr("'c.i64' is not in "
                               "'model-00001-of-00002.safetensors'"));
}

TEST_F(ShardedCheckpointTest, BadIndex) {
  writeBytes(path("model.safetensors.index.json"), "{\"weight_map\": [1, 2]}");
  EXPECT_THAT(errorOf(readCheckpoint(dir_.string())),
              HasSubstr("no 'weight_map' object"));
  writeBytes(path("model.safetensors.index.json"), "{\"weight_map\": ");
  EXPECT_THAT(errorOf(readCheckpoint(dir_.string())),
              HasSubstr("not valid JSON"));
}

TEST_F(ShardedCheckpointTest, ShardErrorsNameTheShard) {
  writeBytes(path("model-00002-of-00002.safetensors"), "tiny");
  std::string error = errorOf(readCheckpoint(dir_.string()));
  EXPECT_THAT(error, HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(error, HasSubstr("too short"));
}

TEST_F(SafeTensorsTest, CheckpointPathForms) {
  TensorMap tensors = sampleTensors();
  // A single file, given directly.
  ASSERT_OK(writeSafeTensors(path("weights.safetensors"), tensors));
  StatusOr<TensorMap> single = readCheckpoint(path("weights.safetensors"));
  ASSERT_OK(single);
  EXPECT_EQ(single->size(), 3u);
  // A directory with neither form.
  std::filesystem::create_directory(path("empty"));
  EXPECT_THAT(errorOf(readCheckpoint(path("empty"))),
              HasSubstr("neither model.safetensors nor "
                        "model.safetensors.index.json"));
  // A path that does not exist.
  EXPECT_THAT(errorOf(readCheckpoint(path("nowhere"))),
              HasSubstr("nowhere: does not exist"));
}

// Tests that an index's shard that is not a file says what it is rather
// than that it does not exist.
TEST_F(SafeTensorsTest, ShardsThatAreNotFilesSayWhatTheyAre) {
  std::filesystem::create_directory(path("sharded"));
  std::ofstream(path("sharded/model.safetensors.index.json"))
      << R"({"weight_map": {"a": "dir.safetensors", "b": "loop.safetensors"}})";
  std::filesystem::create_directory(path("sharded/dir.safetensors"));
  EXPECT_THAT(errorOf(readCheckpoint(path("sharded"))),
              HasSubstr("shard file 'dir.safetensors' (listed for tensor "
                        "'a'): " + path("sharded/dir.safetensors") +
                        ": is a directory, not a file"));
  std::filesystem::remove(path("sharded/dir.safetensors"));
  std::filesystem::create_symlink("loop.safetensors",
                                  path("sharded/loop.safetensors"));
  std::ofstream(path("sharded/model.safetensors.index.json"))
      << R"({"weight_map": {"b": "loop.safetensors"}})";
  EXPECT_THAT(errorOf(readCheckpoint(path("sharded"))),
              HasSubstr(": is a symbolic link loop"));
}

//===----------------------------------------------------------------------===//
// Validation errors
//===----------------------------------------------------------------------===//

/// Writes a file with the given header and data and returns the reader's
/// error, checking that it names the file.
class SafeTensorsErrorTest : public ScratchDirTest {
protected:
  std::string errorFor(const std::string &bytes) {
    std::string file = path("bad.safetensors");
    writeBytes(file, bytes);
    std::string error = errorOf(readSafeTensors(file));
    EXPECT_THAT(error, HasSubstr(file));
    return error;
  }
  std::string errorForHeader(const std::string &header,
                             const std::string &data = std::string(16, '\0')) {
    return errorFor(makeFile(header, data));
  }
};

TEST_F(SafeTensorsErrorTest, MissingFile) {
  EXPECT_THAT(errorOf(readSafeTensors(path("none.safetensors"))),
              HasSubstr("cannot open"));
}

TEST_F(SafeTensorsErrorTest, TooShortForTheLength) {
  EXPECT_THAT(errorFor("abc"), HasSubstr("too short"));
}

TEST_F(SafeTensorsErrorTest, HeaderLengthPastTheEnd) {
  std::string bytes = makeFile("{}", "");
  uint64_t corrupted = 1000;
  std::memcpy(bytes.data(), &corrupted, 8);
  EXPECT_THAT(errorFor(bytes), HasSubstr("header length 1000 exceeds"));
  // A length whose 8 + length wraps around 64 bits.
  corrupted = std::numeric_limits<uint64_t>::max() - 3;
  std::memcpy(bytes.data(), &corrupted, 8);
  EXPECT_THAT(errorFor(bytes), HasSubstr("exceeds"));
}

// Tests that a header claimed to be gigabytes long (a sparse file can back
// the claim without the disk space) is refused before it is allocated.
TEST_F(SafeTensorsErrorTest, HeaderLengthBeyondTheLimit) {
  std::string file = path("sparse.safetensors");
  const uint64_t claimed = kMaxSafeTensorsHeaderBytes + 1;
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &claimed, 8);
  writeBytes(file, bytes);
  ASSERT_EQ(::truncate(file.c_str(), off_t(claimed + 16)), 0);
  EXPECT_EQ(errorOf(readSafeTensors(file)),
            file + ": header length 100000001 is beyond the 100000000 bytes "
                   "of header this reader accepts");
}

// Tests that the reader of bytes in memory reads what the file reader
// reads, and fails as it does, naming its source.
TEST_F(SafeTensorsTest, ParsesBytesInMemory) {
  TensorMap tensors = sampleTensors();
  std::string file = path("t.safetensors");
  ASSERT_OK(writeSafeTensors(file, tensors, {{"step", "3"}}));
  const std::string bytes = readBytes(file);
  std::map<std::string, std::string> metadata;
  StatusOr<TensorMap> parsed = parseSafeTensors(bytes, "memory", &metadata);
  ASSERT_OK(parsed);
  EXPECT_EQ(metadata.at("step"), "3");
  StatusOr<TensorMap> read = readSafeTensors(file);
  ASSERT_OK(read);
  ASSERT_EQ(parsed->size(), read->size());
  for (const auto &[name, tensor] : *read) {
    SCOPED_TRACE(name);
    const Tensor &other = parsed->at(name);
    EXPECT_EQ(other.dtype, tensor.dtype);
    EXPECT_EQ(other.shape, tensor.shape);
    EXPECT_EQ(other.bytes, tensor.bytes);
  }
  // A truncated file: the same message after the source's name.
  const std::string cut = bytes.substr(0, bytes.size() - 1);
  writeBytes(file, cut);
  const std::string fromFile = errorOf(readSafeTensors(file));
  ASSERT_THAT(fromFile, ::testing::StartsWith(file + ": tensor '"));
  EXPECT_EQ(errorOf(parseSafeTensors(cut, "memory")),
            "memory" + fromFile.substr(file.size()));
  EXPECT_THAT(errorOf(parseSafeTensors("abc", "memory")),
              ::testing::StartsWith("memory: file has 3 bytes, too short"));
}

TEST_F(SafeTensorsErrorTest, BadJson) {
  EXPECT_THAT(errorForHeader("{\"w\": {\"dtype\": \"F32\","),
              HasSubstr("header is not valid JSON"));
  EXPECT_THAT(errorForHeader("[1, 2]"), HasSubstr("not a JSON object"));
}

TEST_F(SafeTensorsErrorTest, UnknownDType) {
  std::string error = errorForHeader(
      R"({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 2]}})");
  EXPECT_THAT(error, HasSubstr("tensor 'w'"));
  EXPECT_THAT(error, HasSubstr("unknown dtype 'Q4'"));
}

TEST_F(SafeTensorsErrorTest, MalformedEntries) {
  EXPECT_THAT(
      errorForHeader(R"({"w": {"shape": [2], "data_offsets": [0, 8]}})"),
      HasSubstr("tensor 'w': missing or non-string 'dtype'"));
  EXPECT_THAT(
      errorForHeader(
          R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})"),
      HasSubstr("tensor 'w': 'shape' [-2]"));
  EXPECT_THAT(errorForHeader(R"({"w": {"dtype": "F32", "shape": [2]}})"),
              HasSubstr("tensor 'w': 'data_offsets' must be"));
  EXPECT_THAT(
      errorForHeader(
          R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})"),
      HasSubstr("end before they begin"));
  EXPECT_THAT(errorForHeader(R"({"w": 3})"),
              HasSubstr("tensor 'w': header entry is not a JSON object"));
  EXPECT_THAT(errorForHeader(R"({"__metadata__": {"format": 1}})"),
              HasSubstr("'__metadata__' value of 'format' is not a string"));
}

TEST_F(SafeTensorsErrorTest, OffsetsPastTheEnd) {
  std::string error = errorForHeader(
      R"({"w": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}})");
  EXPECT_THAT(error, HasSubstr("tensor 'w'"));
  EXPECT_THAT(error, HasSubstr("past the end of the data section (16 bytes)"));
}

TEST_F(SafeTensorsErrorTest, SizeDoesNotMatchShape) {
  std::string error = errorForHeader(
      R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 8]}})");
  EXPECT_THAT(error, HasSubstr("tensor 'w'"));
  EXPECT_THAT(error, HasSubstr("span 8 bytes, but shape [2, 3] of BF16 needs "
                               "12"));
  // A shape whose byte count overflows 64 bits must not wrap to a match.
  EXPECT_THAT(errorForHeader(R"({"w": {"dtype": "F32", "shape": [4294967296, )"
                             R"(4294967296], "data_offsets": [0, 0]}})"),
              HasSubstr("more than 2^64"));
}

TEST_F(SafeTensorsErrorTest, OverlappingTensors) {
  std::string error = errorForHeader(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
      R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})");
  EXPECT_THAT(error, HasSubstr("'a'"));
  EXPECT_THAT(error, HasSubstr("'b'"));
  EXPECT_THAT(error, HasSubstr("overlap"));
}

TEST_F(SafeTensorsErrorTest, AcceptsPaddingAndEmptyTensors) {
  std::string file = path("ok.safetensors");
  writeBytes(file,
             makeFile(R"({"a": {"dtype": "F32", "shape": [0], )"
                      R"("data_offsets": [4, 4]}, "b": {"dtype": "I32", )"
                      R"("shape": [2], "data_offsets": [0, 8]}, "c": )"
                      R"({"dtype": "F64", "shape": [4294967296, 4294967296, )"
                      R"(0], "data_offsets": [8, 8]}}   )",
                      std::string(8, '\x01')));
  StatusOr<TensorMap> read = readSafeTensors(file);
  ASSERT_OK(read);
  EXPECT_EQ(read->at("a").bytes.size(), 0u);
  EXPECT_EQ(read->at("b").bytes, std::vector<uint8_t>(8, 1));
  EXPECT_EQ(read->at("c").numElements(), 0);
}

//===----------------------------------------------------------------------===//
// Expected tensors
//===----------------------------------------------------------------------===//

TEST(CheckTensorsTest, ReportsMissingExtraAndMisshapen) {
  TensorMap tensors;
  tensors["a"] = Tensor::fromFloats(DType::F32, {2, 3}, std::vector<float>(6));
  tensors["b"] = Tensor::fromFloats(DType::F32, {4}, std::vector<float>(4));
  ASSERT_OK(checkTensors(tensors, {{"a", {2, 3}}, {"b", {4}}}));

  EXPECT_EQ(errorOf(checkTensors(
                tensors, {{"a", {2, 3}}, {"b", {4}}, {"c", {1}}, {"d", {1}}})),
            "missing tensor 'c' (and 1 more)");
  EXPECT_EQ(errorOf(checkTensors(tensors, {{"a", {2, 3}}})),
            "unexpected tensor 'b'");
  EXPECT_EQ(errorOf(checkTensors(tensors, {{"a", {3, 2}}, {"b", {4}}})),
            "tensor 'a' has shape [2, 3], expected [3, 2]");
  EXPECT_EQ(errorOf(checkTensors(tensors, {{"a", {3, 2}}, {"c", {}}})),
            "missing tensor 'c'; unexpected tensor 'b'; tensor 'a' has shape "
            "[2, 3], expected [3, 2]");
}

//===----------------------------------------------------------------------===//
// Atomic checkpoint directories
//===----------------------------------------------------------------------===//

using CheckpointDirTest = ScratchDirTest;

const char *kConfig = "{\"model_type\": \"llama\"}\n";

TEST_F(CheckpointDirTest, WritesConfigAndWeights) {
  std::string out = path("ckpt");
  ASSERT_OK(writeCheckpointDir(out + "/", kConfig, sampleTensors()));
  EXPECT_EQ(listDir(out),
            (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(readBytes(out + "/config.json"), kConfig);
  StatusOr<TensorMap> back = readCheckpoint(out);
  ASSERT_OK(back);
  EXPECT_EQ(back->size(), 3u);
  EXPECT_EQ(listDir(dir_.string()), std::vector<std::string>{"ckpt"});
}

// Tests that the config states the tensors' dtype where it states one
// (transformers 4's torch_dtype, 5's dtype): a bf16 export is not called
// float32; a config that states none, or the right one, is kept as it is.
TEST_F(CheckpointDirTest, ConfigStatesTheTensorsDtype) {
  TensorMap bf16;
  bf16["w"] = Tensor::fromFloats(DType::BF16, {4, 7}, randomFloats(28, 2));
  bf16["v"] = Tensor::fromFloats(DType::BF16, {3}, randomFloats(3, 5));
  const std::string out = path("bf16");
  ASSERT_OK(writeCheckpointDir(
      out, R"({"model_type": "llama", "torch_dtype": "float32", "dtype": "float32"})",
      bf16));
  EXPECT_EQ(readBytes(out + "/config.json"),
            "{\n  \"model_type\": \"llama\",\n  \"torch_dtype\": "
            "\"bfloat16\",\n  \"dtype\": \"bfloat16\"\n}\n");
  const std::string right = R"({"torch_dtype": "bfloat16"})";
  ASSERT_OK(writeCheckpointDir(path("right"), right, bf16));
  EXPECT_EQ(readBytes(path("right") + "/config.json"), right);
  // Tensors of several dtypes: no one dtype to state, the text kept.
  const std::string mixed = R"({"torch_dtype": "float32"})";
  ASSERT_OK(writeCheckpointDir(path("mixed"), mixed, sampleTensors()));
  EXPECT_EQ(readBytes(path("mixed") + "/config.json"), mixed);
}

TEST_F(CheckpointDirTest, ReplacesAnExistingCheckpoint) {
  std::string out = path("ckpt");
  std::filesystem::create_directory(out);
  writeBytes(out + "/model.safetensors", "an earlier export's weights");
  TensorMap tensors = sampleTensors();
  ASSERT_OK(writeCheckpointDir(out, kConfig, tensors));
  EXPECT_EQ(listDir(out),
            (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(listDir(dir_.string()), std::vector<std::string>{"ckpt"});
  // And once more over a checkpoint of our own.
  tensors.erase("c.i64");
  ASSERT_OK(writeCheckpointDir(out, kConfig, tensors));
  StatusOr<TensorMap> back = readCheckpoint(out);
  ASSERT_OK(back);
  EXPECT_EQ(back->size(), 2u);
  EXPECT_EQ(listDir(dir_.string()), std::vector<std::string>{"ckpt"});
}

// Tests that a directory holding anything an export does not write (the
// user's files) is never replaced: refused, naming the file, and left as it
// is.
TEST_F(CheckpointDirTest, KeepsADirectoryOfTheUsers) {
  std::string out = path("ckpt");
  std::filesystem::create_directory(out);
  writeBytes(out + "/notes.txt", "mine");
  std::string error = errorOf(writeCheckpointDir(out, kConfig, sampleTensors()));
  EXPECT_THAT(error, HasSubstr("holds 'notes.txt'"));
  EXPECT_EQ(listDir(out), std::vector<std::string>{"notes.txt"});
  EXPECT_EQ(readBytes(out + "/notes.txt"), "mine");
  EXPECT_EQ(listDir(dir_.string()), std::vector<std::string>{"ckpt"});
}

TEST_F(CheckpointDirTest, FailedTensorWriteLeavesTargetUntouched) {
  std::string out = path("ckpt");
  std::filesystem::create_directory(out);
  writeBytes(out + "/model.safetensors", "previous weights");
  TensorMap tensors = sampleTensors();
  tensors["b.f32"].shape = {3, 6}; // the bytes no longer fit the shape
  std::string error = errorOf(writeCheckpointDir(out, kConfig, tensors));
  EXPECT_THAT(error, HasSubstr("b.f32"));
  EXPECT_EQ(listDir(out), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(readBytes(out + "/model.safetensors"), "previous weights");
  EXPECT_EQ(listDir(dir_.string()), std::vector<std::string>{"ckpt"})
      << "the temporary directory must be removed";

  // Without a previous checkpoint, nothing appears.
  std::string fresh = path("fresh");
  EXPECT_FALSE(writeCheckpointDir(fresh, kConfig, tensors).isOk());
  EXPECT_FALSE(std::filesystem::exists(fresh));
  EXPECT_EQ(listDir(dir_.string()), std::vector<std::string>{"ckpt"});
}

TEST_F(CheckpointDirTest, InvalidConfigIsRefused) {
  std::string out = path("ckpt");
  EXPECT_THAT(
      errorOf(writeCheckpointDir(out, "{\"model_type\": ", sampleTensors())),
      HasSubstr("config.json text is not valid JSON"));
  EXPECT_TRUE(listDir(dir_.string()).empty());
}

TEST_F(CheckpointDirTest, ParentThatIsAFile) {
  writeBytes(path("file"), "x");
  std::string error =
      errorOf(writeCheckpointDir(path("file/ckpt"), kConfig, sampleTensors()));
  EXPECT_THAT(error, HasSubstr("cannot create the temporary directory"));
  EXPECT_EQ(listDir(dir_.string()), std::vector<std::string>{"file"});
}

TEST_F(CheckpointDirTest, TargetThatIsAFile) {
  writeBytes(path("ckpt"), "not a directory");
  EXPECT_THAT(
      errorOf(writeCheckpointDir(path("ckpt"), kConfig, sampleTensors())),
      HasSubstr("exists and is not a directory"));
  EXPECT_EQ(readBytes(path("ckpt")), "not a directory");
  EXPECT_EQ(listDir(dir_.string()), std::vector<std::string>{"ckpt"});

  std::filesystem::create_directory(path("real"));
  std::filesystem::create_directory_symlink("real", path("link"));
  EXPECT_THAT(
      errorOf(writeCheckpointDir(path("link"), kConfig, sampleTensors())),
      HasSubstr("is a symbolic link"));
  EXPECT_TRUE(std::filesystem::is_symlink(path("link")));
  EXPECT_TRUE(listDir(path("real")).empty());
}

TEST_F(CheckpointDirTest, ParentNotWritable) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "root ignores directory permissions";
  std::string parent = path("locked");
  std::filesystem::create_directory(parent);
  std::filesystem::create_directory(parent + "/ckpt");
  writeBytes(parent + "/ckpt/model.safetensors", "previous weights");
  ::chmod(parent.c_str(), 0555);
  Status status =
      writeCheckpointDir(parent + "/ckpt", kConfig, sampleTensors());
  ::chmod(parent.c_str(), 0755);
  EXPECT_THAT(errorOf(status), HasSubstr("cannot create the temporary"));
  EXPECT_EQ(listDir(parent), std::vector<std::string>{"ckpt"});
  EXPECT_EQ(readBytes(parent + "/ckpt/model.safetensors"), "previous weights");
}

} // namespace
