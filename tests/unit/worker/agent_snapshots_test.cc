// WorkerAgent's memory snapshots against the fake controller of agent_test_fixture.h, with FakeRanks
// that write their snapshot files as eft-train does and a second node's real SnapshotService as the
// attempt's peer: EFT_SNAPSHOT_DIR, the take-over and its report, the push to the peer, a refusal as
// the rank's event, a StageOrder carried out and reported, and keep_snapshots.
#include <filesystem>

#include "tests/unit/worker/agent_test_fixture.h"
#include "tests/unit/worker/snapshot_test_util.h"
#include "worker/agent.h"
#include "worker/snapshot_service.h"

namespace eft::worker {
namespace {

namespace fs = std::filesystem;
using testing::Eventually;
using testing::WorkerAgentTest;

// The steps of `job`'s attempt `attempt` a heartbeat says this node holds whole.
std::vector<int64_t> HeldSteps(const v1::HeartbeatRequest& h, const std::string& job, int attempt) {
  std::vector<int64_t> out;
  for (const auto& s : h.snapshots()) {
    if (s.job_id() == job && s.attempt() == attempt) out.push_back(s.step());
  }
  return out;
}

TEST_F(WorkerAgentTest, MemorySnapshotsAreTakenOverReportedPushedAndStaged) {
  // The attempt's other node: a store and its SnapshotService.
  SnapshotStoreOptions peer_options;
  peer_options.root = dir_ + "/peer-shm";
  peer_options.budget_bytes = 64 << 20;
  auto peer_store = SnapshotStore::Open(peer_options);
  ASSERT_TRUE(peer_store.ok());
  auto peer_server = SnapshotServer::Start(peer_store->get(), "127.0.0.1", 0, SnapshotAuth{});
  ASSERT_TRUE(peer_server.ok()) << peer_server.status();
  v1::SnapshotPeer peer;
  peer.set_node_name("node-p");
  peer.set_address("127.0.0.1:" + std::to_string((*peer_server)->port()));

  config_.snapshot_dir = dir_ + "/shm";
  config_.snapshot_budget_bytes = 64 << 20;
  const RankId key{"job-1", 2, 0};
  controller_.SetDesired({Rank("job-1", 2, 0, "/the/out")});
  controller_.SetSpec("job-1", 2, JobSpecNamed("job-1"));
  controller_.SetSnapshotPeers("job-1", 2, {peer});
  controller_.SetKeep({{"job-1", 2}});
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  controller_.Inspect([&] { EXPECT_GT(controller_.registers.at(0).snapshot_port(), 0); });
  const std::string incoming = ranks_.launches().at(0).spec.env.at(rank::env::kSnapshotDir);
  EXPECT_EQ(incoming, dir_ + "/shm/job-job-1/attempt-2/incoming");
  EXPECT_TRUE(fs::is_directory(incoming));

  // The rank reports a snapshot: held here, sent to the peer, reported as held (not relayed as an
  // event: the controller has nothing to do with it).
  const std::string bytes = testing::SnapshotBytes(100000, 4);
  const rank::MemorySnapshotEvent e = testing::WriteRankSnapshot(incoming, 4, 0, 1, bytes);
  ASSERT_TRUE(ranks_.Emit(key, rank::EncodeEvent(e)));
  ASSERT_TRUE(controller_.WaitFor([&] {
    return !controller_.heartbeats.empty() && HeldSteps(controller_.heartbeats.back(), "job-1", 2) ==
                                                  std::vector<int64_t>{4};
  }));
  controller_.Inspect([&] {
    for (const auto& relayed : controller_.events) EXPECT_NE(relayed.json(), rank::EncodeEvent(e));
    const v1::HeldSnapshot& held = controller_.heartbeats.back().snapshots(0);
    EXPECT_EQ(held.world_size(), 1);
    EXPECT_EQ(held.bytes(), 100000);
  });
  EXPECT_FALSE(fs::exists(e.path));
  ASSERT_TRUE(Eventually([&] { return (*peer_store)->Held().size() == 1; }));
  EXPECT_EQ((*peer_store)->Held()[0].step(), 4);
  ASSERT_TRUE(Eventually([&] { return agent_->Stats().snapshot_pushes["ok"] == 1; }));
  EXPECT_EQ(agent_->Stats().snapshot_own_bytes, 100000);
  EXPECT_EQ(agent_->Stats().snapshot_budget_bytes, 64 << 20);

  // A file that is not what the rank says: refused, as the rank's memory_snapshot_refused event.
  rank::MemorySnapshotEvent bad = testing::WriteRankSnapshot(incoming, 5, 0, 1, "short");
  bad.bytes = 99;
  ASSERT_TRUE(ranks_.Emit(key, rank::EncodeEvent(bad)));
  ASSERT_TRUE(controller_.WaitFor([&] {
    for (const auto& ev : controller_.events) {
      if (ev.json().find("memory_snapshot_refused") != std::string::npos) return true;
    }
    return false;
  }));
  controller_.Inspect([&] {
    const v1::RankEvent& ev = controller_.events.back();
    EXPECT_EQ(RankIdOf(ev.key()), key);
    auto decoded = rank::DecodeEvent(ev.json());
    ASSERT_TRUE(decoded.ok());
    const auto* refusal = std::get_if<rank::MemorySnapshotRefusedEvent>(&*decoded);
    ASSERT_NE(refusal, nullptr) << ev.json();
    EXPECT_EQ(refusal->step, 5);
    EXPECT_EQ(refusal->node, "node-t");
    EXPECT_NE(refusal->reason.find("has 5 bytes, the event says 99"), std::string::npos) << refusal->reason;
  });

  // A stage order: carried out off the heartbeat thread, its result reported until the order goes.
  v1::StageOrder order;
  order.set_job_id("job-1");
  order.set_attempt(2);
  order.set_step(4);
  order.set_world_size(1);
  order.add_ranks(0);
  order.set_dir(snapshot::StagedDir(dir_ + "/ckpt", 4));
  controller_.SetStage({order});
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.back().staged_size() == 1; }));
  controller_.Inspect([&] {
    const v1::StageResult& r = controller_.heartbeats.back().staged(0);
    EXPECT_EQ(r.error(), "");
    EXPECT_EQ(r.step(), 4);
  });
  auto records = snapshot::ReadStagedRecords(order.dir());
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ(records->at(0).crc32c, e.crc32c);
  controller_.SetStage({});
  size_t after = 0;
  controller_.Inspect([&] { after = controller_.heartbeats.size(); });
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.size() >= after + 3; }));
  controller_.Inspect([&] { EXPECT_EQ(controller_.heartbeats.back().staged_size(), 0); });

  // The controller no longer lists the attempt: kept while this node knows a rank of it, then deleted.
  controller_.SetKeep({});
  controller_.Inspect([&] { after = controller_.heartbeats.size(); });
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.size() >= after + 3; }));
  EXPECT_TRUE(fs::exists(dir_ + "/shm/job-job-1/attempt-2/held/step-4"));
  controller_.SetDesired({});
  ASSERT_TRUE(controller_.WaitFor([&] {
    return controller_.heartbeats.back().ranks_size() == 0 && controller_.heartbeats.back().snapshots_size() == 0;
  }));
  EXPECT_FALSE(fs::exists(dir_ + "/shm/job-job-1"));

  // A worker that stops leaves no memory behind.
  agent_->Shutdown(std::chrono::seconds(5));
  EXPECT_FALSE(fs::exists(dir_ + "/shm"));
}

TEST_F(WorkerAgentTest, WithoutASnapshotDirRanksTakeNoSnapshots) {
  const RankId key{"job-1", 1, 0};
  controller_.SetDesired({Rank("job-1", 1, 0, "/the/out")});
  controller_.SetSpec("job-1", 1, JobSpecNamed("job-1"));
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  EXPECT_EQ(ranks_.launches().at(0).spec.env.count(rank::env::kSnapshotDir), 0u);
  controller_.Inspect([&] { EXPECT_EQ(controller_.registers.at(0).snapshot_port(), 0); });
  EXPECT_EQ(agent_->Stats().snapshot_budget_bytes, 0);
}

}  // namespace
}  // namespace eft::worker
