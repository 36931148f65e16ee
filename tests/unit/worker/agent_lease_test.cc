// The worker's lease (worker/agent.h; docs/architecture.md, "Lease"): against the fake controller of
// agent_test_fixture.h, which can give a lease, be cut off and answer late, with FakeRanks and the
// injected ManualClock, so the lease runs out exactly when a test advances the clock past it.
#include <string>

#include "tests/unit/worker/agent_test_fixture.h"
#include "worker/agent.h"

namespace eft::worker {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;
using testing::WorkerAgentTest;

constexpr int kLeaseMs = 3000;

class WorkerLeaseTest : public WorkerAgentTest {
 protected:
  void SetUp() override {
    WorkerAgentTest::SetUp();
    config_.lease_check_interval = 10ms;
    controller_.SetLease(kLeaseMs);
  }

  // `job` attempt `attempt` rank 0, desired and its spec known.
  void Want(const std::vector<RankId>& keys) {
    std::vector<v1::RankAssignment> desired;
    for (const auto& [job, attempt, rank] : keys) {
      desired.push_back(Rank(job, attempt, rank, dir_ + "/" + job + ".env"));
      controller_.SetSpec(job, attempt, JobSpecNamed(job));
    }
    controller_.SetDesired(desired);
  }

  // No call reaches the controller from now on; returns once the worker has seen one fail. Every
  // request it accepted was sent before the clock next moves.
  void CutOff() {
    int before = 0;
    controller_.Inspect([&] { before = controller_.unanswered; });
    controller_.SetUnreachable(true);
    ASSERT_TRUE(controller_.WaitFor([&] { return controller_.unanswered > before; }));
  }

  // After HoldNextHeartbeat: how long from the moment the fake holds a heartbeat until the next one
  // reaches it (the held one still unanswered); a failed wait fails the test and returns kWait.
  std::chrono::steady_clock::duration UntilTheHeldHeartbeatIsFollowed() {
    size_t heartbeats_before = 0;
    EXPECT_TRUE(controller_.WaitFor([&] {
      heartbeats_before = controller_.heartbeats.size();
      return controller_.heartbeats_held == 1;
    }));
    const auto held_at = std::chrono::steady_clock::now();
    EXPECT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.size() > heartbeats_before; }))
        << "no heartbeat followed the held one";
    return std::chrono::steady_clock::now() - held_at;
  }

  // Long enough for the agent's lease check (every 10 ms here) to have run several times.
  static void LetTheLeaseCheckRun() { std::this_thread::sleep_for(100ms); }

  static int Count(const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
};

TEST_F(WorkerLeaseTest, RunningOutKillsEveryRankAtOnceOnceAndSaysSoInOneLine) {
  const RankId r0{"job-1", 2, 0}, r1{"job-1", 2, 1};
  Want({r0, r1});
  ranks_.IgnoreStops();  // killed ranks stay until the test ends them, so a second kill would show
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor(
      [&] { return controller_.Saw(r0, v1::RANK_STATE_RUNNING) && controller_.Saw(r1, v1::RANK_STATE_RUNNING); }));
  CutOff();

  ::testing::internal::CaptureStderr();
  clock_.Advance(std::chrono::milliseconds(kLeaseMs));  // the lease itself has not run out yet
  LetTheLeaseCheckRun();
  EXPECT_TRUE(ranks_.stops().empty());
  EXPECT_FALSE(agent_->Stats().lease_expired);

  clock_.Advance(100ms);
  ASSERT_TRUE(Eventually([&] { return ranks_.stops().size() >= 2; }));
  LetTheLeaseCheckRun();
  clock_.Advance(10s);
  LetTheLeaseCheckRun();
  const std::string log = ::testing::internal::GetCapturedStderr();

  const auto stops = ranks_.stops();
  ASSERT_EQ(stops.size(), 2u) << "each rank killed once";
  for (const auto& stop : stops) EXPECT_EQ(stop.grace, 0ms) << "no stop grace: killed, not asked to save";
  EXPECT_EQ(Count(log, "unreachable for"), 1) << log;
  EXPECT_NE(log.find("controller " + config_.controller +
                     " unreachable for 3.1 s (lease 3.0 s): killing 2 ranks of job job-1 attempt 2; the controller "
                     "restarts its jobs without this node; starting none until it answers"),
            std::string::npos)
      << log;
  const WorkerStats stats = agent_->Stats();
  EXPECT_TRUE(stats.lease_expired);
  EXPECT_EQ(stats.lease_expirations, 1u);
  EXPECT_EQ(stats.ranks_by_state.at(v1::RANK_STATE_STOPPING), 2);
  ASSERT_TRUE(ranks_.Exit(r0, ProcessExit{0, SIGKILL}));
  ASSERT_TRUE(ranks_.Exit(r1, ProcessExit{0, SIGKILL}));
}

