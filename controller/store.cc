#include "controller/store.h"

#include <sqlite3.h>

#include <array>
#include <charconv>
#include <filesystem>
#include <utility>

#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "common/logging.h"

namespace eft::controller {
namespace {

// Migration i (0-based) takes the schema from user_version i to i + 1. Scripts are append-only:
// a released script is never edited, a change is a new entry (and kSchemaVersion + 1). Columns are
// NOT NULL with defaults so a row written by an older script still loads after a newer one adds
// columns.
constexpr std::array<const char*, Store::kSchemaVersion> kMigrations = {
    // 1: the initial schema. Job ids are AUTOINCREMENT so an id is never handed out twice, even
    // after the newest job's row is deleted: an id in a log or a client's hand keeps meaning one job.
    R"sql(
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  request_id TEXT NOT NULL DEFAULT '', spec TEXT NOT NULL, state TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  create_ms INTEGER NOT NULL DEFAULT 0, start_ms INTEGER NOT NULL DEFAULT 0, end_ms INTEGER NOT NULL DEFAULT 0,
  attempt INTEGER NOT NULL DEFAULT 0, restarts INTEGER NOT NULL DEFAULT 0,
  not_before_ms INTEGER NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX jobs_request_id ON jobs (request_id) WHERE request_id != '';

CREATE TABLE attempts (
  job_id INTEGER NOT NULL REFERENCES jobs (id), number INTEGER NOT NULL,
  world_size INTEGER NOT NULL DEFAULT 0, ranks_per_node INTEGER NOT NULL DEFAULT 0,
  nodes TEXT NOT NULL DEFAULT '[]',  -- JSON array of node names in rank order
  slots TEXT NOT NULL DEFAULT '[]',  -- JSON array per node: the slot of each local rank
  master_addr TEXT NOT NULL DEFAULT '', master_port INTEGER NOT NULL DEFAULT 0,
  resume_from TEXT NOT NULL DEFAULT '',
  start_ms INTEGER NOT NULL DEFAULT 0, end_ms INTEGER NOT NULL DEFAULT 0, end_reason TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, number));
CREATE INDEX attempts_unfinished ON attempts (job_id, number) WHERE end_ms = 0;

CREATE TABLE nodes (
  name TEXT PRIMARY KEY NOT NULL, address TEXT NOT NULL DEFAULT '', slots INTEGER NOT NULL DEFAULT 0,
  drained INTEGER NOT NULL DEFAULT 0, version TEXT NOT NULL DEFAULT '',
  registered_ms INTEGER NOT NULL DEFAULT 0, lost INTEGER NOT NULL DEFAULT 0,
  state_reason TEXT NOT NULL DEFAULT '');

CREATE TABLE checkpoints (
  id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs (id), step INTEGER NOT NULL,
  kind TEXT NOT NULL DEFAULT '', path TEXT NOT NULL, bytes INTEGER NOT NULL DEFAULT 0,
  attempt INTEGER NOT NULL DEFAULT 0, time_ms INTEGER NOT NULL DEFAULT 0,
  UNIQUE (job_id, path));
CREATE INDEX checkpoints_job_step ON checkpoints (job_id, step, time_ms);

CREATE TABLE events (
  id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs (id), time_ms INTEGER NOT NULL DEFAULT 0,
  type TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '');
CREATE INDEX events_job ON events (job_id, id);

CREATE TABLE counters (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
)sql",
    // 2: the submitting user (authentication, docs/auth.md); '' for jobs from before, or without auth.
    R"sql(
ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
)sql",
};

