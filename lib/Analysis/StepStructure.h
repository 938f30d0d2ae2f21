//===- StepStructure.h - a step's segments and shared launches -*- C++ -*-===//
//
// Part of mlt. What the cost model's schedulers (Timeline.cpp) and its
// measurement (Calibration.cpp) both read off a plan's step: where each
// rank's step is cut into segments that run one after another (a call, or
// a transfer group's calls), and which launches of different ranks are one
// collective or one transfer (each member's k-th collective on a mesh axis
// is the same collective; the n-th send from a rank to another meets the
// other's n-th receive from it). Internal to lib/Analysis.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_ANALYSIS_STEPSTRUCTURE_H
#define MLT_LIB_ANALYSIS_STEPSTRUCTURE_H

#include "mlt/Plan/Mesh.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Support/Status.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace mlt::cost::detail {

/// The plan's mesh; none for a plan of one rank.
StatusOr<std::optional<rt::Mesh>> meshOf(const rt::Plan &plan);

/// A piece of a rank's step that starts once the previous one has ended:
/// one call, or a transfer group's calls.
struct Segment {
  size_t begin = 0, end = 0;
  bool transfers = false;
};
std::vector<Segment> segmentsOf(const rt::RankPlan &rank);

/// When a launch that may start at `ready` starts, and for how long it runs,
/// at launch gap `gap` (Timeline.h): a gap delays its start; a negative one
/// (profiled launches that overstate their kernels) shortens it, to no less
/// than half its time.
std::pair<double, double> launchSpan(double ready, double seconds, double gap);

/// What a collective or transfer launch is called on every side of it:
/// a collective (0, its mesh axis, its group's first rank, k: the k-th on
/// that axis), a transfer (1, sender, receiver, n: the n-th between them).
using InstanceKey = std::tuple<int, uint64_t, uint64_t, uint64_t>;

/// Names one rank's collective and transfer launches, in the order the rank
/// launches them.
class InstanceNamer {
public:
  InstanceNamer(const rt::Mesh &mesh, uint32_t rank)
      : mesh_(mesh), rank_(rank) {}
  /// The key of the rank's next launch of `inst` (a collective or a
  /// transfer), and how many launches share it (its group's size; 2).
  StatusOr<std::pair<InstanceKey, uint32_t>>
  next(const rt::InstructionDesc &inst);

private:
  const rt::Mesh &mesh_;
  uint32_t rank_;
  std::map<int64_t, uint64_t> collectives_;
  /// The rank's group on each axis met so far: its first rank and size
  /// (Mesh::groupOf lists its ranks, as many as the axis is large).
  std::map<int64_t, std::pair<uint64_t, uint32_t>> groups_;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> sends_, receives_;
};

/// The collectives and transfers of a step, each one instance shared by
/// its sides: of[r][c][i] is the instance of instruction i of call c of the
/// plan's r-th rank (plan.ranks[r]; -1 for other launches), members[k] how
/// many launches of the plan's ranks take part in instance k (of a plan of
/// representative ranks, those of its group that the plan holds).
struct Instances {
  std::vector<std::vector<std::vector<int64_t>>> of;
  std::vector<uint32_t> members;
};
StatusOr<Instances> matchInstances(const rt::Plan &plan,
                                   const std::optional<rt::Mesh> &mesh);

} // namespace mlt::cost::detail

#endif // MLT_LIB_ANALYSIS_STEPSTRUCTURE_H
