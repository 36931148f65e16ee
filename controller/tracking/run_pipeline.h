// RunPipeline: one job's way into its MLflow run, as a state machine without I/O, so that every rule
// of docs/tracking.md ("MLflow") is tested with a ManualClock and no server (run_pipeline_test.cc).
//
// Contract:
// - The tracker feeds it what the controller reports (Update: the job's state and attempts; Add:
//   metric points) and asks it for the next piece of work (Next), which it performs outside its
//   lock (an MLflow call, or a call into the controller) and hands back with the outcome (Finish).
//   One piece of work is out at a time.
// - Order of work: the experiment's id (kExperiment); the run, found by its eft.run_key tag or made
//   (kFindOrCreateRun), and its id stored (kSaveRun); for a run this controller made before (a stored
//   id, or one found by key), what the server already has (kGetRun): the highest step of each metric,
//   the params and tags; for a job handed over after a controller restart, the controller's stored
//   loss curves (kBackfill); then runs/log-batch calls (kLogBatch: params first, then tags that
//   changed, then points in the order they came); once the job ended and nothing waits, the run's
//   end (kEndRun) and that stored (kSaveEnded). Then done().
// - No point twice: a point at or below the highest step already queued or sent for its key is left
//   out (a step trained again after a restart keeps its first value), and so are points at or below
//   the server's highest step when the run is continued. A backfilled point fills only steps above
//   the server's highest and below the first step queued since.
// - Bounded: at most `max_points` points wait (ThinQueue thins the older half beyond that; counted
//   in dropped()). Params and tags are few and bounded by the spec and the attempts.
// - Failures: an outcome whose status is UNAVAILABLE or DEADLINE_EXCEEDED (the server down, slow,
//   overloaded, refusing credentials) puts the work back as it was: the tracker backs the server off
//   and asks again. Any other error is a rejection: a rejected batch is dropped (its points counted
//   in dropped(), the error in last_rejection()); a rejected experiment, run or end makes the
//   pipeline failed() (it is done, and says why). A call into the controller that fails is retried
//   by the pipeline itself after a second.
//
// Not thread-safe: the tracker holds it under its lock.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "controller/records.h"
#include "controller/tracking/job_tracking.h"
#include "controller/tracking/mlflow_batch.h"

namespace eft::controller::mlflow {

struct Metric {
  std::string key;
  double value = 0;
  int64_t time_ms = 0;
  int64_t step = 0;
};

// What a run on the server holds (runs/get): each metric's highest step, the params' keys, the tags.
struct RunData {
  std::string status;  // RUNNING, FINISHED, ...
  std::map<std::string, int64_t> max_step;
  std::set<std::string> params;
  std::map<std::string, std::string> tags;
};

struct Work {
  enum class Kind { kNone, kExperiment, kFindOrCreateRun, kSaveRun, kGetRun, kBackfill, kLogBatch, kEndRun, kSaveEnded };
  Kind kind = Kind::kNone;
  std::string job_id;
  std::string uri;
  std::string experiment;     // kExperiment: its name
  std::string experiment_id;  // kFindOrCreateRun
  std::string run_id;         // kGetRun, kLogBatch, kEndRun
  MlflowRunRecord row;        // kFindOrCreateRun (run_key), kSaveRun, kSaveEnded
  std::string run_name;       // kFindOrCreateRun
  int64_t start_ms = 0;       // kFindOrCreateRun
  std::vector<KeyValue> create_tags;  // kFindOrCreateRun
  std::vector<KeyValue> params;       // kLogBatch
  std::vector<KeyValue> tags;         // kLogBatch
  std::vector<Metric> metrics;        // kLogBatch
  std::vector<QueuedPoint> points;    // kLogBatch: `metrics` as queued, to put back on a retry
  std::string status;                 // kEndRun
  int64_t end_ms = 0;                 // kEndRun
};

struct Outcome {
  Status status;
  std::string id;                     // kExperiment: the experiment's; kFindOrCreateRun: the run's
  bool existed = false;               // kFindOrCreateRun: found by its run key, not made
  RunData run;                        // kGetRun
  std::vector<TrackedPoint> curves;   // kBackfill
};

// UNAVAILABLE or DEADLINE_EXCEEDED: the call may succeed later; anything else is a rejection.
bool IsRetryable(const Status& status);

class RunPipeline {
 public:
  // `stored`: the job's mlflow_runs row. `resumed`: handed over after a controller restart, so the
  // points before the restart must come from the store (kBackfill).
  RunPipeline(const TrackedJob& job, const MlflowRunRecord& stored, bool resumed, size_t max_points);

  void Update(const TrackedJob& job);
  void Add(const std::vector<TrackedPoint>& points, SteadyTime now);

  // The next piece of work, or kNone (nothing to do until more comes, or done()). `wall_ms` stamps
  // backfilled points and an end the job's record does not date.
  Work Next(SteadyTime now, int64_t wall_ms);
  void Finish(Work work, const Outcome& outcome, SteadyTime now, int64_t wall_ms);

  const std::string& job_id() const { return job_id_; }
  const std::string& uri() const { return uri_; }
  const std::string& run_id() const { return row_.run_id; }
  bool done() const { return phase_ == Phase::kDone || phase_ == Phase::kFailed; }
  bool failed() const { return phase_ == Phase::kFailed; }
  const std::string& failure() const { return failure_; }
  bool busy() const { return busy_; }  // a piece of work is out
  // Metric points not sent yet (queued, or out in a batch), and when the oldest was queued.
  size_t pending_points() const { return queue_.size() + inflight_points_; }
  std::optional<SteadyTime> oldest_pending() const;
  // Whether anything waits to go to the server (points, params, tags, the run or its end).
  bool has_work() const;
  uint64_t sent_points() const { return sent_points_; }
  uint64_t dropped_points() const { return dropped_points_; }
  const std::string& last_rejection() const { return last_rejection_; }

 private:
  enum class Phase { kExperiment, kRun, kSaveRun, kGetRun, kBackfill, kStream, kEnd, kSaveEnded, kDone, kFailed };
  uint32_t KeyIndex(const std::string& key);
  void Push(const TrackedPoint& p, SteadyTime now, bool front);
  std::vector<KeyValue> ChangedTags() const;
  void Fail(const std::string& why);
  void FinishStream(Work& work, const Outcome& outcome, SteadyTime now);
  void Backfill(const std::vector<TrackedPoint>& curves, SteadyTime now, int64_t wall_ms);

  const std::string job_id_;
  const std::string uri_;
  const std::string experiment_;
  const size_t max_points_;
  const bool resumed_;
  bool continued_ = false;  // the run existed before this pipeline: ask what it has (kGetRun)
  MlflowRunRecord row_;
  TrackedJob job_;
  Phase phase_ = Phase::kExperiment;
  bool busy_ = false;
  std::string failure_;
  SteadyTime retry_at_{};  // after a failed call into the controller

  std::vector<std::string> keys_;  // QueuedPoint::key -> name
  std::deque<QueuedPoint> queue_;
  size_t inflight_points_ = 0;
  std::optional<SteadyTime> inflight_oldest_;
  // Per key: the highest step queued or sent, and what the server had when the run was continued.
  std::map<uint32_t, int64_t> last_step_;
  std::map<std::string, int64_t> server_max_step_;
  std::vector<KeyValue> params_;                 // not sent yet
  std::map<std::string, std::string> sent_tags_;  // what the run has
  uint64_t sent_points_ = 0;
  uint64_t dropped_points_ = 0;
  std::string last_rejection_;
};

}  // namespace eft::controller::mlflow
