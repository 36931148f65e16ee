#include "worker/process_supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "tests/unit/worker/process_test_util.h"

namespace eft::worker {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::IsDead;
using testing::KillIfAlive;
using testing::ReadWholeFile;
using testing::WaitDead;

class ProcessSupervisorTest : public ::testing::Test {
 protected:
  using Id = ProcessSupervisor::Id;

  void SetUp() override {
    dir_ = testing::MakeTempDir();
    ASSERT_FALSE(dir_.empty());
    ProcessSupervisor::Callbacks callbacks;
    callbacks.on_event_line = [this](Id id, const std::string& line) {
      events_[id].push_back(line);
      timeline_.push_back("event " + std::to_string(id));
      if (on_event_hook_) on_event_hook_(id, line);
    };
    callbacks.on_exit = [this](Id id, ProcessExit e) {
      exits_[id] = e;
      exit_times_[id] = Clock::now();
      timeline_.push_back("exit " + std::to_string(id));
      if (on_exit_hook_) on_exit_hook_(id, e);
    };
    sup_ = std::make_unique<ProcessSupervisor>(io_, std::move(callbacks));
  }

  void TearDown() override {
    sup_.reset();  // SIGKILLs every group still running
    for (pid_t pid : strays_) KillIfAlive(pid);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  LaunchSpec Sh(const std::string& script) {
    LaunchSpec spec;
    spec.argv = {"/bin/sh", "-c", script};
    spec.log_path = dir_ + "/log.txt";
    return spec;
  }

  pid_t Spawn(Id id, const LaunchSpec& spec) {
    auto pid = sup_->Spawn(id, spec);
    EXPECT_TRUE(pid.ok()) << pid.status();
    return pid.ok() ? *pid : -1;
  }

  // Runs the io_context until `done` holds; false on timeout.
  bool RunUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout = 5s) {
    auto deadline = Clock::now() + timeout;
    while (!done()) {
      if (Clock::now() >= deadline) return false;
      io_.run_one_for(10ms);
      if (io_.stopped()) io_.restart();
    }
    return true;
  }
  bool WaitExit(Id id, std::chrono::milliseconds timeout = 5s) {
    return RunUntil([&] { return exits_.count(id) != 0; }, timeout);
  }
  bool WaitEvents(Id id, size_t n, std::chrono::milliseconds timeout = 5s) {
    return RunUntil([&] { return events_[id].size() >= n; }, timeout);
  }
  // A pid the child reported on its event pipe; killed in TearDown if still alive.
  pid_t StrayFromEvent(Id id, size_t index) {
    pid_t pid = static_cast<pid_t>(std::stol(events_[id].at(index)));
    strays_.push_back(pid);
    return pid;
  }

