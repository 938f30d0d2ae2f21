//===- OverlapTensorParallel.cpp - tp all-reduces under weight gradients --===//
//
// Part of mlt. Implements mlt-overlap-tp-comm (Passes.td): in the backward
// pass, the all-reduce over tp of an input gradient (the sum of the
// column-parallel products' partial dX; with sequence parallelism its
// reduce-scatter over the sequence) moves to a stream of its own, and
// the weight-gradient products before it that it does not depend on, nor
// they on it, move after it: they run while the activation gradient
// travels, as Megatron's asynchronous tensor-parallel all-reduce does.
//
//===----------------------------------------------------------------------===//

#include "LaunchOrder.h"

#include "mlt/Analysis/CollectiveMatmul.h"
#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Layout/Layout.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/PlanFormat.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/MemoryBuffer.h"

namespace mlt {
#define GEN_PASS_DEF_MLTOVERLAPTPCOMM
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;
namespace abi = mlt::rt;

namespace {

class Overlapper {
public:
  /// `costs`: the calibration that decides each collective matmul (null:
  /// every one is split).
  Overlapper(ModuleOp module, int64_t axis, int64_t axisSize,
             const cost::Calibration *costs)
      : module(module), b(module.getContext()), axis(axis),
        axisSize(axisSize), costs(costs), buffers(module) {}

  void run(rtir::ProgramOp program) {
    int64_t nextToken = firstFreeToken(program);
    for (rtir::LaunchOp gather : launchesWhere(
             program, [&](rtir::LaunchOp l) { return isRowGather(l); }))
      decompose(program, gather, nextToken);
    for (rtir::LaunchOp reduction : launchesWhere(program, [&](rtir::LaunchOp l) {
           return isInputGradientReduction(l);
         }))
      overlap(program, reduction, nextToken);
  }

private:
  /// The program's launches that `picks` chooses, all found before any is
  /// moved.
  template <typename Picks>
  static SmallVector<rtir::LaunchOp> launchesWhere(rtir::ProgramOp program,
                                                   Picks picks) {
    SmallVector<rtir::LaunchOp> chosen;
    for (auto launch : program.getBody().getOps<rtir::LaunchOp>())
      if (picks(launch))
        chosen.push_back(launch);
    return chosen;
  }

  rtir::BufferOp bufferOf(Attribute ref) { return buffers.of(ref); }
  StringRef root(StringRef name) { return buffers.root(name); }
  LaunchAccess accessOf(rtir::LaunchOp launch) {
    return buffers.accessOf(launch);
  }

  /// An out-of-place all-reduce or reduce-scatter (sequence parallelism's)
  /// over tp of a temporary on the compute stream, ordered by program
  /// order alone.
  bool isInputGradientReduction(rtir::LaunchOp launch) {
    if ((launch.getKernel() != "all_reduce_sum" &&
         launch.getKernel() != "reduce_scatter_sum") ||
        !launch.isPlain() ||
        launch.getInputs().size() != 1 || launch.getOutputs().size() != 1 ||
        launch.getInts().size() < 2 || launch.getInts()[1] != axis)
      return false;
    rtir::BufferOp in = bufferOf(launch.getInputs()[0]);
    rtir::BufferOp out = bufferOf(launch.getOutputs()[0]);
    return in && out && in != out &&
           in.getKind() == rtir::BufferKind::temporary &&
           out.getKind() == rtir::BufferKind::temporary;
  }

  /// A temporary of one copy that is no view: what a collective matmul's
  /// row blocks can be views of.
  bool isPlainTemporary(rtir::BufferOp buffer) {
    return buffer && buffer.getKind() == rtir::BufferKind::temporary &&
           !buffer.getView() && !buffer.getShardAttr() &&
           !buffer.getPerSlotAttr() && !buffer.getPerMicrobatchAttr();
  }

  /// Whether each rank's block of `buffer` starts where a buffer may (the
  /// plan's alignment): its block views are placed per rank.
  bool blocksAligned(rtir::BufferOp buffer) {
    return buffer.getByteSize() % uint64_t(axisSize) == 0 &&
           (buffer.getByteSize() / uint64_t(axisSize)) %
                   abi::kPlanBufferAlignment ==
               0;
  }

  /// An all-gather over tp of a plain temporary into another on the compute
  /// stream (sequence parallelism's, before column-parallel products).
  bool isRowGather(rtir::LaunchOp launch) {
    if (launch.getKernel() != "all_gather" || !launch.isPlain() ||
        launch.getInputs().size() != 1 || launch.getOutputs().size() != 1 ||
        launch.getInts().size() < 2 || launch.getInts()[1] != axis)
      return false;
    rtir::BufferOp in = bufferOf(launch.getInputs()[0]);
    rtir::BufferOp out = bufferOf(launch.getOutputs()[0]);
    return in != out && isPlainTemporary(in) && isPlainTemporary(out) &&
           blocksAligned(out);
  }

