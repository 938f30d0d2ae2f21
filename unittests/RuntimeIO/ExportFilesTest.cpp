//===- ExportFilesTest.cpp - the files an HF export copies ----------------===//
//
// Part of mlt. Tests ExportFiles.h: generation_config.json from a config's
// ids; a record's JSON round trip and what it refuses (names an export does
// not write, relative paths, bad hashes); a dataset's record; the run's
// choice between the data's tokenizer and the model directory's; files
// read back against their hashes (the tokenizer all or none, one warning);
// and writeCheckpointDir writing them beside the weights and replacing an
// export that holds them.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/ExportFiles.h"
#include "mlt/Runtime/io/SafeTensors.h"
#include "mlt/Support/ContentHash.h"

#include "TestUtil.h"

#include <nlohmann/json.hpp>

#include <functional>

using namespace mlt;
using namespace mlt::rt;
using mlt::rt::testing::readBytes;
using mlt::rt::testing::ScratchDirTest;
using mlt::rt::testing::writeBytes;
using json = nlohmann::json;
using ::testing::HasSubstr;

namespace {

std::string hashOf(const std::string &bytes) {
  return formatContentHash(contentHash(bytes.data(), bytes.size()));
}

/// Names of `contents`' files, in order.
std::vector<std::string> namesOf(const ExportContents &contents) {
  std::vector<std::string> names;
  for (const auto &[name, bytes] : contents.files)
    names.push_back(name);
  return names;
}

//===----------------------------------------------------------------------===//
// generation_config.json
//===----------------------------------------------------------------------===//

// Tests that the ids are copied as the config states them (one id, a list),
// null and absent ones left out, and that a config without ids (or not a
// JSON object) gives none.
TEST(GenerationConfig, FromTheConfigsIds) {
  std::optional<std::string> text = generationConfigOf(
      R"({"vocab_size": 8, "eos_token_id": [2, 3], "bos_token_id": 1,
          "pad_token_id": null})");
  ASSERT_TRUE(text);
  EXPECT_EQ(*text, "{\n  \"_from_model_config\": true,\n  \"bos_token_id\": "
                   "1,\n  \"eos_token_id\": [\n    2,\n    3\n  ]\n}\n");
  EXPECT_FALSE(generationConfigOf(R"({"vocab_size": 8})"));
  EXPECT_FALSE(generationConfigOf(R"({"eos_token_id": "2"})"));
  EXPECT_FALSE(generationConfigOf("[1, 2]"));
  EXPECT_FALSE(generationConfigOf("not json"));
}

//===----------------------------------------------------------------------===//
// Records
//===----------------------------------------------------------------------===//

ExportRecord sampleRecord() {
  ExportRecord record;
  record.tokenizer = {{"tokenizer.json", "/models/m/tokenizer.json", 12,
                       "0123456789abcdef"},
                      {"tokenizer_config.json",
                       "/models/m/tokenizer_config.json", 3,
                       "fedcba9876543210"}};
  record.tokenizerOrigin = "/data/corpus.meta.json";
  record.generationConfig = RecordedFile{
      "generation_config.json", "/models/m/generation_config.json", 40,
      "00000000000000ff"};
  return record;
}

TEST(ExportRecord, RoundTrip) {
  const ExportRecord record = sampleRecord();
  StatusOr<ExportRecord> back = ExportRecord::fromJson(record.toJson());
  ASSERT_TRUE(back.isOk()) << back.status().message();
  ASSERT_EQ(back->tokenizer.size(), 2u);
  EXPECT_EQ(back->tokenizer[1].name, "tokenizer_config.json");
  EXPECT_EQ(back->tokenizer[1].path, "/models/m/tokenizer_config.json");
  EXPECT_EQ(back->tokenizer[1].bytes, 3u);
  EXPECT_EQ(back->tokenizer[1].xxh3, "fedcba9876543210");
  EXPECT_EQ(back->tokenizerOrigin, "/data/corpus.meta.json");
  ASSERT_TRUE(back->generationConfig);
  EXPECT_EQ(back->generationConfig->path, "/models/m/generation_config.json");
  EXPECT_TRUE(ExportRecord().empty());
  EXPECT_TRUE(ExportRecord::fromJson(ExportRecord().toJson())->empty());
}

