//===- RuntimeDialect.cpp - the lowered, runtime-level dialect ------------===//
//
// Part of mlt. Verifiers of the `mlt_rt` ops; kernel arities come from the
// runtime's Kernels.def, the list the runtime itself dispatches on.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Runtime/PlanFormat.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlt::rt_ir;
using mlt::rt::kPlanMaxStreams;
using mlt::rt::kPlanMaxTokens;

#include "mlt/Dialect/Runtime/RuntimeDialect.cpp.inc"
#include "mlt/Dialect/Runtime/RuntimeEnums.cpp.inc"

void MLTRTDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "mlt/Dialect/Runtime/RuntimeOps.cpp.inc"
      >();
}

const KernelSignature *mlt::rt_ir::lookupKernel(StringRef name) {
  static const KernelSignature kernels[] = {
#define MLT_KERNEL(Enum, Name, Inputs, Outputs, Ints, Floats)                  \
  {Name, Inputs, Outputs, Ints, Floats},
#include "mlt/Runtime/Kernels.def"
  };
  for (const KernelSignature &k : kernels)
    if (k.name == name)
      return &k;
  return nullptr;
}

uint64_t BufferOp::getByteSize() {
  RankedTensorType type = getTensorType();
  uint64_t bits = type.getElementTypeBitWidth();
  return static_cast<uint64_t>(type.getNumElements()) * ((bits + 7) / 8);
}

LogicalResult BufferOp::verify() {
  if (!getTensorType().hasStaticShape())
    return emitOpError("must have a static shape, got ") << getType();
  bool stateful = getKind() == BufferKind::parameter ||
                  getKind() == BufferKind::gradient ||
                  getKind() == BufferKind::optimizer_state ||
                  getKind() == BufferKind::parameter_copy;
  if (stateful && !getParameter())
    return emitOpError("of kind '")
           << stringifyBufferKind(getKind()) << "' must name its parameter";
  if (getKind() == BufferKind::constant && !getValue())
    return emitOpError("of kind 'constant' needs a value");
  if (getOffsetAttr() && getOffsetAttr().getInt() < 0)
    return emitOpError("offset must be non-negative");
  return success();
}

LogicalResult LaunchOp::verify() {
  const KernelSignature *sig = lookupKernel(getKernel());
  if (!sig)
    return emitOpError("unknown kernel '") << getKernel() << "'";
  auto check = [&](StringRef what, int want, size_t got) -> LogicalResult {
    if (want >= 0 && static_cast<size_t>(want) != got)
      return emitOpError("kernel '")
             << getKernel() << "' takes " << want << " " << what << ", got "
             << got;
    return success();
  };
  return failure(failed(check("inputs", sig->inputs, getInputs().size())) ||
                 failed(check("outputs", sig->outputs, getOutputs().size())) ||
                 failed(check("integer attributes", sig->ints,
                              getInts().size())) ||
                 failed(check("float attributes", sig->floats,
                              getFloats().size())));
}

LogicalResult ProgramOp::verify() {
  // Tokens: each signalled once, by a launch before every launch that waits
  // for it (so program order is a valid order of the launches).
  llvm::SmallDenseSet<int64_t> signalled;
  for (LaunchOp launch : getBody().getOps<LaunchOp>()) {
    int64_t stream = launch.getStreamIndex();
    if (stream < 0 || stream >= int64_t(kPlanMaxStreams))
      return launch.emitOpError("runs on stream ")
             << stream << "; streams are 0.." << kPlanMaxStreams - 1;
    for (int64_t token : launch.getWaits())
      if (!signalled.contains(token))
        return launch.emitOpError("waits for token ")
               << token << ", which no earlier launch of @" << getSymName()
               << " signals";
    if (std::optional<int64_t> token = launch.getToken()) {
      if (*token < 0 || *token >= int64_t(kPlanMaxTokens))
        return launch.emitOpError("signals token ")
               << *token << "; tokens are 0.." << kPlanMaxTokens - 1;
      if (!signalled.insert(*token).second)
        return launch.emitOpError("signals token ")
               << *token << ", which an earlier launch of @" << getSymName()
               << " signals";
    }
  }
  return success();
}

LogicalResult LaunchOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  for (ArrayAttr list : {getInputs(), getOutputs()})
    for (Attribute ref : list) {
      auto symbol = dyn_cast<FlatSymbolRefAttr>(ref);
      if (!symbol ||
          !symbolTable.lookupNearestSymbolFrom<BufferOp>(*this, symbol))
        return emitOpError("uses ") << ref << ", which is not a buffer";
    }
  return success();
}

#define GET_OP_CLASSES
#include "mlt/Dialect/Runtime/RuntimeOps.cpp.inc"
