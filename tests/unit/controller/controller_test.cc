// The controller's state machine, driven in-process with a ManualClock and a real SQLite file:
// workers are simulated by calling Register/Heartbeat directly with what a worker would report.
#include <thread>

#include <google/protobuf/util/message_differencer.h>

#include "tests/unit/controller/controller_test_fixture.h"

namespace eft::controller {
namespace {

TEST_F(ControllerTest, QueuedUntilEnoughNodesThenRunsAndSucceeds) {
  std::string id = Submit(Spec("a", 2, 3));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_QUEUED);
  Register("n1");
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_QUEUED);
  EXPECT_NE(Job(id).reason().find("needs 2 nodes"), std::string::npos) << Job(id).reason();
  Register("n2");
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_STARTING);
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).world_size(), 2);
  EXPECT_EQ(job.attempts(0).nodes(0), "n1");
  EXPECT_EQ(job.attempts(0).master_addr(), "n1.addr");
  EXPECT_EQ(job.attempts(0).master_port(), config_.master_port_base);

  auto h1 = Heartbeat("n1");
  auto h2 = Heartbeat("n2");
  ASSERT_EQ(h1.desired_size(), 1);
  ASSERT_EQ(h2.desired_size(), 1);
  EXPECT_EQ(h1.desired(0).key().rank(), 0);
  EXPECT_EQ(h2.desired(0).key().rank(), 1);
  EXPECT_EQ(h2.desired(0).world_size(), 2);
  EXPECT_EQ(h2.desired(0).resume_from(), "");
  EXPECT_EQ(h2.desired(0).command(0), "/bin/true");

  Heartbeat("n1", {Rank(h1.desired(0), v1::RANK_STATE_RUNNING)});
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_STARTING);
  Heartbeat("n2", {Rank(h2.desired(0), v1::RANK_STATE_RUNNING)});
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(id).world_size(), 2);

  Heartbeat("n1", {Rank(h1.desired(0), v1::RANK_STATE_EXITED, 0)});
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  auto last = Heartbeat("n2", {Rank(h2.desired(0), v1::RANK_STATE_EXITED, 0)});
  job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.attempts(0).end_reason(), "all 2 ranks exited 0");
  EXPECT_EQ(v1::AttemptEnd_Name(job.attempts(0).end()), "ATTEMPT_END_SUCCEEDED");
  EXPECT_EQ(last.desired_size(), 0) << "finished ranks are no longer desired";
}

