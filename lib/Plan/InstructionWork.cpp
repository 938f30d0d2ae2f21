//===- InstructionWork.cpp - the work a launch must do --------------------===//
//
// Part of mlt. See InstructionWork.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/InstructionWork.h"
#include "mlt/Plan/KernelInfo.h"

using namespace mlt::rt;

InstructionWork mlt::rt::instructionWork(const RankPlan &rank,
                                         const InstructionDesc &inst) {
  InstructionWork work;
  for (uint32_t index : inst.inputs)
    work.bytes += double(rank.buffers[index].bytes);
  for (uint32_t index : inst.outputs)
    work.bytes += double(rank.buffers[index].bytes);
  // The FLOPs of the kernels that arithmetic bounds, as their rules count
  // them (KernelInfo.h); the others' rate is their bytes'.
  work.flops = kernelFlops(inst);
  return work;
}
