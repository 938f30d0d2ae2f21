//===- Schedules.h - the pipeline schedules and their traits ----*- C++ -*-===//
//
// Part of mlt. The schedules a layout can name (`schedule=` / `--schedule`)
// as one table: each kind with its name and the traits that the layout's
// rule book, the pipeline builder and the passes ask about (whether it runs
// stages of several model chunks, splits the backward into input and
// weight gradients, takes a group size, lets ZeRO-2 reduce-scatter each
// micro-batch's gradients where its backward pass ends). A new schedule is
// one row here and one builder in Analysis/PipelineSchedule.cpp; nothing
// else spells schedule names. Plain C++: no MLIR, no runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LAYOUT_SCHEDULES_H
#define MLT_LAYOUT_SCHEDULES_H

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace mlt {

/// The schedules the compiler knows (`--schedule`).
enum class ScheduleKind : uint8_t {
  /// One forward and one backward in turn after a warm-up of forwards:
  /// stage s of P starts with min(P - s - 1, M) forwards, then alternates
  /// F and B, and ends with the remaining backwards (Megatron-Core's
  /// non-interleaved schedule). With one stage: F0 B0 F1 B1 ...
  OneFOneB,
  /// All forwards, then all backwards (GPipe): every stage keeps the
  /// activations of all M micro-batches.
  GPipe,
  /// ZB-H1 (buildZeroBubbleH1Schedule): the backward split into B and W,
  /// W deferred into the bubbles.
  ZeroBubbleH1,
  /// Megatron-Core's interleaved 1F1B over stages of several model chunks
  /// (buildInterleavedSchedule).
  Interleaved,
};

/// What a schedule kind is and what it composes with.
struct ScheduleTraits {
  ScheduleKind kind;
  /// Its name in options and messages: "1f1b", "gpipe", "zb-h1",
  /// "interleaved".
  const char *name;
  /// Whether its stages run several model chunks (vp >= 2; Megatron's
  /// interleaving); the others run one (vp = 1).
  bool severalChunks;
  /// Whether it takes a group size (the micro-batches a chunk runs in a row,
  /// `pp-group-size`).
  bool takesGroupSize;
  /// Whether it splits each backward pass into B (input gradients) and W
  /// (weight gradients), W items of their own.
  bool splitsWeightGradients;
  /// Whether each micro-batch's gradients are complete where its backward
  /// pass (B) ends on a stage, so that ZeRO-2 can reduce-scatter them there:
  /// not where W comes later, nor where a stage's chunks interleave.
  bool gradientsCompleteAtBackward;
  /// What it is, for usage texts (scheduleHelp).
  const char *summary;
};

/// Every schedule, in the order `--help` lists them; the first whose
/// `severalChunks` fits a layout's vp is that layout's default.
const std::vector<ScheduleTraits> &scheduleTable();
/// The traits of `kind`.
const ScheduleTraits &traitsOf(ScheduleKind kind);

/// "1f1b", "gpipe", "zb-h1", "interleaved".
const char *scheduleKindName(ScheduleKind kind);
/// Whether the schedules of `kind` split the backward pass into B and W.
bool splitsWeightGradients(ScheduleKind kind);
/// The kind named `name`, if any.
std::optional<ScheduleKind> parseScheduleKind(std::string_view name);
/// "1f1b, gpipe, zb-h1 or interleaved": the names, for messages.
const char *scheduleNames();
/// The schedule option's help: every schedule by name with its summary.
const char *scheduleHelp();
/// The schedule a layout of `vp` model chunks per stage runs when it names
/// none: 1f1b for one chunk, interleaved for several.
ScheduleKind defaultSchedule(int64_t vp);

} // namespace mlt

#endif // MLT_LAYOUT_SCHEDULES_H
