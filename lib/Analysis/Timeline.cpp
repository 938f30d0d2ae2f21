//===- Timeline.cpp - a plan's step, predicted launch by launch -----------===//
//
// Part of mlt. See Timeline.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/Timeline.h"
#include "StepStructure.h"
#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/Mesh.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

using namespace mlt;
using namespace mlt::cost;
using namespace mlt::rt;
using namespace mlt::cost::detail;

double StepTimeline::seconds() const {
  double end = 0.0;
  for (const RankTimeline &rank : ranks)
    end = std::max(end, rank.end);
  return end;
}

namespace {

/// The extra seconds of rank r's k-th launch (LaunchCosts::extra).
double extraOf(const LaunchCosts &costs, uint32_t r, size_t k) {
  return r < costs.extra.size() && k < costs.extra[r].size()
             ? costs.extra[r][k]
             : 0.0;
}

/// The size of the mesh group a collective of `inst` runs over.
int64_t groupSizeOf(const std::optional<Mesh> &mesh,
                    const InstructionDesc &inst) {
  if (!mesh || !isCollectiveKernel(inst.kernel))
    return 1;
  return mesh->axes()[size_t(collectiveAttrs(inst).axis)].size;
}

Status checkCosts(const Plan &plan, const LaunchCosts &costs) {
  if (costs.seconds.size() != plan.ranks.size())
    return errorf("costs of ", costs.seconds.size(), " ranks for a plan of ",
                  plan.ranks.size());
  for (uint32_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan &rank = plan.ranks[r];
    if (costs.seconds[r].size() != rank.programs.size())
      return errorf("rank ", rank.rank, ": costs of ",
                    costs.seconds[r].size(), " programs for ",
                    rank.programs.size());
    for (size_t p = 0; p < rank.programs.size(); ++p)
      if (costs.seconds[r][p].size() !=
          rank.programs[p].instructions.size())
        return errorf("rank ", rank.rank, " program '", rank.programs[p].name,
                      "': costs of ", costs.seconds[r][p].size(),
                      " instructions for ",
                      rank.programs[p].instructions.size());
  }
  return Status::ok();
}

/// What both schedulers start from: `costs` checked against `plan`, and
/// the step's shared launches.
StatusOr<Instances> prepareSchedule(const Plan &plan, const LaunchCosts &costs) {
  MLT_RETURN_IF_ERROR(checkCosts(plan, costs));
  StatusOr<std::optional<Mesh>> mesh = meshOf(plan);
  if (!mesh)
    return mesh.takeStatus();
  return matchInstances(plan, *mesh);
}

} // namespace

StatusOr<LaunchCosts> mlt::cost::priceLaunches(const Plan &plan,
                                               const Calibration &calibration) {
  StatusOr<std::optional<Mesh>> mesh = meshOf(plan);
  if (!mesh)
    return mesh.takeStatus();
  LaunchCosts costs;
  costs.gap = calibration.launchGap();
  costs.overlapSlowdown = calibration.overlapSlowdown();
  std::set<std::string> uncalibrated;
  costs.seconds.resize(plan.ranks.size());
  for (uint32_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan &rank = plan.ranks[r];
    auto &seconds = costs.seconds[r];
    seconds.resize(rank.programs.size());
    for (size_t p = 0; p < rank.programs.size(); ++p) {
      for (const InstructionDesc &inst : rank.programs[p].instructions) {
        const LaunchClass cls =
            launchClass(rank, inst, groupSizeOf(*mesh, inst));
        bool calibrated = true;
        seconds[p].push_back(calibration.seconds(cls, &calibrated));
        if (!calibrated)
          uncalibrated.insert(cls.key);
      }
    }
  }
  costs.uncalibrated.assign(uncalibrated.begin(), uncalibrated.end());
  return costs;
}

//===----------------------------------------------------------------------===//
// The graph's longest paths
//===----------------------------------------------------------------------===//

