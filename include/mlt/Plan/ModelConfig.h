//===- ModelConfig.h - the HF config.json a plan carries --------*- C++ -*-===//
//
// Part of mlt. A plan carries its model's HF config.json (ModelInfo's
// hfConfig), which checkpoints and --save-hf write beside the weights. The
// runtime reads it here, without LLVM: the LLaMA it describes, with the
// bounds the HF importer (lib/Import/HFLlama.cpp) applies to the same
// fields, and the parameters (HF names and shapes) that LLaMA has. The
// training contract (TrainingContract.cpp) holds a plan's config to its
// tensors with them: a config.json that names another model than the one
// the plan trains would be written beside weights it does not describe.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_MODELCONFIG_H
#define MLT_PLAN_MODELCONFIG_H

#include "mlt/Plan/RopeFrequencies.h"
#include "mlt/Support/Status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlt::rt {

/// The largest value of each LLaMA size mlt accepts, far beyond any LLaMA
/// (LLaMA-3-405B: 126 layers, hidden 16384, a vocabulary of 128256) and
/// small enough that no product of them overflows or takes the compiler
/// hours: what is past them is a typo or an attack. The HF importer and the
/// runtime's reader of plans' configs apply the same table.
struct LlamaLimit {
  const char *field; ///< the config.json key
  int64_t max;
};
inline constexpr LlamaLimit kLlamaLimits[] = {
    {"vocab_size", int64_t(1) << 22},
    {"hidden_size", int64_t(1) << 17},
    {"intermediate_size", int64_t(1) << 19},
    {"num_hidden_layers", 4096},
    {"num_attention_heads", 4096},
    {"num_key_value_heads", 4096},
    {"head_dim", 4096},
    {"max_position_embeddings", int64_t(1) << 24},
};
/// The limit of `field` (a key of kLlamaLimits; no limit for another).
constexpr int64_t llamaLimit(std::string_view field) {
  for (const LlamaLimit &limit : kLlamaLimits)
    if (field == limit.field)
      return limit.max;
  return INT64_MAX;
}

/// The LLaMA an HF config.json describes: what its parameters' shapes and
/// the launches of its plan follow from.
struct LlamaShape {
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t intermediateSize = 0;
  int64_t numLayers = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0;
  int64_t headDim = 0;
  bool tieWordEmbeddings = false;
  /// rms_norm_eps and rope_theta (HF's defaults when absent; rope_theta
  /// as rope_parameters may give it).
  double rmsNormEps = 1e-6;
  double ropeTheta = 1e4;
  /// The rotary scaling of rope_scaling or rope_parameters (rope_type
  /// "llama3"), or none.
  RopeScaling ropeScaling;
};

/// What a plan's config.json says, as far as the runtime checks it.
struct PlanConfig {
  /// The fields the model info repeats, when present.
  std::optional<int64_t> vocabSize;
  std::optional<int64_t> maxPositionEmbeddings;
  /// The LLaMA, when the config gives one whole: vocab_size, hidden_size,
  /// intermediate_size, num_hidden_layers and num_attention_heads present
  /// (num_key_value_heads, head_dim and tie_word_embeddings default as in
  /// transformers' LlamaConfig). A config of a few fields (test plans of
  /// toy models) describes none.
  std::optional<LlamaShape> llama;
};

/// Reads a plan's config.json text: a JSON object that nests at most
/// kMaxJsonDepth levels; the LLaMA fields it has positive integers within
/// kLlamaLimits (null: absent), rms_norm_eps and rope_theta positive
/// numbers, tie_word_embeddings a boolean, rope_scaling and
/// rope_parameters objects whose rope_type (or legacy type) is "default" or
/// "llama3" with the scaling's fields (checkRopeScaling; the two objects,
/// when both are given, of one scaling), read as the HF importer reads
/// them; bos_token_id, eos_token_id and pad_token_id integers or lists of
/// integers (null: absent); of a whole LLaMA,
/// num_attention_heads a multiple of num_key_value_heads, an even head_dim,
/// and hidden_size divisible by num_attention_heads when head_dim is
/// absent (the importer's rules). Errors are one line naming the field.
StatusOr<PlanConfig> parsePlanConfig(std::string_view text);

/// The parameters of `llama` by HF name, with their shapes, in the order
/// transformers lists them (the embedding, each layer's, the final norm,
/// the head unless tied).
std::vector<std::pair<std::string, std::vector<int64_t>>>
llamaParameters(const LlamaShape &llama);

} // namespace mlt::rt

#endif // MLT_PLAN_MODELCONFIG_H
