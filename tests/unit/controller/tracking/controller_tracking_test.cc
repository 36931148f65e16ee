// The controller's side of run tracking (controller/tracking/job_tracking.h, controller_tracking.cc)
// on a real Controller and SQLite file: the spec.tracking defaults filled in at submit, the
// mlflow_runs row, what an observer hears (jobs, their changes, metric points) and, after a restart,
// the runs not ended handed over again.
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "controller/tracking/job_tracking.h"
#include "tests/unit/controller/controller_test_fixture.h"

namespace eft::controller {
namespace {

// Records what the controller reports (called with its lock held, as a tracker is).
class Recorder final : public JobTrackingObserver {
 public:
  void OnJob(const TrackedJob& job, const MlflowRunRecord* stored) override {
    jobs.push_back(job);
    rows.push_back(stored ? std::optional<MlflowRunRecord>(*stored) : std::nullopt);
  }
  void OnPoints(const std::string& job_id, const std::vector<TrackedPoint>& p) override {
    for (const auto& point : p) points.push_back({job_id, point});
  }
  std::vector<TrackedJob> jobs;
  std::vector<std::optional<MlflowRunRecord>> rows;
  std::vector<std::pair<std::string, TrackedPoint>> points;
};

TEST(TrackingDefaultsTest, TheControllersSettingsFillWhatTheSpecLeavesEmpty) {
  ControllerConfig config;
  v1::JobSpec spec;
  EXPECT_TRUE(FillTrackingDefaults(config, "7", &spec));
  EXPECT_EQ(spec.tracking().mlflow_tracking_uri(), "off") << "no server: the stored spec says so";
  EXPECT_EQ(spec.tracking().mlflow_experiment(), "");
  EXPECT_EQ(spec.tracking().tensorboard(), "") << "eft-train's own default, <checkpoint.dir>/tensorboard";
  EXPECT_FALSE(FillTrackingDefaults(config, "7", &spec)) << "nothing left to fill";

  config.mlflow_tracking_uri = "http://mlflow:5000";
  config.mlflow_experiment = "team";
  config.tensorboard_dir = "/shared/tb/";
  v1::JobSpec plain;
  EXPECT_TRUE(FillTrackingDefaults(config, "12", &plain));
  EXPECT_EQ(plain.tracking().mlflow_tracking_uri(), "http://mlflow:5000");
  EXPECT_EQ(plain.tracking().mlflow_experiment(), "team");
  EXPECT_EQ(plain.tracking().tensorboard(), "/shared/tb/12");

  v1::JobSpec own;
  own.mutable_tracking()->set_mlflow_tracking_uri("https://other:443");
  own.mutable_tracking()->set_mlflow_experiment("mine");
  own.mutable_tracking()->set_tensorboard("off");
  EXPECT_FALSE(FillTrackingDefaults(config, "12", &own));
  EXPECT_EQ(own.tracking().mlflow_tracking_uri(), "https://other:443");
  EXPECT_EQ(own.tracking().mlflow_experiment(), "mine");
  EXPECT_EQ(own.tracking().tensorboard(), "off");

  v1::JobSpec off;
  off.mutable_tracking()->set_mlflow_tracking_uri("off");
  FillTrackingDefaults(config, "12", &off);
  EXPECT_EQ(off.tracking().mlflow_experiment(), "") << "no experiment for a job not logged";
  EXPECT_EQ(MlflowUriOf(off), "");
  EXPECT_EQ(MlflowUriOf(plain), "http://mlflow:5000");
}

TEST(TrackingPointsTest, TheNamesTensorBoardUsesToo) {
  v1::TrainingProgress p;
  p.set_step(5);
  p.set_loss(2.5);
  p.set_lr(1e-4);
  p.set_grad_norm(0.5);
  p.set_tokens_per_s(1000);
  std::vector<std::string> keys;
  for (const auto& point : StepPoints(p, 77)) {
    keys.push_back(point.key);
    EXPECT_EQ(point.step, 5);
    EXPECT_EQ(point.time_ms, 77);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"train/loss", "train/learning_rate", "train/grad_norm",
                                            "train/tokens_per_second"}))
      << "train/mfu only when known (> 0)";
  p.set_mfu(0.4);
  p.set_loss(std::nan(""));
  keys.clear();
  for (const auto& point : StepPoints(p, 77)) keys.push_back(point.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"train/learning_rate", "train/grad_norm", "train/tokens_per_second",
                                            "train/mfu"}))
      << "a loss that is not finite is left out";
  EXPECT_EQ(EvalLossKey("held-out"), "eval/held-out/loss");
  EXPECT_EQ(EvalLossKey(".."), "eval/_../loss") << "MLflow refuses eval/../loss";
}

class ControllerTrackingTest : public ControllerTest {
 protected:
  void SetUp() override {
    config_.mlflow_tracking_uri = "http://mlflow:5000";
    config_.tensorboard_dir = "/shared/tb";
    ControllerTest::SetUp();
  }
  // Rank 0 on n1 reports a step with loss 1/step.
  void Step(const v1::RankAssignment& a, int step) {
    char loss[32];
    std::snprintf(loss, sizeof loss, "%.17g", 1.0 / step);
    Heartbeat("n1", {Rank(a, v1::RANK_STATE_RUNNING)},
              {Event(a, ++seq_, R"({"event":"step","step":)" + std::to_string(step) + R"(,"loss":)" + loss +
                                    R"(,"lr":0.001,"total_steps":10})")});
  }
  uint64_t seq_ = 0;
};

