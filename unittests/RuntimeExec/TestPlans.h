//===- TestPlans.h - plans built in code for tests --------------*- C++ -*-===//
//
// Part of mlt. A small builder that lays buffers out in an arena and appends
// launches, the training inputs and outputs every plan must have, and a tiny
// complete training plan (embedding -> RMSNorm -> LM head -> cross-entropy,
// its backward, and the optimizer step). Plain C++ (no GoogleTest), so that
// mlt-make-test-plan can write these plans as files too.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_UNITTESTS_RUNTIMEEXEC_TESTPLANS_H
#define MLT_UNITTESTS_RUNTIMEEXEC_TESTPLANS_H

#include "mlt/Runtime/Plan.h"
#include "mlt/Runtime/PlanFormat.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace mlt::rt::testing {

/// Appends buffers (each at the next 256-byte aligned offset) and launches to
/// rank 0 of a plan.
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

  uint32_t temp(const std::string &name, std::vector<int64_t> shape,
                ElementType dtype = ElementType::F32) {
    return add(name, BufferKind::Temporary, std::move(shape), dtype);
  }

  /// A parameter with its gradient and both AdamW moments; returns the
  /// parameter's index (the others follow it: +1 grad, +2 m, +3 v).
  uint32_t param(const std::string &hfName, std::vector<int64_t> shape,
                 bool decay) {
    uint32_t index = add(kParameterPrefix + hfName, BufferKind::Parameter,
                         shape, ElementType::F32, hfName, decay);
    add(kGradientPrefix + hfName, BufferKind::Gradient, shape, ElementType::F32,
        hfName);
    add(kExpAvgPrefix + hfName, BufferKind::OptimizerState, shape,
        ElementType::F32, hfName);
    add(kExpAvgSqPrefix + hfName, BufferKind::OptimizerState, shape,
        ElementType::F32, hfName);
    return index;
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

  Plan plan(const ModelInfo &model = ModelInfo()) const {
    Plan plan;
    plan.formatVersion = kPlanFormatVersion;
    plan.producer = "PlanTestUtil";
    plan.model = model;
    plan.worldSize = 1;
    plan.ranks.push_back(rank_);
    plan.ranks[0].arenaBytes = next_;
    return plan;
  }

  RankPlan &rank() { return rank_; }

private:
  RankPlan rank_;
  uint64_t next_ = 0;
};

/// The shape of the tiny training model of buildTinyPlan.
struct TinyModel {
  int64_t vocab = 16;
  int64_t hidden = 8;
  int64_t microBatch = 2;
  int64_t seqLen = 4;
  int64_t microbatches = 1;
};

inline const char *kTinyEmbedding = "model.embed_tokens.weight";
inline const char *kTinyNorm = "model.norm.weight";
inline const char *kTinyHead = "lm_head.weight";

/// A complete training plan of a tiny model:
///   x = embedding(tokens, E); h = rms_norm(x, g); logits = h W^T;
///   loss = cross_entropy(logits, labels)
/// with its backward accumulating into the gradients (the loss gradient
/// seeded with 1 / microbatches, as the compiler does), and an optimizer step
/// computing the global norm, the clipping coefficient and AdamW.
inline Plan buildTinyPlan(const TinyModel &m) {
  PlanBuilder b;
  const int64_t rows = m.microBatch * m.seqLen, V = m.vocab, H = m.hidden;
  b.trainingIO(m.microBatch, m.seqLen);
  uint32_t E = b.param(kTinyEmbedding, {V, H}, true);
  uint32_t g = b.param(kTinyNorm, {H}, false);
  uint32_t W = b.param(kTinyHead, {V, H}, true);
  uint32_t seed = b.add("dloss", BufferKind::Constant, {}, ElementType::F32, "",
                        false, 1.0 / double(m.microbatches));
  uint32_t x = b.temp("x", {rows, H}), h = b.temp("h", {rows, H});
  uint32_t logits = b.temp("logits", {rows, V});
  uint32_t dlogits = b.temp("dlogits", {rows, V});
  uint32_t dW = b.temp("dW", {V, H}), dh = b.temp("dh", {rows, H});
  uint32_t dx = b.temp("dx", {rows, H}), dg = b.temp("dg", {H});
  uint32_t dE = b.temp("dE", {V, H});
  const uint32_t tokens = b[kTokensInput], labels = b[kLabelsInput];
  const std::vector<double> eps = {1e-5};

  const char *micro = kMicroStepProgram;
  b.launch(micro, Kernel::EmbeddingFwd, {tokens, E}, {x}, {rows, V, H});
  b.launch(micro, Kernel::RMSNormFwd, {x, g}, {h}, {rows, H}, eps);
  b.launch(micro, Kernel::Matmul, {h, W}, {logits}, {1, rows, V, H, 0, 1, 0});
  b.launch(micro, Kernel::CrossEntropyFwd, {logits, labels}, {b[kLossOutput]},
           {rows, V});
  b.launch(micro, Kernel::CrossEntropyBwd, {seed, logits, labels}, {dlogits},
           {rows, V});
  b.launch(micro, Kernel::Matmul, {dlogits, h}, {dW}, {1, V, H, rows, 1, 0, 0});
  b.launch(micro, Kernel::Accumulate, {dW}, {W + 1}, {V * H});
  b.launch(micro, Kernel::Matmul, {dlogits, W}, {dh}, {1, rows, H, V, 0, 0, 0});
  b.launch(micro, Kernel::RMSNormBwd, {dh, x, g}, {dx, dg}, {rows, H}, eps);
  b.launch(micro, Kernel::Accumulate, {dg}, {g + 1}, {H});
  b.launch(micro, Kernel::EmbeddingBwd, {tokens, dx}, {dE}, {rows, V, H});
  b.launch(micro, Kernel::Accumulate, {dE}, {E + 1}, {V * H});

  const char *opt = kOptimizerStepProgram;
  std::vector<uint32_t> squares;
  for (uint32_t p : {E, g, W}) {
    uint32_t s = b.temp("sumsq:" + b.rank().buffers[p].parameter, {});
    b.launch(opt, Kernel::SumSquares, {p + 1}, {s},
             {b.rank().buffers[p].numElements()});
    squares.push_back(s);
  }
  uint32_t coef = b.temp("clip_coef", {});
  b.launch(opt, Kernel::GlobalNorm, squares, {b[kGradNormOutput]});
  b.launch(opt, Kernel::ClipCoefficient,
           {b[kGradNormOutput], b[kHyperMaxGradNorm]}, {coef});
  for (uint32_t p : {E, g, W}) {
    const BufferDesc &param = b.rank().buffers[p];
    b.launch(opt, Kernel::AdamW,
             {p + 1, coef, b[kHyperLR], b[kHyperBeta1], b[kHyperBeta2],
              b[kHyperEps], b[kHyperWeightDecay], b[kHyperStep]},
             {p, p + 2, p + 3}, {param.numElements(), param.decay ? 1 : 0});
  }

  ModelInfo model;
  model.hfConfig =
      "{\"model_type\": \"llama\", \"vocab_size\": " + std::to_string(V) + "}";
  model.vocabSize = V;
  model.maxPositionEmbeddings = 64;
  model.microBatch = m.microBatch;
  model.seqLen = m.seqLen;
  model.microbatches = m.microbatches;
  return b.plan(model);
}

} // namespace mlt::rt::testing

#endif // MLT_UNITTESTS_RUNTIMEEXEC_TESTPLANS_H
