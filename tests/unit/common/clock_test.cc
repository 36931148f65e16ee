#include "common/clock.h"

#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace eft {
namespace {

using namespace std::chrono_literals;

TEST(ManualClockTest, StandsStillUntilAdvanced) {
  ManualClock clock(1000);
  SteadyTime t0 = clock.Now();
  EXPECT_EQ(clock.Now(), t0);
  EXPECT_EQ(clock.WallMillis(), 1000);
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(clock.Now(), t0);
  EXPECT_EQ(clock.WallMillis(), 1000);
}

TEST(ManualClockTest, AdvanceMovesBothClocks) {
  ManualClock clock(1000);
  SteadyTime t0 = clock.Now();
  clock.Advance(1500ms);
  EXPECT_EQ(clock.Now() - t0, Duration(1500ms));
  EXPECT_EQ(clock.WallMillis(), 2500);
  clock.Advance(3s);
  EXPECT_EQ(ToMillis(clock.Now() - t0), 4500);
  EXPECT_EQ(clock.WallMillis(), 5500);
  clock.Advance(0ms);
  EXPECT_EQ(clock.WallMillis(), 5500);
}

TEST(ManualClockTest, DefaultWallTimeIsARealisticDate) {
  ManualClock clock;
  EXPECT_EQ(clock.WallMillis(), 1'700'000'000'000);  // Nov 2023: timestamps render as real dates
}

TEST(ManualClockTest, UsableThroughTheInterface) {
  ManualClock manual;
  Clock* clock = &manual;
  SteadyTime t0 = clock->Now();
  manual.Advance(250ms);
  EXPECT_EQ(ToMillis(clock->Now() - t0), 250);
}

TEST(ManualClockTest, ConcurrentAdvancesAllCount) {
  ManualClock clock(0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&clock] {
      for (int i = 0; i < 1000; ++i) {
        clock.Advance(1ms);
        (void)clock.Now();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(clock.WallMillis(), 4000);
}

TEST(RealClockTest, NowIsMonotonic) {
  RealClock* clock = RealClock::Get();
  SteadyTime prev = clock->Now();
  for (int i = 0; i < 100000; ++i) {
    SteadyTime now = clock->Now();
    ASSERT_GE(now, prev);
    prev = now;
  }
  SteadyTime before = clock->Now();
  std::this_thread::sleep_for(20ms);
  EXPECT_GE(clock->Now() - before, Duration(20ms));
}

TEST(RealClockTest, WallMillisIsSystemTime) {
  using namespace std::chrono;
  int64_t before = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  int64_t wall = RealClock::Get()->WallMillis();
  int64_t after = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  EXPECT_GE(wall, before);
  EXPECT_LE(wall, after);
}

TEST(RealClockTest, GetIsASingleton) { EXPECT_EQ(RealClock::Get(), RealClock::Get()); }

TEST(ClockTest, ToMillisTruncates) {
  EXPECT_EQ(ToMillis(1500us), 1);
  EXPECT_EQ(ToMillis(2s), 2000);
  EXPECT_EQ(ToMillis(Duration::zero()), 0);
  EXPECT_EQ(ToMillis(-3ms), -3);
}

}  // namespace
}  // namespace eft

namespace eft {
namespace {

TEST(SecondsTextTest, RoundsToATenth) {
  EXPECT_EQ(SecondsText(std::chrono::milliseconds(3100)), "3.1 s");
  EXPECT_EQ(SecondsText(std::chrono::milliseconds(0)), "0.0 s");
  EXPECT_EQ(SecondsText(std::chrono::milliseconds(30049)), "30.0 s");
  EXPECT_EQ(SecondsText(std::chrono::milliseconds(125000)), "125.0 s");
}

}  // namespace
}  // namespace eft
