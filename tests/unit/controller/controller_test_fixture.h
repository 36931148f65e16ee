// ControllerTest: a Controller on a real SQLite file in a temp dir, driven in-process with a
// ManualClock; workers are simulated by calling Register/Heartbeat directly with what a worker would
// report. Shared by the state machine's tests (controller_test.cc, controller_resize_test.cc).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/controller.h"

namespace eft::controller {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eft-controller-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    config_.db_path = (dir_ / "c.db").string();
    config_.heartbeat_interval = 1000ms;
    config_.heartbeat_timeout = 3000ms;
    Restart();
  }
  void TearDown() override {
    c_.reset();
    fs::remove_all(dir_);
  }

  // Destroys the controller and creates it again on the same database, like a crash + restart.
  void Restart() {
    c_.reset();
    auto c = Controller::Create(config_, &clock_);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = std::move(c).value();
    incarnations_.clear();
  }

  v1::JobSpec Spec(const std::string& name, int min, int max, int gpus = 1) {
    v1::JobSpec s;
    s.set_name(name);
    s.add_command("/bin/true");
    s.mutable_resources()->mutable_nodes()->set_min(min);
    s.mutable_resources()->mutable_nodes()->set_max(max);
    s.mutable_resources()->set_gpus_per_node(gpus);
    return s;
  }
  // An elastic job with a priority, no resize cooldown and a checkpoint every 10 steps (the
  // priority and restart tests).
  // The messages of job `id`'s events of `type`, oldest first.
  std::vector<std::string> EventsOfType(const std::string& id, const std::string& type) {
    std::vector<std::string> out;
    const v1::Job job = Job(id);
    for (const auto& e : job.events()) {
      if (e.type() == type) out.push_back(e.message());
    }
    return out;
  }
  v1::JobSpec PrioSpec(const std::string& name, int min, int max, int priority) {
    v1::JobSpec s = Spec(name, min, max);
    s.set_priority(priority);
    s.mutable_resources()->set_resize_cooldown_seconds(0);
    s.mutable_checkpoint()->set_every_steps(10);
    return s;
  }

  std::string Submit(const v1::JobSpec& spec) {
    auto job = c_->SubmitJob(spec, "");
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }

  v1::RegisterResponse Register(const std::string& node, int slots = 1, std::vector<v1::RankStatus> ranks = {},
                                const std::string& incarnation = "") {
    v1::RegisterRequest req;
    req.set_node_name(node);
    req.set_address(node + ".addr");
    req.set_slots(slots);
    std::string inc = incarnation.empty() ? node + "-inc1" : incarnation;
    // These workers restart in their own work dir: a new one names the incarnation before it.
    if (auto it = incarnations_.find(node); it != incarnations_.end()) req.set_previous_incarnation(it->second);
    incarnations_[node] = inc;
    req.set_incarnation(inc);
    for (auto& r : ranks) *req.add_ranks() = r;
    auto resp = c_->Register(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : v1::RegisterResponse();
  }

  v1::HeartbeatResponse Heartbeat(const std::string& node, std::vector<v1::RankStatus> ranks = {},
                                  std::vector<v1::RankEvent> events = {}) {
    v1::HeartbeatRequest req;
    req.set_node_name(node);
    req.set_incarnation(incarnations_[node]);
    for (auto& r : ranks) *req.add_ranks() = r;
    for (auto& e : events) *req.add_events() = e;
    auto resp = c_->Heartbeat(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : v1::HeartbeatResponse();
  }

  // Each node heartbeats and gets one rank to run, which it then reports RUNNING. Assignments by node.
  std::map<std::string, v1::RankAssignment> StartRanks(const std::vector<std::string>& nodes) {
    std::map<std::string, v1::RankAssignment> out;
    for (const auto& n : nodes) {
      auto h = Heartbeat(n);
      EXPECT_EQ(h.desired_size(), 1) << n;
      if (h.desired_size() == 1) out[n] = h.desired(0);
    }
    for (const auto& [n, a] : out) Heartbeat(n, {Rank(a, v1::RANK_STATE_RUNNING)});
    return out;
  }

  static v1::RankStatus Rank(const v1::RankAssignment& a, v1::RankState state, int code = 0, int sig = 0) {
    v1::RankStatus s;
    *s.mutable_key() = a.key();
    s.set_state(state);
    s.set_exit_code(code);
    s.set_signal(sig);
    s.set_slot(a.slot());
    return s;
  }

  static v1::RankEvent Event(const v1::RankAssignment& a, uint64_t seq, const std::string& json) {
    v1::RankEvent e;
    *e.mutable_key() = a.key();
    e.set_seq(seq);
    e.set_time_ms(1);
    e.set_json(json);
    return e;
  }

  v1::Job Job(const std::string& id) {
    auto j = c_->GetJob(id);
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? *j : v1::Job();
  }

  // Every node heartbeats with the given ranks running; returns each node's desired set.
  std::map<std::string, v1::HeartbeatResponse> AllRunning(const std::vector<std::string>& nodes,
                                                          std::map<std::string, v1::HeartbeatResponse> desired) {
    std::map<std::string, v1::HeartbeatResponse> out;
    for (const auto& n : nodes) {
      std::vector<v1::RankStatus> ranks;
      for (const auto& a : desired[n].desired()) ranks.push_back(Rank(a, v1::RANK_STATE_RUNNING));
      out[n] = Heartbeat(n, ranks);
    }
    return out;
  }

  fs::path dir_;
  ControllerConfig config_;
  ManualClock clock_;
  std::unique_ptr<Controller> c_;
  std::map<std::string, std::string> incarnations_;
};

}  // namespace eft::controller