// Tests that a record is refused where its files could not be copied as
// named: a name an export does not write (it would become a file of the
// export), a relative path, a hash that is not 16 hex digits, a tokenizer
// of configuration files alone.
TEST(ExportRecord, RefusesWhatCannotBeCopied) {
  auto refusal = [](const std::function<void(json &)> &edit) {
    json record = json::parse(sampleRecord().toJson());
    edit(record);
    StatusOr<ExportRecord> read = ExportRecord::fromJson(record.dump());
    EXPECT_FALSE(read.isOk()) << record.dump();
    return read.isOk() ? std::string() : read.status().message();
  };
  EXPECT_EQ(refusal([](json &r) {
              r["tokenizer"]["files"][0]["name"] = "../config.json";
            }),
            "the tokenizer: names '../config.json', not a file an HF export "
            "copies");
  EXPECT_EQ(refusal([](json &r) {
              r["generation_config"]["name"] = "tokenizer.json";
            }),
            "generation_config: names 'tokenizer.json', not a file an HF "
            "export copies");
  EXPECT_EQ(refusal([](json &r) {
              r["tokenizer"]["files"][1]["path"] = "tokenizer_config.json";
            }),
            "the tokenizer: the path of tokenizer_config.json is not "
            "absolute");
  EXPECT_EQ(refusal([](json &r) {
              r["tokenizer"]["files"][0]["xxh3"] = "0123";
            }),
            "the tokenizer: the hash of tokenizer.json is not 16 hex digits");
  EXPECT_EQ(refusal([](json &r) { r["tokenizer"]["files"].erase(0); }),
            "the tokenizer: names neither tokenizer.json nor "
            "tokenizer.model");
  EXPECT_EQ(refusal([](json &r) {
              r["tokenizer"]["files"][1]["name"] = "tokenizer.json";
            }),
            "the tokenizer: names tokenizer.json twice");
  EXPECT_EQ(refusal([](json &r) { r = json::array(); }),
            "not a JSON object");
}

//===----------------------------------------------------------------------===//
// Datasets, model directories, the run's choice
//===----------------------------------------------------------------------===//

class ExportFilesTest : public ScratchDirTest {
protected:
  /// A tokenizer directory `name` of a tokenizer.json and its config.
  std::string tokenizerDir(const std::string &name,
                           const std::string &vocabulary) {
    const std::string dir = path(name);
    std::filesystem::create_directories(dir);
    writeBytes(dir + "/tokenizer.json", "{\"vocab\": " + vocabulary + "}");
    writeBytes(dir + "/tokenizer_config.json", "{\"eos_token\": \"</s>\"}");
    return dir;
  }

  /// PREFIX.meta.json as mlt-tokenize writes it for the files of `dir`.
  void datasetRecord(const std::string &prefix, const std::string &dir) {
    json files = json::array();
    for (const char *name : {"tokenizer.json", "tokenizer_config.json"}) {
      const std::string bytes = readBytes(dir + "/" + name);
      files.push_back({{"name", name},
                       {"path", dir + "/" + name},
                       {"bytes", bytes.size()},
                       {"xxh3", hashOf(bytes)}});
    }
    writeBytes(prefix + ".meta.json",
               json{{"format", "mlt-tokenize"},
                    {"version", 1},
                    {"tokenizer", {{"files", files}}}}
                   .dump());
  }
};

