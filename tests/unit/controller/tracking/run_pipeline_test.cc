// One job's way into its MLflow run (controller/tracking/run_pipeline.h), driven by hand: each piece
// of work is answered as a server or the controller would, with a ManualClock for time.
#include "controller/tracking/run_pipeline.h"

#include <gtest/gtest.h>

#include "spec/job_spec.h"

namespace eft::controller::mlflow {
namespace {

using namespace std::chrono_literals;
using Kind = Work::Kind;

TrackedJob Job(v1::JobState state = v1::JOB_STATE_QUEUED) {
  TrackedJob j;
  j.id = "7";
  j.spec.set_name("sft");
  j.spec.add_command("/bin/true");
  EXPECT_TRUE(spec::NormalizeJobSpec(&j.spec).ok());
  j.spec.mutable_tracking()->set_mlflow_tracking_uri("http://mlflow:5000");
  j.spec.mutable_tracking()->set_mlflow_experiment("exp");
  j.state = state;
  j.create_ms = 1'700'000'000'000;
  return j;
}

std::vector<TrackedPoint> Losses(int from, int to, double scale = 1.0) {
  std::vector<TrackedPoint> out;
  for (int s = from; s <= to; ++s) out.push_back({kTrainLossKey, s, scale / s, 1000 + s});
  return out;
}

Outcome Ok(std::string id = "") {
  Outcome o;
  o.id = std::move(id);
  return o;
}
Outcome Err(Status s) {
  Outcome o;
  o.status = std::move(s);
  return o;
}

class RunPipelineTest : public ::testing::Test {
 protected:
  Work Next() { return p_->Next(clock_.Now(), clock_.WallMillis()); }
  void Finish(Work w, const Outcome& o) { p_->Finish(std::move(w), o, clock_.Now(), clock_.WallMillis()); }
  // Answers every piece of work up to the first runs/log-batch (returned, not answered).
  Work UpToFirstBatch() {
    for (int i = 0; i < 10; ++i) {
      Work w = Next();
      if (w.kind == Kind::kLogBatch || w.kind == Kind::kNone) return w;
      Finish(w, w.kind == Kind::kExperiment ? Ok("1") : w.kind == Kind::kFindOrCreateRun ? Ok("run1") : Ok());
    }
    return {};
  }
  // Sends every batch, successfully; the steps of train/loss sent, in order.
  std::vector<int64_t> SendAll() {
    std::vector<int64_t> steps;
    for (Work w = Next(); w.kind == Kind::kLogBatch; w = Next()) {
      for (const Metric& m : w.metrics) {
        if (m.key == kTrainLossKey) steps.push_back(m.step);
      }
      Finish(w, Ok());
    }
    return steps;
  }

