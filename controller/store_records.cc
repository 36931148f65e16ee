// Store: rows <-> records, and the reads and writes of each table (jobs, attempts, nodes,
// checkpoints, events, counters). Opening, the schema and transactions are in store.cc.

#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "controller/store.h"
#include "spec/job_spec.h"
#include "controller/database_statement.h"

namespace eft::controller {
namespace {

// Job ids are rowids rendered as decimal text; anything else cannot name a stored job.
Result<int64_t> ParseJobId(const std::string& id) {
  if (!IsJobId(id)) {
    return Status::InvalidArgument("job id '" + id + "' is not a job id of this controller (a positive integer)");
  }
  return std::stoll(id);
}

// snake_case as in YAML files (the one printer, spec/job_spec.h), so `sqlite3 eft.db 'select spec
// from jobs'` reads like the input.
Result<std::string> SpecToJson(const v1::JobSpec& spec) {
  nlohmann::json doc = eft::spec::JobSpecToJson(spec);
  if (doc.empty()) return Status::InvalidArgument("spec cannot be written as JSON");
  try {
    return doc.dump();
  } catch (const nlohmann::json::exception& e) {  // invalid UTF-8 in a string
    return Status::InvalidArgument(std::string("spec cannot be written as JSON: ") + e.what());
  }
}

Result<std::string> NodesToJson(const std::vector<std::string>& nodes) {
  try {
    return nlohmann::json(nodes).dump();
  } catch (const nlohmann::json::exception& e) {  // invalid UTF-8 in a name
    return Status::InvalidArgument(std::string("node names cannot be written as JSON: ") + e.what());
  }
}

}  // namespace

// ---- records <-> rows --------------------------------------------------------------------------
//
// Rows are checked, not trusted: a damaged or hand-edited row becomes DATA_LOSS naming the record
// rather than a half-filled struct.

namespace {

#define EFT_JOB_COLUMNS \
  "id, request_id, spec, state, reason, create_ms, start_ms, end_ms, attempt, restarts, not_before_ms, owner"
#define EFT_ATTEMPT_COLUMNS                                                                                        \
  "job_id, number, world_size, ranks_per_node, nodes, slots, master_addr, master_port, resume_from, start_ms, " \
  "end_ms, end_reason, reached_step, end_kind, resume_step"
#define EFT_CHECKPOINT_COLUMNS "job_id, step, kind, path, bytes, attempt, time_ms"

template <typename T>
Result<T> WithContext(Result<T> result, const std::string& context) {
  if (result.ok()) return result;
  return result.status().WithContext(context);
}

// Child rows name a missing job through a foreign key failure; say it in the caller's words.
Status MissingJobIsNotFound(const Status& status) {
  if (status.code() != StatusCode::kFailedPrecondition) return status;
  return Status::NotFound("no such job (" + status.message() + ")");
}

Result<std::string> EndName(v1::AttemptEnd end) {
  if (!v1::AttemptEnd_IsValid(end)) {
    return Status::InvalidArgument("attempt end " + std::to_string(static_cast<int>(end)) + " is not an AttemptEnd");
  }
  return v1::AttemptEnd_Name(end);
}

Result<std::string> StateName(v1::JobState state) {
  if (!v1::JobState_IsValid(state)) {
    return Status::InvalidArgument("job state " + std::to_string(static_cast<int>(state)) + " is not a JobState");
  }
  return v1::JobState_Name(state);
}

// The columns are selected in the order of the struct's fields, so rows become records by
// aggregate initialisation.
template <typename Row>
Result<JobRecord> JobFromRow(const Row& row) {
  const std::string id = std::to_string(row.Int(0));
  v1::JobSpec spec;
  auto parsed = google::protobuf::util::JsonStringToMessage(row.Text(2), &spec);
  if (!parsed.ok()) {
    return Status::DataLoss("job " + id + ": stored spec is not a valid eft.v1.JobSpec: " + parsed.ToString());
  }
  v1::JobState state;
  if (!v1::JobState_Parse(row.Text(3), &state)) {
    return Status::DataLoss("job " + id + ": unknown stored state '" + row.Text(3) + "'");
  }
  return JobRecord{id,         row.Text(1),  std::move(spec), state,      row.Text(4), row.Int(5),
                   row.Int(6), row.Int(7), row.Int32(8),    row.Int32(9), row.Int(10), row.Text(11)};
}

template <typename Row>
Result<AttemptRecord> AttemptFromRow(const Row& row) {
  auto fail = [&](const char* column) {
    return Status::DataLoss("attempt " + std::to_string(row.Int(1)) + " of job " + std::to_string(row.Int(0)) +
                            ": stored " + column + " are not in the expected JSON form");
  };
  auto nodes = nlohmann::json::parse(row.Text(4), nullptr, /*allow_exceptions=*/false);
  auto slots = nlohmann::json::parse(row.Text(5), nullptr, /*allow_exceptions=*/false);
  // get<>() on the wrong shape throws; these rows are read from disk, so check the shape first.
  bool valid = nodes.is_array();
  for (const auto& node : nodes) valid = valid && node.is_string();
  if (!valid) return fail("nodes");
  valid = slots.is_array();
  for (const auto& list : slots) {
    valid = valid && list.is_array();
    for (const auto& slot : list) valid = valid && slot.is_number_integer();
  }
  if (!valid) return fail("slots");
  v1::AttemptEnd end;
  if (!v1::AttemptEnd_Parse(row.Text(13), &end)) {
    return Status::DataLoss("attempt " + std::to_string(row.Int(1)) + " of job " + std::to_string(row.Int(0)) +
                            ": unknown stored end kind '" + row.Text(13) + "'");
  }
  using Slots = std::vector<std::vector<int>>;
  return AttemptRecord{std::to_string(row.Int(0)), row.Int32(1), row.Int32(2), row.Int32(3),
                       nodes.template get<std::vector<std::string>>(), slots.template get<Slots>(), row.Text(6),
                       row.Int32(7), row.Text(8), row.Int(9), row.Int(10), row.Text(11), row.Int(12), end,
                       row.Int(14)};
}

template <typename Row>
Result<NodeRecord> NodeFromRow(const Row& row) {
  return NodeRecord{row.Text(0), row.Text(1),      row.Int32(2), row.Int(3) != 0, row.Text(4),
                    row.Int(5),  row.Int(6) != 0, row.Text(7),  row.Text(8),     row.Text(9)};
}

template <typename Row>
Result<CheckpointRecord> CheckpointFromRow(const Row& row) {
  return CheckpointRecord{std::to_string(row.Int(0)), row.Int(1),   row.Text(2), row.Text(3),
                          row.Int(4),                 row.Int32(5), row.Int(6)};
}

template <typename Row>
Result<EventRecord> EventFromRow(const Row& row) {
  return EventRecord{std::to_string(row.Int(0)), row.Int(1), row.Text(2), row.Int32(3), row.Text(4)};
}

template <typename T>
Result<std::optional<T>> First(Result<std::vector<T>> rows) {
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return std::optional<T>();
  return std::optional<T>(std::move(rows->front()));
}

}  // namespace

// ---- jobs --------------------------------------------------------------------------------------

Status Store::InsertJob(JobRecord* job) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(std::string spec, SpecToJson(job->spec));
    EFT_ASSIGN_OR_RETURN(std::string state, StateName(job->state));
    Status write = db_->Write("INSERT INTO jobs (" EFT_JOB_COLUMNS ") VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         job->request_id, spec, state, job->reason, job->create_ms, job->start_ms, job->end_ms,
                         job->attempt, job->restarts, job->not_before_ms, job->owner);
    if (write.code() == StatusCode::kAlreadyExists) {
      return Status::AlreadyExists("a job with request_id '" + job->request_id + "' already exists");
    }
    return write;
  }();
  if (!status.ok()) return status.WithContext("inserting job");
  job->id = std::to_string(db_->last_insert_rowid());
  return status;
}

