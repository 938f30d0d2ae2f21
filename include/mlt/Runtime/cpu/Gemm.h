//===- Gemm.h - CPU matrix products through BLAS ----------------*- C++ -*-===//
//
// Part of mlt. The CPU backend's matrix products: every `mlt.matmul` of the
// forward pass and both products of its backward run here, on OpenBLAS
// (`cblas_sgemm` / `cblas_dgemm`). The signatures follow cuBLAS's
// `gemm` / `gemmStridedBatched`, but row-major, so that the CPU executor and
// the CUDA executor lower a matmul to the same call with the same arguments.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CPU_GEMM_H
#define MLT_RUNTIME_CPU_GEMM_H

#include "mlt/Support/Status.h"

#include <cstdint>

namespace mlt::cpu {

//===----------------------------------------------------------------------===//
// gemm family
//
// Invariants:
// - Row-major storage. `op(A)` is [m, k] and `op(B)` is [k, n]; A is stored
//   as [m, k] (or [k, m] when transA) with row stride `lda`, B as [k, n] (or
//   [n, k] when transB) with row stride `ldb`, C as [m, n] with row stride
//   `ldc`. Leading dimensions may exceed the stored row length (views into a
//   wider buffer).
// - `C = alpha * op(A) * op(B) + beta * C`. With beta = 0, C is overwritten
//   and its old contents are never read (NaNs in it do not propagate); with
//   beta = 1 the product accumulates into C, which is how parameter gradients
//   of a weight shared by several matmuls add up.
// - Accumulation is in T (BLAS semantics): float products sum in float.
// - A linear layer with a Hugging Face weight W [out, in] is
//   `y = x W^T`: gemm(false, true, rows, out, in, 1, x, in, W, in, 0, y, out);
//   its backward is `dx = dy W` (gemm(false, false, ...)) and
//   `dW += dy^T x` (gemm(true, false, ..., beta = 1)).
// - Errors (negative sizes, a leading dimension shorter than a row, sizes
//   beyond BLAS's 32-bit integers) are returned before anything is written.
//===----------------------------------------------------------------------===//

/// C[m, n] = alpha * op(A) * op(B) + beta * C, row-major, on OpenBLAS.
template <typename T>
Status gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, T alpha,
            const T *a, int64_t lda, const T *b, int64_t ldb, T beta, T *c,
            int64_t ldc);

/// `batchCount` independent gemms; product i uses `a + i * strideA`,
/// `b + i * strideB` and `c + i * strideC`. A stride of 0 shares that operand
/// by every product (a weight applied to each batch entry). The products must
/// not write overlapping parts of C.
template <typename T>
Status gemmStridedBatched(bool transA, bool transB, int64_t m, int64_t n,
                          int64_t k, T alpha, const T *a, int64_t lda,
                          int64_t strideA, const T *b, int64_t ldb,
                          int64_t strideB, T beta, T *c, int64_t ldc,
                          int64_t strideC, int64_t batchCount);

/// The threads of OpenBLAS's pool (OPENBLAS_NUM_THREADS, or the cores, or
/// what shareGemmThreads set).
int gemmThreads();

/// Shares OpenBLAS's pool among `callers` threads that call it at once (the
/// CPU backend's ranks of one process) and returns its threads: the pool
/// OpenBLAS started with (the cores it may run on) divided among them, at
/// least one each. OpenBLAS's workers spin while they wait, so a pool that
/// with the callers oversubscribes the cores runs tens of times slower than
/// one thread (four ranks on two cores: 94x). A thread count the user chose
/// (OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or OMP_NUM_THREADS set) is kept.
int shareGemmThreads(unsigned callers);

/// The host memory OpenBLAS takes besides the operands: a GEMM buffer for
/// each thread of its pool (its BUFFER_SIZE, 128 MiB on x86-64, and a page),
/// which a thread allocates when it first works, and retries for ever when
/// the allocation fails.
uint64_t gemmWorkspaceBytes();

} // namespace mlt::cpu

#endif // MLT_RUNTIME_CPU_GEMM_H
