#include "controller/attempt_lifecycle.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

#include "common/logging.h"
#include "common/rank_protocol.h"

namespace eft::controller {
namespace {

std::string JoinNodes(const std::vector<std::string>& nodes) {
  std::string out;
  for (const auto& n : nodes) out += (out.empty() ? "" : ",") + n;
  return out;
}

// The node `rank` of attempt `a` runs on: ranks are laid out node by node (DesiredFor).
const std::string& NodeOfRank(const AttemptRecord& a, int rank) {
  const size_t index = static_cast<size_t>(rank / std::max(1, a.ranks_per_node));
  return a.nodes.at(std::min(index, a.nodes.size() - 1));
}

// "exited with code 78 (out of memory)": how OnRankExit words an out-of-memory end.
std::string OutOfMemoryExit() {
  const int code = rank::ToInt(rank::ExitCode::kOutOfMemory);
  return "exited with code " + std::to_string(code) + " (" + rank::ExitCodeMeaning(code) + ")";
}

}  // namespace

AttemptLifecycle::AttemptLifecycle(const ControllerConfig& config, Clock* clock, JobTable* jobs, NodeTable* nodes,
                                   const SnapshotTracker* snapshots,
                                   std::function<void(const std::string& job_id)> on_started)
    : config_(config),
      clock_(clock),
      jobs_(jobs),
      nodes_(nodes),
      snapshots_(snapshots),
      on_started_(std::move(on_started)) {}

void AttemptLifecycle::Restore(JobEntry& j) {
  const SteadyTime now = clock_->Now();
  if (j.active() && j.current()) {
    // A RUNNING attempt had every rank running: a rank its worker no longer reports is lost.
    j.ranks.assign(j.current()->world_size, RankView{j.rec.state == v1::JOB_STATE_RUNNING, false, {}});
  }
  if (j.rec.state == v1::JOB_STATE_RECOVERING) {
    j.stop_deadline = now + config_.stop_report_slack;
    // Its nodes must heartbeat once more (JobScheduler::PreviousNodesSettled) before the next
    // attempt is placed: the stop checkpoint may still wait on a worker, unacknowledged.
    j.ended_at = now;
  }
}

Status AttemptLifecycle::Cancel(JobEntry& j) {
  if (j.active()) return End(j, "cancelled by user", v1::ATTEMPT_END_CANCELLED, Outcome::kCancelled);
  JobChange c{j.rec, {}, {}, {}};
  c.rec.state = v1::JOB_STATE_CANCELLED;
  c.rec.reason = "cancelled by user";
  c.rec.end_ms = clock_->WallMillis();
  c.events.push_back(jobs_->MakeEvent(j, "cancelled", "cancelled by user while " + v1::JobState_Name(j.rec.state)));
  return jobs_->Apply(j, std::move(c));
}

std::chrono::milliseconds AttemptLifecycle::BackoffFor(int restarts) const {
  double ms = static_cast<double>(config_.restart_backoff_initial.count()) * std::pow(2.0, std::max(0, restarts - 1));
  return std::chrono::milliseconds(
      static_cast<long long>(std::min(ms, static_cast<double>(config_.restart_backoff_max.count()))));
}

void AttemptLifecycle::OnNodeLost(const std::string& node, const std::string& reason) {
  // Running attempts with ranks there end at once: not the job's fault, so no restart is counted.
  for (const auto& id : jobs_->index().ActiveOn(node)) {
    JobEntry& j = jobs_->At(id);
    if (j.active()) {
      (void)End(j, "node " + node + " lost (" + reason + ")", v1::ATTEMPT_END_NODE_LOST, Outcome::kRestart);
    }
  }
  // An attempt that just ended because its ranks failed was most likely cut off from this node.
  for (const auto& id : jobs_->index().Pending()) {
    JobEntry& j = jobs_->At(id);
    if (j.rec.state != v1::JOB_STATE_RECOVERING || !j.end_counted || !j.current()) continue;
    const auto& nodes = j.current()->nodes;
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) continue;
    if (clock_->Now() < j.ended_at + config_.heartbeat_timeout + config_.heartbeat_interval) {
      ForgiveLastFailure(j, "node " + node + " lost (" + reason + ")");
    }
  }
}

