//===- LowerToRuntime.cpp - training program to runtime launches ----------===//
//
// Part of mlt. Implements mlt-lower-to-runtime: the functions of a training
// program (`@micro_step`, `@optimizer_step`, and the evaluation body
// `@eval_forward` where there is one) become `mlt_rt.program`s of
// kernel launches, and every tensor they touch becomes an `mlt_rt.buffer`.
// A per-rank program (after mlt-spmdize) lowers the same way: its values have
// the types of the blocks a rank holds, so every buffer is a rank's block;
// state and token buffers keep their global layout in `mlt.sharding` for the
// plan exporter, and collectives become the runtime's collective kernels.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/PlanFormat.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>
#include <set>

namespace mlt {
#define GEN_PASS_DEF_MLTLOWERTORUNTIME
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;
namespace abi = mlt::rt;

namespace {

/// The training program's interface with the runtime: the function a program
/// is lowered from, the program's name, the output buffer its result lands
/// in, and whether it writes the gradients rather than adding to them (the
/// step's first micro-batch: no zeroing pass, and products into gradients
/// that do not read them).
struct ProgramABI {
  StringRef function;
  StringRef program;
  StringRef resultBuffer;
  bool writesGradients = false;
  /// Lowered where the module has the function, else left out: the
  /// evaluation body (mlt-attach-evaluation), which reads the training
  /// body's tokens and labels and writes its loss, so it comes after it.
  bool optional = false;
};
constexpr ProgramABI kPrograms[] = {
    {abi::kMicroStepProgram, abi::kMicroStepProgram, abi::kLossOutput},
    {abi::kMicroStepProgram, abi::kMicroStepFirstProgram, abi::kLossOutput,
     /*writesGradients=*/true},
    {abi::kOptimizerStepProgram, abi::kOptimizerStepProgram,
     abi::kGradNormOutput},
    {abi::kEvalForwardProgram, abi::kEvalForwardProgram, abi::kLossOutput,
     /*writesGradients=*/false, /*optional=*/true}};

int64_t numElements(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

Type elementTypeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

/// A shape viewed as [outer, shape[dim], inner] around dimension `dim`.
struct DimSplit {
  int64_t outer = 1, size = 1, inner = 1;
};

/// A transpose's ints that swap the two outer dimensions of [a, b, size,
/// inner]: how a collective's rank-major buffer ([ranks, outer, ...]) meets
/// the tensor's layout ([outer, ranks, ...]), either way.
std::vector<int64_t> swapOuterInts(int64_t a, int64_t b, int64_t size,
                                   int64_t inner) {
  return rt::transposeInts(std::array<int64_t, 4>{a, b, size, inner},
                           std::array<int64_t, 4>{1, 0, 2, 3});
}

DimSplit splitAround(ArrayRef<int64_t> shape, int64_t dim) {
  DimSplit split;
  for (int64_t d = 0; d < dim; ++d)
    split.outer *= shape[d];
  split.size = shape[dim];
  for (int64_t d = dim + 1, e = shape.size(); d < e; ++d)
    split.inner *= shape[d];
  return split;
}

/// Context parallelism's all-to-all exchange gathers a sequence held in the
/// load-balanced order, and reorder_sequence takes it to its natural order
/// after the exchange (and back before the one that returns it). Where the
/// sequence is the outermost dimension of the exchanged blocks (one sequence
/// a micro-batch), each rank's block is its two chunks whole: the exchange
/// moves them straight to or from their natural places (all_to_all's order
/// of blocks, Collective.h), and the reorder, a copy of the whole tensor, is
/// left out. The exchange a reorder folds into, or null.
AllToAllOp exchangeFoldingReorder(ReorderSequenceOp reorder) {
  auto outermost = [](ArrayRef<int64_t> shape, int64_t dim) {
    return splitAround(shape, dim).outer == 1;
  };
  if (!outermost(shapeOf(reorder.getResult()), int64_t(reorder.getDim())))
    return {};
  AllToAllOp exchange;
  int64_t dim;
  if (reorder.getToNatural()) {
    // all_to_all -> reorder to natural: the exchange places what arrives.
    exchange = reorder.getInput().getDefiningOp<AllToAllOp>();
    if (!exchange || !exchange.getResult().hasOneUse())
      return {};
    dim = int64_t(exchange.getConcat());
    // One order a launch: not where the exchange takes its input from the
    // natural order already.
    auto before = exchange.getInput().getDefiningOp<ReorderSequenceOp>();
    if (before && !before.getToNatural() &&
        exchangeFoldingReorder(before) == exchange)
      return {};
  } else {
    // reorder to balanced -> all_to_all: the exchange takes what it sends.
    if (!reorder.getResult().hasOneUse())
      return {};
    exchange = dyn_cast<AllToAllOp>(*reorder.getResult().getUsers().begin());
    if (!exchange)
      return {};
    dim = int64_t(exchange.getSplit());
  }
  if (exchange.getAxis() != reorder.getAxis() ||
      dim != int64_t(reorder.getDim()))
    return {};
  // The blocks' outer extent around `dim` (the exchanged dimension is
  // divided by the group's size in a block).
  ArrayRef<int64_t> in = shapeOf(exchange.getInput());
  SmallVector<int64_t> block(in);
  const int64_t split = int64_t(exchange.getSplit());
  block[split] /= shapeOf(exchange.getResult())[exchange.getConcat()] /
                  in[exchange.getConcat()];
  return outermost(block, dim) ? exchange : AllToAllOp();
}

/// A mesh axis as kernels name it: its index in the module's mesh (-1: no
/// axis) and its size.
struct MeshAxisRef {
  int64_t index = -1;
  int64_t size = 1;
};

/// Where a program's launches read and write each of some buffers, by
/// position, kept up to date as launches are rewritten and erased: what
/// fuseRecomputedSwiGLU asks of a stretch of the program is then a lookup,
/// not a scan of it (one scan per SwiGLU made the fusion quadratic in the
/// layers). It asks only about the operands of swiglu_bwd launches, so
/// only those buffers are tracked.
class LaunchUses {
public:
  LaunchUses(ArrayRef<rtir::LaunchOp> launches,
             const llvm::StringSet<> &tracked)
      : tracked(tracked) {
    for (auto [position, launch] : llvm::enumerate(launches))
      add(position, launch);
  }

  /// Records `launch` at `position` (after a rewrite of it).
  void add(size_t position, rtir::LaunchOp launch) {
    for (Attribute ref : launch.getInputs())
      if (tracked.contains(rtir::bufferName(ref)))
        readers[rtir::bufferName(ref)].insert(position);
    for (Attribute ref : launch.getOutputs())
      if (tracked.contains(rtir::bufferName(ref)))
        writers[rtir::bufferName(ref)].insert(position);
  }
  /// Forgets `launch` at `position` (before it is rewritten or erased).
  void remove(size_t position, rtir::LaunchOp launch) {
    for (Attribute ref : launch.getInputs())
      if (tracked.contains(rtir::bufferName(ref)))
        readers[rtir::bufferName(ref)].erase(position);
    for (Attribute ref : launch.getOutputs())
      if (tracked.contains(rtir::bufferName(ref)))
        writers[rtir::bufferName(ref)].erase(position);
  }

  /// The first position after `after` that writes `name`, or SIZE_MAX.
  size_t firstWriteAfter(StringRef name, size_t after) const {
    return firstIn(writers, name, after + 1, SIZE_MAX);
  }
  /// Whether a launch in [begin, end) writes `name`.
  bool writtenIn(StringRef name, size_t begin, size_t end) const {
    return firstIn(writers, name, begin, end) != SIZE_MAX;
  }
  /// Whether a launch in [begin, end) reads or writes `name`.
  bool touchedIn(StringRef name, size_t begin, size_t end) const {
    return writtenIn(name, begin, end) ||
           firstIn(readers, name, begin, end) != SIZE_MAX;
  }
  /// The positions that write `name`, in order.
  const std::set<size_t> &writes(StringRef name) const {
    static const std::set<size_t> none;
    auto it = writers.find(name);
    return it == writers.end() ? none : it->second;
  }

private:
  static size_t firstIn(const llvm::StringMap<std::set<size_t>> &uses,
                        StringRef name, size_t begin, size_t end) {
    auto it = uses.find(name);
    if (it == uses.end())
      return SIZE_MAX;
    auto position = it->second.lower_bound(begin);
    return position != it->second.end() && *position < end ? *position
                                                           : SIZE_MAX;
  }

  const llvm::StringSet<> &tracked;
  llvm::StringMap<std::set<size_t>> readers, writers;
};

/// A SwiGLU recomputed in the backward pass (mlt-recompute-activations) runs
/// in the pass of its gradient: `swiglu_fwd (g, u) -> h` followed by
/// `swiglu_bwd (dy, g, u) -> (dg, du)` of the same g and u, where dy is
/// ready before the first and nothing between them writes dy, g or u or
/// touches dg or du, becomes `swiglu_bwd (dy, g, u) -> (dg, du, h)` in the
/// first's place: g and u are read once, not twice (the same bits: the
/// kernel computes both with the separate kernels' operations). The
/// forward pass's swiglu_fwd never qualifies: its dy comes later.
///
/// For each swiglu_fwd in order: the first later launch that is a
/// swiglu_bwd of its g and u, or writes g or u; if it is such a swiglu_bwd,
/// the two fuse when dy is written before the swiglu_fwd and by no launch
/// from it on but that swiglu_bwd, and no launch between them writes dy or
/// touches dg or du. Every question is answered from LaunchUses and an index
/// of the swiglu_bwd launches by (g, u), both updated by each fusion.
void fuseRecomputedSwiGLU(rtir::ProgramOp program) {
  SmallVector<rtir::LaunchOp> launches(
      program.getBody().getOps<rtir::LaunchOp>());
  // The positions of the swiglu_bwd launches (two outputs) by (g, u), and
  // the buffers they name: all that the fusion asks about.
  std::map<std::pair<StringRef, StringRef>, std::set<size_t>> backwards;
  llvm::StringSet<> operands;
  auto operandsOf = [](rtir::LaunchOp backward) {
    return std::pair(rtir::bufferName(backward.getInputs()[1]),
                     rtir::bufferName(backward.getInputs()[2]));
  };
  for (auto [position, launch] : llvm::enumerate(launches))
    if (launch.getKernel() == "swiglu_bwd" && launch.getOutputs().size() == 2) {
      backwards[operandsOf(launch)].insert(position);
      for (ArrayAttr list : {launch.getInputs(), launch.getOutputs()})
        for (Attribute ref : list)
          operands.insert(rtir::bufferName(ref));
    }
  if (backwards.empty())
    return;
  LaunchUses uses(launches, operands);

  for (size_t i = 0; i < launches.size(); ++i) {
    rtir::LaunchOp forward = launches[i];
    if (!forward || forward.getKernel() != "swiglu_fwd")
      continue;
    StringRef gate = rtir::bufferName(forward.getInputs()[0]);
    StringRef up = rtir::bufferName(forward.getInputs()[1]);
    auto candidates = backwards.find({gate, up});
    if (candidates == backwards.end())
      continue;
    auto next = candidates->second.upper_bound(i);
    if (next == candidates->second.end())
      continue;
    const size_t j = *next;
    // A write of g or u before it ends the search (at j itself the match
    // counts first).
    if (std::min(uses.firstWriteAfter(gate, i), uses.firstWriteAfter(up, i)) <
        j)
      continue;
    rtir::LaunchOp backward = launches[j];
    StringRef dy = rtir::bufferName(backward.getInputs()[0]);
    const std::set<size_t> &dyWrites = uses.writes(dy);
    auto fromForward = dyWrites.lower_bound(i);
    const bool dyReady =
        dyWrites.begin() != fromForward &&
        (fromForward == dyWrites.end() ||
         (*fromForward == j && std::next(fromForward) == dyWrites.end()));
    const bool clear = !uses.writtenIn(dy, i + 1, j) &&
                       llvm::none_of(backward.getOutputs(), [&](Attribute ref) {
                         return uses.touchedIn(rtir::bufferName(ref), i + 1, j);
                       });
    if (!dyReady || !clear)
      continue;
    uses.remove(i, forward);
    uses.remove(j, backward);
    candidates->second.erase(next);
    SmallVector<Attribute> outputs(backward.getOutputs().getValue());
    outputs.push_back(forward.getOutputs()[0]);
    forward.setKernel("swiglu_bwd");
    forward.setInputsAttr(backward.getInputs());
    forward.setOutputsAttr(ArrayAttr::get(program.getContext(), outputs));
    uses.add(i, forward);
    backward.erase();
    launches[j] = nullptr;
  }
}

/// Lowers one module; keeps the buffers it created by name and the buffer
/// that holds each SSA value.
class RuntimeLowering {
public:
  explicit RuntimeLowering(ModuleOp module)
      : module(module), b(module.getContext()),
        mesh(module->getAttrOfType<MeshAttr>(MLTDialect::getMeshAttrName())) {}

  LogicalResult run() {
    b.setInsertionPointToEnd(module.getBody());
    if (failed(createStateBuffers()))
      return failure();
    for (const ProgramABI &abi : kPrograms) {
      auto func = module.lookupSymbol<func::FuncOp>(abi.function);
      if (!func && abi.optional)
        continue;
      if (!func)
        return module.emitError("mlt-lower-to-runtime: no function @")
               << abi.function
               << " (run mlt-autodiff and mlt-attach-optimizer first)";
      if (failed(lowerFunction(func, abi)))
        return failure();
    }
    // Mixed precision: adamw refreshes the compute copies of the parameters
    // it updates (the optimizer step casts any other), and a program of casts
    // lets the runtime refresh them all after it writes parameters.
    if (!parameterCopies.empty()) {
      // (The functions, which have the programs' names, are still there.)
      rtir::ProgramOp step = programs.lookup(abi::kOptimizerStepProgram);
      b.setInsertionPointToEnd(&step.getBody().front());
      refreshParameterCopies(step.getLoc(), refreshedByOptimizer);
      b.setInsertionPointToEnd(module.getBody());
      auto refresh = rtir::ProgramOp::create(b, module.getLoc(),
                                             abi::kRefreshCopiesProgram);
      b.setInsertionPointToStart(&refresh.getBody().emplaceBlock());
      refreshParameterCopies(module.getLoc());
    }
    for (auto &entry : programs)
      fuseRecomputedSwiGLU(entry.second);
    // Where each micro-step's backward pass starts: at its first launch that
    // reads the loss-gradient seed, or receives the gradient of what a
    // pipeline stage sent (mlt-autodiff appends the backward pass after the
    // forward pass and the loss, and no fusion moves a launch across that
    // point).
    auto isSeed = [&](Attribute ref) {
      return lossSeeds.contains(cast<FlatSymbolRefAttr>(ref).getAttr());
    };
    for (StringRef name : {abi::kMicroStepProgram, abi::kMicroStepFirstProgram})
      if (rtir::ProgramOp program = programs.lookup(name))
        for (auto [index, launch] :
             llvm::enumerate(program.getBody().getOps<rtir::LaunchOp>()))
          if (llvm::any_of(launch.getInputs(), isSeed) ||
              llvm::any_of(launch.getOutputs(), isSeed)) {
            program.setBackwardStartAttr(b.getI64IntegerAttr(int64_t(index)));
            break;
          }
    // micro_step_first must write every gradient (the runtime then zeroes
    // none); a program that leaves one unwritten is dropped, and the runtime
    // zeroes the gradients and runs micro_step for every micro-batch.
    if (rtir::ProgramOp first = programs.lookup(abi::kMicroStepFirstProgram))
      if (llvm::any_of(kinds, [&](const auto &entry) {
            return entry.second == rtir::BufferKind::gradient &&
                   !writtenGradients.contains(entry.first);
          }))
        dropProgram(first);
    // The runtime runs micro_step this many times per step.
    auto step = module.lookupSymbol<func::FuncOp>(kPrograms[0].function);
    if (auto count = step->getAttrOfType<IntegerAttr>(
            MLTDialect::getMicrobatchesAttrName()))
      module->setAttr("mlt_rt.microbatches", count);
    // Only the runtime-level ops remain.
    for (Operation &op : llvm::make_early_inc_range(*module.getBody()))
      if (!isa<rtir::BufferOp, rtir::ProgramOp>(op))
        op.erase();
    return success();
  }

private:
  //===--------------------------------------------------------------------===//
  // Buffers
  //===--------------------------------------------------------------------===//

  /// The buffer `name`, created (with these properties) on first use. A
  /// `sharding` (the global layout of a tensor of which the buffer holds a
  /// rank's block) is recorded as `mlt.sharding` for the plan exporter.
  FlatSymbolRefAttr buffer(StringRef name, rtir::BufferKind kind, Type type,
                           StringRef parameter = {}, bool decay = false,
                           ShardingAttr sharding = {}) {
    if (auto it = buffers.find(name); it != buffers.end())
      return it->second;
    // Buffers come first, in creation order, ahead of every program.
    OpBuilder::InsertionGuard guard(b);
    if (lastBuffer)
      b.setInsertionPointAfter(lastBuffer);
    else
      b.setInsertionPointToStart(module.getBody());
    auto op = rtir::BufferOp::create(
        b, module.getLoc(), b.getStringAttr(name),
        rtir::BufferKindAttr::get(b.getContext(), kind), TypeAttr::get(type),
        /*per_microbatch=*/IntegerAttr(), /*per_slot=*/IntegerAttr(),
        /*offset=*/IntegerAttr(),
        parameter.empty() ? StringAttr() : b.getStringAttr(parameter),
        decay ? b.getUnitAttr() : UnitAttr(), FloatAttr(),
        /*view=*/FlatSymbolRefAttr(), /*view_offset=*/IntegerAttr(),
        /*shard=*/StringAttr(), /*shard_shift=*/IntegerAttr(),
        /*layout=*/FlatSymbolRefAttr(),
        /*owns=*/UnitAttr(), /*bucket=*/UnitAttr(), /*step_kept=*/UnitAttr());
    if (sharding)
      op->setAttr(MLTDialect::getShardingAttrName(),
                  bufferShardingAttr(sharding));
    lastBuffer = op;
    auto ref = FlatSymbolRefAttr::get(op.getSymNameAttr());
    buffers[name] = ref;
    bufferOps[ref.getAttr()] = op;
    kinds[ref.getAttr()] = kind;
    return ref;
  }

  /// The form of a buffer's `mlt.sharding`: a one-element array, which the
  /// mlt dialect's attribute verifier accepts on any op (a bare sharding
  /// only on mlt.param). The plan exporter reads both forms.
  Attribute bufferShardingAttr(ShardingAttr sharding) {
    return b.getArrayAttr({sharding});
  }

  bool isGradientBuffer(FlatSymbolRefAttr ref) {
    auto it = kinds.find(ref.getAttr());
    return it != kinds.end() && it->second == rtir::BufferKind::gradient;
  }

  FlatSymbolRefAttr temporary(Type type) {
    return buffer(("t" + Twine(nextTemporary++)).str(),
                  rtir::BufferKind::temporary, type);
  }

  /// Parameters, gradients and AdamW moments of every parameter tensor. A
  /// parameter with an `mlt.sharding` (global type, sharded over the
  /// module's mesh) gets buffers of the block one rank holds.
  LogicalResult createStateBuffers() {
    for (ParamOp param : module.getOps<ParamOp>()) {
      RankedTensorType global = param.getTensorType();
      bool decay = global.getRank() >= 2;
      auto sharding =
          param->getAttrOfType<ShardingAttr>(MLTDialect::getShardingAttrName());
      RankedTensorType type = global;
      if (sharding) {
        if (std::optional<std::string> problem =
                sharding.checkFits(global.getShape(), mesh))
          return param.emitOpError("has a sharding that does not fit: ")
                 << *problem;
        type =
            RankedTensorType::get(sharding.localShape(global.getShape(), mesh),
                                  global.getElementType());
      }
      for (int64_t layer = param.getLayerBegin(); layer < param.getLayerEnd();
           ++layer) {
        std::string hf = param.getHFName(layer);
        buffer(abi::kParameterPrefix + hf, rtir::BufferKind::parameter, type,
               hf, decay, sharding);
        buffer(abi::kGradientPrefix + hf, rtir::BufferKind::gradient, type, hf,
               false, sharding);
        buffer(abi::kExpAvgPrefix + hf, rtir::BufferKind::optimizer_state, type,
               hf, false, sharding);
        buffer(abi::kExpAvgSqPrefix + hf, rtir::BufferKind::optimizer_state,
               type, hf, false, sharding);
      }
    }
    return success();
  }

  /// The mesh axis `name` that `op` runs over or splits along.
  FailureOr<MeshAxisRef> meshAxis(Operation *op, StringRef name) {
    if (!mesh)
      return op->emitOpError("names mesh axis '")
             << name << "', but the module has no '"
             << MLTDialect::getMeshAttrName() << "'";
    int64_t index = mesh.axisIndex(name);
    if (index < 0)
      return op->emitOpError("names mesh axis '")
             << name << "', which is not an axis of the module's mesh " << mesh;
    return MeshAxisRef{index, mesh.getSizes()[index]};
  }

  /// The axis a per-rank embedding or cross-entropy has its vocabulary split
  /// over (`mlt.vocab_shard`), or none.
  FailureOr<std::optional<MeshAxisRef>> vocabAxis(Operation *op) {
    auto name =
        op->getAttrOfType<StringAttr>(MLTDialect::getVocabShardAttrName());
    if (!name)
      return std::optional<MeshAxisRef>();
    FailureOr<MeshAxisRef> axis = meshAxis(op, name.getValue());
    if (failed(axis))
      return failure();
    return std::optional<MeshAxisRef>(*axis);
  }

  /// The context axis a per-rank rope or attention has its sequence (its
  /// queries) split over (`mlt.sequence_shard`): its index, or -1.
  FailureOr<int64_t> sequenceAxis(Operation *op) {
    auto name =
        op->getAttrOfType<StringAttr>(MLTDialect::getSequenceShardAttrName());
    if (!name)
      return int64_t(-1);
    FailureOr<MeshAxisRef> axis = meshAxis(op, name.getValue());
    if (failed(axis))
      return failure();
    return axis->index;
  }

  /// The HF name of the parameter tensor that a state op names.
  FailureOr<std::string> parameterName(Operation *op, FlatSymbolRefAttr name,
                                       Value layer) {
    auto param = paramOf(name.getAttr());
    if (!param)
      return op->emitOpError("names no parameter");
    if (!layer)
      return param.getHFName();
    auto index = layer.getDefiningOp<arith::ConstantIndexOp>();
    if (!index)
      return op->emitOpError("has a layer index that is not a constant; run "
                             "mlt-unroll-layers (mlt-autodiff does) first");
    return param.getHFName(index.value());
  }

  FailureOr<FlatSymbolRefAttr> stateBuffer(Operation *op, StringRef prefix,
                                           FlatSymbolRefAttr name,
                                           Value layer) {
    FailureOr<std::string> hf = parameterName(op, name, layer);
    if (failed(hf))
      return failure();
    return buffers.lookup((prefix + *hf).str());
  }

  FlatSymbolRefAttr valueBuffer(Value v) { return values.lookup(v); }

  //===--------------------------------------------------------------------===//
  // Launches
  //===--------------------------------------------------------------------===//

  void launch(Location loc, StringRef kernel, ArrayRef<FlatSymbolRefAttr> ins,
              ArrayRef<FlatSymbolRefAttr> outs, ArrayRef<int64_t> ints = {},
              ArrayRef<double> floats = {}) {
    SmallVector<Attribute> inAttrs(ins.begin(), ins.end());
    SmallVector<Attribute> outAttrs(outs.begin(), outs.end());
    rtir::LaunchOp::create(b, loc, kernel, inAttrs, outAttrs, ints, floats);
  }

  /// A launch of `kernel`, whose attributes are named as those of K (an
  /// rt::attrs struct, Kernels.def), given by name in any order; the table
  /// puts them in the plan's order.
  template <typename K>
  void launch(
      Location loc, rt::Kernel kernel, ArrayRef<FlatSymbolRefAttr> ins,
      ArrayRef<FlatSymbolRefAttr> outs,
      std::initializer_list<std::pair<typename K::Int, int64_t>> ints,
      std::initializer_list<std::pair<typename K::Float, double>> floats = {}) {
    assert(rt::sameAttributes(kernel, K::kernel) &&
           "the kernel names its attributes otherwise");
    launch(loc, StringRef(rt::kernelName(kernel)), ins, outs,
           rt::kernelInts<K>(ints), rt::kernelFloats<K>(floats));
  }
  /// A launch of K's own kernel.
  template <typename K>
  void launch(
      Location loc, ArrayRef<FlatSymbolRefAttr> ins,
      ArrayRef<FlatSymbolRefAttr> outs,
      std::initializer_list<std::pair<typename K::Int, int64_t>> ints,
      std::initializer_list<std::pair<typename K::Float, double>> floats = {}) {
    launch<K>(loc, K::kernel, ins, outs, ints, floats);
  }

  /// A launch of attention_fwd or attention_bwd (`kernel`, which name their
  /// attributes alike) of queries `query` against keys `key` (their shapes
  /// give the sizes), on context axis `axis` (-1: none), a ring step's where
  /// `ringStep` is one (>= 0).
  void launchAttention(Location loc, rt::Kernel kernel,
                       ArrayRef<FlatSymbolRefAttr> ins,
                       ArrayRef<FlatSymbolRefAttr> outs, Value query,
                       Value key, bool causal, FloatAttr scale, int64_t axis,
                       int64_t ringStep = -1) {
    using A = rt::attrs::AttentionFwd;
    auto q = shapeOf(query), k = shapeOf(key);
    launch<A>(loc, kernel, ins, outs,
              {{A::batch, q[0]},
               {A::seq, q[1]},
               {A::kv_seq, k[1]},
               {A::q_heads, q[2]},
               {A::kv_heads, k[2]},
               {A::head_dim, q[3]},
               {A::causal, causal},
               {A::axis, axis},
               {A::ring, ringStep >= 0},
               {A::ring_step, std::max<int64_t>(ringStep, 0)}},
              {{A::scale, scale.getValueAsDouble()}});
  }

  /// The buffer for result `v`: the program's output buffer if `v` is
  /// returned, a new temporary otherwise.
  FlatSymbolRefAttr define(Value v) {
    FlatSymbolRefAttr ref = resultOutputs.lookup(v);
    if (!ref)
      ref = temporary(gradientOutputType(v).value_or(v.getType()));
    values[v] = ref;
    return ref;
  }

  /// For the gradient of a parameter that a kernel computes from bf16 (or
  /// f16) operands and that only accumulates into the parameter's f32
  /// gradient: f32, so that the kernel rounds its f32 accumulation once, into
  /// the gradient, not to bf16 first (Kernels.def allows f32 outputs there).
  std::optional<Type> gradientOutputType(Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type ||
        !(type.getElementType().isBF16() || type.getElementType().isF16()) ||
        !v.hasOneUse())
      return std::nullopt;
    auto accumulate = dyn_cast<AccumulateGradOp>(*v.getUsers().begin());
    Operation *producer = v.getDefiningOp();
    bool gradientKernel =
        isa_and_nonnull<MatmulOp, EmbeddingGradOp>(producer) ||
        (isa_and_nonnull<RMSNormGradOp>(producer) &&
         cast<RMSNormGradOp>(producer).getWeightGrad() == v);
    if (!accumulate || !gradientKernel)
      return std::nullopt;
    auto param = paramOf(accumulate.getNameAttr().getAttr());
    if (!param || !param.getTensorType().getElementType().isF32())
      return std::nullopt;
    return Type(type.clone(param.getTensorType().getElementType()));
  }

  /// The gradient buffer that `v` only accumulates into (its one use is an
  /// mlt.accumulate_grad), when a kernel can add it there directly: the
  /// gradient has v's type, or is f32 where v is bf16 or f16.
  std::optional<FlatSymbolRefAttr> accumulatedGradient(Value v) {
    if (!v.hasOneUse())
      return std::nullopt;
    auto accumulate = dyn_cast<AccumulateGradOp>(*v.getUsers().begin());
    if (!accumulate)
      return std::nullopt;
    FailureOr<FlatSymbolRefAttr> grad =
        stateBuffer(accumulate, abi::kGradientPrefix, accumulate.getNameAttr(),
                    accumulate.getLayer());
    if (failed(grad) || !*grad)
      return std::nullopt;
    auto valueType = cast<RankedTensorType>(v.getType());
    auto gradType = cast<RankedTensorType>(bufferType(*grad));
    if (gradType.getShape() != valueType.getShape())
      return std::nullopt;
    Type element = valueType.getElementType();
    if (gradType.getElementType() != element &&
        !(gradType.getElementType().isF32() &&
          (element.isBF16() || element.isF16())))
      return std::nullopt;
    return *grad;
  }

  /// When `v` (a product) is only added to a value that already has a
  /// buffer here (it is computed before the product), the add and that
  /// buffer: the product's kernel can add it in its epilogue (matmul_add).
  std::optional<std::pair<AddOp, FlatSymbolRefAttr>> addedTo(Value v) {
    if (!v.hasOneUse())
      return std::nullopt;
    auto add = dyn_cast<AddOp>(*v.getUsers().begin());
    if (!add || add.getLhs() == add.getRhs())
      return std::nullopt;
    Value other = add.getLhs() == v ? add.getRhs() : add.getLhs();
    FlatSymbolRefAttr addend = valueBuffer(other);
    if (!addend || other.getType() != v.getType() ||
        add.getResult().getType() != v.getType())
      return std::nullopt;
    return std::make_pair(add, addend);
  }

  Type bufferType(FlatSymbolRefAttr ref) {
    return bufferOpOf(ref.getAttr()).getType();
  }

  /// The compute copy of `parameter` (a Parameter buffer) in `type`'s element
  /// type, created on first use.
  FlatSymbolRefAttr parameterCopy(FlatSymbolRefAttr parameter, Type type) {
    auto param = bufferOpOf(parameter.getAttr());
    StringRef hf = *param.getParameter();
    Type element = cast<RankedTensorType>(type).getElementType();
    std::string name;
    llvm::raw_string_ostream(name)
        << abi::kParameterCopyPrefix << element << ":" << hf;
    bool created = !buffers.count(name);
    auto sharding =
        param->getAttrOfType<ArrayAttr>(MLTDialect::getShardingAttrName());
    FlatSymbolRefAttr copy =
        buffer(name, rtir::BufferKind::parameter_copy,
               param.getTensorType().clone(element), hf, false,
               sharding ? cast<ShardingAttr>(sharding[0]) : ShardingAttr());
    if (created) {
      parameterCopies.push_back({parameter, copy});
      copiesOf[parameter.getAttr()].push_back(copy);
    }
    return copy;
  }

  /// Casts every parameter to its compute copies, at the builder's point,
  /// except the copies in `skip`.
  void refreshParameterCopies(Location loc,
                              const DenseSet<StringAttr> &skip = {}) {
    using A = rt::attrs::Cast;
    for (auto [parameter, copy] : parameterCopies)
      if (!skip.contains(copy.getAttr()))
        launch<A>(
            loc, {parameter}, {copy},
            {{A::n,
              cast<RankedTensorType>(bufferType(copy)).getNumElements()}});
  }

  SmallVector<FlatSymbolRefAttr> operandBuffers(Operation *op) {
    return llvm::map_to_vector(op->getOperands(),
                               [&](Value v) { return valueBuffer(v); });
  }

  /// The Constant buffer of `c` (created at its first use: a fused launch
  /// may read a constant before its op is reached), or null after an error.
  FlatSymbolRefAttr constantBuffer(arith::ConstantOp c) {
    // A function lowered into several programs shares its constants.
    FlatSymbolRefAttr ref = constants.lookup(c);
    if (!ref) {
      auto splat = dyn_cast<SplatElementsAttr>(c.getValue());
      auto type = dyn_cast<RankedTensorType>(c.getType());
      if (!splat || !type || !isa<FloatType>(type.getElementType())) {
        c.emitOpError("only float splat constants reach the runtime");
        return {};
      }
      std::string name = ("const" + Twine(buffers.size())).str();
      ref = buffer(name, rtir::BufferKind::constant, type);
      bufferOpOf(ref.getAttr())
          .setValueAttr(b.getF64FloatAttr(
              splat.getSplatValue<APFloat>().convertToDouble()));
      constants[c] = ref;
      if (c->hasAttr(MLTDialect::getLossSeedAttrName()))
        lossSeeds.insert(ref.getAttr());
    }
    values[c.getResult()] = ref;
    return ref;
  }

  /// The inverse mlt.rope ops of `a`'s query and key gradients that its
  /// launch computes (attention_bwd_rope), or none: each gradient's one
  /// user, in the same block, inverse, the two with the same frequencies
  /// (theta and scaling). The gradients are then written rotated back.
  std::optional<std::pair<RopeOp, RopeOp>>
  rotatingGradients(AttentionGradOp a) {
    auto inverseRope = [&](Value grad) -> RopeOp {
      if (!grad.hasOneUse())
        return {};
      auto rope = dyn_cast<RopeOp>(*grad.getUsers().begin());
      if (!rope || !rope.getInverse() || rope->getBlock() != a->getBlock())
        return {};
      return rope;
    };
    // (A context-parallel attention's key gradients are the whole
    // sequence's, reduce-scattered before their rotation.)
    if (a->hasAttr(MLTDialect::getSequenceShardAttrName()))
      return std::nullopt;
    RopeOp dq = inverseRope(a.getQueryGrad());
    RopeOp dk = inverseRope(a.getKeyGrad());
    if (!dq || !dk || dq.getTheta() != dk.getTheta() ||
        dq.getRopeScaling() != dk.getRopeScaling())
      return std::nullopt;
    return std::make_pair(dq, dk);
  }

  /// The gradient that `c`'s launch computes with its loss
  /// (cross_entropy_fwd_bwd), or null: the one mlt.cross_entropy_grad of
  /// the same logits and labels, after `c` in its block, whose loss gradient
  /// is a constant (the loss seed), when the logits have no other user and
  /// neither op splits the vocabulary (a split's lse is a collective away).
  /// The gradient is then written at the forward, over the logits.
  CrossEntropyGradOp fusedGradient(CrossEntropyOp c) {
    CrossEntropyGradOp grad;
    for (Operation *user : c.getLogits().getUsers()) {
      if (user == c)
        continue;
      auto g = dyn_cast<CrossEntropyGradOp>(user);
      if (!g || grad)
        return {};
      grad = g;
    }
    if (!grad || grad.getLabels() != c.getLabels() ||
        grad->getBlock() != c->getBlock() || !c->isBeforeInBlock(grad) ||
        !grad.getGrad().getDefiningOp<arith::ConstantOp>())
      return {};
    const StringRef vocabShard = MLTDialect::getVocabShardAttrName();
    const StringRef rowCount = MLTDialect::getRowCountAttrName();
    if (c->hasAttr(vocabShard) || grad->hasAttr(vocabShard) ||
        c->getAttr(rowCount) != grad->getAttr(rowCount))
      return {};
    return grad;
  }

  LogicalResult lowerOp(Operation *op);
  LogicalResult lowerCollective(Operation *op);
  LogicalResult lowerCrossEntropy(CrossEntropyOp op);
  LogicalResult lowerCrossEntropyGrad(CrossEntropyGradOp op);

  LogicalResult lowerFunction(func::FuncOp func, const ProgramABI &abi) {
    // A function may be lowered into several programs: nothing is shared
    // between them but the named buffers.
    values.clear();
    resultOutputs.clear();
    attentionStats.clear();
    crossEntropyStats.clear();
    accumulatedInPlace.clear();
    addedByProduct.clear();
    computedWithLoss.clear();
    rotatedByAttention.clear();
    writesGradients = abi.writesGradients;
    if (writesGradients)
      writtenGradients.clear();
    Block &body = func.getBody().front();
    for (BlockArgument arg : body.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type || !type.getElementType().isInteger(32) || type.getRank() != 2)
        return func.emitError("mlt-lower-to-runtime: argument #")
               << arg.getArgNumber() << " of @" << func.getSymName()
               << " must be [batch, seq] i32 token ids, got " << arg.getType();
      StringRef name =
          arg.getArgNumber() == 0 ? abi::kTokensInput : abi::kLabelsInput;
      if (arg.getArgNumber() > 1)
        return func.emitError("mlt-lower-to-runtime: @")
               << func.getSymName() << " takes more than tokens and labels";
      // After mlt-spmdize the argument is this rank's block of the batch;
      // its global layout goes with the buffer.
      auto sharding = func.getArgAttrOfType<ShardingAttr>(
          arg.getArgNumber(), MLTDialect::getShardingAttrName());
      values[arg] = buffer(name, rtir::BufferKind::input, arg.getType(), {},
                           false, sharding);
      // (the evaluation body reads the buffers the training body made)
      if (bufferType(values[arg]) != arg.getType())
        return func.emitError("mlt-lower-to-runtime: argument #")
               << arg.getArgNumber() << " of @" << func.getSymName()
               << " is " << arg.getType() << ", but the buffer '" << name
               << "' is " << bufferType(values[arg]);
    }
    // The micro-batch program's inputs and loss have a copy per micro-batch
    // of the step (the step's call of micro-batch k touches copy k).
    if (auto count = func->getAttrOfType<IntegerAttr>(
            MLTDialect::getMicrobatchesAttrName()))
      for (StringRef name : {abi::kTokensInput, abi::kLabelsInput})
        if (FlatSymbolRefAttr ref = buffers.lookup(name))
          bufferOpOf(ref.getAttr()).setPerMicrobatchAttr(count);
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    // A pipeline stage before the last computes no loss: it sends its
    // output on.
    const bool noResult = ret.getNumOperands() == 0 &&
                          abi.resultBuffer == abi::kLossOutput &&
                          !func.getOps<SendOp>().empty();
    if (ret.getNumOperands() != 1 && !noResult)
      return func.emitError("mlt-lower-to-runtime: @")
             << func.getSymName() << " must return one value";
    Value result;
    if (!noResult) {
      // The kernel that computes the result writes the output buffer
      // directly; reshapes and sharding constraints in between only rename
      // it.
      result = ret.getOperand(0);
      while (isa_and_nonnull<ReshapeOp, ShardOp>(result.getDefiningOp()))
        result = result.getDefiningOp()->getOperand(0);
      resultOutputs[result] =
          buffer(abi.resultBuffer, rtir::BufferKind::output, result.getType());
      if (bufferType(resultOutputs[result]) != result.getType())
        return func.emitError("mlt-lower-to-runtime: @")
               << func.getSymName() << " returns " << result.getType()
               << ", but the buffer '" << abi.resultBuffer << "' is "
               << bufferType(resultOutputs[result]);
      if (auto count = func->getAttrOfType<IntegerAttr>(
              MLTDialect::getMicrobatchesAttrName()))
        bufferOpOf(resultOutputs[result].getAttr())
            .setPerMicrobatchAttr(count);
    }

    b.setInsertionPointToEnd(module.getBody());
    auto program = rtir::ProgramOp::create(b, func.getLoc(), abi.program);
    programs[abi.program] = program;
    b.setInsertionPointToStart(&program.getBody().emplaceBlock());
    for (Operation &op : body.without_terminator())
      if (failed(lowerOp(&op)))
        return failure();
    if (result && values.lookup(result) != resultOutputs.lookup(result))
      return ret.emitOpError("returns a value that no kernel computes");
    return success();
  }


