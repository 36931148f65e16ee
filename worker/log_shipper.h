// LogShipper: copies rank log files from the worker's disk to the controller with PushLogs.
//
// Each tracked file is sent from the offset the controller last confirmed, so a lost reply, a
// controller restart or a retry never duplicates or drops bytes (the controller trims overlaps).
// A file is forgotten once Untrack was called and everything in it was confirmed. Runs its own
// thread; thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "eft/v1/agent.grpc.pb.h"
#include "worker/worker_config.h"

namespace grpc {
class ClientContext;
}

namespace eft::worker {
// A stub on a new channel with a connection of its own. Callers make a new one after a failed call:
// a channel whose connection was refused (controller restarting) waits out gRPC's reconnect backoff,
// which can exceed the controller's heartbeat timeout, and a connection cut by a partition waits out
// TCP's retransmission backoff; a new channel connects at once. Its connection attempts give up
// after `connect_timeout` (gRPC's default: 20 s), so one lost to a partition is retried soon.
std::unique_ptr<v1::AgentService::Stub> NewAgentStub(const ControllerEndpoint& controller,
                                                     std::chrono::milliseconds connect_timeout);
// Adds the join token to a call.
void AddJoinToken(const ControllerEndpoint& controller, grpc::ClientContext* ctx);
}  // namespace eft::worker

namespace eft::worker {

class LogShipper {
 public:
  LogShipper(ControllerEndpoint controller, std::string node_name, std::chrono::milliseconds interval,
             std::chrono::milliseconds rpc_timeout);
  ~LogShipper();  // one last push attempt, then stops

  void Start();
  void Track(const v1::RankKey& key, const std::string& path) EXCLUDES(mu_);
  // The rank is gone: forget the file once it is fully shipped.
  void Untrack(const v1::RankKey& key) EXCLUDES(mu_);
  // Pushes now instead of at the next interval.
  void Wake() EXCLUDES(mu_);

  struct Stats {
    uint64_t bytes_shipped = 0;  // bytes the controller confirmed
    uint64_t push_failures = 0;  // PushLogs calls that failed
  };
  Stats stats() const { return {bytes_shipped_.load(), push_failures_.load()}; }

 private:
  struct File {
    v1::RankKey key;
    std::string path;
    int64_t confirmed = 0;
    bool done = false;
  };
  void Loop() EXCLUDES(mu_);
  bool PushOnce() EXCLUDES(mu_);  // returns whether anything was sent

  // Set at construction, read-only after.
  const ControllerEndpoint controller_;
  const std::string node_name_;
  const std::chrono::milliseconds interval_;
  const std::chrono::milliseconds rpc_timeout_;
  // Used only by the shipping thread (PushOnce), so no lock; replaced after a failed call (see
  // NewAgentStub).
  std::unique_ptr<v1::AgentService::Stub> stub_;

  Mutex mu_;
  CondVar cv_;  // notified (under mu_) when wake_ or stop_ is set
  bool wake_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::map<std::string, File> files_ GUARDED_BY(mu_);  // by path
  std::atomic<uint64_t> bytes_shipped_{0};
  std::atomic<uint64_t> push_failures_{0};
  std::thread thread_;  // started by Start, joined by the destructor: the owner's thread only
};

}  // namespace eft::worker
