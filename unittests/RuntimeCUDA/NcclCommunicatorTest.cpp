//===- NcclCommunicatorTest.cpp - collectives over NCCL -------------------===//
//
// Part of mlt. The NCCL communicator (NcclCommunicator.h) and the CUDA
// context's collectives (Collectives.h). With one GPU:
// a world of one rank (over a two-axis mesh, so that the axis communicators
// are split), where every collective is a copy and an exchange sends to and
// receives from the rank itself, the argument checks, the abort, and the
// context running compute -> collective -> compute in order on its two
// streams. With two or more GPUs (skipped, visibly, with fewer): one thread
// per GPU in this process, each with its own communicator, as the
// processes of an mpirun would be, checking sums, chunks, gathers (out of
// place and in place), all-to-alls, permutes by every shift (f32, bf16 and
// i32), broadcasts over each axis of a mesh, point-to-point copies, and
// exchanges with both neighbours on each axis in one group.
// The contexts' transfer groups: NcclExchangeTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "NcclTestUtil.h"

#include "mlt/Plan/KernelInfo.h"
#include "mlt/Runtime/cuda/CudaBackend.h"
#include "mlt/Runtime/cuda/NcclCommunicator.h"
#include "mlt/Support/Bf16.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::cuda::test;

namespace {

// Tests a world of one rank: every collective copies its input, in place or
// not, on the communicator's own stream and on a stream of the caller's;
// NVLS is off unless the user set it.
TEST(NcclCommunicatorTest, OneRankCollectivesCopy) {
  MLT_REQUIRE_CUDA();
  std::unique_ptr<CudaCommunicator> comm = singleRank();
  ASSERT_TRUE(comm);
  EXPECT_EQ(comm->device(), 0);
  EXPECT_EQ(comm->rank(), 0);
  ASSERT_NE(std::getenv("NCCL_NVLS_ENABLE"), nullptr);
  EXPECT_FALSE(ncclLibraryVersion().empty());

  const size_t n = 1000;
  const std::vector<float> values = sequence<float>(n, 1.0f);
  DeviceBuffer<float> in(n), out(n);
  in.upload(values);
  for (const char *axis : {"dp", "tp"}) {
    ASSERT_TRUE(
        comm->allReduceSum(in.get(), out.get(), n, ElementType::F32, axis));
    EXPECT_EQ(out.download(), values) << axis;
  }
  ASSERT_TRUE(
      comm->reduceScatterSum(in.get(), in.get(), n, ElementType::F32, "tp"));
  ASSERT_TRUE(comm->allGather(in.get(), out.get(), n, ElementType::F32, "dp"));
  EXPECT_EQ(out.download(), values);
  ASSERT_TRUE(comm->broadcast(in.get(), n, ElementType::F32, "tp", 0));
  EXPECT_EQ(in.download(), values);

  // bf16 sums, i32 moves.
  std::vector<uint16_t> halves(n);
  for (size_t i = 0; i < n; ++i)
    halves[i] = mlt::floatToBF16(values[i] * 0.25f);
  DeviceBuffer<uint16_t> h(n);
  h.upload(halves);
  ASSERT_TRUE(comm->allReduceSum(h.get(), h.get(), n, ElementType::BF16, "dp"));
  EXPECT_EQ(h.download(), halves);
  DeviceBuffer<int32_t> ids(n), gathered(n);
  ids.upload(sequence<int32_t>(n, -5));
  ASSERT_TRUE(
      comm->allGather(ids.get(), gathered.get(), n, ElementType::I32, "tp"));
  EXPECT_EQ(gathered.download(), sequence<int32_t>(n, -5));

  // On a stream of the caller's, waited for by polling.
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(out.get(), 0, n * sizeof(float), stream),
            cudaSuccess);
  ASSERT_TRUE(
      comm->enqueue("dp",
                    CollectiveCall{CollectiveKind::AllReduceSum,
                                   ElementType::F32, n, 0, in.get(), out.get()},
                    stream));
  cudaError_t result = cudaErrorUnknown;
  ASSERT_TRUE(comm->waitForStream(stream, result));
  EXPECT_EQ(result, cudaSuccess);
  EXPECT_EQ(out.download(), values);