  /// Whether `launch` is a product (matmul, or a matmul_group that does not
  /// accumulate) of one batch whose left operands are all `gathered`
  /// untransposed, its rows, and whose results are plain temporaries: its
  /// rows split as the gathered ranks' blocks do.
  bool splitsRowsOf(rtir::LaunchOp launch, StringRef gathered) {
    StringRef kernel = launch.getKernel();
    if ((kernel != "matmul" && kernel != "matmul_group") || !launch.isPlain())
      return false;
    ArrayRef<int64_t> ints = launch.getInts();
    const bool group = kernel == "matmul_group";
    if (ints.size() < (group ? 8u : 7u) || ints[0] != 1 || ints[4] != 0 ||
        ints[1] % axisSize != 0 || (group && ints[7] != 0))
      return false;
    const size_t groups = launch.getOutputs().size();
    if (launch.getInputs().size() != 2 * groups)
      return false;
    for (size_t i = 0; i < groups; ++i) {
      if (rtir::bufferName(launch.getInputs()[i]) != gathered ||
          rtir::bufferName(launch.getInputs()[groups + i]) == gathered ||
          !isPlainTemporary(bufferOf(launch.getOutputs()[i])) ||
          !blocksAligned(bufferOf(launch.getOutputs()[i])))
        return false;
    }
    return true;
  }

  /// A view of `base` (marked a bucket): the rank's block of it over tp,
  /// or with `shift` k the block of the rank k further on the axis.
  rtir::BufferOp blockView(rtir::BufferOp base, int64_t shift) {
    std::string name = (base.getSymName() + ".tp" +
                        (shift ? "+" + std::to_string(shift) : ""))
                           .str();
    if (rtir::BufferOp made = buffers.lookup(name))
      return made;
    base.setBucketAttr(b.getUnitAttr());
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointAfter(buffers.last());
    OperationState state(base.getLoc(), rtir::BufferOp::getOperationName());
    auto &props = state.getOrAddProperties<rtir::BufferOp::Properties>();
    props.sym_name = b.getStringAttr(name);
    props.kind = rtir::BufferKindAttr::get(b.getContext(),
                                           rtir::BufferKind::temporary);
    props.type = TypeAttr::get(RankedTensorType::get(
        {base.getTensorType().getNumElements() / axisSize},
        base.getTensorType().getElementType()));
    auto view = cast<rtir::BufferOp>(b.create(state));
    view.setViewAttr(FlatSymbolRefAttr::get(base.getSymNameAttr()));
    view.setShardAttr(b.getStringAttr(axisName(ParallelAxis::Tensor)));
    if (shift)
      view.setShardShiftAttr(b.getI64IntegerAttr(shift));
    buffers.add(view);
    return view;
  }

  static FlatSymbolRefAttr ref(rtir::BufferOp buffer) {
    return FlatSymbolRefAttr::get(buffer.getSymNameAttr());
  }

