// Where a rank learns who it is (trainer/train/launch.h): the names of the rank protocol
// (common/rank_protocol.h) from eft-worker or torchrun, Slurm's own, or none at all; and the rule for
// its addresses it applies before its rendezvous.
#include "trainer/train/launch.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/net_address.h"
#include "common/rank_protocol.h"

namespace eft::trainer {
namespace {

using Env = std::map<std::string, std::string>;
namespace names = rank::env;

TEST(RankEnvTest, NoVariablesIsASingleProcess) {
  Env env;
  auto r = RankEnvFromEnvironment(&env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "single process");
  EXPECT_EQ(r->rank, 0);
  EXPECT_EQ(r->world, 1);
  EXPECT_EQ(r->events_fd, -1);
}

TEST(RankEnvTest, ASingleProcessStillReadsEftsVariables) {
  Env env = {{names::kResumeFrom, "auto"}, {names::kEventsFd, "5"}, {names::kAttempt, "2"}};
  auto r = RankEnvFromEnvironment(&env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "single process");
  EXPECT_EQ(r->world, 1);
  EXPECT_EQ(r->resume_from, "auto");
  EXPECT_EQ(r->events_fd, 5);
  EXPECT_EQ(r->attempt, 2);
}

TEST(RankEnvTest, GpuCollectivesAreNcclUnlessGlooIsAskedFor) {
  Env env;
  EXPECT_EQ(RankEnvFromEnvironment(&env)->gpu_collectives, GpuCollectives::kNccl);
  for (const auto& [value, expected] : {std::pair{"nccl", GpuCollectives::kNccl}, {"", GpuCollectives::kNccl},
                                        {"gloo", GpuCollectives::kGlooStaged}}) {
    env["EFT_GPU_COLLECTIVES"] = value;
    auto r = RankEnvFromEnvironment(&env);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->gpu_collectives, expected) << value;
  }
  env["EFT_GPU_COLLECTIVES"] = "mpi";
  auto bad = RankEnvFromEnvironment(&env);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "EFT_GPU_COLLECTIVES=mpi is not one of nccl, gloo");
}

TEST(RankEnvTest, WhatTheWorkerSetsIsRead) {
  Env env = {{names::kRank, "3"},          {names::kWorldSize, "4"},      {names::kLocalRank, "1"},
             {names::kLocalWorldSize, "2"}, {names::kMasterAddr, "10.1.2.3"}, {names::kMasterPort, "29611"},
             {names::kJobId, "17"},         {names::kAttempt, "2"},        {names::kResumeFrom, "/ckpt/step-40"},
             {names::kEventsFd, "3"}};
  auto r = RankEnvFromEnvironment(&env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "eft-worker");
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->world, 4);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->local_world, 2);
  EXPECT_EQ(r->master_addr, "10.1.2.3");
  EXPECT_EQ(r->master_port, 29611);
  EXPECT_EQ(r->job_id, "17");
  EXPECT_EQ(r->attempt, 2);
  EXPECT_EQ(r->resume_from, "/ckpt/step-40");
  EXPECT_EQ(r->events_fd, 3);
}

TEST(RankEnvTest, TorchrunsVariablesWithoutEftsAreTorchrun) {
  Env env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1234"}};
  auto r = RankEnvFromEnvironment(&env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "torchrun");
  EXPECT_EQ(r->local_rank, 0);
  EXPECT_EQ(r->local_world, 1);
}

TEST(RankEnvTest, SlurmTasksFindTheirMasterInTheNodeList) {
  Env env = {{"SLURM_PROCID", "5"},
             {"SLURM_NTASKS", "8"},
             {"SLURM_LOCALID", "1"},
             {"SLURM_NTASKS_PER_NODE", "4(x2)"},
             {"SLURM_JOB_NODELIST", "gpu[03-05,07],cpu1"},
             {"MASTER_PORT", "29500"}};
  auto r = RankEnvFromEnvironment(&env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "slurm");
  EXPECT_EQ(r->rank, 5);
  EXPECT_EQ(r->world, 8);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->local_world, 4);
  EXPECT_EQ(r->master_addr, "gpu03");
}

TEST(RankEnvTest, BadValuesNameTheVariable) {
  const std::vector<std::pair<Env, std::string>> cases = {
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "RANK='4'"},
      {{{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "RANK='x'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}, "MASTER_ADDR is not set"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "MASTER_PORT is not set"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT='70000'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"EFT_EVENTS_FD", "-1"}}, "EFT_EVENTS_FD='-1'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"EFT_NODES_SHARE_LOOPBACK", "yes"}},
       "EFT_NODES_SHARE_LOOPBACK='yes': expected 0 or 1"},
  };
  for (const auto& [env, expected] : cases) {
    auto r = RankEnvFromEnvironment(&env);
    ASSERT_FALSE(r.ok()) << expected;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << expected;
    EXPECT_NE(r.status().message().find(expected), std::string::npos) << r.status();
  }
}

