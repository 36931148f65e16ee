// The WorkerAgent tests' world: a fake controller (a real gRPC server on 127.0.0.1 with a scripted
// AgentService, which can also give a lease, be cut off and answer late) and an agent whose rank
// launcher is FakeRanks (tests/unit/worker/fake_ranks.h), or, for the tests about real processes,
// the real one running /bin/sh. Time stamps and the lease come from a ManualClock.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "spec/job_spec.h"
#include "tests/unit/worker/fake_ranks.h"
#include "tests/unit/worker/process_test_util.h"
#include "worker/agent.h"

namespace eft::worker::testing {

constexpr auto kWait = std::chrono::seconds(20);

// Answers like the controller: the desired set it is given, and an attempt's spec only in the reply
// to a request that lists no rank of that attempt (agent.proto). Records every request.
class FakeController final : public v1::AgentService::Service {
 public:
  void SetDesired(std::vector<v1::RankAssignment> desired) {
    std::lock_guard<std::mutex> lock(mu_);
    desired_ = std::move(desired);
  }
  void SetSpec(const std::string& job, int attempt, const v1::JobSpec& spec) {
    std::lock_guard<std::mutex> lock(mu_);
    specs_[{job, attempt}] = spec;
  }
  // The next `n` replies leave the attempt specs out.
  void WithholdSpecs(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    withhold_specs_ = n;
  }
  void AckEvents(bool ack) {
    std::lock_guard<std::mutex> lock(mu_);
    ack_events_ = ack;
  }
  // The next `n` Registers answer "ask again in `ms`" (another worker may hold the name).
  void AnswerRetry(int n, int ms) {
    std::lock_guard<std::mutex> lock(mu_);
    retries_ = n;
    retry_ms_ = ms;
  }
  // From now on every heartbeat reply lists `keys` in stop_now.
  void SetStopNow(std::vector<v1::RankKey> keys) {
    std::lock_guard<std::mutex> lock(mu_);
    stop_now_ = std::move(keys);
  }
  // The next heartbeat reply asks the worker to register again (as after a controller restart).
  void AskReregister() {
    std::lock_guard<std::mutex> lock(mu_);
    reregister_ = true;
  }
  // From now on every reply fences the worker with `why`.
  void Fence(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    fenced_ = why;
  }
  // From now on every Register and Heartbeat reply carries lease_ms = `ms`; 0 (the default): none,
  // as from a controller that predates the lease.
  void SetLease(int ms) {
    std::lock_guard<std::mutex> lock(mu_);
    lease_ms_ = ms;
  }
  // While set, every Register and Heartbeat fails with UNAVAILABLE (counted in `unanswered`, not
  // recorded): a controller the worker cannot reach.
  void SetUnreachable(bool unreachable) {
    std::lock_guard<std::mutex> lock(mu_);
    unreachable_ = unreachable;
  }
  // The next heartbeat is recorded, then answered only after ReleaseHeld(), with what the fake
  // holds then: a reply that arrives late.
  void HoldNextHeartbeat() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_next_ = true;
  }
  void ReleaseHeld() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_next_ = false;
    held_ = false;
    cv_.notify_all();
  }

  // Memory snapshots: the peers sent with the attempt's spec, and the stage orders and kept
  // attempts of every heartbeat reply from now on.
  void SetSnapshotPeers(const std::string& job, int attempt, std::vector<v1::SnapshotPeer> peers) {
    std::lock_guard<std::mutex> lock(mu_);
    peers_[{job, attempt}] = std::move(peers);
  }
  void SetStage(std::vector<v1::StageOrder> orders) {
    std::lock_guard<std::mutex> lock(mu_);
    stage_ = std::move(orders);
  }
  void SetKeep(std::vector<AttemptId> keep) {
    std::lock_guard<std::mutex> lock(mu_);
    keep_ = std::move(keep);
  }

  // Waits until `pred` (called under the lock) holds; false after kWait.
  bool WaitFor(const std::function<bool()>& pred) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWait, pred);
  }
  // Runs `f` under the lock, to read what was recorded.
  void Inspect(const std::function<void()>& f) {
    std::lock_guard<std::mutex> lock(mu_);
    f();
  }

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* req, v1::RegisterResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (unreachable_) return Unanswered();
    registers.push_back(*req);
    register_times.push_back(std::chrono::steady_clock::now());
    resp->set_heartbeat_interval_ms(50);
    resp->set_lease_ms(lease_ms_);
    cv_.notify_all();
    if (!fenced_.empty()) {
      resp->set_fenced(fenced_);
    } else if (retries_ > 0) {
      --retries_;
      resp->set_retry_after_ms(retry_ms_);
    } else {
      Answer(req->ranks(), resp->mutable_desired(), resp->mutable_attempt_specs());
    }
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req, v1::HeartbeatResponse* resp) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (unreachable_) return Unanswered();
    heartbeats.push_back(*req);
    if (hold_next_) {
      hold_next_ = false;
      held_ = true;
      ++heartbeats_held;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !held_; });
    }
    for (const auto& e : req->events()) {
      if (e.seq() > max_seq_) events.push_back(e);
      max_seq_ = std::max(max_seq_, e.seq());
      if (ack_events_) acked_ = std::max(acked_, e.seq());
    }
    resp->set_acked_event_seq(acked_);
    acked_replies.push_back(acked_);
    if (reregister_) {
      reregister_ = false;
      resp->set_reregister(true);
    }
    resp->set_heartbeat_interval_ms(50);
    resp->set_lease_ms(lease_ms_);
    if (!fenced_.empty()) {
      resp->set_fenced(fenced_);
    } else {
      Answer(req->ranks(), resp->mutable_desired(), resp->mutable_attempt_specs());
      for (const auto& k : stop_now_) *resp->add_stop_now() = k;
      for (const auto& o : stage_) *resp->add_stage() = o;
      for (const auto& [job, attempt] : keep_) {
        v1::AttemptRef* ref = resp->add_keep_snapshots();
        ref->set_job_id(job);
        ref->set_attempt(attempt);
      }
    }
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status PushLogs(grpc::ServerContext*, const v1::PushLogsRequest* req, v1::PushLogsResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& c : req->chunks()) {
      std::string& log = logs[{c.job_id(), c.attempt(), c.rank()}];
      if (c.offset() == static_cast<int64_t>(log.size())) log += c.data();
      v1::LogOffset* o = resp->add_committed();
      o->mutable_key()->set_job_id(c.job_id());
      o->mutable_key()->set_attempt(c.attempt());
      o->mutable_key()->set_rank(c.rank());
      o->set_offset(static_cast<int64_t>(log.size()));
    }
    cv_.notify_all();
    return grpc::Status::OK;
  }

  // Under the lock (inside WaitFor, or after the agent is gone).
  std::vector<v1::RegisterRequest> registers;
  std::vector<std::chrono::steady_clock::time_point> register_times;
  std::vector<v1::HeartbeatRequest> heartbeats;
  std::vector<uint64_t> acked_replies;  // acked_event_seq of the reply to each heartbeat
  std::vector<v1::RankEvent> events;  // each seq once, as first received
  std::map<RankId, std::string> logs;
  int specs_sent = 0;  // AttemptSpecs in replies
  int unanswered = 0;       // Register and Heartbeat calls failed while unreachable
  int heartbeats_held = 0;  // HoldNextHeartbeat

  // The first status of `key` in `state` that a heartbeat reported; UNSPECIFIED state if none did.
  v1::RankStatus Reported(const RankId& key, v1::RankState state) const {
    for (const auto& h : heartbeats) {
      for (const auto& r : h.ranks()) {
        if (RankIdOf(r.key()) == key && r.state() == state) return r;
      }
    }
    return {};
  }
  bool Saw(const RankId& key, v1::RankState state) const { return Reported(key, state).state() == state; }

 private:
  grpc::Status Unanswered() {
    ++unanswered;
    cv_.notify_all();
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the test cut the controller off");
  }

  void Answer(const google::protobuf::RepeatedPtrField<v1::RankStatus>& listed,
              google::protobuf::RepeatedPtrField<v1::RankAssignment>* desired,
              google::protobuf::RepeatedPtrField<v1::AttemptSpec>* specs) {
    std::set<AttemptId> have;
    for (const auto& r : listed) have.insert(AttemptIdOf(r.key()));
    std::set<AttemptId> sent;
    for (const auto& a : desired_) {
      *desired->Add() = a;
      AttemptId attempt = AttemptIdOf(a.key());
      if (have.count(attempt) || sent.count(attempt) || !specs_.count(attempt) || withhold_specs_ > 0) continue;
      sent.insert(attempt);
      ++specs_sent;
      v1::AttemptSpec* s = specs->Add();
      s->set_job_id(attempt.first);
      s->set_attempt(attempt.second);
      *s->mutable_spec() = specs_.at(attempt);
      if (auto p = peers_.find(attempt); p != peers_.end()) {
        for (const auto& peer : p->second) *s->add_snapshot_peers() = peer;
      }
    }
    if (withhold_specs_ > 0) --withhold_specs_;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::RankAssignment> desired_;
  std::map<AttemptId, v1::JobSpec> specs_;
  std::map<AttemptId, std::vector<v1::SnapshotPeer>> peers_;
  std::vector<v1::StageOrder> stage_;
  std::vector<AttemptId> keep_;
  int withhold_specs_ = 0;
  bool ack_events_ = false;
  int retries_ = 0, retry_ms_ = 0;
  std::string fenced_;
  std::vector<v1::RankKey> stop_now_;
  int lease_ms_ = 0;
  bool unreachable_ = false;
  bool hold_next_ = false, held_ = false;
  bool reregister_ = false;
  uint64_t acked_ = 0;
  uint64_t max_seq_ = 0;  // the newest event received
};

class WorkerAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    ASSERT_FALSE(dir_.empty());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&controller_);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ && port_ > 0);

    config_.controller = "127.0.0.1:" + std::to_string(port_);
    config_.name = "node-t";
    config_.address = "127.0.0.1";
    config_.work_dir = dir_ + "/work";
    config_.slots = 1;
    config_.heartbeat_interval = std::chrono::milliseconds(50);
    config_.rpc_timeout = std::chrono::milliseconds(2000);
    config_.log_push_interval = std::chrono::milliseconds(50);
  }

  void TearDown() override {
    if (agent_) agent_->Shutdown(std::chrono::seconds(5));
    agent_.reset();
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Stubs on the fake's address; the first `failing` ones point at a port nobody listens on. The
  // ranks are ranks_'s.
  void StartAgent(int failing = 0) { StartAgentWith(ranks_.Launcher(), failing); }
  // The ranks are real processes.
  void StartAgentWithProcesses() { StartAgentWith(nullptr); }

  void StartAgentWith(NewRankLauncher launcher, int failing = 0) {
    AgentDeps deps;
    deps.clock = &clock_;
    deps.new_launcher = std::move(launcher);
    deps.resolve_address = resolve_address_;
    deps.on_fenced = [this](const std::string& why) {
      std::lock_guard<std::mutex> lock(fenced_mu_);
      fenced_calls_.push_back(why);
    };
    deps.new_stub = [this, failing]() -> std::unique_ptr<v1::AgentService::StubInterface> {
      int n = stubs_made_++;
      std::string address = n < failing ? "unix:" + dir_ + "/nobody-listens" : config_.controller;
      return v1::AgentService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    };
    agent_ = std::make_unique<WorkerAgent>(config_, std::move(deps));
    ASSERT_TRUE(agent_->Start().ok());
  }

  // A normalized job spec, as the controller stores and sends it (AttemptSpec.spec).
  static v1::JobSpec JobSpecNamed(const std::string& name) {
    auto parsed = spec::ParseJobSpec("{name: " + name + ", model: /m, data: {train: /d.jsonl}}");
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (!parsed.ok()) return v1::JobSpec();
    const Status normalized = spec::NormalizeJobSpec(&*parsed);
    EXPECT_TRUE(normalized.ok()) << normalized;
    return *parsed;
  }
  // A rank's EFT_JOB_SPEC, read as eft-train reads it.
  static v1::JobSpec ReadRankSpec(const std::string& text) {
    auto read = spec::ParseJobSpec(text);
    EXPECT_TRUE(read.ok()) << read.status() << ": " << text;
    return read.ok() ? *read : v1::JobSpec();
  }

  // A rank that writes its identity to `out`, prints a log line, writes one event and waits (as a
  // real process: FakeRanks only records its command).
  v1::RankAssignment Rank(const std::string& job, int attempt, int rank, const std::string& out) {
    v1::RankAssignment a;
    a.mutable_key()->set_job_id(job);
    a.mutable_key()->set_attempt(attempt);
    a.mutable_key()->set_rank(rank);
    a.set_world_size(1);
    a.set_local_world_size(1);
    a.set_master_addr("127.0.0.1");
    a.set_master_port(29500);
    a.set_stop_grace_seconds(5);
    a.set_resume_from("/ckpt/step-40");
    (*a.mutable_env())["EFT_TEST_OUT"] = out;
    a.add_command("/bin/sh");
    a.add_command("-c");
    a.add_command(
        R"(printf '%s|%s|%s|%s\n' "$EFT_JOB_SPEC" "$RANK" "$EFT_RESUME_FROM" "$EFT_NODE_NAME" > "$EFT_TEST_OUT.tmp")"
        R"( && mv "$EFT_TEST_OUT.tmp" "$EFT_TEST_OUT"; echo "hello from rank $RANK";)"
        R"( echo '{"event":"step","step":1}' >&"$EFT_EVENTS_FD"; exec sleep 60)");
    return a;
  }

  std::string dir_;
  int port_ = 0;
  FakeController controller_;
  std::unique_ptr<grpc::Server> server_;
  WorkerConfig config_;
  ManualClock clock_;
  FakeRanks ranks_;  // declared before the agent, which may hold its launcher
  std::atomic<int> stubs_made_{0};
  std::unique_ptr<WorkerAgent> agent_;
  std::mutex fenced_mu_;
  std::vector<std::string> fenced_calls_;  // what on_fenced was called with
  // The agent's AgentDeps::resolve_address (unset: the real one).
  std::function<Result<std::string>(const std::string&)> resolve_address_;
};

// Polls `pred` until it holds; false after kWait.
inline bool Eventually(const std::function<bool()>& pred) {
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

inline bool WaitForFile(const std::string& path) {
  auto until = std::chrono::steady_clock::now() + kWait;
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace eft::worker::testing
