// Memory snapshots in the controller (controller/snapshot_tracker.h, docs/checkpoints.md "Memory
// snapshots"): the pure choice of a step and of replica peers, and, on a real Controller with a
// ManualClock, a node's loss recovered from the newest step the survivors hold: staged by them, the
// next attempt resuming from it; and each way that falls back to the newest disk checkpoint.
#include <algorithm>

#include "controller/snapshot_tracker.h"
#include "tests/unit/controller/controller_test_fixture.h"

namespace eft::controller {
namespace {

v1::HeldSnapshot Held(const std::string& job, int attempt, int64_t step, int world, std::vector<int> ranks,
                      int64_t bytes_per_rank = 100) {
  v1::HeldSnapshot h;
  h.set_job_id(job);
  h.set_attempt(attempt);
  h.set_step(step);
  h.set_world_size(world);
  for (int r : ranks) h.add_ranks(r);
  h.set_bytes(bytes_per_rank * static_cast<int64_t>(ranks.size()));
  return h;
}

TEST(ChooseMemoryStepTest, TheNewestStepHeldWholeNewerThanTheDiskWithHoldersSpread) {
  std::map<std::string, std::vector<v1::HeldSnapshot>> held = {
      // n1: its ranks 0-1 at steps 8 and 7, and n2's ranks 2-3 (a replica) at 7 only.
      {"n1", {Held("j", 1, 8, 4, {0, 1}), Held("j", 1, 7, 4, {0, 1}), Held("j", 1, 7, 4, {2, 3})}},
      // n3: n1's ranks (a replica) at 8 and 7.
      {"n3", {Held("j", 1, 8, 4, {0, 1}), Held("j", 1, 7, 4, {0, 1})}},
      // Another job and another attempt do not count.
      {"n4", {Held("j", 2, 9, 4, {0, 1, 2, 3}), Held("k", 1, 9, 4, {0, 1, 2, 3})}},
  };
  MemoryStepChoice c = ChooseMemoryStep(held, "j", 1, 4, 5);
  ASSERT_EQ(c.step, 7) << c.why_not << ": step 8 lacks ranks 2-3";
  ASSERT_EQ(c.holder.size(), 4u);
  EXPECT_EQ(c.holder[2], "n1");
  EXPECT_EQ(c.holder[3], "n1");
  // Ranks 0-1 are held by n1 and n3; n1 already stages 2-3, so n3 takes them.
  EXPECT_EQ(c.holder[0], "n3");
  EXPECT_EQ(c.holder[1], "n3");
  EXPECT_EQ(c.bytes, 400);

  MemoryStepChoice none = ChooseMemoryStep(held, "j", 1, 4, 7);
  EXPECT_EQ(none.step, -1);
  EXPECT_EQ(none.why_not,
            "the newest memory snapshot held whole (step 7) is not newer than the newest disk checkpoint (step 7)");
  held.erase("n1");
  none = ChooseMemoryStep(held, "j", 1, 4, 5);
  EXPECT_EQ(none.step, -1);
  EXPECT_EQ(none.why_not,
            "no step of attempt 1 is held whole by the live nodes (the newest, step 8, lacks ranks 2-3)");
  EXPECT_EQ(ChooseMemoryStep({}, "j", 1, 4, 0).why_not, "no live node holds a memory snapshot of attempt 1");
}

TEST(ReplicaPeersTest, TheNextNodesAroundTheRingThatCanReceive) {
  const std::vector<std::string> nodes = {"a", "b", "c", "d"};
  auto all = [](const std::string&) { return true; };
  EXPECT_EQ(ReplicaPeers(nodes, "a", 1, all), (std::vector<std::string>{"b"}));
  EXPECT_EQ(ReplicaPeers(nodes, "d", 1, all), (std::vector<std::string>{"a"}));
  EXPECT_EQ(ReplicaPeers(nodes, "c", 2, all), (std::vector<std::string>{"d", "a"}));
  EXPECT_EQ(ReplicaPeers(nodes, "b", 9, all), (std::vector<std::string>{"c", "d", "a"})) << "never itself";
  EXPECT_EQ(ReplicaPeers(nodes, "a", 1, [](const std::string& n) { return n != "b"; }),
            (std::vector<std::string>{"c"}))
      << "a node without a snapshot service is passed over";
  EXPECT_TRUE(ReplicaPeers(nodes, "a", 0, all).empty());
  EXPECT_TRUE(ReplicaPeers({"a"}, "a", 1, all).empty()) << "one node: nowhere else to go";
  EXPECT_TRUE(ReplicaPeers(nodes, "z", 1, all).empty());
}

class ControllerSnapshotTest : public ControllerTest {
 protected:
  // Three nodes with a snapshot service each, a job on all three with a disk checkpoint at step 5 and
  // step 8 reached; returns the job id and fills assignments_.
  std::string StartJobWithCheckpointAtStep5(int min_nodes = 2) {
    for (const char* n : {"n1", "n2", "n3"}) RegisterWithSnapshots(n);
    v1::JobSpec spec = Spec("a", min_nodes, 3);
    spec.mutable_checkpoint()->set_dir("/ck");
    const std::string id = Submit(spec);
    for (const char* n : {"n1", "n2", "n3"}) {
      v1::HeartbeatResponse h = Heartbeat(n);
      EXPECT_EQ(h.desired_size(), 1);
      if (h.desired_size() == 1) assignments_[n] = h.desired(0);
      specs_[n] = h.attempt_specs_size() == 1 ? h.attempt_specs(0) : v1::AttemptSpec();
    }
    for (const char* n : {"n1", "n2", "n3"}) Heartbeat(n, {Rank(assignments_[n], v1::RANK_STATE_RUNNING)});
    const auto& r0 = assignments_["n1"];
    Heartbeat("n1", {Rank(r0, v1::RANK_STATE_RUNNING)},
              {Event(r0, 1, R"({"event":"checkpoint","step":5,"kind":"sharded","path":"/ck/step-5","bytes":5})"),
               Event(r0, 2, R"({"event":"step","step":8,"loss":1.5,"total_steps":100})")});
    return id;
  }
  void RegisterWithSnapshots(const std::string& node) {
    v1::RegisterRequest req;
    req.set_node_name(node);
    req.set_address(node + ".addr");
    req.set_slots(1);
    req.set_incarnation(node + "-inc1");
    req.set_snapshot_port(7100);
    incarnations_[node] = node + "-inc1";
    ASSERT_TRUE(c_->Register(req).ok());
  }
  // A heartbeat of `node` with its rank in `state`, what it holds, and stage results.
  v1::HeartbeatResponse Report(const std::string& node, v1::RankState state, std::vector<v1::HeldSnapshot> held,
                               std::vector<v1::StageResult> staged = {}, int exit_code = 0) {
    v1::HeartbeatRequest req;
    req.set_node_name(node);
    req.set_incarnation(incarnations_[node]);
    *req.add_ranks() = Rank(assignments_[node], state, exit_code);
    for (auto& h : held) *req.add_snapshots() = h;
    for (auto& s : staged) *req.add_staged() = s;
    auto resp = c_->Heartbeat(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : v1::HeartbeatResponse();
  }
  // n2 goes silent until it is LOST; n1 and n3 keep reporting `held1` and `held3`.
  void LoseN2(const std::vector<v1::HeldSnapshot>& held1, const std::vector<v1::HeldSnapshot>& held3) {
    for (int i = 0; i < 4; ++i) {
      clock_.Advance(1000ms);
      Report("n1", v1::RANK_STATE_RUNNING, held1);
      Report("n3", v1::RANK_STATE_RUNNING, held3);
      c_->Tick();
    }
    ASSERT_EQ(c_->ListNodes().nodes(1).state(), v1::NODE_STATE_LOST);
  }
  // LoseN2, then the survivors report their ranks gone and a pass decides where the restart resumes.
  void LoseN2AndStopTheSurvivors(const std::vector<v1::HeldSnapshot>& held1, const std::vector<v1::HeldSnapshot>& held3) {
    LoseN2(held1, held3);
    Report("n1", v1::RANK_STATE_EXITED, held1);
    Report("n3", v1::RANK_STATE_EXITED, held3);
    c_->Tick();
  }
  // The restart took the disk checkpoint of step 5, and its one memory_snapshot_unusable event said `why`.
  void ExpectResumedFromDiskBecause(const std::string& id, const std::string& why) {
    v1::Job job = Job(id);
    ASSERT_EQ(job.state(), v1::JOB_STATE_STARTING) << job.reason();
    EXPECT_EQ(job.attempts(1).resume_from(), "/ck/step-5");
    const auto unusable = EventsOfType(id, "memory_snapshot_unusable");
    ASSERT_EQ(unusable.size(), 1u);
    EXPECT_EQ(unusable[0], why + "; resuming from the newest disk checkpoint, step 5 (/ck/step-5)");
  }
  // Up to three rounds while job `id` recovers: every node reports what it holds and carries out the
  // stage orders its reply gives, each expected to be of `step`, then a pass. Returns the orders.
  int CarryOutStaging(const std::string& id, const std::map<std::string, std::vector<v1::HeldSnapshot>>& held,
                      int64_t step) {
    int orders = 0;
    for (int i = 0; i < 3 && Job(id).state() == v1::JOB_STATE_RECOVERING; ++i) {
      for (const auto& [node, h] : held) {
        const v1::HeartbeatResponse reply = Report(node, v1::RANK_STATE_EXITED, h);
        for (const auto& o : reply.stage()) {
          ++orders;
          EXPECT_EQ(o.step(), step);
          Report(node, v1::RANK_STATE_EXITED, h, {Staged(o)});
        }
      }
      c_->Tick();
    }
    return orders;
  }
  static v1::StageResult Staged(const v1::StageOrder& order, const std::string& error = "") {
    v1::StageResult r;
    r.set_job_id(order.job_id());
    r.set_attempt(order.attempt());
    r.set_step(order.step());
    *r.mutable_ranks() = order.ranks();
    r.set_error(error);
    return r;
  }
  std::map<std::string, v1::RankAssignment> assignments_;
  std::map<std::string, v1::AttemptSpec> specs_;
};

TEST_F(ControllerSnapshotTest, EachNodeIsToldItsReplicaPeerAndWhatToKeep) {
  const std::string id = StartJobWithCheckpointAtStep5();
  ASSERT_EQ(specs_["n1"].snapshot_peers_size(), 1);
  EXPECT_EQ(specs_["n1"].snapshot_peers(0).node_name(), "n2");
  EXPECT_EQ(specs_["n1"].snapshot_peers(0).address(), "n2.addr:7100");
  EXPECT_EQ(specs_["n2"].snapshot_peers(0).node_name(), "n3");
  EXPECT_EQ(specs_["n3"].snapshot_peers(0).node_name(), "n1");
  v1::HeartbeatResponse h = Report("n1", v1::RANK_STATE_RUNNING, {});
  ASSERT_EQ(h.keep_snapshots_size(), 1);
  EXPECT_EQ(h.keep_snapshots(0).job_id(), id);
  EXPECT_EQ(h.keep_snapshots(0).attempt(), 1);
  EXPECT_EQ(h.keep_snapshots(0).keep_step(), 0) << "nothing replicated yet";
  EXPECT_EQ(h.stage_size(), 0);
  // Step 6 is held with its replica for every rank, step 7 not yet: every node keeps step 6.
  Report("n1", v1::RANK_STATE_RUNNING, {Held(id, 1, 7, 3, {0}), Held(id, 1, 6, 3, {0, 2})});
  Report("n2", v1::RANK_STATE_RUNNING, {Held(id, 1, 7, 3, {1}), Held(id, 1, 6, 3, {1, 0})});
  h = Report("n3", v1::RANK_STATE_RUNNING, {Held(id, 1, 7, 3, {2}), Held(id, 1, 6, 3, {2, 1}), Held(id, 1, 7, 3, {1})});
  ASSERT_EQ(h.keep_snapshots_size(), 1);
  EXPECT_EQ(h.keep_snapshots(0).keep_step(), 6);
  // It never moves back, even when a node's reports stop showing it (a frozen worker, a lost node).
  h = Report("n1", v1::RANK_STATE_RUNNING, {Held(id, 1, 8, 3, {0})});
  EXPECT_EQ(h.keep_snapshots(0).keep_step(), 6);
}

TEST_F(ControllerSnapshotTest, ANodesLossResumesFromTheNewestStepTheSurvivorsHoldWhole) {
  const std::string id = StartJobWithCheckpointAtStep5();
  // Ranks 0, 1, 2 on n1, n2, n3; each node holds its own rank and a replica of the previous node's.
  // n2's rank 1 at step 8 reached n3 only as far as step 7.
  const std::vector<v1::HeldSnapshot> held1 = {Held(id, 1, 8, 3, {0}), Held(id, 1, 7, 3, {0}), Held(id, 1, 8, 3, {2})};
  const std::vector<v1::HeldSnapshot> held3 = {Held(id, 1, 8, 3, {2}), Held(id, 1, 7, 3, {2}), Held(id, 1, 7, 3, {1}),
                                               Held(id, 1, 8, 3, {0})};
  LoseN2(held1, held3);
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING);
  // The survivors' ranks stop; then the restart waits for step 7 to be staged.
  Report("n1", v1::RANK_STATE_EXITED, held1, {}, 0);
  v1::HeartbeatResponse h3 = Report("n3", v1::RANK_STATE_EXITED, held3, {}, 0);
  c_->Tick();
  v1::HeartbeatResponse h1 = Report("n1", v1::RANK_STATE_EXITED, held1);
  h3 = Report("n3", v1::RANK_STATE_EXITED, held3);
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING) << "not before the shards are staged";
  std::vector<int> staged_ranks;
  for (const auto* h : {&h1, &h3}) {
    for (const auto& o : h->stage()) {
      EXPECT_EQ(o.step(), 7);
      EXPECT_EQ(o.attempt(), 1);
      EXPECT_EQ(o.world_size(), 3);
      EXPECT_EQ(o.dir(), "/ck/step-7.snapshot");
      staged_ranks.insert(staged_ranks.end(), o.ranks().begin(), o.ranks().end());
    }
  }
  std::sort(staged_ranks.begin(), staged_ranks.end());
  EXPECT_EQ(staged_ranks, (std::vector<int>{0, 1, 2}));
  ASSERT_EQ(h3.stage_size(), 1);
  EXPECT_NE(std::find(h3.stage(0).ranks().begin(), h3.stage(0).ranks().end(), 1), h3.stage(0).ranks().end())
      << "rank 1 is held by n3 only";
  // The attempt keeps the old attempt's snapshots while it waits.
  ASSERT_EQ(h1.keep_snapshots_size(), 1);
  EXPECT_EQ(h1.keep_snapshots(0).attempt(), 1);

