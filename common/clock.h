// Clock: the source of time for everything that schedules or times out, behind an interface so
// that tests can drive time by hand (ManualClock) instead of sleeping.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace eft {

using SteadyTime = std::chrono::steady_clock::time_point;
using Duration = std::chrono::steady_clock::duration;

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time, for timeouts and intervals.
  virtual SteadyTime Now() const = 0;
  // Wall-clock time in milliseconds since the Unix epoch, for what is stored and shown.
  virtual int64_t WallMillis() const = 0;
};

class RealClock final : public Clock {
 public:
  SteadyTime Now() const override { return std::chrono::steady_clock::now(); }
  int64_t WallMillis() const override;
  static RealClock* Get();
};

// Time moves only when Advance() is called. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t wall_millis = 1'700'000'000'000) : wall_millis_(wall_millis) {}
  SteadyTime Now() const override EXCLUDES(mu_);
  int64_t WallMillis() const override EXCLUDES(mu_);
  void Advance(Duration d) EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  Duration elapsed_ GUARDED_BY(mu_){0};
  const int64_t wall_millis_;  // the wall clock at elapsed_ == 0; never changes
};

inline int64_t ToMillis(Duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }
// "3.1 s": a duration as reasons and logs word it, to a tenth of a second.
std::string SecondsText(std::chrono::milliseconds d);

}  // namespace eft
