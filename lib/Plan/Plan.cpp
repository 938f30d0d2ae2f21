//===- Plan.cpp - reading and writing plan files --------------------------===//
//
// Part of mlt. The only code that touches the FlatBuffers form of a plan:
// parsePlan checks the identifier, the checksum trailer and the version,
// runs FlatBuffers' verifier and decodes into Plan.h's plain structs
// (rejecting unknown enum values and kernel names); serializePlan does the
// reverse with the FlatBuffers builder and seals the result.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/Plan.h"
#include "mlt/Plan/PlanFormat.h"
#include "mlt/Plan/Plan_generated.h"
#include "mlt/Support/Checksum.h"
#include "mlt/Support/FileKind.h"

#include <cstring>
#include <fstream>
#include <iomanip>
#include <limits>
#include <memory>
#include <sstream>
#include <type_traits>
#include <unordered_map>

using namespace mlt;
using namespace mlt::rt;

// Plan.h's enums carry the schema's values, so that decoding is a cast.
static_assert(uint8_t(ElementType::F32) == uint8_t(plan::DType::F32) &&
                  uint8_t(ElementType::F64) == uint8_t(plan::DType::F64) &&
                  uint8_t(ElementType::BF16) == uint8_t(plan::DType::BF16) &&
                  uint8_t(ElementType::F16) == uint8_t(plan::DType::F16) &&
                  uint8_t(ElementType::I32) == uint8_t(plan::DType::I32) &&
                  uint8_t(ElementType::I64) == uint8_t(plan::DType::I64) &&
                  uint8_t(ElementType::F8E4M3) ==
                      uint8_t(plan::DType::F8E4M3) &&
                  uint8_t(ElementType::F8E5M2) ==
                      uint8_t(plan::DType::F8E5M2) &&
                  plan::DType::MAX == plan::DType::F8E5M2,
              "ElementType and Plan.fbs's DType differ");
static_assert(
    uint8_t(BufferKind::Parameter) == uint8_t(plan::BufferKind::Parameter) &&
        uint8_t(BufferKind::Gradient) == uint8_t(plan::BufferKind::Gradient) &&
        uint8_t(BufferKind::OptimizerState) ==
            uint8_t(plan::BufferKind::OptimizerState) &&
        uint8_t(BufferKind::Input) == uint8_t(plan::BufferKind::Input) &&
        uint8_t(BufferKind::Output) == uint8_t(plan::BufferKind::Output) &&
        uint8_t(BufferKind::Temporary) ==
            uint8_t(plan::BufferKind::Temporary) &&
        uint8_t(BufferKind::Constant) == uint8_t(plan::BufferKind::Constant) &&
        uint8_t(BufferKind::ParameterCopy) ==
            uint8_t(plan::BufferKind::ParameterCopy) &&
        plan::BufferKind::MAX == plan::BufferKind::ParameterCopy,
    "BufferKind and Plan.fbs's BufferKind differ");
static_assert(uint8_t(CopyIndex::MicroBatch) ==
                      uint8_t(plan::CopyIndex::MicroBatch) &&
                  uint8_t(CopyIndex::Slot) == uint8_t(plan::CopyIndex::Slot) &&
                  plan::CopyIndex::MAX == plan::CopyIndex::Slot,
              "CopyIndex and Plan.fbs's CopyIndex differ");
static_assert(uint8_t(WorkKind::Forward) == uint8_t(plan::WorkKind::Forward) &&
                  uint8_t(WorkKind::Backward) ==
                      uint8_t(plan::WorkKind::Backward) &&
                  uint8_t(WorkKind::WeightGradient) ==
                      uint8_t(plan::WorkKind::WeightGradient) &&
                  plan::WorkKind::MAX == plan::WorkKind::WeightGradient,
              "WorkKind and Plan.fbs's WorkKind differ");

//===----------------------------------------------------------------------===//
// Small helpers of Plan.h
//===----------------------------------------------------------------------===//

const char *mlt::rt::bufferKindName(BufferKind kind) {
  switch (kind) {
  case BufferKind::Parameter:
    return "parameter";
  case BufferKind::Gradient:
    return "gradient";
  case BufferKind::OptimizerState:
    return "optimizer_state";
  case BufferKind::Input:
    return "input";
  case BufferKind::Output:
    return "output";
  case BufferKind::Temporary:
    return "temporary";
  case BufferKind::Constant:
    return "constant";
  case BufferKind::ParameterCopy:
    return "parameter_copy";
  }
  return "?";
}

