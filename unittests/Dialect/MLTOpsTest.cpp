//===- MLTOpsTest.cpp - Tests of the mlt ops' C++ API ---------------------===//
//
// Part of mlt. Tests the helpers of mlt.param and mlt.load, and that the ODS
// builders of the shape-inferring ops compute the result types.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/MLT/MLTOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

using namespace mlir;
using namespace mlt;

namespace {

class MLTOpsTest : public testing::Test {
protected:
  MLTOpsTest() : b(&context), loc(b.getUnknownLoc()) {
    context.loadDialect<MLTDialect, func::FuncDialect>();
  }

  OwningOpRef<ModuleOp> parse(llvm::StringRef ir) {
    return parseSourceString<ModuleOp>(ir, &context);
  }

  /// Starts a module holding `func.func @f` with arguments of `types`, and
  /// points the builder into its body.
  Block *startFunc(TypeRange types) {
    module = ModuleOp::create(loc);
    b.setInsertionPointToEnd(module->getBody());
    auto func = func::FuncOp::create(b, loc, "f", b.getFunctionType(types, {}));
    Block *entry = func.addEntryBlock();
    b.setInsertionPointToStart(entry);
    return entry;
  }

  /// Ends the function started by startFunc and verifies the module.
  void finishAndVerify() {
    func::ReturnOp::create(b, loc);
    EXPECT_TRUE(succeeded(verify(*module)));
  }

  RankedTensorType tensor(ArrayRef<int64_t> shape, Type element = {}) {
    return RankedTensorType::get(shape, element ? element : b.getF32Type());
  }

  static constexpr int64_t kDyn = ShapedType::kDynamic;

