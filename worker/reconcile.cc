#include "worker/reconcile.h"

namespace eft::worker {

ReconcilePlan PlanReconcile(const google::protobuf::RepeatedPtrField<v1::RankAssignment>& desired,
                            const std::map<RankId, KnownRank>& known, const std::set<AttemptId>& specs,
                            bool draining) {
  ReconcilePlan plan;
  std::map<RankId, const v1::RankAssignment*> want;
  if (!draining) {
    for (const auto& a : desired) want[RankIdOf(a.key())] = &a;
  }

  std::set<AttemptId> needed;  // attempts with a desired rank or a rank the worker keeps
  for (const auto& [id, a] : want) needed.insert(AttemptIdOf(id));
  for (const auto& [id, rank] : known) {
    if (want.count(id)) continue;
    if (rank.state == v1::RANK_STATE_RUNNING) {
      plan.stop.push_back(id);
      needed.insert(AttemptIdOf(id));
    } else if (rank.state == v1::RANK_STATE_STOPPING || !rank.end_reported) {
      needed.insert(AttemptIdOf(id));
    } else {
      plan.forget.push_back(id);
    }
  }
  for (const auto& [id, a] : want) {
    if (known.count(id)) continue;
    if (specs.count(AttemptIdOf(id))) {
      plan.start.push_back(*a);
    } else {
      plan.awaiting_spec.push_back(id);
    }
  }
  for (const auto& attempt : specs) {
    if (!needed.count(attempt)) plan.forget_specs.push_back(attempt);
  }
  return plan;
}

}  // namespace eft::worker
