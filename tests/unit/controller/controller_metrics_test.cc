// The controller's /metrics: families registered on a real Controller (ManualClock, real SQLite
// file) whose workers are simulated by Register/Heartbeat calls; values checked after each state
// change, the exposition checked by promtool, and the gRPC interceptor on a real loopback server.
#include "controller/controller_metrics.h"

#include <filesystem>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "controller/grpc_metrics.h"
#include "controller/grpc_services.h"
#include "tests/unit/common/exposition_test_util.h"

namespace eft::controller {
namespace {

using namespace std::chrono_literals;
using eft::testing::Labels;
using eft::testing::SampleValue;
using eft::testing::Samples;
namespace fs = std::filesystem;

class ControllerMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eft-controller-metrics-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ControllerConfig config;
    config.db_path = (dir_ / "c.db").string();
    config.heartbeat_interval = 1000ms;
    config.heartbeat_timeout = 3000ms;
    auto c = Controller::Create(config, &clock_);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = std::move(c).value();
  }
  void TearDown() override {
    metrics_.reset();
    c_.reset();
    fs::remove_all(dir_);
  }

  void CreateMetrics(ControllerMetricsOptions options = {}) {
    auto m = ControllerMetrics::Create(&registry_, c_.get(), options);
    ASSERT_TRUE(m.ok()) << m.status();
    metrics_ = std::move(m).value();
  }

  std::string Submit(const std::string& name, int nodes) {
    v1::JobSpec s;
    s.set_name(name);
    s.add_command("/bin/true");
    s.mutable_resources()->mutable_nodes()->set_min(nodes);
    s.mutable_resources()->mutable_nodes()->set_max(nodes);
    s.mutable_resources()->set_gpus_per_node(1);
    s.mutable_fault_tolerance()->set_max_restarts(3);
    auto job = c_->SubmitJob(s, "");
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }

  void Register(const std::string& node) {
    v1::RegisterRequest req;
    req.set_node_name(node);
    req.set_slots(1);
    req.set_incarnation(node + "-inc");
    ASSERT_TRUE(c_->Register(req).ok());
  }

