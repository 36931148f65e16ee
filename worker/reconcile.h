// PlanReconcile: what the worker does to make the ranks it knows match the ranks the controller
// desires for this node. Pure (no processes, clock or locks); WorkerAgent applies the plan.
//
//  - A desired rank the worker does not know is started once its attempt's spec is known. The
//    controller sends an AttemptSpec only in the reply to a request that lists no rank of that
//    attempt, so a rank whose spec is missing now gets it with the next reply.
//  - A desired rank the worker knows is left as it is, whatever its state: a rank that exited is
//    never restarted in place (the controller restarts a job as a new attempt).
//  - A running rank that is not desired is stopped; a stopping one is left to finish.
//  - A rank that exited (or failed to start) and is not desired is forgotten once the controller
//    has acknowledged a report of how it ended; until then it stays, so that the next report has it.
//  - Draining (the worker is shutting down): nothing starts, every running rank is stopped and
//    every exited rank forgotten (once reported), desired or not.
//  - An attempt's spec is forgotten once no desired rank and no rank the worker still knows
//    (after the plan) belongs to that attempt.
#pragma once

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <google/protobuf/repeated_ptr_field.h>

#include "eft/v1/agent.pb.h"

namespace eft::worker {

using RankId = std::tuple<std::string, int, int>;  // job, attempt, rank
using AttemptId = std::pair<std::string, int>;     // job, attempt

inline RankId RankIdOf(const v1::RankKey& k) { return {k.job_id(), k.attempt(), k.rank()}; }
inline AttemptId AttemptIdOf(const v1::RankKey& k) { return {k.job_id(), k.attempt()}; }
inline AttemptId AttemptIdOf(const RankId& r) { return {std::get<0>(r), std::get<1>(r)}; }

// What the worker knows of one of its ranks.
struct KnownRank {
  v1::RankState state = v1::RANK_STATE_UNSPECIFIED;
  // A Register or Heartbeat that listed the rank in its final state (exited or failed to start) was
  // answered.
  bool end_reported = false;
};

struct ReconcilePlan {
  std::vector<v1::RankAssignment> start;  // in key order
  std::vector<RankId> stop;               // running ranks to stop
  std::vector<RankId> forget;             // exited ranks to drop from the worker's table
  std::vector<RankId> awaiting_spec;      // desired and unknown, but the attempt's spec is not known yet
  std::vector<AttemptId> forget_specs;    // cached specs no rank needs any more
};

// `known`: every rank the worker has in its table. `specs`: the attempts whose spec
// the worker has (cached or just received). A key desired twice counts once (the last one).
ReconcilePlan PlanReconcile(const google::protobuf::RepeatedPtrField<v1::RankAssignment>& desired,
                            const std::map<RankId, KnownRank>& known, const std::set<AttemptId>& specs,
                            bool draining);

}  // namespace eft::worker
