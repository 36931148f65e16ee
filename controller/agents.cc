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

namespace {

// A step event carries no eval fields: the newest evaluations stay until the next ones.
void KeepEval(const v1::TrainingProgress& before, v1::TrainingProgress* now) {
  *now->mutable_evals() = before.evals();
  if (!before.has_eval_loss()) return;
  now->set_eval_loss(before.eval_loss());
  now->set_eval_step(before.eval_step());
  now->set_eval_tokens(before.eval_tokens());
}

// Eval set `index`'s newest evaluation into `progress->evals`, kept in the sets' order.
void SetEvalLoss(const std::vector<std::string>& names, size_t index, const v1::TrainingProgress& eval,
                 v1::TrainingProgress* progress) {
  auto* evals = progress->mutable_evals();
  auto it = std::find_if(evals->begin(), evals->end(), [&](const v1::EvalLoss& e) { return e.set() == names[index]; });
  v1::EvalLoss* entry = it != evals->end() ? &*it : evals->Add();
  entry->set_set(names[index]);
  entry->set_loss(eval.eval_loss());
  entry->set_step(eval.eval_step());
  entry->set_tokens(eval.eval_tokens());
  auto position = [&](const v1::EvalLoss& e) { return std::find(names.begin(), names.end(), e.set()) - names.begin(); };
  std::sort(evals->begin(), evals->end(),
            [&](const v1::EvalLoss& a, const v1::EvalLoss& b) { return position(a) < position(b); });
}

}  // namespace

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
  out.set_acked_event_seq(ProcessEventsLocked(node, req));
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

uint64_t Controller::ProcessEventsLocked(NodeEntry& node, const v1::HeartbeatRequest& req) {
  using Kind = RankEventEffect::Kind;
  std::set<std::string> stepped;  // jobs whose current attempt reported a step
  for (const auto& ev : req.events()) {
    if (ev.seq() <= node.acked_seq) continue;  // seen before: the ack was lost on the way back
    JobEntry* j = jobs_.Find(ev.key().job_id());
    const RankEventEffect effect = j ? InterpretRankEvent(ev, j->rec.attempt) : RankEventEffect{};
    if (j == nullptr || !effect.problem.empty()) {
      EFT_LOG(WARNING) << "node " << node.rec.name << ": ignoring " << (j ? "malformed" : "orphan")
                       << " rank event (" << (j ? effect.problem : "no such job") << "): " << ev.json();
      node.acked_seq = ev.seq();
      continue;
    }
    // A store failure leaves the event unacknowledged: the worker sends it again.
    Status stored = Status::Ok();
    switch (effect.kind) {
      case Kind::kIgnore:
        break;
      case Kind::kProgress: {
        const int64_t total = j->progress.total_steps();
        const v1::TrainingProgress before = j->progress;
        j->progress = effect.progress;
        if (j->progress.total_steps() == 0) j->progress.set_total_steps(total);
        KeepEval(before, &j->progress);
        j->train_loss.Add(effect.progress.step(), effect.progress.loss());
        loss_dirty_.insert(j->rec.id);
        j->reached_step = std::max(j->reached_step, effect.progress.step());
        stepped.insert(j->rec.id);
        if (j->awaiting_first_step && j->active() && j->current()) {
          j->awaiting_first_step = false;
          nodes_.TransitionDone(j->current()->nodes);
        }
        jobs_.Bump(*j);
        break;
      }
      case Kind::kEval: {
        const std::vector<std::string> names = EvalCurveNames(j->rec.spec);
        if (!IsJobEvalSet(j->rec.spec, effect.eval_index, effect.eval_set)) {
          EFT_LOG(WARNING) << "job " << j->rec.id << ": eval event of set '" << effect.eval_set << "' (index "
                           << effect.eval_index << ") is not one of the job's eval sets; ignored";
          break;
        }
        const size_t index = static_cast<size_t>(effect.eval_index);
        if (index == 0) {
          j->progress.set_eval_loss(effect.progress.eval_loss());
          j->progress.set_eval_step(effect.progress.eval_step());
          j->progress.set_eval_tokens(effect.progress.eval_tokens());
        }
        SetEvalLoss(names, index, effect.progress, &j->progress);
        if (j->eval_loss.size() <= index) j->eval_loss.resize(index + 1);
        j->eval_loss[index].Add(effect.progress.eval_step(), effect.progress.eval_loss());
        loss_dirty_.insert(j->rec.id);
        jobs_.Bump(*j);
        break;
      }
      case Kind::kRankError:
        // Arrives before the exit it explains (the worker reads a rank's events to EOF before
        // reporting its exit), and goes into the attempt's end reason.
        if (effect.rank >= 0 && effect.rank < static_cast<int>(j->ranks.size())) {
          j->ranks[effect.rank].error = effect.message;
        }
        break;
      case Kind::kJobEvent: {
        JobChange c{j->rec, {}, {}, {}};
        c.events.push_back(jobs_.MakeEvent(*j, effect.event_type, effect.message));
        stored = jobs_.Apply(*j, std::move(c));
        break;
      }
      case Kind::kForgetCheckpoint: {
        // Retention removed it: it must not be listed, nor handed to a later attempt.
        const std::string& path = effect.checkpoint.path;
        stored = store_->DeleteCheckpoint(j->rec.id, path);
        if (!stored.ok()) break;
        auto gone = std::remove_if(j->checkpoints.begin(), j->checkpoints.end(),
                                   [&](const CheckpointRecord& k) { return k.path == path; });
        if (gone != j->checkpoints.end()) {
          j->checkpoints.erase(gone, j->checkpoints.end());
          jobs_.Bump(*j);
        }
        break;
      }
      case Kind::kRecordCheckpoint: {
        const CheckpointRecord& c = effect.checkpoint;
        stored = store_->InsertCheckpoint(c);
        if (!stored.ok()) break;
        bool seen = std::any_of(j->checkpoints.begin(), j->checkpoints.end(),
                                [&](const CheckpointRecord& k) { return k.path == c.path; });
        if (!seen) {
          EFT_LOG(INFO) << "job " << j->rec.id << ": checkpoint at step " << c.step << " (" << c.kind << ") " << c.path;
          j->checkpoints.push_back(c);
          jobs_.Bump(*j);
          if (checkpoint_observer_) {
            checkpoint_observer_(
                CheckpointReport{c.job_id, c.kind, c.step, c.bytes, effect.seconds, effect.stall_seconds});
          }
        }
        break;
      }
    }
    if (!stored.ok()) {
      EFT_LOG(ERROR) << "job " << j->rec.id << ": could not store what a rank reported (" << ev.json() << "): " << stored;
      break;
    }
    node.acked_seq = ev.seq();
  }
  // A running attempt's steps wait for the next flush (one write for every job); those of an ended
  // one are what its stop is measured against, and few: written now.
  std::set<std::string> now;
  for (const auto& id : stepped) {
    const JobEntry* j = jobs_.Find(id);
    if (j && j->active()) {
      reached_dirty_.insert(id);
    } else {
      now.insert(id);
    }
  }
  StoreReachedStepsLocked(now);
  return node.acked_seq;
}

