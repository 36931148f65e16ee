// LogStore: rank logs on the controller's disk, one file per (job, attempt, rank):
// <root>/<job>/attempt-<a>/rank-<r>.log.
//
// Workers push chunks tagged with their byte offset. Append stores only the bytes past the current
// end, so a retried or duplicated chunk is never written twice and a chunk that would leave a gap is
// refused; the returned end tells the worker where to resume. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace eft::controller {

struct LogId {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  bool operator<(const LogId& o) const {
    return std::tie(job_id, attempt, rank) < std::tie(o.job_id, o.attempt, o.rank);
  }
  bool operator==(const LogId& o) const = default;
};

class LogStore {
 public:
  explicit LogStore(std::string root);

  // Stores `data`, which starts at byte `offset` of the log. Returns the log's size afterwards.
  Result<int64_t> Append(const LogId& id, int64_t offset, std::string_view data) EXCLUDES(append_mu_);
  // Current size in bytes (0 when there is no log yet).
  int64_t Size(const LogId& id) const;
  // Up to `max_bytes` from `offset`; empty at or past the end.
  Result<std::string> Read(const LogId& id, int64_t offset, size_t max_bytes) const;
  // Every log of a job, ordered by attempt then rank.
  std::vector<LogId> List(const std::string& job_id) const;

 private:
  std::string PathOf(const LogId& id) const;
  const std::string root_;
  // Guards no member but the files: Appends run one at a time, so two pushes of one log cannot both
  // write past the end they read. Reads take no lock: a log only ever grows.
  Mutex append_mu_;
};

}  // namespace eft::controller
