//===- LowerToRuntime.cpp - training program to runtime launches ----------===//
//
// Part of mlt. Implements mlt-lower-to-runtime: the functions of a training
// program (`@micro_step`, `@optimizer_step`) become `mlt_rt.program`s of
// kernel launches, and every tensor they touch becomes an `mlt_rt.buffer`.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Runtime/PlanFormat.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlt {
#define GEN_PASS_DEF_MLTLOWERTORUNTIME
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;
namespace abi = mlt::rt;

namespace {

/// The training program's interface with the runtime: each program's result
/// lands in an output buffer of this name.
struct ProgramABI {
  StringRef function;
  StringRef resultBuffer;
};
constexpr ProgramABI kPrograms[] = {
    {abi::kMicroStepProgram, abi::kLossOutput},
    {abi::kOptimizerStepProgram, abi::kGradNormOutput}};

int64_t numElements(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// Lowers one module; keeps the buffers it created by name and the buffer
/// that holds each SSA value.
class RuntimeLowering {
public:
  explicit RuntimeLowering(ModuleOp module)
      : module(module), b(module.getContext()) {}

  LogicalResult run() {
    b.setInsertionPointToEnd(module.getBody());
    createStateBuffers();
    for (const ProgramABI &abi : kPrograms) {
      auto func = module.lookupSymbol<func::FuncOp>(abi.function);
      if (!func)
        return module.emitError("mlt-lower-to-runtime: no function @")
               << abi.function
               << " (run mlt-autodiff and mlt-attach-optimizer first)";
      if (failed(lowerFunction(func, abi)))
        return failure();
    }
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

  FlatSymbolRefAttr buffer(StringRef name, rtir::BufferKind kind, Type type,
                           StringRef parameter = {}, bool decay = false) {
    if (auto it = buffers.find(name); it != buffers.end())
      return it->second;
    // Buffers come first, in creation order, ahead of every program.
    OpBuilder::InsertionGuard guard(b);
    if (lastBuffer)
      b.setInsertionPointAfter(lastBuffer);
    else
      b.setInsertionPointToStart(module.getBody());
    auto op = rtir::BufferOp::create(b, 
        module.getLoc(), b.getStringAttr(name),
        rtir::BufferKindAttr::get(b.getContext(), kind), TypeAttr::get(type),
        IntegerAttr(),
        parameter.empty() ? StringAttr() : b.getStringAttr(parameter),
        decay ? b.getUnitAttr() : UnitAttr(), FloatAttr());
    lastBuffer = op;
    auto ref = FlatSymbolRefAttr::get(op.getSymNameAttr());
    buffers[name] = ref;
    return ref;
  }

  FlatSymbolRefAttr temporary(Type type) {
    return buffer(("t" + Twine(nextTemporary++)).str(),
                  rtir::BufferKind::temporary, type);
  }

  /// Parameters, gradients and AdamW moments of every parameter tensor.
  void createStateBuffers() {
    for (ParamOp param : module.getOps<ParamOp>()) {
      int64_t layers = param.getLayers().value_or(1);
      bool decay = param.getTensorType().getRank() >= 2;
      for (int64_t layer = 0; layer < layers; ++layer) {
        std::string hf = param.getHFName(layer);
        Type type = param.getTensorType();
        buffer(abi::kParameterPrefix + hf, rtir::BufferKind::parameter, type, hf,
               decay);
        buffer(abi::kGradientPrefix + hf, rtir::BufferKind::gradient, type, hf);
        buffer(abi::kExpAvgPrefix + hf, rtir::BufferKind::optimizer_state, type,
               hf);
        buffer(abi::kExpAvgSqPrefix + hf, rtir::BufferKind::optimizer_state,
               type, hf);
      }
    }
  }

  /// The HF name of the parameter tensor that a state op names.
  FailureOr<std::string> parameterName(Operation *op, FlatSymbolRefAttr name,
                                       Value layer) {
    auto param = module.lookupSymbol<ParamOp>(name.getAttr());
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
    rtir::LaunchOp::create(b, loc, b.getStringAttr(kernel),
                           b.getArrayAttr(inAttrs), b.getArrayAttr(outAttrs),
                           b.getDenseI64ArrayAttr(ints),
                           b.getDenseF64ArrayAttr(floats));
  }

  /// The buffer for result `v`: the program's output buffer if `v` is
  /// returned, a new temporary otherwise.
  FlatSymbolRefAttr define(Value v) {
    FlatSymbolRefAttr ref = resultOutputs.lookup(v);
    if (!ref)
      ref = temporary(v.getType());
    values[v] = ref;
    return ref;
  }

  SmallVector<FlatSymbolRefAttr> operandBuffers(Operation *op) {
    return llvm::map_to_vector(op->getOperands(),
                               [&](Value v) { return valueBuffer(v); });
  }

  LogicalResult lowerOp(Operation *op);

  LogicalResult lowerFunction(func::FuncOp func, const ProgramABI &abi) {
    values.clear();
    resultOutputs.clear();
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
      values[arg] = buffer(name, rtir::BufferKind::input, arg.getType());
    }
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    if (ret.getNumOperands() != 1)
      return func.emitError("mlt-lower-to-runtime: @")
             << func.getSymName() << " must return one value";
    // The kernel that computes the result writes the output buffer directly;
    // reshapes in between only rename it.
    Value result = ret.getOperand(0);
    while (auto reshape = result.getDefiningOp<ReshapeOp>())
      result = reshape.getInput();
    resultOutputs[result] = buffer(abi.resultBuffer, rtir::BufferKind::output,
                                   result.getType());

    b.setInsertionPointToEnd(module.getBody());
    auto program = rtir::ProgramOp::create(b, func.getLoc(), abi.function);
    b.setInsertionPointToStart(&program.getBody().emplaceBlock());
    for (Operation &op : body.without_terminator())
      if (failed(lowerOp(&op)))
        return failure();
    if (values.lookup(result) != resultOutputs.lookup(result))
      return ret.emitOpError("returns a value that no kernel computes");
    return success();
  }

  ModuleOp module;
  OpBuilder b;
  rtir::BufferOp lastBuffer;
  llvm::StringMap<FlatSymbolRefAttr> buffers;
  DenseMap<Value, FlatSymbolRefAttr> values;
  DenseMap<Value, FlatSymbolRefAttr> resultOutputs;
  /// The softmax statistics that each attention result's kernel saved.
  DenseMap<Value, FlatSymbolRefAttr> attentionStats;
  int64_t nextTemporary = 0;
};

LogicalResult RuntimeLowering::lowerOp(Operation *op) {
  Location loc = op->getLoc();
  // Index arithmetic only selects layers; state ops resolve it to names.
  if (op->getNumResults() > 0 && isMemoryEffectFree(op) &&
      llvm::all_of(op->getResultTypes(),
                   [](Type t) { return t.isIndex(); }))
    return success();
  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](arith::ConstantOp c) -> LogicalResult {
        auto splat = dyn_cast<SplatElementsAttr>(c.getValue());
        auto type = dyn_cast<RankedTensorType>(c.getType());
        if (!splat || !type || !isa<FloatType>(type.getElementType()))
          return c.emitOpError("only float splat constants reach the runtime");
        std::string name = ("const" + Twine(buffers.size())).str();
        FlatSymbolRefAttr ref = buffer(name, rtir::BufferKind::constant, type);
        module.lookupSymbol<rtir::BufferOp>(ref.getAttr())
            .setValueAttr(b.getF64FloatAttr(
                splat.getSplatValue<APFloat>().convertToDouble()));
        values[c.getResult()] = ref;
        return success();
      })
      .Case([&](LoadOp load) -> LogicalResult {
        auto ref = stateBuffer(load, abi::kParameterPrefix, load.getNameAttr(),
                               load.getLayer());
        if (failed(ref))
          return failure();
        values[load.getResult()] = *ref;
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
        values[h.getResult()] =
            buffer(("hyper." + h.getHyperparameter()).str(),
                   rtir::BufferKind::input, h.getType());
        return success();
      })
      .Case([&](ReshapeOp r) -> LogicalResult {
        // Row-major data is unchanged: the result names the same buffer.
        values[r.getResult()] = valueBuffer(r.getInput());
        return success();
      })
      .Case([&](EmbeddingOp e) -> LogicalResult {
        auto table = shapeOf(e.getTable());
        launch(loc, "embedding_fwd", operandBuffers(e), {define(e.getResult())},
               {numElements(e.getIds()), table[0], table[1]});
        return success();
      })
      .Case([&](EmbeddingGradOp e) -> LogicalResult {
        auto table = shapeOf(e.getResult());
        launch(loc, "embedding_bwd", operandBuffers(e), {define(e.getResult())},
               {numElements(e.getIds()), table[0], table[1]});
        return success();
      })
      .Case([&](MatmulOp m) -> LogicalResult {
        auto lhs = shapeOf(m.getLhs()), rhs = shapeOf(m.getRhs());
        bool tl = m.getTransposeLhs(), tr = m.getTransposeRhs();
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
        launch(loc, "matmul", operandBuffers(m), {define(m.getResult())},
               {batch, rows, n, k, tl, tr, bBatched});
        return success();
      })
      .Case([&](RMSNormOp r) -> LogicalResult {
        int64_t dim = shapeOf(r.getInput()).back();
        launch(loc, "rms_norm_fwd", operandBuffers(r), {define(r.getResult())},
               {numElements(r.getInput()) / dim, dim},
               {r.getEpsilon().convertToDouble()});
        return success();
      })
      .Case([&](RMSNormGradOp r) -> LogicalResult {
        int64_t dim = shapeOf(r.getInput()).back();
        launch(loc, "rms_norm_bwd", operandBuffers(r),
               {define(r.getInputGrad()), define(r.getWeightGrad())},
               {numElements(r.getInput()) / dim, dim},
               {r.getEpsilon().convertToDouble()});
        return success();
      })
      .Case([&](RopeOp r) -> LogicalResult {
        auto s = shapeOf(r.getInput());
        launch(loc, "rope", operandBuffers(r), {define(r.getResult())},
               {s[0], s[1], s[2], s[3], r.getInverse(), /*offset=*/0},
               {r.getTheta().convertToDouble()});
        return success();
      })
      .Case([&](AttentionOp a) -> LogicalResult {
        auto q = shapeOf(a.getQuery()), k = shapeOf(a.getKey());
        // The softmax statistics are kept in at least f32, in the query's
        // type when it is wider: the backward recomputes the probabilities
        // from them, and the kernels take them in the type they compute in.
        Type qElement =
            cast<RankedTensorType>(a.getQuery().getType()).getElementType();
        auto stats = RankedTensorType::get(
            {q[0], q[2], q[1]}, qElement.isF64() ? qElement : b.getF32Type());
        FlatSymbolRefAttr lse = temporary(stats);
        attentionStats[a.getResult()] = lse;
        launch(loc, "attention_fwd", operandBuffers(a),
               {define(a.getResult()), lse},
               {q[0], q[1], q[2], k[2], q[3], a.getCausal()},
               {a.getScale().convertToDouble()});
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
        launch(loc, "attention_bwd", ins,
               {define(a.getQueryGrad()), define(a.getKeyGrad()),
                define(a.getValueGrad())},
               {q[0], q[1], q[2], k[2], q[3], a.getCausal()},
               {a.getScale().convertToDouble()});
        return success();
      })
      .Case([&](SwiGLUOp s) -> LogicalResult {
        launch(loc, "swiglu_fwd", operandBuffers(s), {define(s.getResult())},
               {numElements(s.getResult())});
        return success();
      })
      .Case([&](SwiGLUGradOp s) -> LogicalResult {
        launch(loc, "swiglu_bwd", operandBuffers(s),
               {define(s.getGateGrad()), define(s.getUpGrad())},
               {numElements(s.getGrad())});
        return success();
      })
      .Case([&](SiLUOp s) -> LogicalResult {
        launch(loc, "silu_fwd", operandBuffers(s), {define(s.getResult())},
               {numElements(s.getResult())});
        return success();
      })
      .Case([&](SiLUGradOp s) -> LogicalResult {
        launch(loc, "silu_bwd", operandBuffers(s), {define(s.getResult())},
               {numElements(s.getResult())});
        return success();
      })
      .Case([&](AddOp a) -> LogicalResult {
        launch(loc, "add", operandBuffers(a), {define(a.getResult())},
               {numElements(a.getResult())});
        return success();
      })
      .Case([&](MulOp m) -> LogicalResult {
        launch(loc, "mul", operandBuffers(m), {define(m.getResult())},
               {numElements(m.getResult())});
        return success();
      })
      .Case([&](TransposeOp t) -> LogicalResult {
        auto shape = shapeOf(t.getInput());
        SmallVector<int64_t> ints{static_cast<int64_t>(shape.size())};
        llvm::append_range(ints, shape);
        llvm::append_range(ints, t.getPermutation());
        launch(loc, "transpose", operandBuffers(t), {define(t.getResult())},
               ints);
        return success();
      })
      .Case([&](CastOp c) -> LogicalResult {
        launch(loc, "cast", operandBuffers(c), {define(c.getResult())},
               {numElements(c.getResult())});
        return success();
      })
      .Case([&](CrossEntropyOp c) -> LogicalResult {
        int64_t vocab = shapeOf(c.getLogits()).back();
        launch(loc, "cross_entropy_fwd", operandBuffers(c),
               {define(c.getResult())},
               {numElements(c.getLogits()) / vocab, vocab});
        return success();
      })
      .Case([&](CrossEntropyGradOp c) -> LogicalResult {
        int64_t vocab = shapeOf(c.getLogits()).back();
        launch(loc, "cross_entropy_bwd", operandBuffers(c),
               {define(c.getResult())},
               {numElements(c.getLogits()) / vocab, vocab});
        return success();
      })
      .Case([&](AccumulateGradOp a) -> LogicalResult {
        auto grad = stateBuffer(a, abi::kGradientPrefix, a.getNameAttr(), a.getLayer());
        if (failed(grad))
          return failure();
        launch(loc, "accumulate", {valueBuffer(a.getValue())}, {*grad},
               {numElements(a.getValue())});
        return success();
      })
      .Case([&](SumSquaresOp s) -> LogicalResult {
        launch(loc, "sum_squares", operandBuffers(s), {define(s.getResult())},
               {numElements(s.getInput())});
        return success();
      })
      .Case([&](GlobalNormOp g) -> LogicalResult {
        launch(loc, "global_norm", operandBuffers(g), {define(g.getResult())});
        return success();
      })
      .Case([&](ClipCoefficientOp c) -> LogicalResult {
        launch(loc, "clip_coefficient", operandBuffers(c),
               {define(c.getResult())});
        return success();
      })
      .Case([&](AdamWOp a) -> LogicalResult {
        auto param = stateBuffer(a, abi::kParameterPrefix, a.getNameAttr(), a.getLayer());
        auto m = stateBuffer(a, abi::kExpAvgPrefix, a.getNameAttr(), a.getLayer());
        auto v = stateBuffer(a, abi::kExpAvgSqPrefix, a.getNameAttr(), a.getLayer());
        if (failed(param) || failed(m) || failed(v))
          return failure();
        SmallVector<FlatSymbolRefAttr> ins = llvm::map_to_vector(
            ValueRange{a.getGrad(), a.getGradScale(), a.getLr(), a.getBeta1(),
                       a.getBeta2(), a.getEps(), a.getWeightDecay(),
                       a.getStep()},
            [&](Value v) { return valueBuffer(v); });
        launch(loc, "adamw", ins, {*param, *m, *v},
               {numElements(a.getGrad()), a.getDecay()});
        return success();
      })
      .Default([&](Operation *other) {
        return other->emitOpError("cannot be lowered to the runtime: no "
                                  "kernel computes it");
      });
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