void AttemptLifecycle::ForgiveLastFailure(JobEntry& j, const std::string& cause) {
  // The ranks that failed were most likely cut off from the lost node, so the failure is the
  // node's, not the job's: refund the restart and skip the backoff.
  JobChange c{j.rec, {}, {}, {}};
  c.rec.restarts = std::max(0, c.rec.restarts - 1);
  c.rec.not_before_ms = 0;
  c.rec.reason = cause + "; " + c.rec.reason;
  AttemptRecord a = *j.current();
  // The node's loss is the cause, so the words name it first; the failures of its peers'
  // collectives (Gloo's "Connection reset by peer") came first only in time. The typed end kind
  // keeps what happened to the rank.
  a.end_reason = cause + "; its peers' ranks failed first (" + a.end_reason + "), not counted against max_restarts";
  c.update_attempt = a;
  EventRecord e = jobs_->MakeEvent(j, "restart_reclassified",
                            "attempt " + std::to_string(a.number) + ": " + cause +
                                " right after its ranks failed; the failure is not counted against max_restarts");
  c.events.push_back(std::move(e));
  if (jobs_->Apply(j, std::move(c)).ok()) j.end_counted = false;
}

Status AttemptLifecycle::Start(JobEntry& j, const Placement& p) {
  AttemptRecord a;
  a.job_id = j.rec.id;
  a.number = j.rec.attempt + 1;
  a.ranks_per_node = j.rec.spec.resources().gpus_per_node();
  a.world_size = static_cast<int>(p.nodes.size()) * a.ranks_per_node;
  a.nodes = p.nodes;
  a.slots = p.slots;
  // Where rank 0's node takes rank traffic (docs/architecture.md, "Rank traffic and the node's address").
  a.master_addr = DataAddressOf(nodes_->Find(p.nodes.front())->rec);
  a.start_ms = clock_->WallMillis();
  const CheckpointRecord* newest = nullptr;
  for (const auto& c : j.checkpoints) {
    if (!newest || c.step > newest->step || (c.step == newest->step && c.time_ms >= newest->time_ms)) newest = &c;
  }
  if (newest) a.resume_from = newest->path;
  const int64_t disk_step = newest ? newest->step : 0;
  // A memory snapshot staged for this restart (snapshot_tracker.h) is newer than any disk checkpoint.
  const AttemptRecord* ended = j.current();
  const bool decided_now = ended != nullptr && j.memory_decided_after == ended->number;
  const std::optional<JobEntry::MemoryResume> memory = decided_now ? j.memory_resume : std::nullopt;
  if (memory) a.resume_from = memory->path;
  const int64_t resume_step = memory ? memory->step : disk_step;
  // Steps the previous attempt reported beyond the checkpoint this one resumes from are trained
  // again: "steps lost". Stored with the attempt, so known across controller restarts too.
  a.reached_step = resume_step;
  a.resume_step = resume_step;
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
      << a.master_addr << ":" << a.master_port << "), ";
  if (memory) {
    msg << "resuming from the memory snapshot of step " << memory->step << " (" << memory->from << ", staged in "
        << memory->path << "; the newest disk checkpoint was step " << disk_step << ")";
  } else {
    msg << (a.resume_from.empty() ? std::string("fresh start") : "resuming from " + a.resume_from);
  }
  if (decided_now && !j.memory_note.empty()) {
    c.events.push_back(jobs_->MakeEvent(
        j, "memory_snapshot_unusable",
        j.memory_note + "; " +
            (newest ? "resuming from the newest disk checkpoint, step " + std::to_string(disk_step) + " (" +
                          newest->path + ")"
                    : std::string("no disk checkpoint either: starting from scratch"))));
  }
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
        << (memory   ? "resuming from the memory snapshot of step " + std::to_string(resume_step)
            : newest ? "resuming from the newest periodic checkpoint, step " + std::to_string(resume_step)
                     : std::string("no checkpoint at all, starting from scratch"))
        << "; " << lost << (lost == 1 ? " step lost" : " steps lost");
    c.events.push_back(jobs_->MakeEvent(j, "stop_not_saved", why.str()));
  }
  EventRecord e = jobs_->MakeEvent(j, "attempt_started", msg.str());
  e.attempt = a.number;
  c.events.push_back(std::move(e));
  // Read before Apply: it appends the new attempt to j.attempts, which may move the vector's
  // elements and leave `previous` dangling (found by `make sanitize`).
  const bool recovered = previous != nullptr && EndedUnplanned(*previous);
  previous = nullptr;
  EFT_RETURN_IF_ERROR(jobs_->Apply(j, std::move(c)));
  on_started_(j.rec.id);
  ++attempts_created_;
  j.steps_lost_total += lost;
  if (recovered) {
    const RecoverySource source = memory ? RecoverySource::kMemory
                                  : newest ? RecoverySource::kDisk
                                           : RecoverySource::kScratch;
    ++j.recoveries[static_cast<size_t>(source)];
  }
  // The attempt starts at its checkpoint's step: stopped before its first step, it lost nothing.
  j.reached_step = resume_step;
  j.ranks.assign(a.world_size, RankView{});
  // Its workers learn of it with their next heartbeat, and its first step reaches the controller
  // with a later one: fast until that step (or transition_window).
  j.awaiting_first_step = true;
  nodes_->ExpectTransition(a.nodes);
  return Status::Ok();
}

