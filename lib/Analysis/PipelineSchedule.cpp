//===- PipelineSchedule.cpp - the order of a step's micro-batch work ------===//
//
// Part of mlt. The schedule builders (GPipe, the simplest valid order, and
// 1F1B) and the checker that replays a schedule against the dependencies
// between stages.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/PipelineSchedule.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

using namespace mlt;

char mlt::workKindLetter(WorkKind kind) {
  switch (kind) {
  case WorkKind::Forward:
    return 'F';
  case WorkKind::Backward:
    return 'B';
  case WorkKind::WeightGradient:
    return 'W';
  }
  return '?';
}

std::string WorkItem::str() const {
  return workKindLetter(kind) + std::to_string(microbatch) + "." +
         std::to_string(chunk);
}

std::optional<WorkItem> WorkItem::parse(std::string_view text) {
  if (text.size() < 4)
    return std::nullopt;
  WorkItem item;
  switch (text[0]) {
  case 'F':
    item.kind = WorkKind::Forward;
    break;
  case 'B':
    item.kind = WorkKind::Backward;
    break;
  case 'W':
    item.kind = WorkKind::WeightGradient;
    break;
  default:
    return std::nullopt;
  }
  const char *begin = text.data() + 1, *end = text.data() + text.size();
  auto [dot, ec] = std::from_chars(begin, end, item.microbatch);
  if (ec != std::errc() || dot == begin || dot == end || *dot != '.' ||
      item.microbatch < 0)
    return std::nullopt;
  auto [last, ec2] = std::from_chars(dot + 1, end, item.chunk);
  if (ec2 != std::errc() || last != end || last == dot + 1 || item.chunk < 0)
    return std::nullopt;
  return item;
}

std::optional<PipelineSchedule>
mlt::buildStageSchedule(ScheduleKind kind, int64_t stages, int64_t chunks,
                        int64_t microbatches, int64_t groupSize,
                        std::string *why) {
  if (kind == ScheduleKind::Interleaved)
    return buildInterleavedSchedule(stages, chunks, microbatches, groupSize,
                                    why);
  if (chunks != 1) {
    if (why)
      *why = std::string("the ") + scheduleKindName(kind) +
             " schedule runs one model chunk per stage, not " +
             std::to_string(chunks) + "; stages of several chunks need the "
             "interleaved schedule";
    return std::nullopt;
  }
  if (groupSize != 0) {
    if (why)
      *why = std::string("a group size of micro-batches per chunk is the "
                         "interleaved schedule's, not the ") +
             scheduleKindName(kind) + " schedule's";
    return std::nullopt;
  }
  return buildSchedule(kind, stages, microbatches);
}

PipelineSchedule mlt::buildSchedule(ScheduleKind kind, int64_t stages,
                                    int64_t microbatches) {
  if (kind == ScheduleKind::ZeroBubbleH1)
    return buildZeroBubbleH1Schedule(stages, microbatches);
  assert(kind != ScheduleKind::Interleaved &&
         "the interleaved schedule has chunks: buildStageSchedule");
  PipelineSchedule schedule;
  schedule.stages = stages;
  schedule.microbatches = microbatches;
  schedule.stageWork.resize(size_t(stages));
  auto F = [](int64_t mb) { return WorkItem{WorkKind::Forward, mb, 0}; };
  auto B = [](int64_t mb) { return WorkItem{WorkKind::Backward, mb, 0}; };
  for (int64_t s = 0; s < stages; ++s) {
    std::vector<WorkItem> &work = schedule.stageWork[size_t(s)];
    // GPipe keeps every micro-batch in flight; 1F1B at most the warm-up's
    // plus one.
    const int64_t warmup = kind == ScheduleKind::GPipe
                               ? microbatches
                               : std::min(stages - s - 1, microbatches);
    if (kind == ScheduleKind::OneFOneB)
      schedule.warmup.push_back(warmup);
    int64_t forwards = 0, backwards = 0;
    for (; forwards < warmup; ++forwards)
      work.push_back(F(forwards));
    // Steady state: one forward, one backward.
    for (; forwards < microbatches; ++forwards, ++backwards) {
      work.push_back(F(forwards));
      work.push_back(B(backwards));
    }
    for (; backwards < microbatches; ++backwards)
      work.push_back(B(backwards));
  }
  return schedule;
}