  boost::asio::io_context io_;
  std::unique_ptr<ProcessSupervisor> sup_;
  std::string dir_;
  std::map<Id, std::vector<std::string>> events_;
  std::map<Id, ProcessExit> exits_;
  std::map<Id, Clock::time_point> exit_times_;
  std::vector<std::string> timeline_;
  std::function<void(Id, const std::string&)> on_event_hook_;
  std::function<void(Id, ProcessExit)> on_exit_hook_;
  std::vector<pid_t> strays_;
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

TEST_F(ProcessSupervisorTest, ReportsExitCodes) {
  const std::vector<int> codes = {0, 1, 2, 75};
  for (size_t i = 0; i < codes.size(); ++i) Spawn(i, Sh("exit " + std::to_string(codes[i])));
  EXPECT_EQ(sup_->running_count(), codes.size());
  ASSERT_TRUE(RunUntil([&] { return exits_.size() == codes.size(); }));
  for (size_t i = 0; i < codes.size(); ++i) {
    EXPECT_EQ(exits_[i].exit_code, codes[i]) << "child " << i;
    EXPECT_EQ(exits_[i].signal, 0) << "child " << i;
  }
  EXPECT_EQ(sup_->running_count(), 0u);
}

TEST_F(ProcessSupervisorTest, ReportsDeathBySignal) {
  Spawn(1, Sh("kill -KILL $$"));
  Spawn(2, Sh("kill -USR1 $$"));  // no core dump, unlike SEGV
  ASSERT_TRUE(WaitExit(1));
  ASSERT_TRUE(WaitExit(2));
  EXPECT_EQ(exits_[1].signal, SIGKILL);
  EXPECT_EQ(exits_[2].signal, SIGUSR1);
}

TEST_F(ProcessSupervisorTest, PassesEnvironmentWithOverrides) {
  ::setenv("EFT_TEST_INHERITED", "from-worker", 1);
  ::setenv("EFT_TEST_OVERRIDDEN", "worker", 1);
  LaunchSpec spec = Sh(R"(echo "$EFT_TEST_INHERITED|$EFT_TEST_OVERRIDDEN|$EFT_TEST_NEW|$EFT_EVENTS_FD" >&3)");
  spec.env = {{"EFT_TEST_OVERRIDDEN", "spec"}, {"EFT_TEST_NEW", "a value with spaces"}, {"EFT_EVENTS_FD", "9"}};
  Spawn(1, spec);
  ::unsetenv("EFT_TEST_INHERITED");
  ::unsetenv("EFT_TEST_OVERRIDDEN");
  ASSERT_TRUE(WaitExit(1));
  ASSERT_EQ(events_[1].size(), 1u);
  // EFT_EVENTS_FD is the supervisor's to set: the pipe is on fd 3 whatever the spec says.
  EXPECT_EQ(events_[1][0], "from-worker|spec|a value with spaces|3");
}

TEST_F(ProcessSupervisorTest, LooksUpProgramInTheChildsPath) {
  std::string bin = dir_ + "/bin";
  std::filesystem::create_directories(bin);
  testing::WriteWholeFile(bin + "/eft-test-prog", "#!/bin/sh\necho \"prog $1\" >&3\nexit 7\n");
  ::chmod((bin + "/eft-test-prog").c_str(), 0755);
  LaunchSpec spec;
  spec.argv = {"eft-test-prog", "arg1"};
  spec.env = {{"PATH", "/nonexistent:" + bin + ":/usr/bin:/bin"}};
  Spawn(1, spec);
  ASSERT_TRUE(WaitExit(1));
  EXPECT_EQ(exits_[1].exit_code, 7);
  EXPECT_EQ(events_[1], std::vector<std::string>{"prog arg1"});
}

TEST_F(ProcessSupervisorTest, AppendsStdoutAndStderrToLogFile) {
  LaunchSpec spec = Sh("echo out1; echo err1 >&2");
  spec.log_path = dir_ + "/logs/nested/rank0.log";  // parent directories do not exist yet
  Spawn(1, spec);
  ASSERT_TRUE(WaitExit(1));
  spec.argv[2] = "echo out2 >&2; echo err2";
  exits_.clear();
  Spawn(1, spec);  // the id is free again once on_exit was delivered
  ASSERT_TRUE(WaitExit(1));
  EXPECT_EQ(ReadWholeFile(spec.log_path), "out1\nerr1\nout2\nerr2\n");
}

TEST_F(ProcessSupervisorTest, ChildGetsOnlyStdioAndEventFd) {
  int leaked = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC: a careless fork+exec leaks it
  ASSERT_GE(leaked, 0);
  LaunchSpec spec;
  spec.argv = {"sleep", "30"};  // exec'd by Spawn itself: its fd table is final when Spawn returns
  spec.log_path = dir_ + "/log.txt";
  pid_t pid = Spawn(1, spec);
  ::close(leaked);
  ASSERT_GT(pid, 0);
  std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd/";
  // sleep's own startup briefly opens files (locale); a leaked fd stays for good.
  const std::set<std::string> want = {"0", "1", "2", "3"};
  std::set<std::string> fds;
  auto deadline = Clock::now() + 1s;
  do {
    fds.clear();
    for (const auto& e : std::filesystem::directory_iterator(fd_dir)) fds.insert(e.path().filename());
  } while (fds != want && Clock::now() < deadline && (std::this_thread::sleep_for(5ms), true));
  EXPECT_EQ(fds, want);
  EXPECT_EQ(std::filesystem::read_symlink(fd_dir + "0"), "/dev/null");
  EXPECT_EQ(std::filesystem::read_symlink(fd_dir + "1"), spec.log_path);
  EXPECT_EQ(std::filesystem::read_symlink(fd_dir + "2"), spec.log_path);
  EXPECT_EQ(std::filesystem::read_symlink(fd_dir + "3").string().rfind("pipe:", 0), 0u);
  EXPECT_EQ(::fcntl(leaked, F_GETFD), -1) << "the test's own copy is closed";
}

TEST_F(ProcessSupervisorTest, DeliversManyEventsInOrderBeforeExit) {
  // ~600 KB: many pipe reads, with lines split across read boundaries.
  constexpr int kLines = 5000;
  const std::string pad(100, 'x');
  Spawn(1, Sh("i=0; while [ $i -lt " + std::to_string(kLines) + " ]; do echo \"{\\\"i\\\":$i,\\\"pad\\\":\\\"" + pad +
              "\\\"}\"; i=$((i+1)); done >&3; exit 0"));
  ASSERT_TRUE(WaitExit(1, 10s));
  ASSERT_EQ(events_[1].size(), static_cast<size_t>(kLines));
  for (int i = 0; i < kLines; ++i) {
    ASSERT_EQ(events_[1][i], "{\"i\":" + std::to_string(i) + ",\"pad\":\"" + pad + "\"}");
  }
  EXPECT_EQ(timeline_.back(), "exit 1");
}

TEST_F(ProcessSupervisorTest, JoinsPartialWritesAndDeliversUnterminatedLastLine) {
  Spawn(1, Sh("printf 'ab' >&3; sleep 0.05; printf 'c\\nd' >&3; sleep 0.05; printf 'e\\nf\\n\\n' >&3; "
              "printf 'last' >&3"));
  ASSERT_TRUE(WaitExit(1));
  EXPECT_EQ(events_[1], (std::vector<std::string>{"abc", "de", "f", "", "last"}));
  EXPECT_EQ(timeline_.back(), "exit 1");
}

TEST_F(ProcessSupervisorTest, ExitFiresAboutOneSecondAfterExitWhenAGrandchildHoldsThePipe) {
  // setsid takes the grandchild out of the rank's group, so nothing kills it and the pipe stays open.
  // The leader waits for the marker so that it does not exit (and have its group killed) before
  // the grandchild has left the group.
  auto start = Clock::now();
  Spawn(1, Sh("setsid sh -c 'touch " + dir_ + "/left; exec sleep 30' & "
              "while [ ! -e " + dir_ + "/left ]; do sleep 0.01; done; echo $! >&3; printf 'unterminated' >&3; exit 3"));
  ASSERT_TRUE(WaitEvents(1, 1));
  pid_t grandchild = StrayFromEvent(1, 0);
  ASSERT_TRUE(WaitExit(1, 5s));
  double elapsed = Seconds(exit_times_[1] - start);
  EXPECT_GE(elapsed, 0.9);
  EXPECT_LT(elapsed, 2.5);
  EXPECT_EQ(exits_[1].exit_code, 3);
  EXPECT_EQ(events_[1].back(), "unterminated");
  EXPECT_FALSE(IsDead(grandchild)) << "the grandchild left the group; the supervisor must not kill it";
}

TEST_F(ProcessSupervisorTest, StopDeliversTermAndReportsExit75) {
  Spawn(1, Sh("trap 'exit 75' TERM; echo ready >&3; while :; do sleep 0.05; done"));
  ASSERT_TRUE(WaitEvents(1, 1));
  auto stop = Clock::now();
  sup_->Stop(1, 5000ms);
  ASSERT_TRUE(WaitExit(1, 3s));
  EXPECT_EQ(exits_[1].exit_code, 75);
  EXPECT_EQ(exits_[1].signal, 0);
  EXPECT_LT(Seconds(exit_times_[1] - stop), 1.0);
}

TEST_F(ProcessSupervisorTest, StopKillsAChildIgnoringTermAfterGrace) {
  Spawn(1, Sh("trap '' TERM; echo ready >&3; while :; do sleep 0.05; done"));
  ASSERT_TRUE(WaitEvents(1, 1));
  auto stop = Clock::now();
  sup_->Stop(1, 300ms);
  sup_->Stop(1, 5000ms);  // a later, longer grace does not postpone the kill
  ASSERT_TRUE(WaitExit(1, 3s));
  double elapsed = Seconds(exit_times_[1] - stop);
  EXPECT_EQ(exits_[1].signal, SIGKILL);
  EXPECT_GE(elapsed, 0.29);
  EXPECT_LT(elapsed, 0.8);
}

TEST_F(ProcessSupervisorTest, StopReachesTheWholeProcessGroup) {
  // One grandchild dies of the group's SIGTERM; the other ignores it and must still not outlive
  // the rank (the group is SIGKILLed when the leader exits).
  Spawn(1, Sh("sleep 30 & echo $! >&3; sh -c 'trap \"\" TERM; echo $$ >&3; exec sleep 30' & wait"));
  ASSERT_TRUE(WaitEvents(1, 2));
  pid_t a = StrayFromEvent(1, 0), b = StrayFromEvent(1, 1);
  auto stop = Clock::now();
  sup_->Stop(1, 10000ms);
  ASSERT_TRUE(WaitExit(1, 3s));
  EXPECT_EQ(exits_[1].signal, SIGTERM);
  EXPECT_LT(Seconds(exit_times_[1] - stop), 1.0);
  EXPECT_TRUE(WaitDead(a, 1s));
  EXPECT_TRUE(WaitDead(b, 1s));
}

TEST_F(ProcessSupervisorTest, StopTermsEveryMemberSoALauncherCanShutDownGracefully) {
  // A launcher-style rank: the leader waits for its worker process, which saves and exits on TERM.
  // Only a SIGTERM to the whole group (not just the leader) lets this finish before the grace.
  Spawn(1, Sh("sh -c 'trap \"echo saved >&3; exit 0\" TERM; echo ready >&3; while :; do sleep 0.05; done' & "
              "gc=$!; trap 'wait $gc; exit 75' TERM; echo ready >&3; while :; do sleep 0.05; done"));
  ASSERT_TRUE(WaitEvents(1, 2));  // both traps are set
  sup_->Stop(1, 3000ms);
  ASSERT_TRUE(WaitExit(1, 5s));
  EXPECT_EQ(exits_[1].exit_code, 75);
  EXPECT_EQ(exits_[1].signal, 0);
  EXPECT_EQ(events_[1], (std::vector<std::string>{"ready", "ready", "saved"}));
}

TEST_F(ProcessSupervisorTest, StragglersDieWhenTheLeaderExitsOnItsOwn) {
  Spawn(1, Sh("sleep 30 & echo $! >&3; exit 0"));
  ASSERT_TRUE(WaitExit(1, 3s));  // promptly: the straggler held the pipe, killing it ends the wait
  pid_t straggler = StrayFromEvent(1, 0);
  EXPECT_TRUE(WaitDead(straggler, 1s));
}

TEST_F(ProcessSupervisorTest, ChildLeadsItsOwnProcessGroup) {
  pid_t pid = Spawn(1, Sh("exec sleep 30"));
  ASSERT_GT(pid, 0);
  EXPECT_EQ(::getpgid(pid), pid);
  EXPECT_NE(::getpgid(pid), ::getpgid(0));
  EXPECT_TRUE(sup_->IsRunning(1));
  EXPECT_FALSE(sup_->IsRunning(2));
  auto again = sup_->Spawn(1, Sh("exit 0"));
  EXPECT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  sup_->Stop(2, 10ms);  // unknown id: no-op
  sup_->Stop(1, 0ms);
  ASSERT_TRUE(WaitExit(1));
  EXPECT_EQ(exits_[1].signal, SIGKILL);
  EXPECT_FALSE(sup_->IsRunning(1));
  sup_->Stop(1, 10ms);  // already exited: no-op
}

TEST_F(ProcessSupervisorTest, SpawnErrorsNameTheProblem) {
  auto missing = sup_->Spawn(1, LaunchSpec{{"eft-no-such-program"}, {}, "", ""});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("eft-no-such-program"), std::string::npos) << missing.status();

