// AttemptLifecycle: the job state machine of docs/architecture.md over attempts: starting one where
// placement put it, the ranks each node is to run, what the ranks' reported states mean, and ending
// an attempt with the restart policy (counted or not, backoff, max_restarts), for a failure, a lost
// node, a planned stop (resize, preemption) or a cancel. Every transition is one JobTable::Apply:
// stored with an event that says why before anyone sees it.
//
// Not thread-safe: the Controller owns it under its lock, with the tables it changes. It calls
// on_started after an attempt started (its job no longer waits: placement drops its reservations).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "controller/config.h"
#include "controller/job_table.h"
#include "controller/node_table.h"
#include "controller/resize_policy.h"
#include "controller/scheduler.h"
#include "controller/snapshot_tracker.h"
#include "eft/v1/agent.pb.h"

namespace eft::controller {

class AttemptLifecycle {
 public:
  // How an ended attempt leaves its job: kSucceeded/kFailed/kCancelled finish it, kRestart and
  // kRestartCounted move it to RECOVERING (the latter counts against max_restarts and may fail the
  // job instead).
  enum class Outcome { kSucceeded, kFailed, kCancelled, kRestart, kRestartCounted };

  // The tables must outlive it.
  AttemptLifecycle(const ControllerConfig& config, Clock* clock, JobTable* jobs, NodeTable* nodes,
                   const SnapshotTracker* snapshots, std::function<void(const std::string& job_id)> on_started);

  // A job loaded from the store: what memory must assume of its ranks and timers (a RUNNING
  // attempt had every rank running; a RECOVERING job waits for its old ranks' reports again).
  void Restore(JobEntry& job);
  // Attempts created over all jobs, ever (each picks its MASTER_PORT by this count).
  void set_attempts_created(int64_t n) { attempts_created_ = n; }

  Status Start(JobEntry& job, const Placement& placement);
  // Ends the current attempt with `reason` (in words) and `end` (the kind decisions read), then
  // moves the job on as `outcome` says. `first_events` go into the same transaction, before the
  // attempt_ended event.
  Status End(JobEntry& job, const std::string& reason, v1::AttemptEnd end, Outcome outcome,
             std::vector<EventRecord> first_events = {});
  // A planned resize: the attempt ends with "resized: <what>" and a `resized` event, not counted;
  // its ranks stop with a checkpoint and the next attempt resumes from it.
  Status Resize(JobEntry& job, ResizeReason reason, const std::string& what);
  // Preemption for a job of higher priority: the same planned stop, with a `preempted` event; the
  // job waits QUEUED when it does not fit afterwards.
  Status Preempt(JobEntry& job, const std::string& what);
  // Cancels the job: ends its attempt, or takes it out of the queue.
  Status Cancel(JobEntry& job);

  // What `node`'s last report says of the ranks of the attempts placed there: started, exited
  // (with the restart policy's verdict), vanished.
  void OnRankReports(const NodeEntry& node);
  // `node` was declared LOST: the attempts with ranks there end (not counted), and a counted rank
  // failure that just happened there is forgiven as the node's.
  void OnNodeLost(const std::string& node, const std::string& reason);

  // The ranks `node` should run, and the spec of every attempt with a desired rank the node's last
  // report did not list (a listed rank was started: its worker needs the spec no more), so the spec
  // travels once per attempt and node rather than in every reply.
  void DesiredFor(const NodeEntry& node, google::protobuf::RepeatedPtrField<v1::RankAssignment>* out,
                  google::protobuf::RepeatedPtrField<v1::AttemptSpec>* specs) const;
  // The live ranks `node` reports whose attempt ended unplanned (EndedUnplanned): to be killed at
  // once, without the stop grace.
  void StopNowFor(const NodeEntry& node, google::protobuf::RepeatedPtrField<v1::RankKey>* out) const;

 private:
  void OnRankExit(JobEntry& job, int rank, const v1::RankStatus& status);
  void ForgiveLastFailure(JobEntry& job, const std::string& cause);
  std::chrono::milliseconds BackoffFor(int restarts) const;
  // Whether the nodes all run in one network stack, so that loopback reaches each of them (their
  // workers' network_stack agree); nullopt when a node's is not known (docs/architecture.md, "Rank
  // traffic and the node's address").
  std::optional<bool> ShareOneNetworkStack(const std::vector<std::string>& nodes) const;

  const ControllerConfig& config_;
  Clock* const clock_;
  JobTable* const jobs_;
  NodeTable* const nodes_;
  const SnapshotTracker* const snapshots_;
  const std::function<void(const std::string&)> on_started_;
  int64_t attempts_created_ = 0;
};

}  // namespace eft::controller
