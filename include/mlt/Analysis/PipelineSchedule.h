//===- PipelineSchedule.h - the order of a step's micro-batch work -*- C++
//-*-===//
//
// Part of mlt. A training step's schedule as data: for every pipeline stage
// (a rank of the pipeline axis), the ordered list of the work it does, each
// item the forward (F), backward (B) or weight-gradient (W) pass of one
// micro-batch through one model chunk, written `F<mb>.<chunk>`. With one
// stage the schedule is the gradient-accumulation loop
// `F0.0 B0.0 F1.0 B1.0 ...`. The compiler turns a schedule into each rank's
// step program (mlt-schedule-pipeline), tests pin schedules down as text,
// and `mlt-run --print-schedule` prints them. Plain C++: no MLIR, no runtime.
//
// Every builder is checked by `verify`, which replays the schedule with the
// data dependencies between stages (a stage's forward of a micro-batch needs
// the previous stage's, its backward the next stage's backward and its own
// forward) and fails on a missing or repeated item, on work out of order
// within a stage, and on a deadlock: a point where no stage can go on.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_PIPELINESCHEDULE_H
#define MLT_ANALYSIS_PIPELINESCHEDULE_H

#include "mlt/Layout/Schedules.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlt {

/// The passes a schedule item runs.
enum class WorkKind : uint8_t {
  /// The forward pass of a micro-batch through a chunk.
  Forward = 0,
  /// Its backward pass (input gradients, and weight gradients unless a
  /// separate WeightGradient item computes them).
  Backward = 1,
  /// Weight gradients alone (zero-bubble schedules).
  WeightGradient = 2,
};

/// 'F', 'B' or 'W'.
char workKindLetter(WorkKind kind);

/// One item of a stage's schedule: `F3.0` is the forward pass of
/// micro-batch 3 through model chunk 0.
struct WorkItem {
  WorkKind kind = WorkKind::Forward;
  int64_t microbatch = 0;
  int64_t chunk = 0;

  bool operator==(const WorkItem &other) const {
    return kind == other.kind && microbatch == other.microbatch &&
           chunk == other.chunk;
  }
  /// "F3.0".
  std::string str() const;
  /// Parses "F3.0" (kinds F, B, W); nullopt when malformed.
  static std::optional<WorkItem> parse(std::string_view text);
};

// ScheduleKind, its names and traits: mlt/Layout/Schedules.h.

/// The work of every stage, in order.
struct PipelineSchedule {
  int64_t stages = 1;
  int64_t microbatches = 1;
  int64_t chunks = 1;
  /// stageWork[s]: stage s's items, in the order it runs them.
  std::vector<std::vector<WorkItem>> stageWork;
  /// warmup[s]: for the schedules with a steady state of one forward and
  /// one backward in turn (1f1b, interleaved), the forwards stage s runs
  /// before it (all of them when it has none); empty for the others.
  std::vector<int64_t> warmup;
  /// Forward items alone: the evaluation step's schedule
  /// (forwardSchedule), which has no backward pass.
  bool forwardOnly = false;

  /// Checks the schedule (see the file comment); every forward and backward
  /// of every (micro-batch, chunk) exactly once per stage (forwards alone
  /// when `forwardOnly`), no W items unless `splitWeightGradients`. On
  /// failure `why` says what is wrong first.
  bool verify(std::string *why = nullptr,
              bool splitWeightGradients = false) const;

  /// The most micro-batches whose forward has run and whose backward has
  /// not (with weight-gradient items: whose W has not, since W reads the
  /// activations too), at any point of stage `stage`'s schedule: the
  /// activation sets the stage keeps at once.
  int64_t maxInFlight(int64_t stage) const;

