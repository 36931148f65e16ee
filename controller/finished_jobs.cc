// Controller: finished jobs leave memory (docs/architecture.md, "Finished jobs"). Memory holds
// every unfinished job and the config_.finished_jobs_in_memory most recently finished ones; the
// store holds them all, written through, so a finished job read back from it is what memory held,
// less its live progress (not stored: the same as after a controller restart).
#include <algorithm>
#include <cstdlib>
#include <utility>

#include "controller/controller.h"
#include "controller/rank_events.h"
#include "spec/job_spec.h"

namespace eft::controller {

Result<Controller::JobEntry> Controller::LoadJobEntryLocked(JobRecord rec) {
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
  for (const auto& e : j.events) {
    if (auto r = ResizeReasonOf(e)) ++j.resizes[static_cast<size_t>(*r)];
    if (e.type == kPreemptedEvent) ++j.preemptions;
    if (e.type == kCheckpointFailedEvent) ++j.checkpoint_failures;
  }
  j.spec_json = eft::spec::JobSpecToJson(j.rec.spec).dump();
  if (j.current()) j.reached_step = j.current()->reached_step;
  return j;
}

Result<const Controller::JobEntry*> Controller::ReadJobLocked(const std::string& id, JobEntry* scratch) {
  if (!IsJobId(id)) {
    return Status::InvalidArgument("job id '" + id + "' is not a job id of this controller (a positive integer)");
  }
  if (const JobEntry* j = FindJob(id)) return j;
  EFT_ASSIGN_OR_RETURN(auto rec, store_->LoadJob(id));
  if (!rec) return Status::NotFound("job " + id + " not found");
  EFT_ASSIGN_OR_RETURN(*scratch, LoadJobEntryLocked(std::move(*rec)));
  return scratch;
}

void Controller::FinishedLocked(const JobEntry& job) { finished_.push_back(job.rec.id); }

void Controller::EvictFinishedLocked() {
  while (finished_.size() > static_cast<size_t>(config_.finished_jobs_in_memory)) {
    const std::string id = finished_.front();
    // Its last steps and loss points go to the store first (the next flush).
    if (reached_dirty_.count(id) || loss_dirty_.count(id)) break;
    finished_.pop_front();
    auto it = jobs_.find(id);
    if (it == jobs_.end() || !IsTerminal(it->second.rec.state)) continue;
    const JobEntry& j = it->second;
    ++evicted_by_state_[j.rec.state];
    if (!j.rec.request_id.empty()) by_request_id_.erase(j.rec.request_id);
    auto pos = std::find(job_order_.begin(), job_order_.end(), id);
    if (pos != job_order_.end()) job_order_.erase(pos);
    index_.Remove(id);
    jobs_.erase(it);
  }
}

size_t Controller::JobsInMemory() const {
  MutexLock lock(&mu_);
  return jobs_.size();
}

Result<v1::ListJobsResponse> Controller::ListJobs(const v1::ListJobsRequest& request) {
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
  MutexLock lock(&mu_);
  // The store has every job, in the state memory has (written through); memory adds the progress.
  EFT_ASSIGN_OR_RETURN(auto records, store_->ListJobs(max_id, states, page_size + 1));
  v1::ListJobsResponse out;
  for (auto& rec : records) {
    if (out.jobs_size() == page_size) {
      out.set_next_page_token(rec.id);  // a matching job exists beyond this page
      break;
    }
    if (const JobEntry* j = FindJob(rec.id)) {
      *out.add_jobs() = ToProto(*j, false);
    } else {
      JobEntry finished;
      finished.rec = std::move(rec);
      *out.add_jobs() = ToProto(finished, false);
    }
  }
  return out;
}

}  // namespace eft::controller