Status Store::UpdateJob(const JobRecord& job) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job.id));
    EFT_ASSIGN_OR_RETURN(std::string spec, SpecToJson(job.spec));
    EFT_ASSIGN_OR_RETURN(std::string state, StateName(job.state));
    Status write = db_->Write(
        "UPDATE jobs SET request_id = ?, spec = ?, state = ?, reason = ?, start_ms = ?, end_ms = ?, attempt = ?, "
        "restarts = ?, not_before_ms = ? WHERE id = ?",
        job.request_id, spec, state, job.reason, job.start_ms, job.end_ms, job.attempt, job.restarts,
        job.not_before_ms, id);
    if (write.code() == StatusCode::kAlreadyExists) {
      return Status::AlreadyExists("another job has request_id '" + job.request_id + "'");
    }
    if (write.ok() && db_->changes() == 0) return Status::NotFound("no such job");
    return write;
  }();
  return status.WithContext("updating job " + job.id);
}

Result<std::vector<JobRecord>> Store::LoadJobs() {
  return WithContext(db_->Query<JobRecord>("SELECT " EFT_JOB_COLUMNS " FROM jobs ORDER BY id", JobFromRow<Database::Statement>),
                     "loading jobs");
}

Result<std::optional<JobRecord>> Store::FindJobByRequestId(const std::string& request_id) {
  // '' means "no key": many jobs share it and none of them is the answer.
  if (request_id.empty()) return std::optional<JobRecord>();
  // The redundant `!= ''` lets SQLite use the partial index, which it cannot prove applies to `= ?`.
  return WithContext(First(db_->Query<JobRecord>("SELECT " EFT_JOB_COLUMNS
                                            " FROM jobs WHERE request_id = ? AND request_id != ''",
                                            JobFromRow<Database::Statement>, request_id)),
                     "finding job with request_id '" + request_id + "'");
}