TEST_F(ExportFilesTest, DatasetRecord) {
  EXPECT_FALSE(*readDatasetTokenizer(path("none")));
  const std::string dir = tokenizerDir("tok", "1");
  datasetRecord(path("corpus"), dir);
  StatusOr<std::optional<ExportRecord>> read =
      readDatasetTokenizer(path("corpus"));
  ASSERT_TRUE(read.isOk()) << read.status().message();
  ASSERT_TRUE(*read);
  EXPECT_EQ((*read)->tokenizer.size(), 2u);
  EXPECT_EQ((*read)->tokenizerOrigin, path("corpus") + ".meta.json");
  // Not mlt-tokenize's: named, with why.
  writeBytes(path("odd.meta.json"), R"({"format": "other", "version": 1})");
  StatusOr<std::optional<ExportRecord>> odd = readDatasetTokenizer(path("odd"));
  ASSERT_FALSE(odd.isOk());
  EXPECT_EQ(odd.status().message(),
            path("odd") + ".meta.json: not a record of mlt-tokenize (its "
                          "format is not mlt-tokenize version 1)");
}

// Tests the run's choice: the data's tokenizer first, the model directory's
// without one (with its generation_config.json either way); a model
// directory of another tokenizer than the data's, and datasets of two
// tokenizers, are said in a warning.
TEST_F(ExportFilesTest, ChoosesTheDatasTokenizer) {
  const std::string model = tokenizerDir("model", "1");
  writeBytes(model + "/generation_config.json", "{\"eos_token_id\": 2}");
  const std::string other = tokenizerDir("other", "2");
  datasetRecord(path("a"), model);
  datasetRecord(path("b"), other);
  datasetRecord(path("b2"), other);

  std::vector<std::string> warnings;
  ExportRecord record = chooseExportRecord({path("b"), path("b2"), path("x")},
                                           model, warnings);
  ASSERT_EQ(record.tokenizer.size(), 2u);
  EXPECT_EQ(record.tokenizer[0].path, other + "/tokenizer.json");
  EXPECT_EQ(record.tokenizerOrigin, path("b") + ".meta.json");
  ASSERT_TRUE(record.generationConfig);
  EXPECT_EQ(record.generationConfig->path, model + "/generation_config.json");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "the model directory " + model +
                " holds another tokenizer than the one the data was made "
                "with (" +
                path("b") + ".meta.json); exports carry the data's");

  // The data's and the model directory's one: no warning.
  warnings.clear();
  record = chooseExportRecord({path("a")}, model, warnings);
  EXPECT_EQ(record.tokenizerOrigin, path("a") + ".meta.json");
  EXPECT_TRUE(warnings.empty());

  // No record of the data: the model directory's.
  record = chooseExportRecord({path("x")}, model, warnings);
  EXPECT_EQ(record.tokenizerOrigin, "the model directory " + model);
  ASSERT_EQ(record.tokenizer.size(), 2u);
  EXPECT_EQ(record.tokenizer[0].xxh3,
            hashOf(readBytes(model + "/tokenizer.json")));
  EXPECT_TRUE(warnings.empty());

  // Two tokenizers in the data: none.
  record = chooseExportRecord({path("a"), path("b")}, model, warnings);
  EXPECT_TRUE(record.tokenizer.empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("were made by different tokenizers"));
}

// Tests that a model directory's configuration files alone are no
// tokenizer.
TEST_F(ExportFilesTest, ConfigurationAloneIsNoTokenizer) {
  const std::string model = tokenizerDir("model", "1");
  std::filesystem::remove(model + "/tokenizer.json");
  std::vector<std::string> warnings;
  EXPECT_TRUE(modelDirectoryFiles(model, warnings).empty());
  EXPECT_TRUE(warnings.empty());
}

//===----------------------------------------------------------------------===//
// Files read back
//===----------------------------------------------------------------------===//

