// Priorities in the controller's state machine (docs/architecture.md, "Priorities and preemption"):
// a waiting job of higher priority shrinks a lower one, preempts a whole one, reserves what is freed
// for it; equal priority never preempts, and a waiting job holds free nodes against later equals.
// Workers are simulated (controller_test_fixture.h); what ranks do on SIGTERM is reported by hand.
#include "tests/unit/controller/controller_test_fixture.h"

namespace eft::controller {
namespace {

class ControllerPriorityTest : public ControllerTest {
 protected:
  // A rank reports a step with its checkpoint, then exits `code` (75: stopped after saving).
  void SaveAndExit(const std::string& node, const v1::RankAssignment& a, int64_t step, int code = 75) {
    std::vector<v1::RankEvent> events{
        Event(a, ++seq_, R"({"event":"step","step":)" + std::to_string(step) + R"(,"loss":1.5,"total_steps":200})"),
        Event(a, ++seq_,
              R"({"event":"checkpoint","step":)" + std::to_string(step) + R"(,"kind":"sharded","path":"/ck/)" +
                  a.key().job_id() + "-" + std::to_string(step) + R"(","bytes":5})")};
    Heartbeat(node, {Rank(a, v1::RANK_STATE_EXITED, code)}, events);
  }


  ControllerSnapshot::Job Snap(const std::string& id) {
    for (const auto& j : c_->Snapshot(100).jobs) {
      if (j.id == id) return j;
    }
    ADD_FAILURE() << "job " << id << " not in the snapshot";
    return {};
  }

