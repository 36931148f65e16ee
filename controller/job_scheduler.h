// JobScheduler: where attempts go. A pass places waiting jobs (higher priority first, submit order
// within one; PlaceGang of scheduler.h), makes room for one that does not fit by shrinking or
// preempting jobs of lower priority (PlanForWaitingJob of priority_policy.h) and holds the nodes it
// counts on (reservations, written through to the store), then grows running jobs onto what is
// left (DecideGrow of resize_policy.h). docs/architecture.md: "Scheduling", "Priorities and
// preemption", "Resizing".
//
// Passes are cheap to skip: placement only changes with capacity, so anything that may change it
// calls CapacityChanged() and MaybePass() runs a pass only then; what only time changes (backoffs,
// stop deadlines, cooldowns) waits for the ticker's Pass().
//
// Not thread-safe: the Controller owns it under its lock, with the tables it reads and the
// lifecycle that starts and stops attempts.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "controller/attempt_lifecycle.h"
#include "controller/config.h"
#include "controller/job_table.h"
#include "controller/node_table.h"
#include "controller/scheduler.h"
#include "controller/snapshot_tracker.h"
#include "controller/store.h"

namespace eft::controller {

class JobScheduler {
 public:
  // Everything passed in must outlive it.
  JobScheduler(const ControllerConfig& config, Clock* clock, Store* store, JobTable* jobs, NodeTable* nodes,
               AttemptLifecycle* lifecycle, SnapshotTracker* snapshots);

  // The stored reservations of jobs that still wait; the others' rows are dropped.
  Status Load();

  // Something that decides where ranks can go changed (nodes, slots, attempts, reservations).
  void CapacityChanged() { ++capacity_epoch_; }
  // A full pass (the ticker).
  void Pass();
  // A pass only if capacity changed since the last one (what RPC handlers call).
  void MaybePass();
  // Places `job` if it is due and fits; `caps` is computed on first need and reset after a start.
  void TryPlace(JobEntry& job, std::optional<std::vector<NodeCapacity>>* caps);
  // Every node with its free slots, as placement sees them.
  std::vector<NodeCapacity> Capacities() const;
  // Forgets what is held for `job_id` (it started, or no longer waits).
  void ReleaseReservations(const std::string& job_id);
  size_t reservations() const { return reserved_.size(); }

 private:
  bool OldRanksLive(const JobEntry& job) const;
  // Every node of the job's last attempt has heartbeated since it ended, or is LOST.
  bool PreviousNodesSettled(const JobEntry& job) const;
  // Grows RUNNING jobs onto free capacity, oldest first; skipped when neither capacity nor a
  // cooldown changed since the last look.
  void Grow(std::optional<std::vector<NodeCapacity>>* caps);

  // priorities.cc: who gives way to whom, carried out.
  std::vector<std::string> PendingByPriority() const;
  // Whether waiting job `a` goes before `b`: higher priority, or equal and submitted earlier.
  bool Outranks(const JobEntry& a, const JobEntry& b) const;
  // `caps` as `job` may use them: nodes reserved for a job it does not outrank get reserved_for.
  std::vector<NodeCapacity> WithReservations(const JobEntry& job, const std::vector<NodeCapacity>& caps) const;
  // `job` did not fit on `caps`: plans what lower-priority jobs give up for it, stops them,
  // reserves the nodes it counts on, and returns what its reason should add ("" for nothing).
  std::string MakeRoom(JobEntry& job, const std::vector<NodeCapacity>& caps);
  // Makes the nodes reserved for `job_id` exactly `nodes`, in the store first, then in reserved_.
  Status SetReservations(const std::string& job_id, const std::vector<std::string>& nodes);
  // Reservations of jobs that no longer wait (started, cancelled, ended) are forgotten.
  void DropStaleReservations();

  const ControllerConfig& config_;
  Clock* const clock_;
  Store* const store_;
  JobTable* const jobs_;
  NodeTable* const nodes_;
  AttemptLifecycle* const lifecycle_;
  SnapshotTracker* const snapshots_;

  uint64_t capacity_epoch_ = 1;
  uint64_t last_pass_epoch_ = 0;
  // Grow: capacity_epoch_ at its last look, and the earliest end of a cooldown that held a grow
  // then (0: none).
  uint64_t grow_epoch_ = 0;
  int64_t grow_retry_ms_ = 0;
  // Nodes held for a waiting job (node -> job id): the free ones it counts on and the ones being
  // freed for it, so no job it outranks takes them before it starts. Written through to the store,
  // so a controller restart while victims stop keeps them held.
  std::map<std::string, std::string> reserved_;
};

}  // namespace eft::controller
