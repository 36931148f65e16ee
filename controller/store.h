// Store: the controller's durable state in one SQLite file.
//
// Opened in WAL mode with synchronous=FULL, so a call that returned OK survives a crash of the
// process or the machine. The schema is versioned (PRAGMA user_version) and migrated forward on
// Open; a database from a newer controller is refused. Every method is one transaction unless it
// runs inside RunInTransaction, which groups several writes atomically. Not thread-safe: the
// controller serialises calls under its own lock.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "controller/records.h"

struct sqlite3;
struct sqlite3_stmt;

namespace eft::controller {

class Store {
 public:
  // Creates the file (and its parent directory) if missing and migrates it to the current schema.
  static Result<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  static constexpr int kSchemaVersion = 6;
  int schema_version() const;
  const std::string& path() const { return path_; }

  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT; rolls back and returns the error if `body` or the
  // commit fails. Nested calls join the outer transaction.
  Status RunInTransaction(const std::function<Status()>& body);

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
  Result<std::vector<AttemptRecord>> LoadUnfinishedAttempts();  // end_ms == 0, any job
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
  // The newest (highest step, then latest time) checkpoint of the job, if any.
  Result<std::optional<CheckpointRecord>> LatestCheckpoint(const std::string& job_id);

  // Job events (decisions with reasons), append-only.
  Status AppendEvent(const EventRecord& event);
  Result<std::vector<EventRecord>> LoadEvents(const std::string& job_id);  // oldest first

  // A job's loss curves (controller/loss_history.h), a point per row keyed by (job, curve, index).
  // SaveLossPoints writes points[from..] at their indices and deletes the rows at points.size() and
  // beyond, so a curve that was downsampled or cut back is stored exactly as given.
  Status SaveLossPoints(const std::string& job_id, LossCurve curve, size_t from,
                        const std::vector<LossPointRecord>& points);
  Result<std::vector<LossPointRecord>> LoadLossPoints(const std::string& job_id, LossCurve curve);  // by index

  // A persistent counter, e.g. for choosing MASTER_PORTs: returns the value after adding 1
  // (1 on the first call for a name).
  Result<int64_t> NextCounter(const std::string& name);

 private:
  class Statement;  // a borrowed cached statement (store_statement.h)

  Store(sqlite3* db, std::string path);
  Status Configure();
  Status Migrate();
  Status CheckIntegrity();
  // Returns the cached prepared statement for `sql` (compiled on first use).
  Result<Statement> Prepare(const char* sql);
  // Runs `sql` with `params` bound in order; Query converts each row with `convert` (store_statement.h).
  template <typename... Params>
  Status Write(const char* sql, const Params&... params);
  template <typename Record, typename Convert, typename... Params>
  Result<std::vector<Record>> Query(const char* sql, Convert convert, const Params&... params);
  Status RunNested(const std::function<Status()>& body);
  void RollbackAfterError(const char* sql);

  sqlite3* db_;
  std::string path_;
  int schema_version_ = 0;
  int transaction_depth_ = 0;
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
};

}  // namespace eft::controller
