// Resizing in the controller's state machine (docs/architecture.md, "Resizing"): growing back onto a
// node that returns, the cooldown, drain --evict, a stop that saves nothing, and the counts /metrics
// reads. Workers are simulated (controller_test_fixture.h); what the ranks would do on SIGTERM (save,
// report the checkpoint, exit 75) is reported by hand.
#include <algorithm>

#include "tests/unit/controller/controller_test_fixture.h"

namespace eft::controller {
namespace {

class ControllerResizeTest : public ControllerTest {
 protected:
  v1::JobSpec ResizableSpec(int min, int max, double cooldown_s) {
    v1::JobSpec s = Spec("elastic", min, max);
    s.mutable_resources()->set_resize_cooldown_seconds(cooldown_s);
    s.mutable_checkpoint()->set_every_steps(10);
    return s;
  }

  // Rank 0 (on `node`) reports a step and, optionally, the checkpoint it saved at that step.
  void Report(const std::string& node, const v1::RankAssignment& a, int64_t step, bool checkpoint,
              v1::RankState state = v1::RANK_STATE_RUNNING, int code = 0) {
    std::vector<v1::RankEvent> events{
        Event(a, ++seq_, R"({"event":"step","step":)" + std::to_string(step) + R"(,"loss":1.5,"total_steps":200})")};
    if (checkpoint) {
      events.push_back(Event(a, ++seq_,
                             R"({"event":"checkpoint","step":)" + std::to_string(step) +
                                 R"(,"kind":"sharded","path":"/ck/step-)" + std::to_string(step) + R"(","bytes":5})"));
    }
    Heartbeat(node, {Rank(a, state, code)}, events);
  }

  std::vector<std::string> EventsOfType(const v1::Job& job, const std::string& type) {
    std::vector<std::string> out;
    for (const auto& e : job.events()) {
      if (e.type() == type) out.push_back(e.message());
    }
    return out;
  }

  std::array<int64_t, kResizeReasons.size()> Resizes(const std::string& id) {
    for (const auto& j : c_->Snapshot(100).jobs) {
      if (j.id == id) return j.resizes;
    }
    ADD_FAILURE() << "job " << id << " not in the snapshot";
    return {};
  }

  // n3 goes silent until it is LOST; n1 and n2 keep heartbeating with their ranks running.
  void LoseNode3(std::map<std::string, v1::RankAssignment>& ranks) {
    for (int i = 0; i < 4; ++i) {
      clock_.Advance(1000ms);
      Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)});
      Heartbeat("n2", {Rank(ranks["n2"], v1::RANK_STATE_RUNNING)});
      c_->Tick();
    }
  }

  uint64_t seq_ = 0;
};

TEST_F(ControllerResizeTest, GrowsBackFromTheStopCheckpointWhenALostNodeReturns) {
  for (const char* n : {"n1", "n2", "n3"}) Register(n);
  std::string id = Submit(ResizableSpec(2, 3, 0));
  auto ranks = StartRanks({"n1", "n2", "n3"});
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  Report("n1", ranks["n1"], 10, true);
  LoseNode3(ranks);
  // The survivors stop; attempt 2 runs on two nodes.
  Heartbeat("n2", {Rank(ranks["n2"], v1::RANK_STATE_EXITED, 75)});
  Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_EXITED, 75)});
  ranks = StartRanks({"n1", "n2"});
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING) << Job(id).reason();
  ASSERT_EQ(Job(id).attempts(1).world_size(), 2);
  Report("n1", ranks["n1"], 20, true);
  Report("n1", ranks["n1"], 27, false);

  // n3 comes back: the job is asked to stop at once (no rank is desired any more), not counted.
  Register("n3");
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RECOVERING) << job.reason();
  EXPECT_EQ(job.attempts(1).end_reason(), "resized: n3 is back, 2 -> 3 nodes");
  EXPECT_EQ(v1::AttemptEnd_Name(job.attempts(1).end()), "ATTEMPT_END_RESIZED");
  EXPECT_EQ(EventsOfType(job, "resized"), (std::vector<std::string>{"grow: n3 is back, 2 -> 3 nodes"}));
  EXPECT_EQ(job.restarts(), 0);
  const v1::HeartbeatResponse stopping = Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_STOPPING)});
  EXPECT_EQ(stopping.desired_size(), 0);
  EXPECT_EQ(stopping.stop_now_size(), 0) << "a planned stop grants the grace: the ranks save a checkpoint";

  // SIGTERM: the ranks finish step 28, save it and exit 75; the grown attempt resumes exactly there.
  Report("n1", ranks["n1"], 28, true, v1::RANK_STATE_EXITED, 75);
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING) << "n2's rank is still reported running";
  Heartbeat("n2", {Rank(ranks["n2"], v1::RANK_STATE_EXITED, 75)});
  job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_STARTING) << job.reason();
  ASSERT_EQ(job.attempts_size(), 3);
  EXPECT_EQ(job.attempts(2).world_size(), 3);
  EXPECT_EQ(job.attempts(2).nodes(0), "n1") << "rank 0 stays put";
  EXPECT_EQ(job.attempts(2).resume_from(), "/ck/step-28");
  auto started = EventsOfType(job, "attempt_started");
  ASSERT_EQ(started.size(), 3u);
  EXPECT_NE(started[2].find("(step 28; attempt 2 reached step 28: 0 steps lost)"), std::string::npos) << started[2];
  EXPECT_TRUE(EventsOfType(job, "stop_not_saved").empty());
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_EQ(Resizes(id)[static_cast<size_t>(ResizeReason::kGrow)], 1);
  EXPECT_EQ(Resizes(id)[static_cast<size_t>(ResizeReason::kEvict)], 0);
  // The count is read back from the stored events after a restart of the controller.
  Restart();
  EXPECT_EQ(Resizes(id)[static_cast<size_t>(ResizeReason::kGrow)], 1);
}

