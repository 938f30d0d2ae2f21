//===- PlanExport.cpp - mlt_rt module to plan file ------------------------===//
//
// Part of mlt. One table of the plan per op of the lowered module: buffers in
// declaration order (launches refer to them by index), programs in order.
// A module with an `mlt.mesh` holds the program that every rank runs (or,
// split into pipeline stages, nested modules, each the program of the
// ranks of its stage): the plan gets the mesh and one rank entry per rank,
// all of a stage with the same
// programs, step, arena and buffers (the tables written once and shared),
// except that a buffer whose `mlt.sharding` splits a dimension holds on each
// rank that rank's block of the global tensor (full_shape, slice_offset),
// and a rank's slice of a flat bucket (`shard`) lies at that rank's place
// in the bucket (a view) and lists the ranges of parameters it owns there
// (segments, each of the rank's block of its parameter). Those tables too
// are written once for the ranks alike on the axes they depend on.
//
//===----------------------------------------------------------------------===//

#include "mlt/Target/PlanExport.h"

#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Import/HFLlama.h"
#include "mlt/Plan/ModelConfig.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Plan/PlanFormat.h"
#include "mlt/Plan/Plan_generated.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <set>

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
  if (isa<Float8E4M3FNType>(type))
    return fb::DType::F8E4M3;
  if (isa<Float8E5M2Type>(type))
    return fb::DType::F8E5M2;
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
  case rtir::BufferKind::parameter_copy:
    return fb::BufferKind::ParameterCopy;
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

/// The global layout of the tensor that a buffer holds a block of: its
/// `mlt.sharding`, a #mlt.sharding or a one-element array of one (the form
/// mlt-lower-to-runtime writes); null for a whole tensor.
FailureOr<ShardingAttr> bufferSharding(rtir::BufferOp buffer) {
  Attribute attr = buffer->getAttr(MLTDialect::getShardingAttrName());
  if (!attr)
    return ShardingAttr();
  ShardingAttr sharding = ShardingAttr::ofSingleResult(attr);
  if (!sharding || sharding.getRank() != buffer.getTensorType().getRank())
    return buffer.emitOpError("has an '")
           << MLTDialect::getShardingAttrName()
           << "' that is not one sharding of the buffer's rank";
  return sharding;
}

/// The block of a global tensor that rank `rank` holds in a buffer of local
/// shape `shape` laid out as `sharding` (whose axes are the mesh's): the
/// tensor's shape and the block's offset in it (in dimension d, the rank's
/// index among d's blocks times the block size: its coordinates on d's
/// axes, major first; MeshAttr::coordinate orders ranks as the runtime's
/// Mesh.h does).
struct TensorBlock {
  std::vector<int64_t> fullShape, sliceOffset;
};

/// Rank `rank`'s index among the blocks of a split over mesh axes `axes`
/// (their indices, major first): its coordinates on them read as digits.
int64_t blockIndex(MeshAttr mesh, int64_t rank, ArrayRef<int64_t> axes) {
  int64_t index = 0;
  for (int64_t axis : axes)
    index = index * mesh.getSizes()[axis] + mesh.coordinate(rank, axis);
  return index;
}

TensorBlock blockOf(ArrayRef<int64_t> shape, ShardingAttr sharding, MeshAttr mesh,
              int64_t rank) {
  TensorBlock block;
  for (auto [d, size] : llvm::enumerate(shape)) {
    // (the export refused axes that are not the mesh's before)
    SmallVector<int64_t, 2> axes;
    for (StringAttr axis : sharding.getAxes(d))
      axes.push_back(mesh.axisIndex(axis.getValue()));
    block.fullShape.push_back(size * sharding.blocks(d, mesh));
    block.sliceOffset.push_back(blockIndex(mesh, rank, axes) * size);
  }
  return block;
}

/// One range of a parameter that a rank's slice of a flat bucket covers.
struct SliceSegment {
  StringRef parameter;
  TensorBlock block;          // of the parameter, on the rank
  std::vector<int64_t> shape; // the block's shape
  int64_t begin, count, offset;
};

