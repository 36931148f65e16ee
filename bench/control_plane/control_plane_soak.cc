// control_plane_soak: one eft-controller, with its default heartbeat settings (interval 1 s, timeout
// 3 s), under --workers simulated workers heartbeating once per second for --minutes while jobs come
// and go. The question is whether the control plane stays healthy over time: no false node losses,
// heartbeat latency that does not creep up, and a controller whose memory does not grow.
//
// Workers (sim_workers.h, open loop, evenly spread over the second) register in their first slot
// and report what the controller wants them to run the way eft-worker does (worker/agent.cc): a
// desired rank RUNNING from the next heartbeat on; a rank whose job's lifetime is over EXITED with
// code 0 (all 8 of a job's ranks at once, so the job SUCCEEDS); a rank no longer desired (its job
// was cancelled) STOPPING for one heartbeat, then EXITED by signal 15, as /bin/sleep dies of the
// SIGTERM; an exit, once the controller accepted a report of it, is forgotten when not desired.
// They heartbeat every second even when a reply asks for faster ones (fast heartbeats while a node's
// jobs start or stop); how many replies asked is printed.
//
// A churn client keeps --jobs-running 1-node 8-rank jobs in flight: it submits a new one as each
// ends, and cancels --cancel-percent of them part way. Each job's lifetime (from its ranks' start)
// and whether and when it is cancelled follow from --seed and its id alone.
//
// False node losses, any of which fails the run: a reregister reply (the controller forgot a
// worker), a node that ListNodes (polled every 10 s) shows LOST, a LOST line in the controller's
// log, and a job that ended FAILED or needed a second attempt (the controller thought a rank or a
// node died).
//
// Usage: control_plane_soak [--minutes 60] [--workers 1000] [--jobs-running 300] [--job-seconds 20:120]
//            [--cancel-percent 10] [--seed 1] [--heartbeat-threads 2] [--keep]
// Prints a line per minute, a summary and "RESULT <name> <value>" lines; exits 1 on a false loss or
// any error. --keep keeps the data directory (database, controller log) even then.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "bench/control_plane/controller_process.h"
#include "bench/control_plane/soak_jobs.h"
#include "bench/control_plane/sim_workers.h"
#include "eft/v1/agent.grpc.pb.h"
#include "eft/v1/job.grpc.pb.h"
#include "eft/v1/node.grpc.pb.h"

namespace {

namespace fs = std::filesystem;
namespace v1 = eft::v1;
using namespace std::chrono_literals;
using eft::bench::AssignmentList;
using eft::bench::ClientCpuSeconds;
using eft::bench::ControllerProcess;
using eft::bench::HeartbeatLoad;
using eft::bench::MakeSimWorkers;
using eft::bench::FateOf;
using eft::bench::JobFate;
using eft::bench::JobMix;
using eft::bench::Ms;
using eft::bench::OneNodeJob;
using eft::bench::Percentile;
using eft::bench::Phase;
using eft::bench::RankList;
using eft::bench::SimWorker;
using eft::bench::SoakRanks;
using eft::bench::SteadyClock;
using eft::bench::TempDir;

struct Flags {
  int minutes = 60, workers = 1000, jobs_running = 300;
  JobMix mix;  // --job-seconds, --cancel-percent, --seed
  int heartbeat_threads = 2;
  bool keep = false;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    bool ok = true;
    if (a == "--keep") {
      f->keep = true;
      continue;
    } else if (v == nullptr) {
      ok = false;
    } else if (a == "--minutes") {
      ok = (f->minutes = std::atoi(v)) >= 1;
    } else if (a == "--workers") {
      ok = (f->workers = std::atoi(v)) >= 1;
    } else if (a == "--jobs-running") {
      ok = (f->jobs_running = std::atoi(v)) >= 0;
    } else if (a == "--cancel-percent") {
      f->mix.cancel_percent = std::atoi(v);
      ok = f->mix.cancel_percent >= 0 && f->mix.cancel_percent <= 100;
    } else if (a == "--heartbeat-threads") {
      ok = (f->heartbeat_threads = std::atoi(v)) >= 1;
    } else if (a == "--seed") {
      f->mix.seed = std::strtoull(v, nullptr, 10);
    } else if (a == "--job-seconds") {
      ok = std::sscanf(v, "%d:%d", &f->mix.min_job_s, &f->mix.max_job_s) == 2 && f->mix.min_job_s >= 1 &&
           f->mix.max_job_s >= f->mix.min_job_s;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "control_plane_soak: bad or unknown argument '%s'\nusage: control_plane_soak [--minutes N] "
                           "[--workers N] [--jobs-running N] [--job-seconds MIN:MAX] [--cancel-percent P] [--seed S] "
                           "[--heartbeat-threads N] [--keep]\n", a.c_str());
      return false;
    }
    ++i;
  }
  // One 8-rank job fills a simulated node; keep some nodes free so that placement never waits.
  if (f->jobs_running > f->workers) f->jobs_running = f->workers;
  return true;
}

