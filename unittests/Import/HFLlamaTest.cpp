//===- HFLlamaTest.cpp - Tests of the HF LLaMA config importer ------------===//
//
// Part of mlt. Tests parseHFLlamaConfig (fields, defaults, both spellings of
// the rotary base, and an error naming the field for each bad input),
// LlamaConfig::numParameters against published model sizes, and
// buildLlamaModule (parameter names and shapes, tied embeddings, dtypes, the
// `mlt.model` attribute).
//
//===----------------------------------------------------------------------===//

#include "mlt/Import/HFLlama.h"
#include "mlt/Plan/ModelConfig.h"
#include "mlt/Target/PlanExport.h"

#include "mlt/Dialect/MLT/MLTOps.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <functional>
#include <map>
#include <vector>

using namespace mlir;
using namespace mlt;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// The config.json of a small GQA model, as transformers 4.x writes it.
llvm::json::Object tinyConfig() {
  return llvm::json::Object{
      {"architectures", llvm::json::Array{"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"vocab_size", 256},
      {"hidden_size", 64},
      {"intermediate_size", 176},
      {"num_hidden_layers", 2},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"max_position_embeddings", 64},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},
      {"rope_scaling", nullptr},
      {"tie_word_embeddings", false},
      {"torch_dtype", "float32"},
  };
}

std::string toJson(llvm::json::Object object) {
  return llvm::formatv("{0:2}", llvm::json::Value(std::move(object))).str();
}

constexpr llvm::StringLiteral kSource = "test/config.json";

/// Parses `object`, failing the test on an error.
LlamaConfig parseOk(llvm::json::Object object) {
  llvm::Expected<LlamaConfig> config =
      parseHFLlamaConfig(toJson(std::move(object)), kSource);
  if (!config) {
    ADD_FAILURE() << "unexpected error: " << llvm::toString(config.takeError());
    return {};
  }
  return *config;
}

/// The message of the error that parsing `json` gives ("" if it succeeds).
std::string parseError(llvm::StringRef json) {
  llvm::Expected<LlamaConfig> config = parseHFLlamaConfig(json, kSource);
  if (config)
    return "";
  return llvm::toString(config.takeError());
}

void expectSameConfig(const LlamaConfig &a, const LlamaConfig &b) {
  EXPECT_EQ(a.vocabSize, b.vocabSize);
  EXPECT_EQ(a.hiddenSize, b.hiddenSize);
  EXPECT_EQ(a.intermediateSize, b.intermediateSize);
  EXPECT_EQ(a.numLayers, b.numLayers);
  EXPECT_EQ(a.numHeads, b.numHeads);
  EXPECT_EQ(a.numKvHeads, b.numKvHeads);
  EXPECT_EQ(a.headDim, b.headDim);
  EXPECT_EQ(a.maxPositionEmbeddings, b.maxPositionEmbeddings);
  EXPECT_EQ(a.rmsNormEps, b.rmsNormEps);
  EXPECT_EQ(a.ropeTheta, b.ropeTheta);
  EXPECT_EQ(a.tieWordEmbeddings, b.tieWordEmbeddings);
  EXPECT_EQ(a.ropeScaling, b.ropeScaling);
  EXPECT_EQ(a.bosTokenId, b.bosTokenId);
  EXPECT_EQ(a.eosTokenId, b.eosTokenId);
  EXPECT_EQ(a.padTokenId, b.padTokenId);
}

/// Llama-3.1-8B's rope_scaling, as its config.json spells it.
llvm::json::Object llama3Scaling() {
  return llvm::json::Object{{"factor", 8.0},
                            {"high_freq_factor", 4.0},
                            {"low_freq_factor", 1.0},
                            {"original_max_position_embeddings", 8192},
                            {"rope_type", "llama3"}};
}

/// llama3Scaling() with `key` set to `value` (erased when null).
llvm::json::Object llama3With(const char *key, llvm::json::Value value) {
  llvm::json::Object scaling = llama3Scaling();
  if (value.kind() == llvm::json::Value::Null)
    scaling.erase(key);
  else
    scaling[key] = std::move(value);
  return scaling;
}

LlamaConfig makeConfig(int64_t hidden, int64_t layers, int64_t heads,
                       int64_t kvHeads, int64_t ffn, int64_t vocab,
                       bool tied = false) {
  LlamaConfig c;
  c.vocabSize = vocab;
  c.hiddenSize = hidden;
  c.intermediateSize = ffn;
  c.numLayers = layers;
  c.numHeads = heads;
  c.numKvHeads = kvHeads;
  c.headDim = hidden / heads;
  c.tieWordEmbeddings = tied;
  return c;
}

//===----------------------------------------------------------------------===//
// parseHFLlamaConfig: fields
//===----------------------------------------------------------------------===//

TEST(ParseHFLlamaConfig, ReadsEveryField) {
  llvm::json::Object object = tinyConfig();
  object["vocab_size"] = 1000;
  object["hidden_size"] = 96;
  object["intermediate_size"] = 260;
  object["num_hidden_layers"] = 3;
  object["num_attention_heads"] = 6;
  object["num_key_value_heads"] = 3;
  // Not hidden_size / num_attention_heads (16): read, not derived.
  object["head_dim"] = 32;
  object["max_position_embeddings"] = 4096;
  object["rms_norm_eps"] = 1e-6;
  object["rope_theta"] = 500000.0;
  object["tie_word_embeddings"] = true;
  LlamaConfig c = parseOk(std::move(object));
  EXPECT_EQ(c.vocabSize, 1000);
  EXPECT_EQ(c.hiddenSize, 96);
  EXPECT_EQ(c.intermediateSize, 260);
  EXPECT_EQ(c.numLayers, 3);
  EXPECT_EQ(c.numHeads, 6);
  EXPECT_EQ(c.numKvHeads, 3);
  EXPECT_EQ(c.headDim, 32);
  EXPECT_EQ(c.maxPositionEmbeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rmsNormEps, 1e-6);
  EXPECT_DOUBLE_EQ(c.ropeTheta, 500000.0);
  EXPECT_TRUE(c.tieWordEmbeddings);
}

