//===- ShapeRules.h - shared shape helpers of the mlt ops ------*- C++ -*-===//
//
// Part of mlt. Internal to lib/Dialect/MLT: the helpers with which the ops'
// shape rules report errors (worded like verifier messages) and compare
// shapes where a dynamic dimension fits any size.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_DIALECT_MLT_SHAPERULES_H
#define MLT_LIB_DIALECT_MLT_SHAPERULES_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/STLExtras.h"

#include <optional>
#include <string>

namespace mlt::detail {

using namespace mlir;

/// Reports a shape error from `inferReturnTypes`, worded like an op verifier's.
template <typename OpTy, typename... Args>
LogicalResult shapeError(std::optional<Location> loc, Args &&...args) {
  return emitOptionalError(loc, "'", OpTy::getOperationName(), "' op ",
                           std::forward<Args>(args)...);
}

inline bool dimsFit(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

/// The more precise of two fitting dimensions: the static one if any.
inline int64_t mergeDims(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) ? b : a;
}

inline std::string dimStr(int64_t d) {
  return ShapedType::isDynamic(d) ? std::string("?") : std::to_string(d);
}

inline std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (i)
      s += ", ";
    s += dimStr(d);
  }
  return s + "]";
}

/// The operand's ranked tensor type, or an error naming it.
template <typename OpTy>
FailureOr<RankedTensorType> rankedOperand(std::optional<Location> loc,
                                          Value value, StringRef name) {
  auto type = value ? dyn_cast<RankedTensorType>(value.getType()) : nullptr;
  if (!type) {
    (void)shapeError<OpTy>(loc, name, " must be a ranked tensor");
    return failure();
  }
  return type;
}

template <typename OpTy>
LogicalResult requireRank(std::optional<Location> loc, RankedTensorType type,
                          StringRef name, int64_t rank) {
  if (type.getRank() != rank)
    return shapeError<OpTy>(loc, name, " must have rank ", rank, ", got ",
                            type.getRank(), " (shape ",
                            shapeStr(type.getShape()), ")");
  return success();
}

template <typename OpTy>
LogicalResult requireSameElementType(std::optional<Location> loc,
                                     RankedTensorType a, StringRef aName,
                                     RankedTensorType b, StringRef bName) {
  if (a.getElementType() != b.getElementType())
    return shapeError<OpTy>(loc, aName, " and ", bName,
                            " must have the same element type, got ",
                            a.getElementType(), " and ", b.getElementType());
  return success();
}

/// The shape that two tensors of the same shape (up to dynamic sizes) share.
template <typename OpTy>
FailureOr<SmallVector<int64_t>> mergeShapes(std::optional<Location> loc,
                                            RankedTensorType a, StringRef aName,
                                            RankedTensorType b, StringRef bName) {
  if (a.getRank() != b.getRank() ||
      !llvm::all_of(llvm::zip(a.getShape(), b.getShape()), [](auto dims) {
        return dimsFit(std::get<0>(dims), std::get<1>(dims));
      })) {
    (void)shapeError<OpTy>(loc, aName, " and ", bName,
                           " must have the same shape, got ",
                           shapeStr(a.getShape()), " and ",
                           shapeStr(b.getShape()));
    return failure();
  }
  SmallVector<int64_t> shape;
  for (auto [x, y] : llvm::zip(a.getShape(), b.getShape()))
    shape.push_back(mergeDims(x, y));
  return shape;
}


/// Checks that `op` names a declared parameter whose type is `type`, with a
/// layer index exactly when the parameter is per-layer (and in range when
/// the index is known). With `computeCopy` (mlt.load, mlt.accumulate_grad),
/// `type` may instead have a narrower float element type (bf16 or f16 for an
/// f32 parameter): the compute copy of a mixed-precision program.
LogicalResult verifyParamReference(Operation *op,
                                   SymbolTableCollection &symbolTable,
                                   FlatSymbolRefAttr name, Value layer,
                                   Type type, bool computeCopy = false);

/// The size of mesh axis `axis` of the module around `op` (a collective
/// runs over it, a transfer along it), or failure with a diagnostic on `op`
/// when the module has no mesh or the mesh no such axis.
FailureOr<int64_t> meshAxisSize(Operation *op, StringRef axis);

/// An attention's (or its gradient's) query and key sequences: equal, or,
/// on a context-parallel rank (mlt.sequence_shard), the keys the whole
/// sequence of the axis's blocks of queries.
LogicalResult verifyAttentionSequences(Operation *op, Value query, Value key);

} // namespace mlt::detail

#endif // MLT_LIB_DIALECT_MLT_SHAPERULES_H