  // An exchange with itself (index 0 of each axis): one group of a send and
  // a receive, blocking and queued on the caller's stream; i32 as bytes.
  DeviceBuffer<int32_t> received(n);
  ASSERT_TRUE(comm->exchange(
      "tp", {sendTo(0, ElementType::I32, n, ids.get()),
             receiveFrom(0, ElementType::I32, n, received.get())}));
  EXPECT_EQ(received.download(), sequence<int32_t>(n, -5));
  ASSERT_EQ(cudaMemsetAsync(out.get(), 0, n * sizeof(float), stream),
            cudaSuccess);
  ASSERT_TRUE(
      comm->enqueueExchange("dp",
                            {receiveFrom(0, ElementType::F32, n, out.get()),
                             sendTo(0, ElementType::F32, n, in.get())},
                            stream));
  ASSERT_TRUE(comm->waitForStream(stream, result));
  EXPECT_EQ(result, cudaSuccess);
  EXPECT_EQ(out.download(), values);

  EXPECT_TRUE(comm->checkAsyncErrors());
  EXPECT_TRUE(comm->barrier());
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// Tests the argument checks (each one line, the communicator still usable)
// and that an abort fails every later call.
TEST(NcclCommunicatorTest, ErrorsAndAbort) {
  MLT_REQUIRE_CUDA();
  std::unique_ptr<CudaCommunicator> comm = singleRank();
  ASSERT_TRUE(comm);
  DeviceBuffer<float> x(8);
  DeviceBuffer<int32_t> ids(8);

  Status status =
      comm->allReduceSum(x.get(), x.get(), 8, ElementType::F32, "pp");
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "'pp' is not an axis of the mesh dp=1,tp=1");
  status = comm->allReduceSum(ids.get(), ids.get(), 8, ElementType::I32, "dp");
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "all_reduce_sum over axis 'dp': all_reduce_sum "
                              "cannot sum i32 (only f32, f64 and bf16)");
  status = comm->broadcast(x.get(), 8, ElementType::F32, "tp", 1);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "broadcast over axis 'tp': broadcast root index "
                              "1 is outside the group of 1 ranks");
  // A group of one has no shift for permute (0 < shift < 1).
  DeviceBuffer<float> y(8);
  for (int shift : {1, 0}) {
    status = comm->permute(x.get(), y.get(), 8, ElementType::F32, "dp", shift);
    ASSERT_FALSE(status);
    EXPECT_EQ(status.message(), "permute over axis 'dp': permute shift " +
                                    std::to_string(shift) +
                                    " is outside [1, 1) for a group of 1 "
                                    "ranks");
  }
  status = comm->exchange("dp", {sendTo(1, ElementType::F32, 8, x.get())});
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "exchange over axis 'dp': transfer #0 (send of 8 f32 to index 1): "
            "index 1 is outside the group of 1 ranks");
  status = comm->exchange("dp", {sendTo(0, ElementType::F32, 8, x.get()),
                                 receiveFrom(0, ElementType::F32, 8, x.get())});
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "exchange over axis 'dp': transfer #1 (receive of 8 f32 from "
            "index 0) writes bytes that transfer #0 (send of 8 f32 to index "
            "0) touches; the transfers of an exchange are not ordered");
  float host[8] = {};
  status = comm->send(0, host, sizeof(host));
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "send: rank 0 is not another rank of the 1");
  EXPECT_TRUE(comm->allReduceSum(x.get(), x.get(), 8, ElementType::F32, "dp"));

  comm->abort("rank 0 failed");
  EXPECT_TRUE(comm->isAborted());
  status = comm->allReduceSum(x.get(), x.get(), 8, ElementType::F32, "dp");
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "collectives aborted: rank 0 failed");
  EXPECT_FALSE(comm->checkAsyncErrors());
  EXPECT_FALSE(comm->barrier());
}

