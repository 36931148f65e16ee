// node_loss_bench: how fast the control plane notices a dead node and gets the job running again.
//
// Each run starts a real cluster on 127.0.0.1 (eft-controller + 3 eft-workers with the default
// heartbeat settings: interval 1 s, timeout 3 s), runs the c10d test workload on nodes 2..3, waits
// until it is RUNNING and has written its first checkpoint, waits (run-1)/runs of a heartbeat
// interval, then SIGKILLs the worker of node2 (it runs rank 2, so the rendezvous host survives) and
// measures from the kill:
//   detection  kill -> the controller reports node2 LOST (ListNodes)
//   placed     detection -> attempt 2 exists (GetJob)
//   running    detection -> attempt 2 is RUNNING (every rank reported started)
// ListNodes and GetJob are polled every --poll-ms on a steady clock, so each number is exact to about
// that plus one RPC (~1 ms).
//
// Usage: node_loss_bench [--runs 10] [--step-ms 100] [--poll-ms 10] [--keep]
// Prints one line per run, then "SUMMARY <metric> median=<ms> min=<ms> max=<ms>" lines that
// bench/run_control_plane.sh collects.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>

#include "bench/control_plane/bench_util.h"
#include "tests/e2e/cluster.h"

namespace {

using SteadyClock = std::chrono::steady_clock;
using eft::bench::FormatMs;
using eft::bench::Ms;
using eft::bench::PrintSummary;
using eft::testing::ClusterOptions;
using eft::testing::TestCluster;
namespace v1 = eft::v1;
using google::protobuf::util::TimeUtil;

struct Flags {
  int runs = 10;
  int step_ms = 100;
  int poll_ms = 10;
  bool keep = false;
};


// One run, in ms from the kill; a phase that did not happen before the deadline stays unset.
struct Run {
  std::optional<double> attempt1_ended, lost, placed, running;
  double controller_gap_ms = -1;  // attempt 2 start_time - attempt 1 end_time, on the controller's clock
  std::string end_reason;
  int world_size = 0;
  bool resumed = false;
};

bool NodeLost(TestCluster& c, const std::string& name) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::ListNodesResponse resp;
  if (!c.nodes().ListNodes(&ctx, v1::ListNodesRequest(), &resp).ok()) return false;
  for (const auto& n : resp.nodes()) {
    if (n.name() == name) return n.state() == v1::NODE_STATE_LOST;
  }
  return false;
}

std::string Events(const v1::Job& job) {
  std::string out;
  for (const auto& e : job.events()) out += "    [" + e.type() + "] " + e.message() + "\n";
  return out;
}

