// GroupCommit: many callers, one slow batchable write each (a SQLite transaction ending in an fsync).
// A caller queues its request; if no write is in progress it becomes the leader, takes everything
// queued so far and commits it as one batch (its commit function fills every item's reply), then
// wakes the others. Meanwhile new callers queue for the next batch. So N concurrent submits cost
// about log(N) fsyncs instead of N, and each caller still gets its own reply, written when Run
// returns.
//
// Thread-safe. The commit function runs on a caller's thread, without the queue's lock held.
#pragma once

#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace eft::controller {

template <typename Request, typename Reply>
class GroupCommit {
 public:
  struct Item {
    Request request;
    std::optional<Reply> reply;  // the commit function must set it
  };
  using CommitFn = std::function<void(const std::vector<Item*>& batch)>;

  explicit GroupCommit(CommitFn commit) : commit_(std::move(commit)) {}

  Reply Run(Request request) EXCLUDES(mu_) {
    Item me{std::move(request), std::nullopt};
    mu_.Lock();
    queue_.push_back(&me);
    while (!me.reply) {
      if (leader_) {
        cv_.Wait(&mu_);
        continue;
      }
      leader_ = true;
      std::vector<Item*> batch;
      batch.swap(queue_);
      mu_.Unlock();
      commit_(batch);
      mu_.Lock();
      leader_ = false;
      cv_.NotifyAll();
    }
    mu_.Unlock();
    return std::move(*me.reply);
  }

 private:
  CommitFn commit_;
  Mutex mu_;
  CondVar cv_;
  std::vector<Item*> queue_ GUARDED_BY(mu_);
  bool leader_ GUARDED_BY(mu_) = false;
};

}  // namespace eft::controller