std::optional<PipelineSchedule>
mlt::buildInterleavedSchedule(int64_t stages, int64_t chunks,
                              int64_t microbatches, int64_t groupSize,
                              std::string *why) {
  auto refuse = [&](const std::string &message) {
    if (why)
      *why = message;
    return std::nullopt;
  };
  if (stages < 2)
    return refuse("the interleaved schedule needs 2 or more pipeline "
                  "stages, got " + std::to_string(stages));
  if (chunks < 2)
    return refuse("the interleaved schedule needs 2 or more model chunks "
                  "per stage, got " + std::to_string(chunks));
  if (microbatches < 1)
    return refuse("the interleaved schedule needs 1 or more micro-batches");
  const int64_t group = groupSize ? groupSize : stages;
  if (group < stages || group > microbatches)
    return refuse("the micro-batches a chunk runs in a row (" +
                  std::to_string(group) + ") must be at least the stages (" +
                  std::to_string(stages) + ") and at most the micro-batches (" +
                  std::to_string(microbatches) + ")");
  const int64_t last = microbatches % group;
  if (last > 0 && last < stages)
    return refuse("the last group of micro-batches (" +
                  std::to_string(microbatches) + " % " +
                  std::to_string(group) + " = " + std::to_string(last) +
                  ") must be empty or at least the stages (" +
                  std::to_string(stages) +
                  "): a shorter one stalls the pipeline");

  // The forward order of (micro-batch, chunk), the same on every rank.
  std::vector<std::pair<int64_t, int64_t>> order;
  for (int64_t first = 0; first < microbatches; first += group) {
    // The last group takes what is left.
    const int64_t stop = std::min(first + group, microbatches);
    for (int64_t chunk = 0; chunk < chunks; ++chunk)
      for (int64_t mb = first; mb < stop; ++mb)
        order.emplace_back(mb, chunk);
  }
  const int64_t total = int64_t(order.size());

  PipelineSchedule schedule;
  schedule.stages = stages;
  schedule.microbatches = microbatches;
  schedule.chunks = chunks;
  schedule.stageWork.resize(size_t(stages));
  auto forward = [&](int64_t k) {
    return WorkItem{WorkKind::Forward, order[size_t(k)].first,
                    order[size_t(k)].second};
  };
  auto backward = [&](int64_t k) {
    return WorkItem{WorkKind::Backward, order[size_t(k)].first,
                    chunks - 1 - order[size_t(k)].second};
  };
  for (int64_t r = 0; r < stages; ++r) {
    std::vector<WorkItem> &work = schedule.stageWork[size_t(r)];
    const int64_t warmup =
        std::min(total, (stages - r - 1) * 2 + (chunks - 1) * group);
    schedule.warmup.push_back(warmup);
    for (int64_t k = 0; k < warmup; ++k)
      work.push_back(forward(k));
    for (int64_t k = 0; k + warmup < total; ++k) {
      work.push_back(forward(k + warmup));
      work.push_back(backward(k));
    }
    for (int64_t k = total - warmup; k < total; ++k)
      work.push_back(backward(k));
  }
  return schedule;
}

