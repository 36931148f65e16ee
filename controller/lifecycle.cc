// Controller: the job state machine. Scheduling attempts, ending them, restart policy, node loss.
#include <algorithm>
#include <optional>
#include <set>
#include <cmath>
#include <cstring>
#include <sstream>

#include "common/logging.h"
#include "common/rank_protocol.h"
#include "controller/controller.h"
#include "controller/resize_policy.h"

namespace eft::controller {
namespace {

std::string JoinNodes(const std::vector<std::string>& nodes) {
  std::string out;
  for (const auto& n : nodes) out += (out.empty() ? "" : ",") + n;
  return out;
}

std::string Seconds(std::chrono::milliseconds ms) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << ms.count() / 1000.0 << " s";
  return os.str();
}

// "exited with code 78 (out of memory)": how OnRankExitLocked words an out-of-memory end.
std::string OutOfMemoryExit() {
  const int code = rank::ToInt(rank::ExitCode::kOutOfMemory);
  return "exited with code " + std::to_string(code) + " (" + rank::ExitCodeMeaning(code) + ")";
}

}  // namespace

std::chrono::milliseconds Controller::BackoffFor(int restarts) const {
  double ms = static_cast<double>(config_.restart_backoff_initial.count()) * std::pow(2.0, std::max(0, restarts - 1));
  return std::chrono::milliseconds(
      static_cast<long long>(std::min(ms, static_cast<double>(config_.restart_backoff_max.count()))));
}

void Controller::Tick() {
  MutexLock lock(&mu_);
  for (const auto& [name, why] : nodes_.Silent()) MarkNodeLostLocked(*nodes_.Find(name), why);
  ScheduleLocked();
  progress_.FlushIfDue();
  // A finished job's last steps and loss points go to the store (the next flush) before it leaves.
  jobs_.EvictFinished([&](const std::string& id) REQUIRES(mu_) { return progress_.Unsaved(id); });
}

void Controller::MarkNodeLostLocked(NodeEntry& node, const std::string& reason) {
  Status s = nodes_.MarkLost(node, reason);
  if (!s.ok()) {
    EFT_LOG(ERROR) << "node " << node.rec.name << ": could not persist LOST (" << s << "); retrying";
    return;
  }
  const NodeRecord& rec = node.rec;
  // Running attempts with ranks there end at once: not the job's fault, so no restart is counted.
  for (const auto& id : jobs_.index().ActiveOn(rec.name)) {
    JobEntry& j = jobs_.At(id);
    if (j.active()) (void)EndAttemptLocked(j, "node " + rec.name + " lost (" + reason + ")", v1::ATTEMPT_END_NODE_LOST,
                                           Outcome::kRestart);
  }
  // An attempt that just ended because its ranks failed was most likely cut off from this node.
  for (const auto& id : jobs_.index().Pending()) {
    JobEntry& j = jobs_.At(id);
    if (j.rec.state != v1::JOB_STATE_RECOVERING || !j.end_counted || !j.current()) continue;
    const auto& nodes = j.current()->nodes;
    if (std::find(nodes.begin(), nodes.end(), rec.name) == nodes.end()) continue;
    if (clock_->Now() < j.ended_at + config_.heartbeat_timeout + config_.heartbeat_interval) {
      ForgiveLastFailureLocked(j, "node " + rec.name + " lost (" + reason + ")");
    }
  }
}

void Controller::ForgiveLastFailureLocked(JobEntry& j, const std::string& cause) {
  // The ranks that failed were most likely cut off from the lost node, so the failure is the
  // node's, not the job's: refund the restart and skip the backoff.
  JobChange c{j.rec, {}, {}, {}};
  c.rec.restarts = std::max(0, c.rec.restarts - 1);
  c.rec.not_before_ms = 0;
  c.rec.reason = cause + "; " + c.rec.reason;
  AttemptRecord a = *j.current();
  a.end_reason += "; " + cause + " at the same time, so not counted against max_restarts";
  c.update_attempt = a;
  EventRecord e = jobs_.MakeEvent(j, "restart_reclassified",
                            "attempt " + std::to_string(a.number) + ": " + cause +
                                " right after its ranks failed; the failure is not counted against max_restarts");
  c.events.push_back(std::move(e));
  if (jobs_.Apply(j, std::move(c)).ok()) j.end_counted = false;
}

