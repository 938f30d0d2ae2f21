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

namespace mlt {

/// The special-token ids of `#mlt.llama` (bos_token_id, ...): `2` as an i64
/// IntegerAttr, `[128001, 128009]` as a DenseI64ArrayAttr.
mlir::FailureOr<mlir::Attribute> parseTokenIds(mlir::AsmParser &parser);
void printTokenIds(mlir::AsmPrinter &printer, mlir::Attribute ids);
/// Whether `ids` is one of those two forms.
bool isTokenIds(mlir::Attribute ids);

} // namespace mlt

#define GET_ATTRDEF_CLASSES
#include "mlt/Dialect/MLT/MLTAttrs.h.inc"

#endif // MLT_DIALECT_MLT_MLTATTRS_H