// Tests the CUDA context with a NCCL communicator: collectives accepted by
// checkSupported, run on the communication stream between two kernels of
// the compute stream, in order (a large buffer, so that a missing event
// would let the collective read the input before the add wrote it); and,
// without one, the message that says how to run collectives.
TEST(NcclCommunicatorTest, ContextOrdersComputeAndCollectives) {
  MLT_REQUIRE_CUDA();
  OneRankContext one = oneRankContext();
  ASSERT_TRUE(one.context);
  Backend &backend = *one.backend;
  DeviceContext &context = *one.context;

  const int64_t n = int64_t(1) << 22;
  const uint64_t bytes = uint64_t(n) * sizeof(float);
  const std::vector<BufferView> views = allocateViews(context, 4, n);
  ASSERT_EQ(views.size(), 4u);
  const BufferView a = views[0], b = views[1], sum = views[2], out = views[3];
  std::vector<float> hostA(static_cast<size_t>(n)),
      hostB(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    hostA[size_t(i)] = float(i % 1000);
    hostB[size_t(i)] = 0.5f;
  }
  ASSERT_TRUE(context.copyToDevice(a.data, hostA.data(), bytes));
  ASSERT_TRUE(context.copyToDevice(b.data, hostB.data(), bytes));
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(context.launch(instruction(Kernel::Add, {n}), {a, b}, {sum}));
    ASSERT_TRUE(context.launch(instruction(Kernel::AllReduceSum, {n, 1}), {sum},
                               {out}));
    ASSERT_TRUE(context.launch(instruction(Kernel::Mul, {n}), {out, b}, {sum}));
    ASSERT_TRUE(
        context.launch(instruction(Kernel::AllGather, {n, 0}), {sum}, {a}));
  }
  ASSERT_TRUE(context.synchronize());
  std::vector<float> result(static_cast<size_t>(n));
  ASSERT_TRUE(context.copyToHost(result.data(), a.data, bytes));
  for (int64_t i = 0; i < n; i += 4099) {
    float expected = float(i % 1000);
    for (int round = 0; round < 3; ++round)
      expected = (expected + 0.5f) * 0.5f;
    ASSERT_EQ(result[size_t(i)], expected) << "element " << i;
  }
  context.deallocate(views[0].data);

  // checkSupported lets collectives through; without a NCCL communicator the
  // launch says how to run them.
  InstructionDesc reduce = instruction(Kernel::AllReduceSum, {4, 0});
  EXPECT_TRUE(backend.checkSupported(twoBufferRank(reduce)));
  StatusOr<std::unique_ptr<DeviceContext>> plain =
      backend.createContext(RankInfo{0, 1, nullptr});
  ASSERT_TRUE(plain);
  StatusOr<uint8_t *> small = (*plain)->allocate(512);
  ASSERT_TRUE(small);
  Status status =
      (*plain)->launch(reduce, {BufferView{*small, ElementType::F32, 4}},
                       {BufferView{*small + 256, ElementType::F32, 4}});
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("mpirun -np N"), std::string::npos)
      << status.message();
  (*plain)->deallocate(*small);
}

