// Unit tests of common/metrics.h: exact exposition text, histogram math, callbacks, removal,
// concurrency, name rules and cost. promtool checks live in metrics_promtool_test.cc.
#include "common/metrics.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

namespace eft {
namespace {

TEST(MetricsTest, ExactTextForSmallRegistry) {
  MetricsRegistry r;
  auto requests = r.AddCounter("eft_http_requests_total", "HTTP requests.\nBy path \\ code.", {"path", "code"});
  ASSERT_TRUE(requests.ok()) << requests.status();
  (*requests)->WithLabels({"/v1/jobs", "200"})->Inc();
  (*requests)->WithLabels({"/v1/jobs", "200"})->Inc(2);
  (*requests)->WithLabels({"a\"b\\c\nd", "404"})->Inc(0.5);

  auto up = r.AddGauge("eft_up", "Whether the controller serves.");
  ASSERT_TRUE(up.ok());
  (*up)->Get()->Set(1);

  auto latency = r.AddHistogram("eft_rpc_latency_seconds", "RPC latency.", {"method"}, {0.1, 1});
  ASSERT_TRUE(latency.ok());
  auto submit = (*latency)->WithLabels({"Submit"});
  submit->Observe(0.05);
  submit->Observe(0.1);  // on the bound: le is inclusive
  submit->Observe(0.5);
  submit->Observe(7);

  auto empty = r.AddGauge("eft_world_size", "Ranks per job.", {"job"});
  ASSERT_TRUE(empty.ok());

  const std::string expected =
      "# HELP eft_http_requests_total HTTP requests.\\nBy path \\\\ code.\n"
      "# TYPE eft_http_requests_total counter\n"
      "eft_http_requests_total{path=\"/v1/jobs\",code=\"200\"} 3\n"
      "eft_http_requests_total{path=\"a\\\"b\\\\c\\nd\",code=\"404\"} 0.5\n"
      "# HELP eft_rpc_latency_seconds RPC latency.\n"
      "# TYPE eft_rpc_latency_seconds histogram\n"
      "eft_rpc_latency_seconds_bucket{method=\"Submit\",le=\"0.1\"} 2\n"
      "eft_rpc_latency_seconds_bucket{method=\"Submit\",le=\"1\"} 3\n"
      "eft_rpc_latency_seconds_bucket{method=\"Submit\",le=\"+Inf\"} 4\n"
      "eft_rpc_latency_seconds_sum{method=\"Submit\"} 7.65\n"
      "eft_rpc_latency_seconds_count{method=\"Submit\"} 4\n"
      "# HELP eft_up Whether the controller serves.\n"
      "# TYPE eft_up gauge\n"
      "eft_up 1\n"
      "# HELP eft_world_size Ranks per job.\n"
      "# TYPE eft_world_size gauge\n";
  EXPECT_EQ(r.Serialize(), expected);
}

TEST(MetricsTest, EmptyRegistrySerializesToNothing) {
  MetricsRegistry r;
  EXPECT_EQ(r.Serialize(), "");
}

TEST(MetricsTest, UnlabelledFamiliesExportZeroBeforeFirstUse) {
  MetricsRegistry r;
  ASSERT_TRUE(r.AddCounter("eft_restarts_total", "Restarts.").ok());
  ASSERT_TRUE(r.AddHistogram("eft_save_seconds", "Save time.", {}, {1}).ok());
  EXPECT_EQ(r.Serialize(),
            "# HELP eft_restarts_total Restarts.\n# TYPE eft_restarts_total counter\neft_restarts_total 0\n"
            "# HELP eft_save_seconds Save time.\n# TYPE eft_save_seconds histogram\n"
            "eft_save_seconds_bucket{le=\"1\"} 0\neft_save_seconds_bucket{le=\"+Inf\"} 0\n"
            "eft_save_seconds_sum 0\neft_save_seconds_count 0\n");
}

TEST(MetricsTest, ChildrenAndFamiliesAreSorted) {
  MetricsRegistry r;
  auto b = r.AddGauge("b_metric", "B.", {"x", "y"});
  auto a = r.AddGauge("a_metric", "A.");
  ASSERT_TRUE(a.ok() && b.ok());
  (*b)->WithLabels({"2", "a"})->Set(1);
  (*b)->WithLabels({"10", "z"})->Set(2);
  (*b)->WithLabels({"2", "", })->Set(3);
  EXPECT_EQ(r.Serialize(),
            "# HELP a_metric A.\n# TYPE a_metric gauge\na_metric 0\n"
            "# HELP b_metric B.\n# TYPE b_metric gauge\n"
            "b_metric{x=\"10\",y=\"z\"} 2\nb_metric{x=\"2\",y=\"\"} 3\nb_metric{x=\"2\",y=\"a\"} 1\n");
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  auto bounds = std::make_shared<const std::vector<double>>(std::vector<double>{1, 2, 5});
  Histogram h(bounds);
  for (double v : {-3.0, 0.5, 1.0, 1.0000001, 2.0, 4.9, 5.0, 5.1, 1e300}) h.Observe(v);
  Histogram::Snapshot s = h.Snap();
  EXPECT_EQ(s.upper_bounds, (std::vector<double>{1, 2, 5}));
  // le=1: -3, 0.5, 1 | le=2: +1.0000001, 2 | le=5: +4.9, 5 | +Inf: +5.1, 1e300
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{3, 5, 7, 9}));
  EXPECT_EQ(s.count, 9u);
  EXPECT_DOUBLE_EQ(s.sum, -3 + 0.5 + 1 + 1.0000001 + 2 + 4.9 + 5 + 5.1 + 1e300);

