#include "worker/agent.h"

#include <unistd.h>

#include <algorithm>

#include <boost/asio/post.hpp>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <optional>
#include <random>
#include <set>

#include "common/grpc/unreachable.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/rank_protocol.h"
#include "common/stopwatch.h"
#include "worker/rank_env.h"

namespace eft::worker {

namespace {

std::string RandomIncarnation() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid()));
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(gen()));
  return buf;
}

std::string Describe(const v1::RankKey& k) {
  return "job " + k.job_id() + " attempt " + std::to_string(k.attempt()) + " rank " + std::to_string(k.rank());
}

}  // namespace

const char* RankExitClass(int exit_code, int signal) {
  return rank::ExitClassName(rank::ClassifyExit(exit_code, signal));
}

WorkerAgent::WorkerAgent(WorkerConfig config, AgentDeps deps)
    : config_(std::move(config)),
      endpoint_([this] {
        ControllerEndpoint e = config_.endpoint;
        e.address = config_.controller;
        return e;
      }()),
      deps_(std::move(deps)),
      incarnation_(RandomIncarnation()),
      work_(boost::asio::make_work_guard(io_)),
      interval_(config_.heartbeat_interval),
      node_address_(config_.node_address),
      node_interface_(config_.node_interface) {
  if (!deps_.new_stub) {
    deps_.new_stub = [endpoint = endpoint_, timeout = config_.connect_timeout] {
      return NewAgentStub(endpoint, timeout);
    };
  }
  if (deps_.clock == nullptr) deps_.clock = RealClock::Get();
  if (!deps_.resolve_address) deps_.resolve_address = net::ResolveNodeAddress;
  if (!deps_.new_launcher) {
    deps_.new_launcher = [ledger = config_.work_dir + "/ranks.ledger"](boost::asio::io_context& io,
                                                                       RankLauncher::Callbacks callbacks) {
      return ProcessRankLauncher::Create(io, std::move(callbacks), ledger);
    };
  }
  stub_ = deps_.new_stub();
}

WorkerAgent::~WorkerAgent() { Shutdown(std::chrono::milliseconds(0)); }

Status WorkerAgent::Start() {
  std::error_code ec;
  std::filesystem::create_directories(config_.work_dir, ec);
  if (ec) return Status::IoError("creating work dir " + config_.work_dir + ": " + ec.message());
  // Before the launcher: a second worker on this dir must not kill the first one's ranks as leftovers.
  auto lock = WorkDirLock::Acquire(config_.work_dir, config_.name, incarnation_);
  if (!lock.ok()) return lock.status();
  work_dir_lock_.emplace(std::move(lock).value());
  auto launcher = deps_.new_launcher(
      io_, RankLauncher::Callbacks{[this](RankLauncher::Id id, const std::string& line) { OnEventLine(id, line); },
                                   [this](RankLauncher::Id id, ProcessExit exit) { OnExit(id, exit); }});
  if (!launcher.ok()) return launcher.status();
  launcher_ = std::move(launcher).value();
  if (Status s = StartSnapshots(); !s.ok()) {
    launcher_.reset();
    work_dir_lock_.reset();
    return s;
  }
  boost::asio::post(io_, [this] { ScheduleLeaseCheck(); });
  io_thread_ = std::thread([this] { io_.run(); });
  shipper_ = std::make_unique<LogShipper>(endpoint_, config_.name, config_.log_push_interval,
                                          config_.rpc_timeout);
  shipper_->Start();
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  EFT_LOG(INFO) << "worker " << config_.name << " (" << config_.slots << " slots"
                << (config_.gpu_ids.empty() ? ", CPU" : ", GPUs")
                << (config_.node_address.empty() ? "" : ", rank traffic at " + config_.node_address)
                << (config_.node_interface.empty() ? "" : " (" + config_.node_interface + ")") << ", work dir "
                << config_.work_dir << ") reporting to " << config_.controller;
  return Status::Ok();
}

