// End-to-end /metrics: a real eft-controller (--http) and two real eft-workers (--metrics) run the
// c10d test workload; both endpoints are scraped over loopback while the job runs and after it
// ends, the values are checked against what the job did, and `promtool check metrics` must accept
// the real output of both programs without a single lint problem.
//
// The workers run as GPU nodes (CUDA_VISIBLE_DEVICES=0) with a script standing in for nvidia-smi,
// so the GPU families and their join to the running job are exercised on a machine without GPUs.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"
#include "tests/e2e/fake_nvidia_smi.h"
#include "tests/unit/common/exposition_test_util.h"
#include "tests/unit/common/http/http_test_client.h"

namespace eft::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string Scrape(int port) {
  auto r = HttpCall(port, "GET", "/metrics");
  EXPECT_TRUE(r) << "no answer from 127.0.0.1:" << port << "/metrics";
  if (!r) return "";
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  return r->body;
}

void ExpectPromtoolClean(const std::string& what, const std::string& text) {
  std::string promtool = FindPromtool();
  ASSERT_FALSE(promtool.empty()) << "promtool not found: install the Debian package prometheus (scripts/install-deps.sh)";
  PromtoolResult r = PromtoolCheckMetrics(promtool, text);
  EXPECT_EQ(r.exit_code, 0) << what << ": promtool check metrics failed:\n" << r.output << "\n" << text;
  EXPECT_EQ(r.output, "") << what << ": promtool reported problems:\n" << r.output;
}

