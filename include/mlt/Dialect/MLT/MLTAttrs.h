//===- MLTAttrs.h - mlt attributes ------------------------------*- C++ -*-===//
//
// Part of mlt. Attributes of the `mlt` dialect (the model configuration, the
// rotary scaling, meshes and shardings).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_MLT_MLTATTRS_H
#define MLT_DIALECT_MLT_MLTATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"

#include "mlt/Plan/RopeFrequencies.h"

#define GET_ATTRDEF_CLASSES
#include "mlt/Dialect/MLT/MLTAttrs.h.inc"

#endif // MLT_DIALECT_MLT_MLTATTRS_H