uint64_t BufferDesc::copyStride() const {
  return (bytes + kPlanBufferAlignment - 1) / kPlanBufferAlignment *
         kPlanBufferAlignment;
}

uint64_t BufferDesc::extentBytes() const {
  return copies > 1 ? copyStride() * (copies - 1) + bytes : bytes;
}

std::string WorkItem::str() const {
  const char letter = kind == WorkKind::Forward    ? 'F'
                      : kind == WorkKind::Backward ? 'B'
                                                   : 'W';
  return letter + std::to_string(microbatch) + "." + std::to_string(chunk);
}

bool mlt::rt::isTransferProgram(const ProgramDesc &program) {
  for (const InstructionDesc &inst : program.instructions)
    if (isTransferKernel(inst.kernel))
      return true;
  return false;
}

const char *mlt::rt::stepKindName(StepKind kind) {
  return kind == StepKind::Training ? "step" : "evaluation step";
}

bool mlt::rt::hasEvaluation(const Plan &plan) {
  return !plan.ranks.empty() && !plan.ranks.front().evalStep.empty();
}

std::vector<TransferGroup> mlt::rt::transferGroups(const RankPlan &rank,
                                                   StepKind kind) {
  const std::vector<CallDesc> &step = rank.calls(kind);
  std::vector<bool> transfers;
  for (const ProgramDesc &program : rank.programs)
    transfers.push_back(isTransferProgram(program));
  std::vector<TransferGroup> groups;
  for (size_t c = 0; c < step.size(); ++c) {
    if (!transfers[step[c].program])
      continue;
    if (!groups.empty() && groups.back().end == c)
      ++groups.back().end;
    else
      groups.push_back({c, c + 1});
  }
  return groups;
}

std::string RankPlan::scheduleString(StepKind kind) const {
  std::string text;
  for (const CallDesc &call : calls(kind))
    for (const WorkItem &item : call.work) {
      if (!text.empty())
        text += ' ';
      text += item.str();
    }
  return text;
}

int64_t BufferDesc::numElements() const {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

std::optional<size_t> RankPlan::findBuffer(std::string_view name) const {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].name == name)
      return i;
  return std::nullopt;
}

const ProgramDesc *RankPlan::findProgram(std::string_view name) const {
  for (const ProgramDesc &program : programs)
    if (program.name == name)
      return &program;
  return nullptr;
}

