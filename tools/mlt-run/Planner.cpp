//===- Planner.cpp - mlt-run --layout auto --------------------------------===//
//
// Part of mlt. See Planner.h.
//
//===----------------------------------------------------------------------===//

#include "Planner.h"

#include "mlt/Analysis/StepReport.h"
#include "mlt/Runtime/FormatBytes.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

using namespace mlt;
using namespace mlt::tool;
using namespace mlt::rt;

namespace {

/// A layout that compiled and fits: its predicted step.
struct Candidate {
  cost::Layout layout;
  uint64_t arena = 0;
  double step = 0.0;
  cost::StepBound bound;
};

uint64_t largestArena(const Plan &plan) {
  uint64_t arena = 0;
  for (const RankPlan &rank : plan.ranks)
    arena = std::max(arena, rank.arenaBytes);
  return arena;
}

} // namespace

StatusOr<PlannedLayout>
mlt::tool::planLayout(const PlannerRequest &request,
                      const cost::Calibration &calibration,
                      const std::string &calibrationSource,
                      const CompileLayout &compile) {
  const std::vector<cost::Layout> layouts =
      cost::enumerateLayouts({request.gpus, request.globalBatch});
  const auto start = std::chrono::steady_clock::now();
  double lastProgress = 0.0;
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };

  std::vector<Candidate> fitting;
  std::optional<PlannedLayout> best;
  double bestStep = 0.0;
  size_t compiled = 0, refused = 0, tooLarge = 0;
  std::string firstRefusal;
  std::optional<std::pair<uint64_t, cost::Layout>> closest;
  for (size_t i = 0; i < layouts.size(); ++i) {
    if (elapsed() - lastProgress >= 5.0) {
      lastProgress = elapsed();
      std::fprintf(stderr, "mlt-run: planning: %zu of %zu layouts, %.0f s\n",
                   i, layouts.size(), lastProgress);
    }
    // The layout, then its memory-saving variants until one fits.
    std::vector<cost::Layout> tries = {layouts[i]};
    for (const cost::Layout &variant : cost::memorySavingVariants(layouts[i]))
      tries.push_back(variant);
    bool placed = false;
    for (const cost::Layout &layout : tries) {
      std::string bytes;
      ++compiled;
      StatusOr<Plan> plan = compile(layout, bytes);
      if (!plan) {
        // (its memory-saving variants would be refused alike)
        ++refused;
        if (firstRefusal.empty())
          firstRefusal = layout.flags() + ": " + plan.status().message();
        placed = true;
        break;
      }
      const uint64_t arena = largestArena(*plan);
      if (request.arenaLimit && arena > request.arenaLimit) {
        if (!closest || arena < closest->first)
          closest = {arena, layout};
        continue;
      }
      StatusOr<cost::LaunchCosts> costs =
          cost::priceLaunches(*plan, calibration);
      if (!costs)
        return costs.takeStatus().withContext(layout.flags());
      StatusOr<cost::StepTimeline> timeline = cost::predictStep(*plan, *costs);
      if (!timeline)
        return timeline.takeStatus().withContext(layout.flags());
      fitting.push_back({layout, arena, timeline->seconds(),
                         cost::stepBound(*plan, *timeline)});
      if (!best || fitting.back().step < bestStep) {
        bestStep = fitting.back().step;
        best = PlannedLayout{layout, std::move(*plan), std::move(bytes)};
      }
      placed = true;
      break;
    }
    if (!placed)
      ++tooLarge;
  }

  std::stable_sort(fitting.begin(), fitting.end(),
                   [](const Candidate &a, const Candidate &b) {
                     return a.step < b.step;
                   });
  std::printf("layout auto: %lld GPUs, global batch %lld x %lld, %s; "
              "calibration: %s\n",
              (long long)request.gpus, (long long)request.globalBatch,
              (long long)request.seqLen,
              request.arenaLimit ? request.limitText.c_str()
                                 : "no memory limit",
              calibrationSource.c_str());
  std::printf("  %zu layouts, %zu compiled in %.1f s: %zu fit, %zu do not "
              "fit, %zu refused by the compiler\n",
              layouts.size(), compiled, elapsed(), fitting.size(), tooLarge,
              refused);
  if (fitting.empty()) {
    if (closest)
      return errorf("--layout auto: no layout of ", request.gpus,
                    " GPUs fits: the least memory is ", formatBytes(closest->first),
                    " (", closest->second.flags(), "), the limit ",
                    formatBytes(request.arenaLimit));
    return errorf("--layout auto: the compiler refused every layout of ",
                  request.gpus, " GPUs; the first: ", firstRefusal);
  }
  const double tokens = double(request.globalBatch) * double(request.seqLen);
  std::printf("  %-4s %-48s %11s %10s %11s  %s\n", "rank", "layout",
              "step", "tokens/s", "memory", "bound by");
  constexpr size_t kShown = 5;
  for (size_t i = 0; i < std::min(kShown, fitting.size()); ++i) {
    const Candidate &c = fitting[i];
    char step[32], rate[32], bound[64];
    std::snprintf(step, sizeof step, "%.2f ms", c.step * 1e3);
    std::snprintf(rate, sizeof rate, "%.0f", tokens / c.step);
    std::snprintf(bound, sizeof bound, "%s (%.0f%% of the step)",
                  c.bound.what.c_str(), c.bound.share * 100.0);
    std::printf("  %-4zu %-48s %11s %10s %11s  %s\n", i + 1,
                c.layout.flags().c_str(), step, rate, formatBytes(c.arena).c_str(),
                bound);
  }
  if (fitting.size() > kShown)
    std::printf("  ... %zu more, the slowest %.2f ms (%s)\n",
                fitting.size() - kShown, fitting.back().step * 1e3,
                fitting.back().layout.flags().c_str());
  std::printf("chose %s\n", best->layout.flags().c_str());
  std::fflush(stdout);
  return std::move(*best);
}
