// PlanReconcile: desired vs known ranks -> start, stop, forget, and which attempt specs to drop.
#include "worker/reconcile.h"

#include <gtest/gtest.h>

namespace eft::worker {
namespace {

using Desired = google::protobuf::RepeatedPtrField<v1::RankAssignment>;

v1::RankAssignment Assignment(const std::string& job, int attempt, int rank) {
  v1::RankAssignment a;
  a.mutable_key()->set_job_id(job);
  a.mutable_key()->set_attempt(attempt);
  a.mutable_key()->set_rank(rank);
  a.set_world_size(4);
  return a;
}

Desired DesiredOf(std::initializer_list<v1::RankAssignment> list) {
  Desired d;
  for (const auto& a : list) *d.Add() = a;
  return d;
}

std::vector<RankId> StartedKeys(const ReconcilePlan& plan) {
  std::vector<RankId> out;
  for (const auto& a : plan.start) out.push_back(RankIdOf(a.key()));
  return out;
}

const RankId kA0{"a", 1, 0};
const RankId kA1{"a", 1, 1};
const RankId kB0{"b", 2, 0};
const AttemptId kA{"a", 1};
const AttemptId kB{"b", 2};

TEST(PlanReconcileTest, StartsDesiredRanksItDoesNotKnow) {
  ReconcilePlan plan = PlanReconcile(DesiredOf({Assignment("a", 1, 1), Assignment("a", 1, 0)}), {}, {kA}, false);
  EXPECT_EQ(StartedKeys(plan), (std::vector<RankId>{kA0, kA1}));
  EXPECT_EQ(plan.start[1].world_size(), 4);  // the assignment itself, not just its key
  EXPECT_TRUE(plan.stop.empty());
  EXPECT_TRUE(plan.forget.empty());
  EXPECT_TRUE(plan.awaiting_spec.empty());
  EXPECT_TRUE(plan.forget_specs.empty());
}

TEST(PlanReconcileTest, KeepsDesiredRanksInWhateverStateTheyAre) {
  std::map<RankId, v1::RankState> known = {{kA0, v1::RANK_STATE_RUNNING},
                                           {kA1, v1::RANK_STATE_EXITED},
                                           {kB0, v1::RANK_STATE_FAILED_TO_START}};
  ReconcilePlan plan = PlanReconcile(DesiredOf({Assignment("a", 1, 0), Assignment("a", 1, 1), Assignment("b", 2, 0)}),
                                     known, {kA, kB}, false);
  // An exited or failed rank is not started again under the same key: the controller restarts a
  // job as a new attempt.
  EXPECT_TRUE(plan.start.empty());
  EXPECT_TRUE(plan.stop.empty());
  EXPECT_TRUE(plan.forget.empty());
  EXPECT_TRUE(plan.forget_specs.empty());
}

TEST(PlanReconcileTest, StopsRunningRanksNoLongerDesired) {
  std::map<RankId, v1::RankState> known = {{kA0, v1::RANK_STATE_RUNNING}, {kB0, v1::RANK_STATE_RUNNING}};
  ReconcilePlan plan = PlanReconcile(DesiredOf({Assignment("b", 2, 0)}), known, {kA, kB}, false);
  EXPECT_EQ(plan.stop, (std::vector<RankId>{kA0}));
  EXPECT_TRUE(plan.start.empty());
  EXPECT_TRUE(plan.forget.empty());
  // Attempt a still has a rank (stopping once the plan is applied).
  EXPECT_TRUE(plan.forget_specs.empty());
}

TEST(PlanReconcileTest, LeavesStoppingRanksAlone) {
  std::map<RankId, v1::RankState> known = {{kA0, v1::RANK_STATE_STOPPING}};
  ReconcilePlan plan = PlanReconcile({}, known, {kA}, false);
  EXPECT_TRUE(plan.stop.empty());
  EXPECT_TRUE(plan.forget.empty());
  EXPECT_TRUE(plan.forget_specs.empty());
}

TEST(PlanReconcileTest, ForgetsExitedRanksNoLongerDesiredAndTheirSpec) {
  std::map<RankId, v1::RankState> known = {{kA0, v1::RANK_STATE_EXITED},
                                           {kA1, v1::RANK_STATE_FAILED_TO_START},
                                           {kB0, v1::RANK_STATE_EXITED}};
  ReconcilePlan plan = PlanReconcile(DesiredOf({Assignment("b", 2, 0)}), known, {kA, kB}, false);
  EXPECT_EQ(plan.forget, (std::vector<RankId>{kA0, kA1}));
  EXPECT_TRUE(plan.stop.empty());
  EXPECT_EQ(plan.forget_specs, (std::vector<AttemptId>{kA}));
}

TEST(PlanReconcileTest, DrainingStartsNothingAndStopsEverything) {
  std::map<RankId, v1::RankState> known = {{kA0, v1::RANK_STATE_RUNNING},
                                           {kA1, v1::RANK_STATE_EXITED},
                                           {kB0, v1::RANK_STATE_STOPPING}};
  ReconcilePlan plan = PlanReconcile(
      DesiredOf({Assignment("a", 1, 0), Assignment("a", 1, 1), Assignment("a", 1, 2), Assignment("b", 2, 0)}), known,
      {kA, kB}, true);
  EXPECT_TRUE(plan.start.empty());
  EXPECT_TRUE(plan.awaiting_spec.empty());
  EXPECT_EQ(plan.stop, (std::vector<RankId>{kA0}));
  EXPECT_EQ(plan.forget, (std::vector<RankId>{kA1}));
  EXPECT_TRUE(plan.forget_specs.empty());  // both attempts still have a live rank
}

TEST(PlanReconcileTest, DoesNotStartARankWhoseAttemptSpecIsUnknown) {
  ReconcilePlan plan = PlanReconcile(DesiredOf({Assignment("a", 1, 0), Assignment("b", 2, 0)}), {}, {kB}, false);
  EXPECT_EQ(StartedKeys(plan), (std::vector<RankId>{kB0}));
  EXPECT_EQ(plan.awaiting_spec, (std::vector<RankId>{kA0}));
  // Once the next reply brings it, the rank starts.
  plan = PlanReconcile(DesiredOf({Assignment("a", 1, 0), Assignment("b", 2, 0)}), {{kB0, v1::RANK_STATE_RUNNING}},
                       {kA, kB}, false);
  EXPECT_EQ(StartedKeys(plan), (std::vector<RankId>{kA0}));
  EXPECT_TRUE(plan.awaiting_spec.empty());
}

TEST(PlanReconcileTest, KeepsTheSpecOfAnAttemptWithADesiredRankOnly) {
  // A spec that arrived with the reply whose desired rank is not started yet must survive, and so
  // must the spec of a desired rank the worker already knows; one nobody needs goes.
  ReconcilePlan plan = PlanReconcile(DesiredOf({Assignment("a", 1, 0)}), {}, {kA, kB}, false);
  EXPECT_EQ(StartedKeys(plan), (std::vector<RankId>{kA0}));
  EXPECT_EQ(plan.forget_specs, (std::vector<AttemptId>{kB}));
}

TEST(PlanReconcileTest, ADuplicateDesiredKeyStartsOnce) {
  v1::RankAssignment later = Assignment("a", 1, 0);
  later.set_world_size(8);
  ReconcilePlan plan = PlanReconcile(DesiredOf({Assignment("a", 1, 0), later}), {}, {kA}, false);
  ASSERT_EQ(plan.start.size(), 1u);
  EXPECT_EQ(plan.start[0].world_size(), 8);
}

}  // namespace
}  // namespace eft::worker