StatusOr<Mesh> mlt::rt::planMesh(const Plan &plan) {
  if (plan.mesh.empty())
    return errorf("the plan has no mesh (it has a single rank)");
  return Mesh::create(plan.mesh);
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

bool mlt::rt::hasPlanIdentifier(const void *data, size_t size) {
  // A FlatBuffer starts with the root offset, then the 4-byte identifier.
  return size >= 8 &&
         flatbuffers::BufferHasIdentifier(data, kPlanFileIdentifier);
}

namespace {

/// A vector of scalars, copied out byte for byte: FlatBuffers' verifier
/// aligns a vector to its 4-byte length, not to its elements, so in a
/// damaged file a vector of 8-byte values may start 4 bytes off, where
/// FlatBuffers' own reads (a load through a misaligned pointer) would be
/// undefined behaviour.
template <typename T>
std::vector<T> toVector(const flatbuffers::Vector<T> *vector) {
  static_assert(std::is_scalar_v<T> && flatbuffers::is_scalar<T>::value &&
                    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "copies little-endian scalars as they are");
  if (!vector)
    return {};
  std::vector<T> values(vector->size());
  if (!values.empty())
    std::memcpy(values.data(), vector->Data(), values.size() * sizeof(T));
  return values;
}

std::string toString(const flatbuffers::String *string) {
  return string ? string->str() : std::string();
}

/// Reads format_version with only the checks that reading it needs (the root
/// offset and the root table's vtable), so that a plan of another version is
/// reported as such even when its layout no longer passes this version's
/// verifier.
std::optional<uint32_t> readFormatVersion(const uint8_t *data, size_t size) {
  flatbuffers::Verifier verifier(data, size);
  if (!verifier.VerifyOffset(0))
    return std::nullopt;
  const auto *root = flatbuffers::GetRoot<flatbuffers::Table>(data);
  if (!root->VerifyTableStart(verifier) ||
      !root->VerifyField<uint32_t>(verifier, plan::Plan::VT_FORMAT_VERSION, 4))
    return std::nullopt;
  return root->GetField<uint32_t>(plan::Plan::VT_FORMAT_VERSION, 0);
}

/// One buffer table decoded.
StatusOr<BufferDesc> decodeBuffer(const plan::Buffer *fbBuffer) {
  BufferDesc buffer;
  buffer.name = fbBuffer->name()->str();
  auto kind = static_cast<uint8_t>(fbBuffer->kind());
  if (kind > static_cast<uint8_t>(plan::BufferKind::MAX))
    return errorf("buffer '", buffer.name, "' has unknown kind ",
                  unsigned(kind));
  buffer.kind = static_cast<BufferKind>(kind);
  auto dtype = static_cast<uint8_t>(fbBuffer->dtype());
  if (dtype > static_cast<uint8_t>(plan::DType::MAX))
    return errorf("buffer '", buffer.name, "' has unknown dtype ",
                  unsigned(dtype));
  buffer.dtype = static_cast<ElementType>(dtype);
  buffer.shape = toVector(fbBuffer->shape());
  buffer.offset = fbBuffer->offset();
  buffer.bytes = fbBuffer->bytes();
  buffer.parameter = toString(fbBuffer->parameter());
  buffer.constantValue = fbBuffer->constant_value();
  buffer.decay = fbBuffer->decay();
  buffer.fullShape = toVector(fbBuffer->full_shape());
  buffer.sliceOffset = toVector(fbBuffer->slice_offset());
  buffer.copies = fbBuffer->copies();
  auto copyIndex = static_cast<uint8_t>(fbBuffer->copy_index());
  if (copyIndex > static_cast<uint8_t>(plan::CopyIndex::MAX))
    return errorf("buffer '", buffer.name, "' has unknown copy index ",
                  unsigned(copyIndex));
  buffer.copyIndex = static_cast<CopyIndex>(copyIndex);
  buffer.viewOf = fbBuffer->view_of();
  if (fbBuffer->segments()) {
    for (const plan::Segment *fbSegment : *fbBuffer->segments()) {
      SegmentDesc segment;
      segment.parameter = fbSegment->parameter()->str();
      segment.fullShape = toVector(fbSegment->full_shape());
      segment.sliceOffset = toVector(fbSegment->slice_offset());
      segment.blockShape = toVector(fbSegment->block_shape());
      // Unsigned in the file; the verifier's arithmetic is signed.
      constexpr uint64_t limit = std::numeric_limits<int64_t>::max();
      if (fbSegment->begin() > limit || fbSegment->count() > limit ||
          fbSegment->offset() > limit)
        return errorf("buffer '", buffer.name, "' segment ",
                      buffer.segments.size(), " of '",
                      segment.parameter,
                      "' has a begin, count or offset of 2^63 or more");
      segment.begin = int64_t(fbSegment->begin());
      segment.count = int64_t(fbSegment->count());
      segment.offset = int64_t(fbSegment->offset());
      buffer.segments.push_back(std::move(segment));
    }
  }
  return buffer;
}

/// One program table decoded.
StatusOr<ProgramDesc> decodeProgram(const plan::Program *fbProgram) {
  ProgramDesc program;
  program.name = fbProgram->name()->str();
  if (fbProgram->instructions()) {
    size_t index = 0;
    for (const plan::Instruction *fbInst : *fbProgram->instructions()) {
      std::string kernel = fbInst->kernel()->str();
      const KernelSignature *signature = lookupKernel(kernel);
      if (!signature)
        return errorf("program '", program.name, "' instruction ", index,
                      ": unknown kernel '", kernel,
                      "' (not in Kernels.def)");
      InstructionDesc inst;
      inst.kernel = signature->kernel;
      inst.inputs = toVector(fbInst->inputs());
      inst.outputs = toVector(fbInst->outputs());
      inst.ints = toVector(fbInst->ints());
      inst.floats = toVector(fbInst->floats());
      inst.stream = fbInst->stream();
      inst.waits = toVector(fbInst->waits());
      inst.token = fbInst->token();
      program.instructions.push_back(std::move(inst));
      ++index;
    }
  }
  return program;
}

/// The tables a plan's ranks refer to, each decoded once: a plan writes a
/// table once for all the ranks that have it (PlanExport.cpp), and its
/// ranks then share one element in memory (SharedVector.h).
template <typename Table, typename Desc> class SharedTables {
public:
  explicit SharedTables(StatusOr<Desc> (*decode)(const Table *))
      : decode_(decode) {}
  StatusOr<std::shared_ptr<const Desc>> get(const Table *table) {
    auto [it, fresh] = decoded_.try_emplace(table);
    if (fresh) {
      StatusOr<Desc> desc = decode_(table);
      if (!desc)
        return desc.takeStatus();
      it->second = std::make_shared<const Desc>(std::move(*desc));
    }
    return it->second;
  }

private:
  StatusOr<Desc> (*decode_)(const Table *);
  std::unordered_map<const Table *, std::shared_ptr<const Desc>> decoded_;
};

StatusOr<Plan> decode(const plan::Plan &fb) {
  Plan result;
  result.formatVersion = fb.format_version();
  result.producer = toString(fb.producer());
  result.worldSize = fb.world_size();
  result.target = toString(fb.target());
  if (fb.mesh()) {
    for (const plan::MeshAxis *fbAxis : *fb.mesh()) {
      std::string name = fbAxis->name()->str();
      if (fbAxis->size() > uint32_t(std::numeric_limits<int>::max()))
        return errorf("mesh axis '", name, "' has size ", fbAxis->size(),
                      ", more ranks than this runtime counts");
      result.mesh.push_back(MeshAxis{std::move(name), int(fbAxis->size())});
    }
  }

  const plan::ModelInfo &model = *fb.model();
  result.model.hfConfig = toString(model.hf_config());
  result.model.vocabSize = model.vocab_size();
  result.model.maxPositionEmbeddings = model.max_position_embeddings();
  result.model.microBatch = model.micro_batch();
  result.model.seqLen = model.seq_len();
  result.model.microbatches = model.microbatches();
  result.model.sequenceChunks = model.sequence_chunks();

  SharedTables<plan::Buffer, BufferDesc> buffers(decodeBuffer);
  SharedTables<plan::Program, ProgramDesc> programs(decodeProgram);
  for (const plan::Rank *fbRank : *fb.ranks()) {
    RankPlan rank;
    rank.rank = fbRank->rank();
    rank.arenaBytes = fbRank->arena_bytes();
    if (fbRank->buffers()) {
      rank.buffers.reserve(fbRank->buffers()->size());
      for (const plan::Buffer *fbBuffer : *fbRank->buffers()) {
        StatusOr<std::shared_ptr<const BufferDesc>> buffer =
            buffers.get(fbBuffer);
        if (!buffer)
          return buffer.takeStatus();
        rank.buffers.pushShared(std::move(*buffer));
      }
    }
    if (fbRank->programs()) {
      for (const plan::Program *fbProgram : *fbRank->programs()) {
        StatusOr<std::shared_ptr<const ProgramDesc>> program =
            programs.get(fbProgram);
        if (!program)
          return program.takeStatus();
        rank.programs.pushShared(std::move(*program));
      }
    }
    for (auto [fbCalls, calls, what] :
         {std::tuple{fbRank->step(), &rank.step, "step"},
          std::tuple{fbRank->eval_step(), &rank.evalStep,
                     "evaluation step"}}) {
      if (!fbCalls)
        continue;
      for (const plan::Call *fbCall : *fbCalls) {
        CallDesc call;
        call.program = fbCall->program();
        call.microbatch = fbCall->microbatch();
        call.slot = fbCall->slot();
        if (fbCall->work())
          for (const plan::WorkItem *fbItem : *fbCall->work()) {
            auto kind = static_cast<uint8_t>(fbItem->kind());
            if (kind > static_cast<uint8_t>(plan::WorkKind::MAX))
              return errorf(what, " call ", calls->size(),
                            " has a work item of unknown kind ",
                            unsigned(kind));
            call.work.push_back(WorkItem{static_cast<WorkKind>(kind),
                                         fbItem->microbatch(),
                                         fbItem->chunk()});
          }
        calls->push_back(std::move(call));
      }
    }
    result.ranks.push_back(std::move(rank));
  }
  return result;
}

} // namespace

std::optional<PlanTrailer> mlt::rt::readPlanTrailer(const void *data,
                                                   size_t size) {
  const auto *bytes = static_cast<const uint8_t *>(data);
  if (size < kPlanTrailerBytes ||
      std::memcmp(bytes + size - kPlanTrailerBytes, kPlanChecksumMagic, 4) != 0)
    return std::nullopt;
  PlanTrailer trailer;
  trailer.contentSize = size - kPlanTrailerBytes;
  const uint8_t *stored = bytes + size - 4;
  trailer.stored = uint32_t(stored[0]) | uint32_t(stored[1]) << 8 |
                   uint32_t(stored[2]) << 16 | uint32_t(stored[3]) << 24;
  trailer.computed = crc32(bytes, trailer.contentSize);
  return trailer;
}

void mlt::rt::appendPlanChecksum(std::string &bytes) {
  const uint32_t crc = crc32(bytes.data(), bytes.size());
  bytes.append(kPlanChecksumMagic, 4);
  for (int shift = 0; shift < 32; shift += 8)
    bytes.push_back(char((crc >> shift) & 0xFF));
}

namespace {
std::string hex32(uint32_t value) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << value;
  return os.str();
}
} // namespace

