//===- KeepWeightFp8.cpp - an FP8 weight quantized once a step ------------===//
//
// Part of mlt. Implements mlt-keep-weight-fp8 (Passes.td): the `amax` of a
// parameter copy that the step's first FP8 body computes, and the FP8
// copies that its `quantize_fp8` of the weight writes (the transposed one,
// or both), are kept for the step (`step_kept`), and the bodies called
// after it in the same step read them instead of computing them again. The
// weights do not change between a step's micro-batches, so the values are
// the same bits.
//
//===----------------------------------------------------------------------===//

#include "BufferIds.h"

#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"

#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

namespace mlt {
#define GEN_PASS_DEF_MLTKEEPWEIGHTFP8
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;

namespace {

/// An `amax` of a parameter copy, or a `quantize_fp8` of one (its inputs
/// the copy and an amax), on the compute stream: the copy (its buffer's
/// symbol; under ZeRO a view of a flat bucket, which shares its base with
/// the bucket's other weights), or null. A launch to be removed must be
/// plain as well (`removable`): a wait or a token orders what follows it.
/// The producer's may wait (for its bucket's gather, as ZeRO's overlapped
/// gathers have each layer's first launch do): the call ends with the
/// streams joined, before any reader's.
Attribute weightOf(rtir::LaunchOp launch, BufferIds &buffers,
                   bool removable) {
  const bool amax = launch.getKernel() == "amax";
  if ((!amax && launch.getKernel() != "quantize_fp8") ||
      launch.getStreamIndex() != 0 || (removable && !launch.isPlain()) ||
      launch.getInputs().size() != (amax ? 1u : 2u) ||
      launch.getOutputs().size() < (amax ? 1u : 2u))
    return {};
  rtir::BufferOp source = buffers.bufferOf(launch.getInputs()[0]);
  if (!source || source.getKind() != rtir::BufferKind::parameter_copy)
    return {};
  return launch.getInputs()[0];
}

/// How many launches of `program` write each base.
llvm::DenseMap<int64_t, unsigned> writesOf(rtir::ProgramOp program,
                                           BufferIds &buffers) {
  llvm::DenseMap<int64_t, unsigned> written;
  for (auto launch : program.getBody().getOps<rtir::LaunchOp>())
    for (Attribute ref : launch.getOutputs())
      ++written[buffers.idOf(ref)];
  return written;
}

/// What the producer keeps of one weight: its amax, and the quantization
/// that reads it (null where that is not kept).
struct KeptWeight {
  Attribute amax;
  rtir::LaunchOp quantize;
};

/// quantize_fp8's layouts (Kernels.def): the forward copy, the transposed
/// one, or both (results: scale_inv, copy[, transposed copy]).
enum Layouts : int64_t { kForward = 0, kTransposed = 1, kBoth = 2 };

/// Whether `launch` quantizes as `kept` does: the same sizes and layouts,
/// and results of the same types.
bool quantizesAlike(rtir::LaunchOp launch, rtir::LaunchOp kept,
                    BufferIds &buffers) {
  if (launch.getInts() != kept.getInts() ||
      launch.getOutputs().size() != kept.getOutputs().size())
    return false;
  for (auto [mine, theirs] : llvm::zip(launch.getOutputs(), kept.getOutputs()))
    if (buffers.bufferOf(mine).getType() != buffers.bufferOf(theirs).getType())
      return false;
  return true;
}

class MLTKeepWeightFp8Pass
    : public mlt::impl::MLTKeepWeightFp8Base<MLTKeepWeightFp8Pass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (copies != "transposed" && copies != "both") {
      module.emitError("mlt-keep-weight-fp8: copies must be transposed or "
                       "both, got '")
          << copies << "'";
      return signalPassFailure();
    }
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
        if (launch.getKernel() == "amax" &&
            weightOf(launch, buffers, /*removable=*/false))
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

    // What each called program writes, once a program.
    llvm::DenseMap<Operation *, llvm::DenseMap<int64_t, unsigned>> writes;
    for (rtir::ProgramOp program : calls)
      if (program && !writes.count(program.getOperation()))
        writes[program.getOperation()] = writesOf(program, buffers);
    // Whether a launch of the step's programs other than `launch` writes a
    // result of it: a kept value is written by its producing launch alone.
    auto writtenElsewhere = [&](rtir::LaunchOp launch) {
      for (Attribute ref : launch.getOutputs()) {
        const int64_t id = buffers.idOf(ref);
        unsigned count = 0;
        for (auto &[program, written] : writes)
          count += written.lookup(id);
        if (count != 1)
          return true;
      }
      return false;
    };

