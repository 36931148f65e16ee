// BuildRankEnv: a RankAssignment, the attempt's spec and node facts -> the rank's environment.
#include "worker/rank_env.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "common/rank_protocol.h"
#include "spec/job_spec.h"

namespace eft::worker {
namespace {

namespace env = rank::env;

v1::RankAssignment Assignment() {
  v1::RankAssignment a;
  a.mutable_key()->set_job_id("job-7");
  a.mutable_key()->set_attempt(3);
  a.mutable_key()->set_rank(5);
  a.set_local_rank(1);
  a.set_world_size(8);
  a.set_local_world_size(4);
  a.set_master_addr("node-a");
  a.set_master_port(29500);
  a.set_slot(1);
  a.set_resume_from("/ckpt/step-100");
  (*a.mutable_env())["HF_HOME"] = "/data/hf";
  return a;
}

// The attempt's spec as the controller sends it: normalized, every default filled in.
v1::JobSpec Spec() {
  auto parsed = spec::ParseJobSpec("{name: job-7, model: /m, data: {train: /d.jsonl}, training: {lr: 0.0002}}");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return v1::JobSpec();
  EXPECT_TRUE(spec::NormalizeJobSpec(&*parsed).ok());
  return *parsed;
}

NodeFacts Node() {
  return NodeFacts{"node-b", {"GPU-aaa", "GPU-bbb"}, "/opt/eft/bin", std::string("/usr/bin"), "", "", std::nullopt, ""};
}

TEST(BuildRankEnvTest, SetsTheRankProtocolVariables) {
  auto e = BuildRankEnv(Assignment(), Spec(), Node());
  EXPECT_EQ(e[env::kRank], "5");
  EXPECT_EQ(e[env::kLocalRank], "1");
  EXPECT_EQ(e[env::kWorldSize], "8");
  EXPECT_EQ(e[env::kLocalWorldSize], "4");
  EXPECT_EQ(e[env::kGroupRank], "1");  // rank 5 with 4 per node: the second node
  EXPECT_EQ(e[env::kRoleRank], "5");
  EXPECT_EQ(e[env::kMasterAddr], "node-a");
  EXPECT_EQ(e[env::kMasterPort], "29500");
  EXPECT_EQ(e[env::kRestartCount], "2");  // attempt 3 is the second restart
  EXPECT_EQ(e[env::kRunId], "job-7");
  EXPECT_EQ(e[env::kJobId], "job-7");
  EXPECT_EQ(e[env::kAttempt], "3");
  EXPECT_EQ(e[env::kNodeName], "node-b");
  // The spec's JSON mapping, which eft-train reads back to the very spec the controller sent.
  auto read_back = spec::ParseJobSpec(e[env::kJobSpec]);
  ASSERT_TRUE(read_back.ok()) << read_back.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*read_back, Spec())) << e[env::kJobSpec];
  EXPECT_EQ(e[env::kResumeFrom], "/ckpt/step-100");
  EXPECT_EQ(e[env::kCudaVisibleDevices], "GPU-bbb");  // slot 1
  EXPECT_EQ(e["PATH"], "/opt/eft/bin:/usr/bin");
  EXPECT_EQ(e["HF_HOME"], "/data/hf");
  EXPECT_EQ(e.count(env::kEventsFd), 0u);  // the supervisor's
  EXPECT_EQ(e.size(), 18u);
}

TEST(BuildRankEnvTest, FreshStartHasAnEmptyResumePoint) {
  v1::RankAssignment a = Assignment();
  a.clear_resume_from();
  auto e = BuildRankEnv(a, Spec(), Node());
  ASSERT_EQ(e.count(env::kResumeFrom), 1u);
  EXPECT_EQ(e[env::kResumeFrom], "");
}

TEST(BuildRankEnvTest, SpecEnvCannotOverrideWhatTheLauncherSets) {
  v1::RankAssignment a = Assignment();
  (*a.mutable_env())[env::kRank] = "0";
  (*a.mutable_env())[env::kJobSpec] = "stale";
  (*a.mutable_env())[env::kCudaVisibleDevices] = "0,1";
  auto e = BuildRankEnv(a, Spec(), Node());
  EXPECT_EQ(e[env::kRank], "5");
  EXPECT_EQ(e[env::kJobSpec], spec::JobSpecToJson(Spec()).dump());
  EXPECT_EQ(e[env::kCudaVisibleDevices], "GPU-bbb");
}

