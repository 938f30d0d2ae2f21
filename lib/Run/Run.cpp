//===- Run.cpp - a run of mlt-run, from its options to its end ------------===//
//
// Part of mlt. See Run.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Run/Run.h"

#include "Distributed.h"
#include "mlt/Analysis/StepReport.h"
#include "mlt/Plan/MemoryReport.h"
#include "mlt/Run/AutoLayout.h"
#include "mlt/Run/PlanSource.h"
#include "mlt/Run/Prediction.h"
#include "mlt/Run/RunChecks.h"
#include "mlt/Run/TrainingRun.h"
#include "mlt/Support/AtomicFile.h"

#ifdef MLT_HAVE_CUDA
#include "mlt/Runtime/mpi/Distributed.h"
#endif

#include <optional>
#include <sstream>
#include <string>

using namespace mlt;
using namespace mlt::run;
using namespace mlt::rt;

Status mlt::run::execute(RunOptions o, const Launch &launch,
                         RunObserver &observer) {
  const bool severalProcesses = launch.worldSize() > 1;
  MLT_RETURN_IF_ERROR(validate(o));
  MLT_RETURN_IF_ERROR(checkPaths(o));
  const bool trains = o.trains();
  if (severalProcesses && !trains)
    return errorf("mpirun started ", launch.worldSize(), " processes, but ",
                  o.printPlan       ? "--print-plan"
                  : o.printSchedule ? "--print-schedule"
                  : o.reportMemory  ? "--report-memory"
                  : o.report        ? "--report"
                                    : "--emit-plan",
                  " does not train: run it without mpirun");
  if (severalProcesses && o.device != "cuda")
    return errorf("mpirun started ", launch.worldSize(),
                  " processes, but --device ", o.device,
                  " runs every rank of a plan as a thread of one "
                  "process: run it without mpirun, or train on GPUs with "
                  "--device cuda (one process per GPU)");
  if (trains && !o.steps)
    return errorf("missing --steps N (the number of optimizer steps)");

  if (severalProcesses && !o.layoutSearch.empty())
    return errorf("--layout auto plans in one process: run it without "
                  "mpirun and --emit-plan FILE, then start the plan with "
                  "mpirun");
  std::string bytes;
  StatusOr<Plan> plan = o.layoutSearch.empty()
                            ? obtainPlan(o, bytes)
                            : planAutomatically(o, bytes, observer);
  if (!plan)
    return plan.takeStatus();
  MLT_RETURN_IF_ERROR(checkAgainstPlan(o, *plan));

  if (!trains) {
    if (!o.emitPlan.empty())
      MLT_RETURN_IF_ERROR(writeFileAtomically(o.emitPlan, bytes));
    // --report: the prediction needs a calibration, found before anything
    // is printed.
    std::optional<ChosenCalibration> calibration;
    if (o.report) {
      StatusOr<ChosenCalibration> chosen =
          requireCalibration("--report", o.calibration, o.device);
      if (!chosen)
        return chosen.takeStatus();
      calibration = std::move(*chosen);
    }
    if (o.printPlan || o.printSchedule || o.reportMemory || o.report) {
      std::ostringstream text;
      if (o.printPlan)
        printPlan(*plan, text);
      if (o.printSchedule)
        printSchedule(*plan, text);
      if (o.reportMemory || o.report)
        printMemoryReport(*plan, text, kernelScratch(*plan, o.device));
      if (calibration) {
        StatusOr<Prediction> prediction =
            predictStep(*plan, calibration->calibration);
        if (!prediction)
          return prediction.takeStatus();
        text << cost::formatStepPrediction(*plan, prediction->timeline,
                                           prediction->costs,
                                           calibration->source);
      }
      observer.planReported(text.str());
    }
    return Status::ok();
  }
  // The plan against the launcher, then the devices: how to start a plan
  // says more than a missing GPU.
  MLT_RETURN_IF_ERROR(checkWorld(o, *plan, launch));
  MLT_RETURN_IF_ERROR(checkDevice(o));
  if (!severalProcesses)
    return train(o, *plan, observer);
#ifdef MLT_HAVE_CUDA
  StatusOr<int> device = localDevice(*launch.session);
  if (!device)
    return device.takeStatus();
  Distributed dist{{*launch.session, *device, nullptr}, observer};
  return train(o, *plan, observer, &dist);
#else
  return errorf("this mlt-run has no CUDA backend");
#endif
}
