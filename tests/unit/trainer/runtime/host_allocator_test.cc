// ConfigureHostAllocator: the allocation pattern of a training step (the same few-MiB buffers
// allocated, touched and freed again and again) costs page faults on every round with glibc's
// defaults and none once configured; a user's own malloc settings are left alone. Each case runs in
// a forked child, because malloc's settings are process-wide and cannot be undone.
#include "trainer/runtime/host_allocator.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace eft::trainer {
namespace {

long MinorFaults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// One "step": `count` buffers of `bytes`, written, then freed.
void Round(int count, size_t bytes) {
  std::vector<char*> blocks;
  for (int i = 0; i < count; ++i) {
    char* p = static_cast<char*>(std::malloc(bytes));
    std::memset(p, i, bytes);
    blocks.push_back(p);
  }
  volatile char sink = 0;
  for (char* p : blocks) sink = sink + p[12345];
  for (char* p : blocks) std::free(p);
}

// Page faults of the third round, in a child process that first sets `env` (NAME=value or "") and
// calls ConfigureHostAllocator when `configure`; a round is `count` buffers of `bytes` (default: 20
// of 1 MiB). -1 when the child failed.
long FaultsOfAThirdRound(bool configure, const char* env, int count = 20, size_t bytes = 1 << 20) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    if (env[0] != '\0') ::putenv(const_cast<char*>(env));
    if (configure && !ConfigureHostAllocator().ok()) ::_exit(2);
    Round(count, bytes);
    Round(count, bytes);
    const long before = MinorFaults();
    Round(count, bytes);
    const long faults = MinorFaults() - before;
    ::write(fds[1], &faults, sizeof(faults));
    ::_exit(0);
  }
  ::close(fds[1]);
  long faults = -1;
  if (::read(fds[0], &faults, sizeof(faults)) != sizeof(faults)) faults = -1;
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? faults : -1;
}

// 20 MiB touched = 5120 pages of 4 KiB: with the defaults every round maps them afresh.
TEST(HostAllocator, RepeatedLargeBuffersStopCostingPageFaults) {
  const long defaults = FaultsOfAThirdRound(false, "");
  const long configured = FaultsOfAThirdRound(true, "");
  ASSERT_GE(defaults, 0);
  ASSERT_GE(configured, 0);
  EXPECT_GE(defaults, 5000) << "glibc's defaults return the buffers to the kernel every round";
  EXPECT_LT(configured, 200) << "configured, the third round reuses the first round's pages";
}

// Blocks above glibc's mmap threshold ceiling (32 MiB): a 151,680-token vocabulary's embedding
// gradient at hidden 64 is 37 MiB, at 0.5B scale 520 MiB. 2 x 48 MiB = 24,576 pages per round.
TEST(HostAllocator, BuffersAboveTheMmapThresholdCeilingAreReusedToo) {
  const long defaults = FaultsOfAThirdRound(false, "", 2, size_t{48} << 20);
  const long configured = FaultsOfAThirdRound(true, "", 2, size_t{48} << 20);
  ASSERT_GE(defaults, 0);
  ASSERT_GE(configured, 0);
  EXPECT_GE(defaults, 24000) << "glibc maps blocks this large afresh for every allocation";
  EXPECT_LT(configured, 200) << "configured, they come from the heap and are reused";
}

TEST(HostAllocator, AUsersOwnSettingsWin) {
  EXPECT_GE(FaultsOfAThirdRound(true, "EFT_MALLOC_DEFAULTS=1"), 5000);
  // Any MALLOC_* variable means the user tuned malloc: nothing is changed.
  EXPECT_GE(FaultsOfAThirdRound(true, "MALLOC_ARENA_MAX=2"), 5000);
}

}  // namespace
}  // namespace eft::trainer
