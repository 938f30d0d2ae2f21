//===- PlanMemory.cpp - arena offsets of the runtime buffers --------------===//
//
// Part of mlt. Implements mlt-plan-memory: persistent buffers first, then each
// program's temporaries packed by their lifetimes, an output written in place
// of an input that dies at its instruction where the kernel allows it
// (Kernels.def's "In place", KernelInfo.h's mayAlias).
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/MemoryPlan.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Runtime/KernelInfo.h"

#include "llvm/ADT/SetVector.h"

namespace mlt {
#define GEN_PASS_DEF_MLTPLANMEMORY
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;

namespace {

uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

/// A launch's operands as indices into the program's planned temporaries
/// (-1: a persistent buffer).
struct LaunchOperands {
  rtir::LaunchOp launch;
  SmallVector<int64_t> inputs, outputs;
};

/// Lays out the arena of a lowered module:
///
/// 1. persistent buffers one after another, in declaration order;
/// 2. per program, each temporary's lifetime: the first to the last launch
///    that names it, or to the program's end if a launch on a stream other
///    than 0 names it (it may run until the streams join there);
/// 3. with `in-place`, for each launch, the temporaries it writes first
///    there get as candidates the temporaries it reads for the last time
///    there, where the kernel may write that output over that input
///    (mayAlias, at every input position the buffer takes) and the two have
///    one element type and size;
/// 4. the planner (MemoryPlan.h) packs the temporaries after the persistent
///    buffers, its checker verifies the result, and the programs share that
///    region (they run one at a time).
class MLTPlanMemoryPass
    : public mlt::impl::MLTPlanMemoryBase<MLTPlanMemoryPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (alignment <= 0 || (alignment & (alignment - 1)) != 0) {
      module.emitError("mlt-plan-memory: alignment must be a power of two, got ")
          << static_cast<int64_t>(alignment);
      return signalPassFailure();
    }
    uint64_t align = alignment;
    Builder b(&getContext());

    uint64_t persistentEnd = 0;
    llvm::StringMap<rtir::BufferOp> temporaries;
    for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>()) {
      if (buffer.getKind() == rtir::BufferKind::temporary) {
        buffer.removeOffsetAttr(); // planned below, from this module's launches
        temporaries[buffer.getSymName()] = buffer;
        continue;
      }
      buffer.setOffsetAttr(b.getI64IntegerAttr(persistentEnd));
      persistentEnd = alignUp(persistentEnd + buffer.getExtentBytes(), align);
    }

    uint64_t peak = persistentEnd;
    llvm::StringMap<StringRef> owner; // temporary -> the program that uses it
    for (rtir::ProgramOp program : module.getOps<rtir::ProgramOp>()) {
      SmallVector<rtir::BufferOp> order;
      DenseMap<Operation *, size_t> index;
      std::vector<BufferLifetime> lifetimes;
      std::vector<LaunchOperands> launches;
      llvm::SmallSetVector<size_t, 8> sideStreamBuffers;
      int64_t position = 0;
      for (auto launch : program.getBody().getOps<rtir::LaunchOp>()) {
        LaunchOperands &operands = launches.emplace_back();
        operands.launch = launch;
        for (auto [list, indices] :
             {std::pair(launch.getInputs(), &operands.inputs),
              std::pair(launch.getOutputs(), &operands.outputs)})
          for (Attribute ref : list) {
            auto it = temporaries.find(rtir::bufferName(ref));
            if (it == temporaries.end()) {
              indices->push_back(-1);
              continue;
            }
            rtir::BufferOp buffer = it->second;
            auto [slot, inserted] = owner.try_emplace(buffer.getSymName(),
                                                      program.getSymName());
            if (slot->second != program.getSymName()) {
              buffer.emitOpError("is a temporary of both @")
                  << slot->second << " and @" << program.getSymName();
              return signalPassFailure();
            }
            auto [entry, fresh] = index.try_emplace(buffer, lifetimes.size());
            if (fresh) {
              order.push_back(buffer);
              lifetimes.push_back({buffer.getByteSize(), position, position});
            }
            lifetimes[entry->second].lastUse = position;
            indices->push_back(int64_t(entry->second));
            if (launch.getStreamIndex() != 0)
              sideStreamBuffers.insert(entry->second);
          }
        ++position;
      }
      // A launch on another stream may run until the program's end, where
      // the streams join: what it touches lives until then.
      for (size_t buffer : sideStreamBuffers)
        lifetimes[buffer].lastUse = std::max<int64_t>(position - 1, 0);
      if (inPlace)
        addInPlaceCandidates(launches, order, lifetimes);
      MemoryPlan plan = planMemory(lifetimes, align);
      std::string why;
      if (!plan.verify(lifetimes, align, &why)) {
        program.emitOpError("memory plan is invalid: ") << why;
        return signalPassFailure();
      }
      for (auto [buffer, offset] : llvm::zip(order, plan.offsets))
        buffer.setOffsetAttr(b.getI64IntegerAttr(persistentEnd + offset));
      peak = std::max(peak, persistentEnd + plan.peakBytes);
    }
    for (auto &entry : temporaries)
      if (!owner.count(entry.first())) {
        entry.second.emitOpError("is declared but no launch uses it");
        return signalPassFailure();
      }
    module->setAttr("mlt_rt.arena_bytes", b.getI64IntegerAttr(peak));
  }

private:
  /// Step 3: the in-place candidates of every temporary.
  static void addInPlaceCandidates(ArrayRef<LaunchOperands> launches,
                                   ArrayRef<rtir::BufferOp> buffers,
                                   std::vector<BufferLifetime> &lifetimes) {
    for (auto [position, operands] : llvm::enumerate(launches)) {
      rtir::LaunchOp launch = operands.launch;
      const rt::KernelSignature *kernel =
          rt::lookupKernel(launch.getKernel().str());
      if (!kernel) // the launch's verifier has named it already
        continue;
      for (auto [output, written] : llvm::enumerate(operands.outputs)) {
        if (written < 0 || lifetimes[written].firstUse != int64_t(position))
          continue;
        for (int64_t read : operands.inputs) {
          if (read < 0 || read == written ||
              lifetimes[read].lastUse != int64_t(position) ||
              llvm::is_contained(operands.outputs, read) ||
              llvm::is_contained(lifetimes[written].inPlaceOf, size_t(read)))
            continue;
          // The kernel must allow it at every position the buffer is read.
          bool allowed = true;
          for (auto [input, other] : llvm::enumerate(operands.inputs))
            if (other == read)
              allowed &= rt::mayAlias(kernel->kernel, output, input);
          rtir::BufferOp donor = buffers[read], recipient = buffers[written];
          RankedTensorType from = donor.getTensorType();
          RankedTensorType to = recipient.getTensorType();
          if (allowed && from.getElementType() == to.getElementType() &&
              from.getNumElements() == to.getNumElements())
            lifetimes[written].inPlaceOf.push_back(size_t(read));
        }
      }
    }
  }
};

} // namespace
