//===- Plan.h - plan files in memory ----------------------------*- C++ -*-===//
//
// Part of mlt. A plan (Plan.fbs) decoded into plain C++ values, and the
// functions that read, verify, write and print one. Reading goes in order:
// the file identifier, the format version, FlatBuffers' verifier (every
// offset inside the file), decoding (every enum value and kernel name known),
// then the semantic checks of PlanVerifier.cpp (every buffer inside the arena
// and sized by its shape, every instruction's buffer indices, arity and
// operand sizes, the training contract of PlanFormat.h). A plan that passes
// cannot make the executor read or write outside its arena. Each failure is
// one line naming the problem.
//
// FlatBuffers stays inside the library: this header is plain C++, so the
// executor, the backends and the tools never see the generated code.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_PLAN_H
#define MLT_RUNTIME_PLAN_H

#include "mlt/Runtime/KernelInfo.h"
#include "mlt/Runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlt::rt {

/// Element types of plan buffers; the values are Plan.fbs's `DType`.
enum class ElementType : uint8_t {
  F32 = 0,
  F64 = 1,
  BF16 = 2,
  F16 = 3,
  I32 = 4,
  I64 = 5
};

/// "f32", "f64", "bf16", "f16", "i32", "i64".
const char *elementTypeName(ElementType type);
/// Bytes per element.
size_t elementSize(ElementType type);
/// True for F32, F64, BF16 and F16.
bool isFloatElementType(ElementType type);

/// What a buffer holds; the values are Plan.fbs's `BufferKind`.
enum class BufferKind : uint8_t {
  Parameter = 0,
  Gradient = 1,
  OptimizerState = 2,
  Input = 3,
  Output = 4,
  Temporary = 5,
  Constant = 6,
};

/// "parameter", "gradient", "optimizer_state", "input", "output",
/// "temporary", "constant".
const char *bufferKindName(BufferKind kind);

/// One named range of a rank's arena.
struct BufferDesc {
  std::string name;
  BufferKind kind = BufferKind::Temporary;
  ElementType dtype = ElementType::F32;
  std::vector<int64_t> shape;
  /// Byte offset in the arena and byte size (product(shape) * element size).
  uint64_t offset = 0;
  uint64_t bytes = 0;
  /// The HF name, for Parameter, Gradient and OptimizerState buffers.
  std::string parameter;
  /// For Constant: the value of every element.
  double constantValue = 0.0;
  /// For Parameter: whether AdamW applies weight decay.
  bool decay = false;

  /// The product of `shape` (1 for a scalar). Only meaningful for a verified
  /// plan, where it cannot overflow.
  int64_t numElements() const;
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
  /// program order and ignores it.
  uint8_t stream = 0;
};

/// An ordered list of launches run as one unit.
struct ProgramDesc {
  std::string name;
  std::vector<InstructionDesc> instructions;
};

/// Everything one rank holds and runs.
struct RankPlan {
  uint32_t rank = 0;
  uint64_t arenaBytes = 0;
  std::vector<BufferDesc> buffers;
  std::vector<ProgramDesc> programs;

  /// The index of the buffer named `name`, if any.
  std::optional<size_t> findBuffer(std::string_view name) const;
  /// The program named `name`, or nullptr.
  const ProgramDesc *findProgram(std::string_view name) const;
};

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

  /// Sequences per optimizer step: microBatch * microbatches.
  int64_t globalBatch() const { return microBatch * microbatches; }
};

/// A whole plan: the model, then one RankPlan per rank.
struct Plan {
  uint32_t formatVersion = 0;
  std::string producer;
  ModelInfo model;
  uint32_t worldSize = 1;
  std::vector<RankPlan> ranks;
};

//===----------------------------------------------------------------------===//
// Reading and writing
//===----------------------------------------------------------------------===//

/// True when `data` is long enough to be a FlatBuffer and carries the plan
/// file identifier "MLTP" (how tools tell a plan from a model by content).
bool hasPlanIdentifier(const void *data, size_t size);

/// Reads a serialized plan and verifies it completely (verifyPlan). Errors
/// are one line prefixed with `source` (the file name, for messages), e.g.
/// "plan.mltplan: plan format version 7, this mlt-run reads version 1".
StatusOr<Plan> parsePlan(const void *data, size_t size,
                         const std::string &source);

/// Reads the file at `path` (any name: plans are recognized by content) and
/// parses it; the file's bytes are returned in `bytes` when given.
StatusOr<Plan> readPlanFile(const std::string &path,
                            std::string *bytes = nullptr);

/// Serializes `plan` as a plan file (with the identifier). Writes what it is
/// given, the format version included: verify first if it matters.
std::string serializePlan(const Plan &plan);

//===----------------------------------------------------------------------===//
// Verification (PlanVerifier.cpp)
//===----------------------------------------------------------------------===//

/// The checks that make a rank safe to execute: every buffer named uniquely,
/// aligned, inside the arena, with bytes == product(shape) * element size;
/// persistent buffers (all but temporaries) disjoint from every other buffer
/// (a temporary may only alias one exactly, as a view); every instruction with
/// its Kernels.def arity, buffer indices in range, operands of the element
/// counts its integer attributes imply, and i32 ids and labels.
Status verifyRank(const RankPlan &rank);

/// verifyRank for every rank, plus ranks numbered 0..world_size-1 in order.
Status verifyPlanStructure(const Plan &plan);

/// The training contract of PlanFormat.h: the programs micro_step and
/// optimizer_step, the inputs tokens and labels ([micro_batch, seq_len] i32)
/// and the hyper.* f32 scalars, the outputs loss (an f32 or f64 scalar) and
/// grad_norm (f32 scalar),
/// and parameter/gradient/optimizer-state buffers that name their parameter.
/// Also checks the model info (positive sizes).
Status verifyTrainingContract(const Plan &plan);

/// Everything: the format version, verifyPlanStructure and
/// verifyTrainingContract.
Status verifyPlan(const Plan &plan);

//===----------------------------------------------------------------------===//
// Printing (PlanPrinter.cpp)
//===----------------------------------------------------------------------===//

/// Writes `plan` readably: the model info, then per rank the arena size, the
/// buffers (index, name, kind, dtype, shape, offset, bytes) and the programs
/// (each instruction's kernel, buffer names, ints and floats).
void printPlan(const Plan &plan, std::ostream &os);

} // namespace mlt::rt

#endif // MLT_RUNTIME_PLAN_H
