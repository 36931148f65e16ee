#include "controller/node_table.h"

#include <algorithm>
#include <tuple>

#include "common/logging.h"

namespace eft::controller {

namespace {

// How many incarnations that lost a node name each node remembers, to tell them to stop.
constexpr size_t kFencedIncarnationsKept = 4;

const std::string* FencedReason(const std::deque<std::pair<std::string, std::string>>& fenced,
                                const std::string& incarnation) {
  for (const auto& [inc, why] : fenced) {
    if (inc == incarnation) return &why;
  }
  return nullptr;
}

void Fence(std::deque<std::pair<std::string, std::string>>* fenced, const std::string& incarnation,
           std::string why) {
  fenced->emplace_back(incarnation, std::move(why));
  while (fenced->size() > kFencedIncarnationsKept) fenced->pop_front();
}

std::string Who(const std::string& incarnation, const std::string& address) {
  return "incarnation " + incarnation + (address.empty() ? "" : ", address " + address);
}

// The slots a worker reports busy, and by what: what scheduling sees of a node's report.
template <typename Ranks>
std::vector<std::tuple<std::string, int, int, int>> LiveSlots(const Ranks& ranks) {
  std::vector<std::tuple<std::string, int, int, int>> out;
  for (const auto& r : ranks) {
    if (IsLive(r)) out.emplace_back(r.key().job_id(), r.key().attempt(), r.key().rank(), r.slot());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

NodeTable::NodeTable(const ControllerConfig& config, Clock* clock, Store* store,
                     std::function<void()> on_capacity_changed)
    : config_(config), clock_(clock), store_(store), on_capacity_changed_(std::move(on_capacity_changed)) {}

Status NodeTable::Load() {
  EFT_ASSIGN_OR_RETURN(auto nodes, store_->LoadNodes());
  const SteadyTime now = clock_->Now();
  for (auto& rec : nodes) {
    NodeEntry n;
    n.rec = std::move(rec);
    n.ready = !n.rec.lost;
    n.last_heartbeat = now;
    n.last_heartbeat_ms = clock_->WallMillis();
    nodes_[n.rec.name] = std::move(n);
  }
  return Status::Ok();
}

// Two workers, one name: without this, two live workers under one --name take the node from each
// other on every heartbeat, and each take-over restarts the jobs there.
std::optional<v1::RegisterResponse> NodeTable::Contest(NodeEntry& node, const v1::RegisterRequest& req) {
  const std::string& name = req.node_name();
  const std::string& inc = req.incarnation();
  v1::RegisterResponse refusal;
  if (const std::string* why = FencedReason(node.fenced, inc)) {
    refusal.set_fenced(*why);
    return refusal;
  }
  // The holder itself, a restart in the holder's work dir, or a holder already LOST: take it.
  if (node.incarnation.empty() || node.incarnation == inc || req.previous_incarnation() == node.incarnation ||
      !node.ready) {
    return std::nullopt;
  }
  const SteadyTime now = clock_->Now();
  const std::string holder = Who(node.incarnation, node.rec.address);
  if (node.contender != inc) {
    node.contender = inc;
    node.contender_since = now;
    EFT_LOG(WARNING) << "node " << name << ": a worker (" << Who(inc, req.address())
                     << ") asks for this name while the worker holding it (" << holder
                     << ") may be alive; it gets the name if that one misses its next heartbeat";
  }
  if (node.last_heartbeat > node.contender_since) {
    std::string why = "another eft-worker runs as node " + name + " (" + holder +
                      ") and heartbeated after this one asked for the name: two workers share --name " + name +
                      "; this one (" + Who(inc, req.address()) + ") stops";
    EFT_LOG(ERROR) << "node " << name << ": refused a second worker under this name (" << Who(inc, req.address())
                   << "); the one holding it (" << holder << ") is alive. Give every eft-worker its own --name.";
    Fence(&node.fenced, inc, why);
    node.contender.clear();
    refusal.set_fenced(std::move(why));
    return refusal;
  }
  // The holder heartbeats at least every heartbeat_interval while it lives.
  const auto wait = config_.heartbeat_interval + config_.heartbeat_interval / 2;
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - node.contender_since);
  if (waited < wait) {
    refusal.set_retry_after_ms(static_cast<int32_t>(std::max<int64_t>(100, (wait - waited).count())));
    return refusal;
  }
  EFT_LOG(WARNING) << "node " << name << ": the worker holding it (" << holder << ") missed its heartbeat for "
                   << waited.count() << " ms; " << Who(inc, req.address()) << " takes the node over";
  return std::nullopt;
}

Result<NodeTable::Registration> NodeTable::Register(const v1::RegisterRequest& req) {
  if (req.node_name().empty()) return Status::InvalidArgument("node_name: must not be empty");
  if (req.incarnation().empty()) return Status::InvalidArgument("incarnation: must not be empty");
  if (req.slots() < 1 || req.slots() > 1024) return Status::InvalidArgument("slots: must be in 1..1024");
  NodeEntry& node = nodes_[req.node_name()];
  bool known = !node.rec.name.empty();
  if (known) {
    if (auto refusal = Contest(node, req)) return Registration{nullptr, std::move(refusal)};
  }
  NodeRecord rec = node.rec;
  rec.name = req.node_name();
  rec.address = req.address().empty() ? req.node_name() : req.address();
  rec.data_address = req.data_address();
  rec.network_stack = req.network_stack();
  rec.slots = req.slots();
  rec.version = req.version();
  rec.registered_ms = clock_->WallMillis();
  rec.lost = false;
  rec.state_reason.clear();
  Status s = store_->UpsertNode(rec);
  if (!s.ok()) {
    if (!known) nodes_.erase(req.node_name());
    return s.WithContext("storing node " + req.node_name());
  }
  bool was_lost = known && !node.ready;
  const std::string& before = node.incarnation.empty() ? node.lost_incarnation : node.incarnation;
  bool restarted = known && !before.empty() && before != req.incarnation();
  if (restarted) {
    // Dead (restarted in place, or silent past a heartbeat) or about to be told: it stops if it wakes.
    Fence(&node.fenced, before,
          "node " + rec.name + " was taken over by a newer eft-worker (" + Who(req.incarnation(), req.address()) +
              ") after this one (" + Who(before, node.rec.address) + ") went silent; this one stops its ranks and exits");
  }
  node.contender.clear();
  node.lost_incarnation.clear();
  node.rec = rec;
  node.ready = true;
  if (node.incarnation != req.incarnation()) node.acked_seq = 0;
  node.incarnation = req.incarnation();
  node.snapshot_port = req.snapshot_port();
  node.shutting_down = false;
  node.last_heartbeat = clock_->Now();
  node.last_heartbeat_ms = clock_->WallMillis();
  node.reported.assign(req.ranks().begin(), req.ranks().end());
  TakeReportSeq(node, req.incarnation(), req.report_seq());
  on_capacity_changed_();
  EFT_LOG(INFO) << "node " << rec.name << (known ? " re-registered" : " registered") << " (" << rec.slots
                << " slots, address " << rec.address
                << (DataAddressOf(rec) == rec.address ? "" : ", data address " + DataAddressOf(rec)) << ", "
                << req.ranks_size() << " ranks reported)"
                << (was_lost ? ": READY again after being LOST" : "") << (restarted ? ": worker restarted" : "");
  return Registration{&node, std::nullopt};
}

NodeEntry* NodeTable::Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* reply) {
  auto it = nodes_.find(req.node_name());
  // Unknown node, a worker we have not heard from since we started, or one we declared LOST:
  // everything it knows must be re-checked through Register.
  if (it == nodes_.end() || !it->second.ready || it->second.incarnation != req.incarnation()) {
    const std::string* why = it == nodes_.end() ? nullptr : FencedReason(it->second.fenced, req.incarnation());
    if (why != nullptr) {
      reply->set_fenced(*why);
    } else {
      reply->set_reregister(true);
    }
    return nullptr;
  }
  NodeEntry& node = it->second;
  if (req.shutting_down() && !node.shutting_down) {
    EFT_LOG(INFO) << "node " << node.rec.name << ": worker shutting down; no new ranks go there";
  }
  if (node.shutting_down != req.shutting_down()) on_capacity_changed_();
  node.shutting_down = req.shutting_down();
  node.last_heartbeat = clock_->Now();
  node.last_heartbeat_ms = clock_->WallMillis();
  node.last_report = node.last_heartbeat;
  TakeReportSeq(node, req.incarnation(), req.report_seq());
  return &node;
}

Status NodeTable::StaleReport(const std::string& name, const std::string& incarnation, uint64_t seq) const {
  const NodeEntry* node = Find(name);
  if (node == nullptr || seq == 0 || node->report_seq_incarnation != incarnation || seq >= node->report_seq) {
    return Status::Ok();
  }
  return Status::FailedPrecondition("report " + std::to_string(seq) + " of node " + name + " arrived after report " +
                                    std::to_string(node->report_seq) + " (a copy delayed in the network): dropped");
}

void NodeTable::TakeReportSeq(NodeEntry& node, const std::string& incarnation, uint64_t seq) {
  if (seq == 0) return;
  node.report_seq = node.report_seq_incarnation == incarnation ? std::max(node.report_seq, seq) : seq;
  node.report_seq_incarnation = incarnation;
}

void NodeTable::Report(NodeEntry& node, const google::protobuf::RepeatedPtrField<v1::RankStatus>& ranks) {
  if (LiveSlots(node.reported) != LiveSlots(ranks)) on_capacity_changed_();
  node.reported.assign(ranks.begin(), ranks.end());
}

std::vector<std::pair<std::string, std::string>> NodeTable::Silent() const {
  std::vector<std::pair<std::string, std::string>> out;
  const SteadyTime now = clock_->Now();
  for (const auto& [name, node] : nodes_) {
    if (!node.ready) continue;
    auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - node.last_heartbeat);
    if (silent > config_.heartbeat_timeout) out.emplace_back(name, "no heartbeat for " + SecondsText(silent));
  }
  return out;
}

std::vector<std::string> NodeTable::Late() const {
  std::vector<std::string> out;
  const SteadyTime now = clock_->Now();
  for (const auto& [name, node] : nodes_) {
    const auto silent = now - node.last_heartbeat;
    if (node.ready && silent > config_.heartbeat_interval * 3 / 2 && silent <= config_.heartbeat_timeout) {
      out.push_back(name);
    }
  }
  return out;
}

Status NodeTable::MarkLost(NodeEntry& node, const std::string& reason) {
  NodeRecord rec = node.rec;
  rec.lost = true;
  rec.state_reason = reason;
  EFT_RETURN_IF_ERROR(store_->UpsertNode(rec));
  node.rec = rec;
  node.ready = false;
  node.lost_incarnation = node.incarnation;
  node.incarnation.clear();
  node.reported.clear();  // whatever it ran is gone with it
  EFT_LOG(WARNING) << "node " << rec.name << " LOST: " << reason;
  on_capacity_changed_();
  return Status::Ok();
}

Result<NodeEntry*> NodeTable::SetDrained(const std::string& name, bool drained) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Status::NotFound("node " + name + " not found");
  NodeRecord rec = it->second.rec;
  rec.drained = drained;
  EFT_RETURN_IF_ERROR(store_->UpsertNode(rec).WithContext("storing node " + name));
  it->second.rec = rec;
  on_capacity_changed_();
  return &it->second;
}

