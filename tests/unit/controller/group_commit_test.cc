// GroupCommit (controller/group_commit.h) with real threads: concurrent callers share commits, every
// caller gets its own reply, and one caller alone commits alone.
#include "controller/group_commit.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace eft::controller {
namespace {

TEST(GroupCommitTest, ConcurrentCallersShareCommitsAndEachGetsItsReply) {
  using Batcher = GroupCommit<int, int>;
  std::mutex mu;
  std::vector<size_t> batch_sizes;
  std::atomic<int> in_commit{0};
  bool overlapped = false;
  Batcher batcher([&](const std::vector<Batcher::Item*>& batch) {
    if (in_commit.fetch_add(1) != 0) overlapped = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // an fsync
    for (auto* item : batch) item->reply = item->request * 10;
    {
      std::lock_guard<std::mutex> lock(mu);
      batch_sizes.push_back(batch.size());
    }
    in_commit.fetch_sub(1);
  });
  constexpr int kCallers = 16;
  std::vector<int> replies(kCallers, -1);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCallers; ++i) threads.emplace_back([&, i] { replies[i] = batcher.Run(i); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kCallers; ++i) EXPECT_EQ(replies[i], i * 10) << i;
  EXPECT_FALSE(overlapped) << "one commit at a time";
  size_t total = 0;
  for (size_t n : batch_sizes) total += n;
  EXPECT_EQ(total, static_cast<size_t>(kCallers)) << "every request committed exactly once";
  // 16 callers arriving within a 30 ms commit: far fewer commits than callers.
  EXPECT_LT(batch_sizes.size(), static_cast<size_t>(kCallers / 2)) << batch_sizes.size() << " commits";
}

TEST(GroupCommitTest, ALoneCallerCommitsAtOnce) {
  using Batcher = GroupCommit<std::string, std::string>;
  int commits = 0;
  Batcher batcher([&](const std::vector<Batcher::Item*>& batch) {
    ++commits;
    ASSERT_EQ(batch.size(), 1u);
    batch[0]->reply = "done: " + batch[0]->request;
  });
  EXPECT_EQ(batcher.Run("a"), "done: a");
  EXPECT_EQ(batcher.Run("b"), "done: b");
  EXPECT_EQ(commits, 2);
}

}  // namespace
}  // namespace eft::controller
