//===- TestPlans.h - plans built in code for tests --------------*- C++ -*-===//
//
// Part of mlt. A small builder that lays buffers out in an arena and appends
// launches, the training inputs and outputs every plan must have, and two
// complete training plans, built for one rank or sharded over a mesh as the
// compiler is to emit them: the tiny model (embedding -> RMSNorm -> LM head
// -> cross-entropy) data parallel, and a model with a column/row-parallel
// MLP, tensor and data parallel. Plain C++ (no GoogleTest), so that
// mlt-make-test-plan can write these plans as files too.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_UNITTESTS_RUNTIMEEXEC_TESTPLANS_H
#define MLT_UNITTESTS_RUNTIMEEXEC_TESTPLANS_H

#include "mlt/Plan/Plan.h"
#include "mlt/Plan/PlanFormat.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlt::rt::testing {

/// Appends buffers (each at the next 256-byte aligned offset) and launches to
/// one rank of a plan (rank 0 unless built with `rankPlan`).
class PlanBuilder {
public:
  uint32_t add(const std::string &name, BufferKind kind,
               std::vector<int64_t> shape, ElementType dtype = ElementType::F32,
               const std::string &parameter = "", bool decay = false,
               double constant = 0.0) {
    BufferDesc buffer;
    buffer.name = name;
    buffer.kind = kind;
    buffer.dtype = dtype;
    buffer.shape = std::move(shape);
    buffer.bytes = uint64_t(buffer.numElements()) * elementSize(dtype);
    buffer.offset = next_;
    buffer.parameter = parameter;
    buffer.decay = decay;
    buffer.constantValue = constant;
    next_ += (buffer.bytes + kPlanBufferAlignment - 1) / kPlanBufferAlignment *
             kPlanBufferAlignment;
    rank_.buffers.push_back(buffer);
    return uint32_t(rank_.buffers.size() - 1);
  }

  /// A view of buffer `base` (which `add` placed), `elementOffset` elements
  /// into it; the builder's next offset does not move.
  uint32_t view(const std::string &name, BufferKind kind, uint32_t base,
                int64_t elementOffset, std::vector<int64_t> shape,
                const std::string &parameter = "", bool decay = false) {
    const BufferDesc &of = rank_.buffers[base];
    BufferDesc buffer;
    buffer.name = name;
    buffer.kind = kind;
    buffer.dtype = of.dtype;
    buffer.shape = std::move(shape);
    buffer.bytes = uint64_t(buffer.numElements()) * elementSize(of.dtype);
    buffer.offset = of.offset + uint64_t(elementOffset) * elementSize(of.dtype);
    buffer.parameter = parameter;
    buffer.decay = decay;
    buffer.viewOf = int32_t(base);
    rank_.buffers.push_back(buffer);
    return uint32_t(rank_.buffers.size() - 1);
  }

  uint32_t temp(const std::string &name, std::vector<int64_t> shape,
                ElementType dtype = ElementType::F32) {
    return add(name, BufferKind::Temporary, std::move(shape), dtype);
  }

  /// A parameter with its gradient and both AdamW moments; returns the
  /// parameter's index (the others follow it: +1 grad, +2 m, +3 v). With
  /// `fullShape`, all four hold the block [offset, offset + shape) of it.
  uint32_t param(const std::string &hfName, std::vector<int64_t> shape,
                 bool decay, std::vector<int64_t> fullShape = {},
                 std::vector<int64_t> offset = {}) {
    uint32_t index = add(kParameterPrefix + hfName, BufferKind::Parameter,
                         shape, ElementType::F32, hfName, decay);
    add(kGradientPrefix + hfName, BufferKind::Gradient, shape, ElementType::F32,
        hfName);
    add(kExpAvgPrefix + hfName, BufferKind::OptimizerState, shape,
        ElementType::F32, hfName);
    add(kExpAvgSqPrefix + hfName, BufferKind::OptimizerState, shape,
        ElementType::F32, hfName);
    if (!fullShape.empty())
      for (uint32_t i = index; i < index + 4; ++i)
        block(i, fullShape, offset);
    return index;
  }

  /// Declares buffer `index` the block [offset, offset + shape) of a tensor
  /// of shape `fullShape`.
  void block(uint32_t index, std::vector<int64_t> fullShape,
             std::vector<int64_t> offset) {
    rank_.buffers[index].fullShape = std::move(fullShape);
    rank_.buffers[index].sliceOffset = std::move(offset);
  }

  /// tokens, labels ([microBatch, seqLen] i32), the hyper.* scalars, loss
  /// and grad_norm.
  void trainingIO(int64_t microBatch, int64_t seqLen) {
    add(kTokensInput, BufferKind::Input, {microBatch, seqLen},
        ElementType::I32);
    add(kLabelsInput, BufferKind::Input, {microBatch, seqLen},
        ElementType::I32);
    for (const char *name : {kHyperLR, kHyperBeta1, kHyperBeta2, kHyperEps,
                             kHyperWeightDecay, kHyperMaxGradNorm, kHyperStep})
      add(name, BufferKind::Input, {});
    add(kLossOutput, BufferKind::Output, {});
    add(kGradNormOutput, BufferKind::Output, {});
  }

  uint32_t operator[](const std::string &name) const {
    std::optional<size_t> index = rank_.findBuffer(name);
    if (!index) {
      std::fprintf(stderr, "PlanBuilder: no buffer '%s'\n", name.c_str());
      std::abort();
    }
    return uint32_t(*index);
  }