// Turns a failed sqlite call into a Status. Must run before any other call on `db`, which would
// replace the message. The code tells callers what they can do about it: retry (UNAVAILABLE),
// nothing but restore a backup (DATA_LOSS), free disk space (RESOURCE_EXHAUSTED), ...
Status SqliteError(sqlite3* db, int rc) {
  std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) return Status::AlreadyExists(message);
      if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) return Status::FailedPrecondition(message);
      return Status::InvalidArgument(message);
    case SQLITE_FULL: return Status::ResourceExhausted(message + " (free space on the disk that holds the store)");
    case SQLITE_NOMEM: return Status::ResourceExhausted(message);
    case SQLITE_CORRUPT: case SQLITE_NOTADB: return Status::DataLoss(message);
    case SQLITE_BUSY: case SQLITE_LOCKED:
      return Status::Unavailable(message + " (is another eft-controller using this store?)");
    case SQLITE_IOERR: return Status::IoError(message + " (I/O error, extended code " + std::to_string(rc) + ")");
    case SQLITE_CANTOPEN: return Status::FailedPrecondition(message);
    case SQLITE_PERM: case SQLITE_READONLY: case SQLITE_AUTH: return Status::PermissionDenied(message);
    default: return Status::Internal(message);
  }
}

// Job ids are rowids rendered as decimal text; anything else cannot name a stored job.
Result<int64_t> ParseJobId(const std::string& id) {
  int64_t value = 0;
  const char* end = id.data() + id.size();
  auto [ptr, ec] = std::from_chars(id.data(), end, value);
  if (ec != std::errc() || ptr != end || value <= 0) {
    return Status::InvalidArgument("job id '" + id + "' is not a job id of this controller (a positive integer)");
  }
  return value;
}

Result<std::string> SpecToJson(const v1::JobSpec& spec) {
  google::protobuf::util::JsonPrintOptions options;
  // snake_case as in YAML files, so `sqlite3 eft.db 'select spec from jobs'` reads like the input.
  options.preserve_proto_field_names = true;
  std::string json;
  auto status = google::protobuf::util::MessageToJsonString(spec, &json, options);
  if (!status.ok()) return Status::InvalidArgument("spec cannot be written as JSON: " + status.ToString());
  return json;
}

Result<std::string> NodesToJson(const std::vector<std::string>& nodes) {
  try {
    return nlohmann::json(nodes).dump();
  } catch (const nlohmann::json::exception& e) {  // invalid UTF-8 in a name
    return Status::InvalidArgument(std::string("node names cannot be written as JSON: ") + e.what());
  }
}

}  // namespace

// A cached statement borrowed for one use. Bind() fills parameters left to right; the destructor
// resets the statement, which ends its implicit read transaction and readies it for the next user.
class Store::Statement {
 public:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Statement(Statement&& other) noexcept
      : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)), param_(other.param_), bind_rc_(other.bind_rc_) {}
  Statement& operator=(Statement&&) = delete;
  ~Statement() {
    if (stmt_ == nullptr) return;
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  Statement& Bind(int64_t value) { return Check(sqlite3_bind_int64(stmt_, ++param_, value)); }
  Statement& Bind(const std::string& value) {
    return Check(sqlite3_bind_text64(stmt_, ++param_, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  }

  // True when a row is ready, false when the statement has finished.
  Result<bool> Step() {
    if (bind_rc_ != SQLITE_OK) return SqliteError(db_, bind_rc_);
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteError(db_, rc);
  }

  // Runs to completion. Stepping to SQLITE_DONE (rather than leaving it to reset) matters: that is
  // where an autocommit write commits, so a failed commit is reported here and not dropped.
  Status Run() {
    for (;;) {
      Result<bool> row = Step();
      if (!row.ok()) return row.status();
      if (!*row) return Status::Ok();
    }
  }

  int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  int32_t Int32(int column) const { return static_cast<int32_t>(sqlite3_column_int64(stmt_, column)); }
  std::string Text(int column) const {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    return text == nullptr ? std::string() : std::string(text, sqlite3_column_bytes(stmt_, column));
  }

 private:
  Statement& Check(int rc) {
    if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
    return *this;
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_;
  int param_ = 0;
  int bind_rc_ = SQLITE_OK;
};

Store::Store(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

Store::~Store() {
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  // Closing the last connection checkpoints the WAL into the main file; an open transaction (only
  // possible if a body threw past RunInTransaction) is rolled back.
  sqlite3_close_v2(db_);
}

int Store::schema_version() const { return schema_version_; }

Result<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("store path is empty: give the controller a database file");
  const std::string context = "opening store " + path;
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return Status::FailedPrecondition(context + ": creating directory " + parent.string() + ": " + ec.message());
    }
  }
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    Status status = SqliteError(db, rc).WithContext(context);
    sqlite3_close_v2(db);  // a handle comes back even on failure
    return status;
  }
  std::unique_ptr<Store> store(new Store(db, path));
  Status status = store->Configure();
  if (status.ok()) status = store->CheckIntegrity();
  if (status.ok()) status = store->Migrate();
  if (status.code() == StatusCode::kDataLoss) {
    return Status::DataLoss(context + ": " + status.message() +
                            " (the file is damaged or not an eft-controller store; restore it from a backup)");
  }
  if (!status.ok()) return status.WithContext(context);
  return store;
}

