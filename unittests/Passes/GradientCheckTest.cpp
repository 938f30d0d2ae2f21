//===- GradientCheckTest.cpp - gradient rules vs finite differences ------===//
//
// Part of mlt. Checks each op's gradient rule (GradientOpInterface,
// MLTGradients.cpp) end to end in float64: a small model built around the op
// goes through the whole compiler pipeline (mlt-specialize-shapes,
// mlt-autodiff, mlt-attach-optimizer, cse, mlt-lower-to-runtime,
// mlt-plan-memory, plan export), runs on the runtime's CPU backend, and the
// gradients that `micro_step` accumulates are compared with central finite
// differences of the `loss` that it computes. One test per rule, so that a
// wrong rule, a wrong lowering of its backward ops or a wrong kernel names
// itself.
//
// Stand-ins for activations are parameters of static [batch, seq, ...] shape,
// so that the op under test is the only rule between a parameter and the
// loss's projection; every case ends in a projection `logits = y head^T`
// (a second parameter) and mlt.cross_entropy, whose gradient is not constant
// along a row, so an error that adds the same value to a row is not hidden.
//
// Tolerance: |g - fd| <= 1e-6 * max(|g|, |fd|, 1e-4) for every element,
// where fd is the 4-point central difference
//   (8 (L(x+h) - L(x-h)) - (L(x+2h) - L(x-2h))) / (12 h),  h = 1e-4 max(1, |x|)
// of the f64 loss. Its truncation error is O(h^4) (~1e-16 here) and its
// rounding error about 18 ulp(L) / (12 h) ~ 1e-11; the gradients are of order
// 1e-3..1e-1, so a correct rule lands between 1e-10 and 1e-7, while a wrong
// one (a missing term, a wrong transpose, scale or operand) is off by 1e-2 or
// more. The plain central difference with h = 1e-6 would carry ~5e-10 of
// rounding error, too close to 1e-6 of the smaller gradients. The floor 1e-4
// keeps an entry that is almost zero by chance from turning the rounding
// error into a large relative one. f32 parameters (the cast case) take exact
// f32 steps instead (see there).
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Plan/PlanFormat.h"
#include "mlt/Runtime/exec/Backend.h"
#include "mlt/Runtime/exec/Executor.h"
#include "mlt/Target/PlanExport.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

using namespace mlt;
using namespace mlt::rt;

namespace {

/// Batch and sequence of every case (small and odd-sized on purpose).
constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 3;
/// Vocabulary of the logits (labels) and of the token ids.
constexpr int64_t kVocab = 7;
constexpr int64_t kTokenVocab = 5;

constexpr double kRelTol = 1e-6;
constexpr double kGradFloor = 1e-4;
/// Elements checked per parameter at most (spread over the whole tensor);
/// every case's parameters are smaller, so all elements are checked.
constexpr int64_t kMaxChecked = 256;

/// The module around a case: the model attribute the plan exporter needs, the
/// parameters, and @forward with `body`, which must define %logits of type
/// `logitsType` ([batch, seq, vocab] f64, static or with dynamic batch/seq).
std::string buildModule(const std::string &params, const std::string &body,
                        const std::string &logitsType) {
  std::ostringstream os;
  os << "module attributes {mlt.model = #mlt.llama<vocab_size = " << kVocab
     << ", hidden_size = 6, intermediate_size = 8, num_layers = 1, "
        "num_heads = 2, num_kv_heads = 1, head_dim = 4, "
        "max_position_embeddings = 32, rms_norm_eps = 1.0e-05, "
        "rope_theta = 1.0e+04, tie_word_embeddings = false>} {\n"
     << params
     << "  func.func @forward(%tokens: tensor<?x?xi32>, %labels: "
        "tensor<?x?xi32>) -> tensor<f64> {\n"
     << body
     << "    %loss = mlt.cross_entropy %logits, %labels : " << logitsType
     << ", tensor<?x?xi32>\n"
        "    return %loss : tensor<f64>\n"
        "  }\n"
        "}\n";
  return os.str();
}

/// "tensor<2x3x6xf64>" for {2, 3, 6}.
std::string tensorType(const std::vector<int64_t> &shape,
                       const char *element = "f64") {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + element + ">";
}

/// The projection `%logits = %y head^T` of a [batch, seq, hidden] value %y of
/// type `yType`; appends the declaration of @head to `params`.
std::string project(std::string &params, const std::string &yType,
                    int64_t hidden) {
  std::string head = tensorType({kVocab, hidden});
  params += "  mlt.param @head : " + head + "\n";
  return "    %head = mlt.load @head : " + head +
         "\n    %logits = mlt.matmul %y, %head transpose_rhs : " + yType +
         ", " + head + "\n";
}

/// A case whose %y is [batch, seq, hidden] and static: the usual shape.
std::string projectedModule(std::string params, const std::string &body,
                            int64_t hidden) {
  std::string yType = tensorType({kBatch, kSeq, hidden});
  std::string head = project(params, yType, hidden);
  return buildModule(params, body + head, tensorType({kBatch, kSeq, kVocab}));
}

/// Runs the training pipeline on `source` and exports the plan; on failure
/// returns false with the diagnostics in `error`.
bool compile(const std::string &source, std::string &planBytes,
             std::string &error) {
  mlir::DialectRegistry registry;
  registry.insert<MLTDialect, rt_ir::MLTRTDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect>();
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  llvm::raw_string_ostream diagnostics(error);
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    diagnostics << diag.getLocation() << ": " << diag.str() << "\n";
    return mlir::success();
  });

  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  if (!module)
    return false;
  mlir::PassManager pm(&context);
  MLTSpecializeShapesOptions shapes;
  shapes.batch = kBatch;
  shapes.seqLen = kSeq;
  pm.addPass(createMLTSpecializeShapes(shapes));
  MLTAutodiffOptions autodiff;
  autodiff.microbatches = 1;
  pm.addPass(createMLTAutodiff(autodiff));
  pm.addPass(createMLTAttachOptimizer());
  pm.addPass(mlir::createCSEPass());
  pm.addPass(createMLTLowerToRuntime());
  pm.addPass(createMLTSchedulePipeline());
  pm.addPass(createMLTPlanMemory());
  if (failed(pm.run(*module)))
    return false;
  return succeeded(exportPlan(*module, planBytes));
}

