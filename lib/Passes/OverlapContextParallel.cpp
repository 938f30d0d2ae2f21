//===- OverlapContextParallel.cpp - ring permutes under block attentions --===//
//
// Part of mlt. Implements mlt-overlap-cp-comm (Passes.td): context
// parallelism's ring permutes (mlt-ring-attention's collective_permute
// launches) move to a stream of their own, so that the next key/value block
// travels while the compute stream attends to the one in hand, as
// Megatron-LM's p2p exchange and ring attention overlap them.
//
//===----------------------------------------------------------------------===//

#include "LaunchOrder.h"

#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Layout/Layout.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/PlanFormat.h"

#include "llvm/ADT/DenseSet.h"

namespace mlt {
#define GEN_PASS_DEF_MLTOVERLAPCPCOMM
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;
namespace abi = mlt::rt;

namespace {

class RingOverlapper {
public:
  RingOverlapper(ModuleOp module, int64_t axis)
      : b(module.getContext()), axis(axis), buffers(module) {}

  void run(rtir::ProgramOp program) {
    int64_t nextToken = firstFreeToken(program);
    SmallVector<rtir::LaunchOp> permutes;
    for (auto launch : program.getBody().getOps<rtir::LaunchOp>())
      if (launch.getKernel() == "collective_permute" && launch.isPlain() &&
          isCollectiveOverAxis(launch, axis))
        permutes.push_back(launch);
    // Each permute may give tokens to the launches it follows (the compute
    // stream's, and one of each side stream's) and takes one.
    if (nextToken + int64_t(permutes.size()) * (abi::kPlanMaxStreams + 1) >
        int64_t(abi::kPlanMaxTokens))
      return;
    // All on their stream first, so that none is taken for a launch of the
    // compute stream that another must join.
    for (rtir::LaunchOp permute : permutes)
      permute.setStreamAttr(b.getI64IntegerAttr(abi::kContextParallelStream));
    for (rtir::LaunchOp permute : permutes)
      move(permute, nextToken);
  }

private:
  int64_t tokenOf(rtir::LaunchOp launch, int64_t &nextToken) {
    if (!launch.getToken())
      launch.setTokenAttr(b.getI64IntegerAttr(nextToken++));
    return *launch.getToken();
  }

  /// What `permute` follows, from the latest launch before it backwards:
  /// the compute stream's last launch (and so, by its order, its input's
  /// producer there and the block attention before), its input's producer
  /// on another side stream, and each other side stream's last collective
  /// over the axis.
  void move(rtir::LaunchOp permute, int64_t &nextToken) {
    const LaunchAccess access = buffers.accessOf(permute);
    SmallVector<int64_t> waits;
    bool compute = false, producer = false;
    llvm::DenseSet<int64_t> sideStreams;
    for (Operation *op = permute->getPrevNode(); op; op = op->getPrevNode()) {
      auto launch = dyn_cast<rtir::LaunchOp>(op);
      if (!launch)
        continue;
      const int64_t stream = launch.getStreamIndex();
      if (stream == int64_t(abi::kContextParallelStream))
        continue; // ordered by the stream
      const bool writesInput = !producer && conflict(access, buffers.accessOf(launch));
      if (stream == 0) {
        if (!compute)
          waits.push_back(tokenOf(launch, nextToken));
        compute = true;
        producer |= writesInput;
        continue;
      }
      if ((writesInput || isCollectiveOverAxis(launch, axis)) &&
          sideStreams.insert(stream).second)
        waits.push_back(tokenOf(launch, nextToken));
      producer |= writesInput;
    }
    llvm::sort(waits);
    waits.erase(std::unique(waits.begin(), waits.end()), waits.end());
    permute.setWaits(waits);
    const int64_t token = nextToken++;
    permute.setTokenAttr(b.getI64IntegerAttr(token));
    joinLater(permute, access, token, abi::kContextParallelStream, {}, buffers,
              [&](rtir::LaunchOp launch) {
                return isCollectiveOverAxis(launch, axis);
              });
  }

  OpBuilder b;
  int64_t axis;
  ModuleBuffers buffers;
};

struct OverlapCpCommPass
    : public mlt::impl::MLTOverlapCpCommBase<OverlapCpCommPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto mesh = module->getAttrOfType<MeshAttr>(MLTDialect::getMeshAttrName());
    const int64_t axis =
        mesh ? mesh.axisIndex(axisName(ParallelAxis::Context)) : -1;
    if (axis < 0 || mesh.getSizes()[axis] < 2)
      return;
    RingOverlapper overlapper(module, axis);
    for (rtir::ProgramOp program : module.getOps<rtir::ProgramOp>())
      overlapper.run(program);
  }
};

} // namespace