  v1::HeartbeatResponse Heartbeat(const std::string& node, const std::vector<v1::RankStatus>& ranks = {},
                                  const std::vector<std::string>& events = {}) {
    v1::HeartbeatRequest req;
    req.set_node_name(node);
    req.set_incarnation(node + "-inc");
    for (const auto& r : ranks) *req.add_ranks() = r;
    for (const auto& json : events) {
      v1::RankEvent* e = req.add_events();
      *e->mutable_key() = ranks.at(0).key();
      e->set_seq(++seq_[node]);
      e->set_time_ms(1'700'000'123'000);
      e->set_json(json);
    }
    auto resp = c_->Heartbeat(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : v1::HeartbeatResponse();
  }

  static v1::RankStatus Rank(const v1::RankAssignment& a, v1::RankState state, int code = 0) {
    v1::RankStatus s;
    *s.mutable_key() = a.key();
    s.set_state(state);
    s.set_exit_code(code);
    s.set_slot(a.slot());
    return s;
  }

  std::optional<double> Value(const std::string& name, const Labels& labels = {}) {
    return SampleValue(metrics_->Scrape(), name, labels);
  }

  fs::path dir_;
  ManualClock clock_;
  std::unique_ptr<Controller> c_;
  MetricsRegistry registry_;
  std::unique_ptr<ControllerMetrics> metrics_;
  std::map<std::string, uint64_t> seq_;
};

TEST_F(ControllerMetricsTest, EmptyControllerExportsEveryStateAtZeroAndPassesPromtool) {
  CreateMetrics();
  std::string text = metrics_->Scrape();
  for (const char* state : {"QUEUED", "STARTING", "RUNNING", "RECOVERING", "SUCCEEDED", "FAILED", "CANCELLED"}) {
    EXPECT_EQ(SampleValue(text, "eft_jobs", {{"state", state}}), 0.0) << state << "\n" << text;
  }
  EXPECT_EQ(SampleValue(text, "eft_nodes", {{"state", "READY"}}), 0.0);
  EXPECT_EQ(SampleValue(text, "eft_nodes", {{"state", "LOST"}}), 0.0);
  EXPECT_EQ(SampleValue(text, "eft_nodes_drained"), 0.0);
  for (const char* family : {"eft_job_step", "eft_job_loss", "eft_job_restarts_total", "eft_checkpoint_save_seconds",
                             "eft_job_last_checkpoint_timestamp_seconds"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
  }
  std::string promtool = eft::testing::FindPromtool();
  if (promtool.empty()) GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  auto r = eft::testing::PromtoolCheckMetrics(promtool, text);
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n" << text;
  EXPECT_EQ(r.output, "");
}

TEST_F(ControllerMetricsTest, ValuesFollowJobNodeAndTrainingState) {
  CreateMetrics();
  Register("n1");
  Register("n2");
  std::string id = Submit("sft", 2);
  const Labels job = {{"job", id}};
  EXPECT_EQ(Value("eft_jobs", {{"state", "STARTING"}}), 1.0);
  EXPECT_EQ(Value("eft_nodes", {{"state", "READY"}}), 2.0);
  EXPECT_EQ(Value("eft_job_info", {{"job", id}, {"name", "sft"}, {"state", "STARTING"}}), 1.0);
  EXPECT_EQ(Value("eft_job_attempts_total", job), 1.0);
  EXPECT_EQ(Value("eft_job_restarts_total", job), 0.0);
  EXPECT_EQ(Value("eft_job_max_restarts", job), 3.0);
  EXPECT_FALSE(Value("eft_job_step", job)) << "no training series before the first step event";
  EXPECT_FALSE(Value("eft_job_checkpoint_bytes", job));

  auto h1 = Heartbeat("n1");
  auto h2 = Heartbeat("n2");
  ASSERT_EQ(h1.desired_size(), 1);
  const v1::RankAssignment r0 = h1.desired(0), r1 = h2.desired(0);
  Heartbeat("n2", {Rank(r1, v1::RANK_STATE_RUNNING)});
  Heartbeat("n1", {Rank(r0, v1::RANK_STATE_RUNNING)},
            {R"({"event":"step","step":40,"total_steps":100,"loss":1.25,"lr":2e-5,"grad_norm":0.5,)"
             R"("tokens":4096,"tokens_per_s":8192.5,"mfu":0.375})",
             R"({"event":"checkpoint","kind":"sharded","step":40,"path":"/ck/step-40","bytes":123456,)"
             R"("seconds":1.5,"stall_seconds":0.25})"});
  std::string text = metrics_->Scrape();
  EXPECT_EQ(SampleValue(text, "eft_jobs", {{"state", "RUNNING"}}), 1.0);
  EXPECT_EQ(SampleValue(text, "eft_jobs", {{"state", "STARTING"}}), 0.0);
  EXPECT_EQ(SampleValue(text, "eft_job_world_size", job), 2.0);
  EXPECT_EQ(SampleValue(text, "eft_job_step", job), 40.0);
  EXPECT_EQ(SampleValue(text, "eft_job_total_steps", job), 100.0);
  EXPECT_EQ(SampleValue(text, "eft_job_loss", job), 1.25);
  EXPECT_EQ(SampleValue(text, "eft_job_learning_rate", job), 2e-5);
  EXPECT_EQ(SampleValue(text, "eft_job_grad_norm", job), 0.5);
  EXPECT_EQ(SampleValue(text, "eft_job_tokens_per_second", job), 8192.5);
  EXPECT_EQ(SampleValue(text, "eft_job_mfu", job), 0.375);
  EXPECT_EQ(SampleValue(text, "eft_job_last_step_timestamp_seconds", job), 1'700'000'123.0);
  EXPECT_TRUE(Samples(text, "eft_job_eval_loss").empty()) << "no eval series before the first eval event";
  // A rank from before named eval sets (no set, no index): its one set is "eval".
  Heartbeat("n1", {Rank(r0, v1::RANK_STATE_RUNNING)}, {R"({"event":"eval","step":40,"loss":1.5,"tokens":900})"});
  text = metrics_->Scrape();
  EXPECT_EQ(SampleValue(text, "eft_job_eval_loss", {{"job", id}, {"eval_set", "eval"}}), 1.5);
  EXPECT_EQ(SampleValue(text, "eft_job_checkpoints_total", job), 1.0);
  EXPECT_EQ(SampleValue(text, "eft_job_checkpoint_bytes", job), 123456.0);
  EXPECT_EQ(SampleValue(text, "eft_job_last_checkpoint_step", job), 40.0);
  EXPECT_EQ(SampleValue(text, "eft_job_last_checkpoint_timestamp_seconds", job), 1'700'000'123.0);
  EXPECT_EQ(SampleValue(text, "eft_job_checkpoint_save_seconds", job), 1.5);
  EXPECT_EQ(SampleValue(text, "eft_checkpoint_save_seconds_count", {{"kind", "sharded"}}), 1.0);
  EXPECT_EQ(SampleValue(text, "eft_checkpoint_save_seconds_sum", {{"kind", "sharded"}}), 1.5);
  EXPECT_EQ(SampleValue(text, "eft_checkpoint_save_seconds_bucket", {{"kind", "sharded"}, {"le", "1.6"}}), 1.0);
  EXPECT_EQ(SampleValue(text, "eft_checkpoint_save_seconds_bucket", {{"kind", "sharded"}, {"le", "0.8"}}), 0.0);
  EXPECT_EQ(SampleValue(text, "eft_checkpoint_stall_seconds_sum", {{"kind", "sharded"}}), 0.25);

  // The same checkpoint reported again (a worker re-sending after a controller restart) is neither a
  // new checkpoint nor a new observation.
  Heartbeat("n1", {Rank(r0, v1::RANK_STATE_RUNNING)},
            {R"({"event":"checkpoint","kind":"sharded","step":40,"path":"/ck/step-40","bytes":123456,"seconds":9})"});
  EXPECT_EQ(Value("eft_job_checkpoints_total", job), 1.0);
  EXPECT_EQ(Value("eft_checkpoint_save_seconds_count", {{"kind", "sharded"}}), 1.0);
  // An untrusted kind cannot grow the label set; an event without seconds is counted but not timed.
  Heartbeat("n1", {Rank(r0, v1::RANK_STATE_RUNNING)},
            {R"({"event":"checkpoint","kind":"x<script>","step":50,"path":"/ck/step-50","bytes":7,"seconds":0.1})",
             R"({"event":"checkpoint","kind":"full","step":60,"path":"/ck/step-60","bytes":9})"});
  text = metrics_->Scrape();
  EXPECT_EQ(SampleValue(text, "eft_checkpoint_save_seconds_count", {{"kind", "other"}}), 1.0);
  EXPECT_FALSE(SampleValue(text, "eft_checkpoint_save_seconds_count", {{"kind", "full"}}));
  EXPECT_EQ(SampleValue(text, "eft_job_checkpoints_total", job), 3.0);
  EXPECT_EQ(SampleValue(text, "eft_job_checkpoint_bytes", job), 9.0) << "the newest checkpoint's size";
  EXPECT_EQ(SampleValue(text, "eft_job_checkpoint_save_seconds", job), 0.1) << "the newest one that said";

  // Heartbeat age follows the clock; only n1 heartbeats again.
  clock_.Advance(2500ms);
  Heartbeat("n1", {Rank(r0, v1::RANK_STATE_RUNNING)});
  text = metrics_->Scrape();
  EXPECT_EQ(SampleValue(text, "eft_node_heartbeat_age_seconds", {{"node", "n1"}}), 0.0);
  EXPECT_EQ(SampleValue(text, "eft_node_heartbeat_age_seconds", {{"node", "n2"}}), 2.5);
  EXPECT_EQ(SampleValue(text, "eft_node_slots", {{"node", "n2"}}), 1.0);

  // Both ranks finish: SUCCEEDED keeps its training series, world size drops to 0.
  Heartbeat("n2", {Rank(r1, v1::RANK_STATE_EXITED, 0)});
  Heartbeat("n1", {Rank(r0, v1::RANK_STATE_EXITED, 0)});
  text = metrics_->Scrape();
  EXPECT_EQ(SampleValue(text, "eft_jobs", {{"state", "SUCCEEDED"}}), 1.0);
  EXPECT_EQ(SampleValue(text, "eft_jobs", {{"state", "RUNNING"}}), 0.0);
  EXPECT_EQ(SampleValue(text, "eft_job_world_size", job), 0.0);
  EXPECT_EQ(SampleValue(text, "eft_job_loss", job), 1.25);
  EXPECT_EQ(SampleValue(text, "eft_job_info", {{"job", id}, {"name", "sft"}, {"state", "SUCCEEDED"}}), 1.0);

  std::string promtool = eft::testing::FindPromtool();
  if (promtool.empty()) GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  auto r = eft::testing::PromtoolCheckMetrics(promtool, text);
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n" << text;
  EXPECT_EQ(r.output, "");
}

TEST_F(ControllerMetricsTest, RestartsCountAttemptsAndNeverGoDown) {
  CreateMetrics();
  Register("n1");
  std::string id = Submit("flaky", 1);
  const Labels job = {{"job", id}};
  auto h = Heartbeat("n1");
  ASSERT_EQ(h.desired_size(), 1);
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_RUNNING)});
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_EXITED, 1)});
  EXPECT_EQ(Value("eft_jobs", {{"state", "RECOVERING"}}), 1.0);
  EXPECT_EQ(Value("eft_job_counted_restarts", job), 1.0);
  EXPECT_EQ(Value("eft_job_attempts_total", job), 1.0);
  // Past the backoff, the next attempt starts.
  clock_.Advance(2000ms);
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_EXITED, 1)});
  c_->Tick();
  EXPECT_EQ(Value("eft_job_attempts_total", job), 2.0);
  EXPECT_EQ(Value("eft_job_restarts_total", job), 1.0);
}

