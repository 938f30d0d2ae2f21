//===- Parameters.h - parameters by HF name ---------------------*- C++ -*-===//
//
// Part of mlt. Moves a plan's parameters between the executors' arenas and
// the outside world by their Hugging Face names: fresh initialization as HF's
// LlamaForCausalLM does it (with a portable generator, so a seed gives the
// same weights everywhere), loading from a safetensors checkpoint, and taking
// a snapshot for saving one.
//
// The outside world sees whole tensors. When a plan shards a parameter, each
// rank's buffer holds a block of it (BufferDesc::fullShape, sliceOffset):
// initialization generates the whole tensor, exactly as for one rank, and
// writes each rank its block, so a sharded run starts from the same weights;
// loading converts each checkpoint tensor once and does the same; snapshots
// assemble whole tensors from the blocks, taking each block from the lowest
// rank that holds it (replicas are equal, or, for gradients, made complete
// per block by the plan). When the ranks are processes, the whole tensors
// are gathered on rank 0's process through a RankTransport.
//
// A partitioned optimizer (ZeRO) holds parameters in segments instead
// (BufferDesc::segments: ranges of several parameters' blocks in one flat
// buffer, a rank's slice of a bucket). The holder rule of Plan.fbs decides
// where a tensor of a kind is: where a parameter has segments in buffers of
// that kind (parameters, gradients, optimizer states) on any rank, the
// segments hold it and the buffers of that kind naming it do not (those are
// per-parameter views: of the gradients, the rank's local, unreduced ones);
// else the buffers naming it do. Writing a buffer with segments writes it
// whole, once: each segment its range of its parameter's block, zero in the
// padding. Reading takes each distinct (block, range) once, from the lowest
// rank holding it. A slice of padding alone (no segments) is never written:
// it stays as the arena started, zero.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_PARAMETERS_H
#define MLT_RUNTIME_PARAMETERS_H

#include "mlt/Plan/Blocks.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Runtime/comm/RankTransport.h"
#include "mlt/Runtime/exec/Executor.h"
#include "mlt/Runtime/exec/RankGroup.h"
#include "mlt/Runtime/io/SafeTensors.h"
#include "mlt/Support/Status.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace mlt::rt {

/// Standard normal draws from std::mt19937_64 through the Box-Muller
/// transform, written out so that the values do not depend on the standard
/// library (std::normal_distribution's algorithm is unspecified). Each pair of
/// uniforms u1, u2 in (0, 1] (53 bits each) gives two draws,
/// sqrt(-2 ln u1) * cos(2 pi u2) and then sqrt(-2 ln u1) * sin(2 pi u2).
class NormalGenerator {
public:
  explicit NormalGenerator(uint64_t seed) : engine_(seed) {}
  double next();

private:
  std::mt19937_64 engine_;
  bool hasSpare_ = false;
  double spare_ = 0.0;
};

/// Whole tensors by name from wherever they are kept: a TensorMap in
/// memory, or a training checkpoint's shards, read a tensor at a time (so
/// that a process holds one whole tensor at a time, not the model).
class TensorSource {
public:
  virtual ~TensorSource() = default;
  /// The names and whole shapes of the tensors it holds.
  virtual std::vector<ExpectedTensor> tensors() const = 0;
  /// Tensor `name`'s values as floats (any float dtype converted).
  virtual StatusOr<std::vector<float>>
  values(const std::string &name) const = 0;
};

/// A TensorSource over tensors in memory (which it does not own).
class TensorMapSource : public TensorSource {
public:
  explicit TensorMapSource(const TensorMap &tensors) : tensors_(tensors) {}
  std::vector<ExpectedTensor> tensors() const override;
  StatusOr<std::vector<float>> values(const std::string &name) const override;

private:
  const TensorMap &tensors_;
};

/// A piece of a whole tensor as a checkpoint stores it, and where a plan
/// holds it.
struct SavedPiece {
  /// The tensor: a parameter's HF name, or one of AdamW's moments of it,
  /// "exp_avg:<HF name>" or "exp_avg_sq:<HF name>".
  std::string tensor;
  /// Its block of the tensor (layout.fullShape is the tensor's shape) and
  /// which of the block's row-major elements it holds: [begin, begin +
  /// count), the whole block unless `isRange`.
  BlockLayout layout;
  bool isRange = false;
  int64_t begin = 0, count = 0;
  /// The plan rank that holds it, the buffer, and the piece's first
  /// element there.
  uint32_t rank = 0;
  std::string buffer;
  int64_t bufferOffset = 0;
};

/// What a checkpoint of `plan` holds: the pieces of the parameters and of
/// AdamW's moments, every block or range once (from the lowest rank holding
/// it; replicas are equal), together covering each tensor exactly, in
/// plan-rank order. Every process derives the same list from the plan.
StatusOr<std::vector<SavedPiece>> checkpointPieces(const Plan &plan);


/// The parameters that `rank` has (HF names and whole shapes), in buffer
/// order: named by a parameter or compute-copy buffer, or held by a
/// segment of a parameter buffer. A parameter held only by segments of the
/// whole tensor takes its shape from the rank's other buffers naming it
/// (its gradient, its compute copy); where the rank has none, the shape is
/// empty, and planParameters(plan) knows it.
std::vector<ExpectedTensor> planParameters(const RankPlan &rank);
/// The parameters of the model: of every rank, each once (in order of first
/// appearance, rank 0 first), with whole shapes.
std::vector<ExpectedTensor> planParameters(const Plan &plan);

