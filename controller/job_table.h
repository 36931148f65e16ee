// JobTable: the jobs the controller holds in memory, and the one way they change.
//
// Holds every unfinished job and the most recently finished ones (config.finished_jobs_in_memory;
// docs/architecture.md, "Finished jobs"); the store holds them all. A job changes only through
// Apply, which writes the change (records and events) to the store in one transaction and, only
// when that succeeded, to memory: so memory never shows what a controller restart would forget.
// Reads of a job no longer in memory go to the store (Read).
//
// Not thread-safe: the Controller owns it under its lock, like the managers that use it. It calls
// back (on_applied) after every applied change, so placement can take note that capacity may have
// changed, and (on_bumped) whenever a job's version moved, so waiters can wake.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "controller/config.h"
#include "controller/job_entry.h"
#include "controller/job_index.h"
#include "controller/store.h"
#include "eft/v1/job.pb.h"
#include "eft/v1/spec.pb.h"

namespace eft::controller {

class JobTable {
 public:
  struct Callbacks {
    std::function<void()> on_applied;  // after every change Apply stored
    std::function<void()> on_bumped;   // after a job's version moved
    // After a job was inserted (with its mlflow_runs row when its spec names an MLflow server) or a
    // change of it applied (nullptr), for trackers (controller/tracking/job_tracking.h). Empty: none.
    std::function<void(const JobEntry&, const MlflowRunRecord*)> on_changed;
  };
  // `store` and `clock` must outlive it.
  JobTable(const ControllerConfig& config, Clock* clock, Store* store, Callbacks callbacks);

  // Loads every unfinished job and the newest finished ones; older finished ones are only counted.
  // Returns how many finished jobs stayed in the store. `prepare` sees each loaded job before it is
  // filed (the Controller restores what it knows of running ranks there).
  Result<size_t> Load(const std::function<void(JobEntry&)>& prepare);

  // A submitted job, normalized, to be stored: Insert gives it its id.
  struct NewJob {
    v1::JobSpec spec;
    std::string request_id;
    std::string owner;
  };
  // Stores new jobs in one transaction and files them, with the defaults only the id decides
  // (checkpoint.dir, spec.tracking: FillTrackingDefaults) and, for a job logged to MLflow, its
  // mlflow_runs row. Per job: its id, or the id of the job an
  // earlier submit with the same request id created (created: false). On failure nothing is
  // stored or filed.
  struct Inserted {
    std::string id;
    bool created = false;
  };
  Result<std::vector<Inserted>> Insert(const std::vector<NewJob>& jobs);

  // A job in memory, or nullptr.
  JobEntry* Find(const std::string& id);
  const JobEntry* Find(const std::string& id) const;
  // A job in memory that must be there (an id from the index).
  JobEntry& At(const std::string& id) { return jobs_.at(id); }
  const JobEntry& At(const std::string& id) const { return jobs_.at(id); }
  // The job from memory, else from the store into *scratch; InvalidArgument for a malformed id,
  // NotFound when neither has it.
  Result<const JobEntry*> Read(const std::string& id, JobEntry* scratch);
  // A page of jobs, newest first, from the store (which has them all, in the state memory has),
  // with memory's progress where memory has the job.
  Result<v1::ListJobsResponse> List(const v1::ListJobsRequest& request);

  // An event of `job`, stamped now with its current attempt.
  EventRecord MakeEvent(const JobEntry& job, const std::string& type, const std::string& message) const;
  // Writes `change` through: store first, then memory, the index and the counters.
  Status Apply(JobEntry& job, JobChange change);
  // The job changed in a way only memory keeps (progress, a reason): its watchers wake.
  void Bump(JobEntry& job);

  // Takes the oldest finished jobs out of memory beyond config.finished_jobs_in_memory, except
  // those `unsaved` says still have something to store. Only where no JobEntry reference is held.
  void EvictFinished(const std::function<bool(const std::string&)>& unsaved);

  const JobIndex& index() const { return index_; }
  size_t size() const { return jobs_.size(); }
  // Ids in memory, in submit order.
  const std::vector<std::string>& order() const { return order_; }
  // Jobs that left memory, by state.
  const std::map<v1::JobState, int64_t>& evicted_by_state() const { return evicted_by_state_; }
  // Attempts ever created, over all jobs (kept and evicted): attempts are never deleted.
  int64_t attempts_loaded() const { return attempts_loaded_; }

 private:
  Result<JobEntry> LoadEntry(JobRecord rec);
  JobEntry& File(JobEntry job);  // into jobs_, order_, by_request_id_ and the index
  void Refile(JobEntry& job);

  const ControllerConfig& config_;
  Clock* const clock_;
  Store* const store_;
  const Callbacks callbacks_;

  std::map<std::string, JobEntry> jobs_;  // by id
  std::vector<std::string> order_;
  // Finished jobs in memory in the order they finished: beyond config_.finished_jobs_in_memory the
  // first ones leave memory.
  std::deque<std::string> finished_;
  std::map<v1::JobState, int64_t> evicted_by_state_;
  JobIndex index_;  // pending jobs; active jobs by node
  std::map<std::string, std::string> by_request_id_;  // submit idempotency keys -> job id
  int64_t attempts_loaded_ = 0;
};

// The job as the API shows it: `full` adds attempts, checkpoints, events and the loss history.
v1::Job JobMessage(const JobEntry& job, bool full);

}  // namespace eft::controller
