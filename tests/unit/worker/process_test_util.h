// Helpers for tests that run real processes: temp dirs, liveness checks that see zombies as dead.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "tests/unit/common/read_file_test_util.h"

namespace eft::worker::testing {

inline std::string MakeTempDir() {
  std::string base = (std::filesystem::temp_directory_path() / "eft-proc-XXXXXX").string();
  char* made = ::mkdtemp(base.data());
  return made != nullptr ? std::string(made) : std::string();
}

inline std::string ReadWholeFile(const std::string& path) { return file_testing::ReadFileOrEmpty(path); }

inline void WriteWholeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A zombie counts as dead: whoever reaps orphans here (if anyone) is not under the test's control.
inline bool IsDead(pid_t pid) {
  std::string stat = ReadWholeFile("/proc/" + std::to_string(pid) + "/stat");
  size_t close = stat.rfind(')');
  if (stat.empty() || close == std::string::npos || close + 2 >= stat.size()) return true;
  char state = stat[close + 2];
  return state == 'Z' || state == 'X';
}

inline bool WaitDead(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!IsDead(pid)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Teardown: SIGKILL a process the test started (directly or not) if it still runs.
inline void KillIfAlive(pid_t pid) {
  if (pid > 1 && !IsDead(pid)) ::kill(pid, SIGKILL);
}

}  // namespace eft::worker::testing
