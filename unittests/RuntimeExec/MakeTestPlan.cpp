//===- MakeTestPlan.cpp - write the test plans as plan files --------------===//
//
// Part of mlt. mlt-make-test-plan writes the hand-built plans of the runtime
// tests (the tiny model, its ZeRO-1 layouts in f32 and bf16 and the
// tensor-parallel MLP model of TestPlans.h, the LLaMA of LlamaTestPlan.h in
// the shape of the llama-ref-a fixture) as plan files, so that mlt-run can
// be exercised, and tested with lit, in a build without the compiler:
//
//   mlt-make-test-plan tiny|tiny-zero|tiny-zero-bf16|mlp|llama-ref OUT
//                      [--micro-batch N] [--seq-len N] [--microbatches N]
//                      [--hf-config FILE] [--dp N] [--tp N]
//
// --dp splits the micro-batch rows over ranks (tiny, tiny-zero*, mlp; the
// ZeRO-1 plans also partition the optimizer over them); --tp splits the
// MLP (mlp only).
//
//===----------------------------------------------------------------------===//

#include "LlamaTestPlan.h"
#include "TestPlans.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::testing;

namespace {

int fail(const std::string &message) {
  std::fprintf(stderr, "mlt-make-test-plan: error: %s\n", message.c_str());
  return 1;
}

std::string llamaConfig(const LlamaShape &c) {
  std::ostringstream os;
  os << "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": "
        "\"llama\", "
     << "\"vocab_size\": " << c.vocab << ", \"hidden_size\": " << c.hidden
     << ", \"intermediate_size\": " << c.intermediate
     << ", \"num_hidden_layers\": " << c.layers
     << ", \"num_attention_heads\": " << c.heads
     << ", \"num_key_value_heads\": " << c.kvHeads
     << ", \"head_dim\": " << c.headDim
     << ", \"max_position_embeddings\": " << c.maxPositions
     << ", \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, "
     << "\"hidden_act\": \"silu\", \"tie_word_embeddings\": false, "
     << "\"attention_bias\": false, \"mlp_bias\": false, "
     << "\"initializer_range\": 0.02, \"torch_dtype\": \"float32\"}";
  return os.str();
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3)
    return fail("usage: mlt-make-test-plan "
                "tiny|tiny-zero|tiny-zero-bf16|mlp|llama-ref OUT "
                "[--micro-batch N] [--seq-len N] [--microbatches N] "
                "[--hf-config FILE] [--dp N] [--tp N]");
  std::string kind = argv[1], out = argv[2], configFile;
  const bool zero = kind == "tiny-zero" || kind == "tiny-zero-bf16";
  int64_t microBatch = kind == "tiny" ? 2 : zero ? 6 : 4;
  int64_t seqLen = kind == "llama-ref" ? 32 : 4;
  int64_t microbatches = 1, dp = 1, tp = 1;
  for (int i = 3; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc)
      return fail(flag + " needs a value");
    std::string value = argv[++i];
    if (flag == "--hf-config") {
      configFile = value;
      continue;
    }
    char *end = nullptr;
    long long n = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end || n < 1)
      return fail(flag + ": expected a positive integer, got '" + value + "'");
    if (flag == "--micro-batch")
      microBatch = n;
    else if (flag == "--seq-len")
      seqLen = n;
    else if (flag == "--microbatches")
      microbatches = n;
    else if (flag == "--dp")
      dp = n;
    else if (flag == "--tp")
      tp = n;
    else
      return fail("unknown option " + flag);
  }
  if (microBatch % dp != 0)
    return fail("--micro-batch " + std::to_string(microBatch) +
                " is not divisible by --dp " + std::to_string(dp));
  if ((kind != "tiny" && !zero && kind != "mlp" && dp != 1) ||
      (kind != "mlp" && tp != 1))
    return fail("the " + kind + " plan takes no --dp/--tp");

  Plan plan;
  if (kind == "tiny") {
    TinyModel model;
    model.microBatch = microBatch;
    model.seqLen = seqLen;
    model.microbatches = microbatches;
    model.dp = dp;
    plan = buildTinyPlan(model);
  } else if (zero) {
    // The ZeRO-1 layout of TestPlans.h, with a vocabulary of 20 and a hidden
    // size of 16, so that slices cut through the parameters.
    TinyModel model;
    model.vocab = 20;
    model.hidden = 16;
    model.microBatch = microBatch;
    model.seqLen = seqLen;
    model.microbatches = microbatches;
    model.dp = dp;
    plan = buildTinyZeroPlan(model, kind == "tiny-zero-bf16");
  } else if (kind == "mlp") {
    MlpModel model;
    model.microBatch = microBatch;
    model.seqLen = seqLen;
    model.microbatches = microbatches;
    model.dp = dp;
    model.tp = tp;
    if (model.ffn % tp != 0)
      return fail("--tp " + std::to_string(tp) + " does not divide the ffn " +
                  std::to_string(model.ffn));
    plan = buildMlpPlan(model);
  } else if (kind == "llama-ref") {
    LlamaShape shape;
    shape.hfConfig = llamaConfig(shape);
    plan = buildLlamaPlan(shape, microBatch, seqLen, microbatches);
  } else {
    return fail("unknown plan '" + kind +
                "' (tiny, tiny-zero, tiny-zero-bf16, mlp or llama-ref)");
  }
  if (!configFile.empty()) {
    std::ifstream in(configFile, std::ios::binary);
    if (!in)
      return fail(configFile + ": cannot open");
    std::ostringstream text;
    text << in.rdbuf();
    plan.model.hfConfig = text.str();
  }
  Status verified = verifyPlan(plan);
  if (!verified)
    return fail("the " + kind + " plan does not verify: " + verified.message());
  std::string bytes = serializePlan(plan);
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), std::streamsize(bytes.size()));
  file.close();
  if (!file)
    return fail(out + ": cannot write");
  return 0;
}
