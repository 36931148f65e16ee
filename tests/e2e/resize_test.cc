// Resizing end to end (docs/architecture.md, "Resizing"), on real processes: a controller, three
// workers and eft-train ranks training a tiny random model. A job grows back when a lost node
// returns, moves off a node drained with --evict, is not thrashed by a flapping node (the cooldown),
// and, when its ranks ignore the stop request, falls back to the newest periodic checkpoint and says
// so. Each job's final weights must equal those of one uninterrupted `eft-train --nproc 2` run of the
// same training (to float rounding: world sizes differ), and a planned resize must lose 0 steps,
// read from the controller's events.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <thread>

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "spec/job_spec.h"
#include "tests/e2e/cluster.h"
#include "trainer/io/safetensors.h"

namespace eft::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using google::protobuf::util::TimeUtil;

// 32 examples / 8 per step = 4 steps per epoch: long enough to lose a node, get it back and grow
// on a loaded 2-core machine, short enough to keep each test around a minute.
constexpr int kEpochs = 100;
constexpr int kTotalSteps = 4 * kEpochs;
constexpr int kCheckpointEvery = 20;
// Different world sizes add the same fp32 numbers in another order, and Adam carries those rounding
// differences forward. How far depends on the learning rate (docs/checkpoints.md, "Equal weights at
// another world size"): at 3e-4 uninterrupted runs at W=1 and W=3 end 4.4e-6 apart after 400 steps,
// while one optimizer step in the middle of the run moves weights by 2e-4 to 4e-4, so a step lost,
// repeated or resumed with the wrong state stands 10x above this tolerance. (At 3e-3 the model
// memorizes the data, its gradients become rounding noise that Adam rescales to full steps, and W=1
// and W=3 end 3.7e-3 apart: no test can tell a wrong resume from that.)
constexpr double kLearningRate = 3e-4;
constexpr double kWeightTolerance = 2e-5;

