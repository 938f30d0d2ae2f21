//===- MLTInterfaces.h - mlt op interfaces ----------------------*- C++ -*-===//
//
// Part of mlt. Declares the interfaces of MLTInterfaces.td (the gradient rule).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_MLT_MLTINTERFACES_H
#define MLT_DIALECT_MLT_MLTINTERFACES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"

#include "mlt/Dialect/MLT/ShardingRule.h"

#include "mlt/Dialect/MLT/MLTInterfaces.h.inc"

#endif // MLT_DIALECT_MLT_MLTINTERFACES_H