std::vector<NodeCapacity> Controller::CapacitiesLocked() const {
  std::map<std::string, std::vector<bool>> busy;
  for (const auto& [name, n] : nodes_.all()) busy[name].assign(std::max(0, n.rec.slots), false);
  auto mark = [&](const std::string& node, int slot) {
    auto it = busy.find(node);
    if (it != busy.end() && slot >= 0 && slot < static_cast<int>(it->second.size())) it->second[slot] = true;
  };
  for (const auto& id : jobs_.index().Active()) {
    const AttemptRecord& a = *jobs_.At(id).current();
    for (size_t i = 0; i < a.nodes.size() && i < a.slots.size(); ++i) {
      for (int slot : a.slots[i]) mark(a.nodes[i], slot);
    }
  }
  // Ranks still running that nobody wants any more (stopping) keep their GPUs until they are gone.
  for (const auto& [name, n] : nodes_.all()) {
    for (const auto& r : n.reported) {
      if (IsLive(r)) mark(name, r.slot());
    }
  }
  std::vector<NodeCapacity> out;
  for (const auto& [name, n] : nodes_.all()) {
    NodeCapacity c;
    c.name = name;
    // A node known from the database but not yet re-registered may still run ranks we cannot see.
    c.ready = n.known();
    c.drained = n.rec.drained || n.shutting_down;
    const auto& b = busy[name];
    for (int s = 0; s < static_cast<int>(b.size()); ++s) {
      if (!b[s]) c.free_slots.push_back(s);
    }
    out.push_back(std::move(c));
  }
  return out;
}

bool Controller::OldRanksLiveLocked(const JobEntry& job) const {
  for (const auto& [name, n] : nodes_.all()) {
    if (!n.ready) continue;
    for (const auto& r : n.reported) {
      if (r.key().job_id() == job.rec.id && IsLive(r)) return true;
    }
  }
  return false;
}

bool Controller::PreviousNodesSettledLocked(const JobEntry& job) const {
  if (!job.current()) return true;
  for (const auto& name : job.current()->nodes) {
    const NodeEntry* n = nodes_.Find(name);
    // A heartbeat, not a registration: only a heartbeat delivers the events the worker held, such as
    // the stop checkpoint of a rank that exited while this controller was down.
    if (n != nullptr && n->ready && n->last_report < job.ended_at) return false;
  }
  return true;
}

void Controller::ScheduleLocked() {
  last_pass_epoch_ = capacity_epoch_;
  DropStaleReservationsLocked();
  std::optional<std::vector<NodeCapacity>> caps;
  // Pending() is a copy: starting an attempt refiles the job. Higher priority first, submit order
  // within a priority (docs/architecture.md, "Priorities and preemption").
  for (const auto& id : PendingByPriorityLocked()) TryPlaceLocked(jobs_.At(id), &caps);
  // Waiting jobs first: a running job grows only onto what none of them could start on.
  GrowLocked(&caps);
}

