//===- ExecutorTest.cpp - the executor and the CPU backend ----------------===//
//
// Part of mlt. Every kernel of Kernels.def run through a one-instruction plan
// and compared with a direct call of the mlt::cpu kernel (or a plain loop),
// with outputs pre-filled with garbage to check what is overwritten; then
// the tiny training plan of PlanTestUtil.h: its gradients against finite
// differences of an independent double-precision model, and its optimizer
// step against the AdamW kernel applied by hand.
//
//===----------------------------------------------------------------------===//

#include "PlanTestUtil.h"

#include "mlt/Runtime/exec/Backend.h"
#include "mlt/Runtime/exec/Executor.h"
#include "mlt/Runtime/cpu/Kernels.h"
#include "mlt/Runtime/cpu/VectorOps.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <random>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::testing;
using ::testing::HasSubstr;

namespace {

/// Float tolerance of the executor against direct kernel calls that do the
/// same arithmetic: only the order of BLAS sums may differ.
constexpr double kSameTol = 1e-6;

/// A buffer of a one-instruction plan and its initial contents.
struct Operand {
  std::vector<int64_t> shape;
  ElementType dtype = ElementType::F32;
  /// Initial values for float buffers; empty: garbage (7.0) so that a kernel
  /// that should overwrite its output but does not is caught.
  std::vector<float> values;
  /// Initial values for i32 buffers.
  std::vector<int32_t> ids;
};

Operand f32(std::vector<int64_t> shape, std::vector<float> values = {}) {
  return Operand{std::move(shape), ElementType::F32, std::move(values), {}};
}
Operand i32(std::vector<int64_t> shape, std::vector<int32_t> ids) {
  return Operand{std::move(shape), ElementType::I32, {}, std::move(ids)};
}

std::vector<float> randomFloats(std::mt19937 &rng, int64_t n, float lo = -1,
                                float hi = 1) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(n);
  for (float &v : values)
    v = dist(rng);
  return values;
}

std::vector<int32_t> randomIds(std::mt19937 &rng, int64_t n, int32_t vocab) {
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (int32_t &id : ids)
    id = dist(rng);
  return ids;
}

/// Runs one instruction on fresh buffers; returns every operand's final
/// contents as floats (inputs, then outputs), or the error.
StatusOr<std::vector<std::vector<float>>>
runOne(Kernel kernel, const std::vector<Operand> &ins,
       const std::vector<Operand> &outs, std::vector<int64_t> ints,
       std::vector<double> floats = {}) {
  PlanBuilder b;
  std::vector<uint32_t> inIdx, outIdx;
  std::vector<Operand> all(ins);
  all.insert(all.end(), outs.begin(), outs.end());
  for (size_t i = 0; i < all.size(); ++i) {
    uint32_t index =
        b.temp("b" + std::to_string(i), all[i].shape, all[i].dtype);
    (i < ins.size() ? inIdx : outIdx).push_back(index);
  }
  b.launch("p", kernel, inIdx, outIdx, std::move(ints), std::move(floats));
  Plan plan = b.plan();
  std::unique_ptr<Backend> backend = createCpuBackend();
  StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(plan, 0, *backend);
  if (!executor)
    return executor.takeStatus();
  Executor &exec = **executor;
  for (size_t i = 0; i < all.size(); ++i) {
    const Operand &op = all[i];
    const BufferDesc &buffer = exec.buffer(i);
    if (op.dtype == ElementType::I32) {
      MLT_RETURN_IF_ERROR(
          exec.writeRaw(i, op.ids.data(), op.ids.size() * sizeof(int32_t)));
    } else {
      std::vector<float> values = op.values;
      if (values.empty())
        values.assign(buffer.numElements(), 7.0f);
      MLT_RETURN_IF_ERROR(
          exec.writeFloats(i, values.data(), int64_t(values.size())));
    }
  }
  MLT_RETURN_IF_ERROR(exec.run("p"));
  std::vector<std::vector<float>> result;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].dtype == ElementType::I32) {
      std::vector<int32_t> ids(exec.buffer(i).numElements());
      MLT_RETURN_IF_ERROR(
          exec.readRaw(i, ids.data(), ids.size() * sizeof(int32_t)));
      result.emplace_back(ids.begin(), ids.end());
    } else {
      StatusOr<std::vector<float>> values = exec.readFloats(i);
      if (!values)
        return values.takeStatus();
      result.push_back(*values);
    }
  }
  return result;
}

#define ASSERT_RUN(var, expr)                                                  \
  auto var = (expr);                                                           \
  ASSERT_TRUE(var) << var.status().message()

//===----------------------------------------------------------------------===//
// One kernel at a time
//===----------------------------------------------------------------------===//

// Tests embedding_fwd (a gather) and embedding_bwd (overwrite, then
// scatter-add with repeated ids).
TEST(CpuBackendTest, Embedding) {
  std::mt19937 rng(1);
  const int64_t T = 10, V = 5, H = 3;
  std::vector<int32_t> ids = randomIds(rng, T, V);
  ids[3] = ids[7]; // a repeated id accumulates
  std::vector<float> table = randomFloats(rng, V * H);
  ASSERT_RUN(fwd,
             runOne(Kernel::EmbeddingFwd, {i32({T}, ids), f32({V, H}, table)},
                    {f32({T, H})}, {T, V, H}));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < H; ++j)
      EXPECT_EQ((*fwd)[2][t * H + j], table[ids[t] * H + j]);

  std::vector<float> dout = randomFloats(rng, T * H);
  ASSERT_RUN(bwd,
             runOne(Kernel::EmbeddingBwd, {i32({T}, ids), f32({T, H}, dout)},
                    {f32({V, H})}, {T, V, H}));
  std::vector<float> expected(V * H, 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < H; ++j)
      expected[ids[t] * H + j] += dout[t * H + j];
  EXPECT_LT(relDiff((*bwd)[2], expected), kSameTol);
}

// Tests matmul (c overwritten), matmul_accumulate (c += ...) and matmul_add
// (c = ... + addend) for every combination of transposes and batched/shared
// B against plain loops.
TEST(CpuBackendTest, Matmul) {
  std::mt19937 rng(2);
  const int64_t batch = 3, m = 4, n = 5, k = 6;
  for (Kernel kernel :
       {Kernel::Matmul, Kernel::MatmulAccumulate, Kernel::MatmulAdd}) {
    const bool accumulate = kernel == Kernel::MatmulAccumulate;
    const bool add = kernel == Kernel::MatmulAdd;
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (int bb = 0; bb < 2; ++bb) {
          // matmul_accumulate adds into c's random contents; matmul_add adds
          // the addend and overwrites c.
          std::vector<float> c = randomFloats(rng, batch * m * n);
          std::vector<float> addend = randomFloats(rng, batch * m * n);
          std::vector<float> a = randomFloats(rng, batch * m * k);
          std::vector<float> b = randomFloats(rng, (bb ? batch : 1) * k * n);
          std::vector<int64_t> aShape = ta ? std::vector<int64_t>{batch, k, m}
                                           : std::vector<int64_t>{batch, m, k};
          std::vector<int64_t> bShape =
              tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
          if (bb)
            bShape.insert(bShape.begin(), batch);
          std::vector<Operand> inputs = {f32(aShape, a), f32(bShape, b)};
          if (add)
            inputs.push_back(f32({batch, m, n}, addend));
          ASSERT_RUN(r, runOne(kernel, inputs, {f32({batch, m, n}, c)},
                               {batch, m, n, k, ta, tb, bb}));
          std::vector<double> expected(batch * m * n, 0.0);
          for (int64_t e = 0; e < batch; ++e)
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                double sum = 0;
                for (int64_t p = 0; p < k; ++p) {
                  double av =
                      ta ? a[e * m * k + p * m + i] : a[e * m * k + i * k + p];
                  const float *bm = b.data() + (bb ? e * k * n : 0);
                  double bv = tb ? bm[j * k + p] : bm[p * n + j];
                  sum += av * bv;
                }
                expected[e * m * n + i * n + j] =
                    sum + (accumulate ? c[e * m * n + i * n + j] : 0.0) +
                    (add ? addend[e * m * n + i * n + j] : 0.0);
              }
          EXPECT_LT(relDiff((*r)[inputs.size()], expected), 1e-6)
              << kernelName(kernel) << " ta " << ta << " tb " << tb << " bb "
              << bb;
        }
      }
    }
  }
}

