//===- CudaBackend.cpp - Kernels.def on one GPU per rank ------------------===//
//
// Part of mlt. The CUDA backend (CudaBackend.h): checkSupported rejects,
// before anything is allocated, every instruction it has no kernel for and
// every operand type it does not compute in; createContext picks the rank's
// device and makes its context (CudaContext.h: one rank's device state, and
// the launch switch that dispatches to the kernel families' launchers).
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cuda/CudaBackend.h"
#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/PlanFormat.h"

#include "Collectives.h"
#include "CudaCheck.h"
#include "CudaContext.h"
#include "KernelScratch.h"
#include "kernels/elementwise.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::cuda;

namespace {

bool isCastType(ElementType type) {
  return type == ElementType::F32 || type == ElementType::F64 ||
         type == ElementType::BF16;
}

/// "1 CUDA device is" / "2 CUDA devices are".
std::string devicesAre(int count) {
  return std::to_string(count) +
         (count == 1 ? " CUDA device is" : " CUDA devices are");
}

/// Of the weight-gradient outputs that Kernels.def lets be the compute type
/// or f32 (OperandPrecision::Accumulator), the CUDA kernels of bf16
/// activations write embedding_bwd(_vp)'s dtable and rms_norm_bwd's dw in f32
/// only (matmul's c and accumulate's y take either).
Status checkGradientOutputs(const RankPlan &rank, const InstructionDesc &inst) {
  const bool f32Only = inst.kernel == Kernel::EmbeddingBwd ||
                       inst.kernel == Kernel::EmbeddingBwdVP ||
                       inst.kernel == Kernel::RMSNormBwd ||
                       inst.kernel == Kernel::RMSNormBwdAdd;
  if (!f32Only)
    return Status::ok();
  // dtable, or rms_norm_bwd's dw (before a fused amax of dx).
  const bool norm = inst.kernel == Kernel::RMSNormBwd ||
                    inst.kernel == Kernel::RMSNormBwdAdd;
  const BufferDesc &gradient = rank.buffers[inst.outputs.at(norm ? 1 : 0)];
  if (gradient.dtype != ElementType::F32)
    return errorf("buffer '", gradient.name, "' is ",
                  elementTypeName(gradient.dtype),
                  "; the CUDA backend writes this weight gradient in f32");
  return Status::ok();
}

class CudaBackend final : public Backend {
public:
  explicit CudaBackend(CudaBackendOptions options)
      : options_(std::move(options)) {}

  std::string_view name() const override { return "cuda"; }

  uint64_t scratchBytes(const RankPlan &rank,
                        const std::vector<MeshAxis> &mesh) const override {
    return rankScratchBytes(rank, mesh);
  }

