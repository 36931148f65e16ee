// ProgressTracker: what ranks report as they train (docs/architecture.md, "Rank events"): steps,
// evaluations, checkpoints, errors and job events, relayed by workers in their heartbeats; and the
// progress a controller restart must not forget (each attempt's reached step, the loss curves),
// written to the store in batches.
//
// An event is acknowledged to its worker only once what it means is stored (a checkpoint, a job
// event) or needs no storing (a step, whose reached step and loss point are flushed every
// progress_flush_interval, so a kill -9 forgets at most that much of them). A store failure leaves
// the event unacknowledged: the worker sends it again, and its sequence number makes a resend
// harmless.
//
// Not thread-safe: the Controller owns it under its lock, with the JobTable it reads and changes.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "controller/config.h"
#include "controller/job_table.h"
#include "controller/store.h"
#include "controller/tracking/job_tracking.h"
#include "eft/v1/agent.pb.h"

namespace eft::controller {

// A checkpoint a rank reported, with what the controller does not store: how long the save took.
struct CheckpointReport {
  std::string job_id;
  std::string kind;  // sharded | full
  int64_t step = 0;
  int64_t bytes = 0;
  double seconds = -1;        // writing it; < 0 when the event did not say
  double stall_seconds = -1;  // how long the step loop waited for it; < 0 when not said
};

class ProgressTracker {
 public:
  struct Callbacks {
    // The job's current attempt reported its first step: the change that started it is over.
    std::function<void(const AttemptRecord&)> on_first_step;
    // A checkpoint newly stored (not a resent event). Must be quick and not call back into the
    // controller. Empty: none.
    std::function<void(const CheckpointReport&)> on_checkpoint;
    // Metric points of a step or an evaluation of the current attempt, as applied, for the jobs whose
    // spec names an MLflow server (MlflowUriOf, controller/tracking/job_tracking.h); not called for
    // the others. Must be quick and not call back into the controller.
    std::function<void(const JobEntry&, const std::vector<TrackedPoint>&)> on_points;
  };
  // `jobs`, `store` and `clock` must outlive it.
  ProgressTracker(const ControllerConfig& config, Clock* clock, Store* store, JobTable* jobs, Callbacks callbacks);

  // Applies the events of `node`'s heartbeat that come after `acked_seq`, in order, until one
  // cannot be stored; returns the sequence number to acknowledge.
  uint64_t OnEvents(const std::string& node, uint64_t acked_seq,
                    const google::protobuf::RepeatedPtrField<v1::RankEvent>& events);
  // Writes what changed since the last flush: the reached steps, then the loss curves.
  void Flush();
  // Flush() when progress_flush_interval has passed since the last one.
  void FlushIfDue();
  // Whether the job has a reached step or loss points not stored yet (it must not leave memory).
  bool Unsaved(const std::string& job_id) const { return reached_dirty_.count(job_id) || loss_dirty_.count(job_id); }
  void SetCheckpointObserver(std::function<void(const CheckpointReport&)> observer) {
    callbacks_.on_checkpoint = std::move(observer);
  }

 private:
  // Stores the reached step of the jobs' current attempts where it advanced past the stored one, in
  // one transaction. Running attempts are written every progress_flush_interval (reached_dirty_),
  // ended ones at once.
  void StoreReachedSteps(const std::set<std::string>& job_ids);
  // The changed points of loss_dirty_'s curves, one transaction; kept dirty on failure.
  void StoreLossHistory();

  const ControllerConfig& config_;
  Clock* const clock_;
  Store* const store_;
  JobTable* const jobs_;
  Callbacks callbacks_;
  // Jobs whose running attempt reported a step not stored yet.
  std::set<std::string> reached_dirty_;
  // Jobs whose loss curves changed since they were last stored.
  std::set<std::string> loss_dirty_;
  SteadyTime flushed_at_{};
};

}  // namespace eft::controller
