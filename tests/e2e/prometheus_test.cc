// A real Prometheus server (Debian package prometheus) scrapes a real eft-controller and eft-worker
// on 127.0.0.1 every second while the test workload runs, and its query API must return the eft
// series with the values the job produced. Prometheus runs from a generated config with its own
// listen port and a temporary TSDB directory, and is stopped by PID (killed if the test fails).
//
// Prometheus attaches the scrape config's `job` label to every series, so the `job` label eft
// exports (a job id) arrives as `exported_job` under the default honor_labels: false.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/e2e/cluster.h"
#include "tests/e2e/prometheus_server.h"
#include "tests/unit/common/http/http_test_client.h"

namespace eft::testing {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

TEST(Prometheus, ScrapesControllerAndWorkerAndAnswersQueries) {
  const std::string binary = FindOnPath("prometheus");
  ASSERT_FALSE(binary.empty()) << "prometheus not found: install the Debian package prometheus (scripts/install-deps.sh)";
  ClusterOptions options;
  options.workers = 1;
  options.http = true;
  options.worker_metrics = true;
  TestCluster c(options);
  c.StartAll();

  PrometheusServer prometheus(c.dir(), {{"eft-controller", c.http_address()},
                                        {"eft-worker", "127.0.0.1:" + std::to_string(c.worker_metrics_port(0))}});
  prometheus.Start(binary);
  auto is = [](double want) { return [want](double v) { return v == want; }; };

  EXPECT_EQ(prometheus.WaitForValue(R"(up{job="eft-controller"})", is(1), 30s), 1.0)
      << "controller target not up; log:\n" << ReadFile(c.dir() + "/prometheus.log");
  EXPECT_EQ(prometheus.WaitForValue(R"(up{job="eft-worker"})", is(1), 30s), 1.0);
  EXPECT_EQ(prometheus.WaitForValue(R"(eft_nodes{job="eft-controller",state="READY"})", is(1), 30s), 1.0);

  // 40 steps of 100 ms, a checkpoint every 10: several scrapes see it run.
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("scraped", 1, 1, 40, 100, 10), &job).ok());
  const std::string id = job.id();
  EXPECT_EQ(prometheus.WaitForValue(R"(eft_worker_ranks{job="eft-worker",state="RUNNING"})", is(1), 30s), 1.0)
      << "no scrape saw the rank running";
  job = c.WaitForJob(id, IsTerminal, 90s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);

  EXPECT_EQ(prometheus.WaitForValue(R"(eft_jobs{state="SUCCEEDED"})", is(1), 30s), 1.0);
  EXPECT_EQ(prometheus.WaitForValue(R"(eft_job_step{exported_job=")" + id + R"("})", is(40), 30s), 40.0);
  auto loss = prometheus.WaitForValue(R"(eft_job_loss{exported_job=")" + id + R"("})",
                                      [](double v) { return std::abs(v - 1.0 / 40) < 1e-12; }, 30s);
  EXPECT_NEAR(loss.value_or(-1), 1.0 / 40, 1e-12) << "the workload reports loss = 1/step";
  EXPECT_EQ(prometheus.WaitForValue(R"(eft_job_checkpoints_total{exported_job=")" + id + R"("})", is(4), 30s), 4.0);
  EXPECT_EQ(prometheus.WaitForValue(R"(eft_worker_rank_exits_total{code_class="success"})", is(1), 30s), 1.0);
  // A rate over the heartbeat counter: the series is a proper counter across scrapes.
  EXPECT_GT(prometheus.WaitForValue(R"(rate(eft_grpc_requests_total{method="eft.v1.AgentService/Heartbeat",code="OK"}[5s]))",
                                    [](double v) { return v > 0; }, 30s)
                .value_or(0),
            0.0);
  json ranks = prometheus.Query(R"(eft_worker_ranks)");
  ASSERT_TRUE(ranks.is_array());
  EXPECT_EQ(ranks.size(), 4u) << "one series per rank state: " << ranks.dump();

  prometheus.Stop();
}

}  // namespace
}  // namespace eft::testing
