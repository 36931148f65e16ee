// A controller restart in the middle of planned stops (docs/architecture.md, "Controller restart"):
// the nodes reserved for a waiting job of higher priority stay reserved, and the step each attempt
// reached is stored, so "N steps lost" is right for an attempt that ran before the restart. The
// controller is destroyed and created again on the same SQLite file (Restart), as after kill -9;
// workers are simulated (controller_test_fixture.h).
#include <sqlite3.h>

#include "tests/unit/controller/controller_test_fixture.h"

namespace eft::controller {
namespace {

class ControllerRestartTest : public ControllerTest {
 protected:
  v1::RankEvent Step(const v1::RankAssignment& a, int64_t step) {
    return Event(a, ++seq_, R"({"event":"step","step":)" + std::to_string(step) + R"(,"loss":1.5,"total_steps":200})");
  }
  v1::RankEvent Checkpoint(const v1::RankAssignment& a, int64_t step) {
    return Event(a, ++seq_,
                 R"({"event":"checkpoint","step":)" + std::to_string(step) + R"(,"kind":"sharded","path":"/ck/)" +
                     a.key().job_id() + "-" + std::to_string(step) + R"(","bytes":5})");
  }
  // The reached_step column, read from the file by a second connection.
  std::string StoredReachedStep(const std::string& job, int attempt) {
    return RawQueryForTest("SELECT reached_step FROM attempts WHERE job_id = " + job +
                           " AND number = " + std::to_string(attempt));
  }
  std::string RawQueryForTest(const std::string& sql);

  uint64_t seq_ = 0;
};

std::string ControllerRestartTest::RawQueryForTest(const std::string& sql) {
  sqlite3* db = nullptr;
  std::string out = "error";
  if (sqlite3_open_v2(config_.db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      out = text ? reinterpret_cast<const char*>(text) : "";
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close_v2(db);
  return out;
}

TEST_F(ControllerRestartTest, NodesFreedForAHigherJobStayReservedAcrossARestart) {
  for (const char* n : {"n1", "n2", "n3"}) Register(n);
  std::string low = Submit(PrioSpec("low", 1, 3, 0));
  auto ranks = StartRanks({"n1", "n2", "n3"});
  Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)}, {Step(ranks["n1"], 11)});
  std::string high = Submit(PrioSpec("high", 2, 2, 5));
  ASSERT_EQ(Job(low).state(), v1::JOB_STATE_RECOVERING);
  ASSERT_EQ(EventsOfType(low, "resized").size(), 1u);
  // n3's rank is gone; n1's and n2's are still stopping when the controller dies.
  Heartbeat("n3", {Rank(ranks["n3"], v1::RANK_STATE_EXITED, 75)});
  Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_STOPPING)}, {Step(ranks["n1"], 12)});
  EXPECT_EQ(StoredReachedStep(low, 1), "12") << "a step after the attempt ended is written at once";

  Restart();
  // Until every node re-registered the controller does not know what runs where: no new plan.
  Register("n3");
  Register("n1", 1, {Rank(ranks["n1"], v1::RANK_STATE_STOPPING)});
  c_->Tick();
  EXPECT_EQ(EventsOfType(high, "making_room").size(), 1u) << "room is not made twice";
  EXPECT_NE(Job(high).reason().find("once every node has re-registered"), std::string::npos) << Job(high).reason();
  Register("n2", 1, {Rank(ranks["n2"], v1::RANK_STATE_STOPPING)});
  // n3 is free, but still held for the high job: a job submitted now does not take it.
  std::string third = Submit(PrioSpec("third", 1, 1, 0));
  EXPECT_EQ(Job(third).state(), v1::JOB_STATE_QUEUED);
  EXPECT_NE(Job(third).reason().find("n3: reserved for job " + high), std::string::npos) << Job(third).reason();
  EXPECT_EQ(EventsOfType(high, "making_room").size(), 1u);

  Heartbeat("n3");  // every node of the stopped attempt has heartbeated since the restart
  // The stops finish: rank 0 saves at step 12. The high job gets the nodes freed for it, the low
  // one resumes where it was (nothing lost), the third job still waits.
  Heartbeat("n2", {Rank(ranks["n2"], v1::RANK_STATE_EXITED, 75)});
  Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_EXITED, 75)}, {Checkpoint(ranks["n1"], 12)});
  c_->Tick();
  v1::Job h = Job(high);
  ASSERT_EQ(h.state(), v1::JOB_STATE_STARTING) << h.reason();
  EXPECT_EQ(std::vector<std::string>(h.attempts(0).nodes().begin(), h.attempts(0).nodes().end()),
            (std::vector<std::string>{"n2", "n3"}));
  v1::Job l = Job(low);
  ASSERT_EQ(l.state(), v1::JOB_STATE_STARTING) << l.reason();
  EXPECT_EQ(l.attempts(1).resume_from(), "/ck/1-12");
  auto started = EventsOfType(low, "attempt_started");
  ASSERT_EQ(started.size(), 2u);
  EXPECT_NE(started[1].find("(step 12; attempt 1 reached step 12: 0 steps lost)"), std::string::npos) << started[1];
  EXPECT_EQ(StoredReachedStep(low, 2), "12") << "an attempt starts at its resume step";
  EXPECT_EQ(Job(third).state(), v1::JOB_STATE_QUEUED);
  // The high job started: its reservations are gone from the store as well.
  Restart();
  for (const char* n : {"n1", "n2", "n3"}) Register(n);
  EXPECT_EQ(Job(third).reason().find("reserved"), std::string::npos) << Job(third).reason();
}

