// Simulated workers for the control-plane benchmarks (controller_load_bench, control_plane_soak):
// they speak AgentService over real gRPC to a real eft-controller, but run no ranks.
//
// HeartbeatLoad issues every heartbeat on the async (callback) API and on schedule (open loop), so
// a slow reply never delays the calls due after it and a stalled controller shows as latency, not
// as fewer calls. What each heartbeat reports and what a worker does with the reply is a
// RankReports: RunDesiredRanks (the default) reports every desired rank RUNNING from the next
// heartbeat on; a soak can end ranks the way a real worker would (worker/agent.cc).
//
// A reregister reply means the controller lost track of the worker: counted as an error (and in
// `reregisters`), never as a latency sample. A load that registers its workers itself (see the
// constructor) registers a worker in its first slot and again after a reregister, as a real worker
// does; latencies of those Register calls are kept apart from the heartbeats'.
//
// Thread-safety: Run() from one thread at a time. RankReports methods are called under the load's
// lock, from gRPC's callback threads and the sender threads.
#pragma once

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "bench/control_plane/bench_util.h"
#include "eft/v1/agent.grpc.pb.h"
#include "eft/v1/job.grpc.pb.h"

namespace eft::bench {

using SteadyClock = std::chrono::steady_clock;

// One measured stretch of calls. `errors` counts failed calls and reregister replies alike.
struct Phase {
  SteadyClock::time_point start;
  std::vector<double> latency_ms;
  std::vector<double> done_s;  // completion times, from `start` (kept by the submit phases only)
  uint64_t errors = 0;
  double seconds = 0, controller_cpu = 0, client_cpu = 0;
  // Filled by HeartbeatLoad::Run.
  uint64_t reregisters = 0;
  uint64_t fast_replies = 0;       // replies asking for a heartbeat interval under 1 s
  std::vector<double> register_ms;  // Register calls the load made itself
  double send_lag_p99_ms = 0, send_lag_max_ms = 0;  // paced: how late calls left against schedule
};

inline double ClientCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// The q-quantile of `sorted` by the nearest-rank rule (no interpolation: a real sample).
inline double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(i, 1, sorted.size()) - 1];
}

inline std::string TempDir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  return ::mkdtemp(tmpl.data()) ? tmpl : "";
}

// A 1-node job of `gpus` ranks. Placed at submit time on the first worker with that many free slots.
inline v1::JobSpec OneNodeJob(const std::string& name, int gpus, const std::vector<std::string>& command) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.mutable_resources()->mutable_nodes()->set_min(1);
  spec.mutable_resources()->mutable_nodes()->set_max(1);
  spec.mutable_resources()->set_gpus_per_node(gpus);
  for (const auto& a : command) spec.add_command(a);
  return spec;
}

// How many jobs are in `state` (ListJobs walks every job the controller holds); -1 on error.
inline int CountJobs(const std::string& address, v1::JobState state) {
  auto stub = v1::JobService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  v1::ListJobsRequest req;
  req.add_states(state);
  req.set_page_size(1000);
  int n = 0;
  do {
    v1::ListJobsResponse resp;
    grpc::ClientContext ctx;
    if (!stub->ListJobs(&ctx, req, &resp).ok()) return -1;
    n += resp.jobs_size();
    req.set_page_token(resp.next_page_token());
  } while (!req.page_token().empty());
  return n;
}

struct SimWorker {
  std::string name, incarnation;
};

// "sim-<i>" with an incarnation of this process: 8 slots each when registered.
inline std::vector<SimWorker> MakeSimWorkers(int n) {
  std::vector<SimWorker> workers;
  for (int i = 0; i < n; ++i) {
    workers.push_back({"sim-" + std::to_string(i), "inc-" + std::to_string(i) + "-" + std::to_string(::getpid())});
  }
  return workers;
}

inline v1::RegisterRequest RegisterRequestFor(const SimWorker& w) {
  v1::RegisterRequest req;
  req.set_node_name(w.name);
  req.set_address("127.0.0.1");
  req.set_slots(8);
  req.set_version("bench");
  req.set_incarnation(w.incarnation);
  return req;
}

using RankList = google::protobuf::RepeatedPtrField<v1::RankStatus>;
using AssignmentList = google::protobuf::RepeatedPtrField<v1::RankAssignment>;

