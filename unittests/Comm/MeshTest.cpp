//===- MeshTest.cpp - mesh parsing, rank arithmetic and group layout ------===//
#include "moe/Runtime/Comm/Mesh.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <map>
#include <set>

using namespace moe::rt::comm;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

Mesh mesh(std::vector<std::string> axes, std::vector<int64_t> shape) {
  return Mesh{std::move(axes), std::move(shape)};
}

TEST(Mesh, ParsesAndPrints) {
  absl::StatusOr<Mesh> m = Mesh::parse("dp=2,fsdp=3,tp=2");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->axes, ElementsAre("dp", "fsdp", "tp"));
  EXPECT_THAT(m->shape, ElementsAre(2, 3, 2));
  EXPECT_EQ(m->size(), 12);
  EXPECT_EQ(m->toString(), "dp=2 x fsdp=3 x tp=2");

  absl::StatusOr<Mesh> empty = Mesh::parse("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 1);
  EXPECT_EQ(empty->toString(), "(no axes)");
}

TEST(Mesh, RejectsBadSpecs) {
  for (const char *spec : {"dp", "dp=", "=2", "dp=2,", "dp=x", "dp=2=3"}) {
    absl::StatusOr<Mesh> m = Mesh::parse(spec);
    EXPECT_FALSE(m.ok()) << spec;
    EXPECT_THAT(m.status().message(), HasSubstr("bad mesh")) << spec;
  }
  EXPECT_THAT(Mesh::parse("dp=2,dp=2").status().message(),
              HasSubstr("mesh axis 'dp' appears twice"));
  EXPECT_THAT(Mesh::parse("dp=0").status().message(),
              HasSubstr("mesh axis 'dp' has size 0; sizes must be positive"));
}

TEST(Mesh, Validates) {
  EXPECT_TRUE(mesh({"dp", "tp"}, {2, 2}).validate().ok());
  EXPECT_TRUE(mesh({}, {}).validate().ok());
  EXPECT_THAT(mesh({"dp"}, {2, 2}).validate().message(),
              HasSubstr("1 axis names but 2 sizes"));
  EXPECT_THAT(mesh({""}, {2}).validate().message(),
              HasSubstr("mesh axis 0 has an empty name"));
  EXPECT_THAT(mesh({"tp", "tp"}, {2, 2}).validate().message(),
              HasSubstr("appears twice"));
  EXPECT_THAT(mesh({"dp"}, {-1}).validate().message(),
              HasSubstr("has size -1"));
  EXPECT_THAT(mesh({"a", "b", "c"}, {65536, 65536, 2}).validate().message(),
              HasSubstr("more ranks than MPI can number"));
}

TEST(Mesh, RanksAreRowMajorLastAxisFastest) {
  Mesh m = mesh({"dp", "fsdp", "tp"}, {2, 3, 2});
  EXPECT_THAT(*m.coordinates(0), ElementsAre(0, 0, 0));
  EXPECT_THAT(*m.coordinates(1), ElementsAre(0, 0, 1));
  EXPECT_THAT(*m.coordinates(2), ElementsAre(0, 1, 0));
  EXPECT_THAT(*m.coordinates(6), ElementsAre(1, 0, 0));
  EXPECT_THAT(*m.coordinates(11), ElementsAre(1, 2, 1));
  for (int64_t r = 0; r < m.size(); ++r) {
    absl::StatusOr<std::vector<int64_t>> c = m.coordinates(r);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(*m.rank(*c), r);
  }
}

