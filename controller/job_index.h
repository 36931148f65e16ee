// JobIndex: which jobs a scheduling pass or a node's heartbeat has to look at, so neither walks
// every job the database holds.
//
//  - pending: QUEUED and RECOVERING jobs, in submit order (the order scheduling places them in);
//  - active on a node: STARTING and RUNNING jobs whose current attempt placed ranks on that node.
//
// The owner calls File() after every change of a job's state or attempt; File() takes the job out
// of wherever it was filed before. Terminal jobs are filed nowhere. Not thread-safe: the Controller
// keeps it under its lock, like the jobs it indexes.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "eft/v1/job.pb.h"

namespace eft::controller {

class JobIndex {
 public:
  // Files `job_id` by `state` and, for STARTING/RUNNING, by `attempt_nodes` (the nodes of its
  // current attempt). Job ids are the store's decimal row ids, so their numeric order is submit
  // order.
  void File(const std::string& job_id, v1::JobState state, const std::vector<std::string>& attempt_nodes);
  // Takes the job out of the index entirely.
  void Remove(const std::string& job_id);

  // QUEUED/RECOVERING jobs, oldest submit first. A copy: callers start jobs (and so refile them)
  // while walking it.
  std::vector<std::string> Pending() const;
  // STARTING/RUNNING jobs with ranks on `node` (empty for an unknown node). A copy, for the same
  // reason.
  std::set<std::string> ActiveOn(const std::string& node) const;
  // Every STARTING/RUNNING job, each once.
  std::set<std::string> Active() const;

 private:
  struct Filing {
    int64_t order = 0;  // the numeric id: the key under pending_
    bool pending = false;
    std::vector<std::string> nodes;  // keys under active_on_node_
  };

  std::map<std::string, Filing> filed_;  // where each job is, so File() can take it out
  std::map<int64_t, std::string> pending_;
  std::map<std::string, std::set<std::string>> active_on_node_;
};

}  // namespace eft::controller