/// Reads a float buffer as doubles (f32 widens exactly).
StatusOr<std::vector<double>> readDoubles(Executor &exec, size_t index) {
  const BufferDesc &buffer = exec.buffer(index);
  std::vector<double> values(buffer.numElements());
  if (buffer.dtype == ElementType::F64) {
    MLT_RETURN_IF_ERROR(exec.readRaw(index, values.data(), buffer.bytes));
    return values;
  }
  StatusOr<std::vector<float>> floats = exec.readFloats(index);
  if (!floats)
    return floats.takeStatus();
  std::copy(floats->begin(), floats->end(), values.begin());
  return values;
}

/// Writes doubles into a float buffer; an f32 buffer must be given values
/// that f32 holds exactly (the caller rounds first).
Status writeDoubles(Executor &exec, size_t index,
                    const std::vector<double> &values) {
  const BufferDesc &buffer = exec.buffer(index);
  if (buffer.dtype == ElementType::F64)
    return exec.writeRaw(index, values.data(), buffer.bytes);
  std::vector<float> floats(values.begin(), values.end());
  return exec.writeFloats(index, floats.data(), int64_t(floats.size()));
}

#define ASSERT_OK(expr)                                                        \
  do {                                                                         \
    ::mlt::Status assertStatus_ = (expr);                                      \
    ASSERT_TRUE(assertStatus_) << assertStatus_.message();                     \
  } while (0)

/// What a case asks of the check beyond its module.
struct CheckOptions {
  /// Parameters initialized in [lo, hi] instead of [-1, 1] (norm weights,
  /// kept away from zero as real ones are).
  std::vector<std::pair<std::string, std::pair<double, double>>> ranges;
};