Status Store::Configure() {
  sqlite3_extended_result_codes(db_, 1);
  // Set first so that even switching to WAL waits for another process's lock instead of failing.
  sqlite3_busy_timeout(db_, 5000);
  // The first statement reads the header: a file that is not a database fails here, untouched.
  auto mode = Query<std::string>("PRAGMA journal_mode=WAL", [](const Statement& row) -> Result<std::string> {
    return row.Text(0);
  });
  if (!mode.ok()) return mode.status().WithContext("enabling WAL");
  if (mode->size() != 1 || mode->front() != "wal") {
    // e.g. a filesystem without shared-memory support; running in another mode would silently
    // change the durability and concurrency the controller relies on.
    return Status::FailedPrecondition("cannot enable WAL journal mode (got '" + (mode->empty() ? "" : mode->front()) +
                                      "'); put the store on a local filesystem");
  }
  // FULL: each commit fsyncs the WAL, so an acknowledged write survives power loss, not only a
  // crash of the process (all that NORMAL guarantees in WAL mode).
  EFT_RETURN_IF_ERROR(Write("PRAGMA synchronous=FULL").WithContext("setting synchronous=FULL"));
  return Write("PRAGMA foreign_keys=ON").WithContext("enabling foreign keys");
}

Status Store::CheckIntegrity() {
  // quick_check reads every page, so a truncated or damaged file is refused at start with a clear
  // message instead of failing some load halfway through recovery. It takes well under a second
  // for the sizes a controller's store reaches.
  auto lines = Query<std::string>("PRAGMA quick_check(5)", [](const Statement& row) -> Result<std::string> {
    return row.Text(0);
  });
  if (!lines.ok()) return lines.status().WithContext("checking integrity");
  if (lines->size() == 1 && lines->front() == "ok") return Status::Ok();
  std::string problems;
  for (const std::string& line : *lines) problems += (problems.empty() ? "" : "; ") + line;
  return Status::DataLoss("integrity check failed: " + problems);
}

