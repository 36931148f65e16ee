// Every PromQL expression of the Grafana dashboards (deploy/grafana/dashboards/*.json) and of the
// alert rules (deploy/prometheus/rules/eft-alerts.yml) against a real Prometheus that scrapes a
// real eft-controller and two eft-workers while a job runs: each expression must evaluate without
// error, and each dashboard panel's query must return data. GPU panels join DCGM exporter series
// to jobs; a static target stands in for dcgm-exporter on each node (the workers run as GPU nodes
// with a stand-in nvidia-smi), so the join is exercised on real Prometheus evaluation.
#include <fstream>
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/yaml_json.h"
#include "tests/e2e/cluster.h"
#include "tests/e2e/fake_nvidia_smi.h"
#include "tests/e2e/prometheus_server.h"

namespace eft::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

struct Query {
  std::string where;  // "eft-job.json panel 7 (Loss) target A"
  std::string expr;
  bool must_return_data;
};

// Grafana's variables as a dashboard user would have them: the job picked, rate windows.
std::string Substitute(std::string expr, const std::string& job) {
  expr = std::regex_replace(expr, std::regex(R"(\$\{?job\}?)"), job);
  expr = std::regex_replace(expr, std::regex(R"(\$__rate_interval)"), "10s");
  expr = std::regex_replace(expr, std::regex(R"(\$__interval)"), "5s");
  expr = std::regex_replace(expr, std::regex(R"(\$__range)"), "5m");
  return expr;
}

std::vector<Query> DashboardQueries(const std::string& dir, const std::string& job) {
  std::vector<Query> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    json d = json::parse(std::ifstream(entry.path()));
    for (const json& panel : d["panels"]) {
      for (const json& target : panel.value("targets", json::array())) {
        out.push_back({entry.path().filename().string() + " panel " + std::to_string(panel.value("id", 0)) + " (" +
                           panel.value("title", std::string()) + ") target " + target.value("refId", std::string()),
                       Substitute(target["expr"].get<std::string>(), job), true});
      }
    }
    for (const json& var : d["templating"]["list"]) {
      if (var.value("type", "") != "query") continue;
      // label_values(metric, label) is Grafana's; Prometheus answers the metric part.
      std::smatch m;
      std::string def = var.value("definition", std::string());
      if (std::regex_match(def, m, std::regex(R"(label_values\((.*),\s*\w+\))")))
        out.push_back({entry.path().filename().string() + " variable " + var.value("name", ""), m[1], true});
    }
  }
  return out;
}

std::vector<Query> RuleQueries(const std::string& file) {
  std::vector<Query> out;
  auto doc = LoadYamlOrJsonFile(file);
  EXPECT_TRUE(doc.ok()) << doc.status().message();
  if (!doc.ok()) return out;
  for (const json& group : (*doc)["groups"])
    for (const json& rule : group["rules"])
      out.push_back({"rule " + rule.value("alert", rule.value("record", std::string())), rule["expr"].get<std::string>(),
                     false});  // an alert that does not fire returns nothing, rightly
  return out;
}