TEST_F(WorkerLeaseTest, EveryAcceptedHeartbeatRenewsIt) {
  const RankId key{"job-2", 1, 0};
  Want({key});
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  for (int i = 0; i < 4; ++i) {  // 8 s in all, 2 s between accepted heartbeats
    clock_.Advance(2s);
    size_t seen = 0;
    controller_.Inspect([&] { seen = controller_.heartbeats.size(); });
    // The second heartbeat after `seen` left after the first was answered, so after the advance;
    // the third arriving means it was answered.
    ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.size() >= seen + 3; }));
  }
  LetTheLeaseCheckRun();
  EXPECT_TRUE(ranks_.stops().empty());
  EXPECT_TRUE(ranks_.running(key));
  EXPECT_EQ(agent_->Stats().lease_expirations, 0u);
}

TEST_F(WorkerLeaseTest, NothingExpiresBeforeTheFirstAnswer) {
  const RankId key{"job-3", 1, 0};
  Want({key});
  controller_.SetUnreachable(true);
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.unanswered >= 2; }));
  clock_.Advance(10s);  // no lease yet: the worker does not know the controller's timeout
  LetTheLeaseCheckRun();
  EXPECT_FALSE(agent_->Stats().lease_expired);

  controller_.SetUnreachable(false);
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  EXPECT_TRUE(ranks_.stops().empty());
  EXPECT_EQ(agent_->Stats().lease_expirations, 0u);
}

// A controller that predates the lease (lease_ms 0) gets the old behaviour: ranks keep running.
TEST_F(WorkerLeaseTest, WithoutALeaseRanksRunOnHoweverLongTheControllerIsAway) {
  controller_.SetLease(0);
  const RankId key{"job-4", 1, 0};
  Want({key});
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  CutOff();
  clock_.Advance(1h);
  LetTheLeaseCheckRun();
  EXPECT_TRUE(ranks_.stops().empty());
  EXPECT_EQ(agent_->Stats().lease_expirations, 0u);
}

// The reply to a request sent before the lease ran out, arriving after: what it desires is stale
// (the controller may have placed those ranks elsewhere since), so nothing of it starts. The first
// request accepted after the expiry renews the lease, and its reply is acted on.
TEST_F(WorkerLeaseTest, NoRankStartsFromALateReplyWhileTheLeaseIsOut) {
  const RankId old_rank{"job-5", 1, 0}, new_rank{"job-6", 1, 0};
  // A long lease: the held call's deadline (a third of it, in real time) must not end it first.
  constexpr int kLongLeaseMs = 60000;
  controller_.SetLease(kLongLeaseMs);
  Want({old_rank});
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(old_rank, v1::RANK_STATE_RUNNING); }));

  controller_.HoldNextHeartbeat();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats_held == 1; }));
  Want({old_rank, new_rank});
  clock_.Advance(std::chrono::milliseconds(kLongLeaseMs) + 1ms);
  ASSERT_TRUE(Eventually([&] { return !ranks_.running(old_rank); })) << "the lease ran out during the call";
  EXPECT_EQ(ranks_.stops().at(0).grace, 0ms);

  // The held call is answered (late, desiring new_rank); every later one fails.
  int unanswered = 0;
  controller_.Inspect([&] { unanswered = controller_.unanswered; });
  controller_.SetUnreachable(true);
  controller_.ReleaseHeld();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.unanswered > unanswered; }));  // the late reply is in
  LetTheLeaseCheckRun();
  EXPECT_EQ(ranks_.launches().size(), 1u) << "new_rank started from a reply older than the lease";
  EXPECT_TRUE(agent_->Stats().lease_expired);

  // Reachable again: a request sent now is accepted, renews the lease, and its reply is acted on.
  controller_.SetUnreachable(false);
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(new_rank, v1::RANK_STATE_RUNNING); }));
  EXPECT_EQ(ranks_.launches().size(), 2u);
  EXPECT_FALSE(agent_->Stats().lease_expired);
}

// A partition leaves a call hanging until TCP's retransmission, seconds after the cut heals: while the
// lease runs, a heartbeat unanswered after a third of it is abandoned, and the next goes out soon, on
// a new stub (a new connection), while the first is still unanswered.
TEST_F(WorkerLeaseTest, WithoutHedgingAHeartbeatUnansweredForAThirdOfTheLeaseIsAbandonedForANewConnection) {
  config_.rpc_timeout = 30s;  // what the call would wait without the lease
  config_.hedge_after = 0ms;
  const RankId key{"job-8", 1, 0};
  Want({key});
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  const int stubs_before = stubs_made_;
  controller_.HoldNextHeartbeat();
  const auto waited = UntilTheHeldHeartbeatIsFollowed();
  int held = 0;
  controller_.Inspect([&] { held = controller_.heartbeats_held; });
  EXPECT_EQ(held, 1) << "the first call is still unanswered";
  EXPECT_EQ(stubs_made_, stubs_before + 1) << "the next call goes out on a new stub";
  // Not before the deadline (a third of the 3 s lease; deadlines do not fire early), and long before
  // the 30 s rpc_timeout: 1 s, the reconnect pause (50 ms here: the interval) and scheduling.
  EXPECT_GE(waited, 990ms);
  EXPECT_LT(waited, 10s);
  EXPECT_TRUE(ranks_.running(key));
  controller_.ReleaseHeld();
}

