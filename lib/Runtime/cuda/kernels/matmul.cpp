//===- matmul.cpp - the matmul family on cuBLASLt -------------------------===//
//
// Part of mlt. Host code only: cuBLASLt is a host API, so this file is built
// by the host compiler and links CUDA::cublasLt.
//
// Row-major to column-major. cuBLASLt is column-major; a row-major [r, c]
// matrix with row stride ld is, read column-major, its transpose [c, r] with
// the same ld. So the row-major product C = op(A) op(B), C [m, n], is the
// column-major product C^T [n, m] = op(B)^T op(A)^T, and the operands swap:
//   cuBLASLt A <- b: [n, k] ld n, op N   (b stored [k, n], !transposeB)
//                    [k, n] ld k, op T   (b stored [n, k],  transposeB)
//   cuBLASLt B <- a: [k, m] ld k, op N   (a stored [m, k], !transposeA)
//                    [m, k] ld m, op T   (a stored [k, m],  transposeA)
//   cuBLASLt C = D <- c: [n, m] ld n,
// with M = n, N = m, K = k. Batches are strided: a by m * k, c by m * n, b by
// k * n, or by 0 when b is shared. A shared b under an untransposed a is one
// product of batch * m rows instead (a and c are then single [batch * m, k]
// and [batch * m, n] matrices), as the CPU backend does.
//
//===----------------------------------------------------------------------===//

#include "kernels/matmul.h"

#include "CudaCheck.h"
#include "mlt/Runtime/io/MatmulTable.h"

#include <cublasLt.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace mlt;
using namespace mlt::cuda;

namespace {

/// What selects a cached plan: the instruction's ints, the element types, and
/// the alignment of each operand (cuBLASLt's heuristic picks vectorized
/// kernels only for aligned operands).
struct PlanKey {
  /// a's type (and b's, but for FP8 products, whose b may differ: dtypeB).
  rt::ElementType dtype, outType;
  rt::ElementType dtypeB;
  /// FP8 products: CUBLASLT_MATMUL_DESC_FAST_ACCUM.
  bool fastAccumulation = false;
  int64_t batch, m, n, k;
  bool transposeA, transposeB, bBatched;
  /// Whether the product is added to an addend (beta = 1).
  bool addend;
  uint32_t alignA, alignB, alignC;
  /// Products in one pointer-array launch (matmul_group); 1: a product.
  int64_t groups = 1;

  auto tie() const {
    return std::tie(dtype, outType, dtypeB, fastAccumulation, batch, m, n, k,
                    transposeA, transposeB, bBatched, addend, alignA, alignB,
                    alignC, groups);
  }
  bool operator<(const PlanKey &other) const { return tie() < other.tie(); }
};

/// The descriptors and the algorithm of one shape, created once.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  // The cuBLASLt operands: layoutA describes b, layoutB describes a, layoutC
  // describes c (used for both C, the addend, and D).
  cublasLtMatrixLayout_t layoutA = nullptr;
  cublasLtMatrixLayout_t layoutB = nullptr;
  cublasLtMatrixLayout_t layoutC = nullptr;
  cublasLtMatmulAlgo_t algo = {};
  /// The workspace `algo` was chosen for (0 or kWorkspaceBytes), also what
  /// each call offers it.
  size_t workspaceBytes = 0;
  /// With tuning, until the first run times them: cuBLASLt's proposals,
  /// the heuristic's first choice first, each with the workspace it is
  /// offered.
  std::vector<std::pair<cublasLtMatmulAlgo_t, size_t>> candidates;
  /// Whether `algo` came from the table (loaded or tuned).
  bool tabled = false;

  Plan() = default;
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;
  ~Plan() {
    if (layoutC)
      cublasLtMatrixLayoutDestroy(layoutC);
    if (layoutB)
      cublasLtMatrixLayoutDestroy(layoutB);
    if (layoutA)
      cublasLtMatrixLayoutDestroy(layoutA);
    if (desc)
      cublasLtMatmulDescDestroy(desc);
  }
};

/// The largest power of two, at most 256, dividing both the address and the
/// byte stride between batch entries (each entry's pointer must be aligned
/// as the heuristic was told).
uint32_t alignmentOf(const void *p, int64_t strideBytes) {
  const uintptr_t bits =
      reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(strideBytes);
  uint32_t alignment = 256;
  while (alignment > 1 && bits % alignment != 0)
    alignment >>= 1;
  return alignment;
}

/// True when a shared b under an untransposed a makes the batch one product
/// of batch * m rows.
bool foldsBatch(int64_t batch, int64_t m, bool transposeA, bool bBatched) {
  return !bBatched && !transposeA && batch > 1 && batch * m <= INT32_MAX;
}