// ---------------------------------------------------------------------------------------------
// The clients' side: job churn and the node watch.

struct Counters {
  std::atomic<int64_t> submitted{0}, succeeded{0}, cancelled{0}, failed{0}, restarted{0}, stuck{0}, inflight{0};
  std::atomic<int64_t> rpc_errors{0};  // SubmitJob, CancelJob, GetJob, ListNodes
  std::atomic<int64_t> nodes_not_ready_max{0}, node_polls{0};
  std::mutex mu;
  std::set<std::string> nodes_seen_lost;
  std::vector<double> submit_ms;  // this minute's
  double list_nodes_max_ms = 0;
};

void RpcError(Counters* c, const char* what, const grpc::Status& s) {
  if (c->rpc_errors++ < 5) std::fprintf(stderr, "%s failed: %s\n", what, s.error_message().c_str());
}

// Keeps f.jobs_running jobs in flight until *stop.
class Churn {
 public:
  Churn(const Flags& f, const std::string& address, Counters* c)
      : f_(f), c_(c), stub_(v1::JobService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}

  void Run(const std::atomic<bool>* stop) {
    while (!*stop) {
      auto now = SteadyClock::now();
      while (static_cast<int>(inflight_.size()) < f_.jobs_running && !*stop) Submit();
      for (auto it = inflight_.begin(); it != inflight_.end();) {
        Job& j = it->second;
        bool done = false;
        if (j.fate.cancel && !j.cancel_sent && now >= j.submitted + j.fate.cancel_after) {
          done = Cancel(it->first, &j);
        } else if (now >= j.next_check) {
          done = Check(it->first, &j, now);
        }
        it = done ? inflight_.erase(it) : std::next(it);
      }
      c_->inflight = static_cast<int64_t>(inflight_.size());
      std::this_thread::sleep_for(50ms);
    }
  }

 private:
  struct Job {
    SteadyClock::time_point submitted, next_check;
    JobFate fate;
    bool cancel_sent = false, stuck = false, restarted = false;
  };

  void Submit() {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = OneNodeJob("soak-" + std::to_string(n_++), 8, {"/bin/sleep", "3600"});
    v1::Job job;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    auto start = SteadyClock::now();
    grpc::Status s = stub_->SubmitJob(&ctx, req, &job);
    double ms = Ms(SteadyClock::now() - start);
    if (!s.ok()) {
      RpcError(c_, "SubmitJob", s);
      std::this_thread::sleep_for(100ms);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(c_->mu);
      c_->submit_ms.push_back(ms);
    }
    ++c_->submitted;
    Job j;
    j.submitted = start;
    j.fate = FateOf(f_.mix, job.id());
    // Its ranks start with their worker's next heartbeat (< 1 s) and their exits reach the
    // controller with the heartbeat after the lifetime (< 1 s): look then, and every second after.
    j.next_check = start + j.fate.lifetime + 2s;
    inflight_.emplace(job.id(), j);
  }

  bool Cancel(const std::string& id, Job* j) {
    v1::CancelJobRequest req;
    req.set_id(id);
    v1::Job job;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    grpc::Status s = stub_->CancelJob(&ctx, req, &job);
    j->cancel_sent = true;
    if (!s.ok()) {
      // Already ended (it should not have): Check() says how.
      RpcError(c_, ("CancelJob " + id).c_str(), s);
      return false;
    }
    return Ended(job, j);
  }