TEST_F(ControllerRestartTest, StepsReachedBeforeARestartCountAsLostWhenTheStopSavedNothing) {
  for (const char* n : {"n1", "n2"}) Register(n);
  std::string low = Submit(PrioSpec("low", 2, 2, 0));
  auto ranks = StartRanks({"n1", "n2"});
  Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)},
            {Step(ranks["n1"], 9), Step(ranks["n1"], 10), Checkpoint(ranks["n1"], 10), Step(ranks["n1"], 14)});
  // A running attempt's steps are written by the ticker, every progress_flush_interval, not by
  // each report.
  EXPECT_EQ(StoredReachedStep(low, 1), "0");
  c_->Tick();
  EXPECT_EQ(StoredReachedStep(low, 1), "0");
  clock_.Advance(config_.progress_flush_interval);
  c_->Tick();
  EXPECT_EQ(StoredReachedStep(low, 1), "14") << "the newest of the reports";
  // A resent report of an older step does not move it back.
  Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)}, {Step(ranks["n1"], 13)});
  clock_.Advance(config_.progress_flush_interval);
  c_->Tick();
  EXPECT_EQ(StoredReachedStep(low, 1), "14");

  Restart();
  Register("n1", 1, {Rank(ranks["n1"], v1::RANK_STATE_RUNNING)});
  Register("n2", 1, {Rank(ranks["n2"], v1::RANK_STATE_RUNNING)});
  std::string high = Submit(PrioSpec("high", 1, 1, 3));
  ASSERT_EQ(Job(low).state(), v1::JOB_STATE_RECOVERING) << Job(low).reason();
  // The ranks ignore the stop and are killed at the end of the grace period: no stop checkpoint.
  Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_EXITED, 0, 9)});
  Heartbeat("n2", {Rank(ranks["n2"], v1::RANK_STATE_EXITED, 0, 9)});
  ASSERT_EQ(Job(high).state(), v1::JOB_STATE_STARTING) << Job(high).reason();
  const std::string high_node = Job(high).attempts(0).nodes(0);
  auto hr = StartRanks({high_node});
  Heartbeat(high_node, {Rank(hr[high_node], v1::RANK_STATE_EXITED, 0)});
  c_->Tick();
  v1::Job l = Job(low);
  ASSERT_EQ(l.state(), v1::JOB_STATE_STARTING) << l.reason();
  auto started = EventsOfType(low, "attempt_started");
  ASSERT_EQ(started.size(), 2u);
  EXPECT_NE(started[1].find("(step 10; attempt 1 reached step 14: 4 steps lost)"), std::string::npos) << started[1];
  auto not_saved = EventsOfType(low, "stop_not_saved");
  ASSERT_EQ(not_saved.size(), 1u);
  EXPECT_NE(not_saved[0].find("4 steps lost"), std::string::npos) << not_saved[0];
}