// Tests that matmul_group computes each of its products as matmul (and, with
// accumulate 1, matmul_accumulate) does, bit for bit, at transposes, shared
// and batched b, and that a group with a inputs missing is refused.
TEST(CpuBackendTest, MatmulGroupIsItsProducts) {
  std::mt19937 rng(12);
  const int64_t batch = 2, m = 4, n = 5, k = 6, groups = 3;
  for (int accumulate = 0; accumulate < 2; ++accumulate)
    for (int ta = 0; ta < 2; ++ta)
      for (int bb = 0; bb < 2; ++bb) {
        const std::vector<int64_t> ints = {batch, m, n, k, ta, 1, bb};
        std::vector<int64_t> groupInts = ints;
        groupInts.push_back(accumulate);
        const std::vector<int64_t> aShape =
            ta ? std::vector<int64_t>{batch, k, m}
               : std::vector<int64_t>{batch, m, k};
        const std::vector<int64_t> bShape =
            bb ? std::vector<int64_t>{batch, n, k} : std::vector<int64_t>{n, k};
        std::vector<Operand> as, bs, cs;
        for (int64_t g = 0; g < groups; ++g) {
          as.push_back(f32(aShape, randomFloats(rng, batch * m * k)));
          bs.push_back(
              f32(bShape, randomFloats(rng, (bb ? batch : 1) * k * n)));
          cs.push_back(f32({batch, m, n}, randomFloats(rng, batch * m * n)));
        }
        std::vector<Operand> inputs = as;
        inputs.insert(inputs.end(), bs.begin(), bs.end());
        ASSERT_RUN(group, runOne(Kernel::MatmulGroup, inputs, cs, groupInts));
        for (int64_t g = 0; g < groups; ++g) {
          ASSERT_RUN(one, runOne(accumulate ? Kernel::MatmulAccumulate
                                            : Kernel::Matmul,
                                 {as[g], bs[g]}, {cs[g]}, ints));
          EXPECT_EQ((*group)[2 * groups + g], (*one)[2])
              << "product " << g << " accumulate " << accumulate << " ta " << ta
              << " bb " << bb;
        }
      }
  auto bad =
      runOne(Kernel::MatmulGroup, {f32({4, 6}), f32({6, 5}), f32({6, 5})},
             {f32({4, 5}), f32({4, 5})}, {1, 4, 5, 6, 0, 0, 0, 0});
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("2 G inputs"), std::string::npos)
      << bad.status().message();
}

// Tests that a group whose result is another member's operand is refused
// (its products run as one launch on the GPU).
TEST(CpuBackendTest, MatmulGroupRefusesAResultAmongItsOperands) {
  PlanBuilder b;
  const uint32_t a0 = b.temp("a0", {4, 6}, ElementType::F32),
                 a1 = b.temp("a1", {4, 6}, ElementType::F32),
                 w = b.temp("w", {6, 6}, ElementType::F32);
  // Product 0 writes a1, which product 1 reads.
  b.launch("p", Kernel::MatmulGroup, {a0, a1, w, w}, {a1, a0},
           {1, 4, 6, 6, 0, 0, 0, 0}, {});
  Plan plan = b.plan();
  std::unique_ptr<Backend> backend = createCpuBackend();
  StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(plan, 0, *backend);
  Status status = executor ? (*executor)->run("p") : executor.takeStatus();
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("is also an operand"), std::string::npos)
      << status.message();
}

// Tests rms_norm_fwd, that rms_norm_bwd overwrites dw (not accumulates)
// with the rstd recomputed as the forward computes it, and rms_norm_bwd_add.
TEST(CpuBackendTest, RMSNorm) {
  std::mt19937 rng(3);
  const int64_t rows = 6, dim = 8;
  const double eps = 1e-5;
  std::vector<float> x = randomFloats(rng, rows * dim);
  std::vector<float> w = randomFloats(rng, dim, 0.5f, 1.5f);
  std::vector<float> dy = randomFloats(rng, rows * dim);

  std::vector<float> y(rows * dim), rstd(rows);
  cpu::rmsnormForward(y.data(), rstd.data(), x.data(), w.data(), rows, dim,
                      eps);
  ASSERT_RUN(fwd,
             runOne(Kernel::RMSNormFwd, {f32({rows, dim}, x), f32({dim}, w)},
                    {f32({rows, dim})}, {rows, dim}, {eps}));
  EXPECT_EQ((*fwd)[2], y);

  std::vector<float> dx(rows * dim), dw(dim, 0.0f);
  cpu::rmsnormBackward(dx.data(), dw.data(), dy.data(), x.data(), w.data(),
                       rstd.data(), rows, dim);
  ASSERT_RUN(bwd,
             runOne(Kernel::RMSNormBwd,
                    {f32({rows, dim}, dy), f32({rows, dim}, x), f32({dim}, w)},
                    {f32({rows, dim}), f32({dim})}, {rows, dim}, {eps}));
  EXPECT_EQ((*bwd)[3], dx);
  EXPECT_EQ((*bwd)[4], dw);

  // rms_norm_bwd_add: dx plus the addend (the residual gradient), dw as is.
  std::vector<float> addend = randomFloats(rng, rows * dim);
  ASSERT_RUN(add, runOne(Kernel::RMSNormBwdAdd,
                         {f32({rows, dim}, dy), f32({rows, dim}, x),
                          f32({dim}, w), f32({rows, dim}, addend)},
                         {f32({rows, dim}), f32({dim})}, {rows, dim}, {eps}));
  std::vector<float> sum(rows * dim);
  for (int64_t i = 0; i < rows * dim; ++i)
    sum[i] = dx[i] + addend[i];
  EXPECT_EQ((*add)[4], sum);
  EXPECT_EQ((*add)[5], dw);
}