void Controller::GrowLocked(std::optional<std::vector<NodeCapacity>>* caps) {
  const int64_t now_ms = clock_->WallMillis();
  if (grow_epoch_ == capacity_epoch_ && (grow_retry_ms_ == 0 || now_ms < grow_retry_ms_)) return;
  grow_epoch_ = capacity_epoch_;
  grow_retry_ms_ = 0;
  const std::set<std::string> active = jobs_.index().Active();
  std::vector<std::string> ids(active.begin(), active.end());
  std::sort(ids.begin(), ids.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;  // numeric ids: submit order
  });
  std::set<std::string> taken;  // promised to a job that grows in this pass
  for (const auto& id : ids) {
    JobEntry& j = jobs_.At(id);
    const auto& res = j.rec.spec.resources();
    // A job stored before these fields existed has them unset: the defaults of spec.proto apply.
    const bool grow = !res.has_grow() || res.grow();
    const double cooldown_s = res.has_resize_cooldown_seconds() ? res.resize_cooldown_seconds() : 60;
    if (j.rec.state != v1::JOB_STATE_RUNNING || !j.current() || !grow) continue;
    const AttemptRecord& a = *j.current();
    if (static_cast<int>(a.nodes.size()) >= res.nodes().max()) continue;
    if (!caps->has_value()) *caps = CapacitiesLocked();
    GrowInput in;
    in.running = true;
    in.grow_enabled = grow;
    in.nodes = static_cast<int>(a.nodes.size());
    in.max_nodes = res.nodes().max();
    // In name order, as PlaceGang takes nodes that are not the job's (CapacitiesLocked is sorted).
    for (const auto& cap : **caps) {
      // A node reserved for a waiting job is that job's: growing onto it would only be undone.
      if (cap.ready && !cap.drained && !reserved_.count(cap.name) &&
          static_cast<int>(cap.free_slots.size()) >= res.gpus_per_node() &&
          !taken.count(cap.name) && std::find(a.nodes.begin(), a.nodes.end(), cap.name) == a.nodes.end()) {
        in.free_nodes.push_back(cap.name);
      }
    }
    if (in.free_nodes.empty()) continue;
    for (const auto& earlier : j.attempts) {
      in.known_nodes.insert(in.known_nodes.end(), earlier.nodes.begin(), earlier.nodes.end());
    }
    in.now_ms = now_ms;
    in.last_resize_ms = LastResizeMs(j.attempts);
    in.cooldown_ms = static_cast<int64_t>(cooldown_s * 1000);
    // The newest step any attempt reported: a fresh attempt near the end has not stepped yet.
    in.step = j.progress.step();
    in.total_steps = j.progress.total_steps();
    in.checkpoint_every = j.rec.spec.checkpoint().every_steps();
    const GrowDecision d = DecideGrow(in);
    if (!d.grow) {
      if (d.retry_at_ms > 0 && (grow_retry_ms_ == 0 || d.retry_at_ms < grow_retry_ms_)) grow_retry_ms_ = d.retry_at_ms;
      if (d.reason != j.grow_held) {
        EFT_LOG(INFO) << "job " << id << ": not growing onto " << in.free_nodes.front() << " yet (" << d.reason << ")";
        j.grow_held = d.reason;
      }
      continue;
    }
    j.grow_held.clear();
    if (ResizeLocked(j, ResizeReason::kGrow, d.reason).ok()) {
      taken.insert(d.added.begin(), d.added.end());
      nodes_.ExpectTransition(d.added);
      caps->reset();
    } else {
      grow_epoch_ = 0;  // not written (the store failed): the next pass decides again
    }
  }
}

Status Controller::ResizeLocked(JobEntry& j, ResizeReason reason, const std::string& what) {
  // Ending the attempt takes its ranks out of the desired state: each worker sends them SIGTERM, so
  // they finish the step, save a checkpoint and exit 75 (the rank protocol), and the next attempt,
  // placed once they are gone, resumes from that checkpoint. A rank that does not exit within
  // stop_grace_seconds is killed, and the next attempt takes the newest checkpoint there is
  // (StartAttemptLocked says how many steps that lost).
  std::vector<EventRecord> events{jobs_.MakeEvent(j, kResizedEvent, ResizedEventMessage(reason, what))};
  return EndAttemptLocked(j, ResizedEndReason(what), v1::ATTEMPT_END_RESIZED, Outcome::kRestart, std::move(events));
}

void Controller::MaybeScheduleLocked() {
  // Placements only change with capacity; what only time changes (backoffs, stop deadlines) is
  // picked up by the next tick.
  if (capacity_epoch_ != last_pass_epoch_) ScheduleLocked();
}

