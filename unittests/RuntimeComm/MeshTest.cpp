//===- MeshTest.cpp - device mesh tests -----------------------------------===//
//
// Part of mlt. Tests Mesh: row-major coordinates (last axis fastest) and the
// groups of every axis on the meshes the collectives are tested on (1x1, 4,
// 2x2, 2x3, 3x2x2), against values written out by hand and against the
// defining properties (groups partition the ranks, members differ only on
// the axis, ordered by it); parsing and printing; every validation error.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/Mesh.h"

#include <gtest/gtest.h>

#include <set>

using namespace mlt;
using namespace mlt::rt;

namespace {

Mesh parseOrDie(const std::string &spec) {
  StatusOr<Mesh> mesh = Mesh::parse(spec);
  EXPECT_TRUE(mesh.isOk()) << mesh.status().message();
  return *mesh;
}

std::string createError(std::vector<MeshAxis> axes) {
  StatusOr<Mesh> mesh = Mesh::create(std::move(axes));
  EXPECT_FALSE(mesh.isOk()) << "expected an error";
  return mesh.isOk() ? "" : mesh.status().message();
}

std::string parseError(const std::string &spec) {
  StatusOr<Mesh> mesh = Mesh::parse(spec);
  EXPECT_FALSE(mesh.isOk()) << "expected an error for '" << spec << "'";
  return mesh.isOk() ? "" : mesh.status().message();
}

//===----------------------------------------------------------------------===//
// Coordinates and groups
//===----------------------------------------------------------------------===//

// Tests that ranks are numbered row-major, the last axis fastest, on a 2x3
// mesh written out in full.
TEST(MeshTest, RowMajorLastAxisFastest) {
  Mesh mesh = parseOrDie("dp=2,tp=3");
  EXPECT_EQ(mesh.worldSize(), 6);
  const std::vector<std::vector<int>> expected = {{0, 0}, {0, 1}, {0, 2},
                                                  {1, 0}, {1, 1}, {1, 2}};
  for (int rank = 0; rank < 6; ++rank) {
    StatusOr<std::vector<int>> coords = mesh.coordinates(rank);
    ASSERT_TRUE(coords.isOk());
    EXPECT_EQ(*coords, expected[rank]) << "rank " << rank;
    StatusOr<int> back = mesh.rankAt(expected[rank]);
    ASSERT_TRUE(back.isOk());
    EXPECT_EQ(*back, rank);
  }
}

// Tests the groups of a 2x3 mesh, written out by hand.
TEST(MeshTest, GroupsOf2x3) {
  Mesh mesh = parseOrDie("dp=2,tp=3");
  StatusOr<MeshGroup> tp = mesh.groupOf(4, "tp");
  ASSERT_TRUE(tp.isOk());
  EXPECT_EQ(tp->ranks, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(tp->index, 1);
  StatusOr<MeshGroup> dp = mesh.groupOf(4, "dp");
  ASSERT_TRUE(dp.isOk());
  EXPECT_EQ(dp->ranks, (std::vector<int>{1, 4}));
  EXPECT_EQ(dp->index, 1);
  EXPECT_EQ(mesh.groupOf(2, "dp")->ranks, (std::vector<int>{2, 5}));
  EXPECT_EQ(mesh.groupOf(2, "dp")->index, 0);
  EXPECT_EQ(mesh.groupOf(0, "tp")->ranks, (std::vector<int>{0, 1, 2}));
}

// Tests the groups of a 3x2x2 mesh, written out by hand.
TEST(MeshTest, GroupsOf3x2x2) {
  Mesh mesh = parseOrDie("pp=3,dp=2,tp=2");
  EXPECT_EQ(mesh.worldSize(), 12);
  // Rank 7 = (1, 1, 1): 1*4 + 1*2 + 1.
  EXPECT_EQ(*mesh.coordinates(7), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(mesh.groupOf(7, "pp")->ranks, (std::vector<int>{3, 7, 11}));
  EXPECT_EQ(mesh.groupOf(7, "pp")->index, 1);
  EXPECT_EQ(mesh.groupOf(7, "dp")->ranks, (std::vector<int>{5, 7}));
  EXPECT_EQ(mesh.groupOf(7, "dp")->index, 1);
  EXPECT_EQ(mesh.groupOf(7, "tp")->ranks, (std::vector<int>{6, 7}));
  EXPECT_EQ(mesh.groupOf(7, "tp")->index, 1);
  EXPECT_EQ(mesh.groupOf(8, "pp")->ranks, (std::vector<int>{0, 4, 8}));
  EXPECT_EQ(mesh.groupOf(8, "pp")->index, 2);
}

class MeshShapeTest : public ::testing::TestWithParam<const char *> {};

// Tests, on every mesh of the collective tests, that coordinates round-trip
// and that the groups of each axis are what a collective over that axis
// needs: they partition the ranks, every group has the axis's size, its
// members agree on every other coordinate and come in order of their
// coordinate on the axis, which is also their index.
TEST_P(MeshShapeTest, GroupsPartitionTheRanksAlongEachAxis) {
  Mesh mesh = parseOrDie(GetParam());
  int world = 1;
  for (const MeshAxis &axis : mesh.axes())
    world *= axis.size;
  ASSERT_EQ(mesh.worldSize(), world);

  std::set<std::vector<int>> seen;
  for (int rank = 0; rank < world; ++rank) {
    StatusOr<std::vector<int>> coords = mesh.coordinates(rank);
    ASSERT_TRUE(coords.isOk());
    EXPECT_TRUE(seen.insert(*coords).second) << "rank " << rank;
    EXPECT_EQ(*mesh.rankAt(*coords), rank);
  }

  for (size_t a = 0; a < mesh.numAxes(); ++a) {
    const MeshAxis &axis = mesh.axes()[a];
    std::set<std::vector<int>> groups;
    for (int rank = 0; rank < world; ++rank) {
      StatusOr<MeshGroup> group = mesh.groupOf(rank, axis.name);
      ASSERT_TRUE(group.isOk()) << group.status().message();
      ASSERT_EQ(group->size(), axis.size);
      EXPECT_EQ(group->ranks[group->index], rank);
      std::vector<int> mine = *mesh.coordinates(rank);
      EXPECT_EQ(group->index, mine[a]);
      for (int k = 0; k < group->size(); ++k) {
        std::vector<int> theirs = *mesh.coordinates(group->ranks[k]);
        EXPECT_EQ(theirs[a], k);
        theirs[a] = mine[a];
        EXPECT_EQ(theirs, mine) << "rank " << group->ranks[k] << " in the "
                                << axis.name << " group of rank " << rank;
      }
      groups.insert(group->ranks);
    }
    // Every rank is in exactly one group of the axis.
    EXPECT_EQ(groups.size() * axis.size, size_t(world));
    std::set<int> covered;
    for (const std::vector<int> &group : groups)
      covered.insert(group.begin(), group.end());
    EXPECT_EQ(covered.size(), size_t(world));
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, MeshShapeTest,
                         ::testing::Values("a=1,b=1", "dp=4", "dp=2,tp=2",
                                           "dp=2,tp=3", "pp=3,dp=2,tp=2"));

//===----------------------------------------------------------------------===//
// Parsing, printing, errors
//===----------------------------------------------------------------------===//

// Tests that parse and toString round-trip, that spaces are allowed, and that
// parse and create agree.
TEST(MeshTest, ParsesAndPrints) {
  Mesh mesh = parseOrDie(" dp = 2 , tp=4");
  EXPECT_EQ(mesh.toString(), "dp=2,tp=4");
  EXPECT_EQ(parseOrDie(mesh.toString()), mesh);
  StatusOr<Mesh> created = Mesh::create({{"dp", 2}, {"tp", 4}});
  ASSERT_TRUE(created.isOk());
  EXPECT_EQ(*created, mesh);
  EXPECT_NE(parseOrDie("tp=4,dp=2"), mesh);
  EXPECT_EQ(mesh.findAxis("tp"), std::optional<size_t>(1));
  EXPECT_EQ(mesh.findAxis("pp"), std::nullopt);
  EXPECT_EQ(*mesh.axisIndex("dp"), 0u);
}

TEST(MeshTest, CreateErrors) {
  EXPECT_EQ(createError({}), "a mesh needs at least one axis");
  EXPECT_EQ(createError({{"dp", 2}, {"", 2}}), "mesh axis name is empty");
  EXPECT_EQ(createError({{"dp", 2}, {"dp", 3}}),
            "mesh axis 'dp' appears twice");
  EXPECT_EQ(createError({{"tp", 0}}),
            "mesh axis 'tp' has size 0; sizes must be at least 1");
  EXPECT_EQ(createError({{"tp", -2}}),
            "mesh axis 'tp' has size -2; sizes must be at least 1");
  EXPECT_EQ(createError({{"t p", 2}}),
            "mesh axis name 't p' is not an identifier");
  EXPECT_EQ(createError({{"2d", 2}}),
            "mesh axis name '2d' is not an identifier");
  EXPECT_EQ(createError({{"a", 65536}, {"b", 65536}}),
            "mesh world size exceeds 2147483647 ranks");
}

TEST(MeshTest, ParseErrors) {
  EXPECT_EQ(parseError(""), "mesh '': expected name=size, got ''");
  EXPECT_EQ(parseError("dp"), "mesh 'dp': expected name=size, got 'dp'");
  EXPECT_EQ(parseError("dp=2,"), "mesh 'dp=2,': expected name=size, got ''");
  EXPECT_EQ(parseError("dp=2,,tp=2"),
            "mesh 'dp=2,,tp=2': expected name=size, got ''");
  EXPECT_EQ(parseError("dp="),
            "mesh 'dp=': axis 'dp' needs an integer size, got ''");
  EXPECT_EQ(parseError("dp=x"),
            "mesh 'dp=x': axis 'dp' needs an integer size, got 'x'");
  EXPECT_EQ(parseError("dp=-1"),
            "mesh 'dp=-1': axis 'dp' needs an integer size, got '-1'");
  EXPECT_EQ(parseError("dp=2,dp=2"),
            "mesh 'dp=2,dp=2': mesh axis 'dp' appears twice");
  EXPECT_EQ(parseError("=2"), "mesh '=2': mesh axis name is empty");
  EXPECT_EQ(parseError("dp=0"),
            "mesh 'dp=0': mesh axis 'dp' has size 0; sizes must be at least 1");
}

TEST(MeshTest, LookupErrors) {
  Mesh mesh = parseOrDie("dp=2,tp=2");
  EXPECT_EQ(mesh.axisIndex("pp").status().message(),
            "mesh dp=2,tp=2 has no axis 'pp'");
  EXPECT_EQ(mesh.groupOf(0, "pp").status().message(),
            "mesh dp=2,tp=2 has no axis 'pp'");
  EXPECT_EQ(mesh.groupOf(4, "dp").status().message(),
            "rank 4 is outside mesh dp=2,tp=2 of 4 ranks");
  EXPECT_EQ(mesh.coordinates(-1).status().message(),
            "rank -1 is outside mesh dp=2,tp=2 of 4 ranks");
  EXPECT_EQ(mesh.rankAt({1}).status().message(),
            "mesh dp=2,tp=2 has 2 axes, got 1 coordinates");
  EXPECT_EQ(mesh.rankAt({0, 2}).status().message(),
            "coordinate 2 is outside mesh axis 'tp' of size 2");
}

} // namespace
