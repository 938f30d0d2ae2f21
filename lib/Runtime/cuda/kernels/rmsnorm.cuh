//===- rmsnorm.cuh - RMS normalization CUDA kernels ------------*- CUDA -*-===//
//
// Part of mlt. Device code of the rmsnorm family (host launchers in
// rmsnorm.cu, declared in rmsnorm.h): LlamaRMSNorm forward and backward.
//
// Invariants:
// - x, y, dy, dx, addend are [rows, dim] row-major; weight, dw are [dim]; T
//   is the storage type (float or bf16), every computation is in f32.
// - A row is spread over a team of threads (whole, consecutive warps) that
//   owns the same columns in every row. Two kernel shapes per pass, one
//   chosen on the host from the shape and the pointers' alignment only:
//   * cached kernels (16-byte packs: dim % Pack<T>::kWidth == 0 and x, y,
//     dy, dx, addend, weight 16-byte aligned, checked on the host): the
//     layout is cachedLayout(dim): `threads` per row (<= kMaxBlockThreads),
//     thread t owning the packs i = t + k * threads, k < kPacks <=
//     kMaxCachedPacks (1 to 4). A block is teamsPerBlock teams (team j: threads
//     [j * threads, (j + 1) * threads), synchronized by named barrier 1 + j, or
//     the block barrier when the block is one team); a team loads kRows
//     rows' packs into registers at once, reduces their statistics together
//     and writes from the registers (one read of every input).
//   * generic kernels (any dim and alignment): one team per block of
//     rowBlockThreads(dim) threads, thread t owning the packs (or, without
//     16-byte access, the columns) t + k * blockDim.x; the row is read twice.
//   Both sum each thread's columns in increasing k (and element) order, so
//   for one shape and alignment the forward and the backward compute the
//   same rstd bits.
// - Row statistics (sum of x^2, and sum of w * dy * x in the backward) are
//   per-thread f32 sums, then a warp butterfly and a sum over the team's
//   warps by a second butterfly: a fixed order, so results are
//   bit-reproducible run to run. rstd = float(1 / sqrt(double(sumSq) / dim +
//   eps)), rounded to f32 as the CPU kernel rounds it to T.
// - Forward: y = weight * T(x * rstd) (HF rounds x * rstd to the input type
//   before scaling by the weight). y may alias x: each thread reads its
//   elements of a row before any thread of its team writes (the team
//   reduction synchronizes), and writes only what it read.
// - Backward: dx = rstd * (w * dy - n * meanDot) [+ addend, one f32 add, the
//   result rounded once], n = x * rstd, meanDot = rstd * sum(w * dy * x) /
//   dim (= mean(w * dy * n)); dx may alias dy and addend may alias dy or dx
//   for the same reason. Block b handles rows [b * rowsPerBlock, +
//   rowsPerBlock) (at most kMaxBwdBlocks blocks). dw: each thread accumulates
//   dy * n of its columns over its team's rows in row order in f32 (registers
//   in the cached kernel, the teams' sums then added in team order; a per-block
//   accumulator row in the generic one: shared memory when dim floats fit,
//   else its own row of the scratch) and the block writes its sums to row b
//   of `partial` [blocks, dim]; rmsNormBwdColumnsKernel sums each column's
//   partials in f64 in a fixed tree (kColumnSlices contiguous runs of
//   blocks, each in block order, then the runs in order) and rounds once. No
//   atomics: the result depends on the shape only.
// - amax (kAmax, the launcher given an amax pointer): each thread keeps the
//   maximum absBits of the y or dx elements it stores, as stored (bf16
//   widened from the bits written), and the block merges them into *amax at
//   its end (absmax.cuh), lending the shared memory its reductions used.
//   Without kAmax the kernels do none of it; y, dx and dw are the same bits
//   either way.
// - Every kernel waits for its predecessors (waitForPredecessors, common.cuh)
//   before it touches memory: the launchers queue them with launchDependent
//   (programmatic dependent launch), which overlaps only their launch.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_RMSNORM_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_RMSNORM_CUH

