// Jobs as MLflow runs against a real `mlflow server` from PyPI (the .venv's, pinned in
// scripts/python-requirements.txt) with its own SQLite store and port, started and stopped by PID
// (its process group), and read back with MLflow's own Python client (tests/reference/mlflow_runs.py):
// - an eft-train job on the tiny model: params = its spec, every loss point the controller stored
//   there once with the same value, the state and attempts as tags, the run FINISHED; a job with its
//   own experiment, a job with MLflow off;
// - the server killed while a job trains: the job is not slowed nor failed, the delay shows in
//   /metrics and a job event, and every point arrives once the server is back;
// - the controller killed (-9) and restarted mid-job: the same run goes on, no point twice;
// - a job that ends while the server is down, then a controller restart: its run is made, filled
//   from the controller's stored curves and ended once the server is back.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/e2e/cluster.h"
#include "tests/unit/common/http/http_test_client.h"

namespace eft::testing {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
namespace fs = std::filesystem;

std::string SourceDir() {
  const char* env = std::getenv("EFT_SOURCE_DIR");
  return env && *env ? env : EFT_SOURCE_DIR_DEFAULT;
}

// `mlflow server` on 127.0.0.1 with a SQLite store in `dir`; the same port and store across restarts.
class MlflowServer {
 public:
  explicit MlflowServer(std::string dir) : dir_(std::move(dir)), port_(PickFreePort()) {}
  ~MlflowServer() { Kill(); }
  void Start() {
    process_ = std::make_unique<ChildProcess>();
    ASSERT_TRUE(process_->Start({EFT_PYTHON, "-m", "mlflow", "server", "--backend-store-uri",
                                 "sqlite:///" + dir_ + "/mlflow.db", "--artifacts-destination", dir_ + "/artifacts",
                                 "--host", "127.0.0.1", "--port", std::to_string(port_), "--workers", "1"},
                                // Its job runner (for MLflow's own background jobs) is not needed here.
                                {{"MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false"}}, dir_ + "/mlflow.log"));
    const bool up = WaitUntil(
        [&] {
          auto r = HttpCall(port_, "GET", "/health", "", "", 1s);
          return r && r->status == 200;
        },
        60s);
    ASSERT_TRUE(up) << "mlflow server did not come up; log:\n" << ReadFile(dir_ + "/mlflow.log");
  }
  // Down at once, as a crashed or unreachable server: every process of it.
  void Kill() {
    if (process_) process_->KillGroup();
    process_.reset();
  }
  std::string uri() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  std::string dir_;
  int port_;
  std::unique_ptr<ChildProcess> process_;
};

class MlflowE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (fs::temp_directory_path() / "eft-mlflow-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    server_ = new MlflowServer(dir_);
    server_->Start();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    std::error_code ec;
    if (!::testing::UnitTest::GetInstance()->Failed()) fs::remove_all(dir_, ec);
  }

  ClusterOptions Options(const std::string& experiment, std::vector<std::string> extra = {}) {
    ClusterOptions o;
    o.workers = 1;
    o.http = true;
    o.controller_args = {"--mlflow-tracking-uri", server_->uri(), "--mlflow-experiment", experiment};
    o.controller_args.insert(o.controller_args.end(), extra.begin(), extra.end());
    return o;
  }

