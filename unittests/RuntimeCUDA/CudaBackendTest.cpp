//===- CudaBackendTest.cpp - the CUDA backend's checks and context --------===//
//
// Part of mlt. What the CUDA backend decides before touching a device (runs
// everywhere: the device probe's error without a GPU, checkSupported's
// messages), and its device context on a GPU: the zeroed arena, copies,
// fill, launches through the Kernel switch, and the errors kernels report,
// which surface at synchronize as one line naming the kernel.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

#include "mlt/Plan/SequenceOrder.h"
#include "mlt/Runtime/cuda/CudaBackend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace mlt;
using namespace mlt::rt;

namespace {

bool haveDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/// A one-program rank whose buffers are `dtypes` (named b0, b1, ...).
RankPlan rankWith(const std::vector<ElementType> &dtypes,
                  const InstructionDesc &inst) {
  RankPlan rank;
  uint64_t offset = 0;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    BufferDesc buffer;
    buffer.name = "b" + std::to_string(i);
    buffer.dtype = dtypes[i];
    buffer.shape = {4};
    buffer.offset = offset;
    buffer.bytes = 4 * elementSize(dtypes[i]);
    offset += 256;
    rank.buffers.push_back(buffer);
  }
  rank.arenaBytes = offset;
  rank.programs.push_back(ProgramDesc{"p", {inst}});
  return rank;
}

InstructionDesc instruction(Kernel kernel, std::vector<uint32_t> inputs,
                            std::vector<uint32_t> outputs,
                            std::vector<int64_t> ints) {
  InstructionDesc inst;
  inst.kernel = kernel;
  inst.inputs = std::move(inputs);
  inst.outputs = std::move(outputs);
  inst.ints = std::move(ints);
  return inst;
}

TEST(CudaBackendTest, ProbeNamesTheMissingDevice) {
  int count = -1;
  Status status = probeCudaDevices(count);
  if (haveDevice()) {
    EXPECT_TRUE(status) << status.message();
    EXPECT_GT(count, 0);
  } else {
    ASSERT_FALSE(status);
    EXPECT_EQ(count, 0);
    EXPECT_EQ(status.message().rfind("no CUDA device is visible (", 0), 0u)
        << status.message();
  }
}

TEST(CudaBackendTest, CheckSupportedNamesTheInstruction) {
  std::unique_ptr<Backend> backend = createCudaBackend();
  EXPECT_EQ(backend->name(), "cuda");
  using ET = ElementType;

  EXPECT_TRUE(backend->checkSupported(
      rankWith({ET::F32, ET::F32, ET::F32},
               instruction(Kernel::Add, {0, 1}, {2}, {4}))));

  Status status = backend->checkSupported(
      rankWith({ET::F32, ET::BF16, ET::F32},
               instruction(Kernel::Add, {0, 1}, {2}, {4})));
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "program 'p' instruction 0 (add): buffer 'b1' is bf16, but buffer "
            "'b0' is f32; an instruction computes in one float type");

  // Collectives go through NCCL (NcclCommunicatorTest.cpp).
  EXPECT_TRUE(backend->checkSupported(
      rankWith({ET::F32, ET::F32},
               instruction(Kernel::AllReduceSum, {0}, {1}, {4, 0}))));

  status = backend->checkSupported(
      rankWith({ET::I32, ET::F32}, instruction(Kernel::Cast, {0}, {1}, {4})));
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "program 'p' instruction 0 (cast): buffer 'b0' is i32; cast "
            "converts between f32, f64 and bf16");

  // Casts and the fixed f32 scalars are not held to the compute type.
  EXPECT_TRUE(backend->checkSupported(
      rankWith({ET::F32, ET::BF16}, instruction(Kernel::Cast, {0}, {1}, {4}))));
  status = backend->checkSupported(rankWith(
      {ET::F32, ET::F64}, instruction(Kernel::SumSquares, {0}, {1}, {4})));
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "program 'p' instruction 0 (sum_squares): buffer 'b1' is f64, but "
            "this operand is an f32 scalar");

  // bf16 compute (mixed precision), with f32 weight gradients; f64 is
  // CPU-only, and rms_norm_bwd's dw must be f32.
  EXPECT_TRUE(backend->checkSupported(
      rankWith({ET::BF16, ET::BF16, ET::BF16},
               instruction(Kernel::Add, {0, 1}, {2}, {4}))));
  EXPECT_TRUE(backend->checkSupported(
      rankWith({ET::BF16, ET::BF16, ET::F32},
               instruction(Kernel::MatmulAccumulate, {0, 1}, {2},
                           {1, 2, 2, 1, 0, 0, 0}))));
  status = backend->checkSupported(rankWith(
      {ET::F64, ET::F64, ET::F64}, instruction(Kernel::Add, {0, 1}, {2}, {4})));
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "program 'p' instruction 0 (add): buffer 'b0' is f64, but the CUDA "
            "backend computes in f32 and bf16 only (f64 is CPU-only)");
  status = backend->checkSupported(
      rankWith({ET::BF16, ET::BF16, ET::BF16, ET::BF16, ET::BF16},
               instruction(Kernel::RMSNormBwd, {0, 1, 2}, {3, 4}, {1, 4})));
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "program 'p' instruction 0 (rms_norm_bwd): buffer 'b4' is bf16; "
            "the CUDA backend writes this weight gradient in f32");
}

