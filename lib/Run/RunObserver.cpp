//===- RunObserver.cpp - what a run tells as it goes ----------------------===//
//
// Part of mlt. See RunObserver.h: an observer ignores what it does not
// override.
//
//===----------------------------------------------------------------------===//

#include "mlt/Run/RunObserver.h"

using namespace mlt;
using namespace mlt::run;

RunObserver::~RunObserver() = default;
void RunObserver::progress(const std::string &) {}
void RunObserver::layoutsRanked(const PlannerReport &) {}
void RunObserver::planReported(const std::string &) {}
void RunObserver::dataChanged(const std::string &) {}
void RunObserver::resumeNote(const std::string &) {}
void RunObserver::resumed(const std::string &, int64_t, const std::string &) {}
void RunObserver::started(const RunSummary &) {}
void RunObserver::predicted(double, double, const std::string &) {}
void RunObserver::profiled(const std::string &) {}
void RunObserver::traceWritten(int64_t, const std::string &) {}
void RunObserver::step(const rt::StepMetrics &, const StepProgress &,
                       int64_t) {}
void RunObserver::evaluated(const rt::EvalMetrics &) {}
void RunObserver::finished(const RunTotals &) {}
void RunObserver::checkpointSaved(const SavedCheckpoint &) {}
void RunObserver::hfSaved(const std::string &, std::optional<int64_t>,
                          const std::vector<std::string> &) {}
void RunObserver::warning(const std::string &) {}
void RunObserver::stopped(const std::string &, int64_t, int64_t,
                          const std::string &) {}
void RunObserver::stepTimeCompared(double, size_t, double) {}
void RunObserver::calibrationWritten(const CalibrationWritten &) {}
void RunObserver::aborting(int, const std::string &) {}
void RunObserver::hangReported(const rt::HangReport &, bool) {}
