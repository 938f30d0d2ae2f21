//===- HFLlama.h - Hugging Face LLaMA config importer -----------*- C++ -*-===//
//
// Part of mlt. Reads a Hugging Face LLaMA `config.json` into a LlamaConfig and
// builds the model's forward pass and loss in the `mlt` dialect from it. The
// same builder writes the files in models/llama/, so hand-written models and
// imported ones have one shape.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_IMPORT_HFLLAMA_H
#define MLT_IMPORT_HFLLAMA_H

#include "mlt/Dialect/MLT/MLTAttrs.h"
#include "mlt/Plan/RopeFrequencies.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlt {

/// A special-token id of a config.json (bos_token_id, eos_token_id,
/// pad_token_id): one id, or a list of them (Llama 3.1's eos_token_id),
/// kept in the form the config wrote.
struct TokenIds {
  std::vector<int64_t> ids;
  /// Whether the config wrote a list (a list of one id stays a list).
  bool list = false;

  bool operator==(const TokenIds &other) const {
    return ids == other.ids && list == other.list;
  }
};

/// The hyper-parameters of a LLaMA-architecture model.
struct LlamaConfig {
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t intermediateSize = 0;
  int64_t numLayers = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0;
  int64_t headDim = 0;
  int64_t maxPositionEmbeddings = 2048;
  double rmsNormEps = 1e-6;
  double ropeTheta = 10000.0;
  bool tieWordEmbeddings = false;
  /// The rotary scaling (`rope_type: "llama3"`), or none.
  rt::RopeScaling ropeScaling;
  /// The special-token ids, where the config gives them (no op reads them:
  /// they are written back into exported configs).
  std::optional<TokenIds> bosTokenId, eosTokenId, padTokenId;

  /// Checks what the IR builder relies on; the error names the field.
  llvm::Error verify() const;

  /// Number of trainable parameters (embedding and head counted once if tied).
  int64_t numParameters() const;

  LlamaConfigAttr toAttr(mlir::MLIRContext *context) const;
  static LlamaConfig fromAttr(LlamaConfigAttr attr);
};

/// Parses the text of an HF `config.json`. Accepts both spellings of the rotary
/// base and scaling (`rope_theta` and `rope_scaling`, and transformers 5's
/// `rope_parameters`), with the scaling `rope_type` "default" or "llama3"
/// (factor, low_freq_factor, high_freq_factor,
/// original_max_position_embeddings, the last defaulting as transformers 5
/// does) and keeps the special-token ids (bos_token_id, eos_token_id,
/// pad_token_id: an integer or a list of integers each); rejects features the model IR does not express (biases, other rope
/// scalings, activations other than SiLU) with an error naming the field.
/// `source` names the file in messages.
llvm::Expected<LlamaConfig> parseHFLlamaConfig(llvm::StringRef json,
                                               llvm::StringRef source);

/// Reads `path`: a `config.json` file, or a directory holding one.
llvm::Expected<LlamaConfig> readHFLlamaConfig(llvm::StringRef path);

/// Options of the IR builder.
struct LlamaBuildOptions {
  /// Element type of parameters and activations: "f32", "bf16", "f16", "f64".
  std::string dtype = "f32";
};

/// Builds the module of a LLaMA model: `mlt.param` declarations with HF names,
/// and `func.func @forward(%tokens, %labels) -> tensor<f32>` computing the
/// mean cross-entropy, with the decoder layer written once in `mlt.repeat`.
/// Batch and sequence dimensions are dynamic.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
buildLlamaModule(mlir::MLIRContext &context, const LlamaConfig &config,
                 const LlamaBuildOptions &options = {});

} // namespace mlt

#endif // MLT_IMPORT_HFLLAMA_H