class GradientCheckTest : public ::testing::Test {
protected:
  /// Compiles `source`, then compares every parameter's gradient with finite
  /// differences of the loss.
  void check(const std::string &source, const CheckOptions &options = {}) {
    std::string planBytes, error;
    ASSERT_TRUE(compile(source, planBytes, error)) << "compilation failed:\n"
                                                   << error << "\nmodule:\n"
                                                   << source;
    StatusOr<Plan> plan =
        parsePlan(planBytes.data(), planBytes.size(), "gradient-check");
    ASSERT_TRUE(plan) << plan.status().message();
    std::unique_ptr<Backend> backend = createCpuBackend();
    StatusOr<std::unique_ptr<Executor>> created =
        Executor::create(*plan, 0, *backend);
    ASSERT_TRUE(created) << created.status().message();
    Executor &exec = **created;

    // Fresh seeded inputs: random token ids and labels, random parameters
    // (never zeros).
    std::mt19937_64 rng(20240617);
    const int64_t tokens = kBatch * kSeq;
    std::vector<int32_t> ids(tokens), labels(tokens);
    std::uniform_int_distribution<int32_t> tokenDist(0, kTokenVocab - 1);
    std::uniform_int_distribution<int32_t> labelDist(0, kVocab - 1);
    for (int64_t i = 0; i < tokens; ++i) {
      ids[i] = tokenDist(rng);
      labels[i] = labelDist(rng);
    }
    StatusOr<size_t> tokensIndex = exec.findBuffer(kTokensInput);
    StatusOr<size_t> labelsIndex = exec.findBuffer(kLabelsInput);
    StatusOr<size_t> lossIndex = exec.findBuffer(kLossOutput);
    // The step's body of its one micro-batch: micro_step_first (which
    // writes the gradients), or micro_step where the lowering has none.
    StatusOr<size_t> microStep = exec.findProgram(kMicroStepFirstProgram);
    if (!microStep)
      microStep = exec.findProgram(kMicroStepProgram);
    ASSERT_TRUE(tokensIndex && labelsIndex && lossIndex && microStep);
    ASSERT_OK(exec.writeRaw(*tokensIndex, ids.data(), ids.size() * 4));
    ASSERT_OK(exec.writeRaw(*labelsIndex, labels.data(), labels.size() * 4));

    struct Param {
      std::string name;
      size_t index, gradIndex;
      std::vector<double> values;
    };
    std::vector<Param> params;
    for (size_t i = 0; i < exec.rankPlan().buffers.size(); ++i) {
      const BufferDesc &buffer = exec.buffer(i);
      if (buffer.kind != BufferKind::Parameter)
        continue;
      StatusOr<size_t> grad =
          exec.findBuffer(std::string(kGradientPrefix) + buffer.parameter);
      ASSERT_TRUE(grad) << grad.status().message();
      double lo = -1.0, hi = 1.0;
      for (const auto &[name, range] : options.ranges)
        if (name == buffer.parameter)
          std::tie(lo, hi) = range;
      std::uniform_real_distribution<double> dist(lo, hi);
      std::vector<double> values(buffer.numElements());
      for (double &v : values) {
        v = dist(rng);
        // f32 parameters on a grid of 2^-20, so that x +- 2h (h = 2^-10)
        // stays exact in f32 even where it crosses a power of two.
        if (buffer.dtype == ElementType::F32)
          v = std::ldexp(std::round(std::ldexp(v, 20)), -20);
      }
      ASSERT_OK(writeDoubles(exec, i, values));
      params.push_back({buffer.parameter, i, *grad, std::move(values)});
    }
    ASSERT_FALSE(params.empty());

    // The gradients of one micro-step (seed 1 / microbatches = 1).
    ASSERT_OK(exec.zeroBuffers(BufferKind::Gradient));
    ASSERT_OK(exec.run(*microStep));
    std::vector<std::vector<double>> grads;
    for (const Param &p : params) {
      StatusOr<std::vector<double>> g = readDoubles(exec, p.gradIndex);
      ASSERT_TRUE(g) << g.status().message();
      grads.push_back(*g);
    }

    auto lossAt = [&](Param &p, int64_t element, double value,
                      double &loss) -> Status {
      const double saved = p.values[element];
      p.values[element] = value;
      Status status = writeDoubles(exec, p.index, p.values);
      p.values[element] = saved;
      MLT_RETURN_IF_ERROR(status);
      MLT_RETURN_IF_ERROR(exec.run(*microStep));
      StatusOr<double> read = exec.readScalar(*lossIndex);
      if (!read)
        return read.takeStatus();
      loss = *read;
      return Status::ok();
    };

    double worst = 0.0;
    std::string worstWhere;
    int64_t checked = 0, failures = 0;
    for (size_t pi = 0; pi < params.size(); ++pi) {
      Param &p = params[pi];
      const bool isF32 = exec.buffer(p.index).dtype == ElementType::F32;
      const int64_t n = int64_t(p.values.size());
      const int64_t stride = std::max<int64_t>(1, n / kMaxChecked);
      for (int64_t e = 0; e < n; e += stride) {
        const double x = p.values[e];
        // In f32 the perturbed values must be exact f32 values: 2^-10 on
        // the 2^-20 grid of the initial values.
        const double h =
            isF32 ? std::ldexp(1.0, -10) : 1e-4 * std::max(1.0, std::fabs(x));
        double up, down, up2, down2;
        ASSERT_OK(lossAt(p, e, x + h, up));
        ASSERT_OK(lossAt(p, e, x - h, down));
        ASSERT_OK(lossAt(p, e, x + 2 * h, up2));
        ASSERT_OK(lossAt(p, e, x - 2 * h, down2));
        // x +- h rounds in f64 by about 1e-12 of h: below the noise.
        const double fd = (8 * (up - down) - (up2 - down2)) / (12 * h);
        const double g = grads[pi][e];
        const double scale =
            std::max({std::fabs(g), std::fabs(fd), kGradFloor});
        const double rel = std::fabs(g - fd) / scale;
        ++checked;
        if (rel > worst) {
          worst = rel;
          worstWhere = p.name + "[" + std::to_string(e) + "]";
        }
        if (rel > kRelTol && ++failures <= 10)
          ADD_FAILURE() << "gradient of " << p.name << "[" << e << "] is " << g
                        << ", finite differences give " << fd
                        << " (relative error " << rel << " > " << kRelTol
                        << ")";
      }
      ASSERT_OK(writeDoubles(exec, p.index, p.values));
    }
    EXPECT_EQ(failures, 0) << failures << " of " << checked
                           << " gradient elements differ from finite "
                              "differences (the first 10 are listed)";
    std::ostringstream os;
    os << worst << " at " << worstWhere;
    RecordProperty("worst_relative_error", os.str());
  }
};

