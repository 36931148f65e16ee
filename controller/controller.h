// Controller: the cluster's source of truth and its only decision maker.
//
// Owns jobs, attempts, nodes and checkpoints; runs the job state machine of docs/architecture.md;
// gang-schedules attempts onto nodes; declares nodes LOST after heartbeat_timeout and restarts the
// attempts they carried at the world size the surviving nodes allow, from the newest checkpoint.
// Every transition is written to the Store (with an event row that says why) before it is visible
// to anyone; if the write fails the transition does not happen and is retried by the next
// heartbeat or tick. On Create it reloads everything, and re-registering workers reconcile with it:
// an attempt that was running keeps running.
//
// Thread-safe: one mutex (mu_) guards all state, and clang checks it (common/thread_annotations.h).
// The state lives in managers, each owning its part and not thread-safe itself, each a member
// GUARDED_BY(mu_), so every use of one is checked to hold the lock: JobTable (the jobs, and the one
// way they change), NodeTable (registration, fencing, liveness, heartbeat pace), AttemptLifecycle
// (the state machine over attempts), JobScheduler (placement, growth, priorities, reservations),
// ProgressTracker (what ranks report). The Controller wires them, takes the lock and serves the
// API. RPC handlers call the public methods; something must call Tick() every tick_interval
// (StartTicker does, tests may drive it with a ManualClock).
//
// Where the code is: controller.cc (creation, loading, the client API, the tick), agents.cc (the
// worker-facing API). Pure decisions are their own files: placement (scheduler.h), growth
// (resize_policy.h), who gives way to whom (priority_policy.h), what a rank event means
// (rank_events.h), the wire conversions (wire.h), the submit group commit (group_commit.h).
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "controller/config.h"
#include "controller/group_commit.h"
#include "controller/attempt_lifecycle.h"
#include "controller/job_entry.h"
#include "controller/job_scheduler.h"
#include "controller/job_table.h"
#include "controller/log_store.h"
#include "controller/node_table.h"
#include "controller/progress_tracker.h"
#include "controller/loss_history.h"
#include "controller/records.h"
#include "controller/resize_policy.h"
#include "controller/scheduler.h"
#include "controller/snapshot_tracker.h"
#include "controller/store.h"
#include "controller/tracking/job_tracking.h"
#include "eft/v1/agent.pb.h"
#include "eft/v1/job.pb.h"
#include "eft/v1/node.pb.h"

namespace eft::controller {

// What /metrics reports of the controller's state, copied in one pass under its lock (see
// Controller::Snapshot and controller_metrics.h).
struct ControllerSnapshot {
  struct Job {
    std::string id;
    std::string name;
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
    int32_t attempt = 0;       // attempts started so far
    int32_t restarts = 0;      // failures counted against max_restarts (a reclassified one is refunded)
    int32_t max_restarts = 0;
    int32_t world_size = 0;    // of the running attempt; 0 when none runs
    v1::TrainingProgress progress;  // from the newest step event of the current attempt; step 0: none yet
    int64_t checkpoints = 0;
    int64_t last_checkpoint_bytes = 0;
    int64_t last_checkpoint_step = 0;
    int64_t last_checkpoint_ms = 0;  // wall time the newest checkpoint was reported; 0: none
    // Planned resizes by reason (index: ResizeReason), from the job's `resized` events.
    std::array<int64_t, kResizeReasons.size()> resizes{};
    int64_t preemptions = 0;  // from the job's `preempted` events
    int64_t checkpoint_failures = 0;  // from the job's `checkpoint_failed` events
    // Memory snapshots of the current attempt (SnapshotTracker): the newest step held whole and the
    // newest held with its replicas (-1: none), and the bytes the nodes hold.
    int64_t memory_snapshot_step = -1;
    int64_t memory_replicated_step = -1;
    int64_t memory_snapshot_bytes = 0;
    int64_t steps_lost_total = 0;       // since this controller started
    std::array<int64_t, 3> recoveries{};  // by RecoverySource, since this controller started
  };
  struct Node {
    std::string name;
    bool ready = false;  // READY, else LOST
    bool drained = false;
    int32_t slots = 0;
    double heartbeat_age_seconds = 0;  // since the last Register/Heartbeat (or controller start)
  };
  std::map<v1::JobState, int64_t> jobs_by_state;  // over every job
  std::vector<Job> jobs;  // non-terminal jobs, then the newest terminal ones (see Snapshot)
  std::vector<Node> nodes;
};

class Controller {
 public:
  // Opens (or creates) the database at config.db_path and loads its state.
  static Result<std::unique_ptr<Controller>> Create(ControllerConfig config, Clock* clock);
  ~Controller();

  // --- JobService ---
  // `owner`: the authenticated user submitting it ("" without auth), recorded on the job.
  Result<v1::Job> SubmitJob(const v1::JobSpec& spec, const std::string& request_id, const std::string& owner = "") EXCLUDES(mu_);
  Result<v1::Job> GetJob(const std::string& id) EXCLUDES(mu_);
  // Who submitted the job ("" without auth): the ownership check of CancelJob (docs/auth.md).
  Result<std::string> JobOwner(const std::string& id) EXCLUDES(mu_);
  Result<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request) EXCLUDES(mu_);
  Result<v1::Job> CancelJob(const std::string& id) EXCLUDES(mu_);
  // Blocks until the job changed after *version (0: return at once) or `timeout` passed; returns
  // the job and sets *version. `changed` tells whether it changed.
  Result<v1::Job> WaitForJobChange(const std::string& id, uint64_t* version, std::chrono::milliseconds timeout,
                                   bool* changed) EXCLUDES(mu_);
  static bool IsTerminal(v1::JobState state);
  // How many jobs memory holds now (the soak benchmark and tests watch it stay bounded).
  size_t JobsInMemory() const EXCLUDES(mu_);

