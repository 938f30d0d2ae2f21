//===- PlanExport.cpp - mlt_rt module to plan file ------------------------===//
//
// Part of mlt. One table of the plan per op of the lowered module: buffers in
// declaration order (launches refer to them by index), programs in order.
//
//===----------------------------------------------------------------------===//

#include "mlt/Target/PlanExport.h"

#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Import/HFLlama.h"
#include "mlt/Runtime/PlanFormat.h"
#include "mlt/Runtime/Plan_generated.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;
namespace fb = mlt::plan;

namespace {

FailureOr<fb::DType> dtypeOf(Type type) {
  if (type.isF32())
    return fb::DType::F32;
  if (type.isF64())
    return fb::DType::F64;
  if (type.isBF16())
    return fb::DType::BF16;
  if (type.isF16())
    return fb::DType::F16;
  if (type.isInteger(32))
    return fb::DType::I32;
  if (type.isInteger(64))
    return fb::DType::I64;
  return failure();
}

fb::BufferKind kindOf(rtir::BufferKind kind) {
  switch (kind) {
  case rtir::BufferKind::parameter:
    return fb::BufferKind::Parameter;
  case rtir::BufferKind::gradient:
    return fb::BufferKind::Gradient;
  case rtir::BufferKind::optimizer_state:
    return fb::BufferKind::OptimizerState;
  case rtir::BufferKind::input:
    return fb::BufferKind::Input;
  case rtir::BufferKind::output:
    return fb::BufferKind::Output;
  case rtir::BufferKind::temporary:
    return fb::BufferKind::Temporary;
  case rtir::BufferKind::constant:
    return fb::BufferKind::Constant;
  }
  llvm_unreachable("unknown buffer kind");
}

} // namespace

std::string mlt::hfConfigJson(const LlamaConfig &c) {
  llvm::json::Object config{
      {"architectures", llvm::json::Array{"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_act", "silu"},
      {"vocab_size", c.vocabSize},
      {"hidden_size", c.hiddenSize},
      {"intermediate_size", c.intermediateSize},
      {"num_hidden_layers", c.numLayers},
      {"num_attention_heads", c.numHeads},
      {"num_key_value_heads", c.numKvHeads},
      {"head_dim", c.headDim},
      {"max_position_embeddings", c.maxPositionEmbeddings},
      {"rms_norm_eps", c.rmsNormEps},
      {"rope_theta", c.ropeTheta},
      {"tie_word_embeddings", c.tieWordEmbeddings},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"torch_dtype", "float32"}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(config))) << "\n";
  return text;
}

LogicalResult mlt::exportPlan(ModuleOp module, std::string &bytes) {
  auto config = module->getAttrOfType<LlamaConfigAttr>(
      MLTDialect::getModelAttrName());
  if (!config)
    return module.emitError("plan export: the module has no '")
           << MLTDialect::getModelAttrName() << "' configuration";
  auto arena = module->getAttrOfType<IntegerAttr>("mlt_rt.arena_bytes");
  if (!arena)
    return module.emitError("plan export: no arena size; run mlt-plan-memory");

  flatbuffers::FlatBufferBuilder fbb;
  llvm::StringMap<uint32_t> bufferIndex;
  std::vector<flatbuffers::Offset<fb::Buffer>> buffers;
  int64_t microBatch = 0, seqLen = 0;
  for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>()) {
    if (!buffer.getOffset())
      return buffer.emitOpError("has no offset; run mlt-plan-memory");
    RankedTensorType type = buffer.getTensorType();
    FailureOr<fb::DType> dtype = dtypeOf(type.getElementType());
    if (failed(dtype))
      return buffer.emitOpError("has an element type the runtime cannot hold: ")
             << type.getElementType();
    if (buffer.getSymName() == mlt::rt::kTokensInput) {
      microBatch = type.getDimSize(0);
      seqLen = type.getDimSize(1);
    }
    auto name = fbb.CreateString(buffer.getSymName().str());
    auto shape = fbb.CreateVector(type.getShape().vec());
    auto parameter = buffer.getParameter()
                         ? fbb.CreateString(buffer.getParameter()->str())
                         : flatbuffers::Offset<flatbuffers::String>();
    bufferIndex[buffer.getSymName()] = buffers.size();
    buffers.push_back(fb::CreateBuffer(
        fbb, name, kindOf(buffer.getKind()), *dtype, shape, *buffer.getOffset(),
        buffer.getByteSize(), parameter,
        buffer.getValue() ? buffer.getValue()->convertToDouble() : 0.0,
        buffer.getDecay()));
  }

  std::vector<flatbuffers::Offset<fb::Program>> programs;
  int64_t microbatches = 1;
  if (auto attr = module->getAttrOfType<IntegerAttr>("mlt_rt.microbatches"))
    microbatches = attr.getInt();
  for (rtir::ProgramOp program : module.getOps<rtir::ProgramOp>()) {
    std::vector<flatbuffers::Offset<fb::Instruction>> instructions;
    for (rtir::LaunchOp launch : program.getBody().getOps<rtir::LaunchOp>()) {
      auto indices = [&](ArrayAttr refs) {
        std::vector<uint32_t> out;
        for (Attribute ref : refs)
          out.push_back(bufferIndex.lookup(cast<FlatSymbolRefAttr>(ref).getValue()));
        return fbb.CreateVector(out);
      };
      auto kernel = fbb.CreateString(launch.getKernel().str());
      auto inputs = indices(launch.getInputs());
      auto outputs = indices(launch.getOutputs());
      auto ints = fbb.CreateVector(launch.getInts().vec());
      auto floats = fbb.CreateVector(launch.getFloats().vec());
      instructions.push_back(fb::CreateInstruction(fbb, kernel, inputs, outputs,
                                                   ints, floats, /*stream=*/0));
    }
    auto name = fbb.CreateString(program.getSymName().str());
    programs.push_back(
        fb::CreateProgram(fbb, name, fbb.CreateVector(instructions)));
  }

  LlamaConfig llama = LlamaConfig::fromAttr(config);
  auto model = fb::CreateModelInfo(
      fbb, fbb.CreateString(hfConfigJson(llama)), llama.vocabSize,
      llama.maxPositionEmbeddings, microBatch, seqLen, microbatches);
  auto rank = fb::CreateRank(fbb, /*rank=*/0, arena.getInt(),
                             fbb.CreateVector(buffers),
                             fbb.CreateVector(programs));
  std::vector<flatbuffers::Offset<fb::Rank>> ranks{rank};
  auto plan = fb::CreatePlan(fbb, mlt::rt::kPlanFormatVersion,
                             fbb.CreateString("mlt"), model,
                             /*world_size=*/1, fbb.CreateVector(ranks));
  fbb.Finish(plan, mlt::rt::kPlanFileIdentifier);
  bytes.assign(reinterpret_cast<const char *>(fbb.GetBufferPointer()),
               fbb.GetSize());
  return success();
}