/// A column-major layout [rows, cols] with leading dimension ld; with
/// batch > 1, strided by `stride` elements (0: the same matrix each time).
Status makeLayout(cublasLtMatrixLayout_t *layout, cudaDataType_t type,
                  int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                  int64_t stride) {
  MLT_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(layout, type, rows, cols, ld));
  if (batch == 1)
    return Status::ok();
  const int32_t count = static_cast<int32_t>(batch);
  MLT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
      *layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  MLT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
      *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
      sizeof(stride)));
  return Status::ok();
}

/// The argument errors of a product (types, sizes), before anything runs.
Status checkProduct(const MatmulShape &shape, rt::ElementType dtype,
                    rt::ElementType outType) {
  if (dtype != rt::ElementType::F32 && dtype != rt::ElementType::BF16)
    return errorf("matmul: element type ", rt::elementTypeName(dtype),
                  " is not supported on CUDA (f32 and bf16 are)");
  if (outType != dtype && outType != rt::ElementType::F32)
    return errorf("matmul: ", rt::elementTypeName(dtype),
                  " operands cannot produce ", rt::elementTypeName(outType),
                  " (only ", rt::elementTypeName(dtype), " or f32)");
  const int64_t batch = shape.batch, m = shape.m, n = shape.n, k = shape.k;
  if (batch < 0 || m < 0 || n < 0 || k < 0)
    return errorf("matmul: negative size (batch = ", batch, ", m = ", m,
                  ", n = ", n, ", k = ", k, ")");
  for (int64_t size : {batch, m, n, k})
    if (size > INT32_MAX)
      return errorf("matmul: size ", size,
                    " exceeds the 32-bit integers of cuBLASLt");
  return Status::ok();
}

/// The argument errors of an FP8 product (runFp8), before anything runs.
Status checkFp8Product(const MatmulShape &shape, rt::ElementType aType,
                       rt::ElementType bType, rt::ElementType outType,
                       const float *aScaleInv, const float *bScaleInv) {
  if (!rt::isFp8ElementType(aType) || !rt::isFp8ElementType(bType))
    return errorf("matmul_fp8: operands ", rt::elementTypeName(aType), " and ",
                  rt::elementTypeName(bType),
                  " (both must be f8e4m3 or f8e5m2)");
  if (aType == rt::ElementType::F8E5M2 && bType == rt::ElementType::F8E5M2)
    return errorf("matmul_fp8: f8e5m2 times f8e5m2 has no Hopper kernel "
                  "(one operand must be f8e4m3)");
  if (outType != rt::ElementType::BF16 && outType != rt::ElementType::F32)
    return errorf("matmul_fp8: cannot produce ", rt::elementTypeName(outType),
                  " (bf16 or f32)");
  if (shape.transposeA || !shape.transposeB)
    return errorf("matmul_fp8: both operands must have the reduction "
                  "dimension contiguous (a [m, k], b stored [n, k]: "
                  "transpose_a = 0, transpose_b = 1), not transpose_a = ",
                  shape.transposeA, ", transpose_b = ", shape.transposeB);
  if (!aScaleInv || !bScaleInv)
    return errorf("matmul_fp8: both operands need their inverse scale");
  // cublasLtMatmul refuses scale pointers that are not (measured on the
  // H100 with cuBLASLt 13.1: 4- and 8-byte aligned ones are refused).
  if (alignmentOf(aScaleInv, 0) < 16 || alignmentOf(bScaleInv, 0) < 16)
    return errorf("matmul_fp8: the inverse scales must be 16-byte "
                  "aligned (cuBLASLt's scale pointers)");
  // The sizes as checkProduct checks them.
  return checkProduct(shape, rt::ElementType::BF16, outType);
}

/// A product's key without its alignments.
PlanKey keyOf(const MatmulShape &shape, rt::ElementType dtype,
              rt::ElementType outType, bool addend) {
  PlanKey key;
  key.dtype = dtype;
  key.dtypeB = dtype;
  key.outType = outType;
  key.batch = shape.batch;
  key.m = shape.m;
  key.n = shape.n;
  key.k = shape.k;
  key.transposeA = shape.transposeA;
  key.transposeB = shape.transposeB;
  key.bBatched = shape.bBatched;
  key.addend = addend;
  return key;
}

