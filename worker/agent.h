// WorkerAgent: the eft-worker of one node.
//
// Registers with the controller, heartbeats every interval (and at once after any local change),
// and reconciles (worker/reconcile.h): starts the desired ranks it does not run, with the
// environment of worker/rank_env.h, stops (SIGTERM, grace, SIGKILL of the process group) the ranks
// that are no longer desired, reports every rank's state and relays the events ranks write to
// EFT_EVENTS_FD until the controller acknowledges them. When the controller is unreachable, ranks
// keep running and reports wait; everything converges when it answers again. Unless the lease runs
// out first: once none of its requests sent within the last lease_ms (the controller's
// heartbeat_timeout, from its replies) was accepted, the controller has declared or will declare
// this node LOST and restart its jobs elsewhere, so the agent kills every rank at once, logs one
// line, and starts nothing until a request is accepted again (agent.proto, HeartbeatResponse.lease_ms).
// docs/architecture.md ("Worker", "Lease") describes it.
//
// Memory snapshots (agent_snapshots.cc; off when WorkerConfig::snapshot_dir is empty): each rank gets
// its attempt's incoming dir as EFT_SNAPSHOT_DIR; a memory_snapshot event is relayed as any other
// and its file taken over by the SnapshotStore and queued for the attempt's snapshot_peers (a
// refusal becomes a memory_snapshot_refused event of that rank). Every heartbeat lists what the
// store holds and the results of StageOrders (carried out by a SnapshotStager), and each reply's
// keep_snapshots, with the attempts of the ranks this node still knows, is what the store keeps.
//
// Threads: an io thread owns the RankLauncher (rank processes must be forked from a thread that
// lives as long as they do, because of PR_SET_PDEATHSIG) and the attempt specs, a heartbeat thread
// does the RPCs, and the LogShipper has its own. `mu_` guards the rank table, pending events and
// the heartbeat state, and clang checks it (common/thread_annotations.h): every member it guards is
// GUARDED_BY(mu_); the members without it say which thread owns them.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include <boost/asio/io_context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/steady_timer.hpp>
#include <grpcpp/grpcpp.h>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/rank_protocol.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "eft/v1/agent.grpc.pb.h"
#include "worker/hedged_call.h"
#include "worker/log_shipper.h"
#include "worker/rank_env.h"
#include "worker/rank_launcher.h"
#include "worker/reconcile.h"
#include "worker/snapshot_service.h"
#include "worker/snapshot_stager.h"
#include "worker/snapshot_store.h"
#include "worker/work_dir_lock.h"
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
  bool lease_expired = false;      // ranks killed: nothing accepted within the lease; until renewed
  uint64_t lease_expirations = 0;  // times the lease ran out
  uint64_t pending_events = 0;  // rank events not yet acknowledged by the controller
  uint64_t log_bytes_shipped = 0;
  uint64_t log_push_failures = 0;
  // Memory snapshots; all 0 when they are off.
  int64_t snapshot_own_bytes = 0;      // this node's ranks' files held
  int64_t snapshot_replica_bytes = 0;  // other nodes' files held or being received
  int64_t snapshot_budget_bytes = 0;
  std::map<std::string, uint64_t> snapshot_pushes;  // to peers, by result: ok, refused, failed
  double snapshot_push_seconds = 0;                 // the newest accepted push
  uint64_t snapshot_pushed_bytes = 0;
  uint64_t snapshot_refusals = 0;  // own snapshots this node could not take over
};

// How a rank ended: rank::ExitClassName(rank::ClassifyExit(...)) of common/rank_protocol.h,
// "success", "bad_input", "stopped", "failed" or "signal".
const char* RankExitClass(int exit_code, int signal);

