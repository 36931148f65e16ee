// WorkerAgent against a fake controller: a real gRPC server on 127.0.0.1 with a scripted
// AgentService, and real rank processes (/bin/sh). Time stamps come from a ManualClock.
#include "worker/agent.h"

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "tests/unit/worker/process_test_util.h"

namespace eft::worker {
namespace {

using testing::MakeTempDir;
using testing::ReadWholeFile;

constexpr auto kWait = std::chrono::seconds(20);

// Answers like the controller: the desired set it is given, and an attempt's spec only in the reply
// to a request that lists no rank of that attempt (agent.proto). Records every request.
class FakeController final : public v1::AgentService::Service {
 public:
  void SetDesired(std::vector<v1::RankAssignment> desired) {
    std::lock_guard<std::mutex> lock(mu_);
    desired_ = std::move(desired);
  }
  void SetSpec(const std::string& job, int attempt, const std::string& json) {
    std::lock_guard<std::mutex> lock(mu_);
    specs_[{job, attempt}] = json;
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
  // From now on every reply fences the worker with `why`.
  void Fence(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    fenced_ = why;
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
    registers.push_back(*req);
    register_times.push_back(std::chrono::steady_clock::now());
    resp->set_heartbeat_interval_ms(50);
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
    std::lock_guard<std::mutex> lock(mu_);
    heartbeats.push_back(*req);
    for (const auto& e : req->events()) {
      if (e.seq() > max_seq_) events.push_back(e);
      max_seq_ = std::max(max_seq_, e.seq());
      if (ack_events_) acked_ = std::max(acked_, e.seq());
    }
    resp->set_acked_event_seq(acked_);
    acked_replies.push_back(acked_);
    resp->set_heartbeat_interval_ms(50);
    if (!fenced_.empty()) {
      resp->set_fenced(fenced_);
    } else {
      Answer(req->ranks(), resp->mutable_desired(), resp->mutable_attempt_specs());
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
      s->set_spec_json(specs_.at(attempt));
    }
    if (withhold_specs_ > 0) --withhold_specs_;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::RankAssignment> desired_;
  std::map<AttemptId, std::string> specs_;
  int withhold_specs_ = 0;
  bool ack_events_ = false;
  int retries_ = 0, retry_ms_ = 0;
  std::string fenced_;
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

  // Stubs on the fake's address; the first `failing` ones point at a port nobody listens on.
  void StartAgent(int failing = 0) {
    AgentDeps deps;
    deps.clock = &clock_;
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

  // A rank that writes its identity to `out`, prints a log line, writes one event and waits.
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
  std::atomic<int> stubs_made_{0};
  std::unique_ptr<WorkerAgent> agent_;
  std::mutex fenced_mu_;
  std::vector<std::string> fenced_calls_;  // what on_fenced was called with
};

bool WaitForFile(const std::string& path) {
  auto until = std::chrono::steady_clock::now() + kWait;
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

TEST_F(WorkerAgentTest, RunsReportsRelaysAndStopsARank) {
  const RankId key{"job-1", 2, 0};
  const std::string out = dir_ + "/rank0.env";
  controller_.SetDesired({Rank("job-1", 2, 0, out)});
  controller_.SetSpec("job-1", 2, R"({"name":"job-1"})");
  StartAgent();

  // Registered, got the assignment and its spec, started the rank with the rank environment.
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  ASSERT_TRUE(WaitForFile(out));
  EXPECT_EQ(ReadWholeFile(out), "{\"name\":\"job-1\"}|0|/ckpt/step-40|node-t\n");
  v1::RankStatus running;
  controller_.Inspect([&] {
    running = controller_.Reported(key, v1::RANK_STATE_RUNNING);
    ASSERT_EQ(controller_.registers.size(), 1u);
    EXPECT_EQ(controller_.registers[0].node_name(), "node-t");
    EXPECT_EQ(controller_.registers[0].ranks_size(), 0);
  });
  pid_t pid = running.pid();
  ASSERT_GT(pid, 0);
  EXPECT_EQ(running.start_time_ms(), clock_.WallMillis());  // the injected clock

  // The event is resent with every heartbeat until acknowledged, then dropped.
  ASSERT_TRUE(controller_.WaitFor([&] {
    int carrying = 0;
    for (const auto& h : controller_.heartbeats) carrying += h.events_size() > 0;
    return carrying >= 2;
  }));
  EXPECT_EQ(agent_->Stats().pending_events, 1u);
  controller_.AckEvents(true);
  // After the first reply that acknowledged it, no heartbeat carries it (two to be sure).
  ASSERT_TRUE(controller_.WaitFor([&] {
    for (size_t i = 0; i < controller_.acked_replies.size(); ++i) {
      if (controller_.acked_replies[i] > 0) return controller_.heartbeats.size() >= i + 3;
    }
    return false;
  }));
  controller_.Inspect([&] {
    size_t first_ack = 0;
    while (controller_.acked_replies[first_ack] == 0) ++first_ack;
    EXPECT_GT(controller_.heartbeats[first_ack].events_size(), 0);
    for (size_t i = first_ack + 1; i < controller_.heartbeats.size(); ++i) {
      EXPECT_EQ(controller_.heartbeats[i].events_size(), 0) << "heartbeat " << i;
    }
    ASSERT_EQ(controller_.events.size(), 1u);
    EXPECT_EQ(RankIdOf(controller_.events[0].key()), key);
    EXPECT_EQ(controller_.events[0].json(), R"({"event":"step","step":1})");
    EXPECT_EQ(controller_.events[0].time_ms(), clock_.WallMillis());
  });
  EXPECT_EQ(agent_->Stats().pending_events, 0u);

  // The rank's log reaches the controller.
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.logs[key] == "hello from rank 0\n"; }));

  // No longer desired: stopped (SIGTERM to the group), reported as exited, then forgotten.
  clock_.Advance(std::chrono::seconds(7));
  controller_.SetDesired({});
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_EXITED); }));
  controller_.Inspect([&] {
    v1::RankStatus s = controller_.Reported(key, v1::RANK_STATE_EXITED);
    EXPECT_EQ(s.signal(), SIGTERM);
    EXPECT_EQ(s.end_time_ms(), clock_.WallMillis());
  });
  EXPECT_TRUE(testing::WaitDead(pid, std::chrono::seconds(5)));
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.back().ranks_size() == 0; }));

  WorkerStats stats = agent_->Stats();
  EXPECT_EQ(stats.rank_starts, 1u);
  EXPECT_EQ(stats.rank_restarts, 1u);  // attempt 2
  EXPECT_EQ(stats.rank_exits["signal"], 1u);
  EXPECT_EQ(stats.registrations, 1u);
  EXPECT_EQ(stubs_made_.load(), 1);
}

