//===- Schedules.cpp - the pipeline schedules and their traits ------------===//
//
// Part of mlt. See Schedules.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Layout/Schedules.h"

#include <cassert>
#include <string>

using namespace mlt;

const std::vector<ScheduleTraits> &mlt::scheduleTable() {
  static const std::vector<ScheduleTraits> table = {
      {ScheduleKind::OneFOneB, "1f1b", /*severalChunks=*/false,
       /*takesGroupSize=*/false, /*splitsWeightGradients=*/false,
       /*gradientsCompleteAtBackward=*/true,
       "the default with one chunk per stage; Megatron-Core's, one forward "
       "and one backward in turn after a warm-up of P-s-1 forwards on stage "
       "s of P"},
      {ScheduleKind::GPipe, "gpipe", false, false, false, true,
       "all forwards first, every micro-batch's activations kept: the same "
       "results in more memory"},
      {ScheduleKind::ZeroBubbleH1, "zb-h1", false, false, true, false,
       "the zero-bubble paper's: each backward split into B, input "
       "gradients, and W, weight gradients, W deferred into the bubbles"},
      {ScheduleKind::Interleaved, "interleaved", true, true, false, false,
       "the default and only choice with vp: Megatron-Core's interleaved "
       "1F1B over the stages' chunks"},
  };
  return table;
}

const ScheduleTraits &mlt::traitsOf(ScheduleKind kind) {
  for (const ScheduleTraits &traits : scheduleTable())
    if (traits.kind == kind)
      return traits;
  assert(false && "a schedule kind without a row in scheduleTable");
  return scheduleTable().front();
}

const char *mlt::scheduleKindName(ScheduleKind kind) {
  return traitsOf(kind).name;
}

bool mlt::splitsWeightGradients(ScheduleKind kind) {
  return traitsOf(kind).splitsWeightGradients;
}

std::optional<ScheduleKind> mlt::parseScheduleKind(std::string_view name) {
  for (const ScheduleTraits &traits : scheduleTable())
    if (name == traits.name)
      return traits.kind;
  return std::nullopt;
}

const char *mlt::scheduleNames() {
  static const std::string names = [] {
    std::string text;
    const std::vector<ScheduleTraits> &table = scheduleTable();
    for (size_t i = 0; i < table.size(); ++i)
      text += std::string(i == 0                  ? ""
                          : i + 1 == table.size() ? " or "
                                                  : ", ") +
              table[i].name;
    return text;
  }();
  return names.c_str();
}

const char *mlt::scheduleHelp() {
  static const std::string help = [] {
    std::string text = "the order of the micro-batches' forward and backward "
                       "passes in a step: ";
    const std::vector<ScheduleTraits> &table = scheduleTable();
    for (size_t i = 0; i < table.size(); ++i)
      text += std::string(i == 0                  ? ""
                          : i + 1 == table.size() ? " or "
                                                  : ", ") +
              table[i].name + " (" + table[i].summary + ")";
    return text;
  }();
  return help.c_str();
}

ScheduleKind mlt::defaultSchedule(int64_t vp) {
  for (const ScheduleTraits &traits : scheduleTable())
    if (traits.severalChunks == (vp > 1))
      return traits.kind;
  return ScheduleKind::OneFOneB;
}