  Status checkSupported(const RankPlan &rank) const override {
    for (const BufferDesc &buffer : rank.buffers)
      if (buffer.dtype == ElementType::F16)
        return errorf("buffer '", buffer.name,
                      "' is f16, which the CUDA backend does not support");
    for (const ProgramDesc &program : rank.programs) {
      for (size_t i = 0; i < program.instructions.size(); ++i) {
        const InstructionDesc &inst = program.instructions[i];
        auto fail = [&](auto &&...message) {
          return errorf("program '", program.name, "' instruction ", i, " (",
                        kernelName(inst.kernel), "): ", message...);
        };
        // Collectives and transfers are type-free (NCCL sums f32, f64 and
        // bf16, and the plan verifier checked the types; transfers move
        // bytes); they need a NCCL communicator, which launch and exchange
        // ask for (Collectives.h).
        if (isCollectiveKernel(inst.kernel) || isTransferKernel(inst.kernel))
          continue;
        if (inst.stream != 0)
          return fail("runs on stream ", unsigned(inst.stream),
                      "; the CUDA backend runs only collectives on streams "
                      "other than 0 (kernels share the compute stream's "
                      "scratch memory and matrix-product workspace)");
        if (!supportsKernel(inst.kernel))
          return fail("the CUDA backend has no kernel for it yet");
        // (The compiler rotates a context-parallel rank's gradients apart:
        // its key gradients are reduce-scattered first.)
        if (inst.kernel == Kernel::AttentionBwdRope &&
            contextAxis(inst) >= 0)
          return fail("rotates the gradients of a context-parallel rank's "
                      "queries and keys in one launch, which the CUDA "
                      "kernels do not take");
        if (inst.kernel == Kernel::Cast) {
          for (uint32_t index : {inst.inputs[0], inst.outputs[0]}) {
            const BufferDesc &buffer = rank.buffers[index];
            if (!isCastType(buffer.dtype))
              return fail("buffer '", buffer.name, "' is ",
                          elementTypeName(buffer.dtype),
                          "; cast converts between f32, f64 and bf16");
          }
          continue;
        }
        if (inst.kernel == Kernel::Transpose) {
          const TransposeAttrs dims = transposeAttrs(inst.ints);
          const int64_t merged =
              mergedTransposeRank(dims.shape, dims.perm, dims.rank);
          if (merged > kMaxTransposeRank)
            return fail(merged,
                        " dimensions once unit dimensions are dropped "
                        "and adjacent ones merged; the CUDA kernel takes at "
                        "most ",
                        kMaxTransposeRank);
          continue;
        }
        if (isTypeFreeKernel(inst.kernel))
          continue;
        Status operands = checkComputeOperands(
            rank, inst, [](const BufferDesc &buffer) -> Status {
              if (buffer.dtype != ElementType::F32 &&
                  buffer.dtype != ElementType::BF16)
                return errorf("buffer '", buffer.name, "' is ",
                              elementTypeName(buffer.dtype),
                              ", but the CUDA backend computes in f32 and "
                              "bf16 only (f64 is CPU-only)");
              return Status::ok();
            });
        if (operands)
          operands = checkGradientOutputs(rank, inst);
        if (!operands)
          return fail(operands.message());
      }
    }
    return Status::ok();
  }

  StatusOr<std::unique_ptr<DeviceContext>>
  createContext(const RankInfo &rank) override {
    int count = 0;
    MLT_RETURN_IF_ERROR(probeCudaDevices(count));
    // One process per GPU: the device the NCCL communicator was made on.
    int device = communicatorDevice(rank);
    if (device >= count)
      return errorf("CUDA device ", device, " is not visible (",
                    devicesAre(count), ")");
    if (device < 0 && rank.worldSize > 1) {
      // Ranks as threads of this process: one device each.
      if (int64_t(rank.worldSize) > count)
        return errorf("the plan has ", rank.worldSize, " ranks but only ",
                      devicesAre(count), " visible");
      device = int(rank.rank);
    }
    device = std::max(device, 0);
    cudaDeviceProp properties;
    MLT_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, device));
    if (properties.major < 9)
      return errorf("CUDA device ", device, " (", properties.name,
                    ") has compute capability ", properties.major, ".",
                    properties.minor,
                    "; this build's kernels need 9.0 or newer (sm_90)");
    auto context = std::make_unique<CudaDeviceContext>(
        device, rank.communicator,
        MatmulOptions{options_.matmulAlgorithms, options_.tuneMatmuls});
    MLT_RETURN_IF_ERROR(context->init());
    return std::unique_ptr<DeviceContext>(std::move(context));
  }

private:
  CudaBackendOptions options_;
};

} // namespace

std::unique_ptr<Backend>
mlt::rt::createCudaBackend(CudaBackendOptions options) {
  return std::make_unique<CudaBackend>(std::move(options));
}

Status mlt::rt::probeCudaDevices(int &count) {
  count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    count = 0;
    return errorf("no CUDA device is visible (cudaGetDeviceCount: ",
                  cudaGetErrorString(error), ")");
  }
  if (count == 0)
    return errorf("no CUDA device is visible (cudaGetDeviceCount found 0)");
  return Status::ok();
}
