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
// the same work runs at different rates: attention by head dimension and
// sequence length (its FLOPs grow with the square of the length, its rate
// too), a collective by its group size. A class's curve holds measured points
// (work, seconds); between two points the time is interpolated linearly in
// log(work) and log(time), below the first it is the first point's time
// (a launch's latency floor) where that point is within 64 times the
// device's least launch time, and otherwise (a point measured where the
// kernel is bound by its work: attention at a long sequence, at a rank's
// share of the heads) shrinks with the work at that point's rate, no lower
// than the least launch time; above the last it grows at the marginal rate
// of its last two points (at least the last point's own rate); a curve of
// one point, at its rate, or where that point is within four times the
// device's least launch time (latency bounds it, and says little of large
// launches) at the larger of its rate and the median rate of its kind.
//
// A group of products (matmul_group) never measured as such is priced as
// one product of all its work on matmul's curve. Any other launch whose
// class was never measured is priced by the device's fallback rates (the median
// rates of what was measured: matrix FLOP/s, memory bytes/s, collective
// bytes/s, and the smallest launch's time), and the report names such classes:
// a prediction made from them is a guess.
//
// Each calibration also carries two figures of the device fitted so that
// the predicted step of a calibrating run equals its measured step
// (Timeline.h says how they enter the prediction): the launch gap, the
// time between two launches of a stream beyond their kernels' own (fitted
// on runs without overlapped communication), and the overlap slowdown, how
// much a compute launch is slowed per second of communication beside it
// (fitted on runs with collectives on side streams, at the gap of those).
//
// A collective on a side stream (beside compute) is a class of its own
// ("all_reduce_sum/g2/side"): it runs slower than one on the compute
// stream, which has the device to itself. So one on the compute stream
// past its own curve's last point (calibrating runs gather little there)
// is priced no slower than its side-stream class (on its curve or past it).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_CALIBRATION_H
#define MLT_ANALYSIS_CALIBRATION_H

#include "mlt/Plan/Plan.h"
#include "mlt/Support/Status.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlt::cost {

/// The median of `values` (the mean of the middle two for an even count; 0
/// for none).
double median(std::vector<double> values);

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
  /// "matmul", "attention_bwd/hd64/s2048", "all_reduce_sum/g2", "transfer",
  /// "swiglu_bwd/amax" (with fused amax outputs).
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
  /// The launch gap of each calibrating run without overlapped
  /// communication, in seconds, and the overlap slowdown of each with; the
  /// medians are used.
  std::vector<double> launchGaps;
  std::vector<double> overlapSlowdowns;
  /// Measured curves by class key.
  std::map<std::string, Curve> curves;

  /// The medians of launchGaps and overlapSlowdowns (0 without any).
  double launchGap() const;
  double overlapSlowdown() const;

  /// The seconds of a launch of `cls`: its curve, or (without one) the
  /// fallback rates; `calibrated` says which.
  double seconds(const LaunchClass &cls, bool *calibrated = nullptr) const;

  /// The seconds of `work` on `curve`, a curve of `cls`'s kind (see the top
  /// of this file).
  double onCurve(const Curve &curve, const LaunchClass &cls,
                 double work) const;

  /// Fallback rates, the medians over the measured points of each kind:
  /// FLOP/s of the matrix classes, bytes/s of the other compute classes and
  /// of communication, and the least time of any point. 0 where none.
  double matrixRate() const;
  double memoryRate() const;
  double communicationRate() const;
  double latencyFloor() const;

  /// Adds `other`'s points, gaps and slowdowns (a calibration of the same device from
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
