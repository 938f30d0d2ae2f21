//===- Layout.cpp - a training step's parallel layout, as one value -------===//
//
// Part of mlt. See Layout.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Layout/Layout.h"


using namespace mlt;

const char *mlt::precisionName(Precision precision) {
  return precision == Precision::BF16 ? "bf16" : "fp32";
}

bool Fp8Recipe::operator==(const Fp8Recipe &other) const {
  return products == other.products &&
         fpropAccumulation == other.fpropAccumulation &&
         format == other.format && bf16Parameters == other.bf16Parameters &&
         bf16FirstLayers == other.bf16FirstLayers &&
         bf16LastLayers == other.bf16LastLayers &&
         weightCache == other.weightCache;
}

ScheduleKind Layout::scheduleKind() const {
  return schedule.value_or(defaultSchedule(vp));
}

int64_t Layout::ranks() const { return pp * dp * cp * tp; }

const char *mlt::contextExchangeName(ContextExchange exchange) {
  switch (exchange) {
  case ContextExchange::AllToAll:
    return "a2a";
  case ContextExchange::Ring:
    return "ring";
  case ContextExchange::AllGather:
    break;
  }
  return "allgather";
}

std::vector<ParallelAxis> mlt::zeroAxes(int64_t dp, int64_t cp) {
  std::vector<ParallelAxis> axes;
  if (dp >= 2)
    axes.push_back(ParallelAxis::Data);
  if (cp >= 2)
    axes.push_back(ParallelAxis::Context);
  return axes;
}

bool Layout::operator==(const Layout &other) const {
  return tp == other.tp && dp == other.dp && pp == other.pp &&
         cp == other.cp &&
         sequenceParallel == other.sequenceParallel &&
         cpComm == other.cpComm && vp == other.vp &&
         ppLayers == other.ppLayers && ppGroupSize == other.ppGroupSize &&
         schedule == other.schedule && microbatches == other.microbatches &&
         zero == other.zero && recompute == other.recompute &&
         recomputeLayers == other.recomputeLayers &&
         dtype == other.dtype && fp8 == other.fp8 &&
         fp8Recipe == other.fp8Recipe &&
         gradReduceDtype == other.gradReduceDtype &&
         overlapGradReduce == other.overlapGradReduce &&
         gradBucketBytes == other.gradBucketBytes &&
         overlapParamGather == other.overlapParamGather &&
         overlapTpComm == other.overlapTpComm;
}

const std::vector<ParallelAxisInfo> &mlt::parallelAxes() {
  static const std::vector<ParallelAxisInfo> axes = {
      {ParallelAxis::Pipeline, axisName(ParallelAxis::Pipeline),
       "the decoder layers, into consecutive pipeline stages", &Layout::pp},
      {ParallelAxis::Data, axisName(ParallelAxis::Data),
       "each micro-batch's sequences; with ZeRO, the optimizer state and "
       "gradients",
       &Layout::dp},
      {ParallelAxis::Context, axisName(ParallelAxis::Context),
       "each sequence, load balanced for causal attention (2 * cp chunks, "
       "rank i holding chunks i and 2 * cp - 1 - i)",
       &Layout::cp},
      {ParallelAxis::Tensor, axisName(ParallelAxis::Tensor),
       "attention heads, MLP features and the vocabulary; with sequence "
       "parallelism, the residual stream's sequence",
       &Layout::tp},
  };
  return axes;
}
