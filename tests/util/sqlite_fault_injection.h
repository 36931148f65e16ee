// Disk faults for tests of code that writes SQLite databases, without a full or failing disk.
//
// While a SqliteFaultInjection is alive it is SQLite's default VFS, so code that opens databases
// the ordinary way (Store::Open) uses it unchanged. It forwards every call to the VFS that was the
// default before, so the code under test sees exactly the error codes a real disk produces, except:
//   FailWrites(rc, n)  every xWrite after the next n returns rc (SQLITE_FULL: disk full;
//                      SQLITE_IOERR_WRITE: I/O error); FailWrites(SQLITE_OK) stops it.
//   FailSyncs(rc)      every xSync returns rc (SQLITE_IOERR_FSYNC); SQLITE_OK stops it.
//   wal_syncs()        how many xSync calls reached WAL files (what synchronous=FULL promises).
// One at a time per process, created and destroyed while no other thread uses SQLite; databases
// opened through it must be closed before it is destroyed, which restores the previous default.
#pragma once

#include <sqlite3.h>

namespace eft::testing {

class SqliteFaultInjection {
 public:
  SqliteFaultInjection();
  ~SqliteFaultInjection();
  SqliteFaultInjection(const SqliteFaultInjection&) = delete;
  SqliteFaultInjection& operator=(const SqliteFaultInjection&) = delete;

  void FailWrites(int sqlite_rc, int writes_before_failure = 0);
  void FailSyncs(int sqlite_rc);
  int wal_syncs() const { return faults_.wal_syncs; }

  // What the shim's files consult on each call; public only for them.
  struct Faults {
    int write_rc = SQLITE_OK;
    int writes_before_failure = 0;
    int sync_rc = SQLITE_OK;
    int wal_syncs = 0;
  };

 private:
  sqlite3_vfs* base_;
  sqlite3_vfs vfs_;
  Faults faults_;
};

}  // namespace eft::testing