namespace {

/// The graph of a step's launches (Timeline.h): nodes are launches (a
/// collective or a transfer one node for all its sides) and, per segment of
/// a rank's step, a barrier of no time where it begins, after the previous
/// segment's last launches. Built once per plan; predictStep walks it once
/// per round of overlap slowdowns.
struct StepGraph {
  /// Per node: its own time, whether it is a launch, and which rank's k-th
  /// launch it is where it is one rank's (its extra seconds; -1 for a
  /// shared or barrier node).
  std::vector<double> duration;
  std::vector<bool> launch;
  std::vector<std::pair<int32_t, uint32_t>> owner;
  /// Successors, compressed: those of node n are succs[first[n] ..
  /// first[n + 1]); and each node's count of predecessors.
  std::vector<uint32_t> first, succs, predecessors;
  /// Per rank: the node of each launch in step and program order, and of
  /// each segment's barrier then the step's end.
  std::vector<std::vector<uint32_t>> launchNodes, barriers;
};

StatusOr<StepGraph> buildStepGraph(const Plan &plan, const LaunchCosts &costs) {
  StatusOr<Instances> instances = prepareSchedule(plan, costs);
  if (!instances)
    return instances.takeStatus();
  StepGraph g;
  std::vector<std::pair<uint32_t, uint32_t>> edges; // (from, to)
  // (a deep pipeline's graph has millions of nodes: sized once)
  size_t launches = 0, calls = 0;
  for (const RankPlan &rank : plan.ranks) {
    calls += rank.step.size() + 1;
    for (const CallDesc &call : rank.step)
      launches += rank.programs[call.program].instructions.size();
  }
  g.duration.reserve(launches + calls);
  g.launch.reserve(launches + calls);
  g.owner.reserve(launches + calls);
  edges.reserve(3 * launches + 2 * calls);
  auto node = [&](double seconds, bool isLaunch) {
    g.duration.push_back(seconds);
    g.launch.push_back(isLaunch);
    g.owner.emplace_back(-1, 0u);
    return uint32_t(g.duration.size() - 1);
  };
  std::vector<int64_t> instanceNode(instances->members.size(), -1);
  auto shared = [&](int64_t instance, double seconds) {
    if (instanceNode[instance] < 0)
      instanceNode[instance] = node(seconds, true);
    const uint32_t n = uint32_t(instanceNode[instance]);
    g.duration[n] = std::max(g.duration[n], seconds);
    return n;
  };
  g.launchNodes.resize(plan.ranks.size());
  g.barriers.resize(plan.ranks.size());
  std::vector<std::pair<uint32_t, uint32_t>> lastOnStream, tokens;
  auto find = [](std::vector<std::pair<uint32_t, uint32_t>> &map,
                 uint32_t key) -> uint32_t * {
    for (auto &[k, v] : map)
      if (k == key)
        return &v;
    return nullptr;
  };

  for (uint32_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan &rank = plan.ranks[r];
    const auto &seconds = costs.seconds[r];
    const auto &of = instances->of[r];
    std::vector<uint32_t> previousEnds;
    for (const Segment &segment : segmentsOf(rank)) {
      const uint32_t barrier = node(0.0, false);
      for (uint32_t p : previousEnds)
        edges.emplace_back(p, barrier);
      g.barriers[r].push_back(barrier);
      previousEnds.clear();
      if (segment.transfers) {
        for (size_t c = segment.begin; c < segment.end; ++c) {
          const uint32_t p = rank.step[c].program;
          for (size_t i = 0; i < rank.programs[p].instructions.size(); ++i) {
            const uint32_t n = shared(of[c][i], seconds[p][i]);
            edges.emplace_back(barrier, n);
            g.launchNodes[r].push_back(n);
            previousEnds.push_back(n);
          }
        }
        continue;
      }
      const size_t c = segment.begin;
      const uint32_t p = rank.step[c].program;
      const ProgramDesc &program = rank.programs[p];
      lastOnStream.clear();
      tokens.clear();
      for (size_t i = 0; i < program.instructions.size(); ++i) {
        const InstructionDesc &inst = program.instructions[i];
        const size_t k = g.launchNodes[r].size();
        uint32_t n;
        if (of[c][i] >= 0) {
          n = shared(of[c][i], seconds[p][i]);
        } else {
          n = node(seconds[p][i], true);
          g.owner[n] = {int32_t(r), uint32_t(k)};
        }
        edges.emplace_back(barrier, n);
        if (uint32_t *last = find(lastOnStream, inst.stream)) {
          edges.emplace_back(*last, n);
          *last = n;
        } else {
          lastOnStream.emplace_back(inst.stream, n);
        }
        for (uint32_t token : inst.waits)
          if (uint32_t *signal = find(tokens, token))
            edges.emplace_back(*signal, n);
        if (inst.token >= 0) {
          if (uint32_t *signal = find(tokens, uint32_t(inst.token)))
            *signal = n;
          else
            tokens.emplace_back(uint32_t(inst.token), n);
        }
        g.launchNodes[r].push_back(n);
      }
      for (const auto &[stream, n] : lastOnStream)
        previousEnds.push_back(n);
      if (previousEnds.empty())
        previousEnds.push_back(barrier);
    }
    // The step's end: a last barrier after the last segment.
    const uint32_t end = node(0.0, false);
    for (uint32_t p : previousEnds)
      edges.emplace_back(p, end);
    g.barriers[r].push_back(end);
  }

  const size_t count = g.duration.size();
  g.first.assign(count + 1, 0);
  g.predecessors.assign(count, 0);
  for (const auto &[from, to] : edges) {
    ++g.first[from + 1];
    ++g.predecessors[to];
  }
  for (size_t n = 0; n < count; ++n)
    g.first[n + 1] += g.first[n];
  g.succs.resize(edges.size());
  std::vector<uint32_t> fill(g.first.begin(), g.first.end() - 1);
  for (const auto &[from, to] : edges)
    g.succs[fill[from]++] = to;
  return g;
}

/// When each node of a step's graph starts, and for how long it runs.
struct NodeTimes {
  std::vector<double> start, length;
};

/// The longest paths of `g` at `costs` (its gap and extra seconds), in
/// Kahn's order: each node starts a gap (launches) after its latest
/// predecessor's end. Into `times`, whose storage a later round reuses (a
/// node's latest predecessor's end is kept in its start until it is
/// taken).
Status longestPaths(const StepGraph &g, const LaunchCosts &costs,
                    NodeTimes &times) {
  const size_t count = g.duration.size();
  std::vector<uint32_t> pending = g.predecessors;
  std::vector<double> &start = times.start, &length = times.length;
  start.assign(count, 0.0);
  length.assign(count, 0.0);
  std::vector<uint32_t> ready;
  for (uint32_t n = 0; n < count; ++n)
    if (pending[n] == 0)
      ready.push_back(n);
  size_t done = 0;
  while (!ready.empty()) {
    const uint32_t n = ready.back();
    ready.pop_back();
    ++done;
    if (g.launch[n]) {
      const auto [r, k] = g.owner[n];
      const double own =
          g.duration[n] + (r >= 0 ? extraOf(costs, uint32_t(r), k) : 0.0);
      std::tie(start[n], length[n]) = launchSpan(start[n], own, costs.gap);
    }
    const double end = start[n] + length[n];
    for (uint32_t i = g.first[n]; i < g.first[n + 1]; ++i) {
      const uint32_t s = g.succs[i];
      start[s] = std::max(start[s], end);
      if (--pending[s] == 0)
        ready.push_back(s);
    }
  }
  if (done != count)
    return errorf("the step's launches wait on each other in a cycle (a "
                  "plan that could deadlock)");
  return Status::ok();
}

/// Calls fn(k, program, instruction, node) for each launch of the plan's
/// r-th rank, in step and program order (k counting them).
template <typename Fn>
void forEachLaunch(const Plan &plan, const StepGraph &g, uint32_t r, Fn fn) {
  const RankPlan &rank = plan.ranks[r];
  size_t k = 0;
  for (size_t c = 0; c < rank.step.size(); ++c) {
    const uint32_t p = rank.step[c].program;
    const ProgramDesc &program = rank.programs[p];
    for (size_t i = 0; i < program.instructions.size(); ++i, ++k)
      fn(c, p, i, g.launchNodes[r][k]);
  }
}

/// The timeline of every launch of `plan` at `times`.
StepTimeline timelineOf(const Plan &plan, const StepGraph &g,
                        const NodeTimes &times) {
  StepTimeline timeline;
  timeline.ranks.resize(plan.ranks.size());
  for (uint32_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan &rank = plan.ranks[r];
    RankTimeline &out = timeline.ranks[r];
    out.launches.reserve(g.launchNodes[r].size());
    forEachLaunch(plan, g, r,
                  [&](size_t c, uint32_t p, size_t i, uint32_t n) {
                    out.launches.push_back(
                        {uint32_t(c), p, uint32_t(i),
                         rank.programs[p].instructions[i].stream,
                         times.start[n], times.length[n]});
                  });
    out.end = times.start[g.barriers[r].back()];
  }
  return timeline;
}

StatusOr<StepTimeline> walkStepGraph(const Plan &plan, const StepGraph &g,
                                     const LaunchCosts &costs) {
  NodeTimes times;
  MLT_RETURN_IF_ERROR(longestPaths(g, costs, times));
  return timelineOf(plan, g, times);
}

} // namespace