NodeEntry* NodeTable::Find(const std::string& name) {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

const NodeEntry* NodeTable::Find(const std::string& name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

bool NodeTable::AnyUnknown() const {
  return std::any_of(nodes_.begin(), nodes_.end(),
                     [](const auto& kv) { return kv.second.ready && kv.second.incarnation.empty(); });
}

// Workers pull their desired state, so each hop of a planned change (the stop request reaching the
// ranks, the new ranks reaching their workers, their first step reaching the controller) waits for
// a heartbeat: shorter for the nodes a change involves, the normal interval again once it is over,
// so the cluster-wide heartbeat load stays what heartbeat_interval says.
std::chrono::milliseconds NodeTable::HeartbeatInterval(
    const NodeEntry& node, const std::function<bool(const v1::RankStatus&)>& desired) const {
  if (config_.transition_heartbeat_interval >= config_.heartbeat_interval) return config_.heartbeat_interval;
  if (clock_->Now() < node.fast_until) return config_.transition_heartbeat_interval;
  // A live rank nobody wants any more is being stopped: its exit frees the slots the next attempt
  // waits for, and the node then learns at once where it goes next.
  for (const auto& r : node.reported) {
    if (IsLive(r) && !desired(r)) return config_.transition_heartbeat_interval;
  }
  return config_.heartbeat_interval;
}

void NodeTable::ExpectTransition(const std::vector<std::string>& nodes) {
  if (config_.transition_heartbeat_interval >= config_.heartbeat_interval) return;
  const SteadyTime until = clock_->Now() + config_.transition_window;
  for (const auto& name : nodes) {
    if (NodeEntry* n = Find(name)) n->fast_until = std::max(n->fast_until, until);
  }
}

void NodeTable::TransitionDone(const std::vector<std::string>& nodes) {
  // Another change on one of these nodes keeps it fast through its stopping ranks; one that is only
  // expected there falls back to the normal interval, which costs it at most one normal hop.
  for (const auto& name : nodes) {
    if (NodeEntry* n = Find(name)) n->fast_until = SteadyTime{};
  }
}

}  // namespace eft::controller
