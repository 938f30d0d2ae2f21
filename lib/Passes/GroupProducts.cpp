//===- GroupProducts.cpp - same-shape products as one launch --------------===//
//
// Part of mlt. Implements mlt-group-products (Passes.td): per program, the
// launches become mlt::analysis::GroupItems (their kind the product's shape
// and types, their buffers by base), groupLaunches orders them, and each
// group becomes one matmul_group launch at its place.
//
//===----------------------------------------------------------------------===//

#include "BufferIds.h"

#include "mlt/Analysis/ProductGroups.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"

#include "mlir/IR/SymbolTable.h"

#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace mlt {
#define GEN_PASS_DEF_MLTGROUPPRODUCTS
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;

namespace {

/// The buffers' ids (a view's is its base's) and the products' kinds.
class ItemBuilder {
public:
  explicit ItemBuilder(Operation *module) : buffers(module) {}

  analysis::GroupItem item(Operation &op) {
    analysis::GroupItem item;
    auto launch = dyn_cast<rtir::LaunchOp>(op);
    if (!launch) {
      item.barrier = true;
      return item;
    }
    item.barrier = !launch.isPlain();
    for (Attribute ref : launch.getInputs())
      item.reads.push_back(idOf(ref));
    for (Attribute ref : launch.getOutputs())
      item.writes.push_back(idOf(ref));
    const StringRef kernel = launch.getKernel();
    if (!item.barrier && (kernel == "matmul" || kernel == "matmul_accumulate"))
      item.kind = kindOf(launch);
    return item;
  }

private:
  rtir::BufferOp bufferOf(Attribute ref) { return buffers.bufferOf(ref); }
  int64_t idOf(Attribute ref) { return buffers.idOf(ref); }

  /// One kind per kernel, ints and operand and result types.
  uint64_t kindOf(rtir::LaunchOp launch) {
    std::string types;
    for (Attribute ref : llvm::concat<const Attribute>(
             launch.getInputs().getValue(), launch.getOutputs().getValue())) {
      rtir::BufferOp buffer = bufferOf(ref);
      std::string text;
      llvm::raw_string_ostream os(text);
      if (buffer)
        os << buffer.getTensorType().getElementType();
      types += text + ";";
    }
    const auto key = std::make_tuple(
        launch.getKernel().str(),
        std::vector<int64_t>(launch.getInts().begin(), launch.getInts().end()),
        types);
    return kinds.try_emplace(key, uint64_t(kinds.size() + 1)).first->second;
  }

  BufferIds buffers;
  std::map<std::tuple<std::string, std::vector<int64_t>, std::string>, uint64_t>
      kinds;
};

/// One matmul_group launch in place of `group` (at its first member): the
/// members' a operands, then their b operands, then their results.
void replaceGroup(ArrayRef<rtir::LaunchOp> group) {
  rtir::LaunchOp first = group.front();
  SmallVector<Attribute> as, bs, cs;
  for (rtir::LaunchOp member : group) {
    as.push_back(member.getInputs()[0]);
    bs.push_back(member.getInputs()[1]);
    cs.push_back(member.getOutputs()[0]);
  }
  llvm::append_range(as, bs);
  SmallVector<int64_t> ints(first.getInts().begin(), first.getInts().end());
  ints.push_back(first.getKernel() == "matmul_accumulate" ? 1 : 0);
  OpBuilder b(first);
  rtir::LaunchOp::create(b, first.getLoc(), "matmul_group", as, cs, ints);
  for (rtir::LaunchOp member : group)
    member.erase();
}

class MLTGroupProductsPass
    : public mlt::impl::MLTGroupProductsBase<MLTGroupProductsPass> {
public:
  using MLTGroupProductsBase::MLTGroupProductsBase;

  void runOnOperation() override {
    if (window < 1) {
      getOperation().emitError("mlt-group-products: window must be at "
                               "least 1, got ")
          << static_cast<int64_t>(window);
      return signalPassFailure();
    }
    ItemBuilder builder(getOperation());
    bool changed = false;
    for (rtir::ProgramOp program : getOperation().getOps<rtir::ProgramOp>()) {
      Block &body = program.getBody().front();
      SmallVector<Operation *> ops;
      std::vector<analysis::GroupItem> items;
      for (Operation &op : body) {
        ops.push_back(&op);
        items.push_back(builder.item(op));
      }
      const analysis::LaunchGrouping grouping =
          analysis::groupLaunches(items, size_t(window));
      if (grouping.groups.empty())
        continue;
      changed = true;
      // The new order, then each group as one launch.
      for (size_t index : grouping.order)
        ops[index]->moveBefore(&body, body.end());
      for (const std::vector<size_t> &group : grouping.groups) {
        SmallVector<rtir::LaunchOp> launches;
        for (size_t index : group)
          launches.push_back(cast<rtir::LaunchOp>(ops[index]));
        replaceGroup(launches);
      }
    }
    if (!changed)
      markAllAnalysesPreserved();
  }
};

} // namespace