int Shell(const std::string& cmd, std::string* output) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ReadFileOrEmpty(const fs::path& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::map<std::string, at::Tensor> Weights(const std::string& dir) {
  std::map<std::string, at::Tensor> out;
  auto d = trainer::SafetensorsDir::Open(dir);
  EXPECT_TRUE(d.ok()) << dir << ": " << d.status();
  if (!d.ok()) return out;
  for (const auto& n : (*d)->names()) out[n] = *(*d)->Load(n, at::kFloat);
  return out;
}

class ResizeTest : public ::testing::Test {
 protected:
  // One model, one data file and one uninterrupted reference run for every test: ctest runs each
  // test in a process of its own, so they are kept in the build tree and made again only when
  // eft-train is newer than the reference's final checkpoint.
  static void SetUpTestSuite() {
    shared_ = fs::path(BuildDir()) / "tests" / "e2e" / "resize-fixture";
    const fs::path done = shared_ / "ref-ckpt" / ("step-" + std::to_string(kTotalSteps)) / "COMMITTED";
    const std::string ref_config = spec::JobSpecToJson(Spec("ref", (shared_ / "ref-ckpt").string(), 1, 1, 0)).dump();
    std::error_code ec;
    if (fs::exists(done) && fs::last_write_time(TrainerBinary(), ec) < fs::last_write_time(done, ec) &&
        ReadFileOrEmpty(shared_ / "ref.json") == ref_config) {
      return;
    }
    fs::remove_all(shared_);
    fs::create_directories(shared_);
    std::string out;
    const std::string model = (shared_ / "model").string();
    ASSERT_EQ(Shell(TrainerBinary() + " init-model --arch qwen3 --hidden 64 --layers 2 --heads 4 --kv-heads 2 "
                                      "--head-dim 16 --intermediate 96 --vocab-size 128 --dtype float32 --seed 1 --out " +
                        model,
                    &out),
              0)
        << out;
    std::mt19937 gen(5);
    std::ofstream f(shared_ / "data.jsonl");
    for (int i = 0; i < 32; ++i) {
      nlohmann::json ids = nlohmann::json::array();
      for (int t = 0; t < 12; ++t) ids.push_back(1 + static_cast<int>(gen() % 127));
      f << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
    }
    f.close();
    const std::string config = (shared_ / "ref.json").string();
    std::ofstream(config) << ref_config;
    const auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(Shell("OMP_NUM_THREADS=1 " + TrainerBinary() + " train --config " + config + " --nproc 2 --threads 1", &out),
              0)
        << out;
    std::printf("reference run: %d steps at W=2 in %.1f s\n", kTotalSteps,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }

  static v1::JobSpec Spec(const std::string& name, const std::string& ckpt, int min, int max, double cooldown_s) {
    v1::JobSpec spec;
    spec.set_name(name);
    spec.set_model((shared_ / "model").string());
    spec.mutable_data()->set_train((shared_ / "data.jsonl").string());
    spec.mutable_data()->set_max_seq_len(64);
    spec.mutable_data()->set_packing(false);  // steps counted in examples
    spec.mutable_resources()->mutable_nodes()->set_min(min);
    spec.mutable_resources()->mutable_nodes()->set_max(max);
    spec.mutable_resources()->set_resize_cooldown_seconds(cooldown_s);
    auto* t = spec.mutable_training();
    t->set_epochs(kEpochs);
    t->set_global_batch_size(8);
    t->set_micro_batch_size(2);
    t->set_lr(kLearningRate);
    t->set_precision("fp32");
    spec.mutable_checkpoint()->set_dir(ckpt);
    spec.mutable_checkpoint()->set_every_steps(kCheckpointEvery);
    spec.mutable_checkpoint()->set_keep_last(3);
    spec.mutable_fault_tolerance()->set_stop_grace_seconds(20);
    (*spec.mutable_env())["OMP_NUM_THREADS"] = "1";
    return spec;
  }

  v1::JobSpec JobSpec(TestCluster& c, const std::string& name, int min, int max, double cooldown_s) {
    return Spec(name, c.checkpoint_root() + "/" + name, min, max, cooldown_s);
  }

  std::string SubmitAndWaitForStep(TestCluster& c, const v1::JobSpec& spec, int64_t step) {
    v1::Job job;
    grpc::Status s = c.Submit(spec, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    job = c.WaitForJob(job.id(), [&](const v1::Job& j) { return j.progress().step() >= step || IsTerminal(j); }, 180s);
    EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING) << DescribeJob(job);
    return job.id();
  }

  static std::vector<const v1::JobEvent*> Events(const v1::Job& job, const std::string& type) {
    std::vector<const v1::JobEvent*> out;
    for (const auto& e : job.events()) {
      if (e.type() == type) out.push_back(&e);
    }
    return out;
  }

  // "N steps lost" of the attempt_started event of attempt `number`; -1 when it does not say.
  static int64_t StepsLost(const v1::Job& job, int number) {
    for (const auto* e : Events(job, "attempt_started")) {
      if (e->message().rfind("attempt " + std::to_string(number) + ":", 0) != 0) continue;
      std::smatch m;
      if (std::regex_search(e->message(), m, std::regex(R"(: (\d+) steps? lost\))"))) return std::stoll(m[1]);
    }
    return -1;
  }

  // The job's final full checkpoint holds the same weights as the uninterrupted reference run.
  void ExpectReferenceWeights(const v1::Job& job) {
    const std::string final_dir = job.spec().checkpoint().dir() + "/step-" + std::to_string(kTotalSteps);
    ASSERT_TRUE(fs::exists(final_dir + "/COMMITTED")) << DescribeJob(job);
    auto ref = Weights((shared_ / "ref-ckpt" / ("step-" + std::to_string(kTotalSteps))).string());
    auto got = Weights(final_dir);
    ASSERT_FALSE(ref.empty());
    ASSERT_EQ(got.size(), ref.size());
    double max_diff = 0;
    for (const auto& [name, t] : ref) {
      ASSERT_TRUE(got.count(name)) << name;
      const double d = (got.at(name) - t).abs().max().item<double>();
      EXPECT_LT(d, kWeightTolerance) << name;
      max_diff = std::max(max_diff, d);
    }
    std::printf("%s: max |weight diff| to the uninterrupted run %.3g over %d attempts\n", job.spec().name().c_str(),
                max_diff, job.attempts_size());
  }

  static fs::path shared_;
};

fs::path ResizeTest::shared_;

// A node dies (kill -9 of its worker): the job goes on at 2 nodes. The node's worker starts again:
// the job is asked to stop with a checkpoint and resumes from it at 3 nodes, losing nothing.
TEST_F(ResizeTest, AJobGrowsBackWhenALostNodeReturns) {
  TestCluster c;
  c.StartAll();
  const std::string id = SubmitAndWaitForStep(c, JobSpec(c, "grow", 2, 3, 1), 30);
  ASSERT_EQ(c.GetJob(id).attempts(0).world_size(), 3);
  c.KillWorker(2);
  v1::Job job = c.WaitForJob(id, [](const v1::Job& j) {
    return (j.attempts_size() == 2 && j.state() == v1::JOB_STATE_RUNNING && j.progress().step() > 0) || IsTerminal(j);
  }, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << DescribeJob(job);
  ASSERT_EQ(job.attempts(1).world_size(), 2);
  c.StartWorker(2);
  job = c.WaitForJob(id, IsTerminal, 300s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_EQ(job.attempts_size(), 3) << DescribeJob(job);
  EXPECT_EQ(job.attempts(1).end_reason(), "resized: node2 is back, 2 -> 3 nodes");
  EXPECT_EQ(job.attempts(2).world_size(), 3);
  auto resized = Events(job, "resized");
  ASSERT_EQ(resized.size(), 1u) << DescribeJob(job);
  EXPECT_EQ(resized[0]->message(), "grow: node2 is back, 2 -> 3 nodes");
  EXPECT_EQ(StepsLost(job, 3), 0) << DescribeJob(job);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_TRUE(Events(job, "stop_not_saved").empty());
  ExpectReferenceWeights(job);
}

// A node dies (kill -9 of its worker; its memory goes with it) in a job whose disk checkpoints are
// 200 steps apart: the next attempt resumes from the newest memory snapshot the two other nodes hold
// (node2's shard from its replica on node0), losing at most one step, and ends with the uninterrupted
// run's weights (docs/checkpoints.md, "Memory snapshots").
TEST_F(ResizeTest, ANodesLossCostsAtMostOneStepFromItsPeersMemory) {
  TestCluster c;
  c.StartAll();
  v1::JobSpec spec = JobSpec(c, "memory", 2, 3, 600);
  spec.mutable_checkpoint()->set_every_steps(200);
  spec.mutable_checkpoint()->set_memory_every_steps("1");
  const std::string id = SubmitAndWaitForStep(c, spec, 30);
  ASSERT_EQ(c.GetJob(id).attempts(0).world_size(), 3);
  c.KillWorker(2);
  v1::Job job = c.WaitForJob(id, IsTerminal, 300s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_EQ(job.attempts_size(), 2) << DescribeJob(job);
  EXPECT_EQ(job.attempts(1).world_size(), 2);
  const std::string from = job.attempts(1).resume_from();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(from, m, std::regex(R"(/step-(\d+)\.snapshot$)"))) << DescribeJob(job);
  const int64_t step = std::stoll(m[1]);
  // Step 30 was reported before the kill; its snapshot may not have reached node0 yet (replication
  // is in the background), so 29 is the oldest a correct recovery may take. StepsLost below is the bound.
  EXPECT_GE(step, 29);
  std::string started;
  for (const auto* e : Events(job, "attempt_started")) {
    if (e->message().rfind("attempt 2:", 0) == 0) started = e->message();
  }
  EXPECT_NE(started.find("resuming from the memory snapshot of step " + std::to_string(step) + " ("), std::string::npos)
      << started;
  EXPECT_NE(started.find("the newest disk checkpoint was step 0)"), std::string::npos) << started;
  std::printf("%s\n", started.c_str());
  const int64_t lost = StepsLost(job, 2);
  EXPECT_GE(lost, 0) << started;
  EXPECT_LE(lost, 1) << started;
  EXPECT_TRUE(Events(job, "memory_snapshot_unusable").empty()) << DescribeJob(job);
  EXPECT_EQ(job.restarts(), 0);
  // The adopted snapshot became an ordinary checkpoint of attempt 2 that the controller lists (kept:
  // keep_last 3 holds it, step 200 and the final step 400).
  bool listed = false;
  for (const auto& k : job.checkpoints()) listed = listed || k.path() == spec.checkpoint().dir() + "/step-" + std::to_string(step);
  EXPECT_TRUE(listed) << DescribeJob(job);
  ExpectReferenceWeights(job);
}

// drain --evict (through eftctl): the ranks on node1 stop with a checkpoint and the job goes on at 2
// nodes from it; node1 is left empty.
TEST_F(ResizeTest, DrainWithEvictMovesTheJobOffTheNodeWithoutLosingSteps) {
  TestCluster c;
  c.StartAll();
  const std::string id = SubmitAndWaitForStep(c, JobSpec(c, "evict", 1, 3, 600), 30);
  std::string out;
  ASSERT_EQ(Shell(BuildDir() + "/cli/eftctl --controller " + c.controller_address() + " node drain node1 --evict", &out), 0)
      << out;
  EXPECT_NE(out.find("node node1 drained; its ranks stop with a checkpoint"), std::string::npos) << out;
  v1::Job job = c.WaitForJob(id, IsTerminal, 300s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_EQ(job.attempts_size(), 2) << DescribeJob(job);
  EXPECT_EQ(job.attempts(0).end_reason(), "resized: node1 drained with --evict, 3 -> 2 nodes");
  EXPECT_EQ(std::vector<std::string>(job.attempts(1).nodes().begin(), job.attempts(1).nodes().end()),
            (std::vector<std::string>{"node0", "node2"}));
  EXPECT_EQ(StepsLost(job, 2), 0) << DescribeJob(job);
  EXPECT_EQ(job.restarts(), 0);
  v1::Node node1 = c.GetNode("node1");
  EXPECT_TRUE(node1.drained());
  EXPECT_EQ(node1.jobs_size(), 0);
  ExpectReferenceWeights(job);
}

// node2's worker dies and comes back every 3 s while the job runs. A node loss shrinks the job at
// once, but it grows again only resize_cooldown_seconds after its last resize: no thrashing.
TEST_F(ResizeTest, AFlappingNodeDoesNotThrashTheJob) {
  // The job must outlast the flapping (~24 s) and a cooldown after it: on a quiet machine the tiny
  // model trains its 400 steps in ~10 s, so every step is held 0.15 s (about 60 s in all).
  ClusterOptions options;
  options.worker_env = {{"EFT_DEBUG_STALL", "step"}, {"EFT_DEBUG_STALL_SECONDS", "0.15"}};
  TestCluster c(options);
  c.StartAll();
  constexpr double kCooldown = 8;
  v1::JobSpec spec = JobSpec(c, "flap", 2, 3, kCooldown);
  // Each loss of node2 kills its rank, and the others' collectives fail before the node is declared
  // LOST; those failures are refunded (restart_reclassified), but the budget must not decide here.
  spec.mutable_fault_tolerance()->set_max_restarts(20);
  const std::string id = SubmitAndWaitForStep(c, spec, 20);
  const auto flapping_since = std::chrono::steady_clock::now();
  for (int i = 0; i < 4 && !IsTerminal(c.GetJob(id)); ++i) {
    c.KillWorker(2);
    std::this_thread::sleep_for(3s);  // past the heartbeat timeout (2 s): LOST
    c.StartWorker(2);
    std::this_thread::sleep_for(3s);
  }
  const double flapped_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - flapping_since).count();
  v1::Job job = c.WaitForJob(id, IsTerminal, 300s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  // Every grow comes at least the cooldown after the attempt that last changed the node count.
  const auto grows = Events(job, "resized");
  ASSERT_GE(grows.size(), 1u) << DescribeJob(job);
  for (const auto* g : grows) {
    int64_t last_resize_ms = 0;
    for (int a = 1; a < job.attempts_size(); ++a) {
      const int64_t start = TimeUtil::TimestampToMilliseconds(job.attempts(a).start_time());
      if (start <= TimeUtil::TimestampToMilliseconds(g->time()) &&
          job.attempts(a).nodes_size() != job.attempts(a - 1).nodes_size()) {
        last_resize_ms = start;
      }
    }
    EXPECT_GE(TimeUtil::TimestampToMilliseconds(g->time()) - last_resize_ms, kCooldown * 1000) << g->message();
  }
  const double span_s =
      (TimeUtil::TimestampToMilliseconds(job.end_time()) - TimeUtil::TimestampToMilliseconds(job.attempts(0).start_time())) /
      1000.0;
  EXPECT_LE(static_cast<double>(grows.size()), 1 + span_s / kCooldown) << DescribeJob(job);
  // Each grow is a planned stop: the attempt after it resumes where the one before stopped.
  for (int a = 1; a < job.attempts_size(); ++a) {
    if (job.attempts(a - 1).end_reason().rfind("resized: ", 0) == 0) {
      EXPECT_EQ(StepsLost(job, a + 1), 0) << "attempt " << a + 1 << "\n" << DescribeJob(job);
    }
  }
  std::printf("%zu grows and %d attempts in %.0f s of flapping\n", grows.size(), job.attempts_size(), flapped_s);
  ExpectReferenceWeights(job);
}

// Ranks that block SIGTERM (a wrapper masks it before exec'ing eft-train) never answer the stop
// request; the worker kills them at stop_grace_seconds, and the next attempt resumes from the newest
// periodic checkpoint, saying so and how many steps that cost.
TEST_F(ResizeTest, AStopTheRanksIgnoreFallsBackToTheNewestPeriodicCheckpoint) {
  TestCluster c;
  c.StartAll();
  v1::JobSpec spec = JobSpec(c, "deaf", 1, 3, 0);
  spec.mutable_fault_tolerance()->set_stop_grace_seconds(2);
  // The disk fallback: with memory snapshots the newest one is taken instead (1 step lost;
  // ControllerSnapshotTest.APlannedStopWithoutItsStopCheckpointResumesFromMemory).
  spec.mutable_checkpoint()->set_memory_every_steps("0");
  for (const std::string& a : {BuildDir() + "/tests/e2e/eft-test-block-sigterm", TrainerBinary(), std::string("train")}) {
    spec.add_command(a);
  }
  const std::string id = SubmitAndWaitForStep(c, spec, 25);
  v1::Node node;
  {
    grpc::ClientContext ctx;
    c.AddToken(&ctx);
    v1::DrainNodeRequest req;
    req.set_name("node1");
    req.set_evict(true);
    grpc::Status s = c.nodes().DrainNode(&ctx, req, &node);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  v1::Job job = c.WaitForJob(id, IsTerminal, 300s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_EQ(job.attempts_size(), 2) << DescribeJob(job);
  const auto why = Events(job, "stop_not_saved");
  if (why.empty() && StepsLost(job, 2) == 0) {
    // The kill at the end of the grace period landed right after a periodic checkpoint: nothing was
    // lost and there is nothing to report (about 1 run in 20). The rest still holds.
    std::printf("the ranks were killed at a checkpointed step: 0 steps lost, no stop_not_saved event\n");
    EXPECT_EQ(job.restarts(), 0);
    ExpectReferenceWeights(job);
    return;
  }
  ASSERT_EQ(why.size(), 1u) << DescribeJob(job);
  EXPECT_NE(why[0]->message().find("within fault_tolerance.stop_grace_seconds (2 s): resuming from the newest "
                                   "periodic checkpoint, step "),
            std::string::npos)
      << why[0]->message();
  // It resumed from a periodic checkpoint, and lost the steps after it.
  const std::string from = job.attempts(1).resume_from();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(from, m, std::regex(R"(step-(\d+)$)"))) << from;
  EXPECT_EQ(std::stoll(m[1]) % kCheckpointEvery, 0) << from;
  EXPECT_GT(StepsLost(job, 2), 0) << DescribeJob(job);
  EXPECT_EQ(job.restarts(), 0);
  ExpectReferenceWeights(job);
}

}  // namespace
}  // namespace eft::testing
