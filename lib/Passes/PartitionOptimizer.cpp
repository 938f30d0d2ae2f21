//===- PartitionOptimizer.cpp - ZeRO over the parameters' replicas -------===//
//
// Part of mlt. Implements mlt-partition-optimizer (Passes.td): gradients and
// parameters laid out in flat buckets (FlatBuckets.h), each rank of the
// replicas (dp x cp, those of size 2 or more: replicasAxes) keeping the
// AdamW state of its slice of every bucket (ZeRO-1), and with ZeRO-2 the
// gradients of its slice only, each micro-batch's reduce-scattered as its
// body ends; the optimizer step rebuilt over the slices.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/FlatBuckets.h"
#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Plan/PlanFormat.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

#include <map>
#include <tuple>

namespace mlt {
#define GEN_PASS_DEF_MLTPARTITIONOPTIMIZER
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;
namespace abi = mlt::rt;

namespace {

/// One axis ZeRO partitions over: its index in the mesh, name and size.
struct ReplicaAxis {
  int64_t index, size;
  llvm::StringRef name;
};

/// The axes ZeRO partitions over (mlt::zeroAxes: dp then cp, those of size
/// 2 or more), major first; empty where there is none.
SmallVector<ReplicaAxis, 2> replicasAxes(MeshAttr mesh) {
  auto sizeOf = [&](ParallelAxis axis) -> int64_t {
    const int64_t index = mesh ? mesh.axisIndex(axisName(axis)) : -1;
    return index >= 0 ? mesh.getSizes()[index] : 1;
  };
  SmallVector<ReplicaAxis, 2> axes;
  for (ParallelAxis axis :
       zeroAxes(sizeOf(ParallelAxis::Data), sizeOf(ParallelAxis::Context)))
    axes.push_back({mesh.axisIndex(axisName(axis)), sizeOf(axis),
                    axisName(axis)});
  return axes;
}

/// One parameter as the optimizer step updates it: its adamw launch's
/// operands.
struct Parameter {
  rtir::BufferOp grad, param, expAvg, expAvgSq, copy; // copy: bf16, or null
  int64_t elements = 0;
  bool decay = false;
  /// The mesh axes the parameter is split over (sorted).
  SmallVector<StringRef> axes;
  /// ZeRO-2 with gradients reduced in bf16: the body computes this
  /// gradient in bf16 (its only writer a matrix product, which rounds its
  /// f32 sums once).
  bool halfGradient = false;
};

/// The buffers of one flat bucket.
struct Bucket {
  const FlatBucket *layout = nullptr;
  bool decay = false;
  SmallVector<StringRef> axes;
  rtir::BufferOp gradBucket, gradShard;
  /// ZeRO-2: a micro-batch's reduce-scattered slice, before it is added
  /// into gradShard (or, in bf16, widened into it).
  rtir::BufferOp gradSlice;
  /// The gradient bucket's and slice's element type: f32, or bf16 when its
  /// gradients are reduced in bf16.
  Type gradType;
  /// The parameters the forward pass reads (f32, or the bf16 copies) and
  /// the rank's slice of them; the f32 master slice (the same buffer as
  /// readShard without copies).
  rtir::BufferOp readBucket, readShard, master;
  rtir::BufferOp expAvg, expAvgSq;
};

class Partitioner {
public:
  Partitioner(ModuleOp module, int64_t stage, int64_t bucketBytes,
              bool reduceInBF16)
      : module(module), b(module.getContext()), stage(stage),
        bucketBytes(bucketBytes), reduceInBF16(reduceInBF16) {}

  LogicalResult run() {
    auto mesh = module->getAttrOfType<MeshAttr>(MLTDialect::getMeshAttrName());
    replicas = replicasAxes(mesh);
    if (replicas.empty())
      return module.emitError("mlt-partition-optimizer: zero=")
             << stage << " partitions the optimizer over the ranks that "
             << "hold the same parameters, but the module has no mesh axis '"
             << axisName(ParallelAxis::Data) << "' or '"
             << axisName(ParallelAxis::Context) << "' of size 2 or more";
    for (const ReplicaAxis &axis : replicas)
      ranks *= axis.size;
    optimizer = module.lookupSymbol<rtir::ProgramOp>(abi::kOptimizerStepProgram);
    if (!optimizer)
      return module.emitError("mlt-partition-optimizer: the module has no @")
             << abi::kOptimizerStepProgram;
    for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>()) {
      buffers[buffer.getSymName()] = buffer;
      lastBuffer = buffer;
      if (buffer.getView() || buffer.getShardAttr())
        return buffer.emitOpError(
            "is a view or a slice already: the optimizer is partitioned");
    }
    if (failed(readOptimizerStep()) || failed(planBuckets()))
      return failure();
    createBuffers();
    rebuildOptimizerStep();
    if (failed(rebuildRefresh()))
      return failure();
    if (stage == 2 && failed(reduceEveryMicroBatch()))
      return failure();
    return eraseReplaced();
  }

private:
  rtir::BufferOp bufferOf(Attribute ref) {
    return buffers.lookup(rtir::bufferName(ref));
  }

  bool isReplicaAxis(int64_t index) const {
    return llvm::any_of(replicas,
                        [&](const ReplicaAxis &a) { return a.index == index; });
  }