  void launch(const std::string &program, Kernel kernel,
              std::vector<uint32_t> inputs, std::vector<uint32_t> outputs,
              std::vector<int64_t> ints = {}, std::vector<double> floats = {}) {
    ProgramDesc *target = nullptr;
    for (ProgramDesc &p : rank_.programs)
      if (p.name == program)
        target = &p;
    if (!target) {
      rank_.programs.push_back(ProgramDesc{program, {}});
      target = &rank_.programs.back();
    }
    InstructionDesc inst;
    inst.kernel = kernel;
    inst.inputs = std::move(inputs);
    inst.outputs = std::move(outputs);
    inst.ints = std::move(ints);
    inst.floats = std::move(floats);
    target->instructions.push_back(std::move(inst));
  }

  /// The tail of every optimizer_step: the global norm of `squares` (the
  /// gradients' sums of squares) into grad_norm, the clip coefficient named
  /// `coefName`, and one AdamW per parameter buffer p (with its gradient and
  /// moments at p + 1, p + 2, p + 3).
  void launchClipAndAdamW(const std::string &program,
                          const std::vector<uint32_t> &squares,
                          const std::vector<uint32_t> &params,
                          const std::string &coefName = "clip_coef") {
    uint32_t coef = temp(coefName, {});
    launch(program, Kernel::GlobalNorm, squares, {(*this)[kGradNormOutput]});
    launch(program, Kernel::ClipCoefficient,
           {(*this)[kGradNormOutput], (*this)[kHyperMaxGradNorm]}, {coef});
    for (uint32_t p : params) {
      const BufferDesc &param = rank_.buffers[p];
      launch(program, Kernel::AdamW,
             {p + 1, coef, (*this)[kHyperLR], (*this)[kHyperBeta1],
              (*this)[kHyperBeta2], (*this)[kHyperEps],
              (*this)[kHyperWeightDecay], (*this)[kHyperStep]},
             {p, p + 2, p + 3}, {param.numElements(), param.decay ? 1 : 0});
    }
  }

  Plan plan(const ModelInfo &model = ModelInfo()) const {
    Plan plan;
    plan.formatVersion = kPlanFormatVersion;
    plan.producer = "PlanTestUtil";
    plan.model = model;
    plan.worldSize = 1;
    plan.ranks.push_back(rankPlan(0));
    addTrainingStep(plan.ranks.back(), model.microbatches);
    return plan;
  }

  /// Makes a rank with the programs micro_step and optimizer_step a
  /// training rank as the compiler makes one (a rank without them is left
  /// alone): a copy of tokens, labels and loss per micro-batch (moved to
  /// the end of the arena), a program zero_gradients of fill launches, and
  /// the step: zero_gradients, micro_step for each micro-batch, then
  /// optimizer_step.
  static void addTrainingStep(RankPlan &rank, int64_t microbatches) {
    auto index = [&](const char *name) -> std::optional<uint32_t> {
      for (uint32_t i = 0; i < rank.programs.size(); ++i)
        if (rank.programs[i].name == name)
          return i;
      return std::nullopt;
    };
    std::optional<uint32_t> micro = index(kMicroStepProgram);
    std::optional<uint32_t> optimizer = index(kOptimizerStepProgram);
    if (!micro || !optimizer || !rank.step.empty())
      return;
    for (const char *name : {kTokensInput, kLabelsInput, kLossOutput})
      if (std::optional<size_t> b = rank.findBuffer(name);
          b && microbatches > 1) {
        BufferDesc &buffer = rank.buffers[*b];
        buffer.copies = uint32_t(microbatches);
        buffer.offset = rank.arenaBytes;
        rank.arenaBytes += buffer.copyStride() * buffer.copies;
      }
    ProgramDesc zero{kZeroGradientsProgram, {}};
    for (uint32_t i = 0; i < rank.buffers.size(); ++i)
      if (rank.buffers[i].kind == BufferKind::Gradient) {
        InstructionDesc fill;
        fill.kernel = Kernel::Fill;
        fill.outputs = {i};
        fill.ints = {rank.buffers[i].numElements()};
        fill.floats = {0.0};
        zero.instructions.push_back(fill);
      }
    rank.programs.push_back(zero);
    rank.step.push_back(CallDesc{uint32_t(rank.programs.size() - 1), -1, {}});
    for (int64_t mb = 0; mb < microbatches; ++mb)
      rank.step.push_back(
          CallDesc{*micro, int32_t(mb),
                   {WorkItem{WorkKind::Forward, uint32_t(mb), 0},
                    WorkItem{WorkKind::Backward, uint32_t(mb), 0}}});
    rank.step.push_back(CallDesc{*optimizer, -1, {}});
  }

  /// What was built, as rank `rank` of a plan.
  RankPlan rankPlan(uint32_t rank) const {
    RankPlan result = rank_;
    result.rank = rank;
    result.arenaBytes = next_;
    return result;
  }

  RankPlan &rank() { return rank_; }

private:
  RankPlan rank_;
  uint64_t next_ = 0;
};