  if (h1.stage_size() > 0) Report("n1", v1::RANK_STATE_EXITED, held1, {Staged(h1.stage(0))});
  Report("n3", v1::RANK_STATE_EXITED, held3, {Staged(h3.stage(0))});
  c_->Tick();
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_STARTING) << job.reason();
  ASSERT_EQ(job.attempts_size(), 2);
  EXPECT_EQ(job.attempts(1).resume_from(), "/ck/step-7.snapshot");
  EXPECT_EQ(job.attempts(1).world_size(), 2);
  // The attempt table's columns (eftctl job describe: FROM "memory 7", LOST 1).
  EXPECT_FALSE(job.attempts(0).has_steps_lost()) << "the first attempt lost nothing before it";
  EXPECT_EQ(job.attempts(0).resume_step(), 0);
  EXPECT_EQ(job.attempts(0).reached_step(), 8);
  EXPECT_EQ(job.attempts(1).resume_step(), 7);
  EXPECT_EQ(job.attempts(1).steps_lost(), 1);
  const std::vector<std::string> started = EventsOfType(id, "attempt_started");
  ASSERT_EQ(started.size(), 2u);
  EXPECT_NE(started[1].find("resuming from the memory snapshot of step 7 ("), std::string::npos) << started[1];
  EXPECT_NE(started[1].find("from n3's memory"), std::string::npos) << started[1];
  EXPECT_NE(started[1].find("the newest disk checkpoint was step 5)"), std::string::npos) << started[1];
  EXPECT_NE(started[1].find("(step 7; attempt 1 reached step 8: 1 step lost)"), std::string::npos) << started[1];
  EXPECT_TRUE(EventsOfType(id, "memory_snapshot_unusable").empty());
  // The new attempt's ranks get the staged directory; no more orders go out.
  v1::HeartbeatResponse next = Report("n1", v1::RANK_STATE_EXITED, held1);
  ASSERT_EQ(next.desired_size(), 1);
  EXPECT_EQ(next.desired(0).resume_from(), "/ck/step-7.snapshot");
  EXPECT_EQ(next.stage_size(), 0);
  // Both attempts are kept until the new one holds a step of its own whole.
  EXPECT_EQ(next.keep_snapshots_size(), 2);
  // Attempt 2 fails before it snapshots or saves anything: attempt 3 is handed the same snapshot.
  v1::HeartbeatResponse n3 = Report("n3", v1::RANK_STATE_EXITED, held3);
  ASSERT_EQ(n3.desired_size(), 1);
  assignments_["n1"] = next.desired(0);
  assignments_["n3"] = n3.desired(0);
  Report("n1", v1::RANK_STATE_EXITED, {}, {}, 1);
  Report("n3", v1::RANK_STATE_EXITED, {}, {}, 1);
  for (int i = 0; i < 5 && Job(id).attempts_size() < 3; ++i) {
    clock_.Advance(1000ms);  // the backoff
    Report("n1", v1::RANK_STATE_EXITED, {}, {}, 1);
    Report("n3", v1::RANK_STATE_EXITED, {}, {}, 1);
    c_->Tick();
  }
  job = Job(id);
  ASSERT_EQ(job.attempts_size(), 3) << job.reason();
  EXPECT_EQ(job.attempts(2).resume_from(), "/ck/step-7.snapshot");
  EXPECT_EQ(job.attempts(2).resume_step(), 7);
}

