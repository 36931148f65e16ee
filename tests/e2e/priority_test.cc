// Priorities and preemption end to end (docs/architecture.md, "Priorities and preemption"): a real
// eft-controller, real eft-workers and the c10d test workload on 127.0.0.1. The workload's result is
// sum(1..steps) only when every step ran exactly once across attempts, and every attempt_started
// event must say "0 steps lost": the stops for a job of higher priority are planned, with a checkpoint.
#include <cstdio>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"

namespace eft::testing {
namespace {

using namespace std::chrono_literals;

double Acc(TestCluster& c, const std::string& name) {
  std::string text = ReadFile(c.ResultPath(name));
  auto j = nlohmann::json::parse(text.empty() ? "{}" : text, nullptr, false);
  return j.is_object() ? j.value("acc", -1.0) : -1.0;
}

// Every "K steps lost" the controller wrote in the job's attempt_started events; how many it wrote.
int ExpectNoStepsLost(const v1::Job& job) {
  static const std::regex kLost("(\\d+) steps? lost");
  int seen = 0;
  for (const auto& e : job.events()) {
    std::smatch m;
    if (e.type() != "attempt_started" || !std::regex_search(e.message(), m, kLost)) continue;
    ++seen;
    EXPECT_EQ(m[1].str(), "0") << e.message();
  }
  EXPECT_TRUE(std::none_of(job.events().begin(), job.events().end(),
                           [](const v1::JobEvent& e) { return e.type() == "stop_not_saved"; }))
      << DescribeJob(job);
  return seen;
}

// eftctl's output (stdout and stderr) against the cluster.
std::string Eftctl(TestCluster& c, const std::string& args) {
  std::string cmd = BuildDir() + "/cli/eftctl --controller " + c.controller_address() + " " + args + " 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

bool HasEvent(const v1::Job& job, const std::string& type) {
  return std::any_of(job.events().begin(), job.events().end(), [&](const v1::JobEvent& e) { return e.type() == type; });
}

TEST(Priority, AHighJobShrinksALowElasticJobWhichGrowsBackAfterwards) {
  TestCluster c;
  c.StartAll();
  v1::JobSpec low_spec = c.WorkloadJob("low", 1, 3, 80, 100, 5);
  low_spec.mutable_resources()->set_resize_cooldown_seconds(0);
  // What DecideGrow reads as the checkpoint interval (no grow within one of the end): the workload's.
  low_spec.mutable_checkpoint()->set_every_steps(5);
  v1::Job low, high;
  ASSERT_TRUE(c.Submit(low_spec, &low).ok());
  low = c.WaitForJob(low.id(), [](const v1::Job& j) { return j.progress().step() >= 6 || IsTerminal(j); }, 60s);
  ASSERT_EQ(low.state(), v1::JOB_STATE_RUNNING) << DescribeJob(low);
  ASSERT_EQ(low.world_size(), 3);

  v1::JobSpec high_spec = c.WorkloadJob("high", 2, 2, 10, 50, 5);
  high_spec.set_priority(5);
  ASSERT_TRUE(c.Submit(high_spec, &high).ok());
  high = c.WaitForJob(high.id(), IsTerminal, 60s);
  ASSERT_EQ(high.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(high);
  ASSERT_EQ(high.attempts_size(), 1) << DescribeJob(high);
  EXPECT_EQ(std::vector<std::string>(high.attempts(0).nodes().begin(), high.attempts(0).nodes().end()),
            (std::vector<std::string>{"node1", "node2"}))
      << "the nodes the low job gave up";
  EXPECT_TRUE(HasEvent(high, "making_room")) << DescribeJob(high);
  EXPECT_EQ(Acc(c, "high"), 55.0);

  low = c.WaitForJob(low.id(), IsTerminal, 120s);
  ASSERT_EQ(low.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(low);
  ASSERT_GE(low.attempts_size(), 3) << DescribeJob(low);
  EXPECT_EQ(low.attempts(0).end_reason(), "resized: for job " + high.id() + " (priority 5): gives up node1,node2, 3 -> 1 node");
  EXPECT_EQ(low.attempts(1).world_size(), 1);
  EXPECT_EQ(low.attempts(1).nodes(0), "node0") << "rank 0 stays put";
  // Grown back to all three nodes once the high job was done.
  EXPECT_EQ(low.attempts(1).end_reason().rfind("resized: node", 0), 0u) << DescribeJob(low);
  EXPECT_EQ(low.attempts(low.attempts_size() - 1).world_size(), 3) << DescribeJob(low);
  EXPECT_EQ(low.restarts(), 0);
  EXPECT_EQ(Acc(c, "low"), 80.0 * 81 / 2) << "a step was lost or repeated";
  EXPECT_GE(ExpectNoStepsLost(low), 2) << DescribeJob(low);
}

TEST(Priority, APreemptedJobWaitsQueuedAndFinishesWithoutLosingSteps) {
  ClusterOptions o;
  o.workers = 2;
  TestCluster c(o);
  c.StartAll();
  v1::Job rigid, urgent;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("rigid", 2, 2, 40, 100, 5), &rigid).ok());
  rigid = c.WaitForJob(rigid.id(), [](const v1::Job& j) { return j.progress().step() >= 6 || IsTerminal(j); }, 60s);
  ASSERT_EQ(rigid.state(), v1::JOB_STATE_RUNNING) << DescribeJob(rigid);

  v1::JobSpec urgent_spec = c.WorkloadJob("urgent", 1, 1, 30, 100, 5);
  urgent_spec.set_priority(3);
  ASSERT_TRUE(c.Submit(urgent_spec, &urgent).ok());
  // While the urgent job runs, the preempted one waits in the queue and says for whom.
  rigid = c.WaitForJob(rigid.id(), [](const v1::Job& j) { return j.state() == v1::JOB_STATE_QUEUED || IsTerminal(j); },
                       30s);
  ASSERT_EQ(rigid.state(), v1::JOB_STATE_QUEUED) << DescribeJob(rigid);
  EXPECT_NE(rigid.reason().find("held by job " + urgent.id() + " (priority 3, not lower) which is at its nodes.min"),
            std::string::npos)
      << rigid.reason();
  // eftctl shows the priority and the wait.
  std::string described = Eftctl(c, "job describe " + rigid.id());
  EXPECT_NE(described.find("Priority:    0"), std::string::npos) << described;
  EXPECT_NE(described.find("held by job " + urgent.id() + " (priority 3, not lower)"), std::string::npos) << described;
  EXPECT_NE(Eftctl(c, "job describe " + urgent.id()).find("Priority:    3"), std::string::npos);
  std::string list = Eftctl(c, "job list");
  EXPECT_NE(list.find("PRIO"), std::string::npos) << list;

  urgent = c.WaitForJob(urgent.id(), IsTerminal, 60s);
  ASSERT_EQ(urgent.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(urgent);
  rigid = c.WaitForJob(rigid.id(), IsTerminal, 90s);
  ASSERT_EQ(rigid.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(rigid);
  EXPECT_EQ(rigid.attempts(0).end_reason(),
            "preempted: for job " + urgent.id() + " (priority 3), which needs 1 node");
  EXPECT_TRUE(HasEvent(rigid, "preempted"));
  EXPECT_EQ(rigid.restarts(), 0) << "a preemption is not a failure";
  EXPECT_EQ(rigid.attempts(rigid.attempts_size() - 1).world_size(), 2);
  EXPECT_EQ(Acc(c, "rigid"), 40.0 * 41 / 2) << "a step was lost or repeated";
  EXPECT_GE(ExpectNoStepsLost(rigid), 1) << DescribeJob(rigid);
  EXPECT_EQ(Acc(c, "urgent"), 30.0 * 31 / 2);
}

// The controller is killed (-9) right after it decided a shrink: the stops it
// ordered are under way or not yet heard of when it comes back. From SQLite it knows the step each
// attempt reached and the nodes held for the high job: the high job gets exactly the nodes freed for
// it, and the victims resume with 0 steps lost (said in their attempt_started events, which needs
// the reached step from before the crash) with every step run once (the workload's sum).
TEST(Priority, AControllerKilledWhileVictimsStopKeepsTheirStepsAndTheHighJobsNodes) {
  // Away for 1 s plus its start-up, and each worker is heard again up to a heartbeat interval after
  // that: about the default 2 s lease, after which workers kill their ranks, stop checkpoints and
  // all (docs/architecture.md, "Lease"). This test is about stops the controller restart must not
  // disturb, so the lease covers the outage.
  ClusterOptions o;
  o.heartbeat_timeout_s = 5;
  TestCluster c(o);
  c.StartAll();
  // Slow steps, so the ranks are still finishing their last step when the controller dies.
  v1::JobSpec low_spec = c.WorkloadJob("low", 1, 3, 60, 300, 5);
  low_spec.mutable_resources()->set_resize_cooldown_seconds(0);
  low_spec.mutable_checkpoint()->set_every_steps(5);
  v1::Job low, high;
  ASSERT_TRUE(c.Submit(low_spec, &low).ok());
  low = c.WaitForJob(low.id(), [](const v1::Job& j) { return j.progress().step() >= 7 || IsTerminal(j); }, 90s);
  ASSERT_EQ(low.state(), v1::JOB_STATE_RUNNING) << DescribeJob(low);
  ASSERT_EQ(low.world_size(), 3);

  v1::JobSpec high_spec = c.WorkloadJob("high", 2, 2, 10, 50, 5);
  high_spec.set_priority(5);
  ASSERT_TRUE(c.Submit(high_spec, &high).ok());
  low = c.WaitForJob(low.id(), [](const v1::Job& j) { return j.state() != v1::JOB_STATE_RUNNING; }, 30s);
  ASSERT_EQ(low.state(), v1::JOB_STATE_RECOVERING) << DescribeJob(low);
  c.KillController(9);
  std::this_thread::sleep_for(1s);  // the ranks finish their step, save, exit; workers retry meanwhile
  c.StartController();

  high = c.WaitForJob(high.id(), IsTerminal, 90s);
  ASSERT_EQ(high.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(high);
  ASSERT_EQ(high.attempts_size(), 1) << DescribeJob(high);
  EXPECT_EQ(std::vector<std::string>(high.attempts(0).nodes().begin(), high.attempts(0).nodes().end()),
            (std::vector<std::string>{"node1", "node2"}))
      << "the nodes the low job gave up";
  EXPECT_EQ(Acc(c, "high"), 55.0);

  low = c.WaitForJob(low.id(), IsTerminal, 180s);
  ASSERT_EQ(low.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(low);
  EXPECT_EQ(low.attempts(0).end_reason(),
            "resized: for job " + high.id() + " (priority 5): gives up node1,node2, 3 -> 1 node");
  EXPECT_EQ(low.attempts(1).world_size(), 1) << DescribeJob(low);
  EXPECT_EQ(low.restarts(), 0) << DescribeJob(low);
  EXPECT_EQ(Acc(c, "low"), 60.0 * 61 / 2) << "a step was lost or repeated";
  // The attempt right after the crash, and the grow back.
  EXPECT_GE(ExpectNoStepsLost(low), 2) << DescribeJob(low);
}

TEST(Priority, AControllerKilledWhileAPreemptedJobStopsKeepsItsSteps) {
  ClusterOptions o;
  o.workers = 2;
  // Restarted at once, but its start-up on a loaded machine plus a heartbeat interval each side can
  // come near the default 2 s lease (docs/architecture.md, "Lease"), which would kill the stopping
  // ranks before they save.
  o.heartbeat_timeout_s = 5;
  TestCluster c(o);
  c.StartAll();
  v1::Job rigid, urgent;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("rigid", 2, 2, 40, 300, 5), &rigid).ok());
  rigid = c.WaitForJob(rigid.id(), [](const v1::Job& j) { return j.progress().step() >= 7 || IsTerminal(j); }, 90s);
  ASSERT_EQ(rigid.state(), v1::JOB_STATE_RUNNING) << DescribeJob(rigid);
  v1::JobSpec urgent_spec = c.WorkloadJob("urgent", 1, 1, 10, 100, 5);
  urgent_spec.set_priority(3);
  ASSERT_TRUE(c.Submit(urgent_spec, &urgent).ok());
  rigid = c.WaitForJob(rigid.id(), [](const v1::Job& j) { return j.state() != v1::JOB_STATE_RUNNING; }, 30s);
  ASSERT_EQ(rigid.state(), v1::JOB_STATE_RECOVERING) << DescribeJob(rigid);
  c.KillController(9);
  c.StartController();  // at once: the workers may not have heard of the stop at all

  urgent = c.WaitForJob(urgent.id(), IsTerminal, 90s);
  ASSERT_EQ(urgent.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(urgent);
  EXPECT_EQ(urgent.attempts_size(), 1) << DescribeJob(urgent);
  rigid = c.WaitForJob(rigid.id(), IsTerminal, 120s);
  ASSERT_EQ(rigid.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(rigid);
  EXPECT_TRUE(HasEvent(rigid, "preempted"));
  EXPECT_EQ(rigid.restarts(), 0) << DescribeJob(rigid);
  EXPECT_EQ(Acc(c, "rigid"), 40.0 * 41 / 2) << "a step was lost or repeated";
  EXPECT_GE(ExpectNoStepsLost(rigid), 1) << DescribeJob(rigid);
}

TEST(Priority, EqualPriorityNeverPreempts) {
  ClusterOptions o;
  o.workers = 2;
  TestCluster c(o);
  c.StartAll();
  v1::Job first, second;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("first", 2, 2, 30, 100, 5), &first).ok());
  first = c.WaitForJob(first.id(), [](const v1::Job& j) { return j.progress().step() >= 3 || IsTerminal(j); }, 60s);
  ASSERT_EQ(first.state(), v1::JOB_STATE_RUNNING) << DescribeJob(first);
  ASSERT_TRUE(c.Submit(c.WorkloadJob("second", 1, 1, 5, 50, 5), &second).ok());
  std::this_thread::sleep_for(1500ms);
  second = c.GetJob(second.id());
  EXPECT_EQ(second.state(), v1::JOB_STATE_QUEUED) << DescribeJob(second);
  EXPECT_NE(second.reason().find("held by job " + first.id() + " (priority 0, not lower) which is at its nodes.min"),
            std::string::npos)
      << second.reason();
  first = c.WaitForJob(first.id(), IsTerminal, 60s);
  ASSERT_EQ(first.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(first);
  EXPECT_EQ(first.attempts_size(), 1) << "never stopped for a job of equal priority\n" << DescribeJob(first);
  second = c.WaitForJob(second.id(), IsTerminal, 60s);
  EXPECT_EQ(second.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(second);
}

}  // namespace
}  // namespace eft::testing