TEST_F(ControllerTest, NodeLossRestartsOnSurvivorsFromNewestCheckpointWithoutCounting) {
  for (const char* n : {"n1", "n2", "n3"}) Register(n);
  std::string id = Submit(Spec("a", 2, 3));
  std::map<std::string, v1::HeartbeatResponse> d;
  for (const char* n : {"n1", "n2", "n3"}) d[n] = Heartbeat(n);
  AllRunning({"n1", "n2", "n3"}, d);
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  const auto& r0 = d["n1"].desired(0);
  Heartbeat("n1", {Rank(r0, v1::RANK_STATE_RUNNING)},
            {Event(r0, 1, R"({"event":"checkpoint","step":10,"kind":"sharded","path":"/ck/step-10","bytes":5})"),
             Event(r0, 2, R"({"event":"checkpoint","step":20,"kind":"sharded","path":"/ck/step-20","bytes":5})"),
             Event(r0, 3, R"({"event":"step","step":23,"loss":1.5,"total_steps":100})")});
  EXPECT_EQ(Job(id).checkpoints_size(), 2);
  EXPECT_EQ(Job(id).progress().step(), 23);

  // n3 goes silent; the others keep heartbeating.
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(1000ms);
    Heartbeat("n1", {Rank(r0, v1::RANK_STATE_RUNNING)});
    Heartbeat("n2", {Rank(d["n2"].desired(0), v1::RANK_STATE_RUNNING)});
    c_->Tick();
  }
  auto nodes = c_->ListNodes();
  EXPECT_EQ(nodes.nodes(2).state(), v1::NODE_STATE_LOST);
  v1::Job job = Job(id);
  ASSERT_GE(job.attempts_size(), 1);
  EXPECT_NE(job.attempts(0).end_reason().find("node n3 lost"), std::string::npos) << job.attempts(0).end_reason();
  EXPECT_EQ(v1::AttemptEnd_Name(job.attempts(0).end()), "ATTEMPT_END_NODE_LOST");
  EXPECT_EQ(job.state(), v1::JOB_STATE_RECOVERING) << "waits for the survivors' ranks to be reported gone";
  // The survivors are told to stop at once: their ranks are no longer desired, and they are killed
  // without the stop grace (a sharded save needs the lost rank too; they may hang in a collective).
  auto h1 = Heartbeat("n1", {Rank(r0, v1::RANK_STATE_STOPPING)});
  EXPECT_EQ(h1.desired_size(), 0);
  ASSERT_EQ(h1.stop_now_size(), 1);
  EXPECT_EQ(h1.stop_now(0).job_id(), id);
  EXPECT_EQ(h1.stop_now(0).attempt(), 1);
  EXPECT_EQ(h1.stop_now(0).rank(), r0.key().rank());
  Heartbeat("n2", {Rank(d["n2"].desired(0), v1::RANK_STATE_EXITED, 0, 15)});
  h1 = Heartbeat("n1", {Rank(r0, v1::RANK_STATE_EXITED, 75)});
  job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_STARTING) << job.reason();
  ASSERT_EQ(job.attempts_size(), 2);
  EXPECT_EQ(job.attempts(1).world_size(), 2);
  EXPECT_EQ(job.attempts(1).resume_from(), "/ck/step-20");
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_NE(job.attempts(1).master_port(), job.attempts(0).master_port()) << "fresh MASTER_PORT per attempt";
  ASSERT_EQ(h1.desired_size(), 1);
  EXPECT_EQ(h1.desired(0).key().attempt(), 2);
  EXPECT_EQ(h1.desired(0).resume_from(), "/ck/step-20");
}

TEST_F(ControllerTest, RankFailureBacksOffAndCountsAndGivesUpAfterMaxRestarts) {
  v1::JobSpec spec = Spec("flaky", 1, 1);
  spec.mutable_fault_tolerance()->set_max_restarts(2);
  std::string id = Submit(spec);
  Register("n1");
  for (int attempt = 1; attempt <= 3; ++attempt) {
    auto h = Heartbeat("n1");
    ASSERT_EQ(h.desired_size(), 1) << "attempt " << attempt << ": " << Job(id).reason();
    ASSERT_EQ(h.desired(0).key().attempt(), attempt);
    Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_RUNNING)});
    Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_EXITED, 1)});
    if (attempt == 3) break;
    v1::Job job = Job(id);
    EXPECT_EQ(job.state(), v1::JOB_STATE_RECOVERING);
    EXPECT_EQ(job.restarts(), attempt);
    // Backoff: 1 s after the first failure, 2 s after the second.
    clock_.Advance(std::chrono::milliseconds(1000 * (1 << (attempt - 1)) - 100));
    Heartbeat("n1");
    c_->Tick();
    EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING) << "still backing off";
    clock_.Advance(200ms);
    c_->Tick();
  }
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.attempts_size(), 3);
  EXPECT_NE(job.reason().find("max_restarts = 2"), std::string::npos) << job.reason();
}

TEST_F(ControllerTest, ExitCode2FailsAtOnceAndStopsTheOtherRanks) {
  std::string id = Submit(Spec("bad", 2, 2));
  Register("n1");
  Register("n2");
  auto h1 = Heartbeat("n1");
  auto h2 = Heartbeat("n2");
  Heartbeat("n1", {Rank(h1.desired(0), v1::RANK_STATE_RUNNING)});
  Heartbeat("n2", {Rank(h2.desired(0), v1::RANK_STATE_EXITED, 2)});
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.reason().find("rank 1 exited with code 2"), std::string::npos) << job.reason();
  EXPECT_EQ(Heartbeat("n1", {Rank(h1.desired(0), v1::RANK_STATE_RUNNING)}).desired_size(), 0);
}

