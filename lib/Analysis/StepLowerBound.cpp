//===- StepLowerBound.cpp - what a step cannot take less than ------------===//
//
// Part of mlt. See StepLowerBound.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/StepLowerBound.h"

#include "StepStructure.h"
#include "mlt/Layout/Layout.h"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

using namespace mlt;
using namespace mlt::cost;
using namespace mlt::rt;

double mlt::cost::callSeconds(const RankPlan &rank, const LaunchCosts &costs,
                              uint32_t r, size_t c) {
  const uint32_t p = rank.step[c].program;
  const ProgramDesc &program = rank.programs[p];
  if (isTransferProgram(program))
    return 0.0;
  // (each stream's launches one after another, each a gap after the last)
  std::vector<std::pair<uint8_t, double>> streams;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const auto [start, length] =
        detail::launchSpan(0.0, costs.seconds[r][p][i], costs.gap);
    const double span = start + length;
    const uint8_t stream = program.instructions[i].stream;
    auto it = std::find_if(streams.begin(), streams.end(),
                           [&](const auto &s) { return s.first == stream; });
    if (it == streams.end())
      streams.emplace_back(stream, span);
    else
      it->second += span;
  }
  double longest = 0.0;
  for (const auto &[stream, seconds] : streams)
    longest = std::max(longest, seconds);
  return longest;
}

namespace {

/// Whether call `call` does exactly `kind` of `microbatch` through chunk 0.
bool doesOnly(const CallDesc &call, WorkKind kind, uint32_t microbatch) {
  return call.work.size() == 1 && call.work[0].kind == kind &&
         call.work[0].microbatch == microbatch && call.work[0].chunk == 0;
}

/// What one rank's calls come to.
struct RankCalls {
  int stage = 0;
  /// Every call's least time; its micro-batches' calls alone (between the
  /// first and last of them); the least of one micro-batch's, of those
  /// between the first and the last where there are any.
  double all = 0.0, microbatches = 0.0, leastMicrobatch = 0.0;
  /// The forward pass of micro-batch 0 and the backward pass of the last
  /// through chunk 0, where the rank runs them as calls of their own.
  double firstForward = 0.0, lastBackward = 0.0;
  /// Whether those are the rank's first and last micro-batch calls.
  bool startsWithForward = false, endsWithBackward = false;
};

} // namespace

StatusOr<double> mlt::cost::stepLowerBound(const Plan &plan,
                                           const LaunchCosts &costs,
                                           int64_t microbatches) {
  const int64_t own = plan.model.microbatches;
  if (microbatches < own)
    return errorf("a step bound for ", microbatches,
                  " micro-batches from a plan of ", own);
  if (costs.seconds.size() != plan.ranks.size())
    return errorf("costs of ", costs.seconds.size(), " ranks for a plan of ",
                  plan.ranks.size());
  StatusOr<std::optional<Mesh>> mesh = detail::meshOf(plan);
  if (!mesh)
    return mesh.takeStatus();
  std::optional<size_t> ppAxis;
  if (*mesh)
    ppAxis = (*mesh)->findAxis(axisName(ParallelAxis::Pipeline));

  const uint32_t last = uint32_t(own - 1);
  std::vector<RankCalls> ranks(plan.ranks.size());
  for (uint32_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan &rank = plan.ranks[r];
    RankCalls &calls = ranks[r];
    if (ppAxis) {
      StatusOr<std::vector<int>> at = (*mesh)->coordinates(int(rank.rank));
      if (!at)
        return at.takeStatus();
      calls.stage = (*at)[*ppAxis];
    }
    std::vector<double> byMicrobatch(size_t(own), 0.0);
    std::vector<double> secondsOf(rank.step.size());
    std::optional<size_t> first, lastCall;
    for (size_t c = 0; c < rank.step.size(); ++c) {
      const CallDesc &call = rank.step[c];
      const double seconds = secondsOf[c] = callSeconds(rank, costs, r, c);
      calls.all += seconds;
      if (call.microbatch < 0)
        continue;
      if (call.microbatch >= own)
        return errorf("rank ", rank.rank, "'s call ", c, " runs micro-batch ",
                      call.microbatch, " of ", own);
      byMicrobatch[size_t(call.microbatch)] += seconds;
      if (!first)
        first = c;
      lastCall = c;
      if (doesOnly(call, WorkKind::Forward, 0))
        calls.firstForward = seconds;
      if (doesOnly(call, WorkKind::Backward, last))
        calls.lastBackward = seconds;
    }
    if (!first)
      return errorf("rank ", rank.rank, "'s step runs no micro-batch");
    for (size_t c = *first; c <= *lastCall; ++c)
      if (rank.step[c].microbatch >= 0)
        calls.microbatches += secondsOf[c];
    // (the middle ones, where there are: the first and the last may differ,
    // writing the gradients or reducing them)
    const bool middle = own >= 3;
    calls.leastMicrobatch = *std::min_element(
        byMicrobatch.begin() + middle, byMicrobatch.end() - middle);
    calls.startsWithForward = doesOnly(rank.step[*first], WorkKind::Forward, 0);
    calls.endsWithBackward =
        doesOnly(rank.step[*lastCall], WorkKind::Backward, last);
  }

  // The warm-up and drain chains: per stage, its passes' least time over the
  // plan's ranks of that stage.
  std::map<int, std::pair<double, double>> stagePasses;
  for (const RankCalls &calls : ranks) {
    auto [it, inserted] = stagePasses.try_emplace(
        calls.stage, calls.firstForward, calls.lastBackward);
    if (!inserted) {
      it->second.first = std::min(it->second.first, calls.firstForward);
      it->second.second = std::min(it->second.second, calls.lastBackward);
    }
  }
  const double more = double(microbatches - own);
  double bound = 0.0;
  for (const RankCalls &calls : ranks) {
    const double extra = more * calls.leastMicrobatch;
    double before = 0.0, after = 0.0;
    for (const auto &[stage, passes] : stagePasses) {
      if (stage >= calls.stage)
        break;
      before += passes.first;
      after += passes.second;
    }
    const double chained = (calls.startsWithForward ? before : 0.0) +
                           calls.microbatches + extra +
                           (calls.endsWithBackward ? after : 0.0);
    bound = std::max({bound, calls.all + extra, chained});
  }
  return bound;
}
