//===- Calibration.cpp - what each launch costs on one device -------------===//
//
// Part of mlt. See Calibration.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/Calibration.h"
#include "StepStructure.h"
#include "mlt/Plan/InstructionWork.h"
#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/Mesh.h"
#include "mlt/Support/JsonDepth.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <limits>
#include <tuple>

using namespace mlt;
using namespace mlt::cost;
using namespace mlt::rt;

//===----------------------------------------------------------------------===//
// Curves and classes
//===----------------------------------------------------------------------===//

double Curve::seconds(double work) const {
  if (points.empty())
    return 0.0;
  if (work <= points.front().first)
    return points.front().second;
  if (work >= points.back().first)
    return points.back().second * (work / points.back().first);
  auto upper = std::upper_bound(
      points.begin(), points.end(), work,
      [](double w, const std::pair<double, double> &p) { return w < p.first; });
  const auto &[w1, t1] = *(upper - 1);
  const auto &[w2, t2] = *upper;
  if (work == w1)
    return t1;
  const double f = std::log(work / w1) / std::log(w2 / w1);
  return std::exp(std::log(t1) + f * (std::log(t2) - std::log(t1)));
}

namespace {

/// The ring algorithm's bytes on the wire per byte of the collective,
/// (g - 1) / g for a reduce-scatter or an all-gather, twice that for an
/// all-reduce: how a collective's time grows with its group.
double ringFactor(std::string_view kernel, int64_t groupSize) {
  const double g = double(std::max<int64_t>(groupSize, 1));
  const double factor = (g - 1.0) / g;
  return kernel == "all_reduce_sum" ? 2.0 * factor : factor;
}

/// "attention_fwd" of "attention_fwd/hd64"; the whole key without a '/'.
std::string_view baseOf(std::string_view key) {
  return key.substr(0, key.find('/'));
}

/// The numbers of a key's refinements: {64, 2048} of
/// "attention_fwd/hd64/s2048", {2} of "all_reduce_sum/g2/side"; none
/// without any.
std::vector<double> refinementsOf(std::string_view key) {
  std::vector<double> numbers;
  size_t at = key.find('/');
  while (at != std::string_view::npos && at < key.size()) {
    while (at < key.size() && !std::isdigit((unsigned char)key[at]))
      ++at;
    if (at == key.size())
      break;
    size_t end = at;
    while (end < key.size() && std::isdigit((unsigned char)key[end]))
      ++end;
    numbers.push_back(
        std::strtod(std::string(key.substr(at, end - at)).c_str(), nullptr));
    at = end;
  }
  return numbers;
}

/// How far apart two keys' refinements are: the sum of their numbers' log
/// ratios, and 10 more for each flag one has and the other not: "/side" (a
/// collective beside compute is priced by one on the compute stream only
/// where no other of its kind was measured) and "/amax" (a kernel that also
/// writes fused amax outputs, by the kernel alone where it was not measured
/// so); infinite where they have different counts of numbers.
double refinementDistance(std::string_view a, std::string_view b) {
  const std::vector<double> x = refinementsOf(a), y = refinementsOf(b);
  if (x.size() != y.size())
    return std::numeric_limits<double>::infinity();
  double distance = 0.0;
  for (std::string_view flag : {"/side", "/amax"})
    if ((a.find(flag) != std::string_view::npos) !=
        (b.find(flag) != std::string_view::npos))
      distance += 10.0;
  for (size_t i = 0; i < x.size(); ++i)
    distance += std::abs(std::log(std::max(x[i], 1.0) / std::max(y[i], 1.0)));
  return distance;
}

/// A collective key's group size (its first refinement); 1 without one.
int64_t groupOf(std::string_view key) {
  const std::vector<double> numbers = refinementsOf(key);
  return numbers.empty() ? 1 : int64_t(numbers[0]);
}


bool isMatrixKey(std::string_view key) {
  const std::string_view base = baseOf(key);
  return base == "matmul" || base == "matmul_accumulate" ||
         base == "matmul_add" || base == "matmul_group" ||
         base == "matmul_fp8" || base == "attention_fwd" ||
         base == "attention_bwd" || base == "attention_bwd_rope";
}

bool isCommunicationKey(std::string_view key) {
  const std::string_view base = baseOf(key);
  return base == "all_reduce_sum" || base == "reduce_scatter_sum" ||
         base == "all_gather" || base == "all_to_all" ||
         base == "collective_permute" || base == "transfer";
}

} // namespace

