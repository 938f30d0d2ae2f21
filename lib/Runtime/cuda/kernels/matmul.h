//===- matmul.h - the matmul family on cuBLASLt -----------------*- C++ -*-===//
//
// Part of mlt. Every `matmul` instruction of a plan runs here, on cuBLASLt
// (no hand-written GEMM). One `MatmulRunner` per device context owns the
// cuBLASLt handle, a workspace allocated once, and a cache of per-shape
// descriptors and algorithms, so that a steady-state call creates nothing.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_MATMUL_H
#define MLT_LIB_RUNTIME_CUDA_KERNELS_MATMUL_H

#include "mlt/Plan/ElementType.h"
#include "mlt/Support/Status.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlt::cuda {

//===----------------------------------------------------------------------===//
// matmul family
//
// Invariants (Kernels.def's `matmul`, the CPU backend's semantics):
// - Row-major, contiguous. For each of `batch` entries i:
//   c[i] [m, n] = op(a[i]) op(b[i]), where a[i] is stored [m, k] ([k, m] when
//   transposeA) at a + i * m * k, b[i] is stored [k, n] ([n, k] when
//   transposeB) at b + i * k * n, or at b itself for every i when !bBatched
//   (a weight shared by every batch entry), and c[i] at c + i * m * n.
// - c is overwritten (beta = 0): its old contents are never read, NaNs in it
//   do not propagate. k = 0 writes zeros. With an addend (beta = 1), c =
//   product + addend, summed in f32 in the epilogue and rounded once: the
//   addend is c itself for matmul_accumulate (a weight gradient added into
//   its f32 gradient buffer), or another buffer of c's type and shape.
// - Element types: f32 (a, b, c f32, CUBLAS_COMPUTE_32F: pure fp32, never
//   TF32, the parity mode) and bf16 (a, b bf16, c bf16 or f32, accumulated
//   in fp32 by CUBLAS_COMPUTE_32F, Megatron-style bf16 training: f32 for
//   weight gradients). f64 and the others are errors (the backend's
//   checkSupported rejects f64 plans first).
// - Pointers need only the alignment of their element type; cuBLASLt is told
//   each pointer's actual alignment (part of the cache key), so arena offsets
//   that are not 256-byte aligned get an algorithm that handles them.
// - Sizes: non-negative, m, n, k and batch within int32 (cuBLASLt's limits).
//===----------------------------------------------------------------------===//

/// The `ints` of a matmul instruction: batch, m, n, k, transpose_a,
/// transpose_b, b_batched.
struct MatmulShape {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool transposeA = false;
  bool transposeB = false;
  bool bBatched = false;
};

/// An algorithm's configuration in words: "algo 66 tile 20 stages 35 splitK
/// 1 red 0 swz 0 custom 1 cluster 3" (cuBLASLt's config attributes).
std::string describeAlgorithm(const cublasLtMatmulAlgo_t &algo);

/// How a runner chooses algorithms (mlt-run's --matmul-algorithms and
/// --tune-matmuls).
struct MatmulOptions {
  /// A table of tuned algorithms (mlt/Runtime/io/MatmulTable.h) to load; shapes
  /// it holds run its algorithm, others the heuristic's first. Empty: none.
  std::string algorithms;
  /// Time every candidate of each shape the table lacks on its first run
  /// and write the fastest into `algorithms` (created when missing).
  bool tune = false;
};

/// Runs matmuls on one device through cuBLASLt. Owns a cuBLASLt handle, a
/// 32 MiB workspace (cudaMalloc'd once, by `create`) and the per-shape cache
/// of descriptors and algorithms. A shape's algorithm is, in order: the
/// loaded table's (MatmulOptions::algorithms), checked by
/// cublasLtMatmulAlgoCheck when the shape is first seen; with `tune`, the
/// fastest of cuBLASLt's proposals timed on the shape's first run (the
/// heuristic's up to 8 that need no workspace and up to 8 that fit the 32
/// MiB, one untimed run each, then the median of 7 rounds that time each
/// once in turn, waiting for the stream: the first step only), added to the
/// table and the table saved at once; else the first of cuBLASLt's heuristic
/// asked for algorithms that need no workspace (faster on the H100,
/// bench/matmul-notes.md), or, when it proposes none, for ones that fit the
/// workspace. Each is a function of the shape, the GPU, the library and the
/// table, so runs are bit-reproducible; a tuning run's choices may differ
/// from the next tuning run's where two candidates are close. One per device
/// context, used by one host thread at a time (not thread-safe); `run` must
/// be called with the runner's device current, and calls on different
/// streams must not overlap (they share the workspace).
class MatmulRunner {
public:
  /// Workspace bytes offered to cuBLASLt (what NVIDIA recommends for Hopper).
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

