#include "trainer/runtime/events.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace eft::trainer {

void EventWriter::Emit(const rank::Event& event) {
  if (observer_) observer_(event);
  if (fd_ < 0) return;
  std::string line = rank::EncodeEvent(event) + "\n";
  ssize_t n;
  do {
    n = ::write(fd_, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EPIPE) fd_ = -1;  // the worker is gone; training goes on
}

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0)) return "?";
  long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm%02lds", s / 3600, (s / 60) % 60, s % 60);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lds", s);
  }
  return buf;
}

}  // namespace eft::trainer
