// Test helpers for Prometheus text exposition: find one sample's value in a scrape, list a family's
// samples, and run `promtool check metrics` (Debian package prometheus) on real output.
// Header-only; shared by the metrics unit tests and the end-to-end metrics tests.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace eft::testing {

using Labels = std::map<std::string, std::string>;

struct ExpositionSample {
  std::string name;
  Labels labels;
  double value = 0;
};

// Every sample line of `text` (comments skipped). Label values are unescaped (\\ \" \n).
inline std::vector<ExpositionSample> ParseExposition(const std::string& text) {
  std::vector<ExpositionSample> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    ExpositionSample s;
    size_t i = line.find_first_of("{ ");
    if (i == std::string::npos) continue;
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') break;
        std::string key = line.substr(i, eq - i), value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        s.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;  // '}'
    }
    std::string value = line.substr(line.find_first_not_of(' ', i));
    s.value = value == "+Inf" ? HUGE_VAL : value == "-Inf" ? -HUGE_VAL : std::strtod(value.c_str(), nullptr);
    out.push_back(std::move(s));
  }
  return out;
}

// The value of the sample with exactly this name and label set, if present.
inline std::optional<double> SampleValue(const std::string& text, const std::string& name, const Labels& labels = {}) {
  for (const auto& s : ParseExposition(text)) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return std::nullopt;
}

// Every sample named `name`.
inline std::vector<ExpositionSample> Samples(const std::string& text, const std::string& name) {
  std::vector<ExpositionSample> out;
  for (auto& s : ParseExposition(text)) {
    if (s.name == name) out.push_back(std::move(s));
  }
  return out;
}

// promtool on PATH, else "".
inline std::string FindPromtool() {
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

// `promtool check metrics < text`. Clean output: exit 0 and nothing printed.
inline PromtoolResult PromtoolCheckMetrics(const std::string& promtool, const std::string& text) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "eft-exposition-XXXXXX").string();
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

}  // namespace eft::testing