// What a simulated worker reports, and how it follows the controller's desired state.
class RankReports {
 public:
  virtual ~RankReports() = default;
  // The ranks the next Register or Heartbeat of `worker` lists.
  virtual void Fill(size_t worker, RankList* out) = 0;
  // The controller accepted `sent` and wants `desired` to run there.
  virtual void OnReply(size_t worker, const RankList& sent, const AssignmentList& desired) = 0;
};

// Like a real worker, reports every desired rank as running from the next heartbeat on; never ends one.
class RunDesiredRanks : public RankReports {
 public:
  explicit RunDesiredRanks(size_t workers) : running_(workers) {}
  void Fill(size_t worker, RankList* out) override {
    for (const auto& r : running_[worker]) *out->Add() = r;
  }
  void OnReply(size_t worker, const RankList&, const AssignmentList& desired) override {
    auto& mine = running_[worker];
    mine.clear();
    for (const auto& a : desired) {
      v1::RankStatus r;
      *r.mutable_key() = a.key();
      r.set_state(v1::RANK_STATE_RUNNING);
      r.set_pid(100000 + a.key().rank());
      r.set_slot(a.slot());
      mine.push_back(std::move(r));
    }
  }

 private:
  std::vector<std::vector<v1::RankStatus>> running_;  // by worker: what its next heartbeat reports
};

// Heartbeats from the simulated workers. paced: each worker once per second, the W workers evenly
// spread over the second; otherwise as fast as `inflight` outstanding calls allow.
class HeartbeatLoad {
 public:
  // `reports`: null for RunDesiredRanks; must outlive the load. `registered`: the workers are
  // registered already; otherwise the load registers each in its first slot (and after a reregister).
  HeartbeatLoad(const std::string& address, const std::vector<SimWorker>& workers, int threads,
                RankReports* reports = nullptr, bool registered = true)
      : workers_(workers), registered_(workers.size(), registered ? 1 : 0), manage_registration_(!registered) {
    if (reports == nullptr) {
      own_reports_ = std::make_unique<RunDesiredRanks>(workers.size());
      reports = own_reports_.get();
    }
    reports_ = reports;
    for (int t = 0; t < threads; ++t) {
      grpc::ChannelArguments args;
      args.SetInt("bench.client", t);  // distinct arguments: a channel (connection) of its own
      stubs_.push_back(v1::AgentService::NewStub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
    }
  }

  // `label`: the name the paced summary line is printed under; null prints nothing.
  void Run(bool paced, std::chrono::seconds seconds, int inflight, Phase* p, const char* label = "paced") {
    using namespace std::chrono_literals;
    const int threads = static_cast<int>(stubs_.size());
    const auto period = std::chrono::duration_cast<SteadyClock::duration>(1s) / workers_.size();
    const uint64_t total = paced ? workers_.size() * seconds.count() : UINT64_MAX;
    const auto start = SteadyClock::now(), until = start + seconds;
    std::counting_semaphore<> slots(paced ? 1 << 20 : inflight);
    std::atomic<uint64_t> pending{0};
    std::vector<double> lag_ms;
    std::mutex lag_mu;
    std::vector<std::thread> senders;
    for (int t = 0; t < threads; ++t) {
      senders.emplace_back([&, t] {
        std::vector<double> lags;
        for (uint64_t k = t; k < total; k += threads) {
          auto due = start + period * k;
          if (paced) {
            std::this_thread::sleep_until(due);
            lags.push_back(Ms(SteadyClock::now() - due));
          }
          if (SteadyClock::now() >= until) break;
          slots.acquire();
          ++pending;
          Issue(*stubs_[t], k % workers_.size(), &slots, &pending);
        }
        std::lock_guard<std::mutex> lock(lag_mu);
        lag_ms.insert(lag_ms.end(), lags.begin(), lags.end());
      });
    }
    for (auto& t : senders) t.join();
    while (pending > 0) std::this_thread::sleep_for(1ms);
    std::lock_guard<std::mutex> lock(mu_);
    p->latency_ms.insert(p->latency_ms.end(), samples_.begin(), samples_.end());
    p->register_ms.insert(p->register_ms.end(), register_ms_.begin(), register_ms_.end());
    p->errors += errors_;
    p->reregisters += reregisters_;
    p->fast_replies += fast_replies_;
    samples_.clear();
    register_ms_.clear();
    errors_ = reregisters_ = fast_replies_ = 0;
    if (paced) {
      std::sort(lag_ms.begin(), lag_ms.end());
      p->send_lag_p99_ms = Percentile(lag_ms, 0.99);
      p->send_lag_max_ms = lag_ms.empty() ? 0 : lag_ms.back();
      double achieved = static_cast<double>(p->latency_ms.size()) / static_cast<double>(seconds.count());
      double target = static_cast<double>(workers_.size());
      if (label != nullptr) {
        std::printf("          %s: target %.0f/s, completed %.0f/s; send lag behind schedule p99 %.2f ms max %.2f ms%s\n",
                    label, target, achieved, p->send_lag_p99_ms, p->send_lag_max_ms,
                    achieved < 0.99 * target ? "  (CLIENT COULD NOT KEEP UP)" : "");
      }
    }
  }

 private:
  template <typename Request, typename Response>
  struct Call {
    grpc::ClientContext ctx;
    Request req;
    Response resp;
    SteadyClock::time_point start;
  };

  void Issue(v1::AgentService::Stub& stub, size_t worker, std::counting_semaphore<>* slots,
             std::atomic<uint64_t>* pending) {
    using namespace std::chrono_literals;
    bool registered;
    {
      std::lock_guard<std::mutex> lock(mu_);
      registered = registered_[worker] != 0;
    }
    if (!registered) return IssueRegister(stub, worker, slots, pending);
    auto* call = new Call<v1::HeartbeatRequest, v1::HeartbeatResponse>;
    call->req.set_node_name(workers_[worker].name);
    call->req.set_incarnation(workers_[worker].incarnation);
    {
      std::lock_guard<std::mutex> lock(mu_);
      reports_->Fill(worker, call->req.mutable_ranks());
    }
    call->ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    call->start = SteadyClock::now();
    stub.async()->Heartbeat(&call->ctx, &call->req, &call->resp, [=, this](grpc::Status s) {
      double ms = Ms(SteadyClock::now() - call->start);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (s.ok() && !call->resp.reregister()) {
          reports_->OnReply(worker, call->req.ranks(), call->resp.desired());
          samples_.push_back(ms);
          if (call->resp.heartbeat_interval_ms() > 0 && call->resp.heartbeat_interval_ms() < 1000) ++fast_replies_;
        } else {
          if (errors_++ == 0) {
            std::fprintf(stderr, "Heartbeat of %s failed: %s\n", workers_[worker].name.c_str(),
                         s.ok() ? "reregister" : s.error_message().c_str());
          }
          if (s.ok()) {
            ++reregisters_;
            if (manage_registration_) registered_[worker] = 0;
          }
        }
      }
      delete call;
      slots->release();
      --*pending;
    });
  }

