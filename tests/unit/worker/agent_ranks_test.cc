// What WorkerAgent decides about its ranks, against the fake controller of agent_test_fixture.h and
// ranks that are not processes (FakeRanks): what it launches and with which environment, when it
// waits for a spec, how it stops ranks and reports their ends. Nothing here forks.
#include "worker/agent.h"

#include "tests/unit/worker/agent_test_fixture.h"

namespace eft::worker {
namespace {

using testing::Eventually;
using testing::WorkerAgentTest;

TEST_F(WorkerAgentTest, LaunchesTheAssignedCommandWithTheRankEnvironmentAndRelaysItsEvents) {
  const RankId key{"job-1", 2, 0};
  const v1::RankAssignment assignment = Rank("job-1", 2, 0, "/the/out");
  controller_.SetDesired({assignment});
  controller_.SetSpec("job-1", 2, JobSpecNamed("job-1"));
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));

  const auto launches = ranks_.launches();
  ASSERT_EQ(launches.size(), 1u);
  const LaunchSpec& spec = launches[0].spec;
  EXPECT_EQ(spec.argv, std::vector<std::string>(assignment.command().begin(), assignment.command().end()));
  EXPECT_EQ(spec.log_path, config_.work_dir + "/logs/job-1/attempt-2/rank-0.log");
  EXPECT_EQ(spec.env.at("EFT_TEST_OUT"), "/the/out");  // the job's own
  // The attempt's spec, as its JSON mapping: eft-train reads back exactly what the controller sent.
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(ReadRankSpec(spec.env.at("EFT_JOB_SPEC")),
                                                                 JobSpecNamed("job-1")));
  EXPECT_EQ(spec.env.at("RANK"), "0");
  EXPECT_EQ(spec.env.at("EFT_RESUME_FROM"), "/ckpt/step-40");
  EXPECT_EQ(spec.env.at("EFT_NODE_NAME"), "node-t");
  controller_.Inspect([&] {
    const v1::RankStatus running = controller_.Reported(key, v1::RANK_STATE_RUNNING);
    EXPECT_EQ(running.pid(), launches[0].pid);
    EXPECT_EQ(running.start_time_ms(), clock_.WallMillis());
  });

  clock_.Advance(std::chrono::seconds(3));
  ASSERT_TRUE(ranks_.Emit(key, R"({"event":"step","step":1})"));
  ASSERT_TRUE(controller_.WaitFor([&] { return !controller_.events.empty(); }));
  controller_.Inspect([&] {
    EXPECT_EQ(RankIdOf(controller_.events[0].key()), key);
    EXPECT_EQ(controller_.events[0].json(), R"({"event":"step","step":1})");
    EXPECT_EQ(controller_.events[0].time_ms(), clock_.WallMillis());
  });
  EXPECT_TRUE(ranks_.stops().empty());
}

TEST_F(WorkerAgentTest, ADesiredRankWaitsForItsAttemptSpec) {
  const RankId key{"job-2", 1, 0};
  controller_.SetDesired({Rank("job-2", 1, 0, dir_ + "/rank0.env")});
  controller_.SetSpec("job-2", 1, JobSpecNamed("job-2"));
  controller_.WithholdSpecs(3);  // Register and two heartbeats come without the spec
  StartAgent();

  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.size() >= 2; }));
  EXPECT_TRUE(ranks_.launches().empty());
  EXPECT_EQ(agent_->Stats().rank_starts, 0u);
  controller_.Inspect([&] {
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(controller_.heartbeats[i].ranks_size(), 0);
  });

  // The spec comes with the next reply (the request lists no rank of the attempt): the rank starts.
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  const auto launches = ranks_.launches();
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(ReadRankSpec(launches[0].spec.env.at("EFT_JOB_SPEC")).name(), "job-2");
}