  /// The collective matmul (XLA's, Megatron's all-gather overlap) of a
  /// gather and the products of its rows right after it: the gather moves
  /// to stream 3; each product runs first on the rank's own block (its
  /// input, already here) into the rows of its result that block gives,
  /// then, once the gather is done, on each other rank's block into its
  /// rows. The own block's products run while the gather travels.
  void decompose(rtir::ProgramOp program, rtir::LaunchOp gather,
                 int64_t &nextToken) {
    SmallVector<rtir::LaunchOp> launches(
        program.getBody().getOps<rtir::LaunchOp>());
    const size_t at =
        size_t(llvm::find(launches, gather) - launches.begin());
    const StringRef local = rtir::bufferName(gather.getInputs()[0]);
    const StringRef gathered = rtir::bufferName(gather.getOutputs()[0]);
    SmallVector<rtir::LaunchOp> products;
    for (size_t i = at + 1;
         i < launches.size() && splitsRowsOf(launches[i], gathered); ++i)
      products.push_back(launches[i]);
    if (products.empty() || nextToken + 2 > int64_t(abi::kPlanMaxTokens) ||
        !splitPays(gathered, products))
      return;
    // The gather waits for its input's producer (the nearest writer).
    rtir::LaunchOp producer;
    for (size_t i = at; !producer && i-- > 0;)
      if (accessOf(launches[i]).writes.contains(root(local)))
        producer = launches[i];
    if (producer && producer.getStreamIndex() != 0)
      return;
    if (producer && !producer.getToken())
      producer.setTokenAttr(b.getI64IntegerAttr(nextToken++));
    const LaunchAccess moved = accessOf(gather);
    gather.setStreamAttr(b.getI64IntegerAttr(abi::kTensorParallelStream));
    if (producer)
      gather.setWaits({int64_t(*producer.getToken())});
    const int64_t token = nextToken++;
    gather.setTokenAttr(b.getI64IntegerAttr(token));

    rtir::BufferOp gatheredBuffer = buffers.lookup(gathered);
    Operation *after = gather;
    auto emit = [&](rtir::LaunchOp product, int64_t shift, bool wait) {
      const size_t groups = product.getOutputs().size();
      SmallVector<Attribute> inputs(product.getInputs().begin(),
                                    product.getInputs().end());
      SmallVector<Attribute> outputs;
      // The rank's own block is the gather's input; another's lies in the
      // gathered buffer.
      for (size_t i = 0; i < groups; ++i) {
        inputs[i] = shift == 0 ? gather.getInputs()[0]
                               : Attribute(ref(blockView(gatheredBuffer, shift)));
        outputs.push_back(
            ref(blockView(bufferOf(product.getOutputs()[i]), shift)));
      }
      SmallVector<int64_t> ints(product.getInts());
      ints[1] /= axisSize;
      b.setInsertionPointAfter(after);
      auto part = rtir::LaunchOp::create(b, product.getLoc(),
                                         product.getKernel(), inputs, outputs,
                                         ints, product.getFloats());
      if (wait)
        part.setWaits({token});
      after = part;
    };
    for (rtir::LaunchOp product : products)
      emit(product, 0, false);
    bool first = true;
    for (int64_t shift = 1; shift < axisSize; ++shift)
      for (rtir::LaunchOp product : products) {
        emit(product, shift, first);
        first = false;
      }
    for (rtir::LaunchOp product : products)
      product.erase();
    // (Stream 0's first launch to touch it is the first other block's
    // product, which waits already.)
    joinLater(after, moved, token, {0});
  }

  /// Whether the collective matmul of the gather into `gathered` and
  /// `products` is predicted faster than the gather and the products whole
  /// (CollectiveMatmul.h); true without a calibration.
  bool splitPays(StringRef gathered, ArrayRef<rtir::LaunchOp> products) {
    if (!costs)
      return true;
    cost::GatheredProducts priced;
    priced.groupSize = axisSize;
    priced.gatheredBytes = double(buffers.lookup(gathered).getByteSize());
    for (rtir::LaunchOp product : products) {
      const abi::KernelSignature *signature =
          abi::lookupKernel(std::string_view(product.getKernel()));
      abi::InstructionDesc inst;
      inst.kernel = signature->kernel;
      inst.inputs.assign(product.getInputs().size(), 0);
      inst.outputs.assign(product.getOutputs().size(), 0);
      inst.ints.assign(product.getInts().begin(), product.getInts().end());
      inst.floats.assign(product.getFloats().begin(),
                         product.getFloats().end());
      priced.products.push_back(
          {product.getKernel().str(), abi::kernelFlops(inst)});
    }
    return cost::priceCollectiveMatmul(*costs, priced).pays();
  }

  /// Every launch after `after` of another stream than the tp stream (and
  /// `skip`) that touches what a moved collective (`moved`, signalling
  /// `token`) does, or runs a collective over tp (one at a time on the
  /// axis's communicator), waits for it: the first such of each stream.
  void joinLater(Operation *after, const LaunchAccess &moved, int64_t token,
                 std::initializer_list<int64_t> skip) {
    mlt::joinLater(after, moved, token, abi::kTensorParallelStream, skip,
                   buffers, [&](rtir::LaunchOp launch) {
                     return isCollectiveOverAxis(launch, axis);
                   });
  }

  /// A weight-gradient product (bf16 or FP8): a product writing gradients
  /// only, ordered by program order alone.
  bool isWeightGradient(rtir::LaunchOp launch) {
    StringRef kernel = launch.getKernel();
    if ((kernel != "matmul" && kernel != "matmul_accumulate" &&
         kernel != "matmul_group" && kernel != "matmul_fp8") ||
        !launch.isPlain())
      return false;
    for (Attribute ref : launch.getOutputs())
      if (!isGradient(bufferOf(ref)))
        return false;
    return true;
  }

  /// A gradient: a gradient buffer, or with ZeRO-2 a micro-batch's, a view
  /// of a flat temporary bucket of them (mlt-partition-optimizer's).
  bool isGradient(rtir::BufferOp buffer) {
    if (!buffer)
      return false;
    if (buffer.getKind() == rtir::BufferKind::gradient)
      return true;
    if (buffer.getKind() != rtir::BufferKind::temporary || !buffer.getView())
      return false;
    rtir::BufferOp base = buffers.lookup(*buffer.getView());
    return base && base.getBucket();
  }