TEST(Metrics, ControllerAndWorkersExportWhatTheJobDid) {
  FakeNvidiaSmi smi;
  ClusterOptions options;
  options.workers = 2;
  options.http = true;
  options.worker_metrics = true;
  options.worker_args = {"--nvidia-smi", smi.path()};
  options.worker_env = {{"CUDA_VISIBLE_DEVICES", "0"}};
  TestCluster c(options);
  c.StartAll();

  std::string ctl = Scrape(c.http_port());
  EXPECT_EQ(SampleValue(ctl, "eft_nodes", {{"state", "READY"}}), 2.0) << ctl;
  EXPECT_EQ(SampleValue(ctl, "eft_jobs", {{"state", "RUNNING"}}), 0.0);
  std::string w0 = Scrape(c.worker_metrics_port(0));
  EXPECT_EQ(SampleValue(w0, "eft_worker_info", {{"node", "node0"}}), 1.0) << w0;
  EXPECT_EQ(SampleValue(w0, "eft_worker_ranks", {{"state", "RUNNING"}}), 0.0);
  auto health = HttpCall(c.worker_metrics_port(0), "GET", "/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->body, "ok");

  // 30 steps of 100 ms on both nodes, a checkpoint every 10 steps.
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("metrics", 2, 2, 30, 100, 10), &job).ok());
  const std::string id = job.id();
  const Labels of_job = {{"job", id}};
  job = c.WaitForJob(id, [](const v1::Job& j) { return j.progress().step() >= 3 || IsTerminal(j); }, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << DescribeJob(job);

  // While it runs: the controller sees it at world size 2, each worker runs one rank, and the GPU of
  // each worker is labelled with the job.
  ctl = Scrape(c.http_port());
  EXPECT_EQ(SampleValue(ctl, "eft_jobs", {{"state", "RUNNING"}}), 1.0) << ctl;
  EXPECT_EQ(SampleValue(ctl, "eft_job_world_size", of_job), 2.0);
  EXPECT_GE(SampleValue(ctl, "eft_job_step", of_job).value_or(0), 3.0);
  for (int i = 0; i < 2; ++i) {
    std::string w;
    bool joined = WaitUntil(
        [&] {
          w = Scrape(c.worker_metrics_port(i));
          return SampleValue(w, "eft_gpu_utilization_ratio", {{"gpu", "0"}, {"job", id}}).has_value();
        },
        10s);
    EXPECT_TRUE(joined) << "worker " << i << " never labelled its GPU with job " << id << ":\n" << w;
    EXPECT_EQ(SampleValue(w, "eft_worker_ranks", {{"state", "RUNNING"}}), 1.0) << w;
    EXPECT_EQ(SampleValue(w, "eft_gpu_utilization_ratio", {{"gpu", "0"}, {"job", id}}), 0.42);
    EXPECT_EQ(SampleValue(w, "eft_gpu_memory_used_bytes", {{"gpu", "0"}, {"job", id}}), 2048.0 * 1048576);
    EXPECT_EQ(SampleValue(w, "eft_gpu_memory_total_bytes", {{"gpu", "0"}, {"job", id}}), 16384.0 * 1048576);
  }

  job = c.WaitForJob(id, IsTerminal, 90s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_EQ(job.checkpoints_size(), 3) << DescribeJob(job);

  ctl = Scrape(c.http_port());
  EXPECT_EQ(SampleValue(ctl, "eft_jobs", {{"state", "SUCCEEDED"}}), 1.0) << ctl;
  EXPECT_EQ(SampleValue(ctl, "eft_jobs", {{"state", "RUNNING"}}), 0.0);
  EXPECT_EQ(SampleValue(ctl, "eft_job_info", {{"job", id}, {"name", "metrics"}, {"state", "SUCCEEDED"}}), 1.0);
  EXPECT_EQ(SampleValue(ctl, "eft_job_world_size", of_job), 0.0);
  EXPECT_EQ(SampleValue(ctl, "eft_job_attempts_total", of_job), 1.0);
  EXPECT_EQ(SampleValue(ctl, "eft_job_restarts_total", of_job), 0.0);
  // The workload's rank 0 reports loss = 1/step and lr 0.001.
  EXPECT_EQ(SampleValue(ctl, "eft_job_step", of_job), 30.0);
  EXPECT_NEAR(SampleValue(ctl, "eft_job_loss", of_job).value_or(-1), 1.0 / 30, 1e-12);
  EXPECT_EQ(SampleValue(ctl, "eft_job_learning_rate", of_job), 0.001);
  EXPECT_GT(SampleValue(ctl, "eft_job_tokens_per_second", of_job).value_or(0), 0.0);
  EXPECT_EQ(SampleValue(ctl, "eft_job_checkpoints_total", of_job), 3.0);
  EXPECT_EQ(SampleValue(ctl, "eft_job_last_checkpoint_step", of_job), 30.0);
  EXPECT_EQ(SampleValue(ctl, "eft_job_checkpoint_bytes", of_job), static_cast<double>(job.checkpoints(2).bytes()));
  EXPECT_GT(job.checkpoints(2).bytes(), 0);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  double ckpt_time = SampleValue(ctl, "eft_job_last_checkpoint_timestamp_seconds", of_job).value_or(0);
  EXPECT_GT(ckpt_time, now - 120);
  EXPECT_LE(ckpt_time, now + 1);
  EXPECT_LT(SampleValue(ctl, "eft_node_heartbeat_age_seconds", {{"node", "node1"}}).value_or(99), 3.0);
  EXPECT_EQ(SampleValue(ctl, "eft_grpc_requests_total", {{"method", "eft.v1.JobService/SubmitJob"}, {"code", "OK"}}),
            1.0);
  EXPECT_GT(SampleValue(ctl, "eft_grpc_requests_total", {{"method", "eft.v1.AgentService/Heartbeat"}, {"code", "OK"}})
                .value_or(0),
            5.0);
  EXPECT_GE(SampleValue(ctl, "eft_http_requests_total", {{"method", "GET"}, {"route", "/metrics"}, {"code", "200"}})
                .value_or(0),
            2.0);
  ExpectPromtoolClean("eft-controller", ctl);

  for (int i = 0; i < 2; ++i) {
    std::string w;
    // Exit reports and log shipping are asynchronous: wait for both to show.
    bool settled = WaitUntil(
        [&] {
          w = Scrape(c.worker_metrics_port(i));
          return SampleValue(w, "eft_worker_rank_exits_total", {{"code_class", "success"}}) == 1.0 &&
                 SampleValue(w, "eft_worker_log_shipped_bytes_total").value_or(0) > 0 &&
                 SampleValue(w, "eft_gpu_utilization_ratio", {{"gpu", "0"}, {"job", ""}}).has_value();
        },
        15s);
    EXPECT_TRUE(settled) << "worker " << i << ":\n" << w;
    EXPECT_EQ(SampleValue(w, "eft_worker_rank_starts_total"), 1.0) << w;
    EXPECT_EQ(SampleValue(w, "eft_worker_rank_exits_total", {{"code_class", "failed"}}), 0.0);
    EXPECT_EQ(SampleValue(w, "eft_worker_ranks", {{"state", "RUNNING"}}), 0.0);
    EXPECT_GT(SampleValue(w, "eft_worker_heartbeats_total").value_or(0), 0.0);
    EXPECT_EQ(SampleValue(w, "eft_worker_controller_reachable"), 1.0);
    EXPECT_EQ(SampleValue(w, "eft_worker_gpu_query_failures_total"), 0.0);
    EXPECT_FALSE(SampleValue(w, "eft_gpu_utilization_ratio", {{"gpu", "0"}, {"job", id}})) << "the job is gone";
    ExpectPromtoolClean("eft-worker node" + std::to_string(i), w);
  }
}

}  // namespace
}  // namespace eft::testing
