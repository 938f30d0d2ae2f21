//===- MatmulTableTest.cpp - tests of the tuned matmul algorithm table ----===//
//
// Part of mlt. The table file (mlt/Runtime/io/MatmulTable.h): every field
// saved and loaded again, the same bytes when saved twice, and each load
// error naming the file and its problem on one line. Tuning and replaying
// with it on a GPU: unittests/RuntimeCUDA/MatmulTuningTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/MatmulTable.h"

#include "TestUtil.h"

#include <nlohmann/json.hpp>

using namespace mlt;
using namespace mlt::rt;
using mlt::rt::testing::readBytes;
using mlt::rt::testing::ScratchDirTest;
using mlt::rt::testing::writeBytes;

namespace {

using MatmulTableTest = ScratchDirTest;

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

TEST_F(MatmulTableTest, SavesAndLoadsEveryField) {
  const std::string file = path("table.json");
  MatmulTable table("Some GPU", 130100);
  table.set("matmul [1 x 8 x 16 x 32]", algorithm(1));
  table.set("matmul [2 x 8 x 16 x 32]", algorithm(2));
  ASSERT_TRUE(table.save(file));
  StatusOr<MatmulTable> loaded = MatmulTable::load(file, "Some GPU", 130100);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded->size(), 2u);
  EXPECT_EQ(loaded->device(), "Some GPU");
  EXPECT_EQ(loaded->libraryVersion(), 130100);
  for (uint64_t seed : {1, 2}) {
    const TunedAlgorithm expected = algorithm(seed);
    const TunedAlgorithm *got =
        loaded->find("matmul [" + std::to_string(seed) + " x 8 x 16 x 32]");
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->data, expected.data);
    EXPECT_EQ(got->workspaceBytes, expected.workspaceBytes);
    EXPECT_EQ(got->config, expected.config);
    EXPECT_EQ(got->microseconds, expected.microseconds);
    EXPECT_EQ(got->heuristicMicroseconds, expected.heuristicMicroseconds);
  }
  EXPECT_EQ(loaded->find("matmul [3 x 8 x 16 x 32]"), nullptr);
  // Saved again: the same bytes (entries in key order); no temporary left.
  const std::string first = readBytes(file);
  ASSERT_TRUE(loaded->save(file));
  EXPECT_EQ(readBytes(file), first);
  EXPECT_EQ(listDir(dir_.string()), std::vector<std::string>{"table.json"});
}

TEST_F(MatmulTableTest, LoadErrorsNameTheFileAndTheProblem) {
  const std::string file = path("bad.json");
  MatmulTable table("Some GPU", 130100);
  table.set("matmul [1 x 8 x 16 x 32]", algorithm(1));
  const std::string good = table.toJson();
  auto expectError = [&](const std::string &text, const std::string &device,
                         const std::string &phrase) {
    SCOPED_TRACE(phrase);
    writeBytes(file, text);
    StatusOr<MatmulTable> loaded = MatmulTable::load(file, device, 130100);
    ASSERT_FALSE(loaded.isOk());
    const std::string message = loaded.status().message();
    EXPECT_NE(message.find(file), std::string::npos) << message;
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
              "GPU with cuBLASLt 130100 (tune a table for it with "
              "--tune-matmuls)");
  nlohmann::json root = nlohmann::json::parse(good);
  root["version"] = 2;
  expectError(root.dump(), "Some GPU", "table version 2");
  root = nlohmann::json::parse(good);
  root.erase("entries");
  expectError(root.dump(), "Some GPU", "needs \"device\"");
  root = nlohmann::json::parse(good);
  root["entries"][0]["algorithm"][3] = "0xnothex";
  expectError(root.dump(), "Some GPU", "algorithm word 3");
  // A shape and a word with newlines (found by mlt-fuzz-matmul-table): the
  // message quotes them as "\n", one line.
  root = nlohmann::json::parse(good);
  root["entries"][0]["shape"] = "matmul\n[1 x 8]";
  root["entries"][0]["algorithm"][2] = "0x0\n1";
  expectError(root.dump(), "Some GPU",
              "shape 'matmul\\n[1 x 8]': algorithm word 2 ('0x0\\n1') is not "
              "a hexadecimal 64-bit word");
  root = nlohmann::json::parse(good);
  root["device"] = "Some\nGPU";
  expectError(root.dump(), "Some GPU", "tuned on Some\\nGPU with");
  root = nlohmann::json::parse(good);
  root["entries"][0]["algorithm"].erase(7);
  expectError(root.dump(), "Some GPU", "8 algorithm words");
  root = nlohmann::json::parse(good);
  root["entries"][0].erase("workspace_bytes");
  expectError(root.dump(), "Some GPU", "workspace_bytes");
  root = nlohmann::json::parse(good);
  root["entries"].push_back(root["entries"][0]);
  expectError(root.dump(), "Some GPU", "appears twice");
  // And a file that is not there.
  StatusOr<MatmulTable> missing =
      MatmulTable::load(path("none.json"), "Some GPU", 130100);
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("none.json: cannot read"),
            std::string::npos)
      << missing.status().message();
}

} // namespace
