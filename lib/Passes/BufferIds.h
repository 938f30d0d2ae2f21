//===- BufferIds.h - a module's buffers by symbol, and by base --*- C++ -*-===//
//
// Part of mlt. What the passes that move or share launches (mlt-group-
// products, mlt-fp8-products) ask of a module's buffers: the BufferOp a
// launch's operand names, and one id per base buffer, so that two operands
// that may overlap (a view and its base, two views of one base) compare
// equal.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_PASSES_BUFFERIDS_H
#define MLT_LIB_PASSES_BUFFERIDS_H

#include "mlt/Dialect/Runtime/RuntimeDialect.h"

#include "mlir/IR/SymbolTable.h"

#include <map>
#include <string>

namespace mlt {

class BufferIds {
public:
  explicit BufferIds(mlir::Operation *module) : symbols(module) {}

  /// The buffer `ref` (a FlatSymbolRefAttr) names; null if none.
  rt_ir::BufferOp bufferOf(mlir::Attribute ref) {
    return symbols.lookup<rt_ir::BufferOp>(
        llvm::cast<mlir::FlatSymbolRefAttr>(ref).getAttr());
  }

  /// The id of the base of the buffer `ref` names (a view's is its base's),
  /// numbered in order of first use.
  int64_t idOf(mlir::Attribute ref) {
    llvm::StringRef name = rt_ir::bufferName(ref);
    if (rt_ir::BufferOp buffer = bufferOf(ref))
      if (auto view = buffer.getViewAttr())
        name = view.getValue();
    return ids.try_emplace(name.str(), int64_t(ids.size())).first->second;
  }

  /// The module's symbol table (a pass that adds buffers inserts them here,
  /// so that later lookups find them and their names stay unique).
  mlir::SymbolTable &table() { return symbols; }

private:
  mlir::SymbolTable symbols;
  std::map<std::string, int64_t> ids;
};

} // namespace mlt

#endif // MLT_LIB_PASSES_BUFFERIDS_H