StatusOr<StepTimeline> mlt::cost::scheduleStep(const Plan &plan,
                                               const LaunchCosts &costs) {
  StatusOr<StepGraph> graph = buildStepGraph(plan, costs);
  if (!graph)
    return graph.takeStatus();
  return walkStepGraph(plan, *graph, costs);
}

//===----------------------------------------------------------------------===//
// The reference: ranks played out
//===----------------------------------------------------------------------===//

StatusOr<StepTimeline>
mlt::cost::scheduleStepBySweep(const Plan &plan, const LaunchCosts &costs) {
  StatusOr<Instances> instances = prepareSchedule(plan, costs);
  if (!instances)
    return instances.takeStatus();

  std::vector<uint32_t> arrived(instances->members.size(), 0);
  std::vector<double> readyOf(instances->members.size(), 0.0),
      secondsOf(instances->members.size(), 0.0);
  auto arrive = [&](int64_t k, double ready, double seconds) {
    ++arrived[k];
    readyOf[k] = std::max(readyOf[k], ready);
    secondsOf[k] = std::max(secondsOf[k], seconds);
  };
  auto resolved = [&](int64_t k) {
    return arrived[k] == instances->members[k];
  };
  auto spanOf = [&](int64_t k) {
    return launchSpan(readyOf[k], secondsOf[k], costs.gap);
  };

  struct RankState {
    std::vector<Segment> segments;
    size_t segment = 0, instruction = 0;
    double segmentStart = 0.0, segmentEnd = 0.0;
    bool posted = false;
    std::map<uint32_t, double> lastOnStream, tokens;
  };
  std::vector<RankState> states(plan.ranks.size());
  StepTimeline timeline;
  timeline.ranks.resize(plan.ranks.size());
  for (uint32_t r = 0; r < plan.ranks.size(); ++r)
    states[r].segments = segmentsOf(plan.ranks[r]);

  // Moves rank r as far as it can go; whether it moved.
  auto advance = [&](uint32_t r) {
    const RankPlan &rank = plan.ranks[r];
    RankState &state = states[r];
    const auto &seconds = costs.seconds[r];
    const auto &of = instances->of[r];
    RankTimeline &out = timeline.ranks[r];
    bool moved = false;
    auto finishSegment = [&] {
      state.segmentStart = state.segmentEnd;
      ++state.segment;
      state.instruction = 0;
      state.posted = false;
      state.lastOnStream.clear();
      state.tokens.clear();
      moved = true;
    };
    while (state.segment < state.segments.size()) {
      const Segment &segment = state.segments[state.segment];
      if (state.instruction == 0 && !state.posted)
        state.segmentEnd = state.segmentStart;
      if (segment.transfers) {
        if (!state.posted) {
          for (size_t c = segment.begin; c < segment.end; ++c) {
            const uint32_t p = rank.step[c].program;
            for (size_t i = 0; i < of[c].size(); ++i)
              arrive(of[c][i], state.segmentStart, seconds[p][i]);
          }
          state.posted = true;
          moved = true;
        }
        for (size_t c = segment.begin; c < segment.end; ++c)
          for (int64_t k : of[c])
            if (!resolved(k))
              return moved;
        for (size_t c = segment.begin; c < segment.end; ++c) {
          const uint32_t p = rank.step[c].program;
          for (size_t i = 0; i < of[c].size(); ++i) {
            const auto [start, length] = spanOf(of[c][i]);
            out.launches.push_back({uint32_t(c), p, uint32_t(i),
                                    rank.programs[p].instructions[i].stream,
                                    start, length});
            state.segmentEnd = std::max(state.segmentEnd, start + length);
          }
        }
        finishSegment();
        continue;
      }
      const size_t c = segment.begin;
      const uint32_t p = rank.step[c].program;
      const ProgramDesc &program = rank.programs[p];
      while (state.instruction < program.instructions.size()) {
        const size_t i = state.instruction;
        const InstructionDesc &inst = program.instructions[i];
        double ready = state.segmentStart;
        if (auto it = state.lastOnStream.find(inst.stream);
            it != state.lastOnStream.end())
          ready = std::max(ready, it->second);
        for (uint32_t token : inst.waits)
          if (auto it = state.tokens.find(token); it != state.tokens.end())
            ready = std::max(ready, it->second);
        auto [start, length] = launchSpan(
            ready,
            seconds[p][i] + extraOf(costs, r, out.launches.size()),
            costs.gap);
        if (const int64_t k = of[c][i]; k >= 0) {
          if (!state.posted) {
            arrive(k, ready, seconds[p][i]);
            state.posted = true;
            moved = true;
          }
          if (!resolved(k))
            return moved;
          state.posted = false;
          std::tie(start, length) = spanOf(k);
        }
        const double end = start + length;
        out.launches.push_back(
            {uint32_t(c), p, uint32_t(i), inst.stream, start, length});
        state.lastOnStream[inst.stream] = end;
        if (inst.token >= 0)
          state.tokens[uint32_t(inst.token)] = end;
        state.segmentEnd = std::max(state.segmentEnd, end);
        ++state.instruction;
        moved = true;
      }
      finishSegment();
    }
    out.end = state.segmentStart;
    return moved;
  };

  bool moved = true;
  while (moved) {
    moved = false;
    for (uint32_t r = 0; r < plan.ranks.size(); ++r)
      moved = advance(r) || moved;
  }
  for (uint32_t r = 0; r < plan.ranks.size(); ++r)
    if (states[r].segment < states[r].segments.size())
      return errorf("the step's launches wait on each other in a cycle (a "
                    "plan that could deadlock): rank ", plan.ranks[r].rank,
                    " stops at call ",
                    states[r].segments[states[r].segment].begin);
  return timeline;
}

