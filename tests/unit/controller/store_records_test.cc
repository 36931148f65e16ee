// One table at a time: every record type round-trips every field, ids and keys keep their
// promises (never reused, unique request ids, upserts), and bad input or damaged rows are errors,
// never half-filled records.
#include "tests/unit/controller/store_test_fixture.h"

#include <string>
#include <vector>

namespace eft::controller {
namespace {

TEST_F(StoreTest, JobRoundTripsEveryField) {
  auto store = OpenStore();
  JobRecord job = MakeJob("req-1");
  ASSERT_TRUE(store->InsertJob(&job).ok());
  EXPECT_EQ(job.id, "1");
  auto jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  ExpectSameJob(job, jobs->front());
  EXPECT_TRUE(jobs->front().spec.data().has_packing());
  EXPECT_TRUE(jobs->front().spec.training().has_seed());

  job.state = v1::JOB_STATE_RUNNING;
  job.reason = "all 16 ranks running";
  job.start_ms = 1'700'000'100'000;
  job.end_ms = 1'700'000'200'000;
  job.attempt = 3;
  job.restarts = 2;
  job.not_before_ms = 1'700'000'150'000;
  job.request_id = "req-1b";
  job.spec.mutable_checkpoint()->set_dir("/elsewhere");
  job.spec.mutable_env()->erase("MULTI");
  JobRecord changed_create = job;
  changed_create.create_ms = 5;  // not a column UpdateJob writes
  ASSERT_TRUE(store->UpdateJob(changed_create).ok());
  jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ExpectSameJob(job, jobs->front());

  // Readable with the sqlite3 CLI: snake_case JSON and state names.
  EXPECT_EQ(RawQuery(path_, "SELECT state FROM jobs"), "JOB_STATE_RUNNING");
  EXPECT_NE(RawQuery(path_, "SELECT spec FROM jobs").find("\"gpus_per_node\":8"), std::string::npos);
}

TEST_F(StoreTest, JobIdsIncreaseAndAreNeverReused) {
  auto store = OpenStore();
  EXPECT_EQ(AddJob(store.get()), "1");
  EXPECT_EQ(AddJob(store.get()), "2");
  EXPECT_EQ(AddJob(store.get()), "3");
  store.reset();
  // Deleting the newest row would let a plain rowid hand out 3 again.
  EXPECT_EQ(RawQuery(path_, "DELETE FROM jobs WHERE id = 3 RETURNING id"), "3");
  store = OpenStore();
  EXPECT_EQ(AddJob(store.get()), "4");
}

TEST_F(StoreTest, RequestIdsAreLookedUpAndUnique) {
  auto store = OpenStore();
  std::string id = AddJob(store.get(), "submit-abc");
  AddJob(store.get());  // '' is "no key" and may repeat
  AddJob(store.get());
  auto found = store->FindJobByRequestId("submit-abc");
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->id, id);
  EXPECT_EQ((*found)->spec.name(), "qwen-sft");
  EXPECT_FALSE(store->FindJobByRequestId("other")->has_value());
  EXPECT_FALSE(store->FindJobByRequestId("")->has_value());