  /// The `shard` of a slice over the first `n` replica axes: their names
  /// joined by '*', major first.
  std::string shardOf(size_t n) const {
    std::string names;
    for (const ReplicaAxis &axis : ArrayRef(replicas).take_front(n))
      names += (names.empty() ? "" : "*") + axis.name.str();
    return names;
  }

  /// Over several replica axes: the rank's slice of `bucket` over the
  /// first `n` of them (n < their count), a view of it where the next
  /// level's reduce-scatter writes and all-gather reads, made once.
  rtir::BufferOp partialSlice(rtir::BufferOp bucket, size_t n) {
    std::string name = (bucket.getSymName() + "." + shardOf(n)).str();
    if (rtir::BufferOp made = buffers.lookup(name))
      return made;
    return createSlice(name, bucket.getKind(),
                       bucket.getTensorType().getElementType(), bucket,
                       /*view=*/true, /*owns=*/false, n);
  }

  /// `bucket` reduce-scattered into `slice` (the rank's, over every
  /// replica axis): over each axis in turn, major first, each level into
  /// the rank's slice over the axes so far (in place, a view of `bucket`),
  /// the last into `slice`.
  void reduceScatter(Location loc, rtir::BufferOp bucket,
                     rtir::BufferOp slice) {
    rtir::BufferOp from = bucket;
    for (size_t level = 0; level < replicas.size(); ++level) {
      rtir::BufferOp to = level + 1 == replicas.size()
                              ? slice
                              : partialSlice(bucket, level + 1);
      rtir::LaunchOp::create(b, loc, "reduce_scatter_sum", {ref(from)},
                             {ref(to)},
                             {to.getTensorType().getNumElements(),
                              replicas[level].index});
      from = to;
    }
  }

  /// The rank's `slice` all-gathered back into `bucket`: over each replica
  /// axis in turn, minor first (reduceScatter's levels in reverse).
  void allGather(Location loc, rtir::BufferOp slice, rtir::BufferOp bucket) {
    rtir::BufferOp from = slice;
    for (size_t level = replicas.size(); level-- > 0;) {
      rtir::BufferOp to = level == 0 ? bucket : partialSlice(bucket, level);
      rtir::LaunchOp::create(b, loc, "all_gather", {ref(from)}, {ref(to)},
                             {from.getTensorType().getNumElements(),
                              replicas[level].index});
      from = to;
    }
  }

  /// Reads the per-parameter optimizer step: its adamw launches (one per
  /// parameter), its data-parallel gradient all-reduces (dropped), its
  /// other gradient all-reduces (kept), and the hyper-parameter and norm
  /// buffers the rebuilt step uses.
  LogicalResult readOptimizerStep() {
    for (auto launch : optimizer.getBody().getOps<rtir::LaunchOp>()) {
      StringRef kernel = launch.getKernel();
      if (kernel == "adamw") {
        if (launch.getInputs().size() != 8 || launch.getOutputs().size() < 3)
          return launch.emitOpError("is an adamw launch of unexpected arity");
        Parameter p;
        p.grad = bufferOf(launch.getInputs()[0]);
        p.param = bufferOf(launch.getOutputs()[0]);
        p.expAvg = bufferOf(launch.getOutputs()[1]);
        p.expAvgSq = bufferOf(launch.getOutputs()[2]);
        if (launch.getOutputs().size() > 3)
          p.copy = bufferOf(launch.getOutputs()[3]);
        p.elements = launch.getInts()[0];
        p.decay = launch.getInts()[1] != 0;
        if (!p.grad || p.grad.getKind() != rtir::BufferKind::gradient ||
            !p.grad.getTensorType().getElementType().isF32() ||
            p.grad.getTensorType().getNumElements() != p.elements)
          return launch.emitOpError(
              "updates from no f32 gradient buffer of its size");
        if (auto attr = ShardingAttr::ofSingleResult(
                p.param->getAttr(MLTDialect::getShardingAttrName())))
          for (unsigned d = 0; d < attr.getRank(); ++d)
            for (StringAttr axis : attr.getAxes(d))
              p.axes.push_back(axis.getValue());
        llvm::sort(p.axes);
        for (const ReplicaAxis &axis : replicas)
          if (llvm::is_contained(p.axes, axis.name))
            return launch.emitOpError("updates a parameter split over '")
                   << axis.name << "' already";
        hyper.assign(launch.getInputs().begin() + 1, launch.getInputs().end());
        parameters.push_back(std::move(p));
        continue;
      }
      if (kernel == "all_reduce_sum" &&
          rtir::bufferName(launch.getInputs()[0]) ==
              rtir::bufferName(launch.getOutputs()[0])) {
        rtir::BufferOp buffer = bufferOf(launch.getInputs()[0]);
        if (buffer && buffer.getKind() == rtir::BufferKind::gradient) {
          if (!isReplicaAxis(launch.getInts()[1]))
            kept.push_back(launch);
          continue;
        }
      }
      if (kernel == "global_norm") {
        gradNorm = launch.getOutputs()[0];
        continue;
      }
      if (kernel == "clip_coefficient") {
        maxNorm = launch.getInputs()[1];
        continue;
      }
      // The per-parameter gradient norm, rebuilt over the slices.
      if (kernel == "sum_squares" || kernel == "add" ||
          kernel == "all_reduce_sum")
        continue;
      return launch.emitOpError("mlt-partition-optimizer: @")
             << abi::kOptimizerStepProgram
             << " launches a kernel it does not know how to partition";
    }
    if (parameters.empty() || !gradNorm || !maxNorm)
      return optimizer.emitOpError("has no adamw launches, gradient norm or "
                                   "clipping to partition");
    bool copies = bool(parameters.front().copy);
    for (const Parameter &p : parameters)
      if (bool(p.copy) != copies)
        return optimizer.emitOpError("updates some parameters' compute "
                                     "copies and not others'");
    if (reduceInBF16 && !copies)
      return optimizer.emitOpError("mlt-partition-optimizer: "
                                   "grad-reduce-dtype=bf16 needs a plan that "
                                   "computes in bf16");
    return success();
  }