Result<std::optional<JobRecord>> Store::LoadJob(const std::string& id) {
  auto job_id = ParseJobId(id);
  if (!job_id.ok()) return std::optional<JobRecord>();  // not an id this store hands out
  return WithContext(First(db_->Query<JobRecord>("SELECT " EFT_JOB_COLUMNS " FROM jobs WHERE id = ?",
                                            JobFromRow<Database::Statement>, *job_id)),
                     "loading job " + id);
}

Result<std::vector<JobRecord>> Store::ListJobs(int64_t max_id, const std::vector<v1::JobState>& states, int limit) {
  // The states as ",NAME,NAME,": one statement for any filter.
  std::string names;
  for (v1::JobState s : states) names += "," + v1::JobState_Name(s);
  if (!names.empty()) names += ",";
  return WithContext(db_->Query<JobRecord>("SELECT " EFT_JOB_COLUMNS " FROM jobs WHERE id <= ? AND "
                                      "(? = '' OR instr(?, ',' || state || ',') > 0) ORDER BY id DESC LIMIT ?",
                                      JobFromRow<Database::Statement>, max_id, names, names, limit),
                     "listing jobs");
}

// ---- attempts ----------------------------------------------------------------------------------

Status Store::InsertAttempt(const AttemptRecord& a) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t job_id, ParseJobId(a.job_id));
    EFT_ASSIGN_OR_RETURN(std::string nodes, NodesToJson(a.nodes));
    EFT_ASSIGN_OR_RETURN(std::string end, EndName(a.end));
    return MissingJobIsNotFound(db_->Write("INSERT INTO attempts (" EFT_ATTEMPT_COLUMNS
                                      ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                      job_id, a.number, a.world_size, a.ranks_per_node, nodes,
                                      nlohmann::json(a.slots).dump(), a.master_addr, a.master_port, a.resume_from,
                                      a.start_ms, a.end_ms, a.end_reason, a.reached_step, end, a.resume_step));
  }();
  return status.WithContext("inserting attempt " + std::to_string(a.number) + " of job " + a.job_id);
}

Status Store::UpdateAttempt(const AttemptRecord& a) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t job_id, ParseJobId(a.job_id));
    EFT_ASSIGN_OR_RETURN(std::string nodes, NodesToJson(a.nodes));
    EFT_ASSIGN_OR_RETURN(std::string end, EndName(a.end));
    EFT_RETURN_IF_ERROR(db_->Write(
        "UPDATE attempts SET world_size = ?, ranks_per_node = ?, nodes = ?, slots = ?, master_addr = ?, "
        "master_port = ?, resume_from = ?, start_ms = ?, end_ms = ?, end_reason = ?, reached_step = ?, "
        "end_kind = ?, resume_step = ? WHERE job_id = ? AND number = ?",
        a.world_size, a.ranks_per_node, nodes, nlohmann::json(a.slots).dump(), a.master_addr, a.master_port,
        a.resume_from, a.start_ms, a.end_ms, a.end_reason, a.reached_step, end, a.resume_step, job_id, a.number));
    return db_->changes() == 0 ? Status::NotFound("no such attempt") : Status::Ok();
  }();
  return status.WithContext("updating attempt " + std::to_string(a.number) + " of job " + a.job_id);
}

Result<std::vector<AttemptRecord>> Store::LoadAttempts(const std::string& job_id) {
  auto attempts = [&]() -> Result<std::vector<AttemptRecord>> {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
    return db_->Query<AttemptRecord>("SELECT " EFT_ATTEMPT_COLUMNS " FROM attempts WHERE job_id = ? ORDER BY number",
                                AttemptFromRow<Database::Statement>, id);
  }();
  return WithContext(std::move(attempts), "loading attempts of job " + job_id);
}


