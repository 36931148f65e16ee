#include "controller/priority_policy.h"

#include <algorithm>
#include <map>
#include <set>

namespace eft::controller {
namespace {

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

std::string Plural(int n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); }

std::string JobName(const std::string& id, int priority) {
  return "job " + id + " (priority " + std::to_string(priority) + ")";
}

// Slots freed on each node by the jobs the plan stops there.
using Freed = std::map<std::string, int>;

class Planner {
 public:
  Planner(const PriorityWaiting& job, const std::vector<PriorityNode>& nodes) : job_(job), nodes_(nodes) {}

  bool Fits(const PriorityNode& n, const Freed& freed) const {
    if (!n.usable) return false;
    if (n.reserved_for_job) return true;  // being freed for it already
    auto it = freed.find(n.name);
    return n.free_slots + (it == freed.end() ? 0 : it->second) >= job_.slots_per_node;
  }
  int Count(const Freed& freed) const {
    int c = 0;
    for (const auto& n : nodes_) c += Fits(n, freed) ? 1 : 0;
    return c;
  }
  const PriorityNode* Node(const std::string& name) const {
    for (const auto& n : nodes_) {
      if (n.name == name) return &n;
    }
    return nullptr;
  }
  static void FreeAll(const PriorityRunning& r, Freed* freed) {
    for (const auto& n : r.nodes) (*freed)[n] += r.slots_per_node;
  }

 private:
  const PriorityWaiting& job_;
  const std::vector<PriorityNode>& nodes_;
};

}  // namespace

