#include "controller/job_scheduler.h"

#include <algorithm>
#include <set>
#include <utility>

#include "common/logging.h"
#include "controller/resize_policy.h"

namespace eft::controller {

JobScheduler::JobScheduler(const ControllerConfig& config, Clock* clock, Store* store, JobTable* jobs,
                           NodeTable* nodes, AttemptLifecycle* lifecycle, SnapshotTracker* snapshots)
    : config_(config),
      clock_(clock),
      store_(store),
      jobs_(jobs),
      nodes_(nodes),
      lifecycle_(lifecycle),
      snapshots_(snapshots) {}

Status JobScheduler::Load() {
  EFT_ASSIGN_OR_RETURN(auto reservations, store_->LoadReservations());
  std::set<std::string> stale;
  for (const auto& [node, id] : reservations) {
    const JobEntry* j = jobs_->Find(id);
    if (j != nullptr && j->waits()) {
      reserved_[node] = id;
    } else {
      stale.insert(id);
    }
  }
  for (const auto& id : stale) {
    // Rows of a job that started or ended before a release was stored: harmless, tidied up here.
    Status s = store_->SetReservations(id, {});
    if (!s.ok()) EFT_LOG(WARNING) << "job " << id << ": could not drop stale reservations (" << s << ")";
  }
  return Status::Ok();
}

std::vector<NodeCapacity> JobScheduler::Capacities() const {
  std::map<std::string, std::vector<bool>> busy;
  for (const auto& [name, n] : nodes_->all()) busy[name].assign(std::max(0, n.rec.slots), false);
  auto mark = [&](const std::string& node, int slot) {
    auto it = busy.find(node);
    if (it != busy.end() && slot >= 0 && slot < static_cast<int>(it->second.size())) it->second[slot] = true;
  };
  for (const auto& id : jobs_->index().Active()) {
    const AttemptRecord& a = *jobs_->At(id).current();
    for (size_t i = 0; i < a.nodes.size() && i < a.slots.size(); ++i) {
      for (int slot : a.slots[i]) mark(a.nodes[i], slot);
    }
  }
  // Ranks still running that nobody wants any more (stopping) keep their GPUs until they are gone.
  for (const auto& [name, n] : nodes_->all()) {
    for (const auto& r : n.reported) {
      if (IsLive(r)) mark(name, r.slot());
    }
  }
  std::vector<NodeCapacity> out;
  for (const auto& [name, n] : nodes_->all()) {
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

bool JobScheduler::OldRanksLive(const JobEntry& job) const {
  for (const auto& [name, n] : nodes_->all()) {
    if (!n.ready) continue;
    for (const auto& r : n.reported) {
      if (r.key().job_id() == job.rec.id && IsLive(r)) return true;
    }
  }
  return false;
}

bool JobScheduler::PreviousNodesSettled(const JobEntry& job) const {
  if (!job.current()) return true;
  for (const auto& name : job.current()->nodes) {
    const NodeEntry* n = nodes_->Find(name);
    // A heartbeat, not a registration: only a heartbeat delivers the events the worker held, such as
    // the stop checkpoint of a rank that exited while this controller was down.
    if (n != nullptr && n->ready && n->last_report < job.ended_at) return false;
  }
  return true;
}

void JobScheduler::Pass() {
  last_pass_epoch_ = capacity_epoch_;
  DropStaleReservations();
  std::optional<std::vector<NodeCapacity>> caps;
  // Pending() is a copy: starting an attempt refiles the job. Higher priority first, submit order
  // within a priority (docs/architecture.md, "Priorities and preemption").
  for (const auto& id : PendingByPriority()) TryPlace(jobs_->At(id), &caps);
  // Waiting jobs first: a running job grows only onto what none of them could start on.
  Grow(&caps);
}

void JobScheduler::MaybePass() {
  // Placements only change with capacity; what only time changes (backoffs, stop deadlines) is
  // picked up by the next tick.
  if (capacity_epoch_ != last_pass_epoch_) Pass();
}

void JobScheduler::TryPlace(JobEntry& j, std::optional<std::vector<NodeCapacity>>* caps) {
  if (j.rec.not_before_ms > clock_->WallMillis()) return;
  if (j.unplaceable_epoch == capacity_epoch_) return;  // nothing changed since it last did not fit
  if (j.rec.state == v1::JOB_STATE_RECOVERING) {
    SteadyTime now = clock_->Now();
    if (now < j.stop_deadline && OldRanksLive(j)) return;
    // A rank failure is often the first sign of a dying node. Wait until every node of the last
    // attempt has proven itself alive since then (one heartbeat) or has been declared LOST, so the
    // next attempt is not placed on a dead node. Bounded by the heartbeat timeout.
    if (now < j.ended_at + config_.heartbeat_timeout + config_.heartbeat_interval && !PreviousNodesSettled(j)) {
      return;
    }
    // Where it resumes from: the newest memory snapshot the live nodes hold whole is staged first
    // (snapshot_tracker.h); the ticker's passes see it through.
    if (!snapshots_->ResumeDecided(j)) return;
  }
  if (!caps->has_value()) *caps = Capacities();
  // Nodes held for a waiting job that outranks this one are not this one's to take.
  const std::vector<NodeCapacity> mine = WithReservations(j, **caps);
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
    // Jobs of lower priority may give way (job_scheduler_priorities.cc); either way the reason says for whom it waits.
    const std::string more = MakeRoom(j, mine);
    if (!more.empty()) reason += "; " + more;
    if (j.rec.state == v1::JOB_STATE_RECOVERING && j.current() && EndedForPlannedStop(*j.current())) {
      // Stopped on purpose (an eviction, a preemption, or a grow whose nodes went away) with its
      // ranks gone: it waits for capacity in the queue like any job that does not fit, saying for what.
      JobChange c{j.rec, {}, {}, {}};
      c.rec.state = v1::JOB_STATE_QUEUED;
      c.rec.reason = reason;
      c.events.push_back(jobs_->MakeEvent(j, "queued", reason));
      if (jobs_->Apply(j, std::move(c)).ok()) j.unplaceable_epoch = capacity_epoch_;
      return;
    }
    if (reason != j.rec.reason) {
      j.rec.reason = reason;  // informational; persisted with the next real transition
      jobs_->Bump(j);
    }
    return;
  }
  if (lifecycle_->Start(j, p).ok()) caps->reset();
}

void JobScheduler::Grow(std::optional<std::vector<NodeCapacity>>* caps) {
  const int64_t now_ms = clock_->WallMillis();
  if (grow_epoch_ == capacity_epoch_ && (grow_retry_ms_ == 0 || now_ms < grow_retry_ms_)) return;
  grow_epoch_ = capacity_epoch_;
  grow_retry_ms_ = 0;
  const std::set<std::string> active = jobs_->index().Active();
  std::vector<std::string> ids(active.begin(), active.end());
  std::sort(ids.begin(), ids.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;  // numeric ids: submit order
  });
  std::set<std::string> taken;  // promised to a job that grows in this pass
  for (const auto& id : ids) {
    JobEntry& j = jobs_->At(id);
    const auto& res = j.rec.spec.resources();
    // A job stored before these fields existed has them unset: the defaults of spec.proto apply.
    const bool grow = !res.has_grow() || res.grow();
    const double cooldown_s = res.has_resize_cooldown_seconds() ? res.resize_cooldown_seconds() : 60;
    if (j.rec.state != v1::JOB_STATE_RUNNING || !j.current() || !grow) continue;
    const AttemptRecord& a = *j.current();
    if (static_cast<int>(a.nodes.size()) >= res.nodes().max()) continue;
    if (!caps->has_value()) *caps = Capacities();
    GrowInput in;
    in.running = true;
    in.grow_enabled = grow;
    in.nodes = static_cast<int>(a.nodes.size());
    in.max_nodes = res.nodes().max();
    // In name order, as PlaceGang takes nodes that are not the job's (Capacities is sorted).
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
    if (lifecycle_->Resize(j, ResizeReason::kGrow, d.reason).ok()) {
      taken.insert(d.added.begin(), d.added.end());
      nodes_->ExpectTransition(d.added);
      caps->reset();
    } else {
      grow_epoch_ = 0;  // not written (the store failed): the next pass decides again
    }
  }
}

}  // namespace eft::controller
