// resize_bench: how long a planned resize takes, from the request to training at the new size.
//
// Each run starts a real cluster on 127.0.0.1 (eft-controller + 3 eft-workers, heartbeat 1 s /
// timeout 3 s as the controller's defaults) and an eft-train job on 1..3 nodes (a small random
// Llama, fp32, resize_cooldown_seconds 0), waits until it trains at 3 nodes, then:
//   shrink  `DrainNode(node2, evict)`: the ranks stop with a checkpoint, the job goes on at 2 nodes;
//   grow    `UndrainNode(node2)`: the controller sees a free node, stops the ranks with a
//           checkpoint, and the job goes on at 3 nodes.
//   preempt a job of priority 5 on exactly 2 nodes (the same model) is submitted: the running job
//           (priority 0) shrinks to 1 node with a checkpoint, and the new job starts on the 2
//           nodes freed for it (docs/architecture.md, "Priorities and preemption").
// and measures, from the request, on a steady clock polled every --poll-ms:
//   checkpoint  the stop checkpoint is recorded (the ranks finished their step and saved)
//   ended       the old attempt ended (every rank exited and was reported gone)
//   running     the new attempt is RUNNING (every rank started)
//   trained     the new attempt reported its first step (model loaded, rendezvous, resumed)
// and reads the steps lost from the new attempt's attempt_started event (planned: must be 0). For
// preempt, from the submit: checkpoint = the shrinking job's stop checkpoint recorded, ended = the
// high job's attempt placed, running = it is RUNNING, trained = its first step; steps lost are the
// shrunk job's.
//
// With --interleave 1, odd runs turn the controller's fast heartbeats off
// (--transition-heartbeat-interval = the heartbeat interval: the behaviour before them) and even
// runs keep them, so both are measured side by side under the same machine load; the off runs'
// metrics are printed with an "off_" prefix.
//
// Usage: resize_bench [--runs 10] [--poll-ms 10] [--hidden 256] [--layers 4] [--interleave 0] [--keep]
// Prints one line per resize, then "SUMMARY <metric> n= median= min= max=" lines
// (bench/run_control_plane.sh collects them; docs/benchmarks.md "Resizing").
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/control_plane/bench_util.h"
#include "tests/e2e/cluster.h"

namespace {

constexpr const char* kKinds[3] = {"shrink", "grow", "preempt"};

using SteadyClock = std::chrono::steady_clock;
using eft::bench::FormatMs;
using eft::bench::Ms;
using eft::bench::PrintSummary;
using eft::testing::ClusterOptions;
using eft::testing::TestCluster;
namespace v1 = eft::v1;
namespace fs = std::filesystem;

struct Flags {
  int runs = 10;
  int poll_ms = 10;
  int hidden = 256;
  int layers = 4;
  int interleave = 0;
  bool keep = false;
};


std::string BuildDir() { return std::getenv("EFT_BUILD_DIR"); }
std::string Trainer() { return BuildDir() + "/trainer/eft-train"; }

// The model and data every run trains: made once per benchmark in `dir`.
bool MakeFixture(const Flags& flags, const fs::path& dir) {
  fs::create_directories(dir);
  const int heads = std::max(1, flags.hidden / 64);
  const std::string cmd = Trainer() + " init-model --arch llama --hidden " + std::to_string(flags.hidden) +
                          " --layers " + std::to_string(flags.layers) + " --heads " + std::to_string(heads) +
                          " --kv-heads " + std::to_string(heads) + " --intermediate " +
                          std::to_string(flags.hidden * 8 / 3) + " --vocab-size 2048 --dtype float32 --seed 1 --out " +
                          (dir / "model").string() + " >/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "resize_bench: %s failed\n", cmd.c_str());
    return false;
  }
  std::mt19937 gen(5);
  std::ofstream f(dir / "data.jsonl");
  for (int i = 0; i < 96; ++i) {
    nlohmann::json ids = nlohmann::json::array();
    for (int t = 0; t < 64; ++t) ids.push_back(1 + static_cast<int>(gen() % 2047));
    f << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
  }
  return static_cast<bool>(f);
}