// Tests rope forward and inverse (the backward) with a position offset,
// unscaled and with llama3 scaling (the attributes reach the kernel).
TEST(CpuBackendTest, Rope) {
  std::mt19937 rng(4);
  const int64_t B = 2, S = 5, Hd = 3, D = 8, offset = 7;
  const double theta = 10000.0;
  std::vector<float> x = randomFloats(rng, B * S * Hd * D);
  std::vector<std::vector<float>> forwards;
  for (const rt::RopeScaling &scaling :
       {rt::RopeScaling(), rt::RopeScaling::llama3(8.0, 1.0, 4.0, 32)}) {
    for (int inverse = 0; inverse < 2; ++inverse) {
      std::vector<float> expected(x.size());
      if (inverse)
        ASSERT_TRUE(cpu::ropeBackward(expected.data(), x.data(), B, S, Hd, D,
                                      theta, offset, scaling));
      else
        ASSERT_TRUE(cpu::ropeForward(expected.data(), x.data(), B, S, Hd, D,
                                     theta, offset, scaling));
      ASSERT_RUN(r, runOne(Kernel::Rope, {f32({B, S, Hd, D}, x)},
                           {f32({B, S, Hd, D})},
                           {B, S, Hd, D, inverse, offset, int64_t(scaling.kind),
                            scaling.originalMaxPositionEmbeddings, -1},
                           {theta, scaling.factor, scaling.lowFreqFactor,
                            scaling.highFreqFactor}));
      EXPECT_EQ((*r)[1], expected)
          << "inverse " << inverse << " scaled " << scaling.isScaled();
      if (!inverse)
        forwards.push_back(expected);
    }
  }
  // The scaling changes the rotation (all but the highest frequency here).
  EXPECT_NE(forwards[0], forwards[1]);
}

// Tests attention_fwd (out and lse) and attention_bwd with grouped heads.
TEST(CpuBackendTest, Attention) {
  std::mt19937 rng(5);
  cpu::AttentionParams p;
  p.batch = 2;
  p.seq = 5;
  p.qHeads = 4;
  p.kvHeads = 2;
  p.headDim = 3;
  p.scale = 1.0 / std::sqrt(3.0);
  p.causal = true;
  const int64_t qn = p.batch * p.seq * p.qHeads * p.headDim;
  const int64_t kvn = p.batch * p.seq * p.kvHeads * p.headDim;
  const int64_t ln = p.batch * p.qHeads * p.seq;
  std::vector<float> q = randomFloats(rng, qn), k = randomFloats(rng, kvn),
                     v = randomFloats(rng, kvn), dout = randomFloats(rng, qn);
  std::vector<float> out(qn), lse(ln);
  ASSERT_TRUE(cpu::attentionForward(out.data(), lse.data(), q.data(), k.data(),
                                    v.data(), p));
  // No context axis (-1), no ring exchange (ring 0, ring_step 0).
  const std::vector<int64_t> ints = {
      p.batch, p.seq, p.seq, p.qHeads, p.kvHeads, p.headDim, 1, -1, 0, 0};
  const std::vector<int64_t> qs = {p.batch, p.seq, p.qHeads, p.headDim};
  const std::vector<int64_t> kvs = {p.batch, p.seq, p.kvHeads, p.headDim};
  const std::vector<int64_t> ls = {p.batch, p.qHeads, p.seq};
  ASSERT_RUN(fwd, runOne(Kernel::AttentionFwd,
                         {f32(qs, q), f32(kvs, k), f32(kvs, v)},
                         {f32(qs), f32(ls)}, ints, {p.scale}));
  EXPECT_EQ((*fwd)[3], out);
  EXPECT_EQ((*fwd)[4], lse);

  std::vector<float> dq(qn), dk(kvn), dv(kvn);
  ASSERT_TRUE(cpu::attentionBackward(dq.data(), dk.data(), dv.data(),
                                     dout.data(), q.data(), k.data(), v.data(),
                                     out.data(), lse.data(), p));
  ASSERT_RUN(bwd, runOne(Kernel::AttentionBwd,
                         {f32(qs, dout), f32(qs, q), f32(kvs, k), f32(kvs, v),
                          f32(qs, out), f32(ls, lse)},
                         {f32(qs), f32(kvs), f32(kvs)}, ints, {p.scale}));
  EXPECT_EQ((*bwd)[6], dq);
  EXPECT_EQ((*bwd)[7], dk);
  EXPECT_EQ((*bwd)[8], dv);
}

// Tests the elementwise kernels and accumulate.
TEST(CpuBackendTest, Elementwise) {
  std::mt19937 rng(6);
  const int64_t n = 17;
  std::vector<float> a = randomFloats(rng, n), b = randomFloats(rng, n),
                     c = randomFloats(rng, n);
  std::vector<float> e1(n), e2(n);

  cpu::swigluForward(e1.data(), a.data(), b.data(), n);
  ASSERT_RUN(sf, runOne(Kernel::SwiGLUFwd, {f32({n}, a), f32({n}, b)},
                        {f32({n})}, {n}));
  EXPECT_EQ((*sf)[2], e1);

  cpu::swigluBackward(e1.data(), e2.data(), c.data(), a.data(), b.data(), n);
  ASSERT_RUN(sb,
             runOne(Kernel::SwiGLUBwd, {f32({n}, c), f32({n}, a), f32({n}, b)},
                    {f32({n}), f32({n})}, {n}));
  EXPECT_EQ((*sb)[3], e1);
  EXPECT_EQ((*sb)[4], e2);

  cpu::siluForward(e1.data(), a.data(), n);
  ASSERT_RUN(lf, runOne(Kernel::SiLUFwd, {f32({n}, a)}, {f32({n})}, {n}));
  EXPECT_EQ((*lf)[1], e1);

  cpu::siluBackward(e1.data(), c.data(), a.data(), n);
  ASSERT_RUN(
      lb, runOne(Kernel::SiLUBwd, {f32({n}, c), f32({n}, a)}, {f32({n})}, {n}));
  EXPECT_EQ((*lb)[2], e1);

  ASSERT_RUN(add,
             runOne(Kernel::Add, {f32({n}, a), f32({n}, b)}, {f32({n})}, {n}));
  ASSERT_RUN(mul,
             runOne(Kernel::Mul, {f32({n}, a), f32({n}, b)}, {f32({n})}, {n}));
  ASSERT_RUN(acc,
             runOne(Kernel::Accumulate, {f32({n}, a)}, {f32({n}, c)}, {n}));
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ((*add)[2][i], a[i] + b[i]);
    EXPECT_EQ((*mul)[2][i], a[i] * b[i]);
    EXPECT_EQ((*acc)[1][i], c[i] + a[i]);
  }
}

// Tests transpose against index arithmetic, for a 3-d permutation.
TEST(CpuBackendTest, Transpose) {
  std::mt19937 rng(7);
  const int64_t d0 = 2, d1 = 3, d2 = 4;
  std::vector<float> x = randomFloats(rng, d0 * d1 * d2);
  // y[k][i][j] = x[i][j][k]: perm (2, 0, 1).
  ASSERT_RUN(r, runOne(Kernel::Transpose, {f32({d0, d1, d2}, x)},
                       {f32({d2, d0, d1})}, {3, d0, d1, d2, 2, 0, 1}));
  for (int64_t i = 0; i < d0; ++i)
    for (int64_t j = 0; j < d1; ++j)
      for (int64_t k = 0; k < d2; ++k)
        EXPECT_EQ((*r)[1][k * d0 * d1 + i * d1 + j],
                  x[i * d1 * d2 + j * d2 + k]);
}

