//===- MLTOps.td - mlt model ops ---------------------------*- tablegen -*-===//
//
// Part of mlt. The ops of a LLaMA forward pass and loss. Shapes follow one
// convention throughout: activations are [batch, seq, hidden] and per-head
// tensors are [batch, seq, heads, head_dim] (heads after the sequence, as flash
// attention stores them, so no transposes are needed around attention). Weights
// keep Hugging Face's layout: a linear layer's weight is [out, in].
//
// Every op with a computable result type implements InferTypeOpInterface: its
// `inferReturnTypes` is also its shape verifier, so the parser, the builders
// and the verifier share one set of rules.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_MLT_MLTOPS_TD
#define MLT_DIALECT_MLT_MLTOPS_TD

include "mlt/Dialect/MLT/MLTDialect.td"
include "mlt/Dialect/MLT/MLTAttrs.td"
include "mlt/Dialect/MLT/MLTInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def MLT_FloatElement : AnyTypeOf<[F16, BF16, F32, F64]>;
def MLT_FloatTensor : RankedTensorOf<[F16, BF16, F32, F64]>;
def MLT_TokenTensor : RankedTensorOf<[I32, I64]>;
def MLT_ScalarLoss : 0DTensorOf<[F32, F64]>;

def MLT_PositiveFloat : AttrConstraint<
    CPred<"::llvm::cast<::mlir::FloatAttr>($_self).getValueAsDouble() > 0.0">,
    "whose value is positive">;

// Pure ops name their results after themselves (`%rms_norm`, `%matmul_3`) so
// that printed models read without a key.
// Ops that autodiff differentiates implement the gradient interface.
def MLT_Differentiable : DeclareOpInterfaceMethods<MLT_GradientOpInterface>;

class MLT_PureOp<string mnemonic, list<Trait> traits = []>
    : MLT_Op<mnemonic, !listconcat(traits, [Pure,
        DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>])> {
  let extraClassDefinition = [{
    void $cppClass::getAsmResultNames(::mlir::OpAsmSetValueNameFn setNameFn) {
      setNameFn(getResult(), getOperationName().split('.').second);
    }
  }];
}

class MLT_InferredOp<string mnemonic, list<Trait> traits = []>
    : MLT_PureOp<mnemonic, !listconcat(traits, [InferTypeOpAdaptor])>;

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

def MLT_ParamOp : MLT_Op<"param", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "declares a trainable parameter, or a family of per-layer parameters";
  let description = [{
    Declares a model parameter by its Hugging Face name. The importer and the
    model files create it; `mlt.load` reads it; the training passes (autodiff,
    the optimizer) give each one a gradient and optimizer state, and the weight
    loader matches checkpoint tensors by name.

    With `layers N` it declares N parameters of the same shape, one per decoder
    layer; the name then holds `{}` where the layer index goes, and
    `model.layers.{}.mlp.up_proj.weight` stands for `model.layers.0.mlp.up_proj.weight`
    to `model.layers.(N-1).mlp.up_proj.weight`. With `layers N from K` it
    declares layers K to N-1 only (a pipeline stage's share of the family,
    which `mlt-partition-pipeline` gives each stage; the names keep the
    model's layer numbers).

    Example:
    ```mlir
    mlt.param @"model.embed_tokens.weight" : tensor<256x64xf32>
    mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 2 : tensor<64x64xf32>
    mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 8 from 4 : tensor<176x64xf32>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<MLT_FloatTensor>:$type,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$layers,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$first_layer);
  let assemblyFormat =
      "$sym_name (`layers` $layers^)? (`from` $first_layer^)? attr-dict `:` $type";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The tensor type of one parameter (of one layer, for a family).
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
    /// Whether this declares one parameter per layer.
    bool isPerLayer() { return getLayers().has_value(); }
    /// The layers declared, [begin, end): [0, 1) for a plain parameter.
    int64_t getLayerBegin() { return getFirstLayer().value_or(0); }
    int64_t getLayerEnd() { return getLayers().value_or(1); }
    /// The Hugging Face name of the parameter of `layer` (ignored unless per-layer).
    std::string getHFName(int64_t layer = 0);
  }];
}

def MLT_LoadOp : MLT_PureOp<"load", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, MLT_Differentiable]> {
  let summary = "reads a parameter (for per-layer parameters, the given layer's)";
  let description = [{
    Produces the value of the parameter declared by `mlt.param`. For a per-layer
    family, the layer index operand (usually the induction variable of the
    enclosing `mlt.repeat`) selects the layer. The result type must be the
    declared tensor type.

    Example:
    ```mlir
    %embed = mlt.load @"model.embed_tokens.weight" : tensor<256x64xf32>
    %wq = mlt.load @"model.layers.{}.self_attn.q_proj.weight"[%layer] : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name, Optional<Index>:$layer);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = "$name (`[` $layer^ `]`)? attr-dict `:` type($result)";
  // Named after the parameter: `%q_proj` for `model.layers.{}.self_attn.q_proj.weight`.
  let extraClassDefinition = [{
    void $cppClass::getAsmResultNames(::mlir::OpAsmSetValueNameFn setNameFn) {
      setNameFn(getResult(), getShortParamName(getName()));
    }
  }];
  let extraClassDeclaration = [{
    /// The last component of a parameter name that is not `weight`.
    static ::llvm::StringRef getShortParamName(::llvm::StringRef name);
  }];
}

//===----------------------------------------------------------------------===//
// Layer structure
//===----------------------------------------------------------------------===//

def MLT_RepeatOp : MLT_Op<"repeat", [
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "runs its body once per layer, threading values from one layer to the next";
  let description = [{
    Expresses a stack of identical decoder layers once. The body runs for
    `%layer` = `lower`, ..., `upper - 1`; its block arguments are the layer index
    and the carried values, initialized by `iter_args` and replaced by what the
    body yields. The results are the values yielded by the last layer.

    The model files and the importer create it; `mlt-unroll-layers` expands it.
    Pipeline partitioning splits its range across stages, and autodiff turns it
    into a reverse repeat over the layers' gradients.

    Example:
    ```mlir
    %out = mlt.repeat %layer = 0 to 22 iter_args(%h = %embedded) -> (tensor<?x?x2048xbf16>) {
      %w = mlt.load @"model.layers.{}.input_layernorm.weight"[%layer] : tensor<2048xbf16>
      %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x2048xbf16>, tensor<2048xbf16>
      ...
      mlt.yield %next : tensor<?x?x2048xbf16>
    }
    ```
  }];
  let arguments = (ins I64Attr:$lower, I64Attr:$upper, Variadic<AnyType>:$inits);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    OpBuilder<(ins "int64_t":$lower, "int64_t":$upper, "::mlir::ValueRange":$inits)>
  ];
  let extraClassDeclaration = [{
    /// The layer index of the current iteration.
    ::mlir::BlockArgument getLayerIndex() { return getBody().getArgument(0); }
    /// The values carried from one layer to the next, inside the body.
    ::mlir::Block::BlockArgListType getIterArgs() {
      return getBody().getArguments().drop_front();
    }
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
    int64_t getNumLayers() { return getUpper() - getLower(); }
  }];
}