TEST(CudaBackendTest, ContextsNeedDevices) {
  std::unique_ptr<Backend> backend = createCudaBackend();
  if (!haveDevice()) {
    StatusOr<std::unique_ptr<DeviceContext>> context =
        backend->createContext(RankInfo{0, 1, nullptr});
    ASSERT_FALSE(context);
    EXPECT_EQ(
        context.status().message().rfind("no CUDA device is visible (", 0), 0u)
        << context.status().message();
    return;
  }
  int count = 0;
  ASSERT_TRUE(probeCudaDevices(count));
  StatusOr<std::unique_ptr<DeviceContext>> context =
      backend->createContext(RankInfo{0, uint32_t(count + 1), nullptr});
  ASSERT_FALSE(context);
  EXPECT_EQ(context.status().message(),
            "the plan has " + std::to_string(count + 1) + " ranks but only " +
                std::to_string(count) +
                (count == 1 ? " CUDA device is" : " CUDA devices are") +
                " visible");
}

/// A context of a single rank, and an arena of `bytes`.
struct Fixture {
  std::unique_ptr<Backend> backend = createCudaBackend();
  std::unique_ptr<DeviceContext> context;
  uint8_t *arena = nullptr;

  explicit Fixture(uint64_t bytes) {
    StatusOr<std::unique_ptr<DeviceContext>> created =
        backend->createContext(RankInfo{0, 1, nullptr});
    if (!created) {
      ADD_FAILURE() << created.status().message();
      return;
    }
    context = std::move(*created);
    StatusOr<uint8_t *> memory = context->allocate(bytes);
    if (!memory) {
      ADD_FAILURE() << memory.status().message();
      return;
    }
    arena = *memory;
  }
  ~Fixture() {
    if (arena)
      context->deallocate(arena);
  }
  BufferView view(uint64_t offset, ElementType dtype, int64_t n) const {
    return BufferView{arena + offset, dtype, n};
  }
  template <typename T> std::vector<T> read(const BufferView &view) {
    std::vector<T> host(view.numElements);
    EXPECT_TRUE(context->synchronize());
    EXPECT_TRUE(context->copyToHost(host.data(), view.data, view.bytes()));
    return host;
  }
  template <typename T>
  void write(const BufferView &view, const std::vector<T> &host) {
    ASSERT_EQ(host.size() * sizeof(T), view.bytes());
    ASSERT_TRUE(context->copyToDevice(view.data, host.data(), view.bytes()));
  }
};

TEST(CudaBackendTest, ArenaLargerThanTheFreeMemoryIsPredicted) {
  MLT_REQUIRE_CUDA();
  std::unique_ptr<Backend> backend = createCudaBackend();
  StatusOr<std::unique_ptr<DeviceContext>> context =
      backend->createContext(RankInfo{0, 1, nullptr});
  ASSERT_TRUE(context) << context.status().message();
  size_t freeBytes = 0, totalBytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&freeBytes, &totalBytes), cudaSuccess);
  // Twice the whole device: refused from the numbers, before any cudaMalloc.
  StatusOr<uint8_t *> memory = (*context)->allocate(2 * uint64_t(totalBytes));
  ASSERT_FALSE(memory);
  const std::string &message = memory.status().message();
  EXPECT_EQ(message.rfind("out of memory: the plan needs ", 0), 0u) << message;
  EXPECT_NE(message.find(std::to_string(2 * uint64_t(totalBytes)) +
                         " bytes, its peak) on CUDA device 0, which has "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(" GiB free of "), std::string::npos) << message;
}

TEST(CudaBackendTest, ArenaCopiesFillAndLaunch) {
  MLT_REQUIRE_CUDA();
  Fixture f(1 << 16);
  ASSERT_TRUE(f.arena);
  const BufferView a = f.view(0, ElementType::F32, 5);
  const BufferView b = f.view(256, ElementType::F32, 5);
  const BufferView c = f.view(512, ElementType::F32, 5);
  const BufferView h = f.view(768, ElementType::BF16, 5);
  EXPECT_EQ(f.read<float>(a), std::vector<float>(5, 0.0f)); // zeroed arena

  f.write<float>(a, {1, 2, 3, 4, 5});
  ASSERT_TRUE(f.context->fill(b, 0.5));
  ASSERT_TRUE(
      f.context->launch(instruction(Kernel::Add, {}, {}, {5}), {a, b}, {c}));
  EXPECT_EQ(f.read<float>(c), (std::vector<float>{1.5, 2.5, 3.5, 4.5, 5.5}));
  ASSERT_TRUE(
      f.context->launch(instruction(Kernel::Cast, {}, {}, {5}), {c}, {h}));
  EXPECT_EQ(f.read<uint16_t>(h)[0], 0x3FC0); // 1.5 in bf16
}

