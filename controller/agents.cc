// Controller: the worker-facing side. A registration or heartbeat goes through the node table
// (who holds the name, liveness), the progress tracker (relayed rank events), the lifecycle (what
// the reported rank states mean) and a scheduling pass, and is answered with the ranks the worker
// is to run. Every reply carries the workers' lease: the heartbeat timeout after which this side
// declares a silent node LOST, and after which a cut-off worker kills its ranks (agent.proto).
#include <algorithm>
#include <set>
#include <utility>

#include "common/logging.h"
#include "common/rank_protocol.h"
#include "controller/controller.h"
#include "controller/rank_events.h"

namespace eft::controller {

Result<v1::RegisterResponse> Controller::Register(const v1::RegisterRequest& req) {
  MutexLock lock(&mu_);
  EFT_RETURN_IF_ERROR(nodes_.StaleReport(req.node_name(), req.incarnation(), req.report_seq()));
  EFT_ASSIGN_OR_RETURN(NodeTable::Registration registration, nodes_.Register(req));
  const auto lease_ms = static_cast<int32_t>(config_.heartbeat_timeout.count());
  if (registration.refusal) {
    registration.refusal->set_lease_ms(lease_ms);
    return *std::move(registration.refusal);
  }
  NodeEntry& node = *registration.node;
  snapshots_.Forget(node.rec.name);  // held again once its heartbeats say so
  lifecycle_.OnRankReports(node);
  scheduler_.MaybePass();
  v1::RegisterResponse out;
  out.set_lease_ms(lease_ms);
  out.set_heartbeat_interval_ms(static_cast<int32_t>(HeartbeatIntervalLocked(node).count()));
  lifecycle_.DesiredFor(node, out.mutable_desired(), out.mutable_attempt_specs());
  lifecycle_.StopNowFor(node, out.mutable_stop_now());
  return out;
}

Result<v1::HeartbeatResponse> Controller::Heartbeat(const v1::HeartbeatRequest& req) {
  MutexLock lock(&mu_);
  EFT_RETURN_IF_ERROR(nodes_.StaleReport(req.node_name(), req.incarnation(), req.report_seq()));
  v1::HeartbeatResponse out;
  out.set_heartbeat_interval_ms(static_cast<int32_t>(config_.heartbeat_interval.count()));
  out.set_lease_ms(static_cast<int32_t>(config_.heartbeat_timeout.count()));
  NodeEntry* heard = nodes_.Heartbeat(req, &out);
  if (heard == nullptr) return out;  // fenced, or to re-register
  NodeEntry& node = *heard;
  node.acked_seq = progress_.OnEvents(node.rec.name, node.acked_seq, req.events());
  out.set_acked_event_seq(node.acked_seq);
  nodes_.Report(node, req.ranks());
  snapshots_.OnHeartbeat(node.rec.name, req.snapshots(), req.staged());
  lifecycle_.OnRankReports(node);
  scheduler_.MaybePass();
  lifecycle_.DesiredFor(node, out.mutable_desired(), out.mutable_attempt_specs());
  lifecycle_.StopNowFor(node, out.mutable_stop_now());
  snapshots_.OrdersFor(node.rec.name, out.mutable_stage());
  snapshots_.KeepFor(node.rec.name, out.mutable_keep_snapshots());
  // After this heartbeat's reports and decisions: a stop or start they caused is seen here.
  out.set_heartbeat_interval_ms(static_cast<int32_t>(HeartbeatIntervalLocked(node).count()));
  return out;
}

std::chrono::milliseconds Controller::HeartbeatIntervalLocked(const NodeEntry& node) const {
  return nodes_.HeartbeatInterval(node, [&](const v1::RankStatus& r) REQUIRES(mu_) {
    const JobEntry* j = jobs_.Find(r.key().job_id());
    return j != nullptr && j->active() && j->current() && j->current()->number == r.key().attempt();
  });
}

}  // namespace eft::controller
