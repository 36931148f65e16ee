#include "controller/progress_tracker.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "common/logging.h"
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

ProgressTracker::ProgressTracker(const ControllerConfig& config, Clock* clock, Store* store, JobTable* jobs,
                                 Callbacks callbacks)
    : config_(config), clock_(clock), store_(store), jobs_(jobs), callbacks_(std::move(callbacks)) {}

void ProgressTracker::FlushIfDue() {
  if (clock_->Now() >= flushed_at_ + config_.progress_flush_interval) Flush();
}

uint64_t ProgressTracker::OnEvents(const std::string& node, uint64_t acked_seq,
                                   const google::protobuf::RepeatedPtrField<v1::RankEvent>& events) {
  using Kind = RankEventEffect::Kind;
  std::set<std::string> stepped;  // jobs whose current attempt reported a step
  for (const auto& ev : events) {
    if (ev.seq() <= acked_seq) continue;  // seen before: the ack was lost on the way back
    JobEntry* j = jobs_->Find(ev.key().job_id());
    const RankEventEffect effect = j ? InterpretRankEvent(ev, j->rec.attempt) : RankEventEffect{};
    if (j == nullptr || !effect.problem.empty()) {
      EFT_LOG(WARNING) << "node " << node << ": ignoring " << (j ? "malformed" : "orphan")
                       << " rank event (" << (j ? effect.problem : "no such job") << "): " << ev.json();
      acked_seq = ev.seq();
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
        // Points only for the jobs a tracker logs: nothing built on every step of the others.
        if (callbacks_.on_points && !MlflowUriOf(j->rec.spec).empty()) {
          callbacks_.on_points(*j, StepPoints(effect.progress, ev.time_ms()));
        }
        if (j->awaiting_first_step && j->active() && j->current()) {
          j->awaiting_first_step = false;
          if (callbacks_.on_first_step) callbacks_.on_first_step(*j->current());
        }
        jobs_->Bump(*j);
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
        if (callbacks_.on_points && !MlflowUriOf(j->rec.spec).empty() && std::isfinite(effect.progress.eval_loss())) {
          callbacks_.on_points(*j, {{EvalLossKey(names[index]), effect.progress.eval_step(),
                                     effect.progress.eval_loss(), ev.time_ms()}});
        }
        jobs_->Bump(*j);
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
        c.events.push_back(jobs_->MakeEvent(*j, effect.event_type, effect.message));
        stored = jobs_->Apply(*j, std::move(c));
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
          jobs_->Bump(*j);
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
          jobs_->Bump(*j);
          if (callbacks_.on_checkpoint) {
            callbacks_.on_checkpoint(
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
    acked_seq = ev.seq();
  }
  // A running attempt's steps wait for the next flush (one write for every job); those of an ended
  // one are what its stop is measured against, and few: written now.
  std::set<std::string> now;
  for (const auto& id : stepped) {
    const JobEntry* j = jobs_->Find(id);
    if (j && j->active()) {
      reached_dirty_.insert(id);
    } else {
      now.insert(id);
    }
  }
  StoreReachedSteps(now);
  return acked_seq;
}

void ProgressTracker::Flush() {
  if (reached_dirty_.empty() && loss_dirty_.empty()) return;
  std::set<std::string> due;
  due.swap(reached_dirty_);
  StoreReachedSteps(due);
  StoreLossHistory();
  flushed_at_ = clock_->Now();
}

void ProgressTracker::StoreLossHistory() {
  std::vector<JobEntry*> due;
  for (const auto& id : loss_dirty_) {
    if (JobEntry* j = jobs_->Find(id)) due.push_back(j);
  }
  Status s = store_->RunInTransaction([&]() -> Status {
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

void ProgressTracker::StoreReachedSteps(const std::set<std::string>& job_ids) {
  std::vector<JobEntry*> due;
  for (const auto& id : job_ids) {
    JobEntry* j = jobs_->Find(id);
    if (j && !j->attempts.empty() && j->reached_step > j->attempts.back().reached_step) due.push_back(j);
  }
  if (due.empty()) return;
  Status s = store_->RunInTransaction([&]() -> Status {
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

}  // namespace eft::controller
