// The jobs of control_plane_soak and the simulated workers' side of them: what happens to each job
// (its lifetime, whether and when it is cancelled) follows from the seed and its id alone, so the
// workers and the churn client agree without talking and a run can be repeated; SoakRanks reports
// each worker's ranks the way eft-worker would (worker/agent.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "bench/control_plane/sim_workers.h"

namespace eft::bench {

// The soak's job mix (--job-seconds MIN:MAX, --cancel-percent, --seed).
struct JobMix {
  int min_job_s = 20, max_job_s = 120, cancel_percent = 10;
  uint64_t seed = 1;
};

// ---------------------------------------------------------------------------------------------
// What happens to a job, decided by the seed and its id alone, so the workers and the churn client
// agree without talking and a run can be repeated.

struct JobFate {
  std::chrono::milliseconds lifetime{0};  // from its ranks' start to their exit 0
  bool cancel = false;
  std::chrono::milliseconds cancel_after{0};  // from the submit; before the lifetime ends
};

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline JobFate FateOf(const JobMix& f, const std::string& job_id) {
  std::mt19937_64 rng(SplitMix64(f.seed ^ SplitMix64(std::strtoull(job_id.c_str(), nullptr, 10))));
  JobFate fate;
  fate.lifetime = std::chrono::milliseconds(
      std::uniform_int_distribution<int64_t>(f.min_job_s * 1000LL, f.max_job_s * 1000LL)(rng));
  fate.cancel = std::uniform_int_distribution<int>(0, 99)(rng) < f.cancel_percent;
  fate.cancel_after = std::chrono::milliseconds(
      static_cast<int64_t>(std::uniform_real_distribution<double>(0.1, 0.9)(rng) * fate.lifetime.count()));
  return fate;
}

// ---------------------------------------------------------------------------------------------
// The workers' side: what each reports (RankReports; called under the load's lock).

class SoakRanks : public eft::bench::RankReports {
 public:
  SoakRanks(const JobMix& mix, size_t workers) : mix_(mix), workers_(workers) {}

  void Fill(size_t worker, RankList* out) override {
    const auto now = SteadyClock::now();
    const int64_t wall = WallMs();
    WorkerState& w = workers_[worker];
    for (auto& [key, r] : w.ranks) {
      auto end = w.ends.find(std::get<0>(key));
      if (r.st.state() == v1::RANK_STATE_RUNNING && end != w.ends.end() && now >= end->second) {
        Exit(&r, 0, 0, wall);  // its work is done
        ++exited_ok_;
      } else if (r.st.state() == v1::RANK_STATE_STOPPING && r.state_sent) {
        Exit(&r, 0, 15, wall);  // SIGTERM, reported STOPPING once: gone by now
        ++exited_stopped_;
      }
      *out->Add() = r.st;
    }
  }

  void OnReply(size_t worker, const RankList& sent, const AssignmentList& desired) override {
    WorkerState& w = workers_[worker];
    for (const auto& s : sent) {
      auto it = w.ranks.find(KeyOf(s.key()));
      if (it != w.ranks.end() && it->second.st.state() == s.state()) it->second.state_sent = true;
    }
    std::set<Key> want;
    for (const auto& a : desired) want.insert(KeyOf(a.key()));
    for (auto it = w.ranks.begin(); it != w.ranks.end();) {
      SimRank& r = it->second;
      if (want.count(it->first)) {
        ++it;
        continue;
      }
      if (r.st.state() == v1::RANK_STATE_RUNNING) {
        r.st.set_state(v1::RANK_STATE_STOPPING);  // the worker sends SIGTERM
        r.state_sent = false;
        --running_;
        ++stops_;
      }
      const bool forget = r.st.state() == v1::RANK_STATE_EXITED && r.state_sent;
      it = forget ? w.ranks.erase(it) : std::next(it);
    }
    const auto now = SteadyClock::now();
    for (const auto& a : desired) {
      Key key = KeyOf(a.key());
      if (w.ranks.count(key)) continue;  // running, or exited and still listed until the controller acts
      SimRank r;
      *r.st.mutable_key() = a.key();
      r.st.set_state(v1::RANK_STATE_RUNNING);
      r.st.set_pid(next_pid_++);
      r.st.set_slot(a.slot());
      r.st.set_start_time_ms(WallMs());
      w.ranks.emplace(key, std::move(r));
      ++running_;
      ++started_;
      if (!w.ends.count(a.key().job_id())) w.ends[a.key().job_id()] = now + FateOf(mix_, a.key().job_id()).lifetime;
    }
    for (auto it = w.ends.begin(); it != w.ends.end();) {
      bool has = std::any_of(w.ranks.begin(), w.ranks.end(), [&](const auto& kv) { return std::get<0>(kv.first) == it->first; });
      it = has ? std::next(it) : w.ends.erase(it);
    }
  }

  // Counters; read from other threads.
  int64_t running() const { return running_; }
  int64_t started() const { return started_; }
  int64_t exited_ok() const { return exited_ok_; }
  int64_t stops() const { return stops_; }
  int64_t exited_stopped() const { return exited_stopped_; }

 private:
  using Key = std::tuple<std::string, int, int>;  // job, attempt, rank
  struct SimRank {
    v1::RankStatus st;
    bool state_sent = false;  // the controller accepted a report of st's current state
  };
  struct WorkerState {
    std::map<Key, SimRank> ranks;
    std::map<std::string, SteadyClock::time_point> ends;  // by job: when its ranks here exit 0
  };

  static Key KeyOf(const v1::RankKey& k) { return {k.job_id(), k.attempt(), k.rank()}; }
  static int64_t WallMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  void Exit(SimRank* r, int code, int signal, int64_t wall) {
    if (r->st.state() == v1::RANK_STATE_RUNNING) --running_;
    r->st.set_state(v1::RANK_STATE_EXITED);
    r->st.set_exit_code(code);
    r->st.set_signal(signal);
    r->st.set_end_time_ms(wall);
    r->state_sent = false;
  }

  const JobMix& mix_;
  std::vector<WorkerState> workers_;
  int32_t next_pid_ = 100000;
  std::atomic<int64_t> running_{0}, started_{0}, exited_ok_{0}, stops_{0}, exited_stopped_{0};
};

}  // namespace eft::bench