// Tests reorder_sequence on the GPU against the order SequenceOrder.h
// gives: a sequence of 2 x 3 chunks of 2 rows (outer 2, inner 3, bf16),
// to the natural order and back.
TEST(CudaBackendTest, ReorderSequenceMovesWholeChunks) {
  MLT_REQUIRE_CUDA();
  Fixture f(1 << 16);
  ASSERT_TRUE(f.arena);
  const int64_t outer = 2, ranks = 3, chunk = 2, inner = 3;
  const int64_t rows = 2 * ranks * chunk, n = outer * rows * inner;
  const BufferView x = f.view(0, ElementType::BF16, n);
  const BufferView y = f.view(1024, ElementType::BF16, n);
  const BufferView z = f.view(2048, ElementType::BF16, n);
  std::vector<uint16_t> balanced(static_cast<size_t>(n)),
      natural(static_cast<size_t>(n));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t position = loadBalancedPosition(r, chunk, ranks);
        const uint16_t value = uint16_t(1000 * o + 10 * position + i);
        balanced[size_t((o * rows + r) * inner + i)] = value;
        natural[size_t((o * rows + position) * inner + i)] = value;
      }
  f.write<uint16_t>(x, balanced);
  ASSERT_TRUE(f.context->launch(
      instruction(Kernel::ReorderSequence, {}, {}, {outer, ranks, chunk, inner, 1}),
      {x}, {y}));
  EXPECT_EQ(f.read<uint16_t>(y), natural);
  ASSERT_TRUE(f.context->launch(
      instruction(Kernel::ReorderSequence, {}, {}, {outer, ranks, chunk, inner, 0}),
      {y}, {z}));
  EXPECT_EQ(f.read<uint16_t>(z), balanced);
}

// Tests that every arena starts zeroed, also in memory that a previous
// arena left dirty (cudaMalloc hands freed memory back as it was): the
// padding of flat buffers is never written by kernels and must read zero.
TEST(CudaBackendTest, ArenaStartsZeroedOverDirtyMemory) {
  MLT_REQUIRE_CUDA();
  const uint64_t bytes = 1 << 20;
  const int64_t floats = int64_t(bytes / sizeof(float));
  Fixture f(bytes);
  ASSERT_TRUE(f.arena);
  ASSERT_TRUE(f.context->fill(f.view(0, ElementType::F32, floats), 7.0));
  ASSERT_TRUE(f.context->synchronize());
  f.context->deallocate(f.arena);
  f.arena = nullptr;
  StatusOr<uint8_t *> again = f.context->allocate(bytes);
  ASSERT_TRUE(again) << again.status().message();
  f.arena = *again;
  EXPECT_EQ(f.read<float>(f.view(0, ElementType::F32, floats)),
            std::vector<float>(size_t(floats), 0.0f));
}

TEST(CudaBackendTest, GradientNormThroughTheSwitch) {
  MLT_REQUIRE_CUDA();
  Fixture f(1 << 16);
  ASSERT_TRUE(f.arena);
  const BufferView x = f.view(0, ElementType::F32, 3);
  const BufferView y = f.view(256, ElementType::F32, 2);
  const BufferView sx = f.view(512, ElementType::F32, 1);
  const BufferView sy = f.view(768, ElementType::F32, 1);
  const BufferView norm = f.view(1024, ElementType::F32, 1);
  const BufferView max = f.view(1280, ElementType::F32, 1);
  const BufferView clip = f.view(1536, ElementType::F32, 1);
  f.write<float>(x, {1, 2, 2});
  f.write<float>(y, {4, 12});
  f.write<float>(max, {1.0f});
  ASSERT_TRUE(f.context->launch(instruction(Kernel::SumSquares, {}, {}, {3}),
                                {x}, {sx}));
  ASSERT_TRUE(f.context->launch(instruction(Kernel::SumSquares, {}, {}, {2}),
                                {y}, {sy}));
  ASSERT_TRUE(f.context->launch(instruction(Kernel::GlobalNorm, {}, {}, {}),
                                {sx, sy}, {norm}));
  ASSERT_TRUE(f.context->launch(
      instruction(Kernel::ClipCoefficient, {}, {}, {}), {norm, max}, {clip}));
  EXPECT_EQ(f.read<float>(norm)[0], 13.0f); // sqrt(9 + 160)
  EXPECT_EQ(f.read<float>(clip)[0], 1.0f / (13.0f + 1e-6f));
}

