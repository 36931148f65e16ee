#include "controller/scheduler.h"

#include <gtest/gtest.h>

namespace eft::controller {
namespace {

NodeCapacity Node(const std::string& name, int free, bool ready = true, bool drained = false) {
  NodeCapacity n;
  n.name = name;
  n.ready = ready;
  n.drained = drained;
  for (int i = 0; i < free; ++i) n.free_slots.push_back(i);
  return n;
}

TEST(PlaceGang, TakesUpToMaxInNameOrder) {
  PlacementRequest r{2, 3, 1, {}};
  Placement p = PlaceGang(r, {Node("c", 1), Node("a", 1), Node("d", 1), Node("b", 1)});
  ASSERT_TRUE(p.placed);
  EXPECT_EQ(p.nodes, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(p.slots, (std::vector<std::vector<int>>{{0}, {0}, {0}}));
}

TEST(PlaceGang, KeepsPreviousNodesFirstSoRankZeroStaysPut) {
  PlacementRequest r{1, 3, 1, {"c", "a"}};
  Placement p = PlaceGang(r, {Node("a", 1), Node("b", 1), Node("c", 1)});
  ASSERT_TRUE(p.placed);
  EXPECT_EQ(p.nodes, (std::vector<std::string>{"c", "a", "b"}));
}

TEST(PlaceGang, NeedsMinNodesWithEnoughFreeSlotsAndSaysWhy) {
  PlacementRequest r{2, 2, 4, {}};
  Placement p = PlaceGang(r, {Node("a", 4), Node("b", 3), Node("c", 8, false), Node("d", 8, true, true)});
  EXPECT_FALSE(p.placed);
  EXPECT_EQ(p.why_not, "needs 2 nodes with 4 free slots, 1 available (b: 3 free slots, c: lost, d: drained)");
  EXPECT_EQ(PlaceGang(r, {}).why_not, "needs 2 nodes with 4 free slots, 0 available (no nodes registered)");
}

TEST(PlaceGang, UsesTheLowestFreeSlots) {
  NodeCapacity n;
  n.name = "a";
  n.ready = true;
  n.free_slots = {1, 3, 6};
  Placement p = PlaceGang({1, 1, 2, {}}, {n});
  ASSERT_TRUE(p.placed);
  EXPECT_EQ(p.slots[0], (std::vector<int>{1, 3}));
}

}  // namespace
}  // namespace eft::controller
