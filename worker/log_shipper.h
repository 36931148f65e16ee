// LogShipper: copies rank log files from the worker's disk to the controller with PushLogs.
//
// Each tracked file is sent from the offset the controller last confirmed, so a lost reply, a
// controller restart or a retry never duplicates or drops bytes (the controller trims overlaps).
// A file is forgotten once Untrack was called and everything in it was confirmed. Runs its own
// thread; thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "eft/v1/agent.grpc.pb.h"
#include "worker/worker_config.h"

namespace grpc {
class ClientContext;
}

namespace eft::worker {
// A stub on a new channel. Callers make a new one after a failed call: a channel whose connection
// was refused (controller restarting) waits out gRPC's reconnect backoff, which can exceed the
// controller's heartbeat timeout, while a new channel connects at once.
std::unique_ptr<v1::AgentService::Stub> NewAgentStub(const ControllerEndpoint& controller);
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
  void Track(const v1::RankKey& key, const std::string& path);
  // The rank is gone: forget the file once it is fully shipped.
  void Untrack(const v1::RankKey& key);
  // Pushes now instead of at the next interval.
  void Wake();

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
  void Loop();
  bool PushOnce();  // returns whether anything was sent

  ControllerEndpoint controller_;
  std::unique_ptr<v1::AgentService::Stub> stub_;  // replaced after a failed call (see NewAgentStub)
  std::string node_name_;
  std::chrono::milliseconds interval_;
  std::chrono::milliseconds rpc_timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool wake_ = false;
  bool stop_ = false;
  std::map<std::string, File> files_;  // by path
  std::atomic<uint64_t> bytes_shipped_{0};
  std::atomic<uint64_t> push_failures_{0};
  std::thread thread_;
};

}  // namespace eft::worker