Status Store::Migrate() {
  for (;;) {
    // Each step reads the version inside its own write transaction, so two controllers started on
    // one file cannot both apply the same script.
    EFT_RETURN_IF_ERROR(Write("BEGIN IMMEDIATE").WithContext("starting migration"));
    auto read = Query<int64_t>("PRAGMA user_version", [](const Statement& row) -> Result<int64_t> {
      return row.Int(0);
    });
    Status status = read.ok() ? Status::Ok() : read.status();
    const int64_t version = read.ok() && read->size() == 1 ? read->front() : -1;
    if (status.ok() && version > kSchemaVersion) {
      status = Status::FailedPrecondition("database schema version " + std::to_string(version) +
                                          " is newer than this controller supports (" +
                                          std::to_string(kSchemaVersion) + "); upgrade eft-controller");
    } else if (status.ok() && version < 0) {
      status = Status::DataLoss("database schema version " + std::to_string(version) + " is invalid");
    }
    if (!status.ok() || version == kSchemaVersion) {
      RollbackAfterError("ROLLBACK");
      schema_version_ = static_cast<int>(version);
      return status;
    }
    // The scripts are constants of this file and the version a small integer, so running them as
    // text is safe; PRAGMA takes no bound parameters.
    const std::string script =
        std::string(kMigrations[version]) + "\nPRAGMA user_version = " + std::to_string(version + 1) + ";";
    int rc = sqlite3_exec(db_, script.c_str(), nullptr, nullptr, nullptr);
    status = rc == SQLITE_OK ? Write("COMMIT") : SqliteError(db_, rc);
    if (!status.ok()) {
      RollbackAfterError("ROLLBACK");
      return status.WithContext("migrating schema to version " + std::to_string(version + 1));
    }
    EFT_LOG(INFO) << "store " << path_ << ": schema migrated to version " << version + 1;
  }
}

Result<Store::Statement> Store::Prepare(const char* sql) {
  if (transaction_depth_ > 0 && sqlite3_get_autocommit(db_)) {
    // SQLite rolled the whole transaction back (I/O error, disk full) inside a nested call whose
    // error the body ignored; going on would commit the rest piecemeal.
    return Status(StatusCode::kAborted, "the enclosing transaction was already rolled back after an earlier error");
  }
  auto it = statements_.find(sql);
  if (it == statements_.end()) {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return SqliteError(db_, rc);
    it = statements_.emplace(sql, stmt).first;
  }
  return Statement(db_, it->second);
}

template <typename... Params>
Status Store::Write(const char* sql, const Params&... params) {
  EFT_ASSIGN_OR_RETURN(Statement statement, Prepare(sql));
  (statement.Bind(params), ...);
  return statement.Run();
}

template <typename Record, typename Convert, typename... Params>
Result<std::vector<Record>> Store::Query(const char* sql, Convert convert, const Params&... params) {
  EFT_ASSIGN_OR_RETURN(Statement select, Prepare(sql));
  (select.Bind(params), ...);
  std::vector<Record> records;
  for (;;) {
    EFT_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) return records;
    EFT_ASSIGN_OR_RETURN(Record record, convert(select));
    records.push_back(std::move(record));
  }
}

void Store::RollbackAfterError(const char* sql) {
  // After SQLITE_FULL or an I/O error SQLite may already have rolled back by itself.
  if (sqlite3_get_autocommit(db_)) return;
  const int depth = std::exchange(transaction_depth_, 0);  // lets Prepare run while rolling back
  Status status = Write(sql);
  transaction_depth_ = depth;
  if (!status.ok()) {
    EFT_LOG(ERROR) << "store " << path_ << ": " << sql << " failed: " << status;
  }
}

Status Store::RunInTransaction(const std::function<Status()>& body) {
  if (transaction_depth_ > 0) return RunNested(body);
  EFT_RETURN_IF_ERROR(Write("BEGIN IMMEDIATE").WithContext("beginning a transaction"));
  transaction_depth_ = 1;
  Status status;
  try {
    status = body();
  } catch (...) {
    transaction_depth_ = 0;
    RollbackAfterError("ROLLBACK");
    throw;
  }
  transaction_depth_ = 0;
  if (status.ok() && sqlite3_get_autocommit(db_)) {
    status = Status(StatusCode::kAborted,
                    "transaction was rolled back after an error inside it was ignored; nothing was committed");
  }
  if (status.ok()) status = Write("COMMIT").WithContext("committing a transaction");
  if (!status.ok()) RollbackAfterError("ROLLBACK");
  return status;
}

