#include "controller/resize_policy.h"

#include <gtest/gtest.h>

namespace eft::controller {
namespace {

// A job running on node0,node1 of at most 3, node2 free again after it ran an earlier attempt, no
// resize so far, far from its end.
GrowInput Base() {
  GrowInput in;
  in.running = true;
  in.grow_enabled = true;
  in.nodes = 2;
  in.max_nodes = 3;
  in.free_nodes = {"node2"};
  in.known_nodes = {"node0", "node1", "node2"};
  in.now_ms = 1'000'000;
  in.cooldown_ms = 60'000;
  in.step = 20;
  in.total_steps = 200;
  in.checkpoint_every = 10;
  return in;
}

TEST(DecideGrow, ANodeThatCameBackIsTakenAndNamed) {
  GrowDecision d = DecideGrow(Base());
  ASSERT_TRUE(d.grow);
  EXPECT_EQ(d.from_nodes, 2);
  EXPECT_EQ(d.to_nodes, 3);
  EXPECT_EQ(d.added, (std::vector<std::string>{"node2"}));
  EXPECT_EQ(d.reason, "node2 is back, 2 -> 3 nodes");
  EXPECT_EQ(d.retry_at_ms, 0);
}

TEST(DecideGrow, TakesFreeNodesUpToMaxInTheGivenOrder) {
  GrowInput in = Base();
  in.nodes = 1;
  in.max_nodes = 3;
  in.free_nodes = {"node2", "node7", "node9"};
  GrowDecision d = DecideGrow(in);
  ASSERT_TRUE(d.grow);
  EXPECT_EQ(d.to_nodes, 3);
  EXPECT_EQ(d.added, (std::vector<std::string>{"node2", "node7"}));
  EXPECT_EQ(d.reason, "node2 is back and node7 is available, 1 -> 3 nodes");
  in.max_nodes = 8;
  EXPECT_EQ(DecideGrow(in).reason, "node2 is back, node7 is available and node9 is available, 1 -> 4 nodes");
}

TEST(DecideGrow, NothingToDecideSaysNothing) {
  for (auto change : std::vector<void (*)(GrowInput&)>{
           [](GrowInput& in) { in.running = false; },      // STARTING: not proven to work yet
           [](GrowInput& in) { in.grow_enabled = false; },  // resources.grow: false
           [](GrowInput& in) { in.nodes = 3; },             // already at nodes.max
           [](GrowInput& in) { in.free_nodes.clear(); },    // no capacity
       }) {
    GrowInput in = Base();
    change(in);
    GrowDecision d = DecideGrow(in);
    EXPECT_FALSE(d.grow);
    EXPECT_EQ(d.reason, "");
    EXPECT_EQ(d.to_nodes, in.nodes);
    EXPECT_TRUE(d.added.empty());
  }
}

TEST(DecideGrow, CooldownHoldsUntilItEndsAndSaysWhen) {
  GrowInput in = Base();
  in.last_resize_ms = in.now_ms - 12'300;
  GrowDecision d = DecideGrow(in);
  EXPECT_FALSE(d.grow);
  EXPECT_EQ(d.reason, "cooldown: the last resize was 12.3 s ago, resources.resize_cooldown_seconds is 60.0");
  EXPECT_EQ(d.retry_at_ms, in.last_resize_ms + 60'000);
  in.now_ms = in.last_resize_ms + 59'999;
  EXPECT_FALSE(DecideGrow(in).grow);
  in.now_ms = in.last_resize_ms + 60'000;  // exactly the cooldown: allowed
  EXPECT_TRUE(DecideGrow(in).grow);
  in.cooldown_ms = 0;
  in.now_ms = in.last_resize_ms;
  EXPECT_TRUE(DecideGrow(in).grow) << "a zero cooldown never holds";
}

TEST(DecideGrow, NotWithinOneCheckpointIntervalOfTheEnd) {
  GrowInput in = Base();
  in.step = 190;  // 10 steps left, interval 10
  GrowDecision d = DecideGrow(in);
  EXPECT_FALSE(d.grow);
  EXPECT_EQ(d.reason, "near the end: 10 steps left, within one checkpoint interval (10 steps)");
  EXPECT_EQ(d.retry_at_ms, 0);
  in.step = 189;  // 11 left
  EXPECT_TRUE(DecideGrow(in).grow);
  in.step = 250;  // past the reported total (max_steps lowered): still the end
  EXPECT_FALSE(DecideGrow(in).grow);
  // Unknown total, no step yet, or no periodic checkpoints: the rule cannot apply.
  in.step = 195;
  in.total_steps = 0;
  EXPECT_TRUE(DecideGrow(in).grow);
  in.total_steps = 200;
  in.checkpoint_every = 0;
  EXPECT_TRUE(DecideGrow(in).grow);
  in.checkpoint_every = 10;
  in.step = 0;
  EXPECT_TRUE(DecideGrow(in).grow);
}

TEST(DecideGrow, CooldownIsReportedBeforeTheEndRule) {
  GrowInput in = Base();
  in.step = 195;
  in.last_resize_ms = in.now_ms - 1000;
  EXPECT_EQ(DecideGrow(in).reason.rfind("cooldown:", 0), 0u);
}

AttemptRecord Attempt(int nodes, int64_t start_ms) {
  AttemptRecord a;
  a.nodes.assign(nodes, "n");
  a.start_ms = start_ms;
  return a;
}

TEST(LastResizeMs, TheNewestAttemptWhoseNodeCountChanged) {
  EXPECT_EQ(LastResizeMs({}), 0);
  EXPECT_EQ(LastResizeMs({Attempt(2, 100)}), 0) << "the first placement is not a resize";
  EXPECT_EQ(LastResizeMs({Attempt(2, 100), Attempt(2, 200)}), 0) << "a restart at the same size is not either";
  EXPECT_EQ(LastResizeMs({Attempt(3, 100), Attempt(2, 200), Attempt(2, 300)}), 200);
  EXPECT_EQ(LastResizeMs({Attempt(3, 100), Attempt(2, 200), Attempt(3, 300), Attempt(3, 400)}), 300);
}

TEST(ResizeEvents, TheReasonLabelRoundTripsThroughTheEventMessage) {
  for (ResizeReason r : kResizeReasons) {
    EventRecord e;
    e.type = kResizedEvent;
    e.message = ResizedEventMessage(r, "node2 is back, 2 -> 3 nodes");
    ASSERT_TRUE(ResizeReasonOf(e).has_value()) << e.message;
    EXPECT_EQ(*ResizeReasonOf(e), r);
  }
  EXPECT_EQ(ResizedEventMessage(ResizeReason::kEvict, "x"), "evict: x");
  EventRecord other;
  other.type = "attempt_ended";
  other.message = "grow: looks like one";
  EXPECT_FALSE(ResizeReasonOf(other).has_value());
  other.type = kResizedEvent;
  other.message = "spin: unknown label";
  EXPECT_FALSE(ResizeReasonOf(other).has_value());
}

// The end kind marks attempts stopped for a resize or a preemption; the words of the reason do not
// (a reason that reads like one is not one).
TEST(ResizeEvents, EndKindMarksTheAttemptsStoppedForAResize) {
  AttemptRecord a;
  a.end_ms = 5;
  a.end_reason = ResizedEndReason("node2 is back, 2 -> 3 nodes");
  EXPECT_EQ(a.end_reason, "resized: node2 is back, 2 -> 3 nodes");
  a.end = v1::ATTEMPT_END_RESIZED;
  EXPECT_TRUE(EndedForResize(a));
  EXPECT_TRUE(EndedForPlannedStop(a));
  a.end = v1::ATTEMPT_END_PREEMPTED;
  EXPECT_FALSE(EndedForResize(a));
  EXPECT_TRUE(EndedForPlannedStop(a));
  a.end = v1::ATTEMPT_END_NODE_LOST;
  EXPECT_FALSE(EndedForPlannedStop(a));
  a.end = v1::ATTEMPT_END_RANK_FAILED;
  a.end_reason = "resized: only the words";
  EXPECT_FALSE(EndedForPlannedStop(a));
  a.end = v1::ATTEMPT_END_UNSPECIFIED;
  a.end_ms = 0;
  EXPECT_FALSE(EndedForPlannedStop(a)) << "still running";
}

TEST(EvictWhat, SaysWhereTheJobGoesOn) {
  EXPECT_EQ(EvictWhat("node1", 3, 2, 1), "node1 drained with --evict, 3 -> 2 nodes");
  EXPECT_EQ(EvictWhat("node1", 2, 2, 2), "node1 drained with --evict, 2 -> 2 nodes");  // a free node replaces it
  EXPECT_EQ(EvictWhat("node1", 2, 1, 2),
            "node1 drained with --evict, 2 -> 1 node, below nodes.min 2: the job waits for nodes");
}

}  // namespace
}  // namespace eft::controller
