// What a rank event (one line of a rank's EFT_EVENTS_FD, relayed by its worker) means to the
// controller, decided as a pure function of the event and the job's current attempt: no state, no
// store, no clock. The controller then applies the effect under its lock (agents.cc), so every
// rule about which events count lives here and is unit-tested on its own.
#pragma once

#include <string>
#include <vector>

#include "controller/records.h"
#include "eft/v1/agent.pb.h"
#include "eft/v1/job.pb.h"

namespace eft::controller {

// The job event a failed checkpoint save becomes (rank::CheckpointFailedEvent); counted by
// eft_job_checkpoint_failures_total.
inline constexpr const char* kCheckpointFailedEvent = "checkpoint_failed";

struct RankEventEffect {
  enum class Kind {
    kIgnore,            // nothing to do (`problem` says why when the line was malformed)
    kProgress,          // a step of the current attempt: `progress`
    kRecordCheckpoint,  // store `checkpoint` (idempotent by path); `seconds`/`stall_seconds` for metrics
    kForgetCheckpoint,  // retention deleted `checkpoint.path`
    kRankError,         // the current attempt's rank `rank` is failing because of `message`
    kJobEvent,          // a job event row: `event_type`, `message`
    kEval,              // an evaluation of the current attempt: `progress`'s eval_* fields, of eval
                        // set `eval_set` (spec::EvalSetNames()[eval_index])
  };
  Kind kind = Kind::kIgnore;
  std::string problem;  // kIgnore: why the event could not be used ("" for a type the controller skips)
  v1::TrainingProgress progress;
  CheckpointRecord checkpoint;
  double seconds = -1;        // writing the checkpoint; < 0: not reported
  double stall_seconds = -1;  // the step loop waiting for it; < 0: not reported
  int rank = -1;
  std::string eval_set;
  int eval_index = 0;
  std::string event_type;
  std::string message;
};

// A checkpoint an older attempt reports after a newer one started (a `kJobEvent` of this type
// instead of `kRecordCheckpoint`): its node was cut off from the controller, its ranks trained on,
// and what they committed may postdate the newer attempt's start, so no later attempt is handed it
// (docs/checkpoints.md, "Fencing": the trainer keeps such checkpoints out of its resume too).
inline constexpr const char* kLateCheckpointEvent = "late_checkpoint";

// `current_attempt`: the job's newest attempt. Progress and errors of older attempts are ignored
// (their ranks are being stopped), and so are their checkpoints reported since (a
// kLateCheckpointEvent says so): an attempt's checkpoints count while it is the newest, including
// the stop checkpoint that an ended attempt's ranks report before the next attempt starts. Deleted
// checkpoints are forgotten whoever reports the deletion.
RankEventEffect InterpretRankEvent(const v1::RankEvent& event, int current_attempt);

// The names of a job's eval curves, in the index order of its eval events: spec::EvalSetNames, or
// one "eval" for a spec that names no eval data (a program of its own, spec.command, may still
// report evaluations).
std::vector<std::string> EvalCurveNames(const v1::JobSpec& spec);
// Whether a kEval effect belongs to the job: the spec's set at that index (any name at index 0 when
// the spec names none), so a rank cannot make the controller keep curves the job does not have.
bool IsJobEvalSet(const v1::JobSpec& spec, int index, const std::string& set);

}  // namespace eft::controller