#include "kernels/absmax.cuh"
#include "kernels/common.cuh"

namespace mlt::cuda::rmsnorm {

/// The backward splits the rows into at most this many chunks (blocks): each
/// block writes one partial dw row, so fewer blocks move fewer partial bytes.
inline constexpr int64_t kMaxBwdBlocks = 256;
/// The cached kernels hold at most this many packs of a row per thread, in
/// blocks of at most kMaxBlockThreads threads made of at most kMaxTeams
/// teams.
inline constexpr int kMaxCachedPacks = 4;
inline constexpr int kMaxBlockThreads = 512;
inline constexpr int kMaxTeams = 8;
/// The layout the launchers choose: packs per thread aimed at, threads per
/// block, and rows a team holds at once, in packs per thread (a team holds
/// max(1, k*RowPacks / kPacks) rows).
inline constexpr int kPreferredPacks = 2;
inline constexpr int kFwdBlockThreads = 256;
inline constexpr int kBwdBlockThreads = 256;
inline constexpr int kFwdRowPacks = 1;
inline constexpr int kBwdRowPacks = 4;
constexpr int rowsPerTeam(int rowPacks, int packs) {
  return rowPacks / packs > 1 ? rowPacks / packs : 1;
}
/// The column reduction: blocks of 32 columns x kColumnSlices runs of the
/// partial rows.
inline constexpr int kColumnTile = 32;
inline constexpr int kColumnSlices = 32;

/// The row layout of the cached kernels: a row is spread over a team of
/// `threads` threads (whole warps, consecutive in the block), `packs` packs
/// per thread; packs == 0 where the generic kernels run.
struct RowLayout {
  int packs = 0;
  int threads = 0;
};

/// The layout for rows of `dim` elements (16-byte packs of `width` when
/// `vec`): for each packs-per-thread k (1 to kMaxCachedPacks), the team of
/// ceil(dim / width / k) threads rounded up to whole warps (at most
/// kMaxBlockThreads); the k that leaves the fewest pack slots idle, ties to
/// the k nearest `preferredPacks`, then to the larger k (fewer warps to
/// reduce over). Rows of 256 packs take 128 threads of 2; rows of 96 (dim
/// 768 in bf16) one warp of 3, where 64 threads of 2 would leave a quarter
/// idle (bench/memory-kernels-notes.md). A function of the shape only.
inline RowLayout cachedLayout(int64_t dim, bool vec, int width,
                              int preferredPacks) {
  RowLayout layout;
  if (!vec)
    return layout;
  const int64_t packs = dim / width;
  int64_t bestIdle = -1;
  for (int k = 1; k <= kMaxCachedPacks; ++k) {
    int64_t threads = (packs + k - 1) / k;
    threads = threads < 32 ? 32 : (threads + 31) / 32 * 32;
    if (threads > kMaxBlockThreads)
      continue;
    const int64_t idle = threads * k - packs;
    const int distance =
        k > preferredPacks ? k - preferredPacks : preferredPacks - k;
    const int bestDistance = layout.packs > preferredPacks
                                 ? layout.packs - preferredPacks
                                 : preferredPacks - layout.packs;
    if (bestIdle < 0 || idle < bestIdle ||
        (idle == bestIdle && distance <= bestDistance)) {
      bestIdle = idle;
      layout.packs = k;
      layout.threads = int(threads);
    }
  }
  return layout;
}

/// Teams per block of at most `blockThreads` threads (at least one team).
inline int teamsPerBlock(const RowLayout &layout, int blockThreads) {
  const int teams = blockThreads / layout.threads;
  return teams < 1 ? 1 : (teams > kMaxTeams ? kMaxTeams : teams);
}

#ifdef __CUDACC__

__device__ __forceinline__ float warpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float2 warpSum(float2 v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, offset);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, offset);
  }
  return v;
}