void Controller::TryPlaceLocked(JobEntry& j, std::optional<std::vector<NodeCapacity>>* caps) {
  if (j.rec.not_before_ms > clock_->WallMillis()) return;
  if (j.unplaceable_epoch == capacity_epoch_) return;  // nothing changed since it last did not fit
  if (j.rec.state == v1::JOB_STATE_RECOVERING) {
    SteadyTime now = clock_->Now();
    if (now < j.stop_deadline && OldRanksLiveLocked(j)) return;
    // A rank failure is often the first sign of a dying node. Wait until every node of the last
    // attempt has proven itself alive since then (one heartbeat) or has been declared LOST, so the
    // next attempt is not placed on a dead node. Bounded by the heartbeat timeout.
    if (now < j.ended_at + config_.heartbeat_timeout + config_.heartbeat_interval && !PreviousNodesSettledLocked(j)) {
      return;
    }
  }
  if (!caps->has_value()) *caps = CapacitiesLocked();
  // Nodes held for a waiting job that outranks this one are not this one's to take.
  const std::vector<NodeCapacity> mine = WithReservationsLocked(j, **caps);
  PlacementRequest req;
  req.min_nodes = j.rec.spec.resources().nodes().min();
  req.max_nodes = j.rec.spec.resources().nodes().max();
  req.slots_per_node = j.rec.spec.resources().gpus_per_node();
  if (j.current()) req.previous_nodes = j.current()->nodes;
  // Holding reservations for all it needs (nodes freed for it by lower-priority jobs, or held while
  // it waited), it starts on exactly those: the jobs that made room restart on the nodes they kept
  // (which may free a moment earlier), and it grows later like any job.
  std::vector<NodeCapacity> held;
  for (const auto& cap : mine) {
    auto r = reserved_.find(cap.name);
    if (r != reserved_.end() && r->second == j.rec.id) held.push_back(cap);
  }
  const bool only_held = static_cast<int>(held.size()) >= req.min_nodes;
  if (only_held) req.max_nodes = std::max(req.min_nodes, std::min(req.max_nodes, static_cast<int>(held.size())));
  Placement p = PlaceGang(req, only_held ? held : mine);
  if (!p.placed) {
    j.unplaceable_epoch = capacity_epoch_;
    std::string reason = "waiting for nodes: " + p.why_not;
    // Jobs of lower priority may give way (priority.cc); either way the reason says for whom it waits.
    const std::string more = MakeRoomLocked(j, mine);
    if (!more.empty()) reason += "; " + more;
    if (j.rec.state == v1::JOB_STATE_RECOVERING && j.current() && EndedForPlannedStop(*j.current())) {
      // Stopped on purpose (an eviction, a preemption, or a grow whose nodes went away) with its
      // ranks gone: it waits for capacity in the queue like any job that does not fit, saying for what.
      JobChange c{j.rec, {}, {}, {}};
      c.rec.state = v1::JOB_STATE_QUEUED;
      c.rec.reason = reason;
      c.events.push_back(jobs_.MakeEvent(j, "queued", reason));
      if (jobs_.Apply(j, std::move(c)).ok()) j.unplaceable_epoch = capacity_epoch_;
      return;
    }
    if (reason != j.rec.reason) {
      j.rec.reason = reason;  // informational; persisted with the next real transition
      jobs_.Bump(j);
    }
    return;
  }
  if (StartAttemptLocked(j, p).ok()) caps->reset();
}

