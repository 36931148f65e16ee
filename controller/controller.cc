// Controller: creation and wiring of the managers, loading, the client-facing API, the tick. The
// worker-facing side is agents.cc; the state and its rules are the managers' (controller.h).
#include "controller/controller.h"

#include <algorithm>
#include <set>

#include "common/logging.h"
#include "controller/rank_events.h"
#include "controller/wire.h"
#include "spec/job_spec.h"

namespace eft::controller {

bool Controller::IsTerminal(v1::JobState state) { return IsTerminalState(state); }

Result<std::unique_ptr<Controller>> Controller::Create(ControllerConfig config, Clock* clock) {
  EFT_RETURN_IF_ERROR(FinalizeControllerConfig(&config));
  EFT_ASSIGN_OR_RETURN(auto store, Store::Open(config.db_path));
  std::unique_ptr<Controller> c(new Controller(std::move(config), clock, std::move(store)));
  EFT_RETURN_IF_ERROR(c->Load());
  return c;
}

Controller::Controller(ControllerConfig config, Clock* clock, std::unique_ptr<Store> store)
    : config_(std::move(config)),
      clock_(clock),
      logs_(config_.data_dir + "/logs"),
      store_(std::move(store)),
      jobs_(config_, clock_, store_.get(),
            {/*on_applied=*/[this]() REQUIRES(mu_) { scheduler_.CapacityChanged(); },
             /*on_bumped=*/[this] { changed_.NotifyAll(); },
             /*on_changed=*/[this](const JobEntry& j, const MlflowRunRecord* run)
                 REQUIRES(mu_) { NotifyTracking(j, run); }}),
      nodes_(config_, clock_, store_.get(), [this]() REQUIRES(mu_) { scheduler_.CapacityChanged(); }),
      progress_(config_, clock_, store_.get(), &jobs_,
                {/*on_first_step=*/[this](const AttemptRecord& a)
                     REQUIRES(mu_) { nodes_.TransitionDone(a.nodes); },
                 /*on_checkpoint=*/{},
                 /*on_points=*/[this](const JobEntry& j, const std::vector<TrackedPoint>& points)
                     REQUIRES(mu_) {
                       if (tracking_) tracking_->OnPoints(j.rec.id, points);
                     }}),
      snapshots_(config_, clock_, &jobs_, &nodes_),
      lifecycle_(config_, clock_, &jobs_, &nodes_, &snapshots_,
                 [this](const std::string& job_id) REQUIRES(mu_) { scheduler_.ReleaseReservations(job_id); }),
      scheduler_(config_, clock_, store_.get(), &jobs_, &nodes_, &lifecycle_, &snapshots_) {}

Controller::~Controller() {
  stopping_ = true;
  if (ticker_.joinable()) ticker_.join();
  MutexLock lock(&mu_);
  progress_.Flush();  // a clean shutdown forgets no step, nor a point of a loss curve
}

void Controller::StartTicker() {
  ticker_ = std::thread([this] {
    while (!stopping_) {
      Tick();
      std::this_thread::sleep_for(config_.tick_interval);
    }
  });
}

Status Controller::Load() {
  MutexLock lock(&mu_);
  EFT_RETURN_IF_ERROR(nodes_.Load());
  EFT_ASSIGN_OR_RETURN(const size_t left_out, jobs_.Load([&](JobEntry& j) REQUIRES(mu_) { lifecycle_.Restore(j); }));
  lifecycle_.set_attempts_created(jobs_.attempts_loaded());
  EFT_RETURN_IF_ERROR(scheduler_.Load());
  size_t unfinished = std::count_if(jobs_.order().begin(), jobs_.order().end(), [&](const std::string& id)
                                        REQUIRES(mu_) { return !IsTerminal(jobs_.At(id).rec.state); });
  EFT_LOG(INFO) << "loaded " << jobs_.size() << " jobs (" << unfinished << " not finished; " << left_out
                << " older finished ones stay in the database) and " << nodes_.all().size() << " nodes ("
                << scheduler_.reservations() << " reserved) from " << store_->path();
  return Status::Ok();
}

void Controller::Tick() {
  MutexLock lock(&mu_);
  for (const auto& [name, why] : nodes_.Silent()) MarkNodeLostLocked(*nodes_.Find(name), why);
  // A node that missed a heartbeat may be declared lost soon: the other nodes of its jobs heartbeat
  // fast meanwhile, so that they hear of it (stop_now) within transition_heartbeat_interval rather
  // than at their next normal heartbeat (docs/architecture.md, "Fast heartbeats").
  for (const std::string& name : nodes_.Late()) {
    for (const auto& id : jobs_.index().ActiveOn(name)) {
      if (const AttemptRecord* a = jobs_.At(id).current()) nodes_.ExpectTransition(a->nodes);
    }
  }
  scheduler_.Pass();
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
  snapshots_.Forget(node.rec.name);  // its memory went with it
  lifecycle_.OnNodeLost(node.rec.name, reason);
}

// ---------------------------------------------------------------------------------------------
// JobService

// Group commit: a submit that arrives while another batch is being written waits and goes into the
// next transaction with the others, so N concurrent submits cost one fsync instead of N.
Result<v1::Job> Controller::SubmitJob(const v1::JobSpec& submitted, const std::string& request_id,
                                      const std::string& owner) {
  JobTable::NewJob me{submitted, request_id, owner};
  EFT_RETURN_IF_ERROR(eft::spec::NormalizeJobSpec(&me.spec));
  // Characters, as docs/openapi.yaml's maxLength counts them (UTF-8 continuation bytes are not one).
  const auto characters = std::count_if(request_id.begin(), request_id.end(),
                                        [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
  if (characters > 128) return Status::InvalidArgument("request_id: at most 128 characters");
  return submits_.Run(std::move(me));
}

void Controller::CommitSubmits(const std::vector<SubmitBatch::Item*>& batch) {
  MutexLock lock(&mu_);
  std::vector<JobTable::NewJob> jobs;
  for (SubmitBatch::Item* item : batch) jobs.push_back(item->request);
  auto ids = jobs_.Insert(jobs);
  if (!ids.ok()) {
    for (SubmitBatch::Item* item : batch) item->reply = ids.status().WithContext("storing the job");
    return;
  }
  // Older pending jobs did not fit at the current capacity and still do not: only the new ones can
  // start now, so there is no need for a pass over the whole queue.
  std::optional<std::vector<NodeCapacity>> caps;
  for (const auto& inserted : *ids) {
    if (inserted.created) scheduler_.TryPlace(jobs_.At(inserted.id), &caps);
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    JobEntry scratch;
    auto job = jobs_.Read((*ids)[i].id, &scratch);
    batch[i]->reply = job.ok() ? Result<v1::Job>(JobMessage(**job, true)) : Result<v1::Job>(job.status());
  }
  changed_.NotifyAll();
}

Result<std::string> Controller::JobOwner(const std::string& id) {
  MutexLock lock(&mu_);
  JobEntry scratch;
  EFT_ASSIGN_OR_RETURN(const JobEntry* j, jobs_.Read(id, &scratch));
  return j->rec.owner;
}

Result<v1::Job> Controller::GetJob(const std::string& id) {
  MutexLock lock(&mu_);
  JobEntry scratch;
  EFT_ASSIGN_OR_RETURN(const JobEntry* j, jobs_.Read(id, &scratch));
  return JobMessage(*j, true);
}

Result<v1::Job> Controller::CancelJob(const std::string& id) {
  MutexLock lock(&mu_);
  JobEntry scratch;
  EFT_ASSIGN_OR_RETURN(const JobEntry* found, jobs_.Read(id, &scratch));
  if (found->rec.state == v1::JOB_STATE_CANCELLED) return JobMessage(*found, true);
  if (IsTerminal(found->rec.state)) {
    return Status::FailedPrecondition("job " + id + " already ended: " + v1::JobState_Name(found->rec.state));
  }
  JobEntry* j = jobs_.Find(id);  // unfinished: in memory
  EFT_RETURN_IF_ERROR(lifecycle_.Cancel(*j));
  return JobMessage(*j, true);
}

Result<v1::Job> Controller::WaitForJobChange(const std::string& id, uint64_t* version,
                                             std::chrono::milliseconds timeout, bool* changed) {
  MutexLock lock(&mu_);
  JobEntry* j = jobs_.Find(id);
  if (!j) {
    // Finished and out of memory: it will not change again. A caller that has seen it waits out
    // its timeout, as for any job that does not change.
    JobEntry scratch;
    EFT_ASSIGN_OR_RETURN(const JobEntry* finished, jobs_.Read(id, &scratch));
    *changed = *version != finished->version;
    if (!*changed) changed_.WaitFor(&mu_, timeout, [&] { return stopping_.load(); });
    *version = finished->version;
    return JobMessage(*finished, true);
  }
  changed_.WaitFor(&mu_, timeout, [&] { return j->version != *version || stopping_; });
  *changed = j->version != *version;
  *version = j->version;
  return JobMessage(*j, true);
}

size_t Controller::JobsInMemory() const {
  MutexLock lock(&mu_);
  return jobs_.size();
}

Result<v1::ListJobsResponse> Controller::ListJobs(const v1::ListJobsRequest& request) {
  MutexLock lock(&mu_);
  return jobs_.List(request);
}

// ---------------------------------------------------------------------------------------------
// NodeService

v1::ListNodesResponse Controller::ListNodes() {
  MutexLock lock(&mu_);
  v1::ListNodesResponse out;
  std::map<std::string, int> free;
  for (const auto& cap : scheduler_.Capacities()) free[cap.name] = cap.ready ? static_cast<int>(cap.free_slots.size()) : 0;
  for (const auto& [name, n] : nodes_.all()) {
    v1::Node* node = out.add_nodes();
    *node = ToProto(n);
    node->set_free_slots(free[name]);
  }
  return out;
}

Result<v1::Node> Controller::SetDrained(const std::string& name, bool drained, bool evict) {
  MutexLock lock(&mu_);
  if (nodes_.Find(name) == nullptr) return Status::NotFound("node " + name + " not found");
  if (evict && !drained) return Status::InvalidArgument("evict: only a drain evicts");
  EFT_ASSIGN_OR_RETURN(NodeEntry * node, nodes_.SetDrained(name, drained));
  EFT_LOG(INFO) << "node " << name << (drained ? " drained: it takes no new ranks" : " undrained")
                << (evict ? "; evicting what runs there" : "");
  if (evict) {
    // Each job stops there with a checkpoint and goes on where it can: its other nodes plus free
    // ones (the drained node no longer counts as free), up to nodes.max.
    std::vector<NodeCapacity> caps = scheduler_.Capacities();
    for (const auto& id : jobs_.index().ActiveOn(name)) {
      JobEntry& j = jobs_.At(id);
      if (!j.active() || !j.current()) continue;
      const auto& nodes = j.current()->nodes;
      const int from = static_cast<int>(nodes.size());
      int free = 0;
      for (const auto& cap : caps) {
        if (cap.ready && !cap.drained && std::find(nodes.begin(), nodes.end(), cap.name) == nodes.end() &&
            static_cast<int>(cap.free_slots.size()) >= j.rec.spec.resources().gpus_per_node()) {
          ++free;
        }
      }
      const auto& range = j.rec.spec.resources().nodes();
      const int to = std::min(range.max(), from - 1 + free);
      EFT_RETURN_IF_ERROR(lifecycle_.Resize(j, ResizeReason::kEvict, EvictWhat(name, from, to, range.min()))
                              .WithContext("evicting job " + id + " from node " + name));
    }
  }
  if (!drained) scheduler_.MaybePass();
  v1::Node out = ToProto(*node);
  for (const auto& cap : scheduler_.Capacities()) {
    if (cap.name == name) out.set_free_slots(cap.ready ? static_cast<int>(cap.free_slots.size()) : 0);
  }
  return out;
}

void Controller::SetCheckpointObserver(std::function<void(const CheckpointReport&)> observer) {
  MutexLock lock(&mu_);
  progress_.SetCheckpointObserver(std::move(observer));
}

ControllerSnapshot Controller::Snapshot(size_t max_terminal_jobs) const {
  ControllerSnapshot out;
  MutexLock lock(&mu_);
  size_t terminal_kept = 0;
  // Newest first, so the terminal jobs kept are the most recently submitted ones.
  for (auto id = jobs_.order().rbegin(); id != jobs_.order().rend(); ++id) {
    const JobEntry& j = jobs_.At(*id);
    ++out.jobs_by_state[j.rec.state];
    if (IsTerminal(j.rec.state) && terminal_kept++ >= max_terminal_jobs) continue;
    ControllerSnapshot::Job& v = out.jobs.emplace_back();
    v.id = j.rec.id;
    v.name = j.rec.spec.name();
    v.state = j.rec.state;
    v.attempt = j.rec.attempt;
    v.restarts = j.rec.restarts;
    v.max_restarts = j.rec.spec.fault_tolerance().max_restarts();
    if (j.active() && j.current()) v.world_size = j.current()->world_size;
    v.progress = j.progress;
    v.checkpoints = static_cast<int64_t>(j.checkpoints.size());
    if (!j.checkpoints.empty()) {
      // Appended as reported; a resent report of an older one is not appended again.
      const CheckpointRecord& newest = j.checkpoints.back();
      v.last_checkpoint_bytes = newest.bytes;
      v.last_checkpoint_step = newest.step;
      v.last_checkpoint_ms = newest.time_ms;
    }
    v.resizes = j.resizes;
    v.preemptions = j.preemptions;
    v.checkpoint_failures = j.checkpoint_failures;
    if (j.active()) {
      v.memory_snapshot_step = snapshots_.NewestWholeStep(j);
      v.memory_replicated_step = snapshots_.NewestReplicatedStep(j);
      v.memory_snapshot_bytes = snapshots_.HeldBytes(j);
    }
    v.steps_lost_total = j.steps_lost_total;
    v.recoveries = j.recoveries;
  }
  for (const auto& [state, n] : jobs_.evicted_by_state()) out.jobs_by_state[state] += n;
  const SteadyTime now = clock_->Now();
  for (const auto& [name, n] : nodes_.all()) {
    ControllerSnapshot::Node& v = out.nodes.emplace_back();
    v.name = name;
    v.ready = n.ready;
    v.drained = n.rec.drained;
    v.slots = n.rec.slots;
    v.heartbeat_age_seconds = std::max(0.0, std::chrono::duration<double>(now - n.last_heartbeat).count());
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Conversions

v1::Node Controller::ToProto(const NodeEntry& n) const {
  std::set<std::string> jobs = jobs_.index().ActiveOn(n.rec.name);
  for (const auto& r : n.reported) {
    if (IsLive(r)) jobs.insert(r.key().job_id());
  }
  return NodeToProto(n.rec, n.ready, n.last_heartbeat_ms, jobs);
}

}  // namespace eft::controller
