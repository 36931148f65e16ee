// End-to-end tests of the control plane: a real eft-controller, three real eft-workers and the
// real c10d (Gloo) test workload on 127.0.0.1. The workload's result is sum(1..steps) only when
// every step ran exactly once across attempts, so lost or repeated steps fail these tests.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <thread>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"

namespace eft::testing {
namespace {

using namespace std::chrono_literals;



// The workload's result file: {"acc": ..., "expected": ..., "world_size": ..., "attempt": ...}.
nlohmann::json Result(TestCluster& c, const std::string& name) {
  std::string text = ReadFile(c.ResultPath(name));
  return nlohmann::json::parse(text.empty() ? "{}" : text, nullptr, false);
}

TEST(ControlPlane, JobTakesUpToMaxNodesAndSucceeds) {
  TestCluster c;
  c.StartAll();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("three", 2, 3, 12, 20, 4), &job).ok());
  job = c.WaitForJob(job.id(), IsTerminal, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).world_size(), 3);
  EXPECT_EQ(job.attempts(0).nodes_size(), 3);
  EXPECT_EQ(job.attempts(0).nodes(0), "node0") << "rank 0 goes on the first node in stable order";
  auto result = Result(c, "three");
  EXPECT_EQ(result.value("acc", -1.0), 78.0);
  EXPECT_EQ(result.value("world_size", 0), 3);
  EXPECT_EQ(job.checkpoints_size(), 3) << "checkpoints at steps 4, 8, 12 were relayed";
  EXPECT_EQ(job.progress().step(), 12);
}

TEST(ControlPlane, WorkerKilledMidJobRestartsAtSmallerWorldSizeFromCheckpoint) {
  ClusterOptions o;
  TestCluster c(o);
  c.StartAll();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("elastic", 2, 3, 40, 100, 5), &job).ok());
  // Let it make progress past a checkpoint.
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return j.checkpoints_size() >= 2 || IsTerminal(j); }, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << DescribeJob(job);
  std::vector<pid_t> first = c.RankPids("elastic", 1);
  ASSERT_EQ(first.size(), 3u);

  auto killed_at = std::chrono::steady_clock::now();
  c.KillWorker(2);  // node2 dies with its rank
  bool lost = WaitUntil([&] { return c.GetNode("node2").state() == v1::NODE_STATE_LOST; },
                        std::chrono::milliseconds(static_cast<int>(o.heartbeat_timeout_s * 1000) + 1000));
  auto detected = std::chrono::steady_clock::now() - killed_at;
  ASSERT_TRUE(lost) << "node2 not LOST within heartbeat_timeout + 1 s";
  std::printf("node loss detected after %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(detected).count()));

  // The survivors are stopped (not left waiting in a collective) within the grace period (3 s).
  bool survivors_gone = WaitUntil(
      [&] {
        for (pid_t p : first) {
          if (ProcessAlive(p)) return false;
        }
        return true;
      },
      4s);
  EXPECT_TRUE(survivors_gone) << "ranks of attempt 1 still alive";

  job = c.WaitForJob(job.id(), IsTerminal, 90s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_EQ(job.attempts_size(), 2) << DescribeJob(job);
  EXPECT_NE(job.attempts(0).end_reason().find("node node2 lost"), std::string::npos) << job.attempts(0).end_reason();
  EXPECT_EQ(job.attempts(1).world_size(), 2);
  EXPECT_FALSE(job.attempts(1).resume_from().empty()) << "attempt 2 must resume from a checkpoint";
  EXPECT_EQ(job.restarts(), 0) << "node loss does not count against max_restarts";
  auto result = Result(c, "elastic");
  EXPECT_EQ(result.value("acc", -1.0), 40.0 * 41 / 2) << "a step was lost or repeated: " << result.dump();
  EXPECT_EQ(result.value("world_size", 0), 2);
}

// A node that stops answering without closing its sockets (SIGSTOP: the worker and its rank freeze,
// as behind a network partition) leaves the survivors blocked in a collective with its rank. They
// cannot save the stop checkpoint (a sharded save needs every rank) nor even see SIGTERM's request
// before the collective returns: the controller has them killed at once (HeartbeatResponse.stop_now)
// instead of after stop_grace_seconds (60 s here), so the job goes on within seconds of the loss.
TEST(ControlPlane, SurvivorsBlockedByAFrozenNodeAreKilledAtOnce) {
  ClusterOptions o;
  TestCluster c(o);
  c.StartAll();
  v1::JobSpec spec = c.WorkloadJob("frozen", 2, 3, 40, 100, 5);
  spec.mutable_fault_tolerance()->set_stop_grace_seconds(60);  // and Gloo's timeout is 30 s
  v1::Job job;
  ASSERT_TRUE(c.Submit(spec, &job).ok());
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return j.checkpoints_size() >= 2 || IsTerminal(j); }, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << DescribeJob(job);
  ASSERT_EQ(job.attempts(0).nodes(2), "node2");
  std::vector<pid_t> first = c.RankPids("frozen", 1);
  ASSERT_EQ(first.size(), 3u);
  const pid_t frozen_rank = static_cast<pid_t>(std::atoi(ReadFile(c.dir() + "/pids/frozen/attempt-1/rank-2.pid").c_str()));
  ASSERT_GT(frozen_rank, 0);

  const auto frozen_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(c.worker(2).pid(), SIGSTOP), 0);
  ASSERT_EQ(::kill(frozen_rank, SIGSTOP), 0);
  const bool survivors_gone = WaitUntil(
      [&] {
        for (pid_t p : first) {
          if (p != frozen_rank && ProcessAlive(p)) return false;
        }
        return true;
      },
      std::chrono::milliseconds(static_cast<int>(o.heartbeat_timeout_s * 1000) + 4000));
  const auto gone_after = std::chrono::steady_clock::now() - frozen_at;
  EXPECT_TRUE(survivors_gone) << "the survivors of attempt 1 waited for their stop grace";
  std::printf("survivors of the frozen node killed %lld ms after it froze\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(gone_after).count()));

  job = c.WaitForJob(job.id(), IsTerminal, 90s);
  c.KillWorker(2);  // its frozen rank dies with it (PR_SET_PDEATHSIG sends SIGKILL, which a stopped process takes)
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_EQ(job.attempts_size(), 2) << DescribeJob(job);
  EXPECT_EQ(job.attempts(0).end(), v1::ATTEMPT_END_NODE_LOST);
  EXPECT_EQ(job.attempts(1).world_size(), 2);
  EXPECT_EQ(job.restarts(), 0);
  auto result = Result(c, "frozen");
  EXPECT_EQ(result.value("acc", -1.0), 40.0 * 41 / 2) << "a step was lost or repeated: " << result.dump();
}

