//===- ModelConfig.cpp - the HF config.json a plan carries ----------------===//
//
// Part of mlt. parsePlanConfig reads a plan's config.json with nlohmann's
// parser (after JsonDepth.h's measure: the parser recurses per level) into
// the LLaMA it describes; llamaParameters lists that LLaMA's parameters as
// HF names and shapes them (HFLlama.cpp's builder declares the same).
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/plan/ModelConfig.h"
#include "mlt/Runtime/io/JsonDepth.h"

#include <nlohmann/json.hpp>

#include <cmath>

using namespace mlt;
using namespace mlt::rt;
using json = nlohmann::json;

namespace {

/// "12", "\"x\"", "[1, 2]..." for messages: at most 40 characters.
std::string describe(const json &value) {
  std::string text = value.dump(-1, ' ', false,
                                json::error_handler_t::replace);
  if (text.size() > 40)
    text = text.substr(0, 37) + "...";
  return text;
}

/// The fields of the config object, each read with its rule.
class Fields {
public:
  explicit Fields(const json &object) : object_(object) {}

  bool has(const char *key) const {
    auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }

  /// A positive integer within its limit; nullopt when absent.
  StatusOr<std::optional<int64_t>> size(const char *key) const {
    if (!has(key))
      return std::optional<int64_t>();
    const json &value = object_.at(key);
    if (!value.is_number_integer())
      return errorf("field '", key, "' must be an integer, got ",
                    describe(value));
    if (value.is_number_unsigned() ? value.get<uint64_t>() >
                                         uint64_t(llamaLimit(key))
                                   : value.get<int64_t>() > llamaLimit(key))
      return errorf("field '", key, "' is ", describe(value), ", beyond the ",
                    llamaLimit(key), " mlt accepts");
    const int64_t number = value.get<int64_t>();
    if (number <= 0)
      return errorf("field '", key, "' must be positive, got ", number);
    return std::optional<int64_t>(number);
  }

  /// A positive finite number; `fallback` when absent.
  StatusOr<double> positive(const char *key, double fallback) const {
    if (!has(key))
      return fallback;
    const json &value = object_.at(key);
    const double number = value.is_number() ? value.get<double>() : 0.0;
    if (!value.is_number() || !(number > 0.0) || !std::isfinite(number))
      return errorf("field '", key, "' must be a positive number, got ",
                    describe(value));
    return number;
  }

  StatusOr<bool> boolean(const char *key, bool fallback) const {
    if (!has(key))
      return fallback;
    const json &value = object_.at(key);
    if (!value.is_boolean())
      return errorf("field '", key, "' must be true or false, got ",
                    describe(value));
    return value.get<bool>();
  }

private:
  const json &object_;
};

} // namespace

StatusOr<PlanConfig> mlt::rt::parsePlanConfig(std::string_view text) {
  if (std::optional<size_t> at = jsonTooDeepAt(text))
    return errorf(jsonTooDeepMessage(*at));
  json object = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded())
    return errorf("not valid JSON");
  if (!object.is_object())
    return errorf("not a JSON object");
  const Fields fields(object);

  std::optional<int64_t> sizes[std::size(kLlamaLimits)];
  for (size_t i = 0; i < std::size(kLlamaLimits); ++i) {
    StatusOr<std::optional<int64_t>> value = fields.size(kLlamaLimits[i].field);
    if (!value)
      return value.takeStatus();
    sizes[i] = *value;
  }
  auto sizeOf = [&](std::string_view field) {
    for (size_t i = 0; i < std::size(kLlamaLimits); ++i)
      if (field == kLlamaLimits[i].field)
        return sizes[i];
    return std::optional<int64_t>();
  };
  StatusOr<double> eps = fields.positive("rms_norm_eps", 1e-6);
  if (!eps)
    return eps.takeStatus();
  StatusOr<double> theta = fields.positive("rope_theta", 1e4);
  if (!theta)
    return theta.takeStatus();
  StatusOr<bool> tied = fields.boolean("tie_word_embeddings", false);
  if (!tied)
    return tied.takeStatus();

  PlanConfig config;
  config.vocabSize = sizeOf("vocab_size");
  config.maxPositionEmbeddings = sizeOf("max_position_embeddings");
  const std::optional<int64_t> hidden = sizeOf("hidden_size"),
                               intermediate = sizeOf("intermediate_size"),
                               layers = sizeOf("num_hidden_layers"),
                               heads = sizeOf("num_attention_heads");
  if (!config.vocabSize || !hidden || !intermediate || !layers || !heads)
    return config;

  LlamaShape llama;
  llama.vocabSize = *config.vocabSize;
  llama.hiddenSize = *hidden;
  llama.intermediateSize = *intermediate;
  llama.numLayers = *layers;
  llama.numHeads = *heads;
  llama.numKvHeads = sizeOf("num_key_value_heads").value_or(*heads);
  if (std::optional<int64_t> headDim = sizeOf("head_dim")) {
    llama.headDim = *headDim;
  } else {
    if (*hidden % *heads != 0)
      return errorf("hidden_size (", *hidden,
                    ") is not divisible by num_attention_heads (", *heads,
                    "), and no 'head_dim' is given");
    llama.headDim = *hidden / *heads;
  }
  if (llama.numHeads % llama.numKvHeads != 0)
    return errorf("num_attention_heads (", llama.numHeads,
                  ") must be a multiple of num_key_value_heads (",
                  llama.numKvHeads, ")");
  if (llama.headDim % 2 != 0)
    return errorf("head_dim (", llama.headDim,
                  ") must be even for rotary embeddings");
  llama.tieWordEmbeddings = *tied;
  llama.rmsNormEps = *eps;
  llama.ropeTheta = *theta;
  config.llama = llama;
  return config;
}

std::vector<std::pair<std::string, std::vector<int64_t>>>
mlt::rt::llamaParameters(const LlamaShape &c) {
  const int64_t h = c.hiddenSize, q = c.numHeads * c.headDim,
                kv = c.numKvHeads * c.headDim, ffn = c.intermediateSize;
  std::vector<std::pair<std::string, std::vector<int64_t>>> parameters;
  parameters.push_back({"model.embed_tokens.weight", {c.vocabSize, h}});
  for (int64_t layer = 0; layer < c.numLayers; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    parameters.push_back({prefix + "input_layernorm.weight", {h}});
    parameters.push_back({prefix + "self_attn.q_proj.weight", {q, h}});
    parameters.push_back({prefix + "self_attn.k_proj.weight", {kv, h}});
    parameters.push_back({prefix + "self_attn.v_proj.weight", {kv, h}});
    parameters.push_back({prefix + "self_attn.o_proj.weight", {h, q}});
    parameters.push_back({prefix + "post_attention_layernorm.weight", {h}});
    parameters.push_back({prefix + "mlp.gate_proj.weight", {ffn, h}});
    parameters.push_back({prefix + "mlp.up_proj.weight", {ffn, h}});
    parameters.push_back({prefix + "mlp.down_proj.weight", {h, ffn}});
  }
  parameters.push_back({"model.norm.weight", {h}});
  if (!c.tieWordEmbeddings)
    parameters.push_back({"lm_head.weight", {c.vocabSize, h}});
  return parameters;
}
