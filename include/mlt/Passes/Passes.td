//===- Passes.td - mlt passes ------------------------------*- tablegen -*-===//
//
// Part of mlt. Declares every mlt pass; mlt-opt and mlt-run register them all
// from the generated code.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PASSES_PASSES_TD
#define MLT_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def MLTTruncateLayers : Pass<"mlt-truncate-layers", "::mlir::ModuleOp"> {
  let summary = "keeps a model's first N decoder layers";
  let description = [{
    Makes the model `layers` decoder layers deep: the one `mlt.repeat` of
    `@forward` runs `lower to lower + layers`, every per-layer parameter
    family declares `layers` layers, and the `mlt.model` configuration says
    `num_layers = layers`. Nothing else changes: the embedding, the final
    norm, the LM head and the loss stay.

    The planner (`mlt-run --layout auto`) compiles each candidate layout at
    two shallow depths and extrapolates its memory and step to the model's
    depth (see LayoutSpace.h): compiling and predicting a model costs time
    in proportion to its layers, and a stage's memory and step grow by the
    same amount with each layer it holds.

    Before (`layers=2`):
    ```mlir
    module attributes {mlt.model = #mlt.llama<..., num_layers = 22, ...>} {
      mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 22 : tensor<5632x2048xf32>
      ...
      %0 = mlt.repeat %layer = 0 to 22 iter_args(%h = %embedding) -> (tensor<?x?x2048xf32>) {
    ```
    After:
    ```mlir
    module attributes {mlt.model = #mlt.llama<..., num_layers = 2, ...>} {
      mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 2 : tensor<5632x2048xf32>
      ...
      %0 = mlt.repeat %layer = 0 to 2 iter_args(%h = %embedding) -> (tensor<?x?x2048xf32>) {
    ```
    Fails on a module that is already split into stages, on more layers
    than the model has, and on fewer than one.
  }];
  let options = [
    Option<"layers", "layers", "int64_t", "0", "the decoder layers to keep">
  ];
}