namespace {

/// The checks of a plan of representative ranks: its mesh, its ranks
/// named in increasing order inside it, each safe to execute alone.
Status verifyRepresentatives(const Plan &plan) {
  if (plan.formatVersion != kPlanFormatVersion)
    return errorf("plan format version ", plan.formatVersion,
                  ", this mlt-run reads version ", kPlanFormatVersion);
  if (!plan.mesh.empty())
    MLT_RETURN_IF_ERROR(planMesh(plan).status());
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan &rank = plan.ranks[r];
    if (rank.rank >= plan.worldSize || (r && rank.rank <= plan.ranks[r - 1].rank))
      return errorf("representative rank ", rank.rank, " out of order or "
                    "outside the world of ", plan.worldSize);
    MLT_RETURN_IF_ERROR(verifyRank(rank, plan.mesh).withContext(
        "rank " + std::to_string(rank.rank)));
  }
  return Status::ok();
}

/// parsePlanContent, of a whole plan or of representative ranks.
StatusOr<Plan> readContent(const void *data, size_t size,
                           const std::string &source, bool whole) {
  if (!hasPlanIdentifier(data, size))
    return errorf(source, ": not an mlt plan (bad file identifier)");

  // FlatBuffers' verifier checks the alignment of every scalar against the
  // address, so read from 8-byte aligned storage whatever the caller holds.
  std::vector<uint64_t> aligned;
  const auto *bytes = static_cast<const uint8_t *>(data);
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    aligned.resize((size + 7) / 8);
    std::memcpy(aligned.data(), data, size);
    bytes = reinterpret_cast<const uint8_t *>(aligned.data());
  }

  std::optional<uint32_t> version = readFormatVersion(bytes, size);
  if (!version)
    return errorf(source, ": corrupt plan (its root table is malformed)");
  if (*version != kPlanFormatVersion)
    return errorf(source, ": plan format version ", *version,
                  ", this mlt-run reads version ", kPlanFormatVersion);

  // Plans of large models on many ranks hold millions of tables; the depth
  // is the schema's (Plan > Rank > Program > Instruction > vector).
  flatbuffers::Verifier verifier(bytes, size, /*max_depth=*/64,
                                 /*max_tables=*/1u << 30);
  if (!plan::VerifyPlanBuffer(verifier))
    return errorf(source,
                  ": corrupt plan (the FlatBuffers verifier rejects "
                  "it: truncated, or an offset points outside the file)");

  StatusOr<Plan> result = decode(*plan::GetPlan(bytes));
  if (!result)
    return result.takeStatus().withContext(source);
  Status status = whole ? verifyPlan(*result) : verifyRepresentatives(*result);
  if (!status)
    return std::move(status).withContext(source);
  return result;
}