// Tests that the files are read as recorded, and the config's ids make
// generation_config.json when none is recorded.
TEST_F(ExportFilesTest, LoadsTheRecordedBytes) {
  const std::string model = tokenizerDir("model", "1");
  std::vector<std::string> warnings;
  ExportRecord record = modelDirectoryFiles(model, warnings);
  ExportContents contents =
      loadExportFiles(record, R"({"eos_token_id": 2})");
  EXPECT_TRUE(contents.warnings.empty());
  EXPECT_EQ(namesOf(contents),
            (std::vector<std::string>{"tokenizer.json",
                                      "tokenizer_config.json",
                                      "generation_config.json"}));
  EXPECT_EQ(contents.files[0].second, readBytes(model + "/tokenizer.json"));
}

// Tests that a tokenizer file changed or gone since it was recorded leaves
// the whole tokenizer out, with one warning naming the file; a recorded
// generation_config.json changed gives way to the config's ids.
TEST_F(ExportFilesTest, LeavesOutWhatChanged) {
  const std::string model = tokenizerDir("model", "1");
  writeBytes(model + "/generation_config.json", "{\"eos_token_id\": 7}");
  std::vector<std::string> warnings;
  ExportRecord record = modelDirectoryFiles(model, warnings);
  writeBytes(model + "/tokenizer_config.json", "{\"eos_token\": \"<e>\"}");
  writeBytes(model + "/generation_config.json", "{\"eos_token_id\": 8}");
  ExportContents contents =
      loadExportFiles(record, R"({"eos_token_id": 2})");
  EXPECT_EQ(namesOf(contents),
            std::vector<std::string>{"generation_config.json"});
  EXPECT_THAT(contents.files[0].second, HasSubstr("\"eos_token_id\": 2"));
  ASSERT_EQ(contents.warnings.size(), 2u);
  EXPECT_THAT(contents.warnings[0],
              HasSubstr("the tokenizer recorded in the model directory " +
                        model + " is left out of the export: " + model +
                        "/tokenizer_config.json has changed since it was "
                        "recorded"));
  EXPECT_THAT(contents.warnings[1],
              HasSubstr("the recorded generation_config.json is left out"));

  std::filesystem::remove(model + "/tokenizer.json");
  contents = loadExportFiles(record, "{}");
  EXPECT_TRUE(contents.files.empty());
  EXPECT_THAT(contents.warnings[0],
              HasSubstr(model + "/tokenizer.json: does not exist"));
}

//===----------------------------------------------------------------------===//
// Written beside the weights
//===----------------------------------------------------------------------===//

TensorMap oneTensor() {
  TensorMap tensors;
  tensors["w"] = Tensor::fromFloats(DType::F32, {2}, {1.0f, 2.0f});
  return tensors;
}

// Tests that the files are written into the export, that an export holding
// them is replaced by the next, and that a name an export does not write
// is refused.
TEST_F(ExportFilesTest, WrittenBesideTheWeights) {
  const std::string out = path("export");
  const ExtraFiles files = {{"tokenizer.json", "{}"},
                            {"generation_config.json", "{\"a\": 1}"}};
  ASSERT_TRUE(writeCheckpointDir(out, "{}", oneTensor(), files).isOk());
  EXPECT_EQ(listDir(out), (std::vector<std::string>{
                              "config.json", "generation_config.json",
                              "model.safetensors", "tokenizer.json"}));
  EXPECT_EQ(readBytes(out + "/generation_config.json"), "{\"a\": 1}");
  Status again = writeCheckpointDir(out, "{}", oneTensor());
  ASSERT_TRUE(again.isOk()) << again.message();
  EXPECT_EQ(listDir(out), (std::vector<std::string>{"config.json",
                                                    "model.safetensors"}));
  Status refused =
      writeCheckpointDir(out, "{}", oneTensor(), {{"notes.txt", "x"}});
  ASSERT_FALSE(refused.isOk());
  EXPECT_EQ(refused.message(), out + ": 'notes.txt' is not a file written "
                                     "beside the weights");
  EXPECT_EQ(listDir(out), (std::vector<std::string>{"config.json",
                                                    "model.safetensors"}));
}

} // namespace
