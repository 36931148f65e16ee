// The MLflow tracker (controller/tracking/mlflow_tracker.h) against servers that fail: its retries
// with growing delays on a ManualClock, the pending points, the delay and the events it shows, its
// bound, and that the controller's calls into it never wait for a call in flight. (A real MLflow
// server takes the runs in tests/e2e/mlflow_test.cc.)
#include "controller/tracking/mlflow_tracker.h"

#include <mutex>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "common/stopwatch.h"
#include "spec/job_spec.h"
#include "tests/unit/controller/tracking/test_servers.h"

namespace eft::controller::mlflow {
namespace {

using namespace std::chrono_literals;
using controller::testing::BadServer;

TrackedJob Job(const std::string& id, const std::string& uri) {
  TrackedJob j;
  j.id = id;
  j.spec.set_name("sft");
  j.spec.add_command("/bin/true");
  EXPECT_TRUE(spec::NormalizeJobSpec(&j.spec).ok());
  j.spec.mutable_tracking()->set_mlflow_tracking_uri(uri);
  j.spec.mutable_tracking()->set_mlflow_experiment("exp");
  j.state = v1::JOB_STATE_RUNNING;
  return j;
}

std::vector<TrackedPoint> Losses(int from, int to) {
  std::vector<TrackedPoint> out;
  for (int s = from; s <= to; ++s) out.push_back({kTrainLossKey, s, 1.0 / s, 1000 + s});
  return out;
}

struct Events {
  std::mutex mu;
  std::vector<std::tuple<std::string, std::string, std::string>> list;  // job, type, message
  Status Add(const std::string& job, const std::string& type, const std::string& message) {
    std::lock_guard<std::mutex> lock(mu);
    list.emplace_back(job, type, message);
    return Status::Ok();
  }
  std::vector<std::string> Types() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::string> out;
    for (const auto& e : list) out.push_back(std::get<0>(e) + ":" + std::get<1>(e));
    return out;
  }
};

MlflowTracker::Hooks HooksFor(Events* events) {
  return {[](const MlflowRunRecord&) { return Status::Ok(); },
          [events](const std::string& job, const std::string& type, const std::string& message) {
            return events->Add(job, type, message);
          },
          [](const std::string&) { return Result<std::vector<TrackedPoint>>(std::vector<TrackedPoint>{}); }};
}

TEST(MlflowTrackerTest, AFailingServerIsRetriedAfterGrowingDelaysAndItsOutageShown) {
  BadServer server(BadServer::Mode::kHangUp);
  const std::string uri = "http://127.0.0.1:" + std::to_string(server.port());
  ManualClock clock;
  Events events;
  MlflowTrackerOptions o;
  o.timeout = 2000ms;
  o.retry_initial = 1000ms;
  o.retry_max = 4000ms;
  o.unreachable_event_after = 10000ms;
  MetricsRegistry registry;  // before the tracker: it unregisters its families when destroyed
  MlflowTracker tracker(o, &clock, HooksFor(&events));
  ASSERT_TRUE(tracker.RegisterMetrics(&registry).ok());
  const MlflowRunRecord row{"7", "key", "", "", false};
  tracker.OnJob(Job("7", uri), &row);
  tracker.OnJob(Job("8", uri), &row);  // another job on the same server
  tracker.OnPoints("7", Losses(1, 3));

  // (seconds since the first failure, connections the server has seen by then)
  const std::vector<std::pair<int, int>> timeline = {{0, 1}, {0, 1}, {1, 2}, {2, 2}, {3, 3}, {6, 3},
                                                     {7, 4}, {10, 4}, {11, 5}, {15, 6}};
  int now = 0;
  for (const auto& [at, connections] : timeline) {
    clock.Advance(std::chrono::seconds(at - now));
    now = at;
    tracker.RunOnce();
    EXPECT_EQ(server.accepted(), connections) << "at " << at << " s: one try per delay (1, 2, 4, 4 s), for both jobs";
    if (at < 10) {
      EXPECT_TRUE(events.Types().empty()) << "at " << at << " s";
    }
  }
  // After 10 s of failures: one event for the job with points waiting (job 8 has nothing to send
  // but its run), and only once.
  EXPECT_EQ(events.Types(), (std::vector<std::string>{"7:mlflow_unreachable", "8:mlflow_unreachable"}));
  const std::string message = std::get<2>(events.list.at(0));
  EXPECT_NE(message.find("failing for 10.0 s"), std::string::npos) << message;
  EXPECT_NE(message.find("3 points of this job wait (the oldest for 10.0 s)"), std::string::npos) << message;
  EXPECT_NE(message.find("training goes on"), std::string::npos) << message;

  const MlflowTracker::Stats s = tracker.stats();
  EXPECT_EQ(s.pending_points, 3u);
  EXPECT_DOUBLE_EQ(s.delay_seconds, 15.0);
  EXPECT_EQ(s.open_runs, 2u);
  EXPECT_EQ(s.send_failures, 6u);
  EXPECT_EQ(s.dropped_points, 0u);
  const std::string text = registry.Serialize();
  for (const char* line : {"eft_mlflow_pending_points 3\n", "eft_mlflow_delay_seconds 15\n", "eft_mlflow_open_runs 2\n",
                           "eft_mlflow_send_failures_total 6\n", "eft_mlflow_points_sent_total 0\n",
                           "eft_mlflow_points_dropped_total 0\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  }
}

TEST(MlflowTrackerTest, PointsWaitingWithinTheBoundAreCountedWhenThinnedOut) {
  ManualClock clock;
  Events events;
  MlflowTrackerOptions o;
  o.max_pending_points = 100;
  MlflowTracker tracker(o, &clock, HooksFor(&events));
  const MlflowRunRecord row{"7", "key", "", "", false};
  tracker.OnJob(Job("7", "http://127.0.0.1:" + std::to_string(testing::ClosedPort())), &row);
  for (int s = 1; s <= 1000; ++s) tracker.OnPoints("7", Losses(s, s));
  tracker.RunOnce();
  const auto stats = tracker.stats();
  EXPECT_LE(stats.pending_points, 100u);
  EXPECT_EQ(stats.pending_points + stats.dropped_points, 1000u);
}

TEST(MlflowTrackerTest, AJobWhoseServerCannotBeNamedGetsAnEventAndLeaves) {
  ManualClock clock;
  Events events;
  MlflowTracker tracker({}, &clock, HooksFor(&events));
  const MlflowRunRecord row{"9", "key", "", "", false};
  tracker.OnJob(Job("9", "http://:5000"), &row);
  tracker.OnPoints("9", Losses(1, 2));
  tracker.RunOnce();
  ASSERT_EQ(events.Types(), (std::vector<std::string>{"9:mlflow_failed"}));
  EXPECT_NE(std::get<2>(events.list[0]).find("names no host"), std::string::npos) << std::get<2>(events.list[0]);
  EXPECT_EQ(tracker.stats().open_runs, 0u);
  EXPECT_EQ(tracker.stats().dropped_points, 2u);
  tracker.OnPoints("9", Losses(3, 3));  // gone: ignored
  tracker.OnJob(Job("9", "http://:5000"), nullptr);
  EXPECT_EQ(tracker.stats().open_runs, 0u);
}

// What the controller calls (under its lock) only queues: while the tracker's thread waits for a
// server that never answers, each call returns at once.
TEST(MlflowTrackerTest, TheControllersCallsNeverWaitForACallInFlight) {
  BadServer silent(BadServer::Mode::kSilent);
  Events events;
  MlflowTrackerOptions o;
  o.timeout = 3000ms;
  o.flush_interval = 50ms;
  auto tracker = std::make_unique<MlflowTracker>(o, RealClock::Get(), HooksFor(&events));
  tracker->Start();
  const MlflowRunRecord row{"7", "key", "", "", false};
  tracker->OnJob(Job("7", "http://127.0.0.1:" + std::to_string(silent.port())), &row);
  Stopwatch waiting;
  while (silent.accepted() == 0 && waiting.Seconds() < 5) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(silent.accepted(), 1) << "the tracker's thread is in its call";
  double slowest = 0;
  for (int s = 1; s <= 2000; ++s) {
    Stopwatch call;
    tracker->OnPoints("7", Losses(s, s));
    if (s % 100 == 0) tracker->OnJob(Job("7", "http://127.0.0.1:" + std::to_string(silent.port())), nullptr);
    slowest = std::max(slowest, call.Seconds());
  }
  EXPECT_LT(slowest, 0.05) << "a call from the controller waited";
  EXPECT_EQ(tracker->stats().pending_points, 2000u);
  Stopwatch stopping;
  tracker.reset();  // Stop: the call in flight runs into its timeout
  EXPECT_LT(stopping.Seconds(), 5.0);
}

}  // namespace
}  // namespace eft::controller::mlflow