  h.Observe(std::nan(""));
  s = h.Snap();
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{3, 5, 7, 10}));
  EXPECT_TRUE(std::isnan(s.sum));
}

TEST(MetricsTest, HistogramBucketValidation) {
  MetricsRegistry r;
  EXPECT_FALSE(r.AddHistogram("h1_seconds", "H.", {}, {1, 1}).ok());
  EXPECT_FALSE(r.AddHistogram("h2_seconds", "H.", {}, {2, 1}).ok());
  EXPECT_FALSE(r.AddHistogram("h3_seconds", "H.", {}, {1, std::nan("")}).ok());
  EXPECT_FALSE(r.AddHistogram("h4_seconds", "H.", {}, {-INFINITY, 1}).ok());
  auto inf = r.AddHistogram("h5_seconds", "H.", {}, {1, INFINITY});  // trailing +Inf is implicit anyway
  ASSERT_TRUE(inf.ok()) << inf.status();
  EXPECT_EQ((*inf)->Get()->Snap().upper_bounds, std::vector<double>{1});
  auto none = r.AddHistogram("h6_seconds", "H.", {}, {});
  ASSERT_TRUE(none.ok());
  (*none)->Get()->Observe(3);
  EXPECT_NE(r.Serialize().find("h6_seconds_bucket{le=\"+Inf\"} 1\nh6_seconds_sum 3\nh6_seconds_count 1\n"),
            std::string::npos);
}

TEST(MetricsTest, BucketHelpers) {
  EXPECT_EQ(DefaultHistogramBuckets(),
            (std::vector<double>{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}));
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(LinearBuckets(0.5, 0.5, 3), (std::vector<double>{0.5, 1, 1.5}));
  EXPECT_TRUE(ExponentialBuckets(0, 2, 3).empty());
  EXPECT_TRUE(ExponentialBuckets(1, 1, 3).empty());
  EXPECT_TRUE(LinearBuckets(0, 0, 3).empty());
}

TEST(MetricsTest, CounterAndGaugeOperations) {
  Counter c;
  c.Inc();
  c.Inc(2.5);
  c.Inc(-1);            // ignored: counters never go down
  c.Inc(std::nan(""));  // ignored
  EXPECT_EQ(c.Value(), 3.5);
  Gauge g;
  g.Set(10);
  g.Inc();
  g.Dec(4);
  g.Add(-0.5);
  EXPECT_EQ(g.Value(), 6.5);
  g.SetToCurrentTime();
  EXPECT_GT(g.Value(), 1.7e9);  // after 2023
}