Status Store::UpdateReachedStep(const std::string& job_id, int32_t number, int64_t reached_step) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
    EFT_RETURN_IF_ERROR(
        db_->Write("UPDATE attempts SET reached_step = ? WHERE job_id = ? AND number = ?", reached_step, id, number));
    return db_->changes() == 0 ? Status::NotFound("no such attempt") : Status::Ok();
  }();
  return status.WithContext("storing the step attempt " + std::to_string(number) + " of job " + job_id + " reached");
}

// ---- reservations ------------------------------------------------------------------------------

Status Store::SetReservations(const std::string& job_id, const std::vector<std::string>& nodes) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
    return RunInTransaction([&]() -> Status {
      EFT_RETURN_IF_ERROR(db_->Write("DELETE FROM reservations WHERE job_id = ?", id));
      for (const auto& node : nodes) {
        // A node is held for one job: the newest plan takes it over.
        EFT_RETURN_IF_ERROR(MissingJobIsNotFound(db_->Write(
            "INSERT INTO reservations (node, job_id) VALUES (?, ?) ON CONFLICT (node) DO UPDATE SET job_id = "
            "excluded.job_id",
            node, id)));
      }
      return Status::Ok();
    });
  }();
  return status.WithContext("storing the nodes reserved for job " + job_id);
}

Result<std::vector<std::pair<std::string, std::string>>> Store::LoadReservations() {
  using Row = std::pair<std::string, std::string>;
  return WithContext(db_->Query<Row>("SELECT node, job_id FROM reservations ORDER BY node",
                                [](const Database::Statement& row) -> Result<Row> {
                                  return Row{row.Text(0), std::to_string(row.Int(1))};
                                }),
                     "loading reservations");
}

// ---- nodes -------------------------------------------------------------------------------------

Status Store::UpsertNode(const NodeRecord& n) {
  return db_->Write(
             "INSERT INTO nodes (name, address, slots, drained, version, registered_ms, lost, state_reason, "
             "data_address, network_stack) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
             "address = excluded.address, slots = excluded.slots, drained = excluded.drained, "
             "version = excluded.version, registered_ms = excluded.registered_ms, lost = excluded.lost, "
             "state_reason = excluded.state_reason, data_address = excluded.data_address, "
             "network_stack = excluded.network_stack",
             n.name, n.address, n.slots, n.drained, n.version, n.registered_ms, n.lost, n.state_reason,
             n.data_address, n.network_stack)
      .WithContext("writing node " + n.name);
}

Result<std::vector<NodeRecord>> Store::LoadNodes() {
  return WithContext(db_->Query<NodeRecord>("SELECT name, address, slots, drained, version, registered_ms, lost, "
                                       "state_reason, data_address, network_stack FROM nodes ORDER BY name",
                                       NodeFromRow<Database::Statement>),
                     "loading nodes");
}

// ---- checkpoints -------------------------------------------------------------------------------

Status Store::InsertCheckpoint(const CheckpointRecord& c) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t job_id, ParseJobId(c.job_id));
    // DO NOTHING: workers relay events at least once, so the same checkpoint may arrive again.
    return MissingJobIsNotFound(db_->Write("INSERT INTO checkpoints (" EFT_CHECKPOINT_COLUMNS
                                      ") VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, path) DO NOTHING",
                                      job_id, c.step, c.kind, c.path, c.bytes, c.attempt, c.time_ms));
  }();
  return status.WithContext("inserting checkpoint " + c.path + " of job " + c.job_id);
}

Status Store::DeleteCheckpoint(const std::string& job_id, const std::string& path) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
    return db_->Write("DELETE FROM checkpoints WHERE job_id = ? AND path = ?", id, path);
  }();
  return status.WithContext("forgetting checkpoint " + path + " of job " + job_id);
}

Result<std::vector<CheckpointRecord>> Store::LoadCheckpoints(const std::string& job_id) {
  auto checkpoints = [&]() -> Result<std::vector<CheckpointRecord>> {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
    return db_->Query<CheckpointRecord>("SELECT " EFT_CHECKPOINT_COLUMNS
                                   " FROM checkpoints WHERE job_id = ? ORDER BY step, time_ms, id",
                                   CheckpointFromRow<Database::Statement>, id);
  }();
  return WithContext(std::move(checkpoints), "loading checkpoints of job " + job_id);
}