double mlt::cost::median(std::vector<double> values) {
  if (values.empty())
    return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

LaunchClass mlt::cost::launchClass(const RankPlan &rank,
                                   const InstructionDesc &inst,
                                   int64_t groupSize) {
  LaunchClass cls;
  const std::string name(kernelName(inst.kernel));
  if (isCollectiveKernel(inst.kernel)) {
    // The whole tensor's bytes: a reduce-scatter's input, an all-gather's
    // output, an all-reduce's either.
    const BufferDesc &in = rank.buffers[inst.inputs[0]];
    const BufferDesc &out = rank.buffers[inst.outputs[0]];
    cls.key = name + "/g" + std::to_string(groupSize) +
              (inst.stream != 0 ? "/side" : "");
    cls.work = double(std::max(in.bytes, out.bytes));
    cls.communication = true;
    return cls;
  }
  if (isTransferKernel(inst.kernel)) {
    // A send and its receive are one transfer, priced alike on both sides.
    const uint32_t buffer =
        inst.kernel == Kernel::Send ? inst.inputs[0] : inst.outputs[0];
    cls.key = "transfer";
    cls.work = double(rank.buffers[buffer].bytes);
    cls.communication = true;
    return cls;
  }
  const InstructionWork work = instructionWork(rank, inst);
  cls.key = name;
  if (work.flops > 0.0) {
    cls.flops = true;
    cls.work = work.flops;
    if (inst.kernel == Kernel::AttentionFwd ||
        inst.kernel == Kernel::AttentionBwd ||
        inst.kernel == Kernel::AttentionBwdRope) {
      // The three kernels' head_dim and seq are at the same positions.
      using A = attrs::AttentionFwd;
      static_assert(int(A::head_dim) ==
                        int(attrs::AttentionBwdRope::head_dim) &&
                    int(A::seq) == int(attrs::AttentionBwdRope::seq));
      cls.key += "/hd" + std::to_string(inst.ints[A::head_dim]) + "/s" +
                 std::to_string(inst.ints[A::seq]);
    }
  } else {
    cls.work = work.bytes;
  }
  // Its fused amax outputs (zeroed, then merged into by every block) cost
  // apart from its bytes; beside an attention's products they cost nothing
  // to speak of (a maximum in each block's epilogue), and it is priced as
  // one without them.
  if (!cls.flops && fusedAmaxOutputs(inst.kernel, inst.outputs.size()) > 0)
    cls.key += "/amax";
  return cls;
}

//===----------------------------------------------------------------------===//
// Calibration
//===----------------------------------------------------------------------===//

double Calibration::launchGap() const { return median(launchGaps); }
double Calibration::overlapSlowdown() const {
  return median(overlapSlowdowns);
}

namespace {

/// The median over `calibration`'s curves of the keys `pick` accepts of
/// their largest point's rate (work per second).
template <typename Pick>
double medianRate(const Calibration &calibration, Pick pick) {
  std::vector<double> rates;
  for (const auto &[key, curve] : calibration.curves)
    if (pick(key) && !curve.points.empty())
      rates.push_back(curve.points.back().first / curve.points.back().second);
  return median(rates);
}

} // namespace

double Calibration::matrixRate() const {
  return medianRate(*this, [](std::string_view key) { return isMatrixKey(key); });
}
double Calibration::memoryRate() const {
  return medianRate(*this, [](std::string_view key) {
    return !isMatrixKey(key) && !isCommunicationKey(key);
  });
}
double Calibration::communicationRate() const {
  return medianRate(*this,
                    [](std::string_view key) { return isCommunicationKey(key); });
}
double Calibration::latencyFloor() const {
  double least = 0.0;
  for (const auto &[key, curve] : curves)
    for (const auto &[work, seconds] : curve.points)
      least = least == 0.0 ? seconds : std::min(least, seconds);
  return least;
}

double Calibration::onCurve(const Curve &curve, const LaunchClass &cls,
                            double work) const {
  // Below a first point measured well above the launch latency (bound by
  // its work, not its launch): at that point's rate.
  if (!curve.points.empty() && work < curve.points.front().first) {
    const auto [firstWork, firstSeconds] = curve.points.front();
    const double floor = latencyFloor();
    if (firstSeconds > 64.0 * floor)
      return std::max(floor, firstSeconds * work / firstWork);
  }
  if (curve.points.empty() || work <= curve.points.back().first)
    return curve.seconds(work);
  const auto [lastWork, lastSeconds] = curve.points.back();
  // Beyond the last point, each further unit of work at the curve's
  // marginal rate between its last two points (no slower than its last
  // point's average rate). A curve of one point has no slope: the larger of
  // its rate and the median rate of its kind (measured only at a small
  // size, where latency bounds it, it says little of large ones).
  double rate = lastWork / lastSeconds;
  if (curve.points.size() >= 2) {
    const auto [previousWork, previousSeconds] =
        curve.points[curve.points.size() - 2];
    if (lastSeconds > previousSeconds)
      rate = std::max(rate, (lastWork - previousWork) /
                                (lastSeconds - previousSeconds));
  } else if (lastSeconds < 4.0 * latencyFloor()) {
    rate = std::max(rate, cls.flops           ? matrixRate()
                          : cls.communication ? communicationRate()
                                              : memoryRate());
  }
  return lastSeconds + (work - lastWork) / rate;
}

double Calibration::seconds(const LaunchClass &cls, bool *calibrated) const {
  if (calibrated)
    *calibrated = true;
  if (auto it = curves.find(cls.key); it != curves.end()) {
    const double own = onCurve(it->second, cls, cls.work);
    // A collective on the compute stream past its curve's last point (a
    // calibrating run measures it at the sizes its plans gather, often
    // small): no slower than the same collective beside compute, which
    // runs slower where both are measured (on that curve, or past it).
    if (cls.communication && !it->second.points.empty() &&
        cls.work > it->second.points.back().first)
      if (auto side = curves.find(cls.key + "/side");
          side != curves.end() && !side->second.points.empty())
        return std::min(own, onCurve(side->second, cls, cls.work));
    return own;
  }
  // The same kernel measured at other refinements: the nearest (head
  // dimension and sequence length by their ratios; a collective's group
  // size, its traffic scaled by the ring's).
  const std::string_view base = baseOf(cls.key);
  const Curve *nearest = nullptr;
  std::string_view nearestKey;
  // The curve of `curveBase` whose refinements are nearest the class's.
  auto findNearest = [&](std::string_view curveBase) {
    double nearestDistance = std::numeric_limits<double>::infinity();
    for (const auto &[key, curve] : curves) {
      if (baseOf(key) != curveBase)
        continue;
      const double distance = refinementDistance(cls.key, key);
      if (distance < nearestDistance) {
        nearest = &curve;
        nearestKey = key;
        nearestDistance = distance;
      }
    }
  };
  findNearest(base);
  // An all-to-all without a curve of its own: all_gather's (each rank sends
  // and receives (G-1)/G of the whole tensor's bytes in both).
  if (!nearest && base == "all_to_all")
    findNearest("all_gather");
  // A permute (the ring's) without a curve of its own: a transfer's, of its
  // buffer's bytes (each rank sends its buffer to one peer and receives one,
  // as a pipeline's send and receive).
  if (!nearest && base == "collective_permute")
    if (auto it = curves.find("transfer"); it != curves.end())
      return onCurve(it->second, cls, cls.work);
  // The attention backward with rope's inverse in its epilogue, without a
  // curve of its own: attention_bwd's (the rotation is a few instructions
  // a written element).
  if (!nearest && base == "attention_bwd_rope")
    findNearest("attention_bwd");
  if (nearest) {
    if (!cls.communication)
      return onCurve(*nearest, cls, cls.work);
    const double scale = ringFactor(base, groupOf(cls.key)) /
                         ringFactor(baseOf(nearestKey), groupOf(nearestKey));
    return onCurve(*nearest, cls, cls.work * scale);
  }
  // A group of products (matmul_group: one batched launch) without a curve
  // of its own: one product of all their work, on matmul's curve.
  if (base == "matmul_group")
    if (auto it = curves.find("matmul"); it != curves.end())
      return onCurve(it->second, cls, cls.work);
  // An FP8 product without a curve of its own: matmul's at half its work
  // (the FP8 tensor cores' peak is twice bf16's; a calibration that times
  // matmul_fp8 gives it its own curve).
  if (base == "matmul_fp8")
    if (auto it = curves.find("matmul"); it != curves.end())
      return onCurve(it->second, cls, cls.work / 2.0);
  if (calibrated)
    *calibrated = false;
  const double floor = latencyFloor();
  double rate = cls.flops           ? matrixRate()
                : cls.communication ? communicationRate()
                                    : memoryRate();
  if (rate <= 0.0)
    return floor;
  double work = cls.work;
  if (cls.communication && base != "transfer")
    work *= ringFactor(base, groupOf(cls.key));
  return std::max(floor, work / rate);
}

Status Calibration::merge(const Calibration &other) {
  if (other.device != device || other.backend != backend)
    return errorf("a calibration of '", other.device, "' (", other.backend,
                  ") cannot be merged into one of '", device, "' (", backend,
                  ")");
  launchGaps.insert(launchGaps.end(), other.launchGaps.begin(),
                    other.launchGaps.end());
  overlapSlowdowns.insert(overlapSlowdowns.end(),
                          other.overlapSlowdowns.begin(),
                          other.overlapSlowdowns.end());
  for (const auto &[key, curve] : other.curves) {
    std::map<double, std::vector<double>> byWork;
    for (const auto &[work, seconds] : curves[key].points)
      byWork[work].push_back(seconds);
    for (const auto &[work, seconds] : curve.points)
      byWork[work].push_back(seconds);
    Curve merged;
    for (const auto &[work, times] : byWork) {
      double sum = 0.0;
      for (double t : times)
        sum += t;
      merged.points.emplace_back(work, sum / double(times.size()));
    }
    curves[key] = std::move(merged);
  }
  return Status::ok();
}

namespace {

constexpr const char *kFormatName = "mlt-calibration";
constexpr int kFormatVersion = 1;
/// Bounds on what a calibration file may hold (a hostile file is refused,
/// not allocated): classes, points per class, gaps, text.
constexpr size_t kMaxCurves = 10000, kMaxPoints = 100000, kMaxGaps = 100000,
                 kMaxKeyLength = 200;

bool positiveFinite(const nlohmann::json &value) {
  return value.is_number() && std::isfinite(value.get<double>()) &&
         value.get<double>() > 0.0;
}

} // namespace

std::string Calibration::toJson() const {
  // A point a line: a file to read and diff. Numbers as nlohmann writes
  // them (shortest round trip), strings escaped by it.
  auto number = [](double value) { return nlohmann::json(value).dump(); };
  auto text = [](const std::string &value) {
    return nlohmann::json(value).dump();
  };
  std::ostringstream os;
  os << "{\n \"format\": " << text(kFormatName)
     << ",\n \"version\": " << kFormatVersion
     << ",\n \"device\": " << text(device)
     << ",\n \"backend\": " << text(backend) << ",\n \"launch_gaps_us\": [";
  for (size_t i = 0; i < launchGaps.size(); ++i)
    os << (i ? ", " : "") << number(launchGaps[i] * 1e6);
  os << "],\n \"overlap_slowdowns\": [";
  for (size_t i = 0; i < overlapSlowdowns.size(); ++i)
    os << (i ? ", " : "") << number(overlapSlowdowns[i]);
  os << "],\n \"curves\": {";
  const char *separator = "\n";
  for (const auto &[key, curve] : curves) {
    os << separator << "  " << text(key) << ": {\"work\": \""
       << (isMatrixKey(key) ? "flops" : "bytes") << "\", \"points\": [";
    for (size_t i = 0; i < curve.points.size(); ++i)
      os << (i ? ",\n    " : "\n    ") << "[" << number(curve.points[i].first)
         << ", " << number(curve.points[i].second * 1e6) << "]";
    os << "]}";
    separator = ",\n";
  }
  os << "\n }\n}\n";
  return os.str();
}

StatusOr<Calibration> Calibration::parse(std::string_view text) {
  if (std::optional<size_t> at = jsonTooDeepAt(text))
    return errorf("nested deeper than ", kMaxJsonDepth, " levels at byte ",
                  *at);
  const nlohmann::json root = nlohmann::json::parse(
      text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded())
    return errorf("not JSON");
  if (!root.is_object() || !root.contains("format") ||
      root["format"] != kFormatName)
    return errorf("not a calibration (no \"format\": \"", kFormatName, "\")");
  if (!root.contains("version") || root["version"] != kFormatVersion)
    return errorf("calibration format version ",
                  root.contains("version") ? root["version"].dump() : "none",
                  ", this mlt reads version ", kFormatVersion);
  Calibration calibration;
  for (const char *field : {"device", "backend"}) {
    if (!root.contains(field) || !root[field].is_string() ||
        root[field].get<std::string>().size() > kMaxKeyLength)
      return errorf("\"", field, "\" is not a string of at most ",
                    kMaxKeyLength, " characters");
  }
  calibration.device = root["device"].get<std::string>();
  calibration.backend = root["backend"].get<std::string>();
  if (!root.contains("launch_gaps_us") || !root["launch_gaps_us"].is_array() ||
      root["launch_gaps_us"].size() > kMaxGaps)
    return errorf("\"launch_gaps_us\" is not a list of at most ", kMaxGaps,
                  " numbers");
  for (const nlohmann::json &gap : root["launch_gaps_us"]) {
    if (!gap.is_number() || !std::isfinite(gap.get<double>()) ||
        std::abs(gap.get<double>()) > 1e9)
      return errorf("\"launch_gaps_us\" holds ", gap.dump(),
                    ", not a time in microseconds");
    calibration.launchGaps.push_back(gap.get<double>() * 1e-6);
  }
  if (!root.contains("overlap_slowdowns") ||
      !root["overlap_slowdowns"].is_array() ||
      root["overlap_slowdowns"].size() > kMaxGaps)
    return errorf("\"overlap_slowdowns\" is not a list of at most ", kMaxGaps,
                  " numbers");
  for (const nlohmann::json &slowdown : root["overlap_slowdowns"]) {
    if (!slowdown.is_number() || !std::isfinite(slowdown.get<double>()) ||
        slowdown.get<double>() < 0.0 || slowdown.get<double>() > 100.0)
      return errorf("\"overlap_slowdowns\" holds ", slowdown.dump(),
                    ", not a slowdown between 0 and 100");
    calibration.overlapSlowdowns.push_back(slowdown.get<double>());
  }
  if (!root.contains("curves") || !root["curves"].is_object() ||
      root["curves"].size() > kMaxCurves)
    return errorf("\"curves\" is not an object of at most ", kMaxCurves,
                  " classes");
  for (const auto &[key, value] : root["curves"].items()) {
    if (key.empty() || key.size() > kMaxKeyLength)
      return errorf("a curve's class is empty or longer than ",
                    kMaxKeyLength, " characters");
    auto bad = [&](const std::string &why) {
      return errorf("curve '", quotedLine(key), "': ", why);
    };
    if (!value.is_object() || !value.contains("points") ||
        !value["points"].is_array())
      return bad("no \"points\" list");
    const nlohmann::json &points = value["points"];
    if (points.empty() || points.size() > kMaxPoints)
      return bad("between 1 and " + std::to_string(kMaxPoints) +
                 " points are expected, not " + std::to_string(points.size()));
    Curve curve;
    for (const nlohmann::json &point : points) {
      if (!point.is_array() || point.size() != 2 || !positiveFinite(point[0]) ||
          !positiveFinite(point[1]))
        return bad("point " + point.dump() +
                   " is not [work, microseconds], both positive");
      const double work = point[0].get<double>();
      if (!curve.points.empty() && work <= curve.points.back().first)
        return bad("points are not in increasing order of work at " +
                   point.dump());
      curve.points.emplace_back(work, point[1].get<double>() * 1e-6);
    }
    calibration.curves[key] = std::move(curve);
  }
  return calibration;
}

//===----------------------------------------------------------------------===//
// Measuring
//===----------------------------------------------------------------------===//

StatusOr<Calibration> mlt::cost::measureCalibration(
    const Plan &plan, const std::vector<std::vector<MeasuredLaunch>> &launches,
    std::string device, std::string backend) {
  if (launches.size() != plan.ranks.size())
    return errorf("launches of ", launches.size(), " ranks for a plan of ",
                  plan.ranks.size());
  StatusOr<std::optional<Mesh>> mesh = detail::meshOf(plan);
  if (!mesh)
    return mesh.takeStatus();
  // Every sample's time by class and work.
  std::map<std::string, std::map<double, std::vector<double>>> samples;
  // A collective or a transfer (StepStructure.h's key): the least time over
  // its sides, with its class.
  std::map<detail::InstanceKey, std::pair<LaunchClass, double>> communication;
  for (const RankPlan &rank : plan.ranks) {
    std::optional<detail::InstanceNamer> namer;
    if (*mesh)
      namer.emplace(**mesh, rank.rank);
    for (const MeasuredLaunch &launch : launches[rank.rank]) {
      if (launch.program >= rank.programs.size() ||
          launch.instruction >=
              rank.programs[launch.program].instructions.size())
        return errorf("rank ", rank.rank, " launched program ", launch.program,
                      " instruction ", launch.instruction,
                      ", which its plan does not hold");
      const InstructionDesc &inst =
          rank.programs[launch.program].instructions[launch.instruction];
      const bool measured =
          launch.seconds > 0.0 && std::isfinite(launch.seconds);
      if (isCollectiveKernel(inst.kernel) || isTransferKernel(inst.kernel)) {
        if (!namer)
          return errorf("rank ", rank.rank,
                        " launches a collective, but the plan has no mesh");
        // (named whether measured or not: the next launch's key counts it)
        StatusOr<std::pair<detail::InstanceKey, uint32_t>> named =
            namer->next(inst);
        if (!named)
          return named.takeStatus();
        if (!measured)
          continue;
        const LaunchClass cls = launchClass(
            rank, inst, isCollectiveKernel(inst.kernel) ? named->second : 1);
        auto [it, inserted] =
            communication.try_emplace(named->first, cls, launch.seconds);
        if (!inserted)
          it->second.second = std::min(it->second.second, launch.seconds);
        continue;
      }
      const LaunchClass cls = launchClass(rank, inst, 1);
      if (measured && cls.work > 0.0)
        samples[cls.key][cls.work].push_back(launch.seconds);
    }
  }
  for (const auto &[instance, measured] : communication)
    if (measured.first.work > 0.0)
      samples[measured.first.key][measured.first.work].push_back(
          measured.second);

  Calibration calibration;
  calibration.device = std::move(device);
  calibration.backend = std::move(backend);
  for (const auto &[key, byWork] : samples) {
    Curve curve;
    for (const auto &[work, times] : byWork)
      curve.points.emplace_back(work, median(times));
    calibration.curves[key] = std::move(curve);
  }
  return calibration;
}
