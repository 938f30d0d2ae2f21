//===- Progress.cpp - a run's progress line and end-of-run summary --------===//
//
// Part of mlt. See Progress.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Run/Progress.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace mlt;
using namespace mlt::run;

std::optional<double> mlt::run::trainingFlopsPerToken(
    const std::string &hfConfig, int64_t seqLen) {
  const nlohmann::json c = nlohmann::json::parse(hfConfig, nullptr, false);
  if (!c.is_object())
    return std::nullopt;
  auto dim = [&](const char *key) -> double {
    auto it = c.find(key);
    return it != c.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  const double d = dim("hidden_size"), layers = dim("num_hidden_layers"),
               heads = dim("num_attention_heads"), f = dim("intermediate_size"),
               vocab = dim("vocab_size");
  const double kvHeads = c.contains("num_key_value_heads")
                             ? dim("num_key_value_heads")
                             : heads;
  if (d <= 0 || layers <= 0 || heads <= 0 || f <= 0 || vocab <= 0 ||
      kvHeads <= 0 || seqLen <= 0)
    return std::nullopt;
  const double headDim = dim("head_dim") > 0 ? dim("head_dim") : d / heads;
  const double queries = heads * headDim, keys = kvHeads * headDim;
  // The products' weights: q and o (d x queries), k and v (d x keys), the
  // MLP's three (d x f), and the LM head (d x vocab).
  const double weights =
      layers * (2 * d * queries + 2 * d * keys + 3 * d * f) + d * vocab;
  return 6 * weights + 12 * layers * queries * double(seqLen);
}

std::optional<double> mlt::run::peakFlops(const std::string &device) {
  auto has = [&](const char *part) {
    return device.find(part) != std::string::npos;
  };
  // Dense bf16 tensor-core FLOP/s (NVIDIA's data sheets; the SXM parts'
  // where a PCIe part differs).
  if (has("H100") && has("PCIe"))
    return 756e12;
  if (has("H100") || has("H200") || has("GH200"))
    return 989.4e12;
  if (has("A100"))
    return 312e12;
  return std::nullopt;
}

ProgressMeter::ProgressMeter(int64_t lastStep, int64_t gpus,
                             std::optional<double> flopsPerToken,
                             std::optional<double> peak)
    : lastStep_(lastStep), gpus_(std::max<int64_t>(gpus, 1)),
      flopsPerToken_(flopsPerToken), peak_(peak) {}

void ProgressMeter::rates(double tokensPerSecond,
                          std::optional<double> &tflops,
                          std::optional<double> &mfu) const {
  tflops.reset();
  mfu.reset();
  if (!flopsPerToken_)
    return;
  const double perGpu = tokensPerSecond * *flopsPerToken_ / double(gpus_);
  tflops = perGpu / 1e12;
  if (peak_)
    mfu = perGpu / *peak_;
}

StepProgress ProgressMeter::add(const rt::StepMetrics &m, double elapsed) {
  ++steps_;
  tokens_ += m.tokens;
  elapsed_ = elapsed;
  const bool pace = steps_ > 1 && !m.setUp;
  if (steps_ == 1) {
    firstSeconds_ = m.seconds;
  } else {
    laterSeconds_ += m.seconds;
    laterTokens_ += m.tokens;
  }
  if (pace) {
    paceSeconds_ += m.seconds;
    paceTokens_ += m.tokens;
    ++paceSteps_;
  }
  // (the first step leaves the window, and the ranks' sums, once another
  // is in it; set-up steps after it once a step of the pace is)
  if (steps_ == 2 || (pace && setUpInWindow_)) {
    window_.clear();
    rankSums_.clear();
    rankSteps_ = 0;
    setUpInWindow_ = false;
  }
  if (steps_ > 1 && m.setUp)
    setUpInWindow_ = true;
  ++rankSteps_;
  for (const rt::RankStepTime &rank : m.ranks) {
    rt::RankStepTime &sum = rankSums_[rank.rank];
    sum.rank = rank.rank;
    sum.seconds += rank.seconds;
    sum.waitSeconds += rank.waitSeconds;
  }
  window_.emplace_back(m.seconds, m.tokens);
  if (window_.size() > kWindow)
    window_.pop_front();
  double seconds = 0.0;
  int64_t tokens = 0;
  for (const auto &[s, t] : window_) {
    seconds += s;
    tokens += t;
  }
  StepProgress p;
  p.window = int64_t(window_.size());
  p.tokensPerSecond = seconds > 0 ? double(tokens) / seconds : 0.0;
  p.elapsed = elapsed;
  p.remaining = double(std::max<int64_t>(lastStep_ - m.step, 0)) * seconds /
                double(window_.size());
  rates(p.tokensPerSecond, p.tflopsPerGpu, p.mfu);
  return p;
}

RunTotals ProgressMeter::totals() const {
  RunTotals t;
  t.steps = steps_;
  t.tokens = tokens_;
  t.seconds = elapsed_;
  if (paceSteps_ > 0 && paceSeconds_ > 0) {
    t.tokensPerSecond = double(paceTokens_) / paceSeconds_;
    t.warmupSteps = steps_ - paceSteps_;
  } else if (steps_ > 1 && laterSeconds_ > 0) {
    t.tokensPerSecond = double(laterTokens_) / laterSeconds_;
    t.warmupSteps = 1;
  } else if (steps_ == 1 && firstSeconds_ > 0) {
    t.tokensPerSecond = double(tokens_) / firstSeconds_;
  }
  rates(t.tokensPerSecond, t.tflopsPerGpu, t.mfu);
  const double summed = double(std::max<int64_t>(rankSteps_, 1));
  for (const auto &[rank, sum] : rankSums_)
    t.ranks.push_back({rank, sum.seconds / summed, sum.waitSeconds / summed});
  t.slowest = slowestRank(t.ranks);
  return t;
}

std::optional<SlowestRank>
mlt::run::slowestRank(const std::vector<rt::RankStepTime> &ranks) {
  if (ranks.size() < 2)
    return std::nullopt;
  const rt::RankStepTime *least = nullptr;
  for (const rt::RankStepTime &rank : ranks) {
    if (!std::isfinite(rank.waitSeconds))
      return std::nullopt;
    if (!least || rank.waitSeconds < least->waitSeconds)
      least = &rank;
  }
  SlowestRank slowest;
  slowest.rank = least->rank;
  slowest.waitSeconds = least->waitSeconds;
  slowest.stepSeconds = least->seconds;
  slowest.othersLeast = INFINITY;
  slowest.othersMost = 0.0;
  for (const rt::RankStepTime &rank : ranks)
    if (&rank != least) {
      slowest.othersLeast = std::min(slowest.othersLeast, rank.waitSeconds);
      slowest.othersMost = std::max(slowest.othersMost, rank.waitSeconds);
    }
  return slowest;
}

std::string mlt::run::formatDuration(double seconds) {
  const int64_t whole = int64_t(std::llround(std::max(seconds, 0.0)));
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld",
                (long long)(whole / 3600), (long long)(whole / 60 % 60),
                (long long)(whole % 60));
  return text;
}
