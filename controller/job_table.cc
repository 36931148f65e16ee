#include "controller/job_table.h"

#include <algorithm>
#include <set>
#include <utility>

#include "common/logging.h"
#include "controller/rank_events.h"
#include "controller/tracking/job_tracking.h"
#include "controller/wire.h"

namespace eft::controller {

namespace {

// What the job's events count (resizes by reason, preemptions, failed checkpoints), for /metrics.
void Count(const EventRecord& e, JobEntry* j) {
  if (auto r = ResizeReasonOf(e)) ++j->resizes[static_cast<size_t>(*r)];
  if (e.type == kPreemptedEvent) ++j->preemptions;
  if (e.type == kCheckpointFailedEvent) ++j->checkpoint_failures;
}

}  // namespace

JobTable::JobTable(const ControllerConfig& config, Clock* clock, Store* store, Callbacks callbacks)
    : config_(config), clock_(clock), store_(store), callbacks_(std::move(callbacks)) {}

Result<size_t> JobTable::Load(const std::function<void(JobEntry&)>& prepare) {
  EFT_ASSIGN_OR_RETURN(auto jobs, store_->LoadJobs());
  // Memory takes every unfinished job and the most recently finished ones.
  std::vector<std::pair<int64_t, std::string>> finished;  // (end_ms, id)
  for (const auto& rec : jobs) {
    if (IsTerminalState(rec.state)) finished.emplace_back(rec.end_ms, rec.id);
  }
  std::sort(finished.begin(), finished.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : std::stoll(a.second) < std::stoll(b.second);
  });
  const size_t keep = std::min(finished.size(), static_cast<size_t>(std::max(0, config_.finished_jobs_in_memory)));
  std::set<std::string> left_out;
  for (size_t i = 0; i + keep < finished.size(); ++i) left_out.insert(finished[i].second);
  for (size_t i = finished.size() - keep; i < finished.size(); ++i) finished_.push_back(finished[i].second);
  for (auto& rec : jobs) {
    if (left_out.count(rec.id)) {
      ++evicted_by_state_[rec.state];
      attempts_loaded_ += rec.attempt;
      continue;
    }
    EFT_ASSIGN_OR_RETURN(JobEntry j, LoadEntry(std::move(rec)));
    attempts_loaded_ += static_cast<int64_t>(j.attempts.size());
    prepare(j);
    File(std::move(j));
  }
  return left_out.size();
}

Result<JobEntry> JobTable::LoadEntry(JobRecord rec) {
  JobEntry j;
  j.rec = std::move(rec);
  EFT_ASSIGN_OR_RETURN(j.attempts, store_->LoadAttempts(j.rec.id));
  EFT_ASSIGN_OR_RETURN(j.checkpoints, store_->LoadCheckpoints(j.rec.id));
  EFT_ASSIGN_OR_RETURN(j.events, store_->LoadEvents(j.rec.id));
  EFT_ASSIGN_OR_RETURN(auto train, store_->LoadLossPoints(j.rec.id, LossCurve::kTrain));
  j.train_loss = LossSeries::FromPoints(std::move(train));
  const size_t eval_sets = EvalCurveNames(j.rec.spec).size();
  for (size_t i = 0; i < eval_sets; ++i) {
    EFT_ASSIGN_OR_RETURN(auto eval, store_->LoadLossPoints(j.rec.id, EvalCurve(i)));
    j.eval_loss.push_back(LossSeries::FromPoints(std::move(eval)));
  }
  for (const auto& e : j.events) Count(e, &j);
  if (j.current()) j.reached_step = j.current()->reached_step;
  return j;
}

JobEntry& JobTable::File(JobEntry job) {
  const std::string id = job.rec.id;
  order_.push_back(id);
  if (!job.rec.request_id.empty()) by_request_id_[job.rec.request_id] = id;
  JobEntry& entry = jobs_[id] = std::move(job);
  Refile(entry);
  return entry;
}

void JobTable::Refile(JobEntry& j) {
  static const std::vector<std::string> kNoNodes;
  index_.File(j.rec.id, j.rec.state, j.current() ? j.current()->nodes : kNoNodes);
}