  ManualClock clock_;
  std::unique_ptr<RunPipeline> p_;
};

TEST_F(RunPipelineTest, AFreshJobMakesItsRunLogsParamsTagsAndPointsThenEndsIt) {
  p_ = std::make_unique<RunPipeline>(Job(), MlflowRunRecord{"7", "key7", "", "", false}, false, 1000);
  Work w = Next();
  ASSERT_EQ(w.kind, Kind::kExperiment);
  EXPECT_EQ(w.uri, "http://mlflow:5000");
  EXPECT_EQ(w.experiment, "exp");
  EXPECT_EQ(Next().kind, Kind::kNone) << "one piece of work at a time";
  Finish(w, Ok("12"));
  w = Next();
  ASSERT_EQ(w.kind, Kind::kFindOrCreateRun);
  EXPECT_EQ(w.experiment_id, "12");
  EXPECT_EQ(w.run_name, "sft-7");
  EXPECT_EQ(w.start_ms, 1'700'000'000'000);
  EXPECT_EQ(w.row.run_key, "key7");
  Finish(w, Ok("run1"));
  w = Next();
  ASSERT_EQ(w.kind, Kind::kSaveRun) << "the run id is stored before anything is logged to it";
  EXPECT_EQ(w.row.run_id, "run1");
  EXPECT_EQ(w.row.experiment_id, "12");
  EXPECT_FALSE(w.row.ended);
  Finish(w, Ok());

  p_->Add(Losses(1, 3), clock_.Now());
  w = Next();
  ASSERT_EQ(w.kind, Kind::kLogBatch);
  EXPECT_EQ(w.run_id, "run1");
  EXPECT_EQ(w.params.size(), SpecParams(Job().spec).size());
  EXPECT_FALSE(w.tags.empty());
  EXPECT_EQ(w.metrics.size(), 3u);
  EXPECT_EQ(p_->pending_points(), 3u) << "in flight counts as pending";
  Finish(w, Ok());
  EXPECT_EQ(p_->sent_points(), 3u);
  EXPECT_EQ(p_->pending_points(), 0u);
  EXPECT_EQ(Next().kind, Kind::kNone) << "nothing to send: waiting for more";
  EXPECT_FALSE(p_->has_work());

  TrackedJob done = Job(v1::JOB_STATE_SUCCEEDED);
  done.end_ms = 1'700'000'100'000;
  done.reason = "all 1 ranks exited 0";
  p_->Update(done);
  EXPECT_TRUE(p_->has_work());
  w = Next();
  ASSERT_EQ(w.kind, Kind::kLogBatch) << "the final tags go before the end";
  std::map<std::string, std::string> tags;
  for (const auto& [k, v] : w.tags) tags[k] = v;
  EXPECT_EQ(tags["eft.state"], "SUCCEEDED");
  EXPECT_EQ(tags["eft.reason"], "all 1 ranks exited 0");
  EXPECT_EQ(tags.count("eft.job_id"), 0u) << "only tags that changed";
  Finish(w, Ok());
  w = Next();
  ASSERT_EQ(w.kind, Kind::kEndRun);
  EXPECT_EQ(w.status, "FINISHED");
  EXPECT_EQ(w.end_ms, 1'700'000'100'000);
  Finish(w, Ok());
  w = Next();
  ASSERT_EQ(w.kind, Kind::kSaveEnded);
  EXPECT_TRUE(w.row.ended);
  EXPECT_EQ(w.row.run_id, "run1");
  Finish(w, Ok());
  EXPECT_TRUE(p_->done());
  EXPECT_FALSE(p_->failed());
}

TEST_F(RunPipelineTest, AFailedCallPutsTheBatchBackAsItWas) {
  p_ = std::make_unique<RunPipeline>(Job(), MlflowRunRecord{"7", "k", "", "", false}, false, 1000);
  p_->Add(Losses(1, 5), clock_.Now());
  Work first = UpToFirstBatch();
  ASSERT_EQ(first.kind, Kind::kLogBatch);
  const std::vector<Metric> sent = first.metrics;
  const size_t params = first.params.size();
  Finish(first, Err(Status::Unavailable("connection refused")));
  p_->Add(Losses(6, 7), clock_.Now());
  Work again = Next();
  ASSERT_EQ(again.kind, Kind::kLogBatch);
  EXPECT_EQ(again.params.size(), params);
  ASSERT_EQ(again.metrics.size(), 7u);
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(again.metrics[i].step, sent[i].step);
  EXPECT_EQ(again.metrics.back().step, 7);
  Finish(again, Err(Status(StatusCode::kDeadlineExceeded, "no reply within 10000 ms")));
  EXPECT_EQ(p_->dropped_points(), 0u) << "nothing is lost to a server that is down or slow";
  EXPECT_EQ(SendAll(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
}

TEST_F(RunPipelineTest, ARejectedBatchIsDroppedAndCounted) {
  p_ = std::make_unique<RunPipeline>(Job(), MlflowRunRecord{"7", "k", "", "", false}, false, 1000);
  Work w = UpToFirstBatch();
  Finish(w, Ok());  // params and tags
  p_->Add(Losses(1, 4), clock_.Now());
  w = Next();
  Finish(w, Err(Status::InvalidArgument("HTTP 400 INVALID_PARAMETER_VALUE: the run must be active")));
  EXPECT_EQ(p_->dropped_points(), 4u);
  EXPECT_NE(p_->last_rejection().find("must be active"), std::string::npos);
  EXPECT_FALSE(p_->done());
  p_->Add(Losses(5, 5), clock_.Now());
  EXPECT_EQ(SendAll(), (std::vector<int64_t>{5}));
}

TEST_F(RunPipelineTest, AStepTrainedAgainKeepsItsFirstValue) {
  p_ = std::make_unique<RunPipeline>(Job(), MlflowRunRecord{"7", "k", "", "", false}, false, 1000);
  p_->Add(Losses(1, 10), clock_.Now());
  p_->Add(Losses(6, 12, 2.0), clock_.Now());  // resumed from step 5
  Work w = UpToFirstBatch();
  ASSERT_EQ(w.metrics.size(), 12u);
  for (const Metric& m : w.metrics) EXPECT_DOUBLE_EQ(m.value, m.step <= 10 ? 1.0 / m.step : 2.0 / m.step);
}

TEST_F(RunPipelineTest, ARunContinuedAfterARestartSkipsWhatTheServerHasAndBackfillsTheGap) {
  // The controller restarted: the stored row names the run; the job is running and its ranks
  // report from step 9 on (steps 6..8 only reached the old controller's store).
  TrackedJob job = Job(v1::JOB_STATE_RUNNING);
  job.attempts.push_back({1, 1, 0, 8, false, v1::ATTEMPT_END_UNSPECIFIED, ""});
  p_ = std::make_unique<RunPipeline>(job, MlflowRunRecord{"7", "k", "12", "run1", false}, true, 1000);
  p_->Add(Losses(9, 10), clock_.Now());
  Work w = Next();
  ASSERT_EQ(w.kind, Kind::kGetRun) << "a known run: ask what it has";
  EXPECT_EQ(w.run_id, "run1");
  Outcome had;
  had.run.max_step = {{kTrainLossKey, 5}};
  had.run.params = {"name", "model"};
  had.run.tags = {{"eft.job_id", "7"}, {"eft.state", "RUNNING"}};
  Finish(w, had);
  w = Next();
  ASSERT_EQ(w.kind, Kind::kBackfill);
  EXPECT_EQ(w.job_id, "7");
  Outcome stored;
  stored.curves = Losses(1, 8);
  for (auto& p : stored.curves) p.time_ms = 0;
  stored.curves.push_back({"eval/eval/loss", 8, 0.25, 0});
  Finish(w, stored);
  w = Next();
  ASSERT_EQ(w.kind, Kind::kLogBatch);
  for (const auto& p : w.params) EXPECT_TRUE(p.key != "name" && p.key != "model") << p.key << " is there already";
  for (const auto& t : w.tags) EXPECT_TRUE(t.key != "eft.job_id" && t.key != "eft.state") << t.key;
  std::vector<int64_t> steps;
  int evals = 0;
  for (const Metric& m : w.metrics) {
    if (m.key == kTrainLossKey) steps.push_back(m.step);
    if (m.key == "eval/eval/loss") ++evals;
    EXPECT_GT(m.time_ms, 0) << "a backfilled point is stamped";
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{6, 7, 8, 9, 10}));
  EXPECT_EQ(evals, 1);
  Finish(w, Ok());
  p_->Add(Losses(8, 11), clock_.Now());  // a resent or re-run step is not sent twice
  EXPECT_EQ(SendAll(), (std::vector<int64_t>{11}));
}

TEST_F(RunPipelineTest, ARunMadeJustBeforeACrashIsFoundByItsKeyNotMadeTwice) {
  TrackedJob job = Job(v1::JOB_STATE_RUNNING);
  p_ = std::make_unique<RunPipeline>(job, MlflowRunRecord{"7", "k", "", "", false}, true, 1000);
  Work w = Next();
  ASSERT_EQ(w.kind, Kind::kExperiment);
  Finish(w, Ok("12"));
  w = Next();
  ASSERT_EQ(w.kind, Kind::kFindOrCreateRun);
  Outcome found = Ok("run0");
  found.existed = true;
  Finish(w, found);
  w = Next();
  ASSERT_EQ(w.kind, Kind::kSaveRun);
  EXPECT_EQ(w.row.run_id, "run0");
  Finish(w, Ok());
  EXPECT_EQ(Next().kind, Kind::kGetRun) << "it may hold points already";
}

TEST_F(RunPipelineTest, PointsWaitingForADownServerStayWithinTheBound) {
  p_ = std::make_unique<RunPipeline>(Job(), MlflowRunRecord{"7", "k", "", "", false}, false, 100);
  for (int s = 1; s <= 500; ++s) p_->Add(Losses(s, s), clock_.Now() + std::chrono::seconds(s));
  EXPECT_LE(p_->pending_points(), 100u);
  EXPECT_EQ(p_->pending_points() + p_->dropped_points(), 500u);
  EXPECT_EQ(p_->oldest_pending(), clock_.Now() + 1s) << "the first step stays: the curve keeps its start";
}

TEST_F(RunPipelineTest, AFailedCallIntoTheControllerIsRetriedAfterASecond) {
  p_ = std::make_unique<RunPipeline>(Job(), MlflowRunRecord{"7", "k", "", "", false}, false, 1000);
  Finish(Next(), Ok("12"));
  Finish(Next(), Ok("run1"));
  Work w = Next();
  ASSERT_EQ(w.kind, Kind::kSaveRun);
  Finish(w, Err(Status::IoError("disk full")));
  EXPECT_EQ(Next().kind, Kind::kNone);
  clock_.Advance(1s);
  EXPECT_EQ(Next().kind, Kind::kSaveRun);
}

TEST_F(RunPipelineTest, ADeletedExperimentFailsTheRunWithTheServersWords) {
  p_ = std::make_unique<RunPipeline>(Job(), MlflowRunRecord{"7", "k", "", "", false}, false, 1000);
  p_->Add(Losses(1, 3), clock_.Now());
  Work w = Next();
  Finish(w, Err(Status::Unavailable("down")));
  EXPECT_FALSE(p_->done()) << "a server that is down is not a failure";
  w = Next();
  Finish(w, Err(Status::FailedPrecondition("MLflow experiment 'exp' is deleted")));
  EXPECT_TRUE(p_->done());
  EXPECT_TRUE(p_->failed());
  EXPECT_EQ(p_->failure(), "MLflow experiment 'exp' is deleted");
  EXPECT_EQ(p_->dropped_points(), 3u);
  EXPECT_EQ(Next().kind, Kind::kNone);
}

TEST_F(RunPipelineTest, AJobThatEndedBeforeItsRunWasMadeStillGetsItsRunEnded) {
  TrackedJob job = Job(v1::JOB_STATE_CANCELLED);
  job.end_ms = 0;
  p_ = std::make_unique<RunPipeline>(job, MlflowRunRecord{"7", "k", "", "", false}, false, 1000);
  Work w = UpToFirstBatch();
  ASSERT_EQ(w.kind, Kind::kLogBatch);
  Finish(w, Ok());
  w = Next();
  ASSERT_EQ(w.kind, Kind::kEndRun);
  EXPECT_EQ(w.status, "KILLED");
  EXPECT_EQ(w.end_ms, clock_.WallMillis()) << "an end the record does not date is dated now";
}

}  // namespace
}  // namespace eft::controller::mlflow