TEST(Dashboards, EveryPanelAndRuleEvaluatesAgainstARealPrometheus) {
  const std::string binary = FindOnPath("prometheus");
  ASSERT_FALSE(binary.empty()) << "prometheus not found (scripts/install-deps.sh installs it)";
  FakeNvidiaSmi smi;
  ClusterOptions options;
  options.workers = 2;
  options.http = true;
  options.worker_metrics = true;
  options.worker_args = {"--nvidia-smi", smi.path()};
  options.worker_env = {{"CUDA_VISIBLE_DEVICES", "0"}};
  TestCluster c(options);
  c.StartAll();

  // dcgm-exporter stand-in: one GPU per node, labelled as dcgm-exporter labels them.
  const std::string dcgm_dir = c.dir() + "/dcgm";
  fs::create_directories(dcgm_dir);
  {
    std::ofstream f(dcgm_dir + "/metrics");
    for (int i = 0; i < 2; ++i) {
      std::string labels = "{gpu=\"0\",UUID=\"GPU-fake-" + std::to_string(i) + "\",device=\"nvidia0\",modelName=\"H100\","
                           "Hostname=\"" + c.worker_name(i) + "\"}";
      f << "DCGM_FI_DEV_GPU_UTIL" << labels << " 87\n"
        << "DCGM_FI_PROF_SM_ACTIVE" << labels << " 0.71\n"
        << "DCGM_FI_DEV_FB_USED" << labels << " 40960\n"
        << "DCGM_FI_DEV_POWER_USAGE" << labels << " 512.5\n"
        << "DCGM_FI_DEV_GPU_TEMP" << labels << " 61\n";
    }
  }
  // One file per node would need one server per node; both nodes' series in one target keep
  // their own Hostname, which is all the join uses.
  const int dcgm_port = PickFreePort();
  ChildProcess dcgm;
  ASSERT_TRUE(dcgm.Start({FindOnPath("python3"), "-m", "http.server", "--bind", "127.0.0.1", "--directory", dcgm_dir,
                          std::to_string(dcgm_port)},
                         {}, c.dir() + "/dcgm.log"));

  const std::string rules = std::string(EFT_SOURCE_DIR_DEFAULT) + "/deploy/prometheus/rules/eft-alerts.yml";
  PrometheusServer prometheus(c.dir(),
                              {{"eft-controller", c.http_address()},
                               {"eft-worker", "127.0.0.1:" + std::to_string(c.worker_metrics_port(0))},
                               {"eft-worker", "127.0.0.1:" + std::to_string(c.worker_metrics_port(1))},
                               {"dcgm", "127.0.0.1:" + std::to_string(dcgm_port)}},
                              {rules});
  prometheus.Start(binary);
  auto is = [](double want) { return [want](double v) { return v == want; }; };
  ASSERT_EQ(prometheus.WaitForValue(R"(count(up == 1))", is(4), 30s), 4.0)
      << "not every target is up; log:\n" << ReadFile(c.dir() + "/prometheus.log");

  // Two nodes, 50 steps of 100 ms, a checkpoint every 10; node1 is killed at step 20 so the job
  // restarts at world size 1: restarts, world size changes and checkpoints all have data.
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("watched", 1, 2, 50, 100, 10), &job).ok());
  const std::string id = job.id();
  c.WaitForJob(id, [](const v1::Job& j) { return j.progress().step() >= 20 || IsTerminal(j); }, 60s);
  ASSERT_TRUE(prometheus.WaitForValue(R"(eft_job_world_size{exported_job=")" + id + R"("})", is(2), 30s).has_value());
  c.KillWorker(1);
  job = c.WaitForJob(id, IsTerminal, 120s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_EQ(prometheus.WaitForValue(R"(eft_job_step{exported_job=")" + id + R"("})", is(50), 30s), 50.0);
  ASSERT_TRUE(prometheus.WaitForValue(R"(eft_nodes{state="LOST"})", is(1), 30s).has_value());

  std::vector<Query> queries = DashboardQueries(std::string(EFT_SOURCE_DIR_DEFAULT) + "/deploy/grafana/dashboards", id);
  size_t panels = queries.size();
  for (Query& q : RuleQueries(rules)) queries.push_back(std::move(q));
  ASSERT_GE(panels, 30u) << "dashboards not found";
  for (const Query& q : queries) {
    std::string error;
    json result = prometheus.Query(q.expr, &error);
    ASSERT_FALSE(result.is_null()) << q.where << ": " << q.expr << "\n" << error;
    if (q.must_return_data) {
      EXPECT_FALSE(result.empty()) << q.where << " returns no data: " << q.expr;
    }
  }
  // The DCGM join names the job: a DCGM series of node0 carries exported_job.
  json joined = prometheus.Query("DCGM_FI_DEV_GPU_UTIL * on (Hostname, gpu) group_left (exported_job) "
                                 "label_replace((max by (instance, gpu, exported_job) (eft_gpu_utilization_ratio) * 0 + 1)"
                                 " * on (instance) group_left (node) max by (instance, node) (eft_worker_info),"
                                 " \"Hostname\", \"$1\", \"node\", \"(.*)\")");
  ASSERT_TRUE(joined.is_array());
  EXPECT_FALSE(joined.empty());
  std::printf("%zu dashboard queries and %zu rule expressions evaluated\n", panels, queries.size() - panels);
  prometheus.Stop();
  dcgm.KillGroup();
}

}  // namespace
}  // namespace eft::testing
