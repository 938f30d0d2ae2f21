//===- FuseAmax.cpp - FP8 scaling statistics from the producing kernels --===//
//
// Part of mlt. Implements mlt-fuse-amax (Passes.td): an `amax` launch of a
// tensor that an RMSNorm or SwiGLU kernel has just written becomes an output
// of that kernel (Kernels.def's fused amax outputs), and the separate pass
// over the tensor goes.
//
//===----------------------------------------------------------------------===//

#include "BufferIds.h"

#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Plan/KernelInfo.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallVector.h"

namespace mlt {
#define GEN_PASS_DEF_MLTFUSEAMAX
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;

namespace {

/// How many leading outputs of a launch of `kernel` with `outputs` outputs
/// take a fused amax: the k with fusedAmaxOutputs(kernel, outputs + k) == k
/// (KernelInfo.h's count once fused; the kernel writes all of them or none);
/// 0 when it takes none.
size_t amaxTakers(rt::Kernel kernel, size_t outputs) {
  for (size_t k = 1; k <= outputs; ++k)
    if (rt::fusedAmaxOutputs(kernel, outputs + k) == k)
      return k;
  return 0;
}

class MLTFuseAmaxPass
    : public mlt::impl::MLTFuseAmaxBase<MLTFuseAmaxPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    BufferIds ids(module);
    bool changed = false;
    for (auto program : module.getOps<rtir::ProgramOp>())
      changed |= fuse(program, ids);
    if (!changed)
      markAllAnalysesPreserved();
  }

private:
  /// Fuses the program's amax launches into their producers; whether any
  /// was.
  bool fuse(rtir::ProgramOp program, BufferIds &ids) {
    SmallVector<Operation *> ops;
    for (Operation &op : program.getBody().getOps())
      ops.push_back(&op);
    // The last launch (by position) that wrote each base buffer; cleared
    // by anything that is not a launch.
    llvm::DenseMap<int64_t, size_t> lastWriter;
    // Per producer (position): the amax launch (position) of each of its
    // outputs that takes one.
    llvm::MapVector<size_t, llvm::DenseMap<size_t, size_t>> found;
    for (auto [i, op] : llvm::enumerate(ops)) {
      auto launch = dyn_cast<rtir::LaunchOp>(op);
      if (!launch) {
        lastWriter.clear();
        continue;
      }
      if (std::optional<std::pair<size_t, size_t>> at =
              producerOf(launch, ops, i, lastWriter, ids))
        found[at->first].try_emplace(at->second, i);
      for (Attribute output : launch.getOutputs())
        lastWriter[ids.idOf(output)] = i;
    }
    SmallVector<Operation *> erased;
    for (auto &[at, amaxes] : found) {
      auto producer = cast<rtir::LaunchOp>(ops[at]);
      const size_t takers =
          amaxTakers(*kernelOf(producer), producer.getOutputs().size());
      if (amaxes.size() != takers)
        continue; // the kernel writes every amax or none
      SmallVector<Attribute> outputs(producer.getOutputs().getValue());
      for (size_t j = 0; j < takers; ++j) {
        auto amax = cast<rtir::LaunchOp>(ops[amaxes.lookup(j)]);
        outputs.push_back(amax.getOutputs()[0]);
        erased.push_back(amax);
      }
      producer.setOutputsAttr(ArrayAttr::get(producer.getContext(), outputs));
    }
    for (Operation *op : erased)
      op->erase();
    return !erased.empty();
  }

  /// The kernel `launch` runs, if the table has it.
  static std::optional<rt::Kernel> kernelOf(rtir::LaunchOp launch) {
    if (const rt::KernelSignature *signature =
            rt::lookupKernel(launch.getKernel().str()))
      return signature->kernel;
    return std::nullopt;
  }

  /// If `launch` (at position `i`) is an amax whose tensor the kernel that
  /// last wrote it could have measured: that kernel's position and the
  /// tensor's output position in it. Both plain of their order (the amax
  /// waits for nothing and nothing waits for it; one stream), the tensor
  /// written whole as the producer's output, and the amax's own output
  /// untouched in between (it is written earlier once fused).
  std::optional<std::pair<size_t, size_t>>
  producerOf(rtir::LaunchOp launch, ArrayRef<Operation *> ops, size_t i,
             const llvm::DenseMap<int64_t, size_t> &lastWriter,
             BufferIds &ids) {
    if (launch.getKernel() != "amax" || launch.getInputs().size() != 1 ||
        launch.getOutputs().size() != 1 || !launch.getWaits().empty() ||
        launch.getToken())
      return std::nullopt;
    Attribute tensor = launch.getInputs()[0];
    auto writer = lastWriter.find(ids.idOf(tensor));
    if (writer == lastWriter.end())
      return std::nullopt;
    auto producer = cast<rtir::LaunchOp>(ops[writer->second]);
    std::optional<rt::Kernel> kernel = kernelOf(producer);
    if (!kernel ||
        producer.getStreamIndex() != launch.getStreamIndex())
      return std::nullopt;
    const size_t takers = amaxTakers(*kernel, producer.getOutputs().size());
    std::optional<size_t> output;
    for (size_t j = 0; j < takers; ++j)
      if (producer.getOutputs()[j] == tensor)
        output = j;
    if (!output)
      return std::nullopt;
    // The same tensor: not a view's part of it (the amax counts the elements
    // it reads).
    rtir::BufferOp buffer = ids.bufferOf(tensor);
    if (!buffer || launch.getInts().empty() ||
        launch.getInts()[0] != buffer.getTensorType().getNumElements())
      return std::nullopt;
    const int64_t amax = ids.idOf(launch.getOutputs()[0]);
    for (size_t k = writer->second + 1; k < i; ++k) {
      auto between = cast<rtir::LaunchOp>(ops[k]);
      for (ArrayAttr operands : {between.getInputs(), between.getOutputs()})
        for (Attribute operand : operands)
          if (ids.idOf(operand) == amax)
            return std::nullopt;
    }
    return std::pair(writer->second, *output);
  }
};

} // namespace