TEST_F(ControllerTrackingTest, TheStoredSpecSaysWhatRunsAndTheObserverHearsOfTrackedJobsOnly) {
  Recorder recorder;
  ASSERT_TRUE(c_->SetTrackingObserver(&recorder).ok());
  EXPECT_TRUE(recorder.jobs.empty());
  const std::string id = Submit(Spec("tracked", 1, 1));
  v1::JobSpec off = Spec("not-tracked", 1, 1);
  off.mutable_tracking()->set_mlflow_tracking_uri("off");
  const std::string untracked = Submit(off);

  const v1::Job job = Job(id);
  EXPECT_EQ(job.spec().tracking().mlflow_tracking_uri(), "http://mlflow:5000");
  EXPECT_EQ(job.spec().tracking().mlflow_experiment(), "eft");
  EXPECT_EQ(job.spec().tracking().tensorboard(), "/shared/tb/" + id);
  EXPECT_EQ(Job(untracked).spec().tracking().mlflow_tracking_uri(), "off");

  ASSERT_EQ(recorder.jobs.size(), 1u) << "only the tracked job";
  EXPECT_EQ(recorder.jobs[0].id, id);
  EXPECT_EQ(recorder.jobs[0].state, v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(recorder.rows[0]);
  EXPECT_EQ(recorder.rows[0]->job_id, id);
  EXPECT_EQ(recorder.rows[0]->run_key.size(), 32u);
  EXPECT_EQ(recorder.rows[0]->run_id, "");

  Register("n1");
  auto ranks = StartRanks({"n1"});
  for (int s = 1; s <= 3; ++s) Step(ranks["n1"], s);
  ASSERT_FALSE(recorder.jobs.empty());
  EXPECT_EQ(recorder.jobs.back().state, v1::JOB_STATE_RUNNING);
  ASSERT_EQ(recorder.jobs.back().attempts.size(), 1u);
  EXPECT_EQ(recorder.jobs.back().attempts[0].world_size, 1);
  EXPECT_FALSE(recorder.rows.back()) << "a change comes without the row";
  std::vector<std::pair<int64_t, double>> losses;
  for (const auto& [job_id, p] : recorder.points) {
    EXPECT_EQ(job_id, id);
    if (p.key == kTrainLossKey) losses.push_back({p.step, p.value});
  }
  EXPECT_EQ(losses, (std::vector<std::pair<int64_t, double>>{{1, 1.0}, {2, 0.5}, {3, 1.0 / 3}}));
  Heartbeat("n1", {Rank(ranks["n1"], v1::RANK_STATE_EXITED, 0)});
  EXPECT_EQ(recorder.jobs.back().state, v1::JOB_STATE_SUCCEEDED);
  EXPECT_TRUE(recorder.jobs.back().attempts[0].ended);
  EXPECT_EQ(recorder.jobs.back().attempts[0].reached_step, 3);
  ASSERT_TRUE(c_->SetTrackingObserver(nullptr).ok());
}

TEST_F(ControllerTrackingTest, ARestartHandsOverTheRunsNotEndedWithTheirRows) {
  const std::string running = Submit(Spec("running", 1, 1));
  const std::string ended = Submit(Spec("ended", 1, 1));  // waits: one node
  Register("n1");
  auto ranks = StartRanks({"n1"});
  for (int s = 1; s <= 4; ++s) Step(ranks["n1"], s);
  clock_.Advance(2s);
  c_->Tick();  // the loss curve is flushed to the store
  ASSERT_TRUE(c_->SaveMlflowRun({ended, "k1", "3", "run-ended", true}).ok());
  ASSERT_TRUE(c_->SaveMlflowRun({running, "k2", "3", "run-2", false}).ok());
  ASSERT_TRUE(c_->AddJobEvent(running, "mlflow_unreachable", "MLflow server http://mlflow:5000 failing").ok());

  Restart();
  Recorder recorder;
  ASSERT_TRUE(c_->SetTrackingObserver(&recorder).ok());
  ASSERT_EQ(recorder.jobs.size(), 1u) << "only the run not ended";
  const std::string started = recorder.jobs[0].id;
  EXPECT_TRUE(started == running);
  ASSERT_TRUE(recorder.rows[0]);
  EXPECT_EQ(recorder.rows[0]->run_id, "run-2");
  EXPECT_EQ(recorder.rows[0]->run_key, "k2");
  EXPECT_EQ(recorder.rows[0]->experiment_id, "3");
  EXPECT_EQ(EventsOfType(running, "mlflow_unreachable").size(), 1u) << "the tracker's events are the job's";

  auto curves = c_->StoredLossCurves(started);
  ASSERT_TRUE(curves.ok()) << curves.status();
  std::vector<int64_t> steps;
  for (const auto& p : *curves) {
    if (p.key == kTrainLossKey) steps.push_back(p.step);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4}));
  ASSERT_TRUE(c_->SetTrackingObserver(nullptr).ok());
}

}  // namespace
}  // namespace eft::controller