  bool Check(const std::string& id, Job* j, SteadyClock::time_point now) {
    v1::GetJobRequest req;
    req.set_id(id);
    v1::Job job;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    grpc::Status s = stub_->GetJob(&ctx, req, &job);
    j->next_check = now + 1s;
    if (!s.ok()) {
      RpcError(c_, ("GetJob " + id).c_str(), s);
      return false;
    }
    if (Ended(job, j)) return true;
    if (!j->stuck && now > j->submitted + j->fate.lifetime + 30s) {
      j->stuck = true;
      ++c_->stuck;
      std::fprintf(stderr, "job %s still %s 30 s after its lifetime: %s\n", id.c_str(),
                   v1::JobState_Name(job.state()).c_str(), job.reason().c_str());
    }
    return false;
  }

  // Counts a job that reached a terminal state; false while it runs. A second attempt is counted
  // once per job, whenever it is seen.
  bool Ended(const v1::Job& job, Job* j) {
    if ((job.attempt() > 1 || job.restarts() > 0) && !j->restarted) {
      j->restarted = true;
      if (c_->restarted++ < 5) {
        std::fprintf(stderr, "job %s needed attempt %d (restarts %d): %s\n", job.id().c_str(), job.attempt(),
                     job.restarts(), job.reason().c_str());
      }
    }
    switch (job.state()) {
      case v1::JOB_STATE_SUCCEEDED:
        ++c_->succeeded;
        return true;
      case v1::JOB_STATE_CANCELLED:
        ++c_->cancelled;
        return true;
      case v1::JOB_STATE_FAILED:
        if (c_->failed++ < 5) std::fprintf(stderr, "job %s FAILED: %s\n", job.id().c_str(), job.reason().c_str());
        return true;
      default:
        return false;
    }
  }

  const Flags& f_;
  Counters* c_;
  std::unique_ptr<v1::JobService::Stub> stub_;
  std::map<std::string, Job> inflight_;
  int n_ = 0;
};

// Every ~10 s: which nodes are not READY, and the controller's memory.
void WatchNodes(const std::string& address, const ControllerProcess& ctl, const std::atomic<bool>* stop,
                Counters* c, std::atomic<long>* rss_max_kb) {
  auto stub = v1::NodeService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  auto next = SteadyClock::now() + 5s;
  while (!*stop) {
    std::this_thread::sleep_for(50ms);
    if (SteadyClock::now() < next) continue;
    next += 10s;
    long rss = ctl.StatusKb("VmRSS");
    if (rss > *rss_max_kb) *rss_max_kb = rss;
    v1::ListNodesRequest req;
    v1::ListNodesResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    auto start = SteadyClock::now();
    grpc::Status s = stub->ListNodes(&ctx, req, &resp);
    double ms = Ms(SteadyClock::now() - start);
    if (!s.ok()) {
      RpcError(c, "ListNodes", s);
      continue;
    }
    ++c->node_polls;
    int64_t not_ready = 0;
    std::lock_guard<std::mutex> lock(c->mu);
    c->list_nodes_max_ms = std::max(c->list_nodes_max_ms, ms);
    for (const auto& n : resp.nodes()) {
      if (n.state() == v1::NODE_STATE_READY) continue;
      ++not_ready;
      if (n.state() == v1::NODE_STATE_LOST && c->nodes_seen_lost.insert(n.name()).second &&
          c->nodes_seen_lost.size() <= 5) {
        std::fprintf(stderr, "node %s seen LOST: %s\n", n.name().c_str(), n.state_reason().c_str());
      }
    }
    if (not_ready > c->nodes_not_ready_max) c->nodes_not_ready_max = not_ready;
  }
}

// ---------------------------------------------------------------------------------------------
// Reporting.

double FileMb(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<double>(st.st_size) / (1 << 20) : 0;
}

int CountLines(const std::string& path, const std::string& needle) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

struct Minute {
  int minute;
  double rss_mb, db_mb;
  int64_t finished;
};