  ModuleOp module;
  OpBuilder b;
  /// The module's mesh; null for a program of one rank.
  MeshAttr mesh;
  rtir::BufferOp lastBuffer;
  llvm::StringMap<FlatSymbolRefAttr> buffers;
  /// The buffers and parameters by name (the module's symbol lookups are
  /// linear scans: looking up each of a 1000-layer model's buffers that way
  /// made lowering quadratic in the layers).
  DenseMap<StringAttr, rtir::BufferOp> bufferOps;
  DenseMap<StringAttr, ParamOp> paramOps;

  rtir::BufferOp bufferOpOf(StringAttr name) const {
    return bufferOps.lookup(name);
  }
  ParamOp paramOf(StringAttr name) {
    if (paramOps.empty())
      for (ParamOp param : module.getOps<ParamOp>())
        paramOps[param.getSymNameAttr()] = param;
    return paramOps.lookup(name);
  }
  /// The kind of each buffer, by name.
  DenseMap<StringAttr, rtir::BufferKind> kinds;
  DenseMap<Value, FlatSymbolRefAttr> values;
  DenseMap<Value, FlatSymbolRefAttr> resultOutputs;
  /// The softmax statistics that each attention result's kernel saved.
  DenseMap<Value, FlatSymbolRefAttr> attentionStats;
  /// The global log-sum-exp of each row that a split cross-entropy's
  /// kernels computed, by its logits value, for the matching gradient.
  DenseMap<Value, FlatSymbolRefAttr> crossEntropyStats;
  int64_t nextTemporary = 0;
  llvm::StringMap<rtir::ProgramOp> programs;
  /// Compute copies that the optimizer's adamw launches refresh.
  DenseSet<StringAttr> refreshedByOptimizer;
  /// Weight gradients that their kernel added into the gradient buffer.
  DenseSet<Value> accumulatedInPlace;
  /// Adds that a kernel computed with its own output (matmul_add,
  /// rms_norm_bwd_add).
  DenseSet<Operation *> addedByProduct;
  /// Cross-entropy gradients that their forward's launch computed
  /// (cross_entropy_fwd_bwd).
  DenseSet<Operation *> computedWithLoss;
  /// The inverse mlt.rope ops that an attention_bwd_rope launch computes
  /// (rotatingGradients).
  DenseSet<Operation *> rotatedByAttention;
  /// The Constant buffer of each constant op.
  DenseMap<Operation *, FlatSymbolRefAttr> constants;
  /// The Constant buffers of loss-gradient seeds (mlt.loss_seed).
  DenseSet<StringAttr> lossSeeds;
  /// Whether the program being lowered writes the gradients (the first
  /// micro-batch's), and the gradient buffers it has written so far: the
  /// first contribution to each overwrites it, later ones add.
  bool writesGradients = false;
  DenseSet<StringAttr> writtenGradients;
  /// Whether this contribution to `grad` overwrites it (see above), noting
  /// that it is written.
  bool overwrites(FlatSymbolRefAttr grad) {
    return writesGradients && writtenGradients.insert(grad.getAttr()).second;
  }