// After the lease ran out, a heartbeat still gives up after a third of it, not after rpc_timeout:
// attempts stuck where a cut left them (a dropped SYN, a name lookup on a network that went away)
// give way to new ones (make image-test's reconnect waited out 5 s before).
TEST_F(WorkerLeaseTest, AfterTheLeaseRanOutAHeartbeatStillGivesUpAfterAThirdOfIt) {
  config_.rpc_timeout = 30s;
  config_.hedge_after = 0ms;
  const RankId key{"job-9", 1, 0};
  Want({key});
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  CutOff();
  clock_.Advance(5s);
  ASSERT_TRUE(Eventually([&] { return !ranks_.running(key); })) << "the lease ran out";
  controller_.HoldNextHeartbeat();
  controller_.SetUnreachable(false);
  const auto waited = UntilTheHeldHeartbeatIsFollowed();
  EXPECT_GE(waited, 990ms);
  EXPECT_LT(waited, 10s) << "a third of the 3 s lease, not the 30 s rpc_timeout";
  controller_.ReleaseHeld();
}

// A heartbeat held unanswered gets a second connection after the hedge delay (hedged_call.h), long
// before its deadline, while the first is still pending: after a partition heals, one is on the wire
// within the delay.
TEST_F(WorkerLeaseTest, AHeartbeatUnansweredForTheHedgeDelayGetsASecondConnection) {
  config_.rpc_timeout = 30s;
  config_.hedge_after = 250ms;  // more than 4x an answer on 127.0.0.1, so it decides
  const RankId key{"job-8", 1, 0};
  Want({key});
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  const int stubs_before = stubs_made_;
  controller_.HoldNextHeartbeat();
  const auto waited = UntilTheHeldHeartbeatIsFollowed();
  int held = 0;
  controller_.Inspect([&] { held = controller_.heartbeats_held; });
  EXPECT_EQ(held, 1) << "the first call is still unanswered";
  EXPECT_EQ(stubs_made_, stubs_before + 1) << "the second attempt goes out on a new stub";
  // The hold is seen a little after the call started, so the delay can look a few ms short.
  EXPECT_GE(waited, 200ms);
  EXPECT_LT(waited, 990ms) << "before the first attempt's deadline (a third of the 3 s lease)";
  EXPECT_TRUE(ranks_.running(key));
  EXPECT_EQ(agent_->Stats().heartbeat_failures, 0u) << "the heartbeat was answered, on its second connection";
  controller_.ReleaseHeld();
}

// After the lease ran out the worker keeps calling; once the controller answers, the killed rank is
// reported (killed by a signal, lease_expired set), it is not restarted in place, and what the controller wants runs.
TEST_F(WorkerLeaseTest, ReconnectsAfterwardsAndRunsWhatTheControllerWants) {
  const RankId first{"job-7", 1, 0}, second{"job-7", 2, 0};
  Want({first});
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(first, v1::RANK_STATE_RUNNING); }));
  CutOff();
  clock_.Advance(5s);
  ASSERT_TRUE(Eventually([&] { return !ranks_.running(first); }));
  ASSERT_TRUE(Eventually([&] { return agent_->Stats().rank_exits["signal"] == 1; }));

  // The controller still wants `first` (it has not declared the node lost yet), then the next attempt.
  controller_.SetUnreachable(false);
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(first, v1::RANK_STATE_EXITED); }));
  // Typed, so the controller counts it as the node's loss, not as the job's failure.
  EXPECT_TRUE(controller_.WaitFor(
      [&] { return controller_.Reported(first, v1::RANK_STATE_EXITED).lease_expired(); }));
  EXPECT_EQ(ranks_.launches().size(), 1u) << "a rank the worker knows is not restarted in place";
  Want({second});
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(second, v1::RANK_STATE_RUNNING); }));
  const WorkerStats stats = agent_->Stats();
  EXPECT_FALSE(stats.lease_expired);
  EXPECT_EQ(stats.lease_expirations, 1u);
  EXPECT_GE(stats.heartbeat_failures, 1u);
}

}  // namespace
}  // namespace eft::worker
