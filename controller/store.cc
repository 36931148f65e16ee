// Store: opening (pragmas, integrity check), the schema and its migrations, cached statements and
// transactions. The tables' reads and writes are in store_records.cc.
#include "controller/store.h"

#include <sqlite3.h>

#include <array>
#include <filesystem>
#include <utility>

#include "common/logging.h"
#include "controller/store_statement.h"

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
    // 3: what a controller restart must not forget (docs/architecture.md, "Controller restart"): the
    // highest step each attempt reached (its resume step until it reports one; 0 in rows from before,
    // which means "not known"), and the nodes held for waiting jobs of higher priority.
    R"sql(
ALTER TABLE attempts ADD COLUMN reached_step INTEGER NOT NULL DEFAULT 0;
CREATE TABLE reservations (
  node TEXT PRIMARY KEY NOT NULL, job_id INTEGER NOT NULL REFERENCES jobs (id)) WITHOUT ROWID;
)sql",
    // 4: each job's loss curves (train, eval) for describe, REST and `eftctl job plot`
    // (docs/architecture.md, "Loss history"): at most loss_history.h's cap of rows per curve.
    R"sql(
CREATE TABLE loss_points (
  job_id INTEGER NOT NULL REFERENCES jobs (id), curve INTEGER NOT NULL, idx INTEGER NOT NULL,
  step INTEGER NOT NULL, value REAL NOT NULL, samples INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY (job_id, curve, idx)) WITHOUT ROWID;
)sql",
    // 5: data.eval became a list of named sets (proto/eft/v1/spec.proto, EvalSet): a stored spec's
    // one path becomes a set named "eval", its "" (no eval file) an empty list, so every stored spec
    // still parses as an eft.v1.JobSpec.
    R"sql(
UPDATE jobs SET spec = json_set(spec, '$.data.eval',
  CASE WHEN json_extract(spec, '$.data.eval') = '' THEN json('[]')
       ELSE json_array(json_object('name', 'eval', 'path', json_extract(spec, '$.data.eval'))) END)
WHERE json_type(spec, '$.data.eval') = 'text';
)sql",
    // 6: how an attempt ended as a kind (eft.v1.AttemptEnd, stored by name as jobs.state is), which
    // decisions read instead of the words of end_reason. Rows from before get the kind their
    // reason's words, as the controller of schema 5 wrote them, stand for; this is the only place
    // that reads them.
    R"sql(
ALTER TABLE attempts ADD COLUMN end_kind TEXT NOT NULL DEFAULT 'ATTEMPT_END_UNSPECIFIED';
UPDATE attempts SET end_kind = CASE
  WHEN end_reason LIKE 'resized: %' THEN 'ATTEMPT_END_RESIZED'
  WHEN end_reason LIKE 'preempted: %' THEN 'ATTEMPT_END_PREEMPTED'
  WHEN end_reason LIKE 'cancelled by user%' THEN 'ATTEMPT_END_CANCELLED'
  WHEN end_reason LIKE 'all % ranks exited 0%' THEN 'ATTEMPT_END_SUCCEEDED'
  WHEN end_reason LIKE 'node % lost (%' THEN 'ATTEMPT_END_NODE_LOST'
  WHEN end_reason LIKE 'rank % vanished (%' THEN 'ATTEMPT_END_RANK_LOST'
  WHEN end_reason LIKE 'rank % exited with code 78 (out of memory)%' THEN 'ATTEMPT_END_OUT_OF_MEMORY'
  WHEN end_reason LIKE 'rank % stopped after saving a checkpoint (exit %' THEN 'ATTEMPT_END_STOPPED'
  WHEN end_reason LIKE 'rank % (rendezvous port % busy on node %' THEN 'ATTEMPT_END_PORT_BUSY'
  ELSE 'ATTEMPT_END_RANK_FAILED' END
WHERE end_ms != 0;
)sql",
};

}  // namespace

namespace internal {

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

}  // namespace internal



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

}  // namespace eft::controller
