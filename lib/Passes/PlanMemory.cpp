//===- PlanMemory.cpp - arena offsets of the runtime buffers --------------===//
//
// Part of mlt. Implements mlt-plan-memory: persistent buffers first, then each
// program's temporaries packed by their lifetimes, an output written in place
// of an input that dies at its instruction where the kernel allows it
// (Kernels.def's "In place", KernelInfo.h's placesInPlace).
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/MemoryPlan.h"
#include "mlt/Analysis/StepMemoryPlan.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Plan/KernelInfo.h"

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

/// A program's temporaries, their offsets in the program's region, and the
/// region's size.
struct Region {
  rtir::ProgramOp program;
  SmallVector<rtir::BufferOp> buffers;
  std::vector<uint64_t> offsets;
  uint64_t bytes = 0;
};

/// Lays out the arena of a lowered module:
///
/// 1. persistent buffers one after another, in declaration order, but
///    views, which lie in their bases (`view_offset` elements in, or at the
///    base's start for a rank's slice, which the plan export moves to each
///    rank's place);
/// 2. per program, each temporary's lifetime: the first to the last launch
///    that names it, and if a launch on a stream other than 0 names it, to
///    the first compute-stream launch that waits for a token that stream
///    signals at or after it (its join; just before it where temporaries
///    meet one side stream only),
///    else to the program's end, where the streams join; and from right
///    after the last compute-stream launch that its stream has waited for
///    (the launches between may run beside it);
/// 3. with `in-place`, for each launch, the temporaries it writes first
///    there get as candidates the temporaries it reads for the last time
///    there, where the kernel writes that output over that input alike
///    (placesInPlace, at every input position the buffer takes: mayAlias,
///    but not over a product's addend) and the two have
///    one element type and size;
/// 4. the planner (MemoryPlan.h) packs each program's temporaries into a
///    region of its own, and its checker verifies the result;
/// 5. without temporaries kept from one call of the step to another (a copy
///    per slot), the programs share one region after the persistent
///    buffers (they run one at a time); with them, the regions and the kept
///    temporaries are blocks live in sets of the step's calls (a region in
///    its program's calls, a kept temporary from the first to the last call
///    of each micro-batch that touches it), placed by StepMemoryPlan.h's
///    planner and checked. The evaluation step's calls (`@eval_step`)
///    follow the training step's on that line: it runs between steps, so
///    its temporaries take the place of the training step's activations.
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
    // Kept from a forward call to a backward call: planned across the step.
    SmallVector<rtir::BufferOp> kept;
    // Temporaries that are views of a temporary base (a per-micro-batch
    // gradient inside its flat bucket): planned as their base.
    llvm::StringMap<rtir::BufferOp> temporaryViews;
    for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>()) {
      if (buffer.getKind() == rtir::BufferKind::temporary) {
        buffer.removeOffsetAttr(); // planned below, from this module's launches
        if (buffer.getView()) {
          temporaryViews[buffer.getSymName()] = buffer;
          continue;
        }
        if (buffer.getPerSlotAttr() || buffer.getStepKept())
          kept.push_back(buffer);
        else
          temporaries[buffer.getSymName()] = buffer;
        continue;
      }
      if (buffer.getView())
        continue; // placed in its base below
      buffer.setOffsetAttr(b.getI64IntegerAttr(persistentEnd));
      persistentEnd = alignUp(persistentEnd + buffer.getExtentBytes(), align);
    }
    // A view lies in its base: `view_offset` elements in, or for a rank's
    // slice (`shard`) at the base's start, the place of coordinate 0 (the
    // plan export adds each rank's).
    auto viewStart = [](rtir::BufferOp buffer) -> uint64_t {
      const uint64_t elementBytes =
          buffer.getByteSize() / std::max<int64_t>(
                                     1, buffer.getTensorType().getNumElements());
      return buffer.getViewOffsetAttr()
                 ? uint64_t(buffer.getViewOffsetAttr().getInt()) * elementBytes
                 : 0;
    };
    // Built once: the module's own lookups scan its ops.
    SymbolTable symbols(module);
    for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>()) {
      FlatSymbolRefAttr view = buffer.getViewAttr();
      if (!view || buffer.getKind() == rtir::BufferKind::temporary)
        continue;
      auto base = symbols.lookup<rtir::BufferOp>(view.getAttr());
      if (!base || !base.getOffsetAttr() ||
          base.getKind() == rtir::BufferKind::temporary) {
        buffer.emitOpError("is a view of ")
            << view << ", which is no persistent buffer";
        return signalPassFailure();
      }
      buffer.setOffsetAttr(b.getI64IntegerAttr(
          int64_t(uint64_t(base.getOffsetAttr().getInt()) + viewStart(buffer))));
    }
    // The base each temporary view is planned as.
    llvm::StringMap<rtir::BufferOp> viewBase;
    for (auto &entry : temporaryViews) {
      auto base = temporaries.lookup(entry.second.getViewAttr().getValue());
      if (!base || !base.getBucket()) {
        entry.second.emitOpError("is a view of ")
            << entry.second.getViewAttr()
            << ", which is no temporary bucket of a program";
        return signalPassFailure();
      }
      viewBase[entry.first()] = base;
    }

    uint64_t peak = persistentEnd;
    llvm::StringMap<StringRef> owner; // temporary -> the program that uses it
    SmallVector<Region> regions;
    for (rtir::ProgramOp program : module.getOps<rtir::ProgramOp>()) {
      SmallVector<rtir::BufferOp> order;
      DenseMap<Operation *, size_t> index;
      std::vector<BufferLifetime> lifetimes;
      std::vector<LaunchOperands> launches;
      // Each use of a temporary on a stream other than 0: the buffer, the
      // launch's position and its stream.
      SmallVector<std::tuple<size_t, int64_t, int64_t>> sideStreamUses;
      // Per side stream, the latest compute-stream launch it has waited for
      // so far: what comes after that there may run beside it.
      DenseMap<int64_t, int64_t> waitedFor;
      DenseMap<size_t, int64_t> sideStreamFrom;
      // The position and stream of the launch that signals each token, and
      // each compute-stream launch's waits.
      DenseMap<int64_t, std::pair<int64_t, int64_t>> signals;
      SmallVector<std::pair<int64_t, SmallVector<int64_t>>> computeWaits;
      int64_t position = 0;
      for (auto launch : program.getBody().getOps<rtir::LaunchOp>()) {
        if (int64_t stream = launch.getStreamIndex(); stream != 0) {
          auto [floor, fresh] = waitedFor.try_emplace(stream, -1);
          for (int64_t token : launch.getWaits())
            if (auto it = signals.find(token);
                it != signals.end() && it->second.second == 0)
              floor->second = std::max(floor->second, it->second.first);
        }
        LaunchOperands &operands = launches.emplace_back();
        operands.launch = launch;
        for (auto [list, indices] :
             {std::pair(launch.getInputs(), &operands.inputs),
              std::pair(launch.getOutputs(), &operands.outputs)})
          for (Attribute ref : list) {
            StringRef name = rtir::bufferName(ref);
            if (rtir::BufferOp base = viewBase.lookup(name))
              name = base.getSymName();
            auto it = temporaries.find(name);
            if (it == temporaries.end()) {
              indices->push_back(-1);
              continue;
            }
            rtir::BufferOp buffer = it->second;
            auto [slot, inserted] = owner.try_emplace(buffer.getSymName(),
                                                      program.getSymName());
            (void)inserted;
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
            if (launch.getStreamIndex() != 0) {
              sideStreamUses.push_back(
                  {entry->second, position, launch.getStreamIndex()});
              // It may start right after the last compute-stream launch
              // its stream waited for: it lives from there.
              int64_t from = waitedFor.lookup(launch.getStreamIndex()) + 1;
              auto [it, fresh] = sideStreamFrom.try_emplace(entry->second, from);
              it->second = std::min(it->second, from);
            }
          }
        if (std::optional<int64_t> token = launch.getToken())
          signals[*token] = {position, launch.getStreamIndex()};
        if (launch.getStreamIndex() == 0 && !launch.getWaits().empty())
          computeWaits.push_back(
              {position, SmallVector<int64_t>(launch.getWaits())});
        ++position;
      }
      // A launch on another stream may run until the compute stream waits
      // for it: until the first compute-stream launch that waits for a
      // token its stream signals at or after it (its join), or else the
      // program's end, where the streams join. Every launch that may take
      // the buffer's bytes after that is ordered after the join: those of
      // the compute stream after it; those of the same stream, by the
      // stream's order; and those of another side stream, which live from
      // right after the last compute-stream launch their stream waited for
      // (sideStreamFrom), by that wait, where it was for the join or a later
      // launch. Where temporaries meet one side stream, the join itself may
      // take the bytes (it starts after the launch); where they meet more,
      // it may not: another side stream's launch that waited for the launch
      // just before the join would live from the join on.
      llvm::SmallSetVector<int64_t, 2> sideStreams;
      for (auto [buffer, at, stream] : sideStreamUses)
        sideStreams.insert(stream);
      for (auto [buffer, at, stream] : sideStreamUses) {
        int64_t until = std::max<int64_t>(position - 1, 0);
        for (auto &[waiter, waits] : computeWaits) {
          if (waiter <= at)
            continue;
          bool joins = llvm::any_of(waits, [&](int64_t token) {
            auto it = signals.find(token);
            return it != signals.end() && it->second.second == stream &&
                   it->second.first >= at;
          });
          if (joins) {
            until = sideStreams.size() == 1 ? waiter - 1 : waiter;
            break;
          }
        }
        lifetimes[buffer].lastUse = std::max(lifetimes[buffer].lastUse, until);
      }
      for (auto [buffer, from] : sideStreamFrom)
        lifetimes[buffer].firstUse = std::min(lifetimes[buffer].firstUse, from);
      if (inPlace)
        addInPlaceCandidates(launches, order, lifetimes);
      // A bucket is written through its views, element by element of
      // different kernels: it takes no other buffer's place, nor gives its.
      for (auto [i, buffer] : llvm::enumerate(order))
        if (buffer.getBucket())
          lifetimes[i].inPlaceOf.clear();
      for (auto [i, lifetime] : llvm::enumerate(lifetimes))
        llvm::erase_if(lifetime.inPlaceOf,
                       [&](size_t donor) { return order[donor].getBucket(); });
      MemoryPlan plan = planMemory(lifetimes, align);
      std::string why;
      if (!plan.verify(lifetimes, align, &why)) {
        program.emitOpError("memory plan is invalid: ") << why;
        return signalPassFailure();
      }
      regions.push_back({program, order, plan.offsets, plan.peakBytes});
    }
    for (auto &entry : temporaries)
      if (!owner.count(entry.first())) {
        entry.second.emitOpError("is declared but no launch uses it");
        return signalPassFailure();
      }
    // The programs run one at a time: without kept temporaries they share
    // one region; with them, the step's plan places each region.
    std::vector<uint64_t> regionOffsets(regions.size(), 0);
    uint64_t regionsPeak = 0;
    for (const Region &region : regions)
      regionsPeak = std::max(regionsPeak, region.bytes);
    if (!kept.empty()) {
      FailureOr<uint64_t> stepPeak =
          planAcrossStep(symbols, regions, kept, align, regionOffsets);
      if (failed(stepPeak))
        return signalPassFailure();
      regionsPeak = *stepPeak;
    }
    for (auto [region, base] : llvm::zip(regions, regionOffsets))
      for (auto [buffer, offset] : llvm::zip(region.buffers, region.offsets))
        buffer.setOffsetAttr(
            b.getI64IntegerAttr(persistentEnd + base + offset));
    for (rtir::BufferOp buffer : kept)
      buffer.setOffsetAttr(b.getI64IntegerAttr(
          persistentEnd + uint64_t(buffer.getOffsetAttr().getInt())));
    for (auto &entry : viewBase)
      temporaryViews.lookup(entry.first())
          .setOffsetAttr(b.getI64IntegerAttr(
              entry.second.getOffsetAttr().getInt() +
              int64_t(viewStart(temporaryViews.lookup(entry.first())))));
    peak = std::max(peak, persistentEnd + regionsPeak);
    module->setAttr("mlt_rt.arena_bytes", b.getI64IntegerAttr(peak));
  }