// Nothing of the snapshots is stored: a controller restarted while the job recovers learns again
// from the workers' heartbeats what they hold, and resumes from it all the same.
TEST_F(ControllerSnapshotTest, AControllerRestartLosesNothingTheWorkersHold) {
  const std::string id = StartJobWithCheckpointAtStep5();
  const std::vector<v1::HeldSnapshot> held1 = {Held(id, 1, 7, 3, {0, 2})};
  const std::vector<v1::HeldSnapshot> held3 = {Held(id, 1, 7, 3, {2, 1})};
  LoseN2(held1, held3);
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING);
  Restart();
  for (const char* n : {"n1", "n3"}) RegisterWithSnapshots(n);
  Report("n1", v1::RANK_STATE_EXITED, held1);
  Report("n3", v1::RANK_STATE_EXITED, held3);
  c_->Tick();
  v1::HeartbeatResponse h1 = Report("n1", v1::RANK_STATE_EXITED, held1);
  v1::HeartbeatResponse h3 = Report("n3", v1::RANK_STATE_EXITED, held3);
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING);
  ASSERT_EQ(h1.stage_size() + h3.stage_size(), 2) << "both survivors stage their part of step 7";
  for (const auto& [node, h] : {std::pair{"n1", &h1}, std::pair{"n3", &h3}}) {
    if (h->stage_size() == 1) Report(node, v1::RANK_STATE_EXITED, node == std::string("n1") ? held1 : held3, {Staged(h->stage(0))});
  }
  c_->Tick();
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_STARTING) << job.reason();
  EXPECT_EQ(job.attempts(1).resume_from(), "/ck/step-7.snapshot");
  EXPECT_EQ(job.attempts(1).resume_step(), 7);
  EXPECT_EQ(job.attempts(1).steps_lost(), 1) << "attempt 1 reached step 8 (stored before the restart)";
}

