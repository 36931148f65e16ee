// WorkerAgent: the eft-worker of one node.
//
// Registers with the controller, heartbeats every interval (and at once after any local change),
// and reconciles: starts the desired ranks it does not run, stops (SIGTERM, grace, SIGKILL of the
// process group) the ranks that are no longer desired, reports every rank's state and relays the
// events ranks write to EFT_EVENTS_FD until the controller acknowledges them. When the controller
// is unreachable, ranks keep running and reports wait; everything converges when it answers again.
//
// Threads: an io thread owns the ProcessSupervisor (rank processes must be forked from a thread that
// lives as long as they do, because of PR_SET_PDEATHSIG), a heartbeat thread does the RPCs, and the
// LogShipper has its own. `mu_` guards the rank table and pending events.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>

#include <boost/asio/io_context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <grpcpp/grpcpp.h>

#include "common/status.h"
#include "eft/v1/agent.grpc.pb.h"
#include "worker/log_shipper.h"
#include "worker/process_supervisor.h"
#include "worker/rank_ledger.h"
#include "worker/worker_config.h"

namespace eft::worker {

// What the worker's /metrics reports of the agent (worker_metrics.h); counts since the process started.
struct WorkerStats {
  std::map<v1::RankState, int64_t> ranks_by_state;  // the ranks it runs or still reports
  std::map<int, std::string> slot_jobs;             // slot -> job of the rank holding it (running or stopping)
  std::map<std::string, uint64_t> rank_exits;       // by RankExitClass
  uint64_t rank_starts = 0;
  uint64_t rank_restarts = 0;  // starts of ranks of a job's second or later attempt
  uint64_t rank_start_failures = 0;
  uint64_t registrations = 0;  // successful Register calls
  uint64_t heartbeats = 0;     // successful Heartbeat calls
  uint64_t heartbeat_failures = 0;  // failed Register or Heartbeat calls
  bool controller_reachable = false;
  uint64_t pending_events = 0;  // rank events not yet acknowledged by the controller
  uint64_t log_bytes_shipped = 0;
  uint64_t log_push_failures = 0;
};

// How a rank ended, as a small fixed set (the exit-code contract of ARCHITECTURE.md): "success"
// (0), "bad_input" (2), "stopped" (75, saved and stopped on request), "failed" (any other code),
// "signal" (killed by a signal).
const char* RankExitClass(int exit_code, int signal);

class WorkerAgent {
 public:
  explicit WorkerAgent(WorkerConfig config);
  ~WorkerAgent();

  // Kills ranks a previous incarnation left behind and starts the threads.
  Status Start();
  // Stops every rank (SIGTERM, then SIGKILL after its grace period), reports their exits to the
  // controller if it can within `deadline`, and stops the threads.
  void Shutdown(std::chrono::milliseconds deadline);

  // Thread-safe (takes the agent's lock briefly), between Start() and Shutdown().
  WorkerStats Stats();

 private:
  using Key = std::tuple<std::string, int, int>;  // job, attempt, rank
  struct LocalRank {
    v1::RankAssignment assignment;
    v1::RankStatus status;
    ProcessSupervisor::Id id = 0;
  };

  void HeartbeatLoop();
  bool RegisterOnce();
  bool HeartbeatOnce();
  void Reconcile(const google::protobuf::RepeatedPtrField<v1::RankAssignment>& desired);  // io thread
  void StartRank(const v1::RankAssignment& a);                                           // io thread
  void OnExit(ProcessSupervisor::Id id, ProcessExit exit);
  void OnEventLine(ProcessSupervisor::Id id, const std::string& line);
  void WakeHeartbeat();
  std::vector<v1::RankStatus> SnapshotRanks();
  std::string LogPath(const v1::RankKey& key) const;
  static Key KeyOf(const v1::RankKey& k) { return {k.job_id(), k.attempt(), k.rank()}; }

  WorkerConfig config_;
  ControllerEndpoint endpoint_;  // config_.endpoint with its address
  std::string incarnation_;
  std::unique_ptr<v1::AgentService::Stub> stub_;  // heartbeat thread only
  RankLedger ledger_;

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::unique_ptr<ProcessSupervisor> supervisor_;  // used on the io thread only
  std::thread io_thread_;
  std::thread heartbeat_thread_;
  std::unique_ptr<LogShipper> shipper_;

  std::mutex mu_;
  std::condition_variable wake_cv_;
  bool wake_ = false;
  bool stop_ = false;
  bool registered_ = false;
  bool draining_ = false;  // shutting down: run nothing new
  std::chrono::milliseconds interval_;
  std::map<Key, LocalRank> ranks_;
  std::map<ProcessSupervisor::Id, Key> by_id_;
  ProcessSupervisor::Id next_id_ = 1;
  std::deque<v1::RankEvent> pending_events_;
  uint64_t next_seq_ = 1;
  std::atomic<bool> controller_reachable_{true};
  // Under mu_, except the RPC counts, which the heartbeat thread bumps without it.
  std::map<std::string, uint64_t> rank_exits_;
  uint64_t rank_starts_ = 0;
  uint64_t rank_restarts_ = 0;
  uint64_t rank_start_failures_ = 0;
  std::atomic<uint64_t> registrations_{0};
  std::atomic<uint64_t> heartbeats_{0};
  std::atomic<uint64_t> heartbeat_failures_{0};
};

}  // namespace eft::worker