/// parsePlan, of a whole plan or (`whole` false) of representative ranks.
StatusOr<Plan> readPlan(const void *data, size_t size,
                        const std::string &source, bool whole) {
  if (!hasPlanIdentifier(data, size))
    return errorf(source, ": not an mlt plan (bad file identifier)");
  std::optional<PlanTrailer> trailer = readPlanTrailer(data, size);
  if (!trailer) {
    // A plan of a version before the trailer is named by its version.
    std::vector<uint64_t> aligned((size + 7) / 8);
    std::memcpy(aligned.data(), data, size);
    std::optional<uint32_t> version = readFormatVersion(
        reinterpret_cast<const uint8_t *>(aligned.data()), size);
    if (version && *version != kPlanFormatVersion)
      return errorf(source, ": plan format version ", *version,
                    ", this mlt-run reads version ", kPlanFormatVersion);
    return errorf(source, ": corrupt plan (it does not end with its "
                          "checksum: truncated, or damaged at the end)");
  }
  if (!trailer->matches())
    return errorf(source,
                  ": checksum mismatch (the file changed after it was "
                  "written: its content's CRC-32 is ",
                  hex32(trailer->computed), ", the plan's trailer says ",
                  hex32(trailer->stored), ")");
  return readContent(data, trailer->contentSize, source, whole);
}

} // namespace