// A planned stop (drain --evict) whose ranks are killed before their stop checkpoint (their node lost
// meanwhile in real life): the newest memory snapshot, newer than the disk's, is what is left.
TEST_F(ControllerSnapshotTest, APlannedStopWithoutItsStopCheckpointResumesFromMemory) {
  const std::string id = StartJobWithCheckpointAtStep5(/*min_nodes=*/1);
  const std::vector<v1::HeldSnapshot> held1 = {Held(id, 1, 7, 3, {0, 2})};
  const std::vector<v1::HeldSnapshot> held2 = {Held(id, 1, 7, 3, {1, 0})};
  const std::vector<v1::HeldSnapshot> held3 = {Held(id, 1, 7, 3, {2, 1})};
  ASSERT_TRUE(c_->SetDrained("n2", true, /*evict=*/true).ok());
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING);
  // The ranks die without saving (no checkpoint event): killed, as at the end of the stop grace.
  Report("n1", v1::RANK_STATE_EXITED, held1, {}, 0);
  Report("n2", v1::RANK_STATE_EXITED, held2, {}, 0);
  Report("n3", v1::RANK_STATE_EXITED, held3, {}, 0);
  c_->Tick();
  std::map<std::string, v1::HeartbeatResponse> h = {{"n1", Report("n1", v1::RANK_STATE_EXITED, held1)},
                                                     {"n3", Report("n3", v1::RANK_STATE_EXITED, held3)}};
  int orders = 0;
  for (const auto& [node, reply] : h) {
    for (const auto& o : reply.stage()) {
      ++orders;
      Report(node, v1::RANK_STATE_EXITED, node == "n1" ? held1 : held3, {Staged(o)});
    }
  }
  Report("n2", v1::RANK_STATE_EXITED, held2);  // a drained node may still hold and stage snapshots
  ASSERT_GT(orders, 0);
  for (int i = 0; i < 3 && Job(id).state() == v1::JOB_STATE_RECOVERING; ++i) {
    const v1::HeartbeatResponse reply = Report("n2", v1::RANK_STATE_EXITED, held2);
    for (const auto& o : reply.stage()) Report("n2", v1::RANK_STATE_EXITED, held2, {Staged(o)});
    c_->Tick();
  }
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_STARTING) << job.reason();
  EXPECT_EQ(job.attempts(1).resume_from(), "/ck/step-7.snapshot");
  const auto not_saved = EventsOfType(id, "stop_not_saved");
  ASSERT_EQ(not_saved.size(), 1u);
  EXPECT_NE(not_saved[0].find("resuming from the memory snapshot of step 7; 1 step lost"), std::string::npos)
      << not_saved[0];
}

