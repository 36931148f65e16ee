#include "controller/wire.h"

#include <algorithm>

#include <google/protobuf/util/time_util.h>

namespace eft::controller {
namespace {

google::protobuf::Timestamp Ts(int64_t ms) { return google::protobuf::util::TimeUtil::MillisecondsToTimestamp(ms); }

}  // namespace

v1::Attempt AttemptToProto(const AttemptRecord& a) {
  v1::Attempt p;
  p.set_number(a.number);
  p.set_world_size(a.world_size);
  for (const auto& n : a.nodes) p.add_nodes(n);
  p.set_master_addr(a.master_addr);
  p.set_master_port(a.master_port);
  p.set_resume_from(a.resume_from);
  if (a.start_ms) *p.mutable_start_time() = Ts(a.start_ms);
  if (a.end_ms) *p.mutable_end_time() = Ts(a.end_ms);
  p.set_end_reason(a.end_reason);
  p.set_end(a.end);
  if (a.resume_step >= 0) p.set_resume_step(a.resume_step);
  p.set_reached_step(a.reached_step);
  return p;
}

v1::Checkpoint CheckpointToProto(const CheckpointRecord& c) {
  v1::Checkpoint p;
  p.set_step(c.step);
  p.set_kind(c.kind);
  p.set_path(c.path);
  p.set_bytes(c.bytes);
  p.set_attempt(c.attempt);
  if (c.time_ms) *p.mutable_time() = Ts(c.time_ms);
  return p;
}

v1::JobEvent EventToProto(const EventRecord& e) {
  v1::JobEvent p;
  *p.mutable_time() = Ts(e.time_ms);
  p.set_type(e.type);
  p.set_attempt(e.attempt);
  p.set_message(e.message);
  return p;
}

v1::Job JobToProto(const JobView& j, bool full) {
  v1::Job out;
  out.set_id(j.rec.id);
  *out.mutable_spec() = j.rec.spec;
  out.set_state(j.rec.state);
  out.set_reason(j.rec.reason);
  out.set_owner(j.rec.owner);
  if (j.rec.create_ms) *out.mutable_create_time() = Ts(j.rec.create_ms);
  if (j.rec.start_ms) *out.mutable_start_time() = Ts(j.rec.start_ms);
  if (j.rec.end_ms) *out.mutable_end_time() = Ts(j.rec.end_ms);
  out.set_attempt(j.rec.attempt);
  out.set_restarts(j.rec.restarts);
  if (j.running_world_size > 0) out.set_world_size(j.running_world_size);
  if (j.progress.step() > 0 || j.progress.has_eval_loss()) *out.mutable_progress() = j.progress;
  if (!full) return out;
  for (size_t i = 0; i < j.attempts.size(); ++i) {
    v1::Attempt* a = out.add_attempts();
    *a = AttemptToProto(j.attempts[i]);
    // Measured against the previous attempt's reached step, known once this one's resume step is.
    if (i > 0 && j.attempts[i].resume_step >= 0) {
      a->set_steps_lost(std::max<int64_t>(0, j.attempts[i - 1].reached_step - j.attempts[i].resume_step));
    }
  }
  for (const auto& c : j.checkpoints) *out.add_checkpoints() = CheckpointToProto(c);
  for (const auto& e : j.events) *out.add_events() = EventToProto(e);
  auto add = [](const std::vector<LossPointRecord>* points, google::protobuf::RepeatedPtrField<v1::LossPoint>* to) {
    if (points == nullptr) return;
    for (const auto& p : *points) {
      v1::LossPoint* q = to->Add();
      q->set_step(p.step);
      q->set_loss(p.value);
      q->set_samples(p.samples);
    }
  };
  add(j.train_loss, out.mutable_loss_history()->mutable_train());
  for (size_t i = 0; i < j.eval_loss.size(); ++i) {
    if (i == 0) add(j.eval_loss[i].second, out.mutable_loss_history()->mutable_eval());
    // A set not evaluated yet has no curve (as in memory, so a job read back from the store shows
    // the same).
    if (j.eval_loss[i].second == nullptr || j.eval_loss[i].second->empty()) continue;
    v1::EvalLossCurve* curve = out.mutable_loss_history()->add_eval_sets();
    curve->set_set(j.eval_loss[i].first);
    add(j.eval_loss[i].second, curve->mutable_points());
  }
  return out;
}

v1::Node NodeToProto(const NodeRecord& n, bool ready, int64_t last_heartbeat_ms, const std::set<std::string>& jobs) {
  v1::Node out;
  out.set_name(n.name);
  out.set_address(n.address);
  out.set_data_address(n.data_address);
  out.set_state(ready ? v1::NODE_STATE_READY : v1::NODE_STATE_LOST);
  out.set_drained(n.drained);
  out.set_slots(n.slots);
  out.set_state_reason(n.state_reason);
  out.set_version(n.version);
  if (n.registered_ms) *out.mutable_registered_time() = Ts(n.registered_ms);
  if (last_heartbeat_ms) *out.mutable_last_heartbeat_time() = Ts(last_heartbeat_ms);
  for (const auto& id : jobs) out.add_jobs(id);
  return out;
}

}  // namespace eft::controller