  /// Creates the handle and allocates the workspace on the current device,
  /// and loads `options.algorithms` when given (a missing file is an error
  /// unless tuning, which creates it; see MatmulTable::load for the rest).
  static StatusOr<std::unique_ptr<MatmulRunner>>
  create(const MatmulOptions &options = {});
  ~MatmulRunner();
  MatmulRunner(const MatmulRunner &) = delete;
  MatmulRunner &operator=(const MatmulRunner &) = delete;

  /// Queues c = op(a) op(b) (Kernels.def's matmul) on `stream`. The first
  /// call of a shape builds its descriptors and asks cuBLASLt's heuristic for
  /// an algorithm; later calls of that shape reuse them.
  Status run(const MatmulShape &shape, const void *a, const void *b, void *c,
             rt::ElementType dtype, cudaStream_t stream);
  /// The general form: a and b of `dtype`, c of `outType` (dtype, or f32),
  /// and c = product + addend when `addend` is not null (c itself, or a
  /// buffer of c's type and shape that does not overlap it otherwise).
  Status run(const MatmulShape &shape, const void *a, const void *b, void *c,
             rt::ElementType dtype, rt::ElementType outType, const void *addend,
             cudaStream_t stream);

  /// Queues the FP8 product c = (aScaleInv * a) (bScaleInv * b)^T on Hopper's
  /// FP8 tensor cores: a [m, k] and b stored [n, k] (transposeA false,
  /// transposeB true: both with the reduction dimension contiguous, the only
  /// layout Hopper's FP8 kernels read; fp8.h's quantization writes either
  /// layout), of types f8e4m3 or f8e5m2 but not both f8e5m2; aScaleInv and
  /// bScaleInv point to one f32 each on the device, 16-byte aligned (the
  /// inverse scales of the quantization, read when the product runs;
  /// cuBLASLt refuses others); c bf16 or f32, plus
  /// `addend` when not null, as in `run`. Products accumulate in f32;
  /// `fastAccumulation` (CUBLASLT_MATMUL_DESC_FAST_ACCUM) lets the tensor
  /// cores keep partial sums at their own precision longer, faster and less
  /// accurate (Transformer Engine uses it for forward products only). The
  /// algorithm is chosen as for `run` (table, tuning, heuristic), keyed by
  /// both types and the accumulation mode.
  Status runFp8(const MatmulShape &shape, const void *a, rt::ElementType aType,
                const float *aScaleInv, const void *b, rt::ElementType bType,
                const float *bScaleInv, void *c, rt::ElementType outType,
                const void *addend, bool fastAccumulation, cudaStream_t stream);

  /// Queues G = c.size() products of one shape, c[g] = op(a[g]) op(b[g])
  /// (c[g] += ... when `accumulate`), Kernels.def's matmul_group: one
  /// pointer-array launch (CUBLASLT_BATCH_MODE_POINTER_ARRAY, the operands'
  /// addresses in device arrays made on the group's first run and kept)
  /// where each product is one matrix (batch 1, or a shared b under an
  /// untransposed a), else G launches of `run`. Its algorithm is chosen as a
  /// product's (the table, tuning, the heuristic), but an accumulating group
  /// is not tuned (its timing runs would add into c).
  Status runGroup(const MatmulShape &shape, const std::vector<const void *> &a,
                  const std::vector<const void *> &b,
                  const std::vector<void *> &c, rt::ElementType dtype,
                  rt::ElementType outType, bool accumulate,
                  cudaStream_t stream);

  /// Number of cached shapes (for tests: a second call of a shape adds none).
  size_t cachedShapes() const;
  /// Cached shapes whose algorithm came from the table (loaded or tuned).
  size_t tabledShapes() const;

private:
  struct Impl;
  explicit MatmulRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_MATMUL_H