TEST(ParseHFLlamaConfig, TopLevelRopeTheta) {
  llvm::json::Object object = tinyConfig();
  object["rope_theta"] = 500000.0;
  EXPECT_DOUBLE_EQ(parseOk(std::move(object)).ropeTheta, 500000.0);
}

TEST(ParseHFLlamaConfig, TransformersFiveRopeParameters) {
  // transformers 5 moves the rotary base into `rope_parameters`.
  llvm::json::Object object = tinyConfig();
  object.erase("rope_theta");
  object.erase("rope_scaling");
  object["rope_parameters"] =
      llvm::json::Object{{"rope_type", "default"}, {"rope_theta", 250000.0}};
  EXPECT_DOUBLE_EQ(parseOk(std::move(object)).ropeTheta, 250000.0);
}

TEST(ParseHFLlamaConfig, RopeParametersWithoutThetaKeepTopLevel) {
  llvm::json::Object object = tinyConfig();
  object["rope_theta"] = 500000.0;
  object["rope_parameters"] = llvm::json::Object{{"rope_type", "default"}};
  EXPECT_DOUBLE_EQ(parseOk(std::move(object)).ropeTheta, 500000.0);
}

TEST(ParseHFLlamaConfig, IntegralRopeTheta) {
  llvm::json::Object object = tinyConfig();
  object["rope_theta"] = 10000; // an integer in the JSON
  EXPECT_DOUBLE_EQ(parseOk(std::move(object)).ropeTheta, 10000.0);
}

TEST(ParseHFLlamaConfig, Defaults) {
  llvm::json::Object object{{"vocab_size", 256},
                            {"hidden_size", 64},
                            {"intermediate_size", 176},
                            {"num_hidden_layers", 2},
                            {"num_attention_heads", 4}};
  LlamaConfig c = parseOk(std::move(object));
  EXPECT_EQ(c.numKvHeads, 4) << "num_key_value_heads defaults to the heads";
  EXPECT_EQ(c.headDim, 16) << "head_dim defaults to hidden / heads";
  EXPECT_EQ(c.maxPositionEmbeddings, 2048);
  EXPECT_DOUBLE_EQ(c.rmsNormEps, 1e-6);
  EXPECT_DOUBLE_EQ(c.ropeTheta, 10000.0);
  EXPECT_FALSE(c.tieWordEmbeddings);
}

TEST(ParseHFLlamaConfig, NullMeansAbsent) {
  llvm::json::Object object = tinyConfig();
  object["num_key_value_heads"] = nullptr;
  object["head_dim"] = nullptr;
  object["rope_theta"] = nullptr;
  object["model_type"] = nullptr;
  LlamaConfig c = parseOk(std::move(object));
  EXPECT_EQ(c.numKvHeads, 4);
  EXPECT_EQ(c.headDim, 16);
  EXPECT_DOUBLE_EQ(c.ropeTheta, 10000.0);
}

TEST(ParseHFLlamaConfig, NullHeadDimStillNeedsDivisibleHeads) {
  llvm::json::Object object = tinyConfig();
  object["num_attention_heads"] = 6;
  object["num_key_value_heads"] = 6;
  object["head_dim"] = nullptr;
  std::string error = parseError(toJson(std::move(object)));
  EXPECT_NE(error.find("hidden_size (64) is not divisible by "
                       "num_attention_heads (6)"),
            std::string::npos)
      << error;
}

TEST(ParseHFLlamaConfig, ExplicitHeadDimNeedNotDivide) {
  // Some models set head_dim with hidden_size % num_attention_heads != 0.
  llvm::json::Object object = tinyConfig();
  object["num_attention_heads"] = 6;
  object["num_key_value_heads"] = 2;
  object["head_dim"] = 8;
  LlamaConfig c = parseOk(std::move(object));
  EXPECT_EQ(c.numHeads, 6);
  EXPECT_EQ(c.headDim, 8);
}

TEST(ParseHFLlamaConfig, AcceptsDefaultRopeAndNoBiases) {
  llvm::json::Object object = tinyConfig();
  object["rope_scaling"] = llvm::json::Object{{"rope_type", "default"}};
  object["attention_bias"] = false;
  object["mlp_bias"] = false;
  EXPECT_EQ(parseOk(std::move(object)).numLayers, 2);
}

TEST(ParseHFLlamaConfig, Llama3RopeScaling) {
  // transformers 4: rope_scaling beside a top-level rope_theta.
  llvm::json::Object object = tinyConfig();
  object["rope_theta"] = 500000.0;
  object["max_position_embeddings"] = 131072;
  object["rope_scaling"] = llama3Scaling();
  LlamaConfig c = parseOk(std::move(object));
  EXPECT_DOUBLE_EQ(c.ropeTheta, 500000.0);
  EXPECT_EQ(c.ropeScaling, rt::RopeScaling::llama3(8.0, 1.0, 4.0, 8192));

  // transformers 5: everything in rope_parameters; integers for the factors.
  object = tinyConfig();
  object.erase("rope_theta");
  object.erase("rope_scaling");
  llvm::json::Object parameters = llama3With("factor", 32);
  parameters["rope_theta"] = 500000.0;
  object["rope_parameters"] = std::move(parameters);
  c = parseOk(std::move(object));
  EXPECT_DOUBLE_EQ(c.ropeTheta, 500000.0);
  EXPECT_EQ(c.ropeScaling, rt::RopeScaling::llama3(32.0, 1.0, 4.0, 8192));

  // The legacy `type` key; both objects when they agree.
  object = tinyConfig();
  llvm::json::Object legacy = llama3Scaling();
  legacy.erase("rope_type");
  legacy["type"] = "llama3";
  object["rope_scaling"] = std::move(legacy);
  object["rope_parameters"] = llama3Scaling();
  EXPECT_EQ(parseOk(std::move(object)).ropeScaling,
            rt::RopeScaling::llama3(8.0, 1.0, 4.0, 8192));
}