TEST_F(WorkerAgentTest, ALaterRankOfAnAttemptStartsWithTheCachedSpec) {
  const RankId key0{"job-4", 1, 0}, key1{"job-4", 1, 1};
  controller_.SetDesired({Rank("job-4", 1, 0, dir_ + "/rank0.env")});
  controller_.SetSpec("job-4", 1, JobSpecNamed("job-4"));
  StartAgent();
  // Until a request lists rank 0 the replies may carry the spec more than once (a heartbeat can leave
  // before the rank is up); from the one that reports it running on, none does.
  int specs_before = 0;
  ASSERT_TRUE(controller_.WaitFor([&] {
    specs_before = controller_.specs_sent;
    return controller_.Saw(key0, v1::RANK_STATE_RUNNING);
  }));
  EXPECT_GE(specs_before, 1);

  // The requests now list rank 0, so no reply carries the attempt's spec again.
  controller_.SetDesired({Rank("job-4", 1, 0, dir_ + "/rank0.env"), Rank("job-4", 1, 1, dir_ + "/rank1.env")});
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key1, v1::RANK_STATE_RUNNING); }));
  const auto launches = ranks_.launches();
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[1].key, key1);
  EXPECT_EQ(ReadRankSpec(launches[1].spec.env.at("EFT_JOB_SPEC")).name(), "job-4");
  EXPECT_EQ(launches[1].spec.env.at("RANK"), "1");
  controller_.Inspect([&] { EXPECT_EQ(controller_.specs_sent, specs_before) << "rank 1 started from the cache"; });
}

TEST_F(WorkerAgentTest, ARankThatCannotStartIsReportedSoAndNotTriedAgain) {
  const RankId key{"job-6", 1, 0};
  controller_.SetDesired({Rank("job-6", 1, 0, dir_ + "/rank0.env")});
  controller_.SetSpec("job-6", 1, JobSpecNamed("job-6"));
  ranks_.FailLaunches("no such program: eft-train");
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_FAILED_TO_START); }));
  controller_.Inspect([&] {
    const v1::RankStatus s = controller_.Reported(key, v1::RANK_STATE_FAILED_TO_START);
    EXPECT_EQ(s.message(), "no such program: eft-train");
    EXPECT_EQ(s.end_time_ms(), clock_.WallMillis());
  });
  // Still desired, but a rank the worker knows is never started again in place (reconcile.h).
  size_t seen = 0;
  controller_.Inspect([&] { seen = controller_.heartbeats.size(); });
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.size() >= seen + 3; }));
  EXPECT_EQ(ranks_.launches().size(), 1u);
  const WorkerStats stats = agent_->Stats();
  EXPECT_EQ(stats.rank_start_failures, 1u);
  EXPECT_EQ(stats.rank_starts, 0u);
}

TEST_F(WorkerAgentTest, AnExitIsReportedWithItsCodeAndTheRankIsNotRestartedInPlace) {
  const RankId key{"job-7", 1, 0};
  controller_.SetDesired({Rank("job-7", 1, 0, dir_ + "/rank0.env")});
  controller_.SetSpec("job-7", 1, JobSpecNamed("job-7"));
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));

  clock_.Advance(std::chrono::seconds(42));
  ASSERT_TRUE(ranks_.Exit(key, ProcessExit{2, 0}));
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_EXITED); }));
  controller_.Inspect([&] {
    const v1::RankStatus s = controller_.Reported(key, v1::RANK_STATE_EXITED);
    EXPECT_EQ(s.exit_code(), 2);
    EXPECT_EQ(s.signal(), 0);
    EXPECT_EQ(s.end_time_ms() - s.start_time_ms(), 42'000);
  });
  size_t seen = 0;
  controller_.Inspect([&] { seen = controller_.heartbeats.size(); });
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.size() >= seen + 3; }));
  EXPECT_EQ(ranks_.launches().size(), 1u) << "the controller restarts a job as a new attempt";
  EXPECT_TRUE(ranks_.stops().empty());
  EXPECT_EQ(agent_->Stats().rank_exits["bad_input"], 1u);
}

TEST_F(WorkerAgentTest, ARankStillStoppingIsAskedOnceAndReportedStoppingUntilItEnds) {
  const RankId key{"job-8", 1, 0};
  controller_.SetDesired({Rank("job-8", 1, 0, dir_ + "/rank0.env")});
  controller_.SetSpec("job-8", 1, JobSpecNamed("job-8"));
  ranks_.IgnoreStops();
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));

  controller_.SetDesired({});
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_STOPPING); }));
  size_t seen = 0;
  controller_.Inspect([&] { seen = controller_.heartbeats.size(); });
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.size() >= seen + 3; }));
  controller_.Inspect([&] {
    const auto& last = controller_.heartbeats.back();
    ASSERT_EQ(last.ranks_size(), 1);
    EXPECT_EQ(last.ranks(0).state(), v1::RANK_STATE_STOPPING);
  });
  const auto stops = ranks_.stops();
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].key, key);
  EXPECT_EQ(stops[0].grace, std::chrono::seconds(5));  // the assignment's stop_grace_seconds

  ASSERT_TRUE(ranks_.Exit(key, ProcessExit{0, SIGKILL}));  // the grace ran out
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_EXITED); }));
  controller_.Inspect([&] { EXPECT_EQ(controller_.Reported(key, v1::RANK_STATE_EXITED).signal(), SIGKILL); });
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.back().ranks_size() == 0; }));
}