std::string describe(const PlanKey &key) {
  std::ostringstream os;
  os << "matmul [" << key.batch << " x " << key.m << " x " << key.n << " x "
     << key.k << "] (" << rt::elementTypeName(key.dtype);
  // (Products of one type keep the description tables were tuned under.)
  if (key.dtypeB != key.dtype)
    os << " x " << rt::elementTypeName(key.dtypeB);
  os << " -> " << rt::elementTypeName(key.outType)
     << (key.fastAccumulation ? ", fast accumulation" : "")
     << (key.addend ? ", added to an addend" : "")
     << ", transpose_a = " << key.transposeA
     << ", transpose_b = " << key.transposeB << ", b_batched = " << key.bBatched
     << ", alignments " << key.alignA << "/" << key.alignB << "/" << key.alignC
     << " bytes)";
  if (key.groups > 1)
    os << " x " << key.groups << " (one pointer-array launch)";
  return os.str();
}

} // namespace

std::string mlt::cuda::describeAlgorithm(const cublasLtMatmulAlgo_t &algo) {
  int32_t id = -1, splitK = -1;
  uint32_t tile = 0, stages = 0, swizzle = 0, reduction = 0, custom = 0;
  uint16_t cluster = 0;
  size_t written = 0;
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attribute, void *value,
                 size_t bytes) {
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, value, bytes,
                                             &written) != CUBLAS_STATUS_SUCCESS)
      std::memset(value, 0, bytes);
  };
  get(CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id));
  get(CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile));
  get(CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages));
  get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitK, sizeof(splitK));
  get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof(reduction));
  get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof(swizzle));
  get(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof(custom));
  get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster));
  char text[160];
  std::snprintf(text, sizeof(text),
                "algo %d tile %u stages %u splitK %d red %u swz %u custom %u "
                "cluster %u",
                id, tile, stages, splitK, reduction, swizzle, custom,
                unsigned(cluster));
  return text;
}

struct MatmulRunner::Impl {
  int device = 0;
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
  /// The tuned algorithms (MatmulOptions), and whether shapes it lacks are
  /// timed on their first run and added to it.
  MatmulOptions options;
  rt::MatmulTable table;

  ~Impl() {
    // Descriptors first, then the handle and the workspace, on our device.
    plans.clear();
    int previous = -1;
    const bool switched = cudaGetDevice(&previous) == cudaSuccess &&
                          previous != device &&
                          cudaSetDevice(device) == cudaSuccess;
    for (const auto &[addresses, array] : pointerArrays)
      cudaFree(array);
    if (workspace)
      cudaFree(workspace);
    if (handle)
      cublasLtDestroy(handle);
    if (switched)
      (void)cudaSetDevice(previous);
  }

  /// Device arrays of operand addresses for pointer-array launches, made
  /// once for each set of addresses (a plan's are fixed) and kept: the
  /// launches of a captured graph read them at every replay.
  std::map<std::vector<const void *>, void *> pointerArrays;

  /// The shape's plan, made on first use. An FP8 product's scale pointers
  /// are on its descriptor before the heuristic is asked (the FP8 kernels
  /// that scale are not those that do not); each call sets its own.
  StatusOr<Plan *> getPlan(const PlanKey &key, const float *aScaleInv = nullptr,
                           const float *bScaleInv = nullptr);

  /// Sets the scale pointers of an FP8 product on `plan`'s descriptor
  /// (cuBLASLt's A is b).
  Status setScales(Plan &plan, const float *aScaleInv, const float *bScaleInv);

  /// run and runFp8: key is keyOf's (with dtypeB and fastAccumulation),
  /// aScaleInv and bScaleInv null but for FP8 operands.
  Status product(PlanKey key, const void *a, const void *b, void *c,
                 const void *addend, const float *aScaleInv,
                 const float *bScaleInv, cudaStream_t stream);

  /// Queues D = the product (+ C = addend when not null) with plan's
  /// algorithm; cuBLASLt's A is b and its B is a (matmul.cpp's header).
  Status launch(const Plan &plan, const void *a, const void *b,
                const void *addend, void *c, cudaStream_t stream);

  /// The device copy of `addresses`, made on first use (outside a graph
  /// capture: a copy cannot be captured from memory the host reuses).
  StatusOr<void *> pointerArray(const std::vector<const void *> &addresses,
                                cudaStream_t stream);

  /// Times each of plan's candidates on these operands (into a scratch
  /// output, the product's shape in c's type, when c must not be written:
  /// it is the addend), keeps the fastest in plan.algo, clears the
  /// candidates, and adds the choice to the table and saves it.
  Status tunePlan(Plan &plan, const PlanKey &key, const void *a, const void *b,
                  void *c, const void *addend, cudaStream_t stream);
};

