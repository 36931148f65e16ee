#include "worker/rank_ledger.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/worker/process_test_util.h"

namespace eft::worker {
namespace {

using namespace std::chrono_literals;
using testing::IsDead;
using testing::KillIfAlive;
using testing::ReadWholeFile;
using testing::WaitDead;
using testing::WriteWholeFile;

class RankLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir();
    ASSERT_FALSE(dir_.empty());
    path_ = dir_ + "/state/ranks.ledger";  // the directory does not exist yet
  }

  void TearDown() override {
    for (pid_t pid : strays_) KillIfAlive(pid);
    for (pid_t pid : children_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Starts argv as the leader of a new process group, as the supervisor would, with its stdout on a
  // pipe. Returns the leader's pid; the first line it prints (if `want_line`) goes to *line.
  pid_t StartGroup(const std::vector<std::string>& argv, std::string* line = nullptr) {
    int fds[2];
    if (::pipe(fds) != 0) return -1;
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::close(fds[1]);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    if (pid > 0) {
      ::setpgid(pid, pid);  // whoever runs first, the group exists before we signal it
      children_.push_back(pid);
    }
    if (line != nullptr) *line = ReadLine(fds[0]);
    ::close(fds[0]);
    return pid;
  }
  pid_t StartSh(const std::string& script, std::string* line = nullptr) {
    return StartGroup({"/bin/sh", "-c", script}, line);
  }

  static std::string ReadLine(int fd) {
    std::string out;
    char c;
    pollfd p{fd, POLLIN, 0};
    while (::poll(&p, 1, 3000) > 0 && ::read(fd, &c, 1) == 1 && c != '\n') out += c;
    return out;
  }

  // Leader pid plus the pid of a `sleep` it started in its group.
  std::pair<pid_t, pid_t> StartGroupWithGrandchild() {
    std::string line;
    pid_t leader = StartSh("sleep 30 & echo $!; exec sleep 30", &line);
    pid_t grandchild = line.empty() ? -1 : static_cast<pid_t>(std::stol(line));
    strays_.push_back(grandchild);
    return {leader, grandchild};
  }

  std::string dir_, path_;
  std::vector<pid_t> children_;  // ours to reap
  std::vector<pid_t> strays_;    // grandchildren: kill only
};

TEST_F(RankLedgerTest, MissingFileIsAnEmptyLedger) {
  RankLedger ledger(path_);
  auto killed = ledger.KillLeftovers();
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 0);
}

TEST_F(RankLedgerTest, RestartedWorkerKillsRecordedGroup) {
  auto [leader, grandchild] = StartGroupWithGrandchild();
  ASSERT_GT(grandchild, 0);
  ASSERT_TRUE(RankLedger(path_).Record(leader).ok());

  RankLedger after_restart(path_);
  auto killed = after_restart.KillLeftovers();
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 1);
  EXPECT_TRUE(WaitDead(leader, 1s));
  EXPECT_TRUE(WaitDead(grandchild, 1s));

  auto again = after_restart.KillLeftovers();  // the ledger was emptied
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
  // Atomic rewrite leaves no temp file behind.
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/state")) files.push_back(e.path().filename());
  EXPECT_EQ(files, std::vector<std::string>{"ranks.ledger"});
}

TEST_F(RankLedgerTest, ForgottenGroupIsLeftAlone) {
  pid_t a = StartSh("exec sleep 30");
  pid_t b = StartSh("exec sleep 30");
  RankLedger ledger(path_);
  ASSERT_TRUE(ledger.Record(a).ok());
  ASSERT_TRUE(ledger.Record(b).ok());
  ASSERT_TRUE(ledger.Record(b).ok());  // recording twice keeps one entry
  ASSERT_TRUE(ledger.Forget(a).ok());
  ASSERT_TRUE(ledger.Forget(a).ok());  // forgetting an unknown pid is fine
  auto killed = ledger.KillLeftovers();
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 1);
  EXPECT_TRUE(WaitDead(b, 1s));
  EXPECT_FALSE(IsDead(a));
}