/// A plan of the ranks built by `builders` (rank i by builders[i]) over
/// `mesh` (empty: one rank).
inline Plan multiRankPlan(const ModelInfo &model, std::vector<MeshAxis> mesh,
                          const std::vector<PlanBuilder> &builders) {
  Plan plan;
  plan.formatVersion = kPlanFormatVersion;
  plan.producer = "PlanTestUtil";
  plan.model = model;
  plan.worldSize = uint32_t(builders.size());
  plan.mesh = std::move(mesh);
  for (uint32_t r = 0; r < builders.size(); ++r) {
    plan.ranks.push_back(builders[r].rankPlan(r));
    PlanBuilder::addTrainingStep(plan.ranks.back(), model.microbatches);
  }
  return plan;
}

/// The model description of a test plan of shape `m` (a TinyModel or an
/// MlpModel: its vocabulary and micro-batches).
template <typename Shape> ModelInfo testModelInfo(const Shape &m) {
  ModelInfo model;
  model.hfConfig = "{\"model_type\": \"llama\", \"vocab_size\": " +
                   std::to_string(m.vocab) + "}";
  model.vocabSize = m.vocab;
  model.maxPositionEmbeddings = 64;
  model.microBatch = m.microBatch;
  model.seqLen = m.seqLen;
  model.microbatches = m.microbatches;
  return model;
}

/// The shape of the tiny training model of buildTinyPlan; `dp` ranks split
/// each micro-batch's rows (microBatch must be a multiple of dp), or with
/// `splitSequence` its columns (seqLen must be).
struct TinyModel {
  int64_t vocab = 16;
  int64_t hidden = 8;
  int64_t microBatch = 2;
  int64_t seqLen = 4;
  int64_t microbatches = 1;
  int64_t dp = 1;
  /// Split the sequence (over a mesh axis "sp") instead of the rows: the
  /// model has no attention, so positions are as independent as rows are.
  bool splitSequence = false;
};

inline const char *kTinyEmbedding = "model.embed_tokens.weight";
inline const char *kTinyNorm = "model.norm.weight";
inline const char *kTinyHead = "lm_head.weight";

/// The buffers of the tiny model's three parameters (or of their compute
/// copies): the embedding E, the norm weight g and the head W.
struct TinyParameters {
  uint32_t E, g, W;
};

/// micro_step of buildTinyPlan (on the rank's block of `rows` tokens),
/// reading the parameters `params` and accumulating into `grads`; with
/// `activations` bf16, the activations and their gradients are bf16 (the
/// parameters then are the bf16 compute copies), the weight gradients f32.
inline void launchTinyMicroStep(PlanBuilder &b, const TinyModel &m,
                                int64_t rows, TinyParameters params,
                                TinyParameters grads,
                                ElementType activations = ElementType::F32) {
  const int64_t dp = m.dp, V = m.vocab, H = m.hidden;
  const uint32_t E = params.E, g = params.g, W = params.W;
  const ElementType act = activations;
  uint32_t seed = b.add("dloss", BufferKind::Constant, {}, ElementType::F32,
                        "", false, 1.0 / double(m.microbatches * dp));
  uint32_t x = b.temp("x", {rows, H}, act), h = b.temp("h", {rows, H}, act);
  uint32_t logits = b.temp("logits", {rows, V}, act);
  uint32_t dlogits = b.temp("dlogits", {rows, V}, act);
  uint32_t dW = b.temp("dW", {V, H}), dh = b.temp("dh", {rows, H}, act);
  uint32_t dx = b.temp("dx", {rows, H}, act), dg = b.temp("dg", {H});
  uint32_t dE = b.temp("dE", {V, H});
  const uint32_t tokens = b[kTokensInput], labels = b[kLabelsInput];
  const std::vector<double> eps = {1e-5};

  const char *micro = kMicroStepProgram;
  b.launch(micro, Kernel::EmbeddingFwd, {tokens, E}, {x}, {rows, V, H});
  b.launch(micro, Kernel::RMSNormFwd, {x, g}, {h}, {rows, H}, eps);
  b.launch(micro, Kernel::Matmul, {h, W}, {logits}, {1, rows, V, H, 0, 1, 0});
  if (dp == 1) {
    b.launch(micro, Kernel::CrossEntropyFwd, {logits, labels},
             {b[kLossOutput]}, {rows, V});
  } else {
    // The mean over the global micro-batch: the ranks' means, averaged.
    uint32_t local = b.temp("loss.local", {});
    uint32_t sum = b.temp("loss.sum", {});
    uint32_t scale = b.add("loss.scale", BufferKind::Constant, {},
                           ElementType::F32, "", false, 1.0 / double(dp));
    b.launch(micro, Kernel::CrossEntropyFwd, {logits, labels}, {local},
             {rows, V});
    b.launch(micro, Kernel::AllReduceSum, {local}, {sum}, {1, 0});
    b.launch(micro, Kernel::Mul, {sum, scale}, {b[kLossOutput]}, {1});
  }
  b.launch(micro, Kernel::CrossEntropyBwd, {seed, logits, labels}, {dlogits},
           {rows, V});
  b.launch(micro, Kernel::Matmul, {dlogits, h}, {dW},
           {1, V, H, rows, 1, 0, 0});
  b.launch(micro, Kernel::Accumulate, {dW}, {grads.W}, {V * H});
  b.launch(micro, Kernel::Matmul, {dlogits, W}, {dh},
           {1, rows, H, V, 0, 0, 0});
  b.launch(micro, Kernel::RMSNormBwd, {dh, x, g}, {dx, dg}, {rows, H}, eps);
  b.launch(micro, Kernel::Accumulate, {dg}, {grads.g}, {H});
  b.launch(micro, Kernel::EmbeddingBwd, {tokens, dx}, {dE}, {rows, V, H});
  b.launch(micro, Kernel::Accumulate, {dE}, {grads.E}, {V * H});
}