TEST_F(WorkerAgentTest, ADesiredRankWaitsForItsAttemptSpec) {
  const RankId key{"job-2", 1, 0};
  const std::string out = dir_ + "/rank0.env";
  controller_.SetDesired({Rank("job-2", 1, 0, out)});
  controller_.SetSpec("job-2", 1, R"({"name":"job-2"})");
  controller_.WithholdSpecs(3);  // Register and two heartbeats come without the spec
  StartAgent();

  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.size() >= 2; }));
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_EQ(agent_->Stats().rank_starts, 0u);
  controller_.Inspect([&] {
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(controller_.heartbeats[i].ranks_size(), 0);
  });

  // The spec comes with the next reply (the request lists no rank of the attempt): the rank starts.
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  ASSERT_TRUE(WaitForFile(out));
  EXPECT_EQ(ReadWholeFile(out), "{\"name\":\"job-2\"}|0|/ckpt/step-40|node-t\n");
}

TEST_F(WorkerAgentTest, ALaterRankOfAnAttemptStartsWithTheCachedSpec) {
  const RankId key0{"job-4", 1, 0}, key1{"job-4", 1, 1};
  const std::string out1 = dir_ + "/rank1.env";
  controller_.SetDesired({Rank("job-4", 1, 0, dir_ + "/rank0.env")});
  controller_.SetSpec("job-4", 1, R"({"name":"job-4"})");
  StartAgent();
  // Until a request lists rank 0 the replies may carry the spec more than once (a heartbeat can leave
  // before the rank is up); from the one that reports it running on, none does.
  int specs_before = 0;
  ASSERT_TRUE(controller_.WaitFor([&] {
    specs_before = controller_.specs_sent;
    return controller_.Saw(key0, v1::RANK_STATE_RUNNING);
  }));
  EXPECT_GE(specs_before, 1);

  // The requests now list rank 0, so no reply carries the attempt's spec again.
  controller_.SetDesired({Rank("job-4", 1, 0, dir_ + "/rank0.env"), Rank("job-4", 1, 1, out1)});
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key1, v1::RANK_STATE_RUNNING); }));
  ASSERT_TRUE(WaitForFile(out1));
  EXPECT_EQ(ReadWholeFile(out1), "{\"name\":\"job-4\"}|1|/ckpt/step-40|node-t\n");
  controller_.Inspect([&] { EXPECT_EQ(controller_.specs_sent, specs_before) << "rank 1 started from the cache"; });
}