TEST_F(ControllerSnapshotTest, AFailedStagingFallsBackToTheDiskCheckpointAndSaysWhy) {
  const std::string id = StartJobWithCheckpointAtStep5();
  const std::vector<v1::HeldSnapshot> held1 = {Held(id, 1, 7, 3, {0, 2})};
  const std::vector<v1::HeldSnapshot> held3 = {Held(id, 1, 7, 3, {2, 1})};
  LoseN2AndStopTheSurvivors(held1, held3);
  v1::HeartbeatResponse h3 = Report("n3", v1::RANK_STATE_EXITED, held3);
  ASSERT_EQ(h3.stage_size(), 1);
  Report("n3", v1::RANK_STATE_EXITED, held3, {Staged(h3.stage(0), "writing /ck/step-7.snapshot: No space left on device")});
  c_->Tick();
  ExpectResumedFromDiskBecause(
      id, "the memory snapshot of step 7 could not be staged: n3: writing /ck/step-7.snapshot: No space left on device");
}

TEST_F(ControllerSnapshotTest, WithoutAStepHeldWholeTheDiskCheckpointIsUsedAndTheMissingRanksNamed) {
  const std::string id = StartJobWithCheckpointAtStep5();
  // Replicas off in effect: every node holds its own rank only, so n2's rank 1 went with it.
  const std::vector<v1::HeldSnapshot> held1 = {Held(id, 1, 8, 3, {0})};
  const std::vector<v1::HeldSnapshot> held3 = {Held(id, 1, 8, 3, {2})};
  LoseN2AndStopTheSurvivors(held1, held3);
  ExpectResumedFromDiskBecause(id, "no step of attempt 1 is held whole by the live nodes (the newest, step 8, lacks rank 1)");
}

