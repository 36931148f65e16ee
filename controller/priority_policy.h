// Priorities (docs/architecture.md, "Priorities and preemption"): what a waiting job that does not
// fit may take from running jobs of strictly lower priority, which nodes it holds while they are
// freed, and the words of its wait.
//
// Rules, in order:
//  - Only jobs of strictly lower priority give way: equal priority never preempts.
//  - Victims are taken lowest priority first, and within a priority the most recently submitted
//    first (it has the least work to lose).
//  - Shrinking comes before preempting: every victim first gives up nodes down to its nodes.min
//    (rank 0's node last); only when that is not enough is a whole job preempted, as few as
//    possible, in victim order, and the shrinks are then recomputed (a preempted job's nodes may
//    make some unnecessary). Only nodes that then fit the waiting job are taken.
//  - Nothing happens unless the plan makes the job fit: no job is disturbed in vain.
//  - The waiting job reserves the nodes it counts on (free ones and the ones being freed), so no
//    job it outranks (lower priority, or equal and submitted later) takes them meanwhile. A job that
//    waits without a plan reserves the free nodes it fits on too, as long as the cluster has enough
//    nodes for it at all: so a large job is not starved by later small ones of its priority.
//
// Pure function of its inputs (tests/unit/controller/priority_policy_test.cc); the controller
// gathers them under its lock and carries the plan out (shrink = a planned resize, preempt = a
// planned stop back to the queue; both checkpoint and exit 75 and are not counted as failures).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace eft::controller {

// A node as the waiting job sees it.
struct PriorityNode {
  std::string name;
  bool usable = false;  // READY, not drained, not reserved for a job that outranks the waiting one
  int slots = 0;        // total
  int free_slots = 0;   // used by no active attempt and no running rank
  bool reserved_for_job = false;  // already reserved for the waiting job (being freed for it)
};

// A STARTING or RUNNING job.
struct PriorityRunning {
  std::string id;
  int priority = 0;
  int64_t order = 0;               // submit order (the numeric id)
  std::vector<std::string> nodes;  // its attempt's nodes, rank order
  int slots_per_node = 1;
  int min_nodes = 1;
};

struct PriorityWaiting {
  std::string id;
  int priority = 0;
  int min_nodes = 1;
  int slots_per_node = 1;
};

struct Shrink {
  std::string job;
  int from_nodes = 0;
  int to_nodes = 0;
  std::vector<std::string> give_up;  // the nodes it leaves, in its rank order
};

struct PriorityPlan {
  std::vector<Shrink> shrinks;        // in victim order
  std::vector<std::string> preempt;   // job ids, in victim order
  // Nodes to reserve for the waiting job, by name: free ones it fits on and the ones being freed.
  std::vector<std::string> reserve;
  // Why the job waits, said after placement's own words in its `reason`: "n2,n3 held by job 7
  // (priority 0, not lower) which is at its nodes.min". With a plan, what is being freed for it:
  // "freeing n3 from job 7 (priority 0), shrinking 3 -> 2". "" when there is nothing to add.
  std::string reason;
  bool acts() const { return !shrinks.empty() || !preempt.empty(); }
};

// `in_job`: the waiting job; `nodes`: every node, in name order; `running`: every active job.
// Call it when placement failed. A job whose reserved nodes, with the free ones, already make it
// fit gets no new actions: it waits for them (reason says for whom).
PriorityPlan PlanForWaitingJob(const PriorityWaiting& job, const std::vector<PriorityNode>& nodes,
                               const std::vector<PriorityRunning>& running);

// The text a victim's end reason and event carry: "for job 9 (priority 5): gives up n3, 3 -> 2
// nodes" and "for job 9 (priority 5), which needs 2 nodes".
std::string ShrinkWhat(const Shrink& s, const PriorityWaiting& for_job);
std::string PreemptWhat(const PriorityWaiting& for_job);

}  // namespace eft::controller
