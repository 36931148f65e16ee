// Checks real Serialize() output with Prometheus' own parser and linter: `promtool check metrics`
// (Debian package prometheus). Skips, loudly, only when promtool is not installed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/metrics.h"

namespace eft {
namespace {

std::string FindPromtool() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/promtool";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct PromtoolResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr: parse errors and lint problems
};

PromtoolResult CheckMetrics(const std::string& promtool, const std::string& text) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "eft-metrics-XXXXXX").string();
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) return {-1, "mkstemp failed"};
  ::close(fd);
  { std::ofstream(tmpl, std::ios::binary) << text; }
  PromtoolResult result;
  std::string cmd = "'" + promtool + "' check metrics < '" + tmpl + "' 2>&1";
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) result.output.append(buf, n);
    int status = ::pclose(p);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::filesystem::remove(tmpl);
  return result;
}

class PromtoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    promtool_ = FindPromtool();
    if (promtool_.empty()) {
      std::fprintf(stderr, "\n*** promtool NOT FOUND: exposition NOT checked by Prometheus' parser. "
                           "Install it: scripts/install-deps.sh (Debian package prometheus) ***\n\n");
      GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
    }
  }

  void ExpectClean(const std::string& text) {
    PromtoolResult r = CheckMetrics(promtool_, text);
    EXPECT_EQ(r.exit_code, 0) << "promtool output:\n" << r.output << "\nexposition:\n" << text;
    EXPECT_EQ(r.output, "") << "promtool reported problems:\n" << r.output;
  }

  std::string promtool_;
};

// The check is not vacuous: promtool does reject what we must never emit.
TEST_F(PromtoolTest, PromtoolRejectsBadExposition) {
  PromtoolResult lint = CheckMetrics(promtool_, "# HELP foo A counter.\n# TYPE foo counter\nfoo 1\n");
  EXPECT_NE(lint.exit_code, 0);
  EXPECT_NE(lint.output.find("_total"), std::string::npos) << lint.output;
  PromtoolResult utf8 = CheckMetrics(promtool_, "# HELP g G.\n# TYPE g gauge\ng{v=\"\xff\"} 1\n");
  EXPECT_NE(utf8.exit_code, 0) << utf8.output;
  PromtoolResult quote = CheckMetrics(promtool_, "# HELP g G.\n# TYPE g gauge\ng{v=\"a\"b\"} 1\n");
  EXPECT_NE(quote.exit_code, 0) << quote.output;
}

TEST_F(PromtoolTest, BigVariedRegistryPasses) {
  MetricsRegistry r;
  auto jobs = r.AddCounter("eft_jobs_submitted_total", "Jobs accepted by the controller.", {"user"});
  auto restarts = r.AddCounter("eft_job_restarts_total", "Attempts restarted.\nCounts \\ failures.", {"job"});
  auto requests = r.AddCounter("eft_http_requests_total", "HTTP requests by route and code.",
                               {"method", "route", "code"});
  auto plain = r.AddCounter("eft_scrapes_total", "Scrapes served.");
  auto loss = r.AddGauge("eft_job_loss", "Latest training loss per job.", {"job"});
  auto special = r.AddGauge("eft_special_values", "Gauges at odd values.", {"case"});
  auto unused = r.AddGauge("eft_gpu_memory_used_bytes", "GPU memory in use.", {"gpu", "job"});
  auto up = r.AddGauge("eft_up", "1 while serving.");
  auto rpc = r.AddHistogram("eft_rpc_duration_seconds", "RPC latency by method and code.", {"method", "code"});
  auto save = r.AddHistogram("eft_checkpoint_save_seconds", "Checkpoint save time.", {},
                             ExponentialBuckets(0.001, 4, 12));
  auto bytes = r.AddHistogram("eft_checkpoint_size_bytes", "Checkpoint sizes.", {"kind"},
                              ExponentialBuckets(1024, 16, 8));
  auto linear = r.AddHistogram("eft_step_tokens", "Tokens per step.", {}, LinearBuckets(-10, 2.5, 9));
  auto tiny = r.AddHistogram("eft_tiny_seconds", "Tiny latencies.", {}, {1e-9, 1e-7, 3.3e-5});
  for (const Status& s : {jobs.status(), restarts.status(), requests.status(), plain.status(), loss.status(),
                          special.status(), unused.status(), up.status(), rpc.status(), save.status(),
                          bytes.status(), linear.status(), tiny.status()}) {
    ASSERT_TRUE(s.ok()) << s;
  }
  ASSERT_TRUE(r.AddCallback(MetricType::kGauge, "eft_jobs", "Jobs by state.", {"state"}, [] {
                 return std::vector<CallbackSample>{{{"RUNNING"}, 3}, {{"QUEUED"}, 1}, {{"FAILED"}, 0}};
               }).ok());
  ASSERT_TRUE(r.AddCallback(MetricType::kCounter, "eft_rank_exits_total", "Rank exits by code.", {"code"}, [] {
                 return std::vector<CallbackSample>{{{"0"}, 12}, {{"75"}, 2}, {{"137"}, 1e20}};
               }).ok());
  ASSERT_TRUE(r.AddCallback(MetricType::kGauge, "eft_heartbeat_age_seconds", "Seconds since last heartbeat.",
                            {"node"}, [] { return std::vector<CallbackSample>{}; })
                  .ok());

  (*plain)->Get()->Inc(7);
  (*up)->Get()->Set(1);
  for (int u = 0; u < 20; ++u) (*jobs)->WithLabels({"user" + std::to_string(u)})->Inc(u);
  (*jobs)->WithLabels({"O'Brien \"the\" admin\\\n"})->Inc();
  (*jobs)->WithLabels({"Jürgen Ωmega 😀"})->Inc();
  (*jobs)->WithLabels({""})->Inc();
  for (int j = 0; j < 50; ++j) {
    (*restarts)->WithLabels({std::to_string(j)})->Inc(j % 4);
    (*loss)->WithLabels({std::to_string(j)})->Set(2.5 / (j + 1));
  }
  const char* methods[] = {"GET", "POST", "DELETE"};
  const char* codes[] = {"200", "400", "404", "500"};
  std::mt19937 rng(1);
  std::exponential_distribution<double> latency(20);
  for (const char* m : methods) {
    for (const char* c : codes) {
      (*requests)->WithLabels({m, "/v1/jobs/{id}", c})->Inc(rng() % 1000);
      auto h = (*rpc)->WithLabels({std::string("eft.v1.AgentService/") + m, c});
      for (int i = 0; i < 200; ++i) h->Observe(latency(rng));
    }
  }
  (*special)->WithLabels({"nan"})->Set(std::nan(""));
  (*special)->WithLabels({"inf"})->Set(INFINITY);
  (*special)->WithLabels({"ninf"})->Set(-INFINITY);
  (*special)->WithLabels({"neg_zero"})->Set(-0.0);
  (*special)->WithLabels({"max"})->Set(1.7976931348623157e308);
  (*special)->WithLabels({"denormal"})->Set(4.9e-324);
  (*special)->WithLabels({"third"})->Set(1.0 / 3);
  for (double v : {0.0005, 0.3, 2.0, 100.0, 1e6}) (*save)->Get()->Observe(v);
  (*bytes)->WithLabels({"sharded"})->Observe(123456789);
  (*bytes)->WithLabels({"full"})->Observe(1e13);
  for (int i = -20; i < 20; ++i) (*linear)->Get()->Observe(i);
  (*tiny)->Get()->Observe(5e-8);
  (void)unused;  // registered, never used: HELP and TYPE with no samples

  const std::string text = r.Serialize();
  ASSERT_GT(text.size(), 10000u);
  ExpectClean(text);
}