  JobRecord duplicate = MakeJob("submit-abc");
  Status status = store->InsertJob(&duplicate);
  EXPECT_EQ(status.code(), StatusCode::kAlreadyExists) << status;
  EXPECT_NE(status.message().find("submit-abc"), std::string::npos) << status;
  EXPECT_EQ(store->LoadJobs()->size(), 3u);
}

TEST_F(StoreTest, BadUpdatesAreRefused) {
  auto store = OpenStore();
  JobRecord job = MakeJob();
  job.id = "42";
  EXPECT_EQ(store->UpdateJob(job).code(), StatusCode::kNotFound);
  job.id = "abc";
  EXPECT_EQ(store->UpdateJob(job).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->LoadAttempts("x1").status().code(), StatusCode::kInvalidArgument);
  JobRecord bad_state = MakeJob();
  bad_state.state = static_cast<v1::JobState>(99);
  EXPECT_EQ(store->InsertJob(&bad_state).code(), StatusCode::kInvalidArgument);
}

// Rows edited by hand (or damaged) load as DATA_LOSS naming the record, never half-filled.
TEST_F(StoreTest, DamagedRowsAreDataLoss) {
  auto store = OpenStore();
  std::string id = AddJob(store.get());
  ASSERT_TRUE(store->InsertAttempt(MakeAttempt(id, 1)).ok());
  RawQuery(path_, "UPDATE jobs SET spec = '{\"name\": 7' WHERE id = 1");
  auto jobs = store->LoadJobs();
  EXPECT_EQ(jobs.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(jobs.status().message().find("job 1: stored spec"), std::string::npos) << jobs.status();
  RawQuery(path_, "UPDATE jobs SET spec = '{}', state = 'JOB_STATE_NAPPING' WHERE id = 1");
  EXPECT_NE(store->LoadJobs().status().message().find("JOB_STATE_NAPPING"), std::string::npos);
  RawQuery(path_, "UPDATE attempts SET slots = '[[0], [\"x\"]]'");
  auto attempts = store->LoadAttempts(id);
  EXPECT_EQ(attempts.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(attempts.status().message().find("attempt 1 of job 1: stored slots"), std::string::npos)
      << attempts.status();
}

TEST_F(StoreTest, AttemptsRoundTrip) {
  auto store = OpenStore();
  std::string j1 = AddJob(store.get()), j2 = AddJob(store.get());
  AttemptRecord a1 = MakeAttempt(j1, 1), a2 = MakeAttempt(j1, 2), b1 = MakeAttempt(j2, 1);
  b1.nodes = {};
  b1.slots = {};
  for (const auto& a : {a2, b1, a1}) ASSERT_TRUE(store->InsertAttempt(a).ok());
  EXPECT_EQ(store->InsertAttempt(a1).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(store->InsertAttempt(MakeAttempt("77", 1)).code(), StatusCode::kNotFound);  // no job 77

  a1.end_ms = 5000;
  a1.end_reason = "node n2 lost (no heartbeat for 3.0 s)";
  a1.nodes = {"n1"};
  a1.slots = {{3}};
  ASSERT_TRUE(store->UpdateAttempt(a1).ok());
  EXPECT_EQ(store->UpdateAttempt(MakeAttempt(j2, 9)).code(), StatusCode::kNotFound);

  auto attempts = store->LoadAttempts(j1);
  ASSERT_TRUE(attempts.ok()) << attempts.status();
  ASSERT_EQ(attempts->size(), 2u);
  EXPECT_EQ(Tie((*attempts)[0]), Tie(a1));
  EXPECT_EQ(Tie((*attempts)[1]), Tie(a2));
}

// The step an attempt reached is written alone as reports arrive, and with the rest at its end.
TEST_F(StoreTest, ReachedStepIsUpdatedOnItsOwn) {
  auto store = OpenStore();
  std::string j = AddJob(store.get());
  AttemptRecord a = MakeAttempt(j, 2);
  ASSERT_TRUE(store->InsertAttempt(a).ok());
  ASSERT_TRUE(store->UpdateReachedStep(j, 2, 237).ok());
  EXPECT_EQ(store->UpdateReachedStep(j, 3, 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(store->UpdateReachedStep("77", 1, 1).code(), StatusCode::kNotFound);
  a.reached_step = 237;
  EXPECT_EQ(Tie(store->LoadAttempts(j)->at(0)), Tie(a));
  // Reopened: durable.
  store.reset();
  store = OpenStore();
  EXPECT_EQ(store->LoadAttempts(j)->at(0).reached_step, 237);
}

TEST_F(StoreTest, ReservationsAreOneJobPerNodeAndReplacedPerJob) {
  auto store = OpenStore();
  std::string j1 = AddJob(store.get()), j2 = AddJob(store.get());
  using Rows = std::vector<std::pair<std::string, std::string>>;
  ASSERT_TRUE(store->SetReservations(j1, {"n2", "n1"}).ok());
  ASSERT_TRUE(store->SetReservations(j2, {"n3"}).ok());
  EXPECT_EQ(*store->LoadReservations(), (Rows{{"n1", j1}, {"n2", j1}, {"n3", j2}}));
  // j2 takes n2 over; j1's set becomes exactly n1.
  ASSERT_TRUE(store->SetReservations(j2, {"n2", "n3"}).ok());
  EXPECT_EQ(*store->LoadReservations(), (Rows{{"n1", j1}, {"n2", j2}, {"n3", j2}}));
  ASSERT_TRUE(store->SetReservations(j1, {}).ok());
  EXPECT_EQ(*store->LoadReservations(), (Rows{{"n2", j2}, {"n3", j2}}));
  EXPECT_EQ(store->SetReservations("77", {"n1"}).code(), StatusCode::kNotFound);
  EXPECT_EQ(*store->LoadReservations(), (Rows{{"n2", j2}, {"n3", j2}})) << "a failed call changes nothing";
  store.reset();
  store = OpenStore();
  EXPECT_EQ(*store->LoadReservations(), (Rows{{"n2", j2}, {"n3", j2}}));
}

TEST_F(StoreTest, NodesAreUpserted) {
  auto store = OpenStore();
  NodeRecord b{"node-b", "10.0.0.2", 8, false, "0.1.0", 100, false, ""};
  NodeRecord a{"node-a", "node-a.example.org", 4, true, "0.1.0", 200, true, "no heartbeat for 3.0 s",
               "10.0.0.1", "boot-a/4026531840"};
  ASSERT_TRUE(store->UpsertNode(b).ok());
  ASSERT_TRUE(store->UpsertNode(a).ok());
  a.lost = false;
  a.state_reason = "";
  a.slots = 8;
  a.registered_ms = 300;
  a.data_address = "10.0.9.1";  // restarted with another --data-address
  ASSERT_TRUE(store->UpsertNode(a).ok());
  auto nodes = store->LoadNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ(Tie((*nodes)[0]), Tie(a));
  EXPECT_EQ(Tie((*nodes)[1]), Tie(b));
}

// In step order, a step written twice (by two attempts) in time order: the last is the newest.
TEST_F(StoreTest, CheckpointsAreStoredOnceInStepThenTimeOrder) {
  auto store = OpenStore();
  std::string job = AddJob(store.get()), other = AddJob(store.get());
  EXPECT_TRUE(store->LoadCheckpoints(job)->empty());
  CheckpointRecord c100{job, 100, "sharded", "/ckpt/step-100", 10, 1, 1000};
  CheckpointRecord c300{job, 300, "full", "/ckpt/step-300", 30, 2, 3000};
  CheckpointRecord c200{job, 200, "sharded", "/ckpt/step-200", 20, 1, 2000};
  for (const auto& c : {c100, c300, c200}) ASSERT_TRUE(store->InsertCheckpoint(c).ok());
  CheckpointRecord again = c300;  // the relayed event arriving twice
  again.time_ms = 9999;
  EXPECT_TRUE(store->InsertCheckpoint(again).ok());
  ASSERT_TRUE(store->InsertCheckpoint({other, 900, "sharded", "/o/step-900", 1, 1, 1}).ok());

  auto all = store->LoadCheckpoints(job);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ(Tie((*all)[0]), Tie(c100));
  EXPECT_EQ(Tie((*all)[1]), Tie(c200));
  EXPECT_EQ(Tie((*all)[2]), Tie(c300));

  // Same step written twice (e.g. by two attempts): the later one wins.
  CheckpointRecord c300b{job, 300, "sharded", "/ckpt/a2/step-300", 31, 3, 4000};
  ASSERT_TRUE(store->InsertCheckpoint(c300b).ok());
  EXPECT_EQ(Tie(store->LoadCheckpoints(job)->back()), Tie(c300b));
  EXPECT_EQ(store->InsertCheckpoint({"5", 1, "sharded", "/x", 1, 1, 1}).code(), StatusCode::kNotFound);

  // Retention deleted step-100 and step-300 of attempt 2: forgotten, and a later save of the same
  // path is stored again.
  ASSERT_TRUE(store->DeleteCheckpoint(job, "/ckpt/step-100").ok());
  ASSERT_TRUE(store->DeleteCheckpoint(job, "/ckpt/a2/step-300").ok());
  EXPECT_TRUE(store->DeleteCheckpoint(job, "/not/stored").ok());
  EXPECT_EQ(store->LoadCheckpoints(job)->size(), 2u);
  EXPECT_EQ(Tie(store->LoadCheckpoints(job)->back()), Tie(c300));
  ASSERT_TRUE(store->InsertCheckpoint(c100).ok());
  EXPECT_EQ(store->LoadCheckpoints(job)->size(), 3u);
  EXPECT_EQ(store->LoadCheckpoints(other)->size(), 1u);
}

TEST_F(StoreTest, EventsComeBackInAppendOrder) {
  auto store = OpenStore();
  std::string job = AddJob(store.get()), other = AddJob(store.get());
  // Wall time steps backwards between the first two: order is the append order anyway.
  std::vector<EventRecord> events = {{job, 5000, "submitted", 0, "queued"},
                                     {job, 4000, "attempt_started", 1, "on n1, n2"},
                                     {job, 6000, "attempt_ended", 1, "node n2 lost"}};
  ASSERT_TRUE(store->AppendEvent(events[0]).ok());
  ASSERT_TRUE(store->AppendEvent({other, 1, "submitted", 0, ""}).ok());
  ASSERT_TRUE(store->AppendEvent(events[1]).ok());
  ASSERT_TRUE(store->AppendEvent(events[2]).ok());
  auto loaded = store->LoadEvents(job);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(Tie((*loaded)[i]), Tie(events[i]));
  EXPECT_EQ(store->LoadEvents(other)->size(), 1u);
  EXPECT_EQ(store->AppendEvent({"99", 1, "x", 0, ""}).code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, CountersCountFromOneAndPersist) {
  auto store = OpenStore();
  EXPECT_EQ(*store->NextCounter("master_port"), 1);
  EXPECT_EQ(*store->NextCounter("master_port"), 2);
  EXPECT_EQ(*store->NextCounter("other"), 1);
  store.reset();
  store = OpenStore();
  EXPECT_EQ(*store->NextCounter("master_port"), 3);
}

TEST_F(StoreTest, LossPointsAreWrittenFromAnIndexAndCutToTheGivenLength) {
  auto store = OpenStore();
  JobRecord job = MakeJob("");
  ASSERT_TRUE(store->InsertJob(&job).ok());
  std::vector<LossPointRecord> points = {{10, 2.5, 1}, {20, 1.25, 2}, {30, 0.75, 1}};
  ASSERT_TRUE(store->SaveLossPoints(job.id, LossCurve::kTrain, 0, points).ok());
  ASSERT_TRUE(store->SaveLossPoints(job.id, LossCurve::kEval, 0, {{0, 9.5, 1}}).ok());
  // Only the last point changed, and a fourth came: written from index 2.
  points[2] = {31, 0.5, 2};
  points.push_back({40, 0.25, 1});
  ASSERT_TRUE(store->SaveLossPoints(job.id, LossCurve::kTrain, 2, points).ok());
  auto train = store->LoadLossPoints(job.id, LossCurve::kTrain);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_EQ(train->size(), 4u);
  EXPECT_EQ((*train)[2].step, 31);
  EXPECT_DOUBLE_EQ((*train)[2].value, 0.5);
  EXPECT_EQ((*train)[2].samples, 2);
  EXPECT_DOUBLE_EQ((*train)[1].value, 1.25);
  // A merge or a restart makes the curve shorter: the rows past its end go.
  ASSERT_TRUE(store->SaveLossPoints(job.id, LossCurve::kTrain, 0, {{20, 1.5, 2}}).ok());
  train = store->LoadLossPoints(job.id, LossCurve::kTrain);
  ASSERT_TRUE(train.ok());
  ASSERT_EQ(train->size(), 1u);
  auto eval = store->LoadLossPoints(job.id, LossCurve::kEval);
  ASSERT_TRUE(eval.ok());
  ASSERT_EQ(eval->size(), 1u) << "the other curve is untouched";
  EXPECT_EQ(store->SaveLossPoints("99", LossCurve::kTrain, 0, {{1, 1, 1}}).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace eft::controller