  /// The body that writes a micro-batch's gradients (which ZeRO-2 runs for
  /// every micro-batch), or null.
  rtir::ProgramOp writingBody() {
    for (const char *name :
         {abi::kMicroStepFirstProgram, abi::kBackwardFirstProgram})
      if (auto body = module.lookupSymbol<rtir::ProgramOp>(name))
        return body;
    return {};
  }

  /// grad-reduce-dtype=bf16: marks the gradients the writing body may
  /// compute in bf16: those it only writes, each with one plain matrix
  /// product (the norm weights' and the embedding's, summed over rows in
  /// f32 by their kernels, stay f32, as does a gradient the body reads).
  void markHalfGradients() {
    rtir::ProgramOp body = writingBody();
    if (!body)
      return;
    llvm::StringMap<size_t> index;
    for (auto [i, p] : llvm::enumerate(parameters))
      index[p.grad.getSymName()] = i;
    std::vector<int> writes(parameters.size(), 0);
    std::vector<bool> other(parameters.size(), false);
    for (auto launch : body.getBody().getOps<rtir::LaunchOp>()) {
      for (Attribute ref : launch.getInputs())
        if (auto it = index.find(rtir::bufferName(ref)); it != index.end())
          other[it->second] = true;
      for (Attribute ref : launch.getOutputs())
        if (auto it = index.find(rtir::bufferName(ref)); it != index.end()) {
          if (launch.getKernel() == "matmul" && launch.isPlain())
            ++writes[it->second];
          else
            other[it->second] = true;
        }
    }
    for (auto [i, p] : llvm::enumerate(parameters))
      p.halfGradient = writes[i] == 1 && !other[i];
  }

  /// Where each gradient is ready in the body of the step's last
  /// micro-batch, and the flat buckets.
  LogicalResult planBuckets() {
    llvm::StringMap<int64_t> lastTouch;
    rtir::StepOp step = rtir::trainingStep(module);
    if (!step)
      return module.emitError("mlt-partition-optimizer: expected the "
                              "training step, mlt_rt.step @")
             << rtir::kTrainingStepName << " (run mlt-schedule-pipeline first)";
    rtir::CallOp last;
    for (auto call : step.getBody().getOps<rtir::CallOp>())
      if (call.getMicrobatchAttr() && call.hasWork())
        last = call; // (a pipeline stage's sends come after it)
    if (last) {
      auto body = module.lookupSymbol<rtir::ProgramOp>(last.getProgramAttr());
      for (auto [position, launch] :
           llvm::enumerate(body.getBody().getOps<rtir::LaunchOp>()))
        for (ArrayAttr list : {launch.getInputs(), launch.getOutputs()})
          for (Attribute ref : list)
            lastTouch[rtir::bufferName(ref)] = int64_t(position);
    }
    if (reduceInBF16)
      markHalfGradients();
    // A group: one weight decay, one set of split axes, one gradient type.
    std::map<std::tuple<bool, SmallVector<StringRef>, bool>, unsigned> groups;
    for (Parameter &p : parameters) {
      auto [it, inserted] = groups.try_emplace(
          {p.decay, p.axes, p.halfGradient}, unsigned(groups.size()));
      auto touch = lastTouch.find(p.grad.getSymName());
      members.push_back({touch == lastTouch.end() ? -1 : touch->second,
                         uint64_t(p.elements),
                         p.grad.getByteSize() / (p.halfGradient ? 2 : 1),
                         it->second});
    }
    FlatBucketOptions options{uint64_t(bucketBytes), uint64_t(ranks),
                              kFlatBufferAlignment};
    plan = planFlatBuckets(members, options);
    std::string why;
    if (!plan.verify(members, options, &why))
      return optimizer.emitOpError("flat bucket plan is invalid: ") << why;
    return success();
  }

  rtir::BufferOp createBuffer(StringRef name, rtir::BufferKind kind,
                              RankedTensorType type) {
    std::string unique = name.str();
    for (unsigned n = 1; buffers.count(unique); ++n)
      unique = (name + "." + Twine(n)).str();
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointAfter(lastBuffer);
    OperationState state(module.getLoc(), rtir::BufferOp::getOperationName());
    rtir::BufferOp::Properties &props =
        state.getOrAddProperties<rtir::BufferOp::Properties>();
    props.sym_name = b.getStringAttr(unique);
    props.kind = rtir::BufferKindAttr::get(b.getContext(), kind);
    props.type = TypeAttr::get(type);
    auto buffer = cast<rtir::BufferOp>(b.create(state));
    buffers[buffer.getSymName()] = buffer;
    lastBuffer = buffer;
    return buffer;
  }

  RankedTensorType flatType(int64_t elements, Type element) {
    return RankedTensorType::get({elements}, element);
  }