TEST(BuildRankEnvTest, NoGpuForASlotOutsideTheNodesGpusOrOnACpuNode) {
  v1::RankAssignment a = Assignment();
  a.set_slot(2);
  EXPECT_EQ(BuildRankEnv(a, Spec(), Node())[env::kCudaVisibleDevices], "");
  a.set_slot(-1);
  EXPECT_EQ(BuildRankEnv(a, Spec(), Node())[env::kCudaVisibleDevices], "");
  NodeFacts cpu = Node();
  cpu.gpu_ids.clear();
  a.set_slot(0);
  auto e = BuildRankEnv(a, Spec(), cpu);
  ASSERT_EQ(e.count(env::kCudaVisibleDevices), 1u);  // set, and empty: no device grabbed by accident
  EXPECT_EQ(e[env::kCudaVisibleDevices], "");
}

TEST(BuildRankEnvTest, PathOnlyWhenTheWorkersDirectoryIsKnown) {
  NodeFacts node = Node();
  node.path.reset();
  EXPECT_EQ(BuildRankEnv(Assignment(), Spec(), node)["PATH"], "/opt/eft/bin:/usr/bin:/bin");
  node.program_dir.clear();
  EXPECT_EQ(BuildRankEnv(Assignment(), Spec(), node).count("PATH"), 0u);
}

// Memory snapshots: the attempt's directory the worker keeps, or nothing when they are off; a job's
// spec.env cannot point its ranks elsewhere.
TEST(BuildRankEnvTest, SnapshotDirOnlyWhenTheWorkerKeepsOne) {
  v1::RankAssignment a = Assignment();
  (*a.mutable_env())[env::kSnapshotDir] = "/tmp/elsewhere";
  NodeFacts node = Node();
  EXPECT_EQ(BuildRankEnv(a, Spec(), node).count(env::kSnapshotDir), 0u) << "off: the rank takes none";
  node.snapshot_dir = "/dev/shm/eft-worker-b/job-7/attempt-2/incoming";
  EXPECT_EQ(BuildRankEnv(a, Spec(), node)[env::kSnapshotDir], node.snapshot_dir);
}

// Rank traffic on the node's address (docs/architecture.md, "Rank traffic and the node's address").
TEST(BuildRankEnvTest, TheNodesAddressAndItsInterface) {
  NodeFacts node = Node();
  node.address = "10.0.0.12";
  node.interface = "eth1";
  v1::RankAssignment a = Assignment();
  a.set_nodes_share_loopback(false);
  auto e = BuildRankEnv(a, Spec(), node);
  EXPECT_EQ(e[env::kNodeAddress], "10.0.0.12");
  EXPECT_EQ(e[env::kNodesShareLoopback], "0");
  EXPECT_EQ(e["NCCL_SOCKET_IFNAME"], "=eth1") << "that interface exactly, not every name it prefixes";
  a.set_nodes_share_loopback(true);
  EXPECT_EQ(BuildRankEnv(a, Spec(), node)[env::kNodesShareLoopback], "1");
  a.clear_nodes_share_loopback();
  EXPECT_EQ(BuildRankEnv(a, Spec(), node).count(env::kNodesShareLoopback), 0u) << "not known: unset";

  // The job's choice of NCCL interface, or the worker's own environment's, stands.
  v1::RankAssignment own = Assignment();
  (*own.mutable_env())["NCCL_SOCKET_IFNAME"] = "ib";
  EXPECT_EQ(BuildRankEnv(own, Spec(), node)["NCCL_SOCKET_IFNAME"], "ib");
  NodeFacts inherited = node;
  inherited.nccl_socket_ifname = "bond0";
  EXPECT_EQ(BuildRankEnv(Assignment(), Spec(), inherited).count("NCCL_SOCKET_IFNAME"), 0u)
      << "the rank inherits the worker's own NCCL_SOCKET_IFNAME";
  // A spec cannot pretend to be another node.
  (*own.mutable_env())[env::kNodeAddress] = "127.0.0.1";
  EXPECT_EQ(BuildRankEnv(own, Spec(), node)[env::kNodeAddress], "10.0.0.12");

  // An address on no interface (NAT), or none at all (a config built by hand): nothing to set.
  NodeFacts nat = node;
  nat.interface.clear();
  EXPECT_EQ(BuildRankEnv(Assignment(), Spec(), nat).count("NCCL_SOCKET_IFNAME"), 0u);
  EXPECT_EQ(BuildRankEnv(Assignment(), Spec(), nat)[env::kNodeAddress], "10.0.0.12");
  auto none = BuildRankEnv(Assignment(), Spec(), Node());
  EXPECT_EQ(none.count(env::kNodeAddress), 0u);
  EXPECT_EQ(none.count("NCCL_SOCKET_IFNAME"), 0u);
}

TEST(BuildRankEnvTest, GroupRankWithoutALocalWorldSizeIsZero) {
  v1::RankAssignment a = Assignment();
  a.set_local_world_size(0);
  EXPECT_EQ(BuildRankEnv(a, Spec(), Node())[env::kGroupRank], "0");
}

}  // namespace
}  // namespace eft::worker
