// What the controller tells a run tracker (controller/tracking/mlflow_tracker.h) about the jobs it
// logs, in the controller's own terms, and the defaults of spec.tracking that the controller fills in
// at submit (docs/tracking.md).
//
// The controller calls a JobTrackingObserver with its lock held, from the managers that change a job
// (JobTable: submit, state, attempts) and read rank events (ProgressTracker: steps, evaluations), so
// an observer only copies what it is given into its own queue and returns: it must never block, do
// I/O, or call back into the controller. Only jobs whose stored spec names an MLflow server are
// reported (MlflowUriOf); which are is fixed at submit, in the job's stored spec.
//
// Part of eft_controller_core: no Boost, no HTTP.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "controller/config.h"
#include "controller/job_entry.h"
#include "controller/records.h"
#include "eft/v1/job.pb.h"
#include "eft/v1/spec.pb.h"

namespace eft::controller {

struct TrackedAttempt {
  int32_t number = 0;
  int32_t world_size = 0;
  int64_t resume_step = -1;  // -1: not known
  int64_t reached_step = 0;
  bool ended = false;
  v1::AttemptEnd end = v1::ATTEMPT_END_UNSPECIFIED;
  std::string end_reason;
};

// A job as a tracker sees it: its normalized stored spec, its state and its attempts.
struct TrackedJob {
  std::string id;
  v1::JobSpec spec;
  std::string owner;
  v1::JobState state = v1::JOB_STATE_QUEUED;
  std::string reason;
  int64_t create_ms = 0;
  int64_t end_ms = 0;
  int32_t restarts = 0;
  std::vector<TrackedAttempt> attempts;
};

// One metric value at a step, named as MLflow and TensorBoard show it (StepPoints, EvalPoint).
struct TrackedPoint {
  std::string key;
  int64_t step = 0;
  double value = 0;
  int64_t time_ms = 0;  // wall time of the rank's event; 0: not known (a point from a stored curve)
};

class JobTrackingObserver {
 public:
  virtual ~JobTrackingObserver() = default;
  // A tracked job was submitted or changed (state, attempts, events). `stored` is its mlflow_runs
  // row when the controller hands the job over: at submit, and for every run not ended when the
  // observer is set (after a restart); nullptr for later changes.
  virtual void OnJob(const TrackedJob& job, const MlflowRunRecord* stored) = 0;
  // Metric points of a tracked job, in the order its ranks reported them.
  virtual void OnPoints(const std::string& job_id, const std::vector<TrackedPoint>& points) = 0;
};

// The MLflow server a stored spec logs to: its tracking URI, or "" (unset or "off").
std::string MlflowUriOf(const v1::JobSpec& spec);

// Fills what `spec.tracking` leaves empty from the controller's settings, once the job has its id:
// tensorboard <- tensorboard_dir/<id> (when set); mlflow_tracking_uri <- mlflow_tracking_uri, else
// "off"; mlflow_experiment <- mlflow_experiment when MLflow is on. Returns whether it changed anything.
bool FillTrackingDefaults(const ControllerConfig& config, const std::string& job_id, v1::JobSpec* spec);

// A fresh random eft.run_key (32 hex digits).
std::string NewMlflowRunKey();

TrackedJob TrackedJobOf(const JobEntry& job);

// The metric names of docs/tracking.md, the same as eft-train's TensorBoard runs: train/loss,
// train/learning_rate, train/grad_norm, train/tokens_per_second, train/mfu (when > 0) of a step, and
// eval/<set>/loss. Values that are not finite are left out (MLflow's JSON cannot carry them).
inline constexpr const char* kTrainLossKey = "train/loss";
std::vector<TrackedPoint> StepPoints(const v1::TrainingProgress& progress, int64_t time_ms);
std::string EvalLossKey(const std::string& set);

}  // namespace eft::controller
