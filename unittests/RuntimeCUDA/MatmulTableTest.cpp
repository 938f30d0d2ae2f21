//===- MatmulTableTest.cpp - tests of the tuned matmul algorithm table ----===//
//
// Part of mlt. The table file (kernels/matmul_table.h) saved and loaded,
// byte-stable, and every load error (no GPU needed); then on a GPU: a runner
// that tunes writes the table, a runner that loads it replays the same
// algorithms (the same bits, products checked against the CPU gemm), and a
// table whose algorithm does not run the shape is an error naming it.
//
//===----------------------------------------------------------------------===//

#include "kernels/matmul.h"
#include "kernels/matmul_table.h"
#include "CudaTestUtil.h"

#include "mlt/Runtime/cpu/Gemm.h"
#include "mlt/Runtime/cpu/VectorOps.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::test;

namespace {

/// A fresh path under the test's temporary folder, removed at the end.
class TempPath {
public:
  explicit TempPath(const std::string &name)
      : path_((std::filesystem::temp_directory_path() /
               ("mlt-matmul-table-" + std::to_string(::getpid()) + "-" +
                name))
                  .string()) {
    std::filesystem::remove(path_);
  }
  ~TempPath() { std::filesystem::remove(path_); }
  const std::string &str() const { return path_; }

private:
  std::string path_;
};

std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void writeText(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

TunedAlgorithm algorithm(uint64_t seed) {
  TunedAlgorithm a;
  for (size_t i = 0; i < a.data.size(); ++i)
    a.data[i] = seed * 0x9E3779B97F4A7C15ull + i;
  a.workspaceBytes = seed % 2 ? 0 : (uint64_t(32) << 20);
  a.config = "algo 66 tile " + std::to_string(seed);
  a.microseconds = 10.5 + double(seed);
  a.heuristicMicroseconds = 12.25 + double(seed);
  return a;
}

TEST(MatmulTableTest, SavesAndLoadsEveryField) {
  TempPath path("roundtrip.json");
  MatmulTable table("Some GPU", 130100);
  table.set("matmul [1 x 8 x 16 x 32]", algorithm(1));
  table.set("matmul [2 x 8 x 16 x 32]", algorithm(2));
  ASSERT_TRUE(table.save(path.str()));
  auto loaded = MatmulTable::load(path.str(), "Some GPU", 130100);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded->size(), 2u);
  for (uint64_t seed : {1, 2}) {
    const TunedAlgorithm expected = algorithm(seed);
    const TunedAlgorithm *got = loaded->find(
        "matmul [" + std::to_string(seed) + " x 8 x 16 x 32]");
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->data, expected.data);
    EXPECT_EQ(got->workspaceBytes, expected.workspaceBytes);
    EXPECT_EQ(got->config, expected.config);
    EXPECT_EQ(got->microseconds, expected.microseconds);
    EXPECT_EQ(got->heuristicMicroseconds, expected.heuristicMicroseconds);
  }
  EXPECT_EQ(loaded->find("matmul [3 x 8 x 16 x 32]"), nullptr);
  // Saved again: the same bytes (entries in key order).
  const std::string first = readText(path.str());
  ASSERT_TRUE(loaded->save(path.str()));
  EXPECT_EQ(readText(path.str()), first);
}