  auto missing_path = sup_->Spawn(1, LaunchSpec{{"/nonexistent/eft-prog"}, {}, "", ""});
  ASSERT_FALSE(missing_path.ok());
  EXPECT_NE(missing_path.status().message().find("/nonexistent/eft-prog"), std::string::npos);
  EXPECT_NE(missing_path.status().message().find("No such file"), std::string::npos) << missing_path.status();

  std::string not_exec = dir_ + "/not-executable";
  testing::WriteWholeFile(not_exec, "#!/bin/sh\n");
  ::chmod(not_exec.c_str(), 0644);
  auto denied = sup_->Spawn(1, LaunchSpec{{not_exec}, {}, "", ""});
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied) << denied.status();

  // Only execve() itself can tell: this failure comes back through the status pipe.
  std::string garbage = dir_ + "/garbage";
  testing::WriteWholeFile(garbage, std::string("\x01\x02\x03 not a program", 17));
  ::chmod(garbage.c_str(), 0755);
  auto bad_format = sup_->Spawn(1, LaunchSpec{{garbage}, {}, "", ""});
  ASSERT_FALSE(bad_format.ok());
  EXPECT_NE(bad_format.status().message().find("Exec format error"), std::string::npos) << bad_format.status();
  EXPECT_NE(bad_format.status().message().find(garbage), std::string::npos);