// A nested call joins the outer transaction but runs in a savepoint, so when it fails its own
// writes are undone even if the outer body decides to carry on.
Status Store::RunNested(const std::function<Status()>& body) {
  EFT_RETURN_IF_ERROR(Write("SAVEPOINT eft_nested").WithContext("beginning a nested transaction"));
  ++transaction_depth_;
  Status status;
  try {
    status = body();
  } catch (...) {
    --transaction_depth_;
    RollbackAfterError("ROLLBACK TO eft_nested");
    RollbackAfterError("RELEASE eft_nested");
    throw;
  }
  --transaction_depth_;
  if (status.ok()) {
    status = Write("RELEASE eft_nested").WithContext("ending a nested transaction");
    if (status.ok()) return status;
  }
  RollbackAfterError("ROLLBACK TO eft_nested");
  RollbackAfterError("RELEASE eft_nested");
  return status;
}

// ---- records <-> rows --------------------------------------------------------------------------
//
// Rows are checked, not trusted: a damaged or hand-edited row becomes DATA_LOSS naming the record
// rather than a half-filled struct. (Templates because Store::Statement is private.)

namespace {

#define EFT_JOB_COLUMNS \
  "id, request_id, spec, state, reason, create_ms, start_ms, end_ms, attempt, restarts, not_before_ms, owner"
#define EFT_ATTEMPT_COLUMNS                                                                                        \
  "job_id, number, world_size, ranks_per_node, nodes, slots, master_addr, master_port, resume_from, start_ms, " \
  "end_ms, end_reason"
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
  using Slots = std::vector<std::vector<int>>;
  return AttemptRecord{std::to_string(row.Int(0)), row.Int32(1), row.Int32(2), row.Int32(3),
                       nodes.template get<std::vector<std::string>>(), slots.template get<Slots>(), row.Text(6),
                       row.Int32(7), row.Text(8), row.Int(9), row.Int(10), row.Text(11)};
}

template <typename Row>
Result<NodeRecord> NodeFromRow(const Row& row) {
  return NodeRecord{row.Text(0), row.Text(1), row.Int32(2),    row.Int(3) != 0,
                    row.Text(4), row.Int(5),  row.Int(6) != 0, row.Text(7)};
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
    Status write = Write("INSERT INTO jobs (" EFT_JOB_COLUMNS ") VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         job->request_id, spec, state, job->reason, job->create_ms, job->start_ms, job->end_ms,
                         job->attempt, job->restarts, job->not_before_ms, job->owner);
    if (write.code() == StatusCode::kAlreadyExists) {
      return Status::AlreadyExists("a job with request_id '" + job->request_id + "' already exists");
    }
    return write;
  }();
  if (!status.ok()) return status.WithContext("inserting job");
  job->id = std::to_string(sqlite3_last_insert_rowid(db_));
  return status;
}

Status Store::UpdateJob(const JobRecord& job) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job.id));
    EFT_ASSIGN_OR_RETURN(std::string spec, SpecToJson(job.spec));
    EFT_ASSIGN_OR_RETURN(std::string state, StateName(job.state));
    Status write = Write(
        "UPDATE jobs SET request_id = ?, spec = ?, state = ?, reason = ?, start_ms = ?, end_ms = ?, attempt = ?, "
        "restarts = ?, not_before_ms = ? WHERE id = ?",
        job.request_id, spec, state, job.reason, job.start_ms, job.end_ms, job.attempt, job.restarts,
        job.not_before_ms, id);
    if (write.code() == StatusCode::kAlreadyExists) {
      return Status::AlreadyExists("another job has request_id '" + job.request_id + "'");
    }
    if (write.ok() && sqlite3_changes(db_) == 0) return Status::NotFound("no such job");
    return write;
  }();
  return status.WithContext("updating job " + job.id);
}

Result<std::vector<JobRecord>> Store::LoadJobs() {
  return WithContext(Query<JobRecord>("SELECT " EFT_JOB_COLUMNS " FROM jobs ORDER BY id", JobFromRow<Statement>),
                     "loading jobs");
}

