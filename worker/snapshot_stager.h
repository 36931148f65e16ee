// SnapshotStager: carries out the controller's StageOrders (HeartbeatResponse.stage) on a thread of
// its own, since copying a node's shards into the checkpoint directory takes seconds and must hold
// up neither heartbeats nor the io thread.
//
// Each distinct order is carried out once, in the order first seen; its StageResult is reported
// (Results) in every heartbeat until the order no longer appears in the replies, and then
// forgotten (Update). An order that leaves the replies before it ran is dropped; one that comes
// back later is a new order.
//
// Thread-safe. `on_done` (may be empty) runs on the stager's thread after each order, without the
// lock: the agent wakes its heartbeat with it.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/repeated_ptr_field.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "eft/v1/agent.pb.h"
#include "worker/snapshot_store.h"

namespace eft::worker {

class SnapshotStager {
 public:
  SnapshotStager(SnapshotStore* store, std::function<void()> on_done);  // `store` not owned
  ~SnapshotStager();  // Stop()

  void Start();
  // Waits for the order being carried out, if any; the rest are dropped.
  void Stop() EXCLUDES(mu_);

  // The orders of one heartbeat reply.
  void Update(const google::protobuf::RepeatedPtrField<v1::StageOrder>& orders) EXCLUDES(mu_);
  // The results of the finished orders that the last reply still listed.
  std::vector<v1::StageResult> Results() const EXCLUDES(mu_);

 private:
  struct Order {
    v1::StageOrder order;
    std::optional<v1::StageResult> result;
  };
  void Loop() EXCLUDES(mu_);

  SnapshotStore* store_;
  std::function<void()> on_done_;
  std::thread thread_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::map<std::string, Order> orders_ GUARDED_BY(mu_);  // by OrderKey
  std::deque<std::string> queue_ GUARDED_BY(mu_);        // keys not yet carried out
};

}  // namespace eft::worker