// Tests the plan's streams on a context: a collective on stream 1 that waits
// for the token of the launch that writes its input runs after it (its
// output is that launch's result, not the poison written before), beside a
// compute launch that does not depend on it, and the program's end joins
// it; the same launches captured as a CUDA graph (as MLT_CUDA_GRAPHS=all
// lets a rank with collectives do) and replayed give the same results on
// new inputs; a side-stream launch outside a program is refused; and
// checkSupported lets only collectives run on streams other than 0.
TEST(NcclCommunicatorTest, CollectivesOnAPlanStream) {
  MLT_REQUIRE_CUDA();
  OneRankContext one = oneRankContext();
  ASSERT_TRUE(one.context);
  Backend &backend = *one.backend;
  DeviceContext &context = *one.context;

  const int64_t n = int64_t(1) << 22;
  const uint64_t bytes = uint64_t(n) * sizeof(float);
  const std::vector<BufferView> views = allocateViews(context, 5, n);
  ASSERT_EQ(views.size(), 5u);
  const BufferView a = views[0], b = views[1], sum = views[2], out = views[3],
                   product = views[4];
  ProgramDesc program{"micro_step_last", {}};
  InstructionDesc add = instruction(Kernel::Add, {n});
  add.token = 0;
  InstructionDesc reduce = instruction(Kernel::AllReduceSum, {n, 1});
  reduce.stream = 1;
  reduce.waits = {0};
  InstructionDesc mul = instruction(Kernel::Mul, {n});
  program.instructions = {add, reduce, mul};
  auto runProgram = [&]() -> Status {
    MLT_RETURN_IF_ERROR(context.beginProgram(program));
    MLT_RETURN_IF_ERROR(context.launch(add, {a, b}, {sum}));
    MLT_RETURN_IF_ERROR(context.launch(reduce, {sum}, {out}));
    MLT_RETURN_IF_ERROR(context.launch(mul, {a, b}, {product}));
    return context.endProgram(program);
  };

  std::mt19937 rng(7);
  std::vector<float> hostA, hostB, result(static_cast<size_t>(n));
  auto check = [&](const char *what) {
    ASSERT_TRUE(context.synchronize());
    ASSERT_TRUE(context.copyToHost(result.data(), out.data, bytes));
    for (int64_t i = 0; i < n; i += 997)
      ASSERT_EQ(result[size_t(i)], hostA[size_t(i)] + hostB[size_t(i)])
          << what << ", element " << i;
    ASSERT_TRUE(context.copyToHost(result.data(), product.data, bytes));
    for (int64_t i = 0; i < n; i += 997)
      ASSERT_EQ(result[size_t(i)], hostA[size_t(i)] * hostB[size_t(i)])
          << what << ", element " << i;
  };
  auto freshInputs = [&]() {
    hostA = randomFloats(rng, n);
    hostB = randomFloats(rng, n);
    ASSERT_TRUE(context.copyToDevice(a.data, hostA.data(), bytes));
    ASSERT_TRUE(context.copyToDevice(b.data, hostB.data(), bytes));
    ASSERT_TRUE(context.fill(sum, -1.0));
    ASSERT_TRUE(context.fill(out, -2.0));
  };

  for (int round = 0; round < 2; ++round) {
    freshInputs();
    ASSERT_TRUE(runProgram());
    check("launched");
  }
  ASSERT_TRUE(context.beginCapture());
  Status captured = runProgram();
  ASSERT_TRUE(captured) << captured.message();
  StatusOr<size_t> graph = context.endCapture();
  ASSERT_TRUE(graph) << graph.status().message();
  for (int round = 0; round < 2; ++round) {
    freshInputs();
    ASSERT_TRUE(context.replay(*graph));
    check("replayed");
  }

  Status outside = context.launch(reduce, {sum}, {out});
  ASSERT_FALSE(outside);
  EXPECT_NE(outside.message().find("stream 1 is not open"), std::string::npos)
      << outside.message();
  ASSERT_TRUE(context.synchronize());
  context.deallocate(views[0].data);

  InstructionDesc sideReduce = instruction(Kernel::AllReduceSum, {4, 0});
  sideReduce.stream = 1;
  EXPECT_TRUE(backend.checkSupported(twoBufferRank(sideReduce)));
  InstructionDesc sideCast = instruction(Kernel::Cast, {4});
  sideCast.stream = 2;
  Status refused = backend.checkSupported(twoBufferRank(sideCast));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.message(),
            "program 'p' instruction 0 (cast): runs on stream 2; the CUDA "
            "backend runs only collectives on streams other than 0 (kernels "
            "share the compute stream's scratch memory and matrix-product "
            "workspace)");
}