//===----------------------------------------------------------------------===//
// Cases: one per gradient rule
//===----------------------------------------------------------------------===//

// Tests mlt.embedding: the scatter-add of embedding_grad, with repeated ids
// (6 tokens from 5 ids) and the dynamic [batch, seq] shapes of a real model.
TEST_F(GradientCheckTest, Embedding) {
  std::string params = "  mlt.param @table : tensor<5x6xf64>\n";
  std::string body = "    %table = mlt.load @table : tensor<5x6xf64>\n"
                     "    %y = mlt.embedding %tokens, %table : "
                     "tensor<?x?xi32>, tensor<5x6xf64>\n";
  std::string head = project(params, "tensor<?x?x6xf64>", 6);
  check(buildModule(params, body + head, "tensor<?x?x7xf64>"));
}

/// A matmul of rank-2 operands, lhs stored [m, k] or [k, m], rhs [k, n] or
/// [n, k], with m = batch * seq rows reshaped to [batch, seq, n].
std::string matmul2D(bool tl, bool tr) {
  const int64_t m = kBatch * kSeq, k = 4, n = 5;
  std::string a = tl ? tensorType({k, m}) : tensorType({m, k});
  std::string b = tr ? tensorType({n, k}) : tensorType({k, n});
  std::string params =
      "  mlt.param @a : " + a + "\n  mlt.param @b : " + b + "\n";
  std::string body =
      "    %a = mlt.load @a : " + a + "\n    %b = mlt.load @b : " + b +
      "\n    %c = mlt.matmul %a, %b" + (tl ? " transpose_lhs" : "") +
      (tr ? " transpose_rhs" : "") + " : " + a + ", " + b +
      "\n    %y = mlt.reshape %c : " + tensorType({m, n}) + " -> " +
      tensorType({kBatch, kSeq, n}) + "\n";
  return projectedModule(params, body, n);
}

// Tests mlt.matmul of two matrices, every combination of transposes.
TEST_F(GradientCheckTest, MatmulMatrix) { check(matmul2D(false, false)); }
TEST_F(GradientCheckTest, MatmulMatrixTransposeLhs) {
  check(matmul2D(true, false));
}
TEST_F(GradientCheckTest, MatmulMatrixTransposeRhs) {
  check(matmul2D(false, true));
}
TEST_F(GradientCheckTest, MatmulMatrixTransposeBoth) {
  check(matmul2D(true, true));
}

