// The controller's durable records: one struct per SQLite table. The in-memory state of the
// controller is built from these at start and every change is written through Store before it is
// acted on. Times are wall-clock milliseconds since the Unix epoch (0 = unset).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eft/v1/job.pb.h"
#include "eft/v1/spec.pb.h"

namespace eft::controller {

// Whether `text` is a job id as this controller writes them: a positive integer without sign, spaces
// or leading zeros, at most 18 digits (docs/openapi.yaml: '^[1-9][0-9]{0,17}$'). Page tokens are too.
inline bool IsJobId(const std::string& text) {
  if (text.empty() || text.size() > 18 || text[0] < '1' || text[0] > '9') return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

struct JobRecord {
  std::string id;  // assigned by Store::InsertJob: "1", "2", ... (SQLite rowid, never reused)
  std::string request_id;  // idempotency key of the submit; may be empty
  v1::JobSpec spec;        // normalized (defaults filled)
  v1::JobState state = v1::JOB_STATE_QUEUED;
  std::string reason;
  int64_t create_ms = 0;
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  int32_t attempt = 0;   // number of the newest attempt, 0 before the first
  int32_t restarts = 0;  // failures counted against max_restarts
  // Earliest wall time the next attempt may start (restart backoff); 0 = now.
  int64_t not_before_ms = 0;
  // The user whose token submitted it (docs/auth.md); "" when auth was not configured.
  std::string owner;
};

struct AttemptRecord {
  std::string job_id;
  int32_t number = 0;
  int32_t world_size = 0;
  int32_t ranks_per_node = 0;
  std::vector<std::string> nodes;  // rank order
  std::vector<std::vector<int>> slots;  // per node (same order): the slot of local rank 0, 1, ...
  std::string master_addr;
  int32_t master_port = 0;
  std::string resume_from;
  int64_t start_ms = 0;
  int64_t end_ms = 0;  // 0 while running
  std::string end_reason;  // in words, for people; `end` says it for the code
  // The highest step it reached: the step it resumed from, then the newest a rank reported (also
  // after it ended, while its ranks finish the step they are in). 0: a fresh start, or not known
  // (rows from schema 2). What the next attempt's "N steps lost" is measured against.
  int64_t reached_step = 0;
  v1::AttemptEnd end = v1::ATTEMPT_END_UNSPECIFIED;  // what decisions read; unspecified while it runs
  // The step it resumed from (0: a fresh start); -1: not known (rows from schema 7 and before).
  int64_t resume_step = -1;
};

struct NodeRecord {
  std::string name;
  std::string address;  // as the worker was given it (--address)
  int32_t slots = 0;
  bool drained = false;
  std::string version;
  int64_t registered_ms = 0;
  // Whether the node was LOST when last written; READY nodes are re-verified by heartbeats after a
  // controller restart anyway.
  bool lost = false;
  std::string state_reason;
  // The numeric address rank traffic uses (RegisterRequest.data_address); "": an older worker, whose
  // `address` is used instead (DataAddressOf).
  std::string data_address;
  // RegisterRequest.network_stack: nodes with the same one reach each other over loopback; "": not known.
  std::string network_stack;
};

// Where ranks on `n` are reached: MASTER_ADDR when it hosts rank 0.
inline const std::string& DataAddressOf(const NodeRecord& n) {
  return n.data_address.empty() ? n.address : n.data_address;
}

struct CheckpointRecord {
  std::string job_id;
  int64_t step = 0;
  std::string kind;  // sharded | full
  std::string path;
  int64_t bytes = 0;
  int32_t attempt = 0;
  int64_t time_ms = 0;
};

struct EventRecord {
  std::string job_id;
  int64_t time_ms = 0;
  std::string type;
  int32_t attempt = 0;
  std::string message;
};

// The MLflow run a job is logged to (docs/tracking.md, "MLflow"; controller/tracking/).
struct MlflowRunRecord {
  std::string job_id;
  std::string run_key;        // the run's eft.run_key tag, chosen at submit
  std::string experiment_id;  // "" until the run is made
  std::string run_id;         // "" until the run is made
  bool ended = false;         // the server took the run's end (its final status)
};

// One point of a job's loss curve (controller/loss_history.h): the mean of `samples` reported
// losses, the last of them at `step`.
struct LossPointRecord {
  int64_t step = 0;
  double value = 0;
  int64_t samples = 1;
};
// The curves a job keeps: the train loss of its step events and the eval loss of its eval events,
// kEval + i for its eval set i (spec::EvalSetNames' order; EvalCurve(i)).
enum class LossCurve { kTrain = 0, kEval = 1 };
inline LossCurve EvalCurve(size_t set_index) {
  return static_cast<LossCurve>(static_cast<int>(LossCurve::kEval) + static_cast<int>(set_index));
}

}  // namespace eft::controller
