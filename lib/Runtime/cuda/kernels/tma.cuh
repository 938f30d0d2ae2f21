//===- tma.cuh - Hopper's tensor memory accelerator and mbarriers -*- CUDA -*-===//
//
// Part of mlt. The building blocks of warp-specialized kernels on sm_90a:
// shared-memory transaction barriers (mbarrier: init, arrive, arrive with an
// expected byte count, wait on a phase's parity), 3-D tile loads by the
// tensor memory accelerator (cp.async.bulk.tensor, completing on an
// mbarrier), named barriers over part of a block, the register reallocation
// between warpgroups (setmaxnreg), and on the host the tensor map of a
// [batch][rows][columns] bf16 tensor, encoded through the driver entry point
// the CUDA runtime hands out (no link against libcuda).
//
// Invariants:
// - An mbarrier completes a phase when its pending arrivals reach zero and
//   the transaction bytes announced with arriveExpectTx have landed; a
//   waiter names the phase by its parity (the k-th completion of a barrier
//   has parity k & 1).
// - A tensor map's box is [boxRows][64] bf16 elements (128-byte rows) in the
//   128-byte swizzle: the shared tile it writes is one 64-column block of
//   the wgmma layout (wgTileOffset) when the destination is 1024-byte
//   aligned. Rows past the tensor's (per batch) are filled with zeros, and
//   their bytes count toward the transaction all the same.
// - The device helpers compile to nothing outside sm_90a's device pass
//   (MLT_TMA); kernels that use them trap there.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_TMA_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_TMA_CUH

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mlt::cuda::tma {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MLT_TMA 1
#else
#define MLT_TMA 0
#endif

#ifdef __CUDACC__

__device__ __forceinline__ void mbarInit(uint32_t bar, uint32_t count) {
#if MLT_TMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar),
               "r"(count)
               : "memory");
#endif
}
/// Makes initialized barriers visible to the async proxy (the tensor memory
/// accelerator); a block barrier must follow before any thread uses them.
__device__ __forceinline__ void mbarInitFence() {
#if MLT_TMA
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbarArrive(uint32_t bar) {
#if MLT_TMA
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar)
               : "memory");
#endif
}
/// One arrival that also announces `bytes` of transactions for the phase.
__device__ __forceinline__ void mbarArriveExpectTx(uint32_t bar,
                                                   uint32_t bytes) {
#if MLT_TMA
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   bar),
               "r"(bytes)
               : "memory");
#endif
}
/// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarWait(uint32_t bar, uint32_t parity) {
#if MLT_TMA
  uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
#endif
}

/// Loads the box at (c0 columns, c1 rows, c2 batch) of `map` into shared
/// memory at `dst`, completing `bytes` of the transaction on `bar`.
__device__ __forceinline__ void loadTile3d(uint32_t dst, const CUtensorMap *map,
                                           int c0, int c1, int c2,
                                           uint32_t bar) {
#if MLT_TMA
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_"
      "tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
#endif
}
__device__ __forceinline__ void prefetchTensorMap(const CUtensorMap *map) {
#if MLT_TMA
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map))
               : "memory");
#endif
}

/// Barrier `id` (1-15; 0 is __syncthreads') over `threads` threads of the
/// block: sync waits for the others, arrive only counts this warp.
__device__ __forceinline__ void namedSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void namedArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// The warpgroup's registers per thread, lowered or raised (every thread of
/// the warpgroup executes it; the counts are multiples of 8 in [24, 256]).
template <int N> __device__ __forceinline__ void regsDecrease() {
#if MLT_TMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N> __device__ __forceinline__ void regsIncrease() {
#if MLT_TMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

#endif // __CUDACC__

/// The tensor map of a bf16 tensor [batch][rows][columns] (row-major,
/// `columns` elements a row, 16-byte aligned base and rows) read in boxes of
/// [boxRows][64] with the 128-byte swizzle, rows past `rows` zero-filled.
cudaError_t encodeBf16TileMap(CUtensorMap *map, const void *base,
                              int64_t batch, int64_t rows, int64_t columns,
                              int boxRows);

} // namespace mlt::cuda::tma

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_TMA_CUH