namespace {

using Intervals = std::vector<std::pair<double, double>>;

/// `intervals` sorted and merged into disjoint ones.
Intervals mergedIntervals(Intervals intervals) {
  std::sort(intervals.begin(), intervals.end());
  Intervals out;
  for (const auto &[b, e] : intervals) {
    if (!out.empty() && b <= out.back().second)
      out.back().second = std::max(out.back().second, e);
    else
      out.emplace_back(b, e);
  }
  return out;
}

/// How long [begin, end) overlaps `merged` (sorted, disjoint).
double overlapWith(const Intervals &merged, double begin, double end) {
  auto it = std::upper_bound(
      merged.begin(), merged.end(), begin,
      [](double t, const std::pair<double, double> &i) { return t < i.second; });
  double total = 0.0;
  for (; it != merged.end() && it->first < end; ++it)
    total += std::min(end, it->second) - std::max(begin, it->first);
  return total;
}

bool isCommunication(const InstructionDesc &inst) {
  return isCollectiveKernel(inst.kernel) || isTransferKernel(inst.kernel);
}

/// Bisection for the x in [low, high] at which `predicted(x)` (growing with
/// x) is `measured`: low or high where it is beyond them.
template <typename Predict>
StatusOr<double> bisect(Predict predicted, double low, double high,
                        double measured, double tolerance) {
  StatusOr<double> atLow = predicted(low);
  if (!atLow)
    return atLow.takeStatus();
  if (*atLow >= measured)
    return low;
  StatusOr<double> atHigh = predicted(high);
  if (!atHigh)
    return atHigh.takeStatus();
  if (*atHigh <= measured)
    return high;
  while (high - low > tolerance) {
    const double middle = 0.5 * (low + high);
    StatusOr<double> at = predicted(middle);
    if (!at)
      return at.takeStatus();
    (*at < measured ? low : high) = middle;
  }
  return 0.5 * (low + high);
}

} // namespace

