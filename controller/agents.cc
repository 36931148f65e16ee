// Controller: the worker-facing side. Registration, heartbeats, rank reports and relayed events,
// and the desired set of ranks each worker is told to run.
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
  EFT_ASSIGN_OR_RETURN(NodeTable::Registration registration, nodes_.Register(req));
  if (registration.refusal) return *std::move(registration.refusal);
  NodeEntry& node = *registration.node;
  ApplyRankReportsLocked(node);
  MaybeScheduleLocked();
  v1::RegisterResponse out;
  out.set_heartbeat_interval_ms(static_cast<int32_t>(HeartbeatIntervalLocked(node).count()));
  DesiredForLocked(node, out.mutable_desired(), out.mutable_attempt_specs());
  return out;
}

Result<v1::HeartbeatResponse> Controller::Heartbeat(const v1::HeartbeatRequest& req) {
  MutexLock lock(&mu_);
  v1::HeartbeatResponse out;
  out.set_heartbeat_interval_ms(static_cast<int32_t>(config_.heartbeat_interval.count()));
  NodeEntry* heard = nodes_.Heartbeat(req, &out);
  if (heard == nullptr) return out;  // fenced, or to re-register
  NodeEntry& node = *heard;
  node.acked_seq = progress_.OnEvents(node.rec.name, node.acked_seq, req.events());
  out.set_acked_event_seq(node.acked_seq);
  nodes_.Report(node, req.ranks());
  ApplyRankReportsLocked(node);
  MaybeScheduleLocked();
  DesiredForLocked(node, out.mutable_desired(), out.mutable_attempt_specs());
  // After this heartbeat's reports and decisions: a stop or start they caused is seen here.
  out.set_heartbeat_interval_ms(static_cast<int32_t>(HeartbeatIntervalLocked(node).count()));
  return out;
}

void Controller::ApplyRankReportsLocked(NodeEntry& node) {
  for (const auto& id : jobs_.index().ActiveOn(node.rec.name)) {
    JobEntry& j = jobs_.At(id);
    if (!j.active() || !j.current()) continue;
    const AttemptRecord& a = *j.current();
    auto pos = std::find(a.nodes.begin(), a.nodes.end(), node.rec.name);
    if (pos == a.nodes.end()) continue;
    int first = static_cast<int>(pos - a.nodes.begin()) * a.ranks_per_node;
    for (int rank = first; rank < first + a.ranks_per_node && j.active(); ++rank) {
      const v1::RankStatus* st = nullptr;
      for (const auto& r : node.reported) {
        if (r.key().job_id() == id && r.key().attempt() == a.number && r.key().rank() == rank) st = &r;
      }
      RankView& view = j.ranks[rank];
      if (st == nullptr) {
        if (view.seen_running && !view.exited) {
          (void)EndAttemptLocked(j, "rank " + std::to_string(rank) + " on node " + node.rec.name +
                                        " vanished (its worker restarted or lost track of it)",
                                 v1::ATTEMPT_END_RANK_LOST, Outcome::kRestart);
        }
        continue;
      }
      if (IsLive(*st)) {
        view.seen_running = true;
      } else if (!view.exited && (st->state() == v1::RANK_STATE_EXITED ||
                                  st->state() == v1::RANK_STATE_FAILED_TO_START)) {
        OnRankExitLocked(j, rank, *st);
      }
    }
    if (j.rec.state == v1::JOB_STATE_STARTING &&
        std::all_of(j.ranks.begin(), j.ranks.end(), [](const RankView& r) { return r.seen_running; })) {
      JobChange c{j.rec, {}, {}, {}};
      c.rec.state = v1::JOB_STATE_RUNNING;
      c.events.push_back(jobs_.MakeEvent(j, "running", "all " + std::to_string(j.ranks.size()) + " ranks of attempt " +
                                                     std::to_string(a.number) + " started"));
      (void)jobs_.Apply(j, std::move(c));
    }
  }
}

void Controller::DesiredForLocked(const NodeEntry& node,
                                  google::protobuf::RepeatedPtrField<v1::RankAssignment>* out,
                                  google::protobuf::RepeatedPtrField<v1::AttemptSpec>* specs) const {
  for (const auto& id : jobs_.index().ActiveOn(node.rec.name)) {
    const JobEntry& j = jobs_.At(id);
    if (!j.active() || !j.current()) continue;
    const AttemptRecord& a = *j.current();
    auto pos = std::find(a.nodes.begin(), a.nodes.end(), node.rec.name);
    if (pos == a.nodes.end()) continue;
    size_t node_index = static_cast<size_t>(pos - a.nodes.begin());
    const v1::JobSpec& spec = j.rec.spec;
    bool spec_sent = false;
    for (int local = 0; local < a.ranks_per_node; ++local) {
      v1::RankAssignment* r = out->Add();
      r->mutable_key()->set_job_id(id);
      r->mutable_key()->set_attempt(a.number);
      r->mutable_key()->set_rank(static_cast<int>(node_index) * a.ranks_per_node + local);
      r->set_local_rank(local);
      r->set_world_size(a.world_size);
      r->set_local_world_size(a.ranks_per_node);
      r->set_master_addr(a.master_addr);
      r->set_master_port(a.master_port);
      r->set_slot(node_index < a.slots.size() && local < static_cast<int>(a.slots[node_index].size())
                      ? a.slots[node_index][local]
                      : local);
      if (spec.command().empty()) {
        r->add_command(config_.trainer_program);
        r->add_command("train");
      } else {
        r->mutable_command()->CopyFrom(spec.command());
      }
      // The job's own variables only: the worker builds the rank environment from the typed fields.
      r->mutable_env()->insert(spec.env().begin(), spec.env().end());
      r->set_resume_from(a.resume_from);
      r->set_stop_grace_seconds(spec.fault_tolerance().stop_grace_seconds());
      const bool reported = std::any_of(node.reported.begin(), node.reported.end(), [&](const v1::RankStatus& st) {
        return st.key().job_id() == id && st.key().attempt() == a.number && st.key().rank() == r->key().rank();
      });
      if (!reported && !spec_sent) {
        v1::AttemptSpec* s = specs->Add();
        s->set_job_id(id);
        s->set_attempt(a.number);
        s->set_spec_json(j.spec_json);
        spec_sent = true;
      }
    }
  }
}

std::chrono::milliseconds Controller::HeartbeatIntervalLocked(const NodeEntry& node) const {
  return nodes_.HeartbeatInterval(node, [&](const v1::RankStatus& r) REQUIRES(mu_) {
    const JobEntry* j = jobs_.Find(r.key().job_id());
    return j != nullptr && j->active() && j->current() && j->current()->number == r.key().attempt();
  });
}

}  // namespace eft::controller