/// A complete training plan of a tiny model:
///   x = embedding(tokens, E); h = rms_norm(x, g); logits = h W^T;
///   loss = cross_entropy(logits, labels)
/// with its backward accumulating into the gradients (the loss gradient
/// seeded with 1 / microbatches, as the compiler does), and an optimizer step
/// computing the global norm, the clipping coefficient and AdamW.
///
/// With dp > 1, data parallel over the mesh {dp}: rank r reads rows
/// [r * microBatch / dp, (r + 1) * microBatch / dp) of each micro-batch (or
/// the same part of its columns, over {sp}) and holds every parameter whole;
/// its loss is the all-reduced mean of the ranks' losses, its loss gradient
/// seeded with 1 / (microbatches * dp), and optimizer_step first all-reduces
/// the gradients, so that every rank computes the same norm and update as
/// one rank does (up to rounding).
inline Plan buildTinyPlan(const TinyModel &m) {
  const int64_t dp = m.dp;
  const int64_t blockRows = m.splitSequence ? m.microBatch : m.microBatch / dp;
  const int64_t blockColumns = m.splitSequence ? m.seqLen / dp : m.seqLen;
  const int64_t rows = blockRows * blockColumns, V = m.vocab, H = m.hidden;
  std::vector<PlanBuilder> ranks(static_cast<size_t>(dp));
  for (int64_t r = 0; r < dp; ++r) {
    PlanBuilder &b = ranks[size_t(r)];
    b.trainingIO(blockRows, blockColumns);
    if (dp > 1) {
      for (const char *name : {kTokensInput, kLabelsInput})
        b.block(b[name], {m.microBatch, m.seqLen},
                m.splitSequence ? std::vector<int64_t>{0, r * blockColumns}
                                : std::vector<int64_t>{r * blockRows, 0});
    }
    uint32_t E = b.param(kTinyEmbedding, {V, H}, true);
    uint32_t g = b.param(kTinyNorm, {H}, false);
    uint32_t W = b.param(kTinyHead, {V, H}, true);
    launchTinyMicroStep(b, m, rows, {E, g, W}, {E + 1, g + 1, W + 1});

    const char *opt = kOptimizerStepProgram;
    if (dp > 1)
      for (uint32_t p : {E, g, W})
        b.launch(opt, Kernel::AllReduceSum, {p + 1}, {p + 1},
                 {b.rank().buffers[p].numElements(), 0});
    std::vector<uint32_t> squares;
    for (uint32_t p : {E, g, W}) {
      uint32_t s = b.temp("sumsq:" + b.rank().buffers[p].parameter, {});
      b.launch(opt, Kernel::SumSquares, {p + 1}, {s},
               {b.rank().buffers[p].numElements()});
      squares.push_back(s);
    }
    b.launchClipAndAdamW(opt, squares, {E, g, W});
  }

  const ModelInfo model = testModelInfo(m);
  if (dp == 1)
    return ranks[0].plan(model);
  return multiRankPlan(model, {{m.splitSequence ? "sp" : "dp", int(dp)}},
                       ranks);
}

/// Gives every rank of a one-rank-per-data-shard tiny plan (buildTinyPlan,
/// dp 1) an evaluation step as the compiler makes one: a program
/// `eval_forward` of micro_step's forward launches (up to its loss, which
/// it writes), called once per micro-batch with its forward item.
inline void addTinyEvaluation(Plan &plan) {
  for (RankPlan &rank : plan.ranks) {
    const ProgramDesc *micro = rank.findProgram(kMicroStepProgram);
    ProgramDesc eval;
    eval.name = kEvalForwardProgram;
    const std::optional<size_t> loss = rank.findBuffer(kLossOutput);
    for (const InstructionDesc &inst : micro->instructions) {
      eval.instructions.push_back(inst);
      if (loss && inst.outputs == std::vector<uint32_t>{uint32_t(*loss)})
        break;
    }
    rank.programs.push_back(std::move(eval));
    for (int64_t mb = 0; mb < plan.model.microbatches; ++mb)
      rank.evalStep.push_back(
          {uint32_t(rank.programs.size() - 1), int32_t(mb),
           {WorkItem{WorkKind::Forward, uint32_t(mb), 0}}, -1});
  }
}

/// The layout of one flat bucket of a partitioned optimizer: its
/// parameters' element ranges (each starting at a multiple of `align`
/// elements, so that every view is aligned in the arena), the size of each
/// rank's slice (a multiple of `align`) and the bucket's size, `dp` slices.
struct BucketLayout {
  std::vector<std::string> parameters;
  std::vector<int64_t> begin, count;
  int64_t slice = 0;
  int64_t size = 0;

  BucketLayout(std::vector<std::pair<std::string, int64_t>> tensors,
               int64_t dp, int64_t align) {
    int64_t end = 0;
    for (const auto &[name, elements] : tensors) {
      parameters.push_back(name);
      begin.push_back(end);
      count.push_back(elements);
      end += (elements + align - 1) / align * align;
    }
    slice = ((end + dp - 1) / dp + align - 1) / align * align;
    size = slice * dp;
  }

