//===- Calibration.h - what each launch costs on one device -----*- C++ -*-===//
//
// Part of mlt. The measured half of the cost model: how long a launch of
// each kernel class takes on one kind of device, as a curve of time against
// the launch's work, measured by `mlt-run --calibrate` on that device and
// kept in a JSON file (`calibration/h100.json` ships for the H100).
//
// The work of a launch is what bounds it (Profile.h's InstructionWork): the
// FLOPs of the kernels that run on the matrix units (the products and
// attention), the bytes of every other kernel's operands, the bytes a
// collective or a transfer moves. Its class is the kernel, refined where
// the same work runs at different rates: attention by head dimension, a
// collective by its group size. A class's curve holds measured points
// (work, seconds); between two points the time is interpolated linearly in
// log(work) and log(time), below the first it is the first point's time
// (a launch's latency floor), above the last it grows with the work at the
// last point's rate.
//
// A launch whose class was never measured is priced by the device's
// fallback rates (the median rates of what was measured: matrix FLOP/s,
// memory bytes/s, collective bytes/s, and the smallest launch's time), and
// the report names such classes: a prediction made from them is a guess.
//
// Each calibration also carries the device's launch gap: the time between
// two launches of a stream beyond their kernels' own, fitted so that the
// predicted step of the calibrating run equals its measured step.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_CALIBRATION_H
#define MLT_ANALYSIS_CALIBRATION_H

#include "mlt/Runtime/Status.h"
#include "mlt/Runtime/plan/Plan.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlt::cost {

using rt::Status;
using rt::StatusOr;

/// Time against work, from measured points.
struct Curve {
  /// (work, seconds), sorted by work, each work positive and distinct, each
  /// time positive.
  std::vector<std::pair<double, double>> points;

  /// The time of a launch of `work` (see the top of this file); 0 for an
  /// empty curve.
  double seconds(double work) const;
};

/// What a launch is priced as: its class (a Calibration curve's key) and
/// its work.
struct LaunchClass {
  /// "matmul", "attention_bwd/hd64", "all_reduce_sum/g2", "send".
  std::string key;
  /// FLOPs for matrix kernels, else bytes.
  double work = 0.0;
  /// Whether the work is FLOPs (the products and attention).
  bool flops = false;
  /// Collectives and transfers (priced by the fallback bus bandwidth).
  bool communication = false;
};

/// The class and work of `inst` on `rank`; `groupSize` is the size of a
/// collective's mesh axis (ignored for other kernels).
LaunchClass launchClass(const rt::RankPlan &rank,
                        const rt::InstructionDesc &inst, int64_t groupSize);

/// One device's costs.
struct Calibration {
  /// The device measured ("NVIDIA H100 80GB HBM3", "cpu: 2 threads") and its
  /// backend ("cuda", "cpu").
  std::string device;
  std::string backend;
  /// The launch gap of each calibrating run, in seconds; the median is used.
  std::vector<double> launchGaps;
  /// Measured curves by class key.
  std::map<std::string, Curve> curves;

  /// The median of launchGaps (0 without any).
  double launchGap() const;

  /// The seconds of a launch of `cls`: its curve, or (without one) the
  /// fallback rates; `calibrated` says which.
  double seconds(const LaunchClass &cls, bool *calibrated = nullptr) const;

  /// Fallback rates, the medians over the measured points of each kind:
  /// FLOP/s of the matrix classes, bytes/s of the other compute classes and
  /// of communication, and the least time of any point. 0 where none.
  double matrixRate() const;
  double memoryRate() const;
  double communicationRate() const;
  double latencyFloor() const;

  /// Adds `other`'s points and gaps (a calibration of the same device from
  /// another run); where both have a point at the same work, their mean.
  Status merge(const Calibration &other);

  /// The JSON file's text; parse reads it back (one-line errors naming the
  /// field).
  std::string toJson() const;
  static StatusOr<Calibration> parse(std::string_view text);
};

/// One launch of a profiled step, as the executor times it.
struct MeasuredLaunch {
  uint32_t program = 0;
  uint32_t instruction = 0;
  double start = 0.0;
  double seconds = 0.0;
};

/// Curves measured from one profiled step of `plan`: `launches[r]` are rank
/// r's launches in launch order (empty for ranks not measured). Each
/// compute launch is a sample of its class (the median where one class
/// has several launches of the same work); a collective's time is the least
/// over its group's members (the last to arrive does not wait), a transfer's
/// the least of its two sides. The launch gap is left to fitLaunchGap.
StatusOr<Calibration>
measureCalibration(const rt::Plan &plan,
                   const std::vector<std::vector<MeasuredLaunch>> &launches,
                   std::string device, std::string backend);

/// The calibrations built into mlt: each file of the source tree's
/// calibration/ ("calibration/h100.json") and its text.
const std::vector<std::pair<std::string_view, std::string_view>> &
builtinCalibrations();

} // namespace mlt::cost

#endif // MLT_ANALYSIS_CALIBRATION_H
