//===- Prediction.cpp - a run's use of the cost model ---------------------===//
//
// Part of mlt. See Prediction.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Run/Prediction.h"

#include "mlt/Support/FileKind.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <sys/stat.h>

using namespace mlt;
using namespace mlt::run;
using namespace mlt::rt;

namespace {

/// Calibration files are small (a curve a kernel class); a larger one is
/// not one.
constexpr uint64_t kMaxCalibrationBytes = 64ull << 20;

StatusOr<std::string> readCalibrationFile(const std::string &file) {
  MLT_RETURN_IF_ERROR(checkInputPath(file, /*directoryToo=*/false));
  std::ifstream in(file, std::ios::binary);
  if (!in)
    return errorf("cannot open");
  std::string text;
  char buffer[65536];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, size_t(in.gcount()));
    if (text.size() > kMaxCalibrationBytes)
      return errorf("larger than ", kMaxCalibrationBytes >> 20,
                    " MiB: not a calibration");
  }
  return text;
}

} // namespace

StatusOr<std::optional<ChosenCalibration>>
mlt::run::chooseCalibration(const std::string &file, const std::string &backend,
                            const std::string &device) {
  if (!file.empty()) {
    StatusOr<std::string> text = readCalibrationFile(file);
    if (!text)
      return text.takeStatus().withContext("--calibration " + file);
    StatusOr<cost::Calibration> calibration = cost::Calibration::parse(*text);
    if (!calibration)
      return calibration.takeStatus().withContext("--calibration " + file);
    if (calibration->backend != backend)
      return errorf("--calibration ", file, ": a calibration of the ",
                    calibration->backend, " backend (", calibration->device,
                    "), but the run is on --device ", backend);
    ChosenCalibration chosen{std::move(*calibration), ""};
    chosen.source = file + " (" + chosen.calibration.device + ")";
    return std::optional<ChosenCalibration>(std::move(chosen));
  }
  for (const auto &[name, text] : cost::builtinCalibrations()) {
    StatusOr<cost::Calibration> calibration = cost::Calibration::parse(text);
    if (!calibration)
      return calibration.takeStatus().withContext("the built-in " +
                                                  std::string(name));
    if (calibration->backend != backend ||
        (!device.empty() && calibration->device != device))
      continue;
    ChosenCalibration chosen{std::move(*calibration), ""};
    chosen.source =
        std::string(name) + ", built in (" + chosen.calibration.device + ")";
    return std::optional<ChosenCalibration>(std::move(chosen));
  }
  return std::optional<ChosenCalibration>();
}

StatusOr<ChosenCalibration>
mlt::run::requireCalibration(const std::string &flag, const std::string &file,
                             const std::string &backend) {
  StatusOr<std::optional<ChosenCalibration>> chosen =
      chooseCalibration(file, backend, "");
  if (!chosen)
    return chosen.takeStatus();
  if (!*chosen)
    return errorf(flag, ": no calibration is built in for --device ", backend,
                  ": pass --calibration FILE (mlt-run --calibrate FILE "
                  "measures one on the device)");
  return std::move(**chosen);
}

StatusOr<Prediction>
mlt::run::predictStep(const Plan &plan, const cost::Calibration &calibration) {
  StatusOr<cost::LaunchCosts> costs = cost::priceLaunches(plan, calibration);
  if (!costs)
    return costs.takeStatus();
  StatusOr<cost::StepTimeline> timeline = cost::predictStep(plan, *costs);
  if (!timeline)
    return timeline.takeStatus();
  return Prediction{std::move(*costs), std::move(*timeline)};
}

std::vector<Executor::LaunchTime>
mlt::run::asLaunchTimes(const cost::RankTimeline &timeline) {
  std::vector<Executor::LaunchTime> launches;
  for (const cost::PredictedLaunch &launch : timeline.launches)
    launches.push_back({launch.program, launch.instruction, launch.start * 1e3,
                        launch.seconds * 1e3});
  return launches;
}

std::string
mlt::run::launchesToText(uint32_t rank,
                         const std::vector<Executor::LaunchTime> &launches) {
  nlohmann::json list = nlohmann::json::array();
  for (const Executor::LaunchTime &launch : launches)
    list.push_back({launch.program, launch.instruction, launch.start,
                    launch.milliseconds});
  return nlohmann::json{{"rank", rank}, {"launches", std::move(list)}}.dump();
}

