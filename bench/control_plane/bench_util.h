// What the cluster benchmarks (node_loss_bench, resize_bench) share: their flags (positive integers
// and --keep), millisecond formatting, the SUMMARY lines bench/run_control_plane.sh reads, and
// finding the build tree the harness starts programs from.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace eft::bench {

struct IntFlag {
  const char* name;  // "--runs"
  int* value;        // must end up > 0
};

// Parses `flags` and --keep; on anything else prints "<program>: bad or unknown argument" and the
// usage line to stderr and returns false.
inline bool ParseFlags(int argc, char** argv, const std::vector<IntFlag>& flags, bool* keep, const char* program,
                       const char* usage) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--keep") {
      *keep = true;
      continue;
    }
    auto f = std::find_if(flags.begin(), flags.end(), [&](const IntFlag& x) { return a == x.name; });
    if (f != flags.end() && i + 1 < argc && (*f->value = std::atoi(argv[++i])) > 0) continue;
    std::fprintf(stderr, "%s: bad or unknown argument '%s'\nusage: %s %s\n", program, a.c_str(), program, usage);
    return false;
  }
  return true;
}

inline double Ms(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// "   123" or "     -" (not reached), `width` characters.
inline std::string FormatMs(const std::optional<double>& v, int width = 7) {
  char buf[32];
  if (!v) {
    std::snprintf(buf, sizeof(buf), "%*s", width, "-");
  } else {
    std::snprintf(buf, sizeof(buf), "%*.0f", width, *v);
  }
  return buf;
}

// "SUMMARY <metric> n=N median=M min=A max=B" (ms), the line bench/run_control_plane.sh collects.
inline void PrintSummary(const std::string& metric, std::vector<double> v) {
  if (v.empty()) {
    std::printf("SUMMARY %s n=0\n", metric.c_str());
    return;
  }
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  std::printf("SUMMARY %-28s n=%zu median=%.0f min=%.0f max=%.0f\n", metric.c_str(), n, median, v.front(), v.back());
}

// The harness finds eft-controller, eft-worker, ... under $EFT_BUILD_DIR; a benchmark binary lives
// in <build>/bench/.
inline void DefaultBuildDirToThisBinarys() {
  if (std::getenv("EFT_BUILD_DIR")) return;
  std::error_code ec;
  const auto build = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().parent_path();
  ::setenv("EFT_BUILD_DIR", build.c_str(), 1);
}

}  // namespace eft::bench
