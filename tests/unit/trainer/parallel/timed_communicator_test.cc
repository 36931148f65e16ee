// TimedCommunicator counts the time the caller is blocked in collectives, and only that: a rank that
// waits for a late peer sees the wait; work done between starting an asynchronous collective and
// waiting for it does not count.
#include "trainer/parallel/timed_communicator.h"

#include <chrono>

#include <gtest/gtest.h>

#include "tests/unit/trainer/parallel/rank_threads.h"

namespace eft::trainer {
namespace {

// Stands in for compute: the thread is busy (not blocked in a collective) for `seconds`.
void Busy(double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }

TEST(TimedCommunicator, AWaitForALatePeerIsCounted) {
  std::vector<double> blocked(2);
  RunRankComms(2, [&](std::unique_ptr<Communicator> inner) {
    TimedCommunicator comm(std::move(inner));
    if (comm.rank() == 1) Busy(0.4);  // rank 0 waits for it in the all-reduce
    at::Tensor t = at::ones({4});
    comm.AllReduceSum(t);
    EXPECT_TRUE(at::equal(t, at::full({4}, 2.0)));
    blocked[comm.rank()] = comm.blocked_seconds();
  });
  // Scheduling noise on a loaded 2-core machine can add tens of ms, never remove the 0.4 s wait.
  EXPECT_GE(blocked[0], 0.35);
  EXPECT_LT(blocked[1], 0.3);
}

TEST(TimedCommunicator, OverlappedWorkIsNotCountedButTheWaitIs) {
  std::vector<double> blocked(2);
  RunRankComms(2, [&](std::unique_ptr<Communicator> inner) {
    TimedCommunicator comm(std::move(inner));
    at::Tensor full = at::arange(8, at::kFloat), shard = at::empty({4});
    // Rank 1 starts late, so rank 0's collective completes only ~0.5 s after rank 0 started it;
    // rank 0 computes 0.3 s of that and blocks for the rest in wait().
    if (comm.rank() == 1) Busy(0.5);
    auto wait = comm.ReduceScatterSumAsync(full, shard);
    if (comm.rank() == 0) Busy(0.3);
    wait();
    EXPECT_TRUE(at::equal(shard, at::arange(4, at::kFloat).add(4.0 * comm.rank()).mul(2)));
    blocked[comm.rank()] = comm.blocked_seconds();
  });
  EXPECT_GE(blocked[0], 0.15);
  EXPECT_LT(blocked[0], 0.45);  // not the whole 0.5 s: the 0.3 s of work overlapped
  EXPECT_LT(blocked[1], 0.3);
}

}  // namespace
}  // namespace eft::trainer