bool mlt::cost::overlapsCommunication(const Plan &plan) {
  for (const RankPlan &rank : plan.ranks)
    for (const ProgramDesc &program : rank.programs)
      for (const InstructionDesc &inst : program.instructions)
        if (isCollectiveKernel(inst.kernel) && inst.stream != 0)
          return true;
  return false;
}

namespace {

/// predictStep's graph and node times: the step scheduled, then each
/// round's slowdowns from the node times (not a timeline of every launch:
/// rounds of a deep pipeline's millions of launches) and the step
/// scheduled again.
struct PredictedTimes {
  StepGraph graph;
  NodeTimes times;
};
StatusOr<PredictedTimes> predictTimes(const Plan &plan, LaunchCosts costs) {
  costs.extra.clear();
  StatusOr<StepGraph> graph = buildStepGraph(plan, costs);
  if (!graph)
    return graph.takeStatus();
  NodeTimes times;
  MLT_RETURN_IF_ERROR(longestPaths(*graph, costs, times));
  constexpr int kRounds = 3;
  for (int round = 0; costs.overlapSlowdown > 0.0 && round < kRounds;
       ++round) {
    costs.extra.assign(plan.ranks.size(), {});
    for (uint32_t r = 0; r < plan.ranks.size(); ++r) {
      const RankPlan &rank = plan.ranks[r];
      Intervals communication;
      forEachLaunch(plan, *graph, r,
                    [&](size_t, uint32_t p, size_t i, uint32_t n) {
                      if (isCommunication(rank.programs[p].instructions[i]))
                        communication.emplace_back(
                            times.start[n], times.start[n] + times.length[n]);
                    });
      communication = mergedIntervals(std::move(communication));
      std::vector<double> &extra = costs.extra[r];
      extra.assign(graph->launchNodes[r].size(), 0.0);
      size_t k = 0;
      forEachLaunch(
          plan, *graph, r, [&](size_t, uint32_t p, size_t i, uint32_t n) {
            const size_t launch = k++;
            if (isCommunication(rank.programs[p].instructions[i]))
              return;
            // The overlap of the launch's own time (without its extra).
            const double own = costs.seconds[r][p][i];
            extra[launch] =
                costs.overlapSlowdown *
                overlapWith(communication, times.start[n],
                            times.start[n] + own);
          });
    }
    MLT_RETURN_IF_ERROR(longestPaths(*graph, costs, times));
  }
  return PredictedTimes{std::move(*graph), std::move(times)};
}

} // namespace