v1::JobSpec Spec(const fs::path& fixture, const std::string& ckpt) {
  v1::JobSpec spec;
  spec.set_name("resize");
  spec.set_model((fixture / "model").string());
  spec.mutable_data()->set_train((fixture / "data.jsonl").string());
  spec.mutable_data()->set_max_seq_len(64);
  spec.mutable_data()->set_packing(false);
  spec.mutable_resources()->mutable_nodes()->set_min(1);
  spec.mutable_resources()->mutable_nodes()->set_max(3);
  spec.mutable_resources()->set_resize_cooldown_seconds(0);
  auto* t = spec.mutable_training();
  t->set_epochs(1000);  // never ends during a run
  t->set_global_batch_size(12);
  t->set_micro_batch_size(2);
  t->set_precision("fp32");
  spec.mutable_checkpoint()->set_dir(ckpt);
  // No periodic checkpoints: the stop checkpoint is the one measured (and with none, the job is never
  // "within one checkpoint interval of its end", which holds a grow back).
  spec.mutable_checkpoint()->set_every_steps(0);
  (*spec.mutable_env())["OMP_NUM_THREADS"] = "1";
  return spec;
}

// One resize, in ms from the request; a phase not reached before the deadline stays unset.
struct Phases {
  std::optional<double> checkpoint, ended, running, trained;
  int64_t steps_lost = -1;
  int from = 0, to = 0;
};

int64_t StepsLost(const v1::Job& job, int attempt) {
  for (const auto& e : job.events()) {
    if (e.type() != "attempt_started" || e.message().rfind("attempt " + std::to_string(attempt) + ":", 0) != 0) continue;
    std::smatch m;
    if (std::regex_search(e.message(), m, std::regex(R"(: (\d+) steps? lost\))"))) return std::stoll(m[1]);
  }
  return -1;
}

// Polls the job after a resize request of the attempt `old_attempt` until the next attempt trains.
Phases Measure(TestCluster& c, const std::string& id, int old_attempt, SteadyClock::time_point requested,
               const Flags& flags) {
  Phases p;
  int64_t resume_step = -1;
  const auto deadline = requested + std::chrono::seconds(120);
  auto next = requested;
  v1::Job job;
  while (SteadyClock::now() < deadline && !p.trained) {
    job = c.GetJob(id);
    const double now = Ms(SteadyClock::now() - requested);
    if (!p.checkpoint) {
      for (const auto& ck : job.checkpoints()) {
        // No periodic checkpoints: the old attempt's only one is its stop checkpoint.
        if (ck.attempt() == old_attempt) p.checkpoint = now;
      }
    }
    if (!p.ended && job.attempt() > old_attempt) p.ended = now;
    if (!p.running && job.attempt() > old_attempt && job.state() == v1::JOB_STATE_RUNNING) p.running = now;
    if (job.attempts_size() > old_attempt && resume_step < 0) {
      const std::string& from = job.attempts(old_attempt).resume_from();
      std::smatch m;
      if (std::regex_search(from, m, std::regex(R"(step-(\d+)$)"))) resume_step = std::stoll(m[1]);
    }
    if (p.running && resume_step >= 0 && job.progress().step() > resume_step) p.trained = now;
    next += std::chrono::milliseconds(flags.poll_ms);
    std::this_thread::sleep_until(next);
  }
  if (job.attempts_size() > old_attempt) {
    p.from = job.attempts(old_attempt - 1).world_size();
    p.to = job.attempts(old_attempt).world_size();
    p.steps_lost = StepsLost(job, old_attempt + 1);
  }
  return p;
}

// From the submit of a high-priority job `high` until it trains, while `low` (at attempt
// `low_attempt`) gives up nodes for it.
Phases MeasurePreempt(TestCluster& c, const std::string& low, int low_attempt, const std::string& high,
                      SteadyClock::time_point requested, const Flags& flags) {
  Phases p;
  const auto deadline = requested + std::chrono::seconds(120);
  auto next = requested;
  v1::Job l, h;
  while (SteadyClock::now() < deadline && !(p.trained && l.attempt() > low_attempt)) {
    l = c.GetJob(low);
    h = c.GetJob(high);
    const double now = Ms(SteadyClock::now() - requested);
    if (!p.checkpoint) {
      for (const auto& ck : l.checkpoints()) {
        if (ck.attempt() == low_attempt) p.checkpoint = now;
      }
    }
    if (!p.ended && h.attempts_size() > 0) p.ended = now;
    if (!p.running && h.state() == v1::JOB_STATE_RUNNING) p.running = now;
    if (!p.trained && h.progress().step() >= 1) p.trained = now;
    next += std::chrono::milliseconds(flags.poll_ms);
    std::this_thread::sleep_until(next);
  }
  if (l.attempts_size() > low_attempt) {
    p.from = l.attempts(low_attempt - 1).world_size();
    p.to = l.attempts(low_attempt).world_size();
    p.steps_lost = StepsLost(l, low_attempt + 1);
  }
  return p;
}