// Memory snapshots (docs/checkpoints.md, "Memory snapshots"): the newest step held whole, how far the
// replicas lag behind it, the bytes held; and a rank failure's restart, resumed from the nodes' memory,
// counted by source with the steps it lost.
TEST_F(ControllerMetricsTest, MemorySnapshotsAndRecoveriesAreReported) {
  CreateMetrics();
  Register("n1");
  Register("n2");
  std::string id = Submit("snap", 2);
  const Labels job = {{"job", id}};
  auto h1 = Heartbeat("n1");
  auto h2 = Heartbeat("n2");
  ASSERT_EQ(h1.desired_size(), 1);
  ASSERT_EQ(h2.desired_size(), 1);
  EXPECT_EQ(Value("eft_job_memory_snapshot_step", job), std::nullopt) << "none held yet";
  EXPECT_EQ(Value("eft_job_memory_snapshot_bytes", job), 0.0);
  for (const std::string& m : {"memory", "disk", "scratch"}) {
    EXPECT_EQ(Value("eft_job_recoveries_total", {{"job", id}, {"source", m}}), 0.0) << m;
  }
  auto report = [&](const std::string& node, const v1::RankAssignment& a, v1::RankState state, int code,
                    std::vector<std::pair<int64_t, std::vector<int>>> held, const std::vector<std::string>& events = {}) {
    v1::HeartbeatRequest req;
    req.set_node_name(node);
    req.set_incarnation(node + "-inc");
    *req.add_ranks() = Rank(a, state, code);
    for (const auto& [step, ranks] : held) {
      v1::HeldSnapshot* s = req.add_snapshots();
      s->set_job_id(id);
      s->set_attempt(1);
      s->set_step(step);
      s->set_world_size(2);
      for (int r : ranks) s->add_ranks(r);
      s->set_bytes(1000 * static_cast<int64_t>(ranks.size()));
    }
    for (const auto& json : events) {
      v1::RankEvent* e = req.add_events();
      *e->mutable_key() = a.key();
      e->set_seq(++seq_[node]);
      e->set_time_ms(1);
      e->set_json(json);
    }
    auto resp = c_->Heartbeat(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : v1::HeartbeatResponse();
  };
  // Each node holds its own rank at steps 9 and 10; the replicas have reached step 9 only.
  report("n1", h1.desired(0), v1::RANK_STATE_RUNNING, 0, {{10, {0}}, {9, {0, 1}}},
         {R"({"event":"step","step":10,"loss":1.0,"total_steps":100})"});
  report("n2", h2.desired(0), v1::RANK_STATE_RUNNING, 0, {{10, {1}}, {9, {1, 0}}});
  EXPECT_EQ(Value("eft_job_memory_snapshot_step", job), 10.0);
  EXPECT_EQ(Value("eft_job_memory_snapshot_replication_lag_steps", job), 1.0);
  EXPECT_EQ(Value("eft_job_memory_snapshot_bytes", job), 6000.0);
  // Rank 1 fails; both nodes still hold step 10, which the restart resumes from once staged.
  report("n2", h2.desired(0), v1::RANK_STATE_EXITED, 1, {{10, {1}}, {9, {1, 0}}});
  report("n1", h1.desired(0), v1::RANK_STATE_EXITED, 1, {{10, {0}}, {9, {0, 1}}});
  clock_.Advance(2000ms);  // the backoff
  c_->Tick();
  auto o1 = report("n1", h1.desired(0), v1::RANK_STATE_EXITED, 1, {{10, {0}}, {9, {0, 1}}});
  auto o2 = report("n2", h2.desired(0), v1::RANK_STATE_EXITED, 1, {{10, {1}}, {9, {1, 0}}});
  ASSERT_EQ(o1.stage_size(), 1);
  ASSERT_EQ(o2.stage_size(), 1);
  for (auto [node, a, o] : {std::tuple{"n1", h1.desired(0), o1}, std::tuple{"n2", h2.desired(0), o2}}) {
    v1::HeartbeatRequest req;
    req.set_node_name(node);
    req.set_incarnation(std::string(node) + "-inc");
    *req.add_ranks() = Rank(a, v1::RANK_STATE_EXITED, 1);
    v1::StageResult* r = req.add_staged();
    r->set_job_id(id);
    r->set_attempt(1);
    r->set_step(10);
    *r->mutable_ranks() = o.stage(0).ranks();
    ASSERT_TRUE(c_->Heartbeat(req).ok());
  }
  c_->Tick();
  EXPECT_EQ(Value("eft_job_attempts_total", job), 2.0);
  EXPECT_EQ(Value("eft_job_recoveries_total", {{"job", id}, {"source", "memory"}}), 1.0);
  EXPECT_EQ(Value("eft_job_recoveries_total", {{"job", id}, {"source", "disk"}}), 0.0);
  EXPECT_EQ(Value("eft_job_steps_lost_total", job), 0.0) << "resumed at step 10, the step reached";
}

// Both reasons from the job's first scrape (a dashboard query has data before any resize); an
// eviction counts under evict.
TEST_F(ControllerMetricsTest, ResizesAreCountedByReason) {
  CreateMetrics();
  Register("n1");
  std::string id = Submit("moved", 1);
  EXPECT_EQ(Value("eft_job_resizes_total", {{"job", id}, {"reason", "grow"}}), 0.0);
  EXPECT_EQ(Value("eft_job_resizes_total", {{"job", id}, {"reason", "evict"}}), 0.0);
  ASSERT_TRUE(c_->SetDrained("n1", true, /*evict=*/true).ok());
  EXPECT_EQ(Value("eft_job_resizes_total", {{"job", id}, {"reason", "evict"}}), 1.0);
  EXPECT_EQ(Value("eft_job_resizes_total", {{"job", id}, {"reason", "grow"}}), 0.0);
}

// docs/architecture.md, "Priorities and preemption": a job of higher priority preempts a rigid one
// (eft_job_preemptions_total) and shrinks an elastic one (reason shrink).
TEST_F(ControllerMetricsTest, PreemptionsAndShrinksForPriorityAreCounted) {
  CreateMetrics();
  for (const char* n : {"n1", "n2", "n3"}) Register(n);
  v1::JobSpec low;
  low.set_name("rigid");
  low.add_command("/bin/true");
  low.set_priority(-1);  // the first to give way
  auto r = c_->SubmitJob(low, "");
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string rigid = r->id();
  v1::JobSpec elastic;
  elastic.set_name("elastic");
  elastic.add_command("/bin/true");
  elastic.mutable_resources()->mutable_nodes()->set_min(1);
  elastic.mutable_resources()->mutable_nodes()->set_max(2);
  auto e = c_->SubmitJob(elastic, "");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Value("eft_job_preemptions_total", {{"job", rigid}}), 0.0);
  EXPECT_EQ(Value("eft_job_resizes_total", {{"job", e->id()}, {"reason", "shrink"}}), 0.0);
  v1::JobSpec urgent = elastic;
  urgent.set_name("urgent");
  urgent.set_priority(1);
  urgent.mutable_resources()->mutable_nodes()->set_min(2);
  ASSERT_TRUE(c_->SubmitJob(urgent, "").ok());
  EXPECT_EQ(Value("eft_job_resizes_total", {{"job", e->id()}, {"reason", "shrink"}}), 1.0);
  EXPECT_EQ(Value("eft_job_preemptions_total", {{"job", rigid}}), 1.0);
}