TEST_F(ControllerTest, Exit75RestartsWithoutCounting) {
  std::string id = Submit(Spec("pre", 1, 1));
  Register("n1");
  auto h = Heartbeat("n1");
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_RUNNING)});
  auto next = Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_EXITED, 75)});
  EXPECT_EQ(Job(id).restarts(), 0);
  ASSERT_EQ(next.desired_size(), 1) << Job(id).reason();
  EXPECT_EQ(next.desired(0).key().attempt(), 2);
}

// A rank its worker killed because the worker's lease ran out (the controller unreachable, e.g.
// restarting for longer than heartbeat_timeout): the node's loss, not the job's failure.
TEST_F(ControllerTest, ARankKilledByItsWorkersLeaseIsANodeLossNotCounted) {
  std::string id = Submit(Spec("leased", 1, 1));
  Register("n1");
  auto h = Heartbeat("n1");
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_RUNNING)});
  v1::RankStatus killed = Rank(h.desired(0), v1::RANK_STATE_EXITED, 0, 9);
  killed.set_lease_expired(true);
  auto next = Heartbeat("n1", {killed});
  v1::Job job = Job(id);
  EXPECT_EQ(job.restarts(), 0);
  ASSERT_GE(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).end(), v1::ATTEMPT_END_NODE_LOST);
  EXPECT_NE(job.attempts(0).end_reason().find("killed by its worker on node n1"), std::string::npos)
      << job.attempts(0).end_reason();
  ASSERT_EQ(next.desired_size(), 1) << job.reason();
  EXPECT_EQ(next.desired(0).key().attempt(), 2);
}

// The rank protocol's split (docs/architecture.md): typed fields in the assignment, only the job's
// own variables in env, and the spec once per attempt and node, until the worker lists a rank.
TEST_F(ControllerTest, TheSpecTravelsOncePerAttemptAndTheEnvIsTheJobsOwn) {
  v1::JobSpec spec = Spec("once", 1, 1);
  spec.mutable_resources()->set_gpus_per_node(2);
  (*spec.mutable_env())["HF_HOME"] = "/cache/hf";
  std::string id = Submit(spec);
  Register("n1", 2);
  auto first = Heartbeat("n1");
  ASSERT_EQ(first.desired_size(), 2);
  ASSERT_EQ(first.attempt_specs_size(), 1) << "one spec for the attempt, not one per rank";
  EXPECT_EQ(first.attempt_specs(0).job_id(), id);
  EXPECT_EQ(first.attempt_specs(0).attempt(), 1);
  // The spec as stored: normalized, every default filled in, the same message GetJob shows.
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(first.attempt_specs(0).spec(), Job(id).spec()))
      << first.attempt_specs(0).spec().DebugString();
  EXPECT_EQ(first.attempt_specs(0).spec().name(), "once");
  EXPECT_EQ(first.attempt_specs(0).spec().data().max_seq_len(), 4096);
  for (const auto& a : first.desired()) {
    EXPECT_EQ(a.env().size(), 1u);
    EXPECT_EQ(a.env().at("HF_HOME"), "/cache/hf");
    EXPECT_EQ(a.resume_from(), "");  // a fresh start
  }
  // Not reported yet: the spec comes again (the worker may not have seen the reply).
  EXPECT_EQ(Heartbeat("n1").attempt_specs_size(), 1);
  // One rank reported: the other still needs starting, so the spec still comes; both: no more.
  EXPECT_EQ(Heartbeat("n1", {Rank(first.desired(0), v1::RANK_STATE_RUNNING)}).attempt_specs_size(), 1);
  auto both = Heartbeat("n1", {Rank(first.desired(0), v1::RANK_STATE_RUNNING),
                               Rank(first.desired(1), v1::RANK_STATE_RUNNING)});
  EXPECT_EQ(both.desired_size(), 2);
  EXPECT_EQ(both.attempt_specs_size(), 0);
}