bool SetDrained(TestCluster& c, const std::string& node, bool drained) {
  grpc::ClientContext ctx;
  c.AddToken(&ctx);
  v1::Node out;
  grpc::Status s;
  if (drained) {
    v1::DrainNodeRequest req;
    req.set_name(node);
    req.set_evict(true);
    s = c.nodes().DrainNode(&ctx, req, &out);
  } else {
    v1::UndrainNodeRequest req;
    req.set_name(node);
    s = c.nodes().UndrainNode(&ctx, req, &out);
  }
  if (!s.ok()) std::fprintf(stderr, "resize_bench: %s %s: %s\n", drained ? "drain" : "undrain", node.c_str(),
                            s.error_message().c_str());
  return s.ok();
}

bool OneRun(const Flags& flags, const fs::path& fixture, int index, bool fast_off, Phases* shrink, Phases* grow,
            Phases* preempt) {
  ClusterOptions options;
  options.workers = 3;
  options.heartbeat_interval_s = 1.0;
  options.heartbeat_timeout_s = 3.0;
  if (fast_off) options.controller_args = {"--transition-heartbeat-interval", "1"};
  TestCluster c(options);
  if (flags.keep) c.KeepDirectory();
  c.StartAll();
  if (::testing::Test::HasFailure()) return false;
  v1::Job job;
  grpc::Status s = c.Submit(Spec(fixture, c.checkpoint_root() + "/resize"), &job);
  if (!s.ok()) {
    std::fprintf(stderr, "run %d: submit failed: %s\n", index, s.error_message().c_str());
    return false;
  }
  const std::string id = job.id();
  job = c.WaitForJob(id, [](const v1::Job& j) { return j.progress().step() >= 3 || eft::testing::IsTerminal(j); },
                     std::chrono::seconds(120));
  if (job.state() != v1::JOB_STATE_RUNNING || job.attempts_size() != 1 || job.attempts(0).world_size() != 3) {
    std::fprintf(stderr, "run %d: the job did not train at 3 nodes:\n%s", index, eft::testing::DescribeJob(job).c_str());
    c.KeepDirectory();
    return false;
  }
  auto requested = SteadyClock::now();
  if (!SetDrained(c, "node2", true)) return false;
  *shrink = Measure(c, id, 1, requested, flags);
  if (!shrink->trained) {
    std::fprintf(stderr, "run %d: shrink did not finish:\n%s", index, eft::testing::DescribeJob(c.GetJob(id)).c_str());
    c.KeepDirectory();
    return false;
  }
  requested = SteadyClock::now();
  if (!SetDrained(c, "node2", false)) return false;
  *grow = Measure(c, id, 2, requested, flags);
  if (!grow->trained) {
    std::fprintf(stderr, "run %d: grow did not finish:\n%s", index, eft::testing::DescribeJob(c.GetJob(id)).c_str());
    c.KeepDirectory();
    return false;
  }
  // Preempt: it trains at 3 nodes again; a job of higher priority needs 2 of them.
  job = c.WaitForJob(id, [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RUNNING && j.attempt() == 3; },
                     std::chrono::seconds(60));
  v1::JobSpec urgent = Spec(fixture, c.checkpoint_root() + "/urgent");
  urgent.set_name("urgent");
  urgent.set_priority(5);
  urgent.mutable_resources()->mutable_nodes()->set_min(2);
  urgent.mutable_resources()->mutable_nodes()->set_max(2);
  v1::Job high;
  requested = SteadyClock::now();
  s = c.Submit(urgent, &high);
  if (!s.ok()) {
    std::fprintf(stderr, "run %d: submit of the urgent job failed: %s\n", index, s.error_message().c_str());
    return false;
  }
  *preempt = MeasurePreempt(c, id, 3, high.id(), requested, flags);
  if (!preempt->trained) {
    std::fprintf(stderr, "run %d: preempt did not finish:\n%s%s", index, eft::testing::DescribeJob(c.GetJob(id)).c_str(),
                 eft::testing::DescribeJob(c.GetJob(high.id())).c_str());
    c.KeepDirectory();
    return false;
  }
  if (index == 1) std::printf("  events of run 1:\n%s", eft::testing::DescribeJob(c.GetJob(id)).c_str());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!eft::bench::ParseFlags(argc, argv,
                              {{"--runs", &flags.runs}, {"--poll-ms", &flags.poll_ms}, {"--hidden", &flags.hidden},
                               {"--layers", &flags.layers}, {"--interleave", &flags.interleave}},
                              &flags.keep, "resize_bench",
                              "[--runs N (10)] [--poll-ms MS (10)] [--hidden H (256)] [--layers L (4)] "
                              "[--interleave 0|1] [--keep]")) {
    return 2;
  }
  eft::bench::DefaultBuildDirToThisBinarys();
  const fs::path fixture = fs::temp_directory_path() / ("eft-resize-bench-" + std::to_string(::getpid()));
  if (!MakeFixture(flags, fixture)) return 1;
  std::printf("resize_bench: %d runs, controller + 3 workers, an eft-train job (llama hidden %d, %d layers, fp32) "
              "on 1..3 nodes; each run shrinks it (drain --evict node2) and grows it back (undrain); ms from the "
              "request\n",
              flags.runs, flags.hidden, flags.layers);
  if (flags.interleave) std::printf("interleaved: odd runs with fast heartbeats off (\"off\"), even runs on\n");
  std::printf("%4s %-7s %6s %6s %6s %6s %6s  %s\n", "run", "resize", "ckpt", "ended", "run", "step", "relnch",
              "sizes, steps lost");
  std::vector<double> values[2][3][5];  // [fast heartbeats off][shrink, grow, preempt][metric]
  int failed = 0;
  for (int i = 1; i <= flags.runs; ++i) {
    Phases phases[3];
    const bool off = flags.interleave && i % 2 == 1;
    const bool ok = OneRun(flags, fixture, i, off, &phases[0], &phases[1], &phases[2]);
    for (int k = 0; k < 3; ++k) {
      const Phases& p = phases[k];
      std::optional<double> relaunch;
      if (p.ended && p.trained) relaunch = *p.trained - *p.ended;
      std::printf("%4d %-7s %s %s %s %s %s  %d -> %d, %lld lost%s\n", i, kKinds[k],
                  FormatMs(p.checkpoint, 6).c_str(), FormatMs(p.ended, 6).c_str(), FormatMs(p.running, 6).c_str(), FormatMs(p.trained, 6).c_str(),
                  FormatMs(relaunch, 6).c_str(), p.from, p.to, static_cast<long long>(p.steps_lost),
                  off ? " (off)" : "");
      if (!p.trained || !relaunch) continue;  // a later phase's failure leaves the earlier ones valid
      auto& v = values[off ? 1 : 0][k];
      if (p.checkpoint) v[0].push_back(*p.checkpoint);
      v[1].push_back(*p.ended);
      v[2].push_back(*p.running);
      v[3].push_back(*p.trained);
      v[4].push_back(*relaunch);
      if (p.steps_lost != 0) ++failed;  // a planned resize must lose nothing
    }
    if (!ok) ++failed;
    std::fflush(stdout);
  }
  std::printf("columns: ckpt = request -> stop checkpoint recorded; ended = -> old ranks gone, next attempt placed;\n"
              "run = -> new attempt RUNNING; step = -> its first step at the new size; relnch = ended -> step\n"
              "(preempt: from the submit; ended/run/step are the urgent job's, ckpt and sizes the shrunk job's)\n");
  const char* names[5] = {"checkpoint_ms", "ended_ms", "running_ms", "first_step_ms", "relaunch_ms"};
  for (int off = 0; off < (flags.interleave ? 2 : 1); ++off) {
    for (int k = 0; k < 3; ++k) {
      for (int m = 0; m < 5; ++m) {
        PrintSummary(std::string(off ? "off_" : "") + kKinds[k] + "_" + names[m], values[off][k][m]);
      }
    }
  }
  std::error_code ec;
  fs::remove_all(fixture, ec);
  if (failed) std::printf("FAILED %d (a run that did not finish, or a resize that lost steps)\n", failed);
  return failed ? 1 : 0;
}