TEST_F(WorkerAgentTest, ANewStubAfterAFailedCall) {
  StartAgent(/*failing=*/2);
  ASSERT_TRUE(controller_.WaitFor([&] { return !controller_.heartbeats.empty(); }));
  EXPECT_EQ(stubs_made_.load(), 3);  // made at construction, then once after each failed Register
  WorkerStats stats = agent_->Stats();
  EXPECT_EQ(stats.heartbeat_failures, 2u);
  EXPECT_EQ(stats.registrations, 1u);
  EXPECT_TRUE(stats.controller_reachable);
}

TEST_F(WorkerAgentTest, ShutdownStopsRanksAndReportsTheirExit) {
  const RankId key{"job-3", 1, 0};
  controller_.SetDesired({Rank("job-3", 1, 0, dir_ + "/rank0.env")});
  controller_.SetSpec("job-3", 1, "{}");
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  pid_t pid = 0;
  controller_.Inspect([&] { pid = controller_.Reported(key, v1::RANK_STATE_RUNNING).pid(); });
  ASSERT_GT(pid, 0);

  agent_->Shutdown(std::chrono::seconds(10));  // the rank is still desired
  EXPECT_TRUE(testing::WaitDead(pid, std::chrono::seconds(1)));
  controller_.Inspect([&] {
    EXPECT_TRUE(controller_.heartbeats.back().shutting_down());
    v1::RankStatus s = controller_.Reported(key, v1::RANK_STATE_EXITED);
    EXPECT_EQ(s.state(), v1::RANK_STATE_EXITED);
    EXPECT_EQ(s.signal(), SIGTERM);
  });
}

// Two workers, one name (docs/architecture.md): what a worker does with the controller's answers.
TEST_F(WorkerAgentTest, AFencedWorkerStopsItsRanksRegistersNoMoreAndTellsItsOwnerOnce) {
  const RankId key{"job-5", 1, 0};
  controller_.SetDesired({Rank("job-5", 1, 0, dir_ + "/rank0.env")});
  controller_.SetSpec("job-5", 1, "{}");
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  pid_t pid = 0;
  controller_.Inspect([&] { pid = controller_.Reported(key, v1::RANK_STATE_RUNNING).pid(); });

  controller_.Fence("another eft-worker runs as node node-t");
  EXPECT_TRUE(testing::WaitDead(pid, std::chrono::seconds(10))) << "the rank is the other worker's to run now";
  size_t registers = 0, heartbeats = 0;
  controller_.Inspect([&] {
    registers = controller_.registers.size();
    heartbeats = controller_.heartbeats.size();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // 6 heartbeat intervals
  controller_.Inspect([&] {
    EXPECT_EQ(controller_.registers.size(), registers) << "a fenced worker never asks for the name again";
    EXPECT_EQ(controller_.heartbeats.size(), heartbeats);
  });
  std::lock_guard<std::mutex> lock(fenced_mu_);
  EXPECT_EQ(fenced_calls_, std::vector<std::string>{"another eft-worker runs as node node-t"});
}

TEST_F(WorkerAgentTest, ARetryAnswerDelaysTheNextRegisterByWhatItSays) {
  controller_.AnswerRetry(2, 250);
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return !controller_.heartbeats.empty(); }));
  controller_.Inspect([&] {
    ASSERT_EQ(controller_.registers.size(), 3u);
    for (size_t i = 1; i < 3; ++i) {
      auto gap = controller_.register_times[i] - controller_.register_times[i - 1];
      EXPECT_GE(gap, std::chrono::milliseconds(250)) << "register " << i;
      EXPECT_LT(gap, std::chrono::milliseconds(2000)) << "register " << i;
    }
  });
  EXPECT_EQ(agent_->Stats().registrations, 1u) << "answers that refuse the name are not registrations";
  std::lock_guard<std::mutex> lock(fenced_mu_);
  EXPECT_TRUE(fenced_calls_.empty());
}

// The work dir's lock (worker/work_dir_lock.h): one worker per dir, and a restart names the one before.
TEST_F(WorkerAgentTest, OneWorkerPerWorkDirAndARestartNamesTheIncarnationBeforeIt) {
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return !controller_.registers.empty(); }));
  std::string first;
  controller_.Inspect([&] {
    first = controller_.registers[0].incarnation();
    EXPECT_EQ(controller_.registers[0].previous_incarnation(), "") << "a fresh work dir";
  });

  WorkerConfig other = config_;
  other.name = "node-u";
  WorkerAgent second(other);
  Status s = second.Start();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("another eft-worker (pid " + std::to_string(::getpid()) + ", node node-t)"),
            std::string::npos)
      << s;

  agent_->Shutdown(std::chrono::seconds(5));
  agent_.reset();
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.registers.size() >= 2; }));
  controller_.Inspect([&] {
    EXPECT_NE(controller_.registers[1].incarnation(), first);
    EXPECT_EQ(controller_.registers[1].previous_incarnation(), first);
  });
}

}  // namespace
}  // namespace eft::worker
