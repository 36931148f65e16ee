// PlanForWaitingJob (controller/priority_policy.h): who gives way to a waiting job, in which order,
// what it reserves, and the words of its wait (docs/architecture.md, "Priorities and preemption").
#include "controller/priority_policy.h"

#include <gtest/gtest.h>

namespace eft::controller {
namespace {

using Names = std::vector<std::string>;

PriorityNode Node(const std::string& name, int free, int slots = 1, bool usable = true) {
  PriorityNode n;
  n.name = name;
  n.usable = usable;
  n.slots = slots;
  n.free_slots = free;
  return n;
}

PriorityRunning Running(const std::string& id, int priority, Names nodes, int min, int slots = 1) {
  PriorityRunning r;
  r.id = id;
  r.priority = priority;
  r.order = std::stoll(id);
  r.nodes = std::move(nodes);
  r.min_nodes = min;
  r.slots_per_node = slots;
  return r;
}

PriorityWaiting Waiting(const std::string& id, int priority, int min, int slots = 1) {
  PriorityWaiting w;
  w.id = id;
  w.priority = priority;
  w.min_nodes = min;
  w.slots_per_node = slots;
  return w;
}

Names Jobs(const std::vector<Shrink>& shrinks) {
  Names out;
  for (const auto& s : shrinks) out.push_back(s.job);
  return out;
}

TEST(PriorityPolicy, EqualPriorityNeverPreemptsAndSaysWhoHoldsTheNodes) {
  std::vector<PriorityNode> nodes{Node("n1", 0), Node("n2", 0), Node("n3", 1)};
  std::vector<PriorityRunning> running{Running("7", 0, {"n1", "n2"}, 2)};
  PriorityPlan p = PlanForWaitingJob(Waiting("9", 0, 2), nodes, running);
  EXPECT_FALSE(p.acts());
  EXPECT_EQ(p.reason, "n1,n2 held by job 7 (priority 0, not lower) which is at its nodes.min");
  // It could run here one day: it holds the free node, so later jobs it outranks do not take it.
  EXPECT_EQ(p.reserve, (Names{"n3"}));
  // Higher priority is not lower either; an elastic holder is not "at its nodes.min".
  running = {Running("7", 3, {"n1", "n2"}, 1)};
  p = PlanForWaitingJob(Waiting("9", 0, 2), nodes, running);
  EXPECT_FALSE(p.acts());
  EXPECT_EQ(p.reason, "n1,n2 held by job 7 (priority 3, not lower)");
}

TEST(PriorityPolicy, ShrinksAnElasticJobOnlyAsFarAsNeededRankZerosNodeLast) {
  std::vector<PriorityNode> nodes{Node("n1", 0), Node("n2", 0), Node("n3", 0), Node("n4", 0)};
  std::vector<PriorityRunning> running{Running("7", 0, {"n2", "n1", "n3", "n4"}, 1)};
  PriorityPlan p = PlanForWaitingJob(Waiting("9", 1, 1), nodes, running);
  ASSERT_EQ(p.shrinks.size(), 1u);
  EXPECT_TRUE(p.preempt.empty());
  EXPECT_EQ(p.shrinks[0].job, "7");
  EXPECT_EQ(p.shrinks[0].give_up, (Names{"n4"}));
  EXPECT_EQ(p.shrinks[0].from_nodes, 4);
  EXPECT_EQ(p.shrinks[0].to_nodes, 3);
  EXPECT_EQ(p.reserve, (Names{"n4"}));
  EXPECT_EQ(p.reason, "freeing n4 from job 7 (priority 0), shrinking 4 -> 3");
  EXPECT_EQ(ShrinkWhat(p.shrinks[0], Waiting("9", 1, 1)), "for job 9 (priority 1): gives up n4, 4 -> 3 nodes");

  // Three needed: down to nodes.min, never below, and never rank 0's node (n2).
  p = PlanForWaitingJob(Waiting("9", 1, 3), nodes, running);
  ASSERT_EQ(p.shrinks.size(), 1u);
  EXPECT_EQ(p.shrinks[0].give_up, (Names{"n1", "n3", "n4"}));
  EXPECT_EQ(p.shrinks[0].to_nodes, 1);
  EXPECT_EQ(ShrinkWhat(p.shrinks[0], Waiting("9", 1, 3)), "for job 9 (priority 1): gives up n1,n3,n4, 4 -> 1 node");
  // Free nodes count first.
  nodes[3].free_slots = 1;
  running = {Running("7", 0, {"n2", "n1", "n3"}, 1)};
  p = PlanForWaitingJob(Waiting("9", 1, 2), nodes, running);
  ASSERT_EQ(p.shrinks.size(), 1u);
  EXPECT_EQ(p.shrinks[0].give_up, (Names{"n3"}));
  EXPECT_EQ(p.reserve, (Names{"n3", "n4"}));
}

TEST(PriorityPolicy, ShrinksEveryVictimBeforePreemptingAny) {
  // Job 5 (rigid, lowest) could free a node, but shrinking 7 and 8 is enough: nobody is preempted.
  std::vector<PriorityNode> nodes{Node("a", 0), Node("b", 0), Node("c", 0), Node("d", 0), Node("e", 0)};
  std::vector<PriorityRunning> running{Running("5", -1, {"a"}, 1), Running("7", 0, {"b", "c"}, 1),
                                       Running("8", 0, {"d", "e"}, 1)};
  PriorityPlan p = PlanForWaitingJob(Waiting("9", 1, 2), nodes, running);
  EXPECT_TRUE(p.preempt.empty());
  // Newest first within a priority: 8 before 7.
  EXPECT_EQ(Jobs(p.shrinks), (Names{"8", "7"}));
  EXPECT_EQ(p.reserve, (Names{"c", "e"}));
  EXPECT_EQ(p.reason, "freeing e from job 8 (priority 0), shrinking 2 -> 1, c from job 7 (priority 0), shrinking 2 -> 1");
  // Lowest priority first: an elastic job of priority -1 shrinks before one of priority 0.
  running = {Running("5", -1, {"a", "b"}, 1), Running("7", 0, {"c", "d"}, 1)};
  p = PlanForWaitingJob(Waiting("9", 1, 1), nodes, running);
  EXPECT_EQ(Jobs(p.shrinks), (Names{"5"}));
}

TEST(PriorityPolicy, PreemptsLowestPriorityThenNewestAndOnlyWhatHelps) {
  std::vector<PriorityNode> nodes{Node("a", 0), Node("b", 0), Node("c", 0)};
  std::vector<PriorityRunning> running{Running("1", 0, {"a"}, 1), Running("2", 0, {"b"}, 1),
                                       Running("3", -2, {"c"}, 1)};
  PriorityPlan p = PlanForWaitingJob(Waiting("9", 1, 1), nodes, running);
  EXPECT_TRUE(p.shrinks.empty());
  EXPECT_EQ(p.preempt, (Names{"3"}));
  EXPECT_EQ(p.reserve, (Names{"c"}));
  EXPECT_EQ(p.reason, "freeing c from job 3 (priority -2), preempted");
  EXPECT_EQ(PreemptWhat(Waiting("9", 1, 1)), "for job 9 (priority 1), which needs 1 node");
  // Only what it needs is reserved, though a preempted job frees more.
  std::vector<PriorityRunning> wide{Running("4", 0, {"a", "b", "c"}, 3)};
  p = PlanForWaitingJob(Waiting("9", 1, 1), nodes, wide);
  EXPECT_EQ(p.preempt, (Names{"4"}));
  EXPECT_EQ(p.reserve, (Names{"a"}));
  // Two needed: then the newer of the two priority-0 jobs.
  p = PlanForWaitingJob(Waiting("9", 1, 2), nodes, running);
  EXPECT_EQ(p.preempt, (Names{"3", "2"}));
  // A victim on a node the waiting job cannot use anyway (drained) is left alone.
  nodes[2].usable = false;
  p = PlanForWaitingJob(Waiting("9", 1, 1), nodes, running);
  EXPECT_EQ(p.preempt, (Names{"2"}));
}

TEST(PriorityPolicy, AfterAPreemptionShrinksAreRecomputed) {
  // Shrinking 7 (3 -> 1) gives 2 of 4; preempting 5 (lowest) adds 2 more: 7 still has to shrink
  // to reach 4, but only by what is missing.
  std::vector<PriorityNode> nodes{Node("a", 0), Node("b", 0), Node("c", 0), Node("d", 0), Node("e", 0)};
  std::vector<PriorityRunning> running{Running("5", -1, {"d", "e"}, 2), Running("7", 0, {"a", "b", "c"}, 1)};
  PriorityPlan p = PlanForWaitingJob(Waiting("9", 1, 3), nodes, running);
  EXPECT_EQ(p.preempt, (Names{"5"}));
  ASSERT_EQ(p.shrinks.size(), 1u);
  EXPECT_EQ(p.shrinks[0].give_up, (Names{"c"}));
  EXPECT_EQ(p.reserve, (Names{"c", "d", "e"}));
}

TEST(PriorityPolicy, NothingHappensInVain) {
  // Even preempting every lower-priority job leaves it one node short: no one is disturbed.
  std::vector<PriorityNode> nodes{Node("a", 0), Node("b", 0), Node("c", 1)};
  std::vector<PriorityRunning> running{Running("1", 0, {"a"}, 1), Running("2", 5, {"b"}, 1)};
  PriorityPlan p = PlanForWaitingJob(Waiting("9", 1, 3), nodes, running);
  EXPECT_FALSE(p.acts());
  EXPECT_EQ(p.reason,
            "a held by job 1 (priority 0) which is at its nodes.min; b held by job 2 (priority 5, not lower) which is "
            "at its nodes.min; preempting every lower-priority job would not be enough");
  EXPECT_EQ(p.reserve, (Names{"c"}));
  // A job the cluster can never hold (4 nodes of 3) reserves nothing: it would idle them forever.
  p = PlanForWaitingJob(Waiting("9", 1, 4), nodes, running);
  EXPECT_FALSE(p.acts());
  EXPECT_TRUE(p.reserve.empty());
}

TEST(PriorityPolicy, NodesAlreadyBeingFreedForItAreWaitedFor) {
  std::vector<PriorityNode> nodes{Node("a", 0), Node("b", 0), Node("c", 1)};
  nodes[1].reserved_for_job = true;  // job 7's rank there is stopping
  std::vector<PriorityRunning> running{Running("1", 0, {"a"}, 1)};
  PriorityPlan p = PlanForWaitingJob(Waiting("9", 1, 2), nodes, running);
  EXPECT_FALSE(p.acts()) << "what is on its way is enough: job 1 keeps running";
  EXPECT_EQ(p.reserve, (Names{"b", "c"}));
  EXPECT_EQ(p.reason, "b reserved for it, being freed");
  // Not enough on its way: the rest is planned as usual, the reserved node counted.
  p = PlanForWaitingJob(Waiting("9", 1, 3), nodes, running);
  EXPECT_EQ(p.preempt, (Names{"1"}));
  EXPECT_EQ(p.reserve, (Names{"a", "b", "c"}));
  EXPECT_EQ(p.reason, "b reserved for it; freeing a from job 1 (priority 0), preempted");
}

TEST(PriorityPolicy, SlotsDecideWhetherAFreedNodeFits) {
  // n1: 2 slots, 1 free, job 7 holds the other; the waiting job wants 2 per node.
  std::vector<PriorityNode> nodes{Node("n0", 0, 2), Node("n1", 1, 2)};
  std::vector<PriorityRunning> running{Running("7", 0, {"n0", "n1"}, 1)};
  PriorityPlan p = PlanForWaitingJob(Waiting("9", 1, 1, 2), nodes, running);
  ASSERT_EQ(p.shrinks.size(), 1u);
  EXPECT_EQ(p.shrinks[0].give_up, (Names{"n1"}));
  // Two victims sharing the only node: neither shrink alone frees it, so both are preempted
  // (lowest priority, then newest, first), and only because together they do.
  nodes = {Node("n0", 0, 2)};
  running = {Running("7", 0, {"n0"}, 1), Running("8", -1, {"n0", "x"}, 1)};
  p = PlanForWaitingJob(Waiting("9", 1, 1, 2), nodes, running);
  EXPECT_TRUE(p.shrinks.empty());
  EXPECT_EQ(p.preempt, (Names{"8", "7"}));
}

TEST(PriorityPolicy, UnusableNodesAreNeverCountedOrTaken) {
  // c is lost, drained or reserved for a job that outranks this one.
  std::vector<PriorityNode> nodes{Node("a", 0), Node("b", 0), Node("c", 1, 1, false)};
  std::vector<PriorityRunning> running{Running("1", 0, {"a", "b", "c"}, 1)};
  PriorityPlan p = PlanForWaitingJob(Waiting("9", 1, 1), nodes, running);
  ASSERT_EQ(p.shrinks.size(), 1u);
  EXPECT_EQ(p.shrinks[0].give_up, (Names{"b"})) << "giving up c would gain nothing";
  EXPECT_EQ(p.reserve, (Names{"b"}));
}

}  // namespace
}  // namespace eft::controller