// The loss curves (docs/architecture.md, "Loss history"): at most kLossHistoryPoints per curve
// however long the job, the same after a restart, and they go on from there.
TEST_F(ControllerRestartTest, LossHistoryIsBoundedAndSurvivesARestart) {
  Register("n1");
  std::string id = Submit(Spec("long", 1, 1));
  auto ranks = StartRanks({"n1"});
  const v1::RankAssignment& a = ranks["n1"];
  for (int step = 1; step <= 3000; step += 10) {
    std::vector<v1::RankEvent> events;
    for (int s = step; s < step + 10; ++s) {
      events.push_back(Event(a, ++seq_,
                             R"({"event":"step","step":)" + std::to_string(s) + R"(,"loss":)" +
                                 std::to_string(4.0 / s) + R"(,"total_steps":3000})"));
    }
    if (step % 500 == 1) {
      events.push_back(Event(a, ++seq_,
                             R"({"event":"eval","step":)" + std::to_string(step) + R"(,"loss":)" +
                                 std::to_string(5.0 / step) + R"(,"tokens":100})"));
    }
    Heartbeat("n1", {Rank(a, v1::RANK_STATE_RUNNING)}, events);
  }
  clock_.Advance(config_.progress_flush_interval);
  c_->Tick();
  const v1::Job before = Job(id);
  ASSERT_GT(before.loss_history().train_size(), 0);
  EXPECT_LE(before.loss_history().train_size(), static_cast<int>(kLossHistoryPoints));
  EXPECT_GE(before.loss_history().train_size(), static_cast<int>(kLossHistoryPoints / 2));
  EXPECT_EQ(before.loss_history().train(before.loss_history().train_size() - 1).step(), 3000);
  ASSERT_EQ(before.loss_history().eval_size(), 6);
  EXPECT_EQ(before.loss_history().eval(1).step(), 501);
  EXPECT_EQ(RawQueryForTest("SELECT COUNT(*) FROM loss_points WHERE job_id = " + id + " AND curve = 0"),
            std::to_string(before.loss_history().train_size()))
      << "one row per point: bounded rows per job";

  Restart();
  const v1::Job after = Job(id);
  EXPECT_EQ(after.loss_history().SerializeAsString(), before.loss_history().SerializeAsString());

  // The job goes on after the restart (the worker registers again): the curve grows from there.
  Register("n1", 1, {Rank(a, v1::RANK_STATE_RUNNING)});
  Heartbeat("n1", {Rank(a, v1::RANK_STATE_RUNNING)},
            {Event(a, ++seq_, R"({"event":"eval","step":3000,"loss":0.5,"tokens":100})")});
  EXPECT_EQ(Job(id).loss_history().eval_size(), 7);
}

// Named eval sets (spec.data.eval): each set's newest loss in the progress (the first also as
// eval_loss), each set's curve in the loss history, named, after a restart too; an eval event of a
// set the job does not have changes nothing.
TEST_F(ControllerRestartTest, EachNamedEvalSetHasItsLossAndCurve) {
  Register("n1");
  v1::JobSpec spec = Spec("named", 1, 1);
  for (const char* name : {"new", "known"}) {
    v1::EvalSet* set = spec.mutable_data()->add_eval();
    set->set_name(name);
    set->set_path(std::string("/data/") + name + ".jsonl");
  }
  std::string id = Submit(spec);
  auto ranks = StartRanks({"n1"});
  const v1::RankAssignment& a = ranks["n1"];
  auto eval = [&](int step, const char* set, int index, double loss) {
    return Event(a, ++seq_, R"({"event":"eval","step":)" + std::to_string(step) + R"(,"loss":)" + std::to_string(loss) +
                                R"(,"tokens":50,"set":")" + set + R"(","index":)" + std::to_string(index) + "}");
  };
  Heartbeat("n1", {Rank(a, v1::RANK_STATE_RUNNING)},
            {eval(0, "known", 1, 1.0), eval(0, "new", 0, 3.0), eval(5, "new", 0, 1.5), eval(5, "known", 1, 1.25),
             eval(5, "other", 2, 9.0), eval(5, "known", 0, 9.0)});
  clock_.Advance(config_.progress_flush_interval);
  c_->Tick();
  const v1::Job before = Job(id);
  EXPECT_DOUBLE_EQ(before.progress().eval_loss(), 1.5) << "the first set's";
  ASSERT_EQ(before.progress().evals_size(), 2);
  EXPECT_EQ(before.progress().evals(0).set(), "new");
  EXPECT_DOUBLE_EQ(before.progress().evals(0).loss(), 1.5);
  EXPECT_EQ(before.progress().evals(1).set(), "known");
  EXPECT_DOUBLE_EQ(before.progress().evals(1).loss(), 1.25);
  EXPECT_EQ(before.progress().evals(1).step(), 5);
  const v1::LossHistory& h = before.loss_history();
  ASSERT_EQ(h.eval_sets_size(), 2);
  EXPECT_EQ(h.eval_sets(0).set(), "new");
  EXPECT_EQ(h.eval_sets(1).set(), "known");
  ASSERT_EQ(h.eval_sets(1).points_size(), 2);
  EXPECT_DOUBLE_EQ(h.eval_sets(1).points(0).loss(), 1.0);
  EXPECT_DOUBLE_EQ(h.eval_sets(1).points(1).loss(), 1.25);
  ASSERT_EQ(h.eval_size(), 2) << "eval: the first set's curve";
  EXPECT_DOUBLE_EQ(h.eval(1).loss(), 1.5);
  EXPECT_EQ(RawQueryForTest("SELECT COUNT(*) FROM loss_points WHERE job_id = " + id + " AND curve = 2"), "2");

  Restart();
  EXPECT_EQ(Job(id).loss_history().SerializeAsString(), h.SerializeAsString());
}

}  // namespace
}  // namespace eft::controller