// What the agent uses of the outside world, so that tests can replace it.
struct AgentDeps {
  // A stub on a new channel to the controller, made at construction and again after every failed
  // Register or Heartbeat (see NewAgentStub for why). Unset: NewAgentStub(config.endpoint).
  std::function<std::unique_ptr<v1::AgentService::StubInterface>()> new_stub;
  // Stamps rank start and end times and events, and measures the lease. Not owned; unset:
  // RealClock::Get(). Waits (the heartbeat interval, the lease check's period, Shutdown's deadline)
  // block threads and therefore use real time.
  Clock* clock = nullptr;
  // Called once, on the heartbeat thread, when the controller fences this worker: another live worker
  // holds its node name (RegisterResponse.fenced). The agent runs nothing from then on; the owner
  // is expected to Shutdown() and exit. Unset: only logged.
  std::function<void(const std::string& why)> on_fenced;
  // Runs the rank processes (worker/rank_launcher.h). Unset: a ProcessRankLauncher whose ledger is
  // <work_dir>/ranks.ledger.
  NewRankLauncher new_launcher;
  // Turns --data-address (else --address) into the numeric address rank traffic uses, again at each
  // re-registration (agent_address.cc). Unset: net::ResolveNodeAddress.
  std::function<Result<std::string>(const std::string& given)> resolve_address;
};

class WorkerAgent {
 public:
  explicit WorkerAgent(WorkerConfig config) : WorkerAgent(std::move(config), AgentDeps{}) {}
  WorkerAgent(WorkerConfig config, AgentDeps deps);
  ~WorkerAgent();

  // Takes the work dir's lock (FailedPrecondition when another worker holds it), kills ranks a
  // previous incarnation left behind and starts the threads.
  Status Start();
  // Stops every rank (SIGTERM, then SIGKILL after its grace period), reports their exits to the
  // controller if it can within `deadline`, and stops the threads.
  void Shutdown(std::chrono::milliseconds deadline) EXCLUDES(mu_);

  // Thread-safe (takes the agent's lock briefly), between Start() and Shutdown().
  WorkerStats Stats() EXCLUDES(mu_);

 private:
  using Key = RankId;
  using AttemptSpecs = google::protobuf::RepeatedPtrField<v1::AttemptSpec>;
  struct LocalRank {
    v1::RankAssignment assignment;
    v1::RankStatus status;
    ProcessSupervisor::Id id = 0;
    bool end_reported = false;  // see KnownRank
    bool killed = false;        // killed without its grace (stop_now, or the lease ran out)
  };

