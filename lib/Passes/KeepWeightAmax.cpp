//===- KeepWeightAmax.cpp - an FP8 weight's amax once a step --------------===//
//
// Part of mlt. Implements mlt-keep-weight-amax (Passes.td): the `amax` of a
// parameter copy that the step's first FP8 body computes is kept for the
// step (`step_kept`), and the bodies called after it in the same step read
// it instead of computing it again. The weights do not change between a
// step's micro-batches, so the values are the same bits.
//
//===----------------------------------------------------------------------===//

#include "BufferIds.h"

#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"

#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

#include <limits>

namespace mlt {
#define GEN_PASS_DEF_MLTKEEPWEIGHTAMAX
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;

namespace {

/// A plain `amax` launch of a parameter copy: the copy's buffer id, or -1.
int64_t weightOf(rtir::LaunchOp launch, BufferIds &buffers) {
  if (launch.getKernel() != "amax" || !launch.isPlain() ||
      launch.getInputs().size() != 1 || launch.getOutputs().size() != 1)
    return -1;
  rtir::BufferOp source = buffers.bufferOf(launch.getInputs()[0]);
  if (!source || source.getKind() != rtir::BufferKind::parameter_copy)
    return -1;
  return buffers.idOf(launch.getInputs()[0]);
}

/// The bases every launch of `program` writes.
llvm::DenseSet<int64_t> writtenBy(rtir::ProgramOp program,
                                  BufferIds &buffers) {
  llvm::DenseSet<int64_t> written;
  for (auto launch : program.getBody().getOps<rtir::LaunchOp>())
    for (Attribute ref : launch.getOutputs())
      written.insert(buffers.idOf(ref));
  return written;
}

class MLTKeepWeightAmaxPass
    : public mlt::impl::MLTKeepWeightAmaxBase<MLTKeepWeightAmaxPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    rtir::StepOp step = rtir::trainingStep(module);
    if (!step)
      return markAllAnalysesPreserved();
    SymbolTable symbols(module);
    BufferIds buffers(module);
    SmallVector<rtir::ProgramOp> calls;
    for (auto call : step.getBody().getOps<rtir::CallOp>())
      calls.push_back(
          symbols.lookup<rtir::ProgramOp>(call.getProgramAttr().getAttr()));
    llvm::DenseSet<Operation *> evaluated;
    if (rtir::StepOp evaluation = rtir::evalStep(module))
      for (auto call : evaluation.getBody().getOps<rtir::CallOp>())
        evaluated.insert(
            symbols.lookup<rtir::ProgramOp>(call.getProgramAttr().getAttr()));

    // The producer: the program of the step's first call that computes a
    // weight's amax, called once in the step and never by the evaluation.
    auto computesWeightAmax = [&](rtir::ProgramOp program) {
      for (auto launch : program.getBody().getOps<rtir::LaunchOp>())
        if (weightOf(launch, buffers) >= 0)
          return true;
      return false;
    };
    size_t first = calls.size();
    for (size_t c = 0; c < calls.size() && first == calls.size(); ++c)
      if (calls[c] && computesWeightAmax(calls[c]))
        first = c;
    if (first == calls.size())
      return markAllAnalysesPreserved();
    rtir::ProgramOp producer = calls[first];
    if (evaluated.contains(producer.getOperation()) ||
        llvm::count(calls, producer) != 1)
      return markAllAnalysesPreserved();

    // The producer's first amax of each weight, kept where no later launch
    // of the producer writes the weight.
    llvm::DenseMap<int64_t, Attribute> kept;
    llvm::DenseMap<int64_t, size_t> keptAt;
    SmallVector<rtir::LaunchOp> producerLaunches(
        producer.getBody().getOps<rtir::LaunchOp>());
    for (auto [i, launch] : llvm::enumerate(producerLaunches)) {
      const int64_t weight = weightOf(launch, buffers);
      if (weight >= 0 && kept.try_emplace(weight, launch.getOutputs()[0]).second)
        keptAt[weight] = i;
    }
    for (auto [i, launch] : llvm::enumerate(producerLaunches))
      for (Attribute ref : launch.getOutputs()) {
        auto at = keptAt.find(buffers.idOf(ref));
        if (at != keptAt.end() && i > at->second)
          kept.erase(at->first);
      }