/// A linear layer: [batch, seq, k] activations times a weight shared by
/// every batch entry, [k, n] or (HF layout) [n, k].
std::string matmulSharedWeight(bool tr) {
  const int64_t k = 6, n = 5;
  std::string x = tensorType({kBatch, kSeq, k});
  std::string w = tr ? tensorType({n, k}) : tensorType({k, n});
  std::string params =
      "  mlt.param @x : " + x + "\n  mlt.param @w : " + w + "\n";
  std::string body = "    %x = mlt.load @x : " + x +
                     "\n    %w = mlt.load @w : " + w +
                     "\n    %y = mlt.matmul %x, %w" +
                     (tr ? " transpose_rhs" : "") + " : " + x + ", " + w + "\n";
  return projectedModule(params, body, n);
}

// Tests mlt.matmul against a shared rank-2 weight (its gradient sums over the
// batch), with and without transpose_rhs.
TEST_F(GradientCheckTest, MatmulSharedWeight) {
  check(matmulSharedWeight(false));
}
TEST_F(GradientCheckTest, MatmulSharedWeightTransposeRhs) {
  check(matmulSharedWeight(true));
}

// Tests that a transposed batched lhs against a shared weight, which has no
// gradient rule, is reported instead of differentiated wrongly.
TEST_F(GradientCheckTest, MatmulSharedWeightTransposeLhsIsRejected) {
  std::string params = "  mlt.param @x : tensor<2x6x3xf64>\n"
                       "  mlt.param @w : tensor<6x5xf64>\n";
  std::string body = "    %x = mlt.load @x : tensor<2x6x3xf64>\n"
                     "    %w = mlt.load @w : tensor<6x5xf64>\n"
                     "    %y = mlt.matmul %x, %w transpose_lhs : "
                     "tensor<2x6x3xf64>, tensor<6x5xf64>\n";
  std::string planBytes, error;
  EXPECT_FALSE(compile(projectedModule(params, body, 5), planBytes, error));
  EXPECT_NE(error.find("has no gradient rule for a transposed batched lhs "
                       "against a shared rhs"),
            std::string::npos)
      << error;
}

/// A batched product: lhs [batch, seq, k] (or [batch, k, seq]) and a batched
/// rhs [batch, k, n] (or [batch, n, k]).
std::string matmulBatched(bool tl, bool tr) {
  const int64_t k = 4, n = 5;
  std::string a =
      tl ? tensorType({kBatch, k, kSeq}) : tensorType({kBatch, kSeq, k});
  std::string b = tr ? tensorType({kBatch, n, k}) : tensorType({kBatch, k, n});
  std::string params =
      "  mlt.param @a : " + a + "\n  mlt.param @b : " + b + "\n";
  std::string body =
      "    %a = mlt.load @a : " + a + "\n    %b = mlt.load @b : " + b +
      "\n    %y = mlt.matmul %a, %b" + (tl ? " transpose_lhs" : "") +
      (tr ? " transpose_rhs" : "") + " : " + a + ", " + b + "\n";
  return projectedModule(params, body, n);
}

// Tests mlt.matmul with a batched rank-3 rhs, every combination of
// transposes.
TEST_F(GradientCheckTest, MatmulBatched) { check(matmulBatched(false, false)); }
TEST_F(GradientCheckTest, MatmulBatchedTransposeLhs) {
  check(matmulBatched(true, false));
}
TEST_F(GradientCheckTest, MatmulBatchedTransposeRhs) {
  check(matmulBatched(false, true));
}
TEST_F(GradientCheckTest, MatmulBatchedTransposeBoth) {
  check(matmulBatched(true, true));
}

// Tests mlt.matmul of two activations as attention scores are formed: the
// rank-3 rhs comes from a reshape and a transpose of a [batch, seq, 2, 2]
// tensor, and the rank-4 product has two batch dimensions.
TEST_F(GradientCheckTest, MatmulOfActivations) {
  std::string params = "  mlt.param @q : tensor<2x3x4xf64>\n"
                       "  mlt.param @k : tensor<2x3x2x2xf64>\n"
                       "  mlt.param @u : tensor<2x3x4x2xf64>\n"
                       "  mlt.param @v : tensor<2x3x2x5xf64>\n";
  std::string body =
      "    %q = mlt.load @q : tensor<2x3x4xf64>\n"
      "    %k4 = mlt.load @k : tensor<2x3x2x2xf64>\n"
      "    %k = mlt.reshape %k4 : tensor<2x3x2x2xf64> -> tensor<2x3x4xf64>\n"
      "    %kt = mlt.transpose %k [0, 2, 1] : tensor<2x3x4xf64>\n"
      "    %s = mlt.matmul %q, %kt : tensor<2x3x4xf64>, tensor<2x4x3xf64>\n"
      "    %u = mlt.load @u : tensor<2x3x4x2xf64>\n"
      "    %v = mlt.load @v : tensor<2x3x2x5xf64>\n"
      "    %uv = mlt.matmul %u, %v : tensor<2x3x4x2xf64>, tensor<2x3x2x5xf64>\n"
      "    %uvr = mlt.reshape %uv : tensor<2x3x4x5xf64> -> tensor<2x3x20xf64>\n"
      "    %sr = mlt.matmul %s, %uvr : tensor<2x3x3xf64>, tensor<2x3x20xf64>\n"
      "    %y = mlt.silu %sr : tensor<2x3x20xf64>\n";
  check(projectedModule(params, body, 20));
}