Status Controller::StartAttemptLocked(JobEntry& j, const Placement& p) {
  AttemptRecord a;
  a.job_id = j.rec.id;
  a.number = j.rec.attempt + 1;
  a.ranks_per_node = j.rec.spec.resources().gpus_per_node();
  a.world_size = static_cast<int>(p.nodes.size()) * a.ranks_per_node;
  a.nodes = p.nodes;
  a.slots = p.slots;
  a.master_addr = nodes_.Find(p.nodes.front())->rec.address;
  a.start_ms = clock_->WallMillis();
  const CheckpointRecord* newest = nullptr;
  for (const auto& c : j.checkpoints) {
    if (!newest || c.step > newest->step || (c.step == newest->step && c.time_ms >= newest->time_ms)) newest = &c;
  }
  if (newest) a.resume_from = newest->path;
  const int64_t resume_step = newest ? newest->step : 0;
  // Steps the previous attempt reported beyond the checkpoint this one resumes from are trained
  // again: "steps lost". Stored with the attempt, so known across controller restarts too.
  a.reached_step = resume_step;
  const AttemptRecord* previous = j.current();
  const int64_t reached = previous ? j.reached_step : 0;
  const int64_t lost = std::max<int64_t>(0, reached - resume_step);

  JobChange c{j.rec, {}, {}, {}};
  c.rec.state = v1::JOB_STATE_STARTING;
  c.rec.attempt = a.number;
  c.rec.reason.clear();
  c.rec.not_before_ms = 0;
  if (!c.rec.start_ms) c.rec.start_ms = a.start_ms;
  // Attempts are never deleted, so their count is durable without a write of its own.
  a.master_port = config_.master_port_base + static_cast<int>(attempts_created_ % config_.master_port_count);
  c.insert_attempt = a;
  std::ostringstream msg;
  msg << "attempt " << a.number << ": world size " << a.world_size << " on " << JoinNodes(a.nodes) << " (master "
      << a.master_addr << ":" << a.master_port << "), "
      << (a.resume_from.empty() ? std::string("fresh start") : "resuming from " + a.resume_from);
  if (reached > 0) {
    msg << " (step " << resume_step << "; attempt " << previous->number << " reached step " << reached << ": " << lost
        << (lost == 1 ? " step lost)" : " steps lost)");
  }
  if (lost > 0 && EndedForPlannedStop(*previous)) {
    // The ranks were asked to stop with a checkpoint and did not deliver one (they ignored SIGTERM
    // or were killed at the end of the grace period): say so, and what it cost.
    std::ostringstream why;
    why << "attempt " << previous->number
        << (EndedForResize(*previous) ? " was stopped for a resize" : " was preempted")
        << " but saved no checkpoint at its last step ("
        << reached << ") within fault_tolerance.stop_grace_seconds ("
        << j.rec.spec.fault_tolerance().stop_grace_seconds() << " s): "
        << (newest ? "resuming from the newest periodic checkpoint, step " + std::to_string(resume_step)
                   : std::string("no checkpoint at all, starting from scratch"))
        << "; " << lost << (lost == 1 ? " step lost" : " steps lost");
    c.events.push_back(jobs_.MakeEvent(j, "stop_not_saved", why.str()));
  }
  EventRecord e = jobs_.MakeEvent(j, "attempt_started", msg.str());
  e.attempt = a.number;
  c.events.push_back(std::move(e));
  EFT_RETURN_IF_ERROR(jobs_.Apply(j, std::move(c)));
  ReleaseReservationsLocked(j.rec.id);
  ++attempts_created_;
  // The attempt starts at its checkpoint's step: stopped before its first step, it lost nothing.
  j.reached_step = resume_step;
  j.ranks.assign(a.world_size, RankView{});
  // Its workers learn of it with their next heartbeat, and its first step reaches the controller
  // with a later one: fast until that step (or transition_window).
  j.awaiting_first_step = true;
  nodes_.ExpectTransition(a.nodes);
  return Status::Ok();
}

