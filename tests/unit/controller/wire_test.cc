// JobToProto / NodeToProto (controller/wire.h): what clients see of the controller's records.
#include "controller/wire.h"

#include <gtest/gtest.h>

namespace eft::controller {
namespace {

TEST(WireTest, ASummaryLeavesOutHistoryAndFullHasIt) {
  JobRecord rec;
  rec.id = "4";
  rec.spec.set_name("sft");
  rec.state = v1::JOB_STATE_RUNNING;
  rec.attempt = 2;
  rec.restarts = 1;
  rec.create_ms = 1000;
  AttemptRecord a;
  a.number = 2;
  a.world_size = 3;
  a.nodes = {"n1", "n2", "n3"};
  a.end_reason = "";
  CheckpointRecord c;
  c.step = 40;
  c.path = "/ckpt/step-40";
  c.time_ms = 2000;
  EventRecord e;
  e.type = "attempt_started";
  e.message = "attempt 2";
  e.time_ms = 3000;
  std::vector<AttemptRecord> attempts{a};
  std::vector<CheckpointRecord> checkpoints{c};
  std::vector<EventRecord> events{e};
  v1::TrainingProgress none, some;
  some.set_step(41);

  v1::Job summary = JobToProto(JobView{rec, attempts, checkpoints, events, none, 3}, /*full=*/false);
  EXPECT_EQ(summary.id(), "4");
  EXPECT_EQ(summary.spec().name(), "sft");
  EXPECT_EQ(summary.world_size(), 3);
  EXPECT_EQ(summary.create_time().seconds(), 1);
  EXPECT_FALSE(summary.has_start_time()) << "0 means never, not 1970";
  EXPECT_FALSE(summary.has_progress()) << "no step reported yet";
  EXPECT_EQ(summary.attempts_size(), 0);
  EXPECT_EQ(summary.checkpoints_size(), 0);

  v1::Job full = JobToProto(JobView{rec, attempts, checkpoints, events, some, 0}, /*full=*/true);
  EXPECT_EQ(full.world_size(), 0) << "nothing running";
  EXPECT_EQ(full.progress().step(), 41);
  ASSERT_EQ(full.attempts_size(), 1);
  EXPECT_EQ(full.attempts(0).nodes_size(), 3);
  ASSERT_EQ(full.checkpoints_size(), 1);
  EXPECT_EQ(full.checkpoints(0).path(), "/ckpt/step-40");
  ASSERT_EQ(full.events_size(), 1);
  EXPECT_EQ(full.events(0).time().seconds(), 3);
}

TEST(WireTest, ANodeShowsItsStateAndJobs) {
  NodeRecord n;
  n.name = "n1";
  n.slots = 8;
  n.drained = true;
  n.address = "n1.example.org";
  n.data_address = "10.0.0.1";
  n.network_stack = "boot-a/4026531840";
  v1::Node lost = NodeToProto(n, /*ready=*/false, 0, {});
  EXPECT_EQ(lost.address(), "n1.example.org");
  EXPECT_EQ(lost.data_address(), "10.0.0.1") << "where its ranks are reached";
  EXPECT_EQ(lost.state(), v1::NODE_STATE_LOST);
  EXPECT_TRUE(lost.drained());
  EXPECT_FALSE(lost.has_last_heartbeat_time());
  v1::Node ready = NodeToProto(n, /*ready=*/true, 5000, {"3", "9"});
  EXPECT_EQ(ready.state(), v1::NODE_STATE_READY);
  EXPECT_EQ(ready.last_heartbeat_time().seconds(), 5);
  ASSERT_EQ(ready.jobs_size(), 2);
  EXPECT_EQ(ready.jobs(1), "9");
}

}  // namespace
}  // namespace eft::controller
