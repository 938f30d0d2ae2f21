//===- Trace.cpp - a step's measured timeline as a Perfetto trace ---------===//
//
// Part of mlt. The Chrome trace events of a profiled step (Trace.h).
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/exec/Trace.h"
#include "mlt/Plan/KernelInfo.h"
#include "mlt/Runtime/exec/Profile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <string_view>

using namespace mlt;
using namespace mlt::rt;

namespace {

/// The name of a stream's track: the compute stream, or a side stream by
/// what it runs.
std::string streamName(uint32_t stream, bool collectivesOnly) {
  if (stream == 0)
    return "stream 0 (compute)";
  return "stream " + std::to_string(stream) +
         (collectivesOnly ? " (collectives)" : "");
}

nlohmann::json metadata(const char *name, int64_t pid, int64_t tid,
                        const std::string &value) {
  return {{"ph", "M"},
          {"name", name},
          {"pid", pid},
          {"tid", tid},
          {"args", {{"name", value}}}};
}

/// The events of `launches` on `rank` in process `pid`, named `process`,
/// their times from `origin` (milliseconds).
std::string eventsOf(const RankPlan &rank,
                     const std::vector<Executor::LaunchTime> &launches,
                     int64_t pid, const std::string &process, double origin) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back(metadata("process_name", pid, 0, process));
  events.push_back({{"ph", "M"},
                    {"name", "process_sort_index"},
                    {"pid", pid},
                    {"args", {{"sort_index", pid}}}});
  std::set<uint32_t> streams, computeStreams;
  for (const Executor::LaunchTime &launch : launches) {
    const ProgramDesc &program = rank.programs[launch.program];
    const InstructionDesc &inst = program.instructions[launch.instruction];
    streams.insert(inst.stream);
    const char *category = isCollectiveKernel(inst.kernel) ? "collective"
                           : isTransferKernel(inst.kernel) ? "transfer"
                                                           : "compute";
    if (std::string_view(category) == "compute")
      computeStreams.insert(inst.stream);
    nlohmann::json args = {{"program", program.name},
                           {"instruction", launch.instruction},
                           {"ints", inst.ints}};
    const std::string rate =
        formatRate(instructionWork(rank, inst), launch.milliseconds);
    if (!rate.empty())
      args["rate"] = rate;
    events.push_back({{"ph", "X"},
                      {"name", std::string(kernelName(inst.kernel))},
                      {"cat", category},
                      {"pid", pid},
                      {"tid", inst.stream},
                      {"ts", (launch.start - origin) * 1e3},
                      {"dur", launch.milliseconds * 1e3},
                      {"args", std::move(args)}});
  }
  for (uint32_t stream : streams)
    events.push_back(metadata("thread_name", pid, stream,
                              streamName(stream, !computeStreams.count(stream))));
  return events.dump();
}

} // namespace

std::string
mlt::rt::traceEvents(const RankPlan &rank,
                     const std::vector<Executor::LaunchTime> &launches) {
  double origin = 0.0;
  for (size_t i = 0; i < launches.size(); ++i)
    origin = i == 0 ? launches[i].start : std::min(origin, launches[i].start);
  return eventsOf(rank, launches, rank.rank,
                  "rank " + std::to_string(rank.rank), origin);
}

std::string mlt::rt::predictedTraceEvents(
    const RankPlan &rank, const std::vector<Executor::LaunchTime> &launches,
    uint32_t worldSize) {
  return eventsOf(rank, launches, int64_t(worldSize) + rank.rank,
                  "predicted rank " + std::to_string(rank.rank), 0.0);
}

StatusOr<std::string>
mlt::rt::formatTrace(const std::vector<std::string> &rankEvents) {
  // One event a line: a file to grep as well as to open.
  std::string text = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
  const char *separator = "\n";
  for (size_t i = 0; i < rankEvents.size(); ++i) {
    nlohmann::json events = nlohmann::json::parse(rankEvents[i], nullptr,
                                                  /*allow_exceptions=*/false);
    if (!events.is_array())
      return errorf("the trace events of process ", i,
                    " are not a JSON array");
    for (const nlohmann::json &event : events) {
      text += separator;
      text += event.dump();
      separator = ",\n";
    }
  }
  return text + "\n]}\n";
}