  /// The buffer a kernel's output `v` goes to: in micro_step_first, when `v`
  /// is a weight gradient that only goes into its parameter's gradient, of
  /// that buffer's type, and the first contribution to it, the gradient
  /// buffer itself (written by the kernel, no copy); else a new temporary.
  FlatSymbolRefAttr defineOrWriteGradient(Value v) {
    if (writesGradients && v.hasOneUse())
      if (auto accumulate = dyn_cast<AccumulateGradOp>(*v.getUsers().begin())) {
        FailureOr<FlatSymbolRefAttr> grad =
            stateBuffer(accumulate, abi::kGradientPrefix,
                        accumulate.getNameAttr(), accumulate.getLayer());
        if (succeeded(grad) && *grad &&
            bufferType(*grad) == gradientOutputType(v).value_or(v.getType()) &&
            overwrites(*grad)) {
          values[v] = *grad;
          accumulatedInPlace.insert(v);
          return *grad;
        }
      }
    return define(v);
  }

  /// Erases `program` and the temporaries and constants only it uses.
  void dropProgram(rtir::ProgramOp program) {
    auto used = [](rtir::ProgramOp p, DenseSet<StringAttr> &names) {
      p.walk([&](rtir::LaunchOp launch) {
        for (ArrayAttr list : {launch.getInputs(), launch.getOutputs()})
          for (Attribute ref : list)
            names.insert(cast<FlatSymbolRefAttr>(ref).getAttr());
      });
    };
    DenseSet<StringAttr> mine, others;
    used(program, mine);
    programs.erase(program.getSymName());
    program.erase();
    for (auto &entry : programs)
      used(entry.second, others);
    for (StringAttr name : mine) {
      auto buffer = bufferOpOf(name);
      if (buffer && !others.contains(name) &&
          (buffer.getKind() == rtir::BufferKind::temporary ||
           buffer.getKind() == rtir::BufferKind::constant)) {
        buffers.erase(name.getValue());
        bufferOps.erase(name);
        kinds.erase(name);
        if (buffer == lastBuffer)
          lastBuffer = {};
        buffer.erase();
      }
    }
  }

