// Clock: the source of time for everything that schedules or times out, behind an interface so
// that tests can drive time by hand (ManualClock) instead of sleeping.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

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
  SteadyTime Now() const override;
  int64_t WallMillis() const override;
  void Advance(Duration d);

 private:
  mutable std::mutex mu_;
  Duration elapsed_{0};
  int64_t wall_millis_;
};

inline int64_t ToMillis(Duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

}  // namespace eft
