#include "controller/snapshot_tracker.h"

#include <algorithm>
#include <sstream>

#include "common/logging.h"
#include "common/memory_snapshot.h"
#include "spec/job_spec.h"

namespace eft::controller {
namespace {

// "0-1,3": ranks as ranges.
std::string RankRanges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

int64_t NewestDiskStep(const JobEntry& j) {
  int64_t step = 0;
  for (const auto& c : j.checkpoints) step = std::max(step, c.step);
  return step;
}

bool SnapshotsOn(const v1::JobSpec& spec) { return spec.checkpoint().memory_every_steps() != "0"; }

// checkpoint.memory_replicas; a spec stored before the field existed has it unset: spec.proto's default.
int MemoryReplicas(const v1::JobSpec& spec) {
  return spec.checkpoint().has_memory_replicas() ? spec.checkpoint().memory_replicas() : 1;
}

}  // namespace

MemoryStepChoice ChooseMemoryStep(const std::map<std::string, std::vector<v1::HeldSnapshot>>& held_by_node,
                                  const std::string& job_id, int attempt, int world, int64_t newer_than) {
  // step -> rank -> holders, and bytes per rank (as reported: a held entry's bytes over its ranks).
  std::map<int64_t, std::map<int, std::vector<std::string>>, std::greater<>> by_step;
  std::map<int64_t, int64_t> bytes_per_rank;
  for (const auto& [node, held] : held_by_node) {
    for (const v1::HeldSnapshot& h : held) {
      if (h.job_id() != job_id || h.attempt() != attempt || h.world_size() != world) continue;
      for (int r : h.ranks()) {
        if (r >= 0 && r < world) by_step[h.step()][r].push_back(node);
      }
      if (h.ranks_size() > 0) bytes_per_rank[h.step()] = std::max(bytes_per_rank[h.step()], h.bytes() / h.ranks_size());
    }
  }
  MemoryStepChoice out;
  if (by_step.empty()) {
    out.why_not = "no live node holds a memory snapshot of attempt " + std::to_string(attempt);
    return out;
  }
  for (const auto& [step, ranks] : by_step) {
    if (static_cast<int>(ranks.size()) < world) continue;
    if (step <= newer_than) {
      out.why_not = "the newest memory snapshot held whole (step " + std::to_string(step) +
                    ") is not newer than the newest disk checkpoint (step " + std::to_string(newer_than) + ")";
      return out;
    }
    // The ranks with the fewest holders first: their choice is forced, the others fill in around them.
    std::vector<std::pair<int, const std::vector<std::string>*>> order;
    for (const auto& [rank, holders] : ranks) order.emplace_back(rank, &holders);
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.second->size() < b.second->size(); });
    std::map<std::string, int> load;
    for (const auto& [rank, holders_ptr] : order) {
      const std::vector<std::string>& holders = *holders_ptr;
      std::string best = holders.front();
      for (const auto& h : holders) {
        if (load[h] < load[best] || (load[h] == load[best] && h < best)) best = h;
      }
      ++load[best];
      out.holder[rank] = best;
    }
    out.step = step;
    out.bytes = bytes_per_rank[step] * world;
    return out;
  }
  // Nothing whole: say what the newest step lacks.
  const auto& [step, ranks] = *by_step.begin();
  std::vector<int> missing;
  for (int r = 0; r < world; ++r) {
    if (!ranks.count(r)) missing.push_back(r);
  }
  out.why_not = "no step of attempt " + std::to_string(attempt) + " is held whole by the live nodes (the newest, step " +
                std::to_string(step) + ", lacks rank" + (missing.size() == 1 ? " " : "s ") + RankRanges(missing) + ")";
  return out;
}

std::vector<std::string> ReplicaPeers(const std::vector<std::string>& nodes, const std::string& node, int replicas,
                                      const std::function<bool(const std::string&)>& can_receive) {
  std::vector<std::string> out;
  const auto at = std::find(nodes.begin(), nodes.end(), node);
  if (at == nodes.end() || replicas <= 0) return out;
  const size_t i = static_cast<size_t>(at - nodes.begin());
  for (size_t k = 1; k < nodes.size() && static_cast<int>(out.size()) < replicas; ++k) {
    const std::string& peer = nodes[(i + k) % nodes.size()];
    if (peer != node && can_receive(peer)) out.push_back(peer);
  }
  return out;
}