TEST(MatmulTableTest, LoadErrorsNameTheFileAndTheProblem) {
  TempPath path("bad.json");
  MatmulTable table("Some GPU", 130100);
  table.set("matmul [1 x 8 x 16 x 32]", algorithm(1));
  ASSERT_TRUE(table.save(path.str()));
  const std::string good = readText(path.str());
  auto expectError = [&](const std::string &text, const std::string &device,
                         const std::string &phrase) {
    SCOPED_TRACE(phrase);
    writeText(path.str(), text);
    auto loaded = MatmulTable::load(path.str(), device, 130100);
    ASSERT_FALSE(loaded.isOk());
    const std::string message = loaded.status().message();
    EXPECT_NE(message.find(path.str()), std::string::npos) << message;
    EXPECT_NE(message.find(phrase), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  };
  expectError("{\"format\": ", "Some GPU", "not a JSON object");
  expectError("[1, 2]", "Some GPU", "not a JSON object");
  expectError("{\"format\": \"other\", \"version\": 1}", "Some GPU",
              "not a matmul algorithm table");
  expectError(std::string(1000, '[') + std::string(1000, ']'), "Some GPU",
              "nested too deep");
  expectError(good, "Another GPU",
              "tuned on Some GPU with cuBLASLt 130100; this run has Another "
              "GPU");
  nlohmann::json root = nlohmann::json::parse(good);
  root["version"] = 2;
  expectError(root.dump(), "Some GPU", "table version 2");
  root = nlohmann::json::parse(good);
  root["entries"][0]["algorithm"][3] = "0xnothex";
  expectError(root.dump(), "Some GPU", "algorithm word 3");
  root = nlohmann::json::parse(good);
  root["entries"][0].erase("workspace_bytes");
  expectError(root.dump(), "Some GPU", "workspace_bytes");
  root = nlohmann::json::parse(good);
  root["entries"].push_back(root["entries"][0]);
  expectError(root.dump(), "Some GPU", "appears twice");
  std::filesystem::remove(path.str());
  auto missing = MatmulTable::load(path.str(), "Some GPU", 130100);
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("cannot read"), std::string::npos)
      << missing.status().message();
}

/// The step's kinds of product at small sizes: bf16 activations (NT
/// forward, NN input gradient) and an f32 weight gradient (TN) added into
/// its buffer.
struct Product {
  MatmulShape shape;
  rt::ElementType outType;
  bool accumulate;
};
const Product kProducts[] = {
    {{1, 256, 192, 128, false, true, false}, rt::ElementType::BF16, false},
    {{1, 256, 128, 192, false, false, false}, rt::ElementType::BF16, false},
    {{1, 192, 128, 256, true, false, false}, rt::ElementType::F32, true},
};

/// `v` rounded to bf16 (in place) and its bits.
std::vector<uint16_t> toBF16(std::vector<float> &v) {
  std::vector<uint16_t> bits(v.size());
  cpu::castFloatToBF16(bits.data(), v.data(), int64_t(v.size()));
  cpu::castBF16ToFloat(v.data(), bits.data(), int64_t(v.size()));
  return bits;
}

/// Runs kProducts with `runner` on fixed random operands; returns every
/// output's bytes, and checks each against the CPU gemm of the same bf16
/// inputs.
std::vector<std::vector<uint8_t>> runProducts(MatmulRunner &runner) {
  std::vector<std::vector<uint8_t>> outputs;
  std::mt19937 rng(41);
  for (const Product &p : kProducts) {
    const MatmulShape &s = p.shape;
    std::vector<float> a = randomVector<float>(rng, s.m * s.k);
    std::vector<float> b = randomVector<float>(rng, s.k * s.n);
    const std::vector<uint16_t> a16 = toBF16(a), b16 = toBF16(b);
    auto c0 = randomVector<float>(rng, s.m * s.n);
    std::vector<float> ref(s.m * s.n);
    EXPECT_TRUE(cpu::gemmStridedBatched<float>(
        s.transposeA, s.transposeB, s.m, s.n, s.k, 1.0f, a.data(),
        s.transposeA ? s.m : s.k, 0, b.data(), s.transposeB ? s.k : s.n, 0,
        0.0f, ref.data(), s.n, 0, 1));
    DeviceBuffer<uint16_t> da(a16.size()), db(b16.size());
    da.upload(a16);
    db.upload(b16);
    if (p.outType == rt::ElementType::F32) {
      DeviceBuffer<float> dc(c0.size());
      dc.upload(c0);
      EXPECT_TRUE(runner.run(s, da.get(), db.get(), dc.get(),
                             rt::ElementType::BF16, rt::ElementType::F32,
                             p.accumulate ? dc.get() : nullptr, nullptr));
      const std::vector<float> c = dc.download();
      for (size_t i = 0; i < ref.size(); ++i)
        ref[i] += p.accumulate ? c0[i] : 0.0f;
      EXPECT_LT(relError(c, ref), 1e-5);
      outputs.emplace_back(reinterpret_cast<const uint8_t *>(c.data()),
                           reinterpret_cast<const uint8_t *>(c.data() +
                                                             c.size()));
    } else {
      DeviceBuffer<uint16_t> dc(c0.size());
      EXPECT_TRUE(runner.run(s, da.get(), db.get(), dc.get(),
                             rt::ElementType::BF16, nullptr));
      const std::vector<uint16_t> c = dc.download();
      std::vector<float> wide(c.size());
      cpu::castBF16ToFloat(wide.data(), c.data(), int64_t(c.size()));
      EXPECT_LT(relError(wide, ref), 1e-2);
      outputs.emplace_back(reinterpret_cast<const uint8_t *>(c.data()),
                           reinterpret_cast<const uint8_t *>(c.data() +
                                                             c.size()));
    }
  }
  return outputs;
}