void WorkerAgent::Shutdown(std::chrono::milliseconds deadline) {
  if (!io_thread_.joinable()) return;
  {
    MutexLock lock(&mu_);
    draining_ = true;
  }
  // Stop every rank as if the controller no longer wanted it, then keep reporting until they are gone.
  boost::asio::post(io_, [this] { Reconcile({}, {}); });
  auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    {
      MutexLock lock(&mu_);
      bool live = false;
      for (const auto& [k, r] : ranks_) live |= r.status.state() == v1::RANK_STATE_RUNNING ||
                                                r.status.state() == v1::RANK_STATE_STOPPING;
      if (!live) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  wake_cv_.NotifyAll();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  // One last report, so the controller learns how the ranks ended without waiting for the timeout.
  bool registered;
  {
    MutexLock lock(&mu_);
    registered = registered_;
  }
  // A stopping worker's memory goes with it; the last report says so.
  StopSnapshots();
  if (deadline.count() > 0 && registered) HeartbeatOnce();
  work_.reset();
  io_.stop();
  io_thread_.join();
  // After the io thread, whose OnExit and StartRank use it: a rank exiting now must not find it gone.
  shipper_.reset();  // pushes what is left of the logs once
  launcher_.reset();  // SIGKILLs whatever still runs
  if (snapshots_) snapshots_->Close();  // what those ranks wrote since StopSnapshots
  work_dir_lock_.reset();
}

WorkerStats WorkerAgent::Stats() {
  WorkerStats s;
  {
    MutexLock lock(&mu_);
    for (const auto& [key, r] : ranks_) {
      ++s.ranks_by_state[r.status.state()];
      if (r.status.state() == v1::RANK_STATE_RUNNING || r.status.state() == v1::RANK_STATE_STOPPING) {
        s.slot_jobs[r.status.slot()] = r.status.key().job_id();
      }
    }
    s.rank_exits = rank_exits_;
    s.rank_starts = rank_starts_;
    s.rank_restarts = rank_restarts_;
    s.rank_start_failures = rank_start_failures_;
    s.pending_events = pending_events_.size();
    s.lease_expired = lease_expired_;
    s.lease_expirations = lease_expirations_;
  }
  s.registrations = registrations_.load();
  s.heartbeats = heartbeats_.load();
  s.heartbeat_failures = heartbeat_failures_.load();
  s.controller_reachable = controller_reachable_.load();
  if (snapshots_) {
    const SnapshotStoreStats held = snapshots_->Stats();
    s.snapshot_own_bytes = held.own_bytes;
    s.snapshot_replica_bytes = held.replica_bytes + held.receiving_bytes;
    s.snapshot_budget_bytes = held.budget_bytes;
    const ReplicatorStats pushes = replicator_->Stats();
    s.snapshot_pushes = pushes.pushes;
    s.snapshot_push_seconds = pushes.last_push_seconds;
    s.snapshot_pushed_bytes = pushes.pushed_bytes;
    s.snapshot_refusals = snapshot_refusals_.load();
  }
  if (shipper_) {
    LogShipper::Stats logs = shipper_->stats();
    s.log_bytes_shipped = logs.bytes_shipped;
    s.log_push_failures = logs.push_failures;
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Heartbeats

void WorkerAgent::WakeHeartbeat() {
  MutexLock lock(&mu_);
  wake_ = true;
  wake_cv_.NotifyAll();
}

std::vector<v1::RankStatus> WorkerAgent::SnapshotRanks(std::vector<Key>* ended) {
  std::vector<v1::RankStatus> out;
  for (const auto& [k, r] : ranks_) {
    out.push_back(r.status);
    if (r.status.state() == v1::RANK_STATE_EXITED || r.status.state() == v1::RANK_STATE_FAILED_TO_START) {
      ended->push_back(k);
    }
  }
  return out;
}

void WorkerAgent::MarkEndsReported(const std::vector<Key>& ended) {
  for (const Key& k : ended) {
    auto it = ranks_.find(k);
    if (it != ranks_.end()) it->second.end_reported = true;
  }
}

void WorkerAgent::HeartbeatLoop() {
  while (true) {
    bool fenced, registered;
    {
      MutexLock lock(&mu_);
      fenced = fenced_;
      registered = registered_;
    }
    bool ok = fenced || (registered ? HeartbeatOnce() : RegisterOnce());
    MutexLock lock(&mu_);
    if (stop_) break;
    if (fenced_) {  // nothing to say to the controller any more; wait for Shutdown
      wake_cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return stop_; });
      break;
    }
    if (retry_wait_) {  // the controller is finding out whether this node's previous worker lives
      auto wait = *retry_wait_;
      retry_wait_.reset();
      wake_cv_.WaitFor(&mu_, wait, [&]() REQUIRES(mu_) { return stop_; });
      if (stop_) break;
      continue;
    }
    if (ok && !registered_) continue;  // told to re-register: do it now
    // While the lease runs, a failed heartbeat is retried soon (on a new connection): the
    // controller declares this node lost at the same moment the lease runs out.
    const bool hurry = !ok && registered_ && LeaseRunning();
    const auto wait = hurry ? std::min(interval_, config_.reconnect_pause) : interval_;
    wake_cv_.WaitFor(&mu_, wait, [&]() REQUIRES(mu_) { return wake_ || stop_; });
    wake_ = false;
    if (stop_) break;
  }
}

void WorkerAgent::OnFenced(const std::string& why) {
  EFT_LOG(ERROR) << "the controller fenced this worker: " << why;
  {
    MutexLock lock(&mu_);
    fenced_ = true;
    registered_ = false;
    draining_ = true;
  }
  // The node's ranks are the other worker's now: stop ours even if the owner does not shut down.
  boost::asio::post(io_, [this] { Reconcile({}, {}); });
  if (deps_.on_fenced) deps_.on_fenced(why);
}

bool WorkerAgent::RegisterOnce() {
  v1::RegisterRequest req;
  req.set_node_name(config_.name);
  req.set_address(config_.address);
  if (registrations_ > 0) RefreshNodeAddress();
  {
    MutexLock lock(&mu_);
    req.set_data_address(node_address_);
  }
  req.set_network_stack(config_.network_stack);
  req.set_slots(config_.slots);
  req.set_version(config_.version);
  req.set_incarnation(incarnation_);
  if (snapshot_server_) req.set_snapshot_port(snapshot_server_->port());
  if (work_dir_lock_) req.set_previous_incarnation(work_dir_lock_->previous_incarnation());
  std::vector<Key> ended;
  std::chrono::milliseconds retry_every;
  {
    MutexLock lock(&mu_);
    for (auto& s : SnapshotRanks(&ended)) *req.add_ranks() = std::move(s);
    req.set_report_seq(++report_seq_);
    retry_every = interval_;
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + config_.rpc_timeout);
  AddJoinToken(endpoint_, &ctx);
  v1::RegisterResponse resp;
  const SteadyTime sent = deps_.clock->Now();
  grpc::Status s = stub_->Register(&ctx, req, &resp);
  if (!s.ok()) {
    if (controller_reachable_ && (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                                  s.error_code() == grpc::StatusCode::PERMISSION_DENIED)) {
      EFT_LOG(ERROR) << "the controller " << config_.controller << " refused this worker: " << s.error_message()
                     << " (check --join-token-file / EFT_JOIN_TOKEN; retrying every " << retry_every.count() << " ms)";
    } else if (controller_reachable_) {
      const std::string cause = DescribeUnreachable(s, config_.controller);
      if (!cause.empty()) {
        EFT_LOG(WARNING) << "cannot register: " << cause << "; is eft-controller running, and is "
                         << config_.controller << " its --listen address? (--controller HOST:PORT; retrying every "
                         << retry_every.count() << " ms)";
      } else {
        EFT_LOG(WARNING) << "cannot register with " << config_.controller << ": " << s.error_message()
                         << " (retrying every " << retry_every.count() << " ms)";
      }
    }
    controller_reachable_ = false;
    ++heartbeat_failures_;
    stub_ = deps_.new_stub();
    return false;
  }
  controller_reachable_ = true;
  if (!resp.fenced().empty()) {
    OnFenced(resp.fenced());
    return true;
  }
  if (resp.retry_after_ms() > 0) {
    EFT_LOG(WARNING) << "the controller holds node " << config_.name << " for another worker that heartbeated "
                     << "lately; asking again in " << resp.retry_after_ms() << " ms (if that worker is alive, "
                     << "this one is refused: every worker needs its own --name)";
    MutexLock lock(&mu_);
    retry_wait_ = std::chrono::milliseconds(resp.retry_after_ms());
    return true;
  }
  ++registrations_;
  EFT_LOG(INFO) << "registered with " << config_.controller << " as " << config_.name << " (incarnation "
                << incarnation_ << "), " << resp.desired_size() << " ranks desired";
  {
    MutexLock lock(&mu_);
    MarkEndsReported(ended);
    registered_ = true;
    RenewLease(sent, resp.lease_ms());
    if (resp.heartbeat_interval_ms() > 0) interval_ = std::chrono::milliseconds(resp.heartbeat_interval_ms());
  }
  boost::asio::post(io_, [this, desired = resp.desired(), specs = resp.attempt_specs(), stop = resp.stop_now()] {
    Reconcile(desired, specs, stop);
  });
  return true;
}

bool WorkerAgent::HeartbeatOnce() {
  const Stopwatch took;  // real time, for the log
  v1::HeartbeatRequest req;
  req.set_node_name(config_.name);
  req.set_incarnation(incarnation_);
  std::vector<Key> ended;
  std::chrono::milliseconds deadline;
  std::vector<AttemptId> keep;  // besides what the reply lists
  {
    MutexLock lock(&mu_);
    keep = LocalAttempts();
    req.set_shutting_down(draining_);
    for (auto& s : SnapshotRanks(&ended)) *req.add_ranks() = std::move(s);
    req.set_report_seq(++report_seq_);
    size_t n = 0;
    for (const auto& e : pending_events_) {
      if (++n > 1000) break;  // the rest rides the next heartbeat
      *req.add_events() = e;
    }
    deadline = HeartbeatDeadline();
  }
  const double prepared = took.Seconds();
  AddSnapshotReport(&req);
  const double reported = took.Seconds();
  v1::HeartbeatResponse resp;
  const SteadyTime sent = deps_.clock->Now();
  const HedgeOutcome outcome = SendHeartbeat(req, deadline, &resp);
  const double answered = took.Seconds() - reported;
  const grpc::Status& s = outcome.status;
  if (!s.ok()) {
    if (controller_reachable_) {
      EFT_LOG(WARNING) << "heartbeat to " << config_.controller << " failed: " << s.error_message()
                       << "; retrying (ranks keep running until the lease runs out)";
    } else if (heartbeat_retries_ < 5 || heartbeat_retries_ % 20 == 0) {  // a long partition: not every 0.7 s
      EFT_LOG(INFO) << "heartbeat retry " << heartbeat_retries_ + 1 << " failed after " << answered << " s ("
                    << outcome.attempts << (outcome.attempts == 1 ? " connection" : " connections")
                    << ", prepared in " << reported << " s): " << s.error_message();
    }
    if (!controller_reachable_) ++heartbeat_retries_;
    controller_reachable_ = false;
    ++heartbeat_failures_;
    return false;
  }
  if (!controller_reachable_) {
    EFT_LOG(INFO) << "controller " << config_.controller << " reachable again (after " << heartbeat_retries_
                  << " failed retries; this heartbeat prepared in " << reported << " s, of which the snapshot report "
                  << reported - prepared << " s, answered in " << answered << " s on connection "
                  << outcome.answered_by + 1 << " of " << outcome.attempts << ")";
  }
  last_answer_ = std::chrono::duration<double>(answered);
  heartbeat_retries_ = 0;
  controller_reachable_ = true;
  if (!resp.fenced().empty()) {
    OnFenced(resp.fenced());
    return true;
  }
  ++heartbeats_;
  if (!resp.reregister()) ApplySnapshotOrders(resp, std::move(keep));
  MutexLock lock(&mu_);
  while (!pending_events_.empty() && pending_events_.front().seq() <= resp.acked_event_seq()) {
    pending_events_.pop_front();
  }
  if (resp.heartbeat_interval_ms() > 0) interval_ = std::chrono::milliseconds(resp.heartbeat_interval_ms());
  if (resp.reregister()) {
    EFT_LOG(INFO) << "controller asked this worker to register again";
    registered_ = false;
    return true;
  }
  // A controller that does not know this worker (above) took nothing from the request, and may
  // have declared this node LOST: only a heartbeat it took renews the lease.
  MarkEndsReported(ended);
  RenewLease(sent, resp.lease_ms());
  boost::asio::post(io_, [this, desired = resp.desired(), specs = resp.attempt_specs(), stop = resp.stop_now()] {
    Reconcile(desired, specs, stop);
  });
  return true;
}

// ---------------------------------------------------------------------------------------------
// Reconciliation (io thread)

void WorkerAgent::Reconcile(const google::protobuf::RepeatedPtrField<v1::RankAssignment>& desired,
                            const AttemptSpecs& specs, const google::protobuf::RepeatedPtrField<v1::RankKey>& stop_now) {
  if (!launcher_) return;
  for (const auto& s : specs) {
    specs_[{s.job_id(), s.attempt()}] = s.spec();
    snapshot_peers_[{s.job_id(), s.attempt()}].assign(s.snapshot_peers().begin(), s.snapshot_peers().end());
  }
  std::set<AttemptId> have_spec;
  for (const auto& [attempt, spec] : specs_) have_spec.insert(attempt);
  bool changed = false;
  ReconcilePlan plan;
  {
    MutexLock lock(&mu_);
    // A reply can arrive after the lease ran out (an old request answered late): what it desires is
    // stale, and the controller may have placed those ranks elsewhere by now.
    EnforceLease();
    const bool lease_expired = LeaseExpired(deps_.clock->Now());
    std::map<Key, KnownRank> known;
    for (const auto& [key, r] : ranks_) known[key] = {r.status.state(), r.end_reported};
    plan = PlanReconcile(desired, known, have_spec, draining_);
    if (lease_expired && !plan.start.empty()) {
      EFT_LOG(INFO) << "not starting " << plan.start.size() << (plan.start.size() == 1 ? " rank" : " ranks")
                    << " of a reply to a request sent before the lease ran out; the controller says again "
                       "what to run once it accepts a request";
      plan.start.clear();
    }
    for (const Key& key : plan.stop) {
      LocalRank& r = ranks_.at(key);
      auto grace = std::chrono::milliseconds(static_cast<long long>(r.assignment.stop_grace_seconds() * 1000));
      EFT_LOG(INFO) << "stopping " << Describe(r.status.key()) << " (pid " << r.status.pid() << ", grace "
                    << grace.count() << " ms): no longer desired";
      launcher_->Stop(r.id, grace);
      r.status.set_state(v1::RANK_STATE_STOPPING);
      changed = true;
    }
    for (const v1::RankKey& k : stop_now) {
      auto it = ranks_.find(RankIdOf(k));
      if (it == ranks_.end() || it->second.killed) continue;
      LocalRank& r = it->second;
      const v1::RankState state = r.status.state();
      if (state != v1::RANK_STATE_RUNNING && state != v1::RANK_STATE_STOPPING) continue;
      EFT_LOG(WARNING) << "killing " << Describe(k) << " (pid " << r.status.pid()
                       << ") now: its attempt ended unplanned, so it cannot save a checkpoint and may be "
                          "blocked in a collective with a peer that is gone";
      launcher_->Stop(r.id, std::chrono::milliseconds(0));
      r.status.set_state(v1::RANK_STATE_STOPPING);
      r.killed = true;
      changed = true;
    }
    for (const Key& key : plan.forget) {
      by_id_.erase(ranks_.at(key).id);
      ranks_.erase(key);
    }
  }
  for (const auto& [job, attempt, rank] : plan.awaiting_spec) {
    EFT_LOG(INFO) << "job " << job << " attempt " << attempt << " rank " << rank
                  << " waits for its attempt's spec (it comes with the next reply)";
  }
  for (const auto& attempt : plan.forget_specs) {
    specs_.erase(attempt);
    snapshot_peers_.erase(attempt);
    for (auto it = refusing_.begin(); it != refusing_.end();) {
      it = AttemptIdOf(*it) == attempt ? refusing_.erase(it) : std::next(it);
    }
  }
  for (const auto& a : plan.start) {
    StartRank(a, specs_.at(AttemptIdOf(a.key())));
    changed = true;
  }
  if (changed) WakeHeartbeat();
}

std::string WorkerAgent::LogPath(const v1::RankKey& k) const {
  return config_.work_dir + "/logs/" + k.job_id() + "/attempt-" + std::to_string(k.attempt()) + "/rank-" +
         std::to_string(k.rank()) + ".log";
}

void WorkerAgent::StartRank(const v1::RankAssignment& a, const v1::JobSpec& job_spec) {
  LaunchSpec spec;
  spec.argv.assign(a.command().begin(), a.command().end());
  spec.log_path = LogPath(a.key());
  NodeFacts node = CurrentNodeFacts();
  if (snapshots_) {
    auto dir = snapshots_->IncomingDir(AttemptIdOf(a.key()));
    if (dir.ok()) {
      node.snapshot_dir = *dir;
    } else {
      EFT_LOG(WARNING) << Describe(a.key()) << " takes no memory snapshots: " << dir.status().message();
    }
  }
  spec.env = BuildRankEnv(a, job_spec, node);

  LocalRank r;
  r.assignment = a;
  *r.status.mutable_key() = a.key();
  r.status.set_slot(a.slot());
  r.status.set_start_time_ms(deps_.clock->WallMillis());
  Key key = RankIdOf(a.key());
  ProcessSupervisor::Id id;
  {
    MutexLock lock(&mu_);
    id = next_id_++;
    r.id = id;
  }
  auto pid = launcher_->Launch(id, spec);
  if (!pid.ok()) {
    EFT_LOG(ERROR) << "cannot start " << Describe(a.key()) << ": " << pid.status();
    r.status.set_state(v1::RANK_STATE_FAILED_TO_START);
    r.status.set_message(pid.status().message());
    r.status.set_end_time_ms(deps_.clock->WallMillis());
  } else {
    r.status.set_state(v1::RANK_STATE_RUNNING);
    r.status.set_pid(*pid);
    EFT_LOG(INFO) << "started " << Describe(a.key()) << " (pid " << *pid << ", world size " << a.world_size()
                  << ", slot " << a.slot() << ")";
    shipper_->Track(a.key(), spec.log_path);
  }
  MutexLock lock(&mu_);
  if (r.status.state() == v1::RANK_STATE_FAILED_TO_START) {
    ++rank_start_failures_;
  } else {
    ++rank_starts_;
    if (a.key().attempt() > 1) ++rank_restarts_;
  }
  by_id_[id] = key;
  ranks_[key] = std::move(r);
}

void WorkerAgent::OnExit(ProcessSupervisor::Id id, ProcessExit exit) {
  v1::RankKey key;
  {
    MutexLock lock(&mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return;
    LocalRank& r = ranks_.at(it->second);
    r.status.set_state(v1::RANK_STATE_EXITED);
    r.status.set_exit_code(exit.exit_code);
    r.status.set_signal(exit.signal);
    r.status.set_end_time_ms(deps_.clock->WallMillis());
    key = r.status.key();
    ++rank_exits_[RankExitClass(exit.exit_code, exit.signal)];
  }
  if (exit.signal) {
    EFT_LOG(INFO) << Describe(key) << " killed by signal " << exit.signal;
  } else {
    EFT_LOG(INFO) << Describe(key) << " exited with code " << exit.exit_code;
  }
  shipper_->Untrack(key);
  WakeHeartbeat();
}

void WorkerAgent::OnEventLine(ProcessSupervisor::Id id, const std::string& line) {
  // A memory_snapshot line is this worker's to act on, not the controller's (agent_snapshots.cc).
  const std::optional<rank::MemorySnapshotEvent> snapshot = MemorySnapshotIn(line);
  v1::RankKey key;
  {
    MutexLock lock(&mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end() || line.empty()) return;
    key = ranks_.at(it->second).status.key();
    if (!snapshot) {
      v1::RankEvent e;
      *e.mutable_key() = key;
      e.set_seq(next_seq_++);
      e.set_time_ms(deps_.clock->WallMillis());
      e.set_json(line);
      pending_events_.push_back(std::move(e));
    }
  }
  if (snapshot) OnMemorySnapshot(key, *snapshot);
}

}  // namespace eft::worker