// A controller that stops answering (SIGSTOP: its sockets stay open, as behind a partition of the
// management network) for longer than heartbeat_timeout has declared, or will declare, every node
// LOST and restart the job elsewhere: each worker kills its ranks itself when its lease runs out
// (docs/architecture.md, "Lease"), at most heartbeat_timeout after its last heartbeat the controller
// accepted, so no attempt runs on both sides. When the controller answers again the job restarts
// from its checkpoint and every step runs once.
TEST(ControlPlane, WorkersKillTheirRanksWhenTheControllerIsSilentPastItsHeartbeatTimeout) {
  ClusterOptions o;  // heartbeat interval 0.5 s, timeout 2 s: the lease
  o.workers = 2;
  TestCluster c(o);
  c.StartAll();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("leased", 2, 2, 60, 100, 5), &job).ok());
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return j.checkpoints_size() >= 1 || IsTerminal(j); }, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << DescribeJob(job);
  const std::vector<pid_t> ranks = c.RankPids("leased", 1);
  ASSERT_EQ(ranks.size(), 2u);
  auto any_alive = [&] {
    for (pid_t p : ranks) {
      if (ProcessAlive(p)) return true;
    }
    return false;
  };

  const auto silent_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(c.controller().pid(), SIGSTOP), 0);
  // Each worker's last accepted heartbeat left at most one interval before the stop, so its lease
  // holds for at least timeout - interval: the ranks run on that long.
  const auto lease_floor =
      std::chrono::milliseconds(static_cast<int>((o.heartbeat_timeout_s - o.heartbeat_interval_s) * 1000));
  while (std::chrono::steady_clock::now() < silent_at + lease_floor - 200ms) {
    ASSERT_TRUE(ProcessAlive(ranks[0]) && ProcessAlive(ranks[1])) << "a rank died before the lease ran out";
    std::this_thread::sleep_for(50ms);
  }
  // And die by heartbeat_timeout after the stop (the lease runs from a heartbeat sent before it);
  // the margin covers the lease check's 0.1 s period and the SIGKILL being delivered and reaped on
  // a loaded machine.
  const auto deadline = silent_at + std::chrono::milliseconds(static_cast<int>(o.heartbeat_timeout_s * 1000)) + 1s;
  const bool killed = WaitUntil([&] { return !any_alive(); }, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                  deadline - std::chrono::steady_clock::now()));
  const auto killed_after = std::chrono::steady_clock::now() - silent_at;
  std::printf("ranks killed %lld ms after the controller went silent (heartbeat timeout %g s)\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(killed_after).count()),
              o.heartbeat_timeout_s);
  EXPECT_TRUE(killed) << "a rank still runs with the controller silent past its heartbeat timeout";
  // Every worker's lease ran out by then too. The first one kills its rank; the other's may have
  // exited already, its collective broken by the killed peer.
  auto log = [&](int i) { return ReadFile(c.dir() + "/" + c.worker_name(i) + ".log"); };
  EXPECT_TRUE(WaitUntil([&] { return log(0).find(" (lease 2.0 s): ") != std::string::npos &&
                                     log(1).find(" (lease 2.0 s): ") != std::string::npos; },
                        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())))
      << log(0) << log(1);
  const std::string kill_line = "(lease 2.0 s): killing 1 rank of job " + job.id() + " attempt 1;";
  EXPECT_TRUE(log(0).find(kill_line) != std::string::npos || log(1).find(kill_line) != std::string::npos)
      << log(0) << log(1);
  ASSERT_EQ(::kill(c.controller().pid(), SIGCONT), 0);

  job = c.WaitForJob(job.id(), IsTerminal, 90s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  EXPECT_GE(job.attempts_size(), 2) << DescribeJob(job);
  EXPECT_EQ(Result(c, "leased").value("acc", -1.0), 60.0 * 61 / 2) << "a step was lost or repeated";
}