Status mlt::run::launchesFromText(
    const std::string &text,
    std::vector<std::vector<cost::MeasuredLaunch>> &out) {
  const nlohmann::json root =
      nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object() || !root.contains("rank") ||
      !root["rank"].is_number_unsigned() || !root.contains("launches") ||
      !root["launches"].is_array())
    return errorf("a rank's launches are not as mlt-run writes them");
  const uint64_t rank = root["rank"].get<uint64_t>();
  if (rank >= out.size())
    return errorf("launches of rank ", rank, " in a plan of ", out.size());
  for (const nlohmann::json &launch : root["launches"]) {
    if (!launch.is_array() || launch.size() != 4 ||
        !launch[0].is_number_unsigned() || !launch[1].is_number_unsigned() ||
        !launch[2].is_number() || !launch[3].is_number())
      return errorf("rank ", rank,
                    ": a launch is not [program, instruction, "
                    "start, milliseconds]");
    out[rank].push_back({launch[0].get<uint32_t>(), launch[1].get<uint32_t>(),
                         launch[2].get<double>() * 1e-3,
                         launch[3].get<double>() * 1e-3});
  }
  return Status::ok();
}

Status mlt::run::checkCalibrationTarget(const std::string &file,
                                        const std::string &backend,
                                        const std::string &device) {
  struct stat st;
  if (::stat(file.c_str(), &st) != 0)
    return Status::ok();
  StatusOr<std::string> text = readCalibrationFile(file);
  if (!text)
    return text.takeStatus().withContext("--calibrate " + file);
  StatusOr<cost::Calibration> earlier = cost::Calibration::parse(*text);
  if (!earlier)
    return earlier.takeStatus().withContext("--calibrate " + file +
                                            " (a file there is merged into)");
  if (earlier->device != device || earlier->backend != backend)
    return errorf("--calibrate ", file, ": it holds a calibration of '",
                  earlier->device, "' (", earlier->backend,
                  "), this run measures '", device, "' (", backend,
                  "); name another file");
  return Status::ok();
}

StatusOr<CalibrationWritten> mlt::run::finishCalibration(
    const Plan &plan, cost::Calibration measured, double stepSeconds,
    const std::string &file,
    const std::function<Status(const std::string &, const std::string &)>
        &write) {
  // The calibration there, which this run's is merged into.
  std::optional<cost::Calibration> earlier;
  struct stat st;
  if (::stat(file.c_str(), &st) == 0) {
    StatusOr<std::string> text = readCalibrationFile(file);
    if (!text)
      return text.takeStatus().withContext("--calibrate " + file);
    StatusOr<cost::Calibration> parsed = cost::Calibration::parse(*text);
    if (!parsed)
      return parsed.takeStatus().withContext("--calibrate " + file +
                                             " (to merge into)");
    earlier = std::move(*parsed);
  }
  // This run's launches at its own curves; a run of overlapped
  // communication fits the overlap slowdown at the gap of the runs before
  // it (when there are some), any other the gap.
  StatusOr<cost::LaunchCosts> costs = cost::priceLaunches(plan, measured);
  if (!costs)
    return costs.takeStatus();
  CalibrationWritten written;
  if (cost::overlapsCommunication(plan) && earlier &&
      !earlier->launchGaps.empty()) {
    costs->gap = earlier->launchGap();
    StatusOr<double> slowdown =
        cost::fitOverlapSlowdown(plan, *costs, stepSeconds);
    if (!slowdown)
      return slowdown.takeStatus();
    measured.overlapSlowdowns = {*slowdown};
    costs->overlapSlowdown = *slowdown;
    written.fittedOverlap = true;
    written.overlapSlowdown = *slowdown;
    written.launchGap = costs->gap;
  } else {
    costs->overlapSlowdown = earlier ? earlier->overlapSlowdown() : 0.0;
    StatusOr<double> gap = cost::fitLaunchGap(plan, *costs, stepSeconds);
    if (!gap)
      return gap.takeStatus();
    measured.launchGaps = {*gap};
    costs->gap = *gap;
    written.launchGap = *gap;
  }
  StatusOr<cost::StepTimeline> own = cost::predictStep(plan, *costs);
  if (!own)
    return own.takeStatus();

  cost::Calibration result = measured;
  if (earlier) {
    MLT_RETURN_IF_ERROR(
        earlier->merge(measured).withContext("--calibrate " + file));
    result = std::move(*earlier);
    written.merged = true;
  }
  MLT_RETURN_IF_ERROR(write(file, result.toJson()));
  written.device = result.device;
  written.file = file;
  written.classes = result.curves.size();
  written.runClasses = measured.curves.size();
  written.predictedSeconds = own->seconds();
  written.measuredSeconds = stepSeconds;
  return written;
}
