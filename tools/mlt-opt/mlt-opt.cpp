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

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

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
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "mlt optimizer driver\n", registry));
}