  /// Turns `buffer` into a view of `base` at `offset` elements.
  void makeView(rtir::BufferOp buffer, rtir::BufferOp base, uint64_t offset) {
    buffer.setViewAttr(FlatSymbolRefAttr::get(base.getSymNameAttr()));
    buffer.setViewOffsetAttr(b.getI64IntegerAttr(int64_t(offset)));
  }

  /// A rank's slice of `bucket` over the first `levels` replica axes (all
  /// of them by default): a view of it, or stored apart.
  rtir::BufferOp createSlice(StringRef name, rtir::BufferKind kind,
                             Type element, rtir::BufferOp bucket, bool view,
                             bool owns, std::optional<size_t> levels = {}) {
    const size_t n = levels.value_or(replicas.size());
    int64_t elements = bucket.getTensorType().getNumElements();
    for (const ReplicaAxis &axis : ArrayRef(replicas).take_front(n))
      elements /= axis.size;
    rtir::BufferOp slice = createBuffer(name, kind, flatType(elements, element));
    auto ref = FlatSymbolRefAttr::get(bucket.getSymNameAttr());
    if (view)
      slice.setViewAttr(ref);
    else
      slice.setLayoutAttr(ref);
    slice.setShardAttr(b.getStringAttr(shardOf(n)));
    if (owns)
      slice.setOwnsAttr(b.getUnitAttr());
    return slice;
  }

  void createBuffers() {
    const bool copies = bool(parameters.front().copy);
    Type f32 = b.getF32Type();
    for (auto [k, layout] : llvm::enumerate(plan.buckets)) {
      Bucket bucket;
      bucket.layout = &layout;
      Parameter &first = parameters[layout.members.front()];
      bucket.decay = first.decay;
      bucket.axes = first.axes;
      const std::string index = std::to_string(k);
      const int64_t elements = int64_t(layout.elements);
      auto flat = [&](StringRef name, rtir::BufferKind kind, Type element) {
        rtir::BufferOp buffer =
            createBuffer(name, kind, flatType(elements, element));
        buffer.setBucketAttr(b.getUnitAttr());
        return buffer;
      };
      // ZeRO-2: each micro-batch's gradients are a temporary of its body,
      // reduce-scattered into the rank's slice at once (in bf16 when the
      // body computes them in bf16).
      bucket.gradType = first.halfGradient ? b.getBF16Type() : f32;
      bucket.gradBucket =
          flat("grad_bucket." + index,
               stage == 2 ? rtir::BufferKind::temporary
                          : rtir::BufferKind::gradient,
               bucket.gradType);
      Type readType =
          copies ? first.copy.getTensorType().getElementType() : Type(f32);
      bucket.readBucket = flat((copies ? "param_copy_bucket." : "param_bucket.") +
                                   index,
                               copies ? rtir::BufferKind::parameter_copy
                                      : rtir::BufferKind::parameter,
                               readType);
      for (auto [member, offset] :
           llvm::zip(layout.members, layout.offsets)) {
        Parameter &p = parameters[member];
        makeView(p.grad, bucket.gradBucket, offset);
        if (p.halfGradient)
          p.grad.setTypeAttr(TypeAttr::get(
              p.grad.getTensorType().clone(bucket.gradType)));
        if (stage == 2) {
          p.grad.setKind(rtir::BufferKind::temporary);
          p.grad.removeParameterAttr();
          p.grad->removeAttr(MLTDialect::getShardingAttrName());
        }
        makeView(copies ? p.copy : p.param, bucket.readBucket, offset);
      }
      // The slices' ranges: the layout of the bucket the forward pass reads
      // (its views name the parameters, in every stage).
      bucket.gradShard =
          stage == 2
              ? createSlice("grad_shard." + index, rtir::BufferKind::gradient,
                            f32, bucket.readBucket, /*view=*/false,
                            /*owns=*/true)
              : createSlice("grad_shard." + index, rtir::BufferKind::gradient,
                            f32, bucket.gradBucket, /*view=*/true,
                            /*owns=*/true);
      if (stage == 2)
        bucket.gradSlice = createBuffer(
            "grad_slice." + index, rtir::BufferKind::temporary,
            flatType(int64_t(layout.elements) / ranks, bucket.gradType));
      // In fp32 the read slice is the master weights' slice, which owns its
      // ranges: the per-parameter views elsewhere in the bucket may be
      // stale until the all-gather (mlt-schedule-overlap moves it to the
      // next step's first forward).
      bucket.readShard = createSlice(
          (copies ? "param_copy_shard." : "param_shard.") + index,
          copies ? rtir::BufferKind::parameter_copy
                 : rtir::BufferKind::parameter,
          readType, bucket.readBucket, /*view=*/true, /*owns=*/!copies);
      // The f32 master weights: the read slice itself in fp32; apart in
      // bf16.
      bucket.master = copies ? createSlice("param_shard." + index,
                                           rtir::BufferKind::parameter, f32,
                                           bucket.readBucket, /*view=*/false,
                                           /*owns=*/true)
                             : bucket.readShard;
      if (bucket.decay)
        bucket.master.setDecayAttr(b.getUnitAttr());
      bucket.expAvg = createSlice(abi::kExpAvgShardPrefix + index,
                                  rtir::BufferKind::optimizer_state, f32,
                                  bucket.readBucket, false, true);
      bucket.expAvgSq = createSlice(abi::kExpAvgSqShardPrefix + index,
                                    rtir::BufferKind::optimizer_state, f32,
                                    bucket.readBucket, false, true);
      flatBuckets.push_back(bucket);
    }
  }

