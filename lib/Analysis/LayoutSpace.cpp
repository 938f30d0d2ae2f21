//===- LayoutSpace.cpp - the layouts a planner chooses among --------------===//
//
// Part of mlt. See LayoutSpace.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/LayoutSpace.h"
#include "mlt/Plan/KernelInfo.h"

#include <algorithm>
#include <cmath>

using namespace mlt;
using namespace mlt::cost;
using namespace mlt::rt;

std::vector<Layout> mlt::cost::enumerateLayouts(const LayoutRequest &request) {
  std::vector<Layout> layouts;
  const int64_t gpus = request.gpus, batch = request.globalBatch;
  if (gpus < 1 || batch < 1)
    return layouts;
  auto contextFits = [&](int64_t cp) {
    return cp == 1 || (request.seqLen > 0 && request.seqLen % (2 * cp) == 0 &&
                       request.seqLen / (2 * cp) >= kContextChunkTokens);
  };
  for (int64_t tp = 1; tp <= gpus; ++tp) {
    if (gpus % tp != 0)
      continue;
    for (int64_t cp = 1; cp <= gpus / tp; ++cp) {
      if ((gpus / tp) % cp != 0 || !contextFits(cp))
        continue;
      const int64_t rest = gpus / (tp * cp);
      for (int64_t pp = 1; pp <= rest; ++pp) {
        if (rest % pp != 0)
          continue;
        const int64_t dp = rest / pp;
        for (int64_t vp : {int64_t(1), int64_t(2)}) {
          if (vp > 1 && pp < 2)
            continue;
          for (int64_t zero = 0; zero <= (zeroAxes(dp, cp).empty() ? 0 : 2);
               ++zero) {
            for (int64_t m = 1; m <= batch; ++m) {
              if (batch % m != 0 || (batch / m) % dp != 0 ||
                  (pp > 1 && m < pp))
                continue;
              for (ContextExchange exchange :
                   {ContextExchange::AllGather, ContextExchange::AllToAll,
                    ContextExchange::Ring}) {
                if (exchange != ContextExchange::AllGather && cp < 2)
                  continue;
                Layout layout = request.base;
                layout.tp = tp;
                layout.cp = cp;
                layout.cpComm = exchange;
                layout.pp = pp;
                layout.vp = vp;
                layout.dp = dp;
                layout.zero = zero;
                layout.microbatches = m;
                layouts.push_back(layout);
                // FP8 weights quantized once a step, both copies kept, where
                // a step's later micro-batches can read them (a pipeline's
                // forward bodies serve every micro-batch): a family of its
                // own, whose memory-saving variants keep both too. Which
                // costs less where memory is short, recomputing or
                // quantizing the weights' forward copies in every
                // micro-batch, depends on the tokens per micro-batch
                // against the weights per layer: the cost model ranks them.
                if (layout.fp8 && m > 1 && pp == 1) {
                  layout.fp8Recipe.weightCache = "both";
                  layouts.push_back(layout);
                }
              }
            }
          }
        }
      }
    }
  }
  return layouts;
}

std::vector<Layout> mlt::cost::memorySavingVariants(const Layout &layout) {
  std::vector<Layout> variants;
  if (layout.tp > 1) {
    Layout sp = layout;
    sp.sequenceParallel = true;
    variants.push_back(sp);
  }
  Layout recompute = layout;
  recompute.recompute = {"mlt.swiglu"};
  variants.push_back(recompute);
  if (layout.tp > 1) {
    Layout both = recompute;
    both.sequenceParallel = true;
    variants.push_back(both);
  }
  // Every other layer recomputed whole, the others' SwiGLU and norms: about
  // half a forward pass more (Llama-3.1-8B at 65,536 tokens on two H200s,
  // cp 2: 10% faster than every layer, where it fits).
  Layout half = layout;
  half.recomputeLayers = 2;
  half.recompute = {"mlt.swiglu", "mlt.rms_norm"};
  variants.push_back(half);
  if (layout.tp > 1) {
    half.sequenceParallel = true;
    variants.push_back(half);
  }
  // Whole layers recomputed: the most memory saved, for about one more
  // forward pass of compute.
  Layout layers = layout;
  layers.recomputeLayers = 1;
  variants.push_back(layers);
  if (layout.tp > 1) {
    layers.sequenceParallel = true;
    variants.push_back(layers);
  }
  return variants;
}

StepBound mlt::cost::stepBound(const Plan &plan, const StepTimeline &timeline) {
  // The slowest rank: the one whose last launch ends last.
  uint32_t slowest = 0;
  for (uint32_t r = 0; r < timeline.ranks.size(); ++r)
    if (timeline.ranks[r].end > timeline.ranks[slowest].end)
      slowest = r;
  const StepBreakdown b = breakdown(plan, timeline, slowest);
  double matrix = 0.0, memory = 0.0;
  for (const auto &[kernel, seconds] : b.byKernel) {
    const bool isMatrix =
        kernel.rfind("matmul", 0) == 0 || kernel.rfind("attention", 0) == 0;
    (isMatrix ? matrix : memory) += seconds;
  }
  // The kernels' own times may add up to more than the compute union (two
  // streams); share the union between them as their times do.
  const double kernels = matrix + memory;
  if (kernels > 0.0) {
    matrix *= b.compute / kernels;
    memory *= b.compute / kernels;
  }
  std::vector<std::pair<double, std::string>> parts = {
      {matrix, "matrix products"},
      {memory, "memory-bound kernels"},
      {b.exposedCommunication, "communication"},
      {b.idle, "idle"}};
  const auto largest = std::max_element(parts.begin(), parts.end());
  return {largest->second, b.step > 0.0 ? largest->first / b.step : 0.0};
}

namespace {

uint64_t largest(const std::vector<uint64_t> &bytes) {
  return bytes.empty() ? 0 : *std::max_element(bytes.begin(), bytes.end());
}

/// b + steps * (b - a), element by element (b's where it would shrink),
/// rounded up to whole bytes.
std::vector<uint64_t> extrapolateBytes(const std::vector<uint64_t> &a,
                                       const std::vector<uint64_t> &b,
                                       double steps) {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < b.size(); ++i) {
    const uint64_t smaller = i < a.size() ? a[i] : b[i];
    out.push_back(b[i] >= smaller
                      ? b[i] + uint64_t(std::ceil(steps * double(b[i] - smaller)))
                      : b[i]);
  }
  return out;
}

LayoutFigures extrapolateFigures(const LayoutFigures &a, const LayoutFigures &b,
                                 double steps) {
  LayoutFigures out;
  out.step = b.step + steps * (b.step - a.step);
  out.arenas = extrapolateBytes(a.arenas, b.arenas, steps);
  out.persistent = extrapolateBytes(a.persistent, b.persistent, steps);
  return out;
}

} // namespace

uint64_t LayoutFigures::arena() const { return largest(arenas); }

uint64_t LayoutFigures::mostPersistent() const { return largest(persistent); }

LayoutFigures mlt::cost::extrapolateDepth(const LayoutFigures &a,
                                          const LayoutFigures &b,
                                          int64_t steps, int64_t period) {
  return extrapolateFigures(a, b,
                            double(steps) / double(std::max<int64_t>(period, 1)));
}

LayoutFigures mlt::cost::extrapolateMicrobatches(const LayoutFigures &a,
                                                 const LayoutFigures &b,
                                                 int64_t fewer, int64_t few,
                                                 int64_t microbatches) {
  return extrapolateFigures(a, b,
                            double(microbatches - few) / double(few - fewer));
}
