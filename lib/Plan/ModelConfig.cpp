//===- ModelConfig.cpp - the HF config.json a plan carries ----------------===//
//
// Part of mlt. parsePlanConfig reads a plan's config.json with nlohmann's
// parser (after JsonDepth.h's measure: the parser recurses per level) into
// the LLaMA it describes; llamaParameters lists that LLaMA's parameters as
// HF names and shapes them (HFLlama.cpp's builder declares the same).
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/ModelConfig.h"
#include "mlt/Support/JsonDepth.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

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

  /// A special-token id: an integer or a list of integers; ok when absent.
  Status tokenIds(const char *key) const {
    if (!has(key))
      return Status::ok();
    const json &value = object_.at(key);
    bool integers = value.is_number_integer() || value.is_array();
    if (value.is_array())
      for (const json &element : value)
        integers = integers && element.is_number_integer();
    if (!integers)
      return errorf("field '", key, "' must be an integer or a list of ",
                    "integers, got ", describe(value));
    return Status::ok();
  }

private:
  const json &object_;
};

} // namespace

namespace {

/// rope_scaling / rope_parameters (the importer's rules, HFLlama.cpp): the
/// rotary base they may give over `theta`, and the scaling.
Status readRope(const json &config, const Fields &top,
                std::optional<int64_t> maxPositions, double &theta,
                RopeScaling &scaling) {
  std::optional<std::string> scalingFrom;
  for (const char *key : {"rope_parameters", "rope_scaling"}) {
    if (!top.has(key))
      continue;
    const json &rope = config.at(key);
    if (!rope.is_object())
      return errorf("field '", key, "' must be an object");
    auto text = [&](const char *field) -> StatusOr<std::string> {
      auto it = rope.find(field);
      if (it == rope.end() || it->is_null())
        return std::string();
      if (!it->is_string())
        return errorf("field '", key, ".", field, "' must be a string, got ",
                      describe(*it));
      return it->get<std::string>();
    };
    StatusOr<std::string> type = text("rope_type");
    if (type && type->empty())
      type = text("type"); // the old spelling
    if (!type)
      return type.takeStatus();
    if (!type->empty() && *type != "default" && *type != "llama3")
      return errorf("field '", key, ".rope_type' is '", *type,
                    "'; only 'default' and 'llama3' rotary embeddings are "
                    "supported");
    const Fields fields(rope);
    StatusOr<double> ropeTheta = fields.positive("rope_theta", theta);
    if (!ropeTheta)
      return ropeTheta.takeStatus().withContext(key);
    theta = *ropeTheta;
    if (type->empty())
      continue;
    RopeScaling read;
    if (*type == "llama3") {
      auto number = [&](const char *field) -> StatusOr<double> {
        auto it = rope.find(field);
        if (it == rope.end() || !it->is_number())
          return errorf("field '", key, ".", field,
                        "' must be a number (llama3 rope scaling needs it)");
        return it->get<double>();
      };
      StatusOr<double> factor = number("factor");
      StatusOr<double> low = number("low_freq_factor");
      StatusOr<double> high = number("high_freq_factor");
      for (StatusOr<double> *value : {&factor, &low, &high})
        if (!*value)
          return value->takeStatus();
      StatusOr<std::optional<int64_t>> topLevel =
          top.size("original_max_position_embeddings");
      StatusOr<std::optional<int64_t>> inner =
          fields.size("original_max_position_embeddings");
      if (!topLevel)
        return topLevel.takeStatus();
      if (!inner)
        return inner.takeStatus().withContext(key);
      if (*topLevel && *inner && **inner != **topLevel)
        return errorf("field '", key, ".original_max_position_embeddings' is ",
                      **inner, ", but the top-level "
                      "'original_max_position_embeddings' is ", **topLevel);
      const std::optional<int64_t> original =
          *topLevel ? *topLevel : *inner ? *inner : maxPositions;
      read = RopeScaling::llama3(*factor, *low, *high, original.value_or(0));
      if (Status status = checkRopeScaling(read); !status)
        return std::move(status).withContext(key);
    }
    if (scalingFrom && read != scaling)
      return errorf("fields '", *scalingFrom, "' and '", key,
                    "' describe different rotary embeddings");
    scalingFrom = key;
    scaling = read;
  }
  return Status::ok();
}

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
  // The strings a config.json of mlt's LLaMA may hold, as the HF importer
  // holds them (lib/Import/HFLlama.cpp): they are exported beside the
  // weights, so a plan whose config names another model or activation
  // would describe weights it does not hold.
  for (auto [field, allowed] :
       {std::pair<const char *, std::vector<const char *>>{"model_type",
                                                           {"llama"}},
        {"hidden_act", {"silu"}},
        {"torch_dtype", {"float32", "bfloat16", "float16", "float64"}}}) {
    auto it = object.find(field);
    if (it == object.end() || it->is_null())
      continue;
    if (!it->is_string())
      return errorf("field '", field, "' must be a string");
    const std::string &value = it->get_ref<const std::string &>();
    bool known = false;
    for (const char *name : allowed)
      known = known || value == name;
    if (!known) {
      std::string names;
      for (const char *name : allowed)
        names += std::string(names.empty() ? "'" : ", '") + name + "'";
      return errorf("field '", field, "' is '", value, "'; mlt's LLaMA has ",
                    names);
    }
  }
  for (const char *bias : {"attention_bias", "mlp_bias"}) {
    StatusOr<bool> hasBias = fields.boolean(bias, false);
    if (!hasBias)
      return hasBias.takeStatus();
    if (*hasBias)
      return errorf("field '", bias, "' is true; mlt's LLaMA has no biases");
  }
  // The special-token ids, which exports write into config.json and
  // generation_config.json, as the importer reads them.
  for (const char *key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    MLT_RETURN_IF_ERROR(fields.tokenIds(key));
  StatusOr<double> eps = fields.positive("rms_norm_eps", 1e-6);
  if (!eps)
    return eps.takeStatus();
  StatusOr<double> theta = fields.positive("rope_theta", 1e4);
  if (!theta)
    return theta.takeStatus();
  StatusOr<bool> tied = fields.boolean("tie_word_embeddings", false);
  if (!tied)
    return tied.takeStatus();
  double ropeTheta = *theta;
  RopeScaling scaling;
  MLT_RETURN_IF_ERROR(readRope(object, fields, sizeOf("max_position_embeddings"),
                               ropeTheta, scaling));

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
  llama.ropeTheta = ropeTheta;
  llama.ropeScaling = scaling;
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