PriorityPlan PlanForWaitingJob(const PriorityWaiting& job, const std::vector<PriorityNode>& nodes,
                               const std::vector<PriorityRunning>& running) {
  const Planner planner(job, nodes);
  const int need = job.min_nodes;
  PriorityPlan plan;

  std::vector<std::string> reserved, fitting_free;
  for (const auto& n : nodes) {
    if (!n.usable) continue;
    if (n.reserved_for_job) reserved.push_back(n.name);
    if (n.free_slots >= job.slots_per_node) {
      if (!n.reserved_for_job) fitting_free.push_back(n.name);
    }
  }
  // Sentences joined by "; ", after what placement said.
  std::vector<std::string> says;
  auto text = [&says] {
    std::string out;
    for (const auto& s : says) out += (out.empty() ? "" : "; ") + s;
    return out;
  };

  // Already enough on the way: wait for it, nothing new.
  if (planner.Count({}) >= need && !reserved.empty()) {
    plan.reserve = reserved;
    for (const auto& n : fitting_free) {
      if (static_cast<int>(plan.reserve.size()) < need) plan.reserve.push_back(n);
    }
    std::sort(plan.reserve.begin(), plan.reserve.end());
    plan.reason = Join(reserved) + " reserved for it, being freed";
    return plan;
  }

  // Victims: strictly lower priority, lowest first, newest first within a priority.
  std::vector<const PriorityRunning*> victims;
  for (const auto& r : running) {
    if (r.priority < job.priority) victims.push_back(&r);
  }
  std::sort(victims.begin(), victims.end(), [](const PriorityRunning* a, const PriorityRunning* b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    return a->order > b->order;
  });

  std::set<const PriorityRunning*> preempted;
  for (;;) {
    Freed freed;
    for (const auto* p : preempted) Planner::FreeAll(*p, &freed);
    int count = planner.Count(freed);
    std::vector<Shrink> shrinks;
    for (const auto* v : victims) {
      if (count >= need) break;
      if (preempted.count(v)) continue;
      int spare = static_cast<int>(v->nodes.size()) - v->min_nodes;
      Shrink s;
      s.job = v->id;
      s.from_nodes = static_cast<int>(v->nodes.size());
      // From the end of its rank order, so rank 0's node goes last.
      for (auto it = v->nodes.rbegin(); it != v->nodes.rend() && spare > 0 && count < need; ++it) {
        const PriorityNode* n = planner.Node(*it);
        if (!n || planner.Fits(*n, freed)) continue;  // unknown, or fits already: freeing it gains nothing
        Freed more = freed;
        more[*it] += v->slots_per_node;
        if (!planner.Fits(*n, more)) continue;
        freed = std::move(more);
        s.give_up.push_back(*it);
        --spare;
        ++count;
      }
      if (s.give_up.empty()) continue;
      std::reverse(s.give_up.begin(), s.give_up.end());  // back to rank order
      s.to_nodes = s.from_nodes - static_cast<int>(s.give_up.size());
      shrinks.push_back(std::move(s));
    }
    if (count >= need) {
      plan.shrinks = std::move(shrinks);
      for (const auto* v : victims) {
        if (preempted.count(v)) plan.preempt.push_back(v->id);
      }
      // At most what it needs: what is already its, then free nodes, then the ones being freed.
      for (int pass = 0; pass < 3; ++pass) {
        for (const auto& n : nodes) {
          if (static_cast<int>(plan.reserve.size()) >= need || !planner.Fits(n, freed)) continue;
          const bool free = n.free_slots >= job.slots_per_node;
          if ((pass == 0 && n.reserved_for_job) || (pass == 1 && !n.reserved_for_job && free) ||
              (pass == 2 && !n.reserved_for_job && !free)) {
            plan.reserve.push_back(n.name);
          }
        }
      }
      std::sort(plan.reserve.begin(), plan.reserve.end());
      std::string freeing;
      for (const auto& s : plan.shrinks) {
        const auto* v = *std::find_if(victims.begin(), victims.end(), [&](auto* r) { return r->id == s.job; });
        freeing += (freeing.empty() ? "" : ", ") + Join(s.give_up) + " from " + JobName(v->id, v->priority) +
                   ", shrinking " + std::to_string(s.from_nodes) + " -> " + std::to_string(s.to_nodes);
      }
      for (const auto* v : victims) {
        if (!preempted.count(v)) continue;
        freeing += (freeing.empty() ? "" : ", ") + Join(v->nodes) + " from " + JobName(v->id, v->priority) +
                   ", preempted";
      }
      if (!reserved.empty()) says.push_back(Join(reserved) + " reserved for it");
      says.push_back("freeing " + freeing);
      plan.reason = text();
      return plan;
    }
    // Shrinking is not enough: preempt the next victim whose nodes help, or failing that (victims
    // sharing a node, none enough alone) the next one that frees slots on a usable node.
    const PriorityRunning* next = nullptr;
    const PriorityRunning* partial = nullptr;
    Freed before;
    for (const auto* p : preempted) Planner::FreeAll(*p, &before);
    const int with_preempted = planner.Count(before);
    for (const auto* v : victims) {
      if (preempted.count(v)) continue;
      Freed more = before;
      Planner::FreeAll(*v, &more);
      if (planner.Count(more) > with_preempted) {
        next = v;
        break;
      }
      for (const auto& name : v->nodes) {
        const PriorityNode* n = planner.Node(name);
        if (!partial && n && n->usable && !planner.Fits(*n, before)) partial = v;
      }
    }
    if (!next) next = partial;
    if (!next) break;
    preempted.insert(next);
  }

  // No plan: say who holds what.
  if (!reserved.empty()) says.push_back(Join(reserved) + " reserved for it");
  std::vector<const PriorityRunning*> holders;
  for (const auto& r : running) holders.push_back(&r);
  std::sort(holders.begin(), holders.end(),
            [](const PriorityRunning* a, const PriorityRunning* b) { return a->order < b->order; });
  for (const auto* r : holders) {
    std::vector<std::string> on;
    for (const auto& name : r->nodes) {
      const PriorityNode* n = planner.Node(name);
      if (n && n->usable && !n->reserved_for_job && n->free_slots < job.slots_per_node) on.push_back(name);
    }
    if (on.empty()) continue;
    says.push_back(Join(on) + " held by job " + r->id + " (priority " + std::to_string(r->priority) +
                   (r->priority >= job.priority ? ", not lower" : "") + ")" +
                   (static_cast<int>(r->nodes.size()) <= r->min_nodes ? " which is at its nodes.min" : ""));
  }
  if (!victims.empty()) says.push_back("preempting every lower-priority job would not be enough");
  plan.reason = text();
  int could_fit = 0;
  for (const auto& n : nodes) {
    if (n.usable && n.slots >= job.slots_per_node) ++could_fit;
  }
  // Hold what it fits on, so later jobs it outranks cannot keep taking it (no starvation) — but only
  // when the cluster could ever run it, or an impossible job would idle nodes forever.
  if (could_fit >= need) {
    plan.reserve = fitting_free;
    plan.reserve.insert(plan.reserve.end(), reserved.begin(), reserved.end());
    std::sort(plan.reserve.begin(), plan.reserve.end());
  }
  return plan;
}

std::string ShrinkWhat(const Shrink& s, const PriorityWaiting& for_job) {
  return "for " + JobName(for_job.id, for_job.priority) + ": gives up " + Join(s.give_up) + ", " +
         std::to_string(s.from_nodes) + " -> " + Plural(s.to_nodes, "node", "nodes");
}

std::string PreemptWhat(const PriorityWaiting& for_job) {
  return "for " + JobName(for_job.id, for_job.priority) + ", which needs " +
         Plural(for_job.min_nodes, "node", "nodes");
}

}  // namespace eft::controller
