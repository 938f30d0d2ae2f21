//===- NcclExchangeTest.cpp - CUDA contexts' transfer groups --------------===//
//
// Part of mlt. The CUDA device context's transfer groups
// (DeviceContext::exchange, Collectives.h): sends and receives queued on the
// compute stream as one NCCL group, in order with the launches around them,
// launched and captured as a CUDA graph. With one GPU: a rank exchanging
// with itself between two kernels; sends refused as launches; a context
// without a NCCL communicator saying how to run them. With two or more GPUs
// (skipped, visibly, with fewer): one thread per GPU over a line, each
// exchanging with both neighbours in one group, as a pipeline's stages do.
//
//===----------------------------------------------------------------------===//

#include "NcclTestUtil.h"

#include "mlt/Plan/KernelInfo.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <utility>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::cuda::test;

namespace {

// Tests the CUDA context's transfer groups (DeviceContext::exchange): an
// exchange with the rank itself between two compute launches on the
// compute stream, in order (a large buffer, so that a missing order would
// show), launched and captured as a CUDA graph and replayed on new inputs;
// sends and receives refused as launches; and, without a NCCL
// communicator, the message that says how to run them.
TEST(NcclExchangeTest, ContextOrdersComputeAndExchanges) {
  MLT_REQUIRE_CUDA();
  OneRankContext one = oneRankContext();
  ASSERT_TRUE(one.context);
  Backend &backend = *one.backend;
  DeviceContext &context = *one.context;

  const int64_t n = int64_t(1) << 22;
  const uint64_t bytes = uint64_t(n) * sizeof(float);
  const std::vector<BufferView> views = allocateViews(context, 4, n);
  ASSERT_EQ(views.size(), 4u);
  const BufferView a = views[0], b = views[1], sum = views[2], got = views[3];
  const std::vector<PointToPoint> group = {
      receiveFrom(0, ElementType::F32, size_t(n), got.data),
      sendTo(0, ElementType::F32, size_t(n), sum.data)};
  auto runAll = [&]() -> Status {
    MLT_RETURN_IF_ERROR(
        context.launch(instruction(Kernel::Add, {n}), {a, b}, {sum}));
    MLT_RETURN_IF_ERROR(context.exchange("tp", group));
    return context.launch(instruction(Kernel::Mul, {n}), {got, b}, {a});
  };
  std::mt19937 rng(9);
  std::vector<float> hostA, hostB, result(static_cast<size_t>(n));
  auto freshInputs = [&]() {
    hostA = randomFloats(rng, n);
    hostB = randomFloats(rng, n);
    ASSERT_TRUE(context.copyToDevice(a.data, hostA.data(), bytes));
    ASSERT_TRUE(context.copyToDevice(b.data, hostB.data(), bytes));
    ASSERT_TRUE(context.fill(got, -1.0));
  };
  auto check = [&](const char *what) {
    ASSERT_TRUE(context.synchronize());
    ASSERT_TRUE(context.copyToHost(result.data(), a.data, bytes));
    for (int64_t i = 0; i < n; i += 997) {
      const size_t j = size_t(i);
      ASSERT_EQ(result[j], (hostA[j] + hostB[j]) * hostB[j])
          << what << ", element " << i;
    }
  };
  for (int round = 0; round < 2; ++round) {
    freshInputs();
    Status status = runAll();
    ASSERT_TRUE(status) << status.message();
    check("launched");
  }
  ASSERT_TRUE(context.beginCapture());
  Status captured = runAll();
  ASSERT_TRUE(captured) << captured.message();
  StatusOr<size_t> graph = context.endCapture();
  ASSERT_TRUE(graph) << graph.status().message();
  for (int round = 0; round < 2; ++round) {
    freshInputs();
    ASSERT_TRUE(context.replay(*graph));
    check("replayed");
  }
  Status launched =
      context.launch(instruction(Kernel::Send, {n, 0, 1}), {sum}, {});
  ASSERT_FALSE(launched);
  EXPECT_EQ(launched.message(), "send runs in a transfer group "
                                "(DeviceContext::exchange), not as a launch");
  ASSERT_TRUE(context.synchronize());
  context.deallocate(views[0].data);

  StatusOr<std::unique_ptr<DeviceContext>> plain =
      backend.createContext(RankInfo{0, 1, nullptr});
  ASSERT_TRUE(plain);
  StatusOr<uint8_t *> small = (*plain)->allocate(512);
  ASSERT_TRUE(small);
  Status status =
      (*plain)->exchange("tp", {sendTo(0, ElementType::F32, 4, *small)});
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("mpirun -np N"), std::string::npos)
      << status.message();
  (*plain)->deallocate(*small);
}

