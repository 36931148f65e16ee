#include "tests/util/sqlite_fault_injection.h"

#include <cstdio>
#include <cstdlib>

namespace eft::testing {
namespace {

// A file of the shim: SQLite allocates szOsFile bytes for it, this struct followed by the base
// VFS's own file, to which every method forwards.
struct FaultFile {
  sqlite3_file base;
  sqlite3_file* real;
  int flags;
  SqliteFaultInjection::Faults* faults;
};
FaultFile* Self(sqlite3_file* f) { return reinterpret_cast<FaultFile*>(f); }
sqlite3_file* Real(sqlite3_file* f) { return Self(f)->real; }
#define EFT_FORWARD(method, ...) Real(f)->pMethods->method(Real(f), ##__VA_ARGS__)

const sqlite3_io_methods kFaultMethods = {
    3,
    [](sqlite3_file* f) { return EFT_FORWARD(xClose); },
    [](sqlite3_file* f, void* b, int n, sqlite3_int64 o) { return EFT_FORWARD(xRead, b, n, o); },
    [](sqlite3_file* f, const void* b, int n, sqlite3_int64 o) {
      SqliteFaultInjection::Faults& faults = *Self(f)->faults;
      if (faults.write_rc != SQLITE_OK && faults.writes_before_failure-- <= 0) return faults.write_rc;
      return EFT_FORWARD(xWrite, b, n, o);
    },
    [](sqlite3_file* f, sqlite3_int64 size) { return EFT_FORWARD(xTruncate, size); },
    [](sqlite3_file* f, int flags) {
      SqliteFaultInjection::Faults& faults = *Self(f)->faults;
      if (Self(f)->flags & SQLITE_OPEN_WAL) ++faults.wal_syncs;
      return faults.sync_rc != SQLITE_OK ? faults.sync_rc : EFT_FORWARD(xSync, flags);
    },
    [](sqlite3_file* f, sqlite3_int64* size) { return EFT_FORWARD(xFileSize, size); },
    [](sqlite3_file* f, int lock) { return EFT_FORWARD(xLock, lock); },
    [](sqlite3_file* f, int lock) { return EFT_FORWARD(xUnlock, lock); },
    [](sqlite3_file* f, int* out) { return EFT_FORWARD(xCheckReservedLock, out); },
    [](sqlite3_file* f, int op, void* arg) { return EFT_FORWARD(xFileControl, op, arg); },
    [](sqlite3_file* f) { return EFT_FORWARD(xSectorSize); },
    [](sqlite3_file* f) { return EFT_FORWARD(xDeviceCharacteristics); },
    [](sqlite3_file* f, int page, int size, int extend, void volatile** out) {
      return EFT_FORWARD(xShmMap, page, size, extend, out);
    },
    [](sqlite3_file* f, int offset, int n, int flags) { return EFT_FORWARD(xShmLock, offset, n, flags); },
    [](sqlite3_file* f) { EFT_FORWARD(xShmBarrier); },
    [](sqlite3_file* f, int del) { return EFT_FORWARD(xShmUnmap, del); },
    [](sqlite3_file* f, sqlite3_int64 o, int n, void** p) { return EFT_FORWARD(xFetch, o, n, p); },
    [](sqlite3_file* f, sqlite3_int64 o, void* p) { return EFT_FORWARD(xUnfetch, o, p); },
};

bool active = false;  // one at a time: both would register under the same name

}  // namespace

SqliteFaultInjection::SqliteFaultInjection() : base_(sqlite3_vfs_find(nullptr)), vfs_(*base_) {
  if (active) {
    std::fprintf(stderr, "SqliteFaultInjection: only one may exist at a time\n");
    std::abort();
  }
  active = true;
  vfs_.szOsFile = static_cast<int>(sizeof(FaultFile)) + base_->szOsFile;
  vfs_.zName = "eft-fault";
  vfs_.pNext = nullptr;
  vfs_.pAppData = this;
  vfs_.xOpen = [](sqlite3_vfs* vfs, sqlite3_filename name, sqlite3_file* f, int flags, int* out) {
    auto* self = static_cast<SqliteFaultInjection*>(vfs->pAppData);
    FaultFile* file = Self(f);
    file->real = reinterpret_cast<sqlite3_file*>(file + 1);
    file->flags = flags;
    file->faults = &self->faults_;
    int rc = self->base_->xOpen(self->base_, name, file->real, flags, out);
    file->base.pMethods = rc == SQLITE_OK ? &kFaultMethods : nullptr;
    return rc;
  };
  sqlite3_vfs_register(&vfs_, /*makeDflt=*/1);
}

SqliteFaultInjection::~SqliteFaultInjection() {
  faults_ = Faults();
  sqlite3_vfs_unregister(&vfs_);
  sqlite3_vfs_register(base_, /*makeDflt=*/1);
  active = false;
}

void SqliteFaultInjection::FailWrites(int sqlite_rc, int writes_before_failure) {
  faults_.write_rc = sqlite_rc;
  faults_.writes_before_failure = writes_before_failure;
}

void SqliteFaultInjection::FailSyncs(int sqlite_rc) { faults_.sync_rc = sqlite_rc; }

}  // namespace eft::testing