    // The producer's first amax of each weight, and the first quantization
    // that reads it: kept where no later launch of the producer writes the
    // weight (or anything that shares its base: a bucket's gather), and
    // nothing else writes what they hold.
    llvm::DenseMap<Attribute, KeptWeight> kept;
    llvm::DenseMap<Attribute, size_t> keptAt;
    SmallVector<rtir::LaunchOp> producerLaunches(
        producer.getBody().getOps<rtir::LaunchOp>());
    for (auto [i, launch] : llvm::enumerate(producerLaunches)) {
      const Attribute weight = weightOf(launch, buffers, /*removable=*/false);
      if (!weight)
        continue;
      if (launch.getKernel() == "amax") {
        if (!writtenElsewhere(launch) &&
            kept.try_emplace(weight, KeptWeight{launch.getOutputs()[0], {}})
                .second)
          keptAt[weight] = i;
        continue;
      }
      auto it = kept.find(weight);
      if (it != kept.end() && !it->second.quantize &&
          launch.getInputs()[1] == it->second.amax &&
          !writtenElsewhere(launch))
        it->second.quantize = launch;
    }
    llvm::DenseMap<int64_t, SmallVector<Attribute>> keptByBase;
    for (auto &[weight, at] : keptAt)
      keptByBase[buffers.idOf(weight)].push_back(weight);
    for (auto [i, launch] : llvm::enumerate(producerLaunches))
      for (Attribute ref : launch.getOutputs())
        for (Attribute weight : keptByBase.lookup(buffers.idOf(ref)))
          if (i > keptAt.lookup(weight))
            kept.erase(weight);

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
    // The first call after the producer's that writes each kept weight (or
    // its base).
    llvm::DenseMap<Attribute, size_t> rewritten;
    for (size_t c = first + 1; c < calls.size(); ++c)
      if (calls[c])
        for (auto &[weight, value] : kept)
          if (writes[calls[c].getOperation()].count(buffers.idOf(weight)))
            rewritten.try_emplace(weight, c);

    llvm::DenseSet<Attribute> used;
    SmallVector<Attribute> dropped;
    for (auto [op, firstC] : firstCall) {
      rtir::ProgramOp reader(op);
      if (op == producer.getOperation() || firstC <= first ||
          evaluated.contains(op))
        continue;
      const size_t last = lastCall.lookup(op);
      // A weight this reader writes itself is scaled from its own values.
      const llvm::DenseMap<int64_t, unsigned> &own = writes[op];
      // Each result this reader need not compute, and the kept one to read.
      llvm::DenseMap<Attribute, Attribute> keptFor;
      SmallVector<rtir::LaunchOp> erase, narrow;
      for (auto launch : reader.getBody().getOps<rtir::LaunchOp>()) {
        const Attribute weight = weightOf(launch, buffers, /*removable=*/true);
        if (!weight)
          continue;
        auto it = kept.find(weight);
        if (it == kept.end() || own.count(buffers.idOf(weight)))
          continue;
        auto again = rewritten.find(weight);
        if ((again != rewritten.end() && again->second <= last) ||
            writtenElsewhere(launch))
          continue;
        KeptWeight value = it->second;
        if (launch.getKernel() == "amax") {
          keptFor[launch.getOutputs()[0]] = value.amax;
          used.insert(value.amax);
          erase.push_back(launch);
          continue;
        }
        // A quantization of the weight with its kept amax (read already,
        // or this reader's, now the kept one) is the kept quantization;
        // keeping the transposed copy alone, one of both layouts quantizes
        // the forward copy alone.
        Attribute scale = launch.getInputs()[1];
        if (!value.quantize ||
            (scale != value.amax && keptFor.lookup(scale) != value.amax) ||
            !quantizesAlike(launch, value.quantize, buffers))
          continue;
        ArrayRef<Attribute> mine = launch.getOutputs().getValue();
        ArrayRef<Attribute> theirs = value.quantize.getOutputs().getValue();
        const int64_t layouts = launch.getInts()[2];
        if (copies == "transposed" && layouts == kBoth) {
          keptFor[mine[2]] = theirs[2];
          used.insert(theirs[2]);
          used.insert(value.amax);
          narrow.push_back(launch);
          continue;
        }
        if (copies == "transposed" && layouts != kTransposed)
          continue;
        for (auto [m, t] : llvm::zip(mine, theirs)) {
          keptFor[m] = t;
          used.insert(t);
        }
        used.insert(value.amax);
        erase.push_back(launch);
      }
      if (erase.empty() && narrow.empty())
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
        dropped.append(launch.getOutputs().begin(), launch.getOutputs().end());
        launch.erase();
      }
      for (rtir::LaunchOp launch : narrow) {
        ArrayRef<Attribute> outputs = launch.getOutputs().getValue();
        dropped.push_back(outputs[2]);
        launch.setOutputsAttr(
            ArrayAttr::get(&getContext(), outputs.take_front(2)));
        SmallVector<int64_t> ints(launch.getInts());
        ints[2] = kForward;
        launch.setInts(ints);
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