TEST_F(ControllerMetricsTest, PerJobSeriesAreBoundedToActiveAndNewestTerminalJobs) {
  CreateMetrics(ControllerMetricsOptions{.terminal_jobs_kept = 2});
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(Submit("j" + std::to_string(i), 1));  // no nodes: all QUEUED
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(c_->CancelJob(ids[i]).ok());
  std::string text = metrics_->Scrape();
  EXPECT_EQ(SampleValue(text, "eft_jobs", {{"state", "CANCELLED"}}), 4.0) << "counts cover every job";
  EXPECT_EQ(SampleValue(text, "eft_jobs", {{"state", "QUEUED"}}), 1.0);
  EXPECT_EQ(eft::testing::Samples(text, "eft_job_attempts_total").size(), 3u) << text;
  EXPECT_TRUE(SampleValue(text, "eft_job_attempts_total", {{"job", ids[4]}})) << "active";
  EXPECT_TRUE(SampleValue(text, "eft_job_attempts_total", {{"job", ids[3]}})) << "newest terminal";
  EXPECT_TRUE(SampleValue(text, "eft_job_attempts_total", {{"job", ids[2]}})) << "second newest terminal";
  EXPECT_FALSE(SampleValue(text, "eft_job_attempts_total", {{"job", ids[1]}}));
}

