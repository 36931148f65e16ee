// controller_load_bench: how much load one eft-controller takes, over real gRPC on 127.0.0.1.
//
// Phases (each controller is a real eft-controller process with a fresh SQLite database in a temp dir):
//   submit     --submit-threads clients call SubmitJob back to back for --seconds (command /bin/true
//              on 1 node; no worker exists, so every job stays QUEUED). Own controller.
//   register   --workers simulated workers call AgentService.Register (8 slots each).
//   paced      every worker heartbeats once per second, evenly spread, for --seconds (open loop:
//              calls are issued on schedule whether or not earlier ones have returned).
//   saturate   heartbeats with --inflight calls outstanding at all times, for --seconds.
//   active     --jobs 1-node jobs (8 ranks each) are submitted and placed on the workers, which from
//              then on report those ranks running; after 3 s of warm-up (every job RUNNING) the paced
//              phase again: each heartbeat now carries 8 rank reports, each reply 8 assignments;
//              then the saturation phase again (saturate_active).
// Latency is measured per call (issue -> completion) on a steady clock; percentiles use every sample.
// The controller runs with --heartbeat-timeout 3600 so that workers registered first do not expire
// while the rest register; the timeout only decides when, never how much, work a heartbeat costs.
//
// Usage: controller_load_bench [--seconds 10] [--submit-threads 8] [--workers 1000]
//            [--heartbeat-threads 2] [--inflight 64] [--jobs 1000]   (--jobs 0 skips the active phase)
// Prints a report per phase and "RESULT <name> <value>" lines that bench/run_control_plane.sh collects.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "bench/control_plane/controller_process.h"
#include "bench/control_plane/sim_workers.h"
#include "eft/v1/agent.grpc.pb.h"
#include "eft/v1/job.grpc.pb.h"

namespace {

namespace fs = std::filesystem;
namespace v1 = eft::v1;
using namespace std::chrono_literals;
using eft::bench::ClientCpuSeconds;
using eft::bench::ControllerProcess;
using eft::bench::CountJobs;
using eft::bench::HeartbeatLoad;
using eft::bench::MakeSimWorkers;
using eft::bench::Ms;
using eft::bench::OneNodeJob;
using eft::bench::Percentile;
using eft::bench::Phase;
using eft::bench::RegisterRequestFor;
using eft::bench::SimWorker;
using eft::bench::SteadyClock;
using eft::bench::TempDir;

struct Flags {
  int seconds = 10, submit_threads = 8, workers = 1000, heartbeat_threads = 2, inflight = 64, jobs = 1000;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  struct Opt {
    const char* name;
    int* value;
    int min;
  } opts[] = {{"--seconds", &f->seconds, 1},       {"--submit-threads", &f->submit_threads, 1},
              {"--workers", &f->workers, 1},       {"--heartbeat-threads", &f->heartbeat_threads, 1},
              {"--inflight", &f->inflight, 1},     {"--jobs", &f->jobs, 0}};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    bool ok = false;
    for (const Opt& o : opts) {
      if (arg == o.name && i + 1 < argc) {
        *o.value = std::atoi(argv[++i]);
        ok = *o.value >= o.min;
      }
    }
    if (!ok) {
      std::fprintf(stderr, "controller_load_bench: bad or unknown argument '%s' (flags: --seconds --submit-threads "
                           "--workers --heartbeat-threads --inflight --jobs, each followed by a number)\n", arg.c_str());
      return false;
    }
  }
  f->jobs = std::min(f->jobs, f->workers);  // one 8-rank job fills one simulated node
  return true;
}

// ---------------------------------------------------------------------------------------------
// Reporting.

void Report(const std::string& name, Phase p) {
  std::sort(p.latency_ms.begin(), p.latency_ms.end());
  double rate = static_cast<double>(p.latency_ms.size()) / p.seconds;
  std::printf("%-15s %7zu calls in %5.1f s = %8.0f/s  latency ms p50 %6.2f p99 %6.2f max %7.2f  errors %llu  "
              "cpu: controller %3.0f%%, client %3.0f%%\n",
              name.c_str(), p.latency_ms.size(), p.seconds, rate, Percentile(p.latency_ms, 0.5),
              Percentile(p.latency_ms, 0.99), p.latency_ms.empty() ? 0 : p.latency_ms.back(),
              static_cast<unsigned long long>(p.errors), 100 * p.controller_cpu / p.seconds,
              100 * p.client_cpu / p.seconds);
  if (!p.done_s.empty()) {
    // Whether the rate holds up as the job table grows.
    std::vector<int> per_second(static_cast<size_t>(std::ceil(p.seconds)), 0);
    for (double t : p.done_s) per_second[std::min(per_second.size() - 1, static_cast<size_t>(t))]++;
    std::printf("          completed per second:");
    for (int n : per_second) std::printf(" %d", n);
    std::printf("\nRESULT %s_first_second %d\nRESULT %s_last_full_second %d\n", name.c_str(), per_second.front(),
                name.c_str(), per_second.size() > 2 ? per_second[per_second.size() - 2] : per_second.back());
  }
  std::printf("RESULT %s_per_s %.0f\nRESULT %s_p50_ms %.2f\nRESULT %s_p99_ms %.2f\nRESULT %s_max_ms %.2f\n",
              name.c_str(), rate, name.c_str(), Percentile(p.latency_ms, 0.5), name.c_str(),
              Percentile(p.latency_ms, 0.99), name.c_str(), p.latency_ms.empty() ? 0 : p.latency_ms.back());
  std::fflush(stdout);
}

