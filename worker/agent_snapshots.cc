// WorkerAgent's memory snapshots (agent.h; docs/checkpoints.md, "Memory snapshots"): the store, the
// SnapshotService other workers push replicas to, the replicator that pushes this node's own, the
// stager of StageOrders, and what heartbeats carry of them.
#include <sys/statfs.h>

#include <boost/asio/post.hpp>

#include "common/logging.h"
#include "worker/agent.h"

namespace eft::worker {
namespace {

constexpr long kTmpfsMagic = 0x01021994;  // TMPFS_MAGIC (linux/magic.h)

bool OnTmpfs(const std::string& dir) {
  struct statfs fs;
  return ::statfs(dir.c_str(), &fs) == 0 && static_cast<long>(fs.f_type) == kTmpfsMagic;
}

}  // namespace

Status WorkerAgent::StartSnapshots() {
  if (config_.snapshot_dir.empty()) return Status::Ok();
  SnapshotStoreOptions options;
  options.root = config_.snapshot_dir;
  options.budget_bytes = config_.snapshot_budget_bytes > 0 ? config_.snapshot_budget_bytes : DefaultSnapshotBudget();
  std::string cut;
  options.budget_bytes = FitSnapshotBudget(options.budget_bytes, config_.snapshot_dir, &cut);
  if (!cut.empty()) EFT_LOG(WARNING) << "memory snapshots: " << cut;
  options.clock = deps_.clock;
  auto store = SnapshotStore::Open(options);
  if (!store.ok()) return store.status().WithContext("--snapshot-dir");
  snapshots_ = std::move(store).value();
  SnapshotAuth auth{endpoint_.join_token, endpoint_.tls};
  // Peers reach this node where its ranks' traffic goes: the data address.
  const std::string host = !config_.node_address.empty() ? config_.node_address : config_.address;
  auto server = SnapshotServer::Start(snapshots_.get(), host, config_.snapshot_port, auth);
  if (!server.ok()) {
    snapshots_->Close();
    snapshots_.reset();
    return server.status();
  }
  snapshot_server_ = std::move(server).value();
  SnapshotReplicator::Options push;
  push.node_name = config_.name;
  push.auth = auth;
  push.on_refused = [this](const v1::RankKey& key, const rank::MemorySnapshotRefusedEvent& refusal) {
    AddRefusal(key, refusal);
  };
  replicator_ = std::make_unique<SnapshotReplicator>(snapshots_.get(), std::move(push));
  replicator_->Start();
  stager_ = std::make_unique<SnapshotStager>(snapshots_.get(), [this] { WakeHeartbeat(); });
  stager_->Start();
  EFT_LOG(INFO) << "memory snapshots in " << config_.snapshot_dir
                << (OnTmpfs(config_.snapshot_dir) ? " (tmpfs)" : " (not tmpfs: they take disk, not memory)")
                << ", budget " << MibText(options.budget_bytes)
                << (!cut.empty()                    ? " (the filesystem's size)"
                    : config_.snapshot_memory_mb > 0 ? " (--snapshot-memory-mb)"
                                                     : " (a quarter of MemTotal)")
                << ", replicas received on " << ListenAddress(host, snapshot_server_->port());
  return Status::Ok();
}

void WorkerAgent::StopSnapshots() {
  if (!snapshots_) return;
  snapshot_server_->Shutdown();
  replicator_->Stop();
  stager_->Stop();
  snapshots_->Close();
}

std::optional<rank::MemorySnapshotEvent> WorkerAgent::MemorySnapshotIn(const std::string& line) const {
  // The controller learns what is held from the heartbeats' HeldSnapshots: a snapshot every step
  // relayed as an event would ride every heartbeat (and pile up during a partition) for nothing.
  if (!snapshots_ || line.find("\"memory_snapshot\"") == std::string::npos) return std::nullopt;
  Result<rank::Event> event = rank::DecodeEvent(line);
  if (!event.ok()) return std::nullopt;
  if (const auto* e = std::get_if<rank::MemorySnapshotEvent>(&*event)) return *e;
  return std::nullopt;
}

void WorkerAgent::OnMemorySnapshot(const v1::RankKey& key, const rank::MemorySnapshotEvent& event) {
  const AttemptId attempt = AttemptIdOf(key);
  const Status s = snapshots_->TakeOver(attempt, key.rank(), event);
  const RankId shard = RankIdOf(key);
  if (!s.ok()) {
    ++snapshot_refusals_;
    if (refusing_.insert(shard).second) {  // once per series: a small budget would refuse every step
      EFT_LOG(WARNING) << "cannot hold the memory snapshot of step " << event.step << " of job " << key.job_id()
                       << " attempt " << key.attempt() << " rank " << key.rank() << ": " << s.message();
      AddRefusal(key, rank::MemorySnapshotRefusedEvent{event.step, key.rank(), config_.name, s.message()});
    }
    return;
  }
  if (refusing_.erase(shard) > 0) {
    EFT_LOG(INFO) << "holding memory snapshots of job " << key.job_id() << " attempt " << key.attempt() << " rank "
                  << key.rank() << " again (step " << event.step << ")";
  }
  auto peers = snapshot_peers_.find(attempt);
  if (peers != snapshot_peers_.end() && !peers->second.empty()) {
    replicator_->Enqueue(attempt, key.rank(), event.step, peers->second);
  }
}

void WorkerAgent::AddRefusal(const v1::RankKey& key, const rank::MemorySnapshotRefusedEvent& refusal) {
  MutexLock lock(&mu_);
  v1::RankEvent e;
  *e.mutable_key() = key;
  e.set_seq(next_seq_++);
  e.set_time_ms(deps_.clock->WallMillis());
  e.set_json(rank::EncodeEvent(refusal));
  pending_events_.push_back(std::move(e));
}

std::vector<AttemptId> WorkerAgent::LocalAttempts() const {
  std::vector<AttemptId> out;
  for (const auto& [key, r] : ranks_) {
    if (out.empty() || out.back() != AttemptIdOf(key)) out.push_back(AttemptIdOf(key));  // ranks_ is sorted
  }
  return out;
}

void WorkerAgent::AddSnapshotReport(v1::HeartbeatRequest* req) {
  if (!snapshots_) return;
  for (auto& held : snapshots_->Held()) *req->add_snapshots() = std::move(held);
  for (auto& result : stager_->Results()) *req->add_staged() = std::move(result);
}

void WorkerAgent::ApplySnapshotOrders(const v1::HeartbeatResponse& resp, std::vector<AttemptId> keep) {
  if (!snapshots_) return;
  stager_->Update(resp.stage());
  std::map<AttemptId, int64_t> keep_steps;
  for (const auto& a : resp.keep_snapshots()) {
    keep.emplace_back(a.job_id(), a.attempt());
    if (a.keep_step() > 0) keep_steps[{a.job_id(), a.attempt()}] = a.keep_step();
  }
  snapshots_->Keep(keep);
  snapshots_->SetKeepSteps(keep_steps);
  // Own files from the time it takes to declare a node lost and stop the others (a lease), twice
  // over: what a frozen worker's peers need of their own (snapshot_store.h, "Retention").
  if (resp.lease_ms() > 0) snapshots_->SetOwnHistory(2 * std::chrono::milliseconds(resp.lease_ms()));
}

}  // namespace eft::worker
