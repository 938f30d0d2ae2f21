//===- StepReport.cpp - a predicted step, as reports print it -------------===//
//
// Part of mlt. See StepReport.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/StepReport.h"
#include "mlt/Plan/MemoryReport.h"

#include <cstdio>
#include <map>
#include <sstream>

using namespace mlt;
using namespace mlt::cost;
using namespace mlt::rt;

namespace {

std::string milliseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%10.2f ms", seconds * 1e3);
  return text;
}

/// One rank's lines, without its name: equal text, equal ranks.
std::string rankLines(const StepBreakdown &b) {
  constexpr size_t kKernelsShown = 6;
  std::ostringstream os;
  os << "    compute        " << milliseconds(b.compute);
  if (!b.byKernel.empty()) {
    os << "   (";
    for (size_t i = 0; i < std::min(kKernelsShown, b.byKernel.size()); ++i) {
      char text[64];
      std::snprintf(text, sizeof text, "%s%s %.2f", i ? ", " : "",
                    b.byKernel[i].first.c_str(), b.byKernel[i].second * 1e3);
      os << text;
    }
    os << (b.byKernel.size() > kKernelsShown ? ", ...)" : ")");
  }
  os << "\n    communication  " << milliseconds(b.communication);
  char exposed[64];
  std::snprintf(exposed, sizeof exposed, "   (%.2f ms of it beside no compute",
                b.exposedCommunication * 1e3);
  os << exposed;
  for (size_t i = 0; i < std::min(kKernelsShown, b.exposedByKernel.size());
       ++i) {
    char text[64];
    std::snprintf(text, sizeof text, "%s%s %.2f", i ? ", " : ": ",
                  b.exposedByKernel[i].first.c_str(),
                  b.exposedByKernel[i].second * 1e3);
    os << text;
  }
  os << (b.exposedByKernel.size() > kKernelsShown ? ", ...)\n" : ")\n");
  os << "    idle           " << milliseconds(b.idle)
     << "   (launch gaps, waits for other ranks, pipeline bubble)\n";
  return os.str();
}

} // namespace

double mlt::cost::tokensPerStep(const Plan &plan) {
  return double(plan.model.globalBatch()) * double(plan.model.seqLen);
}

std::string mlt::cost::formatStepPrediction(const Plan &plan,
                                            const StepTimeline &timeline,
                                            const LaunchCosts &costs,
                                            const std::string &calibration) {
  std::ostringstream os;
  const double step = timeline.seconds();
  char head[160];
  std::snprintf(head, sizeof head,
                "predicted step: %.2f ms, %.0f tokens/s (calibration: ",
                step * 1e3, step > 0.0 ? tokensPerStep(plan) / step : 0.0);
  os << head << calibration << "; launch gap ";
  char gap[96];
  std::snprintf(gap, sizeof gap, "%.2f us, overlap slowdown %.3f",
                costs.gap * 1e6, costs.overlapSlowdown);
  os << gap << ")\n";
  // Ranks with the same lines, in order of their first rank.
  std::map<std::string, std::vector<uint32_t>> groups;
  std::vector<std::string> order;
  for (uint32_t r = 0; r < plan.ranks.size(); ++r) {
    std::string lines = rankLines(breakdown(plan, timeline, r));
    auto [it, inserted] = groups.try_emplace(lines);
    if (inserted)
      order.push_back(lines);
    it->second.push_back(plan.ranks[r].rank);
  }
  for (const std::string &lines : order) {
    const std::vector<uint32_t> &ranks = groups[lines];
    os << "  " << (ranks.size() > 1 ? "ranks " : "rank ") << rankList(ranks)
       << ":\n"
       << lines;
  }
  if (!costs.uncalibrated.empty()) {
    os << "  priced without a curve of their own (the device's median "
          "rates):";
    for (size_t i = 0; i < costs.uncalibrated.size(); ++i)
      os << (i ? ", " : " ") << costs.uncalibrated[i];
    os << "\n";
  }
  return os.str();
}