// Tests the fused amax outputs (Kernels.def's amax): the largest magnitude of
// the output as stored, the bf16 output's after its rounding, and the other
// outputs the bits of the kernel without them.
TEST(CpuBackendTest, FusedAmaxIsTheStoredOutputsLargestMagnitude) {
  std::mt19937 rng(41);
  const int64_t n = 37;
  const std::vector<float> dy = randomFloats(rng, n, -3, 3),
                           gate = randomFloats(rng, n, -4, 4),
                           up = randomFloats(rng, n, -2, 2);
  auto largest = [](const std::vector<float> &x) {
    float best = 0.0f;
    for (float v : x)
      best = std::max(best, std::fabs(v));
    return best;
  };
  const Operand h{{n}, ElementType::BF16, {}, {}};
  const Operand in[3] = {{{n}, ElementType::BF16, dy, {}},
                         {{n}, ElementType::BF16, gate, {}},
                         {{n}, ElementType::BF16, up, {}}};
  ASSERT_RUN(plain,
             runOne(Kernel::SwiGLUBwd, {in[0], in[1], in[2]}, {h, h, h}, {n}));
  ASSERT_RUN(fused, runOne(Kernel::SwiGLUBwd, {in[0], in[1], in[2]},
                           {h, h, h, f32({}), f32({}), f32({})}, {n}));
  for (size_t o = 0; o < 3; ++o) {
    EXPECT_EQ((*fused)[3 + o], (*plain)[3 + o]) << "output " << o;
    EXPECT_EQ((*fused)[6 + o][0], largest((*plain)[3 + o])) << "amax " << o;
  }
  // dgate and dup alone (no recomputed output): two amaxes.
  ASSERT_RUN(two, runOne(Kernel::SwiGLUBwd, {in[0], in[1], in[2]},
                         {h, h, f32({}), f32({})}, {n}));
  EXPECT_EQ((*two)[5][0], largest((*plain)[3]));
  EXPECT_EQ((*two)[6][0], largest((*plain)[4]));

  // An f32 RMSNorm: rows of 8, a NaN in one row makes the amax NaN.
  std::vector<float> x = randomFloats(rng, 24, -2, 2);
  const std::vector<float> w = randomFloats(rng, 8, 0.5, 1.5);
  ASSERT_RUN(norm, runOne(Kernel::RMSNormFwd, {f32({3, 8}, x), f32({8}, w)},
                          {f32({3, 8}), f32({})}, {3, 8}, {1e-5}));
  EXPECT_EQ((*norm)[3][0], largest((*norm)[2]));
  x[9] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_RUN(nan, runOne(Kernel::RMSNormFwd, {f32({3, 8}, x), f32({8}, w)},
                         {f32({3, 8}), f32({})}, {3, 8}, {1e-5}));
  EXPECT_TRUE(std::isnan((*nan)[3][0]));
}

// Tests cast between f32, bf16 and f64.
TEST(CpuBackendTest, Cast) {
  std::mt19937 rng(8);
  const int64_t n = 9;
  std::vector<float> x = randomFloats(rng, n);
  Operand bf16{{n}, ElementType::BF16, {}, {}};
  ASSERT_RUN(down, runOne(Kernel::Cast, {f32({n}, x)}, {bf16}, {n}));
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ((*down)[1][i], bf16ToFloat(floatToBF16(x[i])));

  Operand bf16In{{n}, ElementType::BF16, x, {}};
  ASSERT_RUN(up, runOne(Kernel::Cast, {bf16In}, {f32({n})}, {n}));
  EXPECT_EQ((*up)[1], (*up)[0]);

  Operand f64{{n}, ElementType::F64, {}, {}};
  ASSERT_RUN(wide, runOne(Kernel::Cast, {f32({n}, x)}, {f64}, {n}));
  EXPECT_EQ((*wide)[1], x);
}

// Tests cross_entropy_fwd (mean over rows) and cross_entropy_bwd (scaled by
// the dloss scalar, lse recomputed).
TEST(CpuBackendTest, CrossEntropy) {
  std::mt19937 rng(9);
  const int64_t rows = 6, V = 7;
  std::vector<float> logits = randomFloats(rng, rows * V, -3, 3);
  std::vector<int32_t> labels = randomIds(rng, rows, V);
  float loss;
  std::vector<float> lse(rows);
  ASSERT_TRUE(cpu::crossEntropyForward(&loss, lse.data(), logits.data(),
                                       labels.data(), rows, V, rows));
  ASSERT_RUN(fwd, runOne(Kernel::CrossEntropyFwd,
                         {f32({rows, V}, logits), i32({rows}, labels)},
                         {f32({})}, {rows, V}));
  EXPECT_EQ((*fwd)[2][0], loss);

  std::vector<float> dlogits(rows * V);
  ASSERT_TRUE(cpu::crossEntropyBackward(dlogits.data(), logits.data(),
                                        lse.data(), labels.data(), 0.5f, rows,
                                        V, rows));
  ASSERT_RUN(bwd, runOne(Kernel::CrossEntropyBwd,
                         {f32({}, {0.5f}), f32({rows, V}, logits),
                          i32({rows}, labels)},
                         {f32({rows, V})}, {rows, V}));
  EXPECT_EQ((*bwd)[3], dlogits);
}

// Tests cross_entropy_fwd_bwd: the loss and the gradient of the separate
// kernels, with a row_count other than rows dividing both.
TEST(CpuBackendTest, CrossEntropyFwdBwd) {
  std::mt19937 rng(11);
  const int64_t rows = 6, V = 7, rowCount = 15;
  std::vector<float> logits = randomFloats(rng, rows * V, -3, 3);
  std::vector<int32_t> labels = randomIds(rng, rows, V);
  float loss;
  std::vector<float> lse(rows), dlogits(rows * V);
  ASSERT_TRUE(cpu::crossEntropyForward(&loss, lse.data(), logits.data(),
                                       labels.data(), rows, V, rowCount));
  ASSERT_TRUE(cpu::crossEntropyBackward(dlogits.data(), logits.data(),
                                        lse.data(), labels.data(), 0.25f, rows,
                                        V, rowCount));
  const std::vector<Operand> ins = {f32({}, {0.25f}), f32({rows, V}, logits),
                                    i32({rows}, labels)};
  ASSERT_RUN(fused, runOne(Kernel::CrossEntropyFwdBwd, ins,
                           {f32({}), f32({rows, V})}, {rows, V, rowCount}));
  EXPECT_EQ((*fused)[3][0], loss);
  EXPECT_EQ((*fused)[4], dlogits);
  EXPECT_NE(loss, 0.f);
}