PipelineSchedule mlt::buildZeroBubbleH1Schedule(int64_t stages,
                                                int64_t microbatches) {
  PipelineSchedule schedule;
  schedule.stages = stages;
  schedule.microbatches = microbatches;
  schedule.stageWork.resize(size_t(stages));
  // The slot after which each stage's F and B of each micro-batch has
  // ended (-1: not run), and each stage's counts.
  std::vector<std::vector<int64_t>> forwardEnd(
      size_t(stages), std::vector<int64_t>(size_t(microbatches), -1));
  std::vector<std::vector<int64_t>> backwardEnd = forwardEnd;
  std::vector<int64_t> forwards(size_t(stages), 0),
      backwards(size_t(stages), 0), weights(size_t(stages), 0);
  int64_t left = 3 * stages * microbatches;
  for (int64_t slot = 0; left > 0; ++slot) {
    for (int64_t s = 0; s < stages; ++s) {
      const size_t i = size_t(s);
      // An item run in slot t has ended for slots after t.
      auto ended = [&](int64_t at) { return at >= 0 && at <= slot; };
      const int64_t b = backwards[i], f = forwards[i], w = weights[i];
      const bool weightReady = w < b && ended(backwardEnd[i][size_t(w)]);
      const bool backwardReady =
          b < f && ended(forwardEnd[i][size_t(b)]) &&
          (s + 1 == stages || ended(backwardEnd[i + 1][size_t(b)]));
      const bool forwardReady =
          f < microbatches && f - b < stages - s &&
          (s == 0 || ended(forwardEnd[i - 1][size_t(f)]));
      std::vector<WorkItem> &work = schedule.stageWork[i];
      if (weightReady && b - w > stages - 1) {
        work.push_back({WorkKind::WeightGradient, w, 0});
        ++weights[i];
      } else if (backwardReady) {
        work.push_back({WorkKind::Backward, b, 0});
        backwardEnd[i][size_t(b)] = slot + 1;
        ++backwards[i];
      } else if (forwardReady) {
        work.push_back({WorkKind::Forward, f, 0});
        forwardEnd[i][size_t(f)] = slot + 1;
        ++forwards[i];
      } else if (weightReady) {
        work.push_back({WorkKind::WeightGradient, w, 0});
        ++weights[i];
      } else {
        continue; // idle in this slot
      }
      --left;
    }
  }
  return schedule;
}

namespace {

/// A (kind, micro-batch, chunk) key for sets and maps.
using ItemKey = std::tuple<int, int64_t, int64_t>;
ItemKey keyOf(const WorkItem &item) {
  return {int(item.kind), item.microbatch, item.chunk};
}

/// An item as the stages see it: (kind, micro-batch, virtual stage), chunk
/// c of stage s being virtual stage c * stages + s.
using StageKey = std::tuple<int, int64_t, int64_t>;

/// Replays `schedule`: in turns, each stage runs its next items while the
/// item each depends on has run (a forward the previous virtual stage's
/// forward of its micro-batch, a backward the next one's backward; W items
/// nothing on other stages), calling `run` (if any) with the stage, the
/// item, its key and the key of the item it waited for. Returns where each
/// stage stopped: the sizes of their lists when the replay finished, less
/// where no stage could go on.
std::vector<size_t>
replay(const PipelineSchedule &schedule,
       const std::function<void(int64_t, const WorkItem &, const StageKey &,
                                const std::optional<StageKey> &)> &run) {
  const int64_t stages = schedule.stages;
  const int64_t virtualStages = stages * schedule.chunks;
  std::set<StageKey> done;
  std::vector<size_t> next(size_t(stages), 0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int64_t s = 0; s < stages; ++s) {
      const auto &work = schedule.stageWork[size_t(s)];
      while (next[size_t(s)] < work.size()) {
        const WorkItem &item = work[next[size_t(s)]];
        const int64_t v = item.chunk * stages + s;
        std::optional<StageKey> input;
        if (item.kind == WorkKind::Forward && v > 0)
          input = StageKey{int(WorkKind::Forward), item.microbatch, v - 1};
        if (item.kind == WorkKind::Backward && v + 1 < virtualStages)
          input = StageKey{int(WorkKind::Backward), item.microbatch, v + 1};
        if (input && !done.count(*input))
          break;
        const StageKey key{int(item.kind), item.microbatch, v};
        if (run)
          run(s, item, key, input);
        done.insert(key);
        ++next[size_t(s)];
        progressed = true;
      }
    }
  }
  return next;
}

} // namespace

