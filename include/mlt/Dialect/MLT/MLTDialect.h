//===- MLTDialect.h - the mlt model dialect ---------------------*- C++ -*-===//
//
// Part of mlt. Declares the `mlt` dialect, which holds a LLaMA model's forward
// pass and loss (see MLTOps.td for the ops and their conventions).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_MLT_MLTDIALECT_H
#define MLT_DIALECT_MLT_MLTDIALECT_H

#include "mlt/Layout/Layout.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"

#include "mlt/Dialect/MLT/MLTOpsDialect.h.inc"

#endif // MLT_DIALECT_MLT_MLTDIALECT_H
