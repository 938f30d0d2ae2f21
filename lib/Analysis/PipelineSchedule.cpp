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

/// Dense indices of a schedule's items, for flat tables instead of ordered
/// maps: a schedule of P stages and M micro-batches has 3 x M x P x V keys,
/// each (kind, micro-batch, virtual stage or chunk) one slot.
struct KeyIndex {
  int64_t microbatches = 1, places = 1;
  size_t size() const { return size_t(3 * microbatches * places); }
  size_t operator()(WorkKind kind, int64_t microbatch, int64_t place) const {
    return (size_t(kind) * size_t(microbatches) + size_t(microbatch)) *
               size_t(places) +
           size_t(place);
  }
};

/// The keys of items as the stages see them: (kind, micro-batch, virtual
/// stage), chunk c of stage s being virtual stage c * stages + s.
KeyIndex stageKeys(const PipelineSchedule &schedule) {
  return {schedule.microbatches, schedule.stages * schedule.chunks};
}

/// What replay calls for each item run: its stage, the item, its key
/// (stageKeys) and the key of the item it waited for, if any.
using ReplayStep = std::function<void(int64_t, const WorkItem &, size_t,
                                      const std::optional<size_t> &)>;

/// Replays `schedule` (its items in range): each stage runs its next items
/// while the item each depends on has run (a forward the previous virtual
/// stage's forward of its micro-batch, a backward the next one's backward;
/// W items nothing on other stages), calling `run` (if any) for each.
/// Returns where each stage stopped: the sizes of their lists when the
/// replay finished, less where no stage could go on.
///
/// A stage that stops waits for one item, which only one stage can wait
/// for (the item's consumer lies on one virtual stage): it is taken up
/// again once that item has run, so each item is looked at a bounded
/// number of times, O(items), where sweeping over the stages until none
/// moves is O(stages x items) in the worst case. Where each stage stops,
/// and each item's inputs when it runs, do not depend on the order the
/// stages are taken in.
std::vector<size_t> replay(const PipelineSchedule &schedule,
                           const ReplayStep &run) {
  const int64_t stages = schedule.stages;
  const int64_t virtualStages = stages * schedule.chunks;
  const KeyIndex keys = stageKeys(schedule);
  std::vector<bool> done(keys.size(), false);
  // The stage waiting for each item, or -1.
  std::vector<int64_t> waiter(keys.size(), -1);
  std::vector<size_t> next(size_t(stages), 0);
  std::vector<int64_t> ready;
  for (int64_t s = stages - 1; s >= 0; --s)
    ready.push_back(s);
  while (!ready.empty()) {
    const int64_t s = ready.back();
    ready.pop_back();
    const auto &work = schedule.stageWork[size_t(s)];
    while (next[size_t(s)] < work.size()) {
      const WorkItem &item = work[next[size_t(s)]];
      assert(item.microbatch >= 0 && item.microbatch < schedule.microbatches &&
             item.chunk >= 0 && item.chunk < schedule.chunks &&
             "replay needs items in range");
      const int64_t v = item.chunk * stages + s;
      std::optional<size_t> input;
      if (item.kind == WorkKind::Forward && v > 0)
        input = keys(WorkKind::Forward, item.microbatch, v - 1);
      if (item.kind == WorkKind::Backward && v + 1 < virtualStages)
        input = keys(WorkKind::Backward, item.microbatch, v + 1);
      if (input && !done[*input]) {
        waiter[*input] = s;
        break;
      }
      const size_t key = keys(item.kind, item.microbatch, v);
      if (run)
        run(s, item, key, input);
      done[key] = true;
      if (waiter[key] >= 0) {
        ready.push_back(waiter[key]);
        waiter[key] = -1;
      }
      ++next[size_t(s)];
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
  // Every stage: each item once, in range, B after F, W after B. (The
  // stage that last saw each (kind, micro-batch, chunk).)
  const KeyIndex items{microbatches, chunks};
  std::vector<int64_t> seenBy(items.size(), -1);
  for (int64_t s = 0; s < stages; ++s) {
    size_t seen = 0;
    const std::string where = "stage " + std::to_string(s) + ": ";
    for (const WorkItem &item : stageWork[size_t(s)]) {
      if (item.microbatch < 0 || item.microbatch >= microbatches ||
          item.chunk < 0 || item.chunk >= chunks)
        return fail(where + item.str() + " is out of range (" +
                    std::to_string(microbatches) + " micro-batches, " +
                    std::to_string(chunks) + " chunks)");
      if (item.kind == WorkKind::WeightGradient && !splitWeightGradients)
        return fail(where + item.str() +
                    ": this schedule does not split weight gradients");
      if (item.kind != WorkKind::Forward && forwardOnly)
        return fail(where + item.str() +
                    ": a forward-only schedule has no backward pass");
      int64_t &by = seenBy[items(item.kind, item.microbatch, item.chunk)];
      if (by == s)
        return fail(where + item.str() + " appears twice");
      by = s;
      ++seen;
      auto before = [&](WorkKind kind) {
        return seenBy[items(kind, item.microbatch, item.chunk)] == s;
      };
      if (item.kind == WorkKind::Backward && !before(WorkKind::Forward))
        return fail(where + item.str() + " comes before its forward");
      if (item.kind == WorkKind::WeightGradient && !before(WorkKind::Backward))
        return fail(where + item.str() + " comes before its backward");
    }
    const size_t expected = size_t(microbatches * chunks) *
                            (forwardOnly ? 1 : splitWeightGradients ? 3 : 2);
    if (seen != expected)
      return fail(where + "has " + std::to_string(seen) +
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

PipelineSchedule mlt::forwardSchedule(const PipelineSchedule &training) {
  PipelineSchedule forward;
  forward.stages = training.stages;
  forward.microbatches = training.microbatches;
  forward.chunks = training.chunks;
  forward.forwardOnly = true;
  for (const std::vector<WorkItem> &work : training.stageWork) {
    std::vector<WorkItem> &items = forward.stageWork.emplace_back();
    for (const WorkItem &item : work)
      if (item.kind == WorkKind::Forward)
        items.push_back(item);
    forward.warmup.push_back(int64_t(items.size()));
  }
  return forward;
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
  std::vector<double> end(stageKeys(*this).size(), 0.0);
  std::vector<double> clock(size_t(stages), 0.0), busy(size_t(stages), 0.0);
  replay(*this, [&](int64_t s, const WorkItem &item, size_t key,
                    const std::optional<size_t> &input) {
    const double ready =
        input ? std::max(clock[size_t(s)], end[*input]) : clock[size_t(s)];
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
  const KeyIndex keys = stageKeys(schedule);
  // Each (kind, micro-batch, virtual stage): its stage and index.
  std::vector<std::pair<int64_t, int64_t>> where(keys.size(), {-1, -1});
  for (int64_t s = 0; s < stages; ++s)
    for (size_t i = 0; i < schedule.stageWork[size_t(s)].size(); ++i) {
      const WorkItem &item = schedule.stageWork[size_t(s)][i];
      where[keys(item.kind, item.microbatch, item.chunk * stages + s)] = {
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
      auto [toStage, toItem] = where[keys(item.kind, item.microbatch, to)];
      assert(toStage >= 0 && "a transfer without its consumer");
      flows.push_back({s, int64_t(i), toStage, toItem});
    }
  return flows;
}

/// Stage `stage`'s posts under TransferRule::Adjacent: each item's receive
/// right before it, its send right after it (at one boundary the send
/// first). Only the stage's own items decide them.
std::vector<std::vector<TransferPost>>
adjacentPosts(const PipelineSchedule &schedule, int64_t stage) {
  const std::vector<WorkItem> &work = schedule.stageWork[size_t(stage)];
  const int64_t virtualStages = schedule.stages * schedule.chunks;
  std::vector<std::vector<TransferPost>> posts(work.size() + 1);
  for (size_t i = 0; i < work.size(); ++i)
    if (sendsOutput(work[i], work[i].chunk * schedule.stages + stage,
                    virtualStages))
      posts[i + 1].push_back({true, int64_t(i)});
  for (size_t i = 0; i < work.size(); ++i)
    if (receivesInput(work[i], work[i].chunk * schedule.stages + stage,
                      virtualStages))
      posts[i].push_back({false, int64_t(i)});
  return posts;
}

/// The TimeRounds placement (placeTransfers' steps 1-3) of stage `only`'s
/// posts, or of every stage's (`only` < 0); the other stages' posts are
/// left empty. The rounds are global: O(the schedule's items) either way.
std::optional<TransferPlacement> placeByRounds(const PipelineSchedule &schedule,
                                               int64_t only, std::string *why) {
  const int64_t stages = schedule.stages;
  auto wanted = [&](int64_t s) { return only < 0 || s == only; };
  TransferPlacement placement;
  placement.posts.resize(size_t(stages));
  for (int64_t s = 0; s < stages; ++s)
    if (wanted(s))
      placement.posts[size_t(s)].resize(schedule.stageWork[size_t(s)].size() +
                                        1);
  const std::vector<Flow> flows = flowsOf(schedule);

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
  // and the segments producing its inputs have ended. Segments are
  // numbered stage after stage (stage s's from first[s]) and timed in a
  // topological order: each once all it waits for is timed, O(segments +
  // transfers); those a cycle holds up are never timed.
  std::vector<size_t> first(size_t(stages) + 1, 0);
  for (int64_t s = 0; s < stages; ++s)
    first[size_t(s) + 1] = first[size_t(s)] + segmentStart[size_t(s)].size();
  const size_t segments = first[size_t(stages)];
  // The transfers between segments, by producer (counting sort).
  std::vector<size_t> fanout(segments + 1, 0), consumers(flows.size());
  std::vector<uint32_t> pending(segments, 0);
  auto segmentId = [&](int64_t stage, int64_t item) {
    return first[size_t(stage)] +
           size_t(segmentOf[size_t(stage)][size_t(item)]);
  };
  for (const Flow &flow : flows) {
    ++fanout[segmentId(flow.fromStage, flow.fromItem) + 1];
    ++pending[segmentId(flow.toStage, flow.toItem)];
  }
  for (size_t id = 0; id < segments; ++id)
    fanout[id + 1] += fanout[id];
  {
    std::vector<size_t> filled(fanout.begin(), fanout.end() - 1);
    for (const Flow &flow : flows)
      consumers[filled[segmentId(flow.fromStage, flow.fromItem)]++] =
          segmentId(flow.toStage, flow.toItem);
  }
  std::vector<int64_t> start(segments, -1), earliest(segments, 0);
  std::vector<size_t> ready;
  for (int64_t s = 0; s < stages; ++s)
    for (size_t id = first[size_t(s)]; id < first[size_t(s) + 1]; ++id) {
      if (id > first[size_t(s)])
        ++pending[id];
      if (!pending[id])
        ready.push_back(id);
    }
  auto release = [&](size_t id, int64_t at) {
    earliest[id] = std::max(earliest[id], at);
    if (--pending[id] == 0)
      ready.push_back(id);
  };
  while (!ready.empty()) {
    const size_t id = ready.back();
    ready.pop_back();
    start[id] = earliest[id];
    const int64_t stage = int64_t(
        std::upper_bound(first.begin(), first.end(), id) - first.begin() - 1);
    if (id + 1 < first[size_t(stage) + 1])
      release(id + 1, start[id] + 1);
    for (size_t c = fanout[id]; c < fanout[id + 1]; ++c)
      release(consumers[c], start[id] + 1);
  }
  for (int64_t s = 0; s < stages; ++s) {
    // (a stage's timed segments are a prefix of its segments)
    size_t timed = 0;
    while (first[size_t(s)] + timed < first[size_t(s) + 1] &&
           start[first[size_t(s)] + timed] >= 0)
      ++timed;
    if (timed != segmentStart[size_t(s)].size()) {
      if (why)
        *why = "the schedule's segments wait on each other (stage " +
               std::to_string(s) + " at its item " +
               std::to_string(segmentStart[size_t(s)][timed]) + ")";
      return std::nullopt;
    }
  }
  // 3. Each transfer at the receiver's boundary before its consumer and the
  // sender's boundary open at that consumer's start, sorted by round.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;
  std::vector<std::vector<std::vector<std::pair<Key, TransferPost>>>> keyed(
      static_cast<size_t>(stages));
  for (int64_t s = 0; s < stages; ++s)
    keyed[size_t(s)].resize(placement.posts[size_t(s)].size());
  for (const Flow &flow : flows) {
    if (!wanted(flow.toStage) && !wanted(flow.fromStage))
      continue;
    const int64_t segment =
        segmentOf[size_t(flow.toStage)][size_t(flow.toItem)];
    const int64_t round = start[first[size_t(flow.toStage)] + size_t(segment)];
    const Key key{round, flow.fromStage, flow.fromItem, flow.toStage,
                  flow.toItem};
    if (wanted(flow.toStage))
      keyed[size_t(flow.toStage)]
           [size_t(segmentStart[size_t(flow.toStage)][size_t(segment)])]
               .push_back({key, {false, flow.toItem}});
    if (!wanted(flow.fromStage))
      continue;
    // The sender's boundary open at `round`: before its first segment
    // starting at or after it (after its last segment if none does).
    const auto times = start.begin() + std::ptrdiff_t(first[size_t(flow.fromStage)]);
    const auto timesEnd =
        start.begin() + std::ptrdiff_t(first[size_t(flow.fromStage) + 1]);
    const size_t k =
        size_t(std::lower_bound(times, timesEnd, round) - times);
    const int64_t boundary =
        k < segmentStart[size_t(flow.fromStage)].size()
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

} // namespace

std::optional<TransferPlacement>
mlt::placeTransfers(const PipelineSchedule &schedule, TransferRule rule,
                    std::string *why) {
  if (rule == TransferRule::TimeRounds)
    return placeByRounds(schedule, /*only=*/-1, why);
  TransferPlacement placement;
  for (int64_t s = 0; s < schedule.stages; ++s)
    placement.posts.push_back(adjacentPosts(schedule, s));
  return placement;
}

std::optional<std::vector<std::vector<TransferPost>>>
mlt::placeStageTransfers(const PipelineSchedule &schedule, TransferRule rule,
                         int64_t stage, std::string *why) {
  assert(stage >= 0 && stage < schedule.stages && "a stage of the schedule");
  if (rule == TransferRule::Adjacent)
    return adjacentPosts(schedule, stage);
  std::optional<TransferPlacement> placement =
      placeByRounds(schedule, stage, why);
  if (!placement)
    return std::nullopt;
  return std::move(placement->posts[size_t(stage)]);
}
