// SnapshotTracker: the memory snapshots the workers hold, and recovery from them (docs/checkpoints.md,
// "Memory snapshots").
//
// Every heartbeat says which steps of which attempts a node holds whole, by rank (its own ranks' and
// the replicas other nodes sent it); that report replaces the node's previous one, and a node that is
// lost or restarts holds nothing (its memory went with it). Nothing of this is stored: after a
// controller restart the workers report it again.
//
// When a job whose attempt ended (a node lost, a rank failed; or a planned stop whose stop
// checkpoint never came) is about to restart, the tracker picks the newest step of that attempt whose every rank is held by a live node and that is
// newer than the job's newest disk checkpoint (ChooseMemoryStep), asks the holders to stage those
// shards into <checkpoint.dir>/step-S.snapshot (StageOrder, in their heartbeat replies), and holds
// the restart until every one reported back (StageResult). Then the next attempt resumes from that
// directory (JobEntry::memory_resume), which its rank 0 adopts as an ordinary checkpoint. When no step
// survived whole, when staging fails or a holder is lost, or after stage_timeout, the newest disk
// checkpoint is used, and the attempt's start says which and why (JobEntry::memory_note).
//
// A lost node's last report is remembered (not counted as held): when the live nodes hold no step
// whole but would with the reports of nodes lost meanwhile, the restart waits up to the heartbeat
// timeout for those nodes to come back (a controller cut off from every worker, a partition
// healing: their workers kept their memory) before it falls back to disk; counted from when a node is
// ready again if every node was lost meanwhile. A worker that restarted
// reports nothing held, and a node that never returns costs that wait once.
//
// It also tells each node whose replicas to send where (PeersFor: a ring over the attempt's nodes) and
// which attempts' snapshots to keep (KeepFor).
//
// Not thread-safe: the Controller owns it under its lock, with the tables it reads.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "controller/config.h"
#include "controller/job_table.h"
#include "controller/node_table.h"
#include "eft/v1/agent.pb.h"

namespace eft::controller {

// The newest step of (job, attempt) at world size `world` that the given nodes hold whole, newer than
// `newer_than`, with a holder for every rank (the least loaded holder first, so staging is spread
// over the nodes). step -1 when there is none; `why_not` then says what is missing, in words.
struct MemoryStepChoice {
  int64_t step = -1;
  std::map<int, std::string> holder;  // rank -> node
  int64_t bytes = 0;
  std::string why_not;
};
MemoryStepChoice ChooseMemoryStep(const std::map<std::string, std::vector<v1::HeldSnapshot>>& held_by_node,
                                  const std::string& job_id, int attempt, int world, int64_t newer_than);

// The nodes that keep replicas of `node`'s snapshots in an attempt on `nodes` (in rank order): the
// next `replicas` nodes around the ring that `can_receive` admits, never `node` itself, so one
// node's loss never takes both copies of a shard.
std::vector<std::string> ReplicaPeers(const std::vector<std::string>& nodes, const std::string& node, int replicas,
                                      const std::function<bool(const std::string&)>& can_receive);

class SnapshotTracker {
 public:
  // The tables must outlive it.
  SnapshotTracker(const ControllerConfig& config, Clock* clock, JobTable* jobs, NodeTable* nodes);

  // `node`'s heartbeat: what it holds now, and the outcome of stage orders it carried out.
  void OnHeartbeat(const std::string& node, const google::protobuf::RepeatedPtrField<v1::HeldSnapshot>& held,
                   const google::protobuf::RepeatedPtrField<v1::StageResult>& staged);
  // `node` was lost or (re)registered: what it held no longer counts until it reports again.
  void Forget(const std::string& node);

  // For a RECOVERING job about to be placed: whether its resume source is decided. False while
  // shards are being staged for it; once true, job.memory_resume names the staged directory (or is
  // empty, and job.memory_note may say why the disk checkpoint is used).
  bool ResumeDecided(JobEntry& job);

