//===- LlamaTestPlan.h - a LLaMA training plan built by hand ----*- C++ -*-===//
//
// Part of mlt. The training plan of a LLaMA model (HF LlamaForCausalLM:
// RMSNorm, GQA attention with RoPE, SwiGLU MLP, untied LM head) written
// launch by launch, as the compiler is to emit it: the forward with every
// activation the backward needs in its own buffer, the backward accumulating
// into the gradients, then the global norm, clipping and AdamW. It lets the
// runtime be checked against the HF reference fixtures before the compiler
// exists, and serves as a worked example of the plan conventions.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_UNITTESTS_RUNTIMEEXEC_LLAMATESTPLAN_H
#define MLT_UNITTESTS_RUNTIMEEXEC_LLAMATESTPLAN_H

#include "TestPlans.h"

#include <cmath>
#include <string>

namespace mlt::rt::testing {

/// The shape of a LLaMA model (defaults: ../shared/fixtures/llama-ref-a).
struct LlamaShape {
  int64_t vocab = 256;
  int64_t hidden = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kvHeads = 2;
  int64_t headDim = 16;
  int64_t intermediate = 176;
  int64_t maxPositions = 64;
  double eps = 1e-5;
  double theta = 10000.0;
  /// config.json text carried by the plan.
  std::string hfConfig = "{}";
};

/// The training plan of `c` for micro-batches of `microBatch` sequences of
/// `seqLen` tokens, `microbatches` per step.
inline Plan buildLlamaPlan(const LlamaShape &c, int64_t microBatch,
                           int64_t seqLen, int64_t microbatches) {
  PlanBuilder b;
  b.trainingIO(microBatch, seqLen);
  const int64_t B = microBatch, S = seqLen, rows = B * S;
  const int64_t D = c.hidden, V = c.vocab, I = c.intermediate;
  const int64_t qDim = c.heads * c.headDim, kvDim = c.kvHeads * c.headDim;
  // Unscaled rope: scaling 0 and its attributes 0 (Kernels.def).
  const std::vector<double> eps = {c.eps}, theta = {c.theta, 0, 0, 0};
  const std::vector<double> scale = {1.0 / std::sqrt(double(c.headDim))};
  const uint32_t tokens = b[kTokensInput], labels = b[kLabelsInput];
  const char *fwd = kMicroStepProgram;

  int tempCounter = 0;
  auto temp = [&](const std::string &what, std::vector<int64_t> shape) {
    return b.temp("t" + std::to_string(tempCounter++) + "." + what,
                  std::move(shape));
  };
  // y [rows, out] = x [rows, in] W^T, W [out, in] as HF stores it.
  auto linear = [&](uint32_t x, uint32_t W, int64_t out, int64_t in,
                    const std::string &what) {
    uint32_t y = temp(what, {rows, out});
    b.launch(fwd, Kernel::Matmul, {x, W}, {y}, {1, rows, out, in, 0, 1, 0});
    return y;
  };
  // dW += dy^T x; returns dx = dy W.
  auto linearBwd = [&](uint32_t dy, uint32_t x, uint32_t W, int64_t out,
                       int64_t in, const std::string &what) {
    uint32_t dW = temp("d" + what + ".weight", {out, in});
    b.launch(fwd, Kernel::Matmul, {dy, x}, {dW}, {1, out, in, rows, 1, 0, 0});
    b.launch(fwd, Kernel::Accumulate, {dW}, {W + 1}, {out * in});
    uint32_t dx = temp("d" + what + ".in", {rows, in});
    b.launch(fwd, Kernel::Matmul, {dy, W}, {dx}, {1, rows, in, out, 0, 0, 0});
    return dx;
  };
  auto add = [&](uint32_t x, uint32_t y, int64_t n, const std::string &what) {
    uint32_t z = temp(what, {rows, n});
    b.launch(fwd, Kernel::Add, {x, y}, {z}, {rows * n});
    return z;
  };

  // Parameters.
  std::vector<uint32_t> params;
  auto param = [&](const std::string &name, std::vector<int64_t> shape) {
    uint32_t index = b.param(name, shape, shape.size() >= 2);
    params.push_back(index);
    return index;
  };
  const uint32_t embed = param("model.embed_tokens.weight", {V, D});
  struct Layer {
    uint32_t inNorm, q, k, v, o, postNorm, gate, up, down;
  };
  std::vector<Layer> layers;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Layer L;
    L.inNorm = param(p + "input_layernorm.weight", {D});
    L.q = param(p + "self_attn.q_proj.weight", {qDim, D});
    L.k = param(p + "self_attn.k_proj.weight", {kvDim, D});
    L.v = param(p + "self_attn.v_proj.weight", {kvDim, D});
    L.o = param(p + "self_attn.o_proj.weight", {D, qDim});
    L.postNorm = param(p + "post_attention_layernorm.weight", {D});
    L.gate = param(p + "mlp.gate_proj.weight", {I, D});
    L.up = param(p + "mlp.up_proj.weight", {I, D});
    L.down = param(p + "mlp.down_proj.weight", {D, I});
    layers.push_back(L);
  }
  const uint32_t finalNorm = param("model.norm.weight", {D});
  const uint32_t head = param("lm_head.weight", {V, D});
  const uint32_t seed =
      b.add("dloss.seed", BufferKind::Constant, {}, ElementType::F32, "", false,
            1.0 / double(microbatches));