TEST(ParseHFLlamaConfig, Llama3OriginalContextAsTransformersFiveReadsIt) {
  // Absent: max_position_embeddings (transformers 5's standardization).
  llvm::json::Object object = tinyConfig();
  object["max_position_embeddings"] = 4096;
  object["rope_scaling"] =
      llama3With("original_max_position_embeddings", nullptr);
  EXPECT_EQ(
      parseOk(std::move(object)).ropeScaling.originalMaxPositionEmbeddings,
      4096);
  // Absent, with a top-level one (as Phi-3 keeps it): that one.
  object = tinyConfig();
  object["original_max_position_embeddings"] = 2048;
  object["rope_scaling"] =
      llama3With("original_max_position_embeddings", nullptr);
  EXPECT_EQ(
      parseOk(std::move(object)).ropeScaling.originalMaxPositionEmbeddings,
      2048);
  // Both, equal: fine.
  object = tinyConfig();
  object["original_max_position_embeddings"] = 8192;
  object["rope_scaling"] = llama3Scaling();
  EXPECT_EQ(
      parseOk(std::move(object)).ropeScaling.originalMaxPositionEmbeddings,
      8192);
}

TEST(ParseHFLlamaConfig, DefaultRopeIsUnscaled) {
  llvm::json::Object object = tinyConfig();
  object["rope_parameters"] =
      llvm::json::Object{{"rope_type", "default"}, {"rope_theta", 1e4}};
  EXPECT_FALSE(parseOk(std::move(object)).ropeScaling.isScaled());
}

TEST(ParseHFLlamaConfig, SharedFixture) {
  llvm::SmallString<256> path(MLT_SOURCE_DIR);
  llvm::sys::path::append(path, "..", "shared", "fixtures", "llama-ref-a");
  if (!llvm::sys::fs::exists(path))
    GTEST_SKIP() << "no shared fixtures at " << path.str().str();
  llvm::Expected<LlamaConfig> c = readHFLlamaConfig(path);
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->vocabSize, 256);
  EXPECT_EQ(c->hiddenSize, 64);
  EXPECT_EQ(c->intermediateSize, 176);
  EXPECT_EQ(c->numLayers, 2);
  EXPECT_EQ(c->numHeads, 4);
  EXPECT_EQ(c->numKvHeads, 2);
  EXPECT_EQ(c->headDim, 16);
  EXPECT_DOUBLE_EQ(c->rmsNormEps, 1e-5);
  EXPECT_DOUBLE_EQ(c->ropeTheta, 10000.0);
  EXPECT_FALSE(c->tieWordEmbeddings);
}

TEST(ReadHFLlamaConfig, FileOrDirectory) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("mlt-hfllama", dir));
  llvm::SmallString<128> file(dir);
  llvm::sys::path::append(file, "config.json");
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(file, ec);
    ASSERT_FALSE(ec) << ec.message();
    os << toJson(tinyConfig());
  }
  for (llvm::StringRef path : {dir.str(), file.str()}) {
    llvm::Expected<LlamaConfig> c = readHFLlamaConfig(path);
    ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
    EXPECT_EQ(c->numKvHeads, 2);
  }
  // Messages name the file that was read; a directory without one is
  // refused by the rule every tool takes a model directory by
  // (HFModelDirectory.h).
  llvm::sys::fs::remove(file);
  llvm::Expected<LlamaConfig> missing = readHFLlamaConfig(file);
  ASSERT_FALSE(static_cast<bool>(missing));
  std::string error = llvm::toString(missing.takeError());
  EXPECT_NE(error.find(file.str().str()), std::string::npos) << error;
  EXPECT_NE(error.find("cannot read"), std::string::npos) << error;
  llvm::Expected<LlamaConfig> empty = readHFLlamaConfig(dir);
  ASSERT_FALSE(static_cast<bool>(empty));
  EXPECT_EQ(llvm::toString(empty.takeError()),
            dir.str().str() + ": a directory without config.json (an HF "
                              "model directory holds one)");
  llvm::sys::fs::remove(dir);
}

//===----------------------------------------------------------------------===//
// parseHFLlamaConfig: errors
//===----------------------------------------------------------------------===//

struct BadConfig {
  const char *name;
  std::function<void(llvm::json::Object &)> mutate;
  /// Pieces the message must hold, besides the source name.
  std::vector<std::string> expected;
};

void PrintTo(const BadConfig &bad, std::ostream *os) { *os << bad.name; }

class BadConfigTest : public testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigTest, ErrorNamesTheField) {
  llvm::json::Object object = tinyConfig();
  GetParam().mutate(object);
  std::string error = parseError(toJson(std::move(object)));
  ASSERT_FALSE(error.empty()) << "the config was accepted";
  EXPECT_EQ(error.rfind(kSource.str() + ": ", 0), 0u)
      << "does not start with the source: " << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << "not one line: " << error;
  for (const std::string &piece : GetParam().expected)
    EXPECT_NE(error.find(piece), std::string::npos)
        << "'" << piece << "' not in: " << error;
}

auto set(const char *key, llvm::json::Value value) {
  return [key, value](llvm::json::Object &o) { o[key] = value; };
}

auto erase(const char *key) {
  return [key](llvm::json::Object &o) { o.erase(key); };
}