StatusOr<StepTimeline> mlt::cost::predictStep(const Plan &plan,
                                              LaunchCosts costs) {
  StatusOr<PredictedTimes> predicted = predictTimes(plan, std::move(costs));
  if (!predicted)
    return predicted.takeStatus();
  return timelineOf(plan, predicted->graph, predicted->times);
}

StatusOr<StepSummary> mlt::cost::summarizeStep(const Plan &plan,
                                               LaunchCosts costs) {
  StatusOr<PredictedTimes> predicted = predictTimes(plan, std::move(costs));
  if (!predicted)
    return predicted.takeStatus();
  const StepGraph &g = predicted->graph;
  const NodeTimes &times = predicted->times;
  StepSummary summary;
  summary.timeline.ranks.resize(plan.ranks.size());
  for (uint32_t r = 0; r < plan.ranks.size(); ++r) {
    summary.timeline.ranks[r].end = times.start[g.barriers[r].back()];
    if (summary.timeline.ranks[r].end >
        summary.timeline.ranks[summary.slowest].end)
      summary.slowest = r;
  }
  if (!plan.ranks.empty()) {
    const RankPlan &rank = plan.ranks[summary.slowest];
    RankTimeline &out = summary.timeline.ranks[summary.slowest];
    out.launches.reserve(g.launchNodes[summary.slowest].size());
    forEachLaunch(plan, g, summary.slowest,
                  [&](size_t c, uint32_t p, size_t i, uint32_t n) {
                    out.launches.push_back(
                        {uint32_t(c), p, uint32_t(i),
                         rank.programs[p].instructions[i].stream,
                         times.start[n], times.length[n]});
                  });
  }
  return summary;
}