// The rank's error event, sent before its exit, is the rest of the end reason.
TEST_F(ControllerTest, TheRanksErrorEventIsInTheReason) {
  std::string id = Submit(Spec("said", 1, 1));
  Register("n1");
  auto h = Heartbeat("n1");
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_RUNNING)});
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_EXITED, 2)},
            {Event(h.desired(0), 1, R"({"event":"error","message":"model_type 'gpt2' is not supported","exit_code":2})")});
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.attempts(0).end_reason(),
            "rank 0 exited with code 2 (bad configuration or input): model_type 'gpt2' is not supported");
  EXPECT_EQ(v1::AttemptEnd_Name(job.attempts(0).end()), "ATTEMPT_END_RANK_FAILED");
  EXPECT_NE(job.reason().find("model_type 'gpt2' is not supported"), std::string::npos) << job.reason();
}

// Failed checkpoint saves are job events (and eft_job_checkpoint_failures_total counts them); exit
// 77 (the checkpoint storage is full after the rank freed what it could) fails the job at once: a
// restart would fail the same way and lose the steps since the last checkpoint again.
TEST_F(ControllerTest, FailedSavesAreJobEventsAndAFullStorageFailsTheJobWithoutRetry) {
  v1::JobSpec spec = Spec("full-disk", 1, 1);
  spec.mutable_fault_tolerance()->set_max_restarts(3);
  std::string id = Submit(spec);
  Register("n1");
  auto h = Heartbeat("n1");
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_RUNNING)},
            {Event(h.desired(0), 1,
                   R"({"event":"checkpoint_failed","kind":"sharded","step":20,"reason":"writing x: No space left on device","consecutive":1,"storage_full":true,"freed":2})"),
             Event(h.desired(0), 2,
                   R"({"event":"checkpoint_failed","kind":"sharded","step":40,"reason":"writing y: No space left on device","consecutive":2,"storage_full":true})")});
  const std::vector<std::string> messages = EventsOfType(id, "checkpoint_failed");
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0],
            "sharded checkpoint at step 20 failed (1 in a row, storage full, 2 older checkpoint(s) deleted to make "
            "room): writing x: No space left on device");
  EXPECT_EQ(messages[1], "sharded checkpoint at step 40 failed (2 in a row, storage full): writing y: No space left on device");
  for (const auto& j : c_->Snapshot(100).jobs) {
    if (j.id == id) {
      EXPECT_EQ(j.checkpoint_failures, 2);
    }
  }
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_EXITED, 77)},
            {Event(h.desired(0), 3, R"({"event":"error","message":"checkpoint storage /ckpt is full: 3 checkpoints in a row failed","exit_code":77})")});
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_NE(job.attempts(0).end_reason().find("exited with code 77 (checkpoint storage full: free space or point "
                                              "checkpoint.dir elsewhere"),
            std::string::npos)
      << job.attempts(0).end_reason();
  EXPECT_EQ(v1::AttemptEnd_Name(job.attempts(0).end()), "ATTEMPT_END_RANK_FAILED");
  EXPECT_NE(job.reason().find("3 checkpoints in a row failed"), std::string::npos) << job.reason();
}

// Exit 78 (a rank ran out of memory): once is restarted, counted (another program's passing use of
// the GPU); the second time in a row at the same world size the job fails with the reason, its
// remaining restarts unspent.
TEST_F(ControllerTest, RunningOutOfMemoryTwiceAtTheSameWorldSizeFailsTheJob) {
  v1::JobSpec spec = Spec("oom", 1, 1);
  spec.mutable_fault_tolerance()->set_max_restarts(5);
  std::string id = Submit(spec);
  Register("n1");
  const std::string said = "rank 0 ran out of GPU memory on cuda:0 in step 1: CUDA out of memory. To fit: ...";
  for (int attempt = 1; attempt <= 2; ++attempt) {
    auto h = Heartbeat("n1");
    ASSERT_EQ(h.desired_size(), 1) << "attempt " << attempt << ": " << Job(id).reason();
    ASSERT_EQ(h.desired(0).key().attempt(), attempt);
    Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_RUNNING)});
    Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_EXITED, 78)},
              {Event(h.desired(0), attempt, R"({"event":"error","message":")" + said + R"(","exit_code":78})")});  // seq: per node
    v1::Job job = Job(id);
    EXPECT_EQ(job.attempts(attempt - 1).end_reason().rfind("rank 0 exited with code 78 (out of memory): " + said, 0),
              0u)
        << job.attempts(attempt - 1).end_reason();
    EXPECT_EQ(v1::AttemptEnd_Name(job.attempts(attempt - 1).end()), "ATTEMPT_END_OUT_OF_MEMORY");
    if (attempt == 2) break;
    EXPECT_EQ(job.state(), v1::JOB_STATE_RECOVERING) << job.reason();
    EXPECT_EQ(job.restarts(), 1);
    clock_.Advance(1100ms);  // the backoff
    Heartbeat("n1");
    c_->Tick();
  }
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.restarts(), 1) << "four restarts left unspent";
  EXPECT_NE(job.reason().find("; attempt 1 ran out of memory at this world size too; not retried"), std::string::npos)
      << job.reason();
  EXPECT_NE(job.reason().find("To fit: ..."), std::string::npos) << "the rank's advice is in the job's reason";
}