  /// The schedule run with each item taking the time its kind costs (a B
  /// with its weight gradients when the schedule has no W items, so pass
  /// backward = B + W then) and starting as soon as its stage is free and
  /// the items it depends on have ended: the step's span and each stage's
  /// idle time within it. Assumes a schedule that verifies.
  struct Timing {
    double span = 0.0;
    std::vector<double> idle;
    /// The idle share of the stages' time: sum(idle) / (stages * span).
    double bubble() const;
  };
  /// `stageScale`: each stage's items take that many times their kind's
  /// cost (unequal stages); one entry per stage, or per virtual stage
  /// (chunk c of stage s: entry c * stages + s); empty: all 1.
  Timing simulate(double forward, double backward, double weightGradient = 0.0,
                  const std::vector<double> &stageScale = {}) const;

  /// Stage `stage`'s work, e.g. "F0.0 B0.0 F1.0 B1.0".
  std::string stageString(int64_t stage) const;
};

/// A transfer a stage posts between two of its items: the receive of the
/// input of its item `item` (an index into its stageWork), or the send of
/// that item's output. A forward at virtual stage v receives from v - 1
/// (none at v = 0) and sends to v + 1 (none at the last); a backward the
/// other way; a weight-gradient item neither.
struct TransferPost {
  bool send = false;
  int64_t item = 0;
  bool operator==(const TransferPost &other) const {
    return send == other.send && item == other.item;
  }
};

/// How a schedule's transfers are placed between its items.
enum class TransferRule : uint8_t {
  /// Each item's receive right before it, its send right after it: a send
  /// and the next item's receive form one group (Megatron-Core's
  /// send_forward_recv_backward; deadlock-free for 1f1b, gpipe, zb-h1).
  Adjacent,
  /// The interleaved schedule's: see placeTransfers.
  TimeRounds,
};

/// Where each stage posts its transfers: posts[s][k] is what stage s posts
/// before its item k (k = its item count: after its last one), in order;
/// the posts at one place form one transfer group, which completes when
/// every peer has posted the group holding the matching transfer
/// (rendezvous: NCCL's grouped send/recv without buffering).
struct TransferPlacement {
  std::vector<std::vector<std::vector<TransferPost>>> posts;
};

/// The transfers of `schedule` placed by `rule`. TimeRounds (for the
/// interleaved schedule, whose adjacent placement can deadlock or cross its
/// transfers once a chunk runs more micro-batches in a row than there are
/// stages):
/// 1. each stage's items are cut into segments: one item each, except in
///    the steady state (after `warmup`) a forward and the backward after
///    it, which Megatron-Core runs back to back with their transfers in
///    one group after them;
/// 2. every segment is given a start time, segments taking one unit: the
///    later of its stage's previous segment's end and the ends of the
///    segments producing its inputs; a stage's boundary before segment k
///    is open from the end of segment k - 1 to the start of segment k, so
///    at each time each stage is at one boundary;
/// 3. each transfer's receive goes at the boundary before its consuming
///    segment, whose start time T is the transfer's round, and its send at
///    the sender's boundary open at time T (after its producer, which ended
///    by T); each boundary's sends, then its receives, are sorted by (T,
///    producer, consumer), so every pair of stages meets its transfers in
///    one order.
/// No stage can then wait forever: a stuck stage whose boundary closes
/// first waits on a transfer of a round T no later than that close, posted
/// by a peer at a boundary closing before T, which closes earlier still.
/// With one micro-batch group per chunk of P micro-batches (Megatron's
/// default) it places every transfer as Megatron-Core's interleaved
/// schedule does. Nullopt, with the reason in `why`, for a schedule whose
/// segments depend on each other in a cycle.
std::optional<TransferPlacement>
placeTransfers(const PipelineSchedule &schedule, TransferRule rule,
               std::string *why = nullptr);

/// Stage `stage`'s posts of placeTransfers (its posts[stage]), without the
/// other stages': what one pipeline stage's compile needs
/// (mlt-schedule-pipeline), O(the stage's items) under Adjacent, whose
/// posts only the stage's own items decide, and O(the schedule's items)
/// under TimeRounds, whose rounds are the whole schedule's.
std::optional<std::vector<std::vector<TransferPost>>>
placeStageTransfers(const PipelineSchedule &schedule, TransferRule rule,
                    int64_t stage, std::string *why = nullptr);