StatusOr<double> mlt::cost::fitLaunchGap(const Plan &plan, LaunchCosts costs,
                                        double measured) {
  double longest = 0.0;
  for (const auto &programs : costs.seconds)
    for (const auto &instructions : programs)
      for (double seconds : instructions)
        longest = std::max(longest, seconds);
  return bisect(
      [&](double gap) -> StatusOr<double> {
        costs.gap = gap;
        StatusOr<StepTimeline> timeline = predictStep(plan, costs);
        if (!timeline)
          return timeline.takeStatus();
        return timeline->seconds();
      },
      -longest, measured, measured, 1e-9);
}

StatusOr<double> mlt::cost::fitOverlapSlowdown(const Plan &plan,
                                               LaunchCosts costs,
                                               double measured) {
  return bisect(
      [&](double slowdown) -> StatusOr<double> {
        costs.overlapSlowdown = slowdown;
        StatusOr<StepTimeline> timeline = predictStep(plan, costs);
        if (!timeline)
          return timeline.takeStatus();
        return timeline->seconds();
      },
      0.0, 8.0, measured, 1e-4);
}

//===----------------------------------------------------------------------===//
// Where the time goes
//===----------------------------------------------------------------------===//

namespace {

/// The length of the union of `intervals`.
double unionLength(Intervals intervals) {
  double total = 0.0;
  for (const auto &[begin, end] : mergedIntervals(std::move(intervals)))
    total += end - begin;
  return total;
}

} // namespace

StepBreakdown mlt::cost::breakdown(const Plan &plan,
                                   const StepTimeline &timeline,
                                   uint32_t rankIndex) {
  const RankPlan &rank = plan.ranks[rankIndex];
  StepBreakdown out;
  out.rank = rank.rank;
  out.step = timeline.seconds();
  Intervals compute, communication;
  std::vector<std::string_view> communicating;
  std::map<std::string, double> byKernel, exposedByKernel;
  for (const PredictedLaunch &launch : timeline.ranks[rankIndex].launches) {
    const InstructionDesc &inst =
        rank.programs[launch.program].instructions[launch.instruction];
    const std::pair<double, double> span{launch.start,
                                         launch.start + launch.seconds};
    if (isCommunication(inst)) {
      communication.push_back(span);
      communicating.push_back(kernelName(inst.kernel));
    } else {
      compute.push_back(span);
      byKernel[std::string(kernelName(inst.kernel))] += launch.seconds;
    }
  }
  const Intervals computing = mergedIntervals(compute);
  for (size_t i = 0; i < communication.size(); ++i) {
    const auto [begin, end] = communication[i];
    const double exposed = end - begin - overlapWith(computing, begin, end);
    if (exposed > 0.0)
      exposedByKernel[std::string(communicating[i])] += exposed;
  }
  out.compute = unionLength(compute);
  out.communication = unionLength(communication);
  Intervals all = compute;
  all.insert(all.end(), communication.begin(), communication.end());
  const double busy = unionLength(std::move(all));
  out.exposedCommunication = busy - out.compute;
  out.idle = out.step - busy;
  auto largestFirst = [](const std::map<std::string, double> &seconds) {
    std::vector<std::pair<std::string, double>> list(seconds.begin(),
                                                     seconds.end());
    std::stable_sort(list.begin(), list.end(), [](const auto &a, const auto &b) {
      return a.second > b.second;
    });
    return list;
  };
  out.byKernel = largestFirst(byKernel);
  out.exposedByKernel = largestFirst(exposedByKernel);
  return out;
}