Status MatmulRunner::Impl::setScales(Plan &plan, const float *aScaleInv,
                                     const float *bScaleInv) {
  MLT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &bScaleInv,
      sizeof(bScaleInv)));
  MLT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &aScaleInv,
      sizeof(aScaleInv)));
  return Status::ok();
}

StatusOr<Plan *> MatmulRunner::Impl::getPlan(const PlanKey &key,
                                             const float *aScaleInv,
                                             const float *bScaleInv) {
  auto it = plans.find(key);
  if (it != plans.end())
    return it->second.get();

  auto plan = std::make_unique<Plan>();
  auto cudaType = [](rt::ElementType t) {
    switch (t) {
    case rt::ElementType::BF16:
      return CUDA_R_16BF;
    case rt::ElementType::F8E4M3:
      return CUDA_R_8F_E4M3;
    case rt::ElementType::F8E5M2:
      return CUDA_R_8F_E5M2;
    default:
      return CUDA_R_32F;
    }
  };
  const cudaDataType_t type = cudaType(key.dtype);
  const cudaDataType_t typeB = cudaType(key.dtypeB);
  const cudaDataType_t outType = cudaType(key.outType);
  // Pure fp32 accumulation for both types (CUBLAS_COMPUTE_32F, never
  // CUBLAS_COMPUTE_32F_FAST_TF32): fp32 mode must match the CPU, and bf16
  // mode accumulates in fp32 like Megatron. alpha and beta are host floats.
  MLT_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opA = key.transposeB ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = key.transposeA ? CUBLAS_OP_T : CUBLAS_OP_N;
  MLT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
  MLT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
  if (key.fastAccumulation) {
    const int8_t fast = 1;
    MLT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  }
  if (aScaleInv)
    MLT_RETURN_IF_ERROR(setScales(*plan, aScaleInv, bScaleInv));
  // An addend is beta = 1 with C the addend (c itself for
  // matmul_accumulate): the sum happens in the epilogue, in f32, and is
  // rounded once to D's type.

  const int64_t m = key.m, n = key.n, k = key.k;
  // A shared b under an untransposed a: one product of batch * m rows.
  const bool fold = foldsBatch(key.batch, m, key.transposeA, key.bBatched);
  const int64_t rowsA = fold ? key.batch * m : m;
  const int64_t batch = fold ? 1 : key.batch;
  // cuBLASLt A <- b.
  MLT_RETURN_IF_ERROR(makeLayout(&plan->layoutA, typeB, key.transposeB ? k : n,
                                 key.transposeB ? n : k, key.transposeB ? k : n,
                                 batch, key.bBatched ? k * n : 0));
  // cuBLASLt B <- a.
  MLT_RETURN_IF_ERROR(makeLayout(
      &plan->layoutB, type, key.transposeA ? rowsA : k,
      key.transposeA ? k : rowsA, key.transposeA ? rowsA : k, batch, m * k));
  // cuBLASLt C = D <- c.
  MLT_RETURN_IF_ERROR(
      makeLayout(&plan->layoutC, outType, n, rowsA, n, batch, m * n));
  // A group: each operand's G matrices at the addresses of a device array.
  if (key.groups > 1)
    for (cublasLtMatrixLayout_t layout :
         {plan->layoutA, plan->layoutB, plan->layoutC}) {
      const int32_t count = static_cast<int32_t>(key.groups);
      const uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
      MLT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
          layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      MLT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
          layout, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode, sizeof(mode)));
    }

  // cuBLASLt's A is b, its B is a; D is c like C.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] =
      {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.alignB},
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.alignA},
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.alignC},
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.alignC}};
  // The heuristic's usable proposals, best guess first, for at most
  // `workspaceBytes` of workspace.
  auto propose = [&](uint64_t workspaceBytes)
      -> StatusOr<std::vector<cublasLtMatmulAlgo_t>> {
    cublasLtMatmulPreference_t preference = nullptr;
    MLT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&preference));
    struct PreferenceGuard {
      cublasLtMatmulPreference_t p;
      ~PreferenceGuard() { cublasLtMatmulPreferenceDestroy(p); }
    } guard{preference};
    MLT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes,
        sizeof(workspaceBytes)));
    for (const auto &[attribute, bytes] : alignments)
      MLT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
          preference, attribute, &bytes, sizeof(bytes)));
    constexpr int kRequested = 8;
    cublasLtMatmulHeuristicResult_t results[kRequested] = {};
    int returned = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle, plan->desc, plan->layoutA, plan->layoutB, plan->layoutC,
        plan->layoutC, preference, kRequested, results, &returned);
    if (status != CUBLAS_STATUS_SUCCESS &&
        status != CUBLAS_STATUS_NOT_SUPPORTED)
      return errorf("cublasLtMatmulAlgoGetHeuristic for ", describe(key), ": ",
                    cublasLtGetStatusString(status));
    std::vector<cublasLtMatmulAlgo_t> usable;
    for (int i = 0; i < returned && status == CUBLAS_STATUS_SUCCESS; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS &&
          results[i].workspaceSize <= workspaceBytes)
        usable.push_back(results[i].algo);
    return usable;
  };
  const std::string shape = describe(key);
  if (const rt::TunedAlgorithm *tuned = table.find(shape)) {
    // The table's algorithm: its bytes, checked against this shape.
    static_assert(sizeof(plan->algo.data) == sizeof(tuned->data),
                  "cublasLtMatmulAlgo_t is 8 words");
    std::memcpy(plan->algo.data, tuned->data.data(), sizeof(plan->algo.data));
    cublasLtMatmulHeuristicResult_t check = {};
    const cublasStatus_t status = cublasLtMatmulAlgoCheck(
        handle, plan->desc, plan->layoutA, plan->layoutB, plan->layoutC,
        plan->layoutC, &plan->algo, &check);
    // (The check's workspaceSize is not a minimum: algorithms the heuristic
    // proposes for no workspace report some. A launch that needs more than
    // it is given fails, and says so.)
    if (status != CUBLAS_STATUS_SUCCESS ||
        tuned->workspaceBytes > kWorkspaceBytes)
      return errorf(options.algorithms, ": the algorithm tuned for ", shape,
                    " does not run it here (",
                    status != CUBLAS_STATUS_SUCCESS
                        ? cublasLtGetStatusString(status)
                        : "it asks for more than the 32 MiB workspace",
                    "); tune the table again with --tune-matmuls");
    plan->workspaceBytes = tuned->workspaceBytes;
    plan->tabled = true;
  } else {
    // Proposals that need no workspace first, launched without one: on the
    // H100 the first of them has the 32 MiB query's first kernel
    // configuration, but a call offered a workspace queues a second node
    // before the kernel for most shapes, 1.5-2.3 us per product
    // (bench/matmul-notes.md). The workspace remains for shapes that no
    // workspace-free algorithm handles. Tuning times both queries'
    // proposals (the second's that differ from the first's).
    for (uint64_t workspaceBytes : {uint64_t(0), uint64_t(kWorkspaceBytes)}) {
      auto proposals = propose(workspaceBytes);
      if (!proposals)
        return proposals.takeStatus();
      for (const cublasLtMatmulAlgo_t &algo : *proposals) {
        const bool seen =
            std::any_of(plan->candidates.begin(), plan->candidates.end(),
                        [&](const auto &c) {
                          return std::memcmp(c.first.data, algo.data,
                                             sizeof(algo.data)) == 0;
                        });
        if (!seen)
          plan->candidates.emplace_back(algo, size_t(workspaceBytes));
      }
      if (!options.tune && !plan->candidates.empty())
        break;
    }
    if (plan->candidates.empty())
      return errorf("no cuBLASLt algorithm for ", shape);
    // The first proposal is cuBLASLt's best guess: the algorithm unless
    // tuning times the others on the first run.
    plan->algo = plan->candidates.front().first;
    plan->workspaceBytes = plan->candidates.front().second;
    if (!options.tune)
      plan->candidates.clear();
  }

  Plan *result = plan.get();
  plans.emplace(key, std::move(plan));
  return result;
}