private:
  /// Step 5 with kept temporaries: the regions and the kept temporaries as
  /// blocks live in sets of the step's calls, placed by planStepMemory.
  /// Sets `regionOffsets` (parallel to `regions`) and each kept buffer's
  /// offset, relative to the end of the persistent buffers, and returns the
  /// peak of that part of the arena.
  FailureOr<uint64_t> planAcrossStep(const SymbolTable &symbols,
                                     ArrayRef<Region> regions,
                                     MutableArrayRef<rtir::BufferOp> kept,
                                     uint64_t align,
                                     std::vector<uint64_t> &regionOffsets) {
    ModuleOp module = getOperation();
    rtir::StepOp training = rtir::trainingStep(module);
    if (!training)
      return module.emitError("mlt-plan-memory: temporaries kept across "
                              "calls need the training step, mlt_rt.step @")
             << rtir::kTrainingStepName;
    // The steps on one line of calls: the training step's, then the
    // evaluation step's, which runs between two training steps (when
    // nothing of the training step's calls is live).
    SmallVector<rtir::CallOp> calls(training.getBody().getOps<rtir::CallOp>());
    const size_t evaluationBegin = calls.size();
    if (rtir::StepOp evaluation = rtir::evalStep(module))
      for (auto call : evaluation.getBody().getOps<rtir::CallOp>())
        calls.push_back(call);
    // Which kept buffers each program touches.
    DenseMap<StringAttr, size_t> keptIndex;
    for (size_t i = 0; i < kept.size(); ++i)
      keptIndex[kept[i].getSymNameAttr()] = i;
    DenseMap<StringAttr, SmallVector<size_t>> touches;
    for (rtir::ProgramOp program : module.getOps<rtir::ProgramOp>()) {
      llvm::SmallSetVector<size_t, 8> set;
      for (auto launch : program.getBody().getOps<rtir::LaunchOp>())
        for (ArrayAttr list : {launch.getInputs(), launch.getOutputs()})
          for (Attribute ref : list) {
            auto it = keptIndex.find(cast<FlatSymbolRefAttr>(ref).getAttr());
            if (it != keptIndex.end())
              set.insert(it->second);
          }
      touches[program.getSymNameAttr()] = SmallVector<size_t>(set.begin(),
                                                              set.end());
    }
    // The calls each call runs beside: a run of consecutive transfer calls
    // (programs of sends and receives alone) is one group, its transfers
    // posted together (Kernels.def), so what one of them touches is live
    // during all of them.
    std::vector<CallSpan> beside(calls.size());
    auto isTransferCall = [&](rtir::CallOp call) {
      return symbols.lookup<rtir::ProgramOp>(call.getProgramAttr().getAttr())
          .isTransferProgram();
    };
    for (size_t c = 0; c < calls.size();) {
      // (a group never spans the two steps)
      const size_t stepEnd = c < evaluationBegin ? evaluationBegin
                                                 : calls.size();
      size_t end = c + 1;
      if (isTransferCall(calls[c]))
        while (end < stepEnd && isTransferCall(calls[end]))
          ++end;
      for (size_t k = c; k < end; ++k)
        beside[k] = {int64_t(c), int64_t(end - 1)};
      c = end;
    }
    std::vector<StepBlock> blocks;
    // Regions: live in their program's calls; a program the step does not
    // call runs alone, after it.
    int64_t alone = int64_t(calls.size());
    for (const Region &region : regions) {
      StepBlock block{region.bytes, {}};
      StringRef name = rtir::ProgramOp(region.program).getSymName();
      for (auto [c, call] : llvm::enumerate(calls))
        if (call.getProgram() == name)
          block.live.push_back(beside[c]);
      if (block.live.empty())
        block.live.push_back({alone, alone}), ++alone;
      block.normalize();
      blocks.push_back(std::move(block));
    }
    // Kept buffers: a per-slot one from the first to the last call of a
    // micro-batch that touches it (with the transfers beside them), for
    // each micro-batch; a step-kept one from the first call of the step
    // that touches it to the last.
    const size_t firstKept = blocks.size();
    for (rtir::BufferOp &buffer : kept)
      blocks.push_back({buffer.getExtentBytes(), {}});
    DenseMap<std::pair<size_t, int64_t>, CallSpan> spans;
    for (auto [c, call] : llvm::enumerate(calls)) {
      IntegerAttr mb = call.getMicrobatchAttr();
      for (size_t k : touches.lookup(call.getProgramAttr().getAttr())) {
        int64_t key = -1; // the whole step
        if (!kept[k].getStepKept()) {
          if (!mb || !call.getSlotAttr())
            return call.emitOpError("touches @")
                   << kept[k].getSymName()
                   << ", which is kept per slot, but has no micro-batch or "
                      "slot";
          key = mb.getInt();
        } else if (size_t(c) >= evaluationBegin) {
          return call.emitOpError("touches @")
                 << kept[k].getSymName()
                 << ", which the training step keeps, from the evaluation "
                    "step";
        }
        auto [it, fresh] = spans.try_emplace({k, key}, beside[c]);
        it->second.last = beside[c].last;
      }
    }
    for (auto &[key, span] : spans)
      blocks[firstKept + key.first].live.push_back(span);
    for (StepBlock &block : blocks)
      block.normalize();
    StepMemoryPlan plan = planStepMemory(blocks, align);
    std::string why;
    if (!plan.verify(blocks, align, &why))
      return module.emitError("mlt-plan-memory: the step's memory plan is "
                              "invalid: ")
             << why;
    Builder b(module.getContext());
    for (size_t i = 0; i < regions.size(); ++i)
      regionOffsets[i] = plan.offsets[i];
    for (size_t i = 0; i < kept.size(); ++i)
      kept[i].setOffsetAttr(
          b.getI64IntegerAttr(int64_t(plan.offsets[firstKept + i])));
    return plan.peakBytes;
  }