  auto bad_cwd = sup_->Spawn(1, LaunchSpec{{"/bin/true"}, {}, "", dir_ + "/no-such-dir"});
  ASSERT_FALSE(bad_cwd.ok());
  EXPECT_NE(bad_cwd.status().message().find("no-such-dir"), std::string::npos) << bad_cwd.status();

  auto empty = sup_->Spawn(1, LaunchSpec{});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);

  EXPECT_EQ(sup_->running_count(), 0u);
  // A failed spawn leaves nothing behind: the id is free and no on_exit follows.
  LaunchSpec ok = Sh("pwd >&3");
  ok.cwd = dir_;
  Spawn(1, ok);
  ASSERT_TRUE(WaitExit(1));
  EXPECT_EQ(exits_.size(), 1u);
  EXPECT_EQ(events_[1], std::vector<std::string>{dir_});
}

TEST_F(ProcessSupervisorTest, CallbacksMayReenter) {
  // Stop from on_event_line, respawn the same id from on_exit.
  on_event_hook_ = [this](Id id, const std::string& line) {
    if (line == "stop me") sup_->Stop(id, 2000ms);
  };
  int respawned = 0;
  on_exit_hook_ = [&](Id id, ProcessExit) {
    if (respawned++ == 0) {
      auto pid = sup_->Spawn(id, Sh("echo second >&3; exit 4"));
      EXPECT_TRUE(pid.ok()) << pid.status();
    }
  };
  Spawn(1, Sh("echo 'stop me' >&3; exec sleep 30"));
  ASSERT_TRUE(RunUntil([&] { return respawned == 2; }));
  EXPECT_EQ(events_[1], (std::vector<std::string>{"stop me", "second"}));
  EXPECT_EQ(exits_[1].exit_code, 4);
}

