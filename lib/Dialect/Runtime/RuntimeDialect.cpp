//===- RuntimeDialect.cpp - the lowered, runtime-level dialect ------------===//
//
// Part of mlt. Verifiers of the `mlt_rt` ops; kernel arities and attribute
// names come from the runtime's kernel table (Kernels.def, KernelInfo.h), the
// one the runtime itself verifies plans against and dispatches on.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/PlanFormat.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseSet.h"

#include <tuple>

using namespace mlir;
using namespace mlt::rt_ir;
using mlt::rt::kPlanMaxStreams;
using mlt::rt::kPlanMaxTokens;

namespace {

/// `work` of mlt_rt.call: `[F0.0, B0.0]`, stored as (kind, micro-batch,
/// chunk) triples.
ParseResult parseWork(OpAsmParser &parser, DenseI64ArrayAttr &work) {
  SmallVector<int64_t> triples;
  auto parseItem = [&]() -> ParseResult {
    std::string text;
    SMLoc loc = parser.getCurrentLocation();
    // `F0.0` lexes as one bare identifier.
    if (parser.parseKeywordOrString(&text))
      return failure();
    std::optional<mlt::WorkItem> item = mlt::WorkItem::parse(text);
    if (!item)
      return parser.emitError(loc, "expected a work item such as F0.0, got '")
             << text << "'";
    triples.append({int64_t(item->kind), item->microbatch, item->chunk});
    return success();
  };
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseItem))
    return failure();
  work = DenseI64ArrayAttr::get(parser.getContext(), triples);
  return success();
}

void printWork(OpAsmPrinter &printer, CallOp op, DenseI64ArrayAttr work) {
  printer << "[";
  llvm::interleaveComma(op.getWorkItems(), printer,
                        [&](const mlt::WorkItem &item) {
                          printer << item.str();
                        });
  printer << "]";
}

} // namespace

#include "mlt/Dialect/Runtime/RuntimeDialect.cpp.inc"
#include "mlt/Dialect/Runtime/RuntimeEnums.cpp.inc"

void MLTRTDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "mlt/Dialect/Runtime/RuntimeOps.cpp.inc"
      >();
}

uint64_t BufferOp::getByteSize() {
  RankedTensorType type = getTensorType();
  uint64_t bits = type.getElementTypeBitWidth();
  return static_cast<uint64_t>(type.getNumElements()) * ((bits + 7) / 8);
}

uint64_t BufferOp::getExtentBytes() {
  const uint64_t stride =
      (getByteSize() + mlt::rt::kPlanBufferAlignment - 1) /
      mlt::rt::kPlanBufferAlignment * mlt::rt::kPlanBufferAlignment;
  return getCopies() > 1 ? stride * uint64_t(getCopies() - 1) + getByteSize()
                         : getByteSize();
}