  // For `node`'s heartbeat reply.
  void OrdersFor(const std::string& node, google::protobuf::RepeatedPtrField<v1::StageOrder>* out) const;
  // The attempts whose snapshots the nodes keep, each with the step they keep besides their newest.
  void KeepFor(const std::string& node, google::protobuf::RepeatedPtrField<v1::AttemptRef>* out) const;
  // For `node`'s AttemptSpec of attempt `a`: the peers it sends its ranks' snapshots to.
  void PeersFor(const JobEntry& job, const AttemptRecord& a, const std::string& node,
                google::protobuf::RepeatedPtrField<v1::SnapshotPeer>* out) const;

  // The newest step of `job`'s current attempt that is held whole, by any nodes (-1: none); and the
  // newest step any rank of it reported held (-1: none). Their difference is the replication lag.
  int64_t NewestWholeStep(const JobEntry& job) const;
  int64_t NewestHeldStep(const JobEntry& job) const;
  // The newest step of `job`'s current attempt whose every rank is held on as many nodes as the job
  // asks (itself and checkpoint.memory_replicas others, as far as the attempt has nodes); -1: none.
  int64_t NewestReplicatedStep(const JobEntry& job) const;
  // Bytes the nodes hold of `job`'s current attempt, all copies.
  int64_t HeldBytes(const JobEntry& job) const;

 private:
  // A staging under way for a job: which node stages which ranks of which step.
  struct Staging {
    int attempt = 0;
    int64_t step = 0;
    int world = 0;
    std::string dir;
    std::map<int, std::string> holder;  // rank -> node
    std::set<int> done;
    std::string error;  // the first failure reported
    SteadyTime deadline{};
    int64_t disk_step = 0;
    int64_t bytes = 0;
  };
  // Live nodes' holdings (READY and not lost).
  std::map<std::string, std::vector<v1::HeldSnapshot>> LiveHoldings() const;
  // Whether `job`'s restart should wait for nodes lost meanwhile whose last reports would make a
  // step newer than the disk's whole; sets *note to what it waits for.
  bool AwaitReturn(const JobEntry& job, int64_t disk_step, std::string* note);
  // "ranks 0-1 from node1, 2-3 from node3" for the attempt's start message.
  static std::string DescribeHolders(const Staging& s);

  const ControllerConfig& config_;
  Clock* const clock_;
  JobTable* const jobs_;
  NodeTable* const nodes_;
  std::map<std::string, std::vector<v1::HeldSnapshot>> held_;  // node -> its last report
  std::map<std::string, std::vector<v1::HeldSnapshot>> gone_;  // node -> its last report before Forget
  // (job, attempt) -> the nodes whose report in held_ lists it: what a heartbeat's pin update and the
  // per-job figures read, instead of every node's report.
  std::map<std::pair<std::string, int>, std::set<std::string>> reporters_;
  void Index(const std::string& node, bool add);  // held_[node]'s attempts into or out of reporters_
  // `fn` on each snapshot held_ lists of `job`'s attempt `attempt`, with its node.
  void ForEachHeld(const std::string& job, int attempt,
                   const std::function<void(const std::string&, const v1::HeldSnapshot&)>& fn) const;
  // Restarts waiting for nodes to return (AwaitReturn), by job id.
  struct AwaitedReturn {
    int attempt = 0;
    SteadyTime until;
    bool logged = false;  // the wait was said once
  };
  std::map<std::string, AwaitedReturn> awaiting_;
  std::map<std::string, Staging> staging_;                       // job id -> staging under way
  // The step every node keeps of an attempt (AttemptRef.keep_step): the highest NewestReplicatedStep
  // seen, so it never moves back when a node's reports stop (its loss is when it matters).
  std::map<std::pair<std::string, int>, int64_t> pins_;
  // (job, attempt) pairs some node reported a snapshot of: a restart without a usable one says why.
  // Pairs of jobs that left memory, and of attempts older than the one before the current, are dropped.
  std::set<std::pair<std::string, int>> seen_;
};

}  // namespace eft::controller