// Tests the vocabulary-parallel cross-entropy kernels of one rank (axis -1:
// the whole vocabulary, offset 0) against direct calls: cross_entropy_stats,
// cross_entropy_combine of two row-lse parts with a row_count other than
// rows, and cross_entropy_bwd_stats from the combined lse.
TEST(CpuBackendTest, CrossEntropyStats) {
  std::mt19937 rng(10);
  const int64_t rows = 6, V = 7, rowCount = 15;
  std::vector<float> logits = randomFloats(rng, rows * V, -3, 3);
  std::vector<int32_t> labels = randomIds(rng, rows, V);
  std::vector<float> lse(rows), target(rows);
  ASSERT_TRUE(cpu::crossEntropyStats(lse.data(), target.data(), logits.data(),
                                     labels.data(), rows, V, 0, V));
  ASSERT_RUN(stats, runOne(Kernel::CrossEntropyStats,
                           {f32({rows, V}, logits), i32({rows}, labels)},
                           {f32({rows}), f32({rows})}, {rows, V, -1}));
  EXPECT_EQ((*stats)[2], lse);
  EXPECT_EQ((*stats)[3], target);

  std::vector<float> parts = randomFloats(rng, 2 * rows, -3, 3);
  std::vector<float> combinedLse(rows);
  float loss;
  ASSERT_TRUE(cpu::crossEntropyCombine(combinedLse.data(), &loss, parts.data(),
                                       target.data(), rows, 2, rowCount));
  ASSERT_RUN(combine, runOne(Kernel::CrossEntropyCombine,
                             {f32({2, rows}, parts), f32({rows}, target)},
                             {f32({rows}), f32({})}, {rows, 2, rowCount}));
  EXPECT_EQ((*combine)[2], combinedLse);
  EXPECT_EQ((*combine)[3][0], loss);

  std::vector<float> dlogits(rows * V);
  ASSERT_TRUE(cpu::crossEntropyStatsBackward(dlogits.data(), logits.data(),
                                             combinedLse.data(), labels.data(),
                                             0.5f, rows, V, 0, V, rowCount));
  ASSERT_RUN(bwd, runOne(Kernel::CrossEntropyBwdStats,
                         {f32({}, {0.5f}), f32({rows, V}, logits),
                          i32({rows}, labels), f32({rows}, combinedLse)},
                         {f32({rows, V})}, {rows, V, -1, rowCount}));
  EXPECT_EQ((*bwd)[4], dlogits);

  // A label outside the vocabulary is the kernel's error.
  labels[2] = int32_t(V);
  auto bad = runOne(Kernel::CrossEntropyStats,
                    {f32({rows, V}, logits), i32({rows}, labels)},
                    {f32({rows}), f32({rows})}, {rows, V, -1});
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("label 7 at position 2 is outside the vocabulary "
                        "[0, 7)"));
}

// Tests sum_squares, sum_squares_multi, global_norm and clip_coefficient.
TEST(CpuBackendTest, NormAndClipping) {
  std::vector<float> x = {1, -2, 3, 0.5f};
  ASSERT_RUN(ss, runOne(Kernel::SumSquares, {f32({4}, x)}, {f32({})}, {4}));
  EXPECT_FLOAT_EQ((*ss)[1][0], 14.25f);

  // sum_squares_multi: the sums of squares of its inputs, in order.
  ASSERT_RUN(multi, runOne(Kernel::SumSquaresMulti,
                           {f32({4}, x), f32({2}, {2, -0.25f}), f32({1}, {-3})},
                           {f32({}), f32({}), f32({})}, {4, 2, 1}));
  EXPECT_FLOAT_EQ((*multi)[3][0], 14.25f);
  EXPECT_FLOAT_EQ((*multi)[4][0], 4.0625f);
  EXPECT_FLOAT_EQ((*multi)[5][0], 9.0f);
  // The verifier asks for as many outputs and sizes as inputs.
  auto mismatched = runOne(Kernel::SumSquaresMulti,
                           {f32({4}, x), f32({1}, {-3})}, {f32({})}, {4, 1});
  ASSERT_FALSE(mismatched);
  EXPECT_THAT(mismatched.status().message(),
              HasSubstr("expects N >= 1 inputs, N outputs and N integer "
                        "attributes, has 2, 1 and 2"));
  auto wrongSize = runOne(Kernel::SumSquaresMulti,
                          {f32({4}, x), f32({1}, {-3})},
                          {f32({}), f32({})}, {4, 2});
  ASSERT_FALSE(wrongSize);

  ASSERT_RUN(norm, runOne(Kernel::GlobalNorm,
                          {f32({}, {9}), f32({}, {16}), f32({}, {0})},
                          {f32({})}, {}));
  EXPECT_FLOAT_EQ((*norm)[3][0], 5.0f);

  auto clip = [](float norm, float max) {
    auto r = runOne(Kernel::ClipCoefficient, {f32({}, {norm}), f32({}, {max})},
                    {f32({})}, {});
    EXPECT_TRUE(r) << r.status().message();
    return r ? (*r)[2][0] : -1.0f;
  };
  EXPECT_FLOAT_EQ(clip(4.0f, 1.0f), 1.0f / (4.0f + 1e-6f));
  EXPECT_EQ(clip(0.5f, 1.0f), 1.0f);
  EXPECT_EQ(clip(100.0f, 0.0f), 1.0f); // 0 turns clipping off
}

// Tests adamw: the gradient scaled by grad_scale (the buffer left as it
// was), then the AdamW kernel, with and without decay.
TEST(CpuBackendTest, AdamW) {
  std::mt19937 rng(10);
  const int64_t n = 11;
  for (int decay = 0; decay < 2; ++decay) {
    std::vector<float> grad = randomFloats(rng, n),
                       param = randomFloats(rng, n),
                       m = randomFloats(rng, n, -0.1f, 0.1f),
                       v = randomFloats(rng, n, 0.0f, 0.01f);
    const float scale = 0.25f, lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f,
                wd = 0.1f, step = 3.0f;
    std::vector<float> scaled(n);
    for (int64_t i = 0; i < n; ++i)
      scaled[i] = grad[i] * scale;
    std::vector<float> p2 = param, m2 = m, v2 = v;
    cpu::AdamWParams params;
    params.lr = lr;
    params.beta1 = b1;
    params.beta2 = b2;
    params.eps = eps;
    params.weightDecay = wd;
    ASSERT_TRUE(cpu::adamwStep(p2.data(), m2.data(), v2.data(), scaled.data(),
                               n, params, 3, decay != 0));
    ASSERT_RUN(
        r,
        runOne(Kernel::AdamW,
               {f32({n}, grad), f32({}, {scale}), f32({}, {lr}), f32({}, {b1}),
                f32({}, {b2}), f32({}, {eps}), f32({}, {wd}), f32({}, {step})},
               {f32({n}, param), f32({n}, m), f32({n}, v)}, {n, decay}));
    EXPECT_EQ((*r)[0], grad);
    EXPECT_EQ((*r)[8], p2);
    EXPECT_EQ((*r)[9], m2);
    EXPECT_EQ((*r)[10], v2);
  }
}

// Tests that a failing kernel is reported with its program and instruction.
TEST(CpuBackendTest, KernelErrorNamesInstruction) {
  auto r = runOne(Kernel::EmbeddingFwd, {i32({2}, {1, 9}), f32({4, 2}, {})},
                  {f32({2, 2})}, {2, 4, 2});
  ASSERT_FALSE(r);
  EXPECT_THAT(r.status().message(),
              HasSubstr("program 'p' instruction 0 (embedding_fwd): "));
  EXPECT_THAT(r.status().message(), HasSubstr("9"));
}

/// x rounded to bf16 and back (to nearest even).
float roundBF16(float x) { return bf16ToFloat(floatToBF16(x)); }