StatusOr<Plan> mlt::rt::parsePlan(const void *data, size_t size,
                                  const std::string &source) {
  return readPlan(data, size, source, /*whole=*/true);
}

StatusOr<Plan> mlt::rt::parseRepresentativePlan(const void *data, size_t size,
                                                const std::string &source) {
  return readPlan(data, size, source, /*whole=*/false);
}

StatusOr<Plan> mlt::rt::parsePlanContent(const void *data, size_t size,
                                         const std::string &source) {
  return readContent(data, size, source, /*whole=*/true);
}

bool mlt::rt::isRepresentativePlan(const Plan &plan) {
  return plan.ranks.size() < plan.worldSize;
}

StatusOr<Plan> mlt::rt::readPlanFile(const std::string &path,
                                     std::string *bytes) {
  // (a FIFO would block the open)
  MLT_RETURN_IF_ERROR(checkInputPath(path));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return errorf(path, ": cannot open the plan file");
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad())
    return errorf(path, ": cannot read the plan file");
  std::string data = contents.str();
  StatusOr<Plan> plan = parsePlan(data.data(), data.size(), path);
  if (plan && bytes)
    *bytes = std::move(data);
  return plan;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

std::string mlt::rt::serializePlan(const Plan &planValue) {
  flatbuffers::FlatBufferBuilder builder(1 << 16);

  std::vector<flatbuffers::Offset<plan::Rank>> ranks;
  // An element ranks share (SharedVector.h) is written once.
  std::unordered_map<const BufferDesc *, flatbuffers::Offset<plan::Buffer>>
      writtenBuffers;
  std::unordered_map<const ProgramDesc *, flatbuffers::Offset<plan::Program>>
      writtenPrograms;
  for (const RankPlan &rank : planValue.ranks) {
    std::vector<flatbuffers::Offset<plan::Buffer>> buffers;
    for (const BufferDesc &buffer : rank.buffers) {
      if (auto it = writtenBuffers.find(&buffer); it != writtenBuffers.end()) {
        buffers.push_back(it->second);
        continue;
      }
      auto name = builder.CreateString(buffer.name);
      auto shape = builder.CreateVector(buffer.shape);
      auto parameter = buffer.parameter.empty()
                           ? flatbuffers::Offset<flatbuffers::String>()
                           : builder.CreateString(buffer.parameter);
      // Whole buffers leave the block fields out (the smaller file).
      auto fullShape = buffer.fullShape.empty()
                           ? flatbuffers::Offset<flatbuffers::Vector<int64_t>>()
                           : builder.CreateVector(buffer.fullShape);
      auto sliceOffset =
          buffer.sliceOffset.empty()
              ? flatbuffers::Offset<flatbuffers::Vector<int64_t>>()
              : builder.CreateVector(buffer.sliceOffset);
      flatbuffers::Offset<
          flatbuffers::Vector<flatbuffers::Offset<plan::Segment>>>
          segments;
      if (!buffer.segments.empty()) {
        auto optionalVector = [&](const std::vector<int64_t> &values) {
          return values.empty()
                     ? flatbuffers::Offset<flatbuffers::Vector<int64_t>>()
                     : builder.CreateVector(values);
        };
        std::vector<flatbuffers::Offset<plan::Segment>> entries;
        for (const SegmentDesc &segment : buffer.segments) {
          auto segmentParameter = builder.CreateString(segment.parameter);
          auto segmentFull = optionalVector(segment.fullShape);
          auto segmentOffset = optionalVector(segment.sliceOffset);
          auto segmentShape = optionalVector(segment.blockShape);
          entries.push_back(plan::CreateSegment(
              builder, segmentParameter, segmentFull, segmentOffset,
              segmentShape, uint64_t(segment.begin), uint64_t(segment.count),
              uint64_t(segment.offset)));
        }
        segments = builder.CreateVector(entries);
      }
      buffers.push_back(plan::CreateBuffer(
          builder, name, static_cast<plan::BufferKind>(buffer.kind),
          static_cast<plan::DType>(buffer.dtype), shape, buffer.offset,
          buffer.bytes, parameter, buffer.constantValue, buffer.decay,
          fullShape, sliceOffset, buffer.copies,
          static_cast<plan::CopyIndex>(buffer.copyIndex), buffer.viewOf,
          segments));
      writtenBuffers.emplace(&buffer, buffers.back());
    }
    std::vector<flatbuffers::Offset<plan::Program>> programs;
    for (const ProgramDesc &program : rank.programs) {
      if (auto it = writtenPrograms.find(&program);
          it != writtenPrograms.end()) {
        programs.push_back(it->second);
        continue;
      }
      std::vector<flatbuffers::Offset<plan::Instruction>> instructions;
      for (const InstructionDesc &inst : program.instructions) {
        auto kernel =
            builder.CreateString(std::string(kernelName(inst.kernel)));
        auto inputs = builder.CreateVector(inst.inputs);
        auto outputs = builder.CreateVector(inst.outputs);
        auto ints = builder.CreateVector(inst.ints);
        auto floats = builder.CreateVector(inst.floats);
        auto waits = builder.CreateVector(inst.waits);
        instructions.push_back(
            plan::CreateInstruction(builder, kernel, inputs, outputs, ints,
                                    floats, inst.stream, waits, inst.token));
      }
      auto name = builder.CreateString(program.name);
      programs.push_back(plan::CreateProgram(
          builder, name, builder.CreateVector(instructions)));
      writtenPrograms.emplace(&program, programs.back());
    }
    auto callsOf = [&](const std::vector<CallDesc> &step) {
      std::vector<flatbuffers::Offset<plan::Call>> calls;
      for (const CallDesc &call : step) {
        std::vector<plan::WorkItem> work;
        for (const WorkItem &item : call.work)
          work.emplace_back(static_cast<plan::WorkKind>(item.kind),
                            item.microbatch, item.chunk);
        calls.push_back(plan::CreateCall(builder, call.program,
                                         call.microbatch,
                                         builder.CreateVectorOfStructs(work),
                                         call.slot));
      }
      return builder.CreateVector(calls);
    };
    auto step = callsOf(rank.step);
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<plan::Call>>>
        evalStep;
    if (!rank.evalStep.empty())
      evalStep = callsOf(rank.evalStep);
    ranks.push_back(plan::CreateRank(builder, rank.rank, rank.arenaBytes,
                                     builder.CreateVector(buffers),
                                     builder.CreateVector(programs), step,
                                     evalStep));
  }

  const ModelInfo &model = planValue.model;
  auto hfConfig = builder.CreateString(model.hfConfig);
  auto modelInfo = plan::CreateModelInfo(
      builder, hfConfig, model.vocabSize, model.maxPositionEmbeddings,
      model.microBatch, model.seqLen, model.microbatches,
      model.sequenceChunks);
  auto producer = builder.CreateString(planValue.producer);
  auto rankVector = builder.CreateVector(ranks);
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<plan::MeshAxis>>>
      mesh;
  if (!planValue.mesh.empty()) {
    std::vector<flatbuffers::Offset<plan::MeshAxis>> axes;
    for (const MeshAxis &axis : planValue.mesh)
      axes.push_back(plan::CreateMeshAxis(
          builder, builder.CreateString(axis.name), uint32_t(axis.size)));
    mesh = builder.CreateVector(axes);
  }
  auto target = planValue.target.empty()
                    ? flatbuffers::Offset<flatbuffers::String>()
                    : builder.CreateString(planValue.target);
  auto root =
      plan::CreatePlan(builder, planValue.formatVersion, producer, modelInfo,
                       planValue.worldSize, rankVector, mesh, target);
  plan::FinishPlanBuffer(builder, root);
  std::string bytes(reinterpret_cast<const char *>(builder.GetBufferPointer()),
                    builder.GetSize());
  appendPlanChecksum(bytes);
  return bytes;
}