TEST(MetricsTest, CallbackFamilies) {
  MetricsRegistry r;
  std::atomic<int> calls{0};
  ASSERT_TRUE(r.AddCallback(MetricType::kGauge, "eft_jobs", "Jobs by state.", {"state"}, [&] {
                 ++calls;
                 return std::vector<CallbackSample>{
                     {{"RUNNING"}, 2}, {{"QUEUED"}, 5}, {{"RUNNING"}, 99},  // duplicate: first wins
                     {{"a", "b"}, 1},                                       // wrong arity: dropped
                     {{"bad\xff"}, 7}};                                    // repaired to U+FFFD
               }).ok());
  ASSERT_TRUE(r.AddCallback(MetricType::kCounter, "eft_scrapes_total", "Scrapes.", {},
                            [&] { return std::vector<CallbackSample>{{{}, double(calls.load())}}; })
                  .ok());
  const std::string expected =
      "# HELP eft_jobs Jobs by state.\n# TYPE eft_jobs gauge\n"
      "eft_jobs{state=\"QUEUED\"} 5\neft_jobs{state=\"RUNNING\"} 2\neft_jobs{state=\"bad\xEF\xBF\xBD\"} 7\n"
      "# HELP eft_scrapes_total Scrapes.\n# TYPE eft_scrapes_total counter\neft_scrapes_total 1\n";
  EXPECT_EQ(r.Serialize(), expected);
  EXPECT_EQ(calls.load(), 1);
  r.Serialize();
  EXPECT_EQ(calls.load(), 2);  // computed afresh at every scrape

  EXPECT_FALSE(r.AddCallback(MetricType::kHistogram, "eft_h", "H.", {}, [] { return std::vector<CallbackSample>{}; }).ok());
  EXPECT_FALSE(r.AddCallback(MetricType::kGauge, "eft_g", "G.", {}, nullptr).ok());
  EXPECT_FALSE(r.AddCallback(MetricType::kCounter, "eft_c", "C.", {}, [] { return std::vector<CallbackSample>{}; }).ok());
}

TEST(MetricsTest, UnregisterStopsCallbackAndReleasesItsState) {
  MetricsRegistry r;
  auto state = std::make_shared<int>(4);
  std::weak_ptr<int> watch = state;
  ASSERT_TRUE(r.AddCallback(MetricType::kGauge, "eft_nodes", "Nodes.", {},
                            [state] { return std::vector<CallbackSample>{{{}, double(*state)}}; })
                  .ok());
  state.reset();
  EXPECT_NE(r.Serialize().find("eft_nodes 4\n"), std::string::npos);
  ASSERT_TRUE(r.Unregister("eft_nodes").ok());
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(r.Serialize(), "");
  EXPECT_EQ(r.Unregister("eft_nodes").code(), StatusCode::kNotFound);
  // The name is free again.
  EXPECT_TRUE(r.AddGauge("eft_nodes", "Nodes.").ok());
}

TEST(MetricsTest, UnregisterWaitsForCallbackInFlight) {
  MetricsRegistry r;
  std::atomic<bool> entered{false}, release{false}, finished{false};
  ASSERT_TRUE(r.AddCallback(MetricType::kGauge, "eft_slow", "Slow.", {}, [&] {
                 entered = true;
                 while (!release) std::this_thread::yield();
                 finished = true;
                 return std::vector<CallbackSample>{{{}, 1}};
               }).ok());
  std::thread scraper([&] { r.Serialize(); });
  while (!entered) std::this_thread::yield();
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    release = true;
  });
  ASSERT_TRUE(r.Unregister("eft_slow").ok());
  EXPECT_TRUE(finished.load());  // Unregister returned only after the callback did
  scraper.join();
  releaser.join();
}

TEST(MetricsTest, RemoveAndClear) {
  MetricsRegistry r;
  auto fam = r.AddGauge("eft_job_world_size", "World size.", {"job"});
  ASSERT_TRUE(fam.ok());
  GaugeFamily& f = **fam;
  auto one = f.WithLabels({"1"});
  one->Set(4);
  f.WithLabels(std::vector<std::string>{"2"})->Set(8);
  EXPECT_EQ(f.size(), 2u);
  EXPECT_EQ(f.WithLabels({"1"}), one);  // same handle for the same labels
  EXPECT_TRUE(f.Remove({"1"}));
  EXPECT_FALSE(f.Remove(std::vector<std::string>{"1"}));
  EXPECT_EQ(r.Serialize(), "# HELP eft_job_world_size World size.\n# TYPE eft_job_world_size gauge\n"
                           "eft_job_world_size{job=\"2\"} 8\n");
  one->Set(5);  // a detached handle stays safe to use; its value goes nowhere
  EXPECT_EQ(f.WithLabels({"1"})->Value(), 0);  // a fresh child
  f.Clear();
  EXPECT_EQ(f.size(), 0u);
  EXPECT_EQ(r.Serialize(), "# HELP eft_job_world_size World size.\n# TYPE eft_job_world_size gauge\n");

  auto plain = r.AddCounter("eft_plain_total", "Plain.");
  ASSERT_TRUE(plain.ok());
  (*plain)->Get()->Inc(3);
  (*plain)->Clear();
  EXPECT_EQ((*plain)->size(), 0u);
  EXPECT_EQ((*plain)->Get()->Value(), 0);
}

