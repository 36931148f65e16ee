// Database internals shared by database.cc (opening, migrations, transactions) and store_records.cc
// (rows <-> records): the borrowed statement and the Write/Query templates built on it. Not for
// other code: everything here works on the raw SQLite handle.
#pragma once

#include <sqlite3.h>

#include <utility>
#include <vector>

#include "controller/database.h"

namespace eft::controller {

namespace internal {

// Turns a failed sqlite call into a Status. Must run before any other call on `db`, which would
// replace the message. The code tells callers what they can do about it: retry (UNAVAILABLE),
// nothing but restore a backup (DATA_LOSS), free disk space (RESOURCE_EXHAUSTED), ...
Status SqliteError(sqlite3* db, int rc);

}  // namespace internal

using internal::SqliteError;

// A cached statement borrowed for one use. Bind() fills parameters left to right; the destructor
// resets the statement, which ends its implicit read transaction and readies it for the next user.
class Database::Statement {
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
  Statement& Bind(int32_t value) { return Bind(static_cast<int64_t>(value)); }
  Statement& Bind(double value) { return Check(sqlite3_bind_double(stmt_, ++param_, value)); }
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
  double Real(int column) const { return sqlite3_column_double(stmt_, column); }
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

template <typename... Params>
Status Database::Write(const char* sql, const Params&... params) {
  EFT_ASSIGN_OR_RETURN(Statement statement, Prepare(sql));
  (statement.Bind(params), ...);
  return statement.Run();
}

template <typename Record, typename Convert, typename... Params>
Result<std::vector<Record>> Database::Query(const char* sql, Convert convert, const Params&... params) {
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

}  // namespace eft::controller