TEST(ControlPlane, ControllerKilledMidJobKeepsTheAttemptRunning) {
  // Away for 1.5 s plus its start-up, and each worker is heard again up to a heartbeat interval
  // after that: more than the default 2 s lease, after which workers kill their ranks themselves
  // (docs/architecture.md, "Lease"). This test is about an outage the attempt survives.
  ClusterOptions o;
  o.heartbeat_timeout_s = 5;
  TestCluster c(o);
  c.StartAll();
  v1::Job job, queued;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("survivor", 3, 3, 30, 100, 5), &job).ok());
  // A second job that cannot start while the first holds every node: it must survive too.
  ASSERT_TRUE(c.Submit(c.WorkloadJob("waiting", 3, 3, 3, 10, 5), &queued).ok());
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return j.progress().step() >= 5 || IsTerminal(j); }, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << DescribeJob(job);

  c.KillController(SIGKILL);
  std::this_thread::sleep_for(1500ms);  // ranks keep training; workers keep retrying
  c.StartController();

  job = c.WaitForJob(job.id(), IsTerminal, 90s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  EXPECT_EQ(job.attempts_size(), 1) << "the controller restart must not restart the job\n" << DescribeJob(job);
  EXPECT_EQ(Result(c, "survivor").value("acc", -1.0), 30.0 * 31 / 2);
  queued = c.WaitForJob(queued.id(), IsTerminal, 60s);
  EXPECT_EQ(queued.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(queued);
  EXPECT_EQ(queued.spec().name(), "waiting");
}

TEST(ControlPlane, ExitCode2FailsWithoutRetry) {
  TestCluster c;
  c.StartAll();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("bad-input", 2, 2, 10, 20, 5,
                                     {"--fail-at-step", "3", "--fail-rank", "1", "--fail-code", "2"}),
                       &job)
                  .ok());
  job = c.WaitForJob(job.id(), IsTerminal, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_FAILED) << DescribeJob(job);
  EXPECT_EQ(job.attempts_size(), 1);
  EXPECT_NE(job.reason().find("exited with code 2"), std::string::npos) << job.reason();
}

