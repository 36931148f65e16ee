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

const KnownRank kRunning{v1::RANK_STATE_RUNNING};
const KnownRank kStopping{v1::RANK_STATE_STOPPING};
const KnownRank kExited{v1::RANK_STATE_EXITED, /*end_reported=*/true};
const KnownRank kFailedToStart{v1::RANK_STATE_FAILED_TO_START, /*end_reported=*/true};
const KnownRank kExitedUnreported{v1::RANK_STATE_EXITED, /*end_reported=*/false};

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
  std::map<RankId, KnownRank> known = {{kA0, kRunning},
                                           {kA1, kExited},
                                           {kB0, kFailedToStart}};
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
  std::map<RankId, KnownRank> known = {{kA0, kRunning}, {kB0, kRunning}};
  ReconcilePlan plan = PlanReconcile(DesiredOf({Assignment("b", 2, 0)}), known, {kA, kB}, false);
  EXPECT_EQ(plan.stop, (std::vector<RankId>{kA0}));
  EXPECT_TRUE(plan.start.empty());
  EXPECT_TRUE(plan.forget.empty());
  // Attempt a still has a rank (stopping once the plan is applied).
  EXPECT_TRUE(plan.forget_specs.empty());
}

TEST(PlanReconcileTest, LeavesStoppingRanksAlone) {
  std::map<RankId, KnownRank> known = {{kA0, kStopping}};
  ReconcilePlan plan = PlanReconcile({}, known, {kA}, false);
  EXPECT_TRUE(plan.stop.empty());
  EXPECT_TRUE(plan.forget.empty());
  EXPECT_TRUE(plan.forget_specs.empty());
}

TEST(PlanReconcileTest, ForgetsExitedRanksNoLongerDesiredAndTheirSpec) {
  std::map<RankId, KnownRank> known = {{kA0, kExited},
                                           {kA1, kFailedToStart},
                                           {kB0, kExited}};
  ReconcilePlan plan = PlanReconcile(DesiredOf({Assignment("b", 2, 0)}), known, {kA, kB}, false);
  EXPECT_EQ(plan.forget, (std::vector<RankId>{kA0, kA1}));
  EXPECT_TRUE(plan.stop.empty());
  EXPECT_EQ(plan.forget_specs, (std::vector<AttemptId>{kA}));
}

TEST(PlanReconcileTest, KeepsAnExitedRankUntilTheControllerHasSeenHowItEnded) {
  // It exited after the request that the reply being reconciled answers was sent: forgetting it now
  // would mean the controller never learns its exit.
  std::map<RankId, KnownRank> known = {{kA0, kExitedUnreported}, {kA1, kExited}};
  ReconcilePlan plan = PlanReconcile({}, known, {kA}, false);
  EXPECT_EQ(plan.forget, (std::vector<RankId>{kA1}));
  EXPECT_TRUE(plan.forget_specs.empty());
  plan = PlanReconcile({}, known, {kA}, true);
  EXPECT_EQ(plan.forget, (std::vector<RankId>{kA1}));
}

TEST(PlanReconcileTest, DrainingStartsNothingAndStopsEverything) {
  std::map<RankId, KnownRank> known = {{kA0, kRunning},
                                           {kA1, kExited},
                                           {kB0, kStopping}};
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
  plan = PlanReconcile(DesiredOf({Assignment("a", 1, 0), Assignment("b", 2, 0)}), {{kB0, kRunning}},
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