/// A barrier of the `threads` threads of team `team`: the block's barrier
/// when the team is the block, else named barrier 1 + team.
__device__ __forceinline__ void teamSync(int team, int threads) {
  if (threads == int(blockDim.x))
    __syncthreads();
  else
    asm volatile("bar.sync %0, %1;" ::"r"(team + 1), "r"(threads) : "memory");
}

/// The sums of v[0..N) over a team (thread `tid` of `threads`), returned to
/// each of its threads, each in the same fixed order (warp butterfly, then
/// the warps' sums by a second butterfly). `red` is the team's N * 32 V of
/// shared memory, reusable when it returns.
template <typename V, int N>
__device__ __forceinline__ void teamSums(V (&v)[N], V *red, int tid,
                                         int threads, int team) {
  const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
  for (int r = 0; r < N; ++r) {
    v[r] = warpSum(v[r]);
    if (lane == 0)
      red[r * 32 + warp] = v[r];
  }
  teamSync(team, threads);
  const int warps = threads >> 5;
#pragma unroll
  for (int r = 0; r < N; ++r) {
    v[r] = lane < warps ? red[r * 32 + lane] : V{};
    v[r] = warpSum(v[r]);
  }
  teamSync(team, threads);
}

/// teamSums over the whole block.
template <typename V, int N>
__device__ __forceinline__ void blockSums(V (&v)[N], V *red) {
  teamSums(v, red, int(threadIdx.x), int(blockDim.x), 0);
}

__device__ __forceinline__ float rmsRstd(float sumSq, int64_t dim, double eps) {
  return float(1.0 / sqrt(double(sumSq) / double(dim) + eps));
}

/// The backward's dx element, rstd * (w * g - n * meanDot), with its one
/// fused multiply-add written out: every kernel rounds it the same way, and
/// an addend (rnAdd) is one more rounding on top of exactly this value.
__device__ __forceinline__ float bwdDx(float rs, float w, float g, float n,
                                       float meanDot) {
  return rnMul(rs, fmaf(-n, meanDot, rnMul(w, g)));
}

//===----------------------------------------------------------------------===//
// Cached kernels (kVec, at most kMaxCachedPacks packs per thread)
//===----------------------------------------------------------------------===//

/// Dynamic shared memory of rmsNormFwdCachedKernel.
inline size_t fwdCachedSharedBytes(int teams, int rowsPerTeam) {
  return size_t(teams) * rowsPerTeam * 32 * sizeof(float);
}

