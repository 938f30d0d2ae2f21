//===- OverlapContextParallel.cpp - cp exchanges under compute ------------===//
//
// Part of mlt. Implements mlt-overlap-cp-comm (Passes.td): context
// parallelism's exchanges around attention (the ring's permutes, the
// all-to-alls, the gathers of keys and values and reduce-scatters of their
// gradients) move to a stream of their own, so that, for the ring, the next
// key/value block travels while the compute stream attends to the one in
// hand, as Megatron-LM's p2p exchange and ring attention overlap them, and
// each exchange runs beside the launches that need nothing of it.
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
    SmallVector<rtir::LaunchOp> exchanges;
    for (auto launch : program.getBody().getOps<rtir::LaunchOp>())
      if (isExchange(launch))
        exchanges.push_back(launch);
    // Each exchange may give tokens to the launches it follows (the compute
    // stream's, and one of each side stream's) and takes one.
    if (nextToken + int64_t(exchanges.size()) * (abi::kPlanMaxStreams + 1) >
        int64_t(abi::kPlanMaxTokens))
      return;
    // All on their stream first, so that none is taken for a launch of the
    // compute stream that another must join.
    for (rtir::LaunchOp exchange : exchanges)
      exchange.setStreamAttr(b.getI64IntegerAttr(abi::kContextParallelStream));
    for (rtir::LaunchOp exchange : exchanges)
      move(exchange, nextToken);
    for (rtir::LaunchOp exchange : exchanges)
      hoistIndependent(exchange);
  }

private:
  /// Whether `launch` is one of attention's exchanges over the axis on the
  /// compute stream: the ring's exchanges, the all-to-alls, and the gathers
  /// of keys and values and reduce-scatters of their gradients (between
  /// temporaries: not the optimizer's, which have streams of their own).
  bool isExchange(rtir::LaunchOp launch) {
    const StringRef kernel = launch.getKernel();
    if ((kernel != "collective_permute" && kernel != "all_to_all" &&
         kernel != "all_gather" && kernel != "reduce_scatter_sum") ||
        !launch.isPlain() || !isOverAxis(launch))
      return false;
    for (ArrayAttr refs : {launch.getInputs(), launch.getOutputs()})
      for (Attribute ref : refs) {
        rtir::BufferOp buffer = buffers.of(ref);
        if (!buffer || buffer.getKind() != rtir::BufferKind::temporary)
          return false;
      }
    return true;
  }

  bool isOverAxis(rtir::LaunchOp launch) {
    return launch.getInts().size() >= 2 && launch.getInts()[1] == axis;
  }

  bool isCollectiveOverAxis(rtir::LaunchOp launch) {
    const rt::KernelSignature *signature =
        rt::lookupKernel(std::string_view(launch.getKernel()));
    return signature && rt::isCollectiveKernel(signature->kernel) &&
           isOverAxis(launch);
  }

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
      if ((writesInput || isCollectiveOverAxis(launch)) &&
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
                return isCollectiveOverAxis(launch);
              });
  }

  /// How far (in launches) hoistIndependent looks on either side of a
  /// permute's first waiter.
  static constexpr int kWindow = 64;

  /// The first compute-stream launch after `permute` that waits for its
  /// token, or null.
  static rtir::LaunchOp waiterOf(rtir::LaunchOp permute) {
    const int64_t token = *permute.getToken();
    for (Operation *op = permute->getNextNode(); op; op = op->getNextNode())
      if (auto launch = dyn_cast<rtir::LaunchOp>(op);
          launch && launch.getStreamIndex() == 0 &&
          llvm::is_contained(launch.getWaits(), token))
        return launch;
    return {};
  }

  /// The compute-stream launches after the permute's first waiter that need
  /// nothing of it, nor of the launches they would pass (the waiter, those
  /// left in place, the side streams' launches around it, which may still
  /// be running), move before the waiter in their order: they run while
  /// the block travels (a layer's last exchanges of key/value gradients are
  /// waited for at once otherwise, by the rotation of dk, while the query
  /// gradient's products need none of them). Plain launches only (no token,
  /// no waits), and no collective, whose order the group shares.
  void hoistIndependent(rtir::LaunchOp permute) {
    rtir::LaunchOp waiter = waiterOf(permute);
    if (!waiter)
      return;
    SmallVector<LaunchAccess> barriers{buffers.accessOf(waiter),
                                       buffers.accessOf(permute)};
    int seen = 0;
    for (Operation *op = waiter->getPrevNode(); op && seen < kWindow;
         op = op->getPrevNode())
      if (auto launch = dyn_cast<rtir::LaunchOp>(op)) {
        ++seen;
        if (launch.getStreamIndex() != 0)
          barriers.push_back(buffers.accessOf(launch));
      }
    SmallVector<rtir::LaunchOp> hoisted;
    seen = 0;
    for (Operation *op = waiter->getNextNode(); op && seen < kWindow;
         op = op->getNextNode()) {
      auto launch = dyn_cast<rtir::LaunchOp>(op);
      if (!launch)
        continue;
      ++seen;
      const LaunchAccess access = buffers.accessOf(launch);
      const bool independent =
          launch.isPlain() && !isCollective(launch) &&
          llvm::none_of(barriers, [&](const LaunchAccess &barrier) {
            return conflict(access, barrier);
          });
      if (independent)
        hoisted.push_back(launch);
      else
        barriers.push_back(access);
    }
    for (rtir::LaunchOp launch : hoisted)
      launch->moveBefore(waiter);
  }

  static bool isCollective(rtir::LaunchOp launch) {
    const rt::KernelSignature *signature =
        rt::lookupKernel(std::string_view(launch.getKernel()));
    return !signature || rt::isCollectiveKernel(signature->kernel) ||
           rt::isTransferKernel(signature->kernel);
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