TEST(CudaBackendTest, KernelErrorsSurfaceAtSynchronize) {
  MLT_REQUIRE_CUDA();
  Fixture f(1 << 16);
  ASSERT_TRUE(f.arena);
  const BufferView ids = f.view(0, ElementType::I32, 4);
  const BufferView table = f.view(256, ElementType::F32, 8 * 2);
  const BufferView out = f.view(512, ElementType::F32, 4 * 2);
  f.write<int32_t>(ids, {1, 7, 300, 9});
  ASSERT_TRUE(
      f.context->launch(instruction(Kernel::EmbeddingFwd, {}, {}, {4, 8, 2}),
                        {ids, table}, {out}));
  Status status = f.context->synchronize();
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "embedding_fwd: token id 300 at position 2 is "
                              "outside the vocabulary [0, 8)");
  EXPECT_TRUE(f.context->synchronize()); // reported once

  // AdamW with step 0: grad, grad_scale, lr, beta1, beta2, eps, wd, step.
  std::vector<BufferView> inputs = {f.view(1024, ElementType::F32, 4)};
  const float scalars[] = {1.0f, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f};
  for (int i = 0; i < 7; ++i) {
    inputs.push_back(f.view(2048 + 256 * i, ElementType::F32, 1));
    f.write<float>(inputs.back(), {scalars[i]});
  }
  std::vector<BufferView> outputs = {f.view(4096, ElementType::F32, 4),
                                     f.view(4352, ElementType::F32, 4),
                                     f.view(4608, ElementType::F32, 4)};
  ASSERT_TRUE(f.context->launch(instruction(Kernel::AdamW, {}, {}, {4, 1}),
                                inputs, outputs));
  status = f.context->synchronize();
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "adamw: step 0 is not a positive step number");
}

// Capture and replay (CUDA graphs): captured launches do not run until
// replayed, each replay runs them again on the buffers' current contents,
// and a kernel in a replayed graph that reports an error is named as if it
// had been launched directly.
TEST(CudaBackendTest, CapturedLaunchesReplay) {
  MLT_REQUIRE_CUDA();
  Fixture f(1 << 16);
  ASSERT_TRUE(f.arena);
  if (!f.context->canCapture())
    GTEST_SKIP() << "graphs are off (MLT_CUDA_GRAPHS=0)";
  const BufferView x = f.view(0, ElementType::F32, 4);
  const BufferView y = f.view(256, ElementType::F32, 4);
  const BufferView ids = f.view(512, ElementType::I32, 2);
  const BufferView table = f.view(768, ElementType::F32, 3 * 4);
  const BufferView rows = f.view(1024, ElementType::F32, 2 * 4);
  f.write<float>(x, {1, 2, 3, 4});
  f.write<int32_t>(ids, {2, 0});
  f.write<float>(table, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});

  ASSERT_TRUE(f.context->beginCapture());
  ASSERT_TRUE(f.context->launch(instruction(Kernel::Accumulate, {}, {}, {4}),
                                {x}, {y}));
  ASSERT_TRUE(
      f.context->launch(instruction(Kernel::EmbeddingFwd, {}, {}, {2, 3, 4}),
                        {ids, table}, {rows}));
  StatusOr<size_t> graph = f.context->endCapture();
  ASSERT_TRUE(graph) << graph.status().message();
  EXPECT_EQ(f.read<float>(y), std::vector<float>(4, 0.0f)); // not run yet

  for (int replay = 1; replay <= 3; ++replay) {
    ASSERT_TRUE(f.context->replay(*graph));
    EXPECT_EQ(f.read<float>(y),
              (std::vector<float>{1.0f * replay, 2.0f * replay, 3.0f * replay,
                                  4.0f * replay}));
  }
  EXPECT_EQ(f.read<float>(rows),
            (std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3}));

  // A bad id in a replay is reported with its kernel, once.
  f.write<int32_t>(ids, {1, 5});
  ASSERT_TRUE(f.context->replay(*graph));
  Status status = f.context->synchronize();
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "embedding_fwd: token id 5 at position 1 is "
                              "outside the vocabulary [0, 3)");
  EXPECT_TRUE(f.context->synchronize());

  // A capture that cannot be completed is dropped, and launches run again.
  ASSERT_TRUE(f.context->beginCapture());
  f.context->abortCapture();
  ASSERT_TRUE(f.context->launch(instruction(Kernel::Accumulate, {}, {}, {4}),
                                {x}, {y}));
  EXPECT_EQ(f.read<float>(y)[0], 5.0f);
}

} // namespace