/// Teams of `threadsPerRow` threads; team t of block b normalizes rows
/// [(b * teams + t) * kRows, + kRows): y = weight * T(x * rstd); with kAmax,
/// the block's max |y| into *amax (absmax.cuh). Dynamic shared memory:
/// fwdCachedSharedBytes.
template <typename T, int kPacks, int kRows, bool kAmax>
__global__ void __launch_bounds__(kMaxBlockThreads)
    rmsNormFwdCachedKernel(T *y, float *rstd, const T *x, const T *weight,
                           int64_t rows, int64_t dim, double eps,
                           int threadsPerRow, unsigned *amax) {
  extern __shared__ float fwdRed[]; // [teams][kRows * 32]
  constexpr int W = Pack<T>::kWidth;
  const int64_t packs = dim / W;
  const int team = int(threadIdx.x) / threadsPerRow;
  const int tid = int(threadIdx.x) % threadsPerRow;
  const int teams = int(blockDim.x) / threadsPerRow;
  const int64_t row0 = (int64_t(blockIdx.x) * teams + team) * kRows;
  const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(x);
  const Pack<T> *wp = reinterpret_cast<const Pack<T> *>(weight);
  waitForPredecessors();
  allowDependents();
  Pack<T> xv[kRows][kPacks], wv[kPacks];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int64_t i = tid + int64_t(k) * threadsPerRow;
      if (row0 + r < rows && i < packs)
        xv[r][k] = xp[(row0 + r) * packs + i];
    }
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int64_t i = tid + int64_t(k) * threadsPerRow;
    if (i < packs)
      wv[k] = wp[i];
  }
  float sumSq[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    sumSq[r] = 0.f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int64_t i = tid + int64_t(k) * threadsPerRow;
      if (row0 + r < rows && i < packs)
#pragma unroll
        for (int e = 0; e < W; ++e) {
          const float v = toCompute(xv[r][k].v[e]);
          sumSq[r] = fmaf(v, v, sumSq[r]);
        }
    }
  }
  teamSums(sumSq, fwdRed + team * kRows * 32, tid, threadsPerRow, team);
  unsigned best = 0;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = row0 + r;
    if (row >= rows)
      break;
    const float rs = rmsRstd(sumSq[r], dim, eps);
    if (rstd && tid == 0)
      rstd[row] = rs;
    Pack<T> *yp = reinterpret_cast<Pack<T> *>(y + row * dim);
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int64_t i = tid + int64_t(k) * threadsPerRow;
      if (i < packs) {
        float out[W];
#pragma unroll
        for (int e = 0; e < W; ++e) {
          const float n = roundTo<T>(rnMul(toCompute(xv[r][k].v[e]), rs));
          out[e] = rnMul(toCompute(wv[k].v[e]), n);
        }
        const Pack<T> stored = packFromCompute<T>(out);
        yp[i] = stored;
        if constexpr (kAmax)
          best = maxAbsBits(best, stored);
      }
    }
  }
  if constexpr (kAmax) {
    // Every team is past its reduction once the block synchronizes: fwdRed
    // (at least 32 floats) is free.
    __syncthreads();
    blockAbsMaxToGlobal(amax, best, reinterpret_cast<unsigned *>(fwdRed));
  }
}

/// Dynamic shared memory of rmsNormBwdCachedKernel: the teams' reduction
/// slots, then (teams - 1) dw rows to combine the teams' sums.
inline size_t bwdCachedSharedBytes(int teams, int rowsPerTeam, int64_t dim) {
  return size_t(teams) * rowsPerTeam * 32 * sizeof(float2) +
         size_t(teams - 1) * size_t(dim) * sizeof(float);
}

