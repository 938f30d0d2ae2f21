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

// A special-token id of an HF config.json, kept as the config wrote it: one
// id (an i64 IntegerAttr, printed `2`) or a list of them (a
// DenseI64ArrayAttr, printed `[128001, 128008, 128009]`: Llama 3.1's
// eos_token_id); absent when the config has none (or null).
def MLT_TokenIdParameter
    : AttrParameter<"::mlir::Attribute",
                    "a special-token id, or a list of them"> {
  let parser = "::mlt::parseTokenIds($_parser)";
  let printer = "::mlt::printTokenIds($_printer, $_self)";
  let defaultValue = "::mlir::Attribute()";
}

def MLT_Llama3RopeScalingAttr
    : MLT_Attr<"Llama3RopeScaling", "llama3_rope_scaling"> {
  let summary = "Llama 3.1's rotary scaling (HF rope_type \"llama3\")";
  let description = [{
    How the inverse frequencies of a rotary embedding are rescaled for a
    longer context, as Hugging Face's `rope_type: "llama3"` does (Llama 3.1,
    3.2). With `wavelen = 2 pi / inv_freq` and `original =
    original_max_position_embeddings`: a frequency of wavelength below
    `original / high_freq_factor` is kept, one above `original /
    low_freq_factor` is divided by `factor`, and those between are
    interpolated smoothly (`mlt/Plan/RopeFrequencies.h` holds the formula
    that the kernels compute).

    The HF importer creates it from `rope_scaling` / `rope_parameters`, for
    the module's `#mlt.llama` config (which `--save-hf` writes back) and for
    every `mlt.rope` of the model; `mlt-autodiff` copies it onto the inverse
    rotations, and `mlt-lower-to-runtime` writes it into the rope kernel's
    attributes.

    Checked as the runtime checks it: `factor` >= 1, 0 < `low_freq_factor`
    < `high_freq_factor`, `original_max_position_embeddings` > 0.

    Example (Llama-3.2-1B's):
    ```mlir
    #mlt.llama3_rope_scaling<factor = 3.200000e+01 : f64,
        low_freq_factor = 1.000000e+00 : f64,
        high_freq_factor = 4.000000e+00 : f64,
        original_max_position_embeddings = 8192>
    ```
  }];
  let parameters = (ins
    "::mlir::FloatAttr":$factor,
    "::mlir::FloatAttr":$low_freq_factor,
    "::mlir::FloatAttr":$high_freq_factor,
    "int64_t":$original_max_position_embeddings
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The scaling as the runtime's kernels take it.
    ::mlt::rt::RopeScaling toRopeScaling() const;
    /// The attribute of a llama3 `scaling` (checked by the verifier).
    static Llama3RopeScalingAttr get(::mlir::MLIRContext *context,
                                     const ::mlt::rt::RopeScaling &scaling);
  }];
}