TEST(MetricsTest, InvalidUtf8LabelValuesShareTheRepairedChild) {
  MetricsRegistry r;
  auto fam = r.AddGauge("eft_g", "G.", {"v"});
  ASSERT_TRUE(fam.ok());
  auto a = (*fam)->WithLabels({"x\xff"});
  auto b = (*fam)->WithLabels({"x\xfe"});
  auto c = (*fam)->WithLabels({"x\xEF\xBF\xBD"});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_TRUE((*fam)->Remove({"x\x80"}));
  EXPECT_EQ((*fam)->size(), 0u);
}

TEST(MetricsTest, WrongLabelCountAborts) {
  MetricsRegistry r;
  auto fam = r.AddCounter("eft_x_total", "X.", {"a", "b"});
  ASSERT_TRUE(fam.ok());
  EXPECT_DEATH((*fam)->WithLabels({"only-one"}), "eft_x_total.*2 label name.*got 1");
  EXPECT_DEATH((*fam)->Remove({"1", "2", "3"}), "eft_x_total");
}

TEST(MetricsTest, NameValidation) {
  struct Case {
    const char* name;
    MetricType type;
    bool ok;
  };
  const Case cases[] = {
      {"eft_jobs_total", MetricType::kCounter, true},
      {"_private_total", MetricType::kCounter, true},
      {"eft_jobs", MetricType::kCounter, false},           // counters end in _total
      {"eft_jobs_total", MetricType::kGauge, false},       // only counters do
      {"eft_queue_count", MetricType::kGauge, false},      // histogram suffixes are reserved
      {"eft_queue_sum", MetricType::kGauge, false},
      {"eft_queue_bucket", MetricType::kGauge, false},
      {"eft_queue_count", MetricType::kHistogram, true},
      {"eft:jobs", MetricType::kGauge, false},             // recording-rule syntax
      {"9jobs", MetricType::kGauge, false},
      {"", MetricType::kGauge, false},
      {"eft-jobs", MetricType::kGauge, false},
      {"eft jobs", MetricType::kGauge, false},
      {"eft_jobsRunning", MetricType::kGauge, false},      // promtool: snake_case
      {"EFT_JOBS", MetricType::kGauge, true},
      {"eft_j\xc3\xa9", MetricType::kGauge, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ValidateMetricName(c.name, c.type).ok(), c.ok) << c.name << " as " << MetricTypeName(c.type);
  }
  EXPECT_TRUE(ValidateLabelNames({"job", "_x", "gpu0", "A"}, MetricType::kGauge).ok());
  for (const char* bad : {"", "0gpu", "__name", "le", "quantile", "gpuId", "a-b", "a:b"}) {
    EXPECT_FALSE(ValidateLabelNames({bad}, MetricType::kGauge).ok()) << bad;
  }
  EXPECT_FALSE(ValidateLabelNames({"job", "job"}, MetricType::kGauge).ok());

  MetricsRegistry r;
  Status bad_label = r.AddGauge("eft_g", "G.", {"le"}).status();
  EXPECT_EQ(bad_label.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_label.message().find("eft_g"), std::string::npos) << bad_label;
  EXPECT_NE(bad_label.message().find("\"le\""), std::string::npos) << bad_label;
  EXPECT_FALSE(r.AddGauge("eft_g", "").ok());  // help is required
  EXPECT_FALSE(r.AddGauge("eft_g", "bad \xff").ok());
  EXPECT_EQ(r.Serialize(), "");  // nothing half-registered
}

TEST(MetricsTest, DuplicateAndCollidingNames) {
  MetricsRegistry r;
  ASSERT_TRUE(r.AddHistogram("eft_save", "Save.", {}).ok());
  EXPECT_EQ(r.AddHistogram("eft_save", "Save.", {}).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(r.AddGauge("eft_save", "Save.").status().code(), StatusCode::kAlreadyExists);
  // A histogram may end in _bucket, but this family name is eft_save's bucket sample name.
  Status s = r.AddHistogram("eft_save_bucket", "B.", {}).status();
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("eft_save"), std::string::npos) << s;
  ASSERT_TRUE(r.AddHistogram("eft_x_count", "X.", {}).ok());
  EXPECT_EQ(r.AddHistogram("eft_x", "X.", {}).status().code(), StatusCode::kAlreadyExists);  // eft_x_count
}