/// Block b handles rows [b * rowsPerBlock, + rowsPerBlock): team t of its
/// teams (of `threadsPerRow` threads) the groups of kRows rows from rBegin +
/// t * kRows, every teams * kRows rows, each thread accumulating dy * n of
/// its columns in registers over its rows in order; then the teams' sums are
/// added in team order and written to partial[b, :]. dx of each row is
/// written as it is computed; with kAdd, dx += addend (which may alias dy or
/// dx); with kAmax, the block's max |dx| (as stored) into *amax (absmax.cuh).
/// Dynamic shared memory: bwdCachedSharedBytes.
template <typename T, int kPacks, int kRows, bool kAdd, bool kAmax>
__global__ void __launch_bounds__(kMaxBlockThreads)
    rmsNormBwdCachedKernel(T *dx, float *partial, const T *dy, const T *x,
                           const T *weight, const T *addend, int64_t rows,
                           int64_t dim, int64_t rowsPerBlock, double eps,
                           int threadsPerRow, unsigned *amax) {
  extern __shared__ float2 bwdShared[];
  constexpr int W = Pack<T>::kWidth;
  const int64_t packs = dim / W;
  const int team = int(threadIdx.x) / threadsPerRow;
  const int tid = int(threadIdx.x) % threadsPerRow;
  const int teams = int(blockDim.x) / threadsPerRow;
  float2 *red = bwdShared + team * kRows * 32;
  float *combine = reinterpret_cast<float *>(bwdShared + teams * kRows * 32);
  const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(x);
  const Pack<T> *gp = reinterpret_cast<const Pack<T> *>(dy);
  const Pack<T> *ap = reinterpret_cast<const Pack<T> *>(addend);
  const Pack<T> *wp = reinterpret_cast<const Pack<T> *>(weight);
  Pack<T> *dxp = reinterpret_cast<Pack<T> *>(dx);
  waitForPredecessors();
  allowDependents();
  Pack<T> wv[kPacks];
  float acc[kPacks][W];
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int64_t i = tid + int64_t(k) * threadsPerRow;
    wv[k] = i < packs ? wp[i] : Pack<T>{};
#pragma unroll
    for (int e = 0; e < W; ++e)
      acc[k][e] = 0.f;
  }
  unsigned best = 0;
  const int64_t rBegin = int64_t(blockIdx.x) * rowsPerBlock;
  const int64_t rEnd = min(rows, rBegin + rowsPerBlock);
  for (int64_t r0 = rBegin + int64_t(team) * kRows; r0 < rEnd;
       r0 += int64_t(teams) * kRows) {
    Pack<T> xv[kRows][kPacks], gv[kRows][kPacks],
        av[kAdd ? kRows : 1][kAdd ? kPacks : 1];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int64_t i = tid + int64_t(k) * threadsPerRow;
        if (r0 + r < rEnd && i < packs) {
          const int64_t at = (r0 + r) * packs + i;
          xv[r][k] = xp[at];
          gv[r][k] = gp[at];
          if constexpr (kAdd)
            av[r][k] = ap[at];
        }
      }
    float2 stats[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      stats[r] = make_float2(0.f, 0.f);
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int64_t i = tid + int64_t(k) * threadsPerRow;
        if (r0 + r < rEnd && i < packs)
#pragma unroll
          for (int e = 0; e < W; ++e) {
            const float xe = toCompute(xv[r][k].v[e]);
            stats[r].x = fmaf(xe, xe, stats[r].x);
            stats[r].y = fmaf(toCompute(wv[k].v[e]) * toCompute(gv[r][k].v[e]),
                              xe, stats[r].y);
          }
      }
    }
    teamSums(stats, red, tid, threadsPerRow, team);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r0 + r >= rEnd)
        break;
      const float rs = rmsRstd(stats[r].x, dim, eps);
      const float meanDot = rs * stats[r].y / float(dim);
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int64_t i = tid + int64_t(k) * threadsPerRow;
        if (i < packs) {
          float out[W];
#pragma unroll
          for (int e = 0; e < W; ++e) {
            const float n = toCompute(xv[r][k].v[e]) * rs;
            const float g = toCompute(gv[r][k].v[e]);
            out[e] = bwdDx(rs, toCompute(wv[k].v[e]), g, n, meanDot);
            if constexpr (kAdd)
              out[e] = rnAdd(out[e], toCompute(av[r][k].v[e]));
            acc[k][e] = fmaf(g, n, acc[k][e]);
          }
          const Pack<T> stored = packFromCompute<T>(out);
          dxp[(r0 + r) * packs + i] = stored;
          if constexpr (kAmax)
            best = maxAbsBits(best, stored);
        }
      }
    }
  }
  // The teams' sums, added in team order; W floats (16 or 32 bytes) per
  // pack.
  if (teams > 1) {
    __syncthreads();
    if (team > 0) {
      float4 *mine = reinterpret_cast<float4 *>(combine + (team - 1) * dim);
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int64_t i = tid + int64_t(k) * threadsPerRow;
        if (i < packs)
#pragma unroll
          for (int q = 0; q < W / 4; ++q)
            mine[i * (W / 4) + q] =
                make_float4(acc[k][4 * q], acc[k][4 * q + 1], acc[k][4 * q + 2],
                            acc[k][4 * q + 3]);
      }
    }
    __syncthreads();
    if (team == 0)
      for (int t = 1; t < teams; ++t) {
        const float4 *theirs =
            reinterpret_cast<const float4 *>(combine + (t - 1) * dim);
#pragma unroll
        for (int k = 0; k < kPacks; ++k) {
          const int64_t i = tid + int64_t(k) * threadsPerRow;
          if (i < packs)
#pragma unroll
            for (int q = 0; q < W / 4; ++q) {
              const float4 v = theirs[i * (W / 4) + q];
              acc[k][4 * q] += v.x;
              acc[k][4 * q + 1] += v.y;
              acc[k][4 * q + 2] += v.z;
              acc[k][4 * q + 3] += v.w;
            }
        }
      }
  }
  if constexpr (kAmax) {
    // Every team is past its last reduction once the block synchronizes:
    // the start of bwdShared (at least 32 float2) is free.
    __syncthreads();
    blockAbsMaxToGlobal(amax, best, reinterpret_cast<unsigned *>(bwdShared));
  }
  if (team != 0)
    return;
  float4 *out = reinterpret_cast<float4 *>(partial + int64_t(blockIdx.x) * dim);
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int64_t i = tid + int64_t(k) * threadsPerRow;
    if (i < packs)
