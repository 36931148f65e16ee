// Store: the controller's durable state in one SQLite file (database.h: WAL, synchronous=FULL, so
// a call that returned OK survives a crash of the process or the machine), one struct per table
// (records.h). The schema's migrations are here; Open brings any older file to kSchemaVersion. Every
// method is one transaction unless it runs inside RunInTransaction, which groups several writes
// atomically. Not thread-safe: the controller serialises calls under its own lock.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "controller/database.h"
#include "controller/records.h"

namespace eft::controller {

class Store {
 public:
  // Creates the file (and its parent directory) if missing and migrates it to the current schema.
  static Result<std::unique_ptr<Store>> Open(const std::string& path);

  static constexpr int kSchemaVersion = 9;
  int schema_version() const { return db_->schema_version(); }
  const std::string& path() const { return db_->path(); }

  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT; rolls back and returns the error if `body` or the
  // commit fails. Nested calls join the outer transaction.
  Status RunInTransaction(const std::function<Status()>& body) { return db_->RunInTransaction(body); }

  // Jobs. InsertJob assigns job->id.
  Status InsertJob(JobRecord* job);
  Status UpdateJob(const JobRecord& job);  // every column but id and create_ms
  Result<std::vector<JobRecord>> LoadJobs();  // ascending id
  Result<std::optional<JobRecord>> FindJobByRequestId(const std::string& request_id);
  Result<std::optional<JobRecord>> LoadJob(const std::string& id);  // nullopt: no such job
  // Jobs with an id of at most `max_id` whose state is one of `states` (empty: any), highest id
  // first, at most `limit`: a page of ListJobs.
  Result<std::vector<JobRecord>> ListJobs(int64_t max_id, const std::vector<v1::JobState>& states, int limit);

  // Attempts, keyed by (job_id, number).
  Status InsertAttempt(const AttemptRecord& attempt);
  Status UpdateAttempt(const AttemptRecord& attempt);
  Result<std::vector<AttemptRecord>> LoadAttempts(const std::string& job_id);  // ascending number
  // Only the reached_step column: what a rank's step report changes, so it costs one small UPDATE
  // (the controller writes it when the step advanced, one transaction per heartbeat).
  Status UpdateReachedStep(const std::string& job_id, int32_t number, int64_t reached_step);

  // Nodes reserved for waiting jobs (node -> job id), keyed by node. SetReservations makes the
  // job's rows exactly `nodes` (taking a node over from another job that held it); an empty list
  // releases all of the job's.
  Status SetReservations(const std::string& job_id, const std::vector<std::string>& nodes);
  Result<std::vector<std::pair<std::string, std::string>>> LoadReservations();  // (node, job id), by node

  // Nodes, keyed by name.
  Status UpsertNode(const NodeRecord& node);
  Result<std::vector<NodeRecord>> LoadNodes();  // ascending name

  // Checkpoints, keyed by (job_id, path): inserting one that exists is a no-op returning OK, so a
  // relayed event that arrives twice is stored once.
  Status InsertCheckpoint(const CheckpointRecord& checkpoint);
  // Forgets a checkpoint that was deleted from disk; a path not stored is not an error.
  Status DeleteCheckpoint(const std::string& job_id, const std::string& path);
  Result<std::vector<CheckpointRecord>> LoadCheckpoints(const std::string& job_id);  // ascending step

  // Job events (decisions with reasons), append-only.
  Status AppendEvent(const EventRecord& event);
  Result<std::vector<EventRecord>> LoadEvents(const std::string& job_id);  // oldest first

  // A job's loss curves (controller/loss_history.h), a point per row keyed by (job, curve, index).
  // SaveLossPoints writes points[from..] at their indices and deletes the rows at points.size() and
  // beyond, so a curve that was downsampled or cut back is stored exactly as given.
  Status SaveLossPoints(const std::string& job_id, LossCurve curve, size_t from,
                        const std::vector<LossPointRecord>& points);
  Result<std::vector<LossPointRecord>> LoadLossPoints(const std::string& job_id, LossCurve curve);  // by index

  // The MLflow run of a job (docs/tracking.md), keyed by job: inserted at submit (inserting one that
  // exists is a no-op), updated when the run is made and when it is ended. LoadOpenMlflowRuns: the
  // rows not ended, by job id.
  Status InsertMlflowRun(const MlflowRunRecord& run);
  Status UpdateMlflowRun(const MlflowRunRecord& run);
  Result<std::vector<MlflowRunRecord>> LoadOpenMlflowRuns();

  // A persistent counter, e.g. for choosing MASTER_PORTs: returns the value after adding 1
  // (1 on the first call for a name).
  Result<int64_t> NextCounter(const std::string& name);

 private:
  explicit Store(std::unique_ptr<Database> db);

  const std::unique_ptr<Database> db_;
};

}  // namespace eft::controller
