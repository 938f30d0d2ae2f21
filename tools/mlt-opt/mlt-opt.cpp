//===- mlt-opt.cpp - the mlt optimizer driver -----------------------------===//
//
// Part of mlt. Parses, verifies and prints `mlt` IR and runs mlt passes on it,
// like mlir-opt: `mlt-opt models/llama/tiny.mlir -mlt-unroll-layers`.
//
//===----------------------------------------------------------------------===//

#include "mlt/Compiler/Pipeline.h"
#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"

#include "mlt/Support/FileKind.h"
#include "mlt/Support/Threads.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

#include <vector>

int main(int argc, char **argv) {
  if (mlt::Status paths = mlt::checkToolArguments(argc, argv); !paths.isOk()) {
    llvm::errs() << "mlt-opt: error: " << paths.message() << "\n";
    return 1;
  }
  mlir::DialectRegistry registry;
  registry.insert<mlt::MLTDialect, mlt::rt_ir::MLTRTDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect>();
  mlt::registerMLTPasses();
  mlt::registerTrainPipeline();
  // Generic clean-ups that are useful between mlt passes.
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  // One thread where the process cannot start a pool (a tight address-space
  // limit), rather than LLVM's "pthread_create failed" abort.
  std::vector<char *> args(argv, argv + argc);
  char disableThreading[] = "--mlir-disable-threading";
  if (!mlt::canStartThreadPool())
    args.push_back(disableThreading);
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      int(args.size()), args.data(), "mlt optimizer driver\n", registry));
}
