// What the controller logs to an MLflow run and how it fits MLflow's limits (docs/tracking.md,
// "MLflow"): the spec as params, the job's tags, the split of what waits into runs/log-batch calls,
// the retry delay, and the bound on the points a job may queue. Pure functions: no clock, no I/O.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "controller/tracking/job_tracking.h"
#include "eft/v1/spec.pb.h"

namespace eft::controller::mlflow {

// MLflow's limits (mlflow/utils/validation.py, the same in 2.x and 3.x): one runs/log-batch carries
// at most 1000 metrics, 100 params and 100 tags, 1000 of them in all, in a body of at most 1 MB;
// a param value has at most 6000 characters, a tag value 8000, a key 250.
inline constexpr size_t kMaxMetricsPerBatch = 1000;
inline constexpr size_t kMaxParamsPerBatch = 100;
inline constexpr size_t kMaxTagsPerBatch = 100;
inline constexpr size_t kMaxEntitiesPerBatch = 1000;
inline constexpr size_t kMaxParamValueChars = 6000;
inline constexpr size_t kMaxTagValueChars = 8000;
inline constexpr size_t kMaxKeyChars = 250;
// What one batch's JSON may take: MLflow's 1 MB less room for the envelope.
inline constexpr size_t kBatchBytes = 900'000;

struct KeyValue {
  std::string key;
  std::string value;
  bool operator==(const KeyValue&) const = default;
};

// The normalized spec as params: each value at its dotted path in the spec's JSON ("training.lr" =
// "0.003", "resources.nodes.min" = "2"), lists as JSON text ("command" = "[\"a\",\"b\"]"), empty
// objects left out. The values of env entries whose names look secret (TOKEN, SECRET, PASSWORD,
// PASSWD, KEY, CREDENTIAL, AUTH) are "<redacted>", as is the user:password part of a URL in
// tracking.mlflow_tracking_uri. Values are cut to kMaxParamValueChars (the cut ones end in "...");
// keys longer than kMaxKeyChars are left out.
std::vector<KeyValue> SpecParams(const v1::JobSpec& spec);

// The run's tags for the job as it is now (docs/tracking.md): eft.job_id, eft.state, eft.attempts,
// eft.restarts, eft.world_size (of the newest attempt; 0 before the first), eft.attempt.<n> per
// attempt (AttemptTag), and eft.reason once the job ended.
std::map<std::string, std::string> JobTags(const TrackedJob& job);
// "start step 0, world size 2, running"; "start step 40, world size 3, ended at step 57: NODE_LOST
// (node node2 lost ...)" (the reason cut to 300 characters). A start step not known is "?".
std::string AttemptTag(const TrackedAttempt& attempt);
// The run status a terminal job ends its run with: FINISHED (SUCCEEDED), FAILED, KILLED (CANCELLED);
// "" for a job that has not ended.
std::string RunStatusFor(v1::JobState state);
// "QUEUED", "RUNNING", ...
std::string StateName(v1::JobState state);

// How much of what waits goes into the next runs/log-batch: params first, then tags (at most 100
// of each), then metrics, 1000 entities in all, their JSON within `byte_budget` (each entry's
// size estimated from its key and value lengths; `metric_bytes(i)` for the i-th metric waiting).
// Always takes at least one entry when any waits.
struct BatchSize {
  size_t params = 0;
  size_t tags = 0;
  size_t metrics = 0;
};
BatchSize PlanBatch(const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags, size_t metrics_waiting,
                    const std::function<size_t(size_t)>& metric_bytes, size_t byte_budget = kBatchBytes);
// A metric's JSON size in a batch, about.
size_t MetricBytes(const std::string& key);

// The wait before the next call to a server after `failures` failed calls in a row (>= 1):
// initial, 2x, 4x ... capped at `max`.
std::chrono::milliseconds RetryDelay(int failures, std::chrono::milliseconds initial, std::chrono::milliseconds max);

// A metric point waiting to be sent: its key (an index into the job's key names), step, value, the
// rank's wall time, and when it was queued (the delay metric is the age of the oldest).
struct QueuedPoint {
  uint32_t key = 0;
  int64_t step = 0;
  double value = 0;
  int64_t time_ms = 0;
  SteadyTime queued{};
  bool precious = false;  // an evaluation: never thinned out
};

// Keeps `queue` within `bound` points (bound >= 2): while it is longer, every second distinct step
// among the points of its older half goes (all of the step's points, so what stays of a step is
// complete; evaluations stay), or, when that frees nothing, its oldest point. Returns how many
// points were dropped. The curve over a long outage keeps its shape at a coarser resolution.
size_t ThinQueue(std::deque<QueuedPoint>* queue, size_t bound);

}  // namespace eft::controller::mlflow