  /// Each (Parameter, ParameterCopy) buffer pair, in creation order.
  SmallVector<std::pair<FlatSymbolRefAttr, FlatSymbolRefAttr>> parameterCopies;
  /// The same, by parameter: its copies in creation order.
  DenseMap<StringAttr, SmallVector<FlatSymbolRefAttr, 1>> copiesOf;
};

LogicalResult RuntimeLowering::lowerOp(Operation *op) {
  Location loc = op->getLoc();
  // Index arithmetic only selects layers; state ops resolve it to names.
  if (op->getNumResults() > 0 && isMemoryEffectFree(op) &&
      llvm::all_of(op->getResultTypes(), [](Type t) { return t.isIndex(); }))
    return success();
  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](arith::ConstantOp c) -> LogicalResult {
        return success(bool(constantBuffer(c)));
      })
      .Case([&](LoadOp load) -> LogicalResult {
        auto ref = stateBuffer(load, abi::kParameterPrefix, load.getNameAttr(),
                               load.getLayer());
        if (failed(ref))
          return failure();
        values[load.getResult()] = *ref;
        // A load in another element type reads the compute copy.
        if (load.getType() != bufferType(*ref))
          values[load.getResult()] = parameterCopy(*ref, load.getType());
        return success();
      })
      .Case([&](LoadGradOp load) -> LogicalResult {
        auto ref = stateBuffer(load, abi::kGradientPrefix, load.getNameAttr(),
                               load.getLayer());
        if (failed(ref))
          return failure();
        values[load.getResult()] = *ref;
        return success();
      })
      .Case([&](HyperparameterOp h) -> LogicalResult {
        values[h.getResult()] = buffer(("hyper." + h.getHyperparameter()).str(),
                                       rtir::BufferKind::input, h.getType());
        return success();
      })
      .Case([&](ReshapeOp r) -> LogicalResult {
        // Row-major data is unchanged: the result names the same buffer.
        values[r.getResult()] = valueBuffer(r.getInput());
        return success();
      })
      .Case([&](ShardOp s) -> LogicalResult {
        // A layout constraint (mlt-spmdize realizes and removes them): the
        // data is the input's.
        values[s.getResult()] = valueBuffer(s.getInput());
        return success();
      })
      .Case([&](EmbeddingOp e) -> LogicalResult {
        auto table = shapeOf(e.getTable());
        FailureOr<std::optional<MeshAxisRef>> vocab = vocabAxis(e);
        if (failed(vocab))
          return failure();
        if (*vocab) { // This rank's rows of a table split along the vocabulary.
          using A = rt::attrs::EmbeddingFwdVP;
          launch<A>(loc, operandBuffers(e), {define(e.getResult())},
                    {{A::tokens, numElements(e.getIds())},
                     {A::vocab_local, table[0]},
                     {A::hidden, table[1]},
                     {A::axis, (*vocab)->index}});
        } else {
          using A = rt::attrs::EmbeddingFwd;
          launch<A>(loc, operandBuffers(e), {define(e.getResult())},
                    {{A::tokens, numElements(e.getIds())},
                     {A::vocab, table[0]},
                     {A::hidden, table[1]}});
        }
        return success();
      })
      .Case([&](EmbeddingGradOp e) -> LogicalResult {
        auto table = shapeOf(e.getResult());
        FailureOr<std::optional<MeshAxisRef>> vocab = vocabAxis(e);
        if (failed(vocab))
          return failure();
        FlatSymbolRefAttr dtable = defineOrWriteGradient(e.getResult());
        if (*vocab) {
          using A = rt::attrs::EmbeddingBwdVP;
          launch<A>(loc, operandBuffers(e), {dtable},
                    {{A::tokens, numElements(e.getIds())},
                     {A::vocab_local, table[0]},
                     {A::hidden, table[1]},
                     {A::axis, (*vocab)->index}});
        } else {
          using A = rt::attrs::EmbeddingBwd;
          launch<A>(loc, operandBuffers(e), {dtable},
                    {{A::tokens, numElements(e.getIds())},
                     {A::vocab, table[0]},
                     {A::hidden, table[1]}});
        }
        return success();
      })
      .Case([&](MatmulOp m) -> LogicalResult {
        auto lhs = shapeOf(m.getLhs()), rhs = shapeOf(m.getRhs());
        bool tl = m.getTransposeLhs(), tr = m.getTransposeRhs();
        // A weight gradient that only accumulates into its parameter's
        // gradient is added there by the product itself.
        // A product only added to a value computed before it (a residual,
        // or another product of the same gradient) is added by the product's
        // epilogue, and the add disappears.
        using A = rt::attrs::Matmul;
        rt::Kernel kernel = rt::Kernel::Matmul;
        FlatSymbolRefAttr result;
        SmallVector<FlatSymbolRefAttr> ins = operandBuffers(m);
        if (auto grad = accumulatedGradient(m.getResult())) {
          kernel = overwrites(*grad) ? rt::Kernel::Matmul
                                     : rt::Kernel::MatmulAccumulate;
          result = *grad;
          values[m.getResult()] = result;
          accumulatedInPlace.insert(m.getResult());
        } else if (auto sum = addedTo(m.getResult())) {
          kernel = rt::Kernel::MatmulAdd;
          ins.push_back(sum->second);
          result = define(sum->first.getResult());
          addedByProduct.insert(sum->first);
        } else {
          result = define(m.getResult());
        }
        if (m.getContractBatch()) {
          // [b..., k, m]^T [b..., k, n]: one matmul over all b * k rows.
          int64_t cols = lhs.back(), n = rhs.back();
          launch<A>(loc, kernel, ins, {result},
                    {{A::batch, 1},
                     {A::m, cols},
                     {A::n, n},
                     {A::k, numElements(m.getLhs()) / cols},
                     {A::transpose_a, 1},
                     {A::transpose_b, 0},
                     {A::b_batched, 0}});
          return success();
        }
        int64_t rank = lhs.size();
        int64_t batch = 1;
        for (int64_t d : lhs.drop_back(2))
          batch *= d;
        int64_t rows = tl ? lhs[rank - 1] : lhs[rank - 2];
        int64_t k = tl ? lhs[rank - 2] : lhs[rank - 1];
        int64_t n = tr ? rhs[rhs.size() - 2] : rhs[rhs.size() - 1];
        bool bBatched = rhs.size() > 2;
        // A weight shared by every batch entry: one matmul over all rows.
        if (!bBatched && !tl) {
          rows *= batch;
          batch = 1;
        }
        launch<A>(loc, kernel, ins, {result},
                  {{A::batch, batch},
                   {A::m, rows},
                   {A::n, n},
                   {A::k, k},
                   {A::transpose_a, tl},
                   {A::transpose_b, tr},
                   {A::b_batched, bBatched}});
        return success();
      })
      .Case([&](RMSNormOp r) -> LogicalResult {
        using A = rt::attrs::RMSNormFwd;
        int64_t dim = shapeOf(r.getInput()).back();
        launch<A>(loc, operandBuffers(r), {define(r.getResult())},
                  {{A::rows, numElements(r.getInput()) / dim}, {A::dim, dim}},
                  {{A::eps, r.getEpsilon().convertToDouble()}});
        return success();
      })
      .Case([&](RMSNormGradOp r) -> LogicalResult {
        int64_t dim = shapeOf(r.getInput()).back();
        // An input gradient only added to a gradient computed before it (the
        // residual stream's) gets the sum from the kernel itself.
        using A = rt::attrs::RMSNormBwd;
        SmallVector<FlatSymbolRefAttr> ins = operandBuffers(r);
        rt::Kernel kernel = rt::Kernel::RMSNormBwd;
        FlatSymbolRefAttr dx;
        if (auto sum = addedTo(r.getInputGrad())) {
          kernel = rt::Kernel::RMSNormBwdAdd;
          ins.push_back(sum->second);
          dx = define(sum->first.getResult());
          addedByProduct.insert(sum->first);
        } else {
          dx = define(r.getInputGrad());
        }
        launch<A>(loc, kernel, ins,
                  {dx, defineOrWriteGradient(r.getWeightGrad())},
                  {{A::rows, numElements(r.getInput()) / dim}, {A::dim, dim}},
                  {{A::eps, r.getEpsilon().convertToDouble()}});
        return success();
      })
      .Case([&](RopeOp r) -> LogicalResult {
        if (rotatedByAttention.contains(r))
          return success(); // attention_bwd_rope's
        using A = rt::attrs::Rope;
        auto s = shapeOf(r.getInput());
        const rt::RopeScaling scaling = r.getRopeScaling();
        FailureOr<int64_t> axis = sequenceAxis(r);
        if (failed(axis))
          return failure();
        launch<A>(loc, operandBuffers(r), {define(r.getResult())},
                  {{A::batch, s[0]},
                   {A::seq, s[1]},
                   {A::heads, s[2]},
                   {A::head_dim, s[3]},
                   {A::inverse, r.getInverse()},
                   {A::position_offset, 0},
                   {A::scaling, int64_t(scaling.kind)},
                   {A::original_max_position_embeddings,
                    scaling.originalMaxPositionEmbeddings},
                   {A::axis, *axis}},
                  {{A::theta, r.getTheta().convertToDouble()},
                   {A::factor, scaling.factor},
                   {A::low_freq_factor, scaling.lowFreqFactor},
                   {A::high_freq_factor, scaling.highFreqFactor}});
        return success();
      })
      .Case([&](AttentionOp a) -> LogicalResult {
        auto q = shapeOf(a.getQuery());
        // The softmax statistics are kept in at least f32, in the query's
        // type when it is wider: the backward recomputes the probabilities
        // from them, and the kernels take them in the type they compute in.
        Type qElement =
            cast<RankedTensorType>(a.getQuery().getType()).getElementType();
        auto stats = RankedTensorType::get(
            {q[0], q[2], q[1]}, qElement.isF64() ? qElement : b.getF32Type());
        FlatSymbolRefAttr lse = temporary(stats);
        attentionStats[a.getResult()] = lse;
        FailureOr<int64_t> axis = sequenceAxis(a);
        if (failed(axis))
          return failure();
        launchAttention(loc, rt::Kernel::AttentionFwd, operandBuffers(a),
                        {define(a.getResult()), lse}, a.getQuery(), a.getKey(),
                        a.getCausal(), a.getScaleAttr(), *axis);
        return success();
      })
      .Case([&](AttentionGradOp a) -> LogicalResult {
        FlatSymbolRefAttr lse = attentionStats.lookup(a.getOutput());
        if (!lse)
          return a.emitOpError("takes an output that no mlt.attention of "
                               "this program computed");
        auto q = shapeOf(a.getQuery()), k = shapeOf(a.getKey());
        SmallVector<FlatSymbolRefAttr> ins = operandBuffers(a);
        ins.push_back(lse);
        FailureOr<int64_t> axis = sequenceAxis(a);
        if (failed(axis))
          return failure();
        if (auto ropes = rotatingGradients(a)) {
          auto [dqRope, dkRope] = *ropes;
          rotatedByAttention.insert(dqRope);
          rotatedByAttention.insert(dkRope);
          const rt::RopeScaling scaling = dqRope.getRopeScaling();
          using A = rt::attrs::AttentionBwdRope;
          launch<A>(loc, ins,
                    {define(dqRope.getResult()), define(dkRope.getResult()),
                     define(a.getValueGrad())},
                    {{A::batch, q[0]},
                     {A::seq, q[1]},
                     {A::kv_seq, k[1]},
                     {A::q_heads, q[2]},
                     {A::kv_heads, k[2]},
                     {A::head_dim, q[3]},
                     {A::causal, a.getCausal()},
                     {A::axis, *axis},
                     {A::ring, 0},
                     {A::ring_step, 0},
                     {A::position_offset, 0},
                     {A::scaling, int64_t(scaling.kind)},
                     {A::original_max_position_embeddings,
                      scaling.originalMaxPositionEmbeddings}},
                    {{A::scale, a.getScale().convertToDouble()},
                     {A::theta, dqRope.getTheta().convertToDouble()},
                     {A::factor, scaling.factor},
                     {A::low_freq_factor, scaling.lowFreqFactor},
                     {A::high_freq_factor, scaling.highFreqFactor}});
          return success();
        }
        launchAttention(loc, rt::Kernel::AttentionBwd, ins,
                        {define(a.getQueryGrad()), define(a.getKeyGrad()),
                         define(a.getValueGrad())},
                        a.getQuery(), a.getKey(), a.getCausal(),
                        a.getScaleAttr(), *axis);
        return success();
      })
      .Case([&](AttentionBlockOp a) -> LogicalResult {
        // A ring step: the rank's queries against one rank's block of keys.
        FailureOr<MeshAxisRef> axis = meshAxis(a, a.getAxis());
        if (failed(axis))
          return failure();
        launchAttention(loc, rt::Kernel::AttentionFwd, operandBuffers(a),
                        {define(a.getResult()), define(a.getLse())},
                        a.getQuery(), a.getKey(), a.getCausal(),
                        a.getScaleAttr(), axis->index, int64_t(a.getStep()));
        return success();
      })
      .Case([&](AttentionBlockGradOp a) -> LogicalResult {
        FailureOr<MeshAxisRef> axis = meshAxis(a, a.getAxis());
        if (failed(axis))
          return failure();
        launchAttention(loc, rt::Kernel::AttentionBwd, operandBuffers(a),
                        {define(a.getQueryGrad()), define(a.getKeyGrad()),
                         define(a.getValueGrad())},
                        a.getQuery(), a.getKey(), a.getCausal(),
                        a.getScaleAttr(), axis->index, int64_t(a.getStep()));
        return success();
      })
      .Case([&](AttentionMergeOp m) -> LogicalResult {
        auto o = shapeOf(m.getOutA());
        using A = rt::attrs::AttentionMerge;
        launch<A>(loc, operandBuffers(m),
                  {define(m.getResult()), define(m.getLse())},
                  {{A::batch, o[0]},
                   {A::seq, o[1]},
                   {A::heads, o[2]},
                   {A::head_dim, o[3]}});
        return success();
      })
      .Case([&](SwiGLUOp s) -> LogicalResult {
        using A = rt::attrs::SwiGLUFwd;
        launch<A>(loc, operandBuffers(s), {define(s.getResult())},
                  {{A::n, numElements(s.getResult())}});
        return success();
      })
      .Case([&](SwiGLUGradOp s) -> LogicalResult {
        using A = rt::attrs::SwiGLUBwd;
        launch<A>(loc, operandBuffers(s),
                  {define(s.getGateGrad()), define(s.getUpGrad())},
                  {{A::n, numElements(s.getGrad())}});
        return success();
      })
      .Case([&](SiLUOp s) -> LogicalResult {
        using A = rt::attrs::SiLUFwd;
        launch<A>(loc, operandBuffers(s), {define(s.getResult())},
                  {{A::n, numElements(s.getResult())}});
        return success();
      })
      .Case([&](SiLUGradOp s) -> LogicalResult {
        using A = rt::attrs::SiLUBwd;
        launch<A>(loc, operandBuffers(s), {define(s.getResult())},
                  {{A::n, numElements(s.getResult())}});
        return success();
      })
      .Case([&](AddOp a) -> LogicalResult {
        if (addedByProduct.contains(a))
          return success(); // matmul_add or rms_norm_bwd_add computed it
        using A = rt::attrs::Add;
        launch<A>(loc, operandBuffers(a), {define(a.getResult())},
                  {{A::n, numElements(a.getResult())}});
        return success();
      })
      .Case([&](MulOp m) -> LogicalResult {
        using A = rt::attrs::Mul;
        launch<A>(loc, operandBuffers(m), {define(m.getResult())},
                  {{A::n, numElements(m.getResult())}});
        return success();
      })
      .Case([&](TransposeOp t) -> LogicalResult {
        launch(loc, "transpose", operandBuffers(t), {define(t.getResult())},
               rt::transposeInts(shapeOf(t.getInput()), t.getPermutation()));
        return success();
      })
      .Case([&](CastOp c) -> LogicalResult {
        using A = rt::attrs::Cast;
        launch<A>(loc, operandBuffers(c), {define(c.getResult())},
                  {{A::n, numElements(c.getResult())}});
        return success();
      })
      .Case([&](CrossEntropyOp c) { return lowerCrossEntropy(c); })
      .Case([&](CrossEntropyGradOp c) { return lowerCrossEntropyGrad(c); })
      .Case<AllReduceOp, AllGatherOp, ReduceScatterOp, ShardSliceOp,
            AllToAllOp, ReorderSequenceOp, CollectivePermuteOp>(
          [&](Operation *collective) { return lowerCollective(collective); })
      .Case([&](SendOp send) -> LogicalResult {
        FailureOr<MeshAxisRef> axis = meshAxis(send, send.getAxis());
        if (failed(axis))
          return failure();
        using A = rt::attrs::Send;
        launch<A>(loc, {valueBuffer(send.getInput())}, {},
                  {{A::n, numElements(send.getInput())},
                   {A::axis, axis->index},
                   {A::shift, send.getShiftAttr().getInt()}});
        return success();
      })
      .Case([&](RecvOp recv) -> LogicalResult {
        FailureOr<MeshAxisRef> axis = meshAxis(recv, recv.getAxis());
        if (failed(axis))
          return failure();
        FlatSymbolRefAttr out = define(recv.getResult());
        // A received gradient seeds the stage's backward pass.
        if (recv->hasAttr(MLTDialect::getLossSeedAttrName()))
          lossSeeds.insert(out.getAttr());
        using A = rt::attrs::Recv;
        launch<A>(loc, {}, {out},
                  {{A::n, numElements(recv.getResult())},
                   {A::axis, axis->index},
                   {A::shift, recv.getShiftAttr().getInt()}});
        return success();
      })
      .Case([&](AccumulateGradOp a) -> LogicalResult {
        if (accumulatedInPlace.contains(a.getValue()))
          return success(); // matmul_accumulate added it
        auto grad =
            stateBuffer(a, abi::kGradientPrefix, a.getNameAttr(), a.getLayer());
        if (failed(grad))
          return failure();
        // The first contribution in micro_step_first is copied (and widened
        // to f32 from bf16), the others added.
        using A = rt::attrs::Accumulate;
        launch<A>(loc,
                  overwrites(*grad) ? rt::Kernel::Cast : rt::Kernel::Accumulate,
                  {valueBuffer(a.getValue())}, {*grad},
                  {{A::n, numElements(a.getValue())}});
        return success();
      })
      .Case([&](SumSquaresOp s) -> LogicalResult {
        using A = rt::attrs::SumSquares;
        launch<A>(loc, operandBuffers(s), {define(s.getResult())},
                  {{A::n, numElements(s.getInput())}});
        return success();
      })
      .Case([&](GlobalNormOp g) -> LogicalResult {
        launch<rt::attrs::GlobalNorm>(loc, operandBuffers(g),
                                      {define(g.getResult())}, {});
        return success();
      })
      .Case([&](ClipCoefficientOp c) -> LogicalResult {
        launch<rt::attrs::ClipCoefficient>(loc, operandBuffers(c),
                                           {define(c.getResult())}, {});
        return success();
      })
      .Case([&](AdamWOp a) -> LogicalResult {
        auto param = stateBuffer(a, abi::kParameterPrefix, a.getNameAttr(),
                                 a.getLayer());
        auto m =
            stateBuffer(a, abi::kExpAvgPrefix, a.getNameAttr(), a.getLayer());
        auto v =
            stateBuffer(a, abi::kExpAvgSqPrefix, a.getNameAttr(), a.getLayer());
        if (failed(param) || failed(m) || failed(v))
          return failure();
        SmallVector<FlatSymbolRefAttr> ins = llvm::map_to_vector(
            ValueRange{a.getGrad(), a.getGradScale(), a.getLr(), a.getBeta1(),
                       a.getBeta2(), a.getEps(), a.getWeightDecay(),
                       a.getStep()},
            [&](Value v) { return valueBuffer(v); });
        SmallVector<FlatSymbolRefAttr> outs = {*param, *m, *v};
        // The compute copy is refreshed in the same pass.
        for (FlatSymbolRefAttr copy : copiesOf.lookup(param->getAttr())) {
          outs.push_back(copy);
          refreshedByOptimizer.insert(copy.getAttr());
        }
        if (outs.size() > 4)
          return a.emitOpError("updates a parameter with several compute "
                               "copies; adamw refreshes one");
        using A = rt::attrs::AdamW;
        launch<A>(loc, ins, outs,
                  {{A::n, numElements(a.getGrad())}, {A::decay, a.getDecay()}});
        return success();
      })
      .Default([&](Operation *other) {
        return other->emitOpError("cannot be lowered to the runtime: no "
                                  "kernel computes it");
      });
}

