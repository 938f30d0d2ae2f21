//===- StepReport.h - a predicted step, as reports print it -----*- C++ -*-===//
//
// Part of mlt. The text `mlt-run --report` prints after the memory report,
// and the line a calibrated run starts with: the predicted step time and
// tokens per second, then for each rank (ranks alike grouped) where the
// time goes: compute by kernel, communication and how much of it no compute
// hides, and idle time (launch gaps, waits for peers, a pipeline's bubble);
// last, the kernel classes priced without a curve of their own.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_STEPREPORT_H
#define MLT_ANALYSIS_STEPREPORT_H

#include "mlt/Analysis/Timeline.h"

#include <string>

namespace mlt::cost {

/// The report (see the top of this file); `calibration` names where the
/// costs come from ("NVIDIA H100 80GB HBM3, built in").
std::string formatStepPrediction(const rt::Plan &plan,
                                 const StepTimeline &timeline,
                                 const LaunchCosts &costs,
                                 const std::string &calibration);

/// Tokens a step of `plan` trains on: global batch times sequence length.
double tokensPerStep(const rt::Plan &plan);

} // namespace mlt::cost

#endif // MLT_ANALYSIS_STEPREPORT_H