  /// The segments of rank `rank`'s slice: where it cuts through the
  /// parameters, each a range of one whole tensor.
  std::vector<SegmentDesc> segments(int64_t rank) const {
    std::vector<SegmentDesc> result;
    const int64_t lo = rank * slice, hi = lo + slice;
    for (size_t i = 0; i < parameters.size(); ++i) {
      const int64_t from = std::max(lo, begin[i]);
      const int64_t to = std::min(hi, begin[i] + count[i]);
      if (from >= to)
        continue;
      SegmentDesc segment;
      segment.parameter = parameters[i];
      segment.begin = from - begin[i];
      segment.count = to - from;
      segment.offset = from - lo;
      result.push_back(segment);
    }
    return result;
  }
};

/// The tiny model of buildTinyPlan with a partitioned optimizer (ZeRO-1)
/// over dp ranks, as the compiler lays one out. The parameters lie in two
/// flat buckets, by decay ({E, W} and {g}); each bucket has a flat gradient
/// buffer whose per-parameter gradients `grad:X` are views, and each rank
/// owns slice r of every bucket: a view of the gradient bucket at
/// r * slice (segments: the ranges of the parameters it cuts), the AdamW
/// moments of that slice (buffers of their own, with the same segments),
/// and the parameters of that slice:
///  - f32 (`bf16` false): a view of the bucket of parameters, whose
///    per-parameter views `param:X` the micro-step reads;
///  - bf16: the f32 master weights of the slice, a buffer of its own (no
///    parameter buffer names a parameter), and a bf16 bucket of compute
///    copies with views `param_bf16:X` that the micro-step reads, with bf16
///    activations; refresh_parameter_copies casts the slice into the
///    rank's slice of the copies and all-gathers them.
/// optimizer_step, per bucket: reduce_scatter_sum of the gradients into the
/// slice (in place), the sum of squares of the slice, all-reduced; then the
/// global norm and clipping; AdamW on each slice; and an in-place
/// all_gather of the updated slice (of the compute copies in bf16) into
/// the bucket. With dp = 1 there are no collectives (the slice is the
/// bucket). m.microBatch must be a multiple of dp.
inline Plan buildTinyZeroPlan(const TinyModel &m, bool bf16 = false) {
  const int64_t dp = m.dp;
  const int64_t blockRows = m.microBatch / dp;
  const int64_t rows = blockRows * m.seqLen, V = m.vocab, H = m.hidden;
  // 128 elements: 256 bytes of bf16 (512 of f32), the arena's alignment.
  const int64_t align = 128;
  const std::vector<BucketLayout> buckets = {
      BucketLayout({{kTinyEmbedding, V * H}, {kTinyHead, V * H}}, dp, align),
      BucketLayout({{kTinyNorm, H}}, dp, align)};
  const std::vector<bool> bucketDecay = {true, false};
  auto shapeOf = [&](const std::string &name) {
    return name == kTinyNorm ? std::vector<int64_t>{H}
                             : std::vector<int64_t>{V, H};
  };
  const ElementType act = bf16 ? ElementType::BF16 : ElementType::F32;

  std::vector<PlanBuilder> ranks(static_cast<size_t>(dp));
  for (int64_t r = 0; r < dp; ++r) {
    PlanBuilder &b = ranks[size_t(r)];
    b.trainingIO(blockRows, m.seqLen);
    if (dp > 1)
      for (const char *name : {kTokensInput, kLabelsInput})
        b.block(b[name], {m.microBatch, m.seqLen}, {r * blockRows, 0});

    struct Bucket {
      uint32_t params = 0;      // the f32 parameters, or the bf16 copies
      uint32_t paramSlice = 0;  // the f32 parameters of the slice
      uint32_t copySlice = 0;   // bf16: the copies of the slice
      uint32_t gradSlice = 0, expAvg = 0, expAvgSq = 0, grads = 0;
    };
    std::vector<Bucket> flat(buckets.size());
    std::map<std::string, uint32_t> paramOf, gradOf;
    for (size_t k = 0; k < buckets.size(); ++k) {
      const BucketLayout &layout = buckets[k];
      const std::string suffix = "." + std::to_string(k);
      const bool decay = bucketDecay[k];
      const std::vector<SegmentDesc> segments = layout.segments(r);
      Bucket &bucket = flat[k];
      const int64_t sliceAt = r * layout.slice;
      if (!bf16) {
        bucket.params = b.add("@param_bucket" + suffix, BufferKind::Parameter,
                              {layout.size}, ElementType::F32, "", decay);
        for (size_t i = 0; i < layout.parameters.size(); ++i) {
          const std::string &name = layout.parameters[i];
          paramOf[name] =
              b.view(kParameterPrefix + name, BufferKind::Parameter,
                     bucket.params, layout.begin[i], shapeOf(name), name,
                     decay);
        }
        bucket.paramSlice =
            b.view("@param_slice" + suffix, BufferKind::Parameter,
                   bucket.params, sliceAt, {layout.slice}, "", decay);
      } else {
        bucket.params = b.add("@param_bf16_bucket" + suffix,
                              BufferKind::ParameterCopy, {layout.size},
                              ElementType::BF16);
        for (size_t i = 0; i < layout.parameters.size(); ++i) {
          const std::string &name = layout.parameters[i];
          paramOf[name] = b.view("param_bf16:" + name,
                                 BufferKind::ParameterCopy, bucket.params,
                                 layout.begin[i], shapeOf(name), name);
        }
        bucket.copySlice = b.view("@param_bf16_slice" + suffix,
                                  BufferKind::ParameterCopy, bucket.params,
                                  sliceAt, {layout.slice});
        bucket.paramSlice =
            b.add("@param_slice" + suffix, BufferKind::Parameter,
                  {layout.slice}, ElementType::F32, "", decay);
      }
      b.rank().buffers[bucket.paramSlice].segments = segments;
      bucket.grads = b.add("@grad_bucket" + suffix, BufferKind::Gradient,
                           {layout.size});
      for (size_t i = 0; i < layout.parameters.size(); ++i) {
        const std::string &name = layout.parameters[i];
        gradOf[name] = b.view(kGradientPrefix + name, BufferKind::Gradient,
                              bucket.grads, layout.begin[i], shapeOf(name),
                              name);
      }
      bucket.gradSlice = b.view("@grad_slice" + suffix, BufferKind::Gradient,
                                bucket.grads, sliceAt, {layout.slice});
      bucket.expAvg = b.add("@exp_avg_slice" + suffix,
                            BufferKind::OptimizerState, {layout.slice});
      bucket.expAvgSq = b.add("@exp_avg_sq_slice" + suffix,
                              BufferKind::OptimizerState, {layout.slice});
      for (uint32_t index : {bucket.gradSlice, bucket.expAvg, bucket.expAvgSq})
        b.rank().buffers[index].segments = segments;
    }

    launchTinyMicroStep(
        b, m, rows, {paramOf[kTinyEmbedding], paramOf[kTinyNorm],
                     paramOf[kTinyHead]},
        {gradOf[kTinyEmbedding], gradOf[kTinyNorm], gradOf[kTinyHead]}, act);

    const char *opt = kOptimizerStepProgram;
    std::vector<uint32_t> squares;
    for (size_t k = 0; k < buckets.size(); ++k) {
      const int64_t slice = buckets[k].slice;
      const std::string suffix = "." + std::to_string(k);
      if (dp > 1)
        b.launch(opt, Kernel::ReduceScatterSum, {flat[k].grads},
                 {flat[k].gradSlice}, {slice, 0});
      uint32_t square = b.temp("sumsq" + suffix, {});
      b.launch(opt, Kernel::SumSquares, {flat[k].gradSlice}, {square},
               {slice});
      if (dp > 1) {
        uint32_t total = b.temp("sumsq.total" + suffix, {});
        b.launch(opt, Kernel::AllReduceSum, {square}, {total}, {1, 0});
        square = total;
      }
      squares.push_back(square);
    }
    uint32_t coef = b.temp("clip_coef", {});
    b.launch(opt, Kernel::GlobalNorm, squares, {b[kGradNormOutput]});
    b.launch(opt, Kernel::ClipCoefficient,
             {b[kGradNormOutput], b[kHyperMaxGradNorm]}, {coef});
    for (size_t k = 0; k < buckets.size(); ++k) {
      const Bucket &bucket = flat[k];
      const int64_t slice = buckets[k].slice;
      std::vector<uint32_t> outputs = {bucket.paramSlice, bucket.expAvg,
                                       bucket.expAvgSq};
      if (bf16)
        outputs.push_back(bucket.copySlice);
      b.launch(opt, Kernel::AdamW,
               {bucket.gradSlice, coef, b[kHyperLR], b[kHyperBeta1],
                b[kHyperBeta2], b[kHyperEps], b[kHyperWeightDecay],
                b[kHyperStep]},
               outputs, {slice, bucketDecay[k] ? 1 : 0});
      const uint32_t gathered = bf16 ? bucket.copySlice : bucket.paramSlice;
      if (dp > 1)
        b.launch(opt, Kernel::AllGather, {gathered}, {bucket.params},
                 {slice, 0});
    }
    if (bf16)
      for (size_t k = 0; k < buckets.size(); ++k) {
        const int64_t slice = buckets[k].slice;
        b.launch(kRefreshCopiesProgram, Kernel::Cast, {flat[k].paramSlice},
                 {flat[k].copySlice}, {slice});
        if (dp > 1)
          b.launch(kRefreshCopiesProgram, Kernel::AllGather,
                   {flat[k].copySlice}, {flat[k].params}, {slice, 0});
      }
  }

  const ModelInfo model = testModelInfo(m);
  if (dp == 1)
    return ranks[0].plan(model);
  return multiRankPlan(model, {{"dp", int(dp)}}, ranks);
}

