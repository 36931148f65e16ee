// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with the annotations of
// common/thread_annotations.h, so clang's -Wthread-safety can check that what is GUARDED_BY a Mutex
// is only touched with it held. Same cost as the std types they wrap.
//
//   eft::Mutex mu_;
//   int count_ GUARDED_BY(mu_);
//   void Add() EXCLUDES(mu_) { eft::MutexLock lock(&mu_); ++count_; }
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace eft {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable for eft::Mutex. The waits release `mu` while blocked and hold it again when
// they return, as std::condition_variable does; to the analysis `mu` stays held throughout.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still locked: the caller's MutexLock unlocks it
  }

  // Waits until `done()` is true. `done` runs with `mu` held.
  template <typename Predicate>
  void Wait(Mutex* mu, Predicate done) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock, std::move(done));
    lock.release();
  }

  // Waits until `done()` is true or `timeout` has passed; returns `done()`. `done` runs with `mu`
  // held.
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout, Predicate done) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    bool result = cv_.wait_for(lock, timeout, std::move(done));
    lock.release();
    return result;
  }

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace eft