Status MatmulRunner::Impl::tunePlan(Plan &plan, const PlanKey &key,
                                    const void *a, const void *b, void *c,
                                    const void *addend, cudaStream_t stream) {
  std::vector<std::pair<cublasLtMatmulAlgo_t, size_t>> candidates;
  std::swap(candidates, plan.candidates);
  const std::string shape = describe(key);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  MLT_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone)
    return errorf("tuning ", shape,
                  ": its first run is inside a CUDA graph capture, where "
                  "products cannot be timed");
  // Timing runs must not change c when it is also the addend (they would add
  // the product several times): they write a scratch output instead.
  void *out = c;
  void *scratch = nullptr;
  if (addend) {
    const size_t bytes = size_t(key.batch * key.m * key.n) *
                         rt::elementSize(key.outType);
    MLT_CUDA_RETURN_IF_ERROR(cudaMalloc(&scratch, bytes));
    out = scratch;
  }
  constexpr int kRounds = 7;
  struct Cleanup {
    void *scratch;
    std::vector<cudaEvent_t> events;
    ~Cleanup() {
      for (cudaEvent_t event : events)
        (void)cudaEventDestroy(event);
      if (scratch)
        (void)cudaFree(scratch);
    }
  } cleanup{scratch, {}};
  const size_t count = candidates.size();
  for (size_t i = 0; i < 2 * count * kRounds; ++i) {
    cudaEvent_t event = nullptr;
    MLT_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
    cleanup.events.push_back(event);
  }
  const float alpha = 1.0f, beta = addend ? 1.0f : 0.0f;
  auto launch = [&](size_t i) {
    const auto &[algo, workspaceBytes] = candidates[i];
    return cublasLtMatmul(handle, plan.desc, &alpha, b, plan.layoutA, a,
                          plan.layoutB, &beta, out, plan.layoutC, out,
                          plan.layoutC, &algo,
                          workspaceBytes ? workspace : nullptr, workspaceBytes,
                          stream) == CUBLAS_STATUS_SUCCESS;
  };
  // One untimed run of each (caches, clocks; a candidate that fails to run
  // is left out), then rounds that time each once in turn, so that drifting
  // clocks reach every candidate alike.
  std::vector<bool> runs(count);
  for (size_t i = 0; i < count; ++i)
    runs[i] = launch(i);
  MLT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  for (int round = 0; round < kRounds; ++round)
    for (size_t i = 0; i < count; ++i) {
      if (!runs[i])
        continue;
      cudaEvent_t *pair = &cleanup.events[2 * (round * count + i)];
      MLT_CUDA_RETURN_IF_ERROR(cudaEventRecord(pair[0], stream));
      runs[i] = launch(i);
      MLT_CUDA_RETURN_IF_ERROR(cudaEventRecord(pair[1], stream));
    }
  MLT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  std::vector<double> medians(count, 0.0);
  for (size_t i = 0; i < count; ++i) {
    if (!runs[i])
      continue;
    std::vector<float> times(kRounds);
    for (int round = 0; round < kRounds; ++round) {
      cudaEvent_t *pair = &cleanup.events[2 * (round * count + i)];
      MLT_CUDA_RETURN_IF_ERROR(
          cudaEventElapsedTime(&times[round], pair[0], pair[1]));
    }
    std::nth_element(times.begin(), times.begin() + kRounds / 2, times.end());
    medians[i] = 1e3 * double(times[kRounds / 2]);
  }
  size_t best = count;
  for (size_t i = 0; i < count; ++i)
    if (runs[i] && (best == count || medians[i] < medians[best]))
      best = i;
  if (best == count)
    return errorf("tuning ", shape, ": none of cuBLASLt's ", count,
                  " proposals ran");
  plan.algo = candidates[best].first;
  plan.workspaceBytes = candidates[best].second;
  plan.tabled = true;

  rt::TunedAlgorithm tuned;
  std::memcpy(tuned.data.data(), plan.algo.data, sizeof(plan.algo.data));
  tuned.workspaceBytes = plan.workspaceBytes;
  tuned.config = describeAlgorithm(plan.algo);
  // To 0.01 us: the table is read by people too.
  auto rounded = [](double us) { return std::round(us * 100.0) / 100.0; };
  tuned.microseconds = rounded(medians[best]);
  tuned.heuristicMicroseconds = runs[0] ? rounded(medians[0]) : 0.0;
  std::fprintf(stderr, "tuned %s: %s, %.1f us (the heuristic's first %.1f)\n",
               shape.c_str(), tuned.config.c_str(), tuned.microseconds,
               tuned.heuristicMicroseconds);
  table.set(shape, std::move(tuned));
  return table.save(options.algorithms);
}

