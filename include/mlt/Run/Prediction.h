//===- Prediction.h - a run's use of the cost model -------------*- C++ -*-===//
//
// Part of mlt. Which calibration a run prices a plan's launches by
// (--calibration FILE, else the one built in for the run's device), the
// predicted step it states before training and checks after, the predicted
// tracks of --trace, and --calibrate: a profiled step's launches, gathered
// from every rank, measured into a calibration whose launch gap is fitted
// to the run's measured step and merged into the file.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUN_PREDICTION_H
#define MLT_RUN_PREDICTION_H

#include "mlt/Analysis/Calibration.h"
#include "mlt/Analysis/Timeline.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Runtime/exec/Executor.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mlt::run {

/// A calibration and where it comes from, for messages ("calibration/
/// h100.json, built in (NVIDIA H100 80GB HBM3)").
struct ChosenCalibration {
  cost::Calibration calibration;
  std::string source;
};

/// The calibration to price launches by: `file` when given (read and
/// checked, one-line errors naming it); else the built-in calibration
/// measured on `device` (a device context's name) with `backend`, or, where
/// `device` is empty (a report compiled without a device), the first one
/// built in for `backend`; none when nothing applies.
StatusOr<std::optional<ChosenCalibration>>
chooseCalibration(const std::string &file, const std::string &backend,
                  const std::string &device);

/// The calibration of a run priced before it has a device (--report,
/// --layout auto): `file`'s, else the first built in for `backend`; fails,
/// naming `flag`, where there is none.
StatusOr<ChosenCalibration> requireCalibration(const std::string &flag,
                                               const std::string &file,
                                               const std::string &backend);

/// A plan's predicted step at a calibration.
struct Prediction {
  cost::LaunchCosts costs;
  cost::StepTimeline timeline;
};
StatusOr<Prediction> predictStep(const rt::Plan &plan,
                                 const cost::Calibration &calibration);

/// `launches`, a rank's measured or predicted step, as the executor's
/// launch times (milliseconds), for the trace writer.
std::vector<rt::Executor::LaunchTime>
asLaunchTimes(const cost::RankTimeline &timeline);

/// A rank's profiled launches as text to gather across processes, and back.
std::string
launchesToText(uint32_t rank,
               const std::vector<rt::Executor::LaunchTime> &launches);
Status launchesFromText(const std::string &text,
                        std::vector<std::vector<cost::MeasuredLaunch>> &out);

/// What --calibrate wrote: the calibration of `device` in `file` (`merged`
/// with the one there), its kernel classes and this run's, what was fitted
/// to the measured step (the overlap slowdown at the earlier runs' launch
/// gap, or the launch gap), and the step predicted at the fit against the
/// measured one.
struct CalibrationWritten {
  std::string device;
  std::string file;
  bool merged = false;
  size_t classes = 0;
  size_t runClasses = 0;
  /// Whether the overlap slowdown was fitted (else the launch gap), and
  /// the two, in seconds for the gap.
  bool fittedOverlap = false;
  double overlapSlowdown = 0.0;
  double launchGap = 0.0;
  double predictedSeconds = 0.0;
  double measuredSeconds = 0.0;
};

/// --calibrate's end: `measured` (the profiled step's launches of every
/// rank) with its launch gap fitted so that the plan's predicted step takes
/// `stepSeconds`, merged into `file` when it holds a calibration of the
/// same device, written atomically by `write`. Returns what it wrote.
StatusOr<CalibrationWritten> finishCalibration(
    const rt::Plan &plan, cost::Calibration measured, double stepSeconds,
    const std::string &file,
    const std::function<Status(const std::string &, const std::string &)>
        &write);

/// Before a --calibrate run: `file`, when it exists, is a calibration of
/// `device` on `backend` (which the run's will be merged into).
Status checkCalibrationTarget(const std::string &file,
                              const std::string &backend,
                              const std::string &device);

} // namespace mlt::run

#endif // MLT_RUN_PREDICTION_H
