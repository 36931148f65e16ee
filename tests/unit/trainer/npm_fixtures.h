// Locates the npm packages that reference comparisons need (tests/npm/package.json), installing
// them on first use through scripts/npm-fixtures.sh (cached under $EFT_NPM_CACHE or
// ~/.cache/eft/npm). Tests call EFT_REQUIRE_NPM_MODULES(dir) and are skipped, loudly, only when
// the npm registry cannot be reached and nothing is cached.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/wait.h>

namespace eft::testing {

struct NpmModules {
  std::string dir;      // .../node_modules, empty unless ok
  bool unreachable = false;
  std::string error;    // why it failed (not unreachable)
};

inline const NpmModules& GetNpmModules() {
  static const NpmModules modules = [] {
    NpmModules m;
    const char* src = std::getenv("EFT_SOURCE_DIR");
    std::string root = src ? src : EFT_SOURCE_DIR_DEFAULT;
    std::string cmd = "'" + root + "/scripts/npm-fixtures.sh'";
    FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) {
      m.error = "cannot run " + cmd;
      return m;
    }
    std::string out;
    std::array<char, 512> buf;
    while (fgets(buf.data(), buf.size(), pipe)) out += buf.data();
    int status = pclose(pipe);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    if (rc == 0) {
      m.dir = out;
    } else if (rc == 77) {
      m.unreachable = true;
    } else {
      m.error = cmd + " failed with exit code " + std::to_string(rc);
    }
    return m;
  }();
  return modules;
}

}  // namespace eft::testing

// Sets `dir` to the node_modules directory, or skips (registry unreachable) / fails the test.
#define EFT_REQUIRE_NPM_MODULES(out_dir)                                                           \
  do {                                                                                         \
    const auto& npm_ = ::eft::testing::GetNpmModules();                                        \
    if (npm_.unreachable) {                                                                    \
      fprintf(stderr,                                                                          \
              "\n*** SKIPPED: the npm registry is unreachable, so this comparison with the "   \
              "reference implementation cannot run ***\n\n");                                  \
      GTEST_SKIP() << "npm registry unreachable";                                              \
    }                                                                                          \
    ASSERT_TRUE(npm_.error.empty()) << npm_.error;                                             \
    out_dir = npm_.dir;                                                                          \
  } while (0)
