//===- Mesh.h - a device mesh with named axes -------------------*- C++ -*-===//
//
// Part of mlt. A `Mesh` arranges the ranks of a run on an N-dimensional grid
// whose axes have names and sizes, e.g. {{"dp", 2}, {"tp", 2}}: the world size
// is the product of the sizes, and a rank's coordinates are its row-major
// position (the LAST axis varies fastest, as in JAX and Shardy meshes):
//
//   rank = ((c0 * s1 + c1) * s2 + c2) ...     dp=2,tp=2:  rank 0 = (0,0)
//                                                         rank 1 = (0,1)
//                                                         rank 2 = (1,0) ...
//
// A collective "over axis a" runs in the group of ranks that share every
// coordinate except a's, ordered by their coordinate on a; `groupOf` gives
// that group and the rank's index in it (its coordinate on a). With dp=2,tp=2
// the tp groups are {0,1} and {2,3}, the dp groups {0,2} and {1,3}.
//
// Meshes are plain values, validated when built (`create`, `parse`), so every
// Mesh in the program is well formed.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_MESH_H
#define MLT_PLAN_MESH_H

#include "mlt/Support/Status.h"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlt::rt {

/// One named axis of a mesh.
struct MeshAxis {
  std::string name;
  int size = 1;

  friend bool operator==(const MeshAxis &a, const MeshAxis &b) {
    return a.name == b.name && a.size == b.size;
  }
  friend bool operator!=(const MeshAxis &a, const MeshAxis &b) {
    return !(a == b);
  }
};

/// The ranks a collective over one axis runs in, and one rank's place in it.
struct MeshGroup {
  /// World ranks in group order (by their coordinate on the axis).
  std::vector<int> ranks;
  /// The rank's index in `ranks` (its coordinate on the axis).
  int index = 0;

  int size() const { return static_cast<int>(ranks.size()); }
};

class Mesh {
public:
  /// Validates `axes`: at least one; names are identifiers
  /// ([A-Za-z_][A-Za-z0-9_]*), pairwise distinct; sizes >= 1; the world size
  /// fits in an int.
  static StatusOr<Mesh> create(std::vector<MeshAxis> axes);

  /// Parses "dp=2,tp=2" (spaces around names, '=' and ',' are allowed) and
  /// validates it as `create` does.
  static StatusOr<Mesh> parse(std::string_view spec);

  const std::vector<MeshAxis> &axes() const { return axes_; }
  size_t numAxes() const { return axes_.size(); }
  /// The number of ranks: the product of the axis sizes.
  int worldSize() const { return worldSize_; }

  /// The position of the axis named `name`, if there is one.
  std::optional<size_t> findAxis(std::string_view name) const;
  /// The position of the axis named `name`; fails naming it and the mesh.
  StatusOr<size_t> axisIndex(std::string_view name) const;

  /// The coordinates of `rank`, one per axis; fails when it is out of range.
  StatusOr<std::vector<int>> coordinates(int rank) const;
  /// The rank at `coordinates`; fails on a wrong count or a coordinate out of
  /// its axis's range.
  StatusOr<int> rankAt(const std::vector<int> &coordinates) const;

  /// The group of `rank` for a collective over `axis`: the ranks whose
  /// coordinates equal `rank`'s on every other axis, by their coordinate on
  /// `axis`. Fails on an unknown axis or a rank out of range.
  StatusOr<MeshGroup> groupOf(int rank, std::string_view axis) const;

  /// "dp=2,tp=2"; `parse` reads it back.
  std::string toString() const;

  friend bool operator==(const Mesh &a, const Mesh &b) {
    return a.axes_ == b.axes_;
  }
  friend bool operator!=(const Mesh &a, const Mesh &b) { return !(a == b); }

private:
  Mesh() = default;

  std::vector<MeshAxis> axes_;
  /// strides_[a] = product of the sizes of the axes after a.
  std::vector<int> strides_;
  int worldSize_ = 1;
};

} // namespace mlt::rt

#endif // MLT_PLAN_MESH_H