private:
  /// Step 3: the in-place candidates of every temporary. Per launch, the
  /// temporaries it reads for the last time (and does not write) are found
  /// first: a multi-tensor launch has thousands of outputs and inputs, but
  /// none of the one kind among the other.
  static void addInPlaceCandidates(ArrayRef<LaunchOperands> launches,
                                   ArrayRef<rtir::BufferOp> buffers,
                                   std::vector<BufferLifetime> &lifetimes) {
    for (auto [position, operands] : llvm::enumerate(launches)) {
      rtir::LaunchOp launch = operands.launch;
      const rt::KernelSignature *kernel =
          rt::lookupKernel(launch.getKernel().str());
      if (!kernel) // the launch's verifier has named it already
        continue;
      llvm::SmallDenseSet<int64_t, 4> written(operands.outputs.begin(),
                                              operands.outputs.end());
      // Each dying input, in the order of its first read, with the input
      // positions that read it.
      SmallVector<std::pair<int64_t, SmallVector<size_t, 2>>, 4> dying;
      llvm::SmallDenseMap<int64_t, size_t, 4> dyingIndex;
      for (auto [input, read] : llvm::enumerate(operands.inputs)) {
        if (read < 0 || lifetimes[read].lastUse != int64_t(position) ||
            written.contains(read))
          continue;
        auto [it, fresh] = dyingIndex.try_emplace(read, dying.size());
        if (fresh)
          dying.push_back({read, {}});
        dying[it->second].second.push_back(input);
      }
      if (dying.empty())
        continue;
      for (auto [output, recipient] : llvm::enumerate(operands.outputs)) {
        if (recipient < 0 || lifetimes[recipient].firstUse != int64_t(position))
          continue;
        for (const auto &[read, inputs] : dying) {
          // (An output listed twice takes each donor once.)
          if (llvm::is_contained(lifetimes[recipient].inPlaceOf, size_t(read)))
            continue;
          // The kernel must allow it at every position the buffer is read.
          bool allowed = llvm::all_of(inputs, [&](size_t input) {
            return rt::placesInPlace(kernel->kernel, operands.outputs.size(),
                                     output, input);
          });
          rtir::BufferOp donor = buffers[read], to = buffers[recipient];
          RankedTensorType fromType = donor.getTensorType();
          RankedTensorType toType = to.getTensorType();
          if (allowed && fromType.getElementType() == toType.getElementType() &&
              fromType.getNumElements() == toType.getNumElements())
            lifetimes[recipient].inPlaceOf.push_back(size_t(read));
        }
      }
    }
  }
};

} // namespace