// Out of memory after an ordinary failure is its first: restarted.
TEST_F(ControllerTest, RunningOutOfMemoryAfterAnotherFailureIsRestarted) {
  std::string id = Submit(Spec("oom-once", 1, 1));
  Register("n1");
  for (int code : {1, 78}) {
    auto h = Heartbeat("n1");
    ASSERT_EQ(h.desired_size(), 1) << Job(id).reason();
    Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_RUNNING)});
    Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_EXITED, code)});
    EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING) << "after exit " << code << ": " << Job(id).reason();
    clock_.Advance(5000ms);
    Heartbeat("n1");
    c_->Tick();
  }
  EXPECT_EQ(Job(id).restarts(), 2);
}

// Exit 76 (rank 0 found MASTER_PORT taken): a new attempt at once, on another port, not counted.
TEST_F(ControllerTest, ABusyRendezvousPortRetriesOnAnotherPortWithoutCounting) {
  std::string id = Submit(Spec("port", 1, 1));
  Register("n1");
  auto h = Heartbeat("n1");
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_RUNNING)});
  auto next = Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_EXITED, 76)});
  v1::Job job = Job(id);
  EXPECT_EQ(job.restarts(), 0);
  ASSERT_EQ(next.desired_size(), 1) << job.reason();
  EXPECT_EQ(next.desired(0).key().attempt(), 2);
  EXPECT_NE(next.desired(0).master_port(), h.desired(0).master_port());
  EXPECT_NE(job.attempts(0).end_reason().find("exited with code 76 (rendezvous port " +
                                              std::to_string(h.desired(0).master_port()) + " busy on node n1"),
            std::string::npos)
      << job.attempts(0).end_reason();
  EXPECT_EQ(v1::AttemptEnd_Name(job.attempts(0).end()), "ATTEMPT_END_PORT_BUSY");
}

// Every checkpoint was unusable and the rank started over: the job says so in its events.
TEST_F(ControllerTest, ANoValidCheckpointEventIsAJobEvent) {
  std::string id = Submit(Spec("lost", 1, 1));
  Register("n1");
  auto h = Heartbeat("n1");
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_RUNNING)},
            {Event(h.desired(0), 1, R"({"event":"no_valid_checkpoint","dir":"/ckpt","skipped":2})")});
  v1::Job job = Job(id);
  bool found = false;
  for (const auto& e : job.events()) {
    if (e.type() != "no_valid_checkpoint") continue;
    found = true;
    EXPECT_EQ(e.message(), "no valid checkpoint in /ckpt: starting from scratch, 2 checkpoints skipped (attempt 1)");
  }
  EXPECT_TRUE(found);
}

