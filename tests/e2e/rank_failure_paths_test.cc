// A rank's failure paths, end to end on real eft-train processes (docs/architecture.md, "The rank
// protocol"): it answers a stop in every phase within a bounded time, reports a busy rendezvous port
// as its own exit code, reports why it failed as an event, so the controller can say it, and refuses a
// loopback address across hosts before its rendezvous.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <random>

#include "common/rank_protocol.h"
#include "tests/e2e/trainer_fixture.h"
#include "trainer/checkpoint/manifest.h"

namespace eft::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Every phase before the first step may block for long (a peer that never comes, a large data file);
// a stop must end it within this. Generous for a loaded 2-core machine; the measured time is ~0.1 s.
constexpr auto kStopBound = std::chrono::seconds(3);

class RankFailurePathsTest : public TrainerTest {
 protected:
  void SetUp() override {
    TrainerTest::SetUp();
    InitModel();
    WriteData(32);
  }

  struct Stopped {
    int exit_code = -1;
    double seconds = 0;  // from SIGTERM to exit
    std::string log;
  };

  // Starts `command` (a shell line), waits until its log shows `marker` `times` times (once per rank:
  // a rank still starting up has no handler yet, and dies of the signal), sends SIGTERM and times
  // the exit.
  Stopped StopWhenLogged(const std::string& name, const std::string& command, const std::string& marker,
                         int times = 1) {
    Stopped out;
    const std::string log = (dir_ / (name + ".log")).string();
    ChildProcess p;
    EXPECT_TRUE(p.Start({"/bin/sh", "-c", "exec " + command}, {}, log));
    auto count = [&] {
      const std::string text = ReadFile(log);
      int n = 0;
      for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + 1)) ++n;
      return n;
    };
    if (!WaitUntil([&] { return count() >= times; }, std::chrono::seconds(60))) {
      ADD_FAILURE() << "never reached \"" << marker << "\":\n" << ReadFile(log);
      return out;
    }
    const auto sent = Clock::now();
    p.Signal(SIGTERM);
    const int status = p.Wait(std::chrono::seconds(60));
    out.seconds = std::chrono::duration<double>(Clock::now() - sent).count();
    out.log = ReadFile(log);
    if (status >= 0 && WIFEXITED(status)) out.exit_code = WEXITSTATUS(status);
    return out;
  }

  std::string TrainCommand(const std::string& spec, int nproc, const std::string& env) {
    return "env " + env + " " + Train() + " train --config " + spec + " --nproc " + std::to_string(nproc) +
           " --threads 1";
  }

  std::vector<json> Events(const std::string& path) {
    std::vector<json> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      json e = json::parse(line, nullptr, false);
      if (!e.is_discarded()) out.push_back(e);
    }
    return out;
  }

  // Two local ranks held in `phase` (debug_hooks.h) get SIGTERM: they must end at once with 75.
  void ExpectAStopInPhaseEndsAtOnce(const std::string& phase) {
    const std::string spec = WriteSpec(8, 2, 1e-3);
    Stopped s = StopWhenLogged(phase, TrainCommand(spec, 2, "EFT_DEBUG_STALL=" + phase + " EFT_DEBUG_STALL_SECONDS=60"),
                               "holding in phase " + phase, 2);
    EXPECT_EQ(s.exit_code, 75) << s.log;
    EXPECT_LT(s.seconds, std::chrono::duration<double>(kStopBound).count()) << s.log;
    EXPECT_NE(s.log.find("stopped on request before the first step (nothing to save)"), std::string::npos) << s.log;
    std::printf("stop in phase %s: exit %d after %.2f s\n", phase.c_str(), s.exit_code, s.seconds);
  }
};

TEST_F(RankFailurePathsTest, AStopWhileTokenizingEndsAtOnce) { ExpectAStopInPhaseEndsAtOnce("tokenize"); }

TEST_F(RankFailurePathsTest, AStopWhileLoadingTheModelEndsAtOnce) { ExpectAStopInPhaseEndsAtOnce("load"); }

// Rank 0 of two, alone: it waits at the rendezvous for a peer that never comes (as when a node died
// before its rank started). Before, it sat there until stop_grace_seconds ran out and SIGKILL.
TEST_F(RankFailurePathsTest, AStopAtTheRendezvousEndsAtOnce) {
  const std::string spec = WriteSpec(8, 2, 1e-3);
  const std::string env = "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                          std::to_string(PickFreePort());
  Stopped s = StopWhenLogged("rendezvous", "env " + env + " " + Train() + " train --config " + spec + " --threads 1",
                             "rendezvous of 2 ranks");
  EXPECT_EQ(s.exit_code, 75) << s.log;
  EXPECT_LT(s.seconds, std::chrono::duration<double>(kStopBound).count()) << s.log;
  std::printf("stop at the rendezvous: exit %d after %.2f s\n", s.exit_code, s.seconds);
}