// A rank whose attempt ended unplanned (its peer failed or was lost) is killed without its grace,
// also when it is already stopping with one; once, however many replies list it.
TEST_F(WorkerAgentTest, ARankListedInStopNowIsKilledAtOnce) {
  const RankId key{"job-9", 1, 0};
  controller_.SetDesired({Rank("job-9", 1, 0, dir_ + "/rank0.env")});
  controller_.SetSpec("job-9", 1, JobSpecNamed("job-9"));
  ranks_.IgnoreStops();
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));

  controller_.SetDesired({});
  v1::RankKey k;
  k.set_job_id("job-9");
  k.set_attempt(1);
  k.set_rank(0);
  v1::RankKey unknown = k;
  unknown.set_rank(7);
  controller_.SetStopNow({k, unknown});
  ASSERT_TRUE(Eventually([&] { return ranks_.stops().size() >= 2; }));
  size_t seen = 0;
  controller_.Inspect([&] { seen = controller_.heartbeats.size(); });
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.size() >= seen + 3; }));
  const auto stops = ranks_.stops();
  ASSERT_EQ(stops.size(), 2u) << "asked to stop once with its grace, killed once";
  EXPECT_EQ(stops[0].grace, std::chrono::seconds(5));
  EXPECT_EQ(stops[1].key, key);
  EXPECT_EQ(stops[1].grace, std::chrono::milliseconds(0));
  ASSERT_TRUE(ranks_.Exit(key, ProcessExit{0, SIGKILL}));
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_EXITED); }));
}

TEST_F(WorkerAgentTest, ShutdownStopsRanksAndReportsTheirExit) {
  const RankId key{"job-3", 1, 0};
  controller_.SetDesired({Rank("job-3", 1, 0, dir_ + "/rank0.env")});
  controller_.SetSpec("job-3", 1, JobSpecNamed("job-3"));
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));

  agent_->Shutdown(std::chrono::seconds(10));  // the rank is still desired
  const auto stops = ranks_.stops();
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].key, key);
  EXPECT_EQ(stops[0].grace, std::chrono::seconds(5));
  controller_.Inspect([&] {
    EXPECT_TRUE(controller_.heartbeats.back().shutting_down());
    v1::RankStatus s = controller_.Reported(key, v1::RANK_STATE_EXITED);
    EXPECT_EQ(s.state(), v1::RANK_STATE_EXITED);
    EXPECT_EQ(s.signal(), SIGTERM);
  });
}

// Two workers, one name (docs/architecture.md): what a worker does with the controller's answers.
TEST_F(WorkerAgentTest, AFencedWorkerStopsItsRanksRegistersNoMoreAndTellsItsOwnerOnce) {
  const RankId key{"job-5", 1, 0};
  controller_.SetDesired({Rank("job-5", 1, 0, dir_ + "/rank0.env")});
  controller_.SetSpec("job-5", 1, JobSpecNamed("job-5"));
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));

  controller_.Fence("another eft-worker runs as node node-t");
  EXPECT_TRUE(Eventually([&] { return !ranks_.running(key); })) << "the rank is the other worker's to run now";
  EXPECT_EQ(ranks_.stops().size(), 1u);
  size_t registers = 0, heartbeats = 0;
  controller_.Inspect([&] {
    registers = controller_.registers.size();
    heartbeats = controller_.heartbeats.size();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // 6 heartbeat intervals
  controller_.Inspect([&] {
    EXPECT_EQ(controller_.registers.size(), registers) << "a fenced worker never asks for the name again";
    EXPECT_EQ(controller_.heartbeats.size(), heartbeats);
  });
  std::lock_guard<std::mutex> lock(fenced_mu_);
  EXPECT_EQ(fenced_calls_, std::vector<std::string>{"another eft-worker runs as node node-t"});
}

}  // namespace
}  // namespace eft::worker
