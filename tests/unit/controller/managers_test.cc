// The controller's managers alone, on a real SQLite file and a ManualClock: what each promises in
// its header, without the facade. JobTable: a change the store refuses leaves memory as it was;
// retried submits share a job; finished jobs leave memory only once saved. NodeTable: liveness,
// LOST written through or not at all, the heartbeat pace.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <memory>
#include <string>

#include "common/clock.h"
#include "controller/job_table.h"
#include "controller/node_table.h"
#include "controller/store.h"
#include "tests/util/sqlite_fault_injection.h"

namespace eft::controller {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using eft::testing::SqliteFaultInjection;

class ManagersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("eft-managers-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    config_.data_dir = dir_.string();
    config_.finished_jobs_in_memory = 1;
    config_.heartbeat_interval = 1000ms;
    config_.heartbeat_timeout = 3000ms;
    config_.transition_heartbeat_interval = 200ms;
    config_.transition_window = 5000ms;
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  void Open() {
    auto store = Store::Open((dir_ / "c.db").string());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  static JobTable::NewJob Job(const std::string& request_id) {
    JobTable::NewJob j;
    j.spec.set_name("job");
    j.spec.mutable_resources()->mutable_nodes()->set_min(1);
    j.spec.mutable_resources()->mutable_nodes()->set_max(1);
    j.spec.mutable_resources()->set_gpus_per_node(1);
    j.request_id = request_id;
    return j;
  }
  static v1::RegisterRequest Registration(const std::string& name, const std::string& incarnation) {
    v1::RegisterRequest r;
    r.set_node_name(name);
    r.set_incarnation(incarnation);
    r.set_slots(2);
    r.set_address("10.0.0.1");
    return r;
  }

  fs::path dir_;
  ControllerConfig config_;
  ManualClock clock_;
  std::unique_ptr<Store> store_;
};

TEST_F(ManagersTest, JobTableChangesMemoryOnlyAfterTheStoreDid) {
  SqliteFaultInjection faults;
  Open();
  int applied = 0;
  int bumped = 0;
  JobTable jobs(config_, &clock_, store_.get(), {[&] { ++applied; }, [&] { ++bumped; }});
  auto ids = jobs.Insert({Job("a")});
  ASSERT_TRUE(ids.ok()) << ids.status();
  JobEntry& j = jobs.At((*ids)[0].id);
  EXPECT_EQ(jobs.index().Pending().size(), 1u);

  JobChange change{j.rec, {}, {}, {jobs.MakeEvent(j, "cancelled", "by a test")}};
  change.rec.state = v1::JOB_STATE_CANCELLED;
  faults.FailWrites(SQLITE_FULL);
  EXPECT_FALSE(jobs.Apply(j, change).ok());
  EXPECT_EQ(j.rec.state, v1::JOB_STATE_QUEUED) << "memory must not show what the store refused";
  EXPECT_EQ(j.events.size(), 1u) << "only the submitted event";
  EXPECT_EQ(applied, 0);
  EXPECT_EQ(jobs.index().Pending().size(), 1u);

  faults.FailWrites(SQLITE_OK);
  ASSERT_TRUE(jobs.Apply(j, change).ok());
  EXPECT_EQ(j.rec.state, v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(j.events.back().type, "cancelled");
  EXPECT_EQ(applied, 1);
  EXPECT_GE(bumped, 1);
  EXPECT_TRUE(jobs.index().Pending().empty()) << "a terminal job is filed nowhere";
  auto stored = store_->LoadJob(j.rec.id);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->state, v1::JOB_STATE_CANCELLED);
  store_.reset();
}

TEST_F(ManagersTest, JobTableGivesARetriedSubmitTheJobTheFirstCreated) {
  Open();
  JobTable jobs(config_, &clock_, store_.get(), {});
  auto first = jobs.Insert({Job("r1"), Job("r1"), Job("")});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 3u);
  EXPECT_TRUE((*first)[0].created);
  EXPECT_FALSE((*first)[1].created) << "the same request id within one batch";
  EXPECT_EQ((*first)[1].id, (*first)[0].id);
  EXPECT_TRUE((*first)[2].created);
  auto again = jobs.Insert({Job("r1")});
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE((*again)[0].created);
  EXPECT_EQ((*again)[0].id, (*first)[0].id);
  EXPECT_EQ(jobs.size(), 2u);
  // The default checkpoint dir names the id only the insert knew.
  EXPECT_EQ(jobs.At((*first)[0].id).rec.spec.checkpoint().dir(), config_.data_dir + "/checkpoints/" + (*first)[0].id);
}

TEST_F(ManagersTest, FinishedJobsLeaveMemoryOnceSavedAndAreStillReadable) {
  Open();
  JobTable jobs(config_, &clock_, store_.get(), {});
  auto ids = jobs.Insert({Job("a"), Job("b")});
  ASSERT_TRUE(ids.ok());
  for (const auto& inserted : *ids) {
    JobEntry& j = jobs.At(inserted.id);
    JobChange c{j.rec, {}, {}, {}};
    c.rec.state = v1::JOB_STATE_SUCCEEDED;
    ASSERT_TRUE(jobs.Apply(j, c).ok());
  }
  const std::string oldest = (*ids)[0].id;
  jobs.EvictFinished([&](const std::string& id) { return id == oldest; });
  EXPECT_EQ(jobs.size(), 2u) << "the oldest still has something to store";
  jobs.EvictFinished([](const std::string&) { return false; });
  EXPECT_EQ(jobs.size(), 1u) << "finished_jobs_in_memory is 1";
  EXPECT_EQ(jobs.Find(oldest), nullptr);
  EXPECT_EQ(jobs.evicted_by_state().at(v1::JOB_STATE_SUCCEEDED), 1);
  JobEntry scratch;
  auto read = jobs.Read(oldest, &scratch);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)->rec.state, v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(jobs.Read("0123", &scratch).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(jobs.Read("999", &scratch).status().code(), StatusCode::kNotFound);
}

TEST_F(ManagersTest, NodeTableDeclaresSilentNodesAndWritesLostThroughOrNotAtAll) {
  SqliteFaultInjection faults;
  Open();
  int capacity_changes = 0;
  NodeTable nodes(config_, &clock_, store_.get(), [&] { ++capacity_changes; });
  auto registered = nodes.Register(Registration("n1", "inc-1"));
  ASSERT_TRUE(registered.ok()) << registered.status();
  ASSERT_NE(registered->node, nullptr);
  EXPECT_EQ(capacity_changes, 1);
  EXPECT_TRUE(nodes.Silent().empty());
  clock_.Advance(3100ms);
  auto silent = nodes.Silent();
  ASSERT_EQ(silent.size(), 1u);
  EXPECT_EQ(silent[0].first, "n1");
  EXPECT_EQ(silent[0].second, "no heartbeat for 3.1 s");

  NodeEntry& n1 = *nodes.Find("n1");
  faults.FailWrites(SQLITE_IOERR_WRITE);
  EXPECT_FALSE(nodes.MarkLost(n1, "test").ok());
  EXPECT_TRUE(n1.ready) << "not LOST in memory while the store does not say so";
  faults.FailWrites(SQLITE_OK);
  ASSERT_TRUE(nodes.MarkLost(n1, "test").ok());
  EXPECT_FALSE(n1.ready);
  EXPECT_TRUE(nodes.Silent().empty());
  EXPECT_EQ(capacity_changes, 2);

  // The LOST incarnation's heartbeat is told to register again; a new one takes the name back.
  v1::HeartbeatRequest beat;
  beat.set_node_name("n1");
  beat.set_incarnation("inc-1");
  v1::HeartbeatResponse reply;
  EXPECT_EQ(nodes.Heartbeat(beat, &reply), nullptr);
  EXPECT_TRUE(reply.reregister());
  registered = nodes.Register(Registration("n1", "inc-2"));
  ASSERT_TRUE(registered.ok());
  EXPECT_FALSE(registered->refusal.has_value());
  // The incarnation it was taken from is fenced from now on.
  reply.Clear();
  EXPECT_EQ(nodes.Heartbeat(beat, &reply), nullptr);
  EXPECT_FALSE(reply.fenced().empty());
  store_.reset();
}

TEST_F(ManagersTest, NodeTablePacesHeartbeatsForChangesAndStoppingRanks) {
  Open();
  NodeTable nodes(config_, &clock_, store_.get(), [] {});
  ASSERT_TRUE(nodes.Register(Registration("n1", "inc-1")).ok());
  NodeEntry& n1 = *nodes.Find("n1");
  auto wanted = [](const v1::RankStatus&) { return true; };
  auto unwanted = [](const v1::RankStatus&) { return false; };
  EXPECT_EQ(nodes.HeartbeatInterval(n1, wanted), 1000ms);
  nodes.ExpectTransition({"n1", "unknown"});
  EXPECT_EQ(nodes.HeartbeatInterval(n1, wanted), 200ms);
  clock_.Advance(5001ms);
  EXPECT_EQ(nodes.HeartbeatInterval(n1, wanted), 1000ms) << "at most transition_window";
  nodes.ExpectTransition({"n1"});
  nodes.TransitionDone({"n1"});
  EXPECT_EQ(nodes.HeartbeatInterval(n1, wanted), 1000ms);
  v1::RankStatus running;
  running.set_state(v1::RANK_STATE_RUNNING);
  n1.reported = {running};
  EXPECT_EQ(nodes.HeartbeatInterval(n1, unwanted), 200ms) << "a rank being stopped";
  EXPECT_EQ(nodes.HeartbeatInterval(n1, wanted), 1000ms);
}

}  // namespace
}  // namespace eft::controller
