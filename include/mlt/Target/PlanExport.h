//===- PlanExport.h - mlt_rt module to plan file ---------------*- C++ -*-===//
//
// Part of mlt. Serializes a lowered, memory-planned module (`mlt_rt` buffers
// and programs) into the FlatBuffers plan file that the runtime loads.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_TARGET_PLANEXPORT_H
#define MLT_TARGET_PLANEXPORT_H

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace mlt {
namespace rt {
struct Plan;
} // namespace rt

/// Writes the plan of `module` into `bytes`. Fails with a diagnostic on the
/// module when it is not ready (a buffer without an offset, no arena size,
/// no model configuration) or when the runtime's checks (parsePlan) refuse
/// the plan. The plan those checks read goes into `parsed` when given, so
/// that a caller about to run it need not read and check it again.
///
/// With `representatives`, the plan holds one rank per pipeline stage (the
/// stage's first, whose coordinates off `pp` are all 0), checked as
/// parseRepresentativePlan does: what the cost model needs of a plan, at a
/// fraction of the whole plan's size when dp and tp are large.
mlir::LogicalResult exportPlan(mlir::ModuleOp module, std::string &bytes,
                               rt::Plan *parsed = nullptr,
                               bool representatives = false);

/// The HF `config.json` text of a model configuration.
std::string hfConfigJson(const struct LlamaConfig &config);

} // namespace mlt

#endif // MLT_TARGET_PLANEXPORT_H
