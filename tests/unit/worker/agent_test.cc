// WorkerAgent against a fake controller (tests/unit/worker/agent_test_fixture.h): its calls to the
// controller, its work dir, and one rank as a real process (/bin/sh) from start to stop. What it
// decides about ranks, on ranks that are not processes, is agent_ranks_test.cc's.
#include "worker/agent.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "tests/unit/worker/agent_test_fixture.h"

namespace eft::worker {
namespace {

using testing::ReadWholeFile;
using testing::WaitForFile;
using testing::WorkerAgentTest;

TEST_F(WorkerAgentTest, RunsReportsRelaysAndStopsARank) {
  const RankId key{"job-1", 2, 0};
  const std::string out = dir_ + "/rank0.env";
  controller_.SetDesired({Rank("job-1", 2, 0, out)});
  const v1::JobSpec job_spec = JobSpecNamed("job-1");
  controller_.SetSpec("job-1", 2, job_spec);
  StartAgentWithProcesses();

  // Registered, got the assignment and its spec, started the rank with the rank environment.
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.Saw(key, v1::RANK_STATE_RUNNING); }));
  ASSERT_TRUE(WaitForFile(out));
  EXPECT_EQ(ReadWholeFile(out), spec::JobSpecToJson(job_spec).dump() + "|0|/ckpt/step-40|node-t\n");
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

TEST_F(WorkerAgentTest, ANewStubAfterAFailedCall) {
  StartAgent(/*failing=*/2);
  ASSERT_TRUE(controller_.WaitFor([&] { return !controller_.heartbeats.empty(); }));
  EXPECT_EQ(stubs_made_.load(), 3);  // made at construction, then once after each failed Register
  WorkerStats stats = agent_->Stats();
  EXPECT_EQ(stats.heartbeat_failures, 2u);
  EXPECT_EQ(stats.registrations, 1u);
  EXPECT_TRUE(stats.controller_reachable);
}

// Every Register and Heartbeat carries a report_seq one higher than the request before it, failed
// ones included, so the controller can drop a copy the network delayed past a newer one.
TEST_F(WorkerAgentTest, EveryReportCarriesAHigherSequenceNumberThanTheOneBefore) {
  StartAgent(/*failing=*/2);
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.heartbeats.size() >= 3; }));
  controller_.Inspect([&] {
    ASSERT_EQ(controller_.registers.size(), 1u) << "the failed ones are not recorded";
    EXPECT_EQ(controller_.registers[0].report_seq(), 3u) << "after two failed registrations";
    uint64_t before = controller_.registers[0].report_seq();
    EXPECT_EQ(controller_.heartbeats[0].report_seq(), before + 1);
    for (const auto& h : controller_.heartbeats) {
      // The same number again only for a hedged heartbeat's second copy.
      EXPECT_TRUE(h.report_seq() == before || h.report_seq() == before + 1) << h.report_seq() << " after " << before;
      before = h.report_seq();
    }
  });
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

namespace eft::worker::testing {
namespace {

// Whether something listens on host:port (a TCP connect).
bool Listening(const std::string& host, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// A worker whose --address resolves elsewhere by the time it registers again (a container
// reconnected to its network, a pod with a new IP) tells the controller the new data address, starts
// its ranks with it and moves its snapshot server there; at a registration that finds the same
// address nothing moves.
TEST_F(WorkerAgentTest, ARegistrationAgainResolvesTheAddressAnew) {
  std::mutex mu;
  std::string resolves_to = "127.0.0.1";
  std::vector<std::string> asked;
  resolve_address_ = [&](const std::string& given) -> Result<std::string> {
    std::lock_guard<std::mutex> lock(mu);
    asked.push_back(given);
    return resolves_to;
  };
  config_.address = "node-t.example";
  config_.node_address = "127.0.0.1";  // what WorkerConfig resolved at start
  config_.snapshot_dir = dir_ + "/shm";
  config_.snapshot_budget_bytes = 16 << 20;
  StartAgent();
  ASSERT_TRUE(controller_.WaitFor([&] { return !controller_.heartbeats.empty(); }));
  int first_port = 0;
  controller_.Inspect([&] {
    EXPECT_EQ(controller_.registers.at(0).data_address(), "127.0.0.1");
    first_port = controller_.registers.at(0).snapshot_port();
  });
  ASSERT_GT(first_port, 0);
  EXPECT_TRUE(Listening("127.0.0.1", first_port));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(asked.empty()) << "the first registration uses the address resolved at start";
  }

  controller_.AskReregister();  // same address: nothing moves
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.registers.size() == 2; }));
  controller_.Inspect([&] {
    EXPECT_EQ(controller_.registers.at(1).data_address(), "127.0.0.1");
    EXPECT_EQ(controller_.registers.at(1).snapshot_port(), first_port);
  });

  {
    std::lock_guard<std::mutex> lock(mu);
    resolves_to = "127.0.0.2";
  }
  controller_.AskReregister();
  ASSERT_TRUE(controller_.WaitFor([&] { return controller_.registers.size() == 3; }));
  int moved_port = 0;
  controller_.Inspect([&] {
    EXPECT_EQ(controller_.registers.at(2).data_address(), "127.0.0.2");
    moved_port = controller_.registers.at(2).snapshot_port();
  });
  EXPECT_EQ(moved_port, first_port) << "the same port, on the new address";
  EXPECT_TRUE(Listening("127.0.0.2", moved_port));
  EXPECT_FALSE(Listening("127.0.0.1", first_port)) << "the old address's server is gone";
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(asked, (std::vector<std::string>{"node-t.example", "node-t.example"}));
  }

  // A rank started now is told the new address.
  controller_.SetDesired({Rank("job-1", 1, 0, dir_ + "/unused")});
  controller_.SetSpec("job-1", 1, JobSpecNamed("job-1"));
  ASSERT_TRUE(Eventually([&] { return !ranks_.launches().empty(); }));
  EXPECT_EQ(ranks_.launches().at(0).spec.env.at(rank::env::kNodeAddress), "127.0.0.2");
}

}  // namespace
}  // namespace eft::worker::testing