TEST_F(ProcessSupervisorTest, WorkerSignalStateDoesNotLeakIntoChildren) {
  // The worker may block SIGTERM/SIGCHLD and ignore SIGINT; ranks must start with defaults. With
  // SIGCHLD blocked here, exits are found by the supervisor's fallback poll.
  sigset_t block, saved;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGCHLD);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &block, &saved), 0);
  struct sigaction ign {}, old_int {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGINT, &ign, &old_int);

  Spawn(1, Sh("echo ready >&3; exec sleep 30"));
  Spawn(2, Sh("kill -INT $$; exit 0"));
  ASSERT_TRUE(WaitEvents(1, 1));
  sup_->Stop(1, 3000ms);
  bool exited = RunUntil([&] { return exits_.size() == 2; }, 2500ms);

  ::sigaction(SIGINT, &old_int, nullptr);
  sup_.reset();
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  ASSERT_TRUE(exited);
  EXPECT_EQ(exits_[1].signal, SIGTERM) << "SIGTERM was blocked in the child";
  EXPECT_EQ(exits_[2].signal, SIGINT) << "SIGINT was ignored in the child";
}

TEST_F(ProcessSupervisorTest, DestructorKillsEveryGroup) {
  pid_t leader = Spawn(1, Sh("sleep 30 & echo $! >&3; wait"));
  ASSERT_TRUE(WaitEvents(1, 1));
  pid_t grandchild = StrayFromEvent(1, 0);
  sup_.reset();
  EXPECT_TRUE(WaitDead(leader, 1s));
  EXPECT_TRUE(WaitDead(grandchild, 1s));
  EXPECT_TRUE(exits_.empty()) << "no callbacks after destruction";
  io_.run_for(50ms);  // queued handlers of the dead supervisor must be harmless
  EXPECT_TRUE(exits_.empty());
}

