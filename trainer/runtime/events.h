// Events a rank reports to its worker: the rank protocol's typed events (common/rank_protocol.h),
// one JSON object per line on EFT_EVENTS_FD, e.g. {"event":"step","step":120,"loss":1.83,...}. Each
// line goes out in a single write(), so lines from several ranks sharing a pipe never interleave. A
// reader that went away is not an error.
#pragma once

#include <functional>
#include <string>

#include "common/rank_protocol.h"

namespace eft::trainer {

class EventWriter {
 public:
  explicit EventWriter(int fd) : fd_(fd) {}
  bool enabled() const { return fd_ >= 0; }
  void Emit(const rank::Event& event);
  // Every event emitted from here on is also handed to `observer` (with or without an fd), on the
  // emitting thread, before it is written: rank 0's TensorBoard run (trainer/tracking/). Set it
  // before events are emitted from more than one thread.
  void SetObserver(std::function<void(const rank::Event&)> observer) { observer_ = std::move(observer); }

 private:
  int fd_;
  std::function<void(const rank::Event&)> observer_;
};

// "1h02m03s", "4m05s", "12s".
std::string FormatDuration(double seconds);

}  // namespace eft::trainer
