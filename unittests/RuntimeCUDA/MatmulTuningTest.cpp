//===- MatmulTuningTest.cpp - tests of MatmulRunner's tuned table ---------===//
//
// Part of mlt. On a GPU: a runner that tunes writes the table
// (mlt/Runtime/io/MatmulTable.h, whose file format
// unittests/RuntimeIO/MatmulTableTest.cpp tests), a runner that loads it
// replays the same algorithms (the same bits, the products checked against
// the CPU gemm), a table whose algorithm does not run its shape is an error
// naming the shape, and a missing table is an error unless tuning.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"
#include "kernels/matmul.h"

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
               ("mlt-matmul-table-" + std::to_string(::getpid()) + "-" + name))
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
      outputs.emplace_back(
          reinterpret_cast<const uint8_t *>(c.data()),
          reinterpret_cast<const uint8_t *>(c.data() + c.size()));
    } else {
      DeviceBuffer<uint16_t> dc(c0.size());
      EXPECT_TRUE(runner.run(s, da.get(), db.get(), dc.get(),
                             rt::ElementType::BF16, nullptr));
      const std::vector<uint16_t> c = dc.download();
      std::vector<float> wide(c.size());
      cpu::castBF16ToFloat(wide.data(), c.data(), int64_t(c.size()));
      EXPECT_LT(relError(wide, ref), 1e-2);
      outputs.emplace_back(
          reinterpret_cast<const uint8_t *>(c.data()),
          reinterpret_cast<const uint8_t *>(c.data() + c.size()));
    }
  }
  return outputs;
}

TEST(CudaMatmulTuningTest, TunedTableIsReplayedBitForBit) {
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
    Status status =
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

TEST(CudaMatmulTuningTest, MissingTableIsAnErrorUnlessTuning) {
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