Status Store::SaveLossPoints(const std::string& job_id, LossCurve curve, size_t from,
                             const std::vector<LossPointRecord>& points) {
  Status status = RunInTransaction([&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
    const int64_t c = static_cast<int64_t>(curve);
    for (size_t i = from; i < points.size(); ++i) {
      const LossPointRecord& p = points[i];
      EFT_RETURN_IF_ERROR(MissingJobIsNotFound(
          db_->Write("INSERT INTO loss_points (job_id, curve, idx, step, value, samples) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (job_id, curve, idx) DO UPDATE SET step = excluded.step, value = excluded.value, "
                "samples = excluded.samples",
                id, c, static_cast<int64_t>(i), p.step, p.value, p.samples)));
    }
    return db_->Write("DELETE FROM loss_points WHERE job_id = ? AND curve = ? AND idx >= ?", id, c,
                 static_cast<int64_t>(points.size()));
  });
  return status.WithContext("storing the loss history of job " + job_id);
}

Result<std::vector<LossPointRecord>> Store::LoadLossPoints(const std::string& job_id, LossCurve curve) {
  auto points = [&]() -> Result<std::vector<LossPointRecord>> {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
    return db_->Query<LossPointRecord>(
        "SELECT step, value, samples FROM loss_points WHERE job_id = ? AND curve = ? ORDER BY idx",
        [](const Database::Statement& row) -> Result<LossPointRecord> {
          return LossPointRecord{row.Int(0), row.Real(1), row.Int(2)};
        },
        id, static_cast<int64_t>(curve));
  }();
  return WithContext(std::move(points), "loading the loss history of job " + job_id);
}


// ---- MLflow runs ---------------------------------------------------------------------------------

Status Store::InsertMlflowRun(const MlflowRunRecord& r) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t job_id, ParseJobId(r.job_id));
    return MissingJobIsNotFound(db_->Write(
        "INSERT INTO mlflow_runs (job_id, run_key, experiment_id, run_id, ended) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (job_id) DO NOTHING",
        job_id, r.run_key, r.experiment_id, r.run_id, static_cast<int64_t>(r.ended)));
  }();
  return status.WithContext("storing the MLflow run of job " + r.job_id);
}

Status Store::UpdateMlflowRun(const MlflowRunRecord& r) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t job_id, ParseJobId(r.job_id));
    return db_->Write("UPDATE mlflow_runs SET run_key = ?, experiment_id = ?, run_id = ?, ended = ? WHERE job_id = ?",
                      r.run_key, r.experiment_id, r.run_id, static_cast<int64_t>(r.ended), job_id);
  }();
  return status.WithContext("updating the MLflow run of job " + r.job_id);
}

Result<std::vector<MlflowRunRecord>> Store::LoadOpenMlflowRuns() {
  auto runs = db_->Query<MlflowRunRecord>(
      "SELECT job_id, run_key, experiment_id, run_id, ended FROM mlflow_runs WHERE ended = 0 ORDER BY job_id",
      [](const Database::Statement& row) -> Result<MlflowRunRecord> {
        return MlflowRunRecord{std::to_string(row.Int(0)), row.Text(1), row.Text(2), row.Text(3), row.Int(4) != 0};
      });
  return WithContext(std::move(runs), "loading the open MLflow runs");
}

// ---- events and counters -----------------------------------------------------------------------

Status Store::AppendEvent(const EventRecord& e) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t job_id, ParseJobId(e.job_id));
    return MissingJobIsNotFound(db_->Write("INSERT INTO events (job_id, time_ms, type, attempt, message) "
                                      "VALUES (?, ?, ?, ?, ?)",
                                      job_id, e.time_ms, e.type, e.attempt, e.message));
  }();
  return status.WithContext("appending event of job " + e.job_id);
}

Result<std::vector<EventRecord>> Store::LoadEvents(const std::string& job_id) {
  auto events = [&]() -> Result<std::vector<EventRecord>> {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
    // By id, not time: wall clocks step back; the append order is the order decisions were taken.
    return db_->Query<EventRecord>("SELECT job_id, time_ms, type, attempt, message FROM events WHERE job_id = ? "
                              "ORDER BY id",
                              EventFromRow<Database::Statement>, id);
  }();
  return WithContext(std::move(events), "loading events of job " + job_id);
}

Result<int64_t> Store::NextCounter(const std::string& name) {
  // Query steps the statement to its end, which is where the autocommit write commits: the value
  // is durable before it is handed out.
  auto values = db_->Query<int64_t>(
      "INSERT INTO counters (name, value) VALUES (?, 1) ON CONFLICT (name) DO UPDATE SET value = value + 1 "
      "RETURNING value",
      [](const Database::Statement& row) -> Result<int64_t> { return row.Int(0); }, name);
  if (!values.ok()) return values.status().WithContext("advancing counter " + name);
  if (values->size() != 1) return Status::Internal("advancing counter " + name + ": RETURNING gave no value");
  return values->front();
}

}  // namespace eft::controller