  void IssueRegister(v1::AgentService::Stub& stub, size_t worker, std::counting_semaphore<>* slots,
                     std::atomic<uint64_t>* pending) {
    using namespace std::chrono_literals;
    auto* call = new Call<v1::RegisterRequest, v1::RegisterResponse>;
    call->req = RegisterRequestFor(workers_[worker]);
    {
      std::lock_guard<std::mutex> lock(mu_);
      reports_->Fill(worker, call->req.mutable_ranks());
    }
    call->ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    call->start = SteadyClock::now();
    stub.async()->Register(&call->ctx, &call->req, &call->resp, [=, this](grpc::Status s) {
      double ms = Ms(SteadyClock::now() - call->start);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (s.ok()) {
          registered_[worker] = 1;
          reports_->OnReply(worker, call->req.ranks(), call->resp.desired());
          register_ms_.push_back(ms);
        } else if (errors_++ == 0) {
          std::fprintf(stderr, "Register of %s failed: %s\n", workers_[worker].name.c_str(), s.error_message().c_str());
        }
      }
      delete call;
      slots->release();
      --*pending;
    });
  }

  const std::vector<SimWorker>& workers_;
  std::vector<std::unique_ptr<v1::AgentService::Stub>> stubs_;
  std::unique_ptr<RankReports> own_reports_;
  RankReports* reports_;
  std::mutex mu_;
  std::vector<char> registered_;  // by worker
  const bool manage_registration_;
  std::vector<double> samples_, register_ms_;
  uint64_t errors_ = 0, reregisters_ = 0, fast_replies_ = 0;
};

}  // namespace eft::bench