const BadConfig kBadConfigs[] = {
    // Missing required fields.
    {"missing_vocab_size", erase("vocab_size"), {"missing field 'vocab_size'"}},
    {"missing_hidden_size",
     erase("hidden_size"),
     {"missing field 'hidden_size'"}},
    {"missing_intermediate_size",
     erase("intermediate_size"),
     {"missing field 'intermediate_size'"}},
    {"missing_num_hidden_layers",
     erase("num_hidden_layers"),
     {"missing field 'num_hidden_layers'"}},
    {"missing_num_attention_heads",
     erase("num_attention_heads"),
     {"missing field 'num_attention_heads'"}},
    {"null_vocab_size",
     set("vocab_size", nullptr),
     {"missing field 'vocab_size'"}},
    // Wrong types.
    {"string_hidden_size",
     set("hidden_size", "64"),
     {"field 'hidden_size' must be an integer", "\"64\""}},
    {"fractional_intermediate_size",
     set("intermediate_size", 176.5),
     {"field 'intermediate_size' must be an integer"}},
    {"bool_num_hidden_layers",
     set("num_hidden_layers", true),
     {"field 'num_hidden_layers' must be an integer"}},
    {"string_num_key_value_heads",
     set("num_key_value_heads", "2"),
     {"field 'num_key_value_heads' must be an integer"}},
    {"string_rms_norm_eps",
     set("rms_norm_eps", "1e-5"),
     {"field 'rms_norm_eps' must be a number"}},
    {"string_rope_theta",
     set("rope_theta", "10000"),
     {"field 'rope_theta' must be a number"}},
    {"string_tie_word_embeddings",
     set("tie_word_embeddings", "false"),
     {"field 'tie_word_embeddings' must be true or false"}},
    {"array_rope_parameters",
     set("rope_parameters", llvm::json::Array{1}),
     {"field 'rope_parameters' must be an object"}},
    {"string_rope_parameters_theta",
     set("rope_parameters", llvm::json::Object{{"rope_theta", "1e4"}}),
     {"rope_parameters", "field 'rope_theta' must be a number"}},
    // Non-positive values.
    {"zero_num_hidden_layers",
     set("num_hidden_layers", 0),
     {"field 'num_hidden_layers' must be positive, got 0"}},
    {"negative_vocab_size",
     set("vocab_size", -5),
     {"field 'vocab_size' must be positive, got -5"}},
    {"zero_num_attention_heads",
     set("num_attention_heads", 0),
     {"field 'num_attention_heads' must be positive"}},
    {"zero_head_dim",
     set("head_dim", 0),
     {"field 'head_dim' must be positive"}},
    {"zero_max_position_embeddings",
     set("max_position_embeddings", 0),
     {"field 'max_position_embeddings' must be positive"}},
    {"zero_rms_norm_eps",
     set("rms_norm_eps", 0.0),
     {"field 'rms_norm_eps' must be a positive number"}},
    {"negative_rope_theta",
     set("rope_theta", -1.0),
     {"field 'rope_theta' must be a positive number"}},
    {"negative_rope_parameters_theta",
     set("rope_parameters", llvm::json::Object{{"rope_theta", -1.0}}),
     {"rope_parameters", "field 'rope_theta' must be a positive number"}},
    // Shapes the model IR cannot express.
    {"heads_do_not_divide_hidden",
     [](llvm::json::Object &o) {
       o["num_attention_heads"] = 6;
       o["num_key_value_heads"] = 6;
     },
     {"hidden_size (64) is not divisible by num_attention_heads (6)",
      "'head_dim'"}},
    {"heads_not_multiple_of_kv_heads",
     set("num_key_value_heads", 3),
     {"num_attention_heads (4) must be a multiple of num_key_value_heads (3)"}},
    {"more_kv_heads_than_heads",
     set("num_key_value_heads", 8),
     {"num_attention_heads (4) must be a multiple of num_key_value_heads (8)"}},
    {"odd_head_dim", set("head_dim", 15), {"head_dim (15) must be even"}},
    {"odd_derived_head_dim",
     [](llvm::json::Object &o) {
       o["hidden_size"] = 60;
       o["num_key_value_heads"] = 4;
     },
     {"head_dim (15) must be even"}},
    // Llama 3.1's rotary scaling: every field present and in range.
    {"llama3_missing_factor",
     set("rope_scaling", llama3With("factor", nullptr)),
     {"rope_scaling: missing field 'factor'", "llama3"}},
    {"llama3_missing_low_freq_factor",
     set("rope_scaling", llama3With("low_freq_factor", nullptr)),
     {"rope_scaling: missing field 'low_freq_factor'"}},
    {"llama3_missing_high_freq_factor",
     set("rope_parameters", llama3With("high_freq_factor", nullptr)),
     {"rope_parameters: missing field 'high_freq_factor'"}},
    {"llama3_string_factor",
     set("rope_scaling", llama3With("factor", "8")),
     {"rope_scaling: field 'factor' must be a finite number", "\"8\""}},
    {"llama3_factor_below_one",
     set("rope_scaling", llama3With("factor", 0.5)),
     {"rope_scaling: llama3 rope scaling: factor must be at least 1, got 0.5"}},
    {"llama3_zero_low_freq_factor",
     set("rope_scaling", llama3With("low_freq_factor", 0.0)),
     {"low_freq_factor must be positive, got 0"}},
    {"llama3_high_not_above_low",
     set("rope_scaling", llama3With("high_freq_factor", 1.0)),
     {"high_freq_factor (1) must be greater than low_freq_factor (1)"}},
    {"llama3_zero_original",
     set("rope_scaling", llama3With("original_max_position_embeddings", 0)),
     {"rope_scaling: field 'original_max_position_embeddings' must be "
      "positive, got 0"}},
    {"llama3_fractional_original",
     set("rope_scaling",
         llama3With("original_max_position_embeddings", 8192.5)),
     {"field 'original_max_position_embeddings' must be an integer"}},
    {"llama3_original_disagrees_with_top_level",
     [](llvm::json::Object &o) {
       o["original_max_position_embeddings"] = 4096;
       o["rope_scaling"] = llama3Scaling();
     },
     {"field 'rope_scaling.original_max_position_embeddings' is 8192, but "
      "the top-level 'original_max_position_embeddings' is 4096"}},
    {"llama3_objects_disagree",
     [](llvm::json::Object &o) {
       o["rope_parameters"] = llama3Scaling();
       o["rope_scaling"] = llama3With("factor", 32.0);
     },
     {"fields 'rope_parameters' and 'rope_scaling' describe different rotary "
      "embeddings"}},
    {"llama3_and_default_disagree",
     [](llvm::json::Object &o) {
       o["rope_parameters"] = llvm::json::Object{{"rope_type", "default"}};
       o["rope_scaling"] = llama3Scaling();
     },
     {"describe different rotary embeddings"}},
    // Features the model IR does not express.
    {"legacy_linear_rope_scaling",
     set("rope_scaling",
         llvm::json::Object{{"type", "linear"}, {"factor", 2.0}}),
     {"rope_scaling", "'linear'", "only 'default' and 'llama3'"}},
    {"yarn_rope_parameters",
     set("rope_parameters", llvm::json::Object{{"rope_type", "yarn"},
                                               {"factor", 4.0},
                                               {"rope_theta", 500000.0}}),
     {"rope_parameters.rope_type", "'yarn'"}},
    {"attention_bias",
     set("attention_bias", true),
     {"field 'attention_bias' is true"}},
    {"mlp_bias", set("mlp_bias", true), {"field 'mlp_bias' is true"}},
    {"string_attention_bias",
     set("attention_bias", "no"),
     {"field 'attention_bias' must be true or false"}},
    {"gelu", set("hidden_act", "gelu"), {"field 'hidden_act'", "'gelu'"}},
    {"mistral",
     set("model_type", "mistral"),
     {"field 'model_type'", "'mistral'"}},
    {"numeric_model_type",
     set("model_type", 7),
     {"field 'model_type' must be a string"}},
};