#pragma unroll
      for (int q = 0; q < W / 4; ++q)
        out[i * (W / 4) + q] =
            make_float4(acc[k][4 * q], acc[k][4 * q + 1], acc[k][4 * q + 2],
                        acc[k][4 * q + 3]);
  }
}

//===----------------------------------------------------------------------===//
// Generic kernels (any dim, any alignment)
//===----------------------------------------------------------------------===//

/// One block per row: y = weight * T(x * rstd); with kAmax, the row's max |y|
/// into *amax (absmax.cuh).
template <typename T, bool kVec, bool kAmax>
__global__ void rmsNormFwdKernel(T *y, float *rstd, const T *x, const T *weight,
                                 int64_t dim, double eps, unsigned *amax) {
  __shared__ float red[32];
  constexpr int W = Pack<T>::kWidth;
  const int64_t row = blockIdx.x;
  const T *xr = x + row * dim;
  T *yr = y + row * dim;
  waitForPredecessors();
  allowDependents();
  float sumSq[1] = {0.f};
  if constexpr (kVec) {
    const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(xr);
    for (int64_t i = threadIdx.x; i < dim / W; i += blockDim.x) {
      const Pack<T> p = xp[i];
#pragma unroll
      for (int e = 0; e < W; ++e) {
        const float v = toCompute(p.v[e]);
        sumSq[0] = fmaf(v, v, sumSq[0]);
      }
    }
  } else {
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const float v = toCompute(xr[j]);
      sumSq[0] = fmaf(v, v, sumSq[0]);
    }
  }
  blockSums(sumSq, red);
  const float rs = rmsRstd(sumSq[0], dim, eps);
  if (rstd && threadIdx.x == 0)
    rstd[row] = rs;
  unsigned best = 0;
  if constexpr (kVec) {
    const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(xr);
    const Pack<T> *wp = reinterpret_cast<const Pack<T> *>(weight);
    Pack<T> *yp = reinterpret_cast<Pack<T> *>(yr);
    for (int64_t i = threadIdx.x; i < dim / W; i += blockDim.x) {
      const Pack<T> p = xp[i], wv = wp[i];
      Pack<T> out;
#pragma unroll
      for (int e = 0; e < W; ++e) {
        const T n = fromCompute<T>(rnMul(toCompute(p.v[e]), rs));
        out.v[e] = fromCompute<T>(rnMul(toCompute(wv.v[e]), toCompute(n)));
      }
      yp[i] = out;
      if constexpr (kAmax)
        best = maxAbsBits(best, out);
    }
  } else {
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const T n = fromCompute<T>(rnMul(toCompute(xr[j]), rs));
      const T stored =
          fromCompute<T>(rnMul(toCompute(weight[j]), toCompute(n)));
      yr[j] = stored;
      if constexpr (kAmax)
        best = max(best, absBits(toCompute(stored)));
    }
  }
  // red is free: blockSums ends with a block barrier.
  if constexpr (kAmax)
    blockAbsMaxToGlobal(amax, best, reinterpret_cast<unsigned *>(red));
}