MatmulRunner::MatmulRunner(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

MatmulRunner::~MatmulRunner() = default;

StatusOr<std::unique_ptr<MatmulRunner>>
MatmulRunner::create(const MatmulOptions &options) {
  auto impl = std::make_unique<Impl>();
  MLT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&impl->device));
  if (options.tune && options.algorithms.empty())
    return errorf("tuning matmuls needs a table file to write");
  impl->options = options;
  MLT_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&impl->handle));
  if (!options.algorithms.empty()) {
    cudaDeviceProp properties;
    MLT_CUDA_RETURN_IF_ERROR(
        cudaGetDeviceProperties(&properties, impl->device));
    const int64_t version = int64_t(cublasLtGetVersion());
    // Tuning starts a table where there is none yet.
    if (options.tune && !std::ifstream(options.algorithms).good()) {
      impl->table = rt::MatmulTable(properties.name, version);
    } else {
      auto table =
          rt::MatmulTable::load(options.algorithms, properties.name, version);
      if (!table)
        return table.takeStatus();
      impl->table = std::move(*table);
    }
  }
  MLT_CUDA_RETURN_IF_ERROR(cudaMalloc(&impl->workspace, kWorkspaceBytes));
  return std::unique_ptr<MatmulRunner>(new MatmulRunner(std::move(impl)));
}