/// The views of a flat bucket that name a parameter, in offset order.
struct BucketMember {
  rtir::BufferOp view;
  int64_t offset, elements;
};

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
  // The special-token ids as the imported config wrote them (one id or a
  // list); absent ones stay absent.
  for (auto [key, ids] : {std::pair{"bos_token_id", &c.bosTokenId},
                          std::pair{"eos_token_id", &c.eosTokenId},
                          std::pair{"pad_token_id", &c.padTokenId}}) {
    if (!*ids)
      continue;
    if ((*ids)->list)
      config[key] = llvm::json::Array((*ids)->ids);
    else
      config[key] = (*ids)->ids.front();
  }
  // As transformers 4 wrote it (transformers 5 reads it too, into its
  // rope_parameters, with the top-level rope_theta).
  if (c.ropeScaling.kind == rt::RopeScalingKind::Llama3)
    config["rope_scaling"] =
        llvm::json::Object{{"rope_type", "llama3"},
                           {"factor", c.ropeScaling.factor},
                           {"low_freq_factor", c.ropeScaling.lowFreqFactor},
                           {"high_freq_factor", c.ropeScaling.highFreqFactor},
                           {"original_max_position_embeddings",
                            c.ropeScaling.originalMaxPositionEmbeddings}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(config))) << "\n";
  return text;
}

