// What the controller logs to MLflow and how it fits MLflow's limits (controller/tracking/mlflow_batch.h):
// the spec as params, the tags, the batches (against the limits of mlflow/utils/validation.py), the
// retry delays and the queue's bound.
#include "controller/tracking/mlflow_batch.h"

#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "controller/tracking/mlflow_client.h"
#include "spec/job_spec.h"

namespace eft::controller::mlflow {
namespace {

using namespace std::chrono_literals;

v1::JobSpec NormalizedSpec() {
  auto spec = spec::ParseJobSpec(R"(
name: sft
model: /models/m
data: {train: /data/train.jsonl}
training: {lr: 0.003, global_batch_size: 8, micro_batch_size: 2}
env: {HF_TOKEN: hf_secret, WANDB_API_KEY: abc, OMP_NUM_THREADS: "1"}
tracking: {mlflow_tracking_uri: 'http://alice:pw@mlflow:5000/x', mlflow_experiment: sft}
)");
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec::NormalizeJobSpec(&*spec).ok());
  return *spec;
}

std::map<std::string, std::string> AsMap(const std::vector<KeyValue>& kv) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : kv) EXPECT_TRUE(out.emplace(k, v).second) << "duplicate key " << k;
  return out;
}

TEST(MlflowParamsTest, TheNormalizedSpecAtDottedPathsWithSecretsRedacted) {
  const auto params = AsMap(SpecParams(NormalizedSpec()));
  EXPECT_EQ(params.at("name"), "sft");
  EXPECT_EQ(params.at("model"), "/models/m");
  EXPECT_EQ(params.at("training.lr"), "0.003");
  EXPECT_EQ(params.at("training.global_batch_size"), "8");
  EXPECT_EQ(params.at("resources.nodes.min"), "1") << "defaults are filled in: the spec as it runs";
  EXPECT_EQ(params.at("data.packing"), "true");
  EXPECT_EQ(params.at("data.eval"), "[]") << "lists as JSON text";
  EXPECT_EQ(params.at("env.OMP_NUM_THREADS"), "1");
  EXPECT_EQ(params.at("env.HF_TOKEN"), "<redacted>");
  EXPECT_EQ(params.at("env.WANDB_API_KEY"), "<redacted>");
  EXPECT_EQ(params.at("tracking.mlflow_tracking_uri"), "http://<redacted>@mlflow:5000/x");
  EXPECT_GT(params.size(), 40u);
  for (const auto& [key, value] : params) {
    EXPECT_LE(key.size(), kMaxKeyChars);
    EXPECT_LE(value.size(), kMaxParamValueChars);
  }
}

TEST(MlflowParamsTest, LongValuesAreCutToMlflowsLimit) {
  v1::JobSpec spec = NormalizedSpec();
  spec.add_command(std::string(7000, 'x'));
  spec.set_model(std::string(5990, 'a') + "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9");  // é at the cut
  const auto params = AsMap(SpecParams(spec));
  EXPECT_LE(params.at("command").size(), kMaxParamValueChars);
  EXPECT_EQ(params.at("command").substr(params.at("command").size() - 3), "...");
  const std::string& model = params.at("model");
  EXPECT_LE(model.size(), kMaxParamValueChars);
  EXPECT_EQ(model.substr(model.size() - 3), "...");
  EXPECT_NE(static_cast<unsigned char>(model[model.size() - 4]), 0xc3) << "not cut inside a UTF-8 character";
}