  rtir::BufferOp scalar(StringRef name) {
    return createBuffer(name, rtir::BufferKind::temporary,
                        RankedTensorType::get({}, b.getF32Type()));
  }

  static FlatSymbolRefAttr ref(rtir::BufferOp buffer) {
    return FlatSymbolRefAttr::get(buffer.getSymNameAttr());
  }

  /// The optimizer step over the slices: reduce-scatters, the kept
  /// reductions, the gradient norm, clipping, AdamW, all-gathers.
  void rebuildOptimizerStep() {
    Block &body = optimizer.getBody().front();
    SmallVector<Operation *> old;
    for (Operation &op : body)
      if (!llvm::is_contained(kept, dyn_cast<rtir::LaunchOp>(&op)))
        old.push_back(&op);
    b.setInsertionPointToStart(&body);
    for (Bucket &bucket : flatBuckets)
      if (stage == 1)
        reduceScatter(optimizer.getLoc(), bucket.gradBucket, bucket.gradShard);
    // The kept reductions (over other axes) stay next, as they were (with
    // ZeRO-2 they move into the micro-batches' bodies).
    if (!kept.empty() && stage != 2)
      b.setInsertionPointAfter(kept.back());
    // The sums of squares of the slices in one vector, groups one after
    // another, each slice's sum a view of it (an aligned element: one every
    // kPlanBufferAlignment bytes, the rest zeros): the launches are one run
    // that mlt-multi-tensor makes one, and one all-reduce over dp sums them
    // all; a group split over more axes is summed over those too (a view of
    // its range). global_norm adds them.
    std::map<unsigned, SmallVector<Bucket *>> groups;
    for (Bucket &bucket : flatBuckets)
      groups[bucket.layout->group].push_back(&bucket);
    auto mesh = module->getAttrOfType<MeshAttr>(MLTDialect::getMeshAttrName());
    constexpr int64_t stride = int64_t(rt::kPlanBufferAlignment / sizeof(float));
    const int64_t vectorSize = int64_t(flatBuckets.size()) * stride;
    rtir::BufferOp sumsOfSquares =
        createBuffer("sum_squares.slices", rtir::BufferKind::temporary,
                     flatType(vectorSize, b.getF32Type()));
    sumsOfSquares.setBucketAttr(b.getUnitAttr());
    rtir::LaunchOp::create(b, optimizer.getLoc(), "fill", {},
                           {ref(sumsOfSquares)}, {vectorSize}, {0.0});
    SmallVector<Attribute> sums;
    for (auto &[group, members] : groups)
      for (Bucket *bucket : members) {
        rtir::BufferOp sum = scalar("sum_squares." +
                                    bucket->gradShard.getSymName().str());
        makeView(sum, sumsOfSquares, uint64_t(int64_t(sums.size()) * stride));
        rtir::LaunchOp::create(
            b, optimizer.getLoc(), "sum_squares", {ref(bucket->gradShard)},
            {ref(sum)}, {bucket->gradShard.getTensorType().getNumElements()});
        sums.push_back(ref(sum));
      }
    for (const ReplicaAxis &axis : replicas)
      rtir::LaunchOp::create(b, optimizer.getLoc(), "all_reduce_sum",
                             {ref(sumsOfSquares)}, {ref(sumsOfSquares)},
                             {vectorSize, axis.index});
    int64_t first = 0;
    for (auto &[group, members] : groups) {
      const int64_t count = int64_t(members.size()) * stride;
      if (!members.front()->axes.empty()) {
        rtir::BufferOp range =
            createBuffer("sum_squares.group" + std::to_string(group),
                         rtir::BufferKind::temporary,
                         flatType(count, b.getF32Type()));
        makeView(range, sumsOfSquares, uint64_t(first));
        for (StringRef axis : members.front()->axes)
          rtir::LaunchOp::create(b, optimizer.getLoc(), "all_reduce_sum",
                                 {ref(range)}, {ref(range)},
                                 {count, mesh.axisIndex(axis)});
      }
      first += count;
    }
    // A pipeline stage holds its own parameters: the stages' sums add up
    // (one scalar per stage, all-reduced over pp).
    const int64_t pipelineAxis = mesh ? mesh.axisIndex(MLTDialect::getPipelineAxisName()) : -1;
    if (pipelineAxis >= 0 && module->hasAttr(MLTDialect::getStageAttrName())) {
      rtir::BufferOp total = scalar("sum_squares.stage");
      rtir::LaunchOp::create(b, optimizer.getLoc(), "fill", {}, {ref(total)},
                             {1}, {0.0});
      for (Attribute sum : sums)
        rtir::LaunchOp::create(b, optimizer.getLoc(), "add",
                               {ref(total), sum}, {ref(total)}, {1});
      rtir::LaunchOp::create(b, optimizer.getLoc(), "all_reduce_sum",
                             {ref(total)}, {ref(total)}, {1, pipelineAxis});
      sums.assign({ref(total)});
    }
    rtir::LaunchOp::create(b, optimizer.getLoc(), "global_norm", sums,
                           {gradNorm}, {});
    rtir::BufferOp clip = scalar("clip_coefficient");
    rtir::LaunchOp::create(b, optimizer.getLoc(), "clip_coefficient",
                           {gradNorm, maxNorm}, {ref(clip)}, {});
    SmallVector<Attribute> hyperRefs(hyper.begin(), hyper.end());
    hyperRefs.front() = ref(clip);
    for (Bucket &bucket : flatBuckets) {
      SmallVector<Attribute> inputs{ref(bucket.gradShard)};
      inputs.append(hyperRefs.begin(), hyperRefs.end());
      SmallVector<Attribute> outputs{ref(bucket.master), ref(bucket.expAvg),
                                     ref(bucket.expAvgSq)};
      if (bucket.master != bucket.readShard)
        outputs.push_back(ref(bucket.readShard));
      rtir::LaunchOp::create(
          b, optimizer.getLoc(), "adamw", inputs, outputs,
          {bucket.gradShard.getTensorType().getNumElements(),
           int64_t(bucket.decay)});
    }
    for (Bucket &bucket : flatBuckets)
      allGather(optimizer.getLoc(), bucket.readShard, bucket.readBucket);
    for (Operation *op : old)
      op->erase();
  }

