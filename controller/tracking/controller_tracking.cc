// Controller: its side of run tracking (docs/tracking.md): the observer that hears of tracked jobs,
// and what the tracker's thread asks of the controller (storing run rows, job events, stored curves).
#include <utility>

#include "common/logging.h"
#include "controller/controller.h"
#include "controller/rank_events.h"

namespace eft::controller {

void Controller::NotifyTracking(const JobEntry& job, const MlflowRunRecord* stored) {
  if (tracking_ == nullptr || MlflowUriOf(job.rec.spec).empty()) return;
  tracking_->OnJob(TrackedJobOf(job), stored);
}

Status Controller::SetTrackingObserver(JobTrackingObserver* observer) {
  MutexLock lock(&mu_);
  tracking_ = observer;
  if (observer == nullptr) return Status::Ok();
  // The runs not ended: their jobs running on, or ended while the server could not be told.
  EFT_ASSIGN_OR_RETURN(auto open, store_->LoadOpenMlflowRuns());
  for (const MlflowRunRecord& run : open) {
    JobEntry scratch;
    auto job = jobs_.Read(run.job_id, &scratch);
    if (!job.ok()) {
      EFT_LOG(WARNING) << "MLflow run of job " << run.job_id << ": " << job.status() << "; not continued";
      continue;
    }
    if (MlflowUriOf((*job)->rec.spec).empty()) continue;
    observer->OnJob(TrackedJobOf(**job), &run);
  }
  if (!open.empty()) EFT_LOG(INFO) << "MLflow: continuing " << open.size() << " run(s) not ended yet";
  return Status::Ok();
}

Status Controller::SaveMlflowRun(const MlflowRunRecord& run) {
  MutexLock lock(&mu_);
  return store_->UpdateMlflowRun(run);
}

Status Controller::AddJobEvent(const std::string& job_id, const std::string& type, const std::string& message) {
  MutexLock lock(&mu_);
  if (JobEntry* j = jobs_.Find(job_id)) {
    JobChange change{j->rec, {}, {}, {}};
    change.events.push_back(jobs_.MakeEvent(*j, type, message));
    return jobs_.Apply(*j, std::move(change));
  }
  // Finished and out of memory: the event goes to the store, where describe reads it.
  JobEntry scratch;
  EFT_ASSIGN_OR_RETURN(const JobEntry* j, jobs_.Read(job_id, &scratch));
  EFT_LOG(INFO) << "job " << job_id << " [" << type << "] " << message;
  return store_->AppendEvent(jobs_.MakeEvent(*j, type, message));
}

Result<std::vector<TrackedPoint>> Controller::StoredLossCurves(const std::string& job_id) {
  MutexLock lock(&mu_);
  JobEntry scratch;
  EFT_ASSIGN_OR_RETURN(const JobEntry* j, jobs_.Read(job_id, &scratch));
  std::vector<TrackedPoint> out;
  for (const LossPointRecord& p : j->train_loss.points()) out.push_back({kTrainLossKey, p.step, p.value, 0});
  const std::vector<std::string> names = EvalCurveNames(j->rec.spec);
  for (size_t i = 0; i < j->eval_loss.size() && i < names.size(); ++i) {
    for (const LossPointRecord& p : j->eval_loss[i].points()) out.push_back({EvalLossKey(names[i]), p.step, p.value, 0});
  }
  return out;
}

}  // namespace eft::controller
