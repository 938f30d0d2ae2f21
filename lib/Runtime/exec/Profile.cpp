//===- Profile.cpp - where a step's device time goes ----------------------===//
//
// Part of mlt. The per-kernel report of mlt-run --profile (Profile.h).
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/exec/Profile.h"
#include "mlt/Plan/KernelInfo.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <string>

using namespace mlt;
using namespace mlt::rt;

std::string mlt::rt::formatRate(const InstructionWork &work,
                                double milliseconds) {
  if (milliseconds <= 0.0)
    return "";
  char text[32];
  const double perSecond = 1e3 / milliseconds;
  if (work.flops > 0.0 && work.flops * perSecond >= 1e12)
    std::snprintf(text, sizeof(text), "%.1f TFLOP/s",
                  work.flops * perSecond / 1e12);
  else if (work.flops > 0.0)
    std::snprintf(text, sizeof(text), "%.1f GFLOP/s",
                  work.flops * perSecond / 1e9);
  else
    std::snprintf(text, sizeof(text), "%.1f GB/s",
                  work.bytes * perSecond / 1e9);
  return text;
}

namespace {

/// Time intervals [begin, end) in milliseconds, sorted and disjoint.
using Intervals = std::vector<std::pair<double, double>>;

/// The union of `intervals`, sorted and merged.
Intervals merged(Intervals intervals) {
  std::sort(intervals.begin(), intervals.end());
  Intervals out;
  for (const auto &[begin, end] : intervals) {
    if (!out.empty() && begin <= out.back().second)
      out.back().second = std::max(out.back().second, end);
    else
      out.emplace_back(begin, end);
  }
  return out;
}

double length(const Intervals &intervals) {
  double total = 0.0;
  for (const auto &[begin, end] : intervals)
    total += end - begin;
  return total;
}

/// The time `a` and `b` (each merged) have in common.
double overlap(const Intervals &a, const Intervals &b) {
  double total = 0.0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double begin = std::max(a[i].first, b[j].first);
    const double end = std::min(a[i].second, b[j].second);
    if (end > begin)
      total += end - begin;
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return total;
}

/// The values, comma-separated; past the first 12 (a multi-tensor
/// launch's), "..." and their count.
std::string join(const std::vector<int64_t> &values) {
  constexpr size_t kShown = 12;
  std::string text;
  for (size_t i = 0; i < values.size() && i < kShown; ++i)
    text += (i ? ", " : "") + std::to_string(values[i]);
  if (values.size() > kShown)
    text += ", ... (" + std::to_string(values.size()) + " values)";
  return text;
}

} // namespace

std::string
mlt::rt::formatProfile(const RankPlan &rank,
                       const std::vector<Executor::LaunchTime> &launches,
                       size_t topShapes) {
  struct Total {
    size_t launches = 0;
    double milliseconds = 0.0;
    InstructionWork work;
  };
  std::map<std::string, Total> byKernel;
  double total = 0.0;
  for (const Executor::LaunchTime &launch : launches) {
    const InstructionDesc &inst =
        rank.programs[launch.program].instructions[launch.instruction];
    Total &t = byKernel[std::string(kernelName(inst.kernel))];
    ++t.launches;
    t.milliseconds += launch.milliseconds;
    const InstructionWork work = instructionWork(rank, inst);
    t.work.flops += work.flops;
    t.work.bytes += work.bytes;
    total += launch.milliseconds;
  }
  // The timeline: each stream's busy time, and the side streams' time
  // beside the compute stream's launches (overlapped) or alone (exposed,
  // unless the compute stream had nothing to do).
  std::map<uint32_t, Intervals> byStream;
  double first = std::numeric_limits<double>::infinity();
  double last = -first;
  for (const Executor::LaunchTime &launch : launches) {
    const uint32_t stream =
        rank.programs[launch.program].instructions[launch.instruction].stream;
    const double end = launch.start + launch.milliseconds;
    first = std::min(first, launch.start);
    last = std::max(last, end);
    byStream[stream].emplace_back(launch.start, end);
  }
  for (auto &[stream, intervals] : byStream)
    intervals = merged(std::move(intervals));

  std::vector<std::pair<std::string, Total>> rows(byKernel.begin(),
                                                  byKernel.end());
  std::sort(rows.begin(), rows.end(), [](const auto &x, const auto &y) {
    return x.second.milliseconds > y.second.milliseconds;
  });

  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof(line),
                "profile: %zu launches, %.2f ms of device time (launches "
                "timed one by one)\n",
                launches.size(), total);
  os << line;
  if (!byStream.empty()) {
    const Intervals &compute = byStream.count(0) ? byStream[0] : Intervals();
    std::snprintf(line, sizeof(line),
                  "timeline: %.2f ms from the first launch's start to the "
                  "last's end; stream 0 busy %.2f ms\n",
                  last - first, length(compute));
    os << line;
    for (const auto &[stream, intervals] : byStream) {
      if (stream == 0)
        continue;
      const double busy = length(intervals);
      const double beside = overlap(intervals, compute);
      std::snprintf(line, sizeof(line),
                    "  stream %u busy %.2f ms: %.2f beside stream 0's "
                    "launches, %.2f alone\n",
                    stream, busy, beside, busy - beside);
      os << line;
    }
  }
  std::snprintf(line, sizeof(line), "  %-24s %8s %10s %7s  %s\n", "kernel",
                "launches", "ms", "share", "rate");
  os << line;
  for (const auto &[name, t] : rows) {
    std::snprintf(line, sizeof(line), "  %-24s %8zu %10.3f %6.1f%%  %s\n",
                  name.c_str(), t.launches, t.milliseconds,
                  total > 0.0 ? 100.0 * t.milliseconds / total : 0.0,
                  formatRate(t.work, t.milliseconds).c_str());
    os << line;
  }

  // The same kernel with the same ints does the same work: group them, so
  // that each shape shows its count, time and rate once.
  struct Group {
    const InstructionDesc *inst = nullptr;
    size_t launches = 0;
    double milliseconds = 0.0;
  };
  std::map<std::pair<Kernel, std::vector<int64_t>>, Group> byShape;
  for (const Executor::LaunchTime &launch : launches) {
    const InstructionDesc &inst =
        rank.programs[launch.program].instructions[launch.instruction];
    Group &group = byShape[{inst.kernel, inst.ints}];
    group.inst = &inst;
    ++group.launches;
    group.milliseconds += launch.milliseconds;
  }
  std::vector<const Group *> groups;
  for (const auto &[key, group] : byShape)
    groups.push_back(&group);
  std::sort(groups.begin(), groups.end(), [](const Group *x, const Group *y) {
    return x->milliseconds > y->milliseconds;
  });
  if (groups.size() > topShapes)
    groups.resize(topShapes);
  if (!groups.empty()) {
    std::snprintf(line, sizeof(line), "  %-48s %8s %10s %9s  %s\n",
                  "by shape: kernel ints", "launches", "ms", "ms each", "rate");
    os << line;
  }
  for (const Group *group : groups) {
    const std::string shape = std::string(kernelName(group->inst->kernel)) +
                              " [" + join(group->inst->ints) + "]";
    const double each = group->milliseconds / double(group->launches);
    std::snprintf(line, sizeof(line), "  %-48s %8zu %10.3f %9.4f  %s\n",
                  shape.c_str(), group->launches, group->milliseconds, each,
                  formatRate(instructionWork(rank, *group->inst), each).c_str());
    os << line;
  }
  return os.str();
}