TEST_F(ControllerResizeTest, TheCooldownHoldsAGrowUntilItEnds) {
  for (const char* n : {"n1", "n2", "n3"}) Register(n);
  std::string id = Submit(ResizableSpec(2, 3, 30));
  auto ranks = StartRanks({"n1", "n2", "n3"});
  LoseNode3(ranks);
  Heartbeat("n2", {Rank(ranks["n2"], v1::RANK_STATE_EXITED, 75)});
  Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_EXITED, 75)});
  ranks = StartRanks({"n1", "n2"});  // attempt 2 on 2 nodes: a resize, the cooldown starts
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  Register("n3");
  for (int i = 0; i < 29; ++i) {
    clock_.Advance(1000ms);
    for (const char* n : {"n1", "n2"}) Heartbeat(n, {Rank(ranks[n], v1::RANK_STATE_RUNNING)});
    Heartbeat("n3");
    c_->Tick();
    ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING) << "second " << i + 1;
  }
  clock_.Advance(1000ms);
  for (const char* n : {"n1", "n2"}) Heartbeat(n, {Rank(ranks[n], v1::RANK_STATE_RUNNING)});
  c_->Tick();  // 30 s after attempt 2 started: nothing but the clock changed
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RECOVERING);
  EXPECT_EQ(job.attempts(1).end_reason(), "resized: n3 is back, 2 -> 3 nodes");
  EXPECT_EQ(v1::AttemptEnd_Name(job.attempts(1).end()), "ATTEMPT_END_RESIZED");
}

TEST_F(ControllerResizeTest, NoGrowWhenDisabledOrNearTheEnd) {
  Register("n1");
  v1::JobSpec off = ResizableSpec(1, 2, 0);
  off.set_name("off");
  off.mutable_resources()->set_grow(false);
  std::string a = Submit(off);
  StartRanks({"n1"});
  Register("n2");
  ASSERT_EQ(Job(a).state(), v1::JOB_STATE_RUNNING) << "resources.grow: false";
  std::string b = Submit(ResizableSpec(1, 2, 0));  // n2 only: n1 is a's
  auto rb = StartRanks({"n2"});
  ASSERT_EQ(Job(a).state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(Job(b).state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(Job(b).attempts(0).nodes(0), "n2");
  Report("n2", rb["n2"], 190, true);  // 10 steps of 200 left: one checkpoint interval
  Register("n3");
  c_->Tick();
  EXPECT_EQ(Job(a).state(), v1::JOB_STATE_RUNNING) << "resources.grow: false";
  EXPECT_EQ(Job(b).state(), v1::JOB_STATE_RUNNING) << "within one checkpoint interval of its end";
  EXPECT_TRUE(EventsOfType(Job(b), "resized").empty());
}

TEST_F(ControllerResizeTest, DrainWithEvictMovesTheJobOffTheNodeWithoutLosingSteps) {
  for (const char* n : {"n1", "n2", "n3"}) Register(n);
  std::string id = Submit(ResizableSpec(1, 3, 600));
  auto ranks = StartRanks({"n1", "n2", "n3"});
  Report("n1", ranks["n1"], 10, true);
  Report("n1", ranks["n1"], 14, false);

  // A plain drain keeps what runs.
  ASSERT_TRUE(c_->SetDrained("n2", true).ok());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(c_->SetDrained("n2", false, true).status().code(), StatusCode::kInvalidArgument);

  auto node = c_->SetDrained("n2", true, true);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_TRUE(node->drained());
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RECOVERING);
  EXPECT_EQ(job.attempts(0).end_reason(), "resized: n2 drained with --evict, 3 -> 2 nodes");
  EXPECT_EQ(v1::AttemptEnd_Name(job.attempts(0).end()), "ATTEMPT_END_RESIZED");
  EXPECT_EQ(EventsOfType(job, "resized"), (std::vector<std::string>{"evict: n2 drained with --evict, 3 -> 2 nodes"}));
  Report("n1", ranks["n1"], 15, true, v1::RANK_STATE_EXITED, 75);
  for (const char* n : {"n2", "n3"}) Heartbeat(n, {Rank(ranks[n], v1::RANK_STATE_EXITED, 75)});
  job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_STARTING) << job.reason();
  EXPECT_EQ(std::vector<std::string>(job.attempts(1).nodes().begin(), job.attempts(1).nodes().end()),
            (std::vector<std::string>{"n1", "n3"}));
  EXPECT_EQ(job.attempts(1).resume_from(), "/ck/step-15");
  EXPECT_NE(EventsOfType(job, "attempt_started")[1].find("0 steps lost"), std::string::npos);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_EQ(Resizes(id)[static_cast<size_t>(ResizeReason::kEvict)], 1);
  // Nothing grows back onto the drained node.
  StartRanks({"n1", "n3"});
  c_->Tick();
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
}