// Rank traffic (docs/architecture.md, "Rank traffic and the node's address"): what the worker says
// about the node, and the rule each rank applies before its rendezvous.
TEST(RankEnvTest, TheNodesAddressIsRead) {
  Env env = {{names::kRank, "2"},         {names::kWorldSize, "4"},          {names::kLocalWorldSize, "2"},
             {names::kMasterAddr, "10.0.0.1"}, {names::kMasterPort, "29500"}, {names::kJobId, "7"},
             {names::kNodeName, "node2"},  {names::kNodeAddress, "10.0.0.2"}, {names::kNodesShareLoopback, "0"}};
  auto r = RankEnvFromEnvironment(&env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->node_name, "node2");
  EXPECT_EQ(r->node_address, "10.0.0.2");
  EXPECT_EQ(r->nodes_share_loopback, std::optional<bool>(false));
  EXPECT_FALSE(r->gloo_interface_given);
  env[names::kNodesShareLoopback] = "1";
  env["GLOO_SOCKET_IFNAME"] = "eth1";
  r = RankEnvFromEnvironment(&env);
  EXPECT_EQ(r->nodes_share_loopback, std::optional<bool>(true));
  EXPECT_TRUE(r->gloo_interface_given);
  env.erase(names::kNodesShareLoopback);
  env.erase(names::kNodeAddress);
  r = RankEnvFromEnvironment(&env);
  EXPECT_EQ(r->nodes_share_loopback, std::nullopt);
  EXPECT_EQ(r->node_address, "");
}

// The case, as the rank sees it: the worker's host name resolved to 127.0.1.1, rank 0 is on a
// node with a real address. Refused as bad input (exit 2), in one line naming the fix.
TEST(CheckRankAddressesTest, ALoopbackNodeAddressAcrossHostsIsRefused) {
  RankEnv env;
  env.rank = 2;
  env.world = 4;
  env.local_world = 2;
  env.master_addr = "10.0.0.1";
  env.node_name = "node2";
  env.node_address = "127.0.1.1";
  env.nodes_share_loopback = false;
  for (bool gloo : {true, false}) {
    Status s = CheckRankAddresses(env, gloo);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << "the rank protocol's bad input";
    EXPECT_EQ(s.message(),
              "node address 127.0.1.1 (node2) is a loopback address, but this job's ranks span 2 nodes that are not "
              "all on this host: start eft-worker on node2 with --address (or --data-address) set to an address the "
              "other nodes reach");
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
  }
  env.master_addr = "localhost";  // resolved: loopback
  env.node_address = "10.0.0.2";
  EXPECT_NE(CheckRankAddresses(env, true).message().find("MASTER_ADDR localhost is a loopback address"),
            std::string::npos);
}

TEST(CheckRankAddressesTest, LocalClustersAndSingleNodesKeepLoopback) {
  RankEnv env;
  env.world = 3;
  env.local_world = 1;
  env.master_addr = "127.0.0.1";
  env.node_address = "127.0.0.1";
  env.nodes_share_loopback = true;  // three workers on this host, as the e2e tests run them
  EXPECT_TRUE(CheckRankAddresses(env, true).ok());
  env.nodes_share_loopback.reset();  // an older controller
  EXPECT_TRUE(CheckRankAddresses(env, true).ok());
  env.node_address.clear();  // torchrun with MASTER_ADDR on loopback: bound to loopback, as before
  EXPECT_TRUE(CheckRankAddresses(env, true).ok());
  env = RankEnv();
  env.world = 4;
  env.local_world = 4;  // `eft-train train --nproc 4`
  env.master_addr = "10.0.0.1";
  env.node_address = "127.0.0.1";
  env.nodes_share_loopback = false;
  EXPECT_TRUE(CheckRankAddresses(env, true).ok());
}

// Without EFT_NODE_ADDRESS, a Gloo rank binds what this host's name resolves to: refused when that is
// loopback and MASTER_ADDR is not, unless GLOO_SOCKET_IFNAME picks the interface; NCCL ranks pick
// their own interface, so theirs is not checked.
TEST(CheckRankAddressesTest, WithoutANodeAddressGlooBindsTheHostName) {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  auto own = net::ResolveNumeric(host);
  RankEnv env;
  env.world = 2;
  env.local_world = 1;
  env.master_addr = "203.0.113.1";
  Status s = CheckRankAddresses(env, /*gloo=*/true);
  if (own.ok() && net::IsLoopback(*own)) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(s.message().rfind("this host's name " + std::string(host) + " resolves to " + *own, 0), 0u) << s;
  } else {
    EXPECT_TRUE(s.ok()) << s << " (this host's name resolves to " << (own.ok() ? *own : own.status().message())
                        << ")";
  }
  EXPECT_TRUE(CheckRankAddresses(env, /*gloo=*/false).ok());
  env.gloo_interface_given = true;
  EXPECT_TRUE(CheckRankAddresses(env, /*gloo=*/true).ok());
}

