//===- HangReport.h - every rank's place, in words --------------*- C++ -*-===//
//
// Part of mlt. What mlt-run --collective-timeout says when no rank moved
// for the timeout: from every rank's position (Position.h, gathered from
// the processes when there are several) and the plan, which every process
// holds whole, a line per rank and one summary line. Plain text from plain
// data, so that it is tested without a hang.
//
// A rank waits when it is inside a collective or a transfer group: its
// device's word says it entered one and has not left it (GPUs), or its
// host waits in one (the CPU, whose launches run to completion). Every
// other rank is elsewhere: at a launch of its host (held there by
// MLT_FAULT_STALL, queuing it, setting up), in compute on its GPU, between
// steps, or silent (its report never came). The summary names the ranks
// elsewhere first, they are where a hang begins, then who waits where,
// grouped by the same place and group:
//
//   no progress for 600 s: rank 5 is in matmul 233 of B3.0 [B3.0]; ranks
//   0-4,6,7 wait in all_reduce_sum 'grad_bucket.4' of dp group 0-7
//
// A rank line names the step, the launch (its index among the step's
// launches, as MLT_FAULT_STALL counts them), the call, its program and its
// schedule items, and the kernel:
//
//   rank 5: step 3, launch 812 of 2140 (call 6, B3.0 [B3.0], instruction
//   233): in matmul 233 of B3.0 [B3.0]
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_EXEC_HANGREPORT_H
#define MLT_RUNTIME_EXEC_HANGREPORT_H

#include "mlt/Plan/Plan.h"
#include "mlt/Runtime/exec/Position.h"

#include <optional>
#include <string>
#include <vector>

namespace mlt::rt {

struct HangReport {
  /// One line per rank of the plan, in rank order ("rank 5: step 3, ...").
  std::vector<std::string> ranks;
  /// The summary ("no progress for 600 s: rank 5 is in ...; ranks 0-4,6,7
  /// wait in ...").
  std::string summary;
};

/// The report of `plan`'s ranks at `positions` (one per plan rank, in rank
/// order; none for a rank whose position never arrived), after
/// `timeoutSeconds` without progress.
HangReport describeHang(const Plan &plan,
                        const std::vector<std::optional<PositionSnapshot>>
                            &positions,
                        double timeoutSeconds);

/// "600 s", "2 s", "0.5 s": a timeout in messages.
std::string formatSeconds(double seconds);

} // namespace mlt::rt

#endif // MLT_RUNTIME_EXEC_HANGREPORT_H
