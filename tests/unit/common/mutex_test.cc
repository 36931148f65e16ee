#include "common/mutex.h"

#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/thread_annotations.h"

namespace eft {
namespace {

using namespace std::chrono_literals;

// What the tests share between threads, annotated as production code is.
struct Shared {
  Mutex mu;
  CondVar cv;
  bool ready GUARDED_BY(mu) = false;
  int count GUARDED_BY(mu) = 0;

  void SetReady() EXCLUDES(mu) {
    MutexLock lock(&mu);
    ready = true;
    cv.NotifyAll();
  }
};

TEST(MutexTest, MutexLockExcludesOtherThreads) {
  Shared s;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&s] {
      for (int i = 0; i < 10000; ++i) {
        MutexLock lock(&s.mu);
        ++s.count;
      }
    });
  }
  for (auto& t : threads) t.join();
  MutexLock lock(&s.mu);
  EXPECT_EQ(s.count, 40000);
}

TEST(CondVarTest, WaitWithPredicateReturnsOnceItHolds) {
  Shared s;
  std::thread setter([&s] {
    std::this_thread::sleep_for(10ms);
    s.SetReady();
  });
  {
    MutexLock lock(&s.mu);
    s.cv.Wait(&s.mu, [&]() REQUIRES(s.mu) { return s.ready; });
    EXPECT_TRUE(s.ready);
    ++s.count;  // still held after the wait
  }
  setter.join();
}

TEST(CondVarTest, WaitWithPredicateDoesNotBlockWhenItAlreadyHolds) {
  Shared s;
  s.SetReady();
  MutexLock lock(&s.mu);
  s.cv.Wait(&s.mu, [&]() REQUIRES(s.mu) { return s.ready; });  // no notify will come
  EXPECT_TRUE(s.ready);
}

TEST(CondVarTest, WaitForReturnsTrueWhenNotifiedInTime) {
  Shared s;
  std::thread setter([&s] {
    std::this_thread::sleep_for(10ms);
    s.SetReady();
  });
  {
    MutexLock lock(&s.mu);
    EXPECT_TRUE(s.cv.WaitFor(&s.mu, 30s, [&]() REQUIRES(s.mu) { return s.ready; }));
  }
  setter.join();
}

TEST(CondVarTest, WaitForReturnsFalseAfterTheTimeout) {
  Shared s;
  MutexLock lock(&s.mu);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(s.cv.WaitFor(&s.mu, 20ms, [&]() REQUIRES(s.mu) { return s.ready; }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
  ++s.count;  // still held after the wait
}

}  // namespace
}  // namespace eft