TEST_F(ControllerTest, RankFailureWaitsForNodesToProveAliveAndNodeLossIsForgiven) {
  for (const char* n : {"n1", "n2", "n3"}) Register(n);
  std::string id = Submit(Spec("e", 2, 3));
  std::map<std::string, v1::HeartbeatResponse> d;
  for (const char* n : {"n1", "n2", "n3"}) d[n] = Heartbeat(n);
  AllRunning({"n1", "n2", "n3"}, d);
  clock_.Advance(10ms);
  // n3 dies; n1's rank notices first (a collective failed) and exits 1.
  auto h1 = Heartbeat("n1", {Rank(d["n1"].desired(0), v1::RANK_STATE_EXITED, 1)});
  EXPECT_EQ(Job(id).restarts(), 1);
  Heartbeat("n2", {Rank(d["n2"].desired(0), v1::RANK_STATE_EXITED, 1)});
  clock_.Advance(1100ms);  // backoff over
  Heartbeat("n1");
  Heartbeat("n2");
  c_->Tick();
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING) << "n3 has not heartbeated since the failure";
  clock_.Advance(2000ms);  // n3 silent for 3.1 s in total
  Heartbeat("n1");
  Heartbeat("n2");
  c_->Tick();
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_STARTING) << job.reason();
  EXPECT_EQ(job.restarts(), 0) << "the failure is blamed on the lost node";
  // The lost node first, then what its peers' ranks said (docs/architecture.md, "Recovery details").
  EXPECT_EQ(job.attempts(0).end_reason().rfind("node n3 lost (", 0), 0u) << job.attempts(0).end_reason();
  EXPECT_NE(job.attempts(0).end_reason().find("; its peers' ranks failed first (rank 0 exited with code 1"),
            std::string::npos)
      << job.attempts(0).end_reason();
  EXPECT_EQ(v1::AttemptEnd_Name(job.attempts(0).end()), "ATTEMPT_END_RANK_FAILED") << "what happened to the rank";
  EXPECT_EQ(job.attempts(1).world_size(), 2);
}

TEST_F(ControllerTest, CancelRemovesRanksFromDesiredState) {
  std::string id = Submit(Spec("c", 1, 1));
  Register("n1");
  auto h = Heartbeat("n1");
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_RUNNING)});
  auto job = c_->CancelJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_RUNNING)}).desired_size(), 0);
  EXPECT_TRUE(c_->CancelJob(id).ok()) << "cancelling twice is fine";
  EXPECT_EQ(c_->CancelJob("999").status().code(), StatusCode::kNotFound);
  // A stopping rank keeps its slot: a new job waits until it is reported gone.
  std::string next = Submit(Spec("next", 1, 1));
  EXPECT_EQ(Job(next).state(), v1::JOB_STATE_QUEUED);
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_STOPPING)});
  EXPECT_EQ(Job(next).state(), v1::JOB_STATE_QUEUED);
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_EXITED, 0, 15)});
  EXPECT_EQ(Job(next).state(), v1::JOB_STATE_STARTING);
}

TEST_F(ControllerTest, ControllerRestartKeepsRunningAttempt) {
  std::string id = Submit(Spec("r", 2, 2));
  std::string queued = Submit(Spec("q", 2, 2));
  Register("n1");
  Register("n2");
  auto h1 = Heartbeat("n1");
  auto h2 = Heartbeat("n2");
  AllRunning({"n1", "n2"}, {{"n1", h1}, {"n2", h2}});
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);

  Restart();
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(queued).state(), v1::JOB_STATE_QUEUED);
  // Old incarnations are told to register again, and do so with what they run.
  v1::HeartbeatRequest stale;
  stale.set_node_name("n1");
  stale.set_incarnation("n1-inc1");
  EXPECT_TRUE(c_->Heartbeat(stale)->reregister());
  auto r1 = Register("n1", 1, {Rank(h1.desired(0), v1::RANK_STATE_RUNNING)}, "n1-inc1");
  auto r2 = Register("n2", 1, {Rank(h2.desired(0), v1::RANK_STATE_RUNNING)}, "n2-inc1");
  EXPECT_EQ(r1.desired_size(), 1);
  EXPECT_EQ(r1.desired(0).key().attempt(), 1);
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(Job(queued).state(), v1::JOB_STATE_QUEUED);
}

TEST_F(ControllerTest, RestartedWorkerWithoutItsRankRestartsTheAttempt) {
  std::string id = Submit(Spec("w", 2, 2));
  Register("n1");
  Register("n2");
  auto h1 = Heartbeat("n1");
  auto h2 = Heartbeat("n2");
  AllRunning({"n1", "n2"}, {{"n1", h1}, {"n2", h2}});
  Register("n2", 1, {}, "n2-inc2");  // a new worker process that lost its rank
  v1::Job job = Job(id);
  EXPECT_NE(job.attempts(0).end_reason().find("vanished"), std::string::npos) << job.attempts(0).end_reason();
  EXPECT_EQ(v1::AttemptEnd_Name(job.attempts(0).end()), "ATTEMPT_END_RANK_LOST");
  EXPECT_EQ(job.restarts(), 0);
}