SnapshotTracker::SnapshotTracker(const ControllerConfig& config, Clock* clock, JobTable* jobs, NodeTable* nodes)
    : config_(config), clock_(clock), jobs_(jobs), nodes_(nodes) {}

void SnapshotTracker::OnHeartbeat(const std::string& node,
                                  const google::protobuf::RepeatedPtrField<v1::HeldSnapshot>& held,
                                  const google::protobuf::RepeatedPtrField<v1::StageResult>& staged) {
  Index(node, false);
  held_[node].assign(held.begin(), held.end());
  Index(node, true);
  gone_.erase(node);
  for (const v1::HeldSnapshot& h : held) seen_.insert({h.job_id(), h.attempt()});
  auto stale = [&](const std::pair<std::string, int>& key) {
    const JobEntry* j = jobs_->Find(key.first);
    return j == nullptr || j->current() == nullptr || key.second < j->current()->number - 1;
  };
  for (auto it = seen_.begin(); it != seen_.end();) it = stale(*it) ? seen_.erase(it) : std::next(it);
  for (auto it = pins_.begin(); it != pins_.end();) it = stale(it->first) ? pins_.erase(it) : std::next(it);
  // Waits of jobs that left memory or were decided by another path (a cancel while waiting).
  for (auto it = awaiting_.begin(); it != awaiting_.end();) {
    const JobEntry* j = jobs_->Find(it->first);
    const bool over = j == nullptr || j->rec.state != v1::JOB_STATE_RECOVERING;
    it = over ? awaiting_.erase(it) : std::next(it);
  }
  // The pin of every attempt this node reported on advances as far as its replicas allow.
  std::set<std::string> jobs;
  for (const v1::HeldSnapshot& h : held) jobs.insert(h.job_id());
  for (const std::string& id : jobs) {
    const JobEntry* j = jobs_->Find(id);
    if (j == nullptr || j->current() == nullptr) continue;
    const int64_t step = NewestReplicatedStep(*j);
    int64_t& pin = pins_[{id, j->current()->number}];
    pin = std::max(pin, step);
  }
  for (const v1::StageResult& result : staged) {
    auto it = staging_.find(result.job_id());
    if (it == staging_.end()) continue;
    Staging& s = it->second;
    if (s.attempt != result.attempt() || s.step != result.step()) continue;  // an order since replaced
    if (!result.error().empty()) {
      if (s.error.empty()) s.error = node + ": " + result.error();
      continue;
    }
    for (int r : result.ranks()) {
      auto h = s.holder.find(r);
      if (h != s.holder.end() && h->second == node) s.done.insert(r);
    }
  }
}

void SnapshotTracker::Forget(const std::string& node) {
  auto it = held_.find(node);
  if (it == held_.end()) return;  // forgotten already: its last report stays in gone_
  Index(node, false);
  gone_[node] = std::move(it->second);
  held_.erase(it);
}

