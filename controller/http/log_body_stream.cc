#include "controller/http/log_body_stream.h"

#include "common/logging.h"

namespace eft::controller::http {

namespace {

std::string Prefix(int attempt, int rank) {
  return "[attempt " + std::to_string(attempt) + " rank " + std::to_string(rank) + "] ";
}

}  // namespace

std::string LogLinePrefixer::Add(const v1::LogChunk& chunk) {
  std::string& buf = partial_[{chunk.attempt(), chunk.rank()}];
  buf += chunk.data();
  std::string out;
  size_t start = 0;
  size_t nl;
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    out += Prefix(chunk.attempt(), chunk.rank());
    out.append(buf, start, nl + 1 - start);
    start = nl + 1;
  }
  buf.erase(0, start);
  // A rank that writes megabytes without a newline (a progress bar with \r) must not grow this
  // buffer without bound: past the cap, the partial line goes out as a line of its own.
  if (buf.size() > kMaxPartialLine) {
    out += Prefix(chunk.attempt(), chunk.rank()) + buf + "\n";
    buf.clear();
  }
  return out;
}

std::string LogLinePrefixer::Flush() {
  std::string out;
  for (auto& [key, rest] : partial_) {
    if (!rest.empty()) out += Prefix(key.first, key.second) + rest + "\n";
    rest.clear();
  }
  return out;
}

LogBodyStream::LogBodyStream(LogFollower follower, bool prefix_lines)
    : follower_(std::move(follower)), prefix_lines_(prefix_lines) {}

BodyStream::Piece LogBodyStream::Pull() {
  Piece piece;
  if (done_) {
    piece.end = true;
    return piece;
  }
  auto step = follower_.Poll([&](v1::LogChunk&& chunk) {
    if (prefix_lines_) {
      piece.data += prefixer_.Add(chunk);
    } else {
      piece.data += chunk.data();
    }
    return true;
  });
  if (!step.ok()) {
    // The 200 status is already on the wire, so the only way left to tell the reader is in band.
    EFT_LOG(WARNING) << "log stream ended early: " << step.status();
    piece.data += prefixer_.Flush() + "[eft: log stream ended early: " + step.status().ToString() + "]\n";
    piece.end = done_ = true;
    return piece;
  }
  switch (*step) {
    case LogFollower::Step::kDone:
      piece.data += prefixer_.Flush();
      piece.end = done_ = true;
      break;
    case LogFollower::Step::kAgain:
      break;
    case LogFollower::Step::kWait:
      piece.retry = follower_.options().poll_interval;
      break;
  }
  return piece;
}

}  // namespace eft::controller::http