def MLT_LlamaConfigAttr : MLT_Attr<"LlamaConfig", "llama"> {
  let summary = "hyper-parameters of a LLaMA model, as in a Hugging Face config.json";
  let description = [{
    The configuration of a LLaMA-architecture model. The HF importer creates it
    from `config.json` and places it on the module as `mlt.model`; tools read it
    to check run settings (the maximum sequence length) and to write
    `config.json` back when saving a checkpoint. The ops of the model carry the
    values they need themselves (`eps`, `theta`, the rotary `scaling`), so
    passes never look it up. `rope_scaling` is absent for unscaled rotary
    embeddings, else a `#mlt.llama3_rope_scaling`.

    `bos_token_id`, `eos_token_id` and `pad_token_id` are the config's
    special-token ids, each one id or a list of ids (Llama 3.1's
    `eos_token_id` lists three) as the config wrote it, absent where it has
    none. No op reads them: they are carried so that the `config.json` and
    `generation_config.json` an export writes say what the imported one said
    (the attribute is the one source of the exported config).

    Example:
    ```mlir
    module attributes {mlt.model = #mlt.llama<vocab_size = 256, hidden_size = 64,
        intermediate_size = 176, num_layers = 2, num_heads = 4, num_kv_heads = 2,
        head_dim = 16, max_position_embeddings = 2048, rms_norm_eps = 1.0e-05,
        rope_theta = 1.0e+04, tie_word_embeddings = false, bos_token_id = 1,
        eos_token_id = [2, 3]>} {
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
    "::mlir::BoolAttr":$tie_word_embeddings,
    OptionalParameter<"Llama3RopeScalingAttr">:$rope_scaling,
    MLT_TokenIdParameter:$bos_token_id,
    MLT_TokenIdParameter:$eos_token_id,
    MLT_TokenIdParameter:$pad_token_id
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def MLT_MeshAttr : MLT_Attr<"Mesh", "mesh"> {
  let summary = "a device mesh: named axes with their sizes";
  let description = [{
    The devices a program runs on, as a row-major grid of named axes (the last
    axis varies fastest, so ranks adjacent in the last axis are neighbours:
    put `tp` last to keep tensor-parallel groups on one NVLink island). A
    module carries its mesh as `mlt.mesh`; shardings name its axes. Axis names
    are unique; sizes are at least 1.

    Example:
    ```mlir
    module attributes {mlt.mesh = #mlt.mesh<dp = 2, tp = 4>} {}
    ```

    Why not the upstream `shard.grid`: its axes are numbered, not named, and a
    grid is an op that shardings reference by symbol; mlt's layouts (and the
    plan file, and mlt-run's flags) speak of `dp` and `tp`, as Shardy does.
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::StringAttr">:$axes,
                        ArrayRefParameter<"int64_t">:$sizes);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The index of axis `name`, or -1.
    int64_t axisIndex(::llvm::StringRef name) const;
    /// The size of axis `name`; 1 for a null name.
    int64_t axisSize(::mlir::StringAttr name) const;
    /// The product of the axis sizes: the number of ranks.
    int64_t numRanks() const;
    /// The coordinate of `rank` on axis `axis` (row-major, last axis fastest).
    int64_t coordinate(int64_t rank, int64_t axis) const;
  }];
}

def MLT_ShardingAttr : MLT_Attr<"Sharding", "sharding"> {
  let summary = "how a tensor is laid out over the mesh: per dimension, axes";
  let description = [{
    One entry per dimension of the tensor: the mesh axes the dimension is
    split over, major first (`cp*tp`: in cp blocks, each cut in tp blocks;
    the rank with coordinates `c` on cp and `t` on tp holds block
    `c * size(tp) + t`), `-` for a dimension every rank holds whole, or `?`
    for a dimension whose sharding is still open (sharding propagation
    decides it; after propagation no `?` remains). `partial` lists the axes
    over which the value is a partial sum: the true value is the sum of the
    ranks' values along those axes (what a contraction over a split
    dimension leaves before its all-reduce). A mesh axis appears at most
    once in a sharding. The sharding of a scalar is `[]`.

    Examples:
    ```mlir
    #mlt.sharding<[tp, -]>                   // rows split over tp (column-parallel weight)
    #mlt.sharding<[dp, ?, ?]>                // batch split over dp, the rest open
    #mlt.sharding<[dp, -, -], partial = [tp]> // the output of a row-parallel matmul
    #mlt.sharding<[dp, cp*tp, -]>            // the residual stream under cp and sequence parallelism
    ```

    Stored as one array of axis names per dimension (empty: whole; the one
    name `?`: open, which no mesh axis may be called), as Shardy's
    dimension shardings are.
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::ArrayAttr">:$dims,
                        ArrayRefParameter<"::mlir::StringAttr">:$partial);
  let builders = [
    /// One axis (or none) per dimension: an axis name, kOpen or kReplicated.
    AttrBuilder<(ins "::llvm::ArrayRef<::mlir::StringAttr>":$axes,
                     "::llvm::ArrayRef<::mlir::StringAttr>":$partial)>,
    /// Axes per dimension, major first; `open` marks open dimensions
    /// (empty: none), whose axes must be empty.
    AttrBuilder<(ins "::llvm::ArrayRef<::llvm::SmallVector<::mlir::StringAttr, 2>>":$dims,
                     "::llvm::ArrayRef<::mlir::StringAttr>":$partial,
                     CArg<"::llvm::ArrayRef<bool>", "{}">:$open)>,
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The axes one dimension is split over, major first.
    using DimAxes = ::llvm::SmallVector<::mlir::StringAttr, 2>;
    /// Spellings of the two non-axis entries in the one-axis builder; an
    /// open dimension is stored as the array of kOpen alone.
    static constexpr ::llvm::StringLiteral kOpen = "?";
    static constexpr ::llvm::StringLiteral kReplicated = "";
    unsigned getRank() const { return getDims().size(); }
    bool isOpen(unsigned dim) const;
    /// The axes dimension `dim` is split over, major first; empty for a
    /// whole or open dimension.
    DimAxes getAxes(unsigned dim) const;
    /// Whether some dimension is split over two axes or more.
    bool hasMultiAxisDim() const;
    /// The dimension split over `axis` (alone or with others), or -1.
    int64_t dimOf(::llvm::StringRef axis) const;
    bool isPartialOver(::llvm::StringRef axis) const;
    /// No split dimension and no partial axis.
    bool isFullyReplicated() const;
    /// Every rank holds the whole value: no split dimension, no partial axis.
    static ShardingAttr getReplicated(::mlir::MLIRContext *context, unsigned rank);
    /// The sharding an op of one result carries as `mlt.sharding`: `attr`
    /// itself, or the one element of an array (the form the attribute
    /// verifier accepts on any op, as mlt-lower-to-runtime writes it on
    /// buffers); null for anything else, or no attribute.
    static ShardingAttr ofSingleResult(::mlir::Attribute attr);
    /// Checks this sharding against a tensor type and a mesh: axes in the
    /// mesh, each dimension divisible by its axes' product. Returns the
    /// failure text.
    std::optional<std::string> checkFits(::mlir::ArrayRef<int64_t> shape,
                                         MeshAttr mesh) const;
    /// The number of blocks dimension `dim` is cut into: the product of its
    /// axes' sizes.
    int64_t blocks(unsigned dim, MeshAttr mesh) const;
    /// The block of a `shape` tensor that each rank holds.
    ::llvm::SmallVector<int64_t> localShape(::mlir::ArrayRef<int64_t> shape,
                                            MeshAttr mesh) const;
  }];
}

#endif // MLT_DIALECT_MLT_MLTATTRS_TD
