//===- NcclTestUtil.h - helpers of the NCCL tests ---------------*- C++ -*-===//
//
// Part of mlt. What the tests of the NCCL communicator's collectives
// (NcclCommunicatorTest.cpp) and of the CUDA contexts' transfer groups
// (NcclExchangeTest.cpp) share: communicators of a mesh, a one-rank CUDA
// context over one, buffers, instructions and transfers.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_UNITTESTS_RUNTIMECUDA_NCCLTESTUTIL_H
#define MLT_UNITTESTS_RUNTIMECUDA_NCCLTESTUTIL_H

#include "CudaTestUtil.h"

#include "mlt/Runtime/cuda/CudaBackend.h"
#include "mlt/Runtime/cuda/NcclCommunicator.h"
#include "mlt/Runtime/exec/Backend.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace mlt::cuda::test {

using namespace mlt;
using namespace mlt::rt;

inline int deviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

/// Rank `rank` of `mesh`'s communicators on device `device`.
inline std::unique_ptr<CudaCommunicator>
communicatorFor(const std::string &mesh, int rank, int device,
                const NcclUniqueId &id) {
  StatusOr<Mesh> parsed = Mesh::parse(mesh);
  EXPECT_TRUE(parsed) << parsed.status().message();
  if (!parsed)
    return nullptr;
  StatusOr<std::unique_ptr<CudaCommunicator>> communicator =
      createNcclCommunicator(*parsed, rank, device, id);
  EXPECT_TRUE(communicator) << communicator.status().message();
  return communicator ? std::move(*communicator) : nullptr;
}

inline std::unique_ptr<CudaCommunicator> singleRank() {
  StatusOr<NcclUniqueId> id = createNcclUniqueId();
  EXPECT_TRUE(id) << id.status().message();
  return id ? communicatorFor("dp=1,tp=1", 0, 0, *id) : nullptr;
}

/// A CUDA context over a one-rank communicator, with what it needs alive;
/// a null context (and a test failure) if either cannot be created.
struct OneRankContext {
  std::unique_ptr<CudaCommunicator> comm;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<DeviceContext> context;
};

inline OneRankContext oneRankContext() {
  OneRankContext one;
  one.comm = singleRank();
  if (!one.comm)
    return one;
  one.backend = createCudaBackend();
  StatusOr<std::unique_ptr<DeviceContext>> created =
      one.backend->createContext(RankInfo{0, 1, one.comm.get()});
  EXPECT_TRUE(created) << created.status().message();
  if (created)
    one.context = std::move(*created);
  return one;
}

/// `count` f32 buffers of n elements, one after another in one allocation
/// of `context` (freed by deallocating the first's data); none (and a test
/// failure) if it cannot allocate.
inline std::vector<BufferView> allocateViews(DeviceContext &context, int count,
                                             int64_t n) {
  const uint64_t bytes = uint64_t(n) * sizeof(float);
  StatusOr<uint8_t *> arena = context.allocate(uint64_t(count) * bytes);
  EXPECT_TRUE(arena) << arena.status().message();
  std::vector<BufferView> views;
  for (int i = 0; arena && i < count; ++i)
    views.push_back(BufferView{*arena + i * bytes, ElementType::F32, n});
  return views;
}

/// A rank of two f32 buffers of 4 elements, x and y, whose one program "p"
/// runs `inst` from x to y.
inline RankPlan twoBufferRank(InstructionDesc inst) {
  RankPlan rank;
  rank.buffers = {BufferDesc{}, BufferDesc{}};
  for (BufferDesc &buffer : rank.buffers) {
    buffer.shape = {4};
    buffer.bytes = 16;
  }
  rank.buffers[0].name = "x";
  rank.buffers[1].name = "y";
  rank.buffers[1].offset = 256;
  rank.arenaBytes = 512;
  inst.inputs = {0};
  inst.outputs = {1};
  rank.programs.push_back(ProgramDesc{"p", {std::move(inst)}});
  return rank;
}

template <typename T> std::vector<T> sequence(size_t n, T start) {
  std::vector<T> values(n);
  for (size_t i = 0; i < n; ++i)
    values[i] = T(start + T(i));
  return values;
}

inline InstructionDesc instruction(Kernel kernel, std::vector<int64_t> ints) {
  InstructionDesc inst;
  inst.kernel = kernel;
  inst.ints = std::move(ints);
  return inst;
}

inline PointToPoint sendTo(int peer, ElementType dtype, size_t count,
                           void *buffer) {
  return {TransferKind::Send, peer, dtype, count, buffer};
}

inline PointToPoint receiveFrom(int peer, ElementType dtype, size_t count,
                                void *buffer) {
  return {TransferKind::Receive, peer, dtype, count, buffer};
}

} // namespace mlt::cuda::test

#endif // MLT_UNITTESTS_RUNTIMECUDA_NCCLTESTUTIL_H