// Tests the CUDA contexts' transfer groups between GPUs, as the executor
// runs a pipeline's: one thread per GPU (up to 8) over a line "pp=G", each
// rank adding its inputs, exchanging the sum with both neighbours in one
// group on the compute stream, and multiplying what it received; launched,
// then captured as a CUDA graph on every rank and replayed on new inputs.
TEST(NcclExchangeTest, ContextExchangesBetweenGpus) {
  const int gpus = std::min(deviceCount(), 8);
  if (gpus < 2)
    GTEST_SKIP() << "needs 2 CUDA devices, " << gpus << " visible";
  const std::string mesh = "pp=" + std::to_string(gpus);
  StatusOr<NcclUniqueId> id = createNcclUniqueId();
  ASSERT_TRUE(id) << id.status().message();
  std::unique_ptr<Backend> backend = createCudaBackend();
  const int64_t n = int64_t(1) << 20;
  const uint64_t bytes = uint64_t(n) * sizeof(float);
  std::vector<std::string> failures(static_cast<size_t>(gpus));
  std::vector<std::unique_ptr<CudaCommunicator>> comms(
      static_cast<size_t>(gpus));
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r)
    threads.emplace_back([&, r] {
      auto fail = [&](const std::string &what) {
        if (failures[size_t(r)].empty())
          failures[size_t(r)] = what;
      };
      comms[size_t(r)] = communicatorFor(mesh, r, r, *id);
      if (!comms[size_t(r)])
        return fail("communicator");
      StatusOr<std::unique_ptr<DeviceContext>> created = backend->createContext(
          RankInfo{uint32_t(r), uint32_t(gpus), comms[size_t(r)].get()});
      if (!created)
        return fail(created.status().message());
      DeviceContext &context = **created;
      // a, b, their sum, and one buffer per neighbour for what it sends.
      StatusOr<uint8_t *> arena = context.allocate(5 * bytes);
      if (!arena)
        return fail(arena.status().message());
      auto view = [&](int i) {
        return BufferView{*arena + i * bytes, ElementType::F32, n};
      };
      const BufferView a = view(0), b = view(1), sum = view(2);
      const BufferView fromPrevious = view(3), fromNext = view(4);
      std::vector<PointToPoint> group;
      if (r > 0)
        group.push_back(sendTo(r - 1, ElementType::F32, size_t(n), sum.data));
      if (r + 1 < gpus)
        group.push_back(
            receiveFrom(r + 1, ElementType::F32, size_t(n), fromNext.data));
      if (r + 1 < gpus)
        group.push_back(sendTo(r + 1, ElementType::F32, size_t(n), sum.data));
      if (r > 0)
        group.push_back(
            receiveFrom(r - 1, ElementType::F32, size_t(n), fromPrevious.data));
      // What rank q's a and b are in round `round`: small integers, exact.
      auto input = [&](int q, int round, int which, int64_t i) {
        return float((q + 1) * (which + 1) + round + int(i % 13));
      };
      auto runAll = [&]() -> Status {
        MLT_RETURN_IF_ERROR(
            context.launch(instruction(Kernel::Add, {n}), {a, b}, {sum}));
        MLT_RETURN_IF_ERROR(context.exchange("pp", group));
        if (r > 0)
          MLT_RETURN_IF_ERROR(context.launch(instruction(Kernel::Mul, {n}),
                                             {fromPrevious, b}, {a}));
        return Status::ok();
      };
      std::vector<float> host(static_cast<size_t>(n));
      auto round = [&](int k, bool replay, size_t graph) -> bool {
        for (int which = 0; which < 2; ++which) {
          for (int64_t i = 0; i < n; ++i)
            host[size_t(i)] = input(r, k, which, i);
          if (!context.copyToDevice(which ? b.data : a.data, host.data(),
                                    bytes))
            return false;
        }
        Status status = replay ? context.replay(graph) : runAll();
        if (status)
          status = context.synchronize();
        if (!status) {
          fail(status.message());
          return false;
        }
        for (const auto &[from, view] :
             {std::pair(r - 1, fromPrevious), std::pair(r + 1, fromNext)}) {
          if (from < 0 || from >= gpus)
            continue;
          if (!context.copyToHost(host.data(), view.data, bytes))
            return false;
          for (int64_t i = 0; i < n; i += 101)
            if (host[size_t(i)] !=
                input(from, k, 0, i) + input(from, k, 1, i)) {
              fail("round " + std::to_string(k) + ": from rank " +
                   std::to_string(from) + ", element " + std::to_string(i));
              return false;
            }
        }
        if (r > 0) {
          if (!context.copyToHost(host.data(), a.data, bytes))
            return false;
          for (int64_t i = 0; i < n; i += 101)
            if (host[size_t(i)] !=
                (input(r - 1, k, 0, i) + input(r - 1, k, 1, i)) *
                    input(r, k, 1, i)) {
              fail("round " + std::to_string(k) + ": product, element " +
                   std::to_string(i));
              return false;
            }
        }
        return true;
      };
      bool ok = round(0, false, 0) && round(1, false, 0);
      if (ok) {
        Status begun = context.beginCapture();
        Status captured = begun ? runAll() : begun;
        StatusOr<size_t> graph =
            captured ? context.endCapture() : StatusOr<size_t>(captured);
        if (!graph) {
          context.abortCapture();
          fail("capture: " + graph.status().message());
          ok = false;
        } else {
          ok = round(2, true, *graph) && round(3, true, *graph);
        }
      }
      if (!ok)
        fail("a copy failed");
      (void)context.synchronize();
      context.deallocate(*arena);
    });
  for (std::thread &thread : threads)
    thread.join();
  for (int r = 0; r < gpus; ++r)
    EXPECT_EQ(failures[size_t(r)], "") << "rank " << r << " of mesh " << mesh;
  threads.clear();
  for (int r = 0; r < gpus; ++r)
    threads.emplace_back([&, r] { comms[size_t(r)].reset(); });
  for (std::thread &thread : threads)
    thread.join();
}

} // namespace
