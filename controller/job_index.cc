#include "controller/job_index.h"

namespace eft::controller {

void JobIndex::Remove(const std::string& job_id) {
  auto it = filed_.find(job_id);
  if (it == filed_.end()) return;
  const Filing& old = it->second;
  if (old.pending) pending_.erase(old.order);
  for (const auto& node : old.nodes) {
    auto on_node = active_on_node_.find(node);
    if (on_node == active_on_node_.end()) continue;
    on_node->second.erase(job_id);
    if (on_node->second.empty()) active_on_node_.erase(on_node);
  }
  filed_.erase(it);
}

void JobIndex::File(const std::string& job_id, v1::JobState state, const std::vector<std::string>& attempt_nodes) {
  Remove(job_id);
  Filing f;
  f.order = std::stoll(job_id);
  f.pending = state == v1::JOB_STATE_QUEUED || state == v1::JOB_STATE_RECOVERING;
  if (state == v1::JOB_STATE_STARTING || state == v1::JOB_STATE_RUNNING) f.nodes = attempt_nodes;
  if (!f.pending && f.nodes.empty()) return;  // terminal (or active without an attempt): nowhere
  if (f.pending) pending_[f.order] = job_id;
  for (const auto& node : f.nodes) active_on_node_[node].insert(job_id);
  filed_[job_id] = std::move(f);
}

std::vector<std::string> JobIndex::Pending() const {
  std::vector<std::string> out;
  out.reserve(pending_.size());
  for (const auto& [order, id] : pending_) out.push_back(id);
  return out;
}

std::set<std::string> JobIndex::ActiveOn(const std::string& node) const {
  auto it = active_on_node_.find(node);
  return it == active_on_node_.end() ? std::set<std::string>() : it->second;
}

std::set<std::string> JobIndex::Active() const {
  std::set<std::string> out;
  for (const auto& [node, ids] : active_on_node_) out.insert(ids.begin(), ids.end());
  return out;
}

}  // namespace eft::controller
