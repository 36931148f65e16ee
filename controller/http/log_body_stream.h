// LogBodyStream: GET /v1/jobs/{id}/logs as a text/plain body, pulled by the connection from its
// timers (see BodyStream), so a follow stream costs no thread while it waits for new lines.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "common/http/http_types.h"
#include "controller/log_follower.h"

namespace eft::controller::http {

using eft::http::BodyStream;

// Interleaved logs of several ranks are unreadable without their origin, so each line gets the
// prefix eftctl prints, "[attempt A rank R] ". Partial lines wait for their newline (per log).
class LogLinePrefixer {
 public:
  static constexpr size_t kMaxPartialLine = 64 * 1024;

  // Complete lines of this chunk (and earlier partial ones of the same log), prefixed.
  std::string Add(const v1::LogChunk& chunk);
  // What is left of unterminated lines, each prefixed and ended with a newline.
  std::string Flush();

 private:
  std::map<std::pair<int, int>, std::string> partial_;  // (attempt, rank) -> bytes after the last '\n'
};

class LogBodyStream final : public BodyStream {
 public:
  // `prefix_lines`: false sends the bytes as stored (one rank asked for).
  LogBodyStream(LogFollower follower, bool prefix_lines);
  Piece Pull() override;

 private:
  LogFollower follower_;
  bool prefix_lines_;
  LogLinePrefixer prefixer_;
  bool done_ = false;
};

}  // namespace eft::controller::http