  // Forward.
  struct Saved {
    uint32_t x, h, qr, kr, v, attn, lse, x1, h2, gate, up, act;
  };
  std::vector<Saved> saved;
  uint32_t x = temp("embed", {rows, D});
  b.launch(fwd, Kernel::EmbeddingFwd, {tokens, embed}, {x}, {rows, V, D});
  // No context axis (-1), no ring exchange (ring 0, ring_step 0).
  const std::vector<int64_t> attnInts = {B,         S, S,  c.heads, c.kvHeads,
                                         c.headDim, 1, -1, 0,       0};
  for (const Layer &L : layers) {
    Saved s;
    s.x = x;
    s.h = temp("h", {rows, D});
    b.launch(fwd, Kernel::RMSNormFwd, {x, L.inNorm}, {s.h}, {rows, D}, eps);
    uint32_t q = linear(s.h, L.q, qDim, D, "q");
    uint32_t k = linear(s.h, L.k, kvDim, D, "k");
    s.v = linear(s.h, L.v, kvDim, D, "v");
    s.qr = temp("q.rope", {B, S, c.heads, c.headDim});
    b.launch(fwd, Kernel::Rope, {q}, {s.qr},
             {B, S, c.heads, c.headDim, 0, 0, 0, 0, -1}, theta);
    s.kr = temp("k.rope", {B, S, c.kvHeads, c.headDim});
    b.launch(fwd, Kernel::Rope, {k}, {s.kr},
             {B, S, c.kvHeads, c.headDim, 0, 0, 0, 0, -1}, theta);
    s.attn = temp("attn", {rows, qDim});
    s.lse = temp("lse", {B, c.heads, S});
    b.launch(fwd, Kernel::AttentionFwd, {s.qr, s.kr, s.v}, {s.attn, s.lse},
             attnInts, scale);
    uint32_t o = linear(s.attn, L.o, D, qDim, "o");
    s.x1 = add(x, o, D, "resid1");
    s.h2 = temp("h2", {rows, D});
    b.launch(fwd, Kernel::RMSNormFwd, {s.x1, L.postNorm}, {s.h2}, {rows, D},
             eps);
    s.gate = linear(s.h2, L.gate, I, D, "gate");
    s.up = linear(s.h2, L.up, I, D, "up");
    s.act = temp("act", {rows, I});
    b.launch(fwd, Kernel::SwiGLUFwd, {s.gate, s.up}, {s.act}, {rows * I});
    uint32_t down = linear(s.act, L.down, D, I, "down");
    x = add(s.x1, down, D, "resid2");
    saved.push_back(s);
  }
  const uint32_t xFinal = x;
  const uint32_t hf = temp("final.h", {rows, D});
  b.launch(fwd, Kernel::RMSNormFwd, {xFinal, finalNorm}, {hf}, {rows, D}, eps);
  const uint32_t logits = linear(hf, head, V, D, "logits");
  b.launch(fwd, Kernel::CrossEntropyFwd, {logits, labels}, {b[kLossOutput]},
           {rows, V});