// Tests mlt.rms_norm: the gradients of the input and of the weight.
TEST_F(GradientCheckTest, RMSNorm) {
  std::string params = "  mlt.param @x : tensor<2x3x6xf64>\n"
                       "  mlt.param @norm : tensor<6xf64>\n";
  std::string body = "    %x = mlt.load @x : tensor<2x3x6xf64>\n"
                     "    %w = mlt.load @norm : tensor<6xf64>\n"
                     "    %y = mlt.rms_norm %x, %w eps = 1.0e-05 : "
                     "tensor<2x3x6xf64>, tensor<6xf64>\n";
  CheckOptions options;
  options.ranges = {{"norm", {0.5, 1.5}}};
  check(projectedModule(params, body, 6), options);
}

/// Rotary embedding of a [batch, seq, 4 heads, head_dim 4] tensor, forward or
/// inverse (the inverse is what autodiff emits as rope's gradient; its own
/// rule must flip back); `scaled`: with Llama 3.1's scaling, which at theta
/// 10 and an original context of 16 smooths the first frequency (wavelength
/// 6.3, between 16 / 4 and 16) and scales the second (19.9).
std::string ropeModule(bool inverse, bool scaled = false) {
  std::string params = "  mlt.param @q : tensor<2x3x4x4xf64>\n";
  std::string body = std::string("    %q = mlt.load @q : tensor<2x3x4x4xf64>\n"
                                 "    %r = mlt.rope %q theta = 1.0e+01") +
                     (scaled ? " scaling = <factor = 8.0, low_freq_factor = "
                               "1.0, high_freq_factor = 4.0, "
                               "original_max_position_embeddings = 16>"
                             : "") +
                     (inverse ? " inverse" : "") +
                     " : tensor<2x3x4x4xf64>\n"
                     "    %y = mlt.reshape %r : tensor<2x3x4x4xf64> -> "
                     "tensor<2x3x16xf64>\n";
  return projectedModule(params, body, 16);
}

// Tests mlt.rope (seq 3, 4 heads): its gradient rotates back.
TEST_F(GradientCheckTest, Rope) { check(ropeModule(false)); }
TEST_F(GradientCheckTest, RopeInverse) { check(ropeModule(true)); }
TEST_F(GradientCheckTest, RopeLlama3Scaling) { check(ropeModule(false, true)); }
TEST_F(GradientCheckTest, RopeLlama3ScalingInverse) {
  check(ropeModule(true, true));
}

/// Attention of q [batch, seq, 4, 4] over k, v [batch, seq, kvHeads, 4].
std::string attentionModule(bool causal, int64_t kvHeads) {
  std::string q = tensorType({kBatch, kSeq, 4, 4});
  std::string kv = tensorType({kBatch, kSeq, kvHeads, 4});
  std::string params = "  mlt.param @q : " + q + "\n  mlt.param @k : " + kv +
                       "\n  mlt.param @v : " + kv + "\n";
  std::string body =
      "    %q = mlt.load @q : " + q + "\n    %k = mlt.load @k : " + kv +
      "\n    %v = mlt.load @v : " + kv + "\n    %o = mlt.attention %q, %k, %v" +
      (causal ? " causal" : "") + " scale = 0.5 : " + q + ", " + kv + ", " +
      kv + "\n    %y = mlt.reshape %o : " + q + " -> " +
      tensorType({kBatch, kSeq, 16}) + "\n";
  return projectedModule(params, body, 16);
}