// Label values built from random bytes, biased towards what breaks naive escaping, must still pass
// promtool, and must read back as the (UTF-8-repaired) value that went in.
TEST_F(PromtoolTest, RandomLabelValuesPassAndRoundTrip) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::vector<std::string> pieces = {"\"", "\\", "\n", "\r", "\t", std::string(1, '\0'), "{", "}", ",",
                                           "=", "#", " ", "\\n", "\\\"", "é", "€", "😀", "\xff", "\xc3",
                                           "\xed\xa0\x80", "\xf4\x90\x80\x80", "le=\"+Inf\"", "} 1\n"};
  MetricsRegistry r;
  auto fam = r.AddGauge("eft_fuzz", "Random label values.", {"v", "w"});
  auto hist = r.AddHistogram("eft_fuzz_seconds", "Random label values on a histogram.", {"v"}, {0.5});
  ASSERT_TRUE(fam.ok() && hist.ok());
  std::map<std::string, double> expected;  // repaired value of label v -> last value set
  for (int i = 0; i < 3000; ++i) {
    std::string v;
    int len = rng() % 12;
    for (int k = 0; k < len; ++k) {
      if (rng() % 2) v += pieces[rng() % pieces.size()];
      else v += static_cast<char>(rng() % 256);
    }
    (*fam)->WithLabels({v, "w"})->Set(i);
    expected[SanitizeUtf8(v)] = i;
    if (i % 10 == 0) (*hist)->WithLabels({v})->Observe(i % 2);
  }
  const std::string text = r.Serialize();
  ExpectClean(text);

  // Read back eft_fuzz{v="...",w="w"} lines by unescaping v.
  std::map<std::string, double> parsed;
  const std::string prefix = "eft_fuzz{v=\"";
  for (size_t pos = 0; (pos = text.find(prefix, pos)) != std::string::npos;) {
    if (pos > 0 && text[pos - 1] != '\n') { pos += prefix.size(); continue; }
    size_t i = pos + prefix.size();
    std::string value;
    for (; i < text.size() && text[i] != '"'; ++i) {
      if (text[i] == '\\') {
        ++i;
        value += text[i] == 'n' ? '\n' : text[i];
      } else {
        ASSERT_NE(text[i], '\n') << "raw newline inside a label value";
        value += text[i];
      }
    }
    const std::string rest = ",w=\"w\"} ";
    ASSERT_EQ(text.compare(i + 1, rest.size(), rest), 0);
    size_t end = text.find('\n', i);
    parsed[value] = std::strtod(text.substr(i + 1 + rest.size(), end - i - 1 - rest.size()).c_str(), nullptr);
    pos = end;
  }
  EXPECT_EQ(parsed.size(), expected.size());
  EXPECT_TRUE(parsed == expected);
}

}  // namespace
}  // namespace eft