  uint64_t seq_ = 0;
};

TEST_F(ControllerPriorityTest, AHigherJobShrinksALowerElasticOneWhichGrowsBackAfterwards) {
  for (const char* n : {"n1", "n2", "n3"}) Register(n);
  std::string low = Submit(PrioSpec("low", 1, 3, 0));
  auto ranks = StartRanks({"n1", "n2", "n3"});
  ASSERT_EQ(Job(low).state(), v1::JOB_STATE_RUNNING);

  // Job 2 needs two nodes: the low job gives up n2 and n3 (rank 0's n1 stays), not counted.
  std::string high = Submit(PrioSpec("high", 2, 2, 5));
  v1::Job l = Job(low);
  ASSERT_EQ(l.state(), v1::JOB_STATE_RECOVERING) << l.reason();
  EXPECT_EQ(l.attempts(0).end_reason(), "resized: for job 2 (priority 5): gives up n2,n3, 3 -> 1 node");
  EXPECT_EQ(v1::AttemptEnd_Name(l.attempts(0).end()), "ATTEMPT_END_RESIZED");
  EXPECT_EQ(EventsOfType(low, "resized"),
            (std::vector<std::string>{"shrink: for job 2 (priority 5): gives up n2,n3, 3 -> 1 node"}));
  EXPECT_EQ(l.restarts(), 0);
  EXPECT_EQ(EventsOfType(high, "making_room"),
            (std::vector<std::string>{"freeing n2,n3 from job 1 (priority 0), shrinking 3 -> 1"}));
  EXPECT_EQ(Job(high).state(), v1::JOB_STATE_QUEUED);

  // n3's rank is gone first: n3 is free but reserved, so a job submitted now does not get it.
  SaveAndExit("n3", ranks["n3"], 12);
  std::string third = Submit(PrioSpec("third", 1, 1, 0));
  v1::Job t = Job(third);
  EXPECT_EQ(t.state(), v1::JOB_STATE_QUEUED);
  EXPECT_NE(t.reason().find("n3: reserved for job 2"), std::string::npos) << t.reason();
  EXPECT_NE(Job(high).reason().find("n3 reserved for it, being freed"), std::string::npos) << Job(high).reason();

  SaveAndExit("n2", ranks["n2"], 12);
  v1::Job h = Job(high);
  ASSERT_EQ(h.state(), v1::JOB_STATE_STARTING) << h.reason();
  EXPECT_EQ(std::vector<std::string>(h.attempts(0).nodes().begin(), h.attempts(0).nodes().end()),
            (std::vector<std::string>{"n2", "n3"}));
  SaveAndExit("n1", ranks["n1"], 12);
  l = Job(low);
  ASSERT_EQ(l.state(), v1::JOB_STATE_STARTING) << l.reason();
  ASSERT_EQ(l.attempts_size(), 2);
  EXPECT_EQ(l.attempts(1).world_size(), 1);
  EXPECT_EQ(l.attempts(1).resume_from(), "/ck/1-12");
  EXPECT_EQ(Job(third).state(), v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(c_->CancelJob(third).ok());

  // The high job finishes: the low one grows back onto n2 and n3.
  auto hr = StartRanks({"n2", "n3"});
  auto lr = StartRanks({"n1"});
  ASSERT_EQ(Job(high).state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(Job(low).state(), v1::JOB_STATE_RUNNING);
  Heartbeat("n2", {Rank(hr["n2"], v1::RANK_STATE_EXITED, 0)});
  Heartbeat("n3", {Rank(hr["n3"], v1::RANK_STATE_EXITED, 0)});
  ASSERT_EQ(Job(high).state(), v1::JOB_STATE_SUCCEEDED);
  c_->Tick();
  l = Job(low);
  ASSERT_EQ(l.state(), v1::JOB_STATE_RECOVERING) << l.reason();
  EXPECT_EQ(l.attempts(1).end_reason(), "resized: n2 is back and n3 is back, 1 -> 3 nodes");
  EXPECT_EQ(v1::AttemptEnd_Name(l.attempts(1).end()), "ATTEMPT_END_RESIZED");
  EXPECT_EQ(Snap(low).resizes[static_cast<size_t>(ResizeReason::kShrink)], 1);
  EXPECT_EQ(Snap(low).resizes[static_cast<size_t>(ResizeReason::kGrow)], 1);
  EXPECT_EQ(Snap(low).preemptions, 0);
}

TEST_F(ControllerPriorityTest, TheWaitingJobStartsOnTheNodesFreedForItEvenWhenOthersFreeFirst) {
  for (const char* n : {"n1", "n2", "n3"}) Register(n);
  std::string low = Submit(PrioSpec("low", 1, 3, 0));
  auto ranks = StartRanks({"n1", "n2", "n3"});
  std::string high = Submit(PrioSpec("high", 1, 3, 5));  // could take three, needs one
  ASSERT_EQ(Job(low).state(), v1::JOB_STATE_RECOVERING);
  EXPECT_EQ(Job(low).attempts(0).end_reason(), "resized: for job 2 (priority 5): gives up n3, 3 -> 2 nodes");
  EXPECT_EQ(v1::AttemptEnd_Name(Job(low).attempts(0).end()), "ATTEMPT_END_RESIZED");
  // The low job's rank 0 is gone first: n1 is free, but not the high job's to take.
  SaveAndExit("n1", ranks["n1"], 4);
  EXPECT_EQ(Job(high).state(), v1::JOB_STATE_QUEUED) << Job(high).reason();
  SaveAndExit("n2", ranks["n2"], 4);
  EXPECT_EQ(Job(high).state(), v1::JOB_STATE_QUEUED) << Job(high).reason();
  SaveAndExit("n3", ranks["n3"], 4);
  v1::Job h = Job(high);
  ASSERT_EQ(h.state(), v1::JOB_STATE_STARTING) << h.reason();
  EXPECT_EQ(std::vector<std::string>(h.attempts(0).nodes().begin(), h.attempts(0).nodes().end()),
            (std::vector<std::string>{"n3"}))
      << "only the node freed for it, though nodes.max is 3";
  v1::Job l = Job(low);
  ASSERT_EQ(l.state(), v1::JOB_STATE_STARTING) << l.reason();
  EXPECT_EQ(std::vector<std::string>(l.attempts(1).nodes().begin(), l.attempts(1).nodes().end()),
            (std::vector<std::string>{"n1", "n2"}))
      << "rank 0 stays put";
}

TEST_F(ControllerPriorityTest, APreemptedJobWaitsQueuedUncountedAndResumesFromItsCheckpoint) {
  for (const char* n : {"n1", "n2"}) Register(n);
  std::string low = Submit(PrioSpec("low", 2, 2, 0));
  auto ranks = StartRanks({"n1", "n2"});
  std::string high = Submit(PrioSpec("high", 1, 1, 3));
  v1::Job l = Job(low);
  ASSERT_EQ(l.state(), v1::JOB_STATE_RECOVERING);
  EXPECT_EQ(l.attempts(0).end_reason(), "preempted: for job 2 (priority 3), which needs 1 node");
  EXPECT_EQ(v1::AttemptEnd_Name(l.attempts(0).end()), "ATTEMPT_END_PREEMPTED");
  EXPECT_EQ(EventsOfType(low, "preempted"),
            (std::vector<std::string>{"for job 2 (priority 3), which needs 1 node"}));
  SaveAndExit("n1", ranks["n1"], 8);
  SaveAndExit("n2", ranks["n2"], 8);
  ASSERT_EQ(Job(high).state(), v1::JOB_STATE_STARTING) << Job(high).reason();
  const std::string high_node = Job(high).attempts(0).nodes(0);
  l = Job(low);
  ASSERT_EQ(l.state(), v1::JOB_STATE_QUEUED) << l.reason();
  EXPECT_EQ(l.restarts(), 0);
  EXPECT_NE(l.reason().find(high_node + " held by job 2 (priority 3, not lower) which is at its nodes.min"),
            std::string::npos)
      << l.reason();
  EXPECT_EQ(Snap(low).preemptions, 1);

  // The high job ends: the low one starts again from the checkpoint its stop saved.
  auto hr = StartRanks({high_node});
  Heartbeat(high_node, {Rank(hr[high_node], v1::RANK_STATE_EXITED, 0)});
  c_->Tick();
  l = Job(low);
  ASSERT_EQ(l.state(), v1::JOB_STATE_STARTING) << l.reason();
  EXPECT_EQ(l.attempts(1).resume_from(), "/ck/1-8");
  EXPECT_EQ(l.attempts(1).world_size(), 2);
  auto started = EventsOfType(low, "attempt_started");
  ASSERT_EQ(started.size(), 2u);
  EXPECT_NE(started[1].find("0 steps lost"), std::string::npos) << started[1];
  EXPECT_EQ(l.restarts(), 0);
  // Counted from the stored events after a restart too.
  Restart();
  EXPECT_EQ(Snap(low).preemptions, 1);
}

TEST_F(ControllerPriorityTest, EqualPriorityNeverPreemptsAndAWaitingJobHoldsFreeNodesAgainstLaterOnes) {
  for (const char* n : {"n1", "n2"}) Register(n);
  std::string a = Submit(PrioSpec("a", 1, 1, 0));
  auto ranks = StartRanks({"n1"});
  std::string big = Submit(PrioSpec("big", 2, 2, 0));
  v1::Job b = Job(big);
  EXPECT_EQ(b.state(), v1::JOB_STATE_QUEUED);
  EXPECT_NE(b.reason().find("n1 held by job 1 (priority 0, not lower) which is at its nodes.min"), std::string::npos)
      << b.reason();
  EXPECT_EQ(Job(a).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)}).desired_size(), 1) << "a keeps running";
  // A later small job of the same priority does not take n2 from under the big one.
  std::string small = Submit(PrioSpec("small", 1, 1, 0));
  EXPECT_EQ(Job(small).state(), v1::JOB_STATE_QUEUED);
  EXPECT_NE(Job(small).reason().find("n2: reserved for job 2"), std::string::npos) << Job(small).reason();
  // But a higher one may (it outranks the reservation), and lower ones never preempt.
  std::string urgent = Submit(PrioSpec("urgent", 1, 1, 1));
  EXPECT_EQ(Job(urgent).state(), v1::JOB_STATE_STARTING) << Job(urgent).reason();
  std::string lowest = Submit(PrioSpec("lowest", 1, 1, -1));
  EXPECT_EQ(Job(lowest).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Job(a).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(a).attempts_size(), 1);
}

}  // namespace
}  // namespace eft::controller