// Tests that a bf16 instruction computes as the GPU does: bf16 inputs widened
// to f32, the f32 kernel, each bf16 output rounded once; that its f32
// operands (a parameter gradient, softmax statistics) are taken as they are;
// and that the other mixtures, and f16, are refused naming the buffers.
TEST(CpuBackendTest, ComputesBF16AsWidenedF32) {
  auto bf16 = [](std::vector<int64_t> shape, std::vector<float> values = {}) {
    return Operand{std::move(shape), ElementType::BF16, std::move(values), {}};
  };
  std::mt19937 rng(21);
  const int64_t n = 37;
  std::vector<float> a = randomFloats(rng, n), b = randomFloats(rng, n);
  for (float &x : a)
    x = roundBF16(x);
  for (float &x : b)
    x = roundBF16(x);
  ASSERT_RUN(
      sum, runOne(Kernel::Add, {bf16({n}, a), bf16({n}, b)}, {bf16({n})}, {n}));
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ((*sum)[2][i], roundBF16(a[i] + b[i])) << i;

  // A bf16 gradient accumulates into an f32 one without rounding the sum.
  std::vector<float> y = randomFloats(rng, n);
  ASSERT_RUN(acc,
             runOne(Kernel::Accumulate, {bf16({n}, a)}, {f32({n}, y)}, {n}));
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ((*acc)[1][i], y[i] + a[i]) << i;

  // A weight gradient from bf16 operands, written in f32: the f32 product of
  // the widened inputs, not rounded to bf16.
  const int64_t m = 3, k = 5, cols = 4;
  std::vector<float> x = randomFloats(rng, m * k),
                     w = randomFloats(rng, k * cols);
  for (float &v : x)
    v = roundBF16(v);
  for (float &v : w)
    v = roundBF16(v);
  ASSERT_RUN(mm, runOne(Kernel::Matmul, {bf16({m, k}, x), bf16({k, cols}, w)},
                        {f32({m, cols})}, {1, m, cols, k, 0, 0, 0}));
  bool anyUnrounded = false;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double want = 0;
      for (int64_t l = 0; l < k; ++l)
        want += double(x[i * k + l]) * double(w[l * cols + j]);
      const float got = (*mm)[2][i * cols + j];
      EXPECT_NEAR(got, want, 1e-5) << i << "," << j;
      anyUnrounded |= got != roundBF16(got);
    }
  EXPECT_TRUE(anyUnrounded) << "the f32 gradient was rounded to bf16";

  // Mixtures outside Kernels.def's element types are refused.
  auto mixed = runOne(Kernel::Add, {bf16({n}), f32({n})}, {bf16({n})}, {n});
  ASSERT_FALSE(mixed);
  EXPECT_EQ(mixed.status().message(),
            "program 'p' instruction 0 (add): buffer 'b1' is f32, but buffer "
            "'b0' is bf16; an instruction computes in one float type");
  auto wideGrad = runOne(Kernel::Accumulate, {f32({n})}, {bf16({n})}, {n});
  ASSERT_FALSE(wideGrad);
  EXPECT_EQ(wideGrad.status().message(),
            "program 'p' instruction 0 (accumulate): buffer 'b1' is bf16, but "
            "buffer 'b0' is f32; an instruction computes in one float type");
  auto bf16Stats = runOne(Kernel::CrossEntropyFwd,
                          {bf16({2, 8}), i32({2}, {1, 2})}, {bf16({})}, {2, 8});
  ASSERT_FALSE(bf16Stats);
  EXPECT_EQ(bf16Stats.status().message(),
            "program 'p' instruction 0 (cross_entropy_fwd): buffer 'b2' is "
            "bf16, but it holds f32 statistics (the instruction computes in "
            "bf16)");
  Operand f16{{4}, ElementType::F16, {}, {}};
  auto half = runOne(Kernel::Add, {f16, f16}, {f16}, {4});
  ASSERT_FALSE(half);
  EXPECT_THAT(half.status().message(), HasSubstr("f16"));
}

// Tests that the multi-tensor optimizer kernels read bf16 gradients (reduced
// in bf16) beside f32 ones, with the bits of the same gradients widened to
// f32.
TEST(CpuBackendTest, OptimizerReadsBF16Gradients) {
  auto bf16 = [](std::vector<int64_t> shape, std::vector<float> values = {}) {
    return Operand{std::move(shape), ElementType::BF16, std::move(values), {}};
  };
  std::mt19937 rng(31);
  const int64_t n = 23, k = 9;
  std::vector<float> g = randomFloats(rng, n), h = randomFloats(rng, k);
  for (float &x : g)
    x = roundBF16(x);
  ASSERT_RUN(half, runOne(Kernel::SumSquaresMulti, {bf16({n}, g), f32({k}, h)},
                          {f32({}), f32({})}, {n, k}));
  ASSERT_RUN(wide, runOne(Kernel::SumSquaresMulti, {f32({n}, g), f32({k}, h)},
                          {f32({}), f32({})}, {n, k}));
  EXPECT_EQ((*half)[2], (*wide)[2]);
  EXPECT_EQ((*half)[3], (*wide)[3]);
  EXPECT_NE((*half)[2][0], 0.0f);

  const std::vector<float> param = randomFloats(rng, n),
                           m = randomFloats(rng, n),
                           v = randomFloats(rng, n, 0.0f, 0.01f);
  auto adamw = [&](Operand grad) {
    return runOne(Kernel::AdamWMulti,
                  {std::move(grad), f32({}, {0.5f}), f32({}, {0.01f}),
                   f32({}, {0.9f}), f32({}, {0.95f}), f32({}, {1e-8f}),
                   f32({}, {0.1f}), f32({}, {2.0f})},
                  {f32({n}, param), f32({n}, m), f32({n}, v)}, {n, 1});
  };
  ASSERT_RUN(fromHalf, adamw(bf16({n}, g)));
  ASSERT_RUN(fromWide, adamw(f32({n}, g)));
  for (size_t o = 8; o < 11; ++o)
    EXPECT_EQ((*fromHalf)[o], (*fromWide)[o]) << "output " << o - 8;
  EXPECT_NE((*fromHalf)[8], param);
}

// Tests that an instruction computes in f64 when its operands are f64, with
// the optimizer's scalars still f32, and that f32 and f64 do not mix within
// one instruction.
TEST(CpuBackendTest, ComputesInF64) {
  auto f64 = [](std::vector<int64_t> shape, std::vector<float> values = {}) {
    return Operand{std::move(shape), ElementType::F64, std::move(values), {}};
  };
  std::mt19937 rng(12);
  const int64_t n = 5;
  std::vector<float> a = randomFloats(rng, n), b = randomFloats(rng, n);
  ASSERT_RUN(sum,
             runOne(Kernel::Add, {f64({n}, a), f64({n}, b)}, {f64({n})}, {n}));
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ((*sum)[2][i], float(double(a[i]) + double(b[i])));

  ASSERT_RUN(ss, runOne(Kernel::SumSquares, {f64({n}, a)}, {f32({})}, {n}));
  EXPECT_FLOAT_EQ((*ss)[1][0], float(cpu::sumOfSquares(a.data(), n)));

  // AdamW in f64 on f64 state, its hyper-parameters read from f32 buffers.
  std::vector<float> param = randomFloats(rng, n), m = randomFloats(rng, n),
                     v = randomFloats(rng, n, 0.0f, 0.01f);
  const float lr = 0.25f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  std::vector<double> p2(param.begin(), param.end()), m2(m.begin(), m.end()),
      v2(v.begin(), v.end()), g2(a.begin(), a.end());
  cpu::AdamWParams params;
  params.lr = lr;
  params.beta1 = b1;
  params.beta2 = b2;
  params.eps = eps;
  params.weightDecay = wd;
  ASSERT_TRUE(cpu::adamwStep(p2.data(), m2.data(), v2.data(), g2.data(), n,
                             params, 1, true));
  ASSERT_RUN(
      r, runOne(Kernel::AdamW,
                {f64({n}, a), f32({}, {1.0f}), f32({}, {lr}), f32({}, {b1}),
                 f32({}, {b2}), f32({}, {eps}), f32({}, {wd}), f32({}, {1.0f})},
                {f64({n}, param), f64({n}, m), f64({n}, v)}, {n, 1}));
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ((*r)[8][i], float(p2[i]));

  auto mixed = runOne(Kernel::Add, {f32({n}), f64({n})}, {f32({n})}, {n});
  ASSERT_FALSE(mixed);
  EXPECT_EQ(mixed.status().message(),
            "program 'p' instruction 0 (add): buffer 'b1' is f64, but buffer "
            "'b0' is f32; an instruction computes in one float type");
  auto wideScalar = runOne(Kernel::SumSquares, {f64({n})}, {f64({})}, {n});
  ASSERT_FALSE(wideScalar);
  EXPECT_EQ(wideScalar.status().message(),
            "program 'p' instruction 0 (sum_squares): buffer 'b1' is f64, but "
            "this operand is an f32 scalar");
}