// Returns false when the cluster or the job did not get to the point where the kill is measured.
bool OneRun(const Flags& flags, int index, Run* run) {
  ClusterOptions options;
  options.workers = 3;
  options.heartbeat_interval_s = 1.0;  // the controller's defaults, not the tests' faster ones
  options.heartbeat_timeout_s = 3.0;
  TestCluster c(options);
  if (flags.keep) c.KeepDirectory();
  c.StartAll();
  if (::testing::Test::HasFailure()) return false;

  const std::string name = "loss-" + std::to_string(index);
  // Long enough never to finish during the run: the measurement ends when attempt 2 is RUNNING.
  v1::Job job;
  grpc::Status s = c.Submit(c.WorkloadJob(name, 2, 3, 1000000, flags.step_ms, 5), &job);
  if (!s.ok()) {
    std::fprintf(stderr, "run %d: submit failed: %s\n", index, s.error_message().c_str());
    c.KeepDirectory();
    return false;
  }
  job = c.WaitForJob(
      job.id(), [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RUNNING && j.checkpoints_size() >= 1; },
      std::chrono::seconds(60));
  if (job.state() != v1::JOB_STATE_RUNNING || job.attempts_size() != 1 || job.attempts(0).world_size() != 3) {
    std::fprintf(stderr, "run %d: job did not reach RUNNING at world size 3 with a checkpoint:\n%s", index,
                 Events(job).c_str());
    c.KeepDirectory();
    return false;
  }

  // The checkpoint is seen through a heartbeat, and the workers' heartbeats run nearly in phase (they
  // all wake when the attempt's ranks start), so killing at once would always hit node2 right after
  // its heartbeat: the worst case every time. Spreading the kills evenly over one heartbeat interval
  // samples every phase, repeatably.
  std::this_thread::sleep_for(std::chrono::milliseconds((index - 1) * 1000 / flags.runs));
  const auto killed = SteadyClock::now();
  c.worker(2).Signal(SIGKILL);  // its rank dies with it (PR_SET_PDEATHSIG); reaped after measuring
  const auto deadline = killed + std::chrono::seconds(30);
  auto next_poll = killed;
  while (SteadyClock::now() < deadline && !run->running) {
    if (!run->lost && NodeLost(c, "node2")) run->lost = Ms(SteadyClock::now() - killed);
    job = c.GetJob(job.id());
    double now = Ms(SteadyClock::now() - killed);
    if (!run->attempt1_ended && (job.attempt() >= 2 || job.state() != v1::JOB_STATE_RUNNING)) {
      run->attempt1_ended = now;
    }
    if (!run->placed && job.attempt() >= 2) run->placed = now;
    if (job.attempt() >= 2 && job.state() == v1::JOB_STATE_RUNNING) run->running = now;
    next_poll += std::chrono::milliseconds(flags.poll_ms);
    std::this_thread::sleep_until(next_poll);
  }
  c.worker(2).Wait(std::chrono::seconds(5));

  if (job.attempts_size() >= 1) run->end_reason = job.attempts(0).end_reason();
  if (job.attempts_size() >= 2) {
    const v1::Attempt& a2 = job.attempts(1);
    run->world_size = a2.world_size();
    run->resumed = !a2.resume_from().empty();
    run->controller_gap_ms =
        static_cast<double>(TimeUtil::TimestampToMilliseconds(a2.start_time()) -
                            TimeUtil::TimestampToMilliseconds(job.attempts(0).end_time()));
  }
  if (index == 1) std::printf("  events of run 1 (job %s):\n%s", job.id().c_str(), Events(job).c_str());
  bool ok = run->lost && run->placed && run->running;
  if (!ok) c.KeepDirectory();  // its logs say why
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!eft::bench::ParseFlags(argc, argv,
                              {{"--runs", &flags.runs}, {"--step-ms", &flags.step_ms}, {"--poll-ms", &flags.poll_ms}},
                              &flags.keep, "node_loss_bench",
                              "[--runs N (10)] [--step-ms MS (100)] [--poll-ms MS (10)] [--keep]")) {
    return 2;
  }
  eft::bench::DefaultBuildDirToThisBinarys();
  std::printf("node_loss_bench: %d runs, controller + 3 workers, heartbeat 1 s / timeout 3 s, "
              "job on nodes 2..3, SIGKILL node2 after the first checkpoint (times in ms)\n",
              flags.runs);
  std::printf("%4s %7s %9s %9s %9s %9s %9s %9s  %s\n", "run", "offset", "ended", "detect", "placed", "running", "total", "ctl-gap",
              "attempt 1 end reason");
  std::vector<double> detect, placed, running, total, ended;
  int failed = 0;
  for (int i = 1; i <= flags.runs; ++i) {
    Run r;
    bool ok = OneRun(flags, i, &r);
    std::optional<double> d_placed, d_running;
    // Attempt 2 can show up one poll before node2's LOST does (the tick ran between the two RPCs).
    if (r.lost && r.placed) d_placed = std::max(0.0, *r.placed - *r.lost);
    if (r.lost && r.running) d_running = *r.running - *r.lost;
    std::printf("%4d %7d %9s %9s %9s %9s %9s %9.0f  %s (attempt 2: world size %d, %s)\n", i,
                (i - 1) * 1000 / flags.runs, FormatMs(r.attempt1_ended).c_str(), FormatMs(r.lost).c_str(), FormatMs(d_placed).c_str(), FormatMs(d_running).c_str(),
                FormatMs(r.running).c_str(), r.controller_gap_ms, r.end_reason.c_str(), r.world_size,
                r.resumed ? "resumed from a checkpoint" : "NOT resumed");
    std::fflush(stdout);
    if (!ok) {
      ++failed;
      continue;
    }
    detect.push_back(*r.lost);
    placed.push_back(*d_placed);
    running.push_back(*d_running);
    total.push_back(*r.running);
    ended.push_back(*r.attempt1_ended);
  }
  std::printf("columns: offset = kill delay after the first checkpoint was seen; ended = kill -> attempt 1\n"
              "no longer RUNNING; detect = kill -> node2 LOST; placed and running = detection -> attempt 2\n"
              "exists / is RUNNING; total = kill -> attempt 2 RUNNING; ctl-gap = attempt 2 start - attempt 1\n"
              "end as the controller recorded them\n");
  PrintSummary("attempt1_ended_ms", ended);
  PrintSummary("detection_ms", detect);
  PrintSummary("relaunch_placed_ms", placed);
  PrintSummary("relaunch_running_ms", running);
  PrintSummary("kill_to_running_ms", total);
  if (failed) std::printf("FAILED RUNS %d of %d\n", failed, flags.runs);
  return failed ? 1 : 0;
}