def MLT_YieldOp : MLT_Op<"yield", [Pure, Terminator, ReturnLike, HasParent<"RepeatOp">]> {
  let summary = "ends a layer of `mlt.repeat`, passing values to the next layer";
  let description = [{
    Terminates the body of `mlt.repeat`. Its operands become the carried values
    of the next layer, or the results of the repeat after the last one.

    Example:
    ```mlir
    mlt.yield %h2 : tensor<?x?x64xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$values);
  let builders = [OpBuilder<(ins), [{ /* nothing to yield */ }]>];
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

//===----------------------------------------------------------------------===//
// Layers
//===----------------------------------------------------------------------===//

def MLT_EmbeddingOp : MLT_InferredOp<"embedding", [MLT_Differentiable]> {
  let summary = "looks up token embeddings";
  let description = [{
    `result[..., :] = table[ids[...], :]`. The ids are `[batch, seq]` integers in
    `[0, vocab)`; the table is `[vocab, hidden]`; the result is
    `[batch, seq, hidden]` in the table's element type.

    Example:
    ```mlir
    %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<256x64xf32>
    ```
  }];
  let arguments = (ins MLT_TokenTensor:$ids, MLT_FloatTensor:$table);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = "$ids `,` $table attr-dict `:` type($ids) `,` type($table)";
}

def MLT_MatmulOp : MLT_InferredOp<"matmul", [MLT_Differentiable]> {
  let summary = "batched matrix product, with optional transposes of either operand";
  let description = [{
    Multiplies the last two dimensions of `lhs` and `rhs`; leading dimensions of
    `lhs` are batch dimensions. `rhs` is either a matrix, shared by every batch
    entry (a weight), or has the same batch dimensions as `lhs`.
    `transpose_lhs` / `transpose_rhs` swap the last two dimensions of the
    operand before the product. A linear layer with a Hugging Face weight
    `[out, in]` is `matmul %x, %w transpose_rhs`.

    With `lhs : [b..., m, k]` and `rhs : [k, n]` the result is `[b..., m, n]`.
    Accumulation is in at least float32 whatever the element type.

    `contract_batch` (with `transpose_lhs`, not `transpose_rhs`) sums over the
    batch dimensions as well: `lhs : [b..., k, m]`, `rhs : [b..., k, n]` give
    `[m, n]`. That is the gradient of a weight shared by every batch entry,
    written without flattening `[batch, seq]` into one dimension, so that a
    batch split over `dp` and a sequence split over `tp` stay visible to
    sharding propagation.

    Example:
    ```mlir
    %q = mlt.matmul %x, %wq transpose_rhs : tensor<?x?x64xf32>, tensor<64x64xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$lhs, MLT_FloatTensor:$rhs,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs,
                       UnitAttr:$contract_batch);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs (`transpose_lhs` $transpose_lhs^)? (`transpose_rhs` $transpose_rhs^)?
    (`contract_batch` $contract_batch^)? attr-dict `:` type($lhs) `,` type($rhs)
  }];
}