/// Whether a cross-entropy (or its gradient) is a per-rank share of a split
/// one: its rows, or its vocabulary, or both, are split over the mesh.
bool isSplitCrossEntropy(Operation *op) {
  return op->hasAttr(MLTDialect::getRowCountAttrName()) ||
         op->hasAttr(MLTDialect::getVocabShardAttrName());
}

/// The global number of rows of a split cross-entropy's mean: `mlt.row_count`,
/// or the rank's own rows when only the vocabulary is split.
int64_t rowCountOf(Operation *op, int64_t localRows) {
  if (auto count =
          op->getAttrOfType<IntegerAttr>(MLTDialect::getRowCountAttrName()))
    return count.getInt();
  return localRows;
}

LogicalResult RuntimeLowering::lowerCrossEntropy(CrossEntropyOp c) {
  Location loc = c.getLoc();
  int64_t vocab = shapeOf(c.getLogits()).back();
  int64_t rows = numElements(c.getLogits()) / vocab;
  if (CrossEntropyGradOp grad = fusedGradient(c)) {
    FlatSymbolRefAttr seed =
        constantBuffer(grad.getGrad().getDefiningOp<arith::ConstantOp>());
    if (!seed)
      return failure();
    computedWithLoss.insert(grad);
    using A = rt::attrs::CrossEntropyFwdBwd;
    launch<A>(loc,
              {seed, valueBuffer(c.getLogits()), valueBuffer(c.getLabels())},
              {define(c.getResult()), define(grad.getResult())},
              {{A::rows, rows},
               {A::vocab, vocab},
               {A::row_count, rowCountOf(c, rows)}});
    return success();
  }
  if (!isSplitCrossEntropy(c)) {
    using A = rt::attrs::CrossEntropyFwd;
    launch<A>(loc, operandBuffers(c), {define(c.getResult())},
              {{A::rows, rows}, {A::vocab, vocab}});
    return success();
  }
  // Each rank's statistics of its logits block; with the vocabulary split,
  // the parts of every row's log-sum-exp are gathered and the target logits
  // (nonzero on the one rank holding the label's column) summed; then the
  // global log-sum-exp and this rank's share of the mean loss.
  FailureOr<std::optional<MeshAxisRef>> vocabShard = vocabAxis(c);
  if (failed(vocabShard))
    return failure();
  MeshAxisRef axis = vocabShard->value_or(MeshAxisRef());
  // Statistics in the loss's type: f32 (f64 for an f64 model) whatever the
  // logits' (Kernels.def's element types).
  auto rowsType = RankedTensorType::get({rows}, elementTypeOf(c.getResult()));
  FlatSymbolRefAttr partial = temporary(rowsType);
  FlatSymbolRefAttr target = temporary(rowsType);
  using Stats = rt::attrs::CrossEntropyStats;
  launch<Stats>(loc, operandBuffers(c), {partial, target},
                {{Stats::rows, rows},
                 {Stats::vocab_local, vocab},
                 {Stats::axis, axis.index}});
  FlatSymbolRefAttr parts = partial;
  if (*vocabShard) {
    parts = temporary(
        RankedTensorType::get({axis.size * rows}, rowsType.getElementType()));
    using Gather = rt::attrs::AllGather;
    using Sum = rt::attrs::AllReduceSum;
    launch<Gather>(loc, {partial}, {parts},
                   {{Gather::n_in, rows}, {Gather::axis, axis.index}});
    launch<Sum>(loc, {target}, {target},
                {{Sum::n, rows}, {Sum::axis, axis.index}});
  }
  FlatSymbolRefAttr lse = temporary(rowsType);
  crossEntropyStats[c.getLogits()] = lse;
  using Combine = rt::attrs::CrossEntropyCombine;
  launch<Combine>(loc, {parts, target}, {lse, define(c.getResult())},
                  {{Combine::rows, rows},
                   {Combine::num_parts, axis.size},
                   {Combine::row_count, rowCountOf(c, rows)}});
  return success();
}

