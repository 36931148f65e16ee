#include "controller/resize_policy.h"

#include <algorithm>
#include <sstream>
#include <string_view>

namespace eft::controller {
namespace {

constexpr std::string_view kResizedPrefix = "resized: ";
constexpr std::string_view kPreemptedPrefix = "preempted: ";

std::string OneDecimal(double seconds) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << seconds;
  return os.str();
}

std::string NodesText(int from, int to) {
  return std::to_string(from) + " -> " + std::to_string(to) + (to == 1 ? " node" : " nodes");
}

}  // namespace

GrowDecision DecideGrow(const GrowInput& in) {
  GrowDecision d;
  d.from_nodes = in.nodes;
  d.to_nodes = in.nodes;
  // Only a RUNNING job: a STARTING one has not shown that its ranks work, a RECOVERING one is
  // placed at the largest size that fits anyway.
  if (!in.running || !in.grow_enabled || in.nodes >= in.max_nodes || in.free_nodes.empty()) return d;

  const int to = std::min<int>(in.max_nodes, in.nodes + static_cast<int>(in.free_nodes.size()));
  if (in.last_resize_ms > 0 && in.now_ms < in.last_resize_ms + in.cooldown_ms) {
    d.reason = "cooldown: the last resize was " + OneDecimal((in.now_ms - in.last_resize_ms) / 1000.0) +
               " s ago, resources.resize_cooldown_seconds is " + OneDecimal(in.cooldown_ms / 1000.0);
    d.retry_at_ms = in.last_resize_ms + in.cooldown_ms;
    return d;
  }
  // A restart costs a rendezvous and a resume; near the end that is more than the extra nodes
  // would save. One checkpoint interval is the bound the spec states.
  if (in.checkpoint_every > 0 && in.total_steps > 0 && in.step > 0) {
    const int64_t left = std::max<int64_t>(0, in.total_steps - in.step);
    if (left <= in.checkpoint_every) {
      d.reason = "near the end: " + std::to_string(left) + " steps left, within one checkpoint interval (" +
                 std::to_string(in.checkpoint_every) + " steps)";
      return d;
    }
  }

  d.grow = true;
  d.to_nodes = to;
  d.added.assign(in.free_nodes.begin(), in.free_nodes.begin() + (to - in.nodes));
  std::string what;
  for (size_t i = 0; i < d.added.size(); ++i) {
    const std::string& n = d.added[i];
    const bool back = std::find(in.known_nodes.begin(), in.known_nodes.end(), n) != in.known_nodes.end();
    what += (i == 0 ? "" : i + 1 == d.added.size() ? " and " : ", ") + n + (back ? " is back" : " is available");
  }
  d.reason = what + ", " + NodesText(in.nodes, to);
  return d;
}

int64_t LastResizeMs(const std::vector<AttemptRecord>& attempts) {
  for (size_t i = attempts.size(); i-- > 1;) {
    if (attempts[i].nodes.size() != attempts[i - 1].nodes.size()) return attempts[i].start_ms;
  }
  return 0;
}

const char* ResizeReasonLabel(ResizeReason reason) {
  switch (reason) {
    case ResizeReason::kGrow:
      return "grow";
    case ResizeReason::kEvict:
      return "evict";
    case ResizeReason::kShrink:
      return "shrink";
  }
  return "grow";
}

std::string ResizedEventMessage(ResizeReason reason, const std::string& what) {
  return std::string(ResizeReasonLabel(reason)) + ": " + what;
}

std::optional<ResizeReason> ResizeReasonOf(const EventRecord& event) {
  if (event.type != kResizedEvent) return std::nullopt;
  for (ResizeReason r : kResizeReasons) {
    const std::string prefix = std::string(ResizeReasonLabel(r)) + ":";
    if (event.message.rfind(prefix, 0) == 0) return r;
  }
  return std::nullopt;
}

std::string ResizedEndReason(const std::string& what) { return std::string(kResizedPrefix) + what; }

bool EndedForResize(const AttemptRecord& attempt) { return attempt.end == v1::ATTEMPT_END_RESIZED; }

std::string PreemptedEndReason(const std::string& what) { return std::string(kPreemptedPrefix) + what; }

bool EndedForPlannedStop(const AttemptRecord& attempt) {
  return attempt.end == v1::ATTEMPT_END_RESIZED || attempt.end == v1::ATTEMPT_END_PREEMPTED;
}

bool EndedUnplanned(const AttemptRecord& attempt) {
  switch (attempt.end) {
    case v1::ATTEMPT_END_RANK_FAILED:
    case v1::ATTEMPT_END_OUT_OF_MEMORY:
    case v1::ATTEMPT_END_NODE_LOST:
    case v1::ATTEMPT_END_RANK_LOST:
    case v1::ATTEMPT_END_PORT_BUSY:
      return true;
    default:
      return false;
  }
}

std::string EvictWhat(const std::string& node, int from, int to, int min_nodes) {
  std::string out = node + " drained with --evict, " + NodesText(from, to);
  if (to < min_nodes) out += ", below nodes.min " + std::to_string(min_nodes) + ": the job waits for nodes";
  return out;
}

}  // namespace eft::controller