/// The schedule of `kind` (not `interleaved`) for `stages` stages of one
/// chunk each and `microbatches` micro-batches (both at least 1).
PipelineSchedule buildSchedule(ScheduleKind kind, int64_t stages,
                               int64_t microbatches);

/// Megatron-Core's interleaved 1F1B for `stages` ranks of `chunks` model
/// chunks each (chunk c of rank r is virtual stage c * stages + r) and
/// `microbatches` micro-batches, taken in groups of `groupSize` (Megatron's
/// microbatch_group_size_per_vp_stage; 0: `stages`):
/// - the forward order, the same on every rank: for each group of
///   micro-batches (the last takes what is left), chunk 0 of each, then
///   chunk 1, ...; the backward order the same with chunk c run as chunk
///   chunks - 1 - c;
/// - rank r first runs (stages - r - 1) * 2 + (chunks - 1) * groupSize
///   forwards (all of them if fewer), then alternates a forward and a
///   backward, and ends with the backwards left.
/// Refuses, with the constraint in `why`, what Megatron refuses: fewer than
/// 2 stages or 2 chunks (Megatron then runs the non-interleaved schedule),
/// a group size outside [stages, microbatches], and a last group of fewer
/// than `stages` micro-batches (microbatches % groupSize in 1..stages-1).
std::optional<PipelineSchedule>
buildInterleavedSchedule(int64_t stages, int64_t chunks, int64_t microbatches,
                         int64_t groupSize, std::string *why = nullptr);

/// The schedule of `kind` for `stages` stages of `chunks` model chunks each
/// (more than 1 only for `interleaved`, which needs more than 1), taking
/// `groupSize` micro-batches in a row per chunk (interleaved only; 0: the
/// stages). Refuses, with the constraint in `why`, a chunk count the kind
/// does not run and whatever buildInterleavedSchedule refuses.
std::optional<PipelineSchedule>
buildStageSchedule(ScheduleKind kind, int64_t stages, int64_t chunks,
                   int64_t microbatches, int64_t groupSize = 0,
                   std::string *why = nullptr);

/// The evaluation step's schedule: `training`'s forward items alone, in
/// its order on every stage (1F1B's, GPipe's and ZB-H1's F0 F1 ... F(M-1);
/// the interleaved schedule's groups of micro-batches per chunk), every
/// stage's warmup all of its items (a forward-only schedule has no steady
/// state). Its transfers are placed by the training schedule's rule: each
/// forward's receive right before it and its send right after it, where a
/// stage's send of micro-batch k meets the next stage's receive of k after
/// that stage's send of k - 1, so no stage waits in a cycle; the
/// interleaved schedule's by its rounds, free of deadlock for any schedule
/// (placeTransfers). forwardOnly is set, and verify checks it so.
PipelineSchedule forwardSchedule(const PipelineSchedule &training);

/// ZB-H1, the first handcrafted schedule of the zero-bubble paper (Qi et
/// al., ICLR 2024): the backward split into B (input gradients, on the
/// critical path between stages) and W (weight gradients, deferred into the
/// bubbles). Built by running the stages in unit time slots (F, B and W of
/// equal cost, as the paper's handcrafted schedules assume), each stage s
/// taking at each slot the first of: the oldest W when more than P - 1 are
/// due; the next B whose later stage's B has ended; the next F whose
/// earlier stage's F has ended, while fewer than P - s micro-batches
/// await their B (1F1B's activation sets); the oldest W due. With M >= P
/// the step takes 3M + P - 1 slots, each stage idle P - 1 of them: a third
/// of 1F1B's 3 (P - 1) (its B and W fused, 2 slots); the W-pending
/// micro-batches (at most P - 1) keep what their W reads.
PipelineSchedule buildZeroBubbleH1Schedule(int64_t stages,
                                           int64_t microbatches);

} // namespace mlt

#endif // MLT_ANALYSIS_PIPELINESCHEDULE_H
