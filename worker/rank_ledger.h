// RankLedger: a file in the worker's work dir listing the process groups this worker started, so a
// restarted worker can kill what its previous incarnation left behind (grandchildren that outlived
// PR_SET_PDEATHSIG, or ranks of a worker that was SIGKILLed).
//
// Each entry records the pid and the process start time from /proc/<pid>/stat, so a recycled pid
// that now belongs to an unrelated process is never killed. Writes are atomic (temp file + rename).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace eft::worker {

class RankLedger {
 public:
  explicit RankLedger(std::string path);

  // Adds the process group led by `pid` (a child started with setpgid(0, 0)).
  Status Record(pid_t pid);
  // Removes it (after it has been reaped).
  Status Forget(pid_t pid);
  // SIGKILLs every recorded process group whose leader is still the recorded process (or, if the
  // leader is gone, whose group still has members), then empties the ledger. Returns how many
  // groups were signalled. A missing ledger file is an empty ledger; a corrupt one is reported (an
  // ERROR log, not a failure: a worker must still be able to start), the entries that still parse
  // are honoured (each is checked against the live process before anything is killed), and the
  // file is replaced. Errors are I/O failures only.
  Result<int> KillLeftovers();

 private:
  struct Entry {
    pid_t pid;
    unsigned long long start_time;
  };
  Result<std::vector<Entry>> Read() const;
  Status Write(const std::vector<Entry>& entries) const;
  std::string path_;
};

}  // namespace eft::worker
