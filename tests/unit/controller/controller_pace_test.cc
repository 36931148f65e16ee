// Fast heartbeats while a node's jobs stop or start (docs/architecture.md, "Fast heartbeats"): the
// interval every Register/Heartbeat reply carries is transition_heartbeat_interval for the nodes a
// change involves, and heartbeat_interval again once it is over. Workers are simulated
// (controller_test_fixture.h); heartbeat_interval is 1 s there, transition_heartbeat_interval the
// default 0.2 s.
#include "tests/unit/controller/controller_test_fixture.h"

namespace eft::controller {
namespace {

class ControllerPaceTest : public ControllerTest {
 protected:
  int32_t Interval(const std::string& node, std::vector<v1::RankStatus> ranks = {},
                   std::vector<v1::RankEvent> events = {}) {
    return Heartbeat(node, std::move(ranks), std::move(events)).heartbeat_interval_ms();
  }
  v1::RankEvent Step(const v1::RankAssignment& a, int64_t step) {
    return Event(a, ++seq_, R"({"event":"step","step":)" + std::to_string(step) + R"(,"loss":1.5,"total_steps":200})");
  }
  uint64_t seq_ = 0;
};

TEST_F(ControllerPaceTest, NodesHeartbeatFastWhileTheirJobStopsOrStartsAndNormallyOtherwise) {
  EXPECT_EQ(Register("n1").heartbeat_interval_ms(), 1000);
  Register("n2");
  Register("n3");
  EXPECT_EQ(Interval("n1"), 1000) << "nothing happens on it";

  v1::JobSpec spec = Spec("a", 1, 2);
  spec.mutable_resources()->set_resize_cooldown_seconds(0);
  std::string id = Submit(spec);
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_STARTING);
  auto ranks = StartRanks({"n1", "n2"});
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  // Started, but no step yet: fast, so the first step is seen soon. n3 has nothing to do with it.
  EXPECT_EQ(Interval("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)}), 200);
  EXPECT_EQ(Interval("n2", {Rank(ranks["n2"], v1::RANK_STATE_RUNNING)}), 200);
  EXPECT_EQ(Interval("n3"), 1000);
  // The first step: back to normal on both nodes.
  EXPECT_EQ(Interval("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)}, {Step(ranks["n1"], 1)}), 1000);
  EXPECT_EQ(Interval("n2", {Rank(ranks["n2"], v1::RANK_STATE_RUNNING)}), 1000);

  // A planned resize (drain --evict of n2): both nodes are fast while the ranks stop.
  ASSERT_TRUE(c_->SetDrained("n2", true, true).ok());
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING);
  auto h1 = Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_STOPPING)});
  EXPECT_EQ(h1.desired_size(), 0);
  EXPECT_EQ(h1.heartbeat_interval_ms(), 200);
  EXPECT_EQ(Interval("n2", {Rank(ranks["n2"], v1::RANK_STATE_STOPPING)}), 200);
  EXPECT_EQ(Interval("n3"), 1000);
  // n2's rank is gone; n1's exit then places the next attempt on n1, still fast until its first step.
  EXPECT_EQ(Interval("n2", {Rank(ranks["n2"], v1::RANK_STATE_EXITED, 75)}), 200);
  auto next = Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_EXITED, 75)});
  ASSERT_EQ(next.desired_size(), 1);
  EXPECT_EQ(next.heartbeat_interval_ms(), 200);
  v1::RankAssignment a2 = next.desired(0);
  EXPECT_EQ(Interval("n1", {Rank(a2, v1::RANK_STATE_RUNNING)}), 200);
  EXPECT_EQ(Interval("n1", {Rank(a2, v1::RANK_STATE_RUNNING)}, {Step(a2, 2)}), 1000);
  // n2 takes no part in the new attempt: normal again after transition_window at the latest.
  clock_.Advance(config_.transition_window + 1s);
  EXPECT_EQ(Interval("n2"), 1000);
  EXPECT_EQ(Interval("n1", {Rank(a2, v1::RANK_STATE_RUNNING)}), 1000);
}

TEST_F(ControllerPaceTest, ARankThatDoesNotStopKeepsItsNodeFastUntilItIsGone) {
  Register("n1");
  std::string id = Submit(Spec("a", 1, 1));
  auto ranks = StartRanks({"n1"});
  EXPECT_EQ(Interval("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)}, {Step(ranks["n1"], 1)}), 1000);
  ASSERT_TRUE(c_->CancelJob(id).ok());
  clock_.Advance(config_.transition_window + 1s);  // long past any expected change
  EXPECT_EQ(Interval("n1", {Rank(ranks["n1"], v1::RANK_STATE_STOPPING)}), 200) << "not desired, still there";
  EXPECT_EQ(Interval("n1", {Rank(ranks["n1"], v1::RANK_STATE_EXITED, 143)}), 1000);
}

TEST_F(ControllerPaceTest, OffWhenTheTransitionIntervalIsTheNormalOne) {
  config_.transition_heartbeat_interval = config_.heartbeat_interval;
  Restart();
  Register("n1");
  Submit(Spec("a", 1, 1));
  auto ranks = StartRanks({"n1"});
  EXPECT_EQ(Interval("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)}), 1000);
}

// A node that misses a heartbeat may be lost: the other nodes of its job heartbeat fast until it
// is, so that they hear of it (stop_now) at once. Nodes of other jobs do not.
TEST_F(ControllerPaceTest, TheOtherNodesOfALateNodesJobHeartbeatFast) {
  Register("n1");
  Register("n2");
  Register("n3");
  std::string id = Submit(Spec("a", 2, 2));
  auto ranks = StartRanks({"n1", "n2"});
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Interval("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)}, {Step(ranks["n1"], 1)}), 1000);
  EXPECT_EQ(Interval("n2", {Rank(ranks["n2"], v1::RANK_STATE_RUNNING)}), 1000);
  // n2 heartbeats no more: on time at 1.4 s, late at 1.6 s.
  clock_.Advance(1400ms);
  Heartbeat("n3");
  EXPECT_EQ(Interval("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)}), 1000);
  c_->Tick();
  EXPECT_EQ(Interval("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)}), 1000) << "n2 is not late yet";
  clock_.Advance(200ms);
  c_->Tick();
  EXPECT_EQ(Interval("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)}), 200);
  EXPECT_EQ(Interval("n3"), 1000) << "not a node of n2's job";
  clock_.Advance(1500ms);  // past the 3 s timeout: n2 is lost, n1 told to kill its rank at once
  c_->Tick();
  auto h1 = Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)});
  EXPECT_EQ(h1.stop_now_size(), 1);
  EXPECT_EQ(h1.heartbeat_interval_ms(), 200);
}

}  // namespace
}  // namespace eft::controller
