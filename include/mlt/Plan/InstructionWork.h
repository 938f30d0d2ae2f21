//===- InstructionWork.h - the work a launch must do ------------*- C++ -*-===//
//
// Part of mlt. The least work an instruction must do, from its kernel, its
// attributes and its operands: what the profiler divides a launch's time by
// to give its rate (Profile.h) and what the cost model prices it by
// (mlt/Analysis/Calibration.h).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_INSTRUCTIONWORK_H
#define MLT_PLAN_INSTRUCTIONWORK_H

#include "mlt/Plan/Plan.h"

namespace mlt::rt {

/// The work an instruction must do, from its kernel, ints and operands.
struct InstructionWork {
  /// Floating-point operations of its matrix products (matmul: 2 * batch *
  /// m * n * k; attention forward: 4 * batch * q_heads * seq^2 * head_dim,
  /// halved when causal, and 2.5 times that for the backward, the
  /// convention of FlashAttention's papers); 0 for the other kernels.
  double flops = 0.0;
  /// Bytes of its operands: every input and output buffer once (one copy
  /// of a buffer kept per micro-batch or slot).
  double bytes = 0.0;
};
InstructionWork instructionWork(const RankPlan &rank,
                                const InstructionDesc &inst);

} // namespace mlt::rt

#endif // MLT_PLAN_INSTRUCTIONWORK_H
