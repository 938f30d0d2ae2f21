//===- mlt-translate.cpp - mlt translations -------------------------------===//
//
// Part of mlt. Translations between outside formats and mlt IR:
//   mlt-translate --import-hf-llama config.json   HF LLaMA config -> mlt module
//   mlt-translate --mlt-to-plan lowered.mlir -o x.mltplan
//                                                 planned mlt_rt module -> plan
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Import/HFLlama.h"
#include "mlt/Support/FileKind.h"
#include "mlt/Target/PlanExport.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;

static llvm::cl::opt<std::string> importDtype(
    "dtype", llvm::cl::desc("element type of the imported model: f32 (default), "
                            "bf16, f16 or f64"),
    llvm::cl::init("f32"));

static void registerImportHFLlama() {
  TranslateToMLIRRegistration registration(
      "import-hf-llama",
      "build the mlt model of a Hugging Face LLaMA config.json",
      [](llvm::SourceMgr &sourceMgr,
         MLIRContext *context) -> OwningOpRef<Operation *> {
        const llvm::MemoryBuffer *buffer =
            sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
        llvm::StringRef name = buffer->getBufferIdentifier();
        // The importer's messages already start with the file name.
        auto fail = [&](llvm::Error error) -> OwningOpRef<Operation *> {
          llvm::errs() << "mlt-translate: error: "
                       << llvm::toString(std::move(error)) << "\n";
          return nullptr;
        };
        llvm::Expected<mlt::LlamaConfig> config =
            mlt::parseHFLlamaConfig(buffer->getBuffer(), name);
        if (!config)
          return fail(config.takeError());
        mlt::LlamaBuildOptions options;
        options.dtype = importDtype;
        auto module = mlt::buildLlamaModule(*context, *config, options);
        if (!module)
          return fail(module.takeError());
        return OwningOpRef<Operation *>(module->release());
      },
      [](DialectRegistry &registry) {
        registry.insert<mlt::MLTDialect, func::FuncDialect>();
      });
}

static void registerExportPlan() {
  TranslateFromMLIRRegistration registration(
      "mlt-to-plan",
      "write the plan file of a lowered, memory-planned module (mlt_rt)",
      [](Operation *op, llvm::raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        if (!module)
          return op->emitError("expected a module");
        std::string bytes;
        if (failed(mlt::exportPlan(module, bytes)))
          return failure();
        os << bytes;
        return success();
      },
      [](DialectRegistry &registry) {
        registry.insert<mlt::MLTDialect, mlt::rt_ir::MLTRTDialect,
                        func::FuncDialect, arith::ArithDialect>();
      });
}

int main(int argc, char **argv) {
  if (mlt::Status paths = mlt::checkToolArguments(argc, argv); !paths.isOk()) {
    llvm::errs() << "mlt-translate: error: " << paths.message() << "\n";
    return 1;
  }
  registerImportHFLlama();
  registerExportPlan();
  return failed(mlirTranslateMain(argc, argv, "mlt translations\n")) ? 1 : 0;
}