Result<std::optional<JobRecord>> Store::FindJobByRequestId(const std::string& request_id) {
  // '' means "no key": many jobs share it and none of them is the answer.
  if (request_id.empty()) return std::optional<JobRecord>();
  // The redundant `!= ''` lets SQLite use the partial index, which it cannot prove applies to `= ?`.
  return WithContext(First(Query<JobRecord>("SELECT " EFT_JOB_COLUMNS
                                            " FROM jobs WHERE request_id = ? AND request_id != ''",
                                            JobFromRow<Statement>, request_id)),
                     "finding job with request_id '" + request_id + "'");
}

// ---- attempts ----------------------------------------------------------------------------------

Status Store::InsertAttempt(const AttemptRecord& a) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t job_id, ParseJobId(a.job_id));
    EFT_ASSIGN_OR_RETURN(std::string nodes, NodesToJson(a.nodes));
    return MissingJobIsNotFound(Write("INSERT INTO attempts (" EFT_ATTEMPT_COLUMNS
                                      ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                      job_id, a.number, a.world_size, a.ranks_per_node, nodes,
                                      nlohmann::json(a.slots).dump(), a.master_addr, a.master_port, a.resume_from,
                                      a.start_ms, a.end_ms, a.end_reason));
  }();
  return status.WithContext("inserting attempt " + std::to_string(a.number) + " of job " + a.job_id);
}

Status Store::UpdateAttempt(const AttemptRecord& a) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t job_id, ParseJobId(a.job_id));
    EFT_ASSIGN_OR_RETURN(std::string nodes, NodesToJson(a.nodes));
    EFT_RETURN_IF_ERROR(Write(
        "UPDATE attempts SET world_size = ?, ranks_per_node = ?, nodes = ?, slots = ?, master_addr = ?, "
        "master_port = ?, resume_from = ?, start_ms = ?, end_ms = ?, end_reason = ? WHERE job_id = ? AND number = ?",
        a.world_size, a.ranks_per_node, nodes, nlohmann::json(a.slots).dump(), a.master_addr, a.master_port,
        a.resume_from, a.start_ms, a.end_ms, a.end_reason, job_id, a.number));
    return sqlite3_changes(db_) == 0 ? Status::NotFound("no such attempt") : Status::Ok();
  }();
  return status.WithContext("updating attempt " + std::to_string(a.number) + " of job " + a.job_id);
}

Result<std::vector<AttemptRecord>> Store::LoadAttempts(const std::string& job_id) {
  auto attempts = [&]() -> Result<std::vector<AttemptRecord>> {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
    return Query<AttemptRecord>("SELECT " EFT_ATTEMPT_COLUMNS " FROM attempts WHERE job_id = ? ORDER BY number",
                                AttemptFromRow<Statement>, id);
  }();
  return WithContext(std::move(attempts), "loading attempts of job " + job_id);
}

Result<std::vector<AttemptRecord>> Store::LoadUnfinishedAttempts() {
  return WithContext(Query<AttemptRecord>("SELECT " EFT_ATTEMPT_COLUMNS
                                          " FROM attempts WHERE end_ms = 0 ORDER BY job_id, number",
                                          AttemptFromRow<Statement>),
                     "loading unfinished attempts");
}

// ---- nodes -------------------------------------------------------------------------------------

Status Store::UpsertNode(const NodeRecord& n) {
  return Write(
             "INSERT INTO nodes (name, address, slots, drained, version, registered_ms, lost, state_reason) "
             "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET address = excluded.address, "
             "slots = excluded.slots, drained = excluded.drained, version = excluded.version, "
             "registered_ms = excluded.registered_ms, lost = excluded.lost, state_reason = excluded.state_reason",
             n.name, n.address, n.slots, n.drained, n.version, n.registered_ms, n.lost, n.state_reason)
      .WithContext("writing node " + n.name);
}

Result<std::vector<NodeRecord>> Store::LoadNodes() {
  return WithContext(Query<NodeRecord>("SELECT name, address, slots, drained, version, registered_ms, lost, "
                                       "state_reason FROM nodes ORDER BY name",
                                       NodeFromRow<Statement>),
                     "loading nodes");
}