  // Every run of these experiments, as MLflow's Python client reads them.
  static json Runs(const std::vector<std::string>& experiments) {
    std::string cmd = std::string(EFT_PYTHON) + " " + SourceDir() + "/tests/reference/mlflow_runs.py " + server_->uri();
    for (const auto& e : experiments) cmd += " " + e;
    cmd += " 2>" + dir_ + "/reader.log";
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    const int status = ::pclose(p);
    EXPECT_EQ(status, 0) << ReadFile(dir_ + "/reader.log");
    json doc = json::parse(out, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << out;
    return doc;
  }

  // A value of the controller's /metrics (-1 when absent).
  static double Metric(TestCluster& c, const std::string& name) {
    auto r = HttpCall(c.http_port(), "GET", "/metrics");
    if (!r) return -1;
    size_t at = r->body.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stod(r->body.substr(at + name.size() + 2));
  }
  static bool RunsEnded(TestCluster& c, std::chrono::seconds timeout) {
    return WaitUntil([&] { return Metric(c, "eft_mlflow_open_runs") == 0; }, timeout);
  }

  static std::vector<std::string> EventTypes(const v1::Job& job) {
    std::vector<std::string> out;
    for (const auto& e : job.events()) out.push_back(e.type());
    return out;
  }
  static bool Has(const std::vector<std::string>& list, const std::string& item) {
    return std::find(list.begin(), list.end(), item) != list.end();
  }

  // The run of job `id` among `runs`; null when there is none, and a failure when there are more.
  static json RunOf(const json& runs, const std::string& id) {
    json found;
    int n = 0;
    for (const auto& r : runs) {
      if (r["tags"].value("eft.job_id", "") == id) {
        found = r;
        ++n;
      }
    }
    EXPECT_LE(n, 1) << "job " << id << " has " << n << " runs";
    return found;
  }

  // Each stored point of the controller's train loss curve is in the run once, with its value; the
  // run has no step twice.
  static void ExpectStoredLossInRun(const v1::Job& job, const json& run) {
    ASSERT_TRUE(run["metrics"].contains("train/loss")) << run.dump();
    std::map<int64_t, double> logged;
    for (const auto& m : run["metrics"]["train/loss"]) {
      EXPECT_TRUE(logged.emplace(m[0].get<int64_t>(), m[1].get<double>()).second) << "step " << m[0] << " twice";
    }
    ASSERT_GT(job.loss_history().train_size(), 0);
    for (const auto& p : job.loss_history().train()) {
      ASSERT_EQ(p.samples(), 1) << "a curve this short is one point per step";
      auto it = logged.find(p.step());
      ASSERT_NE(it, logged.end()) << "step " << p.step() << " of the stored curve is not in the run";
      EXPECT_EQ(it->second, p.loss()) << "step " << p.step();
    }
  }

  // A TensorBoard run's scalars as TensorBoard reads them (tests/reference/tensorboard_points.py).
  static json TensorBoardPoints(const std::string& run_dir) {
    std::string out;
    FILE* p = ::popen((std::string(EFT_PYTHON) + " " + SourceDir() + "/tests/reference/tensorboard_points.py " + run_dir +
                       " 2>" + dir_ + "/tensorboard.log")
                          .c_str(),
                      "r");
    char buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    EXPECT_EQ(::pclose(p), 0) << ReadFile(dir_ + "/tensorboard.log");
    json doc = json::parse(out, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << out;
    return doc;
  }

  static std::vector<int64_t> Steps(const json& run, const std::string& key) {
    std::vector<int64_t> out;
    for (const auto& m : run["metrics"].value(key, json::array())) out.push_back(m[0].get<int64_t>());
    return out;
  }
  static std::vector<int64_t> Range(int64_t first, int64_t last) {
    std::vector<int64_t> out;
    for (int64_t s = first; s <= last; ++s) out.push_back(s);
    return out;
  }

  static std::string dir_;
  static MlflowServer* server_;
};

std::string MlflowE2E::dir_;
MlflowServer* MlflowE2E::server_ = nullptr;

TEST_F(MlflowE2E, AJobIsOneRunWithItsSpecCurvesStateAndEnd) {
  TestCluster c([&] {
    ClusterOptions o = Options("e2e-main");
    o.slots_per_worker = 3;
    return o;
  }());
  c.StartAll();
  // eft-train on a tiny random Qwen3, one rank: 32 examples, 8 a step, 2 epochs: 8 steps.
  const std::string model = c.dir() + "/model";
  ASSERT_EQ(std::system((TrainerBinary() + " init-model --arch qwen3 --hidden 64 --layers 2 --heads 4 --kv-heads 2 "
                                           "--head-dim 16 --intermediate 96 --vocab-size 128 --dtype float32 --out " +
                         model + " > /dev/null 2>&1")
                            .c_str()),
            0);
  const std::string data = c.dir() + "/data.jsonl";
  {
    std::mt19937 gen(5);
    std::ofstream f(data);
    for (int i = 0; i < 32; ++i) {
      json ids = json::array();
      for (int t = 0; t < 12; ++t) ids.push_back(1 + static_cast<int>(gen() % 127));
      f << json{{"input_ids", ids}}.dump() << "\n";
    }
  }
  v1::JobSpec spec;
  spec.set_name("sft");
  spec.set_model(model);
  spec.mutable_data()->set_train(data);
  spec.mutable_data()->set_max_seq_len(64);
  spec.mutable_data()->set_packing(false);
  auto* t = spec.mutable_training();
  t->set_epochs(2);
  t->set_global_batch_size(8);
  t->set_micro_batch_size(2);
  t->set_lr(3e-3);
  t->set_precision("fp32");
  spec.mutable_checkpoint()->set_dir(c.checkpoint_root() + "/sft");
  (*spec.mutable_env())["OMP_NUM_THREADS"] = "1";
  (*spec.mutable_env())["HF_TOKEN"] = "hf_not_for_mlflow";
  v1::Job sft, own, off;
  ASSERT_TRUE(c.Submit(spec, &sft).ok());
  v1::JobSpec own_spec = c.WorkloadJob("own", 1, 1, 20, 20, 10);
  own_spec.mutable_tracking()->set_mlflow_experiment("e2e-own");
  ASSERT_TRUE(c.Submit(own_spec, &own).ok());
  v1::JobSpec off_spec = c.WorkloadJob("off", 1, 1, 20, 20, 10);
  off_spec.mutable_tracking()->set_mlflow_tracking_uri("off");
  ASSERT_TRUE(c.Submit(off_spec, &off).ok());
  for (v1::Job* job : {&sft, &own, &off}) {
    *job = c.WaitForJob(job->id(), IsTerminal, 180s);
    ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(*job);
  }
  EXPECT_EQ(sft.spec().tracking().mlflow_tracking_uri(), server_->uri()) << "the stored spec says what runs";
  EXPECT_EQ(sft.spec().tracking().mlflow_experiment(), "e2e-main");
  ASSERT_TRUE(RunsEnded(c, 30s)) << ReadFile(c.dir() + "/controller.log");
  EXPECT_EQ(Metric(c, "eft_mlflow_pending_points"), 0);
  EXPECT_EQ(Metric(c, "eft_mlflow_points_dropped_total"), 0);

  const json runs = Runs({"e2e-main", "e2e-own"});
  ASSERT_EQ(runs["e2e-main"].size(), 1u) << "one run, and none for the job with MLflow off: " << runs.dump();
  const json run = RunOf(runs["e2e-main"], sft.id());
  ASSERT_FALSE(run.is_null()) << runs.dump();
  EXPECT_EQ(run["run_name"], "sft-" + sft.id());
  EXPECT_EQ(run["status"], "FINISHED");
  EXPECT_GT(run["end_time"].get<int64_t>(), 0);
  // Params: the normalized spec, defaults included; secrets not.
  const json& params = run["params"];
  EXPECT_EQ(params.value("name", ""), "sft");
  EXPECT_EQ(params.value("model", ""), model);
  EXPECT_EQ(params.value("training.lr", ""), "0.003");
  EXPECT_EQ(params.value("training.global_batch_size", ""), "8");
  EXPECT_EQ(params.value("data.max_seq_len", ""), "64");
  EXPECT_EQ(params.value("resources.nodes.min", ""), "1");
  EXPECT_EQ(params.value("checkpoint.dir", ""), c.checkpoint_root() + "/sft");
  EXPECT_EQ(params.value("env.HF_TOKEN", ""), "<redacted>");
  EXPECT_GT(params.size(), 40u);
  // Tags: state and attempts.
  const json& tags = run["tags"];
  EXPECT_EQ(tags.value("eft.state", ""), "SUCCEEDED");
  EXPECT_EQ(tags.value("eft.attempts", ""), "1");
  EXPECT_EQ(tags.value("eft.world_size", ""), "1");
  EXPECT_EQ(tags.value("eft.attempt.1", "").rfind("start step 0, world size 1, ended at step 8: SUCCEEDED", 0), 0u)
      << tags.dump();
  // Metrics: every step once; the loss exactly as the controller stored it.
  ExpectStoredLossInRun(sft, run);
  for (const char* key : {"train/loss", "train/learning_rate", "train/grad_norm", "train/tokens_per_second"}) {
    EXPECT_EQ(Steps(run, key), Range(1, 8)) << key;
  }
  EXPECT_FALSE(run["metrics"].contains("train/mfu")) << "no MFU on a CPU (no peak FLOPS known)";
  for (const auto& m : run["metrics"]["train/learning_rate"]) EXPECT_GT(m[1].get<double>(), 0);
  // The job's TensorBoard run (docs/tracking.md): every point the controller stored is there, once,
  // as TensorBoard reads it (float32: TensorBoard's simple_value).
  const json tb = TensorBoardPoints(c.checkpoint_root() + "/sft/tensorboard");
  std::map<int64_t, double> written;
  for (const auto& p : tb.value("train/loss", json::array())) {
    EXPECT_TRUE(written.emplace(p[0].get<int64_t>(), p[1].get<double>()).second) << "step " << p[0] << " twice";
  }
  EXPECT_EQ(written.size(), 8u) << tb.dump();
  for (const auto& p : sft.loss_history().train()) {
    auto it = written.find(p.step());
    ASSERT_NE(it, written.end()) << "step " << p.step() << " of the stored curve is not in TensorBoard";
    EXPECT_EQ(it->second, static_cast<double>(static_cast<float>(p.loss()))) << "step " << p.step();
  }
  for (const char* tag : {"train/learning_rate", "train/grad_norm", "train/tokens_per_second"}) {
    EXPECT_EQ(tb.value(tag, json::array()).size(), 8u) << tag;
  }

  const json own_run = RunOf(runs["e2e-own"], own.id());
  ASSERT_FALSE(own_run.is_null()) << "a job's own experiment: " << runs.dump();
  EXPECT_EQ(Steps(own_run, "train/loss"), Range(1, 20));
  EXPECT_EQ(Steps(own_run, "eval/eval/loss"), (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(own_run["status"], "FINISHED");
}

// The controller killed (-9) and restarted mid-job, back within the workers' lease: the attempt goes
// on, and so does its run: one run, no step twice, every stored point in it.
TEST_F(MlflowE2E, AControllerRestartedMidJobContinuesTheSameRunWithoutDuplicates) {
  ClusterOptions o = Options("e2e-restart");
  o.heartbeat_timeout_s = 10;  // the ranks keep running while the controller is away
  TestCluster c(o);
  c.StartAll();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("restarted", 1, 1, 80, 100, 20), &job).ok());
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return j.progress().step() >= 25 || IsTerminal(j); }, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << DescribeJob(job);
  ASSERT_TRUE(WaitUntil([&] { return Metric(c, "eft_mlflow_points_sent_total") > 0; }, 20s));
  c.KillController(SIGKILL);
  c.StartController();
  job = c.WaitForJob(job.id(), IsTerminal, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_EQ(job.attempts_size(), 1) << "the attempt went on through the restart: " << DescribeJob(job);
  ASSERT_TRUE(RunsEnded(c, 30s)) << ReadFile(c.dir() + "/controller.log");

  const json runs = Runs({"e2e-restart"});
  ASSERT_EQ(runs["e2e-restart"].size(), 1u) << runs.dump();
  const json run = RunOf(runs["e2e-restart"], job.id());
  ASSERT_FALSE(run.is_null());
  EXPECT_EQ(run["status"], "FINISHED");
  ExpectStoredLossInRun(job, run);
  const std::vector<int64_t> steps = Steps(run, "train/loss");
  EXPECT_EQ(steps.front(), 1);
  EXPECT_EQ(steps.back(), 80);
  EXPECT_EQ(run["tags"].value("eft.state", ""), "SUCCEEDED");
  EXPECT_EQ(run["tags"].value("eft.attempts", ""), "1");
}

// A job that ends while the server is down, and a controller restart before the server is back:
// the run is made then, filled with the curves the controller stored, and ended.
TEST_F(MlflowE2E, AJobThatEndedWhileTheServerWasDownIsLoggedAndEndedOnceItIsBack) {
  TestCluster c(Options("e2e-late", {"--mlflow-retry-max", "1"}));
  c.StartAll();
  server_->Kill();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("late", 1, 1, 20, 50, 10), &job).ok());
  job = c.WaitForJob(job.id(), IsTerminal, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_TRUE(WaitUntil([&] { return Metric(c, "eft_mlflow_pending_points") > 0; }, 10s));
  EXPECT_EQ(Metric(c, "eft_mlflow_open_runs"), 1);
  // The loss curves reach the store within progress_flush_interval (1 s); what the tracker had
  // queued dies with the controller.
  std::this_thread::sleep_for(1500ms);
  c.KillController(SIGKILL);
  c.StartController();
  server_->Start();
  ASSERT_TRUE(RunsEnded(c, 60s)) << ReadFile(c.dir() + "/controller.log");
  const json runs = Runs({"e2e-late"});
  const json run = RunOf(runs["e2e-late"], job.id());
  ASSERT_FALSE(run.is_null()) << runs.dump();
  EXPECT_EQ(run["status"], "FINISHED");
  EXPECT_EQ(run["tags"].value("eft.state", ""), "SUCCEEDED");
  ExpectStoredLossInRun(job, run);
  EXPECT_EQ(Steps(run, "train/loss"), Range(1, 20));
  EXPECT_EQ(Steps(run, "eval/eval/loss"), (std::vector<int64_t>{10, 20}));
  for (const auto& m : run["metrics"]["train/loss"]) EXPECT_EQ(m[1].get<double>(), 1.0 / m[0].get<double>());
}

// The server killed while a job trains: the job runs at its pace and succeeds; /metrics and a job
// event show the points waiting; once the server is back every point arrives, once.
TEST_F(MlflowE2E, AServerDownWhileAJobTrainsNeitherSlowsNorFailsItAndItsPointsArriveLater) {
  TestCluster c(Options("e2e-outage", {"--mlflow-unreachable-event-after", "1", "--mlflow-retry-max", "1"}));
  c.StartAll();
  constexpr int kSteps = 100;
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("outage", 1, 1, kSteps, 100, 20), &job).ok());
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return j.progress().step() >= 15 || IsTerminal(j); }, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << DescribeJob(job);
  ASSERT_TRUE(WaitUntil([&] { return Metric(c, "eft_mlflow_points_sent_total") > 0; }, 20s));
  server_->Kill();
  const int64_t down_at_step = c.GetJob(job.id()).progress().step();
  double max_delay = 0, max_pending = 0;
  WaitUntil(
      [&] {
        max_delay = std::max(max_delay, Metric(c, "eft_mlflow_delay_seconds"));
        max_pending = std::max(max_pending, Metric(c, "eft_mlflow_pending_points"));
        return IsTerminal(c.GetJob(job.id()));
      },
      60s);
  job = c.GetJob(job.id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_LT(down_at_step, kSteps - 20) << "the server was down for the job's last 2 s at least";
  EXPECT_GE(max_delay, 1.5) << "eft_mlflow_delay_seconds";
  EXPECT_GE(max_pending, 5 * 20) << "eft_mlflow_pending_points: 5 metrics a step";
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return Has(EventTypes(j), "mlflow_unreachable"); }, 10s);
  ASSERT_TRUE(Has(EventTypes(job), "mlflow_unreachable")) << DescribeJob(job);

  server_->Start();
  ASSERT_TRUE(RunsEnded(c, 60s)) << ReadFile(c.dir() + "/controller.log");
  EXPECT_EQ(Metric(c, "eft_mlflow_pending_points"), 0);
  EXPECT_EQ(Metric(c, "eft_mlflow_delay_seconds"), 0);
  EXPECT_EQ(Metric(c, "eft_mlflow_points_dropped_total"), 0);
  EXPECT_GT(Metric(c, "eft_mlflow_send_failures_total"), 0);
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return Has(EventTypes(j), "mlflow_recovered"); }, 10s);
  EXPECT_TRUE(Has(EventTypes(job), "mlflow_recovered")) << DescribeJob(job);

  const json runs = Runs({"e2e-outage"});
  const json run = RunOf(runs["e2e-outage"], job.id());
  ASSERT_FALSE(run.is_null()) << runs.dump();
  EXPECT_EQ(run["status"], "FINISHED");
  ExpectStoredLossInRun(job, run);
  for (const char* key : {"train/loss", "train/learning_rate", "train/grad_norm", "train/tokens_per_second", "train/mfu"}) {
    EXPECT_EQ(Steps(run, key), Range(1, kSteps)) << key << ": every step, once";
  }
  EXPECT_EQ(Steps(run, "eval/eval/loss"), (std::vector<int64_t>{20, 40, 60, 80, 100}));
  // Not slowed: the ranks' own times of the steps (the points' timestamps) show no stall while the
  // server was down; 100 ms steps.
  int64_t longest_gap = 0;
  const json& losses = run["metrics"]["train/loss"];
  for (size_t i = 1; i < losses.size(); ++i) {
    longest_gap = std::max(longest_gap, losses[i][2].get<int64_t>() - losses[i - 1][2].get<int64_t>());
  }
  EXPECT_LT(longest_gap, 2000) << "ms between two steps";
}

}  // namespace
}  // namespace eft::testing