//===----------------------------------------------------------------------===//
// Executor
//===----------------------------------------------------------------------===//

// Tests constants, zeroing by kind, and the host I/O checks.
TEST(ExecutorTest, BuffersAndConstants) {
  PlanBuilder b;
  uint32_t c =
      b.add("c", BufferKind::Constant, {3}, ElementType::F32, "", false, 0.125);
  uint32_t cb =
      b.add("cb", BufferKind::Constant, {2}, ElementType::BF16, "", false, 3.0);
  uint32_t g = b.add("g", BufferKind::Gradient, {2}, ElementType::F32, "p");
  b.launch("p", Kernel::Accumulate, {c}, {b.temp("y", {3})}, {3});
  Plan plan = b.plan();
  std::unique_ptr<Backend> backend = createCpuBackend();
  ASSERT_RUN(exec, Executor::create(plan, 0, *backend));
  ASSERT_RUN(cv, (*exec)->readFloats(c));
  EXPECT_EQ(*cv, std::vector<float>(3, 0.125f));
  ASSERT_RUN(cbv, (*exec)->readFloats(cb));
  EXPECT_EQ(*cbv, std::vector<float>(2, 3.0f));

  std::vector<float> ones = {1, 1};
  ASSERT_TRUE((*exec)->writeFloats(g, ones.data(), 2));
  ASSERT_TRUE((*exec)->zeroBuffers(BufferKind::Gradient));
  ASSERT_RUN(gv, (*exec)->readFloats(g));
  EXPECT_EQ(*gv, std::vector<float>(2, 0.0f));

  Status bad = (*exec)->writeFloats(g, ones.data(), 1);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.message(), "writing 1 values to buffer 'g' of 2 elements");
  EXPECT_FALSE((*exec)->findBuffer("nope"));
  EXPECT_EQ((*exec)->findProgram("nope").status().message(),
            "the plan has no program 'nope'");
  ASSERT_TRUE((*exec)->run("p"));
}

// Tests that an executor's arena starts zeroed, whatever the memory held
// before (the padding of flat buffers is never written by kernels and must
// read zero): a first executor fills its buffers with NaN and goes; a
// second of the same plan, likely handed the same memory, reads zeros.
TEST(ExecutorTest, ArenaStartsZeroed) {
  Plan plan = buildTinyZeroPlan([] {
    TinyModel m;
    m.vocab = 20;
    m.hidden = 16;
    return m;
  }());
  std::unique_ptr<Backend> backend = createCpuBackend();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto isConstant = [&](size_t i) {
    return plan.ranks[0].buffers[i].kind == BufferKind::Constant;
  };
  auto isFloat = [&](size_t i) {
    return isFloatElementType(plan.ranks[0].buffers[i].dtype);
  };
  {
    ASSERT_RUN(dirty, Executor::create(plan, 0, *backend));
    for (size_t i = 0; i < plan.ranks[0].buffers.size(); ++i)
      if (isFloat(i)) {
        std::vector<float> junk(size_t((*dirty)->buffer(i).numElements()),
                                nan);
        ASSERT_TRUE(
            (*dirty)->writeFloats(i, junk.data(), int64_t(junk.size())));
      }
  }
  ASSERT_RUN(fresh, Executor::create(plan, 0, *backend));
  for (size_t i = 0; i < plan.ranks[0].buffers.size(); ++i) {
    if (!isFloat(i) || isConstant(i))
      continue;
    ASSERT_RUN(values, (*fresh)->readFloats(i));
    EXPECT_EQ(*values, std::vector<float>(values->size(), 0.0f))
        << (*fresh)->buffer(i).name;
  }
}

//===----------------------------------------------------------------------===//
// The tiny training plan
//===----------------------------------------------------------------------===//

/// The tiny model's mean loss in double, written independently of the
/// kernels: embedding, RMSNorm (eps 1e-5), LM head, cross-entropy.
double tinyLoss(const TinyModel &m, const std::vector<double> &E,
                const std::vector<double> &g, const std::vector<double> &W,
                const std::vector<int32_t> &tokens,
                const std::vector<int32_t> &labels) {
  const int64_t rows = m.microBatch * m.seqLen, V = m.vocab, H = m.hidden;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double *x = &E[tokens[r] * H];
    double ms = 0;
    for (int64_t j = 0; j < H; ++j)
      ms += x[j] * x[j];
    double rs = 1.0 / std::sqrt(ms / double(H) + 1e-5);
    std::vector<double> h(H), logits(V);
    for (int64_t j = 0; j < H; ++j)
      h[j] = x[j] * rs * g[j];
    double mx = -1e300;
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t j = 0; j < H; ++j)
        s += h[j] * W[v * H + j];
      logits[v] = s;
      mx = std::max(mx, s);
    }
    double sum = 0;
    for (double l : logits)
      sum += std::exp(l - mx);
    total += mx + std::log(sum) - logits[labels[r]];
  }
  return total / double(rows);
}

class TinyPlanTest : public ::testing::Test {
protected:
  void SetUp() override {
    plan_ = buildTinyPlan(model_);
    ASSERT_TRUE(verifyPlan(plan_)) << verifyPlan(plan_).message();
    backend_ = createCpuBackend();
    auto exec = Executor::create(plan_, 0, *backend_);
    ASSERT_TRUE(exec) << exec.status().message();
    exec_ = std::move(*exec);

    std::mt19937 rng(42);
    const int64_t V = model_.vocab, H = model_.hidden;
    E_ = randomFloats(rng, V * H, -0.5f, 0.5f);
    g_ = randomFloats(rng, H, 0.5f, 1.5f);
    W_ = randomFloats(rng, V * H, -0.5f, 0.5f);
    tokens_ = randomIds(rng, model_.microBatch * model_.seqLen, int32_t(V));
    labels_ = randomIds(rng, model_.microBatch * model_.seqLen, int32_t(V));
    writeInputs();
  }

  /// Writes the parameters, tokens and labels into exec_.
  void writeInputs() {
    write(std::string(kParameterPrefix) + kTinyEmbedding, E_);
    write(std::string(kParameterPrefix) + kTinyNorm, g_);
    write(std::string(kParameterPrefix) + kTinyHead, W_);
    ASSERT_TRUE(exec_->writeRaw(index(kTokensInput), tokens_.data(),
                                tokens_.size() * 4));
    ASSERT_TRUE(exec_->writeRaw(index(kLabelsInput), labels_.data(),
                                labels_.size() * 4));
  }