bool PipelineSchedule::verify(std::string *why,
                              bool splitWeightGradients) const {
  auto fail = [&](const std::string &message) {
    if (why)
      *why = message;
    return false;
  };
  if (stages < 1 || microbatches < 1 || chunks < 1)
    return fail("stages, micro-batches and chunks must be at least 1");
  if (int64_t(stageWork.size()) != stages)
    return fail("the schedule lists " + std::to_string(stageWork.size()) +
                " stages, expected " + std::to_string(stages));
  // Every stage: each item once, in range, B after F, W after B.
  for (int64_t s = 0; s < stages; ++s) {
    std::set<ItemKey> seen;
    const std::string where = "stage " + std::to_string(s) + ": ";
    for (const WorkItem &item : stageWork[size_t(s)]) {
      if (item.microbatch >= microbatches || item.chunk >= chunks)
        return fail(where + item.str() + " is out of range (" +
                    std::to_string(microbatches) + " micro-batches, " +
                    std::to_string(chunks) + " chunks)");
      if (item.kind == WorkKind::WeightGradient && !splitWeightGradients)
        return fail(where + item.str() +
                    ": this schedule does not split weight gradients");
      if (!seen.insert(keyOf(item)).second)
        return fail(where + item.str() + " appears twice");
      auto before = [&](WorkKind kind) {
        return seen.count(
            keyOf(WorkItem{kind, item.microbatch, item.chunk}));
      };
      if (item.kind == WorkKind::Backward && !before(WorkKind::Forward))
        return fail(where + item.str() + " comes before its forward");
      if (item.kind == WorkKind::WeightGradient && !before(WorkKind::Backward))
        return fail(where + item.str() + " comes before its backward");
    }
    const size_t expected = size_t(microbatches * chunks) *
                            (splitWeightGradients ? 3 : 2);
    if (seen.size() != expected)
      return fail(where + "has " + std::to_string(seen.size()) +
                  " items, expected " + std::to_string(expected));
  }
  // Replay: a stage runs its next item once the item it depends on (on
  // another stage) has run.
  std::vector<size_t> next = replay(*this, nullptr);
  for (int64_t s = 0; s < stages; ++s) {
    if (next[size_t(s)] == stageWork[size_t(s)].size())
      continue;
    std::ostringstream os;
    os << "deadlock: no stage can go on (";
    for (int64_t t = 0; t < stages; ++t) {
      const auto &work = stageWork[size_t(t)];
      os << (t ? ", " : "") << "stage " << t << " waits at "
         << (next[size_t(t)] < work.size() ? work[next[size_t(t)]].str()
                                           : std::string("its end"));
    }
    return fail(os.str() + ")");
  }
  return true;
}

int64_t PipelineSchedule::maxInFlight(int64_t stage) const {
  const std::vector<WorkItem> &work = stageWork.at(size_t(stage));
  const bool split = std::any_of(work.begin(), work.end(), [](const WorkItem &i) {
    return i.kind == WorkKind::WeightGradient;
  });
  const WorkKind frees = split ? WorkKind::WeightGradient : WorkKind::Backward;
  int64_t live = 0, most = 0;
  for (const WorkItem &item : work) {
    if (item.kind == WorkKind::Forward)
      most = std::max(most, ++live);
    else if (item.kind == frees)
      --live;
  }
  return most;
}

double PipelineSchedule::Timing::bubble() const {
  double total = 0.0;
  for (double stage : idle)
    total += stage;
  return span > 0.0 && !idle.empty() ? total / (span * double(idle.size()))
                                     : 0.0;
}

PipelineSchedule::Timing
PipelineSchedule::simulate(double forward, double backward,
                           double weightGradient,
                           const std::vector<double> &stageScale) const {
  // Each item's end, by (kind, micro-batch, virtual stage): it starts when
  // its stage is free and the item it depends on has ended.
  std::map<StageKey, double> end;
  std::vector<double> clock(size_t(stages), 0.0), busy(size_t(stages), 0.0);
  replay(*this, [&](int64_t s, const WorkItem &item, const StageKey &key,
                    const std::optional<StageKey> &input) {
    const double ready =
        input ? std::max(clock[size_t(s)], end.at(*input)) : clock[size_t(s)];
    const double cost = (item.kind == WorkKind::Forward    ? forward
                         : item.kind == WorkKind::Backward ? backward
                                                           : weightGradient) *
                        (stageScale.empty() ? 1.0
                         : stageScale.size() == size_t(stages)
                             ? stageScale.at(size_t(s))
                             : stageScale.at(size_t(item.chunk * stages + s)));
    clock[size_t(s)] = ready + cost;
    busy[size_t(s)] += cost;
    end[key] = clock[size_t(s)];
  });
  Timing timing;
  timing.span = *std::max_element(clock.begin(), clock.end());
  for (int64_t s = 0; s < stages; ++s)
    timing.idle.push_back(timing.span - busy[size_t(s)]);
  return timing;
}

std::string PipelineSchedule::stageString(int64_t stage) const {
  std::string text;
  for (const WorkItem &item : stageWork.at(size_t(stage))) {
    if (!text.empty())
      text += ' ';
    text += item.str();
  }
  return text;
}