Status Controller::EndAttemptLocked(JobEntry& j, const std::string& reason, v1::AttemptEnd end, Outcome outcome,
                                    std::vector<EventRecord> first_events) {
  JobChange c{j.rec, {}, {}, std::move(first_events)};
  int64_t now_ms = clock_->WallMillis();
  if (j.current() && j.current()->end_ms == 0) {
    AttemptRecord a = *j.current();
    a.end_ms = now_ms;
    a.end_reason = reason;
    a.end = end;
    a.reached_step = std::max(a.reached_step, j.reached_step);
    c.update_attempt = a;
    c.events.push_back(jobs_.MakeEvent(j, "attempt_ended", "attempt " + std::to_string(a.number) + " ended: " + reason));
  }
  const int max_restarts = j.rec.spec.fault_tolerance().max_restarts();
  switch (outcome) {
    case Outcome::kSucceeded:
      c.rec.state = v1::JOB_STATE_SUCCEEDED;
      c.rec.reason = reason;
      break;
    case Outcome::kFailed:
      c.rec.state = v1::JOB_STATE_FAILED;
      c.rec.reason = reason + "; not retried";
      break;
    case Outcome::kCancelled:
      c.rec.state = v1::JOB_STATE_CANCELLED;
      c.rec.reason = reason;
      break;
    case Outcome::kRestartCounted:
      if (c.rec.restarts >= max_restarts) {
        c.rec.state = v1::JOB_STATE_FAILED;
        c.rec.reason = reason + "; gave up after " + std::to_string(c.rec.restarts) +
                       " restarts (fault_tolerance.max_restarts = " + std::to_string(max_restarts) + ")";
        break;
      }
      c.rec.restarts += 1;
      [[fallthrough]];
    case Outcome::kRestart: {
      auto backoff = outcome == Outcome::kRestartCounted ? BackoffFor(c.rec.restarts) : std::chrono::milliseconds(0);
      c.rec.state = v1::JOB_STATE_RECOVERING;
      c.rec.reason = reason;
      c.rec.not_before_ms = now_ms + backoff.count();
      std::string msg = "attempt " + std::to_string(j.rec.attempt + 1) + " will start " +
                        (backoff.count() ? "in " + Seconds(backoff) : std::string("as soon as nodes allow"));
      msg += outcome == Outcome::kRestartCounted ? " (restart " + std::to_string(c.rec.restarts) + " of at most " +
                                                       std::to_string(max_restarts) + ")"
                                                 : " (not counted against max_restarts)";
      c.events.push_back(jobs_.MakeEvent(j, "restart_scheduled", msg + ": " + reason));
      break;
    }
  }
  if (IsTerminal(c.rec.state)) {
    c.rec.end_ms = now_ms;
    std::string type = v1::JobState_Name(c.rec.state).substr(std::strlen("JOB_STATE_"));
    std::transform(type.begin(), type.end(), type.begin(), [](unsigned char ch) { return std::tolower(ch); });
    c.events.push_back(jobs_.MakeEvent(j, type, c.rec.reason));
  }
  const std::vector<std::string> ended_nodes = c.update_attempt ? c.update_attempt->nodes : std::vector<std::string>{};
  EFT_RETURN_IF_ERROR(jobs_.Apply(j, std::move(c)));
  j.ranks.clear();
  j.awaiting_first_step = false;
  // Restarting at once (planned stops, lost nodes): its nodes are told to stop and then, most of
  // them, to start the next attempt.
  if (outcome == Outcome::kRestart) nodes_.ExpectTransition(ended_nodes);
  j.ended_at = clock_->Now();
  j.end_counted = outcome == Outcome::kRestartCounted && j.rec.state == v1::JOB_STATE_RECOVERING;
  double grace = j.rec.spec.fault_tolerance().stop_grace_seconds();
  j.stop_deadline = clock_->Now() + std::chrono::milliseconds(static_cast<long long>(grace * 1000)) +
                    config_.stop_report_slack;
  return Status::Ok();
}