size_t MatmulRunner::cachedShapes() const { return impl_->plans.size(); }

size_t MatmulRunner::tabledShapes() const {
  return size_t(
      std::count_if(impl_->plans.begin(), impl_->plans.end(),
                    [](const auto &entry) { return entry.second->tabled; }));
}

Status MatmulRunner::run(const MatmulShape &shape, const void *a, const void *b,
                         void *c, rt::ElementType dtype, cudaStream_t stream) {
  return run(shape, a, b, c, dtype, dtype, nullptr, stream);
}

Status MatmulRunner::run(const MatmulShape &shape, const void *a, const void *b,
                         void *c, rt::ElementType dtype,
                         rt::ElementType outType, const void *addend,
                         cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkProduct(shape, dtype, outType));
  return impl_->product(keyOf(shape, dtype, outType, addend != nullptr), a, b,
                        c, addend, nullptr, nullptr, stream);
}

Status MatmulRunner::runFp8(const MatmulShape &shape, const void *a,
                            rt::ElementType aType, const float *aScaleInv,
                            const void *b, rt::ElementType bType,
                            const float *bScaleInv, void *c,
                            rt::ElementType outType, const void *addend,
                            bool fastAccumulation, cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(
      checkFp8Product(shape, aType, bType, outType, aScaleInv, bScaleInv));
  PlanKey key = keyOf(shape, aType, outType, addend != nullptr);
  key.dtypeB = bType;
  key.fastAccumulation = fastAccumulation;
  return impl_->product(key, a, b, c, addend, aScaleInv, bScaleInv, stream);
}

Status MatmulRunner::Impl::product(PlanKey key, const void *a, const void *b,
                                   void *c, const void *addend,
                                   const float *aScaleInv,
                                   const float *bScaleInv,
                                   cudaStream_t stream) {
  const int64_t batch = key.batch, m = key.m, n = key.n, k = key.k;
  if (batch == 0 || m == 0 || n == 0)
    return Status::ok();
  const int64_t aBytes = static_cast<int64_t>(rt::elementSize(key.dtype));
  const int64_t bBytes = static_cast<int64_t>(rt::elementSize(key.dtypeB));
  const int64_t outBytes = static_cast<int64_t>(rt::elementSize(key.outType));
  if (k == 0) {
    // The empty product: zeros (all-zero bytes in f32 and bf16), plus the
    // addend.
    const size_t bytes = size_t(batch * m * n * outBytes);
    if (!addend)
      MLT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(c, 0, bytes, stream));
    else if (addend != c)
      MLT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(c, addend, bytes, cudaMemcpyDeviceToDevice, stream));
    return Status::ok();
  }

  // Batch strides count in the alignment only when the products are strided
  // (a folded shared-b product is a single matrix).
  const bool strided =
      batch > 1 && !foldsBatch(batch, m, key.transposeA, key.bBatched);
  key.alignA = alignmentOf(a, strided ? m * k * aBytes : 0);
  key.alignB = alignmentOf(b, strided && key.bBatched ? k * n * bBytes : 0);
  // C and D share one layout, so one alignment: the smaller of the two.
  key.alignC = alignmentOf(c, strided ? m * n * outBytes : 0);
  if (addend)
    key.alignC = std::min(key.alignC,
                          alignmentOf(addend, strided ? m * n * outBytes : 0));
  if (key.alignA < aBytes || key.alignB < bBytes || key.alignC < outBytes)
    return errorf("matmul: an operand is not aligned to its element size");

  auto plan = getPlan(key, aScaleInv, bScaleInv);
  if (!plan)
    return plan.takeStatus();
  // The operands' scales, read by the kernel on the device. (The descriptor
  // is the shape's: set at each call, before any timing run.)
  if (aScaleInv)
    MLT_RETURN_IF_ERROR(setScales(**plan, aScaleInv, bScaleInv));
  if (!(*plan)->candidates.empty())
    MLT_RETURN_IF_ERROR(tunePlan(**plan, key, a, b, c, addend, stream));
  Status launched = launch(**plan, a, b, addend, c, stream);
  if (!launched)
    return errorf(describe(key), ": ", launched.message());
  return Status::ok();
}

