// The worker's /metrics families fed by injected sources (agent stats, GPU readings): values, the
// GPU/job join as labels, and promtool on the result.
#include "worker/worker_metrics.h"

#include <gtest/gtest.h>

#include "tests/unit/common/exposition_test_util.h"

namespace eft::worker {
namespace {

using eft::testing::SampleValue;

TEST(RankExitClassTest, FollowsTheExitCodeContract) {
  EXPECT_STREQ(RankExitClass(0, 0), "success");
  EXPECT_STREQ(RankExitClass(2, 0), "bad_input");
  EXPECT_STREQ(RankExitClass(75, 0), "stopped");
  EXPECT_STREQ(RankExitClass(1, 0), "failed");
  EXPECT_STREQ(RankExitClass(0, 9), "signal");
}

class WorkerMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    stats_.ranks_by_state[v1::RANK_STATE_RUNNING] = 2;
    stats_.ranks_by_state[v1::RANK_STATE_EXITED] = 1;
    stats_.slot_jobs = {{0, "12"}, {1, "12"}};
    stats_.rank_exits["failed"] = 3;
    stats_.rank_starts = 7;
    stats_.rank_restarts = 4;
    stats_.heartbeats = 100;
    stats_.heartbeat_failures = 2;
    stats_.controller_reachable = true;
    stats_.log_bytes_shipped = 4096;
    stats_.lease_expired = true;
    stats_.lease_expirations = 2;
  }

  std::string Scrape(bool with_gpus) {
    MetricsRegistry registry;
    WorkerMetricsSources sources;
    sources.node = "node-a";
    sources.slots = 3;
    sources.gpu_ids = {"0", "1", "2"};
    sources.stats = [this] { return stats_; };
    if (with_gpus) {
      sources.gpus = [this] { return gpus_; };
      sources.gpu_query_failures = [] { return uint64_t{5}; };
    }
    auto m = WorkerMetrics::Create(&registry, sources);
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return "";
    return registry.Serialize();
  }

  WorkerStats stats_;
  std::vector<GpuReading> gpus_;
};

TEST_F(WorkerMetricsTest, MemorySnapshots) {
  std::string text = Scrape(false);
  EXPECT_EQ(SampleValue(text, "eft_worker_snapshot_bytes", {{"kind", "own"}}), 0.0) << "off: present, 0";
  EXPECT_EQ(SampleValue(text, "eft_worker_snapshot_pushes_total", {{"result", "refused"}}), 0.0);
  stats_.snapshot_own_bytes = 3000;
  stats_.snapshot_replica_bytes = 2000;
  stats_.snapshot_budget_bytes = 1 << 30;
  stats_.snapshot_pushes = {{"ok", 5}, {"failed", 1}};
  stats_.snapshot_push_seconds = 0.25;
  stats_.snapshot_pushed_bytes = 15000;
  stats_.snapshot_refusals = 2;
  text = Scrape(false);
  EXPECT_EQ(SampleValue(text, "eft_worker_snapshot_bytes", {{"kind", "own"}}), 3000.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_snapshot_bytes", {{"kind", "replica"}}), 2000.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_snapshot_budget_bytes"), double(1 << 30));
  EXPECT_EQ(SampleValue(text, "eft_worker_snapshot_pushes_total", {{"result", "ok"}}), 5.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_snapshot_pushes_total", {{"result", "failed"}}), 1.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_snapshot_pushes_total", {{"result", "refused"}}), 0.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_snapshot_push_seconds"), 0.25);
  EXPECT_EQ(SampleValue(text, "eft_worker_snapshot_pushed_bytes_total"), 15000.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_snapshot_refusals_total"), 2.0);
}

TEST_F(WorkerMetricsTest, RanksHeartbeatsAndLogs) {
  std::string text = Scrape(false);
  EXPECT_EQ(SampleValue(text, "eft_worker_info", {{"node", "node-a"}}), 1.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_slots"), 3.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_ranks", {{"state", "RUNNING"}}), 2.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_ranks", {{"state", "EXITED"}}), 1.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_ranks", {{"state", "STOPPING"}}), 0.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_rank_exits_total", {{"code_class", "failed"}}), 3.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_rank_exits_total", {{"code_class", "signal"}}), 0.0) << "present from the start";
  EXPECT_EQ(SampleValue(text, "eft_worker_rank_exits_total", {{"code_class", "out_of_memory"}}), 0.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_rank_starts_total"), 7.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_rank_restarts_total"), 4.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_heartbeats_total"), 100.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_heartbeat_failures_total"), 2.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_controller_reachable"), 1.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_log_shipped_bytes_total"), 4096.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_lease_expired"), 1.0);
  EXPECT_EQ(SampleValue(text, "eft_worker_lease_expirations_total"), 2.0);
  EXPECT_TRUE(eft::testing::Samples(text, "eft_gpu_utilization_ratio").empty()) << "no GPU source, no GPU series";
  EXPECT_FALSE(SampleValue(text, "eft_worker_gpu_query_failures_total"));
}

TEST_F(WorkerMetricsTest, GpuSeriesCarryTheJobUsingEachGpu) {
  auto readings = ParseNvidiaSmiCsv(
      "0, GPU-a, 90, 40000, 81559\n"
      "1, GPU-b, [N/A], 30000, 81559\n"
      "2, GPU-c, 0, 0, 81559\n"
      "3, GPU-d, 50, 1, 81559\n");  // not one of this worker's slots
  ASSERT_TRUE(readings.ok()) << readings.status();
  gpus_ = *readings;
  std::string text = Scrape(true);
  EXPECT_EQ(SampleValue(text, "eft_gpu_utilization_ratio", {{"gpu", "0"}, {"job", "12"}}), 0.9);
  EXPECT_FALSE(SampleValue(text, "eft_gpu_utilization_ratio", {{"gpu", "1"}, {"job", "12"}})) << "[N/A]";
  EXPECT_EQ(SampleValue(text, "eft_gpu_memory_used_bytes", {{"gpu", "1"}, {"job", "12"}}), 30000.0 * 1048576);
  EXPECT_EQ(SampleValue(text, "eft_gpu_utilization_ratio", {{"gpu", "2"}, {"job", ""}}), 0.0) << "idle slot";
  EXPECT_EQ(SampleValue(text, "eft_gpu_memory_total_bytes", {{"gpu", "2"}, {"job", ""}}), 81559.0 * 1048576);
  EXPECT_EQ(eft::testing::Samples(text, "eft_gpu_memory_total_bytes").size(), 3u) << "GPU 3 is not ours";
  EXPECT_EQ(SampleValue(text, "eft_worker_gpu_query_failures_total"), 5.0);

  std::string promtool = eft::testing::FindPromtool();
  if (promtool.empty()) GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  auto r = eft::testing::PromtoolCheckMetrics(promtool, text);
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n" << text;
  EXPECT_EQ(r.output, "");
}

TEST_F(WorkerMetricsTest, RequiresStatsAndUnregistersOnDestruction) {
  MetricsRegistry registry;
  EXPECT_FALSE(WorkerMetrics::Create(&registry, WorkerMetricsSources{}).ok());
  {
    WorkerMetricsSources sources;
    sources.stats = [this] { return stats_; };
    auto m = WorkerMetrics::Create(&registry, sources);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_NE(registry.Serialize().find("eft_worker_ranks"), std::string::npos);
  }
  EXPECT_EQ(registry.Serialize(), "");
}

}  // namespace
}  // namespace eft::worker