Status AttemptLifecycle::End(JobEntry& j, const std::string& reason, v1::AttemptEnd end, Outcome outcome,
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
    c.events.push_back(jobs_->MakeEvent(j, "attempt_ended", "attempt " + std::to_string(a.number) + " ended: " + reason));
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
                        (backoff.count() ? "in " + SecondsText(backoff) : std::string("as soon as nodes allow"));
      msg += outcome == Outcome::kRestartCounted ? " (restart " + std::to_string(c.rec.restarts) + " of at most " +
                                                       std::to_string(max_restarts) + ")"
                                                 : " (not counted against max_restarts)";
      c.events.push_back(jobs_->MakeEvent(j, "restart_scheduled", msg + ": " + reason));
      break;
    }
  }
  if (IsTerminalState(c.rec.state)) {
    c.rec.end_ms = now_ms;
    std::string type = v1::JobState_Name(c.rec.state).substr(std::strlen("JOB_STATE_"));
    std::transform(type.begin(), type.end(), type.begin(), [](unsigned char ch) { return std::tolower(ch); });
    c.events.push_back(jobs_->MakeEvent(j, type, c.rec.reason));
  }
  const std::vector<std::string> ended_nodes = c.update_attempt ? c.update_attempt->nodes : std::vector<std::string>{};
  EFT_RETURN_IF_ERROR(jobs_->Apply(j, std::move(c)));
  j.ranks.clear();
  j.awaiting_first_step = false;
  // Restarting at once (planned stops, lost nodes): its nodes are told to stop and then, most of
  // them, to start the next attempt.
  if (outcome == Outcome::kRestart) nodes_->ExpectTransition(ended_nodes);
  j.ended_at = clock_->Now();
  j.end_counted = outcome == Outcome::kRestartCounted && j.rec.state == v1::JOB_STATE_RECOVERING;
  double grace = j.rec.spec.fault_tolerance().stop_grace_seconds();
  j.stop_deadline = clock_->Now() + std::chrono::milliseconds(static_cast<long long>(grace * 1000)) +
                    config_.stop_report_slack;
  return Status::Ok();
}

Status AttemptLifecycle::Resize(JobEntry& j, ResizeReason reason, const std::string& what) {
  // Ending the attempt takes its ranks out of the desired state: each worker sends them SIGTERM, so
  // they finish the step, save a checkpoint and exit 75 (the rank protocol), and the next attempt,
  // placed once they are gone, resumes from that checkpoint. A rank that does not exit within
  // stop_grace_seconds is killed, and the next attempt takes the newest checkpoint there is
  // (Start says how many steps that lost).
  std::vector<EventRecord> events{jobs_->MakeEvent(j, kResizedEvent, ResizedEventMessage(reason, what))};
  return End(j, ResizedEndReason(what), v1::ATTEMPT_END_RESIZED, Outcome::kRestart, std::move(events));
}

Status AttemptLifecycle::Preempt(JobEntry& j, const std::string& what) {
  // The same planned stop as a resize (Resize): out of the desired state, SIGTERM, a
  // checkpoint, exit 75; not counted against max_restarts. When its ranks are gone and it does not
  // fit (its nodes are reserved for the job that preempted it) it waits QUEUED (JobScheduler::TryPlace).
  std::vector<EventRecord> events{jobs_->MakeEvent(j, kPreemptedEvent, what)};
  return End(j, PreemptedEndReason(what), v1::ATTEMPT_END_PREEMPTED, Outcome::kRestart,
                          std::move(events));
}