bool SnapshotTracker::AwaitReturn(const JobEntry& j, int64_t disk_step, std::string* note) {
  const AttemptRecord* a = j.current();
  auto holdings = LiveHoldings();
  std::vector<std::string> returning;
  for (const auto& [node, held] : gone_) {
    const NodeEntry* n = nodes_->Find(node);
    if (n == nullptr || holdings.count(node)) continue;  // a node that reported since says what it holds now
    bool of_attempt = false;
    for (const auto& h : held) of_attempt |= h.job_id() == j.rec.id && h.attempt() == a->number;
    if (!of_attempt) continue;
    holdings[node] = held;
    returning.push_back(node);
  }
  if (returning.empty()) return false;
  // Worth waiting for when their reports made some step whole, even one the disk has too: a node
  // cut off from the controller, not dead, trained on until its lease ran out, so its memory is newer
  // than what it last said.
  const MemoryStepChoice with_gone = ChooseMemoryStep(holdings, j.rec.id, a->number, a->world_size, -1);
  if (with_gone.step < 0) return false;
  // The wait counts from the last moment the job could start nowhere: while every node is away (a
  // controller cut off from all of them) it could not start anyway. The first node found lost starts
  // the wait while the others, cut off as well, still count as ready; once they too are found lost the
  // wait starts again when one is back, or it would run out before any could return.
  const bool any_ready = std::any_of(nodes_->all().begin(), nodes_->all().end(),
                                     [](const auto& n) { return n.second.ready; });
  auto it = awaiting_.find(j.rec.id);
  if (it != awaiting_.end() && (it->second.attempt != a->number || !any_ready)) {
    awaiting_.erase(it);
    it = awaiting_.end();
  }
  if (it == awaiting_.end() && any_ready) {
    it = awaiting_.emplace(j.rec.id, AwaitedReturn{a->number, clock_->Now() + config_.heartbeat_timeout}).first;
  }
  if (it != awaiting_.end() && clock_->Now() >= it->second.until) return false;
  std::string names;
  for (const auto& n : returning) names += (names.empty() ? "" : ", ") + n;
  const bool one = returning.size() == 1;
  *note = with_gone.step > disk_step
              ? "step " + std::to_string(with_gone.step) + " would be whole in memory with what " + names +
                    (one ? " holds (lost meanwhile)" : " hold (lost meanwhile)")
              : names + ", lost meanwhile, held snapshots of attempt " + std::to_string(a->number) +
                    " (whole up to step " + std::to_string(with_gone.step) +
                    " when last heard, no newer than the disk's; cut off from this controller, they may have trained on)";
  *note += "; waiting up to " + SecondsText(config_.heartbeat_timeout) + (one ? " for it" : " for them") +
           " to return before resuming from disk";
  return true;
}

std::map<std::string, std::vector<v1::HeldSnapshot>> SnapshotTracker::LiveHoldings() const {
  std::map<std::string, std::vector<v1::HeldSnapshot>> out;
  for (const auto& [name, held] : held_) {
    const NodeEntry* n = nodes_->Find(name);
    if (n != nullptr && n->ready) out[name] = held;
  }
  return out;
}

std::string SnapshotTracker::DescribeHolders(const Staging& s) {
  std::map<std::string, std::vector<int>> by_node;
  for (const auto& [rank, node] : s.holder) by_node[node].push_back(rank);
  std::string out;
  for (const auto& [node, ranks] : by_node) {
    out += (out.empty() ? "" : ", ") + std::string(ranks.size() == 1 ? "rank " : "ranks ") + RankRanges(ranks) +
           " from " + node + "'s memory";
  }
  return out;
}