TEST(MatmulTableTest, TunedTableIsReplayedBitForBit) {
  MLT_REQUIRE_CUDA();
  TempPath path("tuned.json");
  std::vector<std::vector<uint8_t>> tunedOutputs;
  {
    auto tuner = MatmulRunner::create({path.str(), /*tune=*/true});
    ASSERT_TRUE(tuner.isOk()) << tuner.status().message();
    tunedOutputs = runProducts(**tuner);
    EXPECT_EQ((*tuner)->tabledShapes(), std::size(kProducts));
    // A second run of the shapes times nothing and gives the same bits.
    EXPECT_EQ(runProducts(**tuner), tunedOutputs);
  }
  const nlohmann::json file = nlohmann::json::parse(readText(path.str()));
  ASSERT_EQ(file["entries"].size(), std::size(kProducts));
  for (const auto &entry : file["entries"]) {
    EXPECT_GT(entry["microseconds"].get<double>(), 0.0);
    EXPECT_GT(entry["heuristic_microseconds"].get<double>(), 0.0);
    // The fastest, so no slower than the heuristic's first timed alongside.
    EXPECT_LE(entry["microseconds"].get<double>(),
              entry["heuristic_microseconds"].get<double>());
  }
  auto replay = MatmulRunner::create({path.str(), /*tune=*/false});
  ASSERT_TRUE(replay.isOk()) << replay.status().message();
  EXPECT_EQ(runProducts(**replay), tunedOutputs);
  EXPECT_EQ((*replay)->tabledShapes(), std::size(kProducts));

  // A table entry whose algorithm cannot run its shape (all-one words).
  nlohmann::json broken = file;
  for (auto &word : broken["entries"][0]["algorithm"])
    word = "0xffffffffffffffff";
  writeText(path.str(), broken.dump());
  auto runner = MatmulRunner::create({path.str(), /*tune=*/false});
  ASSERT_TRUE(runner.isOk()) << runner.status().message();
  const std::string shape = broken["entries"][0]["shape"];
  DeviceBuffer<float> buffer(256 * 256);
  bool reported = false;
  for (const Product &p : kProducts) {
    rt::Status status =
        (*runner)->run(p.shape, buffer.get(), buffer.get(), buffer.get(),
                       rt::ElementType::BF16, p.outType,
                       p.accumulate ? buffer.get() : nullptr, nullptr);
    if (!status) {
      EXPECT_NE(status.message().find(shape), std::string::npos)
          << status.message();
      EXPECT_NE(status.message().find("--tune-matmuls"), std::string::npos)
          << status.message();
      reported = true;
    }
  }
  EXPECT_TRUE(reported) << "no product reported the broken entry " << shape;
}

TEST(MatmulTableTest, MissingTableIsAnErrorUnlessTuning) {
  MLT_REQUIRE_CUDA();
  TempPath path("missing.json");
  auto runner = MatmulRunner::create({path.str(), /*tune=*/false});
  ASSERT_FALSE(runner.isOk());
  EXPECT_NE(runner.status().message().find(path.str()), std::string::npos)
      << runner.status().message();
  auto tuner = MatmulRunner::create({"", /*tune=*/true});
  ASSERT_FALSE(tuner.isOk());
  EXPECT_NE(tuner.status().message().find("table file"), std::string::npos)
      << tuner.status().message();
}

} // namespace
