// Conversions from the controller's records (records.h) to the eft.v1 messages clients see. Pure
// functions: what is shown is decided here, not where the state is kept; the Controller passes in
// the facts only it knows (whether an attempt runs, which jobs a node carries).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "controller/records.h"
#include "eft/v1/job.pb.h"
#include "eft/v1/node.pb.h"

namespace eft::controller {

// A job as its records hold it.
struct JobView {
  const JobRecord& rec;
  const std::vector<AttemptRecord>& attempts;
  const std::vector<CheckpointRecord>& checkpoints;
  const std::vector<EventRecord>& events;
  const v1::TrainingProgress& progress;  // step 0: none reported yet (then not shown)
  int32_t running_world_size = 0;        // of the running attempt; 0 when none runs
  // The loss curves (loss_history.h); null: none.
  const std::vector<LossPointRecord>* train_loss = nullptr;
  // Each eval set's (name, curve), in the spec's order (spec::EvalSetNames); the first is
  // LossHistory.eval, those with points LossHistory.eval_sets.
  std::vector<std::pair<std::string, const std::vector<LossPointRecord>*>> eval_loss;
};

// `full`: with attempts, checkpoints, events and the loss history (GetJob); without, the summary ListJobs shows.
v1::Job JobToProto(const JobView& job, bool full);
v1::Attempt AttemptToProto(const AttemptRecord& attempt);
v1::Checkpoint CheckpointToProto(const CheckpointRecord& checkpoint);
v1::JobEvent EventToProto(const EventRecord& event);

// `last_heartbeat_ms` 0: none since the controller started; `jobs`: the jobs with ranks placed on or
// still running on the node.
v1::Node NodeToProto(const NodeRecord& node, bool ready, int64_t last_heartbeat_ms, const std::set<std::string>& jobs);

}  // namespace eft::controller