  void HeartbeatLoop() EXCLUDES(mu_);
  // Each returns whether the controller answered; RegisterOnce may set retry_wait_ or fenced_.
  bool RegisterOnce() EXCLUDES(mu_);
  // Before a re-registration (agent_address.cc): resolves the node's address again, and when it
  // changed (a container reconnected to its network, a pod's new IP) takes the new one for the
  // ranks started from now on and moves the snapshot server to it. Heartbeat thread.
  void RefreshNodeAddress() EXCLUDES(mu_);
  // What a rank started now is told about this node (its address as of now, PATH...), but the
  // snapshot directory.
  NodeFacts CurrentNodeFacts() EXCLUDES(mu_);
  bool HeartbeatOnce() EXCLUDES(mu_);
  void OnFenced(const std::string& why) EXCLUDES(mu_);  // heartbeat thread
  // io thread: `desired` and `specs` of one reply.
  // `stop_now`: ranks to kill without their grace (HeartbeatResponse.stop_now).
  void Reconcile(const google::protobuf::RepeatedPtrField<v1::RankAssignment>& desired, const AttemptSpecs& specs,
                 const google::protobuf::RepeatedPtrField<v1::RankKey>& stop_now = {}) EXCLUDES(mu_);
  void StartRank(const v1::RankAssignment& a, const v1::JobSpec& spec) EXCLUDES(mu_);  // io thread
  // The lease (see the top of this file). The send time of a request whose reply was accepted, and
  // the lease that reply gave (0: none).
  void RenewLease(SteadyTime sent, int32_t lease_ms) REQUIRES(mu_);
  bool LeaseExpired(SteadyTime now) const REQUIRES(mu_);
  // A lease was given, and has not run out as far as EnforceLease has seen.
  bool LeaseRunning() const REQUIRES(mu_);
  // A heartbeat's deadline: a third of the lease the controller last gave, running or run out
  // (WorkerConfig::connect_timeout says why), else config_.rpc_timeout.
  std::chrono::milliseconds HeartbeatDeadline() const REQUIRES(mu_);
  // Heartbeat thread: how a heartbeat with that deadline is hedged (hedged_call.h). While the
  // controller answers, a heartbeat slower than 4x the last answer gets one second connection (a
  // busy controller is not sent many copies); while it does not, a new one every
  // config_.hedge_after, at most 4 pending at once.
  HedgeOptions HeartbeatHedge(std::chrono::milliseconds deadline) const;
  // Heartbeat thread: `req` sent hedged on stub_ (which it may replace) under `deadline`.
  HedgeOutcome SendHeartbeat(const v1::HeartbeatRequest& req, std::chrono::milliseconds deadline,
                             v1::HeartbeatResponse* resp);
  // io thread: when the lease has run out, kills every live rank, once per expiry, and says so.
  void EnforceLease() REQUIRES(mu_);
  void ScheduleLeaseCheck();  // io thread: EnforceLease every config_.lease_check_interval
  void OnExit(ProcessSupervisor::Id id, ProcessExit exit) EXCLUDES(mu_);
  void OnEventLine(ProcessSupervisor::Id id, const std::string& line) EXCLUDES(mu_);
  void WakeHeartbeat() EXCLUDES(mu_);
  // `ended`: the keys of the ranks listed in their final state.
  std::vector<v1::RankStatus> SnapshotRanks(std::vector<Key>* ended) REQUIRES(mu_);
  // A report listing `ended` was answered.
  void MarkEndsReported(const std::vector<Key>& ended) REQUIRES(mu_);
  std::string LogPath(const v1::RankKey& key) const;

  // Memory snapshots (agent_snapshots.cc). Start/Stop: before the threads start, after they end.
  Status StartSnapshots();
  void StopSnapshots();
  // io thread: a rank's memory_snapshot event (already relayed).
  // The memory_snapshot event `line` carries, when snapshots are on; else std::nullopt (the line is relayed).
  std::optional<rank::MemorySnapshotEvent> MemorySnapshotIn(const std::string& line) const;
  void OnMemorySnapshot(const v1::RankKey& key, const rank::MemorySnapshotEvent& event);
  // Adds a memory_snapshot_refused line to `key`'s events, as if the rank had written it.
  void AddRefusal(const v1::RankKey& key, const rank::MemorySnapshotRefusedEvent& refusal) EXCLUDES(mu_);
  // The attempts of the ranks this node knows, which it keeps whatever the controller says (one
  // that predates keep_snapshots says nothing).
  std::vector<AttemptId> LocalAttempts() const REQUIRES(mu_);
  // Heartbeat thread: what a request reports, and what a reply orders.
  void AddSnapshotReport(v1::HeartbeatRequest* req);
  void ApplySnapshotOrders(const v1::HeartbeatResponse& resp, std::vector<AttemptId> keep);