// Tests real collectives between GPUs: one thread per GPU (up to 8), each
// with its own communicator over a mesh (dp=2 x tp=G/2 when G is even and
// at least 4, else x=G), as the processes of an mpirun would have them.
TEST(NcclCommunicatorTest, EveryGpuOfThisMachine) {
  const int gpus = std::min(deviceCount(), 8);
  if (gpus < 2)
    GTEST_SKIP() << "needs 2 CUDA devices, " << gpus << " visible";
  const std::string mesh = gpus >= 4 && gpus % 2 == 0
                               ? "dp=2,tp=" + std::to_string(gpus / 2)
                               : "x=" + std::to_string(gpus);
  StatusOr<Mesh> parsed = Mesh::parse(mesh);
  ASSERT_TRUE(parsed);
  StatusOr<NcclUniqueId> id = createNcclUniqueId();
  ASSERT_TRUE(id) << id.status().message();

  std::vector<std::unique_ptr<CudaCommunicator>> comms(
      static_cast<size_t>(gpus));
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < gpus; ++r)
      threads.emplace_back(
          [&, r] { comms[size_t(r)] = communicatorFor(mesh, r, r, *id); });
    for (std::thread &thread : threads)
      thread.join();
  }
  for (const auto &comm : comms)
    ASSERT_TRUE(comm);

  const size_t n = 4096;
  std::vector<std::string> failures(static_cast<size_t>(gpus));
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const std::string &what) {
        if (failures[size_t(r)].empty())
          failures[size_t(r)] = what;
      };
      CudaCommunicator &comm = *comms[size_t(r)];
      if (cudaSetDevice(r) != cudaSuccess)
        return fail("cudaSetDevice");
      for (const MeshAxis &axis : parsed->axes()) {
        MeshGroup group = *parsed->groupOf(r, axis.name);
        const size_t g = size_t(group.size());
        // x_k[j] = (k + 1) * j for the group's k-th member.
        DeviceBuffer<float> x(n * g), y(n * g);
        std::vector<float> mine(n * g);
        for (size_t j = 0; j < n * g; ++j)
          mine[j] = float(group.index + 1) * float(j % 977);
        x.upload(mine);
        const float members = float(g * (g + 1) / 2);
        if (!comm.allReduceSum(x.get(), y.get(), n * g, ElementType::F32,
                               axis.name))
          return fail("allReduceSum");
        std::vector<float> sum = y.download();
        for (size_t j = 0; j < n * g; ++j)
          if (sum[j] != members * float(j % 977))
            return fail("allReduceSum over " + axis.name + " element " +
                        std::to_string(j));
        if (!comm.reduceScatterSum(x.get(), y.get(), n, ElementType::F32,
                                   axis.name))
          return fail("reduceScatterSum");
        sum = y.download();
        for (size_t j = 0; j < n; ++j)
          if (sum[j] != members * float((size_t(group.index) * n + j) % 977))
            return fail("reduceScatterSum over " + axis.name);
        if (!comm.allGather(x.get(), y.get(), n, ElementType::F32, axis.name))
          return fail("allGather");
        std::vector<float> all = y.download();
        for (size_t k = 0; k < g; ++k)
          for (size_t j = 0; j < n; ++j)
            if (all[k * n + j] != float(k + 1) * float(j % 977))
              return fail("allGather over " + axis.name);
        // In place, as a partitioned optimizer chains them on one bucket
        // (NCCL's in-place conditions: recvbuff = sendbuff + index * n for
        // the reduce-scatter, sendbuff = recvbuff + index * n for the
        // all-gather): the sum lands in this rank's chunk, the other
        // chunks stay; then every rank's chunk, changed, is gathered.
        float *chunk = x.get() + size_t(group.index) * n;
        if (!comm.reduceScatterSum(x.get(), chunk, n, ElementType::F32,
                                   axis.name))
          return fail("reduceScatterSum in place");
        all = x.download();
        for (size_t k = 0; k < g; ++k)
          for (size_t j = 0; j < n; ++j) {
            const size_t e = k * n + j;
            const float want = k == size_t(group.index)
                                   ? members * float(e % 977)
                                   : mine[e];
            if (all[e] != want)
              return fail("reduceScatterSum in place over " + axis.name +
                          " element " + std::to_string(e));
          }
        std::vector<float> changed(n);
        for (size_t j = 0; j < n; ++j)
          changed[j] = -float(group.index + 1) - float(j % 31);
        if (cudaMemcpy(chunk, changed.data(), n * sizeof(float),
                       cudaMemcpyHostToDevice) != cudaSuccess)
          return fail("cudaMemcpy");
        if (!comm.allGather(chunk, x.get(), n, ElementType::F32, axis.name))
          return fail("allGather in place");
        all = x.download();
        for (size_t k = 0; k < g; ++k)
          for (size_t j = 0; j < n; ++j)
            if (all[k * n + j] != -float(k + 1) - float(j % 31))
              return fail("allGather in place over " + axis.name);
        // All-to-all: block k of y is member k's block of this rank's
        // index, (k + 1) * ((index * n + j) % 977).
        x.upload(mine);
        if (!comm.allToAll(x.get(), y.get(), n, ElementType::F32, axis.name))
          return fail("allToAll");
        all = y.download();
        for (size_t k = 0; k < g; ++k)
          for (size_t j = 0; j < n; ++j)
            if (all[k * n + j] !=
                float(k + 1) * float((size_t(group.index) * n + j) % 977))
              return fail("allToAll over " + axis.name + " element " +
                          std::to_string(k * n + j));
        // With blocks of two chunks of h = n / 2: to the natural order,
        // member k's block lands at chunks k and 2g - 1 - k; from it,
        // member k gets chunks k and 2g - 1 - k of x.
        const size_t h = n / 2;
        auto chunkOf = [&](size_t k, size_t half) {
          return half == 0 ? k : 2 * g - 1 - k;
        };
        if (!comm.allToAll(x.get(), y.get(), n, ElementType::F32, axis.name,
                           BlockOrder::ToNatural))
          return fail("allToAll to_natural");
        all = y.download();
        for (size_t k = 0; k < g; ++k)
          for (size_t j = 0; j < n; ++j)
            if (all[chunkOf(k, j / h) * h + j % h] !=
                float(k + 1) * float((size_t(group.index) * n + j) % 977))
              return fail("allToAll to_natural over " + axis.name +
                          " block " + std::to_string(k));
        if (!comm.allToAll(x.get(), y.get(), n, ElementType::F32, axis.name,
                           BlockOrder::FromNatural))
          return fail("allToAll from_natural");
        all = y.download();
        for (size_t k = 0; k < g; ++k)
          for (size_t j = 0; j < n; ++j) {
            const size_t e = chunkOf(size_t(group.index), j / h) * h + j % h;
            if (all[k * n + j] != float(k + 1) * float(e % 977))
              return fail("allToAll from_natural over " + axis.name +
                          " block " + std::to_string(k));
          }
        // Permute by every shift: y is the x of the member `shift` places
        // before, (from + 1) * (j % 977); in f32, and as bf16 and i32 bits
        // (moved as bytes whatever the type).
        for (int shift = 1; shift < int(g); ++shift) {
          const int from = (group.index - shift + int(g)) % int(g);
          const std::string what =
              "permute by " + std::to_string(shift) + " over " + axis.name;
          if (!comm.permute(x.get(), y.get(), n, ElementType::F32, axis.name,
                            shift))
            return fail(what);
          all = y.download();
          for (size_t j = 0; j < n; ++j)
            if (all[j] != float(from + 1) * float(j % 977))
              return fail(what + " element " + std::to_string(j));
          for (ElementType type : {ElementType::BF16, ElementType::I32}) {
            // 2 * n bytes of x as n bf16 or n / 2 i32 elements.
            const size_t count = type == ElementType::BF16 ? n : n / 2;
            if (cudaMemset(y.get(), 0xFF, n * g * sizeof(float)) !=
                    cudaSuccess ||
                cudaDeviceSynchronize() != cudaSuccess)
              return fail("cudaMemset");
            if (!comm.permute(x.get(), y.get(), count, type, axis.name, shift))
              return fail(what + " in " + elementTypeName(type));
            const std::vector<float> moved = y.download();
            for (size_t j = 0; j < n / 2; ++j)
              if (std::memcmp(&moved[j], &all[j], sizeof(float)) != 0)
                return fail(what + " in " + elementTypeName(type) +
                            " element " + std::to_string(j));
          }
        }
        if (!comm.broadcast(x.get(), n, ElementType::F32, axis.name,
                            int(g) - 1))
          return fail("broadcast");
        all = x.download();
        for (size_t j = 0; j < n; ++j)
          if (all[j] != float(g) * float(j % 977))
            return fail("broadcast over " + axis.name);
      }
      // Exchanges: on each axis, one group sending this rank's numbers to
      // both neighbours in the group and receiving theirs, twice.
      for (const MeshAxis &axis : parsed->axes()) {
        MeshGroup group = *parsed->groupOf(r, axis.name);
        for (int round = 0; round < 2; ++round) {
          std::vector<int> neighbours;
          for (int index : {group.index - 1, group.index + 1})
            if (index >= 0 && index < group.size())
              neighbours.push_back(index);
          auto value = [&](int from, int to, size_t j) {
            return int32_t(from * 100000 + to * 1000 + round * 100 +
                           int(j % 97));
          };
          std::vector<std::unique_ptr<DeviceBuffer<int32_t>>> out, in;
          std::vector<PointToPoint> transfers;
          for (int index : neighbours) {
            const int peer = group.ranks[size_t(index)];
            std::vector<int32_t> mine(n);
            for (size_t j = 0; j < n; ++j)
              mine[j] = value(r, peer, j);
            out.push_back(std::make_unique<DeviceBuffer<int32_t>>(n));
            out.back()->upload(mine);
            in.push_back(std::make_unique<DeviceBuffer<int32_t>>(n));
            transfers.push_back(
                sendTo(index, ElementType::I32, n, out.back()->get()));
            transfers.push_back(
                receiveFrom(index, ElementType::I32, n, in.back()->get()));
          }
          if (!comm.exchange(axis.name, transfers))
            return fail("exchange over " + axis.name);
          for (size_t k = 0; k < neighbours.size(); ++k) {
            const int peer = group.ranks[size_t(neighbours[k])];
            const std::vector<int32_t> got = in[k]->download();
            for (size_t j = 0; j < n; ++j)
              if (got[j] != value(peer, r, j))
                return fail("exchange over " + axis.name + " from rank " +
                            std::to_string(peer));
          }
        }
      }
      // Point to point: every rank sends rank 0 its number.
      if (r == 0) {
        for (int from = 1; from < gpus; ++from) {
          std::vector<int32_t> got(n);
          if (!comm.receive(from, got.data(), n * sizeof(int32_t)))
            return fail("receive");
          if (got != std::vector<int32_t>(n, from))
            return fail("receive from " + std::to_string(from));
        }
      } else {
        std::vector<int32_t> sent(n, r);
        if (!comm.send(0, sent.data(), n * sizeof(int32_t)))
          return fail("send");
      }
      if (!comm.barrier())
        return fail("barrier");
    });
  }
  for (std::thread &thread : threads)
    thread.join();
  for (int r = 0; r < gpus; ++r)
    EXPECT_EQ(failures[size_t(r)], "") << "rank " << r << " of mesh " << mesh;
  // Destroyed together, as the processes would end.
  threads.clear();
  for (int r = 0; r < gpus; ++r)
    threads.emplace_back([&, r] { comms[size_t(r)].reset(); });
  for (std::thread &thread : threads)
    thread.join();
}

} // namespace