def MLTUnrollLayers : Pass<"mlt-unroll-layers", "::mlir::ModuleOp"> {
  let summary = "expands every mlt.repeat into one copy of its body per layer";
  let description = [{
    Replaces `mlt.repeat %layer = lo to hi` by `hi - lo` copies of its body, in
    order, each with `%layer` a constant and the carried values threaded from
    one copy to the next. The result has no `mlt.repeat`: every layer's ops are
    explicit, which is what per-layer transformations (a different sharding or
    recomputation policy for some layers, per-layer cost reports) and
    debugging want. Layer-level passes that can work on the compact form
    (autodiff, pipeline partitioning) do not need it.

    Before:
    ```mlir
    %r = mlt.repeat %layer = 0 to 2 iter_args(%h = %x) -> (tensor<?x?x64xf32>) {
      %w = mlt.load @"model.layers.{}.input_layernorm.weight"[%layer] : tensor<64xf32>
      %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<?x?x64xf32>, tensor<64xf32>
      mlt.yield %n : tensor<?x?x64xf32>
    }
    ```
    After:
    ```mlir
    %c0 = arith.constant 0 : index
    %w0 = mlt.load @"model.layers.{}.input_layernorm.weight"[%c0] : tensor<64xf32>
    %n0 = mlt.rms_norm %x, %w0 eps = 1.0e-05 : tensor<?x?x64xf32>, tensor<64xf32>
    %c1 = arith.constant 1 : index
    %w1 = mlt.load @"model.layers.{}.input_layernorm.weight"[%c1] : tensor<64xf32>
    %n1 = mlt.rms_norm %n0, %w1 eps = 1.0e-05 : tensor<?x?x64xf32>, tensor<64xf32>
    ```
    Each copied op gets an `mlt.layer` attribute with its layer index, so
    per-layer reports and later passes can tell the layers apart.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def MLTSpecializeShapes : Pass<"mlt-specialize-shapes", "::mlir::ModuleOp"> {
  let summary = "fixes the batch and sequence dimensions of a model's function";
  let description = [{
    Model files keep batch and sequence dynamic; memory planning, autodiff and
    the runtime need static shapes. This pass gives the function's token
    arguments the type `tensor<batch x seq-len x i32>` and re-derives every
    result type below them: ops with InferTypeOpInterface re-infer; other ops
    (`mlt.reshape`, `mlt.cast`) fill their dynamic dimensions, in order, from
    those of their operand; `mlt.repeat` takes the types of its inits.

    Before:
    ```mlir
    func.func @forward(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
      %h = mlt.embedding %tokens, %table : tensor<?x?xi32>, tensor<256x64xf32>
    ```
    After (`batch=4 seq-len=32`):
    ```mlir
    func.func @forward(%tokens: tensor<4x32xi32>, %labels: tensor<4x32xi32>) -> tensor<f32> {
      %h = mlt.embedding %tokens, %table : tensor<4x32xi32>, tensor<256x64xf32>
    ```
    A size that contradicts an existing static size is an error.
  }];
  let options = [
    Option<"batch", "batch", "int64_t", "0",
           "sequences per micro-batch (the batch dimension)">,
    Option<"seqLen", "seq-len", "int64_t", "0", "tokens per sequence">,
    Option<"function", "function", "std::string", "\"forward\"",
           "the function to specialize">
  ];
}

def MLTMixedPrecision : Pass<"mlt-mixed-precision", "::mlir::ModuleOp"> {
  let summary = "computes the forward pass in bf16 on f32 master weights";
  let description = [{
    Mixed-precision training as Megatron-LM trains in bf16: the parameters
    stay f32 (the master weights, their gradients and AdamW moments, and what
    checkpoints hold), while the model computes on bf16 copies of them and
    keeps its activations in bf16; every kernel computes in f32 internally and
    rounds each output once. The loss stays f32.

    The pass gives every `mlt.load` of an f32 parameter in the function the
    compute type (`mlt.load @w : tensor<...xbf16>` reads the parameter's
    compute copy), then re-derives every result type below: ops with
    InferTypeOpInterface re-infer, `mlt.reshape`, `mlt.transpose` and
    `mlt.shard` take their operand's element type, `mlt.repeat` the types of
    its inits; an explicit `mlt.cast` keeps the type it names.
    Run before `mlt-autodiff`: the derived backward then computes in bf16
    too, and the gradient of a bf16 load is an `mlt.accumulate_grad` of a
    bf16 value into the parameter's f32 gradient, accumulated in f32.
    `mlt-lower-to-runtime` gives each parameter one compute-copy buffer,
    refreshed from the parameter after every optimizer step (and by the
    runtime after it writes parameters).

    Before:
    ```mlir
    %w = mlt.load @"model.layers.{}.mlp.up_proj.weight"[%layer] : tensor<176x64xf32>
    %y = mlt.matmul %x, %w transpose_rhs : tensor<2x8x64xf32>, tensor<176x64xf32>
    ```
    After (`compute-type=bf16`):
    ```mlir
    %w = mlt.load @"model.layers.{}.mlp.up_proj.weight"[%layer] : tensor<176x64xbf16>
    %y = mlt.matmul %x, %w transpose_rhs : tensor<2x8x64xbf16>, tensor<176x64xbf16>
    ```
    `compute-type=f32` leaves the program as it is (the fp32 mode).
  }];
  let options = [
    Option<"computeType", "compute-type", "std::string", "\"bf16\"",
           "element type of the compute copies and activations: bf16, f16 "
           "or f32 (no change)">,
    Option<"function", "function", "std::string", "\"forward\"",
           "the function to convert">
  ];
}

def MLTAutodiff : Pass<"mlt-autodiff", "::mlir::ModuleOp"> {
  let summary = "derives the backward pass of the model's loss";
  let description = [{
    Creates `@micro_step`, the forward pass of `@forward` (unrolled, so each
    layer's backward can be scheduled on its own) followed by its backward
    pass, built by reverse-mode differentiation from the ops' gradient rules
    (GradientOpInterface):

    1. clone `@forward`, unroll its `mlt.repeat`s;
    2. seed the loss's gradient with `1 / microbatches`, so that gradients
       accumulated over a step's micro-batches are those of the step's mean loss;
    3. visit the ops in reverse; each op with a gradient on one of its results
       builds its operands' gradients; gradients of a value used several
       times are summed;
    4. `mlt.load`'s rule accumulates into the parameter's gradient buffer
       (`mlt.accumulate_grad`).

    A pipeline stage (mlt-partition-pipeline) has more roots, or none but
    them: each `mlt.send`, whose rule receives the sent value's gradient
    from the next stage (`mlt.recv ... shift 1`, marked as the seed is:
    the stage's backward starts there); a received value's gradient is sent
    back (`mlt.send ... shift -1`). A stage before the last returns no loss.

    An op that needs a gradient and has no rule is an error naming it. Shapes
    must be static (run `mlt-specialize-shapes` first).

    Before:
    ```mlir
    func.func @forward(%tokens: tensor<4x32xi32>, %labels: tensor<4x32xi32>) -> tensor<f32> {
      %w = mlt.load @"model.norm.weight" : tensor<64xf32>
      ...
    ```
    After, in addition:
    ```mlir
    func.func @micro_step(%tokens: tensor<4x32xi32>, %labels: tensor<4x32xi32>) -> tensor<f32> {
      ... the forward ops ...
      %seed = arith.constant dense<1.000000e+00> : tensor<f32>
      %dlogits = mlt.cross_entropy_grad %seed, %logits, %labels : ...
      ...
      mlt.accumulate_grad @"model.norm.weight", %dw : tensor<64xf32>
      return %loss : tensor<f32>
    }
    ```
  }];
  let options = [
    Option<"microbatches", "microbatches", "int64_t", "1",
           "micro-batches per step; scales the loss gradient by 1/microbatches">,
    Option<"function", "function", "std::string", "\"forward\"",
           "the function whose loss to differentiate">
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def MLTAttachEvaluation : Pass<"mlt-attach-evaluation", "::mlir::ModuleOp"> {
  let summary = "adds the forward-only body that evaluates the loss on held-out data";
  let description = [{
    Creates `@eval_forward`, the forward pass and loss of `@forward` alone
    (unrolled, as `@micro_step`'s forward is): what `mlt-run --eval-data`
    runs between training steps to measure the loss on held-out batches,
    with no backward pass, no gradient and no optimizer update. It runs
    before mlt-autodiff, on each pipeline stage's module (and each model
    chunk's), so that every later pass carries it as it carries
    `@micro_step`: sharding propagation and mlt-spmdize make it per-rank
    (with the forward's collectives), the recompute passes leave it alone
    (it has no backward pass to recompute in), mlt-lower-to-runtime lowers
    it to the program `eval_forward` (the loss by a forward-only
    cross-entropy), mlt-schedule-pipeline calls it from `mlt_rt.step
    @eval_step` (every micro-batch's forward, in the training schedule's
    forward order, with a pipeline's transfers), and mlt-plan-memory places
    its temporaries in the arena's space for activations, which is free
    between steps.

    Why a clone of `@forward` before autodiff rather than the forward half
    of the lowered `@micro_step`: the lowered forward keeps what its
    backward reads (attention statistics, the logits' gradient written with
    the loss, per-slot activations under a pipeline), so reusing it would
    leave the evaluation with the training body's memory and kernels; a
    function of its own is lowered for what it computes alone.

    A stage before the last returns no loss and sends its output on, as in
    `@forward`. Shapes must be static (run `mlt-specialize-shapes` first).

    Before:
    ```mlir
    func.func @forward(%tokens: tensor<4x32xi32>, %labels: tensor<4x32xi32>) -> tensor<f32> {
      %0 = mlt.repeat %layer = 0 to 2 iter_args(%h = %x) -> (...) { ... }
      ...
      %loss = mlt.cross_entropy %logits, %labels : ...
      return %loss : tensor<f32>
    }
    ```
    After, in addition:
    ```mlir
    func.func @eval_forward(%tokens: tensor<4x32xi32>, %labels: tensor<4x32xi32>) -> tensor<f32> {
      ... layer 0's ops, layer 1's ops ...
      %loss = mlt.cross_entropy %logits, %labels : ...
      return %loss : tensor<f32>
    }
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"forward\"",
           "the function (forward pass and loss) to evaluate">
  ];
}

def MLTAttachOptimizer : Pass<"mlt-attach-optimizer", "::mlir::ModuleOp"> {
  let summary = "adds the AdamW step with global gradient-norm clipping";
  let description = [{
    Creates `@optimizer_step() -> tensor<f32>`, run once per training step
    after the micro-batches: it reads every parameter's accumulated gradient,
    computes the global L2 norm over all of them (returned, before clipping),
    the clipping coefficient `min(1, max_grad_norm / (norm + 1e-6))`, and
    applies one AdamW update per parameter (per layer, for per-layer
    parameters). Weight decay applies to parameters of two or more dimensions
    only. Hyper-parameters are `mlt.hyperparameter` reads, set by the runtime
    each step (the learning-rate schedule lives there).

    After:
    ```mlir
    func.func @optimizer_step() -> tensor<f32> {
      %lr = mlt.hyperparameter "lr" : tensor<f32>
      ...
      %g0 = mlt.load_grad @"model.embed_tokens.weight" : tensor<256x64xf32>
      %s0 = mlt.sum_squares %g0 : tensor<256x64xf32>
      ...
      %norm = mlt.global_norm %s0, ... : tensor<f32>
      %coef = mlt.clip_coefficient %norm, %max_grad_norm : tensor<f32>
      mlt.adamw @"model.embed_tokens.weight" grad %g0 scale %coef lr %lr ... decay : tensor<256x64xf32>
      ...
      return %norm : tensor<f32>
    }
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::func::FuncDialect"];
}

def MLTRecomputeActivations : Pass<"mlt-recompute-activations", "::mlir::ModuleOp"> {
  let summary = "recomputes chosen forward values in the backward pass instead of keeping them";
  let description = [{
    Selective activation recomputation, as Megatron-LM's "selective"
    recompute: a forward value that the backward pass reads (an activation
    saved for a gradient) is computed again right before its first backward
    use, from operands that the backward pass keeps anyway, instead of being
    kept from the forward pass to the backward pass. The forward value then
    dies after its forward uses, and mlt-plan-memory reuses its memory while
    the rest of the forward pass and the backward pass up to that point run.
    The ops to recompute are named by kind (`ops`); recomputed results are
    bit for bit the forward ones (the same kernel on the same operands).

    Algorithm, for each program function (`@micro_step`):

    1. the backward pass is `mlt.cross_entropy_grad` and the op mlt-autodiff
       marks `mlt.loss_seed` (the loss gradient's seed, or on a pipeline
       stage before the last the receive of the gradient of what the stage
       sent), every clone a
       recompute pass placed there (`mlt.recomputed`), and every op that
       uses a value computed in the backward pass;
    2. from last to first, each forward op of a named kind whose results the
       backward pass reads is recomputed when its forward uses all come
       before its first backward use and each of its operands is live there
       (used at or after it, or never a temporary: a function argument, or
       the result of an op that reads no tensor, such as `mlt.load`); the
       uses of an `mlt.reshape` or `mlt.shard` of a value count as the
       value's (the lowering gives them its buffer);
    3. it is cloned right before its first backward use, marked
       `mlt.recomputed`, and the clone replaces it in every backward use.

    Going from last to first lets a recomputed op's operand be recomputed
    too (name both kinds): the operand's first backward use is then the
    clone. `mlt.swiglu` is the case the option exists for: its operands
    (gate and up) are kept for `mlt.swiglu_grad`, so recomputing its result
    (kept only for the down projection's weight gradient) costs one
    elementwise kernel per layer and saves one activation of the MLP's
    width per layer.

    Run it after mlt-autodiff and after the last CSE (which would merge the
    clone back into the forward op); mlt-run runs it after mlt-spmdize, on
    the per-rank program, just before mlt-lower-to-runtime.

    Before (`ops=mlt.swiglu`):
    ```mlir
    %h = mlt.swiglu %gate, %up : tensor<4x32x176xf32>
    %y = mlt.matmul %h, %wdown transpose_rhs : tensor<4x32x176xf32>, tensor<64x176xf32>
    ...
    %dh = mlt.matmul %dy, %wdown : tensor<4x32x64xf32>, tensor<64x176xf32>
    %dwdown = mlt.matmul %dy, %h transpose_lhs contract_batch : tensor<4x32x64xf32>, tensor<4x32x176xf32>
    %dgate, %dup = mlt.swiglu_grad %dh, %gate, %up : tensor<4x32x176xf32>
    ```
    After:
    ```mlir
    %h = mlt.swiglu %gate, %up : tensor<4x32x176xf32>
    %y = mlt.matmul %h, %wdown transpose_rhs : tensor<4x32x176xf32>, tensor<64x176xf32>
    ...
    %dh = mlt.matmul %dy, %wdown : tensor<4x32x64xf32>, tensor<64x176xf32>
    %h2 = mlt.swiglu %gate, %up {mlt.recomputed} : tensor<4x32x176xf32>
    %dwdown = mlt.matmul %dy, %h2 transpose_lhs contract_batch : tensor<4x32x64xf32>, tensor<4x32x176xf32>
    %dgate, %dup = mlt.swiglu_grad %dh, %gate, %up : tensor<4x32x176xf32>
    ```
    A name in `ops` that is not an op, or not a forward op of the mlt
    dialect (one with a gradient rule), is an error.
  }];
  let options = [
    ListOption<"ops", "ops", "std::string",
               "forward op kinds to recompute in the backward pass, by "
               "name (mlt.swiglu)">
  ];
  let dependentDialects = ["::mlt::MLTDialect"];
}

def MLTRecomputeLayers : Pass<"mlt-recompute-layers", "::mlir::ModuleOp"> {
  let summary = "recomputes whole decoder layers in the backward pass, keeping only their inputs";
  let description = [{
    Whole-layer activation recomputation, as Megatron-LM's `full` recompute
    granularity and torchtitan's full activation checkpointing: a chosen
    decoder layer keeps only what leaves it (its output, which is the next
    layer's input and the residual the next layer's backward reads), and
    the part of its forward pass that its backward pass reads is computed
    again right before that backward pass starts. A layer's activations
    then live only while its own backward runs: the step keeps one residual
    stream per recomputed layer, plus one layer's activations, for about
    one more forward pass of compute. Recomputed results are bit for bit
    the forward ones (the same kernels, collectives included, on the same
    operands).

    `every` chooses the layers: those whose index (`mlt.layer`, the model's
    numbering, so the same under pipeline stages) is a multiple of it; 1 is
    every layer, 0 none.

    Algorithm, for each program function (`@micro_step`):

    1. the backward pass is found as mlt-recompute-activations finds it;
       each forward op's layer is its `mlt.layer`, or for an op without one
       (a collective mlt-spmdize inserted) the layer of the ops it reads
       when they are all of one;
    2. of a chosen layer's results, what a forward op outside the layer
       reads (the layer's output) is kept, and what the backward pass reads
       of the rest is recomputed;
    3. the layer's ops those need (parameters and constants are read as
       they are, and so is a kept value) are cloned in program order right
       before the first backward use of any of them, marked
       `mlt.recomputed`, and every backward use reads the clones.

    A layer one of whose needed ops has memory effects is left as it is.
    Run it where mlt-recompute-activations runs, before it (which then
    leaves the recomputed layers alone: their clones are the backward
    pass's).

    Before (`every=1`, one layer's attention, abridged):
    ```mlir
    %n = mlt.rms_norm %x, %w eps = 1.0e-05 {mlt.layer = 0 : i64} : ...
    %q = mlt.matmul %n, %wq transpose_rhs {mlt.layer = 0 : i64} : ...
    ...
    %y = mlt.add %x, %o {mlt.layer = 0 : i64} : ...
    ...
    %dq = mlt.matmul %dqr, %n transpose_lhs contract_batch : ...
    ```
    After:
    ```mlir
    %n = mlt.rms_norm %x, %w eps = 1.0e-05 {mlt.layer = 0 : i64} : ...
    ...
    %y = mlt.add %x, %o {mlt.layer = 0 : i64} : ...
    ...
    %n2 = mlt.rms_norm %x, %w eps = 1.0e-05 {mlt.layer = 0 : i64, mlt.recomputed} : ...
    ...
    %dq = mlt.matmul %dqr, %n2 transpose_lhs contract_batch : ...
    ```
  }];
  let options = [
    Option<"every", "every", "int64_t", /*default=*/"0",
           "recompute the layers whose index is a multiple of this (1: "
           "every layer; 0: none)">
  ];
  let dependentDialects = ["::mlt::MLTDialect"];
}

def MLTVerifyLayout : Pass<"mlt-verify-layout", "::mlir::ModuleOp"> {
  let summary = "refuses a layout that the rule book does not accept for the module's model";
  let description = [{
    Holds a layout and a step to the layout rule book
    (mlt/Layout/LayoutRules.h) for the model of the module, read from its
    `mlt.model` configuration: the first pass of mlt-train-pipeline, so that
    a layout the compiler cannot build (tp not dividing the key/value heads,
    ZeRO-2 under the zb-h1 schedule, a batch the micro-batches do not
    divide, ...) is refused before any pass runs, in the words mlt-run and
    the planner use for it. Emits one error per rule broken, each a line
    naming the rule, and fails; the module is unchanged either way.

    `layout` is the layout as mlt-train-pipeline's options spell it (the
    table of mlt/Layout/LayoutOptions.h: `tp=2 dp=2 zero=1`); `batch`
    (sequences per step, over every micro-batch and data-parallel rank) and
    `seq-len` (0: not known) let the rules on the step be checked.

    ```
    $ mlt-opt tiny.mlir -mlt-verify-layout="layout='tp=3' batch=4 seq-len=16"
    error: tp 3 does not divide the model's 4 attention heads (rule tp-divides-heads)
    error: tp 3 does not divide the model's 2 key/value heads (rule tp-divides-kv-heads)
    ...
    ```
  }];
  let options = [
    Option<"layout", "layout", "std::string", "\"\"",
           "the layout, as mlt-train-pipeline's options (tp=2 dp=2 ...)">,
    Option<"batch", "batch", "int64_t", "0",
           "sequences per step (0: the rules on the batch not checked)">,
    Option<"seqLen", "seq-len", "int64_t", "0",
           "tokens per sequence (0: the rules on it not checked)">
  ];
}

def MLTAnnotateLayout : Pass<"mlt-annotate-layout", "::mlir::ModuleOp"> {
  let summary = "annotates a LLaMA model with Megatron's tensor, sequence and data parallel layout";
  let description = [{
    Writes the handful of annotations from which mlt-propagate-shardings
    derives Megatron-LM's layout, as a user could write them by hand:

    - the mesh `mlt.mesh = #mlt.mesh<pp = P, dp = D, tp = T>` (axes of size
      1 left out; `tp` last, so tensor-parallel ranks are adjacent, and `pp`
      first, so a stage's ranks are; mlt-partition-pipeline splits the
      model along `pp`);
    - tensor parallelism (`tp` > 1): column-parallel q/k/v and gate/up
      projections (`[tp, -]`: output features split), row-parallel o and down
      projections (`[-, tp]`: input features split), the embedding table and
      the LM head split along the vocabulary (`[tp, -]`); norm weights whole;
    - data parallelism (`dp` > 1): the token and label batch split,
      `[dp, -]` on the function's arguments;
    - context parallelism (`cp` > 1): their sequence split, `[-, cp]` (with
      dp, `[dp, cp]`). The tokens arrive in the load-balanced order of the
      sequence (2 * cp chunks, rank i's block holding chunks i and
      2 * cp - 1 - i), which only the ops that read positions see: rope and
      attention take theirs from the axis (mlt-spmdize's
      `mlt.sequence_shard`);
    - the all-to-all exchange (`cp-comm=a2a`, needs `cp` > 1): each
      `mlt.attention` marked `mlt.cp_comm = "a2a"`, for which
      mlt-propagate-shardings moves cp from its sequence to its heads
      (DeepSpeed's Ulysses; the default `allgather` gathers the keys and
      values instead); the ring (`cp-comm=ring`) marks them
      `mlt.cp_comm = "ring"`, laid out as the gather and rewritten by
      mlt-ring-attention;
    - sequence parallelism (`sequence-parallel`, needs `tp` > 1): the
      residual stream (the embedding's result and every `mlt.add`) constrained
      to `[?, tp, ?]` with `mlt.shard` (with `cp` > 1, `[?, cp*tp, ?]`: each
      cp block in tp blocks), so norms run on a sequence slice and
      all-gathers / reduce-scatters over tp replace the all-reduces.

    Parameters are recognized by their Hugging Face names. Run it on the
    model before `mlt-specialize-shapes`; divisibility is checked by
    mlt-propagate-shardings, which knows the shapes.

    After (`tp=2`):
    ```mlir
    module attributes {mlt.mesh = #mlt.mesh<tp = 2>, ...} {
      mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 2 {mlt.sharding = #mlt.sharding<[tp, -]>} : tensor<64x64xf32>
      mlt.param @"model.layers.{}.self_attn.o_proj.weight" layers 2 {mlt.sharding = #mlt.sharding<[-, tp]>} : tensor<64x64xf32>
    ```
  }];
  let options = [
    Option<"pp", "pp", "int64_t", "1", "pipeline stages (the mesh's first axis)">,
    Option<"tp", "tp", "int64_t", "1", "tensor-parallel ranks">,
    Option<"dp", "dp", "int64_t", "1", "data-parallel ranks">,
    Option<"cp", "cp", "int64_t", "1", "context-parallel ranks">,
    Option<"sequenceParallel", "sequence-parallel", "bool", "false",
           "split the residual stream along the sequence over tp">,
    Option<"cpComm", "cp-comm", "std::string", "\"allgather\"",
           "how attention sees the whole sequence under cp: allgather (the "
           "keys and values gathered), a2a (heads for sequence, "
           "all-to-all) or ring (key/value blocks passed around the ring)">
  ];
}

def MLTPartitionPipeline : Pass<"mlt-partition-pipeline", "::mlir::ModuleOp"> {
  let summary = "splits a model into pipeline stages, one nested module each";
  let description = [{
    Splits `@forward`'s decoder layers (its `mlt.repeat`) into `P` stages,
    `P` the size of the module's mesh axis `pp` (mlt-annotate-layout's
    `pp=`), and puts each stage in a nested module `@stage<s>` (attribute
    `mlt.stage = s`) with the module's attributes, the parameters it uses
    (a per-layer family with its range: `layers 8 from 4`) and its own
    `@forward`:

    - stage 0 runs the embedding and its layers and sends the hidden state
      on (`mlt.send %h to "pp" shift 1`), returning nothing;
    - a middle stage receives the hidden state (`mlt.recv from "pp" shift
      -1`), runs its layers and sends;
    - the last stage receives, runs its layers, the final norm, the LM head
      and the loss, and returns the loss.

    Every stage keeps the function's arguments (tokens and labels), so every
    rank's plan has the same inputs. The transfers carry the residual
    stream's layout over the other axes (the batch over `dp`, and the
    sequence over `tp` when the residual stream is constrained so: sequence
    parallelism). The passes after it run on each stage module (the
    pipeline nests them): mlt-autodiff derives each stage's backward pass,
    receiving the gradient of what it sent and sending back the gradient of
    what it received.

    With `chunks=V` (interleaving) the layers split into P x V virtual
    stages, chunk c of stage s holding virtual stage c * P + s (Megatron's
    assignment), each a module `@stage<s>_chunk<c>` (`mlt.stage = s`,
    `mlt.chunk = c`): the transfers go to the next virtual stage, one rank
    on or from the last rank back to the first (`shift 1 - P`), and
    mlt-merge-chunks later merges each stage's chunks into one module.

    The split (`StagePartition.h`): `layers=5,6,6,5` sets it (checked: one
    count per (virtual) stage, each at least 1, summing to the model's layers); else
    it balances each stage's predicted time, a layer's and the LM head's
    counted by their FLOPs (forward and backward), the embedding's as none.
    The split is printed to the log with each stage's share when `print`
    is set (mlt-run prints it on every compile with `pp` > 1).

    After (`pp=2` on a 4-layer model):
    ```mlir
    module attributes {mlt.mesh = #mlt.mesh<pp = 2>, ...} {
      module @stage0 attributes {mlt.stage = 0 : i64, mlt.mesh = #mlt.mesh<pp = 2>, ...} {
        mlt.param @model.embed_tokens.weight : tensor<256x64xf32>
        mlt.param @"model.layers.{}.input_layernorm.weight" layers 2 : tensor<64xf32>
        func.func @forward(%tokens: tensor<4x32xi32>, %labels: tensor<4x32xi32>) {
          ...
          %h = mlt.repeat %layer = 0 to 2 iter_args(...) ...
          mlt.send %h to "pp" shift 1 : tensor<4x32x64xf32>
          return
        }
      }
      module @stage1 attributes {mlt.stage = 1 : i64, ...} {
        mlt.param @"model.layers.{}.input_layernorm.weight" layers 4 from 2 : tensor<64xf32>
        ...
        func.func @forward(...) -> tensor<f32> {
          %h = mlt.recv from "pp" shift -1 : tensor<4x32x64xf32>
          %0 = mlt.repeat %layer = 2 to 4 iter_args(%x = %h) ...
    ```
  }];
  let options = [
    ListOption<"layers", "layers", "int64_t",
               "the layers of each (virtual) stage (default: balanced by "
               "predicted time)">,
    Option<"chunks", "chunks", "int64_t", "1",
           "model chunks per stage (interleaved schedules)">,
    Option<"print", "print", "bool", "false",
           "print the split and each stage's predicted share to stderr">
  ];
}

def MLTMergeChunks : Pass<"mlt-merge-chunks", "::mlir::ModuleOp"> {
  let summary = "merges each interleaved stage's lowered model chunks into one module";
  let description = [{
    With an interleaved pipeline (mlt-partition-pipeline `chunks=V`), the
    passes up to mlt-lower-to-runtime compile each virtual stage on its own
    (its module has `mlt.stage = s` and `mlt.chunk = c`); a stage's ranks
    run all V. This pass merges the V lowered modules of each stage into
    one module `@stage<s>` (`mlt.chunks = V`), which the passes after it
    (the step's schedule, ZeRO, the overlap, memory planning) see as one
    rank's program:

    - each chunk's bodies and temporaries are renamed `c<c>.`
      (`@c1.micro_step`, `@c1.t57`); the other buffers (parameters,
      gradients, optimizer state: each layer's names differ from chunk to
      chunk; the step's inputs and outputs and the hyperparameters: the
      same in every chunk) are kept once, and two chunks declaring one
      name differently are an error;
    - the optimizer step is one: every chunk's sums of squared gradients,
      added in chunk order, then one all-reduce of the sum over `pp`, the
      norm and the clipping coefficient (chunk 0's launches), then every
      chunk's updates, all with that coefficient; so the norm is the whole
      model's, as without chunks;
    - the refreshes of bf16 parameter copies are one program.

    The merged module keeps the step's micro-batch count; mlt-schedule-
    pipeline then interleaves the chunks' bodies (`interleaved`).
  }];
}

def MLTPropagateShardings : Pass<"mlt-propagate-shardings", "::mlir::ModuleOp"> {
  let summary = "gives every value of the training program a sharding over the mesh";
  let description = [{
    From the user's annotations (parameters' `mlt.sharding`, the function
    arguments' `mlt.sharding`, `mlt.shard` constraints) to a sharding for
    every value of the training program (`@micro_step`, `@optimizer_step`:
    every function without an `mlt.repeat`), forward pass, backward pass
    and optimizer alike, GSPMD-style. Each op says how its
    dimensions may be split through ShardingRuleOpInterface (factors, as in
    Shardy); the pass knows nothing op-specific beyond the state ops.

    Algorithm. Every value starts with all dimensions open, except the
    annotated ones. Sweeps forward then backward over the program, repeated
    until nothing changes, choose for each op the mesh axes of each factor
    (a list, major first: `cp*tp`) from the axes its operands and results
    already carry, and fill the open dimensions those factors make up. A
    factor takes the longest prefix of a proposal whose axes no other
    factor of the op took and that divides it (Shardy's prefix rule): a
    sequence over `cp*tp` meets a column-parallel weight's `tp` as `cp`. Conflicts (two factors wanting one
    axis, an axis that does not divide a factor, a factor the op needs
    whole) are resolved by priority, deterministically:

    1. parameters and their gradients (the values an `mlt.load`,
       `mlt.load_grad` produces and an `mlt.accumulate_grad` or `mlt.adamw`
       consumes) carry their parameter's sharding and win;
    2. then user annotations (function arguments, `mlt.shard`);
    3. then propagated shardings; within one priority, results before
       operands, then operand order.

    A factor of causal sequence positions (rope's sequence, attention's
    queries: ShardingRule::sequence) splits over the context axis `cp` only
    (the prefix `cp` of `cp*tp`);
    attention's keys stay whole, so a query block attends to the gathered
    sequence and its key/value gradients are partial sums over `cp`. An
    attention (or its gradient) marked `mlt.cp_comm = "a2a"` takes, in the
    final pass, `cp` off its sequence and onto the minor end of its heads
    (`[?, cp, tp, ?]` becomes `[?, -, tp*cp, ?]`): it attends over the
    whole sequence with its share of the heads, and mlt-spmdize exchanges
    its operands and results all-to-all; everything around it keeps the
    sequence split.

    So a column-parallel matmul on a sequence-parallel input keeps the
    weight's split and all-gathers the input, which is Megatron's layout.
    Dimensions still open after the sweeps are replicated. A final pass in
    program order fixes what each op produces: its results' shardings,
    partial over the axes of split contracted factors (`partial = [tp]` after
    a row-parallel matmul, `partial = [dp]` for weight gradients of a batch
    split over `dp`), and the shardings it needs its operands in
    (`mlt.operand_shardings`); the partitioner (mlt-spmdize) inserts the
    collectives between the two. Partial sums pass through linear ops (`add`),
    so the residual add sums partials before one all-reduce. A parameter's
    gradient buffer accumulates partial sums over micro-batches; its
    all-reduce happens once, in `@optimizer_step`.

    Why not upstream `shard` propagation: it is one greedy sweep without
    priorities between conflicting annotations, and its sharding options do
    not express factors split across reshapes (heads inside a hidden
    dimension) or grouped-query heads.

    After (tp=2), for a column-parallel projection:
    ```mlir
    %q = mlt.matmul %x, %wq transpose_rhs {mlt.operand_shardings = [#mlt.sharding<[-, -, -]>, #mlt.sharding<[tp, -]>], mlt.sharding = [#mlt.sharding<[-, -, tp]>]} : ...
    ```
    Errors name the value and the axis: an axis not in the mesh, a split
    that the mesh axis does not divide, a sharding of the wrong rank.
  }];
}

def MLTSpmdize : Pass<"mlt-spmdize", "::mlir::ModuleOp"> {
  let summary = "turns the sharded global program into the per-rank program with collectives";
  let description = [{
    Rewrites `@micro_step` and `@optimizer_step`, annotated by
    mlt-propagate-shardings, into the program every rank runs (SPMD): each
    value gets the type of the block a rank holds, and where a value's
    sharding differs from the one its user needs, the pass inserts the
    conversion, per mesh axis (an axis joins or leaves a dimension's list
    of axes at its minor end: a block of `[cp*tp]` is a tp block of a cp
    block):

    - partial over `a` to split over `a` along `d` next (the dimension's
      axes so far a prefix of the target's, then `a`): `mlt.reduce_scatter`;
    - partial over `a` otherwise: `mlt.all_reduce`;
    - split over `a` along `d` as its minor axis, where the target adds `a`
      next to another dimension `e`: `mlt.all_to_all` (split `e`, concat
      `d`), the axis moving between them (context parallelism's all-to-all
      exchange: `[?, cp, tp, ?]` to `[?, -, tp*cp, ?]` and back);
    - split over `a` along `d`, where `a` is not in the target's list at its
      place: `mlt.all_gather`, minor axes first, back to the longest common
      prefix;
    - the target's remaining axes along `d`: `mlt.shard_slice` (local).

    Conversions are shared between the users of one value. Ops whose meaning
    depends on the split get the facts they need: a vocabulary-split
    embedding or cross-entropy `mlt.vocab_shard = "tp"`, a cross-entropy over
    a share of the rows `mlt.row_count` (the global row count, so each
    rank's loss is its share of the global mean), a rope or attention whose
    sequence (queries) is split over `cp` `mlt.sequence_shard = "cp"` (its
    positions are the rank's load-balanced block's; an attention's keys are
    the whole sequence in that order), and so an attention whose queries
    are whole in a module with a `cp` axis (the whole sequence in its
    load-balanced order); but an attention marked for the all-to-all
    exchange (`mlt.cp_comm = "a2a"`) gets its operands reordered to the
    natural order (`mlt.reorder_sequence ... to_natural`) and its results
    back, and attends in natural order. A rope whose sequence is whole
    there is refused: its rows are the rank's block. Partial squared norms are
    summed locally and all-reduced once per axis inside `mlt.global_norm`'s
    operands, so replicated gradients count once. Returned values are made
    whole on every rank. `mlt.shard` constraints are realized and removed.

    After (tp=2), a row-parallel projection followed by the residual add:
    ```mlir
    %o = mlt.matmul %a, %wo transpose_rhs : tensor<4x32x32xf32>, tensor<64x32xf32>
    %h2 = mlt.add %h, %o : tensor<4x32x64xf32>
    %n = mlt.all_reduce %h2 over "tp" : tensor<4x32x64xf32>
    ```
  }];
}

def MLTRingAttention : Pass<"mlt-ring-attention", "::mlir::ModuleOp"> {
  let summary = "context parallelism's ring exchange: gathered attentions become ring steps";
  let description = [{
    On the per-rank program (after mlt-spmdize and the recomputation
    passes), each attention marked `mlt.cp_comm = "ring"` whose keys and
    values mlt-spmdize gathered over its context axis (`mlt.all_gather ...
    dim 1` into `mlt.attention {mlt.sequence_shard}`) attends to the blocks
    one at a time instead, as Megatron-LM's `--cp-comm-type p2p` and
    ring attention do. With `G` ranks on the axis:

    - forward: step `s` (0 to G-1) attends from the rank's queries to the
      block of the rank `s` before it (`mlt.attention_block`, giving the
      partial output and its log-sum-exp), the blocks passed on by
      `mlt.collective_permute ... shift 1`, each step merged into the last
      by `mlt.attention_merge`; the next block is sent before the step
      that attends to the one in hand, so that a stream may carry it
      meanwhile;
    - backward (`mlt.attention_grad` of such an attention, whose key and
      value gradients mlt-spmdize reduce-scattered): the blocks go round
      again, each step's `mlt.attention_block_grad` (with the merged output
      and lse) adding its share of dq, and the block's dk and dv added to
      gradients that travel with the block; after the last step one more
      permute brings each block's gradients home, where the reduce-scatter
      was.

    A rank keeps one block of keys and values besides its own, never the
    gathered sequence. The gathers and reduce-scatters it replaces go; any
    other use of them is an error naming it.

    Before (cp=2):
    ```mlir
    %k = mlt.all_gather %kl over "cp" dim 1 : tensor<1x8x2x16xf32> -> tensor<1x16x2x16xf32>
    %v = mlt.all_gather %vl over "cp" dim 1 : tensor<1x8x2x16xf32> -> tensor<1x16x2x16xf32>
    %o = mlt.attention %q, %k, %v causal scale = 0.25 {mlt.cp_comm = "ring", mlt.sequence_shard = "cp"} : ...
    ```
    After:
    ```mlir
    %k1 = mlt.collective_permute %kl over "cp" shift 1 : tensor<1x8x2x16xf32>
    %v1 = mlt.collective_permute %vl over "cp" shift 1 : tensor<1x8x2x16xf32>
    %o0, %l0 = mlt.attention_block %q, %kl, %vl over "cp" step 0 causal scale = 0.25 : ...
    %o1, %l1 = mlt.attention_block %q, %k1, %v1 over "cp" step 1 causal scale = 0.25 : ...
    %o, %l = mlt.attention_merge %o0, %l0, %o1, %l1 : ...
    ```
  }];
}

def MLTLowerToRuntime : Pass<"mlt-lower-to-runtime", "::mlir::ModuleOp"> {
  let summary = "lowers the training program to runtime buffers and kernel launches";
  let description = [{
    Turns `@micro_step` and `@optimizer_step` into `mlt_rt.program`s and every
    tensor into an `mlt_rt.buffer`:

    - each parameter tensor (each layer of a family) gets four buffers:
      `param:`, `grad:`, `exp_avg:` and `exp_avg_sq:` followed by its HF name;
    - the token arguments become the inputs `tokens` and `labels`, each
      `mlt.hyperparameter "x"` the input `hyper.x`, and the programs' results
      the outputs `loss` and `grad_norm` (the runtime's ABI);
    - each compute op becomes one launch of a kernel of Kernels.def writing a
      fresh temporary; `mlt.reshape` names its operand's buffer (row-major
      data does not move); `mlt.attention` also writes its softmax statistics,
      which the matching `mlt.attention_grad` reads;
    - `mlt.accumulate_grad` becomes an `accumulate` launch into the gradient;
    - `mlt.cross_entropy` and its `mlt.cross_entropy_grad` become one
      `cross_entropy_fwd_bwd` launch at the forward (one pass over the
      logits, the gradient written over them) when the gradient is seeded by
      a constant, the logits have no other user and the vocabulary is whole
      on the rank; else `cross_entropy_fwd` and `cross_entropy_bwd` (or, with
      the rows or the vocabulary split, the statistics kernels);
    - with `mlt.microbatches` N on `@micro_step`, the tokens, labels and loss
      get a copy per micro-batch (`per_microbatch N`), and each micro-step
      body records where its backward pass starts (`backward_start`: its
      first launch that reads the constant `mlt-autodiff` marked
      `mlt.loss_seed`), where mlt-schedule-pipeline may split it;
    - the evaluation body `@eval_forward` (mlt-attach-evaluation), where the
      module has one, becomes the program `eval_forward` over the same
      `tokens`, `labels` and `loss` (its arguments and loss must have their
      types), its loss by `cross_entropy_fwd` (or the statistics kernels):
      it has no gradient to fuse.

    Everything else is erased; the module keeps its `mlt.model` attribute.

    After:
    ```mlir
    mlt_rt.buffer @"param:model.embed_tokens.weight" parameter {decay, parameter = "model.embed_tokens.weight"} : tensor<256x64xf32>
    mlt_rt.buffer @tokens input : tensor<4x32xi32>
    mlt_rt.buffer @t0 temporary : tensor<4x32x64xf32>
    mlt_rt.program @micro_step {
      mlt_rt.launch "embedding_fwd" [@tokens, @"param:model.embed_tokens.weight"] -> [@t0] ints [128, 256, 64]
      ...
    }
    ```
  }];
  let dependentDialects = ["::mlt::rt_ir::MLTRTDialect"];
}

def MLTMultiTensor : Pass<"mlt-multi-tensor", "::mlir::ModuleOp"> {
  let summary = "groups per-parameter adamw and sum_squares launches into multi-tensor launches";
  let description = [{
    Replaces each run of consecutive `adamw` launches of a program that share
    their seven scalar operands (grad_scale and the hyper-parameters) and
    all refresh a compute copy or none, on the compute stream with no tokens,
    by one `adamw_multi` launch of all their tensors (Kernels.def). The CUDA
    backend runs it as a few kernels instead of one per parameter (201 for
    TinyLlama), each tensor getting `adamw`'s results bit for bit; so does
    the CPU backend.

    Likewise each run of consecutive `sum_squares` launches (the gradient
    norm's, one per gradient) whose inputs have one element type, on the
    compute stream with no tokens, becomes one `sum_squares_multi` launch
    with their inputs, outputs and sizes in order: the same sums bit for
    bit, in one pass over the gradients (two kernels per 112 tensors on the
    CUDA backend instead of up to two per tensor). Gradients reduced in bf16
    (ZeRO-2's slices with `grad-reduce-dtype=bf16` and one micro-batch) count
    as f32 here: only the multi-tensor kernels read them, widening as they
    read, so a lone launch that reads one becomes a multi-tensor launch of
    one.

    Before:
    ```mlir
    mlt_rt.launch "adamw" [@"grad:a", @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@"param:a", @"exp_avg:a", @"exp_avg_sq:a"] ints [64, 1]
    mlt_rt.launch "adamw" [@"grad:b", @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@"param:b", @"exp_avg:b", @"exp_avg_sq:b"] ints [8, 0]
    ```
    After:
    ```mlir
    mlt_rt.launch "adamw_multi" [@"grad:a", @"grad:b", @c, @lr, @b1, @b2, @eps, @wd, @step] -> [@"param:a", @"param:b", @"exp_avg:a", @"exp_avg:b", @"exp_avg_sq:a", @"exp_avg_sq:b"] ints [64, 1, 8, 0]
    ```
    and
    ```mlir
    mlt_rt.launch "sum_squares" [@"grad:a"] -> [@s0] ints [64]
    mlt_rt.launch "sum_squares" [@"grad:b"] -> [@s1] ints [8]
    ```
    becomes
    ```mlir
    mlt_rt.launch "sum_squares_multi" [@"grad:a", @"grad:b"] -> [@s0, @s1] ints [64, 8]
    ```
  }];
}

def MLTFp8Products : Pass<"mlt-fp8-products", "::mlir::ModuleOp"> {
  let summary = "runs the decoder layers' products on FP8 tensor cores";
  let description = [{
    In each program, every plain bf16 `matmul`, `matmul_accumulate` and
    `matmul_add` of a decoder layer's linear layer (its weight's parameter
    name has `.layers.`; with `all-products`, every parameter's) becomes a
    `matmul_fp8` (Kernels.def) of quantized operands, with per-tensor
    current scaling: `amax` of the operand, then `quantize_fp8` with the
    power-of-two scale it gives (`mlt/Runtime/cpu/Fp8.h`). The roles fix the
    formats, as Transformer Engine's hybrid recipe does: the forward product
    x W^T reads e4m3 x and W with fast accumulation; the input gradient dy W
    and the weight gradient dy^T x read the gradient dy in e5m2 (its wider
    range) and accumulate in f32. Hopper's FP8 kernels read both operands
    with the reduction dimension contiguous, so W (for dy W) and dy and x
    (for dy^T x) are quantized transposed. Products cuBLASLt's FP8 kernels
    cannot take (k or n not a multiple of 16, batches that do not fold into
    one matrix) stay bf16, as do the output layer's (the loss is sensitive
    to it; `all-products` includes it).

    A quantization is shared: which request reuses which copy is
    `mlt::analysis::shareQuantizations` (mlt/Analysis/QuantizationReuse.h).
    A layer's normalized input is quantized once for its q, k and v
    products and once, transposed, for their weight gradients, and shares
    one amax between the two; a copy is made again after its source is
    written, and none is reused across a launch that is not plain. New
    copies are temporaries launched just before their first product.

    The options are the recipe (mlt-run's --fp8-...): `products` (fprop,
    dgrad, wgrad: the roles made FP8, Transformer Engine's names),
    `fprop-accumulation` (fast or f32), `format` (hybrid, or e4m3 for the
    gradients too), `bf16-first-layers` and `bf16-last-layers` (decoder
    layers kept bf16, counted in the model's `mlt.model`, so a pipeline
    stage keeps the model's last layers, not its own) and `bf16-parameters`
    (parameters kept bf16 by a part of their names). The defaults are the
    hybrid recipe above on every decoder layer: on TinyLlama-1.1B's first
    300 steps no other recipe measured closer to bf16 for its cost
    (bench/RESULTS.md).

    Before:
    ```mlir
    mlt_rt.launch "matmul" [@x, @"param_bf16:model.layers.0.q.weight"] -> [@q] ints [1, 32, 64, 64, 0, 1, 0]
    ```
    After:
    ```mlir
    mlt_rt.launch "amax" [@x] -> [@"fp8.amax:x"] ints [2048]
    mlt_rt.launch "quantize_fp8" [@x, @"fp8.amax:x"] -> [@"fp8.e4m3:x", @"fp8.scale_inv:x"] ints [32, 64, 0]
    mlt_rt.launch "amax" [@"param_bf16:model.layers.0.q.weight"] -> [@"fp8.amax:param_bf16:model.layers.0.q.weight"] ints [4096]
    mlt_rt.launch "quantize_fp8" ...
    mlt_rt.launch "matmul_fp8" [@"fp8.e4m3:x", @"fp8.scale_inv:x", @"fp8.e4m3:param_bf16:...", @"fp8.scale_inv:param_bf16:..."] -> [@q] ints [32, 64, 64, 0, 1]
    ```
  }];
  let options = [
    Option<"allProducts", "all-products", "bool", /*default=*/"false",
           "also the products of parameters outside the decoder layers (the output layer)">,
    ListOption<"products", "products", "std::string",
               "the products made FP8, of fprop (x W^T), dgrad (dy W) and wgrad (dy^T x); empty: all three">,
    Option<"fpropAccumulation", "fprop-accumulation", "std::string",
           /*default=*/"\"fast\"",
           "the forward products' accumulation: fast (the tensor cores' FP8 accumulator) or f32 (promoted, as the gradients' always are)">,
    Option<"format", "format", "std::string", /*default=*/"\"hybrid\"",
           "hybrid (e4m3 activations and weights, e5m2 gradients) or e4m3 (gradients too)">,
    ListOption<"bf16Parameters", "bf16-parameters", "std::string",
               "parameters whose products stay bf16: those whose names contain one of these">,
    Option<"bf16FirstLayers", "bf16-first-layers", "int64_t", /*default=*/"0",
           "the first N decoder layers keep bf16 products">,
    Option<"bf16LastLayers", "bf16-last-layers", "int64_t", /*default=*/"0",
           "the last N decoder layers (of the model's, mlt.model) keep bf16 products">
  ];
  let dependentDialects = ["::mlt::rt_ir::MLTRTDialect"];
}

def MLTCoalesceReductions : Pass<"mlt-coalesce-reductions", "::mlir::ModuleOp"> {
  let summary = "reduces a run of gradients' all-reduces as one flat buffer";
  let description = [{
    In-place `all_reduce_sum` launches of gradients that a program runs one
    after another, on one stream and one mesh axis, of one element type
    (the run's first may wait, its last may be waited for), become one
    all-reduce of a flat gradient buffer (`grad_flat.N`, a bucket) that
    holds those gradients side by side: each becomes a view of it, at a
    multiple of 128 elements, in the run's order. The gradients the
    schedule-overlap pass reduces as one bucket over dp (without ZeRO),
    and the norm weights' gradients that sequence parallelism leaves
    partial over tp, are reduced in one collective instead of one each
    (Megatron's contiguous gradient buffers; its all-reduce of the layer
    norms' gradients). A gradient is laid out once: one already a view (a
    ZeRO bucket's, or an earlier run's) ends a run.

    Runs after the overlap passes (which place the reductions) and before
    mlt-plan-memory (which places the views in their base).

    Before:
    ```mlir
    mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [100, 0] stream 1 waits [3]
    mlt_rt.launch "all_reduce_sum" [@"grad:b"] -> [@"grad:b"] ints [64, 0] stream 1
    ```
    After (`grad:a` and `grad:b` views of `grad_flat.0` at 0 and 128):
    ```mlir
    mlt_rt.launch "all_reduce_sum" [@grad_flat.0] -> [@grad_flat.0] ints [256, 0] stream 1 waits [3]
    ```
  }];
  let dependentDialects = ["::mlt::rt_ir::MLTRTDialect"];
}

def MLTFuseAmax : Pass<"mlt-fuse-amax", "::mlir::ModuleOp"> {
  let summary = "takes FP8 scaling statistics from the kernels that write the tensors";
  let description = [{
    Current scaling reads a tensor twice before an FP8 product: an `amax`
    launch for its largest magnitude, then `quantize_fp8`. Where the tensor
    was just written by a kernel that can also measure it (Kernels.def's
    fused amax outputs: rms_norm_fwd's y, rms_norm_bwd(_add)'s dx,
    swiglu_fwd's y, swiglu_bwd's dgate, dup and recomputed y,
    attention_fwd's out, attention_bwd(_rope)'s dq, dk and dv), the amax
    launch's output becomes a trailing output of that kernel, which reduces
    the values it stores as it stores them (the same f32 value, bit for
    bit: a maximum does not depend on its order), and the amax launch goes:
    one read of the tensor less. Transformer Engine's normalization and
    activation kernels do the same for its FP8 recipes.

    An amax joins the launch that last wrote its tensor, in the same
    program, when: that launch wrote the whole tensor as an output that
    takes an amax; both run on one stream; the amax waits for nothing and
    nothing waits for it; nothing in between touches the amax's buffer (it
    is written earlier once fused); and, for swiglu_bwd and the attention
    backward, every one of its outputs that takes an amax has one (the
    kernel writes all or none). Other amax launches stay (the weights').
    Beside an attention's products the maximum costs nothing to speak of,
    and cost models price it as one without (Calibration.cpp's launchClass).

    Runs after mlt-keep-weight-fp8 (the launches are final) and before
    mlt-plan-memory. On LLaMA-2-7B with `--fp8` it leaves no amax launch of
    an activation or gradient (twelve a layer in a micro-batch with SwiGLU
    recomputed), only the weights' (bench/RESULTS.md).

    Before:
    ```mlir
    mlt_rt.launch "swiglu_fwd" [@gate, @up] -> [@h] ints [4096]
    mlt_rt.launch "amax" [@h] -> [@"fp8.amax:h"] ints [4096]
    ```
    After:
    ```mlir
    mlt_rt.launch "swiglu_fwd" [@gate, @up] -> [@h, @"fp8.amax:h"] ints [4096]
    ```
  }];
  let dependentDialects = ["::mlt::rt_ir::MLTRTDialect"];
}

def MLTKeepWeightFp8 : Pass<"mlt-keep-weight-fp8", "::mlir::ModuleOp"> {
  let summary = "quantizes each FP8 weight once a step";
  let description = [{
    The weights do not change between a step's micro-batches, so the `amax`
    that mlt-fp8-products launches for a parameter copy, and the
    `quantize_fp8` of the copy with it (its scale and its FP8 copies), give
    the same bits in every body of the step. In the training step
    (`@step`), the program of the first call that launches such an amax
    (the producer: called once in the step and never by the evaluation
    step, as micro_step_first is) keeps its first amax of each weight, and
    what the first quantization that reads it writes, for the step
    (`step_kept`, which mlt-plan-memory keeps live from the step's first
    call that touches it to its last); the programs called only after it in
    the step (micro_step, micro_step_last) read those buffers instead.

    What is kept (`copies`):
    - `transposed` (the default): the transposed copy, the one the
      backward's data-gradient product reads. A body holds it from its
      forward to its backward, through its peak, so keeping it costs no
      memory there (only the optimizer step, which runs while it is kept,
      sees it beside its own temporaries). A later body's quantization of
      both layouts becomes one of the forward layout alone (`ints[2]` 2 ->
      0), from the kept amax.
    - `both`: the forward copy too, and later bodies quantize nothing. The
      forward copy dies after the forward product in a body, before its
      peak: keeping it adds a byte a weight to the peak (6 GiB at
      LLaMA-2-7B).
    A quantization of other sizes or layouts stays, reading the kept amax.
    The producer's launches may wait for a side stream (ZeRO's overlapped
    gathers of the parameter copies: each layer's first launch waits for
    its bucket); a reader's are removed only where plain (a wait or a token
    orders what follows it). Weights are told apart by their own buffers
    (ZeRO's copies are views of flat buckets), their writes by the base.
    A weight is not kept where the producer writes it after its amax, nor
    for a program that writes it itself or is called after another call
    writes it, and nothing is kept that a second launch writes; pipeline
    schedules, whose forward body is every micro-batch's, keep nothing.

    Runs after the schedule and the overlap passes (the bodies and the step
    are final) and before mlt-plan-memory. On LLaMA-2-7B with `--fp8`
    (sequences of 4096, 16 micro-batches a step) it removes the 224 weights'
    amax launches from 15 of the 16 bodies, and their transposed copies'
    writes (bench/RESULTS.md).

    Before (micro_step):
    ```mlir
    mlt_rt.launch "amax" [@"param_bf16:w"] -> [@"fp8.amax:w_4"] ints [4096]
    mlt_rt.launch "quantize_fp8" [@"param_bf16:w", @"fp8.amax:w_4"]
        -> [@"fp8.scale_inv:w_5", @"fp8.e4m3:w_6", @"fp8.e4m3.t:w_7"] ints [64, 64, 2]
    ...
    mlt_rt.launch "matmul_fp8" [@dy, @dys, @"fp8.e4m3.t:w_7", @"fp8.scale_inv:w_5"] -> ...
    ```
    After (micro_step; micro_step_first keeps `fp8.amax:w_0` and its
    quantization's `fp8.e4m3.t:w_3`):
    ```mlir
    mlt_rt.launch "quantize_fp8" [@"param_bf16:w", @"fp8.amax:w_0"]
        -> [@"fp8.scale_inv:w_5", @"fp8.e4m3:w_6"] ints [64, 64, 0]
    ...
    mlt_rt.launch "matmul_fp8" [@dy, @dys, @"fp8.e4m3.t:w_3", @"fp8.scale_inv:w_5"] -> ...
    ```
  }];
  let options = [
    Option<"copies", "copies", "std::string", /*default=*/"\"transposed\"",
           "the FP8 copies kept: transposed (the backward's; later bodies quantize the forward copy alone) or both">
  ];
  let dependentDialects = ["::mlt::rt_ir::MLTRTDialect"];
}

def MLTGroupProducts : Pass<"mlt-group-products", "::mlir::ModuleOp"> {
  let summary = "runs independent matrix products of one shape as one batched launch";
  let description = [{
    In each program, `matmul` (and `matmul_accumulate`) launches of one
    shape (their ints, operand and result types) that do not depend on each
    other become one `matmul_group` launch (Kernels.def), which the CUDA
    backend runs as one pointer-array batched cuBLASLt launch: a layer's q,
    k and v products share the normalized input, and so do their weight
    gradients, each too small to fill an H100 alone
    (bench/matmul-notes.md, "Grouped products": 0.5-0.6 ms a 125m step).
    The CPU backend runs the products one by one, as the separate launches
    did, so its results are the same bits.

    Which launches group, and where they go, is
    `mlt::analysis::groupLaunches` (mlt/Analysis/ProductGroups.h): the first
    launch of a shape gathers the later ones within `window` launches that
    conflict (write what another reads or writes) neither with a member nor
    with a launch they move past; a launch that is not plain (another
    stream, waits, a token) or not a launch is a barrier nothing crosses.
    Buffers are compared by their base (a view is its base buffer). The
    input gradients, which accumulate into one buffer, stay apart.

    Before:
    ```mlir
    mlt_rt.launch "matmul" [@dv, @x] -> [@"grad:wv"] ints [1, 64, 64, 128, 1, 0, 0]
    mlt_rt.launch "matmul" [@dv, @"param:wv"] -> [@dx] ints [1, 128, 64, 64, 0, 0, 0]
    mlt_rt.launch "matmul" [@dk, @x] -> [@"grad:wk"] ints [1, 64, 64, 128, 1, 0, 0]
    ```
    After:
    ```mlir
    mlt_rt.launch "matmul_group" [@dv, @dk, @x, @x] -> [@"grad:wv", @"grad:wk"] ints [1, 64, 64, 128, 1, 0, 0, 0]
    mlt_rt.launch "matmul" [@dv, @"param:wv"] -> [@dx] ints [1, 128, 64, 64, 0, 0, 0]
    ```
  }];
  let options = [
    Option<"window", "window", "int64_t", /*default=*/"64",
           "how many launches after a group's first its members may come from">
  ];
  let dependentDialects = ["::mlt::rt_ir::MLTRTDialect"];
}

def MLTSchedulePipeline : Pass<"mlt-schedule-pipeline", "::mlir::ModuleOp"> {
  let summary = "makes the training step: the schedule of the bodies' calls";
  let description = [{
    Builds `mlt_rt.step @step`, the one program the runtime runs per
    training step, from the lowered bodies (`@micro_step`,
    `@micro_step_first`, `@optimizer_step`) and the step's micro-batch count
    (`mlt_rt.microbatches`, 1 when absent):

    1. the schedule of `schedule` (PipelineSchedule.h: `1f1b`, `gpipe`) for
       the module's stages and micro-batches: one stage until pipeline
       partitioning splits the model, so `F0.0 B0.0 F1.0 B1.0 ...`;
    2. each forward with the backward right after it on its stage becomes
       one call of the micro-batch's fused forward-backward body, naming
       both items: `@micro_step_first` for micro-batch 0 (it writes the
       gradients), `@micro_step` for the others; where the module has no
       `@micro_step_first`, the step first zeroes the gradients (a program
       `@zero_gradients` of `fill` launches) and every micro-batch calls
       `@micro_step`;
    3. the step ends with a call of `@optimizer_step`.

    A schedule that separates a micro-batch's forward from its backward
    (`gpipe` with several micro-batches; pipeline stages) splits each
    micro-step body where its backward starts (`backward_start`, which
    mlt-lower-to-runtime records) into `@forward` and `@backward` (and
    `@backward_first`, which reads `@forward`'s temporaries); the
    temporaries both halves touch are the activations kept from a
    micro-batch's forward call to its backward call, and get a copy per
    slot (`per_slot S`): a micro-batch takes the lowest free slot at its
    forward and gives it back at its backward, so S is the number of
    micro-batches the schedule keeps in flight, and mlt-plan-memory plans
    exactly S sets of them. Every launch is the same as in the fused
    bodies, in the same order per micro-batch: the results are the same
    bits.

    A pipeline stage's module (`mlt.stage = s`, mlt-partition-pipeline)
    takes stage s's share of the schedule of all stages (the mesh's `pp`).
    Its bodies' sends and receives move into programs of their own
    (`forward_send`, `backward_recv`, ...), called with the body's
    micro-batch and slot: the receives before the body, the sends after it,
    so that adjacent transfer calls form one group (a send after an item
    paired with the next item's receive, as Megatron's
    `send_forward_recv_backward`), which is what keeps blocking transfers
    from deadlocking. Only the last stage keeps fused bodies (it receives
    first and sends last). Every temporary that the calls of two programs
    touch (a body and its transfers, a forward and its backward) gets a
    copy per slot. `zb-h1` also splits each backward body into B (the
    rest) and W (`backward_weight`: the launches that only write weight
    gradients), called for the schedule's W items; a micro-batch's slot is
    then freed at its W.

    An interleaved stage (mlt-merge-chunks, `mlt.chunks = V`, `schedule =
    interleaved`, `group-size`: Megatron's
    microbatch_group_size_per_vp_stage) takes its share of Megatron-Core's
    interleaved 1F1B over the chunks' bodies (`c<c>.forward`, ...), each
    chunk with slots of its own. Where the transfer calls go comes from
    `placeTransfers` (PipelineSchedule.h): next to their items for the
    other schedules, by rounds for the interleaved one, which keeps a
    backward's slot until its send when that comes later.

    A module with the evaluation body (`@eval_forward`,
    mlt-attach-evaluation; `c<c>.eval_forward` per chunk) also gets
    `mlt_rt.step @eval_step`, what the runtime runs to evaluate the loss
    between training steps: the schedule's forward items alone, in its
    order (`forwardSchedule`), each a call of the evaluation body; on a
    pipeline stage wrapped in its own transfers (`eval_forward_recv`,
    `eval_forward_send`), placed by the training schedule's rule, with the
    temporaries a transfer and the body share kept per slot, as above.

    ```mlir
    mlt_rt.step @eval_step {
      mlt_rt.call @eval_forward microbatch 0 work [F0.0]
      mlt_rt.call @eval_forward microbatch 1 work [F1.0]
    }
    ```

    After (`microbatches=3`):
    ```mlir
    mlt_rt.step @step {
      mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
      mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
      mlt_rt.call @micro_step microbatch 2 work [F2.0, B2.0]
      mlt_rt.call @optimizer_step
    }
    ```

    ```mlir
    // schedule=gpipe, microbatches=2
    mlt_rt.buffer @t57 temporary per_slot 2 : tensor<4x32x128xf32>
    mlt_rt.step @step {
      mlt_rt.call @forward microbatch 0 slot 0 work [F0.0]
      mlt_rt.call @forward microbatch 1 slot 1 work [F1.0]
      mlt_rt.call @backward_first microbatch 0 slot 0 work [B0.0]
      mlt_rt.call @backward microbatch 1 slot 1 work [B1.0]
      mlt_rt.call @optimizer_step
    }
    ```
  }];
  let options = [
    Option<"schedule", "schedule", "std::string", "\"1f1b\"",
           "the order of the micro-batches' passes: 1f1b, gpipe, zb-h1 or "
           "interleaved (stages of several model chunks)">,
    Option<"groupSize", "group-size", "int64_t", "0",
           "interleaved: the micro-batches a chunk runs in a row (0: the "
           "stages)">
  ];
}

def MLTPartitionOptimizer : Pass<"mlt-partition-optimizer", "::mlir::ModuleOp"> {
  let summary = "partitions the optimizer state (ZeRO-1) and the gradients (ZeRO-2) over the ranks that hold the same parameters";
  let description = [{
    With `zero=1`, each data-parallel rank keeps the AdamW state (moments,
    and the f32 master weights of a bf16 plan) of a 1/dp slice of the
    parameters only, as Megatron's distributed optimizer does. The ranks
    partitioned over are all those that hold the same parameters and sum
    their gradients: dp x cp, those of size 2 or more (mlt::zeroAxes;
    Megatron's "dp-cp" group; "dp" below stands for them). Over both, a
    rank's slice is block c(dp) x cp + c(cp) (`shard = "dp*cp"`): each
    reduce-scatter is one over dp into the rank's slice over dp (a view of
    the bucket, `shard = "dp"`, in place), then one over cp of that into
    the rank's slice; each all-gather the same levels in reverse. Every
    collective stays over one axis, with the bytes of one over the
    flattened group:

    - the gradients of parameters treated alike (the same weight decay and
      the same mesh axes the parameter is split over) are laid out in flat
      buckets (`mlt/Analysis/FlatBuckets.h`: in the order the last
      micro-batch's backward pass finishes them, closed at `bucket-bytes`,
      each member aligned to 128 elements, each bucket padded to a
      multiple of 128 x dp); each gradient becomes a view of its bucket
      (`view`, `view_offset`), and so do the parameters the forward pass
      reads (the f32 parameters, or the bf16 copies of a mixed-precision
      plan);
    - rank c owns the c-th 1/dp of every bucket, cutting through
      parameters where it falls: its slice of the gradient bucket (a view,
      `shard = "dp"`), its AdamW moments and (bf16) its master weights
      (slices stored apart, `layout`), which `owns` the ranges of the
      parameters they cover (the plan's segments, from which mlt-run
      initializes, loads and saves whole tensors);
    - the optimizer step reduce-scatters each gradient bucket into the
      rank's slice (replacing the data-parallel all-reduces;
      mlt-schedule-overlap moves them under the backward pass), computes
      the gradient norm from the slices (each slice's sum of squares an
      aligned element of one vector, summed over dp by one all-reduce and
      over the axes a group is split over by one more per axis), updates
      the slices with one AdamW launch each, and all-gathers each updated
      parameter bucket;
      `refresh_parameter_copies` casts the master slices and all-gathers.

    With `zero=2` the gradients are partitioned too (Megatron-LLaMA's
    overlapped distributed optimizer): each gradient is a view of a
    temporary bucket of the body that computes a micro-batch's gradients
    (every micro-batch's call runs the body that writes them, rather than
    the one that adds them up); the body zeroes each bucket's padding before
    it first touches the bucket, and ends by reduce-scattering each bucket
    into a temporary slice that it adds into the rank's gradient slice (a
    persistent buffer of its own, owning its ranges), after the reductions
    over other axes (sequence-parallel norm weights over tp) that the
    optimizer step had; the step starts by zeroing the gradient slices
    (`zero_gradients`), and its optimizer step reduces nothing.

    With `grad-reduce-dtype=bf16` (zero=2, bf16 plans; FSDP2's
    `reduce_dtype`), the gradients a single matrix product writes are
    computed in bf16 (the product's f32 sums rounded once), kept in bf16
    buckets (groups never mix types) and reduce-scattered in bf16 (half the
    bytes of f32), then widened (one micro-batch: `cast`) or added
    (`accumulate`) into the f32 gradient slices; the norm weights' and the
    embedding's gradients stay f32.

    Persistent state per parameter, bf16: 2 (copy) + 4 (gradient) + 12/dp
    bytes (master, moments) at zero=1, 2 + 16/dp at zero=2, instead of 18;
    f32: 8 + 8/dp and 4 + 12/dp instead of 16. `zero=0` leaves the module
    unchanged. Runs after mlt-schedule-pipeline
    (the readiness order comes from the step's last micro-batch) and before
    mlt-schedule-overlap.

    After (`@optimizer_step`, one bucket):
    ```mlir
    mlt_rt.launch "reduce_scatter_sum" [@"grad_bucket.0"] -> [@"grad_shard.0"] ints [4096, 0]
    mlt_rt.launch "fill" [] -> [@"sum_squares.slices"] ints [64] floats [0.0]
    mlt_rt.launch "sum_squares" [@"grad_shard.0"] -> [@"sum_squares.grad_shard.0"] ints [4096]
    mlt_rt.launch "all_reduce_sum" [@"sum_squares.slices"] -> [@"sum_squares.slices"] ints [64, 0]
    mlt_rt.launch "global_norm" [@"sum_squares.grad_shard.0"] -> [@grad_norm]
    mlt_rt.launch "clip_coefficient" [@grad_norm, @hyper.max_grad_norm] -> [@clip_coefficient]
    mlt_rt.launch "adamw" [@"grad_shard.0", @clip_coefficient, @hyper.lr, ...] -> [@"param_shard.0", @"exp_avg_shard.0", @"exp_avg_sq_shard.0"] ints [4096, 1]
    mlt_rt.launch "all_gather" [@"param_shard.0"] -> [@"param_bucket.0"] ints [4096, 0]
    ```
  }];
  let options = [
    Option<"zero", "zero", "int64_t", "0",
           "the ZeRO stage: 0 (every rank keeps the whole optimizer state), "
           "1 (optimizer state partitioned over dp) or 2 (gradients too)">,
    Option<"bucketBytes", "bucket-bytes", "int64_t", "33554432",
           "close a flat bucket once it holds this many bytes of gradients">,
    Option<"gradReduceDtype", "grad-reduce-dtype", "std::string", "\"f32\"",
           "the type zero=2 reduce-scatters gradients in: f32, or bf16 (the "
           "matrix products' gradients computed and reduced in bf16, "
           "added into the f32 slices)">
  ];
}

def MLTScheduleOverlap : Pass<"mlt-schedule-overlap", "::mlir::ModuleOp"> {
  let summary = "reduces the gradients under the backward pass, on a stream of their own";
  let description = [{
    Moves the reductions of the gradients over the ranks that share them
    (data parallelism: the `all_reduce_sum` of a gradient buffer in place
    with which a lowered `@optimizer_step` starts, before anything else
    there touches that buffer; or with a partitioned optimizer the
    `reduce_scatter_sum` of a flat gradient bucket into the rank's slice,
    ready once all the gradients viewing the bucket are) out of the optimizer step and into the
    backward pass of the step's last micro-batch, where they overlap the
    backward of the layers below:

    - the step's (`mlt_rt.step`) call of the last micro-batch calls a copy
      of its body instead, with temporaries of its own: `@micro_step_last`
      of `@micro_step`, or `@micro_step_only` of `@micro_step_first` in a
      step of one micro-batch;
    - there, each gradient's reduction goes right after the last launch that
      touches the gradient, on stream 1 (kGradientReduceStream), grouped in
      buckets of at least `bucket-bytes` in the order they become ready (the
      planner of `mlt/Analysis/GradientBuckets.h`, whose checker verifies
      the plan): the bucket's first reduction waits for the token that its
      last-ready gradient's last launch signals, the others follow on the
      stream;
    - the optimizer step no longer reduces them.

    With ZeRO-2, the reductions with which each micro-batch's body ends
    (the in-place all-reduces of gradient views over other axes, the
    reduce-scatters of its gradient buckets) move under that body's backward
    pass on stream 1 likewise, each reduce-scatter signalling a token; the
    accumulate of its slice into the rank's gradient slice stays at the
    body's end on the compute stream (the CUDA backend runs kernels other
    than collectives on stream 0 only), waiting for that token.

    With a partitioned optimizer (mlt-partition-optimizer), the all-gathers
    of updated parameter buckets with which `@optimizer_step` ends move to
    the start of the body of the next step's first micro-batch (a copy of
    it, `<body>_gather`, if other calls run it too), on stream 2
    (kParameterGatherStream), in the order the body first touches the
    buckets, each signalling a token that the first launch touching its
    bucket (or a view of it) waits for, so each layer waits only for its
    own bucket, as Megatron's `--overlap-param-gather` does; the plan
    verifier's race check proves no launch reads a bucket before its
    gather. The runtime's refresh_parameter_copies, run after it writes
    parameters, gathers them too, so the first step's forward reads whole
    parameters. An evaluation step (`@eval_step`, mlt-attach-evaluation),
    which runs between steps, starts with a call of
    `@eval_gather_parameters`, the same gathers on the compute stream.

    Every launch on the compute stream keeps its order, so the sums are the
    same bits; only their time changes. Without such reductions (one rank,
    or tensor parallelism alone) the module is unchanged.

    After (`@micro_step_last`):
    ```mlir
    mlt_rt.launch "matmul" [@t40, @t12] -> [@"grad:model.layers.1.mlp.down_proj.weight"] ints [...] token 0
    mlt_rt.launch "all_reduce_sum" [@"grad:model.layers.1.mlp.down_proj.weight"] -> [@"grad:model.layers.1.mlp.down_proj.weight"] ints [45056, 0] stream 1 waits [0]
    ```
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t", "33554432",
           "close a bucket of reductions once it holds this many bytes of "
           "gradients (0: every gradient is a bucket of its own)">,
    Option<"overlapGradReduce", "grad-reduce", "bool", "true",
           "move the gradient reductions under the backward pass">,
    Option<"overlapParamGather", "param-gather", "bool", "true",
           "move a partitioned optimizer's parameter all-gathers under the "
           "next step's first forward pass">
  ];
}

def MLTOverlapCpComm : Pass<"mlt-overlap-cp-comm", "::mlir::ModuleOp"> {
  let summary = "runs context parallelism's ring permutes on a stream of their own, under the block attentions";
  let description = [{
    In each program, every `collective_permute` over the `cp` mesh axis on
    the compute stream (mlt-ring-attention's, lowered) moves to stream 4
    (kContextParallelStream). It waits for the compute stream's launch right
    before it (which mlt-ring-attention made the step before the one its
    block is for, so the block travels while the compute stream attends to
    the one in hand), for its input's producer where another side stream
    wrote it, and for the last earlier collective over `cp` of each other
    side stream (one communicator serves the axis, which its group must
    meet in one order); it signals a token, and the first later launch of
    each stream that reads or writes what it does, or runs a collective over
    `cp`, waits for it.

    Program order stays a valid order of the launches, so the CPU backend,
    which runs program order, computes the same bits. Without a cp axis of
    2 or more the module is unchanged.

    Before and after (forward, cp 2):
    ```mlir
    mlt_rt.launch "collective_permute" [@t3] -> [@t5] ints [2048, 0, 1]
    mlt_rt.launch "attention_fwd" [@t1, @t3, @t4] -> [@t7, @t8] ints [...]
    mlt_rt.launch "attention_fwd" [@t1, @t5, @t6] -> [@t9, @t10] ints [...]
    ```
    ```mlir
    mlt_rt.launch "rope" [@t2] -> [@t3] ints [...] token 0
    mlt_rt.launch "collective_permute" [@t3] -> [@t5] ints [2048, 0, 1] stream 4 waits [0] token 1
    mlt_rt.launch "attention_fwd" [@t1, @t3, @t4] -> [@t7, @t8] ints [...]
    mlt_rt.launch "attention_fwd" [@t1, @t5, @t6] -> [@t9, @t10] ints [...] waits [1, 2]
    ```
  }];
}

def MLTOverlapTpComm : Pass<"mlt-overlap-tp-comm", "::mlir::ModuleOp"> {
  let summary = "runs the backward pass's tp all-reduces (reduce-scatters with sequence parallelism) under the weight-gradient products";
  let description = [{
    In each program, an all-reduce over the `tp` mesh axis of a temporary
    into another (the input gradient that the column-parallel products'
    partial sums make), or with sequence parallelism its reduce-scatter
    along the sequence, moves to stream 3 (kTensorParallelStream), waiting
    for its input's producer's token, and the weight-gradient products
    before it (products, bf16 or FP8, that write gradients alone, back to the previous
    collective over tp) that neither it nor the launches between depend on,
    nor they on them, move right after it, in their order: they run on the
    compute stream while the gradient travels, as Megatron's asynchronous
    tensor-parallel all-reduce overlaps it with the weight gradient's
    product. The first later launch of each stream that reads or writes
    what the all-reduce does, or runs a collective over tp, waits for its
    token.

    Program order stays a valid order of the launches and the weight
    gradients' products keep their operands, so the CPU backend, which runs
    program order, computes the same bits. Without a tp axis the module is
    unchanged.

    Collective matmuls (sequence parallelism with micro-batches of one
    sequence, where an all-gather over tp of a temporary feeds the
    column-parallel products directly): the gather moves to stream 3,
    waiting for its input's producer, and each product of its rows right
    after it (`matmul`, or a `matmul_group` that does not accumulate, of one
    batch, untransposed) becomes one product per rank's block: first on the
    rank's own block, which is the gather's input, into the rows of the
    result it gives (a view of the result, `shard = "tp"`), while the gather
    travels; then, waiting for the gather's token, on each other rank's
    block of the gathered buffer (`shard = "tp", shard_shift = k`: the block
    of coordinate c + k) into its rows. The smaller products round their
    sums in another order than the whole one: training agrees within
    1e-5, not bit for bit. With a calibration (the `calibration` option, or
    mlt-run's `--calibration`: a device measured on its own plans), each
    collective matmul is priced both ways
    (mlt/Analysis/CollectiveMatmul.h: the gather exposed before the whole
    products, against the gather beside the own block's products and
    then G - 1 more launches of each, their launch gaps counted), and split
    only where that is faster; without one, every one is split.

    Before and after:
    ```mlir
    mlt_rt.launch "matmul_group" [@t228, @t227, @t210, @t210] -> [@"grad:up", @"grad:gate"] ints [...]
    mlt_rt.launch "matmul_add" [@t227, @"param:gate", @t229] -> [@t230] ints [...]
    mlt_rt.launch "all_reduce_sum" [@t230] -> [@t231] ints [8192, 0]

    mlt_rt.launch "matmul_add" [@t227, @"param:gate", @t229] -> [@t230] ints [...] token 0
    mlt_rt.launch "all_reduce_sum" [@t230] -> [@t231] ints [8192, 0] stream 3 waits [0] token 1
    mlt_rt.launch "matmul_group" [@t228, @t227, @t210, @t210] -> [@"grad:up", @"grad:gate"] ints [...]
    ```
  }];
  let options = [
    Option<"calibration", "calibration", "std::string", /*default=*/"\"\"",
           "a calibration file (mlt-run --calibrate's) whose costs decide "
           "each collective matmul; none: every one is split">
  ];
}

def MLTPlanMemory : Pass<"mlt-plan-memory", "::mlir::ModuleOp"> {
  let summary = "gives every runtime buffer its arena offset";
  let description = [{
    Lays out the arena of a lowered module: the persistent buffers
    (parameters, gradients, optimizer states, inputs, outputs, constants) one
    after another in declaration order, then the temporaries of each program,
    planned from their lifetimes (first to last launch that touches them) by
    the greedy-by-size planner of `mlt/Analysis/MemoryPlan.h`, so temporaries
    that are never alive together share memory. Programs run one at a time,
    so they share the temporary region. When the step keeps temporaries
    from one call to a later one (`per_slot`: a forward body's activations
    for its backward body), the programs' regions and the kept temporaries
    are planned across the step by `mlt/Analysis/StepMemoryPlan.h`: a
    region is live in its program's calls, a kept temporary from the first
    to the last call of each micro-batch that touches it, and blocks live
    in a common call do not overlap, so a schedule that keeps k
    micro-batches in flight pays for k sets and plain accumulation for one. Sets `offset` on every buffer and
    `mlt_rt.arena_bytes` on the module: the exact memory the runtime will
    allocate. Offsets are aligned to `alignment` bytes.

    In place (`in-place`, on by default): a temporary that a launch writes
    first may take the offset of a temporary that the launch reads for the
    last time, where the kernel overwrites that input element for element
    (Kernels.def's "In place", `mayAlias` in KernelInfo.h, which the plan
    verifier checks too) and the two have one element type and size. The
    logits then make room for their gradient, a residual for the sum that
    `matmul_add` writes over it, a map's input for its output:

    ```mlir
    mlt_rt.buffer @logits temporary offset 1024 : tensor<4x32x256xbf16>
    mlt_rt.buffer @dlogits temporary offset 1024 : tensor<4x32x256xbf16>
    ...
    mlt_rt.launch "cross_entropy_bwd" [@dloss, @logits, @labels] -> [@dlogits] ints [128, 256]
    ```
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", "256",
           "byte alignment of every buffer">,
    Option<"inPlace", "in-place", "bool", "true",
           "let an output take the memory of an input that dies at its "
           "launch, where the kernel allows it">
  ];
}

#endif // MLT_PASSES_PASSES_TD