namespace {

/// Whether `item` at virtual stage `v` of `virtualStages` receives an input
/// from another virtual stage, and whether it sends an output to one.
bool receivesInput(const WorkItem &item, int64_t v, int64_t virtualStages) {
  return (item.kind == WorkKind::Forward && v > 0) ||
         (item.kind == WorkKind::Backward && v + 1 < virtualStages);
}
bool sendsOutput(const WorkItem &item, int64_t v, int64_t virtualStages) {
  return (item.kind == WorkKind::Forward && v + 1 < virtualStages) ||
         (item.kind == WorkKind::Backward && v > 0);
}

/// One transfer: the item producing it and the item consuming it, each as
/// (stage, index in its work).
struct Flow {
  int64_t fromStage, fromItem, toStage, toItem;
};

/// Every transfer of `schedule`, in stage and item order of the producers.
std::vector<Flow> flowsOf(const PipelineSchedule &schedule) {
  const int64_t stages = schedule.stages;
  const int64_t virtualStages = stages * schedule.chunks;
  // Each (kind, micro-batch, virtual stage): its stage and index.
  std::map<StageKey, std::pair<int64_t, int64_t>> where;
  for (int64_t s = 0; s < stages; ++s)
    for (size_t i = 0; i < schedule.stageWork[size_t(s)].size(); ++i) {
      const WorkItem &item = schedule.stageWork[size_t(s)][i];
      where[{int(item.kind), item.microbatch, item.chunk * stages + s}] = {
          s, int64_t(i)};
    }
  std::vector<Flow> flows;
  for (int64_t s = 0; s < stages; ++s)
    for (size_t i = 0; i < schedule.stageWork[size_t(s)].size(); ++i) {
      const WorkItem &item = schedule.stageWork[size_t(s)][i];
      const int64_t v = item.chunk * stages + s;
      if (!sendsOutput(item, v, virtualStages))
        continue;
      const int64_t to = item.kind == WorkKind::Forward ? v + 1 : v - 1;
      auto [toStage, toItem] =
          where.at({int(item.kind), item.microbatch, to});
      flows.push_back({s, int64_t(i), toStage, toItem});
    }
  return flows;
}

} // namespace