    // The readers: programs called only after the producer in the step
    // (and never by the evaluation); a weight written by a call between
    // the producer's and a reader's is not kept for that reader.
    llvm::DenseMap<Operation *, size_t> lastCall;
    llvm::DenseMap<Operation *, size_t> firstCall;
    for (auto [c, program] : llvm::enumerate(calls)) {
      if (!program)
        continue;
      firstCall.try_emplace(program.getOperation(), c);
      lastCall[program.getOperation()] = c;
    }
    // What each called program writes, once a program.
    llvm::DenseMap<Operation *, llvm::DenseSet<int64_t>> writes;
    for (rtir::ProgramOp program : calls)
      if (program && !writes.count(program.getOperation()))
        writes[program.getOperation()] = writtenBy(program, buffers);
    // The first call after the producer's that writes each kept weight.
    llvm::DenseMap<int64_t, size_t> rewritten;
    for (size_t c = first + 1; c < calls.size(); ++c)
      if (calls[c])
        for (auto &[weight, ref] : kept)
          if (writes[calls[c].getOperation()].contains(weight))
            rewritten.try_emplace(weight, c);

    llvm::DenseSet<Attribute> used;
    SmallVector<Attribute> dropped;
    for (auto [op, firstC] : firstCall) {
      rtir::ProgramOp reader(op);
      if (op == producer.getOperation() || firstC <= first ||
          evaluated.contains(op))
        continue;
      const size_t last = lastCall.lookup(op);
      // A weight this reader writes itself is read from its own amax.
      const llvm::DenseSet<int64_t> &own = writes[op];
      // Each amax this reader need not launch, and the kept one to read.
      llvm::DenseMap<Attribute, Attribute> keptFor;
      SmallVector<rtir::LaunchOp> erase;
      for (auto launch : reader.getBody().getOps<rtir::LaunchOp>()) {
        const int64_t weight = weightOf(launch, buffers);
        auto it = kept.find(weight);
        if (weight < 0 || it == kept.end() || own.contains(weight))
          continue;
        auto again = rewritten.find(weight);
        if (again != rewritten.end() && again->second <= last)
          continue;
        keptFor[launch.getOutputs()[0]] = it->second;
        used.insert(it->second);
        erase.push_back(launch);
      }
      if (erase.empty())
        continue;
      for (auto launch : reader.getBody().getOps<rtir::LaunchOp>()) {
        SmallVector<Attribute> inputs(launch.getInputs().begin(),
                                      launch.getInputs().end());
        bool replaced = false;
        for (Attribute &input : inputs)
          if (Attribute keptValue = keptFor.lookup(input)) {
            input = keptValue;
            replaced = true;
          }
        if (replaced)
          launch.setInputsAttr(ArrayAttr::get(&getContext(), inputs));
      }
      for (rtir::LaunchOp launch : erase) {
        dropped.push_back(launch.getOutputs()[0]);
        launch.erase();
      }
    }
    if (dropped.empty())
      return markAllAnalysesPreserved();
    // The dropped launches' results, unless something else reads them (one
    // walk over the module's launches).
    llvm::DenseSet<Attribute> referenced;
    module.walk([&](rtir::LaunchOp launch) {
      for (ArrayAttr list : {launch.getInputs(), launch.getOutputs()})
        referenced.insert(list.begin(), list.end());
    });
    for (Attribute ref : dropped)
      if (!referenced.contains(ref))
        if (rtir::BufferOp buffer = buffers.bufferOf(ref))
          buffer.erase();
    for (Attribute ref : used)
      buffers.bufferOf(ref).setStepKept(true);
  }
};

} // namespace
