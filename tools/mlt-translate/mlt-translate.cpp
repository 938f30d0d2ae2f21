//===- mlt-translate.cpp - mlt translations -------------------------------===//
//
// Part of mlt. Translations between outside formats and mlt IR:
//   mlt-translate --import-hf-llama config.json   HF LLaMA config -> mlt module
//                                   (or an HF model directory holding it)
//   mlt-translate --mlt-to-plan lowered.mlir -o x.mltplan
//                                                 planned mlt_rt module -> plan
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Import/HFLlama.h"
#include "mlt/Support/FileKind.h"
#include "mlt/Support/HFModelDirectory.h"
#include "mlt/Target/PlanExport.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/SourceMgr.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

using namespace mlir;

static llvm::cl::opt<std::string> importDtype(
    "dtype", llvm::cl::desc("element type of the imported model: f32 (default), "
                            "bf16, f16 or f64"),
    llvm::cl::init("f32"));

static void registerImportHFLlama() {
  TranslateToMLIRRegistration registration(
      "import-hf-llama",
      "build the mlt model of a Hugging Face LLaMA config.json (or of an HF "
      "model directory, as mlt-run takes one)",
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

/// Checks the command line before MLIR's main reads it, so that what it
/// would refuse without the tool's name (a missing input, no translation)
/// is refused here, prefixed; and takes an HF model directory for its
/// config.json by the rule mlt-run takes one by (HFModelDirectory.h).
/// Returns the arguments to run with.
static mlt::StatusOr<std::vector<std::string>>
checkArguments(int argc, char **argv) {
  std::vector<std::string> args(argv, argv + argc);
  bool translation = false, help = false, importing = false;
  std::optional<size_t> input;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string &arg = args[i];
    // (a translation takes no value: its input is the positional argument)
    for (const char *flag : {"--import-hf-llama=", "-import-hf-llama=",
                             "--mlt-to-plan=", "-mlt-to-plan="})
      if (arg.rfind(flag, 0) == 0) {
        const std::string name(flag, std::strlen(flag) - 1);
        return mlt::errorf(name, " takes no value: pass the input after it, ",
                           name, " ", arg.substr(std::strlen(flag)));
      }
    if (arg == "--import-hf-llama" || arg == "-import-hf-llama")
      importing = translation = true;
    else if (arg == "--mlt-to-plan" || arg == "-mlt-to-plan")
      translation = true;
    else if (arg == "--help" || arg == "-help" || arg == "-h" ||
             arg.rfind("--help-", 0) == 0 || arg == "--version")
      help = true;
    // (the options whose value may follow as the next argument)
    if (arg == "-o" || arg == "--o" || arg == "-dtype" || arg == "--dtype") {
      ++i;
      continue;
    }
    if (arg.empty())
      return mlt::errorf("an empty input path");
    if (arg == "-" || arg[0] == '-')
      continue;
    if (input)
      return mlt::errorf("two inputs, '", args[*input], "' and '", arg,
                         "'; translate one at a time");
    input = i;
  }
  if (help)
    return args;
  auto checkPaths = [&]() -> mlt::Status {
    std::vector<char *> pointers;
    for (std::string &arg : args)
      pointers.push_back(arg.data());
    return mlt::checkToolArguments(int(pointers.size()), pointers.data(),
                                   {"-dtype", "--dtype"});
  };
  if (!translation)
    return mlt::errorf("no translation given: pass --import-hf-llama or "
                       "--mlt-to-plan (see mlt-translate --help)");
  if (!input) {
    MLT_RETURN_IF_ERROR(checkPaths());
    return args;
  }
  std::string &path = args[*input];
  if (importing) {
    // An HF model directory: its config.json, by mlt-run's rule.
    mlt::StatusOr<std::string> config = mlt::hfConfigPath(path);
    if (!config)
      return config.takeStatus();
    path = *config;
  }
  MLT_RETURN_IF_ERROR(mlt::checkInputPath(path));
  MLT_RETURN_IF_ERROR(checkPaths());
  return args;
}

int main(int argc, char **argv) {
  mlt::StatusOr<std::vector<std::string>> args = checkArguments(argc, argv);
  if (!args) {
    llvm::errs() << "mlt-translate: error: " << args.status().message()
                 << "\n";
    return 1;
  }
  std::vector<char *> pointers;
  for (std::string &arg : *args)
    pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  registerImportHFLlama();
  registerExportPlan();
  return failed(mlirTranslateMain(int(args->size()), pointers.data(),
                                  "mlt translations\n"))
             ? 1
             : 0;
}