/// One block per chunk of `rowsPerBlock` rows: dx of each row (plus the
/// addend when it is not null), and the chunk's partial dw into
/// partial[blockIdx.x, :]; with kAmax, the chunk's max |dx| (as stored) into
/// *amax (absmax.cuh). Dynamic shared memory: dim floats when `accInShared`,
/// else none (the partial row accumulates in place in global memory).
template <typename T, bool kVec, bool kAmax>
__global__ void rmsNormBwdRowsKernel(T *dx, float *partial, const T *dy,
                                     const T *x, const T *weight,
                                     const T *addend, int64_t rows, int64_t dim,
                                     int64_t rowsPerBlock, double eps,
                                     bool accInShared, unsigned *amax) {
  extern __shared__ float sharedAcc[];
  __shared__ float2 red[32];
  constexpr int W = Pack<T>::kWidth;
  float *outRow = partial + int64_t(blockIdx.x) * dim;
  float *acc = accInShared ? sharedAcc : outRow;
  waitForPredecessors();
  allowDependents();
  // Each thread zeroes, accumulates and writes back only its own columns.
  if constexpr (kVec) {
    for (int64_t i = threadIdx.x; i < dim / W; i += blockDim.x)
#pragma unroll
      for (int e = 0; e < W; ++e)
        acc[i * W + e] = 0.f;
  } else {
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
      acc[j] = 0.f;
  }
  unsigned best = 0;
  const int64_t rBegin = int64_t(blockIdx.x) * rowsPerBlock;
  const int64_t rEnd = min(rows, rBegin + rowsPerBlock);
  for (int64_t r = rBegin; r < rEnd; ++r) {
    const T *xr = x + r * dim;
    const T *gr = dy + r * dim;
    const T *ar = addend ? addend + r * dim : nullptr;
    T *dxr = dx + r * dim;
    // Pass 1: sum x^2 and sum w * g * x.
    float2 stats[1] = {make_float2(0.f, 0.f)};
    if constexpr (kVec) {
      const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(xr);
      const Pack<T> *gp = reinterpret_cast<const Pack<T> *>(gr);
      const Pack<T> *wp = reinterpret_cast<const Pack<T> *>(weight);
      for (int64_t i = threadIdx.x; i < dim / W; i += blockDim.x) {
        const Pack<T> xv = xp[i], gv = gp[i], wv = wp[i];
#pragma unroll
        for (int e = 0; e < W; ++e) {
          const float xe = toCompute(xv.v[e]);
          stats[0].x = fmaf(xe, xe, stats[0].x);
          stats[0].y =
              fmaf(toCompute(wv.v[e]) * toCompute(gv.v[e]), xe, stats[0].y);
        }
      }
    } else {
      for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        const float xe = toCompute(xr[j]);
        stats[0].x = fmaf(xe, xe, stats[0].x);
        stats[0].y =
            fmaf(toCompute(weight[j]) * toCompute(gr[j]), xe, stats[0].y);
      }
    }
    blockSums(stats, red);
    const float rs = rmsRstd(stats[0].x, dim, eps);
    const float meanDot = rs * stats[0].y / float(dim);
    // Pass 2: dx, and dy * n into the accumulator.
    if constexpr (kVec) {
      const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(xr);
      const Pack<T> *gp = reinterpret_cast<const Pack<T> *>(gr);
      const Pack<T> *ap = reinterpret_cast<const Pack<T> *>(ar);
      const Pack<T> *wp = reinterpret_cast<const Pack<T> *>(weight);
      Pack<T> *dxp = reinterpret_cast<Pack<T> *>(dxr);
      for (int64_t i = threadIdx.x; i < dim / W; i += blockDim.x) {
        const Pack<T> xv = xp[i], gv = gp[i], wv = wp[i];
        Pack<T> av{};
        if (ap)
          av = ap[i];
        Pack<T> out;
#pragma unroll
        for (int e = 0; e < W; ++e) {
          const float n = toCompute(xv.v[e]) * rs;
          const float g = toCompute(gv.v[e]);
          float d = bwdDx(rs, toCompute(wv.v[e]), g, n, meanDot);
          if (ap)
            d = rnAdd(d, toCompute(av.v[e]));
          out.v[e] = fromCompute<T>(d);
          acc[i * W + e] = fmaf(g, n, acc[i * W + e]);
        }
        dxp[i] = out;
        if constexpr (kAmax)
          best = maxAbsBits(best, out);
      }
    } else {
      for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        const float n = toCompute(xr[j]) * rs;
        const float g = toCompute(gr[j]);
        float d = bwdDx(rs, toCompute(weight[j]), g, n, meanDot);
        if (ar)
          d = rnAdd(d, toCompute(ar[j]));
        const T stored = fromCompute<T>(d);
        dxr[j] = stored;
        if constexpr (kAmax)
          best = max(best, absBits(toCompute(stored)));
        acc[j] = fmaf(g, n, acc[j]);
      }
    }
  }
  if (accInShared) {
    if constexpr (kVec) {
      for (int64_t i = threadIdx.x; i < dim / W; i += blockDim.x)
#pragma unroll
        for (int e = 0; e < W; ++e)
          outRow[i * W + e] = acc[i * W + e];
    } else {
      for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
        outRow[j] = acc[j];
    }
  }
  // red is free: blockSums ends with a block barrier.
  if constexpr (kAmax)
    blockAbsMaxToGlobal(amax, best, reinterpret_cast<unsigned *>(red));
}

