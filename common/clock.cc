#include "common/clock.h"

#include <cstdio>

namespace eft {

int64_t RealClock::WallMillis() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

RealClock* RealClock::Get() {
  static RealClock clock;
  return &clock;
}

SteadyTime ManualClock::Now() const {
  MutexLock lock(&mu_);
  return SteadyTime(elapsed_);
}

int64_t ManualClock::WallMillis() const {
  MutexLock lock(&mu_);
  return wall_millis_ + ToMillis(elapsed_);
}

void ManualClock::Advance(Duration d) {
  MutexLock lock(&mu_);
  elapsed_ += d;
}

std::string SecondsText(std::chrono::milliseconds d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return text;
}

}  // namespace eft
