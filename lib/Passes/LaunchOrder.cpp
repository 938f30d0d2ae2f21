//===- LaunchOrder.cpp - what orders the launches of a program ------------===//
//
// Part of mlt. See LaunchOrder.h.
//
//===----------------------------------------------------------------------===//

#include "LaunchOrder.h"

#include "mlt/Plan/KernelInfo.h"

#include <algorithm>

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;

bool mlt::conflict(const LaunchAccess &a, const LaunchAccess &b) {
  for (StringRef w : a.writes)
    if (b.reads.contains(w) || b.writes.contains(w))
      return true;
  for (StringRef w : b.writes)
    if (a.reads.contains(w))
      return true;
  return false;
}

bool mlt::isCollectiveOverAxis(rtir::LaunchOp launch, int64_t axis) {
  const rt::KernelSignature *signature =
      rt::lookupKernel(std::string_view(launch.getKernel()));
  if (!signature || !rt::isCollectiveKernel(signature->kernel))
    return false;
  const int position = rt::meshAxisAttribute(signature->kernel);
  ArrayRef<int64_t> ints = launch.getInts();
  return position >= 0 && size_t(position) < ints.size() &&
         ints[size_t(position)] == axis;
}

ModuleBuffers::ModuleBuffers(ModuleOp module) {
  for (rtir::BufferOp buffer : module.getOps<rtir::BufferOp>())
    add(buffer);
}

void ModuleBuffers::add(rtir::BufferOp buffer) {
  buffers[buffer.getSymName()] = buffer;
  lastBuffer = buffer;
}

StringRef ModuleBuffers::root(StringRef name) const {
  for (rtir::BufferOp buffer = buffers.lookup(name);
       buffer && buffer.getView(); buffer = buffers.lookup(*buffer.getView()))
    name = *buffer.getView();
  return name;
}

LaunchAccess ModuleBuffers::accessOf(rtir::LaunchOp launch) const {
  LaunchAccess access;
  for (Attribute ref : launch.getInputs())
    access.reads.insert(root(rtir::bufferName(ref)));
  for (Attribute ref : launch.getOutputs())
    access.writes.insert(root(rtir::bufferName(ref)));
  return access;
}

int64_t mlt::firstFreeToken(rtir::ProgramOp program) {
  int64_t next = 0;
  for (auto launch : program.getBody().getOps<rtir::LaunchOp>()) {
    if (std::optional<int64_t> token = launch.getToken())
      next = std::max(next, *token + 1);
    for (int64_t token : launch.getWaits())
      next = std::max(next, token + 1);
  }
  return next;
}

void mlt::joinLater(Operation *after, const LaunchAccess &moved,
                    int64_t token, int64_t movedStream,
                    std::initializer_list<int64_t> skip,
                    const ModuleBuffers &buffers,
                    function_ref<bool(rtir::LaunchOp)> mustFollow) {
  llvm::DenseSet<int64_t> waited{movedStream};
  waited.insert(skip.begin(), skip.end());
  for (Operation *op = after->getNextNode(); op; op = op->getNextNode()) {
    auto launch = dyn_cast<rtir::LaunchOp>(op);
    if (!launch || waited.contains(launch.getStreamIndex()))
      continue;
    if (!conflict(moved, buffers.accessOf(launch)) && !mustFollow(launch))
      continue;
    SmallVector<int64_t> waits(launch.getWaits());
    waits.push_back(token);
    launch.setWaits(waits);
    waited.insert(launch.getStreamIndex());
  }
}