// Least-squares slope of RSS over finished jobs, in kB per 1,000 jobs, and its r^2.
std::pair<double, double> GrowthPer1000Jobs(const std::vector<Minute>& m) {
  double n = static_cast<double>(m.size()), sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
  for (const Minute& x : m) {
    double jobs = static_cast<double>(x.finished) / 1000, kb = x.rss_mb * 1024;
    sx += jobs, sy += kb, sxx += jobs * jobs, sxy += jobs * kb, syy += kb * kb;
  }
  double vx = n * sxx - sx * sx, vy = n * syy - sy * sy;
  if (n < 3 || vx <= 0) return {0, 0};
  double slope = (n * sxy - sx * sy) / vx;
  double r2 = vy > 0 ? (n * sxy - sx * sy) * (n * sxy - sx * sy) / (vx * vy) : 0;
  return {slope, r2};
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) return 2;
  const std::string root = TempDir("eft-cp-soak");
  if (root.empty()) return 1;
  std::printf("control_plane_soak: %d min, %d workers x 8 slots heartbeating at 1 Hz (%d client threads), %d 1-node "
              "8-rank jobs in flight living %d-%d s, %d%% cancelled, seed %llu; controller with default heartbeat "
              "settings; data in %s\n",
              f.minutes, f.workers, f.heartbeat_threads, f.jobs_running, f.mix.min_job_s, f.mix.max_job_s, f.mix.cancel_percent,
              static_cast<unsigned long long>(f.mix.seed), root.c_str());
  std::fflush(stdout);

  ControllerProcess ctl(root, {});  // the defaults: heartbeat interval 1 s, timeout 3 s
  if (!ctl.WaitUp()) return std::fprintf(stderr, "eft-controller did not come up (see %s)\n", root.c_str()), 1;
  const std::string wal = ctl.db_path() + "-wal";
  const long rss_idle_kb = ctl.StatusKb("VmRSS");
  const double cpu0 = ctl.CpuSeconds(), client0 = ClientCpuSeconds();
  std::printf("controller pid %d up, RSS %.1f MB before any worker\n", ctl.pid(), rss_idle_kb / 1024.0);

  const std::vector<SimWorker> workers = MakeSimWorkers(f.workers);
  SoakRanks ranks(f.mix, workers.size());
  HeartbeatLoad load(ctl.address(), workers, f.heartbeat_threads, &ranks, /*registered=*/false);
  Counters c;
  std::atomic<long> rss_max_kb{rss_idle_kb};
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    std::this_thread::sleep_for(2s);  // the workers register in the first second
    Churn(f, ctl.address(), &c).Run(&stop);
  });
  std::thread watch([&] { WatchNodes(ctl.address(), ctl, &stop, &c, &rss_max_kb); });

  std::printf("%4s %7s %6s %6s %7s %5s %5s %5s %6s | %6s %6s %5s %4s %4s %4s %8s | %7s %7s %5s %5s %7s\n", "min", "hb",
              "p50ms", "p99ms", "maxms", "err", "rereg", "fast%", "lagms", "subm", "succ", "canc", "fail", "rest",
              "infl", "sub_p99", "rss_MB", "db_MB", "ctl%", "cli%", "lost");
  std::vector<double> all;
  all.reserve(static_cast<size_t>(f.workers) * 60 * f.minutes);
  uint64_t hb_errors = 0, reregisters = 0, registrations = 0, fast = 0;
  std::vector<double> register_ms;
  std::vector<Minute> minutes;
  double rss_minute1_mb = 0;
  bool client_behind = false;
  for (int m = 1; m <= f.minutes; ++m) {
    const double cpu_m = ctl.CpuSeconds(), client_m = ClientCpuSeconds();
    Phase p;
    load.Run(true, 60s, 0, &p, nullptr);
    std::sort(p.latency_ms.begin(), p.latency_ms.end());
    all.insert(all.end(), p.latency_ms.begin(), p.latency_ms.end());
    hb_errors += p.errors - p.reregisters;
    reregisters += p.reregisters;
    registrations += p.register_ms.size();
    fast += p.fast_replies;
    // A worker's first slot is its registration.
    client_behind |= p.latency_ms.size() + p.register_ms.size() < 0.99 * 60 * f.workers;
    register_ms.insert(register_ms.end(), p.register_ms.begin(), p.register_ms.end());
    std::vector<double> sub;
    size_t lost_now;
    {
      std::lock_guard<std::mutex> lock(c.mu);
      sub.swap(c.submit_ms);
      lost_now = c.nodes_seen_lost.size();
    }
    std::sort(sub.begin(), sub.end());
    const double rss_mb = ctl.StatusKb("VmRSS") / 1024.0, db_mb = FileMb(ctl.db_path()) + FileMb(wal);
    if (m == 1) rss_minute1_mb = rss_mb;
    const int64_t finished = c.succeeded + c.cancelled + c.failed;
    minutes.push_back({m, rss_mb, db_mb, finished});
    std::printf("%4d %7zu %6.2f %6.2f %7.2f %5llu %5llu %5.1f %6.2f | %6lld %6lld %5lld %4lld %4lld %4lld %8.2f | %7.1f "
                "%7.1f %5.1f %5.1f %7zu\n",  // lost: nodes seen LOST so far
                m, p.latency_ms.size(), Percentile(p.latency_ms, 0.5), Percentile(p.latency_ms, 0.99),
                p.latency_ms.empty() ? 0 : p.latency_ms.back(),
                static_cast<unsigned long long>(p.errors - p.reregisters),
                static_cast<unsigned long long>(p.reregisters),
                p.latency_ms.empty() ? 0 : 100.0 * p.fast_replies / p.latency_ms.size(), p.send_lag_max_ms,
                static_cast<long long>(c.submitted.load()), static_cast<long long>(c.succeeded.load()),
                static_cast<long long>(c.cancelled.load()), static_cast<long long>(c.failed.load()),
                static_cast<long long>(c.restarted.load()), static_cast<long long>(c.inflight.load()),
                Percentile(sub, 0.99), rss_mb, db_mb, 100 * (ctl.CpuSeconds() - cpu_m) / 60,
                100 * (ClientCpuSeconds() - client_m) / 60, lost_now);
    std::fflush(stdout);
  }
  stop = true;
  churn.join();
  watch.join();
  const double controller_cpu = ctl.CpuSeconds() - cpu0, client_cpu = ClientCpuSeconds() - client0;
  const double rss_end_mb = ctl.StatusKb("VmRSS") / 1024.0, rss_hwm_mb = ctl.StatusKb("VmHWM") / 1024.0;
  const double rss_max_mb = std::max<double>(rss_max_kb.load() / 1024.0, rss_end_mb);
  const double db_end_mb = FileMb(ctl.db_path()) + FileMb(wal);

  // The controller's own account, over every job it holds.
  std::map<v1::JobState, int> by_state;
  int second_attempts = 0;
  {
    auto stub = v1::JobService::NewStub(grpc::CreateChannel(ctl.address(), grpc::InsecureChannelCredentials()));
    v1::ListJobsRequest req;
    req.set_page_size(1000);
    do {
      v1::ListJobsResponse resp;
      grpc::ClientContext ctx;
      grpc::Status s = stub->ListJobs(&ctx, req, &resp);
      if (!s.ok()) {
        RpcError(&c, "ListJobs", s);
        break;
      }
      for (const auto& j : resp.jobs()) {
        ++by_state[j.state()];
        second_attempts += j.attempt() > 1;
      }
      req.set_page_token(resp.next_page_token());
    } while (!req.page_token().empty());
  }
  const int log_lost = CountLines(root + "/controller.log", " LOST: ");
  const int log_lines = CountLines(root + "/controller.log", "");

  std::sort(all.begin(), all.end());
  std::sort(register_ms.begin(), register_ms.end());
  const double p50 = Percentile(all, 0.5), p99 = Percentile(all, 0.99), mx = all.empty() ? 0 : all.back();
  const int64_t finished = c.succeeded + c.cancelled + c.failed;
  // A job that restarted is seen twice (when it ended, and in ListJobs): counted once.
  const int64_t false_losses = static_cast<int64_t>(reregisters) + static_cast<int64_t>(c.nodes_seen_lost.size()) +
                               std::max<int64_t>(c.restarted, second_attempts);
  const int64_t errors = static_cast<int64_t>(hb_errors) + c.rpc_errors + c.failed + c.stuck;
  // Growth after the first two minutes (registration and the first jobs are one-off).
  std::vector<Minute> steady(minutes.begin() + std::min<size_t>(2, minutes.size()), minutes.end());
  auto [growth_kb, r2] = GrowthPer1000Jobs(steady);

  std::printf("\nsummary after %d min (%.0f s of controller CPU = %.1f%% of a core; clients %.1f%%):\n", f.minutes,
              controller_cpu, 100 * controller_cpu / (60.0 * f.minutes), 100 * client_cpu / (60.0 * f.minutes));
  std::printf("  heartbeats %zu (%.0f/s), latency ms p50 %.2f p99 %.2f max %.2f; failed calls %llu; replies asking "
              "for fast heartbeats %.1f%%%s\n",
              all.size(), all.size() / (60.0 * f.minutes), p50, p99, mx, static_cast<unsigned long long>(hb_errors),
              all.empty() ? 0 : 100.0 * fast / all.size(),
              client_behind ? "  (CLIENT COULD NOT KEEP UP in some minute)" : "");
  std::printf("  registrations %llu (%d workers), latency ms p50 %.2f p99 %.2f max %.2f\n",
              static_cast<unsigned long long>(registrations), f.workers, Percentile(register_ms, 0.5),
              Percentile(register_ms, 0.99), register_ms.empty() ? 0 : register_ms.back());
  std::printf("  false node losses %lld: reregister replies %llu, nodes seen LOST %zu (of %lld polls; most not READY at "
              "once %lld), jobs restarted %lld (second attempts in ListJobs %d)\n",
              static_cast<long long>(false_losses), static_cast<unsigned long long>(reregisters),
              c.nodes_seen_lost.size(), static_cast<long long>(c.node_polls.load()),
              static_cast<long long>(c.nodes_not_ready_max.load()), static_cast<long long>(c.restarted.load()),
              second_attempts);
  std::printf("  controller log (warnings and errors only): %d lines, %d of them a node LOST\n", log_lines, log_lost);
  std::printf("  jobs: submitted %lld, ended %lld: SUCCEEDED %lld, CANCELLED %lld, FAILED %lld; stuck %lld; in flight at "
              "the end %lld; client RPC errors %lld\n",
              static_cast<long long>(c.submitted.load()), static_cast<long long>(finished),
              static_cast<long long>(c.succeeded.load()), static_cast<long long>(c.cancelled.load()),
              static_cast<long long>(c.failed.load()), static_cast<long long>(c.stuck.load()),
              static_cast<long long>(c.inflight.load()), static_cast<long long>(c.rpc_errors.load()));
  std::printf("  controller's ListJobs:");
  for (const auto& [state, n] : by_state) std::printf(" %s %d", v1::JobState_Name(state).c_str() + 10, n);
  std::printf("\n  workers: ranks started %lld, exited 0 %lld, stopped (cancel) %lld, exited by SIGTERM %lld\n",
              static_cast<long long>(ranks.started()), static_cast<long long>(ranks.exited_ok()),
              static_cast<long long>(ranks.stops()), static_cast<long long>(ranks.exited_stopped()));
  std::printf("  controller RSS MB: idle %.1f, minute 1 %.1f, end %.1f, max %.1f (VmHWM %.1f); growth %.0f kB per 1,000 "
              "finished jobs (r^2 %.2f, minutes 3-%d); database + WAL %.1f MB; ListNodes max %.1f ms\n",
              rss_idle_kb / 1024.0, rss_minute1_mb, rss_end_mb, rss_max_mb, rss_hwm_mb, growth_kb, r2, f.minutes,
              db_end_mb, c.list_nodes_max_ms);
  std::printf("RESULT soak_minutes %d\nRESULT soak_heartbeats %zu\nRESULT soak_hb_p50_ms %.2f\nRESULT soak_hb_p99_ms %.2f\n"
              "RESULT soak_hb_max_ms %.2f\nRESULT soak_false_node_losses %lld\nRESULT soak_errors %lld\n"
              "RESULT soak_jobs_succeeded %lld\nRESULT soak_jobs_cancelled %lld\nRESULT soak_jobs_failed %lld\n"
              "RESULT soak_rss_minute1_mb %.1f\nRESULT soak_rss_end_mb %.1f\nRESULT soak_rss_max_mb %.1f\n"
              "RESULT soak_rss_kb_per_1000_jobs %.0f\nRESULT soak_db_mb %.1f\nRESULT soak_controller_cpu_s %.0f\n",
              f.minutes, all.size(), p50, p99, mx, static_cast<long long>(false_losses), static_cast<long long>(errors),
              static_cast<long long>(c.succeeded.load()), static_cast<long long>(c.cancelled.load()),
              static_cast<long long>(c.failed.load()), rss_minute1_mb, rss_end_mb, rss_max_mb, growth_kb, db_end_mb,
              controller_cpu);
  const int rc = false_losses > 0 || log_lost > 0 || errors > 0 ? 1 : 0;
  std::printf("%s\n", rc == 0 ? "PASS: no false node loss, no error" : "FAIL: see above");
  std::fflush(stdout);
  std::error_code ec;
  if (rc == 0 && !f.keep) fs::remove_all(root, ec);
  return rc;
}
