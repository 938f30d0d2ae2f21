//===- Profile.h - where a step's device time goes --------------*- C++ -*-===//
//
// Part of mlt. Turns the launch times of one optimizer step (Executor's
// beginProfile / endProfile) into the report `mlt-run --profile` prints: the
// time per kernel, the share of the step, and for each kernel the rate it
// reached on the work it must do: TFLOP/s for the matrix kernels (matmul,
// attention) and GB/s for the others, against the bytes of their operands
// (each input read once and each output written once: the least traffic
// the instruction can have). Sends and receives show as kernels too: those
// of one transfer group ran as one exchange and each has its time, so
// their rows say how long the transfers were in flight, and the rate of a
// transfer is its bytes over that time. These are the figures to compare with
// the device's two ceilings (its matrix rate and its memory bandwidth) when
// deciding what to make faster.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_PROFILE_H
#define MLT_RUNTIME_PROFILE_H

#include "mlt/Plan/InstructionWork.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Runtime/exec/Executor.h"

#include <string>
#include <vector>

namespace mlt::rt {

/// The rate `work` done in `milliseconds` is: "12.3 TFLOP/s" (or GFLOP/s)
/// for matrix kernels, "1234.5 GB/s" for the others; empty for no time.
std::string formatRate(const InstructionWork &work, double milliseconds);

/// The report of one step's launches (Executor::endProfile) on `rank`: a
/// table per kernel (launches, milliseconds, share, rate), sorted by time,
/// then the `topShapes` instruction shapes (kernel and ints: the same work)
/// that took the most time, each with its count, time and rate.
std::string formatProfile(const RankPlan &rank,
                          const std::vector<Executor::LaunchTime> &launches,
                          size_t topShapes = 16);

} // namespace mlt::rt

#endif // MLT_RUNTIME_PROFILE_H
