// ProcessRankLauncher (worker/rank_launcher.h): the agent's rank launcher over the process supervisor,
// with real processes. Each rank is in the work dir's ledger exactly while it runs, and a new
// launcher first kills the groups a previous worker left recorded there.
#include "worker/rank_launcher.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "tests/unit/worker/process_test_util.h"

namespace eft::worker {
namespace {

using namespace std::chrono_literals;
using testing::ReadWholeFile;
using testing::WaitDead;

class ProcessRankLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir();
    ASSERT_FALSE(dir_.empty());
    ledger_ = dir_ + "/ranks.ledger";
  }
  void TearDown() override {
    launcher_.reset();  // SIGKILLs what still runs
    for (pid_t pid : children_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  Status Create() {
    RankLauncher::Callbacks callbacks;
    callbacks.on_event_line = [this](RankLauncher::Id id, const std::string& line) { events_[id].push_back(line); };
    callbacks.on_exit = [this](RankLauncher::Id id, ProcessExit exit) {
      exits_[id] = exit;
      ledger_at_exit_[id] = ReadWholeFile(ledger_);
    };
    auto made = ProcessRankLauncher::Create(io_, std::move(callbacks), ledger_);
    if (made.ok()) launcher_ = std::move(made).value();
    return made.status();
  }

  // Runs the io_context until `done` holds; false after `timeout`.
  bool RunUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      io_.run_one_for(10ms);
      if (io_.stopped()) io_.restart();
    }
    return true;
  }

  // Whether the ledger file `text` lists the group led by `pid`.
  static bool Lists(const std::string& text, pid_t pid) {
    return text.find("\n" + std::to_string(pid) + " ") != std::string::npos;
  }

  boost::asio::io_context io_;
  std::string dir_, ledger_;
  std::unique_ptr<RankLauncher> launcher_;
  std::map<RankLauncher::Id, std::vector<std::string>> events_;
  std::map<RankLauncher::Id, ProcessExit> exits_;
  std::map<RankLauncher::Id, std::string> ledger_at_exit_;
  std::vector<pid_t> children_;  // started by the test itself: ours to reap
};

TEST_F(ProcessRankLauncherTest, ARankIsInTheLedgerExactlyWhileItRuns) {
  ASSERT_TRUE(Create().ok());
  LaunchSpec spec;
  spec.argv = {"/bin/sh", "-c", R"(echo '{"event":"step","step":1}' >&"$EFT_EVENTS_FD"; exec sleep 30)"};
  spec.log_path = dir_ + "/rank.log";
  auto pid = launcher_->Launch(7, spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_TRUE(Lists(ReadWholeFile(ledger_), *pid));
  ASSERT_TRUE(RunUntil([&] { return !events_[7].empty(); }));
  EXPECT_EQ(events_[7], std::vector<std::string>{R"({"event":"step","step":1})"});

  launcher_->Stop(7, 5s);
  ASSERT_TRUE(RunUntil([&] { return exits_.count(7) > 0; }));
  EXPECT_EQ(exits_[7].signal, SIGTERM);
  EXPECT_TRUE(WaitDead(*pid, 1s));
  EXPECT_FALSE(Lists(ledger_at_exit_[7], *pid)) << "forgotten before the agent hears of the exit";

  auto failed = launcher_->Launch(8, LaunchSpec{{dir_ + "/no-such-program"}, {}, "", ""});
  EXPECT_FALSE(failed.ok());
  RunUntil([] { return false; }, 100ms);
  EXPECT_EQ(exits_.count(8), 0u) << "no exit follows a failed launch";
}

TEST_F(ProcessRankLauncherTest, ANewLauncherFirstKillsTheGroupsAPreviousWorkerLeft) {
  const pid_t leftover = ::fork();
  if (leftover == 0) {
    ::setpgid(0, 0);
    ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(leftover, 0);
  children_.push_back(leftover);
  ::setpgid(leftover, leftover);  // whoever runs first, the group exists before it is recorded
  ASSERT_TRUE(RankLedger(ledger_).Record(leftover).ok());

  ASSERT_TRUE(Create().ok());
  EXPECT_TRUE(WaitDead(leftover, 2s));
  EXPECT_FALSE(Lists(ReadWholeFile(ledger_), leftover));
}

TEST_F(ProcessRankLauncherTest, ALedgerItCannotUseFailsTheStart) {
  ledger_ = dir_;  // a directory
  Status s = Create();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cleaning up ranks of a previous worker"), std::string::npos) << s;
}

}  // namespace
}  // namespace eft::worker
