// WorkDirLock: one eft-worker per work dir, and what a restarted worker learns from it.
//
// The worker holds an exclusive flock on <work_dir>/worker.lock for its whole life; the file names
// its pid, node and incarnation. A second worker on the same dir is refused (it would otherwise kill
// the first one's ranks as "left over" through the rank ledger). The kernel drops the lock when its
// holder dies, however it dies, so the incarnation a new holder finds in the file belongs to a dead
// process: the controller hands the node over at once to a worker that names it
// (RegisterRequest.previous_incarnation).
#pragma once

#include <string>

#include "common/status.h"

namespace eft::worker {

class WorkDirLock {
 public:
  // Takes the lock of `work_dir` (which must exist) for `node` / `incarnation`. FailedPrecondition,
  // naming the holder, when another live process holds it; IoError when the file cannot be used.
  static Result<WorkDirLock> Acquire(const std::string& work_dir, const std::string& node,
                                     const std::string& incarnation);

  WorkDirLock(WorkDirLock&& other) noexcept;
  WorkDirLock& operator=(WorkDirLock&& other) noexcept;
  WorkDirLock(const WorkDirLock&) = delete;
  WorkDirLock& operator=(const WorkDirLock&) = delete;
  ~WorkDirLock();  // lets go of the lock

  // The incarnation of the worker that held the lock before (dead by now); empty if none did.
  const std::string& previous_incarnation() const { return previous_incarnation_; }

 private:
  WorkDirLock(int fd, std::string previous) : fd_(fd), previous_incarnation_(std::move(previous)) {}
  int fd_ = -1;
  std::string previous_incarnation_;
};

}  // namespace eft::worker