void AttemptLifecycle::OnRankExit(JobEntry& j, int rank, const v1::RankStatus& st) {
  if (st.state() == v1::RANK_STATE_FAILED_TO_START) {
    (void)End(j, "rank " + std::to_string(rank) + " could not start: " + st.message(),
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
  if (st.lease_expired()) {
    // Its worker lost touch with this controller for longer than the lease and killed it: the
    // node's loss (as if declared LOST here), not the job's failure.
    (void)End(j,
              who + " killed by its worker on node " + NodeOfRank(*j.current(), rank) +
                  ": the controller did not answer it within its lease (" + SecondsText(config_.heartbeat_timeout) + ")",
              v1::ATTEMPT_END_NODE_LOST, Outcome::kRestart);
    return;
  }
  switch (rank::ClassifyExit(code, st.signal())) {
    case rank::ExitClass::kSuccess: {
      j.ranks[rank].exited = true;
      bool all = std::all_of(j.ranks.begin(), j.ranks.end(), [](const RankView& r) { return r.exited; });
      if (all) {
        (void)End(j, "all " + std::to_string(j.ranks.size()) + " ranks exited 0", v1::ATTEMPT_END_SUCCEEDED,
                               Outcome::kSucceeded);
      }
      return;
    }
    case rank::ExitClass::kSignal: {
      const char* name = strsignal(st.signal());
      (void)End(j, who + " was killed by signal " + std::to_string(st.signal()) + " (" +
                                    (name ? name : "?") + ")",
                             v1::ATTEMPT_END_RANK_FAILED, Outcome::kRestartCounted);
      return;
    }
    case rank::ExitClass::kBadInput:
      // Retrying cannot help.
      (void)End(j, who + " exited with code " + std::to_string(code) + " (" + rank::ExitCodeMeaning(code) +
                                    ")" + said,
                             v1::ATTEMPT_END_RANK_FAILED, Outcome::kFailed);
      return;
    case rank::ExitClass::kStopped:
      // Asked to stop (SIGTERM) and saved first: not the job's fault, nothing to count.
      (void)End(j, who + " " + rank::ExitCodeMeaning(code) + " (exit " + std::to_string(code) + ")",
                             v1::ATTEMPT_END_STOPPED, Outcome::kRestart);
      return;
    case rank::ExitClass::kPortBusy:
      // Another program holds MASTER_PORT on rank 0's node: not the job's fault. The next attempt
      // gets the next port at once, and no restart is spent.
      (void)End(j, who + " exited with code " + std::to_string(code) + " (rendezvous port " +
                                    std::to_string(j.current()->master_port) + " busy on node " +
                                    j.current()->nodes.front() + "; retrying on another port)" + said,
                             v1::ATTEMPT_END_PORT_BUSY, Outcome::kRestart);
      return;
    case rank::ExitClass::kStorageFull:
      // The checkpoint storage is full even after the rank freed what retention allows: a restart
      // would fail the same way (and lose the steps since the last checkpoint again).
      (void)End(j, who + " exited with code " + std::to_string(code) + " (" + rank::ExitCodeMeaning(code) +
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
      (void)End(j,
                             again ? reason + "; attempt " + std::to_string(previous->number) +
                                         " ran out of memory at this world size too"
                                   : reason,
                             v1::ATTEMPT_END_OUT_OF_MEMORY, again ? Outcome::kFailed : Outcome::kRestartCounted);
      return;
    }
    case rank::ExitClass::kFenced:
      // A newer attempt holds the checkpoint directory's fence. The attempts this controller
      // started are fenced off only once it has ended them (their exits are not looked at), so
      // for the current one the fence was deleted by hand, or another controller's job shares the
      // directory: counted, and the next attempt raises the fence anew.
      (void)End(j, who + " exited with code " + std::to_string(code) + " (" + rank::ExitCodeMeaning(code) +
                       ": another run may be using checkpoint.dir)" + said,
                v1::ATTEMPT_END_RANK_FAILED, Outcome::kRestartCounted);
      return;
    case rank::ExitClass::kFailed:
      break;
  }
  (void)End(j, who + " exited with code " + std::to_string(code) + said, v1::ATTEMPT_END_RANK_FAILED,
                         Outcome::kRestartCounted);
}

void AttemptLifecycle::OnRankReports(const NodeEntry& node) {
  for (const auto& id : jobs_->index().ActiveOn(node.rec.name)) {
    JobEntry& j = jobs_->At(id);
    if (!j.active() || !j.current()) continue;
    const AttemptRecord& a = *j.current();
    auto pos = std::find(a.nodes.begin(), a.nodes.end(), node.rec.name);
    if (pos == a.nodes.end()) continue;
    int first = static_cast<int>(pos - a.nodes.begin()) * a.ranks_per_node;
    for (int rank = first; rank < first + a.ranks_per_node && j.active(); ++rank) {
      const v1::RankStatus* st = nullptr;
      for (const auto& r : node.reported) {
        if (r.key().job_id() == id && r.key().attempt() == a.number && r.key().rank() == rank) st = &r;
      }
      RankView& view = j.ranks[rank];
      if (st == nullptr) {
        if (view.seen_running && !view.exited) {
          (void)End(j, "rank " + std::to_string(rank) + " on node " + node.rec.name +
                                        " vanished (its worker restarted or lost track of it)",
                                 v1::ATTEMPT_END_RANK_LOST, Outcome::kRestart);
        }
        continue;
      }
      if (IsLive(*st)) {
        view.seen_running = true;
      } else if (!view.exited && (st->state() == v1::RANK_STATE_EXITED ||
                                  st->state() == v1::RANK_STATE_FAILED_TO_START)) {
        OnRankExit(j, rank, *st);
      }
    }
    if (j.rec.state == v1::JOB_STATE_STARTING &&
        std::all_of(j.ranks.begin(), j.ranks.end(), [](const RankView& r) { return r.seen_running; })) {
      JobChange c{j.rec, {}, {}, {}};
      c.rec.state = v1::JOB_STATE_RUNNING;
      c.events.push_back(jobs_->MakeEvent(j, "running", "all " + std::to_string(j.ranks.size()) + " ranks of attempt " +
                                                     std::to_string(a.number) + " started"));
      (void)jobs_->Apply(j, std::move(c));
    }
  }
}

std::optional<bool> AttemptLifecycle::ShareOneNetworkStack(const std::vector<std::string>& names) const {
  std::string first;
  for (const std::string& name : names) {
    const NodeEntry* node = nodes_->Find(name);
    if (node == nullptr || node->rec.network_stack.empty()) return std::nullopt;  // an older worker
    if (first.empty()) first = node->rec.network_stack;
    if (node->rec.network_stack != first) return false;
  }
  return true;
}

void AttemptLifecycle::DesiredFor(const NodeEntry& node,
                                  google::protobuf::RepeatedPtrField<v1::RankAssignment>* out,
                                  google::protobuf::RepeatedPtrField<v1::AttemptSpec>* specs) const {
  for (const auto& id : jobs_->index().ActiveOn(node.rec.name)) {
    const JobEntry& j = jobs_->At(id);
    if (!j.active() || !j.current()) continue;
    const AttemptRecord& a = *j.current();
    auto pos = std::find(a.nodes.begin(), a.nodes.end(), node.rec.name);
    if (pos == a.nodes.end()) continue;
    size_t node_index = static_cast<size_t>(pos - a.nodes.begin());
    const v1::JobSpec& spec = j.rec.spec;
    const std::optional<bool> share_loopback = ShareOneNetworkStack(a.nodes);
    bool spec_sent = false;
    for (int local = 0; local < a.ranks_per_node; ++local) {
      v1::RankAssignment* r = out->Add();
      r->mutable_key()->set_job_id(id);
      r->mutable_key()->set_attempt(a.number);
      r->mutable_key()->set_rank(static_cast<int>(node_index) * a.ranks_per_node + local);
      r->set_local_rank(local);
      r->set_world_size(a.world_size);
      r->set_local_world_size(a.ranks_per_node);
      r->set_master_addr(a.master_addr);
      r->set_master_port(a.master_port);
      r->set_slot(node_index < a.slots.size() && local < static_cast<int>(a.slots[node_index].size())
                      ? a.slots[node_index][local]
                      : local);
      if (spec.command().empty()) {
        r->add_command(config_.trainer_program);
        r->add_command("train");
      } else {
        r->mutable_command()->CopyFrom(spec.command());
      }
      // The job's own variables only: the worker builds the rank environment from the typed fields.
      r->mutable_env()->insert(spec.env().begin(), spec.env().end());
      r->set_resume_from(a.resume_from);
      if (share_loopback.has_value()) r->set_nodes_share_loopback(*share_loopback);
      r->set_stop_grace_seconds(spec.fault_tolerance().stop_grace_seconds());
      const bool reported = std::any_of(node.reported.begin(), node.reported.end(), [&](const v1::RankStatus& st) {
        return st.key().job_id() == id && st.key().attempt() == a.number && st.key().rank() == r->key().rank();
      });
      if (!reported && !spec_sent) {
        v1::AttemptSpec* s = specs->Add();
        s->set_job_id(id);
        s->set_attempt(a.number);
        *s->mutable_spec() = spec;
        snapshots_->PeersFor(j, a, node.rec.name, s->mutable_snapshot_peers());
        spec_sent = true;
      }
    }
  }
}

void AttemptLifecycle::StopNowFor(const NodeEntry& node, google::protobuf::RepeatedPtrField<v1::RankKey>* out) const {
  for (const auto& r : node.reported) {
    if (!IsLive(r)) continue;
    const JobEntry* j = jobs_->Find(r.key().job_id());
    const int number = r.key().attempt();
    if (j == nullptr || number < 1 || number > static_cast<int>(j->attempts.size())) continue;
    if (EndedUnplanned(j->attempts[number - 1])) *out->Add() = r.key();
  }
}

}  // namespace eft::controller