bool SnapshotTracker::ResumeDecided(JobEntry& j) {
  const AttemptRecord* a = j.current();
  if (a == nullptr || j.rec.state != v1::JOB_STATE_RECOVERING) return true;
  if (j.memory_decided_after == a->number) return true;
  const std::string id = j.rec.id;
  auto decide = [&](std::optional<JobEntry::MemoryResume> resume, std::string note) {
    awaiting_.erase(j.rec.id);
    j.memory_resume = std::move(resume);
    j.memory_note = std::move(note);
    j.memory_decided_after = a->number;
    staging_.erase(id);
    return true;
  };
  // A planned stop (resize, preemption) saved a checkpoint at its last step, so nothing in memory is
  // newer, unless that save never came (a node killed while its ranks stopped): then a memory
  // snapshot newer than the disk's newest is what is left, as after any unplanned end.
  if (!SnapshotsOn(j.rec.spec)) return decide(std::nullopt, "");
  const int64_t disk_step = NewestDiskStep(j);
  auto it = staging_.find(id);
  if (it == staging_.end() || it->second.attempt != a->number) {
    const MemoryStepChoice choice = ChooseMemoryStep(LiveHoldings(), id, a->number, a->world_size, disk_step);
    // An attempt that resumed from a staged snapshot and ended before it saved or snapshotted anything
    // newer (stopped for a grow during its start-up, say) hands the same snapshot on: its rank 0
    // adopted it as step-S (the next one's adoption then finds the newest checkpoint, that one), or
    // never got to it (the next one adopts it).
    int64_t staged_step = 0;
    if (choice.step < 0 && snapshot::IsStagedDir(a->resume_from, &staged_step) && staged_step > disk_step) {
      return decide(JobEntry::MemoryResume{a->resume_from, staged_step,
                                           "the snapshot attempt " + std::to_string(a->number) + " resumed from"},
                    "");
    }
    if (choice.step < 0) {
      std::string awaited;
      if (AwaitReturn(j, disk_step, &awaited)) {
        auto waiting = awaiting_.find(id);  // absent while no node is ready: said once one is
        if (waiting != awaiting_.end() && !waiting->second.logged) {
          EFT_LOG(INFO) << "job " << id << ": " << awaited;
          waiting->second.logged = true;
        }
        return false;
      }
      // Said only of an attempt that took snapshots at all (some node reported one, lost since or not).
      return decide(std::nullopt, seen_.count({id, a->number}) ? choice.why_not : "");
    }
    const std::string& dir = j.rec.spec.checkpoint().dir();
    if (dir.empty()) return decide(std::nullopt, "the job has no checkpoint.dir to stage a memory snapshot into");
    Staging s;
    s.attempt = a->number;
    s.step = choice.step;
    s.world = a->world_size;
    s.dir = snapshot::StagedDir(dir, choice.step);
    s.holder = choice.holder;
    s.deadline = clock_->Now() + config_.snapshot_stage_timeout;
    s.disk_step = disk_step;
    s.bytes = choice.bytes;
    std::vector<std::string> holders;
    for (const auto& [rank, node] : s.holder) holders.push_back(node);
    nodes_->ExpectTransition(holders);  // their orders go out with their next (fast) heartbeat
    EFT_LOG(INFO) << "job " << id << ": staging the memory snapshot of step " << s.step << " of attempt " << s.attempt
                  << " into " << s.dir << " (" << DescribeHolders(s) << "; newest disk checkpoint step " << disk_step
                  << ")";
    staging_[id] = std::move(s);
    return false;
  }
  Staging& s = it->second;
  const std::string what = "the memory snapshot of step " + std::to_string(s.step);
  if (!s.error.empty()) return decide(std::nullopt, what + " could not be staged: " + s.error);
  for (const auto& [rank, node] : s.holder) {
    const NodeEntry* n = nodes_->Find(node);
    if (!s.done.count(rank) && (n == nullptr || !n->ready)) {
      return decide(std::nullopt, what + " could not be staged: " + node + ", which held rank " + std::to_string(rank) +
                                      ", was lost meanwhile");
    }
  }
  if (s.done.size() == s.holder.size()) {
    return decide(JobEntry::MemoryResume{s.dir, s.step, DescribeHolders(s)}, "");
  }
  if (clock_->Now() >= s.deadline) {
    return decide(std::nullopt, what + " was not staged within snapshot_stage_timeout_s (" +
                                    SecondsText(config_.snapshot_stage_timeout) + ")");
  }
  return false;
}

void SnapshotTracker::OrdersFor(const std::string& node, google::protobuf::RepeatedPtrField<v1::StageOrder>* out) const {
  for (const auto& [id, s] : staging_) {
    v1::StageOrder order;
    for (const auto& [rank, holder] : s.holder) {
      if (holder == node && !s.done.count(rank)) order.add_ranks(rank);
    }
    if (order.ranks_size() == 0) continue;
    order.set_job_id(id);
    order.set_attempt(s.attempt);
    order.set_step(s.step);
    order.set_world_size(s.world);
    order.set_dir(s.dir);
    *out->Add() = std::move(order);
  }
}

void SnapshotTracker::KeepFor(const std::string& /*node*/,
                              google::protobuf::RepeatedPtrField<v1::AttemptRef>* out) const {
  auto keep = [&](const std::string& id, int attempt) {
    v1::AttemptRef* ref = out->Add();
    ref->set_job_id(id);
    ref->set_attempt(attempt);
    if (auto pin = pins_.find({id, attempt}); pin != pins_.end() && pin->second > 0) ref->set_keep_step(pin->second);
  };
  std::set<std::string> ids = jobs_->index().Active();
  for (const auto& id : jobs_->index().Pending()) ids.insert(id);
  for (const auto& id : ids) {
    const JobEntry* j = jobs_->Find(id);
    if (j == nullptr || j->attempts.empty()) continue;
    keep(id, j->current()->number);
    // The attempt a new one resumed from, until the new one has a snapshot of its own held whole.
    if (j->attempts.size() >= 2 && j->active() && NewestWholeStep(*j) < 0) {
      keep(id, j->attempts[j->attempts.size() - 2].number);
    }
  }
}