TEST_F(ControllerMetricsTest, DestructionUnregistersAndDetachesFromTheController) {
  CreateMetrics();
  Register("n1");
  std::string id = Submit("a", 1);
  auto h = Heartbeat("n1");
  metrics_.reset();
  EXPECT_EQ(registry_.Serialize().find("eft_jobs"), std::string::npos);
  // A checkpoint after the observer's owner is gone must not reach it.
  Heartbeat("n1", {Rank(h.desired(0), v1::RANK_STATE_RUNNING)},
            {R"({"event":"checkpoint","step":1,"path":"/ck/1","bytes":1,"seconds":1})"});
  EXPECT_EQ(c_->GetJob(id)->checkpoints_size(), 1);
  CreateMetrics();  // the names are free again
  EXPECT_EQ(Value("eft_jobs", {{"state", "RUNNING"}}), 1.0);
}

TEST_F(ControllerMetricsTest, ConcurrentScrapesAndHeartbeatsAgree) {
  CreateMetrics();
  Register("n1");
  for (int i = 0; i < 20; ++i) Submit("q" + std::to_string(i), 2);  // never placed: one node
  std::atomic<bool> stop{false};
  std::thread beats([&] {
    while (!stop) Heartbeat("n1");
  });
  std::vector<std::thread> scrapers;
  std::atomic<int> bad{0};
  for (int t = 0; t < 3; ++t) {
    scrapers.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        std::string text = metrics_->Scrape();
        // One snapshot per scrape: the per-job series and the state counts agree.
        if (SampleValue(text, "eft_jobs", {{"state", "QUEUED"}}) !=
            static_cast<double>(eft::testing::Samples(text, "eft_job_attempts_total").size())) {
          ++bad;
        }
      }
    });
  }
  for (auto& t : scrapers) t.join();
  stop = true;
  beats.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(GrpcMetricsTest, MethodLabelsAreBounded) {
  EXPECT_EQ(GrpcMethodLabel("/eft.v1.JobService/SubmitJob"), "eft.v1.JobService/SubmitJob");
  EXPECT_EQ(GrpcMethodLabel("/grpc.health.v1.Health/Check"), "unknown");
  EXPECT_EQ(GrpcMethodLabel("unknown"), "unknown");
  EXPECT_EQ(GrpcMethodLabel(nullptr), "unknown");
}

