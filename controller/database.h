// Database: one SQLite file as the controller keeps it.
//
// Opened in WAL mode with synchronous=FULL, so a call that returned OK survives a crash of the
// process or the machine; integrity-checked on open, so a damaged file is refused with a clear
// message rather than failing halfway through recovery. The schema is versioned (PRAGMA
// user_version) and migrated forward on Open by the given scripts, one per version; a database
// from a newer controller is refused. Statements are prepared once and cached. Every statement is
// one transaction unless it runs inside RunInTransaction, which groups several atomically (nested
// calls join it, in a savepoint). Not thread-safe: the controller serialises calls under its lock.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace eft::controller {

class Database {
 public:
  // Creates the file (and its parent directory) if missing and brings it to version
  // migrations.size(): migrations[i] takes the schema from version i to i + 1.
  static Result<std::unique_ptr<Database>> Open(const std::string& path, std::vector<const char*> migrations);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  int schema_version() const;
  const std::string& path() const { return path_; }

  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT; rolls back and returns the error if `body` or the
  // commit fails. Nested calls join the outer transaction.
  Status RunInTransaction(const std::function<Status()>& body);

  class Statement;  // a borrowed cached statement (database_statement.h)
  // Returns the cached prepared statement for `sql` (compiled on first use).
  Result<Statement> Prepare(const char* sql);
  // Runs `sql` with `params` bound in order; Query converts each row with `convert`
  // (database_statement.h).
  template <typename... Params>
  Status Write(const char* sql, const Params&... params);
  template <typename Record, typename Convert, typename... Params>
  Result<std::vector<Record>> Query(const char* sql, Convert convert, const Params&... params);
  // Of the last write on this connection: the rowid it inserted, the rows it changed.
  int64_t last_insert_rowid() const;
  int changes() const;

 private:
  Database(sqlite3* db, std::string path, std::vector<const char*> migrations);
  Status Configure();
  Status Migrate();
  Status CheckIntegrity();
  Status RunNested(const std::function<Status()>& body);
  void RollbackAfterError(const char* sql);

  sqlite3* db_;
  std::string path_;
  const std::vector<const char*> migrations_;
  int schema_version_ = 0;
  int transaction_depth_ = 0;
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
};

}  // namespace eft::controller
