// What the store tests share: StoreTest (a fresh directory per test whose database path's parent
// does not exist yet), records with every field set, field-by-field comparison of records, and
// RawQuery, a second connection that reads the file as the sqlite3 CLI would.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>

#include "controller/store.h"

namespace eft::controller {

// What the sqlite3 CLI would print for the first column of the first row ("error: ..." on failure).
std::string RawQuery(const std::string& path, const std::string& sql);

v1::JobSpec MakeSpec(const std::string& name);
JobRecord MakeJob(const std::string& request_id = "", const std::string& name = "qwen-sft");
AttemptRecord MakeAttempt(const std::string& job_id, int32_t number);

inline auto Tie(const JobRecord& j) {
  return std::tie(j.id, j.request_id, j.state, j.reason, j.create_ms, j.start_ms, j.end_ms, j.attempt, j.restarts,
                  j.not_before_ms, j.owner);
}
inline auto Tie(const AttemptRecord& a) {
  return std::tie(a.job_id, a.number, a.world_size, a.ranks_per_node, a.nodes, a.slots, a.master_addr,
                  a.master_port, a.resume_from, a.start_ms, a.end_ms, a.end_reason, a.reached_step, a.end);
}
inline auto Tie(const NodeRecord& n) {
  return std::tie(n.name, n.address, n.slots, n.drained, n.version, n.registered_ms, n.lost, n.state_reason,
                  n.data_address, n.network_stack);
}
inline auto Tie(const CheckpointRecord& c) {
  return std::tie(c.job_id, c.step, c.kind, c.path, c.bytes, c.attempt, c.time_ms);
}
inline auto Tie(const EventRecord& e) { return std::tie(e.job_id, e.time_ms, e.type, e.attempt, e.message); }

// Every column and the spec, field by field.
void ExpectSameJob(const JobRecord& want, const JobRecord& got);

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  std::unique_ptr<Store> OpenStore();
  std::string AddJob(Store* store, const std::string& request_id = "");

  std::string dir_;
  std::string path_;  // dir_/state/eft.db
};

}  // namespace eft::controller
