//===- LRSchedule.cpp - the learning-rate schedule ------------------------===//
//
// Part of mlt. Linear warmup, then constant or cosine decay to min_lr at the
// last step (see Training.h for the formula). The learning rate's schedule
// only: not a pipeline schedule (the order of micro-batches over stages).
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/train/Training.h"

#include <cmath>

using namespace mlt;
using namespace mlt::rt;

double mlt::rt::learningRate(const LRSchedule &schedule, int64_t step,
                             int64_t totalSteps) {
  if (schedule.warmup > 0 && step <= schedule.warmup)
    return schedule.lr * double(step) / double(schedule.warmup);
  if (schedule.kind == LRScheduleKind::Constant)
    return schedule.lr;
  const int64_t decaySteps =
      (schedule.decaySteps ? schedule.decaySteps : totalSteps) -
      schedule.warmup;
  if (decaySteps <= 0)
    return schedule.lr;
  const double progress =
      std::min(1.0, double(step - schedule.warmup) / double(decaySteps));
  const double pi = 3.14159265358979323846;
  return schedule.minLR +
         0.5 * (schedule.lr - schedule.minLR) * (1.0 + std::cos(pi * progress));
}