// The final checkpoint is being written when the stop comes: the save is finished (it is the whole
// run's result), and the run ends as done.
TEST_F(RankFailurePathsTest, AStopWhileSavingFinishesTheSave) {
  epochs_ = 1;  // 32 examples / 8 = 4 steps
  const std::string ckpt = (dir_ / "ckpt").string();
  extra_yaml_ = "checkpoint: {dir: " + ckpt + ", every_steps: 0}\n";
  const std::string spec = WriteSpec(8, 2, 1e-3);
  Stopped s = StopWhenLogged("save", TrainCommand(spec, 2, "EFT_DEBUG_STALL=save EFT_DEBUG_STALL_SECONDS=2"),
                             "holding in phase save", 2);
  EXPECT_EQ(s.exit_code, 0) << s.log;
  EXPECT_LT(s.seconds, 2.0 + std::chrono::duration<double>(kStopBound).count()) << s.log;
  EXPECT_TRUE(trainer::VerifyCheckpoint(ckpt + "/step-4").ok()) << s.log;
  std::printf("stop while saving: exit %d after %.2f s, checkpoint committed\n", s.exit_code, s.seconds);
}

// Another program holds MASTER_PORT on rank 0's node: rank 0 says so with its own exit code (the
// controller then retries on another port without counting a restart) and an error event.
TEST_F(RankFailurePathsTest, ABusyRendezvousPortIsItsOwnFailure) {
  int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(holder, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(holder, 1), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(holder, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);

  const std::string spec = WriteSpec(8, 2, 1e-3);
  const std::string events = (dir_ / "busy.events").string();
  std::string out;
  const int code = Shell("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                             " EFT_EVENTS_FD=3 timeout 60 " + Train() + " train --config " + spec + " --threads 1 3>>" +
                             events,
                         &out);
  ::close(holder);
  EXPECT_EQ(code, rank::ToInt(rank::ExitCode::kRendezvousPortBusy)) << out;
  EXPECT_NE(out.find("rendezvous port " + std::to_string(port) + " (MASTER_PORT) is in use by another program"),
            std::string::npos)
      << out;
  auto evs = Events(events);
  ASSERT_FALSE(evs.empty()) << out;
  EXPECT_EQ(evs.back()["event"], "error");
  EXPECT_EQ(evs.back()["exit_code"], 76);
}

// A rank that runs out of memory says so with its own exit code (the controller's policy:
// docs/gpu.md, "Out of memory"), where, when, with which settings, and what to change. A real
// allocation failure: the address space held to 8 GB (RLIMIT_AS), twice what loading takes, while
// one step's attention scores alone need 8.6 GB (32 rows x 4 heads x 4096^2 fp32). (The GPU's
// allocator throws c10::OutOfMemoryError, which takes the same path: memory_advice_test.)
TEST_F(RankFailurePathsTest, RunningOutOfMemoryIsItsOwnFailureAndSaysWhatToChange) {
  {
    std::mt19937 gen(5);
    std::ofstream f(dir_ / "long.jsonl");
    for (int i = 0; i < 32; ++i) {
      json ids = json::array();
      for (int t = 0; t < 4096; ++t) ids.push_back(1 + static_cast<int>(gen() % 127));
      f << json{{"input_ids", ids}}.dump() << "\n";
    }
  }
  const std::string spec = (dir_ / "oom.yaml").string();
  std::ofstream(spec) << "name: oom\nmodel: " << (dir_ / "model").string() << "\ndata: {train: "
                      << (dir_ / "long.jsonl").string() << ", max_seq_len: 4096, packing: false}\n"
                      << "training: {global_batch_size: 32, micro_batch_size: 32, lr: 1.0e-3, precision: fp32, "
                         "activation_checkpointing: none, device: cpu}\n";
  const std::string events = (dir_ / "oom.events").string();
  std::string out;
  const int code = Shell("ulimit -v 8000000; EFT_EVENTS_FD=3 " + Train() + " train --config " + spec +
                             " --threads 1 --max-steps 1 3>>" + events,
                         &out);
  EXPECT_EQ(code, rank::ToInt(rank::ExitCode::kOutOfMemory)) << out;
  for (const char* said :
       {"rank 0 ran out of host memory in step 1: DefaultCPUAllocator: can't allocate memory: you tried to allocate ",
        "Each rank computes micro-batches of 32 sequences of up to 4096 tokens, activation checkpointing none, "
        "sharding grad_op, world size 1.",
        "To fit: lower training.micro_batch_size (gradient accumulation keeps global_batch_size), set "
        "training.activation_checkpointing: full, set parallel.sharding: full"}) {
    EXPECT_NE(out.find(said), std::string::npos) << said << "\n" << out;
  }
  EXPECT_EQ(out.find("frame #"), std::string::npos) << "the allocator's words, not its backtrace";
  auto evs = Events(events);
  ASSERT_FALSE(evs.empty()) << out;
  EXPECT_EQ(evs.back()["event"], "error");
  EXPECT_EQ(evs.back()["exit_code"], 78);
  EXPECT_NE(evs.back()["message"].get<std::string>().find("ran out of host memory in step 1"), std::string::npos);
}

// The reason a rank gives up reaches its events, bounded, not only its log.
TEST_F(RankFailurePathsTest, AFatalErrorIsReportedAsAnEvent) {
  const std::string spec = WriteSpec(8, 2, 1e-3);
  std::ofstream(dir_ / "model" / "config.json") << R"({"model_type": "gpt2"})";
  const std::string events = (dir_ / "fatal.events").string();
  std::string out;
  EXPECT_EQ(Shell("EFT_EVENTS_FD=3 " + Train() + " train --config " + spec + " --threads 1 3>>" + events, &out), 2);
  auto evs = Events(events);
  ASSERT_EQ(evs.size(), 1u) << out;
  EXPECT_EQ(evs[0]["event"], "error");
  EXPECT_EQ(evs[0]["exit_code"], 2);
  const std::string message = evs[0]["message"];
  EXPECT_NE(message.find("gpt2"), std::string::npos) << message;
  EXPECT_NE(out.find(message), std::string::npos) << "the event repeats the line the log has";
}

// docs/architecture.md, "Rank traffic and the node's address": a rank of a job across hosts whose node
// address is loopback (the worker's host name mapped to 127.0.1.1) could never rendezvous; it exits 2
// (bad input: the job fails, no restart spent) at once, before loading anything or meeting anyone
// (MASTER_ADDR is TEST-NET-3, which nothing answers), with the reason as one line in its log and as
// its error event, which becomes the attempt's end reason.
TEST_F(RankFailurePathsTest, ALoopbackNodeAddressAcrossHostsIsRefusedBeforeTheRendezvous) {
  const std::string spec = WriteSpec(8, 2, 1e-3);
  const std::string events = (dir_ / "loopback.events").string();
  const std::string env =
      "RANK=2 LOCAL_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 MASTER_ADDR=203.0.113.1 MASTER_PORT=29555 EFT_JOB_ID=7 "
      "EFT_ATTEMPT=1 EFT_NODE_NAME=node2 EFT_NODE_ADDRESS=127.0.1.1 EFT_NODES_SHARE_LOOPBACK=0 EFT_EVENTS_FD=3 ";
  std::string out;
  const auto start = Clock::now();
  EXPECT_EQ(Shell(env + Train() + " train --config " + spec + " --threads 1 3>>" + events, &out), 2) << out;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(20)) << "no rendezvous was tried";
  const std::string message =
      "node address 127.0.1.1 (node2) is a loopback address, but this job's ranks span 2 nodes that are not all on "
      "this host: start eft-worker on node2 with --address (or --data-address) set to an address the other nodes "
      "reach";
  EXPECT_NE(out.find("eft-train: " + message + "\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("rendezvous of"), std::string::npos) << out;
  auto evs = Events(events);
  ASSERT_EQ(evs.size(), 1u) << out;
  EXPECT_EQ(evs[0]["event"], "error");
  EXPECT_EQ(evs[0]["exit_code"], 2);
  EXPECT_EQ(evs[0]["message"], message);

  // The same rank where the controller found every node on this host (workers given --address
  // 127.0.0.1) goes on to its rendezvous: only a stop ends it here.
  const std::string local =
      "env RANK=1 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
      std::to_string(PickFreePort()) + " EFT_NODE_NAME=node2 EFT_NODE_ADDRESS=127.0.0.1 EFT_NODES_SHARE_LOOPBACK=1 ";
  Stopped stopped = StopWhenLogged("local", local + Train() + " train --config " + spec + " --threads 1",
                                   "rendezvous of 2 ranks at 127.0.0.1");
  EXPECT_EQ(stopped.exit_code, 75) << stopped.log;
}

}  // namespace
}  // namespace eft::testing
