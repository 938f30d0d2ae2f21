//===- MLTDialect.td - the mlt model dialect ---------------*- tablegen -*-===//
//
// Part of mlt. The `mlt` dialect holds a LLaMA model's forward pass and loss at the
// granularity that autodiff, sharding propagation and pipeline partitioning reason
// about: one op per layer-level computation (matmul, RMSNorm, rotary embedding,
// attention, SwiGLU, cross-entropy), parameters as named symbols, and the decoder
// layer written once inside `mlt.repeat`.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_MLT_MLTDIALECT_TD
#define MLT_DIALECT_MLT_MLTDIALECT_TD

include "mlir/IR/OpBase.td"

def MLT_Dialect : Dialect {
  let name = "mlt";
  let cppNamespace = "::mlt";
  let summary = "LLaMA model ops: forward pass and loss, ready for autodiff and sharding";
  let description = [{
    The `mlt` dialect describes the forward pass and the loss of a decoder-only
    transformer (LLaMA) on ranked tensors. Batch and sequence dimensions are
    usually dynamic (`?`) in model files; the tools specialize them when they
    know the run's batch and sequence length.

    Parameters are module-level symbols (`mlt.param`) named as in Hugging Face
    checkpoints. A decoder layer is written once, inside `mlt.repeat`, and reads
    per-layer parameters with `mlt.load ...[%layer]`, so a 70B model is as short
    as a tiny one. The module carries the model's hyper-parameters in the
    `mlt.model` attribute (`#mlt.llama<...>`), from which configs are exported.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::func::FuncDialect"];
  let extraClassDeclaration = [{
    /// Name of the module attribute that holds the model's configuration.
    static constexpr ::llvm::StringLiteral getModelAttrName() { return "mlt.model"; }
    /// Name of the attribute that tells which layer an unrolled op belongs to.
    static constexpr ::llvm::StringLiteral getLayerAttrName() { return "mlt.layer"; }
    /// Name of the attribute with which mlt-autodiff records, on the function
    /// it creates, how many micro-batches a step accumulates.
    static constexpr ::llvm::StringLiteral getMicrobatchesAttrName() {
      return "mlt.microbatches";
    }
    /// Name of the module attribute that holds the device mesh.
    static constexpr ::llvm::StringLiteral getMeshAttrName() { return "mlt.mesh"; }
    /// Name of the attribute with a value's sharding: on `mlt.param` (the
    /// parameter's, user-given), on function arguments (user-given), and,
    /// after mlt-propagate-shardings, on every op as the array of its
    /// results' shardings.
    static constexpr ::llvm::StringLiteral getShardingAttrName() { return "mlt.sharding"; }
    /// Name of the array attribute with the shardings an op needs its
    /// operands in (set by mlt-propagate-shardings, read by mlt-spmdize).
    static constexpr ::llvm::StringLiteral getOperandShardingsAttrName() {
      return "mlt.operand_shardings";
    }
    /// On per-rank embeddings and cross-entropies: the axis the vocabulary
    /// is split over.
    static constexpr ::llvm::StringLiteral getVocabShardAttrName() { return "mlt.vocab_shard"; }
    /// On per-rank ropes and attentions of context parallelism: the axis
    /// in whose load-balanced order their sequence is. A rope's rows, and
    /// an attention's queries where its keys have the axis's size times
    /// as many, are the rank's block of it (positions from the rank's
    /// coordinate); an attention's queries with as many rows as its keys
    /// are the whole sequence in that order (the all-to-all exchange).
    static constexpr ::llvm::StringLiteral getSequenceShardAttrName() { return "mlt.sequence_shard"; }
    /// On attentions (set by mlt-annotate-layout, carried to their
    /// gradients by mlt-autodiff): how context parallelism gives them the
    /// whole sequence, "a2a" (the all-to-all exchange: mlt-propagate-
    /// shardings moves the context axis from the sequence to the heads, so
    /// that mlt-spmdize exchanges the operands all-to-all) or "ring" (laid
    /// out as the gather; mlt-ring-attention then passes the key/value
    /// blocks around the ring instead); without it the keys and values are
    /// gathered.
    static constexpr ::llvm::StringLiteral getContextExchangeAttrName() {
      return "mlt.cp_comm";
    }
    /// On per-rank cross-entropies: the global number of rows the mean is over.
    static constexpr ::llvm::StringLiteral getRowCountAttrName() { return "mlt.row_count"; }
    /// Unit attribute on a forward op that mlt-recompute-activations cloned
    /// into the backward pass, where it recomputes a value that the forward
    /// pass no longer keeps.
    static constexpr ::llvm::StringLiteral getRecomputedAttrName() { return "mlt.recomputed"; }
    /// Unit attribute on the constant with which mlt-autodiff seeds the
    /// loss's gradient (and on a pipeline stage's receive of the gradient
    /// of what it sent): the backward pass starts at its first use, which
    /// is where mlt-lower-to-runtime records that a micro-step's backward
    /// launches begin (and mlt-schedule-pipeline may split it there).
    static constexpr ::llvm::StringLiteral getLossSeedAttrName() { return "mlt.loss_seed"; }
    /// On a nested module that mlt-partition-pipeline made: the pipeline
    /// stage it holds (its ranks' coordinate on the mesh axis `pp`).
    static constexpr ::llvm::StringLiteral getStageAttrName() { return "mlt.stage"; }
    /// On a nested module of an interleaved pipeline (mlt-partition-pipeline
    /// with `chunks` > 1): the model chunk it holds, c, of its stage's
    /// ranks, which hold virtual stage c * P + s; mlt-merge-chunks merges a
    /// stage's chunk modules into one.
    static constexpr ::llvm::StringLiteral getChunkAttrName() { return "mlt.chunk"; }
    /// On a stage module of an interleaved pipeline after mlt-merge-chunks:
    /// the model chunks it holds, whose programs and temporaries are named
    /// `c<chunk>.` (`c1.micro_step`, `c1.t5`).
    static constexpr ::llvm::StringLiteral getChunksAttrName() { return "mlt.chunks"; }
    /// The mesh axis of pipeline stages (mlt-annotate-layout puts it first),
    /// by its name in the layout's axis table (mlt/Layout/Layout.h).
    static constexpr ::llvm::StringRef getPipelineAxisName() {
      return ::mlt::axisName(::mlt::ParallelAxis::Pipeline);
    }
    /// On a parameter that several pipeline stages use (tied embeddings:
    /// the first stage's embedding, the last's LM head): the stage whose
    /// gradient norm counts it. The stages holding it sum its gradient
    /// over `pp` before the update (mlt-spmdize), so their copies stay
    /// bit-identical.
    static constexpr ::llvm::StringLiteral getTiedAttrName() { return "mlt.tied"; }
    /// On a module split into pipeline stages: each stage's predicted time
    /// (relative: its layers', embedding's and head's FLOPs), which the
    /// split balanced and a bubble prediction weighs the stages by.
    static constexpr ::llvm::StringLiteral getStageCostsAttrName() { return "mlt.stage_costs"; }
    /// On a stage module between the holders of tied parameters: each
    /// one's name, type and sharding (`[name, type, sharding or unit]`),
    /// for which the stage joins the sum over `pp` with zeros.
    static constexpr ::llvm::StringLiteral getTiedZerosAttrName() { return "mlt.tied_zeros"; }
  private:
    void registerAttributes();
  public:
  }];
}

class MLT_Op<string mnemonic, list<Trait> traits = []>
    : Op<MLT_Dialect, mnemonic, traits>;

#endif // MLT_DIALECT_MLT_MLTDIALECT_TD