void Controller::FlushReachedStepsLocked() {
  if (reached_dirty_.empty() && loss_dirty_.empty()) return;
  std::set<std::string> due;
  due.swap(reached_dirty_);
  StoreReachedStepsLocked(due);
  StoreLossHistoryLocked();
  reached_flushed_at_ = clock_->Now();
}

void Controller::StoreLossHistoryLocked() {
  std::vector<JobEntry*> due;
  for (const auto& id : loss_dirty_) {
    if (JobEntry* j = jobs_.Find(id)) due.push_back(j);
  }
  Status s = store_->RunInTransaction([&]() REQUIRES(mu_) -> Status {
    for (JobEntry* j : due) {
      std::vector<std::pair<LossCurve, LossSeries*>> curves = {{LossCurve::kTrain, &j->train_loss}};
      for (size_t i = 0; i < j->eval_loss.size(); ++i) curves.emplace_back(EvalCurve(i), &j->eval_loss[i]);
      for (auto [curve, series] : curves) {
        if (!series->dirty()) continue;
        EFT_RETURN_IF_ERROR(store_->SaveLossPoints(j->rec.id, curve, series->dirty_from(), series->points()));
      }
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    // The curves stay dirty in memory: the next flush writes them.
    EFT_LOG(WARNING) << "could not store the loss history (" << s << "); retrying";
    return;
  }
  for (JobEntry* j : due) {
    j->train_loss.MarkSaved();
    for (LossSeries& series : j->eval_loss) series.MarkSaved();
  }
  loss_dirty_.clear();
}

void Controller::StoreReachedStepsLocked(const std::set<std::string>& job_ids) {
  std::vector<JobEntry*> due;
  for (const auto& id : job_ids) {
    JobEntry* j = jobs_.Find(id);
    if (j && !j->attempts.empty() && j->reached_step > j->attempts.back().reached_step) due.push_back(j);
  }
  if (due.empty()) return;
  Status s = store_->RunInTransaction([&]() REQUIRES(mu_) -> Status {
    for (JobEntry* j : due) {
      EFT_RETURN_IF_ERROR(store_->UpdateReachedStep(j->rec.id, j->attempts.back().number, j->reached_step));
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    // Kept in memory and retried with the next flush; the end of the attempt writes it too.
    EFT_LOG(WARNING) << "could not store the steps reached (" << s << "); retrying";
    for (JobEntry* j : due) reached_dirty_.insert(j->rec.id);
    return;
  }
  for (JobEntry* j : due) j->attempts.back().reached_step = j->reached_step;
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
