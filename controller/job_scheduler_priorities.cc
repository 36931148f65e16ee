// JobScheduler: priorities and preemption (docs/architecture.md, "Priorities and preemption"). The
// decisions are PlanForWaitingJob's (priority_policy.h); this file gathers its inputs, carries the
// plan out and keeps the reservations.
#include <algorithm>
#include <set>

#include "common/logging.h"
#include "controller/job_scheduler.h"
#include "controller/priority_policy.h"

namespace eft::controller {
namespace {

int64_t Order(const std::string& id) {
  // Ids are the store's decimal row ids: their numeric order is submit order.
  return id.empty() ? 0 : std::stoll(id);
}

}  // namespace

bool JobScheduler::Outranks(const JobEntry& a, const JobEntry& b) const {
  if (a.rec.spec.priority() != b.rec.spec.priority()) return a.rec.spec.priority() > b.rec.spec.priority();
  return Order(a.rec.id) < Order(b.rec.id);
}

std::vector<std::string> JobScheduler::PendingByPriority() const {
  std::vector<std::string> ids = jobs_->index().Pending();  // submit order
  std::stable_sort(ids.begin(), ids.end(), [this](const std::string& a, const std::string& b) {
    return jobs_->At(a).rec.spec.priority() > jobs_->At(b).rec.spec.priority();
  });
  return ids;
}

std::vector<NodeCapacity> JobScheduler::WithReservations(const JobEntry& job,
                                                             const std::vector<NodeCapacity>& caps) const {
  std::vector<NodeCapacity> out = caps;
  for (auto& cap : out) {
    auto it = reserved_.find(cap.name);
    if (it == reserved_.end() || it->second == job.rec.id) continue;
    const JobEntry* holder = jobs_->Find(it->second);
    if (holder != nullptr && Outranks(job, *holder)) continue;
    cap.reserved_for = it->second;
  }
  return out;
}

Status JobScheduler::SetReservations(const std::string& job_id, const std::vector<std::string>& nodes) {
  std::set<std::string> want(nodes.begin(), nodes.end());
  std::set<std::string> have;
  for (const auto& [node, holder] : reserved_) {
    if (holder == job_id) have.insert(node);
  }
  if (want == have) return Status::Ok();
  EFT_RETURN_IF_ERROR(store_->SetReservations(job_id, std::vector<std::string>(want.begin(), want.end())));
  for (auto it = reserved_.begin(); it != reserved_.end();) {
    it = it->second == job_id && !want.count(it->first) ? reserved_.erase(it) : std::next(it);
  }
  for (const auto& node : want) {
    auto& holder = reserved_[node];
    if (!holder.empty() && holder != job_id) {
      EFT_LOG(INFO) << "node " << node << ": reserved for job " << job_id << " instead of job " << holder;
    }
    holder = job_id;
  }
  CapacityChanged();
  return Status::Ok();
}

void JobScheduler::ReleaseReservations(const std::string& job_id) {
  Status s = SetReservations(job_id, {});
  if (s.ok()) return;
  // Forgotten in memory all the same: the job no longer waits, and Load drops the stored rows of
  // jobs that do not wait, so a stale row never holds a node.
  EFT_LOG(ERROR) << "job " << job_id << ": could not release its reservations in the store (" << s << ")";
  bool changed = false;
  for (auto it = reserved_.begin(); it != reserved_.end();) {
    if (it->second == job_id) {
      it = reserved_.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  if (changed) CapacityChanged();
}

void JobScheduler::DropStaleReservations() {
  std::set<std::string> stale;
  for (const auto& [node, id] : reserved_) {
    const JobEntry* j = jobs_->Find(id);
    if (j == nullptr || !j->waits()) stale.insert(id);
  }
  for (const auto& id : stale) ReleaseReservations(id);
}

std::string JobScheduler::MakeRoom(JobEntry& j, const std::vector<NodeCapacity>& caps) {
  if (nodes_->AnyUnknown()) {
    // Right after a controller restart, until every node has re-registered (or is LOST after
    // heartbeat_timeout): the stops decided before the restart may still be under way there.
    // Reservations loaded from the store stay as they are.
    return "making room once every node has re-registered with the restarted controller";
  }
  const auto& res = j.rec.spec.resources();
  PriorityWaiting waiting;
  waiting.id = j.rec.id;
  waiting.priority = j.rec.spec.priority();
  waiting.min_nodes = res.nodes().min();
  waiting.slots_per_node = res.gpus_per_node();
  std::vector<PriorityNode> nodes;
  for (const auto& cap : caps) {
    PriorityNode n;
    n.name = cap.name;
    n.usable = cap.ready && !cap.drained && cap.reserved_for.empty();
    const NodeEntry* node = nodes_->Find(cap.name);
    n.slots = node == nullptr ? 0 : node->rec.slots;
    n.free_slots = static_cast<int>(cap.free_slots.size());
    auto r = reserved_.find(cap.name);
    n.reserved_for_job = r != reserved_.end() && r->second == j.rec.id;
    nodes.push_back(std::move(n));
  }
  std::vector<PriorityRunning> running;
  for (const auto& id : jobs_->index().Active()) {
    const JobEntry& a = jobs_->At(id);
    if (!a.current()) continue;
    PriorityRunning r;
    r.id = id;
    r.priority = a.rec.spec.priority();
    r.order = Order(id);
    r.nodes = a.current()->nodes;
    r.slots_per_node = a.current()->ranks_per_node;
    r.min_nodes = a.rec.spec.resources().nodes().min();
    running.push_back(std::move(r));
  }
  const PriorityPlan plan = PlanForWaitingJob(waiting, nodes, running);

  if (plan.acts()) {
    // Say on the waiting job what is done for it, then do it. A stop the store refuses is retried
    // by the next pass (nothing was reserved for it).
    JobChange c{j.rec, {}, {}, {}};
    c.events.push_back(jobs_->MakeEvent(j, "making_room", plan.reason));
    if (!jobs_->Apply(j, std::move(c)).ok()) return plan.reason;
    for (const auto& s : plan.shrinks) {
      JobEntry& victim = jobs_->At(s.job);
      if (!lifecycle_->Resize(victim, ResizeReason::kShrink, ShrinkWhat(s, waiting)).ok()) return plan.reason;
    }
    for (const auto& id : plan.preempt) {
      if (!lifecycle_->Preempt(jobs_->At(id), PreemptWhat(waiting)).ok()) return plan.reason;
    }
    nodes_->ExpectTransition(plan.reserve);  // free ones too: the waiting job starts there
  }
  // Hold exactly what the plan counts on. Not stored: the next pass tries again (the stops above
  // are stored, and it waits for them either way).
  Status held = SetReservations(j.rec.id, plan.reserve);
  if (!held.ok()) {
    EFT_LOG(ERROR) << "job " << j.rec.id << ": could not store its reservations (" << held << "); retrying";
    CapacityChanged();
  }
  return plan.reason;
}

}  // namespace eft::controller