// Tests mlt.attention, causal or not, with grouped-query heads (4 query heads
// over 2 key/value heads) and without.
TEST_F(GradientCheckTest, AttentionCausalGQA) {
  check(attentionModule(true, 2));
}
TEST_F(GradientCheckTest, AttentionCausal) { check(attentionModule(true, 4)); }
TEST_F(GradientCheckTest, AttentionNonCausalGQA) {
  check(attentionModule(false, 2));
}
TEST_F(GradientCheckTest, AttentionNonCausal) {
  check(attentionModule(false, 4));
}

/// An elementwise op `%y = mlt.<op> %a[, %b]` on [batch, seq, 6] tensors.
std::string elementwise(const std::string &op, int operands) {
  std::string t = tensorType({kBatch, kSeq, 6});
  std::string params = "  mlt.param @a : " + t + "\n";
  std::string body = "    %a = mlt.load @a : " + t + "\n";
  std::string args = "%a";
  if (operands == 2) {
    params += "  mlt.param @b : " + t + "\n";
    body += "    %b = mlt.load @b : " + t + "\n";
    args += ", %b";
  }
  body += "    %y = mlt." + op + " " + args + " : " + t + "\n";
  return projectedModule(params, body, 6);
}

// Tests the elementwise ops: swiglu, silu, add, mul.
TEST_F(GradientCheckTest, SwiGLU) { check(elementwise("swiglu", 2)); }
TEST_F(GradientCheckTest, SiLU) { check(elementwise("silu", 1)); }
TEST_F(GradientCheckTest, Add) { check(elementwise("add", 2)); }
TEST_F(GradientCheckTest, Mul) { check(elementwise("mul", 2)); }

// Tests mlt.reshape: merging two static dimensions.
TEST_F(GradientCheckTest, Reshape) {
  std::string params = "  mlt.param @x : tensor<2x3x2x3xf64>\n";
  std::string body = "    %x = mlt.load @x : tensor<2x3x2x3xf64>\n"
                     "    %y = mlt.reshape %x : tensor<2x3x2x3xf64> -> "
                     "tensor<2x3x6xf64>\n";
  check(projectedModule(params, body, 6));
}

// Tests mlt.transpose with a permutation that is not its own inverse
// ([2, 0, 1]; its gradient must use [1, 2, 0]).
TEST_F(GradientCheckTest, Transpose) {
  std::string params = "  mlt.param @x : tensor<3x6x2xf64>\n";
  std::string body =
      "    %x = mlt.load @x : tensor<3x6x2xf64>\n"
      "    %y = mlt.transpose %x [2, 0, 1] : tensor<3x6x2xf64>\n";
  check(projectedModule(params, body, 6));
}

// Tests mlt.transpose of heads and sequence in a rank-4 tensor.
TEST_F(GradientCheckTest, TransposeHeads) {
  std::string params = "  mlt.param @x : tensor<2x4x3x2xf64>\n";
  std::string body =
      "    %x = mlt.load @x : tensor<2x4x3x2xf64>\n"
      "    %t = mlt.transpose %x [0, 2, 1, 3] : tensor<2x4x3x2xf64>\n"
      "    %y = mlt.reshape %t : tensor<2x3x4x2xf64> -> tensor<2x3x8xf64>\n";
  check(projectedModule(params, body, 8));
}

// Tests mlt.cast: its rule casts the gradient back to the input's type. An
// f64 -> f32 -> f64 round trip would put f32 rounding into the loss, which
// finite differences cannot see through, so the parameter is f32 and cast up
// to f64 once: the loss is then a smooth f64 function of the f32 values, the
// steps are exact f32 values (h = 2^-10 on a 2^-20 grid), and the only f32
// rounding is the gradient's own, cast to f32 once (at most 2^-24 = 6e-8
// relative), well inside the f64 tolerance. A same-type cast (f64 -> f64,
// which the verifier accepts) is checked beside it.
TEST_F(GradientCheckTest, CastF32ToF64) {
  std::string params = "  mlt.param @x : tensor<2x3x6xf32>\n";
  std::string body = "    %x = mlt.load @x : tensor<2x3x6xf32>\n"
                     "    %y = mlt.cast %x : tensor<2x3x6xf32> -> "
                     "tensor<2x3x6xf64>\n";
  check(projectedModule(params, body, 6));
}
TEST_F(GradientCheckTest, CastSameType) {
  std::string params = "  mlt.param @x : tensor<2x3x6xf64>\n";
  std::string body = "    %x = mlt.load @x : tensor<2x3x6xf64>\n"
                     "    %y = mlt.cast %x : tensor<2x3x6xf64> -> "
                     "tensor<2x3x6xf64>\n";
  check(projectedModule(params, body, 6));
}

