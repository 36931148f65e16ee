// LogFollower: the GetLogs loop of both APIs (gRPC JobService.GetLogs and REST .../logs), as a
// cursor that is polled instead of a loop that blocks, so the REST server can drive it from timers
// while gRPC drives it from its own handler thread.
//
// Each Poll hands every byte the controller stored since the last Poll, chunk by chunk in
// (attempt, rank) order, to `emit`. Without follow the cursor is done once everything present was
// sent. With follow it keeps going until the job is terminal and its logs stayed quiet for
// `quiet_period`: workers ship a rank's last lines shortly after it exits, so ending the stream the
// moment the job ends would lose them.
//
// It lives under controller/http/ only because that directory is where the REST work happens; it
// has no HTTP in it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "common/status.h"
#include "controller/controller.h"
#include "eft/v1/job.pb.h"

namespace eft::controller {

struct LogFollowerOptions {
  std::chrono::milliseconds poll_interval{200};  // how often a follower should be polled when idle
  std::chrono::milliseconds quiet_period{2000};
  size_t chunk_bytes = 64 * 1024;  // the most data one LogChunk carries
  // A Poll stops after about this many bytes (and says kAgain), so one stream cannot monopolise
  // the thread that polls it. The default is unlimited: gRPC writes chunk by chunk anyway.
  size_t max_bytes_per_poll = std::numeric_limits<size_t>::max();
};

class LogFollower {
 public:
  // Fails with NOT_FOUND when the job does not exist.
  static Result<LogFollower> Open(Controller* controller, const v1::GetLogsRequest& request,
                                  LogFollowerOptions options = {});

  enum class Step {
    kAgain,  // more data is ready now: poll again at once
    kWait,   // nothing new: poll again after options().poll_interval
    kDone,   // the stream is complete, or `emit` returned false
  };
  // `emit` returns false to stop (the client went away); Poll then returns kDone.
  Result<Step> Poll(const std::function<bool(v1::LogChunk&&)>& emit);

  const LogFollowerOptions& options() const { return options_; }

 private:
  LogFollower(Controller* controller, v1::GetLogsRequest request, LogFollowerOptions options);

  Controller* controller_;
  v1::GetLogsRequest request_;
  LogFollowerOptions options_;
  std::map<LogId, int64_t> sent_;  // bytes already emitted, per log
  std::chrono::steady_clock::time_point quiet_since_;
};

}  // namespace eft::controller