  MLIRContext context;
  OpBuilder b;
  Location loc;
  OwningOpRef<ModuleOp> module;
};

//===----------------------------------------------------------------------===//
// ParamOp / LoadOp
//===----------------------------------------------------------------------===//

TEST_F(MLTOpsTest, ParamHFName) {
  OwningOpRef<ModuleOp> m = parse(R"mlir(
    mlt.param @"model.embed_tokens.weight" : tensor<256x64xf32>
    mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 12 : tensor<176x64xf32>
  )mlir");
  ASSERT_TRUE(m);
  auto embed = m->lookupSymbol<ParamOp>("model.embed_tokens.weight");
  auto up = m->lookupSymbol<ParamOp>("model.layers.{}.mlp.up_proj.weight");
  ASSERT_TRUE(embed && up);

  EXPECT_FALSE(embed.isPerLayer());
  EXPECT_EQ(embed.getHFName(), "model.embed_tokens.weight");
  EXPECT_EQ(embed.getHFName(3), "model.embed_tokens.weight")
      << "the layer is ignored when not per-layer";
  EXPECT_EQ(embed.getTensorType(), tensor({256, 64}));

  EXPECT_TRUE(up.isPerLayer());
  EXPECT_EQ(*up.getLayers(), 12u);
  EXPECT_EQ(up.getHFName(0), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(up.getHFName(1), "model.layers.1.mlp.up_proj.weight");
  EXPECT_EQ(up.getHFName(11), "model.layers.11.mlp.up_proj.weight");
  // The symbol itself keeps the placeholder.
  EXPECT_EQ(up.getSymName(), "model.layers.{}.mlp.up_proj.weight");
}

TEST_F(MLTOpsTest, ParamBuiltInCpp) {
  startFunc({});
  b.setInsertionPointToStart(module->getBody());
  auto param = ParamOp::create(b, loc, "model.layers.{}.self_attn.o_proj.weight",
                               tensor({64, 64}), b.getI64IntegerAttr(80),
                               /*first_layer=*/nullptr);
  EXPECT_EQ(param.getHFName(79), "model.layers.79.self_attn.o_proj.weight");
  b.setInsertionPointToEnd(
      &module->lookupSymbol<func::FuncOp>("f").getBody().front());
  finishAndVerify();
}

TEST_F(MLTOpsTest, LoadShortParamName) {
  EXPECT_EQ(LoadOp::getShortParamName("model.layers.{}.self_attn.q_proj.weight"),
            "q_proj");
  EXPECT_EQ(LoadOp::getShortParamName("model.layers.{}.input_layernorm.weight"),
            "input_layernorm");
  EXPECT_EQ(LoadOp::getShortParamName("model.embed_tokens.weight"),
            "embed_tokens");
  EXPECT_EQ(LoadOp::getShortParamName("model.norm.weight"), "norm");
  EXPECT_EQ(LoadOp::getShortParamName("lm_head.weight"), "lm_head");
  EXPECT_EQ(LoadOp::getShortParamName("model.layers.{}.self_attn.q_proj.bias"),
            "q_proj");
  EXPECT_EQ(LoadOp::getShortParamName("scale"), "scale");
  // A name that is only `weight` keeps it rather than becoming empty.
  EXPECT_EQ(LoadOp::getShortParamName("weight"), "weight");
}

TEST_F(MLTOpsTest, LoadResultNamedAfterParam) {
  OwningOpRef<ModuleOp> m = parse(R"mlir(
    mlt.param @"model.layers.{}.self_attn.q_proj.weight" layers 2 : tensor<64x64xf32>
    func.func @f(%i: index) -> tensor<64x64xf32> {
      %0 = mlt.load @"model.layers.{}.self_attn.q_proj.weight"[%i] : tensor<64x64xf32>
      return %0 : tensor<64x64xf32>
    }
  )mlir");
  ASSERT_TRUE(m);
  std::string text;
  llvm::raw_string_ostream os(text);
  m->print(os);
  EXPECT_NE(text.find("%q_proj = mlt.load"), std::string::npos) << text;
}

//===----------------------------------------------------------------------===//
// Builders infer result types
//===----------------------------------------------------------------------===//

TEST_F(MLTOpsTest, MatmulTransposeRhs) {
  Block *entry = startFunc({tensor({kDyn, kDyn, 64}), tensor({176, 64})});
  auto matmul = MatmulOp::create(b, loc, entry->getArgument(0),
                                 entry->getArgument(1),
                                 /*transpose_lhs=*/false,
                                 /*transpose_rhs=*/true);
  EXPECT_EQ(matmul.getType(), tensor({kDyn, kDyn, 176}));
  EXPECT_TRUE(matmul.getTransposeRhs());
  EXPECT_FALSE(matmul.getTransposeLhs());
  finishAndVerify();
}

TEST_F(MLTOpsTest, MatmulBatched) {
  Block *entry =
      startFunc({tensor({2, kDyn, 8, 16}), tensor({kDyn, 4, 16, 32})});
  auto matmul =
      MatmulOp::create(b, loc, entry->getArgument(0), entry->getArgument(1));
  // Batch dimensions merge to the static size where either side knows it.
  EXPECT_EQ(matmul.getType(), tensor({2, 4, 8, 32}));
  auto transposed = MatmulOp::create(b, loc, entry->getArgument(0),
                                     entry->getArgument(0),
                                     /*transpose_lhs=*/true,
                                     /*transpose_rhs=*/false);
  EXPECT_EQ(transposed.getType(), tensor({2, kDyn, 16, 16}));
  finishAndVerify();
}

TEST_F(MLTOpsTest, AttentionGQA) {
  Block *entry = startFunc({tensor({kDyn, kDyn, 4, 16}),
                            tensor({kDyn, kDyn, 2, 16}),
                            tensor({3, 8, 2, 16})});
  auto attn = AttentionOp::create(
      b, loc, entry->getArgument(0), entry->getArgument(1),
      entry->getArgument(2), b.getUnitAttr(), b.getF64FloatAttr(0.25));
  // The query's heads and sequence (a context-parallel rank's queries are
  // fewer than the keys), the batch known from the value.
  EXPECT_EQ(attn.getType(), tensor({3, kDyn, 4, 16}));
  EXPECT_TRUE(attn.getCausal());
  finishAndVerify();
}

TEST_F(MLTOpsTest, CrossEntropyIsF32Scalar) {
  Block *entry = startFunc(
      {tensor({kDyn, kDyn, 256}, b.getBF16Type()),
       RankedTensorType::get({kDyn, kDyn}, b.getI32Type()),
       tensor({kDyn, kDyn, 256}, b.getF64Type())});
  auto loss = CrossEntropyOp::create(b, loc, entry->getArgument(0),
                                     entry->getArgument(1));
  EXPECT_EQ(loss.getType(), RankedTensorType::get({}, b.getF32Type()));
  auto loss64 = CrossEntropyOp::create(b, loc, entry->getArgument(2),
                                       entry->getArgument(1));
  EXPECT_EQ(loss64.getType(), RankedTensorType::get({}, b.getF64Type()));
  finishAndVerify();
}

TEST_F(MLTOpsTest, EmbeddingNormRope) {
  Block *entry = startFunc(
      {RankedTensorType::get({kDyn, kDyn}, b.getI32Type()),
       tensor({256, 64}, b.getBF16Type()), tensor({64}, b.getBF16Type()),
       tensor({kDyn, kDyn, 4, 16}, b.getBF16Type())});
  auto embedding = EmbeddingOp::create(b, loc, entry->getArgument(0),
                                       entry->getArgument(1));
  EXPECT_EQ(embedding.getType(), tensor({kDyn, kDyn, 64}, b.getBF16Type()));
  auto norm = RMSNormOp::create(b, loc, embedding, entry->getArgument(2),
                                b.getF64FloatAttr(1e-5));
  EXPECT_EQ(norm.getType(), embedding.getType());
  auto rope = RopeOp::create(b, loc, entry->getArgument(3),
                             b.getF64FloatAttr(1e4), Llama3RopeScalingAttr());
  EXPECT_EQ(rope.getType(), tensor({kDyn, kDyn, 4, 16}, b.getBF16Type()));
  finishAndVerify();
}

TEST_F(MLTOpsTest, TransposeInfersPermutedShape) {
  Block *entry = startFunc({tensor({kDyn, kDyn, 4, 16})});
  auto transpose = TransposeOp::create(b, loc, entry->getArgument(0),
                                       ArrayRef<int64_t>{0, 2, 1, 3});
  EXPECT_EQ(transpose.getType(), tensor({kDyn, 4, kDyn, 16}));
  finishAndVerify();
}

//===----------------------------------------------------------------------===//
// Shape errors, through the parser
//===----------------------------------------------------------------------===//

/// Parses `ir`, expecting it to fail with a diagnostic holding `message`.
void expectParseError(MLIRContext &context, llvm::StringRef ir,
                      llvm::StringRef message) {
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    diagnostics += diag.str() + "\n";
    return success();
  });
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(ir, &context);
  EXPECT_FALSE(module) << "parsed: " << ir.str();
  EXPECT_NE(diagnostics.find(message.str()), std::string::npos) << diagnostics;
}

TEST_F(MLTOpsTest, MatmulContractingMismatch) {
  expectParseError(context, R"mlir(
    func.func @f(%x: tensor<?x?x64xf32>, %w: tensor<176x32xf32>) {
      %0 = mlt.matmul %x, %w transpose_rhs : tensor<?x?x64xf32>, tensor<176x32xf32>
      return
    }
  )mlir",
                   "contracting dimensions differ");
}

TEST_F(MLTOpsTest, AttentionHeadsNotMultiple) {
  expectParseError(context, R"mlir(
    func.func @f(%q: tensor<?x?x4x16xf32>, %kv: tensor<?x?x3x16xf32>) {
      %0 = mlt.attention %q, %kv, %kv causal scale = 0.25
          : tensor<?x?x4x16xf32>, tensor<?x?x3x16xf32>, tensor<?x?x3x16xf32>
      return
    }
  )mlir",
                   "query heads (4) must be a multiple of key/value heads (3)");
}

TEST_F(MLTOpsTest, ParamPlaceholderMismatch) {
  expectParseError(context, R"mlir(
    mlt.param @"model.layers.0.mlp.up_proj.weight" layers 2 : tensor<176x64xf32>
  )mlir",
                   "exactly once for the layer index");
}

} // namespace