/// dw[j] = the sum over b in [0, blocks) of partial[b, j] in f64, rounded
/// once: thread (c, s) of a kColumnTile x kColumnSlices block sums column
/// blockIdx.x * kColumnTile + c over the s-th contiguous run of
/// ceil(blocks / kColumnSlices) blocks in block order, then the runs are
/// added in order.
template <typename G>
__global__ void __launch_bounds__(kColumnTile *kColumnSlices)
    rmsNormBwdColumnsKernel(G *dw, const float *partial, int64_t blocks,
                            int64_t dim) {
  __shared__ double runs[kColumnSlices][kColumnTile];
  const int c = threadIdx.x % kColumnTile, s = threadIdx.x / kColumnTile;
  const int64_t j = int64_t(blockIdx.x) * kColumnTile + c;
  const int64_t perRun = (blocks + kColumnSlices - 1) / kColumnSlices;
  const int64_t bBegin = min(blocks, s * perRun);
  const int64_t bEnd = min(blocks, bBegin + perRun);
  waitForPredecessors();
  allowDependents();
  double sum = 0.0;
  if (j < dim) {
    int64_t b = bBegin;
    for (; b + 4 <= bEnd; b += 4) {
      const float p0 = partial[b * dim + j], p1 = partial[(b + 1) * dim + j],
                  p2 = partial[(b + 2) * dim + j],
                  p3 = partial[(b + 3) * dim + j];
      sum += double(p0);
      sum += double(p1);
      sum += double(p2);
      sum += double(p3);
    }
    for (; b < bEnd; ++b)
      sum += double(partial[b * dim + j]);
  }
  runs[s][c] = sum;
  __syncthreads();
  if (s == 0 && j < dim) {
    double total = 0.0;
#pragma unroll 8
    for (int q = 0; q < kColumnSlices; ++q)
      total += runs[q][c];
    dw[j] = fromCompute<G>(float(total));
  }
}

#endif // __CUDACC__

} // namespace mlt::cuda::rmsnorm

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_RMSNORM_CUH
