// Database: opening (pragmas, integrity check), migrations, cached statements and transactions.
#include "controller/database.h"

#include <sqlite3.h>

#include <filesystem>
#include <utility>

#include "common/logging.h"
#include "controller/database_statement.h"

namespace eft::controller {

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

Database::Database(sqlite3* db, std::string path, std::vector<const char*> migrations)
    : db_(db), path_(std::move(path)), migrations_(std::move(migrations)) {}

Database::~Database() {
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  // Closing the last connection checkpoints the WAL into the main file; an open transaction (only
  // possible if a body threw past RunInTransaction) is rolled back.
  sqlite3_close_v2(db_);
}

int Database::schema_version() const { return schema_version_; }

Result<std::unique_ptr<Database>> Database::Open(const std::string& path, std::vector<const char*> migrations) {
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
  std::unique_ptr<Database> store(new Database(db, path, std::move(migrations)));
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

Status Database::Configure() {
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

Status Database::CheckIntegrity() {
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

Status Database::Migrate() {
  const int64_t latest = static_cast<int64_t>(migrations_.size());
  for (;;) {
    // Each step reads the version inside its own write transaction, so two controllers started on
    // one file cannot both apply the same script.
    EFT_RETURN_IF_ERROR(Write("BEGIN IMMEDIATE").WithContext("starting migration"));
    auto read = Query<int64_t>("PRAGMA user_version", [](const Statement& row) -> Result<int64_t> {
      return row.Int(0);
    });
    Status status = read.ok() ? Status::Ok() : read.status();
    const int64_t version = read.ok() && read->size() == 1 ? read->front() : -1;
    if (status.ok() && version > latest) {
      status = Status::FailedPrecondition("database schema version " + std::to_string(version) +
                                          " is newer than this controller supports (" +
                                          std::to_string(latest) + "); upgrade eft-controller");
    } else if (status.ok() && version < 0) {
      status = Status::DataLoss("database schema version " + std::to_string(version) + " is invalid");
    }
    if (!status.ok() || version == latest) {
      RollbackAfterError("ROLLBACK");
      schema_version_ = static_cast<int>(version);
      return status;
    }
    // The scripts are constants of this file and the version a small integer, so running them as
    // text is safe; PRAGMA takes no bound parameters.
    const std::string script =
        std::string(migrations_[version]) + "\nPRAGMA user_version = " + std::to_string(version + 1) + ";";
    int rc = sqlite3_exec(db_, script.c_str(), nullptr, nullptr, nullptr);
    status = rc == SQLITE_OK ? Write("COMMIT") : SqliteError(db_, rc);
    if (!status.ok()) {
      RollbackAfterError("ROLLBACK");
      return status.WithContext("migrating schema to version " + std::to_string(version + 1));
    }
    EFT_LOG(INFO) << "store " << path_ << ": schema migrated to version " << version + 1;
  }
}

Result<Database::Statement> Database::Prepare(const char* sql) {
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


void Database::RollbackAfterError(const char* sql) {
  // After SQLITE_FULL or an I/O error SQLite may already have rolled back by itself.
  if (sqlite3_get_autocommit(db_)) return;
  const int depth = std::exchange(transaction_depth_, 0);  // lets Prepare run while rolling back
  Status status = Write(sql);
  transaction_depth_ = depth;
  if (!status.ok()) {
    EFT_LOG(ERROR) << "store " << path_ << ": " << sql << " failed: " << status;
  }
}

Status Database::RunInTransaction(const std::function<Status()>& body) {
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
Status Database::RunNested(const std::function<Status()>& body) {
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

int64_t Database::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }

int Database::changes() const { return sqlite3_changes(db_); }

}  // namespace eft::controller