INSTANTIATE_TEST_SUITE_P(
    ParseHFLlamaConfig, BadConfigTest, testing::ValuesIn(kBadConfigs),
    [](const testing::TestParamInfo<BadConfig> &info) {
      return std::string(info.param.name);
    });

//===----------------------------------------------------------------------===//
// parseHFLlamaConfig: special-token ids
//===----------------------------------------------------------------------===//

// Tests that the ids are kept in the form the config wrote: one id, or a
// list (Llama 3.1's eos_token_id; a list of one stays a list); null and
// absent are none.
TEST(ParseHFLlamaConfig, SpecialTokenIds) {
  llvm::json::Object object = tinyConfig();
  object["bos_token_id"] = 128000;
  object["eos_token_id"] = llvm::json::Array{128001, 128008, 128009};
  object["pad_token_id"] = nullptr;
  LlamaConfig c = parseOk(std::move(object));
  EXPECT_EQ(c.bosTokenId, (TokenIds{{128000}, false}));
  EXPECT_EQ(c.eosTokenId, (TokenIds{{128001, 128008, 128009}, true}));
  EXPECT_EQ(c.padTokenId, std::nullopt);

  object = tinyConfig();
  object["eos_token_id"] = llvm::json::Array{2};
  object["pad_token_id"] = 0;
  c = parseOk(std::move(object));
  EXPECT_EQ(c.bosTokenId, std::nullopt);
  EXPECT_EQ(c.eosTokenId, (TokenIds{{2}, true}));
  EXPECT_EQ(c.padTokenId, (TokenIds{{0}, false}));
}

// Tests that a special-token id that is neither an integer nor a list of
// integers is refused, naming the field.
TEST(ParseHFLlamaConfig, BadSpecialTokenIds) {
  for (llvm::json::Value bad :
       {llvm::json::Value("2"), llvm::json::Value(2.5),
        llvm::json::Value(llvm::json::Array{1, "x"}),
        llvm::json::Value(llvm::json::Object{{"id", 2}})}) {
    llvm::json::Object object = tinyConfig();
    object["eos_token_id"] = bad;
    std::string error = parseError(toJson(std::move(object)));
    EXPECT_EQ(error.rfind(kSource.str() +
                              ": field 'eos_token_id' must be an integer or "
                              "a list of integers, got ",
                          0),
              0u)
        << error;
  }
}

// Tests that the config.json an export writes states the ids as the
// imported one did, and that the runtime's reader of plans' configs takes
// it; that it refuses what the importer refuses.
TEST(HFConfigJson, WritesSpecialTokenIds) {
  llvm::json::Object object = tinyConfig();
  object["bos_token_id"] = 1;
  object["eos_token_id"] = llvm::json::Array{2, 3};
  LlamaConfig c = parseOk(std::move(object));
  const std::string text = hfConfigJson(c);
  llvm::Expected<llvm::json::Value> written = llvm::json::parse(text);
  ASSERT_TRUE(static_cast<bool>(written)) << text;
  const llvm::json::Object *config = written->getAsObject();
  ASSERT_TRUE(config);
  EXPECT_EQ(config->getInteger("bos_token_id"), 1);
  const llvm::json::Array *eos = config->getArray("eos_token_id");
  ASSERT_TRUE(eos) << text;
  ASSERT_EQ(eos->size(), 2u);
  EXPECT_EQ((*eos)[0].getAsInteger(), 2);
  EXPECT_EQ((*eos)[1].getAsInteger(), 3);
  EXPECT_FALSE(config->get("pad_token_id")) << text;
  expectSameConfig(parseOk(*config), c);
  EXPECT_TRUE(rt::parsePlanConfig(text).isOk());

  llvm::json::Object bad = tinyConfig();
  bad["pad_token_id"] = llvm::json::Array{0, "1"};
  StatusOr<rt::PlanConfig> refused = rt::parsePlanConfig(toJson(bad));
  ASSERT_FALSE(refused.isOk());
  EXPECT_EQ(refused.status().message(),
            "field 'pad_token_id' must be an integer or a list of integers, "
            "got [0,\"1\"]");
}