// ---- checkpoints -------------------------------------------------------------------------------

Status Store::InsertCheckpoint(const CheckpointRecord& c) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t job_id, ParseJobId(c.job_id));
    // DO NOTHING: workers relay events at least once, so the same checkpoint may arrive again.
    return MissingJobIsNotFound(Write("INSERT INTO checkpoints (" EFT_CHECKPOINT_COLUMNS
                                      ") VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, path) DO NOTHING",
                                      job_id, c.step, c.kind, c.path, c.bytes, c.attempt, c.time_ms));
  }();
  return status.WithContext("inserting checkpoint " + c.path + " of job " + c.job_id);
}

Status Store::DeleteCheckpoint(const std::string& job_id, const std::string& path) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
    return Write("DELETE FROM checkpoints WHERE job_id = ? AND path = ?", id, path);
  }();
  return status.WithContext("forgetting checkpoint " + path + " of job " + job_id);
}

Result<std::vector<CheckpointRecord>> Store::LoadCheckpoints(const std::string& job_id) {
  auto checkpoints = [&]() -> Result<std::vector<CheckpointRecord>> {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
    return Query<CheckpointRecord>("SELECT " EFT_CHECKPOINT_COLUMNS
                                   " FROM checkpoints WHERE job_id = ? ORDER BY step, time_ms, id",
                                   CheckpointFromRow<Statement>, id);
  }();
  return WithContext(std::move(checkpoints), "loading checkpoints of job " + job_id);
}

Result<std::optional<CheckpointRecord>> Store::LatestCheckpoint(const std::string& job_id) {
  auto latest = [&]() -> Result<std::optional<CheckpointRecord>> {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
    return First(Query<CheckpointRecord>("SELECT " EFT_CHECKPOINT_COLUMNS " FROM checkpoints WHERE job_id = ? "
                                         "ORDER BY step DESC, time_ms DESC, id DESC LIMIT 1",
                                         CheckpointFromRow<Statement>, id));
  }();
  return WithContext(std::move(latest), "finding the latest checkpoint of job " + job_id);
}

// ---- events and counters -----------------------------------------------------------------------

Status Store::AppendEvent(const EventRecord& e) {
  Status status = [&]() -> Status {
    EFT_ASSIGN_OR_RETURN(int64_t job_id, ParseJobId(e.job_id));
    return MissingJobIsNotFound(Write("INSERT INTO events (job_id, time_ms, type, attempt, message) "
                                      "VALUES (?, ?, ?, ?, ?)",
                                      job_id, e.time_ms, e.type, e.attempt, e.message));
  }();
  return status.WithContext("appending event of job " + e.job_id);
}

Result<std::vector<EventRecord>> Store::LoadEvents(const std::string& job_id) {
  auto events = [&]() -> Result<std::vector<EventRecord>> {
    EFT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
    // By id, not time: wall clocks step back; the append order is the order decisions were taken.
    return Query<EventRecord>("SELECT job_id, time_ms, type, attempt, message FROM events WHERE job_id = ? "
                              "ORDER BY id",
                              EventFromRow<Statement>, id);
  }();
  return WithContext(std::move(events), "loading events of job " + job_id);
}

Result<int64_t> Store::NextCounter(const std::string& name) {
  // Query steps the statement to its end, which is where the autocommit write commits: the value
  // is durable before it is handed out.
  auto values = Query<int64_t>(
      "INSERT INTO counters (name, value) VALUES (?, 1) ON CONFLICT (name) DO UPDATE SET value = value + 1 "
      "RETURNING value",
      [](const Statement& row) -> Result<int64_t> { return row.Int(0); }, name);
  if (!values.ok()) return values.status().WithContext("advancing counter " + name);
  if (values->size() != 1) return Status::Internal("advancing counter " + name + ": RETURNING gave no value");
  return values->front();
}

}  // namespace eft::controller