  // Backward.
  const uint32_t dlogits = temp("dlogits", {rows, V});
  b.launch(fwd, Kernel::CrossEntropyBwd, {seed, logits, labels}, {dlogits},
           {rows, V});
  uint32_t dhf = linearBwd(dlogits, hf, head, V, D, "lm_head");
  uint32_t dx = temp("dfinal.x", {rows, D});
  uint32_t dgFinal = temp("dfinal.norm", {D});
  b.launch(fwd, Kernel::RMSNormBwd, {dhf, xFinal, finalNorm}, {dx, dgFinal},
           {rows, D}, eps);
  b.launch(fwd, Kernel::Accumulate, {dgFinal}, {finalNorm + 1}, {D});
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    const Layer &L = layers[l];
    const Saved &s = saved[l];
    // MLP: x2 = x1 + down(swiglu(gate(h2), up(h2))).
    uint32_t dact = linearBwd(dx, s.act, L.down, D, I, "down");
    uint32_t dgate = temp("dgate", {rows, I}), dup = temp("dup", {rows, I});
    b.launch(fwd, Kernel::SwiGLUBwd, {dact, s.gate, s.up}, {dgate, dup},
             {rows * I});
    uint32_t dh2a = linearBwd(dgate, s.h2, L.gate, I, D, "gate");
    uint32_t dh2b = linearBwd(dup, s.h2, L.up, I, D, "up");
    uint32_t dh2 = add(dh2a, dh2b, D, "dh2");
    uint32_t dx1n = temp("dx1.norm", {rows, D}), dPost = temp("dpost", {D});
    b.launch(fwd, Kernel::RMSNormBwd, {dh2, s.x1, L.postNorm}, {dx1n, dPost},
             {rows, D}, eps);
    b.launch(fwd, Kernel::Accumulate, {dPost}, {L.postNorm + 1}, {D});
    uint32_t dx1 = add(dx, dx1n, D, "dx1");
    // Attention: x1 = x + o(attention(rope(q(h)), rope(k(h)), v(h))).
    uint32_t dattn = linearBwd(dx1, s.attn, L.o, D, qDim, "o");
    uint32_t dqr = temp("dq.rope", {B, S, c.heads, c.headDim});
    uint32_t dkr = temp("dk.rope", {B, S, c.kvHeads, c.headDim});
    uint32_t dv = temp("dv", {rows, kvDim});
    b.launch(fwd, Kernel::AttentionBwd, {dattn, s.qr, s.kr, s.v, s.attn, s.lse},
             {dqr, dkr, dv}, attnInts, scale);
    uint32_t dq = temp("dq", {rows, qDim}), dk = temp("dk", {rows, kvDim});
    b.launch(fwd, Kernel::Rope, {dqr}, {dq},
             {B, S, c.heads, c.headDim, 1, 0, 0, 0, -1}, theta);
    b.launch(fwd, Kernel::Rope, {dkr}, {dk},
             {B, S, c.kvHeads, c.headDim, 1, 0, 0, 0, -1}, theta);
    uint32_t dhq = linearBwd(dq, s.h, L.q, qDim, D, "q");
    uint32_t dhk = linearBwd(dk, s.h, L.k, kvDim, D, "k");
    uint32_t dhv = linearBwd(dv, s.h, L.v, kvDim, D, "v");
    uint32_t dh = add(add(dhq, dhk, D, "dhqk"), dhv, D, "dh");
    uint32_t dxn = temp("dx.norm", {rows, D}), dIn = temp("din", {D});
    b.launch(fwd, Kernel::RMSNormBwd, {dh, s.x, L.inNorm}, {dxn, dIn},
             {rows, D}, eps);
    b.launch(fwd, Kernel::Accumulate, {dIn}, {L.inNorm + 1}, {D});
    dx = add(dx1, dxn, D, "dx");
  }
  const uint32_t dEmbed = temp("dembed", {V, D});
  b.launch(fwd, Kernel::EmbeddingBwd, {tokens, dx}, {dEmbed}, {rows, V, D});
  b.launch(fwd, Kernel::Accumulate, {dEmbed}, {embed + 1}, {V * D});

  // Optimizer step.
  const char *opt = kOptimizerStepProgram;
  std::vector<uint32_t> squares;
  for (uint32_t p : params) {
    uint32_t sq = b.temp("sumsq:" + b.rank().buffers[p].parameter, {});
    b.launch(opt, Kernel::SumSquares, {p + 1}, {sq},
             {b.rank().buffers[p].numElements()});
    squares.push_back(sq);
  }
  b.launchClipAndAdamW(opt, squares, params, "clip.coef");

  ModelInfo model;
  model.hfConfig = c.hfConfig;
  model.vocabSize = V;
  model.maxPositionEmbeddings = c.maxPositions;
  model.microBatch = microBatch;
  model.seqLen = seqLen;
  model.microbatches = microbatches;
  return b.plan(model);
}

} // namespace mlt::rt::testing

#endif // MLT_UNITTESTS_RUNTIMEEXEC_LLAMATESTPLAN_H