TEST(ParseHFLlamaConfig, InvalidJson) {
  std::string error = parseError("{\"vocab_size\": 256,");
  EXPECT_EQ(error.rfind(kSource.str() + ": not valid JSON", 0), 0u) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(ParseHFLlamaConfig, TrailingGarbage) {
  std::string error = parseError(toJson(tinyConfig()) + " }");
  EXPECT_EQ(error.rfind(kSource.str() + ": not valid JSON", 0), 0u) << error;
}

TEST(ParseHFLlamaConfig, TopLevelArray) {
  std::string error = parseError("[" + toJson(tinyConfig()) + "]");
  EXPECT_EQ(error, kSource.str() + ": expected a JSON object at the top level");
}

TEST(ParseHFLlamaConfig, Empty) {
  EXPECT_NE(parseError("").find("not valid JSON"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// LlamaConfig
//===----------------------------------------------------------------------===//

// Published parameter counts (the sums of the checkpoints' tensor sizes).
TEST(LlamaConfig, NumParametersTinyLlama) {
  EXPECT_EQ(makeConfig(2048, 22, 32, 4, 5632, 32000).numParameters(),
            1100048384);
}

TEST(LlamaConfig, NumParametersLlama2_7B) {
  EXPECT_EQ(makeConfig(4096, 32, 32, 32, 11008, 32000).numParameters(),
            6738415616);
}

TEST(LlamaConfig, NumParametersLlama3_8B) {
  EXPECT_EQ(makeConfig(4096, 32, 32, 8, 14336, 128256).numParameters(),
            8030261248);
}

TEST(LlamaConfig, NumParametersLlama2_70B) {
  EXPECT_EQ(makeConfig(8192, 80, 64, 8, 28672, 32000).numParameters(),
            68976648192);
}

TEST(LlamaConfig, TiedEmbeddingsCountedOnce) {
  LlamaConfig untied = makeConfig(2048, 16, 32, 8, 8192, 128256);
  LlamaConfig tied = untied;
  tied.tieWordEmbeddings = true;
  EXPECT_EQ(untied.numParameters() - tied.numParameters(), 128256 * 2048);
  // LLaMA-3.2-1B (tied): 1,235,814,400 parameters.
  EXPECT_EQ(tied.numParameters(), 1235814400);
}

TEST(LlamaConfig, VerifyNamesTheField) {
  LlamaConfig c = makeConfig(64, 2, 4, 2, 176, 256);
  EXPECT_FALSE(static_cast<bool>(c.verify()));
  c.numKvHeads = 3;
  llvm::Error error = c.verify();
  ASSERT_TRUE(static_cast<bool>(error));
  EXPECT_NE(llvm::toString(std::move(error)).find("num_key_value_heads (3)"),
            std::string::npos);
  c.numKvHeads = 0;
  error = c.verify();
  ASSERT_TRUE(static_cast<bool>(error));
  EXPECT_NE(llvm::toString(std::move(error)).find("num_key_value_heads"),
            std::string::npos);
}

TEST(LlamaConfig, AttrRoundTrip) {
  LlamaConfig c;
  c.vocabSize = 1000;
  c.hiddenSize = 96;
  c.intermediateSize = 260;
  c.numLayers = 3;
  c.numHeads = 6;
  c.numKvHeads = 3;
  c.headDim = 32;
  c.maxPositionEmbeddings = 4096;
  c.rmsNormEps = 1e-5;
  c.ropeTheta = 500000.0;
  c.tieWordEmbeddings = true;
  c.ropeScaling = rt::RopeScaling::llama3(32.0, 1.0, 4.0, 8192);
  c.bosTokenId = TokenIds{{128000}, false};
  c.eosTokenId = TokenIds{{128001, 128009}, true};
  c.padTokenId = TokenIds{{0}, true};
  MLIRContext context;
  context.getOrLoadDialect<MLTDialect>();
  LlamaConfigAttr attr = c.toAttr(&context);
  ASSERT_TRUE(attr);
  EXPECT_EQ(attr.getNumKvHeads(), 3);
  expectSameConfig(LlamaConfig::fromAttr(attr), c);

  // Through the attribute's text form too.
  std::string text;
  llvm::raw_string_ostream os(text);
  Attribute(attr).print(os);
  Attribute parsed = parseAttribute(text, &context);
  ASSERT_TRUE(parsed) << text;
  auto parsedConfig = dyn_cast<LlamaConfigAttr>(parsed);
  ASSERT_TRUE(parsedConfig) << text;
  expectSameConfig(LlamaConfig::fromAttr(parsedConfig), c);
}

// Tests that the attribute's verifier refuses a special-token id of
// another kind than an i64 id or a list of ids (what a C++ builder could
// pass; the parser makes only those two).
TEST(LlamaConfig, AttrVerifiesTokenIds) {
  MLIRContext context;
  context.getOrLoadDialect<MLTDialect>();
  Builder b(&context);
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diagnostic) {
    message = diagnostic.str();
    return success();
  });
  const int64_t vocab = 256, hidden = 64, ffn = 176, layers = 2, heads = 4,
                kvHeads = 2, headDim = 16, positions = 2048;
  Attribute bos = b.getI64IntegerAttr(1), eos = b.getStringAttr("2");
  LlamaConfigAttr attr = LlamaConfigAttr::getChecked(
      [&] { return emitError(UnknownLoc::get(&context)); }, &context, vocab,
      hidden, ffn, layers, heads, kvHeads, headDim, positions,
      b.getF64FloatAttr(1e-5), b.getF64FloatAttr(1e4), b.getBoolAttr(false),
      Llama3RopeScalingAttr(), bos, eos, Attribute());
  EXPECT_FALSE(attr);
  EXPECT_EQ(message,
            "eos_token_id must be an i64 id or a list of ids, got \"2\"");
}

//===----------------------------------------------------------------------===//
// buildLlamaModule
//===----------------------------------------------------------------------===//

class BuildLlamaModuleTest : public testing::Test {
protected:
  BuildLlamaModuleTest() {
    config = makeConfig(64, 2, 4, 2, 176, 256);
    config.rmsNormEps = 1e-5;
  }

  OwningOpRef<ModuleOp> build(const LlamaBuildOptions &options = {}) {
    llvm::Expected<OwningOpRef<ModuleOp>> module =
        buildLlamaModule(context, config, options);
    if (!module) {
      ADD_FAILURE() << llvm::toString(module.takeError());
      return nullptr;
    }
    return std::move(*module);
  }

  /// HF name of every parameter (per-layer families expanded) -> shape.
  static std::map<std::string, std::vector<int64_t>> params(ModuleOp module) {
    std::map<std::string, std::vector<int64_t>> result;
    module.walk([&](ParamOp param) {
      ArrayRef<int64_t> shape = param.getTensorType().getShape();
      int64_t layers = param.isPerLayer() ? *param.getLayers() : 1;
      for (int64_t layer = 0; layer < layers; ++layer)
        EXPECT_TRUE(result
                        .emplace(param.getHFName(layer),
                                 std::vector<int64_t>(shape.begin(),
                                                      shape.end()))
                        .second)
            << "duplicate " << param.getHFName(layer);
    });
    return result;
  }

  /// Expected HF parameters of `config`.
  std::map<std::string, std::vector<int64_t>> expectedParams() const {
    int64_t h = config.hiddenSize, q = config.numHeads * config.headDim,
            kv = config.numKvHeads * config.headDim,
            ffn = config.intermediateSize;
    std::map<std::string, std::vector<int64_t>> expected;
    expected["model.embed_tokens.weight"] = {config.vocabSize, h};
    for (int64_t l = 0; l < config.numLayers; ++l) {
      std::string prefix = "model.layers." + std::to_string(l) + ".";
      expected[prefix + "input_layernorm.weight"] = {h};
      expected[prefix + "self_attn.q_proj.weight"] = {q, h};
      expected[prefix + "self_attn.k_proj.weight"] = {kv, h};
      expected[prefix + "self_attn.v_proj.weight"] = {kv, h};
      expected[prefix + "self_attn.o_proj.weight"] = {h, q};
      expected[prefix + "post_attention_layernorm.weight"] = {h};
      expected[prefix + "mlp.gate_proj.weight"] = {ffn, h};
      expected[prefix + "mlp.up_proj.weight"] = {ffn, h};
      expected[prefix + "mlp.down_proj.weight"] = {h, ffn};
    }
    expected["model.norm.weight"] = {h};
    if (!config.tieWordEmbeddings)
      expected["lm_head.weight"] = {config.vocabSize, h};
    return expected;
  }

  /// The sum of the parameters' sizes.
  static int64_t countParameters(ModuleOp module) {
    int64_t count = 0;
    module.walk([&](ParamOp param) {
      count += param.getTensorType().getNumElements() *
               (param.isPerLayer() ? *param.getLayers() : 1);
    });
    return count;
  }

  MLIRContext context;
  LlamaConfig config;
};

TEST_F(BuildLlamaModuleTest, Verifies) {
  OwningOpRef<ModuleOp> module = build();
  ASSERT_TRUE(module);
  EXPECT_TRUE(succeeded(verify(*module)));
}

TEST_F(BuildLlamaModuleTest, DeclaresHFParameters) {
  OwningOpRef<ModuleOp> module = build();
  ASSERT_TRUE(module);
  auto actual = params(*module);
  EXPECT_EQ(actual, expectedParams());
  EXPECT_EQ(actual.at("model.layers.1.mlp.down_proj.weight"),
            (std::vector<int64_t>{64, 176}));
  EXPECT_EQ(actual.at("model.layers.0.self_attn.k_proj.weight"),
            (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(countParameters(*module), config.numParameters());

  // Per-layer families are declared once, for every layer.
  int perLayer = 0;
  module->walk([&](ParamOp param) {
    if (!param.isPerLayer())
      return;
    ++perLayer;
    EXPECT_EQ(*param.getLayers(), config.numLayers) << param.getSymName().str();
    EXPECT_TRUE(param.getSymName().starts_with("model.layers.{}."))
        << param.getSymName().str();
  });
  EXPECT_EQ(perLayer, 9);
}

// Tests that the runtime's list of a LLaMA's parameters (ModelConfig.h, which
// a plan's hf_config is held to) is the builder's, tied or not, and that the
// runtime reads the config.json the exporter writes as the importer does.
TEST_F(BuildLlamaModuleTest, RuntimeListsTheSameParameters) {
  for (bool tied : {false, true}) {
    config.tieWordEmbeddings = tied;
    OwningOpRef<ModuleOp> module = build();
    ASSERT_TRUE(module);
    StatusOr<rt::PlanConfig> read = rt::parsePlanConfig(hfConfigJson(config));
    ASSERT_TRUE(read) << read.status().message();
    ASSERT_TRUE(read->llama);
    EXPECT_EQ(read->vocabSize, config.vocabSize);
    EXPECT_EQ(read->maxPositionEmbeddings, config.maxPositionEmbeddings);
    EXPECT_EQ(read->llama->headDim, config.headDim);
    EXPECT_EQ(read->llama->tieWordEmbeddings, tied);
    std::map<std::string, std::vector<int64_t>> listed;
    for (auto &[name, shape] : rt::llamaParameters(*read->llama))
      listed[name] = shape;
    EXPECT_EQ(listed, params(*module)) << (tied ? "tied" : "untied");
  }
}

TEST_F(BuildLlamaModuleTest, ExplicitHeadDim) {
  config.numHeads = 6;
  config.numKvHeads = 2;
  config.headDim = 32;
  OwningOpRef<ModuleOp> module = build();
  ASSERT_TRUE(module);
  auto actual = params(*module);
  EXPECT_EQ(actual, expectedParams());
  EXPECT_EQ(actual.at("model.layers.0.self_attn.q_proj.weight"),
            (std::vector<int64_t>{192, 64}));
  EXPECT_EQ(actual.at("model.layers.0.self_attn.o_proj.weight"),
            (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(countParameters(*module), config.numParameters());
}

TEST_F(BuildLlamaModuleTest, ForwardSignatureAndRepeat) {
  config.numLayers = 5;
  OwningOpRef<ModuleOp> module = build();
  ASSERT_TRUE(module);
  auto forward = module->lookupSymbol<func::FuncOp>("forward");
  ASSERT_TRUE(forward);
  auto tokens = RankedTensorType::get(
      {ShapedType::kDynamic, ShapedType::kDynamic},
      IntegerType::get(&context, 32));
  auto loss = RankedTensorType::get({}, Float32Type::get(&context));
  EXPECT_EQ(forward.getFunctionType(),
            FunctionType::get(&context, {tokens, tokens}, {loss}));

  SmallVector<RepeatOp> repeats;
  forward.walk([&](RepeatOp op) { repeats.push_back(op); });
  ASSERT_EQ(repeats.size(), 1u);
  EXPECT_EQ(repeats[0].getLower(), 0);
  EXPECT_EQ(repeats[0].getUpper(), 5);

  // GQA: query split into 4 heads, key and value into 2.
  SmallVector<AttentionOp> attentions;
  forward.walk([&](AttentionOp op) { attentions.push_back(op); });
  ASSERT_EQ(attentions.size(), 1u);
  EXPECT_EQ(attentions[0].getQuery().getType().getShape()[2], 4);
  EXPECT_EQ(attentions[0].getKey().getType().getShape()[2], 2);
  EXPECT_EQ(attentions[0].getValue().getType().getShape()[2], 2);
  EXPECT_EQ(attentions[0].getQuery().getType().getShape()[3], 16);
  EXPECT_TRUE(attentions[0].getCausal());
  EXPECT_DOUBLE_EQ(attentions[0].getScale().convertToDouble(), 0.25);
}

/// The parameter the logits are computed with.
std::string headParam(ModuleOp module) {
  std::string name;
  module.walk([&](CrossEntropyOp loss) {
    auto logits = loss.getLogits().getDefiningOp<MatmulOp>();
    if (!logits)
      return;
    if (auto load = logits.getRhs().getDefiningOp<LoadOp>())
      name = load.getName().str();
  });
  return name;
}

TEST_F(BuildLlamaModuleTest, UntiedHead) {
  OwningOpRef<ModuleOp> module = build();
  ASSERT_TRUE(module);
  EXPECT_EQ(headParam(*module), "lm_head.weight");
}

TEST_F(BuildLlamaModuleTest, TiedEmbeddings) {
  config.tieWordEmbeddings = true;
  OwningOpRef<ModuleOp> module = build();
  ASSERT_TRUE(module);
  auto actual = params(*module);
  EXPECT_EQ(actual.count("lm_head.weight"), 0u);
  EXPECT_EQ(actual, expectedParams());
  EXPECT_EQ(headParam(*module), "model.embed_tokens.weight");
  EXPECT_EQ(countParameters(*module), config.numParameters());
  EXPECT_TRUE(succeeded(verify(*module)));
}

TEST_F(BuildLlamaModuleTest, ModelAttrRoundTrip) {
  config.ropeTheta = 500000.0;
  config.maxPositionEmbeddings = 8192;
  config.tieWordEmbeddings = true;
  config.ropeScaling = rt::RopeScaling::llama3(8.0, 1.0, 4.0, 2048);
  config.eosTokenId = TokenIds{{2}, false};
  OwningOpRef<ModuleOp> module = build();
  ASSERT_TRUE(module);
  auto attr = (*module)->getAttrOfType<LlamaConfigAttr>(
      MLTDialect::getModelAttrName());
  ASSERT_TRUE(attr);
  expectSameConfig(LlamaConfig::fromAttr(attr), config);

  // Print, parse back, read the attribute again.
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  OwningOpRef<ModuleOp> reparsed = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(reparsed);
  EXPECT_TRUE(succeeded(verify(*reparsed)));
  auto reparsedAttr = (*reparsed)->getAttrOfType<LlamaConfigAttr>(
      MLTDialect::getModelAttrName());
  ASSERT_TRUE(reparsedAttr);
  expectSameConfig(LlamaConfig::fromAttr(reparsedAttr), config);
}

// Tests that every rotation carries the config's scaling, and none without.
TEST_F(BuildLlamaModuleTest, RopesCarryTheScaling) {
  for (const rt::RopeScaling &scaling :
       {rt::RopeScaling(), rt::RopeScaling::llama3(8.0, 1.0, 4.0, 2048)}) {
    config.ropeScaling = scaling;
    OwningOpRef<ModuleOp> module = build();
    ASSERT_TRUE(module);
    int ropes = 0;
    module->walk([&](RopeOp rope) {
      ++ropes;
      EXPECT_EQ(rope.getRopeScaling(), scaling);
      EXPECT_EQ(bool(rope.getScalingAttr()), scaling.isScaled());
    });
    EXPECT_EQ(ropes, 2); // queries and keys, in the layer written once
  }
}

TEST_F(BuildLlamaModuleTest, BF16) {
  LlamaBuildOptions options;
  options.dtype = "bf16";
  OwningOpRef<ModuleOp> module = build(options);
  ASSERT_TRUE(module);
  int count = 0;
  module->walk([&](ParamOp param) {
    ++count;
    EXPECT_TRUE(param.getTensorType().getElementType().isBF16())
        << param.getSymName().str();
  });
  EXPECT_EQ(count, 12);
  module->walk([&](MatmulOp op) {
    EXPECT_TRUE(op.getType().getElementType().isBF16());
  });
  // The loss stays float32.
  auto forward = module->lookupSymbol<func::FuncOp>("forward");
  ASSERT_TRUE(forward);
  EXPECT_TRUE(cast<RankedTensorType>(forward.getResultTypes()[0])
                  .getElementType()
                  .isF32());
}

TEST_F(BuildLlamaModuleTest, F16AndF64) {
  LlamaBuildOptions options;
  options.dtype = "f16";
  OwningOpRef<ModuleOp> module = build(options);
  ASSERT_TRUE(module);
  module->walk([&](ParamOp param) {
    EXPECT_TRUE(param.getTensorType().getElementType().isF16());
  });
  options.dtype = "f64";
  module = build(options);
  ASSERT_TRUE(module);
  auto forward = module->lookupSymbol<func::FuncOp>("forward");
  ASSERT_TRUE(forward);
  EXPECT_TRUE(cast<RankedTensorType>(forward.getResultTypes()[0])
                  .getElementType()
                  .isF64());
}

TEST_F(BuildLlamaModuleTest, UnknownDtype) {
  LlamaBuildOptions options;
  options.dtype = "fp8";
  llvm::Expected<OwningOpRef<ModuleOp>> module =
      buildLlamaModule(context, config, options);
  ASSERT_FALSE(static_cast<bool>(module));
  std::string error = llvm::toString(module.takeError());
  EXPECT_NE(error.find("unknown dtype 'fp8'"), std::string::npos) << error;
}

TEST_F(BuildLlamaModuleTest, InvalidConfig) {
  config.numKvHeads = 3;
  llvm::Expected<OwningOpRef<ModuleOp>> module =
      buildLlamaModule(context, config);
  ASSERT_FALSE(static_cast<bool>(module));
  std::string error = llvm::toString(module.takeError());
  EXPECT_NE(error.find("num_key_value_heads (3)"), std::string::npos) << error;
}

} // namespace