TEST_F(ControllerSnapshotTest, AHolderLostWhileStagingFallsBackToDisk) {
  const std::string id = StartJobWithCheckpointAtStep5(/*min_nodes=*/1);
  const std::vector<v1::HeldSnapshot> held1 = {Held(id, 1, 7, 3, {0, 1})};
  const std::vector<v1::HeldSnapshot> held3 = {Held(id, 1, 7, 3, {2})};
  LoseN2AndStopTheSurvivors(held1, held3);
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING);
  // n3, which is to stage rank 2, goes silent before it reports back.
  for (int i = 0; i < 4 && Job(id).state() == v1::JOB_STATE_RECOVERING; ++i) {
    clock_.Advance(1000ms);
    Report("n1", v1::RANK_STATE_EXITED, held1);
    c_->Tick();
  }
  ExpectResumedFromDiskBecause(id, "the memory snapshot of step 7 could not be staged: n3, which held rank 2, was "
                                  "lost meanwhile");
  EXPECT_EQ(Job(id).attempts(1).world_size(), 1);
}

TEST_F(ControllerSnapshotTest, StagingThatTakesTooLongFallsBackToDisk) {
  const std::string id = StartJobWithCheckpointAtStep5();
  const std::vector<v1::HeldSnapshot> held1 = {Held(id, 1, 7, 3, {0, 1})};
  const std::vector<v1::HeldSnapshot> held3 = {Held(id, 1, 7, 3, {2})};
  LoseN2AndStopTheSurvivors(held1, held3);
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING);
  // n3 never reports back; past snapshot_stage_timeout (60 s) the disk checkpoint is taken.
  for (int i = 0; i < 61; ++i) {
    clock_.Advance(1000ms);
    Report("n1", v1::RANK_STATE_EXITED, held1);
    Report("n3", v1::RANK_STATE_EXITED, held3);
    c_->Tick();
    if (Job(id).state() != v1::JOB_STATE_RECOVERING) break;
  }
  ExpectResumedFromDiskBecause(id, "the memory snapshot of step 7 was not staged within snapshot_stage_timeout_s (" +
                                      SecondsText(config_.snapshot_stage_timeout) + ")");
}

