//===- PlanMemory.cpp - arena offsets of the runtime buffers --------------===//
//
// Part of mlt. Implements mlt-plan-memory: persistent buffers first, then each
// program's temporaries packed by their lifetimes.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/MemoryPlan.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"

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
      persistentEnd = alignUp(persistentEnd + buffer.getByteSize(), align);
    }

    uint64_t peak = persistentEnd;
    llvm::StringMap<StringRef> owner; // temporary -> the program that uses it
    for (rtir::ProgramOp program : module.getOps<rtir::ProgramOp>()) {
      SmallVector<rtir::BufferOp> order;
      DenseMap<Operation *, size_t> index;
      std::vector<BufferLifetime> lifetimes;
      int64_t position = 0;
      for (auto launch : program.getBody().getOps<rtir::LaunchOp>()) {
        for (ArrayAttr list : {launch.getInputs(), launch.getOutputs()})
          for (Attribute ref : list) {
            auto it = temporaries.find(cast<FlatSymbolRefAttr>(ref).getValue());
            if (it == temporaries.end())
              continue;
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
          }
        ++position;
      }
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
};

} // namespace
