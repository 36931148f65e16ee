// MlflowTracker: logs each job whose spec names an MLflow tracking server as one MLflow run
// (docs/tracking.md, "MLflow"): the normalized spec as params, train/* and eval/<set>/loss by step,
// the state and attempts as tags, the run ended with the job's final state.
//
// Contract:
// - The controller tells it everything as a JobTrackingObserver, with the controller's lock held.
//   Those calls only copy what they are given into memory under the tracker's own mutex: no I/O,
//   no waiting on a server, so MLflow never slows or fails training or the controller.
// - One thread (Start; tests call RunOnce with a ManualClock instead) does all the talking: every
//   flush_interval it takes each job with something to send (its RunPipeline, run_pipeline.h) and
//   makes calls until the job has nothing left or its server fails. No call is made with the
//   tracker's lock or the controller's held; the controller is reached only through Hooks, on that
//   thread, without the tracker's lock (store a run row, append a job event, read stored curves).
// - A server that fails (no connection, no reply within `timeout`, HTTP 5xx/429/401/403) is left
//   alone for 1 s, then 2 s, 4 s ... at most retry_max between tries; meanwhile its jobs' points
//   wait, each job at most max_pending_points (beyond that the older half is thinned: ThinQueue).
//   Nothing is dropped while a server is down, short of that bound.
// - Visible (RegisterMetrics): eft_mlflow_pending_points, eft_mlflow_delay_seconds (the age of the
//   oldest point not sent), eft_mlflow_open_runs, eft_mlflow_points_sent_total,
//   eft_mlflow_points_dropped_total, eft_mlflow_send_failures_total. Job events: once a server has
//   failed for unreachable_event_after, each job with something waiting for it gets
//   `mlflow_unreachable` (at most one per job per event_interval) and, when the server answers
//   again, `mlflow_recovered`; `mlflow_rejected` the first time a server refuses a batch of a job;
//   `mlflow_failed` when its run cannot be logged at all (a deleted experiment, a deleted run).
// - A job leaves once its run is ended and that is stored, or its run failed; a job the tracker does
//   not hold (ended, failed) is ignored when the controller reports it again.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "controller/config.h"
#include "controller/tracking/job_tracking.h"
#include "controller/tracking/mlflow_client.h"
#include "controller/tracking/run_pipeline.h"

namespace eft::controller::mlflow {

struct MlflowTrackerOptions {
  std::chrono::milliseconds timeout{10000};  // one call, connecting included
  std::chrono::milliseconds flush_interval{1000};
  std::chrono::milliseconds retry_initial{1000};
  std::chrono::milliseconds retry_max{30000};
  std::chrono::milliseconds unreachable_event_after{60000};
  std::chrono::milliseconds event_interval{600000};
  size_t max_pending_points = 50000;  // per job
  int max_calls_per_job_per_pass = 50;
  static MlflowTrackerOptions FromConfig(const ControllerConfig& config);
};

class MlflowTracker final : public JobTrackingObserver {
 public:
  // Called on the tracker's thread, never with its lock held.
  struct Hooks {
    std::function<Status(const MlflowRunRecord&)> save_run;
    std::function<Status(const std::string& job_id, const std::string& type, const std::string& message)> add_event;
    std::function<Result<std::vector<TrackedPoint>>(const std::string& job_id)> stored_curves;
  };
  MlflowTracker(MlflowTrackerOptions options, Clock* clock, Hooks hooks);
  ~MlflowTracker() override;  // Stop(); unregisters its metrics
  MlflowTracker(const MlflowTracker&) = delete;
  MlflowTracker& operator=(const MlflowTracker&) = delete;

  void OnJob(const TrackedJob& job, const MlflowRunRecord* stored) override EXCLUDES(mu_);
  void OnPoints(const std::string& job_id, const std::vector<TrackedPoint>& points) override EXCLUDES(mu_);

  void Start() EXCLUDES(mu_);
  // Stops the thread; first, one last pass for the servers that are not failing (a clean shutdown
  // sends what was queued). Idempotent.
  void Stop() EXCLUDES(mu_, run_mu_);
  // One pass of the thread (tests call it with a ManualClock instead of Start).
  void RunOnce() EXCLUDES(mu_, run_mu_);

  struct Stats {
    size_t pending_points = 0;
    double delay_seconds = 0;
    size_t open_runs = 0;
    uint64_t sent_points = 0;
    uint64_t dropped_points = 0;
    uint64_t send_failures = 0;
  };
  Stats stats() const EXCLUDES(mu_);
  // Registers the eft_mlflow_* families on `registry`, which must outlive this tracker.
  Status RegisterMetrics(MetricsRegistry* registry) EXCLUDES(mu_);

 private:
  struct Server {
    int failures = 0;
    SteadyTime retry_at{};
    std::optional<SteadyTime> down_since;
    std::string last_error;
  };
  struct Job {
    std::unique_ptr<RunPipeline> pipeline;
    bool warned = false;  // told it of an outage (mlflow_unreachable) and not yet of the recovery
    std::optional<SteadyTime> last_warning;
    bool rejection_reported = false;
    uint64_t rejections = 0;
  };
  struct Event {
    std::string job_id, type, message;
  };

  void RunPass(bool only_healthy) EXCLUDES(mu_) REQUIRES(run_mu_);
  Outcome Perform(const Work& work) REQUIRES(run_mu_);
  Result<MlflowClient*> Client(const std::string& uri) REQUIRES(run_mu_);
  // After a call to `uri` (not a hook) ended with `status`: the server's backoff and the events of
  // an outage that ended.
  void NoteCall(const std::string& uri, const Status& status, SteadyTime now, std::vector<Event>* events) REQUIRES(mu_);
  void NoteOutages(SteadyTime now, std::vector<Event>* events) REQUIRES(mu_);
  void Emit(const std::vector<Event>& events) EXCLUDES(mu_);

  const MlflowTrackerOptions options_;
  Clock* const clock_;
  const Hooks hooks_;

  mutable Mutex mu_;
  CondVar wake_;
  std::map<std::string, Job> jobs_ GUARDED_BY(mu_);
  std::map<std::string, Server> servers_ GUARDED_BY(mu_);
  uint64_t sent_points_ GUARDED_BY(mu_) = 0;     // of jobs that left, and of those still here
  uint64_t dropped_points_ GUARDED_BY(mu_) = 0;  // likewise
  uint64_t send_failures_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;

  // The thread's own: one pass at a time.
  Mutex run_mu_;
  std::map<std::string, std::unique_ptr<MlflowClient>> clients_ GUARDED_BY(run_mu_);
  std::map<std::pair<std::string, std::string>, std::string> experiments_ GUARDED_BY(run_mu_);  // (uri, name) -> id

  std::thread thread_;
  MetricsRegistry* registry_ = nullptr;
  std::vector<std::string> families_;
};

}  // namespace eft::controller::mlflow