Status MatmulRunner::Impl::launch(const Plan &p, const void *a, const void *b,
                                  const void *addend, void *c,
                                  cudaStream_t stream) {
  const float alpha = 1.0f, beta = addend ? 1.0f : 0.0f;
  MLT_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmul(handle, p.desc, &alpha, b, p.layoutA, a, p.layoutB, &beta,
                     addend ? addend : c, p.layoutC, c, p.layoutC, &p.algo,
                     p.workspaceBytes ? workspace : nullptr,
                     p.workspaceBytes, stream));
  return Status::ok();
}

StatusOr<void *>
MatmulRunner::Impl::pointerArray(const std::vector<const void *> &addresses,
                                 cudaStream_t stream) {
  auto it = pointerArrays.find(addresses);
  if (it != pointerArrays.end())
    return it->second;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  MLT_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone)
    return errorf("matmul_group: its first run is inside a CUDA graph "
                  "capture, where its operand addresses cannot be "
                  "uploaded");
  void *array = nullptr;
  const size_t bytes = addresses.size() * sizeof(void *);
  MLT_CUDA_RETURN_IF_ERROR(cudaMalloc(&array, bytes));
  if (cudaError_t error =
          cudaMemcpy(array, addresses.data(), bytes, cudaMemcpyHostToDevice);
      error != cudaSuccess) {
    (void)cudaFree(array);
    MLT_CUDA_RETURN_IF_ERROR(error);
  }
  pointerArrays.emplace(addresses, array);
  return array;
}

Status MatmulRunner::runGroup(const MatmulShape &shape,
                              const std::vector<const void *> &a,
                              const std::vector<const void *> &b,
                              const std::vector<void *> &c,
                              rt::ElementType dtype, rt::ElementType outType,
                              bool accumulate, cudaStream_t stream) {
  const size_t groups = c.size();
  if (groups == 0 || a.size() != groups || b.size() != groups)
    return errorf("matmul_group: ", a.size(), " a, ", b.size(), " b and ",
                  groups, " c operands (one of each per product)");
  // One launch where each product is one matrix (batch 1, or a shared b
  // under an untransposed a, folded); otherwise, and for the empty and
  // degenerate shapes, the products one by one.
  const bool single =
      shape.batch == 1 ||
      foldsBatch(shape.batch, shape.m, shape.transposeA, shape.bBatched);
  if (groups == 1 || !single || shape.m <= 0 || shape.n <= 0 || shape.k <= 0 ||
      shape.batch <= 0) {
    for (size_t g = 0; g < groups; ++g)
      MLT_RETURN_IF_ERROR(run(shape, a[g], b[g], c[g], dtype, outType,
                              accumulate ? c[g] : nullptr, stream));
    return Status::ok();
  }
  MLT_RETURN_IF_ERROR(checkProduct(shape, dtype, outType));
  const int64_t elementBytes = static_cast<int64_t>(rt::elementSize(dtype));
  const int64_t outBytes = static_cast<int64_t>(rt::elementSize(outType));
  PlanKey key = keyOf(shape, dtype, outType, accumulate);
  key.groups = int64_t(groups);
  key.alignA = key.alignB = key.alignC = 256;
  for (size_t g = 0; g < groups; ++g) {
    key.alignA = std::min(key.alignA, alignmentOf(a[g], 0));
    key.alignB = std::min(key.alignB, alignmentOf(b[g], 0));
    key.alignC = std::min(key.alignC, alignmentOf(c[g], 0));
  }
  if (key.alignA < elementBytes || key.alignB < elementBytes ||
      key.alignC < outBytes)
    return errorf("matmul_group: an operand is not aligned to its "
                  "element size");
  // cuBLASLt's A is b, its B is a, its C = D is c (matmul.cpp's header).
  std::vector<const void *> addresses(b.begin(), b.end());
  addresses.insert(addresses.end(), a.begin(), a.end());
  addresses.insert(addresses.end(), c.begin(), c.end());
  auto array = impl_->pointerArray(addresses, stream);
  if (!array)
    return array.takeStatus();
  void **arrays = static_cast<void **>(*array);
  void *arrayA = arrays, *arrayB = arrays + groups,
       *arrayC = arrays + 2 * groups;

  auto plan = impl_->getPlan(key);
  if (!plan)
    return plan.takeStatus();
  if (!(*plan)->candidates.empty()) {
    // Timing would add the product into c several times: an accumulating
    // group keeps the heuristic's choice unless the table has one.
    if (accumulate)
      (*plan)->candidates.clear();
    else
      MLT_RETURN_IF_ERROR(impl_->tunePlan(**plan, key, arrayB, arrayA, arrayC,
                                          nullptr, stream));
  }
  // (The arrays in the operands' places: cuBLASLt's A is b.)
  return impl_->launch(**plan, arrayB, arrayA, accumulate ? arrayC : nullptr,
                       arrayC, stream);
}