  /// refresh_parameter_copies, which the runtime runs after it writes
  /// parameters (into the owning slices): each bf16 master slice cast to
  /// its copy slice, and every read bucket all-gathered (in fp32 too, where
  /// the program is new).
  LogicalResult rebuildRefresh() {
    auto refresh =
        module.lookupSymbol<rtir::ProgramOp>(abi::kRefreshCopiesProgram);
    if (!refresh) {
      b.setInsertionPointAfter(optimizer);
      refresh = rtir::ProgramOp::create(b, optimizer.getLoc(),
                                        abi::kRefreshCopiesProgram);
      refresh.getBody().emplaceBlock();
    }
    Block &body = refresh.getBody().front();
    for (auto launch : llvm::make_early_inc_range(body.getOps<rtir::LaunchOp>())) {
      if (launch.getKernel() != "cast")
        return launch.emitOpError("mlt-partition-optimizer: @")
               << abi::kRefreshCopiesProgram << " launches a kernel other "
               << "than cast";
      launch.erase();
    }
    b.setInsertionPointToEnd(&body);
    for (Bucket &bucket : flatBuckets) {
      if (bucket.master == bucket.readShard)
        continue;
      rtir::LaunchOp::create(b, refresh.getLoc(), "cast", {ref(bucket.master)},
                             {ref(bucket.readShard)},
                             {bucket.master.getTensorType().getNumElements()});
    }
    for (Bucket &bucket : flatBuckets)
      allGather(refresh.getLoc(), bucket.readShard, bucket.readBucket);
    return success();
  }