/// `plan` with the parameter buffers of `parameters` turned into flat
/// buffers of segments: each keeps its bytes (and so the plan computes the
/// same), names no parameter and holds its block (e.g. a tensor-parallel
/// block of buildMlpPlan) as two segments, elements [0, n/2) and [n/2, n)
/// of the block. Its gradients and moments keep naming the parameter. The
/// segments of a block held on several ranks (data-parallel replicas) are
/// replicas too.
inline Plan withParameterSegments(Plan plan,
                                  const std::vector<std::string> &parameters) {
  for (RankPlan &rank : plan.ranks)
    for (BufferDesc &buffer : rank.buffers) {
      if (buffer.kind != BufferKind::Parameter ||
          std::find(parameters.begin(), parameters.end(), buffer.parameter) ==
              parameters.end())
        continue;
      const int64_t n = buffer.numElements();
      SegmentDesc first;
      first.parameter = buffer.parameter;
      if (buffer.isBlock()) {
        first.fullShape = buffer.fullShape;
        first.sliceOffset = buffer.sliceOffset;
        first.blockShape = buffer.shape;
      }
      first.begin = 0;
      first.count = n / 2;
      first.offset = 0;
      SegmentDesc second = first;
      second.begin = second.offset = n / 2;
      second.count = n - n / 2;
      buffer.segments = {first, second};
      buffer.name = "@param_block:" + buffer.parameter;
      buffer.parameter.clear();
      buffer.fullShape.clear();
      buffer.sliceOffset.clear();
    }
  return plan;
}