def MLT_RMSNormOp : MLT_InferredOp<"rms_norm", [MLT_Differentiable]> {
  let summary = "root-mean-square normalization over the last dimension, scaled by a weight";
  let description = [{
    `result = input / sqrt(mean(input^2, last dim) + eps) * weight`, with the
    statistics in at least float32 (as LlamaRMSNorm). `weight` has the size of
    the last dimension.

    Example:
    ```mlir
    %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$input, MLT_FloatTensor:$weight,
                       ConfinedAttr<F64Attr, [MLT_PositiveFloat]>:$epsilon);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `eps` `=` $epsilon attr-dict `:` type($input) `,` type($weight)
  }];
}

def MLT_RopeOp : MLT_InferredOp<"rope", [MLT_Differentiable]> {
  let summary = "rotary position embedding of per-head vectors";
  let description = [{
    Rotates each head vector of `input : [batch, seq, heads, head_dim]` by its
    position along `seq` (position `s` for index `s`), with frequencies
    `theta^(-2i/head_dim)`, pairing element `i` with `i + head_dim/2` (the
    "rotate half" convention of Hugging Face LLaMA). `head_dim` must be even.
    With `scaling` (Llama 3.1's rotary scaling, `#mlt.llama3_rope_scaling`)
    the frequencies are rescaled as HF's `rope_type: "llama3"` does.
    With `inverse` it rotates by the opposite angle: the adjoint, which
    `mlt-autodiff` creates as the gradient of a rotation (with the same
    `theta` and `scaling`). `mlt-lower-to-runtime` turns it into the `rope`
    kernel, the scaling into that kernel's attributes.

    Example:
    ```mlir
    %qr = mlt.rope %q theta = 1.0e+04 : tensor<?x?x4x16xf32>
    %kr = mlt.rope %k theta = 5.0e+05 scaling = <factor = 3.2e+01 : f64,
        low_freq_factor = 1.0 : f64, high_freq_factor = 4.0 : f64,
        original_max_position_embeddings = 8192> : tensor<?x?x8x64xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$input,
                       ConfinedAttr<F64Attr, [MLT_PositiveFloat]>:$theta,
                       OptionalAttr<MLT_Llama3RopeScalingAttr>:$scaling,
                       UnitAttr:$inverse);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = [{
    $input `theta` `=` $theta (`scaling` `=` $scaling^)? (`inverse` $inverse^)?
    attr-dict `:` type($input)
  }];
  let extraClassDeclaration = [{
    /// The rotary scaling as the kernels take it (kind none without one).
    ::mlt::rt::RopeScaling getRopeScaling();
  }];
}

def MLT_AttentionOp : MLT_InferredOp<"attention", [MLT_Differentiable]> {
  let summary = "scaled dot-product attention with grouped-query heads";
  let description = [{
    `softmax(q k^T * scale + mask) v` per batch entry and head, where
    `q : [batch, seq, q_heads, head_dim]` and `k`, `v :
    [batch, seq, kv_heads, head_dim]`. `q_heads` must be a multiple of
    `kv_heads`; query head `h` attends with key/value head
    `h / (q_heads / kv_heads)` (grouped-query attention). With `causal`,
    position `i` attends to positions `<= i`. The result has `q`'s shape.

    In a per-rank program of context parallelism (`mlt.sequence_shard =
    "cp"`, set by mlt-spmdize) the keys and values are the whole sequence
    in its load-balanced order, and the queries the rank's block of it
    (`cp` times fewer rows: the gathered keys and values) or the whole
    sequence too (as many rows: the all-to-all exchange, the rank holding
    some of the heads).

    Example:
    ```mlir
    %o = mlt.attention %q, %k, %v causal scale = 0.25
        : tensor<?x?x4x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$query, MLT_FloatTensor:$key,
                       MLT_FloatTensor:$value, UnitAttr:$causal,
                       ConfinedAttr<F64Attr, [MLT_PositiveFloat]>:$scale);
  let results = (outs MLT_FloatTensor:$result);
  let hasVerifier = 1;
  let assemblyFormat = [{
    $query `,` $key `,` $value (`causal` $causal^)? `scale` `=` $scale attr-dict
    `:` type($query) `,` type($key) `,` type($value)
  }];
}

def MLT_SwiGLUOp : MLT_PureOp<"swiglu", [AllTypesMatch<["gate", "up", "result"]>, MLT_Differentiable]> {
  let summary = "SwiGLU gating: silu(gate) * up";
  let description = [{
    `result = gate * sigmoid(gate) * up`, elementwise; both operands and the
    result have the same type. The LLaMA MLP is
    `down(swiglu(gate(x), up(x)))`.

    Example:
    ```mlir
    %a = mlt.swiglu %gate, %up : tensor<?x?x176xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$gate, MLT_FloatTensor:$up);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($gate)";
}

def MLT_SiLUOp : MLT_PureOp<"silu", [AllTypesMatch<["input", "result"]>, MLT_Differentiable]> {
  let summary = "elementwise SiLU (swish): x * sigmoid(x)";
  let description = [{
    Example:
    ```mlir
    %a = mlt.silu %x : tensor<?x?x176xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$input);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

class MLT_BinaryOp<string mnemonic, string op, list<Trait> traits = []>
    : MLT_PureOp<mnemonic, !listconcat(traits, [AllTypesMatch<["lhs", "rhs", "result"]>, MLT_Differentiable])> {
  let summary = "elementwise " # op # " of two tensors of the same type";
  let arguments = (ins MLT_FloatTensor:$lhs, MLT_FloatTensor:$rhs);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs)";
}

def MLT_AddOp : MLT_BinaryOp<"add", "sum", [Commutative]> {
  let description = [{
    Elementwise sum; the residual connections of a decoder layer. No
    broadcasting: both operands and the result have the same type.

    Example:
    ```mlir
    %h2 = mlt.add %h, %attn_out : tensor<?x?x64xf32>
    ```
  }];
}

def MLT_MulOp : MLT_BinaryOp<"mul", "product", [Commutative]> {
  let description = [{
    Elementwise product, without broadcasting.

    Example:
    ```mlir
    %p = mlt.mul %a, %b : tensor<?x?x176xf32>
    ```
  }];
}

//===----------------------------------------------------------------------===//
// Shapes and types
//===----------------------------------------------------------------------===//

def MLT_ReshapeOp : MLT_PureOp<"reshape", [MLT_Differentiable]> {
  let summary = "changes the shape of a tensor, keeping its elements in row-major order";
  let description = [{
    Reinterprets `input` with the result's shape. Static dimensions must hold
    the same number of elements on both sides, and the dynamic dimensions
    (batch, sequence) must stay dynamic, in the same order: a reshape splits or
    merges static dimensions only. Used to split the hidden dimension into
    heads and back.

    Example:
    ```mlir
    %q4 = mlt.reshape %q : tensor<?x?x64xf32> -> tensor<?x?x4x16xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$input);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def MLT_TransposeOp : MLT_InferredOp<"transpose", [MLT_Differentiable]> {
  let summary = "permutes the dimensions of a tensor";
  let description = [{
    `result` dimension `i` is `input` dimension `permutation[i]`.

    Example:
    ```mlir
    %t = mlt.transpose %x [0, 2, 1, 3] : tensor<?x?x4x16xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = "$input $permutation attr-dict `:` type($input)";
}

def MLT_CastOp : MLT_PureOp<"cast", [MLT_Differentiable]> {
  let summary = "converts a tensor to another floating-point element type";
  let description = [{
    Rounds to nearest-even when narrowing (float32 to bfloat16). The shape is
    unchanged. Mixed precision inserts it between float32 master weights and
    bfloat16 compute.

    Example:
    ```mlir
    %wb = mlt.cast %w : tensor<64x64xf32> -> tensor<64x64xbf16>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$input);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

def MLT_CrossEntropyOp : MLT_InferredOp<"cross_entropy", [MLT_Differentiable]> {
  let summary = "mean softmax cross-entropy of logits against integer labels";
  let description = [{
    `result = mean over all positions p of (logsumexp(logits[p, :]) -
    logits[p, labels[p]])`, for `logits : [batch, seq, vocab]` and
    `labels : [batch, seq]` in `[0, vocab)`. The loss is a float32 scalar (float64
    for float64 logits), computed in at least float32 whatever the logits' type.

    Example:
    ```mlir
    %loss = mlt.cross_entropy %logits, %labels : tensor<?x?x256xf32>, tensor<?x?xi32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$logits, MLT_TokenTensor:$labels);
  let results = (outs MLT_ScalarLoss:$result);
  let assemblyFormat = "$logits `,` $labels attr-dict `:` type($logits) `,` type($labels)";
}

include "mlt/Dialect/MLT/MLTTrainingOps.td"
include "mlt/Dialect/MLT/MLTShardingOps.td"
include "mlt/Dialect/MLT/MLTPipelineOps.td"

#endif // MLT_DIALECT_MLT_MLTOPS_TD
