// The main path end to end: a job without `command` submitted to a real controller runs eft-train
// on every rank through real workers (EFT_JOB_SPEC, the rank environment, events), trains a tiny
// random Llama, and writes the final Hugging Face directory.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"

namespace eft::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;



class TrainJob : public ::testing::Test {
 protected:
  void Prepare(TestCluster& c) {
    model_ = c.dir() + "/model";
    std::string cmd = TrainerBinary() + " init-model --arch qwen3 --hidden 64 --layers 2 --heads 4 --kv-heads 2 "
                                        "--head-dim 16 --intermediate 96 --vocab-size 128 --dtype float32 --out " +
                      model_ + " > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    data_ = c.dir() + "/data.jsonl";
    std::mt19937 gen(5);
    std::ofstream f(data_);
    for (int i = 0; i < 32; ++i) {
      nlohmann::json ids = nlohmann::json::array();
      for (int t = 0; t < 12; ++t) ids.push_back(1 + static_cast<int>(gen() % 127));
      f << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
    }
  }

  v1::JobSpec Spec(TestCluster& c, const std::string& name, const std::string& model) {
    v1::JobSpec spec;
    spec.set_name(name);
    spec.set_model(model);
    spec.mutable_data()->set_train(data_);
    spec.mutable_data()->set_max_seq_len(64);
    spec.mutable_data()->set_packing(false);  // steps counted in examples
    spec.mutable_resources()->mutable_nodes()->set_min(2);
    spec.mutable_resources()->mutable_nodes()->set_max(2);
    auto* t = spec.mutable_training();
    t->set_epochs(2);
    t->set_global_batch_size(8);
    t->set_micro_batch_size(2);
    t->set_lr(3e-3);
    t->set_precision("fp32");
    spec.mutable_checkpoint()->set_dir(c.checkpoint_root() + "/" + name);
    (*spec.mutable_env())["OMP_NUM_THREADS"] = "1";
    return spec;
  }

  std::string model_, data_;
};

TEST_F(TrainJob, AJobWithoutCommandRunsEftTrainOnEveryRank) {
  ClusterOptions o;
  o.workers = 2;
  TestCluster c(o);
  c.StartAll();
  Prepare(c);
  v1::Job job;
  ASSERT_TRUE(c.Submit(Spec(c, "sft", model_), &job).ok());
  job = c.WaitForJob(job.id(), IsTerminal, 180s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  EXPECT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).world_size(), 2);
  // Progress comes from rank 0's step events: 32 examples / 8 per step x 2 epochs.
  EXPECT_EQ(job.progress().step(), 8);
  EXPECT_EQ(job.progress().total_steps(), 8);
  EXPECT_GT(job.progress().loss(), 0);
  EXPECT_GT(job.progress().tokens_per_s(), 0);
  // The last checkpoint is a full one: a Hugging Face directory, committed, and known to the controller.
  std::string final_dir = c.checkpoint_root() + "/sft/step-8";
  EXPECT_TRUE(fs::exists(final_dir + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(final_dir + "/config.json"));
  EXPECT_TRUE(fs::exists(final_dir + "/COMMITTED"));
  ASSERT_GE(job.checkpoints_size(), 1);
  EXPECT_EQ(job.checkpoints(job.checkpoints_size() - 1).path(), final_dir);
  std::string log = ReadFile(c.dir() + "/work/node0/logs/" + job.id() + "/attempt-1/rank-0.log");
  EXPECT_NE(log.find("step 8/8"), std::string::npos) << log;
}

TEST_F(TrainJob, ABrokenModelFailsTheJobWithoutRetry) {
  ClusterOptions o;
  o.workers = 2;
  TestCluster c(o);
  c.StartAll();
  Prepare(c);
  v1::Job job;
  ASSERT_TRUE(c.Submit(Spec(c, "broken", c.dir() + "/no-such-model"), &job).ok());
  job = c.WaitForJob(job.id(), IsTerminal, 120s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_FAILED) << DescribeJob(job);
  EXPECT_EQ(job.attempts_size(), 1);
  EXPECT_NE(job.reason().find("exited with code 2"), std::string::npos) << job.reason();
}

// The mission in one test: a node dies in the middle of an eft-train job; the controller restarts it
// on the nodes it has, at a smaller world size, from the newest checkpoint, and the job finishes.
TEST_F(TrainJob, ANodeLostMidTrainingResumesFromTheNewestCheckpointAtASmallerWorldSize) {
  ClusterOptions o;
  o.workers = 3;
  TestCluster c(o);
  c.StartAll();
  Prepare(c);
  v1::JobSpec spec = Spec(c, "elastic", model_);
  spec.mutable_resources()->mutable_nodes()->set_min(2);
  spec.mutable_resources()->mutable_nodes()->set_max(3);
  spec.mutable_training()->set_epochs(60);  // 240 steps: long enough to lose a node on the way
  spec.mutable_checkpoint()->set_every_steps(10);
  spec.mutable_checkpoint()->set_keep_last(2);
  // The disk path: memory snapshots off (ResizeTest.ANodesLossCostsAtMostOneStepFromItsPeersMemory
  // recovers the same loss from the peers' memory).
  spec.mutable_checkpoint()->set_memory_every_steps("0");
  v1::Job job;
  ASSERT_TRUE(c.Submit(spec, &job).ok());
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return j.checkpoints_size() >= 2 || IsTerminal(j); }, 180s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << DescribeJob(job);
  ASSERT_EQ(job.attempts(0).world_size(), 3);
  c.KillWorker(2);
  job = c.WaitForJob(job.id(), IsTerminal, 300s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_EQ(job.attempts_size(), 2) << DescribeJob(job);
  EXPECT_EQ(job.attempts(1).world_size(), 2);
  const std::string from = job.attempts(1).resume_from();
  ASSERT_FALSE(from.empty()) << DescribeJob(job);
  std::string log = ReadFile(c.dir() + "/work/node0/logs/" + job.id() + "/attempt-2/rank-0.log");
  EXPECT_NE(log.find("resumed from " + from), std::string::npos) << log;
  EXPECT_NE(log.find("written at world size 3, now 2"), std::string::npos) << log;
  EXPECT_EQ(job.progress().step(), 240);
  // Retention kept the newest two on disk, and the controller lists exactly those.
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return j.checkpoints_size() == 2; }, 10s);
  ASSERT_EQ(job.checkpoints_size(), 2) << DescribeJob(job);
  for (const auto& k : job.checkpoints()) EXPECT_TRUE(fs::exists(k.path() + "/COMMITTED")) << k.path();
  EXPECT_EQ(job.checkpoints(1).path(), c.checkpoint_root() + "/elastic/step-240");
}

}  // namespace
}  // namespace eft::testing