// Tests mlt.cross_entropy alone: its gradient with respect to the logits.
TEST_F(GradientCheckTest, CrossEntropy) {
  std::string params = "  mlt.param @logits : tensor<2x3x7xf64>\n";
  std::string body = "    %logits = mlt.load @logits : tensor<2x3x7xf64>\n";
  check(buildModule(params, body, "tensor<2x3x7xf64>"));
}

// Tests a value used twice by one op: mul %x, %x (the adjoints of both
// operands are summed).
TEST_F(GradientCheckTest, ValueUsedTwiceByOneOp) {
  std::string params = "  mlt.param @x : tensor<2x3x6xf64>\n";
  std::string body = "    %x = mlt.load @x : tensor<2x3x6xf64>\n"
                     "    %y = mlt.mul %x, %x : tensor<2x3x6xf64>\n";
  check(projectedModule(params, body, 6));
}

// Tests a value used by two ops, as a residual connection is:
// y = silu(x) * x + x.
TEST_F(GradientCheckTest, ValueUsedByTwoOps) {
  std::string params = "  mlt.param @x : tensor<2x3x6xf64>\n";
  std::string body = "    %x = mlt.load @x : tensor<2x3x6xf64>\n"
                     "    %s = mlt.silu %x : tensor<2x3x6xf64>\n"
                     "    %p = mlt.mul %s, %x : tensor<2x3x6xf64>\n"
                     "    %y = mlt.add %p, %x : tensor<2x3x6xf64>\n";
  check(projectedModule(params, body, 6));
}

// Tests tied embeddings: one parameter read twice (the token embedding and
// the output projection), its two gradients accumulated.
TEST_F(GradientCheckTest, TiedEmbeddings) {
  std::string params = "  mlt.param @embed : tensor<7x6xf64>\n";
  std::string body =
      "    %e = mlt.load @embed : tensor<7x6xf64>\n"
      "    %h = mlt.embedding %tokens, %e : tensor<?x?xi32>, tensor<7x6xf64>\n"
      "    %y = mlt.silu %h : tensor<?x?x6xf64>\n"
      "    %head = mlt.load @embed : tensor<7x6xf64>\n"
      "    %logits = mlt.matmul %y, %head transpose_rhs : tensor<?x?x6xf64>, "
      "tensor<7x6xf64>\n";
  check(buildModule(params, body, "tensor<?x?x7xf64>"));
}

// Tests a per-layer family inside mlt.repeat (2 layers): each layer's
// parameters get their own gradient, and the carried value's gradient flows
// from layer 1 back into layer 0.
TEST_F(GradientCheckTest, RepeatedLayers) {
  std::string params =
      "  mlt.param @x : tensor<2x3x6xf64>\n"
      "  mlt.param @\"layers.{}.norm\" layers 2 : tensor<6xf64>\n"
      "  mlt.param @\"layers.{}.proj\" layers 2 : tensor<6x6xf64>\n";
  std::string body =
      "    %x = mlt.load @x : tensor<2x3x6xf64>\n"
      "    %y = mlt.repeat %layer = 0 to 2 iter_args(%h = %x) -> "
      "(tensor<2x3x6xf64>) {\n"
      "      %w = mlt.load @\"layers.{}.norm\"[%layer] : tensor<6xf64>\n"
      "      %n = mlt.rms_norm %h, %w eps = 1.0e-05 : tensor<2x3x6xf64>, "
      "tensor<6xf64>\n"
      "      %p = mlt.load @\"layers.{}.proj\"[%layer] : tensor<6x6xf64>\n"
      "      %m = mlt.matmul %n, %p transpose_rhs : tensor<2x3x6xf64>, "
      "tensor<6x6xf64>\n"
      "      %s = mlt.silu %m : tensor<2x3x6xf64>\n"
      "      %next = mlt.add %h, %s : tensor<2x3x6xf64>\n"
      "      mlt.yield %next : tensor<2x3x6xf64>\n"
      "    }\n";
  CheckOptions options;
  options.ranges = {{"layers.0.norm", {0.5, 1.5}},
                    {"layers.1.norm", {0.5, 1.5}}};
  check(projectedModule(params, body, 6), options);
}

} // namespace