// The controller cut off from every worker (docs/checkpoints.md, "Memory snapshots"): all three nodes
// are lost, their workers kill the ranks but keep their memory. The first to return alone holds no
// step whole; the restart waits for the others, which bring step 7 back whole.
TEST_F(ControllerSnapshotTest, NodesLostTogetherAreAwaitedWhileTheirMemoryMakesAStepWhole) {
  const std::string id = StartJobWithCheckpointAtStep5(/*min_nodes=*/1);
  const std::map<std::string, std::vector<v1::HeldSnapshot>> held = {{"n1", {Held(id, 1, 7, 3, {0, 2})}},
                                                                      {"n2", {Held(id, 1, 7, 3, {1, 0})}},
                                                                      {"n3", {Held(id, 1, 7, 3, {2, 1})}}};
  for (const auto& [node, h] : held) Report(node, v1::RANK_STATE_RUNNING, h);
  for (int i = 0; i < 9; ++i) {  // lost after 3 s, away for 6 s more: longer than the wait itself
    clock_.Advance(1000ms);
    c_->Tick();
  }
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING);
  RegisterWithSnapshots("n1");
  Report("n1", v1::RANK_STATE_EXITED, held.at("n1"));
  clock_.Advance(1000ms);
  c_->Tick();
  v1::HeartbeatResponse h1 = Report("n1", v1::RANK_STATE_EXITED, held.at("n1"));
  EXPECT_EQ(h1.desired_size(), 0) << "not restarted on n1 alone from disk";
  EXPECT_EQ(h1.stage_size(), 0);
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING);
  for (const char* n : {"n2", "n3"}) {
    RegisterWithSnapshots(n);
    Report(n, v1::RANK_STATE_EXITED, held.at(n));
  }
  c_->Tick();
  EXPECT_GT(CarryOutStaging(id, held, 7), 0);
  const v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_STARTING) << job.reason();
  EXPECT_EQ(job.attempts(1).resume_from(), "/ck/step-7.snapshot");
  EXPECT_TRUE(EventsOfType(id, "memory_snapshot_unusable").empty());
}

// A lost node whose memory would have made a step whole is awaited for the heartbeat timeout only:
// one that does not come back costs that wait, then the disk checkpoint is used.
TEST_F(ControllerSnapshotTest, ALostHolderThatDoesNotReturnIsAwaitedForTheHeartbeatTimeoutOnly) {
  const std::string id = StartJobWithCheckpointAtStep5();
  // Replicas off in effect: every node holds its own rank only.
  const std::vector<v1::HeldSnapshot> held1 = {Held(id, 1, 8, 3, {0})};
  const std::vector<v1::HeldSnapshot> held3 = {Held(id, 1, 8, 3, {2})};
  Report("n2", v1::RANK_STATE_RUNNING, {Held(id, 1, 8, 3, {1})});
  LoseN2AndStopTheSurvivors(held1, held3);
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING) << "waiting for n2, which held rank 1";
  clock_.Advance(2000ms);
  Report("n1", v1::RANK_STATE_EXITED, held1);
  Report("n3", v1::RANK_STATE_EXITED, held3);
  c_->Tick();
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING);
  clock_.Advance(1100ms);
  Report("n1", v1::RANK_STATE_EXITED, held1);
  Report("n3", v1::RANK_STATE_EXITED, held3);
  c_->Tick();
  ExpectResumedFromDiskBecause(id, "no step of attempt 1 is held whole by the live nodes (the newest, step 8, lacks rank 1)");
}

