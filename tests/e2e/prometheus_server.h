// A real Prometheus server for end-to-end tests: generated config (1 s scrapes, optional rule
// files), its own port and TSDB directory, stopped by PID (SIGKILLed with its process group when
// the test fails). The query API answers instant queries.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/e2e/cluster.h"
#include "tests/unit/common/http/http_test_client.h"

namespace eft::testing {

using namespace std::chrono_literals;

inline std::string FindOnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(std::string(path ? path : "") + ":/usr/bin:/usr/sbin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

inline std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out += static_cast<char>(ch);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", ch);
      out += buf;
    }
  }
  return out;
}

// One Prometheus server; SIGKILLed with its process group on destruction (ChildProcess), so a
// failing assertion never leaves it running.
class PrometheusServer {
 public:
  // `rule_files`: absolute paths of alerting/recording rule files to load.
  PrometheusServer(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& targets,
                   const std::vector<std::string>& rule_files = {})
      : dir_(dir) {
    std::ofstream config(dir_ + "/prometheus.yml");
    config << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n";
    if (!rule_files.empty()) {
      config << "rule_files:\n";
      for (const auto& f : rule_files) config << "  - " << f << "\n";
    }
    config << "scrape_configs:\n";
    // Targets sharing a job name form one scrape config, as Prometheus requires.
    std::vector<std::pair<std::string, std::vector<std::string>>> jobs;
    for (const auto& [job, target] : targets) {
      auto it = std::find_if(jobs.begin(), jobs.end(), [&job = job](const auto& j) { return j.first == job; });
      if (it == jobs.end()) it = jobs.insert(jobs.end(), {job, {}});
      it->second.push_back(target);
    }
    for (const auto& [job, list] : jobs) {
      config << "  - job_name: " << job << "\n    static_configs:\n      - targets: [";
      for (size_t i = 0; i < list.size(); ++i) config << (i ? ", " : "") << "'" << list[i] << "'";
      config << "]\n";
    }
  }

  void Start(const std::string& binary) {
    port_ = PickFreePort();
    ASSERT_TRUE(process_.Start({binary, "--config.file=" + dir_ + "/prometheus.yml",
                                "--storage.tsdb.path=" + dir_ + "/prometheus-data",
                                "--web.listen-address=127.0.0.1:" + std::to_string(port_), "--log.level=warn"},
                               {}, dir_ + "/prometheus.log"));
    bool ready = WaitUntil(
        [&] {
          auto r = HttpCall(port_, "GET", "/-/ready", "", "", 1s);
          return r && r->status == 200;
        },
        30s);
    ASSERT_TRUE(ready) << "prometheus did not become ready; log:\n" << ReadFile(dir_ + "/prometheus.log");
  }

  // Stops it the polite way; the destructor's SIGKILL is the fallback.
  void Stop() {
    if (process_.pid() <= 0) return;
    process_.Signal(SIGTERM);
    if (process_.Wait(10s) == -1) process_.KillGroup();
  }

  // The instant vector for `query`: [{"metric": {...}, "value": [time, "v"]}, ...]; null on error
  // (the error text in *error when given).
  nlohmann::json Query(const std::string& query, std::string* error = nullptr) {
    auto r = HttpCall(port_, "GET", "/api/v1/query?query=" + UrlEncode(query), "", "", 5s);
    if (!r) {
      if (error) *error = "no answer from prometheus";
      return nullptr;
    }
    nlohmann::json doc = nlohmann::json::parse(r->body, nullptr, false);
    if (r->status != 200 || doc.is_discarded() || doc.value("status", "") != "success") {
      if (error) *error = "HTTP " + std::to_string(r->status) + ": " + r->body;
      return nullptr;
    }
    return doc["data"]["result"];
  }

  // Polls `query` until it returns at least one series and `accept` likes the first one's value.
  std::optional<double> WaitForValue(const std::string& query, const std::function<bool(double)>& accept,
                                     std::chrono::milliseconds timeout) {
    std::optional<double> last;
    WaitUntil(
        [&] {
          nlohmann::json result = Query(query);
          if (!result.is_array() || result.empty()) return false;
          last = std::stod(result[0]["value"][1].get<std::string>());
          return accept(*last);
        },
        timeout);
    return last;
  }

  int port() const { return port_; }

 private:
  std::string dir_;
  int port_ = 0;
  ChildProcess process_;
};

}  // namespace eft::testing
