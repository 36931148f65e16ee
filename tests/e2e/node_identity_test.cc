// One live eft-worker per node name and per work dir (docs/architecture.md, "Two workers, one
// name"), end to end: a real controller, real workers and the c10d test workload. A second worker
// that reuses a running node's --name or --work-dir must leave, saying why, and the job there must
// not notice; a worker restarted in its own work dir must get its node back without waiting.
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"

namespace eft::testing {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> WorkerArgv(TestCluster& c, const std::string& name, const std::string& work_dir) {
  return {BuildDir() + "/worker/eft-worker", "--controller", c.controller_address(), "--name", name,
          "--slots", "1", "--work-dir", work_dir, "--address", "127.0.0.1", "--snapshot-dir", work_dir + "/shm"};
}

// The exit code of `p` once it exits within `timeout`; -1 if it does not, or dies of a signal.
int ExitCode(ChildProcess& p, std::chrono::milliseconds timeout) {
  int status = p.Wait(timeout);
  return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(NodeIdentity, ASecondWorkerUnderARunningNodesNameOrWorkDirLeavesAndTheJobNeverNotices) {
  ClusterOptions o;
  o.workers = 1;
  TestCluster c(o);
  c.StartAll();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("held", 1, 1, 40, 100, 10), &job).ok());
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return j.progress().step() >= 2 || IsTerminal(j); }, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << DescribeJob(job);
  std::vector<pid_t> ranks = c.RankPids("held", 1);
  ASSERT_EQ(ranks.size(), 1u);

  // Same work dir (another name): refused before it touches anything, or the rank ledger would
  // have it kill node0's rank as a leftover.
  ChildProcess same_dir;
  const std::string same_dir_log = c.dir() + "/same-dir.log";
  ASSERT_TRUE(same_dir.Start(WorkerArgv(c, "node7", c.dir() + "/work/node0"), {}, same_dir_log));
  EXPECT_EQ(ExitCode(same_dir, 10s), 1);
  EXPECT_NE(ReadFile(same_dir_log).find("another eft-worker (pid " + std::to_string(c.worker(0).pid()) +
                                        ", node node0) is running with work dir"),
            std::string::npos)
      << ReadFile(same_dir_log);
  EXPECT_TRUE(ProcessAlive(ranks[0]));

  // Same name (its own work dir): the controller sees node0's worker heartbeat on and fences it.
  ChildProcess twin;
  const std::string twin_log = c.dir() + "/twin.log";
  ASSERT_TRUE(twin.Start(WorkerArgv(c, "node0", c.dir() + "/work/twin"), {}, twin_log));
  EXPECT_EQ(ExitCode(twin, 15s), 3) << ReadFile(twin_log);
  EXPECT_NE(ReadFile(twin_log).find("two workers share --name node0"), std::string::npos) << ReadFile(twin_log);
  EXPECT_TRUE(ProcessAlive(ranks[0]));
  EXPECT_EQ(c.GetNode("node0").state(), v1::NODE_STATE_READY);

  job = c.WaitForJob(job.id(), IsTerminal, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  EXPECT_EQ(job.attempts_size(), 1) << "the twin cost the job a restart\n" << DescribeJob(job);
  auto result = nlohmann::json::parse(ReadFile(c.ResultPath("held")), nullptr, false);
  EXPECT_EQ(result.value("acc", -1.0), 40.0 * 41 / 2) << result.dump();
}

TEST(NodeIdentity, AWorkerRestartedInItsWorkDirTakesItsNodeBackWithoutWaiting) {
  ClusterOptions o;
  o.workers = 1;
  TestCluster c(o);
  c.StartAll();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("back", 1, 1, 30, 100, 5), &job).ok());
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return j.checkpoints_size() >= 1 || IsTerminal(j); }, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << DescribeJob(job);

  c.KillWorker(0);  // kill -9, its rank dies with it; the controller has not noticed yet
  c.StartWorker(0);
  job = c.WaitForJob(job.id(), IsTerminal, 90s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_EQ(job.attempts_size(), 2) << DescribeJob(job);
  std::printf("attempt 1 ended: %s\n", job.attempts(0).end_reason().c_str());
  const std::string log = ReadFile(c.dir() + "/node0.log");
  EXPECT_EQ(log.find("asking again in"), std::string::npos)
      << "the restarted worker named the incarnation before it and should not have waited:\n" << log;
  EXPECT_EQ(log.find("fenced"), std::string::npos) << log;
  auto result = nlohmann::json::parse(ReadFile(c.ResultPath("back")), nullptr, false);
  EXPECT_EQ(result.value("acc", -1.0), 30.0 * 31 / 2) << result.dump();
}

}  // namespace
}  // namespace eft::testing
