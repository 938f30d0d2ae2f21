//===- Mesh.cpp - a device mesh with named axes ---------------------------===//
//
// Part of mlt. Validation, parsing and the row-major rank <-> coordinates
// arithmetic of Mesh. Strides are computed once at creation, so a rank's
// coordinate on an axis is (rank / stride) % size.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/Mesh.h"

#include <climits>
#include <set>

using namespace mlt;
using namespace mlt::rt;

namespace {

bool isIdentifier(std::string_view name) {
  auto isAlpha = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  };
  if (name.empty() || !isAlpha(name.front()))
    return false;
  for (char c : name)
    if (!isAlpha(c) && !(c >= '0' && c <= '9'))
      return false;
  return true;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  return text;
}

} // namespace

StatusOr<Mesh> Mesh::create(std::vector<MeshAxis> axes) {
  if (axes.empty())
    return Status::error("a mesh needs at least one axis");
  std::set<std::string> seen;
  int64_t world = 1;
  for (const MeshAxis &axis : axes) {
    if (axis.name.empty())
      return Status::error("mesh axis name is empty");
    if (!isIdentifier(axis.name))
      return errorf("mesh axis name '", axis.name, "' is not an identifier");
    if (!seen.insert(axis.name).second)
      return errorf("mesh axis '", axis.name, "' appears twice");
    if (axis.size < 1)
      return errorf("mesh axis '", axis.name, "' has size ", axis.size,
                    "; sizes must be at least 1");
    world *= axis.size;
    if (world > INT_MAX)
      return errorf("mesh world size exceeds ", INT_MAX, " ranks");
  }

  Mesh mesh;
  mesh.axes_ = std::move(axes);
  mesh.worldSize_ = static_cast<int>(world);
  mesh.strides_.assign(mesh.axes_.size(), 1);
  for (size_t a = mesh.axes_.size() - 1; a > 0; --a)
    mesh.strides_[a - 1] = mesh.strides_[a] * mesh.axes_[a].size;
  return mesh;
}

StatusOr<Mesh> Mesh::parse(std::string_view spec) {
  std::vector<MeshAxis> axes;
  std::string_view rest = spec;
  while (true) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    size_t equals = item.find('=');
    if (equals == std::string_view::npos)
      return errorf("mesh '", spec, "': expected name=size, got '", trim(item),
                    "'");
    std::string_view name = trim(item.substr(0, equals));
    std::string_view size = trim(item.substr(equals + 1));
    if (size.empty() || size.size() > 9 ||
        size.find_first_not_of("0123456789") != std::string_view::npos)
      return errorf("mesh '", spec, "': axis '", name,
                    "' needs an integer size, got '", size, "'");
    axes.push_back({std::string(name), std::stoi(std::string(size))});
    if (comma == std::string_view::npos)
      break;
    rest.remove_prefix(comma + 1);
  }
  StatusOr<Mesh> mesh = create(std::move(axes));
  if (!mesh)
    return mesh.takeStatus().withContext("mesh '" + std::string(spec) + "'");
  return mesh;
}

std::optional<size_t> Mesh::findAxis(std::string_view name) const {
  for (size_t a = 0; a < axes_.size(); ++a)
    if (axes_[a].name == name)
      return a;
  return std::nullopt;
}

StatusOr<size_t> Mesh::axisIndex(std::string_view name) const {
  if (std::optional<size_t> axis = findAxis(name))
    return *axis;
  return errorf("mesh ", toString(), " has no axis '", name, "'");
}

StatusOr<std::vector<int>> Mesh::coordinates(int rank) const {
  if (rank < 0 || rank >= worldSize_)
    return errorf("rank ", rank, " is outside mesh ", toString(), " of ",
                  worldSize_, " ranks");
  std::vector<int> coords(axes_.size());
  for (size_t a = 0; a < axes_.size(); ++a)
    coords[a] = (rank / strides_[a]) % axes_[a].size;
  return coords;
}

StatusOr<int> Mesh::rankAt(const std::vector<int> &coordinates) const {
  if (coordinates.size() != axes_.size())
    return errorf("mesh ", toString(), " has ", axes_.size(), " axes, got ",
                  coordinates.size(), " coordinates");
  int rank = 0;
  for (size_t a = 0; a < axes_.size(); ++a) {
    if (coordinates[a] < 0 || coordinates[a] >= axes_[a].size)
      return errorf("coordinate ", coordinates[a], " is outside mesh axis '",
                    axes_[a].name, "' of size ", axes_[a].size);
    rank += coordinates[a] * strides_[a];
  }
  return rank;
}

StatusOr<MeshGroup> Mesh::groupOf(int rank, std::string_view axis) const {
  StatusOr<size_t> a = axisIndex(axis);
  if (!a)
    return a.takeStatus();
  StatusOr<std::vector<int>> coords = coordinates(rank);
  if (!coords)
    return coords.takeStatus();
  int coordinate = (*coords)[*a];
  int first = rank - coordinate * strides_[*a];
  MeshGroup group;
  group.index = coordinate;
  group.ranks.reserve(axes_[*a].size);
  for (int c = 0; c < axes_[*a].size; ++c)
    group.ranks.push_back(first + c * strides_[*a]);
  return group;
}

std::string Mesh::toString() const {
  std::string text;
  for (const MeshAxis &axis : axes_) {
    if (!text.empty())
      text += ',';
    text += axis.name + "=" + std::to_string(axis.size);
  }
  return text;
}