LogicalResult BufferOp::verify() {
  if (!getTensorType().hasStaticShape())
    return emitOpError("must have a static shape, got ") << getType();
  if (getPerSlotAttr()) {
    if (getPerMicrobatchAttr())
      return emitOpError("has a copy per micro-batch and per slot; one or "
                         "the other");
    if (getPerSlotAttr().getInt() < 1)
      return emitOpError("per_slot must be at least 1, got ")
             << getPerSlotAttr().getInt();
    if (getKind() != BufferKind::temporary)
      return emitOpError("of kind '")
             << stringifyBufferKind(getKind())
             << "' cannot have a copy per slot (only temporaries do)";
  }
  if (getStepKept() && (getKind() != BufferKind::temporary ||
                        getPerSlotAttr() || getView()))
    return emitOpError("step_kept is for a temporary of one copy that is no "
                       "view");
  if (IntegerAttr copies = getPerMicrobatchAttr()) {
    if (copies.getInt() < 1)
      return emitOpError("per_microbatch must be at least 1, got ")
             << copies.getInt();
    // Carried activations (a copy per in-flight micro-batch) come with
    // separate forward and backward bodies.
    if (getKind() != BufferKind::input && getKind() != BufferKind::output)
      return emitOpError("of kind '")
             << stringifyBufferKind(getKind())
             << "' cannot have a copy per micro-batch (only inputs and "
                "outputs do)";
  }
  bool stateful = getKind() == BufferKind::parameter ||
                  getKind() == BufferKind::gradient ||
                  getKind() == BufferKind::optimizer_state ||
                  getKind() == BufferKind::parameter_copy;
  // Flat buffers (a bucket, a rank's slice of one) name no parameter.
  if (stateful && !getParameter() && !getShardAttr() && !getView() &&
      !getBucket())
    return emitOpError("of kind '")
           << stringifyBufferKind(getKind()) << "' must name its parameter";
  if (getViewOffsetAttr() && (!getView() || getShardAttr()))
    return emitOpError("has a view_offset but is no view at a fixed place");
  if (getViewOffsetAttr() && getViewOffsetAttr().getInt() < 0)
    return emitOpError("view_offset must be non-negative");
  if ((getView() || getShardAttr()) && getCopies() != 1)
    return emitOpError("is a view or a slice and has several copies");
  if (getLayoutAttr() && (!getShardAttr() || getView()))
    return emitOpError("names a layout but is no slice stored apart (it "
                       "needs a shard axis and no view)");
  if (getShardAttr() && !getView() && !getLayoutAttr())
    return emitOpError("is a slice (shard) of no flat buffer: it needs a "
                       "view or a layout");
  if (getShardAttr() &&
      llvm::any_of(getShardAxes(), [](StringRef a) { return a.empty(); }))
    return emitOpError("shard '")
           << *getShard() << "' is not mesh axis names joined by '*'";
  if (getShardShiftAttr() &&
      (!getShardAttr() || getShardAxes().size() != 1 ||
       getShardShiftAttr().getInt() < 0))
    return emitOpError("shard_shift needs a slice over one axis and must be "
                       "non-negative");
  if (getOwns() && (!getShardAttr() || getParameter()))
    return emitOpError("owns ranges of parameters, so it must be a slice "
                       "(shard) that names no parameter");
  if (getKind() == BufferKind::constant && !getValue())
    return emitOpError("of kind 'constant' needs a value");
  if (getOffsetAttr() && getOffsetAttr().getInt() < 0)
    return emitOpError("offset must be non-negative");
  return success();
}

LogicalResult LaunchOp::verify() {
  const mlt::rt::KernelSignature *sig =
      mlt::rt::lookupKernel(std::string_view(getKernel()));
  if (!sig)
    return emitOpError("unknown kernel '") << getKernel() << "'";
  // Attribute counts name the attributes (Kernels.def's names).
  auto check = [&](StringRef what, int want, size_t got,
                   const mlt::rt::AttributeNames *names) -> LogicalResult {
    if (want < 0 || static_cast<size_t>(want) == got)
      return success();
    InFlightDiagnostic diag = emitOpError("kernel '")
                              << getKernel() << "' takes " << want << " "
                              << what;
    if (names && !names->empty())
      diag << " (" << names->str() << ")";
    return diag << ", got " << got;
  };
  return failure(
      failed(check("inputs", sig->inputs, getInputs().size(), nullptr)) ||
      failed(check("outputs", sig->outputs, getOutputs().size(), nullptr)) ||
      failed(check("integer attributes", sig->ints, getInts().size(),
                   &sig->intNames)) ||
      failed(check("float attributes", sig->floats, getFloats().size(),
                   &sig->floatNames)));
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

LogicalResult BufferOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  for (FlatSymbolRefAttr ref : {getViewAttr(), getLayoutAttr()}) {
    if (!ref)
      continue;
    auto base = symbolTable.lookupNearestSymbolFrom<BufferOp>(*this, ref);
    if (!base)
      return emitOpError("names ") << ref << ", which is not a buffer";
    if (!base.getBucket())
      return emitOpError("lies in ") << ref << ", which is no bucket";
    if (base.getTensorType().getElementType() !=
        getTensorType().getElementType() && ref == getViewAttr())
      return emitOpError("is a view of ")
             << ref << " of another element type";
    int64_t elements = getTensorType().getNumElements();
    int64_t baseElements = base.getTensorType().getNumElements();
    int64_t start = getViewOffsetAttr() ? getViewOffsetAttr().getInt() : 0;
    if (start + elements > baseElements ||
        (getShardAttr() && baseElements % elements != 0))
      return emitOpError("of ")
             << elements << " elements does not fit " << ref << " of "
             << baseElements << " elements"
             << (getShardAttr() ? " as one of equal slices"
                                                : " at its offset");
  }
  return success();
}

LogicalResult LaunchOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  // The table the buffers are in, found once for all operands (a
  // multi-tensor launch has thousands).
  Operation *buffers = SymbolTable::getNearestSymbolTable(*this);
  for (ArrayAttr list : {getInputs(), getOutputs()})
    for (Attribute ref : list) {
      auto symbol = dyn_cast<FlatSymbolRefAttr>(ref);
      if (!symbol || !buffers ||
          !isa_and_nonnull<BufferOp>(
              symbolTable.lookupSymbolIn(buffers, symbol.getAttr())))
        return emitOpError("uses ") << ref << ", which is not a buffer";
    }
  return success();
}