LogicalResult RuntimeLowering::lowerCrossEntropyGrad(CrossEntropyGradOp c) {
  if (computedWithLoss.contains(c))
    return success(); // cross_entropy_fwd_bwd computed it
  Location loc = c.getLoc();
  int64_t vocab = shapeOf(c.getLogits()).back();
  int64_t rows = numElements(c.getLogits()) / vocab;
  if (!isSplitCrossEntropy(c)) {
    using A = rt::attrs::CrossEntropyBwd;
    launch<A>(loc, operandBuffers(c), {define(c.getResult())},
              {{A::rows, rows}, {A::vocab, vocab}});
    return success();
  }
  FailureOr<std::optional<MeshAxisRef>> vocabShard = vocabAxis(c);
  if (failed(vocabShard))
    return failure();
  FlatSymbolRefAttr lse = crossEntropyStats.lookup(c.getLogits());
  if (!lse)
    return c.emitOpError("takes logits whose statistics no split "
                         "mlt.cross_entropy of this program computed");
  SmallVector<FlatSymbolRefAttr> ins = operandBuffers(c);
  ins.push_back(lse);
  using A = rt::attrs::CrossEntropyBwdStats;
  launch<A>(loc, ins, {define(c.getResult())},
            {{A::rows, rows},
             {A::vocab_local, vocab},
             {A::axis, vocabShard->value_or(MeshAxisRef()).index},
             {A::row_count, rowCountOf(c, rows)}});
  return success();
}