  // Set at construction, read-only after: no lock needed.
  WorkerConfig config_;
  ControllerEndpoint endpoint_;  // config_.endpoint with its address
  AgentDeps deps_;               // new_stub, clock and new_launcher set
  std::string incarnation_;
  // Set by Start() before the threads start, reset by Shutdown() after they are joined.
  std::optional<WorkDirLock> work_dir_lock_;
  // Heartbeat thread only (and Shutdown's last report, once that thread is joined).
  std::unique_ptr<v1::AgentService::StubInterface> stub_;

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::unique_ptr<RankLauncher> launcher_;  // used on the io thread only
  std::thread io_thread_;
  boost::asio::steady_timer lease_timer_{io_};  // io thread only
  std::thread heartbeat_thread_;
  std::unique_ptr<LogShipper> shipper_;  // from Start() to Shutdown(); the io thread uses it
  // io thread only: the spec of each attempt this node has a rank of, from the AttemptSpecs of
  // replies (the controller sends each one once; see PlanReconcile for when it is forgotten).
  std::map<AttemptId, v1::JobSpec> specs_;
  // io thread only: each such attempt's AttemptSpec.snapshot_peers, and the own shards whose last
  // take-over was refused (a refusal is reported once per series).
  std::map<AttemptId, std::vector<v1::SnapshotPeer>> snapshot_peers_;
  std::set<RankId> refusing_;
  // Memory snapshots: made by Start() before the threads start (when on), stopped by Shutdown(),
  // destroyed with the agent; each is thread-safe.
  std::unique_ptr<SnapshotStore> snapshots_;
  std::unique_ptr<SnapshotServer> snapshot_server_;  // replaced on the heartbeat thread (RefreshNodeAddress)
  std::unique_ptr<SnapshotReplicator> replicator_;
  std::unique_ptr<SnapshotStager> stager_;
  std::atomic<uint64_t> snapshot_refusals_{0};

  Mutex mu_;
  CondVar wake_cv_;  // notified when wake_ or stop_ is set
  bool wake_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  bool registered_ GUARDED_BY(mu_) = false;
  bool draining_ GUARDED_BY(mu_) = false;  // shutting down: run nothing new
  bool fenced_ GUARDED_BY(mu_) = false;    // another worker holds the node name: register and run nothing, ever
  // Set by a RegisterResponse.retry_after_ms: the next Register waits this instead of the interval.
  std::optional<std::chrono::milliseconds> retry_wait_ GUARDED_BY(mu_);
  // The lease: its length (from the newest reply that gave one; unset: none) and the send time of
  // the newest request whose reply was accepted (unset: none yet, so nothing expires).
  std::optional<std::chrono::milliseconds> lease_ GUARDED_BY(mu_);
  std::optional<SteadyTime> lease_from_ GUARDED_BY(mu_);
  bool lease_expired_ GUARDED_BY(mu_) = false;  // EnforceLease acted; cleared by a renewal in time
  uint64_t lease_expirations_ GUARDED_BY(mu_) = 0;
  std::chrono::milliseconds interval_ GUARDED_BY(mu_);
  // Where rank traffic goes (config_.node_address and node_interface at start; RefreshNodeAddress).
  std::string node_address_ GUARDED_BY(mu_);
  std::string node_interface_ GUARDED_BY(mu_);
  std::map<Key, LocalRank> ranks_ GUARDED_BY(mu_);
  std::map<ProcessSupervisor::Id, Key> by_id_ GUARDED_BY(mu_);
  ProcessSupervisor::Id next_id_ GUARDED_BY(mu_) = 1;
  std::deque<v1::RankEvent> pending_events_ GUARDED_BY(mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 1;
  // RegisterRequest/HeartbeatRequest.report_seq: taken with the rank table they report, so a later
  // number always carries a later view.
  uint64_t report_seq_ GUARDED_BY(mu_) = 0;
  std::atomic<bool> controller_reachable_{true};
  // Under mu_, except the RPC counts, which the heartbeat thread bumps without it (atomics).
  std::map<std::string, uint64_t> rank_exits_ GUARDED_BY(mu_);
  uint64_t rank_starts_ GUARDED_BY(mu_) = 0;
  uint64_t rank_restarts_ GUARDED_BY(mu_) = 0;
  uint64_t rank_start_failures_ GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> registrations_{0};
  std::atomic<uint64_t> heartbeats_{0};
  std::atomic<uint64_t> heartbeat_failures_{0};
  int heartbeat_retries_ = 0;  // failed heartbeats since the controller last answered (heartbeat thread only)
  std::chrono::duration<double> last_answer_{0};  // how long the last answered heartbeat took (heartbeat thread)
};

}  // namespace eft::worker
