// NodeTable: the nodes, who holds each name, whether it is alive, and how often it heartbeats.
//
// Registration and fencing (docs/architecture.md, "Two workers, one name"): one live worker per
// node name. A worker registering under a name another incarnation holds takes it at once when it
// restarted in place (previous_incarnation) or the holder is LOST, after the holder missed a
// heartbeat otherwise (the reply says when to retry), and is fenced when the holder is alive. The
// incarnation a name was taken from is fenced too: it is told to stop, and never gets it back.
// Liveness: Silent() lists READY nodes past heartbeat_timeout; MarkLost writes LOST through.
// Pace (docs/architecture.md, "Fast heartbeats"): the interval each reply tells its worker.
// Every node change is written to the store before memory shows it.
//
// Not thread-safe: the Controller owns it under its lock. It calls on_capacity_changed whenever
// something placement depends on changed (a node came, went, was drained, reported other ranks).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "controller/config.h"
#include "controller/records.h"
#include "controller/store.h"
#include "eft/v1/agent.pb.h"

namespace eft::controller {

struct NodeEntry {
  NodeRecord rec;
  bool ready = false;
  std::string incarnation;       // empty until the worker (re-)registers with this controller
  std::string lost_incarnation;  // `incarnation` when the node was declared LOST: it may come back
  SteadyTime last_heartbeat{};
  int64_t last_heartbeat_ms = 0;
  // Until then the node heartbeats at transition_heartbeat_interval: a change is expected to use
  // it. {}: not expected.
  SteadyTime fast_until{};
  // The last Heartbeat (not Register): only a heartbeat carries the worker's unacknowledged rank
  // events, e.g. the stop checkpoint of a rank that exited while the controller was down.
  SteadyTime last_report{};
  std::vector<v1::RankStatus> reported;
  uint64_t acked_seq = 0;
  // The newest report_seq taken (Register, Heartbeat) and the incarnation that sent it: a report
  // older than that from the same incarnation is refused (StaleReport).
  uint64_t report_seq = 0;
  std::string report_seq_incarnation;
  bool shutting_down = false;
  // Its worker's SnapshotService port (RegisterRequest.snapshot_port; 0: none): memory only, every
  // registration says it again.
  int snapshot_port = 0;
  // A second worker asking for this name while `incarnation` may still be alive: it waits until
  // `incarnation` misses a heartbeat, and is fenced if it does not.
  std::string contender;
  SteadyTime contender_since{};
  // Incarnations that lost this name (newest last, a few), each with what it is told: they stop,
  // and never get the name back.
  std::deque<std::pair<std::string, std::string>> fenced;

  // Known to this controller's memory and re-registered since it started: what runs there is known.
  bool known() const { return ready && !incarnation.empty(); }
};

// A rank a worker reports as running or stopping: it holds its slot.
inline bool IsLive(const v1::RankStatus& r) {
  return r.state() == v1::RANK_STATE_RUNNING || r.state() == v1::RANK_STATE_STOPPING;
}

class NodeTable {
 public:
  // `store` and `clock` must outlive it.
  NodeTable(const ControllerConfig& config, Clock* clock, Store* store, std::function<void()> on_capacity_changed);

  // The nodes the store knows. A node that was READY gets a full heartbeat_timeout from now to
  // re-register before it is LOST.
  Status Load();

  // What Register made of a request: the node it now holds, or a refusal to send back (fenced, or
  // retry after a while).
  struct Registration {
    NodeEntry* node = nullptr;
    std::optional<v1::RegisterResponse> refusal;
  };
  // Checks the request's fields, settles who holds the name, stores the node READY with the ranks
  // it reports. A store failure leaves the table as it was.
  Result<Registration> Register(const v1::RegisterRequest& request);
  // The node a heartbeat comes from, its liveness and `shutting_down` recorded; nullptr when the
  // sender does not hold the node (unknown, LOST, another incarnation): `reply` then says fenced or
  // re-register.
  NodeEntry* Heartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* reply);
  // FailedPrecondition when `seq` (a Register's or Heartbeat's report_seq) is older than the newest
  // `node`'s worker `incarnation` sent that was taken: a delayed copy, to be dropped unread. Equal is
  // a copy of the report taken last (a hedged heartbeat's twin): taken again, as it changes nothing.
  Status StaleReport(const std::string& node, const std::string& incarnation, uint64_t seq) const;
  // Replaces what `node` runs with `ranks`, noting a capacity change when its busy slots differ.
  void Report(NodeEntry& node, const google::protobuf::RepeatedPtrField<v1::RankStatus>& ranks);

  // READY nodes silent for longer than heartbeat_timeout, with how long, in words.
  std::vector<std::pair<std::string, std::string>> Silent() const;
  // READY nodes that missed a heartbeat (silent for more than 1.5 heartbeat intervals) but are not
  // past heartbeat_timeout yet: they may be about to be declared lost.
  std::vector<std::string> Late() const;
  // Stores the node LOST with `reason` and forgets what it ran. A store failure is returned (the
  // next tick retries).
  Status MarkLost(NodeEntry& node, const std::string& reason);
  // Stores the drain flag.
  Result<NodeEntry*> SetDrained(const std::string& name, bool drained);

  NodeEntry* Find(const std::string& name);
  const NodeEntry* Find(const std::string& name) const;
  const std::map<std::string, NodeEntry>& all() const { return nodes_; }
  // Since the controller started, some READY node has not re-registered: what runs there is not
  // known yet.
  bool AnyUnknown() const;

  // The interval to tell `node`: transition_heartbeat_interval while a change is expected to use it
  // or it runs a live rank `desired` says nobody wants any more (stopping), else heartbeat_interval.
  std::chrono::milliseconds HeartbeatInterval(const NodeEntry& node,
                                              const std::function<bool(const v1::RankStatus&)>& desired) const;
  // A change will use these nodes soon (a restart's old nodes, a grow's new ones, nodes freed for
  // a waiting job, a new attempt's nodes): fast for at most transition_window.
  void ExpectTransition(const std::vector<std::string>& nodes);
  // The change that used these nodes is over (its attempt reported its first step).
  void TransitionDone(const std::vector<std::string>& nodes);

 private:
  static void TakeReportSeq(NodeEntry& node, const std::string& incarnation, uint64_t seq);
  // A refusal when `request` comes from a worker that may not take `node`'s name (yet).
  std::optional<v1::RegisterResponse> Contest(NodeEntry& node, const v1::RegisterRequest& request);

  const ControllerConfig& config_;
  Clock* const clock_;
  Store* const store_;
  const std::function<void()> on_capacity_changed_;
  std::map<std::string, NodeEntry> nodes_;  // by name
};

}  // namespace eft::controller