/// The shape and layout of the model of buildMlpPlan.
struct MlpModel {
  int64_t vocab = 16;
  int64_t hidden = 8;
  int64_t ffn = 12;
  int64_t microBatch = 4;
  int64_t seqLen = 4;
  int64_t microbatches = 1;
  /// Data parallel ranks (splitting micro-batch rows) and tensor parallel
  /// ranks (splitting the MLP's ffn dimension); the mesh is {dp, tp}, each
  /// axis present when larger than 1.
  int64_t dp = 1;
  int64_t tp = 1;
};

inline const char *kMlpUp = "model.mlp.up_proj.weight";
inline const char *kMlpDown = "model.mlp.down_proj.weight";

/// A training plan with a Megatron-style MLP:
///   x = embedding(tokens, E); a = x W1^T; s = silu(a); y = s W2^T;
///   h = rms_norm(y, g); logits = h Wh^T; loss = cross_entropy(logits, labels)
/// W1 [ffn, hidden] is column parallel over tp (rank t holds rows
/// [t * ffn / tp, ...)), W2 [hidden, ffn] row parallel (the same columns), so
/// that s W2^T is a partial sum, completed by an all_reduce_sum over tp; in
/// the backward, the gradient of x is likewise a partial sum over tp. E, g and
/// Wh are replicated. Over dp the rows of each micro-batch are split and the
/// loss, its seed and the gradients treated as in buildTinyPlan. The global
/// norm adds the tp-all-reduced sums of squares of the sharded gradients to
/// those of the replicated ones. dp = tp = 1 gives the single-rank plan.
inline Plan buildMlpPlan(const MlpModel &m) {
  const int64_t dp = m.dp, tp = m.tp;
  const int64_t rows = m.microBatch / dp * m.seqLen, V = m.vocab, H = m.hidden,
                F = m.ffn / tp;
  std::vector<MeshAxis> mesh;
  int64_t dpAxis = -1, tpAxis = -1;
  if (dp > 1) {
    dpAxis = int64_t(mesh.size());
    mesh.push_back({"dp", int(dp)});
  }
  if (tp > 1) {
    tpAxis = int64_t(mesh.size());
    mesh.push_back({"tp", int(tp)});
  }
  std::vector<PlanBuilder> ranks(static_cast<size_t>(dp * tp));
  for (int64_t r = 0; r < dp * tp; ++r) {
    const int64_t d = r / tp, t = r % tp; // the mesh's row-major order
    PlanBuilder &b = ranks[size_t(r)];
    b.trainingIO(m.microBatch / dp, m.seqLen);
    if (dp > 1)
      for (const char *name : {kTokensInput, kLabelsInput})
        b.block(b[name], {m.microBatch, m.seqLen},
                {d * (m.microBatch / dp), 0});
    uint32_t E = b.param(kTinyEmbedding, {V, H}, true);
    uint32_t W1 = tp > 1
                      ? b.param(kMlpUp, {F, H}, true, {F * tp, H}, {t * F, 0})
                      : b.param(kMlpUp, {F, H}, true);
    uint32_t W2 = tp > 1
                      ? b.param(kMlpDown, {H, F}, true, {H, F * tp}, {0, t * F})
                      : b.param(kMlpDown, {H, F}, true);
    uint32_t g = b.param(kTinyNorm, {H}, false);
    uint32_t Wh = b.param(kTinyHead, {V, H}, true);
    uint32_t seed = b.add("dloss", BufferKind::Constant, {}, ElementType::F32,
                          "", false, 1.0 / double(m.microbatches * dp));
    const uint32_t tokens = b[kTokensInput], labels = b[kLabelsInput];
    const std::vector<double> eps = {1e-5};
    const char *micro = kMicroStepProgram;

    uint32_t x = b.temp("x", {rows, H}), a = b.temp("a", {rows, F});
    uint32_t s = b.temp("s", {rows, F}), y = b.temp("y", {rows, H});
    uint32_t h = b.temp("h", {rows, H}), logits = b.temp("logits", {rows, V});
    b.launch(micro, Kernel::EmbeddingFwd, {tokens, E}, {x}, {rows, V, H});
    b.launch(micro, Kernel::Matmul, {x, W1}, {a}, {1, rows, F, H, 0, 1, 0});
    b.launch(micro, Kernel::SiLUFwd, {a}, {s}, {rows * F});
    if (tp > 1) {
      uint32_t partial = b.temp("y.partial", {rows, H});
      b.launch(micro, Kernel::Matmul, {s, W2}, {partial},
               {1, rows, H, F, 0, 1, 0});
      b.launch(micro, Kernel::AllReduceSum, {partial}, {y}, {rows * H, tpAxis});
    } else {
      b.launch(micro, Kernel::Matmul, {s, W2}, {y}, {1, rows, H, F, 0, 1, 0});
    }
    b.launch(micro, Kernel::RMSNormFwd, {y, g}, {h}, {rows, H}, eps);
    b.launch(micro, Kernel::Matmul, {h, Wh}, {logits},
             {1, rows, V, H, 0, 1, 0});
    if (dp == 1) {
      b.launch(micro, Kernel::CrossEntropyFwd, {logits, labels},
               {b[kLossOutput]}, {rows, V});
    } else {
      uint32_t local = b.temp("loss.local", {});
      uint32_t scale = b.add("loss.scale", BufferKind::Constant, {},
                             ElementType::F32, "", false, 1.0 / double(dp));
      b.launch(micro, Kernel::CrossEntropyFwd, {logits, labels}, {local},
               {rows, V});
      // In place.
      b.launch(micro, Kernel::AllReduceSum, {local}, {local}, {1, dpAxis});
      b.launch(micro, Kernel::Mul, {local, scale}, {b[kLossOutput]}, {1});
    }

    uint32_t dlogits = b.temp("dlogits", {rows, V});
    uint32_t dWh = b.temp("dWh", {V, H}), dh = b.temp("dh", {rows, H});
    uint32_t dy = b.temp("dy", {rows, H}), dg = b.temp("dg", {H});
    uint32_t dW2 = b.temp("dW2", {H, F}), ds = b.temp("ds", {rows, F});
    uint32_t da = b.temp("da", {rows, F}), dW1 = b.temp("dW1", {F, H});
    uint32_t dx = b.temp("dx", {rows, H}), dE = b.temp("dE", {V, H});
    b.launch(micro, Kernel::CrossEntropyBwd, {seed, logits, labels}, {dlogits},
             {rows, V});
    b.launch(micro, Kernel::Matmul, {dlogits, h}, {dWh},
             {1, V, H, rows, 1, 0, 0});
    b.launch(micro, Kernel::Accumulate, {dWh}, {Wh + 1}, {V * H});
    b.launch(micro, Kernel::Matmul, {dlogits, Wh}, {dh},
             {1, rows, H, V, 0, 0, 0});
    b.launch(micro, Kernel::RMSNormBwd, {dh, y, g}, {dy, dg}, {rows, H}, eps);
    b.launch(micro, Kernel::Accumulate, {dg}, {g + 1}, {H});
    b.launch(micro, Kernel::Matmul, {dy, s}, {dW2}, {1, H, F, rows, 1, 0, 0});
    b.launch(micro, Kernel::Accumulate, {dW2}, {W2 + 1}, {H * F});
    b.launch(micro, Kernel::Matmul, {dy, W2}, {ds}, {1, rows, F, H, 0, 0, 0});
    b.launch(micro, Kernel::SiLUBwd, {ds, a}, {da}, {rows * F});
    b.launch(micro, Kernel::Matmul, {da, x}, {dW1}, {1, F, H, rows, 1, 0, 0});
    b.launch(micro, Kernel::Accumulate, {dW1}, {W1 + 1}, {F * H});
    if (tp > 1) {
      uint32_t partial = b.temp("dx.partial", {rows, H});
      b.launch(micro, Kernel::Matmul, {da, W1}, {partial},
               {1, rows, H, F, 0, 0, 0});
      b.launch(micro, Kernel::AllReduceSum, {partial}, {dx},
               {rows * H, tpAxis});
    } else {
      b.launch(micro, Kernel::Matmul, {da, W1}, {dx}, {1, rows, H, F, 0, 0, 0});
    }
    b.launch(micro, Kernel::EmbeddingBwd, {tokens, dx}, {dE}, {rows, V, H});
    b.launch(micro, Kernel::Accumulate, {dE}, {E + 1}, {V * H});

    const char *opt = kOptimizerStepProgram;
    const std::vector<uint32_t> params = {E, W1, W2, g, Wh};
    if (dp > 1)
      for (uint32_t p : params)
        b.launch(opt, Kernel::AllReduceSum, {p + 1}, {p + 1},
                 {b.rank().buffers[p].numElements(), dpAxis});
    std::vector<uint32_t> squares;
    for (uint32_t p : params) {
      const std::string name = b.rank().buffers[p].parameter;
      uint32_t sq = b.temp("sumsq:" + name, {});
      b.launch(opt, Kernel::SumSquares, {p + 1}, {sq},
               {b.rank().buffers[p].numElements()});
      if (tp > 1 && (p == W1 || p == W2)) {
        uint32_t total = b.temp("sumsq.total:" + name, {});
        b.launch(opt, Kernel::AllReduceSum, {sq}, {total}, {1, tpAxis});
        sq = total;
      }
      squares.push_back(sq);
    }
    b.launchClipAndAdamW(opt, squares, params);
  }

  const ModelInfo model = testModelInfo(m);
  if (mesh.empty())
    return ranks[0].plan(model);
  return multiRankPlan(model, mesh, ranks);
}

} // namespace mlt::rt::testing

#endif // MLT_UNITTESTS_RUNTIMEEXEC_TESTPLANS_H