namespace {

/// The load-balanced chunks the tokens are fed in (ModelInfo's
/// sequence_chunks): 2 * cp where the mesh has a context axis, whose blocks
/// of the sequence hold that order (SequenceOrder.h); 0 otherwise.
int64_t sequenceChunks(MeshAttr mesh) {
  if (!mesh)
    return 0;
  const int64_t axis = mesh.axisIndex(axisName(ParallelAxis::Context));
  return axis < 0 ? 0 : 2 * mesh.getSizes()[axis];
}

/// The run shape the plan's ModelInfo records, from the stages' buffers.
struct RunShape {
  int64_t microBatch = 0, seqLen = 0, microbatches = 1;
};

/// The rank tables of the ranks in `ranks` (their indices in `rankTables`),
/// which all run `module`'s programs: the whole plan's module, or one
/// pipeline stage's.
LogicalResult exportRanks(ModuleOp module, MeshAttr mesh,
                          ArrayRef<int64_t> ranks,
                          flatbuffers::FlatBufferBuilder &fbb,
                          std::vector<flatbuffers::Offset<fb::Rank>> &rankTables,
                          RunShape &shape) {
  auto arena = module->getAttrOfType<IntegerAttr>("mlt_rt.arena_bytes");
  if (!arena)
    return module.emitError("plan export: no arena size; run mlt-plan-memory");
  const int64_t worldSize = int64_t(rankTables.size());
  int64_t &microBatch = shape.microBatch, &seqLen = shape.seqLen;
  llvm::StringMap<uint32_t> bufferIndex;
  // (The module's own symbol lookups scan its ops.)
  llvm::StringMap<rtir::BufferOp> bufferOps;
  // Views name their base by index, and flat buckets list their members.
  llvm::StringMap<std::vector<BucketMember>> bucketMembers;
  for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>()) {
    bufferIndex[buffer.getSymName()] = bufferIndex.size();
    bufferOps[buffer.getSymName()] = buffer;
    if (FlatSymbolRefAttr base = buffer.getViewAttr();
        base && buffer.getParameter() && !buffer.getShardAttr())
      bucketMembers[base.getValue()].push_back(
          {buffer, buffer.getViewOffsetAttr().getInt(),
           buffer.getTensorType().getNumElements()});
  }
  for (auto &entry : bucketMembers)
    llvm::sort(entry.second, [](const BucketMember &a, const BucketMember &b) {
      return a.offset < b.offset;
    });
  // Per rank, its buffer tables; those that are not blocks are shared.
  std::vector<std::vector<flatbuffers::Offset<fb::Buffer>>> buffers(worldSize);
  for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>()) {
    if (!buffer.getOffset())
      return buffer.emitOpError("has no offset; run mlt-plan-memory");
    RankedTensorType type = buffer.getTensorType();
    FailureOr<fb::DType> dtype = dtypeOf(type.getElementType());
    if (failed(dtype))
      return buffer.emitOpError("has an element type the runtime cannot hold: ")
             << type.getElementType();
    FailureOr<ShardingAttr> sharding = bufferSharding(buffer);
    if (failed(sharding))
      return failure();
    bool isBlock = false;
    if (*sharding) {
      if (!mesh)
        return buffer.emitOpError("is sharded, but the module has no '")
               << MLTDialect::getMeshAttrName() << "'";
      for (unsigned d = 0; d < sharding->getRank(); ++d)
        for (StringAttr axis : sharding->getAxes(d)) {
          if (mesh.axisIndex(axis.getValue()) < 0)
            return buffer.emitOpError("is split over '")
                   << axis.getValue() << "', which is not an axis of the mesh "
                   << mesh;
          isBlock = true;
        }
    }
    if (buffer.getSymName() == mlt::rt::kTokensInput) {
      // The model info has the global micro-batch.
      SmallVector<int64_t> global(type.getShape());
      if (isBlock)
        global = llvm::to_vector(
            blockOf(type.getShape(), *sharding, mesh, 0).fullShape);
      microBatch = global[0];
      seqLen = global[1];
    }
    auto name = fbb.CreateString(buffer.getSymName().str());
    auto shape = fbb.CreateVector(type.getShape().vec());
    auto parameter = buffer.getParameter()
                         ? fbb.CreateString(buffer.getParameter()->str())
                         : flatbuffers::Offset<flatbuffers::String>();
    int32_t viewOf = -1;
    if (FlatSymbolRefAttr base = buffer.getViewAttr()) {
      auto it = bufferIndex.find(base.getValue());
      if (it == bufferIndex.end())
        return buffer.emitOpError("is a view of ") << base << ", no buffer";
      viewOf = int32_t(it->second);
    }
    // A rank's slice of a flat bucket: its index among the slices, from
    // its coordinates on the slice's axes (major first).
    SmallVector<int64_t, 2> sliceAxes;
    int64_t slices = 1;
    for (StringRef axis : buffer.getShardAxes()) {
      const int64_t index = mesh ? mesh.axisIndex(axis) : -1;
      if (index < 0)
        return buffer.emitOpError("is a slice over '")
               << axis << "', which is not an axis of the mesh";
      sliceAxes.push_back(index);
      slices *= mesh.getSizes()[index];
    }
    if (!sliceAxes.empty()) {
      rtir::BufferOp source =
          bufferOps.lookup(buffer.getLayoutSource().getValue());
      if (!source ||
          source.getTensorType().getNumElements() !=
              type.getNumElements() * slices)
        return buffer.emitOpError("is not one of ")
               << slices << " equal slices of " << buffer.getLayoutSource();
    }
    // (shard_shift: another rank's slice, (c + shift) mod size, one axis)
    const int64_t shift =
        buffer.getShardShiftAttr() ? buffer.getShardShiftAttr().getInt() : 0;
    auto sliceIndex = [&](int64_t rank) {
      return (blockIndex(mesh, rank, sliceAxes) + shift) % slices;
    };
    const bool perRank = isBlock || !sliceAxes.empty();
    auto create = [&](int64_t rank) {
      flatbuffers::Offset<flatbuffers::Vector<int64_t>> fullShape, sliceOffset;
      if (isBlock) {
        TensorBlock block = blockOf(type.getShape(), *sharding, mesh, rank);
        fullShape = fbb.CreateVector(block.fullShape);
        sliceOffset = fbb.CreateVector(block.sliceOffset);
      }
      uint64_t offset = *buffer.getOffset();
      std::vector<flatbuffers::Offset<fb::Segment>> segments;
      if (!sliceAxes.empty()) {
        const int64_t elements = type.getNumElements();
        const int64_t start = sliceIndex(rank) * elements;
        if (buffer.getViewAttr())
          offset += uint64_t(start) * (buffer.getByteSize() / elements);
        if (buffer.getOwns())
          for (BucketMember member :
               bucketMembers.lookup(buffer.getLayoutSource().getValue())) {
            const int64_t first = std::max(start, member.offset);
            const int64_t end = std::min(start + elements,
                                         member.offset + member.elements);
            if (first >= end)
              continue;
            RankedTensorType memberType = member.view.getTensorType();
            FailureOr<ShardingAttr> memberSharding =
                bufferSharding(member.view);
            TensorBlock block;
            if (succeeded(memberSharding) && *memberSharding)
              block = blockOf(memberType.getShape(), *memberSharding, mesh,
                              rank);
            auto none = flatbuffers::Offset<flatbuffers::Vector<int64_t>>();
            segments.push_back(fb::CreateSegment(
                fbb, fbb.CreateString(member.view.getParameter()->str()),
                block.fullShape.empty() ? none
                                        : fbb.CreateVector(block.fullShape),
                block.sliceOffset.empty()
                    ? none
                    : fbb.CreateVector(block.sliceOffset),
                block.fullShape.empty()
                    ? none
                    : fbb.CreateVector(memberType.getShape().vec()),
                uint64_t(first - member.offset), uint64_t(end - first),
                uint64_t(first - start)));
          }
      }
      return fb::CreateBuffer(
          fbb, name, kindOf(buffer.getKind()), *dtype, shape, offset,
          buffer.getByteSize(), parameter,
          buffer.getValue() ? buffer.getValue()->convertToDouble() : 0.0,
          buffer.getDecay(), fullShape, sliceOffset,
          uint32_t(buffer.getCopies()),
          buffer.getPerSlot() ? fb::CopyIndex::Slot : fb::CopyIndex::MicroBatch,
          viewOf, segments.empty() ? 0 : fbb.CreateVector(segments));
    };
    if (!perRank) {
      auto table = create(ranks.front());
      for (int64_t rank : ranks)
        buffers[rank].push_back(table);
      continue;
    }
    // A rank's table depends on its coordinates on the axes the buffer is
    // split over, its slice's axes and those its slice's members are split
    // over: the ranks alike on those share one table (a tp block is one of
    // tp tables, whatever dp is).
    llvm::SmallSetVector<int64_t, 4> axes;
    auto addAxes = [&](const ShardingAttr &split) {
      for (unsigned d = 0; d < split.getRank(); ++d)
        for (StringAttr axis : split.getAxes(d))
          axes.insert(mesh.axisIndex(axis.getValue()));
    };
    if (isBlock)
      addAxes(*sharding);
    if (!sliceAxes.empty()) {
      axes.insert(sliceAxes.begin(), sliceAxes.end());
      if (buffer.getOwns())
        for (const BucketMember &member :
             bucketMembers.lookup(buffer.getLayoutSource().getValue()))
          if (FailureOr<ShardingAttr> split = bufferSharding(member.view);
              succeeded(split) && *split)
            addAxes(*split);
    }
    std::map<std::vector<int64_t>, flatbuffers::Offset<fb::Buffer>> tables;
    for (int64_t rank : ranks) {
      std::vector<int64_t> at;
      for (int64_t axis : axes)
        at.push_back(mesh.coordinate(rank, axis));
      auto [it, fresh] = tables.try_emplace(std::move(at));
      if (fresh)
        it->second = create(rank);
      buffers[rank].push_back(it->second);
    }
  }

  std::vector<flatbuffers::Offset<fb::Program>> programs;
  llvm::StringMap<uint32_t> programIndex;
  if (auto attr = module->getAttrOfType<IntegerAttr>("mlt_rt.microbatches"))
    shape.microbatches = attr.getInt();
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
      std::vector<uint32_t> tokens(launch.getWaits().begin(),
                                   launch.getWaits().end());
      auto waits = fbb.CreateVector(tokens);
      instructions.push_back(fb::CreateInstruction(
          fbb, kernel, inputs, outputs, ints, floats,
          uint8_t(launch.getStreamIndex()), waits,
          int32_t(launch.getToken().value_or(-1))));
    }
    auto name = fbb.CreateString(program.getSymName().str());
    programIndex[program.getSymName()] = programs.size();
    programs.push_back(
        fb::CreateProgram(fbb, name, fbb.CreateVector(instructions)));
  }

  // The steps: every rank runs the same calls (one SPMD program).
  rtir::StepOp training = rtir::trainingStep(module);
  if (!training)
    return module.emitError("plan export: expected the training step, "
                            "mlt_rt.step @")
           << rtir::kTrainingStepName << " (run mlt-schedule-pipeline)";
  for (rtir::StepOp other : module.getOps<rtir::StepOp>())
    if (other != training && other != rtir::evalStep(module))
      return other.emitError("plan export: a step is @")
             << rtir::kTrainingStepName << " or @" << rtir::kEvalStepName
             << ", not @" << other.getSymName();
  auto callsOf = [&](rtir::StepOp step) {
    std::vector<flatbuffers::Offset<fb::Call>> calls;
    for (rtir::CallOp call : step.getBody().getOps<rtir::CallOp>()) {
      std::vector<fb::WorkItem> work;
      for (const WorkItem &item : call.getWorkItems())
        work.emplace_back(fb::WorkKind(item.kind), uint32_t(item.microbatch),
                          uint32_t(item.chunk));
      IntegerAttr microbatch = call.getMicrobatchAttr();
      IntegerAttr slot = call.getSlotAttr();
      calls.push_back(fb::CreateCall(
          fbb, programIndex.lookup(call.getProgram()),
          microbatch ? int32_t(microbatch.getInt()) : -1,
          fbb.CreateVectorOfStructs(work), slot ? int32_t(slot.getInt()) : -1));
    }
    return fbb.CreateVector(calls);
  };
  auto step = callsOf(training);
  // (absent without an evaluation body: a plan that cannot evaluate)
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Call>>>
      evalStep;
  if (rtir::StepOp evaluation = rtir::evalStep(module))
    evalStep = callsOf(evaluation);
  // Every rank runs the same programs in an arena of the same layout.
  auto programTables = fbb.CreateVector(programs);
  for (int64_t rank : ranks)
    rankTables[rank] = fb::CreateRank(fbb, uint32_t(rank), arena.getInt(),
                                      fbb.CreateVector(buffers[rank]),
                                      programTables, step, evalStep);
  return success();
}

