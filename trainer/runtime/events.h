// Events a rank reports to its worker: the rank protocol's typed events (common/rank_protocol.h),
// one JSON object per line on EFT_EVENTS_FD, e.g. {"event":"step","step":120,"loss":1.83,...}. Each
// line goes out in a single write(), so lines from several ranks sharing a pipe never interleave. A
// reader that went away is not an error.
#pragma once

#include <string>

#include "common/rank_protocol.h"

namespace eft::trainer {

class EventWriter {
 public:
  explicit EventWriter(int fd) : fd_(fd) {}
  bool enabled() const { return fd_ >= 0; }
  void Emit(const rank::Event& event);

 private:
  int fd_;
};

// "1h02m03s", "4m05s", "12s".
std::string FormatDuration(double seconds);

}  // namespace eft::trainer