TEST(MetricsTest, FormatMetricValue) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(1), "1");
  EXPECT_EQ(FormatMetricValue(-2.5), "-2.5");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(1e-9), "1e-09");
  EXPECT_EQ(FormatMetricValue(123456789012), "123456789012");
  EXPECT_EQ(FormatMetricValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatMetricValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    if (!std::isfinite(d)) continue;
    const std::string text = FormatMetricValue(d);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), d) << text;
  }
}

TEST(MetricsTest, EscapingAndUtf8) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd\re"), "a\\\"b\\\\c\\nd\re");
  EXPECT_EQ(EscapeHelp("a\"b\\c\nd"), "a\"b\\\\c\\nd");
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_TRUE(IsValidUtf8(std::string("nul\0inside", 10)));
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));   // U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));      // overlong
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));          // truncated
  EXPECT_FALSE(IsValidUtf8("\x80"));              // stray continuation
  EXPECT_EQ(SanitizeUtf8("a\xe2\x82z"), "a\xEF\xBF\xBD\xEF\xBF\xBDz");
  EXPECT_EQ(SanitizeUtf8("\xe2\x82\xac"), "\xe2\x82\xac");
  EXPECT_EQ(EscapeLabelValue("\xff\""), "\xEF\xBF\xBD\\\"");
}

TEST(MetricsTest, ConcurrentIncrementsAreExact) {
  MetricsRegistry r;
  auto fam = r.AddCounter("eft_hits_total", "Hits.", {"kind"});
  auto hist = r.AddHistogram("eft_sizes", "Sizes.", {}, {0.5, 1.5});
  ASSERT_TRUE(fam.ok() && hist.ok());
  auto shared = (*fam)->WithLabels({"shared"});
  constexpr int kThreads = 8, kIters = 100000;
  std::vector<std::thread> threads;
  std::atomic<bool> stop{false};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        shared->Inc();
        (*hist)->Get()->Observe(1);
        if (i % 100 == 0) (*fam)->WithLabels({"lookup"})->Inc();
        if (i % 1000 == 0) (*fam)->WithLabels({std::to_string(t)})->Inc();
      }
    });
  }
  // Scrapes and churn (create/remove other children) while the increments run.
  std::thread churn([&] {
    for (int i = 0; !stop; ++i) {
      (*fam)->WithLabels({"tmp" + std::to_string(i % 7)})->Inc();
      (*fam)->Remove({"tmp" + std::to_string((i + 3) % 7)});
      std::string text = r.Serialize();
      ASSERT_NE(text.find("eft_hits_total"), std::string::npos);
    }
  });
  for (auto& th : threads) th.join();
  stop = true;
  churn.join();
  EXPECT_EQ(shared->Value(), double(kThreads) * kIters);
  EXPECT_EQ((*fam)->WithLabels({"lookup"})->Value(), double(kThreads) * kIters / 100);
  Histogram::Snapshot s = (*hist)->Get()->Snap();
  EXPECT_EQ(s.count, uint64_t(kThreads) * kIters);
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{0, s.count, s.count}));
  EXPECT_EQ(s.sum, double(kThreads) * kIters);
}

// Cost of an update: a cached handle is a relaxed atomic add; WithLabels adds a lock and a lookup.
TEST(MetricsTest, UpdatesAreCheap) {
  MetricsRegistry r;
  auto fam = r.AddCounter("eft_ops_total", "Ops.", {"job", "method"});
  auto hist = r.AddHistogram("eft_op_seconds", "Op time.", {"method"});
  ASSERT_TRUE(fam.ok() && hist.ok());
  for (int j = 0; j < 100; ++j) (*fam)->WithLabels({std::to_string(j), "Heartbeat"});
  auto handle = (*fam)->WithLabels({"42", "Heartbeat"});
  auto h = (*hist)->WithLabels({"Heartbeat"});
  constexpr int kN = 1000000;
  auto time_ns = [&](auto&& fn, int n) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) fn(i);
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / n;
  };
  double inc = time_ns([&](int) { handle->Inc(); }, kN);
  double observe = time_ns([&](int i) { h->Observe(i * 1e-6); }, kN);
  double lookup = time_ns([&](int) { (*fam)->WithLabels({"42", "Heartbeat"})->Inc(); }, kN / 10);
  std::printf("cached Inc: %.1f ns, Observe: %.1f ns, WithLabels+Inc: %.1f ns\n", inc, observe, lookup);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "sanitizer build: timings printed, not judged";
#endif
  EXPECT_LT(inc, 1000);
  EXPECT_LT(observe, 1000);
  EXPECT_LT(lookup, 5000);  // loose: shared CI cores; typically a few hundred ns
}

}  // namespace
}  // namespace eft