/// Whether the parameters that `module`'s buffers (and its stages') name
/// are exactly those of the LLaMA `config` describes.
bool isLlamaOf(ModuleOp module, const LlamaConfig &config) {
  rt::LlamaShape shape;
  shape.vocabSize = config.vocabSize;
  shape.hiddenSize = config.hiddenSize;
  shape.intermediateSize = config.intermediateSize;
  shape.numLayers = config.numLayers;
  shape.numHeads = config.numHeads;
  shape.numKvHeads = config.numKvHeads;
  shape.headDim = config.headDim;
  shape.tieWordEmbeddings = config.tieWordEmbeddings;
  std::set<std::string> expected, held;
  for (const auto &parameter : rt::llamaParameters(shape))
    expected.insert(parameter.first);
  module.walk([&](rtir::BufferOp buffer) {
    if (std::optional<StringRef> parameter = buffer.getParameter())
      held.insert(parameter->str());
  });
  return held == expected;
}

} // namespace

LogicalResult mlt::exportPlan(ModuleOp module, std::string &bytes,
                              mlt::rt::Plan *parsedPlan,
                              bool representatives) {
  auto config = module->getAttrOfType<LlamaConfigAttr>(
      MLTDialect::getModelAttrName());
  if (!config)
    return module.emitError("plan export: the module has no '")
           << MLTDialect::getModelAttrName() << "' configuration";
  auto mesh = module->getAttrOfType<MeshAttr>(MLTDialect::getMeshAttrName());
  const int64_t worldSize = mesh ? mesh.numRanks() : 1;

  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::Rank>> rankTables(worldSize);
  RunShape shape;
  // A pipeline's stages (mlt-partition-pipeline): each nested module is the
  // program of the ranks whose coordinate on `pp` is its stage.
  SmallVector<ModuleOp> stages(module.getOps<ModuleOp>());
  if (stages.empty()) {
    SmallVector<int64_t> all = llvm::to_vector(
        llvm::seq<int64_t>(0, representatives ? 1 : worldSize));
    if (failed(exportRanks(module, mesh, all, fbb, rankTables, shape)))
      return failure();
  } else {
    int64_t axis = mesh ? mesh.axisIndex(MLTDialect::getPipelineAxisName()) : -1;
    if (axis < 0 || int64_t(stages.size()) != mesh.getSizes()[axis])
      return module.emitError("plan export: the module has ")
             << stages.size()
             << " stage modules, but its mesh's axis 'pp' has "
             << (axis < 0 ? 0 : mesh.getSizes()[axis]) << " stages";
    for (ModuleOp stage : stages) {
      auto index =
          stage->getAttrOfType<IntegerAttr>(MLTDialect::getStageAttrName());
      if (!index)
        return stage.emitError("plan export: a nested module without '")
               << MLTDialect::getStageAttrName() << "'";
      SmallVector<int64_t> ranks;
      for (int64_t rank = 0; rank < worldSize; ++rank)
        if (mesh.coordinate(rank, axis) == index.getInt() &&
            (!representatives || ranks.empty()))
          ranks.push_back(rank);
      RunShape stageShape;
      if (failed(
              exportRanks(stage, mesh, ranks, fbb, rankTables, stageShape)))
        return failure();
      if (index.getInt() == 0)
        shape = stageShape;
    }
  }

  LlamaConfig llama = LlamaConfig::fromAttr(config);
  // The config.json that checkpoints write beside the weights, which the
  // runtime holds to the plan's parameters: only where it describes them
  // (a test's toy module with a LLaMA's config carries none).
  const bool describesParameters = isLlamaOf(module, llama);
  auto model = fb::CreateModelInfo(
      fbb, fbb.CreateString(describesParameters ? hfConfigJson(llama) : ""),
      llama.vocabSize,
      llama.maxPositionEmbeddings, shape.microBatch, shape.seqLen,
      shape.microbatches, sequenceChunks(mesh));
  // (a representative plan: the ranks exported, in order)
  std::vector<flatbuffers::Offset<fb::Rank>> ranks;
  for (const auto &table : rankTables)
    if (!table.IsNull())
      ranks.push_back(table);
  std::vector<flatbuffers::Offset<fb::MeshAxis>> axes;
  if (mesh)
    for (auto [axis, size] : llvm::zip(mesh.getAxes(), mesh.getSizes()))
      axes.push_back(fb::CreateMeshAxis(
          fbb, fbb.CreateString(axis.getValue().str()), size));
  auto target = module->getAttrOfType<StringAttr>("mlt_rt.target");
  auto plan = fb::CreatePlan(
      fbb, mlt::rt::kPlanFormatVersion, fbb.CreateString("mlt"), model,
      worldSize, fbb.CreateVector(ranks),
      mesh ? fbb.CreateVector(axes)
           : flatbuffers::Offset<
                 flatbuffers::Vector<flatbuffers::Offset<fb::MeshAxis>>>(),
      target ? fbb.CreateString(target.getValue().str())
             : flatbuffers::Offset<flatbuffers::String>());
  fbb.Finish(plan, mlt::rt::kPlanFileIdentifier);
  // (room for the trailer first: a plan of thousands of ranks is a
  // gigabyte, and the builder's is freed before the plan is read back)
  bytes.clear();
  bytes.reserve(fbb.GetSize() + mlt::rt::kPlanTrailerBytes);
  bytes.assign(reinterpret_cast<const char *>(fbb.GetBufferPointer()),
               fbb.GetSize());
  fbb.Reset();
  // The checksum over everything written (the runtime checks it first).
  mlt::rt::appendPlanChecksum(bytes);
  // The runtime's checks, before anything runs: every buffer, launch and
  // call, the collectives and transfers matched across ranks, a step that
  // cannot deadlock (the runtime checks again when it loads the plan).
  mlt::StatusOr<mlt::rt::Plan> parsed =
      representatives
          ? mlt::rt::parseRepresentativePlan(bytes.data(), bytes.size(),
                                             "the plan")
          : mlt::rt::parsePlan(bytes.data(), bytes.size(), "the plan");
  if (!parsed) // (the location alone: the module is the whole plan)
    return emitError(module.getLoc(), "plan export: ")
           << parsed.status().message();
  if (parsedPlan)
    *parsedPlan = std::move(*parsed);
  return success();
}