// The --nproc launcher with real processes: /bin/sh ranks that append "RANK MASTER_PORT" to a log and
// exit as the script says, and ports from a counter (nothing binds them).
class LocalLaunchTest : public ::testing::Test {
 protected:
  int Launch(const std::string& exit_rule, int tries = 3) {
    LocalLaunchOptions o;
    o.program = "/bin/sh";
    o.pick_port = [this] { return next_port_++; };
    o.port_tries = tries;
    const std::string script = "echo \"$RANK $MASTER_PORT\" >> " + log_ + "; " + exit_rule;
    return SpawnLocalRanks(2, {"-c", script}, o);
  }
  std::vector<std::string> Lines() {
    std::vector<std::string> lines;
    std::ifstream in(log_);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::sort(lines.begin(), lines.end());
    return lines;
  }
  std::string log_ = ::testing::TempDir() + "/launch-" + std::to_string(::getpid()) + "-" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".log";
  int next_port_ = 41000;
  void SetUp() override { std::remove(log_.c_str()); }
};

TEST_F(LocalLaunchTest, ATakenRendezvousPortStartsEveryRankAgainOnAnotherPort) {
  // Rank 0 finds the first port taken (76: before anything is trained); the second launch runs.
  EXPECT_EQ(Launch("[ \"$RANK\" = 0 ] && [ \"$MASTER_PORT\" = 41000 ] && exit 76; exit 0"), 0);
  EXPECT_EQ(next_port_, 41002) << "two launches, two ports";
  // Rank 1 of the first launch may have been stopped before it wrote its line.
  std::vector<std::string> lines = Lines();
  EXPECT_NE(std::find(lines.begin(), lines.end(), "0 41000"), lines.end());
  EXPECT_NE(std::find(lines.begin(), lines.end(), "0 41001"), lines.end());
  EXPECT_NE(std::find(lines.begin(), lines.end(), "1 41001"), lines.end());
}

TEST_F(LocalLaunchTest, APortTakenEveryTimeGivesUpAfterTheTriesWithItsExitCode) {
  EXPECT_EQ(Launch("[ \"$RANK\" = 0 ] && exit 76; exec sleep 30", 3), 76);
  EXPECT_EQ(next_port_, 41003);
}

TEST_F(LocalLaunchTest, OtherFailuresAreNotRetriedAndStopTheOtherRanksAtOnce) {
  // (exec: a sleep left behind by its shell would hold ctest's output pipe for its 30 s.)
  // Rank 0 fails while rank 1 may not have exec'd yet: the SIGTERM must reach rank 1 all the same
  // (it was lost in the child's copy of the launcher's handler, and the launch took rank 1's 30 s).
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Launch("[ \"$RANK\" = 0 ] && exit 3; exec sleep 30"), 3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "rank 1 was not stopped";
  EXPECT_EQ(next_port_, 41001);
  EXPECT_EQ(Launch("exit 0"), 0);
  EXPECT_EQ(next_port_, 41002);
}

TEST_F(LocalLaunchTest, ASigtermToTheLauncherReachesEveryRankAndIsNotRetried) {
  std::thread stopper([] {
    // Blocked here, so the launcher's thread (waiting for its ranks) is the one the signal interrupts,
    // as in eft-train, whose launcher is its only thread.
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &term, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::kill(::getpid(), SIGTERM);
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Launch("exec sleep 30"), 128 + SIGTERM);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "the ranks were not stopped";
  stopper.join();
  EXPECT_EQ(next_port_, 41001);
  // The next launch in this process starts afresh: the signal was this launch's.
  EXPECT_EQ(Launch("exit 0"), 0);
}

TEST(RankEnvTest, FirstSlurmHost) {
  EXPECT_EQ(FirstSlurmHost("node1"), "node1");
  EXPECT_EQ(FirstSlurmHost("node1,node2"), "node1");
  EXPECT_EQ(FirstSlurmHost("gpu[03-05,07],cpu1"), "gpu03");
  EXPECT_EQ(FirstSlurmHost("a1,gpu[2-3]"), "a1");
}

}  // namespace
}  // namespace eft::trainer