TEST(MlflowTagsTest, StateAttemptsAndHowEachAttemptEnded) {
  TrackedJob job;
  job.id = "7";
  job.state = v1::JOB_STATE_RUNNING;
  job.restarts = 1;
  TrackedAttempt first{1, 3, 0, 57, true, v1::ATTEMPT_END_NODE_LOST, "node node2 lost (no heartbeat for 3.0 s)"};
  TrackedAttempt second{2, 2, 50, 60, false, v1::ATTEMPT_END_UNSPECIFIED, ""};
  job.attempts = {first, second};
  auto tags = JobTags(job);
  EXPECT_EQ(tags.at("eft.job_id"), "7");
  EXPECT_EQ(tags.at("eft.state"), "RUNNING");
  EXPECT_EQ(tags.at("eft.attempts"), "2");
  EXPECT_EQ(tags.at("eft.restarts"), "1");
  EXPECT_EQ(tags.at("eft.world_size"), "2");
  EXPECT_EQ(tags.at("eft.attempt.1"),
            "start step 0, world size 3, ended at step 57: NODE_LOST (node node2 lost (no heartbeat for 3.0 s))");
  EXPECT_EQ(tags.at("eft.attempt.2"), "start step 50, world size 2, running");
  EXPECT_EQ(tags.count("eft.reason"), 0u) << "only once the job ended";
  job.state = v1::JOB_STATE_SUCCEEDED;
  job.reason = "all 2 ranks exited 0";
  EXPECT_EQ(JobTags(job).at("eft.reason"), "all 2 ranks exited 0");
  EXPECT_EQ(AttemptTag({3, 1, -1, 0, false, v1::ATTEMPT_END_UNSPECIFIED, ""}), "start step ?, world size 1, running");
  EXPECT_EQ(JobTags(TrackedJob{}).at("eft.world_size"), "0");
}

TEST(MlflowTagsTest, RunStatusOfEachFinalState) {
  EXPECT_EQ(RunStatusFor(v1::JOB_STATE_SUCCEEDED), "FINISHED");
  EXPECT_EQ(RunStatusFor(v1::JOB_STATE_FAILED), "FAILED");
  EXPECT_EQ(RunStatusFor(v1::JOB_STATE_CANCELLED), "KILLED");
  for (auto s : {v1::JOB_STATE_QUEUED, v1::JOB_STATE_STARTING, v1::JOB_STATE_RUNNING, v1::JOB_STATE_RECOVERING}) {
    EXPECT_EQ(RunStatusFor(s), "") << StateName(s);
  }
}

// Drains params, tags and metrics through PlanBatch as the pipeline does, and checks every batch's
// real JSON (LogBatchJson) against MLflow's limits.
struct Drained {
  int batches = 0;
  std::vector<KeyValue> params, tags;
  std::vector<Metric> metrics;
};
Drained Drain(std::vector<KeyValue> params, std::vector<KeyValue> tags, std::vector<Metric> metrics) {
  Drained out;
  while (!params.empty() || !tags.empty() || !metrics.empty()) {
    const BatchSize b = PlanBatch(params, tags, metrics.size(), [&](size_t i) { return MetricBytes(metrics[i].key); });
    EXPECT_GT(b.params + b.tags + b.metrics, 0u) << "a batch always carries something";
    EXPECT_LE(b.params, kMaxParamsPerBatch);
    EXPECT_LE(b.tags, kMaxTagsPerBatch);
    EXPECT_LE(b.metrics, kMaxMetricsPerBatch);
    EXPECT_LE(b.params + b.tags + b.metrics, kMaxEntitiesPerBatch);
    if (b.metrics > 0) {
      EXPECT_EQ(b.params + b.tags, params.size() + tags.size()) << "metrics only after params and tags";
    }
    std::vector<KeyValue> p(params.begin(), params.begin() + b.params), t(tags.begin(), tags.begin() + b.tags);
    std::vector<Metric> m(metrics.begin(), metrics.begin() + b.metrics);
    const std::string body = LogBatchJson("0123456789abcdef0123456789abcdef", m, p, t);
    EXPECT_LE(body.size(), 1'000'000u) << "MLflow's MAX_BATCH_LOG_REQUEST_SIZE";
    out.params.insert(out.params.end(), p.begin(), p.end());
    out.tags.insert(out.tags.end(), t.begin(), t.end());
    out.metrics.insert(out.metrics.end(), m.begin(), m.end());
    params.erase(params.begin(), params.begin() + b.params);
    tags.erase(tags.begin(), tags.begin() + b.tags);
    metrics.erase(metrics.begin(), metrics.begin() + b.metrics);
    ++out.batches;
    if (out.batches > 1000) break;
  }
  return out;
}