TEST_F(ControllerTest, NodeSlotsAreSharedWithoutOverlap) {
  std::string a = Submit(Spec("a", 1, 1, 2));
  std::string b = Submit(Spec("b", 1, 1, 2));
  std::string c = Submit(Spec("c", 1, 1, 1));
  auto r = Register("big", 4);
  ASSERT_EQ(r.desired_size(), 4);
  std::set<int> slots;
  for (const auto& d : r.desired()) slots.insert(d.slot());
  EXPECT_EQ(slots, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(Job(c).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(c_->ListNodes().nodes(0).free_slots(), 0);
  (void)a;
  (void)b;
}

TEST_F(ControllerTest, DrainedNodesTakeNothingNew) {
  Register("n1");
  ASSERT_TRUE(c_->SetDrained("n1", true).ok());
  std::string id = Submit(Spec("d", 1, 1));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_QUEUED);
  EXPECT_NE(Job(id).reason().find("drained"), std::string::npos) << Job(id).reason();
  ASSERT_TRUE(c_->SetDrained("n1", false).ok());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_STARTING);
  EXPECT_EQ(c_->SetDrained("nope", true).status().code(), StatusCode::kNotFound);
}

TEST_F(ControllerTest, ShuttingDownWorkersTakeNothingNew) {
  Register("n1");
  v1::HeartbeatRequest req;
  req.set_node_name("n1");
  req.set_incarnation(incarnations_["n1"]);
  req.set_shutting_down(true);
  ASSERT_TRUE(c_->Heartbeat(req).ok());
  std::string id = Submit(Spec("s", 1, 1));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_QUEUED);
  Register("n1", 1, {}, "n1-inc2");  // the worker came back
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_STARTING);
}

TEST_F(ControllerTest, SubmitIsIdempotentWithRequestIdAndValidates) {
  auto first = c_->SubmitJob(Spec("x", 1, 1), "req-1");
  auto again = c_->SubmitJob(Spec("x", 1, 1), "req-1");
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->id(), again->id());
  EXPECT_EQ(first->spec().checkpoint().dir(), config_.db_path + ".d/checkpoints/" + first->id());
  v1::JobSpec bad = Spec("x", 3, 2);
  auto rejected = c_->SubmitJob(bad, "");
  EXPECT_EQ(rejected.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rejected.status().message().find("nodes.max"), std::string::npos) << rejected.status();
}

TEST_F(ControllerTest, ConcurrentSubmitsAreGroupCommittedAndEachAcknowledgedOnce) {
  // 16 threads x 20 submits; every fourth thread reuses one request id, as retrying clients do.
  std::vector<std::thread> threads;
  std::mutex mu;
  std::map<std::string, int> ids;  // job id -> acknowledgements
  std::vector<std::string> shared_ids;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        std::string request_id = t % 4 == 0 ? "same-" + std::to_string(i) : "";
        auto job = c_->SubmitJob(Spec("c" + std::to_string(t), 1, 1), request_id);
        ASSERT_TRUE(job.ok()) << job.status();
        std::lock_guard<std::mutex> lock(mu);
        ++ids[job->id()];
        if (!request_id.empty()) shared_ids.push_back(request_id + "=" + job->id());
      }
    });
  }
  for (auto& t : threads) t.join();
  // 12 threads x 20 distinct jobs, plus 20 jobs shared by the 4 threads that reuse request ids.
  EXPECT_EQ(ids.size(), 12u * 20 + 20);
  std::map<std::string, std::set<std::string>> by_request;
  for (const auto& s : shared_ids) by_request[s.substr(0, s.find('='))].insert(s.substr(s.find('=') + 1));
  for (const auto& [rid, jobs] : by_request) EXPECT_EQ(jobs.size(), 1u) << rid << " made more than one job";
  Restart();
  v1::ListJobsRequest all;
  all.set_page_size(1000);
  EXPECT_EQ(c_->ListJobs(all)->jobs_size(), 12 * 20 + 20) << "every acknowledged submit is durable";
}