  /// ZeRO-2: every micro-batch's call runs the body that writes its
  /// gradients (rather than adding them up), which ends by reducing them
  /// (the reductions over other axes the optimizer step had, then each
  /// bucket reduce-scattered into a temporary slice and added into the
  /// rank's gradient slice); the step starts by zeroing the slices. In a
  /// step of one micro-batch the reduce-scatters write the gradient slices
  /// themselves.
  LogicalResult reduceEveryMicroBatch() {
    rtir::StepOp step = rtir::trainingStep(module);
    static constexpr std::pair<const char *, const char *> kWriting[] = {
        {abi::kMicroStepProgram, abi::kMicroStepFirstProgram},
        {abi::kBackwardProgram, abi::kBackwardFirstProgram}};
    rtir::ProgramOp writer;
    // (a lookup in the module scans its ops: the step has calls of every
    // micro-batch)
    SymbolTable symbols(module);
    for (auto call : step.getBody().getOps<rtir::CallOp>()) {
      if (!call.getMicrobatchAttr())
        continue;
      if (!call.hasWork()) {
        // A pipeline stage's transfers around a body (`backward_recv`):
        // those of the writing body, which has temporaries of its own.
        for (auto [accumulating, writing] : kWriting)
          for (StringRef suffix : {"_recv", "_send"})
            if (call.getProgram() == (Twine(accumulating) + suffix).str()) {
              std::string name = (Twine(writing) + suffix).str();
              if (!symbols.lookup(name))
                return call.emitOpError("mlt-partition-optimizer: zero=2 "
                                        "needs @")
                       << name << ", the transfers of the body that writes "
                       << "the gradients";
              call.setProgramAttr(FlatSymbolRefAttr::get(
                  StringAttr::get(module.getContext(), name)));
            }
        continue;
      }
      StringRef name = call.getProgram();
      for (auto [accumulating, writing] : kWriting)
        if (name == accumulating)
          name = writing;
      if (name != abi::kMicroStepFirstProgram &&
          name != abi::kBackwardFirstProgram)
        continue; // a forward body
      auto body = symbols.lookup<rtir::ProgramOp>(name);
      if (!body)
        return call.emitOpError("mlt-partition-optimizer: zero=2 needs @")
               << name << ", the body that writes the gradients";
      writer = body;
      call.setProgramAttr(FlatSymbolRefAttr::get(body.getSymNameAttr()));
    }
    if (!writer)
      return step.emitOpError("mlt-partition-optimizer: zero=2 found no "
                              "call of a body that writes the gradients");
    // A step of one micro-batch reduce-scatters straight into the gradient
    // slices: nothing to add to, nothing to zero.
    unsigned writes = 0;
    for (auto call : step.getBody().getOps<rtir::CallOp>())
      writes += call.getProgram() == writer.getSymName();
    const bool once = writes == 1;
    // Each bucket's padding is zeroed before the body first touches the
    // bucket: a temporary's bytes hold other values outside its lifetime,
    // and the reduce-scatter sums the padding into the slices (whose sums
    // of squares and AdamW read it).
    // The body's first launch to touch each buffer, found in one walk (the
    // fills put in below touch only the buckets' padding).
    llvm::StringMap<std::pair<size_t, rtir::LaunchOp>> firstTouch;
    for (auto [position, launch] :
         llvm::enumerate(writer.getBody().getOps<rtir::LaunchOp>()))
      for (ArrayAttr list : {launch.getInputs(), launch.getOutputs()})
        for (Attribute ref : list)
          firstTouch.try_emplace(rtir::bufferName(ref), position, launch);
    for (Bucket &bucket : flatBuckets) {
      rtir::LaunchOp first;
      size_t firstPosition = SIZE_MAX;
      auto touchedFirst = [&](StringRef name) {
        auto it = firstTouch.find(name);
        if (it != firstTouch.end() && it->second.first < firstPosition)
          std::tie(firstPosition, first) = it->second;
      };
      touchedFirst(bucket.gradBucket.getSymName());
      for (size_t member : bucket.layout->members)
        touchedFirst(parameters[member].grad.getSymName());
      if (!first)
        return writer.emitOpError("never touches the gradients of bucket ")
               << bucket.gradBucket.getSymName();
      // The gaps: after each member up to the next one, and the tail. A
      // gap's view starts where a buffer may (kPlanBufferAlignment): at
      // the member's end rounded down, so that it also zeros the member's
      // last few elements when its size is no multiple of that, which is
      // harmless here: nothing has written the member yet (this is the
      // body's first touch of the bucket) and its writer overwrites it.
      // Member offsets are aligned to more than that (FlatBuckets'
      // alignment), so the view never reaches into an earlier member.
      SmallVector<std::pair<uint64_t, uint64_t>> gaps;
      const FlatBucket &layout = *bucket.layout;
      const uint64_t aligned =
          rt::kPlanBufferAlignment /
          uint64_t(bucket.gradType.getIntOrFloatBitWidth() / 8);
      for (size_t i = 0; i < layout.members.size(); ++i) {
        uint64_t end = layout.offsets[i] +
                       uint64_t(parameters[layout.members[i]].elements);
        uint64_t next = i + 1 < layout.members.size() ? layout.offsets[i + 1]
                                                      : layout.elements;
        if (next > end) {
          const uint64_t start = end - end % aligned;
          gaps.push_back({start, next - start});
        }
      }
      b.setInsertionPoint(first);
      for (auto [start, length] : gaps) {
        rtir::BufferOp gap = createBuffer(
            (bucket.gradBucket.getSymName() + ".padding").str(),
            rtir::BufferKind::temporary,
            flatType(int64_t(length), bucket.gradType));
        makeView(gap, bucket.gradBucket, start);
        b.setInsertionPoint(first);
        rtir::LaunchOp::create(b, writer.getLoc(), "fill", {}, {ref(gap)},
                               {int64_t(length)}, {0.0});
      }
    }
    // The body ends by reducing its micro-batch's gradients.
    b.setInsertionPointToEnd(&writer.getBody().front());
    for (rtir::LaunchOp launch : kept) {
      launch->moveBefore(&writer.getBody().front(),
                         writer.getBody().front().end());
    }
    // With one micro-batch the sums are the gradient slice itself; a bf16
    // one stays bf16, which the optimizer's multi-tensor kernels widen as
    // they read it (the bits of an f32 copy, without the pass that would
    // write one). Otherwise each micro-batch's slice is added into it.
    for (Bucket &bucket : flatBuckets) {
      const int64_t n = bucket.gradShard.getTensorType().getNumElements();
      if (once && !bucket.gradType.isF32()) {
        bucket.gradShard.setTypeAttr(TypeAttr::get(
            bucket.gradShard.getTensorType().clone(bucket.gradType)));
        bucket.gradSlice.erase();
        bucket.gradSlice = nullptr;
      }
      reduceScatter(writer.getLoc(), bucket.gradBucket,
                    once ? bucket.gradShard : bucket.gradSlice);
      if (!once)
        rtir::LaunchOp::create(b, writer.getLoc(), "accumulate",
                               {ref(bucket.gradSlice)},
                               {ref(bucket.gradShard)}, {n});
    }
    kept.clear();
    if (once) {
      for (auto call : llvm::make_early_inc_range(
               step.getBody().getOps<rtir::CallOp>()))
        if (call.getProgram() == abi::kZeroGradientsProgram)
          call.erase();
      eraseUncalledPrograms(module);
      return success();
    }
    // The step zeroes the gradient slices first.
    auto zero =
        module.lookupSymbol<rtir::ProgramOp>(abi::kZeroGradientsProgram);
    if (zero) {
      zero.getBody().front().clear();
    } else {
      b.setInsertionPointAfter(optimizer);
      zero = rtir::ProgramOp::create(b, optimizer.getLoc(),
                                     abi::kZeroGradientsProgram);
      zero.getBody().emplaceBlock();
    }
    b.setInsertionPointToEnd(&zero.getBody().front());
    for (Bucket &bucket : flatBuckets)
      rtir::LaunchOp::create(
          b, zero.getLoc(), "fill", {}, {ref(bucket.gradShard)},
          {bucket.gradShard.getTensorType().getNumElements()}, {0.0});
    Block &calls = step.getBody().front();
    auto first = calls.getOps<rtir::CallOp>().begin();
    if (first == calls.getOps<rtir::CallOp>().end() ||
        (*first).getProgram() != abi::kZeroGradientsProgram) {
      b.setInsertionPointToStart(&calls);
      rtir::CallOp::create(b, step.getLoc(),
                           FlatSymbolRefAttr::get(zero.getSymNameAttr()),
                           IntegerAttr(), IntegerAttr(),
                           b.getDenseI64ArrayAttr({}));
    }
    eraseUncalledPrograms(module);
    return success();
  }

