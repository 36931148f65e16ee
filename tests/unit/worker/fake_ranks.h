// FakeRanks: rank "processes" for WorkerAgent tests that fork nothing. Launcher() goes into
// AgentDeps::new_launcher; the launcher it makes records what the agent asks to launch and stop,
// answers launches with made-up pids (or the error FailLaunches set), and a stopped rank exits at
// once by SIGTERM unless IgnoreStops. The test ends a rank (Exit) or has it write an event line
// (Emit); the agent hears of both on its io thread, as it would from a real process.
#pragma once

#include <signal.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/post.hpp>

#include "common/rank_protocol.h"
#include "worker/rank_launcher.h"
#include "worker/reconcile.h"

namespace eft::worker::testing {

class FakeRanks {
 public:
  struct Launched {
    RankId key;  // from the rank environment
    LaunchSpec spec;
    pid_t pid = 0;  // 0: the launch failed (FailLaunches)
  };
  struct Stopped {
    RankId key;
    std::chrono::milliseconds grace;
  };

  // For AgentDeps::new_launcher. This FakeRanks must outlive the agent.
  NewRankLauncher Launcher() {
    return [this](boost::asio::io_context& io,
                  RankLauncher::Callbacks callbacks) -> Result<std::unique_ptr<RankLauncher>> {
      std::lock_guard<std::mutex> lock(mu_);
      io_ = &io;
      callbacks_ = std::move(callbacks);
      return std::unique_ptr<RankLauncher>(new FakeLauncher(this));
    };
  }

  // Every launch from now on fails with `why`.
  void FailLaunches(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    launch_error_ = why;
  }
  // Stops are only recorded: the ranks run on until Exit.
  void IgnoreStops() {
    std::lock_guard<std::mutex> lock(mu_);
    ignore_stops_ = true;
  }
  // The running rank `key` ends with `exit`; false if no such rank runs.
  bool Exit(const RankId& key, ProcessExit exit) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = running_.find(key);
    if (it == running_.end()) return false;
    EndLocked(it, exit);
    return true;
  }
  // The running rank `key` writes `line` to its events pipe.
  bool Emit(const RankId& key, const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = running_.find(key);
    if (it == running_.end()) return false;
    boost::asio::post(*io_, [cb = callbacks_.on_event_line, id = it->second, line] { cb(id, line); });
    return true;
  }

  std::vector<Launched> launches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return launches_;
  }
  std::vector<Stopped> stops() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stops_;
  }
  bool running(const RankId& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    return running_.count(key) > 0;
  }

 private:
  // The agent's launcher; it and its callbacks live on the agent's io thread.
  class FakeLauncher final : public RankLauncher {
   public:
    explicit FakeLauncher(FakeRanks* ranks) : ranks_(ranks) {}
    ~FakeLauncher() override {  // the agent is done with its ranks: they are gone, no callback follows
      std::lock_guard<std::mutex> lock(ranks_->mu_);
      ranks_->running_.clear();
      ranks_->io_ = nullptr;
    }
    Result<pid_t> Launch(Id id, const LaunchSpec& spec) override { return ranks_->Launch(id, spec); }
    void Stop(Id id, std::chrono::milliseconds grace) override { ranks_->Stop(id, grace); }

   private:
    FakeRanks* ranks_;
  };

  Result<pid_t> Launch(RankLauncher::Id id, const LaunchSpec& spec) {
    namespace env = rank::env;
    std::lock_guard<std::mutex> lock(mu_);
    const RankId key{spec.env.at(env::kJobId), std::stoi(spec.env.at(env::kAttempt)),
                     std::stoi(spec.env.at(env::kRank))};
    if (launch_error_) {
      launches_.push_back({key, spec, 0});
      return Status::NotFound(*launch_error_);
    }
    const pid_t pid = static_cast<pid_t>(1'000'000 + id);
    launches_.push_back({key, spec, pid});
    running_[key] = id;
    return pid;
  }

  void Stop(RankLauncher::Id id, std::chrono::milliseconds grace) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = running_.begin(); it != running_.end(); ++it) {
      if (it->second != id) continue;
      stops_.push_back({it->first, grace});
      if (!ignore_stops_) EndLocked(it, ProcessExit{0, SIGTERM});
      return;
    }
  }

  // Posted, never called: the agent calls Stop holding its own lock, which on_exit takes.
  void EndLocked(std::map<RankId, RankLauncher::Id>::iterator it, ProcessExit exit) {
    boost::asio::post(*io_, [cb = callbacks_.on_exit, id = it->second, exit] { cb(id, exit); });
    running_.erase(it);
  }

  mutable std::mutex mu_;
  boost::asio::io_context* io_ = nullptr;
  RankLauncher::Callbacks callbacks_;
  std::optional<std::string> launch_error_;
  bool ignore_stops_ = false;
  std::map<RankId, RankLauncher::Id> running_;
  std::vector<Launched> launches_;
  std::vector<Stopped> stops_;
};

}  // namespace eft::worker::testing