// The message a failing rank printed reaches the job's reason (its error event), not only its log.
TEST(ControlPlane, TheReasonARankFailedIsInTheJob) {
  TestCluster c;
  c.StartAll();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("typo", 1, 1, 10, 20, 5, {"--no-such-flag"}), &job).ok());
  job = c.WaitForJob(job.id(), IsTerminal, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_FAILED) << DescribeJob(job);
  EXPECT_NE(job.reason().find("exited with code 2 (bad configuration or input): configuration error: --no-such-flag "
                              "needs a value"),
            std::string::npos)
      << job.reason();
}

// Another program holds the MASTER_PORT the controller picks for the first attempt: rank 0 says so
// (exit 76), and the controller retries at once on the next port without spending a restart.
TEST(ControlPlane, ABusyRendezvousPortCostsNoRestart) {
  TestCluster c;
  c.StartAll();
  int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(holder, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(c.master_port_base()));
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(holder, 1), 0);
  v1::JobSpec spec = c.WorkloadJob("busy-port", 2, 2, 10, 20, 5);
  spec.mutable_fault_tolerance()->set_max_restarts(0);  // a counted failure would fail the job
  v1::Job job;
  ASSERT_TRUE(c.Submit(spec, &job).ok());
  job = c.WaitForJob(job.id(), IsTerminal, 90s);
  ::close(holder);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_EQ(job.attempts_size(), 2) << DescribeJob(job);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_NE(job.attempts(0).end_reason().find("exited with code 76 (rendezvous port " +
                                              std::to_string(c.master_port_base()) + " busy"),
            std::string::npos)
      << DescribeJob(job);
  EXPECT_EQ(Result(c, "busy-port").value("acc", -1.0), 10.0 * 11 / 2);
}

TEST(ControlPlane, RepeatedFailuresFailTheJobAfterMaxRestarts) {
  TestCluster c;
  c.StartAll();
  v1::JobSpec spec = c.WorkloadJob("flaky", 2, 2, 10, 20, 5, {"--fail-at-step", "2", "--fail-rank", "1",
                                                               "--fail-code", "1"});
  spec.mutable_fault_tolerance()->set_max_restarts(2);
  v1::Job job;
  ASSERT_TRUE(c.Submit(spec, &job).ok());
  job = c.WaitForJob(job.id(), IsTerminal, 90s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_FAILED) << DescribeJob(job);
  EXPECT_EQ(job.attempts_size(), 3) << "1 attempt + max_restarts (2) restarts\n" << DescribeJob(job);
  EXPECT_EQ(job.restarts(), 2);
  EXPECT_NE(job.reason().find("max_restarts"), std::string::npos) << job.reason();
}

TEST(ControlPlane, CancelStopsEveryRankWithinTheGracePeriod) {
  TestCluster c;
  c.StartAll();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("cancel-me", 3, 3, 1000, 100, 50), &job).ok());
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RUNNING || IsTerminal(j); }, 30s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << DescribeJob(job);
  ASSERT_TRUE(WaitUntil([&] { return c.RankPids("cancel-me", 1).size() == 3; }, 10s));
  std::vector<pid_t> pids = c.RankPids("cancel-me", 1);

  grpc::ClientContext ctx;
  v1::CancelJobRequest req;
  req.set_id(job.id());
  v1::Job cancelled;
  ASSERT_TRUE(c.jobs().CancelJob(&ctx, req, &cancelled).ok());
  EXPECT_EQ(cancelled.state(), v1::JOB_STATE_CANCELLED);
  // Grace period 3 s, plus one heartbeat interval for the workers to hear about it.
  bool gone = WaitUntil(
      [&] {
        for (pid_t p : pids) {
          if (ProcessAlive(p)) return false;
        }
        return true;
      },
      4s);
  EXPECT_TRUE(gone);
  EXPECT_EQ(c.GetJob(job.id()).state(), v1::JOB_STATE_CANCELLED);
}

TEST(ControlPlane, BadInputIsRejectedWithTheField) {
  TestCluster c;
  c.StartController();
  v1::JobSpec spec;
  spec.set_name("bad");
  spec.add_command("/bin/true");
  spec.mutable_resources()->mutable_nodes()->set_min(3);
  spec.mutable_resources()->mutable_nodes()->set_max(2);
  v1::Job job;
  grpc::Status s = c.Submit(spec, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("nodes.max"), std::string::npos) << s.error_message();

  grpc::ClientContext ctx;
  v1::GetJobRequest get;
  get.set_id("12345");
  s = c.jobs().GetJob(&ctx, get, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace eft::testing
