//===- MemoryReport.h - a rank's memory by what it holds --------*- C++ -*-===//
//
// Part of mlt. The exact memory of each rank of a plan, before anything
// runs: the arena is planned, so its size is the rank's peak, and its
// persistent buffers say what the state costs (parameters, their compute
// copies, gradients, optimizer state), per parameter too, which shows what
// a layout (data parallelism with a partitioned optimizer, ZeRO) saves.
// `mlt-run --report-memory` prints it.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_MEMORYREPORT_H
#define MLT_PLAN_MEMORYREPORT_H

#include "mlt/Plan/Plan.h"

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <vector>

namespace mlt::rt {

/// Bytes of one rank's arena by what they hold. Views share their base's
/// bytes and count once (in the base).
struct RankMemory {
  /// Parameters (the f32 master weights, whole or a slice), their compute
  /// copies (bf16), gradients and optimizer state (AdamW moments).
  uint64_t parameters = 0, parameterCopies = 0, gradients = 0,
           optimizerState = 0;
  /// Inputs, outputs and constants.
  uint64_t io = 0;
  /// The rest of the arena: activations and temporaries (planned by
  /// lifetime, so this is their peak, alignment included).
  uint64_t temporaries = 0;
  uint64_t arena = 0;
  /// The kernels' scratch area beside the arena, where the backend that
  /// runs the plan has one (Backend::scratchBytes; the report's caller
  /// asks it: this library knows no backend).
  std::optional<uint64_t> scratch;
  /// The micro-batches whose activations the rank keeps at once (the
  /// copies of its buffers kept per slot: a pipeline stage's in-flight
  /// micro-batches; on an interleaved stage, whose chunks' temporaries
  /// are named `c<chunk>.`, the sum over its chunks of their in-flight
  /// micro-batches); 0 when it keeps none from one call to another.
  uint32_t inFlight = 0;
  /// The model chunks whose slots inFlight counts (1 unless interleaved).
  uint32_t chunks = 0;
  /// Elements of the parameters the rank's forward pass reads (its blocks
  /// of them): what "per parameter" divides by.
  int64_t parameterElements = 0;
  /// With an evaluation step: the bytes its programs' temporaries span,
  /// inside `temporaries` (the evaluation runs between training steps,
  /// when the training step's activations are dead).
  std::optional<uint64_t> evaluation;

  /// Persistent bytes per parameter element: parameters, copies, gradients
  /// and optimizer state over parameterElements (0 without parameters).
  double persistentBytesPerParameter() const;
  bool operator==(const RankMemory &other) const;
};

RankMemory rankMemory(const RankPlan &rank);

/// "0-3", "0, 2" or "5": the ranks of a group, as reports name them.
std::string rankList(const std::vector<uint32_t> &ranks);

/// The ZeRO stage a plan was compiled with: 0, every rank keeps the whole
/// optimizer state; 1, its parameter ranges are held in slices (segments);
/// 2, also the gradients' slices are stored apart rather than viewing
/// whole gradient buckets.
int zeroStage(const Plan &plan);

/// Writes the report: each distinct RankMemory once, with the ranks it is
/// of, in MiB and bytes per parameter, e.g.
///   memory per rank (ranks 0-1):
///     parameters        1.53 MiB   2.00 B/param (f32 master weights)
///     ...
///     activations, temps 7.30 MiB  (their planned peak)
///       evaluation       0.12 MiB  (with an evaluation step: its share)
///     arena            20.63 MiB   (the rank's peak)
/// and with `scratch` (each rank's kernel scratch, Backend::scratchBytes, in
/// the plan's rank order), the scratch and the device's total:
///     kernel scratch    1.00 MiB   (...)
///     on the device    21.63 MiB   (arena and scratch, ...)
void printMemoryReport(const Plan &plan, std::ostream &os,
                       const std::vector<uint64_t> &scratch = {});

} // namespace mlt::rt

#endif // MLT_PLAN_MEMORYREPORT_H