// Every node lost at once (the controller cut off from all of them), one back first: the nodes still
// lost count as returning too (their last reports complete step 8), so the restart waits for them
// instead of resuming from disk the moment the first one registers.
TEST_F(ControllerSnapshotTest, WhenEveryNodeWasLostTheFirstOneBackWaitsForTheOthers) {
  const std::string id = StartJobWithCheckpointAtStep5(/*min_nodes=*/1);
  // Each node its own rank and, as a replica, the next node's.
  const std::map<std::string, std::vector<int>> ranks = {{"n1", {0, 1}}, {"n2", {1, 2}}, {"n3", {2, 0}}};
  for (const auto& [node, held] : ranks) Report(node, v1::RANK_STATE_RUNNING, {Held(id, 1, 8, 3, held)});
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(1000ms);
    c_->Tick();
  }
  for (int n = 0; n < 3; ++n) ASSERT_EQ(c_->ListNodes().nodes(n).state(), v1::NODE_STATE_LOST);
  RegisterWithSnapshots("n1");
  c_->Tick();
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING) << "waiting for n2 and n3, lost, whose memory completes step 8";
  EXPECT_TRUE(EventsOfType(id, "memory_snapshot_unusable").empty());
}

// The controller cut off from every worker right after the disk checkpoint of step 5: the nodes' last
// reports hold no step newer than that, but their ranks trained on until their leases ran out, so
// their memory holds newer ones. The first one back waits for the others, and the restart takes the
// step they hold now (9), not the disk's.
TEST_F(ControllerSnapshotTest, NodesCutOffRightAfterADiskCheckpointAreAwaitedForWhatTheyHoldSince) {
  const std::string id = StartJobWithCheckpointAtStep5(/*min_nodes=*/1);
  const std::map<std::string, std::vector<int>> ranks = {{"n1", {0, 2}}, {"n2", {1, 0}}, {"n3", {2, 1}}};
  for (const auto& [node, held] : ranks) Report(node, v1::RANK_STATE_RUNNING, {Held(id, 1, 5, 3, held)});
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(1000ms);
    c_->Tick();
  }
  for (int n = 0; n < 3; ++n) ASSERT_EQ(c_->ListNodes().nodes(n).state(), v1::NODE_STATE_LOST);
  clock_.Advance(2000ms);
  c_->Tick();
  RegisterWithSnapshots("n1");
  c_->Tick();
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING) << "waiting for n2 and n3";
  EXPECT_TRUE(EventsOfType(id, "memory_snapshot_unusable").empty());
  Report("n1", v1::RANK_STATE_EXITED, {Held(id, 1, 9, 3, ranks.at("n1"))});
  clock_.Advance(500ms);
  c_->Tick();
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RECOVERING) << "n1 alone holds ranks 0 and 2 of step 9";
  for (const char* n : {"n2", "n3"}) {
    RegisterWithSnapshots(n);
    Report(n, v1::RANK_STATE_EXITED, {Held(id, 1, 9, 3, ranks.at(n))});
  }
  c_->Tick();
  std::map<std::string, std::vector<v1::HeldSnapshot>> held;
  for (const auto& [node, r] : ranks) held[node] = {Held(id, 1, 9, 3, r)};
  EXPECT_GT(CarryOutStaging(id, held, 9), 0);
  const v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_STARTING) << job.reason();
  EXPECT_EQ(job.attempts(1).resume_from(), "/ck/step-9.snapshot");
  EXPECT_TRUE(EventsOfType(id, "memory_snapshot_unusable").empty());
}

}  // namespace
}  // namespace eft::controller