TEST_F(RankLedgerTest, RecycledPidIsNotKilled) {
  pid_t pid = StartSh("exec sleep 30");
  RankLedger ledger(path_);
  ASSERT_TRUE(ledger.Record(pid).ok());
  // Pretend the recorded process started at another time: the pid now belongs to someone else.
  std::string text = ReadWholeFile(path_);
  std::string needle = std::to_string(pid) + " ";
  size_t at = text.find("\n" + needle);
  ASSERT_NE(at, std::string::npos) << text;
  size_t num = at + 1 + needle.size();
  size_t end = text.find('\n', num);
  unsigned long long start = std::stoull(text.substr(num, end - num));
  text.replace(num, end - num, std::to_string(start + 1));
  WriteWholeFile(path_, text);

  auto killed = ledger.KillLeftovers();
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 0);
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(IsDead(pid));
}

TEST_F(RankLedgerTest, KillsGroupWhoseLeaderIsGone) {
  auto [leader, grandchild] = StartGroupWithGrandchild();
  ASSERT_GT(grandchild, 0);
  RankLedger ledger(path_);
  ASSERT_TRUE(ledger.Record(leader).ok());
  ::kill(leader, SIGKILL);  // the leader only: the grandchild stays in the group
  ASSERT_EQ(::waitpid(leader, nullptr, 0), leader);
  children_.clear();
  ASSERT_FALSE(IsDead(grandchild));

  auto killed = ledger.KillLeftovers();
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 1);
  EXPECT_TRUE(WaitDead(grandchild, 1s));
}

TEST_F(RankLedgerTest, ParsesStartTimeOfProcessWithAwkwardName) {
  // comm is "(name)" in /proc/<pid>/stat; a name with ") " must not shift the fields.
  std::string awkward = dir_ + "/a) 1 2 (b";
  std::filesystem::copy_file("/bin/sleep", awkward);
  pid_t pid = StartGroup({awkward, "30"});
  std::this_thread::sleep_for(50ms);  // let exec happen so comm is the awkward name
  ASSERT_NE(ReadWholeFile("/proc/" + std::to_string(pid) + "/stat").find("(a) 1 2 (b)"), std::string::npos);
  RankLedger ledger(path_);
  ASSERT_TRUE(ledger.Record(pid).ok());
  // A misparse would still match itself on KillLeftovers, so check the value against an
  // independent clock: the process started a moment ago, i.e. about uptime * CLK_TCK.
  std::istringstream entries(ReadWholeFile(path_));
  std::string line;
  unsigned long long recorded = 0;
  while (std::getline(entries, line)) {
    if (line.rfind(std::to_string(pid) + " ", 0) == 0) recorded = std::stoull(line.substr(line.find(' ') + 1));
  }
  double uptime_s = std::stod(ReadWholeFile("/proc/uptime"));
  double now_ticks = uptime_s * static_cast<double>(::sysconf(_SC_CLK_TCK));
  EXPECT_NEAR(static_cast<double>(recorded), now_ticks, 3.0 * ::sysconf(_SC_CLK_TCK));
  auto killed = ledger.KillLeftovers();
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 1);
  EXPECT_TRUE(WaitDead(pid, 1s));
}

TEST_F(RankLedgerTest, CorruptFileIsReportedSalvagedAndReplaced) {
  pid_t pid = StartSh("exec sleep 30");
  RankLedger ledger(path_);
  ASSERT_TRUE(ledger.Record(pid).ok());
  std::string valid = ReadWholeFile(path_);
  WriteWholeFile(path_, "{\"not\": \"a ledger\"\n" + valid + "12 nonsense\n\x01\x02\n");

  auto killed = ledger.KillLeftovers();
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 1) << "the valid entry among the garbage is still honoured";
  EXPECT_TRUE(WaitDead(pid, 1s));

  WriteWholeFile(path_, std::string("\0\0garbage", 9));
  killed = ledger.KillLeftovers();
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 0);
  // Replaced by a well-formed empty ledger that works as usual.
  pid_t next = StartSh("exec sleep 30");
  ASSERT_TRUE(ledger.Record(next).ok());
  EXPECT_EQ(ReadWholeFile(path_).find("garbage"), std::string::npos);
  killed = ledger.KillLeftovers();
  ASSERT_TRUE(killed.ok());
  EXPECT_EQ(*killed, 1);
}

TEST_F(RankLedgerTest, RecordingAMissingProcessFails) {
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  Status s = RankLedger(path_).Record(gone);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(std::to_string(gone)), std::string::npos) << s;
}

}  // namespace
}  // namespace eft::worker