TEST(Mesh, RankArithmeticErrors) {
  Mesh m = mesh({"dp", "tp"}, {2, 2});
  EXPECT_EQ(m.coordinates(4).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(m.coordinates(-1).status().message(),
              HasSubstr("rank -1 is outside the mesh dp=2 x tp=2 [0, 4)"));
  EXPECT_THAT(m.rank(std::vector<int64_t>{0}).status().message(),
              HasSubstr("expected 2 coordinates"));
  EXPECT_THAT(m.rank(std::vector<int64_t>{0, 2}).status().message(),
              HasSubstr("coordinate 2 on axis 'tp' is outside [0, 2)"));
  EXPECT_EQ(*m.axisIndex("tp"), 1);
  EXPECT_THAT(m.axisIndex("ep").status().message(),
              HasSubstr("the mesh dp=2 x tp=2 has no axis 'ep'"));
}

TEST(Mesh, GroupOfOneAxis) {
  Mesh m = mesh({"dp", "tp"}, {2, 4});
  // Rank 5 = (dp 1, tp 1): its tp group is dp=1's four ranks.
  absl::StatusOr<Mesh::GroupPlace> tp = m.groupPlace(5, {"tp"});
  ASSERT_TRUE(tp.ok()) << tp.status();
  EXPECT_THAT(tp->members, ElementsAre(4, 5, 6, 7));
  EXPECT_EQ(tp->key, 1);
  EXPECT_EQ(tp->color, 1);
  absl::StatusOr<Mesh::GroupPlace> dp = m.groupPlace(5, {"dp"});
  ASSERT_TRUE(dp.ok());
  EXPECT_THAT(dp->members, ElementsAre(1, 5));
  EXPECT_EQ(dp->key, 1);
  EXPECT_EQ(dp->color, 1);
}

TEST(Mesh, GroupOrderFollowsTheListedAxes) {
  Mesh m = mesh({"dp", "fsdp", "ep", "tp"}, {2, 2, 2, 2});
  // Rank 9 = (1, 0, 0, 1): the {dp, ep} group has tp = 1, fsdp = 0.
  absl::StatusOr<Mesh::GroupPlace> dpEp = m.groupPlace(9, {"dp", "ep"});
  ASSERT_TRUE(dpEp.ok());
  EXPECT_THAT(dpEp->members, ElementsAre(1, 3, 9, 11));
  EXPECT_EQ(dpEp->key, 2);
  // Listed the other way round, ep is the slow axis.
  absl::StatusOr<Mesh::GroupPlace> epDp = m.groupPlace(9, {"ep", "dp"});
  ASSERT_TRUE(epDp.ok());
  EXPECT_THAT(epDp->members, ElementsAre(1, 9, 3, 11));
  EXPECT_EQ(epDp->key, 1);
  EXPECT_EQ(epDp->color, dpEp->color);
}

TEST(Mesh, EmptyAndFullGroups) {
  Mesh m = mesh({"dp", "tp"}, {2, 2});
  absl::StatusOr<Mesh::GroupPlace> none = m.groupPlace(3, {});
  ASSERT_TRUE(none.ok());
  EXPECT_THAT(none->members, ElementsAre(3));
  EXPECT_EQ(none->key, 0);
  EXPECT_EQ(none->color, 3);
  absl::StatusOr<Mesh::GroupPlace> all = m.groupPlace(2, {"dp", "tp"});
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(all->members, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(all->key, 2);
  EXPECT_EQ(all->color, 0);
}

TEST(Mesh, GroupsPartitionTheMesh) {
  Mesh m = mesh({"a", "b", "c"}, {2, 3, 2});
  std::vector<std::vector<std::string>> subsets = {
      {},         {"a"},      {"b"},           {"c"},          {"a", "b"},
      {"c", "a"}, {"b", "c"}, {"a", "b", "c"}, {"c", "b", "a"}};
  for (const auto &axes : subsets) {
    std::map<int64_t, std::vector<int64_t>> byColor;
    std::set<int64_t> seen;
    for (int64_t r = 0; r < m.size(); ++r) {
      absl::StatusOr<Mesh::GroupPlace> place = m.groupPlace(r, axes);
      ASSERT_TRUE(place.ok());
      EXPECT_EQ(place->members[place->key], r);
      auto [it, inserted] = byColor.emplace(place->color, place->members);
      if (!inserted) {
        EXPECT_EQ(it->second, place->members) << "rank " << r;
      }
      seen.insert(r);
    }
    int64_t groupSize = byColor.begin()->second.size();
    EXPECT_EQ(static_cast<int64_t>(byColor.size()) * groupSize, m.size());
    // Colors are 0..groups-1, as MPI_Comm_split wants small non-negatives.
    EXPECT_EQ(byColor.rbegin()->first + 1,
              static_cast<int64_t>(byColor.size()));
  }
}

TEST(Mesh, GroupErrors) {
  Mesh m = mesh({"dp", "tp"}, {2, 2});
  EXPECT_THAT(m.groupPlace(0, {"ep"}).status().message(),
              HasSubstr("has no axis 'ep'"));
  EXPECT_THAT(m.groupPlace(0, {"tp", "tp"}).status().message(),
              HasSubstr("axis 'tp' is listed twice for one group"));
  EXPECT_FALSE(m.groupPlace(4, {"tp"}).ok());
}

} // namespace
