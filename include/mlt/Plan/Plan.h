//===- Plan.h - plan files in memory ----------------------------*- C++ -*-===//
//
// Part of mlt. A plan (Plan.fbs) decoded into plain C++ values, and the
// functions that read, verify, write and print one. Reading goes in order:
// the file identifier, the checksum over the whole content (PlanFormat.h's
// trailer), the format version, FlatBuffers' verifier (every
// offset inside the file), decoding (every enum value and kernel name known),
// then the semantic checks of PlanVerifier.cpp (the mesh and the ranks, every
// buffer inside the arena and sized by its shape, every block inside its
// tensor, every instruction's buffer indices, arity and operand sizes, the
// collectives matching across ranks, the sends and receives matched and free
// of deadlock (TransferCheck.h), the training contract of PlanFormat.h).
// A plan that passes cannot make the executor read or write outside its
// arena. Each failure is one line naming the problem.
//
// Ranks share in memory the buffers and programs that the file writes once
// for all of them (SharedVector.h): a plan of thousands of ranks is not
// thousands of copies of its programs.
//
// FlatBuffers stays inside the library: this header is plain C++, so the
// executor, the backends and the tools never see the generated code.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_PLAN_H
#define MLT_PLAN_PLAN_H

#include "mlt/Plan/ElementType.h"
#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/Mesh.h"
#include "mlt/Plan/SharedVector.h"
#include "mlt/Support/Status.h"

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlt::rt {

/// What a buffer holds; the values are Plan.fbs's `BufferKind`.
enum class BufferKind : uint8_t {
  Parameter = 0,
  Gradient = 1,
  OptimizerState = 2,
  Input = 3,
  Output = 4,
  Temporary = 5,
  Constant = 6,
  ParameterCopy = 7,
};

/// "parameter", "gradient", "optimizer_state", "input", "output",
/// "temporary", "constant", "parameter_copy".
const char *bufferKindName(BufferKind kind);

/// What selects the copy of a buffer with several; the values are
/// Plan.fbs's `CopyIndex`.
enum class CopyIndex : uint8_t { MicroBatch = 0, Slot = 1 };

/// A range of one parameter held by a buffer (Plan.fbs's Segment): the
/// buffer's elements [offset, offset + count) are elements [begin, begin +
/// count) of the parameter's block (fullShape, sliceOffset, blockShape;
/// all empty: the whole tensor), flattened row-major.
struct SegmentDesc {
  std::string parameter;
  std::vector<int64_t> fullShape;
  std::vector<int64_t> sliceOffset;
  std::vector<int64_t> blockShape;
  int64_t begin = 0;
  int64_t count = 0;
  int64_t offset = 0;
};

/// One named range of a rank's arena.
struct BufferDesc {
  std::string name;
  BufferKind kind = BufferKind::Temporary;
  ElementType dtype = ElementType::F32;
  std::vector<int64_t> shape;
  /// Byte offset in the arena and byte size (product(shape) * element size).
  uint64_t offset = 0;
  uint64_t bytes = 0;
  /// The HF name, for Parameter, Gradient, OptimizerState and
  /// ParameterCopy buffers.
  std::string parameter;
  /// For Constant: the value of every element.
  double constantValue = 0.0;
  /// For Parameter: whether AdamW applies weight decay.
  bool decay = false;
  /// When the buffer holds a block of a larger tensor: the tensor's shape,
  /// and where the block starts in it (the block is [sliceOffset, sliceOffset
  /// + shape)). Both empty: the buffer holds the whole tensor. Only
  /// per-parameter buffers and the tokens/labels inputs may be blocks.
  std::vector<int64_t> fullShape;
  std::vector<int64_t> sliceOffset;
  /// Copies, one per micro-batch of the step (tokens, labels, loss) or one
  /// per slot (`copyIndex`; an activation a forward body keeps for its
  /// backward body, per micro-batch in flight): a launch in a call of
  /// micro-batch (slot) k touches copy k, at offset + k * copyStride().
  /// `shape` and `bytes` are one copy's. 1: a plain buffer.
  uint32_t copies = 1;
  CopyIndex copyIndex = CopyIndex::MicroBatch;
  /// A view: the index of the buffer whose bytes contain this one's (not
  /// itself a view); -1: none. A view may overlap its base and the base's
  /// other views. It is aligned as every buffer is (kPlanBufferAlignment),
  /// has its base's element type, and both have one copy.
  int32_t viewOf = -1;
  /// Ranges of several parameters (Parameter, Gradient and OptimizerState
  /// buffers with no `parameter`), in increasing offset; elements outside
  /// them are zero padding. Where a parameter has segments in buffers of a
  /// kind, they hold that kind's state of it (not the buffers naming it).
  std::vector<SegmentDesc> segments;

  /// Bytes from one copy to the next: `bytes` rounded up to the plan's
  /// buffer alignment.
  uint64_t copyStride() const;
  /// The bytes of the arena the buffer spans, every copy included.
  uint64_t extentBytes() const;
  /// Where copy `copy` starts in the arena.
  uint64_t copyOffset(uint32_t copy) const {
    return offset + uint64_t(copy) * copyStride();
  }
  /// The copy that a launch in a call of micro-batch `microbatch` and slot
  /// `slot` (-1: none) touches: the one its copy index picks, copy 0 for a
  /// plain buffer or a call without that index (as the executor resolves
  /// them; verifyStep keeps it below `copies`).
  uint32_t copyFor(int32_t microbatch, int32_t slot) const {
    const int32_t copy = copyIndex == CopyIndex::Slot ? slot : microbatch;
    return copies > 1 && copy > 0 ? uint32_t(copy) : 0;
  }

  /// The product of `shape` (1 for a scalar). Only meaningful for a verified
  /// plan, where it cannot overflow.
  int64_t numElements() const;
  /// Whether the buffer is declared as a block (fullShape is set).
  bool isBlock() const { return !fullShape.empty(); }
  /// The shape of the whole tensor: fullShape, or shape when not a block.
  const std::vector<int64_t> &tensorShape() const {
    return isBlock() ? fullShape : shape;
  }
  /// Where the block starts: sliceOffset, or zeros when not a block.
  std::vector<int64_t> blockOffset() const {
    return isBlock() ? sliceOffset : std::vector<int64_t>(shape.size(), 0);
  }
};

/// One kernel launch.
struct InstructionDesc {
  Kernel kernel = Kernel::Add;
  /// Indices into the rank's buffers.
  std::vector<uint32_t> inputs;
  std::vector<uint32_t> outputs;
  /// Attributes in the order Kernels.def gives.
  std::vector<int64_t> ints;
  std::vector<double> floats;
  /// The stream it goes to (0: compute). The CPU backend runs everything in
  /// program order, which the tokens make a valid order, and ignores it.
  uint8_t stream = 0;
  /// Tokens it starts after (signalled by earlier instructions of its
  /// program), and the token it signals when done (-1: none).
  std::vector<uint32_t> waits;
  int32_t token = -1;
};

/// An ordered list of launches run as one unit.
struct ProgramDesc {
  std::string name;
  std::vector<InstructionDesc> instructions;
};

/// What a schedule item does (Plan.fbs's WorkKind; the compiler's
/// PipelineSchedule.h has the same values).
enum class WorkKind : uint8_t { Forward = 0, Backward = 1, WeightGradient = 2 };

/// One item of a rank's schedule: `F3.0` is the forward pass of micro-batch
/// 3 through model chunk 0.
struct WorkItem {
  WorkKind kind = WorkKind::Forward;
  uint32_t microbatch = 0;
  uint32_t chunk = 0;
  /// "F3.0".
  std::string str() const;
};

/// One call of a rank's step: a program run with the buffers of one
/// micro-batch (or of none), doing some items of the schedule. A call of a
/// transfer program (isTransferProgram) is a transfer call; consecutive
/// ones form a transfer group (transferGroups, Kernels.def's "Transfers").
struct CallDesc {
  /// Index into the rank's programs.
  uint32_t program = 0;
  /// The micro-batch and the slot whose copies its launches touch; -1:
  /// none.
  int32_t microbatch = -1;
  std::vector<WorkItem> work;
  int32_t slot = -1;
};

/// A rank's lists of calls: the training step, and the evaluation step
/// (every micro-batch's forward pass and loss alone, Plan.fbs's
/// `eval_step`).
enum class StepKind : uint8_t { Training, Evaluation };

/// "step" or "evaluation step", for messages.
const char *stepKindName(StepKind kind);

/// Everything one rank holds and runs. A decoded plan's ranks share the
/// buffers and programs they have alike (SharedVector.h).
struct RankPlan {
  uint32_t rank = 0;
  uint64_t arenaBytes = 0;
  SharedVector<BufferDesc> buffers;
  SharedVector<ProgramDesc> programs;
  /// The training step: the calls the runtime makes, in order, each after
  /// the previous one has ended on every stream.
  std::vector<CallDesc> step;
  /// The evaluation step, run as the step is (between two training steps,
  /// or before the first); empty: the plan cannot evaluate.
  std::vector<CallDesc> evalStep;

  /// The calls of the step of `kind`.
  const std::vector<CallDesc> &calls(StepKind kind) const {
    return kind == StepKind::Training ? step : evalStep;
  }

  /// The schedule the step of `kind` does: every call's work, in order
  /// ("F0.0 B0.0 F1.0 B1.0"; the evaluation step's "F0.0 F1.0").
  std::string scheduleString(StepKind kind = StepKind::Training) const;

  /// The index of the buffer named `name`, if any.
  std::optional<size_t> findBuffer(std::string_view name) const;
  /// The program named `name`, or nullptr.
  const ProgramDesc *findProgram(std::string_view name) const;
};

/// Whether `program` launches a send or a receive: a transfer program
/// (Kernels.def's "Transfers"; verifyRank checks that it then launches
/// nothing else).
bool isTransferProgram(const ProgramDesc &program);

/// The calls [begin, end) of one transfer group of a rank's step.
struct TransferGroup {
  size_t begin = 0;
  size_t end = 0;
};
/// The transfer groups of `rank`'s step of `kind`, in order: each maximal
/// run of consecutive calls of transfer programs (programs in range:
/// verifyStep).
std::vector<TransferGroup> transferGroups(const RankPlan &rank,
                                          StepKind kind = StepKind::Training);

/// The model and run shape that the plan was compiled for.
struct ModelInfo {
  /// HF config.json text, written back with saved checkpoints.
  std::string hfConfig;
  int64_t vocabSize = 0;
  int64_t maxPositionEmbeddings = 0;
  /// Sequences per micro-batch, tokens per sequence, micro-batches per step.
  int64_t microBatch = 0;
  int64_t seqLen = 0;
  int64_t microbatches = 1;
  /// The order each sequence's tokens and labels are fed in: 0 natural; N
  /// (context parallelism: 2 * cp) the load-balanced order of N chunks
  /// (SequenceOrder.h).
  int64_t sequenceChunks = 0;

  /// Sequences per optimizer step: microBatch * microbatches.
  int64_t globalBatch() const { return microBatch * microbatches; }
};

/// A whole plan: the model, the mesh, then one RankPlan per rank.
struct Plan {
  uint32_t formatVersion = 0;
  std::string producer;
  ModelInfo model;
  /// The product of the mesh's sizes (1 without a mesh).
  uint32_t worldSize = 1;
  std::vector<RankPlan> ranks;
  /// The device mesh (Mesh.h's row-major order); collectives name an axis by
  /// its index here. Empty: a single rank, which launches no collectives.
  std::vector<MeshAxis> mesh;
  /// The GPU architecture the plan was compiled for ("sm_90"); empty: any.
  std::string target;
};

/// The plan's mesh as a Mesh; fails when the plan has no mesh (a single
/// rank) or when its axes are malformed (verifyPlanStructure checks them).
StatusOr<Mesh> planMesh(const Plan &plan);

/// Whether the plan has an evaluation step (every rank has one, or none:
/// verifyTrainingContract).
bool hasEvaluation(const Plan &plan);

//===----------------------------------------------------------------------===//
// Reading and writing
//===----------------------------------------------------------------------===//

/// True when `data` is long enough to be a FlatBuffer and carries the plan
/// file identifier "MLTP" (how tools tell a plan from a model by content).
bool hasPlanIdentifier(const void *data, size_t size);

/// The checksum trailer at the end of a plan file (PlanFormat.h's
/// kPlanChecksumMagic): the size of the content before it, the CRC-32 the
/// trailer holds and the one of that content.
struct PlanTrailer {
  size_t contentSize = 0;
  uint32_t stored = 0;
  uint32_t computed = 0;
  bool matches() const { return stored == computed; }
};

/// The trailer `data` ends with, or nullopt when it ends with none (a plan
/// of a version before 7, or a truncated file).
std::optional<PlanTrailer> readPlanTrailer(const void *data, size_t size);

/// Seals a serialized plan (a Plan FlatBuffer): appends the checksum
/// trailer over `bytes`. What every plan writer does last.
void appendPlanChecksum(std::string &bytes);

/// Reads a serialized plan and verifies it completely: the identifier, the
/// checksum trailer (before anything else: "checksum mismatch"), then the
/// content as parsePlanContent does. Errors are one line prefixed with
/// `source` (the file name, for messages), e.g. "plan.mltplan: plan format
/// version 7, this mlt-run reads version 2".
StatusOr<Plan> parsePlan(const void *data, size_t size,
                         const std::string &source);

/// Whether `plan` holds only some of its world's ranks: one per pipeline
/// stage (a compile's representatives, CompileOptions::representatives),
/// which the cost model predicts the whole plan's step from
/// (mlt/Analysis/Timeline.h). No runtime loads such a plan: parsePlan
/// refuses it.
bool isRepresentativePlan(const Plan &plan);

/// Reads a plan of representative ranks as parsePlan reads a whole plan,
/// but for the checks across ranks, which need every rank: the identifier,
/// the checksum, the format version, FlatBuffers' verifier, decoding, the
/// mesh, and verifyRank on each rank (numbered in increasing order inside
/// the world).
StatusOr<Plan> parseRepresentativePlan(const void *data, size_t size,
                                       const std::string &source);

/// The layer below parsePlan's checksum: reads `size` bytes of a plan's
/// content (the FlatBuffer, without the trailer) in order: the format
/// version, FlatBuffers' verifier, decoding, then verifyPlan. For the
/// fuzzer, which reaches the semantic checks without forging checksums, and
/// for parsePlan once the checksum matches.
StatusOr<Plan> parsePlanContent(const void *data, size_t size,
                                const std::string &source);

/// Reads the file at `path` (any name: plans are recognized by content) and
/// parses it; the file's bytes are returned in `bytes` when given.
StatusOr<Plan> readPlanFile(const std::string &path,
                            std::string *bytes = nullptr);

/// Serializes `plan` as a plan file (with the identifier and the checksum
/// trailer). Writes what it is given, the format version included: verify
/// first if it matters. A buffer or program its ranks share is written
/// once (and read back shared).
std::string serializePlan(const Plan &plan);

//===----------------------------------------------------------------------===//
// Verification (PlanVerifier.cpp, TrainingContract.cpp)
//===----------------------------------------------------------------------===//

/// The checks that make a rank safe to execute: every buffer named uniquely,
/// aligned, inside the arena, with bytes == product(shape) * element size;
/// a block (fullShape, sliceOffset) of shape's rank and inside its tensor;
/// a view (viewOf) of another buffer that is no view, of its element type,
/// inside it, both with one copy, and persistent only over a persistent
/// base; segments only on parameter, gradient and optimizer-state buffers
/// that name no parameter and are no block, each of a named parameter, of
/// count > 0, inside the buffer after the previous one, of a block (all
/// three fields empty, or of one rank inside full_shape) whose elements
/// hold its range; persistent buffers (all but temporaries) disjoint from
/// every other buffer, but for a view with its base and the base's other
/// views (a temporary may only alias one exactly, as a view, unless it is
/// a declared view); every instruction with
/// its Kernels.def arity, buffer indices in range, operands of the element
/// counts its integer attributes imply, and i32 ids and labels; collectives
/// on an axis of `mesh` (the plan's), with the sizes its group implies and
/// input and output disjoint or in place; streams below kPlanMaxStreams,
/// each token signalled once, before the instructions that wait for it, and
/// instructions of different streams that touch a common byte (one writing
/// it) ordered by tokens; sends and receives with their peer inside their
/// axis, in transfer programs of transfers alone, on stream 0, and no
/// transfer of a transfer group writing what another touches
/// (verifyRankTransfers, TransferCheck.h). The evaluation step's calls are
/// held to what the step's are. Without a mesh, a rank may launch no
/// collective and no transfer.
Status verifyRank(const RankPlan &rank, const std::vector<MeshAxis> &mesh = {});

/// The mesh (axes named as Mesh::create requires, world_size their product,
/// or 1 without a mesh), ranks numbered 0..world_size-1 in order, verifyRank
/// for every rank, and collectives that match across ranks: in every program
/// and in each step (the training and the evaluation step), the members of
/// each axis group launch the same collectives (kind, type, count) on that
/// axis in the same order; and each step's sends and receives matched per
/// ordered pair of ranks, and each step free of deadlock (verifyTransfers,
/// TransferCheck.h).
Status verifyPlanStructure(const Plan &plan);

/// The training contract of PlanFormat.h, on every rank: a step of calls
/// that covers every micro-batch (each call's program in range, a call
/// without a micro-batch touching no buffer with copies), the inputs tokens
/// and labels (i32 blocks of [micro_batch, seq_len], a copy per
/// micro-batch) and the hyper.* f32 scalars, the outputs loss (an f32 or
/// f64 scalar, a copy per micro-batch) and grad_norm (f32 scalar), and parameter, gradient and
/// optimizer-state buffers that name their parameter (or are flat: with
/// segments, views, bases of views, or a slice of padding alone, which a
/// buffer of its name has segments on another rank), a gradient, state or
/// compute copy holding the same block as its parameter's buffer on the
/// rank, or, for a parameter held only by segments, a block that its
/// segments are of. Across ranks: each parameter has one full shape (from
/// every buffer naming it and every segment with a block), dtype and decay
/// (of the parameter buffers naming it or with segments of it; a segmented
/// buffer's decay is its segments'); segments of gradients and states are
/// of parameters; and its holders cover every element: where it has
/// segments in parameter buffers, their distinct (block, range) pairs
/// (replicas on several ranks count once; blocks disjoint unless equal,
/// ranges of one block disjoint unless equal), else the distinct blocks of
/// the parameter buffers naming it, disjoint. Also checks the model info
/// (positive sizes; no more micro-batches than a rank's step has calls),
/// the optimizer's launches (each tensor's gradient, parameter, moments and
/// compute copy of one parameter, with its weight decay, reading the
/// hyper.* inputs), and the plan's HF config against the plan
/// (ModelConfig.h: a JSON object whose vocab_size and
/// max_position_embeddings are the model info's; a whole LLaMA's exactly
/// the plan's parameters, and its launches causal attention and the
/// config's head_dim, rope_theta and rms_norm_eps). And the evaluation
/// step, on every rank or on none: a call of every micro-batch, forward
/// items alone, and programs that write no gradient or optimizer state,
/// and no parameter or compute copy but by an all_gather (a partitioned
/// optimizer's gathers of its buckets): an evaluation leaves the training
/// state as it finds it.
Status verifyTrainingContract(const Plan &plan);

/// The plan rank that reports the loss: the lowest that computes it (rank
/// 0, unless pipeline stages put the loss on the last stage's ranks).
uint32_t reportingRank(const Plan &plan);

/// Everything: the format version, verifyPlanStructure and
/// verifyTrainingContract.
Status verifyPlan(const Plan &plan);

//===----------------------------------------------------------------------===//
// Printing (PlanPrinter.cpp)
//===----------------------------------------------------------------------===//

/// Writes `plan` readably: the model info and the mesh, then per rank the
/// arena size, the buffers (index, name, kind, dtype, shape, offset, bytes,
/// the block, the copies, "view of <base>", the segments as
/// "<parameter>[begin:end)@offset", with "{<block>}" after the parameter
/// when the segment has one), the programs (each instruction's kernel, buffer
/// names, ints and floats, a collective's axis by name) and the step (each
/// call's program, micro-batch and work).
void printPlan(const Plan &plan, std::ostream &os);

/// Writes the schedule of every rank's step, one line per rank:
/// "rank 0: F0.0 B0.0 F1.0 B1.0".
void printSchedule(const Plan &plan, std::ostream &os);

} // namespace mlt::rt

#endif // MLT_PLAN_PLAN_H