/// The collectives, and the local slice, of a per-rank program. Those of a
/// dimension `d` view the tensor as [outer, n, inner] around it: the
/// runtime's all_gather and reduce_scatter_sum concatenate and split whole
/// buffers, that is along the outermost dimension, so for outer > 1 one
/// transpose moves the ranks' blocks outermost on the side where the
/// buffer holds every rank's ([outer, ranks, block, inner] to [ranks,
/// outer, block, inner]: after the gather, before the scatter); a rank's
/// own block, [outer, block, inner], is the collective's other side as it
/// is.
LogicalResult RuntimeLowering::lowerCollective(Operation *op) {
  Location loc = op->getLoc();
  StringRef axisName;
  int64_t dim = -1;
  if (auto reduce = dyn_cast<AllReduceOp>(op))
    axisName = reduce.getAxis();
  else if (auto gather = dyn_cast<AllGatherOp>(op))
    std::tie(axisName, dim) = std::pair(gather.getAxis(), gather.getDim());
  else if (auto scatter = dyn_cast<ReduceScatterOp>(op))
    std::tie(axisName, dim) = std::pair(scatter.getAxis(), scatter.getDim());
  else if (auto slice = dyn_cast<ShardSliceOp>(op))
    std::tie(axisName, dim) = std::pair(slice.getAxis(), slice.getDim());
  else if (auto exchange = dyn_cast<AllToAllOp>(op))
    axisName = exchange.getAxis();
  else if (auto reorder = dyn_cast<ReorderSequenceOp>(op))
    std::tie(axisName, dim) = std::pair(reorder.getAxis(), reorder.getDim());
  else if (auto permute = dyn_cast<CollectivePermuteOp>(op))
    axisName = permute.getAxis();
  FailureOr<MeshAxisRef> axis = meshAxis(op, axisName);
  if (failed(axis))
    return failure();
  Value input = op->getOperand(0), result = op->getResult(0);
  if (auto reorder = dyn_cast<ReorderSequenceOp>(op);
      reorder && exchangeFoldingReorder(reorder)) {
    // The exchange moves the chunks (below): after it, its launch defined
    // this result; before it, it reads this input.
    if (!reorder.getToNatural())
      values[result] = valueBuffer(input);
    return success();
  }
  FlatSymbolRefAttr in = valueBuffer(input);

  if (auto permute = dyn_cast<CollectivePermuteOp>(op)) {
    launch(loc, rt::kernelName(rt::Kernel::CollectivePermute), {in},
           {define(result)},
           rt::collectiveInts(rt::Kernel::CollectivePermute,
                              {numElements(input), axis->index,
                               int64_t(permute.getShift())}));
    return success();
  }

  if (auto exchange = dyn_cast<AllToAllOp>(op)) {
    // A reorder of the sequence beside the exchange, folded into it.
    rt::BlockOrder order = rt::BlockOrder::Blocks;
    Value produced = result;
    if (auto before = input.getDefiningOp<ReorderSequenceOp>();
        before && exchangeFoldingReorder(before) == exchange) {
      order = rt::BlockOrder::FromNatural; // `in` is the reorder's input
    } else if (auto after = result.hasOneUse()
                                ? dyn_cast<ReorderSequenceOp>(
                                      *result.getUsers().begin())
                                : ReorderSequenceOp();
               after && exchangeFoldingReorder(after) == exchange) {
      order = rt::BlockOrder::ToNatural;
      produced = after.getResult();
    }
    // The runtime's all_to_all sends a buffer's G outermost blocks, one to
    // each member, and receives G blocks, one from each: a transpose moves
    // the blocks of `split` outermost before it ([outer, ranks, block,
    // inner] to [ranks, outer, block, inner]), and one after it moves the
    // received blocks into `concat` ([ranks, outer, block, inner], the
    // blocks of the rank-shaped value, to [outer, ranks, block, inner]).
    // Either is left out where its outer extent is 1.
    Type element = elementTypeOf(input);
    const int64_t ranks = axis->size;
    const int64_t split = exchange.getSplit(), concat = exchange.getConcat();
    SmallVector<int64_t> blockShape(shapeOf(input));
    blockShape[split] /= ranks;
    auto rankMajor = [&](ArrayRef<int64_t> shape) {
      SmallVector<int64_t> withRanks{ranks};
      withRanks.append(shape.begin(), shape.end());
      return temporary(RankedTensorType::get(withRanks, element));
    };
    DimSplit sent = splitAround(blockShape, split);
    FlatSymbolRefAttr outgoing = in;
    if (sent.outer > 1) {
      outgoing = rankMajor(blockShape);
      launch(loc, "transpose", {in}, {outgoing},
             swapOuterInts(sent.outer, ranks, sent.size, sent.inner));
    }
    DimSplit received = splitAround(blockShape, concat);
    std::vector<int64_t> ints =
        rt::collectiveInts(rt::Kernel::AllToAll,
                           {numElements(input) / ranks, axis->index, 0,
                            int64_t(order)});
    if (received.outer == 1) {
      launch(loc, rt::kernelName(rt::Kernel::AllToAll), {outgoing},
             {define(produced)}, ints);
      return success();
    }
    FlatSymbolRefAttr incoming = rankMajor(blockShape);
    launch(loc, rt::kernelName(rt::Kernel::AllToAll), {outgoing}, {incoming},
           ints);
    launch(loc, "transpose", {incoming}, {define(result)},
           swapOuterInts(ranks, received.outer, received.size,
                         received.inner));
    return success();
  }

  if (isa<AllReduceOp>(op)) {
    // A gradient buffer is reduced in place, so that after optimizer_step it
    // holds the complete gradient (Plan.fbs); unless a later op still reads
    // the partial sums, which then stay there.
    bool inPlace = isGradientBuffer(in) && !resultOutputs.count(result) &&
                   llvm::all_of(input.getUsers(), [&](Operation *user) {
                     return user == op || (user->getBlock() == op->getBlock() &&
                                           user->isBeforeInBlock(op));
                   });
    FlatSymbolRefAttr out = inPlace ? in : define(result);
    values[result] = out;
    using A = rt::attrs::AllReduceSum;
    launch<A>(loc, {in}, {out},
              {{A::n, numElements(input)}, {A::axis, axis->index}});
    return success();
  }

  if (auto reorder = dyn_cast<ReorderSequenceOp>(op)) {
    using A = rt::attrs::ReorderSequence;
    DimSplit rows = splitAround(shapeOf(result), dim);
    launch<A>(loc, {in}, {define(result)},
              {{A::outer, rows.outer},
               {A::ranks, axis->size},
               {A::chunk, rows.size / (2 * axis->size)},
               {A::inner, rows.inner},
               {A::to_natural, reorder.getToNatural() ? 1 : 0}});
    return success();
  }

  if (isa<ShardSliceOp>(op)) {
    using A = rt::attrs::ShardSlice;
    DimSplit block = splitAround(shapeOf(result), dim);
    launch<A>(loc, {in}, {define(result)},
              {{A::outer, block.outer},
               {A::n, block.size},
               {A::inner, block.inner},
               {A::axis, axis->index}});
    return success();
  }

  bool gather = isa<AllGatherOp>(op);
  rt::Kernel kernel =
      gather ? rt::Kernel::AllGather : rt::Kernel::ReduceScatterSum;
  // all_gather counts its input, reduce_scatter_sum its output.
  std::vector<int64_t> ints = rt::collectiveInts(
      kernel, {gather ? numElements(input) : numElements(result), axis->index});
  DimSplit from = splitAround(shapeOf(input), dim);
  DimSplit to = splitAround(shapeOf(result), dim);
  if (from.outer == 1) {
    launch(loc, rt::kernelName(kernel), {in}, {define(result)}, ints);
    return success();
  }
  // One transpose around the collective, whose buffers are rank-major
  // ([ranks, outer, block, inner], block = the per-rank part of n): the
  // gather's result from it, the scatter's input into it; the other side is
  // the tensor itself (a rank's [outer, block, inner] is contiguous).
  Type element = elementTypeOf(input);
  const int64_t ranks = axis->size;
  const DimSplit &whole = gather ? to : from;
  const int64_t block = whole.size / ranks;
  if (gather) {
    FlatSymbolRefAttr gathered = temporary(RankedTensorType::get(
        {ranks, whole.outer, block, whole.inner}, element));
    launch(loc, rt::kernelName(kernel), {in}, {gathered}, ints);
    launch(loc, "transpose", {gathered}, {define(result)},
           swapOuterInts(ranks, whole.outer, block, whole.inner));
    return success();
  }
  FlatSymbolRefAttr rankMajor = temporary(RankedTensorType::get(
      {ranks, whole.outer, block, whole.inner}, element));
  launch(loc, "transpose", {in}, {rankMajor},
         swapOuterInts(whole.outer, ranks, block, whole.inner));
  launch(loc, rt::kernelName(kernel), {rankMajor}, {define(result)}, ints);
  return success();
}

class MLTLowerToRuntimePass
    : public mlt::impl::MLTLowerToRuntimeBase<MLTLowerToRuntimePass> {
public:
  void runOnOperation() override {
    if (failed(RuntimeLowering(getOperation()).run()))
      signalPassFailure();
  }
};

} // namespace
