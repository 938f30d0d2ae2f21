//===- LaunchOrder.h - what orders the launches of a program ----*- C++ -*-===//
//
// Part of mlt. The passes that move launches of the runtime IR to streams of
// their own (mlt-overlap-tp-comm, mlt-overlap-cp-comm) share this: which
// buffers a launch reads and writes (each by the buffer it lies in, so that
// two views of one bucket conflict), whether two launches may run in either
// order, which launches are collectives over an axis, the first token a
// program does not signal yet, and the joins that
// make each stream wait for a moved launch before it touches what the
// launch does.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_PASSES_LAUNCHORDER_H
#define MLT_LIB_PASSES_LAUNCHORDER_H

#include "mlt/Dialect/Runtime/RuntimeDialect.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringMap.h"

#include <initializer_list>

namespace mlt {

/// The buffers a launch reads and writes, each by the buffer it lies in.
struct LaunchAccess {
  llvm::DenseSet<llvm::StringRef> reads, writes;
};

/// Whether two launches may not swap: one writes what the other reads or
/// writes.
bool conflict(const LaunchAccess &a, const LaunchAccess &b);

/// A module's buffers by name, and the buffer each one lies in.
class ModuleBuffers {
public:
  explicit ModuleBuffers(mlir::ModuleOp module);

  rt_ir::BufferOp lookup(llvm::StringRef name) const {
    return buffers.lookup(name);
  }
  rt_ir::BufferOp of(mlir::Attribute ref) const {
    return buffers.lookup(rt_ir::bufferName(ref));
  }
  /// The buffer `name` lies in: its view's base, or itself.
  llvm::StringRef root(llvm::StringRef name) const;
  LaunchAccess accessOf(rt_ir::LaunchOp launch) const;
  /// Records a buffer made after construction (a view).
  void add(rt_ir::BufferOp buffer);
  /// The last buffer of the module (new ones go after it).
  mlir::Operation *last() const { return lastBuffer; }

private:
  llvm::StringMap<rt_ir::BufferOp> buffers;
  mlir::Operation *lastBuffer = nullptr;
};

/// Whether `launch` is a collective (Kernels.def's) over mesh axis `axis`
/// (an index into the mesh): its group meets it in one order with the
/// other collectives over that axis.
bool isCollectiveOverAxis(rt_ir::LaunchOp launch, int64_t axis);

/// The first token `program` neither signals nor waits for.
int64_t firstFreeToken(rt_ir::ProgramOp program);

/// After moving a launch that touches `moved` to a stream of its own and
/// giving it `token`: the first launch after `after` on each stream, other
/// than the moved launch's and those in `skip`, that conflicts with it or
/// for which `mustFollow` holds (a collective over the same axis, which
/// its group must meet in one order), waits for `token`; later launches of
/// that stream follow by the stream's order.
void joinLater(mlir::Operation *after, const LaunchAccess &moved,
               int64_t token, int64_t movedStream,
               std::initializer_list<int64_t> skip,
               const ModuleBuffers &buffers,
               llvm::function_ref<bool(rt_ir::LaunchOp)> mustFollow);

} // namespace mlt

#endif // MLT_LIB_PASSES_LAUNCHORDER_H
