//===- Gemm.cpp - CPU matrix products through BLAS ------------------------===//
//
// Part of mlt. Checks gemm arguments and forwards them to OpenBLAS's row-major
// CBLAS interface. The checks are done here rather than left to BLAS because
// BLAS reports bad arguments by printing from `xerbla`, which a runtime cannot
// turn into an error for its caller.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/Gemm.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <type_traits>

using namespace mlt;
using namespace mlt::cpu;

namespace {

/// Checks the sizes of one gemm: non-negative, within BLAS's int, and leading
/// dimensions at least as long as the stored rows.
Status checkGemmArgs(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                     int64_t lda, int64_t ldb, int64_t ldc) {
  if (m < 0 || n < 0 || k < 0)
    return errorf("gemm: negative size (m = ", m, ", n = ", n, ", k = ", k,
                  ")");
  const int64_t aCols = transA ? m : k;
  const int64_t bCols = transB ? k : n;
  if (lda < std::max<int64_t>(1, aCols))
    return errorf("gemm: lda = ", lda, " is shorter than a row of A (", aCols,
                  " elements)");
  if (ldb < std::max<int64_t>(1, bCols))
    return errorf("gemm: ldb = ", ldb, " is shorter than a row of B (", bCols,
                  " elements)");
  if (ldc < std::max<int64_t>(1, n))
    return errorf("gemm: ldc = ", ldc, " is shorter than a row of C (", n,
                  " elements)");
  for (int64_t size : {m, n, k, lda, ldb, ldc})
    if (size > INT_MAX)
      return errorf("gemm: size ", size,
                    " exceeds the 32-bit integers of BLAS");
  return Status::ok();
}

/// One row-major gemm on BLAS, arguments already checked.
template <typename T>
void blasGemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
              T alpha, const T *a, int64_t lda, const T *b, int64_t ldb, T beta,
              T *c, int64_t ldc) {
  const CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

} // namespace

template <typename T>
Status mlt::cpu::gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                      T alpha, const T *a, int64_t lda, const T *b, int64_t ldb,
                      T beta, T *c, int64_t ldc) {
  MLT_RETURN_IF_ERROR(checkGemmArgs(transA, transB, m, n, k, lda, ldb, ldc));
  if (m == 0 || n == 0)
    return Status::ok();
  blasGemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  return Status::ok();
}

template <typename T>
Status mlt::cpu::gemmStridedBatched(bool transA, bool transB, int64_t m,
                                    int64_t n, int64_t k, T alpha, const T *a,
                                    int64_t lda, int64_t strideA, const T *b,
                                    int64_t ldb, int64_t strideB, T beta, T *c,
                                    int64_t ldc, int64_t strideC,
                                    int64_t batchCount) {
  MLT_RETURN_IF_ERROR(checkGemmArgs(transA, transB, m, n, k, lda, ldb, ldc));
  if (batchCount < 0 || strideA < 0 || strideB < 0 || strideC < 0)
    return errorf("gemmStridedBatched: negative batch count or stride "
                  "(batchCount = ",
                  batchCount, ", strides ", strideA, ", ", strideB, ", ",
                  strideC, ")");
  if (m == 0 || n == 0)
    return Status::ok();
  for (int64_t i = 0; i < batchCount; ++i)
    blasGemm(transA, transB, m, n, k, alpha, a + i * strideA, lda,
             b + i * strideB, ldb, beta, c + i * strideC, ldc);
  return Status::ok();
}

#define MLT_INSTANTIATE_GEMM(T)                                                \
  template Status mlt::cpu::gemm<T>(bool, bool, int64_t, int64_t, int64_t, T,  \
                                    const T *, int64_t, const T *, int64_t, T, \
                                    T *, int64_t);                             \
  template Status mlt::cpu::gemmStridedBatched<T>(                             \
      bool, bool, int64_t, int64_t, int64_t, T, const T *, int64_t, int64_t,   \
      const T *, int64_t, int64_t, T, T *, int64_t, int64_t, int64_t);
MLT_INSTANTIATE_GEMM(float)
MLT_INSTANTIATE_GEMM(double)

int mlt::cpu::gemmThreads() { return std::max(1, openblas_get_num_threads()); }

int mlt::cpu::shareGemmThreads(unsigned callers) {
  // (the variables OpenBLAS reads at start, in its order of precedence)
  for (const char *chosen :
       {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"})
    if (const char *value = std::getenv(chosen); value && *value)
      return gemmThreads();
  // The pool as OpenBLAS started it, before any call here changed it.
  static const int started = gemmThreads();
  const int threads = std::max(1, started / int(std::max(1u, callers)));
  if (threads != gemmThreads())
    openblas_set_num_threads(threads);
  return gemmThreads();
}

uint64_t mlt::cpu::gemmWorkspaceBytes() {
  // (the 134,221,824 bytes a worker of Debian's OpenBLAS 0.3.21 asks malloc
  // for; other builds' buffers are as large or smaller)
  constexpr uint64_t kBufferBytes = (uint64_t(128) << 20) + 4096;
  return uint64_t(gemmThreads()) * kBufferBytes;
}