TEST_F(ControllerMetricsTest, GrpcInterceptorCountsCallsByMethodAndCode) {
  auto grpc_metrics = GrpcRequestMetrics::Create(&registry_);
  ASSERT_TRUE(grpc_metrics.ok()) << grpc_metrics.status();
  JobServiceImpl jobs(c_.get());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&jobs);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back((*grpc_metrics)->InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_TRUE(server && port > 0);

  auto stub = v1::JobService::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                          grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_id("404");
    v1::Job out;
    EXPECT_EQ(stub->GetJob(&ctx, req, &out).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    v1::ListJobsResponse out;
    EXPECT_TRUE(stub->ListJobs(&ctx, v1::ListJobsRequest(), &out).ok());
  }
  server->Shutdown();
  std::string text = registry_.Serialize();
  EXPECT_EQ(SampleValue(text, "eft_grpc_requests_total", {{"method", "eft.v1.JobService/GetJob"}, {"code", "NOT_FOUND"}}),
            3.0)
      << text;
  EXPECT_EQ(SampleValue(text, "eft_grpc_requests_total", {{"method", "eft.v1.JobService/ListJobs"}, {"code", "OK"}}),
            1.0);
  EXPECT_EQ(SampleValue(text, "eft_grpc_request_duration_seconds_count", {{"method", "eft.v1.JobService/GetJob"}}), 3.0);
}

}  // namespace
}  // namespace eft::controller