  // --- NodeService ---
  v1::ListNodesResponse ListNodes() EXCLUDES(mu_);
  // Drains (no new ranks) or undrains a node. `evict` (drain only): the attempts running there also
  // end as a planned resize: their ranks stop with a checkpoint and each job continues on the nodes
  // it has left (docs/architecture.md, "Resizing").
  Result<v1::Node> SetDrained(const std::string& name, bool drained, bool evict = false) EXCLUDES(mu_);

  // --- AgentService ---
  // One live worker per node name: a worker registering under a name another incarnation holds is
  // taken at once when it restarted in place (previous_incarnation), after the holder missed a
  // heartbeat otherwise (retry_after_ms meanwhile), and fenced when the holder is alive. The
  // incarnation a name was taken from is fenced too (docs/architecture.md, "Two workers, one name").
  Result<v1::RegisterResponse> Register(const v1::RegisterRequest& request) EXCLUDES(mu_);
  Result<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request) EXCLUDES(mu_);
  LogStore& logs() { return logs_; }

  // Detects lost nodes, stop timeouts and expired backoffs, and schedules.
  void Tick() EXCLUDES(mu_);
  // Calls Tick() every config.tick_interval on a thread until the Controller is destroyed.
  void StartTicker();

  const ControllerConfig& config() const { return config_; }

  // For /metrics: job counts by state over every job, per-job details for every job that is not
  // terminal plus the `max_terminal_jobs` most recently submitted terminal ones (so the number of
  // per-job series stays bounded however many jobs the database holds), and every node.
  // One pass under the lock; O(jobs + nodes), no I/O.
  ControllerSnapshot Snapshot(size_t max_terminal_jobs) const EXCLUDES(mu_);
  // Called for every newly stored checkpoint (not for a resent event), with the controller's lock
  // held: it must be quick and must not call back into the Controller. Empty: none.
  void SetCheckpointObserver(std::function<void(const CheckpointReport&)> observer) EXCLUDES(mu_);

  // --- Tracking (docs/tracking.md; controller/tracking/controller_tracking.cc) ---
  // From now on `observer` hears of every job logged to MLflow (JobTrackingObserver, called with the
  // lock held): first, here, of each one whose run is not ended yet with its stored row (from memory,
  // or the store for a job no longer in memory), then of submits, changes and metric points.
  // nullptr: none. Set it before workers can report (RunController does, before gRPC serves).
  Status SetTrackingObserver(JobTrackingObserver* observer) EXCLUDES(mu_);
  // For the tracker's thread (never called with its own lock held): stores a job's mlflow_runs row;
  // appends a job event (what `eftctl job describe` lists); the job's stored loss curves as points
  // (train/loss and eval/<set>/loss, time_ms 0), from memory or the store.
  Status SaveMlflowRun(const MlflowRunRecord& run) EXCLUDES(mu_);
  Status AddJobEvent(const std::string& job_id, const std::string& type, const std::string& message) EXCLUDES(mu_);
  Result<std::vector<TrackedPoint>> StoredLossCurves(const std::string& job_id) EXCLUDES(mu_);

 private:
  Controller(ControllerConfig config, Clock* clock, std::unique_ptr<Store> store);
  Status Load() EXCLUDES(mu_);
  using SubmitBatch = GroupCommit<JobTable::NewJob, Result<v1::Job>>;
  // Writes a batch of submits in one transaction and answers each of them.
  void CommitSubmits(const std::vector<SubmitBatch::Item*>& batch) EXCLUDES(mu_);

  v1::Node ToProto(const NodeEntry& node) const REQUIRES(mu_);
  // Declares `node` LOST (stored first) and ends what ran there.
  void MarkNodeLostLocked(NodeEntry& node, const std::string& reason) REQUIRES(mu_);
  // The heartbeat interval to tell `node` (NodeTable::HeartbeatInterval, with the jobs' view of
  // which of its ranks are still wanted).
  std::chrono::milliseconds HeartbeatIntervalLocked(const NodeEntry& node) const REQUIRES(mu_);

  // Set at construction, read-only after: no lock needed.
  const ControllerConfig config_;
  Clock* const clock_;
  LogStore logs_;  // thread-safe on its own

  mutable Mutex mu_;
  CondVar changed_;  // notified (under mu_) whenever a job's version is bumped
  // Only used under mu_, so that a transaction and the memory it describes change together.
  const std::unique_ptr<Store> store_ PT_GUARDED_BY(mu_);
  // The managers, in the order they are built (each may use the ones before it).
  JobTable jobs_ GUARDED_BY(mu_);
  NodeTable nodes_ GUARDED_BY(mu_);
  ProgressTracker progress_ GUARDED_BY(mu_);
  SnapshotTracker snapshots_ GUARDED_BY(mu_);
  AttemptLifecycle lifecycle_ GUARDED_BY(mu_);
  JobScheduler scheduler_ GUARDED_BY(mu_);

  // Submits are written in groups, one transaction for all that arrived meanwhile (group_commit.h).
  SubmitBatch submits_{[this](const std::vector<SubmitBatch::Item*>& batch) { CommitSubmits(batch); }};

  // Told of the jobs logged to MLflow (SetTrackingObserver); nullptr: none.
  JobTrackingObserver* tracking_ GUARDED_BY(mu_) = nullptr;
  void NotifyTracking(const JobEntry& job, const MlflowRunRecord* stored) REQUIRES(mu_);

  std::atomic<bool> stopping_{false};
  std::thread ticker_;
};

}  // namespace eft::controller