void Controller::OnRankExitLocked(JobEntry& j, int rank, const v1::RankStatus& st) {
  if (st.state() == v1::RANK_STATE_FAILED_TO_START) {
    (void)EndAttemptLocked(j, "rank " + std::to_string(rank) + " could not start: " + st.message(),
                           v1::ATTEMPT_END_RANK_FAILED, Outcome::kFailed);
    return;
  }
  const std::string who = "rank " + std::to_string(rank);
  const int code = st.exit_code();
  // What the rank said about its failure (its error event), so the reason is in the job, not only
  // in the log.
  const std::string said = j.ranks[rank].error.empty() ? "" : ": " + j.ranks[rank].error;
  // The restart policy of docs/architecture.md ("Job state machine"), by the rank protocol's exit
  // classes (common/rank_protocol.h).
  switch (rank::ClassifyExit(code, st.signal())) {
    case rank::ExitClass::kSuccess: {
      j.ranks[rank].exited = true;
      bool all = std::all_of(j.ranks.begin(), j.ranks.end(), [](const RankView& r) { return r.exited; });
      if (all) {
        (void)EndAttemptLocked(j, "all " + std::to_string(j.ranks.size()) + " ranks exited 0", v1::ATTEMPT_END_SUCCEEDED,
                               Outcome::kSucceeded);
      }
      return;
    }
    case rank::ExitClass::kSignal: {
      const char* name = strsignal(st.signal());
      (void)EndAttemptLocked(j, who + " was killed by signal " + std::to_string(st.signal()) + " (" +
                                    (name ? name : "?") + ")",
                             v1::ATTEMPT_END_RANK_FAILED, Outcome::kRestartCounted);
      return;
    }
    case rank::ExitClass::kBadInput:
      // Retrying cannot help.
      (void)EndAttemptLocked(j, who + " exited with code " + std::to_string(code) + " (" + rank::ExitCodeMeaning(code) +
                                    ")" + said,
                             v1::ATTEMPT_END_RANK_FAILED, Outcome::kFailed);
      return;
    case rank::ExitClass::kStopped:
      // Asked to stop (SIGTERM) and saved first: not the job's fault, nothing to count.
      (void)EndAttemptLocked(j, who + " " + rank::ExitCodeMeaning(code) + " (exit " + std::to_string(code) + ")",
                             v1::ATTEMPT_END_STOPPED, Outcome::kRestart);
      return;
    case rank::ExitClass::kPortBusy:
      // Another program holds MASTER_PORT on rank 0's node: not the job's fault. The next attempt
      // gets the next port at once, and no restart is spent.
      (void)EndAttemptLocked(j, who + " exited with code " + std::to_string(code) + " (rendezvous port " +
                                    std::to_string(j.current()->master_port) + " busy on node " +
                                    j.current()->nodes.front() + "; retrying on another port)" + said,
                             v1::ATTEMPT_END_PORT_BUSY, Outcome::kRestart);
      return;
    case rank::ExitClass::kStorageFull:
      // The checkpoint storage is full even after the rank freed what retention allows: a restart
      // would fail the same way (and lose the steps since the last checkpoint again).
      (void)EndAttemptLocked(j, who + " exited with code " + std::to_string(code) + " (" + rank::ExitCodeMeaning(code) +
                                    ": free space or point checkpoint.dir elsewhere, then resubmit; the newest "
                                    "committed checkpoint is kept)" + said,
                             v1::ATTEMPT_END_RANK_FAILED, Outcome::kFailed);
      return;
    case rank::ExitClass::kOutOfMemory: {
      // Once may be another program's passing use of the GPU, or fragmentation: restart, counted.
      // Twice in a row at the same world size is the job's own settings, which a restart would not
      // change (at another world size each rank holds another share, so that is tried).
      const AttemptRecord* previous = j.attempts.size() >= 2 ? &j.attempts[j.attempts.size() - 2] : nullptr;
      const bool again = previous != nullptr && previous->world_size == j.current()->world_size &&
                         previous->end == v1::ATTEMPT_END_OUT_OF_MEMORY;
      const std::string reason = who + " " + OutOfMemoryExit() + said;
      (void)EndAttemptLocked(j,
                             again ? reason + "; attempt " + std::to_string(previous->number) +
                                         " ran out of memory at this world size too"
                                   : reason,
                             v1::ATTEMPT_END_OUT_OF_MEMORY, again ? Outcome::kFailed : Outcome::kRestartCounted);
      return;
    }
    case rank::ExitClass::kFailed:
      break;
  }
  (void)EndAttemptLocked(j, who + " exited with code " + std::to_string(code) + said, v1::ATTEMPT_END_RANK_FAILED,
                         Outcome::kRestartCounted);
}

}  // namespace eft::controller