TEST_F(ProcessSupervisorTest, KillAllSigkillsEveryGroup) {
  Spawn(1, Sh("exec sleep 30"));
  Spawn(2, Sh("trap '' TERM; exec sleep 30"));
  sup_->KillAll();
  ASSERT_TRUE(RunUntil([&] { return exits_.size() == 2; }));
  EXPECT_EQ(exits_[1].signal, SIGKILL);
  EXPECT_EQ(exits_[2].signal, SIGKILL);
}

// The rank must die with the thread that spawned it. A helper process plays the worker: it spawns
// `sleep`, reports its pid and exits without any cleanup.
TEST(ProcessSupervisorPdeathsigTest, ChildDiesWithTheWorker) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t helper = ::fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    ::close(fds[0]);
    boost::asio::io_context io;
    ProcessSupervisor sup(io, {});
    auto pid = sup.Spawn(1, LaunchSpec{{"sleep", "30"}, {}, "", ""});
    pid_t reported = pid.ok() ? *pid : -1;
    ssize_t ignored = ::write(fds[1], &reported, sizeof(reported));
    (void)ignored;
    ::_exit(0);  // no destructors: only PR_SET_PDEATHSIG can kill the sleep
  }
  ::close(fds[1]);
  pid_t rank = -1;
  ASSERT_EQ(::read(fds[0], &rank, sizeof(rank)), static_cast<ssize_t>(sizeof(rank)));
  ::close(fds[0]);
  int status;
  ::waitpid(helper, &status, 0);
  ASSERT_GT(rank, 0);
  bool died = WaitDead(rank, 2s);
  KillIfAlive(rank);
  EXPECT_TRUE(died) << "the rank outlived its worker";
}

}  // namespace
}  // namespace eft::worker