  /// Erases the per-parameter buffers the slices replace (moments, and the
  /// f32 parameters of a bf16 plan) and the optimizer step's old
  /// temporaries; one still used elsewhere is an error.
  LogicalResult eraseReplaced() {
    llvm::DenseSet<StringRef> used;
    for (auto program : module.getOps<rtir::ProgramOp>())
      for (auto launch : program.getBody().getOps<rtir::LaunchOp>())
        for (ArrayAttr list : {launch.getInputs(), launch.getOutputs()})
          for (Attribute ref : list)
            used.insert(rtir::bufferName(ref));
    const bool copies = bool(parameters.front().copy);
    for (const Parameter &p : parameters)
      for (rtir::BufferOp buffer :
           {p.expAvg, p.expAvgSq, copies ? p.param : rtir::BufferOp()}) {
        if (!buffer)
          continue;
        if (used.contains(buffer.getSymName()))
          return buffer.emitOpError("is still used, but the partitioned "
                                    "optimizer keeps it only in slices");
        buffers.erase(buffer.getSymName());
        buffer.erase();
      }
    for (auto buffer : llvm::make_early_inc_range(module.getOps<rtir::BufferOp>()))
      if (buffer.getKind() == rtir::BufferKind::temporary &&
          !used.contains(buffer.getSymName())) {
        buffers.erase(buffer.getSymName());
        buffer.erase();
      }
    return success();
  }

  ModuleOp module;
  OpBuilder b;
  int64_t stage, bucketBytes;
  bool reduceInBF16;
  /// The replicas' axes (replicasAxes), major first, and their number of
  /// ranks.
  SmallVector<ReplicaAxis, 2> replicas;
  int64_t ranks = 1;
  rtir::ProgramOp optimizer;
  llvm::StringMap<rtir::BufferOp> buffers;
  Operation *lastBuffer = nullptr;
  std::vector<Parameter> parameters;
  SmallVector<rtir::LaunchOp> kept;
  SmallVector<Attribute> hyper; // adamw's inputs after the gradient
  Attribute gradNorm, maxNorm;
  std::vector<FlatMember> members;
  FlatBucketPlan plan;
  std::vector<Bucket> flatBuckets;
};

/// Partitions the optimizer state over the data-parallel ranks (zero=1,
/// and with zero=2 step 6):
/// 1. reads the optimizer step: each adamw launch names a parameter's
///    gradient, parameter, moments and (bf16) compute copy; the gradient
///    all-reduces over dp go, those over other axes stay;
/// 2. each gradient's readiness in the step's last micro-batch, its group
///    (weight decay, the axes it is split over), and the flat buckets
///    (FlatBuckets.h, verified);
/// 3. per bucket: the gradient bucket with each gradient a view of it, the
///    bucket of what the forward pass reads with its parameters (or copies)
///    as views, the rank's slices (gradient and read slices as views; the
///    moments, and the bf16 master weights, apart, owning their ranges);
/// 4. the optimizer step rebuilt over the slices; refresh_parameter_copies
///    too;
/// 5. the replaced per-parameter buffers erased (an error if still used);
/// 6. zero=2: every micro-batch's call runs the body that writes the
///    gradients (now temporaries, views of temporary buckets), which zeroes
///    each bucket's padding first and ends with the reductions over other
///    axes and each bucket reduce-scattered and added into the rank's
///    gradient slice; the step zeroes those slices first.
class MLTPartitionOptimizerPass
    : public mlt::impl::MLTPartitionOptimizerBase<MLTPartitionOptimizerPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    if (zero < 0 || zero > 2) {
      getOperation().emitError("mlt-partition-optimizer: zero must be 0, 1 "
                               "or 2, got ")
          << static_cast<int64_t>(zero);
      return signalPassFailure();
    }
    if (bucketBytes < 0) {
      getOperation().emitError("mlt-partition-optimizer: bucket-bytes must "
                               "be non-negative, got ")
          << static_cast<int64_t>(bucketBytes);
      return signalPassFailure();
    }
    if (gradReduceDtype != "f32" && gradReduceDtype != "bf16") {
      getOperation().emitError("mlt-partition-optimizer: grad-reduce-dtype "
                               "must be f32 or bf16, got '")
          << gradReduceDtype << "'";
      return signalPassFailure();
    }
    const bool bf16 = gradReduceDtype == "bf16";
    if (bf16 && zero != 2) {
      getOperation().emitError("mlt-partition-optimizer: grad-reduce-dtype="
                               "bf16 reduces each micro-batch's gradients, "
                               "which zero=2 does; got zero=")
          << static_cast<int64_t>(zero);
      return signalPassFailure();
    }
    if (zero == 0)
      return;
    if (failed(Partitioner(getOperation(), zero, bucketBytes, bf16).run()))
      signalPassFailure();
  }
};

} // namespace