Result<std::vector<JobTable::Inserted>> JobTable::Insert(const std::vector<NewJob>& jobs) {
  std::vector<Inserted> ids(jobs.size());
  std::vector<JobEntry> created;
  std::vector<std::optional<MlflowRunRecord>> runs;  // of `created`, for on_changed
  std::map<std::string, std::string> batch_request_ids;  // request id -> job id, within this batch
  Status s = store_->RunInTransaction([&]() -> Status {
    for (size_t i = 0; i < jobs.size(); ++i) {
      const NewJob& p = jobs[i];
      // A retried submit (same request id) gets the job the first one created.
      if (!p.request_id.empty()) {
        if (auto it = by_request_id_.find(p.request_id); it != by_request_id_.end()) {
          ids[i].id = it->second;
          continue;
        }
        if (auto it = batch_request_ids.find(p.request_id); it != batch_request_ids.end()) {
          ids[i].id = it->second;
          continue;
        }
        EFT_ASSIGN_OR_RETURN(auto earlier, store_->FindJobByRequestId(p.request_id));  // finished, out of memory
        if (earlier) {
          ids[i].id = earlier->id;
          continue;
        }
      }
      JobRecord rec;
      rec.request_id = p.request_id;
      rec.owner = p.owner;
      rec.spec = p.spec;
      rec.state = v1::JOB_STATE_QUEUED;
      rec.create_ms = clock_->WallMillis();
      EFT_RETURN_IF_ERROR(store_->InsertJob(&rec));
      // The default checkpoint dir depends on the id, which only the insert knows; so do the
      // tracking defaults (a TensorBoard directory per job id).
      bool filled = FillTrackingDefaults(config_, rec.id, &rec.spec);
      if (rec.spec.checkpoint().dir().empty()) {
        rec.spec.mutable_checkpoint()->set_dir(config_.data_dir + "/checkpoints/" + rec.id);
        filled = true;
      }
      if (filled) EFT_RETURN_IF_ERROR(store_->UpdateJob(rec));
      JobEntry j;
      j.rec = rec;
      std::optional<MlflowRunRecord> run;
      if (!MlflowUriOf(rec.spec).empty()) {
        run = MlflowRunRecord{rec.id, NewMlflowRunKey(), "", "", false};
        EFT_RETURN_IF_ERROR(store_->InsertMlflowRun(*run));
      }
      const auto& r = rec.spec.resources();
      j.events.push_back(MakeEvent(j, "submitted",
                                   "submitted \"" + rec.spec.name() + "\": " + std::to_string(r.nodes().min()) + ".." +
                                       std::to_string(r.nodes().max()) + " nodes x " +
                                       std::to_string(r.gpus_per_node()) + " ranks" +
                                       (rec.owner.empty() ? "" : " by " + rec.owner)));
      EFT_RETURN_IF_ERROR(store_->AppendEvent(j.events.back()));
      ids[i] = {rec.id, true};
      if (!p.request_id.empty()) batch_request_ids[p.request_id] = rec.id;
      created.push_back(std::move(j));
      runs.push_back(std::move(run));
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  for (size_t i = 0; i < created.size(); ++i) {
    EFT_LOG(INFO) << "job " << created[i].rec.id << " submitted (" << created[i].rec.spec.name() << ")";
    JobEntry& filed = File(std::move(created[i]));
    if (callbacks_.on_changed) callbacks_.on_changed(filed, runs[i] ? &*runs[i] : nullptr);
  }
  return ids;
}

JobEntry* JobTable::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

const JobEntry* JobTable::Find(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

Result<const JobEntry*> JobTable::Read(const std::string& id, JobEntry* scratch) {
  if (!IsJobId(id)) {
    return Status::InvalidArgument("job id '" + id + "' is not a job id of this controller (a positive integer)");
  }
  if (const JobEntry* j = Find(id)) return j;
  EFT_ASSIGN_OR_RETURN(auto rec, store_->LoadJob(id));
  if (!rec) return Status::NotFound("job " + id + " not found");
  EFT_ASSIGN_OR_RETURN(*scratch, LoadEntry(std::move(*rec)));
  return scratch;
}

Result<v1::ListJobsResponse> JobTable::List(const v1::ListJobsRequest& request) {
  int page_size = request.page_size() == 0 ? 100 : request.page_size();
  if (page_size < 0 || page_size > 1000) return Status::InvalidArgument("page_size: must be in 1..1000");
  // Newest first; the token is the id of the next job to show.
  int64_t max_id = INT64_MAX;
  if (!request.page_token().empty()) {
    if (!IsJobId(request.page_token())) return Status::InvalidArgument("page_token: not a token this controller issued");
    max_id = std::stoll(request.page_token());
  }
  std::vector<v1::JobState> states;
  for (int s : request.states()) states.push_back(static_cast<v1::JobState>(s));
  EFT_ASSIGN_OR_RETURN(auto records, store_->ListJobs(max_id, states, page_size + 1));
  v1::ListJobsResponse out;
  for (auto& rec : records) {
    if (out.jobs_size() == page_size) {
      out.set_next_page_token(rec.id);  // a matching job exists beyond this page
      break;
    }
    if (const JobEntry* j = Find(rec.id)) {
      *out.add_jobs() = JobMessage(*j, false);
    } else {
      JobEntry finished;
      finished.rec = std::move(rec);
      *out.add_jobs() = JobMessage(finished, false);
    }
  }
  return out;
}

EventRecord JobTable::MakeEvent(const JobEntry& job, const std::string& type, const std::string& message) const {
  EventRecord e;
  e.job_id = job.rec.id;
  e.time_ms = clock_->WallMillis();
  e.type = type;
  e.attempt = job.rec.attempt;
  e.message = message;
  return e;
}

void JobTable::Bump(JobEntry& job) {
  ++job.version;
  if (callbacks_.on_bumped) callbacks_.on_bumped();
}

Status JobTable::Apply(JobEntry& job, JobChange change) {
  Status s = store_->RunInTransaction([&]() -> Status {
    if (change.insert_attempt) EFT_RETURN_IF_ERROR(store_->InsertAttempt(*change.insert_attempt));
    if (change.update_attempt) EFT_RETURN_IF_ERROR(store_->UpdateAttempt(*change.update_attempt));
    EFT_RETURN_IF_ERROR(store_->UpdateJob(change.rec));
    for (const auto& e : change.events) EFT_RETURN_IF_ERROR(store_->AppendEvent(e));
    return Status::Ok();
  });
  if (!s.ok()) {
    EFT_LOG(ERROR) << "job " << job.rec.id << ": could not persist a state change (" << s
                   << "); it will be retried";
    return s;
  }
  for (const auto& e : change.events) {
    EFT_LOG(INFO) << "job " << job.rec.id << " [" << e.type << "] " << e.message;
  }
  if (change.insert_attempt) job.attempts.push_back(*change.insert_attempt);
  if (change.update_attempt && !job.attempts.empty()) job.attempts.back() = *change.update_attempt;
  for (const auto& e : change.events) Count(e, &job);
  job.events.insert(job.events.end(), change.events.begin(), change.events.end());
  const bool finishing = !IsTerminalState(job.rec.state) && IsTerminalState(change.rec.state);
  job.rec = std::move(change.rec);
  if (finishing) finished_.push_back(job.rec.id);
  Refile(job);
  if (callbacks_.on_applied) callbacks_.on_applied();
  if (callbacks_.on_changed) callbacks_.on_changed(job, nullptr);
  Bump(job);
  return Status::Ok();
}

void JobTable::EvictFinished(const std::function<bool(const std::string&)>& unsaved) {
  while (finished_.size() > static_cast<size_t>(config_.finished_jobs_in_memory)) {
    const std::string id = finished_.front();
    // Its last steps and loss points go to the store first (the next flush).
    if (unsaved(id)) break;
    finished_.pop_front();
    auto it = jobs_.find(id);
    if (it == jobs_.end() || !IsTerminalState(it->second.rec.state)) continue;
    const JobEntry& j = it->second;
    ++evicted_by_state_[j.rec.state];
    if (!j.rec.request_id.empty()) by_request_id_.erase(j.rec.request_id);
    auto pos = std::find(order_.begin(), order_.end(), id);
    if (pos != order_.end()) order_.erase(pos);
    index_.Remove(id);
    jobs_.erase(it);
  }
}

v1::Job JobMessage(const JobEntry& j, bool full) {
  const int32_t world = j.active() && j.current() ? j.current()->world_size : 0;
  JobView view{j.rec, j.attempts, j.checkpoints, j.events, j.progress, world, &j.train_loss.points(), {}};
  const std::vector<std::string> names = EvalCurveNames(j.rec.spec);
  for (size_t i = 0; i < j.eval_loss.size() && i < names.size(); ++i) {
    view.eval_loss.emplace_back(names[i], &j.eval_loss[i].points());
  }
  return JobToProto(view, full);
}

}  // namespace eft::controller