TEST(MlflowBatchTest, EveryItemOnceInOrderWithinMlflowsLimits) {
  std::vector<KeyValue> params, tags;
  std::vector<Metric> metrics;
  for (int i = 0; i < 250; ++i) params.push_back({"p." + std::to_string(i), std::to_string(i)});
  for (int i = 0; i < 150; ++i) tags.push_back({"eft.attempt." + std::to_string(i), "start step 0, world size 2, running"});
  for (int i = 0; i < 2500; ++i) metrics.push_back({"train/loss", 1.0 / (i + 1), 1'700'000'000'000 + i, i + 1});
  const Drained d = Drain(params, tags, metrics);
  EXPECT_EQ(d.params, params);
  EXPECT_EQ(d.tags, tags);
  ASSERT_EQ(d.metrics.size(), metrics.size());
  for (size_t i = 0; i < metrics.size(); ++i) EXPECT_EQ(d.metrics[i].step, metrics[i].step);
  // 100 params + 100 tags, 100 params + 50 tags, 50 params + 950 metrics, 1000 metrics, 550 metrics.
  EXPECT_EQ(d.batches, 5);
}

TEST(MlflowBatchTest, LargeValuesSplitByBytes) {
  std::vector<KeyValue> params, tags;
  // 100 params of 6000 quote characters: 1.2 MB once escaped, more than one request may carry.
  for (int i = 0; i < 100; ++i) params.push_back({"p." + std::to_string(i), std::string(6000, '"')});
  for (int i = 0; i < 100; ++i) tags.push_back({"t." + std::to_string(i), std::string(8000, '\\')});
  const Drained d = Drain(params, tags, {});
  EXPECT_EQ(d.params.size(), 100u);
  EXPECT_EQ(d.tags.size(), 100u);
  EXPECT_GE(d.batches, 4);
}

TEST(MlflowRetryTest, DoublesFromTheInitialDelayUpToTheCap) {
  std::vector<long> delays;
  for (int failures = 1; failures <= 8; ++failures) delays.push_back(RetryDelay(failures, 1000ms, 30000ms).count());
  EXPECT_EQ(delays, (std::vector<long>{1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000}));
  EXPECT_EQ(RetryDelay(100, 1000ms, 30000ms).count(), 30000) << "no overflow";
}

std::deque<QueuedPoint> Steps(int first, int last, int keys) {
  std::deque<QueuedPoint> q;
  for (int s = first; s <= last; ++s) {
    for (int k = 0; k < keys; ++k) q.push_back({static_cast<uint32_t>(k), s, 1.0 / s, 0, SteadyTime(std::chrono::seconds(s)), false});
  }
  return q;
}

TEST(MlflowQueueTest, ThinningKeepsTheBoundWholeStepsEvaluationsAndTheNewestHalf) {
  std::deque<QueuedPoint> q = Steps(1, 1000, 4);                                    // 4000 points
  q.insert(q.begin() + 40, QueuedPoint{9, 10, 0.5, 0, SteadyTime(10s), true});  // an evaluation, old
  const size_t before = q.size();
  const size_t dropped = ThinQueue(&q, 2000);
  EXPECT_LE(q.size(), 2000u);
  EXPECT_EQ(before - q.size(), dropped);
  std::map<int64_t, int> per_step;
  bool eval_kept = false;
  for (const auto& p : q) {
    if (p.precious) {
      eval_kept = true;
    } else {
      ++per_step[p.step];
    }
  }
  EXPECT_TRUE(eval_kept);
  for (const auto& [step, n] : per_step) EXPECT_EQ(n, 4) << "step " << step << " kept partly";
  for (int s = 751; s <= 1000; ++s) EXPECT_EQ(per_step.count(s), 1u) << "newest steps are never thinned: " << s;
  // The steps that stay still span the whole range: the curve keeps its shape.
  EXPECT_EQ(per_step.begin()->first, 1);
  EXPECT_EQ(q.back().step, 1000);
  // Order is kept.
  for (size_t i = 1; i < q.size(); ++i) {
    if (!q[i].precious && !q[i - 1].precious) {
      EXPECT_LE(q[i - 1].step, q[i].step);
    }
  }
}

TEST(MlflowQueueTest, AQueueOfOneStepLosesItsOldestPoints) {
  std::deque<QueuedPoint> q;
  for (int i = 0; i < 10; ++i) q.push_back({static_cast<uint32_t>(i), 5, 1, 0, SteadyTime{}, false});
  EXPECT_EQ(ThinQueue(&q, 4), 6u);
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q.front().key, 6u);
}

}  // namespace
}  // namespace eft::controller::mlflow
