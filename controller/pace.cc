// Controller: fast heartbeats while a node's jobs stop or start (docs/architecture.md, "Fast
// heartbeats"). Workers pull their desired state, so each hop of a planned resize (the stop request
// reaching the ranks, the new ranks reaching their workers, their first step reaching the
// controller) waits for a heartbeat. The reply to every Register/Heartbeat says how long the worker
// waits before the next one: shorter for the nodes a change involves, the normal interval again
// once the change is over, so the cluster-wide heartbeat load stays what heartbeat_interval says.
#include <algorithm>

#include "controller/controller.h"

namespace eft::controller {

std::chrono::milliseconds Controller::HeartbeatIntervalLocked(const NodeEntry& node) const {
  if (config_.transition_heartbeat_interval >= config_.heartbeat_interval) return config_.heartbeat_interval;
  if (clock_->Now() < node.fast_until) return config_.transition_heartbeat_interval;
  // A live rank nobody wants any more is being stopped: its exit frees the slots the next attempt
  // waits for, and the node then learns at once where it goes next.
  for (const auto& r : node.reported) {
    if (r.state() != v1::RANK_STATE_RUNNING && r.state() != v1::RANK_STATE_STOPPING) continue;
    const JobEntry* j = jobs_.Find(r.key().job_id());
    const bool desired = j != nullptr && j->active() && j->current() && j->current()->number == r.key().attempt();
    if (!desired) return config_.transition_heartbeat_interval;
  }
  return config_.heartbeat_interval;
}

void Controller::ExpectTransitionLocked(const std::vector<std::string>& nodes) {
  if (config_.transition_heartbeat_interval >= config_.heartbeat_interval) return;
  const SteadyTime until = clock_->Now() + config_.transition_window;
  for (const auto& name : nodes) {
    auto it = nodes_.find(name);
    if (it != nodes_.end()) it->second.fast_until = std::max(it->second.fast_until, until);
  }
}

void Controller::TransitionDoneLocked(const AttemptRecord& attempt) {
  // Another change on one of these nodes keeps it fast through its stopping ranks; one that is only
  // expected there falls back to the normal interval, which costs it at most one normal hop.
  for (const auto& name : attempt.nodes) {
    auto it = nodes_.find(name);
    if (it != nodes_.end()) it->second.fast_until = SteadyTime{};
  }
}

}  // namespace eft::controller