// Runs `body` for a phase and fills in its wall time and CPU use.
template <typename F>
Phase Measure(const ControllerProcess& c, F body) {
  Phase p;
  double cpu0 = c.CpuSeconds(), client0 = ClientCpuSeconds();
  p.start = SteadyClock::now();
  body(p);
  p.seconds = std::chrono::duration<double>(SteadyClock::now() - p.start).count();
  p.controller_cpu = c.CpuSeconds() - cpu0;
  p.client_cpu = ClientCpuSeconds() - client0;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Load.

// `threads` clients submit back to back, each on its own channel (as separate clients would), until
// `seconds` passed or `total` jobs were submitted.
void Submit(const std::string& address, int threads, std::chrono::seconds seconds, int total, int gpus,
            const std::vector<std::string>& command, Phase* p) {
  std::mutex mu;
  std::atomic<int> next{0};
  auto until = SteadyClock::now() + seconds;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      grpc::ChannelArguments args;
      args.SetInt("bench.client", t);  // distinct arguments: a channel (connection) of its own
      auto stub = v1::JobService::NewStub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
      std::vector<double> mine, done;
      uint64_t errors = 0;
      for (int n; SteadyClock::now() < until && (n = next++) < total;) {
        v1::SubmitJobRequest req;
        *req.mutable_spec() = OneNodeJob("load-" + std::to_string(n), gpus, command);
        v1::Job job;
        grpc::ClientContext ctx;
        auto start = SteadyClock::now();
        grpc::Status s = stub->SubmitJob(&ctx, req, &job);
        auto end = SteadyClock::now();
        mine.push_back(Ms(end - start));
        done.push_back(std::chrono::duration<double>(end - p->start).count());
        if (!s.ok() && errors++ == 0) std::fprintf(stderr, "SubmitJob failed: %s\n", s.error_message().c_str());
      }
      std::lock_guard<std::mutex> lock(mu);
      p->latency_ms.insert(p->latency_ms.end(), mine.begin(), mine.end());
      p->done_s.insert(p->done_s.end(), done.begin(), done.end());
      p->errors += errors;
    });
  }
  for (auto& t : pool) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) return 2;
  const std::string root = TempDir("eft-load-bench");
  if (root.empty()) return 1;
  const auto seconds = std::chrono::seconds(f.seconds);
  std::printf("controller_load_bench: %d s per phase, %d submit clients, %d workers x 8 slots, %d heartbeat "
              "client threads, %d in flight when saturating, %d active jobs; data in %s\n",
              f.seconds, f.submit_threads, f.workers, f.heartbeat_threads, f.inflight, f.jobs, root.c_str());

  int rc = 0;
  {
    fs::create_directories(root + "/submit");
    ControllerProcess c(root + "/submit");
    if (!c.WaitUp()) return std::fprintf(stderr, "eft-controller did not come up (see %s)\n", root.c_str()), 1;
    Phase p = Measure(c, [&](Phase& p) {
      Submit(c.address(), f.submit_threads, seconds, INT32_MAX, 1, {"/bin/true"}, &p);
    });
    rc |= p.errors != 0;
    Report("submit", std::move(p));
  }
  {
    fs::create_directories(root + "/heartbeat");
    ControllerProcess c(root + "/heartbeat");
    if (!c.WaitUp()) return std::fprintf(stderr, "eft-controller did not come up (see %s)\n", root.c_str()), 1;
    const std::vector<SimWorker> workers = MakeSimWorkers(f.workers);
    Phase reg = Measure(c, [&](Phase& p) {
      auto stub = v1::AgentService::NewStub(grpc::CreateChannel(c.address(), grpc::InsecureChannelCredentials()));
      for (const auto& w : workers) {
        v1::RegisterRequest req = RegisterRequestFor(w);
        v1::RegisterResponse resp;
        grpc::ClientContext ctx;
        auto start = SteadyClock::now();
        p.errors += !stub->Register(&ctx, req, &resp).ok();
        p.latency_ms.push_back(Ms(SteadyClock::now() - start));
      }
    });
    rc |= reg.errors != 0;
    Report("register", std::move(reg));

    HeartbeatLoad load(c.address(), workers, f.heartbeat_threads);
    Phase paced = Measure(c, [&](Phase& p) { load.Run(true, seconds, 0, &p); });
    rc |= paced.errors != 0;
    Report("paced", std::move(paced));
    Phase sat = Measure(c, [&](Phase& p) { load.Run(false, seconds, f.inflight, &p); });
    rc |= sat.errors != 0;
    Report("saturate", std::move(sat));

    if (f.jobs > 0) {
      // Placed at submit time on the first worker with 8 free slots.
      Phase sub = Measure(c, [&](Phase& p) {
        Submit(c.address(), f.submit_threads, 3600s, f.jobs, 8, {"/bin/sleep", "3600"}, &p);
      });
      rc |= sub.errors != 0;
      Report("submit_placed", std::move(sub));
      // Not measured: the workers hear of their ranks and report them running, and the jobs turn RUNNING.
      Phase warmup;
      load.Run(true, 3s, 0, &warmup, "warm-up");
      int running = CountJobs(c.address(), v1::JOB_STATE_RUNNING);
      std::printf("          %d of %d jobs RUNNING on the simulated workers\n", running, f.jobs);
      rc |= running != f.jobs;
      Phase active = Measure(c, [&](Phase& p) { load.Run(true, seconds, 0, &p); });
      rc |= active.errors != 0;
      Report("active", std::move(active));
      Phase busy = Measure(c, [&](Phase& p) { load.Run(false, seconds, f.inflight, &p); });
      rc |= busy.errors != 0;
      Report("saturate_active", std::move(busy));
    }
  }
  std::error_code ec;
  if (rc == 0) fs::remove_all(root, ec);
  return rc;
}