SmallVector<mlt::WorkItem> CallOp::getWorkItems() {
  SmallVector<mlt::WorkItem> items;
  ArrayRef<int64_t> work = getWork();
  for (size_t i = 0; i + 2 < work.size(); i += 3)
    items.push_back(mlt::WorkItem{mlt::WorkKind(work[i]), work[i + 1],
                                  work[i + 2]});
  return items;
}

SmallVector<int64_t> CallOp::encodeWork(ArrayRef<mlt::WorkItem> items) {
  SmallVector<int64_t> work;
  for (const mlt::WorkItem &item : items)
    work.append({int64_t(item.kind), item.microbatch, item.chunk});
  return work;
}

LogicalResult CallOp::verify() {
  ArrayRef<int64_t> work = getWork();
  if (work.size() % 3 != 0)
    return emitOpError("work must be (kind, micro-batch, chunk) triples");
  std::optional<int64_t> microbatch;
  if (IntegerAttr attr = getMicrobatchAttr())
    microbatch = attr.getInt();
  if (microbatch && *microbatch < 0)
    return emitOpError("micro-batch must be non-negative, got ") << *microbatch;
  if (getSlotAttr() && getSlotAttr().getInt() < 0)
    return emitOpError("slot must be non-negative, got ")
           << getSlotAttr().getInt();
  for (size_t i = 0; i < work.size(); i += 3) {
    if (work[i] < 0 || work[i] > int64_t(mlt::WorkKind::WeightGradient) ||
        work[i + 1] < 0 || work[i + 2] < 0)
      return emitOpError("has a malformed work item");
    if (!microbatch || work[i + 1] != *microbatch)
      return emitOpError("does ")
             << mlt::WorkItem{mlt::WorkKind(work[i]), work[i + 1], work[i + 2]}
                    .str()
             << ", which is not work of the call's micro-batch";
  }
  return success();
}

LogicalResult
CallOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (!symbolTable.lookupNearestSymbolFrom<ProgramOp>(*this, getProgramAttr()))
    return emitOpError("calls @")
           << getProgram() << ", which is not an mlt_rt.program";
  return success();
}

LogicalResult StepOp::verify() {
  // Each item of the schedule once, a backward after its forward.
  llvm::DenseSet<std::tuple<int64_t, int64_t, int64_t>> seen;
  for (CallOp call : getBody().getOps<CallOp>())
    for (const mlt::WorkItem &item : call.getWorkItems()) {
      if (!seen.insert({int64_t(item.kind), item.microbatch, item.chunk})
               .second)
        return call.emitOpError("does ")
               << item.str() << ", which an earlier call of the step does";
      if (item.kind != mlt::WorkKind::Forward &&
          !seen.contains({int64_t(mlt::WorkKind::Forward), item.microbatch,
                          item.chunk}))
        return call.emitOpError("does ")
               << item.str() << " before the step does its forward";
    }
  for (Operation &op : getBody().front())
    if (!isa<CallOp>(op))
      return op.emitOpError("is not an mlt_rt.call; a step holds calls only");
  return success();
}

#define GET_OP_CLASSES
#include "mlt/Dialect/Runtime/RuntimeOps.cpp.inc"

namespace {
StepOp stepNamed(mlir::ModuleOp module, llvm::StringRef name) {
  for (StepOp step : module.getOps<StepOp>())
    if (step.getSymName() == name)
      return step;
  return {};
}
} // namespace

StepOp mlt::rt_ir::trainingStep(mlir::ModuleOp module) {
  return stepNamed(module, kTrainingStepName);
}

StepOp mlt::rt_ir::evalStep(mlir::ModuleOp module) {
  return stepNamed(module, kEvalStepName);
}

bool LaunchOp::isTransfer() {
  const mlt::rt::KernelSignature *kernel =
      mlt::rt::lookupKernel(getKernel().str());
  return kernel && mlt::rt::isTransferKernel(kernel->kernel);
}

bool ProgramOp::isTransferProgram() {
  auto launches = getBody().getOps<LaunchOp>();
  return !launches.empty() &&
         llvm::all_of(launches, [](LaunchOp launch) {
           return launch.isTransfer();
         });
}