TEST_F(ControllerResizeTest, AnEvictedJobBelowNodesMinWaitsQueuedWithTheReason) {
  for (const char* n : {"n1", "n2"}) Register(n);
  std::string id = Submit(ResizableSpec(2, 2, 0));
  auto ranks = StartRanks({"n1", "n2"});
  Report("n1", ranks["n1"], 5, false);
  ASSERT_TRUE(c_->SetDrained("n2", true, true).ok());
  EXPECT_EQ(Job(id).attempts(0).end_reason(),
            "resized: n2 drained with --evict, 2 -> 1 node, below nodes.min 2: the job waits for nodes");
  EXPECT_EQ(v1::AttemptEnd_Name(Job(id).attempts(0).end()), "ATTEMPT_END_RESIZED");
  Report("n1", ranks["n1"], 6, true, v1::RANK_STATE_EXITED, 75);
  Heartbeat("n2", {Rank(ranks["n2"], v1::RANK_STATE_EXITED, 75)});
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.reason(), "waiting for nodes: needs 2 nodes with 1 free slot, 1 available (n2: drained)");
  EXPECT_EQ(EventsOfType(job, "queued").size(), 1u);
  ASSERT_TRUE(c_->SetDrained("n2", false).ok());
  job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_STARTING) << job.reason();
  EXPECT_EQ(job.attempts(1).resume_from(), "/ck/step-6");
}

TEST_F(ControllerResizeTest, AStopThatSavesNothingFallsBackToTheNewestPeriodicCheckpointAndSaysSo) {
  for (const char* n : {"n1", "n2"}) Register(n);
  v1::JobSpec spec = ResizableSpec(1, 2, 0);
  spec.mutable_fault_tolerance()->set_stop_grace_seconds(5);
  std::string id = Submit(spec);
  auto ranks = StartRanks({"n1", "n2"});
  Report("n1", ranks["n1"], 10, true);
  Report("n1", ranks["n1"], 13, false);
  ASSERT_TRUE(c_->SetDrained("n2", true, true).ok());
  // The ranks ignore SIGTERM: still stepping, then killed at the end of the grace period.
  Report("n1", ranks["n1"], 14, false, v1::RANK_STATE_STOPPING);
  Heartbeat("n2", {Rank(ranks["n2"], v1::RANK_STATE_STOPPING)});
  c_->Tick();
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING) << "waits while they still run";
  clock_.Advance(5000ms);
  Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_EXITED, 0, 9)});
  Heartbeat("n2", {Rank(ranks["n2"], v1::RANK_STATE_EXITED, 0, 9)});
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_STARTING) << job.reason();
  EXPECT_EQ(job.attempts(1).resume_from(), "/ck/step-10");
  EXPECT_EQ(job.restarts(), 0) << "a planned stop is not the job's failure";
  auto why = EventsOfType(job, "stop_not_saved");
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(why[0],
            "attempt 1 was stopped for a resize but saved no checkpoint at its last step (14) within "
            "fault_tolerance.stop_grace_seconds (5 s): resuming from the newest periodic checkpoint, step 10; 4 steps "
            "lost");
  EXPECT_NE(EventsOfType(job, "attempt_started")[1].find("(step 10; attempt 1 reached step 14: 4 steps lost)"),
            std::string::npos);
}

}  // namespace
}  // namespace eft::controller