/// Total elements of the parameters that `rank` holds: the segments of its
/// parameter buffers, and the blocks of its parameter buffers naming a
/// parameter that none of its segments holds.
int64_t countParameters(const RankPlan &rank);
/// Total elements of the model's parameters (each whole, once).
int64_t countParameters(const Plan &plan);

/// The initial values of parameter `name` as HF's LlamaForCausalLM sets them
/// (`_init_weights` with initializer_range `stddev`): normal(0, stddev) for a
/// tensor of two or more dimensions (linear and embedding weights), 1 for
/// one-dimensional ones (RMSNorm weights). Each parameter draws from its own
/// generator, seeded from `seed` and its name, so its values do not depend on
/// which other parameters the plan holds or in which order.
std::vector<float> initialParameterValues(const std::string &name,
                                          const std::vector<int64_t> &shape,
                                          uint64_t seed, double stddev = 0.02);

/// Writes initialParameterValues (of each parameter's whole shape, each
/// buffer getting its block) into every Parameter buffer naming a
/// parameter and every Parameter buffer with segments (each segment its
/// range, zero padding), and zeroes the optimizer states, of one executor
/// or of every rank. Every executor refreshes its compute copies before its
/// next program (Executor::markParametersWritten), also one that holds no
/// parameter, since the refresh may all-gather across the ranks.
Status initializeParameters(Executor &executor, uint64_t seed);
Status initializeParameters(RankGroup &ranks, uint64_t seed);

/// Writes `tensors` (any float dtype, converted to the buffers' type) into the
/// Parameter buffers by HF name, each buffer its block, after checkTensors:
/// exactly the plan's parameters, with their whole shapes. Zeroes the
/// optimizer states.
Status loadParameters(Executor &executor, const TensorMap &tensors);
Status loadParameters(RankGroup &ranks, const TensorMap &tensors);
/// The same for a process that holds some ranks (`local`) of `plan` (one
/// process per GPU): the tensors must be exactly the whole plan's
/// parameters; the local ranks take theirs (a pipeline stage's).
Status loadParameters(RankGroup &local, const Plan &plan,
                      const TensorMap &tensors);

/// The tensors of `kind` as whole F32 tensors, assembled from their
/// holders (the holder rule above; each block or range from the lowest rank
/// holding it): parameters and gradients by HF name, for writeCheckpointDir
/// and for dumping gradients; other kinds by buffer name, and an optimizer
/// state's segments as "<buffer>[<parameter>]". Fails when the holders do
/// not cover a tensor (one executor of a sharded plan), or overlap. The
/// holder rule sees only the given ranks: one executor of a plan whose
/// other ranks hold a parameter's segments fails to cover it, or (if no
/// segment of it is on this rank) takes the buffers naming it.
StatusOr<TensorMap> parameterTensors(Executor &executor,
                                     BufferKind kind = BufferKind::Parameter);
StatusOr<TensorMap> parameterTensors(RankGroup &ranks,
                                     BufferKind kind = BufferKind::Parameter);

/// loadParameters from a TensorSource (a checkpoint's shards), a tensor at
/// a time: of every rank of `ranks`, or (with `plan`) of this process's
/// ranks `local`, the source holding exactly the whole plan's parameters.
Status loadParameters(RankGroup &ranks, const TensorSource &source);
Status loadParameters(RankGroup &local, const Plan &plan,
                      const TensorSource &source);

/// AdamW's moments of every parameter as whole F32 tensors, named
/// "exp_avg:<HF name>" and "exp_avg_sq:<HF name>", assembled from their
/// holders whatever the layout (a parameter's own buffers, blocks of them
/// under tensor parallelism, a partitioned optimizer's segments): with the
/// parameters, what a checkpoint holds to continue training.
StatusOr<TensorMap> optimizerStateTensors(RankGroup &ranks);
/// Writes such tensors (exactly the moments of the ranks' parameters,
/// whole shapes, any float dtype) into the ranks' optimizer-state buffers,
/// each holder its block or segment: a checkpoint of one layout resumed at
/// another. Call it after loadParameters, which zeroes them.
Status loadOptimizerState(RankGroup &ranks, const TensorMap &tensors);
/// The same for runs whose ranks are processes (one per GPU), as
/// gatherParameterTensors and loadParameters(local, plan, ...): the moments
/// assembled on the process of plan rank 0 (empty on the others), and
/// each process's ranks taking theirs from the whole plan's moments.
StatusOr<TensorMap> gatherOptimizerStateTensors(RankGroup &local,
                                                const Plan &plan,
                                                RankTransport &transport);
Status loadOptimizerState(RankGroup &local, const Plan &plan,
                          const TensorMap &tensors);
/// loadOptimizerState from a TensorSource (a checkpoint's shards).
Status loadOptimizerState(RankGroup &ranks, const TensorSource &source);
Status loadOptimizerState(RankGroup &local, const Plan &plan,
                          const TensorSource &source);

/// parameterTensors for a run whose ranks are processes (one per GPU):
/// every process calls it with its own ranks (`local`, e.g. a RankGroup
/// created for one rank) and the whole `plan`. The process holding plan
/// rank 0 gets the whole tensors; it receives each block that it does not
/// hold from the lowest rank holding it, which sends it through
/// `transport` (world ranks = plan ranks); the other processes send their
/// blocks and get an empty map. A segment is sent as its range alone. Every
/// process derives the same transfers from the whole plan (and the same
/// verdict where the holders do not cover a tensor, before any transfer),
/// so the sends and receives pair up.
StatusOr<TensorMap>
gatherParameterTensors(RankGroup &local, const Plan &plan,
                       RankTransport &transport,
                       BufferKind kind = BufferKind::Parameter);

} // namespace mlt::rt

#endif // MLT_RUNTIME_PARAMETERS_H
