//===- PlanFormat.h - constants of the plan file contract -------*- C++ -*-===//
//
// Part of mlt. The names and numbers that the compiler (which writes plans)
// and the runtime (which reads them) must agree on beyond the schema in
// Plan.fbs: the format version, the file identifier, the arena alignment, and
// the names of the programs and of the buffers the runtime reads and writes.
// Plain constants with no dependencies, so that both sides include this one
// header instead of spelling the strings twice.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_PLANFORMAT_H
#define MLT_PLAN_PLANFORMAT_H

#include <cstdint>

namespace mlt::rt {

/// The plan format this runtime reads and writes. Bump it whenever a reader of
/// the old version would misread a new plan (a field's meaning changes, a
/// kernel's attributes change order); readers reject other versions by name.
/// Version 2: the mesh, buffer blocks (full_shape, slice_offset) and the
/// collective kernels. Version 3: ParameterCopy buffers and the
/// refresh_parameter_copies program (mixed precision). Version 4: streams
/// and tokens (an instruction's waits and token), and the micro_step_last
/// and micro_step_only programs (gradient reductions under the backward
/// pass). Version 5: the training step as the unit, each rank's `step` of
/// calls, and buffers with a copy per micro-batch (tokens, labels, loss);
/// the runtime runs no program by name but refresh_parameter_copies.
/// Version 6: views (view_of) and segments (the partitioned optimizer's
/// flat buffers). Version 7: rope's rotary scaling attributes (scaling,
/// original_max_position_embeddings; factor, low_freq_factor,
/// high_freq_factor). Version 8: the checksum trailer (below). Version 9:
/// context parallelism: rope's and attention's `axis` and attention's
/// `kv_seq`, and the model's `sequence_chunks` (the load-balanced order the
/// tokens are fed in). Each rank's `eval_step` (the evaluation step) was
/// added to version 9 without a new number: a field of its own that a
/// reader of version 9 without it ignores, training as before, and whose
/// absence a reader with it takes as "this plan cannot evaluate".
/// Version 10: context parallelism's ring: attention's `ring` and
/// `ring_step` (the attention kernels' attributes change), attention_merge
/// and collective_permute. Version 11: all_to_all's `order` (blocks moved
/// into or out of a sequence's natural order as they travel).
inline constexpr uint32_t kPlanFormatVersion = 11;

/// Streams an instruction may name: 0 is the compute stream; the others run
/// beside it, ordered by tokens (Plan.fbs). The overlap scheduling puts the
/// data-parallel gradient reductions on kGradientReduceStream.
inline constexpr unsigned kPlanMaxStreams = 8;
inline constexpr unsigned kGradientReduceStream = 1;
/// The stream of the partitioned optimizer's parameter all-gathers, under
/// the next step's first forward pass.
inline constexpr unsigned kParameterGatherStream = 2;
/// The stream of the backward pass's tensor-parallel all-reduces of input
/// gradients, under the weight-gradient products (mlt-overlap-tp-comm).
inline constexpr unsigned kTensorParallelStream = 3;
/// The stream of context parallelism's ring permutes, each block travelling
/// while the compute stream attends to the one in hand
/// (mlt-overlap-cp-comm).
inline constexpr unsigned kContextParallelStream = 4;
/// Tokens a program may signal: 0..kPlanMaxTokens - 1 (one event each on
/// CUDA).
inline constexpr unsigned kPlanMaxTokens = 1u << 16;

/// The FlatBuffers file identifier (bytes 4..7 of every plan file).
inline constexpr const char *kPlanFileIdentifier = "MLTP";

/// A plan file is the FlatBuffer (Plan.fbs) followed by a trailer of
/// kPlanTrailerBytes: these 4 bytes, then the CRC-32 (Checksum.h) of every
/// byte before the trailer, little-endian. The loader checks it before it
/// reads anything else, so that a flipped byte (which could turn causal
/// attention off, redirect an optimizer output or change the number of
/// micro-batches and still pass every semantic check) is reported as the
/// damage it is. Writers append it last (appendPlanChecksum).
inline constexpr const char *kPlanChecksumMagic = "MLTC";
inline constexpr unsigned kPlanTrailerBytes = 8;

/// Every buffer's arena offset is a multiple of this (so that any element
/// type, and CUDA's vectorized loads, are aligned).
inline constexpr uint64_t kPlanBufferAlignment = 256;

//===----------------------------------------------------------------------===//
// The training step
//
// Each rank's `step` is the whole of one optimizer step, as the compiler
// scheduled it: every micro-batch's forward and backward passes, the
// gradient reductions, the gradient norm, clipping and the AdamW update,
// as calls of the rank's programs. The runtime's part of a step is:
// write the hyper-parameters and the rank's block of every micro-batch's
// tokens and labels (copy k of the "tokens" and "labels" buffers holds
// micro-batch k), run the step, and read each micro-batch's loss (copy k
// of "loss") and the gradient norm. It never zeroes a buffer or chooses a
// program: gradients start each step however the step's first call leaves
// them (it writes them, or the step zeroes them first).
//
// A plan laid out over a mesh gives every rank that contract: "loss" and
// "grad_norm" must come out replicated (the global values, bit for bit on
// every rank; the runtime reads rank 0's and checks the others), and each
// Gradient buffer must hold the complete gradient of its block by the end
// of the step. Parameters are whole tensors outside the runtime: it writes
// each rank its block of them and assembles them from the blocks.
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Programs
//===----------------------------------------------------------------------===//

/// Mixed-precision plans only: casts every Parameter to its ParameterCopy
/// buffer. The runtime runs it after writing parameters (initialization,
/// checkpoint loading), before any other program reads the copies. The one
/// program the runtime runs by name.
inline constexpr const char *kRefreshCopiesProgram = "refresh_parameter_copies";

/// The bodies that mlt's compiler gives the step to call (names for people,
/// tests and the compiler's passes; the runtime only runs them through the
/// step): the forward and backward pass of one micro-batch, accumulating
/// into the Gradient buffers and writing its copy of "loss"; its variant
/// for the step's first micro-batch, which writes every Gradient buffer
/// instead of adding to it; the variants for the last micro-batch (and for
/// the only one of a step of one), which also reduce the gradients over the
/// ranks that share them, under the backward pass (mlt-schedule-overlap);
/// zeroing of the gradients, for steps whose first call does not write them;
/// and the optimizer update: global gradient norm (written to "grad_norm"
/// before clipping), clipping and AdamW, refreshing the ParameterCopy
/// buffers in a mixed-precision plan.
inline constexpr const char *kMicroStepProgram = "micro_step";
inline constexpr const char *kMicroStepFirstProgram = "micro_step_first";
inline constexpr const char *kMicroStepLastProgram = "micro_step_last";
inline constexpr const char *kMicroStepOnlyProgram = "micro_step_only";
inline constexpr const char *kZeroGradientsProgram = "zero_gradients";
/// Where a schedule separates a micro-batch's forward from its backward
/// (GPipe; pipeline stages), micro_step split in two: the forward pass and
/// loss, and the backward pass (its variants for the first, last and only
/// micro-batch named as micro_step's), which reads the activations that
/// the forward left in buffers with a copy per slot.
inline constexpr const char *kForwardProgram = "forward";
inline constexpr const char *kBackwardProgram = "backward";
inline constexpr const char *kBackwardFirstProgram = "backward_first";
inline constexpr const char *kBackwardLastProgram = "backward_last";
inline constexpr const char *kBackwardOnlyProgram = "backward_only";
/// Under a zero-bubble schedule (zb-h1) the backward pass split again: B
/// (`backward`, the input gradients) and W (`backward_weight`, the
/// launches that only write weight gradients), with the same variants.
inline constexpr const char *kBackwardWeightProgram = "backward_weight";
inline constexpr const char *kBackwardWeightFirstProgram =
    "backward_first_weight";
inline constexpr const char *kBackwardWeightLastProgram =
    "backward_weight_last";
inline constexpr const char *kBackwardWeightOnlyProgram =
    "backward_weight_only";
inline constexpr const char *kOptimizerStepProgram = "optimizer_step";
/// The evaluation body (mlt-attach-evaluation): the forward pass and loss
/// of one micro-batch, writing its copy of "loss" and nothing the training
/// step keeps (no gradient, parameter or optimizer state). The plan's
/// evaluation step (a rank's `eval_step`, Plan.fbs) calls it for every
/// micro-batch (under pipeline stages with its transfers,
/// `eval_forward_recv` and `eval_forward_send`; on an interleaved stage
/// per chunk, `c<chunk>.eval_forward`).
inline constexpr const char *kEvalForwardProgram = "eval_forward";
/// Under a partitioned optimizer whose parameter all-gathers run under the
/// next step's first forward pass (mlt-schedule-overlap), the evaluation
/// step starts with those gathers: an evaluation between steps reads whole
/// parameters.
inline constexpr const char *kEvalGatherProgram = "eval_gather_parameters";

//===----------------------------------------------------------------------===//
// Buffers the runtime writes (kind Input) and reads (kind Output)
//===----------------------------------------------------------------------===//

/// [micro_batch, seq_len] i32 token ids and next-token labels, one copy per
/// micro-batch of the step: the global micro-batch, or the block of it that
/// the rank reads (rows for data parallelism, columns for sequence
/// parallelism), given by the buffer's full_shape and slice_offset.
inline constexpr const char *kTokensInput = "tokens";
inline constexpr const char *kLabelsInput = "labels";

/// Hyper-parameters of the optimizer step, f32 scalars (0-d buffers).
inline constexpr const char *kHyperLR = "hyper.lr";
inline constexpr const char *kHyperBeta1 = "hyper.beta1";
inline constexpr const char *kHyperBeta2 = "hyper.beta2";
inline constexpr const char *kHyperEps = "hyper.eps";
inline constexpr const char *kHyperWeightDecay = "hyper.weight_decay";
/// 0 turns clipping off (clip_coefficient then yields 1).
inline constexpr const char *kHyperMaxGradNorm = "hyper.max_grad_norm";
/// The 1-based number of this optimizer step, as a float.
inline constexpr const char *kHyperStep = "hyper.step";

/// The scalar loss of each micro-batch (mean over its tokens; a copy per
/// micro-batch): f32, or f64 for an f64 model. With several ranks it is the
/// loss of the global micro-batch, replicated: bit-identical on every rank
/// (the runtime reads rank 0's).
inline constexpr const char *kLossOutput = "loss";
/// The f32 scalar global gradient norm, before clipping; replicated like the
/// loss.
inline constexpr const char *kGradNormOutput = "grad_norm";

//===----------------------------------------------------------------------===//
// Buffer name prefixes of per-parameter buffers (followed by the HF name,
// which is also the buffer's `parameter` field)
//===----------------------------------------------------------------------===//

inline constexpr const char *kParameterPrefix = "param:";
inline constexpr const char *kGradientPrefix = "grad:";
inline constexpr const char *kExpAvgPrefix = "exp_avg:";
inline constexpr const char *kExpAvgSqPrefix = "exp_avg_sq:";
/// A partitioned optimizer's (ZeRO's) slices of the moments of a bucket of
/// parameters, followed by the bucket's number: "exp_avg_shard.3" (their
/// segments name the parameters).
inline constexpr const char *kExpAvgShardPrefix = "exp_avg_shard.";
inline constexpr const char *kExpAvgSqShardPrefix = "exp_avg_sq_shard.";
/// The compute copy of a parameter (ParameterCopy), e.g. "param_bf16:".
inline constexpr const char *kParameterCopyPrefix = "param_";

} // namespace mlt::rt

#endif // MLT_PLAN_PLANFORMAT_H
