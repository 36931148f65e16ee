// Stopwatch: the seconds since it started, read on a Clock (common/clock.h). The trainer times its
// steps, saves, evaluations and waits with it, on the clock Trainer::Create was given, so a test
// that hands it a ManualClock decides every duration it reports.
#pragma once

#include <chrono>

#include "common/clock.h"

namespace eft {

class Stopwatch {
 public:
  // `clock` is not owned.
  explicit Stopwatch(const Clock* clock = RealClock::Get()) : clock_(clock), start_(clock->Now()) {}

  double Seconds() const { return std::chrono::duration<double>(clock_->Now() - start_).count(); }

 private:
  const Clock* clock_;
  SteadyTime start_;
};

}  // namespace eft