  void overlap(rtir::ProgramOp program, rtir::LaunchOp reduction,
               int64_t &nextToken) {
    SmallVector<rtir::LaunchOp> launches(
        program.getBody().getOps<rtir::LaunchOp>());
    const size_t at = size_t(llvm::find(launches, reduction) - launches.begin());
    const LaunchAccess reduced = accessOf(reduction);
    // The weight gradients since the previous collective over tp that
    // nothing up to the reduction (those not moved) depends on, nor they
    // on it; nearest first. On the way, the input's producer (the nearest
    // launch that writes it), whose token the reduction waits for.
    const StringRef input = *reduced.reads.begin();
    rtir::LaunchOp producer;
    SmallVector<rtir::LaunchOp> moved;
    SmallVector<LaunchAccess> kept{reduced};
    size_t unwalked = 0; // the launches before where the walk stopped
    for (size_t i = at; i-- > 0;) {
      rtir::LaunchOp launch = launches[i];
      const LaunchAccess access = accessOf(launch);
      if (!producer && access.writes.contains(input))
        producer = launch;
      if (isCollectiveOverAxis(launch, axis) || launch.getStreamIndex() != 0 ||
          !launch.getWaits().empty()) {
        unwalked = i;
        break;
      }
      if (isWeightGradient(launch) &&
          llvm::none_of(kept, [&](const LaunchAccess &later) {
            return conflict(access, later);
          })) {
        moved.push_back(launch);
        continue;
      }
      kept.push_back(access);
    }
    if (moved.empty())
      return;
    // (A producer before where the walk stopped.)
    for (size_t i = unwalked; !producer && i-- > 0;)
      if (accessOf(launches[i]).writes.contains(input))
        producer = launches[i];
    if (!producer || producer.getStreamIndex() != 0 ||
        nextToken + 2 > int64_t(abi::kPlanMaxTokens))
      return;
    OpBuilder b(module.getContext());
    if (!producer.getToken())
      producer.setTokenAttr(b.getI64IntegerAttr(nextToken++));
    reduction.setStreamAttr(b.getI64IntegerAttr(abi::kTensorParallelStream));
    reduction.setWaits({int64_t(*producer.getToken())});
    const int64_t token = nextToken++;
    reduction.setTokenAttr(b.getI64IntegerAttr(token));
    // The products right after it, in their order.
    Operation *after = reduction;
    for (rtir::LaunchOp launch : llvm::reverse(moved)) {
      launch->moveAfter(after);
      after = launch;
    }
    joinLater(after, reduced, token, {});
  }

  ModuleOp module;
  OpBuilder b;
  int64_t axis, axisSize;
  const cost::Calibration *costs;
  ModuleBuffers buffers;
};

struct OverlapTpCommPass
    : public mlt::impl::MLTOverlapTpCommBase<OverlapTpCommPass> {
  using MLTOverlapTpCommBase::MLTOverlapTpCommBase;
  explicit OverlapTpCommPass(std::shared_ptr<const cost::Calibration> given)
      : costs(std::move(given)) {}

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto mesh = module->getAttrOfType<MeshAttr>(MLTDialect::getMeshAttrName());
    const int64_t axis =
        mesh ? mesh.axisIndex(axisName(ParallelAxis::Tensor)) : -1;
    if (axis < 0 || mesh.getSizes()[axis] < 2)
      return;
    if (!costs && !calibration.empty() && failed(readCalibration(module)))
      return signalPassFailure();
    Overlapper overlapper(module, axis, mesh.getSizes()[axis], costs.get());
    for (rtir::ProgramOp program : module.getOps<rtir::ProgramOp>())
      overlapper.run(program);
  }

private:
  /// The `calibration` option's file, parsed into `costs`.
  LogicalResult readCalibration(ModuleOp module) {
    auto fail = [&](const Twine &why) {
      return module.emitError("mlt-overlap-tp-comm: calibration '")
             << calibration << "': " << why;
    };
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
        llvm::MemoryBuffer::getFile(calibration, /*IsText=*/true);
    if (!file)
      return fail(file.getError().message());
    StatusOr<cost::Calibration> parsed =
        cost::Calibration::parse((*file)->getBuffer().str());
    if (!parsed)
      return fail(parsed.status().message());
    costs = std::make_shared<const cost::Calibration>(std::move(*parsed));
    return success();
  }

  std::shared_ptr<const cost::Calibration> costs;
};

} // namespace

std::unique_ptr<Pass>
mlt::createMLTOverlapTpComm(std::shared_ptr<const cost::Calibration> costs) {
  return std::make_unique<OverlapTpCommPass>(std::move(costs));
}
