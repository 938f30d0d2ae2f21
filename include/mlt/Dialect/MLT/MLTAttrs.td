//===- MLTAttrs.td - mlt attributes ------------------------*- tablegen -*-===//
//
// Part of mlt. Attributes of the `mlt` dialect: the model configuration that a
// module carries (`#mlt.llama<...>`), mirroring a Hugging Face LLaMA config.json.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_MLT_MLTATTRS_TD
#define MLT_DIALECT_MLT_MLTATTRS_TD

include "mlt/Dialect/MLT/MLTDialect.td"
include "mlir/IR/AttrTypeBase.td"

class MLT_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<MLT_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def MLT_LlamaConfigAttr : MLT_Attr<"LlamaConfig", "llama"> {
  let summary = "hyper-parameters of a LLaMA model, as in a Hugging Face config.json";
  let description = [{
    The configuration of a LLaMA-architecture model. The HF importer creates it
    from `config.json` and places it on the module as `mlt.model`; tools read it
    to check run settings (the maximum sequence length) and to write
    `config.json` back when saving a checkpoint. The ops of the model carry the
    values they need themselves (`eps`, `theta`), so passes never look it up.

    Example:
    ```mlir
    module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
        intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
        head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
        rope_theta = 1.0e+04, tie_word_embeddings = false>} {
    }
    ```
  }];
  let parameters = (ins
    "int64_t":$vocab_size,
    "int64_t":$hidden_size,
    "int64_t":$intermediate_size,
    "int64_t":$num_layers,
    "int64_t":$num_heads,
    "int64_t":$num_kv_heads,
    "int64_t":$head_dim,
    "int64_t":$max_position_embeddings,
    "::mlir::FloatAttr":$rms_norm_eps,
    "::mlir::FloatAttr":$rope_theta,
    "::mlir::BoolAttr":$tie_word_embeddings
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // MLT_DIALECT_MLT_MLTATTRS_TD