void SnapshotTracker::PeersFor(const JobEntry& j, const AttemptRecord& a, const std::string& node,
                               google::protobuf::RepeatedPtrField<v1::SnapshotPeer>* out) const {
  if (!SnapshotsOn(j.rec.spec)) return;
  const int replicas = MemoryReplicas(j.rec.spec);
  auto can_receive = [&](const std::string& name) {
    const NodeEntry* n = nodes_->Find(name);
    return n != nullptr && n->snapshot_port > 0;
  };
  for (const std::string& peer : ReplicaPeers(a.nodes, node, replicas, can_receive)) {
    const NodeEntry* n = nodes_->Find(peer);
    const std::string host = DataAddressOf(n->rec);
    v1::SnapshotPeer* p = out->Add();
    p->set_node_name(peer);
    p->set_address((host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                   std::to_string(n->snapshot_port));
  }
}

int64_t SnapshotTracker::NewestWholeStep(const JobEntry& j) const {
  const AttemptRecord* a = j.current();
  if (a == nullptr) return -1;
  return ChooseMemoryStep(held_, j.rec.id, a->number, a->world_size, -1).step;
}

void SnapshotTracker::Index(const std::string& node, bool add) {
  auto it = held_.find(node);
  if (it == held_.end()) return;
  for (const v1::HeldSnapshot& h : it->second) {
    const std::pair<std::string, int> key{h.job_id(), h.attempt()};
    if (add) {
      reporters_[key].insert(node);
      continue;
    }
    auto r = reporters_.find(key);
    if (r == reporters_.end()) continue;
    r->second.erase(node);
    if (r->second.empty()) reporters_.erase(r);
  }
}

void SnapshotTracker::ForEachHeld(const std::string& job, int attempt,
                                  const std::function<void(const std::string&, const v1::HeldSnapshot&)>& fn) const {
  auto r = reporters_.find({job, attempt});
  if (r == reporters_.end()) return;
  for (const std::string& node : r->second) {
    for (const v1::HeldSnapshot& h : held_.at(node)) {
      if (h.job_id() == job && h.attempt() == attempt) fn(node, h);
    }
  }
}

int64_t SnapshotTracker::NewestHeldStep(const JobEntry& j) const {
  const AttemptRecord* a = j.current();
  if (a == nullptr) return -1;
  int64_t newest = -1;
  ForEachHeld(j.rec.id, a->number,
              [&](const std::string&, const v1::HeldSnapshot& h) { newest = std::max(newest, h.step()); });
  return newest;
}

int64_t SnapshotTracker::NewestReplicatedStep(const JobEntry& j) const {
  const AttemptRecord* a = j.current();
  if (a == nullptr) return -1;
  const int replicas = MemoryReplicas(j.rec.spec);
  const size_t copies = 1 + static_cast<size_t>(std::min<int>(replicas, static_cast<int>(a->nodes.size()) - 1));
  std::map<int64_t, std::map<int, std::set<std::string>>> by_step;  // step -> rank -> nodes
  ForEachHeld(j.rec.id, a->number, [&](const std::string& node, const v1::HeldSnapshot& h) {
    for (int r : h.ranks()) by_step[h.step()][r].insert(node);
  });
  for (auto it = by_step.rbegin(); it != by_step.rend(); ++it) {
    if (static_cast<int>(it->second.size()) < a->world_size) continue;
    const bool replicated = std::all_of(it->second.begin(), it->second.end(),
                                        [&](const auto& rank_nodes) { return rank_nodes.second.size() >= copies; });
    if (replicated) return it->first;
  }
  return -1;
}

int64_t SnapshotTracker::HeldBytes(const JobEntry& j) const {
  const AttemptRecord* a = j.current();
  if (a == nullptr) return 0;
  int64_t bytes = 0;
  ForEachHeld(j.rec.id, a->number, [&](const std::string&, const v1::HeldSnapshot& h) { bytes += h.bytes(); });
  return bytes;
}

}  // namespace eft::controller