std::optional<TransferPlacement>
mlt::placeTransfers(const PipelineSchedule &schedule, TransferRule rule,
                    std::string *why) {
  const int64_t stages = schedule.stages;
  TransferPlacement placement;
  placement.posts.resize(size_t(stages));
  for (int64_t s = 0; s < stages; ++s)
    placement.posts[size_t(s)].resize(schedule.stageWork[size_t(s)].size() +
                                      1);
  const std::vector<Flow> flows = flowsOf(schedule);
  if (rule == TransferRule::Adjacent) {
    // Sends (after their items) first, then receives (before theirs).
    for (const Flow &flow : flows)
      placement.posts[size_t(flow.fromStage)][size_t(flow.fromItem + 1)]
          .push_back({true, flow.fromItem});
    std::vector<Flow> byConsumer = flows;
    std::sort(byConsumer.begin(), byConsumer.end(),
              [](const Flow &a, const Flow &b) {
                return std::tie(a.toStage, a.toItem) <
                       std::tie(b.toStage, b.toItem);
              });
    for (const Flow &flow : byConsumer)
      placement.posts[size_t(flow.toStage)][size_t(flow.toItem)].push_back(
          {false, flow.toItem});
    return placement;
  }

  // 1. Segments: each stage's items by segment, and each item's segment.
  std::vector<std::vector<int64_t>> segmentStart(static_cast<size_t>(stages));
  std::vector<std::vector<int64_t>> segmentOf(static_cast<size_t>(stages));
  for (int64_t s = 0; s < stages; ++s) {
    const std::vector<WorkItem> &work = schedule.stageWork[size_t(s)];
    const int64_t warmup = s < int64_t(schedule.warmup.size())
                               ? schedule.warmup[size_t(s)]
                               : int64_t(work.size());
    for (size_t i = 0; i < work.size(); ++i) {
      const bool pairsWithPrevious =
          i > 0 && int64_t(i) - 1 >= warmup &&
          work[i - 1].kind == WorkKind::Forward &&
          work[i].kind == WorkKind::Backward &&
          (segmentStart[size_t(s)].back() == int64_t(i) - 1);
      if (!pairsWithPrevious)
        segmentStart[size_t(s)].push_back(int64_t(i));
      segmentOf[size_t(s)].push_back(
          int64_t(segmentStart[size_t(s)].size()) - 1);
    }
  }
  // 2. Start times: a segment starts once its stage's previous segment
  // and the segments producing its inputs have ended.
  std::vector<std::vector<std::vector<std::pair<int64_t, int64_t>>>> inputs(static_cast<size_t>(stages));
  for (int64_t s = 0; s < stages; ++s)
    inputs[size_t(s)].resize(segmentStart[size_t(s)].size());
  for (const Flow &flow : flows)
    inputs[size_t(flow.toStage)]
          [size_t(segmentOf[size_t(flow.toStage)][size_t(flow.toItem)])]
              .push_back({flow.fromStage,
                          segmentOf[size_t(flow.fromStage)]
                                   [size_t(flow.fromItem)]});
  std::vector<std::vector<int64_t>> start(static_cast<size_t>(stages));
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int64_t s = 0; s < stages; ++s) {
      std::vector<int64_t> &times = start[size_t(s)];
      while (times.size() < segmentStart[size_t(s)].size()) {
        int64_t at = times.empty() ? 0 : times.back() + 1;
        bool ready = true;
        for (auto [from, segment] : inputs[size_t(s)][times.size()]) {
          if (int64_t(start[size_t(from)].size()) <= segment) {
            ready = false;
            break;
          }
          at = std::max(at, start[size_t(from)][size_t(segment)] + 1);
        }
        if (!ready)
          break;
        times.push_back(at);
        progressed = true;
      }
    }
  }
  for (int64_t s = 0; s < stages; ++s)
    if (start[size_t(s)].size() != segmentStart[size_t(s)].size()) {
      if (why)
        *why = "the schedule's segments wait on each other (stage " +
               std::to_string(s) + " at its item " +
               std::to_string(segmentStart[size_t(s)][start[size_t(s)].size()]) +
               ")";
      return std::nullopt;
    }
  // 3. Each transfer at the receiver's boundary before its consumer and the
  // sender's boundary open at that consumer's start, sorted by round.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;
  std::vector<std::vector<std::vector<std::pair<Key, TransferPost>>>> keyed(static_cast<size_t>(stages));
  for (int64_t s = 0; s < stages; ++s)
    keyed[size_t(s)].resize(placement.posts[size_t(s)].size());
  for (const Flow &flow : flows) {
    const int64_t segment =
        segmentOf[size_t(flow.toStage)][size_t(flow.toItem)];
    const int64_t round = start[size_t(flow.toStage)][size_t(segment)];
    const Key key{round, flow.fromStage, flow.fromItem, flow.toStage,
                  flow.toItem};
    keyed[size_t(flow.toStage)]
         [size_t(segmentStart[size_t(flow.toStage)][size_t(segment)])]
             .push_back({key, {false, flow.toItem}});
    // The sender's boundary open at `round`: before its first segment
    // starting at or after it (after its last segment if none does).
    const std::vector<int64_t> &times = start[size_t(flow.fromStage)];
    const size_t k = size_t(std::lower_bound(times.begin(), times.end(),
                                             round) -
                            times.begin());
    const int64_t boundary =
        k < times.size()
            ? segmentStart[size_t(flow.fromStage)][k]
            : int64_t(schedule.stageWork[size_t(flow.fromStage)].size());
    assert(boundary > flow.fromItem && "a send before its producer");
    keyed[size_t(flow.fromStage)][size_t(boundary)].push_back(
        {key, {true, flow.fromItem}});
  }
  for (int64_t s = 0; s < stages; ++s)
    for (size_t k = 0; k < keyed[size_t(s)].size(); ++k) {
      auto &posts = keyed[size_t(s)][k];
      // Sends first (as the adjacent placement), each kind by round.
      std::stable_sort(posts.begin(), posts.end(),
                       [](const auto &a, const auto &b) {
                         return std::tuple(!a.second.send, a.first) <
                                std::tuple(!b.second.send, b.first);
                       });
      for (auto &[key, post] : posts)
        placement.posts[size_t(s)][k].push_back(post);
    }
  return placement;
}