  size_t index(const std::string &name) {
    auto i = exec_->findBuffer(name);
    EXPECT_TRUE(i) << name;
    return i ? *i : 0;
  }
  void write(const std::string &name, const std::vector<float> &values) {
    ASSERT_TRUE(
        exec_->writeFloats(index(name), values.data(), int64_t(values.size())));
  }
  std::vector<float> read(const std::string &name) {
    auto values = exec_->readFloats(index(name));
    EXPECT_TRUE(values) << values.status().message();
    return values ? *values : std::vector<float>();
  }
  /// Expects the loss output to be the double-precision model's loss.
  void expectTheModelsLoss() {
    std::vector<double> E(E_.begin(), E_.end()), g(g_.begin(), g_.end()),
        W(W_.begin(), W_.end());
    const double loss = tinyLoss(model_, E, g, W, tokens_, labels_);
    auto lossValue = exec_->readScalar(index(kLossOutput));
    ASSERT_TRUE(lossValue);
    EXPECT_NEAR(*lossValue, loss, 1e-5 * loss);
  }

  TinyModel model_;
  Plan plan_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Executor> exec_;
  std::vector<float> E_, g_, W_;
  std::vector<int32_t> tokens_, labels_;
};

// Tests that the evaluation step computes the loss of micro_step (the
// double-precision model's) and leaves the training state as it was: the
// parameters and gradients, bit for bit.
TEST_F(TinyPlanTest, TheEvaluationStepComputesTheLossAlone) {
  EXPECT_EQ(exec_->runEvalStep().message(),
            "the plan has no evaluation step");
  Plan plan = plan_;
  addTinyEvaluation(plan);
  ASSERT_TRUE(verifyPlan(plan)) << verifyPlan(plan).message();
  auto created = Executor::create(plan, 0, *backend_);
  ASSERT_TRUE(created) << created.status().message();
  exec_ = std::move(*created);
  writeInputs();
  const std::vector<float> grad(model_.vocab * model_.hidden, 0.25f);
  write(std::string(kGradientPrefix) + kTinyHead, grad);
  const uint64_t place = exec_->position().place();
  for (int run = 0; run < 2; ++run) { // (the second one replayed)
    ASSERT_TRUE(exec_->runEvalStep());
    // Between steps, where the hang watchdog times nothing: the position
    // stays outside, at the training step's last place.
    EXPECT_EQ(exec_->position().activity(), RankActivity::Outside);
    EXPECT_EQ(exec_->position().place(), place);
    expectTheModelsLoss();
  }
  EXPECT_EQ(read(std::string(kParameterPrefix) + kTinyHead), W_);
  EXPECT_EQ(read(std::string(kGradientPrefix) + kTinyHead), grad);
}

// Tests the loss and every gradient of micro_step against central finite
// differences of the double-precision model.
TEST_F(TinyPlanTest, GradientsMatchFiniteDifferences) {
  ASSERT_TRUE(exec_->zeroBuffers(BufferKind::Gradient));
  ASSERT_TRUE(exec_->run(kMicroStepProgram));
  expectTheModelsLoss();

  std::vector<double> E(E_.begin(), E_.end()), g(g_.begin(), g_.end()),
      W(W_.begin(), W_.end());

  auto check = [&](std::vector<double> &param, const std::string &name) {
    std::vector<double> fd(param.size());
    const double h = 1e-6;
    for (size_t i = 0; i < param.size(); ++i) {
      const double saved = param[i];
      param[i] = saved + h;
      const double up = tinyLoss(model_, E, g, W, tokens_, labels_);
      param[i] = saved - h;
      const double down = tinyLoss(model_, E, g, W, tokens_, labels_);
      param[i] = saved;
      fd[i] = (up - down) / (2 * h);
    }
    EXPECT_LT(relDiff(read(std::string(kGradientPrefix) + name), fd), 1e-4)
        << name;
  };
  check(E, kTinyEmbedding);
  check(g, kTinyNorm);
  check(W, kTinyHead);

  // A second micro-step accumulates: the gradients double.
  std::vector<float> once = read(std::string(kGradientPrefix) + kTinyHead);
  ASSERT_TRUE(exec_->run(kMicroStepProgram));
  std::vector<float> twice = read(std::string(kGradientPrefix) + kTinyHead);
  for (float &value : once)
    value *= 2;
  EXPECT_LT(relDiff(twice, once), kSameTol);
}

// Tests optimizer_step: the gradient norm before clipping, and every
// parameter and moment after AdamW with the clipped gradient.
TEST_F(TinyPlanTest, OptimizerStepMatchesAdamW) {
  ASSERT_TRUE(exec_->zeroBuffers(BufferKind::Gradient));
  ASSERT_TRUE(exec_->run(kMicroStepProgram));
  const double lr = 0.01, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1,
               maxNorm = 0.05;
  for (auto [name, value] : std::vector<std::pair<const char *, double>>{
           {kHyperLR, lr},
           {kHyperBeta1, b1},
           {kHyperBeta2, b2},
           {kHyperEps, eps},
           {kHyperWeightDecay, wd},
           {kHyperMaxGradNorm, maxNorm},
           {kHyperStep, 1.0}})
    ASSERT_TRUE(exec_->writeScalar(index(name), value));

  const char *names[] = {kTinyEmbedding, kTinyNorm, kTinyHead};
  std::vector<std::vector<float>> grads, params;
  double sumSq = 0;
  for (const char *name : names) {
    grads.push_back(read(std::string(kGradientPrefix) + name));
    params.push_back(read(std::string(kParameterPrefix) + name));
    // As the plan computes it: an f32 sum of squares per tensor.
    double tensorSumSq = 0;
    for (float x : grads.back())
      tensorSumSq += double(x) * x;
    sumSq += double(float(tensorSumSq));
  }
  ASSERT_TRUE(exec_->run(kOptimizerStepProgram));

  const float norm = float(std::sqrt(sumSq));
  auto gradNorm = exec_->readScalar(index(kGradNormOutput));
  ASSERT_TRUE(gradNorm);
  EXPECT_FLOAT_EQ(float(*gradNorm), norm);
  const float coef = std::min(1.0f, float(maxNorm) / (norm + 1e-6f));
  ASSERT_LT(coef, 1.0f) << "the test means to clip";

  cpu::AdamWParams p;
  p.lr = float(lr);
  p.beta1 = float(b1);
  p.beta2 = float(b2);
  p.eps = float(eps);
  p.weightDecay = float(wd);
  for (size_t k = 0; k < 3; ++k) {
    const int64_t n = int64_t(params[k].size());
    std::vector<float> m(n, 0.0f), v(n, 0.0f), scaled(n);
    for (int64_t i = 0; i < n; ++i)
      scaled[i] = grads[k][i] * coef;
    ASSERT_TRUE(cpu::adamwStep(params[k].data(), m.data(), v.data(),
                               scaled.data(), n, p, 1,
                               /*applyWeightDecay=*/k != 1));
    EXPECT_EQ(read(std::string(kParameterPrefix) + names[k]), params[k])
        << names[k];
    EXPECT_EQ(read(std::string(kExpAvgPrefix) + names[k]), m) << names[k];
    EXPECT_EQ(read(std::string(kExpAvgSqPrefix) + names[k]), v) << names[k];
  }
}

} // namespace