TEST_F(ControllerTest, ListJobsPagesNewestFirstAndFilters) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(Submit(Spec("j" + std::to_string(i), 1, 1)));
  ASSERT_TRUE(c_->CancelJob(ids[1]).ok());
  v1::ListJobsRequest req;
  req.set_page_size(2);
  std::vector<std::string> seen;
  do {
    auto page = c_->ListJobs(req);
    ASSERT_TRUE(page.ok());
    for (const auto& j : page->jobs()) seen.push_back(j.id());
    req.set_page_token(page->next_page_token());
  } while (!req.page_token().empty());
  EXPECT_EQ(seen, (std::vector<std::string>{ids[4], ids[3], ids[2], ids[1], ids[0]}));
  v1::ListJobsRequest only;
  only.add_states(v1::JOB_STATE_CANCELLED);
  auto page = c_->ListJobs(only);
  ASSERT_EQ(page->jobs_size(), 1);
  EXPECT_EQ(page->jobs(0).id(), ids[1]);
  v1::ListJobsRequest bad;
  bad.set_page_token("nope");
  EXPECT_EQ(c_->ListJobs(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ControllerTest, EventsAreAcknowledgedOnceAndBadOnesIgnored) {
  std::string id = Submit(Spec("ev", 1, 1));
  Register("n1");
  auto h = Heartbeat("n1");
  const auto& a = h.desired(0);
  auto r = Heartbeat("n1", {Rank(a, v1::RANK_STATE_RUNNING)},
                     {Event(a, 1, "not json"), Event(a, 2, R"({"event":"checkpoint","step":5,"path":"/c/5"})")});
  EXPECT_EQ(r.acked_event_seq(), 2u);
  // The ack was lost: the same events again are not stored twice.
  Heartbeat("n1", {Rank(a, v1::RANK_STATE_RUNNING)}, {Event(a, 2, R"({"event":"checkpoint","step":5,"path":"/c/5"})")});
  EXPECT_EQ(Job(id).checkpoints_size(), 1);
  Restart();
  EXPECT_EQ(Job(id).checkpoints_size(), 1) << "checkpoints are durable";
}

}  // namespace
}  // namespace eft::controller

namespace eft::controller {
namespace {

// Evaluation (issue 19): an eval event sets the job's eval fields, even before the first step, and
// later step events keep them until the next evaluation.
TEST_F(ControllerTest, EvalLossIsProgressAndOutlivesStepEvents) {
  Register("n1");
  std::string id = Submit(Spec("a", 1, 1));
  auto d = Heartbeat("n1");
  const auto& r0 = d.desired(0);
  Heartbeat("n1", {Rank(r0, v1::RANK_STATE_RUNNING)}, {Event(r0, 1, R"({"event":"eval","step":0,"loss":2.5,"tokens":80})")});
  v1::Job job = Job(id);
  ASSERT_TRUE(job.has_progress()) << "the loss before training shows before any step";
  EXPECT_DOUBLE_EQ(job.progress().eval_loss(), 2.5);
  EXPECT_EQ(job.progress().eval_step(), 0);
  Heartbeat("n1", {Rank(r0, v1::RANK_STATE_RUNNING)},
            {Event(r0, 2, R"({"event":"step","step":1,"loss":2.4,"total_steps":4})"),
             Event(r0, 3, R"({"event":"step","step":2,"loss":2.1,"total_steps":4})"),
             Event(r0, 4, R"({"event":"eval","step":2,"loss":1.9,"tokens":80})"),
             Event(r0, 5, R"({"event":"step","step":3,"loss":1.8,"total_steps":4})")});
  job = Job(id);
  EXPECT_EQ(job.progress().step(), 3);
  EXPECT_DOUBLE_EQ(job.progress().loss(), 1.8);
  EXPECT_DOUBLE_EQ(job.progress().eval_loss(), 1.9);
  EXPECT_EQ(job.progress().eval_step(), 2);
  EXPECT_EQ(job.progress().eval_tokens(), 80);
}

}  // namespace
}  // namespace eft::controller
